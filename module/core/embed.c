/* embed.c -- embedding tables: storage, index, pull, push, admission and
 * eviction (see embed.h; layout in embed_int.h; rules in
 * docs/embed-design.md). */

#include "embed_int.h"

#include <stdlib.h>

#include "hugepage.h"
#include "optim.h"

/* ------------------------------------------------------------------------
 * Allocation
 * ---------------------------------------------------------------------- */

static void *(*TryAllocFn)(size_t) = malloc;
static void (*FreeFn)(void *) = free;

void PSEmbed_SetAllocator(void *(*tryalloc)(size_t), void (*freefn)(void *)) {
    TryAllocFn = tryalloc;
    FreeFn = freefn;
}

void *pse_alloc(PSEmbed *t, size_t n) {
    void *p = TryAllocFn(n ? n : 1);
    if (p && t) t->bytes += n;
    return p;
}

void pse_free(PSEmbed *t, void *p, size_t n) {
    if (!p) return;
    if (t) t->bytes -= n;
    FreeFn(p);
}

/* Key of the per-push repeat finder (see PSEmbed_SetPushSalt). */
static uint64_t PushSalt;

void PSEmbed_SetPushSalt(uint64_t salt) { PushSalt = salt; }

/* ------------------------------------------------------------------------
 * Index
 * ---------------------------------------------------------------------- */

static inline uint64_t entry_slot(uint32_t e) { return (uint64_t)(e >> PSE_FP_BITS) - 1; }
static inline uint32_t make_entry(uint64_t slot, uint64_t h) {
    return (uint32_t)((slot + 1) << PSE_FP_BITS) | (uint32_t)(h & PSE_FP_MASK);
}
static inline uint64_t next_pos(const PSEmbed *t, uint64_t p) { return p + 1 == t->isize ? 0 : p + 1; }

static void index_put(uint32_t *idx, uint64_t size, uint64_t h, uint64_t slot) {
    uint64_t p = pse_home(h, size);
    while (idx[p]) p = p + 1 == size ? 0 : p + 1;
    idx[p] = make_entry(slot, h);
}

/* Rebuilds the index at 'size' buckets; PSE_ERR_OOM leaves it as it was. */
static int index_rebuild(PSEmbed *t, uint64_t size) {
    uint32_t *idx = pse_alloc(t, size * sizeof(uint32_t));
    if (!idx) return PSE_ERR_OOM;
    ps_advise_hugepages(idx, size * sizeof(uint32_t));
    memset(idx, 0, size * sizeof(uint32_t));
    for (uint64_t s = 0; s < t->nrows; s++)
        index_put(idx, size, pse_hash(t, pse_rec_id(pse_rec(t, s))), s);
    pse_free(t, t->index, t->isize * sizeof(uint32_t));
    t->index = idx;
    t->isize = size;
    return PSE_OK;
}

/* First position at or after 'p' in the probe run whose fingerprint
 * matches, or -1 at an empty bucket. */
static inline int64_t probe_fp(const PSEmbed *t, uint64_t p, uint32_t fp) {
    for (;;) {
        const uint32_t e = t->index[p];
        if (!e) return -1;
        if ((e & PSE_FP_MASK) == fp) return (int64_t)p;
        p = next_pos(t, p);
    }
}

/* Resolves a fingerprint candidate at 'p' to the position of 'id' or -1. */
static inline int64_t resolve(const PSEmbed *t, int64_t p, uint64_t id, uint32_t fp) {
    while (p >= 0) {
        if (pse_rec_id(pse_rec(t, entry_slot(t->index[p]))) == id) return p;
        p = probe_fp(t, next_pos(t, (uint64_t)p), fp);
    }
    return -1;
}

int64_t pse_find(const PSEmbed *t, uint64_t id) {
    const uint64_t h = pse_hash(t, id);
    const uint32_t fp = (uint32_t)(h & PSE_FP_MASK);
    return resolve(t, probe_fp(t, pse_home(h, t->isize), fp), id, fp);
}

/* Position of the entry of 'slot' (whose id hashes to 'h'); it exists. */
static uint64_t find_slot_pos(const PSEmbed *t, uint64_t h, uint64_t slot) {
    uint64_t p = pse_home(h, t->isize);
    while (entry_slot(t->index[p]) != slot) p = next_pos(t, p);
    return p;
}

/* Empties bucket 'i' and shifts back the entries of its probe run that may
 * move (those whose home is not cyclically in (i, j]). */
static void index_delete_at(PSEmbed *t, uint64_t i) {
    uint64_t j = i;
    for (;;) {
        j = next_pos(t, j);
        const uint32_t e = t->index[j];
        if (!e) break;
        const uint64_t k = pse_home(pse_hash(t, pse_rec_id(pse_rec(t, entry_slot(e)))), t->isize);
        const int stays = (i <= j) ? (i < k && k <= j) : (i < k || k <= j);
        if (!stays) {
            t->index[i] = e;
            i = j;
        }
    }
    t->index[i] = 0;
}

