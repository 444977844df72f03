"""Golden RDB files: a dump.rdb written by each released ps-tensor encoding version
(python_tests/golden/<version>/, made once by golden/make_golden.py) still loads, and gives
back bit-identical values, snapshots, digests, optimizer state (the next push lands on the
recorded bits) and exactly-once entries."""

import json
import os
import shutil

import numpy as np
import pytest

import psserver

GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden")
VERSIONS = sorted(d for d in os.listdir(GOLDEN) if os.path.isfile(os.path.join(GOLDEN, d, "dump.rdb")))


def latest_encver():
    """PS_ENCVER_LATEST as module/core/encver.h defines it (through its feature name)."""
    import re
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "module", "encver.h")
    defs = dict(re.findall(r"#define (PS_ENCVER_\w+) (\w+)", open(path).read()))
    v = defs["PS_ENCVER_LATEST"]
    while not v.isdigit():
        v = defs[v]
    return int(v)


def test_there_is_a_golden_file_for_every_encoding_version():
    """A new encoding version comes with its golden file (golden/make_golden.py vN)."""
    assert VERSIONS, "no golden RDB files under %s" % GOLDEN
    for v in range(1, latest_encver() + 1):
        assert "v%d" % v in VERSIONS, "no golden RDB file of encoding version %d" % v


def start_golden(make_server, tmp_path, name, copy, args):
    """A server over a copy of golden/<name>/ made by copy(src_dir, dst_dir), started with
    'args'; returns (server, client, expected.json)."""
    d = tmp_path / name
    d.mkdir()
    copy(os.path.join(GOLDEN, name), d)
    with open(os.path.join(GOLDEN, name, "expected.json")) as f:
        expected = json.load(f)
    s = make_server(dir=str(d), args=args)
    return s, s.client(), expected


@pytest.fixture(params=VERSIONS)
def golden(request, make_server, tmp_path):
    """A server started over a copy of golden/<version>/dump.rdb; (server, client, expected)."""
    return start_golden(make_server, tmp_path, request.param,
                        lambda src, dst: shutil.copy(os.path.join(src, "dump.rdb"), dst),
                        ["--dbfilename", "dump.rdb"])


def check_tensors_and_snapshots(c, exp):
    """Every recorded tensor is there with its version, values and snapshots."""
    assert sorted(k.decode() for k in c.keys("*")) == sorted(exp["keys"])
    for key, e in exp["keys"].items():
        assert c.type(key) == b"ps-tensor", key
        v, data = c.execute_command("PS.PULL", key)
        assert v == e["version"], key
        assert data.hex() == e["data"], key
        snaps = c.execute_command("PS.SNAPSHOTS", key)
        assert [(n.decode(), sv, ms) for n, sv, ms in snaps] == \
            [(x["name"], x["version"], x["unix_ms"]) for x in e["snapshots"]], key
        for x in e["snapshots"]:
            assert c.execute_command("PS.PULL", key, "AT", x["name"])[1].hex() == x["data"], \
                (key, x["name"])
        inf = c.execute_command("PS.INFO", key)
        fields = {k.decode(): (val.decode() if isinstance(val, bytes) else val)
                  for k, val in zip(inf[0::2], inf[1::2]) if not isinstance(val, list)}
        for k, want in e["info"].items():
            assert fields.get(k) == want, (key, k, fields.get(k), want)


def check_digests(c, exp):
    """DEBUG DIGEST-VALUE covers every byte of state. If the digest function itself was
    changed on purpose, update the digests in expected.json (never the dump.rdb)."""
    for key, e in exp["keys"].items():
        assert psserver.digest(c, key).decode() == e["digest"], key


def test_golden_rdb_loads_every_tensor_bit_identically(golden):
    s, c, exp = golden
    check_tensors_and_snapshots(c, exp)


def test_golden_rdb_digests_match_the_recorded_ones(golden):
    s, c, exp = golden
    check_digests(c, exp)


def check_optimizer_state_and_dedup_table(c, exp):
    """The next push lands on the recorded bits (optimizer state loaded exactly) and each
    recorded (id, seq) is answered as a duplicate with its original version."""
    g = np.asarray(exp["gradient"], dtype="<f4").tobytes()
    for key, e in exp["keys"].items():
        c.execute_command("PS.PUSHGRAD", key, g)
        assert c.execute_command("PS.PULL", key)[1].hex() == e["after_push"], key
    for key, cid, seq, version in exp["replays"]:
        assert c.execute_command("PS.PUSHGRAD", key, g, "ID", cid, seq) == version, (key, cid)


