"""redis_ps serving: Embedding.score (PS.SCORE for a one-shard table, the rows pulled and
the kernel run in numpy for a sharded one) gives the bits of ps-train's forward pass and of
libps's psScore on the same parameters (build/ptools/ps_score_ref, see test_score.py), LR
and FM, one shard and three (the MLP's pooled inputs: test_score.py); bad input is refused
before anything is sent."""

import struct

import numpy as np
import pytest

import pshelpers_pkg  # noqa: F401  (the tree's redis_ps, or the installed one)
import redis_ps  # noqa: E402
from redis_ps import score as pscore  # noqa: E402
from test_score import data, reference, train  # noqa: E402,F401 (the trained job's data)


@pytest.mark.parametrize("model,shards", [("lr", 1), ("fm", 1), ("lr", 3), ("fm", 3)])
def test_score_gives_the_trainers_and_libps_bits(server, data, model, shards, tmp_path):
    job = "py%s%d" % (model, shards)
    train(server.addr, job, model, data, shards)
    ref = reference(server.addr, job, model, shards, data, tmp_path)
    assert ref["psz"] == ref["z"]                              # libps psScore: the trainer's
    dim = int(ref["json"]["dim"])
    counts = np.frombuffer(ref["counts"], "<u4")
    ids = np.frombuffer(ref["ids"], "<u8")
    vals = np.frombuffer(ref["vals"], "<f4")
    bias = struct.unpack("<f", ref["bias"])[0]
    table = redis_ps.Embedding(redis_ps.connect(server.addr), job + ":emb", dim, shards)
    r = server.client()
    calls = r.info("commandstats").get("cmdstat_ps.score", {}).get("calls", 0)
    z = table.score(counts, ids, vals, model=model, bias=bias)
    assert z.dtype == np.float64 and z.shape == (len(counts),)
    assert z.tobytes() == ref["z"]                             # bit for bit
    # One shard: the server scored it (one PS.SCORE); three: the client did (none).
    now = r.info("commandstats").get("cmdstat_ps.score", {}).get("calls", 0)
    assert now == calls + (1 if shards == 1 else 0)
    if shards == 1:
        assert table.score_version == table.info()[0]["version"]
    # The numpy kernel on the pulled rows: the same bits as the server's, either way.
    rows = table.pull(ids)
    assert pscore.logits(bias, rows, counts, vals).tobytes() == ref["z"]


def test_score_kernel_by_hand_and_bad_input(server):
    r = redis_ps.connect(server.addr)
    t = redis_ps.Embedding(r, "hand", 3)
    t.create("OPTIM SGD LR 1")
    # rows: id 1 -> -[0.5, 1, 2], id 2 -> -[0.25, -1, 0.5] (as test_score.py's hand check)
    t.push([1, 2], np.array([[0.5, 1, 2], [0.25, -1, 0.5]], np.float32))
    z = t.score([2, 1, 0], [1, 2, 7], [1, 2, 3], bias=0.5)
    assert list(z) == [-0.5, 0.5, 0.5]
    rows = t.pull([1, 2, 7])
    assert list(pscore.logits(0.5, rows, [2, 1, 0], np.float32([1, 2, 3]))) == [-0.5, 0.5, 0.5]
    # vals default to 1; the bias is rounded to float32 as the server holds it.
    z = t.score([1], [1], bias=0.1)
    assert z[0] == np.float64(np.float32(0.1)) - 0.5 + 0.5 * (5.0 - 5.0)
    assert len(t.score([], [])) == 0
    before = server.client().info("commandstats").get("cmdstat_ps.score", {}).get("calls", 0)
    for kw, err in [
            (dict(counts=[2], ids=[1]), "counts sum to 2 features; 1 ids given"),
            (dict(counts=[1], ids=[1], vals=[1, 2]), "2 vals for 1 features"),
            (dict(counts=[-1], ids=[]), "counts must be integers in [0, 2^32)"),
            (dict(counts=[1], ids=[1.5]), "ids must be integers"),
            (dict(counts=[1], ids=[1], model="lr"), "model LR needs rows of dim 1"),
            (dict(counts=[1], ids=[1], model="gbdt"), "unknown model 'gbdt'"),
            (dict(counts=[1], ids=[1], model="mlp"), "model mlp needs fields"),
            (dict(counts=[1], ids=[1], model="mlp", fields=[0]), "model mlp needs fields"),
            (dict(counts=[1], ids=[1], fields=[0], nfields=1), "fields and nfields are the mlp"),
            (dict(counts=[1], ids=[1], model="mlp", fields=[0], nfields=0),
             "nfields must be an integer in 1..256"),
            (dict(counts=[1], ids=[1], model="mlp", fields=[0], nfields=257),
             "nfields must be an integer in 1..256"),
            (dict(counts=[1], ids=[1], model="mlp", fields=[0, 1], nfields=2),
             "2 fields for 1 features"),
            (dict(counts=[1], ids=[1], model="mlp", fields=[2], nfields=2),
             "fields must be integers in [0, nfields=2)"),
            (dict(counts=[1], ids=[1], model="mlp", fields=[-1], nfields=2),
             "fields must be integers in [0, nfields=2)"),
            (dict(counts=[1], ids=[1], model="mlp", fields=[0], nfields=1, bias=0.5),
             "model mlp takes no bias"),
            (dict(counts=[1], ids=[1], bias=float("nan")), "bias must be a finite float32")]:
        with pytest.raises((ValueError, redis_ps.InvalidIds)) as e:
            t.score(**kw)
        assert err in str(e.value), (kw, str(e.value))
    assert server.client().info("commandstats").get(
        "cmdstat_ps.score", {}).get("calls", 0) == before           # nothing was sent
    # A server error keeps its code (no such key).
    with pytest.raises(redis_ps.PSError) as e:
        redis_ps.Embedding(r, "missing", 3).score([1], [1])
    assert "no such key" in str(e.value)


