/* test_nn.c -- cmocka tests of ml/nn.c: gradients against finite
 * differences of an independent double-precision reference, softmax
 * stability, SGD, He init, layer-list parsing, end-to-end learning. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn.h"

/* ======================= double-precision reference ======================= */

/* Double copies of the parameters of an MLP, perturbed by the gradient check. */
typedef struct ref_params {
    int nlayers;
    const int *sizes;
    double **W, **b;
} ref_params;

static void ref_from_mlp(ref_params *r, const ps_mlp *m)
{
    r->nlayers = m->nlayers;
    r->sizes = m->sizes;
    r->W = calloc((size_t)m->nlayers, sizeof(double *));
    r->b = calloc((size_t)m->nlayers, sizeof(double *));
    assert_non_null(r->W);
    assert_non_null(r->b);
    for (int l = 0; l < m->nlayers; l++) {
        size_t nw = (size_t)m->sizes[l] * (size_t)m->sizes[l + 1];
        r->W[l] = malloc(nw * sizeof(double));
        r->b[l] = malloc((size_t)m->sizes[l + 1] * sizeof(double));
        assert_non_null(r->W[l]);
        assert_non_null(r->b[l]);
        for (size_t i = 0; i < nw; i++) r->W[l][i] = m->W[l][i];
        for (int j = 0; j < m->sizes[l + 1]; j++) r->b[l][j] = m->b[l][j];
    }
}

static void ref_free(ref_params *r)
{
    for (int l = 0; l < r->nlayers; l++) {
        free(r->W[l]);
        free(r->b[l]);
    }
    free(r->W);
    free(r->b);
}

/* Mean softmax cross-entropy of the reference network on one batch, written
 * with plain loops (no BLAS) so it checks nn.c independently.  If 'logits'
 * is non-NULL it receives the batch x classes output scores; if 'mask' is
 * non-NULL it receives a hash of which hidden ReLUs are active, so a
 * finite difference that crosses a kink can be recognised. */
static double ref_loss_mask(const ref_params *r, const float *x, const int32_t *y, int batch,
                            double *logits, uint64_t *mask)
{
    uint64_t h = 1469598103934665603ULL;
    int maxw = 0;
    for (int l = 0; l <= r->nlayers; l++)
        if (r->sizes[l] > maxw) maxw = r->sizes[l];
    double *a = malloc((size_t)maxw * sizeof(double));
    double *z = malloc((size_t)maxw * sizeof(double));
    assert_non_null(a);
    assert_non_null(z);
    double total = 0.0;
    int K = r->sizes[r->nlayers];
    for (int i = 0; i < batch; i++) {
        for (int k = 0; k < r->sizes[0]; k++) a[k] = x[(size_t)i * r->sizes[0] + k];
        for (int l = 0; l < r->nlayers; l++) {
            int nin = r->sizes[l], nout = r->sizes[l + 1];
            for (int j = 0; j < nout; j++) {
                double s = r->b[l][j];
                for (int k = 0; k < nin; k++) s += r->W[l][(size_t)j * nin + k] * a[k];
                int hidden = l + 1 < r->nlayers;
                if (hidden) h = (h ^ (uint64_t)(s > 0)) * 1099511628211ULL;
                z[j] = (hidden && !(s > 0)) ? 0.0 : s;
            }
            memcpy(a, z, (size_t)nout * sizeof(double));
        }
        double mx = a[0];
        for (int j = 1; j < K; j++)
            if (a[j] > mx) mx = a[j];
        double sum = 0.0;
        for (int j = 0; j < K; j++) sum += exp(a[j] - mx);
        total += mx + log(sum) - a[y[i]];
        if (logits) memcpy(logits + (size_t)i * K, a, (size_t)K * sizeof(double));
    }
    free(a);
    free(z);
    if (mask) *mask = h;
    return total / batch;
}

static double ref_loss(const ref_params *r, const float *x, const int32_t *y, int batch,
                       double *logits)
{
    return ref_loss_mask(r, x, y, batch, logits, NULL);
}

