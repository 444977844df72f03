"""Wire codecs of redis-ps in numpy, byte-identical to the C codecs (common/codec.c).

Every function works on float32 arrays through their IEEE bit patterns, so the bytes do not
depend on numpy's own float16 conversion (which treats NaN payloads differently):

  F32   n raw little-endian float32                                  (4n bytes)
  F16   n IEEE binary16, round to nearest even, NaN kept quiet       (2n bytes)
  BF16  n bfloat16 (top half of a float32), round to nearest even    (2n bytes)
  I8    float32 scale = max|x|/127, then n int8 q = round(x/scale)   (4 + n bytes)
  TOPK  uint32 k, k uint32 indices (increasing), k float32 values    (4 + 8k bytes)

The host must be little-endian, as for the C side; numpy dtypes below spell '<' anyway.
"""

from __future__ import annotations

from typing import Tuple

import numpy as np

FORMATS = ("F32", "F16", "BF16", "I8", "TOPK")
DENSE_FORMATS = ("F32", "F16", "BF16", "I8")

_F32 = np.dtype("<f4")
_U32 = np.dtype("<u4")
_U16 = np.dtype("<u2")


def format_name(fmt: str) -> str:
    """The canonical upper-case name of wire format 'fmt' (case-insensitive); ValueError
    for an unknown name."""
    f = str(fmt).upper()
    if f not in FORMATS:
        raise ValueError("unknown wire format %r (want one of %s)" % (fmt, ", ".join(FORMATS)))
    return f


def as_f32(x) -> np.ndarray:
    """'x' as a flat, contiguous little-endian float32 array (a view when it already is)."""
    return np.ascontiguousarray(x, dtype=_F32).reshape(-1)


def dense_size(fmt: str, n: int) -> int:
    """Bytes of the dense encoding of 'n' floats in 'fmt' (F32 4n, F16/BF16 2n, I8 4+n)."""
    f = format_name(fmt)
    if f == "F32":
        return 4 * n
    if f in ("F16", "BF16"):
        return 2 * n
    if f == "I8":
        return 4 + n
    raise ValueError("TOPK is not a dense format")


# ------------------------------------------------------------------ half / bf16

def f32_to_f16_bits(x) -> np.ndarray:
    """uint16 binary16 bits of the float32 values 'x', as ps_f32_to_f16: ties to even,
    overflow to infinity, subnormals exact, NaN quiet with its top payload bits."""
    b = as_f32(x).view(_U32)
    sign = (b >> 16) & 0x8000
    a = b & 0x7FFFFFFF
    with np.errstate(all="ignore"):
        # |x| < 2^-14: adding 0.5 makes the float32 adder round to the 2^-24 grid.
        small = (a.view(_F32) + np.float32(0.5)).view(_U32) - np.uint32(0x3F000000)
        n = a - np.uint32(112 << 23)
        n = (n + np.uint32(0xFFF) + ((n >> 13) & 1)) >> 13
    big = np.where(a > 0x7F800000, 0x7E00 | ((a >> 13) & 0x3FF), 0x7C00).astype(_U32)
    out = np.where(a >= 0x47800000, big, np.where(a < 0x38800000, small, n))
    return (sign | out).astype(_U16)


def f16_bits_to_f32(h) -> np.ndarray:
    """float32 values of the uint16 binary16 bits 'h' (exact), as ps_f16_to_f32."""
    h = np.asarray(h, dtype=_U16).astype(_U32)
    sign = (h & 0x8000) << 16
    em = (h & 0x7FFF) << 13
    exp = em & 0x0F800000
    with np.errstate(all="ignore"):
        sub = ((em | np.uint32(113 << 23)).view(_F32) - np.float32(2.0 ** -14)).view(_U32)
    b = np.where(exp == 0x0F800000, em | 0x7F800000,
                 np.where(exp == 0, sub, em + np.uint32(112 << 23)))
    return (b.astype(_U32) | sign).view(_F32)


