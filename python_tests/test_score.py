"""PS.SCORE (docs/commands.md "PS.SCORE"): the logits of a batch of samples under the LR or
FM model of an embedding table, for serving what ps-train trains.

A small sparse LR and FM job is trained with ps-train; then build/ptools/ps_score_ref runs
the trainer's forward pass (ps_ctr_unique_build, the rows pulled as ps-train pulls them,
ps_ctr_predict and its linear_logit) on the parameters the server holds, and PS.SCORE on
the same batch must answer the same logits bit for bit -- on the master and on a replica
(replication lag = freshness), ids absent from the table included (they read as a pull
answers them). A 3-shard job is scored by libps psScore (rows pulled per shard, the same
kernel client-side): the same bits again. PS.SCORE changes nothing (DEBUG DIGEST-VALUE),
runs under a read-only ACL role, and refuses bad input with clear errors.

MODEL MLP: a small ps-train MLP job (--fields 8 --hidden 16); ps_score_ref runs its forward
pass (ps_ctr_predict, whose input is pooled by the common kernel) and PS.SCORE MODEL MLP must
answer the trainer's pooled inputs bit for bit, on the master, a replica and (psScorePool, the
rows pulled per shard) a 3-shard job; redis_ps.score.mlp_forward finishes the pass with numpy
from the job's dense tensors, within a tolerance of the trainer's probabilities."""

import os
import struct

import numpy as np
import pytest

import psserver
from pshelpers import PS_TRAIN, run_gen_ctr, run_ps_train as run, run_tool
from test_train_cluster import cluster  # noqa: F401 (3 masters, no replicas)
from test_train_standalone import result_line

GEN = ["--samples", 8000, "--test-samples", 1000, "--fields", 8, "--vocab", 30, "--seed", 11]
NSCORE = 300  # samples of the test file scored


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """(train path, scoring path, test path): gen-ctr data; the scoring file is the first test
    lines, two samples of three features per field, samples with ids no push ever saw (absent from
    the table) and an empty sample."""
    if not os.path.exists(PS_TRAIN):
        pytest.fail("%s not found: run make client first" % PS_TRAIN, pytrace=False)
    d = tmp_path_factory.mktemp("score")
    prefix = str(d / "ctr")
    run_gen_ctr(["--out", prefix] + GEN)
    with open(prefix + ".test.libsvm") as f:
        lines = f.read().splitlines()[:NSCORE - 5]
    # Two samples with three features in every field (the features of three test lines, the
    # values scaled): an MLP field's float32 sum then depends on its order of additions.
    for scales in ((0.3, -1.7, 2.9), (1.0, 1e-3, -4.05)):
        lines.append("1 " + " ".join("%s:%.6g" % (tok.split(":")[0], float(tok.split(":")[1]) * sc)
                                     for sc, line in zip(scales, lines[1:4])
                                     for tok in line.split()[1:]))
    lines += ["1 9999999991:1 9999999992:0.5", "0", "0 9999999993:-2.25 " + lines[0].split(" ", 1)[1]]
    score = str(d / "score.libsvm")
    with open(score, "w") as f:
        f.write("\n".join(lines) + "\n")
    return prefix + ".train.libsvm", score, prefix + ".test.libsvm"


MLP_FIELDS, MLP_HIDDEN = 8, "16"    # the MLP job's --fields (GEN's) and --hidden


def train(addr, job, model, data, shards):
    train_path, _, test_path = data
    extra = ["--dim", 4, "--fields", MLP_FIELDS, "--hidden", MLP_HIDDEN] if model == "mlp" else []
    p = run(["run", "--addr", addr, "--job", job, "--model", model, "--train", train_path,
             "--test", test_path,
             "--task-bytes", 100000, "--epochs", 1, "--table-lr", 0.1, "--seed", 3,
             "--workers", 1, "--progress", "none", "--table-shards", shards] + extra)
    return result_line(p.out)


