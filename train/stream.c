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
#include "sparse.h"
#include "stream.h"
#include "tasks.h"
#include "util.h"
#include "wirefmt.h"

#define SJ_CHUNK "512"

/* The journal: check that the consumer still owns every entry of the new
 * batch (a claim may have taken some: then the batch is "fenced") and
 * journal it. KEYS: stream, journal. ARGV: group, consumer, cid, seq, own,
 * exact, the entry ids joined by spaces, their count (0: the journal is
 * emptied). Returns 1 or -1 (fenced). With exact 0 the caller
 * knows its pending list holds nothing but this batch (see journal_send), so
 * an unchanged count of its pending entries (XPENDING summary) proves that
 * nothing was taken; otherwise, or when the count differs, every id is
 * looked up. The XACK of the batch journaled before and the XREADGROUP of
 * the next batch go in the same pipeline (journal_send). */
static const char JournalLua[] =
    "local S, J, G, me = KEYS[1], KEYS[2], ARGV[1], ARGV[2]\n"
    "local n = tonumber(ARGV[8])\n"
    "if n > 0 then\n"
    "  local ok = false\n"
    "  if ARGV[6] == '0' then\n"
    "    local s = redis.call('XPENDING', S, G)\n"
    "    for _, c in ipairs(s[4] or {}) do if c[1] == me then ok = tonumber(c[2]) == n end end\n"
    "  end\n"
    "  if not ok then\n"
    "    local ids = {} for w in string.gmatch(ARGV[7], '%S+') do ids[#ids+1] = w end\n"
    "    local p = redis.call('XPENDING', S, G, ids[1], ids[#ids], n + 256, me)\n"
    "    local mine = {} for _, e in ipairs(p) do mine[e[1]] = true end\n"
    "    ok = true\n"
    "    for _, id in ipairs(ids) do if not mine[id] then ok = false break end end\n"
    "    if not ok and #p >= n + 256 then\n"
    "      ok = true\n"
    "      for _, id in ipairs(ids) do\n"
    "        if #redis.call('XPENDING', S, G, id, id, 1, me) == 0 then ok = false break end\n"
    "      end\n"
    "    end\n"
    "  end\n"
    "  if not ok then redis.call('HSET', J, 'ids', '', 'own', ARGV[5]) return -1 end\n"
    "end\n"
    "redis.call('HSET', J, 'cid', ARGV[3], 'seq', ARGV[4], 'own', ARGV[5], 'ids', ARGV[7])\n"
    "return 1\n";

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

/* Adds pairs (field, count) to the hash KEYS[1] and keeps it SW_KEEP_S. */
#define SW_STR_(x) #x
#define SW_STR(x) SW_STR_(x)
static const char HistLua[] =
    "for i = 1, #ARGV, 2 do redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i+1]) end\n"
    "redis.call('EXPIRE', KEYS[1], " SW_STR(SW_KEEP_S) ")\n"
    "return 1\n";

/* The pieces of one worker's model: the job's table and dense tensors on
 * one client (the worker's own, or a replay's under another push ID). */
typedef struct swModel {
    psClient *c;
    psEmbed *e;
    psModel *dm;                /* the job's dense tensors */
    psModel *cm;                /* stream_events: [trained, malformed] */
} swModel;

