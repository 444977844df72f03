"""Snapshots on real servers (issue 4): PS.SNAPSHOT / SNAPSHOTS / ROLLBACK / DROPSNAPSHOT and
PULL AT; rollback restores values and optimizer state as a new version; the per-tensor limit
from ps.max-snapshots; copy on write visible in MEMORY USAGE; snapshots survive DEBUG RELOAD,
BGREWRITEAOF with aof-use-rdb-preamble no + restart, and replication, with identical
DEBUG DIGEST-VALUE; keyspace notifications ps.snapshot / ps.rollback."""

import time

import numpy as np

import psserver
from psserver import RespError, wait_until
from pshelpers import create, digest, info, messages, pull, push, subscribe

RNG = np.random.default_rng(77)


def ok(rep):
    return rep in (b"OK", "OK", True)


def snapshots(c, key):
    return [(n.decode(), v, ms) for n, v, ms in c.execute_command("PS.SNAPSHOTS", key)]


def train(c, key, n, k):
    for _ in range(k):
        push(c, key, RNG.standard_normal(n).astype(np.float32))


def test_snapshot_pull_at_and_rollback_restore_values_and_optimizer_state(r):
    n = 100
    create(r, "m", (n,), "INIT", "NORMAL", "0", "1", "SEED", "3", "OPTIM", "ADAM", "LR", "0.01")
    train(r, "m", n, 4)
    t0 = int(time.time() * 1000)
    assert ok(r.execute_command("PS.SNAPSHOT", "m", "epoch1"))
    r.execute_command("COPY", "m", "twin")  # what training from the snapshot would do
    at_v, at_body = pull(r, "m")
    (name, ver, ms), = snapshots(r, "m")
    assert name == "epoch1" and ver == 4 and abs(ms - t0) < 5000
    train(r, "m", n, 3)
    assert pull(r, "m")[0] == 7
    assert pull(r, "m", "AT", "epoch1") == (4, at_body)
    assert pull(r, "m")[1] != at_body
    assert r.execute_command("PS.ROLLBACK", "m", "epoch1") == 8
    v, body = pull(r, "m")
    assert v == 8 and body == at_body
    assert int(info(r, "m")["step"]) == 4
    # The Adam moments and bias corrections came back too: the next push equals the same
    # push on the twin copied at snapshot time.
    g = RNG.standard_normal(n).astype(np.float32)
    push(r, "m", g)
    push(r, "twin", g)
    assert pull(r, "m")[1] == pull(r, "twin")[1]
    assert pull(r, "m", "AT", "epoch1")[1] == at_body  # the snapshot is immutable


def test_snapshot_errors_drop_and_limit(server, r):
    create(r, "m", (4,))
    assert ok(r.execute_command("PS.SNAPSHOT", "m", "a"))
    with server.raw() as rc:
        for args in (["PS.SNAPSHOT", "m", "a"],          # exists
                     ["PS.ROLLBACK", "m", "nope"],        # missing
                     ["PS.PULL", "m", "AT", "nope"],
                     ["PS.SNAPSHOT", "nokey", "a"],
                     ["PS.SNAPSHOT", "m", ""]):
            rep = rc.call(*args)
            assert isinstance(rep, RespError) and rep.code == "ERR", (args, rep)
        r.set("str", "x")
        rep = rc.call("PS.SNAPSHOT", "str", "a")
        assert isinstance(rep, RespError) and rep.code == "WRONGTYPE", rep
    assert r.execute_command("PS.DROPSNAPSHOT", "m", "a") == 1
    assert r.execute_command("PS.DROPSNAPSHOT", "m", "a") == 0
    assert snapshots(r, "m") == []
    # The limit comes from ps.max-snapshots at creation time.
    r.config_set("ps.max-snapshots", 2)
    create(r, "l", (4,))
    assert int(info(r, "l")["max_snapshots"]) == 2
    r.execute_command("PS.SNAPSHOT", "l", "s1")
    r.execute_command("PS.SNAPSHOT", "l", "s2")
    with server.raw() as rc:
        rep = rc.call("PS.SNAPSHOT", "l", "s3")
    assert isinstance(rep, RespError) and rep.code == "ERR", rep
    assert [s[0] for s in snapshots(r, "l")] == ["s1", "s2"]
    r.execute_command("PS.DROPSNAPSHOT", "l", "s1")
    assert ok(r.execute_command("PS.SNAPSHOT", "l", "s3"))
    # PS.CONFIG MAXSNAPSHOTS raises it per tensor.
    r.execute_command("PS.CONFIG", "l", "MAXSNAPSHOTS", "3")
    assert ok(r.execute_command("PS.SNAPSHOT", "l", "s4"))


