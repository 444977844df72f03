"""ACCUM tensors and the relay commands (PS.TAKE, PS.TAKEACK, PS.MIRROR, PS.TAKEWAIT)
against a real server: replies and errors, the pending slot answered again until
acknowledged, a take split into parts of at most MAXROUND gradients, pushes refused
BACKLOG at MAXBACKLOG, PS.TAKEWAIT answering on a push, a timeout or a deletion, a replica
and an AOF replay holding the same bits (digest), RDB and AOF rewrite keeping the sum, the
pending slot, its parts, the seq and the round counters."""

import threading
import time

import numpy as np
import pytest

import psserver
from pshelpers import f32, from_f32, info, pull_np

G1 = np.arange(6, dtype=np.float32) - 2
G2 = np.full(6, 0.5, dtype=np.float32)


def accum(r, key="a"):
    assert r.execute_command("PS.CREATE", key, "SHAPE", 2, 3, "OPTIM", "ACCUM") == b"OK"
    return key


def test_accum_push_sums_and_take_answers_the_same_slot_until_acked(r):
    accum(r)
    r.execute_command("PS.MIRROR", "a", 4, f32(np.ones(6)))
    assert r.execute_command("PS.PUSHGRAD", "a", f32(G1), "ID", "w", 1) == 4
    assert r.execute_command("PS.PUSHGRAD", "a", f32(G1), "ID", "w", 1) == 4   # duplicate
    assert r.execute_command("PS.PUSHGRAD", "a", f32(G2), "ID", "w", 2) == 4
    assert r.execute_command("PS.TAKE", "a", "MINCOUNT", 3) == 2               # short: count
    seq, count, blob, total, left = r.execute_command("PS.TAKE", "a", "SEQFLOOR", 100)
    assert (seq, count, total, left) == (100, 2, 2, 1)
    assert np.array_equal(from_f32(blob), G1 + G2)
    r.execute_command("PS.PUSHGRAD", "a", f32(G2), "ID", "w", 3)
    assert r.execute_command("PS.TAKE", "a") == [seq, count, blob, 2, 1]       # the same slot
    assert r.execute_command("PS.TAKEACK", "a", 99) == 0
    assert r.execute_command("PS.TAKEACK", "a", 100) == 1
    assert r.execute_command("PS.TAKEACK", "a", 100) == 0                      # repeated ack
    seq2, count2, blob2, _, _ = r.execute_command("PS.TAKE", "a")
    assert (seq2, count2) == (101, 1) and np.array_equal(from_f32(blob2), G2)
    v, vals = pull_np(r, "a")
    assert v == 4 and np.array_equal(vals, np.ones(6))                         # values served
    i = info(r, "a")
    assert i["optimizer"] == b"accum"
    assert (i["accum_pushes"], i["pending_pushes"], i["relay_seq"]) == (0, 1, 101)
    assert (i["takes"], i["take_acks"], i["pushes"]) == (2, 1, 3)


def test_mirror_never_moves_the_version_back_and_wakes_minversion_pulls(r):
    accum(r)
    assert r.execute_command("PS.MIRROR", "a", 7, f32(G1)) == 7
    assert r.execute_command("PS.MIRROR", "a", 5, f32(G2)) == 7
    v, vals = pull_np(r, "a")
    assert v == 7 and np.array_equal(vals, G1)


