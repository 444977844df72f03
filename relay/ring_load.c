/* ring_load.c -- ps-relay --ring (ring.h): each group's load, and the
 * least-loaded group a new worker should join (issue 22: "a worker can be
 * told to join the least-loaded group").
 *
 * A group's load is read from its server with one INFO and one CLIENT LIST,
 * pipelined (one round trip, a few KB; every group's at once, so a sample
 * costs the slowest link's round trip); a group that is a Redis Cluster is
 * read on every master (its masters from CLUSTER SLOTS, each reached through
 * a routing key that CLUSTER KEYSLOT places in one of its slots; both
 * commands pipelined to all masters, still one round trip) and summed:
 *   pushes/s  PS.PUSHGRAD calls that succeeded (commandstats: calls minus
 *             failed_calls and rejected_calls) over the window, per second;
 *             a cluster group: the sum over its masters
 *   workers   connections whose last command was PS.PUSHGRAD or PS.PULL, at
 *             most 2 s + the window ago (a ps-train worker or a tree relay; the
 *             ring agents' last commands are PS.INFO, PS.APPLYDELTA, ...); a
 *             cluster group: the most any one master counts (a worker holds a
 *             connection to every master of its model's partitions, so a sum
 *             would count it once per master)
 *   cpu       the server's used_cpu_user + used_cpu_sys over the window, in %;
 *             a cluster group: the sum over its masters (may pass 100)
 *   clients   connected_clients (a cluster group: the sum)
 * A cluster group's masters are read again every RELOAD_SAMPLES samples and
 * after a failed read; a window in which they changed gives no rate.
 * The least loaded live group: fewest pushes/s; two groups within 10% (or
 * 2/s) of each other count as equal and the one with fewer workers wins,
 * then the lower CPU (by more than 5 points or 20%), then the earlier one in
 * --ring; the agent keeps the least-loaded group it printed last until
 * another one is less loaded than it by this rule (no flapping on noise).
 *
 * The agent samples every group every --load-ms (it already holds a
 * connection to each), prints the loads on its progress lines, logs them
 * (`load` events) and prints a change of the least-loaded group
 * (`least_loaded`). `--pick` samples every group twice, --load-ms apart, and
 * prints the least-loaded group's address on stdout, for a launcher:
 *   ps-train work --addr "$(ps-relay --ring a=A:6379,b=B:6379 --pick)" ... */

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <redis-ps/ps.h>

#include "agent.h"
#include "clock.h"
#include "ring_int.h"

/* The value of "name:" in an INFO text (a line start), or -1. */
static double info_field(const char *s, const char *name) {
    size_t l = strlen(name);
    for (const char *p = s; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (!strncmp(p, name, l) && p[l] == ':') return strtod(p + l + 1, NULL);
    return -1;
}

/* "k=<n>" inside the commandstats line starting at 'line' (up to its end). */
static double stat_field(const char *line, const char *k) {
    const char *e = strchr(line, '\n');
    size_t l = strlen(k);
    for (const char *p = strchr(line, ':'); p && (!e || p < e); p = strchr(p, ',')) {
        p++; /* past the ':' or ',' */
        if (!strncmp(p, k, l) && p[l] == '=') return strtod(p + l + 1, NULL);
    }
    return 0;
}

#define LOAD_MAX_MASTERS 64 /* masters of one cluster group read (more: the first ones) */
#define RELOAD_SAMPLES 30   /* samples between two reads of a cluster group's masters */
#define TAG_BATCH 256       /* CLUSTER KEYSLOT candidates per round trip */
#define TAG_BATCHES 16      /* at most 4096 candidates: a master with >= 1/256 of the slots
                             * is missed with odds below 1e-6 */

/* A cluster group's masters, each with a key routed to it (ring_load.c only). */
typedef struct loadMaster {
    char addr[80]; /* host:port as CLUSTER SLOTS names it */
    char key[32];  /* a key hashing into one of its slots ("": none found) */
} loadMaster;
typedef struct loadNodes {
    int n;       /* masters read (0: standalone, or to be read) */
    int samples; /* samples since they were read */
    loadMaster m[LOAD_MAX_MASTERS];
} loadNodes;
static loadNodes Nodes[RING_MAX_GROUPS];
/* Why group i has no load (shown with "no load measured"). */
static char Why[RING_MAX_GROUPS][300];

/* The master (index into ms) serving 'slot' per CLUSTER SLOTS reply s, or -1. */
static int slot_master(const redisReply *s, const loadMaster *ms, int n, long long slot) {
    for (size_t i = 0; i < s->elements; i++) {
        const redisReply *e = s->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 || slot < e->element[0]->integer ||
            slot > e->element[1]->integer)
            continue;
        const redisReply *m = e->element[2];
        if (m->type != REDIS_REPLY_ARRAY || m->elements < 2) return -1;
        char addr[80];
        snprintf(addr, sizeof(addr), "%s:%lld", m->element[0]->str, m->element[1]->integer);
        for (int j = 0; j < n; j++)
            if (!strcmp(ms[j].addr, addr)) return j;
        return -1;
    }
    return -1;
}

