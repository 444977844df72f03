/* test_tensor.c -- cmocka tests of module/core/tensor.[ch]: the ps-tensor value
 * without Redis. Plain pushes, staleness, future versions, non-finite
 * rejection, the exactly-once table, and allocation failure leaving the
 * value unchanged. Sync rounds and row-sparse pushes are in test_push.c,
 * snapshots and copies in test_snapshot.c, initializers in test_init.c. */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor.h"
#include "tensor_helpers.h"

/* ------------------------------------------------------------------------
 * Plain pushes
 * ---------------------------------------------------------------------- */

static void test_push_applies_sgd_and_bumps_the_version(void **st) {
    (void)st;
    PSTensor *t = mk1(100, PS_OPT_SGD, 0.1);
    float ref[100], g[100];
    memcpy(ref, t->data->v, sizeof(ref));
    for (int k = 1; k <= 5; k++) {
        fill(g, 100, -1, 1);
        PSPush p = dense(g);
        p.scale = k == 3 ? 0.25 : 1.0;
        PSPushResult r;
        assert_int_equal(PSTensor_Push(t, &p, &r), PST_OK);
        assert_int_equal(r.version, k);
        assert_int_equal(t->version, k);
        assert_int_equal(r.staleness, 0);
        sgd_ref(ref, g, 100, 0.1 * p.scale);
        assert_bits_equal(t->data->v, ref, 100, "sgd");
    }
    assert_int_equal(t->stats.pushes, 5);
    assert_int_equal(t->stats.stale_hist[0], 5);
    PSTensor_Free(t);
}

/* ------------------------------------------------------------------------
 * Staleness
 * ---------------------------------------------------------------------- */

static void test_push_beyond_maxstaleness_with_reject_changes_nothing(void **st) {
    (void)st;
    PSTensor *t = mk1(33, PS_OPT_MOMENTUM, 0.1);
    t->maxstale = 2;
    t->policy = PS_POLICY_REJECT;
    push_random(t, 5);
    float g[33];
    fill(g, 33, -1, 1);
    PSPush p = dense(g);
    p.has_version = 1;
    p.version = 2; /* staleness 3 > 2 */
    State s = save_state(t);
    PSPushResult r;
    assert_int_equal(PSTensor_Push(t, &p, &r), PST_ERR_STALE);
    assert_int_equal(r.staleness, 3);
    assert_state_unchanged(t, &s);
    assert_int_equal(t->stats.stale_rejects, 1);
    /* At the limit it is applied and lands in the histogram's bucket 2. */
    p.version = 3;
    assert_int_equal(PSTensor_Push(t, &p, &r), PST_OK);
    assert_int_equal(r.staleness, 2);
    assert_int_equal(r.version, 6);
    assert_int_equal(t->stats.stale_hist[2], 1);
    /* No limit (-1): any staleness is applied at full rate. */
    t->maxstale = -1;
    p.version = 0;
    assert_int_equal(PSTensor_Push(t, &p, &r), PST_OK);
    assert_int_equal(r.staleness, 6);
    assert_int_equal(t->stats.stale_hist[PSTensor_StaleBucket(6)], 1);
    PSTensor_Free(t);
}

static void test_push_beyond_maxstaleness_with_scale_divides_the_step(void **st) {
    (void)st;
    PSTensor *t = mk1(50, PS_OPT_SGD, 0.3);
    t->maxstale = 1;
    t->policy = PS_POLICY_SCALE;
    push_random(t, 4);
    float ref[50], g[50];
    memcpy(ref, t->data->v, sizeof(ref));
    fill(g, 50, -1, 1);
    PSPush p = dense(g);
    p.has_version = 1;
    p.version = 1; /* staleness 3 */
    p.scale = 0.5;
    PSPushResult r;
    assert_int_equal(PSTensor_Push(t, &p, &r), PST_OK);
    assert_int_equal(r.staleness, 3);
    sgd_ref(ref, g, 50, 0.3 * 0.5 / 4.0);
    assert_bits_equal(t->data->v, ref, 50, "scaled step");
    assert_int_equal(t->stats.scaled_pushes, 1);
    /* Within the limit: no scaling. */
    p.version = t->version - 1;
    p.scale = 1.0;
    assert_int_equal(PSTensor_Push(t, &p, &r), PST_OK);
    sgd_ref(ref, g, 50, 0.3);
    assert_bits_equal(t->data->v, ref, 50, "unscaled step");
    assert_int_equal(t->stats.scaled_pushes, 1);
    PSTensor_Free(t);
}

