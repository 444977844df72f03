/* dense_trainer.c -- ps-train's dense trainer (trainer.h): the MLP of
 * ml/nn.h trained on samples [start, start + count) of the job's data per
 * task. Per mini-batch: pull the model (every --pull-every batches; with
 * --overlap the next pull is in flight while this gradient is computed,
 * into a second buffer), compute the mean gradient, push it with the
 * versions of the pull it was computed from.
 *
 * PS_TRAIN_TRACE=FILE (tests) writes a line per pull and per push with a
 * digest of the parameters the gradient read and the versions sent. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dense.h"
#include "util.h"
#include "wirefmt.h"

/* The dense trainer's state (w->state). */
typedef struct denseWork {
    ps_dataset ds;
    ps_mlp mlp;
    float **params, **grads; /* params: the front buffer, mlp.W/mlp.b */
    float **back;           /* per tensor: the buffer an overlapped pull fills */
    FILE *trace;            /* PS_TRAIN_TRACE: one line per pull and per push */
    float *xb;
    int32_t *yb;
    int *perm;
    uint64_t *vers;         /* per tensor: versions of the model in params */
    int have_params;        /* params hold a pulled model */
    int pull_inflight;      /* a psModelPullAsync into back is pending */
    int since_pull;         /* steps computed on the current params */
    int pushes_since_pull;
} denseWork;

/* FNV-1a over the bytes of the front buffer: the trace's fingerprint of
 * the model a gradient is computed from. */
static uint64_t params_digest(const workCtx *w) {
    const denseWork *d = w->state;
    uint64_t h = 1469598103934665603ULL;
    for (int t = 0; t < psModelNumTensors(w->m); t++) {
        const unsigned char *b = (const unsigned char *)d->params[t];
        size_t n = psModelTensorElements(w->m, t) * sizeof(float);
        for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ULL;
    }
    return h;
}

/* Writes one trace line "<what> <digest> <version per tensor...>" (when
 * PS_TRAIN_TRACE names a file). */
static void trace_line(workCtx *w, const char *what, const uint64_t *vers) {
    denseWork *d = w->state;
    if (d->trace == NULL) return;
    fprintf(d->trace, "%s %016llx", what, (unsigned long long)params_digest(w));
    for (int t = 0; t < psModelNumTensors(w->m); t++)
        fprintf(d->trace, " %llu", (unsigned long long)vers[t]);
    fputc('\n', d->trace);
}

/* Makes the back buffer the front one: the model that an overlapped pull
 * decoded becomes what the gradients read, and the old front is free for
 * the next pull. The MLP computes from mlp.W/mlp.b, so those swap too. */
static void swap_buffers(workCtx *w) {
    denseWork *d = w->state;
    for (int t = 0; t < psModelNumTensors(w->m); t++) {
        float *x = d->params[t];
        d->params[t] = d->back[t];
        d->back[t] = x;
    }
    for (int l = 0; l < d->mlp.nlayers; l++) {
        d->mlp.W[l] = d->params[2 * l];
        d->mlp.b[l] = d->params[2 * l + 1];
    }
}

/* Makes d->params hold the model for the next gradient: waits for the pull
 * in flight (into the back buffer, then swaps), or pulls now when the last
 * pull is --pull-every batches old (or there was none). d->vers gets the
 * versions of what was pulled: always those of the data in d->params.
 * Returns 0 or -1. */
static int fresh_params(workCtx *w) {
    denseWork *d = w->state;
    double t0 = tr_now();
    int rc = PS_OK;
    if (d->pull_inflight) {
        d->pull_inflight = 0;
        rc = psModelPullWait(w->c, w->m, d->vers);
        if (rc == PS_OK) swap_buffers(w);
    } else if (d->have_params && w->o->sync_rounds) {
        /* A relay's sync round: wait for the model our last push went into. */
        rc = psModelPullMinVersion(w->c, w->m, d->params, NULL, w->o->sync_rounds, d->vers);
        rc = rc >= 0 ? PS_OK : rc;
    } else if (!d->have_params || d->since_pull >= w->o->pull_every) {
        rc = psModelPull(w->c, w->m, d->params, d->vers);
    } else {
        return 0;
    }
    d->since_pull = 0;
    d->have_params = 1;
    w->st.t_pull += tr_now() - t0;
    if (rc != PS_OK) {
        tr_err(w->o, "[%s] pull: %s", w->name, w->c->errstr);
        return -1;
    }
    trace_line(w, "pull", d->vers);
    uint64_t v = d->vers[0];
    if (w->st.last_version > 0 || w->st.samples > 0) {
        /* Pushes by others between two pulls (ours are among them). */
        double s = (double)v - (double)w->st.last_version - d->pushes_since_pull;
        w->st.win_stale += s > 0 ? s : 0;
        w->st.win_stale_n++;
    }
    d->pushes_since_pull = 0;
    w->st.last_version = v;
    return 0;
}

