/* stream_batch.c -- `ps-train stream` (stream.c): the job's model on a
 * client, the entries of XREADGROUP replies into a batch (malformed ones
 * counted and logged with their id), and training one batch: pulls, the
 * journal step overlapped with them, the gradient, the push under the
 * batch's push identity; a replay under another consumer's. */

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

void sw_model_free(swModel *sm) {
    psModelFree(sm->cm);
    psModelFree(sm->dm);
    psEmbedFree(sm->e);
    sm->cm = sm->dm = NULL;
    sm->e = NULL;
}

/* The job's table, dense tensors and the counter tensor on client 'c'.
 * 0 or -1 (printed). */
int sw_model_open(struct streamWork *w, psClient *c, swModel *sm, int create) {
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

void sw_phase(struct streamWork *w, int k, double *t) {
    double now = tr_now();
    w->tp[k] += now - *t;
    *t = now;
}

void sw_batch_reset(swBatch *x) {
    ps_sparse_batch_clear(&x->b);
    x->nent = x->nbad = 0;
    x->first[0] = x->cid[0] = '\0';
    x->seq = 0;
    x->want = 0;
    x->closed = x->inflight = 0;
}

void sw_batch_free(swBatch *x) {
    ps_sparse_batch_free(&x->b);
    ps_ctr_unique_free(&x->u);
    free(x->rows);
    memset(x, 0, sizeof(*x));
}

/* Adds entry e = [id, [field, value, ...]] to batch x: its line parsed, or
 * counted malformed (logged with its id). 0, or -1 out of memory. */
int sw_take_entry(struct streamWork *w, swBatch *x, const redisReply *e) {
    char err[512];
    if (e == NULL || e->type != REDIS_REPLY_ARRAY || e->elements != 2 ||
        e->element[0]->type != REDIS_REPLY_STRING)
        return 0;
    const redisReply *id = e->element[0], *f = e->element[1];
    if (!x->first[0]) snprintf(x->first, sizeof(x->first), "%s", id->str);
    x->nent++;
    const redisReply *line = NULL;
    for (size_t i = 0; f->type == REDIS_REPLY_ARRAY && i + 1 < f->elements; i += 2)
        if (f->element[i]->type == REDIS_REPLY_STRING && !strcmp(f->element[i]->str, w->o->field) &&
            f->element[i + 1]->type == REDIS_REPLY_STRING)
            line = f->element[i + 1];
    if (line == NULL)
        snprintf(err, sizeof(err), "no field '%s'", w->o->field);
    else if (ps_sparse_add_line(w->lp, &x->b, line->str, line->len, err, sizeof(err)) == 0)
        return 0;
    x->nbad++;
    fprintf(stderr, "[%s] malformed entry %s of %s: %s (skipped)\n", w->me, id->str, w->skey, err);
    RUNLOG(w->log, "malformed", RL_STR("worker", w->me), RL_STR("stream", w->skey),
           RL_STR("id", id->str), RL_STR("error", err));
    return 0;
}

/* Takes the entries of an XREADGROUP reply [[stream, [entry, ...]]] into x.
 * Returns how many, or -1 out of memory. */
static int take_entries(struct streamWork *w, swBatch *x, const redisReply *r) {
    int got = 0;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
        r->element[0]->type == REDIS_REPLY_ARRAY && r->element[0]->elements == 2) {
        const redisReply *es = r->element[0]->element[1];
        for (size_t i = 0; es->type == REDIS_REPLY_ARRAY && i < es->elements; i++) {
            if (sw_take_entry(w, x, es->element[i]) != 0) return -1;
            got++;
        }
    }
    return got;
}

/* Reads into batch x the entries of the journal line "cid seq L1 E1 ..."
 * (XRANGE s (Li Ei, in order): a claimed or restarted batch, or one whose
 * lease this process did not see whole. Returns the entries or -1. */
