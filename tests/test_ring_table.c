/* test_ring_table.c -- cmocka tests of module/core/ring_table.[ch]: ring
 * tracking of embedding tables. Three groups with the same table exchange
 * their own changes as rows and end with the same rows bit for bit (SGD lr
 * 1, integer gradients: every sum exact); a take is pending until
 * acknowledged; THRESHOLD and MAXELEMS (rows) leave the rest accumulated,
 * nothing dropped; a delta applies once per (origin, seq), never comes back
 * as the group's own, and in seq order (PREV); a refused push leaves the
 * base map exactly as it was; bad deltas change nothing; the serialization
 * round-trips and refuses every truncation. */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "embed.h"
#include "ring_table.h"

#define O(s) (s), strlen(s)
#define DIM 4u

static PSEmbed *mk_table(int init) {
    PSEmbedConfig c;
    PSEmbed_DefaultConfig(&c, DIM);
    c.lr = 1.0;
    c.init = init;
    c.init_a = 0;
    c.init_b = 0.5;
    c.seed = 11;
    c.salt = 0x1234;
    const char *err = NULL;
    PSEmbed *t = PSEmbed_New(&c, &err);
    assert_non_null(t);
    return t;
}

static PSRingTable *track(PSEmbed *t, const char *origin) {
    int st;
    PSRingTable *r = PSRingTable_New(t, O(origin), 1 << 20, &st);
    assert_non_null(r);
    return r;
}

/* An own push through the ring hooks (what PS.PUSHGRAD does on a tracked
 * table): gradient g[i] for every element of id i. */
static int own_push(PSRingTable *r, PSEmbed *t, const uint64_t *ids, size_t k, const float *g) {
    uint64_t mark;
    assert_int_equal(PSRingTable_BeforePush(r, t, (const unsigned char *)ids, k, &mark), PS_RING_OK);
    float *gr = malloc(k * DIM * sizeof(float));
    for (size_t i = 0; i < k; i++)
        for (uint32_t j = 0; j < DIM; j++) gr[i * DIM + j] = g[i] * (float)(j + 1);
    const int rc = PSEmbed_Push(t, (const unsigned char *)ids, k, (const unsigned char *)gr, NULL);
    free(gr);
    PSRingTable_AfterPush(r, rc == PSE_OK, mark);
    return rc;
}

static void row_of(const PSEmbed *t, uint64_t id, float *out) {
    PSEmbed_Pull(t, (const unsigned char *)&id, 1, out);
}

static unsigned char *ser(const PSRingTable *r, size_t *n) {
    *n = PSRingTable_SerialSize(r);
    unsigned char *b = malloc(*n);
    PSRingTable_Serialize(r, b);
    return b;
}

static void assert_same_state(const PSRingTable *r, const unsigned char *b, size_t n,
                              const PSEmbed *t, uint64_t digest) {
    size_t m;
    unsigned char *c = ser(r, &m);
    assert_int_equal(m, n);
    assert_memory_equal(c, b, n);
    free(c);
    assert_true(PSEmbed_Digest64(t) == digest);
}

/* A take of r applied to the others (hops 0: the test plays the ring),
 * then acknowledged. Returns the rows sent. */
static uint64_t exchange(PSRingTable *r, PSEmbed *t, PSRingTable **or_, PSEmbed **ot, int no,
                         double thr, uint64_t maxrows) {
    PSRingTakeOpts o = {0, thr, maxrows};
    const int k = PSRingTable_Take(r, t, &o);
    if (k == PS_RING_TAKE_NONE || k == PS_RING_TAKE_NONE_CAUGHTUP) return 0;
    assert_int_equal(k, PS_RING_TAKE_NEW);
    const PSRingRows *d = r->pend;
    for (int i = 0; i < no; i++) {
        const int a = PSRingTable_Apply(or_[i], ot[i], r->origin, r->originlen, d->seq, 0,
                                        (const unsigned char *)d->ids, d->rows,
                                        (const unsigned char *)d->val, d->rows * DIM * 4, 0);
        assert_int_equal(a, 1);
    }
    const uint64_t rows = d->rows;
    assert_int_equal(PSRingTable_Ack(r, d->seq), 1);
    return rows;
}

