/* test_engine.c -- cmocka tests of the libps request engine (libps/engine.c)
 * alone, requests with callbacks and no model, against fake nodes
 * (fake_node.h: RESP servers on loopback ports run by threads of this
 * process, scripted per test): callbacks and sinks, MOVED/ASK, TRYAGAIN,
 * backlog, retries and their budget, reconnects, pipelining. The wire
 * encoders are tested in test_engine_wire.c, the model layer on the engine
 * in test_engine_model.c. No redis-server is involved. */

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
 * The engine alone: requests with callbacks, no model
 * ======================================================================== */

typedef struct seen {
    int calls;
    redisReply *reply;
    char sunk[16];
    size_t sunklen;
} seen;

static int on_done(psClient *c, psReq *r, redisReply *reply) {
    seen *s = r->udata;
    (void)c;
    s->calls++;
    s->reply = reply;
    return PSI_DONE;
}

static int on_bulk(psClient *c, psReq *r, int idx, int n, const char *data, size_t len) {
    seen *s = r->udata;
    (void)c;
    if (idx != 1 || n != 2 || len > sizeof(s->sunk)) return 0;
    memcpy(s->sunk, data, len);
    s->sunklen = len;
    return 1;
}

static int req_done(psClient *c, void *arg) {
    (void)c;
    return ((psReq *)arg)->state == PSS_DONE;
}

/* Submit the RESP text 'cmd' [+ 'blob' + 'tail'] routed by 'key', with
 * 'sink' (or none), and run until it is done. */
static void run_req(psClient *c, psReq *r, seen *s, const char *key, const char *cmd,
                    const char *blob, const char *tail, psReqSinkFn *sink) {
    memset(s, 0, sizeof(*s));
    psi_req_init(r, key, strlen(key));
    r->cmd = cmd;
    r->cmdlen = strlen(cmd);
    r->blob = (const unsigned char *)blob;
    r->bloblen = blob ? strlen(blob) : 0;
    r->tail = tail;
    r->taillen = tail ? strlen(tail) : 0;
    r->done = on_done;
    r->sink = sink;
    r->udata = s;
    psi_submit(c, r);
    assert_int_equal(psi_run(c, req_done, r), 0);
    assert_int_equal(s->calls, 1);
    assert_non_null(s->reply);
}

static void test_engine_completes_a_request_through_its_callback(void **state) {
    fake *a = fake_start("A");
    psClient *c = connect_to(a, NULL);
    psReq r;
    seen s;
    (void)state;
    run_req(c, &r, &s, "k1", "*2\r\n$3\r\nGET\r\n$2\r\nk1\r\n", NULL, NULL, NULL);
    assert_string_equal(s.reply->str, "A=k1");
    freeReplyObject(s.reply);
    /* "GET kk" in three parts: command head, blob (the key), tail */
    run_req(c, &r, &s, "kk", "*2\r\n$3\r\nGET\r\n$2\r\n", "kk", "\r\n", NULL);
    assert_string_equal(s.reply->str, "A=kk");
    freeReplyObject(s.reply);
    psClientFree(c);
    fake_stop(a);
}

static void test_engine_offers_bulk_strings_to_the_sink_before_the_reply(void **state) {
    fake *a = fake_start("A");
    psClient *c = connect_to(a, NULL);
    psReq r;
    seen s;
    float x[2];
    (void)state;
    run_req(c, &r, &s, "j:w:2", "*2\r\n$7\r\nPS.PULL\r\n$5\r\nj:w:2\r\n", NULL, NULL, on_bulk);
    assert_int_equal(s.sunklen, 8);
    memcpy(x, s.sunk, 8);
    assert_true(x[0] == 3.0f && x[1] == 3.0f);
    /* the reply keeps its shape, with an empty string where the data was */
    assert_int_equal(s.reply->type, REDIS_REPLY_ARRAY);
    assert_int_equal(s.reply->elements, 2);
    assert_int_equal(s.reply->element[0]->integer, 20);
    assert_int_equal(s.reply->element[1]->len, 0);
    freeReplyObject(s.reply);
    psClientFree(c);
    fake_stop(a);
}

