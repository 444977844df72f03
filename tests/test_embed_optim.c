/* test_embed_optim.c -- cmocka tests of the embedding table's per-row
 * optimizers and row rules (module/embed*.c): every optimizer against a
 * float32 reference written here from the rules in docs/embed-design.md
 * (bit-exact), duplicate ids summed in the order given, lazy per-row Adam
 * bias correction, FTRL's L1 zeroing, row initialization as a pure function
 * of (seed, id), pulls of unknown ids and the non-finite guard. */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embed.h"

/* ------------------------------------------------------------------------
 * Helpers
 * ---------------------------------------------------------------------- */

static uint64_t Rs = 0x2545f4914f6cdd1dULL;
static float frand(float lo, float hi) {
    Rs ^= Rs << 13;
    Rs ^= Rs >> 7;
    Rs ^= Rs << 17;
    return (float)(lo + (hi - lo) * ((double)(Rs >> 11) / 9007199254740992.0));
}

static int push(PSEmbed *t, const uint64_t *ids, size_t k, const float *g) {
    return PSEmbed_Push(t, (const unsigned char *)ids, k, (const unsigned char *)g, NULL);
}

static void assert_same_bits(const float *a, const float *b, size_t n, const char *what) {
    if (memcmp(a, b, n * sizeof(float)) != 0) {
        for (size_t i = 0; i < n; i++)
            if (memcmp(&a[i], &b[i], 4))
                fail_msg("%s: element %zu: %.9g vs %.9g", what, i, (double)a[i], (double)b[i]);
    }
}

static PSEmbedConfig config(int optim, uint32_t dim) {
    PSEmbedConfig c;
    PSEmbed_DefaultConfig(&c, dim);
    c.optim = optim;
    c.lr = 0.05;
    c.momentum = 0.8;
    c.beta1 = 0.85;
    c.beta2 = 0.995;
    c.eps = 1e-6;
    c.alpha = 0.1;
    c.beta = 1.0;
    c.l1 = 0.02;
    c.l2 = 0.5;
    if (optim != PSE_OPT_FTRL) {
        c.init = PSE_INIT_UNIFORM;
        c.init_a = -0.1;
        c.init_b = 0.1;
        c.seed = 42;
    }
    return c;
}

/* ------------------------------------------------------------------------
 * The reference: one row, one element at a time, from the documented rules.
 * ---------------------------------------------------------------------- */

typedef struct RefRow {
    float w[40], a[40], b[40]; /* values, first and second state vector */
    float acc;
    uint32_t t;
} RefRow;

static double ref_pow(double x, uint32_t t) {
    double r = 1.0;
    for (; t; t >>= 1, x = x * x)
        if (t & 1u) r = r * x;
    return r;
}

static void ref_step(const PSEmbedConfig *c, RefRow *r, const float *g, uint32_t dim) {
    const float lr = (float)c->lr, eps = (float)c->eps;
    r->t++;
    if (c->optim == PSE_OPT_ROWADAGRAD) {
        float sq = 0.0f;
        for (uint32_t i = 0; i < dim; i++) sq = sq + g[i] * g[i];
        r->acc = r->acc + sq / (float)dim;
    }
    const float step = (float)(c->lr / (1.0 - ref_pow(c->beta1, r->t)));
    const float rbc2 = (float)(1.0 / sqrt(1.0 - ref_pow(c->beta2, r->t)));
    for (uint32_t i = 0; i < dim; i++) {
        const float gi = g[i];
        switch (c->optim) {
        case PSE_OPT_SGD: r->w[i] = r->w[i] - lr * gi; break;
        case PSE_OPT_MOMENTUM:
            r->a[i] = (float)c->momentum * r->a[i] + gi;
            r->w[i] = r->w[i] - lr * r->a[i];
            break;
        case PSE_OPT_ADAGRAD:
            r->a[i] = r->a[i] + gi * gi;
            r->w[i] = r->w[i] - lr * (gi / (sqrtf(r->a[i]) + eps));
            break;
        case PSE_OPT_ROWADAGRAD: r->w[i] = r->w[i] - lr * (gi / (sqrtf(r->acc) + eps)); break;
        case PSE_OPT_ADAM:
            r->a[i] = (float)c->beta1 * r->a[i] + (float)(1.0 - c->beta1) * gi;
            r->b[i] = (float)c->beta2 * r->b[i] + (float)(1.0 - c->beta2) * (gi * gi);
            r->w[i] = r->w[i] - step * (r->a[i] / (sqrtf(r->b[i]) * rbc2 + eps));
            break;
        case PSE_OPT_FTRL: {
            const float alpha = (float)c->alpha, l1 = (float)c->l1;
            const float nn = r->b[i] + gi * gi;
            const float sigma = (sqrtf(nn) - sqrtf(r->b[i])) / alpha;
            r->a[i] = r->a[i] + (gi - sigma * r->w[i]);
            r->b[i] = nn;
            const float z = r->a[i];
            if (fabsf(z) <= l1)
                r->w[i] = 0.0f;
            else
                r->w[i] = -(z - (z > 0 ? l1 : -l1)) /
                          (((float)c->beta + sqrtf(nn)) / alpha + (float)c->l2);
            break;
        }
        }
    }
}

