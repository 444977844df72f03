/* optim.c -- optimizer kernels (see optim.h for the determinism contract).
 *
 * The update rules, in float32, with d the gradient after clipping and L2:
 *   d      = g                               when 'plain'
 *          = g * gscale + wd * w             otherwise (ADAMW: g * gscale)
 *   SGD      w = w - lr * d
 *   MOMENTUM v = mu * v + d;              w = w - lr * v
 *   NESTEROV v = mu * v + d;              w = w - lr * (d + mu * v)
 *   ADAGRAD  a = a + d * d;               w = w - lr * (d / (sqrt(a) + eps))
 *   RMSPROP  a = b2 * a + (1-b2) * (d*d); w = w - lr * (d / (sqrt(a) + eps))
 *   ADAM     m = b1 * m + (1-b1) * d;  v = b2 * v + (1-b2) * (d*d);
 *            w = w - step * (m / (sqrt(v) * rbc2 + eps))
 *   ADAMW    w = w * decay, then ADAM with d = g * gscale
 * where step = lr / (1 - beta1^t), rbc2 = 1 / sqrt(1 - beta2^t) and
 * decay = 1 - lr * wd are computed in double once per push and rounded to
 * float. The python tests hold a numpy reference of exactly this. */

#include "fpguard.h" /* first: determinism guards */
#include "optim.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* Names and codes are those of common/protocol.h. */
const char *ps_optim_name(int kind) {
    return ps_proto_optim_name(ps_proto_optim_of_tensor_code(kind));
}

int ps_optim_parse(const char *s, size_t len) {
    return ps_proto_optim_tensor_code(ps_proto_optim_parse(s, len));
}

/* State vectors per element (a switch without default: a tensor optimizer
 * added to protocol.h without a case here does not compile). */
int ps_optim_nstate(int kind) {
    switch ((PSOptimKind)kind) {
    case PS_OPT_SGD: return 0;
    case PS_OPT_MOMENTUM: return 1;
    case PS_OPT_NESTEROV: return 1;
    case PS_OPT_ADAGRAD: return 1;
    case PS_OPT_RMSPROP: return 1;
    case PS_OPT_ADAM: return 2;
    case PS_OPT_ADAMW: return 2;
    case PS_OPT_ACCUM: return 0;
    case PS_OPT_COUNT: break;
    }
    return 0;
}

/* Whether 'v' is in validity class 'cls' (PS_HP_*). */
static int hp_valid(int cls, double v) {
    if (!isfinite(v)) return 0;
    switch (cls) {
    case PS_HP_UNIT: return v >= 0 && v < 1;
    case PS_HP_POSITIVE: return v > 0 && v <= FLT_MAX && (float)v != 0.0f;
    default: return v >= 0 && v <= FLT_MAX;
    }
}

