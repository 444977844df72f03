/* rng.c -- seeded random source (see rng.h). */

#include "fpguard.h" /* first: determinism guards */
#include "rng.h"

#include <math.h>
#include <string.h>

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void ps_rng_seed(PSRng *r, uint64_t seed) {
    memset(r, 0, sizeof(*r));
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t ps_rng_next(PSRng *r) {
    uint64_t *s = r->s;
    const uint64_t result = rotl(s[1] * 5, 7) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

uint64_t ps_rng_below(PSRng *r, uint64_t n) {
    if (n == 0) return 0;
    const uint64_t threshold = (0 - n) % n; /* 2^64 mod n */
    for (;;) {
        uint64_t v = ps_rng_next(r);
        if (v >= threshold) return v % n;
    }
}

double ps_rng_uniform(PSRng *r) {
    return (double)(ps_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

double ps_rng_log(double x) {
    /* x = m * 2^e with m in [sqrt(1/2), sqrt(2)); frexp is exact. */
    int e;
    double m = frexp(x, &e); /* m in [0.5, 1) */
    if (m < 0.70710678118654752) {
        m = m * 2.0;
        e -= 1;
    }
    /* log(m) = 2 * atanh(s), s = (m-1)/(m+1), |s| <= 0.1716: the odd series
     * to s^23 is below double rounding. Horner form, fixed order. */
    const double s = (m - 1.0) / (m + 1.0);
    const double s2 = s * s;
    double p = 1.0 / 23.0;
    p = p * s2 + 1.0 / 21.0;
    p = p * s2 + 1.0 / 19.0;
    p = p * s2 + 1.0 / 17.0;
    p = p * s2 + 1.0 / 15.0;
    p = p * s2 + 1.0 / 13.0;
    p = p * s2 + 1.0 / 11.0;
    p = p * s2 + 1.0 / 9.0;
    p = p * s2 + 1.0 / 7.0;
    p = p * s2 + 1.0 / 5.0;
    p = p * s2 + 1.0 / 3.0;
    p = p * s2 + 1.0;
    const double ln2 = 0.69314718055994530942;
    return (double)e * ln2 + 2.0 * s * p;
}

double ps_rng_normal(PSRng *r) {
    if (r->have_spare) {
        r->have_spare = 0;
        return r->spare;
    }
    double u, v, s;
    do {
        u = 2.0 * ps_rng_uniform(r) - 1.0;
        v = 2.0 * ps_rng_uniform(r) - 1.0;
        s = u * u + v * v;
    } while (s >= 1.0 || s == 0.0);
    const double f = sqrt(-2.0 * ps_rng_log(s) / s);
    r->spare = v * f;
    r->have_spare = 1;
    return u * f;
}
