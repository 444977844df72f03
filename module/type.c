/* type.c -- the ps-tensor data type: RDB load/save, AOF rewrite, digest,
 * memory usage, copy and free.
 *
 * RDB layout of one value (encoding versions in encver.h), in order:
 *   ndim, dims[ndim], the header scalars of PS_HEADER_FIELDS (header.h: version,
 *   optim, the hyper-parameters of hparams.h, step, b1pow, b2pow, maxstale,
 *   policy, sync_n, sync_timeout_ms, dedup_max, max_snapshots, round_count,
 *   acc_count, acc_seq, pend_count, [from PS_ENCVER_ACCUM_ROUNDS: acc_max_backlog,
 *   pend_parts, pend_done, acc_takes, acc_rounds, acc_forwarded, acc_round_max,
 *   acc_round_min];
 *   each from the version that introduced it),
 *   array(values), nstate x array(optimizer state), [array(round) if round_count],
 *   [from PS_ENCVER_ACCUM: array(ACCUM sum) if acc_count, array(pending take)
 *    if pend_count],
 *   dedup_len, dedup_len x (id, seq, window [from PS_ENCVER_DEDUP_WINDOW], version),
 *   nsnap, nsnap x (name, version, unix_ms, step, b1pow, b2pow, sharing flags,
 *                   [from PS_ENCVER_SNAP_SHARING: the earlier snapshot's index
 *                    of each array shared with one], arrays it does not share),
 *   [from PS_ENCVER_RING: tracked (0 or 1), and when 1 the ring state (ring.h):
 *    origin, take_seq, maxqueue, applied, array(base), norigins x (name, hwm,
 *    applied), pending count [, seq, delta pieces], nfwd x (origin, seq, hops,
 *    count, delta pieces)]
 * A delta's pieces are ceil(count / PS_CHUNK_FLOATS) pairs of string buffers
 * (little-endian u32 indices, F32 values) of at most PS_CHUNK_FLOATS each.
 * An array is written as ceil(n / PS_CHUNK_FLOATS) string buffers of at most
 * PS_CHUNK_FLOATS little-endian floats each. Everything loaded is validated
 * (the header by PSHeader_Check, snapshots by PSTensor_SnapshotCheck, the
 * same validators PS._RESTORE uses) before it is allocated: RESTORE payloads
 * are hostile input.
 *
 * The AOF rewrite emits PS._RESTORE commands (cmd_restore.c): HEADER with an
 * ENCVER token (the layout of its blob), CHUNKs, DEDUP entries, SNAPSHOTs,
 * and for a tracked tensor RING, a RINGBASE CHUNK, RINGORIGINs, RINGDELTAs. */

#include <math.h>
#include <string.h>

#include "ps_module.h"
#include "ring.h"

/* Floats per RDB string / AOF argument: 32 MB, under the 64 MB argument cap. */
#define PS_CHUNK_FLOATS (8u << 20)

/* Bound of an exactly-once client id loaded from an RDB value. */
#define PS_LOAD_MAX_ID (1u << 16)

/* ========================================================================
 * RDB save
 * ====================================================================== */

static void save_array(RedisModuleIO *io, const PSBuf *b) {
    for (uint64_t off = 0; off < b->n; off += PS_CHUNK_FLOATS) {
        uint64_t cnt = b->n - off < PS_CHUNK_FLOATS ? b->n - off : PS_CHUNK_FLOATS;
        RedisModule_SaveStringBuffer(io, (const char *)(b->v + off), (size_t)cnt * sizeof(float));
    }
}

/* Header fields by kind (PS_HEADER_FIELDS: u unsigned, s signed, d double). */
static void save_u(RedisModuleIO *io, uint64_t v) { RedisModule_SaveUnsigned(io, v); }
static void save_s(RedisModuleIO *io, int64_t v) { RedisModule_SaveSigned(io, v); }
static void save_d(RedisModuleIO *io, double v) { RedisModule_SaveDouble(io, v); }

