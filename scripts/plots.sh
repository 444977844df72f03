#!/bin/sh
# plots.sh -- `make plots`: a real training run of ps-train (and, when PyTorch is installed,
# of examples/torch_async_ps.py and bench/torch_ps_vs_rpc.py) against a private server,
# then the curves and the throughput bars as PNG under $PLOTS_DIR (default build/plots, so
# the tracked docs/img stays as committed; PLOTS_DIR=docs/img refreshes it), drawn by
# python/redis_ps/plot.py with gnuplot from ps-train's --log-json file (ps-train.jsonl; its
# stdout is kept as ps-train.out). The raw logs stay next to the pictures.
set -eu
cd "$(dirname "$0")/.."
. scripts/private-server.sh
PY=${PYTHON:-/usr/bin/python3}
OUT=${PLOTS_DIR:-build/plots}
EPOCHS=${PLOTS_EPOCHS:-3}
# PLOTS_LIMIT=N trains every run on the first N samples (default all); PLOTS_BENCH_REPEAT
# runs of each PyTorch bench variant (default 3, the median reported). The test of this
# script (test_docs_guide.py) sets both small: it checks where the files go, not the curves.
LIMIT=${PLOTS_LIMIT:-}
REPEAT=${PLOTS_BENCH_REPEAT:-3}
mkdir -p "$OUT"
private_server_start plots "$PWD/build/ps.so"
ADDR=127.0.0.1:$PS_PORT

echo "plots: ps-train run, $EPOCHS epochs, 2 workers"
rm -f "$OUT/ps-train.jsonl"
build/ps-train run --addr "$ADDR" --job plots --reset --epochs "$EPOCHS" --workers 2 \
    --progress line --interval-ms 100 --optim adam --lr 0.001 \
    ${LIMIT:+--limit "$LIMIT"} --log-json "$OUT/ps-train.jsonl" > "$OUT/ps-train.out"
tail -1 "$OUT/ps-train.out"
set -- "$OUT/ps-train.jsonl"
if "$PY" -c 'import torch' 2>/dev/null; then
    echo "plots: PyTorch workers on redis-ps, and the same next to PyTorch RPC"
    rm -f "$OUT/torch-ps.jsonl"
    "$PY" examples/torch_async_ps.py --addr "$ADDR" --job torchplots --epochs "$EPOCHS" \
        --workers 2 ${LIMIT:+--limit "$LIMIT"} --log "$OUT/torch-ps.jsonl" | tail -1
    "$PY" bench/torch_ps_vs_rpc.py --workers 2 --epochs 1 ${LIMIT:+--limit "$LIMIT"} \
        --repeat "$REPEAT" 2>/dev/null | tail -4 \
        > "$OUT/torch-bench.out"
    cat "$OUT/torch-bench.out"
    PYTHONPATH=python "$PY" -m redis_ps.plot "$OUT/torch-ps.jsonl" -o "$OUT/train-torch.png"
    set -- "$@" "$OUT/torch-bench.out"
else
    echo "plots: no PyTorch (apt-get install python3-torch): torch curves skipped"
    # The bars keep the PyTorch bench of an earlier run: this folder's, else the committed one.
    for b in "$OUT/torch-bench.out" docs/img/torch-bench.out; do
        if [ -f "$b" ]; then
            echo "plots: the throughput bars keep the PyTorch bench of an earlier run ($b)"
            set -- "$@" "$b"
            break
        fi
    done
fi
PYTHONPATH=python "$PY" -m redis_ps.plot "$OUT/ps-train.jsonl" -o "$OUT/train-ps-train.png"
PYTHONPATH=python "$PY" -m redis_ps.plot --bench "$@" -o "$OUT/throughput.png"
