#!/usr/bin/env bash
# demo-tree.sh -- `make demo-tree`: the tree topology against the star, on
# Fashion-MNIST, with the same 4 workers and the same number of samples.
#
#   star: 2N ps-train workers push to one server             (10 epochs of one job)
#   tree: 2 relays (ps-relay --sync --workers N), each in front of a local server
#         with N ps-train workers; the relays push to one upstream server
#         (each local job runs 5 epochs: 2 x 5 = the star's 10)
# N is DEMO_PER_RELAY (2: 4 workers in all; 4: 8 workers, heavy on 2 cores).
#
# It prints, for each, the upstream server's bytes (INFO stats net_input_bytes
# + net_output_bytes over the training) per training sample, and the test
# accuracy of the upstream model (the tree's bytes counted from the relays'
# first mirror of the model, their setup). It fails when the tree's bytes per
# sample exceed 1/N of the star's (N workers per relay) or its accuracy is
# more than DEMO_TREE_MAX_GAP (0.01) below the star's.
#
# Exact sync rounds: each tree worker runs `ps-train work --sync-rounds`: it
# pushes one gradient and waits (PS.PULL MINVERSION) for the model its round
# produced, so every round is N gradients computed on the newest model and
# the relay sends one upstream push (and one pull) per N worker steps:
# exactly 1/N of the star's per-step traffic. SGD (lr 0.02) by default; the
# relay sends the round's sum, one SGD step of which is N steps to first
# order; with Adam (DEMO_OPTIM=adam DEMO_LR=0.001) it is one step of an N
# times larger batch. Both stay within 1 point of the star at N = 2 and 4
# (docs/benchmarks.md "Tree topology"). DEMO_TREE_SYNC=0 runs the workers
# free instead: a round then sums the k gradients that came meanwhile (k ~5
# at N = 2, ~11.5 at N = 4 on 2 cores), fewer bytes, but N = 4 with SGD and
# Adam at N = 2 lose 1.5-7 points (docs/design.md).
#
# Environment: REDIS_SERVER, DEMO_PER_RELAY (2), DEMO_EPOCHS (10, even), DEMO_OPTIM (sgd),
# DEMO_LR (0.02), DEMO_TREE_LR (DEMO_LR), DEMO_BATCH (64), DEMO_LAYERS
# (784,128,10), DEMO_DATA, DEMO_TREE_MAX_GAP (0.01), DEMO_TREE_SYNC (1).
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
PS_TRAIN="$REPO/build/ps-train"
PS_RELAY="$REPO/build/ps-relay"
MODULE="$REPO/build/ps.so"
SERVER=${REDIS_SERVER:-redis-server}
EPOCHS=${DEMO_EPOCHS:-10}
for f in "$PS_TRAIN" "$PS_RELAY" "$MODULE"; do
    [ -e "$f" ] || { echo "demo-tree: $f is missing: run make first" >&2; exit 1; }
done
[ $((EPOCHS % 2)) -eq 0 ] || { echo "demo-tree: DEMO_EPOCHS must be even" >&2; exit 1; }
PER=${DEMO_PER_RELAY:-2}
case "$PER" in
    [1-9]) ;;
    *) echo "demo-tree: DEMO_PER_RELAY must be 1..9" >&2; exit 1 ;;
esac
NW=$((2 * PER))

. "$REPO/scripts/demo-procs.sh"
demo_procs_init tree

# start_server NAME -> sets PORT; the server runs in $DIR/NAME (not in a
# subshell: its pid must reach PIDS, and its output must not hold a pipe).
start_server() {
    local name=$1
    PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    mkdir -p "$DIR/$name"
    "$SERVER" --port "$PORT" --bind 127.0.0.1 --dir "$DIR/$name" --save "" --appendonly no \
        --daemonize no --logfile "$DIR/$name/redis.log" --loadmodule "$MODULE" \
        >/dev/null 2>&1 </dev/null &
    PIDS+=($!)
    for _ in $(seq 100); do
        redis-cli -p "$PORT" ping >/dev/null 2>&1 && return 0
        sleep 0.05
    done
    echo "demo-tree: redis-server $name did not start" >&2
    exit 1
}

# net_bytes PORT -> net_input_bytes + net_output_bytes of that server
net_bytes() {
    redis-cli -p "$1" info stats | tr -d '\r' |
        awk -F: '/^total_net_input_bytes|^total_net_output_bytes/ {s += $2} END {printf "%.0f\n", s}'
}

LR=${DEMO_LR:-0.02}
TREE_LR=${DEMO_TREE_LR:-$LR}
JOB_FLAGS=(--layers "${DEMO_LAYERS:-784,128,10}" --optim "${DEMO_OPTIM:-sgd}" --batch "${DEMO_BATCH:-64}" ${DEMO_DATA:+--data "$DEMO_DATA"})
WORK_FLAGS=(--overlap 0 --interval-ms 5000 --progress line)
# Exact sync rounds: each tree worker pushes once and waits (MINVERSION) for
# the model its round produced upstream, longer than the relay's round
# timeout, so a round is N gradients of the same model. The round timeout is
# for a dead worker; it is long here because a round closed short by a late
# (loaded, not dead) worker costs one more upstream push and pull, and exact
# rounds leave the bytes no slack below 1/N. DEMO_TREE_SYNC=0
# lets the workers run free (a round sums whatever came meanwhile).
TREE_WORK_FLAGS=("${WORK_FLAGS[@]}")
[ "${DEMO_TREE_SYNC:-1}" = 0 ] || TREE_WORK_FLAGS+=(--sync-rounds 10000)