/* Batched lookup, software-pipelined three ids deep in distance: while id
 * i is hashed and its index bucket prefetched, id i - PF_DIST probes its
 * (prefetched) bucket and prefetches every cache line of the record bytes
 * the caller needs ('span': the id, header and values for a pull, the
 * whole record for a push), and id i - 2 * PF_DIST, whose lines are in
 * flight or arrived, is resolved against the record's id and consumed. A
 * row thus costs its index line and its record lines as overlapped DRAM
 * misses rather than dependent ones, with no pipeline drain inside a batch
 * (the stage state lives in rings of PF_RING > 2 * PF_DIST entries). With
 * 'out' set (a pull), the consumer copies the row's values (or its initial
 * values) to out + i * dim while its lines are still in L1; else it writes
 * the slot or -1 to slots[i]. */
#define PF_DIST 16
#define PF_RING 64
#define PF_MAX_SPAN 512 /* bytes prefetched per record at most: a wide row's
                         * rest is streamed by the hardware prefetcher, and
                         * 16 rows of it in flight would only evict others */

static inline __attribute__((always_inline)) void prefetch_span(const unsigned char *r, size_t span) {
    const uintptr_t end = (uintptr_t)r + (span < PF_MAX_SPAN ? span : PF_MAX_SPAN);
    for (uintptr_t a = (uintptr_t)r & ~(uintptr_t)63; a < end; a += 64)
        __builtin_prefetch((const void *)a);
}

/* dim floats from a row to a pull's output (constant sizes for the common
 * dims, so the copy is inlined instead of a libc call per row). */
static inline void copy_row(float *o, const float *s, uint32_t dim) {
    switch (dim) {
    case 8: memcpy(o, s, 32); break;
    case 16: memcpy(o, s, 64); break;
    case 32: memcpy(o, s, 128); break;
    case 64: memcpy(o, s, 256); break;
    default: memcpy(o, s, (size_t)dim * sizeof(float));
    }
}

static inline __attribute__((always_inline)) void lookup_run(const PSEmbed *t,
                                                             const unsigned char *idblob, size_t n,
                                                             size_t span, int64_t *slots, float *out) {
    uint64_t hs[PF_RING];
    int64_t cand[PF_RING];
    const uint32_t *idx = t->index;
    const uint64_t isize = t->isize;
    const uint32_t dim = t->cfg.dim;
    for (size_t i = 0; i < n + 2 * PF_DIST; i++) {
        if (i < n) {
            const uint64_t h = pse_hash(t, pse_ld64(idblob + 8 * i));
            hs[i % PF_RING] = h;
            __builtin_prefetch(&idx[pse_home(h, isize)]);
        }
        if (i >= PF_DIST && i - PF_DIST < n) {
            const size_t b = (i - PF_DIST) % PF_RING;
            const int64_t p = probe_fp(t, pse_home(hs[b], isize), (uint32_t)(hs[b] & PSE_FP_MASK));
            cand[b] = p;
            if (p >= 0) prefetch_span(pse_rec(t, entry_slot(idx[p])), span);
        }
        if (i >= 2 * PF_DIST) {
            const size_t c = i - 2 * PF_DIST, rc = c % PF_RING;
            const uint64_t id = pse_ld64(idblob + 8 * c);
            const int64_t p = resolve(t, cand[rc], id, (uint32_t)(hs[rc] & PSE_FP_MASK));
            if (!out) {
                slots[c] = p < 0 ? -1 : (int64_t)entry_slot(idx[p]);
                continue;
            }
            float *o = out + c * dim;
            if (p >= 0) {
                const unsigned char *r = pse_rec(t, entry_slot(idx[p]));
                if (!pse_dead(t, r)) {
                    copy_row(o, (const float *)(const void *)(r + t->hdr_bytes), dim);
                    continue;
                }
            }
            if (t->cfg.unknown_zeros)
                memset(o, 0, (size_t)dim * sizeof(float));
            else
                PSEmbed_InitRow(&t->cfg, id, o);
        }
    }
}

/* Slots of n ids (little-endian uint64 at 'ids'): slot or -1. */
static void lookup_ids(const PSEmbed *t, const uint64_t *ids, size_t n, int64_t *slots) {
    lookup_run(t, (const unsigned char *)ids, n, t->rec_bytes, slots, NULL);
}

/* ------------------------------------------------------------------------
 * Slab
 * ---------------------------------------------------------------------- */

static uint64_t slab_cap(const PSEmbed *t) {
    return t->nchunks ? t->chunk0_rows + (t->nchunks - 1) * t->chunk_rows : 0;
}

/* Records per chunk: the chunk is the smallest power of two of at least
 * PSE_CHUNK_MIN_BYTES bytes and 16 records, filled with whole records, so
 * the allocator rounds nothing up (powers of two are exact size classes in
 * jemalloc) and less than one record per chunk is unused. */
static uint64_t chunk_rows_for(size_t rec_bytes) {
    uint64_t bytes = PSE_CHUNK_MIN_BYTES;
    while (bytes < 16 * (uint64_t)rec_bytes) bytes *= 2;
    return bytes / rec_bytes;
}

