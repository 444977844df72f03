"""psserver_proc.py -- the process side of the integration-test harness (psserver.py):
where the binaries and the module are, the sanitizer reports of the servers, the registry
of every pid started (killed at exit if a test did not stop it) and free loopback ports
from this pytest-xdist worker's own slice. Tests import these names from psserver."""

import atexit
import os
import random
import signal
import socket
import subprocess
import threading

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
