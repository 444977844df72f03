#!/usr/bin/env bash
# cluster.sh -- a 3-master + 3-replica Redis Cluster with the ps module, as
# docs/operations.md sections 0-2 build it by hand (same files, same settings):
#
#   scripts/cluster.sh start    write the configs, start 6 nodes, create the cluster, wait
#   scripts/cluster.sh status   the nodes (address, role, slots)
#   scripts/cluster.sh stop     SHUTDOWN every node, wait for each pid to exit
#
# Environment: CLUSTER_DIR ($HOME/redis-ps-cluster), BASE_PORT (7000: nodes on
# BASE_PORT..BASE_PORT+5, cluster bus on +10000), PS_SO (the module; default: this
# checkout's build/ps.so, else /usr/local/lib/redis-ps/ps.so), APPENDFSYNC (everysec;
# always, or no for appendonly no: docs/operations.md section 5 says what each loses).
# The admin password is in $CLUSTER_DIR/admin.pw: REDISCLI_AUTH=$(cat ...) redis-cli --user admin.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
CLUSTER_DIR=${CLUSTER_DIR:-$HOME/redis-ps-cluster}
BASE_PORT=${BASE_PORT:-7000}
APPENDFSYNC=${APPENDFSYNC:-everysec}
if [ -z "${PS_SO:-}" ]; then
    PS_SO=$REPO/build/ps.so
    [ -f "$PS_SO" ] || PS_SO=/usr/local/lib/redis-ps/ps.so
fi
PORTS=$(seq "$BASE_PORT" $((BASE_PORT + 5)))

die() { echo "cluster.sh: $*" >&2; exit 1; }
cli() { REDISCLI_AUTH=$(cat "$CLUSTER_DIR/admin.pw") redis-cli --user admin "$@"; }

write_configs() {
    mkdir -p "$CLUSTER_DIR"
    for f in admin.pw repl.pw; do
        [ -s "$CLUSTER_DIR/$f" ] ||
            (umask 077; head -c 24 /dev/urandom | base64 | tr -d '/+=' > "$CLUSTER_DIR/$f")
    done
    case "$APPENDFSYNC" in
        everysec|always) aof="appendonly yes
appendfsync $APPENDFSYNC
aof-use-rdb-preamble yes" ;;
        no) aof="appendonly no" ;;
        *) die "APPENDFSYNC is everysec, always or no" ;;
    esac
    # The settings and why: docs/operations.md, "1. The configuration".
    cat > "$CLUSTER_DIR/common.conf" <<EOF
loadmodule $PS_SO
cluster-enabled yes
cluster-node-timeout 2000
bind 127.0.0.1
protected-mode yes
user default off
user admin on >$(cat "$CLUSTER_DIR/admin.pw") ~* &* +@all
user replication on >$(cat "$CLUSTER_DIR/repl.pw") +psync +replconf +ping
masteruser replication
masterauth $(cat "$CLUSTER_DIR/repl.pw")
$aof
save ""
maxmemory-policy noeviction
client-output-buffer-limit replica 1gb 512mb 60
repl-backlog-size 256mb
repl-diskless-sync yes
enable-debug-command local
EOF
    for port in $PORTS; do
        mkdir -p "$CLUSTER_DIR/$port"
        cat > "$CLUSTER_DIR/$port/redis.conf" <<EOF
include $CLUSTER_DIR/common.conf
port $port
dir $CLUSTER_DIR/$port
cluster-config-file nodes.conf
pidfile $CLUSTER_DIR/$port/redis.pid
logfile $CLUSTER_DIR/$port/redis.log
daemonize yes
EOF
    done
}

wait_for() {   # wait_for SECONDS CMD...: run CMD every 0.2 s until it succeeds
    local n=$(( $1 * 5 )); shift
    until "$@" > /dev/null 2>&1; do
        n=$((n - 1)); [ $n -gt 0 ] || return 1
        sleep 0.2
    done
}
answers() { cli -p "$1" ping | grep -q PONG; }
cluster_ok() { cli -p "$1" cluster info | grep -q '^cluster_state:ok'; }
linked() { cli -p "$1" info replication | grep -qE '^role:master|master_link_status:up'; }

start() {
    [ -f "$PS_SO" ] || die "no module at $PS_SO: run make, or set PS_SO"
    write_configs
    for port in $PORTS; do
        if [ -f "$CLUSTER_DIR/$port/redis.pid" ] && kill -0 "$(cat "$CLUSTER_DIR/$port/redis.pid")" 2>/dev/null; then
            die "a node is already running on $port (pid $(cat "$CLUSTER_DIR/$port/redis.pid")): stop first"
        fi
        redis-server "$CLUSTER_DIR/$port/redis.conf"
    done
    for port in $PORTS; do wait_for 30 answers "$port" || die "node $port does not answer: see $CLUSTER_DIR/$port/redis.log"; done
    # A node restarted from its nodes.conf is a member already: create only a new cluster.
    if ! cli -p "$BASE_PORT" cluster info | grep -q '^cluster_known_nodes:6'; then
        cli --cluster create $(for p in $PORTS; do printf '127.0.0.1:%s ' "$p"; done) \
            --cluster-replicas 1 --cluster-yes > "$CLUSTER_DIR/create.log" 2>&1 ||
            { cat "$CLUSTER_DIR/create.log" >&2; die "redis-cli --cluster create failed"; }
    fi
    for port in $PORTS; do
        wait_for 60 cluster_ok "$port" || die "node $port: cluster_state is not ok"
        wait_for 60 linked "$port" || die "node $port: replica link not up"
    done
    echo "cluster.sh: 3 masters + 3 replicas on 127.0.0.1:$BASE_PORT..$((BASE_PORT + 5)), data in $CLUSTER_DIR"
    echo "cluster.sh: seeds 127.0.0.1:$BASE_PORT,127.0.0.1:$((BASE_PORT + 1)),127.0.0.1:$((BASE_PORT + 2)); admin password in $CLUSTER_DIR/admin.pw"
    status
}

status() {
    cli -p "$BASE_PORT" cluster nodes | sort -k2 |
        awk '{split($2, a, "@"); if ($3 ~ /master/) print "  " a[1] " master  slots " $9; else print "  " a[1] " replica of " $4}'
}

stop() {
    local pids=()
    for port in $PORTS; do
        f=$CLUSTER_DIR/$port/redis.pid
        [ -f "$f" ] || continue
        pid=$(cat "$f")
        kill -0 "$pid" 2>/dev/null || continue
        cli -p "$port" shutdown > /dev/null 2>&1 || kill "$pid" 2>/dev/null || true
        pids+=("$pid:$port")
    done
    # A replica writing its first AOF after a sync refuses SHUTDOWN ("can't exit"): ask
    # again every second until it is done.
    for pp in "${pids[@]}"; do
        pid=${pp%%:*}
        for i in $(seq 300); do
            kill -0 "$pid" 2>/dev/null || break
            [ $((i % 10)) = 0 ] && { cli -p "${pp##*:}" shutdown > /dev/null 2>&1 || true; }
            sleep 0.1
        done
        if kill -0 "$pid" 2>/dev/null; then echo "cluster.sh: pid $pid still running: SIGKILL" >&2; kill -9 "$pid"; fi
    done
    echo "cluster.sh: stopped ${#pids[@]} nodes (data kept in $CLUSTER_DIR)"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    *) echo "usage: scripts/cluster.sh start|stop|status  (env CLUSTER_DIR BASE_PORT PS_SO APPENDFSYNC)" >&2; exit 2 ;;
esac
