"""Embedding tables (ps-embeds) across persistence and replication: after concurrent pushes with
admission, TTL, CAPACITY and explicit eviction active, a replica, DEBUG RELOAD, a restart from
RDB, an AOF replay of the commands and an AOF rewritten without the RDB preamble (the
PS._RESTORE EMBED parts) all hold bit-identical tables (DEBUG DIGEST-VALUE and pulls). Crafted
RESTORE payloads of the type (bad dim, counts, duplicate ids, huge claimed sizes, truncation)
answer an error, create nothing and the server keeps serving. The golden RDB of encoding
versions 1 (no index salt: loads with salt 0) and 2 (golden/embed/v*) still load to the
recorded digest and values."""

import json
import os
import shutil
import struct
import threading
import time

import numpy as np
import pytest

import psserver
from pshelpers import ERROR_CODE_RE, f32, from_f32, info, reseal
from psserver import digest, wait_for_replication
from test_restore_crafted import OP_EOF, OP_STRING, OP_UINT, RDB_TYPE_MODULE_2, RDB_VERSION, enc_len, module_id

GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden", "embed")
IDS = list(range(0, 400, 3)) + [2**64 - 1]


def ids_blob(ids):
    return struct.pack("<%dQ" % len(ids), *ids)


def pull_all(c, key, ids=IDS):
    v, data = c.execute_command("PS.PULL", key, "IDS", ids_blob(ids))
    return v, data


def workload(c, key, seed, pushes, dim):
    """Pushes of random (Zipf-ish) ids with duplicates, exactly-once IDs, some EVICTs."""
    rng = np.random.default_rng(seed)
    for k in range(pushes):
        n = int(rng.integers(1, 40))
        ids = [int(x) % 400 for x in rng.zipf(1.3, n)]
        g = rng.standard_normal((n, dim)).astype(np.float32)
        args = ["ID", "w%d" % seed, k + 1] if k % 3 == 0 else []
        c.execute_command("PS.PUSHGRAD", key, f32(g), "IDS", ids_blob(ids), *args)
        if k % 25 == 24:
            c.execute_command("PS.EVICT", key, "AGE", 40)


def make_tables(c):
    c.execute_command("PS.CREATE", "e:ada", "EMBEDDING", "DIM", 8, "INIT", "NORMAL", 0, 0.1,
                      "SEED", 9, "OPTIM", "ROWADAGRAD", "LR", 0.1, "ADMIT", 2, "FILTER", 12,
                      "TTL", 60, "CAPACITY", 150)
    c.execute_command("PS.CREATE", "e:ftrl", "EMBEDDING", "DIM", 4, "OPTIM", "FTRL",
                      "ALPHA", 0.1, "L1", 0.01, "CAPACITY", 200)
    c.execute_command("PS.CREATE", "e:adam", "EMBEDDING", "DIM", 3, "INIT", "UNIFORM", -1, 1,
                      "OPTIM", "ADAM", "ADMIT", 3, "FILTER", 10)  # seed drawn by the server


TABLES = {"e:ada": 8, "e:ftrl": 4, "e:adam": 3}


def concurrent_pushes(server, pushes=120):
    threads = []
    for i, (key, dim) in enumerate(sorted(TABLES.items())):
        for w in range(2):
            c = server.client()
            threads.append(threading.Thread(target=workload, args=(c, key, 10 * i + w, pushes, dim)))
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def rewrite_aof(c, timeout=60):
    """BGREWRITEAOF once no rewrite is running (the startup one included), and wait for it."""
    def idle():
        p = c.info("persistence")
        return p["aof_rewrite_in_progress"] == 0 and p["aof_rewrite_scheduled"] == 0
    psserver.wait_until(idle, timeout=timeout)
    c.execute_command("BGREWRITEAOF")
    psserver.wait_until(idle, timeout=timeout)


def salt_of(c, key):
    """The index salt of table 'key': the last header word of its DUMP (encoding 2 on)."""
    p = c.dump(key)
    assert p[0] == RDB_TYPE_MODULE_2 and p[1] == 0x81
    assert struct.unpack(">Q", p[2:10])[0] & 1023 >= 2        # the encoding version
    i, words = 10, []
    while len(words) < len(header(salt=0)):
        assert p[i] == OP_UINT
        b = p[i + 1]
        if b >> 6 == 0:
            words.append(b & 63)
            i += 2
        elif b >> 6 == 1:
            words.append(((b & 63) << 8) | p[i + 2])
            i += 3
        elif b == 0x80:
            words.append(struct.unpack(">I", p[i + 2:i + 6])[0])
            i += 6
        else:
            assert b == 0x81
            words.append(struct.unpack(">Q", p[i + 2:i + 10])[0])
            i += 10
    return words[-1]