/* ------------------------------------------------------------------------
 * Tests
 * ---------------------------------------------------------------------- */

/* Three rows pushed at different rates (row 3 only every third push, so
 * Adam's per-row step counts differ) through 30 pushes; every value and
 * every state vector equals the reference bit for bit. */
static void test_every_optimizer_matches_the_float32_reference_bit_exactly(void **state) {
    (void)state;
    /* dim 7: scalar tails; 16 and 37: the vectorized bodies (embed_optim.c
     * is built with -O3) against the scalar reference. */
    static const uint32_t dims[] = {7, 16, 37};
    for (int di = 0; di < 3; di++)
    for (int opt = 0; opt < PSE_OPT_COUNT; opt++) {
        const uint32_t dim = dims[di];
        PSEmbedConfig c = config(opt, dim);
        PSEmbed *t = PSEmbed_New(&c, NULL);
        assert_non_null(t);
        RefRow ref[4];
        memset(ref, 0, sizeof(ref));
        for (uint64_t id = 1; id <= 3; id++) PSEmbed_InitRow(&c, id, ref[id].w);
        const int ns = PSEmbed_NumStateVectors(opt);
        for (int p = 0; p < 30; p++) {
            uint64_t ids[3] = {1, 2, 3};
            const size_t k = p % 3 == 0 ? 3 : 2;
            float g[3 * 40];
            for (size_t i = 0; i < k * dim; i++) g[i] = frand(-2, 2);
            assert_int_equal(push(t, ids, k, g), PSE_OK);
            for (size_t j = 0; j < k; j++) ref_step(&c, &ref[ids[j]], g + j * dim, dim);
        }
        for (uint64_t id = 1; id <= 3; id++) {
            PSEmbedRow row;
            assert_true(PSEmbed_Lookup(t, id, &row));
            assert_int_equal(row.pushes, ref[id].t);
            assert_same_bits(row.data, ref[id].w, dim, PSEmbed_OptimName(opt));
            if (ns > 0) assert_same_bits(row.data + dim, ref[id].a, dim, "state 0");
            if (ns > 1) assert_same_bits(row.data + 2 * dim, ref[id].b, dim, "state 1");
            assert_memory_equal(&row.rowacc, &ref[id].acc, 4);
            float pulled[40];
            PSEmbed_Pull(t, (const unsigned char *)&id, 1, pulled);
            assert_same_bits(pulled, ref[id].w, dim, "pull");
        }
        PSEmbed_Free(t);
    }
}

/* 1 + 1e8 - 1e8 is 0 in float32 summed left to right, 1 summed the other
 * way: the row moves by exactly 0 with SGD lr 1. */
static void test_duplicate_ids_are_summed_in_the_order_given(void **state) {
    (void)state;
    PSEmbedConfig c = config(PSE_OPT_SGD, 1);
    c.init = PSE_INIT_ZEROS;
    c.lr = 1.0;
    PSEmbed *t = PSEmbed_New(&c, NULL);
    uint64_t ids[4] = {9, 9, 5, 9};
    float g[4] = {1.0f, 1e8f, 3.0f, -1e8f};
    PSEmbedPushResult res;
    assert_int_equal(PSEmbed_Push(t, (const unsigned char *)ids, 4, (const unsigned char *)g, &res),
                     PSE_OK);
    assert_int_equal(res.unique, 2);
    assert_int_equal(res.updated, 2);
    PSEmbedRow row;
    assert_true(PSEmbed_Lookup(t, 9, &row));
    assert_true(row.data[0] == 0.0f);
    assert_int_equal(row.pushes, 1); /* one step per distinct row */
    assert_true(PSEmbed_Lookup(t, 5, &row));
    assert_true(row.data[0] == -3.0f);
    /* Rows are stored in order of first appearance. */
    PSEmbed_RowAt(t, 0, &row);
    assert_int_equal(row.id, 9);
    PSEmbed_Free(t);
}

