"""ps-relay (the tree topology) against real servers: local workers' pushes reach the
upstream exactly once while the relay is SIGKILLed at random points and at each step of
its take / push / ack cycle, and while the local server (appendfsync always) is SIGKILLed;
sync rounds and their timeout; a relay of a relay; and relays refused at start when the
tensors do not fit.

Gradients are small integers and the upstream tensors SGD with LR 1 from zeros, so the
upstream values are exactly minus the sum of every gradient applied: a lost push or a
doubled one changes them. The upstream version counts the upstream pushes applied; it
must equal the number of takes the local server made (each acknowledged once)."""

import os
import random
import re
import signal
import subprocess
import threading
import time

import numpy as np
import pytest
import redis

import psserver
from pshelpers import f32, info, pull_np

RELAY = os.environ.get("PS_RELAY") or os.path.join(psserver.REPO_ROOT, "build", "ps-relay")
SHAPES = {"m:w:0": (4, 3), "m:b:0": (5,)}


def grad(seq, key):
    n = int(np.prod(SHAPES[key]))
    return ((np.arange(n) + seq * 7 + len(key)) % 5 - 2).astype(np.float32)


class Relay:
    """One ps-relay process with its output in a file; stopped by pid."""

    def __init__(self, d, local, up, name="relay-a", extra=(), env=None):
        self.out = os.path.join(str(d), "%s.out" % name)
        self.cmd = [RELAY, "--local", local.addr, "--upstream", up.addr, "--name", name,
                    "--match", "m:*", "--progress-ms", "0"] + list(extra)
        self.env = dict(os.environ, **(env or {}))
        self.proc = None

    def starts(self):
        return self.output().count("] relaying ") if os.path.exists(self.out) else 0

    def start(self):
        self.started = self.starts()
        with open(self.out, "ab") as f:
            self.proc = subprocess.Popen(self.cmd, stdout=f, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=self.env)
        psserver._register(self.proc)
        return self

    def kill(self):
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.wait()

    def wait(self, timeout=30):
        if self.proc:
            self.proc.wait(timeout=timeout)
            psserver._unregister(self.proc)
        return self.proc.returncode

    def stop(self):
        """SIGTERM: the relay forwards what is summed, then exits 0. Sent once it runs its
        cycle (its signal handler is installed by then)."""
        psserver.wait_until(lambda: self.proc.poll() is not None or
                            self.starts() > self.started, timeout=20, what="relay running")
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
        return self.wait()

    def output(self):
        with open(self.out, errors="replace") as f:
            return f.read()


@pytest.fixture
def relays():
    started = []
    yield started
    for r in started:
        r.kill()


@pytest.fixture
def tree(make_server, tmp_path, relays):
    """(upstream, local, new_relay) with the upstream model created."""
    if not os.path.exists(RELAY):
        pytest.fail("%s not built: run make" % RELAY, pytrace=False)
    up = make_server()
    local = make_server(args=["--appendonly", "yes", "--appendfsync", "always"])
    uc = up.client()
    for k, shape in SHAPES.items():
        uc.execute_command("PS.CREATE", k, "SHAPE", *shape, "OPTIM", "SGD", "LR", 1)

    def new_relay(**kw):
        r = Relay(tmp_path, local, kw.pop("up", up), **kw)
        relays.append(r)
        return r
    return up, local, new_relay


def wait_local_tensors(local):
    c = local.client()
    psserver.wait_until(lambda: all(c.exists(k) for k in SHAPES), timeout=10,
                        what="the relay created the local tensors")


class Pusher(threading.Thread):
    """A local worker: pushes grad(seq, key) for seq 1..n with ID w seq, resending the same
    (id, seq) after connection errors and after BACKLOG (the local tensor full while the
    relay is down or behind: libps waits and resends the same way), so each push is summed
    locally exactly once. Counts the BACKLOG refusals it saw (the last on key 'refused_key')."""

    def __init__(self, port, n, pause=0.002):
        super().__init__(daemon=True)
        self.port, self.n, self.pause, self.done, self.refused = port, n, pause, 0, 0
        self.refused_key = None

    def run(self):
        c = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)
        for seq in range(1, self.n + 1):
            for k in SHAPES:
                while True:
                    try:
                        c.execute_command("PS.PUSHGRAD", k, f32(grad(seq, k)), "ID", "w", seq)
                        break
                    except redis.ResponseError as e:
                        assert str(e).startswith("BACKLOG "), e
                        self.refused_key = k
                        self.refused += 1
                        time.sleep(0.01)
                    except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError):
                        time.sleep(0.02)
            self.done = seq
            time.sleep(self.pause)


