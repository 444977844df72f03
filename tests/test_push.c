/* test_push.c -- cmocka tests of module/core/tensor.c's push paths beyond the
 * plain one: sync rounds (mean of n pushes, closing early, exactly-once
 * within a round) and row-sparse pushes (repeated unsorted rows, many
 * steps, clipping on the summed rows). */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor.h"
#include "tensor_helpers.h"

/* ------------------------------------------------------------------------
 * Sync rounds
 * ---------------------------------------------------------------------- */

/* Mean of the round as the documented rule computes it: acc starts at 0,
 * acc = acc + g * (float)(scale * gscale) per push, then acc * (float)(1/k). */
static void round_mean(float *acc, const float *const *gs, const double *scales, int k, size_t n) {
    memset(acc, 0, n * 4);
    for (int j = 0; j < k; j++) {
        const float sc = (float)scales[j];
        for (size_t i = 0; i < n; i++) {
            float x = gs[j][i] * sc;
            acc[i] = acc[i] + x;
        }
    }
    const float inv = (float)(1.0 / (double)k);
    for (size_t i = 0; i < n; i++) acc[i] = acc[i] * inv;
}

static void test_sync_round_applies_the_mean_once_after_n_pushes(void **st) {
    (void)st;
    const size_t n = 29;
    PSTensor *t = mk1(n, PS_OPT_SGD, 0.2);
    t->sync_n = 3;
    float ref[29], acc[29], g[3][29];
    memcpy(ref, t->data->v, sizeof(ref));
    const float *gs[3] = {g[0], g[1], g[2]};
    const double sc[3] = {1.0, 0.5, 1.0};
    PSPushResult r;
    for (int j = 0; j < 3; j++) {
        fill(g[j], n, -1, 1);
        PSPush p = dense(g[j]);
        p.scale = sc[j];
        p.has_version = 1;
        p.version = 0;
        int stt = PSTensor_Push(t, &p, &r);
        assert_int_equal(r.version, 1); /* the version this round produces */
        if (j < 2) {
            assert_int_equal(stt, PST_PENDING);
            assert_int_equal(t->version, 0);
            assert_int_equal(t->round_count, j + 1);
            assert_bits_equal(t->data->v, ref, n, "values untouched while the round is open");
        } else {
            assert_int_equal(stt, PST_OK);
        }
    }
    assert_int_equal(t->version, 1);
    assert_int_equal(t->round_count, 0);
    assert_null(t->round_acc);
    assert_int_equal(t->opt.step, 1);
    assert_int_equal(t->stats.rounds_closed, 1);
    round_mean(acc, gs, sc, 3, n);
    sgd_ref(ref, acc, n, 0.2);
    assert_bits_equal(t->data->v, ref, n, "mean step");
    /* A push computed from the closed round's version is stale. */
    PSPush p = dense(g[0]);
    p.has_version = 1;
    p.version = 0;
    State s = save_state(t);
    assert_int_equal(PSTensor_Push(t, &p, &r), PST_ERR_ROUND);
    assert_state_unchanged(t, &s);
    assert_int_equal(t->stats.stale_rejects, 1);
    PSTensor_Free(t);
}

