"""Training curves and benchmark ratios as PNG or SVG, drawn by gnuplot (Debian gnuplot-nox).

    python3 -m redis_ps.plot run.jsonl -o train.png            # curves of one or more runs
    ps-train run ... --log-json run.jsonl                      # writes such a file
    python3 -m redis_ps.plot ps-train.out -o train.png         # ps-train's stdout works too
    python3 -m redis_ps.plot --bench bench.out -o ratios.svg   # RESULT lines of benchmarks

Inputs, any mix, one run per file:
  * JSON lines (the format examples/torch_async_ps.py --log and ps-train --log-json
    write): one object per line,
      {"t": s, "worker": "w1", "epoch": 1, "samples": n, "loss": x, "version": v,
       "staleness": s, "test_acc": a (optional)}
    progress of one worker since the start of the run ('t' seconds, 'samples' that
    worker's samples so far); a line with "event": "result" holds the run's totals
    (test_acc, test_loss, samples, samples_per_s, seconds). ps-train adds "event":
    "progress" to progress lines and writes other events (start, done, eval) that are
    not drawn.
  * ps-train's stdout: its progress lines
      [name] epoch E | tasks T | samples S | R samples/s | loss L | version V | staleness X | ...
    (no clock there: the x axis is then samples) and its final "RESULT k=v ..." line.

The picture has three panels against time (or samples): mean loss, the model version each
worker pulled, and the staleness of its pushes, one line per worker, the RESULT numbers in
the title. --bench draws one bar per "<name>_samples_per_s" (or "samples_per_s") value of
every RESULT line (or JSON "result" line) found, labelled by file and name.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional, Tuple

Point = Tuple[float, float, float, float]          # x, loss, version, staleness

_PROGRESS = re.compile(r"^\[(?P<w>[^\]]+)\] epoch \d+ \| tasks \d+ \| samples (?P<s>\d+) \| "
                       r"[\d.]+ samples/s \| loss (?P<l>[-\d.naif]+) \| version (?P<v>\d+) \| "
                       r"staleness (?P<st>[-\d.naif]+)")


def parse_result(line: str) -> Dict[str, float]:
    """The k=v numbers of a "RESULT k=v ..." line."""
    out: Dict[str, float] = {}
    for k, v in re.findall(r"(\w+)=([-+\d.eE]+)", line):
        try:
            out[k] = float(v)
        except ValueError:
            pass
    return out


def parse_run(path: str) -> Tuple[Dict[str, List[Point]], Dict[str, float], str]:
    """(series by worker, result numbers, x-axis name) of one log file in either format."""
    series: Dict[str, List[Point]] = {}
    result: Dict[str, float] = {}
    xname = "seconds"
    with open(path, errors="replace") as f:
        for line in f:
            line = line.strip().split("\r")[-1]
            if line.startswith("{"):
                try:
                    o = json.loads(line)
                except ValueError:
                    continue
                if o.get("event") == "result":
                    result.update({k: float(v) for k, v in o.items()
                                   if isinstance(v, (int, float))})
                elif "loss" in o:
                    x = float(o["t"]) if "t" in o else float(o.get("samples", 0))
                    if "t" not in o:
                        xname = "samples"
                    series.setdefault(str(o.get("worker", "w")), []).append(
                        (x, float(o["loss"]), float(o.get("version", 0)),
                         float(o.get("staleness", 0))))
            elif line.startswith("RESULT"):
                result.update(parse_result(line))
            else:
                m = _PROGRESS.match(line)
                if m:
                    xname = "samples"
                    series.setdefault(m["w"], []).append(
                        (float(m["s"]), float(m["l"]), float(m["v"]), float(m["st"])))
    return series, result, xname


def _gnuplot(script: str) -> None:
    exe = shutil.which("gnuplot")
    if exe is None:
        raise SystemExit("gnuplot not found: apt-get install gnuplot-nox (make deps)")
    p = subprocess.run([exe], input=script.encode(), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=120)
    if p.returncode != 0:
        raise SystemExit("gnuplot failed: " + p.stderr.decode(errors="replace"))


def _terminal(out: str, w: int, h: int) -> str:
    if out.endswith(".svg"):
        return "set terminal svg size %d,%d dynamic noenhanced background rgb 'white'" % (w, h)
    return "set terminal pngcairo size %d,%d noenhanced" % (w, h)


def _q(s: str) -> str:
    return "'" + s.replace("\\", "\\\\").replace("'", "''") + "'"


def plot_runs(paths: List[str], out: str) -> None:
    """Draw the curves of the runs in 'paths' into 'out' (.png or .svg)."""
    tmp = tempfile.mkdtemp(prefix="ps-plot-")
    try:
        curves: List[Tuple[str, str]] = []       # (data file, title)
        titles, xname = [], "seconds"
        for path in paths:
            series, result, xname = parse_run(path)
            run = os.path.splitext(os.path.basename(path))[0]
            for w, pts in sorted(series.items()):
                dat = os.path.join(tmp, "%d.dat" % len(curves))
                with open(dat, "w") as f:
                    for p in sorted(pts):
                        f.write("%g %g %g %g\n" % p)
                curves.append((dat, "%s %s" % (run, w) if len(paths) > 1 else w))
            if result:
                titles.append("%s: %s" % (run, ", ".join(
                    "%s %.4g" % (k, result[k]) for k in ("test_acc", "samples_per_s", "samples",
                                                          "workers") if k in result)))
        if not curves:
            raise SystemExit("no progress lines found in %s" % ", ".join(paths))
        panels = [("mean loss", 2), ("version pulled", 3), ("staleness (versions)", 4)]
        s = [_terminal(out, 900, 900), "set output %s" % _q(out),
             "set multiplot layout 3,1 title %s" % _q("\\n".join(titles) or "training"),
             "set grid", "set key outside right", "set xlabel %s" % _q(xname)]
        for label, col in panels:
            s.append("set ylabel %s" % _q(label))
            s.append("plot " + ", ".join("%s using 1:%d with linespoints pt 7 ps 0.4 title %s"
                                         % (_q(d), col, _q(t)) for d, t in curves))
        s.append("unset multiplot")
        _gnuplot("\n".join(s) + "\n")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def bench_bars(paths: List[str]) -> List[Tuple[str, float]]:
    """(label, samples/s) of every *samples_per_s number in the RESULT lines of 'paths'."""
    bars: List[Tuple[str, float]] = []
    for path in paths:
        run = os.path.splitext(os.path.basename(path))[0]
        with open(path, errors="replace") as f:
            for line in f:
                nums: Dict[str, float] = {}
                if line.startswith("RESULT"):
                    nums = parse_result(line)
                elif line.startswith("{") and '"result"' in line:
                    try:
                        nums = {k: v for k, v in json.loads(line).items()
                                if isinstance(v, (int, float))}
                    except ValueError:
                        pass
                if nums:
                    for k, v in nums.items():
                        if k.endswith("samples_per_s"):
                            name = k[:-len("samples_per_s")].rstrip("_")
                            bars.append(((run + " " + name).strip(), v))
    return bars


def plot_bench(paths: List[str], out: str) -> None:
    """Bar chart of the samples/s of benchmark RESULT lines, into 'out'."""
    bars = bench_bars(paths)
    if not bars:
        raise SystemExit("no RESULT ... samples_per_s found in %s" % ", ".join(paths))
    tmp = tempfile.mkdtemp(prefix="ps-plot-")
    try:
        dat = os.path.join(tmp, "bars.dat")
        with open(dat, "w") as f:
            for i, (label, v) in enumerate(bars):
                f.write("%d %g \"%s\"\n" % (i, v, label.replace('"', "'")))
        _gnuplot("\n".join([
            _terminal(out, 900, 500), "set output %s" % _q(out),
            "set style fill solid 0.7", "set boxwidth 0.6", "set grid ytics",
            "set ylabel 'samples/s'", "set yrange [0:*]", "set xtics rotate by -20",
            "set title 'training throughput (higher is better)'",
            "plot %s using 1:2:xtic(3) with boxes notitle, '' using 1:2:(sprintf('%%.0f', $2)) "
            "with labels offset 0,1 notitle" % _q(dat)]) + "\n")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: Optional[List[str]] = None) -> None:
    ap = argparse.ArgumentParser(description="Plot redis-ps training runs with gnuplot.")
    ap.add_argument("logs", nargs="+", help="JSON-lines logs or ps-train stdout files")
    ap.add_argument("-o", "--out", required=True, help="output .png or .svg")
    ap.add_argument("--bench", action="store_true",
                    help="draw the samples/s of the RESULT lines as bars instead")
    a = ap.parse_args(argv)
    (plot_bench if a.bench else plot_runs)(a.logs, a.out)
    print("wrote %s" % a.out)


if __name__ == "__main__":
    main(sys.argv[1:])
