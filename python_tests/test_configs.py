"""Configuration and observability (issue 4): module configs ps.* through CONFIG SET/GET and
the command line (bad values refused, defaults copied into new tensors), PS.CONFIG on a
training tensor (validated all-or-nothing, replicated), INFO ps counters."""


import numpy as np
import pytest
import redis

import psserver
from psserver import RespError
from pshelpers import (create, create_data, digest, f32, info, messages, num, pull, pull_np, push,
                       subscribe)

F = np.float32


def cfg(c, name):
    v = c.config_get(name)[name]
    return v.decode() if isinstance(v, bytes) else v


def refused(c, name, value):
    try:
        c.config_set(name, value)
    except redis.ResponseError:
        return True
    return False


# ---------------------------------------------------------------------------
# Module configs
# ---------------------------------------------------------------------------

def test_config_defaults(r):
    assert cfg(r, "ps.default-lr") == "0.01"
    assert cfg(r, "ps.default-staleness-policy") == "reject"
    assert int(cfg(r, "ps.default-max-staleness")) == -1
    assert int(cfg(r, "ps.max-snapshots")) == 16
    assert int(cfg(r, "ps.dedup-max-clients")) == 1024
    assert int(cfg(r, "ps.max-tensor-bytes")) == 4 << 30


@pytest.mark.parametrize("name,good,bad", [
    ("ps.default-lr", ["0.25", "0", "1e-4"], ["abc", "-1", "inf", "nan", ""]),
    ("ps.max-tensor-bytes", ["1024", "1mb"], ["0", "-5", "x", "3"]),
    ("ps.max-snapshots", ["0", "4096", "7"], ["-1", "4097", "many"]),
    ("ps.dedup-max-clients", ["0", "1048576", "10"], ["-1", "1048577", "1.5"]),
    ("ps.default-max-staleness", ["-1", "0", "100"], ["-2", "x"]),
    ("ps.default-staleness-policy", ["scale", "REJECT", "reject"], ["drop", "", "1"]),
])
def test_config_set_validates_values(r, name, good, bad):
    for v in good:
        assert not refused(r, name, v), "%s %r refused" % (name, v)
    last = cfg(r, name)
    for v in bad:
        assert refused(r, name, v), "%s accepted bad value %r" % (name, v)
        assert cfg(r, name) == last, "%s changed by a refused value %r" % (name, v)


def test_configs_are_copied_into_new_tensors_only(server, r):
    create(r, "old", (4,))
    r.config_set("ps.default-lr", "0.25")
    r.config_set("ps.default-max-staleness", 3)
    r.config_set("ps.default-staleness-policy", "scale")
    r.config_set("ps.max-snapshots", 5)
    r.config_set("ps.dedup-max-clients", 7)
    create(r, "new", (4,))
    i = info(r, "new")
    assert num(i["lr"]) == 0.25
    assert int(i["maxstaleness"]) == 3
    assert i["policy"] == b"scale"
    assert int(i["max_snapshots"]) == 5
    assert int(i["dedup_max"]) == 7
    o = info(r, "old")
    assert num(o["lr"]) == 0.01 and int(o["maxstaleness"]) == -1 and o["policy"] == b"reject"
    # The default LR is what the step uses.
    push(r, "new", np.ones(4, np.float32))
    assert pull_np(r, "new")[1].tolist() == [F(0) - F(0.25)] * 4
    # Explicit options win over the defaults.
    create(r, "x", (4,), "LR", "0.5", "MAXSTALENESS", "-1", "POLICY", "REJECT")
    i = info(r, "x")
    assert num(i["lr"]) == 0.5 and int(i["maxstaleness"]) == -1 and i["policy"] == b"reject"


def test_max_tensor_bytes_limits_create(server, r):
    r.config_set("ps.max-tensor-bytes", 1024)
    assert create(r, "ok", (256,)) in (b"OK", "OK")
    with server.raw() as rc:
        rep = rc.call("PS.CREATE", "big", "SHAPE", "257")
        assert isinstance(rep, RespError) and rep.code == "ERR", rep
        rep = rc.call("PS.CREATE", "big", "SHAPE", "16", "17")
        assert isinstance(rep, RespError), rep
    assert r.exists("big") == 0
    # Lowering the limit never makes existing data unloadable.
    r.config_set("ps.max-tensor-bytes", 16)
    r.execute_command("DEBUG", "RELOAD")
    assert pull(r, "ok")[0] == 0


def test_configs_from_the_command_line(make_server):
    s = make_server(["--ps.default-lr", "0.125", "--ps.max-snapshots", "3",
                     "--ps.default-staleness-policy", "scale"])
    c = s.client()
    assert cfg(c, "ps.default-lr") == "0.125"
    assert int(cfg(c, "ps.max-snapshots")) == 3
    create(c, "k", (2,))
    i = info(c, "k")
    assert num(i["lr"]) == 0.125 and i["policy"] == b"scale"


def test_bad_config_on_the_command_line_refuses_to_start(module_path):
    s = psserver.RedisServer(args=["--ps.default-lr", "-3"], module=module_path, start=False)
    try:
        with pytest.raises(psserver.ServerStartError):
            s.start(timeout=5)
    finally:
        s.cleanup()


# ---------------------------------------------------------------------------
# PS.CONFIG
# ---------------------------------------------------------------------------

