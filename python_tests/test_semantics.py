"""Training semantics on real servers (issue 4): staleness control (REJECT, SCALE, the
histogram), sync rounds (n pushes -> one version with the mean; TIMEOUT closes a round with
fewer, and a replica and an AOF restart agree bit for bit), blocking pulls (MINVERSION,
TIMEOUT, MULTI/Lua answer at once), exactly-once pushes across DEBUG RELOAD, AOF rewrite and
a failover to a promoted replica."""

import threading
import time

import numpy as np
import pytest

import psserver
from psserver import RespError, wait_until
from pshelpers import create, create_data, digest, f32, info, pull, pull_np, push

F = np.float32
RNG = np.random.default_rng(44)


def sgd(w, g, lr):
    return (w - F(lr) * g).astype(np.float32)


def round_mean(grads, scales=None):
    """The sync-round mean as tensor.c computes it: acc = acc + g * (float)scale per push
    in arrival order, then acc * (float)(1/k)."""
    acc = np.zeros_like(grads[0], dtype=np.float32)
    for i, g in enumerate(grads):
        s = F(1.0 if scales is None else scales[i])
        acc = acc + g * s
    return acc * F(1.0 / len(grads))


def ps_info(c):
    return c.info("ps")


def raw_call(server, *args):
    with server.raw() as rc:
        return rc.call(*args)


# ---------------------------------------------------------------------------
# Staleness
# ---------------------------------------------------------------------------

def test_stale_push_with_policy_reject_answers_STALE_and_applies_nothing(server, r):
    create(r, "k", (16,), "MAXSTALENESS", "2", "POLICY", "REJECT", "LR", "0.1")
    for _ in range(5):
        push(r, "k", RNG.standard_normal(16).astype(np.float32))
    d = digest(r, "k")
    before = ps_info(r)["ps_stale_rejects"]
    rep = raw_call(server, "PS.PUSHGRAD", "k", f32(np.ones(16)), "VERSION", "2")
    assert isinstance(rep, RespError) and rep.code == "STALE", rep
    assert "3" in str(rep)  # names the staleness
    assert digest(r, "k") == d
    assert pull(r, "k")[0] == 5
    assert int(info(r, "k")["stale_rejects"]) == 1
    assert ps_info(r)["ps_stale_rejects"] == before + 1
    # At the limit it is applied.
    assert push(r, "k", np.ones(16, np.float32), "VERSION", "3") == 6


def test_stale_push_with_policy_scale_divides_the_step(r):
    w = RNG.standard_normal(8).astype(np.float32)
    create_data(r, "k", w, "MAXSTALENESS", "0", "POLICY", "SCALE", "LR", "0.3")
    g0 = RNG.standard_normal(8).astype(np.float32)
    push(r, "k", g0)
    w = sgd(w, g0, 0.3)
    push(r, "k", g0)
    w = sgd(w, g0, 0.3)
    g = RNG.standard_normal(8).astype(np.float32)
    assert push(r, "k", g, "VERSION", "0") == 3  # staleness 2: step / 3
    w = sgd(w, g, 0.3 / 3)
    assert pull_np(r, "k")[1].tobytes() == w.tobytes()
    assert int(info(r, "k")["scaled_pushes"]) == 1


def test_push_from_the_future_is_an_error_and_applies_nothing(server, r):
    create(r, "k", (4,))
    d = digest(r, "k")
    rep = raw_call(server, "PS.PUSHGRAD", "k", f32(np.ones(4)), "VERSION", "1")
    assert isinstance(rep, RespError) and rep.code == "ERR", rep
    assert digest(r, "k") == d


def test_staleness_histogram_in_ps_info(r):
    create(r, "h", (2,), "LR", "0")
    g = np.ones(2, np.float32)
    for _ in range(100):
        push(r, "h", g)
    stales = [0, 1, 2, 3, 4, 5, 8, 9, 16, 17, 32, 33, 99]
    for s in stales:
        v = pull(r, "h")[0]
        push(r, "h", g, "VERSION", str(v - s))
    hist = [int(x) for x in info(r, "h")["staleness_histogram"]]
    # Buckets 0, 1, 2, 3-4, 5-8, 9-16, 17-32, 33+ (pushes without VERSION count as 0).
    assert hist == [101, 1, 1, 2, 2, 2, 2, 2], hist


