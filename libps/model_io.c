/* model_io.c -- libps model pulls and pushes. Each partition pull or push
 * is one engine request (psReq) built here, whose callbacks interpret the
 * reply: pull data is decoded into the caller's arrays (straight from the
 * engine's read buffer, by the request's sink), push replies are counted,
 * a push whose VERSION the server no longer has is re-encoded and resent.
 * A model push is a push batch: the encoded blobs of all its partitions,
 * kept until every partition (and its WAITs) answered, for resends. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

/* ========================================================================
 * Models on a client
 *
 * The engine holds pointers into a model while its requests are in flight,
 * so the client lists the models it has requests of: psModelFree waits for
 * them, psClientFree forgets them.
 * ======================================================================== */

static int batch_of_model_busy(psClient *c, const psModel *m) {
    for (int i = 0; i < c->priv->nbatches; i++)
        if (c->priv->batches[i].g.in_use && c->priv->batches[i].m == m) return 1;
    return 0;
}

static int model_idle(psClient *c, void *arg) {
    psModel *m = arg;
    return m->pull_pending == 0 && !batch_of_model_busy(c, m);
}

/* Remember that 'm' has requests on 'c' (after waiting for those it has on
 * another client). 0 or -1 (out of memory, error recorded). */
static int model_attach(psClient *c, psModel *m) {
    psClientPriv *pv = c->priv;
    if (m->client == c) return 0;
    if (m->client) psi_model_detach(m);
    if (pv->nmodels == pv->modelcap) {
        int cap = pv->modelcap ? pv->modelcap * 2 : 4;
        psModel **nm = realloc(pv->models, sizeof(*nm) * (size_t)cap);
        if (nm == NULL) {
            psi_set_error(c, PS_ERR_OOM, "out of memory");
            return -1;
        }
        pv->models = nm;
        pv->modelcap = cap;
    }
    pv->models[pv->nmodels++] = m;
    m->client = c;
    return 0;
}

void psi_model_detach(psModel *m) {
    psClient *c = m->client;
    psClientPriv *pv;
    int i;
    if (c == NULL) return;
    pv = c->priv;
    /* A pull in flight is abandoned (its destination arrays may be gone
     * already); pushes are waited for, so they count and are not lost. */
    m->pull_dst = NULL;
    if (!model_idle(c, m) && psi_run(c, model_idle, m) != 0 && !model_idle(c, m)) {
        fprintf(stderr, "libps: model '%s' freed with requests the client cannot finish\n", m->job);
        abort();
    }
    for (i = 0; i < pv->nmodels; i++)
        if (pv->models[i] == m) {
            pv->models[i] = pv->models[--pv->nmodels];
            break;
        }
    m->client = NULL;
}

int psi_models_init(psClient *c) {
    psClientPriv *pv = c->priv;
    pv->nbatches = pv->push_window;
    pv->batches = calloc((size_t)pv->nbatches, sizeof(psPushBatch));
    return pv->batches ? 0 : -1;
}

void psi_models_free(psClient *c) {
    psClientPriv *pv = c->priv;
    int i, k;
    for (i = 0; i < pv->nmodels; i++) {
        psModel *m = pv->models[i];
        m->client = NULL;
        m->pull_pending = 0;
        m->pull_dst = NULL;
    }
    free(pv->models);
    for (i = 0; i < pv->nbatches && pv->batches; i++) {
        for (k = 0; k < pv->batches[i].reqcap; k++) free(pv->batches[i].reqs[k].head);
        free(pv->batches[i].buf);
        free(pv->batches[i].reqs);
    }
    free(pv->batches);
}

int psi_pushes_idle(psClient *c, void *arg) {
    (void)arg;
    for (int i = 0; i < c->priv->nbatches; i++)
        if (c->priv->batches[i].g.in_use) return 0;
    return 1;
}

static int batch_free_exists(psClient *c, void *arg) {
    (void)arg;
    for (int i = 0; i < c->priv->nbatches; i++)
        if (!c->priv->batches[i].g.in_use) return 1;
    return 0;
}

/* ========================================================================
 * Pushes
 * ======================================================================== */

