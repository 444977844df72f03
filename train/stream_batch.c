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

void sw_batch_reset(struct streamWork *w) {
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
int sw_take_entry(struct streamWork *w, const redisReply *e) {
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

/* Takes the entries of an XREADGROUP reply [[stream, [entry, ...]]].
 * Returns how many, or -1 out of memory. */
static int take_entries(struct streamWork *w, const redisReply *r) {
    int got = 0;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
        r->element[0]->type == REDIS_REPLY_ARRAY && r->element[0]->elements == 2) {
        const redisReply *es = r->element[0]->element[1];
        for (size_t i = 0; es->type == REDIS_REPLY_ARRAY && i < es->elements; i++) {
            if (sw_take_entry(w, es->element[i]) != 0) return -1;
            got++;
        }
    }
    return got;
}

/* Reads into the batch the entries of the journal line "cid seq L1 E1 ..."
 * (XRANGE s (Li Ei, in order): a claimed or restarted batch, or one whose
 * lease this process did not see whole. Returns the entries or -1. */
int sw_read_ranges(struct streamWork *w, const char *line) {
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
                    if (sw_take_entry(w, r->element[i]) != 0) {
                        freeReplyObject(r);
                        tr_err(w->o, "out of memory");
                        return -1;
                    }
                freeReplyObject(r);
            }
        }
        p = q;
    }
    return w->nent;
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

/* Leases up to 'want' new entries into the batch being built (each read a
 * lease step: stream_journal.c): waits (XREAD BLOCK, which takes nothing)
 * until the first (at most 'block_ms'), then until the batch is full or
 * --batch-ms passed since. Returns the entries taken (>= 0) or -1
 * (printed). */