def reference(addr, job, model, shards, data, tmp_path):
    """Runs ps_score_ref: the trainer's forward pass; returns a dict of the batch and results."""
    prefix = str(tmp_path / ("%s.%s" % (job, model)))
    extra = [MLP_FIELDS, MLP_HIDDEN] if model == "mlp" else []
    rc, js, err = run_tool("ps_score_ref", addr, job, model, shards, data[1], NSCORE, prefix,
                           *extra)
    assert rc == 0 and js and js["ok"], (rc, js, err)
    out = {"json": js}
    exts = ("counts", "ids", "vals", "fields", "x", "p", "dense", "psx") if model == "mlp" \
        else ("counts", "ids", "vals", "bias", "z", "p", "psz")
    for ext in exts:
        with open(prefix + "." + ext, "rb") as f:
            out[ext] = f.read()
    assert len(out["counts"]) == 4 * NSCORE and js["samples"] == NSCORE
    return out


def score(r, key, ref, model, *extra):
    bias = struct.unpack("<f", ref["bias"])[0]
    return r.execute_command("PS.SCORE", key, "MODEL", model.upper(), "COUNTS", ref["counts"],
                             "IDS", ref["ids"], "VALS", ref["vals"], "BIAS", repr(bias), *extra)


def shard_key(r, job):
    keys = [k.decode() for k in r.keys(job + ":emb:*")]
    assert len(keys) == 1, keys
    return keys[0]


@pytest.mark.parametrize("model", ["lr", "fm"])
def test_score_is_the_trainers_forward_pass_bit_for_bit_on_master_and_replica(
        make_server, make_replica, data, model, tmp_path):
    master = make_server()
    replica = make_replica(master)
    job = "sc" + model
    res = train(master.addr, job, model, data, 1)
    assert int(res["table_rows"]) > 100, res
    r, rr = master.client(), replica.client()
    key = shard_key(r, job)
    ref = reference(master.addr, job, model, 1, data, tmp_path)
    z = np.frombuffer(ref["z"], dtype="<f8")
    assert np.all(np.isfinite(z)) and np.std(z) > 0.1, z[:10]   # a trained, varied model
    version = int(dict(zip(*[iter(r.execute_command("PS.INFO", key))] * 2))[b"version"])
    digest = r.execute_command("DEBUG", "DIGEST-VALUE", key)
    rep = score(r, key, ref, model)
    assert rep[0] == version and rep[1] == ref["z"]      # bit for bit
    # The trainer's probabilities are the float32 sigmoid of those logits.
    p = (1.0 / (1.0 + np.exp(-z))).astype("<f4")
    assert p.tobytes() == ref["p"]
    # psScore on the 1-shard table sends PS.SCORE: the same bits.
    assert ref["psz"] == ref["z"]
    # FORMAT VALUES: the same doubles as numbers.
    vals = score(r, key, ref, model, "FORMAT", "VALUES")[1]
    assert [float(v) for v in vals] == list(z)
    # Nothing changed: no row, no version, no counter that is persisted.
    assert r.execute_command("DEBUG", "DIGEST-VALUE", key) == digest
    # The replica serves the same bits once it has the master's writes.
    psserver.wait_for_replication(master, [replica])
    rep2 = score(rr, key, ref, model)
    assert rep2 == rep
    # libps connected to the replica: psScore (PS.SCORE there) and the trainer's pass on
    # the replica's rows give the same bits again.
    calls = rr.info("commandstats")["cmdstat_ps.score"]["calls"]
    ref_r = reference(replica.addr, job, model, 1, data, tmp_path)
    assert ref_r["z"] == ref["z"] and ref_r["psz"] == ref["z"]
    assert rr.info("commandstats")["cmdstat_ps.score"]["calls"] == calls + 1
    # Train on: the replica answers the newer parameters after replication (freshness).
    train(master.addr, job + "b", model, data, 1)   # another job: a busy server meanwhile
    r.execute_command("PS.PUSHGRAD", key, struct.pack("<%df" % (int(ref["json"]["dim"]),),
                      *([0.25] * int(ref["json"]["dim"]))), "IDS", ref["ids"][:8])
    psserver.wait_for_replication(master, [replica])
    new_m, new_r = score(r, key, ref, model), score(rr, key, ref, model)
    assert new_m == new_r and new_m[0] == version + 1 and new_m[1] != rep[1]