def test_golden_rdb_optimizer_state_and_dedup_table_are_loaded(golden):
    s, c, exp = golden
    check_optimizer_state_and_dedup_table(c, exp)


def test_golden_rdb_survives_resave_and_reload(golden):
    s, c, exp = golden
    before = {k: psserver.digest(c, k) for k in exp["keys"]}
    c.execute_command("DEBUG", "RELOAD")
    assert {k: psserver.digest(c, k) for k in exp["keys"]} == before


# Golden AOFs: an AOF rewritten without the RDB preamble (PS._RESTORE commands) by each
# released PS._RESTORE format (golden/<format>/appendonlydir, made once by
# golden/make_golden_aof.py) still replays to the same values, digests, optimizer state and
# exactly-once entries. aof-v0 is the format without a version token.
AOF_FORMATS = sorted(d for d in os.listdir(GOLDEN)
                     if os.path.isdir(os.path.join(GOLDEN, d, "appendonlydir")))


def test_there_is_a_golden_aof_without_a_version_token():
    assert "aof-v0" in AOF_FORMATS


@pytest.fixture(params=AOF_FORMATS)
def golden_aof(request, make_server, tmp_path):
    """A server that replayed a copy of golden/<format>/appendonlydir; (server, client, expected)."""
    return start_golden(make_server, tmp_path, request.param,
                        lambda src, dst: shutil.copytree(os.path.join(src, "appendonlydir"),
                                                         dst / "appendonlydir"),
                        ["--appendonly", "yes", "--aof-use-rdb-preamble", "no",
                         "--auto-aof-rewrite-percentage", "0"])


def test_golden_aof_replays_every_tensor_bit_identically(golden_aof):
    s, c, exp = golden_aof
    check_tensors_and_snapshots(c, exp)
    check_digests(c, exp)


def test_golden_aof_optimizer_state_and_dedup_table_are_replayed(golden_aof):
    s, c, exp = golden_aof
    check_optimizer_state_and_dedup_table(c, exp)


def test_golden_aof_survives_a_rewrite_in_the_current_format(golden_aof):
    s, c, exp = golden_aof
    before = {k: psserver.digest(c, k) for k in exp["keys"]}
    c.bgrewriteaof()
    psserver.wait_until(lambda: not c.info("persistence")["aof_rewrite_in_progress"] and
                        not c.info("persistence")["aof_rewrite_scheduled"], timeout=60,
                        what="AOF rewrite")
    s.restart(timeout=30)
    c = s.client()
    assert {k: psserver.digest(c, k) for k in exp["keys"]} == before


def _header_blob(dims=(2, 3), version=5):
    """A PS._RESTORE HEADER blob (module/core/header.h, 19 scalars): SGD, default
    hyper-parameters, no limit, async."""
    import struct
    u = lambda v: struct.pack("<Q", v & (2 ** 64 - 1))
    d = lambda v: struct.pack("<d", v)
    out = u(len(dims)) + b"".join(u(x) for x in dims)
    out += u(version) + u(0) + b"".join(d(x) for x in (0.5, 0.9, 0.9, 0.999, 1e-8, 0.0, 0.0))
    out += u(0) + d(1.0) + d(1.0) + u(-1) + u(0) + u(0) + u(0) + u(1024) + u(16) + u(0)
    return out


def test_restore_header_encver_token_names_the_layout(server):
    """HEADER without a token is the layout of AOFs written before the token (aof-v0);
    ENCVER n reads the layout of encoding version n; a version this module does not know
    is refused and creates nothing."""
    raw = server.raw()
    blob = _header_blob()
    assert raw.call("PS._RESTORE", "old", "HEADER", blob) == "OK"
    assert raw.call("PS._RESTORE", "new", "HEADER", blob, "ENCVER", 3) == "OK"
    assert raw.call("PS._RESTORE", "v1", "HEADER", blob, "ENCVER", 1) == "OK"
    for k in ("old", "new", "v1"):
        assert raw.call("PS.PULL", k)[0] == 5
    for bad in ([blob, "ENCVER", latest_encver() + 1], [blob, "ENCVER", 0], [blob, "ENCVER", "x"],
                [blob, "VERSION", 3], [blob[:-8], "ENCVER", 3]):
        rep = raw.call("PS._RESTORE", "bad", "HEADER", *bad)
        assert isinstance(rep, psserver.RespError), bad
    assert raw.call("EXISTS", "bad") == 0
