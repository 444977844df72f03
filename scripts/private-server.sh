# private-server.sh -- sourced by the demo and benchmark scripts: starts a
# private redis-server with the ps module on a free loopback port in a temp
# dir, and stops it (by pid) and removes the dir when the script exits.
#
#   . scripts/private-server.sh
#   private_server_start TAG MODULE [extra redis-server args...]
#   # -> PS_PORT, PS_PID, PS_DIR; the EXIT trap stops the server
#
# TAG names the temp dir and prefixes messages. REDIS_SERVER overrides the
# binary.

PS_PID=
PS_DIR=
PS_PORT=

private_server_stop() {
    if [ -n "$PS_PID" ] && kill -0 "$PS_PID" 2>/dev/null; then
        kill "$PS_PID" 2>/dev/null || true
        wait "$PS_PID" 2>/dev/null || true
    fi
    [ -n "$PS_DIR" ] && rm -rf "$PS_DIR"
    PS_PID=
}

private_server_start() {
    local tag=$1 module=$2
    shift 2
    local server=${REDIS_SERVER:-redis-server}
    command -v "$server" >/dev/null || { echo "$tag: $server not found (apt-get install redis-server)" >&2; exit 1; }
    [ -f "$module" ] || { echo "$tag: $module is missing: run make first" >&2; exit 1; }
    PS_DIR=$(mktemp -d "${TMPDIR:-/tmp}/ps-$tag.XXXXXX")
    trap private_server_stop EXIT
    trap 'exit 130' INT TERM
    # A free loopback port: bind port 0 and read what the kernel chose.
    PS_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    "$server" --port "$PS_PORT" --bind 127.0.0.1 --dir "$PS_DIR" --save "" --appendonly no \
        --daemonize no --logfile "$PS_DIR/redis.log" --loadmodule "$module" "$@" &
    PS_PID=$!
    local _
    for _ in $(seq 100); do
        redis-cli -p "$PS_PORT" ping >/dev/null 2>&1 && return 0
        kill -0 "$PS_PID" 2>/dev/null || { echo "$tag: redis-server exited:" >&2; tail "$PS_DIR/redis.log" >&2; exit 1; }
        sleep 0.05
    done
    echo "$tag: redis-server did not answer PING in 5 s" >&2
    exit 1
}
