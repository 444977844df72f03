/* cmd_tensor.c -- PS.CREATE, PS.SET, PS.INFO, PS.CONFIG. The options of
 * PS.CREATE and PS.CONFIG, INFO's fields and the replicated PS.CREATE are
 * generated from the hyper-parameter list (hparams.h).
 *
 * Replication, decided here per handler:
 *   PS.CREATE   verbatim, except a random INIT without SEED: replicated with
 *               the server-chosen SEED appended (the effect, not the choice).
 *   PS.SET      verbatim (a deterministic overwrite).
 *   PS.CONFIG   verbatim.
 *   PS.INFO     read-only, never replicated. */

#include <limits.h>
#include <math.h>
#include <string.h>

#include "accum.h"
#include "ps_module.h"

/* ========================================================================
 * Option parsing shared by PS.CREATE and PS.CONFIG
 * ====================================================================== */

/* Parses one hyper-parameter / policy option at argv[*i] into 'o'. Returns
 * 1 when argv[*i] was such an option (consumed with its value, *i advanced),
 * 0 when it is not one, -1 after replying an error. */
/* The options besides the hyper-parameters: name, bounds of their value
 * (POLICY takes a word). Their order after the hyper-parameters gives each
 * option its bit in 'seen'. */
enum {
    SET_MAXSTALENESS = PS_HP_COUNT,
    SET_POLICY,
    SET_SYNC,
    SET_TIMEOUT,
    SET_DEDUPMAX,
    SET_MAXSNAPSHOTS,
    OPTION_COUNT /* hyper-parameters + settings */
};
static const struct {
    const char *name;
    long long min, max;
} Settings[] = {
    {"MAXSTALENESS", -1, 1LL << 40}, {"POLICY", 0, 0},       {"SYNC", 0, 1 << 20},
    {"TIMEOUT", 0, 1LL << 40},       {"DEDUPMAX", 0, 1 << 20}, {"MAXSNAPSHOTS", 0, 4096},
};
_Static_assert(sizeof(Settings) / sizeof(Settings[0]) == OPTION_COUNT - PS_HP_COUNT,
               "a setting without its name and bounds");
_Static_assert(OPTION_COUNT <= 32, "option bits of 'seen' overflow an unsigned");

/* Hyper-parameter keywords and their PSHyper members, from hparams.h. */
static const struct {
    const char *name;
    size_t off;
} Hypers[PS_HP_COUNT] = {
#define PS_HP_ENTRY(K, f, d, r, s) {#K, offsetof(PSHyper, f)},
    PS_HYPERPARAMS(PS_HP_ENTRY)
#undef PS_HP_ENTRY
};

static const char *option_name(int k) { return k < PS_HP_COUNT ? Hypers[k].name : Settings[k - PS_HP_COUNT].name; }

/* Parses one hyper-parameter / policy option at argv[*i] into 'o'. Returns
 * 1 when argv[*i] was such an option (consumed with its value, *i advanced),
 * 0 when it is not one, -1 after replying an error. */
static int parse_tensor_option(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, int *i,
                               PSTensorOpts *o, int *sync_seen, unsigned *seen) {
    RedisModuleString *val;
    const int k = ps_arg_option(ctx, argv, argc, i, OPTION_COUNT, option_name, seen, &val);
    if (k < 0) return -1;
    if (k == OPTION_COUNT) return 0;
    if (k < PS_HP_COUNT) {
        double v;
        if (ps_arg_double(ctx, val, Hypers[k].name, &v) != REDISMODULE_OK) return -1;
        *(double *)((char *)&o->h + Hypers[k].off) = v;
        return 1;
    }
    if (k == SET_POLICY) {
        if (ps_arg_is(val, "REJECT")) {
            o->policy = PS_POLICY_REJECT;
        } else if (ps_arg_is(val, "SCALE")) {
            o->policy = PS_POLICY_SCALE;
        } else {
            ps_reply_errorf(ctx, PSERR_SYNTAX_F, RedisModule_StringPtrLen(val, NULL));
            return -1;
        }
        return 1;
    }
    long long ll;
    const int si = k - PS_HP_COUNT;
    if (ps_arg_ll(ctx, val, Settings[si].name, Settings[si].min, Settings[si].max, &ll) != REDISMODULE_OK)
        return -1;
    switch (k) {
    case SET_MAXSTALENESS: o->maxstale = ll; break;
    case SET_SYNC:
        o->sync_n = (uint32_t)ll;
        *sync_seen = 1;
        break;
    case SET_TIMEOUT: o->sync_timeout_ms = ll; break;
    case SET_DEDUPMAX: o->dedup_max = (uint32_t)ll; break;
    default: o->max_snapshots = (uint32_t)ll; break;
    }
    return 1;
}