def state(c):
    """Per table: digest, pull, rows and the index salt (drawn by the master at PS.CREATE)."""
    return {k: (digest(c, k), pull_all(c, k), info(c, k)["rows"], salt_of(c, k)) for k in TABLES}


def test_replica_reload_restart_and_aof_replay_are_bit_identical(make_server, make_replica):
    m = make_server(args=["--appendonly", "yes", "--aof-use-rdb-preamble", "no"])
    rep = make_replica(m)
    c = m.client()
    make_tables(c)
    concurrent_pushes(m)
    want = state(c)
    assert len({salt_of(c, k) for k in TABLES}) == len(TABLES)   # random per table
    i = info(c, "e:ada")
    assert i["dropped"] > 0 and i["evicted_capacity"] + i["evicted_ttl"] + i["evicted_explicit"] > 0
    assert info(c, "e:adam")["dropped"] > 0
    wait_for_replication(m, [rep])
    assert state(rep.client()) == want, "replica differs"
    # AOF replay of the commands themselves.
    m.restart()
    c = m.client()
    assert state(c) == want, "AOF replay differs"
    # AOF rewrite without the RDB preamble: PS._RESTORE EMBED parts.
    rewrite_aof(c)
    base = [f for f in os.listdir(os.path.join(m.dir, "appendonlydir")) if ".base." in f]
    assert base and b"EMBED" in open(os.path.join(m.dir, "appendonlydir", base[0]), "rb").read()
    m.restart()
    c = m.client()
    assert state(c) == want, "rewritten AOF differs"
    # DEBUG RELOAD (RDB save + load) and a restart from RDB.
    c.execute_command("DEBUG", "RELOAD")
    assert state(c) == want, "DEBUG RELOAD differs"
    # A restart from the RDB file alone (a fresh server over a copy of dump.rdb). The
    # replica resyncs after each restart above, and its full sync's BGSAVE refuses a SAVE
    # while it runs ("Background save already in progress"): wait for it.
    deadline = time.monotonic() + 30
    while c.info("persistence")["rdb_bgsave_in_progress"] and time.monotonic() < deadline:
        time.sleep(0.02)
    c.save()
    d2 = os.path.join(m.dir, "rdbonly")
    os.mkdir(d2)
    shutil.copy(os.path.join(m.dir, "dump.rdb"), os.path.join(d2, "dump.rdb"))
    c2 = make_server(dir=d2).client()
    assert state(c2) == want, "restart from RDB differs"
    # The loaded tables keep evolving exactly like the original.
    for cl in (c, c2):
        workload(cl, "e:ada", 99, 30, 8)
    assert digest(c, "e:ada") == digest(c2, "e:ada")


def test_copy_has_the_same_digest_and_evolves_alike(r):
    make_tables(r)
    workload(r, "e:ada", 1, 40, 8)
    assert r.copy("e:ada", "e:copy")
    assert digest(r, "e:copy") == digest(r, "e:ada")
    workload(r, "e:ada", 2, 10, 8)
    workload(r, "e:copy", 2, 10, 8)
    assert digest(r, "e:copy") == digest(r, "e:ada")


@pytest.mark.slow
def test_tables_bigger_than_one_chunk_survive_rdb_and_aof(make_server):
    """Rows of dim 65536 (256 KB each): 300 rows span several 32 MB row blocks."""
    s = make_server(args=["--appendonly", "yes", "--aof-use-rdb-preamble", "no"])
    c = s.client()
    dim = 65536
    c.execute_command("PS.CREATE", "big", "EMBEDDING", "DIM", dim, "LR", 1)
    g = np.ones((50, dim), dtype=np.float32)
    for k in range(0, 300, 50):
        c.execute_command("PS.PUSHGRAD", "big", f32(g), "IDS", ids_blob(range(k, k + 50)))
    d = digest(c, "big")
    rewrite_aof(c)
    s.restart(timeout=60)
    c = s.client()
    assert digest(c, "big") == d
    c.execute_command("DEBUG", "RELOAD")
    assert digest(c, "big") == d and info(c, "big")["rows"] == 300


# ---------------------------------------------------------------------------
# Crafted RESTORE payloads (module/type_embed.c's RDB layout)
# ---------------------------------------------------------------------------

