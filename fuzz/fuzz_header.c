/* fuzz_header.c -- libFuzzer harness for the RDB/RESTORE decoder: the real
 * module/type.c (PSType_RdbLoad) and the header core (module/core/header.c:
 * PSHeader_Check, PSHeader_Decode, PSTensor_SnapshotCheck) linked
 * against a fake RedisModuleIO that serves the fuzz input, so the fuzzer
 * feeds exactly the validator the loader uses.
 *
 * Input: one mode byte, then
 *   mode % 4 == 3   a PS._RESTORE HEADER blob of an ENCVER chosen by mode >> 2:
 *                   PSHeader_Decode + PSHeader_Check
 *   otherwise       an RDB value in the fake encoding below, for an encoding
 *                   version from PS_ENCVER_FIRST to PS_ENCVER_LATEST (mode >> 2)
 * Fake encoding: unsigned/signed/double = 8 bytes little-endian; a string
 * buffer = 4-byte little-endian length + bytes. Reading past the end sets the
 * I/O error flag, as Redis does with REDISMODULE_OPTIONS_HANDLE_IO_ERRORS.
 *
 * Invariants: a loaded tensor passes PSHeader_Check, has every array its
 * optimizer needs, and survives save -> load -> save byte-identically with an
 * equal digest; its AOF rewrite header decodes and checks; it can be copied,
 * pushed, snapshotted and freed (ASan checks leaks and accesses).
 *
 * PS_FUZZ_WRITE_SEEDS=<dir> writes the seed corpus (saved real tensors) into
 * <dir> and exits. */

#define PS_REDISMODULE_DEFINE
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "ps_module.h"
#include "ring.h"

RedisModuleType *PSTensorType = NULL;

/* ---------------------------------------------------------------- fake IO */

struct RedisModuleIO {
    const uint8_t *p; /* reading */
    size_t len;
    int err;
    uint8_t *out; /* writing */
    size_t olen, ocap;
};

static void io_put(RedisModuleIO *io, const void *p, size_t n) {
    if (io->olen + n > io->ocap) {
        io->ocap = (io->olen + n) * 2 + 64;
        io->out = realloc(io->out, io->ocap);
        FZ_CHECK(io->out != NULL);
    }
    memcpy(io->out + io->olen, p, n);
    io->olen += n;
}

static int io_get(RedisModuleIO *io, void *p, size_t n) {
    if (io->err || io->len < n) {
        io->err = 1;
        memset(p, 0, n);
        return -1;
    }
    memcpy(p, io->p, n);
    io->p += n;
    io->len -= n;
    return 0;
}

static void f_SaveUnsigned(RedisModuleIO *io, uint64_t v) { io_put(io, &v, 8); }
static void f_SaveSigned(RedisModuleIO *io, int64_t v) { io_put(io, &v, 8); }
static void f_SaveDouble(RedisModuleIO *io, double v) { io_put(io, &v, 8); }
static void f_SaveStringBuffer(RedisModuleIO *io, const char *s, size_t len) {
    uint32_t l = (uint32_t)len;
    FZ_CHECK(l == len);
    io_put(io, &l, 4);
    io_put(io, s, len);
}
static uint64_t f_LoadUnsigned(RedisModuleIO *io) {
    uint64_t v;
    io_get(io, &v, 8);
    return v;
}
static int64_t f_LoadSigned(RedisModuleIO *io) {
    int64_t v;
    io_get(io, &v, 8);
    return v;
}
static double f_LoadDouble(RedisModuleIO *io) {
    double v;
    io_get(io, &v, 8);
    return v;
}
static char *f_LoadStringBuffer(RedisModuleIO *io, size_t *lenp) {
    uint32_t l;
    if (io_get(io, &l, 4) || io->len < l) {
        io->err = 1;
        return NULL;
    }
    char *s = malloc(l ? l : 1);
    FZ_CHECK(s != NULL);
    io_get(io, s, l);
    if (lenp) *lenp = l;
    return s;
}
static int f_IsIOError(RedisModuleIO *io) { return io->err; }
static void f_LogIOError(RedisModuleIO *io, const char *lvl, const char *fmt, ...) {
    (void)io, (void)lvl, (void)fmt;
}