int sw_read_ranges(struct streamWork *w, swBatch *x, const char *line) {
    char lo[64], hi[64];
    const char *p = line;
    int words = 0;
    while (*p) {
        while (*p == ' ') p++;
        const char *q = p;
        while (*q && *q != ' ') q++;
        if (q == p) break;
        words++;
        if (words > 2 && (q - p) < 60) {
            if (words % 2 == 1) {
                snprintf(lo, sizeof(lo), "(%.*s", (int)(q - p), p);
            } else {
                snprintf(hi, sizeof(hi), "%.*s", (int)(q - p), p);
                const char *argv[] = {"XRANGE", w->skey, lo, hi};
                redisReply *r = psCommandArgv(w->own.c, w->skey, 4, argv, NULL);
                if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
                    char why[200];
                    tr_err(w->o, "[%s] XRANGE %s %s %s: %s%s", w->me, w->skey, lo, hi,
                           r ? r->str : w->own.c->errstr,
                           sw_refused(NULL, r ? r->str : NULL, why, sizeof(why)));
                    if (r) freeReplyObject(r);
                    return -1;
                }
                for (size_t i = 0; i < r->elements; i++)
                    if (sw_take_entry(w, x, r->element[i]) != 0) {
                        freeReplyObject(r);
                        tr_err(w->o, "out of memory");
                        return -1;
                    }
                freeReplyObject(r);
            }
        }
        p = q;
    }
    return x->nent;
}

/* The pushes of the batch trained last were acknowledged: it is dropped
 * from the journal at the next lease step. 0 or -1 (printed). */
static int drained(struct streamWork *w) {
    if (psDrain(w->own.c) != PS_OK) {
        tr_err(w->o, "[%s] push: %s", w->me, w->own.c->errstr);
        return -1;
    }
    if (w->tseq && sw_drop_add(w, w->tcid, w->tseq) != 0) {
        tr_err(w->o, "out of memory");
        return -1;
    }
    w->tseq = 0;
    return 0;
}

/* Seconds between claim checks: a quarter of --claim-idle-ms, at least 50 ms. */
double sw_claim_every(const struct streamWork *w) {
    double every = w->o->claim_idle_ms / 4000.0;
    return every < 0.05 ? 0.05 : every;
}

int sw_claim_due(const struct streamWork *w) {
    return tr_now() - w->last_claim >= sw_claim_every(w);
}

/* The events the next lease step may read: into the batch being filled
 * ('filling' entries so far, 0: a new one), within --batch and what
 * --max-events leaves after the batches held (trained, being trained, read
 * ahead). 0 when no read is due: --max-events reached, or a claim is due
 * (the pipeline empties first: claims replay on the free batch). */
int sw_lease_want(const struct streamWork *w, int filling) {
    int batch = w->o->batch > 0 ? w->o->batch : w->cfg.batch;
    long long want = batch - filling;
    if (w->o->max_events) {
        long long held = w->trained + w->malformed + w->cur->nent + w->nxt->nent;
        if (w->o->max_events - held < want) want = w->o->max_events - held;
    }
    if (filling == 0 && sw_claim_due(w)) want = 0;
    return want < 0 ? 0 : (int)want;
}

/* Takes what lease step 'ls' (waited for) leased into batch x: the entries
 * read ('e', its reply, freed here), or the batch read again from the
 * journal's ranges (ls->rebuild); a batch a claim took while it was being
 * filled (ls->fenced) is dropped first. 1 something taken, 0 nothing read,
 * -1 error (printed). */
static int lease_into(struct streamWork *w, swBatch *x, const leaseStep *ls, redisReply *e) {
    if (ls->fenced && x->nent > 0) {
        w->fenced++;
        fprintf(stderr, "[%s] batch %s.. (%d entries) was claimed by another consumer while "
                        "it was being leased: dropped here\n", w->me, x->first, x->nent);
        int keep = x->want;
        sw_batch_reset(x);
        x->want = keep;
    }
    if (ls->rebuild) {
        int keep = x->want;
        sw_batch_reset(x);
        x->want = keep;
        int got = sw_read_ranges(w, x, w->rebuild);
        free(w->rebuild);
        w->rebuild = NULL;
        if (e) freeReplyObject(e);
        return got < 0 ? -1 : 1;
    }
    if (e == NULL) return 0;
    int oom = take_entries(w, x, sw_lease_entries(e)) < 0;
    freeReplyObject(e);
    if (oom) {
        tr_err(w->o, "out of memory");
        return -1;
    }
    return 1;
}

