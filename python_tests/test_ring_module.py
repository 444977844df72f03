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
        assert st[2] == b"g%d" % g
        assert sorted(st[3]) == sorted([[b"g%d" % o, 1, 1] for o in range(3) if o != g])
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
    assert (version, origin, marks) == (1, b"g0", [[b"g2", 5, 1]])
    args = ["PS.RING", "w", "JOIN", "g1", vals]
    for o, seq, _ in marks:
        args += ["FROM", o, seq]
    assert b.execute_command(*args, "FROM", "g1", 9) == 1
    assert np.array_equal(pull_np(b, "w")[1], from_f32(vals))
    assert b.execute_command("PS.RING", "w", "STATE")[2:] == [b"g1", [[b"g2", 5, 0]]]
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
    (["PS.DELTATAKE", "w", "THRESHOLD", -1], "ERR THRESHOLD"),
    (["PS.DELTATAKE", "w", "MAXELEMS", 0], "ERR MAXELEMS"),
])
def test_bad_input_is_refused_and_changes_nothing(r, args, want):
    tensor(r, start=np.full(N, 3e38, dtype=np.float32))
    r.execute_command("PS.RING", "w", "TRACK", "g0")
    before = digest(r)
    assert err(r, *args).startswith(want)
    assert digest(r) == before


def test_untracked_tables_and_other_types(r):
    tensor(r)
    assert err(r, "PS.DELTATAKE", "w").startswith("ERR the tensor is not ring-tracked")
    assert err(r, "PS.APPLYDELTA", "w", "ID", "g1", 1, u32([1]), f32([1])).startswith("ERR the tensor is not ring-tracked")
    assert r.execute_command("PS.RING", "w", "STATE")[2:] == [None, []]
    assert "ring_origin" not in info(r, "w")
    r.execute_command("PS.CREATE", "t", "EMBEDDING", "DIM", 4)
    assert err(r, "PS.RING", "t", "TRACK", "g0").startswith("ERR ring tracking covers tensors only")
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
