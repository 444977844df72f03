/* embed_int.h -- the layout of an embedding table, shared by embed.c (rows,
 * index, lookup, pull), embed_tomb.c (the tombstone log), embed_push.c
 * (push, admission, eviction) and embed_io.c (scan, serialization, copy,
 * digest), and ring_table.c (a received ring delta added to rows). Private
 * to those files.
 *
 * Rows are records in chunks, dense in slots 0 .. nrows-1:
 *   id u64 | last_version u32 | pushes u32 | [rowacc f32] | dim values |
 *   dim floats per state vector
 * (16 header bytes, 20 with ROWADAGRAD's accumulator; records are 4-byte
 * aligned, so the id is read with memcpy). last_version holds the low 32
 * bits of the table version of the row's last push; the full version is
 * version - (uint32)(version - low), exact while the row's age is below
 * 2^32. Ages are kept below that by saturating them at PSE_MAX_AGE: every
 * PSE_AGE_PASS versions one pass moves the stored version of each row older
 * than PSE_MAX_AGE up to version - PSE_MAX_AGE, so an age never exceeds
 * PSE_MAX_AGE + PSE_AGE_PASS - 1. A removal moves the last record into the
 * hole, so storage order is a function of the pushes applied.
 *
 * A chunk holds chunk_rows records (the first grows 16, 32, ... up to
 * chunk_rows), chunk_rows chosen so that a chunk fills a power of two bytes
 * (an exact allocator size class) to within one record. Slot -> chunk is a
 * division by chunk_rows done as a multiply by a 64-bit reciprocal (exact
 * for 32-bit slots and divisors, Lemire et al. 2019).
 *
 * The index is open addressing with linear probing over uint32 entries:
 * (slot + 1) << 6 | 6 fingerprint bits of the id's hash; 0 is empty. A key's
 * home bucket is (hash * size) >> 64, which keeps the index ordered by hash
 * (PSEmbed_Scan relies on it) and allows any size: the index grows by 15/8
 * when its load passes 0.8, so the load stays in [0.53, 0.8] while rows
 * grow and the index costs 5 to 7.5 bytes per row. Deletion shifts entries
 * back (no tombstones). */

#ifndef PS_EMBED_INT_H
#define PS_EMBED_INT_H

#include <string.h>

#include "embed.h"

#define PSE_CHUNK_MIN_BYTES (1u << 17) /* a chunk is the smallest power of two >= this and >= 16 records */
#define PSE_FIRST_CHUNK_ROWS 16u
#define PSE_HDR_BYTES 16u                /* id, last_version, pushes; + 4 with ROWADAGRAD */
#define PSE_AGE_PASS (1ull << 30)        /* versions between two age-saturation passes */
#define PSE_FP_BITS 6
#define PSE_FP_MASK ((1u << PSE_FP_BITS) - 1)
#define PSE_MIN_INDEX 16u

__extension__ typedef unsigned __int128 pse_u128;

struct PSEmbed {
    PSEmbedConfig cfg;
    PSEmbedCoef coef;
    uint32_t nfloats;   /* dim * (1 + state vectors) */
    size_t hdr_bytes;   /* PSE_HDR_BYTES, + 4 with ROWADAGRAD */
    size_t rec_bytes;   /* hdr_bytes + 4 * nfloats */
    uint64_t chunk_rows; /* records per chunk after the first */
    uint64_t chunk_mul;  /* ceil(2^64 / chunk_rows) (chunk_rows >= 16) */

    uint64_t version;
    uint64_t nrows;
    uint64_t sweep_pos;
    PSEmbedStats stats;

    unsigned char **chunks; /* chunk 0 holds chunk0_rows records, the others chunk_rows */
    uint64_t nchunks, dir_cap, chunk0_rows;

    uint32_t *index;
    uint64_t isize;

    uint8_t *filter; /* 2^filter_log2 counters when admit > 1 */
    size_t filter_len;

    /* The tombstone log (embed.h): a ring of tomb_alloc (id, version) pairs
     * (grown on demand up to cfg.tombstones), tomb_len of them used from
     * tomb_head (the oldest). */
    uint64_t *tomb;
    uint64_t tomb_alloc, tomb_len, tomb_head;
    uint64_t tomb_horizon, tomb_total;
    uint64_t rm_version; /* the version removals are logged at now (not state): the
                          * version a push made, or version + 1 for PS.EVICT and
                          * PS.CONFIG, which remove rows without a push */

    size_t bytes;        /* allocated, for PSEmbed_MemUsage */
    uint64_t load_rows;  /* rows a rebuild announced (PSEmbed_LoadBegin) */
};

/* Allocation through the installed hook, counted in t->bytes. */
void *pse_alloc(PSEmbed *t, size_t n);
void pse_free(PSEmbed *t, void *p, size_t n);