typedef struct streamWork {
    const trainOpts *o;
    jobConfig cfg;
    ps_ctr_model m;
    int have_model;
    swModel own;
    char me[128], cid[300], skey[256], jkey[512], jpre[512], sauc_pre[160];
    uint64_t own_seq;           /* the last seq of this consumer's own batches */
    ps_sparse_reader *lp;       /* the line parser */
    ps_sparse_batch b;
    ps_ctr_unique u;
    float *rows, *grows;
    size_t cap;
    int ndense;
    float *dense[2 * (PS_CTR_MAX_HIDDEN + 1)];
    float *dgrad[2 * (PS_CTR_MAX_HIDDEN + 1)];
    /* The batch being built: its entry ids, space separated, and counts. */
    char *ids;
    size_t idlen, idcap;
    int nent, nbad;
    char first[48];
    /* Totals of this run. */
    long long trained, malformed, batches, fenced, replays, replayed, claimed, dups;
    double t0, last_print, last_event, last_claim;
    long long last_trained;
    /* Progressive validation: the window ring and the histogram to flush. */
    double *wp;
    unsigned char *wy;
    long long wn;               /* events ever put in the ring */
    double wloss;               /* logloss summed over the ring */
    double *wl;
    long long *hpos, *hneg;
    int hdirty;
    runLog *log;
    int tty, quiet;
    int want;                   /* events the next batch may take (prefetch) */
    char *old;                  /* the entry ids journaled last (space separated) */
    int exact;                  /* the journal checks every id (journal_send) */
    uint64_t resent;            /* retries + reconnects of the client when 'exact' was set */
    size_t oldlen, oldcap;
    redisReply *pre;            /* entries the journal step read for the next batch */
    int jshort;                 /* the last journal WAIT came back short */
    long long jshort_total;     /* journal WAITs answered short */
    double jprobe;              /* degraded: when the journal WAITs again */
} streamWork;

static int sw_flush_hist(struct streamWork *w);

/* ---------------------------------------------------------------------- */

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

static void sw_model_free(swModel *sm) {
    psModelFree(sm->cm);
    psModelFree(sm->dm);
    psEmbedFree(sm->e);
    sm->cm = sm->dm = NULL;
    sm->e = NULL;
}

/* The job's table, dense tensors and the counter tensor on client 'c'.
 * 0 or -1 (printed). */
static int sw_model_open(struct streamWork *w, psClient *c, swModel *sm, int create) {
    const trainOpts *o = w->o;
    pushFormat pf;
    psWireFormat pullf;
    uint64_t two = 2;
    memset(sm, 0, sizeof(*sm));
    sm->c = c;
    if ((sm->e = ts_table(o->job, &w->cfg, ps_ctr_row_dim(&w->m))) == NULL ||
        (sm->dm = ts_dense_model(c, o->job, &w->m)) == NULL || (sm->cm = psModelNew(o->job)) == NULL ||
        psModelAddTensor(sm->cm, "stream_events", 1, &two) < 0 || psModelLayout(c, sm->cm) != PS_OK) {
        tr_err(o, "job %s: cannot lay out the table and tensors", o->job);
        return -1;
    }
    if (create && psModelCreate(c, sm->cm, "INIT ZEROS OPTIM SGD LR 1", 1) < 0) {
        tr_err(o, "PS.CREATE %s: %s", psModelPartitionKey(sm->cm, 0, 0), c->errstr);
        return -1;
    }
    if (tr_parse_push(w->cfg.push_format[0] ? w->cfg.push_format : NULL, &pf) != 0 ||
        tr_parse_wire(o->pull_format, 0, &pullf) != 0 || psEmbedSetPushFormat(sm->e, pf.fmt) != PS_OK ||
        tr_push_apply(sm->dm, &pf) != PS_OK || psEmbedSetPullFormat(sm->e, pullf) != PS_OK ||
        psModelSetPullFormat(sm->dm, pullf) != PS_OK) {
        tr_err(o, "job %s: sparse jobs push f32, bf16 or f16 and pull f32, bf16 or f16", o->job);
        return -1;
    }
    return 0;
}

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

/* Remembers 'ids' (len bytes) as the batch journaled last. 0 or -1. */
static int set_old(struct streamWork *w, const char *ids, size_t len) {
    if (len + 1 > w->oldcap) {
        char *n = realloc(w->old, len + 1);
        if (n == NULL) return -1;
        w->old = n;
        w->oldcap = len + 1;
    }
    if (len) memcpy(w->old, ids, len);
    w->oldlen = len;
    w->old[len] = '\0';
    return 0;
}

