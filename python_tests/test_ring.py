"""The ring topology (issue #22): groups that train against their own server and exchange
their accumulated change around a ring of ps-relay --ring agents, losing and doubling
nothing.

Every group's tensors start from the same values and use SGD with LR 1; the "workers" push
small integer gradients, so every sum is exact: after the barrier (ps-relay --ring
--barrier) every group must hold exactly start - (sum of every group's gradients), bit for
bit. Accounting per origin (PS.INFO ring_take_seq and ring_origins): the takes of group X
(its take_seq: one seq per take, no floor) == the hwm and the applied count of X at every
other group, i.e. each delta applied once everywhere.

Faults: an agent SIGKILLed at random points and restarted; a whole group (server and agent)
removed for good mid-run, the others go on and agree; a fresh group joining with --join."""

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
# Large start values: with THRESHOLD 0.05 an element travels once its change passes 50, so
# most changes wait (accumulated) for several pushes, and much is left for the barrier.
START = {k: (np.arange(int(np.prod(s))) % 7 + 1000).astype(np.float32)
         for k, s in SHAPES.items()}


def grad(group, seq, key):
    n = int(np.prod(SHAPES[key]))
    # 0, 1 or 2: the sums grow (never cancel out), exact in float32
    return ((np.arange(n) * (group + 1) + seq + len(key)) % 3).astype(np.float32)


class Agent:
    """One ps-relay --ring process, output in a file, stopped by pid."""

    def __init__(self, d, ring, name, extra=(), env=None):
        self.out = os.path.join(str(d), "agent-%s.out" % name)
        self.cmd = [RELAY, "--ring", ring, "--self", name, "--match", "m:*",
                    "--every-ms", "30", "--dead-after-ms", "800", "--progress-ms", "0",
                    "--threshold", "0.05",
                    "--log-json", os.path.join(str(d), "ring-%s.jsonl" % name)] + list(extra)
        self.env = dict(os.environ, **(env or {}))
        self.proc = None

    def start(self):
        with open(self.out, "ab") as f:
            self.proc = subprocess.Popen(self.cmd, stdout=f, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=self.env)
        psserver._register(self.proc)
        return self

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def kill(self):
        if self.running():
            os.kill(self.proc.pid, signal.SIGKILL)
        self.wait()

    def stop(self):
        if self.running():
            os.kill(self.proc.pid, signal.SIGTERM)
        return self.wait()

    def wait(self, timeout=30):
        if self.proc:
            self.proc.wait(timeout=timeout)
            psserver._unregister(self.proc)
            return self.proc.returncode

    def output(self):
        with open(self.out, errors="replace") as f:
            return f.read()


def run_agent(d, ring, name, *extra, timeout=30):
    """Runs an agent to its end (a barrier, or a refusal): (exit code, output)."""
    a = Agent(d, ring, name + "-x", extra)
    a.cmd[a.cmd.index("--self") + 1] = name
    a.start()
    try:
        rc = a.wait(timeout)
    finally:
        a.kill()
    return rc, a.output()


class Pusher(threading.Thread):
    """A group's worker: PS.PUSHGRAD grad(group, seq) for seq 1..n on its own server."""

    def __init__(self, port, group, n, pause=0.004, retry_io=False):
        super().__init__(daemon=True)
        self.port, self.group, self.n, self.pause = port, group, n, pause
        self.retry_io = retry_io  # resend (same ID seq: applied once) while the server restarts
        self.done = 0
        self.waits = 0
        self.error = None

    def run(self):
        try:
            c = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)
            for seq in range(1, self.n + 1):
                for k in SHAPES:
                    while True:
                        try:
                            c.execute_command("PS.PUSHGRAD", k, f32(grad(self.group, seq, k)),
                                              "ID", "w%d" % self.group, seq)
                            break
                        except redis.ResponseError as e:  # MAXLAG: wait for the ring
                            if str(e).startswith("LOADING"):
                                time.sleep(0.02)
                                continue
                            assert str(e).startswith("BACKLOG"), e
                            self.waits += 1
                            time.sleep(0.005)
                        except (redis.ConnectionError, redis.TimeoutError):
                            if not self.retry_io:
                                raise
                            time.sleep(0.02)
                self.done = seq
                time.sleep(self.pause)
        except redis.ConnectionError as e:  # the group's server removed
            self.error = e


def pushed_sum(group, n, key):
    return sum(grad(group, s, key) for s in range(1, n + 1))


@pytest.fixture
def agents():
    started = []
    yield started
    for a in started:
        a.kill()