/* A delta's elements in pieces of at most PS_CHUNK_FLOATS. */
static void save_delta_pieces(RedisModuleIO *io, const PSRingDelta *d) {
    for (uint64_t off = 0; off < d->count; off += PS_CHUNK_FLOATS) {
        const uint64_t cnt = d->count - off < PS_CHUNK_FLOATS ? d->count - off : PS_CHUNK_FLOATS;
        RedisModule_SaveStringBuffer(io, (const char *)(d->idx + off), (size_t)cnt * 4);
        RedisModule_SaveStringBuffer(io, (const char *)(d->val + off), (size_t)cnt * 4);
    }
}

/* The ring state (from PS_ENCVER_RING): 0 when untracked. */
static void save_ring(RedisModuleIO *io, const PSRing *r) {
    RedisModule_SaveUnsigned(io, r ? 1 : 0);
    if (!r) return;
    RedisModule_SaveStringBuffer(io, r->origin, r->originlen);
    RedisModule_SaveUnsigned(io, r->take_seq);
    RedisModule_SaveUnsigned(io, r->maxqueue);
    RedisModule_SaveUnsigned(io, r->applied);
    save_array(io, r->base);
    RedisModule_SaveUnsigned(io, r->norigins);
    for (uint32_t i = 0; i < r->norigins; i++) {
        RedisModule_SaveStringBuffer(io, r->origins[i].name, r->origins[i].len);
        RedisModule_SaveUnsigned(io, r->origins[i].hwm);
        RedisModule_SaveUnsigned(io, r->origins[i].applied);
    }
    RedisModule_SaveUnsigned(io, r->pend ? r->pend->count : 0);
    if (r->pend) {
        RedisModule_SaveUnsigned(io, r->pend->seq);
        save_delta_pieces(io, r->pend);
    }
    RedisModule_SaveUnsigned(io, r->fwd_len);
    for (const PSRingDelta *d = r->fwd_head; d; d = d->next) {
        RedisModule_SaveStringBuffer(io, d->origin, d->originlen);
        RedisModule_SaveUnsigned(io, d->seq);
        RedisModule_SaveUnsigned(io, d->hops);
        RedisModule_SaveUnsigned(io, d->count);
        save_delta_pieces(io, d);
    }
}

static void PSType_RdbSave(RedisModuleIO *io, void *value) {
    PSTensor *t = value;
    PSHeader hd;
    PSHeader_FromTensor(t, &hd);
    RedisModule_SaveUnsigned(io, hd.ndim);
    for (uint64_t i = 0; i < hd.ndim; i++) RedisModule_SaveUnsigned(io, hd.dims[i]);
#define PS_HDR_X(kind, f, since) save_##kind(io, hd.f);
    PS_HEADER_FIELDS
#undef PS_HDR_X
    save_array(io, t->data);
    for (int i = 0; i < ps_optim_nstate(t->optim); i++) save_array(io, t->opt.s[i]);
    if (t->round_acc && t->round_count) save_array(io, t->round_acc);
    if (hd.acc_count) save_array(io, t->acc.sum);
    if (hd.pend_count) save_array(io, t->acc.pend);
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
        PSSnapshotSaved ss;
        PSTensor_SnapshotDescribe(t, i, &ss);
        RedisModule_SaveStringBuffer(io, s->name, s->namelen);
        RedisModule_SaveUnsigned(io, ss.version);
        RedisModule_SaveSigned(io, ss.unix_ms);
        RedisModule_SaveUnsigned(io, ss.step);
        RedisModule_SaveDouble(io, ss.b1pow);
        RedisModule_SaveDouble(io, ss.b2pow);
        RedisModule_SaveUnsigned(io, ss.flags);
        for (int j = 0; j < 3; j++)
            if (ss.flags & (PS_SNAP_SHARES_EARLIER << j)) RedisModule_SaveUnsigned(io, ss.earlier[j]);
        for (int j = 0; j < 3; j++)
            if (PSTensor_SnapshotSavesArray(t, &ss, j)) save_array(io, j ? s->opt.s[j - 1] : s->data);
    }
    save_ring(io, t->ring);
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

