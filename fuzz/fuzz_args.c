/* fuzz_args.c -- libFuzzer harness for the module's argument parsers of the
 * shared verbs and of PS.SCORE (module/args.c: ps_args_push, ps_args_pull,
 * ps_args_score), the real code linked against a fake of the few Redis
 * module calls it makes (string access, number parsing, error replies).
 *
 * Input: one byte picks the command and the key's kind (empty, tensor,
 * table, other), then up to 20 arguments, each one byte: below 0xa0 a
 * keyword or value from a list (options, formats, id formats, numbers),
 * else a slice of the input (a length byte, then the bytes: blobs, an
 * IDFORMAT EF list), copied NUL-terminated as Redis's strings are. Invariants besides memory safety (ASan: the decoded
 * ids get a buffer of exactly the declared count):
 *  - a parse either succeeds with no reply, or fails with exactly one
 *    error reply that starts with a code (an upper-case word);
 *  - a table's ids: RAW, 8 bytes each of a non-empty blob; EF, 1 .. the
 *    bound (pushes 2^24, pulls min(2^24, ps.max-pull-bytes / 4)) ids, at
 *    most 8 per blob byte, non-decreasing;
 *  - PS.SCORE's shape: the counts sum to the ids (8 bytes each, at most
 *    2^24) and VALS has 4 bytes per id; MODEL MLP: FIELDS has 4 bytes per
 *    id, each field < FIELDCOUNT (1..256); LR and FM: no fields. */

#define PS_REDISMODULE_DEFINE /* the API pointers live here */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "args.h"
#include "ctr_score.h"
#include "embed.h"
#include "fuzz_util.h"
#include "idlist.h"
#include "ps_module.h"

struct RedisModuleString {
    const char *p;
    size_t len;
};

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "invariant failed: %s (line %d)\n", #c, __LINE__);                     \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* ---- the fake module API and the glue args.c uses -------------------- */

PSConfig PSConf = {.max_pull_bytes = 1 << 20, .dedup_max = 16, .max_staleness = -1};
static int Replies;
static uint64_t *IdScratch;
static uint64_t IdScratchN;

static void check_error_text(const char *s) {
    size_t k = 0;
    while (s[k] >= 'A' && s[k] <= 'Z') k++;
    CHECK(k > 0 && (s[k] == ' ' || s[k] == '\0'));
}

static int f_ReplyWithError(RedisModuleCtx *ctx, const char *err) {
    (void)ctx;
    check_error_text(err);
    Replies++;
    return 0;
}

int ps_reply_errorf(RedisModuleCtx *ctx, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    return f_ReplyWithError(ctx, buf);
}

uint64_t *ps_scratch_ids(uint64_t n) {
    free(IdScratch);
    IdScratch = malloc(n ? n * sizeof(uint64_t) : 1); /* exactly n: ASan sees overruns */
    IdScratchN = n;
    return IdScratch;
}

static const char *f_StringPtrLen(const RedisModuleString *s, size_t *len) {
    if (len) *len = s->len;
    return s->p;
}

/* Redis's rules: the whole string, no spaces, in range. */
static int f_StringToLongLong(const RedisModuleString *s, long long *ll) {
    char b[32], *end;
    if (s->len == 0 || s->len >= sizeof(b) || s->p[0] == ' ') return 1;
    memcpy(b, s->p, s->len);
    b[s->len] = 0;
    if (strlen(b) != s->len) return 1;
    errno = 0;
    *ll = strtoll(b, &end, 10);
    return errno || *end ? 1 : 0;
}

static int f_StringToDouble(const RedisModuleString *s, double *d) {
    char b[64], *end;
    if (s->len == 0 || s->len >= sizeof(b) || s->p[0] == ' ') return 1;
    memcpy(b, s->p, s->len);
    b[s->len] = 0;
    if (strlen(b) != s->len) return 1;
    *d = strtod(b, &end);
    return *end || *d != *d ? 1 : 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    RedisModule_ReplyWithError = f_ReplyWithError;
    RedisModule_StringPtrLen = f_StringPtrLen;
    RedisModule_StringToLongLong = f_StringToLongLong;
    RedisModule_StringToDouble = f_StringToDouble;
    return 0;
}

/* ---- the input -------------------------------------------------------- */

static const char *const Words[] = {
    "IDS", "IDFORMAT", "EF", "RAW", "FORMAT", "F32", "F16", "BF16", "I8", "TOPK", "VALUES",
    "VERSION", "ID", "SCALE", "ROWS", "AT", "MINVERSION", "TIMEOUT", "MODEL", "LR", "FM",
    "COUNTS", "VALS", "BIAS", "F64", "1", "0", "-1", "2", "nan", "1e39", "w", "ids", "ef",
    "18446744073709551615", "18446744073709551616", "", "3.5", "MLP", "FIELDS",
    "FIELDCOUNT", "256", "257"};
#define NWORDS (sizeof(Words) / sizeof(Words[0]))
#define MAXARGS 22

/* The argument whose bytes start at 'p', or NULL. */
static const RedisModuleString *arg_at(const RedisModuleString *args, int argc, const void *p) {
    for (int i = 2; i < argc; i++)
        if ((const void *)args[i].p == p) return &args[i];
    return NULL;
}

