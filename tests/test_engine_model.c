/* test_engine_model.c -- cmocka tests of the model layer of libps on the
 * request engine, against fake nodes (fake_node.h): pulls decoded into
 * place (also a byte at a time), MINVERSION waits, pipelined big
 * partitions, the VERSION pushes send, roll-backs, lost WAITs, and freeing
 * a model with requests in flight. No redis-server is involved. */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "protocol.h"

#include "ps_internal.h"
#include "wire.h"
#include "fake_node.h"
#include "client_helpers.h"

/* ========================================================================
 * Models on the engine: versions, WAIT, roll-backs, freeing
 * ======================================================================== */

static void test_pull_decodes_every_partition_into_place(void **state) {
    fake *a = fake_start("A");
    psClient *c = connect_to(a, NULL);
    psModel *m = model4();
    float w[8];
    float *dst[1] = {w};
    uint64_t v[1];
    (void)state;
    assert_int_equal(psModelPull(c, m, dst, v), PS_OK);
    assert_int_equal(psModelNumPartitions(m, 0), 4);
    for (int i = 0; i < 8; i++) assert_true(w[i] == (float)(i / 2 + 1));
    assert_int_equal(v[0], 10);         /* the minimum over the partitions */
    for (int p = 0; p < 4; p++) assert_int_equal(psModelPartitionVersion(m, 0, p), 10 + 5 * p);
    assert_int_equal(c->stats.pulls, 4);
    close_all(a, c, m);
}

/* Replies cut at every byte boundary are framed the same. */
static void test_pull_reads_replies_that_arrive_a_byte_at_a_time(void **state) {
    fake *a = fake_start("A");
    psClient *c = connect_to(a, NULL);
    psModel *m = model4();
    float w[8];
    float *dst[1] = {w};
    (void)state;
    a->trickle = 1;
    assert_int_equal(psModelPull(c, m, dst, NULL), PS_OK);
    for (int i = 0; i < 8; i++) assert_true(w[i] == (float)(i / 2 + 1));
    assert_int_equal(psModelPartitionVersion(m, 0, 3), 25);
    close_all(a, c, m);
}

/* PS.PULL MINVERSION seen by the fake: per partition the last value asked
 * and its TIMEOUT (pulls without MINVERSION leave them); partition 2
 * answers nil (a timed out wait). */
static long long MinAsked[4], TimeoutAsked[4];

static int minversion_hook(fake *f, int fd, int argc, char **argv, size_t *argl, int *close_it) {
    (void)argl;
    (void)close_it;
    if (strcmp(argv[0], "PS.PULL") != 0) return 0;
    int p = key_part(argv[1]);
    const char *mv = arg_after(argc, argv, "MINVERSION"), *to = arg_after(argc, argv, "TIMEOUT");
    if (!mv) return 0;
    MinAsked[p] = atoll(mv);
    TimeoutAsked[p] = to ? atoll(to) : -1;
    if (p != 2) return 0;
    out(f, fd, "$-1\r\n");
    return 1;
}

static void test_pull_min_version_waits_above_the_last_pull_and_repulls_after_a_timeout(
    void **state) {
    fake *a = fake_start("A");
    psClient *c = connect_to(a, NULL);
    psModel *m = model4();
    float w[8];
    float *dst[1] = {w};
    uint64_t v[1];
    (void)state;
    a->hook = minversion_hook;
    /* Never pulled: nothing to wait for, a plain pull. */
    assert_int_equal(psModelPullMinVersion(c, m, dst, NULL, 100, v), 0);
    for (int p = 0; p < 4; p++) assert_int_equal(MinAsked[p], 0);
    /* Then each partition waits for one above its version (10 + 5p); the
     * nil of partition 2 makes one plain pull of the whole model follow. */
    memset(w, 0, sizeof(w));
    assert_int_equal(psModelPullMinVersion(c, m, dst, NULL, 100, v), 1);
    assert_int_equal(fake_count(a, "PS.PULL "), 12);
    for (int i = 0; i < 8; i++) assert_true(w[i] == (float)(i / 2 + 1));
    assert_int_equal(v[0], 10);
    for (int p = 0; p < 4; p++) {
        assert_int_equal(MinAsked[p], 11 + 5 * p);
        assert_int_equal(TimeoutAsked[p], 100);
    }
    /* Explicit minimum versions per tensor; a bad timeout changes nothing. */
    uint64_t want[1] = {12};
    assert_int_equal(psModelPullMinVersion(c, m, dst, want, 250, NULL), 1);
    assert_int_equal(fake_count(a, "PS.PULL "), 20);
    for (int p = 0; p < 4; p++) assert_true(MinAsked[p] == 12 && TimeoutAsked[p] == 250);
    assert_int_equal(psModelPullMinVersion(c, m, dst, NULL, 0, NULL), PS_ERR);
    assert_int_equal(c->err, PS_ERR_ARG);
    assert_int_equal(fake_count(a, "PS.PULL "), 20);
    close_all(a, c, m);
}