/* Header fields by kind, as saved by save_u/save_s/save_d. */
static uint64_t load_u(RedisModuleIO *io) { return RedisModule_LoadUnsigned(io); }
static int64_t load_s(RedisModuleIO *io) { return RedisModule_LoadSigned(io); }
static double load_d(RedisModuleIO *io) { return RedisModule_LoadDouble(io); }

/* Loads the snapshots of 't' saved by PSType_RdbSave. Returns NULL when they
 * loaded, or why not. */
static const char *load_snapshots(RedisModuleIO *io, int encver, PSTensor *t) {
    uint64_t nsnap = RedisModule_LoadUnsigned(io);
    if (RedisModule_IsIOError(io) || nsnap > PS_LOAD_MAX_SNAPSHOTS) return "bad snapshot count";
    const uint64_t max_flags =
        encver >= PS_ENCVER_SNAP_SHARING ? PS_SNAP_FLAGS_ALL : PS_SNAP_FLAGS_LIVE_ONLY;
    for (uint64_t i = 0; i < nsnap; i++) {
        size_t len = 0;
        char *name = RedisModule_LoadStringBuffer(io, &len);
        if (RedisModule_IsIOError(io) || !name) return "truncated or corrupt value";
        PSSnapshotSaved ss = {0};
        ss.version = RedisModule_LoadUnsigned(io);
        ss.unix_ms = RedisModule_LoadSigned(io);
        ss.step = RedisModule_LoadUnsigned(io);
        ss.b1pow = RedisModule_LoadDouble(io);
        ss.b2pow = RedisModule_LoadDouble(io);
        ss.flags = RedisModule_LoadUnsigned(io);
        for (int j = 0; j < 3 && ss.flags <= max_flags; j++)
            if (ss.flags & (PS_SNAP_SHARES_EARLIER << j)) ss.earlier[j] = RedisModule_LoadUnsigned(io);
        const char *why = RedisModule_IsIOError(io) ? "truncated or corrupt value"
                                                    : PSTensor_SnapshotCheck(t, name, len, &ss, max_flags);
        PSBuf *own[3] = {NULL, NULL, NULL};
        for (int j = 0; j < 3 && !why; j++)
            if (PSTensor_SnapshotSavesArray(t, &ss, j) && !(own[j] = load_array(io, t->n)))
                why = "truncated or corrupt value";
        if (!why && PSTensor_SnapshotAdd(t, name, len, &ss, own) != PST_OK) why = "out of memory";
        for (int j = 0; j < 3; j++) PSBuf_Release(own[j]);
        RedisModule_Free(name);
        if (why) return why;
    }
    return NULL;
}

/* Loads a string of 1..PS_RING_ORIGIN_MAX bytes into 'buf' (NUL-terminated).
 * Returns its length, or 0 on error (the name itself is validated by the
 * ring core). */
static size_t load_origin(RedisModuleIO *io, char *buf) {
    size_t len = 0;
    char *p = RedisModule_LoadStringBuffer(io, &len);
    if (RedisModule_IsIOError(io) || !p || len < 1 || len > PS_RING_ORIGIN_MAX) {
        if (p) RedisModule_Free(p);
        return 0;
    }
    memcpy(buf, p, len);
    buf[len] = '\0';
    RedisModule_Free(p);
    return len;
}

/* Loads the pieces of a delta of 'count' elements saved by
 * save_delta_pieces, each validated and appended by the ring core. */
