/* cmd_push.c -- PS.PUSHGRAD and PS.PULL (with MINVERSION blocking). The
 * sync-round timers and PS._CLOSEROUND are in cmd_round.c.
 *
 * Request-sized memory (issue 11 item 1): a pull returns at most dim 0 rows
 * (ROWS repeats count) and at most ps.max-pull-bytes of float32 values, and
 * the scratch it used is trimmed to ps.scratch-keep-bytes when it ends, so
 * a pull costs memory in proportion to what it returns and keeps none. At
 * most ps.max-blocked-pulls clients wait (MINVERSION pulls and PS.TAKEWAIT
 * together); a waiter whose key is deleted, expires, is renamed, moved or
 * flushed, or whose db is swapped, or whose tensor is freed under its name
 * (SET, RENAME/COPY/RESTORE onto it), is answered an error at once
 * (waiters.h: Redis 7.0 does not wake module key waiters then, or serves
 * them the newcomer).
 *
 * Replication, decided here per handler:
 *   PS.PUSHGRAD      verbatim when it changed state (applied, or added to a
 *                    sync round): re-executing it on the replica's identical
 *                    state gives identical bits (see optim.h). A duplicate
 *                    (ID seen) or rejected push (BACKLOG at the ring's
 *                    MAXLAG included: a function of replicated state) changes
 *                    nothing and is not replicated.
 *   sync timer       master-only decision: replicated as the effect
 *                    PS._CLOSEROUND key version.
 *   PS._CLOSEROUND   verbatim.
 *   PS.PULL          read-only, never replicated. */

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ps_limits.h"
#include "ps_module.h"
#include "waiters.h"

#include "ring.h"

/* ========================================================================
 * PS.PUSHGRAD
 * ====================================================================== */

/* PS.PUSHGRAD key (grad [FORMAT f] | VALUES g1 ... gn) [ROWS idx] [VERSION v]
 *             [ID client seq] [SCALE s] -> new version, on tensor 't' with the
 * arguments parsed by cmd_table.c's router (args.h). */
