/* ring.c -- ps-relay --ring: the ring topology's agent (ring.h). Setup
 * (groups, keys, the start check, TRACK or JOIN), then rounds: probe every
 * group (PS.INFO: liveness, hwm tables, RTT), act for this group (or, with
 * --barrier, for every live group): take, send, ack when everyone has it,
 * forward the queue; progress lines and JSON events. */

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <redis-ps/ps.h>

#include "agent.h"
#include "clock.h"
#include "protocol.h"
#include "ring.h"

#define RING_MAX_GROUPS 64
#define RING_FWD_PER_ROUND 256 /* forward-queue entries one round moves per key */

typedef struct ringGroup {
    char name[PS_RING_ORIGIN_MAX + 1];
    char addr[256];
    psClient *c;              /* NULL: not connected */
    long long next_connect_ms;
    int live;                 /* in the ring now */
    int ok;                   /* the last probe answered (tracked as this group) */
    int stale;                /* answers but lacks deltas this group acknowledged */
    int noprev;               /* its module has no PS.APPLYDELTA ... PREV (sent without) */
    int gap;                  /* answered GAP: lacks gap_origin's delta gap_prev of key gap_key */
    int gap_key;
    long long gap_ms;         /* monotonic ms of the GAP answer that set 'gap' */
    uint64_t gap_prev;
    char gap_origin[PS_RING_ORIGIN_MAX + 1];
    long long last_ok_ms;     /* monotonic ms of the last good probe */
    double rtt_ms;            /* EWMA of a PS.INFO round trip (-1: none yet) */
    uint64_t bytes_to;        /* delta bytes sent to this group (as successor or direct) */
    double send_s;            /* seconds spent sending them */
    uint64_t bytes_to_last;   /* at the last progress line */
    double send_s_last;
    psKeyInfo *info;          /* per key: the last probe's PS.INFO */
} ringGroup;

typedef struct ringKey {
    char *name;
    size_t n;
    uint64_t seqfloor;        /* this group's SEQFLOOR (0: none) */
    /* per acting group: the pending take last sent, when and in which epoch */
    uint64_t sent_seq[RING_MAX_GROUPS];
    uint64_t sent_round[RING_MAX_GROUPS];
    uint64_t sent_epoch[RING_MAX_GROUPS];
    uint64_t confirmed[RING_MAX_GROUPS]; /* --mesh: groups (bits) that answered sent_seq */
} ringKey;

typedef struct ringStats {
    uint64_t takes, acks, sent, resends, forwarded, dups, elems_sent, bytes_sent;
} ringStats;

typedef struct ring {
    const ringOpts *o;
    ringGroup g[RING_MAX_GROUPS];
    int ng, self;
    int order[RING_MAX_GROUPS];   /* ring order: indices into g */
    ringKey *keys;
    int nkeys;
    uint64_t round, epoch;
    double threshold;
    double round_send_s;          /* seconds this round spent sending deltas */
    ringStats st;
    FILE *log;
    long long start_ms, last_progress_ms, last_probe_ms;
    const char *fault;            /* PS_RING_FAULT "phase:n": SIGKILL itself (tests) */
} ring;

static void say(const ring *r, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "ps-relay ring %s: ", r->o->self);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* One JSON line: {"t": wall seconds, "group": self, "event": ev, <fields>}.
 * 'fields' is a printf format producing the rest of the object's members
 * (starting with a comma) or "". */