/* Appends the space-separated ids of s[0..len) to argv/argl from *argc on. */
static void split_ids(const char *s, size_t len, const char **argv, size_t *argl, int *argc) {
    size_t i = 0;
    while (i < len) {
        while (i < len && s[i] == ' ') i++;
        size_t j = i;
        while (j < len && s[j] != ' ') j++;
        if (j > i) {
            argv[*argc] = s + i;
            argl[(*argc)++] = j - i;
        }
        i = j;
    }
}

static void batch_reset(struct streamWork *w) {
    ps_sparse_batch_clear(&w->b);
    w->idlen = 0;
    if (w->ids) w->ids[0] = '\0';
    w->nent = w->nbad = 0;
    w->first[0] = '\0';
}

static int ids_add(struct streamWork *w, const char *id, size_t len) {
    if (w->idlen + len + 2 > w->idcap) {
        size_t cap = (w->idcap ? w->idcap * 2 : 1 << 14) + len;
        char *n = realloc(w->ids, cap);
        if (n == NULL) return -1;
        w->ids = n;
        w->idcap = cap;
    }
    if (w->idlen) w->ids[w->idlen++] = ' ';
    memcpy(w->ids + w->idlen, id, len);
    w->idlen += len;
    w->ids[w->idlen] = '\0';
    return 0;
}

/* Adds entry e = [id, [field, value, ...]] to the batch: its line parsed, or
 * counted malformed (logged with its id). 0, or -1 out of memory. */
static int take_entry(struct streamWork *w, const redisReply *e) {
    char err[512];
    if (e == NULL || e->type != REDIS_REPLY_ARRAY || e->elements != 2 ||
        e->element[0]->type != REDIS_REPLY_STRING)
        return 0;
    const redisReply *id = e->element[0], *f = e->element[1];
    if (ids_add(w, id->str, id->len) != 0) return -1;
    if (!w->first[0]) snprintf(w->first, sizeof(w->first), "%s", id->str);
    w->nent++;
    const redisReply *line = NULL;
    for (size_t i = 0; f->type == REDIS_REPLY_ARRAY && i + 1 < f->elements; i += 2)
        if (f->element[i]->type == REDIS_REPLY_STRING && !strcmp(f->element[i]->str, w->o->field) &&
            f->element[i + 1]->type == REDIS_REPLY_STRING)
            line = f->element[i + 1];
    if (line == NULL)
        snprintf(err, sizeof(err), "no field '%s'", w->o->field);
    else if (ps_sparse_add_line(w->lp, &w->b, line->str, line->len, err, sizeof(err)) == 0)
        return 0;
    w->nbad++;
    fprintf(stderr, "[%s] malformed entry %s of %s: %s (skipped)\n", w->me, id->str, w->skey, err);
    RUNLOG(w->log, "malformed", RL_STR("worker", w->me), RL_STR("stream", w->skey),
           RL_STR("id", id->str), RL_STR("error", err));
    return 0;
}

/* Reads up to --batch new entries: blocks until the first (at most
 * 'block_ms'), then until the batch is full or --batch-ms passed since.
 * Returns the entries taken (>= 0) or -1 (printed). */
/* Takes the entries of an XREADGROUP reply [[stream, [entry, ...]]].
 * Returns how many, or -1 out of memory. */
static int take_entries(struct streamWork *w, const redisReply *r) {
    int got = 0;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
        r->element[0]->type == REDIS_REPLY_ARRAY && r->element[0]->elements == 2) {
        const redisReply *es = r->element[0]->element[1];
        for (size_t i = 0; es->type == REDIS_REPLY_ARRAY && i < es->elements; i++) {
            if (take_entry(w, es->element[i]) != 0) return -1;
            got++;
        }
    }
    return got;
}

