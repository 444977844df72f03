"""Harness for redis-ps integration tests: real redis-server processes on free loopback
ports in temp dirs, always stopped by pid.

What it offers (tests import it directly; conftest.py wraps it in fixtures):
  free_port()                  a free 127.0.0.1 port whose cluster-bus port (+10000) is free too,
                               from this xdist worker's own slice of ports (see worker_slice)
  RedisServer                  one redis-server with build/ps.so loaded (or without: module=None)
  start_replica(master)        a second server replicating 'master', link up
  wait_for_replication(m, rs)  WAIT + equal master_repl_offset on every replica
  RedisClusterHelper           N masters + R replicas each, cluster create, cluster_state:ok
  digest(client, key)          DEBUG DIGEST-VALUE of one key (bytes)
  RawClient                    a tiny RESP2 client that returns errors verbatim, code included
                               (redis-py strips the "ERR " prefix, which hides the error code)
  key_slot(key)                Redis Cluster hash slot (CRC16/XMODEM, hash tags honoured)

Environment:
  REDIS_SERVER   redis-server binary (default /usr/bin/redis-server)
  REDIS_CLI      redis-cli binary (default /usr/bin/redis-cli)
  PS_MODULE      module to load (default <repo>/build/ps.so)
  PS_KEEP_DIRS   if set, server temp dirs are kept for post-mortem
  PS_SERVER_PRELOAD  library to LD_PRELOAD into every redis-server; by default the ASan
                 runtime the module links against when it is a sanitizer build
                 (make SANITIZE=address,...), found with ldd
  PS_SERVER_ENV  extra NAME=VALUE pairs (space separated) for every redis-server

Sanitizer builds: Debian's redis-server is not instrumented, so an ASan module needs the
ASan runtime preloaded. Each server then runs with ASAN_OPTIONS/UBSAN_OPTIONS that write any
report to <server dir>/asan.<pid> or ubsan.<pid> (leak checking off: Redis itself is not
instrumented). RedisServer.stop() collects such reports, and any Redis crash report
("=== REDIS BUG REPORT" in redis.log, any build), into SANITIZER_REPORTS, and conftest.py
fails the test (and the run) that produced one.
"""

import atexit
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

import redis

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REDIS_SERVER = os.environ.get("REDIS_SERVER", "/usr/bin/redis-server")
REDIS_CLI = os.environ.get("REDIS_CLI", "/usr/bin/redis-cli")
START_TIMEOUT = 10.0


_sanitizer_runtime_cache = {}


def sanitizer_runtime(module):
    """Path of the ASan runtime 'module' links against (from ldd), or None when it is not a
    sanitizer build. $PS_SERVER_PRELOAD overrides (empty string: no preload)."""
    if "PS_SERVER_PRELOAD" in os.environ:
        return os.environ["PS_SERVER_PRELOAD"] or None
    if not module or not os.path.exists(module):
        return None
    if module not in _sanitizer_runtime_cache:
        rt = None
        try:
            out = subprocess.run(["ldd", module], stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, timeout=10).stdout.decode()
            for line in out.splitlines():
                parts = line.split()
                if parts and parts[0].startswith("libasan.so") and "=>" in parts:
                    rt = parts[parts.index("=>") + 1]
        except (OSError, subprocess.TimeoutExpired):
            pass
        _sanitizer_runtime_cache[module] = rt
    return _sanitizer_runtime_cache[module]


SANITIZER_REPORTS = []           # (server dir, file name, text) of every report seen
_seen_reports = set()


def collect_sanitizer_reports(d):
    """Record every asan.* / ubsan.* report file in server dir 'd', and a Redis crash report
    in its redis.log (once each); returns the new ones as (dir, name, text)."""
    new = []
    try:
        names = sorted(os.listdir(d))
    except OSError:
        return new
    for name in names:
        if name == "redis.log":
            # A crash (assertion, signal) of any build: Redis writes its bug report here.
            path = os.path.join(d, name)
            try:
                with open(path, "r", errors="replace") as f:
                    text = f.read()
            except OSError:
                continue
            at = text.find("=== REDIS BUG REPORT START")
            if at >= 0 and path not in _seen_reports:
                _seen_reports.add(path)
                new.append((d, name + " (crash)", text[max(0, at - 2000):at + 6000]))
            continue
        if not (name.startswith("asan.") or name.startswith("ubsan.")):
            continue
        path = os.path.join(d, name)
        if path in _seen_reports:
            continue
        _seen_reports.add(path)
        try:
            with open(path, "r", errors="replace") as f:
                text = f.read()
        except OSError:
            continue
        # Warnings alone (e.g. "failed to allocate" with allocator_may_return_null) are not
        # findings: a report has an ERROR line (ASan) or a "runtime error" (UBSan).
        if "ERROR: " not in text and "runtime error" not in text:
            continue
        new.append((d, name, text))
    SANITIZER_REPORTS.extend(new)
    return new


