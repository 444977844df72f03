"""Core behaviour of the ps-tensor type on a single server: create/pull/push/set numerics,
initializers, NX/BUSYKEY, versions, INFO, native-type integration (COPY, RENAME, DUMP/RESTORE,
TYPE, MEMORY USAGE, MULTI), keyspace notifications."""

import math

import numpy as np
import pytest

import psserver
from pshelpers import (create, create_data, digest, f32, from_f32, info, is_error_with_code,
                       messages, num, pull, pull_np, push, subscribe)

RNG = np.random.default_rng(20240229)


def sgd_ref(w, g, lr, scale=1.0):
    """numpy reference of the SGD step: lr_eff = (float)(lr * scale) in double, then
    w - lr_eff * g in float32 (one rounding per operation)."""
    lr_eff = np.float32(lr * scale)
    return (w - lr_eff * g).astype(np.float32)


# ---------------------------------------------------------------------------
# SGD numerics
# ---------------------------------------------------------------------------

def test_sgd_pushes_match_numpy_float32_bit_for_bit(r):
    shape = (37, 29)
    lr = 0.05
    w = RNG.standard_normal(shape).astype(np.float32)
    assert create_data(r, "w", w, "LR", repr(lr)) in (b"OK", "OK")
    v, got = pull_np(r, "w")
    assert v == 0 and got.tobytes() == w.tobytes()
    version = 0
    steps = [(1.0, None)] * 4 + [(0.5, "0.5"), (2.0, "2"), (1.0 / 3, repr(1.0 / 3)),
                                 (1e-3, "1e-3")]
    for scale, scale_arg in steps:
        g = (RNG.standard_normal(shape) * 3).astype(np.float32)
        extra = ["SCALE", scale_arg] if scale_arg is not None else []
        rep = push(r, "w", g, *extra)
        version += 1
        assert rep == version
        w = sgd_ref(w, g, lr, scale)
        v, got = pull_np(r, "w")
        assert v == version
        assert got.tobytes() == w.reshape(-1).tobytes(), \
            "mismatch after push %d (scale %r): max abs diff %g" % (
                version, scale, np.max(np.abs(got - w.reshape(-1))))


def test_sgd_pushes_with_values_match_numpy_bit_for_bit(r):
    n = 53
    lr = 0.1
    w = RNG.uniform(-1, 1, n).astype(np.float32)
    create_data(r, "w", w, "LR", "0.1")
    for i, scale in enumerate([None, "0.25", None, "3"]):
        g = RNG.standard_normal(n).astype(np.float32)
        args = ["PS.PUSHGRAD", "w", "VALUES"] + [repr(float(x)) for x in g]
        if scale:
            args += ["SCALE", scale]
        assert r.execute_command(*args) == i + 1
        w = sgd_ref(w, g, lr, float(scale) if scale else 1.0)
        v, got = pull_np(r, "w")
        assert v == i + 1 and got.tobytes() == w.tobytes()


def test_sgd_values_and_blob_pushes_give_the_same_bits(r):
    n = 40
    w = RNG.standard_normal(n).astype(np.float32)
    g = RNG.standard_normal(n).astype(np.float32)
    create_data(r, "a", w, "LR", "0.3")
    create_data(r, "b", w, "LR", "0.3")
    push(r, "a", g, "SCALE", "0.7")
    r.execute_command("PS.PUSHGRAD", "b", "VALUES", *[repr(float(x)) for x in g], "SCALE", "0.7")
    assert pull(r, "a") == pull(r, "b")
    assert digest(r, "a") == digest(r, "b")


def test_default_lr_is_0_01(r):
    w = np.ones(8, dtype=np.float32)
    create_data(r, "w", w)
    assert num(info(r, "w")["lr"]) == 0.01
    g = np.full(8, 2.0, dtype=np.float32)
    push(r, "w", g)
    assert pull_np(r, "w")[1].tobytes() == sgd_ref(w, g, 0.01).tobytes()


def test_lr_zero_leaves_values_but_bumps_version(r):
    w = RNG.standard_normal(10).astype(np.float32)
    create_data(r, "w", w, "LR", "0")
    assert push(r, "w", RNG.standard_normal(10).astype(np.float32)) == 1
    v, got = pull_np(r, "w")
    assert v == 1 and got.tobytes() == w.tobytes()


# ---------------------------------------------------------------------------
# PULL formats
# ---------------------------------------------------------------------------