static const char *load_delta_pieces(RedisModuleIO *io, PSTensor *t, int pending,
                                     const char *origin, size_t olen, uint64_t seq, uint64_t hops,
                                     uint64_t count) {
    if (count < 1 || count > t->n) return "bad ring delta size";
    for (uint64_t off = 0; off < count; off += PS_CHUNK_FLOATS) {
        const uint64_t cnt = count - off < PS_CHUNK_FLOATS ? count - off : PS_CHUNK_FLOATS;
        size_t il = 0, vl = 0;
        char *ip = RedisModule_LoadStringBuffer(io, &il);
        char *vp = RedisModule_IsIOError(io) ? NULL : RedisModule_LoadStringBuffer(io, &vl);
        const char *why = NULL;
        if (RedisModule_IsIOError(io) || !ip || !vp || il != cnt * 4 || vl != cnt * 4)
            why = "truncated or corrupt ring delta";
        else if (PSRing_LoadDelta(t, pending, off > 0, origin, olen, seq, hops,
                                  (const unsigned char *)ip, (const unsigned char *)vp, cnt) !=
                 PS_RING_OK)
            why = "bad ring delta";
        if (ip) RedisModule_Free(ip);
        if (vp) RedisModule_Free(vp);
        if (why) return why;
    }
    return NULL;
}

/* Loads the ring state saved by save_ring. Returns NULL or why not. */
static const char *load_ring(RedisModuleIO *io, PSTensor *t) {
    const uint64_t tracked = RedisModule_LoadUnsigned(io);
    if (RedisModule_IsIOError(io) || tracked > 1) return "bad ring flag";
    if (!tracked) return NULL;
    char name[PS_RING_ORIGIN_MAX + 1];
    size_t len = load_origin(io, name);
    if (!len) return "bad ring origin";
    const uint64_t take_seq = RedisModule_LoadUnsigned(io);
    const uint64_t maxqueue = RedisModule_LoadUnsigned(io);
    const uint64_t applied = RedisModule_LoadUnsigned(io);
    if (RedisModule_IsIOError(io)) return "truncated ring state";
    PSBuf *base = load_array(io, t->n);
    if (!base) return "truncated or corrupt ring base";
    const int st = PSRing_LoadBegin(t, name, len, take_seq, maxqueue, applied);
    if (st != PS_RING_OK) {
        PSBuf_Release(base);
        return st == PS_RING_EOOM ? "out of memory" : "bad ring state";
    }
    PSBuf_Release(t->ring->base);
    t->ring->base = base;
    const uint64_t norigins = RedisModule_LoadUnsigned(io);
    if (RedisModule_IsIOError(io) || norigins > PS_RING_MAX_ORIGINS) return "bad ring origin count";
    for (uint64_t i = 0; i < norigins; i++) {
        if (!(len = load_origin(io, name))) return "bad ring origin";
        const uint64_t hwm = RedisModule_LoadUnsigned(io);
        const uint64_t app = RedisModule_LoadUnsigned(io);
        if (RedisModule_IsIOError(io) || PSRing_LoadOrigin(t, name, len, hwm, app) != PS_RING_OK)
            return "bad ring origin";
    }
    const char *why;
    const uint64_t pcount = RedisModule_LoadUnsigned(io);
    if (RedisModule_IsIOError(io)) return "truncated ring state";
    if (pcount) {
        const uint64_t seq = RedisModule_LoadUnsigned(io);
        if (RedisModule_IsIOError(io)) return "truncated ring state";
        if ((why = load_delta_pieces(io, t, 1, t->ring->origin, t->ring->originlen, seq, 0, pcount)))
            return why;
    }
    const uint64_t nfwd = RedisModule_LoadUnsigned(io);
    if (RedisModule_IsIOError(io)) return "truncated ring state";
    for (uint64_t i = 0; i < nfwd; i++) {
        if (!(len = load_origin(io, name))) return "bad ring forward entry";
        const uint64_t seq = RedisModule_LoadUnsigned(io);
        const uint64_t hops = RedisModule_LoadUnsigned(io);
        const uint64_t count = RedisModule_LoadUnsigned(io);
        if (RedisModule_IsIOError(io)) return "truncated ring state";
        if ((why = load_delta_pieces(io, t, 0, name, len, seq, hops, count))) return why;
    }
    return NULL;
}