/* Three groups, random sparse pushes (overlapping ids), exchanges with a
 * threshold and a row bound in between, then a final exchange without
 * either: every group holds the same rows, bit for bit, and exactly the
 * sum of all groups' pushes (zeros init, SGD lr 1, integer gradients). */
static void test_three_groups_converge(void **state) {
    (void)state;
    PSEmbed *t[3];
    PSRingTable *r[3];
    const char *names[3] = {"ga", "gb", "gc"};
    for (int g = 0; g < 3; g++) {
        t[g] = mk_table(PSE_INIT_ZEROS);
        r[g] = track(t[g], names[g]);
    }
    /* expected[id][j] = -(sum of gradients) * (j + 1) */
    enum { NID = 40 };
    double expect[NID] = {0};
    uint64_t seed = 99;
    for (int step = 0; step < 60; step++) {
        for (int g = 0; g < 3; g++) {
            uint64_t ids[5];
            float gr[5];
            for (int i = 0; i < 5; i++) {
                seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                ids[i] = (seed >> 33) % NID;
                gr[i] = (float)((int)((seed >> 20) % 7) - 3);
                expect[ids[i]] += gr[i];
            }
            assert_int_equal(own_push(r[g], t[g], ids, 5, gr), PSE_OK);
        }
        if (step % 7 == 3) {
            for (int g = 0; g < 3; g++) {
                PSRingTable *orr[2] = {r[(g + 1) % 3], r[(g + 2) % 3]};
                PSEmbed *ot[2] = {t[(g + 1) % 3], t[(g + 2) % 3]};
                exchange(r[g], t[g], orr, ot, 2, 0.1, 3);
            }
        }
    }
    for (int g = 0; g < 3; g++) {
        PSRingTable *orr[2] = {r[(g + 1) % 3], r[(g + 2) % 3]};
        PSEmbed *ot[2] = {t[(g + 1) % 3], t[(g + 2) % 3]};
        while (exchange(r[g], t[g], orr, ot, 2, 0, 0)) {
        }
        assert_int_equal(PSRingTable_Lag(r[g]), 0);
        assert_int_equal(PSRingTable_Accumulated(r[g], t[g]), 0);
        assert_int_equal(r[g]->n, 0); /* every row left the map */
    }
    for (uint64_t id = 0; id < NID; id++) {
        float a[DIM], b[DIM], c[DIM];
        row_of(t[0], id, a);
        row_of(t[1], id, b);
        row_of(t[2], id, c);
        assert_memory_equal(a, b, sizeof(a));
        assert_memory_equal(a, c, sizeof(a));
        for (uint32_t j = 0; j < DIM; j++) assert_true(a[j] == (float)(-expect[id] * (j + 1)));
    }
    /* Per origin: every delta taken was applied once at each other group. */
    for (int g = 0; g < 3; g++)
        for (int h = 0; h < 3; h++) {
            if (g == h) continue;
            const PSRingOrigin *e = NULL;
            for (uint32_t i = 0; i < r[h]->norigins; i++)
                if (strcmp(r[h]->origins[i].name, names[g]) == 0) e = &r[h]->origins[i];
            assert_non_null(e);
            assert_int_equal(e->hwm, r[g]->take_seq);
            assert_int_equal(e->applied, r[g]->take_seq);
        }
    for (int g = 0; g < 3; g++) {
        PSRingTable_Free(r[g]);
        PSEmbed_Free(t[g]);
    }
}

/* A row created by a delta starts from the table's initial values for its
 * id (the same bits in every group), gets push count 0, and is rebuilt by
 * the loader. */