SPECIAL = np.array([0.0, -0.0, 1.0, -1.5, np.pi, 1e-45, -1e-40, 1.1754944e-38,
                    3.4028235e38, -3.4028235e38, 0.1, 123456.789, 2.0 ** -20],
                   dtype=np.float32)


def test_pull_values_returns_exact_float32_values(r):
    create_data(r, "w", SPECIAL)
    v, vals = pull(r, "w", "FORMAT", "VALUES")
    assert v == 0
    assert isinstance(vals, list) and len(vals) == len(SPECIAL)
    got = [num(x) for x in vals]
    for i, (a, b) in enumerate(zip(got, SPECIAL)):
        assert a == float(b), "element %d: server said %r, float32 value is %r" % (
            i, vals[i], float(b))
    assert np.array(got, dtype=np.float32).tobytes() == SPECIAL.tobytes()  # signs of zeros too


def test_pull_default_format_is_f32(r):
    w = RNG.standard_normal((3, 4)).astype(np.float32)
    create_data(r, "w", w)
    assert pull(r, "w") == (0, f32(w))


def test_pull_f16_and_bf16_round_to_nearest_even(r):
    w = (RNG.standard_normal(1000) * 10).astype(np.float32)
    create_data(r, "w", w)
    _, h = pull(r, "w", "FORMAT", "F16")
    assert h == w.astype("<f2").tobytes()
    _, b = pull(r, "w", "FORMAT", "BF16")
    u = w.view(np.uint32).astype(np.uint64)
    ref = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")
    assert b == ref.tobytes()


def test_create_data_in_f16_and_bf16(r):
    vals = np.array([0.5, -2.0, 1024.0, 0.0, 3.0, -0.125], dtype=np.float32)
    create(r, "h", (6,), "DATA", vals.astype("<f2").tobytes(), "FORMAT", "F16")
    assert pull_np(r, "h")[1].tobytes() == vals.tobytes()
    bf = (vals.view(np.uint32) >> 16).astype("<u2").tobytes()
    create(r, "b", (2, 3), "DATA", bf, "FORMAT", "BF16")
    assert pull_np(r, "b")[1].tobytes() == vals.tobytes()


# ---------------------------------------------------------------------------
# PS.CREATE: initializers, NX, BUSYKEY
# ---------------------------------------------------------------------------

def test_create_defaults_to_zeros_and_version_0(r):
    assert create(r, "z", (5, 7)) in (b"OK", "OK")
    v, got = pull_np(r, "z")
    assert v == 0 and got.shape == (35,) and not got.any()
    assert np.signbit(got).sum() == 0


def test_init_const(r):
    create(r, "c", (4, 5, 6), "INIT", "CONST", "0.3")
    v, got = pull_np(r, "c")
    assert got.tobytes() == np.full(120, 0.3, dtype=np.float32).tobytes()


RANDOM_INITS = [
    ("uniform", ["UNIFORM", "-0.5", "2"]),
    ("normal", ["NORMAL", "1", "0.5"]),
    ("xavier", ["XAVIER"]),
    ("he", ["HE"]),
]


@pytest.mark.parametrize("name,init", RANDOM_INITS, ids=[n for n, _ in RANDOM_INITS])
def test_random_init_is_reproducible_from_seed(r, name, init):
    shape = (64, 50)
    create(r, "a", shape, "INIT", *init, "SEED", "12345")
    create(r, "b", shape, "INIT", *init, "SEED", "12345")
    create(r, "c", shape, "INIT", *init, "SEED", "12346")
    create(r, "d", shape, "INIT", *init, "SEED", "18446744073709551615")
    a, b, c, d = (pull(r, k)[1] for k in "abcd")
    assert a == b
    assert a != c and a != d and c != d
    assert digest(r, "a") == digest(r, "b") != digest(r, "c")
    # Without SEED the server picks one: two creates differ.
    create(r, "e", shape, "INIT", *init)
    create(r, "f", shape, "INIT", *init)
    assert pull(r, "e")[1] != pull(r, "f")[1]


def test_init_uniform_statistics(r):
    lo, hi = -0.5, 2.0
    create(r, "u", (100000,), "INIT", "UNIFORM", repr(lo), repr(hi), "SEED", "1")
    x = pull_np(r, "u")[1].astype(np.float64)
    assert x.min() >= lo and x.max() <= hi
    assert x.min() < lo + 0.01 and x.max() > hi - 0.01
    assert abs(x.mean() - (lo + hi) / 2) < 0.01
    assert abs(x.std() / ((hi - lo) / math.sqrt(12)) - 1) < 0.02
    # Flat: each tenth of the range holds ~10%.
    hist, _ = np.histogram(x, bins=10, range=(lo, hi))
    assert np.all(np.abs(hist / len(x) - 0.1) < 0.01), hist


