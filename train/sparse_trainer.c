/* sparse_trainer.c -- ps-train's sparse trainer (trainer.h) for sparse CTR
 * jobs (sparse.h).
 *
 * The task stream, leases, recording and XACK are work.c's and tasks.c's
 * for every kind; this file trains a task. A task is a byte range of the
 * train file; per batch of --batch lines:
 *   1. the batch is read and parsed, and its distinct ids listed
 *      (ps_ctr_unique_build);
 *   2. the dense tensors' pull and the pull of its rows by id from the
 *      table shards are sent (all in flight together, psModelPullAsync,
 *      psEmbedPullAsync) and later waited for;
 *   3. forward, logloss and the gradients (ps_ctr_grad: sums over the
 *      batch, one gradient row per distinct id);
 *   4. the gradient rows are pushed by id (one PS.PUSHGRAD IDS per shard
 *      that has ids, asynchronous within --window, ID exactly-once) and
 *      the dense gradients pushed like a dense model's.
 * With --overlap 1 (the default) the batches are pipelined by one: batch
 * i+1 is read and parsed while batch i's pulls are in flight, and its
 * pulls are sent before batch i's gradient is computed and pushed, into
 * the other of two buffers (rows, and the dense values, copied into the
 * model when waited for). The staleness this adds is the dense path's
 * --overlap 1: the rows and dense values of batch i+1 were read by the
 * server before batch i's push reached it, so batch i+1's gradient misses
 * batch i's own update (one step more; pushes still carry the versions of
 * the pull their gradient came from). A task's first batch is pulled
 * without overlap (the pipeline does not cross tasks: the next task may
 * be one claimed from another worker). --overlap 0 sends batch i+1's pulls
 * only after batch i's push (no added staleness), but still reads and
 * parses batch i+1 (step 1, a third to a half of the worker's CPU) while
 * batch i's pulls are in flight.
 * --wait N and --on-degraded apply to the table pushes as to the dense
 * ones: libps WAITs after each push on every node it went to, and resends
 * the pushes a lost WAIT covered (libps/pushtrack.c). */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sparse.h"
#include "util.h"
#include "wirefmt.h"

#define TS_HLL_FLUSH 65536      /* ids per PFADD of the distinct-id estimate */
#define TS_SEEN_MAX (1u << 22)  /* ids the seen-set holds before it starts over */

struct sparseWork {
    ps_ctr_model m;
    int have_model;
    psEmbed *e;
    int nshards;
    ps_sparse_opts so;
    /* Two batches (--overlap: one computed while the other's pulls fly). */
    ps_sparse_batch b[2];
    ps_ctr_unique u[2];
    float *rows[2];             /* u[k].n x dim: the pulled rows of batch k */
    size_t cap[2];
    float *grows;               /* u.n x dim: the gradient rows */
    size_t gcap;
    int inflight;               /* 1: the pulls of a batch were sent, not waited for */
    int ndense;
    float *dense[2 * (PS_CTR_MAX_HIDDEN + 1)]; /* the model's dense values */
    float *dback[2 * (PS_CTR_MAX_HIDDEN + 1)]; /* --overlap: their pull targets */
    size_t dlen[2 * (PS_CTR_MAX_HIDDEN + 1)];  /* elements of each */
    float *dgrad[2 * (PS_CTR_MAX_HIDDEN + 1)]; /* and gradients (push sources) */
    long long *shard_pushes;    /* per shard: table pushes sent (acknowledged after the drain) */
    unsigned char *hit;         /* scratch: shards a push reaches */
    char ikey[128];             /* psjob:{J}:ids */
    uint64_t *hll;              /* epoch-1 ids waiting for their PFADD */
    size_t nhll;
    const char **hll_argv;      /* PFADD arguments (TS_HLL_FLUSH + 2, reused) */
    size_t *hll_argl;
    /* Ids this worker sent to the PFADD already: an open-addressing set
     * (slot value id + 1, 0 empty; id UINT64_MAX kept in 'seen_max'),
     * emptied when it holds TS_SEEN_MAX ids, so it bounds the memory
     * (64 MiB) while each id usually goes to the server once. */
    uint64_t *seen;
    size_t seen_n, seen_cap;
    int seen_max;
};

/* ========================================================================
 * Setup
 * ====================================================================== */

/* Error-feedback residuals of a sparse worker's table pushes: at most this
 * many bytes, (9 + 4 * dim) * 8/3 per id kept (ps.h). */
#define TS_RESID_BYTES (64u << 20)

