/* ring_load.c -- ps-relay --ring (ring.h): each group's load, and the
 * least-loaded group a new worker should join (issue 22: "a worker can be
 * told to join the least-loaded group").
 *
 * A group's load is read from its server (the node a keyless command
 * reaches: a cluster group's first seed) with one INFO and one CLIENT LIST,
 * pipelined (one round trip, a few KB):
 *   pushes/s  PS.PUSHGRAD calls that succeeded (commandstats: calls minus
 *             failed_calls and rejected_calls) over the window, per second
 *   workers   connections whose last command was PS.PUSHGRAD or PS.PULL, at
 *             most 2 s + the window ago (a ps-train worker or a tree relay; the
 *             ring agents' last commands are PS.INFO, PS.APPLYDELTA, ...)
 *   cpu       the server's used_cpu_user + used_cpu_sys over the window, in %
 * The least loaded live group: fewest pushes/s; two groups within 10% (or
 * 2/s) of each other count as equal and the one with fewer workers wins,
 * then the lower CPU, then the earlier one in --ring.
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

/* One reading of group g's counters (INFO and CLIENT LIST pipelined: one
 * round trip): 0, or -1 when it does not answer. */
static int read_counters(ring *r, ringGroup *g, double *pushes, double *cpu_s, long *workers,
                         long *clients) {
    if (ring_ensure_conn(r, g, agent_mono_ms()) != 0) return -1;
    static const char *info[] = {"INFO", "cpu", "clients", "commandstats"};
    static const char *list[] = {"CLIENT", "LIST"};
    const char **const argvs[2] = {info, list};
    const size_t *const lens[2] = {NULL, NULL};
    const char *const keys[2] = {NULL, NULL};
    const int argcs[2] = {4, 2};
    redisReply *rep[2] = {NULL, NULL};
    psCommandBatchArgv(g->c, 2, keys, argcs, argvs, lens, rep);
    int rc = -1;
    if (!rep[0] || !rep[1]) {
        ring_conn_failed(g);
        goto out;
    }
    if (rep[0]->type != REDIS_REPLY_STRING) goto out; /* INFO refused: no load */
    *cpu_s = info_field(rep[0]->str, "used_cpu_user") + info_field(rep[0]->str, "used_cpu_sys");
    *clients = (long)info_field(rep[0]->str, "connected_clients");
    const char *ps = strstr(rep[0]->str, "cmdstat_ps.pushgrad:");
    *pushes = ps ? stat_field(ps, "calls") - stat_field(ps, "failed_calls") -
                       stat_field(ps, "rejected_calls")
                 : 0;
    rc = 0;
    *workers = -1; /* unknown: CLIENT LIST refused (an ACL without +client|list) */
    if (rep[1]->type != REDIS_REPLY_STRING) goto out;
    /* a worker: its last command a push or pull, at most 2 s (and the window) ago */
    long recent = 2 + r->o->load_ms / 1000;
    *workers = 0;
    for (const char *line = rep[1]->str; line && *line;) {
        const char *e = strchr(line, '\n'), *cmd = strstr(line, " cmd="),
                   *idle = strstr(line, " idle=");
        line = e ? e + 1 : NULL;
        if (!cmd || !idle || (e && (cmd > e || idle > e))) continue;
        if ((!strncmp(cmd + 5, "ps.pushgrad ", 12) || !strncmp(cmd + 5, "ps.pull ", 8)) &&
            strtol(idle + 6, NULL, 10) <= recent)
            (*workers)++;
    }
out:
    for (int i = 0; i < 2; i++)
        if (rep[i]) freeReplyObject(rep[i]);
    return rc;
}

/* Samples group g; the rates are over the time since its previous sample. */
static void sample(ring *r, ringGroup *g) {
    double pushes, cpu_s, t = ps_mono_s();
    long workers, clients;
    if (read_counters(r, g, &pushes, &cpu_s, &workers, &clients) != 0) {
        g->load.ok = 0;
        g->load.t = 0;
        return;
    }
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

/* a is less loaded than b (the rule at the top of this file). */
static int less_loaded(const ringLoad *a, const ringLoad *b) {
    double d = fabs(a->pushes_s - b->pushes_s);
    if (d > fmax(2.0, 0.1 * fmax(a->pushes_s, b->pushes_s))) return a->pushes_s < b->pushes_s;
    if (a->workers != b->workers) return a->workers < b->workers;
    return a->cpu_pct < b->cpu_pct;
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

static void say_load(ring *r, const ringGroup *g, FILE *out, const char *prefix) {
    if (!g->load.ok) {
        fprintf(out, "%s%s: no load measured (no answer to INFO)\n", prefix, g->name);
        return;
    }
    fprintf(out, "%s%s: %.1f pushes/s, %ld workers, cpu %.1f%%, %ld clients\n", prefix, g->name,
           g->load.pushes_s, g->load.workers, g->load.cpu_pct, g->load.clients);
    ring_event(r, "load", ", \"of\": \"%s\", \"pushes_per_s\": %.2f, \"workers\": %ld, "
                         "\"cpu_pct\": %.2f, \"clients\": %ld",
               g->name, g->load.pushes_s, g->load.workers, g->load.cpu_pct, g->load.clients);
}

void ring_load_update(ring *r) {
    long long now = agent_mono_ms();
    if (r->last_load_ms && now - r->last_load_ms < r->o->load_ms) return;
    r->last_load_ms = now;
    for (int i = 0; i < r->ng; i++) {
        ringGroup *g = &r->g[i];
        if (g->c) {
            sample(r, g);
        } else { /* its connection failed: no command that could wait for a timeout
                  * (the probes reconnect it) */
            g->load.ok = 0;
            g->load.t = 0;
        }
    }
    int best = least_loaded(r, 1);
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
    for (int i = 0; i < r->ng; i++) say_load(r, &r->g[i], stdout, prefix);
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
    for (int i = 0; i < r->ng; i++) sample(r, &r->g[i]);
    agent_sleep_ms(o->load_ms);
    for (int i = 0; i < r->ng; i++) sample(r, &r->g[i]);
    /* the table on stderr, the answer alone on stdout */
    for (int i = 0; i < r->ng; i++) say_load(r, &r->g[i], stderr, "ps-relay pick: ");
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
