"""ACLs and command metadata: key specs and flags make `~model:* +ps.pull` users work and
nothing else; COMMAND INFO / DOCS / GETKEYS describe the commands correctly."""

import numpy as np
import pytest
import redis

from pshelpers import create, f32, pull
from psserver import RawClient, RespError


def raw_as(server, user, password):
    c = RawClient(server.port)
    assert c.call("AUTH", user, password) == "OK"
    return c


@pytest.fixture
def acl_server(server):
    c = server.client()
    create(c, "model:x", (4,), "INIT", "CONST", "1")
    create(c, "other:x", (4,), "INIT", "CONST", "1")
    return server


def test_pull_only_user_can_pull_model_keys_only(acl_server):
    c = acl_server.client()
    assert c.execute_command("ACL", "SETUSER", "puller", "on", ">pw", "~model:*", "+ps.pull")
    with raw_as(acl_server, "puller", "pw") as u:
        rep = u.call("PS.PULL", "model:x")
        assert rep == [0, f32(np.ones(4))], rep
        err = u.call("PS.PUSHGRAD", "model:x", f32(np.ones(4)))
        assert isinstance(err, RespError) and err.code == "NOPERM", err
        err = u.call("PS.PULL", "other:x")
        assert isinstance(err, RespError) and err.code == "NOPERM", err
        err = u.call("PS.CREATE", "model:y", "SHAPE", "4")
        assert isinstance(err, RespError) and err.code == "NOPERM", err
    assert pull(c, "model:x")[0] == 0
    assert c.exists("model:y") == 0


def test_pull_push_user_can_push_model_keys(acl_server):
    c = acl_server.client()
    c.execute_command("ACL", "SETUSER", "worker", "on", ">pw", "~model:*", "+ps.pull",
                      "+ps.pushgrad")
    with raw_as(acl_server, "worker", "pw") as u:
        assert u.call("PS.PUSHGRAD", "model:x", f32(np.ones(4))) == 1
        assert u.call("PS.PULL", "model:x")[0] == 1
        err = u.call("PS.PUSHGRAD", "other:x", f32(np.ones(4)))
        assert isinstance(err, RespError) and err.code == "NOPERM", err
        err = u.call("PS.SET", "model:x", f32(np.ones(4)))
        assert isinstance(err, RespError) and err.code == "NOPERM", err
    assert pull(c, "other:x")[0] == 0


def test_read_only_key_permission_allows_pull_but_not_push(acl_server):
    """Redis 7 selectors check the key-spec flags: %R~ grants reads only, %W~ writes only."""
    c = acl_server.client()
    c.execute_command("ACL", "SETUSER", "ro", "on", ">pw", "%R~model:*", "+ps.pull",
                      "+ps.pushgrad")
    c.execute_command("ACL", "SETUSER", "wo", "on", ">pw", "%W~model:*", "+ps.pull")
    with raw_as(acl_server, "ro", "pw") as u:
        assert u.call("PS.PULL", "model:x")[0] == 0
        err = u.call("PS.PUSHGRAD", "model:x", f32(np.ones(4)))
        assert isinstance(err, RespError) and err.code == "NOPERM", err
    with raw_as(acl_server, "wo", "pw") as u:
        err = u.call("PS.PULL", "model:x")
        assert isinstance(err, RespError) and err.code == "NOPERM", err


def test_redis_py_raises_no_permission_error(acl_server):
    c = acl_server.client()
    c.execute_command("ACL", "SETUSER", "puller", "on", ">pw", "~model:*", "+ps.pull")
    u = acl_server.client(username="puller", password="pw")
    assert u.execute_command("PS.PULL", "model:x")[0] == 0
    with pytest.raises(redis.exceptions.NoPermissionError):
        u.execute_command("PS.PUSHGRAD", "model:x", f32(np.ones(4)))


def _command_info(server, name):
    """Raw COMMAND INFO reply for one command as a dict (Redis 7 layout)."""
    with server.raw() as c:
        rep = c.call("COMMAND", "INFO", name)
    assert isinstance(rep, list) and len(rep) == 1 and rep[0] is not None, \
        "COMMAND INFO %s -> %r" % (name, rep)
    e = rep[0]
    out = {"name": e[0], "arity": e[1], "flags": set(e[2]), "first": e[3], "last": e[4],
           "step": e[5], "specs": []}
    if len(e) > 8:
        for spec in e[8]:
            d = dict(zip(spec[0::2], spec[1::2]))
            out["specs"].append({k.decode() if isinstance(k, bytes) else k: v
                                 for k, v in d.items()})
    return out


def _spec_flags(spec):
    return {f if isinstance(f, str) else f.decode() for f in spec["flags"]}


@pytest.mark.parametrize("cmd", ["ps.pull", "ps.info"])
def test_command_info_read_commands_are_readonly(server, cmd):
    ci = _command_info(server, cmd)
    assert ci["name"] == cmd.encode() or ci["name"] == cmd
    assert "readonly" in ci["flags"], ci["flags"]
    assert "write" not in ci["flags"] and "denyoom" not in ci["flags"], ci["flags"]
    assert (ci["first"], ci["last"], ci["step"]) == (1, 1, 1)
    assert len(ci["specs"]) == 1, ci["specs"]
    flags = _spec_flags(ci["specs"][0])
    assert "RO" in flags and not flags & {"RW", "OW", "RM"}, flags


@pytest.mark.parametrize("cmd", ["ps.pushgrad", "ps.set", "ps.create"])
def test_command_info_write_commands_are_write_denyoom(server, cmd):
    ci = _command_info(server, cmd)
    assert {"write", "denyoom"} <= ci["flags"], ci["flags"]
    assert "readonly" not in ci["flags"]
    assert (ci["first"], ci["last"], ci["step"]) == (1, 1, 1)
    assert len(ci["specs"]) == 1, ci["specs"]
    flags = _spec_flags(ci["specs"][0])
    assert flags & {"RW", "OW"}, flags


def test_command_getkeys_finds_the_key_only(server):
    with server.raw() as c:
        assert c.call("COMMAND", "GETKEYS", "PS.PULL", "model:x", "FORMAT", "F16") == [b"model:x"]
        assert c.call("COMMAND", "GETKEYS", "PS.PUSHGRAD", "model:x", "blob", "ID", "c",
                      "1") == [b"model:x"]
        assert c.call("COMMAND", "GETKEYS", "PS.CREATE", "model:x", "SHAPE", "3",
                      "4") == [b"model:x"]


@pytest.mark.parametrize("cmd", ["ps.create", "ps.pull", "ps.pushgrad", "ps.set", "ps.info"])
def test_command_docs_describe_the_command(server, cmd):
    with server.raw() as c:
        rep = c.call("COMMAND", "DOCS", cmd)
    assert isinstance(rep, list) and len(rep) == 2, rep
    doc = dict(zip(rep[1][0::2], rep[1][1::2]))
    assert doc.get(b"summary"), "COMMAND DOCS %s has no summary: %r" % (cmd, doc)
    assert doc.get(b"arguments"), "COMMAND DOCS %s lists no arguments" % cmd
