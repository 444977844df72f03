"""The ring agent's least-privilege ACL role (docs/operations.md "A ring agent", issue #22):
an agent (with --reorder, and its --barrier) runs under exactly that role on every group and
the sums come out exact; under a role lacking one permission it stops at once with exit 2 and
a message naming the refused command (Redis's NOPERM text) and the role's documentation, not
a hang, a loop of errors or a crash. The --pick role is exercised by test_ring_load.py."""

import os
import re
import time

import numpy as np
import pytest

import psserver
from pshelpers import pull_np
from test_ring import (SHAPES, START, Agent, Pusher, agents, check_accounting, grad,  # noqa: F401
                       pushed_sum, wait_tracked)

# The role of docs/operations.md "A ring agent", for the model's keys m:* (the documented
# rules, word for word: test_roles_are_the_documented_ones checks that).
AGENT_RULES = ["resetkeys", "~m:*", "~ps-ring:rtt:*", "resetchannels", "-@all",
               "+ps.info", "+ps.ring", "+ps.deltatake", "+ps.deltaack", "+ps.applydelta",
               "+ps.deltafwd", "+ps.deltafwdack", "+ps.scanrows", "+scan", "+get", "+set",
               "+info", "+client|list", "+cluster|slots", "+cluster|keyslot"]
# --pick's role (no keys): test_ring_load.py runs --pick under it
PICK_RULES = ["+info", "+client|list", "+cluster|slots", "+cluster|keyslot"]
PASSWORD = "ring-pw-1"


def set_user(server, name, rules):
    server.client().execute_command("ACL", "SETUSER", name, "reset", "on", ">" + PASSWORD,
                                    *rules)


def documented_rules(role):
    """The rules of 'role' in docs/operations.md's roles table (besides the common prefix
    'on >PASSWORD resetkeys resetchannels -@all'), for job m."""
    with open(os.path.join(psserver.REPO_ROOT, "docs", "operations.md")) as f:
        for line in f:
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())][1:-1]
            if len(cells) == 3 and cells[0] == role:
                return cells[2].strip("`").replace("\\|", "|").replace("~J:*", "~m:*").split()
    raise AssertionError("no row %r in docs/operations.md" % role)


def test_roles_are_the_documented_ones():
    assert documented_rules("ring agent") == [r for r in AGENT_RULES
                                              if r not in ("resetkeys", "resetchannels", "-@all")]
    assert documented_rules("ring pick") == PICK_RULES


def ring_with_role(make_server, n, rules):
    srv = [make_server() for _ in range(n)]
    for s in srv:
        c = s.client()
        for k, shape in SHAPES.items():
            c.execute_command("PS.CREATE", k, "SHAPE", *shape, "DATA",
                              START[k].tobytes(), "OPTIM", "SGD", "LR", 1)
        set_user(s, "ring", rules)
    spec = ",".join("%s=%s" % ("abcd"[i], s.addr) for i, s in enumerate(srv))
    return srv, spec


ENV = {"PS_USER": "ring", "PS_PASSWORD": PASSWORD}


def test_ring_agent_under_its_minimal_role(make_server, tmp_path, agents):
    """Four groups, agents with --reorder (the RTT rows: GET/SET of ps-ring:rtt:*) taking,
    sending and forwarding every change (--threshold 0) while the workers push, then
    --barrier, all under the role: exact sums, accounting, no refusal anywhere."""
    names = "abcd"
    srv, spec = ring_with_role(make_server, 4, AGENT_RULES)
    ag = []
    for n in names:
        a = Agent(tmp_path, spec, n, ["--reorder", "--progress-ms", "300", "--load-ms", "300",
                                      "--threshold", "0"], env=ENV)
        agents.append(a)
        ag.append(a.start())
    wait_tracked(srv, names)
    pushers = [Pusher(s.port, i, 15) for i, s in enumerate(srv)]
    for p in pushers:
        p.start()
    for p in pushers:
        p.join(30)
        assert p.error is None and p.done == 15
    # every agent published its RTT row under the role, and read the others' (the loads too)
    psserver.wait_until(lambda: all(s.client().get("ps-ring:rtt:" + n) for s, n in
                                    zip(srv, names)), timeout=10, what="RTT rows published")
    psserver.wait_until(lambda: all(re.search(r"load d: [\d.]+ pushes/s, \d+ workers", a.output())
                                    for a in ag), timeout=10, what="loads measured")
    for a in ag:
        assert a.stop() == 0, a.output()
        assert "NOPERM" not in a.output(), a.output()
        m = re.findall(r"stopped after .* takes \d+ acked (\d+) forwarded (\d+)", a.output())
        assert m and int(m[-1][0]) > 0 and int(m[-1][1]) > 0, a.output()  # the ring carried
    b = Agent(tmp_path, spec, "a", ["--barrier"], env=ENV)
    b.out += ".barrier"
    agents.append(b.start())
    assert b.wait(30) == 0, b.output()
    assert "NOPERM" not in b.output(), b.output()
    for k in SHAPES:
        want = START[k] - sum(pushed_sum(i, 15, k) for i in range(4))
        for s in srv:
            np.testing.assert_array_equal(pull_np(s.client(), k)[1], want.ravel())
    check_accounting(srv, names)
    for s in srv:  # nothing was refused on any group
        log = s.client().execute_command("ACL", "LOG")
        assert not log, log


@pytest.mark.parametrize("missing,named", [
    ("+ps.ring", "'ps.ring' command"),            # at the start: TRACK
    ("+ps.deltatake", "'ps.deltatake' command"),  # every round: the take
    ("+ps.applydelta", "'ps.applydelta' command"),  # a delta sent to the successor
    ("+set", "'set' command"),                    # --reorder: the RTT row
    ("~ps-ring:rtt:*", "SET ps-ring:rtt:a"),      # --reorder: the RTT row's key pattern
])
def test_ring_agent_lacking_one_permission_stops(make_server, tmp_path, agents, missing, named):
    """Group a's agent under the role minus one rule (on both groups' servers): exit 2 within
    seconds, the refused command (or key) named, pointing at the role; b's agent (another
    user, the whole role) goes on."""
    srv, spec = ring_with_role(make_server, 2, [r for r in AGENT_RULES if r != missing])
    for s in srv:  # b's agent under the whole role, as another user
        set_user(s, "ringb", AGENT_RULES)
    b = Agent(tmp_path, spec, "b", ["--reorder"], env=dict(ENV, PS_USER="ringb"))
    a = Agent(tmp_path, spec, "a", ["--reorder", "--threshold", "0"], env=ENV)
    agents.extend([a, b])
    b.start()
    t0 = time.time()
    a.start()
    wait_tracked(srv[1:], "b")
    if missing != "+ps.ring":  # a tracks: a change at a for its agent to take and send
        wait_tracked(srv[:1], "a")
        for seq in range(1, 4):
            for k in SHAPES:
                srv[0].client().execute_command("PS.PUSHGRAD", k, grad(0, seq, k).tobytes())
    rc = a.wait(20)
    out = a.output()
    assert rc == 2, (rc, out)
    assert time.time() - t0 < 15, out
    assert "NOPERM" in out and named in out, out
    assert 'docs/operations.md "A ring agent"' in out, out
    assert "Traceback" not in out and "Segmentation" not in out, out
    assert b.running(), b.output()  # the other group's agent goes on
