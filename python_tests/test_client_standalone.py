"""libps against one standalone server: partitioned tensors round-trip, generic commands,
exactly-once pushes across dropped connections, WAIT, lossy push formats, clear errors.

The C drivers (python_tests/tools/*.c) are built by `make pytest` into build/ptools/."""

import time

import numpy as np
import pytest

import psserver
from pshelpers import run_tool, tool_in_background, tool_result


def check_layout(doc, rows, cols, part_bytes):
    """Key names "<job>:<name>:<p>", contiguous row ranges covering the tensor, each partition
    within the partition size."""
    wkeys = [k for k in doc["keys"] if ":w:" in k[0]]
    bkeys = [k for k in doc["keys"] if ":b:" in k[0]]
    assert len(bkeys) == 1 and bkeys[0][1:3] == [0, cols]
    row = 0
    for p, (key, first, n, _version) in enumerate(wkeys):
        assert key.endswith(":w:%d" % p)
        assert first == row and n >= 1 and n * cols * 4 <= max(part_bytes, cols * 4)
        row += n
    assert row == rows
    return wkeys


def test_partitioned_tensor_round_trips_standalone(server):
    rows, cols, pb = 300, 100, 16384
    rc, doc, err = run_tool("ps_roundtrip", server.addr, "--job", "sa", "--rows", rows,
                            "--cols", cols, "--partition-bytes", pb, "--iters", 3)
    assert rc == 0, (doc, err)
    assert doc["ok"] and doc["cluster"] == 0 and doc["mismatch"] == 0
    assert doc["created"] == len(doc["keys"])
    wkeys = check_layout(doc, rows, cols, pb)
    assert len(wkeys) == 8           # 120000 bytes in partitions of <= 40 rows
    assert doc["first_version"] == 0 and doc["versions"] == [3, 3]
    assert doc["stats"]["pushes"] == 3 * len(doc["keys"])
    # The server agrees independently: every partition is a ps-tensor at version 3 whose
    # values are 0.5 minus three times the gradient the driver pushed (float32 arithmetic).
    r = server.client()
    g = (np.float32(0.001) * ((np.arange(rows * cols) * 7) % 13).astype(np.float32)
         - np.float32(0.004)).astype(np.float32)
    want = np.full(rows * cols, 0.5, dtype=np.float32)
    for _ in range(3):
        want = (want - g).astype(np.float32)
    for key, first, n, _ in wkeys:
        assert r.type(key) == b"ps-tensor"
        version, blob = r.execute_command("PS.PULL", key)
        assert version == 3
        got = np.frombuffer(blob, dtype="<f4")
        assert np.array_equal(got, want[first * cols:(first + n) * cols])


def test_psCommand_routes_generic_commands_standalone(server):
    rc, doc, err = run_tool("ps_kvloop", server.addr, "--keys", 10, "--iters", 5)
    assert rc == 0 and doc["ok"] and doc["cluster"] == 0, (doc, err)


def test_unreachable_address_gives_clear_error_and_nonzero_exit():
    port = psserver.free_port()
    rc, doc, err = run_tool("ps_roundtrip", "127.0.0.1:%d" % port)
    assert rc == 2
    assert not doc["ok"]
    assert "cannot connect" in doc["error"] and "127.0.0.1:%d" % port in doc["error"]
    assert "refused" in doc["error"].lower()


def test_malformed_address_is_rejected():
    rc, doc, err = run_tool("ps_roundtrip", "no-port-here")
    assert rc == 2 and "bad address" in doc["error"]


def test_pushes_are_applied_exactly_once_when_connections_drop(server):
    """Kill the driver's connections again and again during a push/pull loop: the library
    reconnects and resends pending pushes with their original ID seq, and the driver's
    exact float32 check shows no push lost or applied twice."""
    admin = server.client()
    kills = 0
    with tool_in_background("ps_roundtrip", server.addr, "--job", "kill", "--iters", 150,
                            "--sleep-ms", 5, "--window", 4) as p:
        deadline = time.monotonic() + 60
        while p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
            myid = admin.client_id()
            for c in admin.client_list():
                if int(c["id"]) != myid:
                    try:
                        kills += admin.client_kill_filter(_id=int(c["id"]))
                    except Exception:
                        pass
        rc, doc, err = tool_result(p, timeout=60)
    assert rc == 0, (doc, err[-2000:])
    assert doc["ok"] and doc["mismatch"] == 0
    assert kills > 0 and doc["stats"]["reconnects"] > 0
    assert doc["versions"] == [150, 150]


def test_wait_replicas_counts_pushes_done_after_replication(server, make_replica):
    make_replica(server)
    rc, doc, err = run_tool("ps_roundtrip", server.addr, "--job", "w", "--iters", 3, "--wait", 1)
    assert rc == 0 and doc["ok"], (doc, err)
    assert doc["stats"]["wait_short"] == 0


@pytest.mark.parametrize("fmt,tol", [("BF16", 1e-3), ("I8", 1e-3), ("TOPK", 0.05)])
def test_lossy_push_formats_with_error_feedback_track_the_exact_result(server, fmt, tol):
    rc, doc, err = run_tool("ps_roundtrip", server.addr, "--job", "lossy" + fmt, "--iters", 5,
                            "--format", fmt)
    assert rc == 0 and doc["ok"], (doc, err)
    assert doc["maxdiff"] <= tol
    assert doc["versions"] == [5, 5]
