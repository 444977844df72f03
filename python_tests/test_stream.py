"""ps-train stream: online training of a sparse job from a Redis Stream of events.

Two workers train one stream of ps-gen-ctr lines (with malformed entries mixed in) in one
consumer group. Exact accounting: every batch pushes [-events trained, -entries malformed]
into the job's tensor stream_events (SGD, LR 1) under the batch's exactly-once push ID, so
its value is exactly what was applied, each event once: it must equal the stream's length
minus the malformed entries, the malformed count, and no entry may stay pending. Then the
same with workers SIGKILLed at random points and others claiming their entries (a dead
worker's journaled batch is replayed under its own push ID: the server answers a
duplicate where its push had been applied). Progressive validation: the online AUC of the
last window is above a floor derived from the planted model's AUC on this data, and the
shared histogram the workers fill counts every event trained exactly once."""

import os
import random
import re
import signal
import subprocess
import threading
import time

import pytest

from faultlib import stop_holding_a_lease
from pshelpers import PS_TRAIN, pull_np, run_gen_ctr, run_ps_train as run
from test_train_cluster import cluster  # noqa: F401 (3 masters, no replicas)

GEN = ["--samples", 12000, "--test-samples", 2000, "--fields", 8, "--vocab", 30, "--seed", 5]
MALFORMED = [{"l": "garbage line"}, {"other": "1 1:2"}, {"l": "2 5:1"}, {"l": ""},
             {"l": "1 12x:1"}]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    if not os.path.exists(PS_TRAIN):
        pytest.fail("%s not found: run make client first" % PS_TRAIN, pytrace=False)
    d = tmp_path_factory.mktemp("stream")
    prefix = str(d / "ctr")
    run_gen_ctr(["--out", prefix] + GEN)
    with open(prefix + ".truth") as f:
        truth = dict(kv.split("=", 1) for kv in f.read().split()[1:])
    with open(prefix + ".train.libsvm") as f:
        lines = [ln.rstrip("\n") for ln in f]
    return prefix + ".train.libsvm", lines, truth


def fill(r, lines, seed, pace=0.0, stream="ev"):
    """XADDs the lines as entries {l: line} with the MALFORMED entries at random places.
    Returns the ids of the malformed entries."""
    rng = random.Random(seed)
    at = sorted(rng.sample(range(len(lines)), len(MALFORMED)))
    bad = []
    k = 0
    p = r.pipeline(transaction=False)
    for i, ln in enumerate(lines):
        while k < len(at) and at[k] == i:
            bad.append(r.xadd(stream, MALFORMED[k]) if not p.command_stack else None)
            if bad[-1] is None:
                p.execute()
                bad[-1] = r.xadd(stream, MALFORMED[k])
            k += 1
        p.xadd(stream, {"l": ln})
        if i % (200 if pace else 2000) == 0:
            p.execute()
            time.sleep(pace)
    p.execute()
    return sorted(b.decode() for b in bad)


def init_job(addr, train, job="s"):
    """A stream job: no train file (init --stream); 'train' is not read."""
    run(["init", "--addr", addr, "--job", job, "--model", "fm", "--stream", "ev",
         "--table-lr", 0.1, "--seed", 3])


def worker(addr, *extra, job="s"):
    args = [PS_TRAIN, "stream", "--addr", addr, "--job", job, "--stream", "ev",
            "--progress", "line", "--interval-ms", "200"] + [str(a) for a in extra]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL)


def finish(p, timeout=60):
    out, _ = p.communicate(timeout=timeout)
    return p.returncode, out.decode(errors="replace")


def counter(r, job="s"):
    """[events trained, entries malformed] from the job's stream_events tensor."""
    _, v = pull_np(r, "%s:stream_events:0" % job)
    return int(v[0]), int(v[1])


def journals_empty(r, stream="ev", job="s", group="ps-train"):
    """True when no consumer's journal holds a batch (every lease trained and dropped)."""
    keys = list(r.scan_iter(journal(stream, job, group, "*")))
    return bool(keys) and all(not r.hget(k, "b") for k in keys)


def journals(r, stream="ev", job="s", group="ps-train"):
    """{journal key: its fields} of every consumer (for failure messages)."""
    return {k.decode(): r.hgetall(k) for k in r.scan_iter(journal(stream, job, group, "*"))}


def journal(stream, job, group, consumer):
    """The journal key of a consumer (in the stream's slot: docs/design.md)."""
    return "{%s}:psj:%s:%s:%s" % (stream, job, group, consumer)


