/* test_embed_tomb.c -- cmocka tests of the embedding table's tombstone log
 * (module/core/embed_tomb.c): a consumer following the table incrementally
 * through scans and tombstones sees every eviction; the log's bounds and
 * its configuration. */

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

/* ---- tombstones: a consumer following the table incrementally -------- */

#define MIRROR_IDS 3000
typedef struct Mirror {
    uint8_t present[MIRROR_IDS];
    float vals[MIRROR_IDS * 4];
    uint64_t since; /* the version the mirror is complete for (0: none yet) */
    int rebases;
} Mirror;

static void mirror_row(void *ud, const PSEmbedRow *row) {
    Mirror *m = ud;
    assert_true(row->id < MIRROR_IDS);
    m->present[row->id] = 1;
    memcpy(m->vals + row->id * 4, row->data, 4 * sizeof(float));
}

static void mirror_gone(void *ud, uint64_t id, uint64_t version) {
    Mirror *m = ud;
    (void)version;
    assert_true(id < MIRROR_IDS);
    m->present[id] = 0;
}

/* One export pass: tombstones since m->since (a full pass on REBASE), then
 * the rows changed since with the dead rows, in steps of 'count', with
 * 'between' pushes of more training after every step (a scan is not
 * atomic). */
static void mirror_pass(PSEmbed *t, Mirror *m, uint64_t count, uint64_t *seed, int between) {
    const uint64_t start = PSEmbed_Version(t);
    uint64_t since = m->since, cursor = 0;
    if (since) {
        do {
            if (PSEmbed_Tombstones(t, since, cursor, count, mirror_gone, m, &cursor) != PSE_OK) {
                since = 0;
                break;
            }
            if (between) feed(t, (*seed)++, between);
        } while (cursor);
    }
    if (!since) { /* re-base: everything again, into an empty mirror */
        memset(m->present, 0, sizeof(m->present));
        m->rebases++;
    }
    do {
        cursor = PSEmbed_ScanGone(t, cursor, count, since, mirror_row, mirror_gone, m);
        if (between) feed(t, (*seed)++, between);
    } while (cursor);
    m->since = start;
}

static void assert_mirror_equal(const PSEmbed *t, const Mirror *m) {
    uint64_t live = 0;
    for (uint64_t id = 0; id < MIRROR_IDS; id++) {
        PSEmbedRow row;
        const int in = PSEmbed_Lookup(t, id, &row);
        assert_int_equal(in, m->present[id]);
        if (in) assert_memory_equal(row.data, m->vals + id * 4, 4 * sizeof(float));
        live += (uint64_t)in;
    }
    assert_true(live > 0);
}

typedef struct Dead {
    uint64_t n;
} Dead;
static void ignore_row(void *ud, const PSEmbedRow *row) {
    (void)ud;
    (void)row;
}
static void count_dead(void *ud, uint64_t id, uint64_t version) {
    (void)id;
    (void)version;
    ((Dead *)ud)->n++;
}