/* ============================== utilities ================================= */

static void fill_normal(float *v, size_t n, PSRng *r, double sd)
{
    for (size_t i = 0; i < n; i++) v[i] = (float)(sd * ps_rng_normal(r));
}

static void fill_labels(int32_t *y, int n, int k, PSRng *r)
{
    for (int i = 0; i < n; i++) y[i] = (int32_t)ps_rng_below(r, (uint64_t)k);
}

/* Compares the analytic gradient of ps_mlp_grad() with central differences
 * of ref_loss() for every parameter when there are at most 'maxcheck',
 * otherwise for 'maxcheck' random ones.  Fails on the first entry whose
 * relative error reaches 1e-2. */
static void gradient_check(const int *sizes, int nsizes, int batch, int maxcheck, uint64_t seed)
{
    char err[256];
    ps_mlp m;
    assert_int_equal(ps_mlp_init(&m, sizes, nsizes, batch, err, sizeof(err)), 0);
    ps_mlp_init_he(&m, seed);
    PSRng r;
    ps_rng_seed(&r, seed + 1000);
    for (int l = 0; l < m.nlayers; l++) fill_normal(m.b[l], (size_t)sizes[l + 1], &r, 0.1);

    float *x = malloc((size_t)batch * sizes[0] * sizeof(float));
    int32_t *y = malloc((size_t)batch * sizeof(int32_t));
    assert_non_null(x);
    assert_non_null(y);
    fill_normal(x, (size_t)batch * sizes[0], &r, 1.0);
    fill_labels(y, batch, sizes[nsizes - 1], &r);

    float loss = ps_mlp_grad(&m, x, y, batch);
    ref_params ref;
    ref_from_mlp(&ref, &m);
    double rl = ref_loss(&ref, x, y, batch, NULL);
    assert_true(fabs((double)loss - rl) < 1e-5 * (1.0 + rl));

    size_t total = ps_mlp_num_params(&m);
    size_t ncheck = total <= (size_t)maxcheck ? total : (size_t)maxcheck;
    uint64_t mask0;
    ref_loss_mask(&ref, x, y, batch, NULL, &mask0);
    double worst = 0.0;
    size_t skipped = 0;
    for (size_t c = 0; c < ncheck; c++) {
        size_t idx = total <= (size_t)maxcheck ? c : ps_rng_below(&r, total);
        /* Map the flat index to (layer, W or b, offset). */
        int l = 0;
        for (;; l++) {
            size_t nl = ps_mlp_layer_params(&m, l) + (size_t)sizes[l + 1];
            if (idx < nl) break;
            idx -= nl;
        }
        size_t nw = ps_mlp_layer_params(&m, l);
        double *p = idx < nw ? &ref.W[l][idx] : &ref.b[l][idx - nw];
        double analytic = idx < nw ? m.gW[l][idx] : m.gb[l][idx - nw];
        double saved = *p, numeric = 0.0;
        /* Central difference with eps 1e-3; if that moves a ReLU across its
         * kink the loss is not differentiable in between, so retry smaller. */
        int smooth = 0;
        for (double eps = 1e-3; eps >= 1e-6 && !smooth; eps /= 10) {
            uint64_t mp, mm;
            *p = saved + eps;
            double lp = ref_loss_mask(&ref, x, y, batch, NULL, &mp);
            *p = saved - eps;
            double lm = ref_loss_mask(&ref, x, y, batch, NULL, &mm);
            *p = saved;
            numeric = (lp - lm) / (2 * eps);
            smooth = mp == mask0 && mm == mask0;
        }
        if (!smooth) {
            skipped++;
            continue;
        }
        double scale = fmax(fmax(fabs(analytic), fabs(numeric)), 1e-4);
        double rel = fabs(analytic - numeric) / scale;
        if (rel > worst) worst = rel;
        if (rel >= 1e-2)
            fail_msg("layer %d %s[%zu]: analytic %.8g numeric %.8g rel %.3g", l,
                     idx < nw ? "W" : "b", idx < nw ? idx : idx - nw, analytic, numeric, rel);
    }
    print_message("checked %zu of %zu parameters (%zu at a ReLU kink skipped), worst relative "
                  "error %.2e\n", ncheck - skipped, total, skipped, worst);
    assert_true(skipped * 20 <= ncheck);
    ref_free(&ref);
    free(x);
    free(y);
    ps_mlp_free(&m);
}

