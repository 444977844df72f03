"""The module side of the ring protocol (issue #22; docs/commands.md "Ring"): PS.RING
TRACK / STATE / JOIN, PS.DELTATAKE / PS.DELTAACK, PS.APPLYDELTA, PS.DELTAFWD /
PS.DELTAFWDACK and the ring_* fields of PS.INFO, against real servers: a take pending
until acknowledged, nothing lost or doubled between groups (SGD lr 1 with integer
gradients makes every sum exact), duplicates and the own origin ignored, the forward
queue and its BACKLOG bound, JOIN, errors that change nothing, and the ring state kept
bit-identical by a replica, an AOF replay, an RDB reload and an AOF rewrite."""

import numpy as np
import pytest

import psserver
from pshelpers import f32, from_f32, info, pull_np

N = 8


def u32(a):
    return np.asarray(a, dtype="<u4").tobytes()


def tensor(r, key="w", start=None):
    start = np.arange(N, dtype=np.float32) if start is None else start
    assert r.execute_command("PS.CREATE", key, "SHAPE", N, "DATA", f32(start), "LR", 1) == b"OK"
    return key


def grad(r, g, key="w"):
    return r.execute_command("PS.PUSHGRAD", key, f32(np.asarray(g, dtype=np.float32)))


def digest(r, key="w"):
    return psserver.digest(r, key)


def err(r, *args):
    """The error reply of a command, verbatim (with its code), through a raw client."""
    kw = r.connection_pool.connection_kwargs
    with psserver.RawClient(kw["port"], kw["host"]) as raw:
        rep = raw.call(*args)
    assert isinstance(rep, psserver.RespError), rep
    return str(rep)


def test_take_is_pending_until_acked_and_nothing_is_dropped(r):
    start = np.arange(N, dtype=np.float32)
    tensor(r)
    assert r.execute_command("PS.RING", "w", "TRACK", "g0") == 1
    assert r.execute_command("PS.RING", "w", "TRACK", "g0", "MAXQUEUE", 4096) == 0
    assert r.execute_command("PS.DELTATAKE", "w") == 0                 # nothing changed yet
    grad(r, [0, 1, 0, -2, 0, 0, 5, 0])                                 # SGD lr 1: w -= g
    seq, count, idx, vals, left = r.execute_command("PS.DELTATAKE", "w", "MAXELEMS", 2)
    assert (seq, count, left) == (1, 2, 1)                             # |5| and |-2|; 1 stays
    assert list(np.frombuffer(idx, "<u4")) == [3, 6]
    assert list(from_f32(vals)) == [2, -5]
    grad(r, [1, 0, 0, 0, 0, 0, 0, 0])
    assert r.execute_command("PS.DELTATAKE", "w") == [seq, count, idx, vals, 2]  # answered again
    assert r.execute_command("PS.DELTAACK", "w", 7) == 0
    assert r.execute_command("PS.DELTAACK", "w", 1) == 1
    assert r.execute_command("PS.DELTAACK", "w", 1) == 0
    seq2, count2, idx2, vals2, left2 = r.execute_command("PS.DELTATAKE", "w", "SEQFLOOR", 10)
    assert (seq2, count2, left2) == (10, 2, 0)
    assert list(np.frombuffer(idx2, "<u4")) == [0, 1] and list(from_f32(vals2)) == [-1, -1]
    # taken (both takes) + still accumulated == values - start, exactly
    _, now = pull_np(r, "w")
    taken = np.zeros(N, np.float32)
    taken[[3, 6]] += [2, -5]
    taken[[0, 1]] += [-1, -1]
    assert np.array_equal(taken, now - start)
    i = info(r, "w")
    assert (i["ring_origin"], i["ring_take_seq"], i["ring_pending_seq"]) == (b"g0", 10, 10)
    assert (i["ring_pending_elems"], i["ring_accumulated"], i["ring_maxqueue"]) == (2, 0, 4096)


def test_threshold_keeps_small_changes_accumulated(r):
    tensor(r, start=np.full(N, 100, dtype=np.float32))
    r.execute_command("PS.RING", "w", "TRACK", "g0")
    grad(r, [0.5, -3, 0, 0.75, 0, 0, 0, 2])  # |d| > 1% of |w| (about 1): 3 and 2 travel
    _, count, idx, _, left = r.execute_command("PS.DELTATAKE", "w", "THRESHOLD", 0.01)
    assert (count, list(np.frombuffer(idx, "<u4")), left) == (2, [1, 7], 2)


def three_groups(make_server):
    rs = []
    for g in range(3):
        c = make_server().client()
        tensor(c)
        assert c.execute_command("PS.RING", "w", "TRACK", "g%d" % g) == 1
        rs.append(c)
    return rs


