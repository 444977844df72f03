/* test_snapshot.c -- cmocka tests of module/core/snapshot.c and copies:
 * snapshots share buffers until the next write (copy on write), rollback
 * restores values and optimizer state as a new version, the saved form
 * (which arrays a snapshot shares, the one validator of both loaders), and
 * PSTensor_Copy. */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "header.h"
#include "tensor.h"
#include "tensor_helpers.h"

/* ------------------------------------------------------------------------
 * Snapshots, copy on write, rollback
 * ---------------------------------------------------------------------- */

static void test_snapshot_shares_buffers_until_the_next_write(void **st) {
    (void)st;
    const size_t n = 4096;
    PSTensor *t = mk1(n, PS_OPT_ADAM, 0.01);
    push_random(t, 3);
    size_t before = PSTensor_MemUsage(t);
    PSBuf *d = t->data, *s0 = t->opt.s[0], *s1 = t->opt.s[1];
    assert_int_equal(PSTensor_SnapshotTake(t, "s1", 2, 1234), PST_OK);
    PSSnapshot *s = PSTensor_SnapshotFind(t, "s1", 2);
    assert_non_null(s);
    assert_ptr_equal(s->data, d);
    assert_ptr_equal(s->opt.s[0], s0);
    assert_ptr_equal(s->opt.s[1], s1);
    assert_ptr_equal(t->data, d);
    assert_int_equal(d->refs, 2);
    assert_int_equal(s->version, 3);
    assert_int_equal(s->unix_ms, 1234);
    assert_int_equal(s->opt.step, 3);
    size_t after = PSTensor_MemUsage(t);
    assert_true(after > before);
    assert_true(after - before < 1024); /* no copy of 3 x 16 KB */
    /* The next write copies: the snapshot keeps the old buffers. */
    float *old = malloc(n * 4);
    memcpy(old, d->v, n * 4);
    push_random(t, 1);
    assert_ptr_not_equal(t->data, d);
    assert_ptr_not_equal(t->opt.s[0], s0);
    assert_ptr_not_equal(t->opt.s[1], s1);
    assert_ptr_equal(s->data, d);
    assert_int_equal(d->refs, 1);
    assert_true(bits_equal(s->data->v, old, n));
    assert_false(bits_equal(t->data->v, old, n));
    size_t split = PSTensor_MemUsage(t);
    assert_true(split >= after + 3 * n * sizeof(float));
    /* A second write does not copy again. */
    PSBuf *d2 = t->data;
    push_random(t, 1);
    assert_ptr_equal(t->data, d2);
    assert_int_equal(PSTensor_MemUsage(t), split);
    free(old);
    /* Dropping frees the snapshot's own buffers. */
    assert_int_equal(PSTensor_SnapshotDrop(t, "s1", 2), 1);
    assert_int_equal(PSTensor_SnapshotDrop(t, "s1", 2), 0);
    assert_int_equal(t->nsnap, 0);
    assert_true(PSTensor_MemUsage(t) < after);
    PSTensor_Free(t);
}

