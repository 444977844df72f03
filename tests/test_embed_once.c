/* test_embed_once.c -- cmocka tests of a table push's exactly-once and
 * staleness rules (PSEmbed_PushOnce, module/core/embed_once.c): a resend is a
 * duplicate answered with the client's version and changes nothing; a
 * VERSION from the future or beyond maxstale is refused and changes
 * nothing; a late seq inside the window is applied once; a push that fails
 * leaves no entry behind; a bound of 0 records nothing; the client set
 * evicts its oldest entry at the bound. */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "dedup.h"
#include "embed.h"

enum { DIM = 4 };

typedef struct Fixture {
    PSEmbed *t;
    PSDedupSet dd;
} Fixture;

static int setup(void **state) {
    static Fixture f;
    memset(&f, 0, sizeof(f));
    PSEmbedConfig c;
    PSEmbed_DefaultConfig(&c, DIM);
    const char *err = NULL;
    f.t = PSEmbed_New(&c, &err);
    if (!f.t) return -1;
    f.dd.max = 8;
    *state = &f;
    return 0;
}

static int teardown(void **state) {
    Fixture *f = *state;
    PSEmbed_Free(f->t);
    PSDedupSet_Free(&f->dd);
    return 0;
}

/* One push of id 'id' with gradient 'gv' everywhere, as client 'client'
 * (NULL: none) with 'seq', VERSION 'version' when has_version. */
static int push(Fixture *f, int64_t maxstale, uint64_t id, float gv, const char *client,
                uint64_t seq, int has_version, uint64_t version, PSEmbedPushResult *r) {
    float g[DIM];
    for (int i = 0; i < DIM; i++) g[i] = gv;
    const PSEmbedPush p = {.ids = (const unsigned char *)&id, .k = 1,
                           .grad = (const unsigned char *)g, .id = client,
                           .idlen = client ? strlen(client) : 0, .seq = seq,
                           .has_version = has_version, .version = version};
    return PSEmbed_PushOnce(f->t, &f->dd, maxstale, &p, r);
}

static void test_resend_is_a_duplicate_and_changes_nothing(void **state) {
    Fixture *f = *state;
    PSEmbedPushResult r;
    assert_int_equal(push(f, -1, 1, 1.0f, "w1", 1, 0, 0, &r), PSE_OK);
    assert_int_equal(r.version, 1);
    assert_int_equal(push(f, -1, 2, 1.0f, NULL, 0, 0, 0, &r), PSE_OK); /* no ID: version 2 */
    const uint64_t digest = PSEmbed_Digest64(f->t);
    assert_int_equal(push(f, -1, 1, 1.0f, "w1", 1, 0, 0, &r), PSE_DUPLICATE);
    assert_int_equal(r.version, 1); /* the version the client's push produced */
    assert_int_equal(PSEmbed_Version(f->t), 2);
    assert_int_equal(PSEmbed_Digest64(f->t), digest);
    assert_int_equal(f->dd.len, 1);
    /* The next seq is applied and raises the client's version. */
    assert_int_equal(push(f, -1, 1, 1.0f, "w1", 2, 0, 0, &r), PSE_OK);
    assert_int_equal(r.version, 3);
    assert_int_equal(PSDedupSet_Find(&f->dd, "w1", 2)->version, 3);
}

static void test_late_seq_inside_the_window_is_applied_once(void **state) {
    Fixture *f = *state;
    PSEmbedPushResult r;
    assert_int_equal(push(f, -1, 1, 1.0f, "w", 5, 0, 0, &r), PSE_OK);
    assert_int_equal(push(f, -1, 1, 1.0f, "w", 3, 0, 0, &r), PSE_OK); /* overtaken, not seen */
    assert_int_equal(r.version, 2);
    assert_int_equal(push(f, -1, 1, 1.0f, "w", 3, 0, 0, &r), PSE_DUPLICATE);
    assert_int_equal(r.version, 2);
    /* Below the window: treated as applied. */
    assert_int_equal(push(f, -1, 1, 1.0f, "w", 200, 0, 0, &r), PSE_OK);
    assert_int_equal(push(f, -1, 1, 1.0f, "w", 200 - PS_DEDUP_WINDOW - 1, 0, 0, &r), PSE_DUPLICATE);
    assert_int_equal(PSEmbed_Version(f->t), 3);
}