static int read_batch(struct streamWork *w, int want, int block_ms) {
    const trainOpts *o = w->o;
    double start = 0;
    if (w->pre) {
        int got = take_entries(w, w->pre);
        freeReplyObject(w->pre);
        w->pre = NULL;
        if (got < 0) {
            tr_err(o, "out of memory");
            return -1;
        }
        if (got > 0) start = tr_now();
    }
    while (w->nent < want && !tw_stop) {
        int ms = block_ms;
        if (w->nent > 0) {
            ms = o->batch_ms - (int)((tr_now() - start) * 1000.0);
            if (ms < 1) break;
        }
        char count[24], block[24];
        snprintf(count, sizeof(count), "%d", want - w->nent);
        snprintf(block, sizeof(block), "%d", ms);
        const char *argv[] = {"XREADGROUP", "GROUP", o->group, w->me, "COUNT", count, "BLOCK",
                              block, "STREAMS", w->skey, ">"};
        redisReply *r = psCommandArgv(w->own.c, w->skey, 11, argv, NULL);
        if (r == NULL || r->type == REDIS_REPLY_ERROR) {
            tr_err(o, "[%s] XREADGROUP %s: %s", w->me, w->skey, r ? r->str : w->own.c->errstr);
            if (r) freeReplyObject(r);
            return -1;
        }
        int got = take_entries(w, r);
        freeReplyObject(r);
        if (got < 0) {
            tr_err(o, "out of memory");
            return -1;
        }
        if (got && start == 0) start = tr_now();
        if (!got && w->nent == 0) break; /* blocked block_ms for nothing */
        if (!got) break;                 /* --batch-ms passed */
    }
    return w->nent;
}

/* Runs the journal script for the batch built (ids "" : none, just the XACK
 * of the one before). Returns 1 journaled, 0 fenced, -1 error (printed). */
/* The commands of one journal step in flight (journal_send). */
typedef struct journalStep {
    psAsync *ack, *eval, *read, *wait;
} journalStep;

/* With --wait N: "WAIT N" on the stream's node, after the journal step. A
 * batch is pushed only once its journal (and the XREADGROUP that made its
 * entries pending) reached N replicas: otherwise a master killed before
 * replicating them leaves a promoted replica that delivers the entries again
 * as new, while the push that trained them (on another master, or WAITed
 * there) stands: trained twice. NULL on error (errstr set). */
static psAsync *journal_wait_send(struct streamWork *w) {
    char n[24], ms[24];
    snprintf(n, sizeof(n), "%d", w->o->wait);
    snprintf(ms, sizeof(ms), "%d", PS_DEFAULT_WAIT_TIMEOUT_MS);
    const char *x[] = {"WAIT", n, ms};
    return psCommandArgvAsync(w->own.c, w->skey, 3, x, NULL);
}

/* The WAIT of a journal step answered 'r': 0 replicated (or short under
 * --on-degraded degrade: counted, announced once per outage, and the next
 * WAIT sent a probe interval later), -1 short under fail (printed). Under block the WAIT is repeated here until it is
 * answered in full (or the worker is told to stop). */
static int journal_waited(struct streamWork *w, redisReply *r) {
    int pol = PS_DURABILITY_DEGRADE, lost;
    tr_parse_policies(w->o, &pol, &lost);
    for (;;) {
        long long got = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
        if (r && r->type == REDIS_REPLY_ERROR) {
            tr_err(w->o, "[%s] WAIT %d on the stream's node: %s", w->me, w->o->wait, r->str);
            freeReplyObject(r);
            return -1;
        }
        if (r) freeReplyObject(r);
        if (got >= w->o->wait) {
            if (w->jshort) fprintf(stderr, "[%s] journal: WAIT %d answered in full again\n", w->me,
                                   w->o->wait);
            w->jshort = 0;
            return 0;
        }
        w->jshort_total++;
        if (!w->jshort)
            fprintf(stderr, "[%s] journal: WAIT %d on the stream's node answered %lld (policy %s)\n",
                    w->me, w->o->wait, got, w->o->on_degraded ? w->o->on_degraded : "degrade");
        w->jshort = 1;
        w->jprobe = tr_now() + PS_DEFAULT_PROBE_MS / 1000.0;
        if (pol == PS_DURABILITY_FAIL) {
            tr_err(w->o, "[%s] journal not replicated to %d replicas (--on-degraded fail)", w->me,
                   w->o->wait);
            return -1;
        }
        if (pol != PS_DURABILITY_BLOCK || tw_stop) return 0;
        psAsync *a = journal_wait_send(w);
        r = a ? psCommandWait(w->own.c, a) : NULL;
        if (r == NULL) {
            tr_err(w->o, "[%s] WAIT: %s", w->me, w->own.c->errstr);
            return -1;
        }
    }
}