/* Reads cluster group gi's masters (CLUSTER SLOTS) and a routing key for each
 * (CLUSTER KEYSLOT of candidates "ps-load:<n>", TAG_BATCH per round trip).
 * 1 when they differ from the last reading, 0 when not, -1 on failure. */
static int read_masters(ring *r, int gi) {
    ringGroup *g = &r->g[gi];
    loadNodes *ln = &Nodes[gi];
    static loadNodes nw;
    memset(&nw, 0, sizeof(nw));
    redisReply *s = psCommand(g->c, NULL, "CLUSTER SLOTS");
    if (!s || s->type != REDIS_REPLY_ARRAY) {
        snprintf(Why[gi], sizeof(Why[gi]), "CLUSTER SLOTS: %.250s",
                 s && s->type == REDIS_REPLY_ERROR ? s->str : g->c->errstr);
        if (!s) ring_conn_failed(g);
        if (s) freeReplyObject(s);
        return -1;
    }
    for (size_t i = 0; i < s->elements && nw.n < LOAD_MAX_MASTERS; i++) {
        const redisReply *e = s->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3) continue;
        const redisReply *m = e->element[2];
        if (m->type != REDIS_REPLY_ARRAY || m->elements < 2 || m->element[0]->type != REDIS_REPLY_STRING)
            continue;
        char addr[80];
        snprintf(addr, sizeof(addr), "%s:%lld", m->element[0]->str, m->element[1]->integer);
        int j = 0;
        while (j < nw.n && strcmp(nw.m[j].addr, addr)) j++;
        if (j == nw.n) snprintf(nw.m[nw.n++].addr, sizeof(nw.m[0].addr), "%s", addr);
    }
    int found = 0, rc = -1;
    char cand[TAG_BATCH][32];
    const char *argv[TAG_BATCH][3];
    const char **argvs[TAG_BATCH];
    const char *keys[TAG_BATCH];
    int argcs[TAG_BATCH];
    const size_t *lens[TAG_BATCH];
    redisReply *rep[TAG_BATCH];
    for (int b = 0; b < TAG_BATCHES && found < nw.n; b++) {
        for (int i = 0; i < TAG_BATCH; i++) {
            snprintf(cand[i], sizeof(cand[i]), "ps-load:%d", b * TAG_BATCH + i);
            argv[i][0] = "CLUSTER", argv[i][1] = "KEYSLOT", argv[i][2] = cand[i];
            argvs[i] = argv[i], keys[i] = NULL, argcs[i] = 3, lens[i] = NULL, rep[i] = NULL;
        }
        psCommandBatchArgv(g->c, TAG_BATCH, keys, argcs, (const char **const *)argvs, lens, rep);
        for (int i = 0; i < TAG_BATCH; i++) {
            if (!rep[i] || rep[i]->type != REDIS_REPLY_INTEGER) {
                if (found >= 0)
                    snprintf(Why[gi], sizeof(Why[gi]), "CLUSTER KEYSLOT: %.250s",
                             rep[i] && rep[i]->type == REDIS_REPLY_ERROR ? rep[i]->str
                                                                         : g->c->errstr);
                if (!rep[i]) ring_conn_failed(g);
                found = -1;
            } else if (found >= 0) {
                int j = slot_master(s, nw.m, nw.n, rep[i]->integer);
                if (j >= 0 && !nw.m[j].key[0]) {
                    snprintf(nw.m[j].key, sizeof(nw.m[j].key), "%.31s", cand[i]);
                    found++;
                }
            }
            if (rep[i]) freeReplyObject(rep[i]);
        }
        if (found < 0) goto out;
    }
    if (found < nw.n) { /* a master with no key found is left out (printed) */
        int k = 0;
        for (int j = 0; j < nw.n; j++)
            if (nw.m[j].key[0]) nw.m[k++] = nw.m[j];
            else
                ring_say(r, "group %s: no routing key found for master %s: its load is not counted",
                         g->name, nw.m[j].addr);
        nw.n = k;
    }
    if (nw.n == 0) {
        snprintf(Why[gi], sizeof(Why[gi]), "CLUSTER SLOTS names no master");
        goto out;
    }
    rc = ln->n != nw.n;
    for (int j = 0; !rc && j < nw.n; j++) rc = strcmp(ln->m[j].addr, nw.m[j].addr) != 0;
    *ln = nw;
