/* batch_push.c -- push groups of the batch layer (batch.h): the encoding
 * of a key push (dense, by ids, IDFORMAT EF), reply handling (STALE, lost
 * state, resends), the push windows and their groups, and the WAITs after a
 * group's pushes with the durability policies of durable.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch_int.h"

/* The push window of 'u': its own, or the client's shared one. */
static psPushWindow *window_of(psClient *c, psUser *u) {
    return u->own_window ? &u->own : &c->priv->batch->shared;
}

/* ========================================================================
 * Pushes: encoding
 * ======================================================================== */

/* Encode push 'p' from its arguments (again after a change). 0 or -1. */
static int push_encode(psClient *c, psPush *p) {
    const psKey *k = p->k;
    int flags = c->priv->batch->flags;
    int wflags = (flags & PS_FLAG_NO_PUSH_ID ? PS_WIRE_NO_ID : 0) |
                 (flags & PS_FLAG_NO_PUSH_VERSION ? PS_WIRE_NO_VERSION : 0);
    size_t hl, tl, idlen = strlen(c->client_id);
    if (grow(&p->head, &p->headcap, ps_wire_pushgrad_head_size(k->keylen), 1)) return -1;
    /* by ids: IDS, never SCALE */
    psWirePush a = {k->key, k->keylen, p->bloblen, p->fmt, p->has_version, p->version,
                    c->client_id, p->seq, p->by_ids ? 1.0f : p->scale, wflags,
                    p->by_ids ? p->ids : NULL, p->nids, p->idfmt};
    if (grow(&p->tail, &p->tailcap, p->by_ids ? PS_WIRE_PUSH_IDS_TAIL_MAX(p->nids, idlen)
                                              : PS_WIRE_PUSH_TAIL_MAX(idlen), 1) ||
        ps_wire_pushgrad(&a, p->head, p->headcap, &hl, p->tail, p->tailcap, &tl) != 0)
        return -1;
    p->req.cmd = p->head;
    p->req.cmdlen = hl;
    p->req.blob = p->blob;
    p->req.bloblen = p->bloblen;
    p->req.tail = p->tail;
    p->req.taillen = tl;
    return 0;
}

/* What an acknowledged push adds to the client's counters (sign -1: an
 * acknowledgement taken back). */
static void count_acked(psClient *c, const psPush *p, int sign) {
    if (p->by_ids && sign > 0) c->stats.rows_pushed += p->nids;
    else if (p->by_ids) c->stats.rows_pushed -= p->nids;
    else if (sign > 0) c->stats.pushes++;
    else c->stats.pushes--;
}

/* ========================================================================
 * Pushes: groups and their WAITs
 * ======================================================================== */

static void group_release(psPushGroup *g) {
    if (--g->outstanding == 0) g->in_use = 0;
}

/* Count the acknowledged pushes of 'g' answered by 'node' as not
 * replicated (each once). */
static void count_unreplicated(psClient *c, psPushGroup *g, int node) {
    for (int k = 0; k < g->n; k++) {
        psPush *a = &g->items[k];
        if (a->req.node != node || a->req.state != PSS_DONE || !a->acked || a->unreplicated)
            continue;
        a->unreplicated = 1;
        c->stats.unreplicated_pushes++;
    }
}

/* The WAIT after the group's pushes on 'node' answered, or (reply NULL)
 * was lost with its connection (batch.h). */