static void event(ring *r, const char *ev, const char *fields, ...) {
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
static void order_str(const ring *r, char *buf, size_t cap) {
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

static int live_count(const ring *r) {
    int n = 0;
    for (int i = 0; i < r->ng; i++) n += r->g[i].live;
    return n;
}

/* The next live group after 'gi' in ring order, or -1 when it is alone. */
static int successor(const ring *r, int gi) {
    int pos = 0;
    for (int i = 0; i < r->ng; i++)
        if (r->order[i] == gi) pos = i;
    for (int k = 1; k < r->ng; k++) {
        int j = r->order[(pos + k) % r->ng];
        if (r->g[j].live) return j;
    }
    return -1;
}

static const psRingOrigin *origin_row(const psKeyInfo *ki, const char *name) {
    for (size_t i = 0; i < ki->ring_norigins; i++)
        if (!strcmp(ki->ring_origins[i].name, name)) return &ki->ring_origins[i];
    return NULL;
}

/* ========================================================================
 * Groups: connections, probes, liveness
 * ====================================================================== */

static int parse_groups(ring *r) {
    const char *p = r->o->ring;
    r->self = -1;
    while (*p) {
        const char *e = strchr(p, ',');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        const char *eq = memchr(p, '=', l);
        if (!eq || eq == p || (size_t)(eq - p) > PS_RING_ORIGIN_MAX || l - (size_t)(eq - p) < 2 ||
            l - (size_t)(eq - p) > 255 || r->ng == RING_MAX_GROUPS) {
            say(r, "--ring: '%.*s' is not name=host:port (names 1..%d bytes, at most %d groups)",
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
                say(r, "--ring: group name '%s' may use only [A-Za-z0-9_.:-]", g->name);
                return -1;
            }
        for (int i = 0; i < r->ng; i++)
            if (!strcmp(r->g[i].name, g->name)) {
                say(r, "--ring: group '%s' is named twice", g->name);
                return -1;
            }
        g->rtt_ms = -1;
        if (!strcmp(g->name, r->o->self)) r->self = r->ng;
        r->order[r->ng] = r->ng;
        r->ng++;
        p += l + (e ? 1 : 0);
    }
    if (r->ng < 2) {
        say(r, "--ring needs at least 2 groups");
        return -1;
    }
    if (r->self < 0) {
        say(r, "--self %s is not one of the --ring groups", r->o->self);
        return -1;
    }
    return 0;
}

/* Connects group 'g' if it is not (at most every dead_ms / 4). 0 or -1. */
static int ensure_conn(ring *r, ringGroup *g, long long now) {
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
static void conn_failed(ringGroup *g) {
    if (g->c && g->c->err != PS_ERR_SERVER && g->c->err != PS_ERR_PROTOCOL) {
        psClientFree(g->c);
        g->c = NULL;
    }
}

/* PS.INFO of every key on 'g'. 1 when every key is tracked as this group,
 * 0 when it answers otherwise, -1 when it does not answer. */
static int probe(ring *r, ringGroup *g, long long now) {
    if (ensure_conn(r, g, now) != 0) return -1;
    int tracked = 1;
    for (int k = 0; k < r->nkeys; k++) {
        double t0 = ps_mono_s();
        if (psInfo(g->c, r->keys[k].name, &g->info[k]) != PS_OK) {
            int io = g->c->err != PS_ERR_SERVER && g->c->err != PS_ERR_NOKEY &&
                     g->c->err != PS_ERR_PROTOCOL;
            if (io) {
                conn_failed(g);
                return -1;
            }
            tracked = 0;
            continue;
        }
        double ms = (ps_mono_s() - t0) * 1e3;
        g->rtt_ms = g->rtt_ms < 0 ? ms : 0.8 * g->rtt_ms + 0.2 * ms;
        if (strcmp(g->info[k].ring_origin, g->name)) tracked = 0;
    }
    return tracked;
}

/* The last seq of origin x's deltas that x acknowledged (so every group
 * that was in x's ring then has it), from x's PS.INFO. */
static uint64_t acked_seq(const psKeyInfo *x) {
    return x->ring_pending_seq ? x->ring_pending_seq - 1 : x->ring_take_seq;
}

/* Group y lacks a delta of group x that x acknowledged: y was out of x's
 * ring meanwhile (unreachable, or its agent late) and must rejoin. Needs x's
 * PS.INFO read before y's (a later read of x may count an ack of a delta y
 * got after its read). */
static int stale_for(const ring *r, int y, int x) {
    for (int k = 0; k < r->nkeys; k++) {
        const psKeyInfo *xi = &r->g[x].info[k];
        const psRingOrigin *row = origin_row(&r->g[y].info[k], r->g[x].name);
        uint64_t a = acked_seq(xi);
        if (a > 0 && (!row || row->hwm < a)) return 1;
    }
    return 0;
}

static int rejoin(ring *r, const char *why, int lacking);

/* Group i answered GAP (send_delta): does the last probe show it has the
 * delta it lacked now (its agent rejoined it), or is that origin out of the
 * ring (nothing of it comes any more)? Then it may enter again: 1, gap
 * cleared. */
static int gap_filled(ring *r, int i) {
    ringGroup *g = &r->g[i];
    int o = -1;
    for (int j = 0; j < r->ng; j++)
        if (!strcmp(r->g[j].name, g->gap_origin)) o = j;
    const psRingOrigin *row = g->ok ? origin_row(&g->info[g->gap_key], g->gap_origin) : NULL;
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
static void probe_all(ring *r) {
    long long now = agent_mono_ms();
    char buf[1024];
    long period = r->o->dead_ms / 4 < 500 ? r->o->dead_ms / 4 : 500;
    if (!r->o->barrier && r->round > 1 && now - r->last_probe_ms < period) return;
    r->last_probe_ms = now;
    for (int n = 0; n < r->ng; n++) {
        int i = (r->self + 1 + n) % r->ng; /* self last */
        ringGroup *g = &r->g[i];
        int st = probe(r, g, now);
        g->ok = st == 1;
        if (g->ok) g->last_ok_ms = now;
        if (g->live && !g->ok && now - g->last_ok_ms >= r->o->dead_ms) {
            g->live = 0;
            r->epoch++;
            order_str(r, buf, sizeof(buf));
            say(r, "group %s %s for %ld ms: out of the ring, which is now %s", g->name,
                st < 0 ? "unreachable" : "not tracked as that group", r->o->dead_ms, buf);
            printf("[ring %s] group %s left the ring: %s\n", r->o->self, g->name, buf);
            event(r, "group_dead", ", \"dead\": \"%s\", \"ring\": \"%s\"", g->name, buf);
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
        if (i != r->self && !r->o->barrier && stale_for(r, i, r->self)) {
            if (!g->stale) {
                printf("[ring %s] group %s answers again but lacks deltas of %s acknowledged while "
                       "it was out: kept out until its agent rejoins it\n", r->o->self, g->name,
                       r->o->self);
                event(r, "group_stale", ", \"stale\": \"%s\"", g->name);
            }
            g->stale = 1;
            continue;
        }
        g->live = 1;
        g->stale = 0;
        r->epoch++;
        order_str(r, buf, sizeof(buf));
        printf("[ring %s] group %s is in the ring: %s\n", r->o->self, g->name, buf);
        event(r, "group_live", ", \"live\": \"%s\", \"ring\": \"%s\"", g->name, buf);
    }
    /* This group lacks what another acknowledged: copy the model again. */
    if (!r->o->barrier && r->g[r->self].ok)
        for (int x = 0; x < r->ng; x++)
            if (x != r->self && r->g[x].live && r->g[x].ok && stale_for(r, r->self, x)) {
                char why[160];
                snprintf(why, sizeof(why), "this group lacks deltas %s acknowledged while it was "
                         "out of the ring", r->g[x].name);
                rejoin(r, why, x);
                break;
            }
    fflush(stdout);
}

/* ========================================================================
 * Setup: keys, the start check, TRACK / JOIN
 * ====================================================================== */

static int add_key(ring *r, const char *name, size_t len) {
    ringKey *nk = realloc(r->keys, (size_t)(r->nkeys + 1) * sizeof(ringKey));
    if (!nk) return -1;
    r->keys = nk;
    ringKey *k = &r->keys[r->nkeys++];
    memset(k, 0, sizeof(*k));
    k->name = strndup(name, len);
    return k->name ? 0 : -1;
}

static int cmp_keys(const void *a, const void *b) {
    return strcmp(((const ringKey *)a)->name, ((const ringKey *)b)->name);
}

static int find_keys(ring *r, psClient *c) {
    const ringOpts *o = r->o;
    if (o->keys) {
        for (const char *p = o->keys; *p;) {
            const char *e = strchr(p, ',');
            size_t l = e ? (size_t)(e - p) : strlen(p);
            if (l && add_key(r, p, l) != 0) return -1;
            p += l + (e ? 1 : 0);
        }
    } else {
        if (c->cluster) {
            say(r, "--match needs a standalone server for this group (a SCAN reaches one node): "
                   "give --keys");
            return -1;
        }
        char cursor[32] = "0";
        do {
            redisReply *rep =
                psCommand(c, NULL, "SCAN %s MATCH %s TYPE ps-tensor COUNT 1000", cursor, o->match);
            if (!rep || rep->type != REDIS_REPLY_ARRAY || rep->elements != 2) {
                say(r, "SCAN on %s: %s", r->g[r->self].addr,
                    rep && rep->type == REDIS_REPLY_ERROR ? rep->str : c->errstr);
                if (rep) freeReplyObject(rep);
                return -1;
            }
            snprintf(cursor, sizeof(cursor), "%s", rep->element[0]->str);
            const redisReply *ks = rep->element[1];
            for (size_t i = 0; i < ks->elements; i++)
                if (add_key(r, ks->element[i]->str, ks->element[i]->len) != 0) {
                    freeReplyObject(rep);
                    return -1;
                }
            freeReplyObject(rep);
        } while (strcmp(cursor, "0") != 0);
    }
    if (r->nkeys == 0) {
        say(r, "no tensor keys %s%s on %s", o->keys ? "in --keys" : "match ",
            o->keys ? "" : o->match, r->g[r->self].addr);
        return -1;
    }
    qsort(r->keys, (size_t)r->nkeys, sizeof(ringKey), cmp_keys);
    return 0;
}

static uint64_t fnv1a(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ULL;
    return h;
}

/* Key k's shape, optimizer and lr on every reachable group must be self's.
 * 0, or 2 (refused). */
static int check_fit(ring *r, int k) {
    const psKeyInfo *s = &r->g[r->self].info[k];
    if (s->is_table) {
        say(r, "%s is an embedding table: the ring carries tensors only in this version",
            r->keys[k].name);
        return 2;
    }
    for (int i = 0; i < r->ng; i++) {
        const psKeyInfo *x = &r->g[i].info[k];
        if (i == r->self || !r->g[i].c || (x->version == 0 && x->ndim == 0)) continue;
        int same = x->ndim == s->ndim && !memcmp(x->dims, s->dims, sizeof(s->dims)) &&
                   !strcmp(x->optimizer, s->optimizer) && x->lr == s->lr && !x->is_table;
        if (!same) {
            say(r, "group %s's %s (%s, %d dims, %" PRIu64 " elements, lr %g) does not fit this "
                   "group's (%s, %d dims, %" PRIu64 " elements, lr %g): refusing to start",
                r->g[i].name, r->keys[k].name, x->optimizer, x->ndim, x->elements, x->lr,
                s->optimizer, s->ndim, s->elements, s->lr);
            return 2;
        }
    }
    return 0;
}

/* Copies the model of a live neighbour into this group (PS.RING JOIN
 * ... KEEPOWN): PS.RING STATE answers its base (values minus its own change
 * not yet taken, which it sends to everyone later, this group included) and
 * its marks, its own origin at its take_seq first: exactly what the marks
 * then say this group has; this group's own change stays its own. With
 * 'lacking' >= 0 (this group lacks deltas that group acknowledged) the
 * nearest live group that the last probe shows holding them is preferred
 * (that group itself always does): a copy of one that lacks them too would
 * leave this group as stale as before. 0, or -1. */
static int rejoin(ring *r, const char *why, int lacking) {
    ringGroup *me = &r->g[r->self];
    int from = -1;
    for (int pass = lacking >= 0 ? 0 : 1; pass < 3 && from < 0; pass++)
        for (int k = 1; k < r->ng && from < 0; k++) {
            int j = (r->self + k) % r->ng;
            ringGroup *g = &r->g[j];
            if (!g->c || (pass < 2 && !g->live)) continue;
            if (pass == 0 && j != lacking && stale_for(r, j, lacking)) continue;
            int all = 1;
            for (int q = 0; q < r->nkeys; q++)
                if (strcmp(g->info[q].ring_origin, g->name)) all = 0;
            if (all) from = j;
        }
    if (from < 0 || !me->c) {
        say(r, "%s: no live tracked group to copy the model from (retrying)", why);
        return -1;
    }
    ringGroup *g = &r->g[from];
    for (int k = 0; k < r->nkeys; k++) {
        psRingSnapshot s;
        if (psRingState(g->c, r->keys[k].name, r->keys[k].n, &s) != PS_OK) {
            say(r, "%s: PS.RING STATE %s on %s: %s", why, r->keys[k].name, g->name, g->c->errstr);
            conn_failed(g);
            return -1;
        }
        /* STATE answers the neighbour's base and its marks, its own origin
         * (at its take_seq) first: passed on as they are. */
        int own = 0;
        for (size_t q = 0; q < s.norigins; q++)
            if (!strcmp(s.origins[q].name, g->name)) own = 1;
        if (!own)
            say(r, "%s: %s's PS.RING STATE has no mark of its own origin (a module before the "
                   "base/own-mark contract): its change not yet taken is applied again here",
                why, g->name);
        const float *copy = s.values;
        int rc = psRingJoin(me->c, r->keys[k].name, me->name, copy, s.n, s.origins, s.norigins,
                            1);
        if (rc != PS_OK && me->c->err == PS_ERR_SERVER) {
            say(r, "%s: JOIN ... KEEPOWN: %s: joining without it (this group's change not yet "
                   "taken is dropped)", why, me->c->errstr);
            rc = psRingJoin(me->c, r->keys[k].name, me->name, copy, s.n, s.origins, s.norigins, 0);
        }
        psRingStateFree(&s);
        if (rc != PS_OK) {
            say(r, "%s: PS.RING %s JOIN: %s", why, r->keys[k].name, me->c->errstr);
            conn_failed(me);
            return -1;
        }
        /* A new start for this key's own takes. */
        r->keys[k].sent_seq[r->self] = 0;
    }
    r->epoch++;
    printf("[ring %s] joined (%s): copied %d keys from group %s\n", me->name, why, r->nkeys,
           g->name);
    event(r, "joined", ", \"from\": \"%s\", \"why\": \"%s\"", g->name, why);
    return 0;
}

/* The start check and TRACK of every key (or JOIN with --join). 0, 1 or 2. */
static int setup(ring *r) {
    ringGroup *me = &r->g[r->self];
    long long now = agent_mono_ms();
    for (int i = 0; i < r->ng; i++) {
        r->g[i].info = calloc((size_t)r->nkeys, sizeof(psKeyInfo));
        if (!r->g[i].info) return 1;
    }
    /* PS.INFO of every key everywhere reachable. */
    for (int i = 0; i < r->ng; i++) {
        ringGroup *g = &r->g[i];
        if (ensure_conn(r, g, now) != 0) {
            if (i == r->self) {
                say(r, "this group's server %s does not answer", g->addr);
                return 1;
            }
            say(r, "group %s (%s) does not answer: starting without it", g->name, g->addr);
            continue;
        }
        for (int k = 0; k < r->nkeys; k++) {
            if (psInfo(g->c, r->keys[k].name, &g->info[k]) == PS_OK) continue;
            if (g->c->err == PS_ERR_SERVER || g->c->err == PS_ERR_NOKEY ||
                g->c->err == PS_ERR_PROTOCOL) {
                say(r, "group %s (%s) has no tensor %s (%s): a ring address that is not a "
                       "group of this model; refusing to start", g->name, g->addr,
                    r->keys[k].name, g->c->errstr);
                return 2;
            }
            say(r, "group %s (%s): %s: starting without it", g->name, g->addr, g->c->errstr);
            conn_failed(g);
            memset(g->info, 0, (size_t)r->nkeys * sizeof(psKeyInfo));
            break;
        }
    }
    for (int k = 0; k < r->nkeys; k++) {
        if (check_fit(r, k)) return 2;
        r->keys[k].n = me->info[k].elements;
        for (int i = 0; i < r->ng; i++) {
            const psKeyInfo *x = &r->g[i].info[k];
            if (r->g[i].c && x->ring_origin[0] && strcmp(x->ring_origin, r->g[i].name)) {
                say(r, "group %s's %s is tracked as group '%s': a ring address that is not that "
                       "group; refusing to start", r->g[i].name, r->keys[k].name, x->ring_origin);
                return 2;
            }
        }
    }
    /* Has the ring exchanged anything yet? Then an untracked group joins. */
    int running = 0, me_tracked = 1;
    for (int k = 0; k < r->nkeys; k++) {
        if (!me->info[k].ring_origin[0]) me_tracked = 0;
        for (int i = 0; i < r->ng; i++) {
            const psKeyInfo *x = &r->g[i].info[k];
            if (i != r->self && r->g[i].c && x->ring_origin[0] &&
                (x->ring_take_seq || x->ring_applied))
                running = 1;
        }
    }
    int join = r->o->join;
    if (join) {
        if (!running && me_tracked) say(r, "--join: this group is tracked already; joining anew");
    } else if (!me_tracked && running) {
        say(r, "the ring is running but this group is not in it: joining (its model is replaced "
               "by a live group's)");
        join = 1;
    } else if (!me_tracked) {
        /* A fresh start: every reachable group must hold the same values. */
        for (int k = 0; k < r->nkeys; k++) {
            uint64_t mine = 0;
            for (int pass = 0; pass < 2; pass++)
                for (int i = 0; i < r->ng; i++) {
                    if (!r->g[i].c || (pass == 0) != (i == r->self)) continue;
                    psRingSnapshot s;
                    if (psRingState(r->g[i].c, r->keys[k].name, r->keys[k].n, &s) != PS_OK) {
                        say(r, "PS.RING STATE %s on %s: %s", r->keys[k].name, r->g[i].name,
                            r->g[i].c->errstr);
                        return r->g[i].c->err == PS_ERR_SERVER ? 2 : 1;
                    }
                    uint64_t h = fnv1a(s.values, s.n * sizeof(float));
                    psRingStateFree(&s);
                    if (i == r->self) mine = h;
                    else if (h != mine) {
                        say(r, "group %s's %s holds other values than this group's (hash %016" PRIx64
                               " vs %016" PRIx64 "): every group must start from the same model; "
                               "refusing to start", r->g[i].name, r->keys[k].name, h, mine);
                        event(r, "refused", ", \"key\": \"%s\", \"other\": \"%s\"",
                              r->keys[k].name, r->g[i].name);
                        return 2;
                    }
                }
        }
    }
    for (int k = 0; k < r->nkeys; k++) {
        int t = psRingTrack(me->c, r->keys[k].name, me->name, r->o->maxqueue, r->o->maxlag);
        if (t == PS_ERR && me->c->err == PS_ERR_SERVER && r->o->maxlag > 0) {
            say(r, "PS.RING %s TRACK ... MAXLAG %lld: %s: tracking without a lag bound", r->keys[k].name,
                r->o->maxlag, me->c->errstr);
            t = psRingTrack(me->c, r->keys[k].name, me->name, r->o->maxqueue, -1);
        }
        if (t == PS_ERR) {
            say(r, "PS.RING %s TRACK %s: %s", r->keys[k].name, me->name, me->c->errstr);
            return me->c->err == PS_ERR_SERVER ? 2 : 1;
        }
    }
    if (join) {
        /* Visible as tracked first, so that origins wait for this group from
         * here on (it answers as tracked); then copy a live neighbour. */
        agent_sleep_ms(3 * r->o->every_ms + 50);
        if (rejoin(r, r->o->join ? "--join" : "the ring is running without this group", -1) != 0)
            return 1;
    }
    /* This group's seqs must pass what the others already have of it (a
     * wiped or joining server starts again at take_seq 0). */
    now = agent_mono_ms();
    for (int k = 0; k < r->nkeys; k++) {
        uint64_t hi = 0;
        for (int i = 0; i < r->ng; i++) {
            if (!r->g[i].c || psInfo(r->g[i].c, r->keys[k].name, &r->g[i].info[k]) != PS_OK)
                continue;
            const psRingOrigin *row = origin_row(&r->g[i].info[k], me->name);
            if (row && row->hwm > hi) hi = row->hwm;
        }
        if (hi > me->info[k].ring_take_seq) r->keys[k].seqfloor = hi + 1;
    }
    return 0;
}

/* ========================================================================
 * Rounds
 * ====================================================================== */

/* Group 'to' answered GAP to a delta (origin, seq) of key k: it lacks
 * origin's delta 'prev' (docs/design.md "Ring state": per origin, deltas
 * apply in seq order, no gap). It cannot take any later delta of that
 * origin until its agent copies the ring again (it lacks a delta the origin
 * acknowledged, which its agent's stale check sees), so this agent takes it
 * out of the ring (forward entries go around it) and, once it has not
 * rejoined for --dead-after-ms (its agent may be gone), stops waiting for
 * it (waits_for); it enters again once a probe shows it has that delta
 * (probe_all). With --barrier nothing moves: the barrier cannot drain a
 * group that has to rejoin. */
static void gap_seen(ring *r, int to, int k, const char *origin, uint64_t seq, uint64_t prev) {
    ringGroup *g = &r->g[to];
    if (g->gap) return; /* known: its agent is on it */
    say(r, "PS.APPLYDELTA %s (%s seq %" PRIu64 ") on %s: GAP, it lacks %s's delta %" PRIu64,
        r->keys[k].name, origin, seq, g->name, origin, prev);
    if (r->o->barrier) return;
    g->gap = 1;
    g->gap_ms = agent_mono_ms();
    g->gap_key = k;
    g->gap_prev = prev;
    snprintf(g->gap_origin, sizeof(g->gap_origin), "%s", origin);
    g->stale = 1;
    char buf[1024];
    if (g->live) {
        g->live = 0;
        r->epoch++;
    }
    order_str(r, buf, sizeof(buf));
    printf("[ring %s] group %s lacks delta %" PRIu64 " of %s (GAP): kept out until its agent "
           "rejoins it; ring %s\n", r->o->self, g->name, prev, origin, buf);
    event(r, "group_gap", ", \"stale\": \"%s\", \"origin\": \"%s\", \"lacks\": %" PRIu64
          ", \"ring\": \"%s\"", g->name, origin, prev, buf);
    fflush(stdout);
}

/* PS.APPLYDELTA of key k to group 'to', with PREV seq - 1: an origin's
 * seqs are dense (one per take; SEQFLOOR and JOIN only skip seqs some group
 * already holds), so the delta before seq is seq - 1. 1 applied, 0 a
 * repeat, -1 failed, -2 GAP (gap_seen). A module without PREV is sent to
 * without it from then on (its first answer to a PREV is an error that a
 * resend without PREV does not give). */
static int send_delta(ring *r, int to, int k, const char *origin, uint64_t seq,
                      const uint32_t *idx, const float *vals, uint64_t count, int64_t hops) {
    ringGroup *g = &r->g[to];
    const char *key = r->keys[k].name;
    if (!g->c) return -1;
    double t0 = ps_mono_s();
    uint64_t prev = g->noprev ? 0 : seq - 1;
    int rc = psDeltaApplyPrev(g->c, key, origin, seq, prev, idx, vals, (size_t)count, hops);
    if (rc == PS_ERR && prev && g->c->err == PS_ERR_SERVER) {
        const ps_proto_error cls = ps_proto_error_class(g->c->errstr, strlen(g->c->errstr));
        if (cls == PS_PROTO_ERR_GAP) {
            gap_seen(r, to, k, origin, seq, prev);
            return -2;
        }
        if (cls == PS_PROTO_ERR_ERR || cls == PS_PROTO_ERR_UNKNOWN_OPT) {
            char why[256];
            snprintf(why, sizeof(why), "%s", g->c->errstr);
            rc = psDeltaApply(g->c, key, origin, seq, idx, vals, (size_t)count, hops);
            if (rc != PS_ERR) {
                g->noprev = 1;
                say(r, "group %s's module has no PS.APPLYDELTA ... PREV (%s): sending without it "
                       "(a gap in its deltas goes unnoticed there)", g->name, why);
            }
        }
    }
    double dt = ps_mono_s() - t0;
    if (rc == PS_ERR) {
        say(r, "PS.APPLYDELTA %s (%s seq %" PRIu64 ") on %s: %s", key, origin, seq, g->name,
            g->c->errstr);
        conn_failed(g);
        return -1;
    }
    uint64_t bytes = count * 8;
    g->bytes_to += bytes;
    g->send_s += dt;
    r->round_send_s += dt;
    r->st.bytes_sent += bytes;
    r->st.elems_sent += count;
    if (rc == 0) r->st.dups++;
    return rc;
}

/* A take is acknowledged only once group i has it: i is in the ring (or
 * was until it stopped answering, for --dead-after-ms), or it answers as
 * tracked, in the ring or not (a group rejoining: waiting for it lets the
 * delta reach it right after its copy), unless it answered GAP and has not
 * rejoined for --dead-after-ms: its agent is gone or cannot copy, and it
 * can take no delta of that origin before it does (if it rejoins later and
 * lacks what was acknowledged meanwhile, its agent sees that and copies
 * again). */
static int waits_for(const ring *r, int i) {
    const ringGroup *g = &r->g[i];
    if (g->gap && agent_mono_ms() - g->gap_ms >= r->o->dead_ms) return 0;
    return g->live || g->ok;
}

/* One round of key k acting for group gi. Returns 1 when it acknowledged
 * a take or forwarded something (more may be waiting), else 0. */
static int act_key(ring *r, int gi, int k) {
    int work = 0;
    ringGroup *me = &r->g[gi];
    ringKey *key = &r->keys[k];
    int L = live_count(r), succ = successor(r, gi);
    double thr = r->o->barrier || r->o->leave ? 0 : r->threshold;
    if (!me->c) return 0;
    psDelta d;
    memset(&d, 0, sizeof(d));
    int rc = psDeltaTake(me->c, key->name, key->n, gi == r->self ? key->seqfloor : 0, thr, 0, &d);
    if (rc == PS_ERR) {
        say(r, "PS.DELTATAKE %s on %s: %s", key->name, me->name, me->c->errstr);
        conn_failed(me);
        return 0;
    }
    if (rc == 1 && (r->o->mesh || r->o->leave)) {
        /* Mesh: straight to every group; an APPLYDELTA reply (1, or 0 for a
         * repeat) is the proof it is there: acked when all answered. */
        agent_fault_point(r->fault, "take");
        if (d.seq != key->sent_seq[gi]) {
            r->st.takes++;
            key->sent_seq[gi] = d.seq;
            key->confirmed[gi] = 0;
        }
        int all = 1;
        for (int i = 0; i < r->ng; i++) {
            uint64_t bit = 1ULL << i;
            if (i == gi || !waits_for(r, i) || (key->confirmed[gi] & bit)) continue;
            if (send_delta(r, i, k, me->name, d.seq, d.idx, d.vals, d.count, 0) >= 0) {
                key->confirmed[gi] |= bit;
                r->st.sent++;
                agent_fault_point(r->fault, "send");
            } else {
                all = 0;
            }
        }
        if (all) {
            if (psDeltaAck(me->c, key->name, d.seq) == PS_ERR) {
                say(r, "PS.DELTAACK %s on %s: %s", key->name, me->name, me->c->errstr);
                conn_failed(me);
            } else {
                r->st.acks++;
                work = 1;
                agent_fault_point(r->fault, "ack");
            }
        }
    } else if (rc == 1) {
        agent_fault_point(r->fault, "take");
        if (d.seq != key->sent_seq[gi]) {
            r->st.takes++;
            if (succ >= 0 && send_delta(r, succ, k, me->name, d.seq, d.idx, d.vals, d.count,
                                        L - 2) >= 0) {
                key->sent_seq[gi] = d.seq;
                key->sent_round[gi] = r->round;
                key->sent_epoch[gi] = r->epoch;
                r->st.sent++;
                agent_fault_point(r->fault, "send");
            }
        }
        /* Acked only when every live group has it: their hwm, read now (a
         * group that does not answer counts as lacking it until it is out). */
        int lacking = 0;
        for (int i = 0; i < r->ng; i++) {
            if (i == gi || !waits_for(r, i)) continue;
            if (!r->o->barrier && r->g[i].c &&
                psInfo(r->g[i].c, key->name, &r->g[i].info[k]) != PS_OK) {
                conn_failed(&r->g[i]);
                r->g[i].info[k].ring_norigins = 0;
            }
            const psRingOrigin *row = origin_row(&r->g[i].info[k], me->name);
            if (!row || row->hwm < d.seq) lacking++;
        }
        if (!lacking) {
            if (psDeltaAck(me->c, key->name, d.seq) == PS_ERR) {
                say(r, "PS.DELTAACK %s on %s: %s", key->name, me->name, me->c->errstr);
                conn_failed(me);
            } else {
                r->st.acks++;
                work = 1;
                agent_fault_point(r->fault, "ack");
            }
        } else if (key->sent_seq[gi] == d.seq &&
                   (key->sent_epoch[gi] != r->epoch ||
                    r->round - key->sent_round[gi] > (uint64_t)L + 2)) {
            /* The ring re-formed (or the delta is late): straight to whoever lacks it. */
            for (int i = 0; i < r->ng; i++) {
                if (i == gi || !waits_for(r, i)) continue;
                const psRingOrigin *row = origin_row(&r->g[i].info[k], me->name);
                if (row && row->hwm >= d.seq) continue;
                if (send_delta(r, i, k, me->name, d.seq, d.idx, d.vals, d.count, 0) >= 0)
                    r->st.resends++;
            }
            key->sent_round[gi] = r->round;
            key->sent_epoch[gi] = r->epoch;
        }
    }
    psDeltaRelease(&d);
    /* The forward queue goes on to the successor. */
    for (int n = 0; n < RING_FWD_PER_ROUND && !AgentStop && me->c; n++) {
        psDelta e;
        memset(&e, 0, sizeof(e));
        rc = psDeltaFwd(me->c, key->name, key->n, &e);
        if (rc == PS_ERR) {
            say(r, "PS.DELTAFWD %s on %s: %s", key->name, me->name, me->c->errstr);
            conn_failed(me);
            break;
        }
        if (rc == 0) break;
        int ok = succ < 0 ? 0
                          : send_delta(r, succ, k, e.origin, e.seq, e.idx, e.vals,
                                       e.count, (int64_t)e.hops);
        if (ok >= 0) {
            if (psDeltaFwdAck(me->c, key->name, e.origin, e.seq) == PS_ERR) {
                say(r, "PS.DELTAFWDACK %s on %s: %s", key->name, me->name, me->c->errstr);
                conn_failed(me);
                ok = -1;
            } else {
                r->st.forwarded++;
                work = 1;
                agent_fault_point(r->fault, "fwd");
            }
        }
        psDeltaRelease(&e);
        if (ok < 0) break;
    }
    return work;
}

/* Barrier: every live group drained (nothing pending, accumulated or
 * queued), per the probe at the start of this round. */
static int drained(const ring *r) {
    for (int i = 0; i < r->ng; i++) {
        if (!r->g[i].live) continue;
        for (int k = 0; k < r->nkeys; k++) {
            const psKeyInfo *x = &r->g[i].info[k];
            if (x->ring_pending_seq || x->ring_accumulated || x->ring_fwd_entries) return 0;
        }
    }
    return 1;
}

/* After a barrier: do the live groups hold the same values? Prints the
 * largest difference. 0 when bit-identical. */
static int compare_groups(ring *r) {
    int differ = 0;
    for (int k = 0; k < r->nkeys; k++) {
        psRingSnapshot ref;
        int have = 0;
        double maxd = 0, maxabs = 0;
        uint64_t applied = 0;
        for (int i = 0; i < r->ng; i++)
            if (r->g[i].live) applied += r->g[i].info[k].ring_applied;
        memset(&ref, 0, sizeof(ref));
        for (int i = 0; i < r->ng; i++) {
            if (!r->g[i].live || !r->g[i].c) continue;
            psRingSnapshot s;
            if (psRingState(r->g[i].c, r->keys[k].name, r->keys[k].n, &s) != PS_OK) continue;
            for (size_t j = 0; j < s.n; j++) maxabs = fmax(maxabs, fabs((double)s.values[j]));
            if (!have) {
                ref = s;
                have = 1;
                continue;
            }
            for (size_t j = 0; j < s.n; j++) {
                double dd = fabs((double)s.values[j] - (double)ref.values[j]);
                if (dd > maxd || (s.values[j] != ref.values[j] && dd == 0)) maxd = dd;
                if (memcmp(&s.values[j], &ref.values[j], sizeof(float)) && !differ) differ = 1;
            }
            psRingStateFree(&s);
        }
        /* docs/design.md "Ring topology": each applied delta rounds values and
         * base by at most half an ulp each, each take's difference by half an
         * ulp: two groups differ by at most (deltas applied in all + takes) ulps
         * of the largest value. */
        double ulp = maxabs > 0 ? ldexp(1.0, ilogb(maxabs) - 23) : 0;
        double bound = (double)(applied + 2) * 2 * ulp;
        printf("[ring %s] barrier: %s: largest difference between groups %g (bound %g)\n",
               r->o->self, r->keys[k].name, maxd, bound);
        if (maxd > bound) differ = 2;
        psRingStateFree(&ref);
    }
    return differ;
}

/* Gaia-style: a round whose sends took longer than half the round period
 * means the link cannot keep up: raise the threshold; a nearly idle link:
 * lower it (never below --threshold / 8 nor above 0.5). */
static void adapt_threshold(ring *r) {
    double busy = r->round_send_s * 1e3 / (double)r->o->every_ms, old = r->threshold;
    if (busy > 0.5 && r->threshold < 0.5) r->threshold = fmin(0.5, r->threshold * 2);
    else if (busy < 0.05 && r->threshold > r->o->threshold / 8)
        r->threshold = fmax(r->o->threshold / 8, r->threshold / 2);
    if (r->threshold != old) {
        printf("[ring %s] threshold %g -> %g (sends took %.0f%% of the round)\n", r->o->self, old,
               r->threshold, busy * 100);
        event(r, "threshold", ", \"from\": %g, \"to\": %g, \"busy\": %.3f", old, r->threshold,
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

static void publish_rtts(ring *r) {
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

static void reorder(ring *r) {
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
    order_str(r, buf, sizeof(buf));
    printf("[ring %s] ring order by RTT (sum %.2f ms, was %.2f ms): %s\n", r->o->self, bestc, curc,
           buf);
    event(r, "order", ", \"ring\": \"%s\", \"rtt_sum_ms\": %.3f, \"was_ms\": %.3f", buf, bestc,
          curc);
}

static void progress(ring *r, const char *what) {
    long long now = agent_mono_ms();
    double el = (double)(now - r->start_ms) / 1e3;
    char buf[1024];
    order_str(r, buf, sizeof(buf));
    printf("[ring %s] %s%.1fs: ring %s, threshold %g, takes %" PRIu64 " acked %" PRIu64
           " forwarded %" PRIu64 " resent %" PRIu64 " repeats %" PRIu64 ", %" PRIu64
           " elements / %.2f MB sent\n",
           r->o->self, what, el, buf, r->threshold, r->st.takes, r->st.acks, r->st.forwarded,
           r->st.resends, r->st.dups, r->st.elems_sent, (double)r->st.bytes_sent / 1e6);
    for (int i = 0; i < r->ng; i++) {
        ringGroup *g = &r->g[i];
        if (i == r->self) continue;
        double db = (double)(g->bytes_to - g->bytes_to_last), ds = g->send_s - g->send_s_last;
        double bps = ds > 0 ? db / ds : 0;
        printf("[ring %s]   link -> %s: %s, rtt %.2f ms, %.2f MB sent, %.2f MB/s while sending\n",
               r->o->self, g->name, g->live ? "live" : "out", g->rtt_ms, db / 1e6, bps / 1e6);
        event(r, "link", ", \"to\": \"%s\", \"live\": %d, \"rtt_ms\": %.3f, \"bytes\": %.0f, "
                         "\"bytes_per_s\": %.0f",
              g->name, g->live, g->rtt_ms, db, bps);
        g->bytes_to_last = g->bytes_to;
        g->send_s_last = g->send_s;
    }
    event(r, "progress", ", \"takes\": %" PRIu64 ", \"acks\": %" PRIu64 ", \"forwarded\": %" PRIu64
                         ", \"resends\": %" PRIu64 ", \"bytes_sent\": %" PRIu64
                         ", \"threshold\": %g",
          r->st.takes, r->st.acks, r->st.forwarded, r->st.resends, r->st.bytes_sent, r->threshold);
    fflush(stdout);
}

int ring_run(const ringOpts *o) {
    static ring R;
    ring *r = &R;
    memset(r, 0, sizeof(*r));
    r->o = o;
    r->threshold = o->threshold;
    r->fault = getenv("PS_RING_FAULT");
    r->start_ms = r->last_progress_ms = agent_mono_ms();
    agent_catch_signals();
    int rc = 2;
    if (o->log_json && !(r->log = fopen(o->log_json, "a"))) {
        say(r, "--log-json %s: %s", o->log_json, strerror(errno));
        return 2;
    }
    if (parse_groups(r) != 0) goto out;
    if (ensure_conn(r, &r->g[r->self], agent_mono_ms()) != 0) {
        say(r, "this group's server %s does not answer", r->g[r->self].addr);
        rc = 1;
        goto out;
    }
    if (find_keys(r, r->g[r->self].c) != 0) goto out;
    if ((rc = setup(r)) != 0) goto out;
    rc = 1;
    /* Every group is in the ring until it has not answered for --dead-after-ms:
     * origins wait for a group whose agent starts late. */
    for (int i = 0; i < r->ng; i++) {
        r->g[i].live = 1;
        r->g[i].last_ok_ms = agent_mono_ms();
    }
    probe_all(r);
    char buf[1024];
    order_str(r, buf, sizeof(buf));
    printf("[ring %s] %s %d keys, %s %s, threshold %g%s, every %ld ms, a group out after %ld ms, "
           "max lag %lld pushes%s\n",
           o->self, o->barrier ? "barrier over" : "exchanging", r->nkeys,
           o->mesh ? "mesh of" : "ring", buf, o->barrier ? 0.0 : r->threshold,
           o->adapt ? " (adapted)" : "", o->every_ms, o->dead_ms, o->maxlag,
           o->maxlag ? "" : " (no bound)");
    event(r, "start", ", \"ring\": \"%s\", \"keys\": %d, \"threshold\": %g, \"barrier\": %d", buf,
          r->nkeys, r->threshold, o->barrier);
    fflush(stdout);
    long long barrier_end = agent_mono_ms() + o->barrier_timeout_ms;
    int quiet = 0;
    for (;;) {
        long long t0 = agent_mono_ms();
        r->round++;
        r->round_send_s = 0;
        probe_all(r);
        if (o->leave) {
            /* Leaving: done once this group has nothing pending or
             * accumulated (every group has all of its change). What its
             * forward queue still holds is dropped with the tracking: those
             * deltas' origins still wait for the groups that lack them and
             * send them straight there once this group is out. */
            const ringGroup *me = &r->g[r->self];
            int empty = me->c != NULL;
            for (int k = 0; k < r->nkeys && empty; k++) {
                psKeyInfo ki;
                if (psInfo(me->c, r->keys[k].name, &ki) != PS_OK || ki.ring_pending_seq ||
                    ki.ring_accumulated)
                    empty = 0;
            }
            if (empty && ++quiet >= 2) break;
            if (!empty) quiet = 0;
        }
        if (o->barrier && drained(r)) {
            /* Twice in a row: the first drained probe may predate a send of
             * this agent's own last round. */
            if (++quiet >= 2) break;
        } else if (o->barrier) {
            quiet = 0;
        }
        if ((o->barrier || o->leave) && t0 > barrier_end) {
            say(r, "%s: not drained after %ld ms", o->barrier ? "--barrier" : "--leave",
                o->barrier_timeout_ms);
            goto out;
        }
        if (AgentStop && !o->barrier && !o->leave) break;
        int work = 0;
        for (int i = 0; i < r->ng; i++) {
            if (!r->g[i].live || (!o->barrier && i != r->self)) continue;
            for (int k = 0; k < r->nkeys; k++) work |= act_key(r, i, k);
        }
        if (o->adapt && !o->barrier) adapt_threshold(r);
        if (o->reorder && r->round % 20 == 1) {
            publish_rtts(r);
            reorder(r);
        }
        long long now = agent_mono_ms();
        if (o->progress_ms > 0 && now - r->last_progress_ms >= o->progress_ms) {
            progress(r, "");
            r->last_progress_ms = now;
        }
        if (AgentStop && (o->barrier || o->leave)) {
            say(r, "%s interrupted", o->barrier ? "--barrier" : "--leave");
            goto out;
        }
        /* A round that acknowledged or forwarded something is followed at
         * once (a tenth of the period): its workers may be waiting on the lag
         * bound, and the next hop on this forward queue. */
        long long left = (work ? o->every_ms / 10 : o->every_ms) - (agent_mono_ms() - t0);
        if (left > 0 && !((o->barrier || o->leave) && quiet)) agent_sleep_ms(left);
    }
    progress(r, o->barrier ? "drained after " : "stopped after ");
    if (o->leave) {
        for (int k = 0; k < r->nkeys; k++)
            if (psRingUntrack(r->g[r->self].c, r->keys[k].name) == PS_ERR) {
                say(r, "PS.RING %s UNTRACK: %s", r->keys[k].name, r->g[r->self].c->errstr);
                goto out;
            }
        printf("[ring %s] left the ring: every change of this group delivered, tracking "
               "dropped\n", o->self);
        event(r, "left", "");
    }
    if (o->barrier) {
        int differ = compare_groups(r);
        printf("[ring %s] barrier done: every live group drained, %s\n", o->self,
               differ == 2   ? "VALUES DIFFER beyond the float bound"
               : differ == 1 ? "values equal within the float bound"
                             : "values bit-identical");
        event(r, "barrier_done", ", \"bit_identical\": %d, \"within_bound\": %d", !differ,
              differ < 2);
        if (differ == 2) {
            rc = 1;
            goto out;
        }
    }
    fflush(stdout);
    rc = 0;
out:
    for (int i = 0; i < r->ng; i++) {
        psClientFree(r->g[i].c);
        free(r->g[i].info);
    }
    for (int k = 0; k < r->nkeys; k++) free(r->keys[k].name);
    free(r->keys);
    if (r->log) fclose(r->log);
    return rc;
}