static void test_ftrl_keeps_weights_at_zero_while_z_is_within_l1(void **state) {
    (void)state;
    PSEmbedConfig c = config(PSE_OPT_FTRL, 2);
    c.l1 = 1.0;
    PSEmbed *t = PSEmbed_New(&c, NULL);
    uint64_t id = 4;
    float g[2] = {0.5f, 3.0f};
    assert_int_equal(push(t, &id, 1, g), PSE_OK);
    PSEmbedRow row;
    assert_true(PSEmbed_Lookup(t, id, &row));
    assert_true(row.data[0] == 0.0f);  /* z = 0.5 <= l1 */
    assert_true(row.data[1] < 0.0f);   /* z = 3 > l1: w = -(3 - 1) / (...) */
    assert_true(row.data[2] == 0.5f && row.data[3] == 3.0f); /* z */
    assert_true(row.data[4] == 0.25f && row.data[5] == 9.0f); /* n */
    PSEmbed_Free(t);
}

/* A row first pushed at table version 50 takes Adam's first step, the same
 * step as a row pushed at version 1. */
static void test_adam_bias_correction_counts_each_rows_own_pushes(void **state) {
    (void)state;
    PSEmbedConfig c = config(PSE_OPT_ADAM, 3);
    c.init = PSE_INIT_ZEROS;
    PSEmbed *t = PSEmbed_New(&c, NULL);
    const float g[3] = {0.3f, -1.0f, 2.0f};
    uint64_t a = 1, b = 2;
    assert_int_equal(push(t, &a, 1, g), PSE_OK);
    for (int i = 0; i < 49; i++) assert_int_equal(push(t, &a, 1, g), PSE_OK);
    assert_int_equal(push(t, &b, 1, g), PSE_OK);
    PSEmbed *u = PSEmbed_New(&c, NULL);
    assert_int_equal(push(u, &a, 1, g), PSE_OK);
    PSEmbedRow rb, ra;
    assert_true(PSEmbed_Lookup(t, b, &rb));
    assert_true(PSEmbed_Lookup(u, a, &ra));
    assert_int_equal(rb.pushes, 1);
    assert_int_equal(rb.last_version, 51);
    assert_same_bits(rb.data, ra.data, 9, "first Adam step");
    PSEmbed_Free(t);
    PSEmbed_Free(u);
}

static void test_row_init_is_a_pure_function_of_seed_and_id(void **state) {
    (void)state;
    for (int init = PSE_INIT_UNIFORM; init <= PSE_INIT_NORMAL; init++) {
        PSEmbedConfig c = config(PSE_OPT_SGD, 6);
        c.init = init;
        c.init_a = init == PSE_INIT_NORMAL ? 0.5 : -1.0;
        c.init_b = 1.0;
        PSEmbed *t1 = PSEmbed_New(&c, NULL), *t2 = PSEmbed_New(&c, NULL);
        /* Table 1 sees other pushes first; the pulls of id 77 still agree. */
        uint64_t other[2] = {1, 2};
        float g[12] = {0};
        assert_int_equal(push(t1, other, 2, g), PSE_OK);
        uint64_t id = 77;
        float a[6], b[6], d[6];
        PSEmbed_Pull(t1, (const unsigned char *)&id, 1, a);
        PSEmbed_Pull(t2, (const unsigned char *)&id, 1, b);
        assert_same_bits(a, b, 6, "same seed, same id");
        PSEmbed_InitRow(&c, id, d);
        assert_same_bits(a, d, 6, "pull of an unknown id is its initial row");
        assert_int_equal(PSEmbed_Rows(t1), 2); /* the pull created nothing */
        for (int i = 0; i < 6; i++) {
            if (init == PSE_INIT_UNIFORM) assert_true(a[i] >= -1.0f && a[i] < 1.0f);
        }
        uint64_t id2 = 78;
        PSEmbed_Pull(t1, (const unsigned char *)&id2, 1, b);
        assert_memory_not_equal(a, b, sizeof(a));
        c.seed++;
        PSEmbed_InitRow(&c, id, d);
        assert_memory_not_equal(a, d, sizeof(a));
        /* The first push starts from the initial row. */
        c.seed--;
        float gg[6] = {1, 1, 1, 1, 1, 1};
        assert_int_equal(push(t2, &id, 1, gg), PSE_OK);
        PSEmbed_Pull(t2, (const unsigned char *)&id, 1, b);
        for (int i = 0; i < 6; i++) assert_true(b[i] == a[i] - (float)c.lr * 1.0f);
        PSEmbed_Free(t1);
        PSEmbed_Free(t2);
    }
}

