/* test_embed_layout.c -- cmocka tests of the embedding table's memory
 * layout (module/embed_int.h): 32-bit last push versions that stay exact
 * across the 2^32 wrap of the table version, ages that saturate at
 * PSE_MAX_AGE (in a pass every 2^30 versions and when loading an older
 * row), and allocations that the allocator does not round up (chunks of a
 * power of two bytes, index sizes of 4..7 times a power of two). */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_row_versions_survive_the_32_bit_wrap_and_ages_saturate),
        cmocka_unit_test(test_chunks_and_index_take_whole_allocator_size_classes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
