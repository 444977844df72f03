/* type.c -- the ps-tensor data type: RDB load/save, AOF rewrite, digest,
 * memory usage, copy and free.
 *
 * RDB layout of one value (encoding version PS_ENCVER_1), in order:
 *   ndim, dims[ndim], version, optim, 7 hyper-parameter doubles (lr,
 *   momentum, beta1, beta2, eps, wd, clipnorm), step, b1pow, b2pow,
 *   maxstale (signed), policy, sync_n, sync_timeout_ms (signed),
 *   dedup_max, max_snapshots, round_count,
 *   array(values), nstate x array(optimizer state), [array(round) if round_count],
 *   dedup_len, dedup_len x (id, seq, window [from PS_ENCVER_2], version),
 *   nsnap, nsnap x (name, version, unix_ms, step, b1pow, b2pow, shared flags,
 *                   arrays not shared with the live tensor)
 * An array is written as ceil(n / PS_CHUNK_FLOATS) string buffers of at most
 * PS_CHUNK_FLOATS little-endian floats each. Everything loaded is validated
 * (through the same shape validator the commands use) before it is
 * allocated: RESTORE payloads are hostile input. */

#include <math.h>
#include <string.h>

#include "ps_module.h"

/* Encoding versions: one per format change, never reused.
 *   1  first format
 *   2  each exactly-once entry carries its 64-seq window after its seq */
#define PS_ENCVER_1 1
#define PS_ENCVER_2 2
#define PS_ENCVER_LATEST PS_ENCVER_2

/* Floats per RDB string / AOF argument: 32 MB, under the 64 MB argument cap. */
#define PS_CHUNK_FLOATS (8u << 20)

/* Upper bounds checked on load before anything is allocated. */
#define PS_LOAD_MAX_DEDUP (1u << 20)
#define PS_LOAD_MAX_SNAPSHOTS 4096u
#define PS_LOAD_MAX_NAME (1u << 16)

/* Flags of a saved snapshot: which arrays are the live tensor's own. */
#define SNAP_SHARES_DATA (1u << 0)
#define SNAP_SHARES_S0 (1u << 1)
#define SNAP_SHARES_S1 (1u << 2)

/* ========================================================================
 * RDB save
 * ====================================================================== */

static void save_array(RedisModuleIO *io, const PSBuf *b) {
    for (uint64_t off = 0; off < b->n; off += PS_CHUNK_FLOATS) {
        uint64_t cnt = b->n - off < PS_CHUNK_FLOATS ? b->n - off : PS_CHUNK_FLOATS;
        RedisModule_SaveStringBuffer(io, (const char *)(b->v + off), (size_t)cnt * sizeof(float));
    }
}

static void save_optstate_hdr(RedisModuleIO *io, const PSOptState *o) {
    RedisModule_SaveUnsigned(io, o->step);
    RedisModule_SaveDouble(io, o->b1pow);
    RedisModule_SaveDouble(io, o->b2pow);
}

