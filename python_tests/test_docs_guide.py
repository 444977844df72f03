"""README.md as a guide, and what the docs promise about the tools, each checked where it can
fail:
- README stays short (a guide, the reference lives in docs/), its first job by hand and its
  sparse example run as written (```sh blocks) and print what README shows;
- every `make TARGET`, every ps-train flag and every repository file README.md and docs/*.md
  name exists;
- the README's redis-server command leaves no dump.rdb in the checkout;
- `make help`, `ps-train --version`, the server line of ps-train (address, run_id, cluster
  node count), `status` on finished and sparse jobs, the exit code of a missing --train;
- `make deps` failing stops make; `make plots` leaves the tracked files alone."""

import glob
import os
import re
import shutil
import subprocess
import time

import pytest

import docsrun
import psserver
from pshelpers import require_ps_train, run_gen_ctr, run_ps_train

ROOT = docsrun.ROOT
README = os.path.join(ROOT, "README.md")
DOCS = [README] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
PS_TRAIN = os.path.join(docsrun.BUILD, "ps-train")
PS_GEN_CTR = os.path.join(docsrun.BUILD, "ps-gen-ctr")


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def code_spans(text):
    """Text of fenced blocks and `inline code` spans."""
    fenced = re.findall(r"^```[a-z]*\n(.*?)^```", text, re.S | re.M)
    rest = re.sub(r"^```[a-z]*\n.*?^```", "", text, flags=re.S | re.M)
    return fenced + re.findall(r"`([^`\n]+)`", rest)


