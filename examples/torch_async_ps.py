#!/usr/bin/env python3
"""Asynchronous data-parallel SGD of an MLP on Fashion-MNIST with PyTorch workers and redis-ps
as the parameter server (the classic PyTorch RPC parameter-server example, on Redis).

    python3 examples/torch_async_ps.py --workers 2 --epochs 1            # private server
    python3 examples/torch_async_ps.py --addr 127.0.0.1:6379 --job mlp   # your server/cluster

N worker processes each train on their shard with redis_ps.torch.PSOptimizer, a
torch.optim.Optimizer whose step pushes the mini-batch gradient (exactly-once, with the
versions it was computed from) and brings back the server's parameters in one round trip
(--overlap 1 runs it in the background during the next step's compute, as ps-train
--overlap), never waiting for each other. The server applies every push with SGD. Fault tolerance comes from Redis: a
killed worker can be started again (its shard restarts), and the private server runs with
appendonly, so a restarted server has the model of its AOF; workers retry for ~10 s.
A killed worker is started again alone with --worker-rank R (same --addr, --job, --workers):
its pushes carry the same client id, and the server's exactly-once table keeps a resent
push from applying twice.

Data: Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist), as ps-train uses.
Needs python3-torch, python3-redis, python3-numpy and build/ps.so (make module).

--log FILE appends one JSON object per line (the format `python3 -m redis_ps.plot` reads):
  {"t": seconds since start, "worker": "w1", "epoch": 1, "samples": samples so far (this
   worker), "loss": mean loss since the last line, "version": parameter version pulled,
   "staleness": mean versions other workers applied between a pull and its push}
and the parent adds {"event": "result", "test_acc": ..., "test_loss": ..., "samples": ...,
"samples_per_s": ..., "seconds": ...}. The last stdout line is ps-train's RESULT format.
"""

from __future__ import annotations

import argparse
import gzip
import json
import multiprocessing as mp
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from typing import Dict, Optional, Tuple

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "python"))

import torch  # noqa: E402

import redis_ps  # noqa: E402
from redis_ps.torch import PSOptimizer  # noqa: E402

DATA_DIR = "/usr/share/datasets/fashion-mnist"


def load_fashion_mnist(train: bool, limit: int = 0) -> Tuple[np.ndarray, np.ndarray]:
    """(images float32 [n, 784] scaled to [0, 1], labels int64 [n]) from the idx.gz files."""
    prefix = "train" if train else "t10k"

    def idx(name: str) -> np.ndarray:
        with gzip.open(os.path.join(DATA_DIR, name), "rb") as f:
            raw = f.read()
        ndim = raw[3]
        dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
        return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)

    x = idx("%s-images-idx3-ubyte.gz" % prefix).reshape(-1, 784).astype(np.float32) / 255.0
    y = idx("%s-labels-idx1-ubyte.gz" % prefix).astype(np.int64)
    if limit:
        x, y = x[:limit], y[:limit]
    return x, y


def make_net(hidden: int, seed: int) -> torch.nn.Module:
    """784 -> hidden -> ReLU -> 10, initialised from 'seed' (the same on every process)."""
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(784, hidden), torch.nn.ReLU(),
                               torch.nn.Linear(hidden, 10))


def evaluate(net: torch.nn.Module, x: np.ndarray, y: np.ndarray) -> Tuple[float, float]:
    """(accuracy, mean cross-entropy) of 'net' on (x, y)."""
    with torch.no_grad():
        out = net(torch.from_numpy(x))
        loss = torch.nn.functional.cross_entropy(out, torch.from_numpy(y)).item()
        acc = (out.argmax(1).numpy() == y).mean()
    return float(acc), float(loss)


def log_line(path: Optional[str], obj: Dict) -> None:
    """Append one JSON line to 'path' (one write, O_APPEND: lines of workers don't mix)."""
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(obj) + "\n").encode())
        finally:
            os.close(fd)