/* ========================================================================
 * PS.CREATE
 * ====================================================================== */

/* Replicates a create as its effect: every option spelled out (the module
 * configs that supplied defaults on this server may differ on a replica or
 * when the AOF is replayed), the seed resolved, DATA passed through. */
static void replicate_create(RedisModuleCtx *ctx, RedisModuleString **argv, uint32_t ndim,
                             const uint64_t *dims, const PSInit *init, RedisModuleString *data,
                             ps_format fmt, const PSTensorOpts *o) {
    /* key, SHAPE dims, the longest INIT/DATA part (6), OPTIM name, every
     * hyper-parameter and setting with its value. */
    enum { MAXV = 2 + PS_MAX_DIMS + 6 + 2 + 2 * OPTION_COUNT };
    RedisModuleString *v[MAXV];
    int owned[MAXV];
    int n = 0;
#define ARG(str) (owned[n] = 0, v[n++] = (str))
#define LIT(cstr) (owned[n] = 1, v[n++] = RedisModule_CreateString(ctx, cstr, strlen(cstr)))
#define FMT(...) (owned[n] = 1, v[n++] = RedisModule_CreateStringPrintf(ctx, __VA_ARGS__))
    ARG(argv[1]);
    LIT("SHAPE");
    for (uint32_t i = 0; i < ndim; i++) FMT("%llu", (unsigned long long)dims[i]);
    if (data) {
        LIT("DATA");
        ARG(data);
        LIT("FORMAT");
        LIT(ps_format_name(fmt));
    } else {
        static const char *names[] = {"ZEROS", "CONST", "UNIFORM", "NORMAL", "XAVIER", "HE"};
        LIT("INIT");
        LIT(names[init->kind]);
        if (init->kind == PS_INIT_CONST) FMT("%.17g", init->a);
        if (init->kind == PS_INIT_UNIFORM || init->kind == PS_INIT_NORMAL) {
            FMT("%.17g", init->a);
            FMT("%.17g", init->b);
        }
        LIT("SEED");
        FMT("%llu", (unsigned long long)init->seed);
    }
    LIT("OPTIM");
    LIT(ps_optim_name(o->optim));
#define PS_HP_REPL(K, f, d, r, s) LIT(#K), FMT("%.17g", o->h.f);
    PS_HYPERPARAMS(PS_HP_REPL)
#undef PS_HP_REPL
    LIT("MAXSTALENESS");
    FMT("%lld", (long long)o->maxstale);
    LIT("POLICY");
    LIT(o->policy == PS_POLICY_SCALE ? "SCALE" : "REJECT");
    LIT("SYNC");
    FMT("%u", o->sync_n);
    LIT("TIMEOUT");
    FMT("%lld", (long long)o->sync_timeout_ms);
    LIT("DEDUPMAX");
    FMT("%u", o->dedup_max);
    LIT("MAXSNAPSHOTS");
    FMT("%u", o->max_snapshots);
#undef ARG
#undef LIT
#undef FMT
    RedisModule_Replicate(ctx, "ps.create", "v", v, (size_t)n);
    for (int i = 0; i < n; i++)
        if (owned[i]) RedisModule_FreeString(ctx, v[i]);
}

