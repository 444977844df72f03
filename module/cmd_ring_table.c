/* cmd_ring_table.c -- the ring protocol on embedding tables (issue #22;
 * cmd_ring.c has the commands, which work on tensors and tables alike): a
 * table's JOIN as a paged copy of a neighbour's base view (PS.RING key ROWS
 * on the neighbour; JOINBEGIN, JOINROWS, JOINEND on the joiner), and what the
 * table commands and the table type call: the push hooks, the PS.INFO
 * fields, and the persistence of a table's ring state (RDB, AOF rewrite,
 * digest, copy). ring_table.h has the state and its rules. */

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cmd_ring.h"
#include "embed_glue.h"
#include "ps_module.h"
#include "ring.h"
#include "ring_table.h"

/* ========================================================================
 * A table's JOIN: ROWS (read a page of the base view), JOINBEGIN, JOINROWS,
 * JOINEND (ring_table.h; docs/commands.md "Ring commands")
 * ====================================================================== */

/* Rows of one ROWS page at most (COUNT bounds the index buckets scanned). */
#define RING_ROWS_MAX_COUNT 65536

typedef struct RowsPage {
    const PSRingTable *r;
    uint32_t dim;
    uint64_t n, cap;
    uint64_t *ids;
    float *val;
    int oom;
} RowsPage;

static void rows_page_add(void *ud, const PSEmbedRow *row) {
    RowsPage *p = ud;
    if (p->oom) return;
    if (p->n == p->cap) {
        const uint64_t nc = p->cap ? 2 * p->cap : 64;
        uint64_t *ni = RedisModule_TryAlloc((size_t)nc * 8);
        float *nv = ni ? RedisModule_TryAlloc((size_t)nc * p->dim * 4) : NULL;
        if (!nv) {
            RedisModule_Free(ni);
            p->oom = 1;
            return;
        }
        if (p->n) {
            memcpy(ni, p->ids, (size_t)p->n * 8);
            memcpy(nv, p->val, (size_t)p->n * p->dim * 4);
        }
        RedisModule_Free(p->ids);
        RedisModule_Free(p->val);
        p->ids = ni;
        p->val = nv;
        p->cap = nc;
    }
    p->ids[p->n] = row->id;
    memcpy(p->val + (size_t)p->n * p->dim, PSRingTable_BaseView(p->r, row), (size_t)p->dim * 4);
    p->n++;
}

typedef struct IdAt {
    uint64_t id;
    uint64_t at;
} IdAt;

static int cmp_id_at(const void *a, const void *b) {
    const uint64_t x = ((const IdAt *)a)->id, y = ((const IdAt *)b)->id;
    return (x > y) - (x < y);
}

/* ROWS cursor COUNT n -> [next cursor, ids (u64, ascending), rows (F32)]:
 * one page of the base view (ring_table.h) over the export scan's cursor
 * (0 starts, 0 answered ends). Read-only. */
