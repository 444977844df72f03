/* test_engine.c -- cmocka tests of the libps request engine (libps/engine.c)
 * and of the model layer on top of it, against fake nodes (fake_node.h:
 * RESP servers on loopback ports run by threads of this process, scripted
 * per test). No redis-server is involved. */

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

#include "idlist.h"
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
 * The wire encoder: the bytes hiredis would format for the same arguments
 * ======================================================================== */

static void expect_pushgrad(const psWirePush *a, const char *blob, int argc, const char **argv) {
    char head[256], tail[256], *want = NULL, got[1024];
    size_t hl, tl, argl[16];
    int wl;
    for (int i = 0; i < argc; i++) argl[i] = strlen(argv[i]);
    wl = redisFormatCommandArgv(&want, argc, argv, argl);
    assert_int_equal(ps_wire_pushgrad(a, head, sizeof(head), &hl, tail, sizeof(tail), &tl), 0);
    assert_int_equal(hl + a->bloblen + tl, (size_t)wl);
    memcpy(got, head, hl);
    memcpy(got + hl, blob, a->bloblen);
    memcpy(got + hl + a->bloblen, tail, tl);
    assert_memory_equal(got, want, (size_t)wl);
    redisFreeCommand(want);
}

static void test_wire_pushgrad_matches_hiredis_formatting(void **state) {
    psWirePush a = {"j:w:0", 5, 4, PS_FMT_BF16, 1, 42, "cid", 7, 1.0f, 0, NULL, 0, 0};
    const char *full[] = {"PS.PUSHGRAD", "j:w:0", "abcd", "FORMAT", "BF16", "VERSION", "42",
                          "ID", "cid", "7"};
    const char *bare[] = {"PS.PUSHGRAD", "j:w:0", "abcd", "FORMAT", "BF16", "SCALE", "0.5"};
    (void)state;
    expect_pushgrad(&a, "abcd", 10, full);
    a.scale = 0.5f;
    a.flags = PS_WIRE_NO_ID | PS_WIRE_NO_VERSION;
    expect_pushgrad(&a, "abcd", 7, bare);
    /* F32 is the server's default: no FORMAT argument */
    const char *f32[] = {"PS.PUSHGRAD", "j:w:0", "abcd", "VERSION", "42", "ID", "cid", "7"};
    psWirePush b = {"j:w:0", 5, 4, PS_FMT_F32, 1, 42, "cid", 7, 1.0f, 0, NULL, 0, 0};
    expect_pushgrad(&b, "abcd", 8, f32);
    /* a head buffer too small is refused with the room needed */
    char h[8], t[256];
    size_t hl, tl;
    assert_int_equal(ps_wire_pushgrad(&a, h, sizeof(h), &hl, t, sizeof(t), &tl), -1);
    assert_true(hl > sizeof(h) && hl <= ps_wire_pushgrad_head_size(a.keylen));
}