def f32_to_bf16_bits(x) -> np.ndarray:
    """uint16 bfloat16 bits of float32 'x', as ps_f32_to_bf16 (ties to even, NaN quiet)."""
    b = as_f32(x).view(_U32)
    nan = (b & 0x7FFFFFFF) > 0x7F800000
    with np.errstate(all="ignore"):
        r = (b + np.uint32(0x7FFF) + ((b >> 16) & 1)) >> 16
    return np.where(nan, (b >> 16) | 0x0040, r).astype(_U16)


def bf16_bits_to_f32(h) -> np.ndarray:
    """float32 values of the bfloat16 bits 'h' (exact)."""
    return (np.asarray(h, dtype=_U16).astype(_U32) << 16).view(_F32)


# ------------------------------------------------------------------------- I8

def _encode_i8(x: np.ndarray) -> bytes:
    """I8 blob of 'x': scale = max|x| / 127 (NaN ignored, float32 division), then
    q = x / scale rounded half away from zero, clamped to [-127, 127], NaN -> 0."""
    a = np.abs(x)
    with np.errstate(all="ignore"):
        a = np.where(np.isnan(a), np.float32(0), a)
        maxabs = np.float32(a.max(initial=np.float32(0)))
        scale = np.float32(maxabs / np.float32(127.0))
        if not scale > 0:
            return scale.tobytes() + bytes(len(x))
        r = (x / scale).astype(_F32)
        r = np.where(np.isnan(r), np.float32(0), r)
        r = np.clip(r, np.float32(-127), np.float32(127)).astype(_F32)
        t = np.trunc(r).astype(_F32)
        frac = (r - t).astype(_F32)
        q = t.astype(np.int32) + (frac >= 0.5) - (frac <= -0.5)
    return scale.tobytes() + q.astype(np.int8).tobytes()


def _decode_i8(blob, n: int) -> np.ndarray:
    scale = np.frombuffer(blob, dtype=_F32, count=1)[0]
    q = np.frombuffer(blob, dtype=np.int8, count=n, offset=4)
    with np.errstate(all="ignore"):     # scale inf: 0 * inf is NaN, as in C
        return (q.astype(_F32) * scale).astype(_F32)


# --------------------------------------------------------------- dense codec

def encode(fmt: str, x) -> bytes:
    """The dense blob of the floats 'x' (any shape, taken flat as float32) in format 'fmt'
    (F32, F16, BF16 or I8): the same bytes ps_encode() writes."""
    f = format_name(fmt)
    v = as_f32(x)
    if f == "F32":
        return v.tobytes()
    if f == "F16":
        return f32_to_f16_bits(v).tobytes()
    if f == "BF16":
        return f32_to_bf16_bits(v).tobytes()
    if f == "I8":
        return _encode_i8(v)
    raise ValueError("TOPK is not a dense format: use encode_topk")


def decode(fmt: str, blob, n: int) -> np.ndarray:
    """The 'n' float32 values of the dense blob 'blob' in format 'fmt'. F32 is a zero-copy,
    read-only view of 'blob'. ValueError when the length is not the encoded size of n."""
    f = format_name(fmt)
    if f == "TOPK":
        raise ValueError("TOPK is not a dense format")
    if len(blob) != dense_size(f, n):
        raise ValueError("%s blob has %d bytes; %d elements need %d"
                         % (f, len(blob), n, dense_size(f, n)))
    if f == "F32":
        return np.frombuffer(blob, dtype=_F32, count=n)
    if f == "F16":
        return f16_bits_to_f32(np.frombuffer(blob, dtype=_U16, count=n))
    if f == "BF16":
        return bf16_bits_to_f32(np.frombuffer(blob, dtype=_U16, count=n))
    return _decode_i8(blob, n)


# ----------------------------------------------------------------------- TOPK