/* AOF rewrite: checks every emitted command's arguments; a HEADER blob must
 * decode and pass the same check as the RDB loader. */
static int aof_cmds;
static void f_EmitAOF(RedisModuleIO *io, const char *cmd, const char *fmt, ...) {
    (void)io;
    FZ_CHECK(strcmp(cmd, "ps._restore") == 0);
    va_list ap;
    va_start(ap, fmt);
    const char *first = NULL;
    for (const char *f = fmt; *f; f++) {
        if (*f == 's') (void)va_arg(ap, RedisModuleString *);
        else if (*f == 'l') (void)va_arg(ap, long long);
        else if (*f == 'c') {
            const char *c = va_arg(ap, const char *);
            if (!first) first = c;
        } else if (*f == 'b') {
            const char *b = va_arg(ap, const char *);
            size_t n = va_arg(ap, size_t);
            FZ_CHECK(n <= (64u << 20));
            if (first && strcmp(first, "HEADER") == 0 && f == fmt + 2) {
                PSHeader hd;
                uint64_t n2;
                FZ_CHECK(PSHeader_Decode((const unsigned char *)b, n, PS_ENCVER_LATEST, &hd) == 0);
                FZ_CHECK(PSHeader_Check(&hd, &n2) == NULL);
            }
        } else {
            FZ_CHECK(!"unknown EmitAOF format");
        }
    }
    va_end(ap);
    aof_cmds++;
}

/* Digest: FNV-1a over everything added. */
struct RedisModuleDigest {
    uint64_t h;
};
static void dg_add(RedisModuleDigest *md, const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) md->h = (md->h ^ b[i]) * 1099511628211ull;
}
static void f_DigestAddStringBuffer(RedisModuleDigest *md, const char *s, size_t n) { dg_add(md, s, n); }
static void f_DigestAddLongLong(RedisModuleDigest *md, long long v) { dg_add(md, &v, 8); }
static void f_DigestEndSequence(RedisModuleDigest *md) { dg_add(md, "|", 1); }

/* Allocation: big requests fail, as TryAlloc does under maxmemory. */
#define FUZZ_MAX_ALLOC (64u << 20)
static void *f_TryAlloc(size_t n) { return n > FUZZ_MAX_ALLOC ? NULL : malloc(n); }
static void *f_Alloc(size_t n) {
    void *p = malloc(n ? n : 1);
    FZ_CHECK(p != NULL);
    return p;
}
static void f_Free(void *p) { free(p); }

static RedisModuleTypeMethods TM;
static RedisModuleType *f_CreateDataType(RedisModuleCtx *ctx, const char *name, int encver,
                                         RedisModuleTypeMethods *tm) {
    (void)ctx;
    FZ_CHECK(strcmp(name, PS_TYPE_NAME) == 0 && encver >= 1);
    TM = *tm;
    return (RedisModuleType *)&TM;
}

/* type.c's free callback tells the sync-round timers (cmd_round.c, not
 * linked here: no timers exist in this harness). */
void ps_round_timer_forget(const PSTensor *t) { (void)t; }

int LLVMFuzzerInitialize(int *argc, char ***argv);

/* ------------------------------------------------------------- the checks */

static void check_tensor(const PSTensor *t) {
    PSHeader hd;
    uint64_t n;
    PSHeader_FromTensor(t, &hd);
    FZ_CHECK(PSHeader_Check(&hd, &n) == NULL && n == t->n);
    FZ_CHECK(t->data && t->data->n == t->n && t->data->refs >= 1);
    for (int i = 0; i < 2; i++) {
        if (i < ps_optim_nstate(t->optim)) FZ_CHECK(t->opt.s[i] && t->opt.s[i]->n == t->n);
        else FZ_CHECK(t->opt.s[i] == NULL);
    }
    FZ_CHECK(t->dedup_len <= t->dedup_max && t->dedup_len <= t->dedup_cap);
    for (uint32_t i = 0; i < t->nsnap; i++) {
        FZ_CHECK(t->snaps[i].data && t->snaps[i].data->n == t->n);
        FZ_CHECK(t->snaps[i].version <= t->version);
    }
}

