/* train_work.c -- ps-train work: one worker process.
 *
 * Loop: take a task (first its own pending ones, XREADGROUP id 0, left by a
 * run under the same --name that was stopped; then new ones, ">"; when no
 * task is new, XAUTOCLAIM one idle past --lease-ms: its worker died), train
 * on its shard (per mini-batch: pull the model, compute the mean gradient,
 * push it with the versions of the pull), then record it and XACK it. Only
 * a worker that still owns the task records it, with idempotent writes (see
 * ack_task), so every task is counted once even when a slow worker and a
 * claimer both finish it, or a reply is lost and the command resent. While
 * a task runs its lease is renewed (XCLAIM ... JUSTID by its owner) every
 * third of the lease; a worker that finds its task owned by another
 * abandons it. The worker exits when nothing is new, nothing is claimable
 * and nothing is pending in the group, or after SIGINT/SIGTERM (exit 130).
 *
 * PS_TRAIN_TRACE=FILE (tests) writes a line per pull and per push with a
 * digest of the parameters the gradient read and the versions sent. */

#include <cblas.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "train_job.h"

/* Set by SIGINT/SIGTERM: the worker stops after the step it is in, drains
 * its pushes and exits TR_EXIT_INTERRUPTED, leaving its task pending. A
 * second signal a second or more after the first kills it at once (one
 * Ctrl-C under run arrives twice: from the terminal and forwarded by run). */
static volatile sig_atomic_t Stop;
static volatile sig_atomic_t StopAt; /* CLOCK_MONOTONIC seconds of the first */

static void on_stop(int sig) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    if (Stop && ts.tv_sec > StopAt + 1) {
        signal(sig, SIG_DFL);
        raise(sig);
    }
    if (!Stop) {
        StopAt = (sig_atomic_t)ts.tv_sec;
        Stop = sig;
    }
}

typedef struct task {
    char id[64];
    int epoch;
    long long start, count;
} task;

typedef struct worker {
    const trainOpts *o;
    psClient *c;
    psModel *m;
    jobConfig cfg;
    ps_dataset ds;
    ps_mlp mlp;
    float **params, **grads; /* params: the front buffer, mlp.W/mlp.b */
    float **back;           /* per tensor: the buffer an overlapped pull fills */
    FILE *trace;            /* PS_TRAIN_TRACE: one line per pull and per push */
    float *xb;
    int32_t *yb;
    int *perm;
    char name[128];
    char tkey[128], pkey[128], dkey[128];
    int batch;
    char push_name[32];     /* the push format in use (the job's) */
    char pull_name[16];     /* the pull format in use (--pull-format, else the job's) */
    int tty;                /* overwrite one line instead of printing lines */
    int quiet;
    /* counters */
    long long tasks_done, samples, claimed, lost;
    long long pushes;       /* model pushes: one PS.PUSHGRAD per partition each */
    long long my_tasks, my_samples; /* w:<name>:tasks/samples, over restarts */
    double t0, last_print;
    long long win_samples;  /* since last print */
    double win_loss;
    long long win_batches;
    double win_stale;
    long long win_stale_n;
    uint64_t last_version;
    int cur_epoch;
    int own_done;           /* own pending entries (XREADGROUP ... 0) all taken back */
    int waiting;            /* "waiting for" was printed for the current wait */
    char cur_task[64];      /* id of the task being trained, "" between tasks */
    /* pulls */
    uint64_t *vers;         /* per tensor: versions of the model in params */
    int have_params;        /* params hold a pulled model */
    int pull_inflight;      /* a psModelPullAsync into back is pending */
    int since_pull;         /* steps computed on the current params */
    int pushes_since_pull;
    /* durability (libps events) */
    char degraded[256];     /* "host:port host:port" of the shards degraded now */
    /* where the time of the steps goes (seconds) */
    double t_pull, t_grad, t_push, t_tasks, t_first, t_last;
} worker;

/* ========================================================================
 * Stream replies
 * ====================================================================== */

/* Fills 't' from a stream entry [id, [field, value, ...]]. Returns 0, or -1
 * for an entry that is nil (deleted) or malformed. */
static int parse_entry(const redisReply *e, task *t) {
    memset(t, 0, sizeof(*t));
    t->count = -1;
    if (e == NULL || e->type != REDIS_REPLY_ARRAY || e->elements != 2 ||
        e->element[0]->type != REDIS_REPLY_STRING || e->element[1]->type != REDIS_REPLY_ARRAY)
        return -1;
    snprintf(t->id, sizeof(t->id), "%s", e->element[0]->str);
    const redisReply *f = e->element[1];
    for (size_t i = 0; i + 1 < f->elements; i += 2) {
        const char *k = f->element[i]->str, *v = f->element[i + 1]->str;
        if (!strcmp(k, "epoch")) t->epoch = atoi(v);
        else if (!strcmp(k, "start")) t->start = atoll(v);
        else if (!strcmp(k, "count")) t->count = atoll(v);
    }
    return t->count >= 0 ? 0 : -1;
}