@pytest.fixture
def groups(make_server, tmp_path, agents):
    """new(n) -> (servers, ring spec, new_agent) with the model created on each."""
    if not os.path.exists(RELAY):
        pytest.fail("%s not built: run make" % RELAY, pytrace=False)

    def new(n, names="abcdefgh", start=START, args=()):
        srv = [make_server(args=list(args)) for _ in range(n)]
        for s in srv:
            c = s.client()
            for k, shape in SHAPES.items():
                c.execute_command("PS.CREATE", k, "SHAPE", *shape, "DATA", f32(start[k]),
                                  "OPTIM", "SGD", "LR", 1)
        spec = ",".join("%s=%s" % (names[i], s.addr) for i, s in enumerate(srv))

        def new_agent(i, extra=(), env=None):
            a = Agent(tmp_path, spec, names[i], extra, env)
            agents.append(a)
            return a.start()
        return srv, spec, new_agent
    return new


def ring_info(s, key):
    i = info(s.client(), key)
    rows = {}
    for row in i.get("ring_origins") or []:
        rows[row[0].decode()] = (int(row[1]), int(row[2]))
    return i, rows


def wait_tracked(srv, names):
    for s, n in zip(srv, names):
        psserver.wait_until(lambda: all(
            (info(s.client(), k).get("ring_origin") or b"") == n.encode() for k in SHAPES),
            timeout=10, what="agent %s tracking" % n)


def check_accounting(srv, names, joined=""):
    """Per origin: takes (its take_seq) == hwm == applied at every other live group; nothing
    pending, accumulated or queued anywhere. A group that joined took the hwm table from a
    neighbour (applied counts from 0 there): its hwm must still equal the takes."""
    for k in SHAPES:
        infos = {n: ring_info(s, k) for s, n in zip(srv, names)}
        for n, (i, _) in infos.items():
            assert int(i["ring_pending_seq"]) == 0, (n, k, i)
            assert int(i["ring_accumulated"]) == 0, (n, k, i)
            assert int(i["ring_fwd_entries"]) == 0, (n, k, i)
        for origin, (oi, _) in infos.items():
            takes = int(oi["ring_take_seq"])
            assert takes > 0, (origin, k)
            for other, (_, rows) in infos.items():
                if other == origin:
                    continue
                if other in joined:
                    assert rows.get(origin, (0, 0))[0] == takes, (k, origin, other, takes, rows)
                    assert rows[origin][1] <= takes, (k, origin, other, takes, rows)
                else:
                    assert rows.get(origin) == (takes, takes), (k, origin, other, takes, rows)


def need_join_with_base(s, keepown=False):
    """Joining exactly needs PS.RING STATE to answer a tracked tensor's base and its own mark
    (ring_spec.md "CONTRACT FIX, JOIN/STATE"), and rejoining a group with changes of its own
    JOIN ... KEEPOWN ("ringagent requests" 2): a module without them makes a joiner double
    its neighbour's untaken change (or drop its own) - skip rather than assert a known gap."""
    rep = s.client().execute_command("PS.RING", "m:w:0", "STATE")
    if not rep[3] or rep[3][0][0] != rep[2]:
        pytest.skip("the module's PS.RING STATE has no own mark (JOIN would double a change)")
    if keepown:
        c = s.client()
        c.execute_command("PS.CREATE", "probe:k", "SHAPE", 1, "OPTIM", "SGD")
        c.execute_command("PS.RING", "probe:k", "TRACK", "zz")
        try:
            c.execute_command("PS.RING", "probe:k", "JOIN", "zz", f32([0]), "KEEPOWN")
        except redis.ResponseError as e:
            pytest.skip("the module has no JOIN ... KEEPOWN (%s)" % e)
        finally:
            c.delete("probe:k")


def values(s):
    c = s.client()
    return {k: pull_np(c, k)[1] for k in SHAPES}


