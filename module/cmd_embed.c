/* cmd_embed.c -- the embedding-table commands: the table handlers of
 * PS.CREATE (EMBEDDING), PS.PULL / PS.PUSHGRAD (IDS), PS.INFO and PS.CONFIG,
 * which cmd_table.c's routers call for a key holding a table (arguments
 * parsed by args.c), and the table-only PS.SCANROWS (export), PS.TOMBSTONES
 * (the rows gone since a version) and PS.EVICT (eviction by age).
 *
 * Replication, decided here per handler:
 *   PS.CREATE EMBEDDING  as its effect: every option spelled out, the seed
 *                        drawn on the master when absent (a replica's or the
 *                        AOF's defaults may differ).
 *   PS.PUSHGRAD IDS      verbatim when applied: the push is a deterministic
 *                        function of the table (embed.h); with IDFORMAT, its
 *                        ids as a raw list (ps_args_replicate_push). A
 *                        duplicate (ID seen) or a rejected push changes
 *                        nothing and is not replicated.
 *   PS.CONFIG            verbatim (a CAPACITY below the rows evicts, by the
 *                        same deterministic rule everywhere).
 *   PS.EVICT             verbatim.
 *   PS.PULL, PS.INFO, PS.SCANROWS, PS.TOMBSTONES  read-only, never replicated. */

#include <limits.h>
#include <math.h>
#include <string.h>

#include "embed_glue.h"
#include "ps_limits.h"

/* ========================================================================
 * Shared helpers
 * ====================================================================== */

PSEmbedValue *ps_open_embed(RedisModuleCtx *ctx, RedisModuleString *keyname, int mode,
                            RedisModuleKey **key, int *empty) {
    *key = RedisModule_OpenKey(ctx, keyname, mode);
    *empty = 0;
    int type = RedisModule_KeyType(*key);
    if (type == REDISMODULE_KEYTYPE_EMPTY) {
        *empty = 1;
        return NULL;
    }
    if (type != REDISMODULE_KEYTYPE_MODULE || RedisModule_ModuleTypeGetType(*key) != PSEmbedType) {
        RedisModule_ReplyWithError(ctx, REDISMODULE_ERRORMSG_WRONGTYPE);
        return NULL;
    }
    PSEmbedValue *v = RedisModule_ModuleTypeGetValue(*key);
    if (v->restoring) {
        RedisModule_ReplyWithError(ctx, PSERR_EMBED_RESTORING);
        return NULL;
    }
    return v;
}

/* ps_open_embed that replies "no such key" too and closes the key on
 * failure. */
static PSEmbedValue *open_or_reply(RedisModuleCtx *ctx, RedisModuleString *keyname, int mode,
                                   RedisModuleKey **key) {
    int empty;
    PSEmbedValue *v = ps_open_embed(ctx, keyname, mode, key, &empty);
    if (v) return v;
    if (empty) RedisModule_ReplyWithError(ctx, PSERR_NOKEY);
    RedisModule_CloseKey(*key);
    *key = NULL;
    return NULL;
}

int ps_embed_reply_status(RedisModuleCtx *ctx, int status) {
    switch (status) {
    case PSE_ERR_OOM: return RedisModule_ReplyWithError(ctx, PSERR_OOM);
    case PSE_ERR_NONFINITE: return RedisModule_ReplyWithError(ctx, PSERR_NONFINITE);
    case PSE_ERR_FULL: return RedisModule_ReplyWithError(ctx, PSERR_EMBED_FULL);
    case PSE_ERR_ARG: return RedisModule_ReplyWithError(ctx, PSERR_EMBED_IDS);
    case PSE_ERR_CORRUPT: return RedisModule_ReplyWithError(ctx, PSERR_RESTORE_CHUNK);
    default: return RedisModule_ReplyWithError(ctx, PSERR_INTERNAL);
    }
}

/* ========================================================================
 * Options of PS.CREATE EMBEDDING and PS.CONFIG
 * ====================================================================== */

/* The options after the hyper-parameters; each has its bit in 'seen'. */
enum {
    E_HP_COUNT = 0
#define E_ONE(K, f) +1
    PS_EMBED_HYPERPARAMS(E_ONE)
#undef E_ONE
};
enum { E_CAPACITY = E_HP_COUNT, E_TTL, E_UNKNOWN, E_MAXSTALENESS, E_DEDUPMAX, E_TOMBSTONES, E_CONFIGURABLE };
static const char *const HyperNames[E_HP_COUNT] = {
#define E_NAME(K, f) #K,
    PS_EMBED_HYPERPARAMS(E_NAME)
#undef E_NAME
};
static const char *const SettingNames[] = {"CAPACITY", "TTL", "UNKNOWN", "MAXSTALENESS", "DEDUPMAX",
                                           "TOMBSTONES"};
_Static_assert(sizeof(SettingNames) / sizeof(SettingNames[0]) == E_CONFIGURABLE - E_HP_COUNT,
               "a setting without its name");

static const char *option_name(int k) { return k < E_HP_COUNT ? HyperNames[k] : SettingNames[k - E_HP_COUNT]; }

