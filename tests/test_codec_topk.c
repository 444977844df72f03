/* test_codec_topk.c -- cmocka tests of common/codec.[ch]: TOPK selection,
 * its blob checks and scatter-add, and ROWS lists. */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "codec_helpers.h"

/* --------------------------------------------------------------- TOPK */

/* Read entry j of a TOPK blob of k entries. */
static uint32_t topk_idx(const unsigned char *blob, size_t j) {
    uint32_t v;
    memcpy(&v, blob + 4 + 4 * j, 4);
    return v;
}

static float topk_val(const unsigned char *blob, uint32_t k, size_t j) {
    float v;
    memcpy(&v, blob + 4 + 4 * (size_t)k + 4 * j, 4);
    return v;
}

static uint32_t topk_k(const unsigned char *blob) {
    uint32_t k;
    memcpy(&k, blob, 4);
    return k;
}

static void test_topk_encoded_size_is_4_plus_8k(void **state) {
    (void)state;
    assert_int_equal(ps_topk_encoded_size(0), 4);
    assert_int_equal(ps_topk_encoded_size(3), 28);
    assert_true(ps_topk_encoded_size(UINT32_MAX) == 4 + 8 * (size_t)UINT32_MAX);
}

static void test_topk_picks_largest_magnitudes_in_index_order(void **state) {
    (void)state;
    float src[7] = {0.1f, -5.0f, 3.0f, 0.0f, -3.0f, 7.0f, 2.0f};
    uint32_t scratch[7];
    unsigned char blob[4 + 8 * 3];
    assert_int_equal(ps_topk_encode(src, 7, 3, blob, scratch), sizeof blob);
    assert_int_equal(topk_k(blob), 3);
    /* |-5|, |7| and the first of the tied |3| (index 2 beats index 4). */
    assert_int_equal(topk_idx(blob, 0), 1);
    assert_int_equal(topk_idx(blob, 1), 2);
    assert_int_equal(topk_idx(blob, 2), 5);
    assert_true(topk_val(blob, 3, 0) == -5.0f);
    assert_true(topk_val(blob, 3, 1) == 3.0f);
    assert_true(topk_val(blob, 3, 2) == 7.0f);
}

static void test_topk_ties_go_to_the_lower_index(void **state) {
    (void)state;
    float src[6] = {-0.0f, 0.0f, 0.0f, -0.0f, 0.0f, 0.0f};
    uint32_t scratch[6];
    unsigned char blob[4 + 8 * 4];
    ps_topk_encode(src, 6, 4, blob, scratch);
    for (uint32_t j = 0; j < 4; j++) assert_int_equal(topk_idx(blob, j), j);
    assert_int_equal(bits_of(topk_val(blob, 4, 0)), 0x80000000u); /* value kept verbatim */

    float mixed[5] = {2.0f, -2.0f, 1.0f, 2.0f, -2.0f};
    ps_topk_encode(mixed, 5, 2, blob, scratch);
    assert_int_equal(topk_idx(blob, 0), 0);
    assert_int_equal(topk_idx(blob, 1), 1);
}

static void test_topk_clamps_k_to_n_and_handles_k_zero(void **state) {
    (void)state;
    float src[4] = {1.0f, -4.0f, 2.0f, 0.5f};
    uint32_t scratch[4];
    unsigned char blob[4 + 8 * 4];
    assert_int_equal(ps_topk_encode(src, 4, 100, blob, scratch), 4 + 8 * 4);
    assert_int_equal(topk_k(blob), 4);
    for (uint32_t j = 0; j < 4; j++) {
        assert_int_equal(topk_idx(blob, j), j);
        assert_true(topk_val(blob, 4, j) == src[j]);
    }
    assert_int_equal(ps_topk_encode(src, 4, 0, blob, scratch), 4);
    assert_int_equal(topk_k(blob), 0);
    assert_int_equal(ps_topk_encode(src, 0, 5, blob, scratch), 4);
    assert_int_equal(topk_k(blob), 0);
}

