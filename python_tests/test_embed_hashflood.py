"""Ids crafted against the public id hash (PSEmbed_Mix64, an invertible mixer) do not make a
push or pull quadratic. The push's repeat finder buckets ids by the mix's low bits and the
table's index by its high bits: ids whose unkeyed mixes share those bits all landed in one
probe run and a push of 32768 of them took ~300x as long as one of ordinary ids. The finder is
keyed with a per-process random salt, the index with a per-table salt drawn by the master at
PS.CREATE (replicated as SALT, saved from encoding 2)."""

import random
import struct
import time

import numpy as np

from pshelpers import f32
from psserver import digest, wait_for_replication
from test_embed_persistence import rewrite_aof, salt_of

M64 = (1 << 64) - 1
C1 = 0xff51afd7ed558ccd
C2 = 0xc4ceb9fe1a85ec53
DIM = 2
N = 32768


def mix64(x):
    """module/core/embed.h PSEmbed_Mix64 (MurmurHash3's finalizer)."""
    x ^= x >> 33
    x = (x * C1) & M64
    x ^= x >> 33
    x = (x * C2) & M64
    x ^= x >> 33
    return x


def unmix64(h):
    """The id whose mix64 is h: x ^= x >> 33 is its own inverse on 64 bits (33 * 2 >= 64)
    and the odd multipliers have inverses mod 2^64."""
    h ^= h >> 33
    h = (h * pow(C2, -1, 1 << 64)) & M64
    h ^= h >> 33
    h = (h * pow(C1, -1, 1 << 64)) & M64
    h ^= h >> 33
    return h


def low_colliding_ids(n, rng, low_bits=24):
    """n distinct ids whose unkeyed mixes all end in low_bits zero bits."""
    hs = rng.sample(range(1, 1 << (64 - low_bits)), n)
    ids = [unmix64(h << low_bits) for h in hs]
    assert all(mix64(i) & ((1 << low_bits) - 1) == 0 for i in ids[:100])
    return ids


def high_colliding_ids(n, rng, high_bits=24):
    """n distinct ids whose unkeyed mixes all start with high_bits zero bits (one home bucket
    of the unsalted index, whatever its size below 2^high_bits)."""
    hs = rng.sample(range(1, 1 << (64 - high_bits)), n)
    return [unmix64(h) for h in hs]


def ids_blob(ids):
    return struct.pack("<%dQ" % len(ids), *ids)


def push_seconds(r, key, ids, *create):
    """Seconds one PS.PUSHGRAD of 'ids' into the new table 'key' (created with 'create' options)
    takes (client side)."""
    r.execute_command("PS.CREATE", key, "EMBEDDING", "DIM", DIM, "OPTIM", "SGD", "LR", 0.1, *create)
    g = f32(np.ones(len(ids) * DIM, np.float32))
    blob = ids_blob(ids)
    t0 = time.perf_counter()
    r.execute_command("PS.PUSHGRAD", key, g, "IDS", blob)
    dt = time.perf_counter() - t0
    r.delete(key)
    return dt


def crafted_vs_ordinary(r, crafted, ordinary, *create, reps=3):
    """(best crafted, best ordinary) push times, interleaved so both see the same load."""
    tc, to = [], []
    for i in range(reps):
        to.append(push_seconds(r, "o%d" % i, ordinary, *create))
        tc.append(push_seconds(r, "c%d" % i, crafted, *create))
    return min(tc), min(to)


def crafted_push_is_about_as_fast(make_server, seed, make_ids):
    """Asserts a push of N ids from make_ids costs at most 10x one of N ordinary ids (the
    unkeyed code: ~300x); returns the client, the crafted ids and the ordinary push time."""
    r = make_server().client()
    rng = random.Random(seed)
    crafted = make_ids(N, rng)
    tc, to = crafted_vs_ordinary(r, crafted, rng.sample(range(1, 1 << 63), N))
    assert tc < 10 * to + 0.01, (tc, to)
    return r, crafted, to


def test_push_of_ids_colliding_in_the_unkeyed_low_bits_is_not_quadratic(make_server):
    r, crafted, _ = crafted_push_is_about_as_fast(make_server, 12, low_colliding_ids)
    # the pushes stepped every crafted id once: the table holds them all
    r.execute_command("PS.CREATE", "t", "EMBEDDING", "DIM", DIM, "OPTIM", "SGD", "LR", 0.1)
    res = r.execute_command("PS.PUSHGRAD", "t", f32(np.ones(2 * N * DIM, np.float32)), "IDS",
                            ids_blob(crafted + crafted))
    assert r.execute_command("PS.PULL", "t", "IDS", ids_blob(crafted[:3]))[1] == \
        f32(np.full(3 * DIM, -0.2, np.float32)), res


