"""ACCUM tensors and the relay commands (PS.TAKE, PS.TAKEACK, PS.MIRROR) against a real
server: replies and errors, the pending slot answered again until acknowledged, a replica
and an AOF replay holding the same bits (digest), RDB and AOF rewrite keeping the sum, the
pending slot and the seq."""

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
    seq, count, blob = r.execute_command("PS.TAKE", "a", "SEQFLOOR", 100)
    assert (seq, count) == (100, 2)
    assert np.array_equal(from_f32(blob), G1 + G2)
    r.execute_command("PS.PUSHGRAD", "a", f32(G2), "ID", "w", 3)
    assert r.execute_command("PS.TAKE", "a") == [seq, count, blob]             # the same slot
    assert r.execute_command("PS.TAKEACK", "a", 99) == 0
    assert r.execute_command("PS.TAKEACK", "a", 100) == 1
    assert r.execute_command("PS.TAKEACK", "a", 100) == 0                      # repeated ack
    seq2, count2, blob2 = r.execute_command("PS.TAKE", "a")
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
    seq, count, blob = r.execute_command("PS.TAKE", "a")
    assert (seq, count) == (10, 3)
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
