"""The stream worker's least-privilege ACL role (docs/operations.md section 4, row
"worker, stream"): `ps-train stream` trains a job from a stream under exactly the documented
rules (parsed from the table, so doc and test cannot drift), claims and replays a killed
worker's leased batch under them, and leaves ACL LOG empty, every event trained once; under
the role minus one rule it stops within seconds with exit 1 and a message naming what was
refused (a command, a script's command, or the journal's keys), not a hang or a loop, and a
restart under the whole role trains what is left without training anything twice."""

import os
import re
import signal
import subprocess
import time

import pytest

import psserver
from faultlib import stop_holding_a_lease
from pshelpers import PS_TRAIN, pull_np, run_gen_ctr, run_ps_train

JOB, STREAM, GROUP = "s", "ev", "ps-train"
# The documented row for job s and stream ev, word for word (test_role_is_the_documented_one).
STREAM_RULES = ["~s:*", "~psjob:{s}:*", "~ev", "~{ev}:psj:s:*",
                "+ps.pull", "+ps.pushgrad", "+ps.create", "+xreadgroup", "+xread", "+xrange",
                "+xgroup|create", "+xinfo|groups", "+xinfo|consumers", "+multi", "+exec",
                "+eval", "+hget", "+hmget", "+hset", "+hincrby", "+expire", "+time", "+hgetall",
                "+cluster|slots", "+info|server", "+wait", "+info|replication"]
PASSWORD = "stream-pw-1"
MALFORMED = {"l": "garbage line"}


def documented_rules(role="worker, stream"):
    """The rules of 'role' in docs/operations.md's roles table (besides the common prefix
    'on >PASSWORD resetkeys resetchannels -@all'), for job s and stream ev."""
    with open(os.path.join(psserver.REPO_ROOT, "docs", "operations.md")) as f:
        for line in f:
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())][1:-1]
            if len(cells) == 3 and cells[0] == role:
                words = cells[2].strip("`").replace("\\|", "|").split()
                return [{"~J:*": "~s:*", "~psjob:{J}:*": "~psjob:{s}:*", "~S": "~ev",
                         "~{S}:psj:J:*": "~{ev}:psj:s:*"}.get(w, w) for w in words]
    raise AssertionError("no row %r in docs/operations.md" % role)


def test_role_is_the_documented_one():
    assert documented_rules() == STREAM_RULES


def set_user(server, name, rules):
    server.client().execute_command("ACL", "SETUSER", name, "reset", "on", ">" + PASSWORD,
                                    "resetkeys", "resetchannels", "-@all", *rules)


@pytest.fixture(scope="module")
def lines(tmp_path_factory):
    if not os.path.exists(PS_TRAIN):
        pytest.fail("%s not found: run make client first" % PS_TRAIN, pytrace=False)
    prefix = str(tmp_path_factory.mktemp("acl_stream") / "ctr")
    run_gen_ctr(["--out", prefix, "--samples", 1500, "--test-samples", 100, "--fields", 6,
                 "--vocab", 30, "--seed", 9])
    with open(prefix + ".train.libsvm") as f:
        return [ln.rstrip("\n") for ln in f]


def stream_job(server, lines):
    """Job s (made by the admin: the default user) and stream ev holding 'lines' and one
    malformed entry."""
    r = server.client()
    run_ps_train(["init", "--addr", server.addr, "--job", JOB, "--model", "fm", "--stream",
                  STREAM, "--seed", 3])
    p = r.pipeline(transaction=False)
    for i, ln in enumerate(lines):
        p.xadd(STREAM, {"l": ln})
        if i == 100:
            p.xadd(STREAM, MALFORMED)
    p.execute()
    r.execute_command("ACL", "LOG", "RESET")
    return r


def worker(server, consumer, *extra, user="sw"):
    env = {k: v for k, v in os.environ.items() if k not in ("PS_USER", "PS_PASSWORD")}
    env.update(PS_USER=user, PS_PASSWORD=PASSWORD)
    args = [PS_TRAIN, "stream", "--addr", server.addr, "--job", JOB, "--stream", STREAM,
            "--consumer", consumer, "--progress", "none"] + [str(a) for a in extra]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, env=env)


