"""Ids crafted against the public id hash (PSEmbed_Mix64, an invertible mixer) do not make a
push quadratic. The push's repeat finder buckets ids by the mix's low bits: ids whose unkeyed
mixes share those bits all landed in one bucket and a push of 32768 of them took ~300x as long
as one of ordinary ids. The finder is now keyed with a per-process random salt."""

import random
import struct
import time

import numpy as np

from pshelpers import f32

M64 = (1 << 64) - 1
C1 = 0xff51afd7ed558ccd
C2 = 0xc4ceb9fe1a85ec53
DIM = 2
N = 32768


def mix64(x):
    """module/embed.h PSEmbed_Mix64 (MurmurHash3's finalizer)."""
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


def ids_blob(ids):
    return struct.pack("<%dQ" % len(ids), *ids)


def push_seconds(r, key, ids):
    """Seconds one PS.PUSHGRAD of 'ids' into the new table 'key' takes (client side)."""
    r.execute_command("PS.CREATE", key, "EMBEDDING", "DIM", DIM, "OPTIM", "SGD", "LR", 0.1)
    g = f32(np.ones(len(ids) * DIM, np.float32))
    blob = ids_blob(ids)
    t0 = time.perf_counter()
    r.execute_command("PS.PUSHGRAD", key, g, "IDS", blob)
    dt = time.perf_counter() - t0
    r.delete(key)
    return dt


def crafted_vs_ordinary(r, crafted, ordinary, reps=3):
    """(best crafted, best ordinary) push times, interleaved so both see the same load."""
    tc, to = [], []
    for i in range(reps):
        to.append(push_seconds(r, "o%d" % i, ordinary))
        tc.append(push_seconds(r, "c%d" % i, crafted))
    return min(tc), min(to)


def test_push_of_ids_colliding_in_the_unkeyed_low_bits_is_not_quadratic(make_server):
    s = make_server()
    r = s.client()
    rng = random.Random(12)
    crafted = low_colliding_ids(N, rng)
    ordinary = rng.sample(range(1, 1 << 63), N)
    tc, to = crafted_vs_ordinary(r, crafted, ordinary)
    assert tc < 10 * to + 0.01, (tc, to)
    # the pushes stepped every crafted id once: the table holds them all
    r.execute_command("PS.CREATE", "t", "EMBEDDING", "DIM", DIM, "OPTIM", "SGD", "LR", 0.1)
    res = r.execute_command("PS.PUSHGRAD", "t", f32(np.ones(2 * N * DIM, np.float32)), "IDS",
                            ids_blob(crafted + crafted))
    assert r.execute_command("PS.PULL", "t", "IDS", ids_blob(crafted[:3]))[1] == \
        f32(np.full(3 * DIM, -0.2, np.float32)), res