static inline unsigned char *pse_rec(const PSEmbed *t, uint64_t slot) {
    const uint64_t c = (uint64_t)(((pse_u128)slot * t->chunk_mul) >> 64);
    return t->chunks[c] + (size_t)(slot - c * t->chunk_rows) * t->rec_bytes;
}
static inline uint64_t pse_ld64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}
static inline void pse_st64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }
static inline uint64_t pse_rec_id(const unsigned char *r) { return pse_ld64(r); }
/* The row's age in versions (version - last push version). */
static inline uint64_t pse_rec_age(const PSEmbed *t, const unsigned char *r) {
    uint32_t low;
    memcpy(&low, r + 8, 4);
    return (uint32_t)((uint32_t)t->version - low);
}
/* The full table version of the row's last push. */
static inline uint64_t pse_rec_ver(const PSEmbed *t, const unsigned char *r) {
    return t->version - pse_rec_age(t, r);
}
static inline void pse_rec_set_ver(unsigned char *r, uint64_t version) {
    const uint32_t low = (uint32_t)version;
    memcpy(r + 8, &low, 4);
}
static inline uint32_t pse_rec_pushes(const unsigned char *r) {
    uint32_t v;
    memcpy(&v, r + 12, 4);
    return v;
}
static inline void pse_rec_set_pushes(unsigned char *r, uint32_t n) { memcpy(r + 12, &n, 4); }
/* ROWADAGRAD's accumulator; NULL for the other optimizers (no room for it). */
static inline float *pse_rec_acc(const PSEmbed *t, unsigned char *r) {
    return t->hdr_bytes > PSE_HDR_BYTES ? (float *)(void *)(r + PSE_HDR_BYTES) : NULL;
}
static inline float *pse_rec_data(const PSEmbed *t, unsigned char *r) {
    return (float *)(void *)(r + t->hdr_bytes);
}

/* The index hash of 'id': keyed with the table's salt (PSEmbedConfig). */
static inline uint64_t pse_hash(const PSEmbed *t, uint64_t id) { return PSEmbed_Mix64(id ^ t->cfg.salt); }

static inline uint64_t pse_home(uint64_t h, uint64_t size) {
    return (uint64_t)(((pse_u128)h * size) >> 64);
}

/* Whether a stored row is dead (TTL): not pushed for ttl versions. */
static inline int pse_dead(const PSEmbed *t, const unsigned char *r) {
    return t->cfg.ttl && pse_rec_age(t, r) >= t->cfg.ttl;
}

static inline void pse_fill_row(const PSEmbed *t, const unsigned char *r, PSEmbedRow *row) {
    row->id = pse_rec_id(r);
    row->last_version = pse_rec_ver(t, r);
    row->pushes = pse_rec_pushes(r);
    row->rowacc = 0;
    if (t->hdr_bytes > PSE_HDR_BYTES) memcpy(&row->rowacc, r + PSE_HDR_BYTES, 4);
    row->data = (const float *)(const void *)(r + t->hdr_bytes);
}

/* Prefetches the cache lines of a record's first 'span' bytes (the batched
 * lookup of embed.c and the push's apply loop). */
#define PF_MAX_SPAN 512 /* bytes prefetched per record at most: a wide row's
                         * rest is streamed by the hardware prefetcher, and
                         * 16 rows of it in flight would only evict others */

static inline __attribute__((always_inline)) void prefetch_span(const unsigned char *r, size_t span) {
    const uintptr_t end = (uintptr_t)r + (span < PF_MAX_SPAN ? span : PF_MAX_SPAN);
    for (uintptr_t a = (uintptr_t)r & ~(uintptr_t)63; a < end; a += 64)
        __builtin_prefetch((const void *)a);
}

/* Index position of 'id' or -1. */
int64_t pse_find(const PSEmbed *t, uint64_t id);

/* Slots of n ids (little-endian uint64 at 'ids'): slot or -1. */
void pse_lookup_ids(const PSEmbed *t, const uint64_t *ids, size_t n, int64_t *slots);

/* Makes room for 'rows' rows in the slab and the index (nothing else
 * changes); PSE_ERR_OOM on failure. */
int pse_reserve(PSEmbed *t, uint64_t rows);

/* Appends a row with header fields set and data zeroed except what the
 * caller writes; returns its record (room must be reserved). */
unsigned char *pse_append(PSEmbed *t, uint64_t id);

/* Room in the tombstone log for 'n' more removals (PSE_ERR_OOM: nothing
 * changed); appends one removal of 'id' at the current version. */
int pse_tomb_reserve(PSEmbed *t, uint64_t n);
void pse_tomb_add(PSEmbed *t, uint64_t id);
/* Resizes the ring to hold 'cap' entries (the newest kept); PSE_ERR_OOM. */
int pse_tomb_resize(PSEmbed *t, uint64_t cap);
/* A ring of 'alloc' entries holding the newest 'keep' of the log;
 * PSE_ERR_OOM changes nothing. */
int pse_tomb_realloc(PSEmbed *t, uint64_t alloc, uint64_t keep);

/* Saturates every row's age at PSE_MAX_AGE (see the layout above). */
void pse_saturate_ages(PSEmbed *t);

/* Removes the row in 'slot' (logged in the tombstone log); the last row
 * moves into the hole. */
void pse_remove_slot(PSEmbed *t, uint64_t slot);
/* After evictions: gives back chunks and, below a load of 1/4, index
 * buckets. */
void pse_after_evictions(PSEmbed *t);

#endif /* PS_EMBED_INT_H */