def test_a_ring_of_three_applies_each_delta_once_everywhere(make_server):
    rs = three_groups(make_server)
    start = np.arange(N, dtype=np.float32)
    grads = [[1, 0, 0, 0, 0, 0, 0, 2], [0, 3, 0, 0, 0, 0, 0, -1], [0, 0, 0, 4, 0, 0, 0, 0]]
    for c, g in zip(rs, grads):
        grad(c, g)
    # The agent's round: each group hands its take to its successor with HOPS G-2 = 1,
    # the successor forwards it once more with the entry's hops (0).
    takes = [c.execute_command("PS.DELTATAKE", "w") for c in rs]
    for g, (seq, _, idx, vals, _) in enumerate(takes):
        succ = rs[(g + 1) % 3]
        args = ["PS.APPLYDELTA", "w", "ID", "g%d" % g, seq, idx, vals, "HOPS", 1]
        assert succ.execute_command(*args) == 1
        assert succ.execute_command(*args) == 0                   # a resend: applied once
    for g, c in enumerate(rs):
        origin, seq, hops, idx, vals = c.execute_command("PS.DELTAFWD", "w")
        assert hops == 0 and origin == b"g%d" % ((g - 1) % 3)
        nxt = rs[(g + 1) % 3]
        assert nxt.execute_command("PS.APPLYDELTA", "w", "ID", origin, seq, idx, vals,
                                   "HOPS", hops) == 1
        assert c.execute_command("PS.DELTAFWDACK", "w", "nope", seq) == 0
        assert c.execute_command("PS.DELTAFWDACK", "w", origin, seq) == 1
        assert c.execute_command("PS.DELTAFWD", "w") is None
    # Full circle: the own origin is ignored.
    seq, _, idx, vals, _ = takes[0]
    assert rs[0].execute_command("PS.APPLYDELTA", "w", "ID", "g0", seq, idx, vals) == 0
    want = start - np.sum(np.asarray(grads, np.float32), axis=0)
    for g, c in enumerate(rs):
        assert c.execute_command("PS.DELTAACK", "w", takes[g][0]) == 1
        assert np.array_equal(pull_np(c, "w")[1], want)
        assert c.execute_command("PS.DELTATAKE", "w") == 0       # received deltas are not own
        st = c.execute_command("PS.RING", "w", "STATE")
        assert st[2] == b"g%d" % g and st[3][0] == [b"g%d" % g, 1, 0]    # own origin first
        assert sorted(st[3][1:]) == sorted([[b"g%d" % o, 1, 1] for o in range(3) if o != g])
        assert info(c, "w")["ring_applied"] == 2


def test_forward_queue_is_bounded_backlog_changes_nothing(r):
    tensor(r)
    r.execute_command("PS.RING", "w", "TRACK", "g1", "MAXQUEUE", 100)   # 64 + 8 per element
    big = (u32(range(4)), f32(np.ones(4)))
    assert r.execute_command("PS.APPLYDELTA", "w", "ID", "g0", 1, *big, "HOPS", 2) == 1  # empty queue
    v = pull_np(r, "w")[0]
    assert err(r, "PS.APPLYDELTA", "w", "ID", "g0", 2, u32([0]), f32([1]), "HOPS", 1).startswith(
        "BACKLOG ")
    assert pull_np(r, "w")[0] == v and info(r, "w")["ring_fwd_entries"] == 1
    # HOPS 0 needs no queue; a duplicate is ignored even at the bound.
    assert r.execute_command("PS.APPLYDELTA", "w", "ID", "g0", 2, u32([0]), f32([1])) == 1
    assert r.execute_command("PS.APPLYDELTA", "w", "ID", "g0", 1, *big, "HOPS", 2) == 0
    assert r.execute_command("PS.DELTAFWDACK", "w", "g0", 1) == 1
    assert r.execute_command("PS.APPLYDELTA", "w", "ID", "g0", 3, u32([0]), f32([1]), "HOPS", 1) == 1
    i = info(r, "w")
    assert (i["ring_fwd_entries"], i["ring_fwd_bytes"], i["ring_applied"]) == (1, 72, 3)


def test_join_takes_a_neighbours_copy_and_marks(make_server):
    a, b = make_server().client(), make_server().client()
    tensor(a)
    tensor(b, start=np.zeros(N, np.float32))
    a.execute_command("PS.RING", "w", "TRACK", "g0")
    a.execute_command("PS.APPLYDELTA", "w", "ID", "g2", 5, u32([1]), f32([3]))
    vals, version, origin, marks = a.execute_command("PS.RING", "w", "STATE")
    assert (version, origin, marks) == (1, b"g0", [[b"g0", 0, 0], [b"g2", 5, 1]])
    args = ["PS.RING", "w", "JOIN", "g1", vals]
    for o, seq, _ in marks:
        args += ["FROM", o, seq]
    assert b.execute_command(*args, "FROM", "g1", 9) == 1
    assert np.array_equal(pull_np(b, "w")[1], from_f32(vals))
    assert b.execute_command("PS.RING", "w", "STATE")[2:] == \
        [b"g1", [[b"g1", 9, 0], [b"g0", 0, 0], [b"g2", 5, 0]]]
    assert b.execute_command("PS.APPLYDELTA", "w", "ID", "g2", 5, u32([1]), f32([3])) == 0
    i = info(b, "w")
    assert (i["ring_take_seq"], i["ring_accumulated"]) == (9, 0)     # own FROM raises take_seq
    grad(b, [1] + [0] * (N - 1))
    assert b.execute_command("PS.DELTATAKE", "w")[0] == 10