def signal_pending(pid, sig):
    """Whether signal 'sig' waits to be delivered to process 'pid' (Linux /proc)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(("SigPnd:", "ShdPnd:")) and int(line.split()[1], 16) >> (sig - 1) & 1:
                return True
    return False


def start_relay_and_pusher(tree, n, pause=0.003, **kw):
    """A relay forwarding every 3 ms and a pusher of n pushes on its local server."""
    up, local, new_relay = tree
    r = new_relay(extra=["--every-ms", "3"], **kw).start()
    wait_local_tensors(local)
    p = Pusher(local.port, n, pause=pause)
    p.start()
    return r, p


def expected_sum(n, key):
    return sum(grad(s, key) for s in range(1, n + 1))


def check_upstream_has_everything_once(up, local, n, exact=True):
    """Upstream values are minus the sum of all n local pushes per key; the local tensors
    hold nothing summed or pending. Returns the upstream versions. Not 'exact': a take split
    into parts went up as the sum scaled by part / count, which float32 rounds (1e-7
    relative); a lost or doubled push (integers) is still far outside the tolerance."""
    uc, lc = up.client(), local.client()
    versions = {}
    for k in SHAPES:
        li = info(lc, k)
        assert (li["accum_pushes"], li["pending_pushes"]) == (0, 0), (k, li)
        v, vals = pull_np(uc, k)
        if exact:
            assert np.array_equal(vals, -expected_sum(n, k)), (k, vals, -expected_sum(n, k))
        else:
            assert np.allclose(vals, -expected_sum(n, k), rtol=0, atol=1e-3), (k, vals)
        versions[k] = v
    return versions


def test_relay_forwards_sums_and_mirrors_upstream_values(tree):
    up, local, new_relay = tree
    r = new_relay(extra=["--every-ms", "20"]).start()
    wait_local_tensors(local)
    p = Pusher(local.port, 30)
    p.run()
    assert r.stop() == 0
    versions = check_upstream_has_everything_once(up, local, 30)
    lc = local.client()
    for k in SHAPES:
        li = info(lc, k)
        assert versions[k] == li["takes"] == li["take_acks"], (k, li)
        assert versions[k] < 30                     # fewer upstream pushes than local ones
        # The local copy mirrors the upstream values and version.
        lv, lvals = pull_np(lc, k)
        uv, uvals = pull_np(up.client(), k)
        assert lv == uv and np.array_equal(lvals, uvals)
    out = r.output()
    assert "local pushes in 60" in out and "stopped after" in out, out


def test_relay_stopped_with_its_servers_gone_exits_in_bounded_time_and_loses_nothing(tree):
    """Both servers SIGKILLed under two relays holding 5 summed pushes per key (never due:
    --every-ms 100 s). SIGTERM: one exits 3 within --stop-timeout-ms 1000 (libps alone
    would retry each call for 30 s), saying the gradients stay in the local server; the
    other (--stop-timeout-ms 60000) exits 3 at once on a second SIGTERM. The local server
    restarted from its AOF still holds every push, and a relay with the same --name,
    stopped by SIGTERM with the servers up, forwards all of them upstream (its only
    forward: the round is never due)."""
    up, local, new_relay = tree
    slow = ["--every-ms", "100000"]
    r = new_relay(extra=slow + ["--stop-timeout-ms", "1000"]).start()
    r2 = new_relay(name="relay-b", extra=slow + ["--stop-timeout-ms", "60000"]).start()
    wait_local_tensors(local)
    Pusher(local.port, 5).run()
    lc = local.client()
    assert all(info(lc, k)["accum_pushes"] == 5 for k in SHAPES)
    psserver.wait_until(lambda: r.starts() and r2.starts(), timeout=20, what="relays running")
    time.sleep(0.3)                                  # a peek or two saw the 5 pushes
    up.kill()
    local.kill()
    t0 = time.monotonic()
    os.kill(r.proc.pid, signal.SIGTERM)
    assert r.wait(timeout=20) == 3, r.output()
    took = time.monotonic() - t0
    assert took < 4.0, (took, r.output())           # the bound (1 s) plus process slack
    out = r.output()
    assert "without reaching the local server %s" % local.addr in out, out
    assert "stays there" in out and "--name relay-a" in out, out
    os.kill(r2.proc.pid, signal.SIGTERM)
    # The second SIGTERM once the first was delivered (two sent while neither is would make
    # one: a loaded machine may not run the relay for a while).
    psserver.wait_until(lambda: not signal_pending(r2.proc.pid, signal.SIGTERM), timeout=20,
                        what="the first SIGTERM delivered")
    t0 = time.monotonic()
    os.kill(r2.proc.pid, signal.SIGTERM)
    assert r2.wait(timeout=20) == 3, r2.output()
    assert time.monotonic() - t0 < 2.0, r2.output()
    assert "a second signal: exiting at once" in r2.output(), r2.output()
    # Nothing lost: the local server (AOF, appendfsync always) kept the 5 pushes.
    local.start()
    up.start()
    uc = up.client()
    for k, shape in SHAPES.items():
        uc.execute_command("PS.CREATE", k, "SHAPE", *shape, "OPTIM", "SGD", "LR", 1)
    lc = local.client()
    assert all(info(lc, k)["accum_pushes"] == 5 for k in SHAPES)
    r3 = new_relay(extra=slow).start()
    assert r3.stop() == 0, r3.output()
    versions = check_upstream_has_everything_once(up, local, 5)
    assert all(v == 1 for v in versions.values()), versions     # one forward, at the stop


@pytest.mark.slow
def test_relay_sigkilled_five_times_at_random_points_loses_and_doubles_nothing(tree):
    up, local, _ = tree
    rnd = random.Random(int(os.environ.get("PS_TEST_SEED", "0")) or None)
    r, p = start_relay_and_pusher(tree, 400)
    for _ in range(5):
        time.sleep(rnd.uniform(0.05, 0.4))
        r.kill()
        time.sleep(rnd.uniform(0, 0.05))
        r.start()
    p.join(60)
    assert not p.is_alive() and p.done == 400
    assert r.stop() == 0, r.output()
    versions = check_upstream_has_everything_once(up, local, 400)
    lc = local.client()
    for k in SHAPES:
        li = info(lc, k)
        assert versions[k] == li["takes"] == li["take_acks"], (k, versions[k], li)
    # (A kill may land during a restarted relay's setup, before it prints its first line.)
    assert r.output().count("relaying 2 keys") >= 2


@pytest.mark.parametrize("phase", ["take", "push", "ack"])
def test_relay_killed_after_each_step_of_its_cycle_resends_exactly_once(tree, phase):
    """PS_RELAY_FAULT kills the relay right after its 3rd take, upstream push or ack: the
    restarted relay finds the pending slot (take, push) and resends it with its seq; after
    a push the upstream exactly-once table answers it without applying it again."""
    up, local, new_relay = tree
    wait_pushes = 40
    r = new_relay(extra=["--every-ms", "5"], env={"PS_RELAY_FAULT": phase + ":3"}).start()
    wait_local_tensors(local)
    p = Pusher(local.port, wait_pushes, pause=0.004)
    p.start()
    assert r.wait(timeout=30) == -signal.SIGKILL, r.output()
    lc = local.client()
    if phase != "ack":
        assert any(info(lc, k)["pending_pushes"] > 0 for k in SHAPES)
    r.env.pop("PS_RELAY_FAULT")
    r.start()
    p.join(30)
    assert r.stop() == 0, r.output()
    versions = check_upstream_has_everything_once(up, local, wait_pushes)
    for k in SHAPES:
        li = info(lc, k)
        assert versions[k] == li["takes"] == li["take_acks"], (k, li)
    if phase == "push":
        # The second relay's first acknowledgements were of slots already applied upstream.
        uc = up.client()
        assert sum(info(uc, k)["dedup_hits"] for k in SHAPES) >= 1


@pytest.mark.slow
def test_local_server_sigkilled_with_appendfsync_always_loses_and_doubles_nothing(tree):
    up, local, _ = tree
    rnd = random.Random(int(os.environ.get("PS_TEST_SEED", "0")) or None)
    r, p = start_relay_and_pusher(tree, 300)
    for _ in range(3):
        time.sleep(rnd.uniform(0.1, 0.4))
        local.restart(kill=True, timeout=30)
    p.join(90)
    assert not p.is_alive() and p.done == 300
    assert r.stop() == 0, r.output()
    versions = check_upstream_has_everything_once(up, local, 300)
    # Counters restart with the server; the seqs do not: the relay (never restarted)
    # numbered its takes floor, floor + 1, ... and each was applied upstream once.
    floor = int(re.search(r"seq floor (\d+)", r.output()).group(1))
    lc = local.client()
    for k in SHAPES:
        assert versions[k] == info(lc, k)["relay_seq"] - floor + 1, k


@pytest.mark.slow
def test_upstream_sigkilled_with_appendfsync_always_gets_every_round_once(make_server, tmp_path,
                                                                          relays):
    """The upstream killed and restarted under the relay: a round it applied but did not
    acknowledge is resent with its seq and answered from the (persisted) exactly-once table."""
    up = make_server(args=["--appendonly", "yes", "--appendfsync", "always"])
    local = make_server()
    for k, shape in SHAPES.items():
        up.client().execute_command("PS.CREATE", k, "SHAPE", *shape, "OPTIM", "SGD", "LR", 1)
    r = Relay(tmp_path, local, up, extra=["--every-ms", "3"]).start()
    relays.append(r)
    wait_local_tensors(local)
    p = Pusher(local.port, 300, pause=0.003)
    p.start()
    rnd = random.Random(int(os.environ.get("PS_TEST_SEED", "0")) or None)
    for _ in range(3):
        time.sleep(rnd.uniform(0.1, 0.4))
        up.restart(kill=True, timeout=30)
    p.join(90)
    assert not p.is_alive() and p.done == 300
    assert r.stop() == 0, r.output()
    versions = check_upstream_has_everything_once(up, local, 300)
    lc = local.client()
    for k in SHAPES:
        assert versions[k] == info(lc, k)["takes"] == info(lc, k)["take_acks"], k


def test_sync_round_forwards_n_pushes_at_once_or_what_it_has_at_the_timeout(tree):
    up, local, new_relay = tree
    r = new_relay(extra=["--sync", "--workers", "3", "--round-timeout-ms", "400",
                         "--mean"]).start()
    wait_local_tensors(local)
    lc, uc = local.client(), up.client()
    k = "m:b:0"
    for s in (1, 2, 3):
        for key in SHAPES:                         # a round is due once every key has 3
            lc.execute_command("PS.PUSHGRAD", key, f32(grad(s, key)), "ID", "w", s)
    psserver.wait_until(lambda: pull_np(uc, k)[0] == 1, timeout=5, what="a full round")
    mean = (grad(1, k) + grad(2, k) + grad(3, k)) / np.float32(3)
    assert np.array_equal(pull_np(uc, k)[1], -mean.astype(np.float32))
    t0 = time.monotonic()
    lc.execute_command("PS.PUSHGRAD", k, f32(grad(4, k)), "ID", "w", 4)
    time.sleep(0.15)
    v = pull_np(uc, k)[0]
    if time.monotonic() - t0 < 0.4:                # (a loaded machine may take longer)
        assert v == 1                              # a round of 1 of 3 waits ...
    psserver.wait_until(lambda: pull_np(uc, k)[0] == 2, timeout=5, what="the round timeout")
    assert time.monotonic() - t0 >= 0.35           # ... for its timeout
    assert r.stop() == 0
    assert "rounds not of N 1," in r.output(), r.output()


def test_a_relay_of_a_relay_reaches_the_upstream_once(tree, make_server, relays):
    up, mid, new_relay = tree
    leaf = make_server()
    r1 = new_relay(name="relay-mid", extra=["--every-ms", "5"]).start()
    wait_local_tensors(mid)
    r2 = Relay(r1.out.rsplit("/", 1)[0], leaf, mid, name="relay-leaf", extra=["--every-ms", "5"])
    relays.append(r2.start())
    wait_local_tensors(leaf)
    assert info(leaf.client(), "m:w:0")["optimizer"] == b"accum"
    Pusher(leaf.port, 25).run()
    assert r2.stop() == 0
    psserver.wait_until(lambda: all(info(mid.client(), k)["accum_pushes"] == 0 and
                                    info(mid.client(), k)["pending_pushes"] == 0
                                    for k in SHAPES), timeout=10, what="mid relay drained")
    assert r1.stop() == 0
    for k in SHAPES:
        v, vals = pull_np(up.client(), k)
        assert np.array_equal(vals, -expected_sum(25, k)), k


@pytest.mark.parametrize("setup,extra,message", [
    ("local-sgd", [], "local tensor m:b:0 has optimizer sgd"),
    ("local-shape", [], "local tensor m:b:0 has shape [6] but the upstream one has shape [5]"),
    ("none", ["--optim", "adam"], "has optimizer sgd, but --optim says adam"),
    ("none", ["--keys", "m:nope:0"], "upstream key m:nope:0 is not a tensor"),
])
def test_relay_refuses_tensors_that_do_not_fit_and_changes_nothing(tree, setup, extra, message):
    up, local, new_relay = tree
    lc = local.client()
    if setup == "local-sgd":
        lc.execute_command("PS.CREATE", "m:b:0", "SHAPE", 5, "OPTIM", "SGD")
    elif setup == "local-shape":
        lc.execute_command("PS.CREATE", "m:b:0", "SHAPE", 6, "OPTIM", "ACCUM")
    r = new_relay(extra=extra)
    if "--keys" in extra:
        i = r.cmd.index("--match")
        del r.cmd[i:i + 2]
    r.start()
    assert r.wait(timeout=20) == 2, r.output()
    assert message in r.output(), r.output()
    assert all(pull_np(up.client(), k)[0] == 0 for k in SHAPES)
    if setup == "local-sgd":
        assert info(lc, "m:b:0")["optimizer"] == b"sgd"


DEMO_TREE = os.path.join(psserver.REPO_ROOT, "scripts", "demo-tree.sh")


@pytest.mark.parametrize("per", ["0", "x", "10"])
def test_demo_tree_refuses_a_bad_workers_per_relay_before_starting_anything(per):
    p = subprocess.run([DEMO_TREE], env=dict(os.environ, DEMO_PER_RELAY=per),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "DEMO_PER_RELAY must be 1..9" in p.stderr
    assert "star:" not in p.stdout


def demo_tree_verdict(out, per, keys):
    """The demo-tree run's figures checked against what the tree promises: one upstream push
    and one pull per round; a round is N (= per) gradients unless the relay closed it short
    at its --round-timeout-ms (a worker later than that: on a loaded machine one that
    finished loading its data seconds after the others, at the start), which it counts in
    'rounds not of N' and which costs at most one more upstream push per key. So the bytes
    are at most 1/N of the star's scaled by the upstream pushes made over those of exact
    rounds: exactly 1/N when no round was short. A few such rounds per relay, not a
    systematic early close. Accuracy within the demo's 1 point. Returns the short rounds."""
    m = re.search(r"upstream bytes per sample: star ([0-9.]+), tree ([0-9.]+) \(ratio ([0-9.]+), "
                  r"target <= 1/%d\)" % per, out)
    a = re.search(r"test accuracy: star ([0-9.]+), tree ([0-9.]+)", out)
    rel = re.findall(r"\[relay relay-\d\] stopped after .*? local pushes in (\d+) \| upstream "
                     r"pushes out (\d+) \(resent \d+, rounds not of N (\d+),", out)
    assert m and a and len(rel) == 2, out
    star_b, tree_b = float(m.group(1)), float(m.group(2))
    local, upstream, short = (sum(int(r[i]) for r in rel) for i in range(3))
    exact = local // per                      # upstream pushes (per key) of exact rounds
    assert local % (per * keys) == 0 and upstream >= exact, (local, upstream, out)
    assert upstream <= exact + keys * short, (upstream, exact, short, out)
    assert short <= 8, (short, out)
    assert tree_b <= star_b / per * upstream / exact, (tree_b, star_b, upstream, exact, out)
    assert float(a.group(2)) >= float(a.group(1)) - 0.01, out
    return short