/* Whether 'bytes' more fit under maxmemory (always, without a limit). */
static int create_fits(RedisModuleCtx *ctx, uint64_t bytes) {
    RedisModuleServerInfoData *inf = RedisModule_GetServerInfo(ctx, "memory");
    if (!inf) return 1;
    int e1 = 0, e2 = 0;
    unsigned long long maxmem = RedisModule_ServerInfoGetFieldUnsigned(inf, "maxmemory", &e1);
    unsigned long long used = RedisModule_ServerInfoGetFieldUnsigned(inf, "used_memory", &e2);
    RedisModule_FreeServerInfo(ctx, inf);
    if (e1 || e2 || maxmem == 0) return 1;
    return used <= maxmem && bytes <= maxmem - used;
}

/* PS.CREATE key SHAPE d1 [d2 ...] [INIT ...] [DATA blob [FORMAT f]] [SEED s]
 *           [OPTIM name] [LR x] ... [NX] */
int ps_tensor_create(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    uint64_t dims[PS_MAX_DIMS];
    uint32_t ndim = 0;
    int have_shape = 0, have_init = 0, have_seed = 0, nx = 0, have_fmt = 0, sync_seen = 0;
    int have_optim = 0;
    unsigned seen = 0;
    PSInit init = {.kind = PS_INIT_ZEROS};
    RedisModuleString *data = NULL;
    ps_format fmt = PS_FMT_F32;
    PSTensorOpts o;
    PSTensor_DefaultOpts(&o, PSConf.default_lr);
    o.maxstale = PSConf.max_staleness;
    o.policy = (int)PSConf.stale_policy;
    o.dedup_max = (uint32_t)PSConf.dedup_max;
    o.max_snapshots = (uint32_t)PSConf.max_snapshots;

    for (int i = 2; i < argc;) {
        RedisModuleString *a = argv[i];
        const char *aname = RedisModule_StringPtrLen(a, NULL);
        if (ps_arg_is(a, "SHAPE")) {
            if (have_shape) return ps_reply_errorf(ctx, PSERR_DUP_OPT_F, "SHAPE");
            have_shape = 1;
            i++;
            long long d;
            while (i < argc && RedisModule_StringToLongLong(argv[i], &d) == REDISMODULE_OK) {
                if (ndim == PS_MAX_DIMS)
                    return ps_reply_errorf(ctx, PSERR_SHAPE_F, "ndim must be 1..8");
                if (d <= 0)
                    return ps_reply_errorf(ctx, PSERR_SHAPE_F, "every dimension must be >= 1");
                dims[ndim++] = (uint64_t)d;
                i++;
            }
            if (ndim == 0) return ps_reply_errorf(ctx, PSERR_SHAPE_F, "SHAPE needs dimensions");
            continue;
        }
        if (ps_arg_is(a, "NX")) {
            nx = 1;
            i++;
            continue;
        }
        if (ps_arg_is(a, "INIT")) {
            if (have_init) return ps_reply_errorf(ctx, PSERR_DUP_OPT_F, "INIT");
            if (i + 1 >= argc) return ps_reply_errorf(ctx, PSERR_MISSING_ARG_F, "INIT");
            have_init = 1;
            RedisModuleString *k = argv[i + 1];
            i += 2;
            int nargs = 0;
            if (ps_arg_is(k, "ZEROS")) {
                init.kind = PS_INIT_ZEROS;
            } else if (ps_arg_is(k, "CONST")) {
                init.kind = PS_INIT_CONST;
                nargs = 1;
            } else if (ps_arg_is(k, "UNIFORM")) {
                init.kind = PS_INIT_UNIFORM;
                nargs = 2;
            } else if (ps_arg_is(k, "NORMAL")) {
                init.kind = PS_INIT_NORMAL;
                nargs = 2;
            } else if (ps_arg_is(k, "XAVIER")) {
                init.kind = PS_INIT_XAVIER;
            } else if (ps_arg_is(k, "HE")) {
                init.kind = PS_INIT_HE;
            } else {
                return ps_reply_errorf(ctx, PSERR_SYNTAX_F, RedisModule_StringPtrLen(k, NULL));
            }
            if (i + nargs > argc) return ps_reply_errorf(ctx, PSERR_MISSING_ARG_F, "INIT");
            if (nargs >= 1 && ps_arg_double(ctx, argv[i], "INIT", &init.a) != REDISMODULE_OK)
                return REDISMODULE_OK;
            if (nargs >= 2 && ps_arg_double(ctx, argv[i + 1], "INIT", &init.b) != REDISMODULE_OK)
                return REDISMODULE_OK;
            i += nargs;
            if (init.kind == PS_INIT_UNIFORM && !(init.a <= init.b))
                return RedisModule_ReplyWithError(ctx, PSERR_INIT_UNIFORM);
            if (init.kind == PS_INIT_NORMAL && init.b < 0)
                return RedisModule_ReplyWithError(ctx, PSERR_INIT_NORMAL);
            continue;
        }
        if (ps_arg_is(a, "DATA")) {
            if (data) return ps_reply_errorf(ctx, PSERR_DUP_OPT_F, "DATA");
            if (i + 1 >= argc) return ps_reply_errorf(ctx, PSERR_MISSING_ARG_F, "DATA");
            data = argv[i + 1];
            i += 2;
            continue;
        }
        if (ps_arg_is(a, "FORMAT")) {
            if (have_fmt) return ps_reply_errorf(ctx, PSERR_DUP_OPT_F, "FORMAT");
            if (i + 1 >= argc) return ps_reply_errorf(ctx, PSERR_MISSING_ARG_F, "FORMAT");
            size_t fl;
            const char *fs = RedisModule_StringPtrLen(argv[i + 1], &fl);
            if (ps_format_parse(fs, fl, &fmt) != 0) return ps_reply_errorf(ctx, PSERR_FORMAT_F, fs);
            if (!ps_proto_format_dense(fmt)) /* TOPK (common/protocol.h) */
                return ps_reply_errorf(ctx, PSERR_FORMAT_NOT_HERE_F, ps_format_name(fmt));
            have_fmt = 1;
            i += 2;
            continue;
        }
        if (ps_arg_is(a, "SEED")) {
            if (have_seed) return ps_reply_errorf(ctx, PSERR_DUP_OPT_F, "SEED");
            if (i + 1 >= argc) return ps_reply_errorf(ctx, PSERR_MISSING_ARG_F, "SEED");
            if (ps_arg_u64(ctx, argv[i + 1], "SEED", &init.seed) != REDISMODULE_OK)
                return REDISMODULE_OK;
            have_seed = 1;
            i += 2;
            continue;
        }
        if (ps_arg_is(a, "OPTIM")) {
            if (have_optim) return ps_reply_errorf(ctx, PSERR_DUP_OPT_F, "OPTIM");
            have_optim = 1;
            if (i + 1 >= argc) return ps_reply_errorf(ctx, PSERR_MISSING_ARG_F, "OPTIM");
            size_t ol;
            const char *os = RedisModule_StringPtrLen(argv[i + 1], &ol);
            int k = ps_optim_parse(os, ol);
            if (k < 0) return ps_reply_errorf(ctx, PSERR_OPTIM_F, os);
            o.optim = k;
            i += 2;
            continue;
        }
        int r = parse_tensor_option(ctx, argv, argc, &i, &o, &sync_seen, &seen);
        if (r < 0) return REDISMODULE_OK;
        if (r == 0) return ps_reply_errorf(ctx, PSERR_UNKNOWN_OPT_F, aname);
    }
    if (!have_shape) return RedisModule_ReplyWithError(ctx, PSERR_NO_SHAPE);
    if (o.optim == PS_OPT_ACCUM && o.sync_n) return RedisModule_ReplyWithError(ctx, PSERR_ACCUM_SYNC);
    if (have_init && data) return RedisModule_ReplyWithError(ctx, PSERR_INIT_AND_DATA);
    if (have_fmt && !data) return RedisModule_ReplyWithError(ctx, PSERR_FORMAT_NEEDS_DATA);
    const char *herr = ps_optim_check(&o.h);
    if (herr) return ps_reply_errorf(ctx, PSERR_HYPER_F, herr);

    uint64_t n;
    const char *serr;
    if (ps_shape_check(ndim, dims, 0, &n, &serr) != 0) return ps_reply_errorf(ctx, PSERR_SHAPE_F, serr);
    /* The limit guards this server's clients; a create replicated from a
     * master (or replayed from the AOF) was already admitted there. */
    const int trusted = RedisModule_GetContextFlags(ctx) &
                        (REDISMODULE_CTX_FLAGS_REPLICATED | REDISMODULE_CTX_FLAGS_LOADING);
    if (!trusted && n * sizeof(float) > (uint64_t)PSConf.max_tensor_bytes)
        return ps_reply_errorf(ctx, PSERR_TOO_BIG_F, (unsigned long long)(n * sizeof(float)),
                               (unsigned long long)PSConf.max_tensor_bytes);
    /* deny-oom refuses only once memory is already over maxmemory; a new
     * tensor must also fit (values and optimizer state). */
    if (!trusted && !create_fits(ctx, n * sizeof(float) * (uint64_t)(1 + ps_optim_nstate(o.optim))))
        return RedisModule_ReplyWithError(ctx, PSERR_OOM);
    const unsigned char *vals = NULL;
    if (data) {
        if (!(vals = ps_decode_dense(ctx, "DATA", data, fmt, n))) return REDISMODULE_OK;
        if (!ps_all_finite(vals, (size_t)n)) return RedisModule_ReplyWithError(ctx, PSERR_NONFINITE_DATA);
    }

    RedisModuleKey *key = RedisModule_OpenKey(ctx, argv[1], REDISMODULE_READ | REDISMODULE_WRITE);
    if (RedisModule_KeyType(key) != REDISMODULE_KEYTYPE_EMPTY) {
        RedisModule_CloseKey(key);
        return nx ? RedisModule_ReplyWithNull(ctx) : RedisModule_ReplyWithError(ctx, PSERR_BUSYKEY);
    }
    PSTensor *t = PSTensor_New(ndim, dims, n, &o);
    if (!t) {
        RedisModule_CloseKey(key);
        return RedisModule_ReplyWithError(ctx, PSERR_OOM);
    }
    const int random = init.kind == PS_INIT_UNIFORM || init.kind == PS_INIT_NORMAL ||
                       init.kind == PS_INIT_XAVIER || init.kind == PS_INIT_HE;
    if (vals) {
        memcpy(t->data->v, vals, (size_t)n * sizeof(float));
    } else {
        if (random && !have_seed) {
            /* Server-chosen seed below 2^63 so it replicates as a plain integer. */
            RedisModule_GetRandomBytes((unsigned char *)&init.seed, sizeof(init.seed));
            init.seed &= 0x7fffffffffffffffULL;
        }
        PSTensor_Fill(t, &init);
    }
    RedisModule_ModuleTypeSetValue(key, PSTensorType, t);
    RedisModule_CloseKey(key);
    replicate_create(ctx, argv, ndim, dims, &init, data, fmt, &o);
    ps_notify(ctx, "ps.create", argv[1]);
    PSStats.creates++;
    return RedisModule_ReplyWithSimpleString(ctx, "OK");
}