@pytest.mark.parametrize("args,want", [
    (["PS.RING", "w", "TRACK", "bad name"], "ERR an origin"),
    (["PS.RING", "w", "TRACK", "x" * 65], "ERR an origin"),
    (["PS.RING", "w", "TRACK", "g1"], "ERR the tensor is ring-tracked under another origin"),
    (["PS.RING", "w", "NOPE"], "ERR unknown PS.RING subcommand"),
    (["PS.RING", "w", "JOIN", "g0", b"\0" * 4], "ERR values has 4 bytes"),
    (["PS.RING", "w", "JOIN", "g0", f32(np.zeros(N)), "FROM", "a", 1, "FROM", "a", 2],
     "ERR FROM names an origin more than once"),
    (["PS.APPLYDELTA", "w", "ID", "g1", 1, u32([8]), f32([1])], "ERR delta indices"),
    (["PS.APPLYDELTA", "w", "ID", "g1", 1, u32([2, 2]), f32([1, 1])], "ERR delta indices"),
    (["PS.APPLYDELTA", "w", "ID", "g1", 1, u32([2, 1]), f32([1, 1])], "ERR delta indices"),
    (["PS.APPLYDELTA", "w", "ID", "g1", 1, u32([1]), f32([1, 1])], "ERR a delta has"),
    (["PS.APPLYDELTA", "w", "ID", "g1", 1, b"", b""], "ERR a delta has"),
    (["PS.APPLYDELTA", "w", "ID", "g1", 1, u32(range(9)), f32(np.ones(9))], "ERR a delta has"),
    (["PS.APPLYDELTA", "w", "ID", "g1", 1, u32([1]), f32([np.nan])], "ERR delta values"),
    (["PS.APPLYDELTA", "w", "ID", "g1", 1, u32([1]), f32([3e38])], "ERR delta values"),
    (["PS.APPLYDELTA", "w", "ID", "g1", 0, u32([1]), f32([1])], "ERR seq"),
    (["PS.APPLYDELTA", "w", "XX", "g1", 1, u32([1]), f32([1])], "ERR PS.APPLYDELTA needs ID"),
    (["PS.APPLYDELTA", "w", "ID", "g1", 1, u32([1]), f32([1]), "HOPS", 65], "ERR HOPS"),
    (["PS.APPLYDELTA", "w", "ID", "g1", 2 ** 63, u32([1]), f32([1])], "ERR seq"),
    (["PS.APPLYDELTA", "w", "ID", "g1", 5, u32([1]), f32([1]), "PREV", 5], "ERR PREV"),
    (["PS.APPLYDELTA", "w", "ID", "g1", 5, u32([1]), f32([1]), "PREV", -1], "ERR PREV"),
    (["PS.APPLYDELTA", "w", "ID", "g1", 5, u32([1]), f32([1]), "PREV", 1, "PREV", 1],
     "ERR option 'PREV' given more than once"),
    (["PS.APPLYDELTA", "w", "ID", "g1", 5, u32([1]), f32([1]), "HOPS", 1, "PREV"],
     "ERR wrong number of arguments"),
    (["PS.APPLYDELTA", "w", "ID", "g1", 5, u32([1]), f32([1]), "PREV", 4], "GAP "),
    (["PS.RING", "w", "JOIN", "g0", f32(np.zeros(N)), "FROM", "g0", 2 ** 63], "ERR a ring seq"),
    (["PS.DELTATAKE", "w", "THRESHOLD", -1], "ERR THRESHOLD"),
    (["PS.DELTATAKE", "w", "MAXELEMS", 0], "ERR MAXELEMS"),
])
def test_bad_input_is_refused_and_changes_nothing(r, args, want):
    tensor(r, start=np.full(N, 3e38, dtype=np.float32))
    r.execute_command("PS.RING", "w", "TRACK", "g0")
    before = digest(r)
    assert err(r, *args).startswith(want)
    assert digest(r) == before


def test_a_delta_past_a_gap_is_refused_until_the_group_rejoins(make_server, make_replica):
    """Issue 22's lost delta at the module: group b missed origin a's take 2 (out of the
    ring while a acknowledged it) and then receives take 3 (PREV 2). It is refused GAP,
    changes nothing and is not replicated; b's mark of a stays below what a acknowledged
    (what the agents' stale check reads); take 2 then 3 in order still apply (a gap that
    fills); a JOIN from c (which has both) makes b whole, and every resend is a repeat.
    Without PREV (an old agent) the same take 3 would apply and take 2 be lost."""
    srv = [make_server() for _ in range(3)]
    rep = make_replica(srv[1])
    a, b, c = [s.client() for s in srv]
    for g, x in enumerate((a, b, c)):
        tensor(x)
        assert x.execute_command("PS.RING", "w", "TRACK", "g%d" % g) == 1
    takes = []
    for g in ([1, 0, 0, 0, 0, 0, 0, 2], [0, 3, 0, 0, 0, 0, 0, -1], [0, 0, 0, 4, 0, 0, 0, 0]):
        grad(a, g)
        t = a.execute_command("PS.DELTATAKE", "w")
        assert a.execute_command("PS.DELTAACK", "w", t[0]) == 1
        takes.append(t)
    assert [t[0] for t in takes] == [1, 2, 3]

    def apply(r, t, *extra):
        return r.execute_command("PS.APPLYDELTA", "w", "ID", "g0", t[0], t[2], t[3], *extra)
    for t in takes[:2]:
        assert apply(c, t, "PREV", t[0] - 1) == 1
    assert apply(b, takes[0], "PREV", 0) == 1
    before, view = digest(b), ring_view(b)
    e = err(b, "PS.APPLYDELTA", "w", "ID", "g0", 3, takes[2][2], takes[2][3], "HOPS", 1,
            "PREV", 2)
    assert e.startswith("GAP ") and "PREV" in e, e
    assert digest(b) == before and ring_view(b) == view
    assert view[2]["ring_fwd_entries"] == 0
    _, rows = ring_rows(b)
    assert rows["g0"][0] == 1                               # below a's acknowledged 2: stale
    # A duplicate is still a repeat whatever its PREV.
    assert apply(b, takes[0], "PREV", 0) == 0
    # A gap that fills: 2 then 3, in order.
    d = make_server().client()
    tensor(d)
    d.execute_command("PS.RING", "w", "TRACK", "g3")
    assert apply(d, takes[0], "PREV", 0) == 1
    assert err(d, "PS.APPLYDELTA", "w", "ID", "g0", 3, takes[2][2], takes[2][3], "PREV",
               2).startswith("GAP ")
    assert apply(d, takes[1], "PREV", 1) == 1 and apply(d, takes[2], "PREV", 2) == 1
    # b rejoins from c (its base and marks), then every resend is a repeat.
    assert apply(c, takes[2], "PREV", 2) == 1
    base, _, origin, marks = c.execute_command("PS.RING", "w", "STATE")
    frm = [x for m in marks for x in (b"FROM", m[0], m[1])]
    assert b.execute_command("PS.RING", "w", "JOIN", "g1", base, *frm, "KEEPOWN") == 1
    for t in takes:
        assert apply(b, t, "PREV", t[0] - 1) == 0
    want = np.arange(N, dtype=np.float32) - np.float32(
        [1, 3, 0, 4, 0, 0, 0, 1])
    for r in (b, c, d):
        assert np.array_equal(pull_np(r, "w")[1], want)
    # The old way (no PREV) papers the gap over: 3 applies, 2 is then a "duplicate".
    o = make_server().client()
    tensor(o)
    o.execute_command("PS.RING", "w", "TRACK", "g4")
    assert apply(o, takes[0]) == 1 and apply(o, takes[2]) == 1 and apply(o, takes[1]) == 0
    assert not np.array_equal(pull_np(o, "w")[1], want)
    psserver.wait_for_replication(srv[1], [rep])          # the refusals were not replicated
    assert digest(rep.client()) == digest(b)