/* Sends, pipelined to the stream's node: the XACK of the batch journaled
 * before (its pushes were acknowledged), the fence-and-journal script of
 * the batch built, and (w->want > 0) a non-blocking XREADGROUP of the next
 * batch's entries. 0, or -1 (printed; what was sent is waited for). */
static int journal_send(struct streamWork *w, const char *cid, uint64_t seq, journalStep *js) {
    const trainOpts *o = w->o;
    char s_seq[24], s_own[24], s_want[24];
    int nold = 4, nnew = 14, k = 0, rc = -1;
    memset(js, 0, sizeof(*js));
    snprintf(s_seq, sizeof(s_seq), "%llu", (unsigned long long)seq);
    snprintf(s_own, sizeof(s_own), "%llu", (unsigned long long)w->own_seq);
    snprintf(s_want, sizeof(s_want), "%d", w->want);
    for (size_t i = 0; i < w->oldlen; i++) nold += w->old[i] == ' ';
    for (size_t i = 0; i < w->idlen; i++) nnew += w->ids[i] == ' ';
    int cap = nold > nnew ? nold : nnew;
    const char **av = malloc((size_t)cap * sizeof(char *));
    size_t *al = malloc((size_t)cap * sizeof(size_t));
    if (av == NULL || al == NULL) {
        tr_err(o, "out of memory");
        goto out;
    }
    if (w->oldlen) {
        const char *x[] = {"XACK", w->skey, o->group};
        for (k = 0; k < 3; k++) {
            av[k] = x[k];
            al[k] = strlen(x[k]);
        }
        split_ids(w->old, w->oldlen, av, al, &k);
        if ((js->ack = psCommandArgvAsync(w->own.c, w->skey, k, av, al)) == NULL) goto fail;
    }
    {
        /* Exact unless this consumer's pending list is known to hold only this
         * batch: after a fence (its rest stays pending here), a resent command (a
         * lost XREADGROUP reply delivers entries this process never saw) or
         * before the restart's own pending entries were all taken back. */
        uint64_t resent = w->own.c->stats.retries + w->own.c->stats.reconnects;
        int exact = w->exact || resent != w->resent;
        char s_n[24];
        snprintf(s_n, sizeof(s_n), "%d", w->idlen ? nnew - 13 : 0);
        const char *x[] = {"EVAL", JournalLua, "2", w->skey, w->jkey, o->group, w->me, cid,
                           s_seq, s_own, exact ? "1" : "0", w->ids ? w->ids : "", s_n};
        for (k = 0; k < 13; k++) {
            av[k] = x[k];
            al[k] = k == 11 ? w->idlen : strlen(x[k]);
        }
        if ((js->eval = psCommandArgvAsync(w->own.c, w->skey, k, av, al)) == NULL) goto fail;
    }
    if (w->want > 0 && w->idlen && !w->pre) {
        const char *x[] = {"XREADGROUP", "GROUP", o->group, w->me, "COUNT", s_want, "STREAMS",
                           w->skey, ">"};
        if ((js->read = psCommandArgvAsync(w->own.c, w->skey, 9, x, NULL)) == NULL) goto fail;
    }
    /* Degraded (a WAIT came back short; policy degrade): no WAIT until the
     * next probe, as libps does for pushes, or every batch would pay its
     * timeout. */
    if (o->wait > 0 && (!w->jshort || tr_now() >= w->jprobe) &&
        (js->wait = journal_wait_send(w)) == NULL)
        goto fail;
    rc = 0;
    goto out;
fail:
    tr_err(o, "[%s] journal %s: %s", w->me, w->jkey, w->own.c->errstr);
out:
    free(av);
    free(al);
    return rc;
}

