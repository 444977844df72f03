/* fuzz_resp.c -- libFuzzer harness for libps's own RESP2 reply framer
 * (libps/resp.c: psi_scan_reply, psi_resp_array_bulks), which the request
 * engine runs over every byte a node sends before hiredis sees a reply.
 *
 * The first input byte picks how the bytes arrive and which bulk strings a
 * sink takes; the rest is what the "node" sent. Invariants besides memory
 * safety:
 *  - scanning the bytes as they arrive in pieces (the scan state kept
 *    across calls, as engine.c's node_read does) answers what one scan of
 *    the whole buffer answers: the same reply length, or a protocol error
 *    once enough bytes are there, and while incomplete a 'need' that is
 *    beyond the bytes there and never beyond the reply's length;
 *  - a reply the framer calls complete is, for hiredis's reader, exactly
 *    one reply with no byte left over (or an error of the reader, which the
 *    engine handles as a protocol error of the connection);
 *  - the spans a sink takes are bulk strings of the top-level array, in
 *    order, inside the reply, and the reply with each replaced by an empty
 *    string (what engine.c's build_reply feeds hiredis) parses to an array
 *    of the same length, with empty strings there. */

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "resp.h"

#define MAXSPAN 8

typedef struct takeArg {
    unsigned mask;              /* bit idx: take element idx */
    int calls;
    int last_idx;
    const char *buf;
    size_t len;
} takeArg;

static int take(void *arg, int idx, int n, const char *data, size_t len) {
    takeArg *t = arg;
    FZ_CHECK(idx > t->last_idx && idx < n && n >= 1 && n <= MAXSPAN);
    FZ_CHECK(data >= t->buf && data + len <= t->buf + t->len);
    t->last_idx = idx;
    t->calls++;
    return (t->mask >> idx) & 1;
}

/* hiredis's reading of 'buf': 1 one reply and nothing left, 0 reader error. */
static int hiredis_one(const char *buf, size_t len, redisReply **out) {
    redisReader *rd = redisReaderCreate();
    void *reply = NULL, *more = NULL;
    int ok;
    FZ_CHECK(rd != NULL);
    if (redisReaderFeed(rd, buf, len) != REDIS_OK || redisReaderGetReply(rd, &reply) != REDIS_OK) {
        redisReaderFree(rd);
        return 0;
    }
    FZ_CHECK(reply != NULL);    /* the framer said complete: the reader must agree */
    ok = redisReaderGetReply(rd, &more);
    FZ_CHECK(ok == REDIS_OK && more == NULL); /* nothing after it */
    redisReaderFree(rd);
    *out = reply;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FuzzIn in = {data, size};
    uint8_t mode = fz_u8(&in), mask = fz_u8(&in);
    const uint8_t *p;
    size_t len = fz_rest(&in, &p), step = (size_t)(mode & 15) + 1;
    const char *buf = (const char *)p;
    psScan whole, s;
    int rc_whole, rc = 0;

    memset(&whole, 0, sizeof(whole));
    rc_whole = psi_scan_reply(&whole, buf, len);
    FZ_CHECK(rc_whole >= -1 && rc_whole <= 1);
    if (rc_whole == 1) FZ_CHECK(whole.pos > 0 && whole.pos <= len);
    if (rc_whole == 0) FZ_CHECK(whole.need > len);

    /* The same bytes arriving 'step' (or, mode bit 4, 1, 2, 4, ...) at a time. */
    memset(&s, 0, sizeof(s));
    for (size_t have = 0, k = 1; have < len;) {
        size_t add = (mode & 16) ? k : step;
        k = k < len ? k * 2 : k;
        have = have + add > len ? len : have + add;
        rc = psi_scan_reply(&s, buf, have);
        if (rc == 0) {
            FZ_CHECK(s.need > have);
            if (rc_whole == 1) FZ_CHECK(s.need <= whole.pos && have < whole.pos);
            continue;
        }
        break;
    }
    if (len > 0) {
        FZ_CHECK(rc == rc_whole);
        if (rc == 1) FZ_CHECK(s.pos == whole.pos);
    }
    if (rc_whole != 1) return 0;

    /* hiredis agrees where the reply ends. */
    redisReply *r = NULL;
    int parsed = hiredis_one(buf, whole.pos, &r);

    /* The sink's spans, and the reply with them replaced (build_reply). */
    size_t from[MAXSPAN], to[MAXSPAN], done = 0;
    takeArg t = {mask, 0, -1, buf, whole.pos};
    int ntaken = psi_resp_array_bulks(buf, whole.pos, MAXSPAN, take, &t, from, to);
    FZ_CHECK(ntaken >= 0 && ntaken <= t.calls);
    char *fed = malloc(whole.pos + 6 * (size_t)ntaken + 1);
    size_t fedlen = 0;
    FZ_CHECK(fed != NULL);
    for (int i = 0; i < ntaken; i++) {
        FZ_CHECK(from[i] >= done && from[i] < to[i] && to[i] <= whole.pos && buf[from[i]] == '$');
        FZ_CHECK(buf[to[i] - 2] == '\r' && buf[to[i] - 1] == '\n');
        memcpy(fed + fedlen, buf + done, from[i] - done);
        fedlen += from[i] - done;
        memcpy(fed + fedlen, "$0\r\n\r\n", 6);
        fedlen += 6;
        done = to[i];
    }
    memcpy(fed + fedlen, buf + done, whole.pos - done);
    fedlen += whole.pos - done;
    if (parsed) {
        redisReply *r2 = NULL;
        if (ntaken > 0) {
            FZ_CHECK(r->type == REDIS_REPLY_ARRAY);
            FZ_CHECK(hiredis_one(fed, fedlen, &r2));
            FZ_CHECK(r2->type == REDIS_REPLY_ARRAY && r2->elements == r->elements);
            for (int i = 0, k = 0; i < (int)r->elements && k < ntaken; i++) {
                if (!((mask >> i) & 1) || r->element[i]->type != REDIS_REPLY_STRING) continue;
                FZ_CHECK(r2->element[i]->type == REDIS_REPLY_STRING && r2->element[i]->len == 0);
                k++;
            }
            freeReplyObject(r2);
        }
        freeReplyObject(r);
    }
    free(fed);
    return 0;
}
