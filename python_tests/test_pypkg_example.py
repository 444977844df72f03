"""examples/torch_async_ps.py end to end (skipped without PyTorch): two async worker
processes on a private server learn Fashion-MNIST well above chance, the JSON-lines log has
the documented fields, and one worker restarted alone with --worker-rank trains on."""

import json
import os
import subprocess
import sys

import pytest

import psserver

pytest.importorskip("torch")
EXAMPLE = os.path.join(psserver.REPO_ROOT, "examples", "torch_async_ps.py")
PY = sys.executable


def run(*args, timeout=300):
    p = subprocess.run([PY, EXAMPLE] + [str(a) for a in args], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=timeout)
    assert p.returncode == 0, p.stderr.decode(errors="replace")[-3000:]
    return p.stdout.decode()


def test_example_trains_and_logs_json_lines(tmp_path, module_path, request):
    log = tmp_path / "run.jsonl"
    # The example starts its own server with --module; a sanitizer build of the module needs
    # the ASan runtime preloaded into that server, which only psserver does, so under
    # `make check-asan` the example trains against a psserver-started server instead.
    if psserver.sanitizer_runtime(module_path):
        where = ("--addr", request.getfixturevalue("server").addr)
    else:
        where = ("--module", module_path)
    out = run("--workers", 2, "--limit", 6000, "--epochs", 2, "--log", log, "--log-every", 10,
              *where)
    result = out.strip().splitlines()[-1]
    assert result.startswith("RESULT test_acc=")
    acc = float(result.split()[1].split("=")[1])
    assert acc > 0.6                              # chance is 0.1
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    progress = [x for x in lines if "loss" in x]
    assert {x["worker"] for x in progress} == {"w1", "w2"}
    assert set(progress[0]) >= {"t", "worker", "epoch", "samples", "loss", "version",
                                "staleness"}
    assert lines[-1]["event"] == "result" and lines[-1]["samples"] > 5000


def test_a_worker_restarted_alone_keeps_training(server):
    sys.path.insert(0, os.path.join(psserver.REPO_ROOT, "python"))
    import redis_ps
    run("--addr", server.addr, "--job", "ft", "--workers", 2, "--limit", 2000)
    before = redis_ps.Tensor(redis_ps.connect(server.addr), "ft:0.weight:0").version()
    out = run("--addr", server.addr, "--job", "ft", "--workers", 2, "--limit", 2000,
              "--worker-rank", 1)
    assert "worker 1: 960 samples" in out
    after = redis_ps.Tensor(redis_ps.connect(server.addr), "ft:0.weight:0").version()
    assert after == before + 15                   # 1000 samples / 64 per batch
