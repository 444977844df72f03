/* embed_io.c -- embedding tables: export scan, serialization, rebuild with
 * validation, deep copy and digest (see embed.h, layout in embed_int.h). */

#include "embed_int.h"

#include <math.h>

/* ------------------------------------------------------------------------
 * Export scan
 * ---------------------------------------------------------------------- */

/* The smallest hash whose home bucket is 'e' (0 < e < size). */
static uint64_t first_hash_of(uint64_t e, uint64_t size) {
    return (uint64_t)((((pse_u128)e << 64) + size - 1) / size);
}

/* The cursor is a hash value c: a call reports the rows whose id hash lies
 * in [c, next). Homes are monotone in the hash, so those rows sit in the
 * probe runs starting at buckets home(c) .. e-1; the scan walks from home(c)
 * until it is past e-1 and at an empty bucket (no run can continue). The
 * interval is fixed in hash space, not bucket space, so resizes and moves
 * between calls cannot make a row that stays present fall between two
 * intervals. */
uint64_t PSEmbed_Scan(const PSEmbed *t, uint64_t cursor, uint64_t count, uint64_t since,
                      PSEmbedScanFn fn, void *ud) {
    return PSEmbed_ScanGone(t, cursor, count, since, fn, NULL, ud);
}

/* A dead row (TTL) died at the push that made its age ttl: version
 * last_version + ttl (an age saturated at PSE_MAX_AGE can only make this
 * later, so such a row is reported rather than missed). */
uint64_t PSEmbed_ScanGone(const PSEmbed *t, uint64_t cursor, uint64_t count, uint64_t since,
                          PSEmbedScanFn fn, PSEmbedGoneFn gone, void *ud) {
    const uint64_t size = t->isize;
    const uint64_t b = pse_home(cursor, size);
    if (count == 0) count = 1;
    const uint64_t e = count >= size - b ? size : b + count;
    const uint64_t next = e == size ? 0 : first_hash_of(e, size);
    uint64_t p = b;
    for (uint64_t steps = 0; steps < size; steps++) {
        const uint32_t ent = t->index[p];
        if (!ent && (steps >= e - b)) break;
        if (ent) {
            const unsigned char *r = pse_rec(t, (uint64_t)(ent >> PSE_FP_BITS) - 1);
            const uint64_t h = pse_hash(t, pse_rec_id(r));
            if (h >= cursor && (next == 0 || h < next)) {
                if (!pse_dead(t, r)) {
                    if (pse_rec_ver(t, r) > since) {
                        PSEmbedRow row;
                        pse_fill_row(t, r, &row);
                        fn(ud, &row);
                    }
                } else if (gone && since && pse_rec_ver(t, r) + t->cfg.ttl > since) {
                    gone(ud, pse_rec_id(r), pse_rec_ver(t, r) + t->cfg.ttl);
                }
            }
        }
        p = p + 1 == size ? 0 : p + 1;
    }
    return next;
}

/* ------------------------------------------------------------------------
 * Serialization
 * ---------------------------------------------------------------------- */

void PSEmbed_RowAt(const PSEmbed *t, uint64_t i, PSEmbedRow *row) {
    pse_fill_row(t, pse_rec(t, i), row);
}

const uint8_t *PSEmbed_Filter(const PSEmbed *t, size_t *len) {
    *len = t->filter_len;
    return t->filter;
}

