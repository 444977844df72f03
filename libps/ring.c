/* ring.c -- the ring's commands (ps.h "Ring"): PS.RING TRACK / STATE /
 * JOIN, PS.DELTATAKE, PS.DELTAACK, PS.APPLYDELTA, PS.DELTAFWD and
 * PS.DELTAFWDACK. Each call encodes its command with wire.c's encoder,
 * sends it routed by the key through the engine (retries, redirects) and
 * checks the reply's shape against the sizes it was given. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_internal.h"
#include "raw.h"
#include "wire.h"

/* Encodes with 'call' twice (length, then into the buffer) into *cmd. */
#define RING_ENCODE(cmd, len, call)                                                          \
    do {                                                                                     \
        char *buf = NULL;                                                                    \
        size_t cap = 0;                                                                      \
        (len) = call;                                                                        \
        if ((buf = malloc((len) ? (len) : 1)) != NULL) {                                     \
            cap = (len);                                                                     \
            (len) = call;                                                                    \
        }                                                                                    \
        (cmd) = buf;                                                                         \
    } while (0)

/* Sends 'cmd' (malloc'd, freed here) routed by 'key'. Returns the reply, or
 * NULL with c->err set; an error reply is turned into NULL + PS_ERR_SERVER. */
static redisReply *ring_send(psClient *c, const char *key, char *cmd, size_t len) {
    if (!cmd) {
        psi_set_error(c, PS_ERR_OOM, "out of memory");
        return NULL;
    }
    psRawReq q;
    psi_raw_init(&q, key, cmd, len);
    psi_raw_run(c, &q, 1);
    free(cmd);
    redisReply *r = q.reply;
    if (!r) {
        if (!c->err) psi_set_error(c, PS_ERR_OTHER, "no reply to %s", key);
        return NULL;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        psi_set_error(c, PS_ERR_SERVER, "%s", r->str);
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

static int is_int(const redisReply *r) { return r && r->type == REDIS_REPLY_INTEGER; }
static int is_str(const redisReply *r) { return r && r->type == REDIS_REPLY_STRING; }

static int bad_reply(psClient *c, redisReply *r, const char *cmd) {
    psi_set_error(c, PS_ERR_PROTOCOL, "unexpected PS.%s reply", cmd);
    if (r) freeReplyObject(r);
    return PS_ERR;
}

/* An integer reply of 0 or 1 as the call's answer. */
static int zero_one(psClient *c, redisReply *r, const char *cmd) {
    if (!r) return PS_ERR;
    if (!is_int(r) || (r->integer != 0 && r->integer != 1)) return bad_reply(c, r, cmd);
    int v = (int)r->integer;
    freeReplyObject(r);
    return v;
}

static int name_ok(const char *s) { return s && *s && strlen(s) <= PS_RING_ORIGIN_MAX; }

static int copy_name(char *dst, const redisReply *v) {
    if (!is_str(v) && (!v || v->type != REDIS_REPLY_STATUS)) return -1;
    if (v->len < 1 || v->len > PS_RING_ORIGIN_MAX || memchr(v->str, 0, v->len)) return -1;
    memcpy(dst, v->str, v->len);
    dst[v->len] = '\0';
    return 0;
}

int psi_ring_origins(const redisReply *v, psRingOrigin *rows, size_t *n) {
    *n = 0;
    if (!v || v->type != REDIS_REPLY_ARRAY || v->elements > PS_RING_MAX_ORIGINS) return -1;
    for (size_t i = 0; i < v->elements; i++) {
        const redisReply *e = v->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements != 3 || !is_int(e->element[1]) ||
            !is_int(e->element[2]) || e->element[1]->integer < 0 || e->element[2]->integer < 0 ||
            copy_name(rows[i].name, e->element[0]))
            return -1;
        rows[i].hwm = (uint64_t)e->element[1]->integer;
        rows[i].applied = (uint64_t)e->element[2]->integer;
    }
    *n = v->elements;
    return 0;
}

int psRingTrack(psClient *c, const char *key, const char *origin, int64_t maxqueue,
                int64_t maxlag) {
    psi_clear_error(c);
    if (!key || !name_ok(origin)) {
        psi_set_error(c, PS_ERR_ARG, "psRingTrack needs a key and an origin of 1..%d bytes",
                      PS_RING_ORIGIN_MAX);
        return PS_ERR;
    }
    psWireRing a = {key,  strlen(key), PS_WIRE_RING_TRACK, origin, maxqueue, maxlag, NULL, 0,
                    NULL, NULL, 0, 0, 0, 0, NULL, 0};
    char *cmd;
    size_t len;
    RING_ENCODE(cmd, len, ps_wire_ring(&a, buf, cap));
    return zero_one(c, ring_send(c, key, cmd, len), "RING TRACK");
}

int psRingUntrack(psClient *c, const char *key) {
    psi_clear_error(c);
    if (!key) {
        psi_set_error(c, PS_ERR_ARG, "psRingUntrack needs a key");
        return PS_ERR;
    }
    psWireRing a = {key, strlen(key), PS_WIRE_RING_UNTRACK, NULL, -1, -1, NULL, 0, NULL, NULL, 0, 0, 0, 0, NULL, 0};
    char *cmd;
    size_t len;
    RING_ENCODE(cmd, len, ps_wire_ring(&a, buf, cap));
    return zero_one(c, ring_send(c, key, cmd, len), "RING UNTRACK");
}

int psRingState(psClient *c, const char *key, size_t n, psRingSnapshot *out) {
    psi_clear_error(c);
    memset(out, 0, sizeof(*out));
    if (!key) {
        psi_set_error(c, PS_ERR_ARG, "psRingState needs a key");
        return PS_ERR;
    }
    psWireRing a = {key, strlen(key), PS_WIRE_RING_STATE, NULL, -1, -1, NULL, 0, NULL, NULL, 0, 0, 0, 0, NULL, 0};
    char *cmd;
    size_t len;
    RING_ENCODE(cmd, len, ps_wire_ring(&a, buf, cap));
    redisReply *r = ring_send(c, key, cmd, len);
    if (!r) return PS_ERR;
    /* A table answers no copy (nil): its rows are paged with psRingRows. */
    const int nocopy = r->type == REDIS_REPLY_ARRAY && r->elements == 4 &&
                       r->element[0]->type == REDIS_REPLY_NIL && n == 0;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 4 || (!nocopy && !is_str(r->element[0])) ||
        (!nocopy && r->element[0]->len % sizeof(float)) ||
        (n && r->element[0]->len != n * sizeof(float)) ||
        !is_int(r->element[1]) || r->element[1]->integer < 0 ||
        (r->element[2]->type != REDIS_REPLY_NIL && copy_name(out->origin, r->element[2])) ||
        psi_ring_origins(r->element[3], out->origins, &out->norigins) != 0)
        return bad_reply(c, r, "RING STATE");
    out->n = nocopy ? 0 : r->element[0]->len / sizeof(float);
    out->version = (uint64_t)r->element[1]->integer;
    out->values = malloc(out->n ? out->n * sizeof(float) : 1);
    if (!out->values) {
        freeReplyObject(r);
        psi_set_error(c, PS_ERR_OOM, "out of memory");
        return PS_ERR;
    }
    memcpy(out->values, r->element[0]->str, out->n * sizeof(float));
    freeReplyObject(r);
    return PS_OK;
}