@pytest.mark.parametrize("cmd,args,code", [
    ("PS.TAKE", ["s"], "ERR not an ACCUM tensor (its optimizer is sgd)"),
    ("PS.TAKEACK", ["s", 1], "ERR not an ACCUM tensor"),
    ("PS.MIRROR", ["s", 1, f32(G1)], "ERR not an ACCUM tensor"),
    ("PS.TAKE", ["nokey"], "ERR no such key"),
    ("PS.TAKE", ["a", "MINCOUNT", 0], "ERR MINCOUNT"),
    ("PS.TAKE", ["a", "SEQFLOOR", -1], "ERR SEQFLOOR"),
    ("PS.TAKE", ["a", "BOGUS", 1], "ERR unknown"),
    ("PS.TAKE", ["a", "MAXROUND", -1], "ERR MAXROUND"),
    ("PS.TAKE", ["a", "MAXBACKLOG", "x"], "ERR MAXBACKLOG"),
    ("PS.TAKEWAIT", ["a", "TIMEOUT", 5], "ERR PS.TAKEWAIT needs MINCOUNT"),
    ("PS.TAKEWAIT", ["a", "MINCOUNT"], "ERR wrong number of arguments"),
    ("PS.TAKEWAIT", ["a", "TIMEOUT", 5, "TIMEOUT", 5], "ERR option 'TIMEOUT' given more"),
    ("PS.TAKEWAIT", ["a", "MINCOUNT", 0], "ERR MINCOUNT"),
    ("PS.TAKEWAIT", ["s", "MINCOUNT", 1], "ERR not an ACCUM tensor"),
    ("PS.TAKEWAIT", ["nokey", "MINCOUNT", 1], "ERR no such key"),
    ("PS.MIRROR", ["a", 1, b"abc"], "ERR data has 3 bytes"),
    ("PS.MIRROR", ["a", 1, f32(np.full(6, np.inf))], "ERR data contains NaN or Inf"),
    ("PS.MIRROR", ["a", -1, f32(G1)], "ERR version"),
    ("PS.TAKE", ["str"], "WRONGTYPE"),
    ("PS.MIRROR", ["str", 1, f32(G1)], "WRONGTYPE"),
    ("PS.TAKE", ["a", "MINCOUNT"], "ERR wrong number of arguments"),
    ("PS.TAKEACK", ["a"], "ERR wrong number of arguments"),
    ("PS.MIRROR", ["a", 1], "ERR wrong number of arguments"),
])
def test_relay_commands_refuse_bad_input_and_change_nothing(server, cmd, args, code):
    r = server.client()
    accum(r)
    r.execute_command("PS.CREATE", "s", "SHAPE", 2, 3)
    r.set("str", "x")
    r.execute_command("PS.PUSHGRAD", "a", f32(G1))
    before = {k: psserver.digest(r, k) for k in ("a", "s", "str")}
    with server.raw() as raw:
        rep = raw.call(cmd, *args)
    assert isinstance(rep, psserver.RespError) and str(rep).startswith(code), rep
    assert {k: psserver.digest(r, k) for k in ("a", "s", "str")} == before


def test_accum_takes_no_sync_round(server):
    with server.raw() as raw:
        rep = raw.call("PS.CREATE", "x", "SHAPE", 3, "OPTIM", "ACCUM", "SYNC", 2)
        assert str(rep).startswith("ERR an ACCUM tensor takes no SYNC")
        raw.call("PS.CREATE", "y", "SHAPE", 3, "OPTIM", "ACCUM")
        assert str(raw.call("PS.CONFIG", "y", "SYNC", 2)).startswith("ERR an ACCUM tensor")
        assert raw.call("EXISTS", "x") == 0


def build_state(r):
    """A sum, a pending slot and a mirrored version, through every relay command."""
    accum(r)
    r.execute_command("PS.MIRROR", "a", 3, f32(G1 * 3))
    for s in range(1, 4):
        r.execute_command("PS.PUSHGRAD", "a", f32(G1 * s), "ID", "w", s)
    r.execute_command("PS.TAKE", "a", "SEQFLOOR", 10)
    r.execute_command("PS.PUSHGRAD", "a", f32(G2), "ID", "w", 4)
    r.execute_command("PS.PUSHGRAD", "a", f32(G2), "ID", "v", 1, "SCALE", 0.25)
    r.execute_command("PS.TAKEACK", "a", 9)                     # not that seq: no change