/* Encode PS.PUSHGRAD 'q' from its arguments (again after a change). 0 or -1. */
static int push_encode(psPushReq *q) {
    size_t hl, tl, need = ps_wire_pushgrad_head_size(q->args.keylen);
    if (q->headcap < need) {
        char *nh = realloc(q->head, need);
        if (nh == NULL) return -1;
        q->head = nh;
        q->headcap = need;
    }
    if (ps_wire_pushgrad(&q->args, q->head, q->headcap, &hl, q->tail, sizeof(q->tail), &tl) != 0)
        return -1;
    q->ack.req.cmd = q->head;
    q->ack.req.cmdlen = hl;
    q->ack.req.tail = q->tail;
    q->ack.req.taillen = tl;
    return 0;
}

/* The items of a model push batch (pushtrack.h): its partition pushes. */
static psPushAck *batch_item(psPushGroup *g, int k) {
    psPushBatch *b = (psPushBatch *)(void *)((char *)g - offsetof(psPushBatch, g));
    return &b->reqs[k].ack;
}

/* A push taken back after its WAIT was lost: counted again when resent. */
static void batch_unacked(psClient *c, psPushAck *a) {
    (void)a;
    c->stats.pushes--;
}

/* Whether 'reply' is the module's "no such key" error. */
static int is_nokey(const redisReply *reply) {
    return psi_reply_error(reply) == PS_PROTO_ERR_NOKEY;
}

/* Record that partition 'p' was seen at version 'v' (acknowledged). */
static void part_seen(psPart *p, uint64_t v) {
    if (!p->has_acked || v > p->acked_version) p->acked_version = v;
    p->has_acked = 1;
}

static int push_done(psClient *c, psReq *r, redisReply *reply) {
    psPushReq *q = r->udata;
    psPart *p = q->part;
    switch (psi_push_reply(c, r, reply, p->key, q->args.has_version, &q->args.version,
                           &p->has_acked, &p->acked_version)) {
    case PSI_PUSH_RESEND:
        if (push_encode(q) == 0) return PSI_RESEND;
        c->stats.push_errors++;
        psi_set_error(c, PS_ERR_OOM, "out of memory");
        break;
    case PSI_PUSH_ACKED:
        c->stats.pushes++;
        psi_push_acked(c, &q->ack, r->node); /* a lost WAIT resends it (pushtrack.c) */
        break;
    default: break;
    }
    psi_group_release(&q->b->g);
    return PSI_DONE;
}


/* Encoded bytes of partition 'p' in the model's push format. */
static size_t part_encoded_size(const psModel *m, const psPart *p) {
    if (m->push_fmt == PS_FMT_TOPK) {
        double k = m->topk_ratio * (double)p->elements;
        size_t kk = (size_t)k;
        if ((double)kk < k) kk++;
        if (kk < 1) kk = 1;
        if (kk > p->elements) kk = p->elements;
        return ps_topk_encoded_size((uint32_t)kk);
    }
    return ps_dense_encoded_size(m->push_fmt, p->elements);
}

/* Encode partition 'p' of tensor 't' from 'src' (the tensor's flat array)
 * into 'dst'. With error feedback 'src' is the residual and what was sent is
 * subtracted from it. Returns the bytes written. */
static size_t encode_part(psModel *m, psPart *p, float *src, int feedback, unsigned char *dst) {
    float *x = src + p->offset;
    size_t len, i;
    if (m->push_fmt == PS_FMT_TOPK) {
        uint32_t k;
        len = ps_topk_encode(x, p->elements,
                             (uint32_t)((part_encoded_size(m, p) - 4) / 8), dst, m->topk_scratch);
        memcpy(&k, dst, 4);
        for (i = 0; i < k; i++) {
            uint32_t idx;
            float v;
            memcpy(&idx, dst + 4 + 4 * i, 4);
            memcpy(&v, dst + 4 + 4 * (size_t)k + 4 * i, 4);
            x[idx] -= v;
        }
        return len;
    }
    len = ps_dense_encoded_size(m->push_fmt, p->elements);
    if (feedback) ps_encode_feedback(m->push_fmt, x, p->elements, dst); /* one pass */
    else ps_encode(m->push_fmt, x, p->elements, dst);
    return len;
}

