#!/usr/bin/env python3
"""PS.SCORE serving throughput and latency on one server (issue 23 "Scoring" targets).

An FM table of dim 9 (k = 8 factors) holds --vocab rows for each of 26 fields (Criteo's
26 categorical fields), filled by pipelined PS.PUSHGRAD. Then:

  batched:  PS.SCORE of B samples x 26 features (ids drawn uniformly per field), for B in
            --batches, each for --seconds: samples/s per server core = samples scored /
            the server's main-thread CPU seconds meanwhile (INFO cpu
            used_cpu_{user,sys}_main_thread: parsing, the command and the reply), and
            the command's own time from INFO commandstats (usec_per_call).
  mlp:      the same batches as PS.SCORE MODEL MLP (each sample's 26 features in fields
            0..25, FIELDCOUNT 26: the pooled embedding input of ps-train's MLP, 26 x 9
            float32s a sample), measured right after the FM batch: samples/s per core
            and its ratio to FM's (the reply is 936 bytes a sample against FM's 8).
  latency:  --latency-n single-sample PS.SCORE and PING requests, alternated on one
            connection (pre-encoded RESP over a raw socket), p50 / p99 of each and their
            ratio (target: p99 of a 1-sample score within 2x of PING's).

The machine may be loaded: the figures to quote are the ratios measured in the same run,
with `uptime` printed alongside.

    bench/score_bench.py [--port P] [--vocab N] [--batches 1,64,1024] [--seconds S]

Without --port it starts a redis-server with build/ps.so on a free port in a temporary
directory and stops it at the end."""

import argparse
import os
import socket
import struct
import subprocess
import sys
import time

import numpy as np
import redis

