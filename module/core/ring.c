/* ring.c -- ring tracking state of a tensor (see ring.h). No Redis calls
 * here; memory through the tensors' allocator (mem.c). */

#include "fpguard.h" /* first: determinism guards */
#include "ring.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------
 * Small helpers
 * ---------------------------------------------------------------------- */

int PSRing_OriginValid(const char *p, size_t len) {
    if (len < 1 || len > PS_RING_ORIGIN_MAX) return 0;
    for (size_t i = 0; i < len; i++) {
        const unsigned char c = (unsigned char)p[i];
        const int ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                       c == '_' || c == '.' || c == ':' || c == '-';
        if (!ok) return 0;
    }
    return 1;
}

static uint32_t ld_u32(const unsigned char *p, uint64_t i) {
    uint32_t x;
    memcpy(&x, p + 4 * i, 4);
    return x;
}

static float ld_f32(const unsigned char *p, uint64_t i) {
    float x;
    memcpy(&x, p + 4 * i, 4);
    return x;
}

static int name_eq(const char *a, uint32_t alen, const char *b, size_t blen) {
    return alen == blen && memcmp(a, b, blen) == 0;
}

/* A delta of 'count' elements (arrays not filled), or NULL on OOM. */
static PSRingDelta *delta_new(const char *origin, size_t len, uint64_t seq, uint64_t hops,
                              uint64_t count) {
    if (count > (SIZE_MAX - sizeof(PSRingDelta)) / 8) return NULL;
    PSRingDelta *d = PSTensor_Alloc(sizeof(*d));
    if (!d) return NULL;
    memset(d, 0, sizeof(*d));
    void *mem = PSTensor_Alloc((size_t)count * 8);
    if (!mem) {
        PSTensor_Dealloc(d);
        return NULL;
    }
    d->idx = mem;
    d->val = (float *)((unsigned char *)mem + (size_t)count * 4);
    memcpy(d->origin, origin, len);
    d->origin[len] = '\0';
    d->originlen = (uint32_t)len;
    d->seq = seq;
    d->hops = hops;
    d->count = count;
    return d;
}

static void delta_free(PSRingDelta *d) {
    if (!d) return;
    PSTensor_Dealloc(d->idx);
    PSTensor_Dealloc(d);
}

static void fwd_clear(PSRing *r) {
    for (PSRingDelta *d = r->fwd_head, *nx; d; d = nx) {
        nx = d->next;
        delta_free(d);
    }
    r->fwd_head = r->fwd_tail = NULL;
    r->fwd_len = r->fwd_bytes = 0;
}

static void fwd_push(PSRing *r, PSRingDelta *d) {
    d->next = NULL;
    if (r->fwd_tail) r->fwd_tail->next = d;
    else r->fwd_head = d;
    r->fwd_tail = d;
    r->fwd_len++;
    r->fwd_bytes += PS_RING_ENTRY_BYTES(d->count);
}

static PSRingOrigin *find_origin(PSRing *r, const char *name, size_t len) {
    for (uint32_t i = 0; i < r->norigins; i++)
        if (name_eq(r->origins[i].name, r->origins[i].len, name, len)) return &r->origins[i];
    return NULL;
}

const PSRingOrigin *PSRing_FindOrigin(const PSRing *r, const char *name, size_t len) {
    return find_origin((PSRing *)r, name, len);
}

static void set_name(char *dst, uint32_t *dlen, const char *src, size_t len) {
    memcpy(dst, src, len);
    dst[len] = '\0';
    *dlen = (uint32_t)len;
}

/* The tensor's values, held by nobody else (a snapshot or a copy may share
 * them): a private copy first. PS_RING_OK or PS_RING_EOOM (nothing changed). */
static int data_writable(PSTensor *t) {
    if (t->data->refs <= 1) return PS_RING_OK;
    PSBuf *nd = PSBuf_New(t->n, 0);
    if (!nd) return PS_RING_EOOM;
    memcpy(nd->v, t->data->v, (size_t)t->n * sizeof(float));
    PSBuf_Release(t->data);
    t->data = nd;
    return PS_RING_OK;
}