static double *hyper_field(PSEmbedConfig *c, int k) {
    double *f[E_HP_COUNT] = {
#define E_PTR(K, f) &c->f,
        PS_EMBED_HYPERPARAMS(E_PTR)
#undef E_PTR
    };
    return f[k];
}

/* What PS.CONFIG may change besides the core config. */
typedef struct GlueOpts {
    int64_t maxstale;
    uint32_t dedup_max;
} GlueOpts;

/* Parses the option at argv[*i] when it is one of the changeable ones.
 * Returns 1 (consumed, *i advanced), 0 (not one), -1 (error replied). */
static int parse_changeable(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, int *i,
                            PSEmbedConfig *c, GlueOpts *g, unsigned *seen) {
    RedisModuleString *val;
    const int k = ps_arg_option(ctx, argv, argc, i, E_CONFIGURABLE, option_name, seen, &val);
    if (k < 0) return -1;
    if (k == E_CONFIGURABLE) return 0;
    long long ll;
    uint64_t u;
    if (k < E_HP_COUNT) return ps_arg_double(ctx, val, HyperNames[k], hyper_field(c, k)) == REDISMODULE_OK ? 1 : -1;
    switch (k) {
    case E_CAPACITY:
        if (ps_arg_u64(ctx, val, "CAPACITY", &u) != REDISMODULE_OK) return -1;
        if (u == 0) {
            RedisModule_ReplyWithError(ctx, PSERR_EMBED_CAPACITY);
            return -1;
        }
        c->capacity = u;
        return 1;
    case E_TTL:
        if (ps_arg_u64(ctx, val, "TTL", &u) != REDISMODULE_OK) return -1;
        c->ttl = u;
        return 1;
    case E_UNKNOWN:
        if (ps_arg_is(val, "INIT")) c->unknown_zeros = 0;
        else if (ps_arg_is(val, "ZEROS")) c->unknown_zeros = 1;
        else {
            ps_reply_errorf(ctx, PSERR_SYNTAX_F, RedisModule_StringPtrLen(val, NULL));
            return -1;
        }
        return 1;
    case E_MAXSTALENESS:
        if (ps_arg_ll(ctx, val, "MAXSTALENESS", -1, 1LL << 40, &ll) != REDISMODULE_OK) return -1;
        g->maxstale = ll;
        return 1;
    case E_TOMBSTONES:
        if (ps_arg_ll(ctx, val, "TOMBSTONES", 0, PSE_MAX_TOMBSTONES, &ll) != REDISMODULE_OK) return -1;
        c->tombstones = (uint64_t)ll;
        return 1;
    default:
        if (ps_arg_ll(ctx, val, "DEDUPMAX", 0, PS_EMBED_MAX_DEDUP, &ll) != REDISMODULE_OK) return -1;
        g->dedup_max = (uint32_t)ll;
        return 1;
    }
}

/* ========================================================================
 * PS.CREATE key EMBEDDING ...
 * ====================================================================== */

/* Row initializers: keyword, PSE_INIT_*, numbers that follow. */
static const struct {
    const char *name;
    int init, nargs;
} EmbedInits[3] = {{"ZEROS", PSE_INIT_ZEROS, 0}, {"UNIFORM", PSE_INIT_UNIFORM, 2}, {"NORMAL", PSE_INIT_NORMAL, 2}};

/* Replicates a create as its effect: every option spelled out. */
static void replicate_create(RedisModuleCtx *ctx, RedisModuleString *keyname, const PSEmbedConfig *c,
                             const GlueOpts *g) {
    enum { MAXV = 64 };
    RedisModuleString *v[MAXV];
    int n = 0;
#define LIT(s) (v[n++] = RedisModule_CreateString(ctx, s, strlen(s)))
#define FMT(...) (v[n++] = RedisModule_CreateStringPrintf(ctx, __VA_ARGS__))
    size_t kl;
    const char *kp = RedisModule_StringPtrLen(keyname, &kl);
    v[n++] = RedisModule_CreateString(ctx, kp, kl);
    LIT("EMBEDDING");
    LIT("DIM");
    FMT("%u", c->dim);
    LIT("INIT");
    LIT(EmbedInits[c->init].name);
    if (c->init != PSE_INIT_ZEROS) {
        FMT("%.17g", c->init_a);
        FMT("%.17g", c->init_b);
    }
    LIT("SEED");
    FMT("%llu", (unsigned long long)c->seed);
    LIT("SALT");
    FMT("%llu", (unsigned long long)c->salt);
    LIT("OPTIM");
    LIT(PSEmbed_OptimName(c->optim));
#define E_REPL(K, f) LIT(#K), FMT("%.17g", c->f);
    PS_EMBED_HYPERPARAMS(E_REPL)
#undef E_REPL
    LIT("ADMIT");
    FMT("%u", c->admit);
    LIT("FILTER");
    FMT("%u", c->filter_log2);
    if (c->capacity) {
        LIT("CAPACITY");
        FMT("%llu", (unsigned long long)c->capacity);
    }
    LIT("TTL");
    FMT("%llu", (unsigned long long)c->ttl);
    LIT("UNKNOWN");
    LIT(c->unknown_zeros ? "ZEROS" : "INIT");
    LIT("MAXSTALENESS");
    FMT("%lld", (long long)g->maxstale);
    LIT("DEDUPMAX");
    FMT("%u", g->dedup_max);
    LIT("TOMBSTONES");
    FMT("%llu", (unsigned long long)c->tombstones);
#undef LIT
#undef FMT
    RedisModule_Replicate(ctx, "ps.create", "v", v, (size_t)n);
    for (int i = 0; i < n; i++) RedisModule_FreeString(ctx, v[i]);
}