static void wait_done(psClient *c, void *udata, int node, redisReply *reply) {
    psPushGroup *g = udata;
    int wait_replicas = psi_wait_replicas(c);
    if (reply == NULL) {
        for (int k = 0; k < g->n; k++) {
            psPush *a = &g->items[k];
            if (a->req.node != node || a->req.state != PSS_DONE || !a->acked) continue;
            a->acked = 0;
            a->rewait = 1;
            count_acked(c, a, -1);  /* counted again when acknowledged again */
            g->outstanding++;
            psi_resend(c, &a->req, "connection lost before WAIT answered");
        }
        c->stats.wait_short++;
    } else if (reply->type == REDIS_REPLY_ERROR) {
        /* The server refused the WAIT (NOPERM: a role without +wait; a
         * server that cannot WAIT). Not a replica count: asking again
         * (policy block) would be refused at once, forever, and "degraded"
         * would name the wrong cause. The pushes are applied; the
         * durability asked for cannot be had: an error under every policy. */
        char name[80];
        c->stats.wait_short++;
        count_unreplicated(c, g, node);
        psi_set_error(c, PS_ERR_DURABILITY,
                      "durability: WAIT %d on %s refused: %.120s (pushes there are applied, "
                      "not known replicated; grant +wait or run without wait_replicas)",
                      wait_replicas, psi_node_name(c, node, name, sizeof(name)), reply->str);
    } else if (reply->type != REDIS_REPLY_INTEGER || reply->integer < wait_replicas) {
        int policy = psi_wait_short(c, node, reply->type == REDIS_REPLY_INTEGER ? reply->integer : 0);
        if (policy == PS_DURABILITY_BLOCK) {
            /* Not done until replicated: the same WAIT again (it blocks up
             * to wait_timeout_ms on the server, no busy loop). */
            freeReplyObject(reply);
            if (psi_submit_durable_wait(c, node, wait_done, g) == 0) return;
            group_release(g);
            return;
        }
        if (policy == PS_DURABILITY_DEGRADE) count_unreplicated(c, g, node);
    } else {
        psi_wait_full(c, node);
    }
    if (reply) freeReplyObject(reply);
    group_release(g);
}

/* Push 'a' answered with a version by 'node'. A push resent after its WAIT
 * was lost gets a WAIT of its own, after the last such push in flight there. */
static void push_acked(psClient *c, psPush *a, int node) {
    psPushGroup *g = a->g;
    int later = 0;
    a->acked = 1;
    if (!a->rewait) return;
    /* Resent after its WAIT was lost (a failover): the node that applied it
     * now must confirm its replicas too, with one WAIT after the last such
     * push in flight there. */
    a->rewait = 0;
    for (int k = 0; k < g->n && !later; k++) {
        const psPush *o = &g->items[k];
        later = o->rewait && o->req.node == node && o->req.state == PSS_FLIGHT;
    }
    if (later) return; /* that one WAITs */
    if (!psi_wait_wanted(c, node))
        count_unreplicated(c, g, node);
    else if (psi_submit_durable_wait(c, node, wait_done, g) == 0)
        g->outstanding++;
}

/* What the reply of push 'p' means (reply NULL: the request failed). */
#define PUSH_ACKED 0            /* applied or a duplicate */
#define PUSH_RESEND 1           /* lost state under policy continue: resend with the new VERSION */
#define PUSH_FAILED 2           /* counted and recorded; the push is finished */

/* "VERSION is newer than the tensor's version" and a key gone after an
 * acknowledgement are lost state (announced; policy continue resends, stop
 * fails the push), STALE is counted in stale_rejects, anything else in
 * push_errors with the error recorded. Frees 'reply'. */
