/* test_ctr_score.c -- cmocka tests of common/ctr_score.c, the LR/FM logit
 * kernel the trainer and PS.SCORE share: bit for bit what the trainer's
 * linear_logit computed before the kernel moved to common/ (its code kept
 * here as the reference), through the kernel directly (slot and identity
 * row addressing, values and implicit 1s) and through ps_ctr_predict; and the
 * MLP's pooling kernel ps_ctr_pool likewise against the trainer's mlp_input
 * as it was before it moved to common/. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ctr_model.h"
#include "ctr_score.h"
#include "fpguard.h"
#include "ps_limits.h"
#include "rng.h"
#include "sparse_data.h"

/* The trainer's linear_logit as it was before this kernel (worker/ctr_model.c
 * at the parent commit), with the model fields as arguments. */
static double old_linear_logit(float bias, int dim, double *s, const ps_sparse_batch *b,
                               const uint32_t *slot, const float *rows, int i) {
    int k = dim - 1;
    double z = bias, sq = 0.0;
    for (int f = 0; f < k; f++) s[f] = 0.0;
    for (size_t j = b->off[i]; j < b->off[i + 1]; j++) {
        const float *r = rows + (size_t)slot[j] * (size_t)dim;
        double x = b->val[j];
        z += (double)r[0] * x;
        for (int f = 0; f < k; f++) {
            double vx = (double)r[1 + f] * x;
            s[f] += vx;
            sq += vx * vx;
        }
    }
    double pair = 0.0;
    for (int f = 0; f < k; f++) pair += s[f] * s[f];
    return z + 0.5 * (pair - sq);
}

static float rnd(PSRng *st, float scale) {
    return (float)(ps_rng_uniform(st) * 2.0 - 1.0) * scale;
}

static int same_bits(double a, double b) {
    return memcmp(&a, &b, sizeof(a)) == 0;
}

/* A random batch: n rows of 0..maxf features over 'vocab' ids (repeats
 * likely), values of mixed magnitudes (some exactly 1, some negative). */
static void random_batch(ps_sparse_batch *b, PSRng *st, int n, int maxf, uint64_t vocab) {
    uint64_t ids[64];
    float vals[64];
    ps_sparse_batch_clear(b);
    for (int i = 0; i < n; i++) {
        int nf = (int)(ps_rng_next(st) % (uint64_t)(maxf + 1));
        for (int j = 0; j < nf; j++) {
            ids[j] = ps_rng_next(st) % vocab;
            uint64_t kind = ps_rng_next(st) % 4;
            vals[j] = kind == 0 ? 1.0f : kind == 1 ? rnd(st, 1e3f) : rnd(st, 1e-3f);
        }
        assert_int_equal(ps_sparse_batch_add(b, (float)(i & 1), NULL, ids, vals, (size_t)nf, NULL), 0);
    }
}

static void check_kernel_matches_old_code(int dim) {
    PSRng st;
    ps_rng_seed(&st, 12345 + (uint64_t)dim);
    ps_sparse_batch b = {0};
    ps_ctr_unique u = {0};
    double s_old[64], s_new[64];
    for (int round = 0; round < 50; round++) {
        random_batch(&b, &st, 40, 30, 50);
        assert_int_equal(ps_ctr_unique_build(&u, &b), 0);
        float *rows = malloc((u.n + 1) * (size_t)dim * sizeof(float));
        assert_non_null(rows);
        for (size_t t = 0; t < (u.n + 1) * (size_t)dim; t++)
            rows[t] = rnd(&st, round % 2 ? 10.0f : 0.05f);
        /* Identity addressing: each feature's row copied in feature order,
         * as PS.SCORE lays them out. */
        float *flat = malloc((b.nnz + 1) * (size_t)dim * sizeof(float));
        assert_non_null(flat);
        for (size_t j = 0; j < b.nnz; j++)
            memcpy(flat + j * (size_t)dim, rows + (size_t)u.slot[j] * (size_t)dim,
                   (size_t)dim * sizeof(float));
        float bias = rnd(&st, 2.0f);
        for (int i = 0; i < b.n; i++) {
            double want = old_linear_logit(bias, dim, s_old, &b, u.slot, rows, i);
            double got = ps_ctr_score_logit(bias, rows, (uint32_t)dim, u.slot, b.val, b.off[i],
                                            b.off[i + 1], s_new);
            assert_true(same_bits(want, got));
            for (int f = 0; f < dim - 1; f++) assert_true(same_bits(s_old[f], s_new[f]));
            got = ps_ctr_score_logit(bias, flat, (uint32_t)dim, NULL, b.val, b.off[i],
                                     b.off[i + 1], s_new);
            assert_true(same_bits(want, got));
        }
        free(rows);
        free(flat);
    }
    ps_ctr_unique_free(&u);
    ps_sparse_batch_free(&b);
}