/* Takes the next task. Returns 1 with 't' filled, 0 when the job is done,
 * -1 on error. Waits (polling) while tasks are pending on live workers. */
static int next_task(worker *w, task *t) {
    while (!w->own_done && !Stop) {
        /* A worker restarted under its name first takes back the tasks it
         * held (its pending entries: id 0), instead of waiting --lease-ms
         * for XAUTOCLAIM to hand them out. */
        redisReply *r = psCommand(w->c, w->tkey, "XREADGROUP GROUP %s %s COUNT 1 STREAMS %s 0",
                                  TR_GROUP, w->name, w->tkey);
        if (r == NULL || r->type == REDIS_REPLY_ERROR) goto fail;
        int ok = -1;
        if (r->type == REDIS_REPLY_ARRAY && r->elements == 1) {
            const redisReply *entries = r->element[0]->element[1];
            if (entries->elements >= 1) ok = parse_entry(entries->element[0], t);
        }
        freeReplyObject(r);
        /* None left (or one deleted from the stream: XAUTOCLAIM clears those). */
        if (ok != 0) {
            w->own_done = 1;
            break;
        }
        /* Said even under --progress none: it explains a resume's first task. */
        printf("[%s] taking back my pending task %s (epoch %d, samples %lld..%lld)\n", w->name,
               t->id, t->epoch, t->start, t->start + t->count - 1);
        return 1;
    }
    for (;;) {
        if (Stop) return 0;
        redisReply *r = psCommand(w->c, w->tkey, "XREADGROUP GROUP %s %s COUNT 1 STREAMS %s >",
                                  TR_GROUP, w->name, w->tkey);
        if (r == NULL || r->type == REDIS_REPLY_ERROR) goto fail;
        if (r->type == REDIS_REPLY_ARRAY && r->elements == 1) {
            const redisReply *entries = r->element[0]->element[1];
            int ok = entries->elements == 1 ? parse_entry(entries->element[0], t) : -1;
            freeReplyObject(r);
            if (ok == 0) {
                w->waiting = 0;
                return 1;
            }
            continue;
        }
        freeReplyObject(r);

        r = psCommand(w->c, w->tkey, "XAUTOCLAIM %s %s %s %d 0-0 COUNT 1", w->tkey, TR_GROUP,
                      w->name, w->o->lease_ms);
        if (r == NULL || r->type == REDIS_REPLY_ERROR) goto fail;
        if (r->type == REDIS_REPLY_ARRAY && r->elements >= 2 &&
            r->element[1]->type == REDIS_REPLY_ARRAY && r->element[1]->elements >= 1) {
            int ok = parse_entry(r->element[1]->element[0], t);
            freeReplyObject(r);
            if (ok == 0) {
                w->claimed++;
                w->waiting = 0;
                if (!w->quiet)
                    printf("[%s] claimed task %s (epoch %d, samples %lld..%lld) idle > %d ms\n",
                           w->name, t->id, t->epoch, t->start, t->start + t->count - 1,
                           w->o->lease_ms);
                return 1;
            }
            continue;
        }
        freeReplyObject(r);

        r = psCommand(w->c, w->tkey, "XPENDING %s %s", w->tkey, TR_GROUP);
        if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements < 1) goto fail;
        long long pending = r->element[0]->integer;
        if (pending > 0 && !w->waiting) {
            /* Say once what this worker waits for, even under --progress none:
             * a silent wait of --lease-ms looks like a hang. */
            char who[256] = "";
            const redisReply *cs = r->elements >= 4 ? r->element[3] : NULL;
            for (size_t i = 0; cs && cs->type == REDIS_REPLY_ARRAY && i < cs->elements; i++) {
                const redisReply *e = cs->element[i];
                size_t n = strlen(who);
                if (e->type == REDIS_REPLY_ARRAY && e->elements >= 2 && n + 80 < sizeof(who))
                    snprintf(who + n, sizeof(who) - n, "%s%s (%s)", n ? ", " : "",
                             e->element[0]->str, e->element[1]->str);
            }
            fprintf(stderr, "[%s] no new task: waiting for %lld pending on %s to be acked, or "
                            "to be claimed here once idle for --lease-ms %d\n",
                    w->name, pending, who, w->o->lease_ms);
            w->waiting = 1;
        }
        freeReplyObject(r);
        if (pending == 0) return 0;
        /* Others hold tasks within their lease: wait for them to finish or die. */
        tr_sleep_ms(w->o->lease_ms < 200 ? w->o->lease_ms / 4 + 1 : 50);
    }
fail:
    tr_err(w->o, "[%s] reading tasks: %s", w->name,
           w->c->err ? w->c->errstr : "server error or unexpected reply");
    return -1;
}