def header(dim=2, optim=0, init=0, seed=0, unknown_zeros=0, admit=1, filter_log2=20, capacity=0,
           ttl=0, lr=0.5, momentum=0.9, beta1=0.9, beta2=0.999, eps=1e-8, alpha=0.05, beta=1.0,
           l1=0.0, l2=0.0, init_a=0.0, init_b=0.0, maxstale=-1, dedup_max=1024, version=0,
           nrows=0, sweep_pos=0, created=0, dropped=0, ettl=0, ecap=0, eexp=0, salt=None,
           tombs=None):
    """PS_EMBED_HEADER_FIELDS in order, doubles as bit patterns; the index salt only when
    given (encoding 2 on; encoding 1 has none), then 'tombs' = (TOMBSTONES, horizon, total)
    when given (encoding 3 on)."""
    bits = lambda d: struct.unpack("<Q", struct.pack("<d", d))[0]  # noqa: E731
    return [dim, optim, init, seed, unknown_zeros, admit, filter_log2, capacity, ttl] + \
        [bits(x) for x in (lr, momentum, beta1, beta2, eps, alpha, beta, l1, l2, init_a, init_b)] + \
        [maxstale & (2**64 - 1), dedup_max, version, nrows, sweep_pos, created, dropped, ettl, ecap, eexp] + \
        ([] if salt is None else [salt]) + ([] if tombs is None else list(tombs))


def row(id_, lv=1, pushes=1, acc=0.0, vals=(0.0, 0.0)):
    return struct.pack("<QQIf", id_, lv, pushes, acc) + f32(vals)


def tomb(id_, version):
    return struct.pack("<QQ", id_, version)


def payload(words, strings=(), tail_words=(0,), encver=1, after=(), last_words=()):
    """A RESTORE payload: header words, filter and row strings, the exactly-once count
    (and, from encoding 3, the tombstone count) as tail words, then the tombstone blocks,
    then 'last_words' (from encoding 4: the ring state's length, 0 when untracked)."""
    out = bytearray([RDB_TYPE_MODULE_2]) + b"\x81" + struct.pack(">Q", module_id("ps-embeds", encver))
    for w in words:
        out += bytes([OP_UINT]) + enc_len(w)
    for s in strings:
        out += bytes([OP_STRING]) + enc_len(len(s)) + s
    for w in tail_words:
        out += bytes([OP_UINT]) + enc_len(w)
    for s in after:
        out += bytes([OP_STRING]) + enc_len(len(s)) + s
    for w in last_words:
        out += bytes([OP_UINT]) + enc_len(w)
    out += bytes([OP_EOF]) + struct.pack("<H", RDB_VERSION)
    return reseal(out)


GOOD = payload(header(version=2, nrows=2, created=2), [row(5, 1) + row(9, 2)])