static PSRing *ring_new(uint64_t n) {
    PSRing *r = PSTensor_Alloc(sizeof(*r));
    if (!r) return NULL;
    memset(r, 0, sizeof(*r));
    if (!(r->base = PSBuf_New(n, 1))) {
        PSTensor_Dealloc(r);
        return NULL;
    }
    r->maxqueue = PS_RING_DEFAULT_MAXQUEUE;
    return r;
}

/* ------------------------------------------------------------------------
 * Lifecycle
 * ---------------------------------------------------------------------- */

void PSRing_Free(PSRing *r) {
    if (!r) return;
    PSBuf_Release(r->base);
    delta_free(r->pend);
    fwd_clear(r);
    PSTensor_Dealloc(r);
}

static PSRingDelta *delta_clone(const PSRingDelta *s) {
    PSRingDelta *d = delta_new(s->origin, s->originlen, s->seq, s->hops, s->count);
    if (!d) return NULL;
    memcpy(d->idx, s->idx, (size_t)s->count * 4);
    memcpy(d->val, s->val, (size_t)s->count * 4);
    return d;
}

PSRing *PSRing_Clone(const PSRing *s) {
    if (!s) return NULL;
    PSRing *r = PSTensor_Alloc(sizeof(*r));
    if (!r) return NULL;
    *r = *s;
    r->base = NULL;
    r->pend = NULL;
    r->fwd_head = r->fwd_tail = NULL;
    r->fwd_len = r->fwd_bytes = 0;
    if (!(r->base = PSBuf_New(s->base->n, 0))) goto oom;
    memcpy(r->base->v, s->base->v, (size_t)s->base->n * sizeof(float));
    if (s->pend && !(r->pend = delta_clone(s->pend))) goto oom;
    for (const PSRingDelta *e = s->fwd_head; e; e = e->next) {
        PSRingDelta *c = delta_clone(e);
        if (!c) goto oom;
        fwd_push(r, c);
    }
    return r;
oom:
    PSRing_Free(r);
    return NULL;
}

size_t PSRing_MemUsage(const PSRing *r) {
    if (!r) return 0;
    size_t b = sizeof(*r) + sizeof(PSBuf) + (size_t)r->base->n * sizeof(float);
    if (r->pend) b += sizeof(PSRingDelta) + (size_t)r->pend->count * 8;
    for (const PSRingDelta *e = r->fwd_head; e; e = e->next)
        b += sizeof(PSRingDelta) + (size_t)e->count * 8;
    return b;
}

/* ------------------------------------------------------------------------
 * TRACK
 * ---------------------------------------------------------------------- */

int PSRing_Track(PSTensor *t, const char *origin, size_t len, int set_maxqueue,
                 uint64_t maxqueue) {
    if (!PSRing_OriginValid(origin, len)) return -PS_RING_EORIGIN;
    if (t->optim == PS_OPT_ACCUM) return -PS_RING_EACCUM;
    if (t->n > PS_RING_MAX_ELEMS) return -PS_RING_EBIG;
    if (t->ring) {
        if (!name_eq(t->ring->origin, t->ring->originlen, origin, len)) return -PS_RING_EOTHER;
        if (set_maxqueue) t->ring->maxqueue = maxqueue;
        return 0;
    }
    PSRing *r = ring_new(t->n);
    if (!r) return -PS_RING_EOOM;
    memcpy(r->base->v, t->data->v, (size_t)t->n * sizeof(float));
    set_name(r->origin, &r->originlen, origin, len);
    if (set_maxqueue) r->maxqueue = maxqueue;
    t->ring = r;
    return 1;
}

int PSRing_Untrack(PSTensor *t) {
    if (!t->ring) return 0;
    PSRing_Free(t->ring);
    t->ring = NULL;
    return 1;
}

