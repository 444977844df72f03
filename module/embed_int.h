/* embed_int.h -- the layout of an embedding table, shared by embed.c (rows,
 * index, push, pull, eviction) and embed_io.c (scan, serialization, copy,
 * digest). Private to those two files.
 *
 * Rows are records in fixed-size chunks, dense in slots 0 .. nrows-1:
 *   id u64 | last_version u64 | pushes u32 | rowacc f32 | dim values |
 *   dim floats per state vector
 * (24 header bytes; records are 4-byte aligned, so the u64 fields are read
 * with memcpy). A removal moves the last record into the hole, so storage
 * order is a function of the pushes applied.
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

#define PSE_CHUNK_SHIFT 10
#define PSE_CHUNK_ROWS (1u << PSE_CHUNK_SHIFT)
#define PSE_FIRST_CHUNK_ROWS 16u
#define PSE_HDR_BYTES 24u
#define PSE_FP_BITS 6
#define PSE_FP_MASK ((1u << PSE_FP_BITS) - 1)
#define PSE_MIN_INDEX 16u

__extension__ typedef unsigned __int128 pse_u128;

struct PSEmbed {
    PSEmbedConfig cfg;
    PSEmbedCoef coef;
    uint32_t nfloats;   /* dim * (1 + state vectors) */
    size_t rec_bytes;   /* PSE_HDR_BYTES + 4 * nfloats */

    uint64_t version;
    uint64_t nrows;
    uint64_t sweep_pos;
    PSEmbedStats stats;

    unsigned char **chunks; /* chunk 0 holds chunk0_rows records, the others PSE_CHUNK_ROWS */
    uint64_t nchunks, dir_cap, chunk0_rows;

    uint32_t *index;
    uint64_t isize;

    uint8_t *filter; /* 2^filter_log2 counters when admit > 1 */
    size_t filter_len;

    size_t bytes;        /* allocated, for PSEmbed_MemUsage */
    uint64_t load_rows;  /* rows a rebuild announced (PSEmbed_LoadBegin) */
};

/* Allocation through the installed hook, counted in t->bytes. */
void *pse_alloc(PSEmbed *t, size_t n);
void pse_free(PSEmbed *t, void *p, size_t n);

static inline unsigned char *pse_rec(const PSEmbed *t, uint64_t slot) {
    return t->chunks[slot >> PSE_CHUNK_SHIFT] + (size_t)(slot & (PSE_CHUNK_ROWS - 1)) * t->rec_bytes;
}
static inline uint64_t pse_ld64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}
static inline void pse_st64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }
static inline uint64_t pse_rec_id(const unsigned char *r) { return pse_ld64(r); }
static inline uint64_t pse_rec_ver(const unsigned char *r) { return pse_ld64(r + 8); }
static inline uint32_t pse_rec_pushes(const unsigned char *r) {
    uint32_t v;
    memcpy(&v, r + 16, 4);
    return v;
}
static inline float *pse_rec_acc(unsigned char *r) { return (float *)(void *)(r + 20); }
static inline float *pse_rec_data(unsigned char *r) { return (float *)(void *)(r + PSE_HDR_BYTES); }

static inline uint64_t pse_home(uint64_t h, uint64_t size) {
    return (uint64_t)(((pse_u128)h * size) >> 64);
}

/* Whether a stored row is dead (TTL): not pushed for ttl versions. */
static inline int pse_dead(const PSEmbed *t, const unsigned char *r) {
    return t->cfg.ttl && t->version - pse_rec_ver(r) >= t->cfg.ttl;
}

static inline void pse_fill_row(const PSEmbed *t, const unsigned char *r, PSEmbedRow *row) {
    row->id = pse_rec_id(r);
    row->last_version = pse_rec_ver(r);
    row->pushes = pse_rec_pushes(r);
    memcpy(&row->rowacc, r + 20, 4);
    row->data = (const float *)(const void *)(r + PSE_HDR_BYTES);
    (void)t;
}

/* Index position of 'id' or -1. */
int64_t pse_find(const PSEmbed *t, uint64_t id);

/* Makes room for 'rows' rows in the slab and the index (nothing else
 * changes); PSE_ERR_OOM on failure. */
int pse_reserve(PSEmbed *t, uint64_t rows);

/* Appends a row with header fields set and data zeroed except what the
 * caller writes; returns its record (room must be reserved). */
unsigned char *pse_append(PSEmbed *t, uint64_t id);

#endif /* PS_EMBED_INT_H */
