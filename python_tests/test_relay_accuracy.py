"""A relay outage costs its workers time, not accuracy (issue 27): an async tree (one
upstream server; a relay with --every-pushes 2 in front of a local server; 2 free-running
ps-train workers on the Fashion-MNIST MLP), the relay SIGKILLed 3 times at random points
and restarted after ~2 s. While it is down the local ACCUM tensors fill up to MAXBACKLOG
and refuse further pushes (BACKLOG), which libps waits on, so the workers pause instead of
training on a frozen model; after the restart the backlog goes upstream in parts of at most
MAXROUND gradients. The final test accuracy must stay within 1 point of a fault-free run of
the same configuration, every local push must reach the upstream exactly once (the local
tensors' persisted counters: gradients forwarded = pushes summed; every upstream push
carried at most MAXROUND gradients; upstream versions = upstream pushes acknowledged), and
the workers and the relay must announce the backpressure.

Run-to-run spread of fault-free runs (measured with `python3 test_relay_accuracy.py sgd 3`
on 2 loaded cores) is in docs/design.md "Tree topology: outages"; the 1-point bound is
several times that spread.

    python3 test_relay_accuracy.py sgd|adam RUNS [--faults]   # prints the accuracies
"""

import json
import os
import random
import re
import signal
import subprocess
import sys
import time

import pytest

import psserver
from pshelpers import PS_TRAIN, info, require_ps_train
from test_relay import RELAY

# demo-tree's job (scripts/demo-tree.sh): the MLP, batch 64; SGD lr 0.02 over 3 epochs, or
# Adam lr 0.001 (the configuration) over 4 epochs (a slow test; kept short). Adam
# takes one step per upstream push whatever it carries, so its progress follows the number
# of upstream pushes, which with the default --max-round (2 x --every-pushes) depends on how
# far the workers outrun the relay (the machine's load): 3.5 points of spread between
# fault-free runs on 2 loaded cores. --max-round 2 makes every upstream push carry at most
# 2 gradients, so the step count follows the pushes, not the load.
CONFIGS = {
    "sgd": (["--optim", "sgd", "--lr", "0.02", "--epochs", "3"], []),
    "adam": (["--optim", "adam", "--lr", "0.001",
              "--epochs", os.environ.get("PS_ADAM_EPOCHS", "4")], ["--max-round", "2"]),
}
JOB = ["--layers", "784,128,10", "--batch", "64"]
EVERY_PUSHES = 2          # the relay forwards as soon as 2 pushes are summed
MAX_ROUND = {"sgd": 2 * EVERY_PUSHES, "adam": 2}   # (sgd: the relay's default, relay.h)
MAX_BACKLOG = 4 * EVERY_PUSHES                     # the relay's default
# Runs of each kind (fault-free, faulted), interleaved.
RUNS = {"sgd": 3, "adam": 3}
WORKERS = 2
KILLS = 3
OUTAGE_S = 2.0


def start(cmd, out):
    f = open(out, "ab")
    p = subprocess.Popen([str(a) for a in cmd], stdout=f, stderr=subprocess.STDOUT,
                         stdin=subprocess.DEVNULL)
    f.close()
    psserver._register(p)
    return p


def stop(p, sig=signal.SIGKILL, timeout=60):
    if p.poll() is None:
        os.kill(p.pid, sig)
    p.wait(timeout=timeout)
    psserver._unregister(p)
    return p.returncode


def relaying(out, starts):
    with open(out, errors="replace") as f:
        return f.read().count("] relaying ") > starts