int ps_ring_rows(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 6) return RedisModule_WrongArity(ctx);
    uint64_t cursor;
    long long count;
    if (ps_arg_u64(ctx, argv[3], "cursor", &cursor) != REDISMODULE_OK) return REDISMODULE_OK;
    if (!ps_arg_is(argv[4], "COUNT"))
        return ps_reply_errorf(ctx, PSERR_UNKNOWN_OPT_F, RedisModule_StringPtrLen(argv[4], NULL));
    if (ps_arg_ll(ctx, argv[5], "COUNT", 1, RING_ROWS_MAX_COUNT, &count) != REDISMODULE_OK)
        return REDISMODULE_OK;
    RedisModuleKey *key;
    PSEmbedValue *v;
    PSTensor *t = ps_ring_open(ctx, argv[1], REDISMODULE_READ, &key, &v);
    if (!t && !v) return REDISMODULE_OK;
    if (!v) {
        RedisModule_CloseKey(key);
        return RedisModule_ReplyWithError(ctx, PSERR_RING_ROWS_TENSOR);
    }
    if (v->ring && v->ring->joining) {
        RedisModule_CloseKey(key);
        return ps_ring_reply_error(ctx, PS_RINGT_EJOINING);
    }
    RowsPage p = {v->ring, PSEmbed_Config(v->t)->dim, 0, 0, NULL, NULL, 0};
    const uint64_t next = PSEmbed_Scan(v->t, cursor, (uint64_t)count, 0, rows_page_add, &p);
    IdAt *ord = p.oom ? NULL : RedisModule_TryAlloc((size_t)(p.n ? p.n : 1) * sizeof(IdAt));
    unsigned char *out = ord ? RedisModule_TryAlloc((size_t)(p.n ? p.n : 1) * (8 + 4 * p.dim)) : NULL;
    if (!out) {
        RedisModule_ReplyWithError(ctx, PSERR_OOM);
    } else {
        for (uint64_t i = 0; i < p.n; i++) ord[i] = (IdAt){p.ids[i], i};
        if (p.n) qsort(ord, (size_t)p.n, sizeof(IdAt), cmp_id_at); /* ids are distinct */
        unsigned char *vo = out + (size_t)p.n * 8;
        for (uint64_t i = 0; i < p.n; i++) {
            memcpy(out + (size_t)i * 8, &ord[i].id, 8);
            memcpy(vo + (size_t)i * p.dim * 4, p.val + (size_t)ord[i].at * p.dim, (size_t)p.dim * 4);
        }
        RedisModule_ReplyWithArray(ctx, 3);
        RedisModuleString *nc = RedisModule_CreateStringPrintf(ctx, "%llu", (unsigned long long)next);
        RedisModule_ReplyWithString(ctx, nc); /* a u64, as PS.SCAN's cursor */
        RedisModule_FreeString(ctx, nc);
        RedisModule_ReplyWithStringBuffer(ctx, (const char *)out, (size_t)p.n * 8);
        RedisModule_ReplyWithStringBuffer(ctx, (const char *)vo, (size_t)p.n * p.dim * 4);
        PSStats.bytes_out += p.n * (8 + 4 * (uint64_t)p.dim);
    }
    RedisModule_Free(out);
    RedisModule_Free(ord);
    RedisModule_Free(p.ids);
    RedisModule_Free(p.val);
    RedisModule_CloseKey(key);
    return REDISMODULE_OK;
}

/* Opens the table for a JOIN* subcommand, or NULL after replying. */
static PSEmbedValue *open_join_table(RedisModuleCtx *ctx, RedisModuleString *kn, RedisModuleKey **key) {
    PSEmbedValue *v;
    PSTensor *t = ps_ring_open(ctx, kn, RW, key, &v);
    if (!t && !v) return NULL;
    if (v) return v;
    RedisModule_CloseKey(*key);
    RedisModule_ReplyWithError(ctx, PSERR_RING_JOIN_TENSOR);
    return NULL;
}

/* JOINBEGIN origin [FROM origin seq]... -> 1 */
int ps_ring_join_begin(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc < 4 || (argc - 4) % 3) return RedisModule_WrongArity(ctx);
    PSRingFrom from[PS_RING_MAX_ORIGINS + 1];
    const long nf = ps_ring_parse_from(ctx, argv, argc, 4, from);
    if (nf < 0) return REDISMODULE_OK;
    const size_t nfrom = (size_t)nf;
    size_t ol;
    const char *origin = RedisModule_StringPtrLen(argv[3], &ol);
    RedisModuleKey *key;
    PSEmbedValue *v = open_join_table(ctx, argv[1], &key);
    if (!v) return REDISMODULE_OK;
    const int st = PSRingTable_JoinBegin(&v->ring, &v->t, origin, ol, from, nfrom,
                                         PS_RING_DEFAULT_MAXQUEUE);
    if (st != PS_RING_OK) {
        ps_ring_reply_error(ctx, st);
    } else {
        RedisModule_ReplicateVerbatim(ctx);
        ps_notify(ctx, "ps.ringjoin", argv[1]);
        RedisModule_ReplyWithLongLong(ctx, 1);
    }
    RedisModule_CloseKey(key);
    return REDISMODULE_OK;
}