@pytest.mark.parametrize("mode", ["ring", "mesh"])
def test_ring_three_groups_exact_sums(groups, tmp_path, mode):
    srv, spec, new_agent = groups(3)
    names = "abc"
    ags = [new_agent(i, ["--mesh"] if mode == "mesh" else []) for i in range(3)]
    wait_tracked(srv, names)
    n = 60
    ps = [Pusher(s.port, g, n) for g, s in enumerate(srv)]
    for p in ps:
        p.start()
    for p in ps:
        p.join(30)
    time.sleep(0.3)  # a few rounds with the workers quiet: most deltas travel before the barrier
    for a in ags:
        assert a.stop() == 0, a.output()
    rc, out = run_agent(tmp_path, spec, "a", "--barrier")
    assert rc == 0, out
    assert "values bit-identical" in out, out
    # the threshold held changes back: the barrier had to ship them
    shipped = re.search(r"drained after .* (\d+) elements", out)
    assert shipped and int(shipped.group(1)) > 0, out
    for k in SHAPES:
        want = START[k] - sum(pushed_sum(g, n, k) for g in range(3))
        for g, s in enumerate(srv):
            np.testing.assert_array_equal(values(s)[k], want, err_msg="group %s %s" % (names[g], k))
    check_accounting(srv, names)
    # each agent sent something of its own and forwarded the others'
    log = open(os.path.join(str(tmp_path), "ring-a.jsonl")).read()
    assert '"event": "start"' in log


def test_ring_agent_sigkilled_three_times(groups, tmp_path):
    srv, spec, new_agent = groups(3)
    names = "abc"
    ags = [new_agent(i) for i in range(3)]
    wait_tracked(srv, names)
    n = 400
    ps = [Pusher(s.port, g, n) for g, s in enumerate(srv)]
    for p in ps:
        p.start()
    rnd = random.Random(int(os.environ.get("PS_TEST_SEED", "0") or 0) or None)
    for _ in range(3):
        time.sleep(rnd.uniform(0.1, 0.4))
        ags[1].kill()
        time.sleep(rnd.uniform(0.0, 0.2))
        ags[1] = new_agent(1)
    # and at each step of its cycle: right after a take, a send, an ack, a forward
    for phase in ("take:2", "send:2", "ack:1", "fwd:2"):
        ags[1].kill()
        ags[1] = new_agent(1, env={"PS_RING_FAULT": phase})
        ags[1].wait(10)
        assert ags[1].proc.returncode == -signal.SIGKILL, (phase, ags[1].output())
    ags[1] = new_agent(1)
    assert all(p.is_alive() for p in ps), "the workers finished before the faults: raise n"
    for p in ps:
        p.join(30)
    time.sleep(0.3)
    for a in ags:
        assert a.stop() == 0, a.output()
    rc, out = run_agent(tmp_path, spec, "c", "--barrier")
    assert rc == 0, out
    for k in SHAPES:
        want = START[k] - sum(pushed_sum(g, n, k) for g in range(3))
        for g, s in enumerate(srv):
            np.testing.assert_array_equal(values(s)[k], want, err_msg="group %s %s" % (names[g], k))
    check_accounting(srv, names)


def test_ring_group_removed_then_fresh_group_joins(groups, tmp_path, make_server):
    """c is removed for good mid-run (server and agent killed): a and b go on and agree.
    Then d, a fresh server (its tensors at other values), joins with --join: it copies the
    model from a neighbour, and after more training and a barrier all three agree exactly."""
    srv, spec, new_agent = groups(3)
    dport = psserver.free_port()  # d's server starts later: absent from the ring at first
    spec4 = spec + ",d=127.0.0.1:%d" % dport
    ags = []
    for i in range(3):
        a = Agent(tmp_path, spec4, "abc"[i])
        ags.append(a.start())
    try:
        wait_tracked(srv, "abc")
        n = 80
        ps = [Pusher(s.port, g, n) for g, s in enumerate(srv)]
        for p in ps:
            p.start()
        time.sleep(0.4)
        ags[2].kill()
        srv[2].kill()
        for p in ps[:2]:
            p.join(30)
        ps[2].join(30)
        psserver.wait_until(lambda: "group c left the ring" in ags[0].output() and
                            "group c left the ring" in ags[1].output(), timeout=10,
                            what="a and b drop c")
        # a and b finish without c (a barrier while their agents run) and agree
        rc, out = run_agent(tmp_path, spec4, "a", "--barrier")
        assert rc == 0 and "values bit-identical" in out, out
        va, vb = values(srv[0]), values(srv[1])
        for k in SHAPES:
            np.testing.assert_array_equal(va[k], vb[k], err_msg=k)
            want = START[k] - pushed_sum(0, n, k) - pushed_sum(1, n, k)
            assert (va[k] <= want).all(), k  # and what of c reached them (gradients >= 0)
        check_accounting(srv[:2], "ab")
        need_join_with_base(srv[0])
        # d joins (its tensors at other values), then everyone trains a bit more
        d = make_server(port=dport)
        zeros = {k: np.zeros_like(v) for k, v in START.items()}
        for k, shape in SHAPES.items():
            d.client().execute_command("PS.CREATE", k, "SHAPE", *shape, "DATA", f32(zeros[k]),
                                       "OPTIM", "SGD", "LR", 1)
        dj = Agent(tmp_path, spec4, "d", ["--join"])
        ags.append(dj.start())
        psserver.wait_until(lambda: "joined (--join): copied" in dj.output(), timeout=10,
                            what="d joined")
        more = [Pusher(s.port, g + 10, 30) for g, s in ((0, srv[0]), (1, srv[1]), (3, d))]
        for p in more:
            p.start()
        for p in more:
            p.join(30)
        time.sleep(0.3)
        for a in (ags[0], ags[1], dj):
            assert a.stop() == 0, a.output()
        rc, out = run_agent(tmp_path, spec4, "a", "--barrier")
        assert rc == 0, out
        live = [srv[0], srv[1], d]
        vals = [values(s) for s in live]
        for k in SHAPES:
            for v in vals[1:]:
                np.testing.assert_array_equal(v[k], vals[0][k], err_msg=k)
            # a and b's gradients and d's all counted exactly once; c's: what reached a and b
            # (the same at both: they agree)
        check_accounting(live, "abd", joined="d")
        # what c took before it died reached every live group alike
        for k in SHAPES:
            cs = {ring_info(s, k)[1].get("c", (0, 0))[0] for s in live}
            assert len(cs) == 1, (k, cs)
    finally:
        for a in ags:
            a.kill()