static void test_future_and_stale_versions_are_refused(void **state) {
    Fixture *f = *state;
    PSEmbedPushResult r;
    for (int i = 0; i < 3; i++) assert_int_equal(push(f, 1, 1, 1.0f, NULL, 0, 0, 0, &r), PSE_OK);
    const uint64_t digest = PSEmbed_Digest64(f->t);
    assert_int_equal(push(f, 1, 1, 1.0f, "c", 1, 1, 4, &r), PSE_ERR_FUTURE);
    assert_int_equal(push(f, 1, 1, 1.0f, "c", 1, 1, 1, &r), PSE_ERR_STALE);
    assert_int_equal(r.staleness, 2);
    assert_int_equal(PSEmbed_Digest64(f->t), digest);
    assert_int_equal(f->dd.len, 0); /* a refused push records no client */
    assert_int_equal(push(f, 1, 1, 1.0f, "c", 1, 1, 2, &r), PSE_OK); /* 1 behind: within */
    assert_int_equal(r.staleness, 1);
    assert_int_equal(r.version, 4);
    /* Without a bound any past version is applied; a resend still is a duplicate
     * before its staleness is looked at. */
    assert_int_equal(push(f, -1, 1, 1.0f, NULL, 0, 1, 0, &r), PSE_OK);
    assert_int_equal(r.staleness, 4);
    assert_int_equal(push(f, 0, 1, 1.0f, "c", 1, 1, 0, &r), PSE_DUPLICATE);
    assert_int_equal(r.version, 4);
}

static void test_failed_push_leaves_no_entry(void **state) {
    Fixture *f = *state;
    PSEmbedPushResult r;
    assert_int_equal(push(f, -1, 1, NAN, "new", 1, 0, 0, &r), PSE_ERR_NONFINITE);
    assert_int_equal(f->dd.len, 0);
    assert_null(PSDedupSet_Find(&f->dd, "new", 3));
    assert_int_equal(PSEmbed_Version(f->t), 0);
    /* The same seq is applied once the gradient is good. */
    assert_int_equal(push(f, -1, 1, 1.0f, "new", 1, 0, 0, &r), PSE_OK);
    assert_int_equal(f->dd.len, 1);
}

static void test_bound_zero_records_nothing_and_bound_evicts_oldest(void **state) {
    Fixture *f = *state;
    PSEmbedPushResult r;
    f->dd.max = 0;
    assert_int_equal(push(f, -1, 1, 1.0f, "w", 1, 0, 0, &r), PSE_OK);
    assert_int_equal(push(f, -1, 1, 1.0f, "w", 1, 0, 0, &r), PSE_OK); /* not remembered */
    assert_int_equal(f->dd.len, 0);
    f->dd.max = 2;
    assert_int_equal(push(f, -1, 1, 1.0f, "a", 1, 0, 0, &r), PSE_OK); /* version 3 */
    assert_int_equal(push(f, -1, 1, 1.0f, "b", 1, 0, 0, &r), PSE_OK); /* version 4 */
    assert_int_equal(push(f, -1, 1, 1.0f, "c", 1, 0, 0, &r), PSE_OK); /* evicts a */
    assert_int_equal(f->dd.len, 2);
    assert_null(PSDedupSet_Find(&f->dd, "a", 1));
    assert_non_null(PSDedupSet_Find(&f->dd, "b", 1));
    assert_non_null(PSDedupSet_Find(&f->dd, "c", 1));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_resend_is_a_duplicate_and_changes_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_late_seq_inside_the_window_is_applied_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_future_and_stale_versions_are_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_push_leaves_no_entry, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bound_zero_records_nothing_and_bound_evicts_oldest, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
