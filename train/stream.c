/* stream.c -- `ps-train stream`: online training of a sparse CTR job from a
 * Redis Stream of events, each trained exactly once across worker crashes,
 * with progressive validation (docs/design.md "Stream consumption").
 *
 * The job (its model, table and dense tensors) is made by `ps-train init
 * --model lr|fm|mlp` as for file training; its config gives the model and
 * the line format. An event is one stream entry whose field --field holds
 * one libsvm or Criteo line. Consumers of group --group read batches
 * (XREADGROUP, closed at --batch events or after --batch-ms, whichever
 * first; an idle stream blocks in XREADGROUP BLOCK).
 *
 * Exactly once. Consumer C pushes under the client id "s:<job>:<group>:<C>"
 * with one seq per batch (psSetPushSeq: the same seq on every key the batch
 * pushes to). Before a batch is pushed, C's journal (a hash in the stream's
 * cluster slot, "<tag>psj:<job>:<group>:<C>") records it: the push identity
 * (cid, seq) and the batch's entry ids. One Lua script, atomically: XACKs
 * the batch journaled before (its push was acknowledged: the worker drained
 * first), checks that C still owns every entry of the new batch (a claimer
 * may have taken them: then the batch is dropped, "fenced") and journals it.
 * A claimer (entries idle > --claim-idle-ms on consumer X) runs a second
 * script that, atomically, XACKs its own journaled batch, reads X's journal
 * and, when its entries are still pending, claims exactly them and copies
 * X's journal into its own: it then trains that batch again under X's push
 * identity (the server answers a duplicate for every key the first push
 * reached, and applies it where it did not); otherwise it claims X's idle
 * entries, which X never journaled (so never pushed), and trains them as a
 * new batch of its own. A restart under the same --consumer name does the
 * same with its own journal and pending entries first.
 * With --wait N the journal step ends in "WAIT N" on the stream's node and
 * the batch is pushed only after it (journal_wait_send): a failover of that
 * node then cannot lose a journal whose push stands.
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

#define SJ_CHUNK "512"

/* The claim: XACK the own journaled batch, then take over a batch.
 * KEYS: stream, own journal. ARGV: group, consumer, idle ms, count,
 * journal prefix, self (1: own pending entries, any idle), strays (1: this
 * consumer's own idle entries may be ones it never saw, see journal_send:
 * take them too).
 * Returns {0} (nothing), {1, cid, seq, entries} (a journaled batch to train
 * again under its push identity) or {2, '', '', entries} (entries never
 * journaled: a new batch). */
static const char ClaimLua[] =
    "local S, MJ, G, me, idle, cnt, pre, self = KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3], "
    "tonumber(ARGV[4]), ARGV[5], ARGV[6]\n"
    "local function split(s) local t = {} for w in string.gmatch(s or '', '%S+') do t[#t+1] = w "
    "end return t end\n"
    "local function claim(ids, minidle)\n"
    "  local got = {}\n"
    "  for i = 1, #ids, " SJ_CHUNK " do\n"
    "    local a = {S, G, me, minidle}\n"
    "    for k = i, math.min(i + " SJ_CHUNK " - 1, #ids) do a[#a+1] = ids[k] end\n"
    "    for _, e in ipairs(redis.call('XCLAIM', unpack(a))) do if e then got[#got+1] = e end end\n"
    "  end\n"
    "  return got\n"
    "end\n"
    "local old = split(redis.call('HGET', MJ, 'ids'))\n"
    "for i = 1, #old, " SJ_CHUNK " do\n"
    "  local a = {} for k = i, math.min(i + " SJ_CHUNK " - 1, #old) do a[#a+1] = old[k] end\n"
    "  redis.call('XACK', S, G, unpack(a))\n"
    "end\n"
    "if #old > 0 then redis.call('HSET', MJ, 'ids', '') end\n"
    "local p, owner\n"
    "if self == '1' then\n"
    "  owner = me\n"
    "  p = redis.call('XPENDING', S, G, '-', '+', cnt, me)\n"
    "else\n"
    "  p = redis.call('XPENDING', S, G, 'IDLE', idle, '-', '+', cnt)\n"
    "  for _, e in ipairs(p) do if e[2] ~= me then owner = e[2] break end end\n"
    "  if not owner and ARGV[7] ~= '1' then return {0} end\n"
    "  if not owner then\n"
    "    local ids = {} for _, e in ipairs(p) do ids[#ids+1] = e[1] end\n"
    "    if #ids == 0 then return {0} end\n"
    "    local got = claim(ids, 0)\n"
    "    if #got == 0 then return {0} end\n"
    "    return {2, '', '', got}\n"
    "  end\n"
    "end\n"
    "local j = redis.call('HMGET', pre .. owner, 'cid', 'seq', 'ids')\n"
    "local jids = split(j[3])\n"
    "if #jids > 0 then\n"
    "  local got = claim(jids, 0)\n"
    "  if #got > 0 then\n"
    "    local g = {} for _, e in ipairs(got) do g[#g+1] = e[1] end\n"
    "    redis.call('HSET', MJ, 'cid', j[1], 'seq', j[2], 'ids', table.concat(g, ' '))\n"
    "    return {1, j[1], j[2], got}\n"
    "  end\n"
    "end\n"
    "local inj = {} for _, id in ipairs(jids) do inj[id] = true end\n"
    "local ids = {}\n"
    "for _, e in ipairs(p) do if e[2] == owner and not inj[e[1]] then ids[#ids+1] = e[1] end end\n"
    "if #ids == 0 then return {0} end\n"
    "local got = claim(ids, self == '1' and 0 or idle)\n"
    "if #got == 0 then return {0} end\n"
    "return {2, '', '', got}\n";

