"""JOIN of a ring-tracked embedding table at the command level (issue #22; docs/commands.md
"Ring commands", docs/design.md "Ring state"): a joining group copies a neighbour's base
view page by page (PS.RING key ROWS cursor COUNT n between two equal readings of STATE's
marks) into JOINBEGIN / JOINROWS / JOINEND; the neighbour's own change still to travel then
arrives once as a delta, so the joiner ends with the neighbour's rows bit for bit. A join in
progress is visible (PS.INFO ring_joining) and refuses pushes and ring traffic; bad pages
change nothing; a replica, an RDB reload and an AOF replay hold the same half-finished
join. SGD lr 1 with integer gradients keeps every sum exact."""

import struct

import numpy as np
import pytest

import psserver
from pshelpers import f32, from_f32, info

DIM = 4


def ids_blob(ids):
    return struct.pack("<%dQ" % len(ids), *ids)


def table(r, key="e"):
    assert r.execute_command("PS.CREATE", key, "EMBEDDING", "DIM", DIM, "LR", 1, "INIT",
                             "UNIFORM", -1, 1, "SEED", 3) == b"OK"
    return key


def push(r, ids, g, key="e"):
    g = np.asarray(g, dtype=np.float32).reshape(len(ids), DIM)
    return r.execute_command("PS.PUSHGRAD", key, f32(g), "IDS", ids_blob(ids))


def rows(r, ids, key="e"):
    _, data = r.execute_command("PS.PULL", key, "IDS", ids_blob(ids))
    return from_f32(data).reshape(len(ids), DIM)


def err(r, *args):
    kw = r.connection_pool.connection_kwargs
    with psserver.RawClient(kw["port"], kw["host"]) as raw:
        rep = raw.call(*args)
    assert isinstance(rep, psserver.RespError), rep
    return str(rep)


def marks(r, key="e"):
    return r.execute_command("PS.RING", key, "STATE")[2:]


def read_copy(src, key="e", count=4):
    """The neighbour's base view, paged, with its marks: retried until unchanged."""
    while True:
        before = marks(src, key)
        pages, cursor = [], 0
        while True:
            cursor, ids, vals = src.execute_command("PS.RING", key, "ROWS", cursor, "COUNT", count)
            if ids:
                pages.append((ids, vals))
            if int(cursor) == 0:
                break
        if marks(src, key) == before:
            return before, pages


def join(dst, origin, copy, key="e"):
    (_, ms), pages = copy
    frm = []
    for o, seq, _ in ms:
        frm += ["FROM", o, seq]
    assert dst.execute_command("PS.RING", key, "JOINBEGIN", origin, *frm) == 1
    n = 0
    for p, (ids, vals) in enumerate(pages):
        n += len(ids) // 8
        assert dst.execute_command("PS.RING", key, "JOINROWS", p, ids, vals) == n
    assert dst.execute_command("PS.RING", key, "JOINEND", len(pages), n) == 1
    return n


def neighbour(a):
    """Group g0: pushes, a pending take, a received delta, change still accumulated."""
    table(a)
    a.execute_command("PS.RING", "e", "TRACK", "g0")
    push(a, list(range(20)), np.arange(20 * DIM).reshape(20, DIM) % 5)
    assert a.execute_command("PS.DELTATAKE", "e", "MAXELEMS", 12)[0] == 1   # pending
    a.execute_command("PS.APPLYDELTA", "e", "ID", "g2", 3, ids_blob([5, 40]), f32(np.ones(2 * DIM)))
    push(a, [2, 30], np.full((2, DIM), 2))                                   # accumulated