def test_replica_holds_the_same_accum_state(server, make_replica):
    rep = make_replica(server)
    r = server.client()
    build_state(r)
    r.execute_command("PS.TAKE", "a")                           # answered again: not replicated
    psserver.wait_for_replication(server, [rep])
    rc = rep.client()
    assert psserver.digest(rc, "a") == psserver.digest(r, "a")
    assert info(rc, "a")["pending_pushes"] == 3 and info(rc, "a")["relay_seq"] == 10
    r.execute_command("PS.TAKEACK", "a", 10)
    psserver.wait_for_replication(server, [rep])
    assert psserver.digest(rc, "a") == psserver.digest(r, "a")


def test_rdb_reload_keeps_sum_pending_slot_and_seq(server):
    r = server.client()
    build_state(r)
    before = psserver.digest(r, "a")
    slot = r.execute_command("PS.TAKE", "a")
    r.execute_command("DEBUG", "RELOAD")
    assert psserver.digest(r, "a") == before
    assert r.execute_command("PS.TAKE", "a") == slot
    i = info(r, "a")
    assert (i["accum_pushes"], i["pending_pushes"], i["relay_seq"], i["version"]) == (2, 3, 10, 3)
    # The exactly-once table came back too: a local resend is not summed twice.
    assert r.execute_command("PS.PUSHGRAD", "a", f32(G2), "ID", "w", 4) == 3
    assert info(r, "a")["accum_pushes"] == 2


def test_aof_rewrite_without_preamble_replays_the_same_bits(make_server):
    s = make_server(args=["--appendonly", "yes", "--aof-use-rdb-preamble", "no",
                          "--auto-aof-rewrite-percentage", "0"])
    r = s.client()
    build_state(r)
    before = psserver.digest(r, "a")
    r.bgrewriteaof()
    psserver.wait_until(lambda: not r.info("persistence")["aof_rewrite_in_progress"] and
                        not r.info("persistence")["aof_rewrite_scheduled"], timeout=30,
                        what="AOF rewrite")
    s.restart(timeout=30)
    r = s.client()
    assert psserver.digest(r, "a") == before
    seq, count, blob, total, left = r.execute_command("PS.TAKE", "a")
    assert (seq, count, total, left) == (10, 3, 3, 1)
    assert np.array_equal(from_f32(blob), G1 + G1 * 2 + G1 * 3)


def test_restore_chunk_of_a_missing_accum_array_is_refused(server):
    """PS._RESTORE CHUNK ACCSUM / PENDING only fill arrays the HEADER announced."""
    r = server.client()
    r.execute_command("PS.CREATE", "a", "SHAPE", 2, 3, "OPTIM", "ACCUM")
    before = psserver.digest(r, "a")
    with server.raw() as raw:
        for target in ("ACCSUM", "PENDING"):
            rep = raw.call("PS._RESTORE", "a", "CHUNK", target, 0, 0, f32(G1))
            assert str(rep) == "ERR bad chunk", rep
    assert psserver.digest(r, "a") == before


def test_take_splits_a_backlog_into_parts_of_at_most_maxround(r):
    """7 gradients with MAXROUND 3: parts of 3, 2, 2 under seqs 50, 51, 52; each answered
    until acknowledged in order; the counters record every acknowledged part."""
    accum(r)
    for s in range(1, 8):
        r.execute_command("PS.PUSHGRAD", "a", f32(G1 * s), "ID", "w", s)
    got = []
    while True:
        rep = r.execute_command("PS.TAKE", "a", "SEQFLOOR", 50, "MAXROUND", 3)
        if not isinstance(rep, list):
            break
        seq, part, blob, total, left = rep
        assert total == 7 and np.array_equal(from_f32(blob), G1 * 28)
        assert r.execute_command("PS.TAKEACK", "a", seq + 1) == 0       # not the next part
        got.append((seq, part, left))
        assert r.execute_command("PS.TAKEACK", "a", seq) == 1
        assert r.execute_command("PS.TAKEACK", "a", seq) == 0           # repeated
    assert got == [(50, 3, 3), (51, 2, 2), (52, 2, 1)]
    i = info(r, "a")
    assert (i["relay_takes"], i["relay_rounds"], i["relay_forwarded"]) == (1, 3, 7)
    assert (i["relay_round_min"], i["relay_round_max"], i["relay_seq"]) == (2, 3, 52)
    assert (i["pending_pushes"], i["pending_parts"], i["backlog"]) == (0, 0, 0)
    # The next take numbers on from the last part.
    r.execute_command("PS.PUSHGRAD", "a", f32(G2), "ID", "w", 8)
    assert r.execute_command("PS.TAKE", "a", "MAXROUND", 3)[0] == 53