void psRingStateFree(psRingSnapshot *s) {
    if (!s) return;
    free(s->values);
    s->values = NULL;
    s->n = 0;
}

int psRingJoin(psClient *c, const char *key, const char *origin, const float *values, size_t n,
               const psRingOrigin *from, size_t nfrom, int keepown) {
    psi_clear_error(c);
    if (!key || !name_ok(origin) || !values || n == 0 || nfrom > PS_RING_MAX_ORIGINS ||
        (nfrom && !from)) {
        psi_set_error(c, PS_ERR_ARG, "psRingJoin needs a key, an origin, values and at most %d "
                      "origins", PS_RING_MAX_ORIGINS);
        return PS_ERR;
    }
    const char *names[PS_RING_MAX_ORIGINS];
    uint64_t seqs[PS_RING_MAX_ORIGINS];
    for (size_t i = 0; i < nfrom; i++) {
        names[i] = from[i].name;
        seqs[i] = from[i].hwm;
    }
    psWireRing a = {key,   strlen(key), PS_WIRE_RING_JOIN, origin, -1, -1, values, n, names,
                    seqs,  nfrom,       keepown != 0, 0, 0, NULL, 0};
    char *cmd;
    size_t len;
    RING_ENCODE(cmd, len, ps_wire_ring(&a, buf, cap));
    redisReply *r = ring_send(c, key, cmd, len);
    if (!r) return PS_ERR;
    if (!is_int(r)) return bad_reply(c, r, "RING JOIN");
    freeReplyObject(r);
    return PS_OK;
}

