/* fpguard.h -- compile-time determinism guards for floating-point code.
 *
 * Include it first in every file whose float results are replicated
 * (kernels, codecs, the tensor value, the RNG). A master, its replicas and
 * an AOF replay must compute bit-identical tensors, which the Makefile's
 * flags (-ffp-contract=off, no -ffast-math) give; this header makes a build
 * that drops them fail or stay correct:
 *   - __FAST_MATH__ (set by -ffast-math, -Ofast) allows reassociation and
 *     flush-to-zero: refused outright.
 *   - Contraction of a*b+c into one fused multiply-add changes the rounding.
 *     GCC honours its optimize pragma for every function after it, whatever
 *     -ffp-contract says. Clang honours STDC FP_CONTRACT except under
 *     -ffp-contract=fast, which ignores all pragmas by design: the module's
 *     OnLoad self-test (module/core/fpguard.c) catches that build at run time.
 * Nothing here emits code; it only changes how the including file compiles. */

#ifndef PS_FPGUARD_H
#define PS_FPGUARD_H

#ifdef __FAST_MATH__
#error "redis-ps must not be built with -ffast-math/-Ofast: replicas would diverge"
#endif

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#endif /* PS_FPGUARD_H */
