"""An endless stream of ever-new ids: the server's memory and the workers' RSS stay flat.

A generator XADDs events whose every id is new (8 fields, ids never repeated) and trims the
stream (XADD MAXLEN ~); two `ps-train stream` workers train them into a table with CAPACITY
(least recently pushed rows evicted) whose removals go to the tombstone log (a ring of
TOMBSTONES entries per shard). Warm-up ends when every table shard is at its capacity, every
shard's tombstone log is full and the stream is at its MAXLEN; from then on the test samples
once a second: the server's used_memory, MEMORY USAGE of every key (table shards, dense
tensors, the counter, the stream with its consumer group PEL, the journals, the job config),
and each worker's VmRSS.

The bound asserted: after warm-up, used_memory (less the progressive-AUC histogram hashes,
which are checked apart: one per 10 s, each expiring after SW_KEEP_S = 120 s) grows by less
than GROW_MAX (1.5 MiB), each worker's RSS by less than 2 MiB. It cannot pass by accident:
the table evicts during the measured interval, and what those evicted rows would take if they
stayed (rows evicted meanwhile x the shard's bytes per row) is asserted to be over 10x
GROW_MAX; likewise the entries trimmed from the stream meanwhile x bytes per entry, and the
removals that fell off the tombstone logs x 16 bytes. So a table without eviction, a stream
without trimming, or an unbounded tombstone log would each break the bound. And every event
XADDed is trained exactly once (the stream_events counter), so the workers kept up: nothing
was trimmed before it was trained. The RSS bound catches a worker leak of about 10 bytes per
event or 3 KB per batch (some 200k events, 700 batches per worker are measured)."""

import random
import subprocess
import threading
import time

from pshelpers import PS_TRAIN, info, pull_np, run_ps_train as run

FIELDS = 8
MAXLEN = 20000
CAPACITY = 16000
SHARDS = 2
TOMBSTONES = 8192
GROW_MAX = 1.5 * 2 ** 20
RSS_MAX = 2 * 2 ** 20
MEASURE_S = 7.0


def rss(pid):
    with open("/proc/%d/status" % pid) as f:
        for ln in f:
            if ln.startswith("VmRSS:"):
                return int(ln.split()[1]) * 1024
    raise AssertionError("no VmRSS for %d" % pid)


class Generator(threading.Thread):
    """XADDs events with ever-new ids, MAXLEN ~ trimmed, at most MAXLEN/2 ahead of what the
    consumer group has read (so no entry is trimmed before it is read)."""

    def __init__(self, r):
        super().__init__(daemon=True)
        self.r, self.n, self.stop = r, 0, threading.Event()
        self.rng = random.Random(1)

    def line(self):
        ids = [(f << 56) | (self.n * FIELDS + f + 1) for f in range(FIELDS)]
        self.n += 1
        return "%d %s" % (self.rng.random() < 0.3, " ".join("%d:1" % i for i in ids))

    def run(self):
        while not self.stop.is_set():
            g = self.r.xinfo_groups("ev")
            read = g[0]["entries-read"] or 0 if g else 0
            if self.n - read > MAXLEN // 2:
                time.sleep(0.005)
                continue
            p = self.r.pipeline(transaction=False)
            for _ in range(500):
                p.xadd("ev", {"l": self.line()}, maxlen=MAXLEN, approximate=True)
            p.execute()


def sample(r, keys, workers):
    mem = {k.decode(): r.memory_usage(k, samples=0) or 0 for k in keys}
    used = r.info("memory")["used_memory"]
    sauc = sum(v for k, v in mem.items() if ":sauc:" in k)
    return dict(used=used - sauc, sauc=sauc, keys=mem, rss=[rss(w.pid) for w in workers])