def test_paged_copy_then_the_own_change_arrives_once(make_server):
    a, b = make_server().client(), make_server().client()
    neighbour(a)
    table(b)
    b.execute_command("PS.RING", "e", "TRACK", "g1")
    push(b, [1, 99], np.ones((2, DIM)))            # b's own change: dropped by the join
    copy = read_copy(a)
    assert len(copy[1]) > 1                        # several pages
    n = join(b, "g1", copy)
    assert n == info(a, "e")["rows"] == info(b, "e")["rows"]
    i = info(b, "e")
    assert (i["ring_joining"], i["ring_origin"], i["ring_take_seq"], i["ring_lag"]) == (0, b"g1", 0, 0)
    assert {o[0]: o[1] for o in i["ring_origins"]} == {b"g0": 1, b"g2": 3}
    # The pending take (seq 1) is in the copy: applied again it is a duplicate.
    t1 = a.execute_command("PS.DELTATAKE", "e")
    assert b.execute_command("PS.APPLYDELTA", "e", "ID", "g0", t1[0], t1[2], t1[3]) == 0
    a.execute_command("PS.DELTAACK", "e", 1)
    # Everything a holds beyond the copy travels under later seqs and is applied once.
    while True:
        t = a.execute_command("PS.DELTATAKE", "e")
        if t == 0:
            break
        assert b.execute_command("PS.APPLYDELTA", "e", "ID", "g0", t[0], t[2], t[3]) == 1
        assert b.execute_command("PS.APPLYDELTA", "e", "ID", "g0", t[0], t[2], t[3]) == 0
        a.execute_command("PS.DELTAACK", "e", t[0])
    ids = list(range(100))
    np.testing.assert_array_equal(rows(b, ids), rows(a, ids))
    assert info(b, "e")["ring_origins"][0][1] == info(a, "e")["ring_take_seq"]
    # b trains on: its pushes are tracked again.
    push(b, [7], np.ones((1, DIM)))
    assert b.execute_command("PS.DELTATAKE", "e")[0] == 1