static void test_wire_pull_matches_hiredis_formatting(void **state) {
    const char *f32[] = {"PS.PULL", "j:w:1"}, *f16[] = {"PS.PULL", "j:w:1", "FORMAT", "F16"};
    size_t l32[] = {7, 5}, l16[] = {7, 5, 6, 3};
    char buf[128], *want;
    (void)state;
    int wl = redisFormatCommandArgv(&want, 2, f32, l32);
    psWirePull a = {"j:w:1", 5, PS_FMT_F32, 0, 0, NULL, 0, 0, NULL};
    assert_int_equal(ps_wire_pull(&a, buf, sizeof(buf)), (size_t)wl);
    assert_memory_equal(buf, want, (size_t)wl);
    redisFreeCommand(want);
    wl = redisFormatCommandArgv(&want, 4, f16, l16);
    a.fmt = PS_FMT_F16;
    assert_int_equal(ps_wire_pull(&a, buf, sizeof(buf)), (size_t)wl);
    assert_memory_equal(buf, want, (size_t)wl);
    redisFreeCommand(want);
    /* MINVERSION 0 waits for nothing: the plain pull */
    a.timeout_ms = 50;
    assert_int_equal(ps_wire_pull(&a, buf, sizeof(buf)), (size_t)wl);
    const char *mv[] = {"PS.PULL", "j:w:1", "FORMAT", "F16", "MINVERSION", "12", "TIMEOUT", "250"};
    size_t lmv[] = {7, 5, 6, 3, 10, 2, 7, 3};
    wl = redisFormatCommandArgv(&want, 8, mv, lmv);
    a.minversion = 12;
    a.timeout_ms = 250;
    assert_int_equal(ps_wire_pull(&a, buf, sizeof(buf)), (size_t)wl);
    assert_memory_equal(buf, want, (size_t)wl);
    redisFreeCommand(want);
    /* a snapshot's values (ps-train eval --at), the module probe, PS.SNAPSHOT */
    const char *at[] = {"PS.PULL", "j:w:1", "AT", "s1"};
    size_t lat[] = {7, 5, 2, 2};
    wl = redisFormatCommandArgv(&want, 4, at, lat);
    psWirePull b = {"j:w:1", 5, PS_FMT_F32, 0, 0, NULL, 0, 0, "s1"};
    assert_int_equal(ps_wire_pull(&b, buf, sizeof(buf)), (size_t)wl);
    assert_memory_equal(buf, want, (size_t)wl);
    redisFreeCommand(want);
    b.key = NULL;
    assert_int_equal(ps_wire_pull(&b, buf, sizeof(buf)), 17);
    assert_memory_equal(buf, "*1\r\n$7\r\nPS.PULL\r\n", 17);
    const char *snap[] = {"PS.SNAPSHOT", "j:w:1", "s1"};
    size_t lsnap[] = {11, 5, 2};
    wl = redisFormatCommandArgv(&want, 3, snap, lsnap);
    assert_int_equal(ps_wire_snapshot("j:w:1", 5, "s1", buf, sizeof(buf)), (size_t)wl);
    assert_memory_equal(buf, want, (size_t)wl);
    redisFreeCommand(want);
}

/* The ring's encoders (issue #22) give hiredis's bytes, binary blobs included. */
static void expect_argvl(size_t got, const char *buf, int argc, const char **argv,
                         const size_t *lens) {
    size_t argl[24];
    char *want;
    for (int i = 0; i < argc; i++) argl[i] = lens && lens[i] ? lens[i] : strlen(argv[i]);
    int wl = redisFormatCommandArgv(&want, argc, argv, argl);
    assert_int_equal(got, (size_t)wl);
    assert_memory_equal(buf, want, (size_t)wl);
    redisFreeCommand(want);
}

