"""libps from an installed tree: `make install` into a temp prefix, then the documented build
command for examples/libps_hello.c (docs/reference.md "Use libps from your program"), run as
written with PKG_CONFIG_PATH pointing at that prefix, and the program run against a server
that loads the installed ps.so. The plain command links the shared libps (SONAME libps.so.0,
only the psXxx API exported); the second command names libps.a and links it statically. Also: DESTDIR stages the same tree
without changing the paths in libps.pc, and `make uninstall` removes every file.
"""

import os
import re
import shutil
import subprocess

import pytest

import psserver

ROOT = psserver.REPO_ROOT
EXAMPLE = os.path.join(ROOT, "examples", "libps_hello.c")
INSTALLED = ["lib/redis-ps/ps.so", "bin/ps-train", "bin/ps-gen-ctr", "bin/ps-relay", "bin/ps-export", "lib/libps.a",
             "lib/libps.so.0.1.0", "lib/libps.so.0", "lib/libps.so", "include/redis-ps/ps.h",
             "include/redis-ps/ps_topology.h", "include/redis-ps/ps_serve.h",
             "lib/pkgconfig/libps.pc"]
DOC = os.path.join(ROOT, "docs", "reference.md")


def make(*args):
    """Runs make in the repo root; returns its output, fails the test with it on error."""
    p = subprocess.run(["make", "--no-print-directory", "-C", ROOT, *args],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    assert p.returncode == 0, "make %s failed:\n%s" % (" ".join(args), p.stdout[-3000:])
    return p.stdout


def readme_section():
    """The section of docs/reference.md that shows how to build against libps."""
    with open(DOC, encoding="utf-8") as f:
        text = f.read() + "\n## end\n"
    m = re.search(r"^## Use libps from your program\n(.*?)(?=^## )", text, re.S | re.M)
    assert m, "docs/reference.md has no section 'Use libps from your program'"
    return m.group(1)


def test_readme_shows_the_shipped_example_verbatim():
    blocks = re.findall(r"^```c\n(.*?)^```", readme_section(), re.S | re.M)
    with open(EXAMPLE, encoding="utf-8") as f:
        assert blocks == [f.read()], "the doc's C example differs from examples/libps_hello.c"


def build_commands():
    """The doc's `cc libps_hello.c ...` lines: the shared build first, then the static one."""
    cmds = re.findall(r"^(cc libps_hello\.c .*?)(?:\s+#.*)?$", readme_section(), re.M)
    assert len(cmds) == 2 and "libps.a" not in cmds[0] and "libps.a" in cmds[1], cmds
    return cmds


@pytest.mark.parametrize("static", [False, True], ids=["shared", "static"])
def test_installed_libps_builds_the_example_with_pkg_config_and_talks_to_a_server(tmp_path, static):
    prefix = str(tmp_path / "prefix")
    make("install", "PREFIX=" + prefix)
    for rel in INSTALLED:
        assert os.path.isfile(os.path.join(prefix, rel)), rel
    assert os.readlink(os.path.join(prefix, "lib", "libps.so")) == "libps.so.0"
    assert os.readlink(os.path.join(prefix, "lib", "libps.so.0")) == "libps.so.0.1.0"

    # The build command exactly as the doc prints it, in a folder holding only the example.
    cmd = build_commands()[1 if static else 0]
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(EXAMPLE, str(work))
    lib = os.path.join(prefix, "lib")
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(lib, "pkgconfig"))
    p = subprocess.run(["bash", "-c", cmd], cwd=str(work), env=env, text=True,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    assert p.returncode == 0, "%s\n%s" % (cmd, p.stdout)
    aout = str(work / "a.out")
    assert os.path.isfile(aout)
    needed = subprocess.run(["readelf", "-d", aout], stdout=subprocess.PIPE, text=True,
                            check=True).stdout
    assert ("[libps.so.0]" in needed) == (not static), needed

    srv = psserver.RedisServer(module=os.path.join(prefix, "lib", "redis-ps", "ps.so"))
    try:
        # The shared build finds libps through LD_LIBRARY_PATH (the doc says so for a
        # prefix outside the loader's path); ldd names the installed copy.
        run_env = dict(os.environ, LD_LIBRARY_PATH=lib)
        if not static:
            ldd = subprocess.run(["ldd", aout], env=run_env, stdout=subprocess.PIPE, text=True,
                                 check=True).stdout
            assert os.path.join(lib, "libps.so.0") in ldd, ldd
        for _ in range(2):      # a second run starts from scratch too
            run = subprocess.run([aout, srv.addr], stdout=subprocess.PIPE, env=run_env,
                                 stderr=subprocess.STDOUT, text=True, timeout=60)
            assert run.returncode == 0, run.stdout
            assert run.stdout == "w = 0.4 0.3 0.2 0.1\n"
        with srv.raw() as c:
            assert c.call("PS.PULL", "hello:w:0", "FORMAT", "VALUES")[0] == 1
    finally:
        srv.cleanup()

    make("uninstall", "PREFIX=" + prefix)
    left = [os.path.join(d, f)[len(prefix):] for d, _, fs in os.walk(prefix) for f in fs]
    assert left == []


def test_shared_libps_has_a_soname_and_exports_only_the_public_api():
    make("all")
    so = os.path.join(ROOT, "build", "libps.so.0.1.0")
    dyn = subprocess.run(["readelf", "-d", so], stdout=subprocess.PIPE, text=True,
                         check=True).stdout
    assert "Library soname: [libps.so.0]" in dyn, dyn
    syms = subprocess.run(["nm", "-D", "--defined-only", so], stdout=subprocess.PIPE, text=True,
                          check=True).stdout.split()
    names = [w for w in syms if not re.fullmatch(r"[0-9a-f]{8,}|[A-Za-z]", w)]
    header = ""
    for h in ("ps.h", "ps_topology.h", "ps_serve.h"):     # ps.h includes the other two
        with open(os.path.join(ROOT, "libps", "include", "redis-ps", h)) as f:
            header += f.read()
    declared = set(re.findall(r"\b(ps[A-Z]\w*)\s*\(", header))
    assert names and all(re.fullmatch(r"ps[A-Z]\w*", n) for n in names), names
    missing = declared - set(names) - {"psEventFn"}
    assert not missing, "declared in ps.h, not exported: %s" % sorted(missing)


def test_destdir_stages_the_tree_and_libps_pc_names_the_final_prefix(tmp_path):
    stage = str(tmp_path / "stage")
    make("install", "PREFIX=/opt/redis-ps", "DESTDIR=" + stage)
    for rel in INSTALLED:
        assert os.path.isfile(os.path.join(stage, "opt/redis-ps", rel)), rel
    with open(os.path.join(stage, "opt/redis-ps/lib/pkgconfig/libps.pc")) as f:
        pc = f.read()
    assert "prefix=/opt/redis-ps\n" in pc and stage not in pc
    assert "Requires: hiredis\n" in pc
    make("uninstall", "PREFIX=/opt/redis-ps", "DESTDIR=" + stage)
    assert not any(fs for _, _, fs in os.walk(stage))


@pytest.mark.parametrize("static", [True, False])
def test_pkg_config_lists_hiredis_with_and_without_static_and_libm_only_with_it(tmp_path, static):
    """ps.h includes hiredis.h and hands out redisReply, so hiredis is a public Requires (its
    -lhiredis and cflags come either way); libm is libps.a's private need."""
    prefix = str(tmp_path / "prefix")
    make("install", "PREFIX=" + prefix)
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(prefix, "lib", "pkgconfig"))
    args = ["pkg-config", "--libs", "libps"] + (["--static"] if static else [])
    out = subprocess.run(args, env=env, stdout=subprocess.PIPE, text=True, check=True).stdout
    assert "-lps" in out.split() and "-lhiredis" in out.split(), out
    assert ("-lm" in out.split()) == static, out
