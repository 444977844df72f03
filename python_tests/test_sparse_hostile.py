"""ps-train sparse jobs given hostile or changed inputs (review of the sparse path): a job
config edited to nonsense on the server, a train file that shrinks between init and work, a
gzip train file cut mid-stream, a --task-bytes so small it would write millions of tasks.
Each answers a clear error naming the field or file and a non-zero exit, never a crash
(a negative return code) or a run that trains fewer lines and reports success."""

import gzip
import shutil

import pytest

from pshelpers import run_gen_ctr, run_ps_train as run

GEN = ["--samples", 3000, "--test-samples", 500, "--fields", 4, "--vocab", 20, "--seed", 7]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("hostile")
    prefix = str(d / "ctr")
    run_gen_ctr(["--out", prefix] + GEN)
    return prefix + ".train.libsvm", prefix + ".test.libsvm"


def init(server, job, train, test, *extra):
    return run(["init", "--addr", server.addr, "--job", job, "--model", "fm", "--train", train,
                "--test", test, "--task-bytes", 20000, "--epochs", 1] + list(extra),
               check=False)


def work(server, job):
    return run(["work", "--addr", server.addr, "--job", job, "--name", "w1",
                "--progress", "none"], check=False, timeout=60)


@pytest.mark.parametrize("field,value,needle", [
    ("shards", "0", "shards 0"),
    ("dim", "100000000", "dim 100000000"),
    ("format", "xml", "format 'xml'"),
    ("table_optim", "LBFGS", "table_optim 'LBFGS'"),
    ("shard_bytes", "-5", "shard_bytes -5"),
    ("train_bytes", "0", "train_bytes 0"),
    ("unknown", "maybe", "unknown: not init or zeros"),
    ("hidden", "9999999999", "hidden"),
])
def test_a_config_edited_to_nonsense_is_refused_not_trained_on(server, data, tmp_path, field,
                                                                value, needle):
    job = "cfg_" + field
    p = init(server, job, *data)
    assert p.returncode == 0, p.out
    r = server.client()
    if field == "hidden":
        r.hset("psjob:{%s}:config" % job, "model", "mlp")
    r.hset("psjob:{%s}:config" % job, field, value)
    p = work(server, job)
    assert p.returncode > 0, (p.returncode, p.out)
    assert "corrupt config (%s" % needle in p.out, p.out


def test_a_train_file_that_shrank_after_init_fails_its_task(server, data, tmp_path):
    train = str(tmp_path / "train.libsvm")
    shutil.copy(data[0], train)
    assert init(server, "shrunk", train, data[1]).returncode == 0
    with open(train, "rb") as f:
        body = f.read()
    with open(train, "wb") as f:
        f.write(body[: len(body) * 3 // 5])
    p = work(server, "shrunk")
    assert p.returncode > 0, p.out
    assert "train.libsvm" in p.out and "changed since init" in p.out, p.out


def test_a_gzip_train_file_cut_mid_stream_fails_init(server, data, tmp_path):
    gz = str(tmp_path / "train.libsvm.gz")
    with open(data[0], "rb") as f, gzip.open(gz, "wb") as g:
        g.write(f.read())
    with open(gz, "rb") as f:
        body = f.read()
    with open(gz, "wb") as f:
        f.write(body[: len(body) // 2])
    p = init(server, "cutgz", gz, data[1])
    assert p.returncode > 0, p.out
    assert "train.libsvm.gz" in p.out and "cut short" in p.out, p.out
    assert server.client().keys("*cutgz*") == []


def test_a_shard_bytes_that_makes_millions_of_tasks_is_refused(server, data):
    p = init(server, "tiny", *data, "--task-bytes", 1, "--epochs", 20)
    assert p.returncode == 2, p.out
    assert "--task-bytes 1" in p.out and "tasks, at most 1048576" in p.out, p.out
    assert server.client().keys("*tiny*") == []


def test_eval_on_an_empty_test_file_is_an_error_not_a_logloss_of_zero(server, data, tmp_path):
    assert init(server, "evempty", *data).returncode == 0
    assert work(server, "evempty").returncode == 0
    empty = tmp_path / "empty.libsvm"
    empty.write_text("\n\n")
    p = run(["eval", "--addr", server.addr, "--job", "evempty", "--test", str(empty)],
            check=False)
    assert p.returncode == 1, p.out
    assert "empty.libsvm: no samples to evaluate on" in p.out, p.out
    assert "test_logloss=0.0" not in p.out, p.out