static void test_wire_ring_commands_match_hiredis_formatting(void **state) {
    char buf[512];
    (void)state;
    psWireRing a = {"m:w:0", 5, PS_WIRE_RING_TRACK, "dc-1", -1, -1, NULL, 0, NULL, NULL, 0, 0};
    const char *track[] = {"PS.RING", "m:w:0", "TRACK", "dc-1", "MAXQUEUE", "1048576",
                           "MAXLAG", "16"};
    expect_argvl(ps_wire_ring(&a, buf, sizeof(buf)), buf, 4, track, NULL);
    a.maxqueue = 1048576;
    expect_argvl(ps_wire_ring(&a, buf, sizeof(buf)), buf, 6, track, NULL);
    a.maxlag = 16;
    expect_argvl(ps_wire_ring(&a, buf, sizeof(buf)), buf, 8, track, NULL);
    a.op = PS_WIRE_RING_STATE;
    const char *st[] = {"PS.RING", "m:w:0", "STATE"};
    expect_argvl(ps_wire_ring(&a, buf, sizeof(buf)), buf, 3, st, NULL);
    a.op = PS_WIRE_RING_UNTRACK;
    const char *un[] = {"PS.RING", "m:w:0", "UNTRACK"};
    expect_argvl(ps_wire_ring(&a, buf, sizeof(buf)), buf, 3, un, NULL);
    /* JOIN with a values blob holding a 0 byte and a CR, and two FROM pairs */
    const float vals[3] = {0.0f, 1.5f, -2.25f};
    const char *names[2] = {"a", "b.2"};
    const uint64_t seqs[2] = {7, 18446744073709551615ULL};
    psWireRing j = {"m:w:0", 5, PS_WIRE_RING_JOIN, "c", -1, -1, vals, 3, names, seqs, 2, 0};
    const char *join[] = {"PS.RING", "m:w:0", "JOIN", "c", (const char *)vals, "FROM", "a", "7",
                          "FROM", "b.2", "18446744073709551615", "KEEPOWN"};
    const size_t jl[] = {0, 0, 0, 0, 12, 0, 0, 0, 0, 0, 0, 0};
    expect_argvl(ps_wire_ring(&j, buf, sizeof(buf)), buf, 11, join, jl);
    j.keepown = 1;
    expect_argvl(ps_wire_ring(&j, buf, sizeof(buf)), buf, 12, join, jl);
    j.keepown = 0;
    j.nfrom = 0;
    expect_argvl(ps_wire_ring(&j, buf, sizeof(buf)), buf, 5, join, jl);

    const char *take[] = {"PS.DELTATAKE", "m:w:0", "SEQFLOOR", "12", "THRESHOLD", "0.01",
                          "MAXELEMS", "100"};
    expect_argvl(ps_wire_delta_take("m:w:0", 5, 12, 0.01, 100, buf, sizeof(buf)), buf, 8, take,
                 NULL);
    expect_argvl(ps_wire_delta_take("m:w:0", 5, 0, 0, 0, buf, sizeof(buf)), buf, 2, take, NULL);
    const char *take2[] = {"PS.DELTATAKE", "m:w:0", "THRESHOLD", "0.10000000000000001"};
    expect_argvl(ps_wire_delta_take("m:w:0", 5, 0, 0.1, 0, buf, sizeof(buf)), buf, 4, take2,
                 NULL);
    const char *ack[] = {"PS.DELTAACK", "m:w:0", "3"};
    expect_argvl(ps_wire_delta_ack("m:w:0", 5, 3, buf, sizeof(buf)), buf, 3, ack, NULL);

    const uint32_t idx[2] = {0, 13};
    const float dv[2] = {1.0f, -3.0f};
    const char *apply[] = {"PS.APPLYDELTA", "m:w:0", "ID", "dc-1", "44", (const char *)idx,
                           (const char *)dv, "HOPS", "1"};
    const size_t al[] = {0, 0, 0, 0, 0, 8, 8, 0, 0};
    expect_argvl(ps_wire_apply_delta("m:w:0", 5, "dc-1", 44, idx, dv, 2, 1, buf, sizeof(buf)),
                 buf, 9, apply, al);
    expect_argvl(ps_wire_apply_delta("m:w:0", 5, "dc-1", 44, idx, dv, 2, -1, buf, sizeof(buf)),
                 buf, 7, apply, al);
    const char *fwd[] = {"PS.DELTAFWD", "m:w:0"};
    expect_argvl(ps_wire_delta_fwd("m:w:0", 5, buf, sizeof(buf)), buf, 2, fwd, NULL);
    const char *fack[] = {"PS.DELTAFWDACK", "m:w:0", "dc-1", "44"};
    expect_argvl(ps_wire_delta_fwdack("m:w:0", 5, "dc-1", 44, buf, sizeof(buf)), buf, 4, fack,
                 NULL);
    /* Too small a buffer: the length needed, nothing written past it. */
    char small[8];
    memset(small, 'x', sizeof(small));
    size_t need = ps_wire_apply_delta("m:w:0", 5, "dc-1", 44, idx, dv, 2, 1, small, 4);
    assert_int_equal(need, ps_wire_apply_delta("m:w:0", 5, "dc-1", 44, idx, dv, 2, 1, buf,
                                               sizeof(buf)));
    assert_int_equal(small[4], 'x');
}

/* The ring's replies (libps/ring.c) are checked against the sizes given:
 * the fake answers every PS.* command with the bytes in RingReply. */
static char RingReply[512];
static size_t RingReplyLen;

static int ring_hook(fake *f, int fd, int argc, char **argv, size_t *argl, int *close_it) {
    (void)argc, (void)argl, (void)close_it;
    if (strncmp(argv[0], "PS.", 3) != 0) return 0;
    out_bytes(f, fd, RingReply, RingReplyLen);
    return 1;
}