/* JOINROWS page ids rows -> rows copied so far */
int ps_ring_join_rows(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 6) return RedisModule_WrongArity(ctx);
    uint64_t page;
    if (ps_arg_u64(ctx, argv[3], "page", &page) != REDISMODULE_OK) return REDISMODULE_OK;
    size_t il, vl;
    const unsigned char *ids = (const unsigned char *)RedisModule_StringPtrLen(argv[4], &il);
    const unsigned char *val = (const unsigned char *)RedisModule_StringPtrLen(argv[5], &vl);
    if (il == 0 || il % 8) return RedisModule_ReplyWithError(ctx, PSERR_RING_ROWSIZE);
    RedisModuleKey *key;
    PSEmbedValue *v = open_join_table(ctx, argv[1], &key);
    if (!v) return REDISMODULE_OK;
    const int st = PSRingTable_JoinRows(v->ring, v->t, page, ids, il / 8, val, vl);
    if (st != PS_RING_OK) {
        ps_ring_reply_error(ctx, st);
    } else {
        RedisModule_ReplicateVerbatim(ctx);
        RedisModule_ReplyWithLongLong(ctx, (long long)v->ring->join_rows);
    }
    RedisModule_CloseKey(key);
    return REDISMODULE_OK;
}

/* JOINEND pages rows -> 1 */
int ps_ring_join_end(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 5) return RedisModule_WrongArity(ctx);
    uint64_t pages, rows;
    if (ps_arg_u64(ctx, argv[3], "pages", &pages) != REDISMODULE_OK ||
        ps_arg_u64(ctx, argv[4], "rows", &rows) != REDISMODULE_OK)
        return REDISMODULE_OK;
    RedisModuleKey *key;
    PSEmbedValue *v = open_join_table(ctx, argv[1], &key);
    if (!v) return REDISMODULE_OK;
    const int st = PSRingTable_JoinEnd(v->ring, pages, rows);
    if (st != PS_RING_OK) {
        ps_ring_reply_error(ctx, st);
    } else {
        RedisModule_ReplicateVerbatim(ctx);
        ps_notify(ctx, "ps.ringjoin", argv[1]);
        RedisModule_ReplyWithLongLong(ctx, 1);
    }
    RedisModule_CloseKey(key);
    return REDISMODULE_OK;
}

/* ========================================================================
 * Tables: the push hooks, PS.INFO fields, persistence of the ring state
 * ====================================================================== */

int ps_ring_table_before_push(RedisModuleCtx *ctx, PSEmbedValue *v, const unsigned char *ids,
                              size_t k, const char *id, size_t idlen, uint64_t seq, uint64_t *mark) {
    PSRingTable *r = v->ring;
    if (r->joining) {
        ps_ring_reply_error(ctx, PS_RINGT_EJOINING);
        return -1;
    }
    /* A duplicate (an ID seq already applied) is still answered as one. */
    const PSDedupEntry *e = id ? PSDedupSet_Find(&v->dd, id, idlen) : NULL;
    if (PSRingTable_LagFull(r) && !(e && PSDedupEntry_Seen(e, seq))) {
        v->ring_lag_refusals++;
        ps_reply_errorf(ctx, PSERR_RING_LAG_F, (unsigned long long)PSRingTable_Lag(r),
                        (unsigned long long)r->maxlag);
        return -1;
    }
    if (PSRingTable_BeforePush(r, v->t, ids, k, mark) != PS_RING_OK) {
        RedisModule_ReplyWithError(ctx, PSERR_OOM);
        return -1;
    }
    return 0;
}

void ps_ring_table_after_push(PSEmbedValue *v, int applied, uint64_t mark) {
    PSRingTable_AfterPush(v->ring, applied, mark);
}

