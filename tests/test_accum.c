/* test_accum.c -- cmocka tests of module/core/accum.[ch]: ACCUM tensors sum their
 * pushes without stepping, hand the sum over through a pending slot that a
 * take answers again until its seq is acknowledged, mirror the upstream
 * values and version, and save all of it through the header. */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <float.h>
#include <string.h>

#include "accum.h"
#include "header.h"
#include "tensor.h"
#include "tensor_helpers.h"

static PSTensor *mk_accum(uint32_t ndim, const uint64_t *dims) {
    return mk(ndim, dims, PS_OPT_ACCUM, 0.5);
}

/* sum[i] = a[i] + b[i] in float, the order the core adds in. */
static void add2(float *out, const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = 0.0f + a[i] * 1.0f + b[i] * 1.0f;
}

static void test_accum_push_sums_without_stepping_and_keeps_the_version(void **st) {
    (void)st;
    uint64_t d[1] = {10};
    PSTensor *t = mk_accum(1, d);
    t->version = 7; /* as mirrored from upstream */
    float before[10], g1[10], g2[10], want[10];
    memcpy(before, t->data->v, sizeof(before));
    fill(g1, 10, -1, 1);
    fill(g2, 10, -1, 1);
    PSPush p1 = dense(g1), p2 = dense(g2);
    PSPushResult r;
    assert_int_equal(PSTensor_Push(t, &p1, &r), PST_OK);
    assert_int_equal(r.version, 7);
    assert_int_equal(PSTensor_Push(t, &p2, &r), PST_OK);
    assert_int_equal(t->version, 7);
    assert_int_equal(t->acc.count, 2);
    assert_bits_equal(t->data->v, before, 10, "values untouched");
    add2(want, g1, g2, 10);
    assert_bits_equal(t->acc.sum->v, want, 10, "sum");
    assert_int_equal(t->stats.pushes, 2);
    PSTensor_Free(t);
}

static void test_take_is_idempotent_until_acked_and_then_starts_the_next_seq(void **st) {
    (void)st;
    uint64_t d[1] = {6};
    PSTensor *t = mk_accum(1, d);
    assert_int_equal(PSAccum_Take(t, 1, 0), PS_TAKE_SHORT); /* nothing summed */
    float g[6], h[6], first[6];
    fill(g, 6, -1, 1);
    fill(h, 6, -1, 1);
    PSPush p = dense(g), q = dense(h);
    PSPushResult r;
    assert_int_equal(PSTensor_Push(t, &p, &r), PST_OK);
    assert_int_equal(PSTensor_Push(t, &p, &r), PST_OK);
    assert_int_equal(PSAccum_Take(t, 1, 0), PS_TAKE_NEW);
    assert_int_equal(t->acc.seq, 1);
    assert_int_equal(t->acc.pend_count, 2);
    assert_int_equal(t->acc.count, 0);
    assert_null(t->acc.sum);
    memcpy(first, t->acc.pend->v, sizeof(first));
    /* A push after the take goes to the next sum, not into the slot. */
    assert_int_equal(PSTensor_Push(t, &q, &r), PST_OK);
    assert_int_equal(PSAccum_Take(t, 1, 0), PS_TAKE_AGAIN);
    assert_int_equal(t->acc.seq, 1);
    assert_int_equal(t->acc.pend_count, 2);
    assert_bits_equal(t->acc.pend->v, first, 6, "the same slot again");
    /* An ack of another seq (repeated after a crash) drops nothing. */
    assert_int_equal(PSAccum_Ack(t, 2), 0);
    assert_int_equal(PSAccum_Ack(t, 0), 0);
    assert_int_equal(PSAccum_Ack(t, 1), 1);
    assert_int_equal(PSAccum_Ack(t, 1), 0);
    assert_null(t->acc.pend);
    assert_int_equal(PSAccum_Take(t, 1, 0), PS_TAKE_NEW);
    assert_int_equal(t->acc.seq, 2);
    assert_int_equal(t->acc.pend_count, 1);
    assert_bits_equal(t->acc.pend->v, h, 6, "second take holds only the later push");
    assert_int_equal(t->stats.takes, 2);
    assert_int_equal(t->stats.take_acks, 1);
    PSTensor_Free(t);
}