/* One step on rows rows[0..nb): the model up to date (fresh_params); with
 * --overlap the pull for the next step is sent now into the back buffer,
 * so the server answers it while this gradient is computed from the front
 * one (the next gradient misses this step's own push: one step more
 * staleness); then the gradient and its push (asynchronous, with the
 * versions of the front buffer it was computed from). Returns 0 or -1. */
static int step(workCtx *w, const int *rows, int nb) {
    denseWork *d = w->state;
    size_t dim = (size_t)d->ds.dim;
    for (int i = 0; i < nb; i++) {
        memcpy(d->xb + (size_t)i * dim, d->ds.x + (size_t)rows[i] * dim, dim * sizeof(float));
        d->yb[i] = d->ds.y[rows[i]];
    }
    if (fresh_params(w) != 0) return -1;
    d->since_pull++;
    if (w->o->overlap && d->since_pull >= w->o->pull_every) {
        if (psModelPullAsync(w->c, w->m, d->back) != PS_OK) {
            tr_err(w->o, "[%s] pull: %s", w->name, w->c->errstr);
            return -1;
        }
        d->pull_inflight = 1;
    }
    double t1 = tr_now();
    float loss = ps_mlp_grad(&d->mlp, d->xb, d->yb, nb);
    double t2 = tr_now();
    w->st.t_grad += t2 - t1;
    if (loss != loss) {
        tr_err(w->o, "[%s] gradient failed (bad label or batch)", w->name);
        return -1;
    }
    if (psModelPush(w->c, w->m, (const float *const *)d->grads, NULL, 1.0f) != PS_OK) {
        tr_err(w->o, "[%s] push: %s", w->name, w->c->errstr);
        return -1;
    }
    /* After the push returned (libps may have decoded pull replies meanwhile):
     * the front buffer must still be the model of the versions just sent. */
    trace_line(w, "push", d->vers);
    w->st.t_push += tr_now() - t2;
    w->st.pushes++;
    d->pushes_since_pull++;
    w->st.win_loss += loss;
    w->st.win_batches++;
    w->st.win_samples += nb;
    w->st.samples += nb;
    return 0;
}

/* Trains on task 't'. Returns 1 done, 0 abandoned (lease lost), -1 error,
 * -2 interrupted (tw_stop). */
static int run_task(workCtx *w, const task *t) {
    denseWork *d = w->state;
    if (t->start < 0 || t->count < 0 || t->start + t->count > d->ds.n) {
        tr_err(w->o, "[%s] task %s covers samples %lld..%lld but the data has %d", w->name, t->id,
               t->start, t->start + t->count - 1, d->ds.n);
        return -1;
    }
    w->st.cur_epoch = t->epoch;
    int n = (int)t->count;
    for (int i = 0; i < n; i++) d->perm[i] = (int)t->start + i;
    PSRng rng;
    ps_rng_seed(&rng, w->cfg.seed ^ ((uint64_t)t->epoch << 40) ^ (uint64_t)t->start);
    for (int i = n - 1; i > 0; i--) {
        int j = (int)ps_rng_below(&rng, (uint64_t)i + 1), x = d->perm[i];
        d->perm[i] = d->perm[j];
        d->perm[j] = x;
    }
    double renew_at = tr_now() + w->o->lease_ms / 3000.0;
    for (int s = 0; s < n; s += w->batch) {
        int nb = n - s < w->batch ? n - s : w->batch;
        if (tw_stop) return -2;
        if (step(w, d->perm + s, nb) != 0) return -1;
        print_progress(w, 0);
        if (tr_now() >= renew_at) {
            int own = tw_renew_lease(w, t);
            if (own < 0) {
                tr_err(w->o, "[%s] renewing the lease of %s: %s", w->name, t->id, w->c->errstr);
                return -1;
            }
            if (own == 0) return 0;
            renew_at = tr_now() + w->o->lease_ms / 3000.0;
        }
    }
    return 1;
}

