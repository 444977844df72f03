#!/usr/bin/env bash
# run.sh -- what `make bench` runs (after building everything):
#   1. build/bench/apply_bench: the optimizer kernels against a memcpy of the
#      same bytes, in one process; build/bench/codec_bench: the wire codecs
#      (F16/BF16/I8 both ways, TOPK 1%) against memcpy and the scalar loops;
#   2. build/bench/ps_bench against a private redis-server with the module:
#      PS.PUSHGRAD / PS.PULL next to SET / GET of the same bytes, one table with
#      ratios and a 'targets' block;
#   3. training: build/bench/baseline (one process, no server) against
#      `ps-train run --workers 1` and `--workers 2` (same MLP, batch, optimizer
#      and learning rate) on a fresh private server: samples/s, the ratio to
#      the baseline, and the time to 0.85 test accuracy;
#   4. sparse CTR (bench/sparse_bench.sh): a planted-truth FM data set from
#      `ps-gen-ctr`, build/bench/sparse_baseline against `ps-train run
#      --model fm --workers 2` (skipped with a message while ps-train has no
#      sparse path): samples/s ratio, test AUC vs the truth's, and FTRL's zero
#      fraction at Adagrad's logloss.
# Each private server runs on a free loopback port in a temp dir without
# persistence and is stopped by pid on exit. Exit status: 0 unless a program
# failed (a missed target is reported, not an error).
#
# Part 2c (embedding tables vs a Redis hash, bench/embed_server_bench.py) fills
# EMBED_BENCH_ROWS rows (default 10000000, about 40 s and 2.7 GB). Part 2d (ids/s per server
# core, bench/embed_core_bench.py, then build/bench/embed_bench in process with the memory
# limit) fills EMBED_CORE_ROWS rows (default 1000000, about 30 s); EMBED_BASE_MODULE=<ps.so>
# adds a baseline build of the module to 2d, measured in the same run.
# Part 2e (compressed id lists, bench/ids_bench.py): bytes per ps-train sparse step with
# IDFORMAT EF and with raw ids (PS_RAW_IDS=1) on IDS_BENCH_SAMPLES generated samples (100000),
# and the server's CPU per id of EF vs raw lists on EMBED_CORE_ROWS rows; IDS_BENCH=0 skips it.
# Environment overrides: REDIS_SERVER (redis-server), BENCH_PS_ARGS (extra
# ps_bench flags, e.g. "--reps 3 --time-ms 200"), BENCH_TRAIN=0 (skip part 3),
# BENCH_ACC (0.85), BENCH_MAX_EPOCHS (5), BENCH_DATA (Fashion-MNIST dir),
# BENCH_SPARSE=0 (skip part 4; its own overrides are in bench/sparse_bench.sh).
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
B="$REPO/build"
REDIS_SERVER=${REDIS_SERVER:-redis-server}
MODULE="$B/ps.so"
ACC=${BENCH_ACC:-0.85}
MAX_EPOCHS=${BENCH_MAX_EPOCHS:-5}
LAYERS=784,128,10
BATCH=64
LR=0.1
for f in "$MODULE" "$B/ps-train" "$B/bench/ps_bench" "$B/bench/apply_bench" "$B/bench/codec_bench" \
         "$B/bench/baseline" "$B/bench/sparse_baseline" "$B/bench/embed_bench" "$B/bench/dedup_bench"; do
    [ -f "$f" ] || { echo "bench: $f is missing: run make first" >&2; exit 1; }
done
command -v "$REDIS_SERVER" >/dev/null || { echo "bench: $REDIS_SERVER not found" >&2; exit 1; }
export REDIS_SERVER

# The private servers: scripts/private-server.sh (one at a time; its EXIT trap
# stops the one running).
. "$REPO/scripts/private-server.sh"
start_server() { # tag; sets PORT and PID
    private_server_start "bench-$1" "$MODULE"
    PORT=$PS_PORT
    PID=$PS_PID
}
stop_server() {
    private_server_stop
    PID=
}

# Value of field $2 (key=value) in the line $1.
field() { sed -n "s/.*[[:space:]]$2=\([^[:space:]]*\).*/\1/p" <<<" $1"; }

fail=0
T0=$(date +%s)

echo "== machine"
echo "date:   $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "cpu:    $(nproc) x $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
echo "os:     $(. /etc/os-release && echo "$PRETTY_NAME") (Debian $(cat /etc/debian_version 2>/dev/null))"
echo "redis:  $("$REDIS_SERVER" --version)"
echo "load:   $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min load average before the run: other processes add noise)"
echo "git:    $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$REPO" diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"

echo
echo "== 1. optimizer kernels vs memcpy of the same bytes (build/bench/apply_bench)"
"$B/bench/apply_bench" || { echo "bench: apply_bench failed" >&2; fail=1; }