/* PS.CREATE key EMBEDDING DIM d [INIT ZEROS|UNIFORM lo hi|NORMAL mean std]
 *   [SEED s] [SALT s] [OPTIM name] [LR x ...] [ADMIT n] [FILTER k] [CAPACITY n] [TTL v]
 *   [UNKNOWN INIT|ZEROS] [MAXSTALENESS n] [DEDUPMAX n] [TOMBSTONES n] [NX] -> OK (nil: NX) */
int ps_table_create(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    PSEmbedConfig c;
    PSEmbed_DefaultConfig(&c, 1);
    c.lr = PSConf.default_lr;
    GlueOpts g = {.maxstale = PSConf.max_staleness, .dedup_max = (uint32_t)PSConf.dedup_max};
    int have_dim = 0, have_seed = 0, have_init = 0, have_optim = 0, have_admit = 0, have_filter = 0;
    int have_salt = 0;
    int nx = 0;
    unsigned seen = 0;
    for (int i = 3; i < argc;) {
        RedisModuleString *a = argv[i];
        if (ps_arg_is(a, "NX")) {
            nx = 1;
            i++;
            continue;
        }
        int r = parse_changeable(ctx, argv, argc, &i, &c, &g, &seen);
        if (r < 0) return REDISMODULE_OK;
        if (r > 0) continue;
        const char *an = RedisModule_StringPtrLen(a, NULL);
        int *flag = ps_arg_is(a, "DIM") ? &have_dim : ps_arg_is(a, "SEED") ? &have_seed
                  : ps_arg_is(a, "INIT") ? &have_init : ps_arg_is(a, "OPTIM") ? &have_optim
                  : ps_arg_is(a, "ADMIT") ? &have_admit : ps_arg_is(a, "FILTER") ? &have_filter
                  : ps_arg_is(a, "SALT") ? &have_salt : NULL;
        if (!flag) return ps_reply_errorf(ctx, PSERR_UNKNOWN_OPT_F, an);
        if (*flag) return ps_reply_errorf(ctx, PSERR_DUP_OPT_F, an);
        if (i + 1 >= argc) return ps_reply_errorf(ctx, PSERR_MISSING_ARG_F, an);
        *flag = 1;
        RedisModuleString *val = argv[i + 1];
        long long ll;
        i += 2;
        if (flag == &have_dim) {
            if (ps_arg_ll(ctx, val, "DIM", 1, PSE_MAX_DIM, &ll) != REDISMODULE_OK) return REDISMODULE_OK;
            c.dim = (uint32_t)ll;
        } else if (flag == &have_seed) {
            if (ps_arg_u64(ctx, val, "SEED", &c.seed) != REDISMODULE_OK) return REDISMODULE_OK;
        } else if (flag == &have_salt) {
            if (ps_arg_u64(ctx, val, "SALT", &c.salt) != REDISMODULE_OK) return REDISMODULE_OK;
        } else if (flag == &have_optim) {
            size_t ol;
            const char *os = RedisModule_StringPtrLen(val, &ol);
            int k = PSEmbed_OptimParse(os, ol);
            if (k < 0) return ps_reply_errorf(ctx, PSERR_EMBED_OPTIM_F, os);
            c.optim = k;
        } else if (flag == &have_admit) {
            if (ps_arg_ll(ctx, val, "ADMIT", 1, PSE_MAX_ADMIT, &ll) != REDISMODULE_OK) return REDISMODULE_OK;
            c.admit = (uint32_t)ll;
        } else if (flag == &have_filter) {
            if (ps_arg_ll(ctx, val, "FILTER", PSE_MIN_FILTER_LOG2, PSE_MAX_FILTER_LOG2, &ll) != REDISMODULE_OK)
                return REDISMODULE_OK;
            c.filter_log2 = (uint32_t)ll;
        } else { /* INIT: a name from EmbedInits, then its numbers */
            int kind = 0;
            while (kind < 3 && !ps_arg_is(val, EmbedInits[kind].name)) kind++;
            if (kind == 3) return ps_reply_errorf(ctx, PSERR_SYNTAX_F, RedisModule_StringPtrLen(val, NULL));
            c.init = EmbedInits[kind].init;
            const int nargs = EmbedInits[kind].nargs;
            if (i + nargs > argc) return ps_reply_errorf(ctx, PSERR_MISSING_ARG_F, "INIT");
            if (nargs && (ps_arg_double(ctx, argv[i], "INIT", &c.init_a) != REDISMODULE_OK ||
                          ps_arg_double(ctx, argv[i + 1], "INIT", &c.init_b) != REDISMODULE_OK))
                return REDISMODULE_OK;
            i += nargs;
        }
    }
    if (!have_dim) return RedisModule_ReplyWithError(ctx, PSERR_EMBED_NO_DIM);
    if (!have_seed && c.init != PSE_INIT_ZEROS) {
        /* Drawn on the master and replicated, below 2^63 as a plain integer. */
        RedisModule_GetRandomBytes((unsigned char *)&c.seed, sizeof(c.seed));
        c.seed &= 0x7fffffffffffffffULL;
    }
    if (!have_salt) {
        /* The index hash's key: drawn on the master and replicated (SALT),
         * so clients cannot aim ids at one bucket; below 2^63 as SEED. */
        RedisModule_GetRandomBytes((unsigned char *)&c.salt, sizeof(c.salt));
        c.salt &= 0x7fffffffffffffffULL;
    }
    const char *err = PSEmbed_CheckConfig(&c);
    if (err) return ps_reply_errorf(ctx, PSERR_HYPER_F, err);

    RedisModuleKey *key = RedisModule_OpenKey(ctx, argv[1], REDISMODULE_READ | REDISMODULE_WRITE);
    if (RedisModule_KeyType(key) != REDISMODULE_KEYTYPE_EMPTY) {
        RedisModule_CloseKey(key);
        return nx ? RedisModule_ReplyWithNull(ctx) : RedisModule_ReplyWithError(ctx, PSERR_BUSYKEY);
    }
    PSEmbed *t = PSEmbed_New(&c, &err);
    PSEmbedValue *v = t ? PSEmbedValue_New(t, g.maxstale, g.dedup_max) : NULL;
    if (!v) {
        PSEmbed_Free(t);
        RedisModule_CloseKey(key);
        return RedisModule_ReplyWithError(ctx, PSERR_OOM);
    }
    RedisModule_ModuleTypeSetValue(key, PSEmbedType, v);
    RedisModule_CloseKey(key);
    replicate_create(ctx, argv[1], &c, &g);
    ps_notify(ctx, "ps.create", argv[1]);
    PSEmbedCounters.creates++;
    return RedisModule_ReplyWithSimpleString(ctx, "OK");
}

