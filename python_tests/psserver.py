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

Where it lives (this module re-exports every name tests use, so `import psserver` and
`from psserver import ...` stay the one way in):
  psserver_proc.py     paths, sanitizer reports, the pid registry, free ports
  psserver_resp.py     RawClient, RespError
  psserver_node.py     RedisServer, ServerStartError, wait_until, start_replica,
                       wait_for_replication, digest
  psserver_cluster.py  crc16, key_slot, RedisClusterHelper
"""

from psserver_cluster import RedisClusterHelper, crc16, key_slot
from psserver_node import (RedisServer, ServerStartError, digest, start_replica, wait_for_replication,
                           wait_until)
from psserver_proc import (PORT_HIGH, PORT_LOW, REDIS_CLI, REDIS_SERVER, REPO_ROOT,
                           SANITIZER_REPORTS, START_TIMEOUT, _port_is_free, _register, _unregister,
                           collect_sanitizer_reports, free_port, module_path, sanitizer_runtime,
                           worker_slice)
from psserver_resp import RawClient, RespError

__all__ = ["PORT_HIGH", "PORT_LOW", "REDIS_CLI", "REDIS_SERVER", "REPO_ROOT", "SANITIZER_REPORTS",
           "START_TIMEOUT", "RawClient", "RedisClusterHelper", "RedisServer", "RespError",
           "ServerStartError", "_port_is_free", "_register", "_unregister",
           "collect_sanitizer_reports", "crc16", "digest", "free_port", "key_slot", "module_path",
           "sanitizer_runtime", "start_replica", "wait_for_replication", "wait_until",
           "worker_slice"]
