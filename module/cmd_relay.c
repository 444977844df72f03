/* cmd_relay.c -- PS.TAKE, PS.TAKEACK, PS.MIRROR, PS.TAKEWAIT: what a relay
 * (ps-relay) needs from the ACCUM tensors of its local server (accum.h). The
 * relay takes the summed gradient into a pending slot (split into parts of
 * at most MAXROUND gradients), pushes each part upstream with
 * "ID <relay> <seq>", acknowledges it, and mirrors the upstream values and
 * version into the local tensor that its workers pull. PS.TAKEWAIT lets it
 * sleep until a round may be due instead of polling.
 *
 * Replication, decided here per handler (each is a function of the value
 * and its arguments, so verbatim replication gives identical replicas and
 * AOF replays):
 *   PS.TAKE     verbatim when it made a pending slot or changed MAXBACKLOG;
 *               answering an existing slot again, or nothing, changes
 *               nothing and is not replicated.
 *   PS.TAKEACK  verbatim when it acknowledged a part.
 *   PS.MIRROR   verbatim when it changed the values or the version.
 *   PS.TAKEWAIT read-only, never replicated; a waiter whose key goes away
 *               (deleted, expired, evicted, renamed, moved, flushed, its db
 *               swapped, its value freed under its name) is answered an
 *               error at once (waiters.h). */

#include <string.h>

#include "accum.h"
#include "ps_module.h"
#include "waiters.h"

/* Opens an ACCUM tensor for writing, or replies the error (no such key,
 * WRONGTYPE, not ACCUM) and returns NULL with the key closed. */
static PSTensor *open_accum(RedisModuleCtx *ctx, RedisModuleString *kn, RedisModuleKey **key) {
    PSTensor *t = ps_open_tensor_or_reply(ctx, kn, REDISMODULE_READ | REDISMODULE_WRITE, key);
    if (!t) return NULL;
    if (t->optim != PS_OPT_ACCUM) {
        ps_reply_errorf(ctx, PSERR_NOT_ACCUM_F, ps_optim_name(t->optim));
        RedisModule_CloseKey(*key);
        return NULL;
    }
    return t;
}

/* Replies the next part of the pending slot: [seq, gradients of the part,
 * the whole pending sum as F32 blob, gradients of the take, parts left
 * including this one]. */
static void reply_pending(RedisModuleCtx *ctx, const PSTensor *t) {
    uint64_t seq = 0, part = 0;
    PSAccum_NextPart(t, &seq, &part);
    RedisModule_ReplyWithArray(ctx, 5);
    RedisModule_ReplyWithLongLong(ctx, (long long)seq);
    RedisModule_ReplyWithLongLong(ctx, (long long)part);
    RedisModule_ReplyWithStringBuffer(ctx, (const char *)t->acc.pend->v,
                                      (size_t)t->n * sizeof(float));
    RedisModule_ReplyWithLongLong(ctx, (long long)t->acc.pend_count);
    RedisModule_ReplyWithLongLong(ctx, (long long)(t->acc.pend_parts - t->acc.pend_done));
}

/* PS.TAKE key [MINCOUNT n] [SEQFLOOR s] [MAXROUND r] [MAXBACKLOG b]
 *   -> [seq, part, sum, count, parts left] (the next part of the pending
 *      slot, new or already there), or the number of pushes summed so far
 *      when nothing is pending and fewer than n (default 1) are summed.
 * A new slot of more than r gradients is split into ceil(count / r) parts
 * (r 0, the default: never). MAXBACKLOG sets the tensor's bound of
 * un-forwarded gradients (0: none), past which pushes are refused BACKLOG;
 * it is kept (persisted, replicated) until a take sets another. */