def worker(rank: int, args: argparse.Namespace, t0: float, q: "mp.Queue") -> None:
    """Train on shard 'rank' of the training set; put (samples, start, end) on 'q'."""
    torch.set_num_threads(1)
    x, y = load_fashion_mnist(True, args.limit)
    x, y = x[rank::args.workers], y[rank::args.workers]
    net = make_net(args.hidden, args.seed)
    opt = PSOptimizer(net, redis_ps.connect(args.addr), args.job, lr=args.lr,
                      push_format=args.push_format, client_id="%s-w%d" % (args.job, rank + 1),
                      retries=20, create=False, overlap=bool(args.overlap))
    rng = np.random.default_rng(args.seed + rank)
    samples, win_loss, win_n, start = 0, 0.0, 0, time.time()
    st0, n0 = 0, 0
    for epoch in range(1, args.epochs + 1):
        order = rng.permutation(len(x))
        for b in range(0, len(order) - args.batch + 1, args.batch):
            sel = order[b:b + args.batch]
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(net(torch.from_numpy(x[sel])),
                                                     torch.from_numpy(y[sel]))
            loss.backward()
            opt.step()
            samples += len(sel)
            win_loss += loss.item()
            win_n += 1
            if win_n == args.log_every:
                # Staleness: versions others applied between a gradient's pull and its push.
                st, n = opt.stats["staleness_sum"], opt.stats["pushes"]
                log_line(args.log, {"t": round(time.time() - t0, 3), "worker": "w%d" % (rank + 1),
                                    "epoch": epoch, "samples": samples,
                                    "loss": round(win_loss / win_n, 5),
                                    "version": min(opt.versions.values()),
                                    "staleness": round((st - st0) / max(n - n0, 1), 3)})
                win_loss, win_n, st0, n0 = 0.0, 0, st, n
    opt.close()
    q.put((samples, start, time.time()))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(module: str, persist: bool = True) -> Tuple[subprocess.Popen, str, str]:
    """A private redis-server with the module, appendonly (unless not 'persist'), on a free
    loopback port."""
    d = tempfile.mkdtemp(prefix="torch-ps-")
    port = free_port()
    p = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                          "--dir", d, "--appendonly", "yes" if persist else "no", "--save", "",
                          "--loadmodule", module, "--logfile", "redis.log"])
    import redis
    for _ in range(100):
        try:
            redis.Redis(port=port).ping()
            break
        except redis.exceptions.ConnectionError:
            time.sleep(0.05)
    return p, "127.0.0.1:%d" % port, d


def run(args: argparse.Namespace) -> Dict[str, float]:
    """Train with args.workers processes; returns the run's numbers (also printed)."""
    torch.set_num_threads(1)
    server, tmp = None, None
    if not args.addr:
        server, args.addr, tmp = start_server(args.module)
    try:
        net = make_net(args.hidden, args.seed)
        r = redis_ps.connect(args.addr)
        job = redis_ps.Model(r, args.job)
        for n, p in net.named_parameters():
            job.add_tensor(n, tuple(p.shape))
        job.delete()
        ps = PSOptimizer(net, r, args.job, lr=args.lr, overlap=False)
        t0 = time.time()
        q: "mp.Queue" = mp.get_context("fork").Queue()
        procs = [mp.get_context("fork").Process(target=worker, args=(i, args, t0, q))
                 for i in range(args.workers)]
        for p in procs:
            p.start()
        done = [q.get() for _ in procs]
        for p in procs:
            p.join()
        seconds = time.time() - t0
        samples = sum(s for s, _, _ in done)
        ps.synchronize()
        xt, yt = load_fashion_mnist(False)
        acc, loss = evaluate(net, xt, yt)
        res = {"test_acc": acc, "test_loss": loss, "samples": samples, "seconds": seconds,
               "samples_per_s": samples / seconds, "workers": args.workers,
               # From the first worker's first batch to the last worker's last push (start-up
               # and data loading excluded), as ps-train's span_samples_per_s.
               "train_samples_per_s": samples / (max(e for _, _, e in done)
                                                 - min(b for _, b, _ in done))}
        log_line(args.log, dict(res, event="result", t=round(seconds, 3)))
        print("RESULT test_acc=%.4f test_loss=%.4f train_seconds=%.2f samples=%d "
              "samples_per_s=%.0f workers=%d" % (acc, loss, seconds, samples,
                                                 samples / seconds, args.workers))
        return res
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)
            shutil.rmtree(tmp, ignore_errors=True)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--addr", default="", help="host:port of a server or cluster node "
                    "(default: start a private server with --module)")
    ap.add_argument("--module", default=os.path.join(REPO, "build", "ps.so"))
    ap.add_argument("--job", default="torchmlp")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--limit", type=int, default=0, help="use only the first N training samples")
    ap.add_argument("--overlap", type=int, default=0, choices=(0, 1),
                    help="1: each step's round trip overlaps the next step's compute (the "
                    "gradient is one own step behind; pays off with an idle core per "
                    "worker); 0 (default here: N worker processes and the server keep the "
                    "cores busy): push and pull inside step(), one round trip")
    ap.add_argument("--push-format", default="F32", choices=redis_ps.codec.FORMATS)
    ap.add_argument("--log", default="", help="append JSON lines of progress to this file")
    ap.add_argument("--log-every", type=int, default=20, help="mini-batches per log line")
    ap.add_argument("--worker-rank", type=int, default=-1,
                    help="run only worker R (0-based) of --workers against --addr, e.g. to "
                    "restart a killed one; the model must exist")
    return ap


def main() -> None:
    args = parser().parse_args()
    if args.worker_rank < 0:
        run(args)
        return
    if not args.addr or not 0 <= args.worker_rank < args.workers:
        raise SystemExit("--worker-rank needs --addr and 0 <= R < --workers")
    q: "mp.Queue" = mp.get_context("fork").Queue()
    worker(args.worker_rank, args, time.time(), q)
    samples, start, end = q.get()
    print("worker %d: %d samples, %.0f samples/s" % (args.worker_rank, samples,
                                                     samples / max(end - start, 1e-9)))


if __name__ == "__main__":
    main()
