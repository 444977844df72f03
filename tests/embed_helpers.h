/* embed_helpers.h -- what the cmocka tests of the embedding table
 * (test_embed*.c) share: a random source, table configurations, pushes,
 * a counting allocator that can fail on demand, a busy random workload,
 * an index consistency check and a rebuild of a table from its rows.
 * Include after cmocka.h and embed.h. Functions are static inline so each
 * test file uses what it needs. */

#ifndef PS_EMBED_HELPERS_H
#define PS_EMBED_HELPERS_H

#include <stdlib.h>
#include <string.h>

#include "embed.h"

/* ------------------------------------------------------------------------
 * Helpers
 * ---------------------------------------------------------------------- */

static uint64_t Rs = 0x9e3779b97f4a7c15ULL;
static inline uint64_t rnd(void) {
    Rs ^= Rs << 13;
    Rs ^= Rs >> 7;
    Rs ^= Rs << 17;
    return Rs;
}

static inline PSEmbedConfig config(int optim, uint32_t dim) {
    PSEmbedConfig c;
    PSEmbed_DefaultConfig(&c, dim);
    c.optim = optim;
    c.init = PSE_INIT_NORMAL;
    c.init_a = 0;
    c.init_b = 0.1;
    c.seed = 7;
    return c;
}

/* Pushes ids with gradient value 'gv' everywhere. */
static inline int push_ids(PSEmbed *t, const uint64_t *ids, size_t k, float gv, PSEmbedPushResult *res) {
    const uint32_t dim = PSEmbed_Config(t)->dim;
    float *g = malloc(k * dim * sizeof(float));
    for (size_t i = 0; i < k * dim; i++) g[i] = gv;
    int rc = PSEmbed_Push(t, (const unsigned char *)ids, k, (const unsigned char *)g, res);
    free(g);
    return rc;
}

static inline int push1(PSEmbed *t, uint64_t id) { return push_ids(t, &id, 1, 0.5f, NULL); }

/* Counting allocator: sizes in a header, optional failure after N calls. */
static size_t Live;
static long FailAfter = -1;
static inline void *count_alloc(size_t n) {
    if (FailAfter == 0) return NULL;
    if (FailAfter > 0) FailAfter--;
    size_t *p = malloc(n + 16);
    if (!p) return NULL;
    p[0] = n;
    Live += n;
    return (char *)p + 16;
}
static inline void count_free(void *q) {
    if (!q) return;
    size_t *p = (size_t *)(void *)((char *)q - 16);
    Live -= p[0];
    free(p);
}
static inline int use_counting(void **state) {
    (void)state;
    Live = 0;
    FailAfter = -1;
    PSEmbed_SetAllocator(count_alloc, count_free);
    return 0;
}
static inline int use_malloc(void **state) {
    (void)state;
    PSEmbed_SetAllocator(malloc, free);
    return 0;
}

/* A random workload with admission, TTL and CAPACITY all active. */
static inline void feed(PSEmbed *t, uint64_t seed, int pushes) {
    uint64_t s = seed;
    for (int p = 0; p < pushes; p++) {
        uint64_t ids[64];
        float g[64 * 4];
        for (int i = 0; i < 64; i++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            ids[i] = (s >> 33) % 3000;
            for (int j = 0; j < 4; j++) g[i * 4 + j] = (float)((int)((s >> (8 + j)) & 255) - 128) / 64.0f;
        }
        assert_int_equal(PSEmbed_Push(t, (const unsigned char *)ids, 64, (const unsigned char *)g, NULL),
                         PSE_OK);
        if (p % 97 == 96) PSEmbed_EvictAge(t, 30);
    }
}

/* Every live stored row is found by its id at its own storage slot (the
 * index survived the inserts, moves and back-shift deletions). */
static inline void assert_index_consistent(const PSEmbed *t) {
    const uint64_t ttl = PSEmbed_Config(t)->ttl, v = PSEmbed_Version(t);
    for (uint64_t i = 0; i < PSEmbed_Rows(t); i++) {
        PSEmbedRow r, l;
        PSEmbed_RowAt(t, i, &r);
        if (ttl && v - r.last_version >= ttl) {
            assert_false(PSEmbed_Lookup(t, r.id, NULL));
            continue;
        }
        assert_true(PSEmbed_Lookup(t, r.id, &l));
        assert_ptr_equal(l.data, r.data);
    }
}

static inline PSEmbedConfig busy_config(void) {
    PSEmbedConfig c = config(PSE_OPT_ADAM, 4);
    c.admit = 2;
    c.filter_log2 = 12;
    c.capacity = 1800;
    c.ttl = 40;
    return c;
}

/* Rebuilds 't' from its rows with one row replaced by 'bad' (when
 * 'bad_at' >= 0) and the state adjusted by 'tweak'; returns the status of
 * the first failing step (PSE_OK when all pass) and the table in *out. */
static inline int rebuild(const PSEmbed *t, int64_t bad_at, const PSEmbedRow *bad,
                   void (*tweak)(PSEmbedState *), PSEmbed **out) {
    PSEmbedState st;
    PSEmbed_GetState(t, &st);
    if (tweak) tweak(&st);
    size_t flen;
    const uint8_t *f = PSEmbed_Filter(t, &flen);
    const char *err = NULL;
    int rc;
    *out = NULL;
    PSEmbed *b = PSEmbed_LoadBegin(PSEmbed_Config(t), &st, f, flen, &err, &rc);
    if (!b) return rc;
    for (uint64_t i = 0; i < PSEmbed_Rows(t) && rc == PSE_OK; i++) {
        PSEmbedRow row;
        PSEmbed_RowAt(t, i, &row);
        rc = PSEmbed_LoadRow(b, (int64_t)i == bad_at ? bad : &row, &err);
    }
    if (rc == PSE_OK) rc = PSEmbed_LoadEnd(b, &err);
    for (uint64_t i = 0; i < PSEmbed_TombLen(t) && rc == PSE_OK; i++) {
        uint64_t id, ver;
        PSEmbed_TombAt(t, i, &id, &ver);
        rc = PSEmbed_LoadTomb(b, id, ver, &err);
    }
    if (rc != PSE_OK) {
        PSEmbed_Free(b);
        return rc;
    }
    *out = b;
    return PSE_OK;
}

#endif /* PS_EMBED_HELPERS_H */