/* Connect to 'a' (backoff 1 ms), GET k1 and expect 'want'. */
static psClient *get_k1(fake *a, const char *want) {
    psOptions o = {0};
    o.backoff_ms = 1;
    psClient *c = connect_to(a, &o);
    redisReply *r = psCommand(c, "k1", "GET %s", "k1");
    assert_non_null(r);
    assert_string_equal(r->str, want);
    freeReplyObject(r);
    return c;
}

static void test_engine_follows_moved_to_the_node_named(void **state) {
    fake *a = fake_start("A"), *b = fake_start("B");
    psClient *c;
    redisReply *r;
    (void)state;
    a->cluster = 1;
    c = connect_to(a, NULL);
    assert_int_equal(c->cluster, 1);
    a->moved_port = b->port;            /* the slots moved to B */
    a->slots_port = b->port;
    r = psCommand(c, "k1", "GET %s", "k1");
    assert_non_null(r);
    assert_string_equal(r->str, "B=k1");
    assert_int_equal(c->stats.moved, 1);
    assert_int_equal(fake_count(b, "GET k1"), 1);
    freeReplyObject(r);
    psClientFree(c);
    fake_stop(a);
    fake_stop(b);
}

static void test_engine_sends_asking_before_an_ask_redirect(void **state) {
    fake *a = fake_start("A"), *b = fake_start("B");
    psClient *c;
    (void)state;
    a->cluster = 1;
    a->ask_port = b->port;
    c = get_k1(a, "B=k1");
    assert_int_equal(c->stats.ask, 1);
    assert_int_equal(c->stats.moved, 0);
    assert_true(fake_find(b, "ASKING") >= 0);
    assert_true(fake_find(b, "ASKING") < fake_find(b, "GET k1"));
    psClientFree(c);
    fake_stop(a);
    fake_stop(b);
}

/* Two nodes that MOVE a key to each other (a slot mid-migration), 20 times
 * each at most: the request backs off once past PS_MAX_REDIRECTS hops
 * instead of failing, and is answered once the nodes agree. */
static void test_engine_backs_off_through_a_redirect_loop(void **state) {
    fake *a = fake_start("A"), *b = fake_start("B");
    psOptions o = {0};
    psClient *c;
    redisReply *r;
    (void)state;
    a->cluster = b->cluster = 1;
    a->moved_port = b->port;
    b->moved_port = a->port;
    a->moved_limit = b->moved_limit = 20;
    o.backoff_ms = 1;
    c = connect_to(a, &o);
    r = psCommand(c, "k1", "GET %s", "k1");
    assert_non_null(r);
    assert_true(!strcmp(r->str, "A=k1") || !strcmp(r->str, "B=k1"));
    assert_true(c->stats.moved > 16);   /* past PS_MAX_REDIRECTS: failed here before */
    assert_true(c->stats.retries >= 1);
    freeReplyObject(r);
    psClientFree(c);
    fake_stop(a);
    fake_stop(b);
}

static void test_engine_resends_after_tryagain(void **state) {
    fake *a = fake_start("A");
    psClient *c;
    (void)state;
    a->tryagain = 2;
    c = get_k1(a, "A=k1");
    assert_int_equal(c->stats.retries, 2);
    assert_int_equal(fake_count(a, "GET k1"), 3);
    psClientFree(c);
    fake_stop(a);
}

/* BACKLOG (a relay's local ACCUM tensor full): waited on and resent like
 * TRYAGAIN, counted apart, each wait at most PS_BACKLOG_BACKOFF_CAP_MS. */
