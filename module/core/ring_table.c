/* ring_table.c -- ring tracking state of an embedding table (see
 * ring_table.h). Reads rows through embed.h; the one write into rows (a
 * received delta added to them, rows created with their initial values)
 * uses the table layout (embed_int.h). No Redis calls. */

#include "fpguard.h" /* first: determinism guards */
#include "ring_table.h"
#include "ring_table_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "embed_int.h"

/* ------------------------------------------------------------------------
 * Helpers
 * ---------------------------------------------------------------------- */

void *pst_alloc(size_t n) { return pse_alloc(NULL, n); }
void pst_free(void *p) { pse_free(NULL, p, 0); }

int pst_name_eq(const char *a, uint32_t alen, const char *b, size_t blen) {
    return alen == blen && memcmp(a, b, blen) == 0;
}
void pst_set_name(char *dst, uint32_t *dlen, const char *src, size_t len) {
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
    int64_t *slots = pst_alloc((size_t)(r->n ? r->n : 1) * sizeof(int64_t));
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

PSRingRows *pst_rows_new(const char *origin, size_t len, uint64_t seq, uint64_t hops,
                         uint64_t rows, uint32_t dim) {
    if (rows > PS_RINGT_MAX_ROWS) return NULL;
    PSRingRows *d = pst_alloc(sizeof(*d));
    if (!d) return NULL;
    memset(d, 0, sizeof(*d));
    const size_t bytes = (size_t)rows * (8 + 4 * (size_t)dim);
    void *mem = pst_alloc(bytes);
    if (!mem) {
        pst_free(d);
        return NULL;
    }
    d->ids = mem;
    d->val = (float *)(void *)((unsigned char *)mem + (size_t)rows * 8);
    pst_set_name(d->origin, &d->originlen, origin, len);
    d->seq = seq;
    d->hops = hops;
    d->rows = rows;
    d->dim = dim;
    return d;
}

static void rows_free(PSRingRows *d) {
    if (!d) return;
    pst_free(d->ids);
    pst_free(d);
}

void pst_fwd_push(PSRingTable *r, PSRingRows *d) {
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
uint64_t pst_map_bucket(const PSRingTable *r, uint64_t id) {
    const uint64_t mask = r->isize - 1;
    uint64_t p = map_hash(r, id) & mask;
    while (r->index[p] && r->ids[r->index[p] - 1] != id) p = (p + 1) & mask;
    return p;
}

static int64_t map_find(const PSRingTable *r, uint64_t id) {
    if (!r->n) return -1;
    const uint32_t e = r->index[pst_map_bucket(r, id)];
    return e ? (int64_t)e - 1 : -1;
}

const float *PSRingTable_Base(const PSRingTable *r, uint64_t id) {
    const int64_t p = map_find(r, id);
    return p < 0 ? NULL : r->base + (size_t)p * r->dim;
}

static int map_rebuild(PSRingTable *r, uint64_t isize) {
    uint32_t *ni = pst_alloc((size_t)isize * sizeof(uint32_t));
    if (!ni) return PS_RING_EOOM;
    memset(ni, 0, (size_t)isize * sizeof(uint32_t));
    for (uint64_t i = 0; i < r->n; i++) {
        uint64_t p = map_hash(r, r->ids[i]) & (isize - 1);
        while (ni[p]) p = (p + 1) & (isize - 1);
        ni[p] = (uint32_t)(i + 1);
    }
    pst_free(r->index);
    r->index = ni;
    r->isize = isize;
    return PS_RING_OK;
}

/* Room for 'extra' more entries (arrays and index; nothing observable
 * changes). PS_RING_OK or PS_RING_EOOM. */
int pst_map_reserve(PSRingTable *r, uint64_t extra) {
    const uint64_t want = r->n + extra;
    if (want >= (1ull << 31)) return PS_RING_EOOM;
    if (want > r->cap) {
        uint64_t cap = r->cap ? r->cap : 16;
        while (cap < want) cap *= 2;
        uint64_t *ni = pst_alloc((size_t)cap * 8);
        float *nb = ni ? pst_alloc((size_t)cap * r->dim * sizeof(float)) : NULL;
        if (!nb) {
            pst_free(ni);
            return PS_RING_EOOM;
        }
        if (r->n) {
            memcpy(ni, r->ids, (size_t)r->n * 8);
            memcpy(nb, r->base, (size_t)r->n * r->dim * sizeof(float));
        }
        pst_free(r->ids);
        pst_free(r->base);
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
    map_index_delete(r, pst_map_bucket(r, r->ids[pos]));
    const uint64_t last = r->n - 1;
    if (pos != last) {
        const uint64_t b = pst_map_bucket(r, r->ids[last]);
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
    PSRingTable *r = pst_alloc(sizeof(*r));
    if (!r) {
        *st = PS_RING_EOOM;
        return NULL;
    }
    memset(r, 0, sizeof(*r));
    pst_set_name(r->origin, &r->originlen, origin, len);
    r->dim = PSEmbed_Config(t)->dim;
    r->salt = PSEmbed_Config(t)->salt;
    r->maxqueue = maxqueue;
    if (pst_map_reserve(r, 0) != PS_RING_OK) {
        pst_free(r);
        *st = PS_RING_EOOM;
        return NULL;
    }
    return r;
}

void PSRingTable_Free(PSRingTable *r) {
    if (!r) return;
    pst_free(r->ids);
    pst_free(r->base);
    pst_free(r->index);
    rows_free(r->pend);
    for (PSRingRows *d = r->fwd_head, *nx; d; d = nx) {
        nx = d->next;
        rows_free(d);
    }
    pst_free(r);
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
    float *scratch = pst_alloc((size_t)r->dim * sizeof(float));
    if (!scratch) return PS_RING_EOOM;
    if (r->cap - r->n < k || 2 * (r->n + k) >= r->isize) {
        uint64_t fresh = 0;
        for (size_t i = 0; i < k; i++) fresh += map_find(r, ld64(ids, i)) < 0;
        if (pst_map_reserve(r, fresh) != PS_RING_OK) {
            pst_free(scratch);
            return PS_RING_EOOM;
        }
    }
    for (size_t i = 0; i < k; i++) {
        const uint64_t id = ld64(ids, i);
        const uint64_t b = pst_map_bucket(r, id);
        if (!r->index[b]) map_put_at(r, b, id, row_values(t, id, scratch));
    }
    pst_free(scratch);
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
    float *scratch = pst_alloc((size_t)r->dim * sizeof(float));
    int64_t *slots = scratch ? map_slots(r, t) : NULL;
    if (!slots) {
        pst_free(scratch);
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
    pst_free(slots);
    pst_free(scratch);
    return k;
}

int PSRingTable_Take(PSRingTable *r, const PSEmbed *t, const PSRingTakeOpts *o) {
    if (r->pend) return PS_RING_TAKE_AGAIN;
    const uint32_t dim = r->dim;
    float *scratch = pst_alloc((size_t)dim * sizeof(float));
    Cand *c = scratch ? pst_alloc((size_t)(r->n ? r->n : 1) * sizeof(Cand)) : NULL;
    int64_t *slots = c ? map_slots(r, t) : NULL;
    if (!slots) {
        pst_free(c);
        pst_free(scratch);
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
    PSRingRows *d = pst_rows_new(r->origin, r->originlen, seq, 0, m, dim);
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
    pst_free(slots);
    pst_free(c);
    pst_free(scratch);
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
    uint64_t *idv = pst_alloc((size_t)rows * 8);
    int64_t *slot = idv ? pst_alloc((size_t)rows * 8) : NULL;
    float *scratch = slot ? pst_alloc((size_t)dim * sizeof(float)) : NULL;
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
        if (!(fe = pst_rows_new(origin, len, seq, hops - 1, rows, dim))) goto out;
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
    if (fe) pst_fwd_push(r, fe);
    ret = 1;
out:
    pst_free(scratch);
    pst_free(slot);
    pst_free(idv);
    return ret;
}

const PSRingRows *PSRingTable_FwdPeek(const PSRingTable *r) { return r->fwd_head; }

int PSRingTable_FwdAck(PSRingTable *r, const char *origin, size_t len, uint64_t seq) {
    PSRingRows *d = r->fwd_head;
    if (!d || d->seq != seq || !pst_name_eq(d->origin, d->originlen, origin, len)) return 0;
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
            if (pst_name_eq(from[j].origin, (uint32_t)from[j].len, from[k].origin, from[k].len))
                return PS_RING_EDUPFROM;
        if (pst_name_eq(origin, (uint32_t)len, from[k].origin, from[k].len)) own_seq = from[k].seq;
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
        if (pst_name_eq(origin, (uint32_t)len, from[k].origin, from[k].len)) continue;
        PSRingOrigin *e = &r->origins[r->norigins++];
        pst_set_name(e->name, &e->len, from[k].origin, from[k].len);
        e->hwm = from[k].seq;
    }
    if (own_seq > r->take_seq) r->take_seq = own_seq;
    pst_set_name(r->origin, &r->originlen, origin, len);
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
