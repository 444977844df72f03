/* ring_table_ser.c -- a ring-tracked table's state as bytes (ring_table.h:
 * PSRingTable_SerialSize / _Serialize / _Deserialize, and _Clone through
 * them): the one canonical layout the RDB, the AOF rewrite, the digest and
 * COPY use. Deserialize takes hostile bytes (RESTORE, a corrupt RDB) and
 * validates everything before it returns a state. */

#include "fpguard.h" /* first: determinism guards */
#include "ring_table_int.h"

#include <string.h>

#include "embed_int.h"

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
    PSRingRows *d = pst_rows_new(name, len, seq, hops, rows, rt->dim);
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
        if (!l || rd.bad || hwm > PS_RING_MAX_SEQ || pst_name_eq(r->origin, r->originlen, name, l))
            goto bad;
        for (uint32_t j = 0; j < r->norigins; j++)
            if (pst_name_eq(r->origins[j].name, r->origins[j].len, name, l)) goto bad;
        e = &r->origins[r->norigins++];
        pst_set_name(e->name, &e->len, name, l);
        e->hwm = hwm;
        e->applied = app;
    }
    const uint64_t n = r64(&rd);
    *why = "bad ring base map";
    if (rd.bad || n > rd.left / (8 + 4 * (uint64_t)dim)) goto bad;
    if (pst_map_reserve(r, n) != PS_RING_OK) {
        *why = "out of memory";
        goto bad;
    }
    for (uint64_t i = 0; i < n; i++) {
        const uint64_t id = r64(&rd);
        const unsigned char *b = rbytes(&rd, (uint64_t)dim * 4);
        if (rd.bad) goto bad;
        const uint64_t bk = pst_map_bucket(r, id);
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
            !pst_name_eq(r->pend->origin, r->pend->originlen, r->origin, r->originlen))
            goto bad;
    }
    const uint64_t nf = r64(&rd);
    *why = "bad ring forward entry";
    if (rd.bad) goto bad;
    for (uint64_t i = 0; i < nf; i++) {
        PSRingRows *d = rdelta(&rd, r, why);
        if (!d) goto bad;
        pst_fwd_push(r, d);
        *why = "bad ring forward entry";
        if (pst_name_eq(d->origin, d->originlen, r->origin, r->originlen)) goto bad;
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
    unsigned char *buf = pst_alloc(n);
    if (!buf) return NULL;
    PSRingTable_Serialize(r, buf);
    const char *why;
    PSRingTable *c = PSRingTable_Deserialize(t, buf, n, &why);
    pst_free(buf);
    return c;
}