def run_tree(tmp, config, faults, seed=None, relay_extra=()):
    """One async tree run; returns a dict: accuracy, the local counters per key, the
    upstream versions, the workers' and the relay's output."""
    require_ps_train()
    rnd = random.Random(seed)
    os.makedirs(tmp, exist_ok=True)
    servers = []
    procs = []
    try:
        up = psserver.RedisServer(name="acc-up")
        servers.append(up)
        local = psserver.RedisServer(name="acc-local")
        servers.append(local)
        flags = JOB + CONFIGS[config][0]
        subprocess.run([PS_TRAIN, "init", "--addr", up.addr, "--job", "t"] + flags,
                       check=True, stdout=subprocess.DEVNULL, timeout=60)
        rout = os.path.join(tmp, "relay.out")
        rcmd = [RELAY, "--local", local.addr, "--upstream", up.addr, "--name", "relay-acc",
                "--match", "t:*", "--every-pushes", EVERY_PUSHES, "--progress-ms", 500] + \
            CONFIGS[config][1] + list(relay_extra)
        relay = start(rcmd, rout)
        procs.append(relay)
        psserver.wait_until(lambda: relaying(rout, 0), timeout=30, what="relay up")
        subprocess.run([PS_TRAIN, "init", "--addr", local.addr, "--job", "t"] + flags,
                       check=True, stdout=subprocess.DEVNULL, timeout=60)
        workers = []
        for i in range(WORKERS):
            out = os.path.join(tmp, "w%d.out" % i)
            workers.append((start([PS_TRAIN, "work", "--addr", local.addr, "--job", "t",
                                   "--name", "w%d" % i, "--progress", "line",
                                   "--interval-ms", 500,
                                   "--log-json", os.path.join(tmp, "w%d.jsonl" % i)], out),
                            out))
            procs.append(workers[-1][0])
        t0 = time.monotonic()
        if faults:
            # Kill points 0.3-1.5 s apart (a run takes 4-15 s of training depending on
            # the machine's load; a kill after the workers finished would test nothing).
            for k in range(KILLS):
                time.sleep(rnd.uniform(0.3, 1.5))
                if any(w.poll() is not None for w, _ in workers):
                    break
                stop(relay)
                time.sleep(rnd.uniform(OUTAGE_S - 0.2, OUTAGE_S + 0.2))
                starts = open(rout, errors="replace").read().count("] relaying ")
                relay = start(rcmd, rout)
                procs.append(relay)
                psserver.wait_until(lambda: relaying(rout, starts) or relay.poll() is not None,
                                    timeout=30, what="relay restarted")
        for w, out in workers:
            w.wait(timeout=1200)
            psserver._unregister(w)
            assert w.returncode == 0, open(out, errors="replace").read()[-3000:]
        elapsed = time.monotonic() - t0
        assert stop(relay, signal.SIGTERM) == 0, open(rout).read()[-3000:]
        ev = subprocess.run([PS_TRAIN, "eval", "--addr", up.addr, "--job", "t"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
        m = re.findall(r"test_acc=([0-9.]+)", ev.stdout.decode())
        assert m, ev.stdout.decode()
        lc, uc = local.client(), up.client()
        keys = sorted(k.decode() for k in uc.keys("t:*") if uc.type(k) == b"ps-tensor")
        return {
            "config": config,
            "acc": float(m[-1]),
            "elapsed": elapsed,
            "local": {k: info(lc, k) for k in keys},
            "up": {k: info(uc, k) for k in keys},
            "workers": [open(out, errors="replace").read() for _, out in workers],
            "jsonl": [open(os.path.join(tmp, "w%d.jsonl" % i)).read() for i in range(WORKERS)],
            "relay": open(rout, errors="replace").read(),
        }
    finally:
        for p in procs:
            if p.poll() is None:
                stop(p)
        for s in servers:
            s.stop()


def check_exactly_once(res, faults):
    """Every local push reached the upstream once, in upstream pushes of at most MAX_ROUND
    gradients, as the local tensors' persisted counters and the upstream versions say."""
    for k, li in res["local"].items():
        assert li["accum_pushes"] == 0 and li["pending_pushes"] == 0, (k, li)
        # Every push summed locally was forwarded; none twice (a doubled or lost one
        # would make forwarded differ from the pushes summed).
        assert li["relay_forwarded"] == li["pushes"], (k, li)
        assert 1 <= li["relay_round_min"] <= li["relay_round_max"] <= MAX_ROUND[res["config"]], \
            (k, li)
        # Each acknowledged part is one upstream step; resends were answered by the
        # upstream exactly-once table, never applied again.
        ui = res["up"][k]
        assert ui["version"] == li["relay_rounds"], (k, ui["version"], li)
        assert li["max_backlog"] == MAX_BACKLOG


def mean(xs):
    return sum(xs) / len(xs)


def check_faulted_runs(tmp_path, config):
    """RUNS[config] fault-free and as many faulted runs, interleaved so that both see the
    same load on the machine. On 2 cores shared with other jobs both kinds have a lower
    tail (SGD: 3 of 14 fault-free runs and 3 of 16 faulted runs 1-3 points below the
    others; Adam fault-free runs differ by 2-6 points), so the test asserts what holds
    robustly: some faulted run within 1 point of the lowest fault-free run, and the
    faulted mean within 3 points of it (bootstrapped from the measured runs: fails 0.9% of
    the time with 3 runs each; "the mean within 1 point" would fail 10-20% of the time from
    the load alone, while the measured means differ by 0.3 points). The relay before issue
    27 (--max-backlog 0 --max-round 0) ends 30-60 points below with SGD, far outside."""
    seed = int(os.environ.get("PS_TEST_SEED", "0")) or None
    free, faulted = [], []
    for i in range(RUNS[config]):
        free.append(run_tree(str(tmp_path / ("free%d" % i)), config, faults=False))
        check_exactly_once(free[-1], False)
        faulted.append(run_tree(str(tmp_path / ("faults%d" % i)), config, faults=True,
                                seed=None if seed is None else seed + i))
        check_exactly_once(faulted[-1], True)
        check_announced(faulted[-1])
    fa, ra = [r["acc"] for r in free], [r["acc"] for r in faulted]
    print("%s: fault-free %s (%.0fs), 3 relay kills %s (%.0fs)" % (
        config, fa, mean([r["elapsed"] for r in free]), ra,
        mean([r["elapsed"] for r in faulted])))
    assert max(ra) >= min(fa) - 0.01, (fa, ra)
    assert mean(ra) >= min(fa) - 0.03, (fa, ra)


def check_announced(res):
    assert res["relay"].count("] relaying ") >= 2, res["relay"][-2000:]
    # Backpressure engaged and was announced: refused pushes on the local server, the
    # workers' "backlog waits" (progress line and --log-json), the relay's "backlog full".
    refusals = sum(li["backlog_refusals"] for li in res["local"].values())
    assert refusals > 0, res["local"]
    assert any("backlog waits" in w for w in res["workers"]), res["workers"][0][-2000:]
    waits = [json.loads(line).get("backlog_waits", 0) for j in res["jsonl"]
             for line in j.splitlines() if '"event":"progress"' in line]
    assert max(waits) > 0, res["jsonl"][0][-1000:]
    assert "local backlog full" in res["relay"], res["relay"][-2000:]


@pytest.mark.slow
def test_relay_killed_3_times_costs_sgd_time_not_accuracy(tmp_path):
    check_faulted_runs(tmp_path, "sgd")


@pytest.mark.slow
def test_relay_killed_3_times_costs_adam_time_not_accuracy(tmp_path):
    check_faulted_runs(tmp_path, "adam")


if __name__ == "__main__":
    import tempfile
    config, runs = sys.argv[1], int(sys.argv[2])
    faults = "--faults" in sys.argv
    # --unbounded: the relay as it was before issue 27 (no backpressure, one push per take).
    extra = ["--max-backlog", "0", "--max-round", "0"] if "--unbounded" in sys.argv else []
    if os.environ.get("PS_RELAY_ARGS"):
        extra = os.environ["PS_RELAY_ARGS"].split()
    accs = []
    for i in range(runs):
        with tempfile.TemporaryDirectory() as d:
            if os.environ.get("PS_KEEP"):
                d = tempfile.mkdtemp(prefix="relay-acc-")
                print("run %d in %s" % (i, d))
            res = run_tree(d, config, faults=faults, relay_extra=extra)
            if not extra:
                check_exactly_once(res, faults)
            if faults:
                print("  (free-run comparison needs the same load: interleave runs)")
            accs.append(res["acc"])
            print("run %d: acc %.4f in %.0fs; refusals %d; largest upstream push %d; "
                  "local pushes %d, upstream steps %d" % (
                      i, res["acc"], res["elapsed"],
                      sum(li["backlog_refusals"] for li in res["local"].values()),
                      max(li["relay_round_max"] for li in res["local"].values()),
                      max(li["pushes"] for li in res["local"].values()),
                      max(ui["version"] for ui in res["up"].values())), flush=True)
    print("%s faults=%s: %s (spread %.4f)" % (config, faults, accs, max(accs) - min(accs)))