def ring_rows(r):
    i = info(r, "w")
    return i, {row[0].decode(): (int(row[1]), int(row[2])) for row in i["ring_origins"]}


def test_untracked_tables_and_other_types(r):
    tensor(r)
    assert err(r, "PS.DELTATAKE", "w").startswith("ERR the tensor is not ring-tracked")
    assert err(r, "PS.APPLYDELTA", "w", "ID", "g1", 1, u32([1]), f32([1])).startswith("ERR the tensor is not ring-tracked")
    assert r.execute_command("PS.RING", "w", "STATE")[2:] == [None, []]
    assert "ring_origin" not in info(r, "w")
    r.execute_command("PS.CREATE", "t", "EMBEDDING", "DIM", 4)
    assert r.execute_command("PS.RING", "t", "TRACK", "g0") == 1   # tables: test_ring_table_module.py
    r.execute_command("PS.CREATE", "acc", "SHAPE", 4, "OPTIM", "ACCUM")
    assert err(r, "PS.RING", "acc", "TRACK", "g0").startswith("ERR an ACCUM tensor")
    r.set("s", "x")
    assert err(r, "PS.DELTAFWD", "s").startswith("WRONGTYPE")
    assert err(r, "PS.RING", "nokey", "STATE").startswith("ERR no such key")


def test_at_most_64_origins(r):
    tensor(r)
    r.execute_command("PS.RING", "w", "TRACK", "me")
    for k in range(64):
        assert r.execute_command("PS.APPLYDELTA", "w", "ID", "o%d" % k, 1, u32([0]), f32([1])) == 1
    before = digest(r)
    assert err(r, "PS.APPLYDELTA", "w", "ID", "o64", 1, u32([0]), f32([1])).startswith("ERR too many ring origins")
    assert digest(r) == before
    assert r.execute_command("PS.APPLYDELTA", "w", "ID", "o3", 2, u32([0]), f32([1])) == 1


def build_ring_state(r):
    """A tracked tensor with every part of the ring state: a pending take, marks of two
    origins, two forward entries (one not yet passed on), a snapshot, accumulated change, and
    MAXLAG 3 with the take recording 1 own push and a push refused at the bound."""
    tensor(r)
    r.execute_command("PS.RING", "w", "TRACK", "g1", "MAXQUEUE", 1 << 20, "MAXLAG", 3)
    grad(r, [1, 0, 2, 0, 0, 0, 0, 3])
    r.execute_command("PS.DELTATAKE", "w", "SEQFLOOR", 7, "MAXELEMS", 2)
    r.execute_command("PS.APPLYDELTA", "w", "ID", "g0", 4, u32([0, 5]), f32([1.5, -2]), "HOPS", 1)
    r.execute_command("PS.APPLYDELTA", "w", "ID", "g2", 9, u32([6]), f32([0.25]), "HOPS", 2)
    r.execute_command("PS.SNAPSHOT", "w", "s1")
    grad(r, [0, 0.5, 0, 0, 0, 0, 0, 0])
    grad(r, [0, 0, 0, 0.25, 0, 0, 0, 0])
    assert err(r, "PS.PUSHGRAD", "w", f32(np.ones(N))).startswith("BACKLOG")  # lag 3: refused


def ring_view(r, state=True):
    """What the agent sees of the ring state (STATE is a write-flagged subcommand: not on a
    replica, whose view is PS.INFO and PS.DELTAFWD)."""
    i = info(r, "w")
    return (r.execute_command("PS.RING", "w", "STATE") if state else None,
            r.execute_command("PS.DELTAFWD", "w"),
            {k: v for k, v in i.items() if k.startswith("ring_") and k != "ring_lag_refusals"})


def test_replica_and_aof_replay_hold_the_same_ring_state(make_server, make_replica):
    s = make_server(args=["--appendonly", "yes", "--appendfsync", "always"])
    rep = make_replica(s)
    r = s.client()
    build_ring_state(r)
    r.execute_command("PS.DELTATAKE", "w")                  # answered again: not replicated
    r.execute_command("PS.DELTAACK", "w", 99)               # no such take: not replicated
    r.execute_command("PS.DELTAFWDACK", "w", "g0", 4)
    psserver.wait_for_replication(s, [rep])
    rc = rep.client()
    assert digest(rc) == digest(r)
    assert ring_view(rc, state=False) == ring_view(r, state=False)
    view, before = ring_view(r), digest(r)
    s.restart(timeout=30)                                   # replays the AOF
    r = s.client()
    assert digest(r) == before and ring_view(r) == view
    assert r.execute_command("PS.DELTATAKE", "w")[0] == 7   # the pending take came back
    assert (view[2]["ring_maxlag"], view[2]["ring_lag"]) == (3, 3)
    assert r.execute_command("PS.DELTAACK", "w", 7) == 1     # it recorded 1 own push
    assert info(r, "w")["ring_lag"] == 2


