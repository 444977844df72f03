/* ring.h -- ring tracking state of a tensor (issue #22): what a group's
 * server keeps so that its ring agent can exchange the group's own
 * accumulated change with the other groups, exactly once and losing
 * nothing. The commands are in docs/commands.md "Ring commands"; the
 * consistency argument in docs/design.md "Ring state".
 *
 *   base      the values as of the last take, moved by every received delta:
 *             the group's own accumulated change is exactly values - base.
 *   take      d_i = values_i - base_i for every i with d_i != 0 and
 *             |d_i| > r * |values_i| (r the THRESHOLD, 0: every nonzero one),
 *             at most MAXELEMS of them (the largest |d_i|, ties by the lower
 *             index); base_i := values_i for those only (the rest stays
 *             accumulated: nothing is dropped); the take is pending under seq
 *             max(take_seq + 1, seqfloor) until acknowledged, and a take while
 *             one is pending answers it again.
 *   apply     a delta of another origin (origin, seq): ignored when the seq is
 *             not above that origin's high-water mark (a resend, a duplicate)
 *             or when it is the own origin (came full circle); refused
 *             (PS_RING_EGAP) when it names the origin's previous seq (PREV)
 *             and that is above the mark (a delta of the origin is missing
 *             here: per origin, deltas apply in seq order, no gap); else
 *             values_i += v_i and base_i += v_i (a received delta is never sent
 *             on as this group's own), the mark moves to seq, and with hops
 *             h > 0 the delta joins the forward FIFO with h - 1 hops left.
 *   forward   the FIFO of received deltas the agent still has to pass on to the
 *             successor, bounded by 'maxqueue' bytes (PS_RING_ENTRY_BYTES each):
 *             past the bound an apply with hops is refused (PS_RING_BACKLOG);
 *             an empty FIFO accepts one delta of any size, so the ring never
 *             stalls on a delta larger than the bound.
 *   join      a new or returning group takes a neighbour's copy (its base,
 *             PS.RING STATE) and mark table: values and base := the copy,
 *             pending and FIFO cleared.
 *   lag       (MAXLAG, Gaia-style bounded divergence) 'own_pushes' counts
 *             this group's own optimizer pushes applied while tracked; a take
 *             records it ('pend_own'), its ack moves 'acked_own' there. The
 *             lag own_pushes - acked_own is what the other groups may not
 *             have yet; with maxlag n > 0 a push at lag >= n is refused
 *             (PSRing_LagFull, PST_ERR_RINGLAG) before anything changes. A
 *             take that finds nothing to send catches the lag up (nothing of
 *             this group is missing elsewhere beyond the threshold); a JOIN
 *             drops the own change, so it zeroes the lag too.
 *
 * Every operation is a function of the value and its arguments only (the
 * commands replicate verbatim; replicas and AOF replays hold the same bits),
 * validates everything before it changes anything, and allocates before it
 * writes, so a failure (PS_RING_E*) leaves the tensor as it was.
 *
 * Pure core: no Redis calls. */

#ifndef PS_RING_H
#define PS_RING_H

#include <stddef.h>
#include <math.h>
#include <stdint.h>

#include "tensor.h"

#define PS_RING_ORIGIN_MAX 64u        /* bytes of an origin name */
#define PS_RING_MAX_ORIGINS 64u       /* entries of the high-water-mark table */
#define PS_RING_MAX_HOPS 64u          /* HOPS of an apply (a ring of at most 65 groups) */
#define PS_RING_DEFAULT_MAXQUEUE (64ull << 20) /* 64 MiB */
#define PS_RING_MAX_MAXQUEUE (1ull << 50)
#define PS_RING_MAX_ELEMS (1ull << 32)  /* indices are u32 */
#define PS_RING_MAX_SEQ 0x7fffffffffffffffull /* seqs and marks (take_seq + 1 never wraps) */
#define PS_RING_MAX_MAXLAG (1ull << 31) /* MAXLAG n: 0 (no bound) .. 2^31 own pushes */
/* Bytes a delta of 'count' elements counts in the forward FIFO's bound: an
 * u32 index and an F32 value per element, plus a fixed 64 per entry. */
#define PS_RING_ENTRY_BYTES(count) (8ull * (uint64_t)(count) + 64ull)

