"""libps embedding pushes honour wait_replicas like model pushes (libps/batch.c), against
real servers (build/ptools/ps_embed_tool with PS_WAIT_REPLICAS / PS_DURABILITY): with a
replica, one WAIT per node after each push and every row on the replica when the push is
drained; without one, degrade counts the shard pushes as unreplicated and goes on, fail
stops with PS_ERR_DURABILITY."""

import numpy as np

from pshelpers import info, run_tool

DIM = 4
PS_ERR_DURABILITY = 9


def files(tmp_path, n):
    ip, gp = tmp_path / "ids.bin", tmp_path / "grads.bin"
    ip.write_bytes(np.arange(1, n + 1, dtype="<u8").tobytes())
    gp.write_bytes(np.ones((n, DIM), dtype="<f4").tobytes())
    return str(ip), str(gp)


def waits(c):
    s = c.info("commandstats").get("cmdstat_wait")
    return s["calls"] if s else 0


def create(addr, shards):
    rc, doc, err = run_tool("ps_embed_tool", addr, "emb", DIM, shards, "create", "OPTIM SGD LR 1")
    assert rc == 0 and doc["ok"], (doc, err)
    return doc["keys"]


def test_pushes_wait_for_the_replica_and_are_on_it_when_drained(make_server, tmp_path,
                                                                 monkeypatch):
    m, rep = make_server(), make_server()
    c, rc_ = m.client(), rep.client()
    rc_.execute_command("REPLICAOF", "127.0.0.1", m.port)
    c.execute_command("WAIT", 1, 5000)
    keys = create(m.addr, 2)
    ip, gp = files(tmp_path, 64)
    before = waits(c)
    monkeypatch.setenv("PS_WAIT_REPLICAS", "1")
    monkeypatch.setenv("PS_DURABILITY", "fail")
    rc, doc, err = run_tool("ps_embed_tool", m.addr, "emb", DIM, 2, "push", ip, gp, 5, 0)
    assert rc == 0 and doc["ok"], (doc, err)
    # one WAIT per push (both shards on the one master): 5, none short
    assert waits(c) - before == 5
    assert doc["stats"]["wait_short"] == 0 and doc["stats"]["unreplicated_pushes"] == 0
    assert doc["stats"]["rows_pushed"] == 5 * 64
    # WAIT answered before psDrain returned: the replica already holds every push
    for k in keys:
        assert info(rc_, k)["version"] == info(c, k)["version"] == 5


def test_without_a_replica_degrade_counts_unreplicated_and_fail_stops(make_server, tmp_path,
                                                                      monkeypatch):
    m = make_server()
    create(m.addr, 2)
    ip, gp = files(tmp_path, 64)
    monkeypatch.setenv("PS_WAIT_REPLICAS", "1")
    monkeypatch.setenv("PS_WAIT_TIMEOUT_MS", "50")
    monkeypatch.setenv("PS_DURABILITY", "degrade")
    rc, doc, err = run_tool("ps_embed_tool", m.addr, "emb", DIM, 2, "push", ip, gp, 4, 0)
    assert rc == 0 and doc["ok"], (doc, err)
    assert doc["stats"]["wait_short"] >= 1
    assert doc["stats"]["unreplicated_pushes"] == 4 * 2  # 4 pushes x 2 shard pushes
    assert "degraded" in err
    monkeypatch.setenv("PS_DURABILITY", "fail")
    rc, doc, err = run_tool("ps_embed_tool", m.addr, "emb", DIM, 2, "push", ip, gp, 1, 0)
    assert rc == 2 and not doc["ok"] and doc["err"] == PS_ERR_DURABILITY, (doc, err)