static void test_set_values_copies_on_write_and_bumps_the_version(void **st) {
    (void)st;
    PSTensor *t = mk1(8, PS_OPT_SGD, 0.1);
    float old[8], nv[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    memcpy(old, t->data->v, sizeof(old));
    assert_int_equal(PSTensor_SnapshotTake(t, "a", 1, 0), PST_OK);
    assert_int_equal(PSTensor_SetValues(t, (const unsigned char *)nv), PST_OK);
    assert_int_equal(t->version, 1);
    assert_bits_equal(t->data->v, nv, 8, "set");
    assert_bits_equal(t->snaps[0].data->v, old, 8, "snapshot after set");
    PSTensor_Free(t);
}

static void test_rollback_restores_values_and_optimizer_state_as_a_new_version(void **st) {
    (void)st;
    for (int kind = 0; kind < PS_OPT_COUNT; kind++) {
        if (kind == PS_OPT_ACCUM) continue; /* pushes do not move its version: test_accum.c */
        const size_t n = 64;
        PSTensor *t = mk1(n, kind, 0.05);
        push_random(t, 4);
        State at = save_state(t);
        PSTensor *twin = PSTensor_Copy(t); /* what training would do from here */
        assert_int_equal(PSTensor_SnapshotTake(t, "good", 4, 99), PST_OK);
        push_random(t, 5);
        assert_int_equal(t->version, 9);
        PSSnapshot *s = PSTensor_SnapshotFind(t, "good", 4);
        assert_int_equal(PSTensor_Rollback(t, s), PST_OK);
        assert_int_equal(t->version, 10); /* rollback is a new version */
        assert_int_equal(t->opt.step, at.step);
        assert_true(t->opt.b1pow == at.b1pow && t->opt.b2pow == at.b2pow);
        assert_bits_equal(t->data->v, at.data, n, "rolled back values");
        if (at.s0) assert_bits_equal(t->opt.s[0]->v, at.s0, n, "rolled back state 0");
        if (at.s1) assert_bits_equal(t->opt.s[1]->v, at.s1, n, "rolled back state 1");
        /* Shares the snapshot's buffers; a push after it equals a push on the
         * twin, and leaves the snapshot intact for a second rollback. */
        assert_ptr_equal(t->data, s->data);
        float g[64];
        fill(g, n, -1, 1);
        PSPush p = dense(g);
        PSPushResult r;
        assert_int_equal(PSTensor_Push(t, &p, &r), PST_OK);
        assert_int_equal(PSTensor_Push(twin, &p, &r), PST_OK);
        assert_bits_equal(t->data->v, twin->data->v, n, "push after rollback");
        for (int j = 0; j < ps_optim_nstate(kind); j++)
            assert_bits_equal(t->opt.s[j]->v, twin->opt.s[j]->v, n, "state after rollback");
        s = PSTensor_SnapshotFind(t, "good", 4);
        assert_bits_equal(s->data->v, at.data, n, "snapshot after push");
        assert_int_equal(PSTensor_Rollback(t, s), PST_OK);
        assert_int_equal(t->version, 12);
        assert_bits_equal(t->data->v, at.data, n, "second rollback");
        free(at.data), free(at.s0), free(at.s1);
        PSTensor_Free(twin);
        PSTensor_Free(t);
    }
}

static void test_rollback_discards_an_open_sync_round(void **st) {
    (void)st;
    PSTensor *t = mk1(4, PS_OPT_SGD, 0.1);
    t->sync_n = 3;
    assert_int_equal(PSTensor_SnapshotTake(t, "z", 1, 0), PST_OK);
    float g[4] = {1, 2, 3, 4};
    PSPush p = dense(g);
    PSPushResult r;
    assert_int_equal(PSTensor_Push(t, &p, &r), PST_PENDING);
    assert_int_equal(PSTensor_Rollback(t, &t->snaps[0]), PST_OK);
    assert_int_equal(t->round_count, 0);
    assert_null(t->round_acc);
    assert_int_equal(t->version, 1);
    PSTensor_Free(t);
}

/* ------------------------------------------------------------------------
 * Copy
 * ---------------------------------------------------------------------- */

static void test_copy_is_independent_of_the_original(void **st) {
    (void)st;
    const size_t n = 50;
    PSTensor *t = mk1(n, PS_OPT_ADAMW, 0.01);
    t->h.wd = 0.01;
    float g[50];
    fill(g, n, -1, 1);
    PSPush p = dense(g);
    p.id = "c1", p.idlen = 2, p.seq = 1;
    PSPushResult r;
    assert_int_equal(PSTensor_Push(t, &p, &r), PST_OK);
    assert_int_equal(PSTensor_SnapshotTake(t, "s", 1, 5), PST_OK);
    t->stats.pulls = 7;
    PSTensor *c = PSTensor_Copy(t);
    assert_non_null(c);
    assert_int_equal(c->version, t->version);
    assert_int_equal(c->nsnap, 1);
    assert_int_equal(c->dedup_len, 1);
    assert_ptr_not_equal(c->dedup, t->dedup);
    assert_ptr_not_equal(c->dedup[0].id, t->dedup[0].id);
    assert_ptr_not_equal(c->snaps[0].name, t->snaps[0].name);
    assert_int_equal(c->stats.pulls, 0); /* counters start fresh */
    State ts = save_state(t);
    /* Writes to the copy do not reach the original ... */
    push_random(c, 2);
    p.seq = 2;
    assert_int_equal(PSTensor_Push(c, &p, &r), PST_OK);
    assert_int_equal(PSTensor_SnapshotDrop(c, "s", 1), 1);
    assert_int_equal(PSTensor_SnapshotTake(c, "other", 5, 6), PST_OK);
    assert_state_unchanged(t, &ts);
    assert_int_equal(PSTensor_DedupFind(t, "c1", 2)->seq, 1);
    assert_non_null(PSTensor_SnapshotFind(t, "s", 1));
    assert_null(PSTensor_SnapshotFind(t, "other", 5));
    /* ... and the other way round. */
    State cs = save_state(c);
    push_random(t, 3);
    assert_state_unchanged(c, &cs);
    PSTensor_Free(t);
    /* The copy outlives the original. */
    push_random(c, 1);
    PSTensor_Free(c);
}

static void test_copy_clones_an_open_round(void **st) {
    (void)st;
    PSTensor *t = mk1(3, PS_OPT_SGD, 0.1);
    t->sync_n = 2;
    float g[3] = {1, 2, 3};
    PSPush p = dense(g);
    PSPushResult r;
    assert_int_equal(PSTensor_Push(t, &p, &r), PST_PENDING);
    PSTensor *c = PSTensor_Copy(t);
    assert_ptr_not_equal(c->round_acc, t->round_acc);
    assert_int_equal(PSTensor_Push(c, &p, &r), PST_OK);
    assert_int_equal(t->round_count, 1);
    assert_bits_equal(t->round_acc->v, g, 3, "original round");
    PSTensor_Free(c);
    PSTensor_Free(t);
}

/* ------------------------------------------------------------------------
 * Saved form: sharing between snapshots, one validator
 * ---------------------------------------------------------------------- */

static void test_snapshots_taken_back_to_back_hold_one_array_counted_once(void **st) {
    (void)st;
    PSTensor *one = mk1(1000, PS_OPT_ADAM, 0.01), *two = mk1(1000, PS_OPT_ADAM, 0.01);
    assert_int_equal(PSTensor_SnapshotTake(one, "a", 1, 0), PST_OK);
    assert_int_equal(PSTensor_SnapshotTake(two, "a", 1, 0), PST_OK);
    assert_int_equal(PSTensor_SnapshotTake(two, "b", 1, 0), PST_OK);
    push_random(one, 1);
    push_random(two, 1);
    /* After the write the snapshots no longer share the live arrays, but
     * 'b' still holds 'a''s. */
    for (int j = 0; j < 3; j++) {
        assert_int_equal(PSTensor_SnapshotArrayOwner(two, 0, j), PS_SNAP_OWNS);
        assert_int_equal(PSTensor_SnapshotArrayOwner(two, 1, j), 0);
    }
    const size_t m1 = PSTensor_MemUsage(one), m2 = PSTensor_MemUsage(two);
    assert_true(m1 > 6 * 4 * 1000);
    assert_true(m2 - m1 < 64 + sizeof(PSSnapshot));
    PSSnapshotSaved ss;
    PSTensor_SnapshotDescribe(two, 1, &ss);
    assert_int_equal(ss.flags, 7 * PS_SNAP_SHARES_EARLIER);
    for (int j = 0; j < 3; j++) assert_false(PSTensor_SnapshotSavesArray(two, &ss, j));
    PSTensor_Free(one);
    PSTensor_Free(two);
}

static void test_snapshot_check_is_the_one_validator_of_saved_snapshots(void **st) {
    (void)st;
    PSTensor *t = mk1(8, PS_OPT_MOMENTUM, 0.1);
    push_random(t, 2);
    PSSnapshotSaved ok = {.version = 2, .b1pow = 1, .b2pow = 1, .flags = 0};
    char name[PS_SNAP_NAME_MAX + 1];
    memset(name, 'x', sizeof(name));
    assert_null(PSTensor_SnapshotCheck(t, "a", 1, &ok, PS_SNAP_FLAGS_LIVE_ONLY));
    assert_null(PSTensor_SnapshotCheck(t, name, PS_SNAP_NAME_MAX, &ok, PS_SNAP_FLAGS_LIVE_ONLY));
    assert_non_null(PSTensor_SnapshotCheck(t, name, PS_SNAP_NAME_MAX + 1, &ok, PS_SNAP_FLAGS_ALL));
    assert_non_null(PSTensor_SnapshotCheck(t, "", 0, &ok, PS_SNAP_FLAGS_ALL));
    PSSnapshotSaved bad = ok;
    bad.version = 3; /* newer than the tensor */
    assert_non_null(PSTensor_SnapshotCheck(t, "a", 1, &bad, PS_SNAP_FLAGS_ALL));
    bad = ok;
    bad.b1pow = 1.5;
    assert_non_null(PSTensor_SnapshotCheck(t, "a", 1, &bad, PS_SNAP_FLAGS_ALL));
    bad = ok;
    bad.flags = PS_SNAP_SHARES_EARLIER; /* there is no earlier snapshot yet */
    assert_non_null(PSTensor_SnapshotCheck(t, "a", 1, &bad, PS_SNAP_FLAGS_ALL));
    assert_non_null(PSTensor_SnapshotCheck(t, "a", 1, &bad, PS_SNAP_FLAGS_LIVE_ONLY));

    /* 'a' with its own values, then 'b' holding 'a''s values and the live state. */
    PSBuf *own[3] = {PSBuf_New(8, 1), PSBuf_New(8, 1), NULL};
    own[0]->v[3] = 7;
    assert_int_equal(PSTensor_SnapshotAdd(t, "a", 1, &ok, own), PST_OK);
    assert_null(own[0]);
    assert_non_null(PSTensor_SnapshotCheck(t, "a", 1, &ok, PS_SNAP_FLAGS_ALL)); /* duplicate */
    PSSnapshotSaved b = ok;
    b.flags = PS_SNAP_SHARES_EARLIER | (PS_SNAP_SHARES_LIVE << 1);
    b.earlier[0] = 0;
    assert_null(PSTensor_SnapshotCheck(t, "b", 1, &b, PS_SNAP_FLAGS_ALL));
    bad = b;
    bad.flags |= PS_SNAP_SHARES_LIVE; /* values both live and earlier */
    assert_non_null(PSTensor_SnapshotCheck(t, "b", 1, &bad, PS_SNAP_FLAGS_ALL));
    assert_int_equal(PSTensor_SnapshotAdd(t, "b", 1, &b, NULL), PST_OK);
    assert_ptr_equal(t->snaps[1].data, t->snaps[0].data);
    assert_ptr_equal(t->snaps[1].opt.s[0], t->opt.s[0]);
    assert_true(t->snaps[1].data->v[3] == 7);
    PSTensor_Free(t);
}

static void test_restore_chunk_fills_only_an_unshared_array_within_bounds(void **st) {
    (void)st;
    PSTensor *t = mk1(4, PS_OPT_SGD, 0.1);
    const float v[2] = {1.5f, -2.5f};
    assert_int_equal(PSTensor_RestoreChunk(t, PS_RESTORE_DATA, 0, 2, v, sizeof(v)), PST_OK);
    assert_true(t->data->v[2] == 1.5f && t->data->v[3] == -2.5f);
    assert_int_equal(PSTensor_RestoreChunk(t, PS_RESTORE_DATA, 0, 3, v, sizeof(v)), PST_ERR_RANGE);
    assert_int_equal(PSTensor_RestoreChunk(t, PS_RESTORE_S0, 0, 0, v, sizeof(v)), PST_ERR_RANGE);
    assert_int_equal(PSTensor_RestoreChunk(t, PS_RESTORE_SNAPDATA, 0, 0, v, sizeof(v)), PST_ERR_RANGE);
    assert_int_equal(PSTensor_SnapshotTake(t, "s", 1, 0), PST_OK);
    /* Shared with the snapshot now: neither may be written by a CHUNK. */
    assert_int_equal(PSTensor_RestoreChunk(t, PS_RESTORE_DATA, 0, 0, v, sizeof(v)), PST_ERR_RANGE);
    assert_int_equal(PSTensor_RestoreChunk(t, PS_RESTORE_SNAPDATA, 0, 0, v, sizeof(v)), PST_ERR_RANGE);
    PSTensor_Free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_snapshot_shares_buffers_until_the_next_write),
        cmocka_unit_test(test_set_values_copies_on_write_and_bumps_the_version),
        cmocka_unit_test(test_rollback_restores_values_and_optimizer_state_as_a_new_version),
        cmocka_unit_test(test_rollback_discards_an_open_sync_round),
        cmocka_unit_test(test_copy_is_independent_of_the_original),
        cmocka_unit_test(test_copy_clones_an_open_round),
        cmocka_unit_test(test_snapshots_taken_back_to_back_hold_one_array_counted_once),
        cmocka_unit_test(test_snapshot_check_is_the_one_validator_of_saved_snapshots),
        cmocka_unit_test(test_restore_chunk_fills_only_an_unshared_array_within_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