def test_maxbacklog_refuses_pushes_with_backlog_until_a_take_is_acknowledged(server):
    r = server.client()
    accum(r)
    assert r.execute_command("PS.TAKE", "a", "MINCOUNT", 99, "MAXBACKLOG", 3) == 0
    for s in (1, 2, 3):
        r.execute_command("PS.PUSHGRAD", "a", f32(G1), "ID", "w", s)
    before = psserver.digest(r, "a")
    with server.raw() as raw:
        rep = raw.call("PS.PUSHGRAD", "a", f32(G2), "ID", "w", 4)
    assert isinstance(rep, psserver.RespError) and str(rep).startswith("BACKLOG "), rep
    assert psserver.digest(r, "a") == before                # nothing changed, not deduped
    i = info(r, "a")
    assert (i["max_backlog"], i["backlog"], i["backlog_refusals"]) == (3, 3, 1)
    seq = r.execute_command("PS.TAKE", "a", "MAXROUND", 2)[0]  # parts of 2 and 1
    with server.raw() as raw:                               # taken, not forwarded: still full
        assert str(raw.call("PS.PUSHGRAD", "a", f32(G2), "ID", "w", 4)).startswith("BACKLOG")
    assert r.execute_command("PS.TAKEACK", "a", seq) == 1   # 2 forwarded, 1 left
    assert info(r, "a")["backlog"] == 1
    assert r.execute_command("PS.PUSHGRAD", "a", f32(G2), "ID", "w", 4) == 0
    assert info(r, "a")["accum_pushes"] == 1
    # MAXBACKLOG 0 lifts the bound; a take that does not change it is not replicated.
    r.execute_command("PS.TAKE", "a", "MINCOUNT", 99, "MAXBACKLOG", 0)
    assert info(r, "a")["max_backlog"] == 0


def test_takewait_answers_on_a_push_a_timeout_and_a_deletion(server):
    r = server.client()
    accum(r)
    r.execute_command("PS.PUSHGRAD", "a", f32(G1))
    assert r.execute_command("PS.TAKEWAIT", "a", "MINCOUNT", 1) == 1        # ready now
    t0 = time.monotonic()
    assert r.execute_command("PS.TAKEWAIT", "a", "MINCOUNT", 2, "TIMEOUT", 150) is None
    assert time.monotonic() - t0 >= 0.14
    out = {}

    def wait(name, *args):
        c = server.client()
        try:
            out[name] = c.execute_command("PS.TAKEWAIT", *args)
        except Exception as e:  # noqa: BLE001 (the reply under test)
            out[name] = e
    th = threading.Thread(target=wait, args=("push", "a", "MINCOUNT", 3, "TIMEOUT", 10000))
    th.start()
    time.sleep(0.2)
    r.execute_command("PS.PUSHGRAD", "a", f32(G1))          # 2 of 3: still waiting
    time.sleep(0.1)
    assert th.is_alive()
    r.execute_command("PS.PUSHGRAD", "a", f32(G1))
    th.join(5)
    assert out["push"] == 3
    th = threading.Thread(target=wait, args=("gone", "a", "MINCOUNT", 99, "TIMEOUT", 10000))
    th.start()
    time.sleep(0.2)
    r.delete("a")
    th.join(5)
    assert not th.is_alive() and "deleted while PS.TAKEWAIT waited" in str(out["gone"])