echo
echo "== 1b. wire codecs vs memcpy of the F32 tensor and vs the scalar loops (build/bench/codec_bench)"
"$B/bench/codec_bench" || { echo "bench: codec_bench failed" >&2; fail=1; }
"$B/bench/codec_bench_avx2" --sizes 1048576 || { echo "bench: codec_bench_avx2 failed" >&2; fail=1; }

echo
echo "== 2. PS commands vs SET/GET of the same bytes, same server, same run (build/bench/ps_bench)"
start_server ps
echo "redis-server pid $PID on 127.0.0.1:$PORT"
# shellcheck disable=SC2086
"$B/bench/ps_bench" --port "$PORT" ${BENCH_PS_ARGS:-} || { echo "bench: ps_bench failed" >&2; fail=1; }
echo
echo "== 2b. exactly-once table: push with ID at DEDUPMAX 16 vs a full 2^20 table (build/bench/dedup_bench)"
"$B/bench/dedup_bench" --port "$PORT" || { echo "bench: dedup_bench failed" >&2; fail=1; }
stop_server

echo
echo "== 2c. embedding table vs a Redis hash of the same rows: pull/push of 4096 Zipf(1.1) ids (bench/embed_server_bench.py)"
# EMBED_BENCH_ROWS: the issue's 10M rows by default (about 40 s and 2.7 GB).
start_server embed
/usr/bin/python3 "$REPO/bench/embed_server_bench.py" --port "$PORT" --rows "${EMBED_BENCH_ROWS:-10000000}" ||
    { echo "bench: embed_server_bench failed" >&2; fail=1; }
stop_server

echo
echo "== 2d. embedding lookups per server core (issue 24): pull/push of 4096 uniformly random existing ids, 1M rows (bench/embed_core_bench.py)"
# The servers' main-thread CPU per id; EMBED_BASE_MODULE=<another ps.so> adds a baseline build
# measured in the same run (rounds alternate between the two servers) and prints the ratio.
/usr/bin/python3 "$REPO/bench/embed_core_bench.py" --module "$MODULE" \
    ${EMBED_BASE_MODULE:+--module "$EMBED_BASE_MODULE"} --rows "${EMBED_CORE_ROWS:-1000000}" ||
    { echo "bench: embed_core_bench failed" >&2; fail=1; }
echo "-- the same table in process (no Redis), and the memory limit measured in the same run (build/bench/embed_bench)"
"$B/bench/embed_bench" --rows "${EMBED_CORE_ROWS:-1000000}" --batches 200 ||
    { echo "bench: embed_bench failed" >&2; fail=1; }

echo
echo "== 2e. compressed id lists (issue 24): bytes per sparse step and server CPU per id, IDFORMAT EF vs raw ids (bench/ids_bench.py)"
# IDS_BENCH=0 skips it; IDS_BENCH_SAMPLES / EMBED_CORE_ROWS size it.
if [ "${IDS_BENCH:-1}" != 0 ]; then
    /usr/bin/python3 "$REPO/bench/ids_bench.py" --samples "${IDS_BENCH_SAMPLES:-100000}" \
        --rows "${EMBED_CORE_ROWS:-1000000}" || { echo "bench: ids_bench failed" >&2; fail=1; }
fi

# Part 4 in its own script: its private server and data cache are its own.
run_sparse() {
    echo
    echo "== 4. sparse CTR: FM on planted-truth data, build/bench/sparse_baseline vs ps-train 2 workers (bench/sparse_bench.sh)"
    if [ "${BENCH_SPARSE:-1}" = 0 ]; then
        echo "bench: sparse benchmark skipped (BENCH_SPARSE=0)"
        return
    fi
    "$REPO/bench/sparse_bench.sh" || { echo "bench: sparse_bench failed" >&2; fail=1; }
}

if [ "${BENCH_TRAIN:-1}" = 0 ]; then
    echo; echo "bench: training benchmark skipped (BENCH_TRAIN=0)"
    run_sparse
    exit $fail
fi

echo
echo "== 3. training: MLP $LAYERS, batch $BATCH, SGD lr $LR, Fashion-MNIST (60000 train / 10000 test)"
DATA_ARGS=()
[ -n "${BENCH_DATA:-}" ] && DATA_ARGS=(--data "$BENCH_DATA")