static void test_engine_waits_on_backlog_and_counts_it(void **state) {
    fake *a = fake_start("A");
    psOptions o = {0};
    psClient *c;
    struct timespec t0, t1;
    (void)state;
    a->backlog = 6;
    o.backoff_ms = 100; /* uncapped, 6 backoffs would sleep 100 + 200 + ... = 6.3 s */
    c = connect_to(a, &o);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    redisReply *r = psCommand(c, "k1", "GET %s", "k1");
    clock_gettime(CLOCK_MONOTONIC, &t1);
    assert_non_null(r);
    assert_string_equal(r->str, "A=k1");
    freeReplyObject(r);
    assert_int_equal(c->stats.backlog_waits, 6);
    assert_int_equal(c->stats.retries, 6);
    assert_int_equal(fake_count(a, "GET k1"), 7);
    long ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
    assert_true(ms < 6 * 160 + 500);
    psClientFree(c);
    fake_stop(a);
}

static void test_engine_gives_up_after_max_retries_and_the_time_budget(void **state) {
    fake *a = fake_start("A");
    psOptions o = {0};
    psClient *c;
    struct timespec t0, t1;
    long ms;
    (void)state;
    a->clusterdown = 1;
    o.max_retries = 2;
    o.retry_timeout_ms = 300;
    o.backoff_ms = 5;
    c = connect_to(a, &o);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_null(psCommand(c, "k1", "GET %s", "k1"));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
    assert_int_equal(c->err, PS_ERR_IO);
    assert_non_null(strstr(c->errstr, "CLUSTERDOWN"));
    assert_non_null(strstr(c->errstr, "gave up"));
    /* bounded by both: at least the time budget, not much more */
    assert_true(ms >= 300);
    assert_true(ms < 5000);
    assert_true(fake_count(a, "GET k1") > 3);
    psClientFree(c);
    fake_stop(a);
}

/* psSetStop: with the stop flag set, a command the server keeps refusing
 * (CLUSTERDOWN, 30 s of retries by default) is given up after the grace,
 * while one answered in time is unaffected. */
static void test_engine_gives_up_within_the_grace_of_a_stop_request(void **state) {
    fake *a = fake_start("A");
    psClient *c;
    struct timespec t0, t1;
    long ms;
    volatile sig_atomic_t flag = 1;
    psStop stop = {&flag, 300, 0};
    (void)state;
    c = connect_to(a, NULL);
    psSetStop(c, &stop);
    redisReply *r = psCommand(c, "k1", "GET %s", "k1");
    assert_non_null(r);
    assert_string_equal(r->str, "A=k1");
    freeReplyObject(r);
    assert_true(stop.seen_ms_ > 0);
    a->clusterdown = 1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_null(psCommand(c, "k1", "GET %s", "k1"));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
    assert_non_null(strstr(c->errstr, "stop requested"));
    assert_true(ms < 2000);
    assert_true(fake_count(a, "GET k1") >= 2);
    psClientFree(c);
    fake_stop(a);
}

static void test_engine_resends_on_a_new_connection_after_a_drop(void **state) {
    fake *a = fake_start("A");
    psClient *c;
    (void)state;
    a->drop_get = 1;
    c = get_k1(a, "A=k1");
    assert_int_equal(c->stats.reconnects, 1);
    assert_int_equal(c->stats.retries, 1);
    psClientFree(c);
    fake_stop(a);
}

static void test_engine_pipelines_a_batch_and_keeps_the_order(void **state) {
    fake *a = fake_start("A");
    psClient *c = connect_to(a, NULL);
    enum { N = 40 };
    const char *keys[N], *argv[N][2], **argvs[N];
    size_t lens[N][2];
    const size_t *lenp[N];
    int argcs[N];
    char kb[N][16];
    redisReply *rep[N];
    (void)state;
    for (int i = 0; i < N; i++) {
        snprintf(kb[i], sizeof(kb[i]), "k%d", i);
        keys[i] = kb[i];
        argv[i][0] = "GET";
        argv[i][1] = kb[i];
        lens[i][0] = 3;
        lens[i][1] = strlen(kb[i]);
        argvs[i] = argv[i];
        lenp[i] = lens[i];
        argcs[i] = 2;
    }
    assert_int_equal(psCommandBatchArgv(c, N, keys, argcs, argvs, lenp, rep), N);
    for (int i = 0; i < N; i++) {
        char want[16];
        snprintf(want, sizeof(want), "A=k%d", i);
        assert_string_equal(rep[i]->str, want);
        freeReplyObject(rep[i]);
    }
    psClientFree(c);
    fake_stop(a);
}

