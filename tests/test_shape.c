/* test_shape.c -- cmocka tests of common/shape.[ch]: the one shape validator
 * used by PS.CREATE and by RDB/RESTORE loading. */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "shape.h"

static void test_shape_accepts_a_matrix_and_reports_its_element_count(void **state) {
    (void)state;
    uint64_t dims[2] = {784, 128};
    uint64_t nelem = 0;
    const char *err = NULL;
    assert_int_equal(ps_shape_check(2, dims, 0, &nelem, &err), 0);
    assert_int_equal(nelem, 784 * 128);
    assert_null(err); /* untouched on success */
}

static void test_shape_accepts_one_to_eight_dims(void **state) {
    (void)state;
    uint64_t dims[PS_MAX_DIMS] = {2, 3, 1, 4, 1, 5, 1, 2};
    uint64_t want = 1;
    for (uint32_t nd = 1; nd <= PS_MAX_DIMS; nd++) {
        uint64_t nelem = 0;
        want *= dims[nd - 1];
        assert_int_equal(ps_shape_check(nd, dims, 0, &nelem, NULL), 0);
        assert_int_equal(nelem, want);
    }
}

static void test_shape_rejects_ndim_0_and_9(void **state) {
    (void)state;
    uint64_t dims[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    uint64_t nelem = 77;
    const char *err = NULL;
    assert_int_equal(ps_shape_check(0, dims, 0, &nelem, &err), -1);
    assert_string_equal(err, "ndim must be 1..8");
    err = NULL;
    assert_int_equal(ps_shape_check(9, dims, 0, &nelem, &err), -1);
    assert_string_equal(err, "ndim must be 1..8");
    assert_int_equal(ps_shape_check(UINT32_MAX, dims, 0, &nelem, &err), -1);
    assert_int_equal(nelem, 77); /* untouched on failure */
}

static void test_shape_rejects_a_zero_dimension_and_names_it(void **state) {
    (void)state;
    uint64_t dims[3] = {4, 0, 5};
    uint64_t nelem = 77;
    const char *err = NULL;
    assert_int_equal(ps_shape_check(3, dims, 0, &nelem, &err), -1);
    assert_string_equal(err, "dimension 2 is 0");
    uint64_t first[1] = {0};
    assert_int_equal(ps_shape_check(1, first, 0, &nelem, &err), -1);
    assert_string_equal(err, "dimension 1 is 0");
    /* A zero is reported even when the other dims would overflow. */
    uint64_t mixed[3] = {UINT64_MAX, UINT64_MAX, 0};
    assert_int_equal(ps_shape_check(3, mixed, 0, &nelem, &err), -1);
    assert_string_equal(err, "dimension 3 is 0");
    assert_int_equal(nelem, 77);
}

static void test_shape_rejects_element_count_overflow(void **state) {
    (void)state;
    uint64_t dims[2] = {1ull << 32, 1ull << 32}; /* exactly 2^64 */
    uint64_t nelem = 77;
    const char *err = NULL;
    assert_int_equal(ps_shape_check(2, dims, 0, &nelem, &err), -1);
    assert_string_equal(err, "element count overflows");
    uint64_t many[8] = {256, 256, 256, 256, 256, 256, 256, 256}; /* 2^64 again */
    assert_int_equal(ps_shape_check(8, many, 0, &nelem, &err), -1);
    assert_string_equal(err, "element count overflows");
    uint64_t huge[2] = {UINT64_MAX, 2};
    assert_int_equal(ps_shape_check(2, huge, 0, &nelem, &err), -1);
    assert_string_equal(err, "element count overflows");
    assert_int_equal(nelem, 77);
}

static void test_shape_rejects_byte_size_overflow(void **state) {
    (void)state;
    /* 2^62 elements fit in uint64, 2^64 bytes do not. */
    uint64_t dims[2] = {1ull << 31, 1ull << 31};
    uint64_t nelem = 77;
    const char *err = NULL;
    assert_int_equal(ps_shape_check(2, dims, 0, &nelem, &err), -1);
    assert_string_equal(err, "byte size overflows");
    uint64_t one[1] = {UINT64_MAX};
    assert_int_equal(ps_shape_check(1, one, 0, &nelem, &err), -1);
    assert_string_equal(err, "byte size overflows");
    /* One element less than the overflow point still fits without a limit. */
    uint64_t fits[1] = {(1ull << 62) - 1};
    assert_int_equal(ps_shape_check(1, fits, 0, &nelem, &err), 0);
    assert_int_equal(nelem, (1ull << 62) - 1);
}

static void test_shape_enforces_the_byte_limit(void **state) {
    (void)state;
    uint64_t at[2] = {10, 10};   /* 400 bytes */
    uint64_t over[2] = {101, 1}; /* 404 bytes */
    uint64_t nelem = 0;
    const char *err = NULL;
    assert_int_equal(ps_shape_check(2, at, 400, &nelem, &err), 0);
    assert_int_equal(nelem, 100);
    assert_int_equal(ps_shape_check(2, over, 400, &nelem, &err), -1);
    assert_string_equal(err, "tensor of 404 bytes exceeds the limit of 400 bytes");
    assert_int_equal(nelem, 100);
    /* 0 means no limit. */
    assert_int_equal(ps_shape_check(2, over, 0, &nelem, &err), 0);
    assert_int_equal(nelem, 101);
}

static void test_shape_accepts_null_err_and_null_nelem(void **state) {
    (void)state;
    uint64_t zero[1] = {0};
    uint64_t ok[1] = {3};
    assert_int_equal(ps_shape_check(1, zero, 0, NULL, NULL), -1);
    assert_int_equal(ps_shape_check(1, ok, 0, NULL, NULL), 0);
    assert_int_equal(ps_shape_check(1, NULL, 0, NULL, NULL), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shape_accepts_a_matrix_and_reports_its_element_count),
        cmocka_unit_test(test_shape_accepts_one_to_eight_dims),
        cmocka_unit_test(test_shape_rejects_ndim_0_and_9),
        cmocka_unit_test(test_shape_rejects_a_zero_dimension_and_names_it),
        cmocka_unit_test(test_shape_rejects_element_count_overflow),
        cmocka_unit_test(test_shape_rejects_byte_size_overflow),
        cmocka_unit_test(test_shape_enforces_the_byte_limit),
        cmocka_unit_test(test_shape_accepts_null_err_and_null_nelem),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