/* ========================================================================
 * PS.PULL key IDS idblob [FORMAT F32|F16|BF16|VALUES]
 * ====================================================================== */

/* Replies 'n' floats in 'fmt' (VALUES: an array of doubles). */
static int reply_floats(RedisModuleCtx *ctx, const float *src, size_t n, ps_format fmt, int values) {
    if (values) {
        RedisModule_ReplyWithArray(ctx, (long)n);
        for (size_t k = 0; k < n; k++) RedisModule_ReplyWithDouble(ctx, src[k]);
        return REDISMODULE_OK;
    }
    const size_t bytes = ps_dense_encoded_size(fmt, n);
    if (fmt == PS_FMT_F32) return RedisModule_ReplyWithStringBuffer(ctx, (const char *)src, bytes);
    unsigned char *enc = RedisModule_TryAlloc(bytes);
    if (!enc) return RedisModule_ReplyWithError(ctx, PSERR_OOM);
    ps_encode(fmt, src, n, enc);
    RedisModule_ReplyWithStringBuffer(ctx, (const char *)enc, bytes);
    RedisModule_Free(enc);
    return REDISMODULE_OK;
}

int ps_table_pull(RedisModuleCtx *ctx, PSEmbedValue *v, const PSPullArgs *a) {
    const size_t k = a->nids;
    const ps_format fmt = a->fmt;
    const int values = a->values;
    const uint32_t dim = PSEmbed_Config(v->t)->dim;
    const uint64_t n = (uint64_t)k * dim;
    /* The pull limit of tensors (ps.max-pull-bytes), at the cost per
     * element of the reply format (ps_limits.h). */
    const uint64_t per = values ? PS_PULL_VALUE_BYTES : PS_PULL_ELEM_BYTES;
    if (n > (uint64_t)PSConf.max_pull_bytes / per) {
        return ps_reply_errorf(ctx, PSERR_EMBED_PULL_BIG_F, (unsigned long long)k, dim,
                               (unsigned long long)(n * per), (unsigned long long)PSConf.max_pull_bytes);
    }
    float *out = ps_scratch(n);
    if (!out) return RedisModule_ReplyWithError(ctx, PSERR_OOM);
    PSEmbed_Pull(v->t, a->ids, k, out);
    v->pulls++;
    v->ids_pulled += k;
    PSEmbedCounters.pulls++;
    PSEmbedCounters.ids_pulled += k;
    PSStats.bytes_out += values ? 0 : ps_dense_encoded_size(fmt, (size_t)n);
    RedisModule_ReplyWithArray(ctx, 2);
    RedisModule_ReplyWithLongLong(ctx, (long long)PSEmbed_Version(v->t));
    reply_floats(ctx, out, (size_t)n, fmt, values);
    return REDISMODULE_OK;
}