static void PSType_RdbSave(RedisModuleIO *io, void *value) {
    PSTensor *t = value;
    RedisModule_SaveUnsigned(io, t->ndim);
    for (uint32_t i = 0; i < t->ndim; i++) RedisModule_SaveUnsigned(io, t->dims[i]);
    RedisModule_SaveUnsigned(io, t->version);
    RedisModule_SaveUnsigned(io, (uint64_t)t->optim);
    const double hv[7] = {t->h.lr, t->h.momentum, t->h.beta1, t->h.beta2,
                          t->h.eps, t->h.wd, t->h.clipnorm};
    for (int i = 0; i < 7; i++) RedisModule_SaveDouble(io, hv[i]);
    save_optstate_hdr(io, &t->opt);
    RedisModule_SaveSigned(io, t->maxstale);
    RedisModule_SaveUnsigned(io, (uint64_t)t->policy);
    RedisModule_SaveUnsigned(io, t->sync_n);
    RedisModule_SaveSigned(io, t->sync_timeout_ms);
    RedisModule_SaveUnsigned(io, t->dedup_max);
    RedisModule_SaveUnsigned(io, t->max_snapshots);
    RedisModule_SaveUnsigned(io, t->round_acc ? t->round_count : 0);
    save_array(io, t->data);
    for (int i = 0; i < ps_optim_nstate(t->optim); i++) save_array(io, t->opt.s[i]);
    if (t->round_acc && t->round_count) save_array(io, t->round_acc);
    RedisModule_SaveUnsigned(io, t->dedup_len);
    for (uint32_t i = 0; i < t->dedup_len; i++) {
        RedisModule_SaveStringBuffer(io, t->dedup[i].id, t->dedup[i].idlen);
        RedisModule_SaveUnsigned(io, t->dedup[i].seq);
        RedisModule_SaveUnsigned(io, t->dedup[i].window);
        RedisModule_SaveUnsigned(io, t->dedup[i].version);
    }
    RedisModule_SaveUnsigned(io, t->nsnap);
    for (uint32_t i = 0; i < t->nsnap; i++) {
        const PSSnapshot *s = &t->snaps[i];
        RedisModule_SaveStringBuffer(io, s->name, s->namelen);
        RedisModule_SaveUnsigned(io, s->version);
        RedisModule_SaveSigned(io, s->unix_ms);
        save_optstate_hdr(io, &s->opt);
        uint64_t flags = 0;
        if (s->data == t->data) flags |= SNAP_SHARES_DATA;
        if (s->opt.s[0] && s->opt.s[0] == t->opt.s[0]) flags |= SNAP_SHARES_S0;
        if (s->opt.s[1] && s->opt.s[1] == t->opt.s[1]) flags |= SNAP_SHARES_S1;
        RedisModule_SaveUnsigned(io, flags);
        if (!(flags & SNAP_SHARES_DATA)) save_array(io, s->data);
        for (int j = 0; j < ps_optim_nstate(t->optim); j++)
            if (!(flags & (SNAP_SHARES_S0 << j))) save_array(io, s->opt.s[j]);
    }
}

/* ========================================================================
 * RDB load
 * ====================================================================== */

/* Loads an array of n floats written by save_array into a new buffer.
 * Returns NULL (after logging) on I/O error, wrong chunk length or OOM. */
static PSBuf *load_array(RedisModuleIO *io, uint64_t n) {
    PSBuf *b = NULL;
    for (uint64_t off = 0; off < n; off += PS_CHUNK_FLOATS) {
        uint64_t cnt = n - off < PS_CHUNK_FLOATS ? n - off : PS_CHUNK_FLOATS;
        size_t len = 0;
        char *p = RedisModule_LoadStringBuffer(io, &len);
        if (RedisModule_IsIOError(io) || !p || len != cnt * sizeof(float)) {
            if (p) RedisModule_Free(p);
            RedisModule_LogIOError(io, "warning", "ps-tensor: bad array chunk");
            PSBuf_Release(b);
            return NULL;
        }
        /* Allocate only once the first chunk proved the data is there: a
         * payload claiming a huge shape must bring its bytes first. */
        if (!b && !(b = PSBuf_New(n, 0))) {
            RedisModule_Free(p);
            RedisModule_LogIOError(io, "warning", "ps-tensor: out of memory loading %llu floats",
                                   (unsigned long long)n);
            return NULL;
        }
        memcpy(b->v + off, p, len);
        RedisModule_Free(p);
    }
    return b;
}

/* Loads a string of at most 'max' bytes into a new NUL-terminated buffer. */
static char *load_name(RedisModuleIO *io, size_t max, uint32_t *lenout) {
    size_t len = 0;
    char *p = RedisModule_LoadStringBuffer(io, &len);
    if (RedisModule_IsIOError(io) || !p || len > max) {
        if (p) RedisModule_Free(p);
        return NULL;
    }
    char *c = PSTensor_Alloc(len + 1);
    if (c) {
        memcpy(c, p, len);
        c[len] = '\0';
        *lenout = (uint32_t)len;
    }
    RedisModule_Free(p);
    return c;
}

