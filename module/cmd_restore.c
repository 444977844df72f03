/* cmd_restore.c -- PS._RESTORE, the internal command an AOF rewrite emits
 * (type.c, PSType_AofRewrite) and an AOF load replays:
 *
 *   PS._RESTORE key HEADER blob [ENCVER v]
 *   PS._RESTORE key CHUNK target index offset blob   (target: DATA S0 S1 ROUND
 *               SNAPDATA SNAPS0 SNAPS1 ACCSUM PENDING)
 *   PS._RESTORE key DEDUP id seq version [window]
 *   PS._RESTORE key SNAPSHOT name version unix_ms blob
 *   PS._RESTORE key RING origin take_seq maxqueue applied maxlag own_pushes
 *               acked_own pend_own   (then CHUNK RINGBASE)
 *   PS._RESTORE key RINGORIGIN name hwm applied
 *   PS._RESTORE key RINGDELTA PENDING|FWD|PENDINGMORE|FWDMORE origin seq hops
 *               indices values
 *
 * HEADER creates the tensor from the scalar header (header.h) in the layout of
 * encoding version v (encver.h); an AOF written before the token existed has
 * none and means PS_ENCVER_AOF_UNTAGGED (golden file python_tests/golden/
 * aof-v0). The arrays then arrive as CHUNKs. Every part is validated by the
 * same core validators as the RDB loader and applied through the core; a bad
 * part answers an error and changes nothing.
 *
 * Replication: verbatim (only ever replayed from an AOF). */

#include <limits.h>
#include <string.h>

#include "embed_glue.h"
#include "ps_module.h"
#include "ring.h"

/* HEADER: a new tensor at 'key', replacing what is there. */
static int restore_header(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    long long encver = PS_ENCVER_AOF_UNTAGGED;
    if (argc != 4 && argc != 6) return RedisModule_WrongArity(ctx);
    if (argc == 6) {
        if (!ps_arg_is(argv[4], "ENCVER")) return RedisModule_ReplyWithError(ctx, PSERR_RESTORE_SYNTAX);
        if (ps_arg_ll(ctx, argv[5], "ENCVER", PS_ENCVER_FIRST, PS_ENCVER_LATEST, &encver) !=
            REDISMODULE_OK)
            return REDISMODULE_OK;
    }
    size_t len;
    const unsigned char *p = (const unsigned char *)RedisModule_StringPtrLen(argv[3], &len);
    PSHeader hd;
    uint64_t n;
    const char *why;
    if (PSHeader_Decode(p, len, (int)encver, &hd) != 0)
        return RedisModule_ReplyWithError(ctx, PSERR_RESTORE_HEADER);
    if ((why = PSHeader_Check(&hd, &n)) != NULL) return ps_reply_errorf(ctx, PSERR_RESTORE_HEADER_F, why);
    PSTensor *t = PSHeader_ToTensor(&hd, n, 1);
    if (!t) return RedisModule_ReplyWithError(ctx, PSERR_OOM);
    RedisModuleKey *key = RedisModule_OpenKey(ctx, argv[1], REDISMODULE_READ | REDISMODULE_WRITE);
    RedisModule_ModuleTypeSetValue(key, PSTensorType, t);
    RedisModule_CloseKey(key);
    RedisModule_ReplicateVerbatim(ctx);
    return RedisModule_ReplyWithSimpleString(ctx, "OK");
}

/* CHUNK target names, in PSRestoreTarget order. */
static const char *const ChunkTargets[] = {"DATA",   "S0",     "S1",      "ROUND",   "SNAPDATA",
                                           "SNAPS0", "SNAPS1", "ACCSUM",  "PENDING", "RINGBASE"};
_Static_assert(sizeof(ChunkTargets) / sizeof(ChunkTargets[0]) == PS_RESTORE_TARGETS,
               "a CHUNK target without a name");

