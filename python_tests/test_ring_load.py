"""A group's load when the group is a Redis Cluster (issue #22, relay/ring_load.c): its
pushes/s, CPU and clients are summed over every master (CLUSTER SLOTS; INFO and CLIENT LIST
routed to each master), its workers are the most any one master counts. Read from one node
only (the one a keyless command reaches), a cluster group whose workers push to partitions
on its other masters would look idle and be picked for every new worker."""

import os
import re
import subprocess
import threading
import time

import pytest
import redis

import psserver
from pshelpers import f32
from test_ring import RELAY, Agent, agents  # noqa: F401
from test_ring_acl import PASSWORD, PICK_RULES, set_user


class Pounder(threading.Thread):
    """One worker connection: PS.PUSHGRAD on 'key' at 'port' about every 'pause' s."""

    def __init__(self, port, key, pause=0.01):
        super().__init__(daemon=True)
        self.port, self.key, self.pause = port, key, pause
        self.halt = threading.Event()
        self.done = 0
        self.error = None

    def run(self):
        try:
            c = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)
            while not self.halt.is_set():
                c.execute_command("PS.PUSHGRAD", self.key, f32([0.25] * 4))
                self.done += 1
                time.sleep(self.pause)
        except Exception as e:  # noqa: BLE001 (reported by the test)
            self.error = e

    def stop(self):
        self.halt.set()
        self.join(10)


def pick_as(spec, tmp_path, user):
    """ps-relay --ring SPEC --pick as ACL user 'user': (address, the load table)."""
    p = subprocess.run([RELAY, "--ring", spec, "--pick", "--load-ms", "400",
                        "--log-json", os.path.join(str(tmp_path), "pick.jsonl")],
                       capture_output=True, text=True, timeout=30,
                       env=dict(os.environ, PS_USER=user, PS_PASSWORD=PASSWORD))
    assert p.returncode == 0, (p.stdout, p.stderr)
    return p.stdout.strip(), p.stderr


def loads(table):
    """{group: (pushes/s, workers, rest of the line)} from --pick's stderr."""
    return {g: (float(p), int(w), rest) for g, p, w, rest in
            re.findall(r"pick: (\w): ([\d.]+) pushes/s, (-?\d+) workers(.*)", table)}


# nosan: the agent's reading of INFO/CLIENT LIST is under test; the module code it drives
# (PS.CREATE, PS.PUSHGRAD on a cluster) runs under the sanitizers in test_cluster.py
@pytest.mark.nosan
def test_pick_sums_a_cluster_groups_masters(make_server, tmp_path, module_path):
    """Group a is a 3-master cluster, b and c standalone servers with one worker each. Two
    workers push to a partition on one master of a at a time, each master in turn (the one
    a keyless command reaches, then the two it does not): --pick must count them every
    time (a's pushes/s above b's and c's, 2 workers, 3 masters) and so never pick a. --pick
    runs as a user with exactly the documented `ring pick` role (docs/operations.md)."""
    cl = psserver.RedisClusterHelper(masters=3, module=module_path)
    workers = []
    try:
        masters = cl.masters()
        assert len(masters) == 3
        keys = {}
        for m in masters:
            keys[m.port] = cl.key_for(m, "load:a")
            m.client().execute_command("PS.CREATE", keys[m.port], "SHAPE", 4, "OPTIM", "SGD")
        b, c = make_server(), make_server()
        for s in (b, c):
            s.client().execute_command("PS.CREATE", "load:x", "SHAPE", 4, "OPTIM", "SGD")
        for s in cl.nodes + [b, c]:
            set_user(s, "picker", ["resetkeys", "resetchannels", "-@all"] + PICK_RULES)
        spec = "a=%s,b=%s,c=%s" % ("+".join(n.addr for n in cl.nodes), b.addr, c.addr)
        for s in (b, c):
            workers.append(Pounder(s.port, "load:x"))
            workers[-1].start()
        for m in masters:
            on_a = [Pounder(m.port, keys[m.port]) for _ in range(2)]
            for w in on_a:
                w.start()
            time.sleep(0.3)  # both pushing before the first sample
            addr, table = pick_as(spec, tmp_path, "picker")
            for w in on_a:
                w.stop()
                assert w.error is None and w.done > 0, w.error
            got = loads(table)
            assert set(got) == {"a", "b", "c"}, table
            assert addr in (b.addr, c.addr), (m.addr, addr, table)
            pa, wa, rest = got["a"]
            assert pa > 1.3 * max(got["b"][0], got["c"][0]) and got["b"][0] > 0, (m.addr, table)
            assert wa == 2 and ", 3 masters" in rest, (m.addr, table)
        for w in workers:
            assert w.error is None and w.done > 0, w.error
        for s in cl.nodes + [b, c]:  # nothing was refused
            log = s.client().execute_command("ACL", "LOG")
            assert not log, (s.addr, log)
    finally:
        for w in workers:
            w.stop()
        cl.cleanup()


def test_least_loaded_does_not_flap_on_noise(make_server, tmp_path, agents):
    """Three idle groups (no worker anywhere): their loads differ only by CPU noise, so each
    agent names a least-loaded group once and keeps it (a new one only when it is less loaded
    by the rule: CPU apart by more than 5 points or 20%), however many samples it takes."""
    srv = [make_server() for _ in range(3)]
    for s in srv:
        s.client().execute_command("PS.CREATE", "m:x:0", "SHAPE", 4, "OPTIM", "SGD")
    spec = ",".join("%s=%s" % (n, s.addr) for n, s in zip("abc", srv))
    ags = [Agent(tmp_path, spec, n, ["--load-ms", "300"]) for n in "abc"]
    for a in ags:
        agents.append(a)
        a.start()
    time.sleep(2.5)  # about 8 samples each
    for a in ags:
        assert a.stop() == 0, a.output()
        named = re.findall(r"least-loaded group: (\w+)", a.output())
        assert len(named) == 1, a.output()