int psRingRows(psClient *c, const char *key, uint32_t dim, uint64_t cursor, uint64_t count,
               psRingPage *out) {
    psi_clear_error(c);
    memset(out, 0, sizeof(*out));
    if (!key || !dim || !count) {
        psi_set_error(c, PS_ERR_ARG, "psRingRows needs a key, a dim and a count");
        return PS_ERR;
    }
    psWireRing a = {key, strlen(key), PS_WIRE_RING_ROWS, NULL, -1, -1, NULL, 0, NULL, NULL, 0, 0,
                    cursor, count, NULL, 0};
    char *cmd;
    size_t len;
    RING_ENCODE(cmd, len, ps_wire_ring(&a, buf, cap));
    redisReply *r = ring_send(c, key, cmd, len);
    if (!r) return PS_ERR;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 || !is_str(r->element[0]) ||
        !is_str(r->element[1]) || !is_str(r->element[2]) || r->element[1]->len % 8 ||
        r->element[2]->len != r->element[1]->len / 8 * dim * sizeof(float))
        return bad_reply(c, r, "RING ROWS");
    char *end = NULL;
    out->next = strtoull(r->element[0]->str, &end, 10);
    out->rows = r->element[1]->len / 8;
    out->ids = malloc(out->rows ? out->rows * 8 : 1);
    out->vals = malloc(out->rows ? out->rows * dim * sizeof(float) : 1);
    if (!out->ids || !out->vals) {
        freeReplyObject(r);
        psRingPageFree(out);
        psi_set_error(c, PS_ERR_OOM, "out of memory");
        return PS_ERR;
    }
    memcpy(out->ids, r->element[1]->str, out->rows * 8);
    memcpy(out->vals, r->element[2]->str, out->rows * dim * sizeof(float));
    for (size_t i = 1; i < out->rows; i++)
        if (out->ids[i] <= out->ids[i - 1]) {
            psRingPageFree(out);
            return bad_reply(c, r, "RING ROWS");
        }
    freeReplyObject(r);
    return PS_OK;
}

void psRingPageFree(psRingPage *p) {
    if (!p) return;
    free(p->ids);
    free(p->vals);
    memset(p, 0, sizeof(*p));
}

int psRingJoinBegin(psClient *c, const char *key, const char *origin, const psRingOrigin *from,
                    size_t nfrom) {
    psi_clear_error(c);
    if (!key || !name_ok(origin) || nfrom > PS_RING_MAX_ORIGINS || (nfrom && !from)) {
        psi_set_error(c, PS_ERR_ARG, "psRingJoinBegin needs a key, an origin and at most %d "
                      "origins", PS_RING_MAX_ORIGINS);
        return PS_ERR;
    }
    const char *names[PS_RING_MAX_ORIGINS];
    uint64_t seqs[PS_RING_MAX_ORIGINS];
    for (size_t i = 0; i < nfrom; i++) {
        names[i] = from[i].name;
        seqs[i] = from[i].hwm;
    }
    psWireRing a = {key, strlen(key), PS_WIRE_RING_JOINBEGIN, origin, -1, -1, NULL, 0, names,
                    seqs, nfrom, 0, 0, 0, NULL, 0};
    char *cmd;
    size_t len;
    RING_ENCODE(cmd, len, ps_wire_ring(&a, buf, cap));
    return zero_one(c, ring_send(c, key, cmd, len), "RING JOINBEGIN") == 1 ? PS_OK : PS_ERR;
}

int psRingJoinRows(psClient *c, const char *key, uint64_t page, const uint64_t *ids,
                   const float *vals, size_t rows, uint32_t dim) {
    psi_clear_error(c);
    if (!key || !ids || !vals || !rows || !dim) {
        psi_set_error(c, PS_ERR_ARG, "psRingJoinRows needs a key, rows and a dim");
        return PS_ERR;
    }
    psWireRing a = {key, strlen(key), PS_WIRE_RING_JOINROWS, NULL, -1, -1, vals, rows * dim, NULL,
                    NULL, 0, 0, page, 0, ids, rows};
    char *cmd;
    size_t len;
    RING_ENCODE(cmd, len, ps_wire_ring(&a, buf, cap));
    redisReply *r = ring_send(c, key, cmd, len);
    if (!r) return PS_ERR;
    if (!is_int(r) || r->integer < (long long)rows) return bad_reply(c, r, "RING JOINROWS");
    freeReplyObject(r);
    return PS_OK;
}

