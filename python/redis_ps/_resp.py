"""A minimal RESP2 pipeline connection for a Model's hot path against a standalone server.

redis-py's pure-Python reply reader copies a bulk reply three times (socket chunks, a BytesIO,
the result) and packs every command in Python; for a model pull of a few hundred KB that is
most of a step's client CPU. This connection sends a pipeline with one sendall per small run
of arguments (large blobs go straight from their buffer) and reads replies with recv_into,
a PS.PULL's data blob directly into the caller's array when one is given (one copy: kernel to
the parameters' memory). Used only for a plain TCP redis.Redis (not TLS, not a Unix socket,
not a cluster); one connection per thread. Replies come back as redis-py's raw ones would
(int, bytes, list, None), error replies as redis.exceptions.ResponseError.
"""

from __future__ import annotations

import socket
from typing import Any, List, Optional, Sequence

import redis.exceptions as rex

_BIG = 1 << 16


def _arg(a: Any) -> bytes:
    if isinstance(a, (bytes, bytearray, memoryview)):
        return bytes(a) if isinstance(a, memoryview) else a
    if isinstance(a, str):
        return a.encode()
    if isinstance(a, float):
        return repr(a).encode()
    return str(a).encode()


class RespConn:
    """One TCP connection speaking RESP2 (see the module docstring)."""

    def __init__(self, host: str, port: int, username: Optional[str] = None,
                 password: Optional[str] = None, db: int = 0,
                 timeout: Optional[float] = None, connect_timeout: Optional[float] = None):
        self.addr = (host, int(port))
        self.username, self.password, self.db = username, password, int(db or 0)
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.sock: Optional[socket.socket] = None
        self.buf = bytearray()
        self.pos = 0

    def close(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            finally:
                self.sock = None
        self.buf = bytearray()
        self.pos = 0

    def _connect(self) -> None:
        try:
            s = socket.create_connection(self.addr, timeout=self.connect_timeout)
        except OSError as e:
            raise rex.ConnectionError("Error connecting to %s:%d. %s" % (self.addr + (e,))) from None
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.settimeout(self.timeout)
        self.sock = s
        self.buf = bytearray()
        self.pos = 0
        hello: List[List[Any]] = []
        if self.password is not None:
            hello.append(["AUTH", self.username, self.password] if self.username
                         else ["AUTH", self.password])
        if self.db:
            hello.append(["SELECT", self.db])
        if hello:
            for rep in self._exchange(hello, None):
                if isinstance(rep, rex.ResponseError):
                    self.close()
                    raise rep

    # -- writing --------------------------------------------------------------------

    def _send(self, cmds: Sequence[Sequence[Any]]) -> None:
        assert self.sock is not None
        out = bytearray()
        for args in cmds:
            out += b"*%d\r\n" % len(args)
            for a in args:
                b = _arg(a)
                out += b"$%d\r\n" % len(b)
                if len(b) >= _BIG:
                    self.sock.sendall(out)
                    self.sock.sendall(b)
                    out = bytearray(b"\r\n")
                else:
                    out += b
                    out += b"\r\n"
        if out:
            self.sock.sendall(out)

    # -- reading --------------------------------------------------------------------

    def _fill(self) -> None:
        assert self.sock is not None
        if self.pos and self.pos == len(self.buf):
            self.buf = bytearray()
            self.pos = 0
        chunk = self.sock.recv(_BIG)
        if not chunk:
            raise rex.ConnectionError("Connection closed by server.")
        self.buf += chunk

    def _line(self) -> bytes:
        while True:
            i = self.buf.find(b"\r\n", self.pos)
            if i >= 0:
                line = bytes(self.buf[self.pos:i])
                self.pos = i + 2
                return line
            self._fill()

    def _bulk_into(self, n: int, sink: Optional[memoryview]) -> Any:
        """n bytes and the CRLF after them: into 'sink' (when it has exactly n bytes) or as
        bytes."""
        have = min(len(self.buf) - self.pos, n + 2)
        if (sink is None or len(sink) != n) and n - have >= _BIG:
            # a large blob: read it into its own buffer (one copy), returned as a bytearray
            sink = memoryview(bytearray(n))
            self._bulk_into(n, sink)
            return sink.obj
        if sink is not None and len(sink) == n:
            k = min(have, n)
            sink[:k] = self.buf[self.pos:self.pos + k]
            self.pos += k
            got = k
            assert self.sock is not None
            while got < n:
                r = self.sock.recv_into(sink[got:], n - got)
                if r == 0:
                    raise rex.ConnectionError("Connection closed by server.")
                got += r
            while len(self.buf) - self.pos < 2:
                self._fill()
            self.pos += 2
            return sink
        while len(self.buf) - self.pos < n + 2:
            self._fill()
        data = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n + 2
        return data

    def _reply(self, sink: Optional[memoryview] = None, depth: int = 0) -> Any:
        line = self._line()
        t, rest = line[:1], line[1:]
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            return None if n < 0 else self._bulk_into(n, sink)
        if t == b"+":
            return rest
        if t == b"-":
            return rex.ResponseError(rest.decode(errors="replace"))
        if t == b"*":
            n = int(rest)
            if n < 0:
                return None
            # a [version, blob] pull reply: the blob (element 1) may go into the sink
            return [self._reply(sink if (i == 1 and n == 2 and depth == 0) else None, depth + 1)
                    for i in range(n)]
        raise rex.ConnectionError("Protocol error: %r" % line[:40])

    def _exchange(self, cmds: Sequence[Sequence[Any]],
                  sinks: Optional[Sequence[Optional[memoryview]]]) -> List[Any]:
        self._send(cmds)
        return [self._reply(sinks[i] if sinks is not None else None) for i in range(len(cmds))]

    def pipeline(self, cmds: Sequence[Sequence[Any]],
                 sinks: Optional[Sequence[Optional[memoryview]]] = None) -> List[Any]:
        """Send 'cmds' and return their replies in order; a PS.PULL reply's blob is read
        into sinks[i] when that has exactly the blob's size (the reply then holds the sink).
        A connection error closes the connection and is raised (the caller resends)."""
        if self.sock is None:
            self._connect()
        try:
            return self._exchange(cmds, sinks)
        except (OSError, rex.ConnectionError) as e:
            self.close()
            if isinstance(e, socket.timeout):
                raise rex.TimeoutError("Timeout reading from socket") from None
            if isinstance(e, rex.ConnectionError):
                raise
            raise rex.ConnectionError("Error while talking to %s:%d: %s" % (self.addr + (e,))) \
                from None
        except BaseException:
            self.close()                 # a reply half-read: the connection is unusable
            raise


def for_client(r: Any) -> Optional[RespConn]:
    """A RespConn to the server of 'r' when 'r' is a plain TCP redis.Redis, else None."""
    import redis
    import redis.connection as rc
    if type(r) is not redis.Redis:
        return None
    pool = getattr(r, "connection_pool", None)
    if pool is None or pool.connection_class is not rc.Connection:
        return None
    kw = pool.connection_kwargs
    if kw.get("decode_responses"):
        return None
    return RespConn(kw.get("host", "localhost"), kw.get("port", 6379), kw.get("username"),
                    kw.get("password"), kw.get("db", 0), kw.get("socket_timeout"),
                    kw.get("socket_connect_timeout"))
