#!/usr/bin/env bash
# formats_bench.sh -- `make bench-formats`: does a lossy wire format cost
# training speed on loopback, where bytes are cheap? ps-train run with 2
# workers (SGD, Fashion-MNIST) for each push/pull format pair, the pairs
# interleaved within each round so machine drift hits all of them alike;
# samples/s over the training span, median of RUNS rounds, ratio to F32/F32
# of the same round. Target (issue "compression that pays"): every lossy
# format >= 0.95x F32 (the codecs no longer cost).
#
# Environment: RUNS (3), EPOCHS (3), LR (0.1), B (build), FORMATS (the list
# of PUSH/PULL pairs below).
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
B=${B:-$REPO/build}
RUNS=${RUNS:-3}
EPOCHS=${EPOCHS:-3}
LR=${LR:-0.1}
FORMATS=${FORMATS:-"f32/f32 bf16/f32 f16/f32 i8/f32 topk:0.01/f32 bf16/bf16 i8/f16"}
for f in "$B/ps.so" "$B/ps-train"; do
    [ -e "$f" ] || { echo "formats_bench: $f is missing: run make all" >&2; exit 1; }
done

. "$REPO/scripts/private-server.sh"
private_server_start formats-bench "$B/ps.so"

field() { sed -n "s/.*[ ]$1=\([^ ]*\).*/\1/p" <<<"$2"; }
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END{print (NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2}'; }

declare -A rate ratio acc
echo "formats_bench: 2 workers, SGD lr $LR, $EPOCHS epochs, $RUNS rounds, 127.0.0.1:$PS_PORT"
for r in $(seq "$RUNS"); do
    line_out=""
    f32=0
    for pair in $FORMATS; do
        push=${pair%/*} pull=${pair#*/}
        line=$("$B/ps-train" run --addr "127.0.0.1:$PS_PORT" --job "fmt" --reset --workers 2 \
                   --epochs "$EPOCHS" --optim sgd --lr "$LR" --progress none \
                   --push-format "$push" --pull-format "$pull" 2>/dev/null | grep '^RESULT')
        s=$(field span_samples_per_s "$line")
        [ "$pair" = f32/f32 ] && f32=$s
        rate[$pair]+="$s " acc[$pair]+="$(field test_acc "$line") "
        ratio[$pair]+="$(awk -v a="$s" -v b="$f32" 'BEGIN{printf "%.4f", (b > 0) ? a / b : 0}') "
        line_out+=" $pair ${s%.*}"
    done
    echo "round $r:$line_out"
done

echo
printf '%-16s %12s %8s %10s  %s\n' "push/pull" "samples/s" "ratio" "test_acc" "target >= 0.95x F32"
for pair in $FORMATS; do
    m=$(echo "${rate[$pair]}" | median); q=$(echo "${ratio[$pair]}" | median)
    a=$(echo "${acc[$pair]}" | median)
    verdict=-
    if [ "$pair" != f32/f32 ]; then
        verdict=$(awk -v q="$q" 'BEGIN{print (q >= 0.95) ? "PASS" : "MISS"}')
    fi
    printf '%-16s %12.0f %7.2fx %10.4f  %s\n' "$pair" "$m" "$q" "$a" "$verdict"
done
