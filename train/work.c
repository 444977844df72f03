/* work.c -- ps-train work: one worker process, for every model kind.
 *
 * Loop: take a task (first its own pending ones, XREADGROUP id 0, left by a
 * run under the same --name that was stopped; then new ones, ">"; when no
 * task is new, XAUTOCLAIM one idle past --lease-ms: its worker died), train
 * on it (the job's trainer, trainer.h: dense_trainer.c or sparse_trainer.c),
 * then record it and XACK it. Only a worker that still owns the task
 * records it, with idempotent writes (see tw_ack_task in tasks.c), so every
 * task is counted once even when a slow worker and a claimer both finish
 * it, or a reply is lost and the command resent. While
 * a task runs its lease is renewed (XCLAIM ... JUSTID by its owner) every
 * third of the lease; a worker that finds its task owned by another
 * abandons it. The worker exits when nothing is new, nothing is claimable
 * and nothing is pending in the group, or after SIGINT/SIGTERM (exit 130). */

#include <cblas.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cmds.h"
#include "conn.h"
#include "kind.h"
#include "util.h"

/* Loads the job's config into w->cfg and picks its trainer. NULL on error
 * (printed). */
static const trainer *load_job(workCtx *w) {
    const trainOpts *o = w->o;
    int rc = tr_load_config(w->c, o->job, &w->cfg);
    if (rc != 0) {
        if (rc == 1) tr_err(o, "--job %s: no such job (run ps-train init first)", o->job);
        return NULL;
    }
    if (strcmp(w->cfg.state, "ready") != 0) {
        tr_err(o, "--job %s: init has not finished (state %s)", o->job, w->cfg.state);
        return NULL;
    }
    if (w->cfg.sp.model[0] && !w->cfg.sp.train[0]) {
        tr_err(o, "--job %s: a stream job (init --stream %s, no train file): train it with "
               "ps-train stream", o->job, w->cfg.sp.stream);
        return NULL;
    }
    return tr_trainer_of(&w->cfg);
}

