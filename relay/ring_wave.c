/* ring_wave.c -- ps-relay --ring (ring.h): a wave, the agent's commands to
 * several groups at once: one pipelined batch per group (psRingSend), all
 * sent before any reply is read, so a wave costs one round trip however
 * many keys and groups it covers. The replies are read as they come (the
 * first group to answer first), which keeps each group's time, a probe's
 * RTT sample, its own. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <redis-ps/ps.h>

#include "agent.h"
#include "clock.h"
#include "ring_int.h"

int ring_wave_init(ring *r) {
    ringWave *w = &r->w;
    w->cap = 3 * (size_t)r->nkeys + 1;
    size_t n = w->cap * (size_t)r->ng;
    w->ops = calloc(n, sizeof(*w->ops));
    w->key = calloc(n, sizeof(*w->key));
    w->tag = calloc(n, sizeof(*w->tag));
    if (!w->ops || !w->key || !w->tag) {
        ring_wave_free(r);
        return -1;
    }
    return 0;
}

void ring_wave_free(ring *r) {
    ringWave *w = &r->w;
    free(w->ops);
    free(w->key);
    free(w->tag);
    memset(w, 0, sizeof(*w));
}

psRingOp *ring_wave_op(ring *r, int gi, int k, int tag, int op) {
    ringWave *w = &r->w;
    if (w->n[gi] >= w->cap) return NULL;
    size_t j = (size_t)gi * w->cap + w->n[gi]++;
    memset(&w->ops[j], 0, sizeof(w->ops[j]));
    w->ops[j].op = op;
    w->ops[j].key = r->keys[k].name;
    w->ops[j].hops = -1;
    w->key[j] = k;
    w->tag[j] = tag;
    return &w->ops[j];
}

/* Every op of group gi failed without a reply. */
static void fail_all(ring *r, int gi, int status, const char *why) {
    ringWave *w = &r->w;
    for (size_t j = 0; j < w->n[gi]; j++) {
        psRingOp *op = &w->ops[(size_t)gi * w->cap + j];
        op->rc = PS_ERR;
        op->status = status;
        snprintf(op->err, sizeof(op->err), "%.150s", why ? why : "");
    }
}

void ring_wave_run(ring *r, int ph) {
    ringWave *w = &r->w;
    psRingBatch *b[RING_MAX_GROUPS];
    int pending = 0, remote = 0, applies = 0;
    double t0 = ps_mono_s();
    for (int i = 0; i < r->ng; i++) {
        b[i] = NULL;
        w->ms[i] = 0;
        if (!w->n[i]) continue;
        ringGroup *g = &r->g[i];
        if (!g->c) {
            fail_all(r, i, PS_ERR_IO, "not connected");
            continue;
        }
        if (!(b[i] = psRingSend(g->c, &w->ops[(size_t)i * w->cap], w->n[i]))) {
            fail_all(r, i, g->c->err, g->c->errstr);
            continue;
        }
        pending++;
        if (i != r->self) {
            remote = 1;
            r->tm.cmds[ph] += w->n[i];
        }
    }
    /* More than one group: read whichever answered first, polling (a
     * quarter millisecond apart) for at most the command timeout; past it,
     * or with one group left, block (the engine's timeouts apply). */
    double poll_until = t0 + (r->o->dead_ms / 2 > 1000 ? r->o->dead_ms / 2 : 1000) / 1e3;
    while (pending > 1 && ps_mono_s() < poll_until) {
        int any = 0;
        for (int i = 0; i < r->ng; i++) {
            if (!b[i] || !psRingReady(r->g[i].c, b[i])) continue;
            psRingWait(r->g[i].c, b[i]);
            b[i] = NULL;
            w->ms[i] = (ps_mono_s() - t0) * 1e3;
            pending--;
            any = 1;
        }
        if (!any && pending > 1) {
            struct timespec ts = {0, 250000};
            nanosleep(&ts, NULL);
        }
    }
    for (int i = 0; i < r->ng; i++) {
        if (!b[i]) continue;
        psRingWait(r->g[i].c, b[i]);
        w->ms[i] = (ps_mono_s() - t0) * 1e3;
    }
    double dt = ps_mono_s() - t0;
    for (int i = 0; i < r->ng; i++) {
        int sent = 0;
        for (size_t j = 0; j < w->n[i]; j++)
            if (w->ops[(size_t)i * w->cap + j].op == PS_RING_OP_APPLY) sent = 1;
        if (sent && r->g[i].c) r->g[i].send_s += w->ms[i] / 1e3;
        applies |= sent;
    }
    if (applies) r->round_send_s += dt;
    if (remote) r->tm.rtts[ph]++;
    r->tm.s[ph] += dt;
}

void ring_wave_clear(ring *r) { memset(r->w.n, 0, sizeof(r->w.n)); }

int ring_op_noreply(const psRingOp *op) {
    return op->rc == PS_ERR && op->status != PS_ERR_SERVER && op->status != PS_ERR_PROTOCOL &&
           op->status != PS_ERR_NOKEY && op->status != PS_ERR_ARG;
}

void ring_conn_drop(ringGroup *g) {
    psClientFree(g->c);
    g->c = NULL;
}