/* Grows chunk 0 (doubling up to chunk_rows) or appends full chunks
 * until 'rows' fit. Chunks allocated before a failure stay (spare room). */
static int slab_reserve(PSEmbed *t, uint64_t rows) {
    if (rows <= slab_cap(t)) return PSE_OK;
    if (t->dir_cap == 0) {
        unsigned char **d = pse_alloc(t, 4 * sizeof(*d));
        if (!d) return PSE_ERR_OOM;
        t->chunks = d;
        t->dir_cap = 4;
    }
    if (t->nchunks <= 1 && t->chunk0_rows < t->chunk_rows) {
        uint64_t c = t->chunk0_rows ? t->chunk0_rows : PSE_FIRST_CHUNK_ROWS;
        while (c < rows && c < t->chunk_rows) c *= 2;
        if (c > t->chunk_rows) c = t->chunk_rows;
        if (c > t->chunk0_rows) {
            unsigned char *p = pse_alloc(t, c * t->rec_bytes);
            if (!p) return PSE_ERR_OOM;
            if (t->nchunks) {
                memcpy(p, t->chunks[0], t->nrows * t->rec_bytes);
                pse_free(t, t->chunks[0], t->chunk0_rows * t->rec_bytes);
            }
            t->chunks[0] = p;
            t->nchunks = 1;
            t->chunk0_rows = c;
        }
    }
    while (rows > slab_cap(t)) {
        if (t->nchunks == t->dir_cap) {
            unsigned char **d = pse_alloc(t, 2 * t->dir_cap * sizeof(*d));
            if (!d) return PSE_ERR_OOM;
            memcpy(d, t->chunks, t->nchunks * sizeof(*d));
            pse_free(t, t->chunks, t->dir_cap * sizeof(*d));
            t->chunks = d;
            t->dir_cap *= 2;
        }
        unsigned char *p = pse_alloc(t, (size_t)t->chunk_rows * t->rec_bytes);
        if (!p) return PSE_ERR_OOM;
        t->chunks[t->nchunks++] = p;
    }
    return PSE_OK;
}

/* Frees chunks beyond the one after the last used (keeps one spare). */
static void slab_trim(PSEmbed *t) {
    const uint64_t used = t->nrows <= t->chunk0_rows
                              ? 1
                              : 1 + (t->nrows - t->chunk0_rows + t->chunk_rows - 1) / t->chunk_rows;
    while (t->nchunks > used + 1) {
        t->nchunks--;
        pse_free(t, t->chunks[t->nchunks], (size_t)t->chunk_rows * t->rec_bytes);
    }
}

/* Buckets of an index for 'rows' rows: rows * 3/2 + 1, rounded up so that
 * the index's bytes are 4, 5, 6 or 7 times a power of two (jemalloc's size
 * classes, 4 per doubling): the allocator's rounding then buys buckets
 * instead of being lost. */
static uint64_t index_size_for(uint64_t rows) {
    uint64_t size = rows * 3 / 2 + 1;
    if (size < PSE_MIN_INDEX) return PSE_MIN_INDEX;
    uint64_t step = 1; /* buckets of a quarter of the power of two below 'size' */
    while (step * 8 <= size) step *= 2;
    return (size + step - 1) / step * step;
}

int pse_reserve(PSEmbed *t, uint64_t rows) {
    if (rows > PSE_MAX_ROWS) return PSE_ERR_FULL;
    if (slab_reserve(t, rows) != PSE_OK) return PSE_ERR_OOM;
    if (rows * 5 > t->isize * 4 && index_rebuild(t, index_size_for(rows)) != PSE_OK)
        return PSE_ERR_OOM;
    return PSE_OK;
}

unsigned char *pse_append(PSEmbed *t, uint64_t id) {
    const uint64_t s = t->nrows++;
    unsigned char *r = pse_rec(t, s);
    memset(r, 0, t->rec_bytes);
    pse_st64(r, id);
    index_put(t->index, t->isize, pse_hash(t, id), s);
    return r;
}

/* ------------------------------------------------------------------------
 * Tombstone log (embed.h)
 * ---------------------------------------------------------------------- */

static inline uint64_t *tomb_at(const PSEmbed *t, uint64_t i) {
    return t->tomb + 2 * ((t->tomb_head + i) % t->tomb_alloc);
}

/* A ring of 'alloc' entries holding the newest 'keep' (<= tomb_len, <=
 * alloc) of the log; the horizon moves to the newest entry dropped.
 * PSE_ERR_OOM changes nothing. */
static int tomb_realloc(PSEmbed *t, uint64_t alloc, uint64_t keep) {
    uint64_t *ring = NULL;
    if (alloc) {
        ring = pse_alloc(t, (size_t)alloc * 16);
        if (!ring) return PSE_ERR_OOM;
    }
    const uint64_t drop = t->tomb_len - keep;
    if (drop) t->tomb_horizon = tomb_at(t, drop - 1)[1];
    for (uint64_t i = 0; i < keep; i++) memcpy(ring + 2 * i, tomb_at(t, drop + i), 16);
    pse_free(t, t->tomb, (size_t)t->tomb_alloc * 16);
    t->tomb = ring;
    t->tomb_alloc = alloc;
    t->tomb_len = keep;
    t->tomb_head = 0;
    return PSE_OK;
}