/* Make batch 'b' hold 'nreq' push requests and 'need' blob bytes. New
 * requests start zeroed (no head buffer yet). 0 or -1. */
static int batch_reserve(psPushBatch *b, int nreq, size_t need) {
    if (b->bufcap < need) {
        unsigned char *nb = realloc(b->buf, need);
        if (nb == NULL) return -1;
        b->buf = nb;
        b->bufcap = need;
    }
    if (b->reqcap < nreq) {
        psPushReq *nr = realloc(b->reqs, sizeof(*nr) * (size_t)nreq);
        if (nr == NULL) return -1;
        memset(nr + b->reqcap, 0, sizeof(*nr) * (size_t)(nreq - b->reqcap));
        b->reqs = nr;
        b->reqcap = nreq;
    }
    return 0;
}

int psModelPush(psClient *c, psModel *m, const float *const *grads, const uint64_t *versions,
                float scale) {
    psClientPriv *pv = c->priv;
    psPushBatch *b = NULL;
    size_t need = 0, off = 0;
    int t, i, nreq = 0, lossy;

    psi_clear_error(c);
    if (psModelLayout(c, m) != PS_OK || model_attach(c, m) != 0) return PS_ERR;
    lossy = m->push_fmt != PS_FMT_F32;
    if (psi_run(c, batch_free_exists, NULL) != 0) {
        psi_set_error(c, PS_ERR_OTHER, "internal error: push window never freed");
        return PS_ERR;
    }
    for (i = 0; i < pv->nbatches; i++)
        if (!pv->batches[i].g.in_use) { b = &pv->batches[i]; break; }
    for (t = 0; t < m->ntensors; t++) {
        if (grads[t] == NULL) continue;
        for (i = 0; i < m->tensors[t].nparts; i++) {
            need += part_encoded_size(m, &m->tensors[t].parts[i]);
            nreq++;
        }
    }
    if (nreq == 0) return c->err ? PS_ERR : PS_OK;
    if (batch_reserve(b, nreq, need) != 0) {
        psi_set_error(c, PS_ERR_OOM, "out of memory for the push buffer");
        return PS_ERR;
    }
    if (m->push_fmt == PS_FMT_TOPK && m->topk_scratch == NULL) {
        m->topk_scratch = malloc(m->max_part_elems * sizeof(uint32_t));
        if (m->topk_scratch == NULL) {
            psi_set_error(c, PS_ERR_OOM, "out of memory");
            return PS_ERR;
        }
    }
    b->m = m;
    b->nreqs = 0;
    for (t = 0; t < m->ntensors; t++) {
        psTensor *tt = &m->tensors[t];
        float *src = (float *)grads[t];
        size_t e;
        if (grads[t] == NULL) continue;
        if (lossy) {
            if (tt->resid == NULL && (tt->resid = calloc(tt->elements, sizeof(float))) == NULL) {
                psi_set_error(c, PS_ERR_OOM, "out of memory");
                return PS_ERR;
            }
            for (e = 0; e < tt->elements; e++) tt->resid[e] += grads[t][e];
            src = tt->resid;
        }
        for (i = 0; i < tt->nparts; i++) {
            psPart *p = &tt->parts[i];
            psPushReq *q = &b->reqs[b->nreqs++];
            psWirePush *a = &q->args;
            psi_push_init(&q->ack, &b->g, p->key, p->keylen);
            q->ack.req.done = push_done;
            q->ack.req.udata = q;
            q->ack.req.blob = b->buf + off;
            q->ack.req.bloblen = encode_part(m, p, src, lossy, b->buf + off);
            off += q->ack.req.bloblen;
            q->b = b;
            q->part = p;
            a->key = p->key;
            a->keylen = p->keylen;
            a->bloblen = q->ack.req.bloblen;
            a->fmt = m->push_fmt;
            /* Explicit versions are per tensor; else each partition's own
             * version from the last completed pull. */
            a->has_version = versions != NULL || p->has_pulled;
            a->version = versions ? versions[t] : p->pulled_version;
            a->client_id = c->client_id;
            if (p->seq == 0) p->seq = pv->seq_base;
            a->seq = ++p->seq;
            a->scale = scale;
            a->flags = (pv->flags & PS_FLAG_NO_PUSH_ID ? PS_WIRE_NO_ID : 0) |
                       (pv->flags & PS_FLAG_NO_PUSH_VERSION ? PS_WIRE_NO_VERSION : 0);
            if (push_encode(q) != 0) {
                psi_set_error(c, PS_ERR_OOM, "out of memory");
                return PS_ERR;
            }
            c->stats.bytes_sent += q->ack.req.bloblen;
        }
    }
    b->g.n = b->nreqs;
    b->g.item = batch_item;
    b->g.unacked = batch_unacked;
    psi_group_submit(c, &b->g);
    return c->err ? PS_ERR : PS_OK;
}

