/* relay.h -- ps-relay: the tree topology's aggregator. It sits next to a
 * local redis-server with the ps module, whose tensors it creates as ACCUM
 * tensors mirroring the upstream ones. Local workers (ps-train, unchanged)
 * pull and push those; the relay forwards their summed gradients upstream
 * as one push per round and mirrors the upstream values back.
 *
 * One cycle, per key (docs/design.md "Tree topology: exactly once across
 * relay crashes"):
 *   1. PS.TAKE key MINCOUNT k SEQFLOOR f     local: the sum becomes pending
 *                                            (or the pending slot is answered again)
 *   2. PS.PUSHGRAD key sum ID <name> <seq>   upstream: applied once per seq
 *   3. PS.TAKEACK key seq                    local: the slot is dropped
 *   4. PS.PULL key / PS.MIRROR key v data    upstream -> local
 * A relay killed anywhere in 1-3 finds the slot again at 1 after its restart
 * and resends it with the same seq, which the upstream exactly-once table
 * answers without applying it twice.
 *
 * Sees libps's public header and common/ only. */

#ifndef PS_RELAY_H
#define PS_RELAY_H

#include <stdint.h>

#include <redis-ps/ps.h>

#define RELAY_MAX_KEYS 4096

/* What the command line sets (ps-relay.c); 0 / NULL means the default. */
typedef struct relayOpts {
    const char *local;      /* host:port of the local server */
    const char *upstream;   /* host:port[,...] of the upstream server, cluster or relay */
    const char *name;       /* the exactly-once client id of this relay upstream */
    const char *keys;       /* comma separated tensor keys */
    const char *match;      /* or: SCAN pattern on a standalone upstream */
    const char *optim;      /* refuse upstream tensors with another optimizer */
    int sync;               /* 1: a round is --workers pushes (or --round-timeout-ms) */
    long workers;           /* sync: local workers per round */
    long round_timeout_ms;  /* sync: close a short round after this (default 2000) */
    long every_ms;          /* async: forward every T ms (default 100) */
    long every_pushes;      /* async: or as soon as K pushes are summed (0: time only) */
    int mean;               /* forward the mean instead of the sum */
    long pull_ms;           /* async: pull upstream at least this often (default 200);
                               sync mirrors after each forwarded round only */
    long poll_ms;           /* idle poll of the local tensors (default 2) */
    long progress_ms;       /* progress line period (default 2000, 0: none) */
} relayOpts;

/* Counters of one relay run (printed on the progress lines). */
typedef struct relayStats {
    uint64_t local_pushes;  /* local pushes forwarded (sum of the counts taken) */
    uint64_t up_pushes;     /* upstream pushes acknowledged */
    uint64_t resends;       /* pending slots found again (a crash or error before the ack) */
    uint64_t bytes_local;   /* float32 bytes the local pushes carried */
    uint64_t bytes_up;      /* float32 bytes pushed upstream */
    uint64_t stale_sum;     /* sum of upstream staleness over the pushes */
    uint64_t up_version;    /* newest upstream version seen (of the first key) */
    uint64_t pulls;         /* upstream pulls mirrored */
    uint64_t uneven_rounds; /* sync: rounds with other than --workers pushes on some key
                               (closed short by the round timeout or a stop, or more:
                               workers that do not wait for their round) */
} relayStats;

/* Runs the relay until SIGINT/SIGTERM (then forwards what is summed and
 * exits). Returns the process exit code: 0 after a clean stop, 1 on a
 * runtime failure, 2 when the tensors do not fit (shape, optimizer). */
int relay_run(const relayOpts *o);

#endif /* PS_RELAY_H */
