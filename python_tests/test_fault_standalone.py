"""Fault injection on standalone servers while 2 `ps-train work` processes train:
- the master killed (SIGKILL) and a replica promoted by hand (REPLICAOF NO ONE), the workers
  started with `--addr master,replica` so libps finds the new master by ROLE;
- network trouble: every worker connection killed (CLIENT KILL), writes paused
  (CLIENT PAUSE), the server blocked (DEBUG SLEEP).
Each test counts pushes applied twice and acknowledged pushes lost per key (faultlib.py)."""

import time

import pytest

from faultlib import (ACC_TOLERANCE, count, evaluate, init, keys, now, progress_acked,
                      ps_train, reference_accuracy, report, tensor_version, wait_until,
                      workers)  # noqa: F401

EPOCHS = 4


def versions_on(server, job):
    c = server.client()
    out, hits = {}, 0
    for k in keys(job):
        out[k], h = tensor_version(c, k)
        hits += h
    return out, hits


@pytest.mark.slow
@pytest.mark.parametrize("wait", [1, 0], ids=["wait1", "nowait"])
def test_master_killed_replica_promoted_by_hand_no_push_applied_twice(
        ps_train, make_server, make_replica, workers, wait):
    master = make_server()
    r1 = make_replica(master)
    r2 = make_replica(master)          # keeps WAIT 1 satisfiable after the promotion
    job = "sf%d" % wait
    init(master.addr, job, EPOCHS)
    addrs = ",".join(s.addr for s in (master, r1, r2))
    # Without WAIT the promoted replica may miss acknowledged pushes: go on from it.
    ws = [workers(addrs, job, "w%d" % i, "--wait", wait, "--on-lost-state",
                  "stop" if wait else "continue") for i in range(2)]
    wait_until(lambda: progress_acked(master.client(), job) >= 24, 60, "24 tasks acked")

    t_kill = now()
    master.kill()
    time.sleep(0.5)                    # the operator (or Sentinel) takes a moment
    # WAIT 1 puts every acknowledged push on one replica, not on a given one: promote the one
    # that received the most, as Sentinel and Cluster failover do.
    offset = lambda s: s.client().info("replication").get("slave_repl_offset", 0)
    new, other = (r1, r2) if offset(r1) >= offset(r2) else (r2, r1)
    new.client().execute_command("REPLICAOF", "NO", "ONE")
    other.client().execute_command("REPLICAOF", "127.0.0.1", new.port)
    promoted_s = now() - t_kill

    acked = [w.wait(timeout=180) for w in ws]
    versions, hits = versions_on(new, job)
    want, twice, lost = count(versions, acked)
    acc, _ = evaluate(new.addr, job)
    ref = reference_accuracy(EPOCHS)
    report("standalone-master-kill", wait=wait, promoted_after_s="%.1f" % promoted_s,
           acked_per_key=want, applied_twice=twice, lost=lost, dedup_hits=hits,
           retries=sum(a["retries"] for a in acked),
           wait_short=sum(a["wait_short"] for a in acked), acc=acc, ref_acc=ref,
           delta="%+.4f" % (acc - ref))
    assert sum(a["refreshes"] for a in acked) > 0      # they found the new master by ROLE
    assert twice == 0, versions
    if wait:
        assert lost == 0, versions
    assert abs(acc - ref) <= ACC_TOLERANCE, (acc, ref)


@pytest.mark.slow
def test_connections_killed_and_server_paused_workers_resume_without_double_apply(
        ps_train, make_server, workers):
    server = make_server()
    job = "net"
    init(server.addr, job, EPOCHS)
    ws = [workers(server.addr, job, "w%d" % i) for i in range(2)]
    admin = server.client()
    target = 20
    events = []

    def after_progress(n):
        wait_until(lambda: progress_acked(admin, job) >= n, 60, "%d tasks acked" % n)

    kills = 0
    for _ in range(3):                 # cut every worker connection, 3 times
        after_progress(target)
        kills += admin.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
        target += 15
    events.append("client-kill x3 (%d connections)" % kills)
    after_progress(target)
    admin.execute_command("CLIENT", "PAUSE", 1500, "ALL")
    events.append("client-pause 1500 ms")
    target += 15
    after_progress(target)
    admin.execute_command("DEBUG", "SLEEP", 1.5)
    events.append("debug-sleep 1.5 s")
    still_running = [w.proc.poll() is None for w in ws]

    acked = [w.wait(timeout=180) for w in ws]
    versions, hits = versions_on(server, job)
    want, twice, lost = count(versions, acked)
    acc, _ = evaluate(server.addr, job)
    ref = reference_accuracy(EPOCHS)
    report("network", events="|".join(events).replace(" ", "_"), acked_per_key=want,
           applied_twice=twice, lost=lost, dedup_hits=hits,
           reconnects=sum(a["reconnects"] for a in acked),
           retries=sum(a["retries"] for a in acked), acc=acc, ref_acc=ref,
           delta="%+.4f" % (acc - ref))
    assert any(still_running), "training ended before the faults: test proves nothing"
    assert kills >= 2 and sum(a["reconnects"] for a in acked) >= 2
    assert twice == 0 and lost == 0, versions
    assert abs(acc - ref) <= ACC_TOLERANCE, (acc, ref)
