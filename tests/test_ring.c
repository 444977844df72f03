/* test_ring.c -- cmocka tests of module/core/ring.[ch]: a take pending until
 * acknowledged and answered again, the threshold and MAXELEMS selection,
 * nothing dropped (every take plus what stays accumulated is exactly the
 * change, with integer data), received deltas applied once per (origin,
 * seq) and never taken again as the group's own, in seq order per origin
 * (PREV: a gap is refused, not papered over), the forward FIFO and its
 * BACKLOG bound, JOIN, the copy and load paths, and the MAXLAG lag bound
 * (own pushes counted, recorded by a take, acknowledged; refusals change
 * nothing). */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ring.h"
#include "tensor.h"
#include "tensor_helpers.h"
#include "wire.h" /* libps's PS.APPLYDELTA encoder (PREV) */

#define O(s) (s), strlen(s)

/* A tensor of n elements with values 0, 1, 2, ... (SGD lr 1). */
static PSTensor *mk_int(uint64_t n) {
    PSTensor *t = mk1(n, PS_OPT_SGD, 1.0);
    for (uint64_t i = 0; i < n; i++) t->data->v[i] = (float)i;
    return t;
}

/* values -= g (SGD lr 1) through the real push path. */
static void push(PSTensor *t, const float *g) {
    PSPush p = dense(g);
    PSPushResult r;
    assert_int_equal(PSTensor_Push(t, &p, &r), PST_OK);
}

static const PSRingTakeOpts All = {0, 0.0, 0};

/* Everything a failed operation must leave as it was. */
typedef struct {
    uint64_t version, take_seq, fwd_len, fwd_bytes, applied, pend_seq;
    uint32_t norigins;
    float vals[64], base[64];
} Shot;

static void shot(const PSTensor *t, Shot *s) {
    memset(s, 0, sizeof(*s));
    s->version = t->version;
    memcpy(s->vals, t->data->v, t->n * 4);
    if (!t->ring) return;
    const PSRing *r = t->ring;
    memcpy(s->base, r->base->v, t->n * 4);
    s->take_seq = r->take_seq;
    s->fwd_len = r->fwd_len;
    s->fwd_bytes = r->fwd_bytes;
    s->applied = r->applied;
    s->norigins = r->norigins;
    s->pend_seq = r->pend ? r->pend->seq : 0;
}

static void assert_same(const PSTensor *t, const Shot *a) {
    Shot b;
    shot(t, &b);
    assert_memory_equal(a, &b, sizeof(b));
}

static void test_take_is_pending_until_acked_then_the_next_seq(void **st) {
    (void)st;
    PSTensor *t = mk_int(6);
    assert_int_equal(PSRing_Take(t, &All), -PS_RING_EUNTRACKED);
    assert_int_equal(PSRing_Track(t, O("g0"), 0, 0), 1);
    assert_int_equal(PSRing_Track(t, O("g0"), 1, 99), 0);
    assert_int_equal(t->ring->maxqueue, 99);
    assert_int_equal(PSRing_Track(t, O("g1"), 0, 0), -PS_RING_EOTHER);
    assert_int_equal(PSRing_Track(t, O("bad name"), 0, 0), -PS_RING_EORIGIN);
    assert_int_equal(PSRing_Take(t, &All), PS_RING_TAKE_NONE);
    const float g[6] = {0, 2, 0, -1, 0, 0};
    push(t, g);
    assert_int_equal(PSRing_Accumulated(t), 2);
    assert_int_equal(PSRing_Take(t, &All), PS_RING_TAKE_NEW);
    const PSRingDelta *d = t->ring->pend;
    assert_int_equal(d->seq, 1);
    assert_int_equal(d->count, 2);
    assert_int_equal(d->idx[0], 1);
    assert_int_equal(d->idx[1], 3);
    assert_true(d->val[0] == -2.0f && d->val[1] == 1.0f);
    assert_int_equal(PSRing_Accumulated(t), 0);
    push(t, g); /* more change while pending: the same take is answered */
    assert_int_equal(PSRing_Take(t, &All), PS_RING_TAKE_AGAIN);
    assert_ptr_equal(t->ring->pend, d);
    assert_int_equal(PSRing_Ack(t, 2), 0);
    assert_int_equal(PSRing_Ack(t, 1), 1);
    assert_int_equal(PSRing_Ack(t, 1), 0);
    const PSRingTakeOpts floor = {50, 0.0, 0};
    assert_int_equal(PSRing_Take(t, &floor), PS_RING_TAKE_NEW);
    assert_int_equal(t->ring->pend->seq, 50);
    assert_int_equal(PSRing_Ack(t, 50), 1);
    push(t, g);
    assert_int_equal(PSRing_Take(t, &All), PS_RING_TAKE_NEW);
    assert_int_equal(t->ring->pend->seq, 51);
    /* No seq left that a receiver takes: refused, nothing changes. */
    assert_int_equal(PSRing_Ack(t, 51), 1);
    push(t, g);
    t->ring->take_seq = PS_RING_MAX_SEQ;
    assert_int_equal(PSRing_Take(t, &All), -PS_RING_ESEQ);
    assert_null(t->ring->pend);
    assert_int_equal(PSRing_Accumulated(t), 2);
    PSTensor_Free(t);
}

