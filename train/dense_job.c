/* dense_job.c -- ps-train's dense (MLP) jobs: the model layout and the
 * data of a job, init's fresh job, --reset's delete, status, eval and run's
 * RESULT line (dense.h; DenseKind, kind.h). The dense trainer is
 * dense_trainer.c. */

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conn.h"
#include "dense.h"
#include "kind.h"
#include "runlog.h"
#include "tasks.h"
#include "util.h"
#include "wirefmt.h"

psModel *tr_model(psClient *c, const char *job, const jobConfig *cfg) {
    psModel *m = psModelNew(job);
    if (m == NULL) return NULL;
    if (cfg->partition_bytes > 0) psModelSetPartitionBytes(m, (size_t)cfg->partition_bytes);
    for (int l = 0; l + 1 < cfg->nsizes; l++) {
        char name[16];
        uint64_t wd[2] = {(uint64_t)cfg->sizes[l + 1], (uint64_t)cfg->sizes[l]};
        uint64_t bd[1] = {(uint64_t)cfg->sizes[l + 1]};
        snprintf(name, sizeof(name), "W%d", l);
        if (psModelAddTensor(m, name, 2, wd) < 0) goto fail;
        snprintf(name, sizeof(name), "b%d", l);
        if (psModelAddTensor(m, name, 1, bd) < 0) goto fail;
    }
    if (psModelLayout(c, m) != PS_OK) goto fail;
    return m;
fail:
    fprintf(stderr, "ps-train: model layout failed: %s\n", c->err ? c->errstr : "bad shape");
    psModelFree(m);
    return NULL;
}


int tr_load_data(const jobConfig *cfg, const char *test_csv_override, int train, ps_dataset *ds) {
    char err[512];
    int rc;
    if (cfg->csv[0]) {
        const char *path = train ? cfg->csv : (test_csv_override ? test_csv_override
                                                : cfg->test_csv[0] ? cfg->test_csv : NULL);
        if (path == NULL) {
            fprintf(stderr, "ps-train: the job trains on CSV %s but has no test CSV "
                            "(--test-csv FILE)\n", cfg->csv);
            return -1;
        }
        rc = ps_dataset_load_csv(path, cfg->label_col, ds, err, sizeof(err));
    } else {
        rc = ps_dataset_fashion_mnist(cfg->data[0] ? cfg->data : NULL, train, ds, err, sizeof(err));
    }
    if (rc != 0) {
        fprintf(stderr, "ps-train: %s\n", err);
        return -1;
    }
    if (train && cfg->train_n > 0 && cfg->train_off + cfg->train_n < ds->n)
        ds->n = cfg->train_off + cfg->train_n;
    return 0;
}


/* Loads the test split that eval will use (the config's, or --test-csv)
 * and checks it fits the model: as many features as the input width,
 * labels below the output width. Returns 0, or -1 (printed). Run calls it
 * before the first step, so a bad test file fails before training. */
int tr_check_test(const trainOpts *o, const jobConfig *cfg) {
    const denseOpts *d = &o->dense;
    ps_dataset ds = {0};
    int rc = -1;
    if (tr_load_data(cfg, d->test_csv, 0, &ds) != 0) return -1;
    if (ds.dim != cfg->sizes[0])
        tr_err(o, "the test data%s%s has %d features but the model's input width is %d",
               cfg->csv[0] ? " " : "", cfg->csv[0] ? (d->test_csv ? d->test_csv : cfg->test_csv)
                                                    : "", ds.dim, cfg->sizes[0]);
    else if (ds.nclasses > cfg->sizes[cfg->nsizes - 1])
        tr_err(o, "the test data has labels up to %d but the model's output width is %d",
               ds.nclasses - 1, cfg->sizes[cfg->nsizes - 1]);
    else
        rc = 0;
    ps_dataset_free(&ds);
    return rc;
}


