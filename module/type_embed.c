/* type_embed.c -- the ps-embeds data type (embedding tables): the key value
 * around the pure core (embed.h), its exactly-once table, RDB load/save, AOF
 * rewrite, digest, memory usage, copy and free.
 *
 * RDB layout of one value (encoding versions PS_EMBED_ENCVER_* in
 * embed_glue.h), in order:
 *   PS_EMBED_HEADER_WORDS unsigned words (PS_EMBED_HEADER_FIELDS: config,
 *     maxstale, dedup_max, state, then from PS_EMBED_ENCVER_SALT the index
 *     salt; doubles as their bit patterns),
 *   the admission filter (2^filter_log2 bytes when ADMIT > 1, else none) as
 *     string buffers of at most PS_EMBED_CHUNK_BYTES,
 *   the rows in storage order as string buffers of whole rows (at most
 *     PS_EMBED_CHUNK_BYTES, at least one row each), a row being
 *     id u64 | last_version u64 | pushes u32 | rowacc f32 | floats (LE),
 *   dedup_len, dedup_len x (client id, seq, window, version),
 *   from PS_EMBED_ENCVER_TOMBS: tomb_len, then the tombstone log oldest
 *     first as string buffers of whole entries (id u64 | version u64).
 * Everything is validated before it is stored (PSEmbed_LoadBegin / LoadRow /
 * LoadEnd): a hostile payload's claimed sizes cost nothing until their
 * bytes are read, since the filter and rows are allocated as they arrive.
 *
 * The AOF rewrite emits (cmd_embed_restore.c replays them):
 *   PS._RESTORE key EMBED header-blob ENCVER v
 *   PS._RESTORE key EFILTER offset blob          (filter chunks, in order)
 *   PS._RESTORE key EROWS blob                   (row blocks, in order)
 *   PS._RESTORE key EEND
 *   PS._RESTORE key EDEDUP id seq window version
 *   PS._RESTORE key ETOMBS blob                  (tombstone blocks, oldest first)
 * Between EMBED and EEND the key holds a table that refuses every command
 * (a truncated AOF leaves it so; it saves as the rows it holds). */

#include <limits.h>
#include <math.h>
#include <string.h>

#include "embed_glue.h"

PSEmbedModuleStats PSEmbedCounters;

/* ========================================================================
 * The value and its exactly-once table
 * ====================================================================== */

PSEmbedValue *PSEmbedValue_New(PSEmbed *t, int64_t maxstale, uint32_t dedup_max) {
    PSEmbedValue *v = RedisModule_TryAlloc(sizeof(*v));
    if (!v) return NULL;
    memset(v, 0, sizeof(*v));
    v->t = t;
    v->maxstale = maxstale;
    v->dd.max = dedup_max;
    return v;
}

void PSEmbedPending_Free(PSEmbedPending *p) {
    if (!p) return;
    RedisModule_Free(p->filter);
    RedisModule_Free(p);
}

void PSEmbedValue_Free(PSEmbedValue *v) {
    if (!v) return;
    PSEmbed_Free(v->t);
    PSEmbedPending_Free(v->pending);
    PSDedupSet_Free(&v->dd);
    ps_ring_table_free(v);
    RedisModule_Free(v);
}

/* ========================================================================
 * Header words
 * ====================================================================== */

static uint64_t dbits(double d) {
    uint64_t u;
    memcpy(&u, &d, 8);
    return u;
}

static double bitsd(uint64_t u) {
    double d;
    memcpy(&d, &u, 8);
    return d;
}

/* The state a save writes: a table still being restored saves the rows it
 * holds (a truncated AOF), with the sweep position inside them. */
static void saved_state(const PSEmbedValue *v, PSEmbedState *st) {
    if (v->t) {
        PSEmbed_GetState(v->t, st);
        if (st->sweep_pos > st->nrows) st->sweep_pos = st->nrows;
    } else {
        *st = v->pending->st;
        st->nrows = 0;
        st->sweep_pos = 0;
    }
}

static const PSEmbedConfig *value_config(const PSEmbedValue *v) {
    return v->t ? PSEmbed_Config(v->t) : &v->pending->cfg;
}