static void test_take_waits_for_mincount_and_seqfloor_only_raises_the_seq(void **st) {
    (void)st;
    uint64_t d[1] = {3};
    PSTensor *t = mk_accum(1, d);
    push_random(t, 2);
    assert_int_equal(PSAccum_Take(t, 3, 0), PS_TAKE_SHORT);
    assert_int_equal(t->acc.count, 2);
    push_random(t, 1);
    assert_int_equal(PSAccum_Take(t, 3, 1000), PS_TAKE_NEW);
    assert_int_equal(t->acc.seq, 1000);
    assert_int_equal(PSAccum_Ack(t, 1000), 1);
    push_random(t, 1);
    assert_int_equal(PSAccum_Take(t, 1, 10), PS_TAKE_NEW); /* a lower floor: seq + 1 */
    assert_int_equal(t->acc.seq, 1001);
    PSTensor_Free(t);
}

static void test_accum_row_push_equals_its_dense_equivalent(void **st) {
    (void)st;
    uint64_t d[2] = {5, 3};
    PSTensor *a = mk_accum(2, d), *b = mk_accum(2, d);
    const uint32_t rows[] = {4, 1, 4};
    float g[9], dg[15] = {0};
    fill(g, 9, -1, 1);
    for (int r = 0; r < 3; r++)
        for (int k = 0; k < 3; k++) dg[rows[r] * 3 + k] = dg[rows[r] * 3 + k] + g[r * 3 + k];
    PSPush p = dense(g);
    p.rows = (const unsigned char *)rows;
    p.nrows = 3;
    PSPush q = dense(dg);
    PSPushResult r;
    assert_int_equal(PSTensor_Push(a, &p, &r), PST_OK);
    assert_int_equal(PSTensor_Push(b, &q, &r), PST_OK);
    assert_bits_equal(a->acc.sum->v, b->acc.sum->v, 15, "rows vs dense");
    PSTensor_Free(a);
    PSTensor_Free(b);
}

static void test_accum_refuses_a_push_that_overflows_the_sum_and_changes_nothing(void **st) {
    (void)st;
    uint64_t d[1] = {4};
    PSTensor *t = mk_accum(1, d);
    float big[4] = {FLT_MAX, 1, 1, 1}, copy[4];
    PSPush p = dense(big);
    p.id = "w";
    p.idlen = 1;
    p.seq = 1;
    PSPushResult r;
    assert_int_equal(PSTensor_Push(t, &p, &r), PST_OK);
    memcpy(copy, t->acc.sum->v, sizeof(copy));
    p.seq = 2;
    assert_int_equal(PSTensor_Push(t, &p, &r), PST_ERR_NONFINITE);
    assert_int_equal(t->acc.count, 1);
    assert_bits_equal(t->acc.sum->v, copy, 4, "sum after a refused push");
    /* Not recorded as applied: the same seq with a sane gradient is summed. */
    float ok[4] = {1, 2, 3, 4};
    PSPush q = dense(ok);
    q.id = "w";
    q.idlen = 1;
    q.seq = 2;
    assert_int_equal(PSTensor_Push(t, &q, &r), PST_OK);
    assert_int_equal(PSTensor_Push(t, &q, &r), PST_DUPLICATE);
    assert_int_equal(t->acc.count, 2);
    PSTensor_Free(t);
}