static int push_reply(psClient *c, psPush *p, redisReply *reply) {
    psKey *k = p->k;
    char msg[256];
    int out = PUSH_FAILED;
    if (reply == NULL) {
        c->stats.push_errors++;
    } else if (reply->type == REDIS_REPLY_INTEGER) {
        key_acked(k, (uint64_t)reply->integer);
        out = PUSH_ACKED;
    } else if (p->has_version && is_version_ahead(reply)) {
        /* The server lost updates this client had pulled (a failover or
         * restart that lost acknowledged writes). Policy continue: the
         * gradient is still good, resend it as computed from version now,
         * once per hop like a redirect. */
        k->acked = psi_push_rollback(c, p->req.node, k->key, reply->str, p->version, k->has_acked,
                                     k->acked, msg, sizeof(msg));
        if (psi_lost_state_continues(c)) {
            p->version = k->acked;
            out = PUSH_RESEND;
        } else {
            c->stats.push_errors++;
            psi_set_error(c, PS_ERR_LOST_STATE, "PS.PUSHGRAD: %s", msg);
        }
    } else if (p->by_ids && p->idfmt == PS_PROTO_IDFMT_EF && is_unknown_idformat(reply)) {
        /* A server before IDFORMAT refused it whole: resend it raw (same
         * seq), and raw ids on this client from now on. */
        c->priv->batch->ids_ef = 0;
        p->idfmt = PS_PROTO_IDFMT_RAW;
        out = PUSH_RESEND;
    } else if (is_stale(reply)) {
        c->stats.stale_rejects++;
    } else if (is_nokey(reply) && k->has_acked) {
        c->stats.push_errors++;
        psi_lost_state(c, p->req.node, k->key, k->acked, 0, 0, msg, sizeof(msg));
        psi_set_error(c, PS_ERR_LOST_STATE, "PS.PUSHGRAD: %s", msg);
    } else {
        const char *hint = "";
        c->stats.push_errors++;
        if (is_unknown_option(reply))
            hint = " (server without VERSION/ID? see PS_FLAG_NO_PUSH_ID)";
        else if (is_nokey(reply))
            hint = " (never seen by this client: not created yet, or created with another "
                   "partition size?)";
        psi_set_error(c, PS_ERR_SERVER, "PS.PUSHGRAD %s: %.60s%s", k->key,
                      reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply", hint);
    }
    if (reply) freeReplyObject(reply);
    return out;
}

static int push_done(psClient *c, psReq *r, redisReply *reply) {
    psPush *p = r->udata;
    switch (push_reply(c, p, reply)) {
    case PUSH_RESEND:
        if (push_encode(c, p) == 0) return PSI_RESEND;
        c->stats.push_errors++;
        psi_set_error(c, PS_ERR_OOM, "out of memory");
        break;
    case PUSH_ACKED:
        count_acked(c, p, 1);
        push_acked(c, p, r->node); /* a lost WAIT resends it (wait_done) */
        break;
    default: break;
    }
    group_release(p->g);
    return PSI_DONE;
}

static int window_has_free(psClient *c, void *arg) {
    const psPushWindow *w = arg;
    (void)c;
    for (int i = 0; i < w->n; i++)
        if (!w->g[i].in_use) return 1;
    return 0;
}

psPushGroup *psi_push_begin(psClient *c, psUser *u, int nmax) {
    psPushWindow *w = window_of(c, u);
    psPushGroup *g = NULL;
    if (w->g == NULL) {
        /* A window of its own, sized by the client's at the first push. */
        int n = c->priv->batch->push_window;
        if ((w->g = calloc((size_t)n, sizeof(psPushGroup))) == NULL) {
            psi_set_error(c, PS_ERR_OOM, "out of memory");
            return NULL;
        }
        w->n = n;
    }
    if (psi_run(c, window_has_free, w) != 0) {
        psi_set_error(c, PS_ERR_OTHER, "internal error: push window never freed");
        return NULL;
    }
    for (int i = 0; i < w->n; i++)
        if (!w->g[i].in_use) { g = &w->g[i]; break; }
    if (g->cap < nmax) {
        psPush *ni = realloc(g->items, sizeof(*ni) * (size_t)nmax);
        if (ni == NULL) {
            psi_set_error(c, PS_ERR_OOM, "out of memory for the push buffer");
            return NULL;
        }
        memset(ni + g->cap, 0, sizeof(*ni) * (size_t)(nmax - g->cap));
        g->items = ni;
        g->cap = nmax;
    }
    g->user = u;
    g->n = 0;
    return g;
}

psPush *psi_push_add(psClient *c, psPushGroup *g, psKey *k) {
    psPush *p = &g->items[g->n++];
    p->g = g;
    p->k = k;
    p->fmt = PS_FMT_F32;
    p->bloblen = 0;
    p->by_ids = 0;
    p->nids = 0;
    p->idfmt = PS_PROTO_IDFMT_RAW;
    p->has_version = 0;
    p->version = 0;
    p->scale = 1.0f;
    if (k->seq == 0) k->seq = c->priv->batch->seq_base;
    if (c->priv->batch->fixed_seq) {
        p->seq = c->priv->batch->fixed_seq;
        if (k->seq < p->seq) k->seq = p->seq;
    } else {
        p->seq = ++k->seq;
    }
    p->acked = p->rewait = p->unreplicated = 0;
    return p;
}

unsigned char *psi_push_blob(psPush *p, size_t len) {
    if (grow(&p->blob, &p->blobcap, len, 1)) return NULL;
    p->bloblen = len;
    return p->blob;
}

uint64_t *psi_push_ids(psPush *p, size_t n) {
    if (grow(&p->ids, &p->idcap, n, sizeof(uint64_t))) return NULL;
    p->by_ids = 1;
    return p->ids;
}

/* Sort push by ids 'p' (ids and blob rows, stably) and choose its id
 * format, once before its first encoding. 0 or -1 (out of memory). */
static int push_plan_ids(struct psBatches *bp, psPush *p) {
    size_t n = p->nids, rb;
    p->idfmt = PS_PROTO_IDFMT_RAW;
    if (!p->by_ids || !bp->ids_ef || n < PS_IDS_EF_MIN || p->bloblen % n) return 0;
    rb = p->bloblen / n; /* the table formats have fixed-size rows */
    if (!ps_idlist_sorted(p->ids, n)) {
        if (sort_ids(bp, p->ids, n) || grow(&bp->rowtmp, &bp->rowcap, p->bloblen, 1)) return -1;
        for (size_t i = 0; i < n; i++) {
            p->ids[i] = bp->pairs[i].id;
            memcpy(bp->rowtmp + i * rb, p->blob + bp->pairs[i].at * rb, rb);
        }
        /* the sorted rows become the push's blob, its old buffer the scratch */
        unsigned char *t = p->blob;
        size_t tc = p->blobcap;
        p->blob = bp->rowtmp;
        p->blobcap = bp->rowcap;
        bp->rowtmp = t;
        bp->rowcap = tc;
    }
    if (ef_pays(bp, p->ids, n)) p->idfmt = PS_PROTO_IDFMT_EF;
    return 0;
}

int psi_push_send(psClient *c, psPushGroup *g) {
    int k, j;
    if (g->n == 0) return c->err ? PS_ERR : PS_OK;
    for (k = 0; k < g->n; k++) {
        psPush *p = &g->items[k];
        psi_req_init(&p->req, p->k->key, p->k->keylen);
        p->req.done = push_done;
        p->req.udata = p;
        if (push_plan_ids(c->priv->batch, p) != 0 || push_encode(c, p) != 0) {
            psi_set_error(c, PS_ERR_OOM, "out of memory");
            return PS_ERR;
        }
        c->stats.bytes_sent += p->bloblen;
    }
    g->in_use = 1;
    g->outstanding = 1; /* guards the group while its WAITs are queued */
    for (k = 0; k < g->n; k++) {
        g->outstanding++;
        psi_submit(c, &g->items[k].req);
    }
    if (psi_wait_replicas(c) > 0) {
        /* One WAIT per node after the group's pushes on it. */
        for (k = 0; k < g->n; k++) {
            psPush *a = &g->items[k];
            int node, seen = 0;
            if (a->req.node < 0 || a->req.state != PSS_FLIGHT) continue;
            node = a->req.node;
            for (j = 0; j < k && !seen; j++) {
                const psPush *o = &g->items[j];
                seen = o->req.node == node && o->req.state == PSS_FLIGHT;
            }
            if (seen) continue;
            if (!psi_wait_wanted(c, node)) {
                /* Degraded node, policy degrade: not WAITed for, not replicated. */
                for (j = k; j < g->n; j++) {
                    psPush *o = &g->items[j];
                    if (o->req.node == node && o->req.state == PSS_FLIGHT) {
                        o->unreplicated = 1;
                        c->stats.unreplicated_pushes++;
                    }
                }
                continue;
            }
            if (psi_submit_durable_wait(c, node, wait_done, g) == 0) g->outstanding++;
        }
    }
    group_release(g);
    psi_flush(c);
    return c->err ? PS_ERR : PS_OK;
}