static void test_lr_kernel_is_bit_identical_to_the_old_trainer_code(void **state) {
    (void)state;
    check_kernel_matches_old_code(1);
}

static void test_fm_kernel_is_bit_identical_to_the_old_trainer_code(void **state) {
    (void)state;
    check_kernel_matches_old_code(2);
    check_kernel_matches_old_code(9);
    check_kernel_matches_old_code(33);
}

/* NULL values mean 1 for every feature, as a batch with all-1 values. */
static void test_missing_values_are_ones(void **state) {
    (void)state;
    float rows[3 * 4] = {0.5f, -1.25f, 3.0f, 0.1f, -2.0f, 0.25f, 7.5f, -0.3f, 1e-3f, 4.0f, -8.0f, 0.7f};
    float ones[3] = {1.0f, 1.0f, 1.0f};
    double s1[3], s2[3];
    double a = ps_ctr_score_logit(0.125f, rows, 4, NULL, NULL, 0, 3, s1);
    double b = ps_ctr_score_logit(0.125f, rows, 4, NULL, ones, 0, 3, s2);
    assert_true(same_bits(a, b));
    /* By hand: w sum 0.5 - 2 + 1e-3; s = (-1.25+0.25+4, 3+7.5-8, 0.1-0.3+0.7). */
    double w = 0.125 + (double)0.5f + (double)-2.0f + (double)1e-3f;
    double sf[3] = {(double)-1.25f + 0.25 + 4.0, 3.0 + 7.5 - 8.0,
                    (double)0.1f + (double)-0.3f + (double)0.7f};
    double v[3][3] = {{-1.25, 3.0, 0.1f}, {0.25, 7.5, -0.3f}, {4.0, -8.0, 0.7f}};
    double sq = 0, pair = 0;
    for (int j = 0; j < 3; j++)
        for (int f = 0; f < 3; f++) sq += v[j][f] * v[j][f];
    for (int f = 0; f < 3; f++) pair += sf[f] * sf[f];
    assert_true(fabs(a - (w + 0.5 * (pair - sq))) < 1e-9);
    /* An empty sample is the bias (plus 0.5 * (0 - 0)). */
    assert_true(same_bits(ps_ctr_score_logit(-3.5f, rows, 4, NULL, NULL, 2, 2, s1), -3.5));
}

/* ps_ctr_predict (the trainer's forward pass) gives sigmoid of the kernel. */
static void test_trainer_predict_uses_the_kernel(void **state) {
    (void)state;
    for (int model = PS_CTR_LR; model <= PS_CTR_FM; model++) {
        ps_ctr_config c = {.model = model, .k = 4, .max_batch = 64};
        ps_ctr_model m;
        char err[128];
        assert_int_equal(ps_ctr_init(&m, &c, 1, err, sizeof(err)), 0);
        m.bias = 0.375f;
        PSRng st;
        ps_rng_seed(&st, 99);
        ps_sparse_batch b = {0};
        ps_ctr_unique u = {0};
        random_batch(&b, &st, 64, 12, 20);
        assert_int_equal(ps_ctr_unique_build(&u, &b), 0);
        int dim = ps_ctr_row_dim(&m);
        float *rows = malloc(u.n * (size_t)dim * sizeof(float));
        for (size_t t = 0; t < u.n * (size_t)dim; t++) rows[t] = rnd(&st, 0.5f);
        assert_int_equal(ps_ctr_predict(&m, &b, &u, rows, err, sizeof(err)), 0);
        double s[8];
        for (int i = 0; i < b.n; i++) {
            double z = old_linear_logit(m.bias, dim, s, &b, u.slot, rows, i);
            float p = (float)(1.0 / (1.0 + exp(-z)));
            assert_memory_equal(&p, &m.p[i], sizeof(float));
        }
        free(rows);
        ps_ctr_unique_free(&u);
        ps_sparse_batch_free(&b);
        ps_ctr_free(&m);
    }
}