# eval_acc PORT JOB -> test accuracy of the model on that server
eval_acc() {
    "$PS_TRAIN" eval --addr "127.0.0.1:$1" --job "$2" | tee -a "$DIR/eval.log" |
        sed -n 's/.*test_acc=\([0-9.]*\).*/\1/p' | tail -1
}

# ---- star --------------------------------------------------------------------
start_server star
STAR=$PORT
echo "demo-tree: star: one server on 127.0.0.1:$STAR, $NW workers, $EPOCHS epochs"
"$PS_TRAIN" init --addr "127.0.0.1:$STAR" --job star --epochs "$EPOCHS" "${JOB_FLAGS[@]}" \
    --lr "$LR" >/dev/null
b0=$(net_bytes "$STAR")
W=()
for i in $(seq "$NW"); do
    "$PS_TRAIN" work --addr "127.0.0.1:$STAR" --job star --name "star-w$i" "${WORK_FLAGS[@]}" \
        > "$DIR/star-w$i.log" 2>&1 &
    W+=($!)
done
for p in "${W[@]}"; do wait "$p"; done
STAR_BYTES=$(( $(net_bytes "$STAR") - b0 ))
STAR_ACC=$(eval_acc "$STAR" star)

# ---- tree --------------------------------------------------------------------
start_server upstream
UP=$PORT
start_server local-1
L1=$PORT
start_server local-2
L2=$PORT
echo "demo-tree: tree: upstream 127.0.0.1:$UP; relays in front of 127.0.0.1:$L1 and" \
     "127.0.0.1:$L2, $PER workers each, $((EPOCHS / 2)) epochs per local job"
# The model lives upstream; each relay creates its local ACCUM tensors from it
# before its workers' init, which then leaves those tensors alone (NX).
"$PS_TRAIN" init --addr "127.0.0.1:$UP" --job tree --epochs "$EPOCHS" "${JOB_FLAGS[@]}" \
    --lr "$TREE_LR" >/dev/null
R=()
for i in 1 2; do
    port=$([ "$i" = 1 ] && echo "$L1" || echo "$L2")
    "$PS_RELAY" --local "127.0.0.1:$port" --upstream "127.0.0.1:$UP" --name "relay-$i" \
        --match 'tree:*' --sync --workers "$PER" --round-timeout-ms 5000 --progress-ms 5000 \
        > "$DIR/relay-$i.log" 2>&1 &
    R+=($!)
    PIDS+=($!)
done
for i in 1 2; do
    port=$([ "$i" = 1 ] && echo "$L1" || echo "$L2")
    for _ in $(seq 200); do
        grep -q '] relaying ' "$DIR/relay-$i.log" 2>/dev/null && break
        sleep 0.05
    done
    "$PS_TRAIN" init --addr "127.0.0.1:$port" --job tree --epochs $((EPOCHS / 2)) \
        "${JOB_FLAGS[@]}" --lr "$TREE_LR" > /dev/null
done
# Counted from here: each relay's start-up (SCAN, PS.INFO, the first mirror
# of the model) is the tree's setup, as init is the star's. Counting it adds
# one model pull per relay: 2 x 407 KB over 600k samples, +1.4 bytes/sample.
b0=$(net_bytes "$UP")
W=()
for i in $(seq "$NW"); do
    port=$([ "$i" -le "$PER" ] && echo "$L1" || echo "$L2")
    "$PS_TRAIN" work --addr "127.0.0.1:$port" --job tree --name "tree-w$i" "${TREE_WORK_FLAGS[@]}" \
        > "$DIR/tree-w$i.log" 2>&1 &
    W+=($!)
done
for p in "${W[@]}"; do wait "$p"; done
# SIGTERM: each relay forwards what is still summed, then exits.
for p in "${R[@]}"; do kill -TERM "$p"; wait "$p" || true; done
TREE_BYTES=$(( $(net_bytes "$UP") - b0 ))
TREE_ACC=$(eval_acc "$UP" tree)
for i in 1 2; do tail -1 "$DIR/relay-$i.log"; done

# ---- compare ------------------------------------------------------------------
SAMPLES=$(( EPOCHS * 60000 ))
python3 - "$STAR_BYTES" "$TREE_BYTES" "$SAMPLES" "$STAR_ACC" "$TREE_ACC" \
    "${DEMO_TREE_MAX_GAP:-0.01}" "$PER" <<'EOF'
import sys
sb, tb, n = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
sa, ta, gap = float(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
per = int(sys.argv[7])
print("demo-tree: upstream bytes per sample: star %.1f, tree %.1f (ratio %.3f, target <= 1/%d)"
      % (sb / n, tb / n, tb / sb, per))
print("demo-tree: test accuracy: star %.4f, tree %.4f (difference %+.4f, allowed -%.2f)"
      % (sa, ta, ta - sa, gap))
ok = tb / sb <= 1.0 / per and ta >= sa - gap
print("demo-tree: ok" if ok else "demo-tree: FAILED")
sys.exit(0 if ok else 1)
EOF
