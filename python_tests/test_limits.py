"""Request-sized memory (issue 11 item 1): a pull costs memory in proportion to what it
returns, bounded by ps.max-pull-bytes; ROWS may not repeat rows past dim 0; the scratch a
large request grew is freed when it ends (ps.scratch-keep-bytes); at most
ps.max-blocked-pulls pulls wait on MINVERSION. A refused request answers a coded error and
changes nothing."""

import socket
import struct
import time

import numpy as np
import pytest
import redis

from psserver import RespError, wait_until
from pshelpers import create, f32, pull, push

F = np.float32


def used(r):
    return r.info("memory")["used_memory"]


def ps(r):
    return r.info("ps")


def rows_blob(idx):
    return struct.pack("<%dI" % len(idx), *idx)


def test_config_defaults_and_validation(r):
    assert int(r.config_get("ps.max-pull-bytes")["ps.max-pull-bytes"]) == 512 << 20
    assert int(r.config_get("ps.scratch-keep-bytes")["ps.scratch-keep-bytes"]) == 16 << 20
    assert int(r.config_get("ps.max-blocked-pulls")["ps.max-blocked-pulls"]) == 10000
    for name, bad in [("ps.max-pull-bytes", "0"), ("ps.max-pull-bytes", "x"),
                      ("ps.scratch-keep-bytes", "-1"), ("ps.max-blocked-pulls", "-1")]:
        with pytest.raises(redis.ResponseError):
            r.config_set(name, bad)
    r.config_set("ps.max-pull-bytes", "1mb")
    assert int(r.config_get("ps.max-pull-bytes")["ps.max-pull-bytes"]) == 1 << 20


def test_rows_pull_with_repeats_past_dim0_is_refused_and_pins_no_memory(server, r):
    """The reproduction of issue 11 at a tenth of its size: 20,000 copies of row 0 of a
    [256, 1024] tensor used to build an 80 MB scratch and a 40 MB F16 reply, and keep both."""
    create(r, "emb", (256, 1024), "INIT", "CONST", "1")
    before = used(r)
    with server.raw() as rc:
        rep = rc.call("PS.PULL", "emb", "ROWS", rows_blob([0] * 20000), "FORMAT", "F16")
    assert isinstance(rep, RespError), rep
    assert rep.code == "ERR" and "repeats count" in str(rep), rep
    assert used(r) - before < 4 << 20
    assert ps(r)["ps_pulls_refused"] == 1
    assert ps(r)["ps_scratch_bytes"] == 0
    # dim 0 rows, repeats included, are still fine.
    v, data = pull(r, "emb", "ROWS", rows_blob([0] * 256), "FORMAT", "F16")
    assert len(data) == 256 * 1024 * 2


def test_large_pull_frees_its_scratch_when_it_ends(server, r):
    r.config_set("ps.scratch-keep-bytes", 1 << 20)
    create(r, "big", (1024, 1024), "INIT", "CONST", "0.5")   # 4 MB
    before = used(r)
    v, data = pull(r, "big", "ROWS", rows_blob(list(range(1024))), "FORMAT", "F16")
    assert len(data) == 1024 * 1024 * 2
    assert ps(r)["ps_scratch_bytes"] == 0                    # 4 MB + 2 MB were freed
    assert used(r) - before < 2 << 20
    # Below the limit the scratch stays cached (no allocation per request).
    pull(r, "big", "ROWS", rows_blob(list(range(16))), "FORMAT", "F16")
    assert 0 < ps(r)["ps_scratch_bytes"] <= 1 << 20


def test_decode_scratch_of_create_is_freed_after_the_command(server, r):
    r.config_set("ps.scratch-keep-bytes", 0)
    data = np.ones(1 << 20, F).astype("<f2").tobytes()       # 4 MB of floats once decoded
    create(r, "t", (1 << 20,), "DATA", data, "FORMAT", "F16")
    # PS.CREATE is not ours to trim: the one-shot trim runs on the next event loop turn.
    wait_until(lambda: ps(r)["ps_scratch_bytes"] == 0, timeout=5, what="scratch freed")


def test_pull_over_max_pull_bytes_is_refused(server, r):
    create(r, "t", (64, 1024))                               # 256 KB
    r.config_set("ps.max-pull-bytes", 64 << 10)
    with server.raw() as rc:
        rep = rc.call("PS.PULL", "t")
        assert isinstance(rep, RespError) and "ps.max-pull-bytes" in str(rep), rep
        rep = rc.call("PS.PULL", "t", "FORMAT", "VALUES")
        assert isinstance(rep, RespError) and "ps.max-pull-bytes" in str(rep), rep
        rep = rc.call("PS.PULL", "t", "ROWS", rows_blob(list(range(17))))
        assert isinstance(rep, RespError), rep
    v, data = pull(r, "t", "ROWS", rows_blob(list(range(16))))  # exactly 64 KB
    assert len(data) == 64 << 10
    # FORMAT VALUES costs 32 bytes per number in the reply: 2 rows fit, 3 do not.
    v, vals = pull(r, "t", "ROWS", rows_blob([0, 1]), "FORMAT", "VALUES")
    assert len(vals) == 2048
    with server.raw() as rc:
        rep = rc.call("PS.PULL", "t", "ROWS", rows_blob([0, 1, 2]), "FORMAT", "VALUES")
    assert isinstance(rep, RespError) and "ps.max-pull-bytes" in str(rep), rep
    assert ps(r)["ps_pulls_refused"] == 4
    r.config_set("ps.max-pull-bytes", 1 << 20)
    assert len(pull(r, "t")[1]) == 256 << 10


def test_blocked_pulls_are_bounded(server, r):
    create(r, "t", (4,))
    r.config_set("ps.max-blocked-pulls", 2)
    socks = []
    try:
        for _ in range(2):
            s = socket.create_connection(("127.0.0.1", server.port))
            s.sendall(b"*4\r\n$7\r\nPS.PULL\r\n$1\r\nt\r\n$10\r\nMINVERSION\r\n$2\r\n10\r\n")
            socks.append(s)
        wait_until(lambda: ps(r)["ps_blocked_pulls_now"] == 2, what="two waiters")
        with server.raw() as rc:
            rep = rc.call("PS.PULL", "t", "MINVERSION", "10", "TIMEOUT", "10000")
        assert isinstance(rep, RespError) and rep.code == "BUSY", rep
        # A waiter must be answerable: its ROWS are checked before it blocks.
        with server.raw() as rc:
            rep = rc.call("PS.PULL", "t", "ROWS", rows_blob([0] * 5), "MINVERSION", "10")
        assert isinstance(rep, RespError) and "repeats count" in str(rep), rep
        # Nor does it wait for a snapshot that does not exist (AT is copied).
        with server.raw() as rc:
            rep = rc.call("PS.PULL", "t", "AT", "x" * 100000, "MINVERSION", "10")
        assert isinstance(rep, RespError) and "no such snapshot" in str(rep), rep
    finally:
        for s in socks:
            s.close()
    wait_until(lambda: ps(r)["ps_blocked_pulls_now"] == 0, what="waiters gone")