/* Closes the batch being leased into x: it gets the lease's push identity
 * and no more entries. */
static void close_batch(struct streamWork *w, swBatch *x) {
    snprintf(x->cid, sizeof(x->cid), "%s", w->ncid);
    x->seq = w->nseq;
    x->closed = 1;
    w->nseq = 0;
    w->nranges = 0;
}

/* Leases entries into batch x (each read a lease step: stream_journal.c)
 * until it holds --batch events (or what --max-events leaves): waits
 * (XREAD BLOCK, which takes nothing) until the first (at most 'block_ms'),
 * then until the batch is full or --batch-ms passed since. A batch that got
 * entries is closed. Returns the entries taken (>= 0) or -1 (printed). */
int sw_read_batch(struct streamWork *w, swBatch *x, int block_ms) {
    const trainOpts *o = w->o;
    double start = x->nent > 0 ? tr_now() : 0, t = tr_now();
    for (;;) {
        if (tw_stop) break;
        int want = sw_lease_want(w, x->nent);
        if (x->nent == 0 && want <= 0) break;
        if (x->nent > 0 && (want <= 0 || x->nent >= x->want)) break;
        if (x->nent == 0) x->want = want;
        leaseStep ls;
        redisReply *e = NULL;
        if (sw_lease(w, want, &ls, &e) < 0) return -1;
        sw_phase(w, SWP_LEASE, &t);
        int k = lease_into(w, x, &ls, e);
        sw_phase(w, SWP_PARSE, &t);
        if (k < 0) return -1;
        if (k > 0) {
            if (x->nent > 0 && start == 0) start = tr_now();
            continue;
        }
        /* Nothing to read now. Idle: first have the batch trained last dropped
         * from the journal (a claimer would replay it as idle). */
        if (x->nent == 0 && w->tseq) {
            int d = drained(w);
            sw_phase(w, SWP_DRAIN, &t);
            if (d != 0) return -1;
            continue;
        }
        int ms = block_ms;
        if (x->nent > 0) {
            ms = o->batch_ms - (int)((tr_now() - start) * 1000.0);
            if (ms < 1) break;
        }
        char block[24];
        snprintf(block, sizeof(block), "%d", ms);
        const char *argv[] = {"XREAD", "COUNT", "1", "BLOCK", block, "STREAMS", w->skey,
                              w->lastE[0] ? w->lastE : "$"};
        redisReply *r = psCommandArgv(w->own.c, w->skey, 8, argv, NULL);
        sw_phase(w, SWP_IDLE, &t);
        if (r == NULL || r->type == REDIS_REPLY_ERROR) {
            char why[200];
            tr_err(o, "[%s] XREAD %s: %s%s", w->me, w->skey, r ? r->str : w->own.c->errstr,
                   sw_refused(NULL, r ? r->str : NULL, why, sizeof(why)));
            if (r) freeReplyObject(r);
            return -1;
        }
        int none = r->type != REDIS_REPLY_ARRAY;
        freeReplyObject(r);
        if (none) break;        /* block_ms (or --batch-ms) passed */
    }
    if (x->nent > 0) close_batch(w, x);
    return x->nent;
}

/* ---------------------------------------------------------------------- */

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

/* Sends batch x's pulls on model sm: its distinct ids listed, the dense
 * tensors (into w->dback, copied into the model when waited for: the model's
 * arrays stay the trained batch's) and its rows by id. 0 (x->inflight set)
 * or -1 (printed; nothing in flight). */
