"""redis_ps pushes are all or nothing, and its errors are typed: a push that raises leaves
nothing queued (the half-sent push of issue 25: a's push used to stay queued and go out with
the next pull), Ctrl-C at random points inside push() never half-applies a step, a NaN
anywhere refuses the whole step (residuals untouched), and schema, type, id, module and
connection problems raise the documented exceptions before anything is written."""

import signal
import threading
import time

import numpy as np
import pytest

import psserver
from pshelpers_pkg import redis_ps

from redis_ps import (InvalidIds, Model, ModuleNotLoaded, NonFiniteGradient, PSError,  # noqa: E402
                      SchemaError, ServerUnavailable, Tensor, WrongTypeError)


def versions(r, m):
    return [int(Tensor(r, k).version()) for k in m.keys()]


def test_a_push_that_raises_sends_nothing_later(server):
    r = redis_ps.connect(server.addr)
    m = Model(r, "half").add_tensor("a", (4,)).add_tensor("b", (3,))
    m.create("INIT ZEROS OPTIM SGD LR 1")
    with pytest.raises(SchemaError) as ei:
        m.push({"a": np.ones(4), "b": np.ones(5)})
    assert ei.value.tensor == "b" and isinstance(ei.value, ValueError)
    with pytest.raises(SchemaError):
        m.push({"a": np.ones(4), "nope": np.ones(3)})
    vals = m.pull()                          # used to flush a's queued push: a == -1
    assert vals["a"].tolist() == [0, 0, 0, 0] and vals["b"].tolist() == [0, 0, 0]
    assert versions(r, m) == [0, 0]
    assert m.push({"a": np.ones(4), "b": np.ones(3)}) == [1, 1]


@pytest.mark.parametrize("fmt", ["F32", "BF16"])
def test_a_nan_anywhere_refuses_the_whole_step(server, fmt):
    r = redis_ps.connect(server.addr)
    m = Model(r, "nan" + fmt, partition_bytes=16, push_format=fmt)
    m.add_tensor("a", (8,)).add_tensor("b", (6,))
    m.create("INIT ZEROS OPTIM SGD LR 1")
    g = {"a": np.full(8, 0.3, np.float32), "b": np.full(6, 0.3, np.float32)}
    m.push(g)
    before = {n: (None if t.feedback is None else t.feedback.resid.copy())
              for n, t in m.tensors.items()}
    seqs = [p.seq for p in m.partitions()]
    bad = {"a": g["a"], "b": np.array([1, 2, np.nan, 4, 5, 6], np.float32)}
    with pytest.raises(NonFiniteGradient) as ei:
        m.push(bad)
    assert ei.value.tensors == ["b"]
    assert m.push(bad, nonfinite="skip") == [] and m.stats["nonfinite_steps"] == 1
    assert versions(r, m) == [1] * len(m.keys())
    assert [p.seq for p in m.partitions()] == seqs
    for n, t in m.tensors.items():
        if before[n] is not None:
            assert t.feedback.resid.tobytes() == before[n].tobytes()
    assert m._pending == []


def test_ctrl_c_at_random_points_inside_push_never_half_applies_a_step(server):
    """50 pushes, each with a SIGINT (Ctrl-C) sent at a random moment while it runs; after
    each, every partition of the model is at the same version (the step was applied whole
    or not at all) and nothing stays queued."""
    r = redis_ps.connect(server.addr)
    m = Model(r, "intr", partition_bytes=2048)
    m.add_tensor("w1", (64, 100)).add_tensor("b1", (64,)).add_tensor("w2", (40, 64))
    m.create("INIT ZEROS OPTIM SGD LR 0.001")
    nparts = len(m.keys())
    assert nparts >= 10
    g = {n: np.ones(t.shape, np.float32) for n, t in m.tensors.items()}
    t0 = time.perf_counter()
    for _ in range(5):
        m.push(g)
    dur = (time.perf_counter() - t0) / 5
    rng = np.random.default_rng(7)
    main = threading.main_thread().ident
    # Python raises KeyboardInterrupt only where SIGINT was not ignored at its start: a test
    # run started in the background of a non-interactive shell (`.ci/run &`) inherits
    # SIG_IGN, and no interrupt would land. The handler a terminal's Ctrl-C meets, here.
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _interrupt_pushes(r, m, g, dur, rng, main)
    finally:
        signal.signal(signal.SIGINT, old)


def _interrupt_pushes(r, m, g, dur, rng, main):
    inside = 0
    for i in range(50):
        # pthread_kill: to the main thread itself, so the handler runs at once (a process
        # signal may be taken by the timer's thread and run only at the main thread's next
        # bytecode, possibly after the try block)
        timer = threading.Timer(float(rng.uniform(0, dur)), signal.pthread_kill,
                                (main, signal.SIGINT))
        returned = False
        try:
            timer.start()
            m.push(g)
            returned = True
            timer.join()
            time.sleep(0.05)                     # the interrupt lands here, after push
        except KeyboardInterrupt:
            inside += not returned
            timer.join()
        vs = versions(r, m)
        assert len(set(vs)) == 1, "try %d: partitions at versions %s" % (i, vs)
        assert m._pending == []
    # a pull after all that sends nothing left over
    m.pull()
    assert len(set(versions(r, m))) == 1
    assert inside >= 3, "only %d of 50 interrupts landed inside push()" % inside


