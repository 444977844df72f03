/* batch_pull.c -- key pulls of the batch layer (batch.h): their encoding
 * (dense, by ids, IDFORMAT EF), the sink that decodes a reply straight into
 * the caller's rows, reply handling (lost state, the resend of an EF pull
 * to a server without IDFORMAT), and the begin/submit/send/wait of a
 * user's pull. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch_int.h"

/* ========================================================================
 * Pulls
 * ======================================================================== */

static size_t pull_want(const psPull *p) {
    return p->nrows * ps_dense_encoded_size(p->fmt, p->width);
}

/* Decode the data of pull 'p' ('len' bytes) into its rows. 0, or -1 when
 * the bytes are not its rows. */
static int pull_deliver(const psPull *p, const char *data, size_t len) {
    size_t rowb = ps_dense_encoded_size(p->fmt, p->width);
    if (len != rowb * p->nrows) return -1;
    for (size_t i = 0; i < p->nrows; i++) {
        float *dst = p->dst + (p->pos ? p->pos[i] : i) * p->width;
        const unsigned char *src = (const unsigned char *)data + i * rowb;
        if (p->fmt == PS_FMT_F32) memcpy(dst, src, rowb);
        else if (ps_decode(p->fmt, src, rowb, p->width, dst) != 0) return -1;
    }
    return 0;
}

/* The sink of a key pull: the data blob of a [version, data] reply, decoded
 * from the engine's buffer straight into the destination. */
static int pull_sink(psClient *c, psReq *r, int idx, int n, const char *data, size_t len) {
    psPull *p = r->udata;
    (void)c;
    if (idx != 1 || n != 2 || !p->u->pull.live || p->dst == NULL || pull_deliver(p, data, len))
        return 0;
    p->direct = len;
    return 1;
}

/* Record a failed key pull: on the client (the call that read it) and, the
 * first one, on the user, so that its wait reports it even when another
 * call read the reply. */
static void pull_failed(psClient *c, psUser *u, int code, const char *msg) {
    psi_set_error(c, code, "%s", msg);
    if (u->pull.failed) return;
    u->pull.failed = code;
    snprintf(u->pull.errstr, sizeof(u->pull.errstr), "%.*s", (int)sizeof(u->pull.errstr) - 1,
             msg);
}

static int pull_encode_ids(psPull *p, const uint64_t *ids, size_t nids);

