/* ring_probe.c -- ps-relay --ring (ring.h): the groups of --ring, probing
 * them (PS.INFO: liveness, marks, RTT) and moving them in and out of the
 * ring: dead after --dead-after-ms, kept out while they lack deltas this
 * group acknowledged or answered GAP, and this group's own rejoin. */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <redis-ps/ps.h>

#include "agent.h"
#include "clock.h"
#include "ring_int.h"

int ring_parse_groups(ring *r) {
    const char *p = r->o->ring;
    r->self = -1;
    while (*p) {
        const char *e = strchr(p, ',');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        const char *eq = memchr(p, '=', l);
        if (!eq || eq == p || (size_t)(eq - p) > PS_RING_ORIGIN_MAX || l - (size_t)(eq - p) < 2 ||
            l - (size_t)(eq - p) > 255 || r->ng == RING_MAX_GROUPS) {
            ring_say(r, "--ring: '%.*s' is not name=host:port (names 1..%d bytes, at most %d groups)",
                (int)l, p, PS_RING_ORIGIN_MAX, RING_MAX_GROUPS);
            return -1;
        }
        ringGroup *g = &r->g[r->ng];
        memcpy(g->name, p, (size_t)(eq - p));
        memcpy(g->addr, eq + 1, l - (size_t)(eq - p) - 1);
        /* A group that is a Redis Cluster: its seeds joined by '+'. */
        for (char *c = g->addr; *c; c++)
            if (*c == '+') *c = ',';
        for (const char *c = g->name; *c; c++)
            if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
                  strchr("_.:-", *c))) {
                ring_say(r, "--ring: group name '%s' may use only [A-Za-z0-9_.:-]", g->name);
                return -1;
            }
        for (int i = 0; i < r->ng; i++)
            if (!strcmp(r->g[i].name, g->name)) {
                ring_say(r, "--ring: group '%s' is named twice", g->name);
                return -1;
            }
        g->rtt_ms = -1;
        if (!strcmp(g->name, r->o->self)) r->self = r->ng;
        r->order[r->ng] = r->ng;
        r->ng++;
        p += l + (e ? 1 : 0);
    }
    if (r->ng < 2) {
        ring_say(r, "--ring needs at least 2 groups");
        return -1;
    }
    if (r->self < 0 && !r->o->pick) {
        ring_say(r, "--self %s is not one of the --ring groups", r->o->self);
        return -1;
    }
    return 0;
}

/* What group i's PS.INFO of every key, read in the wave just run, says: 1
 * every key tracked as that group, 0 it answers otherwise, -1 it does not
 * answer (connection dropped). A group not connected (and not connectable
 * now) had no ops: -1. The batch's time is an RTT sample. */
static int probe_result(ring *r, int i) {
    ringGroup *g = &r->g[i];
    ringWave *w = &r->w;
    if (!w->n[i]) return -1;
    int tracked = 1, answered = 0;
    for (size_t j = 0; j < w->n[i]; j++) {
        const psRingOp *op = &w->ops[(size_t)i * w->cap + j];
        if (op->rc != PS_OK) {
            if (ring_op_noreply(op)) {
                if (g->c) ring_conn_drop(g);
                return -1;
            }
            tracked = 0;
            continue;
        }
        answered = 1;
        if (strcmp(g->info[w->key[(size_t)i * w->cap + j]].ring_origin, g->name)) tracked = 0;
    }
    if (answered || w->ms[i] > 0) {
        double ms = w->ms[i];
        g->rtt_ms = g->rtt_ms < 0 ? ms : 0.8 * g->rtt_ms + 0.2 * ms;
    }
    return tracked;
}

/* PS.INFO of every key on the groups in 'set' (bits), one wave. */
static void probe_wave(ring *r, uint64_t set, long long now) {
    ring_wave_clear(r);
    for (int i = 0; i < r->ng; i++) {
        if (!(set & (1ULL << i)) || ring_ensure_conn(r, &r->g[i], now) != 0) continue;
        for (int k = 0; k < r->nkeys; k++) {
            psRingOp *op = ring_wave_op(r, i, k, 0, PS_RING_OP_INFO);
            if (op) op->info = &r->g[i].info[k];
        }
    }
    ring_wave_run(r, RING_PH_PROBE);
}

/* Group i answered GAP (send_delta): does the last probe show it has the
 * delta it lacked now (its agent rejoined it), or is that origin out of the
 * ring (nothing of it comes any more)? Then it may enter again: 1, gap
 * cleared. */
