/* durable.c -- libps durability: nodes that cannot satisfy wait_replicas
 * (degraded), the policy that decides what a short WAIT does, the replica
 * probes that notice a rejoined replica, lost-state events, and the one
 * place events are announced.
 *
 * A node turns degraded at its first short WAIT and is announced once;
 * under PS_DURABILITY_DEGRADE its pushes are then not WAITed for (each
 * WAIT would cost the full wait_timeout_ms: a 600x slowdown was measured)
 * but counted as unreplicated, and every probe_ms an "INFO replication"
 * counts its online replicas; once there are enough, the node is restored
 * (announced) and WAITs resume. Under BLOCK and FAIL every push keeps its
 * WAIT, and the first full WAIT restores the node. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_internal.h"

void psi_durable_config(psClient *c, const psOptions *o) {
    psDurable *d = &c->priv->dur;
    d->wait_replicas = o->wait_replicas > 0 ? o->wait_replicas : 0;
    d->wait_timeout_ms = o->wait_timeout_ms > 0 ? o->wait_timeout_ms : PS_DEFAULT_WAIT_TIMEOUT_MS;
    d->durability_policy = o->durability_policy == PS_DURABILITY_BLOCK ||
                           o->durability_policy == PS_DURABILITY_FAIL
                           ? o->durability_policy : PS_DURABILITY_DEGRADE;
    d->probe_ms = o->probe_ms > 0 ? o->probe_ms : PS_DEFAULT_PROBE_MS;
    d->lost_state_policy = o->lost_state_policy == PS_LOST_STATE_CONTINUE
                           ? PS_LOST_STATE_CONTINUE : PS_LOST_STATE_STOP;
    d->on_event = o->on_event;
    d->event_udata = o->event_udata;
}

int psi_wait_replicas(const psClient *c) { return c->priv->dur.wait_replicas; }

int psi_lost_state_continues(const psClient *c) {
    return c->priv->dur.lost_state_policy == PS_LOST_STATE_CONTINUE;
}

int psi_submit_durable_wait(psClient *c, int node, psWaitFn *done, void *udata) {
    return psi_submit_wait(c, node, c->priv->dur.wait_replicas, c->priv->dur.wait_timeout_ms, done,
                           udata);
}

const char *psi_node_name(const psClient *c, int node, char *buf, size_t len) {
    if (node < 0 || node >= c->priv->topo.nnodes) snprintf(buf, len, "?");
    else snprintf(buf, len, "%s:%d", c->priv->topo.nodes[node].host, c->priv->topo.nodes[node].port);
    return buf;
}

void psi_event(psClient *c, int ev, int node, const char *fmt, ...) {
    char msg[512], name[80];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    psi_node_name(c, node, name, sizeof(name));
    if (ev == PS_EVENT_DEGRADED) c->stats.degraded_events++;
    else if (ev == PS_EVENT_RESTORED) c->stats.restored_events++;
    if (c->priv->dur.on_event) c->priv->dur.on_event(c->priv->dur.event_udata, ev, name, msg);
    else fprintf(stderr, "libps: %s\n", msg);
}

static const char *policy_name(int p) {
    return p == PS_DURABILITY_BLOCK ? "block" : p == PS_DURABILITY_FAIL ? "fail" : "degrade";
}

static void set_degraded(psClient *c, int node, long long got) {
    psClientPriv *pv = c->priv;
    psNode *n = &pv->topo.nodes[node];
    char name[80];
    n->dur.probe_at = psi_mono_ms() + pv->dur.probe_ms;
    if (n->dur.degraded) return;
    n->dur.degraded = 1;
    c->stats.degraded_nodes++;
    psi_node_name(c, node, name, sizeof(name));
    psi_event(c, PS_EVENT_DEGRADED, node,
              "durability degraded on %s: WAIT %d answered %lld replica%s (the shard has "
              "no in-sync replica: a master lost and not replaced?); policy %s: %s", name,
              pv->dur.wait_replicas, got, got == 1 ? "" : "s", policy_name(pv->dur.durability_policy),
              pv->dur.durability_policy == PS_DURABILITY_BLOCK
                  ? "pushes to it block until a replica is back"
              : pv->dur.durability_policy == PS_DURABILITY_FAIL
                  ? "stopping"
                  : "training goes on, its pushes are counted as not replicated until a "
                    "replica is back");
}

void psi_wait_full(psClient *c, int node) {
    psNode *n = &c->priv->topo.nodes[node];
    char name[80];
    if (!n->dur.degraded) return;
    n->dur.degraded = 0;
    n->dur.probe_failed = 0;
    c->stats.degraded_nodes--;
    psi_event(c, PS_EVENT_RESTORED, node,
              "durability restored on %s: %d replica%s in sync again; pushes are WAITed for again",
              psi_node_name(c, node, name, sizeof(name)), c->priv->dur.wait_replicas,
              c->priv->dur.wait_replicas == 1 ? "" : "s");
}

int psi_wait_short(psClient *c, int node, long long got) {
    char name[80];
    c->stats.wait_short++;
    if (node < 0) return c->priv->dur.durability_policy;
    set_degraded(c, node, got);
    if (c->priv->dur.durability_policy == PS_DURABILITY_FAIL)
        psi_set_error(c, PS_ERR_DURABILITY,
                      "durability: WAIT %d on %s answered %lld replicas (policy fail): pushes "
                      "there are applied but not replicated",
                      c->priv->dur.wait_replicas, psi_node_name(c, node, name, sizeof(name)), got);
    return c->priv->dur.durability_policy;
}

/* Count the replicas in state "online" in an INFO replication reply
 * ("slave0:ip=...,port=...,state=online,offset=...,lag=0" lines). -1 when
 * the reply is not such a text. */