def test_init_normal_statistics(r):
    mean, std = 1.0, 0.5
    create(r, "n", (100, 1000), "INIT", "NORMAL", "1", "0.5", "SEED", "2")
    x = pull_np(r, "n")[1].astype(np.float64)
    assert abs(x.mean() - mean) < 5 * std / math.sqrt(len(x))
    assert abs(x.std() / std - 1) < 0.02
    within1 = np.mean(np.abs(x - mean) < std)
    within2 = np.mean(np.abs(x - mean) < 2 * std)
    assert abs(within1 - 0.6827) < 0.01 and abs(within2 - 0.9545) < 0.006
    assert len(np.unique(x)) > 99000


@pytest.mark.parametrize("shape,fan_in,fan_out", [
    ((250, 400), 400, 250),
    ((20, 30, 10), 300, 200),
    ((1000,), 1000, 1000),
])
def test_init_xavier_bound_and_spread(r, shape, fan_in, fan_out):
    a = math.sqrt(6.0 / (fan_in + fan_out))
    create(r, "x", shape, "INIT", "XAVIER", "SEED", "3")
    x = pull_np(r, "x")[1].astype(np.float64)
    assert np.abs(x).max() <= np.float32(a) * (1 + 1e-6), (np.abs(x).max(), a)
    assert np.abs(x).max() > 0.99 * a if x.size >= 5000 else np.abs(x).max() > 0.95 * a
    assert abs(x.std() / (a / math.sqrt(3)) - 1) < 0.05
    assert abs(x.mean()) < 5 * a / math.sqrt(3 * x.size)


@pytest.mark.parametrize("shape,fan_in", [((1000, 100), 100), ((50, 40, 50), 2000)])
def test_init_he_std(r, shape, fan_in):
    std = math.sqrt(2.0 / fan_in)
    create(r, "h", shape, "INIT", "HE", "SEED", "4")
    x = pull_np(r, "h")[1].astype(np.float64)
    assert abs(x.std() / std - 1) < 0.02, (x.std(), std)
    assert abs(x.mean()) < 5 * std / math.sqrt(x.size)
    assert abs(np.mean(np.abs(x) < std) - 0.6827) < 0.01


def test_create_nx_on_existing_key_returns_nil_and_changes_nothing(r):
    w = RNG.standard_normal(6).astype(np.float32)
    create_data(r, "k", w, "LR", "0.5")
    d = digest(r, "k")
    assert create(r, "k", (6,), "INIT", "CONST", "7", "NX") is None
    assert create(r, "k", (2, 2), "NX") is None
    assert digest(r, "k") == d
    assert pull_np(r, "k")[1].tobytes() == w.tobytes()
    assert create(r, "new", (3,), "NX") in (b"OK", "OK")
    assert pull_np(r, "new")[1].tobytes() == bytes(12)


def test_create_without_nx_on_existing_key_is_busykey(server, r):
    create(r, "k", (6,), "INIT", "CONST", "1")
    d = digest(r, "k")
    with server.raw() as c:
        err = c.call("PS.CREATE", "k", "SHAPE", "6", "INIT", "CONST", "2")
    assert is_error_with_code(err) and err.code == "BUSYKEY", err
    assert digest(r, "k") == d


def test_version_starts_at_0_and_counts_pushes_and_sets(r):
    create(r, "k", (2, 3))
    assert pull(r, "k")[0] == 0
    assert int(info(r, "k")["version"]) == 0
    g = np.ones(6, dtype=np.float32)
    for i in range(1, 4):
        assert push(r, "k", g) == i
    assert r.execute_command("PS.SET", "k", f32(np.arange(6))) == 4
    assert push(r, "k", g) == 5
    assert pull(r, "k")[0] == 5
    assert int(info(r, "k")["version"]) == 5


def test_set_overwrites_values_and_keeps_lr(r):
    create(r, "k", (2, 3), "LR", "0.25")
    vals = np.arange(6, dtype=np.float32) - 2.5
    assert r.execute_command("PS.SET", "k", f32(vals)) == 1
    v, got = pull_np(r, "k")
    assert v == 1 and got.tobytes() == vals.tobytes()
    g = np.full(6, 4, dtype=np.float32)
    push(r, "k", g)
    assert pull_np(r, "k")[1].tobytes() == sgd_ref(vals, g, 0.25).tobytes()