PSEmbed *PSEmbed_LoadBegin(const PSEmbedConfig *c, const PSEmbedState *st,
                           const uint8_t *filter, size_t filter_len, const char **err, int *rc) {
    const char *e = PSEmbed_CheckConfig(c);
    *rc = PSE_ERR_CORRUPT;
    if (!e && st->nrows > PSE_MAX_ROWS) e = "too many rows";
    if (!e && c->capacity && st->nrows > c->capacity) e = "more rows than CAPACITY";
    if (!e && st->nrows > 0 && st->version == 0) e = "rows without a push";
    /* No push count gets near 2^63; a version there could wrap to 0. */
    if (!e && st->version >= PSE_MAX_VERSION) e = "table version out of range";
    if (!e && st->sweep_pos > st->nrows) e = "sweep position beyond the rows";
    if (!e && st->tomb_horizon > st->version + 1) e = "tombstone horizon beyond the version";
    /* Nor does the count of removals (a count near 2^64 wraps on the next one,
     * and the log would then hold more entries than the count: fuzz_embed). */
    if (!e && st->tomb_total >= PSE_MAX_VERSION) e = "tombstone count out of range";
    if (!e && filter_len != (c->admit > 1 ? (size_t)1 << c->filter_log2 : 0))
        e = "admission filter of the wrong size";
    if (e) {
        *err = e;
        return NULL;
    }
    PSEmbed *t = PSEmbed_New(c, err);
    if (!t) {
        *rc = PSE_ERR_OOM;
        return NULL;
    }
    if (filter_len) memcpy(t->filter, filter, filter_len);
    t->version = st->version;
    t->sweep_pos = st->sweep_pos;
    t->stats = st->stats;
    t->tomb_horizon = st->tomb_horizon;
    t->tomb_total = st->tomb_total;
    t->load_rows = st->nrows;
    *rc = PSE_OK;
    return t;
}

/* Field rules of one serialized row; NULL when it is consistent. Every
 * state a push can produce is accepted: finite gradients can still
 * overflow values and state to +-Inf, and Inf - Inf to NaN, so values,
 * velocities, first moments and FTRL's z may hold any float; sums of
 * squares (row accumulator, Adagrad's, Adam's v, FTRL's n) only grow from
 * 0 by squares, so they are >= 0 or +Inf, never NaN. */
static const char *check_row(const PSEmbed *t, const PSEmbedRow *row) {
    const uint32_t dim = t->cfg.dim;
    const int opt = t->cfg.optim;
    if (row->last_version < 1 || row->last_version > t->version) return "row version out of range";
    /* pushes 0: a row a ring delta created (ring_table.h), never stepped
     * here: its optimizer state is still all zero. */
    if (row->pushes > row->last_version) return "row push count out of range";
    if (row->pushes == 0) {
        uint32_t nz = row->rowacc != 0;
        for (uint32_t i = dim; i < t->nfloats; i++) nz |= row->data[i] != 0;
        if (nz) return "optimizer state of a row never pushed";
    }
    if (!(row->rowacc >= 0)) return "row accumulator out of range";
    if (opt != PSE_OPT_ROWADAGRAD && row->rowacc != 0) return "row accumulator set";
    const float *s0 = row->data + dim, *s1 = row->data + 2 * (size_t)dim;
    for (uint32_t i = 0; i < dim; i++) {
        if (opt == PSE_OPT_ADAGRAD && !(s0[i] >= 0)) return "negative accumulator";
        if ((opt == PSE_OPT_ADAM || opt == PSE_OPT_FTRL) && !(s1[i] >= 0))
            return "negative second moment";
        if (opt == PSE_OPT_FTRL) {
            const float w = PSEmbed_FtrlWeight(&t->coef, s0[i], s1[i]);
            if (memcmp(&w, &row->data[i], sizeof(w)) != 0) return "FTRL value is not w(z, n)";
        }
    }
    return NULL;
}

int PSEmbed_LoadRow(PSEmbed *t, const PSEmbedRow *row, const char **err) {
    const char *e = NULL;
    if (t->nrows >= t->load_rows) e = "more rows than announced";
    if (!e) e = check_row(t, row);
    if (!e && pse_find(t, row->id) >= 0) e = "duplicate row id";
    if (e) {
        *err = e;
        return PSE_ERR_CORRUPT;
    }
    if (pse_reserve(t, t->nrows + 1) != PSE_OK) {
        *err = "out of memory";
        return PSE_ERR_OOM;
    }
    unsigned char *r = pse_append(t, row->id);
    /* A table saved by this code never holds a row older than this bound
     * (embed_int.h); an older one (a file of the 64-bit layout) is
     * saturated as the next pass would have done. */
    const uint64_t oldest = PSE_MAX_AGE + t->version % PSE_AGE_PASS;
    pse_rec_set_ver(r, t->version - row->last_version > oldest ? t->version - oldest
                                                              : row->last_version);
    pse_rec_set_pushes(r, row->pushes);
    float *acc = pse_rec_acc(t, r);
    if (acc) *acc = row->rowacc;
    memcpy(pse_rec_data(t, r), row->data, (size_t)t->nfloats * sizeof(float));
    return PSE_OK;
}