static void test_apply_creates_row_from_init(void **state) {
    (void)state;
    PSEmbed *a = mk_table(PSE_INIT_NORMAL), *b = mk_table(PSE_INIT_NORMAL);
    PSRingTable *ra = track(a, "ga"), *rb = track(b, "gb");
    const uint64_t id = 77;
    const float g = 2;
    assert_int_equal(own_push(ra, a, &id, 1, &g), PSE_OK);
    PSRingTakeOpts o = {0, 0, 0};
    assert_int_equal(PSRingTable_Take(ra, a, &o), PS_RING_TAKE_NEW);
    assert_int_equal(ra->pend->rows, 1);
    assert_int_equal(PSRingTable_Apply(rb, b, O("ga"), ra->pend->seq, 0,
                                       (const unsigned char *)ra->pend->ids, 1,
                                       (const unsigned char *)ra->pend->val, DIM * 4, 0),
                     1);
    float x[DIM], y[DIM];
    row_of(a, id, x);
    row_of(b, id, y);
    assert_memory_equal(x, y, sizeof(x));
    PSEmbedRow row;
    assert_true(PSEmbed_Lookup(b, id, &row));
    assert_int_equal(row.pushes, 0);
    assert_int_equal(row.last_version, PSEmbed_Version(b));
    assert_int_equal(rb->n, 0); /* a received delta is not b's own change */
    /* The loader takes a row of push count 0 (its optimizer state is zero). */
    PSEmbedState st;
    PSEmbed_GetState(b, &st);
    const char *err = NULL;
    int rc;
    PSEmbed *rebuilt = PSEmbed_LoadBegin(PSEmbed_Config(b), &st, NULL, 0, &err, &rc);
    assert_non_null(rebuilt);
    for (uint64_t i = 0; i < PSEmbed_Rows(b); i++) {
        PSEmbedRow rr;
        PSEmbed_RowAt(b, i, &rr);
        assert_int_equal(PSEmbed_LoadRow(rebuilt, &rr, &err), PSE_OK);
    }
    assert_int_equal(PSEmbed_LoadEnd(rebuilt, &err), PSE_OK);
    assert_true(PSEmbed_Digest64(rebuilt) == PSEmbed_Digest64(b));
    PSEmbed_Free(rebuilt);
    /* b's later own push starts its base from the received values. */
    assert_int_equal(own_push(rb, b, &id, 1, &g), PSE_OK);
    assert_memory_equal(PSRingTable_Base(rb, id), y, sizeof(y));
    PSRingTable_Free(ra);
    PSRingTable_Free(rb);
    PSEmbed_Free(a);
    PSEmbed_Free(b);
}

/* Pending until acknowledged, answered again; THRESHOLD and MAXELEMS leave
 * the rest accumulated; the seq rules. */
static void test_take_pending_threshold(void **state) {
    (void)state;
    PSEmbed *t = mk_table(PSE_INIT_ZEROS);
    PSRingTable *r = track(t, "ga");
    PSRingTakeOpts o = {0, 0, 0};
    assert_int_equal(PSRingTable_Take(r, t, &o), PS_RING_TAKE_NONE);
    const uint64_t ids[3] = {5, 3, 9};
    const float g[3] = {1, 4, 2};
    assert_int_equal(own_push(r, t, ids, 3, g), PSE_OK);
    assert_int_equal(PSRingTable_Lag(r), 1);
    o.maxelems = 2; /* the two rows with the largest change: 3 (4) and 9 (2), id order */
    assert_int_equal(PSRingTable_Take(r, t, &o), PS_RING_TAKE_NEW);
    assert_int_equal(r->pend->rows, 2);
    assert_int_equal(r->pend->ids[0], 3);
    assert_int_equal(r->pend->ids[1], 9);
    assert_true(r->pend->val[0] == -4.0f && r->pend->val[3] == -16.0f);
    assert_int_equal(r->pend->seq, 1);
    assert_int_equal(PSRingTable_Take(r, t, &o), PS_RING_TAKE_AGAIN);
    assert_int_equal(PSRingTable_Ack(r, 2), 0);
    assert_int_equal(PSRingTable_Ack(r, 1), 1);
    assert_int_equal(PSRingTable_Lag(r), 0);
    assert_int_equal(PSRingTable_Accumulated(r, t), 1); /* row 5 waits */
    /* A change of row 5 below the threshold (relative to |w|) stays. */
    const uint64_t five = 5;
    const float tiny = 0.001f;
    assert_int_equal(own_push(r, t, &five, 1, &tiny), PSE_OK);
    PSRingTakeOpts hi = {10, 2.0, 0}; /* |d| > 2 |w|: never */
    assert_int_equal(PSRingTable_Take(r, t, &hi), PS_RING_TAKE_NONE_CAUGHTUP);
    assert_int_equal(PSRingTable_Lag(r), 0);
    assert_int_equal(PSRingTable_Accumulated(r, t), 1);
    PSRingTakeOpts all = {10, 0, 0};
    assert_int_equal(PSRingTable_Take(r, t, &all), PS_RING_TAKE_NEW);
    assert_int_equal(r->pend->seq, 10); /* SEQFLOOR */
    assert_int_equal(r->pend->rows, 1);
    float w[DIM];
    row_of(t, 5, w);
    for (uint32_t j = 0; j < DIM; j++) assert_true(r->pend->val[j] == w[j]); /* all of it */
    assert_int_equal(PSRingTable_Ack(r, 10), 1);
    assert_int_equal(r->n, 0);
    PSRingTable_Free(r);
    PSEmbed_Free(t);
}

