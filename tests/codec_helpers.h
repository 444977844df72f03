/* codec_helpers.h -- shared by the codec unit tests: a deterministic
 * generator (xorshift64*, so every run tests the same values) and bit
 * casts. Each test program gets its own generator state. */
#ifndef PS_TEST_CODEC_HELPERS_H
#define PS_TEST_CODEC_HELPERS_H

#include <math.h>
#include <stdint.h>
#include <string.h>


/* Deterministic xorshift64* so every run tests the same values. */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static inline uint64_t rng_next(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}

/* Uniform float in [-1, 1). */
static inline float rng_unit(void) {
    return (float)((double)(rng_next() >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* A random float spread over many binades: unit * 2^[-30, 15]. */
static inline float rng_wide(void) {
    int e = (int)(rng_next() % 46) - 30;
    return ldexpf(rng_unit(), e);
}

static inline uint32_t bits_of(float x) {
    uint32_t b;
    memcpy(&b, &x, 4);
    return b;
}

static inline float float_of(uint32_t b) {
    float x;
    memcpy(&x, &b, 4);
    return x;
}

#endif
