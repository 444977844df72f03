"""The ring's dynamic adjustment (issue #22) against real link differences, made with
bench/delay_proxy.py (a TCP proxy adding a one-way delay and a bandwidth cap per
direction: netem is not available on these machines).

- --reorder: four groups at two sites (a, b near; c, d near; every a/b <-> c/d link
  through a proxy adding 20 ms each way). The agents' --ring lists start the ring as
  a -> c -> b -> d (the slow cut crossed four times) and are not even in the same order
  for every agent; they must all settle on the same cycle that crosses the cut twice
  (a -> b -> c -> d), from the RTT rows they publish.
- --reorder at three sites: six groups, a hub site (a, b, c) and two spokes (d, e; f) 10 ms
  from the hub and 40 ms from each other: every agent settles on one cycle that never
  crosses the slow spoke-to-spoke link (the hub links twice each, the minimum); then the
  hub group that joins the two spokes in that cycle dies mid-run and the survivors, whose
  remaining order would cross the slow link, move to one cheapest cycle of their own.
- --adapt: two groups; group a's agent reaches b through a proxy capped at 48 KB/s, so
  a round's send of a dense delta takes several periods: a's threshold must rise; with
  the cap lifted (the workers still pushing) it must fall again. The barrier then leaves
  both groups with exactly start - (every gradient), each take applied once: a higher
  threshold delays a change, never drops it.

Exact sums: SGD LR 1 and gradients that are small multiples of 1/4."""

import itertools
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import redis

import psserver
from pshelpers import f32, info, pull_np
from test_ring import (RELAY, SHAPES, START, Agent, Pusher, agents, check_accounting,  # noqa: F401
                       pushed_sum, run_agent, wait_tracked)

PROXY = os.path.join(psserver.REPO_ROOT, "bench", "delay_proxy.py")