int pse_tomb_reserve(PSEmbed *t, uint64_t n) {
    const uint64_t cap = t->cfg.tombstones;
    const uint64_t need = t->tomb_len + n < cap ? t->tomb_len + n : cap;
    if (need <= t->tomb_alloc) return PSE_OK;
    uint64_t a = t->tomb_alloc < 32 ? 64 : 2 * t->tomb_alloc;
    if (a < need) a = need;
    if (a > cap) a = cap;
    return tomb_realloc(t, a, t->tomb_len);
}

int pse_tomb_resize(PSEmbed *t, uint64_t cap) {
    const uint64_t keep = t->tomb_len < cap ? t->tomb_len : cap;
    if (cap >= t->tomb_alloc && keep == t->tomb_len) return PSE_OK;
    return tomb_realloc(t, keep, keep);
}

int PSEmbed_TombReserve(PSEmbed *t, uint64_t n) { return pse_tomb_reserve(t, n); }

void pse_tomb_add(PSEmbed *t, uint64_t id) {
    const uint64_t cap = t->cfg.tombstones;
    t->tomb_total++;
    if (cap == 0) {
        t->tomb_horizon = t->rm_version;
        return;
    }
    if (t->tomb_len == t->tomb_alloc && pse_tomb_reserve(t, 1) != PSE_OK && t->tomb_alloc == 0) {
        /* Only when a caller did not reserve and memory ran out. */
        t->tomb_horizon = t->rm_version;
        return;
    }
    if (t->tomb_len == cap || t->tomb_len == t->tomb_alloc) {
        t->tomb_horizon = tomb_at(t, 0)[1];
        t->tomb_head = (t->tomb_head + 1) % t->tomb_alloc;
        t->tomb_len--;
    }
    uint64_t *e = tomb_at(t, t->tomb_len++);
    e[0] = id;
    e[1] = t->rm_version;
}

uint64_t PSEmbed_TombLen(const PSEmbed *t) { return t->tomb_len; }

void PSEmbed_TombAt(const PSEmbed *t, uint64_t i, uint64_t *id, uint64_t *version) {
    const uint64_t *e = tomb_at(t, i);
    *id = e[0];
    *version = e[1];
}

int PSEmbed_Tombstones(const PSEmbed *t, uint64_t since, uint64_t cursor, uint64_t count,
                       PSEmbedGoneFn fn, void *ud, uint64_t *next) {
    *next = 0;
    if (since == 0 || since < t->tomb_horizon || since > t->version) return PSE_ERR_HORIZON;
    const uint64_t oldest = t->tomb_total - t->tomb_len; /* absolute position of entry 0 */
    uint64_t i;                                          /* index into the log */
    if (cursor == 0) {
        /* The first entry at a version > since (versions never decrease). */
        uint64_t lo = 0, hi = t->tomb_len;
        while (lo < hi) {
            const uint64_t mid = lo + (hi - lo) / 2;
            if (tomb_at(t, mid)[1] <= since) lo = mid + 1;
            else hi = mid;
        }
        i = lo;
    } else {
        /* Entries that fell off since were older than since (the horizon
         * would have passed it otherwise). */
        const uint64_t pos = cursor - 1;
        i = pos < oldest ? 0 : pos - oldest;
        if (i > t->tomb_len) i = t->tomb_len;
    }
    if (count == 0) count = 1;
    for (uint64_t n = 0; n < count && i < t->tomb_len; n++, i++) {
        const uint64_t *e = tomb_at(t, i);
        if (e[1] > since && !PSEmbed_Lookup(t, e[0], NULL)) fn(ud, e[0], e[1]);
    }
    if (i < t->tomb_len) *next = oldest + i + 1;
    return PSE_OK;
}

/* Removes the row in 'slot': its index entry goes (and into the tombstone
 * log), the last row moves into the hole and its entry is repointed. */
static void remove_slot(PSEmbed *t, uint64_t slot) {
    unsigned char *r = pse_rec(t, slot);
    pse_tomb_add(t, pse_rec_id(r));
    index_delete_at(t, find_slot_pos(t, pse_hash(t, pse_rec_id(r)), slot));
    const uint64_t last = t->nrows - 1;
    if (slot != last) {
        memcpy(r, pse_rec(t, last), t->rec_bytes);
        const uint64_t h = pse_hash(t, pse_rec_id(r));
        const uint64_t p = find_slot_pos(t, h, last);
        t->index[p] = make_entry(slot, h);
    }
    t->nrows--;
}

void pse_saturate_ages(PSEmbed *t) {
    for (uint64_t i = 0; i < t->nrows; i++) {
        unsigned char *r = pse_rec(t, i);
        if (pse_rec_age(t, r) > PSE_MAX_AGE) pse_rec_set_ver(r, t->version - PSE_MAX_AGE);
    }
}