def test_memory_usage_does_not_double_after_a_snapshot_until_a_push(r):
    n = 256 * 1024  # 1 MB of values, + 2 MB of Adam state
    create(r, "m", (n,), "OPTIM", "ADAM")
    push(r, "m", np.ones(n, np.float32))
    base = r.memory_usage("m")
    assert base >= 3 * 4 * n
    r.execute_command("PS.SNAPSHOT", "m", "s")
    shared = r.memory_usage("m")
    assert shared < base * 1.01 + 1024, (base, shared)
    push(r, "m", np.ones(n, np.float32))
    split = r.memory_usage("m")
    assert split >= base + 3 * 4 * n * 0.99, (base, split)
    r.execute_command("PS.DROPSNAPSHOT", "m", "s")
    assert r.memory_usage("m") < base * 1.01 + 1024


def test_snapshots_taken_back_to_back_are_saved_and_counted_once(r):
    """Two snapshots with no write between them share their arrays: after the next write
    they are no longer the live tensor's, and MEMORY USAGE and the RDB value (DUMP) count
    them once, like one snapshot (docs/design.md "Snapshots")."""
    n = 64 * 1024  # 256 KB of values, + 512 KB of Adam state
    for key, names in (("one", ["a"]), ("two", ["a", "b"]), ("three", ["a", "b", "c"])):
        create(r, key, (n,), "OPTIM", "ADAM")
        push(r, key, np.ones(n, np.float32))
        for name in names:
            r.execute_command("PS.SNAPSHOT", key, name)
        push(r, key, np.ones(n, np.float32))
    mem = {k: r.memory_usage(k) for k in ("one", "two", "three")}
    size = {k: len(r.dump(k)) for k in ("one", "two", "three")}
    assert mem["one"] >= 2 * 3 * 4 * n, mem
    assert mem["two"] - mem["one"] < 1024 and mem["three"] - mem["one"] < 2048, mem
    assert size["two"] - size["one"] < 1024 and size["three"] - size["one"] < 2048, size
    # The shared arrays survive a reload shared, and each snapshot still has its values.
    at = {s: pull(r, "three", "AT", s) for s in ("a", "b", "c")}
    r.execute_command("DEBUG", "RELOAD")
    assert {k: r.memory_usage(k) for k in mem} == mem
    assert {s: pull(r, "three", "AT", s) for s in ("a", "b", "c")} == at
    # Dropping the first holder keeps the array for the others.
    r.execute_command("PS.DROPSNAPSHOT", "three", "a")
    r.execute_command("DEBUG", "RELOAD")
    assert pull(r, "three", "AT", "c") == at["c"]
    assert r.memory_usage("three") - mem["one"] < 1024


def build_state(c):
    """Tensors with snapshots (shared and split), dedup entries and an open sync round.
    Returns {key: (digest, pull, snapshots, pulls AT each snapshot)}."""
    create(c, "a", (50, 20), "INIT", "UNIFORM", "-1", "1", "SEED", "5", "OPTIM", "ADAMW",
           "WD", "0.01")
    train(c, "a", 1000, 2)
    c.execute_command("PS.SNAPSHOT", "a", "old")
    train(c, "a", 1000, 2)
    push(c, "a", np.ones(1000, np.float32), "ID", "w", "9")
    c.execute_command("PS.SNAPSHOT", "a", "current")  # shares the live buffers
    create(c, "b", (30,), "OPTIM", "RMSPROP", "SYNC", "3")
    push(c, "b", np.ones(30, np.float32))
    c.execute_command("PS.SNAPSHOT", "b", "x")
    push(c, "b", np.ones(30, np.float32))
    create(c, "m", (64,), "OPTIM", "NESTEROV")
    train(c, "m", 64, 1)
    c.execute_command("PS.SNAPSHOT", "m", "s")
    train(c, "m", 64, 1)
    c.execute_command("PS.ROLLBACK", "m", "s")
    # Two snapshots with no write between them, then a write: they hold one set of arrays
    # that is no longer the live tensor's.
    create(c, "t", (500,), "OPTIM", "ADAM")
    train(c, "t", 500, 1)
    c.execute_command("PS.SNAPSHOT", "t", "one")
    c.execute_command("PS.SNAPSHOT", "t", "two")
    train(c, "t", 500, 1)
    return capture(c)


def capture(c):
    out = {}
    for k in ("a", "b", "m", "t"):
        snaps = snapshots(c, k)
        out[k] = (digest(c, k), pull(c, k), snaps,
                  [pull(c, k, "AT", s[0]) for s in snaps], c.memory_usage(k))
    return out


