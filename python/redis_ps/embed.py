"""Sharded embedding tables over redis-py, with libps's layout (ps.h "Embedding tables").

A table NAME of 'dim' floats per row is 'nshards' server tables (PS.CREATE key EMBEDDING):

  * shard s is the key "NAME:s{t}", t the smallest non-negative integer whose hash slot (of
    its decimal string) lies in [s*16384//nshards, (s+1)*16384//nshards);
  * id lives in shard mix64(id) % nshards, mix64 the SplitMix64 finalizer;
  * pushes carry "ID <client id> <seq>" (seq per shard from the microsecond clock) and
    "VERSION v" (the shard's version of the last pull), so a resend is applied once.

So a Python worker and a C worker (libps psEmbed) share a table.
"""

from __future__ import annotations

import time
import warnings
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

import numpy as np
import redis.exceptions as rex
from redis.crc import key_slot

from . import codec
from .conn import ArrayLike, Client, _call, _info_dict, default_client_id, where
from .guards import check_ids, deferred_interrupts
from .score import score_table
from .errors import (DurabilityError, NonFiniteGradient, PSError, ServerUnavailable, StaleError,
                     from_response)

SLOTS = 16384
_M64 = (1 << 64) - 1


def mix64(ids: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer of uint64 'ids' (element-wise, wrapping)."""
    z = np.asarray(ids, dtype=np.uint64).copy()
    with np.errstate(over="ignore"):
        z ^= z >> np.uint64(30)
        z *= np.uint64(0xbf58476d1ce4e5b9)
        z ^= z >> np.uint64(27)
        z *= np.uint64(0x94d049bb133111eb)
        z ^= z >> np.uint64(31)
    return z


def shard_of(ids: ArrayLike, nshards: int) -> np.ndarray:
    """The shard of each id (libps psEmbedShardOf)."""
    if nshards <= 1:
        return np.zeros(len(np.atleast_1d(ids)), dtype=np.int64)
    return (mix64(np.atleast_1d(ids)) % np.uint64(nshards)).astype(np.int64)


def shard_key(name: str, s: int, nshards: int) -> str:
    """Key of shard 's' (libps psEmbedShardKey)."""
    lo, hi = s * SLOTS // nshards, (s + 1) * SLOTS // nshards
    t = 0
    while not lo <= key_slot(str(t).encode()) < hi:
        t += 1
    return "%s:%d{%d}" % (name, s, t)


def _ids(ids: ArrayLike) -> np.ndarray:
    """'ids' as a flat little-endian uint64 array; InvalidIds for floats, negative ids
    (padding_idx -1), booleans and ids >= 2^64."""
    return np.ascontiguousarray(check_ids(ids, "embedding ids"), dtype="<u8")


DURABILITY = ("degrade", "fail")


class Embedding:
    """An embedding table of 'dim' floats per row over 'nshards' keys (see module docstring).

    pull(ids) -> (len(ids), dim) float32; push(ids, grads) sends one PS.PUSHGRAD IDS per shard
    in one pipeline; create/info/scan/evict act on every shard. Server errors raise PSError
    with the server's code."""

    def __init__(self, r: Client, name: str, dim: int, nshards: int = 1,
                 client_id: Optional[str] = None, retries: int = 3, send_version: bool = True,
                 push_format: str = "F32", feedback_ids: int = 1 << 20, wait: int = 0,
                 wait_timeout_ms: int = 1000, durability: str = "degrade"):
        if "{" in name or "}" in name or not 1 <= dim <= 65536 or not 1 <= nshards <= SLOTS:
            raise ValueError("bad table %r dim %r nshards %r" % (name, dim, nshards))
        if codec.format_name(push_format) not in ("F32", "F16", "BF16"):
            raise ValueError("a table's push_format is F32, F16 or BF16 (the server's tables "
                             "take no I8 or TOPK)")
        if durability not in DURABILITY:
            raise ValueError("durability must be one of %s" % ", ".join(DURABILITY))
        if wait > 0 and hasattr(r, "get_node_from_key"):
            # WAIT counts the replication of the writes of the connection it is sent on;
            # redis-py's cluster pipeline cannot send it on the connection of each node
            raise ValueError("wait > 0 needs a standalone server (redis.Redis): on a cluster "
                             "use libps's psEmbed (wait_replicas), which WAITs per node")
        self.r = r
        self.name = name
        self.dim = int(dim)
        self.nshards = int(nshards)
        self.keys = [shard_key(name, s, nshards) for s in range(nshards)]
        self.client_id = client_id or default_client_id()
        self.retries = int(retries)
        self.send_version = send_version
        self.push_format = codec.format_name(push_format)
        self.feedback_ids = int(feedback_ids)
        self.wait = int(wait)
        self.wait_timeout_ms = int(wait_timeout_ms)
        self.durability = durability
        self.degraded: Dict[str, bool] = {}
        # error feedback of lossy pushes: id -> row of what rounding took (libps psResid)
        self.resid: Dict[int, np.ndarray] = {}
        self.versions: List[Optional[int]] = [None] * nshards
        self._seq = [0] * nshards
        self._seq_base = int(time.time() * 1e6)
        self.score_version: Optional[int] = None   # of the last one-shard score()
        self.stats = {"rows_pulled": 0, "rows_pushed": 0, "stale_rejects": 0, "retries": 0,
                      "wait_short": 0, "unreplicated_pushes": 0}

    def __repr__(self) -> str:
        return "Embedding(%r, dim=%d, nshards=%d)" % (self.name, self.dim, self.nshards)

    def _run(self, cmds: List[List[Any]]) -> List[Any]:
        """'cmds' in one pipeline; replies in order, errors as PSError values. A connection
        error resends them all (same IDs: applied once)."""
        for attempt in range(self.retries + 1):
            try:
                pipe = self.r.pipeline(transaction=False)
                for args in cmds:
                    pipe.execute_command(*args)
                return [from_response(x, None) if isinstance(x, rex.ResponseError) else x
                        for x in pipe.execute(raise_on_error=False)]
            except (rex.ConnectionError, rex.TimeoutError) as e:
                if attempt == self.retries:
                    raise ServerUnavailable(where(self.r), e, self.retries) from None
                self.stats["retries"] += 1
                time.sleep(0.05 * (attempt + 1))
        raise AssertionError("unreachable")

    def create(self, opts: str = "", nx: bool = False) -> int:
        """PS.CREATE every shard with EMBEDDING DIM dim and the option string 'opts' (e.g.
        "OPTIM ROWADAGRAD LR 0.1 INIT UNIFORM -0.1 0.1 SEED 7"; SEED goes to every shard
        unchanged, as libps does). Returns the count of shards created."""
        extra = opts.split() + (["NX"] if nx else [])
        reps = self._run([["PS.CREATE", k, "EMBEDDING", "DIM", self.dim] + extra
                          for k in self.keys])
        for k, rep in zip(self.keys, reps):
            if isinstance(rep, PSError):
                raise PSError(rep.code, "PS.CREATE %s: %s" % (k, rep.message), k)
        return sum(1 for rep in reps if rep is not None)

    def delete(self) -> int:
        return sum(int(_call(self.r, "DEL", k, key=k)) for k in self.keys)

    def pull(self, ids: ArrayLike, fmt: str = "F32") -> np.ndarray:
        """Rows of 'ids' (repeats allowed) as a (len(ids), dim) float32 array."""
        a = _ids(ids)
        fmt = codec.format_name(fmt)
        out = np.empty((len(a), self.dim), dtype=np.float32)
        sh = shard_of(a, self.nshards)
        used = [s for s in range(self.nshards) if np.any(sh == s)]
        cmds = [["PS.PULL", self.keys[s], "IDS", a[sh == s].tobytes()]
                + (["FORMAT", fmt] if fmt != "F32" else []) for s in used]
        for s, rep in zip(used, self._run(cmds)):
            if isinstance(rep, PSError):
                raise PSError(rep.code, "PS.PULL %s: %s" % (self.keys[s], rep.message),
                              self.keys[s])
            n = int(np.count_nonzero(sh == s))
            if len(rep[1]) != codec.dense_size(fmt, n * self.dim):
                raise PSError("ERR", "PS.PULL %s: %d bytes for %d ids; not a table of dim %d?"
                              % (self.keys[s], len(rep[1]), n, self.dim), self.keys[s])
            out[sh == s] = codec.decode(fmt, rep[1], n * self.dim).reshape(n, self.dim)
            self.versions[s] = int(rep[0])
        self.stats["rows_pulled"] += len(a)
        return out

    def push(self, ids: ArrayLike, grads: Union[ArrayLike, bytes], fmt: Optional[str] = None,
             version: Optional[int] = None, id: Optional[Tuple[str, int]] = None,
             sum_duplicates: bool = False) -> List[int]:
        """Push gradient rows: row i of 'grads' ((len(ids), dim)) for ids[i]. Each shard gets
        one PS.PUSHGRAD grad [FORMAT fmt] IDS ... [VERSION v] [ID client seq]: v is 'version'
        or the shard's version of the last pull; the ID is 'id' (only with one shard) or the
        handle's client id with the shard's next seq. 'fmt' defaults to the table's
        push_format; F16/BF16 pushes carry error feedback (each id's rounding error is kept,
        for at most 'feedback_ids' ids, and added to its next row, as libps
        psEmbedSetErrorFeedback; repeated ids are then summed client-side). With
        'sum_duplicates' repeated ids are summed client-side in the order given (the
        server's order: the same bits). All or nothing on the client: ids, sizes and
        finiteness are checked and every shard encoded before anything is sent. With
        wait > 0 a WAIT follows the pushes on each node (durability policy "degrade": warn
        once per node and count stats["unreplicated_pushes"]; "fail": DurabilityError).
        Returns the new shard versions (-1 for a STALE refusal)."""
        a = _ids(ids)
        fmt = codec.format_name(fmt or self.push_format)
        if fmt not in ("F32", "F16", "BF16"):
            raise ValueError("table pushes are F32, F16 or BF16")
        g = codec.as_f32(grads)
        if g.size != len(a) * self.dim:
            raise ValueError("%d gradient values for %d ids of dim %d" % (g.size, len(a), self.dim))
        g = g.reshape(len(a), self.dim)
        if not np.isfinite(g).all():
            raise NonFiniteGradient([self.name])
        if id is not None and self.nshards != 1:
            raise ValueError("an explicit id=(client, seq) needs a table of one shard")
        feedback = fmt != "F32" and self.feedback_ids > 0
        sh = shard_of(a, self.nshards)
        cmds, used, seqs = [], [], []
        new_resid: Dict[int, np.ndarray] = {}
        for s in range(self.nshards):
            m = sh == s
            if not np.any(m):
                continue
            sid, sg = a[m], g[m]
            if sum_duplicates or feedback:
                uniq, first, inv = np.unique(sid, return_index=True, return_inverse=True)
                order = np.argsort(first, kind="stable")
                acc = sg[first[order]].copy()
                pos = np.empty(len(uniq), dtype=np.int64)
                pos[order] = np.arange(len(uniq))
                done = np.zeros(len(sid), dtype=bool)
                done[first] = True
                for i in np.nonzero(~done)[0]:       # in the order given, as the server sums
                    acc[pos[inv[i]]] += sg[i]
                sid, sg = sid[first[order]], acc
            if feedback:
                sg = sg.copy()
                keep = []
                for i, key in enumerate(sid.tolist()):
                    r = self.resid.get(key)
                    if r is not None:
                        sg[i] += r
                        keep.append(i)
                    elif len(self.resid) + len(new_resid) < self.feedback_ids:
                        keep.append(i)
                blob = codec.encode(fmt, sg.reshape(-1))
                sent = codec.decode(fmt, blob, sg.size).reshape(sg.shape)
                for i in keep:
                    new_resid[int(sid[i])] = (sg[i] - sent[i]).astype(np.float32)
            else:
                blob = codec.encode(fmt, sg.reshape(-1))
            args = ["PS.PUSHGRAD", self.keys[s], blob]
            if fmt != "F32":
                args += ["FORMAT", fmt]
            args += ["IDS", np.ascontiguousarray(sid, dtype="<u8").tobytes()]
            v = version if version is not None else self.versions[s]
            if self.send_version and v is not None:
                args += ["VERSION", int(v)]
            if id is not None:
                args += ["ID", id[0], int(id[1])]
            else:
                seq = (self._seq[s] or self._seq_base) + 1
                seqs.append((s, seq))
                args += ["ID", self.client_id, seq]
            cmds.append(args)
            used.append((s, len(sid)))
        waits = self._wait_cmds([s for s, _ in used])
        with deferred_interrupts():
            for s, seq in seqs:
                self._seq[s] = seq
            self.resid.update(new_resid)
            replies = self._run(cmds + [w for _, w in waits])
        out: List[int] = []
        first_err: Optional[PSError] = None
        for (s, n), rep in zip(used, replies):
            if isinstance(rep, StaleError):
                self.stats["stale_rejects"] += 1
                out.append(-1)
            elif isinstance(rep, PSError):
                first_err = first_err or PSError(rep.code, "PS.PUSHGRAD %s: %s"
                                                 % (self.keys[s], rep.message), self.keys[s])
                out.append(-1)
            else:
                self.stats["rows_pushed"] += n
                out.append(int(rep))
        if first_err is not None:
            raise first_err
        self._check_waits(waits, replies[len(cmds):], len(used))
        return out

    def _wait_cmds(self, shards: List[int]) -> List[Tuple[str, List[Any]]]:
        """The WAIT after the pushes, in their pipeline: on the connection that wrote them,
        which is what WAIT counts (standalone only: see __init__)."""
        if self.wait <= 0 or not shards:
            return []
        return [(where(self.r), ["WAIT", self.wait, self.wait_timeout_ms])]

    def _check_waits(self, waits: List[Tuple[str, List[Any]]], replies: List[Any],
                     pushes: int) -> None:
        for (node, _), rep in zip(waits, replies):
            if isinstance(rep, PSError):
                raise PSError(rep.code, "WAIT on %s: %s" % (node, rep.message))
            got = int(rep)
            if got >= self.wait:
                if self.degraded.pop(node, None):
                    warnings.warn("redis_ps: %s keeps %d replicas again" % (node, self.wait))
                continue
            self.stats["wait_short"] += 1
            msg = ("WAIT %d on %s answered %d replica(s) within %d ms: the table push was "
                   "applied on the master, not known to be replicated"
                   % (self.wait, node, got, self.wait_timeout_ms))
            if self.durability == "fail":
                raise DurabilityError(msg)
            self.stats["unreplicated_pushes"] += pushes
            if not self.degraded.get(node):
                self.degraded[node] = True
                warnings.warn("redis_ps: " + msg + " (durability 'degrade': going on)")

    def info(self) -> List[Dict[str, Any]]:
        """PS.INFO of every shard, in shard order."""
        return [_info_dict(_call(self.r, "PS.INFO", k, key=k)) for k in self.keys]

    def scan(self, since: int = 0, count: int = 1024,
             fmt: str = "F32") -> Iterator[Tuple[np.ndarray, np.ndarray]]:
        """PS.SCANROWS over every shard: yields (ids uint64 (k,), rows float32 (k, dim)) per
        call answered, for the live rows pushed after table version 'since'."""
        fmt = codec.format_name(fmt)
        for k in self.keys:
            cursor = b"0"
            while True:
                rep = _call(self.r, "PS.SCANROWS", k, cursor, "SINCE", int(since), "COUNT",
                            int(count), "FORMAT", fmt, key=k)
                cursor, ids, vals = rep[0], np.frombuffer(rep[2], dtype="<u8"), rep[3]
                if len(ids):
                    yield ids.copy(), codec.decode(fmt, vals, len(ids) * self.dim).reshape(
                        len(ids), self.dim)
                if cursor in (b"0", "0", 0):
                    break

    def evict(self, age: int) -> int:
        """PS.EVICT AGE 'age' on every shard; returns the rows removed."""
        return sum(int(_call(self.r, "PS.EVICT", k, "AGE", int(age), key=k)) for k in self.keys)

    def score(self, counts: ArrayLike, ids: ArrayLike, vals: Optional[ArrayLike] = None,
              model: Optional[str] = None, bias: float = 0.0,
              fields: Optional[ArrayLike] = None, nfields: Optional[int] = None) -> np.ndarray:
        """Serving (PS.SCORE, libps psScore): the float64 logits of len(counts) samples under
        the LR (dim 1) or FM (dim k + 1) model whose rows this table holds. Sample i has
        counts[i] features; 'ids' are all samples' feature ids in sample order, 'vals' their
        values (1 each when None); 'bias' is the model's bias, rounded to float32 as ps-train
        holds it; 'model' "lr" or "fm" (default: by dim). One shard: the server scores (one
        PS.SCORE; self.score_version is the table version it scored at). Several shards: the
        rows are pulled and scored here by the same kernel (redis_ps.score.logits). Either
        way the bits of libps psScore and of ps-train's forward pass on these parameters. Bad
        input raises ValueError or InvalidIds before anything is sent.

        model="mlp" (ps-train --model mlp): 'fields' gives each feature's field (< nfields,
        the job's --fields) and the answer is the (len(counts), nfields, dim) float32 pooled
        embedding inputs (PS.SCORE MODEL MLP, libps psScorePool; sharded: the rows pulled and
        redis_ps.score.pool run here), the trainer's bits; redis_ps.score.mlp_forward finishes
        the forward pass with the job's dense tensors (close to, not bit-identical with,
        ps-train's OpenBLAS)."""
        return score_table(self, counts, ids, vals, model, bias, fields, nfields)
