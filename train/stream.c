/* stream.c -- `ps-train stream`: online training of a sparse CTR job from a
 * Redis Stream of events, each trained exactly once across worker crashes,
 * with progressive validation (docs/design.md "Stream consumption").
 *
 * The job (its model, table and dense tensors) is made by `ps-train init
 * --model lr|fm|mlp` as for file training; its config gives the model and
 * the line format. An event is one stream entry whose field --field holds
 * one libsvm or Criteo line. Consumers of group --group read batches
 * (XREADGROUP, closed at --batch events or after --batch-ms, whichever
 * first; an idle stream waits in XREAD BLOCK, which takes nothing).
 *
 * Exactly once (docs/design.md "Stream consumption"). Entries are read
 * only by lease steps (stream_journal.c): one MULTI/EXEC that records in
 * consumer C's journal (a hash in the stream's slot,
 * "<tag>psj:<job>:<group>:<C>") the id range (L, E] that its
 * "XREADGROUP ... NOACK" read, in the batch it fills; no pending-entries
 * list, no XACK. A batch pushes under its push identity (cid, seq)
 * (psSetPushSeq: the same seq on every key); it leaves the journal once its
 * pushes were acknowledged. A claimer (ClaimLua) moves the batches of a
 * journal whose last lease step is older than --claim-idle-ms into its own,
 * bumps the owner's epoch (the owner's next batches push under a new cid)
 * and retrains each from its ranges (XRANGE) under its identity: the
 * server answers a duplicate where the first push was applied. The owner
 * drops a batch its journal no longer lists ("fenced"). A restart under the
 * same --consumer name replays its own journal first. With --wait N each
 * lease step ends in "WAIT N" on the stream's node and a batch is pushed
 * only after it: a failover of that node cannot lose a lease whose push
 * stands.
 *
 * Accounting. Every batch also pushes [-events trained, -entries malformed]
 * into the job's tensor "stream_events" (SGD, LR 1) under the same push ID:
 * its value is exactly the events trained and the malformed entries skipped,
 * each once (ps-train status prints it).
 *
 * Progressive validation. Each event is scored by the forward pass of the
 * step that trains on it, on the parameters pulled before its push: the
 * worker keeps its last --auc-window (score, label) pairs (exact AUC and
 * logloss of the window) and adds a histogram of its scores (2048 buckets
 * of the logit over [-16, 16)) per label to a shared hash per 10 seconds
 * (psjob:{J}:sauc:<slot>, kept SW_KEEP_S); the global AUC of the last minute
 * over all workers is computed from the summed histograms, with its error
 * bound (pairs that share a bucket, counted half). */

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

/* The claim. KEYS: stream, own journal. ARGV: group, consumer, idle ms,
 * journal prefix, self ("1": this consumer's own held batches, after a
 * restart). Otherwise it takes every batch of the first other consumer
 * whose journal holds some and whose last lease step is older than the
 * idle time: the batches move to the claimer's journal (so a claimer that
 * dies holds them in turn), the owner's epoch is bumped (its next batches
 * push under a new client id: a push of its newer seqs cannot hide a
 * replay of these below the server's 64-seq window) and its next lease
 * step finds the batch it was leasing gone (fenced). Returns the batches'
 * lines "cid seq L1 E1 ..." (none: an empty array). While the slot
 * migrates, a journal already moved to the other node (this one holds the
 * script's keys) cannot be read here (pcall: an error, not the script's):
 * that consumer is not claimed until the stream has followed. */
static const char ClaimLua[] =
    "local S, MJ, G, me, idle, pre, self = KEYS[1], KEYS[2], ARGV[1], ARGV[2], "
    "tonumber(ARGV[3]), ARGV[4], ARGV[5]\n"
    "local function lines(s) local t = {} for l in string.gmatch(s or '', '[^\\n]+') do "
    "t[#t+1] = l end return t end\n"
    "local t = redis.call('TIME')\n"
    "local now = t[1] * 1000 + math.floor(t[2] / 1000)\n"
    "if self == '1' then\n"
    "  redis.call('HSET', MJ, 't', now)\n"
    "  return lines(redis.call('HGET', MJ, 'b'))\n"
    "end\n"
    "for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', S, G)) do\n"
    "  local name = c[2]\n"
    "  if name ~= me then\n"
    "    local J = pre .. name\n"
    "    local h = redis.pcall('HMGET', J, 'b', 't')\n"
    "    if not h.err and h[1] and h[1] ~= '' and now - (tonumber(h[2] or '0') or 0) > idle then\n"
    "      local got = lines(h[1])\n"
    "      local mine = redis.call('HGET', MJ, 'b')\n"
    "      if mine and mine ~= '' then mine = mine .. '\\n' .. h[1] else mine = h[1] end\n"
    "      redis.call('HSET', MJ, 'b', mine, 't', now)\n"
    "      redis.call('HSET', J, 'b', '')\n"
    "      redis.call('HINCRBY', J, 'ep', 1)\n"
    "      return got\n"
    "    end\n"
    "  end\n"
    "end\n"
    "return {}\n";

