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
 * Each agent publishes its row of RTTs (ms to every group, as name=ms pairs:
 * the agents' --ring lists may name the groups in different orders and by
 * different addresses, e.g. a proxy for a slow link) on its own server (a
 * plain string key "ps-ring:rtt:<name>") and reads the others' rows, so all
 * agents see the same matrix, up to when each row was last published. A
 * link's cost is the larger of its two directions' RTTs. Every agent then
 * makes the same choice from it: of the cycles of the live groups (3 <= G <= 6:
 * every permutation with the first name fixed) the first in name order whose
 * RTT sum is within a tolerance of the cheapest (max(1 ms, 20%)), so near
 * ties (a cycle and its reverse; two equally good ways across a cut) do not
 * split the agents on timing noise. An agent adopts that cycle the first
 * time it can (the --ring lists' orders need not agree) and afterwards only
 * when its current order is no longer within the tolerance of the cheapest. */

#define RTT_KEY "ps-ring:rtt:"

/* Rounds over slow links last long (a pending take polls every group), so
 * the period is also bounded in time: a change of link shows within ~1 s.
 * A change of the live groups (one out of the ring, or back: the epoch moved
 * other than by a reorder of this agent) is due at once: the ring that is
 * left may cross a slow link the best cycle of the rest avoids. */
static uint64_t reorder_epoch; /* r->epoch after this agent's last reorder check */

int ring_reorder_due(const ring *r) {
    static uint64_t last_round;
    static long long last_ms;
    long long now = agent_mono_ms();
    if (last_round && r->round - last_round < 20 && now - last_ms < 1000 &&
        r->epoch == reorder_epoch)
        return 0;
    last_round = r->round, last_ms = now;
    return 1;
}
#define RTT_ROW_CAP (RING_MAX_GROUPS * (PS_RING_ORIGIN_MAX + 20))

/* A refused SET or GET of an RTT row (an ACL without +set/+get or the key
 * pattern ps-ring:rtt:*, which stops the agent: ring_noperm; OOM), said once
 * per command. */
static void say_refused(ring *r, const char *cmd, const char *key, const ringGroup *g,
                        const char *err) {
    static int said_set, said_get;
    int *said = cmd[0] == 'S' ? &said_set : &said_get;
    if ((*said)++) return;
    ring_say(r, "--reorder: %s %s on %s (%s): %s", cmd, key, g->name, g->addr, err);
}

void ring_publish_rtts(ring *r) {
    ringGroup *me = &r->g[r->self];
    static char row[RTT_ROW_CAP];
    char key[96];
    size_t o = 0;
    if (!me->c) return;
    row[0] = '\0';
    for (int i = 0; i < r->ng && o + PS_RING_ORIGIN_MAX + 20 < sizeof(row); i++)
        o += (size_t)snprintf(row + o, sizeof(row) - o, "%s%s=%.3f", i ? " " : "", r->g[i].name,
                              i == r->self ? 0.0 : r->g[i].rtt_ms);
    snprintf(key, sizeof(key), RTT_KEY "%s", me->name);
    redisReply *rep = psCommand(me->c, key, "SET %s %s", key, row);
    if (rep && rep->type == REDIS_REPLY_ERROR) say_refused(r, "SET", key, me, rep->str);
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

/* Row 'a' of m from group live[a]'s published "name=ms ..." in 'str'. */
static void parse_row(const ring *r, const int *live, int n, int a, const char *str,
                      double m[][RING_MAX_GROUPS]) {
    for (int b = 0; b < n; b++) m[a][b] = -1;
    for (const char *p = str; *p;) {
        while (*p == ' ') p++;
        const char *eq = strchr(p, '='), *sp = strchr(p, ' ');
        if (!eq || (sp && sp < eq)) break;
        char *e;
        double v = strtod(eq + 1, &e);
        for (int b = 0; b < n && e != eq + 1; b++)
            if (strlen(r->g[live[b]].name) == (size_t)(eq - p) &&
                !memcmp(r->g[live[b]].name, p, (size_t)(eq - p)))
                m[a][b] = v;
        p = e == eq + 1 ? (sp ? sp : eq + 1 + strlen(eq + 1)) : e;
    }
}

/* Every live group's row into m (-1: not there): the GETs sent to all of
 * them first, then the replies read, so a check costs the slowest link's
 * round trip, not the sum of them. 0, or -1 when a row is missing. */
static int read_rows(ring *r, const int *live, int n, double m[][RING_MAX_GROUPS]) {
    char keys[RING_MAX_GROUPS][96];
    psAsync *q[RING_MAX_GROUPS];
    int rc = 0;
    for (int a = 0; a < n; a++) {
        ringGroup *g = &r->g[live[a]];
        snprintf(keys[a], sizeof(keys[a]), RTT_KEY "%s", g->name);
        const char *argv[2] = {"GET", keys[a]};
        q[a] = g->c ? psCommandArgvAsync(g->c, keys[a], 2, argv, NULL) : NULL;
    }
    for (int a = 0; a < n; a++) {
        ringGroup *g = &r->g[live[a]];
        redisReply *rep = q[a] ? psCommandWait(g->c, q[a]) : NULL;
        if (rep && rep->type == REDIS_REPLY_STRING) {
            parse_row(r, live, n, a, rep->str, m);
        } else {
            if (rep && rep->type == REDIS_REPLY_ERROR) say_refused(r, "GET", keys[a], g, rep->str);
            rc = -1;
        }
        if (rep) freeReplyObject(rep);
    }
    return rc;
}

static const ring *by_name_ring;
static int by_name(const void *x, const void *y) {
    return strcmp(by_name_ring->g[*(const int *)x].name, by_name_ring->g[*(const int *)y].name);
}

void ring_reorder(ring *r) {
    static double m[RING_MAX_GROUPS][RING_MAX_GROUPS], c[RING_MAX_GROUPS][RING_MAX_GROUPS];
    static int chosen_once; /* one ring per process */
    int live[RING_MAX_GROUPS], n = 0;
    for (int i = 0; i < r->ng; i++)
        if (r->g[i].live) live[n++] = i;
    reorder_epoch = r->epoch;
    /* 3 groups: both cycles cost the same, but the agents still agree on one
     * (the first in name order): their --ring lists may run either way */
    if (n < 3 || n > 6) return;
    by_name_ring = r;
    qsort(live, (size_t)n, sizeof(int), by_name); /* positions 0..n-1 in name order */
    if (read_rows(r, live, n, m) != 0) return;
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++) {
            if (a == b) {
                c[a][b] = 0;
                continue;
            }
            if (m[a][b] < 0 || m[b][a] < 0) return; /* not measured yet */
            c[a][b] = fmax(m[a][b], m[b][a]);
        }
    int perm[RING_MAX_GROUPS], best[RING_MAX_GROUPS], cur[RING_MAX_GROUPS], nc = 0, at0 = 0;
    for (int i = 0; i < r->ng; i++)
        for (int b = 0; b < n; b++)
            if (r->order[i] == live[b]) cur[nc++] = b;
    /* The current cycle from name 0 on, to compare it with the choice. */
    while (cur[at0] != 0) at0++;
    int curcyc[RING_MAX_GROUPS];
    for (int i = 0; i < n; i++) curcyc[i] = cur[(at0 + i) % n];
    double minc = 1e300, curc = cycle_cost(c, cur, n);
    for (int i = 0; i < n; i++) perm[i] = i;
    do minc = fmin(minc, cycle_cost(c, perm, n));
    while (next_perm(perm, n));
    double tol = fmax(1.0, 0.2 * minc), bestc = 0;
    for (int i = 0; i < n; i++) perm[i] = i;
    do {
        double x = cycle_cost(c, perm, n);
        if (x <= minc + tol) {
            bestc = x, memcpy(best, perm, sizeof(int) * (size_t)n);
            break;
        }
    } while (next_perm(perm, n));
    int same = !memcmp(best, curcyc, sizeof(int) * (size_t)n);
    int first = !chosen_once;
    chosen_once = 1;
    if (same || (!first && curc <= minc + tol)) return;
    /* New order: the live groups as 'best', the dead ones after them. */
    int no = 0, neworder[RING_MAX_GROUPS];
    for (int i = 0; i < n; i++) neworder[no++] = live[best[i]];
    for (int i = 0; i < r->ng; i++)
        if (!r->g[r->order[i]].live) neworder[no++] = r->order[i];
    memcpy(r->order, neworder, sizeof(int) * (size_t)r->ng);
    r->epoch++;
    reorder_epoch = r->epoch; /* this agent's own change: not a reason to look again */
    char buf[1024];
    ring_order_str(r, buf, sizeof(buf));
    printf("[ring %s] ring order by RTT (sum %.2f ms, was %.2f ms): %s\n", r->o->self, bestc, curc,
           buf);
    ring_event(r, "order", ", \"ring\": \"%s\", \"rtt_sum_ms\": %.3f, \"was_ms\": %.3f", buf, bestc,
          curc);
    fflush(stdout);
}