/* Renews the lease of 't' if this worker still owns it. Returns 1 when
 * owned, 0 when another worker took it (or it was acked), -1 on error. */
static int renew_lease(worker *w, const task *t) {
    redisReply *r = psCommand(w->c, w->tkey, "XPENDING %s %s %s %s 1", w->tkey, TR_GROUP, t->id,
                              t->id);
    if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
        if (r) freeReplyObject(r);
        return -1;
    }
    int mine = r->elements == 1 && r->element[0]->elements >= 2 &&
               strcmp(r->element[0]->element[1]->str, w->name) == 0;
    freeReplyObject(r);
    if (!mine) return 0;
    r = psCommand(w->c, w->tkey, "XCLAIM %s %s %s 0 %s JUSTID", w->tkey, TR_GROUP, w->name, t->id);
    if (r) freeReplyObject(r);
    return 1;
}

/* ========================================================================
 * Durability events
 * ====================================================================== */

/* libps announces a shard that cannot keep --wait replicas (once), its
 * recovery, and lost-state events: each is a stderr line, and the set of
 * degraded shards goes into the progress line and the progress hash. */
static void on_event(void *udata, int ev, const char *node, const char *msg) {
    worker *w = udata;
    char *at = strstr(w->degraded, node);
    size_t nl = strlen(node);
    fprintf(stderr, "[%s] %s%s\n", w->name, ev == PS_EVENT_RESTORED ? "" : "WARNING: ", msg);
    fflush(stderr);
    if (ev == PS_EVENT_DEGRADED && at == NULL &&
        strlen(w->degraded) + nl + 2 < sizeof(w->degraded)) {
        if (w->degraded[0]) strcat(w->degraded, " ");
        strcat(w->degraded, node);
    } else if (ev == PS_EVENT_RESTORED && at != NULL) {
        size_t skip = nl + (at[nl] == ' ' ? 1 : 0);
        memmove(at, at + skip, strlen(at + skip) + 1);
        nl = strlen(w->degraded);
        if (nl && w->degraded[nl - 1] == ' ') w->degraded[nl - 1] = '\0';
    }
}

/* The durability state for the progress hash: "full", or the degraded
 * shards and the pushes they did not replicate. */
static void durability_text(const worker *w, char *buf, size_t len) {
    unsigned long long unrep = (unsigned long long)w->c->stats.unreplicated_pushes;
    if (w->o->wait <= 0) snprintf(buf, len, "no WAIT");
    else if (w->degraded[0])
        snprintf(buf, len, "degraded (%s): %llu pushes not replicated, policy %s", w->degraded,
                 unrep, w->o->on_degraded);
    else if (unrep)
        snprintf(buf, len, "full (WAIT %d) again; %llu pushes not replicated earlier", w->o->wait,
                 unrep);
    else
        snprintf(buf, len, "full (WAIT %d)", w->o->wait);
    if (w->c->stats.lost_state) {
        size_t l = strlen(buf);
        snprintf(buf + l, len - l, "; %llu lost-state events (policy %s)",
                 (unsigned long long)w->c->stats.lost_state, w->o->on_lost_state);
    }
}

/* ========================================================================
 * Progress
 * ====================================================================== */

static void print_progress(worker *w, int final) {
    double now = tr_now();
    double dt = now - w->last_print;
    if (w->quiet || (!final && dt * 1000 < w->o->interval_ms)) return;
    double rate = dt > 0 ? w->win_samples / dt : 0;
    char line[640];
    snprintf(line, sizeof(line),
             "[%s] epoch %d | tasks %lld | samples %lld | %.0f samples/s | loss %.4f | "
             "version %llu | staleness %.2f | retries %llu | stale-rejects %llu",
             w->name, w->cur_epoch, w->tasks_done, w->samples, rate,
             w->win_batches ? w->win_loss / w->win_batches : 0.0,
             (unsigned long long)w->last_version,
             w->win_stale_n ? w->win_stale / w->win_stale_n : 0.0,
             (unsigned long long)w->c->stats.retries,
             (unsigned long long)w->c->stats.stale_rejects);
    if (w->degraded[0] || w->c->stats.unreplicated_pushes) {
        size_t l = strlen(line);
        snprintf(line + l, sizeof(line) - l, " | %s %s | unreplicated %llu",
                 w->degraded[0] ? "degraded" : "durable", w->degraded[0] ? w->degraded : "again",
                 (unsigned long long)w->c->stats.unreplicated_pushes);
    }
    if (w->tty)
        printf("\r%s\033[K%s", line, final ? "\n" : "");
    else
        printf("%s\n", line);
    fflush(stdout);
    if (w->win_batches) {
        char loss[32], rs[32], f1[160], f2[160], f3[160], dur[400];
        snprintf(loss, sizeof(loss), "%.4f", w->win_loss / w->win_batches);
        snprintf(rs, sizeof(rs), "%.0f", rate);
        snprintf(f1, sizeof(f1), "w:%s:loss", w->name);
        snprintf(f2, sizeof(f2), "w:%s:samples_per_s", w->name);
        snprintf(f3, sizeof(f3), "w:%s:durability", w->name);
        durability_text(w, dur, sizeof(dur));
        redisReply *r = psCommand(w->c, w->pkey, "HSET %s %s %s %s %s %s %s", w->pkey, f1, loss,
                                  f2, rs, f3, dur);
        if (r) freeReplyObject(r);
    }
    w->last_print = now;
    w->win_samples = 0;
    w->win_loss = 0;
    w->win_batches = 0;
    w->win_stale = 0;
    w->win_stale_n = 0;
}