/* Creates the model tensors of 'cfg' with NX. Returns 0 or -1. */
static int create_tensors(const trainOpts *o, psClient *c, psModel *m, const jobConfig *cfg) {
    char wopts[256], bopts[256], extra[64] = "";
    if (o->momentum >= 0) snprintf(extra, sizeof(extra), " MOMENTUM %.17g", o->momentum);
    snprintf(wopts, sizeof(wopts), "INIT HE SEED %llu OPTIM %s LR %.17g%s",
             (unsigned long long)cfg->seed, cfg->optim, cfg->lr, extra);
    snprintf(bopts, sizeof(bopts), "INIT ZEROS OPTIM %s LR %.17g%s", cfg->optim, cfg->lr, extra);
    int created = 0, parts = 0;
    for (int t = 0; t < psModelNumTensors(m); t++) {
        int n = psModelCreateTensor(c, m, t, t % 2 == 0 ? wopts : bopts, 1);
        if (n < 0) {
            tr_err(o, "creating tensor %s: %s", psModelTensorName(m, t), c->errstr);
            return -1;
        }
        created += n;
        parts += psModelNumPartitions(m, t);
    }
    if (created == parts) {
        printf("ps-train %s: model %s: %d tensors in %d keys (%d created), optimizer %s lr %g\n",
               o->cmd, o->job, psModelNumTensors(m), parts, created, cfg->optim, cfg->lr);
        return 0;
    }
    /* Keys that existed keep their own optimizer (e.g. a relay's ACCUM tensors, whose
     * upstream holds the real one): say what the server has, not what NX skipped. */
    char have[32] = "?", lr[32] = "?";
    const char *key0 = psModelPartitionKey(m, 0, 0);
    psKeyInfo ki;
    if (psInfo(c, key0, &ki) == PS_OK) {
        snprintf(have, sizeof(have), "%s", ki.optimizer);
        snprintf(lr, sizeof(lr), "%g", ki.lr);
    }
    printf("ps-train %s: model %s: %d tensors in %d keys (%d created, %d existed and keep their "
           "settings: %s holds optimizer %s lr %s)\n", o->cmd, o->job, psModelNumTensors(m),
           parts, created, parts - created, key0, have, lr);
    return 0;
}


/* Fresh dense job after init's HSETNX: builds the config from the flags
 * and the data, writes it, creates the tensors (NX) and fills the stream.
 * Deletes the tensors it created when it fails (the caller deletes the
 * config and the stream). Returns TR_EXIT_*. */
