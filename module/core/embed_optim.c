/* embed_optim.c -- embedding tables: configuration rules, row
 * initialization and the per-row optimizer steps (see embed.h).
 *
 * The update rules, in float32 with the operations in exactly this order
 * (compiled with -ffp-contract=off, so no a*b+c becomes an fma), g being the
 * row's gradient after duplicate ids were summed:
 *   SGD        w = w - lr * g
 *   MOMENTUM   v = mu * v + g;  w = w - lr * v
 *   ADAGRAD    a = a + g * g;   w = w - lr * (g / (sqrt(a) + eps))
 *   ROWADAGRAD s = 0; s = s + g[i] * g[i] for i = 0 .. dim-1;
 *              A = A + s / (float)dim;  r = sqrt(A) + eps;
 *              w = w - lr * (g / r)
 *   ADAM       m = b1 * m + (1-b1) * g;  v = b2 * v + (1-b2) * (g * g);
 *              w = w - step * (m / (sqrt(v) * rbc2 + eps))
 *              step = (float)(lr / (1 - b1^t)), rbc2 = (float)(1 / sqrt(1 - b2^t))
 *              in double, t the row's push count including this push and
 *              x^t by binary powering (PSEmbed_PowU)
 *   FTRL       gg = g * g;  nn = n + gg;
 *              sigma = (sqrt(nn) - sqrt(n)) / alpha;
 *              z = z + (g - sigma * w);  n = nn;
 *              w = 0                                  if |z| <= l1
 *                = -(z - s * l1) / ((beta + sqrt(n)) / alpha + l2), s = +1 if z > 0 else -1
 * Every coefficient is the config's double rounded to float once; (1-b1)
 * and (1-b2) are computed in double then rounded. */

#include "embed.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "rng.h"

/* Names and codes are those of common/protocol.h. */
const char *PSEmbed_OptimName(int optim) {
    return ps_proto_optim_name(ps_proto_optim_of_table_code(optim));
}

int PSEmbed_OptimParse(const char *s, size_t len) {
    return ps_proto_optim_table_code(ps_proto_optim_parse(s, len));
}

/* State vectors per row (a switch without default: a table optimizer added
 * to protocol.h without a case here does not compile). */
int PSEmbed_NumStateVectors(int optim) {
    switch ((PSEmbedOptim)optim) {
    case PSE_OPT_SGD: return 0;
    case PSE_OPT_MOMENTUM: return 1;
    case PSE_OPT_ADAGRAD: return 1;
    case PSE_OPT_ROWADAGRAD: return 0;
    case PSE_OPT_ADAM: return 2;
    case PSE_OPT_FTRL: return 2;
    case PSE_OPT_COUNT: break;
    }
    return 0;
}

uint32_t PSEmbed_NumFloats(const PSEmbedConfig *c) {
    return c->dim * (1u + (uint32_t)PSEmbed_NumStateVectors(c->optim));
}

void PSEmbed_DefaultConfig(PSEmbedConfig *c, uint32_t dim) {
    memset(c, 0, sizeof(*c));
    c->dim = dim;
    c->optim = PSE_OPT_SGD;
    c->lr = 0.01;
    c->momentum = 0.9;
    c->beta1 = 0.9;
    c->beta2 = 0.999;
    c->eps = 1e-8;
    c->alpha = 0.05;
    c->beta = 1.0;
    c->init = PSE_INIT_ZEROS;
    c->admit = 1;
    c->filter_log2 = 20;
    c->tombstones = PSE_DEFAULT_TOMBSTONES;
}

/* A double that stays finite once rounded to float32. */
static int finite32(double x) { return isfinite(x) && fabs(x) <= FLT_MAX; }