def test_ring_refuses_groups_that_differ(groups, tmp_path, make_server):
    srv, spec, _ = groups(2)
    other = dict(START)
    other["m:b:0"] = START["m:b:0"] + 1
    srv2, spec2, _ = groups(1, start=other)
    bad = spec + ",c=%s" % srv2[0].addr
    rc, out = run_agent(tmp_path, bad, "a")
    assert rc == 2, out
    assert "holds other values" in out, out
    # a ring address that is not a group of this model
    e = make_server()
    rc, out = run_agent(tmp_path, spec + ",c=%s" % e.addr, "a")
    assert rc == 2 and "not a group" in out, out
    # another shape
    f = make_server()
    for k, shape in SHAPES.items():
        f.client().execute_command("PS.CREATE", k, "SHAPE", *(shape + (1,)), "OPTIM", "SGD",
                                   "LR", 1)
    rc, out = run_agent(tmp_path, spec + ",c=%s" % f.addr, "a")
    assert rc == 2 and "does not fit" in out, out
    # nothing was tracked by the refused agents
    assert not info(srv[0].client(), "m:w:0").get("ring_origin")


# Issue 22's lost delta (found): b, back after the long outage, lacked a's take 11 (acked
# without it) and got a's take 12 first; its mark passed 11, so 11 was dropped as a
# duplicate and the groups ended 24-30 apart in about 1 run of 10. PS.APPLYDELTA ... PREV
# now refuses a delta whose predecessor is missing (GAP) and b's agent rejoins it
# (docs/design.md "Ring state", "Why a delta is never lost to a gap").
def test_ring_group_server_killed_with_aof_always(groups, tmp_path):
    """b's server (appendfsync always) SIGKILLed twice under its running agent: once back
    within --dead-after-ms (its ring state, pending take and forward queue come back from the
    AOF: the ring goes on), once down for longer (a and c drop it and acknowledge without it; back, it lacks those deltas: its agent rejoins it, keeping its own change).
    The sums stay exact and per origin every take is applied once everywhere."""
    srv, spec, new_agent = groups(3, args=["--appendonly", "yes", "--appendfsync", "always"])
    names = "abc"
    ags = [new_agent(i) for i in range(3)]
    wait_tracked(srv, names)
    need_join_with_base(srv[0], keepown=True)
    n = 300
    ps = [Pusher(s.port, g, n, retry_io=(g == 1)) for g, s in enumerate(srv)]
    for p in ps:
        p.start()
    time.sleep(0.3)
    srv[1].restart(kill=True, timeout=30)
    time.sleep(0.5)
    srv[1].kill()
    psserver.wait_until(lambda: "group b left the ring" in ags[0].output(), timeout=10,
                        what="a drops b")
    srv[1].start(timeout=30)
    psserver.wait_until(lambda: "lacks deltas" in ags[1].output() and
                        "joined (" in ags[1].output(), timeout=10, what="b rejoins")
    for p in ps:
        p.join(30)
        assert not p.error, p.error
    time.sleep(0.3)
    for a in ags:
        assert a.stop() == 0, a.output()
    rc, out = run_agent(tmp_path, spec, "a", "--barrier")
    assert rc == 0, out
    for k in SHAPES:
        want = START[k] - sum(pushed_sum(g, n, k) for g in range(3))
        for g, s in enumerate(srv):
            np.testing.assert_array_equal(values(s)[k], want, err_msg="group %s %s" % (names[g], k))
    check_accounting(srv, names, joined="b")


