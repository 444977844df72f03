"""ps-train sparse CTR jobs (--model lr|fm|mlp) end to end: the rows live in a sharded
embedding table on the server (libps psEmbed), the dense tensors in ordinary tensors, and
the task stream hands out byte ranges of the train file. A short two-worker run on data
from `ps-gen-ctr` reaches an AUC bound well above 0.5, on one server and on a
3-master cluster with the table's shards on different masters; every line of the train
file is trained once per epoch, and every table shard's version equals the pushes the
workers saw acknowledged (ACKED_TABLE lines: no push lost or applied twice). The job
records its sparse settings: a second init asking differently is refused with exit 2."""

import struct
import re

import pytest

from pshelpers import PS_TRAIN, run_gen_ctr, run_ps_train as run
from test_train_cluster import cluster  # noqa: F401 (3 masters, no replicas)
from test_train_standalone import result_line

# gen-ctr data: 8 fields of 30 ids each from a planted FM (truth test AUC 0.81 with this
# seed). 2 epochs, 2 workers, measured: FM 0.788, LR 0.730 (table lr 0.1).
GEN = ["--samples", 30000, "--test-samples", 5000, "--fields", 8, "--vocab", 30, "--seed", 5]
TRAIN_LINES = 30000
BOUND = {"lr": 0.70, "fm": 0.75, "mlp": 0.65}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """(train path, test path, truth dict) of the module's generated data."""
    import os
    if not os.path.exists(PS_TRAIN):
        pytest.fail("%s not found: run make client first" % PS_TRAIN, pytrace=False)
    d = tmp_path_factory.mktemp("ctr")
    prefix = str(d / "ctr")
    run_gen_ctr(["--out", prefix] + GEN)
    with open(prefix + ".truth") as f:
        truth = dict(kv.split("=", 1) for kv in f.read().split()[1:])
    return prefix + ".train.libsvm", prefix + ".test.libsvm", truth


def sparse_args(addr, job, model, data, *extra):
    train, test, _ = data
    return (["--addr", addr, "--job", job, "--model", model, "--train", train, "--test", test,
             "--task-bytes", 100000, "--epochs", 2, "--table-lr", 0.1, "--seed", 3]
            + list(extra))


def acked_tables(out):
    """The ACKED_TABLE lines of a run's output as dicts (shard_pushes a list of ints)."""
    res = []
    for m in re.finditer(r"^ACKED_TABLE (.*)$", out, re.M):
        d = dict(kv.split("=", 1) for kv in m.group(1).split())
        d["shard_pushes"] = [int(x) for x in d["shard_pushes"].split(",")]
        res.append(d)
    return res


def shard_versions(clients_for_key, job):
    """{shard index: (key, version)} of the job's table, each read where 'clients_for_key'
    says the key lives."""
    out = {}
    for key, client in clients_for_key:
        m = re.match(r"^%s:emb:(\d+)\{\d+\}$" % re.escape(job), key)
        if not m:
            continue
        info = client.execute_command("PS.INFO", key)
        d = dict(zip(info[::2], info[1::2]))
        assert d[b"type"] == b"embedding", d
        out[int(m.group(1))] = (key, int(d[b"version"]))
    return out


def check_exactly_once(out, versions, nshards):
    """Every shard's version equals the sum of the workers' acknowledged pushes to it."""
    acked = acked_tables(out)
    assert len(acked) == 2, out
    assert sorted(versions) == list(range(nshards)), versions
    for s, (key, v) in versions.items():
        want = sum(a["shard_pushes"][s] for a in acked)
        assert want > 0 and v == want, (key, v, want)