/* CHUNK: 'blob' into an array at a float offset. Returns 0 or replies. */
static int restore_chunk(RedisModuleCtx *ctx, RedisModuleString **argv, PSTensor *t) {
    long long idx, off;
    if (ps_arg_ll(ctx, argv[4], "index", 0, 1LL << 32, &idx) != REDISMODULE_OK ||
        ps_arg_ll(ctx, argv[5], "offset", 0, 1LL << 62, &off) != REDISMODULE_OK)
        return -1;
    int target = -1;
    for (int k = 0; k < PS_RESTORE_TARGETS; k++)
        if (ps_arg_is(argv[3], ChunkTargets[k])) target = k;
    size_t len;
    const char *p = RedisModule_StringPtrLen(argv[6], &len);
    if (target < 0 ||
        PSTensor_RestoreChunk(t, target, (uint64_t)idx, (uint64_t)off, p, len) != PST_OK) {
        RedisModule_ReplyWithError(ctx, PSERR_RESTORE_CHUNK);
        return -1;
    }
    return 0;
}

/* SNAPSHOT: appends a snapshot from its saved form. Returns 0 or replies. */
static int restore_snapshot(RedisModuleCtx *ctx, RedisModuleString **argv, PSTensor *t) {
    long long version, unix_ms;
    if (ps_arg_ll(ctx, argv[4], "version", 0, LLONG_MAX, &version) != REDISMODULE_OK ||
        ps_arg_ll(ctx, argv[5], "unix_ms", LLONG_MIN, LLONG_MAX, &unix_ms) != REDISMODULE_OK)
        return -1;
    size_t len, hl;
    const char *name = RedisModule_StringPtrLen(argv[3], &len);
    const char *hp = RedisModule_StringPtrLen(argv[6], &hl);
    uint64_t sh[PS_RESTORE_SNAP_WORDS_LONG] = {0};
    const int long_form = hl == sizeof(sh);
    if (hl != PS_RESTORE_SNAP_WORDS_SHORT * sizeof(uint64_t) && !long_form) {
        RedisModule_ReplyWithError(ctx, PSERR_RESTORE_SNAPSHOT);
        return -1;
    }
    memcpy(sh, hp, hl);
    PSSnapshotSaved ss = {.version = (uint64_t)version, .unix_ms = unix_ms, .step = sh[0],
                          .flags = sh[3]};
    memcpy(&ss.b1pow, &sh[1], 8);
    memcpy(&ss.b2pow, &sh[2], 8);
    for (int j = 0; j < 3; j++) ss.earlier[j] = sh[4 + j];
    if (PSTensor_SnapshotCheck(t, name, len, &ss,
                               long_form ? PS_SNAP_FLAGS_ALL : PS_SNAP_FLAGS_LIVE_ONLY)) {
        RedisModule_ReplyWithError(ctx, PSERR_RESTORE_SNAPSHOT);
        return -1;
    }
    /* The arrays it does not share arrive as SNAP* CHUNKs. */
    if (PSTensor_SnapshotAdd(t, name, len, &ss, NULL) != PST_OK) {
        RedisModule_ReplyWithError(ctx, PSERR_OOM);
        return -1;
    }
    return 0;
}

/* RING / RINGORIGIN / RINGDELTA: the ring state of a tracked tensor
 * (ring.h), each part validated by the ring core's load steps. Returns 0 or
 * replies. */
static int restore_ring(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, PSTensor *t) {
    RedisModuleString *sub = argv[2];
    size_t ol;
    const char *origin = RedisModule_StringPtrLen(argv[3], &ol);
    long long a[7];
    int st = PS_RING_EINDEX;
    if (ps_arg_is(sub, "RING") && argc == 11) {
        for (int k = 0; k < 7; k++)
            if (ps_arg_ll(ctx, argv[4 + k], "ring field", 0, LLONG_MAX, &a[k]) != REDISMODULE_OK)
                return -1;
        st = PSRing_LoadBegin(t, origin, ol, (uint64_t)a[0], (uint64_t)a[1], (uint64_t)a[2]);
        if (st == PS_RING_OK && (st = PSRing_LoadLag(t, (uint64_t)a[3], (uint64_t)a[4],
                                                     (uint64_t)a[5], (uint64_t)a[6])) != PS_RING_OK)
            PSRing_Untrack(t); /* LoadBegin made it: nothing changed */
    } else if (ps_arg_is(sub, "RINGORIGIN") && argc == 6) {
        for (int k = 0; k < 2; k++)
            if (ps_arg_ll(ctx, argv[4 + k], "ring field", 0, LLONG_MAX, &a[k]) != REDISMODULE_OK)
                return -1;
        st = PSRing_LoadOrigin(t, origin, ol, (uint64_t)a[0], (uint64_t)a[1]);
    } else if (ps_arg_is(sub, "RINGDELTA") && argc == 9) {
        static const char *const kinds[4] = {"PENDING", "FWD", "PENDINGMORE", "FWDMORE"};
        int kind = -1;
        for (int k = 0; k < 4; k++)
            if (ps_arg_is(argv[3], kinds[k])) kind = k;
        origin = RedisModule_StringPtrLen(argv[4], &ol);
        for (int k = 0; k < 2; k++)
            if (ps_arg_ll(ctx, argv[5 + k], "ring field", 0, LLONG_MAX, &a[k]) != REDISMODULE_OK)
                return -1;
        size_t il, vl;
        const char *ip = RedisModule_StringPtrLen(argv[7], &il);
        const char *vp = RedisModule_StringPtrLen(argv[8], &vl);
        if (kind >= 0 && il % 4 == 0 && il == vl)
            st = PSRing_LoadDelta(t, kind % 2 == 0, kind >= 2, origin, ol, (uint64_t)a[0],
                                  (uint64_t)a[1], (const unsigned char *)ip,
                                  (const unsigned char *)vp, il / 4);
    } else {
        RedisModule_ReplyWithError(ctx, PSERR_RESTORE_SYNTAX);
        return -1;
    }
    if (st == PS_RING_OK) return 0;
    RedisModule_ReplyWithError(ctx, st == PS_RING_EOOM ? PSERR_OOM : PSERR_RESTORE_RING);
    return -1;
}

