"""psserver_resp.py -- RawClient, a tiny RESP2 client of the integration-test harness
(psserver.py) that returns error replies verbatim, code included (redis-py strips the
"ERR " prefix, which hides the error code), and RespError. Tests import these names
from psserver."""

import socket


class RespError(Exception):
    """An error reply, text verbatim (e.g. 'ERR no such key', 'WRONGTYPE Operation ...')."""

    @property
    def code(self):
        return str(self).split(" ", 1)[0]


class RawClient:
    """Minimal blocking RESP2 client. call() returns the reply with bulk strings as bytes,
    integers as int, nil as None, arrays as lists, status replies as str, and an error reply
    as a RespError instance (returned, not raised: tests inspect it)."""

    def __init__(self, port, host="127.0.0.1", timeout=30.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.buf = b""

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @staticmethod
    def encode(args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            if isinstance(a, str):
                a = a.encode()
            elif isinstance(a, (int, float)):
                a = repr(a).encode()
            out.append(b"$%d\r\n" % len(a))
            out.append(a)
            out.append(b"\r\n")
        return b"".join(out)

    def _fill(self):
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("connection closed by server")
        self.buf += chunk

    def _line(self):
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                line, self.buf = self.buf[:i], self.buf[i + 2:]
                return line
            self._fill()

    def _exact(self, n):
        while len(self.buf) < n + 2:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def read(self):
        line = self._line()
        t, rest = line[:1], line[1:]
        if t == b"+":
            return rest.decode()
        if t == b"-":
            return RespError(rest.decode(errors="replace"))
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n)
        if t == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise ConnectionError("bad RESP type byte %r" % line[:20])

    def call(self, *args):
        self.sock.sendall(self.encode(args))
        return self.read()