/* Waits for the commands of journal_send. Returns 1 journaled, 0 fenced,
 * -1 error (printed). The entries read go to w->pre (the next batch). */
static int journal_wait(struct streamWork *w, journalStep *js) {
    psAsync *as[4] = {js->ack, js->eval, js->read, js->wait};
    redisReply *rs[4] = {NULL, NULL, NULL, NULL};
    int rc = 1;
    for (int i = 0; i < 4; i++) {
        if (as[i] == NULL) continue;
        rs[i] = psCommandWait(w->own.c, as[i]);
        if ((rs[i] == NULL || rs[i]->type == REDIS_REPLY_ERROR) && rc == 1) {
            tr_err(w->o, "[%s] journal %s: %s", w->me, w->jkey,
                   rs[i] ? rs[i]->str : w->own.c->errstr);
            rc = -1;
        }
    }
    memset(js, 0, sizeof(*js));
    if (as[3] && rc == 1) {
        if (journal_waited(w, rs[3]) != 0) rc = -1;
        rs[3] = NULL;               /* freed by journal_waited */
    }
    if (rc == 1 && (rs[1] == NULL || rs[1]->type != REDIS_REPLY_INTEGER)) {
        tr_err(w->o, "[%s] journal %s: bad reply", w->me, w->jkey);
        rc = -1;
    }
    if (rc == 1) {
        rc = rs[1]->integer == 1;
        if (set_old(w, rc ? w->ids : "", rc ? w->idlen : 0) != 0) {
            tr_err(w->o, "out of memory");
            rc = -1;
        }
    }
    if (rs[2] && rs[2]->type == REDIS_REPLY_ARRAY && !w->pre) {
        w->pre = rs[2];             /* kept for the next batch */
        rs[2] = NULL;
    }
    for (int i = 0; i < 4; i++)
        if (rs[i]) freeReplyObject(rs[i]);
    return rc;
}

/* One journal step, waited for. */
static int journal(struct streamWork *w, const char *cid, uint64_t seq) {
    journalStep js;
    if (journal_send(w, cid, seq, &js) != 0) {
        journal_wait(w, &js);
        return -1;
    }
    return journal_wait(w, &js);
}

/* ---------------------------------------------------------------------- */

