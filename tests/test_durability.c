/* test_durability.c -- cmocka tests of libps durability (libps/durable.c
 * and its use in batch.c) against fake nodes (fake_node.h): a node whose
 * WAITs come back short under each policy (degrade, block, fail), a replica
 * that comes back (probe and restore), and lost-state events (a key that
 * vanished, a version that went back, a push based on a version the server
 * lost). */

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

#include "ps_internal.h"
#include "fake_node.h"
#include "client_helpers.h"

/* Events received through psOptions.on_event. */
typedef struct events {
    int n[4];                   /* per PS_EVENT_* */
    char last[4][512];
} events;

static void on_event(void *udata, int ev, const char *node, const char *msg) {
    events *e = udata;
    (void)node;
    if (ev < 1 || ev > 3) return;
    e->n[ev]++;
    snprintf(e->last[ev], sizeof(e->last[ev]), "%s", msg);
}

/* A client of 'f' with WAIT 1 under 'policy', events into 'e'. */
static psClient *wait_client(fake *f, int policy, events *e) {
    psOptions o = {0};
    memset(e, 0, sizeof(*e));
    o.wait_replicas = 1;
    o.durability_policy = policy;
    o.probe_ms = 20;
    o.on_event = on_event;
    o.event_udata = e;
    return connect_to(f, &o);
}

/* Push zeros to model4() 'm' (with 'versions', or NULL) expecting an
 * error: the failing reply may be read by the push itself or by the drain
 * after it, so one of the two returns PS_ERR; c->err says which error. */
static void push_zeros_fails(psClient *c, psModel *m, const uint64_t *versions) {
    float g[8] = {0};
    const float *grads[1] = {g};
    if (psModelPush(c, m, grads, versions, 1.0f) == PS_OK) assert_int_equal(psDrain(c), PS_ERR);
}

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Degrade: the first short WAIT announces the node once; its later pushes
 * are not WAITed for but counted as not replicated; once a probe finds an
 * online replica the node is restored (announced) and WAITs resume. */
static void test_degrade_announces_once_counts_unreplicated_and_recovers(void **state) {
    fake *a = fake_start("A");
    events e;
    psClient *c = wait_client(a, PS_DURABILITY_DEGRADE, &e);
    psModel *m = model4();
    (void)state;
    a->wait_zero = -1;
    for (int i = 0; i < 5; i++) push_zeros(c, m, NULL);
    assert_int_equal(psDrain(c), PS_OK);
    /* Not one per push: only those sent before the first short answer was
     * read (at most the push window, 2). */
    assert_true(fake_count(a, "WAIT") <= 2);
    assert_int_equal(e.n[PS_EVENT_DEGRADED], 1);
    assert_non_null(strstr(e.last[PS_EVENT_DEGRADED], "degraded on 127.0.0.1:"));
    assert_non_null(strstr(e.last[PS_EVENT_DEGRADED], "policy degrade"));
    assert_int_equal(c->stats.unreplicated_pushes, 20);  /* 5 model pushes x 4 partitions */
    assert_int_equal(c->stats.degraded_nodes, 1);
    assert_int_equal(c->stats.pushes, 20);

    /* The replica is back: a probe (every probe_ms) notices it. */
    a->wait_zero = 0;
    a->info_online = 1;
    double t0 = mono_s();
    while (e.n[PS_EVENT_RESTORED] == 0 && mono_s() - t0 < 5) {
        push_zeros(c, m, NULL);
        assert_int_equal(psDrain(c), PS_OK);
        sleep_ms(10);
    }
    assert_int_equal(e.n[PS_EVENT_RESTORED], 1);
    assert_true(fake_find(a, "INFO") > fake_find(a, "WAIT"));   /* probed after the short WAIT */
    assert_int_equal(c->stats.degraded_nodes, 0);
    uint64_t unrep = c->stats.unreplicated_pushes;
    int waits = fake_count(a, "WAIT");
    push_zeros(c, m, NULL);
    assert_int_equal(psDrain(c), PS_OK);
    assert_int_equal(fake_count(a, "WAIT"), waits + 1);  /* full durability again */
    assert_int_equal(c->stats.unreplicated_pushes, unrep);
    assert_int_equal(e.n[PS_EVENT_DEGRADED], 1);
    close_all(a, c, m);
}

/* Block: a push whose WAIT is short is WAITed for again until the replica
 * answers; nothing is counted as unreplicated. */
static void test_block_waits_again_until_a_replica_answers(void **state) {
    fake *a = fake_start("A");
    events e;
    psClient *c = wait_client(a, PS_DURABILITY_BLOCK, &e);
    psModel *m = model4();
    (void)state;
    a->wait_zero = 3;
    push_zeros(c, m, NULL);
    assert_int_equal(psDrain(c), PS_OK);
    assert_int_equal(fake_count(a, "WAIT"), 4);
    assert_int_equal(e.n[PS_EVENT_DEGRADED], 1);
    assert_non_null(strstr(e.last[PS_EVENT_DEGRADED], "policy block"));
    assert_int_equal(e.n[PS_EVENT_RESTORED], 1);
    assert_int_equal(c->stats.unreplicated_pushes, 0);
    assert_int_equal(c->stats.wait_short, 3);
    close_all(a, c, m);
}

/* Fail: the call that reads the short WAIT fails with PS_ERR_DURABILITY
 * naming the node. */
