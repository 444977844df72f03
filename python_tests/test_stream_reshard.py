"""ps-train stream while the stream's hash slot migrates to another master (resharding).

Every read of the stream goes through a lease step, one MULTI/EXEC (libps
psTransactionAsync) of a script, XREADGROUP ... NOACK and a script, on the stream and the
consumer's journal ({ev}:psj:...), which share the stream's slot. The test moves that slot
to another master the way redis-cli --cluster reshard does, key by key with pauses, while
two workers train (the table shards and the dense tensors stay where they are):

1. CLUSTER SETSLOT IMPORTING/MIGRATING, then MIGRATE of w0's journal: the source, which
   holds the stream but not the journal, answers w0's lease steps TRYAGAIN (backed off and
   resent whole); w1's claims read w0's journal there, which is gone (Redis 7.0: "non
   local key"; this killed w1 before ClaimLua skipped such a journal);
2. MIGRATE of the stream while w1 is SIGSTOPped holding leased batches: w0's lease steps are
   answered ASK (the source holds neither key) and run on the target after ASKING; w1,
   resumed, pushes what it held and meets TRYAGAIN (its journal is still on the source);
3. MIGRATE of the last journal: both ASK;
4. SETSLOT NODE on every master: MOVED (and an idle worker's XREAD BLOCK is unblocked
   with MOVED).

Exactly once: the job's stream_events tensor equals [events, malformed], no journal holds a
batch, both workers exit 0; the servers' error and command statistics show that the
workers met TRYAGAIN, ASK (and sent ASKING) and MOVED, not slept through them (the feeder
of the stream's second part writes to the node that holds it, so the counts are the
workers')."""

import signal
import threading
import time

import psserver
from faultlib import stop_holding_a_lease
from test_stream import (MALFORMED, counter, data, fill, finish, init_job,  # noqa: F401
                         journal, journals_empty, worker)
from test_train_cluster import cluster  # noqa: F401 (3 masters, no replicas)


def node_id(node):
    return node.client().execute_command("CLUSTER", "MYID").decode()


def stat(node, section, name, field):
    """A counter of INFO errorstats / commandstats ('errorstat_ASK', 'count'), 0 if none."""
    v = node.client().info(section).get(name, {})
    if isinstance(v, str):      # redis-py leaves "count=N" (errorstats) unparsed
        v = dict(kv.split("=", 1) for kv in v.split(","))
    return int(v.get(field, 0))


def tryagains(*nodes):
    return sum(stat(n, "errorstats", "errorstat_TRYAGAIN", "count") for n in nodes)


def migrate(src, dst, keys):
    s = src.client()
    s.execute_command("MIGRATE", "127.0.0.1", dst.port, "", 0, 5000, "KEYS", *keys)


def test_stream_slot_migrates_while_two_workers_train_exactly_once(cluster, data):
    _, lines, _ = data
    seeds = ",".join(n.addr for n in cluster.nodes)
    init_job(seeds, None)
    slot = psserver.key_slot("ev")
    src = cluster.node_for_key("ev")
    dst = next(m for m in cluster.masters() if m.port != src.port)
    others = [m for m in cluster.masters() if m.port not in (src.port, dst.port)]
    r = src.client()
    bad = fill(r, lines[:4000], 1)
    # --claim-idle-ms 1500: a claim every 375 ms, so w1's claims read w0's journal in step 1.
    common = ["--batch", 32, "--batch-ms", 20, "--claim-idle-ms", 1500, "--idle-exit", 2500]
    ws = {name: worker(seeds, "--consumer", name, *common) for name in ("w0", "w1")}
    jk = {name: journal("ev", "s", "ps-train", name) for name in ws}
    psserver.wait_until(lambda: all(r.exists(k) for k in jk.values()), 20,
                        what="both workers journaled")
    # The rest of the stream is fed during the migration, paced, to the node that holds the
    # stream (ASKING first once it moved): the redirects the servers count are the workers'.
    home, asked, lock = [src], [0], threading.Lock()
    feed_done = threading.Event()
    feed_err = []

    def feed():
        try:
            rest = lines[4000:]
            for i in range(0, len(rest), 100):
                with lock:
                    p = home[0].client().pipeline(transaction=False)
                    for ln in rest[i:i + 100]:
                        if home[0] is dst:
                            p.execute_command("ASKING")
                            asked[0] += 1
                        p.xadd("ev", {"l": ln})
                    p.execute()
                time.sleep(0.05)
        except Exception as e:  # noqa: BLE001 (reported by the test)
            feed_err.append(repr(e))
        finally:
            feed_done.set()

    feeder = threading.Thread(target=feed)
    feeder.start()
    try:
        before = counter(cluster.node_for_key("s:stream_events:0").client())[0]
        ask0, try0 = stat(src, "errorstats", "errorstat_ASK", "count"), tryagains(src, dst)
        dst.client().execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", node_id(src))
        r.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", node_id(dst))
        time.sleep(0.3)
        # 1. w0's journal: TRYAGAIN for w0, w1's claims cannot read it.
        migrate(src, dst, [jk["w0"]])
        time.sleep(0.8)
        # 2. The stream, with w1 stopped while it holds leased batches: ASK for w0.
        for name, p in ws.items():
            assert p.poll() is None, "%s exited %s in the migration" % (name, p.returncode)
        held = stop_holding_a_lease(ws["w1"].pid, r, jk["w1"])
        with lock:
            migrate(src, dst, ["ev"])
            home[0] = dst
        ws["w1"].send_signal(signal.SIGCONT)
        time.sleep(0.8)
        # 3. The last journal: every key on the target, the source answers ASK.
        left = r.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100)
        assert left, "nothing left to migrate"
        migrate(src, dst, left)
        time.sleep(0.5)
        for n in [dst, src] + others:
            n.client().execute_command("CLUSTER", "SETSLOT", slot, "NODE", node_id(dst))
        psserver.wait_until(lambda: cluster.node_for_key("ev").port == dst.port, 10,
                            what="the slot served by the target")
        ask = stat(src, "errorstats", "errorstat_ASK", "count") - ask0
        tryagain = tryagains(src, dst) - try0
        during = counter(cluster.node_for_key("s:stream_events:0").client())[0]
        feeder.join(60)
    except BaseException:
        for p in ws.values():
            p.kill()
        print("\n".join(finish(p)[1] for p in ws.values()))
        raise
    finally:
        feed_done.wait(60)
    outs = {name: finish(p, timeout=60) for name, p in ws.items()}
    allout = "\n".join(o for _, o in outs.values())
    assert not feed_err, feed_err
    for name, (code, _) in outs.items():
        assert code == 0, "%s exited %d:\n%s" % (name, code, allout)
    d = dst.client()
    trained, malformed = counter(cluster.node_for_key("s:stream_events:0").client())
    assert d.xlen("ev") == len(lines) + len(bad)
    assert (trained, malformed) == (len(lines), len(bad)) == (len(lines), len(MALFORMED)), \
        allout
    assert journals_empty(d), allout
    moved = stat(src, "errorstats", "errorstat_MOVED", "count")
    asking = stat(dst, "commandstats", "cmdstat_asking", "calls") - asked[0]
    print("held when stopped %s; trained before %d, during %d of %d; ASK %d TRYAGAIN %d "
          "MOVED %d ASKING %d" % (held, before, during, len(lines), ask, tryagain, moved,
                                  asking))
    # The windows were met by the workers, not slept through.
    assert before < during, (before, during)
    assert ask > 0 and tryagain > 0 and asking > 0 and moved > 0, (ask, tryagain, asking, moved)
