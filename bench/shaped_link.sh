#!/usr/bin/env bash
# shaped_link.sh -- `make bench-shaped`: training over a bandwidth-limited
# link, to show what the compressed push formats buy where the network, not
# the CPU, is the bottleneck.
#
# Creates a private network namespace, brings its loopback up with MTU 1500
# and shapes it with a token bucket (tc tbf, burst 256kb, latency 20ms; the
# netem qdisc is not available everywhere, and a burst below the MTU drops
# every packet). Inside it run one redis-server with build/ps.so and
# `ps-train run --workers 2`: all traffic, pushes and pulls in both
# directions, shares that one shaped loopback. For each link rate (RATES)
# and each push/pull format pair it reports, for the Fashion-MNIST MLP:
# push and pull payload bytes per step (one mini-batch of one worker), the
# bytes the server read and wrote per step, the training span's samples/s
# and the final test accuracy; then the issue's targets with PASS/MISS.
# Compressing pushes alone can at most halve the bytes of a step, because
# a dense F32 model pull is as many bytes as an F32 push: a TOPK job
# therefore pulls I8 by default (its "TOPK 1%" row: what `--push-format
# topk` users get); the rows "TOPK 1% pull f32 / bf16 / bf16/2" (BF16 every
# second step) show the alternatives.
# SPARSE=1 measures the sparse CTR model instead (the dense part is then
# not run): `ps-gen-ctr` data (SPARSE_SAMPLES train samples, 26 fields,
# vocabularies of 1M ids, Zipf 1.5, head 20, written to the temp dir) and
# `ps-train run --model fm` with scripts/demo-sparse.sh's settings (FM dim
# 4, Adagrad lr 0.05, init std 0.01, admit 255, batch 256, overlap 0),
# reporting the test AUC and logloss. Tables take no I8 or TOPK, so its
# rows are F32, pulls of BF16 and F16, and pushes of BF16/F16 (with error
# feedback; run records --push-format in the job like a dense job's).
# The namespace (and the server in it) is removed at exit.
#
# Needs root (CAP_NET_ADMIN) for `ip netns`; prints SKIP and exits 0 where
# a namespace cannot be created. Exit status 1 only when a run failed (a
# missed target is reported, not an error).
#
# Environment: RUNS (1: rounds; every configuration runs once per round and
# link, interleaved so machine drift hits all alike; the table shows the
# median and, with RUNS > 1, the min..max of samples/s, of the ratio to F32
# of the same round, and of the accuracy), ONLY (an extended regex: run only
# the configurations whose label matches, plus F32 for the ratio),
# RATES ("1gbit 100mbit"), EPOCHS (1: one pass over the 60,000
# training samples, to keep the default run under ~5 minutes; accuracies
# are one-epoch accuracies and vary by a few points between runs; EPOCHS=3,
# about 10 minutes, to compare them), LIMIT (train samples, default all), LR (0.1,
# SGD), BATCH (64), REDIS_SERVER (redis-server), B (build); SPARSE (0),
# SPARSE_SAMPLES (1000000), SPARSE_EPOCHS (3).
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
B=${B:-$REPO/build}
RATES=${RATES:-"1gbit 100mbit"}
RUNS=${RUNS:-1}
ONLY=${ONLY:-}
EPOCHS=${EPOCHS:-1}
LIMIT=${LIMIT:-}
LR=${LR:-0.1}
BATCH=${BATCH:-64}
REDIS_SERVER=${REDIS_SERVER:-redis-server}
SPARSE=${SPARSE:-0}
SPARSE_SAMPLES=${SPARSE_SAMPLES:-1000000}
SPARSE_EPOCHS=${SPARSE_EPOCHS:-3}
for f in "$B/ps.so" "$B/ps-train"; do
    [ -f "$f" ] || { echo "shaped_link: $f is missing: run make all first" >&2; exit 1; }
done
command -v "$REDIS_SERVER" >/dev/null || { echo "shaped_link: $REDIS_SERVER not found" >&2; exit 1; }
skip() { echo "shaped_link: SKIP: $*"; exit 0; }
for t in ip tc; do
    command -v "$t" >/dev/null || skip "'$t' not found (apt-get install iproute2)"
done