static int valid_pow(double x) { return isfinite(x) && x >= 0 && x <= 1; }

const char *PSHeader_Check(const PSHeader *hd, uint64_t *n) {
    const char *serr;
    if (hd->ndim < 1 || hd->ndim > PS_MAX_DIMS) return "bad ndim";
    /* Loading never applies ps.max-tensor-bytes: lowering the limit must
     * not make existing data unloadable. Overflow is still refused. */
    if (ps_shape_check((uint32_t)hd->ndim, hd->dims, 0, n, &serr) != 0) return serr;
    if (hd->optim >= PS_OPT_COUNT || ps_optim_check(&hd->h) || hd->policy > PS_POLICY_SCALE ||
        hd->maxstale < -1 || hd->sync_n > UINT32_MAX || hd->sync_timeout_ms < 0 ||
        hd->dedup_max > PS_LOAD_MAX_DEDUP || hd->max_snapshots > PS_LOAD_MAX_SNAPSHOTS ||
        hd->round_count > UINT32_MAX || (hd->round_count && !hd->sync_n) ||
        !valid_pow(hd->b1pow) || !valid_pow(hd->b2pow))
        return "bad optimizer or policy fields";
    return NULL;
}

PSTensor *PSHeader_Build(const PSHeader *hd, uint64_t n, int zero_arrays) {
    PSTensor *t = PSTensor_Alloc(sizeof(*t));
    if (!t) return NULL;
    memset(t, 0, sizeof(*t));
    t->ndim = (uint32_t)hd->ndim;
    memcpy(t->dims, hd->dims, hd->ndim * sizeof(uint64_t));
    t->n = n;
    t->version = hd->version;
    t->optim = (int)hd->optim;
    t->h = hd->h;
    t->maxstale = hd->maxstale;
    t->policy = (int)hd->policy;
    t->sync_n = (uint32_t)hd->sync_n;
    t->sync_timeout_ms = hd->sync_timeout_ms;
    t->dedup_max = (uint32_t)hd->dedup_max;
    t->max_snapshots = (uint32_t)hd->max_snapshots;
    t->opt.step = hd->step;
    t->opt.b1pow = hd->b1pow;
    t->opt.b2pow = hd->b2pow;
    if (!zero_arrays) return t;
    if (!(t->data = PSBuf_New(n, 1))) goto oom;
    for (int i = 0; i < ps_optim_nstate(t->optim); i++)
        if (!(t->opt.s[i] = PSBuf_New(n, 1))) goto oom;
    if (hd->round_count) {
        if (!(t->round_acc = PSBuf_New(n, 1))) goto oom;
        t->round_count = (uint32_t)hd->round_count;
    }
    return t;
oom:
    PSTensor_Free(t);
    return NULL;
}

void PSHeader_FromTensor(const PSTensor *t, PSHeader *hd) {
    memset(hd, 0, sizeof(*hd));
    hd->ndim = t->ndim;
    memcpy(hd->dims, t->dims, t->ndim * sizeof(uint64_t));
    hd->version = t->version;
    hd->optim = (uint64_t)t->optim;
    hd->h = t->h;
    hd->step = t->opt.step;
    hd->b1pow = t->opt.b1pow;
    hd->b2pow = t->opt.b2pow;
    hd->maxstale = t->maxstale;
    hd->policy = (uint64_t)t->policy;
    hd->sync_n = t->sync_n;
    hd->sync_timeout_ms = t->sync_timeout_ms;
    hd->dedup_max = t->dedup_max;
    hd->max_snapshots = t->max_snapshots;
    hd->round_count = t->round_acc ? t->round_count : 0;
}

