/* module.c -- the redis-ps module: OnLoad, configs and the INFO section;
 * the top of the module, which nothing else calls.
 *
 * Layout follows the house style: configs, INFO, OnLoad last. The command
 * table and its routers are cmd_table.c, argument parsing args.c, the
 * helpers the command files share glue.c, command families live in
 * cmd_*.c, the data types in type.c and type_embed.c, the values in
 * tensor.c (snapshots in snapshot.c, the saved header in header.c) and
 * embed.c, and the kernels in optim.c and embed_optim.c. */

#define PS_REDISMODULE_DEFINE
#include "ps_module.h"
#include "embed_glue.h"
#include "waiters.h"

#include "fpguard.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

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
        *err = RedisModule_CreateString(NULL, PSERR_CONF_DEFAULT_LR, strlen(PSERR_CONF_DEFAULT_LR));
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
        *err = RedisModule_CreateString(NULL, PSERR_CONF_POLICY, strlen(PSERR_CONF_POLICY));
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
    if (PSRoundHooks_Register(ctx) == REDISMODULE_ERR ||
        PSWaiterHooks_Register(ctx) == REDISMODULE_ERR)
        return REDISMODULE_ERR;
    if (registerConfigs(ctx) == REDISMODULE_ERR) {
        RedisModule_Log(ctx, "warning", "could not register ps.* configs");
        return REDISMODULE_ERR;
    }
    if (RedisModule_LoadConfigs(ctx) == REDISMODULE_ERR) return REDISMODULE_ERR;
    if (RedisModule_RegisterInfoFunc(ctx, infoFunc) == REDISMODULE_ERR) return REDISMODULE_ERR;
    return REDISMODULE_OK;
}
