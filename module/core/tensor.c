/* tensor.c -- the ps-tensor value (see tensor.h). No Redis calls here. */

#include "fpguard.h" /* first: determinism guards */
#include "tensor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "accum.h"
#include "ring.h"
#include "rng.h"

/* The allocator, PSBuf and PSTensor_DupBytes are in mem.c. */

/* A private copy of 'b' (refs 1), or NULL on OOM. */
static PSBuf *buf_clone(const PSBuf *b) {
    PSBuf *c = PSBuf_New(b->n, 0);
    if (c) memcpy(c->v, b->v, (size_t)b->n * sizeof(float));
    return c;
}

void PSOptState_Release(PSOptState *o) {
    PSBuf_Release(o->s[0]);
    PSBuf_Release(o->s[1]);
    o->s[0] = o->s[1] = NULL;
}

void PSOptState_Share(PSOptState *dst, const PSOptState *src) {
    *dst = *src;
    PSBuf_Retain(dst->s[0]);
    PSBuf_Retain(dst->s[1]);
}

/* ------------------------------------------------------------------------
 * Creation, copy, free
 * ---------------------------------------------------------------------- */

void PSTensor_DefaultOpts(PSTensorOpts *o, double lr) {
    memset(o, 0, sizeof(*o));
    o->optim = PS_OPT_SGD;
#define PS_HP_DEFAULT(K, f, d, r, s) o->h.f = d;
    PS_HYPERPARAMS(PS_HP_DEFAULT)
#undef PS_HP_DEFAULT
    o->h.lr = lr;
    o->maxstale = -1;
    o->policy = PS_POLICY_REJECT;
    o->dedup_max = 1024;
    o->max_snapshots = 16;
}

PSTensor *PSTensor_Create(uint32_t ndim, const uint64_t *dims, uint64_t n, const PSTensorOpts *o,
                          int zero_arrays) {
    PSTensor *t = PSTensor_Alloc(sizeof(*t));
    if (!t) return NULL;
    memset(t, 0, sizeof(*t));
    t->ndim = ndim;
    memcpy(t->dims, dims, ndim * sizeof(uint64_t));
    t->n = n;
    t->optim = o->optim;
    PSTensor_Configure(t, o);
    t->opt.b1pow = 1.0;
    t->opt.b2pow = 1.0;
    if (!zero_arrays) return t;
    t->data = PSBuf_New(n, 1);
    if (!t->data) goto oom;
    for (int i = 0; i < ps_optim_nstate(t->optim); i++) {
        t->opt.s[i] = PSBuf_New(n, 1);
        if (!t->opt.s[i]) goto oom;
    }
    return t;
oom:
    PSTensor_Free(t);
    return NULL;
}

void PSTensor_GetOpts(const PSTensor *t, PSTensorOpts *o) {
    memset(o, 0, sizeof(*o));
    o->optim = t->optim;
    o->h = t->h;
    o->maxstale = t->maxstale;
    o->policy = t->policy;
    o->sync_n = t->sync_n;
    o->sync_timeout_ms = t->sync_timeout_ms;
    o->dedup_max = t->dedup_max;
    o->max_snapshots = t->max_snapshots;
}

void PSTensor_Configure(PSTensor *t, const PSTensorOpts *o) {
    t->h = o->h;
    t->maxstale = o->maxstale;
    t->policy = o->policy;
    t->sync_n = o->sync_n;
    t->sync_timeout_ms = o->sync_timeout_ms;
    t->dedup_max = o->dedup_max;
    t->max_snapshots = o->max_snapshots;
}

PSTensor *PSTensor_New(uint32_t ndim, const uint64_t *dims, uint64_t n, const PSTensorOpts *o) {
    return PSTensor_Create(ndim, dims, n, o, 1);
}

void PSTensor_Free(PSTensor *t) {
    if (!t) return;
    PSBuf_Release(t->data);
    PSOptState_Release(&t->opt);
    PSBuf_Release(t->round_acc);
    PSAccum_Release(&t->acc);
    PSRing_Free(t->ring);
    PSTensor_DedupFree(t);
    for (uint32_t i = 0; i < t->nsnap; i++) {
        PSTensor_Dealloc(t->snaps[i].name);
        PSBuf_Release(t->snaps[i].data);
        PSOptState_Release(&t->snaps[i].opt);
    }
    PSTensor_Dealloc(t->snaps);
    PSTensor_Dealloc(t);
}

