/* test_optim.c -- cmocka tests of module/core/optim.[ch]: every optimizer kernel
 * against a plain scalar reference written here from the rules in optim.c's
 * header comment (bit-exact in float32: same operations, same order), the
 * per-push coefficients, alignment independence, the non-finite guard and
 * the fixed-order sum of squares used for clipping. */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optim.h"

/* ------------------------------------------------------------------------
 * Helpers
 * ---------------------------------------------------------------------- */

/* Deterministic pseudo-random floats (xorshift), no libc rand(). */
static uint64_t Seed = 0x9e3779b97f4a7c15ULL;
static double urand(void) {
    Seed ^= Seed << 13;
    Seed ^= Seed >> 7;
    Seed ^= Seed << 17;
    return (double)(Seed >> 11) / 9007199254740992.0;
}
static float frand(float lo, float hi) { return (float)(lo + (hi - lo) * urand()); }

static void fill(float *a, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) a[i] = frand(lo, hi);
}

/* Bitwise equality of float arrays; reports the first difference. */
static void assert_bits_equal(const float *a, const float *b, size_t n, const char *what) {
    for (size_t i = 0; i < n; i++) {
        uint32_t x, y;
        memcpy(&x, &a[i], 4);
        memcpy(&y, &b[i], 4);
        if (x != y) {
            fail_msg("%s: element %zu differs: %.9g (0x%08x) vs %.9g (0x%08x)", what, i,
                     (double)a[i], x, (double)b[i], y);
        }
    }
}

static PSHyper hyper(double lr, double wd, double clipnorm) {
    PSHyper h = {.lr = lr, .momentum = 0.9, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                 .wd = wd, .clipnorm = clipnorm};
    return h;
}

/* ------------------------------------------------------------------------
 * The scalar reference (optim.c header comment, literally)
 * ---------------------------------------------------------------------- */

typedef struct RefCoef {
    float lr, gscale, wd, mu, b1, omb1, b2, omb2, eps, step, rbc2, decay;
    int plain;
} RefCoef;

/* Per-push coefficients: every double expression rounded to float once. */
static RefCoef ref_coef(int kind, const PSHyper *h, double lr_eff, double gscale, double b1pow,
                        double b2pow) {
    RefCoef c;
    memset(&c, 0, sizeof(c));
    c.lr = (float)lr_eff;
    c.gscale = (float)gscale;
    c.wd = kind == PS_OPT_ADAMW ? 0.0f : (float)h->wd;
    c.mu = (float)h->momentum;
    c.b1 = (float)h->beta1;
    c.omb1 = (float)(1.0 - h->beta1);
    c.b2 = (float)h->beta2;
    c.omb2 = (float)(1.0 - h->beta2);
    c.eps = (float)h->eps;
    c.step = (float)(lr_eff / (1.0 - b1pow));
    c.rbc2 = (float)(1.0 / sqrt(1.0 - b2pow));
    c.decay = kind == PS_OPT_ADAMW ? (float)(1.0 - lr_eff * h->wd) : 1.0f;
    c.plain = c.gscale == 1.0f && c.wd == 0.0f;
    return c;
}

/* One element of one step. Each statement is one float32 operation so the
 * reference cannot drift from the kernel by reassociation. */
