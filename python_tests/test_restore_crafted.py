"""RESTORE of crafted ps-tensor payloads with valid checksums: every hostile field the RDB
loader validates (absurd ndim, overflowing dims, data length not matching the shape,
truncated optimizer state, huge dedup/snapshot counts, an encoding version from the future,
bad hyper-parameters, ...) answers an error, creates nothing, and the server keeps serving.

The payloads come from a small DUMP builder (below). It is checked against the server
itself: parsing a real DUMP (taken with rdbcompression off) and building it again gives
the same bytes, and a payload built from scratch RESTOREs to the same digest as the
tensor it describes."""

import math
import struct

import numpy as np
import pytest

import psserver
from pshelpers import ERROR_CODE_RE, crc64, create_data, digest, f32, info, reseal

# ---------------------------------------------------------------------------
# DUMP payload format (Redis 7.0):
#   RDB_TYPE_MODULE_2 (7), module id as a 64-bit length (0x81 + 8 bytes big-endian),
#   the value as module opcodes (UINT 2 + length, DOUBLE 4 + 8 bytes LE, STRING 5 +
#   length + bytes; SaveSigned is a UINT of the two's complement), RDB_MODULE_OPCODE_EOF,
#   2-byte RDB version (little-endian), CRC64 (Jones) of all of that, little-endian.
# ---------------------------------------------------------------------------

RDB_TYPE_MODULE_2 = 7
OP_EOF, OP_UINT, OP_DOUBLE, OP_STRING = 0, 2, 4, 5
RDB_VERSION = 10
MODULE_CHARSET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def module_id(name="ps-tensor", encver=1):
    """Redis's 64-bit module type id: 9 chars x 6 bits, then a 10-bit encoding version."""
    mid = 0
    for ch in name:
        mid = (mid << 6) | MODULE_CHARSET.index(ch)
    return (mid << 10) | (encver & 1023)


def enc_len(n):
    if n < 64:
        return bytes([n])
    if n < 16384:
        return bytes([0x40 | (n >> 8), n & 0xFF])
    if n <= 0xFFFFFFFF:
        return b"\x80" + struct.pack(">I", n)
    return b"\x81" + struct.pack(">Q", n)


def U(v):
    """An unsigned (or, as two's complement, a signed) module value."""
    return ("u", v & 0xFFFFFFFFFFFFFFFF)


def D(v):
    return ("d", float(v))


def S(b):
    return ("s", bytes(b))


def build(items, encver=1, eof=True, rdbver=RDB_VERSION, type_byte=RDB_TYPE_MODULE_2):
    """A complete DUMP payload (checksum included) from a list of U/D/S items."""
    out = bytearray([type_byte]) + b"\x81" + struct.pack(">Q", module_id(encver=encver))
    for kind, v in items:
        if kind == "u":
            out += bytes([OP_UINT]) + enc_len(v)
        elif kind == "d":
            out += bytes([OP_DOUBLE]) + struct.pack("<d", v)
        elif kind == "s":
            out += bytes([OP_STRING]) + enc_len(len(v)) + v
        elif kind == "raw":
            out += v
        else:
            raise ValueError(kind)
    if eof:
        out += bytes([OP_EOF])
    out += struct.pack("<H", rdbver)
    return reseal(out)


def _read_len(p, i):
    b = p[i]
    t = b >> 6
    if t == 0:
        return b & 0x3F, i + 1
    if t == 1:
        return ((b & 0x3F) << 8) | p[i + 1], i + 2
    if b == 0x80:
        return struct.unpack(">I", p[i + 1:i + 5])[0], i + 5
    if b == 0x81:
        return struct.unpack(">Q", p[i + 1:i + 9])[0], i + 9
    raise ValueError("encoded length 0x%02x not supported (take DUMPs with rdbcompression no)" % b)


def parse(payload):
    """A DUMP payload of a ps-tensor -> (encver, [items]). Checks the CRC and framing."""
    body, crc = payload[:-8], struct.unpack("<Q", payload[-8:])[0]
    assert crc64(body) == crc, "bad CRC"
    assert body[0] == RDB_TYPE_MODULE_2 and body[1] == 0x81, body[:2].hex()
    mid = struct.unpack(">Q", body[2:10])[0]
    assert mid >> 10 == module_id() >> 10, "not a ps-tensor payload"
    i, items = 10, []
    while True:
        op = body[i]
        i += 1
        if op == OP_EOF:
            break
        if op == OP_UINT:
            v, i = _read_len(body, i)
            items.append(U(v))
        elif op == OP_DOUBLE:
            items.append(D(struct.unpack("<d", body[i:i + 8])[0]))
            i += 8
        elif op == OP_STRING:
            n, i = _read_len(body, i)
            items.append(S(body[i:i + n]))
            i += n
        else:
            raise ValueError("opcode %d" % op)
    assert struct.unpack("<H", body[i:i + 2])[0] == RDB_VERSION and i + 2 == len(body)
    return mid & 1023, items


