/* test_fpguard.c -- cmocka tests of module/core/fpguard.[ch]: the OnLoad checks
 * that the FPU mode is the IEEE default and that the kernels do not fuse
 * multiply-adds. Each test changes the mode, checks, and restores it. */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fenv.h>
#include <string.h>

#include "fpguard.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

static void test_fpu_check_accepts_the_default_mode(void **state) {
    (void)state;
    assert_null(ps_fpu_mode_check());
}

static void test_fp_contract_check_passes_in_this_build(void **state) {
    (void)state;
    assert_null(ps_fp_contract_check());
}

static void test_fpu_check_refuses_a_directed_rounding_mode(void **state) {
    (void)state;
    assert_int_equal(fesetround(FE_UPWARD), 0);
    const char *why = ps_fpu_mode_check();
    fesetround(FE_TONEAREST);
    assert_non_null(why);
    assert_null(ps_fpu_mode_check());
}

#if defined(__x86_64__) || defined(__i386__)
/* Sets 'bits' in MXCSR, runs the check, restores MXCSR; returns the phrase. */
static const char *check_with_mxcsr(unsigned bits) {
    const unsigned saved = _mm_getcsr();
    _mm_setcsr(saved | bits);
    const char *why = ps_fpu_mode_check();
    _mm_setcsr(saved);
    return why;
}

/* The check refuses MXCSR with 'bits' set, naming 'name', and the mode is
 * back to the default afterwards. */
static void assert_mxcsr_refused(unsigned bits, const char *name) {
    /* valgrind does not emulate FTZ/DAZ: its MXCSR drops the bits, so there
     * is nothing for the check to see (and no mode that could hurt). */
    const unsigned saved = _mm_getcsr();
    _mm_setcsr(saved | bits);
    const int kept = (_mm_getcsr() & bits) == bits;
    _mm_setcsr(saved);
    if (!kept) {
        print_message("MXCSR does not keep 0x%x here (valgrind?): skipped\n", bits);
        skip();
    }
    const char *why = check_with_mxcsr(bits);
    assert_non_null(why);
    assert_non_null(strstr(why, name));
    assert_null(ps_fpu_mode_check());
}

static void test_fpu_check_refuses_flush_to_zero(void **state) {
    (void)state;
    assert_mxcsr_refused(0x8000u, "FTZ");
}

static void test_fpu_check_refuses_denormals_are_zero(void **state) {
    (void)state;
    assert_mxcsr_refused(0x0040u, "DAZ");
}

static void test_fpu_check_refuses_mxcsr_round_toward_zero(void **state) {
    (void)state;
    assert_non_null(check_with_mxcsr(0x6000u));
}
#endif

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fpu_check_accepts_the_default_mode),
        cmocka_unit_test(test_fp_contract_check_passes_in_this_build),
        cmocka_unit_test(test_fpu_check_refuses_a_directed_rounding_mode),
#if defined(__x86_64__) || defined(__i386__)
        cmocka_unit_test(test_fpu_check_refuses_flush_to_zero),
        cmocka_unit_test(test_fpu_check_refuses_denormals_are_zero),
        cmocka_unit_test(test_fpu_check_refuses_mxcsr_round_toward_zero),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