# ---------------------------------------------------------------------------
# Sync rounds and blocking pulls
# ---------------------------------------------------------------------------

def test_sync_round_applies_the_mean_once_and_releases_a_blocked_pull(server, r):
    n = 40
    w = RNG.standard_normal(n).astype(np.float32)
    create_data(r, "s", w, "SYNC", "3", "LR", "0.5")
    result = {}

    def waiter():
        c = server.client()
        t0 = time.monotonic()
        result["reply"] = c.execute_command("PS.PULL", "s", "MINVERSION", "1")
        result["elapsed"] = time.monotonic() - t0

    th = threading.Thread(target=waiter)
    th.start()
    wait_until(lambda: ps_info(r)["ps_blocked_pulls"] >= 1, what="pull to block")
    grads = [RNG.standard_normal(n).astype(np.float32) for _ in range(3)]
    clients = [server.client() for _ in range(3)]
    for i, (c, g) in enumerate(zip(clients, grads)):
        # Every push of the round answers the version the round will produce.
        assert push(c, "s", g, "VERSION", "0") == 1
        if i < 2:
            time.sleep(0.1)
            assert th.is_alive(), "pull returned before the round closed"
            assert pull(r, "s")[0] == 0
            assert int(info(r, "s")["round_pushes"]) == i + 1
    th.join(5)
    assert not th.is_alive()
    version, data = result["reply"]
    assert version == 1
    want = sgd(w, round_mean(grads), 0.5)
    assert np.frombuffer(data, "<f4").tobytes() == want.tobytes()
    assert int(info(r, "s")["step"]) == 1
    assert int(info(r, "s")["rounds_closed"]) == 1


def test_push_for_a_closed_round_is_stale(server, r):
    create(r, "s", (4,), "SYNC", "2")
    push(r, "s", np.ones(4, np.float32))
    push(r, "s", np.ones(4, np.float32))
    d = digest(r, "s")
    rep = raw_call(server, "PS.PUSHGRAD", "s", f32(np.ones(4)), "VERSION", "0")
    assert isinstance(rep, RespError) and rep.code == "STALE", rep
    assert digest(r, "s") == d
    assert int(info(r, "s")["round_pushes"]) == 0


def test_sync_timeout_closes_a_round_and_replica_and_aof_agree(make_server, make_replica):
    m = make_server(["--appendonly", "yes"])
    rep = make_replica(m)
    c = m.client()
    c.config_set("notify-keyspace-events", "KEA")  # exercise the notification path too
    n = 64
    w = RNG.standard_normal(n).astype(np.float32)
    create_data(c, "s", w, "SYNC", "3", "TIMEOUT", "150", "LR", "0.25", "OPTIM", "ADAM")
    for rnd in range(3):
        grads = [RNG.standard_normal(n).astype(np.float32) for _ in range(1 + rnd % 2)]
        t0 = time.monotonic()
        for g in grads:
            assert push(c, "s", g) == rnd + 1
        wait_until(lambda: pull(c, "s")[0] == rnd + 1, timeout=5,
                   what="round %d to time out" % rnd)
        assert time.monotonic() - t0 >= 0.1
    i = info(c, "s")
    assert int(i["rounds_timed_out"]) == 3 and int(i["step"]) == 3
    assert ps_info(c)["ps_rounds_timed_out"] >= 3
    # One open round left behind: it must replicate and persist too.
    push(c, "s", RNG.standard_normal(n).astype(np.float32))
    c.execute_command("PS.CONFIG", "s", "TIMEOUT", "0")  # no timer closes it now
    psserver.wait_for_replication(m, [rep])
    d = digest(c, "s")
    body = pull(c, "s")
    rc = rep.client()
    assert digest(rc, "s") == d
    assert pull(rc, "s") == body
    assert int(info(rc, "s")["round_pushes"]) == int(info(c, "s")["round_pushes"])
    m.restart()
    c = m.client()
    assert digest(c, "s") == d
    assert pull(c, "s") == body