OPTIMS = ["SGD", "MOMENTUM", "NESTEROV", "ADAGRAD", "RMSPROP", "ADAM", "ADAMW", "ACCUM"]
NSTATE = {"SGD": 0, "MOMENTUM": 1, "NESTEROV": 1, "ADAGRAD": 1, "RMSPROP": 1, "ADAM": 2,
          "ADAMW": 2, "ACCUM": 0}


def tensor_items(dims=(2, 3), values=None, version=0, optim="SGD", lr=0.1, momentum=0.9,
                 beta1=0.9, beta2=0.999, eps=1e-8, wd=0.0, clipnorm=0.0, step=0, b1pow=1.0,
                 b2pow=1.0, maxstale=-1, policy=0, sync_n=0, sync_timeout=0, dedup_max=1024,
                 max_snapshots=16, round_count=0, state=None, dedup=(), snaps=None,
                 ndim=None, nsnap=None, ndedup=None):
    """The items of one tensor in module/type.c's RDB order. Every field can be overridden
    (ndim/nsnap/ndedup independently of the lists they count) to craft bad payloads."""
    n = math.prod(dims) if dims else 0
    if values is None:
        values = np.arange(n, dtype=np.float32) / 4
    items = [U(len(dims) if ndim is None else ndim)] + [U(d) for d in dims]
    items += [U(version), U(OPTIMS.index(optim) if isinstance(optim, str) else optim)]
    items += [D(x) for x in (lr, momentum, beta1, beta2, eps, wd, clipnorm)]
    items += [U(step), D(b1pow), D(b2pow), U(maxstale), U(policy), U(sync_n),
              U(sync_timeout), U(dedup_max), U(max_snapshots), U(round_count)]
    items.append(S(values if isinstance(values, bytes) else f32(values)))
    if state is None:
        state = [np.zeros(n, np.float32) for _ in range(NSTATE.get(optim, 0))]
    items += [S(f32(s)) if not isinstance(s, bytes) else S(s) for s in state]
    items.append(U(len(dedup) if ndedup is None else ndedup))
    for cid, seq, ver in dedup:
        items += [S(cid), U(seq), U(ver)]
    snaps = snaps or []
    items.append(U(len(snaps) if nsnap is None else nsnap))
    for s in snaps:
        items += s
    return items


def accum_items(acc=(0, 0, 0), arrays=(), optim="ACCUM", sync_n=0):
    """A tensor in the PS_ENCVER_ACCUM (4) layout: tensor_items' header plus acc_count,
    acc_seq, pend_count after round_count, and after the values the arrays of the sum and
    the pending slot (no exactly-once entries, no snapshots). From PS_ENCVER_ACCUM_ROUNDS
    (5), 'acc' also carries max_backlog, pend_parts, pend_done, takes, rounds, forwarded,
    round_max, round_min (11 numbers)."""
    items = tensor_items(optim=optim, sync_n=sync_n)
    k = 1 + 2 + 2 + 7 + 10          # ndim, dims (2, 3), version, optim, 7 hyper, 10 scalars
    return items[:k] + [U(a) for a in acc] + [items[k]] + [S(f32(a)) for a in arrays] + \
        items[k + 1:]


def snap_items(name=b"s", version=0, unix_ms=1700000000000, step=0, b1pow=1.0, b2pow=1.0,
               flags=1, arrays=()):
    return [S(name), U(version), U(unix_ms), U(step), D(b1pow), D(b2pow), U(flags)] + \
        [S(a) for a in arrays]


# ---------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def srv(module_path):
    s = psserver.RedisServer(module=module_path, args=["--rdbcompression", "no"],
                             name="crafted")
    yield s
    s.cleanup()


@pytest.fixture
def env(srv):
    """The shared server with a canary tensor 'c' (Adam, pushed, snapshotted)."""
    if not srv.is_alive():
        pytest.fail("server died earlier:\n" + srv.log_tail())
    c = srv.client()
    c.flushall()
    create_data(c, "c", np.ones((2, 2), np.float32), "OPTIM", "ADAM", "LR", "0.01")
    c.execute_command("PS.PUSHGRAD", "c", f32(np.ones(4)), "ID", "w", 1)
    c.execute_command("PS.SNAPSHOT", "c", "s1")
    return srv, c