/* Dedup, own origin, PREV gaps, forward FIFO with hops and its bound. */
static void test_apply_rules(void **state) {
    (void)state;
    PSEmbed *t = mk_table(PSE_INIT_ZEROS);
    PSRingTable *r = track(t, "ga");
    r->maxqueue = 1; /* any entry beyond the first is over the bound */
    uint64_t ids[2] = {1, 2};
    float v[2 * DIM];
    for (unsigned i = 0; i < 2 * DIM; i++) v[i] = (float)i;
    const unsigned char *I = (const unsigned char *)ids, *V = (const unsigned char *)v;
    assert_int_equal(PSRingTable_Apply(r, t, O("gb"), 2, 1, I, 2, V, sizeof(v), 0), -PS_RING_EGAP);
    assert_int_equal(PSRingTable_Apply(r, t, O("ga"), 1, 0, I, 2, V, sizeof(v), 0), 0);
    assert_int_equal(PSRingTable_Apply(r, t, O("gb"), 1, 0, I, 2, V, sizeof(v), 2), 1);
    assert_int_equal(PSRingTable_Apply(r, t, O("gb"), 1, 0, I, 2, V, sizeof(v), 2), 0);
    assert_int_equal(r->fwd_len, 1);
    assert_int_equal(PSRingTable_Apply(r, t, O("gc"), 1, 0, I, 2, V, sizeof(v), 1),
                     -PS_RING_BACKLOG);
    const PSRingRows *f = PSRingTable_FwdPeek(r);
    assert_int_equal(f->hops, 1);
    assert_int_equal(f->rows, 2);
    assert_int_equal(PSRingTable_FwdAck(r, O("gb"), 2), 0);
    assert_int_equal(PSRingTable_FwdAck(r, O("gb"), 1), 1);
    assert_int_equal(PSRingTable_Apply(r, t, O("gc"), 1, 0, I, 2, V, sizeof(v), 1), 1);
    assert_int_equal(PSRingTable_Apply(r, t, O("gb"), 2, 1, I, 2, V, sizeof(v), 0), 1);
    float w[DIM];
    row_of(t, 2, w);
    for (uint32_t j = 0; j < DIM; j++) assert_true(w[j] == 3 * (float)(DIM + j));
    assert_int_equal(r->applied, 3);
    assert_int_equal(r->n, 0);
    PSRingTable_Free(r);
    PSEmbed_Free(t);
}

