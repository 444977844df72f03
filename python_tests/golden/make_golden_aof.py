#!/usr/bin/env python3
"""Writes a golden AOF (aof-use-rdb-preamble no) of the current PS._RESTORE format and what
loading it must give, for python_tests/test_golden.py. Run once per released AOF format, from
python_tests/:

    /usr/bin/python3 golden/make_golden_aof.py aof-v0   # -> golden/aof-v0/appendonlydir/, expected.json

(aof-v0: PS._RESTORE HEADER without a version token, as written up to commit 749ff45.)

Never regenerate an existing format's files: the point is that a newer module still loads an
AOF that an older one rewrote. The tensors are those of make_golden.py (every optimizer,
snapshots, exactly-once entries, an open sync round) plus two snapshots taken back to back
and then overtaken by a write (they share one array that is not the live tensor's)."""

import hashlib
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import psserver  # noqa: E402
import make_golden  # noqa: E402

AOF_ARGS = ["--appendonly", "yes", "--aof-use-rdb-preamble", "no",
            "--auto-aof-rewrite-percentage", "0"]


def rewrite(c):
    def done():
        p = c.info("persistence")
        return not p["aof_rewrite_in_progress"] and not p["aof_rewrite_scheduled"]
    psserver.wait_until(done, timeout=60, what="AOF rewrite")
    c.bgrewriteaof()
    psserver.wait_until(done, timeout=60, what="AOF rewrite")
    assert c.info("persistence")["aof_last_bgrewrite_status"] == "ok"


def main():
    ver = sys.argv[1] if len(sys.argv) > 1 else "aof-v0"
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), ver)
    if os.path.exists(os.path.join(out, "appendonlydir")):
        sys.exit("%s exists: golden files of a released format are never regenerated" % out)
    os.makedirs(out, exist_ok=True)
    with psserver.RedisServer(name="golden-aof", args=AOF_ARGS) as s:
        c = s.client()
        make_golden.build(c)
        make_golden.build_twins(c)
        keys = sorted(k.decode() for k in c.keys("g:*"))
        expected = {"format": ver, "gradient": make_golden.G.tolist(), "keys": {}}
        for k in keys:
            expected["keys"][k] = make_golden.describe(c, k)
        rewrite(c)
        s.stop()
        shutil.copytree(os.path.join(s.dir, "appendonlydir"), os.path.join(out, "appendonlydir"))
        s.start()
        c = s.client()
        for k in keys:
            expected["keys"][k]["after_push"] = make_golden.after_push(c, k)
        expected["replays"] = [["g:sgd", "w1", 2, 2], ["g:momentum", "b", 7, 2],
                               ["g:adam", "v", 1, 3], ["g:adagrad-sync", "q", 1, 1],
                               ["g:twins", "t", 2, 2]]
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
    base = [f for f in os.listdir(os.path.join(out, "appendonlydir")) if f.endswith(".base.aof")]
    data = open(os.path.join(out, "appendonlydir", base[0]), "rb").read()
    assert not data.startswith(b"REDIS"), "base file is an RDB, expected commands"
    print("wrote %s/appendonlydir (%s: %d bytes, sha256 %s) and expected.json" % (
        out, base[0], len(data), hashlib.sha256(data).hexdigest()[:16]))


if __name__ == "__main__":
    main()