def test_endless_stream_memory_stays_flat(server, tmp_path):
    r = server.client()
    addr = "127.0.0.1:%d" % server.port
    seed = tmp_path / "seed.libsvm"
    seed.write_text("1 %d:1\n0 %d:1\n" % (1 << 56, 2 << 56))
    run(["init", "--addr", addr, "--job", "m", "--model", "fm", "--train", str(seed),
         "--capacity", CAPACITY, "--table-shards", SHARDS, "--seed", 3])
    shards = sorted(k.decode() for k in r.keys("m:emb:*"))
    assert len(shards) == SHARDS, shards
    for k in shards:
        r.execute_command("PS.CONFIG", k, "TOMBSTONES", TOMBSTONES)
    r.xgroup_create("ev", "ps-train", id="0", mkstream=True)
    gen = Generator(server.client())
    gen.start()
    ws = [subprocess.Popen([str(a) for a in [PS_TRAIN, "stream", "--addr", addr, "--job", "m",
                                             "--stream", "ev", "--consumer", "w%d" % i,
                                             "--batch", 256, "--idle-exit", 1500,
                                             "--progress", "none"]],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
          for i in range(2)]
    try:
        def warm():
            for k in shards:
                d = info(r, k)
                if int(d["evicted_capacity"]) == 0 or int(d["tombstone_horizon"]) == 0:
                    return False
            return r.xlen("ev") >= MAXLEN * 0.9
        t0 = time.monotonic()
        while not warm():
            assert time.monotonic() - t0 < 60, "no warm-up in 60 s"
            assert all(w.poll() is None for w in ws)
            time.sleep(0.2)
        time.sleep(1.0)
        keys = r.keys("*")
        base = sample(r, keys, ws)
        ev0 = {k: info(r, k) for k in shards}
        xadded0 = gen.n
        samples = [base]
        # At least MEASURE_S, and until the evictions, trims and fallen-off removals of the
        # interval would have added over 10x GROW_MAX if any of them were not bounded.
        t1 = time.monotonic()
        entry_bytes = base["keys"]["ev"] / max(r.xlen("ev"), 1)
        while True:
            time.sleep(1.0)
            samples.append(sample(r, r.keys("*"), ws))
            ev1 = {k: info(r, k) for k in shards}
            xadded1 = gen.n
            evicted = sum(int(ev1[k]["evicted_capacity"]) - int(ev0[k]["evicted_capacity"])
                          for k in shards)
            if time.monotonic() - t1 >= MEASURE_S and evicted * 16 > 10 * GROW_MAX and \
                    (xadded1 - xadded0) * entry_bytes > 10 * GROW_MAX:
                break
            assert time.monotonic() - t1 < 40, "too few events in 40 s: %d" % (xadded1 - xadded0)
    finally:
        gen.stop.set()
        gen.join(10)
    outs = [w.communicate(timeout=60)[0].decode(errors="replace") for w in ws]
    for w, out in zip(ws, outs):
        assert w.returncode == 0, out
    # Exactly once, nothing trimmed before it was trained.
    _, v = pull_np(r, "m:stream_events:0")
    assert (int(v[0]), int(v[1])) == (gen.n, 0), "\n".join(outs)

    grow = max(s["used"] for s in samples) - base["used"]
    rss_grow = [max(s["rss"][i] for s in samples) - base["rss"][i] for i in range(len(ws))]
    # What unbounded structures would have added over the measured interval.
    row_bytes = min(base["keys"][k] / max(int(ev0[k]["rows"]), 1) for k in shards)
    fell_off = [int(ev1[k]["tombstone_horizon"]) > int(ev0[k]["tombstone_horizon"])
                for k in shards]
    trimmed = xadded1 - xadded0
    report = dict(grow=grow, rss_grow=rss_grow, evicted=evicted, row_bytes=round(row_bytes, 1),
                  trimmed=trimmed, entry_bytes=round(entry_bytes, 1), used=base["used"],
                  events=gen.n, seconds=round(time.monotonic() - t1, 1),
                  sauc=[s["sauc"] for s in samples],
                  keys={k: v for k, v in base["keys"].items() if ":sauc:" not in k})
    print(report)
    assert evicted * row_bytes > 10 * GROW_MAX, report     # a table without CAPACITY
    assert trimmed * entry_bytes > 10 * GROW_MAX, report   # a stream without MAXLEN
    assert all(fell_off), report         # every log is full: removals fall off its ring ...
    assert evicted * 16 > 10 * GROW_MAX, report            # ... else it would have grown
    assert grow < GROW_MAX, report
    assert max(rss_grow) < RSS_MAX, report
    # The histogram hashes: one per 10 s slot, each kept 120 s.
    for k in r.keys("psjob:{m}:sauc:*"):
        assert 0 < r.ttl(k) <= 120