static int pull_done(psClient *c, psReq *r, redisReply *reply) {
    psPull *p = r->udata;
    psUser *u = p->u;
    psKey *k = p->k;
    size_t want = pull_want(p);
    char msg[sizeof(c->errstr) + 64], lost[256];
    u->pull.pending--;
    if (reply != NULL && reply->type == REDIS_REPLY_NIL && p->minver > 0) {
        /* The MINVERSION wait timed out: nothing decoded, the caller pulls again. */
        p->timed_out = 1;
        p->direct = 0;
        freeReplyObject(reply);
        return PSI_DONE;
    }
    if (reply == NULL) {
        /* the engine recorded why, unless an earlier error was recorded first */
        snprintf(msg, sizeof(msg), "PS.PULL %.60s: %s", k->key,
                 r->failed ? "failed after retries" : "no reply");
        pull_failed(c, u, c->err ? c->err : PS_ERR_IO, c->err ? c->errstr : msg);
        p->direct = 0;
        return PSI_DONE;
    }
    if (p->by_ids && p->idfmt == PS_PROTO_IDFMT_EF && is_unknown_idformat(reply)) {
        /* A server before IDFORMAT: the same pull again, raw (the rows
         * still in sorted order), and raw ids on this client from now on. */
        c->priv->batch->ids_ef = 0;
        p->idfmt = PS_PROTO_IDFMT_RAW;
        if (pull_encode_ids(p, p->sids, p->nrows) == 0) {
            freeReplyObject(reply);
            u->pull.pending++;
            return PSI_RESEND;
        }
    }
    if (is_nokey(reply) && k->has_acked) {
        psi_lost_state(c, r->node, k->key, k->acked, 0, 0, lost, sizeof(lost));
        snprintf(msg, sizeof(msg), "PS.PULL: %s", lost);
        pull_failed(c, u, PS_ERR_LOST_STATE, msg);
    } else if (reply->type == REDIS_REPLY_ERROR) {
        snprintf(msg, sizeof(msg), "PS.PULL %.60s: %.160s%s", k->key, reply->str,
                 is_nokey(reply) ? u->nokey_hint : "");
        pull_failed(c, u, PS_ERR_SERVER, msg);
    } else if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
               reply->element[0]->type != REDIS_REPLY_INTEGER ||
               reply->element[1]->type != REDIS_REPLY_STRING ||
               (p->direct ? p->direct : reply->element[1]->len) != want) {
        snprintf(msg, sizeof(msg), "PS.PULL %.60s: unexpected reply (%s)", k->key, u->shape_hint);
        pull_failed(c, u, PS_ERR_PROTOCOL, msg);
    } else if (!p->direct && u->pull.live && p->dst &&
               pull_deliver(p, reply->element[1]->str, reply->element[1]->len) != 0) {
        snprintf(msg, sizeof(msg), "PS.PULL %.60s: undecodable data", k->key);
        pull_failed(c, u, PS_ERR_PROTOCOL, msg);
    } else {
        uint64_t v = (uint64_t)reply->element[0]->integer;
        k->seen = v;
        k->has_seen = 1;
        k->seen_now = 1;
        if (k->has_acked && v < k->acked) {
            /* Older than what this client saw acknowledged: lost writes. */
            psi_lost_state(c, r->node, k->key, k->acked, 1, v, lost, sizeof(lost));
            if (psi_lost_state_continues(c) == 0) {
                snprintf(msg, sizeof(msg), "PS.PULL: %s", lost);
                pull_failed(c, u, PS_ERR_LOST_STATE, msg);
            }
            k->acked = v;
        }
        key_acked(k, v);
        c->stats.pulls++;
        c->stats.bytes_received += want;
        if (p->by_ids) c->stats.rows_pulled += p->nrows;
    }
    p->direct = 0;
    freeReplyObject(reply);
    return PSI_DONE;
}

/* Route pull 'p' (encoded 'len' bytes in p->cmd) by its key. */
static void pull_init(psPull *p, psUser *u, psKey *k, size_t len) {
    psi_req_init(&p->req, k->key, k->keylen);
    p->req.cmd = p->cmd;
    p->req.cmdlen = len;
    p->req.done = pull_done;
    p->req.sink = pull_sink;
    p->req.udata = p;
    p->u = u;
    p->k = k;
    p->timed_out = 0;
    p->direct = 0;
    k->seen_now = 0;
}

int psi_pull_dense(psPull *p, psUser *u, psKey *k, ps_format fmt, uint64_t minver, int wait_ms,
                   float *dst, size_t elements) {
    psWirePull a = {k->key, k->keylen, fmt, minver, wait_ms, NULL, 0, 0, NULL};
    size_t len = ps_wire_pull(&a, p->cmd, p->cmdcap);
    if (len > p->cmdcap) {
        if (grow(&p->cmd, &p->cmdcap, len, 1)) return -1;
        ps_wire_pull(&a, p->cmd, p->cmdcap);
    }
    pull_init(p, u, k, len);
    p->fmt = fmt;
    p->dst = dst;
    p->pos = NULL;
    p->nrows = 1;
    p->width = elements;
    p->by_ids = 0;
    p->minver = minver;
    return 0;
}

/* Encode key pull by ids 'p' (p->idfmt) of 'ids' (nids) into p->cmd and
 * route it. 0 or -1. */
