#!/usr/bin/env bash
# train_bench.sh -- training throughput of the parameter server next to the
# single-process baseline, measured in the same run on the same machine.
#
# Starts a private redis-server with build/ps.so on a free loopback port in a
# temp dir (stopped by pid on exit), then, RUNS times interleaved:
#   build/bench/baseline                   same MLP, batch, data, SGD, no server
#                                          (OpenBLAS's default threads, and 1)
#   build/ps-train run --workers 1 and 2   against the server
# and prints the median samples/s of each and the ratios to the baseline.
# Both sides count samples over their training loop only: the baseline from
# its first mini-batch to its last (data loading and evaluation excluded),
# ps-train over the workers' training span (span_samples_per_s: first
# worker's first step to the last worker's end; process start-up and data
# loading excluded; every pull, push, task fetch and ack included). The
# wall-clock rate of `ps-train run` (start-up included) is printed too.
#
# Environment: LAYERS (784,128,10), BATCH (64), EPOCHS (5), LR (0.1),
# RUNS (3), PS_FLAGS (extra flags for ps-train run, e.g. "--pull-every 2"),
# REDIS_SERVER (redis-server), B (build).
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
B=${B:-$REPO/build}
LAYERS=${LAYERS:-784,128,10}
BATCH=${BATCH:-64}
EPOCHS=${EPOCHS:-5}
LR=${LR:-0.1}
RUNS=${RUNS:-3}
PS_FLAGS=${PS_FLAGS:-}
REDIS_SERVER=${REDIS_SERVER:-redis-server}
for f in "$B/ps.so" "$B/ps-train" "$B/bench/baseline"; do
    [ -e "$f" ] || { echo "train_bench: $f is missing: run make all $B/bench/baseline" >&2; exit 1; }
done

. "$(dirname "$0")/../scripts/private-server.sh"
private_server_start train-bench "$B/ps.so"
PORT=$PS_PORT
DIR=$PS_DIR

# field NAME LINE -> value of NAME=... in LINE
field() { sed -n "s/.*[ ]$1=\([^ ]*\).*/\1/p" <<<"$2"; }
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END{print (NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2}'; }

base=() base1=() w1=() w2=() w1wall=() w2wall=() acc2=() blas=
echo "train_bench: layers $LAYERS, batch $BATCH, $EPOCHS epochs, SGD lr $LR, $RUNS runs," \
     "$(nproc) CPUs, redis-server on 127.0.0.1:$PORT${PS_FLAGS:+, ps-train $PS_FLAGS}"
for r in $(seq "$RUNS"); do
    out=$("$B/bench/baseline" --layers "$LAYERS" --batch "$BATCH" --epochs "$EPOCHS" --lr "$LR")
    blas=$(sed -n 's/.*, \([0-9]*\) OpenBLAS threads.*/\1/p' <<<"$out")
    line=$(grep '^RESULT' <<<"$out")
    base+=("$(field samples_per_s "$line")")
    line=$("$B/bench/baseline" --layers "$LAYERS" --batch "$BATCH" --epochs "$EPOCHS" --lr "$LR" \
               --threads 1 | grep '^RESULT')
    base1+=("$(field samples_per_s "$line")")
    for n in 1 2; do
        # shellcheck disable=SC2086
        line=$("$B/ps-train" run --addr "127.0.0.1:$PORT" --job "bench$n" --reset --workers "$n" \
                   --layers "$LAYERS" --batch "$BATCH" --epochs "$EPOCHS" --lr "$LR" \
                   --progress none $PS_FLAGS | grep '^RESULT')
        if [ "$n" = 1 ]; then
            w1+=("$(field span_samples_per_s "$line")"); w1wall+=("$(field samples_per_s "$line")")
        else
            w2+=("$(field span_samples_per_s "$line")"); w2wall+=("$(field samples_per_s "$line")")
            acc2+=("$(field test_acc "$line")")
        fi
    done
    echo "run $r: baseline ${base[-1]} (1 thread ${base1[-1]}), ps 1 worker ${w1[-1]}," \
         "ps 2 workers ${w2[-1]} samples/s (test_acc ${acc2[-1]})"
done

mb=$(echo "${base[@]}" | median); mb1=$(echo "${base1[@]}" | median)
m1=$(echo "${w1[@]}" | median); m2=$(echo "${w2[@]}" | median)
m1w=$(echo "${w1wall[@]}" | median); m2w=$(echo "${w2wall[@]}" | median)
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", (b > 0) ? a / b : 0}'; }
echo
printf '%-44s %12s %10s\n' "median of $RUNS runs" "samples/s" "ratio"
printf '%-44s %12.0f %10s\n' "baseline, no server ($blas OpenBLAS threads)" "$mb" "1.00"
printf '%-44s %12.0f %10s\n' "baseline, no server (1 OpenBLAS thread)" "$mb1" "$(ratio "$mb1" "$mb")"
printf '%-44s %12.0f %10s\n' "ps-train, 1 worker" "$m1" "$(ratio "$m1" "$mb")"
printf '%-44s %12.0f %10s\n' "ps-train, 2 workers" "$m2" "$(ratio "$m2" "$mb")"
printf '%-44s %12.0f %10s\n' "ps-train, 2 workers, wall incl. start-up" "$m2w" "$(ratio "$m2w" "$mb")"
echo "RESULT baseline=$mb baseline_1thread=$mb1 ps_1worker=$m1 ps_2workers=$m2" \
     "ps_2workers_wall=$m2w ps_1worker_wall=$m1w ratio_2workers=$(ratio "$m2" "$mb")" \
     "ratio_2workers_vs_1thread=$(ratio "$m2" "$mb1")"
