"""PyTorch on redis-ps: PSOptimizer, a torch.optim.Optimizer whose step runs on the server.

    import torch, redis_ps
    from redis_ps.torch import PSOptimizer
    net = torch.nn.Sequential(torch.nn.Linear(784, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    opt = PSOptimizer(net, redis_ps.connect("127.0.0.1:6379"), "mnist", optimizer="adam", lr=1e-3)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1000, gamma=0.5)
    for x, y in batches:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        opt.step()            # push the gradients, get the server's parameters
        sched.step()          # a new lr reaches the server (PS.CONFIG) at the next step
    opt.synchronize()         # the latest parameters in net (overlap leaves them a step behind)

Each parameter is a Model tensor named after named_parameters() ("0.weight", ...) and
partitioned like libps, so C workers (ps-train, libps) can share the job. See python/README.md
for the semantics (overlap, all-or-nothing steps, checkpoints, errors).

ModulePS is the lower-level adapter (explicit pull()/push(), sparse embedding rows), kept for
code that drives the protocol itself; push_embedding()/pull_embedding() move a torch
nn.Embedding's rows to and from a sharded redis_ps.Embedding table by ids.
"""

from __future__ import annotations

import concurrent.futures
import math
import time
import warnings
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from .conn import Client
from .guards import check_ids, deferred_interrupts
from .model import DEFAULT_PARTITION_BYTES, Model
from .embed import Embedding
from .errors import PSError, SchemaError

_NP_DTYPES = {torch.float32: np.float32, torch.float64: np.float64, torch.float16: np.float16}


def _shape(p: torch.Tensor) -> tuple:
    return tuple(p.shape) if p.dim() > 0 else (1,)


# ------------------------------------------------------------------------- PSOptimizer

# torch optimizer name -> server OPTIM, with the torch keywords each takes.
_KINDS = ("sgd", "adam", "adamw", "adagrad", "rmsprop")


def _server_optim(kind: str, g: Mapping[str, Any]) -> str:
    if kind == "sgd":
        if g["momentum"] == 0:
            if g["nesterov"]:
                raise ValueError("nesterov needs momentum > 0 (as torch.optim.SGD)")
            return "SGD"
        return "NESTEROV" if g["nesterov"] else "MOMENTUM"
    return kind.upper()


def _hyper(kind: str, g: Mapping[str, Any]) -> Dict[str, float]:
    """The PS.CONFIG-able hyper-parameters of param group 'g', checked (ValueError names
    the rule, before anything is sent)."""
    lr = float(g["lr"])
    if not math.isfinite(lr) or lr < 0:
        raise ValueError("lr must be a finite number >= 0, got %r" % g["lr"])
    wd = float(g["weight_decay"])
    if not math.isfinite(wd) or wd < 0:
        raise ValueError("weight_decay must be a finite number >= 0, got %r" % g["weight_decay"])
    h: Dict[str, float] = {"LR": lr, "WD": wd}
    mn = float(g.get("max_norm") or 0.0)
    if not math.isfinite(mn) or mn < 0:
        raise ValueError("max_norm must be >= 0 (0: no clipping), got %r" % g["max_norm"])
    h["CLIPNORM"] = mn
    if kind == "sgd" and g["momentum"] != 0:
        m = float(g["momentum"])
        if not 0 <= m < 1:
            raise ValueError("momentum must be in [0, 1), got %r" % m)
        h["MOMENTUM"] = m
    if kind in ("adam", "adamw"):
        b1, b2 = (float(b) for b in g["betas"])
        if not (0 <= b1 < 1 and 0 <= b2 < 1):
            raise ValueError("betas must be in [0, 1), got %r" % (g["betas"],))
        h["BETA1"], h["BETA2"] = b1, b2
    if kind == "rmsprop":
        a = float(g["alpha"])
        if not 0 <= a < 1:
            raise ValueError("alpha must be in [0, 1), got %r" % a)
        h["BETA2"] = a
    if kind in ("adam", "adamw", "adagrad", "rmsprop"):
        e = float(g["eps"])
        if not (math.isfinite(e) and e > 0):
            raise ValueError("eps must be > 0, got %r" % g["eps"])
        h["EPS"] = e
    return h


