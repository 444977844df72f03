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

extern RedisModuleCommandKeySpec PSReadKeySpec[];
extern RedisModuleCommandKeySpec *PSWriteKeySpec;

/* Opens the tensor for writing or replies the error; NULL when replied. */
static PSTensor *open_write(RedisModuleCtx *ctx, RedisModuleString *kn, RedisModuleKey **key) {
    int empty;
    PSTensor *t = ps_open_tensor(ctx, kn, REDISMODULE_READ | REDISMODULE_WRITE, key, &empty);
    if (!t && empty) RedisModule_ReplyWithError(ctx, PSERR_NOKEY);
    return t;
}

/* PS.SNAPSHOT key name [TIME unix-ms] -> OK. TIME is what replication adds so
 * replicas record the master's clock. */
static int PSSnapshot_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 3 && argc != 5) return RedisModule_WrongArity(ctx);
    long long ms = RedisModule_Milliseconds();
    if (argc == 5) {
        if (!ps_arg_is(argv[3], "TIME"))
            return ps_reply_errorf(ctx, PSERR_UNKNOWN_OPT_F, RedisModule_StringPtrLen(argv[3], NULL));
        if (ps_arg_ll(ctx, argv[4], "TIME", 0, 1LL << 50, &ms) != REDISMODULE_OK) return REDISMODULE_OK;
    }
    size_t len;
    const char *name = RedisModule_StringPtrLen(argv[2], &len);
    if (len == 0 || len > 1024) return RedisModule_ReplyWithError(ctx, PSERR_SNAP_NAME);
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
static int PSSnapshots_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
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
static int PSRollback_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
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
static int PSDropSnapshot_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
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

static RedisModuleCommandArg NameArgs[] = {PS_ARG_KEY, PS_ARG("name", NULL, STRING, 0), {0}};
static RedisModuleCommandArg SnapArgs[] = {
    PS_ARG_KEY, PS_ARG("name", NULL, STRING, 0), PS_ARG("unix-ms", "TIME", INTEGER, PS_OPT), {0}};
static RedisModuleCommandArg KeyArgs[] = {PS_ARG_KEY, {0}};

int PSSnapshotCommands_Register(RedisModuleCtx *ctx) {
    RedisModuleCommandInfo snap = {
        .version = &PSCommandInfoVersion,
        .summary = "Takes an immutable named snapshot of values and optimizer state",
        .complexity = "O(1) (copy on the next write)",
        .since = "0.1.0",
        .arity = -3,
        .key_specs = PSWriteKeySpec,
        .args = SnapArgs,
    };
    RedisModuleCommandInfo list = {
        .version = &PSCommandInfoVersion,
        .summary = "Lists the snapshots of a tensor: name, version, unix-ms",
        .complexity = "O(S) where S is the number of snapshots",
        .since = "0.1.0",
        .arity = 2,
        .key_specs = PSReadKeySpec,
        .args = KeyArgs,
    };
    RedisModuleCommandInfo rollback = {
        .version = &PSCommandInfoVersion,
        .summary = "Restores values and optimizer state from a snapshot as a new version",
        .complexity = "O(1)",
        .since = "0.1.0",
        .arity = 3,
        .key_specs = PSWriteKeySpec,
        .args = NameArgs,
    };
    RedisModuleCommandInfo drop = {
        .version = &PSCommandInfoVersion,
        .summary = "Drops a snapshot",
        .complexity = "O(S) where S is the number of snapshots",
        .since = "0.1.0",
        .arity = 3,
        .key_specs = PSWriteKeySpec,
        .args = NameArgs,
    };
    if (ps_register_command(ctx, "ps.snapshot", PSSnapshot_RedisCommand, "write deny-oom", &snap) ||
        ps_register_command(ctx, "ps.snapshots", PSSnapshots_RedisCommand, "readonly", &list) ||
        ps_register_command(ctx, "ps.rollback", PSRollback_RedisCommand, "write deny-oom", &rollback) ||
        ps_register_command(ctx, "ps.dropsnapshot", PSDropSnapshot_RedisCommand, "write", &drop))
        return REDISMODULE_ERR;
    return REDISMODULE_OK;
}