static void test_close_round_applies_the_mean_of_fewer_pushes(void **st) {
    (void)st;
    const size_t n = 17;
    PSTensor *t = mk1(n, PS_OPT_MOMENTUM, 0.1);
    t->sync_n = 4;
    assert_int_equal(PSTensor_CloseRound(t), PST_PENDING); /* nothing open */
    assert_int_equal(t->version, 0);
    float g[2][17], acc[17];
    const float *gs[2] = {g[0], g[1]};
    const double sc[2] = {1.0, 1.0};
    PSPushResult r;
    for (int j = 0; j < 2; j++) {
        fill(g[j], n, -1, 1);
        PSPush p = dense(g[j]);
        assert_int_equal(PSTensor_Push(t, &p, &r), PST_PENDING);
    }
    PSTensor *ref = PSTensor_Copy(t); /* same state, shared buffers */
    assert_non_null(ref);
    assert_int_equal(PSTensor_CloseRound(t), PST_OK);
    assert_int_equal(t->version, 1);
    assert_int_equal(t->round_count, 0);
    /* The same as one async push of the mean on the copy. */
    round_mean(acc, gs, sc, 2, n);
    ref->sync_n = 0;
    ref->round_count = 0;
    PSBuf_Release(ref->round_acc);
    ref->round_acc = NULL;
    PSPush p = dense(acc);
    assert_int_equal(PSTensor_Push(ref, &p, &r), PST_OK);
    assert_bits_equal(t->data->v, ref->data->v, n, "closed round values");
    assert_bits_equal(t->opt.s[0]->v, ref->opt.s[0]->v, n, "closed round momentum");
    assert_int_equal(PSTensor_CloseRound(t), PST_PENDING);
    PSTensor_Free(ref);
    PSTensor_Free(t);
}

static void test_sync_push_with_id_is_deduplicated_within_the_round(void **st) {
    (void)st;
    PSTensor *t = mk1(5, PS_OPT_SGD, 0.1);
    t->sync_n = 2;
    float g[5] = {1, 2, 3, 4, 5};
    PSPush p = dense(g);
    p.id = "w", p.idlen = 1, p.seq = 1;
    PSPushResult r;
    assert_int_equal(PSTensor_Push(t, &p, &r), PST_PENDING);
    assert_int_equal(PSTensor_Push(t, &p, &r), PST_DUPLICATE); /* a retry of the same push */
    assert_int_equal(r.version, 1);
    assert_int_equal(t->round_count, 1);
    PSTensor_Free(t);
}

/* ------------------------------------------------------------------------
 * Row-sparse pushes
 * ---------------------------------------------------------------------- */

/* Builds the dense equivalent of a row push: rows summed in push order. */
static void dense_equivalent(float *dg, const float *g, const uint32_t *rows, size_t nrows,
                             size_t rl, size_t n) {
    memset(dg, 0, n * 4);
    int *seen = calloc(n / rl, sizeof(int));
    for (size_t r = 0; r < nrows; r++) {
        for (size_t k = 0; k < rl; k++) {
            float *d = &dg[rows[r] * rl + k];
            *d = seen[rows[r]] ? *d + g[r * rl + k] : g[r * rl + k];
        }
        seen[rows[r]] = 1;
    }
    free(seen);
}

static void test_row_push_with_repeated_unsorted_rows_equals_dense_equivalent(void **st) {
    (void)st;
    uint64_t dims[2] = {9, 5};
    const size_t n = 45, rl = 5;
    const uint32_t rows[] = {7, 2, 7, 0, 8, 2, 7};
    const size_t nrows = sizeof(rows) / sizeof(rows[0]);
    /* From zero optimizer state every optimizer leaves untouched rows as they
     * are under a zero gradient, so sparse == dense for all but ADAMW (whose
     * decay touches every row). ACCUM sums instead of stepping: test_accum.c. */
    for (int kind = 0; kind < PS_OPT_COUNT; kind++) {
        if (kind == PS_OPT_ADAMW || kind == PS_OPT_ACCUM) continue;
        PSTensor *a = mk(2, dims, kind, 0.1);
        PSTensor *b = PSTensor_Copy(a);
        float g[7 * 5], dg[45];
        fill(g, nrows * rl, -1, 1);
        PSPush p = dense(g);
        p.rows = (const unsigned char *)rows;
        p.nrows = nrows;
        PSPushResult r;
        assert_int_equal(PSTensor_Push(a, &p, &r), PST_OK);
        assert_int_equal(r.version, 1);
        dense_equivalent(dg, g, rows, nrows, rl, n);
        PSPush q = dense(dg);
        assert_int_equal(PSTensor_Push(b, &q, &r), PST_OK);
        char what[64];
        snprintf(what, sizeof(what), "%s rows vs dense", ps_optim_name(kind));
        assert_bits_equal(a->data->v, b->data->v, n, what);
        for (int j = 0; j < ps_optim_nstate(kind); j++)
            assert_bits_equal(a->opt.s[j]->v, b->opt.s[j]->v, n, "state");
        PSTensor_Free(a);
        PSTensor_Free(b);
    }
}

