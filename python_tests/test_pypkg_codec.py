"""The Python package's wire codecs (python/redis_ps/codec.py) write and read the same bytes
as the C codecs (common/codec.c), checked through build/ptools/ps_codec_dump on arrays full of
edge cases: NaN payloads, infinities, subnormals, rounding ties, I8 scale corner cases and
TOPK magnitude ties."""

import os
import subprocess

import numpy as np
import pytest

import psserver

import pshelpers_pkg  # noqa: E402,F401  (the tree's redis_ps, or the installed one)
from redis_ps import codec  # noqa: E402

DUMP = os.path.join(psserver.REPO_ROOT, "build", "ptools", "ps_codec_dump")


def c_codec(*args, data=b""):
    """Run ps_codec_dump with 'args' on stdin 'data'; returns stdout bytes."""
    if not os.path.exists(DUMP):
        pytest.fail("%s not built: run make ptools" % DUMP, pytrace=False)
    p = subprocess.run([DUMP] + [str(a) for a in args], input=data, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout


def bits(u):
    return np.array(u, dtype=np.uint32).view(np.float32)


def edge_floats():
    """float32 values around every boundary the codecs branch on."""
    special = bits([0x7fc00000, 0xffc00001, 0x7f800001, 0x7fa5a5a5, 0x7f800000, 0xff800000,
                    0x00000000, 0x80000000, 0x00000001, 0x807fffff, 0x00800000,
                    0x38800000, 0x387fffff, 0x33000000, 0x33000001, 0x32ffffff, 0x337fffff,
                    0x47800000, 0x477fefff, 0x477ff000, 0x477fffff, 0x7f7fffff, 0xff7fffff,
                    0x3f808000, 0x3f818000, 0x3f808001, 0x3f807fff, 0x7f7f8000, 0x3f801000,
                    0x3f803000, 0x3f801001, 0x387fe000, 0x387ff000])
    rng = np.random.default_rng(11)
    rnd = np.concatenate([
        rng.standard_normal(3000).astype(np.float32),
        (rng.standard_normal(1000) * 1e-5).astype(np.float32),
        (rng.standard_normal(1000) * 3e4).astype(np.float32),
        rng.integers(0, 2 ** 32, 3000, dtype=np.uint64).astype(np.uint32).view(np.float32),
    ])
    return np.concatenate([special, rnd]).astype(np.float32)


@pytest.mark.parametrize("fmt", ["F32", "F16", "BF16", "I8"])
def test_dense_encode_is_byte_identical_to_c(fmt):
    x = edge_floats()
    if fmt == "I8":
        x = x[np.isfinite(x) | np.isnan(x)]    # inf makes every q 0: tested apart below
    assert codec.encode(fmt, x) == c_codec("encode", fmt, data=x.tobytes())


@pytest.mark.parametrize("fmt", ["F16", "BF16"])
def test_half_decode_of_every_bit_pattern_matches_c(fmt):
    h = np.arange(65536, dtype=np.uint16).tobytes()
    want = c_codec("decode", fmt, 65536, data=h)
    assert codec.decode(fmt, h, 65536).tobytes() == want


@pytest.mark.parametrize("case", [
    [127.0, 0.5, -0.5, 1.5, -2.5, 126.5, -126.5, 0.0, -0.0],   # exact rounding ties, scale 1
    [0.0, 0.0, -0.0],                                         # all zero: scale 0
    [1e-45, -1e-45],                                          # scale underflows to 0
    [np.inf, 1.0, -2.0],                                      # inf: scale inf, q 0 / NaN -> 0
    [np.nan, 3.0, -1.0, np.nan],                              # NaN ignored for the scale
    [3.4e38, -3.4e38, 1.0],                                   # huge values
    [],                                                       # n = 0
])
def test_i8_scale_choice_rounding_and_nonfinite_match_c(case):
    x = np.array(case, dtype=np.float32)
    blob = codec.encode("I8", x)
    assert blob == c_codec("encode", "I8", data=x.tobytes())
    assert codec.decode("I8", blob, len(x)).tobytes() == \
        c_codec("decode", "I8", len(x), data=blob)


def test_i8_decode_of_every_byte_matches_c():
    blob = np.float32(0.37).tobytes() + bytes(range(256))
    assert codec.decode("I8", blob, 256).tobytes() == c_codec("decode", "I8", 256, data=blob)


@pytest.mark.parametrize("k", [0, 1, 5, 37, 1000, 5000])
def test_topk_blob_matches_c_including_magnitude_ties(k):
    rng = np.random.default_rng(k)
    x = rng.choice(np.array([0.5, -0.5, 1.0, -1.0, 0.0, -0.0, 2.0, -2.0], np.float32), 3000)
    x[::97] = rng.standard_normal(len(x[::97]))
    x[5] = np.nan
    x[17] = -np.inf
    assert codec.encode_topk(x, k) == c_codec("encode", "TOPK", k, data=x.tobytes())


def test_topk_k_larger_than_n_is_clamped_like_c():
    x = np.array([3, -1, 2], np.float32)
    assert codec.encode_topk(x, 10) == c_codec("encode", "TOPK", 10, data=x.tobytes())


def test_decode_refuses_wrong_length():
    with pytest.raises(ValueError):
        codec.decode("F16", b"\x00\x00\x00", 2)
    with pytest.raises(ValueError):
        codec.decode_topk(b"\x01\x00\x00\x00\x09\x00\x00\x00\x00\x00\x80?", 3)


def test_error_feedback_sends_what_a_format_dropped_later():
    g = np.array([1.0, 0.1, -2.0, 0.3], np.float32)
    fb = codec.ErrorFeedback(4)
    sent = np.zeros(4, np.float32)
    for _ in range(50):
        sent += codec.topk_to_dense(fb.encode("TOPK", g, topk=2), 4)
    # Over 50 steps, the small entries were sent too, and the residual stays bounded.
    assert np.all(sent != 0)
    np.testing.assert_allclose(sent + fb.resid, g * 50, rtol=1e-5)