/* ================================= tests ================================== */

static void test_grad_matches_finite_differences_5_4_3(void **state)
{
    (void)state;
    int sizes[] = {5, 4, 3};
    gradient_check(sizes, 3, 4, 300, 11);
}

static void test_grad_matches_finite_differences_6_7_5_3(void **state)
{
    (void)state;
    int sizes[] = {6, 7, 5, 3};
    gradient_check(sizes, 4, 4, 300, 22);
}

static void test_grad_matches_finite_differences_sampled_20_16_10(void **state)
{
    (void)state;
    int sizes[] = {20, 16, 10};
    gradient_check(sizes, 3, 4, 300, 33);
}

static void test_grad_matches_finite_differences_softmax_regression(void **state)
{
    (void)state;
    int sizes[] = {7, 4};
    gradient_check(sizes, 2, 3, 300, 44);
}

static void test_uniform_output_loss_is_log_nclasses(void **state)
{
    (void)state;
    char err[256];
    int sizes[] = {6, 5, 7};
    ps_mlp m;
    assert_int_equal(ps_mlp_init(&m, sizes, 3, 8, err, sizeof(err)), 0);
    /* All parameters zero: every logit is 0, so p = 1/7 for every class. */
    float x[8 * 6];
    int32_t y[8];
    PSRng r;
    ps_rng_seed(&r, 5);
    fill_normal(x, 8 * 6, &r, 1.0);
    fill_labels(y, 8, 7, &r);
    float loss = ps_mlp_grad(&m, x, y, 8);
    assert_true(fabs(loss - log(7.0)) < 1e-6);
    /* Output bias gradient = mean over rows of (1/7 - onehot). */
    for (int j = 0; j < 7; j++) {
        int cnt = 0;
        for (int i = 0; i < 8; i++) cnt += y[i] == j;
        double expect = 1.0 / 7.0 - cnt / 8.0;
        assert_true(fabs(m.gb[1][j] - expect) < 1e-6);
    }
    double el, acc;
    ps_mlp_evaluate(&m, x, y, 8, &el, &acc);
    assert_true(fabs(el - log(7.0)) < 1e-6);
    ps_mlp_free(&m);
}

static void test_softmax_with_huge_logits_gives_finite_loss_and_gradient(void **state)
{
    (void)state;
    char err[256];
    int sizes[] = {2, 3};
    ps_mlp m;
    assert_int_equal(ps_mlp_init(&m, sizes, 2, 3, err, sizeof(err)), 0);
    m.b[0][0] = 1e30f;
    m.b[0][1] = -1e30f;
    m.b[0][2] = 0.0f;
    float x[6] = {0};
    int32_t y[3] = {0, 1, 2};
    float loss = ps_mlp_grad(&m, x, y, 3);
    assert_false(isnan(loss));
    assert_true(isfinite(loss));
    /* Per-row losses 0, 2e30, 1e30: mean 1e30. */
    assert_true(fabs(loss / 1e30 - 1.0) < 1e-5);
    /* p = (1,0,0) in every row: gb = mean(p - onehot) = (2/3, -1/3, -1/3). */
    assert_true(fabs(m.gb[0][0] - 2.0 / 3.0) < 1e-6);
    assert_true(fabs(m.gb[0][1] + 1.0 / 3.0) < 1e-6);
    assert_true(fabs(m.gb[0][2] + 1.0 / 3.0) < 1e-6);
    for (int i = 0; i < 6; i++) assert_true(isfinite(m.gW[0][i]));
    const float *p = ps_mlp_predict(&m, x, 3);
    assert_non_null(p);
    for (int i = 0; i < 9; i++) assert_false(isnan(p[i]));
    assert_true(p[0] == 1.0f);
    ps_mlp_free(&m);
}