/* ========================================================================
 * PS.PUSHGRAD key (grad [FORMAT f] | VALUES g1 .. gn) IDS idblob
 *             [VERSION v] [ID client seq]
 * ====================================================================== */

int ps_table_push(RedisModuleCtx *ctx, RedisModuleString **argv, PSEmbedValue *v, const PSPushArgs *a) {
    PSEmbed *t = v->t;
    const size_t k = a->nids;
    const uint32_t dim = PSEmbed_Config(t)->dim;
    const uint64_t n = (uint64_t)k * dim;
    const unsigned char *g;
    size_t glen = 0;
    if (a->values_start) {
        if ((uint64_t)a->nvalues != n)
            return ps_reply_errorf(ctx, PSERR_EMBED_VALUES_F, (size_t)a->nvalues, k, dim, (unsigned long long)n);
        float *dst = ps_scratch(n);
        if (!dst) return RedisModule_ReplyWithError(ctx, PSERR_OOM);
        ps_values_fill(argv, a, dst);
        g = (const unsigned char *)dst;
    } else {
        RedisModule_StringPtrLen(a->grad, &glen);
        if (!(g = ps_decode_dense(ctx, "gradient", a->grad, a->fmt, n))) return REDISMODULE_OK;
    }
    const PSEmbedPush p = {.ids = a->ids, .k = k, .grad = g, .id = a->id, .idlen = a->idlen,
                           .seq = a->seq, .has_version = a->has_version, .version = a->version};
    PSEmbedPushResult r;
    uint64_t ring_mark = 0;
    if (v->ring && ps_ring_table_before_push(ctx, v, a->ids, k, a->id, a->idlen, a->seq, &ring_mark))
        return REDISMODULE_OK;
    const int st = PSEmbed_PushOnce(t, &v->dd, v->maxstale, &p, &r);
    if (v->ring) ps_ring_table_after_push(v, st == PSE_OK, ring_mark);
    switch (st) {
    case PSE_OK: break;
    case PSE_DUPLICATE:
        v->dedup_hits++;
        PSStats.dedup_hits++;
        return RedisModule_ReplyWithLongLong(ctx, (long long)r.version);
    case PSE_ERR_FUTURE:
        return ps_reply_errorf(ctx, PSERR_FUTURE_F, (unsigned long long)a->version,
                               (unsigned long long)PSEmbed_Version(t));
    case PSE_ERR_STALE:
        v->stale_rejects++;
        PSStats.stale_rejects++;
        return ps_reply_errorf(ctx, PSERR_STALE_F, (unsigned long long)a->version,
                               (unsigned long long)r.staleness, (unsigned long long)PSEmbed_Version(t),
                               (long long)v->maxstale);
    case PSE_ERR_NONFINITE:
        v->nonfinite_rejects++;
        PSStats.nonfinite_rejects++;
        /* fall through */
    default: return ps_embed_reply_status(ctx, st);
    }
    ps_args_replicate_push(ctx, argv, a); /* verbatim, or its EF ids raw (args.h) */
    ps_notify(ctx, "ps.pushgrad", argv[1]);
    v->pushes++;
    PSEmbedCounters.pushes++;
    PSEmbedCounters.ids_pushed += k;
    PSEmbedCounters.rows_created += r.created;
    PSEmbedCounters.ids_dropped += r.dropped;
    PSEmbedCounters.rows_evicted += r.evicted;
    PSStats.bytes_in += a->values_start ? n * sizeof(float) : glen;
    return RedisModule_ReplyWithLongLong(ctx, (long long)r.version);
}

/* ========================================================================
 * PS.INFO key (a table)
 * ====================================================================== */

