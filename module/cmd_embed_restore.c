/* cmd_embed_restore.c -- the embedding-table parts of PS._RESTORE, which
 * an AOF rewrite of a ps-embeds value emits (type_embed.c) and an AOF load
 * replays:
 *
 *   PS._RESTORE key EMBED header-blob ENCVER v   a table under rebuild at key
 *   PS._RESTORE key EFILTER offset blob          admission filter chunks, in order
 *   PS._RESTORE key EROWS blob                   row blocks, in storage order
 *   PS._RESTORE key EEND                         the rebuild is complete
 *   PS._RESTORE key EDEDUP id seq window version an exactly-once entry
 *   PS._RESTORE key ETOMBS blob                  tombstone log entries, oldest first
 *   PS._RESTORE key ERING offset total piece     the ring state (cmd_ring.c), in order
 *
 * Every part goes through the validators of the RDB loader (header decode,
 * PSEmbed_LoadBegin / LoadRow / LoadEnd); a bad part answers an error. Until
 * EEND the key answers BUSY to every other command.
 *
 * Replication: verbatim (only ever replayed from an AOF). */

#include <string.h>

#include "embed_glue.h"

/* EMBED blob ENCVER v: a table under rebuild at 'key', replacing its value. */
static int restore_embed(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    long long encver;
    if (argc != 6 || !ps_arg_is(argv[4], "ENCVER"))
        return RedisModule_ReplyWithError(ctx, PSERR_RESTORE_SYNTAX);
    if (ps_arg_ll(ctx, argv[5], "ENCVER", PS_EMBED_ENCVER_FIRST, PS_EMBED_ENCVER_LATEST, &encver) !=
        REDISMODULE_OK)
        return REDISMODULE_OK;
    size_t len;
    const char *blob = RedisModule_StringPtrLen(argv[3], &len);
    /* The blob holds the words of its encoding; newer fields stay 0. */
    uint64_t w[PS_EMBED_HEADER_WORDS] = {0};
    if (len != PSEmbed_HeaderWords((int)encver) * sizeof(uint64_t))
        return RedisModule_ReplyWithError(ctx, PSERR_RESTORE_HEADER);
    memcpy(w, blob, len);
    PSEmbedPending *p = RedisModule_TryAlloc(sizeof(*p));
    if (!p) return RedisModule_ReplyWithError(ctx, PSERR_OOM);
    memset(p, 0, sizeof(*p));
    int64_t maxstale;
    uint32_t dedup_max;
    const char *why = PSEmbed_HeaderDecode(w, &p->cfg, &p->st, &maxstale, &dedup_max);
    if (!why) PSEmbed_HeaderUpgrade((int)encver, &p->cfg, &p->st);
    if (!why && p->st.nrows > PSE_MAX_ROWS) why = "too many rows";
    p->filter_len = PSEmbed_FilterLen(&p->cfg);
    if (!why && p->filter_len && !(p->filter = RedisModule_TryAlloc(p->filter_len))) why = "out of memory";
    PSEmbedValue *v = why ? NULL : PSEmbedValue_New(NULL, maxstale, dedup_max);
    if (!why && !v) why = "out of memory";
    if (v) {
        v->pending = p;
        v->restoring = 1;
        if (!p->filter_len) why = PSEmbedValue_PendingBegin(v);
    }
    if (why) {
        if (v) PSEmbedValue_Free(v);
        else PSEmbedPending_Free(p);
        return ps_reply_errorf(ctx, PSERR_RESTORE_HEADER_F, why);
    }
    RedisModuleKey *key = RedisModule_OpenKey(ctx, argv[1], REDISMODULE_READ | REDISMODULE_WRITE);
    RedisModule_ModuleTypeSetValue(key, PSEmbedType, v);
    RedisModule_CloseKey(key);
    RedisModule_ReplicateVerbatim(ctx);
    return RedisModule_ReplyWithSimpleString(ctx, "OK");
}

/* The parts after EMBED on a value under rebuild. Returns NULL or why the
 * part is bad. */
