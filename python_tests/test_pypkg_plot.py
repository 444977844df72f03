"""redis_ps.plot reads both run-log formats (the JSON lines of examples/torch_async_ps.py and
ps-train's progress/RESULT lines) and renders PNG and SVG with gnuplot."""

import json
import shutil

import pytest

import psserver

import pshelpers_pkg  # noqa: E402,F401  (the tree's redis_ps, or the installed one)
from redis_ps import plot  # noqa: E402

PS_TRAIN_OUT = """ps-train run: starting 2 workers
[demo-w1] epoch 1 | tasks 10 | samples 10000 | 65666 samples/s | loss 0.9532 | version 300 | staleness 1.07 | retries 0 | stale-rejects 0
[demo-w2] epoch 1 | tasks 11 | samples 11000 | 65000 samples/s | loss 0.9000 | version 320 | staleness 0.50 | retries 0 | stale-rejects 0
[demo-w1] epoch 2 | tasks 20 | samples 20000 | 65666 samples/s | loss 0.5532 | version 640 | staleness 1.00 | retries 0 | stale-rejects 0
[demo-w1] done: 20 tasks
ps-train run: job demo: test_loss=0.3252 test_acc=0.8863 (10000 test samples, model version 9600)
RESULT test_acc=0.8863 test_loss=0.3252 total_seconds=5.39 train_seconds=4.98 samples=600000 samples_per_s=120436 workers=2 span_seconds=4.649 span_samples_per_s=129062
"""


def test_parses_ps_train_progress_and_result_lines(tmp_path):
    f = tmp_path / "run.out"
    f.write_text(PS_TRAIN_OUT)
    series, result, xname = plot.parse_run(str(f))
    assert xname == "samples"
    assert series["demo-w1"] == [(10000, 0.9532, 300, 1.07), (20000, 0.5532, 640, 1.0)]
    assert series["demo-w2"] == [(11000, 0.9, 320, 0.5)]
    assert result["test_acc"] == 0.8863 and result["samples_per_s"] == 120436
    assert [b[0] for b in plot.bench_bars([str(f)])] == ["run", "run span"]


def test_parses_json_lines_and_renders_png_and_svg(tmp_path):
    if shutil.which("gnuplot") is None:
        pytest.fail("gnuplot missing: make deps installs gnuplot-nox", pytrace=False)
    f = tmp_path / "run.jsonl"
    lines = [{"t": 0.1 * i, "worker": "w%d" % (i % 2 + 1), "epoch": 1, "samples": 640 * i,
              "loss": 2.0 / (i + 1), "version": 10 * i, "staleness": 0.5} for i in range(8)]
    lines.append({"event": "result", "test_acc": 0.8, "samples": 5000, "samples_per_s": 9000.0})
    f.write_text("".join(json.dumps(o) + "\n" for o in lines) + "not json\n")
    series, result, xname = plot.parse_run(str(f))
    assert xname == "seconds" and len(series["w1"]) == 4 and result["test_acc"] == 0.8
    plot.main([str(f), "-o", str(tmp_path / "c.png")])
    assert (tmp_path / "c.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    plot.main(["--bench", str(f), "-o", str(tmp_path / "b.svg")])
    assert b"<svg" in (tmp_path / "b.svg").read_bytes()[:2000]
    with pytest.raises(SystemExit):
        plot.main([str(tmp_path / "c.png"), "-o", str(tmp_path / "none.png")])
