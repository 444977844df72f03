/* accum.c -- the relay's commands (ps.h "Relay"): a relay's local ACCUM
 * tensors (PS.CREATE ... OPTIM ACCUM, PS.TAKE, PS.TAKEWAIT, PS.TAKEACK,
 * PS.MIRROR) and its upstream pushes and pulls of them. Each call encodes one
 * command per item with wire.c's encoders, submits them all to the engine
 * (pipelined per node, with its redirect / retry handling) and parses each
 * reply into its item. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_internal.h"
#include "wire.h"

enum { K_TAKE, K_ACK, K_FORWARD, K_PULL, K_MIRROR, K_WAIT, K_CREATE };

/* One command in flight. */
typedef struct accReq {
    psReq req;
    psAccumItem *it;       /* NULL for psAccumWait / psAccumCreate */
    int kind;
    char *cmd;             /* the encoded command (or its head before a blob) */
    char *tail;            /* after the blob, NULL when none */
    redisReply *reply;     /* psAccumWait / psAccumCreate: the reply */
} accReq;

static void item_error(psAccumItem *it, int status, const char *msg) {
    it->status = status;
    snprintf(it->err, sizeof(it->err), "%s", msg ? msg : "");
}

static int is_int(const redisReply *r) { return r && r->type == REDIS_REPLY_INTEGER; }

/* Parses the reply of item 'it' of 'kind'. Returns 1 when 'reply' is kept
 * by the item (a take's sum), 0 when the caller frees it. */
static int parse_item(psAccumItem *it, int kind, redisReply *reply) {
    it->status = PS_OK;
    it->err[0] = '\0';
    if (reply->type == REDIS_REPLY_ERROR) {
        item_error(it, PS_ERR_SERVER, reply->str);
        return 0;
    }
    switch (kind) {
    case K_TAKE:
        if (is_int(reply)) {
            it->count = 0;
            it->summed = (uint64_t)reply->integer;
            return 0;
        }
        if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 5 &&
            is_int(reply->element[0]) && is_int(reply->element[1]) &&
            reply->element[2]->type == REDIS_REPLY_STRING &&
            reply->element[2]->len == it->n * sizeof(float) && is_int(reply->element[3]) &&
            is_int(reply->element[4]) && reply->element[1]->integer >= 1 &&
            reply->element[3]->integer >= reply->element[1]->integer) {
            it->seq = (uint64_t)reply->element[0]->integer;
            it->count = (uint64_t)reply->element[1]->integer;
            it->sum = (const float *)(const void *)reply->element[2]->str;
            it->total = (uint64_t)reply->element[3]->integer;
            it->parts_left = (uint64_t)reply->element[4]->integer;
            it->priv_ = reply;
            return 1;
        }
        break;
    case K_ACK:
        if (is_int(reply)) {
            it->acked = reply->integer;
            return 0;
        }
        break;
    case K_FORWARD:
    case K_MIRROR:
        if (is_int(reply)) {
            it->version = (uint64_t)reply->integer;
            return 0;
        }
        break;
    case K_PULL:
        if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 2 &&
            is_int(reply->element[0]) && reply->element[1]->type == REDIS_REPLY_STRING &&
            reply->element[1]->len == it->n * sizeof(float)) {
            it->version = (uint64_t)reply->element[0]->integer;
            memcpy(it->dst, reply->element[1]->str, reply->element[1]->len);
            return 0;
        }
        break;
    }
    item_error(it, PS_ERR_PROTOCOL, "unexpected reply");
    return 0;
}

static int acc_done(psClient *c, psReq *r, redisReply *reply) {
    accReq *q = r->udata;
    if (!q->it) {
        q->reply = reply;
        return PSI_DONE;
    }
    if (!reply) {
        item_error(q->it, c->err ? c->err : PS_ERR_IO, "");
        return PSI_DONE;
    }
    if (!parse_item(q->it, q->kind, reply)) freeReplyObject(reply);
    return PSI_DONE;
}

typedef struct accBatch {
    accReq *qs;
    size_t n;
} accBatch;

static int batch_done(psClient *c, void *arg) {
    accBatch *b = arg;
    (void)c;
    for (size_t i = 0; i < b->n; i++)
        if (b->qs[i].cmd && b->qs[i].req.state != PSS_DONE) return 0;
    return 1;
}