@pytest.mark.parametrize("model", ["lr", "fm"])
def test_two_workers_reach_the_auc_bound_and_every_table_push_counts_once(server, data, model):
    r = server.client()
    p = run(["run", "--workers", 2, "--progress", "line", "--interval-ms", 200,
             "--min-auc", BOUND[model]] + sparse_args(server.addr, "s" + model, model, data))
    res = result_line(p.out)
    assert float(res["test_auc"]) >= BOUND[model], p.out
    assert float(res["test_logloss"]) < 0.65, p.out
    # Every line of the train file once per epoch, every task acked once.
    assert int(res["samples"]) == 2 * TRAIN_LINES, p.out
    cfg = {k.decode(): v.decode() for k, v in r.hgetall("psjob:{s%s}:config" % model).items()}
    assert cfg["model"] == model and int(cfg["tasks"]) > 2 * 5, cfg
    assert r.hlen("psjob:{s%s}:done" % model) == int(cfg["tasks"])
    assert r.xpending("psjob:{s%s}:tasks" % model, "workers")["pending"] == 0
    # The table: 8 fields x 30 ids at most, admitted at the first push.
    assert 200 <= int(res["table_rows"]) <= 240, res
    assert abs(int(res["distinct_ids"]) - int(res["table_rows"])) <= 5, res
    keys = [k.decode() for k in r.keys("s%s:*" % model)]
    versions = shard_versions([(k, r) for k in keys], "s" + model)
    check_exactly_once(p.out, versions, 4)
    assert sum(v for _, v in versions.values()) == int(res["table_version"])
    # eval sees the same model.
    ev = run(["eval", "--addr", server.addr, "--job", "s" + model]).out
    assert "test_auc=%s" % res["test_auc"] in ev, (ev, res)
    # status lists every shard with its version; snapshots are refused for tables.
    st = run(["status", "--addr", server.addr, "--job", "s" + model]).out
    for key, v in versions.values():
        assert re.search(r"^  %s +rows +\d+ version +%d " % (re.escape(key), v), st, re.M), st
    snap = run(["snapshot", "--addr", server.addr, "--job", "s" + model, "--at", "x"],
               check=False)
    assert snap.returncode == 1 and "no snapshots" in snap.out, snap.out


@pytest.mark.parametrize("overlap", [0, 1])
def test_overlap_sends_the_next_batchs_row_pull_before_this_batchs_push(server, data, overlap):
    """--overlap 1 pipelines the sparse worker by one batch: the rows of batch i+1 are
    pulled before batch i's push is sent, so when a push reaches the server two pulls
    more than pushes went before it (except at a task's last batch); --overlap 0
    alternates pull, push. The SLOWLOG (threshold 0) records every command in the order
    the server ran it."""
    r = server.client()
    r.config_set("slowlog-log-slower-than", 0)
    r.config_set("slowlog-max-len", 100000)
    job = "sov%d" % overlap
    args = sparse_args(server.addr, job, "fm", data)
    args[args.index("--epochs") + 1] = 1
    args[args.index("--task-bytes") + 1] = 1000000     # a few tasks of many batches
    p = run(["run", "--workers", 1, "--progress", "line", "--table-shards", 1,
             "--overlap", overlap] + args)
    assert "overlap %d" % overlap in p.out, p.out
    res = result_line(p.out)
    assert int(res["samples"]) == TRAIN_LINES, p.out
    seq = []
    for e in reversed(r.slowlog_get(100000)):
        words = e["command"].split(b" ", 2)
        if len(words) > 1 and words[0] in (b"PS.PULL", b"PS.PUSHGRAD") and \
                words[1].startswith(job.encode() + b":emb:"):
            seq.append(words[0].decode())
    pushes = seq.count("PS.PUSHGRAD")
    assert pushes == int(res["table_version"]), res
    ahead = pulls = seen = 0
    for c in seq[:len(seq) - seq[::-1].index("PS.PUSHGRAD")]:   # eval's pulls come after
        if c == "PS.PULL":
            pulls += 1
            continue
        seen += 1
        ahead += pulls == seen + 1
    cfg = {k.decode(): v.decode() for k, v in r.hgetall("psjob:{%s}:config" % job).items()}
    if overlap:
        # every push but each task's last
        assert ahead == pushes - int(cfg["tasks"]), (ahead, pushes, cfg["tasks"], seq[:20])
    else:
        assert ahead == 0, seq[:20]
    versions = shard_versions([(k.decode(), r) for k in r.keys(job + ":*")], job)
    acked = acked_tables(p.out)
    assert len(acked) == 1 and acked[0]["shard_pushes"] == [versions[0][1]], (acked, versions)