class _Buf:
    """One parameter's second copy for overlapped pulls: a tensor the pull decodes into
    and its numpy view (float32/64/16 CPU), or a float32 staging array copied in at swap
    (CUDA: pinned; bfloat16)."""

    def __init__(self, p: torch.Tensor):
        self.swap = p.device.type == "cpu" and p.dtype in _NP_DTYPES and p.is_contiguous()
        if self.swap:
            self.t = torch.empty_like(p.detach(), memory_format=torch.contiguous_format)
            self.np = self.t.numpy().reshape(-1)
        else:
            pin = p.device.type == "cuda"
            self.t = torch.empty(p.numel(), dtype=torch.float32, pin_memory=pin)
            self.np = self.t.numpy()


class PSOptimizer(torch.optim.Optimizer):
    """A torch.optim.Optimizer whose update runs on redis-ps.

    'params' is the nn.Module (preferred: its parameter and buffer names become the job's
    tensor names) or an iterable of parameters or param-group dicts as for any torch
    optimizer (then pass module= to name them, else they are named "param.0", ... in
    order). 'optimizer' is "sgd" (momentum, nesterov), "adam", "adamw", "adagrad" or
    "rmsprop" (alpha), with torch's keywords and defaults; weight_decay is torch's (L2,
    decoupled for adamw), max_norm clips each pushed partition's gradient (CLIPNORM).

    Construction checks the job (create=True creates what is missing from the module's
    current values, NX, so every worker may do it and the first one wins; a job of another
    architecture, partitioning or optimizer raises SchemaError naming the tensor, a key of
    another type WrongTypeError, both before anything is written) and pulls the server's
    parameters into the module.

    step() pushes every parameter's gradient (all or nothing: validated, NaN-checked and
    encoded for the whole model before anything is sent; a Ctrl-C is held back until the
    step is handed over whole) and brings the server's parameters back. The param groups'
    lr (and momentum, betas, eps, weight_decay, alpha, max_norm) are sent with PS.CONFIG
    when they change, so torch.optim.lr_scheduler works. With overlap=True (default) the
    push and the next pull run in a background thread while the caller computes the next
    gradient, as ps-train --overlap: the gradient of step k is computed from the parameters
    pulled after step k-2's push (one step behind its own updates), and each push names the
    versions it was computed from. synchronize() waits and brings the latest parameters.

    nonfinite: "raise" (default: NonFiniteGradient, nothing sent), "skip" (the step is
    skipped and counted in stats["skipped_steps"]; step() returns None unless a closure
    gave a loss, as GradScaler users expect) or "send" (the server refuses each non-finite
    partition on its own: a partial step).

    buffers: None (buffers stay local; state_dict/load_state_dict/load_pretrained still
    carry them), "push" (this worker writes its floating-point buffers, e.g. BatchNorm's
    running stats, to the server at every step: one writer, like DDP's rank 0) or "pull"
    (this worker reads them at every step)."""

    def __init__(self, params: Union[torch.nn.Module, Iterable[Any]], client: Client, job: str,
                 optimizer: str = "sgd", lr: float = 0.01, momentum: float = 0.0,
                 nesterov: bool = False, betas: Tuple[float, float] = (0.9, 0.999),
                 eps: Optional[float] = None, alpha: float = 0.99, weight_decay: Optional[float] = None,
                 max_norm: float = 0.0, *, module: Optional[torch.nn.Module] = None,
                 create: bool = True, overlap: bool = True, push_format: str = "F32",
                 pull_format: str = "F32", topk_ratio: float = 0.01,
                 partition_bytes: int = DEFAULT_PARTITION_BYTES, client_id: Optional[str] = None,
                 nonfinite: str = "raise", buffers: Optional[str] = None,
                 max_staleness: Optional[int] = None, staleness_policy: Optional[str] = None,
                 retries: int = 3):
        kind = str(optimizer).lower()
        if kind not in _KINDS:
            raise ValueError("optimizer must be one of %s, got %r" % (", ".join(_KINDS), optimizer))
        if buffers not in (None, "push", "pull"):
            raise ValueError('buffers must be None, "push" or "pull"')
        if isinstance(params, torch.nn.Module):
            module, params = params, list(params.parameters())
        if eps is None:
            eps = 1e-10 if kind == "adagrad" else 1e-8
        if weight_decay is None:
            weight_decay = 0.01 if kind == "adamw" else 0.0
        defaults = dict(lr=lr, momentum=momentum, nesterov=nesterov, betas=tuple(betas), eps=eps,
                        alpha=alpha, weight_decay=weight_decay, max_norm=max_norm)
        super().__init__(params, defaults)
        self.kind = kind
        self.overlap = bool(overlap)
        self.module = module
        self.buffers_mode = buffers
        # names: from the module, else by position
        names_of: Dict[int, str] = {}
        if module is not None:
            names_of = {id(p): n for n, p in module.named_parameters()}
        self.names: List[List[str]] = []
        self.params_by_name: Dict[str, torch.Tensor] = {}
        i = 0
        for g in self.param_groups:
            gn = []
            for p in g["params"]:
                if module is not None and id(p) not in names_of:
                    raise ValueError("a parameter given is not a parameter of 'module'")
                n = names_of.get(id(p), "param.%d" % i)
                i += 1
                gn.append(n)
                self.params_by_name[n] = p
                if p.dtype == torch.float64:
                    warnings.warn("redis_ps: parameter %s is float64; the server keeps float32, "
                                  "so its values are rounded to float32 on every pull "
                                  "(precision lost)" % n, stacklevel=2)
                elif not p.is_floating_point():
                    raise SchemaError("parameter %s has dtype %s: only floating-point "
                                      "parameters can be trained" % (n, p.dtype), n)
            self.names.append(gn)
        self.model = Model(client, job, partition_bytes=partition_bytes, push_format=push_format,
                           topk_ratio=topk_ratio, pull_format=pull_format, client_id=client_id,
                           retries=retries, nonfinite=nonfinite)
        for n, p in self.params_by_name.items():
            self.model.add_tensor(n, _shape(p))
        self.model.layout()
        # floating-point buffers: a second Model, tensor names "@<buffer name>"
        self.buffers: Dict[str, torch.Tensor] = {}
        if module is not None:
            self.buffers = {n: b for n, b in module.named_buffers()
                            if b is not None and b.is_floating_point() and b.numel() > 0}
        self.bmodel: Optional[Model] = None
        if self.buffers:
            self.bmodel = Model(client, job, partition_bytes=partition_bytes, client_id=client_id,
                                retries=retries)
            for n, b in self.buffers.items():
                self.bmodel.add_tensor("@" + n, _shape(b))
            self.bmodel.layout()
        # staleness_sum / pushes: mean versions other pushes applied between the pull a
        # gradient was computed from and its push (per partition push), as ps-train reports
        self.stats = {"steps": 0, "skipped_steps": 0, "step_s": 0.0, "wait_s": 0.0,
                      "config_sent": 0, "pushes": 0, "staleness_sum": 0}
        self._sent: List[Dict[str, float]] = [{} for _ in self.param_groups]
        self._pool: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._inflight: Optional[Tuple[concurrent.futures.Future, Dict[str, Any]]] = None
        self._bufs: Dict[str, _Buf] = {}
        self._staged = False
        self._attach(create, max_staleness, staleness_policy)

    # -- attach ---------------------------------------------------------------------

    def _optims(self) -> Dict[str, str]:
        return {n: _server_optim(self.kind, g).lower()
                for g, gn in zip(self.param_groups, self.names) for n in gn}

    def _attach(self, create: bool, max_staleness: Optional[int], policy: Optional[str]) -> None:
        m = self.model
        optims = self._optim0 = self._optims()
        infos = m.check(optimizer=optims)
        bexists: Dict[str, Optional[Dict[str, Any]]] = {}
        if self.bmodel is not None:
            bexists = self.bmodel.check()
        missing = [k for k, v in infos.items() if v is None]
        if missing and not create:
            raise SchemaError("job %s is missing keys %s (create=True creates them)"
                              % (m.job, ", ".join(missing[:4]) + (" ..." if len(missing) > 4 else "")))
        for gi, (g, gn) in enumerate(zip(self.param_groups, self.names)):
            h = _hyper(self.kind, g)
            opts = ["OPTIM", _server_optim(self.kind, g)]
            for k, v in h.items():
                opts += [k, repr(float(v))]
            if max_staleness is not None:
                opts += ["MAXSTALENESS", str(int(max_staleness))]
            if policy is not None:
                opts += ["POLICY", str(policy).upper()]
            todo = [n for n in gn if any(infos[p.key] is None for p in m.tensors[n].parts)]
            if todo:
                data = {n: self._host(self.params_by_name[n]) for n in todo}
                m.create(" ".join(opts), nx=True, data=data, names=todo, checked=True)
            # what the server has now, to send only changes (PS.CONFIG) from step() on
            first = m.tensors[gn[0]].parts[0].key if gn else None
            info = infos.get(first) if first else None
            self._sent[gi] = ({k: float(info.get(k.lower(), float("nan"))) for k in h}
                              if info else dict(h))
        if self.bmodel is not None:
            todo = [n for n in self.buffers
                    if any(bexists[p.key] is None for p in self.bmodel.tensors["@" + n].parts)]
            if todo:
                self.bmodel.create("OPTIM SGD LR 0", nx=True, names=["@" + n for n in todo],
                                   data={"@" + n: self._host(self.buffers[n]) for n in todo},
                                   checked=True)
        self.pull()

    @staticmethod
    def _host(t: torch.Tensor) -> np.ndarray:
        """'t' as a float32 numpy array on the host (no copy for a contiguous CPU float32)."""
        t = t.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        if t.dtype != torch.float32:
            t = t.float()
        return t.contiguous().numpy()

    # -- the step -------------------------------------------------------------------

    def _grads(self) -> Dict[str, np.ndarray]:
        out: Dict[str, np.ndarray] = {}
        cuda = []
        for n, p in self.params_by_name.items():
            g = p.grad
            if g is None:
                continue
            if g.is_sparse:
                raise SchemaError("parameter %s has a sparse gradient: PSOptimizer pushes "
                                  "dense gradients; use a redis_ps.Embedding table "
                                  "(push_embedding) or ModulePS.push_rows for sparse "
                                  "embeddings" % n, n)
            if g.device.type == "cuda":
                b = self._bufs.get("grad:" + n)
                if b is None:
                    b = self._bufs["grad:" + n] = _Buf(g)
                b.t.copy_(g.detach().reshape(-1), non_blocking=True)
                cuda.append(n)
                out[n] = b.np
            else:
                out[n] = self._host(g)
        if cuda:
            torch.cuda.current_stream().synchronize()
        return out

    def _config_cmds(self) -> Tuple[List[Tuple[Any, List[Any]]], List[Tuple[int, Dict[str, float]]]]:
        cmds: List[Tuple[Any, List[Any]]] = []
        changed = []
        for gi, (g, gn) in enumerate(zip(self.param_groups, self.names)):
            h = _hyper(self.kind, g)
            if gn and _server_optim(self.kind, g).lower() != self._optim0[gn[0]]:
                raise ValueError("a change of momentum/nesterov turns %s into another server "
                                 "optimizer, which cannot change" % self.kind)
            diff = {k: v for k, v in h.items() if self._sent[gi].get(k) != v}
            if diff and gn:
                cmds += self.model.config_cmds(gn, **{k.lower(): v for k, v in diff.items()})
                changed.append((gi, diff))
        return cmds, changed

    def step(self, closure: Optional[Callable[[], Any]] = None) -> Any:
        """Push the gradients (one step, all or nothing) and bring the server's parameters
        into the module (with overlap: those pulled during the previous step). Returns the
        closure's loss (or None)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        t0 = time.perf_counter()
        self._wait()
        grads = self._grads()
        batch = self.model.prepare_push(grads, part_versions=self._in_use)
        cfg, changed = self._config_cmds()
        bcmds: List[Tuple[Any, List[Any]]] = []
        if self.bmodel is not None and self.buffers_mode == "push":
            bcmds = self._buffer_set_cmds()
        with deferred_interrupts():
            if batch is None:
                self.stats["skipped_steps"] += 1
                push_cmds: List[Tuple[Any, List[Any]]] = []
            else:
                self.model.commit(batch)
                push_cmds = batch.cmds
                self.stats["steps"] += 1
            for gi, diff in changed:
                self._sent[gi].update(diff)
                self.stats["config_sent"] += 1
            self._exchange(cfg, push_cmds, bcmds)
        self.stats["step_s"] += time.perf_counter() - t0
        return loss

    def _buffer_set_cmds(self) -> List[Tuple[Any, List[Any]]]:
        assert self.bmodel is not None
        cmds = []
        for n, b in self.buffers.items():
            flat = self._host(b).reshape(-1)
            for p in self.bmodel.tensors["@" + n].parts:
                cmds.append((p, ["PS.SET", p.key, flat[p.offset:p.offset + p.elements].tobytes()]))
        return cmds

    def _exchange(self, cfg: List[Tuple[Any, List[Any]]], push: List[Tuple[Any, List[Any]]],
                  bcmds: List[Tuple[Any, List[Any]]]) -> None:
        """Send config, push, buffer and pull commands in one pipeline: now (no overlap,
        decoding into the parameters) or in the background (decoding into the second copy,
        swapped in at the next step)."""
        m = self.model
        pull = m.pull_cmds()
        bpull = (self.bmodel.pull_cmds() if self.bmodel is not None and self.buffers_mode == "pull"
                 else [])
        job = {"cfg": cfg, "push": push, "bcmds": bcmds, "pull": pull, "bpull": bpull,
               "used": dict(self._in_use)}
        if not self.overlap:
            dst = {n: self._param_np(n) for n in self.params_by_name}
            res = self._io(job, dst)
            self._finish(job, res, direct=True)
            return
        if self._staged:                      # the previous pull: swap it in
            self._swap()
        dst = {n: self._buf(n).np for n in self.params_by_name}
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="redis-ps")
        self._inflight = (self._pool.submit(self._io, job, dst), job)

    def _param_np(self, n: str) -> np.ndarray:
        p = self.params_by_name[n]
        if p.device.type == "cpu" and p.dtype in _NP_DTYPES and p.is_contiguous():
            return p.detach().numpy().reshape(-1)
        return self._buf(n).np                     # decoded here, copied in by _finish

    def _buf(self, n: str) -> _Buf:
        b = self._bufs.get(n)
        if b is None:
            b = self._bufs[n] = _Buf(self.params_by_name[n])
        return b

    def _io(self, job: Dict[str, Any], dst: Mapping[str, np.ndarray]) -> Dict[str, Any]:
        """The round trip (thread-safe: touches no optimizer state)."""
        m = self.model
        cmds = job["cfg"] + job["push"] + job["bcmds"] + job["pull"] + job["bpull"]
        ps = m.pull_sinks(job["pull"], dst)
        sinks = None if ps is None else \
            [None] * (len(cmds) - len(job["pull"]) - len(job["bpull"])) + ps + [None] * len(job["bpull"])
        replies = m._run(cmds, sinks=sinks)
        a = len(job["cfg"])
        b = a + len(job["push"])
        c = b + len(job["bcmds"])
        d = c + len(job["pull"])
        out: Dict[str, Any] = {"cfg": replies[:a], "push": replies[b - len(job["push"]):b],
                               "bset": replies[b:c]}
        out["versions"] = m.decode_pull(job["pull"], replies[c:d], dst)
        out["nbytes"] = sum(len(r[1]) for r in replies[c:d])
        if job["bpull"]:
            assert self.bmodel is not None
            out["bvals"] = [self.bmodel._part_values(p, r) for (p, _), r in
                            zip(job["bpull"], replies[d:])]
        return out

    def _finish(self, job: Dict[str, Any], res: Dict[str, Any], direct: bool) -> None:
        """Account a completed round trip; raise its first error (after accounting)."""
        m = self.model
        m.stats["pulls"] += len(job["pull"])
        m.stats["bytes_received"] += res["nbytes"]
        self._in_use_next = {p.key: v for (p, _), v in zip(job["pull"], res["versions"])}
        for (p, _), v in zip(job["pull"], res["versions"]):
            p.version = v
        if direct:
            self._in_use = self._in_use_next
            self._copy_in(direct=True)
            if job["bpull"]:
                self._buffers_in(job["bpull"], res["bvals"])
        else:
            self._staged = True
            self._staged_buffers = (job["bpull"], res.get("bvals"))
        errs = [r for r in list(res["cfg"]) + list(res["bset"]) if isinstance(r, PSError)]
        pushed = m.push_results(job["push"], res["push"])
        used = job.get("used") or {}
        for (p, _), v in zip(job["push"], pushed):
            if v >= 0 and p.key in used:
                self.stats["staleness_sum"] += v - 1 - used[p.key]
                self.stats["pushes"] += 1
        if errs:
            raise errs[0]

    def _copy_in(self, direct: bool) -> None:
        """Copy staged float32 values into parameters that cannot take a pointer swap
        (CUDA, bfloat16, non-contiguous)."""
        with torch.no_grad():
            for n, p in self.params_by_name.items():
                b = self._bufs.get(n)
                if b is None or b.swap:
                    continue
                p.copy_(b.t.reshape(p.shape).to(device=p.device, dtype=p.dtype,
                                                non_blocking=True))

    def _buffers_in(self, cmds: List[Tuple[Any, List[Any]]], vals: List[np.ndarray]) -> None:
        with torch.no_grad():
            for (p, _), v in zip(cmds, vals):
                b = self.buffers[p.tensor[1:]]
                flat = b.view(-1)
                flat[p.offset:p.offset + p.elements].copy_(torch.from_numpy(np.array(v)))

    def _swap(self) -> None:
        """Put the staged pull into the parameters: a pointer swap where possible."""
        with torch.no_grad():
            for n, p in self.params_by_name.items():
                b = self._bufs[n]
                if b.swap:
                    old = p.data
                    p.data = b.t
                    b.t = old
                    b.np = old.numpy().reshape(-1)
        self._copy_in(direct=False)
        if getattr(self, "_staged_buffers", None) and self._staged_buffers[0]:
            self._buffers_in(*self._staged_buffers)
        self._in_use = self._in_use_next
        self._staged = False

    def _wait(self) -> None:
        """Wait for the round trip in flight (if any) and account it."""
        if self._inflight is None:
            return
        fut, job = self._inflight
        t0 = time.perf_counter()
        try:
            res = fut.result()
        except BaseException as e:
            if isinstance(e, KeyboardInterrupt):
                raise                      # still in flight; waited for again next time
            self._inflight = None
            raise
        self.stats["wait_s"] += time.perf_counter() - t0
        self._inflight = None
        self._finish(job, res, direct=False)

    def synchronize(self) -> None:
        """Wait for the step in flight and bring the server's latest parameters into the
        module (what evaluation and checkpoints should see)."""
        self._wait()
        self._staged = False
        self._send_config()
        self.pull()

    def pull(self) -> List[int]:
        """Pull every parameter (and, if kept on the server, buffer) into the module now."""
        self._wait()
        self._staged = False
        dst = {n: self._param_np(n) for n in self.params_by_name}
        versions = self.model.pull_into(dst)
        self._copy_in(direct=True)
        self._in_use = {p.key: v for p, v in zip(self.model.partitions(), versions)}
        return versions

    @property
    def versions(self) -> Dict[str, int]:
        """Partition key -> the version of the values the module holds (what the next push
        says its gradient was computed from)."""
        return dict(self._in_use)

    def pull_buffers(self) -> None:
        """Bring the module's floating-point buffers from the server."""
        if self.bmodel is None:
            return
        vals = self.bmodel.pull()
        with torch.no_grad():
            for n, b in self.buffers.items():
                b.copy_(torch.from_numpy(np.array(vals["@" + n])).reshape(b.shape))

    def push_buffers(self) -> None:
        """Write the module's floating-point buffers to the server (PS.SET)."""
        if self.bmodel is not None:
            self.bmodel.set_values({"@" + n: self._host(b) for n, b in self.buffers.items()})

    def close(self) -> None:
        """Finish the step in flight and stop the background thread."""
        try:
            self._wait()
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None

    # -- checkpoints ----------------------------------------------------------------

    def state_dict(self) -> Dict[str, Any]:
        """torch's optimizer state dict (param_groups: lr, betas, ... as torch writes them)
        plus "redis_ps": the job, the server's parameter values (float32 tensors, bit-exact,
        after synchronize()), their partition versions and the module's buffers. The server's
        optimizer state (moments) is not in it: snapshot()/rollback() keep that server-side."""
        self.synchronize()
        sd = super().state_dict()
        vals = self.model.pull()
        sd["redis_ps"] = {
            "job": self.model.job, "optimizer": self.kind,
            "partition_bytes": self.model.partition_bytes,
            "values": {n: torch.from_numpy(np.array(v, dtype=np.float32, copy=True))
                       for n, v in vals.items()},
            "versions": {p.key: p.version for p in self.model.partitions()},
            "buffers": ({n: b.detach().cpu().clone() for n, b in self.module.named_buffers()}
                        if self.module is not None else {}),
        }
        return sd

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Restore a state_dict(): param groups (their lr etc. reach the server now), the
        parameter values (PS.SET on every partition, optimizer moments on the server kept)
        and buffers; then pull, so module and server hold the checkpoint's values bit for
        bit."""
        ps = state_dict.get("redis_ps")
        plain = {k: v for k, v in state_dict.items() if k != "redis_ps"}
        if ps is not None:
            self._check_names(ps["values"], "checkpoint")
        self._wait()
        super().load_state_dict(plain)
        if ps is not None:
            self.model.set_values({n: self._host(v) for n, v in ps["values"].items()})
            self._load_buffers(ps.get("buffers", {}))
        self._send_config()
        self.pull()

    def load_pretrained(self, state: Union[torch.nn.Module, Mapping[str, torch.Tensor]],
                        strict: bool = True) -> None:
        """Write pretrained weights into the job in one call: 'state' is a module or a
        module state_dict (names as named_parameters()/named_buffers()). Every parameter
        tensor is PS.SET on all its partitions (checked before anything is sent: a missing,
        unexpected or mis-shaped name raises SchemaError when 'strict'), buffers are set
        locally and on the server, then the module pulls them."""
        if isinstance(state, torch.nn.Module):
            state = state.state_dict()
        params = {n: v for n, v in state.items() if n in self.params_by_name}
        if strict:
            self._check_names(params, "pretrained state")
            extra = [n for n in state if n not in self.params_by_name and
                     (self.module is None or n not in dict(self.module.named_buffers()))]
            if extra:
                raise SchemaError("pretrained state has names the module does not: %s"
                                  % ", ".join(extra[:8]), extra[0])
        self._wait()
        self.model.set_values({n: self._host(v) for n, v in params.items()})
        if self.module is not None:
            self._load_buffers({n: v for n, v in state.items()
                                if n in dict(self.module.named_buffers())})
        self.pull()

    def _check_names(self, values: Mapping[str, Any], what: str) -> None:
        missing = [n for n in self.params_by_name if n not in values]
        if missing:
            raise SchemaError("%s lacks parameters %s" % (what, ", ".join(missing[:8])),
                              missing[0])
        for n, v in values.items():
            if n in self.params_by_name and tuple(v.shape) != tuple(self.params_by_name[n].shape):
                raise SchemaError("%s: %s has shape %s; the parameter has %s"
                                  % (what, n, tuple(v.shape),
                                     tuple(self.params_by_name[n].shape)), n)

    def _load_buffers(self, bufs: Mapping[str, torch.Tensor]) -> None:
        if self.module is None or not bufs:
            return
        own = dict(self.module.named_buffers())
        with torch.no_grad():
            for n, v in bufs.items():
                if n in own and own[n] is not None:
                    own[n].copy_(v.to(own[n].device, own[n].dtype))
        self.push_buffers()

    def _send_config(self) -> None:
        cfg, changed = self._config_cmds()
        if cfg:
            for rep in self.model._run(cfg):
                if isinstance(rep, PSError):
                    raise rep
        for gi, diff in changed:
            self._sent[gi].update(diff)

    def snapshot(self, name: str) -> None:
        """PS.SNAPSHOT every partition (values and optimizer state, server-side)."""
        self._wait()
        self.model.snapshot(name)

    def rollback(self, name: str) -> None:
        """PS.ROLLBACK every partition to snapshot 'name', then pull."""
        self._wait()
        self.model.rollback(name)
        self.pull()

    def __del__(self) -> None:
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.shutdown(wait=False)


# ---------------------------------------------------------------------------- ModulePS

class ModulePS:
    """The parameters of 'module' as the tensors of job 'job' on redis-ps, with explicit
    pull()/push() (PSOptimizer does both in step()). Keywords go to Model
    (partition_bytes, push_format, topk_ratio, pull_format, window, client_id, ...)."""

    def __init__(self, r: Client, job: str, module: torch.nn.Module, **model_kw: Any):
        self.module = module
        self.params: Dict[str, torch.nn.Parameter] = dict(module.named_parameters())
        self.model = Model(r, job, **model_kw)
        for name, p in self.params.items():
            self.model.add_tensor(name, _shape(p))
            if p.dtype == torch.float64:
                warnings.warn("redis_ps: parameter %s is float64; the server keeps float32, "
                              "so its values are rounded to float32 on every pull "
                              "(precision lost)" % name, stacklevel=2)

    def create(self, opts: Union[str, Mapping[str, Any]] = "OPTIM SGD LR 0.01",
               nx: bool = True) -> int:
        """Create the job's keys from the module's current values with the PS.CREATE
        options 'opts' (optimizer and hyper-parameters, no INIT); NX by default, so every
        worker may call it and the first one wins. Returns keys created."""
        data = {n: p.detach().cpu().numpy() for n, p in self.params.items()}
        return self.model.create(opts, nx=nx, data=data)

    def pull(self, names: Optional[Sequence[str]] = None) -> Dict[str, Optional[int]]:
        """Copy the server's values into the module's parameters (decoded straight into
        their storage when they are contiguous CPU float tensors); returns the versions."""
        want = list(names or self.params)
        direct = {n: self.params[n].detach().numpy().reshape(-1) for n in want
                  if self.params[n].device.type == "cpu" and self.params[n].dtype in _NP_DTYPES
                  and self.params[n].is_contiguous()}
        if len(direct) == len(want):
            self.model.pull_into(direct, want)
            return self.model.versions
        vals = self.model.pull(want)
        with torch.no_grad():
            for name, v in vals.items():
                p = self.params[name]
                p.copy_(torch.from_numpy(np.array(v, copy=True)).reshape(p.shape))
        return self.model.versions

    def push(self, scale: float = 1.0) -> List[int]:
        """Push every parameter's dense .grad (parameters without a gradient, or with a
        sparse one, are skipped: see push_rows), all or nothing. Returns the partition
        versions (or [] while a window is filling)."""
        grads = {}
        for name, p in self.params.items():
            if p.grad is not None and not p.grad.is_sparse:
                grads[name] = p.grad.detach().cpu().numpy()
        return self.model.push(grads, scale=scale)

    def push_rows(self, name: str, scale: float = 1.0) -> List[int]:
        """Push the sparse gradient of embedding parameter 'name' (nn.Embedding(...,
        sparse=True)): only the rows it touched, with PS.PUSHGRAD ROWS."""
        g = self.params[name].grad
        if g is None:
            return []
        g = g.coalesce() if g.is_sparse else g.to_sparse(1).coalesce()
        rows = g.indices()[0].cpu().numpy()
        return self.model.push_rows(name, rows, g.values().cpu().numpy(), scale=scale)

    def pull_rows(self, name: str, rows: Union[torch.Tensor, Sequence[int]]) -> None:
        """Refresh rows 'rows' of embedding parameter 'name' from the server."""
        r = _id_array(rows, "rows of %s" % name, self.params[name].shape[0]).astype(np.int64)
        r = np.unique(r)
        vals = self.model.pull_rows(name, r)
        with torch.no_grad():
            self.params[name][torch.from_numpy(r)] = torch.from_numpy(vals)


def _id_array(ids: Any, what: str = "ids", limit: Optional[int] = None) -> np.ndarray:
    """Ids (a torch tensor, numpy array or sequence) as a flat uint64 numpy array; floats,
    negative ids (padding_idx -1) and ids out of range raise InvalidIds."""
    if isinstance(ids, torch.Tensor):
        if ids.is_floating_point() or ids.dtype == torch.bool:
            return check_ids(ids.detach().cpu().numpy(), what, limit)
        ids = ids.detach().cpu().numpy()
    return check_ids(ids, what, limit)


def pull_embedding(table: Embedding, module: torch.nn.Embedding, ids: Any) -> None:
    """Fill rows 0 .. len(ids)-1 of 'module' (an nn.Embedding used as the batch's local
    cache, at least len(ids) rows of table.dim) with the table's rows of 'ids': row i of
    the module stands for ids[i]."""
    a = _id_array(ids)
    vals = table.pull(a)
    with torch.no_grad():
        module.weight[:len(a)] = torch.from_numpy(vals)


def push_embedding(table: Embedding, module: torch.nn.Embedding, ids: Any = None,
                   **push_kw: Any) -> List[int]:
    """Push the gradient of 'module' (nn.Embedding, sparse=True or dense) to 'table' by ids:
    module row i is ids[i] (ids None: the row number is the id). Only the rows the gradient
    touched are sent; a sparse gradient's repeated rows are left for the server to sum (in
    order). Keywords go to Embedding.push (fmt, version, sum_duplicates). Returns the shard
    versions ([] without a gradient)."""
    g = module.weight.grad
    if g is None:
        return []
    if not g.is_sparse:
        g = g.to_sparse(1)
    # uncoalesced as autograd left it: the server sums repeated rows in this order
    rows = (g.indices() if g.is_coalesced() else g._indices())[0].cpu().numpy()
    vals = (g.values() if g.is_coalesced() else g._values()).detach().cpu().numpy()
    vals = vals.astype(np.float32)
    if ids is None:
        keys = rows.astype(np.uint64)
    else:
        keys = _id_array(ids)[rows]
    return table.push(keys, vals, **push_kw)


__all__ = ["PSOptimizer", "ModulePS", "pull_embedding", "push_embedding"]
