/* fuzz_embed.c -- libFuzzer harness for the ps-embeds RDB loader: the real
 * module/type_embed.c (PSEmbedType_RdbLoad: header decode, filter chunks,
 * row blocks through PSEmbed_LoadBegin/LoadRow/LoadEnd, exactly-once
 * entries) and the embedding core, linked against a fake RedisModuleIO that
 * serves the fuzz input.
 *
 * From PS_EMBED_ENCVER_RING the value ends with a table's ring state
 * (module/ring_table_io.c, PSRingTable_Deserialize: hostile bytes), which
 * the same invariants cover (the seed of optimizer 0 is ring-tracked: base
 * rows, a pending take, marks, a forward entry); on a tracked table a delta
 * cut from the input is applied or refused without a change, and a take
 * answers ascending rows (check_ring).
 *
 * Input: an RDB value of the latest encoding version, else of an older one
 * (the corpus's seed-N files are of the first, seed-v2-N of the second), in
 * the fake encoding below (an unsigned = 8 bytes
 * little-endian; a string buffer = 4-byte little-endian length + bytes).
 * Reading past the end sets the I/O error flag, as Redis does with
 * REDISMODULE_OPTIONS_HANDLE_IO_ERRORS.
 *
 * Invariants: a loaded value saves and loads back to the same bytes with the
 * same digest; its copy has that digest; its AOF rewrite emits arguments
 * under 64 MB; a push and a pull on it keep the digest of save -> load; its
 * tombstone queries answer REBASE exactly outside (horizon, version], end
 * within the log's length and report no live row (after loading, and after
 * a push and an eviction by age); it frees cleanly (ASan checks leaks and accesses). A refused input leaks
 * nothing.
 *
 * PS_FUZZ_WRITE_SEEDS=<dir> writes the seed corpus (saved real tables) into
 * <dir> and exits. */

#define PS_REDISMODULE_DEFINE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embed_glue.h"
#include "fuzz_util.h"
#include "ring_table.h"

/* Defined by module/glue.c in the module. */
RedisModuleType *PSEmbedType = NULL;

/* ---------------------------------------------------------------- fake IO */

struct RedisModuleIO {
    const uint8_t *in;
    size_t left;
    int err;
    uint8_t *buf; /* what is saved */
    size_t used, cap;
};

static void put(RedisModuleIO *io, const void *p, size_t n) {
    if (io->used + n > io->cap) {
        io->cap = 2 * (io->used + n) + 256;
        io->buf = realloc(io->buf, io->cap);
        FZ_CHECK(io->buf != NULL);
    }
    memcpy(io->buf + io->used, p, n);
    io->used += n;
}

static int take(RedisModuleIO *io, void *p, size_t n) {
    if (io->err || io->left < n) {
        io->err = 1;
        memset(p, 0, n);
        return -1;
    }
    memcpy(p, io->in, n);
    io->in += n;
    io->left -= n;
    return 0;
}

static void fk_SaveUnsigned(RedisModuleIO *io, uint64_t v) { put(io, &v, 8); }
static void fk_SaveStringBuffer(RedisModuleIO *io, const char *s, size_t len) {
    uint32_t l = (uint32_t)len;
    FZ_CHECK(l == len);
    put(io, &l, 4);
    put(io, s, len);
}
static uint64_t fk_LoadUnsigned(RedisModuleIO *io) {
    uint64_t v;
    take(io, &v, 8);
    return v;
}
static char *fk_LoadStringBuffer(RedisModuleIO *io, size_t *lenp) {
    uint32_t l;
    if (take(io, &l, 4) || io->left < l) {
        io->err = 1;
        return NULL;
    }
    char *s = malloc(l ? l : 1);
    FZ_CHECK(s != NULL);
    take(io, s, l);
    *lenp = l;
    return s;
}
static int fk_IsIOError(RedisModuleIO *io) { return io->err; }
static void fk_LogIOError(RedisModuleIO *io, const char *lvl, const char *fmt, ...) {
    (void)io, (void)lvl, (void)fmt;
}
static void fk_Log(RedisModuleCtx *ctx, const char *lvl, const char *fmt, ...) {
    (void)ctx, (void)lvl, (void)fmt;
}

