/* accum.c -- ACCUM tensors: summed pushes and the pending take (see
 * accum.h). No Redis calls here. */

#include "accum.h"

#include <math.h>
#include <string.h>

/* Elements per row: the product of dims[1..] (the whole tensor for 1-D). */
static uint64_t accum_row_len(const PSTensor *t) { return t->ndim == 1 ? 1 : t->n / t->dims[0]; }

/* Whether acc[off + k] + g[k] * f stays finite for every k < len. Checked
 * before anything is written, so a refused push leaves the sum as it was. */
static int sum_stays_finite(const float *acc, uint64_t off, const unsigned char *g, uint64_t len,
                            float f) {
    uint32_t bad = 0;
    for (uint64_t k = 0; k < len; k++) {
        float x;
        memcpy(&x, g + 4 * k, 4);
        const float s = acc[off + k] + x * f;
        bad |= !isfinite(s);
    }
    return bad == 0;
}

/* acc[off + k] += g[k] * f, in index order (the same bits everywhere). */
static void sum_into(float *acc, uint64_t off, const unsigned char *g, uint64_t len, float f) {
    for (uint64_t k = 0; k < len; k++) {
        float x;
        memcpy(&x, g + 4 * k, 4);
        acc[off + k] = acc[off + k] + x * f;
    }
}

int PSAccum_Add(PSTensor *t, const unsigned char *g, const unsigned char *rows, size_t nrows,
                float f) {
    PSAccum *a = &t->acc;
    PSBuf *fresh = NULL;
    if (!a->sum && !(fresh = PSBuf_New(t->n, 1))) return PST_ERR_OOM;
    float *acc = fresh ? fresh->v : a->sum->v;
    const uint64_t rl = accum_row_len(t);
    const size_t parts = rows ? nrows : 1;
    for (size_t r = 0; r < parts; r++) {
        uint32_t row = 0;
        if (rows) memcpy(&row, rows + 4 * r, 4);
        const uint64_t off = rows ? (uint64_t)row * rl : 0, len = rows ? rl : t->n;
        if (!sum_stays_finite(acc, off, g + 4 * (rows ? r * rl : 0), len, f)) {
            PSBuf_Release(fresh);
            return PST_ERR_NONFINITE;
        }
    }
    for (size_t r = 0; r < parts; r++) {
        uint32_t row = 0;
        if (rows) memcpy(&row, rows + 4 * r, 4);
        const uint64_t off = rows ? (uint64_t)row * rl : 0, len = rows ? rl : t->n;
        sum_into(acc, off, g + 4 * (rows ? r * rl : 0), len, f);
    }
    if (fresh) a->sum = fresh;
    a->count++;
    return PST_OK;
}

int PSAccum_Take(PSTensor *t, uint64_t mincount, uint64_t seqfloor) {
    PSAccum *a = &t->acc;
    if (a->pend_count) return PS_TAKE_AGAIN;
    if (a->count == 0 || a->count < mincount) return PS_TAKE_SHORT;
    a->pend = a->sum;
    a->pend_count = a->count;
    a->sum = NULL;
    a->count = 0;
    a->seq = a->seq + 1 > seqfloor ? a->seq + 1 : seqfloor;
    t->stats.takes++;
    return PS_TAKE_NEW;
}

int PSAccum_Ack(PSTensor *t, uint64_t seq) {
    PSAccum *a = &t->acc;
    if (!a->pend_count || a->seq != seq) return 0;
    PSBuf_Release(a->pend);
    a->pend = NULL;
    a->pend_count = 0;
    t->stats.take_acks++;
    return 1;
}

int PSAccum_Mirror(PSTensor *t, uint64_t version, const unsigned char *bytes) {
    const size_t len = (size_t)t->n * sizeof(float);
    if (version < t->version) return 0;
    if (version == t->version && memcmp(t->data->v, bytes, len) == 0) return 0;
    if (t->data->refs > 1) {
        /* Shared with a snapshot or a copy: this write gets its own buffer. */
        PSBuf *nd = PSBuf_New(t->n, 0);
        if (!nd) return -1;
        PSBuf_Release(t->data);
        t->data = nd;
    }
    memcpy(t->data->v, bytes, len);
    t->version = version;
    t->stats.sets++;
    return 1;
}

void PSAccum_Release(PSAccum *a) {
    PSBuf_Release(a->sum);
    PSBuf_Release(a->pend);
    memset(a, 0, sizeof(*a));
}

/* A private copy of 'b' (NULL stays NULL). Returns 0, or -1 on OOM. */
static int clone_or_null(PSBuf **dst, const PSBuf *b, uint64_t n) {
    *dst = NULL;
    if (!b) return 0;
    if (!(*dst = PSBuf_New(n, 0))) return -1;
    memcpy((*dst)->v, b->v, (size_t)n * sizeof(float));
    return 0;
}

int PSAccum_Copy(PSAccum *dst, const PSAccum *src, uint64_t n) {
    *dst = *src;
    if (clone_or_null(&dst->sum, src->sum, n) || clone_or_null(&dst->pend, src->pend, n)) {
        PSAccum_Release(dst);
        return PST_ERR_OOM;
    }
    return PST_OK;
}