/* Sets the push format w->push_name (the job's) on the table and the dense
 * tensors: F32, or F16/BF16 rounded with error feedback (each id's and each
 * tensor's rounding error goes out with its next push). Tables take no I8
 * or TOPK, so neither can a sparse job. Returns 0 or -1 (printed). */
static int ts_push_format(const trainOpts *o, workCtx *w, pushFormat *pf) {
    struct sparseWork *sp = w->state;
    psWireFormat tf; /* a format tables take (tr_parse_wire without 'push') */
    if (tr_parse_push(w->push_name, pf) != 0 || tr_parse_wire(w->push_name, 0, &tf) != 0) {
        tr_err(o, "job %s pushes %s: sparse jobs push f32, bf16 or f16", o->job, w->push_name);
        return -1;
    }
    size_t per_id = (size_t)(9 + 4 * ps_ctr_row_dim(&sp->m)) * 8 / 3;
    if (psEmbedSetPushFormat(sp->e, pf->fmt) != PS_OK ||
        (pf->fmt != PS_WIRE_F32 && psEmbedSetErrorFeedback(sp->e, TS_RESID_BYTES / per_id) != PS_OK) ||
        tr_push_apply(w->m, pf) != PS_OK) {
        tr_err(o, "job %s: cannot set push format %s", o->job, w->push_name);
        return -1;
    }
    return 0;
}

static int sparse_setup(workCtx *w) {
    const trainOpts *o = w->o;
    struct sparseWork *sp;
    ps_ctr_config mc;
    psWireFormat pullf;
    pushFormat pushf;
    char err[256];
    w->batch = o->batch > 0 ? o->batch : w->cfg.batch;
    /* The job's push format (all workers send alike; a job that recorded
     * none pushes F32, as every sparse job did before). */
    if (tr_check_push_format(o, &w->cfg) != 0) return -1;
    snprintf(w->push_name, sizeof(w->push_name), "%s",
             w->cfg.push_format[0] ? w->cfg.push_format : tr_opts_default("--push-format"));
    if ((w->state = sp = calloc(1, sizeof(*sp))) == NULL) {
        tr_err(o, "out of memory");
        return -1;
    }
    if (ts_ctr_config(&w->cfg, w->batch, &mc, err, sizeof(err)) != 0 ||
        ps_ctr_init(&sp->m, &mc, w->cfg.seed, err, sizeof(err)) != 0) {
        tr_err(o, "%s", err);
        return -1;
    }
    sp->have_model = 1;
    sp->nshards = w->cfg.sp.shards;
    if ((sp->e = ts_table(o->job, &w->cfg, ps_ctr_row_dim(&sp->m))) == NULL ||
        (w->m = ts_dense_model(w->c, o->job, &sp->m)) == NULL) {
        if (sp->e == NULL) tr_err(o, "job %s: bad table (%d shards)", o->job, sp->nshards);
        return -1;
    }
    snprintf(w->pull_name, sizeof(w->pull_name), "%s",
             o->pull_format ? o->pull_format : tr_opts_default("--pull-format"));
    if (tr_parse_wire(o->pull_format, 0, &pullf) != 0 ||
        psEmbedSetPullFormat(sp->e, pullf) != PS_OK || psModelSetPullFormat(w->m, pullf) != PS_OK) {
        tr_err(o, "bad --pull-format");
        return -1;
    }
    if (ts_push_format(o, w, &pushf) != 0) return -1;
    ts_dense_arrays(&sp->m, 0, sp->dense);
    ts_dense_arrays(&sp->m, 1, sp->dgrad);
    sp->ndense = ps_ctr_dense_count(&sp->m);
    for (int i = 0; i < sp->ndense; i++) {
        ps_ctr_dense(&sp->m, i, &sp->dlen[i], NULL, NULL);
        if (o->overlap && (sp->dback[i] = malloc(sp->dlen[i] * sizeof(float))) == NULL) {
            tr_err(o, "out of memory");
            return -1;
        }
    }
    ts_reader_opts(&w->cfg, &sp->so);
    tr_key(sp->ikey, sizeof(sp->ikey), o->job, "ids");
    sp->shard_pushes = calloc((size_t)sp->nshards, sizeof(long long));
    sp->hit = calloc((size_t)sp->nshards, 1);
    sp->hll = malloc(TS_HLL_FLUSH * sizeof(uint64_t));
    sp->hll_argv = malloc((TS_HLL_FLUSH + 2) * sizeof(char *));
    sp->hll_argl = malloc((TS_HLL_FLUSH + 2) * sizeof(size_t));
    if (sp->shard_pushes == NULL || sp->hit == NULL || sp->hll == NULL || sp->hll_argv == NULL ||
        sp->hll_argl == NULL) {
        tr_err(o, "out of memory");
        return -1;
    }
    if (!w->quiet) {
        printf("[%s] job %s: model %s (row dim %d), table %s:emb of %d shards, %s, batch %d, "
               "push window %d, overlap %d\n", w->name, o->job, w->cfg.sp.model,
               ps_ctr_row_dim(&sp->m), o->job, sp->nshards, w->cfg.sp.train, w->batch, o->window,
               o->overlap);
        fflush(stdout);
    }
    return 0;
}