/* Malformed deltas: a clear status, nothing changed. */
static void test_bad_deltas_change_nothing(void **state) {
    (void)state;
    PSEmbed *t = mk_table(PSE_INIT_NORMAL);
    PSRingTable *r = track(t, "ga");
    const uint64_t one = 1;
    const float g = 1;
    assert_int_equal(own_push(r, t, &one, 1, &g), PSE_OK);
    size_t n;
    unsigned char *b = ser(r, &n);
    const uint64_t dg = PSEmbed_Digest64(t);
    float v[2 * DIM] = {0};
    v[1] = 1;
    uint64_t unsorted[2] = {4, 3}, dup[2] = {3, 3}, ok[2] = {3, 4};
    const unsigned char *V = (const unsigned char *)v;
    assert_int_equal(PSRingTable_Apply(r, t, O("gb"), 1, 0, (const unsigned char *)unsorted, 2, V,
                                       sizeof(v), 0),
                     -PS_RING_EINDEX);
    assert_int_equal(
        PSRingTable_Apply(r, t, O("gb"), 1, 0, (const unsigned char *)dup, 2, V, sizeof(v), 0),
        -PS_RING_EINDEX);
    assert_int_equal(
        PSRingTable_Apply(r, t, O("gb"), 1, 0, (const unsigned char *)ok, 2, V, sizeof(v) - 4, 0),
        -PS_RINGT_ESIZE);
    assert_int_equal(
        PSRingTable_Apply(r, t, O("gb"), 1, 0, (const unsigned char *)ok, 0, V, 0, 0),
        -PS_RING_ECOUNT);
    assert_int_equal(
        PSRingTable_Apply(r, t, O("g b"), 1, 0, (const unsigned char *)ok, 2, V, sizeof(v), 0),
        -PS_RING_EORIGIN);
    assert_int_equal(
        PSRingTable_Apply(r, t, O("gb"), 0, 0, (const unsigned char *)ok, 2, V, sizeof(v), 0),
        -PS_RING_ESEQ);
    v[3] = NAN;
    assert_int_equal(
        PSRingTable_Apply(r, t, O("gb"), 1, 0, (const unsigned char *)ok, 2, V, sizeof(v), 0),
        -PS_RING_ENONFINITE);
    v[3] = 3e38f;
    float big = -8e37f; /* values up to 3.2e38 */
    uint64_t id1[1] = {1};
    assert_int_equal(own_push(r, t, id1, 1, &big), PSE_OK);
    free(b);
    b = ser(r, &n);
    const uint64_t dg2 = PSEmbed_Digest64(t);
    float v1[DIM] = {0, 0, 0, 3e38f};
    assert_int_equal(PSRingTable_Apply(r, t, O("gb"), 1, 0, (const unsigned char *)id1, 1,
                                       (const unsigned char *)v1, sizeof(v1), 0),
                     -PS_RING_ENONFINITE);
    assert_same_state(r, b, n, t, dg2);
    assert_true(dg != dg2);
    free(b);
    PSRingTable_Free(r);
    PSEmbed_Free(t);
}

/* A push the table refuses leaves the map exactly as it was (the entries
 * BeforePush added go again); a push that is applied counts. */
static void test_refused_push_rolls_back(void **state) {
    (void)state;
    PSEmbed *t = mk_table(PSE_INIT_NORMAL);
    PSRingTable *r = track(t, "ga");
    uint64_t ids[20];
    float g[20];
    for (int i = 0; i < 20; i++) {
        ids[i] = (uint64_t)i * 7919;
        g[i] = 1;
    }
    assert_int_equal(own_push(r, t, ids, 10, g), PSE_OK);
    size_t n;
    unsigned char *b = ser(r, &n);
    const uint64_t dg = PSEmbed_Digest64(t);
    g[15] = NAN;
    assert_int_equal(own_push(r, t, ids, 20, g), PSE_ERR_NONFINITE);
    assert_same_state(r, b, n, t, dg);
    assert_int_equal(r->own_pushes, 1);
    for (int i = 0; i < 20; i++) assert_true((PSRingTable_Base(r, ids[i]) != NULL) == (i < 10));
    free(b);
    PSRingTable_Free(r);
    PSEmbed_Free(t);
}

/* The serialization round-trips to the same bytes (pending take, forward
 * entries, marks, map), a clone equals it, and every truncation and a
 * flipped dim are refused. */
