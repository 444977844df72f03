#!/usr/bin/env python3
"""Compressed id lists (IDFORMAT EF, issue 24): bytes per sparse step and server CPU per id,
each against its baseline in the same run (part of `make bench`, after 2d).

  a. bytes per step: `ps-gen-ctr` data with the demo-sparse settings (26 fields, vocabularies
     of 1M Zipf(1.5) ids hashed with the field in the top 8 bits; --samples train samples),
     then `ps-train run --model fm` (1 worker, --batch 256, 4 table shards, one epoch) twice on
     one private server: libps as built (EF from 16 ids per key request when smaller) and with
     PS_RAW_IDS=1 (raw 8-byte ids, what libps sent before). The server's total_net_input_bytes
     and total_net_output_bytes per training step (the steps are the training samples / batch;
     the test pass after training is included in both runs alike), their ratio, and the
     bytes per id of the id lists alone on the same ids (each step's distinct ids per shard,
     sorted and coded as libps codes them) next to 8.
  b. server CPU per id: a table of --rows rows (dim 16, F32, ROWADAGRAD); pulls and pushes of
     4096 uniformly random existing hashed ids sent three ways in turn, round after round:
     raw in random order (what libps sent before), raw sorted, and EF (sorted): the server's
     main-thread CPU time per id (INFO cpu), best round of each, and the ratios EF / raw
     sorted (the decoder's own cost) and EF / raw random (what a client sees).

    bench/ids_bench.py [--samples N] [--rows N] [--rounds R] [--skip-train]
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

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
B = os.path.join(REPO, "build")
DIM, K = 16, 4096
MASK64 = (1 << 64) - 1


# ---- the EF encoder, from the layout in docs/commands.md "Compressed id lists" ----------
def varint(v):
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def ef_encode(ids):
    ids = sorted(int(x) for x in ids)
    n, base = len(ids), ids[0]
    spread = ids[-1] - base
    b = min(((n * k + 7) // 8 + ((spread >> k) + n - 1) // 8 + 1, k) for k in range(64))[1]
    low = high = 0
    for i, x in enumerate(ids):
        v = x - base
        low |= (v & ((1 << b) - 1)) << (i * b)
        high |= 1 << ((v >> b) + i)
    return (varint(n) + varint(base) + bytes([b]) + low.to_bytes((n * b + 7) // 8, "little") +
            high.to_bytes(((spread >> b) + n - 1) // 8 + 1, "little"))


def shard_of(i, n):
    z = i
    z ^= z >> 30
    z = (z * 0xBF58476D1CE4E5B9) & MASK64
    z ^= z >> 27
    z = (z * 0x94D049BB133111EB) & MASK64
    z ^= z >> 31
    return z % n


# ---- servers ---------------------------------------------------------------------------
def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="ps-idsbench.")
        self.port = free_port()
        self.proc = subprocess.Popen(
            [os.environ.get("REDIS_SERVER", "redis-server"), "--port", str(self.port), "--bind",
             "127.0.0.1", "--dir", self.dir, "--save", "", "--appendonly", "no", "--logfile",
             os.path.join(self.dir, "redis.log"), "--loadmodule", os.path.join(B, "ps.so")])
        self.c = redis.Redis(port=self.port)
        for _ in range(200):
            try:
                if self.c.ping():
                    return
            except redis.ConnectionError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start (see %s)" % self.dir)

    def stop(self):
        self.proc.terminate()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def net(c):
    s = c.info("stats")
    return int(s["total_net_input_bytes"]), int(s["total_net_output_bytes"])


def main_cpu(c):
    i = c.info("cpu")
    return float(i["used_cpu_user_main_thread"]) + float(i["used_cpu_sys_main_thread"])


# ---- a. bytes per step -----------------------------------------------------------------
def bytes_per_step(a):
    data = os.path.join(B, "bench-ids")
    os.makedirs(data, exist_ok=True)
    prefix = os.path.join(data, "ctr")
    gen = [os.path.join(B, "ps-gen-ctr"), "--out", prefix, "--samples", str(a.samples),
           "--fields", "26", "--vocab", "1000000", "--zipf", "1.5", "--head", "20", "--decay", "1",
           "--seed", "7", "--model", "fm", "--k", "4"]
    print("data:   " + " ".join(gen[1:]))
    subprocess.run(gen, check=True, stdout=subprocess.DEVNULL)
    batch, shards = 256, 4
    steps = (a.samples + batch - 1) // batch
    run = ["run", "--model", "fm", "--dim", "4", "--table-optim", "adagrad", "--table-lr", "0.05",
           "--init-std", "0.01", "--admit", "255", "--batch", str(batch), "--epochs", "1",
           "--table-shards", str(shards), "--seed", "7", "--workers", "1", "--progress", "none",
           "--train", prefix + ".train.libsvm", "--test", prefix + ".test.libsvm"]
    srv = Server()
    res, sps, cpu = {}, {"EF": [], "raw": []}, {"EF": [], "raw": []}
    try:
        order = [("EF", False), ("raw", True), ("raw", True), ("EF", False)] * ((a.reps + 1) // 2)
        for rep_no, (label, raw) in enumerate(order):
            env = dict(os.environ)
            env.pop("PS_RAW_IDS", None)
            if raw:
                env["PS_RAW_IDS"] = "1"
            i0, o0 = net(srv.c)
            s0 = main_cpu(srv.c)
            logf = tempfile.TemporaryFile()
            p = subprocess.Popen([os.path.join(B, "ps-train")] + run +
                                 ["--addr", "127.0.0.1:%d" % srv.port, "--job",
                                  "ids%s%d" % (label, rep_no)],
                                 stdout=logf, stderr=subprocess.STDOUT, env=env)
            _, status, ru = os.wait4(p.pid, 0)
            p.returncode = os.waitstatus_to_exitcode(status)
            logf.seek(0)
            out = logf.read().decode(errors="replace")
            logf.close()
            if p.returncode != 0:
                print(out[-2000:])
                raise RuntimeError("ps-train failed")
            i1, o1 = net(srv.c)
            cpu[label].append(((ru.ru_utime + ru.ru_stime) / steps, (main_cpu(srv.c) - s0) / steps))
            line = [ln for ln in out.splitlines() if ln.startswith("RESULT")][-1]
            kv = dict(f.split("=", 1) for f in line.split()[1:] if "=" in f)
            sps[label].append(float(kv.get("samples_per_s", "nan")))
            if label not in res:
                res[label] = ((i1 - i0) / steps, (o1 - o0) / steps, kv.get("test_auc", "?"))
    finally:
        srv.stop()
    print("ps-train run --model fm, 1 worker, batch %d, %d table shards, %d steps "
          "(one epoch of %d samples, then the test pass)" % (batch, shards, steps, a.samples))
    print("%-6s %14s %14s %14s %9s %12s" % ("ids", "in B/step", "out B/step", "total B/step",
                                          "test_auc", "samples/s"))
    med = {k: sorted(v)[len(v) // 2] for k, v in sps.items()}
    for label in ("raw", "EF"):
        i, o, auc = res[label]
        print("%-6s %14.0f %14.0f %14.0f %9s %12.0f" % (label, i, o, i + o, auc, med[label]))
    # CPU per step (the test pass included alike): the trainer process (user + sys) and the
    # server's main thread; robust to the machine's load where samples/s over these short
    # runs is not (its runs spread 2-3x on the shared machine)
    cm = {k: (min(c[0] for c in v), min(c[1] for c in v)) for k, v in cpu.items()}
    print("CPU per step, best of %d runs each (EF and raw alternating): ps-train %.0f us raw, "
          "%.0f us EF (%.3fx); server main thread %.0f us raw, %.0f us EF (%.3fx)" %
          (len(cpu["EF"]), cm["raw"][0] * 1e6, cm["EF"][0] * 1e6, cm["EF"][0] / cm["raw"][0],
           cm["raw"][1] * 1e6, cm["EF"][1] * 1e6, cm["EF"][1] / cm["raw"][1]))
    (ri, ro, _), (ei, eo, _) = res["raw"], res["EF"]
    print("ratio EF / raw (same run): requests %.3fx, total %.3fx" % (ei / ri, (ei + eo) / (ri + ro)))
    # the id lists alone, as libps codes them: per step, each shard's distinct ids
    nid = nbytes = 0
    with open(prefix + ".train.libsvm") as f:
        rows = [ln.split()[1:] for ln in f]
    for s in range(0, len(rows), batch):
        uniq = {int(t.split(":")[0]) for r in rows[s:s + batch] for t in r}
        per = [[] for _ in range(shards)]
        for x in uniq:
            per[shard_of(x, shards)].append(x)
        for lst in per:
            if lst:
                nid += len(lst)
                nbytes += len(ef_encode(lst)) if len(lst) >= 16 else 8 * len(lst)
    print("id lists alone: %.2f bytes per id as EF (raw: 8), %.0f distinct ids per step" %
          (nbytes / nid, nid / steps))


# ---- b. server CPU per id ----------------------------------------------------------------
def id_of_rank(r):
    return r.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(12345)


def cpu_per_id(a):
    srv = Server()
    try:
        c = srv.c
        c.execute_command("PS.CREATE", "t", "EMBEDDING", "DIM", DIM, "OPTIM", "ROWADAGRAD",
                          "LR", 0.01, "INIT", "UNIFORM", -0.01, 0.01, "SEED", 1)
        rng = np.random.default_rng(7)
        vals = rng.standard_normal((K, DIM)).astype("<f4")
        p = c.pipeline(transaction=False)
        for k in range(0, a.rows, K):
            ids = id_of_rank(np.arange(k, min(a.rows, k + K)))
            p.execute_command("PS.PUSHGRAD", "t", vals[:len(ids)].tobytes(), "IDS", ids.tobytes())
            if (k // K) % 64 == 63:
                p.execute()
        p.execute()
        grad = (rng.standard_normal((K, DIM)) * 1e-3).astype("<f4").tobytes()
        ways = {"raw random": [], "raw sorted": [], "EF": []}
        for _ in range(a.batches):
            ids = id_of_rank(rng.integers(0, a.rows, K))
            srt = np.sort(ids)
            ways["raw random"].append(["IDS", ids.tobytes()])
            ways["raw sorted"].append(["IDS", srt.tobytes()])
            ways["EF"].append(["IDS", ef_encode(srt), "IDFORMAT", "EF"])
        efb = sum(len(w[1]) for w in ways["EF"]) / (a.batches * K)
        best = {(w, op): 1.0 for w in ways for op in ("pull", "push")}
        for _ in range(a.rounds):
            for op in ("pull", "push"):
                for w, reqs in ways.items():
                    t0 = main_cpu(c)
                    for q in reqs:
                        if op == "pull":
                            c.execute_command("PS.PULL", "t", *q)
                        else:
                            c.execute_command("PS.PUSHGRAD", "t", grad, *q)
                    best[(w, op)] = min(best[(w, op)], (main_cpu(c) - t0) / (len(reqs) * K))
    finally:
        srv.stop()
    print("table of %d rows (dim %d, F32, ROWADAGRAD); %d rounds of %d x %d uniformly random "
          "existing hashed ids; EF %.2f bytes per id; best round, server main-thread CPU" %
          (a.rows, DIM, a.rounds, a.batches, K, efb))
    print("%-12s %-12s %14s %12s" % ("ids", "command", "M ids/s/core", "ns/id"))
    for op, cmd in (("pull", "PS.PULL"), ("push", "PS.PUSHGRAD")):
        for w in ways:
            s = best[(w, op)]
            print("%-12s %-12s %14.2f %12.1f" % (w, cmd, 1e-6 / s, s * 1e9))
    for op in ("pull", "push"):
        print("ratio %s ids/s: EF / raw sorted %.3fx, EF / raw random %.3fx" %
              (op, best[("raw sorted", op)] / best[("EF", op)],
               best[("raw random", op)] / best[("EF", op)]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=100000)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--batches", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=3, help="ps-train runs of each kind")
    ap.add_argument("--skip-train", action="store_true")
    a = ap.parse_args()
    print("load: " + open("/proc/loadavg").read().strip())
    if not a.skip_train:
        bytes_per_step(a)
    cpu_per_id(a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