int PSEmbed_LoadTomb(PSEmbed *t, uint64_t id, uint64_t version, const char **err) {
    const char *e = NULL;
    uint64_t last_id, last = t->tomb_horizon;
    if (t->tomb_len) PSEmbed_TombAt(t, t->tomb_len - 1, &last_id, &last);
    if (t->tomb_len >= t->cfg.tombstones) e = "more tombstones than TOMBSTONES";
    else if (t->tomb_len >= t->tomb_total) e = "more tombstones than removals";
    else if (version < last || version > t->version + 1) e = "tombstone version out of order";
    if (e) {
        *err = e;
        return PSE_ERR_CORRUPT;
    }
    /* The total counts this entry already: append without counting it. */
    if (pse_tomb_reserve(t, 1) != PSE_OK) {
        *err = "out of memory";
        return PSE_ERR_OOM;
    }
    t->rm_version = version;
    pse_tomb_add(t, id);
    t->tomb_total--;
    return PSE_OK;
}

int PSEmbed_LoadEnd(PSEmbed *t, const char **err) {
    if (t->nrows != t->load_rows) {
        *err = "fewer rows than announced";
        return PSE_ERR_CORRUPT;
    }
    return PSE_OK;
}

/* ------------------------------------------------------------------------
 * Copy
 * ---------------------------------------------------------------------- */

PSEmbed *PSEmbed_Copy(const PSEmbed *t) {
    PSEmbedState st;
    PSEmbed_GetState(t, &st);
    const char *err;
    int rc;
    PSEmbed *c = PSEmbed_LoadBegin(&t->cfg, &st, t->filter, t->filter_len, &err, &rc);
    if (!c) return NULL;
    /* Same storage order, so the copy's digest equals the original's;
     * the index is rebuilt once at the final size. */
    if (pse_reserve(c, t->nrows) != PSE_OK) goto oom;
    for (uint64_t i = 0; i < t->nrows; i++) {
        unsigned char *r = pse_append(c, pse_rec_id(pse_rec(t, i)));
        memcpy(r, pse_rec(t, i), t->rec_bytes);
    }
    if (t->tomb_len && pse_tomb_reserve(c, t->tomb_len) != PSE_OK) goto oom;
    for (uint64_t i = 0; i < t->tomb_len; i++) {
        uint64_t id, ver;
        PSEmbed_TombAt(t, i, &id, &ver);
        uint64_t *e = c->tomb + 2 * c->tomb_len++;
        e[0] = id;
        e[1] = ver;
    }
    return c;
oom:
    PSEmbed_Free(c);
    return NULL;
}

/* ------------------------------------------------------------------------
 * Digest
 * ---------------------------------------------------------------------- */

static void add_u64(PSEmbedDigestFn add, void *ud, uint64_t v) { add(ud, &v, sizeof(v)); }
static void add_f64(PSEmbedDigestFn add, void *ud, double v) { add(ud, &v, sizeof(v)); }

