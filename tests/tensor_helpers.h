/* tensor_helpers.h -- what the cmocka tests of the tensor core share: a
 * deterministic random source, tensors with random values, bit-exact float
 * comparisons, a saved copy of a tensor's numeric state (to check a failed
 * operation changed nothing) and the SGD reference. Include after cmocka.h.
 * Functions are static inline so each test file uses what it needs. */

#ifndef PS_TENSOR_HELPERS_H
#define PS_TENSOR_HELPERS_H

#include <stdlib.h>
#include <string.h>

#include "tensor.h"

static uint64_t Seed = 0x243f6a8885a308d3ULL;
static inline double urand(void) {
    Seed ^= Seed << 13;
    Seed ^= Seed >> 7;
    Seed ^= Seed << 17;
    return (double)(Seed >> 11) / 9007199254740992.0;
}
static inline void fill(float *a, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) a[i] = (float)(lo + (hi - lo) * urand());
}

static inline void assert_bits_equal(const float *a, const float *b, size_t n, const char *what) {
    if (memcmp(a, b, n * sizeof(float)) == 0) return;
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], 4) != 0)
            fail_msg("%s: element %zu differs: %.9g vs %.9g", what, i, (double)a[i], (double)b[i]);
}

static inline int bits_equal(const float *a, const float *b, size_t n) {
    return memcmp(a, b, n * sizeof(float)) == 0;
}

/* A tensor of shape dims with random values and the given optimizer. */
static inline PSTensor *mk(uint32_t ndim, const uint64_t *dims, int optim, double lr) {
    PSTensorOpts o;
    PSTensor_DefaultOpts(&o, lr);
    o.optim = optim;
    uint64_t n = 1;
    for (uint32_t i = 0; i < ndim; i++) n *= dims[i];
    PSTensor *t = PSTensor_New(ndim, dims, n, &o);
    assert_non_null(t);
    fill(t->data->v, n, -1, 1);
    return t;
}

static inline PSTensor *mk1(uint64_t n, int optim, double lr) {
    uint64_t d[1] = {n};
    return mk(1, d, optim, lr);
}

static inline PSPush dense(const float *g) {
    PSPush p = {.g = (const unsigned char *)g, .scale = 1.0};
    return p;
}

/* A full deep copy of the bytes that define a tensor's numeric state, to
 * check that a failed operation changed nothing. */
typedef struct State {
    uint64_t n, version, step, round_count, dedup_len, nsnap;
    double b1pow, b2pow;
    float *data, *s0, *s1;
} State;

static inline State save_state(const PSTensor *t) {
    State s = {.n = t->n, .version = t->version, .step = t->opt.step,
               .round_count = t->round_count, .dedup_len = t->dedup_len, .nsnap = t->nsnap,
               .b1pow = t->opt.b1pow, .b2pow = t->opt.b2pow};
    s.data = malloc(t->n * 4);
    memcpy(s.data, t->data->v, t->n * 4);
    s.s0 = t->opt.s[0] ? malloc(t->n * 4) : NULL;
    s.s1 = t->opt.s[1] ? malloc(t->n * 4) : NULL;
    if (s.s0) memcpy(s.s0, t->opt.s[0]->v, t->n * 4);
    if (s.s1) memcpy(s.s1, t->opt.s[1]->v, t->n * 4);
    return s;
}

static inline void assert_state_unchanged(const PSTensor *t, State *s) {
    assert_int_equal(t->version, s->version);
    assert_int_equal(t->opt.step, s->step);
    assert_true(t->opt.b1pow == s->b1pow && t->opt.b2pow == s->b2pow);
    assert_int_equal(t->round_count, s->round_count);
    assert_int_equal(t->dedup_len, s->dedup_len);
    assert_int_equal(t->nsnap, s->nsnap);
    assert_bits_equal(t->data->v, s->data, t->n, "values");
    if (s->s0) assert_bits_equal(t->opt.s[0]->v, s->s0, t->n, "state 0");
    if (s->s1) assert_bits_equal(t->opt.s[1]->v, s->s1, t->n, "state 1");
    free(s->data), free(s->s0), free(s->s1);
}

/* SGD reference: w - (float)lr_eff * g, one float operation each. */
static inline void sgd_ref(float *w, const float *g, size_t n, double lr_eff) {
    const float lr = (float)lr_eff;
    for (size_t i = 0; i < n; i++) {
        float u = lr * g[i];
        w[i] = w[i] - u;
    }
}

/* Pushes 'k' random gradients (advancing the version by k). */
static inline void push_random(PSTensor *t, int k) {
    float *g = malloc(t->n * 4);
    for (int i = 0; i < k; i++) {
        fill(g, t->n, -1, 1);
        PSPush p = dense(g);
        PSPushResult r;
        assert_int_equal(PSTensor_Push(t, &p, &r), PST_OK);
    }
    free(g);
}


#endif /* PS_TENSOR_HELPERS_H */