static uint64_t digest_of(void *t) {
    RedisModuleDigest md = {1469598103934665603ull};
    TM.digest(&md, t);
    return md.h;
}

static void save_to(RedisModuleIO *io, void *t) {
    memset(io, 0, sizeof(*io));
    TM.rdb_save(io, t);
}

static void *load_from(const uint8_t *p, size_t len, int encver) {
    RedisModuleIO io = {.p = p, .len = len};
    void *t = TM.rdb_load(&io, encver);
    if (t) FZ_CHECK(!io.err);
    return t;
}

static void exercise(PSTensor *t) {
    TM.mem_usage(t);
    RedisModuleIO aof = {0};
    TM.aof_rewrite(&aof, NULL, t);
    void *c = TM.copy(NULL, NULL, t);
    if (!c) return;
    if (t->n <= 4096) {
        static float g[4096];
        for (uint64_t i = 0; i < t->n; i++) g[i] = 0.5f;
        PSPush p = {.g = (const unsigned char *)g, .scale = 1.0};
        PSPushResult r;
        uint64_t d = digest_of(t);
        int st = PSTensor_Push(c, &p, &r);
        if (st != PST_OK && st != PST_PENDING) FZ_CHECK(digest_of(c) == d);
        FZ_CHECK(digest_of(t) == d); /* copy on write: the original is untouched */
        if (PSTensor_SnapshotTake(c, "fz", 2, 0) == PST_OK) {
            PSTensor_Push(c, &p, &r);
            PSSnapshot *s = PSTensor_SnapshotFind(c, "fz", 2);
            if (s) PSTensor_Rollback(c, s);
        }
        /* Ring tracking: a loaded state takes, forwards and applies. */
        PSTensor *rc = c;
        if (rc->ring) {
            const PSRingTakeOpts all = {0, 0.0, 0};
            const int tk = PSRing_Take(rc, &all);
            if (tk == PS_RING_TAKE_NEW || tk == PS_RING_TAKE_AGAIN) PSRing_Ack(rc, rc->ring->pend->seq);
            const PSRingDelta *f = PSRing_FwdPeek(rc);
            if (f) FZ_CHECK(PSRing_FwdAck(rc, f->origin, f->originlen, f->seq) == 1);
            const uint32_t ix[1] = {0};
            const float one[1] = {1.0f};
            PSRing_Apply(rc, "fz", 2, 1u << 30, (const unsigned char *)ix, (const unsigned char *)one, 1, 1);
            FZ_CHECK(digest_of(t) == d);
        }
    }
    TM.free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FuzzIn in = {data, size};
    uint8_t mode = fz_u8(&in);
    if (mode % 4 == 3) {
        PSHeader hd;
        uint64_t n;
        /* Any encoding version the HEADER token may name. */
        const int hv = PS_ENCVER_FIRST + (mode >> 2) % (PS_ENCVER_LATEST - PS_ENCVER_FIRST + 1);
        if (PSHeader_Decode(in.p, in.len, hv, &hd) != 0) return 0;
        if (PSHeader_Check(&hd, &n) != NULL) return 0;
        uint64_t enc[PS_HEADER_MAX_WORDS];
        size_t w = PSHeader_Encode(&hd, enc);
        /* Every version so far has the newest layout: re-encoding gives the input. */
        if (PSHeader_Scalars(hv) == PS_HEADER_SCALARS)
            FZ_CHECK(w * 8 == in.len && memcmp(enc, in.p, in.len) == 0);
        if (n * 4 <= FUZZ_MAX_ALLOC) {
            PSTensor *t = PSHeader_ToTensor(&hd, n, 1);
            if (t) {
                check_tensor(t);
                TM.free(t);
            }
        }
        return 0;
    }
    /* The input as any encoding version the loader knows; what is saved
     * again is always the newest, PS_ENCVER_LATEST. */
    PSTensor *t = load_from(in.p, in.len, PS_ENCVER_FIRST + (mode >> 2) % PS_ENCVER_LATEST);
    if (!t) return 0;
    check_tensor(t);
    RedisModuleIO s1, s2;
    save_to(&s1, t);
    PSTensor *t2 = load_from(s1.out, s1.olen, PS_ENCVER_LATEST);
    FZ_CHECK(t2 != NULL);
    save_to(&s2, t2);
    FZ_CHECK(s1.olen == s2.olen && memcmp(s1.out, s2.out, s1.olen) == 0);
    FZ_CHECK(digest_of(t) == digest_of(t2));
    /* A newer encoding version is refused, whatever the bytes. */
    FZ_CHECK(load_from(s1.out, s1.olen, PS_ENCVER_LATEST + 1) == NULL);
    free(s1.out);
    free(s2.out);
    exercise(t);
    TM.free(t2);
    TM.free(t);
    return 0;
}