def test_ring_forwarded_delta_past_a_gap_is_refused_and_the_group_rejoins(groups, tmp_path,
                                                                         agents):
    """Issue 22's lost delta, deterministic, with the real agents (ring a -> c -> b -> a).
    The history is made by hand first, as the agents would have: a's take 1 reached b and
    c; take 2 only c (b was out; a acknowledged it without b); take 3 is pending at a and
    sits in c's forward queue (HOPS 1: for b). Then c's agent runs alone and forwards it:
    before the fix b applied it, its mark passed 2 and take 2 was lost for good (the
    barrier found b apart). Now b refuses it (GAP), c takes b out of its ring, and once a's
    and b's agents run, b's agent sees it lacks what a acknowledged and rejoins it from a
    group that has it: every sum exact, every take applied once."""
    srv, _, _ = groups(3)
    spec = "a=%s,c=%s,b=%s" % (srv[0].addr, srv[2].addr, srv[1].addr)
    names = "abc"
    ca, cb, cc = (s.client() for s in srv)
    for g, (c, n) in enumerate(zip((ca, cb, cc), names)):
        for k in SHAPES:
            assert c.execute_command("PS.RING", k, "TRACK", n) == 1
    for seq in (1, 2, 3):
        for k in SHAPES:
            ca.execute_command("PS.PUSHGRAD", k, f32(grad(0, seq, k)))
            s, _, idx, vals, _ = ca.execute_command("PS.DELTATAKE", k)
            assert s == seq
            if seq == 1:
                assert cb.execute_command("PS.APPLYDELTA", k, "ID", "a", s, idx, vals) == 1
            hops = ["HOPS", 1] if seq == 3 else []
            assert cc.execute_command("PS.APPLYDELTA", k, "ID", "a", s, idx, vals, *hops) == 1
            if seq < 3:
                assert ca.execute_command("PS.DELTAACK", k, s) == 1
    for k in SHAPES:
        assert int(info(cc, k)["ring_fwd_entries"]) == 1
    a_c = Agent(tmp_path, spec, "c")
    agents.append(a_c)
    a_c.start()
    psserver.wait_until(lambda: all(int(info(cc, k)["ring_fwd_entries"]) == 0 for k in SHAPES),
                        timeout=10, what="c's agent forwards take 3")
    assert "GAP" in a_c.output(), a_c.output()
    for k in SHAPES:  # b still lacks take 2, and did not paper it over with take 3
        assert ring_info(srv[1], k)[1]["a"][0] == 1
    ags = [a_c]
    for name in "ab":
        a = Agent(tmp_path, spec, name)
        agents.append(a)
        ags.append(a.start())
    psserver.wait_until(lambda: "joined (" in ags[2].output(), timeout=10, what="b rejoins")
    psserver.wait_until(lambda: all(int(info(ca, k)["ring_pending_seq"]) == 0 for k in SHAPES),
                        timeout=10, what="a acknowledges take 3")
    for a in ags:
        assert a.stop() == 0, a.output()
    rc, out = run_agent(tmp_path, spec, "a", "--barrier")
    assert rc == 0, out
    for k in SHAPES:
        want = START[k] - pushed_sum(0, 3, k)
        for g, s in enumerate(srv):
            np.testing.assert_array_equal(values(s)[k], want, err_msg="group %s %s" % (names[g], k))
        for s, n in zip(srv[1:], "bc"):
            assert ring_info(s, k)[1]["a"][0] == 3, (n, k)


