/* module.c -- the redis-ps module: OnLoad, configs, INFO section, and the
 * helpers the command files share.
 *
 * Layout follows the house style: shared helpers, configs, INFO, OnLoad last.
 * The command table is cmd_table.c, command families live in cmd_*.c, the
 * data type in type.c, the value in tensor.c (snapshots in snapshot.c, the
 * saved header in header.c) and the kernels in optim.c. */

#define PS_REDISMODULE_DEFINE
#include "ps_module.h"
#include "embed_glue.h"

#include "fpguard.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

RedisModuleType *PSTensorType = NULL;
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

int ps_arg_is(RedisModuleString *arg, const char *keyword) {
    size_t len;
    const char *s = RedisModule_StringPtrLen(arg, &len);
    return len == strlen(keyword) && strncasecmp(s, keyword, len) == 0;
}

int ps_arg_ll(RedisModuleCtx *ctx, RedisModuleString *arg, const char *what, long long min,
              long long max, long long *out) {
    long long v;
    if (RedisModule_StringToLongLong(arg, &v) != REDISMODULE_OK || v < min || v > max) {
        ps_reply_errorf(ctx, PSERR_NOT_INT_F, what);
        return REDISMODULE_ERR;
    }
    *out = v;
    return REDISMODULE_OK;
}

int ps_arg_u64(RedisModuleCtx *ctx, RedisModuleString *arg, const char *what, uint64_t *out) {
    size_t len;
    const char *s = RedisModule_StringPtrLen(arg, &len);
    char buf[32];
    if (len == 0 || len >= sizeof(buf) || s[0] == '-' || s[0] == '+' || s[0] == ' ') goto bad;
    memcpy(buf, s, len);
    buf[len] = '\0';
    for (size_t i = 0; i < len; i++)
        if (buf[i] < '0' || buf[i] > '9') goto bad;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(buf, &end, 10);
    if (errno || *end) goto bad;
    *out = v;
    return REDISMODULE_OK;
bad:
    ps_reply_errorf(ctx, PSERR_NOT_INT_F, what);
    return REDISMODULE_ERR;
}

int ps_arg_double(RedisModuleCtx *ctx, RedisModuleString *arg, const char *what, double *out) {
    double v;
    if (RedisModule_StringToDouble(arg, &v) != REDISMODULE_OK || !isfinite(v)) {
        ps_reply_errorf(ctx, PSERR_NOT_FLOAT_F, what);
        return REDISMODULE_ERR;
    }
    *out = v;
    return REDISMODULE_OK;
}