void PSEmbed_HeaderEncode(const PSEmbedValue *v, uint64_t *w) {
    const PSEmbedConfig *c = value_config(v);
    PSEmbedState st;
    saved_state(v, &st);
    /* Locals named as the fields, so the list below reads them by name. */
    const int64_t maxstale = v->maxstale;
    const uint64_t dedup_max = v->dd.max;
    const uint64_t version = st.version, nrows = st.nrows, sweep_pos = st.sweep_pos;
    const uint64_t created = st.stats.created, dropped = st.stats.dropped,
                   evicted_ttl = st.stats.evicted_ttl,
                   evicted_capacity = st.stats.evicted_capacity,
                   evicted_explicit = st.stats.evicted_explicit;
    const uint64_t tomb_horizon = st.tomb_horizon, tomb_total = st.tomb_total;
    size_t i = 0;
#define W_u(f) w[i++] = (uint64_t)c->f;
#define W_d(f) w[i++] = dbits(c->f);
#define W_g(f) w[i++] = (uint64_t)f;
#define W_s(f) w[i++] = f;
#define W_X(k, f) W_##k(f)
    PS_EMBED_HEADER_FIELDS(W_X)
#undef W_X
#undef W_u
#undef W_d
#undef W_g
#undef W_s
}

const char *PSEmbed_HeaderDecode(const uint64_t *w, PSEmbedConfig *c, PSEmbedState *st,
                                 int64_t *maxstale, uint32_t *dedup_max) {
    memset(c, 0, sizeof(*c));
    memset(st, 0, sizeof(*st));
    uint64_t dim = 0, optim = 0, init = 0, unknown_zeros = 0, admit = 0, filter_log2 = 0;
    uint64_t ms = 0, dm = 0;
    uint64_t version = 0, nrows = 0, sweep_pos = 0, created = 0, dropped = 0, evicted_ttl = 0,
             evicted_capacity = 0, evicted_explicit = 0;
    uint64_t seed = 0, capacity = 0, ttl = 0, salt = 0, tombstones = 0, tomb_horizon = 0,
             tomb_total = 0;
    double lr = 0, momentum = 0, beta1 = 0, beta2 = 0, eps = 0, alpha = 0, beta = 0, l1 = 0,
           l2 = 0, init_a = 0, init_b = 0;
    size_t i = 0;
#define R_u(f) f = w[i++];
#define R_d(f) f = bitsd(w[i++]);
#define R_g(f) R_g_##f
#define R_g_maxstale ms = w[i++];
#define R_g_dedup_max dm = w[i++];
#define R_s(f) f = w[i++];
#define R_X(k, f) R_##k(f)
    PS_EMBED_HEADER_FIELDS(R_X)
#undef R_X
#undef R_u
#undef R_d
#undef R_g
#undef R_g_maxstale
#undef R_g_dedup_max
#undef R_s
    /* Ranges before narrowing; PSEmbed_CheckConfig checks the rest. */
    if (dim < 1 || dim > PSE_MAX_DIM) return "bad dim";
    if (optim >= PSE_OPT_COUNT) return "bad optimizer";
    if (init > PSE_INIT_NORMAL) return "bad init";
    if (unknown_zeros > 1) return "bad unknown_zeros";
    if (admit < 1 || admit > PSE_MAX_ADMIT) return "bad admit";
    if (filter_log2 > PSE_MAX_FILTER_LOG2) return "bad filter size";
    if ((int64_t)ms < -1 || (int64_t)ms > (1LL << 40)) return "bad maxstaleness";
    if (dm > PS_EMBED_MAX_DEDUP) return "bad dedup bound";
    c->dim = (uint32_t)dim;
    c->optim = (int)optim;
    c->init = (int)init;
    c->unknown_zeros = (int)unknown_zeros;
    c->admit = (uint32_t)admit;
    c->filter_log2 = (uint32_t)filter_log2;
    c->seed = seed;
    c->capacity = capacity;
    c->ttl = ttl;
    c->salt = salt;
    c->tombstones = tombstones;
#define C_HP(K, f) c->f = f;
    PS_EMBED_HYPERPARAMS(C_HP)
#undef C_HP
    c->init_a = init_a;
    c->init_b = init_b;
    const char *e = PSEmbed_CheckConfig(c);
    if (e) return e;
    st->version = version;
    st->nrows = nrows;
    st->sweep_pos = sweep_pos;
    st->stats = (PSEmbedStats){created, dropped, evicted_ttl, evicted_capacity, evicted_explicit};
    st->tomb_horizon = tomb_horizon;
    st->tomb_total = tomb_total;
    *maxstale = (int64_t)ms;
    *dedup_max = (uint32_t)dm;
    return NULL;
}