/* Field order of the encoded header (after ndim and the dims). */
#define HDR_FIELDS(X)                                                                       \
    X(u, version) X(u, optim) X(d, h.lr) X(d, h.momentum) X(d, h.beta1) X(d, h.beta2)      \
    X(d, h.eps) X(d, h.wd) X(d, h.clipnorm) X(u, step) X(d, b1pow) X(d, b2pow)             \
    X(s, maxstale) X(u, policy) X(u, sync_n) X(s, sync_timeout_ms) X(u, dedup_max)          \
    X(u, max_snapshots) X(u, round_count)

size_t PSHeader_Encode(const PSHeader *hd, uint64_t *out) {
    size_t k = 0;
    out[k++] = hd->ndim;
    for (uint64_t i = 0; i < hd->ndim && i < PS_MAX_DIMS; i++) out[k++] = hd->dims[i];
#define ENC(kind, f) memcpy(&out[k++], &hd->f, 8);
    HDR_FIELDS(ENC)
#undef ENC
    return k;
}

int PSHeader_Decode(const unsigned char *p, size_t len, PSHeader *hd) {
    memset(hd, 0, sizeof(*hd));
    if (len < 8 || len % 8) return -1;
    memcpy(&hd->ndim, p, 8);
    if (hd->ndim < 1 || hd->ndim > PS_MAX_DIMS) return -1;
    if (len != (1 + hd->ndim + PS_HEADER_SCALARS) * 8) return -1;
    size_t k = 1;
    for (uint64_t i = 0; i < hd->ndim; i++) memcpy(&hd->dims[i], p + 8 * k++, 8);
#define DEC(kind, f) memcpy(&hd->f, p + 8 * k++, 8);
    HDR_FIELDS(DEC)
#undef DEC
    return 0;
}

