"""docs/operations.md, run as written: every ```sh block in order, as one bash script, against
a fresh CLUSTER_DIR, free ports and a prefix laid out like `make install` (linked to build/).
It builds the 3+3 cluster with ACL users, trains a dense job and a sparse job under their
worker roles, reads the model as the read-only serving user (a push refused), runs a relay
under its role, fails a master over mid-training, rolls every node onto a new module file
(replicas first, CLUSTER FAILOVER), measures tensor memory, scrapes the Prometheus exporter
and stops the cluster. Also: scripts/cluster.sh start/status/stop on its own."""

import glob
import os
import re
import subprocess

import pytest

import docsrun
import psserver

DOC = os.path.join(docsrun.ROOT, "docs", "operations.md")
pytestmark = pytest.mark.slow


def test_operations_doc_has_the_sections_the_issue_asks_for():
    with open(DOC) as f:
        text = f.read()
    for heading in ("The configuration", "least-privilege roles", "Durability", "Failover",
                    "Restarts and upgrades", "partition-bytes", "Capacity planning",
                    "Monitoring"):
        assert re.search(r"^## .*%s" % re.escape(heading), text, re.M), heading
    assert re.search(r"^### Exporting to a serving store", text, re.M)
    # One role per use, each exercised by a command run under it.
    for user, tool in (("worker-mnist", "ps-train work"), ("worker-ctr", "ps-train work"),
                       ("relay-1", "ps-relay"), ("serve-mnist", "redis-cli")):
        assert re.search(r"%s.*\n?.*%s" % (re.escape(user), re.escape(tool)), text), user
    assert len(docsrun.sh_blocks(DOC)) >= 15


def node_logs(cdir, lines=15):
    """The last lines of every server log under 'cdir': why a node did not come back."""
    tails = []
    for log in sorted(glob.glob(os.path.join(cdir, "*", "redis.log")) +
                      glob.glob(os.path.join(cdir, "*.log"))):
        with open(log, errors="replace") as f:
            tail = f.read().splitlines()[-lines:]
        tails.append("--- %s\n%s" % (os.path.relpath(log, cdir), "\n".join(tail)))
    return "\n".join(tails)


def test_operations_doc_runs_as_written(tmp_path):
    for tool in ("redis-server", "redis-cli", "curl", "prometheus-redis-exporter"):
        assert subprocess.run(["which", tool], stdout=subprocess.DEVNULL).returncode == 0, tool
    cdir = str(tmp_path / "cluster")
    env = {"REDIS_PS": docsrun.install_prefix(tmp_path), "CLUSTER_DIR": cdir,
           "BASE_PORT": str(docsrun.free_port_range(9, bus=6)), "HOME": str(tmp_path),
           "PS_LUA": os.path.join(docsrun.ROOT, "examples", "prometheus", "redis_ps.lua")}
    rc, out = docsrun.run_script(docsrun.script_of(DOC), env, str(tmp_path), 420,
                                 os.path.join(cdir, "*", "redis.pid"),
                                 str(tmp_path / "run.log"))
    where = re.findall(r"^=== (docs/operations.md:\d+)$", out, re.M)
    assert rc == 0, "failed in the block at %s (exit %s):\n%s\n%s" % (
        where[-1] if where else "?", rc, out[-6000:], node_logs(cdir))
    assert "all blocks ran" in out
    # What the text promises about the outputs.
    assert re.search(r"ps-train \(redis-ps\) \d", out)
    assert re.search(r"cluster of 6 nodes \(3 masters\)", out), out[-3000:]
    assert "state finished (every task acked)" in out
    assert re.search(r"^[1-9]\d*$", out, re.M)                       # the NOPERM count
    assert "NOPERM this user has no permissions to run the 'ps.pushgrad' command" in out
    assert re.search(r"test_auc=0\.[6-9]", out)                        # the sparse job learned
    assert re.search(r"\d+ existed and keep their settings: tree:W0:0 holds optimizer accum",
                     out, re.I), out[-3000:]
    assert re.search(r"^note: no task of job tree was taken on this server", out, re.M)
    assert re.search(r"^slave$", out, re.M)                             # the old master rejoined
    assert re.search(r"ps-export: done: 1 passes, [1-9]\d* rows written, 0 deleted", out)  # the base
    assert "ps-export: done: 1 passes, 0 rows written, 0 deleted" in out             # the delta
    assert re.search(r"^\s*6 1$", out, re.M)                            # ps on all 6 after the roll
    assert "versions unchanged" in out                                  # the roll lost nothing
    evals = re.findall(r"^eval job mnist: .*$", out, re.M)
    assert len(evals) == 2 and evals[0] == evals[1], evals              # same model, same answer
    adam, sgd = [int(x) for x in re.findall(r"^(\d{7,})$", out, re.M)[:2]]
    assert 12_000_000 <= adam < 12_200_000 and 4_000_000 <= sgd < 4_100_000, (adam, sgd)
    assert re.search(r'^redis_script_values\{key="ps_exporter_tensors"\} [1-9]', out, re.M)


def test_cluster_script_starts_and_stops(tmp_path):
    cdir = str(tmp_path / "c")
    base = docsrun.free_port_range(6, bus=6)
    env = dict(os.environ, CLUSTER_DIR=cdir, BASE_PORT=str(base),
               PS_SO=os.path.join(docsrun.BUILD, "ps.so"), APPENDFSYNC="no")
    script = os.path.join(docsrun.ROOT, "scripts", "cluster.sh")
    try:
        p = subprocess.run([script, "start"], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=180)
        assert p.returncode == 0, p.stdout
        assert p.stdout.count(" master  slots ") == 3 and p.stdout.count(" replica of ") == 3
        pw = open(os.path.join(cdir, "admin.pw")).read().strip()
        c = psserver.RawClient(base)
        assert isinstance(c.call("PING"), psserver.RespError)          # default user is off
        assert c.call("AUTH", "admin", pw) == "OK"
        assert c.call("MODULE", "LIST")[0][1] == b"ps"
        c.close()
        p = subprocess.run([script, "stop"], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=120)
        assert p.returncode == 0 and "stopped 6 nodes" in p.stdout, p.stdout
    finally:
        for port in range(base, base + 6):
            f = os.path.join(cdir, str(port), "redis.pid")
            if os.path.exists(f):
                try:
                    os.kill(int(open(f).read()), 9)
                except (OSError, ValueError):
                    pass
