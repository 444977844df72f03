"""The ring topology on an embedding table (issue #22): three groups train a sparse job
against their own servers (a table and a tensor, SGD lr 1, integer gradients: every sum
exact) while their ps-relay --ring agents exchange the changed rows; after --barrier every
group holds the same rows bit for bit, exactly the sum of every group's pushes, and per
origin the takes equal the marks and applied counts at every other group (each delta
applied once everywhere). A group whose table differs (seed) is refused at start."""

import os
import re
import struct
import threading

import numpy as np
import pytest
import redis

import psserver
from pshelpers import f32, from_f32, info
from test_ring import RELAY, Agent, run_agent

DIM = 4
NID = 40
TABLE, TENSOR = "m:e:0", "m:w:0"


def ids_blob(ids):
    return struct.pack("<%dQ" % len(ids), *ids)


def pushes(group, n):
    """The group's pushes: (ids, rows) with small integer gradients, deterministic."""
    rng = np.random.default_rng(100 + group)
    out = []
    for _ in range(n):
        ids = sorted(set(int(i) for i in rng.integers(0, NID, 6)))
        out.append((ids, rng.integers(0, 3, (len(ids), DIM)).astype(np.float32)))
    return out


def make_group(s, seed=3):
    c = s.client()
    c.execute_command("PS.CREATE", TABLE, "EMBEDDING", "DIM", DIM, "OPTIM", "SGD", "LR", 1,
                      "SEED", seed)
    c.execute_command("PS.CREATE", TENSOR, "SHAPE", 6, "DATA", f32(np.full(6, 100)), "LR", 1)


def push_all(port, group, n):
    c = redis.Redis(host="127.0.0.1", port=port, socket_timeout=5)
    for seq, (ids, g) in enumerate(pushes(group, n), 1):
        for key, args in ((TABLE, [f32(g), "IDS", ids_blob(ids)]),
                          (TENSOR, [f32(np.full(6, group + 1))])):
            while True:
                try:
                    c.execute_command("PS.PUSHGRAD", key, *args, "ID", "w%d" % group, seq)
                    break
                except redis.ResponseError as e:   # MAXLAG: wait for the ring
                    if not str(e).startswith("BACKLOG"):
                        raise


def rows(s, ids):
    _, data = s.client().execute_command("PS.PULL", TABLE, "IDS", ids_blob(ids))
    return from_f32(data).reshape(len(ids), DIM)


@pytest.fixture
def agents():
    started = []
    yield started
    for a in started:
        a.kill()


def test_ring_three_groups_train_a_table_and_agree_bit_for_bit(make_server, tmp_path, agents):
    if not os.path.exists(RELAY):
        pytest.fail("%s not built: run make" % RELAY, pytrace=False)
    srv = [make_server() for _ in range(3)]
    for s in srv:
        make_group(s)
    names = "abc"
    spec = ",".join("%s=%s" % (names[i], s.addr) for i, s in enumerate(srv))
    for i in range(3):
        agents.append(Agent(tmp_path, spec, names[i]).start())
    for s, n in zip(srv, names):
        psserver.wait_until(lambda: all((info(s.client(), k).get("ring_origin") or b"") ==
                                        n.encode() for k in (TABLE, TENSOR)),
                            timeout=10, what="agent %s tracking" % n)
    n = 40
    th = [threading.Thread(target=push_all, args=(s.port, g, n)) for g, s in enumerate(srv)]
    for t in th:
        t.start()
    for t in th:
        t.join(30)
    for a in agents:
        assert a.stop() == 0, a.output()
    rc, out = run_agent(tmp_path, spec, "a", "--barrier")
    assert rc == 0, out
    assert "values bit-identical" in out, out
    assert re.search(r"barrier: %s: \d+ rows compared" % re.escape(TABLE), out), out
    want = np.zeros((NID, DIM), np.float32)
    for g in range(3):
        for ids, grad in pushes(g, n):
            want[ids] -= grad
    for g, s in enumerate(srv):
        np.testing.assert_array_equal(rows(s, list(range(NID))), want, err_msg="group %d" % g)
        _, w = s.client().execute_command("PS.PULL", TENSOR)
    # Per origin: takes == mark == applied at every other group; nothing left anywhere.
    for key in (TABLE, TENSOR):
        infos = {nm: info(s.client(), key) for s, nm in zip(srv, names)}
        for nm, i in infos.items():
            assert (i["ring_pending_seq"], i["ring_accumulated"], i["ring_fwd_entries"]) == \
                (0, 0, 0), (nm, key, i)
        for origin, oi in infos.items():
            takes = oi["ring_take_seq"]
            assert takes > 0, (origin, key)
            for other, i in infos.items():
                if other != origin:
                    marks = {r[0].decode(): (r[1], r[2]) for r in i["ring_origins"]}
                    assert marks[origin] == (takes, takes), (key, origin, other, marks)


def test_ring_refuses_a_table_with_another_initializer(make_server, tmp_path):
    srv = [make_server() for _ in range(2)]
    make_group(srv[0])
    make_group(srv[1], seed=4)
    spec = "a=%s,b=%s" % (srv[0].addr, srv[1].addr)
    rc, out = run_agent(tmp_path, spec, "a")
    assert rc == 2, out
    assert "does not fit" in out and TABLE in out, out
    assert "ring_origin" not in info(srv[0].client(), TABLE)
