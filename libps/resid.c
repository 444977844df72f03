/* resid.c -- error-feedback residual rows by id (see resid.h). */
#include "resid.h"

#include <stdlib.h>
#include <string.h>

void psi_resid_init(psResid *r, int dim, size_t max) {
    memset(r, 0, sizeof(*r));
    r->dim = dim;
    r->max = max;
}

void psi_resid_free(psResid *r) {
    free(r->ids);
    free(r->used);
    free(r->rows);
    psi_resid_init(r, r->dim, 0);
}

static size_t slot_of(uint64_t id, size_t cap) {
    return (size_t)((id * 0x9e3779b97f4a7c15ULL) >> 17) & (cap - 1);
}

/* Rehash into 'cap' slots. 0 or -1 (out of memory, unchanged). */
static int resize(psResid *r, size_t cap) {
    uint64_t *ids = malloc(cap * sizeof(uint64_t));
    unsigned char *used = calloc(cap, 1);
    float *rows = malloc(cap * (size_t)r->dim * sizeof(float));
    if (ids == NULL || used == NULL || rows == NULL) {
        free(ids);
        free(used);
        free(rows);
        return -1;
    }
    for (size_t i = 0; i < r->cap; i++) {
        if (!r->used[i]) continue;
        size_t s = slot_of(r->ids[i], cap);
        while (used[s]) s = (s + 1) & (cap - 1);
        used[s] = 1;
        ids[s] = r->ids[i];
        memcpy(rows + s * (size_t)r->dim, r->rows + i * (size_t)r->dim, (size_t)r->dim * sizeof(float));
    }
    free(r->ids);
    free(r->used);
    free(r->rows);
    r->ids = ids;
    r->used = used;
    r->rows = rows;
    r->cap = cap;
    return 0;
}

float *psi_resid_row(psResid *r, uint64_t id) {
    size_t s;
    if (r->cap) {
        for (s = slot_of(id, r->cap); r->used[s]; s = (s + 1) & (r->cap - 1))
            if (r->ids[s] == id) return r->rows + s * (size_t)r->dim;
    }
    if (r->n >= r->max) return NULL;
    if ((r->n + 1) * 4 > r->cap * 3) { /* keep the load <= 3/4 */
        size_t cap = r->cap ? r->cap * 2 : 16;
        if (resize(r, cap) != 0) return NULL;
    }
    s = slot_of(id, r->cap);
    while (r->used[s]) s = (s + 1) & (r->cap - 1);
    r->used[s] = 1;
    r->ids[s] = id;
    r->n++;
    float *row = r->rows + s * (size_t)r->dim;
    memset(row, 0, (size_t)r->dim * sizeof(float));
    return row;
}
