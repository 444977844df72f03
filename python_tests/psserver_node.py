"""psserver_node.py -- one redis-server of the integration-test harness (psserver.py):
RedisServer (a process in its own temp dir, started until it answers, stopped by pid,
its sanitizer and crash reports collected), and replication: wait_until, start_replica,
wait_for_replication, digest. Tests import these names from psserver."""

import os
import shutil
import signal
import subprocess
import tempfile
import time

import redis

from psserver_proc import (REDIS_SERVER, START_TIMEOUT, _register, _unregister,
                           collect_sanitizer_reports, free_port, module_path, sanitizer_runtime)
from psserver_resp import RawClient


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
