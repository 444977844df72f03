"""redis_ps.TaskStream: the task stream of a job as ps-train uses it, from Python. A job made by
`ps-train init` is trained by Python workers (every task done once, recorded where ps-train
records it, `ps-train status` counts them), a Python worker that dies holding a task loses it
to another after the lease, a worker restarted under its name takes its own task back first,
and create_tasks() writes the stream ps-train init writes (same entries, same order), with
each task's samples shuffled as ps-train shuffles them."""

import os
import subprocess

import psserver
from pshelpers_pkg import redis_ps

from redis_ps.tasks import TaskStream, create_tasks, job_key  # noqa: E402

PS_TRAIN = os.path.join(psserver.REPO_ROOT, "build", "ps-train")


def ps_train(*args):
    p = subprocess.run([PS_TRAIN] + [str(a) for a in args], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=300)
    assert p.returncode == 0, p.stdout
    return p.stdout


def entries(r, job):
    return [(int(f[b"epoch"]), int(f[b"start"]), int(f[b"count"]))
            for _, f in r.xrange(job_key(job, "tasks"))]


def test_create_tasks_writes_what_ps_train_init_writes(server):
    r = redis_ps.connect(server.addr)
    ps_train("init", "--addr", server.addr, "--job", "c", "--limit", 5500, "--shard-size", 1000,
             "--epochs", 2, "--seed", 9)
    assert create_tasks(r, "py", 5500, 1000, epochs=2, seed=9) == 12
    assert entries(r, "py") == entries(r, "c")
    assert create_tasks(r, "py", 5500, 1000, epochs=2, seed=9) == 0      # not twice


def test_python_workers_train_a_ps_train_job_and_a_dead_ones_task_is_claimed(server):
    r = redis_ps.connect(server.addr)
    ps_train("init", "--addr", server.addr, "--job", "j", "--limit", 4000, "--shard-size", 1000)
    seen = []
    dead = TaskStream(r, "j", "py-dead", lease_ms=200)
    for t in dead:
        assert list(t.batches(300))[0].min() >= t.start
        break                                   # dies holding its first task: no ack
    held = t
    alive = TaskStream(r, "j", "py-w1", lease_ms=200)
    for t in alive:
        idx = [i for b in t.batches(256) for i in b.tolist()]
        assert sorted(idx) == list(range(t.start, t.start + t.count))
        seen.append((t.id, t.claimed))
    assert len(seen) == 4 and (held.id, True) in seen       # claimed after the lease
    assert alive.stats["claimed"] == 1
    assert r.hlen(job_key("j", "done")) == 4
    assert r.xpending(job_key("j", "tasks"), "workers")["pending"] == 0
    prog = r.hgetall(job_key("j", "progress"))
    assert prog[b"w:py-w1:tasks"] == b"4" and prog[b"w:py-w1:samples"] == b"4000"
    out = ps_train("status", "--addr", server.addr, "--job", "j")
    assert "4 total, 4 acked, 0 pending" in out and "py-w1:samples                            4000" in out, out
    # the dead worker, restarted under its name, finds nothing of its own left
    assert list(TaskStream(r, "j", "py-dead", lease_ms=200)) == []


def test_a_restarted_worker_takes_its_own_task_back_first(server):
    r = redis_ps.connect(server.addr)
    create_tasks(r, "k", 3000, 1000, seed=1)
    s = TaskStream(r, "k", "w", lease_ms=60000)
    first = next(iter(s))
    again = TaskStream(r, "k", "w", lease_ms=60000)      # the same name, a new process
    t = again.next_task()
    assert t.id == first.id and t.resumed
    assert [x.id for x in again] != [] and r.hlen(job_key("k", "done")) == 3


def test_task_order_is_ps_trains_shuffle(server):
    t = redis_ps.Task("1-0", epoch=2, start=1000, count=6)
    a, b = t.order(7), t.order(7)
    assert sorted(a.tolist()) == list(range(1000, 1006)) and a.tolist() == b.tolist()
    assert len({tuple(t.order(s).tolist()) for s in range(20)}) > 1