static void test_predict_rows_are_probabilities(void **state)
{
    (void)state;
    char err[256];
    int sizes[] = {4, 6, 5};
    ps_mlp m;
    assert_int_equal(ps_mlp_init(&m, sizes, 3, 10, err, sizeof(err)), 0);
    ps_mlp_init_he(&m, 9);
    float x[10 * 4];
    PSRng r;
    ps_rng_seed(&r, 10);
    fill_normal(x, 40, &r, 3.0);
    const float *p = ps_mlp_predict(&m, x, 10);
    assert_non_null(p);
    for (int i = 0; i < 10; i++) {
        double s = 0;
        for (int j = 0; j < 5; j++) {
            assert_true(p[i * 5 + j] >= 0.0f && p[i * 5 + j] <= 1.0f);
            s += p[i * 5 + j];
        }
        assert_true(fabs(s - 1.0) < 1e-5);
    }
    assert_null(ps_mlp_predict(&m, x, 11));
    assert_null(ps_mlp_predict(&m, x, 0));
    ps_mlp_free(&m);
}

static void test_sgd_decreases_loss_on_fixed_batch(void **state)
{
    (void)state;
    char err[256];
    int sizes[] = {6, 8, 3};
    ps_mlp m;
    assert_int_equal(ps_mlp_init(&m, sizes, 3, 16, err, sizeof(err)), 0);
    ps_mlp_init_he(&m, 3);
    float x[16 * 6];
    int32_t y[16];
    PSRng r;
    ps_rng_seed(&r, 4);
    fill_normal(x, 16 * 6, &r, 1.0);
    fill_labels(y, 16, 3, &r);
    float first = ps_mlp_grad(&m, x, y, 16);
    ps_mlp_sgd(&m, 0.1f);
    float second = ps_mlp_grad(&m, x, y, 16);
    assert_true(second < first);
    float last = second;
    for (int i = 0; i < 200; i++) {
        ps_mlp_sgd(&m, 0.1f);
        last = ps_mlp_grad(&m, x, y, 16);
    }
    assert_true(last < 0.5f * first);
    ps_mlp_free(&m);
}

static void test_sgd_applies_exactly_lr_times_gradient(void **state)
{
    (void)state;
    char err[256];
    int sizes[] = {3, 2};
    ps_mlp m;
    assert_int_equal(ps_mlp_init(&m, sizes, 2, 1, err, sizeof(err)), 0);
    for (int i = 0; i < 6; i++) {
        m.W[0][i] = (float)i;
        m.gW[0][i] = 0.5f * (float)(i + 1);
    }
    m.b[0][0] = 1.0f;
    m.gb[0][0] = 2.0f;
    m.b[0][1] = -1.0f;
    m.gb[0][1] = -4.0f;
    ps_mlp_sgd(&m, 0.25f);
    for (int i = 0; i < 6; i++) assert_true(m.W[0][i] == (float)i - 0.25f * 0.5f * (float)(i + 1));
    assert_true(m.b[0][0] == 0.5f);
    assert_true(m.b[0][1] == 0.0f);
    ps_mlp_free(&m);
}

/* Mean and variance of 'n' floats. */
static void moments(const float *v, size_t n, double *mean, double *var)
{
    double s = 0, ss = 0;
    for (size_t i = 0; i < n; i++) s += v[i];
    *mean = s / (double)n;
    for (size_t i = 0; i < n; i++) ss += (v[i] - *mean) * (v[i] - *mean);
    *var = ss / (double)(n - 1);
}