static void *PSType_RdbLoad(RedisModuleIO *io, int encver) {
    if (encver < PS_ENCVER_FIRST || encver > PS_ENCVER_LATEST) {
        RedisModule_LogIOError(io, "warning",
                               "ps-tensor: encoding version %d is newer than this module "
                               "(supports up to %d)",
                               encver, PS_ENCVER_LATEST);
        return NULL;
    }
    PSTensor *t = NULL;
    const char *why = "truncated or corrupt value";
    PSHeader hd;
    PSHeader_Init(&hd);
    hd.ndim = RedisModule_LoadUnsigned(io);
    if (RedisModule_IsIOError(io) || hd.ndim < 1 || hd.ndim > PS_MAX_DIMS) {
        why = "bad ndim";
        goto bad;
    }
    for (uint64_t i = 0; i < hd.ndim; i++) hd.dims[i] = RedisModule_LoadUnsigned(io);
#define PS_HDR_X(kind, f, since) \
    if ((since) <= encver) hd.f = load_##kind(io);
    PS_HEADER_FIELDS
#undef PS_HDR_X
    if (RedisModule_IsIOError(io)) goto bad;
    uint64_t n;
    if ((why = PSHeader_Check(&hd, &n)) != NULL) goto bad;
    why = "truncated or corrupt value";
    if (!(t = PSHeader_ToTensor(&hd, n, 0))) goto oom;
    const uint64_t dedup_max = hd.dedup_max;
    if (!(t->data = load_array(io, n))) goto bad;
    const int nstate = ps_optim_nstate(t->optim);
    for (int i = 0; i < nstate; i++)
        if (!(t->opt.s[i] = load_array(io, n))) goto bad;
    if (hd.round_count) {
        if (!(t->round_acc = load_array(io, n))) goto bad;
        t->round_count = (uint32_t)hd.round_count;
    }
    if (hd.acc_count) {
        if (!(t->acc.sum = load_array(io, n))) goto bad;
        t->acc.count = hd.acc_count;
    }
    if (hd.pend_count) {
        if (!(t->acc.pend = load_array(io, n))) goto bad;
        t->acc.pend_count = hd.pend_count;
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
            if (!(e->id = load_name(io, PS_LOAD_MAX_ID, &e->idlen))) goto bad;
            e->hash = PSDedup_Hash(e->id, e->idlen);
            t->dedup_len = (uint32_t)(i + 1);
            e->seq = RedisModule_LoadUnsigned(io);
            e->window = encver >= PS_ENCVER_DEDUP_WINDOW ? RedisModule_LoadUnsigned(io) : 0;
            e->version = RedisModule_LoadUnsigned(io);
            if (RedisModule_IsIOError(io)) goto bad;
        }
    }

    if ((why = load_snapshots(io, encver, t)) != NULL) goto bad;
    if (encver >= PS_ENCVER_RING && (why = load_ring(io, t)) != NULL) goto bad;
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

/* A delta as PS._RESTORE RINGDELTA kind origin seq hops indices values, in
 * pieces of at most PS_CHUNK_FLOATS elements (kind PENDING / FWD, then
 * PENDINGMORE / FWDMORE for the further pieces). */
static void emit_delta(RedisModuleIO *aof, RedisModuleString *key, int pending,
                       const PSRingDelta *d) {
    for (uint64_t off = 0; off < d->count; off += PS_CHUNK_FLOATS) {
        const uint64_t cnt = d->count - off < PS_CHUNK_FLOATS ? d->count - off : PS_CHUNK_FLOATS;
        const char *kind = pending ? (off ? "PENDINGMORE" : "PENDING") : (off ? "FWDMORE" : "FWD");
        RedisModule_EmitAOF(aof, "ps._restore", "sccbllbb", key, "RINGDELTA", kind, d->origin,
                            (size_t)d->originlen, (long long)d->seq, (long long)d->hops,
                            (const char *)(d->idx + off), (size_t)cnt * 4,
                            (const char *)(d->val + off), (size_t)cnt * 4);
    }
}

