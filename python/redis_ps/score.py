"""Serving: the LR / FM logits of a batch of samples under the model an embedding table holds
(docs/commands.md "PS.SCORE"), the same bits as libps's psScore and ps-train's forward pass;
and for ps-train's MLP its pooled embedding input (PS.SCORE MODEL MLP, libps psScorePool),
the same bits as the trainer's, which mlp_forward() finishes into probabilities with numpy.

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

MLP (model "mlp"): each feature also has a field (uint32, < nfields), and sample i's pooled
input is nfields x dim float32s, slot f the sum of x_j * r_j over its features of field f, in
float32, in feature order (common/ctr_score.c ps_ctr_pool):

    out = 0; for each feature j in order: out[field_j] += x_j * r_j    (float32, rounded
                                                                        after each * and +)

pool() below runs it over the samples side by side in numpy float32 (one rounding per
operation, as the C kernel): the same bits.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np

from .conn import ArrayLike, _call
from .errors import PSError
from .guards import check_ids

MODELS = ("lr", "fm", "mlp")
MAX_FIELDS = 256   # PS_SCORE_MAX_FIELDS (ps.h): most fields an MLP input pools


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


def pool(rows: np.ndarray, counts: np.ndarray, fields: np.ndarray, nfields: int,
         vals: Optional[np.ndarray] = None) -> np.ndarray:
    """The MLP pooling kernel: (len(counts), nfields, dim) float32 pooled inputs from 'rows'
    ((sum counts, dim) float32, the rows of the features in sample order), 'fields' (the
    field of each feature, < nfields) and 'vals' (float32 per feature, or None for 1 each)."""
    counts = np.asarray(counts, dtype=np.int64).reshape(-1)
    rows = np.asarray(rows, dtype=np.float32)
    fields = np.asarray(fields, dtype=np.int64).reshape(-1)
    n, dim = len(counts), rows.shape[1]
    starts = np.zeros(n, dtype=np.int64)
    np.cumsum(counts[:-1], out=starts[1:])
    out = np.zeros((n, int(nfields), dim), dtype=np.float32)
    for j in range(int(counts.max()) if n else 0):
        live = np.nonzero(counts > j)[0]          # the samples that have a feature j
        at = starts[live] + j
        r = rows[at]
        if vals is not None:
            r = np.asarray(vals, dtype=np.float32)[at][:, None] * r    # float32 products
        f = fields[at]
        out[live, f] = out[live, f] + r           # one sample once per step: no repeats
    return out


def mlp_forward(pooled: np.ndarray, tensors: Any, dense: Optional[ArrayLike] = None) -> np.ndarray:
    """Finishes ps-train's MLP forward pass with numpy: the class-1 probabilities (float64) of
    the samples whose pooled inputs are 'pooled' ((n, fields, dim), from score(model="mlp")),
    followed by their dense features 'dense' ((n, ndense), None when the job has none), under
    the job's dense tensors 'tensors' (name -> array: "W0" (out x in), "b0", "W1", ...: e.g.
    redis_ps.Model(r, job) with those tensors added, .pull()). Hidden layers are ReLU, the last
    a 2-class softmax, as ml/nn.c. NOT bit-identical to the trainer: ps-train multiplies with
    OpenBLAS sgemm, whose summation order is its own; numpy's float32 matmul differs in the
    last bits (about 1e-6 relative on a probability). Only the pooled input is exact."""
    x = np.asarray(pooled, dtype=np.float32)
    x = x.reshape(x.shape[0], -1)
    if dense is not None:
        x = np.concatenate([x, np.asarray(dense, dtype=np.float32).reshape(x.shape[0], -1)], 1)
    nl = 0
    while "W%d" % nl in tensors:
        nl += 1
    if nl == 0:
        raise ValueError("no dense tensor W0 in %r" % (sorted(tensors)[:8],))
    for layer in range(nl):
        w = np.asarray(tensors["W%d" % layer], dtype=np.float32)
        b = np.asarray(tensors["b%d" % layer], dtype=np.float32).reshape(-1)
        w = w.reshape(len(b), -1)
        if w.shape[1] != x.shape[1]:
            raise ValueError("W%d has %d inputs; the layer gets %d" % (layer, w.shape[1],
                                                                      x.shape[1]))
        x = x @ w.T + b
        if layer + 1 < nl:
            x = np.maximum(x, np.float32(0))
    if x.shape[1] != 2:
        raise ValueError("the last layer has %d outputs; ps-train's MLP has 2" % x.shape[1])
    z = x.astype(np.float64)
    mx = z.max(axis=1, keepdims=True)
    lse = mx[:, 0] + np.log(np.exp(z - mx).sum(axis=1))
    return np.exp(z[:, 1] - lse)


def _batch(dim: int, model: Optional[str], counts: Any, ids: Any, vals: Any, bias: float):
    """Checks a batch as psScore and PS.SCORE do, before anything is sent; returns
    (model, counts uint32, ids uint64, vals float32 or None, bias float32)."""
    m = (model or ("lr" if dim == 1 else "fm")).lower()
    if m not in MODELS:
        raise ValueError("unknown model %r (lr, fm, mlp)" % model)
    if m != "mlp" and (m == "lr") != (dim == 1):
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


def _fields(m: str, fields: Any, nfields: Any, nids: int, bias: float):
    """Checks an MLP batch's fields as psScorePool does; returns (fields uint32, nfields)."""
    if m != "mlp":
        if fields is not None or nfields is not None:
            raise ValueError("fields and nfields are the mlp model's (lr and fm take neither)")
        return None, None
    if fields is None or nfields is None:
        raise ValueError("model mlp needs fields (one per feature) and nfields")
    if float(bias) != 0.0:
        raise ValueError("model mlp takes no bias (it answers the pooled input)")
    if isinstance(nfields, bool) or not isinstance(nfields, (int, np.integer)) \
            or not 1 <= int(nfields) <= MAX_FIELDS:
        raise ValueError("nfields must be an integer in 1..%d; got %r" % (MAX_FIELDS, nfields))
    f = np.asarray(fields).reshape(-1)
    if len(f) != nids:
        raise ValueError("%d fields for %d features" % (len(f), nids))
    if f.size and (f.dtype.kind not in "iu" or int(f.min()) < 0 or int(f.max()) >= int(nfields)):
        raise ValueError("fields must be integers in [0, nfields=%d); got %r"
                         % (int(nfields), f[:8].tolist()))
    return np.ascontiguousarray(f.astype(np.uint32)), int(nfields)