static void sparse_free(workCtx *w) {
    struct sparseWork *sp = w->state;
    if (sp == NULL) return;
    psEmbedFree(sp->e);
    if (sp->have_model) ps_ctr_free(&sp->m);
    for (int k = 0; k < 2; k++) {
        ps_sparse_batch_free(&sp->b[k]);
        ps_ctr_unique_free(&sp->u[k]);
        free(sp->rows[k]);
    }
    for (int i = 0; i < sp->ndense; i++) free(sp->dback[i]);
    free(sp->grows);
    free(sp->shard_pushes);
    free(sp->hit);
    free(sp->hll);
    free(sp->hll_argv);
    free(sp->hll_argl);
    free(sp->seen);
    free(sp);
    w->state = NULL;
}

/* ========================================================================
 * Steps
 * ====================================================================== */

/* PFADDs the buffered ids to psjob:{J}:ids (a report, so a failure is only
 * a warning). */
static void hll_flush(workCtx *w) {
    struct sparseWork *sp = w->state;
    const char **argv = sp->hll_argv;
    size_t *argl = sp->hll_argl;
    if (sp->nhll == 0) return;
    argv[0] = "PFADD";
    argl[0] = 5;
    argv[1] = sp->ikey;
    argl[1] = strlen(sp->ikey);
    for (size_t i = 0; i < sp->nhll; i++) {
        argv[i + 2] = (const char *)&sp->hll[i];
        argl[i + 2] = sizeof(uint64_t);
    }
    redisReply *r = psCommandArgv(w->c, sp->ikey, (int)sp->nhll + 2, argv, argl);
    if (r == NULL || r->type == REDIS_REPLY_ERROR)
        fprintf(stderr, "[%s] PFADD %s: %s\n", w->name, sp->ikey, r ? r->str : w->c->errstr);
    if (r) freeReplyObject(r);
    sp->nhll = 0;
}

/* Adds 'id' to the seen-set. Returns 1 when it is new (or the set could not
 * grow: then the id is sent again, harmless), 0 when seen before. */
static int seen_add(struct sparseWork *sp, uint64_t id) {
    if (id == UINT64_MAX) {
        int was = sp->seen_max;
        sp->seen_max = 1;
        return !was;
    }
    if (sp->seen_n >= TS_SEEN_MAX) {
        memset(sp->seen, 0, sp->seen_cap * sizeof(uint64_t));
        sp->seen_n = 0;
    }
    if (2 * (sp->seen_n + 1) > sp->seen_cap) {
        size_t cap = sp->seen_cap ? 2 * sp->seen_cap : 1 << 16;
        uint64_t *t = calloc(cap, sizeof(uint64_t));
        if (t == NULL) return 1;
        for (size_t i = 0; i < sp->seen_cap; i++) {
            if (sp->seen[i] == 0) continue;
            size_t h = (size_t)((sp->seen[i] * 0x9E3779B97F4A7C15ULL) >> 20) & (cap - 1);
            while (t[h]) h = (h + 1) & (cap - 1);
            t[h] = sp->seen[i];
        }
        free(sp->seen);
        sp->seen = t;
        sp->seen_cap = cap;
    }
    size_t h = (size_t)(((id + 1) * 0x9E3779B97F4A7C15ULL) >> 20) & (sp->seen_cap - 1);
    while (sp->seen[h] && sp->seen[h] != id + 1) h = (h + 1) & (sp->seen_cap - 1);
    if (sp->seen[h]) return 0;
    sp->seen[h] = id + 1;
    sp->seen_n++;
    return 1;
}

/* Grows 'p' (capacity '*cap' floats) to 'need' floats (contents lost).
 * 0 or -1 (out of memory). */