static void test_threshold_and_maxelems_choose_the_largest_ties_by_lower_index(void **st) {
    (void)st;
    PSTensor *t = mk_int(8);
    for (int i = 0; i < 8; i++) t->data->v[i] = 100.0f;
    assert_int_equal(PSRing_Track(t, O("g0"), 0, 0), 1);
    /* changes: 0.5, -3, 0, 3, 0, 0, 0.75, -3 */
    const float g[8] = {-0.5f, 3, 0, -3, 0, 0, -0.75f, 3};
    push(t, g);
    /* 1% of |w| is about 1: 0.5 and 0.75 stay */
    const PSRingTakeOpts thr = {0, 0.01, 2};
    assert_int_equal(PSRing_Take(t, &thr), PS_RING_TAKE_NEW);
    const PSRingDelta *d = t->ring->pend;
    assert_int_equal(d->count, 2); /* three of |3|: the two lowest indices */
    assert_int_equal(d->idx[0], 1);
    assert_int_equal(d->idx[1], 3);
    assert_int_equal(PSRing_Accumulated(t), 3);
    assert_int_equal(PSRing_Ack(t, 1), 1);
    const PSRingTakeOpts top1 = {0, 0.0, 1};
    assert_int_equal(PSRing_Take(t, &top1), PS_RING_TAKE_NEW);
    assert_int_equal(t->ring->pend->count, 1);
    assert_int_equal(t->ring->pend->idx[0], 7);
    assert_int_equal(PSRing_Ack(t, 2), 1);
    assert_int_equal(PSRing_Take(t, &thr), PS_RING_TAKE_NONE); /* only small ones left */
    assert_int_equal(PSRing_Take(t, &All), PS_RING_TAKE_NEW);
    d = t->ring->pend;
    assert_int_equal(d->count, 2);
    assert_int_equal(d->idx[0], 0);
    assert_int_equal(d->idx[1], 6);
    assert_true(d->val[0] == 0.5f && d->val[1] == 0.75f);
    PSTensor_Free(t);
}

/* Random integer gradients, random takes: the taken deltas plus what is
 * still accumulated equal values - start exactly; a second group applying
 * every take ends with the same values. */
static void test_nothing_is_dropped_with_integer_data(void **st) {
    (void)st;
    enum { N = 40 };
    PSTensor *t = mk_int(N), *peer = mk_int(N);
    float start[N], taken[N] = {0};
    memcpy(start, t->data->v, sizeof(start));
    assert_int_equal(PSRing_Track(t, O("a"), 0, 0), 1);
    assert_int_equal(PSRing_Track(peer, O("b"), 0, 0), 1);
    for (int round = 0; round < 200; round++) {
        float g[N];
        for (int i = 0; i < N; i++) g[i] = urand() < 0.3 ? (float)((int)(urand() * 9) - 4) : 0.0f;
        push(t, g);
        const PSRingTakeOpts o = {0, urand() < 0.5 ? 0.0 : 0.05, urand() < 0.5 ? 0 : 1 + (uint64_t)(urand() * 5)};
        const int r = PSRing_Take(t, &o);
        if (r == PS_RING_TAKE_NONE) continue;
        assert_int_equal(r, PS_RING_TAKE_NEW);
        const PSRingDelta *d = t->ring->pend;
        for (uint64_t k = 0; k < d->count; k++) taken[d->idx[k]] += d->val[k];
        assert_int_equal(PSRing_Apply(peer, O("a"), d->seq, (const unsigned char *)d->idx,
                                      (const unsigned char *)d->val, d->count, 0),
                         1);
        assert_int_equal(PSRing_Ack(t, d->seq), 1);
    }
    for (int i = 0; i < N; i++) {
        const float acc = t->data->v[i] - t->ring->base->v[i];
        assert_true(taken[i] + acc == t->data->v[i] - start[i]);
        assert_true(peer->data->v[i] == start[i] + taken[i]);
    }
    /* The peer's own change is none: received deltas are never taken again. */
    assert_int_equal(PSRing_Take(peer, &All), PS_RING_TAKE_NONE);
    /* Drain: THRESHOLD 0 until nothing is left; the groups then agree. */
    while (PSRing_Take(t, &All) == PS_RING_TAKE_NEW) {
        const PSRingDelta *d = t->ring->pend;
        PSRing_Apply(peer, O("a"), d->seq, (const unsigned char *)d->idx, (const unsigned char *)d->val,
                     d->count, 0);
        PSRing_Ack(t, d->seq);
    }
    assert_bits_equal(peer->data->v, t->data->v, N, "groups after the barrier");
    assert_int_equal(peer->ring->origins[0].applied, peer->ring->applied);
    PSTensor_Free(t);
    PSTensor_Free(peer);
}

static void test_duplicates_and_the_own_origin_are_ignored(void **st) {
    (void)st;
    PSTensor *t = mk_int(4);
    const uint32_t idx[2] = {0, 2};
    const float v[2] = {1, -1};
    const unsigned char *I = (const unsigned char *)idx, *V = (const unsigned char *)v;
    assert_int_equal(PSRing_Apply(t, O("b"), 1, I, V, 2, 0), -PS_RING_EUNTRACKED);
    PSRing_Track(t, O("a"), 0, 0);
    assert_int_equal(PSRing_Apply(t, O("b"), 3, I, V, 2, 0), 1);
    assert_int_equal(t->version, 1);
    Shot s;
    shot(t, &s);
    assert_int_equal(PSRing_Apply(t, O("b"), 3, I, V, 2, 0), 0); /* resend */
    assert_int_equal(PSRing_Apply(t, O("b"), 2, I, V, 2, 0), 0); /* older */
    assert_int_equal(PSRing_Apply(t, O("a"), 9, I, V, 2, 0), 0); /* full circle */
    assert_same(t, &s);
    assert_true(t->data->v[0] == 1.0f && t->data->v[2] == 1.0f);
    assert_int_equal(PSRing_Accumulated(t), 0);
    /* Bad deltas: refused, nothing changes. */
    const uint32_t down[2] = {2, 0}, out[1] = {4};
    const float inf[2] = {INFINITY, 0}, huge[2] = {3e38f, 0};
    assert_int_equal(PSRing_Apply(t, O("c"), 1, (const unsigned char *)down, V, 2, 0), -PS_RING_EINDEX);
    assert_int_equal(PSRing_Apply(t, O("c"), 1, (const unsigned char *)out, V, 1, 0), -PS_RING_EINDEX);
    assert_int_equal(PSRing_Apply(t, O("c"), 1, I, (const unsigned char *)inf, 2, 0), -PS_RING_ENONFINITE);
    assert_int_equal(PSRing_Apply(t, O("c"), 1, I, V, 0, 0), -PS_RING_ECOUNT);
    assert_int_equal(PSRing_Apply(t, O("c"), 1, I, V, 5, 0), -PS_RING_ECOUNT);
    assert_int_equal(PSRing_Apply(t, O("c d"), 1, I, V, 2, 0), -PS_RING_EORIGIN);
    t->data->v[0] = 3e38f;
    t->ring->base->v[0] = 3e38f;
    shot(t, &s);
    assert_int_equal(PSRing_Apply(t, O("c"), 1, I, (const unsigned char *)huge, 2, 0), -PS_RING_ENONFINITE);
    assert_same(t, &s);
    PSTensor_Free(t);
}