out:
    freeReplyObject(s);
    return rc;
}

/* Worker connections in a CLIENT LIST text: the last command a push or pull,
 * at most 'recent' s ago. */
static long count_workers(const char *list, long recent) {
    long n = 0;
    for (const char *line = list; line && *line;) {
        const char *e = strchr(line, '\n'), *cmd = strstr(line, " cmd="),
                   *idle = strstr(line, " idle=");
        line = e ? e + 1 : NULL;
        if (!cmd || !idle || (e && (cmd > e || idle > e))) continue;
        if ((!strncmp(cmd + 5, "ps.pushgrad ", 12) || !strncmp(cmd + 5, "ps.pull ", 8)) &&
            strtol(idle + 6, NULL, 10) <= recent)
            n++;
    }
    return n;
}

/* One reading of a group's counters, in two halves so that every group's
 * commands are in flight at once (a sample of all groups costs the slowest
 * link's round trip, not the sum of them): send_counters sends INFO and
 * CLIENT LIST to its server, or to every master of a cluster group;
 * recv_counters reads the replies and sums them as the top of this file says. */
typedef struct loadReading {
    int nn;      /* nodes asked (0: nothing sent) */
    int changed; /* the masters changed since the last reading: no rate this window */
    psAsync *q[2 * LOAD_MAX_MASTERS];
} loadReading;
static loadReading Reading[RING_MAX_GROUPS];

/* 0 sent, -1 not (Why[gi] says why). */
static int send_counters(ring *r, int gi) {
    ringGroup *g = &r->g[gi];
    loadNodes *ln = &Nodes[gi];
    loadReading *rd = &Reading[gi];
    static const char *info[] = {"INFO", "cpu", "clients", "commandstats"};
    static const char *list[] = {"CLIENT", "LIST"};
    Why[gi][0] = '\0';
    rd->nn = rd->changed = 0;
    if (ring_ensure_conn(r, g, agent_mono_ms()) != 0) {
        snprintf(Why[gi], sizeof(Why[gi]), "no connection");
        return -1;
    }
    int nn = 1;
    if (g->c->cluster) {
        if (ln->n == 0 || ++ln->samples >= RELOAD_SAMPLES) {
            ln->samples = 0;
            if ((rd->changed = read_masters(r, gi)) < 0) {
                ln->n = 0;
                rd->changed = 0;
                return -1;
            }
        }
        nn = ln->n;
    } else {
        ln->n = 0;
    }
    for (int j = 0; j < nn; j++) {
        const char *key = g->c->cluster ? ln->m[j].key : NULL;
        rd->q[2 * j] = psCommandArgvAsync(g->c, key, 4, info, NULL);
        rd->q[2 * j + 1] = psCommandArgvAsync(g->c, key, 2, list, NULL);
    }
    rd->nn = nn;
    return 0;
}

/* The replies of send_counters: 0, 1 when the masters changed (no rate over
 * this window), -1 when it does not answer (Why[gi] says why). */
