"""Prometheus: the module's commands run from Lua (EVAL), and the stock redis_exporter
binary (Debian's prometheus-redis-exporter) with examples/prometheus/redis_ps.lua as its
-script exports the INFO ps counters, per-tensor version, pushes, rows, staleness
histogram and memory, and per-embedding-table rows, created/dropped/evicted, pushes and pulls. The exporter listens on a free loopback port and is stopped by pid."""

import os
import re
import subprocess
import time
import urllib.request

import pytest

import psserver

EXPORTER = os.environ.get("PS_REDIS_EXPORTER", "/usr/bin/prometheus-redis-exporter")
SCRIPT = os.path.join(psserver.REPO_ROOT, "examples", "prometheus", "redis_ps.lua")


def test_module_commands_can_be_called_from_lua(server, raw):
    assert raw.call("PS.CREATE", "w", "SHAPE", "3", "INIT", "CONST", "1") == "OK"
    info = raw.call("EVAL", "return redis.call('PS.INFO', KEYS[1])", "1", "w")
    assert info[info.index(b"version") + 1] == 0
    assert raw.call("EVAL", "return redis.call('PS.PUSHGRAD', KEYS[1], 'VALUES', 1, 1, 1)",
                    "1", "w") == 1
    pulled = raw.call("EVAL", "return redis.call('PS.PULL', KEYS[1], 'FORMAT', 'VALUES')",
                      "1", "w")
    assert pulled[0] == 1 and len(pulled[1]) == 3
    # A tensor's type name works with SCAN TYPE, which the exporter script relies on.
    assert raw.call("EVAL", "return redis.call('SCAN', 0, 'TYPE', 'ps-tensor')", "0")[1] == [b"w"]


def scrape(port, timeout=15.0):
    """The exporter's /metrics as {script key: value} once the script's series show up."""
    deadline = time.time() + timeout
    last = ""
    while time.time() < deadline:
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5) as f:
                last = f.read().decode()
            vals = dict((k, float(v)) for k, v in
                        re.findall(r'^redis_script_values\{key="([^"]+)"\} (\S+)$', last, re.M))
            if vals:
                return vals, last
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError("no script series from the exporter:\n" + last[-2000:])


def test_stock_exporter_exports_ps_series(server, raw, tmp_path):
    if not os.path.exists(EXPORTER):
        pytest.fail("%s missing: make deps installs prometheus-redis-exporter" % EXPORTER,
                    pytrace=False)
    raw.call("PS.CREATE", "job:W0:0", "SHAPE", "4", "2", "LR", "0.1")
    raw.call("PS.CREATE", "job:b0:0", "SHAPE", "2")
    for _ in range(3):
        assert isinstance(raw.call("PS.PUSHGRAD", "job:W0:0", "VALUES", *["1"] * 8), int)
    raw.call("PS.PUSHGRAD", "job:W0:0", "VALUES", *["1"] * 8, "VERSION", "0")   # staleness 3
    raw.call("PS.PULL", "job:b0:0")
    # An embedding table: ids 1 and 2 admitted at once (ADMIT 1), id 9 pushed once under a
    # table with ADMIT 2 (dropped), a pull of 3 ids.
    ids = lambda *v: b"".join(i.to_bytes(8, "little") for i in v)
    raw.call("PS.CREATE", "job:emb:0", "EMBEDDING", "DIM", "2", "OPTIM", "SGD", "LR", "0.1",
             "ADMIT", "1")
    raw.call("PS.CREATE", "job:emb:1", "EMBEDDING", "DIM", "2", "ADMIT", "2")
    assert raw.call("PS.PUSHGRAD", "job:emb:0", "VALUES", "1", "1", "1", "1", "IDS", ids(1, 2)) == 1
    raw.call("PS.PUSHGRAD", "job:emb:1", "VALUES", "1", "1", "IDS", ids(9))
    raw.call("PS.PULL", "job:emb:0", "IDS", ids(1, 2, 3))
    port = psserver.free_port(cluster_bus=False)
    log = open(tmp_path / "exporter.log", "wb")
    p = subprocess.Popen([EXPORTER, "-redis.addr", "redis://127.0.0.1:%d" % server.port,
                          "-script", SCRIPT, "-web.listen-address", "127.0.0.1:%d" % port],
                         stdout=log, stderr=subprocess.STDOUT)
    try:
        vals, text = scrape(port)
    finally:
        p.terminate()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        log.close()
    assert vals["ps_creates"] == 2 and vals["ps_pushes"] == 4 and vals["ps_pulls"] == 1
    assert vals["ps_tensor_version/job:W0:0"] == 4
    assert vals["ps_tensor_pushes/job:W0:0"] == 4
    assert vals["ps_tensor_pulls/job:b0:0"] == 1
    assert vals["ps_tensor_rows/job:W0:0"] == 4 and vals["ps_tensor_elements/job:W0:0"] == 8
    assert vals["ps_tensor_memory_bytes/job:W0:0"] > 32
    le = [vals["ps_tensor_staleness_bucket_le_%s/job:W0:0" % b]
          for b in ("0", "1", "2", "4", "8", "16", "32", "+Inf")]
    assert le == [3, 3, 3, 4, 4, 4, 4, 4]
    assert vals["ps_table_rows/job:emb:0"] == 2 and vals["ps_table_created/job:emb:0"] == 2
    assert vals["ps_table_version/job:emb:0"] == 1 and vals["ps_table_pushes/job:emb:0"] == 1
    assert vals["ps_table_pulls/job:emb:0"] == 1 and vals["ps_table_ids_pulled/job:emb:0"] == 3
    assert vals["ps_table_rows/job:emb:1"] == 0 and vals["ps_table_dropped/job:emb:1"] == 1
    assert vals["ps_table_evicted_capacity/job:emb:0"] == 0
    assert vals["ps_table_memory_bytes/job:emb:0"] > 0
    assert vals["ps_exporter_tensors"] == 2 and vals["ps_exporter_tables"] == 2
    assert vals["ps_exporter_truncated"] == 0
    assert "redis_up 1" in text