def test_rdb_reload_and_aof_rewrite_keep_the_ring_state(make_server):
    s = make_server(args=["--appendonly", "yes", "--aof-use-rdb-preamble", "no",
                          "--auto-aof-rewrite-percentage", "0"])
    r = s.client()
    build_ring_state(r)
    r.execute_command("PS.CREATE", "plain", "SHAPE", 3)
    view, before, plain = ring_view(r), digest(r), digest(r, "plain")
    r.execute_command("DEBUG", "RELOAD")
    assert digest(r) == before and ring_view(r) == view and digest(r, "plain") == plain
    r.bgrewriteaof()
    psserver.wait_until(lambda: not r.info("persistence")["aof_rewrite_in_progress"] and
                        not r.info("persistence")["aof_rewrite_scheduled"], timeout=30,
                        what="AOF rewrite")
    s.restart(timeout=30)
    r = s.client()
    assert digest(r) == before and ring_view(r) == view and digest(r, "plain") == plain
    assert (view[2]["ring_maxlag"], view[2]["ring_lag"], view[2]["ring_own_pushes"]) == (3, 3, 3)
    # COPY and RENAME carry the ring state with the value; DEL drops it.
    r.execute_command("COPY", "w", "w2")
    assert digest(r, "w2") == before
    r.rename("w", "w3")
    assert digest(r, "w3") == before
    r.delete("w3")
    tensor(r)
    assert "ring_origin" not in info(r, "w")
    # UNTRACK drops the state and keeps the values (replicated, persisted as untracked).
    vals = pull_np(r, "w2")[1]
    assert r.execute_command("PS.RING", "w2", "UNTRACK") == 1
    assert r.execute_command("PS.RING", "w2", "UNTRACK") == 0
    assert "ring_origin" not in info(r, "w2") and np.array_equal(pull_np(r, "w2")[1], vals)
    r.execute_command("DEBUG", "RELOAD")
    assert "ring_origin" not in info(r, "w2")


def test_create_and_config_keep_the_ring_state(r):
    build_ring_state(r)
    before = digest(r)
    assert err(r, "PS.CREATE", "w", "SHAPE", N).startswith("BUSYKEY")
    assert r.execute_command("PS.CREATE", "w", "SHAPE", N, "NX") is None
    assert digest(r) == before
    r.execute_command("PS.CONFIG", "w", "LR", 0.5)
    assert info(r, "w")["ring_origin"] == b"g1" and info(r, "w")["ring_take_seq"] == 7


def test_restore_ring_parts_are_validated(server):
    r = server.client()
    tensor(r)
    before = digest(r)
    bad = [
        ["RINGORIGIN", "x", 1, 1],                                  # not tracked yet
        ["RING", "bad name", 0, 0, 0, 0, 0, 0, 0],
        ["RING", "me", 3, 100, 0],                                  # the lag fields missing
        ["RINGDELTA", "FWD", "x", 1, 0, u32([1]), f32([1])],        # not tracked yet
        ["CHUNK", "RINGBASE", 0, 0, f32([1])],
    ]
    with server.raw() as raw:
        for args in bad:
            rep = raw.call("PS._RESTORE", "w", *args)
            assert isinstance(rep, psserver.RespError), args
        assert digest(r) == before
        for lag in ([(1 << 31) + 1, 0, 0, 0], [0, 2, 3, 0], [0, 2, 1, 3]):  # MAXLAG, marks > own
            rep = raw.call("PS._RESTORE", "w", "RING", "me", 3, 100, 0, *lag)
            assert isinstance(rep, psserver.RespError), lag
        assert "ring_origin" not in info(r, "w")                    # nothing left behind
        assert raw.call("PS._RESTORE", "w", "RING", "me", 3, 100, 0, 4, 9, 2, 5) == "OK"
        for args in (["RING", "me", 3, 100, 0, 0, 0, 0, 0],                  # twice
                     ["RINGORIGIN", "me", 1, 1],                             # own origin
                     ["RINGDELTA", "PENDING", "me", 4, 0, u32([1]), f32([1])],  # seq > take_seq
                     ["RINGDELTA", "FWD", "x", 1, 0, u32([9]), f32([1])],    # index >= len
                     ["RINGDELTA", "FWD", "x", 1, 0, u32([1]), f32([np.inf])],
                     ["RINGDELTA", "FWDMORE", "x", 1, 0, u32([1]), f32([1])],  # nothing to extend
                     ["RINGDELTA", "NOPE", "x", 1, 0, u32([1]), f32([1])]):
            rep = raw.call("PS._RESTORE", "w", *args)
            assert isinstance(rep, psserver.RespError), args
        assert raw.call("PS._RESTORE", "w", "RINGDELTA", "FWD", "x", 1, 0, u32([1]), f32([1])) == "OK"
        rep = raw.call("PS._RESTORE", "w", "RINGDELTA", "FWDMORE", "x", 1, 0, u32([1]), f32([1]))
        assert isinstance(rep, psserver.RespError)                   # indices must go on ascending
    i = info(r, "w")
    assert (i["ring_fwd_entries"], i["ring_maxlag"], i["ring_lag"], i["ring_own_pushes"]) == (1, 4, 7, 9)


# ---------------------------------------------------------------------------
# Crafted RDB payloads of a tracked tensor (PS_ENCVER_RING, module/type.c's layout after
# the snapshots): the DUMP builder of test_restore_crafted.py, the ring part appended.
# ---------------------------------------------------------------------------

def ring_items(flag=1, origin=b"me", take_seq=5, maxqueue=1000, applied=1, lag=(3, 7, 2),
               base=None, origins=((b"x", 3, 1),), norigins=None,
               pending=(5, [1, 4], [0.5, -1]), pend_own=4, fwd=((b"x", 3, 1, [2], [0.25]),),
               nfwd=None):
    """A 2x3 SGD tensor in the PS_ENCVER_RING layout with ring state; every field can be
    overridden. lag: (maxlag, own_pushes, acked_own); pending: (seq, idx, vals) or None,
    recording pend_own own pushes; fwd: (origin, seq, hops, idx, vals)."""
    from test_restore_crafted import S, U, accum_items
    items = accum_items((0,) * 11, optim="SGD") + [U(flag)]    # the encver 5 layout
    if flag != 1:
        return items
    items += [S(origin), U(take_seq), U(maxqueue), U(applied)] + [U(x) for x in lag]
    items.append(S(f32(np.zeros(6)) if base is None else base))
    items.append(U(len(origins) if norigins is None else norigins))
    for name, hwm, app in origins:
        items += [S(name), U(hwm), U(app)]
    if pending is None:
        items.append(U(0))
    else:
        seq, idx, vals = pending
        items += [U(len(idx)), U(seq), U(pend_own), S(u32(idx)), S(f32(vals))]
    items.append(U(len(fwd) if nfwd is None else nfwd))
    for name, seq, hops, idx, vals in fwd:
        items += [S(name), U(seq), U(hops), U(len(idx)), S(u32(idx)), S(f32(vals))]
    return items


