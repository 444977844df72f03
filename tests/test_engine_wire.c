/* test_engine_wire.c -- cmocka tests of libps's wire encoders (libps/wire.c):
 * the bytes hiredis would format for the same arguments (PS.PUSHGRAD,
 * PS.PULL, the ring and ACCUM commands), and the checks of ring replies
 * against the tensor, against a fake node (fake_node.h). No redis-server
 * is involved. */

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
    psWireRing a = {"m:w:0", 5, PS_WIRE_RING_TRACK, "dc-1", -1, -1, NULL, 0, NULL, NULL, 0, 0,
                    0, 0, NULL, 0};
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
    psWireRing j = {"m:w:0", 5, PS_WIRE_RING_JOIN, "c", -1, -1, vals, 3, names, seqs, 2, 0,
                    0, 0, NULL, 0};
    const char *join[] = {"PS.RING", "m:w:0", "JOIN", "c", (const char *)vals, "FROM", "a", "7",
                          "FROM", "b.2", "18446744073709551615", "KEEPOWN"};
    const size_t jl[] = {0, 0, 0, 0, 12, 0, 0, 0, 0, 0, 0, 0};
    expect_argvl(ps_wire_ring(&j, buf, sizeof(buf)), buf, 11, join, jl);
    j.keepown = 1;
    expect_argvl(ps_wire_ring(&j, buf, sizeof(buf)), buf, 12, join, jl);
    j.keepown = 0;
    j.nfrom = 0;
    expect_argvl(ps_wire_ring(&j, buf, sizeof(buf)), buf, 5, join, jl);
    /* A table's JOIN: ROWS, JOINBEGIN, JOINROWS (u64 ids and F32 rows), JOINEND */
    j.nfrom = 2;
    j.op = PS_WIRE_RING_JOINBEGIN;
    const char *jb[] = {"PS.RING", "m:w:0", "JOINBEGIN", "c", "FROM", "a", "7",
                        "FROM", "b.2", "18446744073709551615"};
    expect_argvl(ps_wire_ring(&j, buf, sizeof(buf)), buf, 10, jb, NULL);
    j.op = PS_WIRE_RING_ROWS;
    j.u1 = 18446744073709551615ULL;
    j.u2 = 64;
    const char *rows[] = {"PS.RING", "m:w:0", "ROWS", "18446744073709551615", "COUNT", "64"};
    expect_argvl(ps_wire_ring(&j, buf, sizeof(buf)), buf, 6, rows, NULL);
    const uint64_t ids[1] = {10};
    j.op = PS_WIRE_RING_JOINROWS;
    j.u1 = 3;
    j.ids = ids;
    j.nids = 1;
    const char *jr[] = {"PS.RING", "m:w:0", "JOINROWS", "3", (const char *)ids, (const char *)vals};
    const size_t jrl[] = {0, 0, 0, 0, 8, 12};
    expect_argvl(ps_wire_ring(&j, buf, sizeof(buf)), buf, 6, jr, jrl);
    j.op = PS_WIRE_RING_JOINEND;
    j.u2 = 5;
    const char *je[] = {"PS.RING", "m:w:0", "JOINEND", "3", "5"};
    expect_argvl(ps_wire_ring(&j, buf, sizeof(buf)), buf, 5, je, NULL);

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
    const char *info[] = {"PS.INFO", "m:w:0"};
    expect_argvl(ps_wire_info("m:w:0", 5, buf, sizeof(buf)), buf, 2, info, NULL);
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wire_pushgrad_matches_hiredis_formatting),
        cmocka_unit_test(test_wire_pull_matches_hiredis_formatting),
        cmocka_unit_test(test_wire_accum_commands_match_hiredis_formatting),
        cmocka_unit_test(test_wire_ids_forms_match_hiredis_formatting),
        cmocka_unit_test(test_wire_create_forms_match_hiredis_formatting),
        cmocka_unit_test(test_wire_ring_commands_match_hiredis_formatting),
        cmocka_unit_test(test_ring_replies_are_checked_against_the_tensor),
    };
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
