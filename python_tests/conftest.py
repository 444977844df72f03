"""pytest fixtures for redis-ps integration tests (see psserver.py for the harness).

Fixtures:
  module_path     absolute path of build/ps.so (or $PS_MODULE); FAILS (never skips) when missing
  server          a fresh redis-server with the module, per test
  make_server     factory: make_server(args=[...]) -> RedisServer, all stopped at teardown
  make_replica    factory: make_replica(master, args=[...]) -> replica with its link up
  r               redis.Redis client of 'server'
  raw             RawClient of 'server' (error replies verbatim, code included)

When a test fails, the tail of every server's redis.log is printed in the teardown section.

Parallel runs (python_tests/run_pytest.sh, what `make pytest` calls): the tests run in two
passes, first on pytest-xdist workers all but the serial ones (marker serial or slow, see
is_serial), then the serial ones alone. Each worker draws server ports from its own slice
(psserver.worker_slice), so workers never race for a port.

Sanitizer builds (PS_MODULE=build/asan/ps.so, see `make check-asan`): a test during which a
server wrote an ASan/UBSan report fails at teardown, and so does the session (for servers
stopped after the last test of a module), with exit status 9, which `make pytest` does not rerun.
"""

import os

import pytest

import psserver


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


def _failed(request):
    rep = getattr(request.node, "rep_call", None)
    setup = getattr(request.node, "rep_setup", None)
    return (rep is not None and rep.failed) or (setup is not None and setup.failed)


def _format_reports(reports):
    return "\n".join("=== sanitizer report %s/%s ===\n%s" % (d, n, "\n".join(t.splitlines()[:60]))
                     for d, n, t in reports)


@pytest.fixture(autouse=True)
def _no_sanitizer_reports():
    """Fails the test if any server stopped during it left an ASan/UBSan report."""
    before = len(psserver.SANITIZER_REPORTS)
    yield
    new = psserver.SANITIZER_REPORTS[before:]
    if new:
        pytest.fail(_format_reports(new), pytrace=False)


SANITIZER_EXIT = 9
_worker_reports = []             # xdist controller: the reports its workers sent at their end


@pytest.hookimpl(optionalhook=True)      # an xdist hook: unknown without pytest-xdist
def pytest_testnodedown(node, error):
    """xdist controller: a worker ended; keep the sanitizer reports it saw after its last test."""
    _worker_reports.extend(getattr(node, "workeroutput", {}).get("ps_sanitizer_reports", []))


def pytest_sessionfinish(session, exitstatus):
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        # An xdist worker: its exit status is not the run's; hand the reports to the controller.
        workeroutput["ps_sanitizer_reports"] = [list(r) for r in psserver.SANITIZER_REPORTS]
        return
    reports = psserver.SANITIZER_REPORTS + [tuple(r) for r in _worker_reports]
    if reports:
        print("\n" + _format_reports(reports))
        print("\n%d sanitizer report(s): failing the run" % len(reports))
        # Not 1: `make pytest` reruns failed tests once when the exit status is 1 (async
        # training spread), and a memory error or a server crash must not get a second try.
        session.exitstatus = SANITIZER_EXIT


def is_serial(item):
    """Tests that run alone, after the parallel pass (python_tests/run_pytest.sh): marked
    'serial' (timing-sensitive or CPU-hungry: kill/freeze timing, speed ratios, fixed
    ports) or 'slow' (fault injection through kills and failovers, whole-document runs)."""
    return item.get_closest_marker("serial") is not None or \
        item.get_closest_marker("slow") is not None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """PS_PYTEST_PASS=parallel keeps the tests that may share the machine with others,
    PS_PYTEST_PASS=serial the others (is_serial); unset keeps all."""
    which = os.environ.get("PS_PYTEST_PASS", "")
    if which not in ("parallel", "serial"):
        return
    keep = [it for it in items if is_serial(it) == (which == "serial")]
    if len(keep) != len(items):
        drop = [it for it in items if is_serial(it) != (which == "serial")]
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(scope="session")
def module_path():
    path = psserver.module_path()
    if not os.path.exists(path):
        pytest.fail("module %s not found: run make module first" % path, pytrace=False)
    return path


class _Servers:
    """Owns every server a test starts; stops them by pid at teardown, even on failure."""

    def __init__(self):
        self.servers = []

    def add(self, s):
        self.servers.append(s)
        return s

    def cleanup(self, failed):
        for s in reversed(self.servers):
            if failed:
                print("\n=== %r alive=%s ===\n%s" % (s, s.is_alive(), s.log_tail(30)))
            s.cleanup()
        self.servers = []


@pytest.fixture
def servers(request):
    reg = _Servers()
    yield reg
    reg.cleanup(_failed(request))


@pytest.fixture
def make_server(module_path, servers):
    def make(args=(), **kw):
        kw.setdefault("module", module_path)
        return servers.add(psserver.RedisServer(args=args, **kw))
    return make


@pytest.fixture
def make_replica(module_path, servers):
    def make(master, args=(), **kw):
        kw.setdefault("module", module_path)
        return servers.add(psserver.start_replica(master, args=args, **kw))
    return make


@pytest.fixture
def server(make_server):
    return make_server()


@pytest.fixture
def r(server):
    return server.client()


@pytest.fixture
def raw(server):
    c = server.raw()
    yield c
    c.close()
