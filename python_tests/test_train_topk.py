"""ps-train's TOPK push format: chosen at init and recorded in the job so every worker pushes
alike (a worker or a second init asking for another format is refused), k as a fraction, a
percentage or a count, a TOPK job pulls I8 unless a worker asks otherwise, and a TOPK job with
error feedback (and its default I8 pulls) trains Fashion-MNIST to the same accuracy class as F32
while sending about 1/50 of its push bytes."""

import re

import pytest

from pshelpers import ps_train  # noqa: F401 (fixture)
from pshelpers import run_ps_train as run
from test_train_standalone import result_line


def config(r, job):
    return {k.decode(): v.decode() for k, v in r.hgetall("psjob:{%s}:config" % job).items()}


def net_input(r):
    return int(r.info("stats")["total_net_input_bytes"])


def run_job(server, job, fmt, *extra):
    """'ps-train run' of 'job' with push format 'fmt' (2 epochs, SGD lr 0.1, 2 workers); returns
    (RESULT dict, bytes the server read per model push, as INFO stats counts them)."""
    r = server.client()
    before = net_input(r)
    p = run(["run", "--addr", server.addr, "--job", job, "--workers", 2, "--epochs", 2,
             "--optim", "sgd", "--lr", 0.1, "--push-format", fmt, "--progress", "none"]
            + list(extra), timeout=300)
    res = result_line(p.out)
    steps = sum(int(v) for k, v in r.hgetall("psjob:{%s}:progress" % job).items()
                if k.decode().endswith(":model_pushes"))
    assert steps > 0, p.out
    return res, (net_input(r) - before) / steps


def test_topk_job_trains_to_080_and_pushes_about_50x_fewer_bytes_than_f32(ps_train, server):
    f32, f32_net = run_job(server, "dense", "f32")
    topk, topk_net = run_job(server, "sparse", "topk:0.01")
    # Measured over 12 runs (6 with the ASan module): F32 0.818-0.840, TOPK 1% 0.837-0.845 after
    # two epochs (error feedback keeps what is not sent). One epoch left F32 at 0.787-0.819 and
    # TOPK at 0.804-0.833 (a CI run saw TOPK 0.785): too close to the bound.
    assert float(topk["test_acc"]) >= 0.80, topk
    assert float(topk["test_acc"]) >= float(f32["test_acc"]) - 0.03, (f32, topk)
    # libps payload: 4 bytes per float vs 8 bytes (index + value) per kept 1%, plus k.
    f32_push, topk_push = float(f32["push_bytes_per_step"]), float(topk["push_bytes_per_step"])
    assert f32_push == 4 * (784 * 128 + 128 + 128 * 10 + 10)
    assert 45 <= f32_push / topk_push <= 52, (f32_push, topk_push)
    # What the server read (pushes plus every other command) shrinks alike.
    assert f32_net / topk_net >= 30, (f32_net, topk_net)
    assert config(server.client(), "sparse")["push_format"] == "topk:0.01"


def test_push_format_is_the_jobs_and_another_is_refused(ps_train, server):
    r = server.client()
    base = ["--addr", server.addr, "--job", "j"]
    wbase = base + ["--progress", "line"]
    run(["init"] + base + ["--limit", 2000, "--task-samples", 1000, "--push-format", "TOPK:1%"])
    assert config(r, "j")["push_format"] == "topk:0.01"
    # A worker asking for another format is refused before it trains anything.
    p = run(["work"] + wbase + ["--push-format", "f32"], check=False)
    assert p.returncode == 1 and "does not match job j's topk:0.01" in p.out, p.out
    assert r.hlen("psjob:{j}:done") == 0
    # So is a second init with another one; the same one spelled differently is accepted.
    p = run(["init"] + base + ["--push-format", "i8"], check=False)
    assert p.returncode == 2 and "does not match" in p.out, p.out
    assert "continuing it" in run(["init"] + base + ["--push-format", "topk:0.010"]).out
    # A worker without the flag pushes the job's format.
    p = run(["work"] + wbase + ["--max-tasks", 1])
    assert "push topk:0.01" in p.out, p.out
    acked = dict(kv.split("=", 1) for kv in re.search(r"^ACKED (.*)$", p.out, re.M)
                 .group(1).split())
    steps = int(acked["model_pushes"])
    assert steps == 16   # 1000 samples in batches of 64
    assert int(acked["push_bytes"]) < steps * 4 * 784 * 128 // 40, acked