void PSEmbed_Digest(const PSEmbed *t, PSEmbedDigestFn add, void *ud) {
    const PSEmbedConfig *c = &t->cfg;
    add(ud, "ps-embed", 8);
    const uint64_t ints[] = {c->dim, (uint64_t)c->optim, (uint64_t)c->init, c->seed,
                             (uint64_t)c->unknown_zeros, c->admit, c->filter_log2,
                             c->capacity, c->ttl};
    for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) add_u64(add, ud, ints[i]);
    /* Only when set: tables saved before the salt existed load with 0 and
     * keep the digests they had. */
    if (c->salt) add_u64(add, ud, c->salt);
    const double dbl[] = {c->lr, c->momentum, c->beta1, c->beta2, c->eps, c->alpha,
                          c->beta, c->l1, c->l2, c->init_a, c->init_b};
    for (size_t i = 0; i < sizeof(dbl) / sizeof(dbl[0]); i++) add_f64(add, ud, dbl[i]);
    const uint64_t st[] = {t->version, t->nrows, t->sweep_pos, t->stats.created,
                           t->stats.dropped, t->stats.evicted_ttl, t->stats.evicted_capacity,
                           t->stats.evicted_explicit};
    for (size_t i = 0; i < sizeof(st) / sizeof(st[0]); i++) add_u64(add, ud, st[i]);
    if (t->filter_len) add(ud, t->filter, t->filter_len);
    /* The tombstone log, unless nothing was ever logged and its size is
     * the default (all a table saved before the log existed can hold), so
     * that such tables keep the digests they had, also after pushes that
     * remove no row. The horizon is left out then: it is 0, or the version
     * an older encoding was loaded at (PSEmbed_Tombstones answers REBASE
     * for any SINCE up to it, which is the safe answer either way). */
    if (t->tomb_len || t->tomb_total || c->tombstones != PSE_DEFAULT_TOMBSTONES) {
        add(ud, "tombs", 5);
        const uint64_t tw[] = {c->tombstones, t->tomb_horizon, t->tomb_total, t->tomb_len};
        for (size_t i = 0; i < sizeof(tw) / sizeof(tw[0]); i++) add_u64(add, ud, tw[i]);
        for (uint64_t i = 0; i < t->tomb_len; i++) {
            uint64_t e[2];
            PSEmbed_TombAt(t, i, &e[0], &e[1]);
            add(ud, e, sizeof(e));
        }
    }
    /* Rows in the serialized form (id u64, last_version u64, pushes u32,
     * rowacc f32, floats), not the in-memory record, so the digest does
     * not depend on the memory layout. One 'add' per row, as a Redis
     * digest mixes each call as one element: rows bigger than the stack
     * buffer are assembled in an allocation; if that fails, header and
     * floats go as two elements (a digest of the same state that differs
     * from other nodes' only under OOM). */
    const size_t rowlen = 24 + (size_t)t->nfloats * sizeof(float);
    unsigned char stackbuf[4096];
    unsigned char *buf = rowlen <= sizeof(stackbuf) ? stackbuf : pse_alloc(NULL, rowlen);
    for (uint64_t i = 0; i < t->nrows; i++) {
        PSEmbedRow row;
        pse_fill_row(t, pse_rec(t, i), &row);
        unsigned char hdr[24];
        pse_st64(hdr, row.id);
        pse_st64(hdr + 8, row.last_version);
        memcpy(hdr + 16, &row.pushes, 4);
        memcpy(hdr + 20, &row.rowacc, 4);
        if (buf) {
            memcpy(buf, hdr, sizeof(hdr));
            memcpy(buf + sizeof(hdr), row.data, rowlen - sizeof(hdr));
            add(ud, buf, rowlen);
        } else {
            add(ud, hdr, sizeof(hdr));
            add(ud, row.data, rowlen - sizeof(hdr));
        }
    }
    if (buf != stackbuf) pse_free(NULL, buf, rowlen);
}

static void fnv_add(void *ud, const void *buf, size_t len) {
    uint64_t *h = ud;
    const unsigned char *p = buf;
    for (size_t i = 0; i < len; i++) {
        *h ^= p[i];
        *h *= 0x100000001b3ULL;
    }
}

uint64_t PSEmbed_Digest64(const PSEmbed *t) {
    uint64_t h = 0xcbf29ce484222325ULL;
    PSEmbed_Digest(t, fnv_add, &h);
    return h;
}