int PSTake_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc < 2 || argc % 2) return RedisModule_WrongArity(ctx);
    long long v[4] = {1, 0, 0, -1}; /* mincount, seqfloor, maxround, maxbacklog (-1: kept) */
    static const char *const names[4] = {"MINCOUNT", "SEQFLOOR", "MAXROUND", "MAXBACKLOG"};
    static const PSOption opts[] = {
        {"MINCOUNT", 1}, {"SEQFLOOR", 1}, {"MAXROUND", 1}, {"MAXBACKLOG", 1}, {NULL, 0}};
    unsigned seen = 0;
    for (int i = 2; i < argc; i += 2) {
        int k = ps_option_at(ctx, argv, argc, i, opts, &seen);
        if (k < 0) return REDISMODULE_OK;
        if (ps_arg_ll(ctx, argv[i + 1], names[k], k == 0 ? 1 : 0, 1LL << 62, &v[k]) !=
            REDISMODULE_OK)
            return REDISMODULE_OK;
    }
    RedisModuleKey *key;
    PSTensor *t = open_accum(ctx, argv[1], &key);
    if (!t) return REDISMODULE_OK;
    int replicate = 0;
    if (v[3] >= 0 && (uint64_t)v[3] != t->acc.max_backlog) {
        t->acc.max_backlog = (uint64_t)v[3];
        replicate = 1;
    }
    switch (PSAccum_Take(t, (uint64_t)v[0], (uint64_t)v[1], (uint64_t)v[2])) {
    case PS_TAKE_NEW:
        replicate = 1;
        ps_notify(ctx, "ps.take", argv[1]);
        /* fall through */
    case PS_TAKE_AGAIN:
        reply_pending(ctx, t);
        break;
    default:
        RedisModule_ReplyWithLongLong(ctx, (long long)t->acc.count);
        break;
    }
    if (replicate) RedisModule_ReplicateVerbatim(ctx);
    RedisModule_CloseKey(key);
    return REDISMODULE_OK;
}

/* PS.TAKEACK key seq -> 1 when 'seq' is the next part of the pending slot
 * (acknowledged; the slot is dropped with its last part), 0 when there is
 * none or it has another seq (an acknowledgement repeated after a crash). */
int PSTakeAck_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 3) return RedisModule_WrongArity(ctx);
    uint64_t seq;
    if (ps_arg_u64(ctx, argv[2], "seq", &seq) != REDISMODULE_OK) return REDISMODULE_OK;
    RedisModuleKey *key;
    PSTensor *t = open_accum(ctx, argv[1], &key);
    if (!t) return REDISMODULE_OK;
    const int dropped = PSAccum_Ack(t, seq);
    if (dropped) {
        ps_signal_ready(ctx, argv[1]); /* a waiter may wait for the slot to go */
        RedisModule_ReplicateVerbatim(ctx);
        ps_notify(ctx, "ps.takeack", argv[1]);
    }
    RedisModule_CloseKey(key);
    return RedisModule_ReplyWithLongLong(ctx, dropped);
}

/* PS.MIRROR key version data -> the tensor's version afterwards. Sets the
 * values (F32) and the version of the upstream tensor they came from,
 * unless the tensor already is at a newer version (a late mirror). */
int PSMirror_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 4) return RedisModule_WrongArity(ctx);
    uint64_t version;
    if (ps_arg_u64(ctx, argv[2], "version", &version) != REDISMODULE_OK) return REDISMODULE_OK;
    RedisModuleKey *key;
    PSTensor *t = open_accum(ctx, argv[1], &key);
    if (!t) return REDISMODULE_OK;
    const unsigned char *vals = ps_decode_dense(ctx, "data", argv[3], PS_FMT_F32, t->n);
    if (!vals) goto done;
    if (!ps_all_finite(vals, (size_t)t->n)) {
        RedisModule_ReplyWithError(ctx, PSERR_NONFINITE_DATA);
        goto done;
    }
    const int changed = PSAccum_Mirror(t, version, vals);
    if (changed < 0) {
        RedisModule_ReplyWithError(ctx, PSERR_OOM);
        goto done;
    }
    if (changed) ps_values_overwritten(ctx, argv[1], "ps.mirror", t->n);
    RedisModule_ReplyWithLongLong(ctx, (long long)t->version);
done:
    RedisModule_CloseKey(key);
    return REDISMODULE_OK;
}


/* ========================================================================
 * PS.TAKEWAIT: sleep until a round may be due
 * ====================================================================== */

/* A blocked PS.TAKEWAIT. 'gone' once its key went away. */
typedef struct TakeWaiter {
    PSWaiter w; /* first: in the waiter list (waiters.h) */
    uint64_t mincount;
} TakeWaiter;

/* Whether a take with MINCOUNT 'min' would not come back short. */
static int take_ready(const PSTensor *t, uint64_t min) {
    return t->acc.pend_count > 0 || (t->acc.count > 0 && t->acc.count >= min);
}