PSTensor *PSTensor_Copy(const PSTensor *t) {
    PSTensor *c = PSTensor_Alloc(sizeof(*c));
    if (!c) return NULL;
    *c = *t;
    c->dedup = NULL;
    c->dedup_ix = NULL;
    c->dedup_len = 0;
    c->dedup_cap = 0;
    c->snaps = NULL;
    c->nsnap = 0;
    c->round_acc = NULL;
    memset(&c->acc, 0, sizeof(c->acc));
    c->ring = NULL;
    PSBuf_Retain(c->data);
    PSOptState_Share(&c->opt, &t->opt);
    if (PSAccum_Copy(&c->acc, &t->acc, t->n) != PST_OK) goto oom;
    if (t->ring && !(c->ring = PSRing_Clone(t->ring))) goto oom;
    if (t->round_acc) {
        c->round_acc = buf_clone(t->round_acc);
        if (!c->round_acc) goto oom;
    }
    if (PSTensor_DedupCopyInto(c, t) != PST_OK) goto oom;
    if (t->nsnap) {
        c->snaps = PSTensor_Alloc(t->nsnap * sizeof(PSSnapshot));
        if (!c->snaps) goto oom;
        for (uint32_t i = 0; i < t->nsnap; i++) {
            PSSnapshot *d = &c->snaps[i];
            const PSSnapshot *s = &t->snaps[i];
            *d = *s;
            d->name = PSTensor_DupBytes(s->name, s->namelen);
            if (!d->name) goto oom;
            PSBuf_Retain(d->data);
            PSOptState_Share(&d->opt, &s->opt);
            c->nsnap = i + 1;
        }
    }
    memset(&c->stats, 0, sizeof(c->stats));
    return c;
oom:
    PSTensor_Free(c);
    return NULL;
}

size_t PSTensor_MemUsage(const PSTensor *t) {
    size_t bytes = sizeof(*t);
    size_t fb = (size_t)t->n * sizeof(float) + sizeof(PSBuf);
    bytes += fb; /* values */
    for (int i = 0; i < 2; i++)
        if (t->opt.s[i]) bytes += fb;
    if (t->round_acc) bytes += fb;
    if (t->acc.sum) bytes += fb;
    if (t->acc.pend) bytes += fb;
    bytes += PSTensor_DedupMemUsage(t);
    bytes += PSRing_MemUsage(t->ring);
    /* A snapshot's arrays count only where not shared with the live tensor
     * or an earlier snapshot (snapshots taken with no write between them
     * hold one array). */
    for (uint32_t i = 0; i < t->nsnap; i++) {
        const PSSnapshot *s = &t->snaps[i];
        bytes += sizeof(*s) + s->namelen + 1;
        for (int j = 0; j < 3; j++)
            if (PSTensor_SnapshotArrayOwner(t, i, j) == PS_SNAP_OWNS) bytes += fb;
    }
    return bytes;
}

int PSTensor_MakeWritable(PSTensor *t) {
    PSBuf *nd = NULL, *ns[2] = {NULL, NULL};
    if (t->data->refs > 1 && !(nd = buf_clone(t->data))) goto oom;
    for (int i = 0; i < 2; i++) {
        if (t->opt.s[i] && t->opt.s[i]->refs > 1 && !(ns[i] = buf_clone(t->opt.s[i]))) goto oom;
    }
    if (nd) {
        PSBuf_Release(t->data);
        t->data = nd;
    }
    for (int i = 0; i < 2; i++) {
        if (ns[i]) {
            PSBuf_Release(t->opt.s[i]);
            t->opt.s[i] = ns[i];
        }
    }
    return PST_OK;
oom:
    PSBuf_Release(nd);
    PSBuf_Release(ns[0]);
    PSBuf_Release(ns[1]);
    return PST_ERR_OOM;
}

/* ------------------------------------------------------------------------
 * Initialization
 * ---------------------------------------------------------------------- */

void PSTensor_Fans(const PSTensor *t, double *fan_in, double *fan_out) {
    double recept = 1;
    for (uint32_t i = 2; i < t->ndim; i++) recept *= (double)t->dims[i];
    if (t->ndim == 1) {
        *fan_in = *fan_out = (double)t->dims[0];
    } else {
        *fan_in = (double)t->dims[1] * recept;
        *fan_out = (double)t->dims[0] * recept;
    }
}