static void ref_elem(int kind, const RefCoef *c, float *w, float *s0, float *s1, float g) {
    float d;
    if (kind == PS_OPT_ADAMW) {
        d = g * c->gscale;
    } else if (c->plain) {
        d = g;
    } else {
        float t1 = g * c->gscale;
        float t2 = c->wd * *w;
        d = t1 + t2;
    }
    switch (kind) {
    case PS_OPT_SGD: {
        float t = c->lr * d;
        *w = *w - t;
        break;
    }
    case PS_OPT_MOMENTUM: {
        float t = c->mu * *s0;
        float v = t + d;
        *s0 = v;
        float u = c->lr * v;
        *w = *w - u;
        break;
    }
    case PS_OPT_NESTEROV: {
        float t = c->mu * *s0;
        float v = t + d;
        *s0 = v;
        float mv = c->mu * v;
        float dd = d + mv;
        float u = c->lr * dd;
        *w = *w - u;
        break;
    }
    case PS_OPT_ADAGRAD: {
        float dsq = d * d;
        float a = *s0 + dsq;
        *s0 = a;
        float den = sqrtf(a) + c->eps;
        float q = d / den;
        float u = c->lr * q;
        *w = *w - u;
        break;
    }
    case PS_OPT_RMSPROP: {
        float t = c->b2 * *s0;
        float dsq = d * d;
        float t2 = c->omb2 * dsq;
        float a = t + t2;
        *s0 = a;
        float den = sqrtf(a) + c->eps;
        float q = d / den;
        float u = c->lr * q;
        *w = *w - u;
        break;
    }
    case PS_OPT_ADAM:
    case PS_OPT_ADAMW: {
        float wi = *w;
        if (kind == PS_OPT_ADAMW) wi = wi * c->decay;
        float m1 = c->b1 * *s0;
        float m2 = c->omb1 * d;
        float m = m1 + m2;
        float v1 = c->b2 * *s1;
        float dsq = d * d;
        float v2 = c->omb2 * dsq;
        float v = v1 + v2;
        *s0 = m;
        *s1 = v;
        float sq = sqrtf(v);
        float den0 = sq * c->rbc2;
        float den = den0 + c->eps;
        float q = m / den;
        float u = c->step * q;
        *w = wi - u;
        break;
    }
    default: fail_msg("unknown optimizer %d", kind);
    }
}

static void ref_step(int kind, const RefCoef *c, float *w, float *s0, float *s1, const float *g,
                     size_t n) {
    for (size_t i = 0; i < n; i++)
        ref_elem(kind, c, &w[i], s0 ? &s0[i] : NULL, s1 ? &s1[i] : NULL, g[i]);
}

/* ------------------------------------------------------------------------
 * Kernels against the reference
 * ---------------------------------------------------------------------- */

/* Runs 'steps' pushes of kind with the kernel and with the reference from the
 * same start and compares weights and state bit for bit after every step. */
static void run_kernel_vs_ref(int kind, size_t n, double lr, double wd, double gscale,
                              int steps) {
    PSHyper h = hyper(lr, wd, 0);
    float *w = malloc(n * 4), *rw = malloc(n * 4);
    float *s0 = calloc(n, 4), *s1 = calloc(n, 4), *r0 = calloc(n, 4), *r1 = calloc(n, 4);
    float *g = malloc(n * 4), *w0 = malloc(n * 4);
    fill(w, n, -1, 1);
    memcpy(rw, w, n * 4);
    memcpy(w0, w, n * 4);
    const int ns = ps_optim_nstate(kind);
    double b1pow = 1, b2pow = 1;
    char what[96];
    for (int s = 1; s <= steps; s++) {
        fill(g, n, -2, 2);
        if (s % 5 == 0) g[n / 2] = 0.0f; /* exact zero gradient element */
        b1pow *= h.beta1;
        b2pow *= h.beta2;
        PSStepCoef c;
        ps_optim_coef(kind, &h, lr, gscale, b1pow, b2pow, &c);
        RefCoef rc = ref_coef(kind, &h, lr, gscale, b1pow, b2pow);
        ps_optim_step(kind, &c, w, ns > 0 ? s0 : NULL, ns > 1 ? s1 : NULL,
                      (const unsigned char *)g, n);
        ref_step(kind, &rc, rw, ns > 0 ? r0 : NULL, ns > 1 ? r1 : NULL, g, n);
        snprintf(what, sizeof(what), "%s n=%zu wd=%g gscale=%g step %d weights",
                 ps_optim_name(kind), n, wd, gscale, s);
        assert_bits_equal(w, rw, n, what);
        if (ns > 0) assert_bits_equal(s0, r0, n, "state 0");
        if (ns > 1) assert_bits_equal(s1, r1, n, "state 1");
    }
    /* The reference is not vacuous: the weights moved. */
    int moved = 0;
    for (size_t i = 0; i < n; i++) moved |= w[i] != w0[i];
    assert_true(moved);
    free(w), free(rw), free(s0), free(s1), free(r0), free(r1), free(g), free(w0);
}