def claimed_from(r, consumer, timeout=60):
    """Waits until another worker's claim took the batches of 'consumer' (stopped while it
    held some): a claim empties its journal and bumps its epoch (docs/design.md)."""
    key = journal("ev", "s", "ps-train", consumer)
    ep = int(r.hget(key, "ep") or 0)
    t0 = time.monotonic()
    while int(r.hget(key, "ep") or 0) == ep:
        assert time.monotonic() - t0 < timeout, "no claim of %s's batches" % consumer
        time.sleep(0.02)


def histogram_events(r, job="s"):
    n = 0
    for key in r.scan_iter("psjob:{%s}:sauc:*" % job):
        n += sum(int(v) for v in r.hgetall(key).values())
    return n


def test_stream_two_workers_exactly_once(server, data, tmp_path):
    train, lines, truth = data
    r = server.client()
    addr = "127.0.0.1:%d" % server.port
    init_job(addr, train)
    bad_ids = fill(r, lines, 1)
    bad = len(bad_ids)
    log = str(tmp_path / "run.jsonl")
    # w1 without --overlap: the next batch is pulled after this one's push, not before its
    # gradient (both are pipelined: the next batch is leased and parsed meanwhile).
    ws = [worker(addr, "--consumer", "w%d" % i, "--idle-exit", 1500, "--batch", 128,
                 "--log-json", log, "--overlap", i == 0 and 1 or 0) for i in range(2)]
    outs = [finish(p) for p in ws]
    for rc, out in outs:
        assert rc == 0, out
    allout = "".join(o for _, o in outs)
    trained, malformed = counter(r)
    assert (trained, malformed) == (len(lines), bad), allout
    assert journals_empty(r)
    # Every malformed entry is logged with its id.
    ids = re.findall(r"malformed entry (\S+) of ev", allout)
    assert sorted(ids) == bad_ids, allout
    import json
    events = [json.loads(ln) for ln in open(log)]
    assert sorted(e["id"] for e in events if e["event"] == "malformed") == bad_ids
    done = [e for e in events if e["event"] == "stream_done"]
    assert len(done) == 2 and sum(e["samples"] for e in done) == len(lines), done
    assert all(0.5 < e["auc"] < 1 and e["loss"] > 0 for e in done), done
    stats = [dict(kv.split("=", 1) for kv in m.split())
             for m in re.findall(r"^STREAM (.*)$", allout, re.M)]
    assert sum(int(s["events"]) for s in stats) == len(lines)
    assert all(int(s["events"]) > 0 for s in stats), stats   # both workers trained
    assert all(int(s["piped"]) > 0 for s in stats), stats
    # Progressive validation: every event scored once into the shared histogram; the
    # last window's online AUC is above a floor from the planted model's AUC.
    assert histogram_events(r) == len(lines)
    floor = 0.5 + 0.5 * (float(truth["truth_test_auc"]) - 0.5)
    aucs = [float(x) for x in re.findall(r"auc (\d\.\d+) logloss", allout)]
    assert aucs and max(aucs) > floor, (floor, aucs)
    g = [float(x) for x in re.findall(r"global_auc (\d\.\d+)", allout)]
    assert g and g[-1] > floor - 0.05, (floor, g)
    st = run(["status", "--addr", addr, "--job", "s"]).out
    m = re.search(r"stream: events trained (\d+), malformed entries (\d+) .* global progressive "
                  r"AUC (\d\.\d+) \(\+-(\d\.\d+)\) over the last 60 s \((\d+) events\)", st)
    assert m, st
    assert (int(m.group(1)), int(m.group(2)), int(m.group(5))) == (len(lines), bad, len(lines))
    assert float(m.group(3)) > floor - 0.05 and float(m.group(4)) < 0.01, st
    # An idle stream blocks in XREAD: 1.5 s of waiting costs little CPU.
    import resource
    u0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    rc, out = finish(worker(addr, "--stream", "quiet", "--idle-exit", 1500))
    u1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (u1.ru_utime - u0.ru_utime) + (u1.ru_stime - u0.ru_stime)
    assert rc == 0 and "events=0 " in out and cpu < 0.5, (cpu, out)