static void *PSType_RdbLoad(RedisModuleIO *io, int encver) {
    if (encver < PS_ENCVER_1 || encver > PS_ENCVER_LATEST) {
        RedisModule_LogIOError(io, "warning",
                               "ps-tensor: encoding version %d is newer than this module "
                               "(supports up to %d)",
                               encver, PS_ENCVER_LATEST);
        return NULL;
    }
    PSTensor *t = NULL;
    const char *why = "truncated or corrupt value";
    PSHeader hd;
    memset(&hd, 0, sizeof(hd));
    hd.ndim = RedisModule_LoadUnsigned(io);
    if (RedisModule_IsIOError(io) || hd.ndim < 1 || hd.ndim > PS_MAX_DIMS) {
        why = "bad ndim";
        goto bad;
    }
    for (uint64_t i = 0; i < hd.ndim; i++) hd.dims[i] = RedisModule_LoadUnsigned(io);
    hd.version = RedisModule_LoadUnsigned(io);
    hd.optim = RedisModule_LoadUnsigned(io);
    hd.h.lr = RedisModule_LoadDouble(io);
    hd.h.momentum = RedisModule_LoadDouble(io);
    hd.h.beta1 = RedisModule_LoadDouble(io);
    hd.h.beta2 = RedisModule_LoadDouble(io);
    hd.h.eps = RedisModule_LoadDouble(io);
    hd.h.wd = RedisModule_LoadDouble(io);
    hd.h.clipnorm = RedisModule_LoadDouble(io);
    hd.step = RedisModule_LoadUnsigned(io);
    hd.b1pow = RedisModule_LoadDouble(io);
    hd.b2pow = RedisModule_LoadDouble(io);
    hd.maxstale = RedisModule_LoadSigned(io);
    hd.policy = RedisModule_LoadUnsigned(io);
    hd.sync_n = RedisModule_LoadUnsigned(io);
    hd.sync_timeout_ms = RedisModule_LoadSigned(io);
    hd.dedup_max = RedisModule_LoadUnsigned(io);
    hd.max_snapshots = RedisModule_LoadUnsigned(io);
    hd.round_count = RedisModule_LoadUnsigned(io);
    if (RedisModule_IsIOError(io)) goto bad;
    uint64_t n;
    if ((why = PSHeader_Check(&hd, &n)) != NULL) goto bad;
    why = "truncated or corrupt value";
    if (!(t = PSHeader_Build(&hd, n, 0))) goto oom;
    const uint64_t version = hd.version, dedup_max = hd.dedup_max;
    if (!(t->data = load_array(io, n))) goto bad;
    const int nstate = ps_optim_nstate(t->optim);
    for (int i = 0; i < nstate; i++)
        if (!(t->opt.s[i] = load_array(io, n))) goto bad;
    if (hd.round_count) {
        if (!(t->round_acc = load_array(io, n))) goto bad;
        t->round_count = (uint32_t)hd.round_count;
    }

    uint64_t dlen = RedisModule_LoadUnsigned(io);
    if (RedisModule_IsIOError(io) || dlen > dedup_max) {
        why = "bad exactly-once table size";
        goto bad;
    }
    if (dlen) {
        t->dedup = PSTensor_Alloc(dlen * sizeof(PSDedupEntry));
        if (!t->dedup) goto oom;
        t->dedup_cap = (uint32_t)dlen;
        for (uint64_t i = 0; i < dlen; i++) {
            PSDedupEntry *e = &t->dedup[i];
            if (!(e->id = load_name(io, PS_LOAD_MAX_NAME, &e->idlen))) goto bad;
            e->hash = PSTensor_DedupHash(e->id, e->idlen);
            t->dedup_len = (uint32_t)(i + 1);
            e->seq = RedisModule_LoadUnsigned(io);
            e->window = encver >= PS_ENCVER_2 ? RedisModule_LoadUnsigned(io) : 0;
            e->version = RedisModule_LoadUnsigned(io);
            if (RedisModule_IsIOError(io)) goto bad;
        }
    }

    uint64_t nsnap = RedisModule_LoadUnsigned(io);
    if (RedisModule_IsIOError(io) || nsnap > PS_LOAD_MAX_SNAPSHOTS) {
        why = "bad snapshot count";
        goto bad;
    }
    if (nsnap) {
        t->snaps = PSTensor_Alloc(nsnap * sizeof(PSSnapshot));
        if (!t->snaps) goto oom;
        for (uint64_t i = 0; i < nsnap; i++) {
            PSSnapshot *s = &t->snaps[i];
            memset(s, 0, sizeof(*s));
            if (!(s->name = load_name(io, PS_LOAD_MAX_NAME, &s->namelen))) goto bad;
            t->nsnap = (uint32_t)(i + 1);
            s->version = RedisModule_LoadUnsigned(io);
            s->unix_ms = RedisModule_LoadSigned(io);
            s->opt.step = RedisModule_LoadUnsigned(io);
            s->opt.b1pow = RedisModule_LoadDouble(io);
            s->opt.b2pow = RedisModule_LoadDouble(io);
            uint64_t flags = RedisModule_LoadUnsigned(io);
            if (RedisModule_IsIOError(io) || flags > 7 || !valid_pow(s->opt.b1pow) ||
                !valid_pow(s->opt.b2pow) || s->version > version) {
                why = "bad snapshot header";
                goto bad;
            }
            if (flags & SNAP_SHARES_DATA) {
                s->data = t->data;
                t->data->refs++;
            } else if (!(s->data = load_array(io, n))) {
                goto bad;
            }
            for (int j = 0; j < nstate; j++) {
                if (flags & (SNAP_SHARES_S0 << j)) {
                    s->opt.s[j] = t->opt.s[j];
                    t->opt.s[j]->refs++;
                } else if (!(s->opt.s[j] = load_array(io, n))) {
                    goto bad;
                }
            }
        }
    }
    return t;

oom:
    why = "out of memory";
bad:
    RedisModule_LogIOError(io, "warning", "ps-tensor: refusing to load value: %s", why);
    PSTensor_Free(t);
    return NULL;
}