/* ========================================================================
 * Transactions (psTransactionAsync, psTransactionWaitAsync): one request,
 * replies skipped
 * ======================================================================== */

/* A fake node's MULTI/EXEC (per connection): MULTI answers +OK, each command
 * after it +QUEUED (a command on key "bad" an error, and EXEC then
 * EXECABORT, as Redis does), EXEC the queued GETs' values; the first
 * tx_drop_exec EXECs close the connection unanswered (a server that never
 * read EXEC discards the transaction). */
#define TX_FDS 256
static int tx_in[TX_FDS], tx_n[TX_FDS], tx_bad[TX_FDS], tx_drop_exec;
static char tx_keys[TX_FDS][4][16];

static int tx_hook(fake *f, int fd, int argc, char **argv, size_t *argl, int *close_it) {
    (void)argl;
    if (fd < 0 || fd >= TX_FDS) return 0;
    if (!strcmp(argv[0], "MULTI")) {
        tx_in[fd] = 1;
        tx_n[fd] = tx_bad[fd] = 0;
        out(f, fd, "+OK\r\n");
        return 1;
    }
    if (!strcmp(argv[0], "EXEC")) {
        tx_in[fd] = 0;
        if (tx_drop_exec > 0) {
            tx_drop_exec--;
            *close_it = 1;
        } else if (tx_bad[fd]) {
            out(f, fd, "-EXECABORT Transaction discarded because of previous errors.\r\n");
        } else {
            out(f, fd, "*%d\r\n", tx_n[fd]);
            for (int i = 0; i < tx_n[fd]; i++)
                out(f, fd, "$%zu\r\n%s=%s\r\n", strlen(f->name) + 1 + strlen(tx_keys[fd][i]),
                    f->name, tx_keys[fd][i]);
        }
        return 1;
    }
    if (tx_in[fd] && argc > 1) {
        if (!strcmp(argv[1], "bad")) {
            tx_bad[fd] = 1;
            out(f, fd, "-ERR unknown command on key bad\r\n");
        } else {
            snprintf(tx_keys[fd][tx_n[fd]++ % 4], 16, "%s", argv[1]);
            out(f, fd, "+QUEUED\r\n");
        }
        return 1;
    }
    return 0;
}

static redisReply *run_tx(psClient *c, const char *k1, const char *k2) {
    const char *a1[] = {"GET", k1}, *a2[] = {"GET", k2};
    const char *const *argv[] = {a1, a2};
    int argc[] = {2, 2};
    psAsync *a = psTransactionAsync(c, k1, 2, argc, argv, NULL);
    assert_non_null(a);
    return psCommandWait(c, a);
}

static void test_engine_hands_over_the_exec_reply_of_a_transaction(void **state) {
    fake *a = fake_start("A");
    psClient *c = connect_to(a, NULL);
    (void)state;
    a->hook = tx_hook;
    redisReply *r = run_tx(c, "k1", "k2");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 2);
    assert_string_equal(r->element[0]->str, "A=k1");
    assert_string_equal(r->element[1]->str, "A=k2");
    freeReplyObject(r);
    /* the next request's reply is its own (the skipped replies were consumed) */
    r = psCommand(c, "k3", "GET k3");
    assert_non_null(r);
    assert_string_equal(r->str, "A=k3");
    freeReplyObject(r);
    assert_int_equal(fake_count(a, "MULTI"), 1);
    assert_int_equal(fake_count(a, "EXEC"), 1);
    psClientFree(c);
    fake_stop(a);
}