/* ========================================================================
 * Training
 * ====================================================================== */

/* FNV-1a over the bytes of the front buffer: the trace's fingerprint of
 * the model a gradient is computed from. */
static uint64_t params_digest(const worker *w) {
    uint64_t h = 1469598103934665603ULL;
    for (int t = 0; t < psModelNumTensors(w->m); t++) {
        const unsigned char *b = (const unsigned char *)w->params[t];
        size_t n = psModelTensorElements(w->m, t) * sizeof(float);
        for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ULL;
    }
    return h;
}

/* Writes one trace line "<what> <digest> <version per tensor...>" (when
 * PS_TRAIN_TRACE names a file). */
static void trace_line(worker *w, const char *what, const uint64_t *vers) {
    if (w->trace == NULL) return;
    fprintf(w->trace, "%s %016llx", what, (unsigned long long)params_digest(w));
    for (int t = 0; t < psModelNumTensors(w->m); t++)
        fprintf(w->trace, " %llu", (unsigned long long)vers[t]);
    fputc('\n', w->trace);
}

/* Makes the back buffer the front one: the model that an overlapped pull
 * decoded becomes what the gradients read, and the old front is free for
 * the next pull. The MLP computes from mlp.W/mlp.b, so those swap too. */
static void swap_buffers(worker *w) {
    for (int t = 0; t < psModelNumTensors(w->m); t++) {
        float *x = w->params[t];
        w->params[t] = w->back[t];
        w->back[t] = x;
    }
    for (int l = 0; l < w->mlp.nlayers; l++) {
        w->mlp.W[l] = w->params[2 * l];
        w->mlp.b[l] = w->params[2 * l + 1];
    }
}

/* Makes w->params hold the model for the next gradient: waits for the pull
 * in flight (into the back buffer, then swaps), or pulls now when the last
 * pull is --pull-every batches old (or there was none). w->vers gets the
 * versions of what was pulled: always those of the data in w->params.
 * Returns 0 or -1. */
static int fresh_params(worker *w) {
    double t0 = tr_now();
    int rc = PS_OK;
    if (w->pull_inflight) {
        w->pull_inflight = 0;
        rc = psModelPullWait(w->c, w->m, w->vers);
        if (rc == PS_OK) swap_buffers(w);
    } else if (!w->have_params || w->since_pull >= w->o->pull_every) {
        rc = psModelPull(w->c, w->m, w->params, w->vers);
    } else {
        return 0;
    }
    w->since_pull = 0;
    w->have_params = 1;
    w->t_pull += tr_now() - t0;
    if (rc != PS_OK) {
        tr_err(w->o, "[%s] pull: %s", w->name, w->c->errstr);
        return -1;
    }
    trace_line(w, "pull", w->vers);
    uint64_t v = w->vers[0];
    if (w->last_version > 0 || w->samples > 0) {
        /* Pushes by others between two pulls (ours are among them). */
        double s = (double)v - (double)w->last_version - w->pushes_since_pull;
        w->win_stale += s > 0 ? s : 0;
        w->win_stale_n++;
    }
    w->pushes_since_pull = 0;
    w->last_version = v;
    return 0;
}

/* One step on rows rows[0..nb): the model up to date (fresh_params); with
 * --overlap the pull for the next step is sent now into the back buffer,
 * so the server answers it while this gradient is computed from the front
 * one (the next gradient misses this step's own push: one step more
 * staleness); then the gradient and its push (asynchronous, with the
 * versions of the front buffer it was computed from). Returns 0 or -1. */