static void test_he_init_has_zero_mean_and_variance_two_over_fan_in(void **state)
{
    (void)state;
    char err[256];
    int sizes[] = {512, 256, 10};
    ps_mlp m;
    assert_int_equal(ps_mlp_init(&m, sizes, 3, 1, err, sizeof(err)), 0);
    m.b[0][3] = 7.0f; /* must be reset */
    ps_mlp_init_he(&m, 12345);
    for (int l = 0; l < 2; l++) {
        size_t n = ps_mlp_layer_params(&m, l);
        double mean, var, expect = 2.0 / sizes[l];
        moments(m.W[l], n, &mean, &var);
        /* 5 standard errors for the mean, ~6 for the variance (se = var*sqrt(2/n)). */
        assert_true(fabs(mean) < 5.0 * sqrt(expect / (double)n));
        assert_true(fabs(var / expect - 1.0) < 6.0 * sqrt(2.0 / (double)n));
        for (int j = 0; j < sizes[l + 1]; j++) assert_true(m.b[l][j] == 0.0f);
    }
    ps_mlp_free(&m);
}

static void test_he_init_is_reproducible_from_seed(void **state)
{
    (void)state;
    char err[256];
    int sizes[] = {30, 20, 5};
    ps_mlp a, b;
    assert_int_equal(ps_mlp_init(&a, sizes, 3, 1, err, sizeof(err)), 0);
    assert_int_equal(ps_mlp_init(&b, sizes, 3, 1, err, sizeof(err)), 0);
    ps_mlp_init_he(&a, 77);
    ps_mlp_init_he(&b, 77);
    for (int l = 0; l < 2; l++)
        assert_memory_equal(a.W[l], b.W[l], ps_mlp_layer_params(&a, l) * sizeof(float));
    ps_mlp_init_he(&b, 78);
    assert_memory_not_equal(a.W[0], b.W[0], ps_mlp_layer_params(&a, 0) * sizeof(float));
    ps_mlp_free(&a);
    ps_mlp_free(&b);
}

static void test_rng_below_stays_in_range_and_covers_it(void **state)
{
    (void)state;
    PSRng r;
    ps_rng_seed(&r, 0);
    int seen[7] = {0};
    for (int i = 0; i < 7000; i++) {
        uint64_t v = ps_rng_below(&r, 7);
        assert_true(v < 7);
        seen[v]++;
    }
    for (int i = 0; i < 7; i++) assert_true(seen[i] > 800 && seen[i] < 1200);
    assert_int_equal(ps_rng_below(&r, 0), 0);
}

/* The worker's shuffles (task order in init, sample order in a task) moved
 * from its own xoshiro256** copy to common/rng: the values below are what
 * the old ps_nn_rng gave, so a job's training order is unchanged. */
static void test_rng_gives_the_sequences_the_worker_shuffled_with_before(void **state)
{
    (void)state;
    static const uint64_t next0[] = {0x99ec5f36cb75f2b4ULL, 0xbf6e1f784956452aULL,
                                     0x1a5f849d4933e6e0ULL};
    static const uint64_t below[] = {2, 48, 34, 41, 46, 41, 41, 7};
    PSRng r;
    ps_rng_seed(&r, 0);
    for (int i = 0; i < 3; i++) assert_true(ps_rng_next(&r) == next0[i]);
    ps_rng_seed(&r, 1 * 0x9E3779B97F4A7C15ULL + 17); /* init's task shuffle, --seed 1 */
    for (int i = 0; i < 8; i++) assert_true(ps_rng_below(&r, (uint64_t)(60 - i)) == below[i]);
}

static void test_parse_layers_accepts_valid_lists(void **state)
{
    (void)state;
    char err[256];
    int s[8];
    assert_int_equal(ps_parse_layers("784,256,10", s, 8, err, sizeof(err)), 3);
    assert_int_equal(s[0], 784);
    assert_int_equal(s[1], 256);
    assert_int_equal(s[2], 10);
    assert_int_equal(ps_parse_layers("5,3", s, 8, err, sizeof(err)), 2);
    assert_int_equal(s[1], 3);
    assert_int_equal(ps_parse_layers("1048576,1", s, 2, err, sizeof(err)), 2);
    assert_int_equal(s[0], 1 << 20);
}

