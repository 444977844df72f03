/* cmd_snapshot.c -- PS.SNAPSHOT, PS.SNAPSHOTS, PS.ROLLBACK, PS.DROPSNAPSHOT.
 *
 * A snapshot shares the tensor's buffers until the next write copies them
 * (copy on write), so taking one costs no copy while nothing changes.
 *
 * Replication, decided here per handler:
 *   PS.SNAPSHOT      replicated with the master's clock made explicit
 *                    (PS.SNAPSHOT key name TIME unix-ms), so replicas and
 *                    the AOF record the same timestamp.
 *   PS.ROLLBACK      verbatim.
 *   PS.DROPSNAPSHOT  verbatim when it dropped one.
 *   PS.SNAPSHOTS     read-only. */

#include <string.h>

#include "ps_module.h"

/* Opens the tensor for writing or replies the error; NULL when replied. */
static PSTensor *open_write(RedisModuleCtx *ctx, RedisModuleString *kn, RedisModuleKey **key) {
    int empty;
    PSTensor *t = ps_open_tensor(ctx, kn, REDISMODULE_READ | REDISMODULE_WRITE, key, &empty);
    if (!t && empty) RedisModule_ReplyWithError(ctx, PSERR_NOKEY);
    return t;
}

/* PS.SNAPSHOT key name [TIME unix-ms] -> OK. TIME is what replication adds so
 * replicas record the master's clock. */
int PSSnapshot_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 3 && argc != 5) return RedisModule_WrongArity(ctx);
    long long ms = RedisModule_Milliseconds();
    if (argc == 5) {
        if (!ps_arg_is(argv[3], "TIME"))
            return ps_reply_errorf(ctx, PSERR_UNKNOWN_OPT_F, RedisModule_StringPtrLen(argv[3], NULL));
        if (ps_arg_ll(ctx, argv[4], "TIME", 0, 1LL << 50, &ms) != REDISMODULE_OK) return REDISMODULE_OK;
    }
    size_t len;
    const char *name = RedisModule_StringPtrLen(argv[2], &len);
    if (len == 0 || len > PS_SNAP_NAME_MAX) return RedisModule_ReplyWithError(ctx, PSERR_SNAP_NAME);
    RedisModuleKey *key;
    PSTensor *t = open_write(ctx, argv[1], &key);
    if (!t) goto done;
    if (PSTensor_SnapshotFind(t, name, len)) {
        RedisModule_ReplyWithError(ctx, PSERR_SNAP_EXISTS);
        goto done;
    }
    if (t->nsnap >= t->max_snapshots) {
        ps_reply_errorf(ctx, PSERR_SNAP_LIMIT_F, t->nsnap, t->max_snapshots);
        goto done;
    }
    if (PSTensor_SnapshotTake(t, name, len, ms) != PST_OK) {
        RedisModule_ReplyWithError(ctx, PSERR_OOM);
        goto done;
    }
    RedisModule_Replicate(ctx, "ps.snapshot", "sscl", argv[1], argv[2], "TIME", ms);
    ps_notify(ctx, "ps.snapshot", argv[1]);
    PSStats.snapshots++;
    RedisModule_ReplyWithSimpleString(ctx, "OK");
done:
    RedisModule_CloseKey(key);
    return REDISMODULE_OK;
}

/* PS.SNAPSHOTS key -> [[name, version, unix-ms], ...] */
int PSSnapshots_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 2) return RedisModule_WrongArity(ctx);
    RedisModuleKey *key;
    PSTensor *t = ps_open_tensor_or_reply(ctx, argv[1], REDISMODULE_READ, &key);
    if (!t) return REDISMODULE_OK;
    RedisModule_ReplyWithArray(ctx, t->nsnap);
    for (uint32_t i = 0; i < t->nsnap; i++) {
        RedisModule_ReplyWithArray(ctx, 3);
        RedisModule_ReplyWithStringBuffer(ctx, t->snaps[i].name, t->snaps[i].namelen);
        RedisModule_ReplyWithLongLong(ctx, (long long)t->snaps[i].version);
        RedisModule_ReplyWithLongLong(ctx, t->snaps[i].unix_ms);
    }
    RedisModule_CloseKey(key);
    return REDISMODULE_OK;
}

/* PS.ROLLBACK key name -> new version */
int PSRollback_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 3) return RedisModule_WrongArity(ctx);
    RedisModuleKey *key;
    PSTensor *t = open_write(ctx, argv[1], &key);
    if (!t) goto done;
    size_t len;
    const char *name = RedisModule_StringPtrLen(argv[2], &len);
    PSSnapshot *s = PSTensor_SnapshotFind(t, name, len);
    if (!s) {
        RedisModule_ReplyWithError(ctx, PSERR_NOSNAP);
        goto done;
    }
    if (t->round_count) {
        RedisModule_ReplyWithError(ctx, PSERR_ROUND_OPEN);
        goto done;
    }
    PSTensor_Rollback(t, s);
    RedisModule_ReplicateVerbatim(ctx);
    ps_notify(ctx, "ps.rollback", argv[1]);
    ps_signal_ready(ctx, argv[1]);
    PSStats.rollbacks++;
    RedisModule_ReplyWithLongLong(ctx, (long long)t->version);
done:
    RedisModule_CloseKey(key);
    return REDISMODULE_OK;
}

/* PS.DROPSNAPSHOT key name -> 1 if dropped, 0 if there was none */
int PSDropSnapshot_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 3) return RedisModule_WrongArity(ctx);
    RedisModuleKey *key;
    PSTensor *t = open_write(ctx, argv[1], &key);
    if (!t) goto done;
    size_t len;
    const char *name = RedisModule_StringPtrLen(argv[2], &len);
    int dropped = PSTensor_SnapshotDrop(t, name, len);
    if (dropped) {
        RedisModule_ReplicateVerbatim(ctx);
        ps_notify(ctx, "ps.dropsnapshot", argv[1]);
    }
    RedisModule_ReplyWithLongLong(ctx, dropped);
done:
    RedisModule_CloseKey(key);
    return REDISMODULE_OK;
}
