/* pushtrack.c -- push groups and their WAITs (see pushtrack.h). */
#include "pushtrack.h"

#include <string.h>


void psi_push_init(psPushAck *a, psPushGroup *g, const char *key, size_t keylen) {
    psi_req_init(&a->req, key, keylen);
    a->g = g;
    a->acked = a->rewait = a->unreplicated = 0;
}

void psi_group_release(psPushGroup *g) {
    if (--g->outstanding == 0) g->in_use = 0;
}

/* Count the acknowledged pushes of 'g' answered by 'node' as not
 * replicated (each once). */
static void count_unreplicated(psClient *c, psPushGroup *g, int node) {
    for (int k = 0; k < g->n; k++) {
        psPushAck *a = g->item(g, k);
        if (a == NULL || a->req.node != node || a->req.state != PSS_DONE || !a->acked ||
            a->unreplicated)
            continue;
        a->unreplicated = 1;
        c->stats.unreplicated_pushes++;
    }
}

/* The WAIT after the group's pushes on 'node' answered, or (reply NULL)
 * was lost with its connection (pushtrack.h). */
static void wait_done(psClient *c, void *udata, int node, redisReply *reply) {
    psPushGroup *g = udata;
    psClientPriv *pv = c->priv;
    if (reply == NULL) {
        for (int k = 0; k < g->n; k++) {
            psPushAck *a = g->item(g, k);
            if (a == NULL || a->req.node != node || a->req.state != PSS_DONE || !a->acked)
                continue;
            a->acked = 0;
            a->rewait = 1;
            if (g->unacked) g->unacked(c, a);
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
                      pv->wait_replicas, psi_node_name(c, node, name, sizeof(name)), reply->str);
    } else if (reply->type != REDIS_REPLY_INTEGER || reply->integer < pv->wait_replicas) {
        psi_wait_short(c, node, reply->type == REDIS_REPLY_INTEGER ? reply->integer : 0);
        if (pv->durability_policy == PS_DURABILITY_BLOCK) {
            /* Not done until replicated: the same WAIT again (it blocks up
             * to wait_timeout_ms on the server, no busy loop). */
            freeReplyObject(reply);
            if (psi_submit_wait(c, node, wait_done, g) == 0) return;
            psi_group_release(g);
            return;
        }
        if (pv->durability_policy == PS_DURABILITY_DEGRADE) count_unreplicated(c, g, node);
    } else {
        psi_wait_full(c, node);
    }
    if (reply) freeReplyObject(reply);
    psi_group_release(g);
}

void psi_push_acked(psClient *c, psPushAck *a, int node) {
    psPushGroup *g = a->g;
    int later = 0;
    a->acked = 1;
    if (!a->rewait) return;
    /* Resent after its WAIT was lost (a failover): the node that applied it
     * now must confirm its replicas too, with one WAIT after the last such
     * push in flight there. */
    a->rewait = 0;
    for (int k = 0; k < g->n && !later; k++) {
        psPushAck *o = g->item(g, k);
        later = o && o->rewait && o->req.node == node && o->req.state == PSS_FLIGHT;
    }
    if (later) return; /* that one WAITs */
    if (!psi_wait_wanted(c, node))
        count_unreplicated(c, g, node);
    else if (psi_submit_wait(c, node, wait_done, g) == 0)
        g->outstanding++;
}

void psi_group_submit(psClient *c, psPushGroup *g) {
    int k, j;
    g->in_use = 1;
    g->outstanding = 1; /* guards the group while its WAITs are queued */
    for (k = 0; k < g->n; k++) {
        psPushAck *a = g->item(g, k);
        if (a == NULL) continue;
        g->outstanding++;
        psi_submit(c, &a->req);
    }
    if (c->priv->wait_replicas > 0) {
        /* One WAIT per node after the group's pushes on it. */
        for (k = 0; k < g->n; k++) {
            psPushAck *a = g->item(g, k);
            int node, seen = 0;
            if (a == NULL || a->req.node < 0 || a->req.state != PSS_FLIGHT) continue;
            node = a->req.node;
            for (j = 0; j < k && !seen; j++) {
                psPushAck *o = g->item(g, j);
                seen = o && o->req.node == node && o->req.state == PSS_FLIGHT;
            }
            if (seen) continue;
            if (!psi_wait_wanted(c, node)) {
                /* Degraded node, policy degrade: not WAITed for, not replicated. */
                for (j = k; j < g->n; j++) {
                    psPushAck *o = g->item(g, j);
                    if (o && o->req.node == node && o->req.state == PSS_FLIGHT) {
                        o->unreplicated = 1;
                        c->stats.unreplicated_pushes++;
                    }
                }
                continue;
            }
            if (psi_submit_wait(c, node, wait_done, g) == 0) g->outstanding++;
        }
    }
    psi_group_release(g);
    psi_flush(c);
}

/* Whether 'reply' is the module's "no such key" error. */
static int is_nokey(const redisReply *reply) {
    return psi_reply_error(reply) == PS_PROTO_ERR_NOKEY;
}

int psi_push_reply(psClient *c, psReq *r, redisReply *reply, const char *key, int has_version,
                   uint64_t *sent, int *has_acked, uint64_t *acked) {
    char msg[256];
    int out = PSI_PUSH_FAILED;
    if (reply == NULL) {
        c->stats.push_errors++;
    } else if (reply->type == REDIS_REPLY_INTEGER) {
        const uint64_t ver = (uint64_t)reply->integer;
        if (!*has_acked || ver > *acked) *acked = ver;
        *has_acked = 1;
        out = PSI_PUSH_ACKED;
    } else if (has_version && psi_reply_error(reply) == PS_PROTO_ERR_FUTURE) {
        /* "ERR VERSION v is newer than the tensor's version now": the server
         * lost updates this client had pulled (a failover or restart that
         * lost acknowledged writes). Policy continue: the gradient is still
         * good, resend it as computed from version now, once per hop like a
         * redirect. */
        *acked = psi_push_rollback(c, r->node, key, reply->str, *sent, *has_acked, *acked, msg,
                                   sizeof(msg));
        if (c->priv->lost_state_policy == PS_LOST_STATE_CONTINUE) {
            *sent = *acked;
            out = PSI_PUSH_RESEND;
        } else {
            c->stats.push_errors++;
            psi_set_error(c, PS_ERR_LOST_STATE, "PS.PUSHGRAD: %s", msg);
        }
    } else if (psi_reply_error(reply) == PS_PROTO_ERR_STALE) {
        c->stats.stale_rejects++;
    } else if (is_nokey(reply) && *has_acked) {
        c->stats.push_errors++;
        psi_lost_state(c, r->node, key, *acked, 0, 0, msg, sizeof(msg));
        psi_set_error(c, PS_ERR_LOST_STATE, "PS.PUSHGRAD: %s", msg);
    } else {
        const char *hint = "";
        c->stats.push_errors++;
        int cls = psi_reply_error(reply);
        if (cls == PS_PROTO_ERR_SYNTAX || cls == PS_PROTO_ERR_UNKNOWN_OPT ||
            cls == PS_PROTO_ERR_DUP_OPT || cls == PS_PROTO_ERR_MISSING_ARG)
            hint = " (server without VERSION/ID? see PS_FLAG_NO_PUSH_ID)";
        else if (is_nokey(reply))
            hint = " (never seen by this client: not created yet, or created with another "
                   "partition size?)";
        psi_set_error(c, PS_ERR_SERVER, "PS.PUSHGRAD %s: %.60s%s", key,
                      reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply", hint);
    }
    if (reply) freeReplyObject(reply);
    return out;
}
