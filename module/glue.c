/* glue.c -- what every command file shares: the registered tensor type, the
 * module configs and counters, error replies, opening a key by kind, the
 * scratch buffers, and the after-write steps (notify, wake waiters). It
 * calls only Redis and the pure cores, so every glue file may call it and
 * it calls none of them back. */

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "embed_glue.h"
#include "ps_module.h"

/* The two registered types (type.c and type_embed.c register them). */
RedisModuleType *PSTensorType = NULL;
RedisModuleType *PSEmbedType = NULL;
PSConfig PSConf = {
    .max_tensor_bytes = 4LL << 30,
    .max_snapshots = 16,
    .dedup_max = 1024,
    .max_staleness = -1,
    .stale_policy = PS_POLICY_REJECT,
    .default_lr = 0.01,
    .max_pull_bytes = 512LL << 20,
    .scratch_keep_bytes = 16LL << 20,
    .max_blocked_pulls = 10000,
};
PSModuleStats PSStats;

/* ========================================================================
 * Shared helpers
 * ====================================================================== */

int ps_reply_errorf(RedisModuleCtx *ctx, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    /* Error replies must be one line. */
    for (char *p = buf; *p; p++)
        if (*p == '\r' || *p == '\n') *p = ' ';
    return RedisModule_ReplyWithError(ctx, buf);
}

PSTensor *ps_open_tensor(RedisModuleCtx *ctx, RedisModuleString *keyname, int mode,
                         RedisModuleKey **key, int *empty) {
    *key = RedisModule_OpenKey(ctx, keyname, mode);
    *empty = 0;
    int type = RedisModule_KeyType(*key);
    if (type == REDISMODULE_KEYTYPE_EMPTY) {
        *empty = 1;
        return NULL;
    }
    if (type != REDISMODULE_KEYTYPE_MODULE || RedisModule_ModuleTypeGetType(*key) != PSTensorType) {
        RedisModule_ReplyWithError(ctx, REDISMODULE_ERRORMSG_WRONGTYPE);
        return NULL;
    }
    return RedisModule_ModuleTypeGetValue(*key);
}

PSTensor *ps_open_tensor_or_reply(RedisModuleCtx *ctx, RedisModuleString *keyname, int mode,
                                  RedisModuleKey **key) {
    int empty;
    PSTensor *t = ps_open_tensor(ctx, keyname, mode, key, &empty);
    if (t) return t;
    if (empty) RedisModule_ReplyWithError(ctx, PSERR_NOKEY);
    RedisModule_CloseKey(*key);
    *key = NULL;
    return NULL;
}

int ps_reply_status(RedisModuleCtx *ctx, int status) {
    switch (status) {
    case PST_ERR_OOM: return RedisModule_ReplyWithError(ctx, PSERR_OOM);
    case PST_ERR_NONFINITE: return RedisModule_ReplyWithError(ctx, PSERR_NONFINITE);
    case PST_ERR_RANGE: return RedisModule_ReplyWithError(ctx, PSERR_RANGE);
    case PST_ERR_BACKLOG: return RedisModule_ReplyWithError(ctx, PSERR_BACKLOG);
    case PST_ERR_RINGLAG: return RedisModule_ReplyWithError(ctx, PSERR_RING_LAG);
    default: return RedisModule_ReplyWithError(ctx, PSERR_INTERNAL);
    }
}

/* Scratch buffers for decoding compressed blobs and encoding replies. A
 * request grows them to what it needs (a push of a compressed gradient then
 * does not allocate when the next one has the same size), but never keeps
 * more than ps.scratch-keep-bytes between requests: a large request frees
 * its memory when it ends (issue 11: a ROWS pull used to pin gigabytes). */
typedef struct Scratch {
    void *p;
    size_t cap; /* bytes */
} Scratch;
static Scratch FloatScratch, ByteScratch, IdScratch;
static int TrimScheduled = 0;

static void scratchTrimOneShot(void *unused) {
    (void)unused;
    TrimScheduled = 0;
    ps_scratch_trim();
}

/* Returns a buffer of at least 'bytes' from 's' (contents not kept), or NULL
 * on OOM (the old buffer is then freed too: nothing stays pinned). */