class Proxy:
    """bench/delay_proxy.py in front of 'target' (host:port), started and stopped by pid."""

    def __init__(self, d, target, delay_ms=0.0, rate=0, tag="p", wait=True):
        self.ready = os.path.join(str(d), "proxy-%s.port" % tag)
        self.out = os.path.join(str(d), "proxy-%s.out" % tag)
        cmd = [sys.executable, PROXY, "--listen", "0", "--to", target,
               "--delay-ms", str(delay_ms), "--rate", str(rate), "--ready-file", self.ready]
        with open(self.out, "wb") as f:
            self.proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        psserver._register(self.proc)
        self.port = self.addr = None
        if wait:
            self.wait_ready()

    def wait_ready(self):
        """Waits until it listens (a few tenths of a second: a Python start)."""
        psserver.wait_until(lambda: os.path.exists(self.ready) or self.proc.poll() is not None,
                            timeout=10, what="delay proxy ready")
        assert self.proc.poll() is None, self.output()
        with open(self.ready) as f:
            self.port = int(f.read())
        self.addr = "127.0.0.1:%d" % self.port

    def signal(self, sig):
        os.kill(self.proc.pid, sig)

    def stop(self):
        """SIGTERM; returns (bytes up, bytes down) as it printed them."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
        self.proc.wait(timeout=10)
        psserver._unregister(self.proc)
        m = re.search(r"bytes up (\d+) down (\d+)", self.output())
        assert m, self.output()
        return int(m.group(1)), int(m.group(2))

    def kill(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
            psserver._unregister(self.proc)

    def output(self):
        with open(self.out, errors="replace") as f:
            return f.read()


@pytest.fixture
def proxies():
    started = []
    yield started
    for p in started:
        p.kill()


def events(path, ev):
    if not os.path.exists(path):
        return []
    out = []
    with open(path) as f:
        for line in f:
            if line.endswith("\n"):
                e = json.loads(line)
                if e.get("event") == ev:
                    out.append(e)
    return out


def new_groups(make_server, names, shapes, start):
    srv = {}
    for n in names:
        s = make_server()
        c = s.client()
        for k, shape in shapes.items():
            c.execute_command("PS.CREATE", k, "SHAPE", *shape, "DATA", f32(start[k]),
                              "OPTIM", "SGD", "LR", 1)
        srv[n] = s
    return srv


def crossings(ring, site):
    """How many links of 'a -> b -> ... -> a' join two different sites."""
    g = [x.strip() for x in ring.split("->")]
    return sum(site[x] != site[y] for x, y in zip(g, g[1:]))


def test_reorder_two_sites(make_server, tmp_path, agents, proxies):
    """Four groups, two sites 20 ms apart each way: every agent settles on a -> b -> c -> d
    (the slow cut crossed twice, not four times), the same cycle for all; the deltas still
    reach every group once (exact sums after the barrier)."""
    names = "acbd"  # the --ring order: a -> c -> b -> d crosses the cut four times
    site = {"a": 0, "b": 0, "c": 1, "d": 1}
    srv = new_groups(make_server, names, SHAPES, START)
    slow = {}
    for n in names:  # one proxy in front of each server, for the other site's agents
        p = Proxy(tmp_path, srv[n].addr, delay_ms=20, tag=n)
        proxies.append(p)
        slow[n] = p
    direct = ",".join("%s=%s" % (n, srv[n].addr) for n in names)
    ag = {}
    for me in names:
        order = names if me != "d" else "dbac"  # d's list in another order: rows go by name
        spec = ",".join("%s=%s" % (n, srv[n].addr if site[n] == site[me] else slow[n].addr)
                        for n in order)
        # --threshold 0.005: a change travels once past 5 (of ~1000), so the exchange
        # carries deltas over the proxies while the workers push, the barrier the rest
        ag[me] = Agent(tmp_path, spec, me, ["--reorder", "--max-lag", "0", "--threshold",
                                            "0.005"])
        agents.append(ag[me])
        ag[me].start()
    wait_tracked([srv[n] for n in names], names)
    # the workers push across the change of order (about 2.5 s of pushes; the order
    # changes about 1-2 s in): deltas in flight then must still arrive once
    pushers = [Pusher(srv[n].port, i, 20, pause=0.12) for i, n in enumerate(names)]
    for p in pushers:
        p.start()
    logs = {n: os.path.join(str(tmp_path), "ring-%s.jsonl" % n) for n in names}

    def settled():
        last = {n: (events(logs[n], "order") or [{}])[-1].get("ring") for n in names}
        return all(v and crossings(v, site) == 2 for v in last.values())
    psserver.wait_until(settled, timeout=20, interval=0.1, what="every agent reordered: %s" % {
        n: [e["ring"] for e in events(logs[n], "order")] for n in names})
    changed = max(events(logs[n], "order")[-1]["t"] for n in names)
    for p in pushers:
        p.join(30)
        assert p.error is None and p.done == 20
    last_push = time.time()
    time.sleep(0.5)  # any later flip would show up now; the last deltas go round
    final = {n: events(logs[n], "order")[-1]["ring"] for n in names}
    assert set(final.values()) == {"a -> b -> c -> d -> a"}, final
    for n in names:
        e = events(logs[n], "order")[-1]
        if n == "d":
            # d's list started it on d -> b -> a -> c, as cheap (the cut crossed twice) but
            # not the cycle the others pick: it adopts the common choice anyway
            assert e["was_ms"] <= 1.2 * e["rtt_sum_ms"] + 1 and e["rtt_sum_ms"] > 2 * 30, e
            continue
        # measured, not assumed: the old order paid four slow links (40 ms and more of
        # RTT each), the new one two
        assert e["was_ms"] > 4 * 30 and e["was_ms"] > 1.5 * e["rtt_sum_ms"], (n, e)
        assert "ring order by RTT" in ag[n].output(), ag[n].output()
    takes = 0
    for n in names:
        assert ag[n].stop() == 0, ag[n].output()
        m = re.findall(r"stopped after .* takes (\d+) acked (\d+)", ag[n].output())
        assert m, ag[n].output()
        takes += int(m[-1][1])
    assert takes > 0  # the ring carried deltas (over the proxies), not only the barrier
    assert changed < last_push, (changed, last_push)  # the order changed while pushing
    rc, out = run_agent(tmp_path, direct, "a", "--barrier")
    assert rc == 0, out
    for k in SHAPES:
        want = START[k] - sum(pushed_sum(i, 20, k) for i in range(len(names)))
        for n in names:
            assert np.array_equal(pull_np(srv[n].client(), k)[1], want.ravel()), (n, k)
    check_accounting([srv[n] for n in names], names)
    for n in names:
        up, down = slow[n].stop()
        assert up > 0 and down > 0, (n, up, down)


BIG = {"m:big": (4096,)}
BIG_START = {"m:big": np.full(4096, 1000, np.float32)}


def big_grad(group, seq):
    # 0.25 or 0.5 on every element: every take is dense at the starting threshold
    return ((np.arange(4096) + seq + group) % 2 + 1).astype(np.float32) * 0.25


class BigPusher(threading.Thread):
    def __init__(self, port, group, pause=0.01):
        super().__init__(daemon=True)
        self.port, self.group, self.pause = port, group, pause
        self.halt = threading.Event()
        self.done = 0
        self.error = None

    def run(self):
        try:
            c = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=10)
            while not self.halt.is_set():
                seq = self.done + 1
                c.execute_command("PS.PUSHGRAD", "m:big", f32(big_grad(self.group, seq)),
                                  "ID", "w%d" % self.group, seq)
                self.done = seq
                time.sleep(self.pause)
        except Exception as e:  # noqa: BLE001 (reported by the test)
            self.error = e


def test_adapt_threshold_follows_capped_link(make_server, tmp_path, agents, proxies):
    """a -> b through 48 KB/s: a's threshold rises while the link is the bottleneck and falls
    once the cap is lifted (load unchanged); nothing is lost to the higher threshold."""
    names = "ab"
    srv = new_groups(make_server, names, BIG, BIG_START)
    cap = Proxy(tmp_path, srv["b"].addr, rate=48000, tag="cap")
    proxies.append(cap)
    direct = "a=%s,b=%s" % (srv["a"].addr, srv["b"].addr)
    common = ["--adapt", "--max-lag", "0", "--every-ms", "100"]
    ag = {"a": Agent(tmp_path, "a=%s,b=%s" % (srv["a"].addr, cap.addr), "a", common),
          "b": Agent(tmp_path, direct, "b", common)}
    for n in names:
        i = ag[n].cmd.index("--every-ms")
        del ag[n].cmd[i:i + 2]  # the one given in 'common' counts
        i = ag[n].cmd.index("--threshold")
        ag[n].cmd[i + 1] = "0.0002"  # |change| > 0.2: every pushed element travels at first
        agents.append(ag[n])
        ag[n].start()
    for s, n in zip((srv["a"], srv["b"]), names):
        psserver.wait_until(lambda: (info(s.client(), "m:big").get("ring_origin") or b"")
                            == n.encode(), timeout=10, what="agent %s tracking" % n)
    log = os.path.join(str(tmp_path), "ring-a.jsonl")
    pushers = [BigPusher(srv[n].port, i) for i, n in enumerate(names)]
    for p in pushers:
        p.start()
    # capped: a dense take (4096 x 8 bytes) needs ~0.7 s of a 0.1 s round
    psserver.wait_until(lambda: any(e["to"] > e["from"] for e in events(log, "threshold")),
                        timeout=15, interval=0.1, what="a's threshold raised")
    time.sleep(1.0)
    rises = [e for e in events(log, "threshold") if e["to"] > e["from"]]
    top = max(e["to"] for e in rises)
    assert top >= 0.0008, rises  # doubled at least twice
    assert all(e["busy"] > 0.5 for e in rises), rises
    cap.signal(signal.SIGUSR1)  # the cap lifted; the workers go on pushing
    lifted = time.time()
    psserver.wait_until(lambda: any(e["to"] < e["from"] and e["t"] > lifted
                                    for e in events(log, "threshold")),
                        timeout=15, interval=0.1, what="a's threshold lowered after the lift")
    falls = [e for e in events(log, "threshold") if e["to"] < e["from"] and e["t"] > lifted]
    assert all(e["busy"] < 0.05 for e in falls), falls
    assert all(p.is_alive() for p in pushers)  # the load did not drop: the link got faster
    for p in pushers:
        p.halt.set()
        p.join(20)
        assert p.error is None and p.done > 0, p.error
    # the load gone: idle rounds halve it down to --threshold / 8
    psserver.wait_until(lambda: events(log, "threshold")[-1]["to"] == 0.0002 / 8, timeout=10,
                        interval=0.1, what="a's threshold at its floor: %s" % events(log, "threshold")[-1])
    for n in names:
        assert ag[n].stop() == 0, ag[n].output()
    assert "threshold 0.0002 -> 0.0004" in ag["a"].output(), ag["a"].output()
    rc, out = run_agent(tmp_path, direct, "a", "--barrier")
    assert rc == 0, out
    want = BIG_START["m:big"] - sum(
        sum(big_grad(i, s) for s in range(1, p.done + 1)) for i, p in enumerate(pushers))
    for n in names:
        assert np.array_equal(pull_np(srv[n].client(), "m:big")[1], want), n
        i = info(srv[n].client(), "m:big")
        assert int(i["ring_pending_seq"]) == 0 and int(i["ring_accumulated"]) == 0, (n, i)
    takes = {n: int(info(srv[n].client(), "m:big")["ring_take_seq"]) for n in names}
    for n, other in (("a", "b"), ("b", "a")):
        rows = {r[0].decode(): (int(r[1]), int(r[2]))
                for r in info(srv[other].client(), "m:big").get("ring_origins") or []}
        assert rows.get(n) == (takes[n], takes[n]), (n, other, takes, rows)
    up, down = cap.stop()
    assert up > 32768, (up, down)  # a's deltas did cross the proxy


# ---- three sites: a hub and two spokes ---------------------------------------------------
# Site X (a, b, c) is the hub; Y (d, e) and Z (f) are reached from it over 10 ms (one way),
# but Y <-> Z over 40 ms. The cheapest cycles cross the slow Y-Z link not at all, and X-Y and
# X-Z twice each (a spoke is entered once and left once, through the hub): about 4 x 20 ms
# of RTT, where any cycle that uses Y-Z costs at least 20 + 20 + 80. A cycle that keeps Y and
# Z next to each other (a -> d -> f -> ... ) is what the --ring lists start with.
HUB_SITE = {"a": "X", "b": "X", "c": "X", "d": "Y", "e": "Y", "f": "Z"}
HUB_DELAY = {frozenset("XY"): 10, frozenset("XZ"): 10, frozenset("YZ"): 40}


def site_links(ring, site):
    """{frozenset of two sites: how many links of the cycle join them}."""
    g = [x.strip() for x in ring.split("->")]
    out = {}
    for x, y in zip(g, g[1:]):
        if site[x] != site[y]:
            k = frozenset((site[x], site[y]))
            out[k] = out.get(k, 0) + 1
    return out


def best_cost(names, site, delay):
    """The cheapest cycle's RTT sum over 'names' by the model (one-way delays x 2)."""
    names = sorted(names)

    def c(x, y):
        return 0 if site[x] == site[y] else 2 * delay[frozenset((site[x], site[y]))]
    return min(sum(c(p[i], p[(i + 1) % len(p)]) for i in range(len(p)))
               for p in ((names[0],) + q for q in itertools.permutations(names[1:])))


