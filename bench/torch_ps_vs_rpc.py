#!/usr/bin/env python3
"""The same asynchronous parameter-server training two ways: redis-ps (examples/
torch_async_ps.py) and PyTorch RPC over TensorPipe (a parameter-server process owning the
model, workers calling it with rpc_sync). Same MLP, data shards, batch, learning rate,
worker count and epochs; prints samples/s and test accuracy of both, and one RESULT line.

    python3 bench/torch_ps_vs_rpc.py --workers 2 --epochs 1 [--limit 20000] [--repeat 3]

Each variant runs --repeat times, alternating (machine load hits both alike), and the run
with the median samples/s is reported.

Needs python3-torch (with torch.distributed.rpc), python3-redis, python3-numpy, build/ps.so.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import socket
import sys
import threading
import time
from typing import Dict, List

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))

import torch  # noqa: E402
import torch.distributed.rpc as rpc  # noqa: E402

import torch_async_ps as ex  # noqa: E402

# ---- the parameter server of the RPC variant (state lives in the PS process) ----------

_PS: Dict[str, object] = {}


def ps_get_params() -> List[torch.Tensor]:
    """RPC: the current parameters (copies, sent back over TensorPipe)."""
    with _PS["lock"]:
        return [p.detach().clone() for p in _PS["net"].parameters()]


def ps_apply_grads(grads: List[torch.Tensor]) -> int:
    """RPC: one SGD step with 'grads', applied as it arrives (asynchronous SGD, like a
    redis-ps push); returns the new version."""
    with _PS["lock"]:
        with torch.no_grad():
            for p, g in zip(_PS["net"].parameters(), grads):
                p.add_(g, alpha=-_PS["lr"])
        _PS["version"] += 1
        return _PS["version"]


def rpc_proc(rank: int, world: int, port: int, args: argparse.Namespace, q: "mp.Queue") -> None:
    """Rank 0 is the parameter server, ranks 1..N the workers."""
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    opts = rpc.TensorPipeRpcBackendOptions(init_method="tcp://127.0.0.1:%d" % port,
                                           num_worker_threads=max(4, world))
    if rank == 0:
        _PS.update(net=ex.make_net(args.hidden, args.seed), lr=args.lr, version=0,
                   lock=threading.Lock())
        rpc.init_rpc("ps", rank=0, world_size=world, rpc_backend_options=opts)
        rpc.shutdown()                      # waits for every worker to finish
        xt, yt = ex.load_fashion_mnist(False)
        acc, loss = ex.evaluate(_PS["net"], xt, yt)
        q.put(("ps", acc, loss))
        return
    rpc.init_rpc("w%d" % rank, rank=rank, world_size=world, rpc_backend_options=opts)
    x, y = ex.load_fashion_mnist(True, args.limit)
    x, y = x[rank - 1::args.workers], y[rank - 1::args.workers]
    net = ex.make_net(args.hidden, args.seed)
    rng = np.random.default_rng(args.seed + rank - 1)
    samples, start = 0, time.time()
    for _ in range(args.epochs):
        order = rng.permutation(len(x))
        for b in range(0, len(order) - args.batch + 1, args.batch):
            sel = order[b:b + args.batch]
            params = rpc.rpc_sync("ps", ps_get_params)
            with torch.no_grad():
                for p, v in zip(net.parameters(), params):
                    p.copy_(v)
            net.zero_grad()
            torch.nn.functional.cross_entropy(net(torch.from_numpy(x[sel])),
                                              torch.from_numpy(y[sel])).backward()
            rpc.rpc_sync("ps", ps_apply_grads, args=([p.grad for p in net.parameters()],))
            samples += len(sel)
    q.put(("w", samples, start, time.time()))
    rpc.shutdown()


def run_rpc(args: argparse.Namespace) -> Dict[str, float]:
    """The TensorPipe variant; returns its numbers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    world = args.workers + 1
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    t0 = time.time()
    procs = [ctx.Process(target=rpc_proc, args=(r, world, port, args, q)) for r in range(world)]
    for p in procs:
        p.start()
    msgs = [q.get(timeout=1800) for _ in procs]
    seconds = time.time() - t0
    for p in procs:
        p.join(60)
    samples = sum(m[1] for m in msgs if m[0] == "w")
    acc, loss = [(m[1], m[2]) for m in msgs if m[0] == "ps"][0]
    return {"test_acc": acc, "test_loss": loss, "samples": samples, "seconds": seconds,
            "samples_per_s": samples / seconds,
            "train_samples_per_s": samples / (max(m[3] for m in msgs if m[0] == "w")
                                              - min(m[2] for m in msgs if m[0] == "w"))}


def main() -> None:
    ap = ex.parser()
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs of each variant, alternating; the median run is reported")
    args = ap.parse_args()
    runs_ps, runs_rpc = [], []
    for _ in range(max(1, args.repeat)):
        runs_ps.append(ex.run(argparse.Namespace(**vars(args))))
        runs_rpc.append(run_rpc(args))

    def median(runs: List[Dict[str, float]]) -> Dict[str, float]:
        return sorted(runs, key=lambda r: r["train_samples_per_s"])[len(runs) // 2]
    ps_res, rpc_res = median(runs_ps), median(runs_rpc)
    # samples/s: from the first worker's first batch to the last worker's last update
    # (start-up and data loading, which differ between the variants, excluded); wall: all.
    print("%-22s %12s %10s %10s" % ("variant", "samples/s", "test_acc", "wall s"))
    for name, r in (("redis-ps", ps_res), ("torch rpc (tensorpipe)", rpc_res)):
        print("%-22s %12.0f %10.4f %10.2f" % (name, r["train_samples_per_s"], r["test_acc"],
                                             r["seconds"]))
    print("RESULT ps_samples_per_s=%.0f rpc_samples_per_s=%.0f ratio=%.2f ps_acc=%.4f "
          "rpc_acc=%.4f workers=%d batch=%d epochs=%d"
          % (ps_res["train_samples_per_s"], rpc_res["train_samples_per_s"],
             ps_res["train_samples_per_s"] / rpc_res["train_samples_per_s"], ps_res["test_acc"],
             rpc_res["test_acc"], args.workers, args.batch, args.epochs))


if __name__ == "__main__":
    main()