def restore(srv, payload, key="dst"):
    with srv.raw() as raw:
        return raw.call("RESTORE", key, "0", payload, "REPLACE")


def assert_refused(srv, c, payload, what):
    before = digest(c, "c")
    rep = restore(srv, payload)
    assert srv.is_alive(), "server died on %s\n%s" % (what, srv.log_tail())
    assert isinstance(rep, psserver.RespError), "%s accepted: %r" % (what, rep)
    assert ERROR_CODE_RE.match(str(rep)), "%s: error without a code: %r" % (what, str(rep))
    assert c.exists("dst") == 0, what
    assert c.ping()
    assert digest(c, "c") == before, what
    assert c.execute_command("PS.PULL", "c")[0] == 1


# ---------------------------------------------------------------------------
# The builder is right
# ---------------------------------------------------------------------------

def test_builder_parses_and_rebuilds_a_real_dump_byte_for_byte(env):
    srv, c = env
    c.execute_command("PS.CREATE", "a", "SHAPE", 3, 2, "OPTIM", "ADAMW", "INIT", "UNIFORM",
                      "-1", "1", "SEED", 5, "SYNC", 3)
    c.execute_command("PS.PUSHGRAD", "a", f32(np.ones(6)), "ID", "w", 2)
    c.execute_command("PS.SNAPSHOT", "a", "snap")
    for key in ("a", "c"):
        real = c.dump(key)
        encver, items = parse(real)
        assert encver == 6   # PS_ENCVER_RING (module/core/encver.h)
        assert build(items, encver) == real, key


def test_payload_built_from_scratch_restores_the_tensor_it_describes(env):
    srv, c = env
    vals = np.array([[1, 2, 3], [4, 5, 6]], np.float32) / 8
    create_data(c, "ref", vals, "OPTIM", "MOMENTUM", "LR", "0.1")
    c.execute_command("PS.PUSHGRAD", "ref", f32(np.ones(6)), "ID", "w", 3)
    v, data = c.execute_command("PS.PULL", "ref")
    # MOMENTUM after one push with g = 1, lr 0.1, mu 0.9: velocity 1, step 1.
    payload = build(tensor_items(dims=(2, 3), values=np.frombuffer(data, "<f4"), version=1,
                                 optim="MOMENTUM", lr=0.1, step=1, b1pow=0.9, b2pow=0.999,
                                 state=[np.ones(6, np.float32)], dedup=[(b"w", 3, 1)]))
    assert restore(srv, payload) == "OK"
    assert digest(c, "dst") == digest(c, "ref")
    assert info(c, "dst")["version"] == 1


# ---------------------------------------------------------------------------
# Crafted payloads: refused, nothing created, server serving
# ---------------------------------------------------------------------------