/* The ring state: RING origin take_seq maxqueue applied, the base as RINGBASE
 * CHUNKs, RINGORIGIN name hwm applied per origin, the pending take and the
 * forward entries as RINGDELTAs (cmd_restore.c). */
static void emit_ring(RedisModuleIO *aof, RedisModuleString *key, const PSRing *r) {
    RedisModule_EmitAOF(aof, "ps._restore", "scblll", key, "RING", r->origin, (size_t)r->originlen,
                        (long long)r->take_seq, (long long)r->maxqueue, (long long)r->applied);
    emit_array(aof, key, "RINGBASE", 0, r->base);
    for (uint32_t i = 0; i < r->norigins; i++)
        RedisModule_EmitAOF(aof, "ps._restore", "scbll", key, "RINGORIGIN", r->origins[i].name,
                            (size_t)r->origins[i].len, (long long)r->origins[i].hwm,
                            (long long)r->origins[i].applied);
    if (r->pend) emit_delta(aof, key, 1, r->pend);
    for (const PSRingDelta *d = r->fwd_head; d; d = d->next) emit_delta(aof, key, 0, d);
}

static void PSType_AofRewrite(RedisModuleIO *aof, RedisModuleString *key, void *value) {
    PSTensor *t = value;
    /* Header: everything scalar as a blob of 8-byte fields in the layout of
     * PS_ENCVER_LATEST, which the ENCVER token names, so that a later layout
     * cannot misread it. PS._RESTORE HEADER validates it as the RDB loader
     * does. */
    PSHeader hd;
    PSHeader_FromTensor(t, &hd);
    uint64_t enc[PS_HEADER_MAX_WORDS];
    size_t words = PSHeader_Encode(&hd, enc);
    RedisModule_EmitAOF(aof, "ps._restore", "scbcl", key, "HEADER", (const char *)enc,
                        words * sizeof(uint64_t), "ENCVER", (long long)PS_ENCVER_LATEST);
    emit_array(aof, key, "DATA", 0, t->data);
    if (t->opt.s[0]) emit_array(aof, key, "S0", 0, t->opt.s[0]);
    if (t->opt.s[1]) emit_array(aof, key, "S1", 0, t->opt.s[1]);
    if (t->round_acc && t->round_count) emit_array(aof, key, "ROUND", 0, t->round_acc);
    if (hd.acc_count) emit_array(aof, key, "ACCSUM", 0, t->acc.sum);
    if (hd.pend_count) emit_array(aof, key, "PENDING", 0, t->acc.pend);
    for (uint32_t i = 0; i < t->dedup_len; i++) {
        const PSDedupEntry *e = &t->dedup[i];
        RedisModule_EmitAOF(aof, "ps._restore", "scblll", key, "DEDUP", e->id, (size_t)e->idlen,
                            (long long)e->seq, (long long)e->version, (long long)e->window);
    }
    static const char *const snap_target[3] = {"SNAPDATA", "SNAPS0", "SNAPS1"};
    for (uint32_t i = 0; i < t->nsnap; i++) {
        const PSSnapshot *s = &t->snaps[i];
        PSSnapshotSaved ss;
        PSTensor_SnapshotDescribe(t, i, &ss);
        /* step, b1pow, b2pow, flags [, earlier index of each array]: the
         * short form when nothing is shared with an earlier snapshot, so
         * such AOFs stay what older modules wrote. */
        uint64_t sh[PS_RESTORE_SNAP_WORDS_LONG];
        sh[0] = ss.step;
        memcpy(&sh[1], &ss.b1pow, 8);
        memcpy(&sh[2], &ss.b2pow, 8);
        sh[3] = ss.flags;
        for (int j = 0; j < 3; j++) sh[4 + j] = ss.earlier[j];
        size_t words = ss.flags > PS_SNAP_FLAGS_LIVE_ONLY ? PS_RESTORE_SNAP_WORDS_LONG
                                                           : PS_RESTORE_SNAP_WORDS_SHORT;
        RedisModule_EmitAOF(aof, "ps._restore", "scbllb", key, "SNAPSHOT", s->name,
                            (size_t)s->namelen, (long long)ss.version, (long long)ss.unix_ms,
                            (const char *)sh, words * sizeof(uint64_t));
        for (int j = 0; j < 3; j++)
            if (PSTensor_SnapshotSavesArray(t, &ss, j))
                emit_array(aof, key, snap_target[j], i, j ? s->opt.s[j - 1] : s->data);
    }
    if (t->ring) emit_ring(aof, key, t->ring);
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

static void digest_delta(RedisModuleDigest *md, const PSRingDelta *d) {
    RedisModule_DigestAddStringBuffer(md, d->origin, d->originlen);
    RedisModule_DigestAddLongLong(md, (long long)d->seq);
    RedisModule_DigestAddLongLong(md, (long long)d->hops);
    RedisModule_DigestAddStringBuffer(md, (const char *)d->idx, (size_t)d->count * 4);
    RedisModule_DigestAddStringBuffer(md, (const char *)d->val, (size_t)d->count * 4);
}

/* Every field of the ring state (ring.h). */
static void digest_ring(RedisModuleDigest *md, const PSRing *r) {
    RedisModule_DigestAddStringBuffer(md, "ring", 4);
    RedisModule_DigestAddStringBuffer(md, r->origin, r->originlen);
    RedisModule_DigestAddLongLong(md, (long long)r->take_seq);
    RedisModule_DigestAddLongLong(md, (long long)r->maxqueue);
    RedisModule_DigestAddLongLong(md, (long long)r->applied);
    digest_buf(md, r->base);
    for (uint32_t i = 0; i < r->norigins; i++) {
        RedisModule_DigestAddStringBuffer(md, r->origins[i].name, r->origins[i].len);
        RedisModule_DigestAddLongLong(md, (long long)r->origins[i].hwm);
        RedisModule_DigestAddLongLong(md, (long long)r->origins[i].applied);
    }
    if (r->pend) digest_delta(md, r->pend);
    else RedisModule_DigestAddLongLong(md, -1);
    RedisModule_DigestAddLongLong(md, (long long)r->fwd_len);
    for (const PSRingDelta *d = r->fwd_head; d; d = d->next) digest_delta(md, d);
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
    if (t->optim == PS_OPT_ACCUM) {
        /* Only for ACCUM tensors, so the digests of other values stay what
         * earlier versions computed (golden files record them). */
        RedisModule_DigestAddLongLong(md, (long long)t->acc.count);
        RedisModule_DigestAddLongLong(md, (long long)t->acc.seq);
        RedisModule_DigestAddLongLong(md, (long long)t->acc.pend_count);
        digest_buf(md, t->acc.sum);
        digest_buf(md, t->acc.pend);
        /* PS_ENCVER_ACCUM_ROUNDS state, only when set, so a value an older
         * version wrote keeps its recorded digest (golden v4). */
        const PSAccum *a = &t->acc;
        if (a->max_backlog || a->pend_parts > 1 || a->pend_done || a->takes || a->rounds ||
            a->forwarded || a->round_max || a->round_min) {
            const uint64_t f[] = {a->max_backlog, a->pend_parts, a->pend_done, a->takes,
                                  a->rounds,      a->forwarded,  a->round_max, a->round_min};
            for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
                RedisModule_DigestAddLongLong(md, (long long)f[i]);
        }
    }
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
    if (t->ring) digest_ring(md, t->ring); /* only when tracked: other digests stay */
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