/* RingReply := the RESP of a take/fwd-shaped array: head, then blobs. */
static void ring_reply(const char *head, const void *b1, size_t l1, const void *b2, size_t l2,
                       const char *tail) {
    size_t o = 0;
    o += (size_t)snprintf(RingReply + o, sizeof(RingReply) - o, "%s$%zu\r\n", head, l1);
    memcpy(RingReply + o, b1, l1), o += l1;
    o += (size_t)snprintf(RingReply + o, sizeof(RingReply) - o, "\r\n$%zu\r\n", l2);
    memcpy(RingReply + o, b2, l2), o += l2;
    o += (size_t)snprintf(RingReply + o, sizeof(RingReply) - o, "\r\n%s", tail);
    RingReplyLen = o;
}

static void ring_text(const char *s) {
    RingReplyLen = strlen(s);
    memcpy(RingReply, s, RingReplyLen);
}

static void test_ring_replies_are_checked_against_the_tensor(void **state) {
    fake *a = fake_start("A");
    psClient *c = connect_to(a, NULL);
    (void)state;
    a->hook = ring_hook;
    psDelta d;
    memset(&d, 0, sizeof(d));
    const uint32_t idx[2] = {1, 3}, bad_order[2] = {3, 1}, past[2] = {1, 4};
    const float v[2] = {0.5f, -2.0f};
    /* A good take of a 4-element tensor. */
    ring_reply("*5\r\n:7\r\n:2\r\n", idx, 8, v, 8, ":1\r\n");
    assert_int_equal(psDeltaTake(c, "k", 4, 0, 0.01, 0, &d), 1);
    assert_true(d.seq == 7 && d.count == 2 && d.accumulated == 1);
    assert_true(d.idx[1] == 3 && d.vals[1] == -2.0f);
    /* Nothing significant. */
    ring_text(":0\r\n");
    assert_int_equal(psDeltaTake(c, "k", 4, 0, 0, 0, &d), 0);
    assert_null(d.idx);
    /* Indices out of order, past the tensor, a count the blobs do not
     * carry, a blob of the wrong size: protocol errors, nothing kept. */
    ring_reply("*5\r\n:7\r\n:2\r\n", bad_order, 8, v, 8, ":0\r\n");
    assert_int_equal(psDeltaTake(c, "k", 4, 0, 0, 0, &d), PS_ERR);
    assert_int_equal(c->err, PS_ERR_PROTOCOL);
    ring_reply("*5\r\n:7\r\n:2\r\n", past, 8, v, 8, ":0\r\n");
    assert_int_equal(psDeltaTake(c, "k", 4, 0, 0, 0, &d), PS_ERR);
    ring_reply("*5\r\n:7\r\n:3\r\n", idx, 8, v, 8, ":0\r\n");
    assert_int_equal(psDeltaTake(c, "k", 4, 0, 0, 0, &d), PS_ERR);
    ring_reply("*5\r\n:7\r\n:2\r\n", idx, 8, v, 4, ":0\r\n");
    assert_int_equal(psDeltaTake(c, "k", 4, 0, 0, 0, &d), PS_ERR);
    assert_null(d.priv_);
    /* The forward queue: an entry, then empty. */
    ring_reply("*5\r\n$2\r\ng1\r\n:9\r\n:1\r\n", idx, 8, v, 8, "");
    assert_int_equal(psDeltaFwd(c, "k", 4, &d), 1);
    assert_true(!strcmp(d.origin, "g1") && d.seq == 9 && d.hops == 1 && d.count == 2);
    ring_reply("*5\r\n$2\r\ng1\r\n:9\r\n:1\r\n", idx, 8, v, 8, "");
    assert_int_equal(psDeltaFwd(c, "k", 3, &d), PS_ERR); /* index 3 of a 3-element tensor */
    ring_text("$-1\r\n");
    assert_int_equal(psDeltaFwd(c, "k", 4, &d), 0);
    psDeltaRelease(&d);
    /* Acks and applies answer 0 or 1; errors carry the server's text. */
    ring_text(":1\r\n");
    assert_int_equal(psDeltaAck(c, "k", 7), 1);
    assert_int_equal(psDeltaFwdAck(c, "k", "g1", 9), 1);
    ring_text(":0\r\n");
    assert_int_equal(psDeltaApply(c, "k", "g1", 9, idx, v, 2, 1), 0);
    ring_text(":5\r\n");
    assert_int_equal(psDeltaApply(c, "k", "g1", 9, idx, v, 2, 1), PS_ERR);
    ring_text("-ERR the tensor is not ring-tracked\r\n");
    assert_int_equal(psDeltaApply(c, "k", "g1", 9, idx, v, 2, 1), PS_ERR);
    assert_int_equal(c->err, PS_ERR_SERVER);
    assert_non_null(strstr(c->errstr, "not ring-tracked"));
    /* Bad arguments are refused before anything is sent. */
    int sent = fake_count(a, "PS.");
    assert_int_equal(psDeltaApply(c, "k", "", 9, idx, v, 2, 1), PS_ERR);
    assert_int_equal(c->err, PS_ERR_ARG);
    assert_int_equal(psRingTrack(c, "k", "a-name-longer-than-sixty-four-bytes-is-no-origin-"
                                         "of-any-ring-group", -1, -1), PS_ERR);
    assert_int_equal(fake_count(a, "PS."), sent);
    /* STATE: values (a base), version, origin, marks. */
    const float vals[2] = {1, 2};
    psRingSnapshot st;
    /* (a 4-element reply: values, version, origin, origins) */
    size_t o = 0;
    o += (size_t)snprintf(RingReply, sizeof(RingReply), "*4\r\n$8\r\n");
    memcpy(RingReply + o, vals, 8), o += 8;
    o += (size_t)snprintf(RingReply + o, sizeof(RingReply) - o,
                          "\r\n:3\r\n$1\r\na\r\n*1\r\n*3\r\n$1\r\nb\r\n:4\r\n:2\r\n");
    RingReplyLen = o;
    assert_int_equal(psRingState(c, "k", 2, &st), PS_OK);
    assert_true(st.n == 2 && st.values[1] == 2 && st.version == 3 && !strcmp(st.origin, "a"));
    assert_true(st.norigins == 1 && st.origins[0].hwm == 4 && st.origins[0].applied == 2);
    psRingStateFree(&st);
    assert_int_equal(psRingState(c, "k", 3, &st), PS_ERR); /* 2 values, 3 expected */
    assert_int_equal(c->err, PS_ERR_PROTOCOL);
    RingReply[1] = '5'; /* 5 elements: not a STATE reply (the fifth one added) */
    memcpy(RingReply + RingReplyLen, ":0\r\n", 4);
    RingReplyLen += 4;
    assert_int_equal(psRingState(c, "k", 2, &st), PS_ERR);
    assert_null(st.values);
    psClientFree(c);
    fake_stop(a);
}

