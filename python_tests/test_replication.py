"""Replication: a replica holds bit-identical tensors (DEBUG DIGEST-VALUE) after concurrent
pushes, server-seeded random inits and a full sync; every write replicates exactly once; a
replica refuses writes."""

import threading

import numpy as np
import pytest

from pshelpers import create, create_data, digest, f32, info, pull, pull_np, push
from psserver import RespError, wait_for_replication


def ps_cmdstats(client):
    """{command: calls} of the ps.* commands in INFO commandstats."""
    out = {}
    for k, v in client.info("commandstats").items():
        if k.startswith("cmdstat_ps."):
            out[k[len("cmdstat_"):]] = v["calls"]
    return out


def test_concurrent_pushes_from_4_clients_replicate_bit_identical(server, make_replica):
    rep = make_replica(server)
    m = server.client()
    n = 1000
    create(m, "w", (n,), "INIT", "NORMAL", "0", "1", "SEED", "1", "LR", "0.01")
    errors = []

    def worker(i):
        try:
            c = server.client()
            rng = np.random.default_rng(100 + i)
            for _ in range(500):
                c.execute_command("PS.PUSHGRAD", "w", f32(rng.standard_normal(n)))
        except Exception as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    v, vals = pull(m, "w")
    assert v == 2000
    assert m.execute_command("WAIT", 1, 10000) == 1
    wait_for_replication(server, [rep])
    rc = rep.client()
    assert digest(m, "w") == digest(rc, "w")
    assert pull(rc, "w") == (v, vals)
    # Reads on one side only do not make digests differ.
    for _ in range(5):
        pull(m, "w")
    assert digest(m, "w") == digest(rc, "w")


@pytest.mark.parametrize("init,shape", [
    (["UNIFORM", "-1", "1"], (100, 30)),
    (["NORMAL", "0.5", "2"], (3000,)),
    (["XAVIER"], (20, 30, 5)),
    (["HE"], (64, 64)),
])
def test_random_init_without_seed_replicates_identically(server, make_replica, init, shape):
    rep = make_replica(server)
    m = server.client()
    create(m, "a", shape, "INIT", *init)
    create(m, "b", shape, "INIT", *init, "OPTIM", "ADAM")
    push(m, "b", np.ones(shape, np.float32))
    wait_for_replication(server, [rep])
    rc = rep.client()
    for k in ("a", "b"):
        assert digest(m, k) == digest(rc, k), k
        assert pull(m, k) == pull(rc, k), k
    assert pull(m, "a")[1] != pull(m, "b")[1] or shape == (1,)


def test_full_sync_transfers_existing_tensors(server, make_replica):
    m = server.client()
    create(m, "big", (1024, 1024), "INIT", "UNIFORM", "-1", "1", "SEED", "3", "OPTIM", "ADAM")
    push(m, "big", np.full((1024, 1024), 0.1, np.float32))
    create(m, "small", (3,), "INIT", "CONST", "2")
    m.execute_command("PS.PUSHGRAD", "small", f32([1, 2, 3]), "ID", "c1", "1")
    rep = make_replica(server)
    rc = rep.client()
    for k in ("big", "small"):
        assert digest(m, k) == digest(rc, k), k
        assert pull(m, k) == pull(rc, k), k
    # The replica continues from the synced state identically.
    push(m, "big", np.full((1024, 1024), -0.2, np.float32))
    wait_for_replication(server, [rep])
    assert digest(m, "big") == digest(rc, "big")


def test_every_write_replicates_exactly_once_and_failures_not_at_all(server, make_replica):
    rep = make_replica(server)
    m = server.client()
    raw = server.raw()
    try:
        writes = 0
        create_data(m, "k", np.arange(6, dtype=np.float32), "LR", "0.5"); writes += 1
        create(m, "r", (5, 5), "INIT", "HE"); writes += 1
        assert create(m, "k", (6,), "NX") is None        # no-op: may or may not replicate
        push(m, "k", np.ones(6, np.float32)); writes += 1
        push(m, "k", np.ones(6, np.float32), "SCALE", "0.5"); writes += 1
        m.execute_command("PS.PUSHGRAD", "k", "VALUES", *["1"] * 6); writes += 1
        m.execute_command("PS.SET", "k", f32(np.zeros(6))); writes += 1
        assert isinstance(raw.call("PS.PUSHGRAD", "k", f32([1, 2, np.nan, 4, 5, 6])), RespError)
        assert isinstance(raw.call("PS.PUSHGRAD", "k", f32([1, 2])), RespError)
        assert isinstance(raw.call("PS.CREATE", "k", "SHAPE", "6"), RespError)
        assert isinstance(raw.call("PS.CREATE", "bad", "SHAPE", "0"), RespError)
        pull(m, "k")
        info(m, "k")
    finally:
        raw.close()
    wait_for_replication(server, [rep])
    rc = rep.client()
    stats = ps_cmdstats(rc)
    total = sum(stats.values())
    nx_noops = stats.get("ps.create", 0) - 2
    assert total - max(nx_noops, 0) == writes, stats
    assert nx_noops in (0, 1), stats
    assert "ps.pull" not in stats and "ps.info" not in stats, stats
    assert rc.exists("bad") == 0
    for k in ("k", "r"):
        assert digest(m, k) == digest(rc, k), k
    assert pull(rc, "k")[0] == 4


def test_replica_refuses_writes_and_serves_reads(server, make_replica):
    rep = make_replica(server)
    m = server.client()
    create(m, "k", (4,), "INIT", "CONST", "1")
    wait_for_replication(server, [rep])
    with rep.raw() as raw:
        err = raw.call("PS.PUSHGRAD", "k", f32(np.ones(4)))
        assert isinstance(err, RespError) and err.code == "READONLY", err
        err = raw.call("PS.CREATE", "n", "SHAPE", "4")
        assert isinstance(err, RespError) and err.code == "READONLY", err
        err = raw.call("PS.SET", "k", f32(np.ones(4)))
        assert isinstance(err, RespError) and err.code == "READONLY", err
        v = raw.call("PS.PULL", "k")
        assert v == [0, f32(np.ones(4))]
    assert digest(m, "k") == digest(rep.client(), "k")


def test_unseeded_creates_inside_multi_and_lua_replicate_identically(server, make_replica):
    rep = make_replica(server)
    m = server.client()
    p = m.pipeline(transaction=True)
    p.execute_command("PS.CREATE", "tx", "SHAPE", "50", "20", "INIT", "NORMAL", "0", "1")
    p.execute_command("PS.PUSHGRAD", "tx", f32(np.ones(1000)))
    p.execute_command("PS.CREATE", "tx2", "SHAPE", "30", "INIT", "HE")
    p.execute()
    m.eval("redis.call('PS.CREATE', KEYS[1], 'SHAPE', 40, 30, 'INIT', 'XAVIER');"
           "return redis.call('PS.PUSHGRAD', KEYS[1], ARGV[1])", 1, "lua", f32(np.ones(1200)))
    wait_for_replication(server, [rep])
    rc = rep.client()
    for k in ("tx", "tx2", "lua"):
        assert rc.exists(k) == 1, k
        assert digest(m, k) == digest(rc, k), k
        assert pull(m, k) == pull(rc, k), k