/* Encodes with 'enc' twice: once for the length, once into the buffer. */
#define ENCODE(q, call_with_buf_cap)                                                          \
    do {                                                                                    \
        char *buf = NULL;                                                                   \
        size_t cap = 0;                                                                     \
        size_t len = call_with_buf_cap;                                                     \
        if ((buf = malloc(len)) != NULL) {                                                  \
            cap = len;                                                                      \
            len = call_with_buf_cap;                                                        \
        }                                                                                   \
        (q)->cmd = buf;                                                                     \
        (q)->req.cmd = buf;                                                                 \
        (q)->req.cmdlen = buf ? len : 0;                                                    \
    } while (0)

/* Encodes item i's command into q. 0, or -1 (out of memory / bad argument). */
static int encode(psClient *c, accReq *q, psAccumItem *it, int kind, const psAccumTakeOpts *o) {
    const size_t kl = strlen(it->key);
    psi_req_init(&q->req, it->key, kl);
    q->req.done = acc_done;
    q->req.udata = q;
    q->it = it;
    q->kind = kind;
    switch (kind) {
    case K_TAKE:
        ENCODE(q, ps_wire_accum_take(it->key, kl, o->mincount, o->seqfloor, o->maxround,
                                     o->maxbacklog, buf, cap));
        break;
    case K_ACK: ENCODE(q, ps_wire_accum_ack(it->key, kl, it->seq, buf, cap)); break;
    case K_PULL: {
        psWirePull a = {it->key, kl, PS_FMT_F32, 0, 0, NULL, 0, 0, NULL};
        ENCODE(q, ps_wire_pull(&a, buf, cap));
        break;
    }
    case K_MIRROR:
        ENCODE(q, ps_wire_accum_mirror_head(it->key, kl, it->version, it->n * sizeof(float),
                                            buf, cap));
        q->req.blob = (const unsigned char *)it->data;
        q->req.bloblen = it->n * sizeof(float);
        q->req.tail = "\r\n";
        q->req.taillen = 2;
        break;
    case K_FORWARD: {
        psWirePush a = {0};
        a.key = it->key;
        a.keylen = kl;
        a.bloblen = it->n * sizeof(float);
        a.fmt = PS_FMT_F32;
        a.client_id = c->client_id;
        a.seq = it->seq;
        a.scale = 1.0f;
        a.flags = PS_WIRE_NO_VERSION;
        size_t hcap = ps_wire_pushgrad_head_size(kl), tcap = PS_WIRE_PUSH_TAIL_MAX(strlen(c->client_id));
        size_t hl, tl;
        q->cmd = malloc(hcap);
        q->tail = malloc(tcap);
        if (!q->cmd || !q->tail ||
            ps_wire_pushgrad(&a, q->cmd, hcap, &hl, q->tail, tcap, &tl) != 0) {
            free(q->cmd), free(q->tail);
            q->cmd = q->tail = NULL;
            return -1;
        }
        q->req.cmd = q->cmd;
        q->req.cmdlen = hl;
        q->req.blob = (const unsigned char *)it->data;
        q->req.bloblen = a.bloblen;
        q->req.tail = q->tail;
        q->req.taillen = tl;
        break;
    }
    }
    return q->cmd ? 0 : -1;
}

/* Runs one command of 'kind' per item. */
static int run_items(psClient *c, psAccumItem *items, size_t n, int kind,
                     const psAccumTakeOpts *o) {
    psi_clear_error(c);
    if (n == 0) return PS_OK;
    accReq *qs = calloc(n, sizeof(*qs));
    if (!qs) {
        psi_set_error(c, PS_ERR_OOM, "out of memory");
        return PS_ERR;
    }
    for (size_t i = 0; i < n; i++) {
        psAccumItem *it = &items[i];
        if (kind == K_TAKE) psAccumItemsRelease(it, 1);
        it->status = PS_ERR_OOM;
        snprintf(it->err, sizeof(it->err), "out of memory");
        if (!it->key || ((kind == K_FORWARD || kind == K_MIRROR) && !it->data) ||
            (kind == K_PULL && !it->dst)) {
            item_error(it, PS_ERR_ARG, "missing key, data or dst");
            continue;
        }
        if (encode(c, &qs[i], it, kind, o) != 0) continue;
        psi_submit(c, &qs[i].req);
    }
    accBatch b = {qs, n};
    if (psi_run(c, batch_done, &b) != 0 && !c->err)
        psi_set_error(c, PS_ERR_OTHER, "internal error: requests left without replies");
    int ok = 1;
    for (size_t i = 0; i < n; i++) {
        free(qs[i].cmd);
        free(qs[i].tail);
        if (items[i].status != PS_OK && items[i].status != PS_ERR_SERVER &&
            items[i].status != PS_ERR_PROTOCOL)
            ok = 0;
    }
    free(qs);
    if (!ok && !c->err) psi_set_error(c, PS_ERR_OTHER, "some commands got no reply");
    return ok ? PS_OK : PS_ERR;
}

