/* fpguard.c -- run-time determinism checks (see fpguard.h). */

#include "fpguard.h"

#include <fenv.h>
#include <stdint.h>
#include <string.h>

#include "optim.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define PS_MXCSR_DAZ 0x0040u /* denormals are zero (inputs) */
#define PS_MXCSR_FTZ 0x8000u /* flush to zero (results) */
#define PS_MXCSR_RC 0x6000u  /* rounding control; 0 = nearest even */
#endif

const char *ps_fpu_mode_check(void) {
    if (fegetround() != FE_TONEAREST) return "the rounding mode is not round-to-nearest";
#if defined(__x86_64__) || defined(__i386__)
    const unsigned csr = _mm_getcsr();
    if (csr & PS_MXCSR_FTZ) return "MXCSR flush-to-zero (FTZ) is set";
    if (csr & PS_MXCSR_DAZ) return "MXCSR denormals-are-zero (DAZ) is set";
    if (csr & PS_MXCSR_RC) return "MXCSR rounding is not round-to-nearest";
#endif
    /* Other architectures (arm64 FPCR.FZ, ...): no portable way to read the
     * flush-to-zero bit; the contraction self-test below still runs. */
    return NULL;
}

const char *ps_fp_contract_check(void) {
    /* lr = d = 1 + 2^-12, w = 1 + 2^-11: lr*d rounds to 1 + 2^-11 (the
     * 2^-24 term is a tie, to even), so w - lr*d is exactly 0 in two
     * roundings and -2^-24 when fused. */
    enum { N = 19 }; /* a vector body plus a scalar tail */
    const float lr = 1.0f + 0x1p-12f, w0 = 1.0f + 0x1p-11f;
    PSHyper h;
    memset(&h, 0, sizeof(h));
    h.lr = lr;
    PSStepCoef c;
    ps_optim_coef(PS_OPT_SGD, &h, (double)lr, 1.0, 1.0, 1.0, &c);
    float w[N];
    unsigned char g[N * sizeof(float)];
    for (int i = 0; i < N; i++) {
        w[i] = w0;
        memcpy(g + i * sizeof(float), &lr, sizeof(float));
    }
    ps_optim_step(PS_OPT_SGD, &c, w, NULL, NULL, g, N);
    for (int i = 0; i < N; i++)
        if (w[i] != 0.0f) return "the optimizer kernels fuse multiply-adds (built with -ffp-contract=fast?)";
    return NULL;
}
