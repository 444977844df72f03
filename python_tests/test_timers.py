"""Sync-round timers (issue 11 item 3) and waiters of deleted keys (item 7, first bullet).

A sync round has at most one live timer, stopped when the round closes by its n-th push or
the tensor goes away (DEL, UNLINK, FLUSHALL [ASYNC], FLUSHDB, overwrite); INFO ps
round_timers counts them. A pull blocked on MINVERSION without TIMEOUT is answered an error
when its key is deleted or flushed instead of waiting forever."""

import socket
import time

import numpy as np
import pytest

from psserver import RawClient, RespError, wait_until
from pshelpers import create, f32, pull

ONE = f32(np.ones(2, np.float32))


def timers(r):
    return r.info("ps")["ps_round_timers"]


def in_db(r, db, *cmds):
    """Runs each command (a list) on a connection SELECTed to 'db'; returns the replies."""
    c = r.connection_pool.get_connection("x")
    try:
        c.send_command("SELECT", str(db))
        c.read_response()
        out = []
        for cmd in cmds:
            c.send_command(*cmd)
            out.append(c.read_response())
        return out
    finally:
        c.send_command("SELECT", "0")
        c.read_response()
        r.connection_pool.release(c)


def test_100k_rounds_closed_by_pushes_leave_no_pending_timer(r):
    create(r, "s", (2,), "SYNC", "2", "TIMEOUT", "600000")
    rounds = 100000
    for start in range(0, rounds, 10000):
        p = r.pipeline(transaction=False)
        for _ in range(10000):
            p.execute_command("PS.PUSHGRAD", "s", ONE)
            p.execute_command("PS.PUSHGRAD", "s", ONE)
        p.execute()
    assert pull(r, "s")[0] == rounds
    assert timers(r) == 0
    assert r.info("ps")["ps_rounds_closed"] == rounds


def test_open_round_has_exactly_one_timer(r):
    create(r, "s", (2,), "SYNC", "3", "TIMEOUT", "600000")
    r.execute_command("PS.PUSHGRAD", "s", ONE)
    r.execute_command("PS.PUSHGRAD", "s", ONE)
    r.execute_command("PS.PULL", "s")                         # a pull re-arms nothing new
    assert timers(r) == 1
    r.execute_command("PS.PUSHGRAD", "s", ONE)                # n-th push closes it
    assert timers(r) == 0


@pytest.mark.parametrize("how", [["DEL", "s"], ["UNLINK", "s"], ["FLUSHALL"],
                                 ["FLUSHALL", "ASYNC"], ["FLUSHDB"], ["SET", "s", "x"]])
def test_key_going_away_stops_its_timer(r, how):
    create(r, "s", (2,), "SYNC", "2", "TIMEOUT", "600000")
    create(r, "other", (2,), "SYNC", "2", "TIMEOUT", "600000")
    r.execute_command("PS.PUSHGRAD", "s", ONE)
    r.execute_command("PS.PUSHGRAD", "other", ONE)
    assert timers(r) == 2
    r.execute_command(*how)
    flushed = how[0].startswith("FLUSH")
    assert timers(r) == (0 if flushed else 1)


def test_timer_of_a_flushed_db_only(r):
    create(r, "s", (2,), "SYNC", "2", "TIMEOUT", "600000")
    r.execute_command("PS.PUSHGRAD", "s", ONE)
    c1 = r.connection_pool.get_connection("x")
    try:
        c1.send_command("SELECT", "1")
        c1.read_response()
        c1.send_command("PS.CREATE", "s", "SYNC", "2", "TIMEOUT", "600000", "SHAPE", "2")
        c1.read_response()
        c1.send_command("PS.PUSHGRAD", "s", ONE)
        c1.read_response()
        assert timers(r) == 2
        c1.send_command("FLUSHDB")
        c1.read_response()
    finally:
        r.connection_pool.release(c1)
    assert timers(r) == 1


def test_timer_still_closes_a_round_and_is_then_gone(r):
    create(r, "s", (2,), "SYNC", "2", "TIMEOUT", "100")
    r.execute_command("PS.PUSHGRAD", "s", ONE)
    wait_until(lambda: pull(r, "s")[0] == 1, timeout=5, what="round closed by its timer")
    assert timers(r) == 0
    # Renamed (then moved to db 1) while open: the timer follows the tensor, with no push
    # or pull needed to find it again.
    r.execute_command("PS.PUSHGRAD", "s", ONE)
    r.execute_command("RENAME", "s", "t")
    assert timers(r) == 1
    r.execute_command("MOVE", "t", "1")
    # No pull before the timer fires (a pull would also re-arm it under the new name).
    wait_until(lambda: timers(r) == 0, timeout=5, what="timer fired")
    assert in_db(r, 1, ["PS.PULL", "t"])[0][0] == 2   # the round was closed where the tensor is
    assert timers(r) == 0