size_t PSEmbed_FilterLen(const PSEmbedConfig *c) {
    return c->admit > 1 ? (size_t)1 << c->filter_log2 : 0;
}

static size_t row_bytes(const PSEmbedConfig *c) {
    return PS_EMBED_ROW_HDR + (size_t)PSEmbed_NumFloats(c) * sizeof(float);
}

/* Rows per block: as many whole rows as fit in a chunk, at least one. */
static uint64_t rows_per_block(const PSEmbedConfig *c) {
    uint64_t k = PS_EMBED_CHUNK_BYTES / row_bytes(c);
    return k ? k : 1;
}

/* Serializes row 'r' into 'p' (row_bytes). */
static void put_row(unsigned char *p, const PSEmbedRow *r, uint32_t nfloats) {
    memcpy(p, &r->id, 8);
    memcpy(p + 8, &r->last_version, 8);
    memcpy(p + 16, &r->pushes, 4);
    memcpy(p + 20, &r->rowacc, 4);
    memcpy(p + 24, r->data, (size_t)nfloats * sizeof(float));
}

/* Rows of a block 'blob' of 'len' bytes into the table under rebuild.
 * 'scratch' holds nfloats floats (aligned copy of a row's data). Returns
 * NULL or why the block is bad (rows before the bad one stay stored). */
const char *PSEmbed_LoadBlock(PSEmbed *t, const unsigned char *blob, size_t len, float *scratch,
                              uint64_t remaining) {
    const PSEmbedConfig *c = PSEmbed_Config(t);
    const size_t rb = row_bytes(c);
    const uint32_t nf = PSEmbed_NumFloats(c);
    if (len == 0 || len % rb || len / rb > remaining) return "bad row block length";
    for (size_t off = 0; off < len; off += rb) {
        PSEmbedRow row;
        memcpy(&row.id, blob + off, 8);
        memcpy(&row.last_version, blob + off + 8, 8);
        memcpy(&row.pushes, blob + off + 16, 4);
        memcpy(&row.rowacc, blob + off + 20, 4);
        memcpy(scratch, blob + off + 24, (size_t)nf * sizeof(float));
        row.data = scratch;
        const char *err;
        if (PSEmbed_LoadRow(t, &row, &err) != PSE_OK) return err;
    }
    return NULL;
}

const char *PSEmbed_LoadTombBlock(PSEmbed *t, const unsigned char *blob, size_t len,
                                  uint64_t remaining) {
    if (len == 0 || len % PS_EMBED_TOMB_BYTES || len / PS_EMBED_TOMB_BYTES > remaining)
        return "bad tombstone block length";
    for (size_t off = 0; off < len; off += PS_EMBED_TOMB_BYTES) {
        uint64_t id, ver;
        memcpy(&id, blob + off, 8);
        memcpy(&ver, blob + off + 8, 8);
        const char *err;
        if (PSEmbed_LoadTomb(t, id, ver, &err) != PSE_OK) return err;
    }
    return NULL;
}

/* Calls 'emit' with each block of serialized tombstones, oldest first.
 * Returns -1 on OOM of the block buffer. */
static int for_each_tomb_block(const PSEmbedValue *v, void (*emit)(void *, const unsigned char *, size_t),
                               void *ud) {
    const uint64_t n = v->t ? PSEmbed_TombLen(v->t) : 0;
    const uint64_t per = PS_EMBED_CHUNK_BYTES / PS_EMBED_TOMB_BYTES;
    if (!n) return 0;
    unsigned char *buf = RedisModule_TryAlloc((size_t)(per < n ? per : n) * PS_EMBED_TOMB_BYTES);
    if (!buf) return -1;
    for (uint64_t i = 0; i < n; i += per) {
        const uint64_t cnt = n - i < per ? n - i : per;
        for (uint64_t k = 0; k < cnt; k++) {
            uint64_t e[2];
            PSEmbed_TombAt(v->t, i + k, &e[0], &e[1]);
            memcpy(buf + k * PS_EMBED_TOMB_BYTES, e, PS_EMBED_TOMB_BYTES);
        }
        emit(ud, buf, (size_t)cnt * PS_EMBED_TOMB_BYTES);
    }
    RedisModule_Free(buf);
    return 0;
}