def make_targets():
    out = subprocess.run(["make", "-C", ROOT, "-pRrq", "-f", "Makefile", ":"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
    return set(re.findall(r"^([a-zA-Z][\w-]*):", out, re.M))


def test_readme_is_a_short_guide():
    text = read(README)
    assert len(text.split("\n")) <= 260, len(text.split("\n"))
    for heading in ("Quick start", "A first job by hand", "Topologies", "Model kinds",
                    "Layout"):
        assert re.search(r"^##+ %s" % heading, text, re.M), heading
    assert "/work/" not in text and "/home/" not in text      # no machine paths


def test_documented_make_targets_exist():
    targets = make_targets()
    missing = set()
    for path in DOCS:
        for span in code_spans(read(path)):
            for line in span.split("\n"):
                words = line.split()
                for i, w in enumerate(words):
                    if w != "make":
                        continue
                    for word in words[i + 1:]:          # targets up to the first other word
                        if "=" in word or word.startswith("-"):
                            continue
                        if not re.fullmatch(r"[a-z][\w-]*", word):
                            break
                        if word not in targets:
                            missing.add("%s: make %s" % (os.path.basename(path), word))
    assert not missing, sorted(missing)


def ps_train_flags():
    """Every flag some ps-train subcommand (or ps-gen-ctr) accepts, from their --help."""
    flags = {"--help", "--version"}
    for cmd in ([PS_TRAIN, sub, "--help"] for sub in ("init", "work", "eval", "run", "status",
                                                       "snapshot", "stream")):
        out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True).stdout
        flags |= set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", out))
    return flags


def ps_gen_ctr_flags():
    out = subprocess.run([PS_GEN_CTR, "--help"], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True).stdout
    return {"--help"} | set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", out))


def test_documented_ps_train_flags_exist():
    require_ps_train()
    flags, gen_flags = ps_train_flags(), ps_gen_ctr_flags()
    missing = set()
    for path in DOCS:
        for span in code_spans(read(path)):
            for line in re.split(r"\n(?![ \t])", span.replace("\\\n", " ")):
                if "ps-relay" in line:
                    continue
                known = ((flags if "ps-train" in line else set()) |
                         (gen_flags if "ps-gen-ctr" in line else set()))
                if not known:
                    continue
                for f in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", line):
                    if f not in known:
                        missing.add("%s: %s" % (os.path.basename(path), f))
    assert not missing, sorted(missing)


REPO_DIRS = ("docs/", "scripts/", "examples/", "python_tests/", "bench/", "module/", "libps/",
             "ml/", "train/", "tools/", "relay/", "common/", "fuzz/", "tests/", "python/", ".ci/")


def test_documented_files_exist():
    missing = set()
    for path in DOCS:
        text = read(path)
        base = os.path.dirname(path)
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if re.match(r"[a-z]+://", target):
                continue
            if not os.path.exists(os.path.normpath(os.path.join(base, target))):
                missing.add("%s: link %s" % (os.path.basename(path), target))
        for span in code_spans(text):
            for p in re.findall(r"(?<![\w./-])((?:%s)[\w./-]*\.(?:md|sh|py|c|h|lua|txt))\b"
                                % "|".join(re.escape(d) for d in REPO_DIRS), span):
                if not os.path.exists(os.path.join(ROOT, p)):
                    missing.add("%s: %s" % (os.path.basename(path), p))
    assert not missing, sorted(missing)


def test_readme_first_job_and_sparse_example_run_and_print_what_readme_shows(tmp_path):
    require_ps_train()
    port = docsrun.free_port_range(1)
    work = os.path.join(docsrun.BUILD, "first-job")
    shutil.rmtree(work, ignore_errors=True)
    try:
        rc, out = docsrun.run_script(docsrun.script_of(README), {"PORT": str(port)}, ROOT, 600,
                                     os.path.join(work, "redis.pid"), str(tmp_path / "run.log"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    assert rc == 0, out[-4000:]
    text = read(README)
    # The outputs README shows are this run's lines, with the numbers that vary masked.
    blocks = re.findall(r"^```text\n(.*?)^```", text, re.S | re.M)
    mask = lambda s: re.sub(r"run_id [0-9a-f]{40}|127\.0\.0\.1:\d+|port \d+|\d+(\.\d+)?", "#", s)
    got = {mask(l) for l in out.split("\n")}
    for block in blocks[1:]:                     # the first is make demo's output
        for line in block.strip("\n").split("\n"):
            assert mask(line) in got, "README line not printed by the run: %r" % line
    # The sparse model comes within 0.01 of the planted truth.
    truth = float(re.search(r"^truth_test_auc=([0-9.]+)$", out, re.M).group(1))
    auc = float(re.search(r"job ctr: test_auc=([0-9.]+)", out).group(1))
    assert auc > truth - 0.015, (auc, truth)


def test_readme_server_command_leaves_no_dump_rdb_in_the_checkout(tmp_path):
    cmd = re.search(r'^(redis-server --loadmodule "\$PWD/build/ps\.so".*)$', read(README), re.M)
    assert cmd, "README has no 'redis-server --loadmodule \"$PWD/build/ps.so\" ...' line"
    port = docsrun.free_port_range(1)
    before = set(os.listdir(ROOT))
    p = subprocess.Popen(["bash", "-c", "exec %s --port %d" % (cmd.group(1), port)], cwd=ROOT,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        c = None
        for _ in range(100):
            try:
                c = psserver.RawClient(port)
                break
            except OSError:
                time.sleep(0.1)
        assert c is not None, "the README's redis-server did not start"
        c.call("PS.CREATE", "dumptest", "SHAPE", "2")
        try:
            c.call("SHUTDOWN")                              # saves: the default save points
        except (ConnectionError, OSError):
            pass                                            # the server closed the connection
        p.wait(30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        try:
            os.unlink(os.path.join(docsrun.BUILD, "dump.rdb"))
        except OSError:
            pass
    assert set(os.listdir(ROOT)) - before == set()


def test_make_help_lists_the_targets_with_a_note_each():
    out = subprocess.run(["make", "--no-print-directory", "-C", ROOT, "help"],
                         stdout=subprocess.PIPE, text=True, check=True).stdout
    listed = dict(re.findall(r"^  ([a-z][\w-]*) +(\S.*)$", out, re.M))
    for t in ("all", "test", "demo", "demo-cluster", "demo-sparse", "demo-tree", "deps",
              "install", "plots", "bench", "check-asan", "valgrind", "fuzz-short", "soak"):
        assert t in listed, (t, out)
    assert set(listed) <= make_targets()


def test_ps_train_version_is_the_release_in_the_makefile():
    require_ps_train()
    version = re.search(r"^LIBPS_VERSION = (\S+)$", read(os.path.join(ROOT, "Makefile")),
                        re.M).group(1)
    out = subprocess.run([PS_TRAIN, "--version"], stdout=subprocess.PIPE, text=True,
                         check=True).stdout
    assert re.fullmatch(r"ps-train \(redis-ps\) %s, hiredis \d+\.\d+\.\d+\n" % re.escape(version),
                        out), out


def test_ps_train_names_the_server_it_trains_on_and_status_says_finished(server):
    require_ps_train()
    run_id = server.client().info("server")["run_id"]
    args = ["--addr", server.addr, "--job", "idj"]
    p = run_ps_train(["init"] + args + ["--limit", 1000, "--layers", "784,8,10"])
    assert ("ps-train init: server %s: standalone; answering server on port %d: redis "
            % (server.addr, server.port)) in p.out and "run_id %s" % run_id in p.out, p.out
    p = run_ps_train(["status"] + args)
    assert p.out.startswith("ps-train status: server %s: standalone" % server.addr), p.out
    assert "state ready (no task taken yet)" in p.out
    p = run_ps_train(["work"] + args + ["--progress", "none"])
    assert p.out.count("run_id %s" % run_id) == 1, p.out            # once per process
    p = run_ps_train(["status"] + args)
    assert "state finished (every task acked)" in p.out, p.out


def test_ps_train_on_a_cluster_says_how_many_nodes(module_path):
    require_ps_train()
    cl = psserver.RedisClusterHelper(masters=3, module=module_path)
    try:
        seeds = ",".join(n.addr for n in cl.masters())
        p = run_ps_train(["init", "--addr", seeds, "--job", "cj", "--limit", 1000,
                          "--layers", "784,8,10"])
        assert re.search(r"^ps-train init: server %s: cluster of 3 nodes \(3 masters\); "
                         r"answering node on port \d+: redis \S+, run_id [0-9a-f]{40}$"
                         % re.escape(seeds), p.out, re.M), p.out
    finally:
        cl.cleanup()


def test_status_of_a_sparse_job_describes_the_sparse_model(server, tmp_path):
    require_ps_train()
    pre = str(tmp_path / "ctr")
    run_gen_ctr(["--out", pre, "--samples", 2000, "--fields", 4, "--vocab", 50])
    args = ["--addr", server.addr, "--job", "sj"]
    run_ps_train(["init"] + args + ["--model", "lr", "--train", pre + ".train.libsvm"])
    p = run_ps_train(["status"] + args)
    first = [l for l in p.out.split("\n") if l.startswith("job sj:")][0]
    assert "sparse model lr" in first and "layers" not in first and "shards of" not in first, first


def test_a_missing_train_file_is_a_usage_error_like_a_missing_test_file(server, tmp_path):
    require_ps_train()
    pre = str(tmp_path / "ctr")
    run_gen_ctr(["--out", pre, "--samples", 500, "--fields", 4, "--vocab", 50])
    base = ["run", "--addr", server.addr, "--model", "lr"]
    p1 = run_ps_train(base + ["--job", "a", "--train", str(tmp_path / "nope"), "--test",
                              pre + ".test.libsvm"], check=False)
    p2 = run_ps_train(base + ["--job", "b", "--train", pre + ".train.libsvm", "--test",
                              str(tmp_path / "nope")], check=False)
    assert p1.returncode == p2.returncode == 2, (p1.out, p2.out)


def test_a_failing_make_deps_stops_make(tmp_path):
    """With a package missing (a fake dpkg) and apt-get failing (as when another apt holds
    the lock), check-deps fails and make goes no further."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "dpkg").write_text("#!/bin/sh\n[ \"$2\" = gnuplot-nox ] && exit 1\nexit 0\n")
    (fake / "apt-get").write_text("#!/bin/sh\necho 'E: Could not get lock' >&2\nexit 100\n")
    (fake / "id").write_text("#!/bin/sh\necho 0\n")
    for f in fake.iterdir():
        f.chmod(0o755)
    env = dict(os.environ, PATH="%s:%s" % (fake, os.environ["PATH"]))
    p = subprocess.run(["make", "--no-print-directory", "-C", ROOT, "check-deps", "help"],
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert p.returncode != 0, p.stdout
    assert "apt-get failed" in p.stdout and "make TARGET" not in p.stdout, p.stdout


@pytest.mark.slow
def test_make_plots_writes_under_build_and_leaves_tracked_files_alone(tmp_path):
    if shutil.which("gnuplot") is None or shutil.which("git") is None:
        pytest.fail("gnuplot and git are needed (make deps)", pytrace=False)
    if subprocess.run(["git", "-C", ROOT, "rev-parse"], stderr=subprocess.DEVNULL).returncode:
        pytest.skip("not a git checkout")
    status = lambda: subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "docs"],
                                    stdout=subprocess.PIPE, text=True).stdout
    before = status()
    # Where the files go does not depend on how long each run trains: 1 epoch of 6000
    # samples, one run of each PyTorch bench variant (the defaults took 97 s of CI here).
    env = dict(os.environ, PLOTS_EPOCHS="1", PLOTS_LIMIT="6000", PLOTS_BENCH_REPEAT="1")
    env.pop("PLOTS_DIR", None)
    p = subprocess.run([os.path.join(ROOT, "scripts", "plots.sh")], cwd=ROOT, env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:]
    assert os.path.exists(os.path.join(docsrun.BUILD, "plots", "train-ps-train.png"))
    assert os.path.exists(os.path.join(docsrun.BUILD, "plots", "throughput.png"))
    assert status() == before
    out = subprocess.run(["make", "-n", "--no-print-directory", "-C", ROOT, "plots"],
                         stdout=subprocess.PIPE, text=True).stdout
    assert "PLOTS_DIR=build/plots" in out, out


def test_a_lost_state_warning_is_printed_once_per_key(server):
    """A partition key deleted under a training worker is a lost-state event: the worker
    names the key once (libps reports every request that meets the loss) and stops."""
    require_ps_train()
    args = ["--addr", server.addr, "--job", "lsj"]
    run_ps_train(["init"] + args + ["--layers", "784,16,10", "--epochs", 20, "--limit", 4000])
    p = subprocess.Popen([PS_TRAIN, "work"] + args + ["--progress", "none", "--name", "w1"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        c = server.client()
        deadline = time.time() + 60
        while time.time() < deadline:
            inf = c.execute_command("PS.INFO", "lsj:b1:0")
            if int(dict(zip(inf[0::2], inf[1::2]))[b"version"]) > 20:
                break
            time.sleep(0.05)
        c.delete("lsj:b1:0")
        out, _ = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 1, out
    warnings = [l for l in out.split("\n") if "WARNING: lost state: lsj:b1:0" in l]
    assert len(warnings) == 1, out