/* A take of 'a' (after a push of g): its seq, indices and values copied out,
 * then acknowledged. */
typedef struct {
    uint64_t seq, count;
    uint32_t idx[8];
    float val[8];
} Took;

static Took take_ack(PSTensor *a, const float *g) {
    Took k;
    memset(&k, 0, sizeof(k));
    push(a, g);
    assert_int_equal(PSRing_Take(a, &All), PS_RING_TAKE_NEW);
    const PSRingDelta *d = a->ring->pend;
    k.seq = d->seq;
    k.count = d->count;
    memcpy(k.idx, d->idx, d->count * 4);
    memcpy(k.val, d->val, d->count * 4);
    assert_int_equal(PSRing_Ack(a, d->seq), 1);
    return k;
}

static int apply_took(PSTensor *t, const Took *k, uint64_t prev, uint64_t hops) {
    return PSRing_ApplyPrev(t, O("a"), k->seq, prev, (const unsigned char *)k->idx,
                            (const unsigned char *)k->val, k->count, hops);
}

/* Issue 22's lost delta: b missed a's take 2 (out of the ring while a
 * acknowledged it without b) and then got take 3 first. Without PREV b
 * applies 3, its mark passes 2, and 2 arriving later is a "duplicate": lost
 * for good. With PREV (the origin's previous seq) 3 is refused GAP and
 * changes nothing, b's mark stays below what a acknowledged (the agent's
 * stale check), and a JOIN from a group that has 2 makes b whole: every
 * resend is then a repeat and b ends equal to that group. */
static void test_prev_refuses_a_gap_and_join_heals_it(void **st) {
    (void)st;
    enum { N = 4 };
    PSTensor *a = mk_int(N), *b = mk_int(N), *c = mk_int(N), *old = mk_int(N);
    PSRing_Track(a, O("a"), 0, 0);
    PSRing_Track(b, O("b"), 0, 0);
    PSRing_Track(c, O("c"), 0, 0);
    PSRing_Track(old, O("o"), 0, 0);
    const float g1[N] = {1, 0, 2, 0}, g2[N] = {0, 3, 0, 1}, g3[N] = {1, 1, 0, 0};
    const Took t1 = take_ack(a, g1), t2 = take_ack(a, g2), t3 = take_ack(a, g3);
    assert_int_equal(t1.seq, 1);
    assert_int_equal(t2.seq, 2);
    assert_int_equal(t3.seq, 3);
    /* c gets everything in order; b gets 1, misses 2. */
    assert_int_equal(apply_took(c, &t1, 0, 1), 1);
    assert_int_equal(apply_took(c, &t2, 1, 1), 1);
    assert_int_equal(apply_took(b, &t1, 0, 0), 1);
    assert_int_equal(apply_took(old, &t1, 0, 0), 1);
    /* 3 reaches b (c forwarding it, PREV 2): refused, nothing changes. */
    Shot s;
    shot(b, &s);
    assert_int_equal(apply_took(b, &t3, 2, 0), -PS_RING_EGAP);
    assert_int_equal(apply_took(b, &t3, 2, 1), -PS_RING_EGAP); /* with hops: nothing queued */
    assert_same(b, &s);
    assert_int_equal(PSRing_FindOrigin(b->ring, O("a"))->hwm, 1); /* < 2, acknowledged by a */
    /* A duplicate stays a duplicate whatever its PREV; PREV >= seq is refused. */
    assert_int_equal(apply_took(b, &t1, 0, 0), 0);
    assert_int_equal(apply_took(b, &t2, 2, 0), -PS_RING_ESEQ);
    assert_same(b, &s);
    /* An origin never seen: PREV 0 applies, PREV > 0 is a gap. */
    assert_int_equal(PSRing_ApplyPrev(c, O("z"), 5, 4, (const unsigned char *)t1.idx,
                                      (const unsigned char *)t1.val, t1.count, 0),
                     -PS_RING_EGAP);
    assert_null(PSRing_FindOrigin(c->ring, O("z")));
    /* Without PREV (an old agent) the gap is papered over: 3 applies and 2 is
     * then ignored as a duplicate: the delta is lost (what PREV prevents). */
    assert_int_equal(apply_took(old, &t3, 0, 0), 1);
    assert_int_equal(apply_took(old, &t2, 0, 0), 0);
    /* The gap filled in order: 2 then 3 apply at b (the transient case). */
    PSTensor *b2 = PSTensor_Copy(b);
    assert_non_null(b2);
    assert_int_equal(apply_took(b2, &t2, 1, 0), 1);
    assert_int_equal(apply_took(b2, &t3, 2, 0), 1);
    /* c goes on: 3 applies after 2. b rejoins from c's base and marks (STATE). */
    assert_int_equal(apply_took(c, &t3, 2, 1), 1);
    const PSRingFrom from[2] = {{O("c"), c->ring->take_seq},
                                {O("a"), PSRing_FindOrigin(c->ring, O("a"))->hwm}};
    assert_int_equal(PSRing_Join(b, O("b"), (const unsigned char *)c->ring->base->v, from, 2, 1),
                     PS_RING_OK);
    assert_int_equal(PSRing_FindOrigin(b->ring, O("a"))->hwm, 3);
    assert_int_equal(apply_took(b, &t2, 1, 0), 0);
    assert_int_equal(apply_took(b, &t3, 2, 0), 0);
    assert_bits_equal(b->data->v, c->data->v, N, "b rejoined from c");
    assert_bits_equal(b2->data->v, c->data->v, N, "b filled in order");
    float want[N];
    for (int i = 0; i < N; i++) want[i] = (float)i - g1[i] - g2[i] - g3[i];
    assert_bits_equal(c->data->v, want, N, "every take of a applied once");
    assert_false(memcmp(old->data->v, want, sizeof(want)) == 0); /* the old way lost take 2 */
    PSTensor_Free(b2);
    PSTensor_Free(old);
    PSTensor_Free(c);
    PSTensor_Free(b);
    PSTensor_Free(a);
}

