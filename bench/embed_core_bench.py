#!/usr/bin/env python3
"""Server ids/s per core of PS.PULL and PS.PUSHGRAD IDS (part of `make bench`, issue 24).

A table of --rows rows (default 1M; dim 16, F32 rows, ROWADAGRAD) is filled on each server
given with --port (one or more), then rounds of --batches pulls of 4,096 uniformly random
EXISTING ids (the cache-hostile case: every row a DRAM miss) and as many pushes of 4,096
random existing ids run against each server in turn, round after round, so that load on a
shared machine drifts into every server alike. The servers are given by --port (running) or
by --module (one private redis-server per module on a free loopback port in a temp dir, without
persistence, stopped by pid at the end): `--module build/ps.so --module old/ps.so` measures a
build against a baseline build in one run. Per command the server's cost comes from two
sources, both free of client overhead:
  main:  the main thread's CPU time (INFO cpu used_cpu_{user,sys}_main_thread), everything
         the server spends: reading the request, the command, writing the reply;
  cmd:   INFO commandstats usec of the command alone.
Each figure is the best (lowest cost) round. With two servers the second is the baseline:
the ratio first/second is printed.

    bench/embed_core_bench.py (--port P | --module SO) [--port P2 | --module SO2]
                              [--rows N] [--batches B] [--rounds R]
"""

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np
import redis

DIM = 16
K = 4096


def id_of_rank(r):
    """Ranks spread over the id space by an odd multiplier, as hashed feature ids are."""
    return r.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(12345)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(module, procs):
    """A private redis-server with 'module' loaded; returns its port (appends (proc, dir))."""
    d = tempfile.mkdtemp(prefix="ps-embedcore.")
    port = free_port()
    p = subprocess.Popen([os.environ.get("REDIS_SERVER", "redis-server"), "--port", str(port),
                          "--bind", "127.0.0.1", "--dir", d, "--save", "", "--appendonly", "no",
                          "--logfile", os.path.join(d, "redis.log"), "--loadmodule",
                          os.path.abspath(module)])
    procs.append((p, d))
    for _ in range(200):
        try:
            if redis.Redis(port=port).ping():
                return port
        except redis.ConnectionError:
            time.sleep(0.05)
        if p.poll() is not None:
            break
    raise RuntimeError("redis-server with %s did not start (see %s)" % (module, d))


def main_cpu(c):
    i = c.info("cpu")
    return float(i["used_cpu_user_main_thread"]) + float(i["used_cpu_sys_main_thread"])


def cmd_usec(c, name):
    s = c.info("commandstats").get("cmdstat_" + name)
    return (s["calls"], s["usec"]) if s else (0, 0)


def fill(c, n, vals):
    c.delete("embcore")
    c.execute_command("PS.CREATE", "embcore", "EMBEDDING", "DIM", DIM, "OPTIM", "ROWADAGRAD",
                      "LR", 0.01, "INIT", "UNIFORM", -0.01, 0.01, "SEED", 1)
    p = c.pipeline(transaction=False)
    for k in range(0, n, K):
        ids = id_of_rank(np.arange(k, min(n, k + K)))
        p.execute_command("PS.PUSHGRAD", "embcore", vals[:len(ids)].tobytes(), "IDS", ids.tobytes())
        if (k // K) % 64 == 63:
            p.execute()
    p.execute()
    rows = c.execute_command("PS.INFO", "embcore")
    info = dict(zip(rows[0::2], rows[1::2]))
    assert int(info[b"rows"]) == n, info


def measure(c, batches, grad, push):
    """(main-thread seconds per id, commandstats seconds per id) of one round."""
    name = "ps.pushgrad" if push else "ps.pull"
    calls0, us0 = cmd_usec(c, name)
    cpu0 = main_cpu(c)
    for b in batches:
        if push:
            c.execute_command("PS.PUSHGRAD", "embcore", grad, "IDS", b)
        else:
            c.execute_command("PS.PULL", "embcore", "IDS", b)
    cpu1 = main_cpu(c)
    calls1, us1 = cmd_usec(c, name)
    n = len(batches) * K
    assert calls1 - calls0 == len(batches)
    return (cpu1 - cpu0) / n, (us1 - us0) * 1e-6 / n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, action="append", default=[])
    ap.add_argument("--module", action="append", default=[])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--batches", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    procs = []
    try:
        ports = a.port + [start_server(m, procs) for m in a.module]
        if not ports:
            ap.error("give --port or --module")
        return run(a, ports, [os.path.basename(m) for m in a.module])
    finally:
        for p, d in procs:
            p.terminate()
            p.wait()
            shutil.rmtree(d, ignore_errors=True)


def run(a, ports, names):
    a.port = ports
    labels = [str(p) for p in ports[:len(ports) - len(names)]] + names
    cs = [redis.Redis(port=p) for p in a.port]
    rng = np.random.default_rng(7)
    vals = rng.standard_normal((K, DIM)).astype("<f4")
    for c in cs:
        fill(c, a.rows, vals)
    grad = (rng.standard_normal((K, DIM)) * 1e-3).astype("<f4").tobytes()
    batches = [id_of_rank(rng.integers(0, a.rows, K)).tobytes() for _ in range(a.batches)]
    # best[server][op] = [main s/id, cmd s/id]
    best = [{op: [1.0, 1.0] for op in ("pull", "push")} for _ in cs]
    for _ in range(a.rounds):
        for op in ("pull", "push"):
            for s, c in enumerate(cs):
                m, u = measure(c, batches, grad, op == "push")
                best[s][op][0] = min(best[s][op][0], m)
                best[s][op][1] = min(best[s][op][1], u)
    print("table of %d rows (dim %d, F32, ROWADAGRAD); %d rounds of %d x %d uniformly random existing ids;"
          " best round" % (a.rows, DIM, a.rounds, a.batches, K))
    print("%-22s %-14s %16s %16s" % ("server", "command", "M ids/s/core", "M ids/s/core"))
    print("%-22s %-14s %16s %16s" % ("", "", "(main thread)", "(commandstats)"))
    for s, p in enumerate(labels):
        for op, cmd in (("pull", "PS.PULL"), ("push", "PS.PUSHGRAD")):
            m, u = best[s][op]
            print("%-22s %-14s %16.2f %16.2f" % (p[-22:], cmd, 1e-6 / m, 1e-6 / u))
    targets = {"pull": 10.0, "push": 5.0}
    if len(cs) >= 2:
        print("ratio %s / %s (ids/s per core, same run):" % (labels[0], labels[1]))
        for op in ("pull", "push"):
            print("  %-5s main thread %.3fx, commandstats %.3fx" %
                  (op, best[1][op][0] / best[0][op][0], best[1][op][1] / best[0][op][1]))
    print("targets (main thread, server %s):" % labels[0])
    for op in ("pull", "push"):
        v = 1e-6 / best[0][op][0]
        print("  %-5s %6.2f M ids/s per core (target >= %.0f)  %s" %
              (op, v, targets[op], "ok" if v >= targets[op] else "MISSED"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
