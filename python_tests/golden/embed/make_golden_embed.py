#!/usr/bin/env python3
"""Writes a golden RDB file of the current ps-embeds encoding version (module/embed_glue.h)
and what loading it must give, for test_embed_persistence.py. Run once per released encoding
version, from python_tests/:

    /usr/bin/python3 golden/embed/make_golden_embed.py v1   # -> golden/embed/v1/

Never regenerate an existing version's files. The tables cover every optimizer, admission
(filter bytes), TTL and CAPACITY evictions, explicit eviction, exactly-once entries, (from
v3) tombstone logs and (from v4) a ring-tracked table (base rows, a pending take, marks, a
forward entry, MAXLAG, a row a delta created)."""

import json
import os
import shutil
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import psserver  # noqa: E402

OPTS = {
    "g:sgd": (3, ["OPTIM", "SGD", "INIT", "UNIFORM", -1, 1, "SEED", 1, "LR", 0.5]),
    "g:momentum": (4, ["OPTIM", "MOMENTUM", "MOMENTUM", 0.8, "INIT", "NORMAL", 0, 0.5, "SEED", 2,
                       "TTL", 5]),
    "g:adagrad": (2, ["OPTIM", "ADAGRAD", "ADMIT", 2, "FILTER", 10, "SEED", 3]),
    "g:rowadagrad": (5, ["OPTIM", "ROWADAGRAD", "LR", 0.1, "CAPACITY", 6, "INIT", "UNIFORM", 0, 1,
                         "SEED", 4, "UNKNOWN", "ZEROS"]),
    "g:adam": (3, ["OPTIM", "ADAM", "BETA1", 0.85, "BETA2", 0.99, "EPS", 1e-6, "SEED", 5,
                   "MAXSTALENESS", 4, "DEDUPMAX", 3]),
    "g:ftrl": (2, ["OPTIM", "FTRL", "ALPHA", 0.1, "BETA", 1, "L1", 0.05, "L2", 0.01]),
    # from v3: a tombstone log smaller than the removals (its horizon has moved)
    "g:tombs": (2, ["OPTIM", "SGD", "LR", 0.5, "CAPACITY", 4, "TOMBSTONES", 3, "SEED", 6]),
    # from v4: ring tracking (PS.RING TRACK; no eviction on a tracked table)
    "g:ring": (3, ["OPTIM", "ADAM", "INIT", "NORMAL", 0, 0.2, "SEED", 8]),
}
RING = "g:ring"
IDS = [1, 2, 3, 5, 8, 13, 21, 2**63 + 7]


def blob(ids):
    return struct.pack("<%dQ" % len(ids), *ids)


def main():
    version = sys.argv[1]
    here = os.path.dirname(os.path.abspath(__file__))
    out = os.path.join(here, version)
    os.makedirs(out, exist_ok=False)
    s = psserver.RedisServer(args=["--rdbcompression", "no"])
    try:
        c = s.client()
        rng = np.random.default_rng(7)
        for key, (dim, opts) in OPTS.items():
            c.execute_command("PS.CREATE", key, "EMBEDDING", "DIM", dim, *opts)
            if key == RING:
                c.execute_command("PS.RING", key, "TRACK", "g1", "MAXQUEUE", 1 << 20, "MAXLAG", 100)
            for k in range(12):
                ids = [IDS[int(x)] for x in rng.integers(0, len(IDS), 5)]
                g = rng.standard_normal(5 * dim).astype("<f4").tobytes()
                c.execute_command("PS.PUSHGRAD", key, g, "IDS", blob(ids), "ID", "w%d" % (k % 4), k + 1)
            if key != RING:
                c.execute_command("PS.EVICT", key, "AGE", 9)
                continue
            c.execute_command("PS.DELTATAKE", key, "MAXELEMS", 2)
            c.execute_command("PS.APPLYDELTA", key, "ID", "g0", 3, blob([2, 99]),
                              rng.standard_normal(2 * dim).astype("<f4").tobytes(), "HOPS", 1)
            c.execute_command("PS.APPLYDELTA", key, "ID", "g2", 5, blob([1]),
                              rng.standard_normal(dim).astype("<f4").tobytes())
        c.save()
        shutil.copy(os.path.join(s.dir, "dump.rdb"), os.path.join(out, "dump.rdb"))
        expected = {}
        for key, (dim, _) in OPTS.items():
            rep = c.execute_command("PS.INFO", key)
            inf = dict(zip([x.decode() for x in rep[0::2]], rep[1::2]))
            _, data = c.execute_command("PS.PULL", key, "IDS", blob(IDS))
            d = c.execute_command("DEBUG", "DIGEST-VALUE", key)[0].decode()
            g = np.full(len(IDS) * dim, 0.5, dtype="<f4").tobytes()
            c.execute_command("PS.PUSHGRAD", key, g, "IDS", blob(IDS))
            after = c.execute_command("DEBUG", "DIGEST-VALUE", key)[0].decode()
            expected[key] = {"dim": dim, "ids": IDS, "pull": data.hex(), "digest": d,
                             "digest_after_push": after,
                             "info": {f: inf[f] for f in ("rows", "version", "created", "dropped",
                                                           "dedup_clients")}}
        with open(os.path.join(out, "expected.json"), "w") as f:
            json.dump(expected, f, indent=1, sort_keys=True)
    finally:
        s.stop()
        s.cleanup()


if __name__ == "__main__":
    main()
