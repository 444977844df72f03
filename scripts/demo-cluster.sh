#!/usr/bin/env bash
# demo-cluster.sh -- `make demo-cluster`: 3 masters + 3 replicas with the ps
# module on loopback (redis-cli --cluster create --cluster-replicas 1), one
# training run whose tensors are split into small partitions so the masters
# share them, a table of where the partitions live, then every server is
# stopped by pid.
#
# By default (DEMO_KILL_MASTER=1; 0 turns it off) the master holding W0's
# first partition is killed (SIGKILL) mid-run; its replica is promoted and
# training finishes there (pushes carry ID client seq, so a resent push is
# not applied twice). The demo prints the failover time, the workers'
# retries, the accuracy, and the per-partition count of pushes applied
# twice or lost (each partition's version against the pushes the workers
# saw acknowledged: their ACKED lines).
#
# Durability (DEMO_DURABILITY): "safe" (default) runs every node with
# appendonly yes + appendfsync always and the workers with --wait 1: no
# acknowledged push is lost by a failover, nor by a master restarted (by a
# supervisor) before its replica could take over, which a cluster without
# persistence turns into an empty shard (docs/operations.md, section 5). "none" is the
# fastest setting (no AOF, no WAIT): a failover may lose the pushes the
# replica had not received, and a fast restart loses the node's tensors.
#
# Environment: REDIS_SERVER, DEMO_DURABILITY (safe), DEMO_WORKERS (2), DEMO_EPOCHS (10), DEMO_LAYERS
# (784,128,10), DEMO_OPTIM (adam), DEMO_LR (0.001), DEMO_PARTITION_BYTES
# (65536: W0 = 128 rows x 3136 bytes becomes 7 keys), DEMO_OVERLAP (0),
# DEMO_MIN_ACC (0.87).
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
REDIS_SERVER=${REDIS_SERVER:-redis-server}
PS_TRAIN="$REPO/build/ps-train"
MODULE="$REPO/build/ps.so"
for f in "$PS_TRAIN" "$MODULE"; do
    [ -f "$f" ] || { echo "demo-cluster: $f is missing: run make first" >&2; exit 1; }
done

. "$REPO/scripts/demo-procs.sh"
demo_procs_init cluster

# Six free loopback ports P whose cluster bus port P+10000 is free too.
PORTS=($(python3 - <<'PY'
import socket
ports = []
def free(p):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p)); return True
    except OSError:
        return False
    finally:
        s.close()
while len(ports) < 6:
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close()
    if p + 10000 <= 65535 and p not in ports and free(p + 10000):
        ports.append(p)
print(" ".join(map(str, ports)))
PY
))

case "${DEMO_DURABILITY:-safe}" in
    safe) PERSIST=(--appendonly yes --appendfsync always); WAIT=1 ;;
    none) PERSIST=(--appendonly no); WAIT=0 ;;
    *) echo "demo-cluster: DEMO_DURABILITY is safe or none" >&2; exit 2 ;;
esac
echo "demo-cluster: durability ${DEMO_DURABILITY:-safe}: ${PERSIST[*]}, workers --wait $WAIT"

ADDRS=()
for port in "${PORTS[@]}"; do
    mkdir -p "$DIR/$port"
    "$REDIS_SERVER" --port "$port" --bind 127.0.0.1 --dir "$DIR/$port" --save "" \
        "${PERSIST[@]}" --daemonize no --logfile "$DIR/$port/redis.log" \
        --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 2000 \
        --loadmodule "$MODULE" &
    PIDS+=($!)
    ADDRS+=("127.0.0.1:$port")
done
for port in "${PORTS[@]}"; do
    for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done
done
echo "demo-cluster: 6 servers (pids ${PIDS[*]}) on ports ${PORTS[*]}"
redis-cli --cluster create "${ADDRS[@]}" --cluster-replicas 1 --cluster-yes >"$DIR/create.log" 2>&1 ||
    { cat "$DIR/create.log" >&2; exit 1; }
# Ready when every node says cluster_state:ok and the 3 replicas have their link up.
for _ in $(seq 300); do
    ok=0
    for port in "${PORTS[@]}"; do
        redis-cli -p "$port" cluster info 2>/dev/null | grep -q cluster_state:ok && ok=$((ok + 1))
        redis-cli -p "$port" info replication 2>/dev/null | grep -q master_link_status:up && ok=$((ok + 1))
    done
    [ $ok -eq 9 ] && break
    sleep 0.1
done
[ $ok -eq 9 ] || { echo "demo-cluster: cluster not ready (cluster_state:ok + 3 replicas linked)" >&2; exit 1; }
echo "demo-cluster: cluster ok:"
redis-cli -p "${PORTS[0]}" cluster nodes | sort -k2 |
    awk '{split($2,a,"@"); if ($3 ~ /master/) print "  " a[1] " master  slots " $9; else print "  " a[1] " replica of " $4}'