const char *PSEmbed_CheckConfig(const PSEmbedConfig *c) {
    if (c->dim < 1 || c->dim > PSE_MAX_DIM) return "DIM must be in [1, 65536]";
    if (c->optim < 0 || c->optim >= PSE_OPT_COUNT) return "unknown optimizer";
    if (!finite32(c->lr) || c->lr < 0) return "LR must be a finite number >= 0";
    if (!isfinite(c->momentum) || c->momentum < 0 || c->momentum >= 1)
        return "MOMENTUM must be in [0, 1)";
    if (!isfinite(c->beta1) || c->beta1 < 0 || c->beta1 >= 1) return "BETA1 must be in [0, 1)";
    if (!isfinite(c->beta2) || c->beta2 < 0 || c->beta2 >= 1) return "BETA2 must be in [0, 1)";
    if (!finite32(c->eps) || c->eps <= 0 || (float)c->eps == 0.0f)
        return "EPS must be a finite number > 0 (and >= 1.4e-45, the smallest float32)";
    if (!finite32(c->alpha) || c->alpha <= 0 || (float)c->alpha == 0.0f)
        return "ALPHA must be a finite number > 0";
    if (!finite32(c->beta) || c->beta <= 0 || (float)c->beta == 0.0f)
        return "BETA must be a finite number > 0";
    if (!finite32(c->l1) || c->l1 < 0) return "L1 must be a finite number >= 0";
    if (!finite32(c->l2) || c->l2 < 0) return "L2 must be a finite number >= 0";
    switch (c->init) {
    case PSE_INIT_ZEROS: break;
    case PSE_INIT_UNIFORM:
        if (!finite32(c->init_a) || !finite32(c->init_b) || c->init_a > c->init_b)
            return "UNIFORM needs finite lo <= hi";
        break;
    case PSE_INIT_NORMAL:
        if (!finite32(c->init_a) || !finite32(c->init_b) || c->init_b < 0 || c->init_b > 1e6)
            return "NORMAL needs a finite mean and 0 <= std <= 1e6";
        break;
    default: return "unknown initializer";
    }
    if (c->optim == PSE_OPT_FTRL && c->init != PSE_INIT_ZEROS)
        return "FTRL rows start at w(z=0, n=0) = 0: INIT must be ZEROS";
    if (c->unknown_zeros != 0 && c->unknown_zeros != 1) return "bad unknown-id mode";
    if (c->admit < 1 || c->admit > PSE_MAX_ADMIT) return "ADMIT must be in [1, 255]";
    if (c->admit > 1 && (c->filter_log2 < PSE_MIN_FILTER_LOG2 || c->filter_log2 > PSE_MAX_FILTER_LOG2))
        return "FILTER must be 2^10 .. 2^30 counters";
    if (c->capacity > PSE_MAX_ROWS) return "CAPACITY must be <= 67108863";
    if (c->ttl > PSE_MAX_AGE) return "TTL must be <= 2147483648 (row ages saturate there)";
    if (c->tombstones > PSE_MAX_TOMBSTONES) return "TOMBSTONES must be <= 16777216";
    return NULL;
}

/* ------------------------------------------------------------------------
 * Row initialization: a pure function of (seed, id)
 * ---------------------------------------------------------------------- */

void PSEmbed_InitRow(const PSEmbedConfig *c, uint64_t id, float *out) {
    if (c->init == PSE_INIT_ZEROS) {
        memset(out, 0, (size_t)c->dim * sizeof(float));
        return;
    }
    /* The generator of row 'id' is seeded with seed ^ PSEmbed_Mix64(id): distinct
     * ids of one table get distinct streams, since PSEmbed_Mix64 is a bijection. */
    PSRng r;
    ps_rng_seed(&r, c->seed ^ PSEmbed_Mix64(id));
    const double a = c->init_a, b = c->init_b;
    for (uint32_t i = 0; i < c->dim; i++) {
        if (c->init == PSE_INIT_UNIFORM)
            out[i] = (float)(a + (b - a) * ps_rng_uniform(&r));
        else
            out[i] = (float)(a + b * ps_rng_normal(&r));
    }
}

/* ------------------------------------------------------------------------
 * Optimizer steps
 * ---------------------------------------------------------------------- */