int tr_dense_init(const trainOpts *o, psClient *c) {
    char ckey[128];
    int status = TR_EXIT_FAIL;
    psModel *m = NULL;
    ps_dataset ds = {0};
    jobConfig cfg;
    redisReply *r;
    tr_key(ckey, sizeof(ckey), o->job, "config");
    /* Fresh job: build the config from the flags and the data. */
    memset(&cfg, 0, sizeof(cfg));
    snprintf(cfg.layers, sizeof(cfg.layers), "%s", o->dense.layers);
    char err[256];
    cfg.nsizes = ps_parse_layers(cfg.layers, cfg.sizes, TR_MAX_LAYERS, err, sizeof(err));
    for (size_t i = 0; o->optim[i] && i + 1 < sizeof(cfg.optim); i++)
        cfg.optim[i] = (char)(o->optim[i] >= 'a' && o->optim[i] <= 'z' ? o->optim[i] - 32
                                                                       : o->optim[i]);
    cfg.lr = o->lr;
    cfg.batch = o->batch;
    cfg.epochs = o->epochs;
    cfg.shard_size = o->dense.task_samples;
    cfg.partition_bytes = o->dense.partition_bytes;
    cfg.seed = o->seed;
    cfg.label_col = o->dense.label_col;
    pushFormat pf;
    tr_parse_push(o->push_format, &pf); /* validated with the flags */
    tr_push_name(&pf, cfg.push_format, sizeof(cfg.push_format));
    /* TOPK shrinks a push ~50x, so the dense model pull is then nearly all
     * of a step's bytes: a TOPK job pulls I8 (a quarter of F32) unless a
     * worker asks otherwise. Measured on a 100 Mbit/s link (make
     * bench-shaped): TOPK 1% with F32 pulls 1.9x F32's samples/s, with I8
     * pulls about 7x, at F32's accuracy (docs/benchmarks.md). */
    snprintf(cfg.pull_format, sizeof(cfg.pull_format), "%s",
             pf.fmt == PS_WIRE_TOPK ? "i8" : tr_opts_default("--pull-format"));
    if (o->dense.data) snprintf(cfg.data, sizeof(cfg.data), "%s", o->dense.data);
    if (o->dense.csv) snprintf(cfg.csv, sizeof(cfg.csv), "%s", o->dense.csv);
    if (o->dense.test_csv) snprintf(cfg.test_csv, sizeof(cfg.test_csv), "%s", o->dense.test_csv);
    if (tr_load_data(&cfg, NULL, 1, &ds) != 0) goto out;
    if (cfg.sizes[0] != ds.dim) {
        tr_err(o, "--layers: input width %d does not match the data's %d features", cfg.sizes[0],
               ds.dim);
        status = TR_EXIT_USAGE;
        goto out;
    }
    if (cfg.sizes[cfg.nsizes - 1] < ds.nclasses) {
        tr_err(o, "--layers: output width %d is below the data's %d classes",
               cfg.sizes[cfg.nsizes - 1], ds.nclasses);
        status = TR_EXIT_USAGE;
        goto out;
    }
    cfg.train_n = o->dense.limit > 0 && o->dense.limit < ds.n ? o->dense.limit : ds.n;
    if (o->dense.slice) {
        /* The K-th of N contiguous parts: a site that trains on its own data. */
        int k, n, end;
        if (sscanf(o->dense.slice, "%d/%d%n", &k, &n, &end) != 2 || o->dense.slice[end] != '\0' ||
            n < 1 || k < 1 || k > n || n > cfg.train_n) {
            tr_err(o, "--slice %s: want K/N with 1 <= K <= N <= %d (the train samples)",
                   o->dense.slice, cfg.train_n);
            status = TR_EXIT_USAGE;
            goto out;
        }
        long long first = (long long)(k - 1) * cfg.train_n / n;
        long long last = (long long)k * cfg.train_n / n;
        cfg.train_off = (int)first;
        cfg.train_n = (int)(last - first);
        snprintf(cfg.slice, sizeof(cfg.slice), "%d/%d", k, n);
    }
    if (cfg.test_csv[0] && tr_check_test(o, &cfg) != 0) {
        status = TR_EXIT_USAGE;
        goto out;
    }

    char nums[11][32];
    snprintf(nums[0], 32, "%.17g", cfg.lr);
    snprintf(nums[1], 32, "%d", cfg.batch);
    snprintf(nums[2], 32, "%d", cfg.epochs);
    snprintf(nums[3], 32, "%d", cfg.shard_size);
    snprintf(nums[4], 32, "%lld", cfg.partition_bytes);
    snprintf(nums[5], 32, "%d", cfg.label_col);
    snprintf(nums[6], 32, "%d", cfg.train_n);
    snprintf(nums[7], 32, "%llu", (unsigned long long)cfg.seed);
    snprintf(nums[8], 32, "%.17g", o->momentum < 0 ? -1.0 : o->momentum);
    snprintf(nums[9], 32, "%d", o->dense.limit);
    snprintf(nums[10], 32, "%d", cfg.train_off);
    {
        const char *argv[] = {"HSET", ckey, "layers", cfg.layers, "optim", cfg.optim,
                              "lr", nums[0], "batch", nums[1], "epochs", nums[2],
                              "shard_size", nums[3], "partition_bytes", nums[4],
                              "data", cfg.data, "csv", cfg.csv, "test_csv", cfg.test_csv,
                              "label_col", nums[5], "train_n", nums[6], "seed", nums[7],
                              "momentum", nums[8], "limit", nums[9],
                              "train_off", nums[10], "slice", cfg.slice,
                              "push_format", cfg.push_format,
                              "pull_format", cfg.pull_format};
        int argc = (int)(sizeof(argv) / sizeof(argv[0]));
        size_t argl[sizeof(argv) / sizeof(argv[0])];
        for (int i = 0; i < argc; i++) argl[i] = strlen(argv[i]);
        r = psCommandArgv(c, ckey, argc, argv, argl);
        if (r == NULL || r->type == REDIS_REPLY_ERROR) {
            tr_err(o, "HSET %s: %s", ckey, r ? r->str : c->errstr);
            if (r) freeReplyObject(r);
            goto out;
        }
        freeReplyObject(r);
    }
    if ((m = tr_model(c, o->job, &cfg)) == NULL) goto out;
    if (create_tensors(o, c, m, &cfg) != 0) goto out;
    cfg.tasks = tr_fill_tasks(o, c, &cfg, cfg.train_off, cfg.train_n, cfg.shard_size);
    if (cfg.tasks < 0) goto out;
    char ntasks[32];
    snprintf(ntasks, sizeof(ntasks), "%lld", cfg.tasks);
    r = tr_cmd_ok(o, c, ckey, "HSET %s tasks %s state ready", ckey, ntasks);
    if (r == NULL) goto out;
    freeReplyObject(r);
    printf("ps-train %s: job %s: %d samples%s%s%s, %d epochs, shards of %d -> %lld tasks; batch %d\n",
           o->cmd, o->job, cfg.train_n, cfg.slice[0] ? " (slice " : "", cfg.slice,
           cfg.slice[0] ? ")" : "", cfg.epochs, cfg.shard_size, cfg.tasks, cfg.batch);
    status = TR_EXIT_OK;

out:
    if (status != TR_EXIT_OK && m) psModelDelete(c, m);
    ps_dataset_free(&ds);
    psModelFree(m);
    return status;
}

