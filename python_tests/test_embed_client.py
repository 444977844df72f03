"""Sharded embedding tables from both clients: libps psEmbed (driven by
build/ptools/ps_embed_tool) and redis_ps.Embedding, against real servers with an
embedding-table module (PS.CREATE key EMBEDDING): standalone and a 3-master cluster, the
shared layout (a Python push read back by a C pull, bit for bit), client-side summing of
repeated ids, and pushes counted exactly once across CLIENT KILLs of libps's connections."""

import os
import sys
import threading
import time

import numpy as np
import pytest

import psserver
from pshelpers import run_tool, tool_in_background, tool_result

sys.path.insert(0, os.path.join(psserver.REPO_ROOT, "python"))
import redis_ps  # noqa: E402
from redis_ps import Embedding, PSError  # noqa: E402
from redis_ps.embed import shard_key, shard_of  # noqa: E402

DIM = 4


def _has_tables(r):
    try:
        r.execute_command("PS.CREATE", "__probe", "EMBEDDING", "DIM", 1)
        r.delete("__probe")
        return True
    except Exception:
        return False


@pytest.fixture
def server(make_server):
    s = make_server()
    if not _has_tables(s.client()):
        pytest.skip("the module has no embedding tables (set PS_MODULE to one that has)")
    return s


def files(tmp_path, ids, grads=None):
    ip = tmp_path / "ids.bin"
    ip.write_bytes(np.asarray(ids, dtype="<u8").tobytes())
    gp = tmp_path / "grads.bin"
    if grads is not None:
        gp.write_bytes(np.asarray(grads, dtype="<f4").tobytes())
    return str(ip), str(gp)


def c_pull(addr, name, nshards, ids, tmp_path, fmt="F32"):
    ip, _ = files(tmp_path, ids)
    outp = str(tmp_path / "rows.bin")
    rc, doc, err = run_tool("ps_embed_tool", addr, name, DIM, nshards, "pull", ip, outp, fmt)
    assert rc == 0 and doc["ok"], (doc, err)
    return np.fromfile(outp, dtype="<f4").reshape(len(ids), DIM), doc


def test_c_layout_matches_python_and_rows_follow_sgd(server, tmp_path):
    addr = server.addr
    rc, doc, err = run_tool("ps_embed_tool", addr, "emb", DIM, 3, "create",
                            "OPTIM SGD LR 1 INIT UNIFORM -1 1 SEED 5")
    assert rc == 0 and doc["ok"], (doc, err)
    assert doc["keys"] == [shard_key("emb", s, 3) for s in range(3)]
    r = server.client()
    assert all(r.type(k) == b"ps-embeds" for k in doc["keys"])
    ids = np.array([3, 17, 3, 99, 1000, 17, 5, 3], dtype=np.uint64)
    before, _ = c_pull(addr, "emb", 3, ids, tmp_path)
    g = (np.arange(len(ids) * DIM, dtype=np.float32).reshape(len(ids), DIM) - 7) * 0.25
    ip, gp = files(tmp_path, ids, g)
    rc, doc, err = run_tool("ps_embed_tool", addr, "emb", DIM, 3, "push", ip, gp, 2, 0)
    assert rc == 0 and doc["ok"] and doc["stats"]["rows_pushed"] == 2 * len(ids), (doc, err)
    after, doc = c_pull(addr, "emb", 3, ids, tmp_path)
    assert doc["stats"]["rows_pulled"] == len(ids)
    # each id's rows live in its shard's key only (a row pushed elsewhere would not be there)
    py = Embedding(r, "emb", DIM, 3)
    for s in range(3):
        mine = ids[shard_of(ids, 3) == s]
        if len(mine):
            assert py.info()[s]["version"] == 2
    # SGD LR 1, two pushes: w = w0 - (sum of the id's gradient rows, in order), twice
    for i, idv in enumerate(ids):
        w = before[i].copy()
        for _ in range(2):
            acc = None
            for j in np.nonzero(ids == idv)[0]:
                acc = g[j].copy() if acc is None else acc + g[j]
            w = w - acc
        assert np.array_equal(after[i], w), (idv, after[i], w)
    # Python reads the same table through the same layout: the same bits
    assert np.array_equal(py.pull(ids), after)