int ps_option_at(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, int i,
                 const PSOption *opts, unsigned *seen) {
    const char *an = RedisModule_StringPtrLen(argv[i], NULL);
    for (int k = 0; opts[k].name; k++) {
        if (!ps_arg_is(argv[i], opts[k].name)) continue;
        if (*seen & (1u << k)) {
            ps_reply_errorf(ctx, PSERR_DUP_OPT_F, opts[k].name);
            return -1;
        }
        if (i + opts[k].nvals >= argc) {
            ps_reply_errorf(ctx, PSERR_MISSING_ARG_F, opts[k].name);
            return -1;
        }
        *seen |= 1u << k;
        return k;
    }
    ps_reply_errorf(ctx, PSERR_UNKNOWN_OPT_F, an);
    return -1;
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
static Scratch FloatScratch, ByteScratch;
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

size_t ps_scratch_held(void) { return FloatScratch.cap + ByteScratch.cap; }

size_t ps_scratch_trim(void) {
    Scratch *all[2] = {&FloatScratch, &ByteScratch};
    for (int i = 0; i < 2; i++) {
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

/* ========================================================================
 * Configs (CONFIG SET/GET ps.*, or in redis.conf after loadmodule)
 * ====================================================================== */

static long long getNumericConfig(const char *name, void *privdata) {
    (void)name;
    return *(long long *)privdata;
}

static int setNumericConfig(const char *name, long long val, void *privdata,
                            RedisModuleString **err) {
    (void)name;
    (void)err;
    *(long long *)privdata = val;
    return REDISMODULE_OK;
}

static RedisModuleString *LrString = NULL, *PolicyString = NULL;

static RedisModuleString *getStringConfig(const char *name, void *privdata) {
    (void)name;
    return *(RedisModuleString **)privdata;
}

/* ps.default-lr: a finite float >= 0 (floats are string configs in 7.0). */
static int setLrConfig(const char *name, RedisModuleString *val, void *privdata,
                       RedisModuleString **err) {
    (void)name;
    double v;
    if (RedisModule_StringToDouble(val, &v) != REDISMODULE_OK || !isfinite(v) || v < 0) {
        *err = RedisModule_CreateString(NULL, "ps.default-lr must be a finite number >= 0", 42);
        return REDISMODULE_ERR;
    }
    size_t len;
    const char *s = RedisModule_StringPtrLen(val, &len);
    RedisModuleString **slot = privdata;
    if (*slot) RedisModule_FreeString(NULL, *slot);
    *slot = RedisModule_CreateString(NULL, s, len);
    PSConf.default_lr = v;
    return REDISMODULE_OK;
}

/* ps.default-staleness-policy: reject | scale. */
static int setPolicyConfig(const char *name, RedisModuleString *val, void *privdata,
                           RedisModuleString **err) {
    (void)name;
    int policy;
    if (ps_arg_is(val, "reject")) {
        policy = PS_POLICY_REJECT;
    } else if (ps_arg_is(val, "scale")) {
        policy = PS_POLICY_SCALE;
    } else {
        const char *msg = "ps.default-staleness-policy must be reject or scale";
        *err = RedisModule_CreateString(NULL, msg, strlen(msg));
        return REDISMODULE_ERR;
    }
    RedisModuleString **slot = privdata;
    if (*slot) RedisModule_FreeString(NULL, *slot);
    *slot = RedisModule_CreateString(NULL, policy ? "scale" : "reject", policy ? 5 : 6);
    PSConf.stale_policy = policy;
    return REDISMODULE_OK;
}

static int registerConfigs(RedisModuleCtx *ctx) {
    int ok = 1;
    ok &= RedisModule_RegisterNumericConfig(
              ctx, "max-tensor-bytes", PSConf.max_tensor_bytes, REDISMODULE_CONFIG_MEMORY, 4,
              1LL << 50, getNumericConfig, setNumericConfig, NULL, &PSConf.max_tensor_bytes) ==
          REDISMODULE_OK;
    ok &= RedisModule_RegisterNumericConfig(ctx, "max-snapshots", PSConf.max_snapshots,
                                            REDISMODULE_CONFIG_DEFAULT, 0, 4096, getNumericConfig,
                                            setNumericConfig, NULL,
                                            &PSConf.max_snapshots) == REDISMODULE_OK;
    ok &= RedisModule_RegisterNumericConfig(ctx, "dedup-max-clients", PSConf.dedup_max,
                                            REDISMODULE_CONFIG_DEFAULT, 0, 1 << 20,
                                            getNumericConfig, setNumericConfig, NULL,
                                            &PSConf.dedup_max) == REDISMODULE_OK;
    ok &= RedisModule_RegisterNumericConfig(ctx, "default-max-staleness", PSConf.max_staleness,
                                            REDISMODULE_CONFIG_DEFAULT, -1, 1LL << 40,
                                            getNumericConfig, setNumericConfig, NULL,
                                            &PSConf.max_staleness) == REDISMODULE_OK;
    ok &= RedisModule_RegisterStringConfig(ctx, "default-lr", "0.01", REDISMODULE_CONFIG_DEFAULT,
                                           getStringConfig, setLrConfig, NULL,
                                           &LrString) == REDISMODULE_OK;
    ok &= RedisModule_RegisterStringConfig(ctx, "default-staleness-policy", "reject",
                                           REDISMODULE_CONFIG_DEFAULT, getStringConfig,
                                           setPolicyConfig, NULL,
                                           &PolicyString) == REDISMODULE_OK;
    /* Request-sized memory bounds (issue 11, docs/commands.md "Limits"). */
    ok &= RedisModule_RegisterNumericConfig(ctx, "max-pull-bytes", PSConf.max_pull_bytes,
                                            REDISMODULE_CONFIG_MEMORY, 4, 1LL << 50,
                                            getNumericConfig, setNumericConfig, NULL,
                                            &PSConf.max_pull_bytes) == REDISMODULE_OK;
    ok &= RedisModule_RegisterNumericConfig(ctx, "scratch-keep-bytes", PSConf.scratch_keep_bytes,
                                            REDISMODULE_CONFIG_MEMORY, 0, 1LL << 40,
                                            getNumericConfig, setNumericConfig, NULL,
                                            &PSConf.scratch_keep_bytes) == REDISMODULE_OK;
    ok &= RedisModule_RegisterNumericConfig(ctx, "max-blocked-pulls", PSConf.max_blocked_pulls,
                                            REDISMODULE_CONFIG_DEFAULT, 0, 1 << 20,
                                            getNumericConfig, setNumericConfig, NULL,
                                            &PSConf.max_blocked_pulls) == REDISMODULE_OK;
    return ok ? REDISMODULE_OK : REDISMODULE_ERR;
}

/* ========================================================================
 * INFO ps
 * ====================================================================== */

static void infoFunc(RedisModuleInfoCtx *ctx, int for_crash_report) {
    (void)for_crash_report;
    RedisModule_InfoAddSection(ctx, "");
#define F(name) RedisModule_InfoAddFieldULongLong(ctx, #name, PSStats.name)
    F(creates);
    F(pushes);
    F(pulls);
    F(sets);
    F(bytes_in);
    F(bytes_out);
    F(stale_rejects);
    F(dedup_hits);
    F(nonfinite_rejects);
    F(blocked_pulls);
    RedisModule_InfoAddFieldULongLong(ctx, "blocked_pulls_now", PSBlockedNow);
    F(blocked_timeouts);
    F(rounds_closed);
    F(rounds_timed_out);
    F(snapshots);
    F(rollbacks);
    F(pulls_refused);
    F(blocked_pulls_gone);
    RedisModule_InfoAddFieldULongLong(ctx, "round_timers", ps_round_timers_pending());
    RedisModule_InfoAddFieldULongLong(ctx, "scratch_bytes", ps_scratch_held());
#undef F
#define E(name) RedisModule_InfoAddFieldULongLong(ctx, "embed_" #name, PSEmbedCounters.name)
    E(creates);
    E(pushes);
    E(pulls);
    E(ids_pushed);
    E(ids_pulled);
    E(rows_created);
    E(ids_dropped);
    E(rows_evicted);
    E(scans);
#undef E
}

/* ========================================================================
 * OnLoad
 * ====================================================================== */

static void *tryAllocHook(size_t bytes) { return RedisModule_TryAlloc(bytes); }
static void freeHook(void *p) { RedisModule_Free(p); }

__attribute__((visibility("default"))) int RedisModule_OnLoad(RedisModuleCtx *ctx,
                                                              RedisModuleString **argv,
                                                              int argc) {
    (void)argv;
    (void)argc;
    const char *missing = NULL;
    if (RedisModule_Init(ctx, PS_MODULE_NAME, PS_MODULE_VERSION, REDISMODULE_APIVER_1,
                         &missing) == REDISMODULE_ERR) {
        if (missing)
            fprintf(stderr, "ps module: this Redis lacks %s (Redis 7.0 or newer is needed)\n",
                    missing);
        return REDISMODULE_ERR;
    }
    /* Determinism: refuse a process whose FPU mode another module changed,
     * or a build whose kernels fuse multiply-adds (see fpguard.h). */
    const char *fpwhy = ps_fpu_mode_check();
    if (!fpwhy) fpwhy = ps_fp_contract_check();
    if (fpwhy) {
        RedisModule_Log(ctx, "warning",
                        "ps: refusing to load: %s; replicas and AOF replays would not stay "
                        "bit-identical",
                        fpwhy);
        return REDISMODULE_ERR;
    }
    PSTensor_SetAllocator(tryAllocHook, freeHook);
    PSEmbed_SetAllocator(tryAllocHook, freeHook);
    RedisModule_SetModuleOptions(ctx, REDISMODULE_OPTIONS_HANDLE_IO_ERRORS);

    if (PSType_Register(ctx) == REDISMODULE_ERR) return REDISMODULE_ERR;
    if (PSEmbedType_Register(ctx) == REDISMODULE_ERR) return REDISMODULE_ERR;
    if (PSCommands_Register(ctx) == REDISMODULE_ERR) return REDISMODULE_ERR;
    if (PSRoundHooks_Register(ctx) == REDISMODULE_ERR || PSPushHooks_Register(ctx) == REDISMODULE_ERR ||
        PSRelayHooks_Register(ctx) == REDISMODULE_ERR)
        return REDISMODULE_ERR;
    if (registerConfigs(ctx) == REDISMODULE_ERR) {
        RedisModule_Log(ctx, "warning", "could not register ps.* configs");
        return REDISMODULE_ERR;
    }
    if (RedisModule_LoadConfigs(ctx) == REDISMODULE_ERR) return REDISMODULE_ERR;
    if (RedisModule_RegisterInfoFunc(ctx, infoFunc) == REDISMODULE_ERR) return REDISMODULE_ERR;
    return REDISMODULE_OK;
}