/* ------------------------------------------------------------------------
 * TAKE / ACK
 * ---------------------------------------------------------------------- */

/* Whether element i is significant (PSRing_Significant, ring.h). */
#define significant PSRing_Significant

static int cmp_u64(const void *a, const void *b) {
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

uint64_t PSRing_Accumulated(const PSTensor *t) {
    if (!t->ring) return 0;
    const float *v = t->data->v, *b = t->ring->base->v;
    uint64_t k = 0;
    for (uint64_t i = 0; i < t->n; i++) k += (v[i] - b[i]) != 0.0f;
    return k;
}

int PSRing_Take(PSTensor *t, const PSRingTakeOpts *o) {
    PSRing *r = t->ring;
    if (!r) return -PS_RING_EUNTRACKED;
    if (r->pend) return PS_RING_TAKE_AGAIN;
    const float *v = t->data->v;
    float *b = r->base->v;
    const uint64_t n = t->n;
    uint64_t c = 0;
    for (uint64_t i = 0; i < n; i++) c += significant(v[i], b[i], o->threshold);
    if (c == 0) {
        /* Nothing to send: every own push is as good as acknowledged. */
        if (r->acked_own == r->own_pushes) return PS_RING_TAKE_NONE;
        r->acked_own = r->own_pushes;
        return PS_RING_TAKE_NONE_CAUGHTUP;
    }
    if (r->take_seq >= PS_RING_MAX_SEQ) return -PS_RING_ESEQ; /* no seq left a receiver takes */
    const uint64_t seq = r->take_seq + 1 > o->seqfloor ? r->take_seq + 1 : o->seqfloor;
    if (o->maxelems && c > o->maxelems) {
        /* The m largest |d|, ties by the lower index: sort keys
         * (~|d| bits, index) ascending. A non-negative float's bits order
         * as its value does. */
        uint64_t *keys = PSTensor_Alloc((size_t)c * sizeof(uint64_t));
        if (!keys) return -PS_RING_EOOM;
        uint64_t k = 0;
        for (uint64_t i = 0; i < n; i++) {
            if (!significant(v[i], b[i], o->threshold)) continue;
            const float ad = fabsf(v[i] - b[i]);
            uint32_t bits;
            memcpy(&bits, &ad, 4);
            keys[k++] = ((uint64_t)(0x7fffffffu - bits) << 32) | (uint64_t)i;
        }
        qsort(keys, (size_t)c, sizeof(uint64_t), cmp_u64);
        const uint64_t m = o->maxelems;
        for (uint64_t j = 0; j < m; j++) keys[j] &= 0xffffffffu; /* the indices */
        qsort(keys, (size_t)m, sizeof(uint64_t), cmp_u64);
        PSRingDelta *d = delta_new(r->origin, r->originlen, seq, 0, m);
        if (!d) {
            PSTensor_Dealloc(keys);
            return -PS_RING_EOOM;
        }
        for (uint64_t j = 0; j < m; j++) {
            const uint64_t i = keys[j];
            d->idx[j] = (uint32_t)i;
            d->val[j] = v[i] - b[i];
            b[i] = v[i];
        }
        PSTensor_Dealloc(keys);
        r->pend = d;
    } else {
        PSRingDelta *d = delta_new(r->origin, r->originlen, seq, 0, c);
        if (!d) return -PS_RING_EOOM;
        uint64_t j = 0;
        for (uint64_t i = 0; i < n; i++) {
            if (!significant(v[i], b[i], o->threshold)) continue;
            d->idx[j] = (uint32_t)i;
            d->val[j] = v[i] - b[i];
            b[i] = v[i];
            j++;
        }
        r->pend = d;
    }
    r->take_seq = seq;
    r->pend_own = r->own_pushes;
    return PS_RING_TAKE_NEW;
}

int PSRing_Ack(PSTensor *t, uint64_t seq) {
    PSRing *r = t->ring;
    if (!r || !r->pend || r->pend->seq != seq) return 0;
    delta_free(r->pend);
    r->pend = NULL;
    if (r->pend_own > r->acked_own) r->acked_own = r->pend_own;
    r->pend_own = 0;
    return 1;
}

/* ------------------------------------------------------------------------
 * APPLY / FORWARD
 * ---------------------------------------------------------------------- */

int PSRing_CheckDelta(const PSTensor *t, const unsigned char *idx, const unsigned char *val,
                      uint64_t count) {
    if (count < 1 || count > t->n) return PS_RING_ECOUNT;
    uint64_t prev = 0;
    for (uint64_t k = 0; k < count; k++) {
        const uint64_t i = ld_u32(idx, k);
        if (i >= t->n || (k && i <= prev)) return PS_RING_EINDEX;
        prev = i;
    }
    uint32_t bad = 0;
    for (uint64_t k = 0; k < count; k++) bad |= !isfinite(ld_f32(val, k));
    return bad ? PS_RING_ENONFINITE : PS_RING_OK;
}

int PSRing_Admit(const char *own, uint32_t ownlen, PSRingOrigin *origins, uint32_t n,
                 const char *origin, size_t len, uint64_t seq, uint64_t prev, PSRingOrigin **entry) {
    *entry = NULL;
    if (!PSRing_OriginValid(origin, len)) return -PS_RING_EORIGIN;
    if (seq < 1 || seq > PS_RING_MAX_SEQ || prev >= seq) return -PS_RING_ESEQ;
    if (name_eq(own, ownlen, origin, len)) return 0; /* came full circle */
    PSRingOrigin *e = NULL;
    for (uint32_t i = 0; i < n && !e; i++)
        if (name_eq(origins[i].name, origins[i].len, origin, len)) e = &origins[i];
    if (e && seq <= e->hwm) return 0; /* a resend or a duplicate */
    /* Per origin, deltas apply in seq order without a gap: the origin's
     * delta before this one (PREV) must be here already. Applying past a
     * gap would move the mark over the missing delta, which would then be
     * ignored as a duplicate for good. */
    if (prev > (e ? e->hwm : 0)) return -PS_RING_EGAP;
    if (!e && n >= PS_RING_MAX_ORIGINS) return -PS_RING_EORIGINS;
    *entry = e;
    return 1;
}

void PSRing_Record(PSRingOrigin *origins, uint32_t *n, PSRingOrigin *e, const char *origin,
                   size_t len, uint64_t seq) {
    if (!e) {
        e = &origins[(*n)++];
        memset(e, 0, sizeof(*e));
        set_name(e->name, &e->len, origin, len);
    }
    e->hwm = seq;
    e->applied++;
}

int PSRing_Apply(PSTensor *t, const char *origin, size_t len, uint64_t seq,
                 const unsigned char *idx, const unsigned char *val, uint64_t count,
                 uint64_t hops) {
    return PSRing_ApplyPrev(t, origin, len, seq, 0, idx, val, count, hops);
}

int PSRing_ApplyPrev(PSTensor *t, const char *origin, size_t len, uint64_t seq, uint64_t prev,
                     const unsigned char *idx, const unsigned char *val, uint64_t count,
                     uint64_t hops) {
    PSRing *r = t->ring;
    if (!r) return -PS_RING_EUNTRACKED;
    if (!PSRing_OriginValid(origin, len)) return -PS_RING_EORIGIN;
    if (seq < 1 || seq > PS_RING_MAX_SEQ || prev >= seq) return -PS_RING_ESEQ;
    int st = PSRing_CheckDelta(t, idx, val, count);
    if (st != PS_RING_OK) return -st;
    PSRingOrigin *e;
    st = PSRing_Admit(r->origin, r->originlen, r->origins, r->norigins, origin, len, seq, prev, &e);
    if (st <= 0) return st;
    /* An open sync round's pushes carry the current version: the round
     * closes first (as for PS.SET). */
    if (t->round_count) return -PS_RING_EROUND;
    /* The sums must stay finite, in values and in base. */
    const float *v = t->data->v, *b = r->base->v;
    uint32_t bad = 0;
    for (uint64_t k = 0; k < count; k++) {
        const uint32_t i = ld_u32(idx, k);
        const float x = ld_f32(val, k);
        bad |= !isfinite(v[i] + x) | !isfinite(b[i] + x);
    }
    if (bad) return -PS_RING_ENONFINITE;
    PSRingDelta *fe = NULL;
    if (hops > 0) {
        if (r->fwd_len && r->fwd_bytes + PS_RING_ENTRY_BYTES(count) > r->maxqueue)
            return -PS_RING_BACKLOG;
        if (!(fe = delta_new(origin, len, seq, hops - 1, count))) return -PS_RING_EOOM;
        memcpy(fe->idx, idx, (size_t)count * 4);
        memcpy(fe->val, val, (size_t)count * 4);
    }
    if (data_writable(t) != PS_RING_OK) {
        delta_free(fe);
        return -PS_RING_EOOM;
    }
    /* Nothing can fail from here. */
    float *wv = t->data->v, *wb = r->base->v;
    for (uint64_t k = 0; k < count; k++) {
        const uint32_t i = ld_u32(idx, k);
        const float x = ld_f32(val, k);
        wv[i] = wv[i] + x;
        wb[i] = wb[i] + x;
    }
    PSRing_Record(r->origins, &r->norigins, e, origin, len, seq);
    r->applied++;
    if (fe) fwd_push(r, fe);
    t->version++;
    return 1;
}

const PSRingDelta *PSRing_FwdPeek(const PSTensor *t) { return t->ring ? t->ring->fwd_head : NULL; }

int PSRing_FwdAck(PSTensor *t, const char *origin, size_t len, uint64_t seq) {
    PSRing *r = t->ring;
    PSRingDelta *d = r ? r->fwd_head : NULL;
    if (!d || d->seq != seq || !name_eq(d->origin, d->originlen, origin, len)) return 0;
    r->fwd_head = d->next;
    if (!r->fwd_head) r->fwd_tail = NULL;
    r->fwd_len--;
    r->fwd_bytes -= PS_RING_ENTRY_BYTES(d->count);
    delta_free(d);
    return 1;
}

/* ------------------------------------------------------------------------
 * JOIN
 * ---------------------------------------------------------------------- */

int PSRing_Join(PSTensor *t, const char *origin, size_t len, const unsigned char *vals,
                const PSRingFrom *from, size_t nfrom, int keepown) {
    if (!PSRing_OriginValid(origin, len)) return -PS_RING_EORIGIN;
    if (t->optim == PS_OPT_ACCUM) return -PS_RING_EACCUM;
    if (t->n > PS_RING_MAX_ELEMS) return -PS_RING_EBIG;
    uint32_t bad = 0;
    for (uint64_t i = 0; i < t->n; i++) bad |= !isfinite(ld_f32(vals, i));
    if (bad) return -PS_RING_ENONFINITE;
    uint64_t own_seq = 0;
    size_t others = 0;
    for (size_t k = 0; k < nfrom; k++) {
        if (!PSRing_OriginValid(from[k].origin, from[k].len)) return -PS_RING_EORIGIN;
        if (from[k].seq > PS_RING_MAX_SEQ) return -PS_RING_ESEQ;
        for (size_t j = 0; j < k; j++)
            if (from[j].len == from[k].len && memcmp(from[j].origin, from[k].origin, from[k].len) == 0)
                return -PS_RING_EDUPFROM;
        if (from[k].len == len && memcmp(from[k].origin, origin, len) == 0) own_seq = from[k].seq;
        else others++;
    }
    if (others > PS_RING_MAX_ORIGINS) return -PS_RING_EORIGINS;
    /* KEEPOWN: the new base and values (2n floats), computed and checked
     * finite before anything changes. The pending take stays pending under
     * its seq (some group may have applied it already: dedup decides where
     * it still goes); it is in the new base when the neighbour lacks it. The
     * accumulated change (never taken) goes on top. */
    float *kept = NULL;
    if (keepown && t->ring) {
        PSRing *o = t->ring;
        const uint64_t n = t->n;
        if (!(kept = PSTensor_Alloc((size_t)(2 * n) * sizeof(float)))) return -PS_RING_EOOM;
        float *nb = kept, *nv = kept + n;
        for (uint64_t i = 0; i < n; i++) nb[i] = ld_f32(vals, i);
        if (o->pend && o->pend->seq > own_seq)
            for (uint64_t j = 0; j < o->pend->count; j++) nb[o->pend->idx[j]] += o->pend->val[j];
        for (uint64_t i = 0; i < n; i++) {
            nv[i] = nb[i] + (t->data->v[i] - o->base->v[i]);
            bad |= !isfinite(nb[i]) | !isfinite(nv[i]);
        }
        if (bad) {
            PSTensor_Dealloc(kept);
            return -PS_RING_ENONFINITE;
        }
    }
    PSRing *fresh = NULL;
    if (!t->ring && !(fresh = ring_new(t->n))) return -PS_RING_EOOM;
    if (data_writable(t) != PS_RING_OK) {
        PSRing_Free(fresh);
        if (kept) PSTensor_Dealloc(kept);
        return -PS_RING_EOOM;
    }
    /* Nothing can fail from here. */
    PSRing *r = fresh ? fresh : t->ring;
    if (kept) {
        memcpy(r->base->v, kept, (size_t)t->n * sizeof(float));
        memcpy(t->data->v, kept + t->n, (size_t)t->n * sizeof(float));
        PSTensor_Dealloc(kept); /* the pending take and the lag are kept */
    } else {
        memcpy(t->data->v, vals, (size_t)t->n * sizeof(float));
        memcpy(r->base->v, vals, (size_t)t->n * sizeof(float));
        delta_free(r->pend);
        r->pend = NULL;
        r->pend_own = 0;
        r->acked_own = r->own_pushes; /* the own change is dropped: nothing to wait for */
    }
    fwd_clear(r);
    r->norigins = 0;
    memset(r->origins, 0, sizeof(r->origins));
    for (size_t k = 0; k < nfrom; k++) {
        if (from[k].len == len && memcmp(from[k].origin, origin, len) == 0) continue;
        PSRingOrigin *e = &r->origins[r->norigins++];
        set_name(e->name, &e->len, from[k].origin, from[k].len);
        e->hwm = from[k].seq;
    }
    if (own_seq > r->take_seq) r->take_seq = own_seq;
    set_name(r->origin, &r->originlen, origin, len);
    t->ring = r;
    t->version++;
    t->stats.sets++;
    return PS_RING_OK;
}

/* ------------------------------------------------------------------------
 * Loading a saved state
 * ---------------------------------------------------------------------- */

int PSRing_LoadBegin(PSTensor *t, const char *origin, size_t len, uint64_t take_seq,
                     uint64_t maxqueue, uint64_t applied) {
    if (t->ring) return PS_RING_EOTHER;
    if (!PSRing_OriginValid(origin, len)) return PS_RING_EORIGIN;
    if (t->optim == PS_OPT_ACCUM) return PS_RING_EACCUM;
    if (t->n > PS_RING_MAX_ELEMS) return PS_RING_EBIG;
    if (maxqueue > PS_RING_MAX_MAXQUEUE) return PS_RING_ECOUNT;
    if (take_seq > PS_RING_MAX_SEQ) return PS_RING_ESEQ;
    PSRing *r = ring_new(t->n);
    if (!r) return PS_RING_EOOM;
    set_name(r->origin, &r->originlen, origin, len);
    r->take_seq = take_seq;
    r->maxqueue = maxqueue;
    r->applied = applied;
    t->ring = r;
    return PS_RING_OK;
}

int PSRing_LoadLag(PSTensor *t, uint64_t maxlag, uint64_t own_pushes, uint64_t acked_own,
                   uint64_t pend_own) {
    PSRing *r = t->ring;
    if (!r) return PS_RING_EUNTRACKED;
    if (maxlag > PS_RING_MAX_MAXLAG || acked_own > own_pushes || pend_own > own_pushes)
        return PS_RING_ECOUNT;
    r->maxlag = maxlag;
    r->own_pushes = own_pushes;
    r->acked_own = acked_own;
    r->pend_own = pend_own;
    return PS_RING_OK;
}

int PSRing_LoadOrigin(PSTensor *t, const char *name, size_t len, uint64_t hwm, uint64_t applied) {
    PSRing *r = t->ring;
    if (!r) return PS_RING_EUNTRACKED;
    if (!PSRing_OriginValid(name, len) || name_eq(r->origin, r->originlen, name, len) ||
        find_origin(r, name, len))
        return PS_RING_EORIGIN;
    if (r->norigins >= PS_RING_MAX_ORIGINS) return PS_RING_EORIGINS;
    if (hwm > PS_RING_MAX_SEQ) return PS_RING_ESEQ;
    PSRingOrigin *e = &r->origins[r->norigins++];
    memset(e, 0, sizeof(*e));
    set_name(e->name, &e->len, name, len);
    e->hwm = hwm;
    e->applied = applied;
    return PS_RING_OK;
}

int PSRing_LoadDelta(PSTensor *t, int pending, int more, const char *origin, size_t len,
                     uint64_t seq, uint64_t hops, const unsigned char *idx,
                     const unsigned char *val, uint64_t count) {
    PSRing *r = t->ring;
    if (!r) return PS_RING_EUNTRACKED;
    PSRingDelta *last = pending ? r->pend : r->fwd_tail;
    if (more) {
        /* The next piece of the delta begun last: same name, seq, hops. */
        if (!last || last->seq != seq || last->hops != hops ||
            !name_eq(last->origin, last->originlen, origin, len))
            return PS_RING_EINDEX;
    } else if (pending) {
        if (r->pend || seq < 1 || seq > r->take_seq || hops ||
            !name_eq(r->origin, r->originlen, origin, len))
            return PS_RING_EINDEX;
    } else if (!PSRing_OriginValid(origin, len) || hops >= PS_RING_MAX_HOPS ||
               name_eq(r->origin, r->originlen, origin, len) || seq < 1 || seq > PS_RING_MAX_SEQ) {
        return PS_RING_EORIGIN;
    }
    int st = PSRing_CheckDelta(t, idx, val, count);
    if (st != PS_RING_OK) return st;
    const uint64_t have = more ? last->count : 0;
    if (more && (have + count > t->n || ld_u32(idx, 0) <= last->idx[have - 1])) return PS_RING_EINDEX;
    PSRingDelta *d = delta_new(origin, len, seq, hops, have + count);
    if (!d) return PS_RING_EOOM;
    if (have) {
        memcpy(d->idx, last->idx, (size_t)have * 4);
        memcpy(d->val, last->val, (size_t)have * 4);
    }
    memcpy(d->idx + have, idx, (size_t)count * 4);
    memcpy(d->val + have, val, (size_t)count * 4);
    if (pending) {
        delta_free(r->pend);
        r->pend = d;
        return PS_RING_OK;
    }
    if (!more) {
        fwd_push(r, d);
        return PS_RING_OK;
    }
    /* Replace the tail by the grown copy. */
    r->fwd_bytes += PS_RING_ENTRY_BYTES(d->count) - PS_RING_ENTRY_BYTES(last->count);
    if (r->fwd_head == last) {
        r->fwd_head = r->fwd_tail = d;
    } else {
        PSRingDelta *p = r->fwd_head;
        while (p->next != last) p = p->next;
        p->next = d;
        r->fwd_tail = d;
    }
    delta_free(last);
    return PS_RING_OK;
}