int psRingJoinEnd(psClient *c, const char *key, uint64_t pages, uint64_t rows) {
    psi_clear_error(c);
    if (!key) {
        psi_set_error(c, PS_ERR_ARG, "psRingJoinEnd needs a key");
        return PS_ERR;
    }
    psWireRing a = {key, strlen(key), PS_WIRE_RING_JOINEND, NULL, -1, -1, NULL, 0, NULL, NULL, 0,
                    0, pages, rows, NULL, 0};
    char *cmd;
    size_t len;
    RING_ENCODE(cmd, len, ps_wire_ring(&a, buf, cap));
    return zero_one(c, ring_send(c, key, cmd, len), "RING JOINEND") == 1 ? PS_OK : PS_ERR;
}

/* Checks 'count' ascending indices < n and the blobs' sizes. */
static int delta_ok(const redisReply *ib, const redisReply *vb, uint64_t count, size_t n) {
    if (!is_str(ib) || !is_str(vb) || count < 1 || count > n ||
        ib->len != count * sizeof(uint32_t) || vb->len != count * sizeof(float))
        return 0;
    uint32_t prev = 0;
    for (uint64_t i = 0; i < count; i++) {
        uint32_t x;
        memcpy(&x, ib->str + i * sizeof(x), sizeof(x));
        if (x >= n || (i && x <= prev)) return 0;
        prev = x;
    }
    /* The blobs are bulk strings in hiredis buffers: malloc'd, so aligned
     * for uint32_t and float. */
    return 1;
}

/* Where a reply's two delta blobs are checked and pointed at: a tensor's
 * ('dim' 0: u32 element indices < n) or a table's ('dim' floats per row:
 * u64 row ids). */
static int blobs_ok(const redisReply *ib, const redisReply *vb, uint64_t count, size_t n,
                    uint32_t dim);
static void set_blobs(psDelta *out, const redisReply *ib, const redisReply *vb, uint64_t count,
                      uint32_t dim) {
    out->count = count;
    if (dim) out->ids = (const uint64_t *)(const void *)ib->str;
    else out->idx = (const uint32_t *)(const void *)ib->str;
    out->vals = (const float *)(const void *)vb->str;
    out->dim = dim;
}

/* PS.DELTATAKE of a tensor (dim 0, n elements) or a table (dim > 0). */
static int delta_take(psClient *c, const char *key, size_t n, uint32_t dim, uint64_t seqfloor,
                      double threshold, uint64_t maxelems, psDelta *out) {
    char *cmd;
    size_t len;
    RING_ENCODE(cmd, len,
                ps_wire_delta_take(key, strlen(key), seqfloor, threshold, maxelems, buf, cap));
    redisReply *r = ring_send(c, key, cmd, len);
    if (!r) return PS_ERR;
    if (is_int(r) && r->integer == 0) {
        freeReplyObject(r);
        return 0;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 5 || !is_int(r->element[0]) ||
        !is_int(r->element[1]) || !is_int(r->element[4]) || r->element[0]->integer < 1 ||
        r->element[4]->integer < 0 || r->element[1]->integer < 1 ||
        !blobs_ok(r->element[2], r->element[3], (uint64_t)r->element[1]->integer, n, dim))
        return bad_reply(c, r, "DELTATAKE");
    out->seq = (uint64_t)r->element[0]->integer;
    set_blobs(out, r->element[2], r->element[3], (uint64_t)r->element[1]->integer, dim);
    out->accumulated = (uint64_t)r->element[4]->integer;
    out->priv_ = r;
    return 1;
}

