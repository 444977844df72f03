/* ring_table.c -- ring tracking state of an embedding table (see
 * ring_table.h). Reads rows through embed.h; the one write into rows (a
 * received delta added to them, rows created with their initial values)
 * uses the table layout (embed_int.h). No Redis calls. */

#include "fpguard.h" /* first: determinism guards */
#include "ring_table.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "embed_int.h"

/* ------------------------------------------------------------------------
 * Helpers
 * ---------------------------------------------------------------------- */

static void *rt_alloc(size_t n) { return pse_alloc(NULL, n); }
static void rt_free(void *p) { pse_free(NULL, p, 0); }

static int name_eq(const char *a, uint32_t alen, const char *b, size_t blen) {
    return alen == blen && memcmp(a, b, blen) == 0;
}
static void set_name(char *dst, uint32_t *dlen, const char *src, size_t len) {
    memcpy(dst, src, len);
    dst[len] = '\0';
    *dlen = (uint32_t)len;
}
static uint64_t ld64(const unsigned char *p, uint64_t i) {
    uint64_t x;
    memcpy(&x, p + 8 * i, 8);
    return x;
}
static float ldf(const unsigned char *p, uint64_t i) {
    float x;
    memcpy(&x, p + 4 * i, 4);
    return x;
}

/* The row's current values: the stored row, or its initial values in
 * 'scratch' when it does not exist (what a push or a delta creates it as). */
static const float *row_values(const PSEmbed *t, uint64_t id, float *scratch) {
    PSEmbedRow row;
    if (PSEmbed_Lookup(t, id, &row)) return row.data;
    PSEmbed_InitRow(PSEmbed_Config(t), id, scratch);
    return scratch;
}

/* The map's rows' slots in the table (-1: no row), looked up in one batch
 * (pse_lookup_ids prefetches): the take reads each row's values three times.
 * NULL on OOM. */
static int64_t *map_slots(const PSRingTable *r, const PSEmbed *t) {
    int64_t *slots = rt_alloc((size_t)(r->n ? r->n : 1) * sizeof(int64_t));
    if (slots && r->n) pse_lookup_ids(t, r->ids, (size_t)r->n, slots);
    return slots;
}

/* The values of the map's row at 'slot' (from map_slots), or its initial
 * values in 'scratch' (no row, or a dead one: as row_values). */
static const float *slot_values(const PSEmbed *t, int64_t slot, uint64_t id, float *scratch) {
    if (slot >= 0) {
        const unsigned char *rec = pse_rec(t, (uint64_t)slot);
        if (!pse_dead(t, rec)) return (const float *)(const void *)(rec + t->hdr_bytes);
    }
    PSEmbed_InitRow(&t->cfg, id, scratch);
    return scratch;
}

/* ------------------------------------------------------------------------
 * Deltas
 * ---------------------------------------------------------------------- */

static PSRingRows *rows_new(const char *origin, size_t len, uint64_t seq, uint64_t hops,
                            uint64_t rows, uint32_t dim) {
    if (rows > PS_RINGT_MAX_ROWS) return NULL;
    PSRingRows *d = rt_alloc(sizeof(*d));
    if (!d) return NULL;
    memset(d, 0, sizeof(*d));
    const size_t bytes = (size_t)rows * (8 + 4 * (size_t)dim);
    void *mem = rt_alloc(bytes);
    if (!mem) {
        rt_free(d);
        return NULL;
    }
    d->ids = mem;
    d->val = (float *)(void *)((unsigned char *)mem + (size_t)rows * 8);
    set_name(d->origin, &d->originlen, origin, len);
    d->seq = seq;
    d->hops = hops;
    d->rows = rows;
    d->dim = dim;
    return d;
}

static void rows_free(PSRingRows *d) {
    if (!d) return;
    rt_free(d->ids);
    rt_free(d);
}

static void fwd_push(PSRingTable *r, PSRingRows *d) {
    d->next = NULL;
    if (r->fwd_tail) r->fwd_tail->next = d;
    else r->fwd_head = d;
    r->fwd_tail = d;
    r->fwd_len++;
    r->fwd_bytes += PS_RINGT_ENTRY_BYTES(d->rows, d->dim);
}

/* ------------------------------------------------------------------------
 * The base map
 * ---------------------------------------------------------------------- */

static uint64_t map_hash(const PSRingTable *r, uint64_t id) { return PSEmbed_Mix64(id ^ r->salt); }

/* Index bucket holding position 'pos' + 1 for 'id', or of the empty bucket
 * that ends its probe run. */
static uint64_t map_bucket(const PSRingTable *r, uint64_t id) {
    const uint64_t mask = r->isize - 1;
    uint64_t p = map_hash(r, id) & mask;
    while (r->index[p] && r->ids[r->index[p] - 1] != id) p = (p + 1) & mask;
    return p;
}

static int64_t map_find(const PSRingTable *r, uint64_t id) {
    if (!r->n) return -1;
    const uint32_t e = r->index[map_bucket(r, id)];
    return e ? (int64_t)e - 1 : -1;
}