/* DEL the tensors of dense job 'cfg'. 0 or -1 (printed). */
int tr_dense_delete(const trainOpts *o, psClient *c, const jobConfig *cfg) {
    psModel *m = tr_model(c, o->job, cfg);
    if (m == NULL) return -1;
    int n = psModelDelete(c, m);
    psModelFree(m);
    if (n < 0) {
        tr_err(o, "deleting the tensors: %s", c->errstr);
        return -1;
    }
    printf("ps-train %s: --reset: deleted %d tensor keys of job %s\n", o->cmd, n, o->job);
    return 0;
}

/* Pulls snapshot 'at' of every partition into params. Returns 0 or -1. */
static int pull_snapshot(const trainOpts *o, psClient *c, psModel *m, float **params,
                         uint64_t *version) {
    *version = UINT64_MAX;
    for (int t = 0; t < psModelNumTensors(m); t++) {
        size_t elems = psModelTensorElements(m, t), rows = 0;
        for (int p = 0; p < psModelNumPartitions(m, t); p++) {
            uint64_t first, nrows;
            psModelPartitionRows(m, t, p, &first, &nrows);
            rows += nrows;
        }
        size_t row_elems = elems / rows;
        for (int p = 0; p < psModelNumPartitions(m, t); p++) {
            const char *key = psModelPartitionKey(m, t, p);
            uint64_t first, nrows;
            psModelPartitionRows(m, t, p, &first, &nrows);
            uint64_t v;
            if (psTensorPull(c, key, o->at, params[t] + first * row_elems, nrows * row_elems,
                             &v) != PS_OK) {
                tr_err(o, "--at %s: %s", o->at, c->errstr);
                return -1;
            }
            if (v < *version) *version = v;
        }
    }
    return 0;
}