static int dense_setup(workCtx *w) {
    const trainOpts *o = w->o;
    char err[256];
    denseWork *d = calloc(1, sizeof(*d));
    if ((w->state = d) == NULL) {
        tr_err(o, "out of memory");
        return -1;
    }
    w->batch = o->batch > 0 ? o->batch : w->cfg.batch;
    if ((w->m = tr_model(w->c, o->job, &w->cfg)) == NULL) return -1;
    if (tr_load_data(&w->cfg, NULL, 1, &d->ds) != 0) return -1;
    if (d->ds.dim != w->cfg.sizes[0]) {
        tr_err(o, "the data has %d features but the model's input is %d", d->ds.dim,
               w->cfg.sizes[0]);
        return -1;
    }
    if (ps_mlp_init(&d->mlp, w->cfg.sizes, w->cfg.nsizes, w->batch, err, sizeof(err)) != 0) {
        tr_err(o, "%s", err);
        return -1;
    }
    int nt = psModelNumTensors(w->m);
    psWireFormat pullf;
    pushFormat pushf;
    /* The job's push format wins (all workers send alike); a job from before
     * it was recorded takes the flag. */
    if (tr_check_push_format(o, &w->cfg) != 0) return -1;
    snprintf(w->push_name, sizeof(w->push_name), "%s",
             w->cfg.push_format[0] ? w->cfg.push_format
             : o->push_format     ? o->push_format
                                  : tr_opts_default("--push-format"));
    snprintf(w->pull_name, sizeof(w->pull_name), "%s",
             o->pull_format            ? o->pull_format
             : w->cfg.pull_format[0] ? w->cfg.pull_format
                                      : tr_opts_default("--pull-format"));
    if (tr_parse_wire(w->pull_name, 1, &pullf) != 0 ||
        tr_parse_push(w->push_name, &pushf) != 0 ||
        psModelSetPullFormat(w->m, pullf) != PS_OK || tr_push_apply(w->m, &pushf) != PS_OK) {
        tr_err(o, "bad --pull-format or --push-format");
        return -1;
    }
    d->vers = calloc((size_t)nt, sizeof(uint64_t));
    d->params = calloc((size_t)nt, sizeof(float *));
    d->grads = calloc((size_t)nt, sizeof(float *));
    d->back = calloc((size_t)nt, sizeof(float *));
    d->xb = malloc((size_t)w->batch * (size_t)d->ds.dim * sizeof(float));
    d->yb = malloc((size_t)w->batch * sizeof(int32_t));
    d->perm = malloc((size_t)(w->cfg.shard_size > d->ds.n ? d->ds.n : w->cfg.shard_size) *
                     sizeof(int) + sizeof(int));
    if (!d->vers || !d->params || !d->grads || !d->back || !d->xb || !d->yb || !d->perm) {
        tr_err(o, "out of memory");
        return -1;
    }
    for (int l = 0; l < d->mlp.nlayers; l++) {
        d->params[2 * l] = d->mlp.W[l];
        d->params[2 * l + 1] = d->mlp.b[l];
        d->grads[2 * l] = d->mlp.gW[l];
        d->grads[2 * l + 1] = d->mlp.gb[l];
    }
    for (int t = 0; t < nt && o->overlap; t++) {
        d->back[t] = calloc(psModelTensorElements(w->m, t), sizeof(float));
        if (d->back[t] == NULL) {
            tr_err(o, "out of memory");
            return -1;
        }
    }
    const char *tp = getenv("PS_TRAIN_TRACE");
    if (tp && *tp && (d->trace = fopen(tp, "w")) == NULL) {
        tr_err(o, "PS_TRAIN_TRACE %s: cannot open", tp);
        return -1;
    }
    if (!w->quiet) {
        printf("[%s] job %s: layers %s, batch %d, %d samples, push window %d, push %s\n",
               w->name, o->job, w->cfg.layers, w->batch, d->ds.n, o->window, w->push_name);
        fflush(stdout);
    }
    return 0;
}

/* The overlapped pull of the last step, if any, is read (its model is not
 * used). */
static int dense_finish(workCtx *w) {
    denseWork *d = w->state;
    if (!d->pull_inflight) return 0;
    d->pull_inflight = 0;
    if (psModelPullWait(w->c, w->m, NULL) != PS_OK) {
        tr_err(w->o, "[%s] pull: %s", w->name, w->c->errstr);
        return -1;
    }
    return 0;
}

/* The ACKED line (work.c) says it all. */
static void dense_report(workCtx *w) {
    (void)w;
}

static void dense_free(workCtx *w) {
    denseWork *d = w->state;
    if (d == NULL) return;
    if (d->pull_inflight) psModelPullWait(w->c, w->m, NULL);
    /* mlp.W/mlp.b may point at what setup allocated as the back buffer:
     * free whatever is the back buffer now, ps_mlp_free the front. */
    for (int t = 0; d->back && w->m && t < psModelNumTensors(w->m); t++) free(d->back[t]);
    free(d->back);
    if (d->trace) fclose(d->trace);
    free(d->vers);
    free(d->params);
    free(d->grads);
    free(d->xb);
    free(d->yb);
    free(d->perm);
    ps_mlp_free(&d->mlp);
    ps_dataset_free(&d->ds);
    free(d);
    w->state = NULL;
}

static int dense_task(workCtx *w, task *t) {
    t->samples = t->count;
    return run_task(w, t);
}

const trainer DenseTrainer = {"dense", dense_setup, dense_task, dense_finish, dense_report,
                              dense_free};

