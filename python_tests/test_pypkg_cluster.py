"""The Python package redis_ps on a 3-master Redis Cluster through redis.cluster.RedisCluster:
connect() detects cluster mode, Model's partitions (libps's keys) spread over the masters,
and a C worker (libps ps_roundtrip) and a Python worker train the same job."""


import numpy as np
import pytest

import psserver
from test_pypkg import roundtrip, roundtrip_grad

import pshelpers_pkg  # noqa: E402,F401  (the tree's redis_ps, or the installed one)
import redis_ps  # noqa: E402
from redis.cluster import RedisCluster  # noqa: E402


@pytest.fixture(scope="module")
def cluster(module_path):
    cl = psserver.RedisClusterHelper(masters=3, module=module_path)
    yield cl
    cl.cleanup()


def test_connect_detects_cluster_and_tensor_commands_route_by_key(cluster):
    r = redis_ps.connect(cluster.masters()[0].addr)
    assert isinstance(r, RedisCluster)
    for k in ("a", "b", "c", "d"):                         # keys on several masters
        t = redis_ps.Tensor(r, k)
        t.create((3,), init=("const", 2), lr=1)
        assert t.push(np.ones(3), fmt="I8") == 1
        assert t.pull()[1].tolist() == [1, 1, 1]
    with pytest.raises(redis_ps.PSError) as ei:
        redis_ps.Tensor(r, "a").create((3,))
    assert ei.value.code == "BUSYKEY"
    r.close()


def test_python_and_c_workers_share_a_cluster_job(cluster):
    rows, cols, pb = 200, 60, 4096
    addr = ",".join(m.addr for m in cluster.masters()[:2])
    doc = roundtrip(addr, "--job", "cj", "--rows", rows, "--cols", cols,
                    "--partition-bytes", pb, "--iters", 2)
    assert doc["cluster"] == 1
    r = redis_ps.connect(cluster.masters()[1].addr)
    m = redis_ps.Model(r, "cj", partition_bytes=pb, window=2)
    m.add_tensor("w", (rows, cols)).add_tensor("b", (cols,))
    assert [[p.key, p.first_row, p.nrows] for ps in m.layout().values() for p in ps] == \
        [k[:3] for k in doc["keys"]]
    owners = {cluster.node_for_key(k).port for k in m.keys()}
    assert len(owners) == 3                                  # spread over every master
    g = {"w": roundtrip_grad(rows * cols, 0), "b": roundtrip_grad(cols, 1)}
    m.pull()
    m.push(g)
    m.push(g)                                                # window of 2: one pipeline
    vals = m.pull()
    for k in g:
        want = np.float32(0.5) - g[k] - g[k] - g[k] - g[k]
        assert vals[k].reshape(-1).tobytes() == want.tobytes()
    assert m.versions == {"w": 4, "b": 4}
    r.close()


def test_a_psoptimizer_and_the_schema_check_on_a_cluster(cluster):
    """PSOptimizer (overlap, redis-py's cluster pipeline) trains a module whose partitions
    spread over the masters, and a plain string at one partition key is refused before the
    other keys are created."""
    torch = pytest.importorskip("torch")
    from redis_ps.torch import PSOptimizer
    r = redis_ps.connect(cluster.masters()[0].addr)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(20, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    opt = PSOptimizer(net, r, "ct", optimizer="adam", lr=0.01, partition_bytes=256)
    assert len({cluster.node_for_key(k).port for k in opt.model.keys()}) == 3
    for i in range(4):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(torch.randn(8, 20)), torch.randint(0, 3, (8,))).backward()
        opt.step()
    opt.synchronize()
    assert {redis_ps.Tensor(r, k).version() for k in opt.model.keys()} == {4}
    opt.close()
    m = redis_ps.Model(r, "cs", partition_bytes=16).add_tensor("w", (8, 2))
    r.set("cs:w:3", "x")
    with pytest.raises(redis_ps.WrongTypeError):
        m.create("INIT ZEROS", nx=True)
    assert sum(r.exists(k) for k in m.keys()) == 1
    r.close()


def test_embedding_wait_is_refused_on_a_cluster(cluster):
    r = redis_ps.connect(cluster.masters()[0].addr)
    with pytest.raises(ValueError) as ei:
        redis_ps.Embedding(r, "e", dim=2, nshards=3, wait=1)
    assert "standalone" in str(ei.value)
    r.close()
