/* ring.h -- ps-relay --ring: the agent of one group of the ring topology
 * (issue #22; docs/design.md "Ring topology").
 *
 * A group is a redis-server with the ps module holding the whole model and
 * its workers (ps-train work, unchanged). One agent per group exchanges the
 * group's accumulated parameter change with the other groups around a ring
 * g0 -> g1 -> ... -> g0 of the live groups. Per round, acting for group g
 * with successor s, for every key at once:
 *   1. PS.DELTATAKE key THRESHOLD r            g: its significant change (or the
 *                                              pending take, again)
 *   2. one wave (a pipelined batch per group, all groups at once: one WAN round trip):
 *      PS.APPLYDELTA key ID g seq .. HOPS L-2  s: a new take, applied once, queued to
 *                                              forward; its answer proves s has it
 *      PS.APPLYDELTA of g's oldest forward     s
 *      entry per key (PS.DELTAFWD on g)
 *      PS.INFO key                             the groups not yet known to hold a take
 *                                              sent before (their marks)
 *   3. PS.DELTAACK on g                        only when every live group holds the take;
 *                                              after the ring re-forms (or L+2 periods)
 *                                              it is resent directly (HOPS 0) to the
 *                                              live groups that lack it
 *   4. PS.DELTAFWDACK on g of what s applied; the next entries in another wave
 * A delta thus stays pending at its origin until every live group has it: a
 * killed agent or a dead group loses nothing, and (origin, seq) dedup makes
 * every resend harmless.
 *
 * Sees libps's public header and common/ only. */

#ifndef PS_RING_H
#define PS_RING_H

#include <stdint.h>

/* What the command line sets (ps-relay.c). */
typedef struct ringOpts {
    const char *ring;        /* "name=host:port,name=host:port,..." in ring order */
    const char *self;        /* this group's name */
    const char *keys;        /* comma separated tensor keys */
    const char *match;       /* or: SCAN pattern on this group's server */
    double threshold;        /* relative significance (default 0.01; 0: every change) */
    long every_ms;           /* round period (default 100) */
    long dead_ms;            /* a group unreachable this long is out of the ring (3000) */
    long progress_ms;        /* progress line period (default 2000, 0: none) */
    long barrier_timeout_ms; /* --barrier gives up after this (default 60000) */
    long long maxqueue;      /* MAXQUEUE of PS.RING TRACK (-1: the module's default) */
    long long maxlag;        /* MAXLAG of PS.RING TRACK: own pushes not yet in an acked take
                                before the group's workers wait (default 16; 0: no bound) */
    long long flush_ms;      /* > 0: each key's first take after this many ms since its last
                                such take has THRESHOLD 0 (its whole accumulated change) */
    int mesh;                /* send each take straight to every group (no forwarding) */
    int barrier;             /* ship every remaining delta of every group, then exit 0 */
    int join;                /* copy the model from a live neighbour, then enter the ring */
    int leave;               /* ship this group's change to everyone, then UNTRACK and exit */
    int adapt;               /* adapt the threshold to the link (Gaia-style) */
    int reorder;             /* ring order by measured RTTs (G <= 6) */
    const char *log_json;    /* append one JSON line per event to this file */
    long load_ms;            /* load window: pushes/s and CPU over this many ms (1000) */
    int pick;                /* print the least-loaded group's address and exit */
} ringOpts;

/* Runs the agent until SIGINT/SIGTERM (or, --barrier, until every group is
 * drained). Exit code: 0 stopped or drained, 1 runtime failure, 2 usage or
 * groups that do not fit (model shape, optimizer or values differ). */
int ring_run(const ringOpts *o);

/* --pick: samples every group's load twice, load_ms apart, prints each on
 * stderr and the least-loaded group's address on stdout. Exit code: 0, 1 no
 * group answers, 2 usage. */
int ring_pick(const ringOpts *o);

#endif /* PS_RING_H */