/* The relay's encoders give the bytes hiredis would give for the same argv. */
static void expect_argv(size_t got, const char *buf, int argc, const char **argv) {
    size_t argl[16];
    char *want;
    for (int i = 0; i < argc; i++) argl[i] = strlen(argv[i]);
    int wl = redisFormatCommandArgv(&want, argc, argv, argl);
    assert_int_equal(got, (size_t)wl);
    assert_memory_equal(buf, want, (size_t)wl);
    redisFreeCommand(want);
}

static void test_wire_accum_commands_match_hiredis_formatting(void **state) {
    char buf[256];
    (void)state;
    const uint64_t dims[2] = {784, 128};
    const char *create[] = {"PS.CREATE", "m:w1", "SHAPE", "784", "128", "OPTIM",
                            ps_proto_optim_name(PS_PROTO_OPT_ACCUM), "NX"};
    const char *accum[] = {"OPTIM", ps_proto_optim_name(PS_PROTO_OPT_ACCUM)};
    psWireCreate ca = {"m:w1", 4, 2, dims, 0, accum, 2, -1, 0, 1};
    expect_argv(ps_wire_create(&ca, buf, sizeof(buf)), buf, 8, create);
    const char *take[] = {"PS.TAKE", "m:w1", "MINCOUNT", "4611686018427387904", "SEQFLOOR",
                          "1700000000000000", "MAXROUND", "4", "MAXBACKLOG", "8"};
    expect_argv(ps_wire_accum_take("m:w1", 4, 1ULL << 62, 1700000000000000ULL, 4, 8, buf,
                                   sizeof(buf)), buf, 10, take);
    expect_argv(ps_wire_accum_take("m:w1", 4, 1ULL << 62, 1700000000000000ULL, 4, -1, buf,
                                   sizeof(buf)), buf, 8, take); /* MAXBACKLOG left out */
    const char *wait[] = {"PS.TAKEWAIT", "m:w1", "MINCOUNT", "2", "TIMEOUT", "100"};
    expect_argv(ps_wire_accum_wait("m:w1", 4, 2, 100, buf, sizeof(buf)), buf, 6, wait);
    const char *ack[] = {"PS.TAKEACK", "m:w1", "17"};
    expect_argv(ps_wire_accum_ack("m:w1", 4, 17, buf, sizeof(buf)), buf, 3, ack);
    /* The mirror's head, then the blob and its CRLF. */
    const char *mirror[] = {"PS.MIRROR", "m:w1", "9", "abcdefgh"};
    size_t hl = ps_wire_accum_mirror_head("m:w1", 4, 9, 8, buf, sizeof(buf));
    memcpy(buf + hl, "abcdefgh\r\n", 10);
    expect_argv(hl + 10, buf, 4, mirror);
    /* Too small a buffer: the length needed, nothing written past it. */
    assert_int_equal(ps_wire_accum_ack("m:w1", 4, 17, buf, 4), 39);
}

