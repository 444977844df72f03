"""Ring tracking of embedding tables at the command level (issue #22; docs/commands.md
"Ring commands", docs/design.md "Ring state"): PS.RING TRACK on a table, PS.DELTATAKE of
the changed rows (ids + rows), PS.APPLYDELTA of rows creating missing ones from the table's
initial values, the forward queue, MAXLAG, errors that change nothing, and the table's ring
state kept bit-identical by a replica, an AOF replay, an RDB reload, an AOF rewrite and COPY.
SGD lr 1 with integer gradients and zeros init makes every sum exact, so three groups end
with the same rows bit for bit and per-origin accounting can be checked by seq."""

import struct

import numpy as np
import pytest

import psserver
from pshelpers import f32, from_f32, info

DIM = 4


def ids_blob(ids):
    return struct.pack("<%dQ" % len(ids), *ids)


def table(r, key="e", *opts):
    assert r.execute_command("PS.CREATE", key, "EMBEDDING", "DIM", DIM, "LR", 1, *opts) == b"OK"
    return key


def push(r, ids, g, key="e"):
    g = np.asarray(g, dtype=np.float32).reshape(len(ids), DIM)
    return r.execute_command("PS.PUSHGRAD", key, f32(g), "IDS", ids_blob(ids))


def rows(r, ids, key="e"):
    _, data = r.execute_command("PS.PULL", key, "IDS", ids_blob(ids))
    return from_f32(data).reshape(len(ids), DIM)


def digest(r, key="e"):
    return psserver.digest(r, key)


def err(r, *args):
    kw = r.connection_pool.connection_kwargs
    with psserver.RawClient(kw["port"], kw["host"]) as raw:
        rep = raw.call(*args)
    assert isinstance(rep, psserver.RespError), rep
    return str(rep)


def ring_info(r, key="e"):
    return {k: v for k, v in info(r, key).items() if k.startswith("ring_") and
            k != "ring_lag_refusals"}


def test_take_sends_changed_rows_pending_until_acked_nothing_dropped(r):
    table(r)
    assert r.execute_command("PS.RING", "e", "TRACK", "g0") == 1
    assert r.execute_command("PS.RING", "e", "TRACK", "g0", "MAXQUEUE", 4096) == 0
    assert r.execute_command("PS.DELTATAKE", "e") == 0
    push(r, [7, 3, 9], [[1, 0, 0, 0], [0, 5, 0, -2], [0, 0, 3, 0]])   # w -= g
    seq, n, ids, vals, left = r.execute_command("PS.DELTATAKE", "e", "MAXELEMS", 2)
    assert (seq, n, left) == (1, 2, 1)                  # rows 3 (|5|) and 9 (|3|); 7 waits
    assert struct.unpack("<2Q", ids) == (3, 9)
    assert list(from_f32(vals)) == [0, -5, 0, 2, 0, 0, -3, 0]
    push(r, [3], [[1, 0, 0, 0]])
    assert r.execute_command("PS.DELTATAKE", "e") == [seq, n, ids, vals, 2]   # again
    assert r.execute_command("PS.DELTAACK", "e", 5) == 0
    assert r.execute_command("PS.DELTAACK", "e", 1) == 1
    seq2, n2, ids2, vals2, left2 = r.execute_command("PS.DELTATAKE", "e", "SEQFLOOR", 10)
    assert (seq2, n2, left2) == (10, 2, 0)
    assert struct.unpack("<2Q", ids2) == (3, 7)
    assert list(from_f32(vals2)) == [-1, 0, 0, 0, -1, 0, 0, 0]
    i = ring_info(r)
    assert (i["ring_origin"], i["ring_take_seq"], i["ring_pending_seq"]) == (b"g0", 10, 10)
    assert (i["ring_pending_elems"], i["ring_accumulated"], i["ring_base_rows"]) == (2, 0, 0)
    # A threshold relative to |w| keeps small changes accumulated.
    assert r.execute_command("PS.DELTAACK", "e", 10) == 1
    push(r, [3], [[0.01, 2, 0, 0]])                     # w[3] = (-1.01, -7, 0, 2)
    _, n3, _, vals3, left3 = r.execute_command("PS.DELTATAKE", "e", "THRESHOLD", 0.1)
    assert (n3, left3) == (1, 1) and list(from_f32(vals3)) == [0, -2, 0, 0]