/* After evictions: gives back chunks and, below a load of 1/4, index
 * buckets (a failed shrink changes nothing). */
static void after_evictions(PSEmbed *t) {
    /* A sweep position past the rows restarts at 0 either way; kept at
     * nrows so that the state (digest, RDB) has one form for it. */
    if (t->sweep_pos > t->nrows) t->sweep_pos = t->nrows;
    slab_trim(t);
    if (t->isize > PSE_MIN_INDEX && t->nrows * 4 < t->isize)
        (void)index_rebuild(t, index_size_for(t->nrows));
}

/* ------------------------------------------------------------------------
 * Table
 * ---------------------------------------------------------------------- */

PSEmbed *PSEmbed_New(const PSEmbedConfig *c, const char **err) {
    const char *e = PSEmbed_CheckConfig(c);
    if (e) {
        if (err) *err = e;
        return NULL;
    }
    if (err) *err = "out of memory";
    PSEmbed *t = pse_alloc(NULL, sizeof(*t));
    if (!t) return NULL;
    memset(t, 0, sizeof(*t));
    t->bytes = sizeof(*t);
    t->cfg = *c;
    PSEmbed_MakeCoef(c, &t->coef);
    t->nfloats = PSEmbed_NumFloats(c);
    t->hdr_bytes = PSE_HDR_BYTES + (c->optim == PSE_OPT_ROWADAGRAD ? 4 : 0);
    t->rec_bytes = t->hdr_bytes + 4 * (size_t)t->nfloats;
    t->chunk_rows = chunk_rows_for(t->rec_bytes);
    t->chunk_mul = UINT64_MAX / t->chunk_rows + 1;
    t->index = pse_alloc(t, PSE_MIN_INDEX * sizeof(uint32_t));
    if (!t->index) goto oom;
    memset(t->index, 0, PSE_MIN_INDEX * sizeof(uint32_t));
    t->isize = PSE_MIN_INDEX;
    if (c->admit > 1) {
        t->filter_len = (size_t)1 << c->filter_log2;
        t->filter = pse_alloc(t, t->filter_len);
        if (!t->filter) goto oom;
        /* Random counters of megabytes, 3 per absent id of each push. */
        ps_advise_hugepages(t->filter, t->filter_len);
        memset(t->filter, 0, t->filter_len);
    }
    if (err) *err = NULL;
    return t;
oom:
    PSEmbed_Free(t);
    return NULL;
}

void PSEmbed_Free(PSEmbed *t) {
    if (!t) return;
    for (uint64_t i = 0; i < t->nchunks; i++)
        pse_free(t, t->chunks[i], (i == 0 ? t->chunk0_rows : t->chunk_rows) * t->rec_bytes);
    pse_free(t, t->chunks, t->dir_cap * sizeof(*t->chunks));
    pse_free(t, t->index, t->isize * sizeof(uint32_t));
    pse_free(t, t->filter, t->filter_len);
    pse_free(t, t->tomb, (size_t)t->tomb_alloc * 16);
    pse_free(NULL, t, sizeof(*t));
}

const PSEmbedConfig *PSEmbed_Config(const PSEmbed *t) { return &t->cfg; }
uint64_t PSEmbed_Rows(const PSEmbed *t) { return t->nrows; }
uint64_t PSEmbed_Version(const PSEmbed *t) { return t->version; }
size_t PSEmbed_MemUsage(const PSEmbed *t) { return t->bytes; }

void PSEmbed_GetState(const PSEmbed *t, PSEmbedState *st) {
    st->version = t->version;
    st->nrows = t->nrows;
    st->sweep_pos = t->sweep_pos;
    st->stats = t->stats;
    st->tomb_horizon = t->tomb_horizon;
    st->tomb_total = t->tomb_total;
}

int PSEmbed_Lookup(const PSEmbed *t, uint64_t id, PSEmbedRow *row) {
    const int64_t p = pse_find(t, id);
    if (p < 0) return 0;
    const unsigned char *r = pse_rec(t, entry_slot(t->index[p]));
    if (pse_dead(t, r)) return 0;
    if (row) pse_fill_row(t, r, row);
    return 1;
}

/* ------------------------------------------------------------------------
 * Pull
 * ---------------------------------------------------------------------- */

void PSEmbed_Pull(const PSEmbed *t, const unsigned char *idblob, size_t k, float *out) {
    if (k) lookup_run(t, idblob, k, t->hdr_bytes + (size_t)t->cfg.dim * sizeof(float), NULL, out);
}

/* ------------------------------------------------------------------------
 * Admission filter: 8-bit counters, 3 positions by double hashing,
 * conservative update (only the counters equal to the minimum grow).
 * ---------------------------------------------------------------------- */

