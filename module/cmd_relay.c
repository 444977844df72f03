/* cmd_relay.c -- PS.TAKE, PS.TAKEACK, PS.MIRROR: what a relay (ps-relay)
 * needs from the ACCUM tensors of its local server (accum.h). The relay
 * takes the summed gradient into a pending slot, pushes it upstream with
 * "ID <relay> <seq>", acknowledges it, and mirrors the upstream values and
 * version into the local tensor that its workers pull.
 *
 * Replication, decided here per handler (each is a function of the value
 * and its arguments, so verbatim replication gives identical replicas and
 * AOF replays):
 *   PS.TAKE     verbatim when it made a pending slot; answering an existing
 *               slot again, or nothing, changes nothing and is not replicated.
 *   PS.TAKEACK  verbatim when it dropped the slot.
 *   PS.MIRROR   verbatim when it changed the values or the version. */

#include <string.h>

#include "accum.h"
#include "ps_module.h"

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

/* Replies the pending slot: [seq, count, sum as F32 blob]. */
static void reply_pending(RedisModuleCtx *ctx, const PSTensor *t) {
    RedisModule_ReplyWithArray(ctx, 3);
    RedisModule_ReplyWithLongLong(ctx, (long long)t->acc.seq);
    RedisModule_ReplyWithLongLong(ctx, (long long)t->acc.pend_count);
    RedisModule_ReplyWithStringBuffer(ctx, (const char *)t->acc.pend->v,
                                      (size_t)t->n * sizeof(float));
}

/* PS.TAKE key [MINCOUNT n] [SEQFLOOR s] -> [seq, count, sum] (the pending
 * slot, new or already there), or the number of pushes summed so far when
 * nothing is pending and fewer than n (default 1) are summed. */
int PSTake_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc < 2 || argc % 2) return RedisModule_WrongArity(ctx);
    long long mincount = 1, seqfloor = 0;
    enum { O_MINCOUNT, O_SEQFLOOR };
    static const PSOption opts[] = {{"MINCOUNT", 1}, {"SEQFLOOR", 1}, {NULL, 0}};
    unsigned seen = 0;
    for (int i = 2; i < argc; i += 2) {
        int k = ps_option_at(ctx, argv, argc, i, opts, &seen);
        if (k < 0) return REDISMODULE_OK;
        if (ps_arg_ll(ctx, argv[i + 1], k == O_MINCOUNT ? "MINCOUNT" : "SEQFLOOR",
                      k == O_MINCOUNT ? 1 : 0, 1LL << 62,
                      k == O_MINCOUNT ? &mincount : &seqfloor) != REDISMODULE_OK)
            return REDISMODULE_OK;
    }
    RedisModuleKey *key;
    PSTensor *t = open_accum(ctx, argv[1], &key);
    if (!t) return REDISMODULE_OK;
    switch (PSAccum_Take(t, (uint64_t)mincount, (uint64_t)seqfloor)) {
    case PS_TAKE_NEW:
        RedisModule_ReplicateVerbatim(ctx);
        ps_notify(ctx, "ps.take", argv[1]);
        /* fall through */
    case PS_TAKE_AGAIN:
        reply_pending(ctx, t);
        break;
    default:
        RedisModule_ReplyWithLongLong(ctx, (long long)t->acc.count);
        break;
    }
    RedisModule_CloseKey(key);
    return REDISMODULE_OK;
}

/* PS.TAKEACK key seq -> 1 when the pending slot of 'seq' was dropped, 0 when
 * there is none or it has another seq (an acknowledgement repeated after a
 * crash). */
int PSTakeAck_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 3) return RedisModule_WrongArity(ctx);
    uint64_t seq;
    if (ps_arg_u64(ctx, argv[2], "seq", &seq) != REDISMODULE_OK) return REDISMODULE_OK;
    RedisModuleKey *key;
    PSTensor *t = open_accum(ctx, argv[1], &key);
    if (!t) return REDISMODULE_OK;
    const int dropped = PSAccum_Ack(t, seq);
    if (dropped) {
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