static void test_push_from_a_future_version_is_refused(void **st) {
    (void)st;
    PSTensor *t = mk1(10, PS_OPT_ADAM, 0.1);
    push_random(t, 2);
    float g[10];
    fill(g, 10, -1, 1);
    PSPush p = dense(g);
    p.has_version = 1;
    p.version = 3;
    State s = save_state(t);
    PSPushResult r;
    assert_int_equal(PSTensor_Push(t, &p, &r), PST_ERR_FUTURE);
    assert_state_unchanged(t, &s);
    p.version = 2;
    assert_int_equal(PSTensor_Push(t, &p, &r), PST_OK);
    PSTensor_Free(t);
}

static void test_stale_bucket_boundaries(void **st) {
    (void)st;
    const uint64_t s[] = {0, 1, 2, 3, 4, 5, 8, 9, 16, 17, 32, 33, 1000, UINT64_MAX};
    const int b[] = {0, 1, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 7};
    for (size_t i = 0; i < sizeof(s) / sizeof(s[0]); i++)
        if (PSTensor_StaleBucket(s[i]) != b[i])
            fail_msg("staleness %llu: bucket %d, want %d", (unsigned long long)s[i],
                     PSTensor_StaleBucket(s[i]), b[i]);
}

/* ------------------------------------------------------------------------
 * Non-finite gradients
 * ---------------------------------------------------------------------- */

static void test_push_rejects_nan_and_inf_and_leaves_tensor_unchanged(void **st) {
    (void)st;
    const float bad[] = {NAN, INFINITY, -INFINITY};
    for (int clip = 0; clip < 2; clip++) {
        for (int kind = 0; kind < PS_OPT_COUNT; kind++) {
            PSTensor *t = mk1(37, kind, 0.1);
            t->h.clipnorm = clip ? 1.0 : 0.0;
            push_random(t, 2);
            float g[37];
            for (size_t pos = 0; pos < 37; pos += 12) { /* 0, 12, 24, 36 (tail) */
                for (int b = 0; b < 3; b++) {
                    fill(g, 37, -1, 1);
                    g[pos] = bad[b];
                    PSPush p = dense(g);
                    State s = save_state(t);
                    PSPushResult r;
                    assert_int_equal(PSTensor_Push(t, &p, &r), PST_ERR_NONFINITE);
                    assert_state_unchanged(t, &s);
                }
            }
            assert_int_equal(t->stats.nonfinite_rejects, 12);
            assert_int_equal(t->stats.pushes, 2);
            PSTensor_Free(t);
        }
    }
}

/* A NaN in a row-sparse or sync push is refused the same way, and a refused
 * push with an ID does not enter the exactly-once table. */
static void test_rejected_push_with_id_is_not_recorded(void **st) {
    (void)st;
    PSTensor *t = mk1(8, PS_OPT_SGD, 0.1);
    float g[8] = {1, 2, 3, 4, 5, 6, 7, NAN};
    PSPush p = dense(g);
    p.id = "w1";
    p.idlen = 2;
    p.seq = 1;
    PSPushResult r;
    assert_int_equal(PSTensor_Push(t, &p, &r), PST_ERR_NONFINITE);
    assert_null(PSTensor_DedupFind(t, "w1", 2));
    g[7] = 8;
    assert_int_equal(PSTensor_Push(t, &p, &r), PST_OK); /* the retry is applied */
    assert_int_equal(r.version, 1);
    PSTensor_Free(t);
}

/* ------------------------------------------------------------------------
 * Exactly-once table
 * ---------------------------------------------------------------------- */

static void test_duplicate_id_answers_the_original_version_and_applies_nothing(void **st) {
    (void)st;
    PSTensor *t = mk1(16, PS_OPT_ADAM, 0.01);
    float g[16];
    fill(g, 16, -1, 1);
    PSPush p = dense(g);
    p.id = "worker-7";
    p.idlen = 8;
    p.seq = 1;
    PSPushResult r;
    assert_int_equal(PSTensor_Push(t, &p, &r), PST_OK);
    assert_int_equal(r.version, 1);
    push_random(t, 2); /* other pushes: version 3 */
    State s = save_state(t);
    assert_int_equal(PSTensor_Push(t, &p, &r), PST_DUPLICATE);
    assert_int_equal(r.version, 1); /* what the original produced */
    assert_state_unchanged(t, &s);
    assert_int_equal(t->stats.dedup_hits, 1);
    p.seq = 2;
    assert_int_equal(PSTensor_Push(t, &p, &r), PST_OK);
    assert_int_equal(r.version, 4);
    /* An older seq is a duplicate too: not applied, answers the client's
     * last recorded version. */
    p.seq = 1;
    s = save_state(t);
    assert_int_equal(PSTensor_Push(t, &p, &r), PST_DUPLICATE);
    assert_int_equal(r.version, 4);
    assert_state_unchanged(t, &s);
    /* The id is compared by length and bytes, not as a C string. */
    p.idlen = 7; /* "worker-" */
    assert_int_equal(PSTensor_Push(t, &p, &r), PST_OK);
    assert_int_equal(t->dedup_len, 2);
    /* A duplicate is checked before staleness: a retry of an old push whose
     * VERSION is now beyond the limit still answers its version. */
    t->maxstale = 0;
    p.idlen = 8;
    p.seq = 2;
    p.has_version = 1;
    p.version = 0;
    assert_int_equal(PSTensor_Push(t, &p, &r), PST_DUPLICATE);
    assert_int_equal(r.version, 4);
    PSTensor_Free(t);
}

