/* ring_adapt.c -- ps-relay --ring (ring.h): dynamic adjustment: the
 * significance threshold follows the link (--adapt) and the ring order the
 * measured RTTs (--reorder). */

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <redis-ps/ps.h>

#include "agent.h"
#include "ring_int.h"

/* Gaia-style: a round whose sends took longer than half the round period
 * means the link cannot keep up: raise the threshold; a nearly idle link:
 * lower it (never below --threshold / 8 nor above 0.5). */
void ring_adapt_threshold(ring *r) {
    double busy = r->round_send_s * 1e3 / (double)r->o->every_ms, old = r->threshold;
    if (busy > 0.5 && r->threshold < 0.5) r->threshold = fmin(0.5, r->threshold * 2);
    else if (busy < 0.05 && r->threshold > r->o->threshold / 8)
        r->threshold = fmax(r->o->threshold / 8, r->threshold / 2);
    if (r->threshold != old) {
        printf("[ring %s] threshold %g -> %g (sends took %.0f%% of the round)\n", r->o->self, old,
               r->threshold, busy * 100);
        ring_event(r, "threshold", ", \"from\": %g, \"to\": %g, \"busy\": %.3f", old, r->threshold,
              busy);
    }
}

/* ---- ring order from measured RTTs (--reorder) ---------------------------
 * Each agent publishes its row of RTTs (ms to every group) on its own server
 * (a plain string key "ps-ring:rtt:<name>") and reads the others' rows: all
 * agents see the same matrix (up to timing) and pick the same cheapest
 * cycle of the live groups (G <= 6: every permutation with the first group
 * fixed, ties by the lowest permutation). */

#define RTT_KEY "ps-ring:rtt:"

void ring_publish_rtts(ring *r) {
    ringGroup *me = &r->g[r->self];
    char row[RING_MAX_GROUPS * 16], key[96];
    size_t o = 0;
    if (!me->c) return;
    for (int i = 0; i < r->ng && o + 16 < sizeof(row); i++)
        o += (size_t)snprintf(row + o, sizeof(row) - o, "%s%.3f", i ? " " : "",
                              i == r->self ? 0.0 : r->g[i].rtt_ms);
    snprintf(key, sizeof(key), RTT_KEY "%s", me->name);
    redisReply *rep = psCommand(me->c, key, "SET %s %s", key, row);
    if (rep) freeReplyObject(rep);
}

static double cycle_cost(double m[][RING_MAX_GROUPS], const int *perm, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += m[perm[i]][perm[(i + 1) % n]];
    return s;
}

static int next_perm(int *a, int n) {
    int i = n - 2;
    while (i >= 1 && a[i] >= a[i + 1]) i--; /* a[0] stays fixed */
    if (i < 1) return 0;
    int j = n - 1;
    while (a[j] <= a[i]) j--;
    int t = a[i];
    a[i] = a[j], a[j] = t;
    for (int x = i + 1, y = n - 1; x < y; x++, y--) t = a[x], a[x] = a[y], a[y] = t;
    return 1;
}

void ring_reorder(ring *r) {
    static double m[RING_MAX_GROUPS][RING_MAX_GROUPS];
    int live[RING_MAX_GROUPS], n = 0;
    for (int i = 0; i < r->ng; i++)
        if (r->g[i].live) live[n++] = i;
    if (n < 4 || n > 6) return; /* 3 groups: every cycle costs the same (both directions) */
    for (int a = 0; a < n; a++) {
        ringGroup *g = &r->g[live[a]];
        char key[96];
        snprintf(key, sizeof(key), RTT_KEY "%s", g->name);
        redisReply *rep = g->c ? psCommand(g->c, key, "GET %s", key) : NULL;
        if (!rep || rep->type != REDIS_REPLY_STRING) {
            if (rep) freeReplyObject(rep);
            return;
        }
        char *p = rep->str;
        for (int i = 0; i < r->ng; i++) {
            char *e;
            double v = strtod(p, &e);
            if (e == p) v = -1;
            p = e;
            for (int b = 0; b < n; b++)
                if (live[b] == i) m[a][b] = v;
        }
        freeReplyObject(rep);
    }
    /* A link's cost: the larger of its two directions' RTTs (an unmeasured one: skip). */
    double c[RING_MAX_GROUPS][RING_MAX_GROUPS];
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++) {
            if (m[a][b] < 0 || m[b][a] < 0) return;
            c[a][b] = fmax(m[a][b], m[b][a]);
        }
    int perm[RING_MAX_GROUPS], best[RING_MAX_GROUPS], cur[RING_MAX_GROUPS], nc = 0;
    for (int i = 0; i < n; i++) perm[i] = i;
    for (int i = 0; i < r->ng; i++)
        for (int b = 0; b < n; b++)
            if (r->order[i] == live[b]) cur[nc++] = b;
    double bestc = 1e300, curc = cycle_cost(c, cur, n);
    do {
        double x = cycle_cost(c, perm, n);
        if (x < bestc) bestc = x, memcpy(best, perm, sizeof(int) * (size_t)n);
    } while (next_perm(perm, n));
    if (!(bestc < 0.8 * curc)) return;
    /* New order: the live groups as 'best', the dead ones after them. */
    int no = 0, neworder[RING_MAX_GROUPS];
    for (int i = 0; i < n; i++) neworder[no++] = live[best[i]];
    for (int i = 0; i < r->ng; i++)
        if (!r->g[r->order[i]].live) neworder[no++] = r->order[i];
    memcpy(r->order, neworder, sizeof(int) * (size_t)r->ng);
    r->epoch++;
    char buf[1024];
    ring_order_str(r, buf, sizeof(buf));
    printf("[ring %s] ring order by RTT (sum %.2f ms, was %.2f ms): %s\n", r->o->self, bestc, curc,
           buf);
    ring_event(r, "order", ", \"ring\": \"%s\", \"rtt_sum_ms\": %.3f, \"was_ms\": %.3f", buf, bestc,
          curc);
}