/* ========================================================================
 * RDB save / load
 * ====================================================================== */

/* Calls 'emit' with each block of serialized rows (storage order). Returns
 * -1 on OOM of the block buffer. */
typedef void (*BlockFn)(void *ud, const unsigned char *p, size_t len);
static int for_each_block(const PSEmbedValue *v, BlockFn emit, void *ud) {
    if (!v->t) return 0;
    const PSEmbedConfig *c = PSEmbed_Config(v->t);
    const uint64_t n = PSEmbed_Rows(v->t), per = rows_per_block(c);
    const size_t rb = row_bytes(c);
    const uint32_t nf = PSEmbed_NumFloats(c);
    if (!n) return 0;
    unsigned char *buf = RedisModule_TryAlloc((size_t)(per < n ? per : n) * rb);
    if (!buf) return -1;
    for (uint64_t i = 0; i < n; i += per) {
        const uint64_t cnt = n - i < per ? n - i : per;
        for (uint64_t k = 0; k < cnt; k++) {
            PSEmbedRow r;
            PSEmbed_RowAt(v->t, i + k, &r);
            put_row(buf + k * rb, &r, nf);
        }
        emit(ud, buf, (size_t)cnt * rb);
    }
    RedisModule_Free(buf);
    return 0;
}

static const uint8_t *value_filter(const PSEmbedValue *v, size_t *len) {
    if (v->t) return PSEmbed_Filter(v->t, len);
    *len = v->pending->filter_len;
    return v->pending->filter;
}

static void rdb_block(void *ud, const unsigned char *p, size_t len) {
    RedisModule_SaveStringBuffer(ud, (const char *)p, len);
}

static void PSEmbedType_RdbSave(RedisModuleIO *io, void *value) {
    PSEmbedValue *v = value;
    uint64_t w[PS_EMBED_HEADER_WORDS];
    PSEmbed_HeaderEncode(v, w);
    for (size_t i = 0; i < PS_EMBED_HEADER_WORDS; i++) RedisModule_SaveUnsigned(io, w[i]);
    size_t flen;
    const uint8_t *f = value_filter(v, &flen);
    for (size_t off = 0; off < flen; off += PS_EMBED_CHUNK_BYTES) {
        const size_t cnt = flen - off < PS_EMBED_CHUNK_BYTES ? flen - off : PS_EMBED_CHUNK_BYTES;
        RedisModule_SaveStringBuffer(io, (const char *)f + off, cnt);
    }
    if (for_each_block(v, rdb_block, io) != 0)
        RedisModule_LogIOError(io, "warning", "ps-embeds: out of memory saving rows");
    RedisModule_SaveUnsigned(io, v->dd.len);
    for (uint32_t i = 0; i < v->dd.len; i++) {
        const PSDedupEntry *e = &v->dd.e[i];
        RedisModule_SaveStringBuffer(io, e->id, e->idlen);
        RedisModule_SaveUnsigned(io, e->seq);
        RedisModule_SaveUnsigned(io, e->window);
        RedisModule_SaveUnsigned(io, e->version);
    }
    RedisModule_SaveUnsigned(io, v->t ? PSEmbed_TombLen(v->t) : 0);
    if (for_each_tomb_block(v, rdb_block, io) != 0)
        RedisModule_LogIOError(io, "warning", "ps-embeds: out of memory saving tombstones");
    ps_ring_table_save(io, v);
}

/* Loads the tombstone log (PS_EMBED_ENCVER_TOMBS). Returns NULL or why not. */
static const char *load_tombs(RedisModuleIO *io, PSEmbedValue *v) {
    const uint64_t n = RedisModule_LoadUnsigned(io);
    if (RedisModule_IsIOError(io) || n > PSEmbed_Config(v->t)->tombstones) return "bad tombstone count";
    while (PSEmbed_TombLen(v->t) < n) {
        size_t len = 0;
        char *p = RedisModule_LoadStringBuffer(io, &len);
        if (RedisModule_IsIOError(io) || !p) {
            if (p) RedisModule_Free(p);
            return "truncated or corrupt value";
        }
        const char *why = PSEmbed_LoadTombBlock(v->t, (const unsigned char *)p, len,
                                                n - PSEmbed_TombLen(v->t));
        RedisModule_Free(p);
        if (why) return why;
    }
    return NULL;
}