int ps_tensor_push(RedisModuleCtx *ctx, RedisModuleString **argv, PSTensor *t, const PSPushArgs *a) {
    PSPush p = {.scale = a->scale, .has_version = a->has_version, .version = a->version,
                .id = a->id, .idlen = a->idlen, .seq = a->seq};
    const int values_start = a->values_start, nvalues = a->nvalues;
    if (a->id) PSTensor_DedupPrefetch(t, a->id, a->idlen); /* the lookup's slot, while decoding */
    const ps_format fmt = a->fmt;
    RedisModuleString *grad = a->grad, *rowsarg = a->rows;
    /* Elements the gradient must hold: the whole tensor or the ROWS. */
    uint64_t m = t->n;
    if (rowsarg) {
        size_t rl, cnt;
        const char *rp = RedisModule_StringPtrLen(rowsarg, &rl);
        if (t->ndim < 1 || ps_rows_check((const unsigned char *)rp, rl, t->dims[0], &cnt) != 0) {
            RedisModule_ReplyWithError(ctx, PSERR_ROWS);
            goto done;
        }
        if (fmt == PS_FMT_TOPK) {
            RedisModule_ReplyWithError(ctx, PSERR_ROWS_FORMAT);
            goto done;
        }
        p.rows = (const unsigned char *)rp;
        p.nrows = cnt;
        m = (uint64_t)cnt * (t->ndim == 1 ? 1 : t->n / t->dims[0]);
    }
    size_t glen = 0;
    if (values_start) {
        if ((uint64_t)nvalues != m) {
            ps_reply_errorf(ctx, PSERR_VALUES_COUNT_F, (size_t)nvalues, (unsigned long long)m);
            goto done;
        }
        float *dst = ps_scratch(m);
        if (!dst) {
            RedisModule_ReplyWithError(ctx, PSERR_OOM);
            goto done;
        }
        ps_values_fill(argv, a, dst);
        p.g = (const unsigned char *)dst;
    } else if (fmt == PS_FMT_TOPK) {
        const char *gp = RedisModule_StringPtrLen(grad, &glen);
        uint32_t k;
        if (ps_topk_check((const unsigned char *)gp, glen, (size_t)t->n, &k) != 0) {
            RedisModule_ReplyWithError(ctx, PSERR_TOPK);
            goto done;
        }
        float *dst = ps_scratch(t->n);
        if (!dst) {
            RedisModule_ReplyWithError(ctx, PSERR_OOM);
            goto done;
        }
        memset(dst, 0, (size_t)t->n * sizeof(float));
        ps_topk_scatter_add((const unsigned char *)gp, k, dst);
        p.g = (const unsigned char *)dst;
    } else {
        RedisModule_StringPtrLen(grad, &glen);
        if (!(p.g = ps_decode_dense(ctx, "gradient", grad, fmt, m))) goto done;
    }

    PSPushResult r;
    int st = PSTensor_Push(t, &p, &r);
    switch (st) {
    case PST_OK:
    case PST_PENDING:
        RedisModule_ReplicateVerbatim(ctx);
        ps_notify(ctx, "ps.pushgrad", argv[1]);
        if (st == PST_OK) {
            ps_signal_ready(ctx, argv[1]);
            if (t->sync_n) {
                PSStats.rounds_closed++;
                ps_round_timer_stop(t); /* closed by its n-th push */
            }
        } else {
            ps_round_timer_arm(ctx, argv[1], t);
        }
        PSStats.pushes++;
        PSStats.bytes_in += values_start ? m * sizeof(float) : glen;
        RedisModule_ReplyWithLongLong(ctx, (long long)r.version);
        break;
    case PST_DUPLICATE:
        PSStats.dedup_hits++;
        RedisModule_ReplyWithLongLong(ctx, (long long)r.version);
        break;
    case PST_ERR_STALE:
        PSStats.stale_rejects++;
        ps_reply_errorf(ctx, PSERR_STALE_F, (unsigned long long)p.version,
                        (unsigned long long)r.staleness, (unsigned long long)t->version,
                        (long long)t->maxstale);
        break;
    case PST_ERR_ROUND:
        PSStats.stale_rejects++;
        ps_reply_errorf(ctx, PSERR_ROUND_F, (unsigned long long)p.version,
                        (unsigned long long)t->version);
        break;
    case PST_ERR_RINGLAG:
        ps_reply_errorf(ctx, PSERR_RING_LAG_F, (unsigned long long)PSRing_Lag(t->ring),
                        (unsigned long long)t->ring->maxlag);
        break;
    case PST_ERR_FUTURE:
        ps_reply_errorf(ctx, PSERR_FUTURE_F, (unsigned long long)p.version,
                        (unsigned long long)t->version);
        break;
    case PST_ERR_NONFINITE:
        PSStats.nonfinite_rejects++;
        /* fall through */
    default:
        ps_reply_status(ctx, st);
        break;
    }
done:
    ps_scratch_trim();
    return REDISMODULE_OK;
}

/* ========================================================================
 * PS.PULL
 * ====================================================================== */

/* A parsed pull; owned copies so it can outlive argv while blocked. */
typedef struct PullReq {
    PSWaiter w; /* first: while blocked, in the waiter list (waiters.h) */
    ps_format fmt;
    int values;
    int has_min;
    uint64_t minversion;
    long long timeout_ms;
    unsigned char *rows; /* NULL or a copy of the ROWS blob */
    size_t rowslen;
    char *at; /* NULL or the snapshot name */
    size_t atlen;
} PullReq;

static void pullreq_free_cb(RedisModuleCtx *ctx, void *privdata) {
    (void)ctx;
    PullReq *q = privdata;
    ps_waiter_release(&q->w);
    RedisModule_Free(q->rows);
    RedisModule_Free(q->at);
    RedisModule_Free(q);
}

