#!/usr/bin/env python3
"""Writes a golden RDB file of the current ps-tensor encoding version and what loading it
must give, for python_tests/test_golden.py. Run once per released encoding version, from
python_tests/:

    /usr/bin/python3 golden/make_golden.py v2     # -> golden/v2/dump.rdb, expected.json

(v1: PS_ENCVER_FIRST; v2: PS_ENCVER_DEDUP_WINDOW, exactly-once entries with their seq
window; v3: PS_ENCVER_SNAP_SHARING, snapshots taken back to back saved once, tensor g:twins;
v4: PS_ENCVER_ACCUM, an ACCUM tensor with a sum and a pending take, tensor g:accum;
v5: PS_ENCVER_ACCUM_ROUNDS, an ACCUM tensor with MAXBACKLOG, a take split into parts with
one acknowledged, and round counters, tensor g:accum-rounds;
v6: PS_ENCVER_RING, a ring-tracked tensor with a pending take, two origins' marks and two
forward entries, tensor g:ring.)

Never regenerate an existing version's files: the point is that a newer module still loads
what an older one wrote. The tensors cover every optimizer, snapshots sharing and not
sharing arrays with the live tensor, exactly-once entries, a staleness policy, and an open
sync round."""

import hashlib
import json
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import psserver  # noqa: E402

G = (np.arange(12, dtype=np.float32) - 6) / 16   # the gradient the test pushes


def f32(a):
    return np.asarray(a, dtype="<f4").tobytes()


def build(c):
    x = c.execute_command
    x("PS.CREATE", "g:sgd", "SHAPE", 4, 3, "INIT", "UNIFORM", -1, 1, "SEED", 1, "LR", 0.5)
    x("PS.PUSHGRAD", "g:sgd", f32(G), "ID", "w1", 1)
    x("PS.PUSHGRAD", "g:sgd", f32(G), "ID", "w1", 2)

    x("PS.CREATE", "g:momentum", "SHAPE", 12, "INIT", "NORMAL", 0, 1, "SEED", 2,
      "OPTIM", "MOMENTUM", "MOMENTUM", 0.8, "LR", 0.1)
    for i, cid in enumerate(["a", "b", "c"]):
        x("PS.PUSHGRAD", "g:momentum", f32(G * (i + 1)), "ID", cid, 7)
    x("PS.SNAPSHOT", "g:momentum", "after3")

    x("PS.CREATE", "g:adam", "SHAPE", 3, 4, "INIT", "XAVIER", "SEED", 3, "OPTIM", "ADAM",
      "LR", 0.01, "BETA1", 0.85, "BETA2", 0.99, "EPS", 1e-6)
    x("PS.PUSHGRAD", "g:adam", f32(G), "ID", "w", 1)
    x("PS.SNAPSHOT", "g:adam", "early")
    x("PS.PUSHGRAD", "g:adam", f32(-G), "ID", "w", 2)
    x("PS.PUSHGRAD", "g:adam", f32(G * 3), "ID", "v", 1)
    x("PS.SNAPSHOT", "g:adam", "late")

    x("PS.CREATE", "g:adamw", "SHAPE", 2, 3, 2, "INIT", "HE", "SEED", 4, "OPTIM", "ADAMW",
      "LR", 0.02, "WD", 0.1, "CLIPNORM", 0.5)
    x("PS.PUSHGRAD", "g:adamw", f32(G * 10))

    x("PS.CREATE", "g:rmsprop", "SHAPE", 6, 2, "INIT", "CONST", 0.25, "OPTIM", "RMSPROP",
      "LR", 0.05, "MAXSTALENESS", 2, "POLICY", "SCALE")
    for _ in range(4):
        x("PS.PUSHGRAD", "g:rmsprop", f32(G))
    x("PS.PUSHGRAD", "g:rmsprop", f32(G), "VERSION", 0)

    x("PS.CREATE", "g:adagrad-sync", "SHAPE", 12, "INIT", "CONST", 1, "OPTIM", "ADAGRAD",
      "LR", 0.1, "SYNC", 3)
    for cid in ("p", "q", "r"):
        x("PS.PUSHGRAD", "g:adagrad-sync", f32(G), "ID", cid, 1)
    x("PS.PUSHGRAD", "g:adagrad-sync", f32(G), "ID", "p", 2)   # an open round: 1 of 3

    x("PS.CREATE", "g:nesterov", "SHAPE", 12, "DATA", f32(np.linspace(-1, 1, 12)),
      "OPTIM", "NESTEROV", "LR", 0.2)
    x("PS.SNAPSHOT", "g:nesterov", "start")
    x("PS.PUSHGRAD", "g:nesterov", f32(G))
    x("PS.ROLLBACK", "g:nesterov", "start")
    x("PS.PUSHGRAD", "g:nesterov", f32(G * 2))