def cycle_cost(ring, site, delay):
    g = [x.strip() for x in ring.split("->")]
    return sum(0 if site[x] == site[y] else 2 * delay[frozenset((site[x], site[y]))]
               for x, y in zip(g, g[1:]))


def hub_ring(make_server, tmp_path, agents, proxies, names, order, extra):
    """The groups of HUB_SITE in 'names', each server behind one delay proxy per other
    delay its other sites see it with; each agent's --ring lists the groups in 'order'
    (rotated to start at itself), the other sites' through their proxies."""
    srv = new_groups(make_server, names, SHAPES, START)
    prox = {}
    for n in names:
        for m in names:
            if HUB_SITE[m] != HUB_SITE[n]:
                d = HUB_DELAY[frozenset((HUB_SITE[m], HUB_SITE[n]))]
                if (n, d) not in prox:  # started together, waited for below
                    prox[(n, d)] = Proxy(tmp_path, srv[n].addr, delay_ms=d, tag="%s%d" % (n, d),
                                         wait=False)
                    proxies.append(prox[(n, d)])
    for p in prox.values():
        p.wait_ready()
    ag = {}
    for me in names:
        i = order.index(me)
        spec = ",".join("%s=%s" % (n, srv[n].addr if HUB_SITE[n] == HUB_SITE[me] else
                                   prox[(n, HUB_DELAY[frozenset((HUB_SITE[n], HUB_SITE[me]))])].addr)
                        for n in order[i:] + order[:i])
        ag[me] = Agent(tmp_path, spec, me, ["--reorder", "--max-lag", "0"] + list(extra))
        agents.append(ag[me])
        ag[me].start()
    wait_tracked([srv[n] for n in names], names)
    direct = ",".join("%s=%s" % (n, srv[n].addr) for n in names)
    logs = {n: os.path.join(str(tmp_path), "ring-%s.jsonl" % n) for n in names}
    return srv, ag, direct, logs


