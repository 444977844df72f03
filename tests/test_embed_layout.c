/* test_embed_layout.c -- cmocka tests of the embedding table's memory
 * layout (module/core/embed_int.h): 32-bit last push versions that stay exact
 * across the 2^32 wrap of the table version, ages that saturate at
 * PSE_MAX_AGE (in a pass every 2^30 versions and when loading an older
 * row), and allocations that the allocator does not round up (chunks of a
 * power of two bytes, index sizes of 4..7 times a power of two), and
 * that every state pushes produce saves and loads back bit-identical
 * (overflowed values, the TTL sweep position). */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embed.h"

/* Loads a table at version 'version' holding rows 1, 2, 3 (SGD, dim 2)
 * whose last push versions are 'last[0..2]'. */
static PSEmbed *load_three(uint64_t version, const uint64_t last[3]) {
    PSEmbedConfig c;
    PSEmbed_DefaultConfig(&c, 2);
    PSEmbedState st = {.version = version, .nrows = 3};
    const char *err = NULL;
    int rc;
    PSEmbed *t = PSEmbed_LoadBegin(&c, &st, NULL, 0, &err, &rc);
    assert_non_null(t);
    const float data[2] = {0.25f, -0.5f};
    for (uint64_t i = 0; i < 3; i++) {
        PSEmbedRow row = {.id = i + 1, .last_version = last[i], .pushes = 1, .data = data};
        assert_int_equal(PSEmbed_LoadRow(t, &row, &err), PSE_OK);
    }
    assert_int_equal(PSEmbed_LoadEnd(t, &err), PSE_OK);
    return t;
}

static uint64_t last_version(const PSEmbed *t, uint64_t id) {
    PSEmbedRow row;
    assert_true(PSEmbed_Lookup(t, id, &row));
    return row.last_version;
}

static void push_id(PSEmbed *t, uint64_t id) {
    const float g[2] = {1.0f, 1.0f};
    assert_int_equal(PSEmbed_Push(t, (const unsigned char *)&id, 1, (const unsigned char *)g, NULL),
                     PSE_OK);
}

/* The table version passes 2^32 (so the stored 32-bit versions wrap):
 * young rows keep their exact version; a row older than PSE_MAX_AGE keeps
 * it until the next pass (every 2^30 versions) moves it to
 * version - PSE_MAX_AGE; a loaded row older than any saved table can hold
 * is saturated on load. */
static void test_row_versions_survive_the_32_bit_wrap_and_ages_saturate(void **state) {
    (void)state;
    const uint64_t pass = 1ull << 30;
    const uint64_t v = 5 * pass - 2; /* above 2^32, 2 versions before a pass */
    const uint64_t last[3] = {v - 5, v - PSE_MAX_AGE - 100, 1};
    PSEmbed *t = load_three(v, last);
    assert_int_equal(last_version(t, 1), v - 5);
    assert_int_equal(last_version(t, 2), v - PSE_MAX_AGE - 100); /* within the bound: exact */
    assert_int_equal(last_version(t, 3), v - (PSE_MAX_AGE + pass - 2)); /* saturated on load */
    const uint64_t d = PSEmbed_Digest64(t);
    PSEmbed *cp = PSEmbed_Copy(t);
    assert_int_equal(PSEmbed_Digest64(cp), d);
    PSEmbed_Free(cp);

    push_id(t, 4);
    assert_int_equal(last_version(t, 2), v - PSE_MAX_AGE - 100); /* no pass yet */
    push_id(t, 4);                                               /* version 5 * 2^30: the pass */
    assert_int_equal(PSEmbed_Version(t), 5 * pass);
    assert_int_equal(last_version(t, 1), v - 5);
    assert_int_equal(last_version(t, 2), 5 * pass - PSE_MAX_AGE);
    assert_int_equal(last_version(t, 3), 5 * pass - PSE_MAX_AGE);
    PSEmbedRow row;
    assert_true(PSEmbed_Lookup(t, 4, &row));
    assert_int_equal(row.last_version, 5 * pass);
    assert_int_equal(row.pushes, 2);

    /* Ages up to PSE_MAX_AGE are exact, so eviction by age is too; larger
     * ages (and TTLs) are refused. */
    assert_int_equal(PSEmbed_EvictAge(t, PSE_MAX_AGE + 1), 0);
    assert_int_equal(PSEmbed_Rows(t), 4);
    assert_int_equal(PSEmbed_EvictAge(t, PSE_MAX_AGE), 2);
    assert_int_equal(PSEmbed_Rows(t), 2);
    assert_int_equal(last_version(t, 1), v - 5);
    PSEmbed_Free(t);

    PSEmbedConfig c;
    PSEmbed_DefaultConfig(&c, 2);
    c.ttl = PSE_MAX_AGE;
    assert_null(PSEmbed_CheckConfig(&c));
    c.ttl = PSE_MAX_AGE + 1;
    assert_non_null(PSEmbed_CheckConfig(&c));
}

