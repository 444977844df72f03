"""Row-sparse pushes and pulls (ROWS) and compressed wire formats on pushes
(F16, BF16, I8, TOPK) and pulls (I8), each against a numpy reference of the
update the server documents (docs/commands.md), plus their bad input."""

import struct

import numpy as np
import pytest

from pshelpers import create_data, digest, f32, from_f32, info, pull, pull_np
from psserver import RawClient, RespError, start_replica, wait_for_replication


def rows_blob(idx):
    return np.asarray(idx, dtype="<u4").tobytes()


def sgd_ref(w, g, lr):
    return (w - np.float32(lr) * g).astype(np.float32)


@pytest.fixture
def emb(r):
    rng = np.random.default_rng(7)
    w = rng.standard_normal((10, 4)).astype(np.float32)
    create_data(r, "emb", w, "OPTIM", "SGD", "LR", "0.5")
    return w


def test_rows_push_updates_only_the_given_rows(r, emb):
    g = np.arange(8, dtype=np.float32).reshape(2, 4) / 8
    v = r.execute_command("PS.PUSHGRAD", "emb", f32(g), "ROWS", rows_blob([2, 7]))
    assert v == 1
    want = emb.copy()
    want[[2, 7]] = sgd_ref(emb[[2, 7]], g, 0.5)
    _, got = pull_np(r, "emb")
    assert got.tobytes() == want.reshape(-1).tobytes()


def test_rows_push_with_repeated_and_unsorted_rows_adds_them_up(r, emb):
    g = np.array([[1, 0, 0, 0], [0, 2, 0, 0], [0, 0, 3, 0]], dtype=np.float32)
    r.execute_command("PS.PUSHGRAD", "emb", f32(g), "ROWS", rows_blob([5, 1, 5]))
    want = emb.copy()
    want[5] = sgd_ref(emb[5], (g[0] + g[2]).astype(np.float32), 0.5)
    want[1] = sgd_ref(emb[1], g[1], 0.5)
    _, got = pull_np(r, "emb")
    assert got.tobytes() == want.reshape(-1).tobytes()


def test_rows_push_with_adam_touches_only_the_rows_but_counts_the_step(r):
    w = np.ones((6, 3), dtype=np.float32)
    create_data(r, "e", w, "OPTIM", "ADAM", "LR", "0.1")
    g = np.full((1, 3), 0.5, dtype=np.float32)
    for _ in range(3):
        r.execute_command("PS.PUSHGRAD", "e", f32(g), "ROWS", rows_blob([4]))
    _, got = pull_np(r, "e")
    got = got.reshape(6, 3)
    assert (got[[0, 1, 2, 3, 5]] == 1).all()
    # Reference: Adam on the row with the step count of the tensor.
    m = np.zeros(3, np.float32)
    v = np.zeros(3, np.float32)
    x = np.ones(3, np.float32)
    b1p = b2p = 1.0
    for _ in range(3):
        b1p *= 0.9
        b2p *= 0.999
        step = np.float32(0.1 / (1 - b1p))
        rbc2 = np.float32(1 / np.sqrt(1 - b2p))
        d = g[0]
        m = (np.float32(0.9) * m + np.float32(1 - 0.9) * d).astype(np.float32)
        v = (np.float32(0.999) * v + np.float32(1 - 0.999) * (d * d)).astype(np.float32)
        x = (x - step * (m / (np.sqrt(v) * rbc2 + np.float32(1e-8)))).astype(np.float32)
    assert got[4].tobytes() == x.tobytes()
    assert int(info(r, "e")["step"]) == 3


def test_rows_pull_returns_the_rows_in_the_order_given(r, emb):
    v, data = pull(r, "emb", "ROWS", rows_blob([9, 0, 9]))
    assert v == 0
    assert from_f32(data).tobytes() == emb[[9, 0, 9]].reshape(-1).tobytes()


def test_rows_on_a_1d_tensor_address_single_elements(r):
    w = np.arange(5, dtype=np.float32)
    create_data(r, "v", w, "LR", "1")
    r.execute_command("PS.PUSHGRAD", "v", f32([1.0, 2.0]), "ROWS", rows_blob([0, 4]))
    _, got = pull_np(r, "v")
    assert got.tolist() == [-1.0, 1.0, 2.0, 3.0, 2.0]


@pytest.mark.parametrize("rows,grad_rows,why", [
    ([10], 1, "row index out of range"),
    ([], 0, "empty ROWS"),
    (None, 1, "ROWS blob not a multiple of 4"),
    ([1, 2], 1, "gradient has fewer rows than ROWS"),
])
def test_bad_rows_are_refused_and_change_nothing(r, emb, rows, grad_rows, why):
    before = digest(r, "emb")
    blob = b"\x01\x00\x00" if rows is None else rows_blob(rows)
    g = np.zeros((max(grad_rows, 1), 4), np.float32)[:grad_rows]
    with pytest.raises(Exception) as e:
        r.execute_command("PS.PUSHGRAD", "emb", f32(g) or b"x", "ROWS", blob)
    assert str(e.value), why
    assert digest(r, "emb") == before
    with pytest.raises(Exception):
        r.execute_command("PS.PULL", "emb", "ROWS", blob if rows != [1, 2] else rows_blob([99]))