static void test_pull_of_unknown_ids_answers_zeros_when_configured(void **state) {
    (void)state;
    PSEmbedConfig c = config(PSE_OPT_SGD, 4);
    c.unknown_zeros = 1;
    PSEmbed *t = PSEmbed_New(&c, NULL);
    uint64_t ids[3] = {5, 6, 5};
    float out[12];
    memset(out, 0xff, sizeof(out));
    PSEmbed_Pull(t, (const unsigned char *)ids, 3, out);
    for (int i = 0; i < 12; i++) assert_true(out[i] == 0.0f);
    assert_int_equal(PSEmbed_Rows(t), 0);
    PSEmbed_Free(t);
}

static void test_push_rejects_nan_and_inf_and_leaves_table_unchanged(void **state) {
    (void)state;
    PSEmbedConfig c = config(PSE_OPT_ADAGRAD, 2);
    PSEmbed *t = PSEmbed_New(&c, NULL);
    uint64_t ids[2] = {1, 2};
    float g[4] = {1, 2, 3, 4};
    assert_int_equal(push(t, ids, 2, g), PSE_OK);
    const uint64_t d = PSEmbed_Digest64(t);
    ids[1] = 3;
    g[3] = NAN;
    assert_int_equal(push(t, ids, 2, g), PSE_ERR_NONFINITE);
    g[3] = INFINITY;
    assert_int_equal(push(t, ids, 2, g), PSE_ERR_NONFINITE);
    assert_int_equal(push(t, ids, 0, g), PSE_ERR_ARG);
    assert_int_equal(PSEmbed_Digest64(t), d);
    assert_int_equal(PSEmbed_Version(t), 1);
    PSEmbed_Free(t);
}

static void test_config_rules_reject_bad_hyperparameters(void **state) {
    (void)state;
    PSEmbedConfig c = config(PSE_OPT_FTRL, 4);
    assert_null(PSEmbed_CheckConfig(&c));
    c.l1 = -1;
    assert_non_null(PSEmbed_CheckConfig(&c));
    c = config(PSE_OPT_FTRL, 4);
    c.init = PSE_INIT_NORMAL;
    c.init_b = 1;
    assert_non_null(PSEmbed_CheckConfig(&c));
    c = config(PSE_OPT_SGD, 0);
    assert_non_null(PSEmbed_CheckConfig(&c));
    c = config(PSE_OPT_SGD, 4);
    c.admit = 0;
    assert_non_null(PSEmbed_CheckConfig(&c));
    c.admit = 2;
    c.filter_log2 = 40;
    assert_non_null(PSEmbed_CheckConfig(&c));
    assert_int_equal(PSEmbed_OptimParse("RowAdagrad", 10), PSE_OPT_ROWADAGRAD);
    assert_int_equal(PSEmbed_OptimParse("nesterov", 8), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_optimizer_matches_the_float32_reference_bit_exactly),
        cmocka_unit_test(test_duplicate_ids_are_summed_in_the_order_given),
        cmocka_unit_test(test_ftrl_keeps_weights_at_zero_while_z_is_within_l1),
        cmocka_unit_test(test_adam_bias_correction_counts_each_rows_own_pushes),
        cmocka_unit_test(test_row_init_is_a_pure_function_of_seed_and_id),
        cmocka_unit_test(test_pull_of_unknown_ids_answers_zeros_when_configured),
        cmocka_unit_test(test_push_rejects_nan_and_inf_and_leaves_table_unchanged),
        cmocka_unit_test(test_config_rules_reject_bad_hyperparameters),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