def test_python_push_then_c_pull_gives_the_same_bits(server, tmp_path):
    r = server.client()
    emb = Embedding(r, "xemb", DIM, 4)
    assert emb.create("OPTIM ROWADAGRAD LR 0.1 INIT NORMAL 0 0.1 SEED 9") == 4
    ids = np.array([1, 2, 3, 4, 5, 6, 7, 8, 2, 2**63 + 1], dtype=np.uint64)
    rng = np.random.default_rng(1)
    for fmt in ("F32", "BF16", "F16"):
        emb.push(ids, rng.standard_normal((len(ids), DIM)).astype(np.float32), fmt=fmt)
    mine = emb.pull(ids)
    theirs, _ = c_pull(server.addr, "xemb", 4, ids, tmp_path)
    assert mine.tobytes() == theirs.tobytes()
    half, _ = c_pull(server.addr, "xemb", 4, ids, tmp_path, fmt="BF16")
    assert np.array_equal(half, emb.pull(ids, fmt="BF16"))
    assert sum(i["version"] for i in emb.info()) == 3 * len({int(s) for s in shard_of(ids, 4)})
    rows = {int(i): v for ids_, vals in emb.scan() for i, v in zip(ids_, vals)}
    assert set(rows) == {int(i) for i in ids}
    assert np.array_equal(rows[7], mine[6])


def test_summing_repeats_client_side_gives_the_servers_bits(server, tmp_path):
    r = server.client()
    ids = np.array([4, 4, 9, 4, 9, 11], dtype=np.uint64)
    g = np.random.default_rng(3).standard_normal((len(ids), DIM)).astype(np.float32)
    ip, gp = files(tmp_path, ids, g)
    for name, extra in (("plain", []), ("summed", ["F32", "sum"])):
        rc, doc, err = run_tool("ps_embed_tool", server.addr, name, DIM, 2, "create",
                                "OPTIM ADAGRAD LR 0.3")
        assert rc == 0, (doc, err)
        rc, doc, err = run_tool("ps_embed_tool", server.addr, name, DIM, 2, "push", ip, gp, 1, 0,
                                *extra)
        assert rc == 0 and doc["ok"], (doc, err)
    assert doc["stats"]["rows_pushed"] == 3         # 4, 9 and 11 once each
    a = Embedding(r, "plain", DIM, 2).pull(ids)
    b = Embedding(r, "summed", DIM, 2).pull(ids)
    assert a.tobytes() == b.tobytes()
    # Python's sum_duplicates too
    py = Embedding(r, "pysum", DIM, 2)
    py.create("OPTIM ADAGRAD LR 0.3")
    py.push(ids, g, sum_duplicates=True)
    assert py.pull(ids).tobytes() == a.tobytes()


def test_python_errors_keep_the_server_code(server):
    r = server.client()
    emb = Embedding(r, "e", DIM, 2)
    emb.create("OPTIM SGD LR 1")
    with pytest.raises(PSError) as ei:
        emb.create("OPTIM SGD LR 1")
    assert ei.value.code == "BUSYKEY"
    emb.create(nx=True)
    with pytest.raises(PSError) as ei:
        emb.push([1], np.full((1, DIM), np.nan, dtype=np.float32))
    assert ei.value.code == "ERR" and "NaN" in str(ei.value)
    with pytest.raises(PSError) as ei:
        Embedding(r, "e", DIM + 1, 2).pull([1, 2, 3])
    assert "not a table of dim 5" in str(ei.value)
    other = Embedding(r, "str", DIM, 1)
    r.set(other.keys[0], "x")
    with pytest.raises(PSError) as ei:
        other.pull([1])
    assert ei.value.code == "WRONGTYPE"
    emb.push([5, 6], np.ones((2, DIM), np.float32))
    assert emb.evict(1) == 0
    emb.push([7], np.ones((1, DIM), np.float32))
    assert emb.evict(1) >= 1


