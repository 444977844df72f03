"""Tests of the harness itself, on plain redis-server processes (no module), so a broken
harness is told apart from a broken module."""

import os

import pytest

import psserver


@pytest.fixture
def plain(servers):
    return servers.add(psserver.RedisServer(module=None, name="plain"))


def test_free_port_also_leaves_cluster_bus_port_free():
    p = psserver.free_port()
    assert 1024 < p <= 55535
    assert psserver._port_is_free(p) and psserver._port_is_free(p + 10000)
    assert psserver.free_port() != p


def test_free_port_draws_from_this_xdist_workers_slice_only(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw2")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "3")
    assert psserver.worker_slice() == (2, 3)
    for _ in range(20):
        p = psserver.free_port()
        # The port and its bus port (+10000) are in worker 2's slice: no other worker of
        # the run can draw either; both lie below the ephemeral range of outgoing connects.
        assert (p % 10000) % 3 == 2 and psserver.PORT_LOW <= p <= psserver.PORT_HIGH
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "master")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "x")
    assert psserver.worker_slice() == (0, 1)


def test_first_start_moves_to_a_new_port_when_its_port_was_taken(servers):
    s = psserver.RedisServer(module=None, name="plain", start=False)
    servers.add(s)
    taken = s.port
    blocker = servers.add(psserver.RedisServer(module=None, port=taken, name="blocker"))
    s.start()
    assert s.port != taken and s.client().ping() and blocker.client().ping()
    # A restart keeps its port: when that is taken, it fails (and says why).
    s.stop()
    s.port = taken
    with pytest.raises(psserver.ServerStartError) as e:
        s.start(timeout=5)
    assert "could not bind port %d" % taken in str(e.value)


def test_plain_server_answers_and_stop_ends_the_process(plain):
    c = plain.client()
    assert c.ping()
    assert c.config_get("dir")["dir"] == os.path.realpath(plain.dir)
    pid = plain.proc.pid
    assert plain.stop() == 0
    assert not plain.is_alive()
    with pytest.raises(OSError):
        os.kill(pid, 0)


def test_restart_keeps_dir_port_and_saved_data(plain):
    c = plain.client()
    c.set("a", "1")
    c.save()
    plain.restart()
    assert plain.client().get("a") == b"1"
    assert "Ready to accept connections" in plain.log()


def test_kill_loses_unsaved_data(plain):
    plain.client().set("a", "1")
    plain.kill()
    assert not plain.is_alive()
    plain.start()
    assert plain.client().get("a") is None


def test_start_failure_raises_with_log_tail():
    s = psserver.RedisServer(module=None, args=["--no-such-option", "1"], start=False)
    try:
        with pytest.raises(psserver.ServerStartError) as e:
            s.start(timeout=5)
        assert "no-such-option" in str(e.value) or "Bad directive" in str(e.value)
        assert not s.is_alive()
    finally:
        s.cleanup()


def test_missing_module_raises_run_make_module_first():
    s = psserver.RedisServer(module="/nonexistent/ps.so", start=False)
    try:
        with pytest.raises(psserver.ServerStartError, match="make module"):
            s.start()
    finally:
        s.cleanup()


def test_raw_client_keeps_error_code_verbatim(plain):
    with plain.raw() as c:
        assert c.call("SET", "s", "x") == "OK"
        err = c.call("LPUSH", "s", "y")
        assert isinstance(err, psserver.RespError) and err.code == "WRONGTYPE"
        err = c.call("NOSUCHCOMMAND")
        assert str(err).startswith("ERR unknown command")
        assert c.call("GET", "nope") is None
        assert c.call("RPUSH", "l", b"\x00\r\n", "b") == 2
        assert c.call("LRANGE", "l", 0, -1) == [b"\x00\r\n", b"b"]


def test_replica_and_wait_for_replication(plain, servers):
    rep = servers.add(psserver.start_replica(plain, module=None))
    plain.client().set("k", "v" * 1000)
    psserver.wait_for_replication(plain, [rep])
    assert rep.client().get("k") == b"v" * 1000
    assert psserver.digest(plain.client(), "k") == psserver.digest(rep.client(), "k")
    assert psserver.digest(plain.client(), "k") != b"0" * 40


def test_key_slot_known_vectors():
    assert psserver.crc16(b"123456789") == 0x31C3
    assert psserver.key_slot("foo") == 12182
    assert psserver.key_slot("bar") == 5061
    assert psserver.key_slot("{user1000}.following") == psserver.key_slot("{user1000}.followers")
    assert psserver.key_slot("{}x") == psserver.crc16(b"{}x") % 16384


def test_plain_cluster_helper_creates_cluster_and_routes_keys():
    with psserver.RedisClusterHelper(masters=3, replicas=1, module=None) as cl:
        masters = cl.masters()
        assert len(masters) == 3 and len(cl.nodes) == 6
        for m in masters:
            assert len(cl.replicas_of(m)) == 1
            key = cl.key_for(m, prefix="k")
            c = m.client()
            assert c.execute_command("CLUSTER", "KEYSLOT", key) == psserver.key_slot(key)
            assert c.set(key, "v")
            assert cl.node_for_key(key).port == m.port
        pids = [n.proc.pid for n in cl.nodes]
    for pid in pids:
        with pytest.raises(OSError):
            os.kill(pid, 0)