def _block(server, key, *extra):
    s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    s.sendall(RawClient.encode(["PS.PULL", key, "MINVERSION", "100", *extra]))
    return s


def _reply(s):
    s.settimeout(10)
    data = b""
    while not data.endswith(b"\r\n"):
        data += s.recv(4096)
    return data


@pytest.mark.parametrize("how", [["DEL", "k"], ["UNLINK", "k"], ["FLUSHALL"],
                                 ["FLUSHALL", "ASYNC"], ["RENAME", "k", "k2"]])
def test_pull_waiting_without_timeout_is_answered_when_its_key_goes(server, r, how):
    create(r, "k", (2,))
    create(r, "other", (2,))
    s = _block(server, "k")
    o = _block(server, "other", "TIMEOUT", "60000")
    try:
        wait_until(lambda: r.info("ps")["ps_blocked_pulls_now"] == 2, what="blocked")
        r.execute_command(*how)
        rep = _reply(s)
        assert rep.startswith(b"-ERR the key was deleted"), rep
        if how[0].startswith("FLUSH"):
            assert _reply(o).startswith(b"-ERR the key was deleted")
        else:
            assert r.info("ps")["ps_blocked_pulls_now"] == 1   # the other still waits
    finally:
        s.close()
        o.close()
    wait_until(lambda: r.info("ps")["ps_blocked_pulls_now"] == 0, what="no waiter left")
    assert r.info("ps")["ps_blocked_timeouts"] == 0


def _gone_after(server, r, key, *cmd):
    """Blocks a pull on 'key' (MINVERSION 100), runs 'cmd' once it waits, and checks the
    pull is answered the key-gone error."""
    s = _block(server, key)
    try:
        wait_until(lambda: r.info("ps")["ps_blocked_pulls_now"] == 1, what="blocked")
        r.execute_command(*cmd)
        assert _reply(s).startswith(b"-ERR the key was deleted")
    finally:
        s.close()


def test_pull_waiting_on_an_expiring_key_is_answered(server, r):
    create(r, "k", (2,))
    _gone_after(server, r, "k", "PEXPIRE", "k", "50")


def test_timer_follows_its_tensor_through_swapdb(r):
    create(r, "s", (2,), "SYNC", "2", "TIMEOUT", "200")
    r.execute_command("PS.PUSHGRAD", "s", ONE)
    assert timers(r) == 1
    r.execute_command("SWAPDB", "0", "1")
    # No push or pull after the swap: only the timer can close the round.
    wait_until(lambda: timers(r) == 0, timeout=5, what="timer fired")
    pulled, info = in_db(r, 1, ["PS.PULL", "s"], ["PS.INFO", "s"])
    assert pulled[0] == 1                          # closed where the tensor went
    assert dict(zip(info[::2], info[1::2]))[b"rounds_timed_out"] == 1
    # Swapping a db with itself changes nothing.
    create(r, "t", (2,), "SYNC", "2", "TIMEOUT", "600000")
    r.execute_command("PS.PUSHGRAD", "t", ONE)
    r.execute_command("SWAPDB", "0", "0")
    assert timers(r) == 1


def test_pull_waiting_in_a_swapped_db_is_answered_not_served_another_tensor(server, r):
    create(r, "k", (2,))
    # db 1 holds another tensor under the same name, far ahead in version.
    in_db(r, 1, ["PS.CREATE", "k", "SHAPE", "2"], *[["PS.PUSHGRAD", "k", ONE]] * 101)
    _gone_after(server, r, "k", "SWAPDB", "0", "1")
    wait_until(lambda: r.info("ps")["ps_blocked_pulls_now"] == 0, what="no waiter left")
    assert r.info("ps")["ps_blocked_pulls_gone"] == 1


@pytest.mark.parametrize("how", ["rename_onto", "set", "restore_replace", "copy_replace"])
def test_pull_waiting_on_a_tensor_replaced_under_its_name_is_answered(server, r, how):
    # The waited tensor is freed while its name gets another value: before, RENAME/COPY/
    # RESTORE onto it served the newcomer's data as if it were the waited tensor's (no key
    # event names the overwrite), and SET left the pull waiting on a string forever.
    create(r, "k", (2,))
    create(r, "o", (2,))
    for _ in range(101):
        r.execute_command("PS.PUSHGRAD", "o", ONE)
    cmd = {"rename_onto": ["RENAME", "o", "k"], "set": ["SET", "k", "x"],
           "restore_replace": ["RESTORE", "k", "0", r.dump("o"), "REPLACE"],
           "copy_replace": ["COPY", "o", "k", "REPLACE"]}[how]
    _gone_after(server, r, "k", *cmd)
    wait_until(lambda: r.info("ps")["ps_blocked_pulls_now"] == 0, what="no waiter left")
