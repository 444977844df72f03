#!/usr/bin/env python3
"""ps-export into a plain Redis (issue 23 "exporter"): a base of --rows rows of dim --dim,
then a delta after --pushes pushes of 100 ids (new ids beyond CAPACITY, so each push also
evicts: the delta writes the changed rows and deletes the evicted ones). Prints the pass
times and rows/s, a bare PS.SCANROWS F16 scan of the same table from Python (what reading
alone costs), and the target hash's bytes per row (MEMORY USAGE). The machine may be
loaded: `uptime` is printed alongside.

    PYTHONPATH=python_tests bench/export_bench.py [--rows N] [--dim D] [--pushes P] [--count C]

Starts a redis-server with build/ps.so and a plain one on free ports in temporary
directories and stops them at the end."""

import argparse
import json
import os
import subprocess
import time

import numpy as np

import psserver

EXPORT = os.path.join(psserver.REPO_ROOT, "build", "ps-export")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=200000)
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--pushes", type=int, default=100)
    ap.add_argument("--count", type=int, default=1024)
    a = ap.parse_args()
    print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    m, t = psserver.RedisServer(name="source"), psserver.RedisServer(module=None, name="target")
    try:
        c, tc = m.client(), t.client()
        c.execute_command("PS.CREATE", "b", "EMBEDDING", "DIM", a.dim, "CAPACITY", a.rows)
        rng = np.random.default_rng(0)
        for k in range(0, a.rows, 10000):
            ids = np.arange(k, min(k + 10000, a.rows), dtype="<u8")
            g = rng.standard_normal(len(ids) * a.dim).astype("<f4").tobytes()
            c.execute_command("PS.PUSHGRAD", "b", g, "IDS", ids.tobytes())

        def export():
            t0 = time.time()
            p = subprocess.run([EXPORT, "--source", m.addr, "--key", "b", "--target", t.addr,
                                "--count", str(a.count), "--log-json"], capture_output=True, text=True,
                               check=True)
            return time.time() - t0, json.loads(p.stdout.splitlines()[0])

        t0, cur, n = time.time(), 0, 0
        while True:
            cur, _, ids, _ = c.execute_command("PS.SCANROWS", "b", cur, "COUNT", a.count, "FORMAT", "F16")
            n += len(ids) // 8
            if int(cur) == 0:
                break
        scan = time.time() - t0
        wall, p = export()
        print("base:  %d rows, pass %.0f ms (%.0f rows/s), %.2f s with the process start; "
              "a bare PS.SCANROWS F16 scan of them from Python: %.0f ms"
              % (p["rows"], p["ms"], p["rows"] / max(p["ms"], 1e-3) * 1e3, wall, scan * 1e3))
        for _ in range(a.pushes):
            ids = rng.integers(0, 3 * a.rows, 100).astype("<u8")
            g = rng.standard_normal(100 * a.dim).astype("<f4").tobytes()
            c.execute_command("PS.PUSHGRAD", "b", g, "IDS", ids.tobytes())
        wall, p = export()
        print("delta: %d rows written, %d deleted after %d pushes, pass %.0f ms, %.2f s with the "
              "process start" % (p["rows"], p["gone"], a.pushes, p["ms"], wall))
        rows = tc.hlen("ps:export:{b}:rows")
        mem = tc.memory_usage("ps:export:{b}:rows")
        print("target: %d rows, %.1f MB, %.0f bytes per row (values: %d bytes as F16, %d as F32)"
              % (rows, mem / 1e6, mem / rows, 2 * a.dim, 4 * a.dim))
    finally:
        m.cleanup()
        t.cleanup()


if __name__ == "__main__":
    main()