static void test_engine_resends_a_whole_transaction_after_a_drop(void **state) {
    fake *a = fake_start("A");
    psClient *c = connect_to(a, NULL);
    (void)state;
    a->hook = tx_hook;
    tx_drop_exec = 1;
    redisReply *r = run_tx(c, "k1", "k2");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_string_equal(r->element[1]->str, "A=k2");
    freeReplyObject(r);
    /* MULTI, GET k1, GET k2, EXEC twice, in that order: never a command alone */
    assert_int_equal(fake_count(a, "MULTI"), 2);
    assert_int_equal(fake_count(a, "GET k1"), 2);
    assert_int_equal(fake_count(a, "EXEC"), 2);
    assert_true(fake_find(a, "GET k2") < fake_find(a, "EXEC"));
    assert_int_equal(c->stats.reconnects, 1);
    psClientFree(c);
    fake_stop(a);
}

static void test_engine_answers_a_transaction_with_its_first_queued_error(void **state) {
    fake *a = fake_start("A");
    psClient *c = connect_to(a, NULL);
    (void)state;
    a->hook = tx_hook;
    redisReply *r = run_tx(c, "k1", "bad");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    assert_string_equal(r->str, "ERR unknown command on key bad");
    freeReplyObject(r);
    r = psCommand(c, "k3", "GET k3");
    assert_non_null(r);
    assert_string_equal(r->str, "A=k3");
    freeReplyObject(r);
    psClientFree(c);
    fake_stop(a);
}

/* Transactions during a slot migration. Node txr_src answers the queued
 * commands of its next txr_times transactions with the line txr_queue (its
 * EXEC then EXECABORT: nothing ran), or, with txr_queue empty, their EXEC
 * with txr_exec (a transaction discarded at EXEC). Node txr_dst serves a
 * transaction's commands only after ASKING, a flag Redis keeps through
 * MULTI until EXEC (a command outside MULTI clears it); without it they are
 * MOVED back to txr_src. */
static fake *txr_src, *txr_dst;
static int txr_times, tx_asking[TX_FDS];
static char txr_queue[128], txr_exec[128];

static int txr_hook(fake *f, int fd, int argc, char **argv, size_t *argl, int *close_it) {
    if (fd < 0 || fd >= TX_FDS) return 0;
    if (!strcmp(argv[0], "ASKING")) {
        tx_asking[fd] = 1;
        out(f, fd, "+OK\r\n");
        return 1;
    }
    int exec = !strcmp(argv[0], "EXEC"), queued = tx_in[fd] && !exec && argc > 1;
    if (f == txr_src && txr_times > 0) {
        if (queued && txr_queue[0]) {
            tx_bad[fd] = 1;
            out(f, fd, "%s\r\n", txr_queue);
            return 1;
        }
        if (exec) {
            txr_times--;
            if (!txr_queue[0]) {
                tx_in[fd] = 0;
                out(f, fd, "%s\r\n", txr_exec);
                return 1;
            }
        }
    }
    if (f == txr_dst && queued && !tx_asking[fd]) {
        tx_bad[fd] = 1;
        out(f, fd, "-MOVED %u 127.0.0.1:%d\r\n", ps_key_hash_slot(argv[1], argl[1]), txr_src->port);
        return 1;
    }
    int rc = tx_hook(f, fd, argc, argv, argl, close_it);
    if (exec || !tx_in[fd]) tx_asking[fd] = 0;
    return rc;
}

static void txr_setup(fake *src, fake *dst, int times, const char *queue, const char *exec) {
    memset(tx_asking, 0, sizeof(tx_asking));
    txr_src = src;
    txr_dst = dst;
    txr_times = times;
    snprintf(txr_queue, sizeof(txr_queue), "%s", queue);
    snprintf(txr_exec, sizeof(txr_exec), "%s", exec);
    src->hook = txr_hook;
    if (dst) dst->hook = txr_hook;
}

/* A transaction answered ASK, at queueing (EXECABORT) or at EXEC: resent
 * whole to the node named, ASKING first, and served there; with a WAIT
 * (psTransactionWaitAsync), that WAIT is answered by the node that served
 * it, right after its EXEC. */