int tr_evaluate(const trainOpts *o, double *loss, double *acc, uint64_t *version, int *ntest) {
    jobConfig cfg;
    ps_mlp mlp = {0};
    ps_dataset ds = {0};
    psModel *m = NULL;
    float **params = NULL;
    char err[256];
    int status = -1;
    psClient *c = tr_connect(o, 0, 0);
    if (c == NULL) return -1;
    int rc = tr_load_config(c, o->job, &cfg);
    if (rc != 0) {
        if (rc == 1) tr_err(o, "--job %s: no such job", o->job);
        goto out;
    }
    if (strcmp(cfg.state, "ready") != 0) {
        tr_err(o, "--job %s: init has not finished", o->job);
        goto out;
    }
    if ((m = tr_model(c, o->job, &cfg)) == NULL) goto out;
    if (tr_load_data(&cfg, o->dense.test_csv, 0, &ds) != 0) goto out;
    if (ds.dim != cfg.sizes[0]) {
        tr_err(o, "the test data has %d features but the model's input is %d", ds.dim,
               cfg.sizes[0]);
        goto out;
    }
    if (ps_mlp_init(&mlp, cfg.sizes, cfg.nsizes, 1000, err, sizeof(err)) != 0) {
        tr_err(o, "%s", err);
        goto out;
    }
    params = calloc((size_t)psModelNumTensors(m), sizeof(float *));
    if (params == NULL) goto out;
    for (int l = 0; l < mlp.nlayers; l++) {
        params[2 * l] = mlp.W[l];
        params[2 * l + 1] = mlp.b[l];
    }
    uint64_t v = 0;
    if (o->at) {
        if (pull_snapshot(o, c, m, params, &v) != 0) goto out;
    } else {
        if (psModelPull(c, m, params, NULL) != PS_OK) {
            tr_err(o, "pull: %s", c->errstr);
            goto out;
        }
        v = psModelPartitionVersion(m, 0, 0);
    }
    ps_mlp_evaluate(&mlp, ds.x, ds.y, ds.n, loss, acc);
    if (version) *version = v;
    if (ntest) *ntest = ds.n;
    status = 0;
out:
    free(params);
    ps_mlp_free(&mlp);
    ps_dataset_free(&ds);
    psModelFree(m);
    psClientFree(c);
    return status;
}


/* ========================================================================
 * The dense kind (kind.h)
 * ====================================================================== */

static int dense_wants(const trainOpts *o) {
    return o->sparse.model == NULL;
}

static int dense_is_kind(const jobConfig *cfg) {
    return cfg->sp.model[0] == '\0';
}

/* A job whose init did not finish has no layout recorded: nothing to delete. */
static int dense_delete_keys(const trainOpts *o, psClient *c, const jobConfig *cfg) {
    return cfg->nsizes > 0 ? tr_dense_delete(o, c, cfg) : 0;
}

static void dense_describe(const trainOpts *o, const jobConfig *cfg, const char *state) {
    printf("job %s: state %s, layers %s, optim %s lr %g, batch %d, epochs %d, %d samples%s%s%s, "
           "shards of %d, %lld tasks, push %s, pull %s\n", o->job, state, cfg->layers,
           cfg->optim, cfg->lr, cfg->batch, cfg->epochs, cfg->train_n,
           cfg->slice[0] ? " (slice " : "", cfg->slice, cfg->slice[0] ? ")" : "", cfg->shard_size,
           cfg->tasks, cfg->push_format[0] ? cfg->push_format : "unrecorded (each worker's flag)",
           cfg->pull_format[0] ? cfg->pull_format : tr_opts_default("--pull-format"));
}

static psModel *dense_status(const trainOpts *o, psClient *c, const jobConfig *cfg) {
    return tr_model(c, o->job, cfg);
}

static void dense_log_start(const trainOpts *o, runLog *lg, const jobConfig *cfg) {
    RUNLOG(lg, "start", RL_STR("job", o->job), RL_INT("workers", o->workers),
           RL_STR("layers", cfg->layers), RL_STR("optim", cfg->optim), RL_NUM("lr", cfg->lr),
           RL_INT("batch", tr_given(o, "--batch") ? o->batch : cfg->batch),
           RL_INT("epochs", cfg->epochs), RL_INT("train_samples", cfg->train_n),
           RL_INT("tasks", cfg->tasks), RL_STR("push_format", cfg->push_format));
}