static long long online_replicas(const redisReply *r) {
    long long n = 0;
    const char *p;
    if (r == NULL || (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_STATUS)) return -1;
    for (p = r->str; (p = strstr(p, "\nslave")) != NULL; p++) {
        const char *eol = strchr(p + 1, '\n'), *st = strstr(p, "state=online");
        if (st && (eol == NULL || st < eol)) n++;
    }
    return n;
}

static void probe_done(psClient *c, void *udata, int node, redisReply *reply) {
    psNode *n = &c->priv->topo.nodes[node];
    long long got = online_replicas(reply);
    char name[80];
    (void)udata;
    n->dur.probing = 0;
    /* A probe that cannot count (an ACL without +info|replication, a lost
     * connection) would keep the node degraded without a word: said once. */
    if (got < 0 && !n->dur.probe_failed) {
        n->dur.probe_failed = 1;
        psi_event(c, PS_EVENT_PROBE_FAILED, node,
                  "durability: the replica probe of %s (INFO replication) failed: %.200s; the "
                  "node stays degraded (pushes counted as not replicated) until a probe "
                  "succeeds (a user needs +info|replication)",
                  psi_node_name(c, node, name, sizeof(name)),
                  reply == NULL ? "no reply" : reply->type == REDIS_REPLY_ERROR ? reply->str
                                                                              : "not a text");
    }
    if (got >= c->priv->dur.wait_replicas) psi_wait_full(c, node);
    else n->dur.probe_at = psi_mono_ms() + c->priv->dur.probe_ms;
    if (reply) freeReplyObject(reply);
}

int psi_wait_wanted(psClient *c, int node) {
    psClientPriv *pv = c->priv;
    psNode *n = &pv->topo.nodes[node];
    if (!n->dur.degraded || pv->dur.durability_policy != PS_DURABILITY_DEGRADE) return 1;
    if (!n->dur.probing && psi_mono_ms() >= n->dur.probe_at && psi_submit_probe(c, node, probe_done, NULL) == 0)
        n->dur.probing = 1;
    return 0;
}

void psi_lost_state(psClient *c, int node, const char *key, uint64_t acked, int has_now,
                    uint64_t now, char *msg, size_t msglen) {
    char name[80], vnow[32];
    psi_node_name(c, node, name, sizeof(name));
    if (has_now) snprintf(vnow, sizeof(vnow), "went back to version %llu", (unsigned long long)now);
    else snprintf(vnow, sizeof(vnow), "is gone (no such key)");
    c->stats.lost_state++;
    snprintf(msg, msglen,
             "lost state: %.60s on %s %s, this client saw version %llu acknowledged; the node "
             "likely restarted without persistence or from a lagging AOF (README Operations)",
             key, name, vnow, (unsigned long long)acked);
    psi_event(c, PS_EVENT_LOST_STATE, node, "%s%s", msg,
              c->priv->dur.lost_state_policy == PS_LOST_STATE_CONTINUE
                  ? "; policy continue: going on from the server's state" : "");
}

uint64_t psi_push_rollback(psClient *c, int node, const char *key, const char *errstr,
                           uint64_t sent, int has_acked, uint64_t acked, char *msg,
                           size_t msglen) {
    const char *cur = strrchr(errstr, ' ');
    uint64_t now = cur ? strtoull(cur + 1, NULL, 10) : 0;
    psi_lost_state(c, node, key, has_acked && acked > sent ? acked : sent, 1, now, msg, msglen);
    return now;
}