# The configurations: label, --push-format, --pull-format ("-": none, the
# job's default), extra ps-train flags.
CONFIGS=(
    "F32|f32|f32|"
    "BF16|bf16|bf16|"
    "I8|i8|f32|"
    "TOPK 1%|topk:0.01|-|"
    "TOPK 1% pull f32|topk:0.01|f32|"
    "TOPK 1% pull bf16|topk:0.01|bf16|"
    "TOPK 1% pull bf16/2|topk:0.01|bf16|--pull-every 2"
)
if [ "$SPARSE" = 1 ]; then    # tables take F32, BF16 and F16
    CONFIGS=(
        "F32|-|f32|"
        "pull BF16|-|bf16|"
        "pull F16|-|f16|"
        "BF16|bf16|bf16|"
        "F16|f16|f16|"
    )
fi
if [ -n "$ONLY" ]; then
    keep=()
    for cfg in "${CONFIGS[@]}"; do
        label=${cfg%%|*}
        if [ "$label" = F32 ] || grep -Eq -- "$ONLY" <<<"$label"; then keep+=("$cfg"); fi
    done
    CONFIGS=("${keep[@]}")
fi

NS=ps-shaped-$$
DIR=
PID=
cleanup() {
    if [ -n "$PID" ] && kill -0 "$PID" 2>/dev/null; then
        kill "$PID" 2>/dev/null || true
        wait "$PID" 2>/dev/null || true
    fi
    ip netns del "$NS" 2>/dev/null || true
    [ -n "$DIR" ] && rm -rf "$DIR"
}
err=$(ip netns add "$NS" 2>&1) ||
    skip "cannot create a network namespace (needs root / CAP_NET_ADMIN): $err"
trap cleanup EXIT
trap 'exit 130' INT TERM
IN=(ip netns exec "$NS")
"${IN[@]}" ip link set lo mtu 1500 up
DIR=$(mktemp -d "${TMPDIR:-/tmp}/ps-shaped.XXXXXX")
PORT=6379   # the namespace is ours: nothing else listens in it
"${IN[@]}" "$REDIS_SERVER" --port "$PORT" --bind 127.0.0.1 --dir "$DIR" --save "" \
    --appendonly no --daemonize no --logfile "$DIR/redis.log" --loadmodule "$B/ps.so" &
PID=$!      # ip netns exec execs the server: this is its pid
cli() { "${IN[@]}" redis-cli -p "$PORT" "$@"; }
for _ in $(seq 100); do
    cli ping >/dev/null 2>&1 && break
    kill -0 "$PID" 2>/dev/null || { echo "shaped_link: redis-server exited:" >&2; tail "$DIR/redis.log" >&2; exit 1; }
    sleep 0.05
done
cli ping >/dev/null 2>&1 || { echo "shaped_link: redis-server did not answer PING in 5 s" >&2; exit 1; }

if [ "$SPARSE" = 1 ]; then
    echo "shaped_link: generating $SPARSE_SAMPLES sparse CTR samples (26 fields, vocab 1M, zipf 1.5)"
    "$B/ps-gen-ctr" --out "$DIR/ctr" --samples "$SPARSE_SAMPLES" --fields 26 --vocab 1000000 \
        --zipf 1.5 --head 20 --seed 7 --model fm >/dev/null
    TRUTH=$(cat "$DIR/ctr.truth")
fi
# train JOB PUSH PULL EXTRA -> ps-train run's output (the dense MLP or, with
# SPARSE=1, the FM; PUSH/PULL "-": the job's default).
train() {
    local fmt=()
    [ "$2" = - ] || fmt+=(--push-format "$2")
    [ "$3" = - ] || fmt+=(--pull-format "$3")
    if [ "$SPARSE" = 1 ]; then
        local sp=(--addr "127.0.0.1:$PORT" --job "$1" --model fm --dim 4
                  --train "$DIR/ctr.train.libsvm" --test "$DIR/ctr.test.libsvm"
                  --table-optim adagrad --table-lr 0.05 --init-std 0.01 --batch 256
                  --epochs "$SPARSE_EPOCHS" --admit 255 --seed 7)
        # shellcheck disable=SC2086
        "${IN[@]}" "$B/ps-train" run "${sp[@]}" --reset --workers 2 \
            --overlap 0 --progress none "${fmt[@]}" $4 2>&1
    else
        # shellcheck disable=SC2086
        "${IN[@]}" "$B/ps-train" run --addr "127.0.0.1:$PORT" --job "$1" --reset \
            --workers 2 --epochs "$EPOCHS" ${LIMIT:+--limit "$LIMIT"} --optim sgd \
            --lr "$LR" --batch "$BATCH" "${fmt[@]}" --progress none $4 2>&1
    fi
}
# field NAME LINE -> value of NAME=... in LINE
field() { sed -n "s/.*[ ]$1=\([^ ]*\).*/\1/p" <<<"$2"; }
netbytes() { cli info stats | tr -d '\r' | awk -F: '/^total_net_(input|output)_bytes:/ {s += $2} END {print s}'; }
steps() { cli hgetall "psjob:{$1}:progress" | awk 'NR % 2 == 1 {k = $0} NR % 2 == 0 && k ~ /:model_pushes$/ {s += $0} END {print s + 0}'; }
# progsum JOB NAME -> the sum of the workers' NAME fields of JOB's progress
progsum() { cli hgetall "psjob:{$1}:progress" | awk -v f=":$2\$" 'NR % 2 == 1 {k = $0} NR % 2 == 0 && k ~ f {s += $0} END {print s + 0}'; }

