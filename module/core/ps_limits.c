/* ps_limits.c -- what a pull may cost (see ps_limits.h). */

#include "ps_limits.h"

int ps_pull_size(const PSTensor *t, size_t nrows, uint64_t elem_bytes, uint64_t max_bytes,
                 uint64_t *m) {
    *m = t->n;
    if (nrows) {
        if ((uint64_t)nrows > t->dims[0]) return PS_PULL_TOO_MANY_ROWS;
        *m = (uint64_t)nrows * (t->ndim == 1 ? 1 : t->n / t->dims[0]);
    }
    if (*m > max_bytes / elem_bytes) return PS_PULL_TOO_BIG;
    return PS_PULL_OK;
}

int ps_score_size(uint64_t nsamples, uint64_t nids, uint32_t dim, int values_reply,
                  uint64_t max_bytes, uint64_t *bytes) {
    uint64_t per_logit = values_reply ? PS_PULL_VALUE_BYTES : 8;
    *bytes = PS_PULL_ELEM_BYTES * nids * dim + 4 * nids + 8 * (uint64_t)(dim - 1) +
             per_logit * nsamples;
    return *bytes <= max_bytes ? PS_PULL_OK : PS_PULL_TOO_BIG;
}

int ps_score_pool_size(uint64_t nsamples, uint64_t nids, uint32_t dim, uint32_t fields,
                       int values_reply, uint64_t max_bytes, uint64_t *bytes) {
    uint64_t per_value = values_reply ? PS_PULL_VALUE_BYTES : 4, out;
    /* nids <= 2^24 and dim <= 2^16: the inputs fit; the reply may not. */
    uint64_t in = PS_PULL_ELEM_BYTES * nids * dim + 8 * nids;
    if (__builtin_mul_overflow(nsamples, (uint64_t)fields * dim * per_value, &out) ||
        __builtin_add_overflow(out, in, bytes)) {
        *bytes = UINT64_MAX;
        return PS_PULL_TOO_BIG;
    }
    return *bytes <= max_bytes ? PS_PULL_OK : PS_PULL_TOO_BIG;
}