def _bad_cases():
    t = tensor_items
    big = 1 << 32
    cases = {
        # shape
        "ndim-0": t(dims=(), ndim=0),
        "ndim-9": t(dims=(1,) * 9),
        "ndim-huge": t(dims=(2,), ndim=1 << 40),
        "ndim-u64-max": t(dims=(2,), ndim=(1 << 64) - 1),
        "dim-zero": t(dims=(2, 0), values=np.zeros(0, np.float32)),
        "dims-product-overflows-u64": t(dims=(big, big, big), values=np.zeros(1, np.float32)),
        "dims-byte-size-overflows": t(dims=(1 << 62, 2), values=np.zeros(1, np.float32)),
        "dims-4-tib-no-data": t(dims=(1 << 20, 1 << 20), values=np.zeros(1, np.float32)),
        "dims-u64-max": t(dims=((1 << 64) - 1,), values=np.zeros(1, np.float32)),
        # data length vs shape
        "data-short": t(dims=(2, 3), values=np.zeros(5, np.float32)),
        "data-long": t(dims=(2, 3), values=np.zeros(7, np.float32)),
        "data-empty": t(dims=(2, 3), values=np.zeros(0, np.float32)),
        "data-odd-bytes": t(dims=(2,), values=b"\0" * 9),
        # optimizer state
        "adam-missing-second-state": t(optim="ADAM", state=[np.zeros(6, np.float32)]),
        "adam-no-state": t(optim="ADAM", state=[]),
        "momentum-state-short": t(optim="MOMENTUM", state=[np.zeros(5, np.float32)]),
        "optim-unknown": t(optim=8),
        "optim-huge": t(optim=1 << 63),
        "lr-nan": t(lr=float("nan")),
        "lr-negative": t(lr=-1.0),
        "beta1-inf": t(optim="ADAM", beta1=float("inf")),
        "b1pow-above-1": t(optim="ADAM", b1pow=2.0),
        "b2pow-nan": t(optim="ADAM", b2pow=float("nan")),
        "policy-7": t(policy=7),
        "maxstale-minus-2": t(maxstale=-2),
        "sync-n-over-u32": t(sync_n=1 << 33),
        "sync-timeout-negative": t(sync_n=2, sync_timeout=-5),
        "round-without-sync": t(round_count=1),
        "round-count-missing-array": t(sync_n=3, round_count=2),
        # exactly-once table
        "dedup-max-huge": t(dedup_max=1 << 40),
        "dedup-count-over-max": t(dedup_max=2, dedup=[(b"a", 1, 0)] * 3),
        "dedup-count-huge-no-entries": t(ndedup=1 << 62),
        "dedup-count-u64-max": t(ndedup=(1 << 64) - 1),
        "dedup-truncated-entry": t(dedup=[(b"a", 1, 0)], ndedup=2),
        "dedup-id-over-64k": t(dedup=[(b"x" * 70000, 1, 0)]),
        # snapshots
        "snapshots-4097": t(nsnap=4097),
        "snapshots-huge": t(nsnap=1 << 40),
        "snapshots-u64-max": t(nsnap=(1 << 64) - 1),
        "snapshots-count-more-than-present": t(snaps=[snap_items()], nsnap=2),
        "snapshot-from-the-future": t(version=3, snaps=[snap_items(version=4)]),
        "snapshot-bad-flags": t(snaps=[snap_items(flags=8)]),
        "snapshot-b1pow-nan": t(snaps=[snap_items(b1pow=float("nan"))]),
        "snapshot-data-short": t(snaps=[snap_items(flags=0, arrays=[b"\0" * 20])]),
        "snapshot-missing-state": t(optim="ADAM", snaps=[snap_items(flags=1)]),
        "max-snapshots-huge": t(max_snapshots=1 << 40),
    }
    for name, items in list(cases.items()):
        cases[name] = build(items)
    good = tensor_items()
    # Framing and types: a double where an integer belongs, a truncated stream, no EOF,
    # trailing items, and encoding versions this module does not know.
    cases["double-as-ndim"] = build([D(2.0)] + good[1:])
    cases["string-as-version"] = build(good[:3] + [S(b"1")] + good[4:])
    cases["truncated-after-header"] = build(good[:21])
    cases["truncated-mid-values"] = build(good[:22] + [("raw", bytes([OP_STRING]) + enc_len(24) + b"\0" * 8)], eof=False)
    cases["no-eof"] = build(good, eof=False)
    cases["trailing-item"] = build(good + [U(1)])
    cases["encver-7-from-the-future"] = build(good, encver=7)
    # ACCUM tensors (encver 4): their fields on another optimizer, with SYNC, a pending
    # slot without a seq, a sum or slot announced but missing or short.
    z6, z5 = np.zeros(6, np.float32), np.zeros(5, np.float32)
    cases["accum-fields-on-sgd"] = build(accum_items((1, 5, 0), [z6], optim="SGD"), encver=4)
    cases["accum-with-sync"] = build(accum_items(sync_n=2), encver=4)
    cases["accum-pending-without-seq"] = build(accum_items((0, 0, 2), [z6]), encver=4)
    cases["accum-sum-missing"] = build(accum_items((3, 1, 0)), encver=4)
    cases["accum-pending-short"] = build(accum_items((0, 1, 2), [z5]), encver=4)
    # Encver 5: a pending take of more parts than gradients, its next part past the last,
    # parts without a pending take, round counters out of order or on another optimizer.
    ok5 = (0, 9, 4, 8, 2, 1, 1, 2, 2, 2, 2)        # 4 pending in 2 parts, 1 acknowledged
    assert len(ok5) == 11
    for name, acc in (("accum-parts-over-count", (0, 9, 4, 8, 5, 0, 1, 0, 0, 0, 0)),
                      ("accum-part-done-past-last", (0, 9, 4, 8, 2, 2, 1, 0, 0, 0, 0)),
                      ("accum-parts-without-take", (0, 9, 0, 8, 2, 0, 1, 0, 0, 0, 0)),
                      ("accum-round-min-over-max", (0, 9, 4, 8, 2, 1, 1, 1, 2, 2, 3)),
                      ("accum-rounds-without-sizes", (0, 9, 4, 8, 2, 1, 1, 1, 2, 0, 0))):
        cases[name] = build(accum_items(acc, [z6]), encver=5)
    cases["accum-counters-on-sgd"] = build(
        accum_items((0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0), optim="SGD"), encver=5)
    # Snapshot sharing (encver 3): an index that names no earlier snapshot, both sharing
    # kinds for one array, unknown flag bits; and (any version) a name over 1024 bytes,
    # the limit PS.SNAPSHOT and PS._RESTORE SNAPSHOT apply too.
    cases["snapshot-shares-no-earlier-snapshot"] = build(
        tensor_items(snaps=[snap_items(flags=8) + [U(0)]]), encver=3)
    cases["snapshot-shares-itself"] = build(
        tensor_items(snaps=[snap_items(name=b"a"), snap_items(name=b"b", flags=8) + [U(1)]]),
        encver=3)
    cases["snapshot-shares-live-and-earlier"] = build(
        tensor_items(snaps=[snap_items(name=b"a"), snap_items(name=b"b", flags=9) + [U(0)]]),
        encver=3)
    cases["snapshot-flags-64"] = build(tensor_items(snaps=[snap_items(flags=64)]), encver=3)
    cases["snapshot-name-1025"] = build(tensor_items(snaps=[snap_items(name=b"x" * 1025)]))
    cases["snapshot-duplicate-name"] = build(tensor_items(snaps=[snap_items(), snap_items()]))
    cases["encver-1023"] = build(good, encver=1023)
    cases["encver-0"] = build(good, encver=0)
    cases["rdb-version-from-the-future"] = build(good, rdbver=RDB_VERSION + 50)
    return cases