static const size_t Sizes[] = {1, 7, 8, 9, 31, 257, 4099};

static void check_kind(int kind) {
    for (size_t i = 0; i < sizeof(Sizes) / sizeof(Sizes[0]); i++) {
        run_kernel_vs_ref(kind, Sizes[i], 0.01, 0, 1.0, 20);    /* plain path */
        run_kernel_vs_ref(kind, Sizes[i], 0.05, 0.01, 1.0, 20); /* L2 / decoupled decay */
        run_kernel_vs_ref(kind, Sizes[i], 0.003, 0, 0.37, 20);  /* clipped */
        run_kernel_vs_ref(kind, Sizes[i], 0.1, 0.2, 0.5, 20);   /* clipped + wd */
    }
}

static void test_sgd_kernel_matches_scalar_reference_bit_for_bit(void **s) {
    (void)s;
    check_kind(PS_OPT_SGD);
}
static void test_momentum_kernel_matches_scalar_reference_bit_for_bit(void **s) {
    (void)s;
    check_kind(PS_OPT_MOMENTUM);
}
static void test_nesterov_kernel_matches_scalar_reference_bit_for_bit(void **s) {
    (void)s;
    check_kind(PS_OPT_NESTEROV);
}
static void test_adagrad_kernel_matches_scalar_reference_bit_for_bit(void **s) {
    (void)s;
    check_kind(PS_OPT_ADAGRAD);
}
static void test_rmsprop_kernel_matches_scalar_reference_bit_for_bit(void **s) {
    (void)s;
    check_kind(PS_OPT_RMSPROP);
}
static void test_adam_kernel_matches_scalar_reference_bit_for_bit(void **s) {
    (void)s;
    check_kind(PS_OPT_ADAM);
}
static void test_adamw_kernel_matches_scalar_reference_bit_for_bit(void **s) {
    (void)s;
    check_kind(PS_OPT_ADAMW);
}

/* Hand-computed values pin the reference itself to the documented rules. */
static void test_reference_matches_hand_computed_steps(void **s) {
    (void)s;
    PSHyper h = hyper(0.5, 0, 0);
    h.momentum = 0.5;
    /* SGD: w = 1 - 0.5 * 2 = 0 */
    float w = 1, s0 = 0, s1 = 0, g = 2;
    PSStepCoef c;
    ps_optim_coef(PS_OPT_SGD, &h, 0.5, 1, 1, 1, &c);
    ps_optim_step(PS_OPT_SGD, &c, &w, NULL, NULL, (const unsigned char *)&g, 1);
    assert_true(w == 0.0f);
    /* MOMENTUM twice with g = 2: v = 2, w = 1 - 1 = 0; v = 0.5*2 + 2 = 3, w = 0 - 1.5 */
    w = 1;
    ps_optim_coef(PS_OPT_MOMENTUM, &h, 0.5, 1, 1, 1, &c);
    ps_optim_step(PS_OPT_MOMENTUM, &c, &w, &s0, NULL, (const unsigned char *)&g, 1);
    assert_true(s0 == 2.0f && w == 0.0f);
    ps_optim_step(PS_OPT_MOMENTUM, &c, &w, &s0, NULL, (const unsigned char *)&g, 1);
    assert_true(s0 == 3.0f && w == -1.5f);
    /* NESTEROV once: v = 2, w = 1 - 0.5 * (2 + 0.5 * 2) = -0.5 */
    w = 1, s0 = 0;
    ps_optim_coef(PS_OPT_NESTEROV, &h, 0.5, 1, 1, 1, &c);
    ps_optim_step(PS_OPT_NESTEROV, &c, &w, &s0, NULL, (const unsigned char *)&g, 1);
    assert_true(s0 == 2.0f && w == -0.5f);
    /* ADAM step 1 with beta1 0.5, beta2 0.75: m = 0.5*2 = 1, v = 0.25*4 = 1,
     * step = lr/(1-0.5) = 1, rbc2 = 1/sqrt(0.25) = 2: w = 1 - 1 * (1 / (1*2 + eps)) */
    h.beta1 = 0.5, h.beta2 = 0.75, h.eps = 1e-8;
    w = 1, s0 = 0, s1 = 0;
    ps_optim_coef(PS_OPT_ADAM, &h, 0.5, 1, 0.5, 0.75, &c);
    assert_true(c.step == 1.0f && c.rbc2 == 2.0f);
    ps_optim_step(PS_OPT_ADAM, &c, &w, &s0, &s1, (const unsigned char *)&g, 1);
    assert_true(s0 == 1.0f && s1 == 1.0f);
    assert_true(w == 1.0f - 1.0f / (2.0f + (float)1e-8));
    /* ADAMW with wd 0.5 and lr 0.5: decay = 0.75 applied before the Adam step */
    h.wd = 0.5;
    w = 1, s0 = 0, s1 = 0;
    ps_optim_coef(PS_OPT_ADAMW, &h, 0.5, 1, 0.5, 0.75, &c);
    assert_true(c.decay == 0.75f && c.wd == 0.0f);
    ps_optim_step(PS_OPT_ADAMW, &c, &w, &s0, &s1, (const unsigned char *)&g, 1);
    assert_true(w == 0.75f - 1.0f / (2.0f + (float)1e-8));
}