static void test_a_late_seq_inside_the_window_is_applied_once(void **st) {
    (void)st;
    PSTensor *t = mk1(8, PS_OPT_SGD, 0.1);
    float g[8];
    fill(g, 8, -1, 1);
    PSPush p = dense(g);
    p.id = "w";
    p.idlen = 1;
    PSPushResult r;
    /* seq 3 overtakes seq 2 (a resend after a redirect): 2 still applies. */
    p.seq = 3;
    assert_int_equal(PSTensor_Push(t, &p, &r), PST_OK);
    p.seq = 2;
    assert_int_equal(PSTensor_Push(t, &p, &r), PST_OK);
    assert_int_equal(t->version, 2);
    /* ... and only once; 3 stays applied; a duplicate is answered with the
     * newest version the client's pushes produced (2, from the late seq). */
    State s = save_state(t);
    assert_int_equal(PSTensor_Push(t, &p, &r), PST_DUPLICATE);
    assert_int_equal(r.version, 2);
    p.seq = 3;
    assert_int_equal(PSTensor_Push(t, &p, &r), PST_DUPLICATE);
    assert_int_equal(r.version, 2);
    assert_state_unchanged(t, &s);
    /* Window edges: after seq 100, seq 36 (64 below) is still tracked and
     * applies; seq 35 (65 below) is too old to tell and counts as applied. */
    p.seq = 100;
    assert_int_equal(PSTensor_Push(t, &p, &r), PST_OK);
    p.seq = 36;
    assert_int_equal(PSTensor_Push(t, &p, &r), PST_OK);
    assert_int_equal(PSTensor_Push(t, &p, &r), PST_DUPLICATE);
    p.seq = 35;
    assert_int_equal(PSTensor_Push(t, &p, &r), PST_DUPLICATE);
    assert_int_equal(t->version, 4);
    /* Seq 3 is 97 below now: still a duplicate (it was applied). */
    p.seq = 3;
    assert_int_equal(PSTensor_Push(t, &p, &r), PST_DUPLICATE);
    PSTensor_Free(t);
}

static void test_dedup_table_is_bounded_and_evicts_the_oldest_version(void **st) {
    (void)st;
    PSTensor *t = mk1(4, PS_OPT_SGD, 0.1);
    t->dedup_max = 3;
    float g[4] = {1, 1, 1, 1};
    PSPush p = dense(g);
    PSPushResult r;
    const char *ids[] = {"a", "b", "c"};
    for (int i = 0; i < 3; i++) {
        p.id = ids[i];
        p.idlen = 1;
        p.seq = 1;
        assert_int_equal(PSTensor_Push(t, &p, &r), PST_OK);
    }
    /* 'a' pushes again: now 'b' holds the oldest version. */
    p.id = "a", p.seq = 2;
    assert_int_equal(PSTensor_Push(t, &p, &r), PST_OK);
    p.id = "d", p.seq = 1;
    assert_int_equal(PSTensor_Push(t, &p, &r), PST_OK);
    assert_int_equal(t->dedup_len, 3);
    assert_true(t->dedup_cap <= 3);
    assert_null(PSTensor_DedupFind(t, "b", 1));
    assert_non_null(PSTensor_DedupFind(t, "a", 1));
    assert_non_null(PSTensor_DedupFind(t, "c", 1));
    assert_non_null(PSTensor_DedupFind(t, "d", 1));
    /* 'b' was forgotten: its retry is applied again (the documented cost of
     * a bounded table). */
    p.id = "b", p.seq = 1;
    uint64_t v = t->version;
    assert_int_equal(PSTensor_Push(t, &p, &r), PST_OK);
    assert_int_equal(r.version, v + 1);
    assert_int_equal(t->dedup_len, 3);
    assert_null(PSTensor_DedupFind(t, "c", 1)); /* c was now the oldest */
    /* A table bound of 0 records nothing. */
    t->dedup_max = 0;
    p.id = "zz", p.idlen = 2;
    assert_int_equal(PSTensor_Push(t, &p, &r), PST_OK);
    assert_int_equal(PSTensor_Push(t, &p, &r), PST_OK);
    assert_null(PSTensor_DedupFind(t, "zz", 2));
    PSTensor_Free(t);
}