def test_mlp_trains_embeddings_and_dense_layers_in_one_job(server, data):
    r = server.client()
    p = run(["run", "--workers", 2, "--progress", "none", "--dim", 4, "--hidden", 16,
             "--fields", 8] + sparse_args(server.addr, "smlp", "mlp", data))
    res = result_line(p.out)
    assert float(res["test_auc"]) >= BOUND["mlp"], p.out
    # The dense layers are tensors that every step pushed to.
    info = r.execute_command("PS.INFO", "smlp:W0:0")
    d = dict(zip(info[::2], info[1::2]))
    assert int(d[b"version"]) > 100, d


def test_admission_and_capacity_bound_the_table(server, data):
    p = run(["run", "--workers", 1, "--progress", "none", "--admit", 3, "--capacity", 100,
             "--table-shards", 2] + sparse_args(server.addr, "sadm", "fm", data))
    res = result_line(p.out)
    # CAPACITY 50 per shard: at most 50 rows each after a push.
    assert 0 < int(res["table_rows"]) <= 100, res
    assert int(res["rows_dropped"]) > 0, res       # first pushes of new ids
    assert int(res["rows_evicted"]) > 0, res
    assert int(res["distinct_ids"]) > int(res["table_rows"]), res


def test_ftrl_lr_job_creates_an_ftrl_table(server, data):
    r = server.client()
    run(["run", "--workers", 1, "--progress", "none", "--table-optim", "ftrl", "--l1", 1]
        + sparse_args(server.addr, "sftrl", "lr", data))
    key = [k for k in r.keys("sftrl:emb:*")][0]
    info = r.execute_command("PS.INFO", key)
    d = dict(zip(info[::2], info[1::2]))
    assert d[b"optimizer"].upper() == b"FTRL" and float(d[b"l1"]) == 1.0, d


def test_table_zero_frac_counts_the_exactly_zero_values_of_the_table(server, data):
    """eval and run's RESULT report table_zero_frac, the exactly-zero fraction of the
    table's values (a PS.SCANROWS of every shard): an FTRL LR whose L1 outweighs every
    gradient sum keeps every weight at 0; Adagrad's weights are not 0."""
    p = run(["run", "--workers", 1, "--progress", "none", "--table-optim", "ftrl",
             "--l1", 1e6] + sparse_args(server.addr, "szf", "lr", data))
    res = result_line(p.out)
    assert int(res["table_rows"]) >= 200 and float(res["table_zero_frac"]) == 1.0, res
    p = run(["run", "--workers", 1, "--progress", "none"]
            + sparse_args(server.addr, "szg", "lr", data))
    res = result_line(p.out)
    assert float(res["table_zero_frac"]) < 0.1, res
    ev = run(["eval", "--addr", server.addr, "--job", "szg"]).out
    assert "table_zero_frac=%s" % res["table_zero_frac"] in ev, ev


def test_unknown_zeros_creates_shards_that_answer_zeros_for_ids_without_a_row(server, data):
    """--unknown zeros (the baseline's UNKNOWN ZEROS) is recorded in the job and put on
    every table shard; a pull of an id that has no row answers zeros there; a second
    init with the other setting is refused."""
    r = server.client()
    base = sparse_args(server.addr, "sunk", "fm", data) + ["--admit", 255]
    run(["init"] + base + ["--unknown", "zeros"])
    assert r.hget("psjob:{sunk}:config", "unknown") == b"zeros"
    keys = sorted(r.keys("sunk:emb:*"))
    assert len(keys) == 4, keys
    for key in keys:
        info = r.execute_command("PS.INFO", key)
        assert dict(zip(info[::2], info[1::2]))[b"unknown"] == b"zeros", info
        _, rows = r.execute_command("PS.PULL", key, "IDS", struct.pack("<Q", 12345))
        assert len(rows) == 4 * 5 and rows == bytes(len(rows)), rows  # FM dim 4: 5 floats
    p = run(["init"] + base + ["--unknown", "init"], check=False)
    assert p.returncode == 2 and "--unknown init (job: zeros)" in p.out, p.out