@pytest.mark.slow
def test_demo_tree_with_4_workers_per_relay_meets_a_quarter_of_the_bytes_and_the_accuracy():
    # Exact sync rounds: the bytes per sample are checked against 1/4 (not the
    # N = 2 half) and the accuracy within the demo's 1 point (2 epochs: -0.4 and
    # +0.04 points measured; free workers lost 5-7 at 10 epochs). The demo's own
    # verdict is exact rounds; a round its relay closed short (a worker that
    # started late on a loaded machine) is accounted for (demo_tree_verdict).
    env = dict(os.environ, DEMO_PER_RELAY="4", DEMO_EPOCHS="2")
    p = subprocess.run([DEMO_TREE], env=env, capture_output=True, text=True, timeout=600)
    out = p.stdout + p.stderr
    assert "8 workers" in out and "4 workers each" in out, out
    short = demo_tree_verdict(out, per=4, keys=4)   # 784,128,10: two weights, two biases
    if short == 0:
        assert p.returncode == 0 and "demo-tree: ok" in out, out
    else:
        assert p.returncode in (0, 1) and "demo-tree: " in out, out


# ---- issue 27: backpressure, bounded rounds, round sizes from outside ---------------------

ROUND_FIELDS = ("relay_takes", "relay_rounds", "relay_forwarded", "relay_round_min",
                "relay_round_max", "max_backlog", "backlog", "pending_parts", "relay_seq")