static int dense_eval(const trainOpts *o, runLog *lg) {
    double loss = 0, acc = 0;
    uint64_t v = 0;
    int n = 0;
    if (o->threads > 0) openblas_set_num_threads(o->threads);
    if (tr_evaluate(o, &loss, &acc, &v, &n) != 0) return TR_EXIT_FAIL;
    printf("eval job %s%s%s: test_loss=%.4f test_acc=%.4f on %d samples, model version %llu\n",
           o->job, o->at ? " at " : "", o->at ? o->at : "", loss, acc, n, (unsigned long long)v);
    /* "samples": what the job's workers had trained when it was evaluated. */
    RUNLOG(lg, "eval", RL_STR("job", o->job), o->at ? RL_STR("snapshot", o->at) : RL_NONE,
           RL_NUM("test_acc", acc), RL_NUM("test_loss", loss), RL_INT("test_samples", n),
           RL_INT("version", v), lg ? RL_INT("samples", tr_samples_trained(o)) : RL_NONE);
    if (o->dense.min_acc >= 0 && acc < o->dense.min_acc) {
        tr_err(o, "test accuracy %.4f is below --min-acc %.4f", acc, o->dense.min_acc);
        return TR_EXIT_FAIL;
    }
    return TR_EXIT_OK;
}


static int dense_run_result(const trainOpts *o, runLog *lg, const runTotals *rt) {
    double loss = 0, acc = 0, train_secs = rt->train_secs, span = rt->span, steps = rt->steps;
    long long samples = rt->samples;
    int failed = rt->failed;
    uint64_t v = 0;
    int n = 0;
    if (tr_evaluate(o, &loss, &acc, &v, &n) != 0) return TR_EXIT_FAIL;
    double total = tr_now() - rt->t0;
    printf("ps-train run: job %s: test_loss=%.4f test_acc=%.4f (%d test samples, model version "
           "%llu)\n", o->job, loss, acc, n, (unsigned long long)v);
    printf("RESULT test_acc=%.4f test_loss=%.4f total_seconds=%.2f train_seconds=%.2f "
           "samples=%lld samples_per_s=%.0f workers=%d span_seconds=%.3f span_samples_per_s=%.0f "
           "push_bytes_per_step=%.0f pull_bytes_per_step=%.0f\n",
           acc, loss, total, train_secs, samples, train_secs > 0 ? samples / train_secs : 0.0,
           o->workers, span, span > 0 ? samples / span : 0.0,
           steps > 0 ? rt->push_bytes / steps : 0.0, steps > 0 ? rt->pull_bytes / steps : 0.0);
    fflush(stdout);
    /* The same numbers as the RESULT line; eval first, result last. */
    RUNLOG(lg, "eval", RL_STR("job", o->job), RL_NUM("test_acc", acc), RL_NUM("test_loss", loss),
           RL_INT("test_samples", n), RL_INT("version", v), RL_INT("samples", samples));
    RUNLOG(lg, "result", RL_STR("job", o->job), RL_NUM("test_acc", acc),
           RL_NUM("test_loss", loss), RL_NUM("total_seconds", total),
           RL_NUM("train_seconds", train_secs), RL_INT("samples", samples),
           RL_NUM("samples_per_s", train_secs > 0 ? samples / train_secs : 0.0),
           RL_INT("workers", o->workers), RL_NUM("span_seconds", span),
           RL_NUM("span_samples_per_s", span > 0 ? samples / span : 0.0),
           RL_NUM("push_bytes_per_step", steps > 0 ? rt->push_bytes / steps : 0.0),
           RL_NUM("pull_bytes_per_step", steps > 0 ? rt->pull_bytes / steps : 0.0),
           RL_INT("failed_workers", failed));
    if (failed) {
        tr_err(o, "%d of %d workers failed", failed, o->workers);
        return TR_EXIT_FAIL;
    }
    if (o->dense.min_acc >= 0 && acc < o->dense.min_acc) {
        tr_err(o, "test accuracy %.4f is below --min-acc %.4f", acc, o->dense.min_acc);
        return TR_EXIT_FAIL;
    }
    return TR_EXIT_OK;
}


const modelKind DenseKind = {"dense",           dense_wants,     dense_is_kind,
                             tr_dense_init,     dense_delete_keys, dense_describe,
                             dense_status,      tr_check_test,   dense_log_start,
                             dense_eval,        dense_run_result};