static void test_at_most_64_origins(void **st) {
    (void)st;
    PSTensor *t = mk_int(2);
    PSRing_Track(t, O("me"), 0, 0);
    const uint32_t idx[1] = {1};
    const float v[1] = {1};
    char name[16];
    for (int k = 0; k < 64; k++) {
        snprintf(name, sizeof(name), "o%d", k);
        assert_int_equal(PSRing_Apply(t, O(name), 1, (const unsigned char *)idx, (const unsigned char *)v, 1, 0), 1);
    }
    Shot s;
    shot(t, &s);
    assert_int_equal(PSRing_Apply(t, O("o64"), 1, (const unsigned char *)idx, (const unsigned char *)v, 1, 0),
                     -PS_RING_EORIGINS);
    assert_same(t, &s);
    assert_int_equal(PSRing_Apply(t, O("o5"), 2, (const unsigned char *)idx, (const unsigned char *)v, 1, 0), 1);
    PSTensor_Free(t);
}

static void test_hops_queue_in_order_and_backlog_changes_nothing(void **st) {
    (void)st;
    PSTensor *t = mk_int(16);
    PSRing_Track(t, O("me"), 1, PS_RING_ENTRY_BYTES(4) + PS_RING_ENTRY_BYTES(2));
    uint32_t idx[8];
    float v[8];
    for (int k = 0; k < 8; k++) {
        idx[k] = (uint32_t)(2 * k);
        v[k] = 1;
    }
    const unsigned char *I = (const unsigned char *)idx, *V = (const unsigned char *)v;
    assert_int_equal(PSRing_Apply(t, O("x"), 1, I, V, 4, 3), 1);
    assert_int_equal(PSRing_Apply(t, O("y"), 1, I, V, 2, 1), 1);
    assert_int_equal(t->ring->fwd_bytes, PS_RING_ENTRY_BYTES(4) + PS_RING_ENTRY_BYTES(2));
    Shot s;
    shot(t, &s);
    assert_int_equal(PSRing_Apply(t, O("x"), 2, I, V, 1, 1), -PS_RING_BACKLOG);
    assert_same(t, &s);
    assert_int_equal(PSRing_Apply(t, O("x"), 1, I, V, 1, 1), 0); /* a duplicate, even at the bound */
    assert_int_equal(PSRing_Apply(t, O("x"), 2, I, V, 1, 0), 1); /* no hops: no queue */
    const PSRingDelta *d = PSRing_FwdPeek(t);
    assert_string_equal(d->origin, "x");
    assert_int_equal(d->hops, 2);
    assert_int_equal(d->count, 4);
    assert_int_equal(PSRing_FwdAck(t, O("y"), 1), 0); /* not the oldest */
    assert_int_equal(PSRing_FwdAck(t, O("x"), 2), 0);
    assert_int_equal(PSRing_FwdAck(t, O("x"), 1), 1);
    assert_string_equal(PSRing_FwdPeek(t)->origin, "y");
    assert_int_equal(PSRing_FwdAck(t, O("y"), 1), 1);
    assert_null(PSRing_FwdPeek(t));
    assert_int_equal(t->ring->fwd_bytes, 0);
    /* An empty queue takes one delta of any size. */
    PSRing_Track(t, O("me"), 1, 0);
    assert_int_equal(PSRing_Apply(t, O("y"), 2, I, V, 8, 1), 1);
    assert_int_equal(PSRing_Apply(t, O("y"), 3, I, V, 1, 1), -PS_RING_BACKLOG);
    PSTensor_Free(t);
}