/* PS.INFO key -> flat array of field/value pairs */
int ps_table_info(RedisModuleCtx *ctx, PSEmbedValue *v) {
    const PSEmbedConfig *c = PSEmbed_Config(v->t);
    PSEmbedState st;
    PSEmbed_GetState(v->t, &st);
    static const char *const inits[] = {"zeros", "uniform", "normal"};
    long n = 0;
    RedisModule_ReplyWithArray(ctx, REDISMODULE_POSTPONED_LEN);
    ps_reply_pair_s(ctx, "type", "embedding", &n);
    ps_reply_pair_ll(ctx, "dim", c->dim, &n);
    ps_reply_pair_s(ctx, "dtype", "float32", &n);
    ps_reply_pair_ll(ctx, "version", (long long)st.version, &n);
    ps_reply_pair_ll(ctx, "rows", (long long)st.nrows, &n);
    ps_reply_pair_ll(ctx, "memory", (long long)PSEmbed_MemUsage(v->t), &n);
    ps_reply_pair_s(ctx, "optimizer", PSEmbed_OptimName(c->optim), &n);
#define E_INFO(K, f) ps_reply_pair_d(ctx, #f, c->f, &n);
    PS_EMBED_HYPERPARAMS(E_INFO)
#undef E_INFO
    ps_reply_pair_s(ctx, "init", inits[c->init], &n);
    ps_reply_pair_d(ctx, "init_a", c->init_a, &n);
    ps_reply_pair_d(ctx, "init_b", c->init_b, &n);
    ps_reply_pair_ll(ctx, "seed", (long long)c->seed, &n);
    ps_reply_pair_s(ctx, "unknown", c->unknown_zeros ? "zeros" : "init", &n);
    ps_reply_pair_ll(ctx, "admit", c->admit, &n);
    ps_reply_pair_ll(ctx, "filter_log2", c->admit > 1 ? c->filter_log2 : 0, &n);
    ps_reply_pair_ll(ctx, "capacity", (long long)c->capacity, &n);
    ps_reply_pair_ll(ctx, "ttl", (long long)c->ttl, &n);
    ps_reply_pair_ll(ctx, "created", (long long)st.stats.created, &n);
    ps_reply_pair_ll(ctx, "dropped", (long long)st.stats.dropped, &n);
    ps_reply_pair_ll(ctx, "evicted_ttl", (long long)st.stats.evicted_ttl, &n);
    ps_reply_pair_ll(ctx, "evicted_capacity", (long long)st.stats.evicted_capacity, &n);
    ps_reply_pair_ll(ctx, "evicted_explicit", (long long)st.stats.evicted_explicit, &n);
    ps_reply_pair_ll(ctx, "tombstones", (long long)c->tombstones, &n);
    ps_reply_pair_ll(ctx, "tombstones_logged", (long long)PSEmbed_TombLen(v->t), &n);
    ps_reply_pair_ll(ctx, "tombstone_horizon", (long long)st.tomb_horizon, &n);
    ps_reply_pair_ll(ctx, "maxstaleness", v->maxstale, &n);
    ps_reply_pair_ll(ctx, "dedup_clients", v->dd.len, &n);
    ps_reply_pair_ll(ctx, "dedup_max", v->dd.max, &n);
    ps_reply_pair_ll(ctx, "pushes", (long long)v->pushes, &n);
    ps_reply_pair_ll(ctx, "pulls", (long long)v->pulls, &n);
    ps_reply_pair_ll(ctx, "ids_pulled", (long long)v->ids_pulled, &n);
    ps_reply_pair_ll(ctx, "dedup_hits", (long long)v->dedup_hits, &n);
    ps_reply_pair_ll(ctx, "stale_rejects", (long long)v->stale_rejects, &n);
    ps_reply_pair_ll(ctx, "nonfinite_rejects", (long long)v->nonfinite_rejects, &n);
    ps_ring_table_info(ctx, v, &n);
    RedisModule_ReplySetArrayLength(ctx, n);
    return REDISMODULE_OK;
}

/* ========================================================================
 * PS.CONFIG key param value [param value ...] (a table)
 * ====================================================================== */

/* All pairs are checked before any is applied. */
int ps_table_config(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, PSEmbedValue *v) {
    PSEmbedConfig c = *PSEmbed_Config(v->t);
    GlueOpts g = {.maxstale = v->maxstale, .dedup_max = v->dd.max};
    unsigned seen = 0;
    for (int i = 2; i < argc;) {
        RedisModuleString *a = argv[i];
        int r = parse_changeable(ctx, argv, argc, &i, &c, &g, &seen);
        if (r < 0) return REDISMODULE_OK;
        if (r == 0) return ps_reply_errorf(ctx, PSERR_EMBED_PARAM_F, RedisModule_StringPtrLen(a, NULL));
    }
    if (v->ring && (c.capacity || c.ttl)) return RedisModule_ReplyWithError(ctx, PSERR_RING_TABLE_EVICT);
    const char *err;
    const int rc = PSEmbed_Reconfigure(v->t, &c, &err);
    if (rc == PSE_ERR_OOM) return RedisModule_ReplyWithError(ctx, PSERR_OOM);
    if (rc != PSE_OK) return ps_reply_errorf(ctx, PSERR_HYPER_F, err);
    v->maxstale = g.maxstale;
    v->dd.max = g.dedup_max;
    PSDedupSet_Shrink(&v->dd);
    RedisModule_ReplicateVerbatim(ctx);
    ps_notify(ctx, "ps.config", argv[1]);
    return RedisModule_ReplyWithSimpleString(ctx, "OK");
}

/* ========================================================================
 * PS.SCANROWS key cursor [SINCE version] [COUNT n] [FORMAT F32|F16|BF16] [GONE]
 * ====================================================================== */

#define PS_SCAN_DEFAULT_COUNT 1024
#define PS_SCAN_MAX_COUNT (1 << 20)

/* Ids of rows gone (tombstones), grown as they arrive. */
typedef struct GoneOut {
    uint64_t n, cap;
    uint64_t *ids;
    int oom;
} GoneOut;

static void gone_id(void *ud, uint64_t id, uint64_t version) {
    GoneOut *g = ud;
    (void)version;
    if (g->oom) return;
    if (g->n == g->cap) {
        const uint64_t cap = g->cap ? g->cap * 2 : 64;
        uint64_t *ni = RedisModule_TryAlloc(cap * sizeof(uint64_t));
        if (!ni) {
            g->oom = 1;
            return;
        }
        if (g->n) memcpy(ni, g->ids, g->n * sizeof(uint64_t));
        RedisModule_Free(g->ids);
        g->ids = ni;
        g->cap = cap;
    }
    g->ids[g->n++] = id;
}

