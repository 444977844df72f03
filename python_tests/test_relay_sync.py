"""Exact sync rounds through ps-relay: ps-train workers with --sync-rounds push one gradient
each and wait (PS.PULL MINVERSION, libps psModelPullMinVersion) for the model their round
produced, and a relay with --sync --workers N forwards a round once every key has the N
pushes. So each upstream push carries exactly N worker steps, every gradient is computed on
the newest model, and the upstream version of each key counts the rounds. A worker whose
wait times out (no relay) pulls the current model and goes on."""

import os
import re
import subprocess
import time

import psserver
from pshelpers import PS_TRAIN, info, ps_train  # noqa: F401 (a fixture)
from pshelpers import run_ps_train as run
from test_relay import Relay, relays  # noqa: F401 (a fixture)

# 2 tasks of 640 samples, batches of 64: 10 steps per task, 20 in all.
JOB = ["--layers", "784,16,10", "--optim", "sgd", "--lr", "0.05", "--limit", "1280",
       "--task-samples", "640", "--batch", "64", "--epochs", "1"]
STEPS = 20
KEYS = 4  # sr:w1:0 sr:b1:0 sr:w2:0 sr:b2:0


def versions(server, job):
    c = server.client()
    return {k.decode(): int(info(c, k)["version"]) for k in c.keys("%s:*" % job)}


def start_worker(server, name, *extra):
    return subprocess.Popen([PS_TRAIN, "work", "--addr", server.addr, "--job", "sr", "--name",
                             name, "--progress", "none"] + [str(a) for a in extra],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL)


def finish(p, timeout=120):
    out = p.communicate(timeout=timeout)[0].decode(errors="replace")
    assert p.returncode == 0, out
    return out


def test_sync_rounds_make_each_upstream_push_exactly_n_worker_steps(ps_train, make_server,
                                                                     tmp_path, relays):
    up, local = make_server(), make_server()
    run(["init", "--addr", up.addr, "--job", "sr"] + JOB)
    r = Relay(tmp_path, local, up, name="relay-sr",
              extra=["--sync", "--workers", "2", "--round-timeout-ms", "20000"])
    r.cmd[r.cmd.index("m:*")] = "sr:*"
    relays.append(r.start())
    psserver.wait_until(lambda: "] relaying 4 keys" in r.output(), timeout=20,
                        what="the relay mirrored the model")
    run(["init", "--addr", local.addr, "--job", "sr"] + JOB)
    ws = [start_worker(local, "w%d" % i, "--sync-rounds", 25000) for i in (1, 2)]
    for w in ws:
        finish(w)
    assert r.stop() == 0, r.output()
    # One upstream push per key per round of 2 steps, and nothing else applied upstream.
    assert set(versions(up, "sr").values()) == {STEPS // 2}, versions(up, "sr")
    lc = local.client()
    for k in versions(up, "sr"):
        li = info(lc, k)
        assert (li["takes"], li["take_acks"], li["accum_pushes"]) == (STEPS // 2, STEPS // 2, 0)
    out = r.output()
    m = re.search(r"stopped after .*local pushes in (\d+) \| upstream pushes out (\d+) "
                  r"\(resent 0, rounds not of N (\d+)\)", out)
    assert m, out
    assert tuple(map(int, m.groups())) == (STEPS * KEYS, STEPS * KEYS // 2, 0), out


def test_sync_round_waits_for_every_key_so_a_model_push_is_never_split(make_server, tmp_path,
                                                                       relays):
    """Two workers' pushes of a 2-key model: a round is not taken while one key still misses
    the second worker's push (taking it would split that model push over two rounds)."""
    up, local = make_server(), make_server()
    uc, lc = up.client(), local.client()
    for k, shape in (("m:w:0", (3,)), ("m:b:0", (2,))):
        uc.execute_command("PS.CREATE", k, "SHAPE", *shape, "OPTIM", "SGD", "LR", 1)
    r = Relay(tmp_path, local, up, extra=["--sync", "--workers", "2",
                                          "--round-timeout-ms", "20000"])
    relays.append(r.start())
    psserver.wait_until(lambda: "] relaying 2 keys" in r.output(), timeout=20, what="relay up")
    one = lambda n: b"\x00\x00\x80\x3f" * n                     # float32 1.0 x n
    lc.execute_command("PS.PUSHGRAD", "m:w:0", one(3), "ID", "w1", 1)
    lc.execute_command("PS.PUSHGRAD", "m:b:0", one(2), "ID", "w1", 1)
    lc.execute_command("PS.PUSHGRAD", "m:w:0", one(3), "ID", "w2", 1)
    # m:w:0 has its 2 pushes, m:b:0 one: no round yet.
    time.sleep(0.5)
    assert [int(info(uc, k)["version"]) for k in ("m:w:0", "m:b:0")] == [0, 0]
    lc.execute_command("PS.PUSHGRAD", "m:b:0", one(2), "ID", "w2", 1)
    psserver.wait_until(lambda: all(int(info(uc, k)["version"]) == 1 for k in ("m:w:0", "m:b:0")),
                        timeout=10, what="one round of both keys")
    assert r.stop() == 0
    assert "rounds not of N 0)" in r.output(), r.output()


def test_sync_rounds_worker_goes_on_after_its_wait_times_out(ps_train, make_server):
    """No relay: the local ACCUM tensors' version never moves, so every wait times out; the
    worker pulls the current model each time and finishes its steps."""
    local = make_server()
    lc = local.client()
    run(["init", "--addr", local.addr, "--job", "sr"] + JOB)
    for k in list(versions(local, "sr")):
        shape = [int(x) for x in info(lc, k)["shape"]]
        lc.delete(k)
        lc.execute_command("PS.CREATE", k, "SHAPE", *shape, "OPTIM", "ACCUM")
    w = start_worker(local, "w1", "--sync-rounds", 50)
    finish(w)
    for k in versions(local, "sr"):
        assert int(info(lc, k)["accum_pushes"]) == STEPS, k
    assert local.client().info("clients")["blocked_clients"] == 0


def test_sync_rounds_refuses_overlap_and_pull_every_before_connecting(ps_train):
    """--sync-rounds pulls after every push and waits for the round: an overlapped pull (sent
    before the push) or a pull every K steps would wait for the wrong model."""
    for extra in (["--overlap", "1"], ["--pull-every", "2"]):
        p = run(["work", "--addr", "127.0.0.1:1", "--job", "sr", "--sync-rounds", 100] + extra,
                check=False, timeout=30)
        assert p.returncode == 2, p.out
        assert "--sync-rounds pulls after every push" in p.out, p.out