static void tx_follows_ask(int at_exec, int wait) {
    fake *a = fake_start("A"), *b = fake_start("B");
    char ask[128];
    psOptions o = {0};
    o.backoff_ms = 1;
    a->cluster = b->cluster = 1;
    snprintf(ask, sizeof(ask), "-ASK %u 127.0.0.1:%d", ps_key_hash_slot("k1", 2), b->port);
    txr_setup(a, b, 1, at_exec ? "" : ask, at_exec ? ask : "");
    psClient *c = connect_to(a, &o);
    redisReply *r, *waited = NULL;
    if (wait) {
        const char *a1[] = {"GET", "k1"}, *a2[] = {"GET", "k2"};
        const char *const *argv[] = {a1, a2};
        int argc[] = {2, 2};
        psAsync *x = psTransactionWaitAsync(c, "k1", 2, argc, argv, NULL, 1, 100);
        assert_non_null(x);
        r = psTransactionWait(c, x, &waited);
        assert_non_null(waited);
        assert_int_equal(waited->type, REDIS_REPLY_INTEGER);
        assert_int_equal(waited->integer, 1);
        freeReplyObject(waited);
        assert_int_equal(fake_count(b, "WAIT"), 1);
        assert_true(fake_find(b, "EXEC") < fake_find(b, "WAIT"));
    } else {
        r = run_tx(c, "k1", "k2");
        assert_int_equal(fake_count(b, "WAIT"), 0);
    }
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_string_equal(r->element[0]->str, "B=k1");
    assert_string_equal(r->element[1]->str, "B=k2");
    freeReplyObject(r);
    assert_int_equal(c->stats.ask, 1);
    assert_int_equal(c->stats.moved, 0);
    assert_int_equal(c->stats.retries, 0);
    assert_int_equal(fake_count(a, "EXEC"), 1);
    assert_int_equal(fake_count(b, "EXEC"), 1);
    assert_int_equal(fake_count(b, "ASKING"), 1);
    assert_true(fake_find(b, "ASKING") < fake_find(b, "MULTI"));
    assert_true(fake_find(b, "MULTI") < fake_find(b, "GET k1"));
    assert_true(fake_find(b, "GET k2") < fake_find(b, "EXEC"));
    /* the slot map still says A (an ASK is for this request only) */
    r = psCommand(c, "k3", "GET k3");
    assert_non_null(r);
    assert_string_equal(r->str, "A=k3");
    freeReplyObject(r);
    psClientFree(c);
    fake_stop(a);
    fake_stop(b);
}

static void test_engine_resends_a_transaction_answered_ask_to_the_target(void **state) {
    (void)state;
    tx_follows_ask(0, 0);
}

static void test_engine_resends_a_transaction_discarded_at_exec_by_ask(void **state) {
    (void)state;
    tx_follows_ask(1, 0);
}

static void test_engine_sends_the_wait_of_a_transaction_where_it_goes(void **state) {
    (void)state;
    tx_follows_ask(0, 1);
    tx_follows_ask(1, 1);
}

/* TRYAGAIN (some of the keys moved): backed off and resent whole. */
static void test_engine_resends_a_transaction_after_tryagain(void **state) {
    fake *a = fake_start("A");
    psOptions o = {0};
    (void)state;
    o.backoff_ms = 1;
    txr_setup(a, NULL, 2, "-TRYAGAIN Multiple keys request during rehashing of slot", "");
    psClient *c = connect_to(a, &o);
    redisReply *r = run_tx(c, "k1", "k2");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_string_equal(r->element[1]->str, "A=k2");
    freeReplyObject(r);
    assert_int_equal(c->stats.retries, 2);
    assert_int_equal(fake_count(a, "MULTI"), 3);
    assert_int_equal(fake_count(a, "EXEC"), 3);
    psClientFree(c);
    fake_stop(a);
}

/* MOVED (the slot's migration ended): the slot map follows, the
 * transaction is resent whole to the new owner, and so is what follows. */