static void filter_pos(const PSEmbed *t, uint64_t id, uint64_t pos[3]) {
    const uint64_t h2 = PSEmbed_Mix64(id ^ 0x9e3779b97f4a7c15ULL);
    const uint64_t h3 = PSEmbed_Mix64(h2) | 1;
    const uint64_t mask = t->filter_len - 1;
    for (int j = 0; j < 3; j++) pos[j] = (h2 + (uint64_t)j * h3) & mask;
}

/* Counts one push of 'id' and returns the new estimate of its pushes. */
static uint32_t filter_add(PSEmbed *t, uint64_t id) {
    uint64_t p[3];
    filter_pos(t, id, p);
    uint8_t m = t->filter[p[0]];
    if (t->filter[p[1]] < m) m = t->filter[p[1]];
    if (t->filter[p[2]] < m) m = t->filter[p[2]];
    if (m == 255) return 255;
    for (int j = 0; j < 3; j++)
        if (t->filter[p[j]] == m) t->filter[p[j]] = (uint8_t)(m + 1);
    return (uint32_t)m + 1;
}

/* Fetches the 3 counters of 'id' ahead of its filter_add: a push's absent
 * ids are mostly ids the filter does not admit yet, and each reads 3
 * random bytes of a multi-megabyte array (3 misses per id, in a row, when
 * not fetched ahead). A hint: the counters are read and written in the
 * same order either way. (always_inline: see lookup_run's prefetches.) */
#define FILTER_DIST 12
static inline __attribute__((always_inline)) void filter_prefetch(const PSEmbed *t, uint64_t id) {
    uint64_t p[3];
    filter_pos(t, id, p);
    for (int j = 0; j < 3; j++) __builtin_prefetch(&t->filter[p[j]], 1);
}

/* ------------------------------------------------------------------------
 * Eviction
 * ---------------------------------------------------------------------- */

enum { EV_AGE, EV_KEY };

/* Removes every row matching the rule: EV_AGE: version - last >= a;
 * EV_KEY: (last, id) <= (a, b) in lexicographic order. */
static uint64_t evict_where(PSEmbed *t, int rule, uint64_t a, uint64_t b) {
    uint64_t n = 0, i = 0;
    while (i < t->nrows) {
        const unsigned char *r = pse_rec(t, i);
        const uint64_t v = pse_rec_ver(t, r);
        const int hit = rule == EV_AGE ? t->version - v >= a
                                       : (v < a || (v == a && pse_rec_id(r) <= b));
        if (hit) {
            remove_slot(t, i);
            n++;
        } else {
            i++;
        }
    }
    return n;
}

/* The m-th smallest key (1-based) among rows' last versions (by_id = 0) or
 * among the ids of rows whose last version is 'ver' (by_id = 1), found by
 * narrowing a histogram of 4096 buckets: a few passes, no allocation. */
#define SEL_BUCKETS 4096
static uint64_t select_kth(const PSEmbed *t, uint64_t m, int by_id, uint64_t ver) {
    uint32_t hist[SEL_BUCKETS]; /* 16 KB of stack */
    uint64_t lo = UINT64_MAX, hi = 0;
    for (uint64_t i = 0; i < t->nrows; i++) {
        const unsigned char *r = pse_rec(t, i);
        if (by_id && pse_rec_ver(t, r) != ver) continue;
        const uint64_t key = by_id ? pse_rec_id(r) : pse_rec_ver(t, r);
        if (key < lo) lo = key;
        if (key > hi) hi = key;
    }
    while (lo < hi) {
        const uint64_t width = (hi - lo) / SEL_BUCKETS + 1;
        memset(hist, 0, sizeof(hist));
        for (uint64_t i = 0; i < t->nrows; i++) {
            const unsigned char *r = pse_rec(t, i);
            if (by_id && pse_rec_ver(t, r) != ver) continue;
            const uint64_t key = by_id ? pse_rec_id(r) : pse_rec_ver(t, r);
            if (key >= lo && key <= hi) hist[(key - lo) / width]++;
        }
        uint64_t cum = 0, bkt = 0;
        while (cum + hist[bkt] < m) cum += hist[bkt++];
        m -= cum;
        lo = lo + bkt * width;
        if (hi - lo > width - 1) hi = lo + width - 1;
    }
    return lo;
}

/* CAPACITY: when rows exceed it, removes the least recently pushed rows
 * (smallest (last_version, id)) down to capacity - capacity/16, so the
 * passes this costs are paid once per capacity/16 new rows. */
static uint64_t evict_capacity(PSEmbed *t) {
    const uint64_t cap = t->cfg.capacity;
    if (!cap || t->nrows <= cap) return 0;
    const uint64_t low = cap - cap / 16;
    const uint64_t m = t->nrows - low;
    const uint64_t v = select_kth(t, m, 0, 0);
    uint64_t less = 0, eq = 0;
    for (uint64_t i = 0; i < t->nrows; i++) {
        const uint64_t rv = pse_rec_ver(t, pse_rec(t, i));
        less += rv < v;
        eq += rv == v;
    }
    const uint64_t r = m - less;
    const uint64_t idmax = r == eq ? UINT64_MAX : select_kth(t, r, 1, v);
    const uint64_t n = evict_where(t, EV_KEY, v, idmax);
    t->stats.evicted_capacity += n;
    return n;
}