def test_ring_group_that_is_a_cluster(groups, tmp_path, module_path):
    """Star and ring compose: group a is a 3-master Redis Cluster (the model's keys spread over
    its masters), group b a standalone server; the sums are exact at both."""
    cl = psserver.RedisClusterHelper(masters=3, module=module_path)
    ags = []
    try:
        srv, spec, new_agent = groups(1, names="b")
        for k, shape in SHAPES.items():
            cl.node_for_key(k).client().execute_command(
                "PS.CREATE", k, "SHAPE", *shape, "DATA", f32(START[k]), "OPTIM", "SGD", "LR", 1)
        aspec = "a=" + "+".join(n.addr for n in cl.nodes)
        ring = aspec + "," + spec
        keys = ",".join(SHAPES)
        for name in "ab":
            a = Agent(tmp_path, ring, name)
            a.cmd[a.cmd.index("--match"):a.cmd.index("--match") + 2] = ["--keys", keys]
            ags.append(a.start())
        psserver.wait_until(lambda: all(
            (info(cl.node_for_key(k).client(), k).get("ring_origin") or b"") == b"a"
            for k in SHAPES), timeout=10, what="agent a tracking")
        wait_tracked(srv, "b")
        n = 40
        pa = [threading.Thread(target=lambda k=k: [
            cl.node_for_key(k).client().execute_command(
                "PS.PUSHGRAD", k, f32(grad(0, s, k))) for s in range(1, n + 1)]) for k in SHAPES]
        pb = Pusher(srv[0].port, 1, n)
        for t in pa + [pb]:
            t.start()
        for t in pa + [pb]:
            t.join(30)
        for a in ags:
            assert a.stop() == 0, a.output()
        b = Agent(tmp_path, ring, "a", ["--barrier"])
        b.cmd[b.cmd.index("--match"):b.cmd.index("--match") + 2] = ["--keys", keys]
        b.out += ".barrier"
        b.start()
        ags.append(b)
        assert b.wait(30) == 0, b.output()
        for k in SHAPES:
            want = START[k] - pushed_sum(0, n, k) - pushed_sum(1, n, k)
            np.testing.assert_array_equal(values(srv[0])[k], want, err_msg=k)
            got = pull_np(cl.node_for_key(k).client(), k)[1]
            np.testing.assert_array_equal(got, want, err_msg=k)
    finally:
        for a in ags:
            a.kill()
        cl.cleanup()


def test_ring_max_lag_holds_a_group_back(groups, tmp_path):
    """--max-lag 8: while b's server is down (and not yet out of the ring), a's takes cannot
    be acknowledged, so a's workers wait (BACKLOG) after 8 pushes per key instead of running
    ahead; once b is out they go on; b back and rejoined, the sums are exact."""
    srv, spec, new_agent = groups(2, args=["--appendonly", "yes", "--appendfsync", "always"])
    c = srv[0].client()
    c.execute_command("PS.CREATE", "probe:k", "SHAPE", 1, "OPTIM", "SGD")
    try:
        c.execute_command("PS.RING", "probe:k", "TRACK", "zz", "MAXLAG", 8)
    except redis.ResponseError as e:
        pytest.skip("the module has no MAXLAG (%s)" % e)
    finally:
        c.delete("probe:k")
    # --threshold 0: the fixture's 0.05 (values ~1000, pushes of 0..2) keeps dozens of pushes of
    # change under the threshold, and a take that finds nothing above it zeroes the lag by
    # design (docs/design.md "Bounded divergence"; the bound counts pushes above the
    # threshold), so a would run ~50 pushes ahead before its first BACKLOG, whatever b does.
    ags = [new_agent(i, ["--max-lag", "8", "--dead-after-ms", "1500", "--threshold", "0"])
           for i in range(2)]
    wait_tracked(srv, "ab")
    assert int(info(c, "m:w:0")["ring_maxlag"]) == 8
    srv[1].kill()
    p = Pusher(srv[0].port, 0, 60)
    p.start()
    psserver.wait_until(lambda: p.waits > 0, timeout=10, what="a's worker held back")
    held_at = p.done
    assert held_at <= 8 + 1, held_at
    p.join(30)
    assert p.done == 60 and not p.error, (p.done, p.error)
    assert int(info(c, "m:w:0")["ring_lag_refusals"]) > 0
    srv[1].start(timeout=30)
    psserver.wait_until(lambda: "joined (" in ags[1].output(), timeout=10, what="b rejoins")
    for a in ags:
        assert a.stop() == 0, a.output()
    rc, out = run_agent(tmp_path, spec, "a", "--barrier")
    assert rc == 0 and "values bit-identical" in out, out
    for k in SHAPES:
        want = START[k] - pushed_sum(0, 60, k)
        for s in srv:
            np.testing.assert_array_equal(values(s)[k], want, err_msg=k)


