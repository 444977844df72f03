/* info.c -- PS.INFO: the one place a client reads a key's PS.INFO reply
 * (see psInfo() in ps.h). */

#include <stdio.h>
#include <string.h>

#include "protocol.h"
#include <stdlib.h>

#include "ps_internal.h"
#include "raw.h"
#include "wire.h"

/* The fields read into a psKeyInfo: the reply's field name and where its
 * value goes (integer fields; the others are handled by name below). */
#define INFO_U64_FIELDS(X)                                                                         \
    X(elements) X(version) X(step) X(sync_n) X(pushes) X(pulls) X(sets) X(stale_rejects)           \
    X(dedup_hits) X(nonfinite_rejects) X(rows) X(memory) X(capacity) X(created) X(dropped)         \
    X(ids_pulled) X(evicted_ttl) X(evicted_capacity) X(evicted_explicit) X(accum_pushes)           \
    X(pending_pushes) X(relay_seq) X(takes) X(take_acks) X(max_backlog) X(backlog)                 \
    X(backlog_refusals) X(pending_parts) X(relay_takes) X(relay_rounds) X(relay_forwarded)         \
    X(relay_round_min) X(relay_round_max) X(ring_take_seq) X(ring_pending_seq)                     \
    X(ring_pending_elems) X(ring_accumulated) X(ring_fwd_entries) X(ring_fwd_bytes)                \
    X(ring_maxqueue) X(ring_applied) X(ring_maxlag) X(ring_lag) X(ring_lag_refusals) X(seed)      \
    X(ttl) X(ring_joining)

static const struct {
    const char *name;
    size_t off;
} U64Fields[] = {
#define F_(f) {#f, offsetof(psKeyInfo, f)},
    INFO_U64_FIELDS(F_)
#undef F_
};

/* Copies a string value into 'dst' (room 'cap'); 0, or -1 when it is not one. */
static int str_value(const redisReply *v, char *dst, size_t cap) {
    if (v->type != REDIS_REPLY_STRING && v->type != REDIS_REPLY_STATUS) return -1;
    snprintf(dst, cap, "%s", v->str);
    return 0;
}

int psInfoParse(const redisReply *r, psKeyInfo *out) {
    enum { HAVE_SHAPE = 1, HAVE_OPTIM = 2, HAVE_VERSION = 4, HAVE_DIM = 8 };
    int have = 0;
    memset(out, 0, sizeof(*out));
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements % 2) return PS_ERR;
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
        const redisReply *f = r->element[i], *v = r->element[i + 1];
        if (f->type != REDIS_REPLY_STRING && f->type != REDIS_REPLY_STATUS) continue;
        const char *name = f->str;
        if (!strcmp(name, "shape")) {
            if (v->type != REDIS_REPLY_ARRAY || v->elements < 1 || v->elements > 8) return PS_ERR;
            for (size_t k = 0; k < v->elements; k++) {
                if (v->element[k]->type != REDIS_REPLY_INTEGER) return PS_ERR;
                out->dims[k] = (uint64_t)v->element[k]->integer;
            }
            out->ndim = (int)v->elements;
            have |= HAVE_SHAPE;
        } else if (!strcmp(name, "type")) {
            char t[16];
            if (str_value(v, t, sizeof(t)) == 0 && !strcmp(t, "embedding")) out->is_table = 1;
        } else if (!strcmp(name, "optimizer")) {
            if (str_value(v, out->optimizer, sizeof(out->optimizer))) return PS_ERR;
            have |= HAVE_OPTIM;
        } else if (!strcmp(name, "mode")) {
            str_value(v, out->mode, sizeof(out->mode));
        } else if (!strcmp(name, "dim") && v->type == REDIS_REPLY_INTEGER) {
            out->dim = (int)v->integer;
            have |= HAVE_DIM;
        } else if (!strcmp(name, "ring_origin")) {
            if (v->type != REDIS_REPLY_NIL &&
                (str_value(v, out->ring_origin, sizeof(out->ring_origin)) ||
                 v->len > PS_RING_ORIGIN_MAX))
                return PS_ERR;
        } else if (!strcmp(name, "ring_origins")) {
            if (psi_ring_origins(v, out->ring_origins, &out->ring_norigins) != 0) return PS_ERR;
        } else if (!strcmp(name, "maxstaleness") && v->type == REDIS_REPLY_INTEGER) {
            out->maxstaleness = v->integer;
        } else if (!strcmp(name, "lr")) {
            /* A double: RESP2 answers it as a bulk string. */
            if (v->type == REDIS_REPLY_STRING) sscanf(v->str, "%lf", &out->lr);
        } else if (!strcmp(name, "init")) {
            str_value(v, out->init, sizeof(out->init));
        } else if (!strcmp(name, "init_a") || !strcmp(name, "init_b")) {
            if (v->type == REDIS_REPLY_STRING)
                sscanf(v->str, "%lf", name[5] == 'a' ? &out->init_a : &out->init_b);
        } else {
            for (size_t k = 0; k < sizeof(U64Fields) / sizeof(U64Fields[0]); k++) {
                if (strcmp(name, U64Fields[k].name) || v->type != REDIS_REPLY_INTEGER) continue;
                memcpy((char *)out + U64Fields[k].off, &(uint64_t){(uint64_t)v->integer},
                       sizeof(uint64_t));
                if (!strcmp(name, "version")) have |= HAVE_VERSION;
                break;
            }
        }
    }
    if (!(have & HAVE_OPTIM) || !(have & HAVE_VERSION)) return PS_ERR;
    if (out->is_table ? !(have & HAVE_DIM) : !(have & HAVE_SHAPE)) return PS_ERR;
    return PS_OK;
}

int psInfo(psClient *c, const char *key, psKeyInfo *out) {
    memset(out, 0, sizeof(*out));
    psi_clear_error(c);
    /* wire.c's encoder (the ring agent pipelines the same command, psRingSend) */
    size_t len = ps_wire_info(key, strlen(key), NULL, 0);
    char *cmd = malloc(len);
    if (!cmd) {
        psi_set_error(c, PS_ERR_OOM, "out of memory");
        return PS_ERR;
    }
    ps_wire_info(key, strlen(key), cmd, len);
    psRawReq q;
    psi_raw_init(&q, key, cmd, len);
    psi_raw_run(c, &q, 1);
    psi_raw_free(&q);
    redisReply *r = q.reply;
    if (r == NULL) {
        if (!c->err) psi_set_error(c, PS_ERR_OTHER, "no reply to PS.INFO %s", key);
        return PS_ERR;
    }
    int rc = PS_OK;
    if (r->type == REDIS_REPLY_ERROR) {
        int nokey = psi_reply_error(r) == PS_PROTO_ERR_NOKEY;
        psi_set_error(c, nokey ? PS_ERR_NOKEY : PS_ERR_SERVER, "%s", r->str);
        rc = PS_ERR;
    } else if (psInfoParse(r, out) != PS_OK) {
        psi_set_error(c, PS_ERR_PROTOCOL, "unexpected PS.INFO reply");
        rc = PS_ERR;
    }
    freeReplyObject(r);
    return rc;
}