@pytest.mark.parametrize("how", ["flushdb", "swapdb", "set_over_it"])
def test_takewait_is_answered_at_once_when_its_value_goes_another_way(server, how):
    """FLUSHDB, SWAPDB and a SET over the key fire no keyspace event the waiter list hears as
    a deletion: the waiter is still answered at once (waiters.h), not at its TIMEOUT."""
    r = server.client()
    accum(r)
    out = {}

    def wait():
        c = server.client()
        try:
            out["r"] = c.execute_command("PS.TAKEWAIT", "a", "MINCOUNT", 99, "TIMEOUT", 20000)
        except Exception as e:  # noqa: BLE001 (the reply under test)
            out["r"] = e
    th = threading.Thread(target=wait)
    th.start()
    time.sleep(0.2)
    assert th.is_alive()
    t0 = time.monotonic()
    if how == "flushdb":
        r.flushdb()
    elif how == "swapdb":
        r.swapdb(0, 1)
    else:
        r.set("a", "a string now")
    th.join(5)
    assert not th.is_alive() and time.monotonic() - t0 < 5
    assert "deleted while PS.TAKEWAIT waited" in str(out["r"]), out
    if how == "swapdb":
        r.swapdb(0, 1)


def build_round_state(r):
    """A backlog split into parts with one acknowledged, MAXBACKLOG and counters set."""
    accum(r)
    r.execute_command("PS.TAKE", "a", "MINCOUNT", 99, "MAXBACKLOG", 9)
    for s in range(1, 6):
        r.execute_command("PS.PUSHGRAD", "a", f32(G1 * s), "ID", "w", s)
    seq = r.execute_command("PS.TAKE", "a", "SEQFLOOR", 20, "MAXROUND", 2)[0]
    r.execute_command("PS.TAKEACK", "a", seq)
    r.execute_command("PS.PUSHGRAD", "a", f32(G2), "ID", "w", 6)
    return seq


def round_fields(r):
    i = info(r, "a")
    return {k: i[k] for k in ("max_backlog", "backlog", "pending_parts", "relay_takes",
                              "relay_rounds", "relay_forwarded", "relay_round_min",
                              "relay_round_max", "relay_seq", "accum_pushes", "pending_pushes")}


def test_round_counters_and_parts_survive_debug_reload_and_aof_restart(make_server):
    s = make_server(args=["--appendonly", "yes", "--aof-use-rdb-preamble", "no"])
    r = s.client()
    seq = build_round_state(r)
    want = round_fields(r)
    assert want == {"max_backlog": 9, "backlog": 4, "pending_parts": 2, "relay_takes": 1,
                    "relay_rounds": 1, "relay_forwarded": 2, "relay_round_min": 2,
                    "relay_round_max": 2, "relay_seq": 22, "accum_pushes": 1,
                    "pending_pushes": 5}
    before, slot = psserver.digest(r, "a"), r.execute_command("PS.TAKE", "a")
    assert slot[0] == seq + 1 and slot[1] == 2
    r.execute_command("DEBUG", "RELOAD")
    assert psserver.digest(r, "a") == before and round_fields(r) == want
    assert r.execute_command("PS.TAKE", "a") == slot
    s.restart(timeout=30)                                   # the AOF replays the commands
    r = s.client()
    assert psserver.digest(r, "a") == before and round_fields(r) == want
    r.bgrewriteaof()
    psserver.wait_until(lambda: not r.info("persistence")["aof_rewrite_in_progress"] and
                        not r.info("persistence")["aof_rewrite_scheduled"], timeout=30,
                        what="AOF rewrite")
    s.restart(timeout=30)                                   # PS._RESTORE HEADER carries them
    r = s.client()
    assert psserver.digest(r, "a") == before and round_fields(r) == want


def test_replica_holds_the_same_parts_and_round_counters(server, make_replica):
    rep = make_replica(server)
    r = server.client()
    seq = build_round_state(r)
    r.execute_command("PS.TAKEACK", "a", seq + 1)
    r.execute_command("PS.TAKE", "a", "MINCOUNT", 99, "MAXBACKLOG", 9)   # unchanged: not sent
    psserver.wait_for_replication(server, [rep])
    rc = rep.client()
    assert psserver.digest(rc, "a") == psserver.digest(r, "a")
    assert round_fields(rc) == round_fields(r)
    assert round_fields(rc)["relay_rounds"] == 2