/* PS.DELTAFWD of a tensor (dim 0, n elements) or a table (dim > 0). */
static int delta_fwd(psClient *c, const char *key, size_t n, uint32_t dim, psDelta *out) {
    char *cmd;
    size_t len;
    RING_ENCODE(cmd, len, ps_wire_delta_fwd(key, strlen(key), buf, cap));
    redisReply *r = ring_send(c, key, cmd, len);
    if (!r) return PS_ERR;
    if (r->type == REDIS_REPLY_NIL) {
        freeReplyObject(r);
        return 0;
    }
    const size_t isz = dim ? sizeof(uint64_t) : sizeof(uint32_t);
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 5 || copy_name(out->origin, r->element[0]) ||
        !is_int(r->element[1]) || !is_int(r->element[2]) || r->element[1]->integer < 1 ||
        r->element[2]->integer < 0 || !is_str(r->element[3]) ||
        !blobs_ok(r->element[3], r->element[4], r->element[3]->len / isz, n, dim))
        return bad_reply(c, r, "DELTAFWD");
    out->seq = (uint64_t)r->element[1]->integer;
    out->hops = (uint64_t)r->element[2]->integer;
    set_blobs(out, r->element[3], r->element[4], r->element[3]->len / isz, dim);
    out->priv_ = r;
    return 1;
}

int psDeltaTake(psClient *c, const char *key, size_t n, uint64_t seqfloor, double threshold,
                uint64_t maxelems, psDelta *out) {
    psi_clear_error(c);
    psDeltaRelease(out);
    memset(out, 0, sizeof(*out));
    if (!key || n == 0 || !(threshold >= 0)) {
        psi_set_error(c, PS_ERR_ARG, "psDeltaTake needs a key, n > 0 and a threshold >= 0");
        return PS_ERR;
    }
    return delta_take(c, key, n, 0, seqfloor, threshold, maxelems, out);
}

int psDeltaAck(psClient *c, const char *key, uint64_t seq) {
    psi_clear_error(c);
    if (!key) {
        psi_set_error(c, PS_ERR_ARG, "psDeltaAck needs a key");
        return PS_ERR;
    }
    char *cmd;
    size_t len;
    RING_ENCODE(cmd, len, ps_wire_delta_ack(key, strlen(key), seq, buf, cap));
    return zero_one(c, ring_send(c, key, cmd, len), "DELTAACK");
}

int psDeltaApply(psClient *c, const char *key, const char *origin, uint64_t seq,
                 const uint32_t *idx, const float *vals, size_t count, int64_t hops) {
    return psDeltaApplyPrev(c, key, origin, seq, 0, idx, vals, count, hops);
}

int psDeltaApplyPrev(psClient *c, const char *key, const char *origin, uint64_t seq,
                     uint64_t prev, const uint32_t *idx, const float *vals, size_t count,
                     int64_t hops) {
    psi_clear_error(c);
    if (!key || !name_ok(origin) || count == 0 || !idx || !vals || (prev && prev >= seq)) {
        psi_set_error(c, PS_ERR_ARG, "psDeltaApply needs a key, an origin, count >= 1 and "
                                     "prev < seq");
        return PS_ERR;
    }
    char *cmd;
    size_t len;
    RING_ENCODE(cmd, len, ps_wire_apply_delta_prev(key, strlen(key), origin, seq, idx, vals,
                                                   count, hops, prev, buf, cap));
    return zero_one(c, ring_send(c, key, cmd, len), "APPLYDELTA");
}

int psDeltaFwd(psClient *c, const char *key, size_t n, psDelta *out) {
    psi_clear_error(c);
    psDeltaRelease(out);
    memset(out, 0, sizeof(*out));
    if (!key || n == 0) {
        psi_set_error(c, PS_ERR_ARG, "psDeltaFwd needs a key and n > 0");
        return PS_ERR;
    }
    return delta_fwd(c, key, n, 0, out);
}

int psDeltaFwdAck(psClient *c, const char *key, const char *origin, uint64_t seq) {
    psi_clear_error(c);
    if (!key || !name_ok(origin)) {
        psi_set_error(c, PS_ERR_ARG, "psDeltaFwdAck needs a key and an origin");
        return PS_ERR;
    }
    char *cmd;
    size_t len;
    RING_ENCODE(cmd, len, ps_wire_delta_fwdack(key, strlen(key), origin, seq, buf, cap));
    return zero_one(c, ring_send(c, key, cmd, len), "DELTAFWDACK");
}

/* A table delta's blobs: 'rows' ascending u64 ids and rows x dim F32. */
static int rows_ok(const redisReply *ib, const redisReply *vb, uint64_t rows, uint32_t dim) {
    if (!is_str(ib) || !is_str(vb) || rows < 1 || ib->len != rows * sizeof(uint64_t) ||
        vb->len != rows * dim * sizeof(float))
        return 0;
    uint64_t prev = 0;
    for (uint64_t i = 0; i < rows; i++) {
        uint64_t x;
        memcpy(&x, ib->str + i * sizeof(x), sizeof(x));
        if (i && x <= prev) return 0;
        prev = x;
    }
    return 1;
}