/* ---------------------------------------------------------------------- */

static void sw_free(struct streamWork *w) {
    for (int i = 0; i < w->nreplay; i++) sw_replay_free(&w->replay[i]);
    sw_model_free(&w->own);
    if (w->own.c) psClientFree(w->own.c);
    if (w->have_model) ps_ctr_free(&w->m);
    ps_sparse_close(w->lp);
    for (int k = 0; k < 2; k++) sw_batch_free(&w->bt[k]);
    for (int i = 0; i < w->ndense; i++) free(w->dback[i]);
    free(w->grows);
    free(w->wp);
    free(w->wy);
    free(w->wl);
    free(w->hpos);
    free(w->hneg);
    runlog_close(w->log);
    free(w->held);
    free(w->drop);
    free(w->rebuild);
}

/* One claim (self: this consumer's own held batches after a restart), run
 * while the pipeline is empty (batch w->cur is free): every batch taken is
 * read again from its ranges into w->cur and trained under its own push
 * identity (the server answers a duplicate for every key its
 * first push reached and applies it where it did not), then dropped from
 * this consumer's journal once acknowledged. Returns the batches replayed
 * (>= 0) or -1. */
static int claim_once(struct streamWork *w, int self) {
    const trainOpts *o = w->o;
    char idle[24];
    snprintf(idle, sizeof(idle), "%d", o->claim_idle_ms);
    const char *argv[] = {"EVAL", ClaimLua, "2", w->skey, w->jkey, o->group, w->me, idle,
                          w->jpre, self ? "1" : "0"};
    redisReply *r = psCommandArgv(w->own.c, w->skey, 10, argv, NULL);
    w->last_claim = tr_now();
    if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
        char why[300];
        tr_err(o, "[%s] claim (a script on %s %s%s): %s%s", w->me, w->skey, w->jpre,
               self ? w->me : "*",
               r == NULL ? w->own.c->errstr : r->type == REDIS_REPLY_ERROR ? r->str : "bad reply",
               sw_refused(ClaimLua, r && r->type == REDIS_REPLY_ERROR ? r->str : NULL, why,
                          sizeof(why)));
        if (r) freeReplyObject(r);
        return -1;
    }
    int done = 0, rc = 0;
    swBatch *x = w->cur;
    for (size_t i = 0; i < r->elements && rc == 0; i++) {
        const redisReply *l = r->element[i];
        char cid[300];
        unsigned long long seq = 0;
        if (l->type != REDIS_REPLY_STRING || sscanf(l->str, "%299s %llu", cid, &seq) != 2) continue;
        sw_batch_reset(x);
        if (sw_read_ranges(w, x, l->str) < 0) {
            rc = -1;
            break;
        }
        snprintf(x->cid, sizeof(x->cid), "%s", cid);
        x->seq = seq;
        printf("[%s] replaying the journaled batch %s.. (%d entries) of %s, seq %llu\n", w->me,
               x->first, x->nent, cid, seq);
        fflush(stdout);
        if (sw_replay_batch(w, x) != 1 || psDrain(w->own.c) != PS_OK) {
            if (!w->own.c->err) tr_err(o, "[%s] push: %s", w->me, w->own.c->errstr);
            rc = -1;
            break;
        }
        /* Dropped from the journal at once: a drop step also renews its lease
         * time, so the claimer is not claimed from while it replays more. */
        leaseStep ls;
        if (sw_drop_add(w, cid, seq) != 0 || sw_lease(w, 0, &ls, NULL) < 0) {
            rc = -1;
            break;
        }
        w->replays++;
        w->replayed += x->nent;
        done++;
    }
    sw_batch_reset(x);
    freeReplyObject(r);
    return rc < 0 ? -1 : done;
}

