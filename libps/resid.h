/* resid.h -- error-feedback residuals of a lossy embedding push format:
 * one row of 'dim' floats per id, in an open-addressing table (linear
 * probing, no deletion) that holds at most 'max' ids. Memory is bounded:
 * the table doubles (from 16 slots) when its load would pass 3/4, so it
 * has at most max * 8/3 slots (or 16), each 9 + 4 * dim bytes (id, used
 * flag, row), and grows to that only as ids arrive. Private to libps. */
#ifndef PS_RESID_H
#define PS_RESID_H

#include <stddef.h>
#include <stdint.h>

typedef struct psResid {
    int dim;
    size_t max;     /* ids kept at most (0: feedback off) */
    size_t n;       /* ids kept */
    size_t cap;     /* slots (a power of two), 0 before the first id */
    uint64_t *ids;
    unsigned char *used;
    float *rows;    /* cap * dim */
} psResid;

/* Start empty with room for at most 'max' ids of 'dim' floats. */
void psi_resid_init(psResid *r, int dim, size_t max);
void psi_resid_free(psResid *r);

/* The residual row of 'id' (zeros when new), or NULL when the table is
 * full (max ids) or out of memory: that id then goes without feedback. */
float *psi_resid_row(psResid *r, uint64_t id);

#endif /* PS_RESID_H */