def test_bad_rows_errors_carry_a_code(server, emb):
    with RawClient(server.port) as c:
        for blob in (rows_blob([10]), b"", b"\x01\x00\x00"):
            rep = c.call("PS.PUSHGRAD", "emb", f32(np.zeros(4, np.float32)), "ROWS", blob)
            assert isinstance(rep, RespError) and str(rep).startswith("ERR ROWS"), rep


def f16_blob(a):
    return np.asarray(a, dtype="<f2").tobytes()


def bf16_blob(a):
    bits = np.asarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    # Round to nearest even on the dropped 16 bits.
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype("<u2").tobytes()


def bf16_decode(b):
    return (np.frombuffer(b, dtype="<u2").astype(np.uint32) << 16).view(np.float32)


def i8_blob(a):
    a = np.asarray(a, dtype=np.float32)
    scale = np.float32(np.abs(a).max() / np.float32(127))
    q = np.clip(np.sign(a) * np.floor(np.abs(a / scale) + np.float32(0.5)), -127, 127)
    return struct.pack("<f", scale) + q.astype(np.int8).tobytes()


def i8_decode(b, n):
    scale = np.frombuffer(b[:4], dtype="<f4")[0]
    q = np.frombuffer(b[4:4 + n], dtype=np.int8).astype(np.float32)
    return (q * scale).astype(np.float32)


@pytest.mark.parametrize("fmt", ["F16", "BF16", "I8"])
def test_compressed_push_equals_pushing_the_decoded_floats(r, fmt):
    rng = np.random.default_rng(3)
    w = rng.standard_normal(64).astype(np.float32)
    g = rng.standard_normal(64).astype(np.float32) * np.float32(0.1)
    create_data(r, "c", w, "LR", "0.25")
    create_data(r, "d", w, "LR", "0.25")
    if fmt == "F16":
        blob, dec = f16_blob(g), np.asarray(g, "<f2").astype(np.float32)
    elif fmt == "BF16":
        blob = bf16_blob(g)
        dec = bf16_decode(blob)
    else:
        blob = i8_blob(g)
        dec = i8_decode(blob, 64)
    r.execute_command("PS.PUSHGRAD", "c", blob, "FORMAT", fmt)
    r.execute_command("PS.PUSHGRAD", "d", f32(dec))
    assert pull_np(r, "c")[1].tobytes() == pull_np(r, "d")[1].tobytes()
    assert pull_np(r, "c")[1].tobytes() == sgd_ref(w, dec, 0.25).tobytes()


def test_topk_push_applies_only_the_listed_entries(r):
    w = np.ones(100, dtype=np.float32)
    create_data(r, "t", w, "LR", "1")
    idx = np.array([3, 50, 99], dtype="<u4")
    vals = np.array([0.5, -2.0, 1.0], dtype="<f4")
    blob = struct.pack("<I", 3) + idx.tobytes() + vals.tobytes()
    assert r.execute_command("PS.PUSHGRAD", "t", blob, "FORMAT", "TOPK") == 1
    want = w.copy()
    want[idx] -= vals
    assert pull_np(r, "t")[1].tobytes() == want.tobytes()


@pytest.mark.parametrize("blob", [
    struct.pack("<I", 2) + struct.pack("<II", 1, 100) + struct.pack("<ff", 1, 1),  # index 100 >= n
    struct.pack("<I", 2) + struct.pack("<II", 1, 2) + struct.pack("<f", 1),  # short
    b"",
])
def test_bad_topk_is_refused_and_changes_nothing(r, blob):
    create_data(r, "t", np.ones(100, np.float32))
    before = digest(r, "t")
    with pytest.raises(Exception):
        r.execute_command("PS.PUSHGRAD", "t", blob, "FORMAT", "TOPK")
    assert digest(r, "t") == before


def test_pull_i8_decodes_within_half_a_step(r):
    rng = np.random.default_rng(5)
    w = rng.standard_normal(1000).astype(np.float32)
    create_data(r, "q", w)
    _, b = pull(r, "q", "FORMAT", "I8")
    assert len(b) == 4 + 1000
    scale = np.frombuffer(b[:4], "<f4")[0]
    assert abs(scale - np.abs(w).max() / 127) <= 1e-6 * scale
    assert np.abs(i8_decode(b, 1000) - w).max() <= scale / 2 * (1 + 1e-5)


def test_sparse_and_compressed_pushes_keep_the_replica_bit_identical(server, r):
    rep = start_replica(server)
    try:
        rng = np.random.default_rng(11)
        create_data(r, "e", rng.standard_normal((50, 8)).astype(np.float32), "OPTIM", "ADAM")
        for k in range(40):
            rows = rng.integers(0, 50, size=5)
            g = rng.standard_normal((5, 8)).astype(np.float32)
            r.execute_command("PS.PUSHGRAD", "e", f32(g), "ROWS", rows_blob(rows))
            r.execute_command("PS.PUSHGRAD", "e", bf16_blob(rng.standard_normal(400)), "FORMAT", "BF16")
        wait_for_replication(server, [rep])
        assert digest(r, "e") == digest(rep.client(), "e")
    finally:
        rep.stop()