def test_stream_job_init_needs_no_train_file(server, data):
    """init --stream makes a stream job without --train: no file read, no tasks; the config
    records the stream; a worker trains it; `work` refuses it with the reason; a second
    init naming another stream, or without --train on a file job, is refused (exit 2)."""
    train, lines, _ = data
    r = server.client()
    addr = "127.0.0.1:%d" % server.port
    p = run(["init", "--addr", addr, "--job", "s", "--model", "fm", "--stream", "ev",
             "--fields", 8, "--capacity", 100])
    assert "a stream job: libsvm lines from stream ev" in p.out, p.out
    cfg = {k.decode(): v.decode() for k, v in r.hgetall("psjob:{s}:config").items()}
    assert (cfg["train"], cfg["stream"], cfg["tasks"], cfg["state"]) == ("", "ev", "0", "ready")
    assert cfg["fields"] == "8" and cfg["capacity"] == "100"
    assert not r.exists("psjob:{s}:tasks")
    assert run(["init", "--addr", addr, "--job", "s", "--model", "fm", "--stream", "ev",
                "--fields", 8, "--capacity", 100]).returncode == 0      # same settings: continues
    p = run(["init", "--addr", addr, "--job", "s", "--model", "fm", "--stream", "other"],
            check=False)
    assert p.returncode == 2 and "--stream other (job: ev)" in p.out, p.out
    p = run(["work", "--addr", addr, "--job", "s"], check=False)
    assert p.returncode == 1 and "a stream job (init --stream ev, no train file)" in p.out, p.out
    p = run(["init", "--addr", addr, "--job", "f", "--model", "fm"], check=False)
    assert p.returncode == 2 and "or --stream KEY" in p.out, p.out
    run(["init", "--addr", addr, "--job", "f", "--model", "fm", "--train", train])
    p = run(["init", "--addr", addr, "--job", "f", "--model", "fm", "--stream", "ev"], check=False)
    assert p.returncode == 2 and "no --train (job: %s)" % train in p.out, p.out
    p = r.pipeline(transaction=False)
    for ln in lines[:500]:
        p.xadd("ev", {"l": ln})
    p.execute()
    rc, out = finish(worker(addr, "--idle-exit", 300))
    assert rc == 0 and "events=500 " in out, out
    assert counter(r) == (500, 0)
    st = run(["status", "--addr", addr, "--job", "s"]).out
    assert "(stream job)" in st and "events trained 500" in st, st


@pytest.mark.parametrize("rounds", [3])
def test_stream_sigkill_exactly_once(server, data, rounds):
    """Workers SIGKILLed at random points; the survivors (and restarts, one under the dead
    worker's name) claim and replay: every event still trained exactly once."""
    train, lines, _ = data
    r = server.client()
    addr = "127.0.0.1:%d" % server.port
    init_job(addr, train)
    feeder = threading.Thread(target=fill, args=(server.client(), lines, 2, 0.07))
    feeder.start()   # 12000 events in about 4 s, 5 of them malformed
    bad = len(MALFORMED)
    rng = random.Random(7)
    common = ["--batch", 32, "--claim-idle-ms", 300, "--batch-ms", 20]
    survivor = worker(addr, "--consumer", "keeper", "--idle-exit", 4000, *common)
    outs = []
    for k in range(rounds):
        victim = worker(addr, "--consumer", "v%d" % k, *common)
        time.sleep(rng.uniform(0.3, 0.8))
        if k == 0:      # killed while it holds a lease (between a lease and its push's ack)
            held0 = stop_holding_a_lease(victim.pid, r, journal("ev", "s", "ps-train", "v0"))
        victim.send_signal(signal.SIGKILL)
        outs.append(finish(victim)[1])
    # A worker paused (SIGSTOP) longer than --claim-idle-ms while it holds a lease, then
    # resumed: a claimer replays its batches under their push IDs; the batch it was
    # leasing is dropped by it (fenced), one it pushes meanwhile is answered a duplicate.
    paused = worker(addr, "--consumer", "paused", "--idle-exit", 2000, *common)
    time.sleep(0.5)
    held = stop_holding_a_lease(paused.pid, r, journal("ev", "s", "ps-train", "paused"))
    claimed_from(r, "paused")
    paused.send_signal(signal.SIGCONT)
    feeder.join()
    # A restart under a dead worker's name replays its own journal first.
    again = worker(addr, "--consumer", "v0", "--idle-exit", 2000, *common, "--batch", 16)
    for p in (survivor, again, paused):
        rc, out = finish(p)
        assert rc == 0, out
        outs.append(out)
    allout = "\n".join(outs)
    # Every batch the killed worker held when it died, and every batch the paused worker
    # held while it was stopped, was replayed by another worker (or by the restart under
    # the dead one's name) under its push ID.
    for line in held0 + held:
        cid, seq = line.split()[:2]
        assert "of %s, seq %s\n" % (cid, seq) in allout, (held, allout)
    trained, malformed = counter(r)
    assert (trained, malformed) == (len(lines), bad), allout
    assert journals_empty(r), allout
    assert "replaying the journaled batch" in allout, allout
    # The faults landed on the pipeline too: batches were pulled and leased ahead of the
    # one being trained (the feeder's bursts fill batches faster than they train).
    assert sum(int(x) for x in re.findall(r"piped=(\d+)", allout)) > 0, allout
    info = r.execute_command("PS.INFO", "s:stream_events:0")
    d = dict(zip(info[::2], info[1::2]))
    assert d[b"dedup_hits"] >= 1, d     # a replayed batch had been applied: duplicate
    print("replays:", allout.count("replaying the journaled batch"), "dedup_hits:",
          d[b"dedup_hits"], "fenced:", re.findall(r"fenced=(\d+)", allout))