def agent_round(groups, key="e"):
    """One ring round as the agent does it: each group's take goes to its successor with
    HOPS G-2 and PREV, each forward entry on to the next, then every take is acked."""
    G = len(groups)
    for g, x in enumerate(groups):
        t = x.execute_command("PS.DELTATAKE", key)
        if t == 0:
            continue
        nxt = groups[(g + 1) % G]
        assert nxt.execute_command("PS.APPLYDELTA", key, "ID", "g%d" % g, t[0], t[2], t[3],
                                   "HOPS", G - 2, "PREV", 0) == 1
        assert x.execute_command("PS.DELTAACK", key, t[0]) == 1
    moved = True
    while moved:
        moved = False
        for g, x in enumerate(groups):
            f = x.execute_command("PS.DELTAFWD", key)
            if f is None:
                continue
            origin, seq, hops, ids, vals = f
            nxt = groups[(g + 1) % G]
            assert nxt.execute_command("PS.APPLYDELTA", key, "ID", origin, seq, ids, vals,
                                       "HOPS", hops) == 1
            assert x.execute_command("PS.DELTAFWDACK", key, origin, seq) == 1
            moved = True


def test_three_groups_end_with_the_same_rows_and_exact_accounting(make_server):
    groups = [make_server().client() for _ in range(3)]
    for g, x in enumerate(groups):
        table(x)
        x.execute_command("PS.RING", "e", "TRACK", "g%d" % g)
    rng = np.random.default_rng(5)
    want = {}
    for step in range(12):
        for x in groups:
            ids = sorted(set(int(i) for i in rng.integers(0, 30, 4)))
            g = rng.integers(-3, 4, (len(ids), DIM)).astype(np.float32)
            push(x, ids, g)
            for i, row in zip(ids, g):
                want[i] = want.get(i, np.zeros(DIM, np.float32)) - row
        if step % 4 == 3:
            agent_round(groups)
    agent_round(groups)
    every = sorted(want)
    expect = np.array([want[i] for i in every], dtype=np.float32)
    for x in groups:
        assert np.array_equal(rows(x, every), expect)
        i = ring_info(x)
        assert (i["ring_accumulated"], i["ring_lag"], i["ring_base_rows"]) == (0, 0, 0)
    for g, x in enumerate(groups):
        taken = ring_info(x)["ring_take_seq"]
        for h, y in enumerate(groups):
            if h != g:
                marks = {o[0]: (o[1], o[2]) for o in ring_info(y)["ring_origins"]}
                assert marks[b"g%d" % g] == (taken, taken)   # every take applied once here


def test_a_delta_creates_missing_rows_from_the_tables_init(make_server):
    a, b = [make_server().client() for _ in range(2)]
    for g, x in enumerate((a, b)):
        table(x, "e", "INIT", "NORMAL", 0, 0.5, "SEED", 17)
        x.execute_command("PS.RING", "e", "TRACK", "g%d" % g)
    before_b = rows(b, [42])                           # unknown: its initial values
    assert np.array_equal(before_b, rows(a, [42]))
    push(a, [42], [[1, 2, 3, 4]])
    seq, _, ids, vals, _ = a.execute_command("PS.DELTATAKE", "e")
    assert b.execute_command("PS.APPLYDELTA", "e", "ID", "g0", seq, ids, vals) == 1
    assert np.array_equal(rows(b, [42]), before_b + from_f32(vals).reshape(1, DIM))
    assert info(b, "e")["rows"] == 1
    # A resend, the own origin and a repeat are ignored: nothing changes.
    d = digest(b)
    assert b.execute_command("PS.APPLYDELTA", "e", "ID", "g0", seq, ids, vals) == 0
    assert b.execute_command("PS.APPLYDELTA", "e", "ID", "g1", 5, ids, vals) == 0
    assert digest(b) == d