/* ------------------------------------------------------------------------
 * Coefficients
 * ---------------------------------------------------------------------- */

static void test_coef_rounds_double_expressions_once_to_float(void **s) {
    (void)s;
    PSHyper h = hyper(0.001, 0.01, 0);
    h.beta1 = 0.85, h.beta2 = 0.995;
    for (int kind = 0; kind < PS_OPT_COUNT; kind++) {
        double b1pow = 1, b2pow = 1;
        for (int t = 1; t <= 50; t++) {
            b1pow *= h.beta1;
            b2pow *= h.beta2;
            PSStepCoef c;
            ps_optim_coef(kind, &h, 0.0007, 0.3, b1pow, b2pow, &c);
            RefCoef r = ref_coef(kind, &h, 0.0007, 0.3, b1pow, b2pow);
            assert_true(c.lr == r.lr && c.gscale == r.gscale && c.wd == r.wd && c.mu == r.mu);
            assert_true(c.b1 == r.b1 && c.omb1 == r.omb1 && c.b2 == r.b2 && c.omb2 == r.omb2);
            assert_true(c.eps == r.eps && c.decay == r.decay);
            if (kind == PS_OPT_ADAM || kind == PS_OPT_ADAMW) {
                assert_true(c.step == r.step);
                assert_true(c.rbc2 == r.rbc2);
            }
            assert_int_equal(c.plain, 0);
        }
    }
}

static void test_coef_plain_only_without_clipping_and_l2(void **s) {
    (void)s;
    PSStepCoef c;
    PSHyper h = hyper(0.1, 0, 0);
    ps_optim_coef(PS_OPT_SGD, &h, 0.1, 1.0, 1, 1, &c);
    assert_int_equal(c.plain, 1);
    ps_optim_coef(PS_OPT_SGD, &h, 0.1, 0.5, 1, 1, &c);
    assert_int_equal(c.plain, 0);
    h.wd = 0.1;
    ps_optim_coef(PS_OPT_MOMENTUM, &h, 0.1, 1.0, 1, 1, &c);
    assert_int_equal(c.plain, 0);
    /* ADAMW's decay is decoupled: no L2 term in the gradient. */
    ps_optim_coef(PS_OPT_ADAMW, &h, 0.1, 1.0, 0.9, 0.999, &c);
    assert_true(c.wd == 0.0f);
    assert_true(c.decay == (float)(1.0 - 0.1 * 0.1));
}