/* ========================================================================
 * AOF rewrite: commands that rebuild the full state
 * ====================================================================== */

/* Emits an array as PS._RESTORE key CHUNK target offset blob commands. */
static void emit_array(RedisModuleIO *aof, RedisModuleString *key, const char *target,
                       long long snapidx, const PSBuf *b) {
    for (uint64_t off = 0; off < b->n; off += PS_CHUNK_FLOATS) {
        uint64_t cnt = b->n - off < PS_CHUNK_FLOATS ? b->n - off : PS_CHUNK_FLOATS;
        RedisModule_EmitAOF(aof, "ps._restore", "sccllb", key, "CHUNK", target, snapidx,
                            (long long)off, (const char *)(b->v + off),
                            (size_t)cnt * sizeof(float));
    }
}

static void PSType_AofRewrite(RedisModuleIO *aof, RedisModuleString *key, void *value) {
    PSTensor *t = value;
    /* Header: everything scalar as a blob of 8-byte fields that
     * PS._RESTORE HEADER validates exactly like the RDB loader. */
    PSHeader hd;
    PSHeader_FromTensor(t, &hd);
    uint64_t enc[PS_HEADER_MAX_WORDS];
    size_t words = PSHeader_Encode(&hd, enc);
    RedisModule_EmitAOF(aof, "ps._restore", "scb", key, "HEADER", (const char *)enc,
                        words * sizeof(uint64_t));
    emit_array(aof, key, "DATA", 0, t->data);
    if (t->opt.s[0]) emit_array(aof, key, "S0", 0, t->opt.s[0]);
    if (t->opt.s[1]) emit_array(aof, key, "S1", 0, t->opt.s[1]);
    if (t->round_acc && t->round_count) emit_array(aof, key, "ROUND", 0, t->round_acc);
    for (uint32_t i = 0; i < t->dedup_len; i++) {
        const PSDedupEntry *e = &t->dedup[i];
        RedisModule_EmitAOF(aof, "ps._restore", "scblll", key, "DEDUP", e->id, (size_t)e->idlen,
                            (long long)e->seq, (long long)e->version, (long long)e->window);
    }
    for (uint32_t i = 0; i < t->nsnap; i++) {
        const PSSnapshot *s = &t->snaps[i];
        long long flags = 0;
        if (s->data == t->data) flags |= SNAP_SHARES_DATA;
        if (s->opt.s[0] && s->opt.s[0] == t->opt.s[0]) flags |= SNAP_SHARES_S0;
        if (s->opt.s[1] && s->opt.s[1] == t->opt.s[1]) flags |= SNAP_SHARES_S1;
        uint64_t sh[4];
        sh[0] = s->opt.step;
        memcpy(&sh[1], &s->opt.b1pow, 8);
        memcpy(&sh[2], &s->opt.b2pow, 8);
        sh[3] = (uint64_t)flags;
        RedisModule_EmitAOF(aof, "ps._restore", "scbllb", key, "SNAPSHOT", s->name,
                            (size_t)s->namelen, (long long)s->version, (long long)s->unix_ms,
                            (const char *)sh, sizeof(sh));
        if (!(flags & SNAP_SHARES_DATA)) emit_array(aof, key, "SNAPDATA", i, s->data);
        if (s->opt.s[0] && !(flags & SNAP_SHARES_S0)) emit_array(aof, key, "SNAPS0", i, s->opt.s[0]);
        if (s->opt.s[1] && !(flags & SNAP_SHARES_S1)) emit_array(aof, key, "SNAPS1", i, s->opt.s[1]);
    }
}

/* ========================================================================
 * Digest, memory, copy, free
 * ====================================================================== */

static void digest_buf(RedisModuleDigest *md, const PSBuf *b) {
    if (b) RedisModule_DigestAddStringBuffer(md, (const char *)b->v, (size_t)b->n * sizeof(float));
    else RedisModule_DigestAddLongLong(md, -1);
}