static void test_join_copies_values_and_marks_and_never_lowers_take_seq(void **st) {
    (void)st;
    PSTensor *t = mk_int(4);
    PSRing_Track(t, O("g1"), 0, 0);
    const float g[4] = {1, 0, 0, 0};
    push(t, g);
    const PSRingTakeOpts fl = {20, 0, 0};
    PSRing_Take(t, &fl);
    const uint32_t idx[1] = {1};
    const float one[1] = {1};
    PSRing_Apply(t, O("q"), 4, (const unsigned char *)idx, (const unsigned char *)one, 1, 2);
    const float copy[4] = {7, 8, 9, 10};
    const PSRingFrom from[3] = {{O("g0"), 5}, {O("g1"), 12}, {O("g2"), 6}};
    const PSRingFrom dup[2] = {{O("g0"), 5}, {O("g0"), 6}};
    Shot s;
    shot(t, &s);
    assert_int_equal(PSRing_Join(t, O("g1"), (const unsigned char *)copy, dup, 2, 0), -PS_RING_EDUPFROM);
    const float nan4[4] = {0, NAN, 0, 0};
    assert_int_equal(PSRing_Join(t, O("g1"), (const unsigned char *)nan4, from, 3, 0), -PS_RING_ENONFINITE);
    assert_same(t, &s);
    const uint64_t v0 = t->version;
    assert_int_equal(PSRing_Join(t, O("g1"), (const unsigned char *)copy, from, 3, 0), PS_RING_OK);
    assert_int_equal(t->version, v0 + 1);
    assert_bits_equal(t->data->v, copy, 4, "values");
    assert_bits_equal(t->ring->base->v, copy, 4, "base");
    assert_null(t->ring->pend);
    assert_null(PSRing_FwdPeek(t));
    assert_int_equal(t->ring->take_seq, 20); /* 12 < 20: kept */
    assert_int_equal(t->ring->norigins, 2);
    assert_non_null(PSRing_FindOrigin(t->ring, O("g2")));
    assert_null(PSRing_FindOrigin(t->ring, O("q")));
    assert_null(PSRing_FindOrigin(t->ring, O("g1")));
    assert_int_equal(PSRing_FindOrigin(t->ring, O("g0"))->hwm, 5);
    /* An untracked tensor joins; its own FROM raises take_seq. */
    PSTensor *u = mk_int(4);
    const PSRingFrom own[1] = {{O("g3"), 33}};
    assert_int_equal(PSRing_Join(u, O("g3"), (const unsigned char *)copy, own, 1, 0), PS_RING_OK);
    assert_int_equal(u->ring->take_seq, 33);
    assert_int_equal(u->ring->norigins, 0);
    assert_int_equal(u->ring->maxqueue, PS_RING_DEFAULT_MAXQUEUE);
    /* UNTRACK drops the state, keeps the values. */
    assert_int_equal(PSRing_Untrack(u), 1);
    assert_null(u->ring);
    assert_bits_equal(u->data->v, copy, 4, "values after untrack");
    assert_int_equal(PSRing_Untrack(u), 0);
    PSTensor_Free(u);
    PSTensor_Free(t);
}

static void test_apply_does_not_write_a_snapshot_or_a_copy(void **st) {
    (void)st;
    PSTensor *t = mk_int(4);
    PSRing_Track(t, O("a"), 0, 0);
    assert_int_equal(PSTensor_SnapshotTake(t, "s", 1, 0), PST_OK);
    PSTensor *c = PSTensor_Copy(t);
    assert_non_null(c->ring);
    assert_ptr_not_equal(c->ring, t->ring);
    const uint32_t idx[1] = {2};
    const float v[1] = {5};
    assert_int_equal(PSRing_Apply(t, O("b"), 1, (const unsigned char *)idx, (const unsigned char *)v, 1, 1), 1);
    assert_true(t->data->v[2] == 7.0f);
    assert_true(t->snaps[0].data->v[2] == 2.0f);
    assert_true(c->data->v[2] == 2.0f);
    assert_int_equal(c->ring->norigins, 0);
    assert_int_equal(t->ring->fwd_len, 1);
    PSTensor *c2 = PSTensor_Copy(t);
    assert_int_equal(c2->ring->fwd_len, 1);
    assert_int_equal(c2->ring->fwd_bytes, t->ring->fwd_bytes);
    assert_int_equal(PSTensor_MemUsage(c2), PSTensor_MemUsage(t));
    PSTensor_Free(c2);
    PSTensor_Free(c);
    PSTensor_Free(t);
}

static void test_load_validates_each_piece(void **st) {
    (void)st;
    PSTensor *t = mk_int(8);
    assert_int_equal(PSRing_LoadOrigin(t, O("x"), 1, 1), PS_RING_EUNTRACKED);
    assert_int_equal(PSRing_LoadBegin(t, O("a b"), 3, 10, 0), PS_RING_EORIGIN);
    assert_int_equal(PSRing_LoadBegin(t, O("a"), 3, 1000, 2), PS_RING_OK);
    assert_int_equal(PSRing_LoadBegin(t, O("a"), 3, 1000, 2), PS_RING_EOTHER);
    assert_int_equal(PSRing_LoadOrigin(t, O("x"), 5, 1), PS_RING_OK);
    assert_int_equal(PSRing_LoadOrigin(t, O("x"), 6, 1), PS_RING_EORIGIN); /* twice */
    assert_int_equal(PSRing_LoadOrigin(t, O("a"), 6, 1), PS_RING_EORIGIN); /* own */
    const uint32_t i1[2] = {1, 4}, i2[2] = {5, 7}, bad[2] = {3, 6};
    const float v[2] = {1, 2};
    const unsigned char *V = (const unsigned char *)v;
    /* pending: seq within 1..take_seq, own origin, then a continuing piece */
    assert_int_equal(PSRing_LoadDelta(t, 1, 0, O("a"), 4, 0, (const unsigned char *)i1, V, 2), PS_RING_EINDEX);
    assert_int_equal(PSRing_LoadDelta(t, 1, 0, O("x"), 3, 0, (const unsigned char *)i1, V, 2), PS_RING_EINDEX);
    assert_int_equal(PSRing_LoadDelta(t, 1, 0, O("a"), 3, 0, (const unsigned char *)i1, V, 2), PS_RING_OK);
    assert_int_equal(PSRing_LoadDelta(t, 1, 1, O("a"), 3, 0, (const unsigned char *)bad, V, 2), PS_RING_EINDEX);
    assert_int_equal(PSRing_LoadDelta(t, 1, 1, O("a"), 3, 0, (const unsigned char *)i2, V, 2), PS_RING_OK);
    assert_int_equal(t->ring->pend->count, 4);
    assert_int_equal(t->ring->pend->idx[3], 7);
    /* forward entries: not the own origin; pieces append to the last one */
    assert_int_equal(PSRing_LoadDelta(t, 0, 0, O("a"), 1, 0, (const unsigned char *)i1, V, 2), PS_RING_EORIGIN);
    assert_int_equal(PSRing_LoadDelta(t, 0, 1, O("x"), 1, 0, (const unsigned char *)i1, V, 2), PS_RING_EINDEX);
    assert_int_equal(PSRing_LoadDelta(t, 0, 0, O("x"), 1, 0, (const unsigned char *)i1, V, 2), PS_RING_OK);
    assert_int_equal(PSRing_LoadDelta(t, 0, 0, O("y"), 2, 1, (const unsigned char *)i1, V, 2), PS_RING_OK);
    assert_int_equal(PSRing_LoadDelta(t, 0, 1, O("y"), 2, 1, (const unsigned char *)i2, V, 2), PS_RING_OK);
    assert_int_equal(t->ring->fwd_len, 2);
    assert_int_equal(t->ring->fwd_bytes, PS_RING_ENTRY_BYTES(2) + PS_RING_ENTRY_BYTES(4));
    assert_int_equal(t->ring->fwd_tail->count, 4);
    assert_string_equal(t->ring->fwd_head->origin, "x");
    PSTensor_Free(t);
}