/* TTL: reclaims dead rows from a cursor over storage order, 'budget' slots
 * per push (dead rows are already invisible to pulls and pushes). */
static uint64_t sweep_ttl(PSEmbed *t, uint64_t budget) {
    uint64_t n = 0;
    if (!t->cfg.ttl) return 0;
    while (budget-- && t->nrows) {
        if (t->sweep_pos >= t->nrows) t->sweep_pos = 0;
        if (pse_dead(t, pse_rec(t, t->sweep_pos))) {
            remove_slot(t, t->sweep_pos);
            n++;
        } else {
            t->sweep_pos++;
        }
    }
    t->stats.evicted_ttl += n;
    return n;
}

uint64_t PSEmbed_EvictAge(PSEmbed *t, uint64_t age) {
    if (age == 0 || age > PSE_MAX_AGE) return 0;
    t->rm_version = t->version + 1;
    const uint64_t n = evict_where(t, EV_AGE, age, 0);
    t->stats.evicted_explicit += n;
    if (n) after_evictions(t);
    return n;
}

int PSEmbed_Reconfigure(PSEmbed *t, const PSEmbedConfig *c, const char **err) {
    const PSEmbedConfig *o = &t->cfg;
    const char *e = PSEmbed_CheckConfig(c);
    if (!e && (c->dim != o->dim || c->optim != o->optim || c->init != o->init ||
               c->init_a != o->init_a || c->init_b != o->init_b || c->seed != o->seed || c->salt != o->salt ||
               c->admit != o->admit || (o->admit > 1 && c->filter_log2 != o->filter_log2)))
        e = "DIM, optimizer, INIT, SEED, ADMIT and FILTER are fixed at creation";
    if (e) {
        *err = e;
        return PSE_ERR_ARG;
    }
    /* The log's new ring, with room for what a lower CAPACITY evicts, is
     * allocated before anything changes. A TTL change makes rows dead or
     * alive again without a removal: the log restarts at this version. */
    const int ttl_changed = c->ttl != o->ttl;
    const uint64_t keep0 = ttl_changed ? 0 : t->tomb_len;
    const uint64_t keep = keep0 < c->tombstones ? keep0 : c->tombstones;
    const uint64_t evict = c->capacity && t->nrows > c->capacity
                               ? t->nrows - (c->capacity - c->capacity / 16) : 0;
    uint64_t alloc = keep + evict < c->tombstones ? keep + evict : c->tombstones;
    if (alloc < t->tomb_alloc && c->tombstones >= t->tomb_alloc) alloc = t->tomb_alloc;
    if (alloc != t->tomb_alloc || keep != t->tomb_len) {
        if (tomb_realloc(t, alloc, keep) != PSE_OK) {
            *err = "out of memory";
            return PSE_ERR_OOM;
        }
    }
    if (ttl_changed) {
        t->tomb_len = 0;
        t->tomb_head = 0;
        t->tomb_horizon = t->version + 1;
    }
    t->rm_version = t->version + 1;
    t->cfg = *c;
    t->cfg.filter_log2 = o->filter_log2;
    PSEmbed_MakeCoef(c, &t->coef);
    if (evict_capacity(t)) after_evictions(t);
    return PSE_OK;
}

/* ------------------------------------------------------------------------
 * Push
 * ---------------------------------------------------------------------- */

enum { ACT_STEP = 0, ACT_RESET, ACT_ABSENT };
#define APPLY_DIST 8