/* Opens an ACCUM tensor for reading, or replies the error (key closed). */
static PSTensor *open_accum_ro(RedisModuleCtx *ctx, RedisModuleString *kn, RedisModuleKey **key) {
    PSTensor *t = ps_open_tensor_or_reply(ctx, kn, REDISMODULE_READ, key);
    if (!t) return NULL;
    if (t->optim != PS_OPT_ACCUM) {
        ps_reply_errorf(ctx, PSERR_NOT_ACCUM_F, ps_optim_name(t->optim));
        RedisModule_CloseKey(*key);
        return NULL;
    }
    return t;
}

static void takewaiter_free_cb(RedisModuleCtx *ctx, void *privdata) {
    (void)ctx;
    TakeWaiter *w = privdata;
    ps_waiter_release(&w->w);
    RedisModule_Free(w);
}

/* Signaled: answers the summed count once a take would not be short. */
static int takeWaitReady(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    (void)argv;
    (void)argc;
    TakeWaiter *w = RedisModule_GetBlockedClientPrivateData(ctx);
    RedisModuleString *kn = RedisModule_GetBlockedClientReadyKey(ctx);
    RedisModuleKey *key;
    PSTensor *t = open_accum_ro(ctx, kn, &key);
    if (!t) return REDISMODULE_OK;
    if (!take_ready(t, w->mincount)) {
        RedisModule_CloseKey(key);
        return REDISMODULE_ERR; /* stay blocked */
    }
    RedisModule_ReplyWithLongLong(ctx, (long long)t->acc.count);
    RedisModule_CloseKey(key);
    return REDISMODULE_OK;
}

/* Timeout (nil), or the key went away (an error). */
static int takeWaitTimeout(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    (void)argv;
    (void)argc;
    const TakeWaiter *w = RedisModule_GetBlockedClientPrivateData(ctx);
    if (w && w->w.gone) return RedisModule_ReplyWithError(ctx, PSERR_TAKEWAIT_GONE);
    return RedisModule_ReplyWithNull(ctx);
}

/* PS.TAKEWAIT key MINCOUNT n [TIMEOUT ms] -> the number of pushes summed,
 * as soon as a PS.TAKE with MINCOUNT n would not come back short (n
 * summed, or a pending slot), or nil after TIMEOUT ms (0, the default:
 * none). Changes nothing. */
int PSTakeWait_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 4 && argc != 6) return RedisModule_WrongArity(ctx);
    long long v[2] = {1, 0};
    static const char *const names[2] = {"MINCOUNT", "TIMEOUT"};
    static const PSOption opts[] = {{"MINCOUNT", 1}, {"TIMEOUT", 1}, {NULL, 0}};
    unsigned seen = 0;
    for (int i = 2; i < argc; i += 2) {
        int k = ps_option_at(ctx, argv, argc, i, opts, &seen);
        if (k < 0) return REDISMODULE_OK;
        if (ps_arg_ll(ctx, argv[i + 1], names[k], k == 0 ? 1 : 0, k == 0 ? 1LL << 62 : 1LL << 40,
                      &v[k]) != REDISMODULE_OK)
            return REDISMODULE_OK;
    }
    if (!(seen & 1)) return RedisModule_ReplyWithError(ctx, PSERR_TAKEWAIT_MINCOUNT);
    RedisModuleKey *key;
    PSTensor *t = open_accum_ro(ctx, argv[1], &key);
    if (!t) return REDISMODULE_OK;
    const int ready = take_ready(t, (uint64_t)v[0]);
    const long long count = (long long)t->acc.count;
    RedisModule_CloseKey(key);
    if (ready) return RedisModule_ReplyWithLongLong(ctx, count);
    int may = ps_waiter_may_block(ctx);
    if (may <= 0) return may == 0 ? RedisModule_ReplyWithNull(ctx) : REDISMODULE_OK;
    TakeWaiter *w = RedisModule_Calloc(1, sizeof(*w));
    w->mincount = (uint64_t)v[0];
    ps_waiter_block(ctx, &w->w, argv[1], t, takeWaitReady, takeWaitTimeout, takewaiter_free_cb,
                    v[1], w);
    return REDISMODULE_OK;
}