/* ---- MAXLAG: own pushes not yet covered by an acknowledged take ---- */

static PSPushResult Res;
/* A push with ID (cli, seq); returns the status. */
static int push_id(PSTensor *t, const float *g, uint64_t seq) {
    PSPush p = dense(g);
    p.id = "cli";
    p.idlen = 3;
    p.seq = seq;
    return PSTensor_Push(t, &p, &Res);
}

static void test_lag_counts_own_pushes_and_the_ack_moves_the_mark(void **st) {
    (void)st;
    PSTensor *t = mk_int(4);
    const float g[4] = {1, 0, 0, 0};
    push(t, g); /* before TRACK: not counted */
    assert_int_equal(PSRing_Track(t, O("g0"), 0, 0), 1);
    assert_int_equal(PSRing_Lag(t->ring), 0);
    assert_int_equal(t->ring->maxlag, 0);
    for (int k = 0; k < 3; k++) push(t, g);
    assert_int_equal(PSRing_Lag(t->ring), 3);
    /* a received delta is not an own push */
    const uint32_t i[1] = {2};
    const float v[1] = {5};
    assert_int_equal(PSRing_Apply(t, O("g1"), 1, (const unsigned char *)i, (const unsigned char *)v, 1, 0), 1);
    assert_int_equal(PSRing_Lag(t->ring), 3);
    /* the take records 3; pushes after it are not covered by it */
    assert_int_equal(PSRing_Take(t, &All), PS_RING_TAKE_NEW);
    assert_int_equal(t->ring->pend_own, 3);
    push(t, g);
    push(t, g);
    assert_int_equal(PSRing_Lag(t->ring), 5);
    /* a re-take (an agent killed before its ack) answers the same record */
    assert_int_equal(PSRing_Take(t, &All), PS_RING_TAKE_AGAIN);
    assert_int_equal(t->ring->pend_own, 3);
    /* an ack of another seq moves nothing; the right one moves the mark to 3 */
    assert_int_equal(PSRing_Ack(t, t->ring->take_seq + 1), 0);
    assert_int_equal(PSRing_Lag(t->ring), 5);
    assert_int_equal(PSRing_Ack(t, t->ring->take_seq), 1);
    assert_int_equal(t->ring->acked_own, 3);
    assert_int_equal(PSRing_Lag(t->ring), 2);
    assert_int_equal(t->ring->own_pushes, 5);
    /* a copy (snapshot/COPY path) carries the marks */
    PSTensor *c = PSTensor_Copy(t);
    assert_non_null(c);
    assert_int_equal(PSRing_Lag(c->ring), 2);
    PSTensor_Free(c);
    PSTensor_Free(t);
}

static void test_push_at_maxlag_is_refused_and_changes_nothing(void **st) {
    (void)st;
    PSTensor *t = mk_int(4);
    assert_int_equal(PSRing_Track(t, O("g0"), 0, 0), 1);
    t->ring->maxlag = 2;
    const float g[4] = {1, 1, 0, 0};
    assert_int_equal(push_id(t, g, 1), PST_OK);
    assert_int_equal(push_id(t, g, 2), PST_OK);
    Shot before;
    shot(t, &before);
    const uint64_t own = t->ring->own_pushes, pushes = t->stats.pushes;
    assert_int_equal(push_id(t, g, 3), PST_ERR_RINGLAG);
    assert_int_equal(push_id(t, g, 3), PST_ERR_RINGLAG);
    assert_same(t, &before);
    assert_int_equal(t->ring->own_pushes, own);
    assert_int_equal(t->stats.pushes, pushes);
    assert_int_equal(t->stats.ring_lag_refusals, 2);
    /* a resend of an applied push is still answered as a duplicate */
    assert_int_equal(push_id(t, g, 2), PST_DUPLICATE);
    /* the refused seq 3 was not recorded as seen: after take + ack it applies once */
    assert_int_equal(PSRing_Take(t, &All), PS_RING_TAKE_NEW);
    assert_int_equal(push_id(t, g, 3), PST_ERR_RINGLAG); /* taken is not acknowledged */
    assert_int_equal(PSRing_Ack(t, t->ring->take_seq), 1);
    assert_int_equal(push_id(t, g, 3), PST_OK);
    assert_int_equal(push_id(t, g, 3), PST_DUPLICATE);
    assert_int_equal(PSRing_Lag(t->ring), 1);
    /* MAXLAG 0: no bound */
    t->ring->maxlag = 0;
    for (uint64_t s = 4; s < 40; s++) assert_int_equal(push_id(t, g, s), PST_OK);
    assert_int_equal(PSRing_Lag(t->ring), 37);
    PSTensor_Free(t);
}