def test_ids_colliding_in_the_unkeyed_index_are_fast_in_a_table_created_without_salt(make_server):
    r, crafted, to = crafted_push_is_about_as_fast(make_server, 13, high_colliding_ids)
    # pulls of them from a filled table too
    r.execute_command("PS.CREATE", "t", "EMBEDDING", "DIM", DIM)
    r.execute_command("PS.PUSHGRAD", "t", f32(np.ones(N * DIM, np.float32)), "IDS", ids_blob(crafted))
    assert salt_of(r, "t") != 0
    t0 = time.perf_counter()
    r.execute_command("PS.PULL", "t", "IDS", ids_blob(crafted))
    assert time.perf_counter() - t0 < 10 * to + 0.01
    # SALT 0 is the unkeyed index: the same ids are slow there (what the salt prevents)
    slow = push_seconds(r, "z", crafted[:N // 4], "SALT", 0)
    assert slow > 3 * to, (slow, to)


def scan_from(c, key, cursor, count=None):
    """Ids a SCANROWS from 'cursor' reports: up to one call if count, else to the end; and the
    next cursor."""
    ids = []
    while True:
        args = ["COUNT", count] if count else []
        cursor, _, blob, _ = c.execute_command("PS.SCANROWS", key, cursor, *args)
        ids += list(struct.unpack("<%dQ" % (len(blob) // 8), blob))
        if count or cursor in (b"0", 0):
            return ids, cursor


def test_salt_is_replicated_and_persisted_so_scan_cursors_carry_over(make_server, make_replica):
    """A scan started on the master continues on a replica, after DEBUG RELOAD and after an AOF
    rewrite and restart: every row exactly once (cursors are positions in salted-hash space)."""
    m = make_server(args=["--appendonly", "yes", "--aof-use-rdb-preamble", "no"])
    rep = make_replica(m)
    c = m.client()
    c.execute_command("PS.CREATE", "t", "EMBEDDING", "DIM", DIM)
    ids = list(range(1, 3001))
    c.execute_command("PS.PUSHGRAD", "t", f32(np.ones(len(ids) * DIM, np.float32)), "IDS",
                      ids_blob(ids))
    first, cur = scan_from(c, "t", 0, count=512)
    assert 0 < len(first) < len(ids) and cur not in (b"0", 0)
    salt = salt_of(c, "t")
    assert salt != 0
    wait_for_replication(m, [rep])
    rc = rep.client()
    rest, _ = scan_from(rc, "t", cur)
    assert sorted(first + rest) == ids, "replica"
    assert digest(rc, "t") == digest(c, "t") and salt_of(rc, "t") == salt
    c.execute_command("DEBUG", "RELOAD")
    rest, _ = scan_from(c, "t", cur)
    assert sorted(first + rest) == ids, "DEBUG RELOAD"
    d = digest(c, "t")
    rewrite_aof(c)
    m.restart()
    c = m.client()
    rest, _ = scan_from(c, "t", cur)
    assert sorted(first + rest) == ids, "AOF rewrite + restart"
    assert digest(c, "t") == d
    assert salt_of(c, "t") == salt



def test_an_aof_table_of_encoding_1_restores_with_salt_0(make_server):
    """PS._RESTORE EMBED of an encoding-1 header (no salt word) loads with the unkeyed index;
    its AOF rewrite is encoding 2 with salt 0 (same rows, same digest)."""
    from test_embed_persistence import header, row
    c = make_server(args=["--appendonly", "yes", "--aof-use-rdb-preamble", "no"]).client()
    h = header(version=2, nrows=2, created=2)
    assert c.execute_command("PS._RESTORE", "x", "EMBED", struct.pack("<%dQ" % len(h), *h),
                             "ENCVER", 1) in (b"OK", "OK", True)
    c.execute_command("PS._RESTORE", "x", "EROWS", row(5, 1) + row(9, 2))
    c.execute_command("PS._RESTORE", "x", "EEND")
    assert salt_of(c, "x") == 0
    d = digest(c, "x")
    rewrite_aof(c)
    c.execute_command("DEBUG", "LOADAOF")
    assert salt_of(c, "x") == 0 and digest(c, "x") == d
    assert c.execute_command("PS.PULL", "x", "IDS", ids_blob([5, 9]))[1] == f32(np.zeros(4))