/* Checks what a pull of 'q' would return from 't' against the limits: at
 * most dim 0 rows, at most ps.max-pull-bytes (4 bytes per element, 32 for
 * FORMAT VALUES). On success sets
 * *m (elements) and *cnt (rows, 0 without ROWS) and returns 1; otherwise
 * replies the error and returns 0. */
static int pull_size_ok(RedisModuleCtx *ctx, const PSTensor *t, const PullReq *q, uint64_t *m,
                        size_t *cnt) {
    *cnt = 0;
    if (q->rows && (t->ndim < 1 || ps_rows_check(q->rows, q->rowslen, t->dims[0], cnt) != 0)) {
        RedisModule_ReplyWithError(ctx, PSERR_ROWS);
        return 0;
    }
    const uint64_t eb = q->values ? PS_PULL_VALUE_BYTES : PS_PULL_ELEM_BYTES;
    const int why = ps_pull_size(t, *cnt, eb, (uint64_t)PSConf.max_pull_bytes, m);
    if (why == PS_PULL_OK) return 1;
    PSStats.pulls_refused++;
    if (why == PS_PULL_TOO_MANY_ROWS)
        ps_reply_errorf(ctx, PSERR_PULL_ROWS_F, *cnt, (unsigned long long)t->dims[0]);
    else
        ps_reply_errorf(ctx, PSERR_PULL_TOO_BIG_F, (unsigned long long)*m,
                        (unsigned long long)(*m * eb), (unsigned long long)PSConf.max_pull_bytes);
    return 0;
}

/* Replies [version, data] for the tensor (or its snapshot). */
static int reply_pull(RedisModuleCtx *ctx, PSTensor *t, const PullReq *q) {
    const float *src = t->data->v;
    uint64_t version = t->version;
    if (q->at) {
        PSSnapshot *s = PSTensor_SnapshotFind(t, q->at, q->atlen);
        if (!s) return RedisModule_ReplyWithError(ctx, PSERR_NOSNAP);
        src = s->data->v;
        version = s->version;
    }
    uint64_t m;
    size_t cnt;
    if (!pull_size_ok(ctx, t, q, &m, &cnt)) return REDISMODULE_OK;
    if (q->rows) {
        const uint64_t rl = t->ndim == 1 ? 1 : t->n / t->dims[0];
        float *g = ps_scratch(m);
        if (!g) return RedisModule_ReplyWithError(ctx, PSERR_OOM);
        for (size_t r = 0; r < cnt; r++)
            memcpy(g + r * rl, src + (uint64_t)ps_rows_get(q->rows, r) * rl, rl * sizeof(float));
        src = g;
    }
    t->stats.pulls++;
    PSStats.pulls++;
    RedisModule_ReplyWithArray(ctx, 2);
    RedisModule_ReplyWithLongLong(ctx, (long long)version);
    if (q->values) {
        RedisModule_ReplyWithArray(ctx, (long)m);
        for (uint64_t k = 0; k < m; k++) RedisModule_ReplyWithDouble(ctx, src[k]);
        return REDISMODULE_OK;
    }
    size_t bytes = ps_dense_encoded_size(q->fmt, (size_t)m);
    PSStats.bytes_out += bytes;
    if (q->fmt == PS_FMT_F32) return RedisModule_ReplyWithStringBuffer(ctx, (const char *)src, bytes);
    /* Encoded formats go through the byte scratch (distinct from the float
     * scratch 'src' may live in). */
    unsigned char *enc = ps_scratch_bytes(bytes);
    if (!enc) return RedisModule_ReplyWithError(ctx, PSERR_OOM);
    ps_encode(q->fmt, src, (size_t)m, enc);
    return RedisModule_ReplyWithStringBuffer(ctx, (const char *)enc, bytes);
}