static void test_take_with_nothing_to_send_catches_the_lag_up(void **st) {
    (void)st;
    PSTensor *t = mk_int(4);
    assert_int_equal(PSRing_Track(t, O("g0"), 0, 0), 1);
    t->ring->maxlag = 1;
    const float z[4] = {0, 0, 0, 0};
    push(t, z); /* a push that moves nothing still counts */
    assert_int_equal(push_id(t, z, 1), PST_ERR_RINGLAG);
    /* nothing to take: the lag drops to 0 (else a group whose pushes change
     * nothing would wait forever) */
    assert_int_equal(PSRing_Take(t, &All), PS_RING_TAKE_NONE_CAUGHTUP);
    assert_int_equal(PSRing_Lag(t->ring), 0);
    assert_int_equal(PSRing_Take(t, &All), PS_RING_TAKE_NONE);
    assert_int_equal(push_id(t, z, 1), PST_OK);
    PSTensor_Free(t);
}

static void test_sync_pushes_count_and_join_untrack_reset_the_lag(void **st) {
    (void)st;
    PSTensor *t = mk_int(4);
    t->sync_n = 2;
    assert_int_equal(PSRing_Track(t, O("g0"), 0, 0), 1);
    t->ring->maxlag = 3;
    const float g[4] = {1, 2, 3, 4};
    assert_int_equal(push_id(t, g, 1), PST_PENDING);
    assert_int_equal(push_id(t, g, 2), PST_OK);
    assert_int_equal(push_id(t, g, 3), PST_PENDING);
    assert_int_equal(push_id(t, g, 4), PST_ERR_RINGLAG); /* same rule in a round */
    assert_int_equal(t->round_count, 1);
    assert_int_equal(PSRing_Take(t, &All), PS_RING_TAKE_NEW);
    assert_int_equal(PSRing_Ack(t, t->ring->take_seq), 1);
    assert_int_equal(push_id(t, g, 4), PST_OK); /* the round closes */
    assert_int_equal(PSRing_Lag(t->ring), 1);
    /* JOIN drops the own change, so nothing is left to wait for: lag 0,
     * MAXLAG kept */
    assert_int_equal(push_id(t, g, 5), PST_PENDING);
    assert_int_equal(push_id(t, g, 6), PST_OK);
    assert_int_equal(PSRing_Lag(t->ring), 3);
    const float vals[4] = {7, 7, 7, 7};
    assert_int_equal(PSRing_Join(t, O("g0"), (const unsigned char *)vals, NULL, 0, 0), PS_RING_OK);
    assert_int_equal(PSRing_Lag(t->ring), 0);
    assert_int_equal(t->ring->maxlag, 3);
    assert_int_equal(t->ring->own_pushes, 6);
    /* UNTRACK drops it all; a new TRACK starts at lag 0, MAXLAG 0 */
    assert_int_equal(PSRing_Untrack(t), 1);
    assert_int_equal(PSRing_Track(t, O("g0"), 0, 0), 1);
    assert_int_equal(t->ring->maxlag, 0);
    assert_int_equal(t->ring->own_pushes, 0);
    PSTensor_Free(t);
}

static void test_load_lag_validates(void **st) {
    (void)st;
    PSTensor *t = mk_int(4);
    assert_int_equal(PSRing_LoadLag(t, 1, 2, 1, 2), PS_RING_EUNTRACKED);
    assert_int_equal(PSRing_LoadBegin(t, O("a"), 3, 1000, 0), PS_RING_OK);
    assert_int_equal(PSRing_LoadLag(t, PS_RING_MAX_MAXLAG + 1, 2, 1, 2), PS_RING_ECOUNT);
    assert_int_equal(PSRing_LoadLag(t, 4, 2, 3, 2), PS_RING_ECOUNT); /* acked > own */
    assert_int_equal(PSRing_LoadLag(t, 4, 2, 1, 3), PS_RING_ECOUNT); /* pend > own */
    assert_int_equal(PSRing_LoadLag(t, PS_RING_MAX_MAXLAG, 9, 4, 6), PS_RING_OK);
    assert_int_equal(PSRing_Lag(t->ring), 5);
    assert_int_equal(t->ring->maxlag, PS_RING_MAX_MAXLAG);
    PSTensor_Free(t);
}

/* JOIN ... KEEPOWN: a group that was out copies a neighbour's base but keeps
 * what its own workers pushed (accumulated, and a pending take the neighbour
 * has not got); it goes out again in the next take, under a new seq. */