static void check_ids(int idfmt, const unsigned char *ids, size_t n, uint64_t bound,
                      const RedisModuleString *args, int argc) {
    CHECK(n >= 1);
    if (idfmt == PS_PROTO_IDFMT_RAW) {
        const RedisModuleString *blob = arg_at(args, argc, ids);
        CHECK(blob && blob->len == 8 * n);
        return;
    }
    CHECK(idfmt == PS_PROTO_IDFMT_EF);
    CHECK(ids == (const unsigned char *)IdScratch && n == IdScratchN && n <= bound);
    CHECK(ps_idlist_sorted(IdScratch, n));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FuzzIn in = {data, size};
    RedisModuleString args[MAXARGS];
    RedisModuleString *argv[MAXARGS];
    char *owned[MAXARGS];
    int nowned = 0;
    uint8_t sel = fz_u8(&in);
    int cmd = sel % 3; /* PUSHGRAD, PULL, SCORE */
    PSKeyKind kind = (PSKeyKind)((sel / 3) % 4);
    int argc = 0;
    args[argc++] = (RedisModuleString){cmd == 0 ? "PS.PUSHGRAD" : cmd == 1 ? "PS.PULL" : "PS.SCORE", 7};
    args[argc++] = (RedisModuleString){"key", 3};
    while (in.len && argc < MAXARGS) {
        uint8_t b = fz_u8(&in);
        if (b < 0xa0) {
            const char *w = Words[b % NWORDS];
            args[argc++] = (RedisModuleString){w, strlen(w)};
        } else {
            const uint8_t *p;
            size_t n = fz_bytes(&in, 255, &p);
            /* Redis strings are sds: NUL-terminated after their length */
            char *copy = malloc(n + 1);
            memcpy(copy, p, n);
            copy[n] = 0;
            owned[nowned++] = copy;
            args[argc++] = (RedisModuleString){copy, n};
        }
    }
    for (int i = 0; i < argc; i++) argv[i] = &args[i];
    RedisModuleCtx *ctx = (RedisModuleCtx *)&in; /* opaque to args.c */
    Replies = 0;
    int rc;
    if (cmd == 0) {
        if (argc < 3) return 0;
        PSPushArgs a;
        rc = ps_args_push(ctx, argv, argc, kind, &a);
        if (rc == REDISMODULE_OK && a.ids) check_ids(a.idfmt, a.ids, a.nids, PSE_MAX_PUSH_IDS, args, argc);
        if (rc == REDISMODULE_OK && a.values_start) CHECK(a.nvalues >= 1 && a.values_start + a.nvalues <= argc);
    } else if (cmd == 1) {
        PSPullArgs a;
        rc = ps_args_pull(ctx, argv, argc, kind, &a);
        uint64_t bound = (uint64_t)PSConf.max_pull_bytes / 4;
        if (bound > PSE_MAX_PUSH_IDS) bound = PSE_MAX_PUSH_IDS;
        if (rc == REDISMODULE_OK && a.ids) check_ids(a.idfmt, a.ids, a.nids, bound, args, argc);
    } else {
        PSScoreArgs a;
        rc = ps_args_score(ctx, argv, argc, &a);
        if (rc == REDISMODULE_OK) {
            uint64_t nnz = 0;
            for (size_t i = 0; i < a.n; i++) {
                uint32_t c;
                memcpy(&c, a.counts + 4 * i, 4);
                nnz += c;
            }
            CHECK(a.n >= 1 && nnz == a.nnz && nnz <= PSE_MAX_PUSH_IDS);
            CHECK(a.model == PS_SCORE_LR || a.model == PS_SCORE_FM || a.model == PS_SCORE_MLP);
            if (a.model == PS_SCORE_MLP) {
                CHECK(a.fields && a.nfields >= 1 && a.nfields <= PS_CTR_POOL_MAX_FIELDS);
                const RedisModuleString *f = arg_at(args, argc, a.fields);
                CHECK(f && f->len == 4 * nnz);
                for (uint64_t j = 0; j < nnz; j++) {
                    uint32_t v;
                    memcpy(&v, a.fields + 4 * j, 4);
                    CHECK(v < a.nfields);
                }
            } else {
                CHECK(!a.fields && !a.nfields);
            }
            const RedisModuleString *ids = NULL, *vals = NULL;
            for (int i = 2; i + 1 < argc; i += 2) {
                /* keywords are case-insensitive */
                if (args[i].len == 3 && !strncasecmp(args[i].p, "IDS", 3)) ids = &args[i + 1];
                if (args[i].len == 4 && !strncasecmp(args[i].p, "VALS", 4)) vals = &args[i + 1];
            }
            CHECK(ids && ids->len == 8 * nnz && (const unsigned char *)ids->p == a.ids);
            CHECK(!vals == !a.vals && (!vals || vals->len == 4 * nnz));
        }
    }
    CHECK(rc == REDISMODULE_OK || rc == REDISMODULE_ERR);
    CHECK(rc == REDISMODULE_OK ? Replies == 0 : Replies == 1);
    free(IdScratch);
    IdScratch = NULL;
    IdScratchN = 0;
    for (int i = 0; i < nowned; i++) free(owned[i]);
    return 0;
}