int PSRestore_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc < 3) return RedisModule_WrongArity(ctx);
    RedisModuleString *sub = argv[2];
    /* The parts of a table (type_embed.c) start with E. */
    if (ps_arg_is(sub, "EMBED") || ps_arg_is(sub, "EFILTER") || ps_arg_is(sub, "EROWS") ||
        ps_arg_is(sub, "EEND") || ps_arg_is(sub, "EDEDUP") || ps_arg_is(sub, "ETOMBS") ||
        ps_arg_is(sub, "ERING"))
        return PSEmbedRestore_RedisCommand(ctx, argv, argc);
    if (argc < 4) return RedisModule_WrongArity(ctx);
    if (ps_arg_is(sub, "HEADER")) return restore_header(ctx, argv, argc);
    RedisModuleKey *key;
    PSTensor *t = ps_open_tensor_or_reply(ctx, argv[1], REDISMODULE_READ | REDISMODULE_WRITE, &key);
    if (!t) return REDISMODULE_OK;
    if (ps_arg_is(sub, "CHUNK") && argc == 7) {
        if (restore_chunk(ctx, argv, t)) goto done;
    } else if (ps_arg_is(sub, "DEDUP") && (argc == 6 || argc == 7)) {
        long long a1, a2, win = 0;
        size_t len;
        if (ps_arg_ll(ctx, argv[4], "seq", LLONG_MIN, LLONG_MAX, &a1) != REDISMODULE_OK ||
            ps_arg_ll(ctx, argv[5], "version", LLONG_MIN, LLONG_MAX, &a2) != REDISMODULE_OK ||
            (argc == 7 && ps_arg_ll(ctx, argv[6], "window", LLONG_MIN, LLONG_MAX, &win) != REDISMODULE_OK))
            goto done;
        const char *id = RedisModule_StringPtrLen(argv[3], &len);
        if (t->dedup_len >= t->dedup_max ||
            PSTensor_DedupRecord(t, id, len, (uint64_t)a1, (uint64_t)win, (uint64_t)a2) != PST_OK) {
            RedisModule_ReplyWithError(ctx, PSERR_RESTORE_DEDUP);
            goto done;
        }
    } else if (ps_arg_is(sub, "SNAPSHOT") && argc == 7) {
        if (restore_snapshot(ctx, argv, t)) goto done;
    } else if (ps_arg_is(sub, "RING") || ps_arg_is(sub, "RINGORIGIN") || ps_arg_is(sub, "RINGDELTA")) {
        if (restore_ring(ctx, argv, argc, t)) goto done;
    } else {
        RedisModule_ReplyWithError(ctx, PSERR_RESTORE_SYNTAX);
        goto done;
    }
    RedisModule_ReplicateVerbatim(ctx);
    RedisModule_ReplyWithSimpleString(ctx, "OK");
done:
    RedisModule_CloseKey(key);
    return REDISMODULE_OK;
}
