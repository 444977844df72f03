"""ps-export (tools/ps-export.c): base + delta export of embedding tables into another Redis
(F16 rows, one hash per table) or into files, with tombstones. After training with TTL,
CAPACITY and PS.EVICT removals, an export leaves the target equal to the master's rows
rounded to F16 (byte for byte: the module's F16 encoding) with the removed rows absent; a
delta reads only what changed; a passed horizon re-bases; a replica serves as the source;
SIGKILLs at random points of an export leave a target that the next run brings to the same
rows; --every-ms follows training until SIGTERM; and end to end, a followed export of a
`ps-train stream` job whose exporter is SIGKILLed inside passes while the stream trains, and
restarted, converges to the master's rows with the evicted ones absent."""

import json
import os
import signal
import struct
import subprocess
import time

import numpy as np
import pytest

import psserver
from pshelpers_pkg import redis_ps
from psserver import wait_for_replication

EXPORT = os.path.join(psserver.REPO_ROOT, "build", "ps-export")


@pytest.fixture(scope="module", autouse=True)
def built():
    if not os.path.exists(EXPORT):
        pytest.fail("%s not built: run make client" % EXPORT, pytrace=False)


def blob(ids):
    return struct.pack("<%dQ" % len(ids), *ids)


def export(source, *args, check=True, timeout=60):
    p = subprocess.run([EXPORT, "--source", source.addr, "--log-json"] + [str(a) for a in args],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    lines = [json.loads(x) for x in p.stdout.decode().splitlines() if x.startswith("{")]
    if check:
        assert p.returncode == 0 and lines and lines[-1]["ok"], (p.returncode, p.stderr.decode())
    return p.returncode, lines, p.stderr.decode()


def train(c, key, dim, seed, pushes, vocab=400, evict_every=0):
    """Zipf-ish pushes (a small script standing in for ps-train's workers)."""
    rng = np.random.default_rng(seed)
    for k in range(pushes):
        ids = [int(x) % vocab for x in rng.zipf(1.2, int(rng.integers(1, 40)))]
        g = rng.standard_normal(len(ids) * dim).astype("<f4").tobytes()
        c.execute_command("PS.PUSHGRAD", key, g, "IDS", blob(ids))
        if evict_every and k % evict_every == evict_every - 1:
            c.execute_command("PS.EVICT", key, "AGE", 25)


def master_f16(c, key):
    """{id: F16 row bytes} of every live row of 'key' (PS.SCANROWS FORMAT F16)."""
    rows, cursor = {}, 0
    while True:
        cursor, _, ids, vals = c.execute_command("PS.SCANROWS", key, cursor, "COUNT", 4096, "FORMAT", "F16")
        ids = struct.unpack("<%dQ" % (len(ids) // 8), ids)
        w = len(vals) // max(len(ids), 1)
        rows.update({i: vals[k * w:(k + 1) * w] for k, i in enumerate(ids)})
        if int(cursor) == 0:
            return rows


def target_rows(t, table, prefix="ps:export:"):
    return {int(k): v for k, v in t.hgetall("%s{%s}:rows" % (prefix, table)).items()}


def check_equal(c, key, t, table=None, ever=None):
    want, got = master_f16(c, key), target_rows(t, table or key)
    assert got == want
    if ever is not None:
        gone = set(ever) - set(want)
        assert gone and not gone & set(got)       # rows removed on the master are absent
    f32 = np.frombuffer(b"".join(want.values()), dtype="<f2").astype(np.float32)
    assert np.isfinite(f32).all()
    return want


def test_export_follows_training_with_ttl_capacity_and_evict(make_server):
    m, tgt = make_server(), make_server(module=None)
    c, t = m.client(), tgt.client()
    c.execute_command("PS.CREATE", "emb", "EMBEDDING", "DIM", 8, "INIT", "NORMAL", 0, 0.1, "SEED", 1,
                      "OPTIM", "ADAGRAD", "LR", 0.05, "TTL", 40, "CAPACITY", 250)
    train(c, "emb", 8, 1, 60)
    _, out, _ = export(m, "--key", "emb", "--target", tgt.addr, "--count", 64)
    assert out[0]["base"] == 1 and out[-1]["versions"] == [60]
    check_equal(c, "emb", t)
    train(c, "emb", 8, 2, 80, evict_every=30)
    ever = set(range(400))
    i = dict(zip(*[iter(x.decode() if isinstance(x, bytes) else x for x in c.execute_command("PS.INFO", "emb"))] * 2))
    assert int(i["evicted_ttl"]) > 0 and int(i["evicted_capacity"]) > 0 and int(i["evicted_explicit"]) > 0
    _, out, _ = export(m, "--key", "emb", "--target", tgt.addr, "--count", 64)
    assert out[0]["base"] == 0 and out[0]["since"] == 60 and out[0]["gone"] > 0
    assert out[0]["rows"] < len(master_f16(c, "emb")) + out[0]["gone"]
    check_equal(c, "emb", t, ever=ever)
    meta = {k.decode(): v.decode() for k, v in t.hgetall("ps:export:{emb}:meta").items()}
    assert meta["dim"] == "8" and meta["format"] == "f16" and meta["version:0"] == str(140)
    # Nothing changed: the next pass writes nothing.
    _, out, _ = export(m, "--key", "emb", "--target", tgt.addr)
    assert out[0]["rows"] == 0 and out[0]["gone"] == 0 and out[0]["base"] == 0


def read_psx(path):
    """(header, [(kind, ids, f16 rows)]) of a .psx file."""
    b = open(path, "rb").read()
    magic, dim, fmt, shard, frm, to, base = struct.unpack("<4sIIIQQB", b[:33])
    assert magic == b"PSX1" and fmt == 1
    recs, p = [], 33
    while b[p:p + 1] != b"E":
        kind = b[p:p + 1]
        n = struct.unpack("<Q", b[p + 1:p + 9])[0]
        ids = struct.unpack("<%dQ" % n, b[p + 9:p + 9 + 8 * n])
        p += 9 + 8 * n
        vals = b""
        if kind == b"R":
            vals, p = b[p:p + n * dim * 2], p + n * dim * 2
        recs.append((kind, ids, vals))
    assert p == len(b) - 1
    return dict(dim=dim, shard=shard, frm=frm, to=to, base=base), recs


def apply_files(d, table):
    """The rows a reader of the manifest's files holds (what a serving loader does)."""
    lines = open(os.path.join(d, table + ".manifest")).read().split("\n")
    assert lines[0] == "psx-manifest 1"
    nshards = int([ln for ln in lines if ln.startswith("shards ")][0].split()[1])
    rows = {}
    for ln in lines:
        if ln.startswith("file "):
            h, recs = read_psx(os.path.join(d, ln[5:]))
            if h["base"]:   # the shard's rows are the file's: drop what is held of it
                rows = {i: v for i, v in rows.items()
                        if nshards > 1 and redis_ps.embed.shard_of([i], nshards)[0] != h["shard"]}
            for kind, ids, vals in recs:
                for k, i in enumerate(ids):
                    if kind == b"G":
                        rows.pop(i, None)
                    else:
                        rows[i] = vals[k * 2 * h["dim"]:(k + 1) * 2 * h["dim"]]
    return rows


def test_export_to_files_and_a_passed_horizon_rebases(make_server, tmp_path):
    m, tgt = make_server(), make_server(module=None)
    c, t = m.client(), tgt.client()
    c.execute_command("PS.CREATE", "f", "EMBEDDING", "DIM", 4, "CAPACITY", 100)
    train(c, "f", 4, 3, 30)
    d = str(tmp_path / "out")
    for args in (["--out-dir", d], ["--target", tgt.addr]):
        export(m, "--key", "f", *args, "--count", 16)
    train(c, "f", 4, 4, 3)                       # few removals: the log still holds them
    for args in (["--out-dir", d], ["--target", tgt.addr]):
        _, out, _ = export(m, "--key", "f", *args, "--count", 16)
        assert out[0]["base"] == 0
    ever = set(range(400))
    assert apply_files(d, "f") == master_f16(c, "f")
    check_equal(c, "f", t, ever=ever)
    c.execute_command("PS.CONFIG", "f", "TOMBSTONES", 20)  # keeps the newest 20: the horizon moves
    train(c, "f", 4, 5, 40)                                 # past the targets' version (33)
    i = c.execute_command("PS.INFO", "f")
    assert int(i[i.index(b"tombstone_horizon") + 1]) > 33
    for args in (["--out-dir", d], ["--target", tgt.addr]):
        _, out, _ = export(m, "--key", "f", *args, "--count", 16)
        assert out[0]["base"] == 1
    assert apply_files(d, "f") == master_f16(c, "f")
    check_equal(c, "f", t, ever=ever)
    names = [ln[5:] for ln in open(os.path.join(d, "f.manifest")) if ln.startswith("file ")]
    assert [n.split(".")[2] for n in names] == ["base", "delta", "base"]


def test_a_sharded_table_from_a_replica(make_server, make_replica):
    m, tgt = make_server(), make_server(module=None)
    rep = make_replica(m)
    c, t = m.client(), tgt.client()
    keys = [redis_ps.embed.shard_key("job:emb", s, 2) for s in range(2)]
    for k in keys:
        c.execute_command("PS.CREATE", k, "EMBEDDING", "DIM", 2, "TTL", 20, "SEED", 5)
    rng = np.random.default_rng(0)
    for _ in range(60):
        ids = np.unique(rng.integers(0, 300, 20))
        sh = redis_ps.embed.shard_of(ids, 2)
        for s in range(2):
            part = [int(x) for x in ids[sh == s]]
            if part:
                c.execute_command("PS.PUSHGRAD", keys[s], f32(rng.standard_normal(2 * len(part))),
                                  "IDS", blob(part))
    wait_for_replication(m, [rep])
    export(rep, "--table", "job:emb", "--shards", 2, "--target", tgt.addr)
    for _ in range(30):
        part = [int(x) for x in rng.integers(0, 300, 5) if redis_ps.embed.shard_of([int(x)], 2)[0] == 0]
        if part:
            c.execute_command("PS.PUSHGRAD", keys[0], f32(rng.standard_normal(2 * len(part))), "IDS", blob(part))
    wait_for_replication(m, [rep])
    _, out, _ = export(rep, "--table", "job:emb", "--shards", 2, "--target", tgt.addr)
    assert [o["base"] for o in out[:-1]] == [0, 0]
    want = {}
    for k in keys:
        want.update(master_f16(c, k))
    assert target_rows(t, "job:emb") == want
    assert set(range(300)) - set(want)


def f32(a):
    return np.asarray(a, dtype="<f4").tobytes()


def test_sigkill_at_random_points_then_the_next_run_converges(make_server):
    m, tgt = make_server(), make_server(module=None)
    c, t = m.client(), tgt.client()
    c.execute_command("PS.CREATE", "k", "EMBEDDING", "DIM", 16, "CAPACITY", 3000, "TTL", 300,
                      "INIT", "UNIFORM", -1, 1, "SEED", 2)
    rng = np.random.default_rng(11)
    mid_pass, rnd = 0, 0
    while mid_pass < 3 and rnd < 15:     # until 3 kills landed inside a pass
        rnd += 1
        train(c, "k", 16, 100 + rnd, 120, vocab=6000, evict_every=50)
        p = subprocess.Popen([EXPORT, "--source", m.addr, "--key", "k", "--target", tgt.addr,
                              "--count", "4", "--quiet"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(float(rng.uniform(0.003, 0.03)))
        p.send_signal(signal.SIGKILL)
        p.wait()
        state = t.hget("ps:export:{k}:meta", "state:0")
        mid_pass += state is not None and not state.startswith(b"idle")
    assert mid_pass >= 2, "the kills did not land inside passes (%d)" % mid_pass
    export(m, "--key", "k", "--target", tgt.addr, "--count", 64)
    check_equal(c, "k", t, ever=range(6000))


def test_every_ms_follows_training_until_sigterm(make_server):
    m, tgt = make_server(), make_server(module=None)
    c, t = m.client(), tgt.client()
    c.execute_command("PS.CREATE", "live", "EMBEDDING", "DIM", 4, "CAPACITY", 200)
    train(c, "live", 4, 7, 20)
    p = subprocess.Popen([EXPORT, "--source", m.addr, "--key", "live", "--target", tgt.addr,
                          "--every-ms", "50", "--log-json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        train(c, "live", 4, 8, 60)
        v = c.execute_command("PS.INFO", "live")
        v = int(v[v.index(b"version") + 1])
        psserver.wait_until(lambda: int(t.hget("ps:export:{live}:meta", "version:0") or 0) >= v,
                            timeout=10, what="the exporter reaching version %d" % v)
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=10)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, err
    lines = [json.loads(x) for x in out.decode().splitlines()]
    assert lines[-1]["event"] == "done" and lines[-1]["passes"] >= 2
    check_equal(c, "live", t, ever=range(400))


@pytest.mark.parametrize("args", [[], ["--key", "k"], ["--key", "k", "--target", "x", "--out-dir", "y"],
                                  ["--table", "t", "--target", "x"], ["--key", "k", "--target", "x", "--count", "0"],
                                  ["--key", "k", "--target", "x", "--bogus"]])
def test_bad_usage_exits_2(args):
    p = subprocess.run([EXPORT, "--source", "127.0.0.1:1"] + args, capture_output=True, timeout=10)
    assert p.returncode == 2 and b"ps-export" in p.stderr


def test_followed_export_of_a_stream_job_survives_sigkill_and_converges(make_server, tmp_path):
    """The online path end to end: two `ps-train stream` workers train a stream into a job
    with --capacity (rows evicted and re-created all along), `ps-export --every-ms 50`
    follows the job's sharded table into another Redis; the exporter is SIGKILLed twice at
    random moments while the stream trains and is restarted each time (resuming from the
    target's progress). After the stream is done, the followed export reaches the table's
    final versions: the target holds the master's rows exactly (F16), and none of the rows
    evicted on the way."""
    import random
    import threading
    from pshelpers import PS_TRAIN, run_ps_train
    m, tgt = make_server(), make_server(module=None)
    c, t = m.client(), tgt.client()
    seed = tmp_path / "seed.libsvm"
    seed.write_text("1 %d:1\n0 %d:1\n" % (1 << 56, 2 << 56))
    run_ps_train(["init", "--addr", m.addr, "--job", "x", "--model", "fm", "--train", str(seed),
                  "--capacity", 600, "--table-shards", 2, "--seed", 3])
    keys = [redis_ps.embed.shard_key("x:emb", s, 2) for s in range(2)]
    assert all(c.exists(k) for k in keys)
    rng = random.Random(5)
    lines = ["%d %s" % (rng.random() < 0.3, " ".join(
        "%d:1" % ((f << 56) | rng.randrange(1500)) for f in range(6))) for _ in range(12000)]
    ever = {int(x.split(":")[0]) for ln in lines for x in ln.split()[1:]}

    def feed():
        r = m.client()
        for i in range(0, len(lines), 200):
            p = r.pipeline(transaction=False)
            for ln in lines[i:i + 200]:
                p.xadd("ev", {"l": ln})
            p.execute()
            time.sleep(0.03)
    feeder = threading.Thread(target=feed)
    feeder.start()     # 12,000 events in about 2 s
    ws = [subprocess.Popen([PS_TRAIN, "stream", "--addr", m.addr, "--job", "x", "--stream", "ev",
                            "--consumer", "w%d" % i, "--batch", "64", "--idle-exit", "1500",
                            "--progress", "none"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
          for i in range(2)]
    follow = [EXPORT, "--source", m.addr, "--table", "x:emb", "--shards", "2", "--target", tgt.addr,
              "--count", "16", "--log-json", "--every-ms"]
    kills = mid_pass = 0
    try:
        # Killed while the stream trains, until a kill landed inside a pass (at most 8).
        while kills < 8 and (kills < 2 or not mid_pass):
            p = subprocess.Popen(follow + ["1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(rng.uniform(0.05, 0.25))
            p.send_signal(signal.SIGKILL)
            p.wait()
            kills += 1
            mid_pass += any(not (t.hget("ps:export:{x:emb}:meta", "state:%d" % s) or b"idle")
                            .startswith(b"idle") for s in range(2))
        assert feeder.is_alive(), "the kills did not land while the stream trained"
        p = subprocess.Popen(follow + ["50"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        feeder.join()
        for w in ws:
            out = w.communicate(timeout=60)[0].decode(errors="replace")
            assert w.returncode == 0, out

        def caught_up():
            return all(int(t.hget("ps:export:{x:emb}:meta", "version:%d" % s) or 0) >=
                       int(info_of(c, k)["version"]) for s, k in enumerate(keys))
        psserver.wait_until(caught_up, timeout=20, what="the followed export reaching the "
                            "table's final versions")
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=10)
        assert p.returncode == 0, err
    finally:
        feeder.join()
        for w in ws + [p]:
            if w.poll() is None:
                w.kill()
                w.wait()
    _, v = pull_np_key(c, "x:stream_events:0")
    assert int(v[0]) == len(lines)
    want = {}
    for k in keys:
        want.update(master_f16(c, k))
    evicted = sum(int(info_of(c, k)["evicted_capacity"]) for k in keys)
    got = target_rows(t, "x:emb")
    assert got == want
    gone = ever - set(want)
    assert evicted > 0 and len(gone) > 1000 and not gone & set(got)
    passes = [json.loads(x) for x in out.decode().splitlines() if x.startswith("{")]
    assert mid_pass >= 1 and passes[-1]["event"] == "done", (kills, mid_pass)
    print("exporter kills %d, inside a pass %d; rows %d, evicted %d" % (kills, mid_pass, len(got),
                                                                       evicted))


def info_of(c, key):
    v = c.execute_command("PS.INFO", key)
    return {k.decode(): x for k, x in zip(v[::2], v[1::2])}


def pull_np_key(c, key):
    version, data = c.execute_command("PS.PULL", key, "FORMAT", "F32")
    return version, np.frombuffer(data, dtype="<f4")