# Baseline: one process, no server. Time to ACC = training seconds summed over
# the epochs up to the first whose test accuracy reaches ACC.
declare -A SPS WALL TTA EPA ACCF
run_baseline() { # name threads
    local name=$1 out line
    local targs=()
    [ "$2" != default ] && targs=(--threads "$2")
    if ! out=$("$B/bench/baseline" --layers "$LAYERS" --batch "$BATCH" --lr "$LR" \
            --epochs "$MAX_EPOCHS" "${targs[@]}" "${DATA_ARGS[@]}" 2>&1); then
        echo "$out"; echo "bench: baseline failed" >&2; fail=1; return
    fi
    echo "$out" | sed "s/^/[$name] /"
    line=$(grep '^RESULT' <<<"$out")
    SPS[$name]=$(field "$line" samples_per_s)
    ACCF[$name]=$(field "$line" test_acc)
    read -r TTA[$name] EPA[$name] < <(awk -v acc="$ACC" '
        /^epoch / { split($2, e, "/"); for (i = 3; i <= NF; i++) { split($i, kv, "=");
                    if (kv[1] == "test_acc") a = kv[2]; if (kv[1] == "epoch_seconds") s = kv[2] }
                    t += s; if (a + 0 >= acc + 0) { printf "%.2f %d\n", t, e[1]; found = 1; exit } }
        END { if (!found) print "- -" }' <<<"$out")
}
run_baseline baseline default
run_baseline baseline-1thread 1

# ps-train: train E = 2, 3, ... epochs from scratch (a new job each time) until
# the test accuracy reaches ACC; time to ACC = training span of that run.
start_server train
echo "redis-server pid $PID on 127.0.0.1:$PORT"
for W in 1 2; do
    name="ps-train-w$W"
    TTA[$name]=-; EPA[$name]=-
    for E in $(seq 2 "$MAX_EPOCHS"); do
        if ! out=$("$B/ps-train" run --addr "127.0.0.1:$PORT" --job "bench-w$W-e$E" --workers "$W" \
                --layers "$LAYERS" --batch "$BATCH" --optim sgd --lr "$LR" --epochs "$E" \
                --progress none "${DATA_ARGS[@]}" 2>&1); then
            echo "$out" | tail -5; echo "bench: ps-train run --workers $W failed" >&2; fail=1; break
        fi
        line=$(grep '^RESULT' <<<"$out" | tail -1)
        echo "[$name] epochs=$E ${line#RESULT }"
        # span_*: first worker's first step to the last one's end, start-up and
        # data loading excluded as in build/bench/baseline; the wall-clock
        # fields stand in when a RESULT line carries no span.
        sps=$(field "$line" span_samples_per_s); secs=$(field "$line" span_seconds)
        if [ -z "$sps" ] || [ "${sps%.*}" = 0 ]; then
            sps=$(field "$line" samples_per_s); secs=$(field "$line" train_seconds)
        fi
        SPS[$name]=$sps
        WALL[$name]=$(field "$line" samples_per_s)
        ACCF[$name]=$(field "$line" test_acc)
        if awk -v a="${ACCF[$name]}" -v t="$ACC" 'BEGIN { exit !(a + 0 >= t + 0) }'; then
            TTA[$name]=$secs; EPA[$name]=$E
            break
        fi
    done
done
stop_server

echo
# The yardstick is the faster of the two baselines (OpenBLAS picks 2 threads by
# default, which loses to 1 thread when other processes load the machine).
ref=baseline
if awk -v a="${SPS[baseline-1thread]:-0}" -v b="${SPS[baseline]:-0}" 'BEGIN { exit !(a + 0 > b + 0) }'; then
    ref=baseline-1thread
fi
base=${SPS[$ref]:-0}
echo "training summary: samples/s over the training span (start-up and data loading"
echo "excluded; 'wall' includes the workers' start-up), ratio to $ref (the faster"
echo "baseline), time to $ACC test accuracy = training seconds of the first run reaching it"
printf '%-18s %11s %8s %11s %10s %12s %7s\n' run samples/s ratio wall_smp/s final_acc "time_to_$ACC" epochs
for name in baseline baseline-1thread ps-train-w1 ps-train-w2; do
    [ -n "${SPS[$name]:-}" ] || continue
    ratio=$(awk -v a="${SPS[$name]}" -v b="$base" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "-" }')
    printf '%-18s %11s %8s %11s %10s %12s %7s\n' "$name" "${SPS[$name]}" "$ratio" "${WALL[$name]:--}" \
        "${ACCF[$name]}" "${TTA[$name]}" "${EPA[$name]}"
done
if [ -n "${SPS[ps-train-w2]:-}" ] && [ "$base" != 0 ]; then
    awk -v a="${SPS[ps-train-w2]}" -v b="$base" -v ref="$ref" 'BEGIN { r = a / b;
        printf "target: ps-train 2 workers >= 0.80x %s samples/s: %.2fx  %s\n", ref, r, (r >= 0.8) ? "PASS" : "MISS" }'
fi

run_sparse

echo
echo "load:   $(cut -d' ' -f1-3 /proc/loadavg) (after the run)"
echo "bench: done in $(( $(date +%s) - T0 )) s$([ $fail = 0 ] || echo ' (with errors)')"
exit $fail