/* Blocked pull: called when the key was signaled; replies once fresh enough. */
static int pullReady(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    (void)argv;
    (void)argc;
    PullReq *q = RedisModule_GetBlockedClientPrivateData(ctx);
    RedisModuleString *kn = RedisModule_GetBlockedClientReadyKey(ctx);
    RedisModuleKey *key;
    PSTensor *t = ps_open_tensor_or_reply(ctx, kn, REDISMODULE_READ, &key);
    if (!t) return REDISMODULE_OK;
    if (t->version < q->minversion) {
        RedisModule_CloseKey(key);
        return REDISMODULE_ERR; /* stay blocked */
    }
    reply_pull(ctx, t, q);
    RedisModule_CloseKey(key);
    return REDISMODULE_OK;
}

/* Timeout, or the key went away (waiter_gone): privdata says which. */
static int pullTimeout(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    (void)argv;
    (void)argc;
    const PullReq *q = RedisModule_GetBlockedClientPrivateData(ctx);
    if (q && q->w.gone) return RedisModule_ReplyWithError(ctx, PSERR_KEY_GONE);
    PSStats.blocked_timeouts++;
    return RedisModule_ReplyWithNull(ctx);
}

static void *copybytes(const char *p, size_t len) {
    char *c = RedisModule_Alloc(len + 1);
    memcpy(c, p, len);
    c[len] = '\0';
    return c;
}

/* PS.PULL key [FORMAT F32|F16|BF16|I8|VALUES] [ROWS idx] [AT snapshot]
 *          [MINVERSION v [TIMEOUT ms]] -> [version, data] (nil on timeout),
 * on tensor 't' with the arguments parsed by cmd_table.c's router. */
int ps_tensor_pull(RedisModuleCtx *ctx, RedisModuleString **argv, PSTensor *t, const PSPullArgs *a) {
    PullReq q = {.fmt = a->fmt,
                 .values = a->values,
                 .has_min = a->has_min,
                 .minversion = a->minversion,
                 .timeout_ms = a->timeout_ms,
                 .rows = (unsigned char *)a->rows,
                 .rowslen = a->rowslen,
                 .at = (char *)a->at,
                 .atlen = a->atlen};
    /* A round left open by a restart or a failover has no timer on this
     * (new) master yet: a worker waiting on it arms one. */
    ps_round_timer_arm(ctx, argv[1], t);
    if (!q.has_min || t->version >= q.minversion) {
        reply_pull(ctx, t, &q);
        ps_scratch_trim();
        return REDISMODULE_OK;
    }
    /* A waiter holds its request (argv) and a copy of ROWS and AT: refuse
     * what could not be answered now (too many rows, no such snapshot)
     * before blocking, and bound how many wait. */
    uint64_t m;
    size_t cnt;
    int ok = pull_size_ok(ctx, t, &q, &m, &cnt);
    if (ok && q.at && !PSTensor_SnapshotFind(t, q.at, q.atlen)) {
        RedisModule_ReplyWithError(ctx, PSERR_NOSNAP);
        ok = 0;
    }
    if (!ok) return REDISMODULE_OK;
    /* Not fresh enough: block, unless blocking is not allowed here (MULTI,
     * Lua): then answer at once as a timeout would. */
    int may = ps_waiter_may_block(ctx);
    if (may <= 0) return may == 0 ? RedisModule_ReplyWithNull(ctx) : REDISMODULE_OK;
    PullReq *bq = RedisModule_Calloc(1, sizeof(*bq));
    *bq = q;
    bq->rows = q.rows ? copybytes((const char *)q.rows, q.rowslen) : NULL;
    bq->at = q.at ? copybytes(q.at, q.atlen) : NULL;
    bq->w.gone_counter = &PSStats.blocked_pulls_gone;
    ps_waiter_block(ctx, &bq->w, argv[1], t, pullReady, pullTimeout, pullreq_free_cb,
                    q.timeout_ms, bq);
    PSStats.blocked_pulls++;
    return REDISMODULE_OK;
}