def last_ring(log):
    """The ring an agent runs now: the last ring its log names (its start, an order change,
    a group out or in: the order of the rest stays)."""
    ring = None
    for e in (events(log, "start") + events(log, "order") + events(log, "group_dead") +
              events(log, "group_live")):
        if ring is None or e["t"] >= ring[0]:
            ring = (e["t"], e["ring"])
    return ring and ring[1]


# nosan: the agent's choice of order is under test; the module code it runs (PS.RING,
# deltas) is what test_ring.py runs under the sanitizers already
@pytest.mark.nosan
def test_reorder_three_sites_six_groups(make_server, tmp_path, agents, proxies):
    """Six groups at three sites (a hub and two spokes, the spokes 40 ms apart and 10 ms from
    the hub): every agent, whatever the order of its --ring list, settles on one cycle of
    the cheapest class: the slow Y-Z link never crossed, X-Y and X-Z twice each (the
    minimum: a spoke is entered and left once). The deltas still arrive once: exact sums."""
    names = "abcdef"
    order = "adfbec"  # a -> d -> f -> b -> e -> c: Y-Z once, X-Y three times, X-Z twice
    srv, ag, direct, logs = hub_ring(make_server, tmp_path, agents, proxies, names, order,
                                     ["--threshold", "0.005"])
    pushers = [Pusher(srv[n].port, i, 12, pause=0.1) for i, n in enumerate(names)]
    for p in pushers:
        p.start()
    want = {frozenset("XY"): 2, frozenset("XZ"): 2}

    def settled():
        rings = {n: last_ring(logs[n]) for n in names}
        return len(set(rings.values())) == 1 and all(
            r and site_links(r, HUB_SITE) == want for r in rings.values())
    psserver.wait_until(settled, timeout=20, interval=0.1, what="every agent on one cheapest "
                        "cycle: %s" % {n: last_ring(logs[n]) for n in names})
    for p in pushers:
        p.join(30)
        assert p.error is None and p.done == 12
    time.sleep(0.5)  # a later flip would show now
    final = {n: last_ring(logs[n]) for n in names}
    assert len(set(final.values())) == 1, final
    ring = final["a"]
    assert site_links(ring, HUB_SITE) == want, ring
    assert cycle_cost(ring, HUB_SITE, HUB_DELAY) == best_cost(names, HUB_SITE, HUB_DELAY) == 80
    # measured, not assumed: the --ring order paid Y-Z's 80 ms and an extra X-Y crossing
    for n in names:
        e = events(logs[n], "order")[-1]
        assert e["was_ms"] > e["rtt_sum_ms"] + 60 and e["rtt_sum_ms"] > 4 * 20, (n, e)
    for n in names:
        assert ag[n].stop() == 0, ag[n].output()
    rc, out = run_agent(tmp_path, direct, "a", "--barrier")
    assert rc == 0, out
    for k in SHAPES:
        want_v = START[k] - sum(pushed_sum(i, 12, k) for i in range(len(names)))
        for n in names:
            assert np.array_equal(pull_np(srv[n].client(), k)[1], want_v.ravel()), (n, k)
    check_accounting([srv[n] for n in names], names)


