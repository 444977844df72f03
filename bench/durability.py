#!/usr/bin/python3
"""durability.py -- `make bench-durability`: what each durability configuration of a Redis
Cluster costs in training throughput, next to what it keeps.

For every server persistence mode (none, AOF everysec, AOF always) a 3-master + 3-replica
cluster with build/ps.so is started on free loopback ports in temp dirs (python_tests/
psserver.py; stopped by pid at the end). On it, `ps-train run --workers 2` trains the fault
tests' model (MLP 784-64-10, SGD, Fashion-MNIST, partitions of 32 KiB: 10 keys over the three
masters) with --wait 0 or 1 and push windows 2, 8 and 32. Printed: a markdown table of the
median span samples/s (RUNS runs each), the cost against no durability at the same window,
and which failures lose acknowledged pushes (from README "Operations"; pinned by
python_tests/test_fault_cluster.py, test_fault_lost_state.py and test_fault_degraded.py).

Environment: EPOCHS (3), RUNS (3), WINDOWS ("2 8 32"), CONFIGS (names of the table's rows,
default all), PS_TRAIN (build/ps-train).
"""

import os
import re
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "python_tests"))
import psserver  # noqa: E402

PS_TRAIN = os.environ.get("PS_TRAIN", os.path.join(REPO, "build", "ps-train"))
EPOCHS = int(os.environ.get("EPOCHS", "3"))
RUNS = int(os.environ.get("RUNS", "3"))
WINDOWS = [int(w) for w in os.environ.get("WINDOWS", "2 8 32").split()]
JOB_ARGS = ["--layers", "784,64,10", "--optim", "sgd", "--lr", "0.05", "--seed", "3",
            "--task-samples", "1000", "--partition-bytes", "32768"]

PERSIST = {
    "none": ["--appendonly", "no"],
    "everysec": ["--appendonly", "yes", "--appendfsync", "everysec"],
    "always": ["--appendonly", "yes", "--appendfsync", "always"],
}

# (row name, persistence, --wait, what a failure of one master loses)
CONFIGS = [
    ("none", "none", 0,
     "failover: pushes not yet replicated; fast restart: everything on the node"),
    ("WAIT 1", "none", 1,
     "failover: nothing; fast restart (before failover): everything on the node"),
    ("AOF everysec", "everysec", 0,
     "failover: pushes not yet replicated; restart: up to ~1-2 s (host crash)"),
    ("WAIT 1 + AOF everysec", "everysec", 1,
     "failover: nothing; fast restart: up to ~1-2 s on a host crash (process kill: nothing)"),
    ("AOF always", "always", 0,
     "failover: pushes not yet replicated; restart: nothing"),
    ("WAIT 1 + AOF always", "always", 1, "nothing (failover or restart)"),
]


def run_once(seeds, job, wait, window):
    """span samples/s of one `ps-train run` (init included in the command, not the rate)."""
    cmd = [PS_TRAIN, "run", "--addr", seeds, "--job", job, "--reset", "--workers", "2",
           "--epochs", str(EPOCHS), "--progress", "none", "--wait", str(wait),
           "--window", str(window)] + JOB_ARGS
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       stdin=subprocess.DEVNULL, timeout=900)
    out = p.stdout.decode(errors="replace")
    m = re.search(r"^RESULT .*span_samples_per_s=(\d+)", out, re.M)
    if p.returncode != 0 or not m:
        raise SystemExit("bench-durability: ps-train run failed (%d):\n%s"
                         % (p.returncode, out[-3000:]))
    return int(m.group(1))


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def main():
    want = os.environ.get("CONFIGS")
    configs = [c for c in CONFIGS if not want or c[0] in want.split(",")]
    rates = {}
    t0 = time.monotonic()
    for mode in PERSIST:
        rows = [c for c in configs if c[1] == mode]
        if not rows:
            continue
        cluster = psserver.RedisClusterHelper(masters=3, replicas=1, node_timeout=2000,
                                              args=PERSIST[mode])
        try:
            seeds = ",".join(n.addr for n in cluster.nodes)
            for name, _, wait, _ in rows:
                for w in WINDOWS:
                    xs = [run_once(seeds, "bd", wait, w) for _ in range(RUNS)]
                    rates[(name, w)] = median(xs)
                    print("bench-durability: %-24s window %2d: %s samples/s (median %d)"
                          % (name, w, " ".join(map(str, xs)), rates[(name, w)]), flush=True)
        finally:
            cluster.cleanup()
    print()
    print("ps-train run --workers 2, 3+3 cluster on one %d-CPU host, %d epochs, median of %d "
          "runs (%.0f s in all); span samples/s, and in parentheses against `none` at the same "
          "window" % (os.cpu_count(), EPOCHS, RUNS, time.monotonic() - t0))
    print()
    print("| configuration | " + " | ".join("window %d" % w for w in WINDOWS) +
          " | acknowledged pushes lost when a master fails |")
    print("|---|" + "---:|" * len(WINDOWS) + "---|")
    for name, _, _, loses in configs:
        cells = []
        for w in WINDOWS:
            r = rates[(name, w)]
            base = rates.get(("none", w))
            cells.append("%d" % r if not base or name == "none"
                         else "%d (%.0f%%)" % (r, 100.0 * r / base))
        print("| %s | %s | %s |" % (name, " | ".join(cells), loses))


if __name__ == "__main__":
    main()