/* Reads the filter chunks of 'len' bytes. The buffer grows with the bytes
 * actually read, so a payload claiming a huge filter must bring it. Returns
 * a buffer (caller frees) or NULL with *why set. */
static uint8_t *load_filter(RedisModuleIO *io, size_t len, const char **why) {
    uint8_t *f = NULL;
    size_t have = 0;
    while (have < len) {
        size_t cl = 0;
        char *p = RedisModule_LoadStringBuffer(io, &cl);
        const size_t want = len - have < PS_EMBED_CHUNK_BYTES ? len - have : PS_EMBED_CHUNK_BYTES;
        if (RedisModule_IsIOError(io) || !p || cl != want) {
            if (p) RedisModule_Free(p);
            RedisModule_Free(f);
            *why = "bad filter chunk";
            return NULL;
        }
        uint8_t *nf = RedisModule_TryAlloc(have + cl);
        if (!nf) {
            RedisModule_Free(p);
            RedisModule_Free(f);
            *why = "out of memory";
            return NULL;
        }
        if (have) memcpy(nf, f, have);
        memcpy(nf + have, p, cl);
        RedisModule_Free(p);
        RedisModule_Free(f);
        f = nf;
        have += cl;
    }
    return f;
}

/* Loads 'n' exactly-once entries into 'v'. Returns NULL or why not. */
static const char *load_dedup(RedisModuleIO *io, PSEmbedValue *v) {
    uint64_t n = RedisModule_LoadUnsigned(io);
    if (RedisModule_IsIOError(io) || n > v->dd.max) return "bad exactly-once table size";
    for (uint64_t i = 0; i < n; i++) {
        size_t len = 0;
        char *id = RedisModule_LoadStringBuffer(io, &len);
        uint64_t seq = RedisModule_LoadUnsigned(io);
        uint64_t win = RedisModule_LoadUnsigned(io);
        uint64_t ver = RedisModule_LoadUnsigned(io);
        const char *why = NULL;
        if (RedisModule_IsIOError(io) || !id || len == 0 || len > PS_EMBED_MAX_CLIENT_ID || seq == 0)
            why = "bad exactly-once entry";
        else if (PSDedupSet_Find(&v->dd, id, len))
            why = "duplicate exactly-once entry";
        else if (PSDedupSet_Record(&v->dd, id, len, seq, win, ver) != PS_DEDUP_OK)
            why = "out of memory";
        if (id) RedisModule_Free(id);
        if (why) return why;
    }
    return NULL;
}