def module_path():
    """Absolute path of the module under test: $PS_MODULE or <repo>/build/ps.so."""
    return os.path.abspath(os.environ.get("PS_MODULE") or os.path.join(REPO_ROOT, "build", "ps.so"))


# ---------------------------------------------------------------------------
# Process registry: every pid we start, so a crashed test run still stops them.
# ---------------------------------------------------------------------------

_live = {}                       # pid -> subprocess.Popen
_live_lock = threading.Lock()


def _register(proc):
    with _live_lock:
        _live[proc.pid] = proc


def _unregister(proc):
    with _live_lock:
        _live.pop(proc.pid, None)


def _kill_all_at_exit():
    """Safety net: SIGKILL, by pid, every server this interpreter started and did not stop."""
    with _live_lock:
        procs = list(_live.values())
        _live.clear()
    for p in procs:
        if p.poll() is None:
            try:
                os.kill(p.pid, signal.SIGKILL)
                p.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass


atexit.register(_kill_all_at_exit)


# ---------------------------------------------------------------------------
# Ports
# ---------------------------------------------------------------------------

_handed_out = set()              # ports given to a server in this process: never hand out twice
_port_lock = threading.Lock()
_rng = random.SystemRandom()     # not the `random` module: a test seeding it must not matter


def _port_is_free(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def _ephemeral_low():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


# Ports are drawn below the kernel's ephemeral range (where the source ports of outgoing
# connections come from, so a client's connect() cannot take a port between our pick and
# the server's bind), with their cluster-bus port (+10000) below it too: by default
# 10000..22767 (bus 20000..32767).
PORT_LOW = 10000
PORT_HIGH = _ephemeral_low() - 10001


def worker_slice():
    """(index, count) of this pytest-xdist worker ((0, 1) outside xdist). Worker i draws only
    ports P with (P % 10000) % count == i, so P and its bus port P+10000 belong to the same
    worker and no two workers of one run ever pick the same port."""
    w = os.environ.get("PYTEST_XDIST_WORKER", "")
    try:
        count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
        index = int(w[2:]) if w.startswith("gw") else 0
    except ValueError:
        return 0, 1
    if count < 1 or not 0 <= index < count:
        return 0, 1
    return index, count


def free_port(cluster_bus=True):
    """Return a free loopback port P, drawn at random from this worker's slice of
    PORT_LOW..PORT_HIGH (see worker_slice); with 'cluster_bus' P+10000 must be free too.
    Ports already handed out in this process are skipped. Free means bindable now: another
    process may still take it before our server binds, so RedisServer retries its first
    start on a new port when the bind fails (ServerStartError otherwise)."""
    index, count = worker_slice()
    with _port_lock:
        if PORT_HIGH - PORT_LOW >= 1000:
            for _ in range(2000):
                port = _rng.randint(PORT_LOW, PORT_HIGH)
                if (port % 10000) % count != index or port in _handed_out:
                    continue
                if not _port_is_free(port):
                    continue
                if cluster_bus and (port + 10000 in _handed_out or not _port_is_free(port + 10000)):
                    continue
                _handed_out.add(port)
                if cluster_bus:
                    _handed_out.add(port + 10000)
                return port
        # A kernel whose ephemeral range starts low: ask it for a port (bind port 0).
        for _ in range(2000):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            finally:
                s.close()
            if (port % 10000) % count != index or port in _handed_out:
                continue
            if cluster_bus and (port + 10000 > 65535 or port + 10000 in _handed_out
                                or not _port_is_free(port + 10000)):
                continue
            _handed_out.add(port)
            if cluster_bus:
                _handed_out.add(port + 10000)
            return port
    raise RuntimeError("no free loopback port found")


# ---------------------------------------------------------------------------
# RESP2 raw client
# ---------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------
# One server
# ---------------------------------------------------------------------------

class _BindFailed(Exception):
    """The server exited at start because its port (or cluster bus port) was taken."""


class ServerStartError(RuntimeError):
    pass


class RedisServer:
    """A redis-server process in its own temp dir.

    'module': path of the module to load; default module_path(); None loads no module
    (used to check the harness itself). 'args': extra command-line arguments, e.g.
    ["--appendonly", "yes"]. 'port': fixed port (default: a free one).
    The process is started by the constructor (start=False defers it)."""

    def __init__(self, args=(), module="default", port=None, dir=None, start=True,
                 name="redis"):
        self.module = module_path() if module == "default" else module
        self.extra_args = [str(a) for a in args]
        self.auto_port = port is None    # picked here: may move if another process binds it first
        self.port = port if port is not None else free_port()
        self.started_once = False
        self.own_dir = dir is None
        self.dir = dir if dir is not None else tempfile.mkdtemp(prefix="ps-%s-%d-" % (name, self.port))
        self.proc = None
        self._clients = []
        if start:
            self.start()

    # -- lifecycle ----------------------------------------------------------

    def command_line(self):
        cmd = [REDIS_SERVER,
               "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
               "--enable-debug-command", "local", "--save", "", "--appendonly", "no",
               "--daemonize", "no", "--logfile", "redis.log",
               # A replica's full sync starts at once instead of after the default 5 s delay.
               "--repl-diskless-sync-delay", "0",
               # No AOF rewrite the test did not ask for: one started by the AOF's growth
               # made a BGREWRITEAOF fail ("already in progress") and a test copy an AOF
               # mid-rewrite. A test that wants it passes --auto-aof-rewrite-percentage N.
               "--auto-aof-rewrite-percentage", "0"]
        if self.module:
            cmd += ["--loadmodule", os.path.abspath(self.module)]
        # Extra args come last so they override the defaults above (e.g. --appendonly yes).
        return cmd + self.extra_args

    def env(self):
        """Environment of the server process: ours, plus the sanitizer runtime and options
        when the module is a sanitizer build, plus $PS_SERVER_ENV."""
        env = dict(os.environ)
        rt = sanitizer_runtime(self.module)
        if rt:
            env["LD_PRELOAD"] = rt + (" " + env["LD_PRELOAD"] if env.get("LD_PRELOAD") else "")
            # allocator_may_return_null: a huge RESTORE or PS.CREATE must reach the module's
            # TryAlloc failure path (an OOM error), not an ASan abort.
            env["ASAN_OPTIONS"] = ("detect_leaks=0:halt_on_error=1:abort_on_error=1:"
                                   "allocator_may_return_null=1:disable_coredump=1:"
                                   "log_path=" + os.path.join(self.dir, "asan"))
            env["UBSAN_OPTIONS"] = ("halt_on_error=1:abort_on_error=1:print_stacktrace=1:"
                                    "log_path=" + os.path.join(self.dir, "ubsan"))
        for kv in os.environ.get("PS_SERVER_ENV", "").split():
            k, _, v = kv.partition("=")
            env[k] = v
        return env

    BIND_RETRIES = 5

    def start(self, timeout=START_TIMEOUT):
        """Start the process and wait (bounded) until it answers PING and has finished loading.
        Raises ServerStartError with the log tail when it exits or never answers. The first
        start on a port this server picked itself moves to another free port when the bind
        fails (another process took the port after free_port found it free); a restart keeps
        its port."""
        for attempt in range(self.BIND_RETRIES + 1):
            try:
                self._start_once(timeout)
                self.started_once = True
                return self
            except _BindFailed:
                if not self.auto_port or self.started_once or attempt == self.BIND_RETRIES:
                    raise ServerStartError("redis-server could not bind port %d (or its bus "
                                           "port)\n%s" % (self.port, self.log_tail()))
                for name in ("redis.log", "stdout.log"):   # keep the next attempt's log clean
                    f = os.path.join(self.dir, name)
                    if os.path.exists(f):
                        os.replace(f, "%s.port%d" % (f, self.port))
                self.port = free_port()

    def _start_once(self, timeout):
        if self.module and not os.path.exists(self.module):
            raise ServerStartError("module %s does not exist: run make module first" % self.module)
        out = open(os.path.join(self.dir, "stdout.log"), "ab")
        try:
            self.proc = subprocess.Popen(self.command_line(), cwd=self.dir, stdout=out,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=self.env())
        finally:
            out.close()
        _register(self.proc)
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                rc = self.proc.returncode
                _unregister(self.proc)
                if "Address already in use" in self.log_tail(10):
                    raise _BindFailed()
                raise ServerStartError("redis-server on port %d exited with %s during start\n%s"
                                       % (self.port, rc, self.log_tail()))
            try:
                c = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=2,
                                socket_connect_timeout=1)
                try:
                    # The pid tells our server from another process that holds the port
                    # (then ours exits on its failed bind, seen by poll() above).
                    if c.ping() and c.info("server").get("process_id") == self.proc.pid:
                        info = c.info("persistence")
                        if not info.get("loading", 0) and not info.get("async_loading", 0):
                            return self
                finally:
                    c.close()
            except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError) as e:
                last = e
            time.sleep(0.05)
        self.kill()
        raise ServerStartError("redis-server on port %d did not answer PING within %.0fs (%s)\n%s"
                               % (self.port, timeout, last, self.log_tail()))

    def is_alive(self):
        return self.proc is not None and self.proc.poll() is None

    def _close_clients(self):
        for c in self._clients:
            try:
                c.close()
            except Exception:
                pass
        self._clients = []

    def stop(self, timeout=10.0):
        """SIGTERM by pid, wait, SIGKILL if it does not exit. Returns the exit code (None if
        it was not running). Note SIGTERM makes redis save an RDB only if save points are set
        (the default here is --save "")."""
        self._close_clients()
        if self.proc is None:
            return None
        p = self.proc
        if p.poll() is None:
            try:
                os.kill(p.pid, signal.SIGTERM)
            except OSError:
                pass
            try:
                p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.kill(p.pid, signal.SIGKILL)
                p.wait(timeout=10)
        _unregister(p)
        collect_sanitizer_reports(self.dir)
        return p.returncode

    def kill(self):
        """SIGKILL by pid (a crash: nothing saved on the way out)."""
        self._close_clients()
        if self.proc is None:
            return
        p = self.proc
        if p.poll() is None:
            try:
                os.kill(p.pid, signal.SIGKILL)
            except OSError:
                pass
            p.wait(timeout=10)
        _unregister(p)
        collect_sanitizer_reports(self.dir)

    def restart(self, timeout=START_TIMEOUT, kill=False):
        """Stop (or kill) and start again over the same dir, port and arguments."""
        if kill:
            self.kill()
        else:
            self.stop()
        return self.start(timeout=timeout)

    def cleanup(self):
        """Stop the process and remove the temp dir (unless PS_KEEP_DIRS is set)."""
        self.stop()
        collect_sanitizer_reports(self.dir)
        if self.own_dir and not os.environ.get("PS_KEEP_DIRS"):
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.cleanup()

    # -- access -------------------------------------------------------------

    def client(self, **kw):
        """A redis.Redis on this server (decode_responses=False); closed at stop()."""
        kw.setdefault("socket_timeout", 60)
        c = redis.Redis(host="127.0.0.1", port=self.port, decode_responses=False, **kw)
        self._clients.append(c)
        return c

    def raw(self):
        """A RawClient on this server (caller closes it, or use 'with')."""
        return RawClient(self.port)

    @property
    def addr(self):
        return "127.0.0.1:%d" % self.port

    def log(self):
        """Text of redis.log (empty string if there is none yet)."""
        try:
            with open(os.path.join(self.dir, "redis.log"), "r", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def log_tail(self, lines=40):
        text = self.log()
        out = ""
        try:
            with open(os.path.join(self.dir, "stdout.log"), "r", errors="replace") as f:
                out = f.read()
        except OSError:
            pass
        tail = "\n".join(text.splitlines()[-lines:])
        if out.strip():
            tail += "\n--- stdout/stderr ---\n" + "\n".join(out.splitlines()[-lines:])
        try:
            reports = sorted(n for n in os.listdir(self.dir) if n.startswith(("asan.", "ubsan.")))
        except OSError:
            reports = []
        for name in reports[:1]:
            with open(os.path.join(self.dir, name), "r", errors="replace") as f:
                rep = f.read()
            tail += "\n--- %s ---\n%s" % (name, "\n".join(rep.splitlines()[:lines]))
        return "--- %s/redis.log (tail) ---\n%s" % (self.dir, tail)

    def __repr__(self):
        return "<RedisServer %s pid=%s dir=%s>" % (self.addr, self.proc and self.proc.pid, self.dir)


# ---------------------------------------------------------------------------
# Replication
# ---------------------------------------------------------------------------

def wait_until(predicate, timeout=10.0, interval=0.05, what="condition"):
    """Poll 'predicate' until true; AssertionError naming 'what' on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        v = predicate()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %.1fs waiting for %s" % (timeout, what))
        time.sleep(interval)


def start_replica(master, args=(), module="default", timeout=10.0):
    """Start a new server and make it a replica of 'master' (REPLICAOF), waiting until
    master_link_status:up and the initial sync is done. Returns the RedisServer; the
    caller (or a fixture) owns it."""
    rep = RedisServer(args=args, module=module, name="replica")
    try:
        c = rep.client()
        c.execute_command("REPLICAOF", "127.0.0.1", master.port)
        wait_until(lambda: c.info("replication").get("master_link_status") == "up"
                   and not c.info("replication").get("master_sync_in_progress", 0),
                   timeout=timeout, what="replica %s link up to %s\n%s\n%s"
                   % (rep.addr, master.addr, rep.log_tail(10), master.log_tail(10)))
        # After a diskless sync the master streams nothing to the replica until the
        # replica's first REPLCONF ACK (up to a second later): a master killed in that
        # second leaves the replica with none of what was written meanwhile. Wait until
        # the command stream flows (a PUBLISH is propagated and moves the offset).
        mc = master.client()
        mc.publish("__ps_replica_probe", "1")
        target = mc.info("replication")["master_repl_offset"]
        wait_until(lambda: c.info("replication").get("slave_repl_offset", 0) >= target,
                   timeout=timeout, what="replica %s streaming from %s" % (rep.addr, master.addr))
    except BaseException:
        rep.cleanup()
        raise
    return rep


def wait_for_replication(master, replicas, timeout=10.0):
    """WAIT for all 'replicas' to acknowledge, then poll until each replica's
    master_repl_offset equals the master's (so every write has been applied there)."""
    mc = master.client()
    n = len(replicas)
    acked = mc.execute_command("WAIT", n, int(timeout * 1000))
    if acked < n:
        raise AssertionError("WAIT %d acknowledged by %d replicas only" % (n, acked))
    target = mc.info("replication")["master_repl_offset"]
    for r in replicas:
        rc = r.client()
        wait_until(lambda: rc.info("replication").get("master_repl_offset", -1) >= target,
                   timeout=timeout, what="replica %s offset >= %d" % (r.addr, target))


def digest(client, key):
    """DEBUG DIGEST-VALUE 'key' -> digest bytes (a hex string; all zeros for a missing key)."""
    r = client.execute_command("DEBUG", "DIGEST-VALUE", key)
    return r[0] if isinstance(r, list) else r


# ---------------------------------------------------------------------------
# Redis Cluster
# ---------------------------------------------------------------------------

def _crc16_table():
    table = []
    for i in range(256):
        crc = i << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else (crc << 1)
        table.append(crc & 0xFFFF)
    return table


_CRC16 = _crc16_table()


def crc16(data):
    """CRC16/XMODEM as Redis Cluster uses it."""
    crc = 0
    for b in data:
        crc = ((crc << 8) & 0xFFFF) ^ _CRC16[((crc >> 8) ^ b) & 0xFF]
    return crc


def key_slot(key):
    """Hash slot of 'key' (str or bytes), honouring {hash tags}."""
    if isinstance(key, str):
        key = key.encode()
    s = key.find(b"{")
    if s >= 0:
        e = key.find(b"}", s + 1)
        if e > s + 1:
            key = key[s + 1:e]
    return crc16(key) % 16384


class RedisClusterHelper:
    """'masters' masters with 'replicas' replicas each, cluster-enabled, each in its own temp
    dir; created with redis-cli --cluster create and waited on until cluster_state:ok
    everywhere. Use as a context manager or call cleanup()."""

    def __init__(self, masters=3, replicas=0, args=(), module="default", node_timeout=3000,
                 timeout=90.0):
        # 'timeout' bounds redis-cli --cluster create and the wait for cluster_state:ok; it
        # took over 30 s on 2 cores at a load average of 13.
        self.nodes = []
        self.cli_output = ""
        try:
            for i in range(masters * (1 + replicas)):
                self.nodes.append(RedisServer(
                    args=["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                          "--cluster-node-timeout", str(node_timeout)] + list(args),
                    module=module, name="cluster%d" % i))
            cmd = [REDIS_CLI, "--cluster", "create"] + [n.addr for n in self.nodes] + \
                  ["--cluster-replicas", str(replicas), "--cluster-yes"]
            res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, timeout=timeout)
            self.cli_output = res.stdout.decode(errors="replace")
            if res.returncode != 0:
                raise RuntimeError("redis-cli --cluster create failed (%d):\n%s"
                                   % (res.returncode, self.cli_output))
            self.wait_ok(timeout=timeout, n_replicas=masters * replicas)
        except BaseException:
            self.cleanup()
            raise

    def wait_ok(self, timeout=30.0, n_replicas=None):
        """Wait until every node says cluster_state:ok, every node knows all nodes, and (if
        given) 'n_replicas' replicas have their link to the master up."""
        total = len(self.nodes)

        def ok():
            for n in self.nodes:
                c = n.client()
                info = c.execute_command("CLUSTER", "INFO").decode()
                if "cluster_state:ok" not in info:
                    return False
                if "cluster_known_nodes:%d" % total not in info:
                    return False
            if n_replicas is not None:
                up = 0
                for n in self.nodes:
                    rep = n.client().info("replication")
                    if rep.get("role") == "slave" and rep.get("master_link_status") == "up":
                        up += 1
                if up != n_replicas:
                    return False
            return True

        wait_until(ok, timeout=timeout, interval=0.1, what="cluster_state:ok on all nodes")
        if n_replicas:
            self.wait_streaming(timeout)

    def wait_streaming(self, timeout=30.0):
        """Wait until every replica receives its master's command stream: a write (a probe
        key set and deleted, in a slot the master owns) moves the master's replication offset,
        and each replica must reach that offset. After a sync a master streams to a replica
        only once the replica is online (its first REPLCONF ACK); a master killed before that
        leaves its replica with none of what was written meanwhile (a promoted replica
        without the job's keys). PUBLISH cannot serve as the probe: in cluster mode it goes
        over the cluster bus, not into the replication stream (the offset stays put)."""
        for m in self.masters():
            mc = m.client()
            probe = self.key_for(m, "__ps_replica_probe")
            mc.set(probe, "1")
            mc.delete(probe)
            target = mc.info("replication")["master_repl_offset"]
            assert target > 0, "the probe did not move %s's replication offset" % m.addr
            for r in self.replicas_of(m):
                rc = r.client()
                wait_until(lambda: rc.info("replication").get("slave_repl_offset", 0) >= target,
                           timeout=timeout, what="replica %s streaming from %s" % (r.addr, m.addr))

    def masters(self):
        return [n for n in self.nodes if n.client().info("replication")["role"] == "master"]

    def replicas_of(self, master):
        myid = master.client().execute_command("CLUSTER", "MYID").decode()
        out = []
        for n in self.nodes:
            rep = n.client().info("replication")
            if rep.get("role") == "slave" and rep.get("master_port") == master.port:
                out.append(n)
        assert myid
        return out

    def slot_ranges(self, master):
        """[(start, end), ...] owned by 'master' per its own CLUSTER SLOTS view."""
        out = []
        for entry in master.client().execute_command("CLUSTER", "SLOTS"):
            start, end, owner = entry[0], entry[1], entry[2]
            if int(owner[1]) == master.port:
                out.append((int(start), int(end)))
        return out

    def key_for(self, master, prefix="k"):
        """A key name (prefix + '{tag}') whose hash slot 'master' owns."""
        ranges = self.slot_ranges(master)
        for i in range(100000):
            key = "%s{%d}" % (prefix, i)
            s = key_slot(key)
            if any(a <= s <= b for a, b in ranges):
                return key
        raise RuntimeError("no key found for %s" % master.addr)

    def node_for_key(self, key):
        s = key_slot(key)
        for m in self.masters():
            if any(a <= s <= b for a, b in self.slot_ranges(m)):
                return m
        raise RuntimeError("no master owns slot %d" % s)

    def cleanup(self):
        for n in self.nodes:
            n.cleanup()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.cleanup()