/* AOF rewrite: every blob argument stays under the 64 MB argument cap. */
static void fk_EmitAOF(RedisModuleIO *io, const char *cmd, const char *fmt, ...) {
    (void)io;
    FZ_CHECK(strcmp(cmd, "ps._restore") == 0);
    va_list ap;
    va_start(ap, fmt);
    for (const char *f = fmt; *f; f++) {
        if (*f == 's') (void)va_arg(ap, RedisModuleString *);
        else if (*f == 'l') (void)va_arg(ap, long long);
        else if (*f == 'c') (void)va_arg(ap, const char *);
        else if (*f == 'b') {
            (void)va_arg(ap, const char *);
            FZ_CHECK(va_arg(ap, size_t) < (64u << 20));
        } else FZ_CHECK(!"unknown EmitAOF format");
    }
    va_end(ap);
}

struct RedisModuleDigest {
    uint64_t h;
};
static void mix(RedisModuleDigest *md, const void *p, size_t n) {
    for (size_t i = 0; i < n; i++) md->h = (md->h ^ ((const uint8_t *)p)[i]) * 1099511628211ull;
}
static void fk_DigestAddStringBuffer(RedisModuleDigest *md, const char *s, size_t n) { mix(md, s, n); }
static void fk_DigestAddLongLong(RedisModuleDigest *md, long long v) { mix(md, &v, 8); }
static void fk_DigestEndSequence(RedisModuleDigest *md) { mix(md, "|", 1); }

/* Big requests fail, as TryAlloc does under maxmemory. */
static void *fk_TryAlloc(size_t n) { return n > (256u << 20) ? NULL : malloc(n ? n : 1); }
static void fk_Free(void *p) { free(p); }

/* Keys only the push's repeat finder (never read by the loader). */
static void fk_GetRandomBytes(unsigned char *dst, size_t len) { memset(dst, 0x5a, len); }

static RedisModuleTypeMethods TM;
static RedisModuleType *fk_CreateDataType(RedisModuleCtx *ctx, const char *name, int encver,
                                          RedisModuleTypeMethods *tm) {
    (void)ctx;
    FZ_CHECK(strcmp(name, PS_EMBED_TYPE_NAME) == 0 && encver == PS_EMBED_ENCVER_LATEST);
    TM = *tm;
    return (RedisModuleType *)&TM;
}

/* ------------------------------------------------------------- the checks */

static uint64_t digest_of(void *v) {
    RedisModuleDigest md = {1469598103934665603ull};
    TM.digest(&md, v);
    return md.h;
}

/* Saves 'v'; the caller frees io->buf. */
static RedisModuleIO save(void *v) {
    RedisModuleIO io = {0};
    TM.rdb_save(&io, v);
    return io;
}

static void *load_as(const uint8_t *p, size_t n, int encver) {
    RedisModuleIO io = {.in = p, .left = n};
    return TM.rdb_load(&io, encver);
}

static void *load(const uint8_t *p, size_t n) { return load_as(p, n, PS_EMBED_ENCVER_LATEST); }

int LLVMFuzzerInitialize(int *argc, char ***argv);

/* Gone ids a tombstone query reported (each must not be a live row). */
typedef struct GoneCheck {
    const PSEmbed *t;
    uint64_t since, n;
} GoneCheck;
static void check_gone(void *ud, uint64_t id, uint64_t version) {
    GoneCheck *g = ud;
    FZ_CHECK(!PSEmbed_Lookup(g->t, id, NULL));
    FZ_CHECK(version > g->since);
    g->n++;
}
static void ignore_row(void *ud, const PSEmbedRow *row) {
    GoneCheck *g = ud;
    FZ_CHECK(row->last_version > g->since);
}

/* The tombstone queries on a loaded table: REBASE exactly below the horizon
 * (or at 0, or above the version); the log's pages end within its length;
 * what they and the scan's GONE report is not live. */
