/* pushtrack.c -- push groups and their WAITs (see pushtrack.h). */
#include "pushtrack.h"


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
