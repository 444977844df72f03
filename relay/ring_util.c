/* ring_util.c -- ps-relay --ring (ring.h): what every part of the agent
 * uses: its messages and JSON events, the ring order of the live groups,
 * connections, and the check whether a group lacks deltas another group
 * acknowledged. */

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <redis-ps/ps.h>

#include "agent.h"
#include "clock.h"
#include "protocol.h"
#include "ring_int.h"

static int Noperm; /* a message quoted an ACL refusal (ring_noperm) */

/* A word of 'msg' (after a space, or a space and '(') starts an error reply
 * of class NOPERM: the messages quote the replies they report. */
static int quotes_noperm(const char *msg) {
    for (const char *p = msg; (p = strchr(p, ' ')) != NULL;) {
        p += p[1] == '(' ? 2 : 1;
        if (ps_proto_error_class(p, strlen(p)) == PS_PROTO_ERR_NOPERM) return 1;
    }
    return 0;
}

void ring_say(const ring *r, const char *fmt, ...) {
    va_list ap;
    char msg[1024];
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "ps-relay ring %s: %s\n", r->o->self, msg);
    if (quotes_noperm(msg) && !Noperm++)
        fprintf(stderr, "ps-relay ring %s: the ACL user lacks a permission the ring agent needs "
                "(named above; the role: docs/operations.md \"A ring agent\"): stopping\n",
                r->o->self);
}

int ring_noperm(void) { return Noperm; }

/* One JSON line: {"t": wall seconds, "group": self, "event": ev, <fields>}.
 * 'fields' is a printf format producing the rest of the object's members
 * (starting with a comma) or "". */
void ring_event(ring *r, const char *ev, const char *fields, ...) {
    if (!r->log) return;
    fprintf(r->log, "{\"t\": %.3f, \"group\": \"%s\", \"event\": \"%s\"", ps_wall_s(),
            r->o->self, ev);
    va_list ap;
    va_start(ap, fields);
    vfprintf(r->log, fields, ap);
    va_end(ap);
    fputs("}\n", r->log);
    fflush(r->log);
}

/* "a -> b -> c -> a" of the live groups in ring order. */
void ring_order_str(const ring *r, char *buf, size_t cap) {
    size_t o = 0;
    int first = -1;
    buf[0] = '\0';
    for (int i = 0; i < r->ng && o + 4 < cap; i++) {
        const ringGroup *g = &r->g[r->order[i]];
        if (!g->live) continue;
        if (first < 0) first = r->order[i];
        o += (size_t)snprintf(buf + o, cap - o, "%s%s", o ? " -> " : "", g->name);
    }
    if (first >= 0 && o + 4 < cap) snprintf(buf + o, cap - o, " -> %s", r->g[first].name);
}

int ring_live_count(const ring *r) {
    int n = 0;
    for (int i = 0; i < r->ng; i++) n += r->g[i].live;
    return n;
}

/* The next live group after 'gi' in ring order, or -1 when it is alone. */
int ring_successor(const ring *r, int gi) {
    int pos = 0;
    for (int i = 0; i < r->ng; i++)
        if (r->order[i] == gi) pos = i;
    for (int k = 1; k < r->ng; k++) {
        int j = r->order[(pos + k) % r->ng];
        if (r->g[j].live) return j;
    }
    return -1;
}

const psRingOrigin *ring_origin_row(const psKeyInfo *ki, const char *name) {
    for (size_t i = 0; i < ki->ring_norigins; i++)
        if (!strcmp(ki->ring_origins[i].name, name)) return &ki->ring_origins[i];
    return NULL;
}