void ps_ring_table_info(RedisModuleCtx *ctx, const PSEmbedValue *v, long *n) {
    const PSRingTable *r = v->ring;
    if (!r) return;
    RedisModule_ReplyWithCString(ctx, "ring_origin");
    RedisModule_ReplyWithStringBuffer(ctx, r->origin, r->originlen);
    *n += 2;
    ps_reply_pair_ll(ctx, "ring_take_seq", (long long)r->take_seq, n);
    ps_reply_pair_ll(ctx, "ring_pending_seq", (long long)(r->pend ? r->pend->seq : 0), n);
    ps_reply_pair_ll(ctx, "ring_pending_elems", (long long)(r->pend ? r->pend->rows : 0), n);
    ps_reply_pair_ll(ctx, "ring_accumulated", (long long)PSRingTable_Accumulated(r, v->t), n);
    ps_reply_pair_ll(ctx, "ring_base_rows", (long long)r->n, n);
    ps_reply_pair_ll(ctx, "ring_fwd_entries", (long long)r->fwd_len, n);
    ps_reply_pair_ll(ctx, "ring_fwd_bytes", (long long)r->fwd_bytes, n);
    ps_reply_pair_ll(ctx, "ring_maxqueue", (long long)r->maxqueue, n);
    ps_reply_pair_ll(ctx, "ring_applied", (long long)r->applied, n);
    ps_reply_pair_ll(ctx, "ring_maxlag", (long long)r->maxlag, n);
    ps_reply_pair_ll(ctx, "ring_lag", (long long)PSRingTable_Lag(r), n);
    ps_reply_pair_ll(ctx, "ring_own_pushes", (long long)r->own_pushes, n);
    ps_reply_pair_ll(ctx, "ring_lag_refusals", (long long)v->ring_lag_refusals, n);
    ps_reply_pair_ll(ctx, "ring_joining", (long long)(r->joining ? 1 : 0), n);
    ps_reply_pair_ll(ctx, "ring_join_pages", (long long)(r->joining ? r->joining - 1 : 0), n);
    ps_reply_pair_ll(ctx, "ring_join_rows", (long long)r->join_rows, n);
    RedisModule_ReplyWithCString(ctx, "ring_origins");
    RedisModule_ReplyWithArray(ctx, r->norigins);
    for (uint32_t i = 0; i < r->norigins; i++) {
        RedisModule_ReplyWithArray(ctx, 3);
        RedisModule_ReplyWithStringBuffer(ctx, r->origins[i].name, r->origins[i].len);
        RedisModule_ReplyWithLongLong(ctx, (long long)r->origins[i].hwm);
        RedisModule_ReplyWithLongLong(ctx, (long long)r->origins[i].applied);
    }
    *n += 2;
}

/* ERING offset total piece on a restored table: pieces in order; the last
 * one attaches the state. The buffer grows with the pieces received. */
const char *ps_ring_table_restore(PSEmbedValue *v, RedisModuleString **argv, int argc) {
    (void)argc;
    long long off, total;
    size_t len;
    const char *p = RedisModule_StringPtrLen(argv[5], &len);
    if (RedisModule_StringToLongLong(argv[3], &off) != REDISMODULE_OK ||
        RedisModule_StringToLongLong(argv[4], &total) != REDISMODULE_OK || total < 1 || off < 0 ||
        len == 0 || (uint64_t)len > (uint64_t)total - (uint64_t)(off < total ? off : total))
        return "bad ring state chunk";
    if (off == 0) { /* a new state begins */
        RedisModule_Free(v->ringload);
        v->ringload = NULL;
        v->ringload_len = (size_t)total;
        v->ringload_have = 0;
    }
    if ((size_t)total != v->ringload_len || (size_t)off != v->ringload_have)
        return "bad ring state chunk";
    unsigned char *nb = RedisModule_TryAlloc(v->ringload_have + len);
    if (!nb) return "out of memory";
    if (v->ringload_have) memcpy(nb, v->ringload, v->ringload_have);
    memcpy(nb + v->ringload_have, p, len);
    RedisModule_Free(v->ringload);
    v->ringload = nb;
    v->ringload_have += len;
    if (v->ringload_have < v->ringload_len) return NULL;
    const char *why = ps_ring_table_attach(v, v->ringload, v->ringload_have);
    RedisModule_Free(v->ringload);
    v->ringload = NULL;
    v->ringload_len = v->ringload_have = 0;
    return why;
}