@pytest.mark.parametrize("model", ["lr", "fm"])
def test_psscore_on_a_sharded_table_matches_the_trainer_bit_for_bit(server, data, model,
                                                                     tmp_path):
    job = "sh" + model
    train(server.addr, job, model, data, 3)
    ref = reference(server.addr, job, model, 3, data, tmp_path)
    assert ref["psz"] == ref["z"]


def le32(*v):
    return struct.pack("<%dI" % len(v), *v)


def le64(*v):
    return struct.pack("<%dQ" % len(v), *v)


def f32(*v):
    return struct.pack("<%df" % len(v), *v)


def test_score_by_hand_absent_ids_and_unknown_zeros(r):
    """Hand-checked FM logits; absent ids read as their initial values, or zeros."""
    r.execute_command("PS.CREATE", "fm", "EMBEDDING", "DIM", 3, "OPTIM", "SGD", "LR", 1)
    # rows: id 1 -> -[0.5, 1, 2], id 2 -> -[0.25, -1, 0.5] (SGD lr 1 from zeros)
    r.execute_command("PS.PUSHGRAD", "fm", f32(0.5, 1, 2, 0.25, -1, 0.5), "IDS", le64(1, 2))
    rep = r.execute_command("PS.SCORE", "fm", "MODEL", "FM", "COUNTS", le32(2, 1, 0),
                            "IDS", le64(1, 2, 7), "VALS", f32(1, 2, 3), "BIAS", "0.5",
                            "FORMAT", "VALUES")
    assert rep[0] == 1
    # sample 0: w = -0.5 - 0.5 = -1; v1 = (-1,-2), v2x = (2,-1): s = (1,-3), sq = 5 + 5,
    # pair = 10 -> z = 0.5 - 1 + 0.5 * (10 - 10) = -0.5. sample 1: id 7 absent (zeros)
    # -> 0.5. sample 2: no features -> the bias.
    assert [float(v) for v in rep[1]] == [-0.5, 0.5, 0.5]
    # An INIT UNIFORM table: an absent id reads its initial values, as PS.PULL answers.
    r.execute_command("PS.CREATE", "u", "EMBEDDING", "DIM", 2, "INIT", "UNIFORM", -1, 1,
                      "SEED", 5)
    row = np.frombuffer(r.execute_command("PS.PULL", "u", "IDS", le64(9))[1], dtype="<f4")
    z = r.execute_command("PS.SCORE", "u", "MODEL", "fm", "COUNTS", le32(1), "IDS", le64(9))
    assert np.frombuffer(z[1], dtype="<f8")[0] == np.float64(row[0])   # pair - sq = 0
    r.execute_command("PS.CONFIG", "u", "UNKNOWN", "ZEROS")
    z = r.execute_command("PS.SCORE", "u", "MODEL", "fm", "COUNTS", le32(1), "IDS", le64(9))
    assert np.frombuffer(z[1], dtype="<f8")[0] == 0.0
    assert int(dict(zip(*[iter(r.execute_command("PS.INFO", "u"))] * 2))[b"rows"]) == 0