const char *ps_optim_check(const PSHyper *h) {
    /* Each hyper-parameter is checked against its class in hparams.h. */
#define PS_HP_CHECK(K, f, d, r, s)                                                     \
    if (!hp_valid(PS_HP_##r, h->f)) return #K PS_HP_MSG_##r;
    PS_HYPERPARAMS(PS_HP_CHECK)
#undef PS_HP_CHECK
    return NULL;
}

void ps_optim_coef(int kind, const PSHyper *h, double lr_eff, double gscale, double b1pow,
                   double b2pow, PSStepCoef *c) {
    memset(c, 0, sizeof(*c));
    c->lr = (float)lr_eff;
    c->gscale = (float)gscale;
    c->wd = (kind == PS_OPT_ADAMW) ? 0.0f : (float)h->wd;
    c->mu = (float)h->momentum;
    c->b1 = (float)h->beta1;
    c->omb1 = (float)(1.0 - h->beta1);
    c->b2 = (float)h->beta2;
    c->omb2 = (float)(1.0 - h->beta2);
    c->eps = (float)h->eps;
    if (kind == PS_OPT_ADAM || kind == PS_OPT_ADAMW) {
        c->step = (float)(lr_eff / (1.0 - b1pow));
        c->rbc2 = (float)(1.0 / sqrt(1.0 - b2pow));
    }
    c->decay = (kind == PS_OPT_ADAMW) ? (float)(1.0 - lr_eff * h->wd) : 1.0f;
    c->plain = (c->gscale == 1.0f && c->wd == 0.0f);
}

/* Reads float 'i' of an unaligned little-endian array. */
static inline float ldf(const unsigned char *g, size_t i) {
    float x;
    memcpy(&x, g + 4 * i, sizeof(x));
    return x;
}

/* The gradient after clipping and L2 ('plain' is a compile-time constant at
 * each call site, so each kernel gets a branch-free loop per case). */
static inline float grad_at(const PSStepCoef *c, const unsigned char *g, const float *w, size_t i,
                            int plain) {
    float gi = ldf(g, i);
    if (plain) return gi;
    return gi * c->gscale + c->wd * w[i];
}

/* Each kernel is written once as a macro body over 'plain' and instantiated
 * twice, so the common case (no clipping, no L2) has no dead arithmetic. */
/* Kernels are built for AVX2 and for the x86-64 baseline, picked at load
 * time. Both compute the same bits: every operation is an IEEE-exact add,
 * multiply, divide or sqrt, and contraction into FMA is off. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define PS_KERNEL __attribute__((target_clones("avx2", "default")))
#else
#define PS_KERNEL
#endif

#define KERNEL_PAIR(fn, body)                                                              \
    PS_KERNEL static void fn##_p(const PSStepCoef *c, float *restrict w, float *restrict s0,         \
                       float *restrict s1, const unsigned char *restrict g, size_t n) {    \
        (void)s0; (void)s1;                                                                \
        for (size_t i = 0; i < n; i++) {                                                   \
            const float d = grad_at(c, g, w, i, 1);                                        \
            body                                                                           \
        }                                                                                  \
    }                                                                                      \
    PS_KERNEL static void fn##_g(const PSStepCoef *c, float *restrict w, float *restrict s0,         \
                       float *restrict s1, const unsigned char *restrict g, size_t n) {    \
        (void)s0; (void)s1;                                                                \
        for (size_t i = 0; i < n; i++) {                                                   \
            const float d = grad_at(c, g, w, i, 0);                                        \
            body                                                                           \
        }                                                                                  \
    }

KERNEL_PAIR(k_sgd, { w[i] = w[i] - c->lr * d; })
KERNEL_PAIR(k_momentum, {
    const float v = c->mu * s0[i] + d;
    s0[i] = v;
    w[i] = w[i] - c->lr * v;
})
KERNEL_PAIR(k_nesterov, {
    const float v = c->mu * s0[i] + d;
    s0[i] = v;
    w[i] = w[i] - c->lr * (d + c->mu * v);
})
KERNEL_PAIR(k_adagrad, {
    const float a = s0[i] + d * d;
    s0[i] = a;
    w[i] = w[i] - c->lr * (d / (sqrtf(a) + c->eps));
})
KERNEL_PAIR(k_rmsprop, {
    const float a = c->b2 * s0[i] + c->omb2 * (d * d);
    s0[i] = a;
    w[i] = w[i] - c->lr * (d / (sqrtf(a) + c->eps));
})
KERNEL_PAIR(k_adam, {
    const float m = c->b1 * s0[i] + c->omb1 * d;
    const float v = c->b2 * s1[i] + c->omb2 * (d * d);
    s0[i] = m;
    s1[i] = v;
    w[i] = w[i] - c->step * (m / (sqrtf(v) * c->rbc2 + c->eps));
})

/* ADAMW: decoupled decay first, then the Adam step without L2 in d. */
PS_KERNEL static void k_adamw(const PSStepCoef *c, float *restrict w, float *restrict s0,
                    float *restrict s1, const unsigned char *restrict g, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const float d = ldf(g, i) * c->gscale;
        const float wi = w[i] * c->decay;
        const float m = c->b1 * s0[i] + c->omb1 * d;
        const float v = c->b2 * s1[i] + c->omb2 * (d * d);
        s0[i] = m;
        s1[i] = v;
        w[i] = wi - c->step * (m / (sqrtf(v) * c->rbc2 + c->eps));
    }
}

/* ACCUM tensors never step (accum.c sums their pushes instead). */
static void k_none(const PSStepCoef *c, float *restrict w, float *restrict s0, float *restrict s1,
                   const unsigned char *restrict g, size_t n) {
    (void)c, (void)w, (void)s0, (void)s1, (void)g, (void)n;
}

typedef void (*KernelFn)(const PSStepCoef *, float *restrict, float *restrict, float *restrict,
                         const unsigned char *restrict, size_t);

void ps_optim_step(int kind, const PSStepCoef *c, float *w, float *s0, float *s1,
                   const unsigned char *g, size_t n) {
    static const KernelFn plain[PS_OPT_COUNT] = {k_sgd_p,     k_momentum_p, k_nesterov_p,
                                                 k_adagrad_p, k_rmsprop_p,  k_adam_p,
                                                 k_adamw,     k_none};
    static const KernelFn general[PS_OPT_COUNT] = {k_sgd_g,     k_momentum_g, k_nesterov_g,
                                                   k_adagrad_g, k_rmsprop_g,  k_adam_g,
                                                   k_adamw,     k_none};
    if (kind < 0 || kind >= PS_OPT_COUNT) return;
    (c->plain ? plain : general)[kind](c, w, s0, s1, g, n);
}

PS_KERNEL int ps_all_finite(const unsigned char *g, size_t n) {
    uint32_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t x;
        memcpy(&x, g + 4 * i, sizeof(x));
        bad |= ((x & 0x7f800000u) == 0x7f800000u);
    }
    return bad == 0;
}

PS_KERNEL double ps_sum_squares(const unsigned char *g, size_t n) {
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        for (int j = 0; j < 8; j++) {
            const double x = (double)ldf(g, i + j);
            acc[j] += x * x;
        }
    }
    for (; i < n; i++) {
        const double x = (double)ldf(g, i);
        acc[i & 7] += x * x;
    }
    /* Pairwise combination in a fixed order. */
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}