static void record_scores(struct streamWork *w) {
    int n = w->b.n, N = w->o->auc_window;
    for (int i = 0; i < n; i++) {
        double p = w->m.p[i];
        int y = w->b.label[i] > 0.5f;
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

/* Trains the batch built on model 'sm', pushing under seq 'seq' (the push
 * identity of sm->c). own: a batch of this consumer (journaled here); else a
 * replay (journaled by the claim). Returns 1 trained, 0 fenced, -1 error. */
/* Makes the model take batches of 'n' rows (a claimed or replayed batch may
 * be larger than --batch: another worker's). 0 or -1 (printed). */
static int model_rows(struct streamWork *w, int n) {
    ps_ctr_config mc;
    char err[256];
    if (n <= w->m.c.max_batch) return 0;
    if (ts_ctr_config(&w->cfg, n, &mc, err, sizeof(err)) != 0) goto fail;
    ps_ctr_free(&w->m);
    w->have_model = 0;
    if (ps_ctr_init(&w->m, &mc, w->cfg.seed, err, sizeof(err)) != 0) goto fail;
    w->have_model = 1;
    ts_dense_arrays(&w->m, 0, w->dense);
    ts_dense_arrays(&w->m, 1, w->dgrad);
    return 0;
fail:
    tr_err(w->o, "[%s] a batch of %d events: %s", w->me, n, err);
    return -1;
}

static int train_batch(struct streamWork *w, swModel *sm, int own, const char *cid, uint64_t seq) {
    const trainOpts *o = w->o;
    size_t dim = (size_t)ps_ctr_row_dim(&w->m);
    char err[256];
    int n = w->b.n;
    if (model_rows(w, n) != 0) return -1;
    if (ps_ctr_unique_build(&w->u, &w->b) != 0) goto oom;
    size_t need = (w->u.n ? w->u.n : 1) * dim;
    if (need > w->cap) {
        free(w->rows);
        free(w->grows);
        w->rows = malloc(need * sizeof(float));
        w->grows = malloc(need * sizeof(float));
        w->cap = w->rows && w->grows ? need : 0;
        if (!w->cap) goto oom;
    }
    int pulled = 0;
    if (n > 0) {
        if (psModelPullAsync(sm->c, sm->dm, w->dense) != PS_OK) {
            tr_err(o, "[%s] pull: %s", w->me, sm->c->errstr);
            return -1;
        }
        if (psEmbedPullAsync(sm->c, sm->e, w->u.ids, w->u.n, w->rows) != PS_OK) {
            tr_err(o, "[%s] pull: %s", w->me, sm->c->errstr);
            psModelPullWait(sm->c, sm->dm, NULL);
            return -1;
        }
        pulled = 1;
    }
    /* The batch before is acknowledged; then the journal step XACKs it,
     * records this one and reads the next one: its round trip overlaps the
     * pulls and the gradient. */
    int jr = 1;
    journalStep js;
    memset(&js, 0, sizeof(js));
    if (psDrain(w->own.c) != PS_OK) {
        tr_err(o, "[%s] push: %s", w->me, w->own.c->errstr);
        jr = -1;
    } else if (own && journal_send(w, cid, seq, &js) != 0) {
        jr = -1;
    }
    if (pulled) {
        int e1 = psEmbedPullWait(sm->c, sm->e), e2 = psModelPullWait(sm->c, sm->dm, NULL);
        if ((e1 != PS_OK || e2 != PS_OK) && jr == 1) {
            tr_err(o, "[%s] pull: %s", w->me, sm->c->errstr);
            jr = -1;
        }
    }
    double loss = 0;
    if (jr == 1 && n > 0 &&
        ps_ctr_grad(&w->m, &w->b, &w->u, w->rows, w->grows, &loss, err, sizeof(err)) != 0) {
        tr_err(o, "[%s] %s", w->me, err);
        jr = -1;
    }
    if (own) {
        int r = journal_wait(w, &js);
        if (jr == 1) jr = r;
    }
    if (jr != 1) {
        if (jr == 0) {
            w->fenced++;
            w->exact = 1;
            fprintf(stderr, "[%s] batch %s.. (%d entries) was claimed by another consumer before "
                            "it was journaled: dropped here\n", w->me, w->first, w->nent);
        }
        return jr;
    }
    if (n > 0) record_scores(w);
    float cnt[2] = {-(float)n, -(float)w->nbad};
    const float *cg[1] = {cnt};
    psSetPushSeq(sm->c, seq);
    int rc = PS_OK;
    if (n > 0 && (psEmbedPush(sm->c, sm->e, w->u.ids, w->u.n, w->grows, 0) != PS_OK ||
                  psModelPush(sm->c, sm->dm, (const float *const *)w->dgrad, NULL, 1.0f) != PS_OK))
        rc = PS_ERR;
    if (rc == PS_OK && psModelPush(sm->c, sm->cm, cg, NULL, 1.0f) != PS_OK) rc = PS_ERR;
    psSetPushSeq(sm->c, 0);
    if (rc != PS_OK) {
        tr_err(o, "[%s] push: %s", w->me, sm->c->errstr);
        return -1;
    }
    w->trained += n;
    w->malformed += w->nbad;
    w->batches++;
    w->last_event = tr_now();
    return 1;
oom:
    tr_err(o, "[%s] out of memory", w->me);
    return -1;
}

/* Trains the batch built under another push identity (a journaled batch a
 * claim took over): a client of its own whose pushes carry 'cid'. */
static int replay_batch(struct streamWork *w, const char *cid, uint64_t seq) {
    swModel sm;
    if (psDrain(w->own.c) != PS_OK) {
        tr_err(w->o, "[%s] push: %s", w->me, w->own.c->errstr);
        return -1;
    }
    int rc = -1;
    if (!strcmp(cid, w->cid)) return train_batch(w, &w->own, 0, cid, seq);
    psClient *c = tr_connect_as(w->o, w->o->window, w->o->wait, cid);
    if (c == NULL) return -1;
    if (sw_model_open(w, c, &sm, 0) == 0) {
        rc = train_batch(w, &sm, 0, cid, seq);
        if (rc == 1 && psDrain(c) != PS_OK) {
            tr_err(w->o, "[%s] replayed push: %s", w->me, c->errstr);
            rc = -1;
        }
    }
    sw_model_free(&sm);
    psClientFree(c);
    return rc;
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
    batch_reset(w);
    const redisReply *es = r->element[3];
    for (size_t i = 0; es->type == REDIS_REPLY_ARRAY && i < es->elements; i++)
        if (take_entry(w, es->element[i]) != 0) {
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
        if (set_old(w, w->ids ? w->ids : "", w->idlen) != 0) {
            freeReplyObject(r);
            tr_err(o, "out of memory");
            return -1;
        }
        rc = replay_batch(w, cid, seq);
        if (rc == 1) {
            w->replays++;
            w->replayed += w->nent;
        }
    } else {
        uint64_t seq = tr_wall() * 1e6 > w->own_seq + 1 ? (uint64_t)(tr_wall() * 1e6)
                                                        : w->own_seq + 1;
        w->own_seq = seq;
        rc = train_batch(w, &w->own, 1, w->cid, seq);
        if (rc == 1) w->claimed += w->nent;
        if (rc == 0) rc = 1;
    }
    freeReplyObject(r);
    return rc < 0 ? -1 : 1;
}

/* ---------------------------------------------------------------------- */

/* Adds the histogram counted since the last flush to this 10 s slot's hash. */
static int sw_flush_hist(struct streamWork *w) {
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
    if (rc) fprintf(stderr, "[%s] AUC histogram %s: %s\n", w->me, key, r ? r->str : w->own.c->errstr);
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
    redisReply *r = psCommand(c, key, "PS.PULL %s FORMAT F32", key);
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[1]->type == REDIS_REPLY_STRING && r->element[1]->len == 8) {
        float v[2];
        memcpy(v, r->element[1]->str, sizeof(v));
        double bound;
        long long n;
        double auc = sw_global_auc(c, o->job, SW_AUC_S, &bound, &n);
        printf("stream: events trained %.0f, malformed entries %.0f (exactly once: tensor %s); "
               "global progressive AUC %.4f (+-%.4f) over the last 60 s (%lld events)\n",
               (double)v[0], (double)v[1], key, auc, bound, n);
    }
    if (r) freeReplyObject(r);
}

static void print_progress_line(struct streamWork *w, int final) {
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
                print_progress_line(&w, 0);
                continue;
            }
        }
        batch_reset(&w);
        int want = batch;
        if (o->max_events && o->max_events - w.trained - w.malformed < want)
            want = (int)(o->max_events - w.trained - w.malformed);
        int block = 1000;
        if (o->idle_exit) {
            int left = o->idle_exit - (int)((tr_now() - w.last_event) * 1000.0);
            if (left < block) block = left < 1 ? 1 : left;
        }
        if (claim_every * 1000 < block) block = (int)(claim_every * 1000) + 1;
        int got = read_batch(&w, want, block);
        if (got < 0) goto out;
        if (got == 0) {
            if (o->idle_exit && (tr_now() - w.last_event) * 1000.0 >= o->idle_exit) break;
            print_progress_line(&w, 0);
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
        if (train_batch(&w, &w.own, 1, w.cid, seq) < 0) goto out;
        print_progress_line(&w, 0);
    }
    /* Drain, then XACK the last batch (a journal of none). */
    if (psDrain(w.own.c) != PS_OK) {
        tr_err(o, "[%s] push: %s", w.me, w.own.c->errstr);
        goto out;
    }
    batch_reset(&w);
    if (journal(&w, w.cid, w.own_seq) < 0) goto out;
    print_progress_line(&w, 1);
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