int psAccumTake(psClient *c, psAccumItem *items, size_t n, const psAccumTakeOpts *o) {
    if (!o || o->mincount < 1) {
        psi_set_error(c, PS_ERR_ARG, "psAccumTake needs mincount >= 1");
        return PS_ERR;
    }
    return run_items(c, items, n, K_TAKE, o);
}

int psAccumAck(psClient *c, psAccumItem *items, size_t n) {
    return run_items(c, items, n, K_ACK, NULL);
}

int psAccumForward(psClient *c, psAccumItem *items, size_t n) {
    return run_items(c, items, n, K_FORWARD, NULL);
}

int psAccumPull(psClient *c, psAccumItem *items, size_t n) {
    return run_items(c, items, n, K_PULL, NULL);
}

int psAccumMirror(psClient *c, psAccumItem *items, size_t n) {
    return run_items(c, items, n, K_MIRROR, NULL);
}

void psAccumItemsRelease(psAccumItem *items, size_t n) {
    for (size_t i = 0; items && i < n; i++) {
        if (items[i].priv_) freeReplyObject(items[i].priv_);
        items[i].priv_ = NULL;
        items[i].sum = NULL;
    }
}

/* One command with its reply returned (psAccumWait, psAccumCreate). */
static redisReply *run_one(psClient *c, const char *key, accReq *q) {
    q->req.done = acc_done;
    q->req.udata = q;
    if (!q->cmd) {
        psi_set_error(c, PS_ERR_OOM, "out of memory");
        return NULL;
    }
    psi_submit(c, &q->req);
    accBatch b = {q, 1};
    psi_run(c, batch_done, &b);
    free(q->cmd);
    q->cmd = NULL;
    if (!q->reply && !c->err) psi_set_error(c, PS_ERR_OTHER, "no reply to %s", key);
    return q->reply;
}

int psAccumWait(psClient *c, const char *key, uint64_t mincount, int timeout_ms) {
    psi_clear_error(c);
    if (!key || mincount < 1 || timeout_ms < 1) {
        psi_set_error(c, PS_ERR_ARG, "psAccumWait needs a key, mincount >= 1, timeout_ms >= 1");
        return PS_ERR;
    }
    accReq q;
    memset(&q, 0, sizeof(q));
    const size_t kl = strlen(key);
    psi_req_init(&q.req, key, kl);
    ENCODE(&q, ps_wire_accum_wait(key, kl, mincount, (uint64_t)timeout_ms, buf, cap));
    redisReply *rep = run_one(c, key, &q);
    if (!rep) return PS_ERR;
    int rc = PS_ERR;
    if (rep->type == REDIS_REPLY_INTEGER) rc = 1;
    else if (rep->type == REDIS_REPLY_NIL) rc = 0;
    else if (rep->type == REDIS_REPLY_ERROR) psi_set_error(c, PS_ERR_SERVER, "%s", rep->str);
    else psi_set_error(c, PS_ERR_PROTOCOL, "unexpected PS.TAKEWAIT reply");
    freeReplyObject(rep);
    return rc;
}

int psAccumCreate(psClient *c, const char *key, int ndim, const uint64_t *dims) {
    psi_clear_error(c);
    if (!key || ndim < 1 || ndim > 8 || !dims) {
        psi_set_error(c, PS_ERR_ARG, "psAccumCreate needs a key and 1..8 dims");
        return PS_ERR;
    }
    accReq q;
    memset(&q, 0, sizeof(q));
    const size_t kl = strlen(key);
    psi_req_init(&q.req, key, kl);
    const char *opts[] = {"OPTIM", ps_proto_optim_name(PS_PROTO_OPT_ACCUM)};
    psWireCreate a = {key, kl, ndim, dims, 0, opts, 2, -1, 0, 1};
    ENCODE(&q, ps_wire_create(&a, buf, cap));
    redisReply *rep = run_one(c, key, &q);
    if (!rep) return PS_ERR;
    int rc = PS_OK;
    if (rep->type == REDIS_REPLY_ERROR) {
        psi_set_error(c, PS_ERR_SERVER, "%s", rep->str);
        rc = PS_ERR;
    }
    freeReplyObject(rep);
    return rc;
}