def round_fields(c, k):
    i = info(c, k)
    return {f: i[f] for f in ROUND_FIELDS}


@pytest.mark.parametrize("kill", ["sigkill", "after-take"])
def test_backpressure_pauses_pushes_while_the_relay_is_down_and_releases_after(tree, kill):
    """--max-backlog 6: with the relay killed (SIGKILL at a random point of its cycle, or by
    itself right after a take: a pending slot) the local tensors take pushes up to 6
    un-forwarded gradients per key (a pending slot's included), then answer BACKLOG (the
    pusher stalls); the restarted relay announces the full backlog, forwards it in parts of
    at most --max-round 2 gradients and the pusher goes on; nothing lost or doubled."""
    up, local, new_relay = tree
    # After a take: --every-pushes 2, so a take finds both keys summed (the pusher pushes
    # m:w:0 then m:b:0) and the kill leaves a pending slot on each (a relay that fell behind
    # may have taken a key's last part alone).
    after_take = kill == "after-take"
    r = new_relay(extra=["--every-pushes", "2" if after_take else "1", "--max-backlog", "6",
                         "--max-round", "2", "--progress-ms", "100"],
                  env={"PS_RELAY_FAULT": "take:5"} if after_take else None).start()
    wait_local_tensors(local)
    lc = local.client()
    psserver.wait_until(lambda: all(info(lc, k)["max_backlog"] == 6 for k in SHAPES),
                        timeout=10, what="MAXBACKLOG set")
    p = Pusher(local.port, 60, pause=0.005)
    p.start()
    if after_take:
        assert r.wait(timeout=30) == -signal.SIGKILL, r.output()
        r.env.pop("PS_RELAY_FAULT")
        assert any(info(lc, k)["pending_pushes"] > 0 for k in SHAPES)
    else:
        psserver.wait_until(lambda: p.done >= 10, timeout=20, what="pushes forwarded")
        r.kill()
    # Stalled: refused twice since the relay died (a live relay that fell behind on a loaded
    # machine refuses pushes too; the second retry comes after all it sent was answered).
    seen = p.refused
    psserver.wait_until(lambda: p.refused >= seen + 2, timeout=20, what="BACKLOG refusals")
    stalled = p.done
    time.sleep(0.5)
    assert p.done == stalled, (stalled, p.done)              # paused, not training on
    # The key the pusher waits on is at the bound, none past it. (Not every key at it: the
    # keys' takes split into different numbers of parts go up in different rounds.)
    backlogs = {k: info(lc, k)["backlog"] for k in SHAPES}
    assert backlogs[p.refused_key] == 6 and max(backlogs.values()) == 6, backlogs
    assert sum(info(lc, k)["backlog_refusals"] for k in SHAPES) > 0     # (the first key's)
    r.start()
    p.join(60)
    assert not p.is_alive() and p.done == 60
    assert r.stop() == 0, r.output()
    versions = check_upstream_has_everything_once(up, local, 60, exact=False)
    for k in SHAPES:
        f = round_fields(lc, k)
        assert f["relay_forwarded"] == 60 and f["relay_round_max"] <= 2, (k, f)
        assert versions[k] == f["relay_rounds"], (k, versions[k], f)
    # Announced: a line when the restarted relay found the backlog full, and the count of
    # full peeks on its progress lines.
    assert "local backlog full (6 of MAXBACKLOG 6 gradients;" in r.output(), r.output()
    assert re.search(r"\(full [1-9][0-9]*x\)", r.output().splitlines()[-1]), r.output()


