"""Tensor and Model handles over redis-py (standalone redis.Redis or redis.cluster.RedisCluster).

A Tensor is one PS tensor key. A Model is a job's set of named tensors split into partitions
exactly as libps does (libps/model.c), so a Python worker and a C worker (ps-train, libps)
can train the same job:

  * each tensor is cut along its first dimension; a partition holds
    rpp = max(1, partition_bytes // row_bytes) rows at most, the parts count is
    ceil(rows / rpp), and the rows are spread evenly (the first rows % parts get one more);
  * partition p of tensor NAME in job JOB is the key "JOB:NAME:p" (no hash tag: the parts
    spread over the cluster's slots);
  * create with "SEED s" seeds partition number g (counted over the whole model, tensors in
    order) with s + g;
  * pushes carry "ID <client id> <seq>" with a per-partition seq starting at the microsecond
    clock, and "VERSION v" with the partition's version of the last pull, so a resend after a
    lost connection is applied once.
"""

from __future__ import annotations

import os
import random
import socket
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import redis
import redis.exceptions as rex

from . import codec
from .errors import PSError, StaleError, from_response

DEFAULT_PARTITION_BYTES = 1024 * 1024   # libps PS_DEFAULT_PARTITION_BYTES
ArrayLike = Union[np.ndarray, Sequence[float]]
Client = Union[redis.Redis, "redis.cluster.RedisCluster"]

_HYPER = ("lr", "momentum", "beta1", "beta2", "eps", "wd", "clipnorm", "maxstaleness",
          "policy", "sync", "timeout", "dedupmax", "maxsnapshots")


def connect(addr: str = "127.0.0.1:6379", **kw: Any) -> Client:
    """A redis-py client for 'addr' ("host:port"): a RedisCluster when that node has cluster
    mode on, else a redis.Redis. Extra keywords go to the client's constructor."""
    host, _, port = addr.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    r = redis.Redis(host=host, port=int(port), **kw)
    if int(r.info("cluster").get("cluster_enabled", 0)):
        r.close()
        from redis.cluster import RedisCluster
        return RedisCluster(host=host, port=int(port), **kw)
    return r


def _call(r: Any, *args: Any, key: Optional[str] = None) -> Any:
    """r.execute_command(*args), with error replies raised as PSError (code kept)."""
    try:
        return r.execute_command(*args)
    except rex.ResponseError as e:
        raise from_response(e, key) from None


def _num(v: Any) -> str:
    """A number as the server parses it: ints as ints, floats with all 17 digits."""
    if isinstance(v, (bool, np.bool_)):
        return str(int(v))
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        return repr(float(v))
    return str(v)


def _s(v: Any) -> Any:
    return v.decode() if isinstance(v, bytes) else v


def _info_dict(reply: Sequence[Any]) -> Dict[str, Any]:
    """PS.INFO's flat field/value array as a dict; doubles (bulk strings in RESP2) as float."""
    out: Dict[str, Any] = {}
    for i in range(0, len(reply) - 1, 2):
        k, v = _s(reply[i]), reply[i + 1]
        if isinstance(v, bytes):
            v = v.decode()
            try:
                v = float(v)
            except ValueError:
                pass
        elif isinstance(v, list):
            v = [_s(x) for x in v]
        out[k] = v
    return out


def _create_args(key: str, shape: Sequence[int], init: Any = None, data: Any = None,
                 fmt: str = "F32", seed: Optional[int] = None, optim: Optional[str] = None,
                 nx: bool = False, **hyper: Any) -> List[Any]:
    """The PS.CREATE argument list (see docs/commands.md)."""
    args: List[Any] = ["PS.CREATE", key, "SHAPE"] + [int(d) for d in shape]
    if init is not None:
        parts = [init] if isinstance(init, str) else list(init)
        args += ["INIT", str(parts[0]).upper()] + [_num(p) for p in parts[1:]]
    if data is not None:
        args += ["DATA", data if isinstance(data, bytes) else codec.encode(fmt, data)]
        if codec.format_name(fmt) != "F32":
            args += ["FORMAT", codec.format_name(fmt)]
    if seed is not None:
        args += ["SEED", int(seed)]
    if optim is not None:
        args += ["OPTIM", str(optim).upper()]
    for k, v in hyper.items():
        if k.lower() not in _HYPER:
            raise TypeError("unknown PS.CREATE option %r" % k)
        args += [k.upper(), v.upper() if isinstance(v, str) else _num(v)]
    if nx:
        args.append("NX")
    return args


