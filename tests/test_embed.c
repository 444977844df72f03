/* test_embed.c -- cmocka tests of the embedding table's mechanics
 * (module/core/embed*.c): admission counts and the filter's
 * false-admission rate, TTL and CAPACITY eviction (LRU by push with ties by
 * id) and their determinism, explicit eviction by age, reconfiguration,
 * memory per row, and OOM injection leaving the table unchanged. The
 * naive-model checks are in test_embed_model.c, the export scan and
 * serialization in test_embed_io.c, the tombstone log in
 * test_embed_tomb.c; their shared helpers in embed_helpers.h. */

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
 * Admission
 * ---------------------------------------------------------------------- */

static void test_admit_creates_the_row_on_the_nth_push_and_drops_earlier_gradients(void **state) {
    (void)state;
    PSEmbedConfig c = config(PSE_OPT_SGD, 2);
    c.admit = 3;
    c.lr = 1.0;
    c.init = PSE_INIT_ZEROS;
    PSEmbed *t = PSEmbed_New(&c, NULL);
    PSEmbedPushResult res;
    uint64_t id = 1234, twice[2] = {1234, 1234};
    /* Repeats in one push count as one push of the id. */
    assert_int_equal(push_ids(t, twice, 2, 1.0f, &res), PSE_OK);
    assert_int_equal(res.dropped, 1);
    assert_int_equal(push_ids(t, &id, 1, 2.0f, &res), PSE_OK);
    assert_int_equal(res.dropped, 1);
    assert_false(PSEmbed_Lookup(t, id, NULL));
    assert_int_equal(push_ids(t, &id, 1, 4.0f, &res), PSE_OK);
    assert_int_equal(res.created, 1);
    PSEmbedRow row;
    assert_true(PSEmbed_Lookup(t, id, &row));
    assert_true(row.data[0] == -4.0f); /* only the admitting push's gradient */
    assert_int_equal(row.pushes, 1);
    PSEmbedState st;
    PSEmbed_GetState(t, &st);
    assert_int_equal(st.stats.dropped, 2);
    assert_int_equal(st.stats.created, 1);
    assert_int_equal(st.version, 3);
    PSEmbed_Free(t);
}

/* 20,000 distinct ids pushed once each into a 2^16-counter filter with
 * ADMIT 2: an id is falsely admitted when its three counters were all
 * raised by others. The documented bound for n ids in m counters is
 * (1 - e^(-3n/m))^3 = 0.22 at the end of this run (conservative update
 * stays below it; 0.07 measured over the whole run). */
static void test_false_admission_rate_stays_within_the_documented_bound(void **state) {
    (void)state;
    PSEmbedConfig c = config(PSE_OPT_SGD, 1);
    c.admit = 2;
    c.filter_log2 = 16;
    PSEmbed *t = PSEmbed_New(&c, NULL);
    const int n = 20000;
    uint64_t early = 0;
    for (int i = 0; i < n; i++) {
        assert_int_equal(push1(t, 1000003ULL * (uint64_t)i + 17), PSE_OK);
        if (i == n / 4 - 1) early = PSEmbed_Rows(t);
    }
    const double rate = (double)PSEmbed_Rows(t) / n;
    const double bound = pow(1 - exp(-3.0 * n / 65536), 3);
    const double early_bound = pow(1 - exp(-3.0 * (n / 4) / 65536), 3);
    printf("false admissions: %.4f overall (bound at the end %.4f), %.4f of the first %d (bound %.4f)\n",
           rate, bound, (double)early / (n / 4), n / 4, early_bound);
    assert_true(rate <= bound);
    assert_true((double)early / (n / 4) <= early_bound);
    assert_true(PSEmbed_Rows(t) > 0); /* it is a filter: some ids do pass early */
    PSEmbed_Free(t);
}

/* ------------------------------------------------------------------------
 * Eviction
 * ---------------------------------------------------------------------- */

