/* ring_int.h -- the ring agent's parts (ring.h is the interface): its state
 * and what its files call of each other. Files, along the agent's sections:
 *   ring.c          ring_run: setup, then rounds; progress lines
 *   ring_util.c     messages and JSON events, ring order, connections, the
 *                   check whether a group lacks acknowledged deltas
 *   ring_probe.c    the groups of --ring, probes, who is in the ring
 *   ring_setup.c    keys, the start check, TRACK, JOIN (rejoin)
 *   ring_round.c    one round of every key: take, send, ack, forward; GAP
 *   ring_wave.c     waves: pipelined batches to several groups at once
 *   ring_barrier.c  --barrier: drained, and the groups' values compared
 *   ring_adapt.c    --adapt (threshold) and --reorder (ring order by RTT)
 *   ring_load.c     each group's load (pushes/s, workers, CPU), the least
 *                   loaded group; --pick
 *   ring_table.c    tables: the take / forward / apply of rows, a table's
 *                   start check and hash, its barrier comparison
 * Sees libps's public header and common/ only. */

#ifndef PS_RING_INT_H
#define PS_RING_INT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <redis-ps/ps.h>

#include "ring.h"

#define RING_MAX_GROUPS 64
#define RING_FWD_PER_ROUND 256 /* forward-queue entries one round moves per key */

/* A group's load (ring_load.c): the last reading and the rates over the
 * window before it. */
typedef struct ringLoad {
    int ok;                   /* the rates below are measured */
    double t;                 /* monotonic s of the last reading (0: none) */
    double pushes, cpu_s;     /* counters at the last reading */
    double pushes_s, cpu_pct; /* over the last window */
    long workers, clients;    /* at the last reading */
} ringLoad;

typedef struct ringGroup {
    char name[PS_RING_ORIGIN_MAX + 1];
    char addr[256];
    psClient *c;              /* NULL: not connected */
    long long next_connect_ms;
    int live;                 /* in the ring now */
    int ok;                   /* the last probe answered (tracked as this group) */
    int stale;                /* answers but lacks deltas this group acknowledged */
    int noprev;               /* its module has no PS.APPLYDELTA ... PREV (sent without) */
    int gap;                  /* answered GAP: lacks gap_origin's delta gap_prev of key gap_key */
    int gap_key;
    long long gap_ms;         /* monotonic ms of the GAP answer that set 'gap' */
    uint64_t gap_prev;
    char gap_origin[PS_RING_ORIGIN_MAX + 1];
    long long last_ok_ms;     /* monotonic ms of the last good probe */
    double rtt_ms;            /* EWMA of a PS.INFO round trip (-1: none yet) */
    uint64_t bytes_to;        /* delta bytes sent to this group (as successor or direct) */
    double send_s;            /* seconds spent sending them */
    uint64_t bytes_to_last;   /* at the last progress line */
    double send_s_last;
    psKeyInfo *info;          /* per key: the last probe's PS.INFO */
    ringLoad load;
} ringGroup;

typedef struct ringKey {
    char *name;
    size_t n;                 /* a tensor's elements */
    uint32_t dim;             /* a table's floats per row (0: a tensor) */
    uint64_t seqfloor;        /* this group's SEQFLOOR (0: none) */
    long long flushed_ms;     /* --flush-ms: monotonic ms of the last take with THRESHOLD 0 */
    /* per acting group: the pending take last sent, when and in which epoch */
    uint64_t sent_seq[RING_MAX_GROUPS];
    long long sent_ms[RING_MAX_GROUPS];  /* monotonic ms (late: (L+2) periods after) */
    uint64_t sent_epoch[RING_MAX_GROUPS];
    uint64_t confirmed[RING_MAX_GROUPS]; /* groups (bits) known to hold sent_seq: they answered
                                            its APPLYDELTA (1, or 0 a repeat), or a PS.INFO
                                            read after it showed their mark at it */
} ringKey;

/* Where a round's time goes (progress lines, --log-json "rounds"): per
 * phase, seconds, WAN round trips (a wait for replies of other groups: a
 * lone call, or a pipelined wave to any number of them, counts 1) and
 * commands sent to other groups. */