int PSEmbed_Push(PSEmbed *t, const unsigned char *idblob, size_t k, const unsigned char *grad,
                 PSEmbedPushResult *res) {
    const uint32_t dim = t->cfg.dim;
    if (k == 0 || k > PSE_MAX_PUSH_IDS) return PSE_ERR_ARG;
    if (!ps_all_finite(grad, k * dim)) return PSE_ERR_NONFINITE;

    /* Scratch: distinct ids, their slots and actions, summed gradients and
     * a small hash (2k..4k buckets) that finds repeats in the push, keyed
     * with the process's salt so crafted ids cannot share a bucket. */
    uint64_t hsize = 16;
    while (hsize < 2 * (uint64_t)k) hsize *= 2;
    const size_t bytes = k * (sizeof(uint64_t) + sizeof(int64_t) + 1) + hsize * sizeof(uint32_t) +
                         (size_t)k * dim * sizeof(float) + 16;
    unsigned char *scratch = pse_alloc(NULL, bytes);
    if (!scratch) return PSE_ERR_OOM;
    uint64_t *uid = (uint64_t *)(void *)scratch;
    int64_t *uslot = (int64_t *)(void *)(uid + k);
    float *sum = (float *)(void *)(uslot + k);
    uint32_t *dh = (uint32_t *)(void *)(sum + (size_t)k * dim);
    uint8_t *act = (uint8_t *)(dh + hsize);
    memset(dh, 0, hsize * sizeof(uint32_t));

    /* Sum repeats in the order given: the first occurrence is copied, each
     * later one added element by element. */
    size_t nu = 0;
    for (size_t i = 0; i < k; i++) {
        const uint64_t id = pse_ld64(idblob + 8 * i);
        uint64_t p = PSEmbed_Mix64(id ^ PushSalt) & (hsize - 1);
        while (dh[p] && uid[dh[p] - 1] != id) p = (p + 1) & (hsize - 1);
        const unsigned char *g = grad + (size_t)4 * dim * i;
        if (!dh[p]) {
            dh[p] = (uint32_t)(nu + 1);
            uid[nu] = id;
            memcpy(sum + nu * dim, g, (size_t)4 * dim);
            nu++;
        } else {
            float *s = sum + (size_t)(dh[p] - 1) * dim;
            for (uint32_t j = 0; j < dim; j++) {
                float x;
                memcpy(&x, g + 4 * j, 4);
                s[j] = s[j] + x;
            }
        }
    }

    uint64_t absent = 0;
    lookup_ids(t, uid, nu, uslot);
    for (size_t u = 0; u < nu; u++) {
        if (uslot[u] < 0) {
            act[u] = ACT_ABSENT;
            absent++;
        } else {
            act[u] = pse_dead(t, pse_rec(t, (uint64_t)uslot[u])) ? ACT_RESET : ACT_STEP;
        }
    }
    /* Room for every absent id (admission may drop some): the only step
     * that can fail, and it changes nothing visible. */
    int rc = pse_reserve(t, t->nrows + absent);
    if (rc == PSE_OK && t->cfg.tombstones) {
        /* Room in the tombstone log for every removal this push can make:
         * the TTL sweep's budget and what CAPACITY evicts. */
        const uint64_t most = t->nrows + absent, sweep = t->cfg.ttl ? 2 * (uint64_t)nu + 16 : 0;
        const uint64_t cap = t->cfg.capacity;
        const uint64_t over = cap && most > cap ? most - (cap - cap / 16) : 0;
        rc = pse_tomb_reserve(t, sweep + over < most ? sweep + over : most);
    }
    if (rc != PSE_OK) {
        pse_free(NULL, scratch, bytes);
        return rc;
    }

    PSEmbedPushResult out = {0};
    t->version++;
    t->rm_version = t->version;
    if (t->version % PSE_AGE_PASS == 0) pse_saturate_ages(t);
    out.unique = nu;
    const uint32_t nst = (uint32_t)PSEmbed_NumStateVectors(t->cfg.optim);
    if (t->filter)
        for (size_t u = 0; u < nu && u < FILTER_DIST; u++)
            if (act[u] == ACT_ABSENT) filter_prefetch(t, uid[u]);
    for (size_t u = 0; u < nu; u++) {
        if (t->filter && u + FILTER_DIST < nu && act[u + FILTER_DIST] == ACT_ABSENT)
            filter_prefetch(t, uid[u + FILTER_DIST]);
        /* The lookup's prefetches of the first rows have left L1 by now:
         * the records a few steps ahead are fetched again (their slots are
         * known, so these misses overlap). */
        if (u + APPLY_DIST < nu && uslot[u + APPLY_DIST] >= 0)
            prefetch_span(pse_rec(t, (uint64_t)uslot[u + APPLY_DIST]), t->rec_bytes);
        unsigned char *r;
        if (act[u] == ACT_ABSENT) {
            if (t->filter && filter_add(t, uid[u]) < t->cfg.admit) {
                out.dropped++;
                continue;
            }
            r = pse_append(t, uid[u]);
            PSEmbed_InitRow(&t->cfg, uid[u], pse_rec_data(t, r));
            out.created++;
        } else {
            r = pse_rec(t, (uint64_t)uslot[u]);
            if (act[u] == ACT_RESET) {
                /* A dead row found by its next push: evicted, then
                 * created afresh in place. */
                memset(r + 8, 0, t->rec_bytes - 8);
                PSEmbed_InitRow(&t->cfg, uid[u], pse_rec_data(t, r));
                t->stats.evicted_ttl++;
                out.created++;
            }
        }
        uint32_t pushes = pse_rec_pushes(r);
        if (pushes < UINT32_MAX) pushes++;
        pse_rec_set_pushes(r, pushes);
        pse_rec_set_ver(r, t->version);
        float *w = pse_rec_data(t, r);
        PSEmbed_StepRow(t->cfg.optim, &t->coef, dim, w, nst > 0 ? w + dim : NULL,
                        nst > 1 ? w + 2 * (size_t)dim : NULL, pse_rec_acc(t, r), sum + u * dim,
                        pushes);
        out.updated++;
    }
    pse_free(NULL, scratch, bytes);

    t->stats.created += out.created;
    t->stats.dropped += out.dropped;
    out.evicted = sweep_ttl(t, 2 * (uint64_t)nu + 16);
    out.evicted += evict_capacity(t);
    if (out.evicted) after_evictions(t);
    out.version = t->version;
    if (res) *res = out;
    return PSE_OK;
}
