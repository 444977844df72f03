/* stream_auc.c -- `ps-train stream` (stream.c): progressive validation.
 * Each event's score (before its push) goes to the worker's window (exact
 * AUC and logloss) and to a histogram added every progress interval to the
 * job's hash of the current 10 s slot; the global AUC of the last minute
 * sums the slots of all workers (docs/design.md "Stream consumption"). */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmds.h"
#include "conn.h"
#include "metrics.h"
#include "stream_work.h"
#include "tasks.h"
#include "util.h"
#include "wirefmt.h"

/* Adds pairs (field, count) to the hash KEYS[1] and keeps it SW_KEEP_S. */
#define SW_STR_(x) #x
#define SW_STR(x) SW_STR_(x)
static const char HistLua[] =
    "for i = 1, #ARGV, 2 do redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i+1]) end\n"
    "redis.call('EXPIRE', KEYS[1], " SW_STR(SW_KEEP_S) ")\n"
    "return 1\n";

int sw_hist_bucket(double p) {
    double z;
    if (!(p > 0.0)) return 0;
    if (!(p < 1.0)) return SW_BUCKETS - 1;
    z = log(p) - log1p(-p);
    int b = (int)floor((z + SW_LOGIT_MAX) * SW_BUCKETS / (2.0 * SW_LOGIT_MAX));
    return b < 0 ? 0 : b >= SW_BUCKETS ? SW_BUCKETS - 1 : b;
}

double sw_hist_auc(const long long *pos, const long long *neg, double *bound) {
    double P = 0, N = 0, below = 0, area = 0, ties = 0;
    for (int b = 0; b < SW_BUCKETS; b++) {
        P += (double)pos[b];
        N += (double)neg[b];
    }
    if (bound) *bound = NAN;
    if (P == 0 || N == 0) return NAN;
    for (int b = 0; b < SW_BUCKETS; b++) {
        area += (double)pos[b] * (below + (double)neg[b] / 2.0);
        ties += (double)pos[b] * (double)neg[b];
        below += (double)neg[b];
    }
    if (bound) *bound = ties / (2.0 * P * N);
    return area / (P * N);
}

/* The stream's cluster slot: a prefix whose keys hash like 'stream'. 0, or
 * -1 when the name's braces make no hash tag and cannot be wrapped in one. */
int sw_slot_prefix(const char *stream, char *out, size_t len) {
    const char *l = strchr(stream, '{');
    const char *r = l ? strchr(l + 1, '}') : NULL;
    if (l && r && r > l + 1) {
        snprintf(out, len, "%.*s:", (int)(r - stream + 1), stream);
        return 0;
    }
    if (strchr(stream, '}')) return -1;
    snprintf(out, len, "{%s}:", stream);
    return 0;
}

/* ---------------------------------------------------------------------- */

void sw_record_scores(struct streamWork *w, const swBatch *x) {
    int n = x->b.n, N = w->o->auc_window;
    for (int i = 0; i < n; i++) {
        double p = w->m.p[i];
        int y = x->b.label[i] > 0.5f;
        double q = p < 1e-7 ? 1e-7 : p > 1 - 1e-7 ? 1 - 1e-7 : p;
        double l = y ? -log(q) : -log(1 - q);
        long long k = w->wn % N;
        if (w->wn >= N) w->wloss -= w->wl[k];
        w->wp[k] = p;
        w->wy[k] = (unsigned char)y;
        w->wl[k] = l;
        w->wloss += l;
        w->wn++;
        int b = sw_hist_bucket(p);
        if (y)
            w->hpos[b]++;
        else
            w->hneg[b]++;
        w->hdirty = 1;
    }
}

/* Adds the histogram counted since the last flush to this 10 s slot's hash. */
int sw_flush_hist(struct streamWork *w) {
    if (!w->hdirty) return 0;
    char key[256];
    long long slot = (long long)(tr_wall() / SW_SLOT_S);
    snprintf(key, sizeof(key), "%s%lld", w->sauc_pre, slot);
    int n = 0;
    for (int b = 0; b < SW_BUCKETS; b++) n += (w->hpos[b] != 0) + (w->hneg[b] != 0);
    const char **argv = malloc((size_t)(4 + 2 * n) * sizeof(char *));
    char(*num)[24] = malloc((size_t)(2 * n + 1) * 24);
    if (argv == NULL || num == NULL) {
        free(argv);
        free(num);
        return -1;
    }
    int a = 0, k = 0;
    argv[a++] = "EVAL";
    argv[a++] = HistLua;
    argv[a++] = "1";
    argv[a++] = key;
    for (int b = 0; b < SW_BUCKETS; b++) {
        for (int y = 1; y >= 0; y--) {
            long long v = y ? w->hpos[b] : w->hneg[b];
            if (!v) continue;
            snprintf(num[k], 24, "%c%d", y ? 'p' : 'n', b);
            argv[a++] = num[k++];
            snprintf(num[k], 24, "%lld", v);
            argv[a++] = num[k++];
        }
    }
    redisReply *r = psCommandArgv(w->own.c, key, a, argv, NULL);
    int rc = r && r->type != REDIS_REPLY_ERROR ? 0 : -1;
    char why[300];
    if (rc)
        fprintf(stderr, "[%s] AUC histogram %s: %s%s\n", w->me, key, r ? r->str : w->own.c->errstr,
                sw_refused(HistLua, r ? r->str : NULL, why, sizeof(why)));
    if (r) freeReplyObject(r);
    free(argv);
    free(num);
    memset(w->hpos, 0, SW_BUCKETS * sizeof(long long));
    memset(w->hneg, 0, SW_BUCKETS * sizeof(long long));
    w->hdirty = 0;
    return rc;
}