static const char *restore_part(RedisModuleCtx *ctx, RedisModuleString **argv, int argc,
                                PSEmbedValue *v) {
    RedisModuleString *sub = argv[2];
    if (ps_arg_is(sub, "EFILTER") && argc == 5) {
        long long off;
        size_t len;
        const char *p = RedisModule_StringPtrLen(argv[4], &len);
        if (!v->pending || RedisModule_StringToLongLong(argv[3], &off) != REDISMODULE_OK ||
            off < 0 || (size_t)off != v->pending->filled || len == 0 ||
            len > v->pending->filter_len - v->pending->filled)
            return "bad filter chunk";
        memcpy(v->pending->filter + off, p, len);
        v->pending->filled += len;
        return v->pending->filled == v->pending->filter_len ? PSEmbedValue_PendingBegin(v) : NULL;
    }
    if (ps_arg_is(sub, "EROWS") && argc == 4) {
        if (!v->t || !v->restoring) return "rows outside a rebuild";
        size_t len;
        const char *p = RedisModule_StringPtrLen(argv[3], &len);
        PSEmbedState st;
        PSEmbed_GetState(v->t, &st);
        float *scratch = RedisModule_TryAlloc((size_t)PSEmbed_NumFloats(PSEmbed_Config(v->t)) * sizeof(float));
        if (!scratch) return "out of memory";
        /* LoadRow bounds the rows by the announced count itself. */
        const char *why = PSEmbed_LoadBlock(v->t, (const unsigned char *)p, len, scratch, UINT64_MAX);
        RedisModule_Free(scratch);
        return why;
    }
    if (ps_arg_is(sub, "EEND") && argc == 3) {
        const char *why;
        if (!v->t || !v->restoring) return "end outside a rebuild";
        if (PSEmbed_LoadEnd(v->t, &why) != PSE_OK) return why;
        v->restoring = 0;
        return NULL;
    }
    if (ps_arg_is(sub, "EDEDUP") && argc == 7) {
        long long seq, win, ver;
        size_t len;
        const char *id = RedisModule_StringPtrLen(argv[3], &len);
        if (RedisModule_StringToLongLong(argv[4], &seq) != REDISMODULE_OK || seq < 1 ||
            RedisModule_StringToLongLong(argv[5], &win) != REDISMODULE_OK ||
            RedisModule_StringToLongLong(argv[6], &ver) != REDISMODULE_OK || ver < 0 ||
            len == 0 || len > PS_EMBED_MAX_CLIENT_ID || v->dd.len >= v->dd.max ||
            PSDedupSet_Find(&v->dd, id, len))
            return "bad exactly-once entry";
        if (PSDedupSet_Record(&v->dd, id, len, (uint64_t)seq, (uint64_t)win, (uint64_t)ver) != PS_DEDUP_OK)
            return "out of memory";
        return NULL;
    }
    if (ps_arg_is(sub, "ETOMBS") && argc == 4) {
        if (!v->t || v->restoring) return "tombstones outside a restored table";
        size_t len;
        const char *p = RedisModule_StringPtrLen(argv[3], &len);
        return PSEmbed_LoadTombBlock(v->t, (const unsigned char *)p, len, UINT64_MAX);
    }
    if (ps_arg_is(sub, "ERING") && argc == 6) {
        if (!v->t || v->restoring) return "ring state outside a restored table";
        return ps_ring_table_restore(v, argv, argc);
    }
    (void)ctx;
    return "syntax error";
}

int PSEmbedRestore_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (ps_arg_is(argv[2], "EMBED")) return restore_embed(ctx, argv, argc);
    RedisModuleKey *key = RedisModule_OpenKey(ctx, argv[1], REDISMODULE_READ | REDISMODULE_WRITE);
    if (RedisModule_KeyType(key) != REDISMODULE_KEYTYPE_MODULE ||
        RedisModule_ModuleTypeGetType(key) != PSEmbedType) {
        RedisModule_CloseKey(key);
        return RedisModule_ReplyWithError(ctx, PSERR_RESTORE_SYNTAX);
    }
    const char *why = restore_part(ctx, argv, argc, RedisModule_ModuleTypeGetValue(key));
    RedisModule_CloseKey(key);
    if (why) return ps_reply_errorf(ctx, PSERR_RESTORE_HEADER_F, why);
    RedisModule_ReplicateVerbatim(ctx);
    return RedisModule_ReplyWithSimpleString(ctx, "OK");
}

