# demo-procs.sh -- sourced by the multi-process demos (demo-cluster,
# demo-tree): a temp dir DIR for their servers, and a PIDS array whose
# processes are stopped (by pid) and the dir removed when the script exits;
# Ctrl-C exits 130.
#
#   . scripts/demo-procs.sh
#   demo_procs_init TAG      # -> DIR; append each started pid to PIDS

PIDS=()
DIR=

demo_procs_cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    [ -n "$DIR" ] && rm -rf "$DIR"
}

demo_procs_init() {
    DIR=$(mktemp -d "${TMPDIR:-/tmp}/ps-demo-$1.XXXXXX")
    trap demo_procs_cleanup EXIT
    trap 'exit 130' INT TERM
}