static int sw_setup(struct streamWork *w) {
    const trainOpts *o = w->o;
    char err[256], host[64] = "host";
    ps_ctr_config mc;
    if (o->consumer) {
        snprintf(w->me, sizeof(w->me), "%s", o->consumer);
    } else {
        gethostname(host, sizeof(host) - 1);
        snprintf(w->me, sizeof(w->me), "%s-%d", host, (int)getpid());
    }
    if (strlen(w->me) > 100 || strpbrk(w->me, " \t\r\n")) {
        tr_err(o, "--consumer: at most 100 bytes, no blanks");
        return -1;
    }
    snprintf(w->skey, sizeof(w->skey), "%s", o->stream);
    char pre[300];
    if (strlen(o->stream) > 200 || sw_slot_prefix(o->stream, pre, sizeof(pre)) != 0) {
        tr_err(o, "--stream: '%s' must be at most 200 bytes, its braces a hash tag", o->stream);
        return -1;
    }
    snprintf(w->jpre, sizeof(w->jpre), "%spsj:%s:%s:", pre, o->job, o->group);
    snprintf(w->jkey, sizeof(w->jkey), "%s%s", w->jpre, w->me);
    snprintf(w->base, sizeof(w->base), "s:%s:%s:%s", o->job, o->group, w->me);
    snprintf(w->cid, sizeof(w->cid), "%s", w->base);
    tr_key(w->sauc_pre, sizeof(w->sauc_pre), o->job, "sauc:");
    if (tr_open_log(o, &w->log) != 0) return -1;
    if ((w->own.c = tr_connect_as(o, o->window, o->wait, w->cid)) == NULL) return -1;
    int rc = tr_load_config(w->own.c, o->job, &w->cfg);
    if (rc != 0) {
        if (rc > 0) tr_err(o, "no job '%s': make it with ps-train init --model ...", o->job);
        return -1;
    }
    if (!w->cfg.sp.model[0] || strcmp(w->cfg.state, "ready") != 0) {
        tr_err(o, "job %s is %s: ps-train stream trains a ready sparse job (init --model)", o->job,
               w->cfg.sp.model[0] ? "not ready" : "a dense job");
        return -1;
    }
    int batch = o->batch > 0 ? o->batch : w->cfg.batch;
    if (ts_ctr_config(&w->cfg, batch, &mc, err, sizeof(err)) != 0 ||
        ps_ctr_init(&w->m, &mc, w->cfg.seed, err, sizeof(err)) != 0) {
        tr_err(o, "%s", err);
        return -1;
    }
    w->have_model = 1;
    ps_sparse_opts so;
    ts_reader_opts(&w->cfg, &so);
    w->lp = ps_sparse_lines(&so, o->stream);
    w->wp = calloc((size_t)o->auc_window, sizeof(double));
    w->wy = calloc((size_t)o->auc_window, 1);
    w->wl = calloc((size_t)o->auc_window, sizeof(double));
    w->hpos = calloc(SW_BUCKETS, sizeof(long long));
    w->hneg = calloc(SW_BUCKETS, sizeof(long long));
    if (!w->lp || !w->wp || !w->wy || !w->wl || !w->hpos || !w->hneg) {
        tr_err(o, "out of memory");
        return -1;
    }
    if (sw_model_open(w, w->own.c, &w->own, 1) != 0) return -1;
    ts_dense_arrays(&w->m, 0, w->dense);
    ts_dense_arrays(&w->m, 1, w->dgrad);
    w->ndense = ps_ctr_dense_count(&w->m);
    for (int i = 0; i < w->ndense; i++) {
        ps_ctr_dense(&w->m, i, &w->dlen[i], NULL, NULL);
        if ((w->dback[i] = malloc((w->dlen[i] ? w->dlen[i] : 1) * sizeof(float))) == NULL) {
            tr_err(o, "out of memory");
            return -1;
        }
    }
    w->cur = &w->bt[0];
    w->nxt = &w->bt[1];
    redisReply *r = psCommand(w->own.c, w->skey, "XGROUP CREATE %s %s 0 MKSTREAM", w->skey,
                              o->group);
    if (r == NULL || (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "BUSYGROUP", 9) != 0)) {
        char why[200];
        tr_err(o, "XGROUP CREATE %s %s: %s%s", w->skey, o->group, r ? r->str : w->own.c->errstr,
               sw_refused(NULL, r ? r->str : NULL, why, sizeof(why)));
        if (r) freeReplyObject(r);
        return -1;
    }
    freeReplyObject(r);
    r = psCommand(w->own.c, w->jkey, "HGET %s own", w->jkey);
    if (r && r->type == REDIS_REPLY_STRING) w->own_seq = strtoull(r->str, NULL, 10);
    if (r) freeReplyObject(r);
    /* The epoch (bumped by claims of this journal): new batches push under
     * "<base>~<ep>" (the lease step names them; sw_train_batch switches). */
    r = psCommand(w->own.c, w->jkey, "HGET %s ep", w->jkey);
    if (r && r->type == REDIS_REPLY_STRING && strtoll(r->str, NULL, 10) > 0)
        snprintf(w->cid, sizeof(w->cid), "%.250s~%lld", w->base, strtoll(r->str, NULL, 10));
    if (r) freeReplyObject(r);
    if (strcmp(w->cid, w->base) != 0) {
        sw_model_free(&w->own);
        psClientFree(w->own.c);
        if ((w->own.c = tr_connect_as(o, o->window, o->wait, w->cid)) == NULL ||
            sw_model_open(w, w->own.c, &w->own, 0) != 0)
            return -1;
    }
    w->tty = !strcmp(o->progress, "tty") || (!strcmp(o->progress, "auto") && isatty(1));
    w->quiet = !strcmp(o->progress, "none");
    printf("[%s] job %s: model %s, stream %s group %s, batch %d (or %d ms), push id %s\n", w->me,
           o->job, w->cfg.sp.model, w->skey, o->group, batch, o->batch_ms, w->cid);
    fflush(stdout);
    return 0;
}