enum { RING_PH_PROBE, RING_PH_LOAD, RING_PH_TAKE, RING_PH_SEND, RING_PH_ACK, RING_PH_FWD,
       RING_PH_N };
typedef struct ringTiming {
    uint64_t rounds;
    double round_s, sleep_s;      /* whole rounds (sleep included), and their sleeps */
    double s[RING_PH_N];
    uint64_t rtts[RING_PH_N], cmds[RING_PH_N];
} ringTiming;

/* A wave (ring_wave.c): per group, the ops of one pipelined batch. */
typedef struct ringWave {
    psRingOp *ops;                /* ng * cap: group i's at i * cap */
    int *key, *tag;               /* per op: the key index and the caller's tag */
    size_t cap;
    size_t n[RING_MAX_GROUPS];    /* ops queued per group */
    double ms[RING_MAX_GROUPS];   /* the last run: send to the group's last reply */
} ringWave;

typedef struct ringStats {
    uint64_t takes, acks, sent, resends, forwarded, dups, elems_sent, bytes_sent, flushes;
} ringStats;

typedef struct ring {
    const ringOpts *o;
    ringGroup g[RING_MAX_GROUPS];
    int ng, self;
    int order[RING_MAX_GROUPS];   /* ring order: indices into g */
    ringKey *keys;
    int nkeys;
    uint64_t round, epoch;
    double threshold;
    double round_send_s;          /* seconds this round spent sending deltas */
    ringStats st;
    ringTiming tm, tm_last;       /* since the start; at the last progress line */
    int ph;                       /* the phase a send_delta counts in (RING_PH_*) */
    int awaiting;                 /* this round left a sent take waiting for its acks */
    ringWave w;
    FILE *log;
    long long start_ms, last_progress_ms, last_probe_ms, last_load_ms;
    int least;                    /* the least-loaded live group last printed (-1: none) */
    const char *fault;            /* PS_RING_FAULT "phase:n": SIGKILL itself (tests) */
} ring;

/* ---- ring_util.c ---- */