/* ------------------------------------------------------------------------
 * Alignment
 * ---------------------------------------------------------------------- */

static void test_unaligned_gradient_gives_identical_results(void **s) {
    (void)s;
    const size_t n = 1031;
    float *g = malloc(n * 4);
    fill(g, n, -3, 3);
    unsigned char *raw = malloc(n * 4 + 8);
    for (int kind = 0; kind < PS_OPT_COUNT; kind++) {
        for (int gen = 0; gen < 2; gen++) {
            PSHyper h = hyper(0.02, gen ? 0.05 : 0, 0);
            PSStepCoef c;
            ps_optim_coef(kind, &h, 0.02, gen ? 0.7 : 1.0, 0.9, 0.999, &c);
            float *w0 = malloc(n * 4), *a0 = calloc(n, 4), *b0 = calloc(n, 4);
            fill(w0, n, -1, 1);
            for (size_t i = 0; i < n; i++) a0[i] = b0[i] = 0.25f;
            float *wa = malloc(n * 4), *sa = malloc(n * 4), *ta = malloc(n * 4);
            memcpy(wa, w0, n * 4), memcpy(sa, a0, n * 4), memcpy(ta, b0, n * 4);
            ps_optim_step(kind, &c, wa, sa, ta, (const unsigned char *)g, n);
            for (int off = 1; off <= 3; off++) {
                memcpy(raw + off, g, n * 4);
                float *wb = malloc(n * 4), *sb = malloc(n * 4), *tb = malloc(n * 4);
                memcpy(wb, w0, n * 4), memcpy(sb, a0, n * 4), memcpy(tb, b0, n * 4);
                ps_optim_step(kind, &c, wb, sb, tb, raw + off, n);
                assert_bits_equal(wa, wb, n, "unaligned weights");
                assert_bits_equal(sa, sb, n, "unaligned state 0");
                assert_bits_equal(ta, tb, n, "unaligned state 1");
                free(wb), free(sb), free(tb);
            }
            free(w0), free(a0), free(b0), free(wa), free(sa), free(ta);
        }
    }
    /* The reductions too. */
    double ss = ps_sum_squares((const unsigned char *)g, n);
    for (int off = 1; off <= 3; off++) {
        memcpy(raw + off, g, n * 4);
        assert_true(ps_sum_squares(raw + off, n) == ss);
        assert_int_equal(ps_all_finite(raw + off, n), 1);
    }
    free(raw);
    free(g);
}

/* ------------------------------------------------------------------------
 * Non-finite guard and sum of squares
 * ---------------------------------------------------------------------- */

static void test_all_finite_catches_nan_inf_anywhere_including_the_tail(void **s) {
    (void)s;
    const float bad[] = {NAN, -NAN, INFINITY, -INFINITY};
    for (size_t n = 1; n <= 37; n++) {
        float *g = malloc(n * 4);
        fill(g, n, -1e30f, 1e30f);
        assert_int_equal(ps_all_finite((const unsigned char *)g, n), 1);
        for (size_t pos = 0; pos < n; pos++) {
            for (size_t b = 0; b < 4; b++) {
                float keep = g[pos];
                g[pos] = bad[b];
                if (ps_all_finite((const unsigned char *)g, n) != 0)
                    fail_msg("n=%zu: %g at %zu not caught", n, (double)bad[b], pos);
                g[pos] = keep;
            }
        }
        free(g);
    }
    /* Signalling NaN payloads and odd NaN bit patterns. */
    uint32_t pats[] = {0x7f800001u, 0xff800001u, 0x7fc00000u, 0x7fffffffu, 0xffffffffu};
    for (size_t i = 0; i < 5; i++) {
        float g[11] = {0};
        memcpy(&g[10], &pats[i], 4);
        assert_int_equal(ps_all_finite((const unsigned char *)g, 11), 0);
    }
    /* Extremes that are finite. */
    float ok[] = {FLT_MAX, -FLT_MAX, FLT_MIN, 1e-45f, -0.0f, 0.0f};
    assert_int_equal(ps_all_finite((const unsigned char *)ok, 6), 1);
    assert_int_equal(ps_all_finite((const unsigned char *)ok, 0), 1);
}