static void test_ttl_rows_die_after_ttl_versions_and_are_reclaimed(void **state) {
    (void)state;
    PSEmbedConfig c = config(PSE_OPT_ADAGRAD, 3);
    c.ttl = 5;
    PSEmbed *t = PSEmbed_New(&c, NULL);
    assert_int_equal(push1(t, 1), PSE_OK); /* version 1 */
    for (uint64_t v = 2; v <= 5; v++) assert_int_equal(push1(t, 100 + v), PSE_OK);
    assert_true(PSEmbed_Lookup(t, 1, NULL)); /* age 4 */
    assert_int_equal(push1(t, 200), PSE_OK);    /* version 6: age 5 */
    assert_false(PSEmbed_Lookup(t, 1, NULL));
    float out[3], init[3];
    uint64_t id = 1;
    PSEmbed_Pull(t, (const unsigned char *)&id, 1, out);
    PSEmbed_InitRow(&c, 1, init);
    assert_memory_equal(out, init, sizeof(out));
    /* The sweep (16 + 2 per id slots per push) has reclaimed it. */
    PSEmbedState st;
    PSEmbed_GetState(t, &st);
    assert_int_equal(st.stats.evicted_ttl, 1);
    assert_int_equal(PSEmbed_Rows(t), 5);
    /* A dead row found by its next push before the sweep reached it is
     * evicted and created afresh in place: 1000 rows die at version 3, the
     * sweep moves rows 6 and 5 (the last ones) into the first holes, behind
     * its cursor, and row 5 (pushed at version 2) is dead for the push
     * after version 4 (a push judges rows at the version before it). */
    PSEmbedConfig c2 = c;
    c2.ttl = 2;
    PSEmbed *u = PSEmbed_New(&c2, NULL);
    uint64_t many[1000];
    for (uint64_t i = 0; i < 1000; i++) many[i] = 1000 + i;
    assert_int_equal(push_ids(u, many, 1000, 0.5f, NULL), PSE_OK);
    assert_int_equal(push1(u, 5), PSE_OK);
    assert_int_equal(push1(u, 6), PSE_OK);
    assert_int_equal(push1(u, 7), PSE_OK);
    PSEmbedState before, after;
    PSEmbed_GetState(u, &before);
    PSEmbedPushResult res;
    assert_int_equal(push_ids(u, &many[999], 0, 0.5f, &res), PSE_ERR_ARG);
    uint64_t five = 5;
    assert_int_equal(push_ids(u, &five, 1, 0.5f, &res), PSE_OK);
    PSEmbed_GetState(u, &after);
    assert_int_equal(res.created, 1);
    assert_int_equal(after.nrows, before.nrows - res.evicted); /* reset in place: no new slot */
    assert_int_equal(after.stats.evicted_ttl, before.stats.evicted_ttl + res.evicted + 1);
    PSEmbedRow row;
    assert_true(PSEmbed_Lookup(u, 5, &row));
    assert_int_equal(row.pushes, 1);
    PSEmbed_InitRow(&c2, 5, init);
    const float lr = (float)c2.lr, eps = (float)c2.eps;
    for (int i = 0; i < 3; i++) {
        const float a = 0.5f * 0.5f;
        const float w = init[i] - lr * (0.5f / (sqrtf(a) + eps));
        assert_memory_equal(&row.data[i], &w, 4);
    }
    PSEmbed_Free(t);
    PSEmbed_Free(u);
}

/* CAPACITY 32 evicts down to 30 when exceeded; the rows that go are the
 * least recently pushed, ties (one push) broken by smaller id first. */
static void test_capacity_evicts_least_recently_pushed_rows_ties_by_id(void **state) {
    (void)state;
    PSEmbedConfig c = config(PSE_OPT_SGD, 2);
    c.capacity = 32;
    PSEmbed *t = PSEmbed_New(&c, NULL);
    uint64_t ids[40];
    for (int i = 0; i < 40; i++) ids[i] = (uint64_t)(40 - i); /* 40 .. 1 */
    PSEmbedPushResult res;
    assert_int_equal(push_ids(t, ids, 40, 1.0f, &res), PSE_OK);
    assert_int_equal(res.evicted, 10);
    assert_int_equal(PSEmbed_Rows(t), 30);
    for (uint64_t id = 1; id <= 40; id++) assert_int_equal(PSEmbed_Lookup(t, id, NULL), id > 10);
    /* Re-push 11 and 12: now 13 .. 14 are the oldest. */
    uint64_t again[2] = {12, 11};
    assert_int_equal(push_ids(t, again, 2, 1.0f, NULL), PSE_OK);
    for (uint64_t id = 100; id < 103; id++) assert_int_equal(push1(t, id), PSE_OK);
    /* 33 rows > 32: evict 3 = ids 13, 14, 15. */
    assert_int_equal(PSEmbed_Rows(t), 30);
    assert_true(PSEmbed_Lookup(t, 11, NULL) && PSEmbed_Lookup(t, 12, NULL));
    assert_false(PSEmbed_Lookup(t, 13, NULL) || PSEmbed_Lookup(t, 14, NULL) ||
                 PSEmbed_Lookup(t, 15, NULL));
    assert_true(PSEmbed_Lookup(t, 16, NULL));
    PSEmbedState st;
    PSEmbed_GetState(t, &st);
    assert_int_equal(st.stats.evicted_capacity, 13);
    PSEmbed_Free(t);
}

