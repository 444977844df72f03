"""redis_ps.Embedding's parity with libps psEmbed: BF16/F16 table pushes with error feedback
(the rounding each push drops is carried to the id's next push, so the applied sum tracks the
gradient sum) and WAIT after pushes with the durability policies (degrade: warn once, count;
fail: DurabilityError), against a real server with and without a replica."""

import warnings

import numpy as np
import pytest

from pshelpers_pkg import redis_ps

from redis_ps import DurabilityError, Embedding  # noqa: E402


@pytest.mark.parametrize("fmt", ["BF16", "F16"])
def test_error_feedback_keeps_the_sum_of_lossy_table_pushes(server, fmt):
    r = redis_ps.connect(server.addr)
    ids = np.array([3, 11, 3, 40], np.uint64)
    g = np.full((4, 4), 1.0 + 1.0 / 512, np.float32) * np.float32(1e-3)
    tabs = {}
    for name, kw in (("exact", dict(push_format="F32")), ("fb", dict(push_format=fmt)),
                     ("nofb", dict(push_format=fmt, feedback_ids=0))):
        t = Embedding(r, name + fmt, dim=4, nshards=2, **kw)
        t.create("OPTIM SGD LR 1 INIT ZEROS")
        for _ in range(200):
            t.push(ids, g)
        tabs[name] = t.pull([3, 11, 40])
    err_fb = np.abs(tabs["fb"] - tabs["exact"]).max()
    err_no = np.abs(tabs["nofb"] - tabs["exact"]).max()
    assert err_fb < err_no / 4, (err_fb, err_no)
    assert len(Embedding(r, "x", dim=4).resid) == 0


def test_wait_degrade_warns_once_and_counts(server):
    r = redis_ps.connect(server.addr)
    t = Embedding(r, "w", dim=2, wait=1, wait_timeout_ms=50)
    t.create("OPTIM SGD LR 1")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for _ in range(3):
            t.push([1, 2], np.ones((2, 2)))
    assert sum("not known to be replicated" in str(x.message) for x in w) == 1
    assert t.stats["wait_short"] == 3 and t.stats["unreplicated_pushes"] == 3
    assert t.pull([1]).tolist() == [[-3, -3]]                 # applied on the master


def test_wait_fail_raises_and_a_replica_satisfies_it(make_server, make_replica):
    master = make_server()
    r = redis_ps.connect(master.addr)
    t = Embedding(r, "f", dim=2, wait=1, wait_timeout_ms=50, durability="fail")
    t.create("OPTIM SGD LR 1")
    with pytest.raises(DurabilityError):
        t.push([1], np.ones((1, 2)))
    make_replica(master)
    t.wait_timeout_ms = 5000
    t.push([1], np.ones((1, 2)))
    assert t.stats["wait_short"] == 1
    assert t.pull([1]).tolist() == [[-2, -2]]