/* Connects group 'g' if it is not (at most every dead_ms / 4). 0 or -1. */
int ring_ensure_conn(ring *r, ringGroup *g, long long now) {
    if (g->c) return 0;
    if (now < g->next_connect_ms) return -1;
    psOptions opt = {0};
    opt.client_id = r->o->self;
    opt.connect_timeout_ms = 500;
    long cmd = r->o->dead_ms / 2 > 1000 ? r->o->dead_ms / 2 : 1000;
    opt.command_timeout_ms = (int)cmd;
    opt.max_retries = 1;
    opt.retry_timeout_ms = 200;
    g->c = psConnect(g->addr, &opt);
    if (g->c && !g->c->err) return 0;
    psClientFree(g->c);
    g->c = NULL;
    g->next_connect_ms = now + (r->o->dead_ms / 4 > 100 ? r->o->dead_ms / 4 : 100);
    return -1;
}

/* An I/O failure talking to 'g': drop the connection (reconnected later). */
void ring_conn_failed(ringGroup *g) {
    if (g->c && g->c->err != PS_ERR_SERVER && g->c->err != PS_ERR_PROTOCOL) {
        psClientFree(g->c);
        g->c = NULL;
    }
}

/* The last seq of origin x's deltas that x acknowledged (so every group
 * that was in x's ring then has it), from x's PS.INFO. */
static uint64_t ring_acked_seq(const psKeyInfo *x) {
    return x->ring_pending_seq ? x->ring_pending_seq - 1 : x->ring_take_seq;
}

/* Group y lacks a delta of group x that x acknowledged: y was out of x's
 * ring meanwhile (unreachable, or its agent late) and must rejoin. Needs x's
 * PS.INFO read before y's (a later read of x may count an ack of a delta y
 * got after its read). */
int ring_stale_for(const ring *r, int y, int x) {
    for (int k = 0; k < r->nkeys; k++) {
        const psKeyInfo *xi = &r->g[x].info[k];
        const psRingOrigin *row = ring_origin_row(&r->g[y].info[k], r->g[x].name);
        uint64_t a = ring_acked_seq(xi);
        if (a > 0 && (!row || row->hwm < a)) return 1;
    }
    return 0;
}

void ring_count_rt(ring *r, int gi, int ph, int cmds) {
    if (gi == r->self) return;
    r->tm.rtts[ph]++;
    r->tm.cmds[ph] += (uint64_t)cmds;
}

void ring_timing_print(ring *r) {
    static const char *const names[RING_PH_N] = {"probe", "load", "take", "send", "ack", "fwd"};
    ringTiming *a = &r->tm, *b = &r->tm_last;
    uint64_t n = a->rounds - b->rounds;
    if (!n) return;
    double per = (a->round_s - b->round_s) * 1e3 / (double)n;
    double sleep = (a->sleep_s - b->sleep_s) * 1e3 / (double)n;
    uint64_t rt = 0, cm = 0;
    char phases[512], json[768];
    size_t pl = 0, jl = 0;
    phases[0] = json[0] = '\0';
    for (int p = 0; p < RING_PH_N; p++) {
        uint64_t prt = a->rtts[p] - b->rtts[p], pcm = a->cmds[p] - b->cmds[p];
        double ms = (a->s[p] - b->s[p]) * 1e3 / (double)n;
        rt += prt;
        cm += pcm;
        pl += (size_t)snprintf(phases + pl, sizeof(phases) - pl, "%s%s %.1f ms/%.2f rt", p ? ", " : "",
                               names[p], ms, (double)prt / (double)n);
        jl += (size_t)snprintf(json + jl, sizeof(json) - jl,
                               ", \"%s_ms\": %.3f, \"%s_rtts\": %.3f", names[p], ms, names[p],
                               (double)prt / (double)n);
    }
    printf("[ring %s]   rounds: %" PRIu64 ", %.1f ms each (%.1f asleep); per round %.2f WAN round "
           "trips, %.1f commands to other groups: %s\n",
           r->o->self, n, per, sleep, (double)rt / (double)n, (double)cm / (double)n, phases);
    ring_event(r, "rounds", ", \"rounds\": %" PRIu64 ", \"round_ms\": %.3f, \"sleep_ms\": %.3f, "
               "\"rtts_per_round\": %.3f, \"cmds_per_round\": %.3f%s",
               n, per, sleep, (double)rt / (double)n, (double)cm / (double)n, json);
    *b = *a;
}