static void test_parse_layers_rejects_bad_lists_with_message(void **state)
{
    (void)state;
    const char *bad[] = {"", "784", "0,10", "784,,10", "784,10,", ",784,10", "-1,10", "+5,10",
                         "abc", "784,10x", "1048577,10", "99999999999999999999,10", " 784,10",
                         "784, 10", "1,2,3,4,5,6,7,8,9"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char err[256] = "";
        int s[8];
        if (ps_parse_layers(bad[i], s, 8, err, sizeof(err)) != -1)
            fail_msg("'%s' was accepted", bad[i]);
        assert_true(strlen(err) > 0);
    }
    char err[256];
    int s[8];
    assert_int_equal(ps_parse_layers(NULL, s, 8, err, sizeof(err)), -1);
}

static void test_init_rejects_bad_shapes_and_batch(void **state)
{
    (void)state;
    char err[256];
    ps_mlp m;
    int one[] = {5};
    int zero[] = {5, 0, 3};
    int ok[] = {5, 3};
    int huge[] = {5, (1 << 20) + 1};
    err[0] = '\0';
    assert_int_equal(ps_mlp_init(&m, one, 1, 4, err, sizeof(err)), -1);
    assert_true(strlen(err) > 0);
    ps_mlp_free(&m); /* a failed init owns nothing */
    assert_int_equal(ps_mlp_init(&m, zero, 3, 4, err, sizeof(err)), -1);
    assert_int_equal(ps_mlp_init(&m, huge, 2, 4, err, sizeof(err)), -1);
    assert_int_equal(ps_mlp_init(&m, ok, 2, 0, err, sizeof(err)), -1);
    assert_int_equal(ps_mlp_init(&m, ok, 2, 4, err, sizeof(err)), 0);
    assert_int_equal(ps_mlp_num_params(&m), 5 * 3 + 3);
    ps_mlp_free(&m);
    ps_mlp_free(&m); /* twice is harmless */
}

static void test_grad_rejects_bad_batch_and_labels_without_touching_gradients(void **state)
{
    (void)state;
    char err[256];
    int sizes[] = {2, 3};
    ps_mlp m;
    assert_int_equal(ps_mlp_init(&m, sizes, 2, 2, err, sizeof(err)), 0);
    m.gb[0][0] = 42.0f;
    float x[6] = {1, 2, 3, 4, 5, 6};
    int32_t bad[2] = {0, 3};
    int32_t neg[2] = {-1, 0};
    int32_t good[3] = {0, 1, 2};
    assert_true(isnan(ps_mlp_grad(&m, x, bad, 2)));
    assert_true(isnan(ps_mlp_grad(&m, x, neg, 2)));
    assert_true(isnan(ps_mlp_grad(&m, x, good, 3))); /* > max_batch */
    assert_true(isnan(ps_mlp_grad(&m, x, good, 0)));
    assert_true(m.gb[0][0] == 42.0f);
    ps_mlp_free(&m);
}

static void test_evaluate_in_chunks_matches_reference_over_all_rows(void **state)
{
    (void)state;
    char err[256];
    int sizes[] = {5, 9, 4};
    enum { N = 31 };
    ps_mlp m;
    assert_int_equal(ps_mlp_init(&m, sizes, 3, 7, err, sizeof(err)), 0);
    ps_mlp_init_he(&m, 8);
    float x[N * 5];
    int32_t y[N];
    PSRng r;
    ps_rng_seed(&r, 6);
    fill_normal(x, N * 5, &r, 1.0);
    fill_labels(y, N, 4, &r);
    ref_params ref;
    ref_from_mlp(&ref, &m);
    double logits[N * 4];
    double rl = ref_loss(&ref, x, y, N, logits);
    int correct = 0;
    for (int i = 0; i < N; i++) {
        int best = 0;
        for (int j = 1; j < 4; j++)
            if (logits[i * 4 + j] > logits[i * 4 + best]) best = j;
        correct += best == y[i];
    }
    double loss, acc;
    ps_mlp_evaluate(&m, x, y, N, &loss, &acc);
    assert_true(fabs(loss - rl) < 1e-5 * (1.0 + rl));
    assert_true(fabs(acc - (double)correct / N) < 1e-12);
    ref_free(&ref);
    ps_mlp_free(&m);
}