static int recv_counters(ring *r, int gi, double *pushes, double *cpu_s, long *workers,
                         long *clients) {
    ringGroup *g = &r->g[gi];
    loadNodes *ln = &Nodes[gi];
    loadReading *rd = &Reading[gi];
    int nn = rd->nn, rc = rd->changed;
    redisReply *rep[2 * LOAD_MAX_MASTERS];
    if (nn == 0) return -1;
    for (int i = 0; i < 2 * nn; i++) rep[i] = rd->q[i] ? psCommandWait(g->c, rd->q[i]) : NULL;
    rd->nn = 0;
    /* a worker: its last command a push or pull, at most 2 s (and the window) ago */
    long recent = 2 + r->o->load_ms / 1000;
    *pushes = *cpu_s = 0;
    *clients = 0;
    *workers = 0;
    for (int j = 0; j < nn && rc >= 0; j++) {
        const redisReply *in = rep[2 * j], *cl = rep[2 * j + 1];
        const char *node = g->c->cluster ? ln->m[j].addr : g->addr;
        if (!in || !cl) {
            snprintf(Why[gi], sizeof(Why[gi]), "%.80s: %.200s", node, g->c->errstr);
            ln->n = 0; /* read the masters again */
            rc = -2;
            break;
        }
        if (in->type != REDIS_REPLY_STRING) { /* INFO refused: no load */
            snprintf(Why[gi], sizeof(Why[gi]), "INFO on %.80s: %.200s", node,
                     in->type == REDIS_REPLY_ERROR ? in->str : "not a text");
            rc = -1;
            break;
        }
        *cpu_s += info_field(in->str, "used_cpu_user") + info_field(in->str, "used_cpu_sys");
        *clients += (long)info_field(in->str, "connected_clients");
        const char *ps = strstr(in->str, "cmdstat_ps.pushgrad:");
        if (ps)
            *pushes += stat_field(ps, "calls") - stat_field(ps, "failed_calls") -
                       stat_field(ps, "rejected_calls");
        /* unknown (-1): CLIENT LIST refused (an ACL without +client|list) */
        long w = cl->type == REDIS_REPLY_STRING ? count_workers(cl->str, recent) : -1;
        if (j == 0 || (*workers >= 0 && (w < 0 || w > *workers))) *workers = w;
    }
    for (int i = 0; i < 2 * nn; i++)
        if (rep[i]) freeReplyObject(rep[i]);
    if (rc == -2) { /* after the replies are freed: the connection goes */
        ring_conn_failed(g);
        rc = -1;
    }
    return rc;
}

/* Group gi's rates over the time since its previous reading (recv_counters). */
static void sample_recv(ring *r, int gi) {
    ringGroup *g = &r->g[gi];
    double pushes, cpu_s, t = ps_mono_s();
    long workers, clients;
    int rc = recv_counters(r, gi, &pushes, &cpu_s, &workers, &clients);
    if (rc < 0) {
        g->load.ok = 0;
        g->load.t = 0;
        return;
    }
    if (rc == 1) g->load.t = 0; /* other masters: the counters do not continue */
    if (g->load.t > 0 && t > g->load.t) {
        double dt = t - g->load.t;
        /* a restarted server's counters start at 0 again: no rate this window */
        g->load.pushes_s = pushes >= g->load.pushes ? (pushes - g->load.pushes) / dt : 0;
        g->load.cpu_pct = cpu_s >= g->load.cpu_s ? (cpu_s - g->load.cpu_s) / dt * 100 : 0;
        g->load.ok = 1;
    }
    g->load.pushes = pushes;
    g->load.cpu_s = cpu_s;
    g->load.workers = workers;
    g->load.clients = clients;
    g->load.t = t;
}

/* Samples every group with 'use[i]' set, all in flight at once; the others
 * have no load this window. */
static void sample_all(ring *r, const int *use) {
    for (int i = 0; i < r->ng; i++)
        if (!use[i] || send_counters(r, i) != 0) {
            r->g[i].load.ok = 0;
            r->g[i].load.t = 0;
            if (!use[i]) snprintf(Why[i], sizeof(Why[i]), "no connection");
        }
    for (int i = 0; i < r->ng; i++)
        if (Reading[i].nn) sample_recv(r, i);
}

/* a is less loaded than b (the rule at the top of this file); CPU within 5
 * points (or 20%) counts as equal: idle servers' CPU is noise, and a noise
 * difference would move the least-loaded group back and forth. */
static int less_loaded(const ringLoad *a, const ringLoad *b) {
    double d = fabs(a->pushes_s - b->pushes_s);
    if (d > fmax(2.0, 0.1 * fmax(a->pushes_s, b->pushes_s))) return a->pushes_s < b->pushes_s;
    if (a->workers != b->workers) return a->workers < b->workers;
    d = fabs(a->cpu_pct - b->cpu_pct);
    return d > fmax(5.0, 0.2 * fmax(a->cpu_pct, b->cpu_pct)) && a->cpu_pct < b->cpu_pct;
}