void PSTensor_Fill(PSTensor *t, const PSInit *init) {
    float *v = t->data->v;
    PSRng rng;
    ps_rng_seed(&rng, init->seed);
    double lo = init->a, hi = init->b, mean = init->a, sd = init->b;
    double fi, fo;
    PSTensor_Fans(t, &fi, &fo);
    int kind = init->kind;
    if (kind == PS_INIT_XAVIER) {
        hi = sqrt(6.0 / (fi + fo));
        lo = -hi;
        kind = PS_INIT_UNIFORM;
    } else if (kind == PS_INIT_HE) {
        mean = 0;
        sd = sqrt(2.0 / fi);
        kind = PS_INIT_NORMAL;
    }
    for (uint64_t i = 0; i < t->n; i++) {
        switch (kind) {
        case PS_INIT_ZEROS: v[i] = 0.0f; break;
        case PS_INIT_CONST: v[i] = (float)init->a; break;
        case PS_INIT_UNIFORM: v[i] = (float)(lo + (hi - lo) * ps_rng_uniform(&rng)); break;
        default: v[i] = (float)(mean + sd * ps_rng_normal(&rng)); break;
        }
    }
}

/* ------------------------------------------------------------------------
 * Updates
 * ---------------------------------------------------------------------- */

int PSTensor_StaleBucket(uint64_t s) {
    if (s <= 2) return (int)s;
    int b = 3;
    uint64_t lim = 4;
    while (b < PS_STALE_BUCKETS - 1 && s > lim) {
        b++;
        lim *= 2;
    }
    return b;
}

/* Elements per row: the product of dims[1..] (the whole tensor for 1-D). */
static uint64_t row_len(const PSTensor *t) { return t->ndim == 1 ? 1 : t->n / t->dims[0]; }

static uint32_t ld_u32(const unsigned char *p, size_t i) {
    uint32_t x;
    memcpy(&x, p + 4 * i, sizeof(x));
    return x;
}

/* Applies one optimizer step with gradient bytes 'g' (dense when rows is
 * NULL). Rows must be strictly increasing here. The tensor is writable. */
static void apply_step(PSTensor *t, const unsigned char *g, const unsigned char *rows,
                       size_t nrows, double lr_eff, double gscale) {
    PSOptState *o = &t->opt;
    o->step++;
    o->b1pow *= t->h.beta1;
    o->b2pow *= t->h.beta2;
    PSStepCoef c;
    ps_optim_coef(t->optim, &t->h, lr_eff, gscale, o->b1pow, o->b2pow, &c);
    float *s0 = o->s[0] ? o->s[0]->v : NULL;
    float *s1 = o->s[1] ? o->s[1]->v : NULL;
    if (!rows) {
        ps_optim_step(t->optim, &c, t->data->v, s0, s1, g, t->n);
        return;
    }
    const uint64_t rl = row_len(t);
    for (size_t r = 0; r < nrows; r++) {
        const uint64_t off = (uint64_t)ld_u32(rows, r) * rl;
        ps_optim_step(t->optim, &c, t->data->v + off, s0 ? s0 + off : NULL, s1 ? s1 + off : NULL,
                      g + 4 * r * rl, rl);
    }
}