def acked(out):
    return dict(kv.split("=", 1) for kv in re.search(r"^ACKED (.*)$", out, re.M).group(1).split())


def test_topk_job_pulls_i8_by_default_and_a_workers_flag_overrides_it(ps_train, server):
    # With TOPK pushes the dense pull is nearly all of a step's bytes: a TOPK job records I8
    # pulls (a quarter of F32's bytes), other jobs F32; a worker's --pull-format wins.
    r = server.client()
    wbase = ["--progress", "line", "--max-tasks", 1]
    for job, fmt, pull in (("tk", "topk", "i8"), ("dense", "bf16", "f32")):
        run(["init", "--addr", server.addr, "--job", job, "--limit", 3000, "--task-samples", 1000,
             "--push-format", fmt])
        assert config(r, job)["pull_format"] == pull
        p = run(["work", "--addr", server.addr, "--job", job] + wbase)
        assert "pull %s, push" % pull in p.out, p.out
    p = run(["status", "--addr", server.addr, "--job", "tk"])
    assert "push topk:0.01, pull i8" in p.out, p.out
    # Pull bytes per step: F32 4 per float, I8 1 per float plus a 4-byte scale per partition.
    floats = 784 * 128 + 128 + 128 * 10 + 10
    i8 = acked(run(["work", "--addr", server.addr, "--job", "tk"] + wbase).out)
    f32 = acked(run(["work", "--addr", server.addr, "--job", "tk", "--pull-format", "f32"]
                    + wbase).out)
    for a, per_float in ((i8, 1), (f32, 4)):
        pulls = int(a["pull_bytes"]) / (per_float * floats)
        # One pull per step (plus the first); a handful of bytes per partition on top.
        assert int(a["model_pushes"]) <= pulls <= int(a["model_pushes"]) + 2, a


def test_topk_count_is_spread_over_the_model(ps_train, server):
    res, _ = run_job(server, "cnt", "topk:1000", "--limit", 2000)
    assert config(server.client(), "cnt")["push_format"] == "topk:1000"
    # 1000 of the 101,770 floats per step, rounded up per partition (4 partitions): each kept
    # value costs 8 bytes and each partition 4 more for k.
    assert 8 * 1000 + 16 <= float(res["push_bytes_per_step"]) <= 8 * 1004 + 16, res


def test_jobs_from_before_the_field_take_the_workers_flag(ps_train, server):
    r = server.client()
    base = ["--addr", server.addr, "--job", "old"]
    run(["init"] + base + ["--limit", 1000])
    assert config(r, "old")["push_format"] == "f32"
    r.hdel("psjob:{old}:config", "push_format")
    p = run(["work"] + base + ["--progress", "line", "--push-format", "bf16"])
    assert "push bf16" in p.out, p.out


@pytest.mark.parametrize("fmt", ["topk:0", "topk:1.5", "topk:-3", "topk:abc", "topk:",
                                 "topk:0%", "topk:101%", "topk0.1", "topk:1e400", "i16"])
def test_bad_push_formats_are_usage_errors(ps_train, fmt):
    for cmd in ("init", "work", "run"):
        p = run([cmd, "--addr", "x:1", "--job", "j", "--push-format", fmt], check=False)
        assert p.returncode == 2 and "--push-format: '%s'" % fmt in p.out, p.out
