/* test_embed_io.c -- cmocka tests of the embedding table's export and
 * serialization (module/core/embed_io.c): the export cursor across inserts
 * and evictions, the salt keying the index but not the values, the
 * serialization round trip and the rejection of bad rebuilds, deep copy. */

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
#include "embed_helpers.h"

/* ------------------------------------------------------------------------
 * Export scan
 * ---------------------------------------------------------------------- */

typedef struct Seen {
    uint8_t *count; /* by id */
    uint64_t n;
} Seen;
static void on_row(void *ud, const PSEmbedRow *row) {
    Seen *s = ud;
    if (row->id < 100000) s->count[row->id]++;
    s->n++;
}

static void test_export_scan_reports_rows_present_throughout_exactly_once(void **state) {
    (void)state;
    PSEmbedConfig c = config(PSE_OPT_SGD, 2);
    PSEmbed *t = PSEmbed_New(&c, NULL);
    uint64_t ids[1000];
    for (uint64_t i = 0; i < 1000; i++) ids[i] = i;
    for (int b = 0; b < 5; b++) {
        for (uint64_t i = 0; i < 1000; i++) ids[i] = (uint64_t)b * 1000 + i;
        assert_int_equal(push_ids(t, ids, 1000, 0.1f, NULL), PSE_OK); /* versions 1..5 */
    }
    Seen s = {calloc(100000, 1), 0};
    uint64_t cursor = 0, next_new = 50000;
    int calls = 0;
    do {
        cursor = PSEmbed_Scan(t, cursor, 37, 0, on_row, &s);
        calls++;
        /* Meanwhile: new rows (the index grows several times) and, every
         * fifth call, the eviction of the rows inserted by earlier calls
         * (the original rows are pushed again first, so they stay). */
        uint64_t fresh[200];
        for (int i = 0; i < 200; i++) fresh[i] = next_new++;
        assert_int_equal(push_ids(t, fresh, 200, 0.1f, NULL), PSE_OK);
        if (calls % 5 == 0) {
            for (int b = 0; b < 5; b++) {
                for (uint64_t i = 0; i < 1000; i++) ids[i] = (uint64_t)b * 1000 + i;
                assert_int_equal(push_ids(t, ids, 1000, 0.1f, NULL), PSE_OK);
            }
            assert_true(PSEmbed_EvictAge(t, 6) > 0);
        }
    } while (cursor != 0 && calls < 100000);
    assert_index_consistent(t);
    for (uint64_t id = 0; id < 5000; id++) {
        if (s.count[id] != 1) fail_msg("row %llu reported %d times", (unsigned long long)id, s.count[id]);
    }
    /* 'since' selects rows changed after a version. */
    memset(s.count, 0, 100000);
    s.n = 0;
    PSEmbed *u = PSEmbed_New(&c, NULL);
    for (int b = 0; b < 5; b++) {
        for (uint64_t i = 0; i < 1000; i++) ids[i] = (uint64_t)b * 1000 + i;
        assert_int_equal(push_ids(u, ids, 1000, 0.1f, NULL), PSE_OK);
    }
    cursor = 0;
    do cursor = PSEmbed_Scan(u, cursor, 1000, 3, on_row, &s);
    while (cursor);
    assert_int_equal(s.n, 2000);
    for (uint64_t id = 0; id < 5000; id++) assert_int_equal(s.count[id], id >= 3000);
    free(s.count);
    PSEmbed_Free(t);
    PSEmbed_Free(u);
}

/* ------------------------------------------------------------------------
 * Serialization, copy
 * ---------------------------------------------------------------------- */


static void more_rows(PSEmbedState *st) { st->nrows++; }
static void version_behind_rows(PSEmbedState *st) { st->version = st->version / 2; }

/* Records the first id a scan reports. */
static void first_row(void *ud, const PSEmbedRow *row) {
    uint64_t *first = ud;
    if (*first == UINT64_MAX) *first = row->id;
}

/* The salt keys the index (scan order, digest) and nothing else: tables of
 * two salts fed the same pushes pull the same bits; a full scan of the
 * salted one reports every row once; PS.CONFIG cannot change the salt. */
static void test_salt_keys_the_index_but_not_the_values(void **state) {
    (void)state;
    PSEmbedConfig c0 = config(PSE_OPT_ADAGRAD, 3), c1 = c0;
    c1.salt = 0x0123456789abcdefULL;
    PSEmbed *a = PSEmbed_New(&c0, NULL), *b = PSEmbed_New(&c1, NULL);
    uint64_t ids[2000];
    for (int r = 0; r < 3; r++) {
        for (uint64_t i = 0; i < 2000; i++) ids[i] = i * (uint64_t)(r + 1);
        assert_int_equal(push_ids(a, ids, 2000, 0.25f, NULL), PSE_OK);
        assert_int_equal(push_ids(b, ids, 2000, 0.25f, NULL), PSE_OK);
    }
    assert_int_equal(PSEmbed_EvictAge(a, 2), PSEmbed_EvictAge(b, 2));
    assert_index_consistent(b);
    for (uint64_t i = 0; i < 2000; i++) ids[i] = i * 3 + (i & 1);
    float *pa = malloc(2000 * 3 * sizeof(float)), *pb = malloc(2000 * 3 * sizeof(float));
    PSEmbed_Pull(a, (const unsigned char *)ids, 2000, pa);
    PSEmbed_Pull(b, (const unsigned char *)ids, 2000, pb);
    assert_memory_equal(pa, pb, 2000 * 3 * sizeof(float));
    assert_int_not_equal(PSEmbed_Digest64(a), PSEmbed_Digest64(b));
    uint64_t fa = UINT64_MAX, fb = UINT64_MAX;
    PSEmbed_Scan(a, 0, 64, 0, first_row, &fa);
    PSEmbed_Scan(b, 0, 64, 0, first_row, &fb);
    assert_int_not_equal(fa, fb);
    Seen s = {calloc(100000, 1), 0};
    uint64_t cursor = 0;
    do cursor = PSEmbed_Scan(b, cursor, 37, 0, on_row, &s);
    while (cursor != 0);
    assert_int_equal(s.n, PSEmbed_Rows(b));
    for (uint64_t id = 0; id < 100000; id++) assert_true(s.count[id] <= 1);
    const char *err = NULL;
    PSEmbedConfig bad = c1;
    bad.salt++;
    assert_int_equal(PSEmbed_Reconfigure(b, &bad, &err), PSE_ERR_ARG);
    free(s.count);
    free(pa);
    free(pb);
    PSEmbed_Free(a);
    PSEmbed_Free(b);
}