static void test_evict_age_removes_rows_pushed_age_or_more_versions_ago(void **state) {
    (void)state;
    PSEmbedConfig c = config(PSE_OPT_MOMENTUM, 2);
    PSEmbed *t = PSEmbed_New(&c, NULL);
    for (uint64_t id = 1; id <= 10; id++) assert_int_equal(push1(t, id), PSE_OK);
    /* version 10; row id was pushed at version id: age = 10 - id. */
    assert_int_equal(PSEmbed_EvictAge(t, 0), 0);
    assert_int_equal(PSEmbed_EvictAge(t, 4), 6); /* ids 1 .. 6 */
    for (uint64_t id = 1; id <= 10; id++) assert_int_equal(PSEmbed_Lookup(t, id, NULL), id > 6);
    PSEmbedState st;
    PSEmbed_GetState(t, &st);
    assert_int_equal(st.stats.evicted_explicit, 6);
    PSEmbed_Free(t);
}

static void test_reconfigure_changes_rates_and_limits_but_not_the_layout(void **state) {
    (void)state;
    PSEmbedConfig c = config(PSE_OPT_SGD, 2);
    PSEmbed *t = PSEmbed_New(&c, NULL);
    for (uint64_t id = 1; id <= 40; id++) assert_int_equal(push1(t, id), PSE_OK);
    const uint64_t d = PSEmbed_Digest64(t);
    const char *err = NULL;
    PSEmbedConfig bad = c;
    bad.dim = 3;
    assert_int_equal(PSEmbed_Reconfigure(t, &bad, &err), PSE_ERR_ARG);
    bad = c;
    bad.seed++;
    assert_int_equal(PSEmbed_Reconfigure(t, &bad, &err), PSE_ERR_ARG);
    bad = c;
    bad.lr = -1;
    assert_int_equal(PSEmbed_Reconfigure(t, &bad, &err), PSE_ERR_ARG);
    assert_int_equal(PSEmbed_Digest64(t), d);
    /* A lower capacity evicts at once: 40 rows > 32, down to 30. */
    PSEmbedConfig c2 = c;
    c2.capacity = 32;
    c2.lr = 2.0;
    assert_int_equal(PSEmbed_Reconfigure(t, &c2, &err), PSE_OK);
    assert_int_equal(PSEmbed_Rows(t), 30);
    assert_false(PSEmbed_Lookup(t, 10, NULL));
    assert_true(PSEmbed_Lookup(t, 11, NULL));
    /* The new rate applies to the next push. */
    PSEmbedRow before, after;
    assert_true(PSEmbed_Lookup(t, 40, &before));
    const float w0 = before.data[0];
    assert_int_equal(push1(t, 40), PSE_OK);
    assert_true(PSEmbed_Lookup(t, 40, &after));
    assert_true(after.data[0] == w0 - 2.0f * 0.5f);
    PSEmbed_Free(t);
}


static void test_two_tables_fed_the_same_pushes_are_bit_identical(void **state) {
    (void)state;
    PSEmbedConfig c = busy_config();
    PSEmbed *a = PSEmbed_New(&c, NULL), *b = PSEmbed_New(&c, NULL);
    feed(a, 1, 400);
    feed(b, 1, 400);
    PSEmbedState sa, sb;
    PSEmbed_GetState(a, &sa);
    PSEmbed_GetState(b, &sb);
    assert_memory_equal(&sa, &sb, sizeof(sa));
    assert_true(sa.stats.evicted_capacity > 0 && sa.stats.evicted_ttl > 0 && sa.stats.dropped > 0 &&
                sa.stats.evicted_explicit > 0);
    assert_true(sa.nrows <= 1800);
    assert_int_equal(PSEmbed_Digest64(a), PSEmbed_Digest64(b));
    assert_index_consistent(a);
    /* A different history gives a different digest. */
    feed(b, 2, 1);
    assert_int_not_equal(PSEmbed_Digest64(a), PSEmbed_Digest64(b));
    PSEmbed_Free(a);
    PSEmbed_Free(b);
}


/* ------------------------------------------------------------------------
 * Memory, OOM
 * ---------------------------------------------------------------------- */

/* Bytes the allocator handed out per row, against the budget
 * 4 * dim * (1 + state vectors) + 32. */
