"""The dense worker's documented role (docs/operations.md section 4, "worker, dense", parsed
from the document) with `--wait 1`: the worker trains against a master with one replica; the
replica leaves (REPLICAOF NO ONE: every WAIT 1 comes back short) and the worker announces the
shard degraded; the replica comes back and the worker announces durability restored, which
it learns from its replica probe (INFO replication). Without `+info|replication` the probe is
refused: before, the shard then stayed degraded without a word (pushes counted as not
replicated for the rest of the run); now the failed probe is announced once."""

import os
import re
import time

import pytest

from faultlib import init, wait_until, workers  # noqa: F401
from pshelpers import require_ps_train

JOB = "dur"
OPS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "operations.md")


def documented_role(name, job):
    """The rules of role 'name' in operations.md's roles table, for job 'job'."""
    rows = [ln for ln in open(OPS).read().splitlines() if ln.startswith("| %s |" % name)]
    assert len(rows) == 1, rows
    rules = re.search(r"\| `([^`]*)` \|\s*$", rows[0]).group(1).replace("\\|", "|").split()
    return ["resetkeys", "resetchannels", "-@all"] + [
        r.replace("{J}", "{%s}" % job).replace("~J:", "~%s:" % job) for r in rules]


def test_the_documented_role_lets_a_waiting_worker_probe_replicas():
    rules = documented_role("worker, dense", JOB)
    assert "+wait" in rules and "+info|replication" in rules, rules


@pytest.mark.parametrize("probe", [True, False], ids=["role", "role-without-probe"])
def test_waiting_worker_sees_its_replica_leave_and_come_back(server, make_replica, workers,
                                                             probe):
    require_ps_train()
    rep = make_replica(server)
    c = server.client()
    rules = documented_role("worker, dense", JOB)
    if not probe:
        rules.remove("+info|replication")
    assert c.execute_command("ACL", "SETUSER", "w", "on", ">pw", *rules)
    init(server.addr, JOB, 40)
    c.execute_command("ACL", "LOG", "RESET")
    w = workers(server.addr, JOB, "w0", "--user", "w", "--password", "pw", "--wait", 1)
    wait_until(lambda: "samples/s" in w.out or w.proc.poll() is not None, 30, "training")
    assert w.proc.poll() is None, w.out[-3000:]
    rc = rep.client()
    rc.execute_command("REPLICAOF", "NO", "ONE")
    wait_until(lambda: "durability degraded on %s" % server.addr in w.out, 20,
               "degraded announced")
    # The WAITs already in flight end (their 1 s timeout) before the replica is back: from
    # now on only the replica probe can notice it.
    time.sleep(1.5)
    rc.execute_command("REPLICAOF", "127.0.0.1", server.port)
    wait_until(lambda: rc.info("replication").get("master_link_status") == "up", 20,
               "replica back")
    if probe:
        wait_until(lambda: "durability restored on %s" % server.addr in w.out, 20,
                   "restored announced")
        assert w.proc.poll() is None, w.out[-3000:]
        denials = c.execute_command("ACL", "LOG")
        assert denials == [], denials
    else:
        wait_until(lambda: "replica probe of %s (INFO replication) failed" % server.addr
                   in w.out, 20, "failed probe announced")
        time.sleep(2.5)     # probes every second: more of them, each refused
        out = w.out
        assert "NOPERM" in out and "+info|replication" in out, out[-2000:]
        assert out.count("replica probe of") == 1, out[-3000:]     # once, not per probe
        assert "durability restored" not in out, out[-3000:]
        log = [dict(zip(e[0::2], e[1::2])) for e in c.execute_command("ACL", "LOG")]
        assert any(d[b"object"] == b"info" for d in log), log