static void *scratch_get(Scratch *s, size_t bytes) {
    if (bytes <= s->cap) return s->p;
    PSTensor_Dealloc(s->p);
    s->p = PSTensor_Alloc(bytes);
    s->cap = s->p ? bytes : 0;
    /* Over the cache limit: make sure it is freed after this request even
     * when the caller does not trim (PS.CREATE/PS.SET decode through here). */
    if (s->p && bytes > (size_t)PSConf.scratch_keep_bytes && !TrimScheduled &&
        RedisModule_EventLoopAddOneShot(scratchTrimOneShot, NULL) == REDISMODULE_OK)
        TrimScheduled = 1;
    return s->p;
}

float *ps_scratch(uint64_t n) {
    if (n > SIZE_MAX / sizeof(float)) return NULL;
    return scratch_get(&FloatScratch, (size_t)n * sizeof(float));
}

unsigned char *ps_scratch_bytes(size_t bytes) { return scratch_get(&ByteScratch, bytes); }

uint64_t *ps_scratch_ids(uint64_t n) {
    if (n > SIZE_MAX / sizeof(uint64_t)) return NULL;
    return scratch_get(&IdScratch, (size_t)n * sizeof(uint64_t));
}

size_t ps_scratch_held(void) { return FloatScratch.cap + ByteScratch.cap + IdScratch.cap; }

size_t ps_scratch_trim(void) {
    Scratch *all[3] = {&FloatScratch, &ByteScratch, &IdScratch};
    for (int i = 0; i < 3; i++) {
        if (all[i]->cap > (size_t)PSConf.scratch_keep_bytes) {
            PSTensor_Dealloc(all[i]->p);
            all[i]->p = NULL;
            all[i]->cap = 0;
        }
    }
    return ps_scratch_held();
}

const unsigned char *ps_decode_dense(RedisModuleCtx *ctx, const char *what,
                                     RedisModuleString *blob, ps_format fmt, uint64_t n) {
    size_t len;
    const char *p = RedisModule_StringPtrLen(blob, &len);
    size_t need = ps_dense_encoded_size(fmt, (size_t)n);
    if (len != need) {
        ps_reply_errorf(ctx, PSERR_BLOBLEN_F, what, len, need, ps_format_name(fmt));
        return NULL;
    }
    if (fmt == PS_FMT_F32) return (const unsigned char *)p;
    float *dst = ps_scratch(n);
    if (!dst) {
        RedisModule_ReplyWithError(ctx, PSERR_OOM);
        return NULL;
    }
    ps_decode(fmt, (const unsigned char *)p, len, (size_t)n, dst);
    return (const unsigned char *)dst;
}

unsigned long long PSBlockedNow = 0;

void ps_signal_ready(RedisModuleCtx *ctx, RedisModuleString *key) {
    if (PSBlockedNow) RedisModule_SignalKeyAsReady(ctx, key);
}

void ps_notify(RedisModuleCtx *ctx, const char *event, RedisModuleString *key) {
    RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_MODULE, event, key);
}

void ps_values_overwritten(RedisModuleCtx *ctx, RedisModuleString *key, const char *event,
                           uint64_t n) {
    RedisModule_ReplicateVerbatim(ctx);
    ps_notify(ctx, event, key);
    ps_signal_ready(ctx, key);
    PSStats.sets++;
    PSStats.bytes_in += n * sizeof(float);
}

PSKeyKind ps_key_kind(RedisModuleKey *key) {
    const int type = RedisModule_KeyType(key);
    if (type == REDISMODULE_KEYTYPE_EMPTY) return PS_KIND_EMPTY;
    if (type != REDISMODULE_KEYTYPE_MODULE) return PS_KIND_OTHER;
    const RedisModuleType *mt = RedisModule_ModuleTypeGetType(key);
    if (mt == PSTensorType) return PS_KIND_TENSOR;
    if (mt == PSEmbedType) return PS_KIND_TABLE;
    return PS_KIND_OTHER;
}

void ps_reply_pair_ll(RedisModuleCtx *ctx, const char *name, long long v, long *n) {
    RedisModule_ReplyWithCString(ctx, name);
    RedisModule_ReplyWithLongLong(ctx, v);
    *n += 2;
}

void ps_reply_pair_d(RedisModuleCtx *ctx, const char *name, double v, long *n) {
    RedisModule_ReplyWithCString(ctx, name);
    RedisModule_ReplyWithDouble(ctx, v);
    *n += 2;
}

void ps_reply_pair_s(RedisModuleCtx *ctx, const char *name, const char *v, long *n) {
    RedisModule_ReplyWithCString(ctx, name);
    RedisModule_ReplyWithCString(ctx, v);
    *n += 2;
}
