"""ps-train --log-json FILE: run, its workers and eval append one JSON object per line to FILE
(train/runlog.c). Against a real server: every line parses as strict JSON, progress lines
carry the fields the plot tool reads, each worker's samples only grow, the run's "result" line
comes last and repeats the RESULT numbers, lines of separate commands append, and
`python3 -m redis_ps.plot` draws the file."""

import json
import os
import shutil
import sys

import pytest

import psserver
from pshelpers import ps_train  # noqa: F401 (fixture)
from pshelpers import run_gen_ctr, run_ps_train as run

sys.path.insert(0, os.path.join(psserver.REPO_ROOT, "python"))
from redis_ps import plot  # noqa: E402

PROGRESS_FIELDS = {"t", "time", "event", "worker", "epoch", "tasks", "samples", "samples_per_s",
                   "loss", "version", "staleness"}


def _reject(name):
    raise ValueError("non-standard JSON constant %s" % name)


def read_log(path):
    """The objects of JSON-lines file 'path'; fails on any line that is not strict JSON (NaN,
    Infinity, a cut or interleaved line)."""
    with open(path, "rb") as f:
        raw = f.read()
    assert raw.endswith(b"\n"), "the last line is not complete"
    out = []
    for n, line in enumerate(raw.decode("utf-8").split("\n")[:-1], 1):
        try:
            o = json.loads(line, parse_constant=_reject)
        except ValueError as e:
            raise AssertionError("line %d is not JSON (%s): %r" % (n, e, line))
        assert isinstance(o, dict) and isinstance(o.get("t"), (int, float)), line
        assert isinstance(o.get("time"), (int, float)) and isinstance(o.get("event"), str), line
        out.append(o)
    return out


def result_numbers(out):
    line = [l for l in out.splitlines() if l.startswith("RESULT ")][-1]
    return dict(kv.split("=", 1) for kv in line.split()[1:])


def test_run_log_has_every_workers_progress_and_the_result_last(ps_train, server, tmp_path):
    log = tmp_path / "run.jsonl"
    # --progress none: the log does not depend on the stdout progress lines.
    p = run(["run", "--addr", server.addr, "--job", "jl", "--workers", 2, "--epochs", 2,
             "--limit", 8000, "--task-samples", 1000, "--interval-ms", 20, "--progress", "none",
             "--log-json", log])
    objs = read_log(log)
    events = [o["event"] for o in objs]
    assert events[0] == "start" and events[-1] == "result", events
    assert events.count("result") == 1 and events.count("done") == 2
    assert events[-2] == "eval"
    progress = [o for o in objs if o["event"] == "progress"]
    done = {o["worker"]: o for o in objs if o["event"] == "done"}
    assert set(done) == {"jl-w1", "jl-w2"}, done
    # A worker that started late may find every task taken: no progress line, 0 samples.
    workers = {o["worker"] for o in progress}
    assert workers and workers == {w for w, d in done.items() if d["samples"] > 0}, done
    for o in progress:
        assert PROGRESS_FIELDS <= set(o), o
        assert o["samples"] > 0 and o["loss"] > 0 and o["epoch"] in (1, 2)
    assert max(sum(o["worker"] == w for o in progress) for w in workers) >= 2
    for w in workers:
        mine = [o for o in progress if o["worker"] == w]
        samples = [o["samples"] for o in mine]
        assert samples == sorted(samples) and len(set(samples)) == len(samples), samples
        ts = [o["t"] for o in mine]
        assert ts == sorted(ts)
        assert done[w]["samples"] == samples[-1] and done[w]["interrupted"] is False
    # t counts from the run's start in every process: workers start after "start".
    assert all(o["t"] >= objs[0]["t"] >= 0 for o in objs)
    res, text = objs[-1], result_numbers(p.out)
    assert res["samples"] == 16000 == int(text["samples"])
    assert abs(res["test_acc"] - float(text["test_acc"])) < 1e-4
    assert res["workers"] == 2 and res["samples_per_s"] > 0 and res["failed_workers"] == 0
    assert sum(d["samples"] for d in objs if d["event"] == "done") == 16000

    series, result, xname = plot.parse_run(str(log))
    assert xname == "seconds" and set(series) == workers
    assert result["test_acc"] == res["test_acc"]
    if shutil.which("gnuplot") is None:
        pytest.fail("gnuplot missing: make deps installs gnuplot-nox", pytrace=False)
    png = tmp_path / "run.png"
    plot.main([str(log), "-o", str(png)])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bars = plot.bench_bars([str(log)])
    assert [b[0] for b in bars] == ["run", "run span"], bars