def test_schema_mismatch_is_named_before_anything_is_written(server):
    r = redis_ps.connect(server.addr)
    old = Model(r, "arch").add_tensor("w", (10, 4)).add_tensor("b", (4,))
    old.create("INIT ZEROS OPTIM ADAM LR 0.01")
    new = Model(r, "arch").add_tensor("w", (10, 8)).add_tensor("b", (8,)).add_tensor("c", (2,))
    with pytest.raises(SchemaError) as ei:
        new.create("INIT ZEROS OPTIM ADAM LR 0.01", nx=True)
    assert ei.value.tensor == "w" and "arch:w:0" in str(ei.value)
    assert r.exists("arch:c:0") == 0                 # nothing created
    with pytest.raises(SchemaError) as ei:
        new.pull()
    assert ei.value.tensor == "w" and "40 elements" in str(ei.value)
    same = Model(r, "arch").add_tensor("w", (10, 4)).add_tensor("b", (4,))
    with pytest.raises(SchemaError) as ei:
        same.create("INIT ZEROS OPTIM SGD LR 0.01", nx=True)
    assert "optimizer adam" in str(ei.value)
    assert same.create("INIT ZEROS OPTIM ADAM LR 0.01", nx=True) == 0
    with pytest.raises(PSError) as ei:
        same.create("INIT ZEROS OPTIM ADAM LR 0.01")
    assert ei.value.code == "BUSYKEY"
    split = Model(r, "arch", partition_bytes=16).add_tensor("w", (10, 4)).add_tensor("b", (4,))
    with pytest.raises(SchemaError) as ei:
        split.create("INIT ZEROS OPTIM ADAM LR 0.01", nx=True)
    assert ei.value.tensor == "w"


def test_a_key_of_another_type_is_refused_before_anything_is_created(server):
    r = redis_ps.connect(server.addr)
    m = Model(r, "typ", partition_bytes=16).add_tensor("w", (8, 2))
    assert len(m.keys()) == 4
    r.set("typ:w:2", "a string")
    with pytest.raises(WrongTypeError) as ei:
        m.create("INIT ZEROS", nx=True)
    assert ei.value.key == "typ:w:2" and ei.value.tensor == "w" and "string" in str(ei.value)
    assert [r.exists(k) for k in m.keys()] == [0, 0, 1, 0]


@pytest.mark.parametrize("ids", [[1.0, 2.0], np.array([3.7]), [-1, 2], [1 << 64],
                                 np.array([True]), [1, "2"]])
def test_bad_embedding_ids_are_refused(server, ids):
    r = redis_ps.connect(server.addr)
    e = redis_ps.Embedding(r, "emb", dim=2, nshards=2)
    e.create("OPTIM SGD LR 1")
    with pytest.raises(InvalidIds):
        e.pull(ids)
    with pytest.raises(InvalidIds):
        e.push(ids, np.ones((len(np.atleast_1d(np.asarray(ids, dtype=object))), 2)))
    assert sum(int(i["rows"]) for i in e.info()) == 0


def test_valid_ids_pass_and_rows_are_bounded(server):
    r = redis_ps.connect(server.addr)
    e = redis_ps.Embedding(r, "emb2", dim=2)
    e.create("OPTIM SGD LR 1")
    e.push([0, (1 << 64) - 1, np.uint64(5)], np.ones((3, 2)))
    assert e.pull(np.array([5], np.int32)).tolist() == [[-1, -1]]
    m = Model(r, "rows").add_tensor("E", (10, 2))
    m.create("INIT ZEROS LR 1")
    with pytest.raises(InvalidIds):
        m.push_rows("E", [3, 10], np.ones((2, 2)))
    with pytest.raises(InvalidIds):
        m.pull_rows("E", [-1])
    assert Tensor(r, "rows:E:0").version() == 0


def test_module_missing_and_server_down_are_named(make_server):
    plain = make_server(module=None)
    with pytest.raises(ModuleNotLoaded) as ei:
        redis_ps.connect(plain.addr)
    assert "MODULE LOAD" in str(ei.value) and plain.addr in str(ei.value)
    r = redis_ps.connect(plain.addr, check_module=False)
    with pytest.raises(ModuleNotLoaded):
        Model(r, "x").add_tensor("w", (2,)).create("INIT ZEROS")
    port = psserver.free_port()
    with pytest.raises(ServerUnavailable) as ei:
        redis_ps.connect("127.0.0.1:%d" % port)
    assert "127.0.0.1:%d" % port in str(ei.value)
    import redis
    assert isinstance(ei.value, redis.exceptions.ConnectionError)


def test_a_least_privilege_worker_trains_over_the_fast_path_with_auth(server):
    """README's worker role (+ps.pull +ps.pushgrad on J:*, no INFO, COMMAND, TYPE, PS.INFO):
    connect() and the schema check skip what the ACL forbids, and pushes and pulls go
    through the lean RESP connection, which authenticates as the user."""
    admin = redis_ps.connect(server.addr)
    m0 = Model(admin, "J", partition_bytes=64).add_tensor("w", (8, 4))
    m0.create("INIT ZEROS OPTIM SGD LR 1")
    admin.execute_command("ACL", "SETUSER", "wk", "on", ">pw", "resetkeys", "~J:*",
                          "resetchannels", "-@all", "+ps.pull", "+ps.pushgrad")
    r = redis_ps.connect(server.addr, username="wk", password="pw")
    m = Model(r, "J", partition_bytes=64).add_tensor("w", (8, 4))
    assert m.check() == {k: {} for k in m.keys()}        # forbidden checks: left to the pull
    assert m._conn() is not None                          # the fast path
    m.pull()
    assert m.push({"w": np.ones((8, 4), np.float32)}) == [1, 1]
    assert m.pull()["w"].tolist() == [[-1] * 4] * 8
    with pytest.raises(PSError) as ei:
        Model(r, "K").add_tensor("w", (2,)).pull()
    assert ei.value.code == "NOPERM"