def test_bad_input_is_refused_with_clear_errors_and_changes_nothing(r):
    r.execute_command("PS.CREATE", "t1", "EMBEDDING", "DIM", 1)
    r.execute_command("PS.CREATE", "t3", "EMBEDDING", "DIM", 3)
    r.execute_command("PS.PUSHGRAD", "t3", f32(1, 2, 3), "IDS", le64(4))
    r.execute_command("PS.CREATE", "dense", "SHAPE", 4)
    digests = {k: r.execute_command("DEBUG", "DIGEST-VALUE", k) for k in ("t1", "t3", "dense")}
    good = ["COUNTS", le32(1), "IDS", le64(4)]
    cases = [
        (["t3", "MODEL", "LR"] + good, "ERR MODEL LR needs a table of dim 1; this table has dim 3"),
        (["t1", "MODEL", "FM"] + good, "ERR MODEL FM needs a table of dim >= 2"),
        (["t3", "MODEL", "GBDT"] + good, "ERR unknown MODEL 'GBDT' (LR, FM, MLP)"),
        (["t3", "COUNTS", le32(1), "IDS", le64(4), "VALS", f32(1)],
         "ERR PS.SCORE needs MODEL, COUNTS and IDS"),
        (["t3", "MODEL", "FM", "IDS", le64(4)], "wrong number of arguments"),
        (["t3", "MODEL", "FM", "COUNTS", le32(2), "IDS", le64(4)],
         "ERR IDS has 8 bytes; COUNTS sum to 2 features, which need 16 bytes"),
        (["t3", "MODEL", "FM", "COUNTS", b"\x01\x00\x00", "IDS", le64(4)],
         "ERR COUNTS must be a non-empty blob of little-endian uint32"),
        (["t3", "MODEL", "FM", "COUNTS", le32(1), "IDS", le64(4) + b"\x00"],
         "ERR IDS has 9 bytes"),
        (["t3", "MODEL", "FM", "COUNTS", le32(1), "IDS", le64(4), "VALS", f32(1, 2)],
         "ERR VALS has 8 bytes; 1 features need 4 bytes"),
        (["t3", "MODEL", "FM"] + good + ["BIAS", "1e300"], "ERR BIAS must be a finite float32"),
        (["t3", "MODEL", "FM"] + good + ["BIAS", "x"], "ERR BIAS"),
        (["t3", "MODEL", "FM"] + good + ["FORMAT", "F16"], "ERR unknown FORMAT 'F16'"),
        (["t3", "MODEL", "FM"] + good + ["MODEL", "FM"], "ERR option 'MODEL' given more than once"),
        (["t3", "MODEL", "FM"] + good + ["NOPE", "1"], "ERR unknown option 'NOPE'"),
        (["dense", "MODEL", "FM"] + good, "WRONGTYPE Operation against a key holding the wrong kind"),
        (["nokey", "MODEL", "FM"] + good, "ERR no such key"),
    ]
    for args, want in cases:
        with pytest.raises(Exception) as e:
            r.execute_command("PS.SCORE", *args)
        assert str(e.value).startswith(want.replace("ERR ", "", 1)), (args[:3], str(e.value))
    # The request's size is bounded by ps.max-pull-bytes, counted before anything is read.
    r.config_set("ps.max-pull-bytes", 4096)
    n = 300   # 300 ids x dim 3 x 4 bytes > 4096
    with pytest.raises(Exception) as e:
        r.execute_command("PS.SCORE", "t3", "MODEL", "FM", "COUNTS", le32(n),
                          "IDS", le64(*range(n)))
    assert "exceeds ps.max-pull-bytes (4096)" in str(e.value), str(e.value)
    for k, d in digests.items():
        assert r.execute_command("DEBUG", "DIGEST-VALUE", k) == d, k
    assert r.dbsize() == 3


def test_a_read_only_acl_role_can_score_and_the_command_is_readonly(server, r):
    r.execute_command("PS.CREATE", "job:emb", "EMBEDDING", "DIM", 2)
    info = r.execute_command("COMMAND", "INFO", "PS.SCORE")
    flags = info["ps.score"]["flags"] if isinstance(info, dict) else info[0][2]
    flags = {f.decode() if isinstance(f, bytes) else f for f in flags}
    assert "readonly" in flags and "write" not in flags, flags
    r.execute_command("ACL", "SETUSER", "serve", "on", ">pw", "resetkeys", "%R~job:*",
                      "-@all", "+ps.score", "+ps.pull")
    c = server.client()
    c.execute_command("AUTH", "serve", "pw")
    rep = c.execute_command("PS.SCORE", "job:emb", "MODEL", "FM", "COUNTS", le32(1),
                            "IDS", le64(3))
    assert rep[0] == 0 and np.frombuffer(rep[1], dtype="<f8")[0] == 0.0
    rep = c.execute_command("PS.SCORE", "job:emb", "MODEL", "MLP", "COUNTS", le32(1),
                            "IDS", le64(3), "FIELDS", le32(1), "FIELDCOUNT", 2)
    assert rep[0] == 0 and rep[1] == f32(0, 0, 0, 0)
    with pytest.raises(Exception) as e:
        c.execute_command("PS.PUSHGRAD", "job:emb", f32(1, 1), "IDS", le64(3))
    assert "no permissions" in str(e.value), str(e.value)


