"""The task stream of a job, as ps-train uses it (worker/train_tasks.c), for Python workers.

A job J's data is cut into tasks, one per shard of samples per epoch, entries of the Redis
Stream "psjob:{J}:tasks" (fields epoch, start, count) read by the consumer group "workers".
A worker named NAME:

  * first takes back its own pending tasks (XREADGROUP ... 0): those a run under the same
    name left when it stopped;
  * then takes new ones (XREADGROUP ... >); when none is new, claims one idle for longer
    than the lease (XAUTOCLAIM ... lease_ms): its worker died; while tasks are pending on
    live workers it waits (polling) for them to be acked or to time out;
  * renews the lease while it trains (XCLAIM ... JUSTID, only while it still owns the task:
    XPENDING);
  * records a finished task with idempotent writes, in one pipeline: HSET psjob:{J}:done
    <task id> 1, HSET psjob:{J}:progress w:NAME:tasks <n> w:NAME:samples <n> (absolute
    counters), XACK. A task another worker claimed meanwhile is not recorded here.

So Python and ps-train workers can share one job's tasks, and `ps-train status` counts the
Python workers' tasks. create_tasks() writes a job's tasks in ps-train init's order.

    stream = TaskStream(r, "mnist", "py-w1", lease_ms=30000, before_ack=opt.synchronize)
    for task in stream:                        # acked when the loop body finishes
        for idx in task.batches(64):           # sample indices, shuffled as ps-train does
            ...train on x[idx]...              # the lease is renewed as batches go by
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, List, Optional

import numpy as np

from .conn import Client, _s
from .errors import PSError, from_response

GROUP = "workers"          # worker/train_job.h TR_GROUP
_M64 = (1 << 64) - 1


def job_key(job: str, what: str) -> str:
    """"psjob:{JOB}:WHAT" (worker/train_job.c tr_key): tasks, done, progress, config."""
    return "psjob:{%s}:%s" % (job, what)


class PSRng:
    """common/rng.c: xoshiro256** seeded by splitmix64 (the same draws as ps-train)."""

    def __init__(self, seed: int):
        x = seed & _M64
        self.s = []
        for _ in range(4):
            x = (x + 0x9E3779B97F4A7C15) & _M64
            z = x
            z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
            self.s.append(z ^ (z >> 31))

    def next(self) -> int:
        s = self.s
        r = (((s[1] * 5) & _M64) << 7 | ((s[1] * 5) & _M64) >> 57) & _M64
        result = (r * 9) & _M64
        t = (s[1] << 17) & _M64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = ((s[3] << 45) | (s[3] >> 19)) & _M64
        return result

    def below(self, n: int) -> int:
        if n == 0:
            return 0
        threshold = ((1 << 64) - n) % n
        while True:
            v = self.next()
            if v >= threshold:
                return v % n


def shuffle(n: int, rng: PSRng) -> List[int]:
    """Fisher-Yates as ps-train: for i = n-1 .. 1, swap i with below(i + 1)."""
    a = list(range(n))
    for i in range(n - 1, 0, -1):
        j = rng.below(i + 1)
        a[i], a[j] = a[j], a[i]
    return a


@dataclass
class Task:
    """One task: samples [start, start + count) of epoch 'epoch', stream entry 'id'."""
    id: str
    epoch: int
    start: int
    count: int
    claimed: bool = False            # taken from a dead worker (XAUTOCLAIM)
    resumed: bool = False            # this worker's own pending task, taken back
    stream: Optional["TaskStream"] = field(default=None, repr=False, compare=False)
    lost: bool = False               # another worker claimed it meanwhile

    def order(self, seed: int) -> np.ndarray:
        """The task's sample indices shuffled as ps-train does (seed = the job's seed)."""
        rng = PSRng((seed ^ (self.epoch << 40) ^ self.start) & _M64)
        return self.start + np.array(shuffle(self.count, rng), dtype=np.int64)

    def batches(self, batch: int, seed: Optional[int] = None) -> Iterator[np.ndarray]:
        """Sample indices in batches of 'batch' (the last may be short), in ps-train's
        order for 'seed' (default: the job's config seed, else 0), renewing the lease every
        lease_ms/3 as they go. Stops early when another worker took the task (self.lost)."""
        if seed is None:
            seed = self.stream.seed if self.stream is not None else 0
        idx = self.order(seed)
        for s in range(0, self.count, batch):
            if self.stream is not None and not self.stream.renew_if_due(self):
                self.lost = True
                return
            yield idx[s:s + batch]


class TaskStream:
    """An iterable over the tasks of job 'job' for worker 'name' (see the module docstring).

    Iterating yields Task objects; when the loop body for a task finishes, the task is
    recorded and acked (after 'before_ack', e.g. the optimizer's synchronize(), so its
    pushes are acknowledged first); a loop left by an exception or break leaves it pending,
    for this worker's next run (same name) or, after 'lease_ms', for another worker.
    'poll_s' is the wait between looks while only others' tasks are pending."""

    def __init__(self, r: Client, job: str, name: str, lease_ms: int = 30000,
                 before_ack: Optional[Callable[[], Any]] = None, poll_s: float = 0.05,
                 seed: Optional[int] = None):
        if not name or " " in name:
            raise ValueError("a worker name is required (no spaces)")
        if lease_ms < 1:
            raise ValueError("lease_ms must be >= 1")
        self.r = r
        self.job = job
        self.name = name
        self.lease_ms = int(lease_ms)
        self.before_ack = before_ack
        self.poll_s = poll_s
        self.tkey, self.dkey, self.pkey = (job_key(job, w) for w in ("tasks", "done", "progress"))
        self._own_done = False
        self._renew_at = 0.0
        self.stats = {"tasks": 0, "samples": 0, "claimed": 0, "lost": 0, "resumed": 0}
        self.my_tasks, self.my_samples = self._load_counters()
        cfg = {_s(k): _s(v) for k, v in self._cmd("HGETALL", job_key(job, "config")).items()}
        self.config = cfg
        self.seed = int(seed if seed is not None else cfg.get("seed", 0) or 0)

    def _cmd(self, *args: Any) -> Any:
        try:
            return self.r.execute_command(*args)
        except Exception as e:          # noqa: BLE001 -- re-raised typed
            import redis.exceptions as rex
            if isinstance(e, rex.ResponseError):
                raise from_response(e, str(args[1]) if len(args) > 1 else None) from None
            raise

    def _load_counters(self):
        h = self._cmd("HGETALL", self.pkey) or {}
        h = {_s(k): _s(v) for k, v in h.items()}
        return (int(h.get("w:%s:tasks" % self.name, 0)), int(h.get("w:%s:samples" % self.name, 0)))

    @staticmethod
    def _entry(e: Any) -> Optional[Task]:
        if not e or len(e) != 2 or e[1] is None:
            return None
        f = e[1]
        if isinstance(f, dict):
            d = {_s(k): _s(v) for k, v in f.items()}
        else:
            d = {_s(f[i]): _s(f[i + 1]) for i in range(0, len(f) - 1, 2)}
        if "count" not in d:
            return None
        return Task(_s(e[0]), int(d.get("epoch", 0)), int(d.get("start", 0)), int(d["count"]))

    def _read(self, start: str) -> Optional[List[Any]]:
        rep = self._cmd("XREADGROUP", "GROUP", GROUP, self.name, "COUNT", 1, "STREAMS",
                        self.tkey, start)
        if not rep:
            return None
        entries = rep[0][1] if isinstance(rep, list) else list(rep.values())[0][0]
        return entries

    def next_task(self) -> Optional[Task]:
        """The next task for this worker (see the module docstring), or None when the job
        has none left (every task acked)."""
        while not self._own_done:
            entries = self._read("0")
            t = self._entry(entries[0]) if entries else None
            if t is None:
                self._own_done = True
                break
            t.resumed = True
            self.stats["resumed"] += 1
            return self._take(t)
        while True:
            entries = self._read(">")
            if entries:
                t = self._entry(entries[0])
                if t is not None:
                    return self._take(t)
                continue
            rep = self._cmd("XAUTOCLAIM", self.tkey, GROUP, self.name, self.lease_ms, "0-0",
                            "COUNT", 1)
            claimed = rep[1] if rep and len(rep) >= 2 else []
            if claimed:
                t = self._entry(claimed[0])
                if t is not None:
                    t.claimed = True
                    self.stats["claimed"] += 1
                    return self._take(t)
                continue
            pending = self._cmd("XPENDING", self.tkey, GROUP)
            n = pending[0] if isinstance(pending, list) else pending.get("pending", 0)
            if int(n) == 0:
                return None
            time.sleep(min(self.poll_s, self.lease_ms / 4000.0))

    def _take(self, t: Task) -> Task:
        t.stream = self
        self._renew_at = time.monotonic() + self.lease_ms / 3000.0
        return t

    def owns(self, t: Task) -> bool:
        """Whether this worker still holds 't' (XPENDING names it)."""
        try:
            rep = self.r.xpending_range(self.tkey, GROUP, t.id, t.id, 1)
        except Exception as e:          # noqa: BLE001 -- re-raised typed
            raise from_response(e, self.tkey) from None
        if not rep:
            return False
        e = rep[0]
        owner = e.get("consumer") if isinstance(e, dict) else e[1]
        return _s(owner) == self.name

    def renew(self, t: Task) -> bool:
        """Renew the lease of 't' if this worker still owns it; False when another worker
        took it (or it was acked)."""
        if not self.owns(t):
            return False
        self._cmd("XCLAIM", self.tkey, GROUP, self.name, 0, t.id, "JUSTID")
        self._renew_at = time.monotonic() + self.lease_ms / 3000.0
        return True

    def renew_if_due(self, t: Task) -> bool:
        """renew() when a third of the lease has passed since the last one; else True."""
        if time.monotonic() < self._renew_at:
            return True
        return self.renew(t)

    def ack(self, t: Task, samples: Optional[int] = None) -> bool:
        """Record 't' as done by this worker ('samples' trained, default its count) and XACK
        it, with idempotent writes in one pipeline. Returns False (and records nothing) when
        another worker claimed it meanwhile."""
        if self.before_ack is not None:
            self.before_ack()
        if not self.owns(t):
            self.stats["lost"] += 1
            t.lost = True
            return False
        n = t.count if samples is None else int(samples)
        pipe = self.r.pipeline(transaction=False)
        pipe.execute_command("HSET", self.dkey, t.id, "1")
        pipe.execute_command("HSET", self.pkey, "w:%s:tasks" % self.name, self.my_tasks + 1,
                             "w:%s:samples" % self.name, self.my_samples + n)
        pipe.execute_command("XACK", self.tkey, GROUP, t.id)
        for rep in pipe.execute(raise_on_error=False):
            if isinstance(rep, Exception):
                raise from_response(rep, self.tkey)
        self.my_tasks += 1
        self.my_samples += n
        self.stats["tasks"] += 1
        self.stats["samples"] += n
        return True

    def __iter__(self) -> Iterator[Task]:
        while True:
            t = self.next_task()
            if t is None:
                return
            yield t
            if t.lost:
                self.stats["lost"] += 1
                continue
            self.ack(t)


def create_tasks(r: Client, job: str, samples: int, shard_size: int, epochs: int = 1,
                 seed: int = 0) -> int:
    """Write the task stream of a job without ps-train: the consumer group and one task
    per shard of 'shard_size' samples per epoch, each epoch's shards shuffled exactly as
    ps-train init does for 'seed'. Idempotent only on an empty stream: returns the number
    of tasks added, 0 when the stream already has entries."""
    if samples < 1 or shard_size < 1 or epochs < 1:
        raise ValueError("samples, shard_size and epochs must be >= 1")
    key = job_key(job, "tasks")
    try:
        r.execute_command("XGROUP", "CREATE", key, GROUP, 0, "MKSTREAM")
    except Exception as e:          # noqa: BLE001
        if "BUSYGROUP" not in str(e):
            raise from_response(e, key) from None
    if int(r.execute_command("XLEN", key)):
        return 0
    nshards = (samples + shard_size - 1) // shard_size
    rng = PSRng((seed * 0x9E3779B97F4A7C15 + 17) & _M64)
    pipe = r.pipeline(transaction=False)
    n = 0
    for e in range(1, epochs + 1):
        for i in shuffle(nshards, rng):
            start = i * shard_size
            pipe.execute_command("XADD", key, "*", "epoch", e, "start", start, "count",
                                 min(shard_size, samples - start))
            n += 1
    for rep in pipe.execute(raise_on_error=False):
        if isinstance(rep, Exception):
            raise from_response(rep, key)
    return n


__all__ = ["Task", "TaskStream", "create_tasks", "job_key", "PSRng", "GROUP", "PSError"]