def test_sync_timeout_result_equals_the_mean_of_the_pushes_that_arrived(r):
    n = 20
    w = RNG.standard_normal(n).astype(np.float32)
    create_data(r, "s", w, "SYNC", "4", "TIMEOUT", "100", "LR", "0.1")
    grads = [RNG.standard_normal(n).astype(np.float32) for _ in range(2)]
    push(r, "s", grads[0])
    push(r, "s", grads[1], "SCALE", "0.5")
    rep = r.execute_command("PS.PULL", "s", "MINVERSION", "1", "TIMEOUT", "3000")
    assert rep is not None and rep[0] == 1
    want = sgd(w, round_mean(grads, [1.0, 0.5]), 0.1)
    assert rep[1] == want.tobytes()


def test_pull_minversion_timeout_answers_nil(server, r):
    create(r, "k", (4,))
    before = ps_info(r)["ps_blocked_timeouts"]
    t0 = time.monotonic()
    rep = r.execute_command("PS.PULL", "k", "MINVERSION", "1", "TIMEOUT", "200")
    el = time.monotonic() - t0
    assert rep is None
    assert 0.15 <= el < 3, el
    assert ps_info(r)["ps_blocked_timeouts"] == before + 1
    # Already fresh enough: answers at once.
    push(r, "k", np.ones(4, np.float32))
    t0 = time.monotonic()
    assert pull(r, "k", "MINVERSION", "1", "TIMEOUT", "5000")[0] == 1
    assert time.monotonic() - t0 < 1


def test_pull_minversion_inside_multi_and_lua_answers_at_once(r):
    create(r, "k", (4,))
    p = r.pipeline(transaction=True)
    p.execute_command("PS.PULL", "k", "MINVERSION", "5")
    p.execute_command("PS.PULL", "k", "MINVERSION", "0")
    t0 = time.monotonic()
    res = p.execute()
    assert time.monotonic() - t0 < 1
    assert res[0] is None
    assert res[1][0] == 0
    t0 = time.monotonic()
    out = r.eval("return redis.call('PS.PULL', KEYS[1], 'MINVERSION', '5')", 1, "k")
    assert time.monotonic() - t0 < 1
    assert out is None


def test_blocked_pull_is_released_by_set_and_rollback(server, r):
    create(r, "k", (3,))
    r.execute_command("PS.SNAPSHOT", "k", "s0")
    out = {}

    def waiter(name, minv):
        out[name] = server.client().execute_command("PS.PULL", "k", "MINVERSION", str(minv),
                                                    "TIMEOUT", "5000")

    t1 = threading.Thread(target=waiter, args=("set", 1))
    t1.start()
    wait_until(lambda: ps_info(r)["ps_blocked_pulls"] >= 1, what="pull to block")
    assert r.execute_command("PS.SET", "k", f32([1, 2, 3])) == 1
    t1.join(5)
    assert out["set"][0] == 1
    t2 = threading.Thread(target=waiter, args=("rollback", 2))
    t2.start()
    wait_until(lambda: ps_info(r)["ps_blocked_pulls"] >= 2, what="pull to block")
    assert r.execute_command("PS.ROLLBACK", "k", "s0") == 2
    t2.join(5)
    assert out["rollback"][0] == 2
    assert out["rollback"][1] == f32([0, 0, 0])


# ---------------------------------------------------------------------------
# Exactly-once pushes
# ---------------------------------------------------------------------------

def test_duplicate_and_older_seq_are_not_applied(server, r):
    create(r, "k", (4,), "LR", "1")
    g = np.ones(4, np.float32)
    assert push(r, "k", g, "ID", "w1", "1") == 1
    assert push(r, "k", g) == 2
    assert push(r, "k", g, "ID", "w1", "1") == 1   # the original's version
    assert push(r, "k", g, "ID", "w1", "3") == 3
    d = digest(r, "k")
    assert push(r, "k", g, "ID", "w1", "3") == 3   # duplicate
    assert digest(r, "k") == d
    # Seq 2 arrives after 3 (a resend overtaken by a newer push after a redirect): it is
    # inside the 64-seq window and was never applied, so it is applied, once.
    assert push(r, "k", g, "ID", "w1", "2") == 4
    d = digest(r, "k")
    assert push(r, "k", g, "ID", "w1", "2") == 4   # duplicate: the client's newest version
    assert push(r, "k", g, "ID", "w1", "3") == 4
    # More than 64 below the newest seq is too old to tell: taken as applied.
    assert push(r, "k", g, "ID", "w1", "200") == 5
    d = digest(r, "k")
    assert push(r, "k", g, "ID", "w1", "100") == 5
    assert digest(r, "k") == d
    assert pull_np(r, "k")[1].tolist() == [-5.0] * 4
    assert int(info(r, "k")["dedup_hits"]) == 5
    assert ps_info(r)["ps_dedup_hits"] >= 5
    for bad in (["ID", "w1", "0"], ["ID", "w1", "-1"], ["ID", "w1", "x"], ["ID", "w1"],
                ["ID", "", "1"]):
        rep = raw_call(server, "PS.PUSHGRAD", "k", f32(g), *bad)
        assert isinstance(rep, RespError) and rep.code == "ERR", (bad, rep)
    assert digest(r, "k") == d