double sw_global_auc(psClient *c, const char *job, int seconds, double *bound, long long *events) {
    char pre[160], key[200];
    long long *pos = calloc(SW_BUCKETS, sizeof(long long));
    long long *neg = calloc(SW_BUCKETS, sizeof(long long));
    double auc = NAN;
    if (bound) *bound = NAN;
    if (events) *events = 0;
    if (pos == NULL || neg == NULL) goto done;
    tr_key(pre, sizeof(pre), job, "sauc:");
    long long now = (long long)(tr_wall() / SW_SLOT_S);
    for (long long s = now - (seconds + SW_SLOT_S - 1) / SW_SLOT_S + 1; s <= now; s++) {
        snprintf(key, sizeof(key), "%s%lld", pre, s);
        redisReply *r = psCommand(c, key, "HGETALL %s", key);
        for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2) {
            const char *f = r->element[i]->str;
            int b = atoi(f + 1);
            long long v = atoll(r->element[i + 1]->str);
            if (b < 0 || b >= SW_BUCKETS) continue;
            if (f[0] == 'p') pos[b] += v;
            if (f[0] == 'n') neg[b] += v;
            if (events) *events += v;
        }
        if (r) freeReplyObject(r);
    }
    auc = sw_hist_auc(pos, neg, bound);
done:
    free(pos);
    free(neg);
    return auc;
}

void tr_stream_status(const trainOpts *o, psClient *c) {
    char key[160];
    snprintf(key, sizeof(key), "%s:stream_events:0", o->job);
    float v[2];
    if (psTensorPull(c, key, NULL, v, 2, NULL) == PS_OK) {
        double bound;
        long long n;
        double auc = sw_global_auc(c, o->job, SW_AUC_S, &bound, &n);
        printf("stream: events trained %.0f, malformed entries %.0f (exactly once: tensor %s); "
               "global progressive AUC %.4f (+-%.4f) over the last 60 s (%lld events)\n",
               (double)v[0], (double)v[1], key, auc, bound, n);
    }
}

void sw_progress(struct streamWork *w, int final) {
    double now = tr_now();
    if (!final && now - w->last_print < w->o->interval_ms / 1000.0) return;
    sw_flush_hist(w);
    long long n = w->wn < w->o->auc_window ? w->wn : w->o->auc_window;
    double auc = n ? ps_auc(w->wp, w->wy, (size_t)n) : NAN;
    double ll = n ? w->wloss / (double)n : NAN;
    double bound, gauc = sw_global_auc(w->own.c, w->o->job, SW_AUC_S, &bound, NULL);
    double dt = now - w->last_print, rate = dt > 0 ? (w->trained - w->last_trained) / dt : 0;
    double el = now - w->t0;
    if (!w->quiet || final) {
        printf("%s[%s] %.1fs events %lld (%.0f/s) batches %lld malformed %lld claimed %lld "
               "replayed %lld fenced %lld auc %.4f logloss %.4f (last %lld) global_auc %.4f "
               "(+-%.4f, last 60 s)%s",
               w->tty && !final ? "\r" : "", w->me, el, w->trained, rate, w->batches,
               w->malformed, w->claimed, w->replayed, w->fenced, auc, ll, n, gauc, bound,
               w->tty && !final ? "" : "\n");
        fflush(stdout);
    }
    RUNLOG(w->log, final ? "stream_done" : "progress", RL_STR("worker", w->me),
           RL_INT("samples", w->trained), RL_INT("batches", w->batches),
           RL_INT("malformed", w->malformed), RL_INT("claimed", w->claimed),
           RL_INT("replayed", w->replayed), RL_INT("fenced", w->fenced), RL_NUM("auc", auc),
           RL_NUM("loss", ll), RL_INT("window", n), RL_NUM("global_auc", gauc),
           RL_NUM("global_auc_bound", bound), RL_NUM("events_per_s", rate),
           RL_NUM("elapsed_s", el));
    w->last_print = now;
    w->last_trained = w->trained;
}