/* The least-loaded group with a measured load (live ones only when 'live'), or -1. */
static int least_loaded(const ring *r, int live) {
    int best = -1;
    for (int i = 0; i < r->ng; i++) {
        const ringGroup *g = &r->g[r->order[i]];
        if (!g->load.ok || (live && !g->live)) continue;
        if (best < 0 || less_loaded(&g->load, &r->g[best].load)) best = r->order[i];
    }
    return best;
}

static void say_load(ring *r, int gi, FILE *out, const char *prefix) {
    const ringGroup *g = &r->g[gi];
    if (!g->load.ok) {
        fprintf(out, "%s%s: no load measured (%s)\n", prefix, g->name,
                Why[gi][0] ? Why[gi] : "no answer to INFO yet");
        return;
    }
    char masters[32] = "";
    if (Nodes[gi].n) snprintf(masters, sizeof(masters), ", %d masters", Nodes[gi].n);
    fprintf(out, "%s%s: %.1f pushes/s, %ld workers, cpu %.1f%%, %ld clients%s\n", prefix, g->name,
           g->load.pushes_s, g->load.workers, g->load.cpu_pct, g->load.clients, masters);
    ring_event(r, "load", ", \"of\": \"%s\", \"pushes_per_s\": %.2f, \"workers\": %ld, "
                         "\"cpu_pct\": %.2f, \"clients\": %ld",
               g->name, g->load.pushes_s, g->load.workers, g->load.cpu_pct, g->load.clients);
}

void ring_load_update(ring *r) {
    long long now = agent_mono_ms();
    if (r->last_load_ms && now - r->last_load_ms < r->o->load_ms) return;
    r->last_load_ms = now;
    /* a group whose connection failed: no command that could wait for a
     * timeout (the probes reconnect it) */
    int use[RING_MAX_GROUPS];
    for (int i = 0; i < r->ng; i++) use[i] = r->g[i].c != NULL;
    sample_all(r, use);
    int best = least_loaded(r, 1);
    /* the one printed last stays while no live group is less loaded than it */
    if (best >= 0 && r->least >= 0 && r->g[r->least].live && r->g[r->least].load.ok &&
        !less_loaded(&r->g[best].load, &r->g[r->least].load))
        best = r->least;
    if (best >= 0 && best != r->least) {
        const ringGroup *g = &r->g[best];
        printf("[ring %s] least-loaded group: %s (%s): %.1f pushes/s, %ld workers, cpu %.1f%%\n",
               r->o->self, g->name, g->addr, g->load.pushes_s, g->load.workers, g->load.cpu_pct);
        ring_event(r, "least_loaded", ", \"least\": \"%s\", \"addr\": \"%s\"", g->name, g->addr);
        r->least = best;
        fflush(stdout);
    }
}

void ring_load_print(ring *r) {
    char prefix[PS_RING_ORIGIN_MAX + 32];
    snprintf(prefix, sizeof(prefix), "[ring %s]   load ", r->o->self);
    for (int i = 0; i < r->ng; i++) say_load(r, i, stdout, prefix);
}

int ring_pick(const ringOpts *o) {
    static ring R;
    ring *r = &R;
    memset(r, 0, sizeof(*r));
    r->o = o;
    r->least = -1;
    if (o->log_json && !(r->log = fopen(o->log_json, "a"))) {
        ring_say(r, "--log-json %s: cannot open", o->log_json);
        return 2;
    }
    int rc = 2;
    if (ring_parse_groups(r) != 0) goto out;
    for (int i = 0; i < r->ng; i++) r->g[i].live = 1;
    int use[RING_MAX_GROUPS];
    for (int i = 0; i < r->ng; i++) use[i] = 1;
    sample_all(r, use);
    agent_sleep_ms(o->load_ms);
    sample_all(r, use);
    /* the table on stderr, the answer alone on stdout */
    for (int i = 0; i < r->ng; i++) say_load(r, i, stderr, "ps-relay pick: ");
    int best = least_loaded(r, 0);
    rc = 1;
    if (best < 0) {
        ring_say(r, "--pick: no group answered");
        goto out;
    }
    fprintf(stderr, "ps-relay pick: least loaded: %s\n", r->g[best].name);
    ring_event(r, "pick", ", \"least\": \"%s\", \"addr\": \"%s\"", r->g[best].name,
               r->g[best].addr);
    printf("%s\n", r->g[best].addr);
    fflush(stdout);
    rc = 0;
out:
    for (int i = 0; i < r->ng; i++) psClientFree(r->g[i].c);
    if (r->log) fclose(r->log);
    return rc;
}
