/* train_work.c -- ps-train work: one worker process.
 *
 * Loop: take a task (first its own pending ones, XREADGROUP id 0, left by a
 * run under the same --name that was stopped; then new ones, ">"; when no
 * task is new, XAUTOCLAIM one idle past --lease-ms: its worker died), train
 * on its shard (per mini-batch: pull the model, compute the mean gradient,
 * push it with the versions of the pull), then record it and XACK it. Only
 * a worker that still owns the task records it, with idempotent writes (see
 * tw_ack_task in train_tasks.c), so every task is counted once even when a slow worker and a
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

#include "train_sparse.h"

/* ========================================================================
 * Progress
 * ====================================================================== */

void print_progress(worker *w, int final) {
    double now = tr_now();
    double dt = now - w->last_print;
    if ((w->quiet && !w->log) || (!final && dt * 1000 < w->o->interval_ms)) return;
    double rate = dt > 0 ? w->win_samples / dt : 0;
    if (w->win_batches)
        RUNLOG(w->log, "progress", RL_STR("worker", w->name), RL_INT("epoch", w->cur_epoch),
               RL_INT("tasks", w->tasks_done), RL_INT("samples", w->samples),
               RL_NUM("samples_per_s", rate), RL_NUM("loss", w->win_loss / w->win_batches),
               RL_INT("version", w->last_version),
               RL_NUM("staleness", w->win_stale_n ? w->win_stale / w->win_stale_n : 0.0),
               RL_INT("retries", w->c->stats.retries),
               RL_INT("stale_rejects", w->c->stats.stale_rejects),
               RL_INT("backlog_waits", w->c->stats.backlog_waits),
               w->degraded[0] ? RL_STR("degraded", w->degraded) : RL_NONE);
    if (w->quiet) goto reset;
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
    if (w->c->stats.backlog_waits) {
        /* Backpressure: the relay in front of this worker's server was down or behind. */
        size_t l = strlen(line);
        snprintf(line + l, sizeof(line) - l, " | backlog waits %llu (relay behind)",
                 (unsigned long long)w->c->stats.backlog_waits);
    }
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
        tw_durability_text(w, dur, sizeof(dur));
        redisReply *r = psCommand(w->c, w->pkey, "HSET %s %s %s %s %s %s %s", w->pkey, f1, loss,
                                  f2, rs, f3, dur);
        if (r) freeReplyObject(r);
    }
reset:
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
    } else if (w->have_params && w->o->sync_rounds) {
        /* A relay's sync round: wait for the model our last push went into. */
        rc = psModelPullMinVersion(w->c, w->m, w->params, NULL, w->o->sync_rounds, w->vers);
        rc = rc >= 0 ? PS_OK : rc;
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
 * -2 interrupted (tw_stop). */
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
        if (tw_stop) return -2;
        if (step(w, w->perm + s, nb) != 0) return -1;
        print_progress(w, 0);
        if (tr_now() >= renew_at) {
            int own = tw_renew_lease(w, t);
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
    if (w->cfg.sp.model[0]) return tr_sparse_setup(w);
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
    if (tr_open_log(o, &w.log) != 0) return TR_EXIT_FAIL;
    tw_catch_signals();
    trainOpts oe = *o;
    oe.on_event = tw_on_event;
    oe.event_udata = &w;
    w.c = tr_connect(&oe, o->window, o->wait);
    if (w.c == NULL) {
        runlog_close(w.log);
        return TR_EXIT_FAIL;
    }
    if (setup(&w) != 0 || tw_load_counters(&w) != 0) goto out;
    w.t0 = w.last_print = tr_now();
    w.t_first = tr_wall();
    if (!w.quiet && !w.sp) {
        printf("[%s] job %s: layers %s, batch %d, %d samples, push window %d, push %s\n",
               w.name, o->job, w.cfg.layers, w.batch, w.ds.n, o->window, w.push_name);
        fflush(stdout);
    }
    for (;;) {
        if (o->max_tasks > 0 && w.tasks_done + w.lost >= o->max_tasks) break;
        if (tw_stop) break;
        task t;
        double tt0 = tr_now();
        int rc = tw_next_task(&w, &t);
        w.t_tasks += tr_now() - tt0;
        if (rc < 0) goto out;
        if (rc == 0) break;
        snprintf(w.cur_task, sizeof(w.cur_task), "%s", t.id);
        rc = w.sp ? tr_sparse_task(&w, &t) : run_task(&w, &t);
        if (rc == -2) break;
        if (rc < 0) goto out;
        if (rc == 0) {
            w.lost++;
            if (!w.quiet)
                printf("[%s] task %s was claimed by another worker; abandoned\n", w.name, t.id);
            continue;
        }
        tt0 = tr_now();
        if (tw_ack_task(&w, &t, w.sp ? t.samples : t.count) != 0) goto out;
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
    if (w.sp) tr_sparse_report(&w);
    RUNLOG(w.log, "done", RL_STR("worker", w.name), RL_INT("tasks", w.tasks_done),
           RL_INT("claimed", w.claimed), RL_INT("lost", w.lost), RL_INT("samples", w.samples),
           RL_NUM("seconds", secs), RL_NUM("samples_per_s", secs > 0 ? w.samples / secs : 0.0),
           RL_INT("model_pushes", w.pushes), RL_BOOL("interrupted", tw_stop));
    status = TR_EXIT_OK;
    if (tw_stop) {
        fprintf(stderr, "[%s] interrupted (signal %d)%s%s%s; the job is resumable: rerun "
                        "'ps-train work --job %s --name %s' to take %s back at once (another "
                        "worker claims it after --lease-ms %d)\n",
                w.name, (int)tw_stop, w.cur_task[0] ? ": task " : "", w.cur_task,
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
    runlog_close(w.log);
    free(w.vers);
    free(w.params);
    free(w.grads);
    free(w.xb);
    free(w.yb);
    free(w.perm);
    ps_mlp_free(&w.mlp);
    ps_dataset_free(&w.ds);
    tr_sparse_free(&w);
    psModelFree(w.m);
    psClientFree(w.c);
    return status;
}