static int send_pulls(struct streamWork *w, swModel *sm, swBatch *x, double *t) {
    size_t dim = (size_t)ps_ctr_row_dim(&w->m);
    sw_phase(w, SWP_PULL, t);
    if (ps_ctr_unique_build(&x->u, &x->b) != 0) goto oom;
    sw_phase(w, SWP_IDS, t);
    size_t need = (x->u.n ? x->u.n : 1) * dim;
    if (need > x->cap) {
        free(x->rows);
        x->cap = 0;
        if ((x->rows = malloc(need * sizeof(float))) == NULL) goto oom;
        x->cap = need;
    }
    if (need > w->gcap) {
        free(w->grows);
        w->gcap = 0;
        if ((w->grows = malloc(need * sizeof(float))) == NULL) goto oom;
        w->gcap = need;
    }
    if (psModelPullAsync(sm->c, sm->dm, w->dback) != PS_OK) {
        tr_err(w->o, "[%s] pull: %s", w->me, sm->c->errstr);
        return -1;
    }
    if (psEmbedPullAsync(sm->c, sm->e, x->u.ids, x->u.n, x->rows) != PS_OK) {
        tr_err(w->o, "[%s] pull: %s", w->me, sm->c->errstr);
        psModelPullWait(sm->c, sm->dm, NULL);
        return -1;
    }
    x->inflight = 1;
    return 0;
oom:
    tr_err(w->o, "[%s] out of memory", w->me);
    return -1;
}

/* Waits for batch x's pulls (both, also after an error) and copies the
 * dense values into the model. 0 or -1 (printed). */
static int wait_pulls(struct streamWork *w, swModel *sm, swBatch *x) {
    int rc = 0;
    if (!x->inflight) return 0;
    x->inflight = 0;
    if (psEmbedPullWait(sm->c, sm->e) != PS_OK) rc = -1;
    if (psModelPullWait(sm->c, sm->dm, NULL) != PS_OK) rc = -1;
    if (rc != 0) {
        tr_err(w->o, "[%s] pull: %s", w->me, sm->c->errstr);
        return -1;
    }
    for (int i = 0; i < w->ndense; i++) memcpy(w->dense[i], w->dback[i], w->dlen[i] * sizeof(float));
    return 0;
}

/* Waits for the lease step sent ahead (w->ahead) and takes the entries it
 * read into w->nxt, which it closes once full. 1, or -1 (printed). */
static int ahead_wait(struct streamWork *w) {
    swBatch *x = w->nxt;
    redisReply *e = NULL;
    double t = tr_now();
    w->ahead_on = 0;
    int rc = sw_lease_wait(w, &w->ahead, &e);
    sw_phase(w, SWP_AHEAD, &t);
    if (rc != 1) return -1;
    if (x->nent == 0) x->want = w->ahead_want;
    if (lease_into(w, x, &w->ahead, e) < 0) return -1;
    if (x->nent > 0 && x->nent >= x->want) close_batch(w, x);
    sw_phase(w, SWP_PARSE, &t);
    return 1;
}

/* Sends a lease step ahead: up to 'want' entries for w->nxt (0: only drops
 * the acknowledged batches). 0 or -1 (printed). */
static int ahead_send(struct streamWork *w, int want) {
    w->ahead_want = want;
    if (sw_lease_send(w, want, &w->ahead) != 0) {
        if (w->ahead.tx) freeReplyObject(psCommandWait(w->own.c, w->ahead.tx));
        return -1;
    }
    w->ahead_on = 1;
    return 0;
}

/* Waits for what the pipeline has in flight (the lease step ahead, the read
 * ahead batch's pulls): before a claim, a new push identity or the end. 0 or
 * -1 (printed). */
int sw_settle(struct streamWork *w) {
    int rc = 0;
    if (w->ahead_on && ahead_wait(w) != 1) rc = -1;
    for (int k = 0; k < 2; k++)
        if (w->bt[k].inflight && wait_pulls(w, &w->own, &w->bt[k]) != 0) rc = -1;
    return rc;
}

