/* test_header.c -- cmocka tests of module/core/header.[ch] and hparams.h: the
 * scalar header the RDB value and PS._RESTORE HEADER share, read in the
 * layout of its encoding version, and the tensor it builds through the one
 * constructor. */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "header.h"
#include "tensor.h"
#include "tensor_helpers.h"

static void test_header_layouts_of_every_encoding_version_so_far_are_todays(void **st) {
    (void)st;
    /* 19 scalars since PS_ENCVER_FIRST: an AOF written before the ENCVER
     * token (python_tests/golden/aof-v0) has exactly these. */
    for (int v = PS_ENCVER_FIRST; v <= PS_ENCVER_SNAP_SHARING; v++)
        assert_int_equal(PSHeader_Scalars(v), 19);
    /* PS_ENCVER_ACCUM adds acc_count, acc_seq, pend_count. */
    assert_int_equal(PSHeader_Scalars(PS_ENCVER_ACCUM), 22);
    assert_int_equal(PS_HEADER_SCALARS, 22);
    assert_int_equal(PS_HP_COUNT, 7);
}

static void test_header_round_trips_and_builds_the_tensor_it_describes(void **st) {
    (void)st;
    uint64_t dims[2] = {3, 4};
    PSTensor *t = mk(2, dims, PS_OPT_ADAM, 0.25);
    t->h.clipnorm = 2.5;
    push_random(t, 3);
    PSHeader hd, back;
    PSHeader_FromTensor(t, &hd);
    uint64_t enc[PS_HEADER_MAX_WORDS];
    size_t w = PSHeader_Encode(&hd, enc);
    assert_int_equal(w, 1 + 2 + PS_HEADER_SCALARS);
    assert_int_equal(PSHeader_Decode((const unsigned char *)enc, w * 8, PS_ENCVER_LATEST, &back), 0);
    assert_memory_equal(&hd, &back, sizeof(hd));
    /* Wrong length, unknown encoding versions. */
    PSHeader junk;
    assert_int_equal(PSHeader_Decode((const unsigned char *)enc, w * 8 - 8, PS_ENCVER_LATEST, &junk), -1);
    assert_int_equal(PSHeader_Decode((const unsigned char *)enc, w * 8, PS_ENCVER_LATEST + 1, &junk), -1);
    assert_int_equal(PSHeader_Decode((const unsigned char *)enc, w * 8, 0, &junk), -1);
    uint64_t n;
    assert_null(PSHeader_Check(&back, &n));
    assert_int_equal(n, 12);
    PSTensor *u = PSHeader_ToTensor(&back, n, 1);
    assert_non_null(u);
    assert_int_equal(u->version, 3);
    assert_int_equal(u->opt.step, 3);
    assert_true(u->opt.b1pow == t->opt.b1pow && u->h.clipnorm == 2.5 && u->h.lr == 0.25);
    assert_non_null(u->opt.s[1]);
    PSTensor_Free(u);
    PSTensor_Free(t);
}

static void test_header_init_gives_every_hyper_parameter_its_default(void **st) {
    (void)st;
    PSHeader hd;
    PSHeader_Init(&hd);
    PSTensorOpts o;
    PSTensor_DefaultOpts(&o, 0.01);
    assert_memory_equal(&hd.h, &o.h, sizeof(PSHyper));
    assert_null(ps_optim_check(&hd.h));
    hd.h.eps = 0;
    assert_string_equal(ps_optim_check(&hd.h),
                        "EPS must be a finite number > 0 (and >= 1.4e-45, the smallest float32)");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header_layouts_of_every_encoding_version_so_far_are_todays),
        cmocka_unit_test(test_header_round_trips_and_builds_the_tensor_it_describes),
        cmocka_unit_test(test_header_init_gives_every_hyper_parameter_its_default),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