def test_a_cluster_user_scores_a_sharded_job_bit_for_bit(cluster, data, tmp_path):
    """A 3-shard FM job on a 3-master cluster: psScore pulls each shard's rows from its
    master and gives the trainer's logits; PS.SCORE on one shard key, sent to the master
    that holds it, scores the ids of that shard (a 1-feature FM sample is b + w x). The same
    for an MLP job's pooled inputs (psScorePool, PS.SCORE MODEL MLP)."""
    seeds = ",".join(n.addr for n in cluster.nodes)
    train(seeds, "clfm", "fm", data, 3)
    ref = reference(seeds, "clfm", "fm", 3, data, tmp_path)
    assert ref["psz"] == ref["z"]
    bias = struct.unpack("<f", ref["bias"])[0]
    ids = np.frombuffer(ref["ids"], dtype="<u8")[:20]
    nodes = set()
    for m in cluster.masters():
        c = m.client()
        for key in [k.decode() for k in c.keys("clfm:emb:*")]:
            nodes.add(m.port)
            for i in ids:
                blob = struct.pack("<Q", int(i))
                row = np.frombuffer(c.execute_command("PS.PULL", key, "IDS", blob)[1], "<f4")
                z = c.execute_command("PS.SCORE", key, "MODEL", "FM", "COUNTS", le32(1),
                                      "IDS", blob, "VALS", f32(0.5), "BIAS", repr(bias))[1]
                want = np.float64(np.float32(bias)) + np.float64(row[0]) * 0.5
                assert np.frombuffer(z, "<f8")[0] == want
    assert len(nodes) >= 2, nodes    # the shards live on different masters
    # A 3-shard MLP job on the same cluster (sharing its start-up): psScorePool gives the
    # trainer's pooled inputs; PS.SCORE MODEL MLP on one shard key pools a 1-feature sample
    # as x * row in its field.
    train(seeds, "clmlp", "mlp", data, 3)
    ref = reference(seeds, "clmlp", "mlp", 3, data, tmp_path)
    assert ref["psx"] == ref["x"]
    for m in cluster.masters():
        c = m.client()
        for key in [k.decode() for k in c.keys("clmlp:emb:*")]:
            for i in np.frombuffer(ref["ids"], dtype="<u8")[:10]:
                blob = struct.pack("<Q", int(i))
                row = np.frombuffer(c.execute_command("PS.PULL", key, "IDS", blob)[1], "<f4")
                x = c.execute_command("PS.SCORE", key, "MODEL", "MLP", "COUNTS", le32(1),
                                      "IDS", blob, "VALS", f32(-0.75), "FIELDS", le32(1),
                                      "FIELDCOUNT", 2)[1]
                assert x == np.concatenate([np.zeros_like(row), np.float32(-0.75) * row]).tobytes()


# ---- MODEL MLP: the pooled embedding input -------------------------------------------------

def score_mlp(r, key, ref, *extra):
    return r.execute_command("PS.SCORE", key, "MODEL", "MLP", "COUNTS", ref["counts"],
                             "IDS", ref["ids"], "VALS", ref["vals"], "FIELDS", ref["fields"],
                             "FIELDCOUNT", MLP_FIELDS, *extra)


def dense_tensors(ref):
    """The job's dense tensors W0, b0, ... (ps_score_ref's .dense) as mlp_forward takes them."""
    sizes, flat, at, out = ref["json"]["sizes"], np.frombuffer(ref["dense"], "<f4"), 0, {}
    for layer in range(len(sizes) - 1):
        n_w = sizes[layer + 1] * sizes[layer]
        out["W%d" % layer] = flat[at:at + n_w].reshape(sizes[layer + 1], sizes[layer])
        out["b%d" % layer] = flat[at + n_w:at + n_w + sizes[layer + 1]]
        at += n_w + sizes[layer + 1]
    assert at == len(flat)
    return out