/* The one PS.PUSHGRAD and the one PS.PULL encoder with IDS (a table's rows):
 * RAW ids (little-endian uint64) and Elias-Fano ones, next to the same
 * encoders' tensor forms above. */
static void test_wire_ids_forms_match_hiredis_formatting(void **state) {
    const uint64_t ids[3] = {3, 7, 300};
    char raw[24], ef[64], head[256], tail[512], got[1024], buf[512];
    size_t hl, tl;
    uint64_t base;
    unsigned b;
    (void)state;
    memcpy(raw, ids, sizeof(ids)); /* the host is little-endian (codec.h) */
    size_t efl = ps_idlist_plan(ids, 3, &base, &b);
    assert_true(efl <= sizeof(ef));
    ps_idlist_encode_with(ids, 3, base, b, (unsigned char *)ef, efl);
    assert_int_equal(ps_wire_ids_size(ids, 3, PS_PROTO_IDFMT_EF), efl);
    const char *efname = ps_proto_idformat_name(PS_PROTO_IDFMT_EF);
    /* PS.PUSHGRAD key grad FORMAT F16 IDS raw VERSION 5 ID cid 9 */
    psWirePush p = {"e:t:0", 5, 4, PS_FMT_F16, 1, 5, "cid", 9, 1.0f, 0, ids, 3,
                    PS_PROTO_IDFMT_RAW};
    const char *push[] = {"PS.PUSHGRAD", "e:t:0", "abcd", "FORMAT", "F16", "IDS", raw,
                          "VERSION", "5", "ID", "cid", "9"};
    size_t pushl[] = {11, 5, 4, 6, 3, 3, 24, 7, 1, 2, 3, 1};
    char *want;
    int wl = redisFormatCommandArgv(&want, 12, push, pushl);
    assert_int_equal(ps_wire_pushgrad(&p, head, sizeof(head), &hl, tail, sizeof(tail), &tl), 0);
    assert_true(tl <= PS_WIRE_PUSH_IDS_TAIL_MAX(3, 3));
    memcpy(got, head, hl);
    memcpy(got + hl, "abcd", 4);
    memcpy(got + hl + 4, tail, tl);
    assert_int_equal(hl + 4 + tl, (size_t)wl);
    assert_memory_equal(got, want, (size_t)wl);
    redisFreeCommand(want);
    /* F32 (no FORMAT), EF ids, no VERSION / ID */
    p.fmt = PS_FMT_F32;
    p.idfmt = PS_PROTO_IDFMT_EF;
    p.flags = PS_WIRE_NO_ID | PS_WIRE_NO_VERSION;
    const char *push_ef[] = {"PS.PUSHGRAD", "e:t:0", "abcd", "IDS", ef, "IDFORMAT", efname};
    size_t push_efl[] = {11, 5, 4, 3, efl, 8, strlen(efname)};
    wl = redisFormatCommandArgv(&want, 7, push_ef, push_efl);
    assert_int_equal(ps_wire_pushgrad(&p, head, sizeof(head), &hl, tail, sizeof(tail), &tl), 0);
    memcpy(got, head, hl);
    memcpy(got + hl, "abcd", 4);
    memcpy(got + hl + 4, tail, tl);
    assert_int_equal(hl + 4 + tl, (size_t)wl);
    assert_memory_equal(got, want, (size_t)wl);
    redisFreeCommand(want);
    /* PS.PULL key IDS raw FORMAT BF16; PS.PULL key IDS ef IDFORMAT EF (F32) */
    psWirePull a = {"e:t:0", 5, PS_FMT_BF16, 0, 0, ids, 3, PS_PROTO_IDFMT_RAW, NULL};
    const char *pull[] = {"PS.PULL", "e:t:0", "IDS", raw, "FORMAT", "BF16"};
    const size_t pulll[] = {7, 5, 3, 24, 6, 4};
    expect_argvl(ps_wire_pull(&a, buf, sizeof(buf)), buf, 6, pull, pulll);
    a.fmt = PS_FMT_F32;
    a.idfmt = PS_PROTO_IDFMT_EF;
    const char *pull_ef[] = {"PS.PULL", "e:t:0", "IDS", ef, "IDFORMAT", efname};
    const size_t pull_efl[] = {7, 5, 3, efl, 8, 0};
    expect_argvl(ps_wire_pull(&a, buf, sizeof(buf)), buf, 6, pull_ef, pull_efl);
}