/* 64 KB partitions: pipelined replies larger than a read, and pushes
 * written with sendmsg straight from the push buffer. */
static void test_big_partitions_pull_and_push_pipelined(void **state) {
    fake *a = fake_start("A");
    psClient *c = connect_to(a, NULL);
    psModel *m = psModelNew("j");
    uint64_t dims[2] = {4, 16384};
    size_t n = 4 * 16384;
    float *w = malloc(n * sizeof(float)), *g = calloc(n, sizeof(float));
    float *dst[1] = {w};
    const float *grads[1] = {g};
    (void)state;
    psModelSetPartitionBytes(m, 65536);
    assert_int_equal(psModelAddTensor(m, "w", 2, dims), 0);
    a->pull_floats = 16384;
    for (int round = 0; round < 3; round++) {
        memset(w, 0, n * sizeof(float));
        assert_int_equal(psModelPull(c, m, dst, NULL), PS_OK);
        for (size_t i = 0; i < n; i++) assert_true(w[i] == (float)(i / 16384 + 1));
        assert_int_equal(psModelPush(c, m, grads, NULL, 1.0f), PS_OK);
    }
    assert_int_equal(psDrain(c), PS_OK);
    assert_int_equal(c->stats.pushes, 12);
    assert_int_equal(fake_count(a, "PS.PUSHGRAD j:w:3 V25 "), 3);
    psModelFree(m);
    psClientFree(c);
    free(w);
    free(g);
    fake_stop(a);
}

/* Push zeros without explicit versions and expect partition p's command to
 * carry VERSION base + 5p. */
static void push_expect_versions(psClient *c, psModel *m, fake *a, int base) {
    char want[32];
    push_zeros(c, m, NULL);
    assert_int_equal(psDrain(c), PS_OK);
    for (int p = 0; p < 4; p++) {
        snprintf(want, sizeof(want), "PS.PUSHGRAD j:w:%d V%d ", p, base + 5 * p);
        assert_int_equal(fake_count(a, want), 1);
    }
}

/* Pushes without explicit versions carry, per partition, the version of
 * the data of the last completed pull, also when the replies of a newer
 * pull were read meanwhile (an overlapped pull). */
static void test_push_sends_each_partition_the_version_of_the_last_completed_pull(void **state) {
    fake *a = fake_start("A");
    psClient *c = connect_to(a, NULL);
    psModel *m = model4();
    float w[8], w2[8];
    float *dst[1] = {w}, *dst2[1] = {w2};
    redisReply *r;
    (void)state;
    assert_int_equal(psModelPull(c, m, dst, NULL), PS_OK);
    a->pull_version_add = 100;
    assert_int_equal(psModelPullAsync(c, m, dst2), PS_OK);
    r = psCommand(c, NULL, "PING");     /* reads the new pull's replies */
    assert_non_null(r);
    freeReplyObject(r);
    push_expect_versions(c, m, a, 10);
    assert_int_equal(psModelPullWait(c, m, NULL), PS_OK);
    push_expect_versions(c, m, a, 110);
    /* explicit versions are per tensor, as before */
    uint64_t v[1] = {3};
    push_zeros(c, m, v);
    assert_int_equal(psDrain(c), PS_OK);
    assert_int_equal(fake_count(a, "PS.PUSHGRAD j:w:2 V3 "), 1);
    close_all(a, c, m);
}

static void test_push_rolled_back_version_is_resent_with_the_servers(void **state) {
    fake *a = fake_start("A");
    psClient *c = connect_to(a, NULL);
    psModel *m = model4();
    uint64_t v[1] = {30};
    psOptions o = {0};
    (void)state;
    o.lost_state_policy = PS_LOST_STATE_CONTINUE;   /* stop: test_durability.c */
    psClientFree(c);
    c = connect_to(a, &o);
    a->rollback = 1;
    push_zeros(c, m, v);
    assert_int_equal(psDrain(c), PS_OK);
    assert_int_equal(fake_count(a, "PS.PUSHGRAD j:w:0 V30 "), 1);
    assert_int_equal(fake_count(a, "PS.PUSHGRAD j:w:0 V7 "), 1);
    assert_int_equal(fake_count(a, "PS.PUSHGRAD j:w:1 V30 "), 1);
    assert_int_equal(c->stats.pushes, 4);
    assert_int_equal(c->stats.push_errors, 0);
    close_all(a, c, m);
}

