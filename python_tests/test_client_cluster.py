"""libps against a 3-master Redis Cluster: partitions spread over the masters, MOVED and ASK
followed while a slot migrates under a running pull/push loop, clear errors when no seed
answers. The C drivers are built by `make pytest` into build/ptools/."""

import time

import pytest

import psserver
from psserver import key_slot
from pshelpers import run_tool, tool_in_background, tool_result
from test_client_standalone import check_layout


@pytest.fixture(scope="module")
def cluster(module_path):
    cl = psserver.RedisClusterHelper(masters=3, module=module_path)
    yield cl
    cl.cleanup()


def owner(cl, key):
    return cl.node_for_key(key).port


def migrate_slot(cl, slot, src, dst, ask_window=0.5):
    """Move 'slot' from 'src' to 'dst' the way redis-cli --cluster reshard does:
    IMPORTING/MIGRATING, MIGRATE of every key, then (after 'ask_window' seconds in which the
    source answers ASK for the moved keys) SETSLOT NODE on every master."""
    s, d = src.client(), dst.client()
    sid = s.execute_command("CLUSTER", "MYID").decode()
    did = d.execute_command("CLUSTER", "MYID").decode()
    d.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", sid)
    s.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", did)
    moved = 0
    while True:
        keys = s.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100)
        if not keys:
            break
        s.execute_command("MIGRATE", "127.0.0.1", dst.port, "", 0, 5000, "KEYS", *keys)
        moved += len(keys)
    time.sleep(ask_window)
    for n in [d, s] + [m.client() for m in cl.masters() if m.port not in (src.port, dst.port)]:
        n.execute_command("CLUSTER", "SETSLOT", slot, "NODE", did)
    return moved


def seeds(cl, n=2):
    return ",".join(m.addr for m in cl.masters()[:n])


def test_partitioned_tensor_round_trips_across_masters(cluster):
    rows, cols, pb = 600, 100, 16384
    rc, doc, err = run_tool("ps_roundtrip", seeds(cluster), "--job", "cl", "--rows", rows,
                            "--cols", cols, "--partition-bytes", pb, "--iters", 3)
    assert rc == 0, (doc, err)
    assert doc["ok"] and doc["cluster"] == 1 and doc["mismatch"] == 0
    wkeys = check_layout(doc, rows, cols, pb)
    assert len(wkeys) == 15
    assert doc["versions"] == [3, 3]
    ports = {owner(cluster, k[0]) for k in doc["keys"]}
    assert len(ports) >= 2, "partitions all landed on one master: %r" % ports
    for key, _, _, _ in doc["keys"]:
        c = cluster.node_for_key(key).client()
        assert c.execute_command("PS.PULL", key)[0] == 3


def test_pull_push_loop_follows_moved_and_ask_during_slot_migration(cluster):
    job = "mig"
    with tool_in_background("ps_roundtrip", seeds(cluster, 1), "--job", job, "--rows", 300,
                            "--cols", 100, "--partition-bytes", 16384, "--iters", 120,
                            "--sleep-ms", 10) as p:
        key = "%s:w:2" % job
        slot = key_slot(key)
        src = cluster.node_for_key(key)
        dst = [m for m in cluster.masters() if m.port != src.port][0]
        psserver.wait_until(lambda: src.client().exists(key) == 1, timeout=20,
                            what="driver created %s" % key)
        time.sleep(0.2)
        assert p.poll() is None, "driver finished before the migration started"
        assert migrate_slot(cluster, slot, src, dst) >= 1
        rc, doc, err = tool_result(p)
    assert rc == 0, (doc, err[-2000:])
    assert doc["ok"] and doc["mismatch"] == 0 and doc["pull_errors"] == 0
    assert doc["push_errors"] == 0
    assert doc["stats"]["ask"] > 0 and doc["stats"]["moved"] > 0
    assert doc["versions"] == [120, 120]
    assert dst.client().exists(key) == 1 and owner(cluster, key) == dst.port


def test_generic_commands_follow_a_migrating_slot(cluster):
    with tool_in_background("ps_kvloop", seeds(cluster), "--keys", 30, "--iters", 60,
                            "--sleep-ms", 20, "--prefix", "gkv") as p:
        key = "gkv:3"
        src = cluster.node_for_key(key)
        dst = [m for m in cluster.masters() if m.port != src.port][-1]
        psserver.wait_until(lambda: src.client().exists(key) == 1, timeout=20, what="kv loop")
        migrate_slot(cluster, key_slot(key), src, dst)
        rc, doc, err = tool_result(p)
    assert rc == 0 and doc["ok"], (doc, err[-2000:])
    assert doc["cluster"] == 1 and doc["stats"]["ask"] + doc["stats"]["moved"] > 0


def test_unreachable_cluster_seeds_give_clear_error_and_nonzero_exit():
    a, b = psserver.free_port(), psserver.free_port()
    rc, doc, err = run_tool("ps_roundtrip", "127.0.0.1:%d,127.0.0.1:%d" % (a, b))
    assert rc == 2 and not doc["ok"]
    assert "cannot connect to any of" in doc["error"]
    assert "ps_roundtrip: connect:" in err