void PSEmbed_MakeCoef(const PSEmbedConfig *c, PSEmbedCoef *k) {
    memset(k, 0, sizeof(*k));
    k->lr = (float)c->lr;
    k->mu = (float)c->momentum;
    k->b1 = (float)c->beta1;
    k->omb1 = (float)(1.0 - c->beta1);
    k->b2 = (float)c->beta2;
    k->omb2 = (float)(1.0 - c->beta2);
    k->eps = (float)c->eps;
    k->alpha = (float)c->alpha;
    k->beta = (float)c->beta;
    k->l1 = (float)c->l1;
    k->l2 = (float)c->l2;
    k->lr_d = c->lr;
    k->beta1_d = c->beta1;
    k->beta2_d = c->beta2;
}

double PSEmbed_PowU(double x, uint32_t t) {
    double r = 1.0, b = x;
    while (t) {
        if (t & 1u) r = r * b;
        b = b * b;
        t >>= 1;
    }
    return r;
}

float PSEmbed_FtrlWeight(const PSEmbedCoef *k, float z, float n) {
    if (fabsf(z) <= k->l1) return 0.0f;
    const float sl1 = z > 0.0f ? k->l1 : -k->l1;
    return -(z - sl1) / ((k->beta + sqrtf(n)) / k->alpha + k->l2);
}

void PSEmbed_StepRow(int optim, const PSEmbedCoef *k, uint32_t dim, float *restrict w,
                     float *restrict s0, float *restrict s1, float *rowacc,
                     const float *restrict g, uint32_t t) {
    switch (optim) {
    case PSE_OPT_SGD:
        for (uint32_t i = 0; i < dim; i++) w[i] = w[i] - k->lr * g[i];
        break;
    case PSE_OPT_MOMENTUM:
        for (uint32_t i = 0; i < dim; i++) {
            const float v = k->mu * s0[i] + g[i];
            s0[i] = v;
            w[i] = w[i] - k->lr * v;
        }
        break;
    case PSE_OPT_ADAGRAD:
        for (uint32_t i = 0; i < dim; i++) {
            const float a = s0[i] + g[i] * g[i];
            s0[i] = a;
            w[i] = w[i] - k->lr * (g[i] / (sqrtf(a) + k->eps));
        }
        break;
    case PSE_OPT_ROWADAGRAD: {
        float s = 0.0f;
        for (uint32_t i = 0; i < dim; i++) s = s + g[i] * g[i];
        const float acc = *rowacc + s / (float)dim;
        *rowacc = acc;
        const float r = sqrtf(acc) + k->eps;
        for (uint32_t i = 0; i < dim; i++) w[i] = w[i] - k->lr * (g[i] / r);
        break;
    }
    case PSE_OPT_ADAM: {
        const float step = (float)(k->lr_d / (1.0 - PSEmbed_PowU(k->beta1_d, t)));
        const float rbc2 = (float)(1.0 / sqrt(1.0 - PSEmbed_PowU(k->beta2_d, t)));
        for (uint32_t i = 0; i < dim; i++) {
            const float m = k->b1 * s0[i] + k->omb1 * g[i];
            const float v = k->b2 * s1[i] + k->omb2 * (g[i] * g[i]);
            s0[i] = m;
            s1[i] = v;
            w[i] = w[i] - step * (m / (sqrtf(v) * rbc2 + k->eps));
        }
        break;
    }
    case PSE_OPT_FTRL:
        /* s0 = z, s1 = n; w holds w(z, n) of the previous step. */
        for (uint32_t i = 0; i < dim; i++) {
            const float gg = g[i] * g[i];
            const float n = s1[i];
            const float nn = n + gg;
            const float sigma = (sqrtf(nn) - sqrtf(n)) / k->alpha;
            const float z = s0[i] + (g[i] - sigma * w[i]);
            s0[i] = z;
            s1[i] = nn;
            w[i] = PSEmbed_FtrlWeight(k, z, nn);
        }
        break;
    default: break;
    }
}