def test_ring_group_leaves_for_good(groups, tmp_path):
    """c leaves gracefully (--leave) once its workers are done: everything it trained reaches
    a and b exactly, its tracking is dropped, and a and b go on and end exact without it."""
    srv, spec, new_agent = groups(3)
    ags = [new_agent(i) for i in range(3)]
    wait_tracked(srv, "abc")
    n = 60
    ps = [Pusher(s.port, g, n) for g, s in enumerate(srv)]
    for p in ps:
        p.start()
    ps[2].join(30)
    assert ags[2].stop() == 0, ags[2].output()
    rc, out = run_agent(tmp_path, spec, "c", "--leave")
    assert rc == 0 and "left the ring" in out, out
    assert not info(srv[2].client(), "m:w:0").get("ring_origin")
    psserver.wait_until(lambda: "group c left the ring" in ags[0].output(), timeout=10,
                        what="a drops c")
    more = [Pusher(s.port, g + 10, 20) for g, s in enumerate(srv[:2])]
    for p in more:
        p.start()
    for p in ps[:2] + more:
        p.join(30)
    for a in ags[:2]:
        assert a.stop() == 0, a.output()
    rc, out = run_agent(tmp_path, spec, "a", "--barrier")
    assert rc == 0 and "values bit-identical" in out, out
    for k in SHAPES:
        want = START[k] - sum(pushed_sum(g, n, k) for g in range(3)) - \
            pushed_sum(10, 20, k) - pushed_sum(11, 20, k)
        for s in srv[:2]:
            np.testing.assert_array_equal(values(s)[k], want, err_msg=k)
    check_accounting(srv[:2], "ab")


def test_ring_group_whose_workers_sit_behind_a_tree_relay(groups, tmp_path, make_server):
    """Star and tree compose (issue 22): group b's two workers push to a local server, and a
    ps-relay tree relay forwards their summed rounds to b's server, where b's ring agent runs;
    a and c are plain. After the barrier every group holds exactly start - every worker's
    gradients: the relay's rounds are taken by the ring like any worker's pushes (nothing lost
    or doubled), and the relay's local mirror carries the other groups' change back to b's
    workers."""
    srv, spec, new_agent = groups(3)
    local = make_server()
    relay_out = os.path.join(str(tmp_path), "relay-b.out")
    with open(relay_out, "ab") as f:
        relay = subprocess.Popen([RELAY, "--local", local.addr, "--upstream", srv[1].addr,
                                  "--name", "relay-b", "--match", "m:*", "--every-ms", "10",
                                  "--progress-ms", "0"], stdout=f, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL)
    psserver._register(relay)
    try:
        ags = [new_agent(i) for i in range(3)]
        wait_tracked(srv, "abc")
        lc = local.client()
        psserver.wait_until(lambda: all(lc.exists(k) for k in SHAPES), timeout=10,
                            what="the relay created b's local tensors")
        n = 60
        # b's workers (ids w1, w11) behind the relay; a's and c's on their servers
        ps = [Pusher(srv[0].port, 0, n), Pusher(local.port, 1, n), Pusher(local.port, 11, n),
              Pusher(srv[2].port, 2, n)]
        for p in ps:
            p.start()
        for p in ps:
            p.join(30)
        assert all(p.done == n and p.error is None for p in ps), [(p.done, p.error) for p in ps]
        # The other groups' change reaches b's workers through the relay's mirror.
        # (b's own change in the mirror is -(b1 + b11); a's and c's add about -60 each per
        # element, past the 0.05 threshold: more than 20 of it must have arrived everywhere)
        own_b = -pushed_sum(1, n, "m:w:0") - pushed_sum(11, n, "m:w:0")
        psserver.wait_until(lambda: np.all(pull_np(lc, "m:w:0")[1] - START["m:w:0"] <=
                                           own_b - 20), timeout=10,
                            what="a's and c's change in the relay's local mirror")
        time.sleep(0.2)
        os.kill(relay.pid, signal.SIGTERM)  # forwards what is summed, then exits 0
        assert relay.wait(20) == 0, open(relay_out).read()
        for k in SHAPES:
            li = info(lc, k)
            assert (li["accum_pushes"], li["pending_pushes"]) == (0, 0), (k, li)
        for a in ags:
            assert a.stop() == 0, a.output()
    finally:
        if relay.poll() is None:
            relay.kill()
        relay.wait(10)
        psserver._unregister(relay)
    rc, out = run_agent(tmp_path, spec, "b", "--barrier")
    assert rc == 0 and "values bit-identical" in out, out
    for k in SHAPES:
        want = START[k] - sum(pushed_sum(g, n, k) for g in (0, 1, 11, 2))
        for g, s in enumerate(srv):
            np.testing.assert_array_equal(values(s)[k], want, err_msg="group %s %s" % ("abc"[g], k))
    check_accounting(srv, "abc")
    # b's server got its workers' pushes as the relay's rounds: one push per round, fewer
    # than the workers' 2 n
    for k in SHAPES:
        bi, li = info(srv[1].client(), k), info(lc, k)
        assert bi["pushes"] == li["relay_rounds"] and 0 < bi["pushes"] < 2 * n, (k, bi, li)