static void test_lost_wait_resends_its_pushes_with_the_same_seqs(void **state) {
    fake *a = fake_start("A");
    psOptions o = {0};
    psClient *c;
    psModel *m = model4();
    char first[96];
    (void)state;
    o.wait_replicas = 1;
    o.backoff_ms = 1;
    a->drop_wait = 1;
    c = connect_to(a, &o);
    push_zeros(c, m, NULL);
    assert_int_equal(psDrain(c), PS_OK);
    assert_int_equal(fake_count(a, "PS.PUSHGRAD j:w:3 "), 2);
    /* both sends of a partition carry the same ID seq */
    int at = fake_find(a, "PS.PUSHGRAD j:w:3 ");
    assert_true(at >= 0);
    snprintf(first, sizeof(first), "%s", a->log[at]);
    assert_int_equal(fake_count(a, first), 2);
    assert_int_equal(c->stats.pushes, 4);
    assert_true(c->stats.wait_short >= 1);
    /* The resent pushes are WAITed for on the node that applied them again. */
    assert_int_equal(fake_count(a, "WAIT"), 2);
    close_all(a, c, m);
}

/* psModelFree with pushes in flight waits for them (the engine points into
 * the model and its batches until they are answered). */
static void test_model_free_waits_for_its_pushes_in_flight(void **state) {
    fake *a = fake_start("A");
    psOptions o = {0};
    psClient *c;
    psModel *m = model4();
    redisReply *r;
    (void)state;
    o.push_window = 4;
    a->push_delay_ms = 20;
    c = connect_to(a, &o);
    push_zeros(c, m, NULL);
    push_zeros(c, m, NULL);
    psModelFree(m);
    assert_int_equal(c->stats.pushes, 8);
    assert_int_equal(psDrain(c), PS_OK);
    r = psCommand(c, NULL, "PING");
    assert_non_null(r);
    freeReplyObject(r);
    psClientFree(c);
    fake_stop(a);
}

/* A pull in flight is abandoned by psModelFree: its replies, read later,
 * write nothing (the destination may be gone already). */
static void test_model_free_abandons_a_pull_in_flight(void **state) {
    fake *a = fake_start("A");
    psClient *c = connect_to(a, NULL);
    psModel *m = model4();
    float *w = calloc(8, sizeof(float));
    float *dst[1] = {w};
    redisReply *r;
    (void)state;
    assert_int_equal(psModelPullAsync(c, m, dst), PS_OK);
    free(w);                            /* the caller gives up on the pull */
    psModelFree(m);
    r = psCommand(c, NULL, "PING");
    assert_non_null(r);
    assert_string_equal(r->str, "PONG");
    freeReplyObject(r);
    psClientFree(c);
    fake_stop(a);
}

/* Freeing the client first leaves the model safe to free. */
static void test_model_free_after_client_free_is_safe(void **state) {
    fake *a = fake_start("A");
    psClient *c = connect_to(a, NULL);
    psModel *m = model4();
    float w[8];
    float *dst[1] = {w};
    (void)state;
    a->push_delay_ms = 20;
    push_zeros(c, m, NULL);
    assert_int_equal(psModelPullAsync(c, m, dst), PS_OK);
    psClientFree(c);
    psModelFree(m);
    fake_stop(a);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pull_decodes_every_partition_into_place),
        cmocka_unit_test(test_pull_reads_replies_that_arrive_a_byte_at_a_time),
        cmocka_unit_test(test_pull_min_version_waits_above_the_last_pull_and_repulls_after_a_timeout),
        cmocka_unit_test(test_big_partitions_pull_and_push_pipelined),
        cmocka_unit_test(test_push_sends_each_partition_the_version_of_the_last_completed_pull),
        cmocka_unit_test(test_push_rolled_back_version_is_resent_with_the_servers),
        cmocka_unit_test(test_lost_wait_resends_its_pushes_with_the_same_seqs),
        cmocka_unit_test(test_model_free_waits_for_its_pushes_in_flight),
        cmocka_unit_test(test_model_free_abandons_a_pull_in_flight),
        cmocka_unit_test(test_model_free_after_client_free_is_safe),
    };
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