static void test_linearly_separable_problem_reaches_full_accuracy(void **state)
{
    (void)state;
    enum { N = 256, D = 8, K = 4, B = 32 };
    char err[256];
    PSRng r;
    ps_rng_seed(&r, 2024);
    /* Labels are the argmax of K fixed linear scores; points with a margin
     * under 0.5 between the two best scores are redrawn. */
    float proto[K * D];
    fill_normal(proto, K * D, &r, 1.0);
    static float x[N * D];
    int32_t y[N];
    for (int i = 0; i < N;) {
        float *row = x + i * D;
        fill_normal(row, D, &r, 1.0);
        double s[K];
        int best = 0;
        for (int k = 0; k < K; k++) {
            s[k] = 0;
            for (int d = 0; d < D; d++) s[k] += proto[k * D + d] * row[d];
            if (s[k] > s[best]) best = k;
        }
        double second = -1e300;
        for (int k = 0; k < K; k++)
            if (k != best && s[k] > second) second = s[k];
        if (s[best] - second < 0.5) continue;
        y[i++] = best;
    }
    int sizes[] = {D, 16, K};
    ps_mlp m;
    assert_int_equal(ps_mlp_init(&m, sizes, 3, B, err, sizeof(err)), 0);
    ps_mlp_init_he(&m, 1);
    double loss, acc = 0;
    for (int epoch = 0; epoch < 300 && acc < 1.0; epoch++) {
        for (int s = 0; s < N; s += B) {
            float l = ps_mlp_grad(&m, x + s * D, y + s, B);
            assert_true(isfinite(l));
            ps_mlp_sgd(&m, 0.2f);
        }
        ps_mlp_evaluate(&m, x, y, N, &loss, &acc);
    }
    assert_true(acc == 1.0);
    ps_mlp_free(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grad_matches_finite_differences_5_4_3),
        cmocka_unit_test(test_grad_matches_finite_differences_6_7_5_3),
        cmocka_unit_test(test_grad_matches_finite_differences_sampled_20_16_10),
        cmocka_unit_test(test_grad_matches_finite_differences_softmax_regression),
        cmocka_unit_test(test_uniform_output_loss_is_log_nclasses),
        cmocka_unit_test(test_softmax_with_huge_logits_gives_finite_loss_and_gradient),
        cmocka_unit_test(test_predict_rows_are_probabilities),
        cmocka_unit_test(test_sgd_decreases_loss_on_fixed_batch),
        cmocka_unit_test(test_sgd_applies_exactly_lr_times_gradient),
        cmocka_unit_test(test_he_init_has_zero_mean_and_variance_two_over_fan_in),
        cmocka_unit_test(test_he_init_is_reproducible_from_seed),
        cmocka_unit_test(test_rng_below_stays_in_range_and_covers_it),
        cmocka_unit_test(test_rng_gives_the_sequences_the_worker_shuffled_with_before),
        cmocka_unit_test(test_parse_layers_accepts_valid_lists),
        cmocka_unit_test(test_parse_layers_rejects_bad_lists_with_message),
        cmocka_unit_test(test_init_rejects_bad_shapes_and_batch),
        cmocka_unit_test(test_grad_rejects_bad_batch_and_labels_without_touching_gradients),
        cmocka_unit_test(test_evaluate_in_chunks_matches_reference_over_all_rows),
        cmocka_unit_test(test_linearly_separable_problem_reaches_full_accuracy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