/* The trainer's mlp_input as it was before ps_ctr_pool (ml/ctr_model.c at
 * the parent commit), with the model fields as arguments. */
static void old_mlp_input(float *x, int in, int fields, int d, int ndense,
                          const ps_sparse_batch *b, const uint32_t *slot, const float *rows) {
    memset(x, 0, (size_t)b->n * (size_t)in * sizeof(float));
    for (int i = 0; i < b->n; i++) {
        float *xi = x + (size_t)i * (size_t)in;
        for (size_t j = b->off[i]; j < b->off[i + 1]; j++) {
            const float *r = rows + (size_t)slot[j] * (size_t)d;
            float *dst = xi + (size_t)b->field[j] * (size_t)d;
            float v = b->val[j];
            for (int t = 0; t < d; t++) dst[t] += v * r[t];
        }
        if (ndense > 0)
            memcpy(xi + (size_t)fields * (size_t)d, b->dense + (size_t)i * (size_t)ndense,
                   (size_t)ndense * sizeof(float));
    }
}

/* A random batch with fields: n rows of 0..maxf features in fields < nfields
 * (repeated fields and ids likely, some fields empty), 'ndense' dense each. */
static void random_field_batch(ps_sparse_batch *b, PSRng *st, int n, int maxf, uint64_t vocab,
                               int nfields, int ndense) {
    uint64_t ids[64];
    uint32_t fld[64];
    float vals[64], dense[8];
    ps_sparse_batch_clear(b);
    b->ndense = ndense;
    for (int i = 0; i < n; i++) {
        int nf = (int)(ps_rng_next(st) % (uint64_t)(maxf + 1));
        for (int j = 0; j < nf; j++) {
            ids[j] = ps_rng_next(st) % vocab;
            fld[j] = (uint32_t)(ps_rng_next(st) % (uint64_t)nfields);
            uint64_t kind = ps_rng_next(st) % 4;
            vals[j] = kind == 0 ? 1.0f : kind == 1 ? rnd(st, 1e3f) : rnd(st, 1e-3f);
        }
        for (int t = 0; t < ndense; t++) dense[t] = rnd(st, 3.0f);
        assert_int_equal(ps_sparse_batch_add(b, (float)(i & 1), fld, ids, vals, (size_t)nf, dense), 0);
    }
}

/* ps_ctr_pool: the old trainer code's bits, by slot and by flat rows. */
static void test_pool_kernel_is_bit_identical_to_the_old_trainer_code(void **state) {
    (void)state;
    static const int dims[] = {1, 3, 8, 17};
    for (int di = 0; di < 4; di++) {
        int d = dims[di], fields = 5, ndense = 3, in = fields * d + ndense;
        PSRng st;
        ps_rng_seed(&st, 777 + (uint64_t)d);
        ps_sparse_batch b = {0};
        ps_ctr_unique u = {0};
        for (int round = 0; round < 30; round++) {
            random_field_batch(&b, &st, 40, 20, 30, fields, ndense);
            assert_int_equal(ps_ctr_unique_build(&u, &b), 0);
            float *rows = malloc((u.n + 1) * (size_t)d * sizeof(float));
            float *flat = malloc((b.nnz + 1) * (size_t)d * sizeof(float));
            float *want = malloc((size_t)b.n * (size_t)in * sizeof(float));
            float *got = malloc((size_t)fields * (size_t)d * sizeof(float));
            assert_true(rows && flat && want && got);
            for (size_t t = 0; t < (u.n + 1) * (size_t)d; t++)
                rows[t] = rnd(&st, round % 2 ? 10.0f : 0.05f);
            for (size_t j = 0; j < b.nnz; j++)
                memcpy(flat + j * (size_t)d, rows + (size_t)u.slot[j] * (size_t)d,
                       (size_t)d * sizeof(float));
            old_mlp_input(want, in, fields, d, ndense, &b, u.slot, rows);
            for (int i = 0; i < b.n; i++) {
                const float *w = want + (size_t)i * (size_t)in;
                size_t bytes = (size_t)fields * (size_t)d * sizeof(float);
                memset(got, 0xff, bytes);      /* the kernel zeroes its output */
                ps_ctr_pool(got, (uint32_t)fields, (uint32_t)d, rows, u.slot, b.field, b.val,
                            b.off[i], b.off[i + 1]);
                assert_memory_equal(got, w, bytes);
                memset(got, 0xff, bytes);
                ps_ctr_pool(got, (uint32_t)fields, (uint32_t)d, flat, NULL, b.field, b.val,
                            b.off[i], b.off[i + 1]);
                assert_memory_equal(got, w, bytes);
            }
            free(rows);
            free(flat);
            free(want);
            free(got);
        }
        ps_ctr_unique_free(&u);
        ps_sparse_batch_free(&b);
    }
}

