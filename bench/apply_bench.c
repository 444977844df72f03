/* apply_bench.c -- how long the module's optimizer kernels take to apply one
 * gradient, next to a memcpy of the same bytes measured in the same process.
 *
 * The apply is what the server adds on top of receiving the bytes, so the
 * ratio to memcpy is the number to watch (absolute times drift on shared
 * machines). Prints one table row per optimizer and size; exits non-zero
 * when SGD on 1M floats exceeds --max-sgd-ratio times memcpy (a regression
 * guard used by the tests). */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "optim.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Best-of-'reps' seconds for one call of the kernel (or of memcpy when kind < 0). */
static double time_apply(int kind, int clip, float *w, float *s0, float *s1, unsigned char *g,
                         float *dst, size_t n, int reps) {
    PSHyper h = {.lr = 0.01, .momentum = 0.9, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                 .wd = kind == PS_OPT_ADAMW ? 0.01 : 0, .clipnorm = clip ? 1.0 : 0};
    double best = 1e9, b1 = 1, b2 = 1;
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        if (kind < 0) {
            memcpy(dst, g, n * sizeof(float));
        } else {
            double gs = 1.0;
            if (clip) {
                double ss = ps_sum_squares(g, n);
                if (ss > 1.0) gs = 1.0 / __builtin_sqrt(ss);
            } else if (!ps_all_finite(g, n)) {
                abort();
            }
            b1 *= h.beta1;
            b2 *= h.beta2;
            PSStepCoef c;
            ps_optim_coef(kind, &h, h.lr, gs, b1, b2, &c);
            ps_optim_step(kind, &c, w, s0, s1, g, n);
        }
        double dt = now_s() - t0;
        if (dt < best) best = dt;
    }
    return best;
}

int main(int argc, char **argv) {
    double max_ratio = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--max-sgd-ratio") && i + 1 < argc) max_ratio = atof(argv[++i]);
        else {
            fprintf(stderr, "usage: apply_bench [--max-sgd-ratio R]\n");
            return 2;
        }
    }
    const size_t sizes[] = {65536, 1 << 20, 16 << 20};
    const struct {
        int kind, clip;
        const char *name;
    } rows[] = {{PS_OPT_SGD, 0, "sgd"},
                {PS_OPT_MOMENTUM, 0, "momentum"},
                {PS_OPT_ADAM, 0, "adam"},
                {PS_OPT_ADAMW, 1, "adamw+clipnorm"}};
    int fail = 0;
    printf("%-16s %10s %12s %12s %10s\n", "kernel", "floats", "apply_ms", "memcpy_ms", "ratio");
    for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
        size_t n = sizes[si];
        float *w = calloc(n, 4), *s0 = calloc(n, 4), *s1 = calloc(n, 4), *dst = calloc(n, 4);
        /* +1: the gradient sits at an odd address, as Redis arguments do. */
        unsigned char *gbuf = malloc(n * 4 + 1), *g = gbuf + 1;
        if (!w || !s0 || !s1 || !dst || !gbuf) return 1;
        for (size_t i = 0; i < n; i++) {
            float x = (float)((int)(i % 97) - 48) * 1e-3f;
            memcpy(g + 4 * i, &x, 4);
        }
        int reps = n > (4u << 20) ? 5 : 30;
        double sgd_ratio = 0;
        for (size_t k = 0; k < sizeof(rows) / sizeof(rows[0]); k++) {
            double mc = time_apply(-1, 0, w, s0, s1, g, dst, n, reps);
            double ap = time_apply(rows[k].kind, rows[k].clip, w, s0, s1, g, dst, n, reps);
            printf("%-16s %10zu %12.3f %12.3f %10.2f\n", rows[k].name, n, ap * 1e3, mc * 1e3,
                   ap / mc);
            if (rows[k].kind == PS_OPT_SGD) sgd_ratio = ap / mc;
        }
        if (n == (1u << 20) && max_ratio > 0 && sgd_ratio > max_ratio) {
            fprintf(stderr, "FAIL: SGD apply of 1M floats is %.2fx memcpy (limit %.2fx)\n",
                    sgd_ratio, max_ratio);
            fail = 1;
        }
        free(w), free(s0), free(s1), free(dst), free(gbuf);
    }
    return fail;
}
