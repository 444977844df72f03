#!/usr/bin/env python3
"""Embedding tables against a plain Redis hash, on one server (part of `make bench`).

A table of --rows rows (dim 16, ROWADAGRAD) and a hash of the same number of fields holding
the same 64 bytes per row (what a Redis user or a HugeCTR-style store does without the
module) are filled through pipelined PS.PUSHGRAD / HSET of 4,096 rows per command. Then, for
--batches batches of 4,096 ids drawn from Zipf(1.1) over the rows:
  pull:  PS.PULL key IDS blob            vs  HMGET hash f1 .. f4096
  push:  PS.PUSHGRAD key grad IDS blob   vs  HMGET + HSET of the same fields
Server CPU per call comes from INFO commandstats (usec_per_call), so the ratios are ids/s
per server core, free of client overhead. Memory per row: used_memory growth while each was
filled (and MEMORY USAGE of the table). Targets (issue 12): pull >= 3x, push >= 5x, memory
<= 0.5x.

    bench/embed_server_bench.py --port P [--rows N] [--batches B]

The default is the issue's size, 10,000,000 rows: about 40 s and 2.7 GB on the 2-core build
machine, half of the time to fill the hash (EMBED_BENCH_ROWS in bench/run.sh makes it
smaller)."""

import argparse
import struct
import time

import numpy as np
import redis

DIM = 16
K = 4096


def zipf_ranks(rng, n, s, size):
    """Ranks 0 .. n-1 with P(r) proportional to (r + 1)^-s, by inverting the CDF."""
    cdf = np.cumsum(np.arange(1, n + 1, dtype=np.float64) ** -s)
    cdf /= cdf[-1]
    return np.searchsorted(cdf, rng.random(size))


def id_of_rank(r):
    """Ranks spread over the id space by an odd multiplier, as hashed feature ids are."""
    return (r.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(12345))


def cmdstat(c, name):
    s = c.info("commandstats").get("cmdstat_" + name)
    return (s["calls"], s["usec"]) if s else (0, 0)


def used(c):
    return c.info("memory")["used_memory"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--batches", type=int, default=200)
    a = ap.parse_args()
    c = redis.Redis(port=a.port)
    rng = np.random.default_rng(1)
    n = a.rows
    ids_all = id_of_rank(np.arange(n))
    vals = rng.standard_normal((K, DIM)).astype("<f4")

    t0 = time.time()
    m0 = used(c)
    c.execute_command("PS.CREATE", "emb", "EMBEDDING", "DIM", DIM, "OPTIM", "ROWADAGRAD",
                      "LR", 0.01, "INIT", "UNIFORM", -0.01, 0.01, "SEED", 1)
    p = c.pipeline(transaction=False)
    for k in range(0, n, K):
        ids = ids_all[k:k + K]
        p.execute_command("PS.PUSHGRAD", "emb", vals[:len(ids)].tobytes(), "IDS", ids.tobytes())
        if (k // K) % 64 == 63:
            p.execute()
    p.execute()
    m_table = used(c) - m0
    t_table = time.time() - t0
    t0 = time.time()
    m0 = used(c)
    for k in range(0, n, K):
        ids = ids_all[k:k + K]
        mapping = {str(int(i)): vals[j].tobytes() for j, i in enumerate(ids)}
        p.hset("hash", mapping=mapping)
        if (k // K) % 32 == 31:
            p.execute()
    p.execute()
    m_hash = used(c) - m0
    t_hash = time.time() - t0
    assert c.execute_command("PS.INFO", "emb")[9] == n

    batches = [id_of_rank(zipf_ranks(rng, n, 1.1, K)) for _ in range(a.batches)]
    grad = rng.standard_normal((K, DIM)).astype("<f4").tobytes()

    def run(label, fn):
        c.config_resetstat()
        t = time.time()
        for b in batches:
            fn(b)
        return time.time() - t

    wall = {}
    wall["pull"] = run("pull", lambda b: c.execute_command("PS.PULL", "emb", "IDS", b.tobytes()))
    pull_calls, pull_us = cmdstat(c, "ps.pull")
    wall["hmget"] = run("hmget", lambda b: c.hmget("hash", [str(int(i)) for i in b]))
    hmget_calls, hmget_us = cmdstat(c, "hmget")
    wall["push"] = run("push", lambda b: c.execute_command("PS.PUSHGRAD", "emb", grad, "IDS", b.tobytes()))
    push_calls, push_us = cmdstat(c, "ps.pushgrad")

    def rmw(b):
        f = [str(int(i)) for i in b]
        old = c.hmget("hash", f)
        c.hset("hash", mapping={k: v for k, v in zip(f, old)})

    wall["rmw"] = run("rmw", rmw)
    h2_calls, h2_us = cmdstat(c, "hmget")
    hs_calls, hs_us = cmdstat(c, "hset")

    def per_id(us, calls):
        return us / calls / K if calls else float("nan")

    pull_ns, hmget_ns = 1000 * per_id(pull_us, pull_calls), 1000 * per_id(hmget_us, hmget_calls)
    push_ns = 1000 * per_id(push_us, push_calls)
    rmw_ns = 1000 * (per_id(h2_us, h2_calls) + per_id(hs_us, hs_calls))
    mem_usage = c.memory_usage("emb", samples=0)
    print("rows: %d (dim %d, ROWADAGRAD); batches of %d Zipf(1.1) ids: %d" % (n, DIM, K, a.batches))
    print("fill: table %.1f s, hash %.1f s" % (t_table, t_hash))
    print("%-34s %12s %14s %12s" % ("", "server ns/id", "ids/s/core", "client ids/s"))
    for name, ns, w in (("PS.PULL IDS", pull_ns, wall["pull"]), ("HMGET", hmget_ns, wall["hmget"]),
                        ("PS.PUSHGRAD IDS (rowadagrad)", push_ns, wall["push"]),
                        ("HMGET + HSET", rmw_ns, wall["rmw"])):
        print("%-34s %12.1f %14.3g %12.3g" % (name, ns, 1e9 / ns, a.batches * K / w))
    print("memory per row: table %.1f B (MEMORY USAGE %.1f B), hash field %.1f B" %
          (m_table / n, mem_usage / n, m_hash / n))
    pr, sr, mr = hmget_ns / pull_ns, rmw_ns / push_ns, m_table / m_hash
    print("targets:")
    print("  pull vs HMGET, ids/s per core:       %5.2fx  (target >= 3x)   %s" % (pr, "ok" if pr >= 3 else "MISSED"))
    print("  push vs HMGET+HSET, ids/s per core:  %5.2fx  (target >= 5x)   %s" % (sr, "ok" if sr >= 5 else "MISSED"))
    print("  memory per row vs hash field:        %5.2fx  (goal <= 0.5x)   %s" % (mr, "ok" if mr <= 0.5 else "MISSED"))


if __name__ == "__main__":
    main()