static void test_dedup_record_updates_and_evicts_deterministically(void **st) {
    (void)st;
    PSTensor *t = mk1(2, PS_OPT_SGD, 0.1);
    t->dedup_max = 2;
    assert_int_equal(PSTensor_DedupRecord(t, "x", 1, 5, 0, 10), PST_OK);
    assert_int_equal(PSTensor_DedupRecord(t, "y", 1, 1, 0, 7), PST_OK);
    assert_int_equal(PSTensor_DedupRecord(t, "x", 1, 6, 0, 11), PST_OK); /* update */
    assert_int_equal(t->dedup_len, 2);
    PSDedupEntry *e = PSTensor_DedupFind(t, "x", 1);
    assert_non_null(e);
    assert_int_equal(e->seq, 6);
    assert_int_equal(e->version, 11);
    assert_int_equal(PSTensor_DedupRecord(t, "z", 1, 1, 0, 12), PST_OK); /* evicts y (7) */
    assert_null(PSTensor_DedupFind(t, "y", 1));
    assert_non_null(PSTensor_DedupFind(t, "z", 1));
    PSTensor_Free(t);
}

/* ------------------------------------------------------------------------
 * Allocation failure leaves the value unchanged
 * ---------------------------------------------------------------------- */

static int AllocBudget = -1; /* allocations left before failing; -1 = unlimited */

static void *failing_alloc(size_t n) {
    if (AllocBudget == 0) return NULL;
    if (AllocBudget > 0) AllocBudget--;
    return malloc(n);
}

static void test_push_that_cannot_copy_on_write_fails_cleanly(void **st) {
    (void)st;
    PSTensor_SetAllocator(failing_alloc, free);
    PSTensor *t = mk1(100, PS_OPT_ADAM, 0.01);
    push_random(t, 1);
    assert_int_equal(PSTensor_SnapshotTake(t, "s", 1, 0), PST_OK);
    float g[100];
    fill(g, 100, -1, 1);
    PSPush p = dense(g);
    p.id = "new-client", p.idlen = 10, p.seq = 1;
    PSPushResult r;
    int failures = 0;
    for (int budget = 0; budget < 12; budget++) {
        State s = save_state(t);
        AllocBudget = budget;
        int rc = PSTensor_Push(t, &p, &r);
        AllocBudget = -1;
        if (rc == PST_OK) {
            free(s.data), free(s.s0), free(s.s1);
            break;
        }
        assert_int_equal(rc, PST_ERR_OOM);
        failures++;
        assert_state_unchanged(t, &s);
        assert_null(PSTensor_DedupFind(t, "new-client", 10));
        assert_ptr_equal(t->data, t->snaps[0].data); /* still shared */
    }
    assert_true(failures >= 3); /* id copy, values, two state arrays */
    assert_int_equal(t->version, 2);
    assert_non_null(PSTensor_DedupFind(t, "new-client", 10));
    PSTensor_Free(t);
    PSTensor_SetAllocator(malloc, free);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_push_applies_sgd_and_bumps_the_version),
        cmocka_unit_test(test_push_beyond_maxstaleness_with_reject_changes_nothing),
        cmocka_unit_test(test_push_beyond_maxstaleness_with_scale_divides_the_step),
        cmocka_unit_test(test_push_from_a_future_version_is_refused),
        cmocka_unit_test(test_stale_bucket_boundaries),
        cmocka_unit_test(test_push_rejects_nan_and_inf_and_leaves_tensor_unchanged),
        cmocka_unit_test(test_rejected_push_with_id_is_not_recorded),
        cmocka_unit_test(test_duplicate_id_answers_the_original_version_and_applies_nothing),
        cmocka_unit_test(test_a_late_seq_inside_the_window_is_applied_once),
        cmocka_unit_test(test_dedup_table_is_bounded_and_evicts_the_oldest_version),
        cmocka_unit_test(test_dedup_record_updates_and_evicts_deterministically),
        cmocka_unit_test(test_push_that_cannot_copy_on_write_fails_cleanly),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
