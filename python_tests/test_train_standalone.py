"""ps-train end to end against one standalone redis-server with the module: a short training
run reaches a stated accuracy, every task is acked exactly once, a killed worker's shards are
claimed and redone by the other worker, snapshots evaluate, and the command line fails with the
documented exit codes (0 ok, 1 runtime failure, 2 usage)."""

import os
import re
import signal
import struct
import subprocess
import time

import pytest

import psserver
from faultlib import kill_holding_a_task
from pshelpers import PS_TRAIN, ps_train  # noqa: F401 (a fixture; test_train_cluster.py imports it from here)
from pshelpers import run_ps_train as run


def result_line(out):
    """The RESULT key=value pairs of a run as a dict of strings."""
    m = re.search(r"^RESULT (.*)$", out, re.M)
    assert m, "no RESULT line in:\n" + out
    return dict(kv.split("=", 1) for kv in m.group(1).split())


def job_state(r, job):
    """(config, pending count, done hash, progress hash) of 'job', decoded."""
    dec = lambda h: {k.decode(): v.decode() for k, v in h.items()}
    cfg = dec(r.hgetall("psjob:{%s}:config" % job))
    pending = r.xpending("psjob:{%s}:tasks" % job, "workers")["pending"]
    done = dec(r.hgetall("psjob:{%s}:done" % job))
    progress = dec(r.hgetall("psjob:{%s}:progress" % job))
    return cfg, pending, done, progress