def test_a_backlog_left_by_a_local_restart_goes_upstream_in_bounded_rounds(tree, make_replica):
    """32 pushes per key summed with no relay running, the local server restarted (AOF):
    the relay (--every-pushes 4: MAXROUND 8) forwards them as 4 upstream pushes of 8, each
    the sum scaled by 8/32; the persisted counters say so on the master, after a restart,
    on a replica, and through ps-relay --status."""
    up, local, new_relay = tree
    lc = local.client()
    for k, shape in SHAPES.items():
        lc.execute_command("PS.CREATE", k, "SHAPE", *shape, "OPTIM", "ACCUM")
    Pusher(local.port, 32, pause=0).run()
    local.restart(timeout=30)
    rep = make_replica(local)
    lc = local.client()
    assert all(info(lc, k)["accum_pushes"] == 32 for k in SHAPES)
    r = new_relay(extra=["--every-pushes", "4"]).start()
    uc = up.client()
    psserver.wait_until(lambda: all(pull_np(uc, k)[0] == 4 for k in SHAPES), timeout=20,
                        what="4 upstream pushes per key")
    assert r.stop() == 0, r.output()
    assert "at most 8 gradients per upstream push" in r.output()
    check_upstream_has_everything_once(up, local, 32)   # the parts add up to the sum, exactly
    want = {"relay_takes": 1, "relay_rounds": 4, "relay_forwarded": 32, "relay_round_min": 8,
            "relay_round_max": 8, "max_backlog": 16, "backlog": 0, "pending_parts": 0}
    for k in SHAPES:
        f = round_fields(lc, k)
        assert {x: f[x] for x in want} == want, (k, f)
    psserver.wait_for_replication(local, [rep])
    for k in SHAPES:
        assert round_fields(rep.client(), k) == round_fields(lc, k), k
        assert psserver.digest(rep.client(), k) == psserver.digest(lc, k), k
    before = {k: round_fields(lc, k) for k in SHAPES}
    local.restart(timeout=30)
    assert {k: round_fields(local.client(), k) for k in SHAPES} == before
    st = subprocess.run([RELAY, "--status", "--local", local.addr, "--match", "m:*"],
                        capture_output=True, text=True, timeout=30)
    assert st.returncode == 0, st.stdout + st.stderr
    rows = {line.split()[0]: line.split()[1:] for line in st.stdout.splitlines()[1:]}
    for k in SHAPES:   # takes rounds forwarded min max backlog max_bl refusals pending
        assert rows[k][:5] == ["1", "4", "32", "8", "8"], st.stdout