RING_BAD = {
    "flag-2": dict(flag=2),
    "origin-empty": dict(origin=b""),
    "origin-space": dict(origin=b"a b"),
    "origin-65": dict(origin=b"x" * 65),
    "maxqueue-over-2^50": dict(maxqueue=(1 << 50) + 1),
    "base-short": dict(base=f32(np.zeros(5))),
    "maxlag-over-2^31": dict(lag=((1 << 31) + 1, 7, 2)),
    "acked-over-own": dict(lag=(3, 7, 8)),
    "pend-own-over-own": dict(pend_own=8),
    "origins-65": dict(origins=tuple((b"o%d" % k, 1, 1) for k in range(65))),
    "origins-count-more-than-present": dict(norigins=2),
    "origin-twice": dict(origins=((b"x", 1, 1), (b"x", 2, 1))),
    "origin-own": dict(origins=((b"me", 1, 1),)),
    "pending-seq-over-take-seq": dict(pending=(6, [1], [1])),
    "pending-seq-0": dict(pending=(0, [1], [1])),
    "pending-index-7": dict(pending=(5, [7], [1])),
    "pending-indices-down": dict(pending=(5, [4, 1], [1, 1])),
    "pending-nan": dict(pending=(5, [1], [np.nan])),
    "pending-over-length": dict(pending=(5, list(range(7)), [1] * 7)),
    "fwd-own-origin": dict(fwd=((b"me", 3, 0, [2], [1]),)),
    "fwd-hops-64": dict(fwd=((b"x", 3, 64, [2], [1]),)),
    "fwd-seq-0": dict(fwd=((b"x", 0, 0, [2], [1]),)),
    "fwd-empty": dict(fwd=((b"x", 3, 0, [], []),)),
    "fwd-inf": dict(fwd=((b"x", 3, 0, [2], [np.inf]),)),
    "fwd-count-more-than-present": dict(nfwd=2),
}


@pytest.fixture(scope="module")
def crafted(module_path):
    s = psserver.RedisServer(module=module_path, args=["--rdbcompression", "no"], name="ringc")
    yield s
    s.cleanup()


def test_crafted_ring_payloads_control_and_round_trip(crafted):
    from test_restore_crafted import build, parse
    c = crafted.client()
    c.flushall()
    with crafted.raw() as raw:
        assert raw.call("RESTORE", "w", "0", build(ring_items(), encver=6), "REPLACE") == "OK"
        # DUMP of the restored value parses back into the same items (the layout is right).
        assert parse(raw.call("DUMP", "w")) == (6, ring_items())
    i = info(c, "w")
    assert (i["ring_origin"], i["ring_take_seq"], i["ring_pending_seq"]) == (b"me", 5, 5)
    assert (i["ring_fwd_entries"], i["ring_fwd_bytes"], i["ring_applied"]) == (1, 72, 1)
    assert (i["ring_maxlag"], i["ring_lag"], i["ring_own_pushes"]) == (3, 5, 7)
    assert c.execute_command("PS.DELTAACK", "w", 5) == 1      # the pending take recorded 4
    assert info(c, "w")["ring_lag"] == 3
    assert c.execute_command("PS.DELTAFWD", "w")[:3] == [b"x", 3, 1]
    # An untracked tensor at encoding version 6: the v5 value and a trailing 0.
    with crafted.raw() as raw:
        assert raw.call("RESTORE", "p", "0", build(ring_items(flag=0), encver=6)) == "OK"
    assert "ring_origin" not in info(c, "p")


@pytest.mark.parametrize("name", sorted(RING_BAD))
def test_crafted_ring_payload_is_refused(crafted, name):
    from test_restore_crafted import build
    c = crafted.client()
    c.flushall()
    with crafted.raw() as raw:
        rep = raw.call("RESTORE", "w", "0", build(ring_items(**RING_BAD[name]), encver=6))
    assert crafted.is_alive(), crafted.log_tail()
    assert isinstance(rep, psserver.RespError) and str(rep).startswith("ERR"), (name, rep)
    assert c.exists("w") == 0


def agent_round(rs, threshold=0.0, maxelems=None, acked=None):
    """One round of the ring agent's protocol (ring_spec.md) over groups rs[g] = g<g>: take,
    hand to the successor with HOPS G-2, pass every forward entry on, ack a take once every
    other group's mark of it is there. Returns how many deltas moved."""
    G, moved = len(rs), 0
    for g, c in enumerate(rs):
        args = ["PS.DELTATAKE", "w", "THRESHOLD", threshold]
        if maxelems:
            args += ["MAXELEMS", maxelems]
        t = c.execute_command(*args)
        if t == 0:
            continue
        seq, _, idx, vals, _ = t
        moved += rs[(g + 1) % G].execute_command("PS.APPLYDELTA", "w", "ID", "g%d" % g, seq, idx,
                                                 vals, "HOPS", G - 2)
    for _ in range(G):                                   # G-1 hops reach everyone
        for g, c in enumerate(rs):
            while True:
                e = c.execute_command("PS.DELTAFWD", "w")
                if e is None:
                    break
                origin, seq, hops, idx, vals = e
                moved += rs[(g + 1) % G].execute_command("PS.APPLYDELTA", "w", "ID", origin, seq,
                                                         idx, vals, "HOPS", hops)
                assert c.execute_command("PS.DELTAFWDACK", "w", origin, seq) == 1
    for g, c in enumerate(rs):
        pend = info(c, "w")["ring_pending_seq"]
        if pend and all(dict((o, h) for o, h, _ in info(o_, "w")["ring_origins"]).get(
                b"g%d" % g, 0) >= pend for o_ in rs if o_ is not c):
            assert c.execute_command("PS.DELTAACK", "w", pend) == 1
    return moved


