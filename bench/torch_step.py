#!/usr/bin/env python3
"""Per-step cost of training through redis-ps from PyTorch, against a plain torch step, in one
process and one run (the variants alternate round by round, so machine load hits all alike).

    python3 bench/torch_step.py [--hidden 128] [--batch 64] [--steps 300] [--rounds 5]

Variants, each a full training step on the same MLP 784-H-10 and batches:
  torch      zero_grad, forward, cross-entropy, backward, torch.optim.SGD.step (local)
  ps         the same with redis_ps.torch.PSOptimizer (SGD on the server), overlap on
  ps-sync    PSOptimizer with overlap=False (push + pull in one round trip per step)
  modulePS   the explicit ModulePS pull() then push() (two blocking round trips)
Per variant: the median over rounds of the mean step time, and the median over rounds of
its ratio to the torch step of the same round (short rounds, back to back: what the
ratios report, as they follow the machine's load least); for PSOptimizer the visible share
of the step spent inside opt.step() (encode, wait for the round trip, swap); and the CPU time
per step of this process and of the server (from /proc): on a loaded machine there is no idle
core for the overlapped round trip to hide in, so the CPU a step costs in all is what the
wall-clock ratio follows there. A private
redis-server with the module (no persistence) on a free loopback port; torch uses one thread.
The last line: RESULT ps_over_torch=... visible_share=... (targets <= 1.15 and <= 0.20).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "python"))
sys.path.insert(0, os.path.join(REPO, "examples"))

import torch  # noqa: E402

import redis_ps  # noqa: E402
from redis_ps.torch import ModulePS, PSOptimizer  # noqa: E402
import torch_async_ps as ex  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--module", default=os.path.join(REPO, "build", "ps.so"))
    a = ap.parse_args()
    torch.set_num_threads(1)
    server, addr, tmp = ex.start_server(a.module, persist=False)
    try:
        r = redis_ps.connect(addr)
        g = torch.Generator().manual_seed(1)
        xs = torch.rand(a.steps, a.batch, 784, generator=g)
        ys = torch.randint(0, 10, (a.steps, a.batch), generator=g)
        nets = {k: ex.make_net(a.hidden, 1) for k in ("torch", "ps", "ps-sync", "modulePS")}
        opts = {"torch": torch.optim.SGD(nets["torch"].parameters(), lr=0.05),
                "ps": PSOptimizer(nets["ps"], r, "b-ps", lr=0.05),
                "ps-sync": PSOptimizer(nets["ps-sync"], r, "b-sync", lr=0.05, overlap=False)}
        mps = ModulePS(r, "b-mps", nets["modulePS"])
        mps.create("OPTIM SGD LR 0.05")

        def server_cpu() -> float:
            f = open("/proc/%d/stat" % server.pid).read().rsplit(")", 1)[1].split()
            return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")

        cpu = {k: [] for k in nets}

        def run(kind: str) -> float:
            net = nets[kind]
            c0, s0 = time.process_time(), server_cpu()
            t0 = time.perf_counter()
            for i in range(a.steps):
                if kind == "modulePS":
                    mps.pull()
                    net.zero_grad()
                else:
                    opts[kind].zero_grad()
                torch.nn.functional.cross_entropy(net(xs[i]), ys[i]).backward()
                if kind == "modulePS":
                    mps.push()
                else:
                    opts[kind].step()
            if kind == "ps":
                opts[kind].synchronize()
            t = (time.perf_counter() - t0) / a.steps
            cpu[kind].append(((time.process_time() - c0) / a.steps,
                              (server_cpu() - s0) / a.steps))
            return t

        times = {k: [] for k in nets}
        share = []
        for _ in range(a.rounds):
            for k in nets:
                s0 = opts["ps"].stats["step_s"] if k == "ps" else 0.0
                t = run(k)
                times[k].append(t)
                if k == "ps":
                    share.append((opts["ps"].stats["step_s"] - s0) / a.steps / t)
        med = {k: statistics.median(v) for k, v in times.items()}
        load = open("/proc/loadavg").read().split()[:3]
        print("MLP 784-%d-10, batch %d, %d steps x %d rounds, load average %s"
              % (a.hidden, a.batch, a.steps, a.rounds, " ".join(load)))
        for k in nets:
            cc = statistics.median(c for c, _ in cpu[k])
            sc = statistics.median(c for _, c in cpu[k])
            print("%-9s %8.3f ms/step  %5.2fx torch   cpu/step: client %.3f ms, server %.3f ms"
                  % (k, med[k] * 1e3, med[k] / med["torch"], cc * 1e3, sc * 1e3))
        vs = statistics.median(share)
        ratio = {k: statistics.median(t / b for t, b in zip(times[k], times["torch"]))
                 for k in nets}
        cpu_ratio = {k: statistics.median((c + sc) / (ct + sct) for (c, sc), (ct, sct)
                                          in zip(cpu[k], cpu["torch"])) for k in nets}
        for k in nets:
            print("%-9s per-round ratio to torch: time %.2fx, cpu (client+server) %.2fx"
                  % (k, ratio[k], cpu_ratio[k]))
        print("ps: visible share of the step inside opt.step(): %.1f%%" % (100 * vs))
        print("RESULT ps_over_torch=%.3f ps_sync_over_torch=%.3f modulePS_over_torch=%.3f "
              "visible_share=%.3f ps_cpu_over_torch=%.3f torch_ms=%.3f ps_ms=%.3f load=%s"
              % (ratio["ps"], ratio["ps-sync"], ratio["modulePS"], vs, cpu_ratio["ps"],
                 med["torch"] * 1e3, med["ps"] * 1e3, load[0]))
        opts["ps"].close()
    finally:
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    main()