/* ========================================================================
 * Pulls
 * ======================================================================== */

/* Bytes of the data blob of a pull of partition 'p' in the model's pull format. */
static size_t pull_blob_size(const psModel *m, const psPart *p) {
    return ps_dense_encoded_size(m->pull_fmt, p->elements);
}

/* The sink of a partition pull: the data blob of a [version, data] reply,
 * decoded from the engine's buffer straight into the destination. */
static int pull_sink(psClient *c, psReq *r, int idx, int n, const char *data, size_t len) {
    psPart *p = r->udata;
    psModel *m = p->m;
    float *dst = m->pull_dst ? m->pull_dst[p->t] : NULL;
    (void)c;
    if (idx != 1 || n != 2 || dst == NULL || len != pull_blob_size(m, p)) return 0;
    if (m->pull_fmt == PS_FMT_F32) memcpy(dst + p->offset, data, len);
    else if (ps_decode(m->pull_fmt, (const unsigned char *)data, len, p->elements,
                       dst + p->offset) != 0)
        return 0;
    p->direct = len;
    return 1;
}

/* Record a failed partition pull: on the client (the call that read it)
 * and, the first one, on the model, so that psModelPullWait() reports it
 * even when another call read the reply. */
static void pull_failed(psClient *c, psModel *m, int code, const char *msg) {
    psi_set_error(c, code, "%s", msg);
    if (m->pull_failed) return;
    m->pull_failed = code;
    snprintf(m->pull_errstr, sizeof(m->pull_errstr), "%.*s", (int)sizeof(m->pull_errstr) - 1, msg);
}

static int pull_done(psClient *c, psReq *r, redisReply *reply) {
    psPart *p = r->udata;
    psModel *m = p->m;
    size_t want = pull_blob_size(m, p);
    char msg[sizeof(c->errstr) + 64];
    m->pull_pending--;
    if (reply != NULL && reply->type == REDIS_REPLY_NIL && p->pull_min > 0) {
        /* The MINVERSION wait timed out: nothing decoded, the caller pulls again. */
        p->pull_timed_out = 1;
        p->direct = 0;
        freeReplyObject(reply);
        return PSI_DONE;
    }
    if (reply == NULL) {
        /* fail_req recorded why, unless an earlier error was recorded first */
        snprintf(msg, sizeof(msg), "PS.PULL %.60s: %s", p->key,
                 r->failed ? "failed after retries" : "no reply");
        pull_failed(c, m, c->err ? c->err : PS_ERR_IO, c->err ? c->errstr : msg);
        p->direct = 0;
        return PSI_DONE;
    }
    if (reply->type == REDIS_REPLY_ERROR && is_nokey(reply) && p->has_acked) {
        char lost[256];
        psi_lost_state(c, r->node, p->key, p->acked_version, 0, 0, lost, sizeof(lost));
        snprintf(msg, sizeof(msg), "PS.PULL: %s", lost);
        pull_failed(c, m, PS_ERR_LOST_STATE, msg);
    } else if (reply->type == REDIS_REPLY_ERROR) {
        snprintf(msg, sizeof(msg), "PS.PULL %.40s: %.80s%s", p->key, reply->str,
                 is_nokey(reply) ? " (never seen by this client: not created yet, or created "
                                   "with another partition size?)" : "");
        pull_failed(c, m, PS_ERR_SERVER, msg);
    } else if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
               reply->element[0]->type != REDIS_REPLY_INTEGER ||
               reply->element[1]->type != REDIS_REPLY_STRING ||
               (p->direct ? p->direct : reply->element[1]->len) != want) {
        snprintf(msg, sizeof(msg), "PS.PULL %.60s: unexpected reply (shape differs from the model's?)",
                 p->key);
        pull_failed(c, m, PS_ERR_PROTOCOL, msg);
    } else {
        float *dst = m->pull_dst ? m->pull_dst[p->t] : NULL;
        if (dst && !p->direct &&
            ps_decode(m->pull_fmt, (const unsigned char *)reply->element[1]->str,
                      reply->element[1]->len, p->elements, dst + p->offset) != 0) {
            snprintf(msg, sizeof(msg), "PS.PULL %.60s: undecodable data", p->key);
            pull_failed(c, m, PS_ERR_PROTOCOL, msg);
        } else {
            p->version = (uint64_t)reply->element[0]->integer;
            p->has_version = 1;
            if (p->has_acked && p->version < p->acked_version) {
                /* Older than what this client saw acknowledged: lost writes. */
                char lost[256];
                psi_lost_state(c, r->node, p->key, p->acked_version, 1, p->version, lost,
                               sizeof(lost));
                if (c->priv->lost_state_policy != PS_LOST_STATE_CONTINUE) {
                    snprintf(msg, sizeof(msg), "PS.PULL: %s", lost);
                    pull_failed(c, m, PS_ERR_LOST_STATE, msg);
                }
                p->acked_version = p->version;
            }
            part_seen(p, p->version);
            c->stats.pulls++;
            c->stats.bytes_received += want;
        }
    }
    p->direct = 0;
    freeReplyObject(reply);
    return PSI_DONE;
}

