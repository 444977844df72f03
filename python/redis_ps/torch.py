"""PyTorch glue: keep a torch.nn.Module's parameters on redis-ps.

    ps = redis_ps.torch.ModulePS(redis_ps.connect(addr), "mnist", net, push_format="BF16")
    ps.create("OPTIM SGD LR 0.05")        # the module's current values, once per job
    for x, y in batches:
        ps.pull()                         # parameters <- server (versions remembered)
        net.zero_grad(); loss_fn(net(x), y).backward()
        ps.push()                         # gradients -> server (exactly-once, with VERSION)

Each parameter is a Model tensor named after named_parameters() ("fc1.weight", ...) and
partitioned like libps. A torch.nn.Embedding with sparse=True gradients pushes only the
rows it touched (push_rows); pull_rows() refreshes only the rows a batch needs.
push_embedding()/pull_embedding() do the same against a sharded Embedding table by ids.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import numpy as np
import torch

from .client import Client, Model
from .embed import Embedding


def _shape(p: torch.Tensor) -> tuple:
    return tuple(p.shape) if p.dim() > 0 else (1,)


class ModulePS:
    """The parameters of 'module' as the tensors of job 'job' on redis-ps. Keywords go to
    Model (partition_bytes, push_format, topk_ratio, pull_format, window, client_id, ...)."""

    def __init__(self, r: Client, job: str, module: torch.nn.Module, **model_kw: Any):
        self.module = module
        self.params: Dict[str, torch.nn.Parameter] = dict(module.named_parameters())
        self.model = Model(r, job, **model_kw)
        for name, p in self.params.items():
            self.model.add_tensor(name, _shape(p))

    def create(self, opts: Union[str, Mapping[str, Any]] = "OPTIM SGD LR 0.01",
               nx: bool = True) -> int:
        """Create the job's keys from the module's current values with the PS.CREATE
        options 'opts' (optimizer and hyper-parameters, no INIT); NX by default, so every
        worker may call it and the first one wins. Returns keys created."""
        data = {n: p.detach().cpu().numpy() for n, p in self.params.items()}
        return self.model.create(opts, nx=nx, data=data)

    def pull(self, names: Optional[Sequence[str]] = None) -> Dict[str, Optional[int]]:
        """Copy the server's values into the module's parameters; returns the versions."""
        vals = self.model.pull(names)
        with torch.no_grad():
            for name, v in vals.items():
                p = self.params[name]
                p.copy_(torch.from_numpy(np.array(v, copy=True)).reshape(p.shape))
        return self.model.versions

    def push(self, scale: float = 1.0) -> List[int]:
        """Push every parameter's dense .grad (parameters without a gradient, or with a
        sparse one, are skipped: see push_rows). Returns the partition versions (or [] while
        a window is filling)."""
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
        r = torch.as_tensor(rows).reshape(-1).unique().cpu().numpy()
        vals = self.model.pull_rows(name, r)
        with torch.no_grad():
            self.params[name][torch.from_numpy(r.astype(np.int64))] = torch.from_numpy(vals)


def _id_array(ids: Any) -> np.ndarray:
    """Ids (a torch tensor, numpy array or sequence) as a flat uint64 numpy array."""
    if isinstance(ids, torch.Tensor):
        ids = ids.detach().cpu().numpy()
    return np.asarray(ids).reshape(-1).astype(np.uint64)


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