static int cmp_pair(const void *a, const void *b) {
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Row-sparse pushes with unsorted or repeated rows: sums the rows of equal
 * index (in the order given) into a fresh buffer with strictly increasing
 * rows. On success *og and *orows point into one allocation returned in *mem
 * (free it with PSTensor_Dealloc) and *on is the unique row count. */
static int merge_rows(const PSTensor *t, const unsigned char *g, const unsigned char *rows,
                      size_t nrows, unsigned char **og, unsigned char **orows, size_t *on,
                      void **mem) {
    const uint64_t rl = row_len(t);
    uint64_t *order = PSTensor_Alloc(nrows * sizeof(uint64_t));
    if (!order) return PST_ERR_OOM;
    /* (row << 32 | position): sorting keeps equal rows in push order. */
    for (size_t i = 0; i < nrows; i++) order[i] = ((uint64_t)ld_u32(rows, i) << 32) | i;
    qsort(order, nrows, sizeof(uint64_t), cmp_pair);
    size_t uniq = 0;
    for (size_t i = 0; i < nrows; i++)
        if (i == 0 || (order[i] >> 32) != (order[i - 1] >> 32)) uniq++;
    unsigned char *buf = PSTensor_Alloc(uniq * 4 + uniq * rl * sizeof(float));
    if (!buf) {
        PSTensor_Dealloc(order);
        return PST_ERR_OOM;
    }
    unsigned char *nr = buf;
    float *ng = (float *)(buf + uniq * 4);
    size_t u = (size_t)-1;
    for (size_t i = 0; i < nrows; i++) {
        const uint32_t row = (uint32_t)(order[i] >> 32);
        const size_t pos = (size_t)(order[i] & 0xffffffffu);
        float *dst;
        if (i == 0 || row != (uint32_t)(order[i - 1] >> 32)) {
            u++;
            memcpy(nr + 4 * u, &row, 4);
            dst = ng + u * rl;
            memcpy(dst, g + 4 * pos * rl, rl * sizeof(float));
            continue;
        }
        dst = ng + u * rl;
        for (uint64_t k = 0; k < rl; k++) {
            float x;
            memcpy(&x, g + 4 * (pos * rl + k), 4);
            dst[k] = dst[k] + x;
        }
    }
    PSTensor_Dealloc(order);
    *og = (unsigned char *)ng;
    *orows = nr;
    *on = uniq;
    *mem = buf;
    return PST_OK;
}

/* Sync mode: applies the mean of the open round and closes it. */
static void close_round(PSTensor *t) {
    float *acc = t->round_acc->v;
    const float inv = (float)(1.0 / (double)t->round_count);
    for (uint64_t i = 0; i < t->n; i++) acc[i] = acc[i] * inv;
    apply_step(t, (const unsigned char *)acc, NULL, 0, t->h.lr, 1.0);
    PSBuf_Release(t->round_acc);
    t->round_acc = NULL;
    t->round_count = 0;
    t->version++;
    t->stats.rounds_closed++;
}

int PSTensor_CloseRound(PSTensor *t) {
    if (!t->round_acc || t->round_count == 0) return PST_PENDING;
    if (PSTensor_MakeWritable(t) != PST_OK) return PST_ERR_OOM;
    close_round(t);
    return PST_OK;
}

/* Records a push that was applied: updates the existing entry or inserts
 * the prepared id. */
static void dedup_done(PSTensor *t, PSDedupEntry *de, char *idcopy, const PSPush *p,
                       uint64_t version) {
    if (de) {
        PSTensor_DedupApplied(t, de, p->seq, version);
    } else if (idcopy) {
        PSTensor_DedupCommit(t, idcopy, p->idlen, p->seq, 0, version);
    }
}

/* ACCUM tensors: the checked gradient joins the sum (accum.c), scaled by
 * SCALE, the clipping factor and, beyond MAXSTALENESS with POLICY SCALE,
 * 1 / (1 + staleness); the version (the upstream's, mirrored) stays. */
static int accum_push(PSTensor *t, const unsigned char *g, const unsigned char *rows,
                      size_t nrows, const PSPush *p, double gscale, uint64_t stale,
                      PSPushResult *r) {
    double f = p->scale * gscale;
    if (t->maxstale >= 0 && stale > (uint64_t)t->maxstale) f = f / (double)(1 + stale);
    const int st = PSAccum_Add(t, g, rows, nrows, (float)f);
    if (st == PST_ERR_NONFINITE) t->stats.nonfinite_rejects++;
    if (st != PST_OK) return st;
    r->version = t->version;
    t->stats.pushes++;
    t->stats.stale_hist[PSTensor_StaleBucket(stale)]++;
    return PST_OK;
}

int PSTensor_Push(PSTensor *t, const PSPush *p, PSPushResult *r) {
    memset(r, 0, sizeof(*r));
    /* 1. Exactly once: a seq already applied (or below the window) is a
     * duplicate. The one lookup of the push: 'found' stays valid until the
     * table changes in step 6. */
    PSDedupEntry *found = NULL;
    if (p->id) {
        PSDedupEntry *e = found = PSTensor_DedupFind(t, p->id, p->idlen);
        if (e && PSDedupEntry_Seen(e, p->seq)) {
            t->stats.dedup_hits++;
            r->version = e->version;
            return PST_DUPLICATE;
        }
    }
    /* 2. Staleness. */
    uint64_t stale = 0;
    if (p->has_version) {
        if (p->version > t->version) return PST_ERR_FUTURE;
        stale = t->version - p->version;
    }
    r->staleness = stale;
    double lr_eff = t->h.lr * p->scale;
    if (t->sync_n) {
        if (stale > 0) {
            t->stats.stale_rejects++;
            return PST_ERR_ROUND;
        }
    } else if (t->maxstale >= 0 && stale > (uint64_t)t->maxstale) {
        if (t->policy == PS_POLICY_REJECT) {
            t->stats.stale_rejects++;
            return PST_ERR_STALE;
        }
        lr_eff = lr_eff / (double)(1 + stale);
        t->stats.scaled_pushes++;
    }
    /* 3. Repeated or unsorted rows are summed first, so that clipping and
     * the step both see the gradient that is applied. */
    const unsigned char *g = p->g, *rows = p->rows;
    size_t nrows = p->nrows;
    void *mem = NULL;
    char *idcopy = NULL;
    PSDedupEntry *de = NULL;
    int st = PST_OK;
    if (rows) {
        int sorted = 1;
        for (size_t i = 1; i < nrows && sorted; i++)
            sorted = ld_u32(rows, i) > ld_u32(rows, i - 1);
        if (!sorted) {
            unsigned char *ng, *nr;
            if (merge_rows(t, g, rows, nrows, &ng, &nr, &nrows, &mem) != PST_OK) return PST_ERR_OOM;
            g = ng;
            rows = nr;
        }
    }
    /* 4. Finite values; the clipping norm doubles as the check. */
    const size_t m = rows ? nrows * (size_t)row_len(t) : (size_t)t->n;
    double gscale = 1.0;
    if (t->h.clipnorm > 0) {
        const double ss = ps_sum_squares(g, m);
        if (!isfinite(ss)) goto nonfinite;
        const double norm = sqrt(ss);
        if (norm > t->h.clipnorm) gscale = t->h.clipnorm / norm;
    } else if (!ps_all_finite(g, m)) {
        goto nonfinite;
    }
    /* 5. The per-push coefficients must be finite in float32 (a huge SCALE
     * or LR would otherwise write Inf/NaN into the tensor). */
    if (!isfinite((float)lr_eff) || !isfinite((float)(p->scale * gscale))) {
        st = PST_ERR_RANGE;
        goto fail;
    }
    if (t->optim == PS_OPT_ADAM || t->optim == PS_OPT_ADAMW) {
        const double b1 = t->opt.b1pow * t->h.beta1;
        if (!isfinite((float)(lr_eff / (1.0 - b1)))) {
            st = PST_ERR_RANGE;
            goto fail;
        }
    }
    /* 6. Everything that can fail before anything changes. */
    if (p->id && t->dedup_max) {
        de = found;
        if (!de && !(idcopy = PSTensor_DedupPrepare(t, p->id, p->idlen))) {
            st = PST_ERR_OOM;
            goto fail;
        }
    }
    if (PSTensor_MakeWritable(t) != PST_OK) {
        st = PST_ERR_OOM;
        goto fail;
    }

    if (t->optim == PS_OPT_ACCUM) {
        st = accum_push(t, g, rows, nrows, p, gscale, stale, r);
        if (st != PST_OK) goto fail;
        PSTensor_Dealloc(mem);
        dedup_done(t, de, idcopy, p, r->version);
        return PST_OK;
    }
    if (t->sync_n) {
        if (!t->round_acc) {
            t->round_acc = PSBuf_New(t->n, 1);
            if (!t->round_acc) {
                st = PST_ERR_OOM;
                goto fail;
            }
        }
        float *acc = t->round_acc->v;
        const uint64_t rl = row_len(t);
        for (size_t r0 = 0; r0 < (rows ? nrows : 1); r0++) {
            const uint64_t off = rows ? (uint64_t)ld_u32(rows, r0) * rl : 0;
            const uint64_t len = rows ? rl : t->n;
            const unsigned char *src = g + 4 * (rows ? r0 * rl : 0);
            for (uint64_t k = 0; k < len; k++) {
                float x;
                memcpy(&x, src + 4 * k, 4);
                acc[off + k] = acc[off + k] + x * (float)(p->scale * gscale);
            }
        }
        t->round_count++;
        r->version = t->version + 1;
        st = PST_PENDING;
        if (t->round_count >= t->sync_n) {
            close_round(t);
            st = PST_OK;
        }
        PSTensor_Dealloc(mem);
        dedup_done(t, de, idcopy, p, r->version);
        t->stats.pushes++;
        t->stats.stale_hist[0]++;
        return st;
    }

    apply_step(t, g, rows, nrows, lr_eff, gscale);
    PSTensor_Dealloc(mem);
    t->version++;
    r->version = t->version;
    dedup_done(t, de, idcopy, p, t->version);
    t->stats.pushes++;
    t->stats.stale_hist[PSTensor_StaleBucket(stale)]++;
    return PST_OK;

nonfinite:
    t->stats.nonfinite_rejects++;
    st = PST_ERR_NONFINITE;
fail:
    PSTensor_Dealloc(mem);
    PSTensor_Dealloc(idcopy);
    return st;
}

int PSTensor_SetValues(PSTensor *t, const unsigned char *bytes) {
    if (t->data->refs > 1) {
        PSBuf *nd = PSBuf_New(t->n, 0);
        if (!nd) return PST_ERR_OOM;
        PSBuf_Release(t->data);
        t->data = nd;
    }
    memcpy(t->data->v, bytes, (size_t)t->n * sizeof(float));
    t->version++;
    t->stats.sets++;
    return PST_OK;
}
