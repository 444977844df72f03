/* train_tasks.c -- ps-train work: the task stream of a job (shared by the
 * dense and the sparse worker loops, train_work.h).
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
#include "train_work.h"


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
int tw_next_task(worker *w, task *t) {
    while (!w->own_done && !tw_stop) {
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
        if (tw_stop) return 0;
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
int tw_renew_lease(worker *w, const task *t) {
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
/* 1 when this process already printed a lost-state event for the key named in
 * 'msg' ("lost state: KEY on ..."): libps reports each request that meets the
 * loss (a pull, the push, its resend), the operator needs the key once. */
static int lost_state_seen(const char *msg) {
    static char seen[64][72];
    static int n;
    const char *k = strncmp(msg, "lost state: ", 12) == 0 ? msg + 12 : NULL;
    if (k == NULL) return 0;
    char key[72];
    snprintf(key, sizeof(key), "%.*s", (int)strcspn(k, " "), k);
    for (int i = 0; i < n; i++)
        if (strcmp(seen[i], key) == 0) return 1;
    if (n < 64) snprintf(seen[n++], sizeof(seen[0]), "%s", key);
    return 0;
}

void tw_on_event(void *udata, int ev, const char *node, const char *msg) {
    worker *w = udata;
    char *at = strstr(w->degraded, node);
    size_t nl = strlen(node);
    if (ev != PS_EVENT_LOST_STATE || !lost_state_seen(msg)) {
        fprintf(stderr, "[%s] %s%s\n", w->name, ev == PS_EVENT_RESTORED ? "" : "WARNING: ", msg);
        fflush(stderr);
    }
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
void tw_durability_text(const worker *w, char *buf, size_t len) {
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
int tw_ack_task(worker *w, const task *t, long long samples) {
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
    snprintf(ns, sizeof(ns), "%lld", w->my_samples + samples);
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
    w->my_samples += samples;
    w->tasks_done++;
    w->t_last = tr_wall();
    return 0;
}

/* Reads this worker's counters (w:<name>:tasks, w:<name>:samples) so that a
 * worker restarted under its name continues them. Returns 0 or -1. */
int tw_load_counters(worker *w) {
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