static void *PSEmbedType_RdbLoad(RedisModuleIO *io, int encver) {
    if (encver < PS_EMBED_ENCVER_FIRST || encver > PS_EMBED_ENCVER_LATEST) {
        RedisModule_LogIOError(io, "warning",
                               "ps-embeds: encoding version %d is newer than this module "
                               "(supports up to %d)",
                               encver, PS_EMBED_ENCVER_LATEST);
        return NULL;
    }
    const char *why = "truncated or corrupt value";
    PSEmbedValue *v = NULL;
    PSEmbed *t = NULL;
    uint8_t *filter = NULL;
    float *scratch = NULL;
    uint64_t w[PS_EMBED_HEADER_WORDS] = {0};
    for (size_t i = 0; i < PSEmbed_HeaderWords(encver); i++) w[i] = RedisModule_LoadUnsigned(io);
    if (RedisModule_IsIOError(io)) goto bad;
    PSEmbedConfig c;
    PSEmbedState st;
    int64_t maxstale;
    uint32_t dedup_max;
    if ((why = PSEmbed_HeaderDecode(w, &c, &st, &maxstale, &dedup_max)) != NULL) goto bad;
    PSEmbed_HeaderUpgrade(encver, &c, &st);
    const size_t flen = PSEmbed_FilterLen(&c);
    if (flen && !(filter = load_filter(io, flen, &why))) goto bad;
    int rc;
    if (!(t = PSEmbed_LoadBegin(&c, &st, filter, flen, &why, &rc))) goto bad;
    RedisModule_Free(filter);
    filter = NULL;
    if (!(scratch = RedisModule_TryAlloc((size_t)PSEmbed_NumFloats(&c) * sizeof(float)))) {
        why = "out of memory";
        goto bad;
    }
    while (PSEmbed_Rows(t) < st.nrows) {
        size_t len = 0;
        char *p = RedisModule_LoadStringBuffer(io, &len);
        if (RedisModule_IsIOError(io) || !p) {
            if (p) RedisModule_Free(p);
            why = "truncated or corrupt value";
            goto bad;
        }
        why = PSEmbed_LoadBlock(t, (const unsigned char *)p, len, scratch, st.nrows - PSEmbed_Rows(t));
        RedisModule_Free(p);
        if (why) goto bad;
    }
    RedisModule_Free(scratch);
    scratch = NULL;
    if (PSEmbed_LoadEnd(t, &why) != PSE_OK) goto bad;
    if (!(v = PSEmbedValue_New(t, maxstale, dedup_max))) {
        why = "out of memory";
        goto bad;
    }
    t = NULL;
    if ((why = load_dedup(io, v)) != NULL) goto bad;
    if (encver >= PS_EMBED_ENCVER_TOMBS && (why = load_tombs(io, v)) != NULL) goto bad;
    if (encver >= PS_EMBED_ENCVER_RING && (why = ps_ring_table_load(io, v)) != NULL) goto bad;
    return v;
bad:
    RedisModule_LogIOError(io, "warning", "ps-embeds: refusing to load value: %s", why);
    RedisModule_Free(filter);
    RedisModule_Free(scratch);
    PSEmbed_Free(t);
    PSEmbedValue_Free(v);
    return NULL;
}

/* ========================================================================
 * AOF rewrite and its PS._RESTORE parts
 * ====================================================================== */

typedef struct AofBlock {
    RedisModuleIO *aof;
    RedisModuleString *key;
} AofBlock;

static void aof_block(void *ud, const unsigned char *p, size_t len) {
    AofBlock *a = ud;
    RedisModule_EmitAOF(a->aof, "ps._restore", "scb", a->key, "EROWS", (const char *)p, len);
}

static void aof_tomb_block(void *ud, const unsigned char *p, size_t len) {
    AofBlock *a = ud;
    RedisModule_EmitAOF(a->aof, "ps._restore", "scb", a->key, "ETOMBS", (const char *)p, len);
}

static void PSEmbedType_AofRewrite(RedisModuleIO *aof, RedisModuleString *key, void *value) {
    PSEmbedValue *v = value;
    uint64_t w[PS_EMBED_HEADER_WORDS];
    PSEmbed_HeaderEncode(v, w);
    RedisModule_EmitAOF(aof, "ps._restore", "scbcl", key, "EMBED", (const char *)w, sizeof(w),
                        "ENCVER", (long long)PS_EMBED_ENCVER_LATEST);
    size_t flen;
    const uint8_t *f = value_filter(v, &flen);
    for (size_t off = 0; off < flen; off += PS_EMBED_CHUNK_BYTES) {
        const size_t cnt = flen - off < PS_EMBED_CHUNK_BYTES ? flen - off : PS_EMBED_CHUNK_BYTES;
        RedisModule_EmitAOF(aof, "ps._restore", "sclb", key, "EFILTER", (long long)off,
                            (const char *)f + off, cnt);
    }
    AofBlock a = {aof, key};
    if (for_each_block(v, aof_block, &a) != 0)
        RedisModule_LogIOError(aof, "warning", "ps-embeds: out of memory rewriting rows");
    RedisModule_EmitAOF(aof, "ps._restore", "sc", key, "EEND");
    for (uint32_t i = 0; i < v->dd.len; i++) {
        const PSDedupEntry *e = &v->dd.e[i];
        RedisModule_EmitAOF(aof, "ps._restore", "scblll", key, "EDEDUP", e->id, (size_t)e->idlen,
                            (long long)e->seq, (long long)e->window, (long long)e->version);
    }
    AofBlock tb = {aof, key};
    if (for_each_tomb_block(v, aof_tomb_block, &tb) != 0)
        RedisModule_LogIOError(aof, "warning", "ps-embeds: out of memory rewriting tombstones");
    ps_ring_table_aof(aof, key, v);
}

/* Turns a pending value whose filter is complete into a table under
 * rebuild. Returns NULL or why not. */
