"""Serving: the LR / FM logits of a batch of samples under the model an embedding table holds
(docs/commands.md "PS.SCORE"), the same bits as libps's psScore and ps-train's forward pass.

A sample i has counts[i] features: ids (uint64) and values (float32, 1 each by default), all
samples' features in one flat array in sample order. A row is [w, v_1 .. v_k] (dim 1 for LR,
k + 1 for FM), and the logit, in double, in exactly this order (common/ctr_score.c):

    z = (double)b; sq = 0; s_f = 0
    for each feature j of the sample, in order:
        z += (double)w_j * x_j
        for f = 1 .. k: vx = (double)v_jf * x_j; s_f += vx; sq += vx * vx
    pair = 0; for f = 1 .. k: pair += s_f * s_f
    z = z + 0.5 * (pair - sq)

A table of one shard is scored by the server (one PS.SCORE); a table of several shards has
its rows pulled (PS.PULL IDS, one pipeline) and the kernel run here, as psScore does: an FM
logit does not split into per-shard sums without changing its bits. The kernel below runs
the samples side by side with numpy, but each sample's own additions in the order above, on
IEEE doubles, one rounding per operation (numpy fuses no multiply-add), so its bits are the
C kernel's.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np

from .conn import ArrayLike, _call
from .errors import PSError
from .guards import check_ids

MODELS = ("lr", "fm")


def logits(bias: float, rows: np.ndarray, counts: np.ndarray,
           vals: Optional[np.ndarray] = None) -> np.ndarray:
    """The kernel: float64 logits of len(counts) samples from 'rows' ((sum counts, dim)
    float32, the rows of the features in sample order), 'vals' (float32 per feature, or None
    for 1 each) and 'bias' (rounded to float32 first, as the server and the trainer hold it)."""
    counts = np.asarray(counts, dtype=np.int64).reshape(-1)
    rows = np.asarray(rows, dtype=np.float32)
    n, k = len(counts), rows.shape[1] - 1
    starts = np.zeros(n, dtype=np.int64)
    np.cumsum(counts[:-1], out=starts[1:])
    z = np.full(n, np.float64(np.float32(bias)))
    sq = np.zeros(n)
    s = np.zeros((n, k))
    for j in range(int(counts.max()) if n else 0):
        live = np.nonzero(counts > j)[0]          # the samples that have a feature j
        at = starts[live] + j
        r = rows[at].astype(np.float64)
        x = vals[at].astype(np.float64) if vals is not None else np.ones(len(at))
        z[live] = z[live] + r[:, 0] * x
        if k:
            vx = r[:, 1:] * x[:, None]
            s[live] = s[live] + vx
            acc = sq[live]
            for f in range(k):
                acc = acc + vx[:, f] * vx[:, f]
            sq[live] = acc
    pair = np.zeros(n)
    for f in range(k):
        pair = pair + s[:, f] * s[:, f]
    return z + 0.5 * (pair - sq)


def _batch(dim: int, model: Optional[str], counts: Any, ids: Any, vals: Any, bias: float):
    """Checks a batch as psScore and PS.SCORE do, before anything is sent; returns
    (model, counts uint32, ids uint64, vals float32 or None, bias float32)."""
    m = (model or ("lr" if dim == 1 else "fm")).lower()
    if m not in MODELS:
        raise ValueError("unknown model %r (lr, fm)" % model)
    if (m == "lr") != (dim == 1):
        raise ValueError("model %s needs rows of dim %s; the table has dim %d"
                         % (m.upper(), "1" if m == "lr" else ">= 2", dim))
    c = np.asarray(counts).reshape(-1)
    if c.size and (c.dtype.kind not in "iu" or int(c.min()) < 0 or int(c.max()) >= 1 << 32):
        raise ValueError("counts must be integers in [0, 2^32) (features per sample); got %r"
                         % (c[:8].tolist(),))
    c = c.astype(np.uint32)
    i = check_ids(ids, "ids")
    if int(c.sum(dtype=np.uint64)) != len(i):
        raise ValueError("counts sum to %d features; %d ids given" % (int(c.sum(dtype=np.uint64)),
                                                                    len(i)))
    v = None
    if vals is not None:
        v = np.ascontiguousarray(np.asarray(vals, dtype=np.float32).reshape(-1))
        if len(v) != len(i):
            raise ValueError("%d vals for %d features" % (len(v), len(i)))
    b = np.float32(bias)
    if not math.isfinite(float(b)):
        raise ValueError("bias must be a finite float32; got %r" % bias)
    return m, c, i, v, b


def score_table(table: Any, counts: ArrayLike, ids: ArrayLike,
                vals: Optional[ArrayLike] = None, model: Optional[str] = None,
                bias: float = 0.0) -> np.ndarray:
    """Embedding.score: see there."""
    m, c, i, v, b = _batch(table.dim, model, counts, ids, vals, bias)
    if len(c) == 0:
        return np.zeros(0)
    if table.nshards == 1:
        key = table.keys[0]
        args = ["PS.SCORE", key, "MODEL", m.upper(), "COUNTS", c.astype("<u4").tobytes(),
                "IDS", i.astype("<u8").tobytes()]
        if v is not None:
            args += ["VALS", v.astype("<f4").tobytes()]
        args += ["BIAS", "%.9g" % float(b)]
        rep = _call(table.r, *args, key=key)
        if not isinstance(rep, list) or len(rep) != 2 or not isinstance(rep[1], bytes) \
                or len(rep[1]) != 8 * len(c):
            raise PSError("ERR", "PS.SCORE %s: unexpected reply" % key, key)
        table.score_version = int(rep[0])
        return np.frombuffer(rep[1], dtype="<f8").astype(np.float64)
    rows = table.pull(i) if len(i) else np.zeros((0, table.dim), np.float32)
    table.score_version = None
    return logits(b, rows, c, v)