/* ---------------------------------------------------------------------- */

static void sw_free(struct streamWork *w) {
    sw_model_free(&w->own);
    if (w->own.c) psClientFree(w->own.c);
    if (w->have_model) ps_ctr_free(&w->m);
    ps_sparse_close(w->lp);
    ps_sparse_batch_free(&w->b);
    ps_ctr_unique_free(&w->u);
    free(w->rows);
    free(w->grows);
    free(w->ids);
    free(w->wp);
    free(w->wy);
    free(w->wl);
    free(w->hpos);
    free(w->hneg);
    runlog_close(w->log);
    if (w->pre) freeReplyObject(w->pre);
    free(w->old);
}

/* One claim (self: this consumer's own pending entries after a restart).
 * Returns 1 when a batch was taken and trained, 0 none, -1 error. */
static int claim_once(struct streamWork *w, int self) {
    const trainOpts *o = w->o;
    char idle[24], count[24];
    if (psDrain(w->own.c) != PS_OK) {
        tr_err(o, "[%s] push: %s", w->me, w->own.c->errstr);
        return -1;
    }
    snprintf(idle, sizeof(idle), "%d", o->claim_idle_ms);
    snprintf(count, sizeof(count), "%d", o->batch > 0 ? o->batch : w->cfg.batch);
    int strays = w->exact || w->own.c->stats.retries + w->own.c->stats.reconnects != w->resent;
    const char *argv[] = {"EVAL", ClaimLua, "2", w->skey, w->jkey, o->group, w->me, idle, count,
                          w->jpre, self ? "1" : "0", strays ? "1" : "0"};
    redisReply *r = psCommandArgv(w->own.c, w->skey, 12, argv, NULL);
    w->last_claim = tr_now();
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements < 1) {
        tr_err(o, "[%s] claim: %s", w->me,
               r == NULL ? w->own.c->errstr : r->type == REDIS_REPLY_ERROR ? r->str : "bad reply");
        if (r) freeReplyObject(r);
        return -1;
    }
    long long kind = r->element[0]->integer;
    w->oldlen = 0;  /* the script XACKed the journaled batch */
    if (kind == 0 || r->elements != 4) {
        freeReplyObject(r);
        return 0;
    }
    sw_batch_reset(w);
    const redisReply *es = r->element[3];
    for (size_t i = 0; es->type == REDIS_REPLY_ARRAY && i < es->elements; i++)
        if (sw_take_entry(w, es->element[i]) != 0) {
            freeReplyObject(r);
            tr_err(o, "out of memory");
            return -1;
        }
    int rc;
    if (kind == 1) {
        char cid[300];
        snprintf(cid, sizeof(cid), "%s", r->element[1]->str);
        uint64_t seq = strtoull(r->element[2]->str, NULL, 10);
        printf("[%s] replaying the journaled batch %s.. (%d entries) of %s, seq %llu\n", w->me,
               w->first, w->nent, cid, (unsigned long long)seq);
        fflush(stdout);
        if (sw_set_old(w, w->ids ? w->ids : "", w->idlen) != 0) {
            freeReplyObject(r);
            tr_err(o, "out of memory");
            return -1;
        }
        rc = sw_replay_batch(w, cid, seq);
        if (rc == 1) {
            w->replays++;
            w->replayed += w->nent;
        }
    } else {
        uint64_t seq = tr_wall() * 1e6 > w->own_seq + 1 ? (uint64_t)(tr_wall() * 1e6)
                                                        : w->own_seq + 1;
        w->own_seq = seq;
        rc = sw_train_batch(w, &w->own, 1, w->cid, seq);
        if (rc == 1) w->claimed += w->nent;
        if (rc == 0) rc = 1;
    }
    freeReplyObject(r);
    return rc < 0 ? -1 : 1;
}