/* Status codes (0 is success). */
enum {
    PS_RING_OK = 0,
    PS_RING_EOOM,       /* allocation failed */
    PS_RING_EUNTRACKED, /* the tensor is not tracked */
    PS_RING_EORIGIN,    /* an origin name that is not 1-64 bytes of [A-Za-z0-9_.:-] */
    PS_RING_EOTHER,     /* TRACK with another origin than the tensor's */
    PS_RING_ECOUNT,     /* a delta of 0 elements, or more than the tensor has */
    PS_RING_EINDEX,     /* indices not strictly ascending or not < length */
    PS_RING_ENONFINITE, /* a value, or a sum it would make, is NaN or Inf */
    PS_RING_EORIGINS,   /* a new origin beyond PS_RING_MAX_ORIGINS */
    PS_RING_EDUPFROM,   /* JOIN names an origin twice */
    PS_RING_EACCUM,     /* an ACCUM tensor (a relay's mirror of its upstream) */
    PS_RING_EBIG,       /* a tensor of more than PS_RING_MAX_ELEMS elements */
    PS_RING_ESEQ,       /* a seq above PS_RING_MAX_SEQ */
    PS_RING_EROUND,     /* a sync round is open (its pushes carry the version): retry */
    PS_RING_BACKLOG,    /* the forward FIFO is at its bound (retry later) */
    PS_RING_EGAP        /* PREV above the origin's mark: a delta of it is missing here */
};

/* A delta: a pending take or a forward entry. 'idx' strictly ascending,
 * 'val' finite, 'count' >= 1 (one allocation holds both arrays). */
typedef struct PSRingDelta {
    struct PSRingDelta *next; /* FIFO order */
    char origin[PS_RING_ORIGIN_MAX + 1];
    uint32_t originlen;
    uint64_t seq;
    uint64_t hops;  /* forward entries: HOPS for the successor; a take: 0 */
    uint64_t count;
    uint32_t *idx;
    float *val;
} PSRingDelta;

/* One origin of the high-water-mark table. */
typedef struct PSRingOrigin {
    char name[PS_RING_ORIGIN_MAX + 1];
    uint32_t len;
    uint64_t hwm;     /* highest seq applied (or joined from) */
    uint64_t applied; /* deltas of this origin applied here */
} PSRingOrigin;

typedef struct PSRing {
    char origin[PS_RING_ORIGIN_MAX + 1];
    uint32_t originlen;
    PSBuf *base; /* n floats, private to the ring */
    uint64_t take_seq; /* seq of the last take (0: none) */
    PSRingDelta *pend; /* the pending take, or NULL */
    uint32_t norigins;
    PSRingOrigin origins[PS_RING_MAX_ORIGINS]; /* in order of first appearance */
    PSRingDelta *fwd_head, *fwd_tail;
    uint64_t fwd_len, fwd_bytes;
    uint64_t maxqueue;
    uint64_t applied; /* deltas applied in total */
    /* MAXLAG (persisted, replicated, digested; see 'lag' above). */
    uint64_t maxlag;     /* 0: no bound */
    uint64_t own_pushes; /* own optimizer pushes applied while tracked */
    uint64_t acked_own;  /* own_pushes recorded by the last acknowledged take (<= own_pushes) */
    uint64_t pend_own;   /* own_pushes recorded by the pending take (0 when none) */
} PSRing;

/* Whether an element is significant for a take: a finite nonzero change
 * v - b above the threshold relative to the value (in double, the same bits
 * everywhere). Tensors and tables (ring_table.h) share it. */
static inline int PSRing_Significant(float v, float b, double thr) {
    const float d = v - b;
    if (d == 0.0f || !isfinite(d)) return 0;
    return fabs((double)d) > thr * fabs((double)v);
}

/* Whether 'p' (len bytes) is a valid origin name. */
int PSRing_OriginValid(const char *p, size_t len);

/* Turns tracking on under 'origin' (base := values; lag 0, MAXLAG 0) with
 * 'maxqueue' bytes of forward FIFO. On a tracked tensor of the same origin
 * only the bound changes (when set_maxqueue). Returns 1 when tracking was
 * turned on, 0 when it already was, or -PS_RING_E* (nothing changed). The
 * caller then sets maxlag (TRACK ... MAXLAG n, at most PS_RING_MAX_MAXLAG). */