# nosan: the agent's choice of order is under test; the module code it runs (PS.RING,
# deltas) is what test_ring.py runs under the sanitizers already
@pytest.mark.nosan
def test_reorder_after_a_group_dies(make_server, tmp_path, agents, proxies):
    """The same six groups; once they run the cheapest cycle, the hub group that joins the two
    spokes in it dies for good mid-run (server and agent), its change delivered first. The
    order of the rest would put the spokes next to each other (the slow Y-Z link, +40 ms of
    RTT): the survivors re-form the ring without it and all move to one cheapest cycle of
    the five (Y-Z still never crossed), and after the barrier they hold exactly start minus
    every gradient (the dead group's included), each delta applied once."""
    names = "abcdef"
    srv, ag, direct, logs = hub_ring(make_server, tmp_path, agents, proxies, names, "adfbec",
                                     ["--threshold", "0"])
    want = {frozenset("XY"): 2, frozenset("XZ"): 2}

    def agreed(group_names):
        rings = {n: last_ring(logs[n]) for n in group_names}
        return len(set(rings.values())) == 1 and all(
            r and site_links(r, HUB_SITE) == want for r in rings.values())
    psserver.wait_until(lambda: agreed(names), timeout=20, interval=0.1,
                        what="one cheapest cycle: %s" % {n: last_ring(logs[n]) for n in names})
    ring = [x.strip() for x in last_ring(logs["a"]).split("->")][:-1]
    # the hub group between the two spokes: its death leaves Y next to Z
    victim = [g for i, g in enumerate(ring) if HUB_SITE[g] == "X" and
              {HUB_SITE[ring[i - 1]], HUB_SITE[ring[(i + 1) % len(ring)]]} == {"Y", "Z"}]
    assert len(victim) == 1, ring
    victim = victim[0]
    rest = [n for n in names if n != victim]
    pushers = {n: Pusher(srv[n].port, i, 25 if n != victim else 6, pause=0.06)
               for i, n in enumerate(names)}
    pushers[victim].start()
    pushers[victim].join(30)
    assert pushers[victim].error is None and pushers[victim].done == 6
    vs = srv[victim].client()

    def victim_delivered():
        takes = {}
        for k in SHAPES:
            i = info(vs, k)
            if int(i["ring_pending_seq"]) or int(i["ring_accumulated"]):
                return False
            takes[k] = int(i["ring_take_seq"])
        return all(dict((r[0].decode(), int(r[1])) for r in
                        info(srv[n].client(), k).get("ring_origins") or []).get(victim) ==
                   takes[k] for n in rest for k in SHAPES) and takes
    psserver.wait_until(victim_delivered, timeout=15, interval=0.05,
                        what="the victim's change delivered")
    taken = victim_delivered()
    for n in rest:  # the survivors push across the death (the victim forwards their deltas)
        pushers[n].start()
    time.sleep(0.3)
    assert all(pushers[n].is_alive() for n in rest)
    ag[victim].kill()
    srv[victim].kill()
    killed = time.time()
    # without the victim the old order joins the spokes: the survivors must move off it
    psserver.wait_until(lambda: all(victim not in (last_ring(logs[n]) or victim) for n in rest)
                        and agreed(rest), timeout=15, interval=0.1,
                        what="the survivors on one cheapest cycle without %s: %s" % (
                            victim, {n: last_ring(logs[n]) for n in rest}))
    for n in rest:
        assert any(e["t"] > killed for e in events(logs[n], "order")), (n, events(logs[n], "order"))
    for n in rest:
        pushers[n].join(30)
        assert pushers[n].error is None and pushers[n].done == 25, n
    time.sleep(0.5)
    final = {n: last_ring(logs[n]) for n in rest}
    assert len(set(final.values())) == 1, final
    ring = final[rest[0]]
    assert cycle_cost(ring, HUB_SITE, HUB_DELAY) == best_cost(rest, HUB_SITE, HUB_DELAY) == 80
    for n in rest:
        assert ag[n].stop() == 0, ag[n].output()
    rc, out = run_agent(tmp_path, direct, "a" if victim != "a" else "b", "--barrier")
    assert rc == 0, out
    for k in SHAPES:
        want_v = START[k] - sum(pushed_sum(i, pushers[n].done, k) for i, n in enumerate(names))
        for n in rest:
            assert np.array_equal(pull_np(srv[n].client(), k)[1], want_v.ravel()), (n, k)
    check_accounting([srv[n] for n in rest], rest)
    for n in rest:  # the victim's deltas: each applied once at every survivor
        for k in SHAPES:
            rows = {r[0].decode(): (int(r[1]), int(r[2]))
                    for r in info(srv[n].client(), k).get("ring_origins") or []}
            assert rows.get(victim) == (taken[k], taken[k]), (n, k, rows, taken)