static int grow_floats(float **p, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    free(*p);
    *cap = 0;
    if ((*p = malloc(need * sizeof(float))) == NULL) return -1;
    *cap = need;
    return 0;
}

/* Lists batch k's distinct ids and sends its pulls: the dense tensors
 * (into the back buffers with --overlap, else the model's own arrays) and
 * its rows by id. Returns 0 (sp->inflight set) or -1 (printed; nothing in
 * flight). */
static int send_pulls(workCtx *w, int k) {
    struct sparseWork *sp = w->state;
    size_t dim = (size_t)ps_ctr_row_dim(&sp->m);
    if (ps_ctr_unique_build(&sp->u[k], &sp->b[k]) != 0 ||
        grow_floats(&sp->rows[k], &sp->cap[k], (sp->u[k].n ? sp->u[k].n : 1) * dim) != 0 ||
        grow_floats(&sp->grows, &sp->gcap, (sp->u[k].n ? sp->u[k].n : 1) * dim) != 0) {
        tr_err(w->o, "[%s] out of memory", w->name);
        return -1;
    }
    double t0 = tr_now();
    if (psModelPullAsync(w->c, w->m, w->o->overlap ? sp->dback : sp->dense) != PS_OK) {
        tr_err(w->o, "[%s] pull: %s", w->name, w->c->errstr);
        return -1;
    }
    if (psEmbedPullAsync(w->c, sp->e, sp->u[k].ids, sp->u[k].n, sp->rows[k]) != PS_OK) {
        tr_err(w->o, "[%s] pull: %s", w->name, w->c->errstr);
        psModelPullWait(w->c, w->m, NULL);
        return -1;
    }
    sp->inflight = 1;
    w->st.t_pull += tr_now() - t0;
    return 0;
}

/* Waits for the pulls in flight (both, also after an error) and, with
 * --overlap, copies the dense values into the model. 0 or -1 (printed). */
static int wait_pulls(workCtx *w) {
    struct sparseWork *sp = w->state;
    double t0 = tr_now();
    int rc = 0;
    if (!sp->inflight) return 0;
    sp->inflight = 0;
    if (psEmbedPullWait(w->c, sp->e) != PS_OK) {
        tr_err(w->o, "[%s] pull: %s", w->name, w->c->errstr);
        rc = -1;
    }
    if (psModelPullWait(w->c, w->m, NULL) != PS_OK) {
        if (rc == 0) tr_err(w->o, "[%s] pull: %s", w->name, w->c->errstr);
        rc = -1;
    }
    for (int i = 0; rc == 0 && w->o->overlap && i < sp->ndense; i++)
        memcpy(sp->dense[i], sp->dback[i], sp->dlen[i] * sizeof(float));
    w->st.t_pull += tr_now() - t0;
    return rc;
}

/* Gradient and push of batch k, whose pulls were waited for. Returns 0 or
 * -1 (printed). */
static int compute_push(workCtx *w, int k, int epoch) {
    struct sparseWork *sp = w->state;
    const ps_ctr_unique *u = &sp->u[k];
    int nb = sp->b[k].n;
    char err[256];
    double loss, t1 = tr_now();
    if (ps_ctr_grad(&sp->m, &sp->b[k], u, sp->rows[k], sp->grows, &loss, err, sizeof(err)) != 0) {
        tr_err(w->o, "[%s] %s", w->name, err);
        return -1;
    }
    double t2 = tr_now();
    if (psEmbedPush(w->c, sp->e, u->ids, u->n, sp->grows, 0) != PS_OK ||
        psModelPush(w->c, w->m, (const float *const *)sp->dgrad, NULL, 1.0f) != PS_OK) {
        tr_err(w->o, "[%s] push: %s", w->name, w->c->errstr);
        return -1;
    }
    memset(sp->hit, 0, (size_t)sp->nshards);
    for (size_t i = 0; i < u->n; i++) sp->hit[psEmbedShardOf(u->ids[i], sp->nshards)] = 1;
    for (int s = 0; s < sp->nshards; s++) sp->shard_pushes[s] += sp->hit[s];
    if (epoch == 1) {
        for (size_t i = 0; i < u->n; i++) {
            if (!seen_add(sp, u->ids[i])) continue;
            sp->hll[sp->nhll++] = u->ids[i];
            if (sp->nhll == TS_HLL_FLUSH) hll_flush(w);
        }
    }
    w->st.t_grad += t2 - t1;
    w->st.t_push += tr_now() - t2;
    w->st.pushes++;
    w->st.win_loss += nb ? loss / nb : 0.0;
    w->st.win_batches++;
    w->st.win_samples += nb;
    w->st.samples += nb;
    /* The progress line's version: pushes the table's shards applied. */
    uint64_t v = 0;
    for (int s = 0; s < sp->nshards; s++) v += psEmbedShardVersion(sp->e, s);
    w->st.last_version = v;
    return 0;
}