static void test_topk_counts_nan_and_inf_as_largest(void **state) {
    (void)state;
    float src[5] = {1e30f, NAN, 5.0f, -INFINITY, 1e-3f};
    uint32_t scratch[5];
    unsigned char blob[4 + 8 * 2];
    ps_topk_encode(src, 5, 2, blob, scratch);
    assert_int_equal(topk_idx(blob, 0), 1);
    assert_int_equal(topk_idx(blob, 1), 3);
}

/* Reference ranking for qsort: larger magnitude first, then lower index. */
static const float *ref_src;

static int ref_cmp(const void *a, const void *b) {
    uint32_t ia = *(const uint32_t *)a, ib = *(const uint32_t *)b;
    float ma = fabsf(ref_src[ia]), mb = fabsf(ref_src[ib]);
    if (ma != mb) return ma > mb ? -1 : 1;
    return ia < ib ? -1 : (ia > ib);
}

static int u32_cmp(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : (x > y);
}

static void test_topk_matches_a_full_sort_on_random_inputs(void **state) {
    (void)state;
    enum { MAXN = 3000 };
    static float src[MAXN];
    static uint32_t scratch[MAXN], order[MAXN];
    static unsigned char blob[4 + 8 * MAXN + 1];
    for (int round = 0; round < 200; round++) {
        size_t n = 1 + rng_next() % MAXN;
        uint32_t k = (uint32_t)(rng_next() % (n + 2));
        int style = round % 4;
        for (size_t i = 0; i < n; i++) {
            if (style == 0) src[i] = rng_wide();
            else if (style == 1) src[i] = (float)((int)(rng_next() % 7) - 3); /* many ties */
            else if (style == 2) src[i] = 1.0f + (float)(rng_next() % 4) * 0x1p-23f; /* differ in the low byte */
            else src[i] = ldexpf(1.0f, (int)(rng_next() % 5)) * ((rng_next() & 1) ? -1.0f : 1.0f);
        }
        uint32_t kk = k > n ? (uint32_t)n : k;
        unsigned char *out = blob + (round & 1); /* aligned and unaligned */
        assert_int_equal(ps_topk_encode(src, n, k, out, scratch), 4 + 8 * (size_t)kk);
        assert_int_equal(topk_k(out), kk);

        for (size_t i = 0; i < n; i++) order[i] = (uint32_t)i;
        ref_src = src;
        qsort(order, n, sizeof order[0], ref_cmp);
        qsort(order, kk, sizeof order[0], u32_cmp);
        for (uint32_t j = 0; j < kk; j++) {
            assert_int_equal(topk_idx(out, j), order[j]);
            assert_int_equal(bits_of(topk_val(out, kk, j)), bits_of(src[order[j]]));
        }
    }
}

/* A large input: every unselected magnitude is no larger than every selected
 * one, and indices strictly increase. */
static void test_topk_selects_correctly_on_a_million_floats(void **state) {
    (void)state;
    size_t n = 1u << 20;
    uint32_t k = 10007;
    float *src = malloc(n * sizeof *src);
    uint32_t *scratch = malloc(n * sizeof *scratch);
    unsigned char *blob = malloc(ps_topk_encoded_size(k));
    char *chosen = calloc(n, 1);
    assert_non_null(src);
    assert_non_null(scratch);
    assert_non_null(blob);
    assert_non_null(chosen);
    for (size_t i = 0; i < n; i++) src[i] = rng_unit() * 1e-3f;
    ps_topk_encode(src, n, k, blob, scratch);
    float min_sel = INFINITY;
    for (uint32_t j = 0; j < k; j++) {
        uint32_t idx = topk_idx(blob, j);
        if (j) assert_true(idx > topk_idx(blob, j - 1));
        chosen[idx] = 1;
        min_sel = fminf(min_sel, fabsf(topk_val(blob, k, j)));
    }
    for (size_t i = 0; i < n; i++)
        if (!chosen[i]) assert_true(fabsf(src[i]) <= min_sel);
    free(src);
    free(scratch);
    free(blob);
    free(chosen);
}