/* The one PS.CREATE encoder: a model's tensor partition (its own SEED) and a
 * table's shard, as model.c and embed.c send them (ps_wire_create_argv);
 * the relay's ACCUM form is in the test above. */
static void test_wire_create_forms_match_hiredis_formatting(void **state) {
    const char *argv[PS_WIRE_CREATE_MAXARGS];
    size_t argl[PS_WIRE_CREATE_MAXARGS];
    char nb[PS_WIRE_CREATE_MAXARGS][24], buf[256];
    const uint64_t dims[2] = {100, 32};
    const char *opts[] = {"OPTIM", "SGD", "SEED", "7", "INIT", "NORMAL"};
    (void)state;
    psWireCreate a = {"j:w:3", 5, 2, dims, 0, opts, 6, 3, 10, 1};
    const char *tensor[] = {"PS.CREATE", "j:w:3", "SHAPE", "100", "32", "OPTIM", "SGD", "SEED",
                            "10", "INIT", "NORMAL", "NX"};
    int argc = ps_wire_create_argv(&a, nb, argv, argl, PS_WIRE_CREATE_MAXARGS);
    assert_int_equal(argc, 12);
    for (int i = 0; i < argc; i++) {
        assert_int_equal(argl[i], strlen(tensor[i]));
        assert_memory_equal(argv[i], tensor[i], argl[i]);
    }
    expect_argv(ps_wire_create(&a, buf, sizeof(buf)), buf, 12, tensor);
    psWireCreate t = {"e:t:1", 5, 0, NULL, 16, opts, 2, -1, 0, 0};
    const char *table[] = {"PS.CREATE", "e:t:1", "EMBEDDING", "DIM", "16", "OPTIM", "SGD"};
    expect_argv(ps_wire_create(&t, buf, sizeof(buf)), buf, 7, table);
    /* More arguments than room: refused. */
    assert_int_equal(ps_wire_create_argv(&a, nb, argv, argl, 11), -1);
}

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
        cmocka_unit_test(test_wire_pushgrad_matches_hiredis_formatting),
        cmocka_unit_test(test_wire_pull_matches_hiredis_formatting),
        cmocka_unit_test(test_wire_accum_commands_match_hiredis_formatting),
        cmocka_unit_test(test_wire_ids_forms_match_hiredis_formatting),
        cmocka_unit_test(test_wire_create_forms_match_hiredis_formatting),
        cmocka_unit_test(test_wire_ring_commands_match_hiredis_formatting),
        cmocka_unit_test(test_ring_replies_are_checked_against_the_tensor),
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