static int step(worker *w, const int *rows, int nb) {
    size_t dim = (size_t)w->ds.dim;
    for (int i = 0; i < nb; i++) {
        memcpy(w->xb + (size_t)i * dim, w->ds.x + (size_t)rows[i] * dim, dim * sizeof(float));
        w->yb[i] = w->ds.y[rows[i]];
    }
    if (fresh_params(w) != 0) return -1;
    w->since_pull++;
    if (w->o->overlap && w->since_pull >= w->o->pull_every) {
        if (psModelPullAsync(w->c, w->m, w->back) != PS_OK) {
            tr_err(w->o, "[%s] pull: %s", w->name, w->c->errstr);
            return -1;
        }
        w->pull_inflight = 1;
    }
    double t1 = tr_now();
    float loss = ps_mlp_grad(&w->mlp, w->xb, w->yb, nb);
    double t2 = tr_now();
    w->t_grad += t2 - t1;
    if (loss != loss) {
        tr_err(w->o, "[%s] gradient failed (bad label or batch)", w->name);
        return -1;
    }
    if (psModelPush(w->c, w->m, (const float *const *)w->grads, NULL, 1.0f) != PS_OK) {
        tr_err(w->o, "[%s] push: %s", w->name, w->c->errstr);
        return -1;
    }
    /* After the push returned (libps may have decoded pull replies meanwhile):
     * the front buffer must still be the model of the versions just sent. */
    trace_line(w, "push", w->vers);
    w->t_push += tr_now() - t2;
    w->pushes++;
    w->pushes_since_pull++;
    w->win_loss += loss;
    w->win_batches++;
    w->win_samples += nb;
    w->samples += nb;
    return 0;
}

/* Trains on task 't'. Returns 1 done, 0 abandoned (lease lost), -1 error,
 * -2 interrupted (Stop). */
static int run_task(worker *w, const task *t) {
    if (t->start < 0 || t->count < 0 || t->start + t->count > w->ds.n) {
        tr_err(w->o, "[%s] task %s covers samples %lld..%lld but the data has %d", w->name, t->id,
               t->start, t->start + t->count - 1, w->ds.n);
        return -1;
    }
    w->cur_epoch = t->epoch;
    int n = (int)t->count;
    for (int i = 0; i < n; i++) w->perm[i] = (int)t->start + i;
    PSRng rng;
    ps_rng_seed(&rng, w->cfg.seed ^ ((uint64_t)t->epoch << 40) ^ (uint64_t)t->start);
    for (int i = n - 1; i > 0; i--) {
        int j = (int)ps_rng_below(&rng, (uint64_t)i + 1), x = w->perm[i];
        w->perm[i] = w->perm[j];
        w->perm[j] = x;
    }
    double renew_at = tr_now() + w->o->lease_ms / 3000.0;
    for (int s = 0; s < n; s += w->batch) {
        int nb = n - s < w->batch ? n - s : w->batch;
        if (Stop) return -2;
        if (step(w, w->perm + s, nb) != 0) return -1;
        print_progress(w, 0);
        if (tr_now() >= renew_at) {
            int own = renew_lease(w, t);
            if (own < 0) {
                tr_err(w->o, "[%s] renewing the lease of %s: %s", w->name, t->id, w->c->errstr);
                return -1;
            }
            if (own == 0) return 0;
            renew_at = tr_now() + w->o->lease_ms / 3000.0;
        }
    }
    return 1;
}

/* Records task 't' as done by this worker, then XACKs it. Every command is
 * idempotent, so a resend after a lost reply (libps retries on timeouts
 * and reconnects) changes nothing: the done hash field is set to 1 (one
 * field per task: the number of fields is the number of tasks done), this
 * worker's counters are written as absolute values, and an XACK answering
 * 0 because the first one was applied is fine since the task is recorded
 * already. Only a worker that still owns the task (its pending entry)
 * records it; one whose task was claimed by another counts it as lost.
 * PS_TRAIN_RESEND_ACKS=1 sends the commands twice, as a resend after a
 * lost reply does (tests). Returns 0 or -1. */
static int ack_task(worker *w, const task *t) {
    if (psDrain(w->c) != PS_OK) {
        tr_err(w->o, "[%s] push: %s", w->name, w->c->errstr);
        return -1;
    }
    int own = renew_lease(w, t);
    if (own < 0) {
        tr_err(w->o, "[%s] XPENDING %s: %s", w->name, t->id, w->c->errstr);
        return -1;
    }
    if (own == 0) {
        w->lost++;
        if (!w->quiet)
            printf("[%s] task %s was claimed by another worker; not counted here\n", w->name,
                   t->id);
        return 0;
    }
    char ft[160], fs[160], nt[32], ns[32];
    snprintf(ft, sizeof(ft), "w:%s:tasks", w->name);
    snprintf(fs, sizeof(fs), "w:%s:samples", w->name);
    snprintf(nt, sizeof(nt), "%lld", w->my_tasks + 1);
    snprintf(ns, sizeof(ns), "%lld", w->my_samples + t->count);
    /* In one round trip (pipelined; all in slot {job}). */
    const char *done[] = {"HSET", w->dkey, t->id, "1"};
    const char *prog[] = {"HSET", w->pkey, ft, nt, fs, ns};
    const char *ack[] = {"XACK", w->tkey, TR_GROUP, t->id};
    enum { NC = 3 };
    const char *const keys[NC] = {w->dkey, w->pkey, w->tkey};
    const char **argvs[NC] = {done, prog, ack};
    const int argcs[NC] = {4, 6, 4};
    size_t argl[NC][6];
    const size_t *argls[NC];
    for (int i = 0; i < NC; i++) {
        for (int k = 0; k < argcs[i]; k++) argl[i][k] = strlen(argvs[i][k]);
        argls[i] = argl[i];
    }
    int times = getenv("PS_TRAIN_RESEND_ACKS") ? 2 : 1;
    for (int n = 0; n < times; n++) {
        redisReply *rs[NC] = {NULL, NULL, NULL};
        int got = psCommandBatchArgv(w->c, NC, keys, argcs, argvs, argls, rs);
        int bad = got != NC;
        if (bad) tr_err(w->o, "[%s] recording task %s: %s", w->name, t->id, w->c->errstr);
        for (int i = 0; i < NC; i++) {
            if (!bad && rs[i]->type == REDIS_REPLY_ERROR) {
                tr_err(w->o, "[%s] %s %s: %s", w->name, argvs[i][0], keys[i], rs[i]->str);
                bad = 1;
            }
            if (rs[i]) freeReplyObject(rs[i]);
        }
        if (bad) return -1;
    }
    w->my_tasks++;
    w->my_samples += t->count;
    w->tasks_done++;
    w->t_last = tr_wall();
    return 0;
}

