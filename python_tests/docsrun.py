"""Runs the shell examples of a document: every fenced block opened with ```sh, in document
order, as one bash script (set -euo pipefail), so a later block sees the variables and
functions an earlier one defined. Blocks opened with ``` or ```text are output or syntax and
are not run. Used by test_docs_operations.py (docs/operations.md) and test_docs_guide.py
(README.md's first job by hand).

The script runs in its own session (process group); whatever is left of it at the end
(background jobs of a failed run) is killed by that group id, and the redis-servers it
daemonized by the pids in their pid files (the caller passes the files)."""

import glob
import os
import re
import signal
import socket
import subprocess
import time

import psserver

ROOT = psserver.REPO_ROOT
BUILD = os.path.join(ROOT, "build")


def sh_blocks(path):
    """[(line number of the opening fence, code)] of the ```sh blocks of 'path'."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    out, cur, start = [], None, 0
    for no, line in enumerate(lines, 1):
        if cur is None and re.match(r"^```sh\s*$", line):
            cur, start = [], no
        elif cur is not None and line.startswith("```"):
            out.append((start, "\n".join(cur)))
            cur = None
        elif cur is not None:
            cur.append(line)
    assert cur is None, "%s: unclosed ```sh block at line %d" % (path, start)
    return out


def script_of(path):
    """The blocks of 'path' as one bash script that echoes where each block starts."""
    rel = os.path.relpath(path, ROOT)
    parts = ["set -euo pipefail"]
    for no, code in sh_blocks(path):
        parts.append("echo '=== %s:%d' >&2" % (rel, no))
        parts.append(code)
    parts.append("echo '=== %s: all blocks ran' >&2" % rel)
    return "\n".join(parts) + "\n"


def install_prefix(tmp):
    """A prefix laid out as `make install` lays it out, its files linked to build/."""
    prefix = os.path.join(str(tmp), "prefix")
    for rel, target in (("bin/ps-train", "ps-train"), ("bin/ps-gen-ctr", "ps-gen-ctr"),
                        ("bin/ps-relay", "ps-relay"), ("bin/ps-export", "ps-export"),
                        ("lib/redis-ps/ps.so", "ps.so")):
        dst = os.path.join(prefix, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        assert os.path.exists(os.path.join(BUILD, target)), "build/%s missing: make" % target
        os.symlink(os.path.join(BUILD, target), dst)
    return prefix


def free_port_range(n, bus=0):
    """A base port B with B..B+n-1 free (and B+10000.. for the first 'bus' of them)."""
    def free(p):
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", p))
            return True
        except OSError:
            return False
        finally:
            s.close()
    for _ in range(200):
        base = psserver.free_port(cluster_bus=False)
        if base + n + 10000 > 65535:
            continue
        if all(free(base + i) for i in range(n)) and all(free(base + 10000 + i)
                                                           for i in range(bus)):
            return base
    raise RuntimeError("no free port range")


def run_script(script, env, cwd, timeout, pidfiles_glob, log_path):
    """Runs 'script' with bash; returns (exit code, output). Kills what it left behind."""
    full_env = dict(os.environ)
    for k in ("PS_USER", "PS_PASSWORD", "REDISCLI_AUTH"):
        full_env.pop(k, None)
    full_env.update(env)
    with open(log_path, "w") as log:
        p = subprocess.Popen(["bash", "-c", script], cwd=cwd, env=full_env, stdout=log,
                             stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = p.wait(timeout)
        except subprocess.TimeoutExpired:
            rc = "timeout after %d s" % timeout
        finally:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
            for f in glob.glob(pidfiles_glob):
                try:
                    pid = int(open(f).read().strip())
                    os.kill(pid, signal.SIGKILL)
                except (ValueError, OSError):
                    pass
            time.sleep(0.2)
    with open(log_path) as f:
        return rc, f.read()