static void check_tombstones(const PSEmbed *t) {
    PSEmbedState st;
    PSEmbed_GetState(t, &st);
    const uint64_t sinces[] = {0, 1, st.tomb_horizon ? st.tomb_horizon - 1 : 0, st.tomb_horizon,
                               st.version / 2, st.version, st.version + 1};
    for (size_t i = 0; i < sizeof(sinces) / sizeof(sinces[0]); i++) {
        const uint64_t since = sinces[i];
        GoneCheck g = {t, since, 0};
        uint64_t cursor = 0, pages = 0;
        int rc;
        do {
            rc = PSEmbed_Tombstones(t, since, cursor, 3, check_gone, &g, &cursor);
            FZ_CHECK(++pages <= PSEmbed_TombLen(t) / 3 + 2);
        } while (rc == PSE_OK && cursor);
        FZ_CHECK((rc == PSE_ERR_HORIZON) ==
                 (since == 0 || since < st.tomb_horizon || since > st.version));
        FZ_CHECK(g.n <= PSEmbed_TombLen(t));
        cursor = 0;
        pages = 0;
        do {
            cursor = PSEmbed_ScanGone(t, cursor, 5, since, ignore_row, check_gone, &g);
            FZ_CHECK(++pages <= (1u << 26));
        } while (cursor);
    }
}

/* A loaded ring-tracked table: a delta made of the input's first bytes
 * (ids and values as they come: unsorted, repeated, not finite, the wrong
 * size) is applied or refused, and a refused one changes nothing (digest);
 * a take and its ack keep save -> load exact. */
