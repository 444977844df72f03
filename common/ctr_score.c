/* ctr_score.c -- the LR/FM logit and MLP pooling kernels (ctr_score.h). */
#include "fpguard.h"

#include "ctr_score.h"

#include <string.h>
#include <strings.h>

int ps_ctr_score_model_parse(const char *s, size_t len) {
    if (len == 2 && strncasecmp(s, "lr", 2) == 0) return PS_SCORE_LR;
    if (len == 2 && strncasecmp(s, "fm", 2) == 0) return PS_SCORE_FM;
    if (len == 3 && strncasecmp(s, "mlp", 3) == 0) return PS_SCORE_MLP;
    return -1;
}

double ps_ctr_score_logit(float bias, const float *rows, uint32_t dim, const uint32_t *slot,
                          const float *val, size_t begin, size_t end, double *s) {
    const uint32_t k = dim - 1;
    double z = (double)bias, sq = 0.0;
    for (uint32_t f = 0; f < k; f++) s[f] = 0.0;
    for (size_t j = begin; j < end; j++) {
        const float *r = rows + (slot ? (size_t)slot[j] : j) * (size_t)dim;
        double x = val ? (double)val[j] : 1.0;
        z += (double)r[0] * x;
        for (uint32_t f = 0; f < k; f++) {
            double vx = (double)r[1 + f] * x;
            s[f] += vx;
            sq += vx * vx;
        }
    }
    double pair = 0.0;
    for (uint32_t f = 0; f < k; f++) pair += s[f] * s[f];
    return z + 0.5 * (pair - sq);
}

void ps_ctr_pool(float *out, uint32_t fields, uint32_t dim, const float *rows,
                 const uint32_t *slot, const uint32_t *field, const float *val, size_t begin,
                 size_t end) {
    memset(out, 0, (size_t)fields * (size_t)dim * sizeof(float));
    for (size_t j = begin; j < end; j++) {
        const float *r = rows + (slot ? (size_t)slot[j] : j) * (size_t)dim;
        float *dst = out + (size_t)field[j] * (size_t)dim;
        float v = val ? val[j] : 1.0f;
        for (uint32_t t = 0; t < dim; t++) dst[t] += v * r[t];
    }
}