/* Trains batch x on model sm, pushing under x's push identity (the client
 * id of sm->c). own: a batch of this consumer (journaled here), trained in
 * the pipeline below; else a replay (journaled by the claim; pulls, gradient,
 * push in turn).
 *
 * The pipeline (own batches): x's pulls were sent with the batch before's
 * gradient, as was a lease step reading the next batch's entries; here the
 * entries it read are parsed into w->nxt while x's pulls fly, the batch
 * before's pushes are drained (so x is pushed only after them), and, when
 * the next batch is full, its pulls and the lease step after it are sent
 * (--overlap 1: before x's gradient, which then misses x's own update in the
 * next batch's pull, as file training's --overlap 1) before x's gradient
 * and push. A step that finds x no longer in the journal (claimed) drops it.
 * Returns 1 trained, 0 fenced, -1 error. */
int sw_train_batch(struct streamWork *w, swModel *sm, int own, swBatch *x) {
    const trainOpts *o = w->o;
    char err[256];
    int n = x->b.n;
    double t = tr_now();
    if (own && strcmp(x->cid, w->cid) != 0) {
        /* A claim bumped this consumer's epoch: its new batches push under
         * another client id (docs/design.md). What flies on the old client
         * is waited for; x is pulled again on the new one. */
        if (sw_settle(w) != 0 || drained(w) != 0) return -1;
        psClient *c = tr_connect_as(o, o->window, o->wait, x->cid);
        if (c == NULL) return -1;
        sw_model_free(&w->own);
        psClientFree(w->own.c);
        w->own.c = NULL;
        if (sw_model_open(w, c, &w->own, 0) != 0) {
            w->own.c = c;
            return -1;
        }
        snprintf(w->cid, sizeof(w->cid), "%s", x->cid);
        printf("[%s] pushes under %s from now on\n", w->me, x->cid);
        fflush(stdout);
        sm = &w->own;
    }
    if (model_rows(w, n) != 0) return -1;
    if (n > 0 && !x->inflight && send_pulls(w, sm, x, &t) != 0) return -1;
    sw_phase(w, SWP_PULL, &t);
    /* One lease step per own batch, answered before its push: the one sent
     * ahead, or one now (the batch before drained first: it drops it). */
    if (own && !w->ahead_on) {
        int d = drained(w);
        sw_phase(w, SWP_DRAIN, &t);
        int want = w->nxt->closed ? 0 : sw_lease_want(w, w->nxt->nent);
        if (d != 0 || ahead_send(w, want) != 0) goto fail;
    }
    if (own && ahead_wait(w) != 1) goto fail;
    t = tr_now();
    int d = own ? drained(w) : 0;
    sw_phase(w, SWP_DRAIN, &t);
    if (d != 0 || wait_pulls(w, sm, x) != 0) goto fail;
    sw_phase(w, SWP_PULL, &t);
    int fenced = own && !sw_holds(w, x->cid, x->seq);
    swBatch *nx = w->nxt;
    int next = own && !fenced && nx->closed && nx->b.n > 0 && !sw_claim_due(w);
    /* The lease step first: the server answers it before the pulls, so its
     * entries are there to parse when this push was sent. */
    if (next && o->overlap) {
        int want = sw_lease_want(w, 0);
        if ((want > 0 && ahead_send(w, want) != 0) || send_pulls(w, sm, nx, &t) != 0) goto fail;
        sw_phase(w, SWP_PULL, &t);
        w->piped++;
    }
    if (fenced) {
        w->fenced++;
        fprintf(stderr, "[%s] batch %s.. (%d entries) was claimed by another consumer before "
                        "it was pushed: dropped here\n", w->me, x->first, x->nent);
        return 0;
    }
    double loss = 0;
    if (n > 0 && ps_ctr_grad(&w->m, &x->b, &x->u, x->rows, w->grows, &loss, err, sizeof(err)) != 0) {
        tr_err(o, "[%s] %s", w->me, err);
        goto fail;
    }
    if (n > 0) sw_record_scores(w, x);
    sw_phase(w, SWP_GRAD, &t);
    float cnt[2] = {-(float)n, -(float)x->nbad};
    const float *cg[1] = {cnt};
    psSetPushSeq(sm->c, x->seq);
    int rc = PS_OK;
    if (n > 0 && (psEmbedPush(sm->c, sm->e, x->u.ids, x->u.n, w->grows, 0) != PS_OK ||
                  psModelPush(sm->c, sm->dm, (const float *const *)w->dgrad, NULL, 1.0f) != PS_OK))
        rc = PS_ERR;
    if (rc == PS_OK && psModelPush(sm->c, sm->cm, cg, NULL, 1.0f) != PS_OK) rc = PS_ERR;
    psSetPushSeq(sm->c, 0);
    if (rc != PS_OK) {
        tr_err(o, "[%s] push: %s", w->me, sm->c->errstr);
        goto fail;
    }
    if (own) {
        snprintf(w->tcid, sizeof(w->tcid), "%s", x->cid);
        w->tseq = x->seq;       /* dropped from the journal once acknowledged */
    }
    /* --overlap 0: the next batch's pulls after this push (its lease step
     * ahead too: it is answered behind them). */
    if (next && !o->overlap) {
        int want = sw_lease_want(w, 0);
        if (send_pulls(w, sm, nx, &t) != 0 || (want > 0 && ahead_send(w, want) != 0)) goto fail;
        w->piped++;
    }
    sw_phase(w, SWP_PUSH, &t);
    w->trained += n;
    w->malformed += x->nbad;
    w->batches++;
    w->last_event = tr_now();
    return 1;
fail:
    if (own) sw_settle(w);
    else if (x->inflight) wait_pulls(w, sm, x);
    return -1;
}

