/* progress.c -- a worker's progress line and progress hash fields, and its
 * durability state from libps events (progress.h). */

#include <stdio.h>
#include <string.h>

#include "trainer.h"
#include "util.h"

/* ========================================================================
 * Progress
 * ====================================================================== */

void print_progress(workCtx *w, int final) {
    double now = tr_now();
    double dt = now - w->st.last_print;
    if ((w->quiet && !w->log) || (!final && dt * 1000 < w->o->interval_ms)) return;
    double rate = dt > 0 ? w->st.win_samples / dt : 0;
    if (w->st.win_batches)
        RUNLOG(w->log, "progress", RL_STR("worker", w->name), RL_INT("epoch", w->st.cur_epoch),
               RL_INT("tasks", w->q.done), RL_INT("samples", w->st.samples),
               RL_NUM("samples_per_s", rate), RL_NUM("loss", w->st.win_loss / w->st.win_batches),
               RL_INT("version", w->st.last_version),
               RL_NUM("staleness", w->st.win_stale_n ? w->st.win_stale / w->st.win_stale_n : 0.0),
               RL_INT("retries", w->c->stats.retries),
               RL_INT("stale_rejects", w->c->stats.stale_rejects),
               w->degraded[0] ? RL_STR("degraded", w->degraded) : RL_NONE);
    if (w->quiet) goto reset;
    char line[640];
    snprintf(line, sizeof(line),
             "[%s] epoch %d | tasks %lld | samples %lld | %.0f samples/s | loss %.4f | "
             "version %llu | staleness %.2f | retries %llu | stale-rejects %llu",
             w->name, w->st.cur_epoch, w->q.done, w->st.samples, rate,
             w->st.win_batches ? w->st.win_loss / w->st.win_batches : 0.0,
             (unsigned long long)w->st.last_version,
             w->st.win_stale_n ? w->st.win_stale / w->st.win_stale_n : 0.0,
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
    if (w->st.win_batches) {
        char loss[32], rs[32], f1[160], f2[160], f3[160], dur[400];
        snprintf(loss, sizeof(loss), "%.4f", w->st.win_loss / w->st.win_batches);
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
    w->st.last_print = now;
    w->st.win_samples = 0;
    w->st.win_loss = 0;
    w->st.win_batches = 0;
    w->st.win_stale = 0;
    w->st.win_stale_n = 0;
}


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


/* libps announces a shard that cannot keep --wait replicas (once), its
 * recovery, and lost-state events: each is a stderr line (a lost-state one
 * once per key), and the set of degraded shards goes into the progress line
 * and the progress hash. */
void tw_on_event(void *udata, int ev, const char *node, const char *msg) {
    workCtx *w = udata;
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
void tw_durability_text(const workCtx *w, char *buf, size_t len) {
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

