"""The Python package redis_ps against one real standalone server: Tensor commands, errors
with their server codes, zero-copy pulls, ROWS, snapshots, exactly-once IDs, and Model
interoperating with libps (same keys and rows as ps_roundtrip; a C and a Python worker
training the same job; lossy pushes with error feedback giving the same bits as libps)."""

import json
import os
import subprocess

import numpy as np
import pytest

import psserver

import pshelpers_pkg  # noqa: E402,F401  (the tree's redis_ps, or the installed one)
import redis_ps  # noqa: E402
from redis_ps import Model, PSError, StaleError, Tensor  # noqa: E402

ROUNDTRIP = os.path.join(psserver.REPO_ROOT, "build", "ptools", "ps_roundtrip")


def roundtrip(addr, *args):
    """Run libps's ps_roundtrip driver; returns its JSON report."""
    if not os.path.exists(ROUNDTRIP):
        pytest.fail("%s not built: run make ptools" % ROUNDTRIP, pytrace=False)
    p = subprocess.run([ROUNDTRIP, addr] + [str(a) for a in args], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.decode().strip().splitlines()[-1])


def roundtrip_grad(n, t):
    """The gradient ps_roundtrip pushes for tensor number 't' of 'n' elements."""
    e = np.arange(n, dtype=np.uint64)
    return (np.float32(0.001) * ((e * 7 + t) % 13).astype(np.float32)
            - np.float32(0.004)).astype(np.float32)


def test_tensor_create_pull_push_info_round_trip(server):
    r = redis_ps.connect(server.addr)
    w = Tensor(r, "w")
    assert w.create((4, 3), init=("const", 0.5), optim="sgd", lr=0.5)
    assert not w.create((4, 3), nx=True)
    v, vals = w.pull()
    assert v == 0 and vals.shape == (4, 3) and np.all(vals == 0.5)
    assert not vals.flags.writeable          # a view of the reply, not a copy
    assert w.push(np.ones((4, 3)), version=0) == 1
    assert w.push(np.ones((4, 3)), fmt="BF16", id=("py", 1)) == 2
    assert w.push(np.ones((4, 3)), fmt="BF16", id=("py", 1)) == 2      # duplicate: not applied
    v, vals = w.pull(fmt="F16")
    assert v == 2 and np.all(vals == -0.5)
    info = w.info()
    assert info["version"] == 2 and info["shape"] == [4, 3] and info["dedup_hits"] == 1
    assert info["optimizer"] == "sgd" and info["lr"] == 0.5


def test_rows_push_and_pull_touch_only_those_rows(server):
    r = redis_ps.connect(server.addr)
    e = Tensor(r, "emb")
    e.create((5, 2), init=("const", 1), lr=1)
    e.push(np.array([[1, 2], [3, 4]], np.float32), rows=[3, 1])
    v, rows = e.pull(rows=[1, 3, 1])
    assert rows.shape == (3, 2)
    assert rows.tolist() == [[-2, -3], [0, -1], [-2, -3]]
    assert e.pull()[1][0].tolist() == [1, 1]


def test_server_errors_keep_their_code(server):
    r = redis_ps.connect(server.addr)
    w = Tensor(r, "w")
    w.create((3,), maxstaleness=0)
    with pytest.raises(PSError) as ei:
        w.create((3,))
    assert ei.value.code == "BUSYKEY"
    with pytest.raises(PSError) as ei:
        w.push(np.ones(2))
    assert ei.value.code == "ERR" and "bytes" in ei.value.message
    w.push(np.ones(3))
    with pytest.raises(StaleError) as ei:
        w.push(np.ones(3), version=0)
    assert ei.value.code == "STALE" and str(ei.value).startswith("STALE gradient")
    r.set("plain", "x")
    with pytest.raises(PSError) as ei:
        Tensor(r, "plain").info()
    assert ei.value.code == "WRONGTYPE"
    with pytest.raises(PSError) as ei:
        Tensor(r, "missing").pull()
    assert ei.value.code == "ERR" and "no such key" in ei.value.message