def score_table(table: Any, counts: ArrayLike, ids: ArrayLike,
                vals: Optional[ArrayLike] = None, model: Optional[str] = None,
                bias: float = 0.0, fields: Optional[ArrayLike] = None,
                nfields: Optional[int] = None) -> np.ndarray:
    """Embedding.score: see there."""
    m, c, i, v, b = _batch(table.dim, model, counts, ids, vals, bias)
    f, nf = _fields(m, fields, nfields, len(i), bias)
    if m == "mlp":
        return _pool_table(table, c, i, v, f, nf)
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


def _pool_table(table: Any, c: np.ndarray, i: np.ndarray, v: Optional[np.ndarray],
                f: np.ndarray, nf: int) -> np.ndarray:
    """score(model="mlp"): PS.SCORE MODEL MLP on one shard, else the rows pulled and pool()."""
    if len(c) == 0:
        return np.zeros((0, nf, table.dim), np.float32)
    if table.nshards == 1:
        key = table.keys[0]
        args = ["PS.SCORE", key, "MODEL", "MLP", "COUNTS", c.astype("<u4").tobytes(),
                "IDS", i.astype("<u8").tobytes()]
        if v is not None:
            args += ["VALS", v.astype("<f4").tobytes()]
        args += ["FIELDS", f.astype("<u4").tobytes(), "FIELDCOUNT", nf]
        rep = _call(table.r, *args, key=key)
        want = 4 * len(c) * nf * table.dim
        if not isinstance(rep, list) or len(rep) != 2 or not isinstance(rep[1], bytes) \
                or len(rep[1]) != want:
            raise PSError("ERR", "PS.SCORE %s: unexpected reply" % key, key)
        table.score_version = int(rep[0])
        return np.frombuffer(rep[1], dtype="<f4").astype(np.float32).reshape(len(c), nf,
                                                                              table.dim)
    rows = table.pull(i) if len(i) else np.zeros((0, table.dim), np.float32)
    table.score_version = None
    return pool(rows, c, f, nf, v)
