/* tasks.c -- ps-train: the task stream of a job (tasks.h): init fills it,
 * status reads its totals, the worker loop (work.c) takes tasks from it.
 *
 * A worker takes a task (first its own pending ones, XREADGROUP id 0, left
 * by a run under the same --name that was stopped; then new ones, ">"; when
 * no task is new, XAUTOCLAIM one idle past --lease-ms: its worker died),
 * renews its lease while training it (XCLAIM ... JUSTID by its owner), and
 * records and XACKs it with idempotent writes (tw_ack_task). */

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "conn.h"
#include "rng.h"
#include "trainer.h"
#include "util.h"


/* Set by SIGINT/SIGTERM: the worker stops after the step it is in, drains
 * its pushes and exits TR_EXIT_INTERRUPTED, leaving its task pending. A
 * second signal a second or more after the first kills it at once (one
 * Ctrl-C under run arrives twice: from the terminal and forwarded by run). */
volatile sig_atomic_t tw_stop;
static volatile sig_atomic_t StopAt; /* CLOCK_MONOTONIC seconds of the first */

static void on_stop(int sig) {
    const long long now_s = (long long)(ps_mono_ms() / 1000); /* clock_gettime: signal-safe */
    if (tw_stop && now_s > StopAt + 1) {
        signal(sig, SIG_DFL);
        raise(sig);
    }
    if (!tw_stop) {
        StopAt = (sig_atomic_t)now_s;
        tw_stop = sig;
    }
}

void tw_catch_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

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
int tw_next_task(workCtx *w, task *t) {
    while (!w->q.own_done && !tw_stop) {
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
            w->q.own_done = 1;
            break;
        }
        /* Said even under --progress none: it explains a resume's first task. */
        printf("[%s] taking back my pending task %s (epoch %d, samples %lld..%lld)\n", w->name,
               t->id, t->epoch, t->start, t->start + t->count - 1);
        return 1;
    }
    for (;;) {
        if (tw_stop) return 0;
        redisReply *r = psCommand(w->c, w->tkey, "XREADGROUP GROUP %s %s COUNT 1 STREAMS %s >",
                                  TR_GROUP, w->name, w->tkey);
        if (r == NULL || r->type == REDIS_REPLY_ERROR) goto fail;
        if (r->type == REDIS_REPLY_ARRAY && r->elements == 1) {
            const redisReply *entries = r->element[0]->element[1];
            int ok = entries->elements == 1 ? parse_entry(entries->element[0], t) : -1;
            freeReplyObject(r);
            if (ok == 0) {
                w->q.waiting = 0;
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
                w->q.claimed++;
                w->q.waiting = 0;
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
        if (pending > 0 && !w->q.waiting) {
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
            w->q.waiting = 1;
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
int tw_renew_lease(workCtx *w, const task *t) {
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
int tw_ack_task(workCtx *w, const task *t, long long samples) {
    if (psDrain(w->c) != PS_OK) {
        tr_err(w->o, "[%s] push: %s", w->name, w->c->errstr);
        return -1;
    }
    int own = tw_renew_lease(w, t);
    if (own < 0) {
        tr_err(w->o, "[%s] XPENDING %s: %s", w->name, t->id, w->c->errstr);
        return -1;
    }
    if (own == 0) {
        w->q.lost++;
        if (!w->quiet)
            printf("[%s] task %s was claimed by another worker; not counted here\n", w->name,
                   t->id);
        return 0;
    }
    char ft[160], fs[160], nt[32], ns[32];
    snprintf(ft, sizeof(ft), "w:%s:tasks", w->name);
    snprintf(fs, sizeof(fs), "w:%s:samples", w->name);
    snprintf(nt, sizeof(nt), "%lld", w->q.my_tasks + 1);
    snprintf(ns, sizeof(ns), "%lld", w->q.my_samples + samples);
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
    w->q.my_tasks++;
    w->q.my_samples += samples;
    w->q.done++;
    w->st.t_last = tr_wall();
    return 0;
}

/* Reads this worker's counters (w:<name>:tasks, w:<name>:samples) so that a
 * worker restarted under its name continues them. Returns 0 or -1. */
int tw_load_counters(workCtx *w) {
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
        if (!strcmp(r->element[i]->str, ft)) w->q.my_tasks = atoll(r->element[i + 1]->str);
        if (!strcmp(r->element[i]->str, fs)) w->q.my_samples = atoll(r->element[i + 1]->str);
    }
    freeReplyObject(r);
    return 0;
}

/* ========================================================================
 * Filling the stream, totals
 * ====================================================================== */

long long tr_fill_tasks(const trainOpts *o, psClient *c, const jobConfig *cfg, long long first,
                        long long total,
                        long long per) {
    char key[128];
    tr_key(key, sizeof(key), o->job, "tasks");
    redisReply *r = psCommand(c, key, "XGROUP CREATE %s %s 0 MKSTREAM", key, TR_GROUP);
    if (r == NULL || (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "BUSYGROUP", 9) != 0)) {
        tr_err(o, "XGROUP CREATE %s: %s", key, r ? r->str : c->errstr);
        if (r) freeReplyObject(r);
        return -1;
    }
    freeReplyObject(r);
    long long nshards = (total + per - 1) / per;
    long long *order = malloc((size_t)nshards * sizeof(long long));
    if (order == NULL) return -1;
    PSRng rng;
    ps_rng_seed(&rng, cfg->seed * 0x9E3779B97F4A7C15ULL + 17);
    long long n = 0;
    for (int e = 1; e <= cfg->epochs; e++) {
        for (long long i = 0; i < nshards; i++) order[i] = i;
        for (long long i = nshards - 1; i > 0; i--) {
            long long j = (long long)ps_rng_below(&rng, (uint64_t)i + 1), t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
        for (long long i = 0; i < nshards; i++) {
            long long start = order[i] * per;
            long long cnt = total - start < per ? total - start : per;
            r = psCommand(c, key, "XADD %s * epoch %d start %lld count %lld", key, e, first + start,
                          cnt);
            if (r == NULL || r->type == REDIS_REPLY_ERROR) {
                tr_err(o, "XADD %s: %s", key, r ? r->str : c->errstr);
                if (r) freeReplyObject(r);
                free(order);
                return -1;
            }
            freeReplyObject(r);
            n++;
        }
    }
    free(order);
    return n;
}


int tr_progress(const trainOpts *o, psClient *c, long long *tasks, long long *samples) {
    char dkey[128], pkey[128];
    tr_key(dkey, sizeof(dkey), o->job, "done");
    tr_key(pkey, sizeof(pkey), o->job, "progress");
    redisReply *r = tr_cmd_ok(o, c, dkey, "HLEN %s", dkey);
    if (r == NULL) return -1;
    *tasks = r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
    freeReplyObject(r);
    *samples = 0;
    if ((r = tr_cmd_ok(o, c, pkey, "HGETALL %s", pkey)) == NULL) return -1;
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2) {
        const char *f = r->element[i]->str;
        size_t n = strlen(f);
        if (!strncmp(f, "w:", 2) && n > 10 && !strcmp(f + n - 8, ":samples"))
            *samples += atoll(r->element[i + 1]->str);
    }
    freeReplyObject(r);
    return 0;
}


long long tr_samples_trained(const trainOpts *o) {
    long long tasks = 0, samples = 0;
    psClient *c = tr_connect(o, 0, 0);
    if (c == NULL) return 0;
    if (tr_progress(o, c, &tasks, &samples) != 0) samples = 0;
    psClientFree(c);
    return samples;
}