static int blobs_ok(const redisReply *ib, const redisReply *vb, uint64_t count, size_t n,
                    uint32_t dim) {
    return dim ? rows_ok(ib, vb, count, dim) : delta_ok(ib, vb, count, n);
}

int psDeltaTakeRows(psClient *c, const char *key, uint32_t dim, uint64_t seqfloor,
                    double threshold, uint64_t maxrows, psDelta *out) {
    psi_clear_error(c);
    psDeltaRelease(out);
    memset(out, 0, sizeof(*out));
    if (!key || dim == 0 || !(threshold >= 0)) {
        psi_set_error(c, PS_ERR_ARG, "psDeltaTakeRows needs a key, dim > 0 and a threshold >= 0");
        return PS_ERR;
    }
    return delta_take(c, key, 0, dim, seqfloor, threshold, maxrows, out);
}

int psDeltaApplyRows(psClient *c, const char *key, const char *origin, uint64_t seq,
                     uint64_t prev, const uint64_t *ids, const float *vals, size_t rows,
                     uint32_t dim, int64_t hops) {
    psi_clear_error(c);
    if (!key || !name_ok(origin) || rows == 0 || dim == 0 || !ids || !vals ||
        (prev && prev >= seq)) {
        psi_set_error(c, PS_ERR_ARG, "psDeltaApplyRows needs a key, an origin, rows >= 1, "
                                     "dim >= 1 and prev < seq");
        return PS_ERR;
    }
    char *cmd;
    size_t len;
    RING_ENCODE(cmd, len, ps_wire_apply_delta_blobs(key, strlen(key), origin, seq, ids,
                                                    rows * sizeof(uint64_t), vals,
                                                    rows * dim * sizeof(float), hops, prev, buf,
                                                    cap));
    return zero_one(c, ring_send(c, key, cmd, len), "APPLYDELTA");
}

int psDeltaFwdRows(psClient *c, const char *key, uint32_t dim, psDelta *out) {
    psi_clear_error(c);
    psDeltaRelease(out);
    memset(out, 0, sizeof(*out));
    if (!key || dim == 0) {
        psi_set_error(c, PS_ERR_ARG, "psDeltaFwdRows needs a key and dim > 0");
        return PS_ERR;
    }
    return delta_fwd(c, key, 0, dim, out);
}

void psDeltaRelease(psDelta *d) {
    if (!d) return;
    if (d->priv_) freeReplyObject(d->priv_);
    d->priv_ = NULL;
    d->idx = NULL;
    d->ids = NULL;
    d->vals = NULL;
    d->count = 0;
    d->dim = 0;
}

/* ---- pipelined batches (psRingSend / psRingWait) ---- */

typedef struct ringReq {
    psReq req;
    psRingOp *op;
    char *cmd;                /* encoded command (owned), NULL: not sent (bad op) */
} ringReq;

struct psRingBatch {
    ringReq *qs;
    size_t n;
};

static void op_error(psRingOp *op, int status, const char *msg) {
    op->rc = PS_ERR;
    op->status = status;
    size_t l = msg ? strlen(msg) : 0;
    if (l >= sizeof(op->err)) l = sizeof(op->err) - 1;
    if (l) memcpy(op->err, msg, l);
    op->err[l] = '\0';
}

static int ring_req_done(psClient *c, psReq *r, redisReply *reply) {
    ringReq *q = r->udata;
    psRingOp *op = q->op;
    if (!reply) {
        op_error(op, c->err ? c->err : PS_ERR_IO, c->errstr);
        return PSI_DONE;
    }
    op->status = PS_OK;
    op->err[0] = '\0';
    if (reply->type == REDIS_REPLY_ERROR) {
        int nokey = op->op == PS_RING_OP_INFO && psi_reply_error(reply) == PS_PROTO_ERR_NOKEY;
        op_error(op, nokey ? PS_ERR_NOKEY : PS_ERR_SERVER, reply->str);
    } else if (op->op == PS_RING_OP_APPLY) {
        if (is_int(reply) && (reply->integer == 0 || reply->integer == 1))
            op->rc = (int)reply->integer;
        else
            op_error(op, PS_ERR_PROTOCOL, "unexpected PS.APPLYDELTA reply");
    } else if (psInfoParse(reply, op->info) == PS_OK) {
        op->rc = PS_OK;
    } else {
        memset(op->info, 0, sizeof(*op->info));
        op_error(op, PS_ERR_PROTOCOL, "unexpected PS.INFO reply");
    }
    freeReplyObject(reply);
    return PSI_DONE;
}