# Per "rate/label": space-separated values, one per round.
declare -A SPS ACC RATIO PUSH PULL WIRE LOSS
echo "shaped_link: namespace $NS, loopback mtu 1500, tbf burst 256kb latency 20ms; rates: $RATES"
if [ "$SPARSE" = 1 ]; then
    echo "shaped_link: sparse FM dim 4 over 26 fields, 2 workers, Adagrad lr 0.05, batch 256," \
         "admit 255, overlap 0, $SPARSE_EPOCHS epoch(s) of $SPARSE_SAMPLES samples, $RUNS round(s);" \
         "$(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "shaped_link: planted truth: test AUC $(field truth_test_auc " $TRUTH")," \
         "logloss $(field truth_test_logloss " $TRUTH")"
else
echo "shaped_link: Fashion-MNIST MLP 784,128,10, 2 workers, SGD lr $LR, batch $BATCH," \
     "$EPOCHS epoch(s)${LIMIT:+ of $LIMIT samples}, $RUNS round(s); $(nproc) CPUs," \
     "load average $(cut -d' ' -f1-3 /proc/loadavg)"
fi
for r in $(seq "$RUNS"); do
  for rate in $RATES; do
    "${IN[@]}" tc qdisc replace dev lo root tbf rate "$rate" burst 256kb latency 20ms
    f32=0
    for cfg in "${CONFIGS[@]}"; do
        IFS='|' read -r label push pull extra <<<"$cfg"
        job="shaped$RANDOM"
        n0=$(netbytes)
        out=$(train "$job" "$push" "$pull" "$extra") ||
            { echo "$out" >&2; echo "shaped_link: run failed" >&2; exit 1; }
        line=$(grep '^RESULT' <<<"$out")
        n=$(steps "$job")
        k="$rate/$label"
        s=$(field span_samples_per_s "$line")
        [ "$label" = F32 ] && f32=$s
        SPS[$k]+="$s "
        RATIO[$k]+="$(awk -v a="$s" -v b="$f32" 'BEGIN {printf "%.2f", (b > 0 ? a / b : 0)}') "
        if [ "$SPARSE" = 1 ]; then  # the sparse RESULT has no bytes: the workers' progress has
            ACC[$k]+="$(field test_auc "$line") "
            LOSS[$k]+="$(field test_logloss "$line") "
            PUSH[$k]=$(awk -v a="$(progsum "$job" push_bytes)" -v n="$n" 'BEGIN {printf "%.0f", (n > 0 ? a / n : 0)}')
            PULL[$k]=$(awk -v a="$(progsum "$job" pull_bytes)" -v n="$n" 'BEGIN {printf "%.0f", (n > 0 ? a / n : 0)}')
        else
            ACC[$k]+="$(field test_acc "$line") "
            PUSH[$k]=$(field push_bytes_per_step "$line")
            PULL[$k]=$(field pull_bytes_per_step "$line")
        fi
        WIRE[$k]+="$(awk -v a="$n0" -v b="$(netbytes)" -v n="$n" 'BEGIN {printf "%.0f", (n > 0 ? (b - a) / n : 0)}') "
        printf '  round %d %-8s %-20s %8s samples/s  %s %s  push %s pull %s B/step  load %s\n' \
               "$r" "$rate" "$label" "$s" "$([ "$SPARSE" = 1 ] && echo auc || echo acc)" \
               "$(field "$([ "$SPARSE" = 1 ] && echo test_auc || echo test_acc)" "$line")" \
               "${PUSH[$k]}" "${PULL[$k]}" \
               "$(cut -d' ' -f1 /proc/loadavg)"
        cli del "psjob:{$job}:config" "psjob:{$job}:tasks" "psjob:{$job}:progress" \
            "psjob:{$job}:done" >/dev/null
    done
  done
