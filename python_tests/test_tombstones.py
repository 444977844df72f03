"""Tombstones of embedding tables (docs/design.md "Tombstones and incremental export"): rows
removed by TTL, CAPACITY and PS.EVICT are answered by PS.TOMBSTONES (the removal log) and by
PS.SCANROWS ... GONE (rows dead by TTL that the sweep has not reached); SINCE at or before the
log's horizon answers REBASE; the log is bounded by TOMBSTONES; a replica, an AOF replay, a
rewritten AOF and DEBUG RELOAD give the same answers and digests; bad requests change
nothing."""

import os
import struct

import numpy as np
import pytest

import psserver
from pshelpers import ERROR_CODE_RE, f32, info
from psserver import digest, wait_for_replication
from test_embed_persistence import header, payload, row, tomb, rewrite_aof


def blob(ids):
    return struct.pack("<%dQ" % len(ids), *ids)


def ids_of(b):
    return list(struct.unpack("<%dQ" % (len(b) // 8), b))


def push(c, key, ids, dim, g=0.25):
    return c.execute_command("PS.PUSHGRAD", key, f32(np.full(len(ids) * dim, g)), "IDS", blob(ids))


def gone_since(c, key, since, count=7):
    """Every id PS.TOMBSTONES and PS.SCANROWS ... GONE answer since 'since' (small COUNTs, so
    the cursors are used), and the rows changed since: (gone set, {id: values bytes})."""
    gone, rows, cursor = set(), {}, 0
    while since:   # SINCE 0 is a full export (PS.TOMBSTONES answers REBASE to it)
        cursor, _, _, b = c.execute_command("PS.TOMBSTONES", key, cursor, "SINCE", since, "COUNT", count)
        gone |= set(ids_of(b))
        if int(cursor) == 0:
            break
    while True:
        cursor, _, ids, vals, dead = c.execute_command("PS.SCANROWS", key, cursor, "SINCE", since,
                                                       "COUNT", count, "GONE")
        gone |= set(ids_of(dead))
        ids = ids_of(ids)
        w = len(vals) // max(len(ids), 1)
        rows.update({i: vals[k * w:(k + 1) * w] for k, i in enumerate(ids)})
        if int(cursor) == 0:
            break
    return gone, rows


def live(c, key, ids):
    """The ids among 'ids' that are live rows: a full scan."""
    _, rows = gone_since(c, key, 0)
    return set(rows) & set(ids)


def test_ttl_capacity_and_evict_removals_are_tombstones(server):
    c = server.client()
    c.execute_command("PS.CREATE", "cap", "EMBEDDING", "DIM", 2, "CAPACITY", 16)
    c.execute_command("PS.CREATE", "ttl", "EMBEDDING", "DIM", 2, "TTL", 5)
    c.execute_command("PS.CREATE", "ev", "EMBEDDING", "DIM", 2)
    for k in ("cap", "ev"):
        push(c, k, list(range(10)), 2)
    push(c, "ttl", list(range(200)), 2)
    s = {k: info(c, k)["version"] for k in ("cap", "ttl", "ev")}
    # CAPACITY: 10 more rows evict the least recently pushed down to 15.
    push(c, "cap", list(range(10, 20)), 2)
    gone, rows = gone_since(c, "cap", s["cap"])
    assert len(gone) == 5 and gone <= set(range(10)) and set(rows) == set(range(10, 20))
    assert info(c, "cap")["evicted_capacity"] == 5 and info(c, "cap")["tombstones_logged"] == 5
    # TTL: ids 0..199 die 5 versions after their push; single-id pushes sweep 18 slots
    # each, so most are dead but stored: PS.SCANROWS GONE answers those, PS.TOMBSTONES the
    # swept ones.
    for _ in range(6):
        push(c, "ttl", [999], 2)
    gone, rows = gone_since(c, "ttl", s["ttl"])
    assert gone == set(range(200)) and set(rows) == {999}
    _, _, _, _, dead = c.execute_command("PS.SCANROWS", "ttl", 0, "SINCE", s["ttl"], "COUNT", 1 << 20, "GONE")
    assert 100 < len(ids_of(dead)) < 200   # most still stored (dead), answered by the scan
    assert info(c, "ttl")["tombstones_logged"] == 200 - len(ids_of(dead))
    # A later SINCE (after their death) does not answer them again, swept or not.
    v, logged = info(c, "ttl")["version"], info(c, "ttl")["tombstones_logged"]
    push(c, "ttl", [999], 2)
    assert info(c, "ttl")["tombstones_logged"] > logged     # the sweep went on
    assert gone_since(c, "ttl", v + 1)[0] == set()         # but they died before v + 1
    # PS.EVICT (the version does not move): a SINCE equal to the version sees the removals.
    push(c, "ev", [50], 2)
    v = info(c, "ev")["version"]
    assert c.execute_command("PS.EVICT", "ev", "AGE", 1) == 10
    assert gone_since(c, "ev", v)[0] == set(range(10))
    # A row removed, then pushed again, is no tombstone: it is a changed row.
    push(c, "ev", [3], 2)
    gone, rows = gone_since(c, "ev", v)
    assert 3 not in gone and 3 in rows and len(gone) == 9
    # The scan without GONE answers 4 elements as before.
    assert len(c.execute_command("PS.SCANROWS", "ev", 0, "SINCE", v)) == 4


def test_horizon_moves_when_the_log_is_full_and_a_stale_since_answers_rebase(server):
    c = server.client()
    c.execute_command("PS.CREATE", "h", "EMBEDDING", "DIM", 1, "CAPACITY", 4, "TOMBSTONES", 3)
    push(c, "h", [1, 2, 3, 4], 1)                       # version 1, no removal
    assert gone_since(c, "h", 1)[0] == set()
    for i in range(5, 10):                                # each push evicts one row
        push(c, "h", [i], 1)
    i = info(c, "h")
    assert i["tombstones"] == 3 and i["tombstones_logged"] == 3 and i["evicted_capacity"] == 5
    horizon = i["tombstone_horizon"]
    assert horizon == 3            # the versions of the 2 entries that fell off: 2, 3
    for since in (0, 1, horizon - 1, i["version"] + 1):
        with pytest.raises(Exception) as e:
            c.execute_command("PS.TOMBSTONES", "h", 0, "SINCE", since)
        assert str(e.value).startswith("REBASE"), e.value
    gone, _ = gone_since(c, "h", horizon)
    assert gone == {3, 4, 5}
    # A smaller log keeps the newest entries; TOMBSTONES 0 logs nothing (every removal moves
    # the horizon); a TTL change restarts the log at the current version.
    c.execute_command("PS.CONFIG", "h", "TOMBSTONES", 1)
    assert info(c, "h")["tombstones_logged"] == 1 and info(c, "h")["tombstone_horizon"] == 5
    c.execute_command("PS.CONFIG", "h", "TOMBSTONES", 0)
    push(c, "h", [20], 1)
    i = info(c, "h")
    assert i["tombstones_logged"] == 0 and i["tombstone_horizon"] == i["version"]
    c.execute_command("PS.CONFIG", "h", "TOMBSTONES", 100, "TTL", 50)
    i = info(c, "h")
    assert i["tombstone_horizon"] == i["version"] + 1     # SINCE <= version: REBASE
    with pytest.raises(Exception, match="^REBASE"):
        c.execute_command("PS.TOMBSTONES", "h", 0, "SINCE", i["version"])
    push(c, "h", [21], 1)
    before = live(c, "h", range(30))
    push(c, "h", [22], 1)
    gone = gone_since(c, "h", i["version"] + 1)[0]
    assert len(gone) == 1 and gone == before - live(c, "h", range(30))


BAD = [
    ["PS.TOMBSTONES", "t", 0],                                   # arity
    ["PS.TOMBSTONES", "t", 0, "COUNT", 5],                       # SINCE missing
    ["PS.TOMBSTONES", "t", 0, "SINCE", 1, "COUNT", 0],
    ["PS.TOMBSTONES", "t", 0, "SINCE", 1, "COUNT", 2**20 + 1],
    ["PS.TOMBSTONES", "t", -1, "SINCE", 1],
    ["PS.TOMBSTONES", "t", 0, "SINCE", -1],
    ["PS.TOMBSTONES", "t", 0, "SINCE", 1, "SINCE", 1],
    ["PS.TOMBSTONES", "t", 0, "SINCE", 1, "BOGUS", 1],
    ["PS.TOMBSTONES", "nokey", 0, "SINCE", 1],
    ["PS.TOMBSTONES", "tensor", 0, "SINCE", 1],
    ["PS.TOMBSTONES", "t", 0, "SINCE", 0],                       # 0 is always a re-base
    ["PS.SCANROWS", "t", 0, "GONE", "GONE"],
    ["PS.CONFIG", "t", "TOMBSTONES", -1],
    ["PS.CONFIG", "t", "TOMBSTONES", 2**24 + 1],
    ["PS.CREATE", "t2", "EMBEDDING", "DIM", 2, "TOMBSTONES", "x"],
]


@pytest.fixture(scope="module")
def bad_srv(module_path):
    s = psserver.RedisServer(module=module_path, name="tombstones-bad")
    yield s
    s.cleanup()


@pytest.mark.parametrize("cmd", BAD, ids=[" ".join(map(str, b))[:60] for b in BAD])
def test_bad_requests_answer_a_coded_error_and_change_nothing(bad_srv, cmd):
    server = bad_srv
    assert server.is_alive(), server.log_tail()
    c = server.client()
    c.flushall()
    c.execute_command("PS.CREATE", "t", "EMBEDDING", "DIM", 2, "CAPACITY", 2)
    c.execute_command("PS.CREATE", "tensor", "SHAPE", 2)
    push(c, "t", [1, 2, 3], 2)
    before = digest(c, "t")
    with server.raw() as raw:
        rep = raw.call(*cmd)
    assert isinstance(rep, Exception) and ERROR_CODE_RE.match(str(rep)), (cmd, rep)
    assert digest(c, "t") == before and c.exists("t2") == 0


def test_a_crafted_encoding_3_payload_with_tombstones_restores(make_server):
    c = make_server(args=["--rdbcompression", "no"]).client()
    c.flushall()
    p = payload(header(version=3, nrows=1, created=3, ecap=2, capacity=1, salt=0, tombs=(8, 0, 2)),
                [row(9, 3)], tail_words=(0, 2), after=[tomb(5, 2) + tomb(6, 3)], encver=3)
    assert c.restore("x", 0, p) == b"OK"
    assert gone_since(c, "x", 1)[0] == {5, 6} and gone_since(c, "x", 2)[0] == {6}
    assert gone_since(c, "x", 3)[0] == set()
    # dumped in the latest encoding: the same, with no ring state after the tombstones
    assert c.dump("x") == payload(header(version=3, nrows=1, created=3, ecap=2, capacity=1, salt=0,
                                         tombs=(8, 0, 2)), [row(9, 3)], tail_words=(0, 2),
                                  after=[tomb(5, 2) + tomb(6, 3)], encver=4, last_words=(0,))


def workload(c, key, dim, seed, pushes):
    rng = np.random.default_rng(seed)
    for k in range(pushes):
        ids = [int(x) % 300 for x in rng.zipf(1.3, int(rng.integers(1, 30)))]
        c.execute_command("PS.PUSHGRAD", key, f32(rng.standard_normal(len(ids) * dim)), "IDS", blob(ids))
        if k % 40 == 39:
            c.execute_command("PS.EVICT", key, "AGE", 30)


def answers(c, keys, sinces):
    return {(k, s): gone_since(c, k, s, count=13) for k in keys for s in sinces} | \
        {k: digest(c, k) for k in keys}


def test_replica_aof_rewrite_and_reload_give_the_same_tombstones(make_server, make_replica):
    m = make_server(args=["--appendonly", "yes", "--aof-use-rdb-preamble", "no"])
    rep = make_replica(m)
    c = m.client()
    c.execute_command("PS.CREATE", "a", "EMBEDDING", "DIM", 3, "TTL", 25, "CAPACITY", 120,
                      "TOMBSTONES", 200, "OPTIM", "ADAM", "INIT", "NORMAL", 0, 0.1, "SEED", 3)
    c.execute_command("PS.CREATE", "b", "EMBEDDING", "DIM", 2, "CAPACITY", 50, "TOMBSTONES", 40)
    workload(c, "a", 3, 1, 160)
    workload(c, "b", 2, 2, 160)
    ia, ib = info(c, "a"), info(c, "b")
    assert ia["tombstones_logged"] > 50 and ib["tombstone_horizon"] > 0
    sinces = [ib["tombstone_horizon"] + 1, ib["tombstone_horizon"] + 3, 158]
    want = answers(c, ("a", "b"), sinces)
    assert all(want[("a", s)][0] for s in sinces) and all(want[("b", s)][0] for s in sinces[:2])
    wait_for_replication(m, [rep])
    assert answers(rep.client(), ("a", "b"), sinces) == want, "replica differs"
    m.restart()                                   # AOF replay of the commands
    assert answers(m.client(), ("a", "b"), sinces) == want, "AOF replay differs"
    c = m.client()
    rewrite_aof(c)                                # PS._RESTORE ... ETOMBS parts
    base = [f for f in os.listdir(os.path.join(m.dir, "appendonlydir")) if ".base." in f]
    assert b"ETOMBS" in open(os.path.join(m.dir, "appendonlydir", base[0]), "rb").read()
    m.restart()
    assert answers(m.client(), ("a", "b"), sinces) == want, "rewritten AOF differs"
    m.client().execute_command("DEBUG", "RELOAD")
    assert answers(m.client(), ("a", "b"), sinces) == want, "RDB reload differs"
    # They go on logging the same removals.
    workload(m.client(), "a", 3, 9, 40)
    wait_for_replication(m, [rep])
    assert answers(rep.client(), ("a",), [170]) == answers(m.client(), ("a",), [170])