def test_second_init_with_other_sparse_settings_is_refused_and_reset_recreates(server, data):
    r = server.client()
    base = sparse_args(server.addr, "sre", "fm", data)
    run(["init"] + base)
    for extra, needle in [(["--dim", 8], "--dim 8 (job: 4)"),
                          (["--table-optim", "ftrl", "--init-std", 0], "--table-optim ftrl"),
                          (["--admit", 2], "--admit 2 (job: 1)")]:
        p = run(["init"] + base + extra, check=False)
        assert p.returncode == 2 and needle in p.out, (extra, p.out)
    p = run(["init"] + base[:4] + ["--model", "lr", "--train", data[0]], check=False)
    assert p.returncode == 2 and "--model lr (job: fm)" in p.out, p.out
    # The same settings again continue the job.
    p = run(["init"] + base)
    assert "exists" in p.out and "continuing" in p.out, p.out
    p = run(["init", "--reset"] + base + ["--dim", 8])
    assert "deleted 4 table shards" in p.out, p.out
    assert r.hget("psjob:{sre}:config", "dim") == b"8"


@pytest.mark.parametrize("args,needle", [
    (["--train", "x"], "--train is for sparse jobs"),
    (["--model", "gbdt", "--train", "x"], "--model: 'gbdt' is not lr, fm or mlp"),
    (["--model", "fm"], "--model needs --train FILE"),
    (["--model", "fm", "--train", "x", "--table-optim", "lbfgs"], "--table-optim: unknown"),
    (["--model", "lr", "--train", "x", "--table-optim", "ftrl", "--init-std", 0.1],
     "--init-std must be 0"),
    (["--model", "fm", "--train", "x", "--csv", "y"], "--csv is for dense jobs"),
    (["--model", "fm", "--train", "x", "--unknown", "random"], "--unknown: 'random' is not init"),
])
def test_sparse_usage_errors_name_the_flag_and_exit_2(args, needle):
    p = run(["init", "--addr", "127.0.0.1:1", "--job", "u"] + args, check=False)
    assert p.returncode == 2 and needle in p.out, p.out


def test_bad_train_file_fails_init_and_leaves_no_job(server, tmp_path):
    bad = tmp_path / "bad.libsvm"
    bad.write_text("1 5:1 7:1\n0 5:x\n")
    p = run(["init", "--addr", server.addr, "--job", "sbad", "--model", "fm", "--train",
             str(bad)], check=False)
    assert p.returncode == 2 and "bad.libsvm:2" in p.out, p.out
    assert server.client().keys("*sbad*") == []


def test_cluster_run_spreads_table_shards_over_masters_and_reaches_the_bound(cluster, data):
    seeds = ",".join(n.addr for n in cluster.nodes)
    p = run(["run", "--workers", 2, "--progress", "line", "--table-shards", 3,
             "--min-auc", BOUND["fm"]] + sparse_args(seeds, "cfm", "fm", data))
    res = result_line(p.out)
    assert float(res["test_auc"]) >= BOUND["fm"], p.out
    assert int(res["samples"]) == 2 * TRAIN_LINES, p.out
    # Each shard key on its own master (the shard tags spread over the slot ranges).
    located = []
    for node in cluster.masters():
        for k in node.client().keys("cfm:emb:*"):
            located.append((k.decode(), node.client()))
    owners = {k: c.connection_pool.connection_kwargs["port"] for k, c in located}
    assert len(owners) == 3 and len(set(owners.values())) == 3, owners
    for k, port in owners.items():
        assert cluster.node_for_key(k).port == port, (k, port)
    check_exactly_once(p.out, shard_versions(located, "cfm"), 3)