def test_work_and_eval_append_to_one_log_and_escape_names(ps_train, server, tmp_path):
    log = tmp_path / "job.jsonl"
    run(["init", "--addr", server.addr, "--job", "je", "--limit", 3000, "--task-samples", 1000])
    name = 'w"1\\caf\u00e9'                 # a quote, a backslash, non-ASCII
    run(["work", "--addr", server.addr, "--job", "je", "--name", name, "--max-tasks", 2,
         "--interval-ms", 10, "--progress", "none", "--log-json", log])
    run(["work", "--addr", server.addr, "--job", "je", "--name", "w2", "--progress", "none",
         "--log-json", log])
    p = run(["eval", "--addr", server.addr, "--job", "je", "--log-json", log])
    objs = read_log(log)
    assert {o["worker"] for o in objs if o["event"] == "progress"} == {name, "w2"}
    done = {o["worker"]: o for o in objs if o["event"] == "done"}
    assert done[name]["tasks"] == 2 and done["w2"]["tasks"] == 1
    ev = objs[-1]
    assert ev["event"] == "eval" and ev["job"] == "je" and ev["samples"] == 3000
    assert ev["test_samples"] == 10000 and ev["version"] > 0
    assert "test_acc=%.4f" % ev["test_acc"] in p.out
    # Standalone commands count t from their own start.
    assert ev["t"] < 60


def test_unwritable_log_fails_before_anything_is_created(ps_train, server, tmp_path):
    bad = tmp_path / "no" / "such" / "run.jsonl"
    p = run(["run", "--addr", server.addr, "--job", "jbad", "--limit", 1000,
             "--log-json", bad], check=False)
    assert p.returncode == 1, p.out
    assert "--log-json" in p.out and "No such file" in p.out
    assert server.client().keys("*jbad*") == []
    for cmd in ("work", "eval", "run"):
        assert "--log-json FILE" in run([cmd, "--help"]).out
    p = run(["init", "--addr", server.addr, "--job", "jbad", "--log-json", "x"], check=False)
    assert p.returncode == 2 and "does not apply to init" in p.out


def test_sparse_run_logs_auc_and_logloss(ps_train, server, tmp_path):
    prefix = str(tmp_path / "ctr")
    run_gen_ctr(["--out", prefix, "--samples", 20000, "--vocab", 200])
    log = tmp_path / "sparse.jsonl"
    p = run(["run", "--addr", server.addr, "--job", "sj", "--model", "fm",
             "--train", prefix + ".train.libsvm", "--test", prefix + ".test.libsvm",
             "--workers", 2, "--interval-ms", 10, "--progress", "none", "--log-json", log])
    objs = read_log(log)
    assert objs[0]["event"] == "start" and objs[0]["model"] == "fm"
    assert objs[-1]["event"] == "result" and objs[-2]["event"] == "eval"
    res = result_numbers(p.out)
    assert objs[-1]["test_auc"] == pytest.approx(float(res["test_auc"]), abs=1e-5)
    assert objs[-1]["test_logloss"] == pytest.approx(float(res["test_logloss"]), abs=1e-5)
    assert objs[-1]["samples"] == int(res["samples"]) > 0
    assert any(o["event"] == "progress" and "loss" in o for o in objs)
