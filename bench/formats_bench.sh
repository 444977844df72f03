#!/usr/bin/env bash
# formats_bench.sh -- `make bench-formats`: does a lossy wire format cost
# training speed on loopback, where bytes are cheap? ps-train run with 2
# workers (SGD, Fashion-MNIST) for each push/pull format pair, the pairs
# interleaved within each round so machine drift hits all of them alike;
# samples/s over the training span, median of RUNS rounds, ratio to F32/F32
# of the same round. Target (issue "compression that pays"): every lossy
# format >= 0.95x F32 (the codecs no longer cost).
#
# On a machine shared with other jobs wall-clock samples/s move by tens of
# percent between runs of the same configuration, so each run's CPU time is
# measured too: the user + system seconds of `ps-train run` and its workers
# (bash's time, which counts waited-for children) plus the server's
# (INFO used_cpu_user + used_cpu_sys), per training sample. Other jobs
# steal wall time, not CPU time, so 'cpu_eff' (F32's CPU per sample / this
# format's, same round; > 1: cheaper than F32) is the steadier measure of
# what the codecs cost. Both include each run's fixed costs (loading the
# data, init, the final evaluation).
#
# Environment: RUNS (3), EPOCHS (3), LR (0.1), B (build), FORMATS (the list
# of PUSH/PULL pairs below).
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
B=${B:-$REPO/build}
RUNS=${RUNS:-3}
EPOCHS=${EPOCHS:-3}
LR=${LR:-0.1}
FORMATS=${FORMATS:-"f32/f32 bf16/f32 f16/f32 i8/f32 topk:0.01/f32 topk:0.01/i8 bf16/bf16 i8/f16"}
for f in "$B/ps.so" "$B/ps-train"; do
    [ -e "$f" ] || { echo "formats_bench: $f is missing: run make all" >&2; exit 1; }
done

. "$REPO/scripts/private-server.sh"
private_server_start formats-bench "$B/ps.so"

field() { sed -n "s/.*[ ]$1=\([^ ]*\).*/\1/p" <<<"$2"; }
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END{print (NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2}'; }
range() { tr ' ' '\n' | grep -v '^$' | sort -g | sed -n '1p;$p' | paste -sd' ' | awk '{printf "%.2f..%.2f", $1, $2}'; }

# Server CPU seconds so far.
server_cpu() {
    redis-cli -p "$PS_PORT" info cpu | tr -d '\r' |
        awk -F: '/^used_cpu_(user|sys):/ {s += $2} END {printf "%.3f", s}'
}
tfile=$PS_DIR/time.out
declare -A rate ratio acc cpu cpueff
echo "formats_bench: 2 workers, SGD lr $LR, $EPOCHS epochs, $RUNS rounds, 127.0.0.1:$PS_PORT;" \
     "$(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$RUNS"); do
    line_out=""
    f32=0 f32cpu=0
    for pair in $FORMATS; do
        push=${pair%/*} pull=${pair#*/}
        c0=$(server_cpu)
        TIMEFORMAT='%U %S'
        { time "$B/ps-train" run --addr "127.0.0.1:$PS_PORT" --job "fmt" --reset --workers 2 \
              --epochs "$EPOCHS" --optim sgd --lr "$LR" --progress none \
              --push-format "$push" --pull-format "$pull" > "$PS_DIR/run.out" 2>/dev/null; } 2> "$tfile"
        line=$(grep '^RESULT' "$PS_DIR/run.out")
        s=$(field span_samples_per_s "$line")
        # CPU microseconds per training sample: workers + server.
        c=$(awk -v s0="$c0" -v s1="$(server_cpu)" -v n="$(field samples "$line")" \
                '{printf "%.2f", ($1 + $2 + s1 - s0) * 1e6 / n}' "$tfile")
        [ "$pair" = f32/f32 ] && f32=$s f32cpu=$c
        rate[$pair]+="$s " acc[$pair]+="$(field test_acc "$line") " cpu[$pair]+="$c "
        ratio[$pair]+="$(awk -v a="$s" -v b="$f32" 'BEGIN{printf "%.4f", (b > 0) ? a / b : 0}') "
        cpueff[$pair]+="$(awk -v a="$c" -v b="$f32cpu" 'BEGIN{printf "%.4f", (a > 0) ? b / a : 0}') "
        line_out+=" $pair ${s%.*} (${c} us)"
    done
    echo "round $r:$line_out (load $(cut -d' ' -f1 /proc/loadavg))"
done

echo
printf '%-16s %10s %7s %11s %9s %8s %11s %9s  %s\n' "push/pull" "samples/s" "ratio" "ratio range" \
       "cpu_us/s" "cpu_eff" "eff range" "test_acc" "target >= 0.95x F32 (samples/s)"
for pair in $FORMATS; do
    m=$(echo "${rate[$pair]}" | median); q=$(echo "${ratio[$pair]}" | median)
    a=$(echo "${acc[$pair]}" | median)
    verdict=-
    if [ "$pair" != f32/f32 ]; then
        verdict=$(awk -v q="$q" 'BEGIN{print (q >= 0.95) ? "PASS" : "MISS"}')
    fi
    printf '%-16s %10.0f %6.2fx %11s %9.2f %7.2fx %11s %9.4f  %s\n' "$pair" "$m" "$q" \
           "$(echo "${ratio[$pair]}" | range)" "$(echo "${cpu[$pair]}" | median)" \
           "$(echo "${cpueff[$pair]}" | median)" "$(echo "${cpueff[$pair]}" | range)" "$a" "$verdict"
done
echo "(medians over $RUNS rounds; ratio = samples/s / F32's of the same round; cpu_us/s = CPU"
echo " microseconds (workers + server) per training sample; cpu_eff = F32's cpu_us/s / this"
echo " one's, same round; ranges = min..max over the rounds. Other jobs on this machine move"
echo " single rounds' samples/s by tens of percent: read a ratio whose range straddles 1.0 as"
echo " no measurable difference; cpu_eff is the steadier one. Load average now:"
echo " $(cut -d' ' -f1-3 /proc/loadavg))"