static void test_mirror_sets_values_and_version_and_never_goes_back(void **st) {
    (void)st;
    uint64_t d[1] = {4};
    PSTensor *t = mk_accum(1, d);
    float v5[4] = {1, 2, 3, 4}, v3[4] = {9, 9, 9, 9};
    assert_int_equal(PSAccum_Mirror(t, 5, (const unsigned char *)v5), 1);
    assert_int_equal(t->version, 5);
    assert_bits_equal(t->data->v, v5, 4, "mirrored");
    assert_int_equal(PSAccum_Mirror(t, 5, (const unsigned char *)v5), 0); /* same state */
    assert_int_equal(PSAccum_Mirror(t, 3, (const unsigned char *)v3), 0); /* late */
    assert_int_equal(t->version, 5);
    assert_bits_equal(t->data->v, v5, 4, "a late mirror changes nothing");
    /* Version 0 with other values (a fresh tensor mirroring an initial model). */
    PSTensor *u = mk_accum(1, d);
    assert_int_equal(PSAccum_Mirror(u, 0, (const unsigned char *)v3), 1);
    assert_bits_equal(u->data->v, v3, 4, "initial values");
    PSTensor_Free(u);
    PSTensor_Free(t);
}

static void test_accum_state_survives_header_round_trip_and_copy(void **st) {
    (void)st;
    uint64_t d[1] = {5};
    PSTensor *t = mk_accum(1, d);
    push_random(t, 2);
    assert_int_equal(PSAccum_Take(t, 1, 40), PS_TAKE_NEW);
    push_random(t, 3);
    PSHeader hd, back;
    PSHeader_FromTensor(t, &hd);
    assert_int_equal(hd.acc_count, 3);
    assert_int_equal(hd.acc_seq, 40);
    assert_int_equal(hd.pend_count, 2);
    uint64_t enc[PS_HEADER_MAX_WORDS];
    size_t w = PSHeader_Encode(&hd, enc);
    assert_int_equal(PSHeader_Decode((const unsigned char *)enc, w * 8, PS_ENCVER_ACCUM, &back), 0);
    uint64_t n;
    assert_null(PSHeader_Check(&back, &n));
    PSTensor *u = PSHeader_ToTensor(&back, n, 1);
    assert_non_null(u);
    assert_int_equal(u->acc.count, 3);
    assert_int_equal(u->acc.pend_count, 2);
    assert_int_equal(u->acc.seq, 40);
    assert_non_null(u->acc.sum);
    assert_non_null(u->acc.pend);
    PSTensor_Free(u);
    /* An older layout has no such fields: they load as 0. */
    PSHeader old;
    PSHeader_Init(&old);
    assert_int_equal(old.acc_count + old.acc_seq + old.pend_count, 0);
    /* ACCUM fields on another optimizer, or SYNC on ACCUM, are refused. */
    PSHeader bad = back;
    bad.optim = PS_OPT_SGD;
    assert_non_null(PSHeader_Check(&bad, &n));
    bad = back;
    bad.sync_n = 2;
    assert_non_null(PSHeader_Check(&bad, &n));
    bad = back;
    bad.acc_seq = 0;
    assert_non_null(PSHeader_Check(&bad, &n));
    /* A copy owns its own sum and slot. */
    PSTensor *c = PSTensor_Copy(t);
    assert_non_null(c);
    assert_ptr_not_equal(c->acc.sum, t->acc.sum);
    assert_bits_equal(c->acc.pend->v, t->acc.pend->v, 5, "copied slot");
    assert_int_equal(PSAccum_Ack(c, 40), 1);
    assert_non_null(t->acc.pend);
    PSTensor_Free(c);
    PSTensor_Free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accum_push_sums_without_stepping_and_keeps_the_version),
        cmocka_unit_test(test_take_is_idempotent_until_acked_and_then_starts_the_next_seq),
        cmocka_unit_test(test_take_waits_for_mincount_and_seqfloor_only_raises_the_seq),
        cmocka_unit_test(test_accum_row_push_equals_its_dense_equivalent),
        cmocka_unit_test(test_accum_refuses_a_push_that_overflows_the_sum_and_changes_nothing),
        cmocka_unit_test(test_mirror_sets_values_and_version_and_never_goes_back),
        cmocka_unit_test(test_accum_state_survives_header_round_trip_and_copy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