def test_mlp_pooled_inputs_are_the_trainers_bit_for_bit_on_master_and_replica(
        make_server, make_replica, data, tmp_path):
    import pshelpers_pkg  # noqa: F401  (the tree's redis_ps)
    from redis_ps import score as pscore
    master = make_server()
    replica = make_replica(master)
    res = train(master.addr, "scmlp", "mlp", data, 1)
    assert int(res["table_rows"]) > 100, res
    r, rr = master.client(), replica.client()
    key = shard_key(r, "scmlp")
    ref = reference(master.addr, "scmlp", "mlp", 1, data, tmp_path)
    dim, nf = int(ref["json"]["dim"]), MLP_FIELDS
    x = np.frombuffer(ref["x"], "<f4").reshape(NSCORE, nf, dim)
    assert np.std(x) > 0.01 and np.all(np.isfinite(x))       # trained, varied rows
    assert np.all(x[NSCORE - 2] == 0)                          # the empty sample: zeros
    version = int(dict(zip(*[iter(r.execute_command("PS.INFO", key))] * 2))[b"version"])
    digest = r.execute_command("DEBUG", "DIGEST-VALUE", key)
    rep = score_mlp(r, key, ref)
    assert rep[0] == version and rep[1] == ref["x"]           # bit for bit
    assert score_mlp(r, key, ref, "FORMAT", "F32") == rep
    vals = score_mlp(r, key, ref, "FORMAT", "VALUES")[1]
    assert np.array([float(v) for v in vals], np.float32).tobytes() == ref["x"]
    assert ref["psx"] == ref["x"]                              # libps psScorePool (1 shard)
    assert r.execute_command("DEBUG", "DIGEST-VALUE", key) == digest
    # The numpy kernel on the pulled rows: the same bits.
    ids = np.frombuffer(ref["ids"], "<u8")
    rows = np.frombuffer(r.execute_command("PS.PULL", key, "IDS", ref["ids"])[1],
                         "<f4").reshape(-1, dim)
    counts = np.frombuffer(ref["counts"], "<u4")
    fields = np.frombuffer(ref["fields"], "<u4")
    vals32 = np.frombuffer(ref["vals"], "<f4")
    assert pscore.pool(rows, counts, fields, nf, vals32).tobytes() == ref["x"]
    # The test can fail: the three-features-a-field samples summed in the reverse order give
    # other bits (float32 additions do not reassociate).
    at = int(counts[:NSCORE - 5].sum())
    for s in (NSCORE - 5, NSCORE - 4):
        c = int(counts[s])
        sl = slice(at, at + c)
        rev = pscore.pool(rows[sl][::-1], [c], fields[sl][::-1], nf, vals32[sl][::-1])
        assert rev.tobytes() != x[s].tobytes()
        at += c
    assert len(ids) == len(fields) and set(np.unique(fields)) <= set(range(nf))
    # mlp_forward: the trainer's probabilities within a tolerance (numpy vs OpenBLAS sums).
    p = pscore.mlp_forward(x, dense_tensors(ref))
    want = np.frombuffer(ref["p"], "<f4").astype(np.float64)
    assert np.max(np.abs(p - want)) < 1e-5, np.max(np.abs(p - want))
    assert np.std(want) > 0.01                                 # the test can tell models apart
    # The replica answers the same bits once it has the master's writes, and psScorePool
    # through it (PS.SCORE there) the trainer's bits on its rows.
    psserver.wait_for_replication(master, [replica])
    assert score_mlp(rr, key, ref) == rep
    calls = rr.info("commandstats")["cmdstat_ps.score"]["calls"]
    ref_r = reference(replica.addr, "scmlp", "mlp", 1, data, tmp_path)
    assert ref_r["x"] == ref["x"] and ref_r["psx"] == ref["x"]
    assert rr.info("commandstats")["cmdstat_ps.score"]["calls"] == calls + 1
    # A push moves the served inputs, on the master and then the replica.
    r.execute_command("PS.PUSHGRAD", key, struct.pack("<%df" % dim, *([0.25] * dim)),
                      "IDS", ref["ids"][:8])
    psserver.wait_for_replication(master, [replica])
    new_m, new_r = score_mlp(r, key, ref), score_mlp(rr, key, ref)
    assert new_m == new_r and new_m[0] == version + 1 and new_m[1] != rep[1]