def test_exactly_once_ids_survive_reload_and_aof_rewrite_without_preamble(make_server):
    s = make_server(["--appendonly", "yes", "--aof-use-rdb-preamble", "no"])
    c = s.client()
    create(c, "k", (4,), "LR", "1", "OPTIM", "MOMENTUM")
    g = np.ones(4, np.float32)
    for i in range(1, 4):
        assert push(c, "k", g, "ID", "w%d" % i, "7") == i
    c.execute_command("DEBUG", "RELOAD")
    assert push(c, "k", g, "ID", "w2", "7") == 2
    c.execute_command("BGREWRITEAOF")
    wait_until(lambda: not c.info("persistence")["aof_rewrite_in_progress"]
               and not c.info("persistence")["aof_rewrite_scheduled"], timeout=20,
               what="rewrite")
    d = digest(c, "k")
    s.restart()
    c = s.client()
    assert digest(c, "k") == d
    assert push(c, "k", g, "ID", "w1", "7") == 1
    assert push(c, "k", g, "ID", "w3", "7") == 3
    assert digest(c, "k") == d
    assert push(c, "k", g, "ID", "w3", "9") == 4
    # The seq window survives too: 8 (skipped) applies once after a rewrite + restart.
    c.execute_command("BGREWRITEAOF")
    wait_until(lambda: not c.info("persistence")["aof_rewrite_in_progress"]
               and not c.info("persistence")["aof_rewrite_scheduled"], timeout=20,
               what="rewrite")
    s.restart()
    c = s.client()
    assert push(c, "k", g, "ID", "w3", "8") == 5
    assert push(c, "k", g, "ID", "w3", "8") == 5
    assert push(c, "k", g, "ID", "w3", "9") == 5


def test_retry_on_a_promoted_replica_is_not_applied_twice(server, make_replica):
    m = server
    rep = make_replica(m)
    c = m.client()
    create(c, "k", (8,), "LR", "0.5", "OPTIM", "ADAM")
    grads = [RNG.standard_normal(8).astype(np.float32) for _ in range(3)]
    for i, g in enumerate(grads):
        assert push(c, "k", g, "ID", "trainer-0", str(i + 1)) == i + 1
    psserver.wait_for_replication(m, [rep])
    rc = rep.client()
    rc.execute_command("REPLICAOF", "NO", "ONE")
    wait_until(lambda: rc.info("replication")["role"] == "master", what="promotion")
    d = digest(rc, "k")
    # The worker did not see the reply to seq 3 and retries it on the new master.
    assert push(rc, "k", grads[2], "ID", "trainer-0", "3") == 3
    assert digest(rc, "k") == d
    assert push(rc, "k", grads[2], "ID", "trainer-0", "4") == 4
    assert pull(rc, "k")[0] == 4


def test_dedup_table_is_bounded_by_ps_dedup_max_clients(r):
    r.config_set("ps.dedup-max-clients", 2)
    create(r, "k", (2,), "LR", "1")
    g = np.ones(2, np.float32)
    push(r, "k", g, "ID", "a", "1")
    push(r, "k", g, "ID", "b", "1")
    push(r, "k", g, "ID", "c", "1")
    i = info(r, "k")
    assert int(i["dedup_clients"]) == 2 and int(i["dedup_max"]) == 2
    # 'a' had the oldest version and was evicted: its retry is applied (4), 'c' is not.
    assert push(r, "k", g, "ID", "c", "1") == 3
    assert push(r, "k", g, "ID", "a", "1") == 4
    # PS.CONFIG DEDUPMAX shrinks the table at once.
    r.execute_command("PS.CONFIG", "k", "DEDUPMAX", "1")
    assert int(info(r, "k")["dedup_clients"]) == 1
    assert push(r, "k", g, "ID", "a", "1") == 4


