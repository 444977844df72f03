"""Compressed id lists (PS.PULL / PS.PUSHGRAD ... IDS blob IDFORMAT EF, docs/commands.md
"Compressed id lists"): an EF list pulls the rows of its ids in ascending order and pushes
exactly what the raw list does (same replies, same values, same digest); every malformed
encoding answers an error with a code and changes nothing; and libps (ps_embed_tool) sends
EF to this server while a client with raw ids (PS_RAW_IDS=1, what libps before IDFORMAT
sends) gets the same rows and leaves the same table, with fewer bytes on the wire for EF.

The encoder below is written from the byte layout in docs/commands.md, independently of
common/idlist.c."""

import json
import os
import subprocess

import numpy as np
import pytest

from pshelpers import ERROR_CODE_RE, f32, from_f32, tool
from psserver import RespError, digest


@pytest.fixture
def raw_conn(server):
    c = server.raw()
    yield c
    c.close()

DIM = 4
MASK64 = (1 << 64) - 1


def varint(v):
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def ef_encode(ids, b=None, base=None, n=None):
    """The EF blob of 'ids' (sorted here); b and base as the encoder picks them unless given;
    'n' overrides the declared count (malformed cases)."""
    ids = sorted(ids)
    cnt = len(ids)
    base = ids[0] if base is None else base
    spread = ids[-1] - base
    if b is None:
        sizes = [((cnt * k + 7) // 8 + ((spread >> k) + cnt - 1) // 8 + 1, k) for k in range(64)]
        b = min(sizes)[1]
    low = high = 0
    for i, x in enumerate(ids):
        v = x - base
        low |= (v & ((1 << b) - 1)) << (i * b)
        high |= 1 << ((v >> b) + i)
    lowb = low.to_bytes((cnt * b + 7) // 8, "little")
    highb = high.to_bytes(((spread >> b) + cnt - 1) // 8 + 1, "little")
    return varint(cnt if n is None else n) + varint(base) + bytes([b]) + lowb + highb


def raw(ids):
    return np.asarray(ids, dtype="<u8").tobytes()


def step_ids(rng, n):
    """A sparse step's ids: hashed 64-bit ids (a field tag in the top 8 bits), small ones,
    repeats."""
    h = [int(x) for x in rng.integers(0, 1 << 56, size=n, dtype=np.uint64)]
    ids = [((i % 26) << 56) | h[i] for i in range(n)]
    ids[::9] = range(len(ids[::9]))
    ids[5::13] = ids[: len(ids[5::13])]
    return ids


def create(r, key):
    return r.execute_command("PS.CREATE", key, "EMBEDDING", "DIM", DIM, "INIT", "NORMAL", 0, 1,
                             "SEED", 7, "SALT", 11, "OPTIM", "ADAGRAD", "LR", 0.1)


def test_ef_pulls_and_pushes_what_raw_does(r):
    rng = np.random.default_rng(1)
    ids = step_ids(rng, 300)
    srt = sorted(ids)
    create(r, "a")
    create(r, "b")
    blob = ef_encode(ids)
    assert len(blob) < 8 * len(ids)
    # pull: rows in ascending id order, the raw pull of the sorted list, every format
    for fmt in (["FORMAT", "F32"], ["FORMAT", "BF16"], ["FORMAT", "VALUES"], []):
        want = r.execute_command("PS.PULL", "a", "IDS", raw(srt), *fmt)
        got = r.execute_command("PS.PULL", "a", "IDS", blob, "IDFORMAT", "EF", *fmt)
        assert got == want
        got = r.execute_command("PS.PULL", "a", "IDFORMAT", "ef", *fmt, "IDS", blob)
        assert got == want
    # IDFORMAT RAW is the default
    assert r.execute_command("PS.PULL", "a", "IDS", raw(ids), "IDFORMAT", "RAW") == \
        r.execute_command("PS.PULL", "a", "IDS", raw(ids))
    # push: the same rows to a (raw, sorted order) and b (EF): same replies, same digest
    g = rng.standard_normal((len(ids), DIM)).astype(np.float32)
    for seq in (1, 2, 2):  # the repeated seq is answered from the exactly-once table
        ra = r.execute_command("PS.PUSHGRAD", "a", f32(g), "IDS", raw(srt), "ID", "w", seq)
        rb = r.execute_command("PS.PUSHGRAD", "b", f32(g), "IDS", blob, "IDFORMAT", "EF",
                               "ID", "w", seq)
        assert ra == rb
    assert digest(r, "a") == digest(r, "b")
    va = r.execute_command("PS.PULL", "a", "IDS", raw(srt))
    vb = r.execute_command("PS.PULL", "b", "IDS", blob, "IDFORMAT", "EF")
    assert va == vb
    assert np.isfinite(from_f32(va[1])).all()
    # a single id, b = 0 and duplicates only
    for lst in ([5], [MASK64], [0, 0, 0], [3, 3, 4, 4, 9]):
        assert r.execute_command("PS.PULL", "a", "IDS", ef_encode(lst), "IDFORMAT", "EF") == \
            r.execute_command("PS.PULL", "a", "IDS", raw(sorted(lst)))


def malformed():
    """(what, blob) of every malformed class of docs/commands.md."""
    ok = ef_encode([1, 5, 9, 1000, 70000])
    base_b = varint(5) + varint(1)  # n = 5, base = 1
    yield "empty", b""
    yield "truncated count varint", b"\x80"
    yield "truncated base varint", varint(5) + b"\xff\xff"
    yield "missing width byte", varint(5) + varint(1)
    yield "overlong varint (11 bytes)", b"\x80" * 10 + b"\x01" + varint(1) + b"\x00\x1f"
    yield "varint past 2^64", b"\xff" * 9 + b"\x02" + varint(0) + b"\x00\xff"
    yield "redundant varint group", b"\x85\x00" + varint(1) + b"\x00\x1f"
    yield "width 64", base_b + bytes([64]) + b"\xff" * 64
    yield "count 0", varint(0) + varint(1) + b"\x00\x01"
    yield "count above the blob", varint(1 << 20) + varint(1) + b"\x00\xff"
    yield "count above the limit", varint((1 << 24) + 1) + varint(0) + b"\x00" + b"\xff" * ((1 << 21) + 1)
    yield "truncated low bits", ok[: 3 + 2]
    yield "fewer ids than declared", ef_encode([1, 5, 9], n=4)
    yield "more ids than declared", ef_encode([1, 5, 9, 12], n=3)
    yield "trailing byte", ok + b"\x00"
    yield "trailing set bit", ok + b"\x01"
    lowpad = bytearray(ef_encode([1, 2, 3], b=3, base=0))
    lowpad[3 + 1] |= 0x80  # 9 low bits in 2 bytes: bit 15 is padding
    yield "nonzero low padding", bytes(lowpad)
    # base 2^64-2, b 0: the second id's high value 2 (bit 2 + 1) makes it 2^64
    yield "overflow past 2^64", varint(2) + varint(MASK64 - 1) + b"\x00" + b"\x09"
    # b 63: a high value of 2 shifted past bit 63
    # b 2, one high value: low bits 3 then 1
    yield "ids out of order", varint(2) + varint(0) + b"\x02\x07\x03"
    yield "overflow of the high bits", varint(1) + varint(0) + bytes([63]) + b"\x00" * 8 + b"\x04"


def test_ef_malformed_answers_an_error_and_changes_nothing(r, raw_conn):
    """Every malformed class (one server: each case is a pull and an ID'd push that must
    both be refused with the table and the exactly-once table unchanged)."""
    create(r, "t")
    r.execute_command("PS.PUSHGRAD", "t", f32(np.ones((3, DIM))), "IDS", raw([1, 2, 3]))
    before = digest(r, "t")
    for what, blob in malformed():
        for cmd in (["PS.PULL", "t", "IDS", blob, "IDFORMAT", "EF"],
                    ["PS.PUSHGRAD", "t", f32(np.ones((5, DIM))), "IDS", blob, "IDFORMAT", "EF",
                     "ID", "w", 1]):
            rep = raw_conn.call(*cmd)
            assert isinstance(rep, RespError), (what, rep)
            msg = str(rep)
            assert ERROR_CODE_RE.match(msg), msg
            assert msg.startswith("ERR IDS (IDFORMAT EF)"), (what, msg)
        assert digest(r, "t") == before, what
    # the ID was never consumed: the same seq applies now
    assert r.execute_command("PS.PUSHGRAD", "t", f32(np.ones((2, DIM))), "IDS",
                             ef_encode([1, 2]), "IDFORMAT", "EF", "ID", "w", 1) == 2


def test_idformat_option_errors(r, raw_conn):
    create(r, "t")
    r.execute_command("PS.CREATE", "dense", "SHAPE", 4)
    blob = ef_encode([1, 2])
    cases = [
        (["PS.PULL", "t", "IDS", blob, "IDFORMAT", "ZZ"], "ERR unknown IDFORMAT 'ZZ' (RAW, EF)"),
        (["PS.PULL", "t", "IDS", blob, "IDFORMAT", "EF", "IDFORMAT", "EF"],
         "ERR option 'IDFORMAT' given more than once"),
        (["PS.PULL", "t", "IDS", blob, "IDFORMAT"], "ERR option 'IDFORMAT' needs a value"),
        (["PS.PULL", "dense", "IDFORMAT", "EF"], "WRONGTYPE"),
        (["PS.PULL", "nokey", "IDFORMAT", "EF"], "ERR no such key"),
        (["PS.PUSHGRAD", "dense", f32([1, 2, 3, 4]), "IDFORMAT", "EF"], "WRONGTYPE"),
        (["PS.PULL", "t", "IDS", raw([1, 2]), "IDFORMAT", "EF"], "ERR IDS (IDFORMAT EF)"),
    ]
    for cmd, want in cases:
        rep = raw_conn.call(*cmd)
        assert isinstance(rep, RespError) and str(rep).startswith(want), (cmd, rep)


def _net_in(r):
    return int(r.info("stats")["total_net_input_bytes"])


def _embed_tool(addr, name, nshards, *args, raw_ids=False):
    env = dict(os.environ)
    env.pop("PS_RAW_IDS", None)
    if raw_ids:
        env["PS_RAW_IDS"] = "1"
    p = subprocess.run([tool("ps_embed_tool"), addr, name, str(DIM), str(nshards)] +
                       [str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       env=env, timeout=60)
    doc = json.loads(p.stdout.decode().strip().splitlines()[-1])
    assert p.returncode == 0 and doc["ok"], (doc, p.stderr.decode())
    return doc


def test_libps_ef_and_raw_clients_on_one_server(server, tmp_path):
    """A new libps (EF) and a raw-id client (PS_RAW_IDS=1, the lists libps sent before
    IDFORMAT) on the same server: same rows pulled, same tables after the same pushes, and
    the EF client sends fewer bytes."""
    r = server.client()
    addr = "127.0.0.1:%d" % server.port
    rng = np.random.default_rng(3)
    ids = step_ids(rng, 2000)
    rng.shuffle(ids)
    ip, gp = tmp_path / "ids.bin", tmp_path / "g.bin"
    ip.write_bytes(raw(ids))
    gp.write_bytes(rng.standard_normal((len(ids), DIM)).astype("<f4").tobytes())
    opts = "INIT NORMAL 0 1 SEED 7 SALT 11 OPTIM ADAGRAD LR 0.1"
    sent, rows = {}, {}
    for name, raw_ids in (("new", False), ("old", True)):
        _embed_tool(addr, name, 2, "create", opts, raw_ids=raw_ids)
        before = _net_in(r)
        _embed_tool(addr, name, 2, "push", ip, gp, 3, 0, raw_ids=raw_ids)
        out = tmp_path / ("rows_%s.bin" % name)
        _embed_tool(addr, name, 2, "pull", ip, out, raw_ids=raw_ids)
        sent[name] = _net_in(r) - before
        rows[name] = np.fromfile(out, dtype="<f4").reshape(len(ids), DIM)
    # rows land in the caller's order either way: the same values, bit for bit (three
    # Adagrad steps: the optimizer state agrees too). The digests may differ: EF creates
    # rows in ascending id order, the raw list in the caller's (storage order).
    assert rows["new"].tobytes() == rows["old"].tobytes()
    keys = {n: sorted(r.keys("%s:*" % n)) for n in ("new", "old")}
    assert len(keys["new"]) == len(keys["old"]) == 2
    for kn, ko in zip(keys["new"], keys["old"]):
        a, b = r.execute_command("PS.INFO", kn), r.execute_command("PS.INFO", ko)
        assert a[a.index(b"rows") + 1] == b[b.index(b"rows") + 1]
    # ids are a part of the bytes (rows and gradients are the rest); 2000 ids x 4 requests
    saved = sent["old"] - sent["new"]
    assert saved > 0.10 * 8 * len(ids) * 4, sent


def test_ef_pushes_replicate_and_replay_from_the_aof(make_server, make_replica):
    """An EF push is replicated and logged with its ids as a raw list (no IDFORMAT: replicas
    and AOF readers of any version take it): the replica and the master restarted from its
    AOF hold the master's table, digest for digest."""
    from psserver import wait_for_replication
    m = make_server(args=("--appendonly", "yes", "--appendfsync", "always"))
    rep = make_replica(m)
    r = m.client()
    create(r, "t")
    rng = np.random.default_rng(9)
    for seq in range(1, 6):
        ids = step_ids(rng, 200)
        g = rng.standard_normal((len(ids), DIM)).astype(np.float32)
        r.execute_command("PS.PUSHGRAD", "t", f32(g), "IDS", ef_encode(ids), "IDFORMAT", "EF",
                          "ID", "w", seq)
    want = digest(r, "t")
    wait_for_replication(m, [rep])
    assert digest(rep.client(), "t") == want
    # replicated and logged with raw ids, without IDFORMAT: what every module version reads
    aof = b""
    for root, _, names in os.walk(m.dir):
        for nm in names:
            if ".aof" in nm:
                with open(os.path.join(root, nm), "rb") as f:
                    aof += f.read()
    assert b"PUSHGRAD" in aof.upper() and b"IDFORMAT" not in aof.upper()
    assert raw(sorted(ids)) in aof
    m.restart()
    assert digest(m.client(), "t") == want