static void test_tombstones_let_a_consumer_follow_every_eviction(void **state) {
    (void)state;
    /* TTL, CAPACITY and PS.EVICT (feed's) all remove rows; the log holds
     * enough for a pass, or not (then the consumer re-bases). */
    const uint64_t logs[] = {PSE_DEFAULT_TOMBSTONES, 3000, 0};
    for (size_t li = 0; li < 3; li++) {
        PSEmbedConfig c = busy_config();
        c.tombstones = logs[li];
        PSEmbed *t = PSEmbed_New(&c, NULL);
        Mirror *m = calloc(1, sizeof(*m));
        uint64_t seed = 100;
        feed(t, seed++, 50);
        for (int round = 0; round < 12; round++) {
            mirror_pass(t, m, 97, &seed, round % 3);
            feed(t, seed++, 7 + round);
        }
        mirror_pass(t, m, 97, &seed, 0);
        /* PS.EVICT right after a pass, at the version the pass started at
         * (an eviction does not move the version): the next pass sees it. */
        assert_int_equal(PSEmbed_Version(t), m->since);
        assert_true(PSEmbed_EvictAge(t, 5) > 0);
        mirror_pass(t, m, 97, &seed, 0);
        assert_mirror_equal(t, m);
        /* Pushes of one id for TTL versions: most rows die, few are swept
         * (the sweep visits 18 slots a push), so the dead rows must come
         * from the scan (GONE), not from the log. */
        for (int k = 0; k < 45; k++) {
            const uint64_t one = 2999;
            const float g[4] = {0};
            assert_int_equal(PSEmbed_Push(t, (const unsigned char *)&one, 1, (const unsigned char *)g, NULL),
                             PSE_OK);
        }
        Dead d = {0};
        uint64_t cur = 0;
        do cur = PSEmbed_ScanGone(t, cur, 97, m->since, ignore_row, count_dead, &d);
        while (cur);
        assert_true(d.n > 100);
        mirror_pass(t, m, 97, &seed, 0); /* quiet: must be exact */
        assert_mirror_equal(t, m);
        PSEmbedState st;
        PSEmbed_GetState(t, &st);
        assert_true(st.stats.evicted_ttl + st.stats.evicted_capacity + st.stats.evicted_explicit > 0);
        /* 14 passes: a log that holds a pass's removals re-bases only the
         * first time; a smaller one sometimes; none, every time. */
        if (li == 0) assert_int_equal(m->rebases, 1);
        if (li == 1) assert_true(m->rebases > 1 && m->rebases < 14);
        if (li == 2) assert_true(m->rebases > 10);
        /* The horizon: SINCE at or before it, or after the version, is a REBASE. */
        uint64_t next;
        assert_int_equal(PSEmbed_Tombstones(t, 0, 0, 10, mirror_gone, m, &next), PSE_ERR_HORIZON);
        if (st.tomb_horizon > 1)
            assert_int_equal(PSEmbed_Tombstones(t, st.tomb_horizon - 1, 0, 10, mirror_gone, m, &next),
                             PSE_ERR_HORIZON);
        if (st.tomb_horizon > 0 && st.tomb_horizon <= st.version)
            assert_int_equal(PSEmbed_Tombstones(t, st.tomb_horizon, 0, 10, mirror_gone, m, &next), PSE_OK);
        assert_int_equal(PSEmbed_Tombstones(t, st.version + 1, 0, 10, mirror_gone, m, &next),
                         PSE_ERR_HORIZON);
        assert_true(PSEmbed_TombLen(t) <= logs[li]);
        /* A copy, and a rebuild with the log, digest the same. */
        PSEmbed *cp = PSEmbed_Copy(t);
        assert_int_equal(PSEmbed_Digest64(cp), PSEmbed_Digest64(t));
        PSEmbed *b;
        assert_int_equal(rebuild(t, -1, NULL, NULL, &b), PSE_OK);
        assert_int_equal(PSEmbed_Digest64(b), PSEmbed_Digest64(t));
        /* Both go on logging the same removals. */
        feed(cp, 7, 40);
        feed(b, 7, 40);
        feed(t, 7, 40);
        assert_int_equal(PSEmbed_Digest64(cp), PSEmbed_Digest64(t));
        assert_int_equal(PSEmbed_Digest64(b), PSEmbed_Digest64(t));
        PSEmbed_Free(cp);
        PSEmbed_Free(b);
        PSEmbed_Free(t);
        free(m);
    }
}

static void test_tombstone_log_bounds_and_config(void **state) {
    (void)state;
    PSEmbedConfig c = config(PSE_OPT_SGD, 4);
    c.capacity = 16;
    c.tombstones = 8;
    PSEmbed *t = PSEmbed_New(&c, NULL);
    feed(t, 5, 20); /* 64 ids a push over 3000: CAPACITY evicts many */
    PSEmbedState st;
    PSEmbed_GetState(t, &st);
    assert_int_equal(PSEmbed_TombLen(t), 8);
    assert_true(st.tomb_total > 8);
    assert_true(st.tomb_horizon > 0 && st.tomb_horizon <= st.version + 1);
    /* Versions never decrease; entries are >= the horizon. */
    uint64_t prev = st.tomb_horizon;
    for (uint64_t i = 0; i < 8; i++) {
        uint64_t id, ver;
        PSEmbed_TombAt(t, i, &id, &ver);
        assert_true(ver >= prev && ver <= st.version + 1);
        prev = ver;
    }
    /* A rebuild refuses an entry out of order or beyond the bound. */
    PSEmbed *b;
    assert_int_equal(rebuild(t, -1, NULL, NULL, &b), PSE_OK);
    const char *err;
    assert_int_equal(PSEmbed_LoadTomb(b, 1, st.version, &err), PSE_ERR_CORRUPT); /* full */
    PSEmbed_Free(b);
    assert_int_equal(rebuild(t, -1, NULL, NULL, &b), PSE_OK);
    PSEmbed_Free(b);
    /* A TTL change restarts the log at this version; a smaller log keeps
     * the newest entries and moves the horizon. */
    PSEmbedConfig c2 = c;
    c2.tombstones = 3;
    assert_int_equal(PSEmbed_Reconfigure(t, &c2, &err), PSE_OK);
    assert_int_equal(PSEmbed_TombLen(t), 3);
    PSEmbedState st2;
    PSEmbed_GetState(t, &st2);
    assert_true(st2.tomb_horizon >= st.tomb_horizon);
    c2.ttl = 5;
    assert_int_equal(PSEmbed_Reconfigure(t, &c2, &err), PSE_OK);
    PSEmbed_GetState(t, &st2);
    assert_int_equal(PSEmbed_TombLen(t), 0);
    assert_int_equal(st2.tomb_horizon, st2.version + 1);
    c2.tombstones = PSE_MAX_TOMBSTONES + 1;
    assert_int_equal(PSEmbed_Reconfigure(t, &c2, &err), PSE_ERR_ARG);
    PSEmbed_Free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tombstones_let_a_consumer_follow_every_eviction),
        cmocka_unit_test(test_tombstone_log_bounds_and_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