def build_twins(c):
    """Two snapshots taken back to back and then overtaken by a write: they share one
    array that is not the live tensor's (saved once from PS_ENCVER_SNAP_SHARING)."""
    x = c.execute_command
    x("PS.CREATE", "g:twins", "SHAPE", 12, "INIT", "CONST", 0.5, "OPTIM", "ADAM", "LR", 0.01)
    x("PS.PUSHGRAD", "g:twins", f32(G), "ID", "t", 1)
    x("PS.SNAPSHOT", "g:twins", "one", "TIME", 1700000000000)
    x("PS.SNAPSHOT", "g:twins", "two", "TIME", 1700000000001)
    x("PS.PUSHGRAD", "g:twins", f32(G), "ID", "t", 2)


def build_accum(c):
    """An ACCUM tensor (PS_ENCVER_ACCUM): mirrored values and version, a pending take of two
    pushes under seq 41, and a sum of one more push after it."""
    x = c.execute_command
    x("PS.CREATE", "g:accum", "SHAPE", 3, 4, "OPTIM", "ACCUM")
    x("PS.MIRROR", "g:accum", 3, f32(np.linspace(-1, 1, 12)))
    x("PS.PUSHGRAD", "g:accum", f32(G), "ID", "r", 1)
    x("PS.PUSHGRAD", "g:accum", f32(G * 2), "ID", "r", 2)
    x("PS.TAKE", "g:accum", "SEQFLOOR", 41)
    x("PS.PUSHGRAD", "g:accum", f32(-G), "ID", "s", 1)


def build_accum_rounds(c):
    """An ACCUM tensor (PS_ENCVER_ACCUM_ROUNDS): MAXBACKLOG 20, a take of 5 pushes split by
    MAXROUND 2 into parts of 2, 2, 1 under seqs 60..62 with the first acknowledged, one push
    summed after it."""
    x = c.execute_command
    x("PS.CREATE", "g:accum-rounds", "SHAPE", 12, "OPTIM", "ACCUM")
    x("PS.MIRROR", "g:accum-rounds", 5, f32(np.linspace(1, -1, 12)))
    x("PS.TAKE", "g:accum-rounds", "MINCOUNT", 99, "MAXBACKLOG", 20)
    for s in range(1, 6):
        x("PS.PUSHGRAD", "g:accum-rounds", f32(G * s), "ID", "r", s)
    x("PS.TAKE", "g:accum-rounds", "SEQFLOOR", 60, "MAXROUND", 2)
    x("PS.TAKEACK", "g:accum-rounds", 60)
    x("PS.PUSHGRAD", "g:accum-rounds", f32(-G), "ID", "s", 1)


def build_ring(c):
    """A ring-tracked SGD tensor (PS_ENCVER_RING): origin g1, MAXQUEUE 1 MiB, a pending take
    of seq 7 (2 elements), deltas of g0 (seq 4, one hop left) and g2 (seq 9, two hops left)
    applied and queued, and own change still accumulated."""
    x = c.execute_command
    u32 = lambda a: np.asarray(a, dtype="<u4").tobytes()
    x("PS.CREATE", "g:ring", "SHAPE", 12, "INIT", "UNIFORM", -1, 1, "SEED", 6, "LR", 0.5)
    x("PS.RING", "g:ring", "TRACK", "g1", "MAXQUEUE", 1 << 20)
    x("PS.PUSHGRAD", "g:ring", f32(G), "ID", "w", 1)
    x("PS.DELTATAKE", "g:ring", "SEQFLOOR", 7, "MAXELEMS", 2)
    x("PS.APPLYDELTA", "g:ring", "ID", "g0", 4, u32([0, 5]), f32([1.5, -2]), "HOPS", 2)
    x("PS.APPLYDELTA", "g:ring", "ID", "g2", 9, u32([6]), f32([0.25]), "HOPS", 3)
    x("PS.PUSHGRAD", "g:ring", f32(G * 3), "ID", "w", 2)