def test_mlp_psscorepool_on_a_sharded_table_matches_the_trainer_bit_for_bit(server, data,
                                                                            tmp_path):
    import pshelpers_pkg  # noqa: F401
    import redis_ps
    train(server.addr, "shmlp", "mlp", data, 3)
    ref = reference(server.addr, "shmlp", "mlp", 3, data, tmp_path)
    assert ref["psx"] == ref["x"]
    # redis_ps on the 3-shard table: the rows pulled and pool() run in numpy, the same bits.
    dim = int(ref["json"]["dim"])
    t = redis_ps.Embedding(redis_ps.connect(server.addr), "shmlp:emb", dim, 3)
    got = t.score(np.frombuffer(ref["counts"], "<u4"), np.frombuffer(ref["ids"], "<u8"),
                  np.frombuffer(ref["vals"], "<f4"), model="mlp",
                  fields=np.frombuffer(ref["fields"], "<u4"), nfields=MLP_FIELDS)
    assert got.dtype == np.float32 and got.shape == (NSCORE, MLP_FIELDS, dim)
    assert got.tobytes() == ref["x"]


def test_mlp_by_hand_and_bad_input(r):
    """Hand-checked pooled inputs; every MLP error, each changing nothing."""
    r.execute_command("PS.CREATE", "m", "EMBEDDING", "DIM", 2, "OPTIM", "SGD", "LR", 1)
    # rows (SGD lr 1 from zeros): id 1 -> [-1, -2], id 2 -> [-0.5, 4], id 3 -> [-0.25, -8]
    r.execute_command("PS.PUSHGRAD", "m", f32(1, 2, 0.5, -4, 0.25, 8), "IDS", le64(1, 2, 3))
    # sample 0: ids 1 (field 1, x 2), 2 (field 0, x 3), 3 (field 1, x -1); sample 1: empty;
    # sample 2: id 7 (absent: zeros) in field 2.
    rep = r.execute_command("PS.SCORE", "m", "MODEL", "mlp", "COUNTS", le32(3, 0, 1),
                            "IDS", le64(1, 2, 3, 7), "VALS", f32(2, 3, -1, 5),
                            "FIELDS", le32(1, 0, 1, 2), "FIELDCOUNT", 3)
    assert rep[0] == 1
    got = np.frombuffer(rep[1], "<f4").reshape(3, 3, 2)
    want = np.zeros((3, 3, 2), np.float32)
    want[0, 0] = [-1.5, 12]
    want[0, 1] = [-2 + 0.25, -4 + 8]
    assert got.tobytes() == want.tobytes()
    # No VALS: every value 1.
    rep = r.execute_command("PS.SCORE", "m", "MODEL", "MLP", "COUNTS", le32(2), "IDS",
                            le64(1, 3), "FIELDS", le32(0, 0), "FIELDCOUNT", 1, "FORMAT", "VALUES")
    assert [float(v) for v in rep[1]] == [-1.25, -10.0]
    r.execute_command("PS.CREATE", "dense", "SHAPE", 4)
    digests = {k: r.execute_command("DEBUG", "DIGEST-VALUE", k) for k in ("m", "dense")}
    base = ["m", "MODEL", "MLP", "COUNTS", le32(2), "IDS", le64(1, 2)]
    good = base + ["FIELDS", le32(0, 1), "FIELDCOUNT", 2]
    cases = [
        (base + ["FIELDCOUNT", 2], "ERR MODEL MLP needs FIELDS and FIELDCOUNT"),
        (base + ["FIELDS", le32(0, 1)], "ERR MODEL MLP needs FIELDS and FIELDCOUNT"),
        (base + ["FIELDS", le32(0, 1, 0), "FIELDCOUNT", 2],
         "ERR FIELDS has 12 bytes; 2 features need 8 bytes of little-endian uint32 field ids"),
        (base + ["FIELDS", le32(0, 2), "FIELDCOUNT", 2],
         "ERR FIELDS: feature 1 has field 2; FIELDCOUNT 2 allows 0..1"),
        (base + ["FIELDS", le32(0, 1), "FIELDCOUNT", 0],
         "ERR FIELDCOUNT must be an integer in 1..256"),
        (base + ["FIELDS", le32(0, 1), "FIELDCOUNT", 257],
         "ERR FIELDCOUNT must be an integer in 1..256"),
        (base + ["FIELDS", le32(0, 1), "FIELDCOUNT", "x"], "ERR FIELDCOUNT must be an integer"),
        (good + ["BIAS", "0.5"], "ERR MODEL MLP takes no BIAS"),
        (good + ["FORMAT", "F64"], "ERR FORMAT F64 does not go with MODEL MLP"),
        (good + ["FORMAT", "F16"], "ERR unknown FORMAT 'F16'"),
        (good + ["FIELDS", le32(0, 1)], "ERR option 'FIELDS' given more than once"),
        (["m", "MODEL", "FM", "COUNTS", le32(2), "IDS", le64(1, 2), "FIELDS", le32(0, 1)],
         "ERR FIELDS and FIELDCOUNT are MODEL MLP's"),
        (["m", "MODEL", "FM", "COUNTS", le32(2), "IDS", le64(1, 2), "FIELDCOUNT", 2],
         "ERR FIELDS and FIELDCOUNT are MODEL MLP's"),
        (["m", "MODEL", "FM", "COUNTS", le32(2), "IDS", le64(1, 2), "FORMAT", "F32"],
         "ERR FORMAT F32 does not go with MODEL FM"),
        (["m", "MODEL", "MLP", "COUNTS", le32(3), "IDS", le64(1, 2), "FIELDS", le32(0, 1),
          "FIELDCOUNT", 2], "ERR IDS has 16 bytes; COUNTS sum to 3 features"),
        (["dense"] + good[1:], "WRONGTYPE"),
        (["nokey"] + good[1:], "ERR no such key"),
    ]
    for args, want_err in cases:
        with pytest.raises(Exception) as e:
            r.execute_command("PS.SCORE", *args)
        assert str(e.value).startswith(want_err.replace("ERR ", "", 1)), (args[:3], str(e.value))
    # The bound counts the pooled reply (samples x fields x dim) before anything is read:
    # 100 empty samples x 256 fields x dim 2 x 4 bytes = 204800 > 65536, no row read at all.
    r.config_set("ps.max-pull-bytes", 65536)
    with pytest.raises(Exception) as e:
        r.execute_command("PS.SCORE", "m", "MODEL", "MLP", "COUNTS", le32(*[0] * 100),
                          "IDS", b"", "FIELDS", b"", "FIELDCOUNT", 256)
    assert "exceeds ps.max-pull-bytes (65536)" in str(e.value), str(e.value)
    assert "100 samples x 256 fields" in str(e.value), str(e.value)
    # ... and 32 bytes a value with FORMAT VALUES (3 x 256 x 2 x 32 = 49152).
    r.config_set("ps.max-pull-bytes", 32768)
    ok = ["m", "MODEL", "MLP", "COUNTS", le32(0, 0, 0), "IDS", b"", "FIELDS", b"",
          "FIELDCOUNT", 256]
    assert len(r.execute_command("PS.SCORE", *ok)[1]) == 3 * 256 * 2 * 4
    with pytest.raises(Exception) as e:
        r.execute_command("PS.SCORE", *ok, "FORMAT", "VALUES")
    assert "exceeds ps.max-pull-bytes (32768)" in str(e.value), str(e.value)
    for k, d in digests.items():
        assert r.execute_command("DEBUG", "DIGEST-VALUE", k) == d, k
    assert r.dbsize() == 2

