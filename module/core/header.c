/* header.c -- the scalar part of a saved ps-tensor (see header.h). No Redis
 * calls here. */

#include "header.h"

#include <math.h>
#include <string.h>

#include "ring.h"

/* The layout an untagged PS._RESTORE HEADER has (python_tests/golden/aof-v0):
 * ndim, dims, then 19 scalars. A field added without a new 'since' would
 * change it and make those AOFs unloadable. */
#define PS_HDR_X(k, f, s) +((s) <= PS_ENCVER_AOF_UNTAGGED)
_Static_assert(0 PS_HEADER_FIELDS == 19, "untagged PS._RESTORE HEADER layout changed");
#undef PS_HDR_X
#define PS_HDR_X(k, f, s) +((s) <= PS_ENCVER_LATEST)
_Static_assert(0 PS_HEADER_FIELDS == PS_HEADER_SCALARS,
               "a header field is saved from a version newer than PS_ENCVER_LATEST");
#undef PS_HDR_X

size_t PSHeader_Scalars(int encver) {
    size_t k = 0;
#define PS_HDR_X(kind, f, s) k += (s) <= encver;
    PS_HEADER_FIELDS
#undef PS_HDR_X
    return k;
}

void PSHeader_Init(PSHeader *hd) {
    memset(hd, 0, sizeof(*hd));
#define PS_HP_DEFAULT(K, f, d, r, s) hd->h.f = d;
    PS_HYPERPARAMS(PS_HP_DEFAULT)
#undef PS_HP_DEFAULT
}

const char *PSHeader_Check(const PSHeader *hd, uint64_t *n) {
    const char *serr;
    if (hd->ndim < 1 || hd->ndim > PS_MAX_DIMS) return "bad ndim";
    /* Loading never applies ps.max-tensor-bytes: lowering the limit must
     * not make existing data unloadable. Overflow is still refused. */
    if (ps_shape_check((uint32_t)hd->ndim, hd->dims, 0, n, &serr) != 0) return serr;
    if (hd->optim >= PS_OPT_COUNT || ps_optim_check(&hd->h) || hd->policy > PS_POLICY_SCALE ||
        hd->maxstale < -1 || hd->sync_n > UINT32_MAX || hd->sync_timeout_ms < 0 ||
        hd->dedup_max > PS_LOAD_MAX_DEDUP || hd->max_snapshots > PS_LOAD_MAX_SNAPSHOTS ||
        hd->round_count > UINT32_MAX || (hd->round_count && !hd->sync_n) ||
        !PSHeader_ValidPow(hd->b1pow) || !PSHeader_ValidPow(hd->b2pow))
        return "bad optimizer or policy fields";
    /* Only ACCUM tensors sum pushes; they have no sync rounds; a pending
     * take has a seq. */
    const int accum_fields = hd->acc_count || hd->acc_seq || hd->pend_count ||
                             hd->acc_max_backlog || hd->pend_parts || hd->pend_done ||
                             hd->acc_takes || hd->acc_rounds || hd->acc_forwarded ||
                             hd->acc_round_max || hd->acc_round_min;
    if (hd->optim != PS_OPT_ACCUM ? accum_fields
                                  : (hd->sync_n || (hd->pend_count && !hd->acc_seq)))
        return "bad ACCUM fields";
    /* A pending take of parts: at least one part, at most one per gradient,
     * the next one unacknowledged, all within the seqs given; none without
     * a pending take (an older encoding saves no parts: one). */
    if (hd->pend_count ? hd->pend_parts > hd->pend_count || hd->pend_done >= (hd->pend_parts ? hd->pend_parts : 1) ||
                             (hd->pend_parts && hd->pend_parts - 1 > hd->acc_seq - 1)
                       : (hd->pend_parts || hd->pend_done))
        return "bad ACCUM pending parts";
    if (hd->acc_round_min > hd->acc_round_max || (hd->acc_rounds == 0) != (hd->acc_round_max == 0))
        return "bad ACCUM round counters";
    return NULL;
}

PSTensor *PSHeader_ToTensor(const PSHeader *hd, uint64_t n, int zero_arrays) {
    const PSTensorOpts o = {
        .optim = (int)hd->optim,
        .h = hd->h,
        .maxstale = hd->maxstale,
        .policy = (int)hd->policy,
        .sync_n = (uint32_t)hd->sync_n,
        .sync_timeout_ms = hd->sync_timeout_ms,
        .dedup_max = (uint32_t)hd->dedup_max,
        .max_snapshots = (uint32_t)hd->max_snapshots,
    };
    uint64_t dims[PS_MAX_DIMS];
    memcpy(dims, hd->dims, sizeof(dims));
    PSTensor *t = PSTensor_Create((uint32_t)hd->ndim, dims, n, &o, zero_arrays);
    if (!t) return NULL;
    t->version = hd->version;
    t->opt.step = hd->step;
    t->opt.b1pow = hd->b1pow;
    t->opt.b2pow = hd->b2pow;
    if (zero_arrays && hd->round_count) {
        if (!(t->round_acc = PSBuf_New(n, 1))) {
            PSTensor_Free(t);
            return NULL;
        }
        t->round_count = (uint32_t)hd->round_count;
    }
    t->acc.seq = hd->acc_seq;
    if (zero_arrays && hd->acc_count) {
        if (!(t->acc.sum = PSBuf_New(n, 1))) {
            PSTensor_Free(t);
            return NULL;
        }
        t->acc.count = hd->acc_count;
    }
    if (zero_arrays && hd->pend_count) {
        if (!(t->acc.pend = PSBuf_New(n, 1))) {
            PSTensor_Free(t);
            return NULL;
        }
        t->acc.pend_count = hd->pend_count;
    }
    t->acc.max_backlog = hd->acc_max_backlog;
    t->acc.pend_parts = hd->pend_count ? (hd->pend_parts ? hd->pend_parts : 1) : 0;
    t->acc.pend_done = hd->pend_done;
    t->acc.takes = hd->acc_takes;
    t->acc.rounds = hd->acc_rounds;
    t->acc.forwarded = hd->acc_forwarded;
    t->acc.round_max = hd->acc_round_max;
    t->acc.round_min = hd->acc_round_min;
    return t;
}