/* Reads this worker's counters (w:<name>:tasks, w:<name>:samples) so that a
 * worker restarted under its name continues them. Returns 0 or -1. */
static int load_counters(worker *w) {
    char ft[160], fs[160];
    snprintf(ft, sizeof(ft), "w:%s:tasks", w->name);
    snprintf(fs, sizeof(fs), "w:%s:samples", w->name);
    redisReply *r = psCommand(w->c, w->pkey, "HGETALL %s", w->pkey);
    if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
        tr_err(w->o, "[%s] HGETALL %s: %s", w->name, w->pkey,
               r ? (r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply") : w->c->errstr);
        if (r) freeReplyObject(r);
        return -1;
    }
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
        if (!strcmp(r->element[i]->str, ft)) w->my_tasks = atoll(r->element[i + 1]->str);
        if (!strcmp(r->element[i]->str, fs)) w->my_samples = atoll(r->element[i + 1]->str);
    }
    freeReplyObject(r);
    return 0;
}

static int setup(worker *w) {
    const trainOpts *o = w->o;
    char err[256];
    int rc = tr_load_config(w->c, o->job, &w->cfg);
    if (rc != 0) {
        if (rc == 1) tr_err(o, "--job %s: no such job (run ps-train init first)", o->job);
        return -1;
    }
    if (strcmp(w->cfg.state, "ready") != 0) {
        tr_err(o, "--job %s: init has not finished (state %s)", o->job, w->cfg.state);
        return -1;
    }
    w->batch = o->batch > 0 ? o->batch : w->cfg.batch;
    if ((w->m = tr_model(w->c, o->job, &w->cfg)) == NULL) return -1;
    if (tr_load_data(&w->cfg, NULL, 1, &w->ds) != 0) return -1;
    if (w->ds.dim != w->cfg.sizes[0]) {
        tr_err(o, "the data has %d features but the model's input is %d", w->ds.dim,
               w->cfg.sizes[0]);
        return -1;
    }
    if (ps_mlp_init(&w->mlp, w->cfg.sizes, w->cfg.nsizes, w->batch, err, sizeof(err)) != 0) {
        tr_err(o, "%s", err);
        return -1;
    }
    int nt = psModelNumTensors(w->m);
    psWireFormat pullf;
    pushFormat pushf;
    /* The job's push format wins (all workers send alike); a job from before
     * it was recorded takes the flag. */
    if (tr_check_push_format(o, &w->cfg) != 0) return -1;
    snprintf(w->push_name, sizeof(w->push_name), "%s",
             w->cfg.push_format[0] ? w->cfg.push_format : o->push_format ? o->push_format : "f32");
    snprintf(w->pull_name, sizeof(w->pull_name), "%s",
             o->pull_format ? o->pull_format : w->cfg.pull_format[0] ? w->cfg.pull_format : "f32");
    if (tr_parse_wire(w->pull_name, 1, &pullf) != 0 ||
        tr_parse_push(w->push_name, &pushf) != 0 ||
        psModelSetPullFormat(w->m, pullf) != PS_OK || tr_push_apply(w->m, &pushf) != PS_OK) {
        tr_err(o, "bad --pull-format or --push-format");
        return -1;
    }
    w->vers = calloc((size_t)nt, sizeof(uint64_t));
    w->params = calloc((size_t)nt, sizeof(float *));
    w->grads = calloc((size_t)nt, sizeof(float *));
    w->back = calloc((size_t)nt, sizeof(float *));
    w->xb = malloc((size_t)w->batch * (size_t)w->ds.dim * sizeof(float));
    w->yb = malloc((size_t)w->batch * sizeof(int32_t));
    w->perm = malloc((size_t)(w->cfg.shard_size > w->ds.n ? w->ds.n : w->cfg.shard_size) *
                     sizeof(int) + sizeof(int));
    if (!w->vers || !w->params || !w->grads || !w->back || !w->xb || !w->yb || !w->perm) {
        tr_err(o, "out of memory");
        return -1;
    }
    for (int l = 0; l < w->mlp.nlayers; l++) {
        w->params[2 * l] = w->mlp.W[l];
        w->params[2 * l + 1] = w->mlp.b[l];
        w->grads[2 * l] = w->mlp.gW[l];
        w->grads[2 * l + 1] = w->mlp.gb[l];
    }
    for (int t = 0; t < nt && o->overlap; t++) {
        w->back[t] = calloc(psModelTensorElements(w->m, t), sizeof(float));
        if (w->back[t] == NULL) {
            tr_err(o, "out of memory");
            return -1;
        }
    }
    const char *tp = getenv("PS_TRAIN_TRACE");
    if (tp && *tp && (w->trace = fopen(tp, "w")) == NULL) {
        tr_err(o, "PS_TRAIN_TRACE %s: cannot open", tp);
        return -1;
    }
    return 0;
}