/* ========================================================================
 * PS.SET
 * ====================================================================== */

/* PS.SET key blob [FORMAT f] -> new version */
int PSSet_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 3 && argc != 5) return RedisModule_WrongArity(ctx);
    ps_format fmt = PS_FMT_F32;
    if (argc == 5) {
        if (!ps_arg_is(argv[3], "FORMAT"))
            return ps_reply_errorf(ctx, PSERR_UNKNOWN_OPT_F, RedisModule_StringPtrLen(argv[3], NULL));
        size_t fl;
        const char *fs = RedisModule_StringPtrLen(argv[4], &fl);
        if (ps_format_parse(fs, fl, &fmt) != 0) return ps_reply_errorf(ctx, PSERR_FORMAT_F, fs);
        if (!ps_proto_format_dense(fmt)) /* TOPK (common/protocol.h) */
            return ps_reply_errorf(ctx, PSERR_FORMAT_NOT_HERE_F, ps_format_name(fmt));
    }
    RedisModuleKey *key;
    PSTensor *t = ps_open_tensor_or_reply(ctx, argv[1], REDISMODULE_READ | REDISMODULE_WRITE, &key);
    if (!t) return REDISMODULE_OK;
    if (t->round_count) {
        RedisModule_ReplyWithError(ctx, PSERR_ROUND_OPEN);
        goto done;
    }
    const unsigned char *vals = ps_decode_dense(ctx, "data", argv[2], fmt, t->n);
    if (!vals) goto done;
    if (!ps_all_finite(vals, (size_t)t->n)) {
        RedisModule_ReplyWithError(ctx, PSERR_NONFINITE_DATA);
        goto done;
    }
    if (PSTensor_SetValues(t, vals) != PST_OK) {
        RedisModule_ReplyWithError(ctx, PSERR_OOM);
        goto done;
    }
    ps_values_overwritten(ctx, argv[1], "ps.set", t->n);
    RedisModule_ReplyWithLongLong(ctx, (long long)t->version);
