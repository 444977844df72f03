"""A worker killed with SIGKILL mid-epoch while another trains (extends
test_train_standalone.py's sequential version: here both run at once, over several epochs,
and the model is checked): the dead worker's unacked shard is claimed by the survivor once
its lease runs out, every shard of every epoch is acked exactly once, and the accuracy is
within 1 point of a fault-free run."""

import pytest

from faultlib import (ACC_TOLERANCE, evaluate, init, job_done, keys, kill_holding_a_task,
                      progress_acked, ps_train,
                      reference_accuracy, report, tensor_version, wait_until,
                      workers)  # noqa: F401

EPOCHS = 4


@pytest.mark.slow
def test_worker_killed_mid_epoch_its_shards_are_claimed_and_acked_once(
        ps_train, make_server, workers):
    server = make_server()
    admin = server.client()
    job = "wk"
    init(server.addr, job, EPOCHS)
    a = workers(server.addr, job, "A", "--lease-ms", 1500)
    b = workers(server.addr, job, "B", "--lease-ms", 1500)
    # Kill A in the first epoch, holding a task it has not acked.
    wait_until(lambda: int(admin.hget("psjob:{%s}:progress" % job, "w:A:tasks") or 0) >= 5,
               60, "worker A acking 5 tasks")
    held = kill_holding_a_task(a.proc.pid, admin, job, "A")
    a.proc.wait(timeout=10)
    acked_before = progress_acked(admin, job)

    res = b.wait(timeout=180)
    done, pending = job_done(admin, job)
    ntasks = int(admin.hget("psjob:{%s}:config" % job, "tasks"))
    versions = {k: tensor_version(admin, k)[0] for k in keys(job)}
    acc, _ = evaluate(server.addr, job)
    ref = reference_accuracy(EPOCHS)
    report("worker-kill", killed_after_tasks=acked_before, held_by_dead=len(held),
           tasks=ntasks, acked_once=sum(1 for v in done.values() if v == 1),
           acked_twice=sum(1 for v in done.values() if v > 1), pending=pending,
           pushes_by_survivor=res["model_pushes"], min_version=min(versions.values()),
           acc=acc, ref_acc=ref, delta="%+.4f" % (acc - ref))
    assert len(held) == 1, held                       # A died holding one task
    assert "claimed task %s" % held[0] in b.out, b.out
    assert pending == 0
    assert len(done) == ntasks and set(done.values()) == {1}, done
    # The survivor's pushes all applied once; A's (acked and partial-task) pushes on top.
    assert min(versions.values()) >= res["model_pushes"]
    assert abs(acc - ref) <= ACC_TOLERANCE, (acc, ref)