def topk_count(n: int, ratio: float) -> int:
    """Entries libps sends per partition of 'n' elements for TOPK 'ratio': ceil(ratio * n),
    at least 1 and at most n (computed in double, as libps does)."""
    k = ratio * float(n)
    kk = int(k)
    if kk < k:
        kk += 1
    return max(1, min(kk, n))


def encode_topk(x, k: int) -> bytes:
    """TOPK blob of the 'k' entries of largest magnitude of 'x' (k clamped to len(x)), as
    ps_topk_encode: magnitude is the float's bits without the sign (NaN above inf, -0 == +0),
    ties go to the lower index, indices written in increasing order."""
    v = as_f32(x)
    n = len(v)
    k = max(0, min(int(k), n))
    if k == 0:
        return np.uint32(0).astype(_U32).tobytes()
    key = (v.view(_U32) & 0x7FFFFFFF).astype(np.int64)
    # A stable sort on the negated key: equal magnitudes keep index order.
    idx = np.sort(np.argsort(-key, kind="stable")[:k]).astype(_U32)
    return np.uint32(k).astype(_U32).tobytes() + idx.tobytes() + v[idx].tobytes()


def decode_topk(blob, n: int) -> Tuple[np.ndarray, np.ndarray]:
    """(indices uint32, values float32) of a TOPK blob for 'n' elements; ValueError when the
    length does not match its k or an index is >= n (as ps_topk_check)."""
    if len(blob) < 4:
        raise ValueError("TOPK blob shorter than 4 bytes")
    k = int(np.frombuffer(blob, dtype=_U32, count=1)[0])
    if len(blob) != 4 + 8 * k:
        raise ValueError("TOPK blob has %d bytes; k=%d needs %d" % (len(blob), k, 4 + 8 * k))
    idx = np.frombuffer(blob, dtype=_U32, count=k, offset=4)
    val = np.frombuffer(blob, dtype=_F32, count=k, offset=4 + 4 * k)
    if k and int(idx.max()) >= n:
        raise ValueError("TOPK index out of range")
    return idx, val


def topk_to_dense(blob, n: int) -> np.ndarray:
    """The dense float32 array a TOPK blob adds to: zeros plus each value at its index,
    repeated indices adding up in blob order (as ps_topk_scatter_add)."""
    idx, val = decode_topk(blob, n)
    out = np.zeros(n, dtype=_F32)
    np.add.at(out, idx, val)
    return out


def rows_blob(rows) -> bytes:
    """A ROWS blob: the row indices 'rows' as little-endian uint32 (ValueError if negative
    or >= 2^32, or empty)."""
    r = np.asarray(rows).reshape(-1)
    if r.size == 0:
        raise ValueError("ROWS must not be empty")
    if r.dtype.kind not in "iu" or int(r.min()) < 0 or int(r.max()) >= 2 ** 32:
        raise ValueError("ROWS must be integers in [0, 2^32)")
    return r.astype(_U32).tobytes()


class ErrorFeedback:
    """Error-feedback encoder of one flat array, as libps does for lossy push formats:
    the residual accumulates each gradient, the encoded part is sent, and what was sent
    (decoded) is subtracted, so what a format drops is sent later instead of lost."""

    def __init__(self, n: int):
        self.resid = np.zeros(n, dtype=_F32)

    def encode(self, fmt: str, grad, lo: int = 0, hi: int = -1, add: bool = True,
               topk: int = 0) -> bytes:
        """Add 'grad' (the whole array) to the residual when 'add', then encode the slice
        [lo, hi) of the residual in 'fmt' (TOPK with 'topk' entries) and subtract what the
        blob carries. Returns the blob."""
        if add:
            self.resid += as_f32(grad)
        hi = len(self.resid) if hi < 0 else hi
        x = self.resid[lo:hi]
        f = format_name(fmt)
        if f == "TOPK":
            blob = encode_topk(x, topk)
            idx, val = decode_topk(blob, hi - lo)
            x[idx] -= val
            return blob
        blob = encode(f, x)
        x -= decode(f, blob, hi - lo)
        return blob