int tr_cmd_stream(const trainOpts *o) {
    struct streamWork w;
    memset(&w, 0, sizeof(w));
    w.o = o;
    tw_catch_signals();
    int rc = TR_EXIT_FAIL;
    if (sw_setup(&w) != 0) goto out;
    int batch = o->batch > 0 ? o->batch : w.cfg.batch;
    w.t0 = w.last_print = w.last_event = tr_now();
    RUNLOG(w.log, "start", RL_STR("worker", w.me), RL_STR("stream", w.skey),
           RL_STR("group", o->group), RL_STR("model", w.cfg.sp.model), RL_INT("batch", batch));
    /* A restart under the same name: the batches its journal holds first. */
    if (claim_once(&w, 1) < 0) goto out;
    double claim_every = sw_claim_every(&w);
    while (!tw_stop) {
        swBatch *x = w.cur;
        /* The pipeline is empty (no batch read ahead, no lease step in
         * flight) when x holds nothing yet: the time for claims. */
        if (!x->closed && x->nent == 0 && !w.ahead_on) {
            if (o->max_events && w.trained + w.malformed >= o->max_events) break;
            if (sw_claim_due(&w)) {
                double t = tr_now();
                int k = claim_once(&w, 0);
                sw_phase(&w, SWP_CLAIM, &t);
                if (k < 0) goto out;
                w.claimed += k;
                if (k > 0) {
                    sw_progress(&w, 0);
                    continue;
                }
            }
        }
        if (!x->closed) {
            int block = 1000;
            if (o->idle_exit) {
                int left = o->idle_exit - (int)((tr_now() - w.last_event) * 1000.0);
                if (left < block) block = left < 1 ? 1 : left;
            }
            if (claim_every * 1000 < block) block = (int)(claim_every * 1000) + 1;
            int got = sw_read_batch(&w, x, block);
            if (got < 0) goto out;
            if (got == 0) {
                if (o->idle_exit && (tr_now() - w.last_event) * 1000.0 >= o->idle_exit) break;
                double t = tr_now();
                sw_progress(&w, 0);
                sw_phase(&w, SWP_REPORT, &t);
                continue;
            }
        }
        /* x is trained (and the batch after it read ahead, pulled and leased
         * further while it is: stream_batch.c); then the next one is x. */
        if (sw_train_batch(&w, &w.own, 1, x) < 0) goto out;
        w.cur = w.nxt;
        w.nxt = x;
        sw_batch_reset(x);
        double t = tr_now();
        sw_progress(&w, 0);
        sw_phase(&w, SWP_REPORT, &t);
    }
    /* Settle and drain, then drop the last batch from the journal (a lease
     * step that reads nothing). A batch leased but not trained (stopped, or
     * read ahead) stays in the journal: a claimer, or a restart under this
     * name, trains it. */
    if (sw_settle(&w) != 0) goto out;
    if (psDrain(w.own.c) != PS_OK) {
        tr_err(o, "[%s] push: %s", w.me, w.own.c->errstr);
        goto out;
    }
    if (w.tseq && sw_drop_add(&w, w.tcid, w.tseq) != 0) goto out;
    w.tseq = 0;
    {
        leaseStep ls;
        if (sw_lease(&w, 0, &ls, NULL) < 0) goto out;
    }
    sw_progress(&w, 1);
    printf("STREAM worker=%s events=%lld malformed=%lld batches=%lld claimed=%lld replays=%lld "
           "replayed=%lld fenced=%lld journal_wait_short=%lld piped=%lld seconds=%.3f", w.me,
           w.trained, w.malformed, w.batches, w.claimed, w.replays, w.replayed, w.fenced,
           w.jshort_total, w.piped, tr_now() - w.t0);
    {
        static const char *const names[SWP_N] = SW_PHASE_NAMES;
        for (int k = 0; k < SWP_N; k++) printf(" t_%s=%.1f", names[k], w.tp[k] * 1000.0);
        printf("\n");
    }
    fflush(stdout);
    rc = tw_stop ? TR_EXIT_INTERRUPTED : TR_EXIT_OK;
out:
    sw_free(&w);
    return rc;
}