def test_mlp_score_and_forward_by_hand(server):
    """Embedding.score(model="mlp") by hand, one shard (PS.SCORE) and two (numpy pool());
    mlp_forward against a hand-computed 2-layer network."""
    r = redis_ps.connect(server.addr)
    for shards in (1, 2):
        t = redis_ps.Embedding(r, "hm%d" % shards, 2, shards)
        t.create("OPTIM SGD LR 1")
        t.push([1, 2, 3], np.array([[1, 2], [0.5, -4], [0.25, 8]], np.float32))
        x = t.score([3, 0, 1], [1, 2, 3, 7], [2, 3, -1, 5], model="mlp",
                    fields=[1, 0, 1, 2], nfields=3)
        want = np.zeros((3, 3, 2), np.float32)
        want[0, 0] = [-1.5, 12]
        want[0, 1] = [-2 + 0.25, -4 + 8]
        assert x.dtype == np.float32 and x.tobytes() == want.tobytes()
        assert t.score([], [], model="mlp", fields=[], nfields=3).shape == (0, 3, 2)
    # mlp_forward: in 2 -> hidden 2 (ReLU) -> 2 classes; p = softmax(z)[1].
    tensors = {"W0": np.array([[1, 0], [0, -1]], np.float32), "b0": np.float32([0, 0.5]),
               "W1": np.array([[0, 0], [1, 2]], np.float32), "b1": np.float32([0, -1])}
    pooled = np.array([[[1.0, 2.0]], [[-3.0, 0.25]]], np.float32)   # 2 samples, 1 field, dim 2
    h = np.maximum(np.array([[1, -1.5], [-3, 0.25]]), 0)            # W0 x + b0, ReLU
    z1 = h[:, 0] + 2 * h[:, 1] - 1
    p = pscore.mlp_forward(pooled, tensors)
    assert np.allclose(p, 1 / (1 + np.exp(-z1)), atol=1e-7), (p, z1)
    # dense features follow the pooled inputs.
    t2 = {"W0": np.array([[1, 1, 1], [0, 0, 0]], np.float32), "b0": np.float32([0, 0]),
          "W1": np.array([[0, 0], [1, 0]], np.float32), "b1": np.float32([0, 0])}
    p = pscore.mlp_forward(pooled[:, :, :2], t2, dense=[[1.0], [2.0]])
    assert np.allclose(p, 1 / (1 + np.exp(-np.array([4.0, 0.0]))), atol=1e-7)
    with pytest.raises(ValueError):
        pscore.mlp_forward(pooled, {"W0": np.zeros((2, 3), np.float32), "b0": np.zeros(2)})