def finish(p, timeout=30):
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
        raise AssertionError("ps-train stream did not stop:\n" + out.decode(errors="replace"))
    return p.returncode, out.decode(errors="replace")


def counter(r):
    """[events trained, entries malformed]: the job's stream_events tensor (exactly once)."""
    _, v = pull_np(r, "%s:stream_events:0" % JOB)
    return int(v[0]), int(v[1])


def journal(consumer):
    return "{%s}:psj:%s:%s:%s" % (STREAM, JOB, GROUP, consumer)


def journals_empty(r):
    keys = list(r.scan_iter(journal("*")))
    return bool(keys) and all(not r.hget(k, "b") for k in keys)


def test_stream_worker_under_its_documented_role(server, make_replica, lines):
    """Under exactly the documented rules: a worker killed while it holds a lease, a second
    (with --wait 1 and a replica: the lease's WAIT) claims and replays its batch (XINFO
    CONSUMERS, XRANGE) and trains the rest; every event once, the histograms written,
    nothing refused. (+info|replication serves libps's probe of a degraded shard: without a
    replica, too slow for this test; without the rule ACL LOG shows 'info' refused.)"""
    make_replica(server)
    r = stream_job(server, lines)
    set_user(server, "sw", documented_rules())
    common = ["--batch", 32, "--claim-idle-ms", 300, "--batch-ms", 20]
    victim = worker(server, "v", *common)
    held = stop_holding_a_lease(victim.pid, r, journal("v"))
    victim.send_signal(signal.SIGKILL)
    _, vout = finish(victim)
    keeper = worker(server, "k", *common, "--idle-exit", 800, "--wait", 1)
    rc, out = finish(keeper)
    assert rc == 0, vout + out
    for line in held:  # the killed worker's batch, replayed under its push ID
        cid, seq = line.split()[:2]
        assert "of %s, seq %s\n" % (cid, seq) in out, (held, out)
    assert counter(r) == (len(lines), 1), vout + out
    assert journals_empty(r), out
    assert sum(sum(int(v) for v in r.hgetall(k).values())
               for k in r.scan_iter("psjob:{%s}:sauc:*" % JOB)) > 0
    assert "NOPERM" not in vout + out and "refused" not in out, out
    log = r.execute_command("ACL", "LOG")
    assert not log, log


@pytest.mark.parametrize("missing,named", [
    ("+multi", "no permissions to run the 'multi' command"),      # the lease step
    ("~{ev}:psj:s:*", "a script on ev {ev}:psj:s:ps-train:w"),    # the journal's keys
    ("+xinfo|consumers", "refused: the script's XINFO CONSUMERS"),  # the claim script
])
def test_stream_worker_lacking_one_permission_stops(server, lines, missing, named):
    """The role minus one rule: exit 1 within seconds, what was refused named and the role
    pointed at; then a worker under the whole role, under the same consumer name (its
    journal replayed first), trains the rest: every event exactly once."""
    r = stream_job(server, lines)
    set_user(server, "sw", [x for x in STREAM_RULES if x != missing])
    set_user(server, "full", STREAM_RULES)
    t0 = time.time()
    rc, out = finish(worker(server, "w", "--batch", 64, "--claim-idle-ms", 400,
                            "--idle-exit", 3000), timeout=20)
    assert rc == 1, (rc, out)
    assert time.time() - t0 < 10, out
    assert named in out and 'docs/operations.md section 4, "worker, stream"' in out, out
    assert "Traceback" not in out and "Segmentation" not in out, out
    assert r.execute_command("ACL", "LOG"), "refused, yet ACL LOG is empty"
    trained = counter(r)[0] if r.exists("%s:stream_events:0" % JOB) else 0
    assert trained <= len(lines), out
    rc, out2 = finish(worker(server, "w", "--batch", 64, "--idle-exit", 800, user="full"))
    assert rc == 0, out + out2
    assert counter(r) == (len(lines), 1), out + out2
    assert journals_empty(r), out2