def test_forward_queue_and_maxlag(r):
    table(r)
    r.execute_command("PS.RING", "e", "TRACK", "g1", "MAXQUEUE", 1, "MAXLAG", 2)
    one = f32(np.ones(DIM))
    assert r.execute_command("PS.APPLYDELTA", "e", "ID", "g0", 1, ids_blob([5]), one, "HOPS", 2) == 1
    before = digest(r)
    assert err(r, "PS.APPLYDELTA", "e", "ID", "g2", 1, ids_blob([5]), one,
               "HOPS", 1).startswith("BACKLOG")
    assert digest(r) == before
    assert r.execute_command("PS.DELTAFWD", "e") == [b"g0", 1, 1, ids_blob([5]), one]
    assert r.execute_command("PS.DELTAFWDACK", "e", "g0", 1) == 1
    assert r.execute_command("PS.DELTAFWD", "e") is None
    push(r, [1], np.ones((1, DIM)))
    v2 = r.execute_command("PS.PUSHGRAD", "e", one, "IDS", ids_blob([2]), "ID", "w", 1)
    before = digest(r)
    assert err(r, "PS.PUSHGRAD", "e", one, "IDS", ids_blob([3])).startswith("BACKLOG")
    assert digest(r) == before and info(r, "e")["ring_lag_refusals"] == 1
    # A duplicate is answered as one (the version its push made), not refused.
    assert r.execute_command("PS.PUSHGRAD", "e", one, "IDS", ids_blob([2]), "ID", "w", 1) == v2
    assert digest(r) == before
    seq = r.execute_command("PS.DELTATAKE", "e")[0]
    assert r.execute_command("PS.DELTAACK", "e", seq) == 1
    assert info(r, "e")["ring_lag"] == 0
    push(r, [3], np.ones((1, DIM)))