def test_barrier_leaves_groups_equal_within_the_float_bound(make_server):
    """Float data (SGD LR 0.1, random gradients), a significance filter and MAXELEMS while
    training, then a barrier: every group holds start - 0.1 * (all gradients) within the
    bound of docs/design.md "Ring state" ((2D + T + S) ulp(M) per element, S the local
    steps), and the groups agree within twice that."""
    rng = np.random.default_rng(5)
    start = rng.uniform(-1, 1, N).astype(np.float32)
    rs = []
    for g in range(3):
        c = make_server().client()
        tensor(c, start=start)
        c.execute_command("PS.CONFIG", "w", "LR", 0.1)
        c.execute_command("PS.RING", "w", "TRACK", "g%d" % g)
        rs.append(c)
    total = np.zeros(N, np.float64)
    steps, peak = 0, np.abs(start).astype(np.float64)
    for rnd in range(12):
        for c in rs:
            gr = rng.normal(0, 1, N).astype(np.float32)
            grad(c, gr)
            total += gr.astype(np.float64)
        steps += 1
        agent_round(rs, threshold=0.02, maxelems=3)
        for c in rs:
            peak = np.maximum(peak, np.abs(pull_np(c, "w")[1]).astype(np.float64))
    while agent_round(rs) or any(info(c, "w")["ring_pending_seq"] for c in rs):
        pass                                             # the barrier: THRESHOLD 0 until quiet
    exact = start.astype(np.float64) - 0.1 * total
    vals = [pull_np(c, "w")[1].astype(np.float64) for c in rs]
    ulp = np.spacing(2 * peak.astype(np.float32)).astype(np.float64)
    bound = []
    for c, v in zip(rs, vals):
        i = info(c, "w")
        assert i["ring_accumulated"] == 0 and i["ring_fwd_entries"] == 0
        D, T = i["ring_applied"], i["ring_take_seq"]
        bound.append((2 * D + T + steps) * ulp + 1e-7 * np.abs(exact))  # + float32(0.1) != 0.1
        assert np.all(np.abs(v - exact) <= bound[-1]), np.max(np.abs(v - exact) / ulp)
    for v, b in zip(vals[1:], bound[1:]):
        assert np.all(np.abs(v - vals[0]) <= b + bound[0])


def test_a_sync_round_closes_before_a_delta_or_join_lands(r):
    r.execute_command("PS.CREATE", "w", "SHAPE", N, "SYNC", 2, "LR", 1)
    r.execute_command("PS.RING", "w", "TRACK", "g0")
    assert r.execute_command("PS.PUSHGRAD", "w", f32(np.ones(N)), "VERSION", 0) == 1  # round open
    before = digest(r)
    assert err(r, "PS.APPLYDELTA", "w", "ID", "g1", 1, u32([0]), f32([1])).startswith("BUSY ")
    assert err(r, "PS.RING", "w", "JOIN", "g0", f32(np.zeros(N))).startswith("BUSY ")
    assert digest(r) == before
    r.execute_command("PS.PUSHGRAD", "w", f32(np.ones(N)), "VERSION", 0)          # closes it
    assert r.execute_command("PS.APPLYDELTA", "w", "ID", "g1", 1, u32([0]), f32([1])) == 1
    assert pull_np(r, "w")[0] == 2


def test_a_joiner_copies_the_base_so_the_neighbours_own_change_arrives_once(make_server):
    """The neighbour has a pending take and more own change accumulated when a group joins
    from its STATE: the pending take is not applied again at the joiner, the accumulated
    change arrives once as the next take, and both end equal."""
    n, j = make_server().client(), make_server().client()
    tensor(n)
    tensor(j, start=np.zeros(N, np.float32))
    n.execute_command("PS.RING", "w", "TRACK", "g0")
    n.execute_command("PS.APPLYDELTA", "w", "ID", "g2", 3, u32([2]), f32([4]))
    grad(n, [1, 0, 0, 0, 0, 0, 0, 0])
    seq, _, idx, vals, _ = n.execute_command("PS.DELTATAKE", "w")          # pending, seq 1
    grad(n, [0, 2, 0, 0, 0, 0, 0, 0])                                       # still accumulated
    copy, _, _, marks = n.execute_command("PS.RING", "w", "STATE")
    assert marks == [[b"g0", 1, 0], [b"g2", 3, 1]]
    args = ["PS.RING", "w", "JOIN", "g1", copy]
    for o, s_, _ in marks:
        args += ["FROM", o, s_]
    assert j.execute_command(*args) == 1
    assert j.execute_command("PS.APPLYDELTA", "w", "ID", "g0", seq, idx, vals) == 0  # in the copy
    n.execute_command("PS.DELTAACK", "w", seq)
    seq2, _, idx2, vals2, _ = n.execute_command("PS.DELTATAKE", "w")
    assert j.execute_command("PS.APPLYDELTA", "w", "ID", "g0", seq2, idx2, vals2) == 1
    assert np.array_equal(pull_np(j, "w")[1], pull_np(n, "w")[1])
    assert info(j, "w")["ring_accumulated"] == 0


# ---------------------------------------------------------------------------
# MAXLAG: a group runs at most n of its own pushes ahead of what the ring acknowledged
# ---------------------------------------------------------------------------

def push_id(r, seq, g=None):
    g = np.ones(N, np.float32) if g is None else np.asarray(g, np.float32)
    return r.execute_command("PS.PUSHGRAD", "w", f32(g), "ID", "c", seq)