static void digest_optstate(RedisModuleDigest *md, const PSOptState *o) {
    RedisModule_DigestAddLongLong(md, (long long)o->step);
    RedisModule_DigestAddStringBuffer(md, (const char *)&o->b1pow, sizeof(double));
    RedisModule_DigestAddStringBuffer(md, (const char *)&o->b2pow, sizeof(double));
    digest_buf(md, o->s[0]);
    digest_buf(md, o->s[1]);
}

/* Covers every byte of state (not the counters: see PSCounters). */
static void PSType_Digest(RedisModuleDigest *md, void *value) {
    PSTensor *t = value;
    RedisModule_DigestAddLongLong(md, t->ndim);
    for (uint32_t i = 0; i < t->ndim; i++) RedisModule_DigestAddLongLong(md, (long long)t->dims[i]);
    RedisModule_DigestAddLongLong(md, (long long)t->version);
    RedisModule_DigestAddLongLong(md, t->optim);
    RedisModule_DigestAddStringBuffer(md, (const char *)&t->h, sizeof(t->h));
    digest_optstate(md, &t->opt);
    RedisModule_DigestAddLongLong(md, t->maxstale);
    RedisModule_DigestAddLongLong(md, t->policy);
    RedisModule_DigestAddLongLong(md, t->sync_n);
    RedisModule_DigestAddLongLong(md, t->sync_timeout_ms);
    RedisModule_DigestAddLongLong(md, t->dedup_max);
    RedisModule_DigestAddLongLong(md, t->max_snapshots);
    RedisModule_DigestAddLongLong(md, t->round_count);
    digest_buf(md, t->data);
    digest_buf(md, t->round_acc);
    for (uint32_t i = 0; i < t->dedup_len; i++) {
        RedisModule_DigestAddStringBuffer(md, t->dedup[i].id, t->dedup[i].idlen);
        RedisModule_DigestAddLongLong(md, (long long)t->dedup[i].seq);
        RedisModule_DigestAddLongLong(md, (long long)t->dedup[i].window);
        RedisModule_DigestAddLongLong(md, (long long)t->dedup[i].version);
    }
    for (uint32_t i = 0; i < t->nsnap; i++) {
        const PSSnapshot *s = &t->snaps[i];
        RedisModule_DigestAddStringBuffer(md, s->name, s->namelen);
        RedisModule_DigestAddLongLong(md, (long long)s->version);
        RedisModule_DigestAddLongLong(md, s->unix_ms);
        digest_buf(md, s->data);
        digest_optstate(md, &s->opt);
    }
    RedisModule_DigestEndSequence(md);
}

static size_t PSType_MemUsage(const void *value) { return PSTensor_MemUsage(value); }

static void PSType_Free(void *value) {
    ps_round_timer_forget(value);
    PSTensor_Free(value);
}

static void *PSType_Copy(RedisModuleString *fromkey, RedisModuleString *tokey, const void *value) {
    (void)fromkey;
    (void)tokey;
    return PSTensor_Copy(value);
}

int PSType_Register(RedisModuleCtx *ctx) {
    RedisModuleTypeMethods tm = {
        .version = REDISMODULE_TYPE_METHOD_VERSION,
        .rdb_load = PSType_RdbLoad,
        .rdb_save = PSType_RdbSave,
        .aof_rewrite = PSType_AofRewrite,
        .mem_usage = PSType_MemUsage,
        .digest = PSType_Digest,
        .free = PSType_Free,
        .copy = PSType_Copy,
    };
    PSTensorType = RedisModule_CreateDataType(ctx, PS_TYPE_NAME, PS_ENCVER_LATEST, &tm);
    if (!PSTensorType) {
        RedisModule_Log(ctx, "warning", "could not register the %s data type", PS_TYPE_NAME);
        return REDISMODULE_ERR;
    }
    return REDISMODULE_OK;
}