def test_shape_up_to_8_dims(r):
    create(r, "k", (2,) * 8, "INIT", "CONST", "1")
    i = info(r, "k")
    assert list(i["shape"]) == [2] * 8
    assert int(i["elements"]) == 256
    assert pull_np(r, "k")[1].size == 256


# ---------------------------------------------------------------------------
# PS.INFO and counters
# ---------------------------------------------------------------------------

def test_info_reports_shape_version_optimizer_and_counters(server, r):
    create(r, "k", (4, 3), "LR", "0.05")
    g = np.ones(12, dtype=np.float32)
    push(r, "k", g)
    push(r, "k", g)
    pull(r, "k")
    pull(r, "k")
    pull(r, "k", "FORMAT", "VALUES")
    bad = g.copy()
    bad[3] = np.nan
    with server.raw() as c:
        assert is_error_with_code(c.call("PS.PUSHGRAD", "k", f32(bad)))
    i = info(r, "k")
    for field in ["shape", "dtype", "elements", "bytes", "version", "optimizer", "lr",
                  "pushes", "pulls", "nonfinite_rejects"]:
        assert field in i, "PS.INFO lacks %r: %r" % (field, sorted(i))
    assert list(i["shape"]) == [4, 3]
    assert i["dtype"] == b"float32"
    assert int(i["elements"]) == 12 and int(i["bytes"]) == 48
    assert int(i["version"]) == 2
    assert i["optimizer"] == b"sgd"
    assert num(i["lr"]) == 0.05
    assert int(i["pushes"]) == 2
    assert int(i["pulls"]) == 3
    assert int(i["nonfinite_rejects"]) == 1


def test_info_ps_section_and_module_listed(r):
    mods = r.execute_command("MODULE", "LIST")
    names = [dict(zip(m[0::2], m[1::2]))[b"name"] for m in mods]
    assert b"ps" in names
    text = r.execute_command("INFO", "ps")
    if isinstance(text, dict):  # redis-py parsed it
        assert text, "INFO ps is empty"
    else:
        assert b"ps" in text and len(text.strip()) > 0


# ---------------------------------------------------------------------------
# Native type integration
# ---------------------------------------------------------------------------

def test_type_is_ps_tensor(r):
    create(r, "k", (3,))
    assert r.type("k") == b"ps-tensor"
    assert r.exists("k") == 1
    assert r.delete("k") == 1
    assert r.exists("k") == 0


def test_copy_is_deep_and_digest_equal(r):
    w = RNG.standard_normal((10, 10)).astype(np.float32)
    create_data(r, "a", w, "LR", "0.1")
    push(r, "a", np.ones((10, 10), dtype=np.float32))
    assert r.execute_command("COPY", "a", "b") == 1
    assert digest(r, "a") == digest(r, "b")
    assert pull(r, "a") == pull(r, "b")
    da = digest(r, "a")
    # Writes to the copy do not show in the original and the other way round.
    push(r, "b", np.full((10, 10), 5, dtype=np.float32))
    r.execute_command("PS.SET", "a", f32(np.zeros(100)))
    assert digest(r, "b") != da
    assert pull_np(r, "a")[1].tobytes() == bytes(400)
    assert pull(r, "b")[0] == 2 and pull(r, "a")[0] == 2
    ref = sgd_ref(sgd_ref(w, np.ones((10, 10), np.float32), 0.1),
                  np.full((10, 10), 5, np.float32), 0.1)
    assert pull_np(r, "b")[1].tobytes() == ref.tobytes()
    # COPY onto an existing key needs REPLACE.
    assert r.execute_command("COPY", "a", "b") == 0
    assert r.execute_command("COPY", "a", "b", "REPLACE") == 1
    assert digest(r, "a") == digest(r, "b")


def test_rename_keeps_value(r):
    create(r, "a", (7, 3), "INIT", "NORMAL", "0", "1", "SEED", "9")
    push(r, "a", np.ones(21, np.float32))
    d = digest(r, "a")
    body = pull(r, "a")
    assert r.rename("a", "b")
    assert r.exists("a") == 0
    assert digest(r, "b") == d and pull(r, "b") == body
    assert r.type("b") == b"ps-tensor"


def test_dump_restore_round_trip(r):
    create(r, "a", (30, 20), "INIT", "UNIFORM", "-1", "1", "SEED", "5", "OPTIM", "SGD", "LR", "0.2")
    push(r, "a", np.ones(600, np.float32))
    d = digest(r, "a")
    payload = r.dump("a")
    assert payload
    r.restore("b", 0, payload)
    assert r.type("b") == b"ps-tensor"
    assert digest(r, "b") == d
    assert pull(r, "b") == pull(r, "a")
    r.restore("a", 0, payload, replace=True)
    assert digest(r, "a") == d
    i = info(r, "b")
    assert int(i["version"]) == 1 and num(i["lr"]) == 0.2