def expected_pushes(cfg):
    n, shard, batch = int(cfg["train_n"]), int(cfg["shard_size"]), int(cfg["batch"])
    per_epoch = sum((min(shard, n - s) + batch - 1) // batch for s in range(0, n, shard))
    return per_epoch * int(cfg["epochs"])


def tensor_versions(r, job):
    """{key: version} of every tensor key of 'job' on server client 'r'."""
    out = {}
    for k in r.keys("%s:*" % job):
        info = r.execute_command("PS.INFO", k)
        d = dict(zip(info[::2], info[1::2]))
        out[k.decode()] = int(d[b"version"])
    return out


def test_run_with_two_workers_reaches_080_and_acks_every_task_once(ps_train, server):
    r = server.client()
    # 2 epochs: one epoch of Adam at lr 0.001 lands at 0.78-0.84 (measured), too close to
    # the bar; two land at 0.84-0.86.
    p = run(["run", "--addr", server.addr, "--job", "sa", "--workers", 2, "--epochs", 2,
             "--optim", "adam", "--lr", 0.001, "--task-samples", 2000, "--progress", "line",
             "--interval-ms", 500, "--min-acc", 0.80])
    res = result_line(p.out)
    assert float(res["test_acc"]) >= 0.80, p.out
    assert int(res["samples"]) == 120000
    assert "samples/s" in p.out and "staleness" in p.out     # per-interval progress lines
    cfg, pending, done, progress = job_state(r, "sa")
    assert cfg["state"] == "ready" and int(cfg["tasks"]) == 60
    assert pending == 0
    assert len(done) == 60 and set(done.values()) == {"1"}
    assert sum(int(v) for k, v in progress.items() if k.endswith(":samples")) == 120000
    # Every push of every task applied once: each tensor's version is the number of batches.
    versions = tensor_versions(r, "sa")
    assert set(versions) == {"sa:W0:0", "sa:b0:0", "sa:W1:0", "sa:b1:0"}
    assert set(versions.values()) == {expected_pushes(cfg)}


def test_killed_worker_shards_are_claimed_and_acked_exactly_once(ps_train, server):
    r = server.client()
    run(["init", "--addr", server.addr, "--job", "kill", "--epochs", 1, "--task-samples", 1000,
         "--optim", "adam", "--lr", 0.001])
    common = ["work", "--addr", server.addr, "--job", "kill", "--lease-ms", 1500,
              "--progress", "line", "--interval-ms", 200]
    a = subprocess.Popen([PS_TRAIN] + [str(x) for x in common + ["--name", "A"]],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # Let A finish a few tasks and be in the middle of another, then kill it.
        psserver.wait_until(lambda: int(r.hget("psjob:{kill}:progress", "w:A:tasks") or 0) >= 3,
                            timeout=30, interval=0.01, what="worker A acking 3 tasks")
        kill_holding_a_task(a.pid, r, "kill", "A")
        a.wait(timeout=10)
        pend = r.xpending_range("psjob:{kill}:tasks", "workers", "-", "+", 10)
        assert [e["consumer"] for e in pend] == [b"A"], pend   # A died holding one task
        dead_task = pend[0]["message_id"].decode()
        t0 = time.monotonic()
        b = run(common + ["--name", "B"], timeout=120)
        assert "claimed task %s" % dead_task in b.out, b.out
        assert time.monotonic() - t0 >= 1.0                    # only after the lease ran out
    finally:
        if a.poll() is None:
            a.kill()
            a.wait()
    cfg, pending, done, progress = job_state(r, "kill")
    assert pending == 0
    assert len(done) == 60 and set(done.values()) == {"1"}, done
    assert dead_task in done
    assert int(progress["w:A:tasks"]) + int(progress["w:B:tasks"]) == 60
    st = run(["status", "--addr", server.addr, "--job", "kill"])
    assert "60 total, 60 acked, 0 pending" in st.out, st.out


def test_eval_at_snapshot_sees_the_snapshot_not_later_training(ps_train, server):
    run(["run", "--addr", server.addr, "--job", "snap", "--workers", 1, "--epochs", 1,
         "--limit", 6000, "--progress", "none"])
    run(["snapshot", "--addr", server.addr, "--job", "snap", "--at", "s1"])
    before = run(["eval", "--addr", server.addr, "--job", "snap", "--at", "s1"]).out
    v_snap = int(re.search(r"model version (\d+)", before).group(1))
    assert v_snap == 96                                  # 6 shards of 1000 -> 6 * 16 batches
    # Change W0 after the snapshot: a large constant gradient wrecks the live model.
    n = 128 * 784
    server.client().execute_command("PS.PUSHGRAD", "snap:W0:0", struct.pack("<%df" % n, *([5.0] * n)))
    now = run(["eval", "--addr", server.addr, "--job", "snap"]).out
    again = run(["eval", "--addr", server.addr, "--job", "snap", "--at", "s1"]).out
    acc = lambda out: float(re.search(r"test_acc=([0-9.]+)", out).group(1))
    assert "model version %d" % (v_snap + 1) in now
    assert acc(now) < acc(before) - 0.2
    assert "model version %d" % v_snap in again and acc(again) == acc(before)
    missing = run(["eval", "--addr", server.addr, "--job", "snap", "--at", "nope"], check=False)
    assert missing.returncode == 1 and "--at nope" in missing.out, missing.out


def test_init_twice_keeps_the_job_and_reset_recreates_it(ps_train, server):
    r = server.client()
    args = ["init", "--addr", server.addr, "--job", "twice", "--limit", 3000, "--task-samples", 1000]
    run(args)
    run(args)
    assert r.xlen("psjob:{twice}:tasks") == 3
    again = run(args + ["--epochs", 5], check=False)     # other settings: refused
    assert again.returncode == 2 and "--epochs 5 (job: 1)" in again.out, again.out
    assert r.xlen("psjob:{twice}:tasks") == 3
    run(args + ["--reset", "--epochs", 2])
    assert r.xlen("psjob:{twice}:tasks") == 6


def test_slices_split_the_samples_into_disjoint_parts(ps_train, server):
    """--slice K/N: each site's job trains its own contiguous part; the N parts cover every
    sample once (after --limit), and a job's slice is part of its settings."""
    r = server.client()
    covered = []
    for k in (1, 2, 3):
        job = "slice%d" % k
        out = run(["init", "--addr", server.addr, "--job", job, "--limit", 3001, "--slice",
                   "%d/3" % k, "--task-samples", 400]).out
        cfg, _, _, _ = job_state(r, job)
        first, n = int(cfg["train_off"]), int(cfg["train_n"])
        assert (first, n) == ((k - 1) * 3001 // 3, k * 3001 // 3 - (k - 1) * 3001 // 3)
        assert "(slice %d/3)" % k in out, out
        spans = sorted((int(f[b"start"]), int(f[b"count"]))
                       for _, f in r.xrange("psjob:{%s}:tasks" % job))
        assert spans[0][0] == first and sum(c for _, c in spans) == n
        for (s0, c0), (s1, _) in zip(spans, spans[1:]):
            assert s0 + c0 == s1
        covered += list(range(first, first + n))
    assert covered == list(range(3001))
    again = run(["init", "--addr", server.addr, "--job", "slice1", "--limit", 3001, "--slice", "2/3",
                 "--task-samples", 400], check=False)
    assert again.returncode == 2 and "--slice 2/3 (job: 1/3)" in again.out, again.out
    for bad in ("0/3", "4/3", "1/0", "1", "1/2x", "a/b"):
        p = run(["init", "--addr", server.addr, "--job", "badslice", "--slice", bad], check=False)
        assert p.returncode == 2 and "--slice %s: want K/N" % bad in p.out, p.out
    assert not r.exists("psjob:{badslice}:config")
    # A worker trains exactly its slice.
    run(["work", "--addr", server.addr, "--job", "slice2", "--progress", "none"])
    _, _, _, progress = job_state(r, "slice2")
    assert sum(int(v) for k, v in progress.items() if k.endswith(":samples")) == 1000


@pytest.mark.parametrize("cmd", ["init", "work", "eval", "run", "status", "snapshot"])
def test_every_subcommand_has_help(ps_train, cmd):
    p = run([cmd, "--help"])
    assert p.out.startswith("usage: ps-train %s" % cmd) and "--addr" in p.out


@pytest.mark.parametrize("args,needle", [
    (["init", "--job", "j"], "--addr is required"),
    (["init", "--addr", "127.0.0.1:1"], "--job is required"),
    (["init", "--addr", "x:1", "--job", "a{b}"], "--job: 'a{b}'"),
    (["init", "--addr", "x:1", "--job", "j", "--lr", "abc"], "--lr: 'abc' is not a valid number"),
    (["init", "--addr", "x:1", "--job", "j", "--epochs", "0"], "--epochs: 0 is out of range"),
    (["init", "--addr", "x:1", "--job", "j", "--layers", "784,x"], "--layers:"),
    (["init", "--addr", "x:1", "--job", "j", "--optim", "lbfgs"], "--optim: unknown optimizer"),
    (["work", "--addr", "x:1", "--job", "j", "--layers", "1,2"], "--layers does not apply to work"),
    (["eval", "--addr", "x:1", "--job", "j", "--bogus"], "unknown flag '--bogus'"),
    (["work", "--addr", "x:1", "--job", "j", "--lease-ms"], "--lease-ms needs a value"),
    (["frobnicate"], "unknown command 'frobnicate'"),
])
def test_usage_errors_name_the_flag_and_exit_2(ps_train, args, needle):
    p = run(args, check=False)
    assert p.returncode == 2, p.out
    assert needle in p.out, p.out


def test_runtime_failures_exit_1(ps_train, server):
    p = run(["work", "--addr", server.addr, "--job", "nosuchjob"], check=False)
    assert p.returncode == 1 and "no such job" in p.out, p.out
    port = psserver.free_port()
    p = run(["status", "--addr", "127.0.0.1:%d" % port, "--job", "j"], check=False)
    assert p.returncode == 1 and "--addr" in p.out, p.out
    p = run(["init", "--addr", server.addr, "--job", "wide", "--layers", "100,10"], check=False)
    assert p.returncode == 2 and "784 features" in p.out, p.out
    # The failed init left nothing behind: a correct init of the same job works.
    run(["init", "--addr", server.addr, "--job", "wide", "--limit", 1000])
