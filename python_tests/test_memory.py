"""Memory: a tensor's footprint does not grow with the number of pushes.

A push must apply the gradient in place (no allocation per push), and the
exactly-once table is bounded (DEDUPMAX), so a million pushes leave MEMORY
USAGE and the server's used_memory where they were after the first few.
The pushes are sent as pre-encoded RESP over one socket, pipelined, so a
million of them take a few seconds.
"""

import socket
import struct

import numpy as np

from psserver import RawClient


def resp(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if not isinstance(a, bytes):
            a = str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def send_and_drain(port, payload, replies):
    """Sends 'payload' (RESP commands) and reads 'replies' integer replies;
    returns how many were errors."""
    s = socket.create_connection(("127.0.0.1", port))
    try:
        s.sendall(payload)
        buf = b""
        seen = errors = 0
        while seen < replies:
            chunk = s.recv(1 << 20)
            assert chunk, "server closed the connection"
            buf += chunk
            lines = buf.split(b"\r\n")
            buf = lines.pop()
            for ln in lines:
                if ln.startswith(b":"):
                    seen += 1
                elif ln.startswith(b"-"):
                    seen += 1
                    errors += 1
        return errors
    finally:
        s.close()


def info_used_memory(c):
    info = c.call("INFO", "memory").decode()
    for ln in info.splitlines():
        if ln.startswith("used_memory:"):
            return int(ln.split(":")[1])
    raise AssertionError("no used_memory in INFO")


def test_a_million_pushes_do_not_grow_memory(server):
    c = RawClient(server.port)
    n = 16
    c.call("PS.CREATE", "mem:t", "SHAPE", n, "OPTIM", "ADAM", "LR", "0.001", "DEDUPMAX", 64)
    grad = np.full(n, 1e-3, dtype=np.float32).tobytes()
    # Warm up: fill the exactly-once table to its bound (64 clients) and
    # let allocator caches settle.
    warm = b"".join(resp("PS.PUSHGRAD", "mem:t", grad, "ID", "w%d" % k, 1) for k in range(200))
    assert send_and_drain(server.port, warm, 200) == 0
    usage0 = int(c.call("MEMORY", "USAGE", "mem:t"))
    used0 = info_used_memory(c)

    # 1,000,000 pushes: 100 rounds of 10,000; each round cycles through 500
    # client ids with growing seqs, so the table keeps evicting.
    rounds, per = 100, 10000
    total_errors = 0
    for r in range(rounds):
        batch = b"".join(
            resp("PS.PUSHGRAD", "mem:t", grad, "ID", "c%d" % (k % 500), 2 + r * per + k)
            for k in range(per))
        total_errors += send_and_drain(server.port, batch, per)
    assert total_errors == 0

    info = dict(zip(*[iter(c.call("PS.INFO", "mem:t"))] * 2))
    assert int(info[b"version"]) == 200 + rounds * per
    assert int(info[b"dedup_clients"]) == 64
    usage1 = int(c.call("MEMORY", "USAGE", "mem:t"))
    used1 = info_used_memory(c)
    assert usage1 == usage0, (usage0, usage1)
    # Server-wide memory may move by allocator noise, not by the pushes
    # (a leak of even 8 bytes per push would be 8 MB).
    assert abs(used1 - used0) < 512 * 1024, (used0, used1)
    c.close()


def test_snapshots_share_buffers_until_a_write(server):
    c = RawClient(server.port)
    n = 256 * 1024
    c.call("PS.CREATE", "mem:s", "SHAPE", n, "OPTIM", "ADAM")
    base = int(c.call("MEMORY", "USAGE", "mem:s"))
    c.call("PS.SNAPSHOT", "mem:s", "a")
    after_snap = int(c.call("MEMORY", "USAGE", "mem:s"))
    assert after_snap - base < 4096, (base, after_snap)
    c.call("PS.PUSHGRAD", "mem:s", struct.pack("<%df" % n, *([0.5] * n)))
    after_push = int(c.call("MEMORY", "USAGE", "mem:s"))
    # The push copied values and both Adam moments once (3 x 1 MB).
    assert after_push - after_snap >= 3 * n * 4, (after_snap, after_push)
    c.close()
