/* export.c -- psTableScan / psTableTombstones (ps.h "Incremental export of a
 * table shard"): one page of PS.SCANROWS ... GONE or PS.TOMBSTONES, the
 * reply checked and its blobs copied into aligned arrays. */
#include <stdlib.h>
#include <string.h>

#include "protocol.h"
#include "ps_internal.h"
#include "wire.h"

typedef struct ScanPriv {
    uint64_t *ids, *gone;
    void *values;
} ScanPriv;

void psScanPageFree(psScanPage *p) {
    if (p == NULL) return;
    ScanPriv *v = p->priv;
    if (v) {
        free(v->ids);
        free(v->gone);
        free(v->values);
        free(v);
    }
    memset(p, 0, sizeof(*p));
}

/* A copy of blob 'r' (a string reply) of whole 8-byte ids; NULL (and *n 0)
 * when empty. -1 on OOM. */
static int copy_ids(const redisReply *r, uint64_t **out, size_t *n) {
    *n = r->len / 8;
    *out = NULL;
    if (*n == 0) return 0;
    *out = malloc(*n * 8);
    if (*out == NULL) return -1;
    memcpy(*out, r->str, *n * 8); /* little-endian host (codec.h) */
    return 0;
}

/* The reply's cursor (a decimal string) into *cursor; -1 when malformed. */
static int parse_cursor(const redisReply *r, uint64_t *cursor) {
    if (r->type != REDIS_REPLY_STRING || r->len == 0 || r->len > 20) return -1;
    uint64_t v = 0;
    for (size_t i = 0; i < r->len; i++) {
        if (r->str[i] < '0' || r->str[i] > '9') return -1;
        v = v * 10 + (uint64_t)(r->str[i] - '0');
    }
    *cursor = v;
    return 0;
}

/* Sends argv on 'key' and checks the reply is an array of 'nelem'; NULL
 * with the error set otherwise. */
static redisReply *page_command(psClient *c, const char *key, int argc, const char **argv,
                                const size_t *argl, size_t nelem, const char *what) {
    redisReply *r = psCommandArgv(c, key, argc, argv, argl);
    if (r == NULL) return NULL;
    if (r->type == REDIS_REPLY_ERROR) {
        const int cls = psi_reply_error(r);
        psi_set_error(c, cls == PS_PROTO_ERR_REBASE ? PS_ERR_REBASE
                         : cls == PS_PROTO_ERR_NOKEY ? PS_ERR_NOKEY : PS_ERR_SERVER,
                      "%s %s: %s", what, key, r->str);
        freeReplyObject(r);
        return NULL;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements != nelem) {
        psi_set_error(c, PS_ERR_PROTOCOL, "%s %s: unexpected reply", what, key);
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

int psTableScan(psClient *c, const char *key, uint64_t cursor, uint64_t since, uint64_t count,
                psWireFormat fmt, int gone, psScanPage *out) {
    memset(out, 0, sizeof(*out));
    ps_format f;
    if (psi_format(fmt, &f) != 0 || (f != PS_FMT_F32 && f != PS_FMT_F16 && f != PS_FMT_BF16) ||
        count == 0 || count > PS_SCAN_MAX_COUNT) {
        psi_set_error(c, PS_ERR_ARG, "psTableScan: format F32, F16 or BF16 and COUNT 1..%u",
                      PS_SCAN_MAX_COUNT);
        return PS_ERR;
    }
    const char *argv[PS_WIRE_SCAN_MAXARGS];
    size_t argl[PS_WIRE_SCAN_MAXARGS];
    char nums[72];
    const int argc = ps_wire_scanrows_argv(key, strlen(key), cursor, since, count, f, gone, nums,
                                           argv, argl);
    redisReply *r = page_command(c, key, argc, argv, argl, gone ? 5 : 4, argv[0]);
    if (r == NULL) return PS_ERR;
    ScanPriv *p = calloc(1, sizeof(*p));
    int rc = PS_OK;
    const redisReply *const *e = (const redisReply *const *)r->element;
    if (parse_cursor(e[0], &out->cursor) != 0 || e[1]->type != REDIS_REPLY_INTEGER ||
        e[2]->type != REDIS_REPLY_STRING || e[2]->len % 8 || e[3]->type != REDIS_REPLY_STRING ||
        (gone && (e[4]->type != REDIS_REPLY_STRING || e[4]->len % 8)) ||
        (e[2]->len == 0) != (e[3]->len == 0) || (e[2]->len && e[3]->len % (e[2]->len / 8))) {
        psi_set_error(c, PS_ERR_PROTOCOL, "%s %s: unexpected reply", argv[0], key);
        rc = PS_ERR;
    } else if (p == NULL || copy_ids(e[2], &p->ids, &out->nrows) != 0 ||
               (gone && copy_ids(e[4], &p->gone, &out->ngone) != 0) ||
               (e[3]->len && (p->values = malloc(e[3]->len)) == NULL)) {
        psi_set_error(c, PS_ERR_OOM, "%s %s: out of memory", argv[0], key);
        rc = PS_ERR;
    } else {
        out->version = (uint64_t)e[1]->integer;
        if (e[3]->len) memcpy(p->values, e[3]->str, e[3]->len);
        out->value_bytes = e[3]->len;
    }
    freeReplyObject(r);
    out->priv = p;
    if (p) {
        out->ids = p->ids;
        out->gone = p->gone;
        out->values = p->values;
    }
    if (rc != PS_OK) out->nrows = out->ngone = out->value_bytes = 0;
    return rc;
}

int psTableTombstones(psClient *c, const char *key, uint64_t cursor, uint64_t since,
                      uint64_t count, psScanPage *out) {
    memset(out, 0, sizeof(*out));
    if (count == 0 || count > PS_SCAN_MAX_COUNT) {
        psi_set_error(c, PS_ERR_ARG, "psTableTombstones: COUNT 1..%u", PS_SCAN_MAX_COUNT);
        return PS_ERR;
    }
    const char *argv[PS_WIRE_SCAN_MAXARGS];
    size_t argl[PS_WIRE_SCAN_MAXARGS];
    char nums[72];
    const int argc = ps_wire_tombstones_argv(key, strlen(key), cursor, since, count, nums, argv, argl);
    redisReply *r = page_command(c, key, argc, argv, argl, 4, argv[0]);
    if (r == NULL) return PS_ERR;
    ScanPriv *p = calloc(1, sizeof(*p));
    int rc = PS_OK;
    const redisReply *const *e = (const redisReply *const *)r->element;
    if (parse_cursor(e[0], &out->cursor) != 0 || e[1]->type != REDIS_REPLY_INTEGER ||
        e[2]->type != REDIS_REPLY_INTEGER || e[3]->type != REDIS_REPLY_STRING || e[3]->len % 8) {
        psi_set_error(c, PS_ERR_PROTOCOL, "%s %s: unexpected reply", argv[0], key);
        rc = PS_ERR;
    } else if (p == NULL || copy_ids(e[3], &p->gone, &out->ngone) != 0) {
        psi_set_error(c, PS_ERR_OOM, "%s %s: out of memory", argv[0], key);
        rc = PS_ERR;
    } else {
        out->version = (uint64_t)e[1]->integer;
        out->horizon = (uint64_t)e[2]->integer;
    }
    freeReplyObject(r);
    out->priv = p;
    if (p) out->gone = p->gone;
    if (rc != PS_OK) out->ngone = 0;
    return rc;
}