/* The documented order: 8 interleaved double partial sums (element i goes to
 * sum i mod 8), then ((a0+a1)+(a2+a3)) + ((a4+a5)+(a6+a7)). */
static double ref_sum_squares(const float *g, size_t n) {
    double acc[8] = {0};
    for (size_t i = 0; i < n; i++) {
        double x = (double)g[i];
        double sq = x * x;
        acc[i & 7] = acc[i & 7] + sq;
    }
    double l = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    double r = (acc[4] + acc[5]) + (acc[6] + acc[7]);
    return l + r;
}

static void test_sum_squares_has_the_documented_fixed_order(void **s) {
    (void)s;
    for (size_t n = 0; n <= 100; n++) {
        float *g = calloc(n + 1, 4);
        fill(g, n, -100, 100);
        /* Wide dynamic range so a different order gives different bits. */
        for (size_t i = 0; i < n; i += 3) g[i] *= 1e6f;
        double got = ps_sum_squares((const unsigned char *)g, n);
        double want = ref_sum_squares(g, n);
        if (got != want) fail_msg("n=%zu: %.17g != %.17g", n, got, want);
        free(g);
    }
    assert_true(ps_sum_squares((const unsigned char *)"", 0) == 0.0);
    float g3[3] = {3, 4, 12};
    assert_true(ps_sum_squares((const unsigned char *)g3, 3) == 169.0);
    /* Squares of FLT_MAX do not overflow in double. */
    float big[2] = {FLT_MAX, -FLT_MAX};
    double b = ps_sum_squares((const unsigned char *)big, 2);
    assert_true(isfinite(b) && b > 1e76);
    /* A non-finite input makes the result non-finite (the clipping path's
     * NaN check relies on it). */
    float bad[19];
    fill(bad, 19, -1, 1);
    bad[18] = NAN;
    assert_false(isfinite(ps_sum_squares((const unsigned char *)bad, 19)));
    bad[18] = -INFINITY;
    assert_false(isfinite(ps_sum_squares((const unsigned char *)bad, 19)));
}

/* The clipping factor a push uses: clipnorm / ||g|| when the norm exceeds it. */
static void test_clipping_factor_scales_the_gradient_to_the_clip_norm(void **s) {
    (void)s;
    const size_t n = 100;
    float g[100], w[100], z[100];
    fill(g, n, -1, 1);
    memset(w, 0, sizeof(w));
    double norm = sqrt(ps_sum_squares((const unsigned char *)g, n));
    double clip = norm / 4;
    PSHyper h = hyper(1.0, 0, clip);
    PSStepCoef c;
    ps_optim_coef(PS_OPT_SGD, &h, 1.0, clip / norm, 1, 1, &c);
    ps_optim_step(PS_OPT_SGD, &c, w, NULL, NULL, (const unsigned char *)g, n);
    /* w = -g * gscale: its norm is the clip norm (to float rounding). */
    for (size_t i = 0; i < n; i++) z[i] = -w[i];
    double wn = sqrt(ps_sum_squares((const unsigned char *)z, n));
    assert_true(fabs(wn - clip) <= 1e-6 * clip);
}

/* ------------------------------------------------------------------------
 * Names, parsing, validation
 * ---------------------------------------------------------------------- */