static int gap_filled(ring *r, int i) {
    ringGroup *g = &r->g[i];
    int o = -1;
    for (int j = 0; j < r->ng; j++)
        if (!strcmp(r->g[j].name, g->gap_origin)) o = j;
    const psRingOrigin *row = g->ok ? ring_origin_row(&g->info[g->gap_key], g->gap_origin) : NULL;
    if ((row && row->hwm >= g->gap_prev) || (o >= 0 && o != r->self && !r->g[o].live)) {
        g->gap = 0;
        return 1;
    }
    return 0;
}

/* Probes every group (this one last, see stale_for) and moves them in and
 * out of the ring: every round with --barrier (its end test reads every
 * group), else every probe period (the ack check reads the hwm of the keys
 * it needs itself, act_key). A group out of the ring that answers again
 * enters it unless it lacks deltas this group acknowledged meanwhile (its
 * agent then rejoins it); this group rejoins itself when it lacks deltas
 * another group acknowledged. */
void ring_probe_all(ring *r) {
    long long now = agent_mono_ms();
    char buf[1024];
    long period = r->o->dead_ms / 4 < 500 ? r->o->dead_ms / 4 : 500;
    if (!r->o->barrier && r->round > 1 && now - r->last_probe_ms < period) return;
    r->last_probe_ms = now;
    /* The other groups in one wave, then this one (stale_for: x's reads
     * before y's for x = self). */
    int st_of[RING_MAX_GROUPS];
    probe_wave(r, ((r->ng < 64 ? (1ULL << r->ng) : 0) - 1) & ~(1ULL << r->self), now);
    for (int i = 0; i < r->ng; i++)
        if (i != r->self) st_of[i] = probe_result(r, i);
    probe_wave(r, 1ULL << r->self, now);
    st_of[r->self] = probe_result(r, r->self);
    ring_wave_clear(r);
    for (int n = 0; n < r->ng; n++) {
        int i = (r->self + 1 + n) % r->ng; /* self last */
        ringGroup *g = &r->g[i];
        int st = st_of[i];
        g->ok = st == 1;
        if (g->ok) g->last_ok_ms = now;
        if (g->live && !g->ok && now - g->last_ok_ms >= r->o->dead_ms) {
            g->live = 0;
            r->epoch++;
            ring_order_str(r, buf, sizeof(buf));
            ring_say(r, "group %s %s for %ld ms: out of the ring, which is now %s", g->name,
                st < 0 ? "unreachable" : "not tracked as that group", r->o->dead_ms, buf);
            printf("[ring %s] group %s left the ring: %s\n", r->o->self, g->name, buf);
            ring_event(r, "group_dead", ", \"dead\": \"%s\", \"ring\": \"%s\"", g->name, buf);
        }
    }
    /* Who enters (after every probe: x's reads precede y's for x = self). */
    for (int i = 0; i < r->ng; i++) {
        ringGroup *g = &r->g[i];
        if (g->gap && !gap_filled(r, i)) continue; /* answered GAP: out until it has the delta */
        if (g->live || !g->ok) {
            if (!g->ok) g->stale = 0;
            continue;
        }
        if (i != r->self && !r->o->barrier && ring_stale_for(r, i, r->self)) {
            if (!g->stale) {
                printf("[ring %s] group %s answers again but lacks deltas of %s acknowledged while "
                       "it was out: kept out until its agent rejoins it\n", r->o->self, g->name,
                       r->o->self);
                ring_event(r, "group_stale", ", \"stale\": \"%s\"", g->name);
            }
            g->stale = 1;
            continue;
        }
        g->live = 1;
        g->stale = 0;
        r->epoch++;
        ring_order_str(r, buf, sizeof(buf));
        printf("[ring %s] group %s is in the ring: %s\n", r->o->self, g->name, buf);
        ring_event(r, "group_live", ", \"live\": \"%s\", \"ring\": \"%s\"", g->name, buf);
    }
    /* This group lacks what another acknowledged: copy the model again. */
    if (!r->o->barrier && r->g[r->self].ok)
        for (int x = 0; x < r->ng; x++)
            if (x != r->self && r->g[x].live && r->g[x].ok && ring_stale_for(r, r->self, x)) {
                char why[160];
                snprintf(why, sizeof(why), "this group lacks deltas %s acknowledged while it was "
                         "out of the ring", r->g[x].name);
                ring_rejoin(r, why, x);
                break;
            }
    /* A JOIN of a table left unfinished (this agent or the neighbour died
     * mid-copy; the table refuses pushes and ring traffic until it ends):
     * copy again. */
    if (!r->o->barrier && r->g[r->self].ok)
        for (int k = 0; k < r->nkeys; k++)
            if (r->keys[k].dim && r->g[r->self].info[k].ring_joining) {
                ring_rejoin(r, "a JOIN of this group's table was left unfinished", -1);
                break;
            }
    fflush(stdout);
}