done:
    RedisModule_CloseKey(key);
    return REDISMODULE_OK;
}

/* ========================================================================
 * PS.INFO
 * ====================================================================== */

/* PS.INFO key -> flat array of field/value pairs */
int ps_tensor_info(RedisModuleCtx *ctx, PSTensor *t) {
    long n = 0;
    RedisModule_ReplyWithArray(ctx, REDISMODULE_POSTPONED_LEN);
    RedisModule_ReplyWithCString(ctx, "shape");
    RedisModule_ReplyWithArray(ctx, t->ndim);
    for (uint32_t i = 0; i < t->ndim; i++) RedisModule_ReplyWithLongLong(ctx, (long long)t->dims[i]);
    n += 2;
    ps_reply_pair_s(ctx, "dtype", "float32", &n);
    ps_reply_pair_ll(ctx, "elements", (long long)t->n, &n);
    ps_reply_pair_ll(ctx, "bytes", (long long)(t->n * sizeof(float)), &n);
    ps_reply_pair_ll(ctx, "version", (long long)t->version, &n);
    ps_reply_pair_s(ctx, "optimizer", ps_optim_name(t->optim), &n);
#define PS_HP_INFO(K, f, d, r, s) ps_reply_pair_d(ctx, #f, t->h.f, &n);
    PS_HYPERPARAMS(PS_HP_INFO)
#undef PS_HP_INFO
    ps_reply_pair_ll(ctx, "step", (long long)t->opt.step, &n);
    ps_reply_pair_ll(ctx, "maxstaleness", t->maxstale, &n);
    ps_reply_pair_s(ctx, "policy", t->policy == PS_POLICY_SCALE ? "scale" : "reject", &n);
    ps_reply_pair_s(ctx, "mode", t->sync_n ? "sync" : "async", &n);
    ps_reply_pair_ll(ctx, "sync_n", t->sync_n, &n);
    ps_reply_pair_ll(ctx, "sync_timeout_ms", t->sync_timeout_ms, &n);
    ps_reply_pair_ll(ctx, "round_pushes", t->round_count, &n);
    ps_reply_pair_ll(ctx, "snapshots", t->nsnap, &n);
    ps_reply_pair_ll(ctx, "max_snapshots", t->max_snapshots, &n);
    ps_reply_pair_ll(ctx, "dedup_clients", t->dedup_len, &n);
    ps_reply_pair_ll(ctx, "dedup_max", t->dedup_max, &n);
    if (t->optim == PS_OPT_ACCUM) {
        /* The relay's view (accum.h): summed, pending, seq of the newest take. */
        ps_reply_pair_ll(ctx, "accum_pushes", (long long)t->acc.count, &n);
        ps_reply_pair_ll(ctx, "pending_pushes", (long long)t->acc.pend_count, &n);
        ps_reply_pair_ll(ctx, "relay_seq", (long long)t->acc.seq, &n);
        ps_reply_pair_ll(ctx, "takes", (long long)t->stats.takes, &n);
        ps_reply_pair_ll(ctx, "take_acks", (long long)t->stats.take_acks, &n);
        /* Backpressure and the persisted round counters (accum.h). */
        ps_reply_pair_ll(ctx, "max_backlog", (long long)t->acc.max_backlog, &n);
        ps_reply_pair_ll(ctx, "backlog", (long long)PSAccum_Backlog(t), &n);
        ps_reply_pair_ll(ctx, "backlog_refusals", (long long)t->stats.backlog_refusals, &n);
        ps_reply_pair_ll(ctx, "pending_parts", (long long)(t->acc.pend_parts - t->acc.pend_done), &n);
        ps_reply_pair_ll(ctx, "relay_takes", (long long)t->acc.takes, &n);
        ps_reply_pair_ll(ctx, "relay_rounds", (long long)t->acc.rounds, &n);
        ps_reply_pair_ll(ctx, "relay_forwarded", (long long)t->acc.forwarded, &n);
        ps_reply_pair_ll(ctx, "relay_round_max", (long long)t->acc.round_max, &n);
        ps_reply_pair_ll(ctx, "relay_round_min", (long long)t->acc.round_min, &n);
    }
    ps_ring_info(ctx, t, &n); /* ring tracking (cmd_ring.c), when tracked */
    const PSCounters *c = &t->stats;
    ps_reply_pair_ll(ctx, "pushes", (long long)c->pushes, &n);
    ps_reply_pair_ll(ctx, "pulls", (long long)c->pulls, &n);
    ps_reply_pair_ll(ctx, "sets", (long long)c->sets, &n);
    ps_reply_pair_ll(ctx, "stale_rejects", (long long)c->stale_rejects, &n);
    ps_reply_pair_ll(ctx, "scaled_pushes", (long long)c->scaled_pushes, &n);
    ps_reply_pair_ll(ctx, "dedup_hits", (long long)c->dedup_hits, &n);
    ps_reply_pair_ll(ctx, "nonfinite_rejects", (long long)c->nonfinite_rejects, &n);
    ps_reply_pair_ll(ctx, "rounds_closed", (long long)c->rounds_closed, &n);
    ps_reply_pair_ll(ctx, "rounds_timed_out", (long long)c->rounds_timed_out, &n);
    RedisModule_ReplyWithCString(ctx, "staleness_histogram");
    RedisModule_ReplyWithArray(ctx, PS_STALE_BUCKETS);
    for (int i = 0; i < PS_STALE_BUCKETS; i++)
        RedisModule_ReplyWithLongLong(ctx, (long long)c->stale_hist[i]);
    n += 2;
    RedisModule_ReplySetArrayLength(ctx, n);
    return REDISMODULE_OK;
}