/* Build the PS.PULL request of partition 'p'. 0 or -1 (out of memory). */
static int pull_prepare(psModel *m, psPart *p) {
    size_t len = ps_wire_pull_min(p->key, p->keylen, m->pull_fmt, p->pull_min, m->pull_wait_ms,
                                  p->pullcmd, p->pullcap);
    if (len > p->pullcap) {
        char *nc = realloc(p->pullcmd, len);
        if (nc == NULL) return -1;
        p->pullcmd = nc;
        p->pullcap = len;
        ps_wire_pull_min(p->key, p->keylen, m->pull_fmt, p->pull_min, m->pull_wait_ms, p->pullcmd,
                         p->pullcap);
    }
    p->pull_timed_out = 0;
    psi_req_init(&p->pull, p->key, p->keylen);
    p->pull.cmd = p->pullcmd;
    p->pull.cmdlen = len;
    p->pull.done = pull_done;
    p->pull.sink = pull_sink;
    p->pull.udata = p;
    p->direct = 0;
    return 0;
}

static int pull_finished(psClient *c, void *arg) {
    (void)c;
    return ((psModel *)arg)->pull_pending == 0;
}

/* psModelPullAsync() whose partition pulls wait (MINVERSION, TIMEOUT
 * 'wait_ms') when 'wait_ms' > 0: for minversions[t], or with 'minversions'
 * NULL for a version above the partition's last completed pull (a
 * partition never pulled does not wait). */
