#!/usr/bin/env python3
"""Online training throughput: `ps-train stream` from a Redis Stream against offline
`ps-train work` on the same data read from a file, in the same run (issue 23 target:
online >= 0.8x offline).

ps-gen-ctr writes --samples lines (26 fields, FM); the same lines are XADDed to a stream
(entries {l: line}, not timed). Then, alternating --reps times on one server, each on a
fresh job of the same settings (FM, batch --batch, one worker):
  offline: ps-train init --train FILE (one task) + ps-train work: the events/s the
           worker reports (samples / its train time, "samples/s" of its final lines
           is not printed by work, so: samples / wall time of the work process);
  online:  ps-train stream --max-events N on a fresh consumer group: events / the wall
           time of the stream process.
Also events per CPU second of the worker process (user + sys, getrusage of the child),
which the machine's other load disturbs less, and the server's main-thread CPU seconds
meanwhile (INFO cpu).
Both wall times include connecting and loading the job. The machine may be loaded: the
figure to quote is the ratio of the medians measured in the same run, with `uptime`.

With --wait 1 the server gets a replica and both workers run with --wait 1 (every push
WAITed; the stream worker also WAITs for its journal before each batch's push, so a
failover of the stream's master cannot double an event): the same ratio with durability.

Then the server's commands per batch and their us (INFO commandstats) of the last rep.

    bench/stream_bench.py [--samples N] [--batch B] [--reps R] [--wait N] [--build DIR]"""

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "python_tests"))
import psserver  # noqa: E402

B = os.path.join(REPO, "build")


CPU = [0.0]   # CPU seconds (user + sys) of the last run's process


def set_build(d):
    global B
    B = os.path.abspath(d)


def run(args, **kw):
    t0 = time.monotonic()
    u0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run([os.path.join(B, args[0])] + [str(a) for a in args[1:]],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    dt = time.monotonic() - t0
    u1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU[0] = (u1.ru_utime - u0.ru_utime) + (u1.ru_stime - u0.ru_stime)
    if p.returncode != 0:
        sys.exit("%s failed:\n%s" % (" ".join(map(str, args)), p.stdout))
    return dt, p.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=200000)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--wait", type=int, default=0, help="replicas to start and WAIT for")
    ap.add_argument("--build", default=B, help="the build directory (an A/B run of two "
                    "builds: same machine, alternate runs)")
    a = ap.parse_args()
    set_build(a.build)
    d = tempfile.mkdtemp(prefix="streambench-")
    prefix = os.path.join(d, "ctr")
    run(["ps-gen-ctr", "--out", prefix, "--samples", a.samples, "--fields", 26,
         "--vocab", 10000, "--seed", 1])
    train = prefix + ".train.libsvm"
    srv = psserver.RedisServer(module=os.path.join(B, "ps.so"))
    reps = []
    wait = ["--wait", a.wait] if a.wait else []
    try:
        for _ in range(a.wait):
            reps.append(psserver.start_replica(srv, module=os.path.join(B, "ps.so")))
        r = srv.client()
        addr = "127.0.0.1:%d" % srv.port
        with open(train) as f:
            p = r.pipeline(transaction=False)
            for i, line in enumerate(f):
                p.xadd("ev", {"l": line.rstrip("\n")})
                if i % 5000 == 4999:
                    p.execute()
            p.execute()
        n = r.xlen("ev")
        job = ["--model", "fm", "--train", train, "--batch", a.batch, "--table-lr", 0.1,
               "--task-bytes", 1 << 40, "--seed", 3]
        off, on, offc, onc, offs, ons = [], [], [], [], [], []

        def server_cpu():
            i = r.info("cpu")
            return float(i["used_cpu_user_main_thread"]) + float(i["used_cpu_sys_main_thread"])

        def commands(batches):
            """Server commands and their us per batch since the last CONFIG RESETSTAT (the
            usec of EXEC and EVAL include the commands they ran, also listed)."""
            st = r.info("commandstats")
            per = {k[len("cmdstat_"):]: (v["calls"] / batches, v["usec"] / batches)
                   for k, v in st.items() if not k.startswith("cmdstat_config")}
            top = sum(c for k, (c, _) in per.items())
            return "%.1f commands/batch: %s" % (top, ", ".join(
                "%s %.2f x %.0f us" % (k, c, u) for k, (c, u) in
                sorted(per.items(), key=lambda kv: -kv[1][1]) if u >= 1))
        nb = (n + a.batch - 1) // a.batch
        cmd_off, cmd_on = [], []
        for k in range(a.reps):
            run(["ps-train", "init", "--addr", addr, "--job", "off%d" % k] + job)
            s0 = server_cpu()
            r.config_resetstat()
            dt, _ = run(["ps-train", "work", "--addr", addr, "--job", "off%d" % k,
                         "--progress", "none"] + wait)
            offs.append(server_cpu() - s0)
            cmd_off.append(commands(nb))
            off.append(n / dt)
            offc.append(n / CPU[0])
            run(["ps-train", "init", "--addr", addr, "--job", "on%d" % k] + job)
            s0 = server_cpu()
            r.config_resetstat()
            dt, out = run(["ps-train", "stream", "--addr", addr, "--job", "on%d" % k,
                           "--stream", "ev", "--group", "g%d" % k, "--max-events", n,
                           "--progress", "none"] + wait)
            ons.append(server_cpu() - s0)
            cmd_on.append(commands(nb))
            assert "events=%d " % n in out, out
            phases = re.findall(r" t_(\w+)=([0-9.]+)", out)
            on.append(n / dt)
            onc.append(n / CPU[0])
            print("rep %d: offline %.0f events/s (%.0f per worker CPU s, server CPU %.2f s), "
                  "online %.0f events/s (%.0f per worker CPU s, server CPU %.2f s)" %
                  (k, off[-1], offc[-1], offs[-1], on[-1], onc[-1], ons[-1]), flush=True)
        mo, mn = statistics.median(off), statistics.median(on)
        print("%sevents %d, batch %d: offline (ps-train work, file) median %.0f events/s; "
              "online (ps-train stream) median %.0f events/s; ratio %.2f" %
              ("--wait %d (%d replica%s): " % (a.wait, a.wait, "s" if a.wait > 1 else "")
               if a.wait else "", n, a.batch, mo, mn, mn / mo))
        co, cn = statistics.median(offc), statistics.median(onc)
        print("per worker CPU second: offline median %.0f events, online median %.0f events; "
              "ratio %.2f" % (co, cn, cn / co))
        so, sn = statistics.median(offs), statistics.median(ons)
        print("server main-thread CPU seconds per run: offline median %.2f, online median %.2f"
              % (so, sn))
        print("server, offline (last rep):", cmd_off[-1])
        print("server, online (last rep):", cmd_on[-1])
        print("online worker's wall time per batch (last rep), us: %s" % ", ".join(
            "%s %.0f" % (k, float(v) * 1000.0 / nb) for k, v in phases if float(v) > 0))
        print("uptime:", subprocess.run(["uptime"], stdout=subprocess.PIPE,
                                        text=True).stdout.strip())
    finally:
        for rp in reps:
            rp.cleanup()
        srv.stop()


if __name__ == "__main__":
    main()
