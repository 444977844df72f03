"""libps from an installed tree: `make install` into a temp prefix, then the README's build
command for examples/libps_hello.c, run as written with PKG_CONFIG_PATH pointing at that prefix,
and the program run against a server that loads the installed ps.so. Also: DESTDIR stages the
same tree without changing the paths in libps.pc, and `make uninstall` removes every file.
"""

import os
import re
import shutil
import subprocess

import pytest

import psserver

ROOT = psserver.REPO_ROOT
EXAMPLE = os.path.join(ROOT, "examples", "libps_hello.c")
INSTALLED = ["lib/redis-ps/ps.so", "bin/ps-train", "bin/ps-gen-ctr", "bin/ps-relay", "lib/libps.a", "include/redis-ps/ps.h",
             "lib/pkgconfig/libps.pc"]


def make(*args):
    """Runs make in the repo root; returns its output, fails the test with it on error."""
    p = subprocess.run(["make", "--no-print-directory", "-C", ROOT, *args],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    assert p.returncode == 0, "make %s failed:\n%s" % (" ".join(args), p.stdout[-3000:])
    return p.stdout


def readme_section():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"^## Use libps from your program\n(.*?)(?=^## )", text, re.S | re.M)
    assert m, "README has no section 'Use libps from your program'"
    return m.group(1)


def test_readme_shows_the_shipped_example_verbatim():
    blocks = re.findall(r"^```c\n(.*?)^```", readme_section(), re.S | re.M)
    with open(EXAMPLE, encoding="utf-8") as f:
        assert blocks == [f.read()], "README's C example differs from examples/libps_hello.c"


def test_installed_libps_builds_the_example_with_pkg_config_and_talks_to_a_server(tmp_path):
    prefix = str(tmp_path / "prefix")
    make("install", "PREFIX=" + prefix)
    for rel in INSTALLED:
        assert os.path.isfile(os.path.join(prefix, rel)), rel

    # The build command exactly as README prints it, in a folder holding only the example.
    cmd = re.search(r"^(cc libps_hello\.c .*)$", readme_section(), re.M)
    assert cmd, "README has no 'cc libps_hello.c ...' command line"
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(EXAMPLE, str(work))
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(prefix, "lib", "pkgconfig"))
    p = subprocess.run(["bash", "-c", cmd.group(1)], cwd=str(work), env=env, text=True,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    assert p.returncode == 0, "%s\n%s" % (cmd.group(1), p.stdout)
    assert os.path.isfile(str(work / "a.out"))

    srv = psserver.RedisServer(module=os.path.join(prefix, "lib", "redis-ps", "ps.so"))
    try:
        for _ in range(2):      # a second run starts from scratch too
            run = subprocess.run([str(work / "a.out"), srv.addr], stdout=subprocess.PIPE,
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


def test_destdir_stages_the_tree_and_libps_pc_names_the_final_prefix(tmp_path):
    stage = str(tmp_path / "stage")
    make("install", "PREFIX=/opt/redis-ps", "DESTDIR=" + stage)
    for rel in INSTALLED:
        assert os.path.isfile(os.path.join(stage, "opt/redis-ps", rel)), rel
    with open(os.path.join(stage, "opt/redis-ps/lib/pkgconfig/libps.pc")) as f:
        pc = f.read()
    assert "prefix=/opt/redis-ps\n" in pc and stage not in pc
    assert "Requires.private: hiredis\n" in pc
    make("uninstall", "PREFIX=/opt/redis-ps", "DESTDIR=" + stage)
    assert not any(fs for _, _, fs in os.walk(stage))


@pytest.mark.parametrize("static", [True, False])
def test_pkg_config_static_is_what_brings_in_hiredis(tmp_path, static):
    """libps.a is a static archive: only `--static` lists its private dependency hiredis, which
    is why README's command uses it."""
    prefix = str(tmp_path / "prefix")
    make("install", "PREFIX=" + prefix)
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(prefix, "lib", "pkgconfig"))
    args = ["pkg-config", "--libs", "libps"] + (["--static"] if static else [])
    out = subprocess.run(args, env=env, stdout=subprocess.PIPE, text=True, check=True).stdout
    assert ("-lhiredis" in out.split()) == static, out