static void test_serialize_roundtrip(void **state) {
    (void)state;
    PSEmbed *t = mk_table(PSE_INIT_NORMAL);
    PSRingTable *r = track(t, "ga");
    r->maxlag = 9;
    const uint64_t ids[3] = {3, 1, 2};
    const float g[3] = {1, 2, 3};
    assert_int_equal(own_push(r, t, ids, 3, g), PSE_OK);
    PSRingTakeOpts o = {0, 0, 2};
    assert_int_equal(PSRingTable_Take(r, t, &o), PS_RING_TAKE_NEW);
    assert_int_equal(own_push(r, t, ids, 2, g), PSE_OK);
    uint64_t fid[1] = {40};
    float fv[DIM] = {1, 2, 3, 4};
    assert_int_equal(PSRingTable_Apply(r, t, O("gb"), 4, 0, (const unsigned char *)fid, 1,
                                       (const unsigned char *)fv, sizeof(fv), 3),
                     1);
    size_t n;
    unsigned char *b = ser(r, &n);
    const char *why = NULL;
    PSRingTable *c = PSRingTable_Deserialize(t, b, n, &why);
    assert_non_null(c);
    assert_same_state(c, b, n, t, PSEmbed_Digest64(t));
    PSRingTable *d = PSRingTable_Clone(r, t);
    assert_same_state(d, b, n, t, PSEmbed_Digest64(t));
    assert_int_equal(PSRingTable_MemUsage(d), PSRingTable_MemUsage(r));
    for (size_t k = 0; k < n; k++) {
        PSRingTable *x = PSRingTable_Deserialize(t, b, k, &why);
        assert_null(x);
        assert_non_null(why);
    }
    b[8] ^= 1; /* dim */
    assert_null(PSRingTable_Deserialize(t, b, n, &why));
    free(b);
    PSRingTable_Free(c);
    PSRingTable_Free(d);
    PSRingTable_Free(r);
    PSEmbed_Free(t);
}

/* JOIN of a table: a paged copy of a neighbour's base view under its marks
 * (JoinBegin / JoinRows / JoinEnd); the neighbour's own change then arrives
 * once as deltas; bad pages change nothing; a join in progress survives a
 * serialization round trip (layout 2) and a loader checks it. */
static void test_join_paged_copy(void **state) {
    (void)state;
    PSEmbed *ta = mk_table(PSE_INIT_NORMAL), *tb = mk_table(PSE_INIT_NORMAL);
    PSRingTable *ra = track(ta, "ga"), *rb = track(tb, "gb");
    const uint64_t ids[5] = {9, 2, 30, 4, 7};
    const float g[5] = {1, 2, 3, 4, 5};
    assert_int_equal(own_push(ra, ta, ids, 5, g), PSE_OK);
    PSRingTakeOpts o = {0, 0, 2};
    assert_int_equal(PSRingTable_Take(ra, ta, &o), PS_RING_TAKE_NEW); /* pending, seq 1 */
    assert_int_equal(own_push(ra, ta, ids, 2, g), PSE_OK);               /* accumulated */
    assert_int_equal(own_push(rb, tb, ids + 3, 2, g), PSE_OK);           /* b's: dropped */
    /* The copy: a's base view, in two pages of ascending ids. */
    const uint64_t n = PSEmbed_Rows(ta);
    uint64_t cid[8];
    float cv[8 * DIM];
    for (uint64_t i = 0; i < n; i++) {
        PSEmbedRow row;
        PSEmbed_RowAt(ta, i, &row);
        cid[i] = row.id;
    }
    for (uint64_t i = 0; i < n; i++) /* sort ids (n is small) */
        for (uint64_t j = i + 1; j < n; j++)
            if (cid[j] < cid[i]) {
                const uint64_t x = cid[i];
                cid[i] = cid[j];
                cid[j] = x;
            }
    for (uint64_t i = 0; i < n; i++) {
        PSEmbedRow row;
        assert_true(PSEmbed_Lookup(ta, cid[i], &row));
        memcpy(cv + i * DIM, PSRingTable_BaseView(ra, &row), DIM * sizeof(float));
    }
    PSRingFrom from[1] = {{"ga", 2, ra->take_seq}};
    assert_int_equal(PSRingTable_JoinRows(rb, tb, 0, (const unsigned char *)cid, 1,
                                          (const unsigned char *)cv, DIM * 4),
                     PS_RINGT_ENOJOIN);
    assert_int_equal(PSRingTable_JoinBegin(&rb, &tb, O("gb"), from, 1, 1 << 20), PS_RING_OK);
    assert_int_equal(PSEmbed_Rows(tb), 0);
    assert_int_equal(rb->joining, 1);
    assert_int_equal(PSRingTable_JoinRows(rb, tb, 1, (const unsigned char *)cid, 2,
                                          (const unsigned char *)cv, 2 * DIM * 4),
                     PS_RINGT_EPAGE);
    assert_int_equal(PSRingTable_JoinRows(rb, tb, 0, (const unsigned char *)cid, 2,
                                          (const unsigned char *)cv, 2 * DIM * 4 - 4),
                     PS_RINGT_ESIZE);
    assert_int_equal(PSRingTable_JoinRows(rb, tb, 0, (const unsigned char *)cid, 2,
                                          (const unsigned char *)cv, 2 * DIM * 4),
                     PS_RING_OK);
    /* Half-finished: a round trip keeps it; a page copied again is refused. */
    size_t sn;
    unsigned char *b = ser(rb, &sn);
    const char *why = NULL;
    PSRingTable *c = PSRingTable_Deserialize(tb, b, sn, &why);
    assert_non_null(c);
    assert_same_state(c, b, sn, tb, PSEmbed_Digest64(tb));
    PSRingTable_Free(c);
    assert_null(PSRingTable_Deserialize(ta, b, sn, &why)); /* rows differ from join_rows */
    free(b);
    assert_int_equal(PSRingTable_JoinRows(rb, tb, 1, (const unsigned char *)(cid + 1), 1,
                                          (const unsigned char *)(cv + DIM), DIM * 4),
                     PS_RINGT_EDUPROW);
    assert_int_equal(PSRingTable_JoinRows(rb, tb, 1, (const unsigned char *)(cid + 2), n - 2,
                                          (const unsigned char *)(cv + 2 * DIM), (n - 2) * DIM * 4),
                     PS_RING_OK);
    assert_int_equal(PSRingTable_JoinEnd(rb, 2, n + 1), PS_RINGT_EPAGE);
    assert_int_equal(PSRingTable_JoinEnd(rb, 2, n), PS_RING_OK);
    assert_int_equal(rb->joining, 0);
    assert_int_equal(PSRingTable_Lag(rb), 0);
    /* a's pending take is in the copy (ignored); the rest arrives once. */
    const PSRingRows *p = ra->pend;
    assert_int_equal(PSRingTable_Apply(rb, tb, O("ga"), p->seq, 0, (const unsigned char *)p->ids,
                                       p->rows, (const unsigned char *)p->val, p->rows * DIM * 4, 0),
                     0);
    assert_int_equal(PSRingTable_Ack(ra, p->seq), 1);
    PSRingTable *rbs[1] = {rb};
    PSEmbed *tbs[1] = {tb};
    while (exchange(ra, ta, rbs, tbs, 1, 0, 0)) {
    }
    for (uint64_t id = 0; id < 40; id++) {
        float x[DIM], y[DIM];
        row_of(ta, id, x);
        row_of(tb, id, y);
        assert_memory_equal(x, y, sizeof(x));
    }
    PSRingTable_Free(ra);
    PSRingTable_Free(rb);
    PSEmbed_Free(ta);
    PSEmbed_Free(tb);
}