def test_ps_config_changes_lr_mid_training_and_replicates(server, make_replica):
    rep = make_replica(server)
    c = server.client()
    w = np.linspace(-1, 1, 16).astype(np.float32)
    create_data(c, "k", w, "LR", "0.1")
    g = np.ones(16, np.float32)
    push(c, "k", g)
    w = w - F(0.1) * g
    assert c.execute_command("PS.CONFIG", "k", "LR", "0.5", "CLIPNORM", "100") in (b"OK", "OK")
    push(c, "k", g)
    w = w - F(0.5) * g
    assert pull_np(c, "k")[1].tobytes() == w.tobytes()
    psserver.wait_for_replication(server, [rep])
    rc = rep.client()
    assert num(info(rc, "k")["lr"]) == 0.5
    assert num(info(rc, "k")["clipnorm"]) == 100
    assert digest(rc, "k") == digest(c, "k")


@pytest.mark.parametrize("args", [
    ["LR", "-1"], ["LR", "nan"], ["LR", "abc"], ["BETA1", "1"], ["BETA2", "-0.1"],
    ["MOMENTUM", "1.5"], ["EPS", "0"], ["WD", "-1"], ["CLIPNORM", "-2"],
    ["MAXSTALENESS", "-2"], ["POLICY", "DROP"], ["NOSUCH", "1"],
    ["LR", "0.2", "BETA1", "2"],            # all or nothing: the LR must not change either
    ["LR"],                                  # arity
    ["LR", "0.2", "EPS"],
])
def test_ps_config_refuses_bad_values_and_changes_nothing(server, r, args):
    create(r, "k", (4,), "OPTIM", "ADAM", "LR", "0.01")
    d = digest(r, "k")
    with server.raw() as rc:
        rep = rc.call("PS.CONFIG", "k", *args)
    assert isinstance(rep, RespError) and rep.code == "ERR", (args, rep)
    assert digest(r, "k") == d
    assert num(info(r, "k")["lr"]) == 0.01


def test_ps_config_on_missing_and_wrong_type_keys(server, r):
    r.set("s", "x")
    with server.raw() as rc:
        rep = rc.call("PS.CONFIG", "nokey", "LR", "0.1")
        assert isinstance(rep, RespError) and rep.code == "ERR", rep
        rep = rc.call("PS.CONFIG", "s", "LR", "0.1")
        assert isinstance(rep, RespError) and rep.code == "WRONGTYPE", rep


def test_ps_config_sync_cannot_change_while_a_round_is_open(server, r):
    create(r, "k", (4,), "SYNC", "3")
    push(r, "k", np.ones(4, np.float32))
    with server.raw() as rc:
        rep = rc.call("PS.CONFIG", "k", "SYNC", "0")
    assert isinstance(rep, RespError) and rep.code == "ERR", rep
    assert info(r, "k")["mode"] == b"sync"


# ---------------------------------------------------------------------------
# INFO ps
# ---------------------------------------------------------------------------

def test_info_ps_counters_move(server, r):
    before = r.info("ps")
    create(r, "k", (8,), "MAXSTALENESS", "0", "LR", "0.1")
    g = np.ones(8, np.float32)
    push(r, "k", g)
    push(r, "k", g, "ID", "w", "1")
    push(r, "k", g, "ID", "w", "1")                       # dedup hit
    pull(r, "k")
    r.execute_command("PS.SET", "k", f32(np.zeros(8)))
    with server.raw() as rc:
        rc.call("PS.PUSHGRAD", "k", f32([np.nan] + [0.0] * 7))   # non-finite
        rc.call("PS.PUSHGRAD", "k", f32(g), "VERSION", "0")      # stale
    r.execute_command("PS.PULL", "k", "MINVERSION", "100", "TIMEOUT", "50")
    r.execute_command("PS.SNAPSHOT", "k", "s")
    r.execute_command("PS.ROLLBACK", "k", "s")
    create(r, "s", (2,), "SYNC", "1")
    push(r, "s", np.ones(2, np.float32))
    after = r.info("ps")
    d = {k: after[k] - before.get(k, 0) for k in after}
    assert d["ps_creates"] == 2
    assert d["ps_pushes"] == 3
    assert d["ps_pulls"] >= 1
    assert d["ps_sets"] == 1
    assert d["ps_bytes_in"] >= 3 * 32
    assert d["ps_bytes_out"] >= 32
    assert d["ps_dedup_hits"] == 1
    assert d["ps_nonfinite_rejects"] == 1
    assert d["ps_stale_rejects"] == 1
    assert d["ps_blocked_pulls"] == 1
    assert d["ps_blocked_timeouts"] == 1
    assert d["ps_snapshots"] == 1
    assert d["ps_rollbacks"] == 1
    assert d["ps_rounds_closed"] == 1
    i = info(r, "k")
    assert int(i["nonfinite_rejects"]) == 1 and int(i["dedup_hits"]) == 1
    assert int(i["stale_rejects"]) == 1 and int(i["sets"]) == 1


def test_keyspace_notification_for_config(r):
    r.config_set("notify-keyspace-events", "KEd")
    create(r, "m", (4,))
    ps = subscribe(r, "__keyevent@0__:ps.config")
    r.execute_command("PS.CONFIG", "m", "LR", "0.3")
    assert [data for _, data in messages(ps, 1)] == [b"m"]
