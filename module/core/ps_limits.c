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