static int sparse_task(workCtx *w, task *t) {
    struct sparseWork *sp = w->state;
    char err[512];
    int got, next = 0, cur = 0, rc = 1, ov = w->o->overlap;
    if (t->start < 0 || t->count < 1 || t->start + t->count > w->cfg.sp.train_bytes) {
        tr_err(w->o, "[%s] task %s covers bytes %lld..%lld but %s has %lld", w->name, t->id,
               t->start, t->start + t->count - 1, w->cfg.sp.train, w->cfg.sp.train_bytes);
        return -1;
    }
    w->st.cur_epoch = t->epoch;
    t->samples = 0;
    sp->so.start = (uint64_t)t->start;
    sp->so.end = (uint64_t)(t->start + t->count);
    ps_sparse_reader *r = ps_sparse_open(w->cfg.sp.train, &sp->so, err, sizeof(err));
    if (r == NULL) {
        tr_err(w->o, "[%s] %s", w->name, err);
        return -1;
    }
    double renew_at = tr_now() + w->o->lease_ms / 3000.0;
    got = ps_sparse_read(r, &sp->b[cur], w->batch, err, sizeof(err));
    if (got > 0 && send_pulls(w, cur) != 0) rc = -1;
    /* Batch 'cur' (got rows) has its pulls in flight here. */
    while (rc == 1 && got > 0) {
        if (tw_stop) {
            rc = -2;
            break;
        }
        /* The next batch is read and parsed while this one's pulls fly, in
         * both modes (its own pulls go out after this push without
         * --overlap, so what it reads is unchanged). */
        next = ps_sparse_read(r, &sp->b[!cur], w->batch, err, sizeof(err));
        if (wait_pulls(w) != 0 || (ov && next > 0 && send_pulls(w, !cur) != 0) ||
            compute_push(w, cur, t->epoch) != 0) {
            rc = -1;
            break;
        }
        t->samples += got;
        print_progress(w, 0);
        if (tr_now() >= renew_at) {
            int own = tw_renew_lease(w, t);
            if (own <= 0) {
                if (own < 0)
                    tr_err(w->o, "[%s] renewing the lease of %s: %s", w->name, t->id,
                           w->c->errstr);
                rc = own;
                break;
            }
            renew_at = tr_now() + w->o->lease_ms / 3000.0;
        }
        if (!ov && next > 0 && send_pulls(w, !cur) != 0) rc = -1;
        cur = !cur;
        got = next;
    }
    /* Leaving early (error, stop, lease lost): the prefetched batch's pulls
     * are read and dropped, so nothing is in flight into our buffers. */
    if (sp->inflight && wait_pulls(w) != 0 && rc == 1) rc = -1;
    if (got < 0) {
        tr_err(w->o, "[%s] %s", w->name, err);
        rc = -1;
    }
    ps_sparse_close(r);
    if (rc == 1) hll_flush(w);
    return rc;
}

static void sparse_report(workCtx *w) {
    struct sparseWork *sp = w->state;
    char list[4096] = "";
    size_t n = 0;
    for (int s = 0; s < sp->nshards && n + 24 < sizeof(list); s++)
        n += (size_t)snprintf(list + n, sizeof(list) - n, "%s%lld", s ? "," : "",
                              sp->shard_pushes[s]);
    /* After the final drain every table push is acknowledged: a shard's
     * version minus the sum over the workers counts pushes lost (< 0) or
     * applied twice (> 0), as the dense ACKED line does for partitions. */
    printf("ACKED_TABLE worker=%s table=%s:emb shards=%d shard_pushes=%s rows_pulled=%llu "
           "rows_pushed=%llu wait_short=%llu\n", w->name, w->o->job, sp->nshards, list,
           (unsigned long long)w->c->stats.rows_pulled,
           (unsigned long long)w->c->stats.rows_pushed, (unsigned long long)w->c->stats.wait_short);
}

/* Nothing is in flight between tasks (a task waits for its pulls). */
static int sparse_finish(workCtx *w) {
    (void)w;
    return 0;
}

const trainer SparseTrainer = {"sparse", sparse_setup, sparse_task, sparse_finish, sparse_report,
                               sparse_free};
