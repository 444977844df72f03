#!/usr/bin/env bash
# valgrind-session.sh MODULE.so -- runs Debian's redis-server under valgrind
# with the module loaded, drives every kind of state change (create with each
# optimizer, push dense/ROWS/TOPK/ID, pull in every format, snapshot, rollback,
# SAVE + DEBUG RELOAD, DUMP/RESTORE incl. corrupt payloads, COPY, AOF rewrite,
# DEL, FLUSHALL), shuts down, and fails on an invalid access or on memory
# 'definitely lost' in a stack with a frame of the module (Redis's own
# exit-time leaks are not ours). The logs (one per process: the server and its
# fork children) are kept in build/valgrind-server/.
set -euo pipefail
MOD=$(readlink -f "${1:?usage: valgrind-session.sh path/to/ps.so}")
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LOGDIR="$ROOT/build/valgrind-server"
rm -rf "$LOGDIR"; mkdir -p "$LOGDIR"
LOG="$LOGDIR/all.log"
DIR=$(mktemp -d /tmp/ps-valgrind-XXXXXX)
PORT=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cleanup() { [ -n "${PID:-}" ] && kill -9 "$PID" 2>/dev/null || true; rm -rf "$DIR"; }
trap cleanup EXIT
valgrind --leak-check=full --show-leak-kinds=definite --num-callers=30 \
  --suppressions="$ROOT/fuzz/valgrind-redis.supp" --log-file="$LOGDIR/vg.%p.log" \
  /usr/bin/redis-server --port "$PORT" --bind 127.0.0.1 --dir "$DIR" --save "" --appendonly no \
  --enable-debug-command local --loadmodule "$MOD" --logfile redis.log &
PID=$!
cli() { redis-cli -p "$PORT" "$@"; }
for _ in $(seq 100); do cli PING >/dev/null 2>&1 && break; sleep 0.2; done
f4() { printf '\x00\x00\x80\x3f%.0s' 1 2 3 4 5 6; }   # six float32 1.0
row() { printf '\x01\x00\x00\x00'; }                 # ROWS blob: row 1
{
for o in SGD MOMENTUM NESTEROV ADAGRAD RMSPROP ADAM ADAMW; do
  cli PS.CREATE "t:$o" SHAPE 3 2 OPTIM "$o" INIT UNIFORM -1 1 SEED 1
  cli PS.PUSHGRAD "t:$o" VALUES 1 2 3 4 5 6 ID w 1
  cli PS.PUSHGRAD "t:$o" VALUES 1 2 3 4 5 6 ID w 1
  cli PS.SNAPSHOT "t:$o" s1
  f4 | cli -x PS.PUSHGRAD "t:$o"
  row | cli -x PS.PULL "t:$o" ROWS
  cli PS.PULL "t:$o" FORMAT VALUES; cli PS.PULL "t:$o" FORMAT F16; cli PS.PULL "t:$o" FORMAT I8
  cli PS.ROLLBACK "t:$o" s1
  cli PS.SNAPSHOT "t:$o" s2; cli PS.DROPSNAPSHOT "t:$o" s1
  cli PS.CONFIG "t:$o" LR 0.5
  cli PS.INFO "t:$o"
done
cli PS.CREATE sync SHAPE 4 SYNC 2 TIMEOUT 100
cli PS.PUSHGRAD sync VALUES 1 1 1 1
sleep 0.5
cli PS.PULL sync MINVERSION 5 TIMEOUT 50
cli PS.PUSHGRAD t:SGD VALUES nan 1 1 1 1 1
cli SAVE; cli DEBUG RELOAD
cli COPY t:ADAM t:copy; cli PS.PUSHGRAD t:copy VALUES 1 1 1 1 1 1
/usr/bin/python3 - "$PORT" <<'PY'
import sys, redis
r = redis.Redis(port=int(sys.argv[1]))
p = r.dump("t:ADAMW")
r.restore("t:restored", 0, p)
for i in range(10, len(p) - 10, 7):   # corrupt payloads: bad CRC, refused
    try: r.restore("t:bad", 0, p[:i] + bytes([p[i] ^ 0xFF]) + p[i + 1:], replace=True)
    except redis.ResponseError: pass
PY
cli CONFIG SET appendonly yes; sleep 1; cli BGREWRITEAOF; sleep 1
cli DEL t:SGD t:copy; cli FLUSHALL
cli SHUTDOWN NOSAVE
} > "$DIR/session.out" 2>&1 || true
wait "$PID" || true
PID=
sleep 1  # fork children (SAVE/AOF rewrite) have exited
cat "$LOGDIR"/vg.*.log > "$LOG"
echo "valgrind-session: $(grep -c '' "$DIR/session.out") reply lines; log in $LOG"
grep -E "ERROR SUMMARY|definitely lost:" "$LOG" | sed 's/^==[0-9]*== /  /'
bad=0
if grep -qE "Invalid (read|write|free)|uninitialised|Mismatched free" "$LOG"; then
  echo "valgrind-session: invalid accesses:"; grep -B2 -A12 -E "Invalid (read|write|free)|uninitialised" "$LOG" | head -60; bad=1
fi
# A 'definitely lost' record whose stack has a frame in the module.
if awk '/definitely lost in/{rec=1; buf=""} rec{buf=buf"\n"$0} rec && /^==[0-9]+== $/{ if (buf ~ /ps\.so|module\/|common\//) {print buf; found=1}; rec=0} END{exit !found}' "$LOG"; then
  echo "valgrind-session: leaks in module frames (above)"; bad=1
fi
[ $bad = 0 ] && echo "valgrind-session: OK (no invalid accesses, no definite leaks in module frames)"
exit $bad