CRAFTED = [
    ("dim-0", payload(header(dim=0))),
    ("dim-2^32+2", payload(header(dim=2**32 + 2, version=1, nrows=1), [row(1)])),
    ("optim-99", payload(header(optim=99))),
    ("rows-claimed-huge", payload(header(version=1, nrows=2**40))),
    ("rows-claimed-but-missing", payload(header(version=1, nrows=3), [row(1)])),
    ("rows-without-version", payload(header(version=0, nrows=1), [row(1)])),
    ("duplicate-ids", payload(header(version=2, nrows=2), [row(5) + row(5, 2)])),
    ("row-version-beyond-table", payload(header(version=1, nrows=1), [row(5, 7)])),
    # push count 0 is a row a ring delta created (docs/design.md "Ring state"): its
    # optimizer state must still be zero
    ("row-pushes-zero-with-state", payload(header(optim=2, version=1, nrows=1),
                                           [row(5, 1, 0, vals=(0.0, 0.0, 1.0, 0.0))])),
    ("rowadagrad-nan-accumulator", payload(header(optim=3, version=1, nrows=1),
                                           [row(5, acc=float("nan"))])),
    ("adam-nan-second-moment", payload(header(optim=4, version=1, nrows=1),
                                       [row(5, vals=(0.0,) * 5 + (float("nan"),))])),
    ("row-block-not-whole-rows", payload(header(version=1, nrows=1), [row(5)[:-1]])),
    ("rows-more-than-capacity", payload(header(version=2, nrows=2, capacity=1), [row(5) + row(6)])),
    ("sgd-row-with-accumulator", payload(header(version=1, nrows=1), [row(5, acc=1.0)])),
    ("adagrad-negative-accumulator", payload(header(optim=2, version=1, nrows=1),
                                             [row(5, vals=(0.0, 0.0, -1.0, 0.0))])),
    ("ftrl-value-not-w", payload(header(optim=5, version=1, nrows=1),
                                 [row(5, vals=(1.0, 0.0, 0.0, 0.0, 0.0, 0.0))])),
    ("filter-claimed-1GB-absent", payload(header(admit=2, filter_log2=30))),
    ("filter-short", payload(header(admit=2, filter_log2=10), [b"\0" * 1000])),
    ("sweep-beyond-rows", payload(header(version=1, nrows=1, sweep_pos=5), [row(5)])),
    ("version-2^64-1", payload(header(version=2**64 - 1, nrows=1), [row(5)])),
    ("dedup-count-huge", payload(header(), [], tail_words=(2**40,))),
    ("dedup-max-huge", payload(header(dedup_max=2**40))),
    ("encver-from-the-future", payload(header(salt=0, tombs=(8, 0, 0)), tail_words=(0, 0, 0),
                                       encver=5)),
    ("ring-state-claimed-huge", payload(header(salt=0, tombs=(8, 0, 0)), tail_words=(0, 0, 2**40),
                                        encver=4)),
    ("ring-state-garbage", payload(header(salt=0, tombs=(8, 0, 0)), tail_words=(0, 0, 10),
                                   after=[b"x" * 10], encver=4)),
    ("ring-state-short-chunk", payload(header(salt=0, tombs=(8, 0, 0)), tail_words=(0, 0, 10),
                                       after=[b"x" * 9], encver=4)),
    ("encver-3-without-tombstone-words", payload(header(salt=0), tail_words=(0, 0), encver=3)),
    ("tombstones-more-than-TOMBSTONES", payload(header(version=3, salt=0, tombs=(1, 0, 2)),
                                                tail_words=(0, 2), after=[tomb(5, 1) + tomb(6, 2)], encver=3)),
    ("tombstones-more-than-removals", payload(header(version=3, salt=0, tombs=(8, 0, 1)),
                                              tail_words=(0, 2), after=[tomb(5, 1) + tomb(6, 2)], encver=3)),
    ("tombstones-out-of-order", payload(header(version=3, salt=0, tombs=(8, 0, 2)),
                                        tail_words=(0, 2), after=[tomb(5, 2) + tomb(6, 1)], encver=3)),
    ("tombstone-beyond-version", payload(header(version=3, salt=0, tombs=(8, 0, 1)),
                                         tail_words=(0, 1), after=[tomb(5, 5)], encver=3)),
    ("tombstone-before-horizon", payload(header(version=3, salt=0, tombs=(8, 2, 1)),
                                         tail_words=(0, 1), after=[tomb(5, 1)], encver=3)),
    ("tombstone-horizon-beyond-version", payload(header(version=3, salt=0, tombs=(8, 5, 0)),
                                                 tail_words=(0, 0), encver=3)),
    ("tombstone-block-not-whole", payload(header(version=3, salt=0, tombs=(8, 0, 1)),
                                          [tomb(5, 1)[:-1]], tail_words=(0, 1), encver=3)),
    ("tombstones-claimed-huge", payload(header(version=3, salt=0, tombs=(8, 0, 2**40)),
                                        tail_words=(0, 2**40), encver=3)),
    ("tombstones-size-beyond-bound", payload(header(version=3, salt=0, tombs=(2**24 + 1, 0, 0)),
                                             tail_words=(0, 0), encver=3)),
    ("encver-2-without-salt", payload(header(), encver=2)),
    ("truncated", GOOD[:-30] + GOOD[-10:-8]),
    ("lr-nan", payload(header(lr=float("nan")))),
    ("admit-0", payload(header(admit=0))),
]


@pytest.fixture(scope="module")
def srv(module_path):
    s = psserver.RedisServer(module=module_path, args=["--rdbcompression", "no"], name="crafted-embed")
    yield s
    s.cleanup()