class BusyWorker(threading.Thread):
    """A group's worker pushing grad(group, seq) until stopped (BACKLOG: waits, resends)."""

    def __init__(self, port, group):
        super().__init__(daemon=True)
        self.port, self.group, self.halt, self.done = port, group, threading.Event(), 0

    def run(self):
        c = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)
        seq = 0
        while not self.halt.is_set():
            seq += 1
            for k in SHAPES:
                while not self.halt.is_set():
                    try:
                        c.execute_command("PS.PUSHGRAD", k, f32(grad(self.group, seq, k)),
                                          "ID", "busy%d" % self.group, seq)
                        break
                    except redis.ResponseError as e:
                        assert str(e).startswith("BACKLOG"), e
                        time.sleep(0.005)
            self.done = seq
            time.sleep(0.002)

    def stop(self):
        self.halt.set()
        self.join(10)


def pick(spec, tmp_path, *extra):
    p = subprocess.run([RELAY, "--ring", spec, "--pick", "--load-ms", "400",
                        "--log-json", os.path.join(str(tmp_path), "pick.jsonl")] + list(extra),
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, (p.stdout, p.stderr)

    return p.stdout.strip(), p.stderr


def least(agent):
    """The least-loaded group an agent printed last, or None."""
    found = re.findall(r"least-loaded group: (\w+)", agent.output())
    return found[-1] if found else None


def test_ring_worker_told_to_join_the_least_loaded_group(groups, tmp_path):
    """--pick measures each group's PS.PUSHGRAD rate (and workers, CPU) from real pushes and
    names the least-loaded group's address; the running agents print and log the same loads
    and the least-loaded group. a has 2 busy workers, b 1, c none: c is picked; then a's
    workers stop and c gets 2: a is picked (the load, not the --ring order, decides)."""
    srv, spec, new_agent = groups(3)
    ags = [new_agent(i, ["--progress-ms", "300", "--load-ms", "300"]) for i in range(3)]
    wait_tracked(srv, "abc")
    busy_a = [BusyWorker(srv[0].port, 0), BusyWorker(srv[0].port, 10)]
    busy_b = [BusyWorker(srv[1].port, 1)]
    for w in busy_a + busy_b:
        w.start()
    try:
        addr, table = pick(spec, tmp_path)
        assert addr == srv[2].addr, (addr, table)
        loads = dict(re.findall(r"pick: (\w): ([\d.]+) pushes/s", table))
        assert float(loads["a"]) > 0 and float(loads["b"]) > 0 and float(loads["c"]) == 0, table
        assert re.search(r"pick: a: [\d.]+ pushes/s, 2 workers", table), table
        # the agents measure the same: c is the least-loaded live group
        psserver.wait_until(lambda: least(ags[0]) == "c", timeout=10,
                            what="agent a names c least loaded")
        psserver.wait_until(lambda: re.search(r"load a: [\d.]+ pushes/s, 2 workers",
                                              ags[1].output()), timeout=10,
                            what="agent b prints a's load")
        for w in busy_a:
            w.stop()
        busy_c = [BusyWorker(srv[2].port, 2), BusyWorker(srv[2].port, 12)]
        for w in busy_c:
            w.start()
        addr, table = pick(spec, tmp_path)
        assert addr == srv[0].addr, (addr, table)
        psserver.wait_until(lambda: least(ags[2]) == "a", timeout=10,
                            what="agent c names a least loaded")
    finally:
        for w in busy_a + busy_b + locals().get("busy_c", []):
            w.stop()
    assert all(w.done > 20 for w in busy_a + busy_b + busy_c)
    log = open(os.path.join(str(tmp_path), "ring-b.jsonl")).read()
    assert '"event": "load"' in log and '"event": "least_loaded"' in log, log[-2000:]
    picks = open(os.path.join(str(tmp_path), "pick.jsonl")).read()
    assert picks.count('"event": "pick"') == 2 and '"pushes_per_s"' in picks, picks
    for a in ags:
        assert a.stop() == 0, a.output()
    # --pick with a group that does not answer: it is skipped, the others still compared
    srv[2].stop()
    addr, table = pick(spec, tmp_path)
    assert addr in (srv[0].addr, srv[1].addr) and "c: no load measured" in table, table
    # usage: --pick is a query, not an agent
    p = subprocess.run([RELAY, "--ring", spec, "--pick", "--match", "m:*"], capture_output=True,
                       text=True, timeout=10)
    assert p.returncode == 2 and "--pick takes only" in p.stderr and not p.stdout, p