static int pull_begin(psClient *c, psModel *m, float **dst, int wait_ms,
                      const uint64_t *minversions) {
    int t, p;
    psi_clear_error(c);
    if (psModelLayout(c, m) != PS_OK || model_attach(c, m) != 0) return PS_ERR;
    if (m->pull_pending || m->pull_dst) {
        psi_set_error(c, PS_ERR_ARG, "a pull of model '%s' is already in flight", m->job);
        return PS_ERR;
    }
    if (m->pull_dstv == NULL &&
        (m->pull_dstv = calloc((size_t)m->ntensors, sizeof(float *))) == NULL) {
        psi_set_error(c, PS_ERR_OOM, "out of memory");
        return PS_ERR;
    }
    m->pull_wait_ms = wait_ms;
    for (t = 0; t < m->ntensors; t++)
        for (p = 0; dst[t] && p < m->tensors[t].nparts; p++) {
            psPart *pp = &m->tensors[t].parts[p];
            pp->pull_min = wait_ms <= 0 ? 0
                           : minversions ? minversions[t]
                           : pp->has_pulled ? pp->pulled_version + 1 : 0;
            if (pull_prepare(m, pp) != 0) {
                psi_set_error(c, PS_ERR_OOM, "out of memory");
                return PS_ERR;
            }
        }
    memcpy(m->pull_dstv, dst, sizeof(float *) * (size_t)m->ntensors);
    m->pull_dst = m->pull_dstv;
    m->pull_failed = 0;
    m->pull_pending = 0;
    for (t = 0; t < m->ntensors; t++)
        if (dst[t]) m->pull_pending += m->tensors[t].nparts;
    for (t = 0; t < m->ntensors; t++)
        for (p = 0; dst[t] && p < m->tensors[t].nparts; p++)
            psi_submit(c, &m->tensors[t].parts[p].pull);
    psi_flush(c);
    if (m->pull_failed) {
        /* Failed already (e.g. no node for a slot): finish it here, so that
         * PS_ERR always means no pull is left in flight. */
        int code = m->pull_failed;
        char msg[256];
        snprintf(msg, sizeof(msg), "%s", m->pull_errstr);
        psi_run(c, pull_finished, m);
        m->pull_dst = NULL;
        c->err = 0;
        psi_set_error(c, code, "%s", msg);
        return PS_ERR;
    }
    return PS_OK;
}

int psModelPullAsync(psClient *c, psModel *m, float **dst) {
    return pull_begin(c, m, dst, 0, NULL);
}

int psModelPullWait(psClient *c, psModel *m, uint64_t *versions_out) {
    int t, p;
    psi_clear_error(c);
    if (m->pull_dst == NULL) {
        psi_set_error(c, PS_ERR_ARG, "no pull of model '%s' in flight", m->job);
        return PS_ERR;
    }
    if (psi_run(c, pull_finished, m) != 0)
        psi_set_error(c, PS_ERR_OTHER, "internal error: pulls left without replies");
    if (m->pull_failed && !c->err) psi_set_error(c, m->pull_failed, "%s", m->pull_errstr);
    for (t = 0; t < m->ntensors; t++) {
        uint64_t v = UINT64_MAX;
        for (p = 0; p < m->tensors[t].nparts; p++) {
            psPart *pp = &m->tensors[t].parts[p];
            if (pp->version < v) v = pp->version;
            /* What pushes send from now on: the versions of this pull's
             * data, partition by partition. */
            if (m->pull_dst[t] && pp->has_version) {
                pp->pulled_version = pp->version;
                pp->has_pulled = 1;
            }
        }
        if (versions_out) versions_out[t] = (m->pull_dst[t] && m->tensors[t].nparts) ? v : 0;
    }
    m->pull_dst = NULL;
    return c->err ? PS_ERR : PS_OK;
}

int psModelPull(psClient *c, psModel *m, float **dst, uint64_t *versions_out) {
    if (psModelPullAsync(c, m, dst) != PS_OK) return PS_ERR;
    return psModelPullWait(c, m, versions_out);
}

int psModelPullMinVersion(psClient *c, psModel *m, float **dst, const uint64_t *minversions,
                          int timeout_ms, uint64_t *versions_out) {
    psi_clear_error(c);
    int limit = c->priv ? c->priv->command_timeout_ms : -1;
    if (timeout_ms <= 0 || (limit > 0 && timeout_ms >= limit)) {
        psi_set_error(c, PS_ERR_ARG, "psModelPullMinVersion: timeout_ms %d must be > 0 and below "
                      "the command timeout (%d ms)", timeout_ms, limit);
        return PS_ERR;
    }
    if (pull_begin(c, m, dst, timeout_ms, minversions) != PS_OK ||
        psModelPullWait(c, m, versions_out) != PS_OK)
        return PS_ERR;
    int late = 0;
    for (int t = 0; t < m->ntensors; t++)
        for (int p = 0; dst[t] && p < m->tensors[t].nparts; p++)
            late += m->tensors[t].parts[p].pull_timed_out;
    /* Some waits timed out: their data was not sent; one plain pull of the
     * whole model gives the caller a consistent current copy. */
    if (late && psModelPull(c, m, dst, versions_out) != PS_OK) return PS_ERR;
    return late;
}