static int pull_encode_ids(psPull *p, const uint64_t *ids, size_t nids) {
    psKey *k = p->k;
    psWirePull a = {k->key, k->keylen, p->fmt, 0, 0, ids, nids, p->idfmt, NULL};
    size_t len = ps_wire_pull(&a, p->cmd, p->cmdcap);
    if (len > p->cmdcap) {
        if (grow(&p->cmd, &p->cmdcap, len, 1)) return -1;
        ps_wire_pull(&a, p->cmd, p->cmdcap);
    }
    p->req.cmd = p->cmd;
    p->req.cmdlen = len;
    return 0;
}

int psi_pull_ids(psPull *p, psUser *u, psKey *k, ps_format fmt, const uint64_t *ids,
                 size_t nids, const size_t *pos, float *dst, size_t dim) {
    struct psBatches *bp = u->client->priv->batch;
    p->idfmt = PS_PROTO_IDFMT_RAW;
    if (bp->ids_ef && nids >= PS_IDS_EF_MIN) {
        /* Sorted copies of the ids and their positions: EF sends the ids
         * sorted and the rows come back in that order. */
        if (nids > p->scap) {
            free(p->sids);
            free(p->spos);
            p->scap = 0;
            p->sids = malloc(nids * sizeof(uint64_t));
            p->spos = malloc(nids * sizeof(size_t));
            if (p->sids == NULL || p->spos == NULL) return -1;
            p->scap = nids;
        }
        if (sort_ids(bp, ids, nids)) return -1;
        for (size_t i = 0; i < nids; i++) {
            p->sids[i] = bp->pairs[i].id;
            p->spos[i] = pos ? pos[bp->pairs[i].at] : bp->pairs[i].at;
        }
        if (ef_pays(bp, p->sids, nids)) {
            p->idfmt = PS_PROTO_IDFMT_EF;
            ids = p->sids;
            pos = p->spos;
        }
    }
    pull_init(p, u, k, 0);
    p->fmt = fmt;
    if (pull_encode_ids(p, ids, nids)) return -1;
    p->dst = dst;
    p->pos = pos;
    p->nrows = nids;
    p->width = dim;
    p->by_ids = 1;
    p->minver = 0;
    return 0;
}

void psi_pull_free(psPull *p) {
    free(p->cmd);
    free(p->sids);
    free(p->spos);
    p->cmd = NULL;
    p->sids = NULL;
    p->spos = NULL;
    p->cmdcap = p->scap = 0;
}

void psi_pulls_begin(psUser *u) {
    u->pull.open = 1;
    u->pull.live = 1;
    u->pull.pending = 0;
    u->pull.failed = 0;
}

void psi_pull_submit(psClient *c, psPull *p) {
    p->u->pull.pending++;
    psi_submit(c, &p->req);
}

static int pulls_finished(psClient *c, void *arg) {
    (void)c;
    return ((psUser *)arg)->pull.pending == 0;
}

int psi_pulls_sent(psClient *c, psUser *u) {
    psi_flush(c);
    if (u->pull.failed) {
        /* Failed already: finish it here, so that PS_ERR always means no
         * pull is left in flight. */
        int code = u->pull.failed;
        char msg[sizeof(u->pull.errstr)];
        snprintf(msg, sizeof(msg), "%s", u->pull.errstr);
        psi_run(c, pulls_finished, u);
        u->pull.open = 0;
        u->pull.live = 0;
        c->err = 0;
        psi_set_error(c, code, "%s", msg);
        return PS_ERR;
    }
    return PS_OK;
}

int psi_pulls_wait(psClient *c, psUser *u) {
    if (u->pull.pending && psi_run(c, pulls_finished, u) != 0 && u->pull.pending)
        psi_set_error(c, PS_ERR_OTHER, "internal error: pulls left without replies");
    u->pull.open = 0;
    u->pull.live = 0;
    if (u->pull.failed && !c->err) psi_set_error(c, u->pull.failed, "%s", u->pull.errstr);
    return c->err ? PS_ERR : PS_OK;
}