/* ========================================================================
 * PS.CONFIG
 * ====================================================================== */

/* PS.CONFIG key param value [param value ...] -> OK. All pairs are checked
 * before any is applied. */
int ps_tensor_config(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, PSTensor *t) {
    PSTensorOpts o;
    PSTensor_GetOpts(t, &o);
    int sync_seen = 0;
    unsigned seen = 0;
    for (int i = 2; i < argc;) {
        RedisModuleString *a = argv[i];
        int r = parse_tensor_option(ctx, argv, argc, &i, &o, &sync_seen, &seen);
        if (r < 0) return REDISMODULE_OK;
        if (r == 0) {
            ps_reply_errorf(ctx, PSERR_CONFIG_PARAM_F, RedisModule_StringPtrLen(a, NULL));
            return REDISMODULE_OK;
        }
    }
    const char *herr = ps_optim_check(&o.h);
    if (herr) {
        ps_reply_errorf(ctx, PSERR_HYPER_F, herr);
        return REDISMODULE_OK;
    }
    if (t->optim == PS_OPT_ACCUM && o.sync_n) {
        RedisModule_ReplyWithError(ctx, PSERR_ACCUM_SYNC);
        return REDISMODULE_OK;
    }
    if (sync_seen && o.sync_n != t->sync_n && t->round_count) {
        RedisModule_ReplyWithError(ctx, PSERR_SYNC_CHANGE);
        return REDISMODULE_OK;
    }
    PSTensor_Configure(t, &o);
    /* A smaller table bound takes effect now (oldest entries go first). */
    PSTensor_DedupShrink(t);
    RedisModule_ReplicateVerbatim(ctx);
    ps_notify(ctx, "ps.config", argv[1]);
    return RedisModule_ReplyWithSimpleString(ctx, "OK");
}