def test_sync_timeout_still_closes_an_open_round_after_failover(server, make_replica):
    """A round opened on the master with TIMEOUT must still close on the promoted replica
    when the remaining workers are dead: otherwise training stalls forever."""
    m = server
    rep = make_replica(m)
    c = m.client()
    create(c, "s", (8,), "SYNC", "3", "TIMEOUT", "2000", "LR", "1")
    assert push(c, "s", np.ones(8, np.float32)) == 1
    psserver.wait_for_replication(m, [rep])
    m.kill()                                   # the master dies before its timer fires
    rc = rep.client()
    rc.execute_command("REPLICAOF", "NO", "ONE")
    assert int(info(rc, "s")["round_pushes"]) == 1
    rep_v = rc.execute_command("PS.PULL", "s", "MINVERSION", "1", "TIMEOUT", "6000")
    assert rep_v is not None, "open round never closed on the promoted replica"
    assert rep_v[0] == 1


def test_sync_timeout_still_closes_an_open_round_after_restart(make_server):
    # appendfsync always: the push is on disk before its reply, so the SIGKILL cannot lose it
    # (everysec may postpone the write up to 2 s while an fsync is slow: seen under load).
    s = make_server(["--appendonly", "yes", "--appendfsync", "always"])
    c = s.client()
    create(c, "s", (8,), "SYNC", "3", "TIMEOUT", "1500", "LR", "1")
    assert push(c, "s", np.ones(8, np.float32)) == 1
    s.restart(kill=True)
    c = s.client()
    assert int(info(c, "s")["round_pushes"]) == 1
    rep = c.execute_command("PS.PULL", "s", "MINVERSION", "1", "TIMEOUT", "5000")
    assert rep is not None, "open round never closed after a restart"


# ---------------------------------------------------------------------------
# Numbers that are finite in double but not in float32 must not poison a tensor
# ---------------------------------------------------------------------------

def all_finite(c, key):
    return bool(np.isfinite(pull_np(c, key)[1]).all())


def test_push_scale_that_overflows_float_does_not_poison_the_tensor(server, r):
    create(r, "k", (4,), "LR", "0.01")
    with server.raw() as rc:
        rep = rc.call("PS.PUSHGRAD", "k", f32([1, 0, -1, 2]), "SCALE", "1e300")
    assert isinstance(rep, RespError) or all_finite(r, "k"), \
        "SCALE 1e300 accepted and the tensor now holds %r" % (pull_np(r, "k")[1],)


def test_lr_that_overflows_float_is_refused_or_harmless(server, r):
    with server.raw() as rc:
        rep = rc.call("PS.CREATE", "k", "SHAPE", "4", "LR", "1e300")
        if isinstance(rep, RespError):
            return
        rc.call("PS.PUSHGRAD", "k", f32([1, 0, -1, 2]))
    assert all_finite(r, "k"), "LR 1e300 accepted and the tensor now holds %r" % (
        pull_np(r, "k")[1],)


@pytest.mark.parametrize("optim", ["ADAGRAD", "RMSPROP", "ADAM"])
def test_eps_that_rounds_to_zero_in_float_is_refused_or_harmless(server, r, optim):
    """EPS 1e-50 is > 0 in double but 0 in float32: a zero gradient element then computes
    0 / (sqrt(0) + 0) = NaN."""
    with server.raw() as rc:
        rep = rc.call("PS.CREATE", "k", "SHAPE", "4", "OPTIM", optim, "EPS", "1e-50")
        if isinstance(rep, RespError):
            return
        rc.call("PS.PUSHGRAD", "k", f32([1, 0, -1, 2]))
    assert all_finite(r, "k"), "EPS 1e-50 accepted and the tensor now holds %r" % (
        pull_np(r, "k")[1],)