def test_stream_sigkill_in_the_pipeline_exactly_once(server, tmp_path):
    """A stream filled ahead (no waiting for events): each worker runs its pipeline (the
    next batch leased, parsed and pulled while this one trains, so its journal holds up
    to three batches). Workers are SIGKILLed and SIGSTOPped past --claim-idle-ms in it:
    every event is still trained exactly once, and the killed ones' batches replayed."""
    prefix = str(tmp_path / "big")
    run_gen_ctr(["--out", prefix, "--samples", 60000, "--test-samples", 10, "--fields", 8,
                 "--vocab", 1000, "--seed", 9])
    with open(prefix + ".train.libsvm") as f:
        lines = [ln.rstrip("\n") for ln in f]
    r = server.client()
    addr = "127.0.0.1:%d" % server.port
    init_job(addr, prefix + ".train.libsvm")
    fill(r, lines, 3)
    common = ["--batch", 128, "--claim-idle-ms", 300]
    rng = random.Random(11)
    keeper = worker(addr, "--consumer", "keeper", "--idle-exit", 1500, *common)
    victims = [worker(addr, "--consumer", "v%d" % k, *common) for k in range(2)]
    paused = worker(addr, "--consumer", "paused", "--idle-exit", 1500, *common)
    time.sleep(rng.uniform(0.05, 0.15))
    held = []
    for k, v in enumerate(victims):
        held += stop_holding_a_lease(v.pid, r, journal("ev", "s", "ps-train", "v%d" % k))
        v.send_signal(signal.SIGKILL)
        finish(v)
    held += stop_holding_a_lease(paused.pid, r, journal("ev", "s", "ps-train", "paused"))
    claimed_from(r, "paused")
    paused.send_signal(signal.SIGCONT)
    outs = []
    for p in (keeper, paused):
        rc, out = finish(p)
        assert rc == 0, out
        outs.append(out)
    allout = "\n".join(outs)
    for line in held:
        cid, seq = line.split()[:2]
        assert "of %s, seq %s\n" % (cid, seq) in allout, (held, allout)
    print("batches held when stopped:", len(held), "replays:",
          allout.count("replaying the journaled batch"))
    trained, malformed = counter(r)
    assert (trained, malformed) == (len(lines), len(MALFORMED)), allout
    assert journals_empty(r), allout
    assert sum(int(x) for x in re.findall(r"piped=(\d+)", allout)) > 0, allout


@pytest.mark.slow
def test_stream_cluster_two_workers_one_killed_exactly_once(cluster, data):
    """The same accounting on a 3-master cluster: the table shards, the dense tensors and
    the counter on several masters, the stream and its journals in one slot; one worker is
    SIGKILLed mid-stream and the other claims and replays its batch."""
    train, lines, _ = data
    lines = lines[:6000]
    seeds = ",".join(n.addr for n in cluster.nodes)
    run(["init", "--addr", seeds, "--job", "s", "--model", "fm", "--train", train,
         "--table-lr", 0.1, "--seed", 3])
    r = cluster.node_for_key("ev").client()
    feeder = threading.Thread(target=fill, args=(r, lines, 3, 0.04))
    feeder.start()
    common = ["--batch", 32, "--claim-idle-ms", 300, "--batch-ms", 20]
    keeper = worker(seeds, "--consumer", "keeper", "--idle-exit", 2500, *common)
    victim = worker(seeds, "--consumer", "victim", *common)
    time.sleep(0.6)
    stop_holding_a_lease(victim.pid, r, journal("ev", "s", "ps-train", "victim"))
    victim.send_signal(signal.SIGKILL)
    out = finish(victim)[1]
    feeder.join()
    rc, out2 = finish(keeper)
    assert rc == 0, out + out2
    key = "s:stream_events:0"
    _, v = pull_np(cluster.node_for_key(key).client(), key)
    assert (int(v[0]), int(v[1])) == (len(lines), len(MALFORMED)), out + out2
    assert journals_empty(r)
    masters = {cluster.node_for_key(k).port for k in ("ev", key, "s:emb:0{3}", "s:emb:1{2}")}
    assert len(masters) >= 2, masters
    assert "replaying the journaled batch" in out2, out2