def test_pushes_count_once_across_client_kills(server, tmp_path):
    """libps pushes in a loop while its connections are killed: every push is applied
    exactly once (the shard versions equal the pushes made; the rows moved by exactly
    iters * gradient under SGD LR 1 with exactly representable values)."""
    r = server.client()
    iters, nshards = 150, 3
    rc, doc, err = run_tool("ps_embed_tool", server.addr, "kemb", DIM, nshards, "create",
                            "OPTIM SGD LR 1")
    assert rc == 0, (doc, err)
    ids = np.arange(1, 31, dtype=np.uint64)
    g = np.full((len(ids), DIM), 0.5, dtype=np.float32)
    ip, gp = files(tmp_path, ids, g)
    kills = 0
    with tool_in_background("ps_embed_tool", server.addr, "kemb", DIM, nshards, "push", ip, gp,
                            iters, 10) as p:
        while p.poll() is None:
            time.sleep(0.07)
            kills += int(r.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"))
        rc, doc, err = tool_result(p)
    assert rc == 0 and doc["ok"], (doc, err)
    assert kills >= 3 and doc["stats"]["reconnects"] >= 1, (kills, doc)
    emb = Embedding(r, "kemb", DIM, nshards)
    assert [i["version"] for i in emb.info()] == [iters] * nshards
    assert np.array_equal(emb.pull(ids), np.full((len(ids), DIM), -0.5 * iters, np.float32))


@pytest.fixture(scope="module")
def cluster(module_path):
    cl = psserver.RedisClusterHelper(masters=3, module=module_path)
    if not _has_tables(cl.masters()[0].client()):
        cl.cleanup()
        pytest.skip("the module has no embedding tables")
    yield cl
    cl.cleanup()


def test_cluster_shards_sit_on_every_master_and_round_trip(cluster, tmp_path):
    seeds = ",".join(m.addr for m in cluster.masters()[:2])
    rc, doc, err = run_tool("ps_embed_tool", seeds, "cemb", DIM, 3, "create", "OPTIM SGD LR 1")
    assert rc == 0 and doc["ok"], (doc, err)
    owners = {cluster.node_for_key(k).port for k in doc["keys"]}
    assert len(owners) == 3
    ids = np.arange(100, 160, dtype=np.uint64)
    g = np.random.default_rng(5).standard_normal((len(ids), DIM)).astype(np.float32)
    ip, gp = files(tmp_path, ids, g)
    rc, doc, err = run_tool("ps_embed_tool", seeds, "cemb", DIM, 3, "push", ip, gp, 1, 0)
    assert rc == 0 and doc["ok"], (doc, err)
    rows, _ = c_pull(seeds, "cemb", 3, ids, tmp_path)
    assert np.array_equal(rows, -g)
    # Python through RedisCluster, the same layout
    rc_ = redis_ps.connect(cluster.masters()[0].addr)
    assert Embedding(rc_, "cemb", DIM, 3).pull(ids).tobytes() == rows.tobytes()


def test_torch_sparse_embedding_gradient_is_pushed_by_ids(server):
    torch = pytest.importorskip("torch")
    from redis_ps.torch import pull_embedding, push_embedding
    r = server.client()
    table = Embedding(r, "temb", DIM, 2)
    table.create("OPTIM SGD LR 1 INIT UNIFORM -1 1 SEED 3")
    ids = np.array([1000, 7, 2**40], dtype=np.uint64)
    cache = torch.nn.Embedding(len(ids), DIM, sparse=True)
    pull_embedding(table, cache, ids)
    start = cache.weight.detach().numpy().copy()
    assert np.array_equal(start, table.pull(ids))
    batch = torch.tensor([[0, 2, 0]])           # row 0 (id 1000) twice, id 7 untouched
    cache(batch).sum().backward()
    push_embedding(table, cache, ids)
    after = table.pull(ids)
    assert np.array_equal(after[0], start[0] - 2)
    assert np.array_equal(after[1], start[1])
    assert np.array_equal(after[2], start[2] - 1)