RING_FIELDS = ("ring_origin", "ring_take_seq", "ring_pending_seq", "ring_pending_elems",
               "ring_accumulated", "ring_fwd_entries", "ring_fwd_bytes", "ring_maxqueue",
               "ring_applied")

ROUND_FIELDS = ("max_backlog", "backlog", "pending_parts", "relay_takes", "relay_rounds",
                "relay_forwarded", "relay_round_min", "relay_round_max", "relay_seq")


def describe(c, key):
    """What a loader must reproduce for 'key' (all hex strings / ints, JSON-able)."""
    x = c.execute_command
    v, data = x("PS.PULL", key)
    inf = x("PS.INFO", key)
    fields = {k.decode(): (val.decode() if isinstance(val, bytes) else val)
              for k, val in zip(inf[0::2], inf[1::2]) if not isinstance(val, list)}
    snaps = []
    for name, sv, ms in x("PS.SNAPSHOTS", key):
        _, sd = x("PS.PULL", key, "AT", name)
        snaps.append({"name": name.decode(), "version": sv, "unix_ms": ms, "data": sd.hex()})
    return {"version": v, "data": data.hex(), "digest": psserver.digest(c, key).decode(),
            "info": {k: fields[k] for k in ("optimizer", "lr", "elements") + ROUND_FIELDS +
                     RING_FIELDS if k in fields},
            "snapshots": snaps}


def after_push(c, key):
    """Values after one push of G (shows the optimizer state was loaded exactly)."""
    c.execute_command("PS.PUSHGRAD", key, f32(G))
    return c.execute_command("PS.PULL", key)[1].hex()


def main():
    ver = sys.argv[1] if len(sys.argv) > 1 else "v1"
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), ver)
    if os.path.exists(os.path.join(out, "dump.rdb")):
        sys.exit("%s exists: golden files of a released version are never regenerated" % out)
    os.makedirs(out, exist_ok=True)
    with psserver.RedisServer(name="golden") as s:
        c = s.client()
        build(c)
        if int(ver.lstrip("v")) >= 3:
            build_twins(c)
        if int(ver.lstrip("v")) >= 4:
            build_accum(c)
        if int(ver.lstrip("v")) >= 5:
            build_accum_rounds(c)
        if int(ver.lstrip("v")) >= 6:
            build_ring(c)
        keys = sorted(k.decode() for k in c.keys("g:*"))
        expected = {"encver": int(ver.lstrip("v")), "gradient": G.tolist(), "keys": {}}
        for k in keys:
            expected["keys"][k] = describe(c, k)
        c.save()
        shutil.copy(os.path.join(s.dir, "dump.rdb"), os.path.join(out, "dump.rdb"))
        for k in keys:
            expected["keys"][k]["after_push"] = after_push(c, k)
        # Exactly-once entries: replaying (id, seq) answers the original version.
        expected["replays"] = [["g:sgd", "w1", 2, 2], ["g:momentum", "b", 7, 2],
                               ["g:adam", "v", 1, 3], ["g:adagrad-sync", "q", 1, 1]]
        if "g:twins" in keys:
            expected["replays"].append(["g:twins", "t", 2, 2])
        if "g:accum" in keys:
            expected["replays"].append(["g:accum", "r", 2, 3])
        if "g:accum-rounds" in keys:
            expected["replays"].append(["g:accum-rounds", "r", 5, 5])
        if "g:ring" in keys:
            expected["replays"].append(["g:ring", "w", 2, 4])
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
    print("wrote %s/dump.rdb (%d bytes, sha256 %s) and expected.json" % (
        out, os.path.getsize(os.path.join(out, "dump.rdb")),
        hashlib.sha256(open(os.path.join(out, "dump.rdb"), "rb").read()).hexdigest()[:16]))


if __name__ == "__main__":
    main()
