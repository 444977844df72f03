/* relay.h -- ps-relay: the tree topology's aggregator. It sits next to a
 * local redis-server with the ps module, whose tensors it creates as ACCUM
 * tensors mirroring the upstream ones. Local workers (ps-train, unchanged)
 * pull and push those; the relay forwards their summed gradients upstream
 * as one push per round and mirrors the upstream values back.
 *
 * One cycle, per key (docs/design.md "Tree topology: exactly once across
 * relay crashes"):
 *   0. PS.TAKEWAIT key MINCOUNT k TIMEOUT t  local: sleep until a round may be due
 *   1. PS.TAKE key MINCOUNT k SEQFLOOR f MAXROUND r MAXBACKLOG b
 *                                            local: the sum becomes pending, split
 *                                            into parts of at most r gradients (or
 *                                            the next pending part is answered again)
 *   2. PS.PUSHGRAD key part ID <name> <seq>  upstream: applied once per seq; the part
 *                                            is the sum scaled by part / count
 *   3. PS.TAKEACK key seq                    local: the part is acknowledged (the
 *                                            slot dropped with its last part)
 *   4. PS.PULL key / PS.MIRROR key v data    upstream -> local
 * A relay killed anywhere in 1-3 finds the slot again at 1 after its restart
 * and resends its next part with the same seq, which the upstream
 * exactly-once table answers without applying it twice.
 *
 * Backpressure: MAXBACKLOG b makes the local server refuse a worker's push
 * (BACKLOG, which libps waits on and resends) while b gradients wait for
 * this relay, so workers pause while it is down instead of training on a
 * frozen model; a backlog that exists anyway (a restart) goes upstream in
 * parts of at most r gradients each.
 *
 * Sees libps's public header and common/ only. */

#ifndef PS_RELAY_H
#define PS_RELAY_H

#include <stdint.h>

#include <redis-ps/ps.h>

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
    long poll_ms;           /* longest single PS.TAKEWAIT while idle (default 100) */
    long max_backlog;       /* MAXBACKLOG of the local tensors; -1: 4 rounds (sync 4 x
                               --workers, async 4 x --every-pushes, time only 64) */
    long max_round;         /* MAXROUND: most gradients per upstream push; -1: sync
                               --workers, async 2 x --every-pushes, time only none (0) */
    int status;             /* print the local tensors' round counters and exit */
    long progress_ms;       /* progress line period (default 2000, 0: none) */
    long stop_timeout_ms;   /* after SIGINT/SIGTERM: the final forward's time bound
                               (default 3000): then the relay exits RELAY_EXIT_LEFT */
} relayOpts;

/* Exit status of a relay stopped by a signal before it could forward
 * everything summed (its servers unreachable for --stop-timeout-ms, or a
 * second signal): what it did not forward stays in the local server. */
#define RELAY_EXIT_LEFT 3

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
    uint64_t split_parts;   /* upstream pushes that were a part of a take split by MAXROUND */
    uint64_t largest_take;  /* most gradients one take carried (before splitting) */
    uint64_t largest_part;  /* most gradients one upstream push carried */
    uint64_t backlog_full;  /* peeks that found a key's backlog at MAXBACKLOG: its
                               workers were being refused (paused) */
    uint64_t waits;         /* PS.TAKEWAIT calls (instead of polling) */
} relayStats;

/* Runs the relay until SIGINT/SIGTERM (then forwards what is summed, for at
 * most stop_timeout_ms, and exits; a second signal ends it at once).
 * Returns the process exit code: 0 after a clean stop, 1 on a runtime
 * failure, 2 when the tensors do not fit (shape, optimizer),
 * RELAY_EXIT_LEFT when stopped with gradients not forwarded. */
int relay_run(const relayOpts *o);

#endif /* PS_RELAY_H */