const float *PSRingTable_Base(const PSRingTable *r, uint64_t id) {
    const int64_t p = map_find(r, id);
    return p < 0 ? NULL : r->base + (size_t)p * r->dim;
}

static int map_rebuild(PSRingTable *r, uint64_t isize) {
    uint32_t *ni = rt_alloc((size_t)isize * sizeof(uint32_t));
    if (!ni) return PS_RING_EOOM;
    memset(ni, 0, (size_t)isize * sizeof(uint32_t));
    for (uint64_t i = 0; i < r->n; i++) {
        uint64_t p = map_hash(r, r->ids[i]) & (isize - 1);
        while (ni[p]) p = (p + 1) & (isize - 1);
        ni[p] = (uint32_t)(i + 1);
    }
    rt_free(r->index);
    r->index = ni;
    r->isize = isize;
    return PS_RING_OK;
}

/* Room for 'extra' more entries (arrays and index; nothing observable
 * changes). PS_RING_OK or PS_RING_EOOM. */
static int map_reserve(PSRingTable *r, uint64_t extra) {
    const uint64_t want = r->n + extra;
    if (want >= (1ull << 31)) return PS_RING_EOOM;
    if (want > r->cap) {
        uint64_t cap = r->cap ? r->cap : 16;
        while (cap < want) cap *= 2;
        uint64_t *ni = rt_alloc((size_t)cap * 8);
        float *nb = ni ? rt_alloc((size_t)cap * r->dim * sizeof(float)) : NULL;
        if (!nb) {
            rt_free(ni);
            return PS_RING_EOOM;
        }
        if (r->n) {
            memcpy(ni, r->ids, (size_t)r->n * 8);
            memcpy(nb, r->base, (size_t)r->n * r->dim * sizeof(float));
        }
        rt_free(r->ids);
        rt_free(r->base);
        r->ids = ni;
        r->base = nb;
        r->cap = cap;
    }
    if (2 * want >= r->isize) {
        uint64_t isize = r->isize ? r->isize : 32;
        while (2 * want >= isize) isize *= 2;
        if (map_rebuild(r, isize) != PS_RING_OK) return PS_RING_EOOM;
    }
    return PS_RING_OK;
}

/* Appends 'id' (not in the map; room reserved) whose empty bucket is 'b'. */
static void map_put_at(PSRingTable *r, uint64_t b, uint64_t id, const float *vals) {
    const uint64_t pos = r->n++;
    r->ids[pos] = id;
    memcpy(r->base + (size_t)pos * r->dim, vals, (size_t)r->dim * sizeof(float));
    r->index[b] = (uint32_t)(pos + 1);
}

/* Empties bucket i, shifting back the entries of its run that may move. */
static void map_index_delete(PSRingTable *r, uint64_t i) {
    const uint64_t mask = r->isize - 1;
    uint64_t j = i;
    for (;;) {
        j = (j + 1) & mask;
        const uint32_t e = r->index[j];
        if (!e) break;
        const uint64_t k = map_hash(r, r->ids[e - 1]) & mask;
        const int stays = (i <= j) ? (i < k && k <= j) : (i < k || k <= j);
        if (!stays) {
            r->index[i] = e;
            i = j;
        }
    }
    r->index[i] = 0;
}

/* Removes entry 'pos'; the last entry moves into the hole. */
static void map_remove(PSRingTable *r, uint64_t pos) {
    map_index_delete(r, map_bucket(r, r->ids[pos]));
    const uint64_t last = r->n - 1;
    if (pos != last) {
        const uint64_t b = map_bucket(r, r->ids[last]);
        r->ids[pos] = r->ids[last];
        memcpy(r->base + (size_t)pos * r->dim, r->base + (size_t)last * r->dim,
               (size_t)r->dim * sizeof(float));
        r->index[b] = (uint32_t)(pos + 1);
    }
    r->n--;
}

/* ------------------------------------------------------------------------
 * Lifecycle
 * ---------------------------------------------------------------------- */

int PSRingTable_CanTrack(const PSEmbed *t) {
    const PSEmbedConfig *c = PSEmbed_Config(t);
    if (c->capacity || c->ttl) return PS_RINGT_EEVICT;
    if (c->optim == PSE_OPT_FTRL) return PS_RINGT_EFTRL;
    return PS_RING_OK;
}

PSRingTable *PSRingTable_New(const PSEmbed *t, const char *origin, size_t len, uint64_t maxqueue,
                             int *st) {
    if (!PSRing_OriginValid(origin, len)) {
        *st = PS_RING_EORIGIN;
        return NULL;
    }
    if ((*st = PSRingTable_CanTrack(t)) != PS_RING_OK) return NULL;
    PSRingTable *r = rt_alloc(sizeof(*r));
    if (!r) {
        *st = PS_RING_EOOM;
        return NULL;
    }
    memset(r, 0, sizeof(*r));
    set_name(r->origin, &r->originlen, origin, len);
    r->dim = PSEmbed_Config(t)->dim;
    r->salt = PSEmbed_Config(t)->salt;
    r->maxqueue = maxqueue;
    if (map_reserve(r, 0) != PS_RING_OK) {
        rt_free(r);
        *st = PS_RING_EOOM;
        return NULL;
    }
    return r;
}