def test_snapshot_rollback_and_config(server):
    r = redis_ps.connect(server.addr)
    w = Tensor(r, "w")
    w.create((2,), data=np.array([1, 2], np.float32), lr=1)
    w.snapshot("s0")
    w.push(np.ones(2))
    assert w.pull(at="s0")[1].tolist() == [1, 2]
    assert "s0" in str(w.snapshots())
    w.rollback("s0")
    assert w.pull()[1].tolist() == [1, 2]
    w.config(lr=0.25, policy="scale")
    assert w.info()["lr"] == 0.25 and w.info()["policy"] == "scale"
    w.drop_snapshot("s0")
    with pytest.raises(PSError):
        w.pull(at="s0")


def test_model_layout_is_libps_layout(server):
    doc = roundtrip(server.addr, "--job", "lay", "--rows", 300, "--cols", 100,
                    "--partition-bytes", 16384, "--iters", 0)
    m = Model(server.client(), "lay", partition_bytes=16384)
    m.add_tensor("w", (300, 100)).add_tensor("b", (100,))
    got = [[p.key, p.first_row, p.nrows] for parts in m.layout().values() for p in parts]
    assert got == [k[:3] for k in doc["keys"]]
    assert len(got) == 9


def test_python_and_c_workers_train_the_same_job(server):
    rows, cols, pb = 120, 50, 4096
    roundtrip(server.addr, "--job", "mix", "--rows", rows, "--cols", cols,
              "--partition-bytes", pb, "--iters", 2)
    m = Model(redis_ps.connect(server.addr), "mix", partition_bytes=pb)
    m.add_tensor("w", (rows, cols)).add_tensor("b", (cols,))
    g = {"w": roundtrip_grad(rows * cols, 0), "b": roundtrip_grad(cols, 1)}
    vals = m.pull()
    want = {k: np.float32(0.5) - g[k] - g[k] for k in g}
    for k in g:
        assert vals[k].reshape(-1).tobytes() == want[k].tobytes()
    assert m.versions == {"w": 2, "b": 2}
    m.push(g)
    vals = m.pull()
    for k in g:
        assert vals[k].reshape(-1).tobytes() == (want[k] - g[k]).tobytes()
    assert m.versions == {"w": 3, "b": 3}


@pytest.mark.parametrize("fmt", ["BF16", "I8", "TOPK"])
def test_lossy_push_with_error_feedback_gives_libps_bits(server, fmt):
    rows, cols, pb, iters = 90, 37, 2048, 4     # ratio * elements not whole: ceil matters
    roundtrip(server.addr, "--job", "c" + fmt, "--rows", rows, "--cols", cols,
              "--partition-bytes", pb, "--iters", iters, "--format", fmt)
    m = Model(redis_ps.connect(server.addr), "p" + fmt, partition_bytes=pb, push_format=fmt,
              topk_ratio=0.1)
    c = Model(redis_ps.connect(server.addr), "c" + fmt, partition_bytes=pb)
    for x in (m, c):
        x.add_tensor("w", (rows, cols)).add_tensor("b", (cols,))
    m.delete()
    m.create("INIT CONST 0.5 OPTIM SGD LR 1")
    g = {"w": roundtrip_grad(rows * cols, 0), "b": roundtrip_grad(cols, 1)}
    for _ in range(iters):
        m.push(g)
    mine, theirs = m.pull(), c.pull()
    for k in g:
        assert mine[k].tobytes() == theirs[k].tobytes()


def test_model_window_pipelines_pushes_and_resends_once(server):
    r = redis_ps.connect(server.addr)
    m = Model(r, "win", partition_bytes=64, window=3, client_id="py-w")
    m.add_tensor("w", (8, 4))
    assert m.create("INIT ZEROS OPTIM SGD LR 1") == 2
    g = {"w": np.ones((8, 4), np.float32)}
    assert m.push(g) == [] and m.push(g) == []
    assert r.execute_command("PS.INFO", "win:w:0")[9] == 0     # nothing sent yet
    assert m.push(g) == [1, 1, 2, 2, 3, 3]
    # A resend of the same pushes (as after a lost connection) is answered, not applied.
    assert m._run([(None, ["PS.PUSHGRAD", "win:w:0", np.ones(16, np.float32).tobytes(),
                           "ID", "py-w", m.tensors["w"].parts[0].seq])]) == [3]
    m.push(g)
    assert np.all(m.pull()["w"] == -4)        # pull flushes the queued push first
    assert m.stats["pushes"] == 8