static void test_memory_per_row_is_within_the_budget(void **state) {
    (void)state;
    const int opts[3] = {PSE_OPT_ROWADAGRAD, PSE_OPT_SGD, PSE_OPT_ADAM};
    for (int o = 0; o < 3; o++) {
        PSEmbedConfig c = config(opts[o], 16);
        PSEmbed *t = PSEmbed_New(&c, NULL);
        const size_t base = Live;
        uint64_t ids[1000];
        for (uint64_t b = 0; b < 200; b++) {
            for (uint64_t i = 0; i < 1000; i++) ids[i] = rnd();
            assert_int_equal(push_ids(t, ids, 1000, 0.01f, NULL), PSE_OK);
        }
        const double per_row = (double)(Live - base) / (double)PSEmbed_Rows(t);
        const double budget = 4.0 * 16 * (1 + PSEmbed_NumStateVectors(opts[o])) + 32;
        printf("%s dim 16: %.2f bytes per row over %llu rows (budget %.0f)\n",
               PSEmbed_OptimName(opts[o]), per_row, (unsigned long long)PSEmbed_Rows(t), budget);
        assert_true(per_row <= budget);
        assert_int_equal(PSEmbed_MemUsage(t), Live);
        PSEmbed_Free(t);
        assert_int_equal(Live, 0);
    }
}

/* Every allocation of a push, a copy and a creation fails in turn: the
 * call reports OOM, the table's digest is unchanged and nothing leaks. */
static void test_oom_at_any_allocation_leaves_the_table_unchanged(void **state) {
    (void)state;
    PSEmbedConfig c = busy_config();
    c.capacity = 0;
    PSEmbed *t = PSEmbed_New(&c, NULL);
    feed(t, 6, 20);
    uint64_t ids[600];
    float g[600 * 4];
    for (int i = 0; i < 600; i++) ids[i] = 5000 + (uint64_t)i;
    for (int i = 0; i < 2400; i++) g[i] = 0.25f;
    /* Make 600 ids admitted on their next push (ADMIT 2), 20 at a time (a
     * push reserves room for all its absent ids); the push under test then
     * creates rows for 300 of them, each given twice. */
    for (int i = 0; i < 600; i += 20)
        assert_int_equal(PSEmbed_Push(t, (const unsigned char *)(ids + i), 20,
                                      (const unsigned char *)g, NULL),
                         PSE_OK);
    for (int i = 0; i < 600; i++) ids[i] = 5000 + (uint64_t)(i % 300);
    const uint64_t d = PSEmbed_Digest64(t);
    int failures = 0;
    for (long n = 0;; n++) {
        FailAfter = n;
        const int rc = PSEmbed_Push(t, (const unsigned char *)ids, 600, (const unsigned char *)g, NULL);
        FailAfter = -1;
        if (rc == PSE_OK) break;
        assert_int_equal(rc, PSE_ERR_OOM);
        assert_int_equal(PSEmbed_Digest64(t), d);
        failures++;
    }
    printf("push failed cleanly at %d allocation points\n", failures);
    assert_true(failures >= 3); /* scratch, slab and index growth */
    assert_true(PSEmbed_Lookup(t, 5000, NULL));
    for (long n = 0;; n++) {
        FailAfter = n;
        PSEmbed *cp = PSEmbed_Copy(t);
        FailAfter = -1;
        if (cp) {
            assert_int_equal(PSEmbed_Digest64(cp), PSEmbed_Digest64(t));
            PSEmbed_Free(cp);
            break;
        }
    }
    const size_t live = Live;
    PSEmbed_Free(t);
    assert_true(live > 0);
    assert_int_equal(Live, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_admit_creates_the_row_on_the_nth_push_and_drops_earlier_gradients),
        cmocka_unit_test(test_false_admission_rate_stays_within_the_documented_bound),
        cmocka_unit_test(test_ttl_rows_die_after_ttl_versions_and_are_reclaimed),
        cmocka_unit_test(test_capacity_evicts_least_recently_pushed_rows_ties_by_id),
        cmocka_unit_test(test_evict_age_removes_rows_pushed_age_or_more_versions_ago),
        cmocka_unit_test(test_reconfigure_changes_rates_and_limits_but_not_the_layout),
        cmocka_unit_test(test_two_tables_fed_the_same_pushes_are_bit_identical),
        cmocka_unit_test_setup_teardown(test_memory_per_row_is_within_the_budget, use_counting,
                                        use_malloc),
        cmocka_unit_test_setup_teardown(test_oom_at_any_allocation_leaves_the_table_unchanged,
                                        use_counting, use_malloc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