void PSRingTable_Free(PSRingTable *r) {
    if (!r) return;
    rt_free(r->ids);
    rt_free(r->base);
    rt_free(r->index);
    rows_free(r->pend);
    for (PSRingRows *d = r->fwd_head, *nx; d; d = nx) {
        nx = d->next;
        rows_free(d);
    }
    rt_free(r);
}

static size_t rows_bytes(const PSRingRows *d) {
    return sizeof(*d) + (size_t)d->rows * (8 + 4 * (size_t)d->dim);
}

size_t PSRingTable_MemUsage(const PSRingTable *r) {
    if (!r) return 0;
    size_t b = sizeof(*r) + (size_t)r->cap * (8 + 4 * (size_t)r->dim) + (size_t)r->isize * 4;
    if (r->pend) b += rows_bytes(r->pend);
    for (const PSRingRows *d = r->fwd_head; d; d = d->next) b += rows_bytes(d);
    return b;
}

/* ------------------------------------------------------------------------
 * Own pushes
 * ---------------------------------------------------------------------- */

int PSRingTable_BeforePush(PSRingTable *r, const PSEmbed *t, const unsigned char *ids, size_t k,
                           uint64_t *mark) {
    *mark = r->n;
    /* Room for every new id first (spare room changes nothing observable),
     * then one lookup per id. When the room for k more entries is there
     * already, that is all; else the new ids are counted first, so that a
     * large push to rows in the map allocates nothing. */
    float *scratch = rt_alloc((size_t)r->dim * sizeof(float));
    if (!scratch) return PS_RING_EOOM;
    if (r->cap - r->n < k || 2 * (r->n + k) >= r->isize) {
        uint64_t fresh = 0;
        for (size_t i = 0; i < k; i++) fresh += map_find(r, ld64(ids, i)) < 0;
        if (map_reserve(r, fresh) != PS_RING_OK) {
            rt_free(scratch);
            return PS_RING_EOOM;
        }
    }
    for (size_t i = 0; i < k; i++) {
        const uint64_t id = ld64(ids, i);
        const uint64_t b = map_bucket(r, id);
        if (!r->index[b]) map_put_at(r, b, id, row_values(t, id, scratch));
    }
    rt_free(scratch);
    return PS_RING_OK;
}

void PSRingTable_AfterPush(PSRingTable *r, int applied, uint64_t mark) {
    if (applied) {
        r->own_pushes++;
        return;
    }
    while (r->n > mark) map_remove(r, r->n - 1);
}

/* ------------------------------------------------------------------------
 * TAKE / ACK
 * ---------------------------------------------------------------------- */

typedef struct Cand {
    uint64_t key; /* ~|d| bits (selection), then unused */
    uint64_t id;
    uint64_t pos;
} Cand;

static int cmp_sel(const void *a, const void *b) {
    const Cand *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}
