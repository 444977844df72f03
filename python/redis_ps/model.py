"""Model: a job's named tensors over redis-py (standalone redis.Redis or
redis.cluster.RedisCluster).

A Model is a job's set of named tensors split into partitions
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

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import redis.exceptions as rex

from . import _resp, codec
from .conn import ArrayLike, Client, _info_dict, _num, _s, default_client_id, where
from .errors import (ModuleNotLoaded, NonFiniteGradient, PSError, SchemaError,
                     ServerUnavailable, StaleError, WrongTypeError, from_response)
from .guards import check_ids, deferred_interrupts
from .tensor import push_args

DEFAULT_PARTITION_BYTES = 1024 * 1024   # libps PS_DEFAULT_PARTITION_BYTES


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
    tensor: str = ""                  # name of the tensor it belongs to


@dataclass
class ModelTensor:
    """A named tensor of a Model and its partitions."""
    name: str
    shape: Tuple[int, ...]
    elements: int
    parts: List[Partition] = field(default_factory=list)
    feedback: Optional[codec.ErrorFeedback] = None


@dataclass
class PushBatch:
    """One model push, validated and encoded but not yet committed (Model.prepare_push):
    the PS.PUSHGRAD commands, the exactly-once seqs they take and, for lossy formats, the
    error-feedback residuals after them. Committing it (Model.commit) is all or nothing."""
    cmds: List[Tuple[Partition, List[Any]]]
    seqs: List[Tuple[Partition, int]]
    resid: Dict[str, np.ndarray]
    nbytes: int


NONFINITE = ("raise", "skip", "send")


class Model:
    """A job's tensors, partitioned over keys as libps does (see the module docstring).

    'push_format' (F32, F16, BF16, I8, TOPK with 'topk_ratio') uses error feedback for the
    lossy formats; 'pull_format' is F32, F16, BF16 or I8 (what ps-train's TOPK jobs pull).
    'window' > 1 queues that many model pushes in one pipeline before sending them (one
    round trip per node); pull() and flush() send what is queued. A connection error
    resends the same pushes (same IDs, so each is applied once) up to 'retries' times.

    Pushes are all or nothing on the client: push() validates and encodes every tensor of
    the step before anything is queued or sent (a wrong size, an unknown name or, with
    nonfinite="raise", a NaN anywhere raises with nothing queued, nothing sent and the
    error-feedback residuals untouched), and a Ctrl-C inside push() is held back until the
    step is queued whole (and sent, when the window is full)."""

    def __init__(self, r: Client, job: str, partition_bytes: int = DEFAULT_PARTITION_BYTES,
                 push_format: str = "F32", topk_ratio: float = 0.01, pull_format: str = "F32",
                 client_id: Optional[str] = None, window: int = 1, retries: int = 3,
                 send_version: bool = True, nonfinite: str = "raise"):
        if partition_bytes <= 0:
            raise ValueError("partition_bytes must be > 0")
        if codec.format_name(pull_format) not in codec.DENSE_FORMATS:
            raise ValueError("pull_format must be one of %s" % ", ".join(codec.DENSE_FORMATS))
        if codec.format_name(push_format) == "TOPK" and not 0 < topk_ratio <= 1:
            raise ValueError("topk_ratio must be in (0, 1]")
        if nonfinite not in NONFINITE:
            raise ValueError("nonfinite must be one of %s" % ", ".join(NONFINITE))
        self.r = r
        self.job = job
        self.partition_bytes = int(partition_bytes)
        self.push_format = codec.format_name(push_format)
        self.topk_ratio = float(topk_ratio)
        self.pull_format = codec.format_name(pull_format)
        self.client_id = client_id or default_client_id()
        self.window = max(1, int(window))
        self.retries = int(retries)
        self.fast_path = True           # _resp for a plain standalone redis.Redis
        self._tl = threading.local()
        self.send_version = send_version
        self.nonfinite = nonfinite
        self.tensors: Dict[str, ModelTensor] = {}
        self._laid_out = False
        self._seq_base = int(time.time() * 1e6)
        self._pending: List[Tuple[Partition, List[Any]]] = []
        self._pending_pushes = 0
        self.stats = {"pushes": 0, "pulls": 0, "stale_rejects": 0, "retries": 0,
                      "bytes_sent": 0, "bytes_received": 0, "nonfinite_steps": 0}

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
                                             nrows, row * row_elems, nrows * row_elems,
                                             tensor=t.name))
                    row += nrows
                    g += 1
            self._laid_out = True
        return {n: t.parts for n, t in self.tensors.items()}

    def keys(self) -> List[str]:
        """Every partition key, tensors in order."""
        return [p.key for parts in self.layout().values() for p in parts]

    def partitions(self) -> List[Partition]:
        """Every partition, tensors in order (the order of part_versions arguments)."""
        self.layout()
        return [p for t in self.tensors.values() for p in t.parts]

    def _parts(self):
        for t in self.tensors.values():
            for p in t.parts:
                yield t, p

    def _tensor(self, name: str) -> ModelTensor:
        t = self.tensors.get(name)
        if t is None:
            raise SchemaError("model %r has no tensor %r (it has %s)"
                              % (self.job, name, ", ".join(self.tensors) or "none"), name)
        return t

    def _conn(self) -> Optional[_resp.RespConn]:
        """This thread's fast connection (_resp) to a plain standalone server, or None."""
        tl = self._tl
        if getattr(tl, "r", None) is not self.r:
            if getattr(tl, "conn", None) is not None:
                tl.conn.close()
            tl.r, tl.conn = self.r, (_resp.for_client(self.r) if self.fast_path else None)
        return tl.conn

    def _run(self, cmds: List[Tuple[Any, List[Any]]], retries: Optional[int] = None,
             sinks: Optional[Sequence[Optional[memoryview]]] = None) -> List[Any]:
        """Send 'cmds' [(tag, args)] in one pipeline and return the replies in order, each a
        value or a PSError. A connection error resends them all (after a short backoff);
        after the retries it raises ServerUnavailable. 'sinks' (fast path only): per command,
        a buffer a PS.PULL's blob is read into (see pull_sinks)."""
        retries = self.retries if retries is None else retries
        for attempt in range(retries + 1):
            try:
                conn = self._conn()
                if conn is not None:
                    replies = conn.pipeline([a for _, a in cmds], sinks)
                else:
                    pipe = self.r.pipeline(transaction=False)
                    for _, args in cmds:
                        pipe.execute_command(*args)
                    replies = pipe.execute(raise_on_error=False)
                out = [from_response(x) if isinstance(x, rex.ResponseError) else x
                       for x in replies]
                for x in out:
                    if isinstance(x, ModuleNotLoaded):
                        raise ModuleNotLoaded(where(self.r))
                return out
            except (rex.ConnectionError, rex.TimeoutError) as e:
                if isinstance(e, ServerUnavailable):
                    raise
                if attempt == retries:
                    raise ServerUnavailable(where(self.r), e, retries) from None
                self.stats["retries"] += 1
                time.sleep(0.05 * (attempt + 1))
        raise AssertionError("unreachable")

    def pull_sinks(self, cmds: List[Tuple[Partition, List[Any]]],
                   dst: Mapping[str, np.ndarray]) -> Optional[List[Optional[memoryview]]]:
        """For F32 pulls into contiguous float32 arrays: per command, the bytes of its slice
        of dst, so the fast path reads the reply straight into place (None otherwise)."""
        if self.pull_format != "F32" or self._conn() is None:
            return None
        out: List[Optional[memoryview]] = []
        for p, _ in cmds:
            d = dst.get(p.tensor)
            if d is None or d.dtype != np.float32 or not d.flags.c_contiguous \
                    or not d.flags.writeable:
                out.append(None)
                continue
            out.append(memoryview(d.reshape(-1)[p.offset:p.offset + p.elements]).cast("B"))
        return out

    # -- schema ---------------------------------------------------------------------

    def check(self, optimizer: Union[None, str, Mapping[str, str]] = None
              ) -> Dict[str, Optional[Dict[str, Any]]]:
        """Compare the job on the server with this model, before anything is written:
        every partition key must be missing or a tensor of this partition's shape (and of
        'optimizer' when given), and no tensor may have a partition past this layout's
        last (another partition_bytes). 'optimizer' is one name for all tensors or a
        mapping tensor name -> name. Returns {key: its PS.INFO dict, or None when missing}.
        Raises WrongTypeError for a
        key of another type and SchemaError, naming the tensor, for a mismatch. Checks the
        server cannot answer (an ACL without TYPE or PS.INFO) are left to the first pull."""
        self.layout()
        cmds: List[Tuple[Any, List[Any]]] = []
        for t, p in self._parts():
            cmds.append((p, ["TYPE", p.key]))
            cmds.append((p, ["PS.INFO", p.key]))
        for t in self.tensors.values():
            cmds.append((t, ["EXISTS", "%s:%s:%d" % (self.job, t.name, len(t.parts))]))
        reps = self._run(cmds)
        exists: Dict[str, Optional[Dict[str, Any]]] = {}
        i = 0
        for t, p in self._parts():
            typ, info = reps[i], reps[i + 1]
            i += 2
            typ = _s(typ) if not isinstance(typ, PSError) else None
            if typ is not None and typ not in ("none", "ps-tensor"):
                raise WrongTypeError(p.key, typ, "redis-ps tensor (ps-tensor)", t.name)
            if isinstance(info, PSError):
                if info.code == "WRONGTYPE":
                    raise WrongTypeError(p.key, typ or "value of another type",
                                         "redis-ps tensor (ps-tensor)", t.name)
                if "no such key" in info.message:
                    exists[p.key] = None
                    continue
                if info.code == "NOPERM":
                    exists[p.key] = {} if typ != "none" else None
                    continue
                raise PSError(info.code, "PS.INFO %s: %s" % (p.key, info.message), p.key)
            d = _info_dict(info)
            exists[p.key] = d
            want = [p.nrows] + list(t.shape[1:])
            got = [int(x) for x in d.get("shape", [])]
            if got != want:
                raise SchemaError(
                    "tensor %s: key %s has shape %s on the server; this model's partition %d "
                    "of %s %s needs %s: the job was created for another architecture (or "
                    "partition_bytes). Use another job name, or delete the job's keys "
                    "(Model.delete) to start over" % (t.name, p.key, got, p.index, t.name,
                                                     list(t.shape), want), t.name, p.key)
            want_opt = (optimizer.get(t.name) if isinstance(optimizer, Mapping) else optimizer)
            if want_opt is not None and str(d.get("optimizer", "")).lower() != want_opt.lower():
                raise SchemaError(
                    "tensor %s: key %s uses optimizer %s on the server, not %s (an optimizer "
                    "cannot change: use another job name, or delete the job)"
                    % (t.name, p.key, d.get("optimizer"), want_opt.lower()), t.name, p.key)
        for t in self.tensors.values():
            rep = reps[i]
            i += 1
            if not isinstance(rep, PSError) and int(rep):
                raise SchemaError(
                    "tensor %s: key %s:%s:%d exists, but this model splits %s into %d "
                    "partition(s): the job was created with another partition_bytes (this "
                    "model: %d) or another shape" % (t.name, self.job, t.name, len(t.parts),
                                                     t.name, len(t.parts), self.partition_bytes),
                    t.name)
        return exists

    # -- create, delete -----------------------------------------------------------

    def create(self, opts: Union[str, Mapping[str, Any]] = "", nx: bool = False,
               data: Optional[Mapping[str, ArrayLike]] = None,
               names: Optional[Sequence[str]] = None, checked: bool = False) -> int:
        """PS.CREATE every partition with the options 'opts' (a PS.CREATE option string such
        as "INIT HE SEED 7 OPTIM SGD LR 0.1", or a dict). SEED s becomes s + the partition's
        number in the model, as libps does. 'data' gives initial values by tensor name (sent
        as DATA, F32; those tensors take no INIT). Returns the count of keys created.

        Everything is checked before anything is created (Model.check): a key of another
        type raises WrongTypeError, an existing tensor of another shape or optimizer
        SchemaError, and without 'nx' an existing key BUSYKEY; with 'nx' the existing keys
        (of the right schema) are kept and only the missing ones created. 'names' limits
        it to those tensors; 'checked' skips the check (the caller ran check())."""
        if isinstance(opts, str):
            toks = opts.split()
        else:
            toks = []
            for k, v in opts.items():
                toks.append(k.upper())
                vals = v if isinstance(v, (list, tuple)) else [v]
                toks += [x.upper() if isinstance(x, str) else _num(x) for x in vals]
        self.layout()
        optim = None
        for i, tok in enumerate(toks[:-1]):
            if tok.upper() == "OPTIM":
                optim = toks[i + 1]
        flats: Dict[str, np.ndarray] = {}
        if data is not None:
            if any(tok.upper() == "INIT" for tok in toks):
                raise ValueError("INIT and data are exclusive: use opts without INIT")
            for name, v in data.items():
                flats[name] = self._checked_f32(name, v, "data")[1]
        exists = {} if checked else self.check(optimizer=optim)
        if not nx:
            for key, ex in exists.items():
                if ex is not None:
                    raise PSError("BUSYKEY", "PS.CREATE %s: Target key name already exists "
                                  "(nothing created; nx=True keeps existing keys)" % key, key)
        cmds = []
        for t, p in self._parts():
            if exists.get(p.key) is not None or (names is not None and t.name not in names):
                continue
            args: List[Any] = ["PS.CREATE", p.key, "SHAPE", p.nrows] + list(t.shape[1:])
            if t.name in flats:
                args += ["DATA", flats[t.name][p.offset:p.offset + p.elements].tobytes()]
            for i, tok in enumerate(toks):
                if i > 0 and toks[i - 1].upper() == "SEED" and tok.isdigit():
                    tok = str(int(tok) + p.global_index)
                args.append(tok)
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

    def pull_cmds(self, names: Optional[Sequence[str]] = None
                  ) -> List[Tuple[Partition, List[Any]]]:
        """The PS.PULL commands of a pull of every tensor (or those in 'names')."""
        self.layout()
        cmds = []
        for n in (names or self.tensors):
            for p in self._tensor(n).parts:
                args: List[Any] = ["PS.PULL", p.key]
                if self.pull_format != "F32":
                    args += ["FORMAT", self.pull_format]
                cmds.append((p, args))
        return cmds

    def _part_values(self, p: Partition, rep: Any) -> np.ndarray:
        """The values of partition 'p' in pull reply 'rep' (a read-only view for F32), or
        the error it is, naming the tensor."""
        if isinstance(rep, PSError):
            hint = (": the job's tensors were not created (Model.create, or PSOptimizer "
                    "with create=True)" if "no such key" in rep.message else "")
            if rep.code == "WRONGTYPE":
                raise WrongTypeError(p.key, "value of another type", "redis-ps tensor",
                                     p.tensor)
            raise PSError(rep.code, "PS.PULL %s (tensor %s): %s%s"
                          % (p.key, p.tensor, rep.message, hint), p.key)
        blob = rep[1]
        if len(blob) != codec.dense_size(self.pull_format, p.elements):
            have = (len(blob) // 4 if self.pull_format == "F32" else
                    len(blob) // 2 if self.pull_format in ("F16", "BF16") else len(blob) - 4)
            raise SchemaError(
                "tensor %s: key %s holds %d elements on the server; this model's partition "
                "%d needs %d: the job was created for another architecture or "
                "partition_bytes. Use another job name, or delete the job to start over"
                % (p.tensor, p.key, have, p.index, p.elements), p.tensor, p.key)
        return codec.decode(self.pull_format, blob, p.elements)

    def pull(self, names: Optional[Sequence[str]] = None) -> Dict[str, np.ndarray]:
        """Pull every tensor (or those in 'names') in 'pull_format', one pipeline, and return
        name -> array of the tensor's shape. A one-partition F32 tensor is a zero-copy
        read-only view of the reply. The versions seen are in self.versions (the lowest of a
        tensor's partitions) and are sent with the next push."""
        self.flush()
        cmds = self.pull_cmds(names)
        out: Dict[str, np.ndarray] = {}
        flats: Dict[str, np.ndarray] = {}
        replies = self._run(cmds)
        allvals = [self._part_values(p, rep) for (p, _), rep in zip(cmds, replies)]
        for (p, _), rep, vals in zip(cmds, replies, allvals):
            p.version = int(rep[0])
            self.stats["bytes_received"] += len(rep[1])
            t = self.tensors[p.tensor]
            if len(t.parts) == 1:
                flats[t.name] = vals
            else:
                if t.name not in flats:
                    flats[t.name] = np.empty(t.elements, dtype=np.float32)
                flats[t.name][p.offset:p.offset + p.elements] = vals
        self.stats["pulls"] += len(cmds)
        for name, flat in flats.items():
            out[name] = flat.reshape(self.tensors[name].shape)
        return out

    def decode_pull(self, cmds: List[Tuple[Partition, List[Any]]], replies: Sequence[Any],
                    dst: Mapping[str, np.ndarray]) -> List[int]:
        """Decode pull replies straight into 'dst' (name -> writable array of the tensor's
        size, any dtype) and return the partition versions, in the order of 'cmds'. Raises,
        naming the tensor, when a reply is an error or of the wrong size: before writing
        anything, except for the partitions the fast path read into place already
        (pull_sinks; each holds the server's values of its partition)."""
        vals = [self._part_values(p, rep) for (p, _), rep in zip(cmds, replies)]
        for (p, _), v, rep in zip(cmds, vals, replies):
            if isinstance(rep[1], memoryview):
                continue                    # read into place already (pull_sinks)
            d = dst[p.tensor].reshape(-1)
            np.copyto(d[p.offset:p.offset + p.elements], v, casting="unsafe")
        return [int(rep[0]) for rep in replies]

    def pull_into(self, dst: Mapping[str, np.ndarray],
                  names: Optional[Sequence[str]] = None) -> List[int]:
        """Pull every tensor (or those in 'names') straight into the arrays 'dst' (name ->
        writable array of the tensor's size; float32 gets one copy from the reply, no
        intermediate array). Returns the partition versions (tensors in order)."""
        self.flush()
        cmds = self.pull_cmds(names)
        replies = self._run(cmds, sinks=self.pull_sinks(cmds, dst))
        versions = self.decode_pull(cmds, replies, dst)
        for (p, _), rep, v in zip(cmds, replies, versions):
            p.version = v
            self.stats["bytes_received"] += len(rep[1])
        self.stats["pulls"] += len(cmds)
        return versions

    @property
    def versions(self) -> Dict[str, Optional[int]]:
        """Per tensor, the lowest partition version seen by the last pull (None before)."""
        out: Dict[str, Optional[int]] = {}
        for t in self.tensors.values():
            vs = [p.version for p in t.parts]
            out[t.name] = None if not vs or None in vs else min(v for v in vs if v is not None)
        return out

    # -- push ---------------------------------------------------------------------

    def prepare_push(self, grads: Mapping[str, ArrayLike], scale: float = 1.0,
                     versions: Optional[Mapping[str, int]] = None,
                     part_versions: Optional[Mapping[str, int]] = None,
                     nonfinite: Optional[str] = None) -> Optional[PushBatch]:
        """Validate and encode one push of 'grads' (name -> array of the tensor's size)
        without changing anything: returns the PushBatch to commit(), or None when the step
        holds NaN/Inf and 'nonfinite' (default self.nonfinite) is "skip". Raises
        SchemaError (unknown name, wrong size) or NonFiniteGradient ("raise") before
        anything changed. VERSION per partition: part_versions[key], else versions[name],
        else the partition's version of the last pull."""
        self.layout()
        nonfinite = nonfinite or self.nonfinite
        flats: List[Tuple[ModelTensor, np.ndarray]] = []
        for name, g in grads.items():
            t = self._tensor(name)
            flat = codec.as_f32(g)
            if flat.size != t.elements:
                raise SchemaError("gradient of %s has %d elements; the tensor has %d"
                                  % (name, flat.size, t.elements), name)
            flats.append((t, flat))
        if nonfinite != "send":
            bad = [t.name for t, flat in flats if not np.isfinite(flat).all()]
            if bad:
                if nonfinite == "skip":
                    return None
                raise NonFiniteGradient(bad)
        lossy = self.push_format != "F32"
        cmds: List[Tuple[Partition, List[Any]]] = []
        seqs: List[Tuple[Partition, int]] = []
        resid: Dict[str, np.ndarray] = {}
        nbytes = 0
        for t, flat in flats:
            fb = None
            if lossy:
                fb = codec.ErrorFeedback(0)
                fb.resid = (t.feedback.resid + flat if t.feedback is not None
                            else flat.astype(np.float32, copy=True))
                resid[t.name] = fb.resid
            for p in t.parts:
                if fb is not None:
                    k = codec.topk_count(p.elements, self.topk_ratio)
                    blob = fb.encode(self.push_format, None, p.offset, p.offset + p.elements,
                                     add=False, topk=k)
                else:
                    blob = flat[p.offset:p.offset + p.elements].tobytes()
                seq = (p.seq or self._seq_base) + 1
                seqs.append((p, seq))
                if part_versions is not None and p.key in part_versions:
                    v: Optional[int] = part_versions[p.key]
                elif versions is not None and t.name in versions:
                    v = versions[t.name]
                else:
                    v = p.version
                args = push_args(p.key, blob, self.push_format,
                                 version=v if self.send_version else None,
                                 id=(self.client_id, seq), scale=scale)
                cmds.append((p, args))
                nbytes += len(blob)
        return PushBatch(cmds, seqs, resid, nbytes)

    def commit(self, batch: PushBatch) -> None:
        """Take the push 'batch' (its seqs and residuals) as made. Call it inside
        deferred_interrupts() together with queueing or sending the commands."""
        for p, seq in batch.seqs:
            p.seq = seq
        for name, r in batch.resid.items():
            t = self.tensors[name]
            if t.feedback is None:
                t.feedback = codec.ErrorFeedback(0)
            t.feedback.resid = r
        self.stats["bytes_sent"] += batch.nbytes

    def push(self, grads: Mapping[str, ArrayLike], scale: float = 1.0,
             versions: Optional[Mapping[str, int]] = None,
             nonfinite: Optional[str] = None) -> List[int]:
        """Push one gradient per named tensor (arrays of the tensor's size), each partition
        in 'push_format' with error feedback, an exactly-once ID and the VERSION of the last
        pull (or 'versions'). All or nothing: everything is validated and encoded first (see
        prepare_push), then queued whole, with Ctrl-C held back meanwhile. With window > 1
        the push is queued and [] returned until the window is full; otherwise it is sent
        and the new partition versions returned (-1 for a partition refused as STALE, which
        libps counts and drops too). A step with NaN/Inf raises NonFiniteGradient
        (nonfinite="raise", the default), or is skipped, counted in
        stats["nonfinite_steps"] and answered [] ("skip")."""
        batch = self.prepare_push(grads, scale, versions, nonfinite=nonfinite)
        if batch is None:
            self.stats["nonfinite_steps"] += 1
            return []
        with deferred_interrupts():
            self.commit(batch)
            self._pending = self._pending + batch.cmds
            self._pending_pushes += 1
            if self._pending_pushes >= self.window:
                return self.flush()
        return []

    def push_results(self, cmds: List[Tuple[Partition, List[Any]]], replies: Sequence[Any]
                     ) -> List[int]:
        """The versions of push replies (-1 for STALE, counted); raises the first other
        error after all were read."""
        out: List[int] = []
        first_err: Optional[PSError] = None
        for (p, _), rep in zip(cmds, replies):
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

    def flush(self) -> List[int]:
        """Send the queued pushes in one pipeline and return their versions in order (-1 for
        a STALE refusal). Other errors raise PSError after every reply was read. The queue
        is emptied first: whatever happens, nothing of it is sent again later."""
        with deferred_interrupts():
            cmds, self._pending, self._pending_pushes = self._pending, [], 0
            if not cmds:
                return []
            return self.push_results(cmds, self._run(cmds))

    def discard(self) -> int:
        """Drop the queued (unsent) pushes; returns how many partition pushes were dropped.
        Their residuals stay taken (as for a push the server refused)."""
        n = len(self._pending)
        self._pending, self._pending_pushes = [], 0
        return n

    # -- rows (embedding tables) ----------------------------------------------------

    def _rows(self, t: ModelTensor, rows: ArrayLike) -> np.ndarray:
        r = check_ids(rows, "rows of %s" % t.name, limit=t.shape[0])
        return r.astype(np.int64)

    def pull_rows(self, name: str, rows: ArrayLike) -> np.ndarray:
        """Rows 'rows' of tensor 'name' (in that order, repeats allowed) with PS.PULL ROWS on
        the partitions that hold them, one pipeline: shape (len(rows),) + shape[1:]."""
        self.flush()
        t = self._tensor(name)
        r = self._rows(t, rows)
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
        ROWS (F32, exactly-once IDs, VERSION of the last pull), sent at once. All or
        nothing as push()."""
        t = self._tensor(name)
        r = self._rows(t, rows)
        g = codec.as_f32(grad)
        row_elems = t.elements // t.shape[0]
        if g.size != len(r) * row_elems:
            raise SchemaError("row gradient of %s has %d elements; %d rows need %d"
                              % (name, g.size, len(r), len(r) * row_elems), name)
        if self.nonfinite != "send" and not np.isfinite(g).all():
            if self.nonfinite == "skip":
                self.stats["nonfinite_steps"] += 1
                return []
            raise NonFiniteGradient([name])
        g = g.reshape(len(r), -1)
        starts = np.array([p.first_row for p in t.parts])
        which = np.searchsorted(starts, r, side="right") - 1
        cmds, seqs = [], []
        for i, local in rows_of(self, name, r).items():
            p = t.parts[i]
            seq = (p.seq or self._seq_base) + 1
            seqs.append((p, seq))
            args = push_args(p.key, g[which == i].tobytes(), "F32", rows=local,
                             version=p.version if self.send_version else None,
                             id=(self.client_id, seq), scale=scale)
            cmds.append((p, args))
        with deferred_interrupts():
            self.commit(PushBatch(cmds, seqs, {}, 0))
            self._pending = self._pending + cmds
            return self.flush()

    def info(self, name: str) -> List[Dict[str, Any]]:
        """PS.INFO of each partition of tensor 'name'."""
        self.layout()
        cmds = [(p, ["PS.INFO", p.key]) for p in self._tensor(name).parts]
        out = []
        for rep in self._run(cmds):
            if isinstance(rep, PSError):
                raise rep
            out.append(_info_dict(rep))
        return out

    def config_cmds(self, names: Optional[Sequence[str]] = None, **params: Any
                    ) -> List[Tuple[Partition, List[Any]]]:
        """The PS.CONFIG commands setting 'params' on every partition of 'names' (all)."""
        self.layout()
        extra: List[Any] = []
        for k, v in params.items():
            extra += [k.upper(), v.upper() if isinstance(v, str) else _num(v)]
        return [(p, ["PS.CONFIG", p.key] + extra)
                for n in (names or self.tensors) for p in self._tensor(n).parts]

    def config(self, names: Optional[Sequence[str]] = None, **params: Any) -> None:
        """PS.CONFIG every partition of every tensor (or of 'names'), e.g. lr=0.01."""
        for rep in self._run(self.config_cmds(names, **params)):
            if isinstance(rep, PSError):
                raise rep

    def _checked_f32(self, name: str, v: ArrayLike, what: str):
        """(tensor, v as flat F32) after checking v has the tensor's size and is finite;
        'what' names v in the SchemaError ("data", "values")."""
        t = self._tensor(name)
        flat = codec.as_f32(v)
        if flat.size != t.elements:
            raise SchemaError("%s of %s: %d elements; the tensor has %d"
                              % (what, name, flat.size, t.elements), name)
        if not np.isfinite(flat).all():
            raise SchemaError("%s of %s: NaN or Inf" % (what, name), name)
        return t, flat

    def set_values(self, values: Mapping[str, ArrayLike]) -> List[int]:
        """PS.SET every partition of the tensors in 'values' (name -> array of the tensor's
        size, F32), one pipeline, optimizer state kept; everything is checked before
        anything is sent. Returns the new partition versions (the pull versions too)."""
        self.layout()
        flats = []
        for name, v in values.items():
            flats.append(self._checked_f32(name, v, "values"))
        cmds = [(p, ["PS.SET", p.key, flat[p.offset:p.offset + p.elements].tobytes()])
                for t, flat in flats for p in t.parts]
        with deferred_interrupts():
            reps = self._run(cmds)
        out = []
        for (p, _), rep in zip(cmds, reps):
            if isinstance(rep, PSError):
                raise PSError(rep.code, "PS.SET %s: %s" % (p.key, rep.message), p.key)
            p.version = int(rep)
            out.append(int(rep))
        return out

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