void PSHeader_FromTensor(const PSTensor *t, PSHeader *hd) {
    memset(hd, 0, sizeof(*hd));
    hd->ndim = t->ndim;
    memcpy(hd->dims, t->dims, t->ndim * sizeof(uint64_t));
    hd->version = t->version;
    hd->optim = (uint64_t)t->optim;
    hd->h = t->h;
    hd->step = t->opt.step;
    hd->b1pow = t->opt.b1pow;
    hd->b2pow = t->opt.b2pow;
    hd->maxstale = t->maxstale;
    hd->policy = (uint64_t)t->policy;
    hd->sync_n = t->sync_n;
    hd->sync_timeout_ms = t->sync_timeout_ms;
    hd->dedup_max = t->dedup_max;
    hd->max_snapshots = t->max_snapshots;
    hd->round_count = t->round_acc ? t->round_count : 0;
    hd->acc_count = t->acc.sum ? t->acc.count : 0;
    hd->acc_seq = t->acc.seq;
    hd->pend_count = t->acc.pend ? t->acc.pend_count : 0;
    hd->acc_max_backlog = t->acc.max_backlog;
    hd->pend_parts = hd->pend_count ? t->acc.pend_parts : 0;
    hd->pend_done = hd->pend_count ? t->acc.pend_done : 0;
    hd->acc_takes = t->acc.takes;
    hd->acc_rounds = t->acc.rounds;
    hd->acc_forwarded = t->acc.forwarded;
    hd->acc_round_max = t->acc.round_max;
    hd->acc_round_min = t->acc.round_min;
}

size_t PSHeader_Encode(const PSHeader *hd, uint64_t *out) {
    size_t k = 0;
    out[k++] = hd->ndim;
    for (uint64_t i = 0; i < hd->ndim && i < PS_MAX_DIMS; i++) out[k++] = hd->dims[i];
#define PS_HDR_X(kind, f, s) memcpy(&out[k++], &hd->f, 8);
    PS_HEADER_FIELDS
#undef PS_HDR_X
    return k;
}

int PSHeader_Decode(const unsigned char *p, size_t len, int encver, PSHeader *hd) {
    PSHeader_Init(hd);
    if (encver < PS_ENCVER_FIRST || encver > PS_ENCVER_LATEST) return -1;
    if (len < 8 || len % 8) return -1;
    memcpy(&hd->ndim, p, 8);
    if (hd->ndim < 1 || hd->ndim > PS_MAX_DIMS) return -1;
    if (len != (1 + hd->ndim + PSHeader_Scalars(encver)) * 8) return -1;
    size_t k = 1;
    for (uint64_t i = 0; i < hd->ndim; i++) memcpy(&hd->dims[i], p + 8 * k++, 8);
#define PS_HDR_X(kind, f, s) \
    if ((s) <= encver) memcpy(&hd->f, p + 8 * k++, 8);
    PS_HEADER_FIELDS
#undef PS_HDR_X
    return 0;
}

int PSTensor_RestoreChunk(PSTensor *t, int target, uint64_t snap, uint64_t off, const void *p,
                          size_t len) {
    PSBuf *b = NULL;
    switch (target) {
    case PS_RESTORE_DATA: b = t->data; break;
    case PS_RESTORE_S0: b = t->opt.s[0]; break;
    case PS_RESTORE_S1: b = t->opt.s[1]; break;
    case PS_RESTORE_ROUND: b = t->round_acc; break;
    case PS_RESTORE_ACCSUM: b = t->acc.sum; break;
    case PS_RESTORE_PENDING: b = t->acc.pend; break;
    case PS_RESTORE_RINGBASE: b = t->ring ? t->ring->base : NULL; break;
    default:
        if (target < PS_RESTORE_SNAPDATA || target > PS_RESTORE_SNAPS1 || snap >= t->nsnap)
            return PST_ERR_RANGE;
        b = target == PS_RESTORE_SNAPDATA ? t->snaps[snap].data
                                           : t->snaps[snap].opt.s[target - PS_RESTORE_SNAPS0];
    }
    /* A shared array is another holder's too: a CHUNK never writes it. */
    if (!b || len % 4 || off > b->n || len / 4 > b->n - off || b->refs > 1) return PST_ERR_RANGE;
    memcpy(b->v + off, p, len);
    return PST_OK;
}