const char *PSEmbedValue_PendingBegin(PSEmbedValue *v) {
    PSEmbedPending *p = v->pending;
    const char *why;
    int rc;
    PSEmbed *t = PSEmbed_LoadBegin(&p->cfg, &p->st, p->filter, p->filter_len, &why, &rc);
    if (!t) return why;
    v->t = t;
    v->pending = NULL;
    PSEmbedPending_Free(p);
    return NULL;
}

/* ========================================================================
 * Digest, memory, copy, free
 * ====================================================================== */

static void digest_add(void *ud, const void *buf, size_t len) {
    RedisModule_DigestAddStringBuffer(ud, buf, len);
}

/* Every byte of persisted state (not the pull/push counters). */
static void PSEmbedType_Digest(RedisModuleDigest *md, void *value) {
    PSEmbedValue *v = value;
    if (v->t) PSEmbed_Digest(v->t, digest_add, md);
    else RedisModule_DigestAddLongLong(md, -1);
    RedisModule_DigestAddLongLong(md, v->restoring);
    RedisModule_DigestAddLongLong(md, v->maxstale);
    RedisModule_DigestAddLongLong(md, v->dd.max);
    for (uint32_t i = 0; i < v->dd.len; i++) {
        const PSDedupEntry *e = &v->dd.e[i];
        RedisModule_DigestAddStringBuffer(md, e->id, e->idlen);
        RedisModule_DigestAddLongLong(md, (long long)e->seq);
        RedisModule_DigestAddLongLong(md, (long long)e->window);
        RedisModule_DigestAddLongLong(md, (long long)e->version);
    }
    ps_ring_table_digest(md, v); /* only when tracked: other digests stay */
    RedisModule_DigestEndSequence(md);
}

static size_t PSEmbedType_MemUsage(const void *value) {
    const PSEmbedValue *v = value;
    size_t n = sizeof(*v) + PSDedupSet_MemUsage(&v->dd);
    if (v->t) n += PSEmbed_MemUsage(v->t);
    if (v->pending) n += sizeof(*v->pending) + v->pending->filter_len;
    return n + ps_ring_table_mem(v);
}

static void PSEmbedType_Free(void *value) { PSEmbedValue_Free(value); }

/* A deep copy with the same digest; NULL (COPY fails) on OOM or while the
 * value is being restored. */
static void *PSEmbedType_Copy(RedisModuleString *from, RedisModuleString *to, const void *value) {
    (void)from;
    (void)to;
    const PSEmbedValue *v = value;
    if (!v->t || v->restoring) return NULL;
    PSEmbed *t = PSEmbed_Copy(v->t);
    if (!t) return NULL;
    PSEmbedValue *c = PSEmbedValue_New(t, v->maxstale, v->dd.max);
    if (!c) {
        PSEmbed_Free(t);
        return NULL;
    }
    if (PSDedupSet_CopyInto(&c->dd, &v->dd) != PS_DEDUP_OK || ps_ring_table_copy(c, v) != 0) {
        PSEmbedValue_Free(c);
        return NULL;
    }
    return c;
}

int PSEmbedType_Register(RedisModuleCtx *ctx) {
    /* Per process, never replicated: keys only the push's repeat finder. */
    uint64_t salt;
    RedisModule_GetRandomBytes((unsigned char *)&salt, sizeof(salt));
    PSEmbed_SetPushSalt(salt);
    RedisModuleTypeMethods tm = {
        .version = REDISMODULE_TYPE_METHOD_VERSION,
        .rdb_load = PSEmbedType_RdbLoad,
        .rdb_save = PSEmbedType_RdbSave,
        .aof_rewrite = PSEmbedType_AofRewrite,
        .mem_usage = PSEmbedType_MemUsage,
        .digest = PSEmbedType_Digest,
        .free = PSEmbedType_Free,
        .copy = PSEmbedType_Copy,
    };
    PSEmbedType = RedisModule_CreateDataType(ctx, PS_EMBED_TYPE_NAME, PS_EMBED_ENCVER_LATEST, &tm);
    if (!PSEmbedType) {
        RedisModule_Log(ctx, "warning", "could not register the %s data type", PS_EMBED_TYPE_NAME);
        return REDISMODULE_ERR;
    }
    return REDISMODULE_OK;
}