def assert_same(c, before):
    for k, (d, body, snaps, ats, mem) in before.items():
        assert digest(c, k) == d, k
        assert pull(c, k) == body, k
        assert snapshots(c, k) == snaps, k
        assert [pull(c, k, "AT", s[0]) for s in snaps] == ats, k
        # Sharing between a snapshot and the live tensor survives too (a copy of the
        # shared arrays would add KBs; table capacities may differ by a few bytes).
        assert abs(c.memory_usage(k) - mem) < 1024, (k, mem, c.memory_usage(k))


def test_snapshots_survive_debug_reload(server, r):
    before = build_state(r)
    r.execute_command("DEBUG", "RELOAD")
    assert_same(r, before)


def test_snapshots_survive_aof_rewrite_without_preamble_and_restart(make_server):
    s = make_server(["--appendonly", "yes", "--aof-use-rdb-preamble", "no"])
    c = s.client()
    before = build_state(c)
    c.execute_command("BGREWRITEAOF")
    wait_until(lambda: not c.info("persistence")["aof_rewrite_in_progress"]
               and not c.info("persistence")["aof_rewrite_scheduled"], timeout=20,
               what="rewrite")
    assert c.info("persistence")["aof_last_bgrewrite_status"] == "ok"
    s.restart()
    c = s.client()
    assert_same(c, before)
    # And training carries on identically: rollback + push on the restarted server equals
    # the same on a fresh rebuild.
    assert c.execute_command("PS.ROLLBACK", "a", "old") == before["a"][1][0] + 1


def test_snapshots_and_rollbacks_replicate_with_the_masters_clock(server, make_replica):
    rep = make_replica(server)
    c = server.client()
    before = build_state(c)
    psserver.wait_for_replication(server, [rep])
    rc = rep.client()
    for k, (d, body, snaps, ats, mem) in before.items():
        assert digest(rc, k) == d, k
        assert snapshots(rc, k) == snaps  # same unix-ms as the master
    c.execute_command("PS.DROPSNAPSHOT", "a", "old")
    psserver.wait_for_replication(server, [rep])
    assert digest(rc, "a") == digest(c, "a")


def test_keyspace_notifications_for_snapshot_and_rollback(r):
    r.config_set("notify-keyspace-events", "KEd")
    create(r, "m", (4,))
    ps = subscribe(r, "__keyspace@0__:m")
    r.execute_command("PS.SNAPSHOT", "m", "s")
    push(r, "m", np.ones(4, np.float32))
    r.execute_command("PS.ROLLBACK", "m", "s")
    r.execute_command("PS.DROPSNAPSHOT", "m", "s")
    got = [data for _, data in messages(ps, 4)]
    assert got[:3] == [b"ps.snapshot", b"ps.pushgrad", b"ps.rollback"], got


def test_option_values_that_spell_keywords_are_values(server, r):
    """Arguments parse by position, routed by the key's type (issue 21): a snapshot name
    or client id that spells a keyword (IDS, ROWS, AT, ...) is a value. On main before
    issue 21, 'PS.SNAPSHOT m IDS' answered OK and then 'PS.PULL m AT IDS' WRONGTYPE,
    because PS.PULL picked tensor or table by looking for IDS anywhere in argv."""
    create(r, "m", (4,))
    push(r, "m", np.ones(4, np.float32))
    names = ("IDS", "ids", "ROWS", "AT", "MINVERSION", "FORMAT")
    for name in names:
        assert ok(r.execute_command("PS.SNAPSHOT", "m", name))
    at = pull(r, "m")
    push(r, "m", np.ones(4, np.float32))
    assert pull(r, "m")[0] == at[0] + 1
    for name in names:
        assert pull(r, "m", "AT", name) == at, name
    assert pull(r, "m", "AT", "IDS", "FORMAT", "F32") == at
    assert pull(r, "m", "FORMAT", "F32", "AT", "IDS") == at
    assert r.execute_command("PS.ROLLBACK", "m", "IDS") == at[0] + 2
    # A client id spelled IDS: applied once, its resend a duplicate.
    v = push(r, "m", np.ones(4, np.float32), "ID", "IDS", 1)
    assert push(r, "m", np.ones(4, np.float32), "ID", "IDS", 1) == v
    assert int(info(r, "m")["dedup_hits"]) == 1
    with server.raw() as rc:
        # IDS as a keyword is still the table's: on a tensor a type error, on no key none.
        rep = rc.call("PS.PULL", "m", "IDS", b"\0" * 8)
        assert isinstance(rep, RespError) and rep.code == "WRONGTYPE", rep
        rep = rc.call("PS.PULL", "nokey", "AT", "IDS")
        assert isinstance(rep, RespError) and str(rep) == "ERR no such key", rep
        rep = rc.call("PS.PULL", "m", "AT")
        assert isinstance(rep, RespError) and str(rep) == "ERR option 'AT' needs a value", rep