SEEDS=$(IFS=,; echo "${ADDRS[*]:0:3}")
ARGS=(--addr "$SEEDS" --job demo)
"$PS_TRAIN" init "${ARGS[@]}" --layers "${DEMO_LAYERS:-784,128,10}" --optim "${DEMO_OPTIM:-adam}" \
    --lr "${DEMO_LR:-0.001}" --epochs "${DEMO_EPOCHS:-10}" \
    --partition-bytes "${DEMO_PARTITION_BYTES:-65536}"
echo "demo-cluster: where the partitions live:"
"$PS_TRAIN" status "${ARGS[@]}" | sed -n '/^partitions:/,$p'

set +e
# --overlap 0 as in make demo (scripts/demo.sh): the overlapped pull adds a
# step of staleness, and with it the accuracy spread reaches below 0.87 (one
# run gave 0.8699); without it 5 runs on the 2-core machine, master killed
# mid-run, gave 0.8814 0.8820 0.8829 0.8777 0.8831.
"$PS_TRAIN" run "${ARGS[@]}" --workers "${DEMO_WORKERS:-2}" --interval-ms 2000 --wait "$WAIT" \
    --overlap "${DEMO_OVERLAP:-0}" \
    --min-acc "${DEMO_MIN_ACC:-0.87}" > >(tee "$DIR/run.log") 2>&1 &
RUN=$!
if [ "${DEMO_KILL_MASTER:-1}" = 1 ]; then
    sleep "${DEMO_KILL_AFTER:-4}"
    victim=$("$PS_TRAIN" status "${ARGS[@]}" | awk '/demo:W0:0 /{print $NF}')
    vport=${victim##*:}
    for i in "${!PORTS[@]}"; do
        if [ "${PORTS[$i]}" = "$vport" ]; then
            replica=$(redis-cli -p "$vport" cluster nodes | awk -v id="$(redis-cli -p "$vport" cluster myid)" '$4 == id {split($2,a,"@"); print a[1]}')
            echo "demo-cluster: killing master $victim (pid ${PIDS[$i]}) mid-run; its replica is $replica"
            t0=$(date +%s.%N)
            kill -9 "${PIDS[$i]}"
            wait "${PIDS[$i]}" 2>/dev/null || true
            for _ in $(seq 600); do
                redis-cli -p "${replica##*:}" role 2>/dev/null | head -1 | grep -q master && break
                sleep 0.05
            done
            echo "demo-cluster: failover: $replica is master after $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}') s; the workers retry and follow it"
        fi
    done
fi
wait $RUN
rc=$?
set -e
echo "demo-cluster: after training:"
"$PS_TRAIN" status "${ARGS[@]}" | tee "$DIR/status.log" | sed -n '/^tasks:/p;/^model pushes/p;/^partitions:/,$p'
# Count: every model push of a worker covers every partition once, so each
# partition's version must equal the sum of the workers' model_pushes.
acked=$(sed -n 's/.*ACKED .*model_pushes=\([0-9]*\).*/\1/p' "$DIR/run.log" | awk '{s += $1} END {if (NR) print s}')
retries=$(sed -n 's/.*ACKED .* retries=\([0-9]*\).*/\1/p' "$DIR/run.log" | awk '{s += $1} END {if (NR) print s}')
# Pushes acknowledged while a shard had no replica (after the kill; the demo does not restart the old master,
# which would rejoin as a replica): not lost, but they lived on one node (README / docs/operations.md).
unrep=$(sed -n 's/.*ACKED .* unreplicated=\([0-9]*\).*/\1/p' "$DIR/run.log" | awk '{s += $1} END {print s + 0}')
if [ -n "$acked" ]; then
    awk -v acked="$acked" -v retries="$retries" -v unrep="$unrep" -v wait="$WAIT" '/^  [^ ]+ +rows/ {
            for (i = 1; i < NF; i++) if ($i == "version") v = $(i + 1)
            if (v > acked) twice += v - acked; else lost += acked - v; n++ }
        END { printf "demo-cluster: %d partitions, %d acknowledged pushes each, worker retries %d: applied twice %d, lost %d\n",
                     n, acked, retries, twice, lost
              if (wait > 0) printf "demo-cluster: partition pushes acknowledged without a replica (the promoted replica has none: the demo does not restart the killed master): %d over all workers; lost 0 counts them as kept, a second failure of that node would lose them\n", unrep }' "$DIR/status.log"
fi
grep -h "test_acc" "$DIR/run.log" | tail -1 | sed 's/^/demo-cluster: /'
if [ $rc -eq 0 ]; then echo "demo-cluster: ok"; else echo "demo-cluster: FAILED (ps-train exit $rc)" >&2; fi
exit $rc