/* Live allocations (pointer and size, in allocation order), kept by a
 * pass-through allocator. */
#define MAX_LIVE 4096
static void *LiveP[MAX_LIVE];
static size_t LiveN[MAX_LIVE];
static size_t NLive;
static void *record_alloc(size_t n) {
    void *p = malloc(n);
    if (p && NLive < MAX_LIVE) {
        LiveP[NLive] = p;
        LiveN[NLive++] = n;
    }
    return p;
}
static void record_free(void *p) {
    for (size_t i = 0; i < NLive; i++)
        if (LiveP[i] == p) {
            memmove(&LiveP[i], &LiveP[i + 1], (NLive - i - 1) * sizeof(LiveP[0]));
            memmove(&LiveN[i], &LiveN[i + 1], (NLive - i - 1) * sizeof(LiveN[0]));
            NLive--;
            break;
        }
    free(p);
}

/* Whether n is 4, 5, 6 or 7 times a power of two (or below 8). */
static int is_size_class(uint64_t n) {
    while (n > 7) {
        if (n & 1) return 0;
        n >>= 1;
    }
    return 1;
}

/* Every allocation a grown table holds, but its struct and its first
 * chunk, is a jemalloc size class (chunks: a power of two bytes less than
 * one record; directory and index: 4..7 times a power of two), and rows
 * cost their record (16 header bytes, 20 with ROWADAGRAD) plus 4 to 8.5
 * bytes of index and slack. */
static void test_chunks_and_index_take_whole_allocator_size_classes(void **state) {
    (void)state;
    for (int o = 0; o < PSE_OPT_COUNT; o++) {
        PSEmbedConfig c;
        PSEmbed_DefaultConfig(&c, 16);
        c.optim = o;
        NLive = 0;
        PSEmbed_SetAllocator(record_alloc, record_free);
        PSEmbed *t = PSEmbed_New(&c, NULL);
        assert_non_null(t);
        const size_t rec = 16 + (o == PSE_OPT_ROWADAGRAD ? 4 : 0) + 4 * (size_t)PSEmbed_NumFloats(&c);
        uint64_t ids[1000];
        float *g = calloc(1000 * 16, sizeof(float));
        for (uint64_t b = 0; b < 100; b++) {
            for (uint64_t i = 0; i < 1000; i++) ids[i] = (b * 1000 + i) * 0x9e3779b97f4a7c15ULL;
            assert_int_equal(PSEmbed_Push(t, (const unsigned char *)ids, 1000, (const unsigned char *)g,
                                          NULL),
                             PSE_OK);
        }
        free(g);
        size_t chunks = 0, others = 0;
        for (size_t i = 1; i < NLive; i++) {
            const size_t n = LiveN[i];
            uint64_t p = 1;
            while (p < n) p *= 2;
            if (n % rec == 0 && n / rec >= 16 && p - n < rec)
                chunks++;
            else if (!is_size_class(n))
                others++; /* the first chunk (16 * 2^k records) may be one */
        }
        assert_true(chunks > 10);
        assert_true(others <= 1);
        const double per_row = (double)PSEmbed_MemUsage(t) / (double)PSEmbed_Rows(t);
        printf("%s: record %zu, %.2f bytes per row\n", PSEmbed_OptimName(o), rec, per_row);
        assert_true(per_row >= (double)rec + 4 && per_row <= (double)rec + 8.5);
        PSEmbed_Free(t);
        assert_int_equal(NLive, 0);
        PSEmbed_SetAllocator(malloc, free);
    }
}

/* A rebuild from the table's own rows and state (what RDB save then load
 * does); PSE_OK and the rebuilt table in *out, or the error. */