def test_maxlag_refuses_pushes_with_backlog_until_a_take_is_acked(r):
    tensor(r)
    assert r.execute_command("PS.RING", "w", "TRACK", "g0", "MAXLAG", 2) == 1
    i = info(r, "w")
    assert (i["ring_maxlag"], i["ring_lag"], i["ring_lag_refusals"]) == (2, 0, 0)
    assert push_id(r, 1) == 1 and push_id(r, 2) == 2
    before = digest(r)
    e = err(r, "PS.PUSHGRAD", "w", f32(np.ones(N)), "ID", "c", 3)
    assert e.startswith("BACKLOG this group is 2 pushes ahead of what the ring has "
                        "acknowledged (MAXLAG 2"), e
    assert digest(r) == before                                 # nothing changed
    assert push_id(r, 2) == 2                                  # a resend: still a duplicate
    seq = r.execute_command("PS.DELTATAKE", "w")[0]
    assert err(r, "PS.PUSHGRAD", "w", f32(np.ones(N)), "ID", "c", 3).startswith("BACKLOG")
    assert r.execute_command("PS.DELTAACK", "w", seq) == 1     # acknowledged: the mark moves
    assert push_id(r, 3) == 3                                  # the refused seq applies once
    assert push_id(r, 3) == 3
    i = info(r, "w")
    assert (i["ring_lag"], i["ring_own_pushes"], i["ring_lag_refusals"]) == (1, 3, 2)
    # a received delta is not an own push; a take with nothing to send catches the lag up
    r.execute_command("PS.APPLYDELTA", "w", "ID", "g1", 1, u32([0]), f32([1]))
    assert info(r, "w")["ring_lag"] == 1
    r.execute_command("PS.DELTAACK", "w", r.execute_command("PS.DELTATAKE", "w")[0])
    assert push_id(r, 4, np.zeros(N)) == 5                     # changes no value
    assert info(r, "w")["ring_lag"] == 1
    assert r.execute_command("PS.DELTATAKE", "w") == 0
    assert info(r, "w")["ring_lag"] == 0
    # TRACK with the same origin updates MAXLAG; 0 = no bound
    assert r.execute_command("PS.RING", "w", "TRACK", "g0", "MAXLAG", 0) == 0
    for k in range(5, 15):
        push_id(r, k)
    i = info(r, "w")
    assert (i["ring_maxlag"], i["ring_lag"]) == (0, 10)
    assert r.execute_command("PS.RING", "w", "TRACK", "g0", "MAXLAG", 10) == 0
    assert err(r, "PS.PUSHGRAD", "w", f32(np.ones(N))).startswith("BACKLOG this group is 10 ")
    for bad in (-1, (1 << 31) + 1, "x"):
        assert err(r, "PS.RING", "w", "TRACK", "g0", "MAXLAG", bad).startswith("ERR"), bad
    assert err(r, "PS.RING", "w", "TRACK", "g0", "MAXLAG", 1, "MAXLAG", 2).startswith("ERR")
    assert info(r, "w")["ring_maxlag"] == 10
    # JOIN drops the own change: the lag is 0, MAXLAG kept
    assert r.execute_command("PS.RING", "w", "JOIN", "g0", f32(np.zeros(N))) == 1
    i = info(r, "w")
    assert (i["ring_maxlag"], i["ring_lag"]) == (10, 0)


def test_maxlag_state_replicates_and_a_refusal_does_not(make_server, make_replica):
    s = make_server()
    rep = make_replica(s)
    r = s.client()
    tensor(r)
    r.execute_command("PS.RING", "w", "TRACK", "g0", "MAXLAG", 1)
    push_id(r, 1)
    assert err(r, "PS.PUSHGRAD", "w", f32(np.ones(N)), "ID", "c", 2).startswith("BACKLOG")
    r.execute_command("PS.DELTAACK", "w", r.execute_command("PS.DELTATAKE", "w")[0])
    push_id(r, 2)
    psserver.wait_for_replication(s, [rep])
    rc = rep.client()
    assert digest(rc) == digest(r)
    mi, ri = info(r, "w"), info(rc, "w")
    for k in ("ring_maxlag", "ring_lag", "ring_own_pushes"):
        assert mi[k] == ri[k], k
    assert (ri["ring_lag"], ri["ring_lag_refusals"], mi["ring_lag_refusals"]) == (1, 0, 1)
    r.execute_command("PS.DELTAACK", "w", r.execute_command("PS.DELTATAKE", "w")[0])
    push_id(r, 3, np.zeros(N))                                # an own push that moves nothing
    assert info(r, "w")["ring_lag"] == 1
    assert r.execute_command("PS.DELTATAKE", "w") == 0        # catches the lag up: replicated
    psserver.wait_for_replication(s, [rep])
    assert info(rc, "w")["ring_lag"] == 0 and digest(rc) == digest(r)


def test_a_libps_worker_waits_through_the_lag_and_every_push_applies_once(server):
    """ps_lagpush pushes 40 times through libps into a tensor with MAXLAG 4 while a thread
    plays the ring agent (take + ack every 200 ms): pushes are refused BACKLOG, libps waits
    and resends them, and every one is applied exactly once."""
    import threading
    from pshelpers import run_tool
    r = server.client()
    stop = threading.Event()
    acked = []

    def agent():
        while not stop.wait(0.2):
            for k in r.keys("lag*"):
                try:
                    t = r.execute_command("PS.DELTATAKE", k)
                    if t != 0 and r.execute_command("PS.DELTAACK", k, t[0]) == 1:
                        acked.append(t[0])
                except Exception:                               # not created/tracked yet
                    pass

    th = threading.Thread(target=agent, daemon=True)
    th.start()
    try:
        rc, doc, errs = run_tool("ps_lagpush", server.addr, "--pushes", 40, "--maxlag", 4,
                                 timeout=60)
    finally:
        stop.set()
        th.join()
    assert rc == 0 and doc["ok"], (rc, doc, errs[-2000:])
    assert doc["value0"] == -40 and doc["stats"]["backlog_waits"] > 0, doc
    (key,) = doc["keys"]
    i = info(r, key)
    assert i["ring_own_pushes"] == 40 and i["ring_lag_refusals"] > 0, i
    assert i["ring_lag_refusals"] >= doc["stats"]["backlog_waits"]
    assert len(acked) >= 40 // 4 - 1, acked