psRingBatch *psRingSend(psClient *c, psRingOp *ops, size_t n) {
    psi_clear_error(c);
    psRingBatch *b = calloc(1, sizeof(*b));
    if (!b || (n && !(b->qs = calloc(n, sizeof(*b->qs))))) {
        free(b);
        psi_set_error(c, PS_ERR_OOM, "out of memory");
        return NULL;
    }
    b->n = n;
    for (size_t i = 0; i < n; i++) {
        psRingOp *op = &ops[i];
        ringReq *q = &b->qs[i];
        char *cmd = NULL;
        size_t len = 0;
        q->op = op;
        op->rc = PS_ERR;
        if (op->op == PS_RING_OP_INFO && op->key && op->info) {
            memset(op->info, 0, sizeof(*op->info));
            RING_ENCODE(cmd, len, ps_wire_info(op->key, strlen(op->key), buf, cap));
        } else if (op->op == PS_RING_OP_APPLY && op->key && name_ok(op->origin) && op->count &&
                   (op->idx || (op->ids && op->dim)) && op->vals &&
                   !(op->prev && op->prev >= op->seq)) {
            const size_t per = op->idx ? 1 : op->dim; /* floats per index */
            const size_t isz = op->idx ? sizeof(uint32_t) : sizeof(uint64_t);
            RING_ENCODE(cmd, len,
                        ps_wire_apply_delta_blobs(op->key, strlen(op->key), op->origin, op->seq,
                                                  op->idx ? (const void *)op->idx
                                                          : (const void *)op->ids,
                                                  op->count * isz, op->vals,
                                                  op->count * per * sizeof(float), op->hops,
                                                  op->prev, buf, cap));
        } else {
            op_error(op, PS_ERR_ARG, "a ring op needs a key, an INFO its output, an APPLY an "
                                     "origin, count >= 1, indices (a table: ids and dim) and "
                                     "prev < seq");
            continue;
        }
        if (!cmd) {
            for (size_t j = 0; j < i; j++) free(b->qs[j].cmd);
            free(b->qs);
            free(b);
            psi_set_error(c, PS_ERR_OOM, "out of memory");
            return NULL;
        }
        q->cmd = cmd;
        psi_req_init(&q->req, op->key, strlen(op->key));
        q->req.cmd = cmd;
        q->req.cmdlen = len;
        q->req.done = ring_req_done;
        q->req.udata = q;
    }
    for (size_t i = 0; i < n; i++)
        if (b->qs[i].cmd) psi_submit(c, &b->qs[i].req);
    psi_flush(c);
    return b;
}

static int ring_batch_done(psClient *c, void *arg) {
    const psRingBatch *b = arg;
    (void)c;
    for (size_t i = 0; i < b->n; i++)
        if (b->qs[i].cmd && b->qs[i].req.state != PSS_DONE) return 0;
    return 1;
}

int psRingReady(psClient *c, psRingBatch *b) {
    if (!b) return 1;
    if (ring_batch_done(c, b)) return 1;
    psi_flush(c);
    return ring_batch_done(c, b);
}

int psRingWait(psClient *c, psRingBatch *b) {
    psi_clear_error(c);
    if (!b) {
        psi_set_error(c, PS_ERR_ARG, "no batch");
        return PS_ERR;
    }
    int rc = PS_OK;
    if (psi_run(c, ring_batch_done, b) != 0) {
        if (!c->err) psi_set_error(c, PS_ERR_OTHER, "internal error: requests left without replies");
        rc = PS_ERR;
    }
    for (size_t i = 0; i < b->n; i++) {
        if (b->qs[i].cmd && b->qs[i].req.state != PSS_DONE) {
            op_error(b->qs[i].op, c->err ? c->err : PS_ERR_IO, c->errstr);
            rc = PS_ERR;
        } else if (b->qs[i].cmd && b->qs[i].req.failed) {
            rc = PS_ERR;
        }
        free(b->qs[i].cmd);
    }
    free(b->qs);
    free(b);
    return rc;
}