BAD = {
    "unsorted ids": (["PS.APPLYDELTA", "e", "ID", "g1", 1, ids_blob([4, 3]), f32(np.ones(2 * DIM))],
                     "ERR delta indices"),
    "duplicate ids": (["PS.APPLYDELTA", "e", "ID", "g1", 1, ids_blob([3, 3]),
                       f32(np.ones(2 * DIM))], "ERR delta indices"),
    "short row": (["PS.APPLYDELTA", "e", "ID", "g1", 1, ids_blob([3]), f32(np.ones(DIM - 1))],
                  "ERR a table delta"),
    "ids not u64": (["PS.APPLYDELTA", "e", "ID", "g1", 1, b"\x01\x02\x03", f32(np.ones(DIM))],
                    "ERR a table delta"),
    "no rows": (["PS.APPLYDELTA", "e", "ID", "g1", 1, b"", b""], "ERR a delta has"),
    "non-finite": (["PS.APPLYDELTA", "e", "ID", "g1", 1, ids_blob([3]),
                    f32([1, np.nan, 0, 0])], "ERR delta values must be finite"),
    "sum not finite": (["PS.APPLYDELTA", "e", "ID", "g1", 1, ids_blob([1]),
                        f32([3e38, 0, 0, 0])], "ERR delta values must be finite"),
    "bad origin": (["PS.APPLYDELTA", "e", "ID", "g 1", 1, ids_blob([3]), f32(np.ones(DIM))],
                   "ERR an origin"),
    "gap": (["PS.APPLYDELTA", "e", "ID", "g1", 5, ids_blob([3]), f32(np.ones(DIM)), "PREV", 4],
            "GAP "),
    "join": (["PS.RING", "e", "JOIN", "g0", f32(np.ones(DIM))], "ERR PS.RING JOIN copies a tensor"),
    "other origin": (["PS.RING", "e", "TRACK", "g9"], "ERR the tensor is ring-tracked under"),
    "capacity": (["PS.CONFIG", "e", "CAPACITY", 10], "ERR a ring-tracked table keeps its rows"),
    "ttl": (["PS.CONFIG", "e", "TTL", 10], "ERR a ring-tracked table keeps its rows"),
    "evict": (["PS.EVICT", "e", "AGE", 1], "ERR a ring-tracked table keeps its rows"),
    "push non-finite": (["PS.PUSHGRAD", "e", f32([np.inf] * DIM), "IDS", ids_blob([99])], "ERR"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_is_refused_and_changes_nothing(r, name):
    table(r)
    r.execute_command("PS.RING", "e", "TRACK", "g0")
    push(r, [1], [[-3e38, 0, 0, 0]])                  # row 1 holds 3e38
    before, view = digest(r), ring_info(r)
    args, want = BAD[name]
    assert err(r, *args).startswith(want)
    assert digest(r) == before and ring_info(r) == view


def test_tables_that_cannot_be_tracked(r):
    table(r, "c", "CAPACITY", 100)
    table(r, "t", "TTL", 100)
    table(r, "f", "OPTIM", "FTRL")
    assert err(r, "PS.RING", "c", "TRACK", "g0").startswith("ERR a ring-tracked table keeps")
    assert err(r, "PS.RING", "t", "TRACK", "g0").startswith("ERR a ring-tracked table keeps")
    assert err(r, "PS.RING", "f", "TRACK", "g0").startswith("ERR an FTRL table")
    table(r)
    assert err(r, "PS.DELTATAKE", "e").startswith("ERR the tensor is not ring-tracked")
    assert r.execute_command("PS.RING", "e", "STATE") == [None, 0, None, []]
    assert "ring_origin" not in info(r, "e")


def build_table_state(r):
    """Every part of a table's ring state: base rows, a pending take, marks of two origins,
    a forward entry, accumulated change, MAXLAG with a refused push, a created row."""
    table(r, "e", "INIT", "UNIFORM", -1, 1, "SEED", 3)
    r.execute_command("PS.RING", "e", "TRACK", "g1", "MAXQUEUE", 1 << 20, "MAXLAG", 3)
    push(r, [1, 2, 3], np.arange(3 * DIM).reshape(3, DIM))
    r.execute_command("PS.DELTATAKE", "e", "SEQFLOOR", 7, "MAXELEMS", 2)
    r.execute_command("PS.APPLYDELTA", "e", "ID", "g0", 4, ids_blob([1, 50]),
                      f32(np.full(2 * DIM, 0.5)), "HOPS", 1)
    r.execute_command("PS.APPLYDELTA", "e", "ID", "g2", 9, ids_blob([6]), f32(np.ones(DIM)))
    push(r, [3, 4], np.ones((2, DIM)))
    push(r, [5], np.ones((1, DIM)))
    assert err(r, "PS.PUSHGRAD", "e", f32(np.ones(DIM)), "IDS", ids_blob([8])).startswith("BACKLOG")


def view(r):
    return (r.execute_command("PS.RING", "e", "STATE")[1:], r.execute_command("PS.DELTAFWD", "e"),
            ring_info(r))


def test_replica_and_aof_replay_hold_the_same_table_ring_state(make_server, make_replica):
    s = make_server(args=["--appendonly", "yes", "--appendfsync", "always"])
    rep = make_replica(s)
    r = s.client()
    build_table_state(r)
    r.execute_command("PS.DELTATAKE", "e")                # answered again: not replicated
    psserver.wait_for_replication(s, [rep])
    assert digest(rep.client()) == digest(r)
    v, before = view(r), digest(r)
    s.restart(timeout=30)
    r = s.client()
    assert digest(r) == before and view(r) == v
    assert r.execute_command("PS.DELTATAKE", "e")[0] == 7
    assert r.execute_command("PS.DELTAACK", "e", 7) == 1
    assert info(r, "e")["ring_lag"] == 2


def test_rdb_reload_aof_rewrite_and_copy_keep_the_table_ring_state(make_server):
    s = make_server(args=["--appendonly", "yes", "--aof-use-rdb-preamble", "no",
                          "--auto-aof-rewrite-percentage", "0"])
    r = s.client()
    build_table_state(r)
    table(r, "plain")
    v, before, plain = view(r), digest(r), digest(r, "plain")
    mem = r.memory_usage("e")
    r.execute_command("DEBUG", "RELOAD")
    assert digest(r) == before and view(r) == v and digest(r, "plain") == plain
    r.bgrewriteaof()
    psserver.wait_until(lambda: not r.info("persistence")["aof_rewrite_in_progress"] and
                        not r.info("persistence")["aof_rewrite_scheduled"], timeout=30,
                        what="AOF rewrite")
    s.restart(timeout=30)
    r = s.client()
    assert digest(r) == before and view(r) == v and digest(r, "plain") == plain
    assert r.memory_usage("e") == mem
    r.execute_command("COPY", "e", "e2")
    assert digest(r, "e2") == before
    # UNTRACK drops the state and keeps the rows; the digest is the untracked table's.
    vals = rows(r, [1, 2, 3, 50])
    assert r.execute_command("PS.RING", "e2", "UNTRACK") == 1
    assert r.execute_command("PS.RING", "e2", "UNTRACK") == 0
    assert "ring_origin" not in info(r, "e2") and np.array_equal(rows(r, [1, 2, 3, 50], "e2"), vals)
    assert r.memory_usage("e2") < mem


def test_restore_ring_parts_are_validated(r):
    table(r)
    before = digest(r)
    for args in (["ERING", 0, 10, b"x" * 10], ["ERING", 0, 4, b"x" * 5], ["ERING", 1, 4, b"x"],
                 ["ERING", 0, 0, b"x"], ["ERING", -1, 4, b"x"]):
        assert err(r, "PS._RESTORE", "e", *args).startswith("ERR")
    assert digest(r) == before