def test_criteo_gzip_train_file_is_split_in_byte_ranges_and_learns(server, tmp_path):
    """Criteo TSV (label, 13 integers, 26 hex categoricals), gzip: the tasks tile the
    uncompressed bytes, every line is trained once per epoch, and the label's dependence
    on two categorical columns is learned."""
    import gzip
    import math
    import random
    rnd = random.Random(1)

    def write(path, n, opener):
        with opener(path, "wt") as f:
            for _ in range(n):
                cats = ["%08x" % rnd.randint(0, 30) for _ in range(26)]
                ints = [str(rnd.randint(0, 100)) if rnd.random() > 0.1 else ""
                        for _ in range(13)]
                z = (int(cats[0], 16) % 7 - 3) * 0.5 + (int(cats[1], 16) % 5 - 2) * 0.5
                y = 1 if rnd.random() < 1 / (1 + math.exp(-z)) else 0
                f.write("\t".join([str(y)] + ints + cats) + "\n")
    train, test = str(tmp_path / "c.train.tsv.gz"), str(tmp_path / "c.test.tsv")
    write(train, 4000, gzip.open)
    write(test, 1000, open)
    p = run(["run", "--addr", server.addr, "--job", "scr", "--model", "lr", "--format",
             "criteo", "--train", train, "--test", test, "--task-bytes", 100000,
             "--epochs", 3, "--table-lr", 0.1, "--progress", "none", "--min-auc", 0.62])
    res = result_line(p.out)
    assert int(res["samples"]) == 3 * 4000, p.out
    assert float(res["test_auc"]) >= 0.62, p.out     # measured 0.69
    cfg = server.client().hgetall("psjob:{scr}:config")
    # The tasks tile the uncompressed file (about 1 MB), not the gzip bytes.
    nbytes = int(cfg[b"train_bytes"])
    assert nbytes > 900000 and int(cfg[b"tasks"]) == 3 * -(-nbytes // 100000), cfg


def test_a_job_recording_bf16_pushes_half_the_bytes_with_error_feedback_and_i8_is_refused(
        server, data):
    """init --push-format records the job's push format, and the sparse worker pushes it: a
    bf16 job sends the table rows and dense tensors as BF16 (half the push payload of F32, the
    pulls unchanged) with error feedback, and trains as well. Tables take no I8: init refuses
    it (exit 2), and a worker of a job whose config says i8 (edited on the server) refuses
    to train."""
    r = server.client()
    acked = {}
    for fmt in ["f32", "bf16"]:
        job = "spf" + fmt
        run(["init"] + sparse_args(server.addr, job, "fm", data) + ["--push-format", fmt])
        assert r.hget("psjob:{%s}:config" % job, "push_format") == fmt.encode()
        p = run(["work", "--addr", server.addr, "--job", job, "--progress", "none"])
        m = re.search(r"^ACKED .*push_bytes=(\d+) pull_bytes=(\d+)$", p.out, re.M)
        assert m, p.out
        ev = run(["eval", "--addr", server.addr, "--job", job]).out
        auc = float(re.search(r"test_auc=([0-9.]+)", ev).group(1))
        acked[fmt] = (int(m.group(1)), int(m.group(2)), auc)
    p = run(["init"] + sparse_args(server.addr, "spfi8", "fm", data) + ["--push-format", "i8"],
            check=False)
    assert p.returncode == 2 and "sparse jobs push f32, bf16 or f16" in p.out, p.out
    assert not r.exists("psjob:{spfi8}:config")
    run(["init"] + sparse_args(server.addr, "spfx", "fm", data))
    r.hset("psjob:{spfx}:config", "push_format", "i8")
    p = run(["work", "--addr", server.addr, "--job", "spfx", "--progress", "none"], check=False)
    assert p.returncode != 0 and "sparse jobs push f32, bf16 or f16" in p.out, p.out
    (f32_push, f32_pull, f32_auc), (bf_push, bf_pull, bf_auc) = acked["f32"], acked["bf16"]
    assert bf_pull == f32_pull and 0.45 * f32_push <= bf_push <= 0.55 * f32_push, acked
    assert f32_auc >= BOUND["fm"] and abs(bf_auc - f32_auc) <= 0.005, acked