int PSRing_Track(PSTensor *t, const char *origin, size_t len, int set_maxqueue,
                 uint64_t maxqueue);

/* This group's own pushes not yet covered by an acknowledged take. */
static inline uint64_t PSRing_Lag(const PSRing *r) {
    return r ? r->own_pushes - r->acked_own : 0;
}

/* Whether a push must be refused now: maxlag n > 0 and lag >= n. */
static inline int PSRing_LagFull(const PSRing *r) {
    return r && r->maxlag && PSRing_Lag(r) >= r->maxlag;
}

/* Turns tracking off: the ring state (base, pending take, marks, forward
 * queue) is dropped, the values stay. 1 when it was on, else 0. */
int PSRing_Untrack(PSTensor *t);

/* Take options. */
typedef struct PSRingTakeOpts {
    uint64_t seqfloor;
    double threshold; /* >= 0, finite */
    uint64_t maxelems; /* 0: no limit */
} PSRingTakeOpts;

/* Take outcomes (or -PS_RING_E*). */
enum { PS_RING_TAKE_NONE = 0, PS_RING_TAKE_NEW, PS_RING_TAKE_AGAIN, PS_RING_TAKE_NONE_CAUGHTUP };

/* The take above. On NEW and AGAIN the take is t->ring->pend (a NEW take
 * records own_pushes in pend_own). NONE_CAUGHTUP: nothing to send, but the
 * lag was > 0 and is now 0 (acked_own := own_pushes; a state change the
 * command replicates); NONE: nothing to send, nothing changed. */
int PSRing_Take(PSTensor *t, const PSRingTakeOpts *o);

/* Elements of values - base that are nonzero (what is still accumulated). */
uint64_t PSRing_Accumulated(const PSTensor *t);

/* Drops the pending take of seq 'seq' (the lag mark acked_own moves to what
 * it recorded). 1 when dropped, 0 otherwise. */
int PSRing_Ack(PSTensor *t, uint64_t seq);

/* Checks a delta for tensor 't' before anything changes: 'count' >= 1 and
 * <= t->n, 'idx' (count little-endian u32, any alignment) strictly
 * ascending and < t->n, 'val' (count little-endian F32) finite. Returns
 * PS_RING_OK or the status. */
int PSRing_CheckDelta(const PSTensor *t, const unsigned char *idx, const unsigned char *val,
                      uint64_t count);

/* A received delta (checked by PSRing_CheckDelta): 1 applied, 0 ignored (own
 * origin or seq <= the origin's mark: nothing changed), or -PS_RING_E*
 * (untracked, bad origin, too many origins, a sum not finite, a sync round
 * open, BACKLOG with hops > 0, OOM; nothing changed). The tensor's version moves by 1 when
 * applied. */
int PSRing_Apply(PSTensor *t, const char *origin, size_t len, uint64_t seq,
                 const unsigned char *idx, const unsigned char *val, uint64_t count,
                 uint64_t hops);

/* The same with PREV 'prev' (0 <= prev < seq, else -PS_RING_ESEQ): the seq
 * of the origin's delta before this one. When it is not a duplicate (the
 * checks above first) and prev is above the origin's mark (0 for an origin
 * never seen), the delta is refused with -PS_RING_EGAP and nothing changes:
 * a delta of that origin is missing here, and applying this one would move
 * the mark over it for good. prev 0 checks nothing (PSRing_Apply). */
int PSRing_ApplyPrev(PSTensor *t, const char *origin, size_t len, uint64_t seq, uint64_t prev,
                     const unsigned char *idx, const unsigned char *val, uint64_t count,
                     uint64_t hops);

/* The dedup and order rules of an apply, shared by tensors and tables
 * (ring_table.h), on a mark table 'origins' (n entries) of a group whose own
 * origin is 'own': -PS_RING_EORIGIN (a bad origin name), -PS_RING_ESEQ (seq
 * not in 1..PS_RING_MAX_SEQ, prev >= seq), 0 (ignore: own origin, or seq at
 * or below the origin's mark), -PS_RING_EGAP (prev above the mark),
 * -PS_RING_EORIGINS (a new origin, table full), else 1 with *entry the
 * origin's entry (NULL: a new origin). */