static void test_topk_check_accepts_valid_blobs(void **state) {
    (void)state;
    float src[5] = {1, -2, 3, -4, 5};
    uint32_t scratch[5];
    unsigned char raw[1 + 4 + 8 * 3];
    unsigned char *blob = raw + 1; /* unaligned */
    size_t len = ps_topk_encode(src, 5, 3, blob, scratch);
    uint32_t k = 0;
    assert_int_equal(ps_topk_check(blob, len, 5, &k), 0);
    assert_int_equal(k, 3);
    unsigned char empty[4] = {0, 0, 0, 0};
    assert_int_equal(ps_topk_check(empty, 4, 5, &k), 0);
    assert_int_equal(k, 0);
}

static void test_topk_check_rejects_bad_lengths_and_indices(void **state) {
    (void)state;
    /* k = 2, indices {1, 4}, values {1, 2}: valid for n = 5. */
    unsigned char blob[20];
    uint32_t words[5] = {2, 1, 4, 0, 0};
    float one = 1.0f, two = 2.0f;
    memcpy(blob, words, 20);
    memcpy(blob + 12, &one, 4);
    memcpy(blob + 16, &two, 4);
    uint32_t k = 77;
    assert_int_equal(ps_topk_check(blob, 20, 5, &k), 0);
    assert_int_equal(ps_topk_check(blob, 20, 4, &k), -1); /* index 4 == n */
    assert_int_equal(ps_topk_check(blob, 19, 5, &k), -1);
    assert_int_equal(ps_topk_check(blob, 21, 5, &k), -1);
    assert_int_equal(ps_topk_check(blob, 3, 5, &k), -1);
    assert_int_equal(ps_topk_check(blob, 0, 5, &k), -1);
    /* A huge declared k must not wrap the length arithmetic. */
    uint32_t huge = UINT32_MAX;
    memcpy(blob, &huge, 4);
    assert_int_equal(ps_topk_check(blob, 20, 5, &k), -1);
    /* 8k wraps a 32-bit size to 0 (4 + 8k == 4 mod 2^32); with n = SIZE_MAX
     * every index would pass, so only the length check can refuse it. */
    huge = 0x20000000u;
    memcpy(blob, &huge, 4);
    assert_int_equal(ps_topk_check(blob, 4, SIZE_MAX, &k), -1);
    assert_int_equal(k, 2); /* untouched by the failures */
}

static void test_topk_scatter_add_accumulates_repeated_indices(void **state) {
    (void)state;
    /* k = 3: indices {2, 0, 2}, values {1, 2, 3.5}. */
    unsigned char raw[1 + 28];
    unsigned char *blob = raw + 1;
    uint32_t hdr[4] = {3, 2, 0, 2};
    float vals[3] = {1.0f, 2.0f, 3.5f};
    memcpy(blob, hdr, 16);
    memcpy(blob + 16, vals, 12);
    uint32_t k;
    assert_int_equal(ps_topk_check(blob, 28, 3, &k), 0);
    float dense[3] = {10.0f, 10.0f, 10.0f};
    ps_topk_scatter_add(blob, k, dense);
    assert_true(dense[0] == 12.0f);
    assert_true(dense[1] == 10.0f);
    assert_true(dense[2] == 14.5f);
}

static void test_topk_encode_then_scatter_rebuilds_the_kept_entries(void **state) {
    (void)state;
    enum { N = 500 };
    float src[N], dense[N];
    uint32_t scratch[N];
    static unsigned char raw[1 + 4 + 8 * N];
    for (int i = 0; i < N; i++) src[i] = rng_wide();
    unsigned char *blob = raw + 1;
    size_t len = ps_topk_encode(src, N, 50, blob, scratch);
    uint32_t k;
    assert_int_equal(ps_topk_check(blob, len, N, &k), 0);
    memset(dense, 0, sizeof dense);
    ps_topk_scatter_add(blob, k, dense);
    int kept = 0;
    for (int i = 0; i < N; i++) {
        if (dense[i] != 0.0f) {
            assert_true(dense[i] == src[i]);
            kept++;
        }
    }
    assert_int_equal(kept, 50);
}