/* SGD over several pushes: sorted unique rows, unsorted rows, and repeats. */
static void test_row_pushes_over_many_steps_match_dense_sgd(void **st) {
    (void)st;
    uint64_t dims[3] = {6, 2, 3}; /* rows of 6 elements */
    const size_t n = 36, rl = 6;
    PSTensor *a = mk(3, dims, PS_OPT_SGD, 0.05);
    PSTensor *b = PSTensor_Copy(a);
    const uint32_t sets[4][4] = {{0, 1, 2, 5}, {5, 3, 1, 0}, {4, 4, 4, 4}, {2, 0, 2, 1}};
    for (int s = 0; s < 4; s++) {
        float g[24], dg[36];
        fill(g, 24, -2, 2);
        PSPush p = dense(g);
        p.rows = (const unsigned char *)sets[s];
        p.nrows = 4;
        p.scale = 0.5;
        PSPushResult r;
        assert_int_equal(PSTensor_Push(a, &p, &r), PST_OK);
        dense_equivalent(dg, g, sets[s], 4, rl, n);
        PSPush q = dense(dg);
        q.scale = 0.5;
        assert_int_equal(PSTensor_Push(b, &q, &r), PST_OK);
        assert_bits_equal(a->data->v, b->data->v, n, "sgd rows");
    }
    assert_int_equal(a->version, 4);
    PSTensor_Free(a);
    PSTensor_Free(b);
}

/* The clipping norm is the norm of the gradient the push applies: with
 * repeated rows that is the norm of the summed rows (the dense equivalent),
 * not of the rows as sent. */
static void test_row_push_clipping_uses_the_norm_of_the_summed_rows(void **st) {
    (void)st;
    uint64_t dims[2] = {4, 2};
    PSTensor *a = mk(2, dims, PS_OPT_SGD, 1.0);
    a->h.clipnorm = 1.0;
    PSTensor *b = PSTensor_Copy(a);
    const uint32_t rows[] = {1, 1};
    const float g[4] = {3, 0, 3, 0}; /* row 1 gets 6: norm 6 (sent rows: sqrt(18)) */
    PSPush p = dense(g);
    p.rows = (const unsigned char *)rows;
    p.nrows = 2;
    PSPushResult r;
    assert_int_equal(PSTensor_Push(a, &p, &r), PST_OK);
    float dg[8] = {0, 0, 6, 0, 0, 0, 0, 0};
    PSPush q = dense(dg);
    assert_int_equal(PSTensor_Push(b, &q, &r), PST_OK);
    size_t bad = 8;
    double x = 0, y = 0;
    for (size_t i = 0; i < 8 && bad == 8; i++) {
        x = a->data->v[i], y = b->data->v[i];
        if (fabs(x - y) > 1e-6 * fmax(1.0, fabs(y))) bad = i;
    }
    PSTensor_Free(a);
    PSTensor_Free(b);
    if (bad < 8)
        fail_msg("element %zu: sparse %.9g, dense %.9g (clip norm of the unsummed rows?)", bad, x, y);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sync_round_applies_the_mean_once_after_n_pushes),
        cmocka_unit_test(test_close_round_applies_the_mean_of_fewer_pushes),
        cmocka_unit_test(test_sync_push_with_id_is_deduplicated_within_the_round),
        cmocka_unit_test(test_row_push_with_repeated_unsorted_rows_equals_dense_equivalent),
        cmocka_unit_test(test_row_pushes_over_many_steps_match_dense_sgd),
        cmocka_unit_test(test_row_push_clipping_uses_the_norm_of_the_summed_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