/* Trains batch x (built from a journal line: x->cid, x->seq) under its push
 * identity: a batch a claim took over, or this consumer's after a restart
 * (the pipeline is empty: stream.c claims only then). A client of its own
 * whose pushes carry the batch's cid. 1 or -1. */
int sw_replay_batch(struct streamWork *w, swBatch *x) {
    if (psDrain(w->own.c) != PS_OK) {
        tr_err(w->o, "[%s] push: %s", w->me, w->own.c->errstr);
        return -1;
    }
    if (!strcmp(x->cid, w->cid)) return sw_train_batch(w, &w->own, 0, x);
    /* The replay clients are kept (the last SW_REPLAY_CLIENTS cids): the
     * batches of one claim share a cid, and a kept client keeps what libps
     * learnt (a degraded shard is not WAITed for again until its probe). */
    int k = 0;
    while (k < w->nreplay && strcmp(w->replay[k].cid, x->cid) != 0) k++;
    if (k == w->nreplay) {
        if (w->nreplay == SW_REPLAY_CLIENTS) {
            sw_replay_free(&w->replay[0]);
            memmove(&w->replay[0], &w->replay[1], sizeof(w->replay[0]) * (SW_REPLAY_CLIENTS - 1));
            w->nreplay--;
        }
        k = w->nreplay;
        swReplay *rp = &w->replay[k];
        memset(rp, 0, sizeof(*rp));
        psClient *c = tr_connect_as(w->o, w->o->window, w->o->wait, x->cid);
        if (c == NULL) return -1;
        if (sw_model_open(w, c, &rp->sm, 0) != 0) {
            sw_model_free(&rp->sm);
            psClientFree(c);
            return -1;
        }
        snprintf(rp->cid, sizeof(rp->cid), "%s", x->cid);
        w->nreplay++;
    }
    swModel *sm = &w->replay[k].sm;
    int rc = sw_train_batch(w, sm, 0, x);
    if (rc == 1 && psDrain(sm->c) != PS_OK) {
        tr_err(w->o, "[%s] replayed push: %s", w->me, sm->c->errstr);
        rc = -1;
    }
    return rc;
}

/* Frees a kept replay client. */
void sw_replay_free(swReplay *rp) {
    psClient *c = rp->sm.c;
    sw_model_free(&rp->sm);
    if (c) psClientFree(c);
    memset(rp, 0, sizeof(*rp));
}