def test_memory_usage_counts_data_of_sgd_tensor(r):
    n = 1 << 20   # a jemalloc size class, so allocator rounding does not blur the bound
    create(r, "big", (1024, 1024))
    data = 4 * n
    mu = r.memory_usage("big")
    assert data <= mu <= data + data // 100 + 1024, mu


def test_memory_usage_counts_adam_state(r):
    create(r, "sgd", (1024, 256))
    create(r, "adam", (1024, 256), "OPTIM", "ADAM")
    data = 4 * 1024 * 256
    assert r.memory_usage("adam") >= 3 * data
    assert r.memory_usage("adam") - r.memory_usage("sgd") >= 2 * data - 1024


def test_multi_exec_pushes_two_tensors_atomically(r):
    create(r, "a", (4,), "LR", "1")
    create(r, "b", (4,), "LR", "1")
    p = r.pipeline(transaction=True)
    p.execute_command("PS.PUSHGRAD", "a", f32(np.ones(4)))
    p.execute_command("PS.PUSHGRAD", "b", f32(np.full(4, 2)))
    p.execute_command("PS.PULL", "a")
    assert p.execute()[:2] == [1, 1]
    assert pull_np(r, "a")[1].tolist() == [-1.0] * 4
    assert pull_np(r, "b")[1].tolist() == [-2.0] * 4


def test_keyspace_notification_on_push(r):
    r.config_set("notify-keyspace-events", "KEd")
    create(r, "model:x", (4,))
    ps = subscribe(r, "__keyspace@0__:model:x", "__keyevent@0__:ps.pushgrad")
    push(r, "model:x", np.ones(4, np.float32))
    got = messages(ps, 2)
    assert (b"__keyspace@0__:model:x", b"ps.pushgrad") in got, got
    assert (b"__keyevent@0__:ps.pushgrad", b"model:x") in got, got


def test_unlink_flushall_async_move_and_swapdb(r):
    create(r, "a", (1024, 512), "INIT", "NORMAL", "0", "1", "SEED", "1", "OPTIM", "ADAM")
    create(r, "b", (1024, 512), "INIT", "NORMAL", "0", "1", "SEED", "1", "OPTIM", "ADAM")
    d = digest(r, "a")
    assert r.unlink("a") == 1
    assert r.move("b", 3)
    assert r.exists("b") == 0
    r.swapdb(0, 3)
    assert digest(r, "b") == d
    assert pull(r, "b")[0] == 0
    r.flushall(asynchronous=True)
    assert r.dbsize() == 0
    assert r.ping()


def test_denyoom_refuses_writes_over_maxmemory_but_not_reads(server, r):
    create(r, "k", (256,), "INIT", "CONST", "1")
    r.config_set("maxmemory-policy", "noeviction")
    r.config_set("maxmemory", "1")   # below any used_memory: every deny-oom command is refused
    try:
        with server.raw() as c:
            for args in (["PS.PUSHGRAD", "k", f32(np.ones(256))],
                         ["PS.CREATE", "n", "SHAPE", "4"],
                         ["PS.SET", "k", f32(np.zeros(256))]):
                err = c.call(*args)
                assert isinstance(err, psserver.RespError) and err.code == "OOM", (args[0], err)
            rep = c.call("PS.PULL", "k")
            assert rep[0] == 0
    finally:
        r.config_set("maxmemory", "0")
    assert push(r, "k", np.ones(256, np.float32)) == 1


def test_max_tensor_bytes_config_bounds_creates(server, r):
    assert r.config_set("ps.max-tensor-bytes", "1024")
    assert create(r, "ok", (16, 16)) in (b"OK", "OK")
    with server.raw() as c:
        err = c.call("PS.CREATE", "big", "SHAPE", "257")
        assert isinstance(err, psserver.RespError) and err.code == "ERR", err
    assert r.exists("big") == 0


def test_default_lr_config_applies_to_new_tensors_only(r):
    create(r, "before", (2,))
    r.config_set("ps.default-lr", "0.5")
    assert r.config_get("ps.default-lr")["ps.default-lr"] in (b"0.5", "0.5")
    create(r, "after", (2,))
    assert num(info(r, "before")["lr"]) == 0.01
    assert num(info(r, "after")["lr"]) == 0.5