# ---------------------------------------------------------------------------- Tensor

class Tensor:
    """One PS tensor at 'key'. Methods map one-to-one onto the PS.* commands; server errors
    raise PSError (StaleError for STALE) with the server's code."""

    def __init__(self, r: Client, key: str):
        self.r = r
        self.key = key
        self._shape: Optional[Tuple[int, ...]] = None

    def __repr__(self) -> str:
        return "Tensor(%r)" % self.key

    def create(self, shape: Sequence[int], init: Any = None, data: Optional[ArrayLike] = None,
               fmt: str = "F32", seed: Optional[int] = None, optim: Optional[str] = None,
               nx: bool = False, **hyper: Any) -> bool:
        """PS.CREATE: 'init' is "zeros", "xavier", "he" or a tuple such as ("uniform", lo, hi);
        'data' initial values (sent in 'fmt'); 'hyper' LR, MOMENTUM, ..., SYNC, TIMEOUT as
        keywords (lr=0.1, policy="scale"). Returns True, or False when 'nx' and the key exists."""
        reply = _call(self.r, *_create_args(self.key, shape, init, data, fmt, seed, optim, nx,
                                            **hyper), key=self.key)
        self._shape = tuple(int(d) for d in shape) if reply is not None else None
        return reply is not None

    @property
    def shape(self) -> Tuple[int, ...]:
        """The tensor's shape (read once with PS.INFO, then cached)."""
        if self._shape is None:
            self._shape = tuple(int(d) for d in self.info()["shape"])
        return self._shape

    def pull(self, fmt: str = "F32", rows: Optional[ArrayLike] = None, at: Optional[str] = None,
             minversion: Optional[int] = None, timeout_ms: Optional[int] = None,
             reshape: bool = True) -> Optional[Tuple[int, np.ndarray]]:
        """PS.PULL: (version, values). F32 values are a zero-copy, read-only view of the reply
        (np.array(v) for a writable copy). With 'rows', only those rows (in that order). None
        when a MINVERSION wait timed out."""
        f = codec.format_name(fmt)
        args: List[Any] = ["PS.PULL", self.key]
        if f != "F32":
            args += ["FORMAT", f]
        if rows is not None:
            args += ["ROWS", codec.rows_blob(rows)]
        if at is not None:
            args += ["AT", at]
        if minversion is not None:
            args += ["MINVERSION", int(minversion)]
            if timeout_ms is not None:
                args += ["TIMEOUT", int(timeout_ms)]
        reply = _call(self.r, *args, key=self.key)
        if reply is None:
            return None
        version, blob = int(reply[0]), reply[1]
        shape = self.shape if reshape else None
        if shape is not None and rows is not None:
            shape = (len(np.asarray(rows).reshape(-1)),) + shape[1:]
        n = int(np.prod(shape)) if shape is not None else (len(blob) // 4 if f == "F32" else -1)
        if n < 0:
            raise ValueError("reshape=False needs FORMAT F32")
        values = codec.decode(f, blob, n)
        return version, values.reshape(shape) if shape is not None else values

    def push(self, grad: Union[ArrayLike, bytes], fmt: str = "F32",
             rows: Optional[ArrayLike] = None, version: Optional[int] = None,
             id: Optional[Tuple[str, int]] = None, scale: Optional[float] = None,
             topk: Optional[int] = None) -> int:
        """PS.PUSHGRAD: applies 'grad' (an array encoded in 'fmt', or a ready blob) and returns
        the new version. TOPK sends the 'topk' entries of largest magnitude. 'version' is the
        version the gradient was computed from; 'id' = (client, seq) makes it exactly-once."""
        args = push_args(self.key, grad, fmt, rows, version, id, scale, topk)
        return int(_call(self.r, *args, key=self.key))

    def set(self, values: Union[ArrayLike, bytes], fmt: str = "F32") -> int:
        """PS.SET: overwrite all values (optimizer state kept); returns the new version."""
        blob = values if isinstance(values, bytes) else codec.encode(fmt, values)
        args: List[Any] = ["PS.SET", self.key, blob]
        if codec.format_name(fmt) != "F32":
            args += ["FORMAT", codec.format_name(fmt)]
        return int(_call(self.r, *args, key=self.key))

    def info(self) -> Dict[str, Any]:
        """PS.INFO as a dict (shape a list of ints, doubles as float, counters as int)."""
        return _info_dict(_call(self.r, "PS.INFO", self.key, key=self.key))

    def version(self) -> int:
        """The current version (PS.INFO)."""
        return int(self.info()["version"])

    def config(self, **params: Any) -> None:
        """PS.CONFIG: change hyper-parameters and policies (lr=0.01, policy="scale", sync=4);
        all pairs are checked by the server first, then all or none applied."""
        if not params:
            raise TypeError("config needs at least one parameter")
        args: List[Any] = ["PS.CONFIG", self.key]
        for k, v in params.items():
            args += [k.upper(), v.upper() if isinstance(v, str) else _num(v)]
        _call(self.r, *args, key=self.key)

    def snapshot(self, name: str, time_ms: Optional[int] = None) -> Any:
        """PS.SNAPSHOT: keep a named copy of the values (TIME unix-ms optional)."""
        args: List[Any] = ["PS.SNAPSHOT", self.key, name]
        if time_ms is not None:
            args += ["TIME", int(time_ms)]
        return _call(self.r, *args, key=self.key)

    def snapshots(self) -> List[Any]:
        """PS.SNAPSHOTS: the snapshots of the tensor, as the server lists them."""
        return [[_s(x) for x in e] if isinstance(e, list) else _s(e)
                for e in _call(self.r, "PS.SNAPSHOTS", self.key, key=self.key)]

    def rollback(self, name: str) -> Any:
        """PS.ROLLBACK: restore snapshot 'name'."""
        return _call(self.r, "PS.ROLLBACK", self.key, name, key=self.key)

    def drop_snapshot(self, name: str) -> Any:
        """PS.DROPSNAPSHOT: forget snapshot 'name'."""
        return _call(self.r, "PS.DROPSNAPSHOT", self.key, name, key=self.key)

    def delete(self) -> int:
        """DEL the key; returns 1 when it existed."""
        self._shape = None
        return int(_call(self.r, "DEL", self.key, key=self.key))


def push_args(key: str, grad: Union[ArrayLike, bytes], fmt: str = "F32",
              rows: Optional[ArrayLike] = None, version: Optional[int] = None,
              id: Optional[Tuple[str, int]] = None, scale: Optional[float] = None,
              topk: Optional[int] = None) -> List[Any]:
    """The PS.PUSHGRAD argument list for one push (see Tensor.push)."""
    f = codec.format_name(fmt)
    if isinstance(grad, (bytes, bytearray, memoryview)):
        blob = bytes(grad)
    elif f == "TOPK":
        g = codec.as_f32(grad)
        blob = codec.encode_topk(g, topk if topk is not None else codec.topk_count(len(g), 0.01))
    else:
        blob = codec.encode(f, grad)
    args: List[Any] = ["PS.PUSHGRAD", key, blob]
    if f != "F32":
        args += ["FORMAT", f]
    if rows is not None:
        args += ["ROWS", codec.rows_blob(rows)]
    if version is not None:
        args += ["VERSION", int(version)]
    if id is not None:
        args += ["ID", id[0], int(id[1])]
    if scale is not None and scale != 1.0:
        args += ["SCALE", "%.9g" % float(scale)]
    return args


# ----------------------------------------------------------------------------- Model

@dataclass
class Partition:
    """One key of a model tensor: rows [first_row, first_row + nrows), elements
    [offset, offset + elements) of the flat tensor."""
    key: str
    index: int           # partition number within the tensor
    global_index: int    # partition number within the model (SEED offset)
    first_row: int
    nrows: int
    offset: int
    elements: int
    version: Optional[int] = None     # version seen by the last pull
    seq: int = 0                      # last exactly-once seq sent


@dataclass
class ModelTensor:
    """A named tensor of a Model and its partitions."""
    name: str
    shape: Tuple[int, ...]
    elements: int
    parts: List[Partition] = field(default_factory=list)
    feedback: Optional[codec.ErrorFeedback] = None


def default_client_id() -> str:
    """host:pid:8 hex digits, the shape of libps's default client id."""
    return "%s:%d:%08x" % (socket.gethostname()[:63], os.getpid(), random.getrandbits(32))


class Model:
    """A job's tensors, partitioned over keys as libps does (see the module docstring).

    'push_format' (F32, F16, BF16, I8, TOPK with 'topk_ratio') uses error feedback for the
    lossy formats; 'pull_format' is F32, F16, BF16 or I8 (what ps-train's TOPK jobs pull). 'window' > 1 queues that many model
    pushes in one pipeline before sending them (one round trip per node); pull() and flush()
    send what is queued. A connection error resends the same pushes (same IDs, so each is
    applied once) up to 'retries' times."""

    def __init__(self, r: Client, job: str, partition_bytes: int = DEFAULT_PARTITION_BYTES,
                 push_format: str = "F32", topk_ratio: float = 0.01, pull_format: str = "F32",
                 client_id: Optional[str] = None, window: int = 1, retries: int = 3,
                 send_version: bool = True):
        if partition_bytes <= 0:
            raise ValueError("partition_bytes must be > 0")
        if codec.format_name(pull_format) not in codec.DENSE_FORMATS:
            raise ValueError("pull_format must be one of %s" % ", ".join(codec.DENSE_FORMATS))
        if codec.format_name(push_format) == "TOPK" and not 0 < topk_ratio <= 1:
            raise ValueError("topk_ratio must be in (0, 1]")
        self.r = r
        self.job = job
        self.partition_bytes = int(partition_bytes)
        self.push_format = codec.format_name(push_format)
        self.topk_ratio = float(topk_ratio)
        self.pull_format = codec.format_name(pull_format)
        self.client_id = client_id or default_client_id()
        self.window = max(1, int(window))
        self.retries = int(retries)
        self.send_version = send_version
        self.tensors: Dict[str, ModelTensor] = {}
        self._laid_out = False
        self._seq_base = int(time.time() * 1e6)
        self._pending: List[Tuple[Partition, List[Any]]] = []
        self._pending_pushes = 0
        self.stats = {"pushes": 0, "pulls": 0, "stale_rejects": 0, "retries": 0,
                      "bytes_sent": 0, "bytes_received": 0}

    # -- definition and layout ----------------------------------------------------

    def add_tensor(self, name: str, shape: Sequence[int]) -> "Model":
        """Add tensor 'name' of 'shape' (1..8 dims, each >= 1) before the first use."""
        if self._laid_out:
            raise RuntimeError("the model's layout is fixed already")
        shape = tuple(int(d) for d in shape)
        if not name or name in self.tensors or not 1 <= len(shape) <= 8 or min(shape) < 1:
            raise ValueError("bad tensor %r %r" % (name, shape))
        self.tensors[name] = ModelTensor(name, shape, int(np.prod(shape)))
        return self

    def layout(self) -> Dict[str, List[Partition]]:
        """Fix the partition layout (libps psModelLayout) and return it by tensor name."""
        if not self._laid_out:
            if not self.tensors:
                raise ValueError("model %r has no tensors" % self.job)
            g = 0
            for t in self.tensors.values():
                rows = t.shape[0]
                row_elems = t.elements // rows
                row_bytes = row_elems * 4
                rpp = 1 if row_bytes >= self.partition_bytes else self.partition_bytes // row_bytes
                nparts = (rows + rpp - 1) // rpp
                base, extra = divmod(rows, nparts)
                row = 0
                for p in range(nparts):
                    nrows = base + (1 if p < extra else 0)
                    t.parts.append(Partition("%s:%s:%d" % (self.job, t.name, p), p, g, row,
                                             nrows, row * row_elems, nrows * row_elems))
                    row += nrows
                    g += 1
            self._laid_out = True
        return {n: t.parts for n, t in self.tensors.items()}

    def keys(self) -> List[str]:
        """Every partition key, tensors in order."""
        return [p.key for parts in self.layout().values() for p in parts]

    def _parts(self):
        for t in self.tensors.values():
            for p in t.parts:
                yield t, p

    def _run(self, cmds: List[Tuple[Any, List[Any]]]) -> List[Any]:
        """Send 'cmds' [(tag, args)] in one pipeline and return the replies in order, each a
        value or a PSError. A connection error resends them all (after a short backoff)."""
        for attempt in range(self.retries + 1):
            try:
                pipe = self.r.pipeline(transaction=False)
                for _, args in cmds:
                    pipe.execute_command(*args)
                replies = pipe.execute(raise_on_error=False)
                return [from_response(x) if isinstance(x, rex.ResponseError) else x
                        for x in replies]
            except (rex.ConnectionError, rex.TimeoutError):
                if attempt == self.retries:
                    raise
                self.stats["retries"] += 1
                time.sleep(0.05 * (attempt + 1))
        raise AssertionError("unreachable")

    # -- create, delete -----------------------------------------------------------

    def create(self, opts: Union[str, Mapping[str, Any]] = "", nx: bool = False,
               data: Optional[Mapping[str, ArrayLike]] = None) -> int:
        """PS.CREATE every partition with the options 'opts' (a PS.CREATE option string such
        as "INIT HE SEED 7 OPTIM SGD LR 0.1", or a dict). SEED s becomes s + the partition's
        number in the model, as libps does. 'data' gives initial values by tensor name (sent
        as DATA, F32; those tensors take no INIT). Returns the count of keys created."""
        if isinstance(opts, str):
            toks = opts.split()
        else:
            toks = []
            for k, v in opts.items():
                toks.append(k.upper())
                vals = v if isinstance(v, (list, tuple)) else [v]
                toks += [x.upper() if isinstance(x, str) else _num(x) for x in vals]
        self.layout()
        cmds = []
        for t, p in self._parts():
            args: List[Any] = ["PS.CREATE", p.key, "SHAPE", p.nrows] + list(t.shape[1:])
            if data is not None and t.name in data:
                flat = codec.as_f32(data[t.name])
                if flat.size != t.elements:
                    raise ValueError("data of %s has %d elements; the tensor has %d"
                                     % (t.name, flat.size, t.elements))
                args += ["DATA", flat[p.offset:p.offset + p.elements].tobytes()]
            for i, tok in enumerate(toks):
                if data is not None and t.name in data and tok.upper() == "INIT":
                    raise ValueError("INIT and data are exclusive: use opts without INIT")
                if i > 0 and toks[i - 1].upper() == "SEED" and tok.isdigit():
                    tok = str(int(tok) + p.global_index)
                args.append(tok)
            if nx:
                args.append("NX")
            cmds.append((p, args))
        created = 0
        for (p, _), rep in zip(cmds, self._run(cmds)):
            if isinstance(rep, PSError):
                raise PSError(rep.code, "PS.CREATE %s: %s" % (p.key, rep.message), p.key)
            created += rep is not None
        return created

    def delete(self) -> int:
        """DEL every partition key; returns how many existed."""
        cmds = [(p, ["DEL", p.key]) for _, p in self._parts()] if self.layout() else []
        return sum(int(x) for x in self._run(cmds) if not isinstance(x, PSError))

    # -- pull ---------------------------------------------------------------------

    def pull(self, names: Optional[Sequence[str]] = None) -> Dict[str, np.ndarray]:
        """Pull every tensor (or those in 'names') in 'pull_format', one pipeline, and return
        name -> array of the tensor's shape. A one-partition F32 tensor is a zero-copy
        read-only view of the reply. The versions seen are in self.versions (the lowest of a
        tensor's partitions) and are sent with the next push."""
        self.flush()
        self.layout()
        want = [self.tensors[n] for n in (names or self.tensors)]
        cmds = []
        for t in want:
            for p in t.parts:
                args: List[Any] = ["PS.PULL", p.key]
                if self.pull_format != "F32":
                    args += ["FORMAT", self.pull_format]
                cmds.append((p, args))
        replies = iter(self._run(cmds))
        out: Dict[str, np.ndarray] = {}
        for t in want:
            flat: Optional[np.ndarray] = None
            for p in t.parts:
                rep = next(replies)
                if isinstance(rep, PSError):
                    raise PSError(rep.code, "PS.PULL %s: %s" % (p.key, rep.message), p.key)
                vals = codec.decode(self.pull_format, rep[1], p.elements)
                p.version = int(rep[0])
                self.stats["pulls"] += 1
                self.stats["bytes_received"] += len(rep[1])
                if len(t.parts) == 1:
                    flat = vals
                else:
                    if flat is None:
                        flat = np.empty(t.elements, dtype=np.float32)
                    flat[p.offset:p.offset + p.elements] = vals
            assert flat is not None
            out[t.name] = flat.reshape(t.shape)
        return out

    @property
    def versions(self) -> Dict[str, Optional[int]]:
        """Per tensor, the lowest partition version seen by the last pull (None before)."""
        out: Dict[str, Optional[int]] = {}
        for t in self.tensors.values():
            vs = [p.version for p in t.parts]
            out[t.name] = None if not vs or None in vs else min(v for v in vs if v is not None)
        return out

    # -- push ---------------------------------------------------------------------

    def push(self, grads: Mapping[str, ArrayLike], scale: float = 1.0,
             versions: Optional[Mapping[str, int]] = None) -> List[int]:
        """Push one gradient per named tensor (arrays of the tensor's size), each partition
        in 'push_format' with error feedback, an exactly-once ID and the VERSION of the last
        pull (or 'versions'). With window > 1 the push is queued and [] returned until the
        window is full; otherwise it is sent and the new partition versions returned
        (-1 for a partition refused as STALE, which libps counts and drops too)."""
        self.layout()
        lossy = self.push_format != "F32"
        for name, g in grads.items():
            t = self.tensors[name]
            flat = codec.as_f32(g)
            if flat.size != t.elements:
                raise ValueError("gradient of %s has %d elements; the tensor has %d"
                                 % (name, flat.size, t.elements))
            if lossy and t.feedback is None:
                t.feedback = codec.ErrorFeedback(t.elements)
            if lossy:
                assert t.feedback is not None
                t.feedback.resid += flat
            for p in t.parts:
                if lossy:
                    assert t.feedback is not None
                    k = codec.topk_count(p.elements, self.topk_ratio)
                    blob = t.feedback.encode(self.push_format, None, p.offset,
                                             p.offset + p.elements, add=False, topk=k)
                else:
                    blob = flat[p.offset:p.offset + p.elements].tobytes()
                if p.seq == 0:
                    p.seq = self._seq_base
                p.seq += 1
                v = versions[name] if versions is not None and name in versions else p.version
                args = push_args(p.key, blob, self.push_format,
                                 version=v if self.send_version else None,
                                 id=(self.client_id, p.seq), scale=scale)
                self._pending.append((p, args))
                self.stats["bytes_sent"] += len(blob)
        self._pending_pushes += 1
        if self._pending_pushes >= self.window:
            return self.flush()
        return []

    def flush(self) -> List[int]:
        """Send the queued pushes in one pipeline and return their versions in order (-1 for
        a STALE refusal). Other errors raise PSError after every reply was read."""
        cmds, self._pending, self._pending_pushes = self._pending, [], 0
        if not cmds:
            return []
        out: List[int] = []
        first_err: Optional[PSError] = None
        for (p, _), rep in zip(cmds, self._run(cmds)):
            if isinstance(rep, StaleError):
                self.stats["stale_rejects"] += 1
                out.append(-1)
            elif isinstance(rep, PSError):
                first_err = first_err or PSError(rep.code, "PS.PUSHGRAD %s: %s"
                                                 % (p.key, rep.message), p.key)
                out.append(-1)
            else:
                self.stats["pushes"] += 1
                out.append(int(rep))
        if first_err is not None:
            raise first_err
        return out

    # -- rows (embedding tables) ----------------------------------------------------

    def pull_rows(self, name: str, rows: ArrayLike) -> np.ndarray:
        """Rows 'rows' of tensor 'name' (in that order, repeats allowed) with PS.PULL ROWS on
        the partitions that hold them, one pipeline: shape (len(rows),) + shape[1:]."""
        self.flush()
        t = self.tensors[name]
        r = np.asarray(rows, dtype=np.int64).reshape(-1)
        groups = rows_of(self, name, r)
        cmds = [(t.parts[i], ["PS.PULL", t.parts[i].key, "ROWS", codec.rows_blob(local)])
                for i, local in groups.items()]
        row_elems = t.elements // t.shape[0]
        out = np.empty((len(r), row_elems), dtype=np.float32)
        starts = np.array([p.first_row for p in t.parts])
        which = np.searchsorted(starts, r, side="right") - 1
        for (p, _), rep in zip(cmds, self._run(cmds)):
            if isinstance(rep, PSError):
                raise rep
            n = int(np.count_nonzero(which == p.index))
            out[which == p.index] = codec.decode("F32", rep[1], n * row_elems).reshape(n, -1)
            p.version = int(rep[0])
        return out.reshape((len(r),) + t.shape[1:])

    def push_rows(self, name: str, rows: ArrayLike, grad: ArrayLike,
                  scale: float = 1.0) -> List[int]:
        """Push the row gradients 'grad' (len(rows) rows) of tensor 'name' with PS.PUSHGRAD
        ROWS (F32, exactly-once IDs, VERSION of the last pull), sent at once."""
        t = self.tensors[name]
        r = np.asarray(rows, dtype=np.int64).reshape(-1)
        g = codec.as_f32(grad).reshape(len(r), -1)
        starts = np.array([p.first_row for p in t.parts])
        which = np.searchsorted(starts, r, side="right") - 1
        for i, local in rows_of(self, name, r).items():
            p = t.parts[i]
            if p.seq == 0:
                p.seq = self._seq_base
            p.seq += 1
            args = push_args(p.key, g[which == i].tobytes(), "F32", rows=local,
                             version=p.version if self.send_version else None,
                             id=(self.client_id, p.seq), scale=scale)
            self._pending.append((p, args))
        return self.flush()

    def info(self, name: str) -> List[Dict[str, Any]]:
        """PS.INFO of each partition of tensor 'name'."""
        self.layout()
        cmds = [(p, ["PS.INFO", p.key]) for p in self.tensors[name].parts]
        out = []
        for rep in self._run(cmds):
            if isinstance(rep, PSError):
                raise rep
            out.append(_info_dict(rep))
        return out

    def config(self, **params: Any) -> None:
        """PS.CONFIG every partition of every tensor (e.g. lr=0.01 for a schedule)."""
        self.layout()
        extra: List[Any] = []
        for k, v in params.items():
            extra += [k.upper(), v.upper() if isinstance(v, str) else _num(v)]
        cmds = [(p, ["PS.CONFIG", p.key] + extra) for _, p in self._parts()]
        for rep in self._run(cmds):
            if isinstance(rep, PSError):
                raise rep

    def snapshot(self, name: str) -> None:
        """PS.SNAPSHOT every partition under 'name' (each key atomically, not the model)."""
        self.layout()
        for rep in self._run([(p, ["PS.SNAPSHOT", p.key, name]) for _, p in self._parts()]):
            if isinstance(rep, PSError):
                raise rep

    def rollback(self, name: str) -> None:
        """PS.ROLLBACK every partition to snapshot 'name'."""
        self.layout()
        for rep in self._run([(p, ["PS.ROLLBACK", p.key, name]) for _, p in self._parts()]):
            if isinstance(rep, PSError):
                raise rep


def rows_of(model: Model, name: str, rows: ArrayLike) -> Dict[int, np.ndarray]:
    """Group row indices 'rows' of tensor 'name' by partition: {partition: local rows}."""
    t = model.tensors[name]
    model.layout()
    r = np.asarray(rows, dtype=np.int64).reshape(-1)
    starts = np.array([p.first_row for p in t.parts])
    which = np.searchsorted(starts, r, side="right") - 1
    return {int(i): (r[which == i] - starts[i]) for i in np.unique(which)}


__all__ = ["Tensor", "Model", "Partition", "connect", "push_args", "rows_of",
           "DEFAULT_PARTITION_BYTES"]