@pytest.fixture
def cluster_r(module_path):
    """3 masters with 1 replica each (cluster-node-timeout 2000 ms: a killed master's
    replica takes over in about 3 s)."""
    import psserver
    c = psserver.RedisClusterHelper(masters=3, replicas=1, node_timeout=2000)
    yield c
    c.cleanup()


def live_owner(cluster, key):
    """The master serving 'key' per a live node's CLUSTER SLOTS."""
    import psserver
    live = [n for n in cluster.nodes if n.is_alive()]
    slot = psserver.key_slot(key)
    for a, b, m, *_ in live[0].client().execute_command("CLUSTER", "SLOTS"):
        if int(a) <= slot <= int(b):
            return next(n for n in live if n.port == int(m[1]))
    raise AssertionError("no owner of slot %d" % slot)


@pytest.mark.slow
def test_stream_master_killed_replica_promoted_exactly_once(cluster_r, data):
    """Two workers with --wait 1 train a stream on 3 masters with a replica each; the master
    that holds the stream, its consumer group, the journals and the stream_events counter
    is SIGKILLed while they train (batches journaled, pushed, not yet XACKed), its replica
    is promoted, the rest of the stream is XADDed to it, and the job finishes: every event
    trained exactly once (the counter, pushed under each batch's push ID, equals the
    stream's length; nothing pending)."""
    import psserver
    train, lines, _ = data
    part1, part2 = lines[:2000], lines[2000:6000]
    seeds = ",".join(n.addr for n in cluster_r.nodes)
    run(["init", "--addr", seeds, "--job", "s", "--model", "fm", "--train", train,
         "--table-lr", 0.1, "--seed", 3])
    counter_key = "s:stream_events:0"
    victim = cluster_r.node_for_key(counter_key)
    stream = next(s for s in ("ev%d" % i for i in range(1000))
                  if cluster_r.node_for_key(s) is victim)
    (replica,) = cluster_r.replicas_of(victim)
    r = victim.client()
    # --claim-idle-ms above the seconds a batch may take while a shard is degraded (each
    # push WAITs up to 1 s): else a worker replaying claimed batches is claimed from in turn.
    common = ["--stream", stream, "--batch", 32, "--batch-ms", 20, "--claim-idle-ms", 5000,
              "--wait", 1, "--idle-exit", 6000]
    ws = [worker(seeds, "--consumer", "w%d" % i, *common) for i in range(2)]
    # Part 1 paced (about 1 s), the workers keeping up; the kill follows the last chunk's
    # XADD at once, while its batches are being read, journaled and pushed.
    for i in range(0, len(part1), 100):
        p = r.pipeline(transaction=False)
        for ln in part1[i:i + 100]:
            p.xadd(stream, {"l": ln})
        p.execute()
        if i + 100 < len(part1):
            time.sleep(0.05)
    before = counter(r)[0]
    victim.kill()
    rc = replica.client()
    psserver.wait_until(lambda: rc.info("replication")["role"] == "master", 30,
                        what="the replica promoted")
    bad = fill(rc, part2, 4, stream=stream)     # 5 malformed entries among them
    outs = [finish(p, timeout=90) for p in ws]
    allout = "\n".join(o for _, o in outs)
    for code, out in outs:
        assert code == 0, allout
    owner = live_owner(cluster_r, counter_key)
    assert owner is replica
    trained, malformed = counter(owner.client())
    assert (trained, malformed) == (len(part1) + len(part2), len(bad)), allout
    assert journals_empty(rc, stream), (journals(rc, stream), allout)
    assert rc.xlen(stream) == len(part1) + len(part2) + len(bad)
    stats = [dict(kv.split("=", 1) for kv in m.split())
             for m in re.findall(r"^STREAM (.*)$", allout, re.M)]
    assert len(stats) == 2
    print("trained just before the kill: %d of %d; replays %d; fenced %s; journal WAITs "
          "short %s" % (before, len(part1), allout.count("replaying the journaled batch"),
                        [s["fenced"] for s in stats], [s["journal_wait_short"] for s in stats]))
    assert 0 < before < len(part1)      # the kill landed mid-stream
    # The promoted master has no replica: the journal's WAIT 1 came back short (policy
    # degrade: counted, training went on).
    assert sum(int(s["journal_wait_short"]) for s in stats) > 0, allout