static void test_fail_reports_a_durability_error_naming_the_node(void **state) {
    fake *a = fake_start("A");
    events e;
    psClient *c = wait_client(a, PS_DURABILITY_FAIL, &e);
    psModel *m = model4();
    char want[64];
    (void)state;
    a->wait_zero = -1;
    push_zeros_fails(c, m, NULL);       /* the short WAIT's reply */
    assert_int_equal(c->err, PS_ERR_DURABILITY);
    snprintf(want, sizeof(want), "127.0.0.1:%d", a->port);
    assert_non_null(strstr(c->errstr, want));
    assert_non_null(strstr(c->errstr, "policy fail"));
    assert_int_equal(e.n[PS_EVENT_DEGRADED], 1);
    close_all(a, c, m);
}

/* A key this client pulled answers "no such key": a lost-state error with
 * the key, the node and the version it saw, never a bare "no such key". */
static void test_vanished_key_is_a_lost_state_error(void **state) {
    fake *a = fake_start("A");
    psClient *c = connect_to(a, NULL);
    psModel *m = model4();
    float w[8];
    float *dst[1] = {w};
    char want[64];
    (void)state;
    assert_int_equal(psModelPull(c, m, dst, NULL), PS_OK);
    a->nokey = 1;
    assert_int_equal(psModelPull(c, m, dst, NULL), PS_ERR);
    assert_int_equal(c->err, PS_ERR_LOST_STATE);
    assert_non_null(strstr(c->errstr, "lost state: j:w:"));
    assert_non_null(strstr(c->errstr, "is gone"));
    assert_non_null(strstr(c->errstr, "acknowledged"));
    assert_non_null(strstr(c->errstr, "without persistence"));
    snprintf(want, sizeof(want), "127.0.0.1:%d", a->port);
    assert_non_null(strstr(c->errstr, want));
    assert_int_equal(c->stats.lost_state, 4);
    /* A push to it too. */
    push_zeros_fails(c, m, NULL);
    assert_int_equal(c->err, PS_ERR_LOST_STATE);
    close_all(a, c, m);
}

/* A key never seen by this client that is missing is not a lost state, but
 * the error says what it may be. */
static void test_missing_key_never_seen_is_explained(void **state) {
    fake *a = fake_start("A");
    psClient *c = connect_to(a, NULL);
    psModel *m = model4();
    float w[8];
    float *dst[1] = {w};
    (void)state;
    a->nokey = 1;
    assert_int_equal(psModelPull(c, m, dst, NULL), PS_ERR);
    assert_int_equal(c->err, PS_ERR_SERVER);
    assert_non_null(strstr(c->errstr, "never seen by this client"));
    assert_int_equal(c->stats.lost_state, 0);
    close_all(a, c, m);
}

/* A pull answering a version below one this client saw: lost state (stop),
 * or announced, counted and accepted (continue). */
static void test_version_rolled_back_stops_or_continues_per_policy(void **state) {
    fake *a = fake_start("A");
    events e;
    psOptions o = {0};
    psClient *c = connect_to(a, NULL);
    psModel *m = model4();
    float w[8];
    float *dst[1] = {w};
    uint64_t v[1];
    (void)state;
    assert_int_equal(psModelPull(c, m, dst, NULL), PS_OK);
    a->pull_version_add = -3;
    assert_int_equal(psModelPull(c, m, dst, NULL), PS_ERR);
    assert_int_equal(c->err, PS_ERR_LOST_STATE);
    assert_non_null(strstr(c->errstr, "went back to version 7"));
    assert_non_null(strstr(c->errstr, "saw version 10 acknowledged"));
    psModelFree(m);
    psClientFree(c);

    a->pull_version_add = 0;
    memset(&e, 0, sizeof(e));
    o.lost_state_policy = PS_LOST_STATE_CONTINUE;
    o.on_event = on_event;
    o.event_udata = &e;
    c = connect_to(a, &o);
    m = model4();
    assert_int_equal(psModelPull(c, m, dst, NULL), PS_OK);
    a->pull_version_add = -3;
    assert_int_equal(psModelPull(c, m, dst, v), PS_OK);
    assert_int_equal(v[0], 7);
    assert_int_equal(c->stats.lost_state, 4);
    assert_int_equal(e.n[PS_EVENT_LOST_STATE], 4);
    assert_non_null(strstr(e.last[PS_EVENT_LOST_STATE], "policy continue"));
    /* The server's version is the new base: no event on the next pull. */
    assert_int_equal(psModelPull(c, m, dst, NULL), PS_OK);
    assert_int_equal(c->stats.lost_state, 4);
    close_all(a, c, m);
}

/* "VERSION v is newer than the tensor's version": with policy stop the
 * push fails with the lost-state error (continue: test_engine_model.c). */
static void test_push_based_on_a_lost_version_stops(void **state) {
    fake *a = fake_start("A");
    psClient *c = connect_to(a, NULL);
    psModel *m = model4();
    uint64_t v[1] = {30};
    (void)state;
    a->rollback = 1;
    push_zeros_fails(c, m, v);
    assert_int_equal(c->err, PS_ERR_LOST_STATE);
    assert_non_null(strstr(c->errstr, "went back to version 7"));
    assert_non_null(strstr(c->errstr, "saw version 30"));
    assert_int_equal(fake_count(a, "PS.PUSHGRAD j:w:0 V7 "), 0);   /* not resent */
    assert_int_equal(c->stats.lost_state, 1);
    close_all(a, c, m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_degrade_announces_once_counts_unreplicated_and_recovers),
        cmocka_unit_test(test_block_waits_again_until_a_replica_answers),
        cmocka_unit_test(test_fail_reports_a_durability_error_naming_the_node),
        cmocka_unit_test(test_vanished_key_is_a_lost_state_error),
        cmocka_unit_test(test_missing_key_never_seen_is_explained),
        cmocka_unit_test(test_version_rolled_back_stops_or_continues_per_policy),
        cmocka_unit_test(test_push_based_on_a_lost_version_stops),
    };
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