/* ---------------------------------------------------------------- ROWS */

static void test_rows_check_accepts_valid_lists_and_counts_them(void **state) {
    (void)state;
    uint32_t rows[4] = {0, 9, 3, 9}; /* repeats are fine */
    unsigned char raw[17];
    memcpy(raw + 1, rows, 16);
    size_t count = 0;
    assert_int_equal(ps_rows_check(raw + 1, 16, 10, &count), 0);
    assert_int_equal(count, 4);
    assert_int_equal(ps_rows_get(raw + 1, 0), 0);
    assert_int_equal(ps_rows_get(raw + 1, 1), 9);
    assert_int_equal(ps_rows_get(raw + 1, 2), 3);
    /* Indices up to 2^32-1 are fine for a big enough table. */
    uint32_t big = UINT32_MAX;
    assert_int_equal(ps_rows_check((unsigned char *)&big, 4, (uint64_t)UINT32_MAX + 1, &count), 0);
    assert_int_equal(ps_rows_check((unsigned char *)&big, 4, UINT32_MAX, &count), -1);
}

static void test_rows_check_rejects_empty_odd_length_and_out_of_range(void **state) {
    (void)state;
    uint32_t rows[3] = {0, 10, 2};
    size_t count = 123;
    assert_int_equal(ps_rows_check((unsigned char *)rows, 0, 10, &count), -1);
    assert_int_equal(ps_rows_check((unsigned char *)rows, 3, 10, &count), -1);
    assert_int_equal(ps_rows_check((unsigned char *)rows, 6, 10, &count), -1);
    assert_int_equal(ps_rows_check((unsigned char *)rows, 12, 10, &count), -1); /* 10 == nrows */
    assert_int_equal(ps_rows_check((unsigned char *)rows, 4, 0, &count), -1);
    assert_int_equal(count, 123);
    assert_int_equal(ps_rows_check((unsigned char *)rows, 12, 11, &count), 0);
    assert_int_equal(count, 3);
}

static void test_rows_get_reads_little_endian_at_any_address(void **state) {
    (void)state;
    unsigned char raw[9] = {0xEE, 0x01, 0x02, 0x03, 0x04, 0xFF, 0xFF, 0xFF, 0x7F};
    assert_int_equal(ps_rows_get(raw + 1, 0), 0x04030201u);
    assert_int_equal(ps_rows_get(raw + 1, 1), 0x7FFFFFFFu);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_topk_encoded_size_is_4_plus_8k),
        cmocka_unit_test(test_topk_picks_largest_magnitudes_in_index_order),
        cmocka_unit_test(test_topk_ties_go_to_the_lower_index),
        cmocka_unit_test(test_topk_clamps_k_to_n_and_handles_k_zero),
        cmocka_unit_test(test_topk_counts_nan_and_inf_as_largest),
        cmocka_unit_test(test_topk_matches_a_full_sort_on_random_inputs),
        cmocka_unit_test(test_topk_selects_correctly_on_a_million_floats),
        cmocka_unit_test(test_topk_check_accepts_valid_blobs),
        cmocka_unit_test(test_topk_check_rejects_bad_lengths_and_indices),
        cmocka_unit_test(test_topk_scatter_add_accumulates_repeated_indices),
        cmocka_unit_test(test_topk_encode_then_scatter_rebuilds_the_kept_entries),
        cmocka_unit_test(test_rows_check_accepts_valid_lists_and_counts_them),
        cmocka_unit_test(test_rows_check_rejects_empty_odd_length_and_out_of_range),
        cmocka_unit_test(test_rows_get_reads_little_endian_at_any_address),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