static void test_engine_follows_moved_of_a_transaction(void **state) {
    fake *a = fake_start("A"), *b = fake_start("B");
    char moved[128];
    psOptions o = {0};
    (void)state;
    o.backoff_ms = 1;
    a->cluster = b->cluster = 1;
    snprintf(moved, sizeof(moved), "-MOVED %u 127.0.0.1:%d", ps_key_hash_slot("k1", 2), b->port);
    txr_setup(a, NULL, 1, moved, "");
    b->hook = tx_hook;
    psClient *c = connect_to(a, &o);
    a->slots_port = b->port;
    redisReply *r = run_tx(c, "k1", "k2");
    assert_non_null(r);
    assert_string_equal(r->element[0]->str, "B=k1");
    freeReplyObject(r);
    assert_int_equal(c->stats.moved, 1);
    r = run_tx(c, "k1", "k2");
    assert_non_null(r);
    assert_string_equal(r->element[0]->str, "B=k1");
    freeReplyObject(r);
    assert_int_equal(fake_count(a, "EXEC"), 1);
    assert_int_equal(fake_count(b, "EXEC"), 2);
    psClientFree(c);
    fake_stop(a);
    fake_stop(b);
}

/* A slot left half migrated: the retries run out (bounded, with backoff)
 * and the error names the key, its slot and the server's answer. */
static void test_engine_gives_up_a_transaction_naming_its_slot(void **state) {
    fake *a = fake_start("A");
    psOptions o = {0};
    char want[32];
    (void)state;
    a->cluster = 1;
    o.max_retries = 2;
    o.retry_timeout_ms = 200;
    o.backoff_ms = 5;
    txr_setup(a, NULL, 1 << 20, "-TRYAGAIN Multiple keys request during rehashing of slot", "");
    psClient *c = connect_to(a, &o);
    const char *a1[] = {"GET", "k1"};
    const char *const *argv[] = {a1};
    int argc[] = {2};
    psAsync *x = psTransactionAsync(c, "k1", 1, argc, argv, NULL);
    assert_non_null(x);
    assert_null(psCommandWait(c, x));
    assert_int_equal(c->err, PS_ERR_CLUSTER);
    snprintf(want, sizeof(want), "k1 (slot %u): TRYAGAIN", ps_key_hash_slot("k1", 2));
    assert_non_null(strstr(c->errstr, want));
    assert_non_null(strstr(c->errstr, "gave up"));
    int n = fake_count(a, "EXEC");
    assert_true(n >= 3 && n < 40);
    psClientFree(c);
    fake_stop(a);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_engine_completes_a_request_through_its_callback),
        cmocka_unit_test(test_engine_offers_bulk_strings_to_the_sink_before_the_reply),
        cmocka_unit_test(test_engine_follows_moved_to_the_node_named),
        cmocka_unit_test(test_engine_sends_asking_before_an_ask_redirect),
        cmocka_unit_test(test_engine_backs_off_through_a_redirect_loop),
        cmocka_unit_test(test_engine_resends_after_tryagain),
        cmocka_unit_test(test_engine_waits_on_backlog_and_counts_it),
        cmocka_unit_test(test_engine_gives_up_after_max_retries_and_the_time_budget),
        cmocka_unit_test(test_engine_gives_up_within_the_grace_of_a_stop_request),
        cmocka_unit_test(test_engine_resends_on_a_new_connection_after_a_drop),
        cmocka_unit_test(test_engine_pipelines_a_batch_and_keeps_the_order),
        cmocka_unit_test(test_engine_hands_over_the_exec_reply_of_a_transaction),
        cmocka_unit_test(test_engine_resends_a_whole_transaction_after_a_drop),
        cmocka_unit_test(test_engine_answers_a_transaction_with_its_first_queued_error),
        cmocka_unit_test(test_engine_resends_a_transaction_answered_ask_to_the_target),
        cmocka_unit_test(test_engine_resends_a_transaction_discarded_at_exec_by_ask),
        cmocka_unit_test(test_engine_sends_the_wait_of_a_transaction_where_it_goes),
        cmocka_unit_test(test_engine_resends_a_transaction_after_tryagain),
        cmocka_unit_test(test_engine_follows_moved_of_a_transaction),
        cmocka_unit_test(test_engine_gives_up_a_transaction_naming_its_slot),
    };
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