/* Rows a scan step collects: ids and values, grown as rows arrive; with
 * GONE, the ids of the dead rows too. */
typedef struct ScanOut {
    uint32_t dim;
    uint64_t n, cap;
    uint64_t *ids;
    float *vals;
    int oom;
    GoneOut gone;
} ScanOut;

static void scan_gone(void *ud, uint64_t id, uint64_t version) {
    ScanOut *o = ud;
    gone_id(&o->gone, id, version);
    if (o->gone.oom) o->oom = 1;
}

static void scan_row(void *ud, const PSEmbedRow *row) {
    ScanOut *o = ud;
    if (o->oom) return;
    if (o->n == o->cap) {
        uint64_t cap = o->cap ? o->cap * 2 : 64;
        uint64_t *ni = RedisModule_TryAlloc(cap * sizeof(uint64_t));
        float *nv = RedisModule_TryAlloc(cap * o->dim * sizeof(float));
        if (!ni || !nv) {
            RedisModule_Free(ni);
            RedisModule_Free(nv);
            o->oom = 1;
            return;
        }
        if (o->n) {
            memcpy(ni, o->ids, o->n * sizeof(uint64_t));
            memcpy(nv, o->vals, o->n * o->dim * sizeof(float));
        }
        RedisModule_Free(o->ids);
        RedisModule_Free(o->vals);
        o->ids = ni;
        o->vals = nv;
        o->cap = cap;
    }
    o->ids[o->n] = row->id;
    memcpy(o->vals + o->n * o->dim, row->data, o->dim * sizeof(float));
    o->n++;
}

/* -> [next cursor, table version, ids blob, values blob] (+ gone ids blob
 * with GONE: the dead rows of the stretch, dead since a version >= SINCE) */
int PSScanRows_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc < 3) return RedisModule_WrongArity(ctx);
    uint64_t cursor, since = 0;
    long long count = PS_SCAN_DEFAULT_COUNT;
    ps_format fmt = PS_FMT_F32;
    if (ps_arg_u64(ctx, argv[2], "cursor", &cursor) != REDISMODULE_OK) return REDISMODULE_OK;
    enum { O_SINCE, O_COUNT, O_FORMAT };
    static const PSOption opts[] = {{"SINCE", 1}, {"COUNT", 1}, {"FORMAT", 1}, {NULL, 0}};
    unsigned seen = 0;
    int gone = 0;
    for (int i = 3; i < argc; i += 2) {
        if (ps_arg_is(argv[i], "GONE")) {
            if (gone) return ps_reply_errorf(ctx, PSERR_DUP_OPT_F, "GONE");
            gone = 1;
            i--;
            continue;
        }
        int k = ps_option_at(ctx, argv, argc, i, opts, &seen);
        if (k < 0) return REDISMODULE_OK;
        if (k == O_SINCE) {
            if (ps_arg_u64(ctx, argv[i + 1], "SINCE", &since) != REDISMODULE_OK) return REDISMODULE_OK;
        } else if (k == O_COUNT) {
            if (ps_arg_ll(ctx, argv[i + 1], "COUNT", 1, PS_SCAN_MAX_COUNT, &count) != REDISMODULE_OK)
                return REDISMODULE_OK;
        } else if (ps_arg_table_format(ctx, argv[i + 1], &fmt, NULL)) {
            return REDISMODULE_OK;
        }
    }
    RedisModuleKey *key;
    PSEmbedValue *v = open_or_reply(ctx, argv[1], REDISMODULE_READ, &key);
    if (!v) return REDISMODULE_OK;
    ScanOut o = {.dim = PSEmbed_Config(v->t)->dim};
    uint64_t next = PSEmbed_ScanGone(v->t, cursor, (uint64_t)count, since, scan_row,
                                     gone ? scan_gone : NULL, &o);
    if (o.oom) {
        RedisModule_ReplyWithError(ctx, PSERR_OOM);
    } else {
        PSEmbedCounters.scans++;
        RedisModule_ReplyWithArray(ctx, gone ? 5 : 4);
        RedisModuleString *nc = RedisModule_CreateStringPrintf(ctx, "%llu", (unsigned long long)next);
        RedisModule_ReplyWithString(ctx, nc);
        RedisModule_FreeString(ctx, nc);
        RedisModule_ReplyWithLongLong(ctx, (long long)PSEmbed_Version(v->t));
        RedisModule_ReplyWithStringBuffer(ctx, (const char *)o.ids, (size_t)o.n * sizeof(uint64_t));
        reply_floats(ctx, o.vals, (size_t)(o.n * o.dim), fmt, 0);
        if (gone) RedisModule_ReplyWithStringBuffer(ctx, (const char *)o.gone.ids, (size_t)o.gone.n * 8);
    }
    RedisModule_Free(o.ids);
    RedisModule_Free(o.vals);
    RedisModule_Free(o.gone.ids);
    RedisModule_CloseKey(key);
    return REDISMODULE_OK;
}

