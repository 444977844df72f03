"""Persistence: RDB (DEBUG RELOAD, SAVE + restart), AOF rewrite without RDB preamble, AOF log
replay. Every tensor must come back bit-identical: same DEBUG DIGEST-VALUE, same pulled bytes
and version, and the optimizer state must carry on as if nothing happened."""

import glob
import os
import time

import numpy as np
import pytest

from pshelpers import create, create_data, digest, f32, info, pull, pull_np, push
from psserver import wait_until

RNG = np.random.default_rng(7)
# AOF servers: no automatic rewrite, so it cannot race with the test's BGREWRITEAOF.
AOF_NO_PREAMBLE = ["--appendonly", "yes", "--aof-use-rdb-preamble", "no",
                   "--auto-aof-rewrite-percentage", "0"]
BIG_SHAPE = (1500, 3000)          # 4.5M floats = 18 MB of data (> 16 MB)


def populate(c, big=True):
    """Tensors of several shapes and optimizers, with pushes, SETs and an ID'd push.
    Returns {key: (digest, pull reply)}."""
    create(c, "t1", (7,), "INIT", "CONST", "0.5", "LR", "0.1")
    create(c, "t2", (3, 5), "INIT", "NORMAL", "0", "1", "SEED", "11")
    create(c, "t4", (2, 3, 4, 5), "INIT", "UNIFORM", "-1", "1", "SEED", "12", "OPTIM", "ADAM",
           "LR", "0.001")
    create(c, "t8", (2,) * 8, "INIT", "XAVIER", "SEED", "13", "OPTIM", "MOMENTUM",
           "MOMENTUM", "0.8")
    create_data(c, "td", RNG.standard_normal((16, 16)).astype(np.float32), "OPTIM", "RMSPROP")
    for k, n in [("t1", 7), ("t2", 15), ("t4", 120), ("t8", 256), ("td", 256)]:
        for _ in range(3):
            push(c, k, RNG.standard_normal(n).astype(np.float32))
    c.execute_command("PS.SET", "t2", f32(RNG.standard_normal(15)))
    c.execute_command("PS.PUSHGRAD", "t1", f32(np.ones(7)), "ID", "worker-1", "5")
    if big:
        create(c, "big", BIG_SHAPE, "INIT", "HE", "SEED", "14")
        push(c, "big", np.ones(BIG_SHAPE, dtype=np.float32))
    return {k.decode(): (digest(c, k), pull(c, k)) for k in c.keys("*")}


def check_same(c, before):
    for k, (d, body) in before.items():
        assert c.type(k) == b"ps-tensor", k
        assert digest(c, k) == d, "digest of %s changed" % k
        got = pull(c, k)
        assert got[0] == body[0], "version of %s changed: %r -> %r" % (k, body[0], got[0])
        assert got[1] == body[1], "values of %s changed" % k
    assert sorted(x.decode() for x in c.keys("*")) == sorted(before)


def rewrite_aof(c):
    """BGREWRITEAOF once no other rewrite runs, then wait until it is done."""
    wait_rewrite_done(c)
    c.bgrewriteaof()
    wait_rewrite_done(c)


def wait_rewrite_done(c):
    def done():
        p = c.info("persistence")
        return not p["aof_rewrite_in_progress"] and not p["aof_rewrite_scheduled"]
    wait_until(done, timeout=60, what="AOF rewrite to finish")
    p = c.info("persistence")
    assert p["aof_last_bgrewrite_status"] == "ok", p


def test_debug_reload_keeps_tensors_bit_identical(server):
    c = server.client()
    before = populate(c)
    assert c.execute_command("DEBUG", "RELOAD") in (b"OK", "OK", True)
    check_same(c, before)


def test_save_and_restart_keeps_tensors_bit_identical(server):
    c = server.client()
    before = populate(c)
    assert c.save()
    server.restart()
    check_same(server.client(), before)


def test_aof_rewrite_without_rdb_preamble_then_restart(make_server):
    s = make_server(AOF_NO_PREAMBLE)
    c = s.client()
    before = populate(c)
    rewrite_aof(c)
    base = glob.glob(os.path.join(s.dir, "appendonlydir", "*.base.aof"))
    assert len(base) == 1, base
    with open(base[0], "rb") as f:
        head = f.read(64)
    assert not head.startswith(b"REDIS"), "base file is an RDB, expected commands"
    s.restart(timeout=30)
    check_same(s.client(), before)


def test_aof_log_replay_of_random_inits_without_seed(make_server):
    """Creates with a server-chosen seed must be logged with that seed (or their effect):
    replaying the AOF after a restart rebuilds the same bits."""
    s = make_server(["--appendonly", "yes", "--auto-aof-rewrite-percentage", "0"])
    c = s.client()
    for k, init in [("u", ["UNIFORM", "-2", "2"]), ("n", ["NORMAL", "0", "3"]),
                    ("x", ["XAVIER"]), ("h", ["HE"])]:
        create(c, k, (40, 30), "INIT", *init, "OPTIM", "ADAM")
        push(c, k, RNG.standard_normal(1200).astype(np.float32))
    before = {k.decode(): (digest(c, k), pull(c, k)) for k in c.keys("*")}
    s.restart(timeout=30)
    check_same(s.client(), before)