int PSRing_Admit(const char *own, uint32_t ownlen, PSRingOrigin *origins, uint32_t n,
                 const char *origin, size_t len, uint64_t seq, uint64_t prev, PSRingOrigin **entry);
/* After an admitted delta was applied: the origin's entry (added when new)
 * records seq as its mark and counts the delta. */
void PSRing_Record(PSRingOrigin *origins, uint32_t *n, PSRingOrigin *entry, const char *origin,
                   size_t len, uint64_t seq);

/* The oldest forward entry, or NULL. */
const PSRingDelta *PSRing_FwdPeek(const PSTensor *t);

/* Pops the oldest forward entry when it is (origin, seq): 1, else 0. */
int PSRing_FwdAck(PSTensor *t, const char *origin, size_t len, uint64_t seq);

/* One FROM pair of a join. */
typedef struct PSRingFrom {
    const char *origin;
    size_t len;
    uint64_t seq;
} PSRingFrom;

/* Join: values and base := 'vals' (t->n little-endian F32, checked finite
 * here), pending and FIFO cleared, mark table := the 'nfrom' pairs (applied
 * counts 0), origin := 'origin', tracking on (MAXQUEUE and MAXLAG kept, or
 * the defaults for an untracked tensor), the lag zeroed (the own change is
 * dropped: acked_own := own_pushes), version + 1. take_seq never goes back: it is
 * kept, and raised to the seq of a FROM pair that names the own origin (that
 * pair is not kept in the table: a group never applies its own deltas).
 * 'keepown' (JOIN ... KEEPOWN) on a tracked tensor keeps the group's own
 * change instead: the pending take stays pending under its seq (another group
 * may have applied it: dedup decides where it still goes) and is added to the
 * new base when its seq is above the FROM pair naming the own origin (the
 * neighbour lacks it); base := vals (+ the pending take), values := base +
 * (values - base), the accumulated change going out in the next take under a
 * new seq; the lag is kept. A sum that is not finite refuses the join.
 * Returns PS_RING_OK or the status (nothing changed). */
int PSRing_Join(PSTensor *t, const char *origin, size_t len, const unsigned char *vals,
                const PSRingFrom *from, size_t nfrom, int keepown);

/* The entry of 'name' in the table, or NULL. */
const PSRingOrigin *PSRing_FindOrigin(const PSRing *r, const char *name, size_t len);

/* Lifecycle (tensor.c calls these from PSTensor_Free / _Copy / _MemUsage). */
void PSRing_Free(PSRing *r);
/* A deep copy, or NULL on OOM. */
PSRing *PSRing_Clone(const PSRing *r);
size_t PSRing_MemUsage(const PSRing *r);

/* Building a ring state from a saved one (RDB loader, PS._RESTORE). Each
 * step validates what it adds; a failure changes nothing. */

/* A tracked state with base all zero (filled by the loader), no pending,
 * empty tables; the tensor must not be tracked yet. */
int PSRing_LoadBegin(PSTensor *t, const char *origin, size_t len, uint64_t take_seq,
                     uint64_t maxqueue, uint64_t applied);
/* The MAXLAG fields (after LoadBegin): maxlag <= PS_RING_MAX_MAXLAG,
 * acked_own and pend_own <= own_pushes (pend_own is dropped unless a pending
 * take is loaded; load it before or after). */
int PSRing_LoadLag(PSTensor *t, uint64_t maxlag, uint64_t own_pushes, uint64_t acked_own,
                   uint64_t pend_own);
/* Appends a table entry (a new valid name, at most PS_RING_MAX_ORIGINS). */
int PSRing_LoadOrigin(PSTensor *t, const char *name, size_t len, uint64_t hwm, uint64_t applied);
/* Appends 'count' elements to the pending take (pending != 0; created on the
 * first call with this seq, which must be in 1..take_seq) or to a new
 * (first) or the last (more) forward entry; indices must continue strictly
 * ascending across appended pieces. */
int PSRing_LoadDelta(PSTensor *t, int pending, int more, const char *origin, size_t len,
                     uint64_t seq, uint64_t hops, const unsigned char *idx,
                     const unsigned char *val, uint64_t count);

#endif /* PS_RING_H */