static void test_names_parse_case_insensitively_and_nstate_is_documented(void **s) {
    (void)s;
    const char *names[] = {"sgd", "momentum", "nesterov", "adagrad", "rmsprop", "adam", "adamw",
                           "accum"};
    const int nstate[] = {0, 1, 1, 1, 1, 2, 2, 0};
    _Static_assert(sizeof(nstate) / sizeof(nstate[0]) == PS_OPT_COUNT, "one name per optimizer");
    for (int k = 0; k < PS_OPT_COUNT; k++) {
        assert_string_equal(ps_optim_name(k), names[k]);
        assert_int_equal(ps_optim_parse(names[k], strlen(names[k])), k);
        char up[16];
        for (size_t i = 0; i <= strlen(names[k]); i++)
            up[i] = (char)(names[k][i] >= 'a' && names[k][i] <= 'z' ? names[k][i] - 32 : names[k][i]);
        assert_int_equal(ps_optim_parse(up, strlen(up)), k);
        assert_int_equal(ps_optim_nstate(k), nstate[k]);
    }
    assert_int_equal(ps_optim_parse("adamx", 5), -1);
    assert_int_equal(ps_optim_parse("ada", 3), -1);
    assert_int_equal(ps_optim_parse("adamw", 4), PS_OPT_ADAM); /* length counts */
    assert_int_equal(ps_optim_parse("", 0), -1);
    assert_string_equal(ps_optim_name(-1), "unknown");
    assert_string_equal(ps_optim_name(PS_OPT_COUNT), "unknown");
    assert_int_equal(ps_optim_nstate(99), 0);
}

static void test_check_refuses_out_of_range_hyper_parameters(void **s) {
    (void)s;
    PSHyper ok = hyper(0.01, 0, 0);
    assert_null(ps_optim_check(&ok));
    PSHyper b;
    b = ok, b.lr = -1;
    assert_non_null(ps_optim_check(&b));
    b = ok, b.lr = NAN;
    assert_non_null(ps_optim_check(&b));
    b = ok, b.lr = INFINITY;
    assert_non_null(ps_optim_check(&b));
    b = ok, b.momentum = 1.0;
    assert_non_null(ps_optim_check(&b));
    b = ok, b.beta1 = 1.0;
    assert_non_null(ps_optim_check(&b));
    b = ok, b.beta2 = -0.1;
    assert_non_null(ps_optim_check(&b));
    b = ok, b.eps = 0;
    assert_non_null(ps_optim_check(&b));
    b = ok, b.wd = -0.5;
    assert_non_null(ps_optim_check(&b));
    b = ok, b.clipnorm = -1;
    assert_non_null(ps_optim_check(&b));
    b = ok, b.clipnorm = NAN;
    assert_non_null(ps_optim_check(&b));
    b = ok, b.lr = 0, b.momentum = 0, b.beta1 = 0, b.beta2 = 0, b.wd = 0;
    assert_null(ps_optim_check(&b)); /* boundaries that are allowed */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sgd_kernel_matches_scalar_reference_bit_for_bit),
        cmocka_unit_test(test_momentum_kernel_matches_scalar_reference_bit_for_bit),
        cmocka_unit_test(test_nesterov_kernel_matches_scalar_reference_bit_for_bit),
        cmocka_unit_test(test_adagrad_kernel_matches_scalar_reference_bit_for_bit),
        cmocka_unit_test(test_rmsprop_kernel_matches_scalar_reference_bit_for_bit),
        cmocka_unit_test(test_adam_kernel_matches_scalar_reference_bit_for_bit),
        cmocka_unit_test(test_adamw_kernel_matches_scalar_reference_bit_for_bit),
        cmocka_unit_test(test_reference_matches_hand_computed_steps),
        cmocka_unit_test(test_coef_rounds_double_expressions_once_to_float),
        cmocka_unit_test(test_coef_plain_only_without_clipping_and_l2),
        cmocka_unit_test(test_unaligned_gradient_gives_identical_results),
        cmocka_unit_test(test_all_finite_catches_nan_inf_anywhere_including_the_tail),
        cmocka_unit_test(test_sum_squares_has_the_documented_fixed_order),
        cmocka_unit_test(test_clipping_factor_scales_the_gradient_to_the_clip_norm),
        cmocka_unit_test(test_names_parse_case_insensitively_and_nstate_is_documented),
        cmocka_unit_test(test_check_refuses_out_of_range_hyper_parameters),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