static int rebuild(const PSEmbed *t, PSEmbed **out) {
    PSEmbedState st;
    PSEmbed_GetState(t, &st);
    size_t flen;
    const uint8_t *f = PSEmbed_Filter(t, &flen);
    const char *err = NULL;
    int rc;
    PSEmbed *b = PSEmbed_LoadBegin(PSEmbed_Config(t), &st, f, flen, &err, &rc);
    for (uint64_t i = 0; b && rc == PSE_OK && i < PSEmbed_Rows(t); i++) {
        PSEmbedRow row;
        PSEmbed_RowAt(t, i, &row);
        rc = PSEmbed_LoadRow(b, &row, &err);
    }
    if (b && rc == PSE_OK) rc = PSEmbed_LoadEnd(b, &err);
    for (uint64_t i = 0; b && rc == PSE_OK && i < PSEmbed_TombLen(t); i++) {
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

/* Finite gradients can overflow values and state to +-Inf (and Inf - Inf
 * to NaN): whatever a push produced saves and loads back bit-identical
 * (the loader refused non-finite values, so such a table's RDB could not be
 * loaded). A NaN sum of squares is still refused: no push makes one. */
static void test_overflowed_rows_save_and_load_bit_identical(void **state) {
    (void)state;
    for (int o = 0; o < PSE_OPT_COUNT; o++) {
        PSEmbedConfig c;
        PSEmbed_DefaultConfig(&c, 2);
        c.optim = o;
        c.lr = 1e30;
        c.alpha = 1e-30;
        PSEmbed *t = PSEmbed_New(&c, NULL);
        assert_non_null(t);
        const uint64_t ids[2] = {1, 2};
        for (int k = 0; k < 6; k++) {
            const float v = (k % 2 ? -3e38f : 3e38f) * (k < 3 ? 1.0f : 0.5f);
            const float g[4] = {v, -v, v, 1.0f};
            assert_int_equal(PSEmbed_Push(t, (const unsigned char *)ids, 2, (const unsigned char *)g,
                                          NULL),
                             PSE_OK);
        }
        int nonfinite = 0;
        for (uint64_t i = 0; i < PSEmbed_Rows(t); i++) {
            PSEmbedRow row;
            PSEmbed_RowAt(t, i, &row);
            for (uint32_t j = 0; j < PSEmbed_NumFloats(&c); j++) nonfinite += !isfinite(row.data[j]);
            nonfinite += !isfinite(row.rowacc);
        }
        assert_true(nonfinite > 0);
        PSEmbed *b = NULL;
        assert_int_equal(rebuild(t, &b), PSE_OK);
        assert_int_equal(PSEmbed_Digest64(b), PSEmbed_Digest64(t));
        PSEmbed_Free(b);
        PSEmbed_Free(t);
    }
    /* A NaN accumulator is refused. */
    PSEmbedConfig c;
    PSEmbed_DefaultConfig(&c, 1);
    c.optim = PSE_OPT_ROWADAGRAD;
    PSEmbedState st = {.version = 1, .nrows = 1};
    const char *err;
    int rc;
    PSEmbed *t = PSEmbed_LoadBegin(&c, &st, NULL, 0, &err, &rc);
    const float w = 0.5f;
    PSEmbedRow row = {.id = 1, .last_version = 1, .pushes = 1, .rowacc = NAN, .data = &w};
    assert_int_equal(PSEmbed_LoadRow(t, &row, &err), PSE_ERR_CORRUPT);
    row.rowacc = INFINITY;
    assert_int_equal(PSEmbed_LoadRow(t, &row, &err), PSE_OK);
    PSEmbed_Free(t);
}

/* TTL and CAPACITY evictions after the sweep can leave fewer rows than the
 * sweep position: it is kept at nrows, so the table, its save and a
 * replica's load of it have one state and one digest (a position past the
 * rows was saved as nrows and digested as it was: fuzz_embed found it). */
static void test_sweep_position_stays_within_the_rows(void **state) {
    (void)state;
    PSEmbedConfig c;
    PSEmbed_DefaultConfig(&c, 2);
    c.ttl = 8;
    c.capacity = 13;
    PSEmbed *t = PSEmbed_New(&c, NULL);
    uint64_t s = 99;
    int beyond_before = 0;
    for (int k = 0; k < 400; k++) {
        uint64_t ids[6];
        float g[12] = {0};
        const size_t n = 1 + k % 6;
        for (size_t i = 0; i < n; i++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            ids[i] = (s >> 33) % 40;
        }
        assert_int_equal(PSEmbed_Push(t, (const unsigned char *)ids, n, (const unsigned char *)g, NULL),
                         PSE_OK);
        PSEmbedState st;
        PSEmbed_GetState(t, &st);
        assert_true(st.sweep_pos <= st.nrows);
        beyond_before += st.sweep_pos == st.nrows;
        PSEmbed *b = NULL;
        assert_int_equal(rebuild(t, &b), PSE_OK);
        assert_int_equal(PSEmbed_Digest64(b), PSEmbed_Digest64(t));
        PSEmbed_Free(b);
    }
    assert_true(beyond_before > 0); /* the case did occur */
    PSEmbed_Free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_row_versions_survive_the_32_bit_wrap_and_ages_saturate),
        cmocka_unit_test(test_chunks_and_index_take_whole_allocator_size_classes),
        cmocka_unit_test(test_overflowed_rows_save_and_load_bit_identical),
        cmocka_unit_test(test_sweep_position_stays_within_the_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