static int cmp_id(const void *a, const void *b) {
    const Cand *x = a, *y = b;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Removes every entry whose change is zero in every element (downwards, so
 * the entry moved into a hole was checked already, and slots[p] is still the
 * slot of entry p when it is read). */
static void purge_zero(PSRingTable *r, const PSEmbed *t, const int64_t *slots, float *scratch) {
    const uint32_t dim = r->dim;
    for (uint64_t p = r->n; p-- > 0;) {
        const float *v = slot_values(t, slots[p], r->ids[p], scratch);
        const float *b = r->base + (size_t)p * dim;
        uint32_t nz = 0;
        for (uint32_t j = 0; j < dim; j++) nz |= (v[j] - b[j]) != 0.0f;
        if (!nz) map_remove(r, p);
    }
}

uint64_t PSRingTable_Accumulated(const PSRingTable *r, const PSEmbed *t) {
    float *scratch = rt_alloc((size_t)r->dim * sizeof(float));
    int64_t *slots = scratch ? map_slots(r, t) : NULL;
    if (!slots) {
        rt_free(scratch);
        return 0;
    }
    uint64_t k = 0;
    for (uint64_t p = 0; p < r->n; p++) {
        const float *v = slot_values(t, slots[p], r->ids[p], scratch);
        const float *b = r->base + (size_t)p * r->dim;
        uint32_t nz = 0;
        for (uint32_t j = 0; j < r->dim; j++) nz |= (v[j] - b[j]) != 0.0f;
        k += nz;
    }
    rt_free(slots);
    rt_free(scratch);
    return k;
}

int PSRingTable_Take(PSRingTable *r, const PSEmbed *t, const PSRingTakeOpts *o) {
    if (r->pend) return PS_RING_TAKE_AGAIN;
    const uint32_t dim = r->dim;
    float *scratch = rt_alloc((size_t)dim * sizeof(float));
    Cand *c = scratch ? rt_alloc((size_t)(r->n ? r->n : 1) * sizeof(Cand)) : NULL;
    int64_t *slots = c ? map_slots(r, t) : NULL;
    if (!slots) {
        rt_free(c);
        rt_free(scratch);
        return -PS_RING_EOOM;
    }
    uint64_t nc = 0;
    for (uint64_t p = 0; p < r->n; p++) {
        const float *v = slot_values(t, slots[p], r->ids[p], scratch);
        const float *b = r->base + (size_t)p * dim;
        float top = -1.0f;
        for (uint32_t j = 0; j < dim; j++)
            if (PSRing_Significant(v[j], b[j], o->threshold) && fabsf(v[j] - b[j]) > top)
                top = fabsf(v[j] - b[j]);
        if (top < 0) continue;
        uint32_t bits;
        memcpy(&bits, &top, 4);
        c[nc].key = 0x7fffffffu - bits;
        c[nc].id = r->ids[p];
        c[nc].pos = p;
        nc++;
    }
    int ret;
    if (nc == 0) {
        if (r->acked_own == r->own_pushes) {
            ret = PS_RING_TAKE_NONE;
        } else {
            /* Nothing to send: every own push is as good as acknowledged. */
            r->acked_own = r->own_pushes;
            purge_zero(r, t, slots, scratch);
            ret = PS_RING_TAKE_NONE_CAUGHTUP;
        }
        goto out;
    }
    if (r->take_seq >= PS_RING_MAX_SEQ) {
        ret = -PS_RING_ESEQ;
        goto out;
    }
    uint64_t m = nc;
    if (o->maxelems && nc > o->maxelems) {
        qsort(c, (size_t)nc, sizeof(Cand), cmp_sel);
        m = o->maxelems;
    }
    qsort(c, (size_t)m, sizeof(Cand), cmp_id);
    const uint64_t seq = r->take_seq + 1 > o->seqfloor ? r->take_seq + 1 : o->seqfloor;
    PSRingRows *d = rows_new(r->origin, r->originlen, seq, 0, m, dim);
    if (!d) {
        ret = -PS_RING_EOOM;
        goto out;
    }
    /* Nothing can fail from here. */
    for (uint64_t k = 0; k < m; k++) {
        const float *v = slot_values(t, slots[c[k].pos], c[k].id, scratch);
        float *b = r->base + (size_t)c[k].pos * dim, *out = d->val + (size_t)k * dim;
        d->ids[k] = c[k].id;
        for (uint32_t j = 0; j < dim; j++) {
            if (PSRing_Significant(v[j], b[j], o->threshold)) {
                out[j] = v[j] - b[j];
                b[j] = v[j];
            } else {
                out[j] = 0.0f;
            }
        }
    }
    purge_zero(r, t, slots, scratch);
    r->pend = d;
    r->take_seq = seq;
    r->pend_own = r->own_pushes;
    ret = PS_RING_TAKE_NEW;
out:
    rt_free(slots);
    rt_free(c);
    rt_free(scratch);
    return ret;
}

int PSRingTable_Ack(PSRingTable *r, uint64_t seq) {
    if (!r->pend || r->pend->seq != seq) return 0;
    rows_free(r->pend);
    r->pend = NULL;
    if (r->pend_own > r->acked_own) r->acked_own = r->pend_own;
    r->pend_own = 0;
    return 1;
}

/* ------------------------------------------------------------------------
 * APPLY / FORWARD
 * ---------------------------------------------------------------------- */

int PSRingTable_CheckDelta(const PSRingTable *r, const unsigned char *ids, uint64_t rows,
                           const unsigned char *val, size_t vlen) {
    if (rows < 1 || rows > PS_RINGT_MAX_ROWS) return PS_RING_ECOUNT;
    if ((uint64_t)vlen != rows * r->dim * 4) return PS_RINGT_ESIZE;
    for (uint64_t k = 1; k < rows; k++)
        if (ld64(ids, k) <= ld64(ids, k - 1)) return PS_RING_EINDEX;
    uint32_t bad = 0;
    for (uint64_t k = 0; k < rows * r->dim; k++) bad |= !isfinite(ldf(val, k));
    return bad ? PS_RING_ENONFINITE : PS_RING_OK;
}

int PSRingTable_Apply(PSRingTable *r, PSEmbed *t, const char *origin, size_t len, uint64_t seq,
                      uint64_t prev, const unsigned char *ids, uint64_t rows,
                      const unsigned char *val, size_t vlen, uint64_t hops) {
    if (!PSRing_OriginValid(origin, len)) return -PS_RING_EORIGIN;
    if (seq < 1 || seq > PS_RING_MAX_SEQ || prev >= seq) return -PS_RING_ESEQ;
    int st = PSRingTable_CheckDelta(r, ids, rows, val, vlen);
    if (st != PS_RING_OK) return -st;
    PSRingOrigin *e;
    st = PSRing_Admit(r->origin, r->originlen, r->origins, r->norigins, origin, len, seq, prev, &e);
    if (st <= 0) return st;
    const uint32_t dim = r->dim;
    /* Slots of the rows (-1: absent, created) and the sums, checked finite
     * in values and in base before anything changes. */
    uint64_t *idv = rt_alloc((size_t)rows * 8);
    int64_t *slot = idv ? rt_alloc((size_t)rows * 8) : NULL;
    float *scratch = slot ? rt_alloc((size_t)dim * sizeof(float)) : NULL;
    PSRingRows *fe = NULL;
    int ret = -PS_RING_EOOM;
    if (!scratch) goto out;
    for (uint64_t k = 0; k < rows; k++) idv[k] = ld64(ids, k);
    pse_lookup_ids(t, idv, (size_t)rows, slot);
    uint64_t absent = 0;
    uint32_t bad = 0;
    for (uint64_t k = 0; k < rows; k++) {
        const float *v;
        if (slot[k] >= 0) {
            v = pse_rec_data(t, pse_rec(t, (uint64_t)slot[k]));
        } else {
            PSEmbed_InitRow(&t->cfg, idv[k], scratch);
            v = scratch;
            absent++;
        }
        const float *b = PSRingTable_Base(r, idv[k]);
        for (uint32_t j = 0; j < dim; j++) {
            const float x = ldf(val, k * dim + j);
            bad |= !isfinite(v[j] + x);
            if (b) bad |= !isfinite(b[j] + x);
        }
    }
    if (bad) {
        ret = -PS_RING_ENONFINITE;
        goto out;
    }
    if (hops > 0) {
        if (r->fwd_len && r->fwd_bytes + PS_RINGT_ENTRY_BYTES(rows, dim) > r->maxqueue) {
            ret = -PS_RING_BACKLOG;
            goto out;
        }
        if (!(fe = rows_new(origin, len, seq, hops - 1, rows, dim))) goto out;
        memcpy(fe->ids, ids, (size_t)rows * 8);
        memcpy(fe->val, val, vlen);
    }
    if (absent && (t->nrows + absent > PSE_MAX_ROWS || pse_reserve(t, t->nrows + absent) != PSE_OK)) {
        rows_free(fe);
        fe = NULL;
        goto out;
    }
    /* Nothing can fail from here. */
    t->version++;
    t->rm_version = t->version;
    if (t->version % PSE_AGE_PASS == 0) pse_saturate_ages(t);
    for (uint64_t k = 0; k < rows; k++) {
        unsigned char *rec;
        if (slot[k] >= 0) {
            rec = pse_rec(t, (uint64_t)slot[k]);
        } else {
            rec = pse_append(t, idv[k]); /* push count 0: no optimizer step yet */
            PSEmbed_InitRow(&t->cfg, idv[k], pse_rec_data(t, rec));
            t->stats.created++;
        }
        pse_rec_set_ver(rec, t->version);
        float *w = pse_rec_data(t, rec);
        float *b = (float *)PSRingTable_Base(r, idv[k]);
        for (uint32_t j = 0; j < dim; j++) {
            const float x = ldf(val, k * dim + j);
            w[j] = w[j] + x;
            if (b) b[j] = b[j] + x;
        }
    }
    PSRing_Record(r->origins, &r->norigins, e, origin, len, seq);
    r->applied++;
    if (fe) fwd_push(r, fe);
    ret = 1;
out:
    rt_free(scratch);
    rt_free(slot);
    rt_free(idv);
    return ret;
}

const PSRingRows *PSRingTable_FwdPeek(const PSRingTable *r) { return r->fwd_head; }

int PSRingTable_FwdAck(PSRingTable *r, const char *origin, size_t len, uint64_t seq) {
    PSRingRows *d = r->fwd_head;
    if (!d || d->seq != seq || !name_eq(d->origin, d->originlen, origin, len)) return 0;
    r->fwd_head = d->next;
    if (!r->fwd_head) r->fwd_tail = NULL;
    r->fwd_len--;
    r->fwd_bytes -= PS_RINGT_ENTRY_BYTES(d->rows, d->dim);
    rows_free(d);
    return 1;
}

/* ------------------------------------------------------------------------
 * JOIN of a table (ring_table.h)
 * ---------------------------------------------------------------------- */

const float *PSRingTable_BaseView(const PSRingTable *r, const PSEmbedRow *row) {
    const float *b = r ? PSRingTable_Base(r, row->id) : NULL;
    return b ? b : row->data;
}

int PSRingTable_JoinBegin(PSRingTable **rp, PSEmbed **tp, const char *origin, size_t len,
                          const PSRingFrom *from, size_t nfrom, uint64_t maxqueue) {
    if (!PSRing_OriginValid(origin, len)) return PS_RING_EORIGIN;
    PSEmbed *old = *tp;
    int st = PSRingTable_CanTrack(old);
    if (st != PS_RING_OK) return st;
    uint64_t own_seq = 0;
    size_t others = 0;
    for (size_t k = 0; k < nfrom; k++) {
        if (!PSRing_OriginValid(from[k].origin, from[k].len)) return PS_RING_EORIGIN;
        if (from[k].seq > PS_RING_MAX_SEQ) return PS_RING_ESEQ;
        for (size_t j = 0; j < k; j++)
            if (name_eq(from[j].origin, (uint32_t)from[j].len, from[k].origin, from[k].len))
                return PS_RING_EDUPFROM;
        if (name_eq(origin, (uint32_t)len, from[k].origin, from[k].len)) own_seq = from[k].seq;
        else others++;
    }
    if (others > PS_RING_MAX_ORIGINS) return PS_RING_EORIGINS;
    const char *err;
    PSEmbed *nt = PSEmbed_New(PSEmbed_Config(old), &err);
    if (!nt) return PS_RING_EOOM;
    PSRingTable *fresh = NULL;
    if (!*rp && !(fresh = PSRingTable_New(nt, origin, len, maxqueue, &st))) {
        PSEmbed_Free(nt);
        return st;
    }
    /* Nothing can fail from here. */
    PSRingTable *r = fresh ? fresh : *rp;
    nt->version = old->version + 1;
    nt->rm_version = nt->version;
    nt->tomb_horizon = nt->version; /* every row is gone at this version, unlogged */
    nt->tomb_total = old->tomb_total;
    r->n = 0;
    memset(r->index, 0, (size_t)r->isize * sizeof(uint32_t));
    rows_free(r->pend);
    r->pend = NULL;
    r->pend_own = 0;
    r->acked_own = r->own_pushes; /* the own change is dropped: nothing to wait for */
    for (PSRingRows *d = r->fwd_head, *nx; d; d = nx) {
        nx = d->next;
        rows_free(d);
    }
    r->fwd_head = r->fwd_tail = NULL;
    r->fwd_len = r->fwd_bytes = 0;
    r->norigins = 0;
    memset(r->origins, 0, sizeof(r->origins));
    for (size_t k = 0; k < nfrom; k++) {
        if (name_eq(origin, (uint32_t)len, from[k].origin, from[k].len)) continue;
        PSRingOrigin *e = &r->origins[r->norigins++];
        set_name(e->name, &e->len, from[k].origin, from[k].len);
        e->hwm = from[k].seq;
    }
    if (own_seq > r->take_seq) r->take_seq = own_seq;
    set_name(r->origin, &r->originlen, origin, len);
    r->joining = 1;
    r->join_rows = 0;
    PSEmbed_Free(old);
    *tp = nt;
    *rp = r;
    return PS_RING_OK;
}

int PSRingTable_JoinRows(PSRingTable *r, PSEmbed *t, uint64_t page, const unsigned char *ids,
                         uint64_t rows, const unsigned char *val, size_t vlen) {
    if (!r || !r->joining) return PS_RINGT_ENOJOIN;
    if (page != r->joining - 1) return PS_RINGT_EPAGE;
    int st = PSRingTable_CheckDelta(r, ids, rows, val, vlen);
    if (st != PS_RING_OK) return st;
    for (uint64_t k = 0; k < rows; k++)
        if (pse_find(t, ld64(ids, k)) >= 0) return PS_RINGT_EDUPROW;
    if (t->nrows + rows > PSE_MAX_ROWS || pse_reserve(t, t->nrows + rows) != PSE_OK)
        return PS_RING_EOOM;
    /* Nothing can fail from here. */
    t->version++;
    t->rm_version = t->version;
    if (t->version % PSE_AGE_PASS == 0) pse_saturate_ages(t);
    const uint32_t dim = r->dim;
    for (uint64_t k = 0; k < rows; k++) {
        unsigned char *rec = pse_append(t, ld64(ids, k)); /* push count 0, zero state */
        pse_rec_set_ver(rec, t->version);
        memcpy(pse_rec_data(t, rec), val + (size_t)k * dim * 4, (size_t)dim * 4);
        t->stats.created++;
    }
    r->joining++;
    r->join_rows += rows;
    return PS_RING_OK;
}

int PSRingTable_JoinEnd(PSRingTable *r, uint64_t pages, uint64_t rows) {
    if (!r || !r->joining) return PS_RINGT_ENOJOIN;
    if (pages != r->joining - 1 || rows != r->join_rows) return PS_RINGT_EPAGE;
    r->joining = 0;
    r->join_rows = 0;
    return PS_RING_OK;
}

/* ------------------------------------------------------------------------
 * Serialization
 * ---------------------------------------------------------------------- */

#define RT_MAGIC 0x54525350u /* "PSRT" little-endian */
#define RT_LAYOUT 1u      /* no JOIN in progress */
#define RT_LAYOUT_JOIN 2u /* layout 1 + joining, join_rows */

static size_t delta_size(const PSRingRows *d) {
    return 4 + d->originlen + 24 + (size_t)d->rows * (8 + 4 * (size_t)d->dim);
}

size_t PSRingTable_SerialSize(const PSRingTable *r) {
    size_t s = 12 + 4 + r->originlen + 7 * 8 + 8;
    for (uint32_t i = 0; i < r->norigins; i++) s += 4 + r->origins[i].len + 16;
    s += 8 + (size_t)r->n * (8 + 4 * (size_t)r->dim);
    s += 8 + (r->pend ? delta_size(r->pend) : 0);
    s += 8;
    for (const PSRingRows *d = r->fwd_head; d; d = d->next) s += delta_size(d);
    return s + (r->joining ? 16 : 0);
}

typedef struct W {
    unsigned char *p;
} W;
static void w32(W *w, uint32_t x) {
    memcpy(w->p, &x, 4);
    w->p += 4;
}
static void w64(W *w, uint64_t x) {
    memcpy(w->p, &x, 8);
    w->p += 8;
}
static void wbytes(W *w, const void *s, size_t n) {
    if (n) memcpy(w->p, s, n);
    w->p += n;
}
static void wdelta(W *w, const PSRingRows *d) {
    w32(w, d->originlen);
    wbytes(w, d->origin, d->originlen);
    w64(w, d->seq);
    w64(w, d->hops);
    w64(w, d->rows);
    wbytes(w, d->ids, (size_t)d->rows * 8);
    wbytes(w, d->val, (size_t)d->rows * d->dim * 4);
}

void PSRingTable_Serialize(const PSRingTable *r, unsigned char *out) {
    W w = {out};
    w32(&w, RT_MAGIC);
    w32(&w, r->joining ? RT_LAYOUT_JOIN : RT_LAYOUT);
    w32(&w, r->dim);
    w32(&w, r->originlen);
    wbytes(&w, r->origin, r->originlen);
    w64(&w, r->take_seq);
    w64(&w, r->maxqueue);
    w64(&w, r->applied);
    w64(&w, r->maxlag);
    w64(&w, r->own_pushes);
    w64(&w, r->acked_own);
    w64(&w, r->pend ? r->pend_own : 0);
    w64(&w, r->norigins);
    for (uint32_t i = 0; i < r->norigins; i++) {
        w32(&w, r->origins[i].len);
        wbytes(&w, r->origins[i].name, r->origins[i].len);
        w64(&w, r->origins[i].hwm);
        w64(&w, r->origins[i].applied);
    }
    w64(&w, r->n);
    for (uint64_t i = 0; i < r->n; i++) {
        w64(&w, r->ids[i]);
        wbytes(&w, r->base + (size_t)i * r->dim, (size_t)r->dim * 4);
    }
    w64(&w, r->pend ? 1 : 0);
    if (r->pend) wdelta(&w, r->pend);
    w64(&w, r->fwd_len);
    for (const PSRingRows *d = r->fwd_head; d; d = d->next) wdelta(&w, d);
    if (r->joining) {
        w64(&w, r->joining);
        w64(&w, r->join_rows);
    }
}

typedef struct Rd {
    const unsigned char *p;
    size_t left;
    int bad;
} Rd;
static uint32_t r32(Rd *r) {
    uint32_t x = 0;
    if (r->left < 4) r->bad = 1;
    else {
        memcpy(&x, r->p, 4);
        r->p += 4;
        r->left -= 4;
    }
    return x;
}
static uint64_t r64(Rd *r) {
    uint64_t x = 0;
    if (r->left < 8) r->bad = 1;
    else {
        memcpy(&x, r->p, 8);
        r->p += 8;
        r->left -= 8;
    }
    return x;
}
static const unsigned char *rbytes(Rd *r, uint64_t n) {
    if (r->bad || r->left < n) {
        r->bad = 1;
        return NULL;
    }
    const unsigned char *s = r->p;
    r->p += n;
    r->left -= n;
    return s;
}
/* A name of 1..PS_RING_ORIGIN_MAX valid bytes into buf; its length or 0. */
static size_t rname(Rd *r, char *buf) {
    const uint32_t len = r32(r);
    const unsigned char *s = len <= PS_RING_ORIGIN_MAX ? rbytes(r, len) : NULL;
    if (!s || !PSRing_OriginValid((const char *)s, len)) return 0;
    memcpy(buf, s, len);
    buf[len] = '\0';
    return len;
}
/* A delta: its rows checked as an apply checks them. NULL, *why set. */
static PSRingRows *rdelta(Rd *r, const PSRingTable *rt, const char **why) {
    char name[PS_RING_ORIGIN_MAX + 1];
    const size_t len = rname(r, name);
    const uint64_t seq = r64(r), hops = r64(r), rows = r64(r);
    *why = "bad ring delta";
    if (!len || r->bad || seq < 1 || seq > PS_RING_MAX_SEQ || hops >= PS_RING_MAX_HOPS ||
        rows < 1 || rows > PS_RINGT_MAX_ROWS || rows * (8 + 4 * (uint64_t)rt->dim) > r->left)
        return NULL;
    const unsigned char *ids = rbytes(r, rows * 8), *val = rbytes(r, rows * rt->dim * 4);
    if (PSRingTable_CheckDelta(rt, ids, rows, val, (size_t)rows * rt->dim * 4) != PS_RING_OK)
        return NULL;
    PSRingRows *d = rows_new(name, len, seq, hops, rows, rt->dim);
    if (!d) {
        *why = "out of memory";
        return NULL;
    }
    memcpy(d->ids, ids, (size_t)rows * 8);
    memcpy(d->val, val, (size_t)rows * rt->dim * 4);
    return d;
}

PSRingTable *PSRingTable_Deserialize(const PSEmbed *t, const unsigned char *p, size_t len,
                                     const char **why) {
    Rd rd = {p, len, 0};
    char name[PS_RING_ORIGIN_MAX + 1];
    const uint32_t magic = r32(&rd), layout = r32(&rd), dim = r32(&rd);
    *why = "bad ring state header";
    if (rd.bad || magic != RT_MAGIC || (layout != RT_LAYOUT && layout != RT_LAYOUT_JOIN) || dim != PSEmbed_Config(t)->dim)
        return NULL;
    const size_t olen = rname(&rd, name);
    if (!olen) return NULL;
    int st;
    uint64_t f[7];
    for (int i = 0; i < 7; i++) f[i] = r64(&rd);
    const uint64_t take_seq = f[0], maxqueue = f[1], applied = f[2], maxlag = f[3],
                   own_pushes = f[4], acked_own = f[5], pend_own = f[6];
    if (rd.bad || take_seq > PS_RING_MAX_SEQ || maxqueue > PS_RING_MAX_MAXQUEUE ||
        maxlag > PS_RING_MAX_MAXLAG || acked_own > own_pushes || pend_own > own_pushes)
        return NULL;
    PSRingTable *r = PSRingTable_New(t, name, olen, maxqueue, &st);
    if (!r) {
        *why = st == PS_RING_EOOM ? "out of memory" : "table cannot be ring-tracked";
        return NULL;
    }
    r->take_seq = take_seq;
    r->applied = applied;
    r->maxlag = maxlag;
    r->own_pushes = own_pushes;
    r->acked_own = acked_own;
    r->pend_own = pend_own;
    const uint64_t no = r64(&rd);
    *why = "bad ring origin";
    if (rd.bad || no > PS_RING_MAX_ORIGINS) goto bad;
    for (uint64_t i = 0; i < no; i++) {
        const size_t l = rname(&rd, name);
        const uint64_t hwm = r64(&rd), app = r64(&rd);
        PSRingOrigin *e;
        if (!l || rd.bad || hwm > PS_RING_MAX_SEQ || name_eq(r->origin, r->originlen, name, l))
            goto bad;
        for (uint32_t j = 0; j < r->norigins; j++)
            if (name_eq(r->origins[j].name, r->origins[j].len, name, l)) goto bad;
        e = &r->origins[r->norigins++];
        set_name(e->name, &e->len, name, l);
        e->hwm = hwm;
        e->applied = app;
    }
    const uint64_t n = r64(&rd);
    *why = "bad ring base map";
    if (rd.bad || n > rd.left / (8 + 4 * (uint64_t)dim)) goto bad;
    if (map_reserve(r, n) != PS_RING_OK) {
        *why = "out of memory";
        goto bad;
    }
    for (uint64_t i = 0; i < n; i++) {
        const uint64_t id = r64(&rd);
        const unsigned char *b = rbytes(&rd, (uint64_t)dim * 4);
        if (rd.bad) goto bad;
        const uint64_t bk = map_bucket(r, id);
        if (r->index[bk]) goto bad; /* a duplicate id */
        const uint64_t pos = r->n++;
        r->ids[pos] = id;
        memcpy(r->base + (size_t)pos * dim, b, (size_t)dim * 4); /* any alignment */
        r->index[bk] = (uint32_t)(pos + 1);
    }
    const uint64_t hasp = r64(&rd);
    *why = "bad ring pending take";
    if (rd.bad || hasp > 1 || (!hasp && pend_own)) goto bad;
    if (hasp) {
        if (!(r->pend = rdelta(&rd, r, why))) goto bad;
        *why = "bad ring pending take";
        if (r->pend->hops || r->pend->seq > take_seq ||
            !name_eq(r->pend->origin, r->pend->originlen, r->origin, r->originlen))
            goto bad;
    }
    const uint64_t nf = r64(&rd);
    *why = "bad ring forward entry";
    if (rd.bad) goto bad;
    for (uint64_t i = 0; i < nf; i++) {
        PSRingRows *d = rdelta(&rd, r, why);
        if (!d) goto bad;
        fwd_push(r, d);
        *why = "bad ring forward entry";
        if (name_eq(d->origin, d->originlen, r->origin, r->originlen)) goto bad;
    }
    if (layout == RT_LAYOUT_JOIN) {
        /* A JOIN in progress: the rows are the pages' rows, nothing else. */
        r->joining = r64(&rd);
        r->join_rows = r64(&rd);
        *why = "bad ring join state";
        if (rd.bad || r->joining < 1 || r->joining > PS_RING_MAX_SEQ ||
            r->join_rows != PSEmbed_Rows(t) || r->n || r->pend || r->fwd_len)
            goto bad;
    }
    *why = "trailing bytes after the ring state";
    if (rd.left) goto bad;
    return r;
bad:
    PSRingTable_Free(r);
    return NULL;
}

PSRingTable *PSRingTable_Clone(const PSRingTable *r, const PSEmbed *t) {
    const size_t n = PSRingTable_SerialSize(r);
    unsigned char *buf = rt_alloc(n);
    if (!buf) return NULL;
    PSRingTable_Serialize(r, buf);
    const char *why;
    PSRingTable *c = PSRingTable_Deserialize(t, buf, n, &why);
    rt_free(buf);
    return c;
}
