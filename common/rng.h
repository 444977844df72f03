/* rng.h -- a seeded, portable random source for tensor initialization.
 *
 * xoshiro256** seeded through splitmix64, uniform doubles from the top 53
 * bits, normals by the Marsaglia polar method with a logarithm computed by
 * plain arithmetic (ps_rng_log), so a seed gives the same tensor on every
 * machine and on every replica that re-executes PS.CREATE ... SEED s. */

#ifndef PS_RNG_H
#define PS_RNG_H

#include <stdint.h>

typedef struct PSRng {
    uint64_t s[4];
    int have_spare; /* the polar method makes normals in pairs */
    double spare;
} PSRng;

/* Seeds the generator; any 64-bit seed (0 included) is fine. */
void ps_rng_seed(PSRng *r, uint64_t seed);

/* Next 64 random bits. */
uint64_t ps_rng_next(PSRng *r);

/* Uniform integer in [0, n) without modulo bias (draws in the incomplete
 * last block of 2^64 mod n are retried); 0 when n == 0. */
uint64_t ps_rng_below(PSRng *r, uint64_t n);

/* Uniform double in [0, 1). */
double ps_rng_uniform(PSRng *r);

/* Standard normal double. */
double ps_rng_normal(PSRng *r);

/* Natural logarithm of x > 0 from basic arithmetic only (error < 1e-15
 * relative), identical on every IEEE 754 machine. */
double ps_rng_log(double x);

#endif /* PS_RNG_H */