int tr_cmd_work(const trainOpts *o) {
    worker w;
    memset(&w, 0, sizeof(w));
    w.o = o;
    if (o->name)
        snprintf(w.name, sizeof(w.name), "%s", o->name);
    else {
        char host[64] = "host";
        gethostname(host, sizeof(host) - 1);
        snprintf(w.name, sizeof(w.name), "%s-%d", host, (int)getpid());
    }
    w.tty = !strcmp(o->progress, "tty") || (!strcmp(o->progress, "auto") && isatty(1));
    w.quiet = !strcmp(o->progress, "none");
    openblas_set_num_threads(o->threads > 0 ? o->threads : 1);
    tr_key(w.tkey, sizeof(w.tkey), o->job, "tasks");
    tr_key(w.pkey, sizeof(w.pkey), o->job, "progress");
    tr_key(w.dkey, sizeof(w.dkey), o->job, "done");

    int status = TR_EXIT_FAIL;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    trainOpts oe = *o;
    oe.on_event = on_event;
    oe.event_udata = &w;
    w.c = tr_connect(&oe, o->window, o->wait);
    if (w.c == NULL) return TR_EXIT_FAIL;
    if (setup(&w) != 0 || load_counters(&w) != 0) goto out;
    w.t0 = w.last_print = tr_now();
    w.t_first = tr_wall();
    if (!w.quiet) {
        printf("[%s] job %s: layers %s, batch %d, %d samples, push window %d, push %s\n",
               w.name, o->job, w.cfg.layers, w.batch, w.ds.n, o->window, w.push_name);
        fflush(stdout);
    }
    for (;;) {
        if (o->max_tasks > 0 && w.tasks_done + w.lost >= o->max_tasks) break;
        if (Stop) break;
        task t;
        double tt0 = tr_now();
        int rc = next_task(&w, &t);
        w.t_tasks += tr_now() - tt0;
        if (rc < 0) goto out;
        if (rc == 0) break;
        snprintf(w.cur_task, sizeof(w.cur_task), "%s", t.id);
        rc = run_task(&w, &t);
        if (rc == -2) break;
        if (rc < 0) goto out;
        if (rc == 0) {
            w.lost++;
            if (!w.quiet)
                printf("[%s] task %s was claimed by another worker; abandoned\n", w.name, t.id);
            continue;
        }
        tt0 = tr_now();
        if (ack_task(&w, &t) != 0) goto out;
        w.cur_task[0] = '\0';
        w.t_tasks += tr_now() - tt0;
    }
    if (w.pull_inflight) {
        w.pull_inflight = 0;
        if (psModelPullWait(w.c, w.m, NULL) != PS_OK) {
            tr_err(o, "[%s] pull: %s", w.name, w.c->errstr);
            goto out;
        }
    }
    if (psDrain(w.c) != PS_OK) {
        tr_err(o, "[%s] push: %s", w.name, w.c->errstr);
        goto out;
    }
    print_progress(&w, 1);
    if (w.t_last == 0) w.t_last = tr_wall();
    {
        /* The span this worker trained (after connecting and loading its
         * data, until its last ack; not the wait for others' last tasks):
         * run reports samples/s over the union of the spans. */
        char f1[160], f2[160], f3[160], f4[160], f5[160], v1[32], v2[32], v3[32], v4[32],
            v5[32];
        snprintf(f1, sizeof(f1), "w:%s:train_start", w.name);
        snprintf(f2, sizeof(f2), "w:%s:train_end", w.name);
        snprintf(v1, sizeof(v1), "%.6f", w.t_first);
        snprintf(v2, sizeof(v2), "%.6f", w.t_last);
        /* Gradient and model payload bytes (libps stats), for bytes per step. */
        snprintf(f3, sizeof(f3), "w:%s:push_bytes", w.name);
        snprintf(f4, sizeof(f4), "w:%s:pull_bytes", w.name);
        snprintf(v3, sizeof(v3), "%llu", (unsigned long long)w.c->stats.bytes_sent);
        snprintf(v4, sizeof(v4), "%llu", (unsigned long long)w.c->stats.bytes_received);
        snprintf(f5, sizeof(f5), "w:%s:model_pushes", w.name);
        snprintf(v5, sizeof(v5), "%lld", w.pushes);
        redisReply *r = psCommand(w.c, w.pkey, "HSET %s %s %s %s %s %s %s %s %s %s %s", w.pkey,
                                  f1, v1, f2, v2, f3, v3, f4, v4, f5, v5);
        if (r) freeReplyObject(r);
    }
    double secs = tr_now() - w.t0;
    if (!w.quiet)
        printf("[%s] done: %lld tasks (%lld claimed from others, %lld lost), %lld samples in "
               "%.1fs = %.0f samples/s, pushes %llu, retries %llu\n",
               w.name, w.tasks_done, w.claimed, w.lost, w.samples, secs,
               secs > 0 ? w.samples / secs : 0.0, (unsigned long long)w.c->stats.pushes,
               (unsigned long long)w.c->stats.retries);
    if (!w.quiet && w.pushes > 0)
        printf("[%s] per mini-batch: waiting for pulls %.3f ms, gradient %.3f ms, push %.3f ms, "
               "task queue %.3f ms, total %.3f ms (pull every %d, overlap %d, pull %s, push %s)\n",
               w.name, w.t_pull * 1e3 / w.pushes, w.t_grad * 1e3 / w.pushes,
               w.t_push * 1e3 / w.pushes, w.t_tasks * 1e3 / w.pushes,
               (w.t_last - w.t_first) * 1e3 / w.pushes, o->pull_every, o->overlap,
               w.pull_name, w.push_name);
    /* For scripts and the fault tests: after the final drain every model
     * push is acknowledged, so each partition key got exactly model_pushes
     * pushes from this worker (partition_pushes = model_pushes * keys unless
     * some were STALE). A server's version of a key minus the sum over the
     * workers counts pushes lost (< 0) or applied twice (> 0). */
    int keys = 0;
    for (int t = 0; t < psModelNumTensors(w.m); t++) keys += psModelNumPartitions(w.m, t);
    const psStats *st = &w.c->stats;
    printf("ACKED worker=%s model_pushes=%lld keys=%d partition_pushes=%llu stale_rejects=%llu "
           "wait_short=%llu retries=%llu reconnects=%llu refreshes=%llu moved=%llu ask=%llu "
           "unreplicated=%llu degraded_events=%llu restored_events=%llu lost_state=%llu "
           "push_bytes=%llu pull_bytes=%llu\n",
           w.name, w.pushes, keys, (unsigned long long)st->pushes,
           (unsigned long long)st->stale_rejects, (unsigned long long)st->wait_short,
           (unsigned long long)st->retries, (unsigned long long)st->reconnects,
           (unsigned long long)st->refreshes, (unsigned long long)st->moved,
           (unsigned long long)st->ask, (unsigned long long)st->unreplicated_pushes,
           (unsigned long long)st->degraded_events, (unsigned long long)st->restored_events,
           (unsigned long long)st->lost_state, (unsigned long long)st->bytes_sent,
           (unsigned long long)st->bytes_received);
    status = TR_EXIT_OK;
    if (Stop) {
        fprintf(stderr, "[%s] interrupted (signal %d)%s%s%s; the job is resumable: rerun "
                        "'ps-train work --job %s --name %s' to take %s back at once (another "
                        "worker claims it after --lease-ms %d)\n",
                w.name, (int)Stop, w.cur_task[0] ? ": task " : "", w.cur_task,
                w.cur_task[0] ? " stays pending" : "", o->job, w.name,
                w.cur_task[0] ? "it" : "its tasks", o->lease_ms);
        status = TR_EXIT_INTERRUPTED;
    }
out:
    if (w.pull_inflight) psModelPullWait(w.c, w.m, NULL);
    fflush(stdout);
    /* mlp.W/mlp.b may point at what setup() allocated as the back buffer:
     * free whatever is the back buffer now, ps_mlp_free the front. */
    for (int t = 0; w.back && w.m && t < psModelNumTensors(w.m); t++) free(w.back[t]);
    free(w.back);
    if (w.trace) fclose(w.trace);
    free(w.vers);
    free(w.params);
    free(w.grads);
    free(w.xb);
    free(w.yb);
    free(w.perm);
    ps_mlp_free(&w.mlp);
    ps_dataset_free(&w.ds);
    psModelFree(w.m);
    psClientFree(w.c);
    return status;
}