BAD = _bad_cases()


def test_control_payload_is_accepted(env):
    """The crafted cases differ from this accepted payload only in the field they name."""
    srv, c = env
    assert restore(srv, build(tensor_items())) == "OK"
    assert restore(srv, build(tensor_items(optim="ADAM", dedup=[(b"a", 1, 0)],
                                           snaps=[snap_items(flags=7)]))) == "OK"
    # encver 3: snapshot b holds snapshot a's values (taken with no write between them).
    assert restore(srv, build(tensor_items(snaps=[
        snap_items(name=b"a", flags=0, arrays=[f32(np.ones(6))]),
        snap_items(name=b"b", flags=8) + [U(0)],
        snap_items(name=b"x" * 1024)]), encver=3)) == "OK"
    assert c.execute_command("PS.PULL", "dst", "AT", "b")[1] == f32(np.ones(6))
    # An ACCUM tensor with a sum of 2 pushes and a pending slot of 3 under seq 7.
    assert restore(srv, build(accum_items((2, 7, 3), [np.ones(6), np.full(6, 2.0)]),
                              encver=4)) == "OK"
    assert c.execute_command("PS.TAKE", "dst") == [7, 3, f32(np.full(6, 2.0)), 3, 1]
    # Encver 5: 4 pending in 2 parts (seqs 8, 9), the first acknowledged: the next is seq 9.
    assert restore(srv, build(accum_items((0, 9, 4, 8, 2, 1, 1, 1, 2, 2, 2), [np.ones(6)]),
                              encver=5)) == "OK"
    assert c.execute_command("PS.TAKE", "dst") == [9, 2, f32(np.ones(6)), 4, 1]
    assert (info(c, "dst")["max_backlog"], info(c, "dst")["relay_rounds"]) == (8, 1)
    # An open sync round: SGD has no state, so the one extra array is the round's.
    assert restore(srv, build(tensor_items(sync_n=3, round_count=2,
                                           state=[np.ones(6, np.float32)]))) == "OK"
    assert info(c, "dst")["version"] == 0


@pytest.mark.parametrize("name", sorted(BAD))
def test_crafted_payload_is_refused_and_server_keeps_serving(env, name):
    srv, c = env
    assert_refused(srv, c, BAD[name], name)


def test_all_crafted_payloads_in_a_row_then_normal_work(env):
    srv, c = env
    with srv.raw() as raw:
        for name in sorted(BAD):
            rep = raw.call("RESTORE", "dst", "0", BAD[name], "REPLACE")
            assert isinstance(rep, psserver.RespError), name
        assert raw.call("PING") == "PONG"
    assert c.execute_command("PS.PUSHGRAD", "c", f32(np.ones(4))) == 2
    c.execute_command("DEBUG", "RELOAD")
    assert info(c, "c")["version"] == 2