def test_a_copy_read_while_the_marks_move_is_read_again(make_server):
    a = make_server().client()
    neighbour(a)
    before = marks(a)
    _, ids, vals = a.execute_command("PS.RING", "e", "ROWS", 0, "COUNT", 4)
    a.execute_command("PS.APPLYDELTA", "e", "ID", "g2", 4, ids_blob([5]), f32(np.ones(DIM)))
    assert marks(a) != before                      # the reader must copy again
    # The base view answers base for rows with own change, values for the others.
    got = dict(zip(struct.unpack("<%dQ" % (len(ids) // 8), ids),
                   from_f32(vals).reshape(-1, DIM).tolist()))
    assert list(got) == sorted(got)


def test_a_join_in_progress_is_visible_refuses_traffic_and_restarts(r):
    table(r)
    r.execute_command("PS.RING", "e", "TRACK", "g1")
    push(r, [1, 2], np.ones((2, DIM)))
    assert r.execute_command("PS.RING", "e", "JOINBEGIN", "g1", "FROM", "g0", 5) == 1
    assert r.execute_command("PS.RING", "e", "JOINROWS", 0, ids_blob([3, 8]),
                             f32(np.arange(2 * DIM))) == 2
    i = info(r, "e")
    assert (i["ring_joining"], i["ring_join_pages"], i["ring_join_rows"], i["rows"]) == (1, 1, 2, 2)
    for args in (["PS.PUSHGRAD", "e", f32(np.ones(DIM)), "IDS", ids_blob([3])],
                 ["PS.DELTATAKE", "e"], ["PS.DELTAACK", "e", 1], ["PS.DELTAFWD", "e"],
                 ["PS.APPLYDELTA", "e", "ID", "g0", 6, ids_blob([3]), f32(np.ones(DIM))],
                 ["PS.RING", "e", "UNTRACK"], ["PS.RING", "e", "ROWS", 0, "COUNT", 10]):
        assert err(r, *args).startswith("BUSY a JOIN of the table is in progress"), args
    np.testing.assert_array_equal(rows(r, [3]), [np.arange(DIM)])     # pulls answer the copy
    # A new JOINBEGIN restarts the copy from nothing.
    assert r.execute_command("PS.RING", "e", "JOINBEGIN", "g1", "FROM", "g0", 6) == 1
    assert info(r, "e")["rows"] == 0
    assert r.execute_command("PS.RING", "e", "JOINROWS", 0, ids_blob([3]), f32(np.ones(DIM))) == 1
    assert r.execute_command("PS.RING", "e", "JOINEND", 1, 1) == 1
    i = info(r, "e")
    assert (i["ring_joining"], i["rows"], i["ring_base_rows"]) == (0, 1, 0)
    assert r.execute_command("PS.APPLYDELTA", "e", "ID", "g0", 6, ids_blob([3]),
                             f32(np.ones(DIM))) == 0                 # in the copy
    assert r.execute_command("PS.APPLYDELTA", "e", "ID", "g0", 7, ids_blob([3]),
                             f32(np.ones(DIM))) == 1
    np.testing.assert_array_equal(rows(r, [3]), np.full((1, DIM), 2))


def begin(r):
    table(r)
    r.execute_command("PS.RING", "e", "TRACK", "g1")
    r.execute_command("PS.RING", "e", "JOINBEGIN", "g1", "FROM", "g0", 2)
    r.execute_command("PS.RING", "e", "JOINROWS", 0, ids_blob([3, 8]), f32(np.ones(2 * DIM)))


ROW = f32(np.ones(DIM))
BAD = {
    "page out of order": (["JOINROWS", 2, ids_blob([9]), ROW], "ERR JOINROWS pages come in order"),
    "page again": (["JOINROWS", 0, ids_blob([9]), ROW], "ERR JOINROWS pages come in order"),
    "wrong dim": (["JOINROWS", 1, ids_blob([9]), f32(np.ones(DIM + 1))], "ERR a table delta"),
    "ids not u64": (["JOINROWS", 1, b"\x01\x02", ROW], "ERR a table delta"),
    "unsorted": (["JOINROWS", 1, ids_blob([10, 9]), f32(np.ones(2 * DIM))], "ERR delta indices"),
    "row copied already": (["JOINROWS", 1, ids_blob([8]), ROW], "ERR a JOINROWS row is in"),
    "non-finite": (["JOINROWS", 1, ids_blob([9]), f32([1, np.nan, 0, 0])], "ERR delta values"),
    "end wrong pages": (["JOINEND", 2, 2], "ERR JOINROWS pages come in order"),
    "end wrong rows": (["JOINEND", 1, 3], "ERR JOINROWS pages come in order"),
    "begin bad origin": (["JOINBEGIN", "g 1"], "ERR an origin"),
    "begin dup from": (["JOINBEGIN", "g1", "FROM", "g0", 1, "FROM", "g0", 2], "ERR FROM names"),
    "begin bad seq": (["JOINBEGIN", "g1", "FROM", "g0", -1], "ERR"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_join_input_is_refused_and_changes_nothing(r, name):
    begin(r)
    before, view = psserver.digest(r, "e"), info(r, "e")
    args, want = BAD[name]
    assert err(r, "PS.RING", "e", *args).startswith(want)
    assert psserver.digest(r, "e") == before and info(r, "e") == view


def test_join_pages_need_a_begin_and_a_table(r):
    table(r)
    before = psserver.digest(r, "e")
    assert err(r, "PS.RING", "e", "JOINROWS", 0, ids_blob([1]), ROW).startswith("ERR no JOIN")
    assert err(r, "PS.RING", "e", "JOINEND", 0, 0).startswith("ERR no JOIN")
    r.execute_command("PS.RING", "e", "TRACK", "g1")
    assert err(r, "PS.RING", "e", "JOINROWS", 0, ids_blob([1]), ROW).startswith("ERR no JOIN")
    r.execute_command("PS.CREATE", "w", "SHAPE", 4)
    assert err(r, "PS.RING", "w", "JOINBEGIN", "g1").startswith("ERR JOINBEGIN, JOINROWS")
    assert err(r, "PS.RING", "w", "ROWS", 0, "COUNT", 4).startswith("ERR PS.RING ROWS pages")
    assert err(r, "PS.RING", "e", "ROWS", 0, "COUNT", 0).startswith("ERR")
    assert err(r, "PS.RING", "e", "ROWS", 0, "COUNT", 1 << 20).startswith("ERR")
    r.execute_command("PS.RING", "e", "UNTRACK")
    assert psserver.digest(r, "e") == before
    # An untracked table may join: tracking turns on under the new marks.
    assert r.execute_command("PS.RING", "e", "JOINBEGIN", "g1", "FROM", "g0", 4) == 1
    assert r.execute_command("PS.RING", "e", "JOINEND", 0, 0) == 1
    assert info(r, "e")["ring_origins"] == [[b"g0", 4, 0]]


def test_replica_reload_and_aof_keep_a_half_finished_join(make_server, make_replica):
    s = make_server(args=["--appendonly", "yes", "--appendfsync", "always"])
    rep = make_replica(s)
    r = s.client()
    begin(r)
    psserver.wait_for_replication(s, [rep])
    d = psserver.digest(r, "e")
    assert psserver.digest(rep.client(), "e") == d
    assert info(rep.client(), "e")["ring_joining"] == 1
    r.execute_command("DEBUG", "RELOAD")
    assert psserver.digest(r, "e") == d and info(r, "e")["ring_join_pages"] == 1
    s.restart(timeout=30)
    r = s.client()
    assert psserver.digest(r, "e") == d and info(r, "e")["ring_joining"] == 1
    assert err(r, "PS.DELTATAKE", "e").startswith("BUSY a JOIN")
    assert r.execute_command("PS.RING", "e", "JOINROWS", 1, ids_blob([9]), ROW) == 3
    assert r.execute_command("PS.RING", "e", "JOINEND", 2, 3) == 1
    psserver.wait_for_replication(s, [rep])
    assert psserver.digest(rep.client(), "e") == psserver.digest(r, "e") != d
    r.execute_command("DEBUG", "RELOAD")
    assert info(r, "e")["ring_joining"] == 0


# ---- the agent: a fresh group with a table joins a running ring -------------------------

def test_agent_fresh_group_joins_by_copying_the_table(make_server, tmp_path):
    """a and b train a table and a tensor around a ring; c, a fresh server whose table holds
    other rows, starts its agent with --join: it copies a neighbour's rows (paged, between
    equal marks) and tensor, then all three train on. After --barrier every group holds the
    same rows bit for bit, exactly every push of every group (nothing lost or doubled), and
    per origin the takes equal the marks and applied counts everywhere."""
    import os
    import re
    import threading

    import test_ring_table as rt
    from test_ring import RELAY, Agent, run_agent
    if not os.path.exists(RELAY):
        pytest.fail("%s not built: run make" % RELAY, pytrace=False)
    srv = [make_server() for _ in range(2)]
    for s in srv:
        rt.make_group(s)
    cport = psserver.free_port()              # c's server starts later
    names = "abc"
    spec = ",".join("%s=%s" % (n, s.addr) for n, s in zip("ab", srv)) + \
        ",c=127.0.0.1:%d" % cport
    agents = [Agent(tmp_path, spec, n).start() for n in "ab"]
    try:
        for s, n in zip(srv, "ab"):
            psserver.wait_until(lambda: all((info(s.client(), k).get("ring_origin") or b"") ==
                                            n.encode() for k in (rt.TABLE, rt.TENSOR)),
                                timeout=10, what="agent %s tracking" % n)
        n1, n2 = 15, 15
        th = [threading.Thread(target=rt.push_all, args=(s.port, g, n1)) for g, s in enumerate(srv)]
        for t in th:
            t.start()
        for t in th:
            t.join(30)
        # a and b settle (a barrier while their agents run), as the tensor test does: a
        # group copying while deltas are still in flight may lack one another group
        # acknowledged (GAP), which its agent repairs by copying again (test_ring.py).
        rc, out = run_agent(tmp_path, spec, "a", "--barrier")
        assert rc == 0 and "values bit-identical" in out, out
        c = make_server(port=cport)
        rt.make_group(c)
        c.client().execute_command("PS.PUSHGRAD", rt.TABLE, f32(np.full((2, rt.DIM), 7)),
                                   "IDS", rt.ids_blob([1, 77]))       # c's own rows: replaced
        srv.append(c)
        cj = Agent(tmp_path, spec, "c", ["--join"]).start()
        agents.append(cj)
        psserver.wait_until(lambda: "joined (--join): copied" in cj.output(), timeout=15,
                            what="c joined")
        assert re.search(r"copied \d+ rows of %s from" % re.escape(rt.TABLE), cj.output())
        th = [threading.Thread(target=rt.push_all, args=(s.port, 10 + g, n2))
              for g, s in enumerate(srv)]
        for t in th:
            t.start()
        for t in th:
            t.join(30)
        for a in agents:
            assert a.stop() == 0, a.output()
        rc, out = run_agent(tmp_path, spec, "a", "--barrier")
        assert rc == 0 and "values bit-identical" in out, out
        want = np.zeros((rt.NID + 100, rt.DIM), np.float32)
        wt = 100.0
        for g, n in [(0, n1), (1, n1), (10, n2), (11, n2), (12, n2)]:
            for ids, grad in rt.pushes(g, n):
                want[ids] -= grad
            wt -= (g + 1) * n
        ids = list(range(rt.NID + 100))
        for g, s in enumerate(srv):
            np.testing.assert_array_equal(rt.rows(s, ids), want, err_msg="group %d" % g)
            _, w = s.client().execute_command("PS.PULL", rt.TENSOR)
            np.testing.assert_array_equal(from_f32(w), np.full(6, wt, np.float32))
        for key in (rt.TABLE, rt.TENSOR):
            infos = {nm: info(s.client(), key) for s, nm in zip(srv, names)}
            for nm, i in infos.items():
                assert (i["ring_pending_seq"], i["ring_accumulated"], i["ring_fwd_entries"]) == \
                    (0, 0, 0), (nm, key, i)
                assert i.get("ring_joining", 0) == 0
            for origin, oi in infos.items():
                takes = oi["ring_take_seq"]
                assert takes > 0, (origin, key)
                for other, i in infos.items():
                    if other != origin:
                        marks = {r[0].decode(): r[1] for r in i["ring_origins"]}
                        assert marks[origin] == takes, (key, origin, other, marks)
    finally:
        for a in agents:
            a.kill()


def test_agent_group_server_restarted_empty_rejoins_while_the_others_train(make_server,
                                                                          tmp_path):
    """Three groups with a table and a tensor; c's server is SIGKILLed and comes back empty
    (keys created anew, untracked) while a and b keep training; c's restarted agent finds the
    ring running without it and copies a neighbour's rows and tensor (again if it then lacks
    a delta acknowledged meanwhile); all train on; after --barrier every group holds every
    push exactly once, bit for bit."""
    import os
    import threading

    import test_ring_table as rt
    from test_ring import RELAY, Agent, run_agent
    if not os.path.exists(RELAY):
        pytest.fail("%s not built: run make" % RELAY, pytrace=False)
    srv = [make_server() for _ in range(3)]
    for s in srv:
        rt.make_group(s)
    names = "abc"
    spec = ",".join("%s=%s" % (n, s.addr) for n, s in zip(names, srv))
    agents = [Agent(tmp_path, spec, n).start() for n in names]

    def train(groups, base, n):
        th = [threading.Thread(target=rt.push_all, args=(srv[g].port, base + g, n))
              for g in groups]
        for t in th:
            t.start()
        return th

    try:
        for s, n in zip(srv, names):
            psserver.wait_until(lambda: all((info(s.client(), k).get("ring_origin") or b"") ==
                                            n.encode() for k in (rt.TABLE, rt.TENSOR)),
                                timeout=10, what="agent %s tracking" % n)
        for t in train(range(3), 0, 15):
            t.join(30)
        # c's change has travelled (a barrier while the agents run): its crash loses nothing
        rc, out = run_agent(tmp_path, spec, "a", "--barrier")
        assert rc == 0 and "values bit-identical" in out, out
        agents[2].kill()
        srv[2].kill()
        th = train((0, 1), 20, 40)              # a and b train on meanwhile
        srv[2].start(timeout=30)
        c = srv[2].client()
        c.flushall()
        rt.make_group(srv[2])
        agents[2] = Agent(tmp_path, spec, "c").start()
        psserver.wait_until(lambda: "joined (" in agents[2].output(), timeout=15,
                            what="c rejoined")
        assert "rows of %s from" % rt.TABLE in agents[2].output(), agents[2].output()
        for t in th:
            t.join(30)
        for t in train((2,), 20, 15):
            t.join(30)
        for a in agents:
            assert a.stop() == 0, a.output()
        rc, out = run_agent(tmp_path, spec, "a", "--barrier")
        assert rc == 0 and "values bit-identical" in out, out
        want = np.zeros((rt.NID, rt.DIM), np.float32)
        wt = 100.0
        for g, n in [(0, 15), (1, 15), (2, 15), (20, 40), (21, 40), (22, 15)]:
            for ids, grad in rt.pushes(g, n):
                want[ids] -= grad
            wt -= (g + 1) * n
        for g, s in enumerate(srv):
            np.testing.assert_array_equal(rt.rows(s, list(range(rt.NID))), want,
                                          err_msg="group %d" % g)
            _, w = s.client().execute_command("PS.PULL", rt.TENSOR)
            np.testing.assert_array_equal(from_f32(w), np.full(6, wt, np.float32))
        i = info(srv[2].client(), rt.TABLE)
        assert i["ring_joining"] == 0 and i["ring_take_seq"] > 0
    finally:
        for a in agents:
            a.kill()


def test_agent_finishes_a_join_left_unfinished(make_server, tmp_path):
    """b's table is left in the middle of a JOIN (JOINBEGIN and one page, then the copier
    died): its agent, started, sees ring_joining and copies again; after --barrier a and b
    hold the same rows, exactly a's and b's pushes."""
    import os

    import test_ring_table as rt
    from test_ring import RELAY, Agent, run_agent
    if not os.path.exists(RELAY):
        pytest.fail("%s not built: run make" % RELAY, pytrace=False)
    srv = [make_server() for _ in range(2)]
    for s in srv:
        rt.make_group(s)
    spec = "a=%s,b=%s" % (srv[0].addr, srv[1].addr)
    agents = [Agent(tmp_path, spec, n).start() for n in "ab"]
    try:
        for s, n in zip(srv, "ab"):
            psserver.wait_until(lambda: (info(s.client(), rt.TABLE).get("ring_origin") or b"") ==
                                n.encode(), timeout=10, what="agent %s tracking" % n)
        for g, s in enumerate(srv):
            rt.push_all(s.port, g, 10)
        rc, out = run_agent(tmp_path, spec, "a", "--barrier")
        assert rc == 0, out
        agents[1].kill()
        b = srv[1].client()
        a_marks = srv[0].client().execute_command("PS.RING", rt.TABLE, "STATE")[3]
        frm = [x for o, seq, _ in a_marks for x in ("FROM", o, seq)]
        assert b.execute_command("PS.RING", rt.TABLE, "JOINBEGIN", "b", *frm) == 1
        assert b.execute_command("PS.RING", rt.TABLE, "JOINROWS", 0, rt.ids_blob([3]),
                                 f32(np.ones(rt.DIM))) == 1
        assert info(b, rt.TABLE)["ring_joining"] == 1
        agents[1] = Agent(tmp_path, spec, "b").start()
        psserver.wait_until(lambda: info(b, rt.TABLE)["ring_joining"] == 0, timeout=15,
                            what="b's agent finished the join")
        assert "left unfinished" in agents[1].output(), agents[1].output()
        rt.push_all(srv[1].port, 5, 10)
        for a in agents:
            assert a.stop() == 0, a.output()
        rc, out = run_agent(tmp_path, spec, "a", "--barrier")
        assert rc == 0 and "values bit-identical" in out, out
        want = np.zeros((rt.NID, rt.DIM), np.float32)
        for g in (0, 1, 5):
            for ids, grad in rt.pushes(g, 10):
                want[ids] -= grad
        for s in srv:
            np.testing.assert_array_equal(rt.rows(s, list(range(rt.NID))), want)
    finally:
        for a in agents:
            a.kill()