FIELDS = 26
DIM = 9
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def resp(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def main_cpu(c):
    i = c.info("cpu")
    return float(i["used_cpu_user_main_thread"]) + float(i["used_cpu_sys_main_thread"])


def cmdstat(c):
    s = c.info("commandstats").get("cmdstat_ps.score")
    return (s["calls"], s["usec"]) if s else (0, 0)


def sample_ids(rng, n, vocab):
    """n samples x 26 ids: field f's ids are f << 56 | rank (ranks uniform below vocab)."""
    ranks = rng.integers(0, vocab, size=(n, FIELDS), dtype=np.uint64)
    return (np.arange(FIELDS, dtype=np.uint64)[None, :] << np.uint64(56)) | ranks


def fill(c, vocab, rng):
    ids = (np.arange(FIELDS, dtype=np.uint64)[:, None] << np.uint64(56)) | \
        np.arange(vocab, dtype=np.uint64)[None, :]
    ids = ids.ravel()
    p = c.pipeline(transaction=False)
    for s in range(0, len(ids), 4096):
        part = ids[s:s + 4096]
        g = rng.normal(0, 0.05, size=(len(part), DIM)).astype("<f4")
        p.execute_command("PS.PUSHGRAD", "fm", g.tobytes(), "IDS", part.astype("<u8").tobytes())
        if len(p) >= 32:
            p.execute()
    p.execute()
    return len(ids)


def measure(c, req, seconds):
    """Sends 'req' back to back for 'seconds'; (requests, wall s, main-thread CPU s, the
    command's usec per call)."""
    calls0, usec0 = cmdstat(c)
    cpu0, w0, n = main_cpu(c), time.time(), 0
    while time.time() - w0 < seconds:
        c.execute_command(*req)
        n += 1
    wall = time.time() - w0
    cpu = main_cpu(c) - cpu0
    calls1, usec1 = cmdstat(c)
    return n, wall, cpu, (usec1 - usec0) / max(calls1 - calls0, 1)


def recv_exact_reply(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise RuntimeError("connection closed")
        buf += chunk
    return buf


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int)
    ap.add_argument("--vocab", type=int, default=20000)
    ap.add_argument("--batches", default="1,16,256,1024")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--latency-n", type=int, default=5000)
    a = ap.parse_args()
    server = None
    if a.port is None:
        sys.path.insert(0, os.path.join(REPO, "python_tests"))
        import psserver
        server = psserver.RedisServer(module=os.path.join(REPO, "build", "ps.so"), name="score")
        a.port = server.port
    try:
        run(a)
    finally:
        if server is not None:
            server.stop()


def run(a):
    print("uptime:", subprocess.run(["uptime"], stdout=subprocess.PIPE).stdout.decode().strip())
    c = redis.Redis(port=a.port)
    rng = np.random.default_rng(1)
    c.delete("fm")
    c.execute_command("PS.CREATE", "fm", "EMBEDDING", "DIM", DIM, "OPTIM", "SGD", "LR", 1)
    t0 = time.time()
    rows = fill(c, a.vocab, rng)
    print("table: %d rows of dim %d (FM k=%d) filled in %.1f s" % (rows, DIM, DIM - 1,
                                                                    time.time() - t0))

    print("\nbatched (one connection, %d features per sample, values 1):" % FIELDS)
    print("%8s %12s %16s %14s %12s %16s %10s" % ("samples", "requests", "samples/s/core",
                                                 "samples/s wall", "usec/call",
                                                 "MLP samples/s/core", "MLP/FM"))
    best = 0.0
    for b in [int(x) for x in a.batches.split(",")]:
        ids = sample_ids(rng, b, a.vocab).astype("<u8").tobytes()
        counts = struct.pack("<%dI" % b, *([FIELDS] * b))
        req = ("PS.SCORE", "fm", "MODEL", "FM", "COUNTS", counts, "IDS", ids, "BIAS", "0.1")
        z = c.execute_command(*req)
        assert len(z[1]) == 8 * b and np.all(np.isfinite(np.frombuffer(z[1], "<f8")))
        fields = struct.pack("<%dI" % (b * FIELDS), *(list(range(FIELDS)) * b))
        mreq = ("PS.SCORE", "fm", "MODEL", "MLP", "COUNTS", counts, "IDS", ids,
                "FIELDS", fields, "FIELDCOUNT", FIELDS)
        x = c.execute_command(*mreq)
        assert len(x[1]) == 4 * b * FIELDS * DIM
        n, wall, cpu, usec = measure(c, req, a.seconds)
        per_core = n * b / cpu if cpu > 0 else float("inf")
        best = max(best, per_core)
        mn, _, mcpu, _ = measure(c, mreq, a.seconds)
        mlp_core = mn * b / mcpu if mcpu > 0 else float("inf")
        print("%8d %12d %16.0f %14.0f %12.1f %16.0f %10.2f" % (b, n, per_core, n * b / wall,
                                                             usec, mlp_core,
                                                             mlp_core / per_core))
    print("best: %.0f samples/s per server core (main-thread CPU; target >= 100000)" % best)

    # Single-sample latency against PING, alternated on one raw connection.
    ids = sample_ids(rng, 1, a.vocab).astype("<u8").tobytes()
    score = resp("PS.SCORE", "fm", "MODEL", "FM", "COUNTS", struct.pack("<I", FIELDS), "IDS",
                 ids, "BIAS", "0.1")
    ping = resp("PING")
    s = socket.create_connection(("127.0.0.1", a.port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    version = c.execute_command("PS.SCORE", "fm", "MODEL", "FM", "COUNTS",
                                struct.pack("<I", FIELDS), "IDS", ids)[0]
    score_len = len(b"*2\r\n:%d\r\n$8\r\n" % version) + 8 + 2
    s.sendall(score)
    first = recv_exact_reply(s, score_len)
    assert first.startswith(b"*2\r\n:%d\r\n$8\r\n" % version), first
    ping_len = len(b"+PONG\r\n")
    tp, ts = [], []
    for i in range(a.latency_n):
        t = time.perf_counter()
        s.sendall(ping)
        recv_exact_reply(s, ping_len)
        tp.append(time.perf_counter() - t)
        t = time.perf_counter()
        s.sendall(score)
        recv_exact_reply(s, score_len)
        ts.append(time.perf_counter() - t)
    s.close()
    tp, ts = np.array(tp) * 1e6, np.array(ts) * 1e6
    p50p, p99p = np.percentile(tp, 50), np.percentile(tp, 99)
    p50s, p99s = np.percentile(ts, 50), np.percentile(ts, 99)
    print("\nlatency, %d alternated requests on one connection (usec):" % a.latency_n)
    print("  PING                   p50 %8.1f  p99 %8.1f" % (p50p, p99p))
    print("  PS.SCORE 1 x %d ids    p50 %8.1f  p99 %8.1f" % (FIELDS, p50s, p99s))
    print("  ratio score/ping       p50 %8.2f  p99 %8.2f  (target p99 <= 2)" % (p50s / p50p,
                                                                             p99s / p99p))
    print("uptime:", subprocess.run(["uptime"], stdout=subprocess.PIPE).stdout.decode().strip())


if __name__ == "__main__":
    main()