static void test_rebuild_round_trips_and_rejects_inconsistent_rows(void **state) {
    (void)state;
    PSEmbedConfig c = busy_config();
    c.optim = PSE_OPT_FTRL;
    c.init = PSE_INIT_ZEROS;
    c.l1 = 0.01;
    PSEmbed *t = PSEmbed_New(&c, NULL);
    feed(t, 3, 200);
    assert_true(PSEmbed_Rows(t) > 10);
    PSEmbed *b;
    assert_int_equal(rebuild(t, -1, NULL, NULL, &b), PSE_OK);
    assert_int_equal(PSEmbed_Digest64(b), PSEmbed_Digest64(t));
    /* The rebuilt table evolves like the original. */
    feed(t, 4, 30);
    feed(b, 4, 30);
    assert_int_equal(PSEmbed_Digest64(b), PSEmbed_Digest64(t));
    PSEmbed_Free(b);
    PSEmbed *cp = PSEmbed_Copy(t);
    assert_int_equal(PSEmbed_Digest64(cp), PSEmbed_Digest64(t));
    feed(cp, 5, 1); /* deep: the original does not change */
    assert_int_not_equal(PSEmbed_Digest64(cp), PSEmbed_Digest64(t));
    PSEmbed_Free(cp);

    PSEmbedRow r0, r1, bad;
    PSEmbed_RowAt(t, 0, &r0);
    PSEmbed_RowAt(t, 1, &r1);
    const uint32_t nf = PSEmbed_NumFloats(&c);
    float data[64];
    bad = r1;
    bad.id = r0.id;
    assert_int_equal(rebuild(t, 1, &bad, NULL, &b), PSE_ERR_CORRUPT); /* duplicate id */
    bad = r1;
    bad.last_version = PSEmbed_Version(t) + 1;
    assert_int_equal(rebuild(t, 1, &bad, NULL, &b), PSE_ERR_CORRUPT);
    bad = r1;
    bad.pushes = (uint32_t)r1.last_version + 1; /* more pushes than versions (0 is a row a
                                                   ring delta created: test_ring_table.c) */
    assert_int_equal(rebuild(t, 1, &bad, NULL, &b), PSE_ERR_CORRUPT);
    bad = r1;
    bad.rowacc = 1.0f; /* only ROWADAGRAD keeps one */
    assert_int_equal(rebuild(t, 1, &bad, NULL, &b), PSE_ERR_CORRUPT);
    memcpy(data, r1.data, nf * sizeof(float));
    bad = r1;
    bad.data = data;
    data[0] = NAN;
    assert_int_equal(rebuild(t, 1, &bad, NULL, &b), PSE_ERR_CORRUPT);
    memcpy(data, r1.data, nf * sizeof(float));
    data[0] = data[0] + 1.0f; /* FTRL: w is not w(z, n) */
    assert_int_equal(rebuild(t, 1, &bad, NULL, &b), PSE_ERR_CORRUPT);
    memcpy(data, r1.data, nf * sizeof(float));
    data[3 * 4 - 1] = -1.0f; /* negative n */
    assert_int_equal(rebuild(t, 1, &bad, NULL, &b), PSE_ERR_CORRUPT);
    assert_int_equal(rebuild(t, -1, NULL, more_rows, &b), PSE_ERR_CORRUPT);
    assert_int_equal(rebuild(t, -1, NULL, version_behind_rows, &b), PSE_ERR_CORRUPT);
    /* Wrong filter size, rows over CAPACITY. */
    PSEmbedState st;
    PSEmbed_GetState(t, &st);
    const char *err;
    int rc;
    size_t flen;
    const uint8_t *f = PSEmbed_Filter(t, &flen);
    assert_null(PSEmbed_LoadBegin(&c, &st, f, flen - 1, &err, &rc));
    assert_int_equal(rc, PSE_ERR_CORRUPT);
    PSEmbedConfig small = c;
    small.capacity = st.nrows - 1;
    assert_null(PSEmbed_LoadBegin(&small, &st, f, flen, &err, &rc));
    PSEmbed_Free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_export_scan_reports_rows_present_throughout_exactly_once),
        cmocka_unit_test(test_salt_keys_the_index_but_not_the_values),
        cmocka_unit_test(test_rebuild_round_trips_and_rejects_inconsistent_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