def _resp_bulk_lengths(path):
    """Yields the length of every bulk argument in a RESP command file, without reading
    the payloads into memory."""
    with open(path, "rb") as f:
        while True:
            line = f.readline()
            if not line:
                return
            if line.startswith(b"*"):
                continue
            assert line.startswith(b"$"), "unexpected AOF line %r" % line[:40]
            n = int(line[1:].strip())
            yield n
            f.seek(n + 2, os.SEEK_CUR)


def test_aof_rewrite_chunks_arguments_of_a_tensor_over_64mb(make_server):
    s = make_server(AOF_NO_PREAMBLE)
    c = s.client()
    c.config_set("ps.max-tensor-bytes", str(1 << 30))
    shape = (4352, 4096)    # 17.8M floats = 68 MB
    create(c, "huge", shape, "INIT", "UNIFORM", "-1", "1", "SEED", "99")
    push(c, "huge", np.full(shape, 0.5, dtype=np.float32))
    d = digest(c, "huge")
    body = pull(c, "huge")
    rewrite_aof(c)
    base = glob.glob(os.path.join(s.dir, "appendonlydir", "*.base.aof"))[0]
    lengths = list(_resp_bulk_lengths(base))
    assert max(lengths) <= 64 * 1024 * 1024, "an AOF argument has %d bytes" % max(lengths)
    assert sum(lengths) >= 4 * shape[0] * shape[1]
    s.restart(timeout=60)
    c = s.client()
    c.config_set("ps.max-tensor-bytes", str(1 << 30))
    assert digest(c, "huge") == d
    assert pull(c, "huge") == body


@pytest.mark.parametrize("optim", [["OPTIM", "ADAM", "LR", "0.01"],
                                   ["OPTIM", "MOMENTUM", "LR", "0.05"],
                                   ["OPTIM", "ADAGRAD", "LR", "0.1"]],
                         ids=["adam", "momentum", "adagrad"])
@pytest.mark.parametrize("how", ["debug-reload", "aof-rewrite-restart"])
def test_optimizer_state_survives_persistence(make_server, optim, how):
    """k1 gets two pushes, then a reload, then a third; k2 (created after the reload) gets
    the same three pushes: both must hold the same bits, so step count, moments and
    accumulators were all saved and loaded."""
    args = AOF_NO_PREAMBLE if how != "debug-reload" else []
    s = make_server(args)
    c = s.client()
    w = RNG.standard_normal((9, 11)).astype(np.float32)
    grads = [RNG.standard_normal((9, 11)).astype(np.float32) for _ in range(3)]
    create_data(c, "k1", w, *optim)
    push(c, "k1", grads[0])
    push(c, "k1", grads[1])
    if how == "debug-reload":
        c.execute_command("DEBUG", "RELOAD")
    else:
        rewrite_aof(c)
        s.restart()
        c = s.client()
    assert push(c, "k1", grads[2]) == 3
    create_data(c, "k2", w, *optim)
    for g in grads:
        push(c, "k2", g)
    assert pull(c, "k1") == pull(c, "k2")
    assert digest(c, "k1") == digest(c, "k2")
    assert int(info(c, "k1")["step"]) == 3


def test_dedup_table_survives_reload(server):
    c = server.client()
    create(c, "k", (4,), "LR", "1")
    assert c.execute_command("PS.PUSHGRAD", "k", f32(np.ones(4)), "ID", "w", "1") == 1
    assert c.execute_command("PS.PUSHGRAD", "k", f32(np.ones(4)), "ID", "w", "2") == 2
    c.execute_command("DEBUG", "RELOAD")
    # A retry of seq 2 after the reload is not applied again and answers its version.
    assert c.execute_command("PS.PUSHGRAD", "k", f32(np.ones(4)), "ID", "w", "2") == 2
    v, vals = pull_np(c, "k")
    assert v == 2 and vals.tolist() == [-2.0] * 4


def test_sigkill_with_appendfsync_always_loses_no_acknowledged_push(make_server):
    s = make_server(["--appendonly", "yes", "--appendfsync", "always",
                     "--auto-aof-rewrite-percentage", "0"])
    c = s.client()
    create(c, "k", (64, 64), "INIT", "UNIFORM", "-1", "1", "OPTIM", "ADAM")
    for i in range(200):
        assert push(c, "k", RNG.standard_normal(4096).astype(np.float32)) == i + 1
    d, body = digest(c, "k"), pull(c, "k")
    s.restart(kill=True)
    c = s.client()
    assert pull(c, "k") == body
    assert digest(c, "k") == d