def test_reorder_three_groups_agree_on_one_direction(make_server, tmp_path, agents):
    """Three groups on loopback (every link alike): both cycles cost the same, but the
    agents' --ring lists run both ways (a -> b -> c and a -> c -> b): with --reorder they
    all settle on the first in name order, a -> b -> c -> a, and the deltas still arrive
    once (exact sums after the barrier)."""
    names = "abc"
    srv = new_groups(make_server, names, SHAPES, START)
    lists = {"a": "abc", "b": "bac", "c": "cba"}  # b's and c's: a -> c -> b
    ag = {}
    for n in names:
        spec = ",".join("%s=%s" % (m, srv[m].addr) for m in lists[n])
        ag[n] = Agent(tmp_path, spec, n, ["--reorder", "--threshold", "0"])
        agents.append(ag[n])
        ag[n].start()
    wait_tracked([srv[n] for n in names], names)
    logs = {n: os.path.join(str(tmp_path), "ring-%s.jsonl" % n) for n in names}
    pushers = [Pusher(srv[n].port, i, 15) for i, n in enumerate(names)]
    for p in pushers:
        p.start()
    psserver.wait_until(lambda: {last_ring(logs[n]) for n in names} == {"a -> b -> c -> a"},
                        timeout=10, interval=0.1,
                        what="one direction: %s" % {n: last_ring(logs[n]) for n in names})
    for n in "bc":
        assert "ring order by RTT" in ag[n].output(), ag[n].output()
    assert not events(logs["a"], "order")  # a's list ran that way already
    for p in pushers:
        p.join(30)
        assert p.error is None and p.done == 15
    for n in names:
        assert ag[n].stop() == 0, ag[n].output()
    direct = ",".join("%s=%s" % (n, srv[n].addr) for n in names)
    rc, out = run_agent(tmp_path, direct, "a", "--barrier")
    assert rc == 0, out
    for k in SHAPES:
        want = START[k] - sum(pushed_sum(i, 15, k) for i in range(3))
        for n in names:
            assert np.array_equal(pull_np(srv[n].client(), k)[1], want.ravel()), (n, k)
    check_accounting([srv[n] for n in names], names)