/* ------------------------------------------------------------- seeds */

static void write_seed(const char *dir, const char *name, uint8_t mode, const void *p, size_t n) {
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    FZ_CHECK(f != NULL);
    fwrite(&mode, 1, 1, f);
    fwrite(p, 1, n, f);
    fclose(f);
}

static void write_seeds(const char *dir) {
    static const struct {
        const char *name;
        int optim, sync_n, nsnap, ndedup, ndim;
    } S[] = {{"sgd-1d", PS_OPT_SGD, 0, 0, 0, 1},      {"momentum-snap", PS_OPT_MOMENTUM, 0, 2, 1, 2},
             {"adam-dedup", PS_OPT_ADAM, 0, 1, 3, 2}, {"adamw-3d", PS_OPT_ADAMW, 0, 0, 0, 3},
             {"rmsprop", PS_OPT_RMSPROP, 0, 1, 0, 1}, {"sync-round", PS_OPT_ADAGRAD, 3, 0, 1, 2},
             {"adam-twins", PS_OPT_ADAM, 0, 3, 0, 1}};
    /* Seeds are saved in the newest layout: their mode byte selects it. */
    const uint8_t latest = (uint8_t)((PS_ENCVER_LATEST - PS_ENCVER_FIRST) << 2);
    for (size_t k = 0; k < sizeof(S) / sizeof(S[0]); k++) {
        uint64_t dims[3] = {3, 2, 2};
        uint64_t n = 1;
        for (int i = 0; i < S[k].ndim; i++) n *= dims[i];
        PSTensorOpts o;
        PSTensor_DefaultOpts(&o, 0.1);
        o.optim = S[k].optim;
        o.sync_n = (uint32_t)S[k].sync_n;
        o.dedup_max = 4;
        PSTensor *t = PSTensor_New((uint32_t)S[k].ndim, dims, n, &o);
        FZ_CHECK(t != NULL);
        PSInit init = {.kind = PS_INIT_UNIFORM, .a = -1, .b = 1, .seed = k + 1};
        PSTensor_Fill(t, &init);
        float g[12];
        for (int i = 0; i < 12; i++) g[i] = (float)(i - 5) / 4;
        for (int i = 0; i < S[k].ndedup + 1; i++) {
            char id[8];
            snprintf(id, sizeof(id), "w%d", i);
            PSPush p = {.g = (const unsigned char *)g, .scale = 1.0, .id = id, .idlen = strlen(id), .seq = 1};
            PSPushResult r;
            PSTensor_Push(t, &p, &r);
            if (i < S[k].nsnap) {
                char nm[8];
                snprintf(nm, sizeof(nm), "s%d", i);
                PSTensor_SnapshotTake(t, nm, strlen(nm), 1700000000000 + i);
            }
        }
        for (int i = S[k].ndedup + 1; i < S[k].nsnap; i++) {
            char nm[8];
            snprintf(nm, sizeof(nm), "s%d", i);
            PSTensor_SnapshotTake(t, nm, strlen(nm), 1700000000000 + i);
        }
        if (S[k].nsnap >= 3) { /* snapshots taken back to back, then overtaken */
            PSPush p = {.g = (const unsigned char *)g, .scale = 1.0};
            PSPushResult r;
            PSTensor_Push(t, &p, &r);
        }
        RedisModuleIO io;
        save_to(&io, t);
        write_seed(dir, S[k].name, latest, io.out, io.olen);
        PSHeader hd;
        PSHeader_FromTensor(t, &hd);
        uint64_t enc[PS_HEADER_MAX_WORDS];
        size_t w = PSHeader_Encode(&hd, enc);
        char hn[64];
        snprintf(hn, sizeof(hn), "hdr-%s", S[k].name);
        write_seed(dir, hn, (uint8_t)(latest | 3), enc, w * 8);
        free(io.out);
        PSTensor_Free(t);
    }
    /* A ring-tracked tensor (PS_ENCVER_RING): a pending take, marks, a forward entry. */
    uint64_t dims[1] = {12};
    PSTensorOpts o;
    PSTensor_DefaultOpts(&o, 0.5);
    PSTensor *t = PSTensor_New(1, dims, 12, &o);
    FZ_CHECK(t != NULL);
    FZ_CHECK(PSRing_Track(t, "g1", 2, 1, 4096) == 1);
    float g[12];
    for (int i = 0; i < 12; i++) g[i] = (float)(i - 5) / 4;
    PSPush p = {.g = (const unsigned char *)g, .scale = 1.0};
    PSPushResult r;
    PSTensor_Push(t, &p, &r);
    const PSRingTakeOpts two = {7, 0.0, 2};
    FZ_CHECK(PSRing_Take(t, &two) == PS_RING_TAKE_NEW);
    const uint32_t ix[2] = {0, 5};
    const float vx[2] = {1.5f, -2.0f};
    FZ_CHECK(PSRing_Apply(t, "g0", 2, 4, (const unsigned char *)ix, (const unsigned char *)vx, 2, 2) == 1);
    PSTensor_Push(t, &p, &r);
    RedisModuleIO io;
    save_to(&io, t);
    write_seed(dir, "ring", latest, io.out, io.olen);
    free(io.out);
    PSTensor_Free(t);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    RedisModule_SaveUnsigned = f_SaveUnsigned;
    RedisModule_SaveSigned = f_SaveSigned;
    RedisModule_SaveDouble = f_SaveDouble;
    RedisModule_SaveStringBuffer = f_SaveStringBuffer;
    RedisModule_LoadUnsigned = f_LoadUnsigned;
    RedisModule_LoadSigned = f_LoadSigned;
    RedisModule_LoadDouble = f_LoadDouble;
    RedisModule_LoadStringBuffer = f_LoadStringBuffer;
    RedisModule_IsIOError = f_IsIOError;
    RedisModule_LogIOError = f_LogIOError;
    RedisModule_EmitAOF = f_EmitAOF;
    RedisModule_DigestAddStringBuffer = f_DigestAddStringBuffer;
    RedisModule_DigestAddLongLong = f_DigestAddLongLong;
    RedisModule_DigestEndSequence = f_DigestEndSequence;
    RedisModule_TryAlloc = f_TryAlloc;
    RedisModule_Alloc = f_Alloc;
    RedisModule_Free = f_Free;
    RedisModule_CreateDataType = f_CreateDataType;
    PSTensor_SetAllocator(f_TryAlloc, f_Free);
    FZ_CHECK(PSType_Register(NULL) == REDISMODULE_OK);
    const char *seeds = getenv("PS_FUZZ_WRITE_SEEDS");
    if (seeds) {
        write_seeds(seeds);
        exit(0);
    }
    return 0;
}