def test_rows_a_push_can_overflow_to_inf_and_nan_restore(srv):
    """Finite gradients can overflow a row to +-Inf and Inf - Inf to NaN (SGD with a large
    LR); such a table must save and load back (a refused value is an RDB the server cannot
    start from). Sums of squares may be +Inf but never NaN."""
    c = srv.client()
    c.flushall()
    inf, nan = float("inf"), float("nan")
    p = payload(header(optim=3, version=2, nrows=2, created=2),
                [row(5, 1, acc=inf, vals=(nan, -inf)) + row(9, 2, vals=(inf, 1.0))])
    assert c.restore("x", 0, p) == b"OK"
    # an encoding-1 payload loads with salt 0 and dumps as encoding 4 with salt 0, the
    # default tombstone log, empty, its horizon at the loaded version, and no ring state
    assert salt_of(c, "x") == 0
    assert c.dump("x") == payload(header(optim=3, version=2, nrows=2, created=2, salt=0,
                                         tombs=(65536, 3, 0)),
                                  [row(5, 1, acc=inf, vals=(nan, -inf)) + row(9, 2, vals=(inf, 1.0))],
                                  tail_words=(0, 0, 0), encver=4)
    c.execute_command("PS.CREATE", "s", "EMBEDDING", "DIM", 2, "LR", 1e30)
    ids = struct.pack("<Q", 7)
    for g in (3e38, -3e38, 3e38):
        c.execute_command("PS.PUSHGRAD", "s", f32([g, g]), "IDS", ids)
    v, data = c.execute_command("PS.PULL", "s", "IDS", ids)
    assert any(x != x or abs(x) == float("inf") for x in from_f32(data))
    d = psserver.digest(c, "s")
    dumped = c.dump("s")
    c.delete("s")
    assert c.restore("s", 0, dumped) == b"OK" and psserver.digest(c, "s") == d


def test_a_payload_built_from_scratch_restores(srv):
    c = srv.client()
    c.flushall()
    assert c.restore("ok", 0, GOOD) == b"OK"
    assert info(c, "ok")["rows"] == 2 and info(c, "ok")["version"] == 2
    v, data = c.execute_command("PS.PULL", "ok", "IDS", ids_blob([5, 9, 7]))
    assert v == 2 and len(data) == 24
    # And a DUMP of it gives back a payload of the latest layout, salt 0 and the tombstone
    # log's words included.
    assert c.dump("ok") == payload(header(version=2, nrows=2, created=2, salt=0, tombs=(65536, 3, 0)),
                                   [row(5, 1) + row(9, 2)], tail_words=(0, 0, 0), encver=4)


@pytest.mark.parametrize("name,p", CRAFTED, ids=[x[0] for x in CRAFTED])
def test_crafted_restore_is_refused_and_the_server_survives(srv, name, p):
    assert srv.is_alive(), srv.log_tail()
    c = srv.client()
    c.flushall()
    c.execute_command("PS.CREATE", "canary", "EMBEDDING", "DIM", 2)
    c.execute_command("PS.PUSHGRAD", "canary", f32([1, 2]), "IDS", ids_blob([1]))
    before = digest(c, "canary")
    with srv.raw() as raw:
        rep = raw.call("RESTORE", "dst", "0", p, "REPLACE")
    assert isinstance(rep, Exception) and ERROR_CODE_RE.match(str(rep)), (name, rep)
    assert c.exists("dst") == 0 and digest(c, "canary") == before
    assert c.ping()


# ---------------------------------------------------------------------------
# Golden RDB (golden/embed/make_golden_embed.py)
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("version", sorted(d for d in os.listdir(GOLDEN) if os.path.isdir(os.path.join(GOLDEN, d))))
def test_golden_rdb_loads_bit_identical(make_server, tmp_path, version):
    src = os.path.join(GOLDEN, version)
    if not os.path.isfile(os.path.join(src, "dump.rdb")):
        pytest.skip("not a golden directory")
    shutil.copy(os.path.join(src, "dump.rdb"), tmp_path / "dump.rdb")
    with open(os.path.join(src, "expected.json")) as f:
        expected = json.load(f)
    s = make_server(dir=str(tmp_path))
    c = s.client()
    for key, e in expected.items():
        assert digest(c, key).decode() == e["digest"], key
        _, data = c.execute_command("PS.PULL", key, "IDS", ids_blob(e["ids"]))
        assert data.hex() == e["pull"], key
        i = info(c, key)
        for f in ("rows", "version", "created", "dropped", "dedup_clients"):
            assert i[f] == e["info"][f], (key, f)
        # The next push lands on the recorded bits (optimizer state and admission intact).
        c.execute_command("PS.PUSHGRAD", key, f32(np.full(len(e["ids"]) * e["dim"], 0.5)),
                          "IDS", ids_blob(e["ids"]))
        assert digest(c, key).decode() == e["digest_after_push"], key


def test_there_is_a_golden_file_of_the_latest_embed_encoding():
    import re
    path = os.path.join(psserver.REPO_ROOT, "module", "embed_glue.h")
    defs = dict(re.findall(r"#define (PS_EMBED_ENCVER_\w+) (\w+)", open(path).read()))
    v = defs["PS_EMBED_ENCVER_LATEST"]
    while not v.isdigit():
        v = defs[v]
    for k in range(1, int(v) + 1):
        assert os.path.isfile(os.path.join(GOLDEN, "v%d" % k, "dump.rdb")), k
