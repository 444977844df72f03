"""Fault injection on Redis Cluster (3 masters + 1 replica each, cluster-node-timeout 2000 ms)
while 2 `ps-train work` processes train: a master killed with SIGKILL (its replica is
promoted, the workers follow the new slot map and resend with the same push IDs), and slots
holding model partitions migrated to another master mid-run. Each test counts, per partition
key, pushes applied twice and acknowledged pushes lost (see faultlib.py) and compares the
final accuracy with a fault-free run of the same configuration."""

import subprocess

import pytest

import psserver
from faultlib import (ACC_TOLERANCE, count, evaluate, init, keys, now, progress_acked,
                      ps_train, reference_accuracy, report, tensor_version, wait_until,
                      workers)  # noqa: F401

EPOCHS = 4          # 240 tasks of 1000 samples; ~3 s fault-free on 2 cores


@pytest.fixture
def cluster(module_path):
    c = psserver.RedisClusterHelper(masters=3, replicas=1, node_timeout=2000)
    yield c
    c.cleanup()


def owner(cluster, key):
    """The live master serving 'key' per a live node's CLUSTER SLOTS (a killed node is
    skipped: RedisClusterHelper.node_for_key asks every node)."""
    live = [n for n in cluster.nodes if n.is_alive()]
    slot = psserver.key_slot(key)
    for a, b, m, *_ in live[0].client().execute_command("CLUSTER", "SLOTS"):
        if int(a) <= slot <= int(b):
            return next(n for n in live if n.port == int(m[1]))
    raise AssertionError("no owner of slot %d" % slot)


def versions_in_cluster(cluster, job):
    """{key: version} read from the master that now serves each key, plus the dedup hits."""
    out, hits = {}, 0
    for k in keys(job):
        v, h = tensor_version(owner(cluster, k).client(), k)
        out[k] = v
        hits += h
    return out, hits


@pytest.mark.slow
@pytest.mark.parametrize("wait", [1, 0], ids=["wait1", "nowait"])
def test_master_killed_mid_training_replica_promoted_no_push_applied_twice(
        ps_train, cluster, workers, wait):
    job = "fc%d" % wait
    seeds = ",".join(n.addr for n in cluster.nodes)
    init(seeds, job, EPOCHS)
    victim = cluster.node_for_key(job + ":W0:0")
    (replica,) = cluster.replicas_of(victim)
    job_node = cluster.node_for_key("psjob:{%s}:progress" % job)
    # Without WAIT the promoted replica may miss the newest acknowledged pushes: a lost state
    # the workers are told to go on from (the default stops them, test_fault_lost_state.py).
    lost_policy = "stop" if wait else "continue"
    ws = [workers(seeds, job, "w%d" % i, "--wait", wait, "--on-lost-state", lost_policy)
          for i in range(2)]

    # Kill the master holding W0:0 once a tenth of the tasks are done.
    wait_until(lambda: progress_acked(job_node.client(), job) >= 24, 60, "24 tasks acked")
    t_kill = now()
    victim.kill()
    rc = replica.client()
    wait_until(lambda: rc.info("replication")["role"] == "master", 30, "replica promoted")
    failover_s = now() - t_kill
    if wait:
        # Replace the dead node: it rejoins as a replica of the promoted one, so WAIT 1
        # is satisfied again (until then WAITs on that node come back short).
        victim.start()
        cluster.wait_ok(timeout=30, n_replicas=3)

    acked = [w.wait(timeout=180) for w in ws]
    versions, dedup_hits = versions_in_cluster(cluster, job)
    want, twice, lost = count(versions, acked)
    acc, _ = evaluate(seeds, job)
    ref = reference_accuracy(EPOCHS)
    retries = sum(a["retries"] for a in acked)
    report("cluster-master-kill", wait=wait, failover_s="%.1f" % failover_s,
           acked_per_key=want, applied_twice=twice, lost=lost, dedup_hits=dedup_hits,
           retries=retries, refreshes=sum(a["refreshes"] for a in acked),
           wait_short=sum(a["wait_short"] for a in acked), acc=acc, ref_acc=ref,
           delta="%+.4f" % (acc - ref), victim_was_job_node=victim is job_node,
           lost_state=sum(a["lost_state"] for a in acked))
    assert retries > 0 and sum(a["refreshes"] for a in acked) > 0   # the kill was noticed
    assert twice == 0, versions
    if wait:
        assert lost == 0, versions
    assert abs(acc - ref) <= ACC_TOLERANCE, (acc, ref)


def migrate_slot(src, dst, slot, keys_batch=10):
    """Moves hash slot 'slot' from master 'src' to master 'dst' the way redis-cli --cluster
    reshard does: SETSLOT IMPORTING/MIGRATING, MIGRATE every key, SETSLOT NODE on both."""
    sc, dc = src.client(), dst.client()
    src_id = sc.execute_command("CLUSTER", "MYID").decode()
    dst_id = dc.execute_command("CLUSTER", "MYID").decode()
    dc.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
    sc.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
    while True:
        ks = sc.execute_command("CLUSTER", "GETKEYSINSLOT", slot, keys_batch)
        if not ks:
            break
        sc.execute_command("MIGRATE", "127.0.0.1", dst.port, "", 0, 5000, "KEYS", *ks)
    dc.execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
    sc.execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)


@pytest.mark.slow
def test_slots_of_model_partitions_migrate_mid_training_nothing_lost(
        ps_train, cluster, workers):
    job = "rs"
    seeds = ",".join(n.addr for n in cluster.nodes)
    init(seeds, job, EPOCHS)
    job_node = cluster.node_for_key("psjob:{%s}:progress" % job)
    ws = [workers(seeds, job, "w%d" % i) for i in range(2)]
    wait_until(lambda: progress_acked(job_node.client(), job) >= 24, 60, "24 tasks acked")

    # Move the slot of every W0 partition to the next master, one slot at a time, while the
    # workers push to them (MOVED/ASK on the way), then move W0:0 back again.
    masters = sorted(cluster.masters(), key=lambda m: m.port)
    moved = 0
    for k in keys(job)[:7] + [keys(job)[0]]:
        src = cluster.node_for_key(k)
        dst = masters[(masters.index(src) + 1) % len(masters)]
        migrate_slot(src, dst, psserver.key_slot(k))
        moved += 1
    still_running = [w.proc.poll() is None for w in ws]
    acked = [w.wait(timeout=180) for w in ws]
    versions, dedup_hits = versions_in_cluster(cluster, job)
    want, twice, lost = count(versions, acked)
    acc, _ = evaluate(seeds, job)
    ref = reference_accuracy(EPOCHS)
    report("cluster-reshard", slots_moved=moved, acked_per_key=want, applied_twice=twice,
           lost=lost, moved=sum(a["moved"] for a in acked), ask=sum(a["ask"] for a in acked),
           retries=sum(a["retries"] for a in acked), acc=acc, ref_acc=ref,
           delta="%+.4f" % (acc - ref))
    assert any(still_running), "training ended before the migrations: test proves nothing"
    for w in ws:
        assert "error" not in w.out.lower(), w.out     # nothing reached the user
    assert sum(a["moved"] + a["ask"] for a in acked) > 0
    assert twice == 0 and lost == 0, versions
    assert abs(acc - ref) <= ACC_TOLERANCE, (acc, ref)
    # The cluster agrees the slots moved: redis-cli --cluster check is clean.
    chk = subprocess.run([psserver.REDIS_CLI, "--cluster", "check", seeds.split(",")[0]],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
    assert b"[OK] All 16384 slots covered" in chk.stdout, chk.stdout.decode()