static void test_can_track(void **state) {
    (void)state;
    PSEmbedConfig c;
    PSEmbed_DefaultConfig(&c, DIM);
    const char *err;
    c.capacity = 100;
    PSEmbed *t = PSEmbed_New(&c, &err);
    assert_int_equal(PSRingTable_CanTrack(t), PS_RINGT_EEVICT);
    PSEmbed_Free(t);
    c.capacity = 0;
    c.ttl = 10;
    t = PSEmbed_New(&c, &err);
    assert_int_equal(PSRingTable_CanTrack(t), PS_RINGT_EEVICT);
    PSEmbed_Free(t);
    c.ttl = 0;
    c.optim = PSE_OPT_FTRL;
    t = PSEmbed_New(&c, &err);
    assert_non_null(t);
    assert_int_equal(PSRingTable_CanTrack(t), PS_RINGT_EFTRL);
    int st;
    assert_null(PSRingTable_New(t, O("ga"), 1, &st));
    assert_int_equal(st, PS_RINGT_EFTRL);
    PSEmbed_Free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_three_groups_converge),
        cmocka_unit_test(test_apply_creates_row_from_init),
        cmocka_unit_test(test_take_pending_threshold),
        cmocka_unit_test(test_apply_rules),
        cmocka_unit_test(test_bad_deltas_change_nothing),
        cmocka_unit_test(test_refused_push_rolls_back),
        cmocka_unit_test(test_serialize_roundtrip),
        cmocka_unit_test(test_join_paged_copy),
        cmocka_unit_test(test_can_track),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