def test_model_rows_for_an_embedding_table(server):
    r = redis_ps.connect(server.addr)
    m = Model(r, "emb", partition_bytes=3 * 2 * 4)
    m.add_tensor("E", (10, 2))
    m.create({"INIT": ("CONST", 1), "LR": 1})
    assert len(m.keys()) == 4
    m.push_rows("E", [9, 0, 4, 9], np.array([[1, 1], [2, 2], [3, 3], [1, 1]], np.float32))
    got = m.pull_rows("E", [9, 4, 0, 5])
    assert got.tolist() == [[-1, -1], [-2, -2], [-1, -1], [1, 1]]


class LoseFirstReply:
    """A redis.Redis stand-in whose first pipeline is executed by the server but whose
    replies are 'lost' (ConnectionError), as when a connection drops after sending."""

    def __init__(self, r):
        self.r = r
        self.lost = 0

    def pipeline(self, transaction=False):
        pipe = self.r.pipeline(transaction=transaction)
        real = pipe.execute
        outer = self

        def execute(raise_on_error=True):
            replies = real(raise_on_error=raise_on_error)
            if outer.lost == 0:
                outer.lost += 1
                raise redis_ps.client.rex.ConnectionError("reply lost")
            return replies
        pipe.execute = execute
        return pipe


def test_push_resent_after_a_lost_reply_is_applied_once(server):
    r = redis_ps.connect(server.addr)
    m = Model(LoseFirstReply(r), "lost", partition_bytes=64)
    m.add_tensor("w", (8, 4))
    m.r = r
    m.create("INIT ZEROS OPTIM SGD LR 1")
    m.r = LoseFirstReply(r)
    assert m.push({"w": np.ones((8, 4), np.float32)}) == [1, 1]   # resent, answered once
    assert m.stats["retries"] == 1 and m.r.lost == 1
    assert np.all(m.pull()["w"] == -1)
    assert Tensor(r, "lost:w:0").info()["dedup_hits"] == 1


def test_model_survives_a_server_restart_from_aof(make_server):
    s = make_server(args=["--appendonly", "yes", "--appendfsync", "always"])
    r = redis_ps.connect(s.addr)
    m = Model(r, "aof", retries=20)
    m.add_tensor("w", (3,))
    m.create("INIT CONST 1 LR 1")
    m.pull()
    m.push({"w": np.ones(3, np.float32)})
    s.restart()
    m.push({"w": np.ones(3, np.float32)})          # reconnects, same client id, next seq
    assert m.pull()["w"].tolist() == [-1, -1, -1] and m.versions == {"w": 2}


def test_i8_pull_gives_the_servers_quantization(server):
    """pull_format="I8" (the default pull of ps-train's TOPK jobs) decodes the server's I8 reply
    to the bits redis_ps.codec's own I8 round trip gives."""
    r = server.client()
    m = Model(r, "q8", pull_format="I8").add_tensor("w", (1000,))
    m.create("INIT UNIFORM -1 1 SEED 3")
    exact = Model(r, "q8").add_tensor("w", (1000,)).pull()["w"]
    got = m.pull()["w"]
    want = redis_ps.codec.decode("I8", redis_ps.codec.encode("I8", exact), exact.size)
    assert got.tobytes() == np.asarray(want, np.float32).tobytes()
    assert not np.array_equal(got, exact)            # really quantized


def test_client_side_errors_are_clear():
    with pytest.raises(ValueError):
        Model(None, "x", pull_format="TOPK")
    m = Model(None, "x").add_tensor("w", (2, 2))
    with pytest.raises(ValueError):
        m.add_tensor("w", (3,))
    with pytest.raises(ValueError):
        redis_ps.codec.rows_blob([-1])
    with pytest.raises(ValueError):
        m.push({"w": np.ones(3)})