int tr_cmd_work(const trainOpts *o) {
    workCtx w;
    const trainer *tr = NULL;
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
    if ((tr = load_job(&w)) == NULL || tr->setup(&w) != 0 || tw_load_counters(&w) != 0)
        goto out;
    w.st.t0 = w.st.last_print = tr_now();
    w.st.t_first = tr_wall();
    for (;;) {
        if (o->max_tasks > 0 && w.q.done + w.q.lost >= o->max_tasks) break;
        if (tw_stop) break;
        task t;
        double tt0 = tr_now();
        int rc = tw_next_task(&w, &t);
        w.st.t_tasks += tr_now() - tt0;
        if (rc < 0) goto out;
        if (rc == 0) break;
        snprintf(w.q.cur, sizeof(w.q.cur), "%s", t.id);
        rc = tr->task(&w, &t);
        if (rc == -2) break;
        if (rc < 0) goto out;
        if (rc == 0) {
            w.q.lost++;
            if (!w.quiet)
                printf("[%s] task %s was claimed by another worker; abandoned\n", w.name, t.id);
            continue;
        }
        tt0 = tr_now();
        if (tw_ack_task(&w, &t, t.samples) != 0) goto out;
        w.q.cur[0] = '\0';
        w.st.t_tasks += tr_now() - tt0;
    }
    if (tr->finish(&w) != 0) goto out;
    if (psDrain(w.c) != PS_OK) {
        tr_err(o, "[%s] push: %s", w.name, w.c->errstr);
        goto out;
    }
    print_progress(&w, 1);
    if (w.st.t_last == 0) w.st.t_last = tr_wall();
    {
        /* The span this worker trained (after connecting and loading its
         * data, until its last ack; not the wait for others' last tasks):
         * run reports samples/s over the union of the spans. */
        char f1[160], f2[160], f3[160], f4[160], f5[160], v1[32], v2[32], v3[32], v4[32],
            v5[32];
        snprintf(f1, sizeof(f1), "w:%s:train_start", w.name);
        snprintf(f2, sizeof(f2), "w:%s:train_end", w.name);
        snprintf(v1, sizeof(v1), "%.6f", w.st.t_first);
        snprintf(v2, sizeof(v2), "%.6f", w.st.t_last);
        /* Gradient and model payload bytes (libps stats), for bytes per step. */
        snprintf(f3, sizeof(f3), "w:%s:push_bytes", w.name);
        snprintf(f4, sizeof(f4), "w:%s:pull_bytes", w.name);
        snprintf(v3, sizeof(v3), "%llu", (unsigned long long)w.c->stats.bytes_sent);
        snprintf(v4, sizeof(v4), "%llu", (unsigned long long)w.c->stats.bytes_received);
        snprintf(f5, sizeof(f5), "w:%s:model_pushes", w.name);
        snprintf(v5, sizeof(v5), "%lld", w.st.pushes);
        redisReply *r = psCommand(w.c, w.pkey, "HSET %s %s %s %s %s %s %s %s %s %s %s", w.pkey,
                                  f1, v1, f2, v2, f3, v3, f4, v4, f5, v5);
        if (r) freeReplyObject(r);
    }
    double secs = tr_now() - w.st.t0;
    if (!w.quiet)
        printf("[%s] done: %lld tasks (%lld claimed from others, %lld lost), %lld samples in "
               "%.1fs = %.0f samples/s, pushes %llu, retries %llu\n",
               w.name, w.q.done, w.q.claimed, w.q.lost, w.st.samples, secs,
               secs > 0 ? w.st.samples / secs : 0.0, (unsigned long long)w.c->stats.pushes,
               (unsigned long long)w.c->stats.retries);
    if (!w.quiet && w.st.pushes > 0)
        printf("[%s] per mini-batch: waiting for pulls %.3f ms, gradient %.3f ms, push %.3f ms, "
               "task queue %.3f ms, total %.3f ms (pull every %d, overlap %d, pull %s, push %s)\n",
               w.name, w.st.t_pull * 1e3 / w.st.pushes, w.st.t_grad * 1e3 / w.st.pushes,
               w.st.t_push * 1e3 / w.st.pushes, w.st.t_tasks * 1e3 / w.st.pushes,
               (w.st.t_last - w.st.t_first) * 1e3 / w.st.pushes, o->pull_every, o->overlap,
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
           w.name, w.st.pushes, keys, (unsigned long long)st->pushes,
           (unsigned long long)st->stale_rejects, (unsigned long long)st->wait_short,
           (unsigned long long)st->retries, (unsigned long long)st->reconnects,
           (unsigned long long)st->refreshes, (unsigned long long)st->moved,
           (unsigned long long)st->ask, (unsigned long long)st->unreplicated_pushes,
           (unsigned long long)st->degraded_events, (unsigned long long)st->restored_events,
           (unsigned long long)st->lost_state, (unsigned long long)st->bytes_sent,
           (unsigned long long)st->bytes_received);
    tr->report(&w);
    RUNLOG(w.log, "done", RL_STR("worker", w.name), RL_INT("tasks", w.q.done),
           RL_INT("claimed", w.q.claimed), RL_INT("lost", w.q.lost),
           RL_INT("samples", w.st.samples),
           RL_NUM("seconds", secs), RL_NUM("samples_per_s", secs > 0 ? w.st.samples / secs : 0.0),
           RL_INT("model_pushes", w.st.pushes), RL_BOOL("interrupted", tw_stop));
    status = TR_EXIT_OK;
    if (tw_stop) {
        fprintf(stderr, "[%s] interrupted (signal %d)%s%s%s; the job is resumable: rerun "
                        "'ps-train work --job %s --name %s' to take %s back at once (another "
                        "worker claims it after --lease-ms %d)\n",
                w.name, (int)tw_stop, w.q.cur[0] ? ": task " : "", w.q.cur,
                w.q.cur[0] ? " stays pending" : "", o->job, w.name,
                w.q.cur[0] ? "it" : "its tasks", o->lease_ms);
        status = TR_EXIT_INTERRUPTED;
    }
out:
    if (tr) tr->free(&w);
    fflush(stdout);
    runlog_close(w.log);
    psModelFree(w.m);
    psClientFree(w.c);
    return status;
}