/* The trainer's MLP forward pass (ps_ctr_predict) builds its input with the
 * kernel: its m->x holds the old code's bits, dense features included, and
 * NULL values are 1s. */
static void test_trainer_mlp_input_uses_the_pool_kernel(void **state) {
    (void)state;
    ps_ctr_config c = {.model = PS_CTR_MLP, .emb_dim = 6, .fields = 4, .ndense = 2,
                       .nhidden = 1, .hidden = {8}, .max_batch = 64};
    ps_ctr_model m;
    char err[128];
    assert_int_equal(ps_ctr_init(&m, &c, 1, err, sizeof(err)), 0);
    PSRng st;
    ps_rng_seed(&st, 4242);
    ps_sparse_batch b = {0};
    ps_ctr_unique u = {0};
    random_field_batch(&b, &st, 64, 12, 25, c.fields, c.ndense);
    assert_int_equal(ps_ctr_unique_build(&u, &b), 0);
    float *rows = malloc((u.n + 1) * 6 * sizeof(float));
    float *want = malloc((size_t)b.n * (size_t)m.in * sizeof(float));
    assert_true(rows && want);
    for (size_t t = 0; t < (u.n + 1) * 6; t++) rows[t] = rnd(&st, 0.5f);
    assert_int_equal(ps_ctr_predict(&m, &b, &u, rows, err, sizeof(err)), 0);
    old_mlp_input(want, m.in, c.fields, 6, c.ndense, &b, u.slot, rows);
    assert_memory_equal(m.x, want, (size_t)b.n * (size_t)m.in * sizeof(float));
    /* NULL values: the bits of all-1 values. */
    float ones[64], a[4 * 6], o[4 * 6];
    for (int j = 0; j < 64; j++) ones[j] = 1.0f;
    size_t e = b.off[1] < 64 ? b.off[1] : 64;
    ps_ctr_pool(a, 4, 6, rows, u.slot, b.field, NULL, 0, e);
    ps_ctr_pool(o, 4, 6, rows, u.slot, b.field, ones, 0, e);
    assert_memory_equal(a, o, sizeof(a));
    free(rows);
    free(want);
    ps_ctr_unique_free(&u);
    ps_sparse_batch_free(&b);
    ps_ctr_free(&m);
}

/* By hand: two features in field 1, one in field 0, field 2 empty. */
static void test_pool_by_hand(void **state) {
    (void)state;
    float rows[3 * 2] = {1.0f, 2.0f, -0.5f, 4.0f, 0.25f, -8.0f};
    uint32_t field[3] = {1, 0, 1};
    float val[3] = {2.0f, 3.0f, -1.0f};
    float out[3 * 2];
    ps_ctr_pool(out, 3, 2, rows, NULL, field, val, 0, 3);
    float want[6] = {-1.5f, 12.0f, 2.0f - 0.25f, 4.0f + 8.0f, 0.0f, 0.0f};
    assert_memory_equal(out, want, sizeof(want));
    ps_ctr_pool(out, 3, 2, rows, NULL, field, val, 1, 1);   /* no features: zeros */
    float zeros[6] = {0};
    assert_memory_equal(out, zeros, sizeof(zeros));
}

static void test_model_names_parse(void **state) {
    (void)state;
    assert_int_equal(ps_ctr_score_model_parse("lr", 2), PS_SCORE_LR);
    assert_int_equal(ps_ctr_score_model_parse("FM", 2), PS_SCORE_FM);
    assert_int_equal(ps_ctr_score_model_parse("mlp", 3), PS_SCORE_MLP);
    assert_int_equal(ps_ctr_score_model_parse("MLP", 3), PS_SCORE_MLP);
    assert_int_equal(ps_ctr_score_model_parse("ml", 2), -1);
    assert_int_equal(ps_ctr_score_model_parse("f", 1), -1);
}