static void check_ring(PSEmbedValue *v, const uint8_t *data, size_t size) {
    const uint32_t dim = PSEmbed_Config(v->t)->dim;
    const size_t rows = size >= 16 ? 1 + data[0] % 3 : 0;
    if (rows && size >= rows * 8 + 1 && (uint64_t)dim <= 64) {
        size_t vlen = size - 1 - rows * 8;
        if (vlen > rows * dim * 4 + 4) vlen = rows * dim * 4 + (data[1] & 1) * 4;
        unsigned char *buf = malloc(rows * 8 + vlen + 1);
        FZ_CHECK(buf != NULL);
        memcpy(buf, data + 1, rows * 8 + vlen);
        const uint64_t before = digest_of(v);
        const int rc = PSRingTable_Apply(v->ring, v->t, "fz", 2, 1 + data[1] % 4, data[2] % 2,
                                         buf, rows, buf + rows * 8, vlen, data[3] % 3);
        FZ_CHECK(rc == 1 || rc <= 0);
        if (rc <= 0) FZ_CHECK(digest_of(v) == before);
        free(buf);
    }
    const PSRingTakeOpts o = {0, (double)(size % 4) / 100, size % 5};
    const int tk = PSRingTable_Take(v->ring, v->t, &o);
    FZ_CHECK(tk >= 0 || tk == -PS_RING_EOOM || tk == -PS_RING_ESEQ);
    if (tk == PS_RING_TAKE_NEW || tk == PS_RING_TAKE_AGAIN) {
        FZ_CHECK(v->ring->pend->rows >= 1);
        for (uint64_t i = 1; i < v->ring->pend->rows; i++)
            FZ_CHECK(v->ring->pend->ids[i] > v->ring->pend->ids[i - 1]);
        if (size % 2) PSRingTable_Ack(v->ring, v->ring->pend->seq);
    }
    RedisModuleIO s = save(v);
    PSEmbedValue *w = load(s.buf, s.used);
    FZ_CHECK(w != NULL && digest_of(w) == digest_of(v));
    TM.free(w);
    free(s.buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* The input as the latest encoding, else as each older one (salt 0
     * before PS_EMBED_ENCVER_SALT, the default tombstone log before
     * PS_EMBED_ENCVER_TOMBS); all save as the latest. */
    PSEmbedValue *v = NULL;
    for (int ev = PS_EMBED_ENCVER_LATEST; !v && ev >= PS_EMBED_ENCVER_FIRST; ev--) v = load_as(data, size, ev);
    if (!v) return 0;
    check_tombstones(v->t);
    const uint64_t d = digest_of(v);
    RedisModuleIO s1 = save(v);
    PSEmbedValue *w = load(s1.buf, s1.used);
    FZ_CHECK(w != NULL && digest_of(w) == d);
    RedisModuleIO s2 = save(w);
    FZ_CHECK(s2.used == s1.used && memcmp(s1.buf, s2.buf, s1.used) == 0);
    void *c = TM.copy(NULL, NULL, v);
    if (c) {
        FZ_CHECK(digest_of(c) == d);
        TM.free(c);
    }
    TM.aof_rewrite(NULL, NULL, v);
    FZ_CHECK(TM.mem_usage(v) >= PSEmbed_MemUsage(v->t));
    if (v->ring) check_ring(v, data, size);
    /* A loaded table keeps working: push the rows it has (and a new id),
     * pull them; save -> load of the result keeps its digest. As the
     * commands do (cmd_embed.c, cmd_ring.c): a table whose ring JOIN is in
     * progress takes no push, a ring-tracked table's push goes through the
     * ring's hooks, and a tracked table is never evicted. */
    const uint32_t dim = PSEmbed_Config(v->t)->dim;
    const uint64_t rows = PSEmbed_Rows(v->t);
    size_t k = (rows < 8 ? (size_t)rows : 8) + 1;
    if ((uint64_t)k * dim <= (1u << 20) && !(v->ring && v->ring->joining)) {
        uint64_t *ids = malloc(k * sizeof(uint64_t));
        float *g = malloc((size_t)k * dim * sizeof(float));
        FZ_CHECK(ids && g);
        for (size_t i = 0; i + 1 < k; i++) {
            PSEmbedRow r;
            PSEmbed_RowAt(v->t, i, &r);
            ids[i] = r.id;
        }
        ids[k - 1] = 0x9e3779b97f4a7c15ULL;
        for (size_t i = 0; i < (size_t)k * dim; i++) g[i] = (float)(i % 7) / 8 - 0.25f;
        PSEmbedPushResult pr;
        uint64_t mark = 0;
        int hooked = v->ring && PSRingTable_BeforePush(v->ring, v->t, (const unsigned char *)ids,
                                                       k, &mark) == PS_RING_OK;
        if (!v->ring || hooked) {
            int st =
                PSEmbed_Push(v->t, (const unsigned char *)ids, k, (const unsigned char *)g, &pr);
            FZ_CHECK(st == PSE_OK || st == PSE_ERR_OOM || st == PSE_ERR_FULL);
            if (hooked) PSRingTable_AfterPush(v->ring, st == PSE_OK, mark);
        }
        PSEmbed_Pull(v->t, (const unsigned char *)ids, k, g);
        if (!v->ring) {
            /* An eviction by age logs its removals like the push's. */
            FZ_CHECK(PSEmbed_TombReserve(v->t, PSEmbed_Rows(v->t)) == PSE_OK ||
                     PSEmbed_Config(v->t)->tombstones > (1u << 20));
            PSEmbed_EvictAge(v->t, 1 + PSEmbed_Version(v->t) % 3);
        }
        check_tombstones(v->t);
        RedisModuleIO s3 = save(v);
        PSEmbedValue *x = load(s3.buf, s3.used);
        FZ_CHECK(x != NULL && digest_of(x) == digest_of(v));
        TM.free(x);
        free(s3.buf);
        free(ids);
        free(g);
    }
    free(s1.buf);
    free(s2.buf);
    TM.free(w);
    TM.free(v);
    return 0;
}

/* Seeds: saved real tables of every optimizer, with admission, evictions
 * and exactly-once entries. */
static void write_seeds(const char *dir) {
    for (int opt = 0; opt < PSE_OPT_COUNT; opt++) {
        PSEmbedConfig c;
        PSEmbed_DefaultConfig(&c, 1 + (uint32_t)opt % 3);
        c.optim = opt;
        c.admit = opt % 2 ? 2 : 1;
        c.filter_log2 = PSE_MIN_FILTER_LOG2;
        c.capacity = opt == 3 || opt == 5 ? 5 : 0;
        c.ttl = opt == 4 ? 4 : 0;
        c.tombstones = opt == 5 ? 3 : opt == 2 ? 0 : c.tombstones; /* a log that overflowed; none */
        if (opt != PSE_OPT_FTRL) {
            c.init = PSE_INIT_UNIFORM;
            c.init_a = -1;
            c.init_b = 1;
            c.seed = (uint64_t)opt;
        }
        c.salt = opt ? 0x9e3779b97f4a7c15ULL * (uint64_t)opt : 0;
        PSEmbed *t = PSEmbed_New(&c, NULL);
        FZ_CHECK(t != NULL);
        PSEmbedValue *v = PSEmbedValue_New(t, -1, 4);
        int st;
        if (opt == 0) FZ_CHECK((v->ring = PSRingTable_New(t, "g1", 2, 1u << 20, &st)) != NULL);
        for (uint64_t p = 0; p < 8; p++) {
            uint64_t ids[3] = {p % 5, (p * 7) % 11, p % 5};
            float g[3 * 3];
            for (int i = 0; i < 9; i++) g[i] = (float)((int)(p + (uint64_t)i) % 5 - 2) / 4;
            uint64_t mark = 0;
            if (v->ring)
                FZ_CHECK(PSRingTable_BeforePush(v->ring, t, (const unsigned char *)ids, 3, &mark) ==
                         PS_RING_OK);
            FZ_CHECK(PSEmbed_Push(t, (const unsigned char *)ids, 3, (const unsigned char *)g, NULL) ==
                     PSE_OK);
            if (v->ring) PSRingTable_AfterPush(v->ring, 1, mark);
            if (v->ring && p == 4) {
                const PSRingTakeOpts o = {0, 0.0, 2};
                FZ_CHECK(PSRingTable_Take(v->ring, t, &o) == PS_RING_TAKE_NEW);
                const uint64_t rid[2] = {3, 40};
                const float rv[2] = {0.5f, -1.0f};
                FZ_CHECK(PSRingTable_Apply(v->ring, t, "g0", 2, 4, 0, (const unsigned char *)rid, 2,
                                           (const unsigned char *)rv, sizeof(rv), 1) == 1);
            }
            char id[8];
            snprintf(id, sizeof(id), "w%d", (int)(p % 3));
            PSDedupSet_Record(&v->dd, id, strlen(id), p + 1, 0, PSEmbed_Version(t));
        }
        RedisModuleIO io = save(v);
        char path[4096];
        snprintf(path, sizeof(path), "%s/seed-v%d-%d", dir, PS_EMBED_ENCVER_LATEST, opt);
        FILE *f = fopen(path, "wb");
        FZ_CHECK(f != NULL);
        fwrite(io.buf, 1, io.used, f);
        fclose(f);
        free(io.buf);
        TM.free(v);
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    RedisModule_SaveUnsigned = fk_SaveUnsigned;
    RedisModule_SaveStringBuffer = fk_SaveStringBuffer;
    RedisModule_LoadUnsigned = fk_LoadUnsigned;
    RedisModule_LoadStringBuffer = fk_LoadStringBuffer;
    RedisModule_IsIOError = fk_IsIOError;
    RedisModule_LogIOError = fk_LogIOError;
    RedisModule_Log = fk_Log;
    RedisModule_EmitAOF = fk_EmitAOF;
    RedisModule_DigestAddStringBuffer = fk_DigestAddStringBuffer;
    RedisModule_DigestAddLongLong = fk_DigestAddLongLong;
    RedisModule_DigestEndSequence = fk_DigestEndSequence;
    RedisModule_TryAlloc = fk_TryAlloc;
    RedisModule_Free = fk_Free;
    RedisModule_CreateDataType = fk_CreateDataType;
    RedisModule_GetRandomBytes = fk_GetRandomBytes;
    PSEmbed_SetAllocator(fk_TryAlloc, fk_Free);
    PSTensor_SetAllocator(fk_TryAlloc, fk_Free);
    FZ_CHECK(PSEmbedType_Register(NULL) == REDISMODULE_OK);
    const char *seeds = getenv("PS_FUZZ_WRITE_SEEDS");
    if (seeds) {
        write_seeds(seeds);
        exit(0);
    }
    return 0;
}