/* ========================================================================
 * PS.TOMBSTONES key cursor SINCE version [COUNT n]
 * ====================================================================== */

/* -> [next cursor, table version, horizon, idblob of the rows gone] */
int PSTombstones_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc < 5) return RedisModule_WrongArity(ctx);
    uint64_t cursor, since = 0;
    long long count = PS_SCAN_DEFAULT_COUNT;
    if (ps_arg_u64(ctx, argv[2], "cursor", &cursor) != REDISMODULE_OK) return REDISMODULE_OK;
    enum { O_SINCE, O_COUNT };
    static const PSOption opts[] = {{"SINCE", 1}, {"COUNT", 1}, {NULL, 0}};
    unsigned seen = 0;
    for (int i = 3; i < argc; i += 2) {
        int k = ps_option_at(ctx, argv, argc, i, opts, &seen);
        if (k < 0) return REDISMODULE_OK;
        if (k == O_SINCE) {
            if (ps_arg_u64(ctx, argv[i + 1], "SINCE", &since) != REDISMODULE_OK) return REDISMODULE_OK;
        } else if (ps_arg_ll(ctx, argv[i + 1], "COUNT", 1, PS_SCAN_MAX_COUNT, &count) != REDISMODULE_OK) {
            return REDISMODULE_OK;
        }
    }
    if (!(seen & (1u << O_SINCE))) return ps_reply_errorf(ctx, PSERR_MISSING_ARG_F, "SINCE");
    RedisModuleKey *key;
    PSEmbedValue *v = open_or_reply(ctx, argv[1], REDISMODULE_READ, &key);
    if (!v) return REDISMODULE_OK;
    PSEmbedState st;
    PSEmbed_GetState(v->t, &st);
    GoneOut g = {0};
    uint64_t next;
    const int rc = PSEmbed_Tombstones(v->t, since, cursor, (uint64_t)count, gone_id, &g, &next);
    if (rc == PSE_ERR_HORIZON) {
        ps_reply_errorf(ctx, PSERR_EMBED_REBASE_F, (unsigned long long)since,
                        (unsigned long long)st.tomb_horizon, (unsigned long long)st.version);
    } else if (g.oom) {
        RedisModule_ReplyWithError(ctx, PSERR_OOM);
    } else {
        PSEmbedCounters.scans++;
        RedisModule_ReplyWithArray(ctx, 4);
        RedisModuleString *nc = RedisModule_CreateStringPrintf(ctx, "%llu", (unsigned long long)next);
        RedisModule_ReplyWithString(ctx, nc);
        RedisModule_FreeString(ctx, nc);
        RedisModule_ReplyWithLongLong(ctx, (long long)st.version);
        RedisModule_ReplyWithLongLong(ctx, (long long)st.tomb_horizon);
        RedisModule_ReplyWithStringBuffer(ctx, (const char *)g.ids, (size_t)g.n * 8);
    }
    RedisModule_Free(g.ids);
    RedisModule_CloseKey(key);
    return REDISMODULE_OK;
}

/* ========================================================================
 * PS.EVICT key AGE a
 * ====================================================================== */

/* Removes the rows not pushed for 'a' or more versions -> rows removed. */
int PSEvict_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 4) return RedisModule_WrongArity(ctx);
    if (!ps_arg_is(argv[2], "AGE"))
        return ps_reply_errorf(ctx, PSERR_UNKNOWN_OPT_F, RedisModule_StringPtrLen(argv[2], NULL));
    uint64_t age;
    if (ps_arg_u64(ctx, argv[3], "AGE", &age) != REDISMODULE_OK) return REDISMODULE_OK;
    /* Ages saturate at PSE_MAX_AGE (embed_int.h): larger ones are not exact. */
    if (age == 0 || age > PSE_MAX_AGE) return ps_reply_errorf(ctx, PSERR_NOT_INT_F, "AGE");
    RedisModuleKey *key;
    PSEmbedValue *v = open_or_reply(ctx, argv[1], REDISMODULE_READ | REDISMODULE_WRITE, &key);
    if (!v) return REDISMODULE_OK;
    if (v->ring) { /* a tracked table keeps its rows (ring_table.h) */
        RedisModule_CloseKey(key);
        return RedisModule_ReplyWithError(ctx, PSERR_RING_TABLE_EVICT);
    }
    /* Room in the tombstone log for every row first (no partial state). */
    if (PSEmbed_TombReserve(v->t, PSEmbed_Rows(v->t)) != PSE_OK) {
        RedisModule_CloseKey(key);
        return RedisModule_ReplyWithError(ctx, PSERR_OOM);
    }
    uint64_t removed = PSEmbed_EvictAge(v->t, age);
    /* Replicated even when nothing went: cheap, and keeps one decision. */
    RedisModule_ReplicateVerbatim(ctx);
    if (removed) ps_notify(ctx, "ps.evict", argv[1]);
    PSEmbedCounters.rows_evicted += removed;
    RedisModule_ReplyWithLongLong(ctx, (long long)removed);
    RedisModule_CloseKey(key);
    return REDISMODULE_OK;
}