/* ---------------------------------------------------------------------- */

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
    snprintf(w->cid, sizeof(w->cid), "s:%s:%s:%s", o->job, o->group, w->me);
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
    redisReply *r = psCommand(w->own.c, w->skey, "XGROUP CREATE %s %s 0 MKSTREAM", w->skey,
                              o->group);
    if (r == NULL || (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "BUSYGROUP", 9) != 0)) {
        tr_err(o, "XGROUP CREATE %s %s: %s", w->skey, o->group, r ? r->str : w->own.c->errstr);
        if (r) freeReplyObject(r);
        return -1;
    }
    freeReplyObject(r);
    r = psCommand(w->own.c, w->jkey, "HGET %s own", w->jkey);
    if (r && r->type == REDIS_REPLY_STRING) w->own_seq = strtoull(r->str, NULL, 10);
    if (r) freeReplyObject(r);
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
    /* A restart under the same name: its journaled batch, then its pending entries
     * (the journal checks every id meanwhile: the pending list is not known yet). */
    w.exact = 1;
    for (;;) {
        int k = claim_once(&w, 1);
        if (k < 0) goto out;
        if (k == 0) break;
    }
    w.exact = w.fenced > 0;
    w.resent = w.own.c->stats.retries + w.own.c->stats.reconnects;
    double claim_every = o->claim_idle_ms / 4000.0;
    if (claim_every < 0.05) claim_every = 0.05;
    while (!tw_stop) {
        if (o->max_events && w.trained + w.malformed >= o->max_events) break;
        if (tr_now() - w.last_claim >= claim_every) {
            int k = claim_once(&w, 0);
            if (k < 0) goto out;
            if (k > 0) {
                sw_progress(&w, 0);
                continue;
            }
        }
        sw_batch_reset(&w);
        int want = batch;
        if (o->max_events && o->max_events - w.trained - w.malformed < want)
            want = (int)(o->max_events - w.trained - w.malformed);
        int block = 1000;
        if (o->idle_exit) {
            int left = o->idle_exit - (int)((tr_now() - w.last_event) * 1000.0);
            if (left < block) block = left < 1 ? 1 : left;
        }
        if (claim_every * 1000 < block) block = (int)(claim_every * 1000) + 1;
        int got = sw_read_batch(&w, want, block);
        if (got < 0) goto out;
        if (got == 0) {
            if (o->idle_exit && (tr_now() - w.last_event) * 1000.0 >= o->idle_exit) break;
            sw_progress(&w, 0);
            continue;
        }
        uint64_t seq = (uint64_t)(tr_wall() * 1e6);
        if (seq <= w.own_seq) seq = w.own_seq + 1;
        w.own_seq = seq;
        /* The journal step may read the next batch (none when --max-events is reached
         * by this one). */
        w.want = batch;
        if (o->max_events) {
            long long left = o->max_events - w.trained - w.malformed - w.nent;
            w.want = left < 0 ? 0 : left < batch ? (int)left : batch;
        }
        if (sw_train_batch(&w, &w.own, 1, w.cid, seq) < 0) goto out;
        sw_progress(&w, 0);
    }
    /* Drain, then XACK the last batch (a journal of none). */
    if (psDrain(w.own.c) != PS_OK) {
        tr_err(o, "[%s] push: %s", w.me, w.own.c->errstr);
        goto out;
    }
    sw_batch_reset(&w);
    if (sw_journal(&w, w.cid, w.own_seq) < 0) goto out;
    sw_progress(&w, 1);
    printf("STREAM worker=%s events=%lld malformed=%lld batches=%lld claimed=%lld replays=%lld "
           "replayed=%lld fenced=%lld journal_wait_short=%lld seconds=%.3f\n", w.me, w.trained,
           w.malformed, w.batches, w.claimed, w.replays, w.replayed, w.fenced, w.jshort_total,
           tr_now() - w.t0);
    fflush(stdout);
    rc = tw_stop ? TR_EXIT_INTERRUPTED : TR_EXIT_OK;
out:
    sw_free(&w);
    return rc;
}