static void test_join_keepown_keeps_the_own_change(void **st) {
    (void)st;
    PSTensor *t = mk_int(4);                        /* 0 1 2 3 */
    PSRing_Track(t, O("g1"), 0, 0);
    const float g1[4] = {-1, 0, 0, 0}, g2[4] = {0, -2, 0, 0};
    push(t, g1);                                    /* +1 at 0 */
    assert_true(PSRing_Take(t, &All) > 0);          /* pending seq 1: {0: +1} */
    push(t, g2);                                    /* +2 at 1, accumulated */
    const float copy[4] = {10, 20, 30, 40};
    const PSRingFrom from[2] = {{O("g0"), 7}, {O("g1"), 0}}; /* the neighbour lacks seq 1 */
    /* A kept change whose sum overflows refuses the join, changing nothing. */
    PSTensor *u = mk_int(4);
    PSRing_Track(u, O("g1"), 0, 0);
    const float gbig[4] = {-3.0e38f, 0, 0, 0};
    push(u, gbig);                                  /* own change 3e38 at 0 */
    Shot s;
    shot(u, &s);
    const float big[4] = {3.0e38f, 0, 0, 0};
    assert_int_equal(PSRing_Join(u, O("g1"), (const unsigned char *)big, from, 2, 1),
                     -PS_RING_ENONFINITE);
    assert_same(u, &s);
    assert_int_equal(PSRing_Join(u, O("g1"), (const unsigned char *)big, from, 2, 0), PS_RING_OK);
    PSTensor_Free(u);
    assert_int_equal(PSRing_Join(t, O("g1"), (const unsigned char *)copy, from, 2, 1), PS_RING_OK);
    const float want[4] = {11, 22, 30, 40};
    const float wbase[4] = {11, 20, 30, 40};        /* the copy + the pending take */
    assert_bits_equal(t->data->v, want, 4, "values keep the own change");
    assert_bits_equal(t->ring->base->v, wbase, 4, "base: the copy and the pending take");
    assert_int_equal(PSRing_FindOrigin(t->ring, O("g0"))->hwm, 7);
    /* The pending take stays pending under its seq (another group may have
     * it already: dedup decides), then the accumulated change goes under 2. */
    assert_non_null(t->ring->pend);
    assert_int_equal(t->ring->pend->seq, 1);
    assert_true(PSRing_Take(t, &All) > 0);
    assert_int_equal(t->ring->pend->seq, 1);
    assert_int_equal(PSRing_Ack(t, 1), 1);
    assert_true(PSRing_Take(t, &All) > 0);
    assert_int_equal(t->ring->pend->seq, 2);
    assert_int_equal(t->ring->pend->count, 1);
    assert_int_equal(t->ring->pend->idx[0], 1);
    assert_true(t->ring->pend->val[0] == 2.0f);
    /* A neighbour that already has seq 1: only the accumulated part is kept. */
    PSTensor *v = mk_int(4);
    PSRing_Track(v, O("g1"), 0, 0);
    push(v, g1);
    PSRing_Take(v, &All);
    push(v, g2);
    const PSRingFrom got[1] = {{O("g1"), 1}};
    assert_int_equal(PSRing_Join(v, O("g1"), (const unsigned char *)copy, got, 1, 1), PS_RING_OK);
    const float want2[4] = {10, 22, 30, 40};
    assert_bits_equal(v->data->v, want2, 4, "the delivered take is not kept twice");
    assert_bits_equal(v->ring->base->v, copy, 4, "base: the copy (it has the take)");
    assert_non_null(v->ring->pend);                 /* still delivered to whoever lacks it */
    PSTensor_Free(v);
    PSTensor_Free(t);
}

/* libps's encoder puts PREV p last (after HOPS), and leaves it out for 0
 * (an older server refuses an unknown option). */
static void test_the_apply_encoder_sends_prev(void **st) {
    (void)st;
    const uint32_t idx[1] = {3};
    const float v[1] = {1};
    char buf[256], none[256];
    const size_t n = ps_wire_apply_delta_prev("w", 1, "g0", 44, idx, v, 1, 1, 43, buf, sizeof(buf));
    const size_t m = ps_wire_apply_delta("w", 1, "g0", 44, idx, v, 1, 1, none, sizeof(none));
    assert_true(n < sizeof(buf) && m < sizeof(none));
    assert_memory_equal(buf, "*11\r\n", 5);
    assert_memory_equal(none, "*9\r\n", 4);
    const char *tail = "$4\r\nHOPS\r\n$1\r\n1\r\n$4\r\nPREV\r\n$2\r\n43\r\n";
    assert_true(n > strlen(tail));
    assert_memory_equal(buf + n - strlen(tail), tail, strlen(tail));
    /* the rest is the command without PREV */
    assert_memory_equal(buf + 5, none + 4, m - 4);
    assert_int_equal(n - 5 - (m - 4), strlen("$4\r\nPREV\r\n$2\r\n43\r\n"));
    assert_int_equal(ps_wire_apply_delta_prev("w", 1, "g0", 44, idx, v, 1, 1, 0, buf, sizeof(buf)),
                     m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_take_is_pending_until_acked_then_the_next_seq),
        cmocka_unit_test(test_threshold_and_maxelems_choose_the_largest_ties_by_lower_index),
        cmocka_unit_test(test_nothing_is_dropped_with_integer_data),
        cmocka_unit_test(test_duplicates_and_the_own_origin_are_ignored),
        cmocka_unit_test(test_prev_refuses_a_gap_and_join_heals_it),
        cmocka_unit_test(test_the_apply_encoder_sends_prev),
        cmocka_unit_test(test_at_most_64_origins),
        cmocka_unit_test(test_hops_queue_in_order_and_backlog_changes_nothing),
        cmocka_unit_test(test_join_copies_values_and_marks_and_never_lowers_take_seq),
        cmocka_unit_test(test_join_keepown_keeps_the_own_change),
        cmocka_unit_test(test_apply_does_not_write_a_snapshot_or_a_copy),
        cmocka_unit_test(test_load_validates_each_piece),
        cmocka_unit_test(test_lag_counts_own_pushes_and_the_ack_moves_the_mark),
        cmocka_unit_test(test_push_at_maxlag_is_refused_and_changes_nothing),
        cmocka_unit_test(test_take_with_nothing_to_send_catches_the_lag_up),
        cmocka_unit_test(test_sync_pushes_count_and_join_untrack_reset_the_lag),
        cmocka_unit_test(test_load_lag_validates),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