/* PS.SCORE's cost bound (module/limits.c): rows + values + FM sums + reply. */
static void test_score_size_counts_rows_values_and_reply(void **state) {
    (void)state;
    uint64_t bytes;
    /* 2 samples, 52 ids, dim 9: 4*52*9 + 4*52 + 8*8 + 8*2 */
    assert_int_equal(ps_score_size(2, 52, 9, 0, 1 << 20, &bytes), PS_PULL_OK);
    assert_int_equal(bytes, 4 * 52 * 9 + 4 * 52 + 8 * 8 + 8 * 2);
    assert_int_equal(ps_score_size(2, 52, 9, 1, 1 << 20, &bytes), PS_PULL_OK);
    assert_int_equal(bytes, 4 * 52 * 9 + 4 * 52 + 8 * 8 + PS_PULL_VALUE_BYTES * 2);
    assert_int_equal(ps_score_size(2, 52, 9, 0, bytes - 1, &bytes), PS_PULL_OK);
    assert_int_equal(ps_score_size(2, 52, 9, 1, 4 * 52 * 9, &bytes), PS_PULL_TOO_BIG);
    /* The largest request the parser lets through cannot overflow. */
    assert_int_equal(ps_score_size(1ull << 30, 1ull << 24, 65536, 1, UINT64_MAX, &bytes),
                     PS_PULL_OK);
    assert_true(bytes > (1ull << 40));
    assert_int_equal(ps_score_size(1, 0, 1, 0, 8, &bytes), PS_PULL_OK);
    assert_int_equal(bytes, 8);
}

/* PS.SCORE MODEL MLP's cost bound: rows + values + fields + the pooled reply. */
static void test_score_pool_size_counts_the_pooled_reply(void **state) {
    (void)state;
    uint64_t bytes;
    /* 3 samples x 26 fields x dim 8, 78 ids: 4*78*8 + 8*78 + 3*26*8*4 */
    assert_int_equal(ps_score_pool_size(3, 78, 8, 26, 0, 1 << 20, &bytes), PS_PULL_OK);
    assert_int_equal(bytes, 4 * 78 * 8 + 8 * 78 + 3 * 26 * 8 * 4);
    assert_int_equal(ps_score_pool_size(3, 78, 8, 26, 1, 1 << 20, &bytes), PS_PULL_OK);
    assert_int_equal(bytes, 4 * 78 * 8 + 8 * 78 + 3 * 26 * 8 * PS_PULL_VALUE_BYTES);
    assert_int_equal(ps_score_pool_size(3, 78, 8, 26, 1, bytes - 1, &bytes), PS_PULL_TOO_BIG);
    /* Empty samples cost their zeroed reply, no row at all. */
    assert_int_equal(ps_score_pool_size(100, 0, 2, 256, 0, 204799, &bytes), PS_PULL_TOO_BIG);
    assert_int_equal(bytes, 100 * 256 * 2 * 4);
    /* A product past 64 bits is too big, never wrapped. */
    assert_int_equal(ps_score_pool_size(1ull << 62, 1, 65536, 256, 1, UINT64_MAX, &bytes),
                     PS_PULL_TOO_BIG);
    assert_true(bytes == UINT64_MAX);
    assert_int_equal(ps_score_pool_size(1ull << 40, 1ull << 24, 65536, 256, 0, UINT64_MAX, &bytes),
                     PS_PULL_TOO_BIG);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lr_kernel_is_bit_identical_to_the_old_trainer_code),
        cmocka_unit_test(test_fm_kernel_is_bit_identical_to_the_old_trainer_code),
        cmocka_unit_test(test_missing_values_are_ones),
        cmocka_unit_test(test_trainer_predict_uses_the_kernel),
        cmocka_unit_test(test_pool_kernel_is_bit_identical_to_the_old_trainer_code),
        cmocka_unit_test(test_trainer_mlp_input_uses_the_pool_kernel),
        cmocka_unit_test(test_pool_by_hand),
        cmocka_unit_test(test_model_names_parse),
        cmocka_unit_test(test_score_size_counts_rows_values_and_reply),
        cmocka_unit_test(test_score_pool_size_counts_the_pooled_reply),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
