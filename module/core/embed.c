/* embed.c -- embedding tables: storage (see embed.h; layout in embed_int.h;
 * rules in docs/embed-design.md): allocation, the index and its batched
 * lookup, the slab of rows, row removal, the table's life and its pull.
 * The tombstone log is in embed_tomb.c, admission, eviction and the push
 * in embed_push.c, serialization in embed_io.c. */

#include "embed_int.h"

#include <stdlib.h>

#include "hugepage.h"

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
void pse_lookup_ids(const PSEmbed *t, const uint64_t *ids, size_t n, int64_t *slots) {
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

/* Removes the row in 'slot': its index entry goes (and into the tombstone
 * log), the last row moves into the hole and its entry is repointed. */
void pse_remove_slot(PSEmbed *t, uint64_t slot) {
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
void pse_after_evictions(PSEmbed *t) {
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