int sw_read_batch(struct streamWork *w, int want, int block_ms) {
    const trainOpts *o = w->o;
    double start = 0;
    int oom = 0;
    if (w->rebuild) {
        int got = sw_read_ranges(w, w->rebuild);
        free(w->rebuild);
        w->rebuild = NULL;
        if (got < 0) return -1;
    } else if (w->pre) {
        oom = take_entries(w, sw_lease_entries(w->pre)) < 0;
        freeReplyObject(w->pre);
        w->pre = NULL;
    }
    if (oom) goto oom;
    if (w->nent > 0) start = tr_now();
    while (w->nent < want && !tw_stop) {
        leaseStep ls;
        redisReply *e = NULL;
        if (sw_lease(w, want - w->nent, &ls, &e) < 0) return -1;
        if (ls.fenced && w->nent > 0) {
            w->fenced++;
            fprintf(stderr, "[%s] batch %s.. (%d entries) was claimed by another consumer while "
                            "it was being leased: dropped here\n", w->me, w->first, w->nent);
            sw_batch_reset(w);
        }
        if (ls.rebuild) {
            sw_batch_reset(w);
            int got = sw_read_ranges(w, w->rebuild);
            free(w->rebuild);
            w->rebuild = NULL;
            if (got < 0) return -1;
            if (got > 0 && start == 0) start = tr_now();
            continue;
        }
        if (e) {
            oom = take_entries(w, sw_lease_entries(e)) < 0;
            freeReplyObject(e);
            if (oom) goto oom;
            if (start == 0) start = tr_now();
            continue;
        }
        /* Nothing to read now. Idle: first have the batch trained last dropped
         * from the journal (a claimer would replay it as idle). */
        if (w->nent == 0 && w->tseq) {
            if (drained(w) != 0) return -1;
            continue;
        }
        int ms = block_ms;
        if (w->nent > 0) {
            ms = o->batch_ms - (int)((tr_now() - start) * 1000.0);
            if (ms < 1) break;
        }
        char block[24];
        snprintf(block, sizeof(block), "%d", ms);
        const char *argv[] = {"XREAD", "COUNT", "1", "BLOCK", block, "STREAMS", w->skey,
                              w->lastE[0] ? w->lastE : "$"};
        redisReply *r = psCommandArgv(w->own.c, w->skey, 8, argv, NULL);
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
    return w->nent;
oom:
    tr_err(o, "out of memory");
    return -1;
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

/* Trains the batch built on model 'sm', pushing under seq 'seq' (the push
 * identity of sm->c). own: a batch of this consumer (journaled here); else a
 * replay (journaled by the claim). Returns 1 trained, 0 fenced, -1 error. */
int sw_train_batch(struct streamWork *w, swModel *sm, int own, const char *cid, uint64_t seq) {
    const trainOpts *o = w->o;
    size_t dim = (size_t)ps_ctr_row_dim(&w->m);
    char err[256];
    int n = w->b.n;
    if (own && strcmp(cid, w->cid) != 0) {
        /* A claim bumped this consumer's epoch: its new batches push under
         * another client id (docs/design.md). */
        if (drained(w) != 0) return -1;
        psClient *c = tr_connect_as(o, o->window, o->wait, cid);
        if (c == NULL) return -1;
        sw_model_free(&w->own);
        psClientFree(w->own.c);
        w->own.c = NULL;
        if (sw_model_open(w, c, &w->own, 0) != 0) {
            w->own.c = c;
            return -1;
        }
        snprintf(w->cid, sizeof(w->cid), "%s", cid);
        printf("[%s] pushes under %s from now on\n", w->me, cid);
        fflush(stdout);
    }
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
    /* The batch before is acknowledged (dropped from the journal by this
     * step); the lease step reads the next batch's first entries and says
     * whether this batch is still this consumer's: its round trip overlaps
     * the pulls and the gradient. */
    int jr = 1;
    leaseStep ls;
    memset(&ls, 0, sizeof(ls));
    if (own && (drained(w) != 0 || sw_lease_send(w, w->want, &ls) != 0)) jr = -1;
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
    if (own && (ls.tx || ls.wait)) {
        redisReply *e = NULL;
        int r = sw_lease_wait(w, &ls, &e);
        if (r == 1 && e) {
            if (w->pre) freeReplyObject(w->pre);
            w->pre = e;         /* the next batch's first entries */
        }
        if (jr == 1) jr = r;
        if (jr == 1 && !sw_holds(w, cid, seq)) jr = 0;
    }
    if (jr != 1) {
        if (jr == 0) {
            w->fenced++;
            fprintf(stderr, "[%s] batch %s.. (%d entries) was claimed by another consumer before "
                            "it was pushed: dropped here\n", w->me, w->first, w->nent);
        }
        return jr;
    }
    if (n > 0) sw_record_scores(w);
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
    if (own) {
        snprintf(w->tcid, sizeof(w->tcid), "%s", cid);
        w->tseq = seq;          /* dropped from the journal once acknowledged */
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
int sw_replay_batch(struct streamWork *w, const char *cid, uint64_t seq) {
    if (psDrain(w->own.c) != PS_OK) {
        tr_err(w->o, "[%s] push: %s", w->me, w->own.c->errstr);
        return -1;
    }
    if (!strcmp(cid, w->cid)) return sw_train_batch(w, &w->own, 0, cid, seq);
    /* The replay clients are kept (the last SW_REPLAY_CLIENTS cids): the
     * batches of one claim share a cid, and a kept client keeps what libps
     * learnt (a degraded shard is not WAITed for again until its probe). */
    int k = 0;
    while (k < w->nreplay && strcmp(w->replay[k].cid, cid) != 0) k++;
    if (k == w->nreplay) {
        if (w->nreplay == SW_REPLAY_CLIENTS) {
            sw_replay_free(&w->replay[0]);
            memmove(&w->replay[0], &w->replay[1], sizeof(w->replay[0]) * (SW_REPLAY_CLIENTS - 1));
            w->nreplay--;
            k--;
        }
        k = w->nreplay;
        swReplay *rp = &w->replay[k];
        memset(rp, 0, sizeof(*rp));
        psClient *c = tr_connect_as(w->o, w->o->window, w->o->wait, cid);
        if (c == NULL) return -1;
        if (sw_model_open(w, c, &rp->sm, 0) != 0) {
            sw_model_free(&rp->sm);
            psClientFree(c);
            return -1;
        }
        snprintf(rp->cid, sizeof(rp->cid), "%s", cid);
        w->nreplay++;
    }
    swModel *sm = &w->replay[k].sm;
    int rc = sw_train_batch(w, sm, 0, cid, seq);
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