def test_script_on_a_cluster_node_reports_the_tensors_it_holds(module_path):
    """The exporter scrapes one node; on a cluster each node's script sees its own keys
    (undeclared keys are fine for EVAL without flags as long as they are local)."""
    cl = psserver.RedisClusterHelper(masters=3, module=module_path)
    try:
        a, b = cl.masters()[:2]
        ka, kb = cl.key_for(a, "t"), cl.key_for(b, "u")
        a.client().execute_command("PS.CREATE", ka, "SHAPE", "2")
        b.client().execute_command("PS.CREATE", kb, "SHAPE", "5", "3")
        with open(SCRIPT) as f:
            out = b.client().execute_command("EVAL", f.read(), "0")
        vals = dict(zip(out[::2], out[1::2]))
        assert vals[b"ps_exporter_tensors"] == b"1"
        assert vals[("ps_tensor_rows/" + kb).encode()] == b"5"
        assert ("ps_tensor_version/" + ka).encode() not in vals
    finally:
        cl.cleanup()


def test_script_on_a_cluster_replica_exports_the_counters_only(module_path):
    """A cluster replica serves no slots, so a script there may not read its replicated keys
    ("non local key"): the script exports INFO ps and says it is a replica instead of failing
    every scrape; the master exports the per-key series."""
    cl = psserver.RedisClusterHelper(masters=3, replicas=1, module=module_path)
    try:
        m = cl.masters()[0]
        k = cl.key_for(m, "t")
        m.client().execute_command("PS.CREATE", k, "SHAPE", "2")
        with open(SCRIPT) as f:
            src = f.read()
        replica = [n for n in cl.nodes if n.client().execute_command("ROLE")[0] == b"slave"][0]
        vals = dict(zip(*[iter(replica.client().execute_command("EVAL", src, "0"))] * 2))
        assert vals[b"ps_exporter_cluster_replica"] == b"1" and b"ps_pushes" in vals
        assert vals[b"ps_exporter_tensors"] == b"0"
        vals = dict(zip(*[iter(m.client().execute_command("EVAL", src, "0"))] * 2))
        assert vals[b"ps_exporter_cluster_replica"] == b"0"
        assert vals[("ps_tensor_version/" + k).encode()] == b"0"
    finally:
        cl.cleanup()