/* A message on stderr: "ps-relay ring <self>: ..." */
void ring_say(const ring *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A message of ring_say quoted an ACL refusal (NOPERM): the agent stops (exit 2). */
int ring_noperm(void);
/* One JSON line: {"t": wall seconds, "group": self, "event": ev, <fields>}.
 * 'fields' is a printf format producing the rest of the object's members
 * (starting with a comma) or "". */
void ring_event(ring *r, const char *ev, const char *fields, ...);
/* "a -> b -> c -> a" of the live groups in ring order. */
void ring_order_str(const ring *r, char *buf, size_t cap);
int ring_live_count(const ring *r);
/* The next live group after 'gi' in ring order, or -1 when it is alone. */
int ring_successor(const ring *r, int gi);
/* The mark row of origin 'name' in a PS.INFO, or NULL. */
const psRingOrigin *ring_origin_row(const psKeyInfo *ki, const char *name);
/* Connects group 'g' if it is not (at most every dead_ms / 4). 0 or -1. */
int ring_ensure_conn(ring *r, ringGroup *g, long long now);
/* An I/O failure talking to 'g': drop the connection (reconnected later). */
void ring_conn_failed(ringGroup *g);
/* Group y lacks a delta of group x that x acknowledged (x's PS.INFO read
 * before y's). */
int ring_stale_for(const ring *r, int y, int x);

/* A remote call (a group other than this one) of phase 'ph' waited for:
 * one round trip, 'cmds' commands. */
void ring_count_rt(ring *r, int gi, int ph, int cmds);
/* The progress line and JSON event of where the rounds' time went since the
 * last one. */
void ring_timing_print(ring *r);

/* ---- ring_wave.c ---- */

/* Room for 3 ops per key per group. 0 or -1 (out of memory). */
int ring_wave_init(ring *r);
void ring_wave_free(ring *r);
/* Empties every group's batch. */
void ring_wave_clear(ring *r);
/* The next op of group gi's batch (zeroed; op, key and tag set, hops -1),
 * or NULL when the batch is full. */
psRingOp *ring_wave_op(ring *r, int gi, int k, int tag, int op);
/* Sends every group's batch, then reads every reply (as they come): one
 * WAN round trip of phase 'ph' when any group but this one was in it.
 * A group not connected gets PS_ERR_IO on every op. The batches stay (read
 * their ops) until ring_wave_clear. */
void ring_wave_run(ring *r, int ph);
/* The op got no reply (connection lost, timeout): drop the connection. */
int ring_op_noreply(const psRingOp *op);
void ring_conn_drop(ringGroup *g);

/* ---- ring_probe.c ---- */

/* --ring into r->g (names, addresses, order), --self into r->self. 0 or -1. */
int ring_parse_groups(ring *r);
/* Probes every group and moves them in and out of the ring (and rejoins
 * this group when it lacks deltas another acknowledged). */
void ring_probe_all(ring *r);

/* ---- ring_setup.c ---- */

/* --keys, or the SCAN of --match on this group's server. 0 or -1. */
int ring_find_keys(ring *r, psClient *c);
/* Copies a live neighbour's model into this group (JOIN ... KEEPOWN),
 * preferring one that holds what group 'lacking' (>= 0) acknowledged. 0 or -1. */
int ring_rejoin(ring *r, const char *why, int lacking);
/* The start check and TRACK of every key (or JOIN). 0, 1 or 2 (exit codes). */
int ring_setup(ring *r);

/* ---- ring_round.c ---- */

/* One round of every key acting for group gi: 1 when it acknowledged a
 * take or forwarded something (more may be waiting), else 0. */
int ring_act(ring *r, int gi);

/* ---- ring_barrier.c ---- */

/* Every live group drained (nothing pending, accumulated or queued). */
int ring_drained(const ring *r);
/* The live groups' values compared: 0 bit-identical, 1 within the float
 * bound, 2 beyond it. */
int ring_compare_groups(ring *r);

/* ---- ring_adapt.c ---- */

void ring_adapt_threshold(ring *r);
/* --reorder's period: 1 at the first round, then after 20 rounds or 1 s. */
int ring_reorder_due(const ring *r);
void ring_publish_rtts(ring *r);
void ring_reorder(ring *r);

/* ---- ring_load.c ---- */

/* Samples every group's load every --load-ms; prints and logs a change of
 * the least-loaded live group. */
void ring_load_update(ring *r);
/* One "load" line (and JSON event) per group. */
void ring_load_print(ring *r);

/* ---- ring_table.c ---- */

/* The take, forward-queue read and apply of key k, for a tensor (elements)
 * or a table (rows): the libps call of its kind. */
int ring_key_take(const ringKey *key, psClient *c, uint64_t seqfloor, double thr, psDelta *d);
int ring_key_fwd(const ringKey *key, psClient *c, psDelta *e);
int ring_key_apply(const ringKey *key, psClient *c, const char *origin, uint64_t seq,
                   uint64_t prev, const psDelta *d, int64_t hops);
/* Bytes of a delta on the wire (ids or indices and values). */
uint64_t ring_delta_bytes(const ringKey *key, uint64_t count);
/* check_fit of a table key: 0, or 2 (refused). */
int ring_table_fit(ring *r, int k);
/* FNV-1a of a table's rows in id order (the start check). 0 or -1. */
int ring_table_hash(psClient *c, const char *key, uint32_t dim, uint64_t *h);
/* ring_compare_groups of a table key. */
int ring_table_compare(ring *r, int k);
/* Rejoin of table key k: a paged copy of group g's base view (PS.RING ROWS)
 * between two equal readings of its marks (STATE), into this group 'me'
 * (JOINBEGIN, JOINROWS, JOINEND); copied again while the marks move. 0, or
 * -1 (said; the agent retries the rejoin later). */
int ring_table_join(ring *r, int k, ringGroup *g, ringGroup *me, const char *why);

#endif /* PS_RING_INT_H */
