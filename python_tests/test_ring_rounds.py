"""The ring agent's WAN round trips per round (issue #22, latency): three groups of 8 keys
each, every agent reaching the other groups through bench/delay_proxy.py (5 ms each way).
An agent's round sends its takes, forward entries and mark reads of every key as one
pipelined batch per group, all groups at once (relay/ring_wave.c), so a round costs about
one WAN round trip however many keys there are; before, it cost several per key (take
sent, a PS.INFO per group, a forward entry: 20 per round with 4 keys at 20 ms). Counted
by the agent itself ("rounds" events of --log-json), not timed. The exchange stays exact:
SGD LR 1 and integer gradients, every group ends at start - (every gradient), each take
applied once at every other group.

--flush-ms: a key's change under the significance threshold still travels at least every
T ms (else each group makes it for itself and the barrier's sum overshoots)."""

import os
import re
import threading
import time

import numpy as np
import redis

import psserver
from pshelpers import f32, info, pull_np
from test_ring import Agent, agents, run_agent  # noqa: F401
from test_ring_adapt import Proxy, events, proxies  # noqa: F401

KEYS = ["m:k%d" % i for i in range(8)]
N = 16
START = (np.arange(N) % 7 + 1000).astype(np.float32)


def grad(group, seq, k):
    return ((np.arange(N) * (group + 1) + seq + k) % 3).astype(np.float32)


class KeyPusher(threading.Thread):
    def __init__(self, port, group, n, pause=0.02):
        super().__init__(daemon=True)
        self.port, self.group, self.n, self.pause = port, group, n, pause
        self.done = 0
        self.error = None

    def run(self):
        try:
            c = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)
            for seq in range(1, self.n + 1):
                for k, key in enumerate(KEYS):
                    c.execute_command("PS.PUSHGRAD", key, f32(grad(self.group, seq, k)),
                                      "ID", "w%d" % self.group, seq)
                self.done = seq
                time.sleep(self.pause)
        except Exception as e:  # noqa: BLE001 (reported by the test)
            self.error = e


def test_ring_round_costs_one_wan_round_trip_for_all_keys(make_server, tmp_path, agents,
                                                          proxies):
    names = "abc"
    srv = {}
    for n in names:
        s = make_server()
        for key in KEYS:
            s.client().execute_command("PS.CREATE", key, "SHAPE", N, "DATA", f32(START),
                                       "OPTIM", "SGD", "LR", 1)
        srv[n] = s
    slow = {}
    for n in names:
        slow[n] = Proxy(tmp_path, srv[n].addr, delay_ms=5, tag=n)
        proxies.append(slow[n])
    ag = {}
    for me in names:
        spec = ",".join("%s=%s" % (n, srv[n].addr if n == me else slow[n].addr) for n in names)
        # --threshold 0.001: a change travels once past 1 (of ~1000): every round has takes
        ag[me] = Agent(tmp_path, spec, me, ["--max-lag", "0", "--progress-ms", "300"])
        i = ag[me].cmd.index("--threshold")
        ag[me].cmd[i + 1] = "0.001"
        agents.append(ag[me])
        ag[me].start()
    for n in names:
        s = srv[n]
        psserver.wait_until(lambda: all((info(s.client(), k).get("ring_origin") or b"")
                                        == n.encode() for k in KEYS),
                            timeout=10, what="agent %s tracking" % n)
    pushers = [KeyPusher(srv[n].port, g, 40) for g, n in enumerate(names)]
    for p in pushers:
        p.start()
    for p in pushers:
        p.join(30)
        assert p.error is None and p.done == 40, p.error
    time.sleep(0.5)  # a last progress line or two while the ring drains
    for n in names:
        assert ag[n].stop() == 0, ag[n].output()
    for n in names:
        ev = events(os.path.join(str(tmp_path), "ring-%s.jsonl" % n), "rounds")
        busy = [e for e in ev if e["send_rtts"] > 0]  # rounds that exchanged something
        assert busy, (n, ev)
        rounds = sum(e["rounds"] for e in busy)
        rtts = sum(e["rtts_per_round"] * e["rounds"] for e in busy)
        cmds = sum(e["cmds_per_round"] * e["rounds"] for e in busy)
        wave = sum(e["send_rtts"] * e["rounds"] for e in busy)
        # one wave per round (its sends, forward heads and mark reads), a forward wave when
        # a queue held more than one entry, a probe wave every 500 ms: with 8 keys, the old
        # sequence of commands cost 8 or more WAN round trips per round
        assert wave <= rounds + 0.01, (n, busy)
        assert rtts / rounds <= 2.5, (n, rtts / rounds, busy)
        assert cmds / rtts >= 4, (n, cmds / rtts, busy)  # many commands per round trip
    rc, out = run_agent(tmp_path, ",".join("%s=%s" % (n, srv[n].addr) for n in names), "a",
                        "--barrier")
    assert rc == 0, out
    for k, key in enumerate(KEYS):
        want = START - sum(grad(g, s, k) for g in range(3) for s in range(1, 41))
        for n in names:
            assert np.array_equal(pull_np(srv[n].client(), key)[1], want), (n, key)
        rows = {n: info(srv[n].client(), key) for n in names}
        for n in names:
            assert int(rows[n]["ring_pending_seq"]) == 0 and int(rows[n]["ring_fwd_entries"]) == 0
    for n in names:
        up, down = slow[n].stop()
        assert up > 0 and down > 0, (n, up, down)


def test_ring_flush_ms_ships_what_stays_under_the_threshold(make_server, tmp_path, agents):
    """--flush-ms: with a threshold nothing passes (a change must pass 500; the pushes add
    at most 2 per element and push), each key's change still reaches the other group, at
    least every 300 ms, without a barrier: exact sums at both groups."""
    names = "ab"
    srv = {}
    for n in names:
        s = make_server()
        s.client().execute_command("PS.CREATE", KEYS[0], "SHAPE", N, "DATA", f32(START),
                                   "OPTIM", "SGD", "LR", 1)
        srv[n] = s
    spec = ",".join("%s=%s" % (n, srv[n].addr) for n in names)
    ag = {}
    for me in names:
        ag[me] = Agent(tmp_path, spec, me, ["--max-lag", "0", "--flush-ms", "300"])
        i = ag[me].cmd.index("--threshold")
        ag[me].cmd[i + 1] = "0.5"
        agents.append(ag[me])
        ag[me].start()
    for n in names:
        s = srv[n]
        psserver.wait_until(lambda: (info(s.client(), KEYS[0]).get("ring_origin") or b"")
                            == n.encode(), timeout=10, what="agent %s tracking" % n)
    for g, n in enumerate(names):
        c = srv[n].client()
        for seq in range(1, 21):
            c.execute_command("PS.PUSHGRAD", KEYS[0], f32(grad(g, seq, 0)), "ID", "w%d" % g, seq)
    want = START - sum(grad(g, s, 0) for g in range(2) for s in range(1, 21))
    psserver.wait_until(lambda: all(np.array_equal(pull_np(srv[n].client(), KEYS[0])[1], want)
                                    for n in names), timeout=10, interval=0.05,
                        what="both groups hold every change (no barrier)")
    for n in names:
        assert ag[n].stop() == 0, ag[n].output()
        m = re.findall(r"stopped after .* takes (\d+) acked (\d+).* (\d+) flushes", ag[n].output())
        assert m and int(m[-1][2]) >= 1, ag[n].output()