done

# med "v1 v2 ..." -> the median; span "v1 v2 ..." -> "min..max" (RUNS > 1), else "".
med() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
span() { [ "$RUNS" -gt 1 ] && tr ' ' '\n' | grep -v '^$' | sort -g | sed -n '1p;$p' | paste -sd' ' | awk '{printf " (%s..%s)", $1, $2}'; true; }
echo
printf '%-8s %-20s %7s %7s %7s %-20s %-18s %s\n' "link" "push/pull" "push B" "pull B" \
       "wire B" "samples/s" "vs F32" "$([ "$SPARSE" = 1 ] && echo "test_auc logloss" || echo test_acc)"
for rate in $RATES; do
    for cfg in "${CONFIGS[@]}"; do
        IFS='|' read -r label push pull extra <<<"$cfg"
        k="$rate/$label"
        printf '%-8s %-20s %7s %7s %7s %-20s %-18s %s\n' "$rate" "$label" "${PUSH[$k]}" \
               "${PULL[$k]}" "$(med <<<"${WIRE[$k]}")" \
               "$(med <<<"${SPS[$k]}")$(span <<<"${SPS[$k]}")" \
               "$(med <<<"${RATIO[$k]}")x$(span <<<"${RATIO[$k]}")" \
               "$(med <<<"${ACC[$k]}")$(span <<<"${ACC[$k]}")${LOSS[$k]:+ $(med <<<"${LOSS[$k]}")}"
    done
done
echo "(bytes per step = one mini-batch of one worker: push/pull = libps payload, wire = what"
echo " the server read + wrote per step, every command included; samples/s over the training"
echo " span; medians over $RUNS round(s), min..max in parentheses; vs F32 = ratio to the F32"
echo " run of the same round and link)"

if [ "$SPARSE" = 1 ]; then
    echo "(sparse: push/pull = the embedding rows' and dense tensors' payload; BF16/F16 pushes:"
    echo " the job's config edited, init records f32; planted truth: test AUC $(field truth_test_auc " $TRUTH"))"
    exit 0
fi
# The issue's targets at the slowest rate measured (100mbit by default), on medians.
slow=${RATES##* }
verdict() { awk "BEGIN {exit !($1)}" && echo PASS || echo MISS; }
target() { printf '  %-62s %-34s %s\n' "$1" "$2" "$3"; }
has() { [ -n "${SPS[$slow/$1]:-}" ]; }
f32a=$(med <<<"${ACC[$slow/F32]}")
echo
echo "targets at $slow (medians):"
for cfg in "${CONFIGS[@]}"; do
    label=${cfg%%|*}
    case $label in TOPK*) ;; *) continue ;; esac
    q=$(med <<<"${RATIO[$slow/$label]}") a=$(med <<<"${ACC[$slow/$label]}")
    target "$label: samples/s >= 5x F32's" "${q}x" "$(verdict "$q >= 5")"
    target "$label: test accuracy within 1 point of F32's" "$a vs $f32a" \
           "$(verdict "$a >= $f32a - 0.01")"
done
if has BF16; then
    a=$(med <<<"${ACC[$slow/BF16]}")
    target "BF16: test accuracy within 0.3 points of F32's" "$a vs $f32a" \
           "$(verdict "$a >= $f32a - 0.003")"
fi
for cfg in "${CONFIGS[@]}"; do
    label=${cfg%%|*}
    case $label in TOPK*) ;; *) continue ;; esac
    p=${PUSH[$slow/$label]} pf=${PUSH[$slow/F32]}
    target "TOPK 1%: push bytes per step >= 30x fewer than F32's" \
           "$(awk -v a="$pf" -v b="$p" 'BEGIN {printf "%.1fx (%d vs %d)", a / b, b, a}')" \
           "$(verdict "$pf >= 30 * $p")"
    break
done
if [ "$EPOCHS" -lt 3 ]; then
    echo "notes: accuracies after $EPOCHS epoch(s) of SGD are noisy: one configuration varies by 2"
    echo "       points between runs, more under shaping; EPOCHS=3 to compare accuracies."
fi
echo "sparse model: SPARSE=1 (make bench-shaped SPARSE=1)"
