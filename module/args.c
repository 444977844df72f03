/* args.c -- argument parsing of the module's commands (see args.h): the
 * shared helpers and the per-command parsers the routers of cmd_table.c
 * call once per command. */

#include "args.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ctr_score.h"
#include "embed.h"
#include "idlist.h"
#include "ps_limits.h"
#include "ps_module.h"

/* ========================================================================
 * Shared helpers
 * ====================================================================== */

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

/* Whether the token 'tok' of 'len' bytes is 'keyword' (case-insensitive);
 * the first letter rejects most keywords without a string compare. */
static int token_is(const char *tok, size_t len, const char *keyword) {
    return len && (tok[0] | 0x20) == (keyword[0] | 0x20) && strlen(keyword) == len &&
           strncasecmp(tok, keyword, len) == 0;
}

int ps_option_at(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, int i,
                 const PSOption *opts, unsigned *seen) {
    size_t len;
    const char *an = RedisModule_StringPtrLen(argv[i], &len);
    for (int k = 0; opts[k].name; k++) {
        if (!token_is(an, len, opts[k].name)) continue;
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

int ps_arg_option(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, int *i, int count,
                  const char *(*name)(int), unsigned *seen, RedisModuleString **val) {
    RedisModuleString *opt = argv[*i];
    int k = 0;
    while (k < count && !ps_arg_is(opt, name(k))) k++;
    if (k == count) return count;
    if (*seen & (1u << k)) {
        ps_reply_errorf(ctx, PSERR_DUP_OPT_F, name(k));
        return -1;
    }
    *seen |= 1u << k;
    if (*i + 1 >= argc) {
        ps_reply_errorf(ctx, PSERR_MISSING_ARG_F, RedisModule_StringPtrLen(opt, NULL));
        return -1;
    }
    *val = argv[*i + 1];
    *i += 2;
    return k;
}

/* "nan" parses (as NaN) so that it is refused and counted like a NaN in a
 * blob, rather than ending the list. */
int ps_values_number(RedisModuleString *arg, double *d) {
    if (RedisModule_StringToDouble(arg, d) == REDISMODULE_OK) return 1;
    if (ps_arg_is(arg, "nan") || ps_arg_is(arg, "-nan") || ps_arg_is(arg, "+nan")) {
        *d = NAN;
        return 1;
    }
    return 0;
}

void ps_values_fill(RedisModuleString **argv, const PSPushArgs *a, float *dst) {
    for (int k = 0; k < a->nvalues; k++) {
        double d = 0;
        ps_values_number(argv[a->values_start + k], &d);
        dst[k] = (float)d;
    }
}

int ps_arg_table_format(RedisModuleCtx *ctx, RedisModuleString *arg, ps_format *fmt, int *values) {
    size_t fl;
    const char *fs = RedisModule_StringPtrLen(arg, &fl);
    if (values && ps_arg_is(arg, "VALUES")) {
        *values = 1;
        return 0;
    }
    if (ps_format_parse(fs, fl, fmt) != 0) {
        ps_reply_errorf(ctx, PSERR_FORMAT_F, fs);
        return -1;
    }
    if (!ps_proto_format_table(*fmt)) { /* the formats tables take (common/protocol.h) */
        ps_reply_errorf(ctx, PSERR_FORMAT_NOT_HERE_F, ps_format_name(*fmt));
        return -1;
    }
    return 0;
}

int ps_reply_kind(RedisModuleCtx *ctx, PSKeyKind kind) {
    return RedisModule_ReplyWithError(ctx, kind == PS_KIND_EMPTY ? PSERR_NOKEY
                                                                 : REDISMODULE_ERRORMSG_WRONGTYPE);
}

/* IDS of a table in id format 'idfmt' (common/protocol.h): RAW, a
 * non-empty blob of little-endian uint64 ids, at most 'max' of them; EF, a
 * list of 1 .. 'efmax' ids (common/idlist.h), checked whole and decoded
 * into ps_scratch_ids, whose size the header's count bounds before
 * anything is allocated. Sets *p to the ids (little-endian uint64) and *k to
 * their number, or replies the error and returns -1. */
static int ids_arg(RedisModuleCtx *ctx, RedisModuleString *arg, int idfmt, size_t max,
                   uint64_t efmax, const unsigned char **p, size_t *k) {
    size_t len;
    const unsigned char *s = (const unsigned char *)RedisModule_StringPtrLen(arg, &len);
    if (idfmt == PS_PROTO_IDFMT_RAW) {
        if (len == 0 || len % 8 || len / 8 > max) {
            RedisModule_ReplyWithError(ctx, PSERR_EMBED_IDS);
            return -1;
        }
        *p = s;
        *k = len / 8;
        return 0;
    }
    ps_idlist_hdr h;
    int e = ps_idlist_header(s, len, efmax, &h);
    if (e == PS_IDL_COUNT) {
        ps_reply_errorf(ctx, PSERR_IDS_EF_COUNT_F, (unsigned long long)h.n, (unsigned long long)efmax,
                        len);
        return -1;
    }
    uint64_t *out = NULL;
    if (e == PS_IDL_OK) {
        if ((out = ps_scratch_ids(h.n)) == NULL) {
            RedisModule_ReplyWithError(ctx, PSERR_OOM);
            return -1;
        }
        e = ps_idlist_decode(s, len, &h, out);
    }
    if (e != PS_IDL_OK) {
        ps_reply_errorf(ctx, PSERR_IDS_EF_F, ps_idlist_strerror(e));
        return -1;
    }
    *p = (const unsigned char *)out; /* little-endian host (codec.h) */
    *k = (size_t)h.n;
    return 0;
}

/* IDFORMAT's value: a PS_PROTO_ID_FORMATS name. Sets *idfmt, or replies
 * the error and returns -1. */
static int idformat_arg(RedisModuleCtx *ctx, RedisModuleString *arg, int *idfmt) {
    size_t len;
    const char *s = RedisModule_StringPtrLen(arg, &len);
    if ((*idfmt = ps_proto_idformat_parse(s, len)) < 0) {
        ps_reply_errorf(ctx, PSERR_IDFORMAT_F, s);
        return -1;
    }
    return 0;
}

/* FORMAT's value for the grammar of a table ('table': F32, F16, BF16) or a
 * tensor (any format; only the dense ones when 'dense'), and VALUES when
 * 'values' is non-NULL (sets *values). PS.PUSHGRAD and PS.PULL share it.
 * REDISMODULE_OK, or the error replied and REDISMODULE_ERR. */
static int format_arg(RedisModuleCtx *ctx, RedisModuleString *v, int table, int dense,
                      ps_format *fmt, int *values) {
    if (table) return ps_arg_table_format(ctx, v, fmt, values) ? REDISMODULE_ERR : REDISMODULE_OK;
    if (values && ps_arg_is(v, "VALUES")) {
        *values = 1;
        return REDISMODULE_OK;
    }
    size_t fl;
    const char *fs = RedisModule_StringPtrLen(v, &fl);
    if (ps_format_parse(fs, fl, fmt) != 0) {
        ps_reply_errorf(ctx, PSERR_FORMAT_F, fs);
        return REDISMODULE_ERR;
    }
    if (dense && !ps_proto_format_dense(*fmt)) { /* TOPK (common/protocol.h) */
        ps_reply_errorf(ctx, PSERR_FORMAT_NOT_HERE_F, ps_format_name(*fmt));
        return REDISMODULE_ERR;
    }
    return REDISMODULE_OK;
}
/* Replies 'msg' and returns REDISMODULE_ERR (the parsers' failure). */
static int fail(RedisModuleCtx *ctx, const char *msg) {
    RedisModule_ReplyWithError(ctx, msg);
    return REDISMODULE_ERR;
}

/* The keywords of the shared verbs. Each grammar lists the ones it knows
 * (ps_option_at's list) and maps them to these codes; IDS is in the tensor
 * list and ROWS in the table's so that a keyword of the other value type is
 * a type error rather than an unknown option. */
enum { O_FORMAT, O_ROWS, O_VERSION, O_ID, O_SCALE, O_IDS, O_IDFORMAT, O_AT, O_MINVERSION, O_TIMEOUT };

/* The type faults of a shared verb's option list, answered before any other
 * fault (docs/commands.md "Embedding tables"), and the grammar to parse it
 * with. Walks the option slots from argv[i]: a keyword of either grammar
 * ('all') and its values, then the next keyword; a value is never looked
 * at. A token that is no keyword is stepped over alone and a keyword
 * missing its values ends the walk: the parse answers both, so they only
 * decide which fault a command with several gets. IDS or IDFORMAT, the table's keywords, on a key
 * that holds no table answers ERR no such key / WRONGTYPE: returns 1 after replying. A
 * table's option list without IDS is a tensor's: *grammar becomes
 * PS_KIND_OTHER, so that it is parsed as a tensor's and then answers
 * WRONGTYPE (as it did before issue 21, when the verbs were routed by IDS).
 * Otherwise *grammar is 'kind'. */
static int type_fault(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, int i,
                      const PSOption *all, PSKeyKind kind, PSKeyKind *grammar) {
    *grammar = kind;
    int ids = 0;
    while (i < argc) {
        size_t len;
        const char *tok = RedisModule_StringPtrLen(argv[i], &len);
        int k = 0;
        while (all[k].name && !token_is(tok, len, all[k].name)) k++;
        if (!all[k].name) {
            i++;
            continue;
        }
        const int is_ids = strcmp(all[k].name, "IDS") == 0;
        if (is_ids || strcmp(all[k].name, "IDFORMAT") == 0) {
            if (kind != PS_KIND_TABLE) {
                ps_reply_kind(ctx, kind);
                return 1;
            }
            ids |= is_ids;
        }
        if (i + all[k].nvals >= argc) return 0;
        i += 1 + all[k].nvals;
    }
    if (kind == PS_KIND_TABLE && !ids) *grammar = PS_KIND_OTHER;
    return 0;
}

/* ========================================================================
 * PS.PUSHGRAD
 * ====================================================================== */

int ps_args_push(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, PSKeyKind kind,
                 PSPushArgs *a) {
    memset(a, 0, sizeof(*a));
    a->fmt = PS_FMT_F32;
    a->scale = 1.0;
    a->argc = argc;
    int i = 3;
    if (ps_arg_is(argv[2], "VALUES")) {
        double d;
        while (i < argc && ps_values_number(argv[i], &d)) i++;
        a->values_start = 3;
        a->nvalues = i - 3;
    } else {
        a->grad = argv[2];
    }
    /* The tensor list holds every keyword of both grammars. */
    static const PSOption tensor_opts[] = {{"FORMAT", 1}, {"ROWS", 1}, {"VERSION", 1}, {"ID", 2},
                                           {"SCALE", 1},  {"IDS", 1},  {"IDFORMAT", 1}, {NULL, 0}};
    PSKeyKind grammar;
    if (type_fault(ctx, argv, argc, i, tensor_opts, kind, &grammar)) return REDISMODULE_ERR;
    const int table = grammar == PS_KIND_TABLE;
    if (a->values_start && a->nvalues == 0) return fail(ctx, PSERR_VALUES_EMPTY);
    static const int tensor_codes[] = {O_FORMAT, O_ROWS, O_VERSION, O_ID, O_SCALE, O_IDS, O_IDFORMAT};
    static const PSOption table_opts[] = {{"IDS", 1}, {"FORMAT", 1}, {"VERSION", 1}, {"ID", 2},
                                          {"ROWS", 1}, {"IDFORMAT", 1}, {NULL, 0}};
    static const int table_codes[] = {O_IDS, O_FORMAT, O_VERSION, O_ID, O_ROWS, O_IDFORMAT};
    const PSOption *opts = table ? table_opts : tensor_opts;
    const int *codes = table ? table_codes : tensor_codes;
    RedisModuleString *ids = NULL;
    unsigned seen = 0;
    for (; i < argc; i++) {
        if (!table && a->values_start && i == a->values_start + a->nvalues) {
            /* The token that ended a tensor's VALUES list must be an option. */
            int known = 0;
            for (int k = 0; opts[k].name; k++) known |= ps_arg_is(argv[i], opts[k].name);
            if (!known) {
                ps_reply_errorf(ctx, PSERR_VALUES_BAD_F, RedisModule_StringPtrLen(argv[i], NULL));
                return REDISMODULE_ERR;
            }
        }
        const int k = ps_option_at(ctx, argv, argc, i, opts, &seen);
        if (k < 0) return REDISMODULE_ERR;
        RedisModuleString *v = argv[i + 1];
        switch (codes[k]) {
        case O_IDS:
        case O_IDFORMAT:
            if (!table) {
                ps_reply_kind(ctx, kind);
                return REDISMODULE_ERR;
            }
            if (codes[k] == O_IDS) {
                ids = v;
                a->ids_at = i + 1;
            } else {
                if (idformat_arg(ctx, v, &a->idfmt)) return REDISMODULE_ERR;
                a->idformat_at = i;
            }
            break;
        case O_ROWS:
            if (table) return fail(ctx, REDISMODULE_ERRORMSG_WRONGTYPE);
            a->rows = v;
            break;
        case O_FORMAT:
            if (!a->grad) {
                ps_reply_errorf(ctx, PSERR_FORMAT_NOT_HERE_F, "with VALUES");
                return REDISMODULE_ERR;
            }
            if (format_arg(ctx, v, table, 0, &a->fmt, NULL) != REDISMODULE_OK) return REDISMODULE_ERR;
            break;
        case O_VERSION:
            if (ps_arg_u64(ctx, v, "VERSION", &a->version) != REDISMODULE_OK) return REDISMODULE_ERR;
            a->has_version = 1;
            break;
        case O_ID:
            a->id = RedisModule_StringPtrLen(v, &a->idlen);
            if (ps_arg_u64(ctx, argv[i + 2], "ID seq", &a->seq) != REDISMODULE_OK) return REDISMODULE_ERR;
            if (a->idlen == 0 || a->idlen > PS_MAX_CLIENT_ID || a->seq == 0) return fail(ctx, PSERR_ID);
            break;
        default: /* O_SCALE */
            if (ps_arg_double(ctx, v, "SCALE", &a->scale) != REDISMODULE_OK) return REDISMODULE_ERR;
            break;
        }
        i += opts[k].nvals;
    }
    if (table) {
        /* A table is pushed by IDS: without it the command is a tensor's. */
        if (!ids) return fail(ctx, REDISMODULE_ERRORMSG_WRONGTYPE);
        if (ids_arg(ctx, ids, a->idfmt, PSE_MAX_PUSH_IDS, PSE_MAX_PUSH_IDS, &a->ids, &a->nids))
            return REDISMODULE_ERR;
    } else if (kind == PS_KIND_TABLE) {
        return fail(ctx, REDISMODULE_ERRORMSG_WRONGTYPE); /* a tensor's command on a table */
    }
    return REDISMODULE_OK;
}

void ps_args_replicate_push(RedisModuleCtx *ctx, RedisModuleString **argv, const PSPushArgs *a) {
    if (a->idformat_at == 0) {
        RedisModule_ReplicateVerbatim(ctx);
        return;
    }
    RedisModuleString *raw = RedisModule_CreateString(ctx, (const char *)a->ids, 8 * a->nids);
    RedisModuleString **v = RedisModule_Alloc(sizeof(*v) * (size_t)a->argc);
    size_t n = 0;
    for (int i = 1; i < a->argc; i++) {
        if (i == a->idformat_at || i == a->idformat_at + 1) continue;
        v[n++] = i == a->ids_at ? raw : argv[i];
    }
    RedisModule_Replicate(ctx, "ps.pushgrad", "v", v, n);
    RedisModule_Free(v);
    RedisModule_FreeString(ctx, raw);
}

/* ========================================================================
 * PS.PULL
 * ====================================================================== */

int ps_args_pull(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, PSKeyKind kind,
                 PSPullArgs *a) {
    memset(a, 0, sizeof(*a));
    a->fmt = PS_FMT_F32;
    /* The tensor list holds every keyword of both grammars. */
    static const PSOption tensor_opts[] = {{"FORMAT", 1},     {"ROWS", 1},    {"AT", 1},
                                           {"MINVERSION", 1}, {"TIMEOUT", 1}, {"IDS", 1},
                                           {"IDFORMAT", 1},   {NULL, 0}};
    PSKeyKind grammar;
    if (type_fault(ctx, argv, argc, 2, tensor_opts, kind, &grammar)) return REDISMODULE_ERR;
    const int table = grammar == PS_KIND_TABLE;
    static const int tensor_codes[] = {O_FORMAT, O_ROWS, O_AT, O_MINVERSION, O_TIMEOUT, O_IDS, O_IDFORMAT};
    static const PSOption table_opts[] = {{"IDS", 1}, {"FORMAT", 1}, {"ROWS", 1}, {"IDFORMAT", 1},
                                          {NULL, 0}};
    static const int table_codes[] = {O_IDS, O_FORMAT, O_ROWS, O_IDFORMAT};
    const PSOption *opts = table ? table_opts : tensor_opts;
    const int *codes = table ? table_codes : tensor_codes;
    RedisModuleString *ids = NULL;
    int have_timeout = 0;
    unsigned seen = 0;
    for (int i = 2; i < argc; i += 2) {
        const int k = ps_option_at(ctx, argv, argc, i, opts, &seen);
        if (k < 0) return REDISMODULE_ERR;
        RedisModuleString *v = argv[i + 1];
        switch (codes[k]) {
        case O_IDS:
        case O_IDFORMAT:
            if (!table) {
                ps_reply_kind(ctx, kind);
                return REDISMODULE_ERR;
            }
            if (codes[k] == O_IDS) ids = v;
            else if (idformat_arg(ctx, v, &a->idfmt)) return REDISMODULE_ERR;
            break;
        case O_ROWS:
            if (table) return fail(ctx, REDISMODULE_ERRORMSG_WRONGTYPE);
            a->rows = (const unsigned char *)RedisModule_StringPtrLen(v, &a->rowslen);
            break;
        case O_FORMAT:
            if (format_arg(ctx, v, table, 1, &a->fmt, &a->values) != REDISMODULE_OK) return REDISMODULE_ERR;
            break;
        case O_AT:
            a->at = RedisModule_StringPtrLen(v, &a->atlen);
            break;
        case O_MINVERSION:
            if (ps_arg_u64(ctx, v, "MINVERSION", &a->minversion) != REDISMODULE_OK) return REDISMODULE_ERR;
            a->has_min = 1;
            break;
        default: /* O_TIMEOUT */
            if (ps_arg_ll(ctx, v, "TIMEOUT", 0, 1LL << 40, &a->timeout_ms) != REDISMODULE_OK)
                return REDISMODULE_ERR;
            have_timeout = 1;
            break;
        }
    }
    if (table) {
        /* A table is pulled by IDS: without it the command is a tensor's. */
        if (!ids) return fail(ctx, REDISMODULE_ERRORMSG_WRONGTYPE);
        /* How many ids a pull may name is bounded by ps.max-pull-bytes (the
         * handler); an EF list, decoded here, by that at dim 1 as well. */
        uint64_t efmax = (uint64_t)PSConf.max_pull_bytes / PS_PULL_ELEM_BYTES;
        if (efmax > PSE_MAX_PUSH_IDS) efmax = PSE_MAX_PUSH_IDS;
        if (ids_arg(ctx, ids, a->idfmt, SIZE_MAX, efmax, &a->ids, &a->nids)) return REDISMODULE_ERR;
    } else if (have_timeout && !a->has_min) {
        return fail(ctx, PSERR_TIMEOUT_NEEDS_MIN);
    } else if (kind == PS_KIND_TABLE) {
        return fail(ctx, REDISMODULE_ERRORMSG_WRONGTYPE); /* a tensor's command on a table */
    }
    return REDISMODULE_OK;
}

/* ========================================================================
 * PS.SCORE
 * ====================================================================== */

int ps_args_score(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, PSScoreArgs *a) {
    RedisModuleString *counts = NULL, *ids = NULL, *vals = NULL, *fields = NULL, *fmt = NULL;
    memset(a, 0, sizeof(*a));
    a->model = -1;
    enum { S_MODEL, S_COUNTS, S_IDS, S_VALS, S_BIAS, S_FORMAT, S_FIELDS, S_FIELDCOUNT };
    static const PSOption opts[] = {{"MODEL", 1}, {"COUNTS", 1}, {"IDS", 1},    {"VALS", 1},
                                    {"BIAS", 1},  {"FORMAT", 1}, {"FIELDS", 1}, {"FIELDCOUNT", 1},
                                    {NULL, 0}};
    unsigned seen = 0;
    int f32 = 0, f64 = 0;
    for (int i = 2; i < argc; i += 2) {
        int k = ps_option_at(ctx, argv, argc, i, opts, &seen);
        if (k < 0) return REDISMODULE_ERR;
        RedisModuleString *v = argv[i + 1];
        size_t len;
        const char *s = RedisModule_StringPtrLen(v, &len);
        if (k == S_MODEL) {
            if ((a->model = ps_ctr_score_model_parse(s, len)) < 0) {
                ps_reply_errorf(ctx, PSERR_SCORE_MODEL_F, s);
                return REDISMODULE_ERR;
            }
        } else if (k == S_COUNTS) {
            counts = v;
        } else if (k == S_IDS) {
            ids = v;
        } else if (k == S_VALS) {
            vals = v;
        } else if (k == S_BIAS) {
            double d;
            if (ps_arg_double(ctx, v, "BIAS", &d) != REDISMODULE_OK) return REDISMODULE_ERR;
            if (fabs(d) > FLT_MAX) return fail(ctx, PSERR_SCORE_BIAS);
            a->bias = (float)d; /* the trainer's bias is a float32 tensor */
        } else if (k == S_FIELDS) {
            fields = v;
        } else if (k == S_FIELDCOUNT) {
            long long f;
            if (RedisModule_StringToLongLong(v, &f) != REDISMODULE_OK || f < 1 ||
                f > PS_CTR_POOL_MAX_FIELDS)
                return fail(ctx, PSERR_SCORE_FIELDCOUNT);
            a->nfields = (uint32_t)f;
        } else if (ps_arg_is(v, "VALUES")) {
            a->values_reply = 1;
        } else {
            /* F64 is PS.SCORE's own (logits); F32 the wire format (MLP's floats). */
            ps_format wf;
            f64 = ps_arg_is(v, "F64");
            f32 = !f64 && ps_format_parse(s, len, &wf) == 0 && wf == PS_FMT_F32;
            if (!f64 && !f32) {
                ps_reply_errorf(ctx, PSERR_SCORE_FORMAT_F, s);
                return REDISMODULE_ERR;
            }
            fmt = v;
        }
    }
    if (a->model < 0 || !counts || !ids) return fail(ctx, PSERR_SCORE_NEEDS);
    const int mlp = a->model == PS_SCORE_MLP;
    if (fmt && (mlp ? f64 : f32)) {
        ps_reply_errorf(ctx, PSERR_SCORE_FORMAT_MODEL_F, f64 ? "F64" : ps_format_name(PS_FMT_F32),
                        mlp ? "MLP" : a->model == PS_SCORE_LR ? "LR" : "FM");
        return REDISMODULE_ERR;
    }
    if (mlp && (!fields || !a->nfields)) return fail(ctx, PSERR_SCORE_MLP_NEEDS);
    if (!mlp && (fields || (seen & (1u << S_FIELDCOUNT)))) return fail(ctx, PSERR_SCORE_MLP_ONLY);
    if (mlp && (seen & (1u << S_BIAS))) return fail(ctx, PSERR_SCORE_MLP_BIAS);

    /* The batch's shape: n samples, their feature counts summing to the ids. */
    size_t clen, idlen, vlen = 0;
    a->counts = (const unsigned char *)RedisModule_StringPtrLen(counts, &clen);
    a->ids = (const unsigned char *)RedisModule_StringPtrLen(ids, &idlen);
    a->vals = vals ? (const unsigned char *)RedisModule_StringPtrLen(vals, &vlen) : NULL;
    if (clen == 0 || clen % 4) return fail(ctx, PSERR_SCORE_COUNTS);
    a->n = clen / 4;
    uint64_t nnz = 0;
    for (size_t i = 0; i < a->n; i++) {
        uint32_t c;
        memcpy(&c, a->counts + 4 * i, 4);
        nnz += c;
    }
    a->nnz = nnz;
    if (nnz > PSE_MAX_PUSH_IDS || idlen != 8 * nnz) {
        ps_reply_errorf(ctx, PSERR_SCORE_IDS_F, idlen, (unsigned long long)nnz,
                        (unsigned long long)(8 * nnz));
        return REDISMODULE_ERR;
    }
    if (vals && vlen != 4 * nnz) {
        ps_reply_errorf(ctx, PSERR_SCORE_VALS_F, vlen, (unsigned long long)nnz,
                        (unsigned long long)(4 * nnz));
        return REDISMODULE_ERR;
    }
    if (mlp) {
        size_t flen;
        a->fields = (const unsigned char *)RedisModule_StringPtrLen(fields, &flen);
        if (flen != 4 * nnz) {
            ps_reply_errorf(ctx, PSERR_SCORE_FIELDS_F, flen, (unsigned long long)nnz,
                            (unsigned long long)(4 * nnz));
            return REDISMODULE_ERR;
        }
        for (uint64_t j = 0; j < nnz; j++) {
            uint32_t f;
            memcpy(&f, a->fields + 4 * j, 4);
            if (f >= a->nfields) {
                ps_reply_errorf(ctx, PSERR_SCORE_FIELD_F, (unsigned long long)j, f, a->nfields,
                                a->nfields - 1);
                return REDISMODULE_ERR;
            }
        }
    }
    return REDISMODULE_OK;
}
