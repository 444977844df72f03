/* sparse_job.c -- ps-train for sparse CTR jobs: init, --reset, status,
 * eval and run's RESULT line (the trainer is sparse_trainer.c; keys and
 * layout in sparse.h).
 *
 * init --model lr|fm|mlp --train FILE writes the job config (the sparse
 * settings next to the dense ones: the dense tensors take --optim/--lr,
 * ADAGRAD with the table's LR unless given), creates the table shards and
 * the dense tensors with NX, and one task per --task-bytes of the train
 * file per epoch. Like dense jobs, a second init (or run) whose settings
 * differ from the stored ones is refused (exit 2). The flags and the
 * stored config's fields are sparse_cfg.c's. */

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <zlib.h>

#include "conn.h"
#include "kind.h"
#include "metrics.h"
#include "protocol.h"
#include "sparse.h"
#include "stream.h"
#include "tasks.h"
#include "util.h"
#include "wirefmt.h"

#define TS_FILTER_LOG2 22       /* admission filter: 4M one-byte counters per shard */

int ts_table_zeros(const trainOpts *o, psClient *c, psEmbed *e, int dim, long long *values,
                   long long *zeros) {
    *values = *zeros = 0;
    for (int s = 0; psEmbedShardKey(e, s) != NULL; s++) {
        const char *key = psEmbedShardKey(e, s);
        uint64_t cursor = 0;
        do {
            psScanPage pg;
            /* every row changed since version 0: all of them */
            const int ok = psTableScan(c, key, cursor, 0, 65536, PS_WIRE_F32, 0, &pg) == PS_OK;
            if (!ok || pg.value_bytes % (sizeof(float) * (size_t)dim) != 0) {
                if (ok) tr_err(o, "PS.SCANROWS %s: unexpected reply", key);
                else tr_err(o, "%s", c->errstr);
                psScanPageFree(&pg);
                return -1;
            }
            cursor = pg.cursor;
            size_t n = pg.value_bytes / sizeof(float);
            for (size_t i = 0; i < n; i++) {
                float v;
                memcpy(&v, (const char *)pg.values + i * sizeof(float), sizeof(float));
                *zeros += v == 0.0f;
            }
            *values += (long long)n;
            psScanPageFree(&pg);
        } while (cursor != 0);
    }
    return 0;
}


/* PS.INFO of table shard 'key' (psInfo). 0, or -1 after printing why. */
static int shard_info(const trainOpts *o, psClient *c, const char *key, psKeyInfo *ki) {
    if (psInfo(c, key, ki) == PS_OK) return 0;
    tr_err(o, "PS.INFO %s: %s", key, c->errstr);
    return -1;
}

int ts_table_info(const trainOpts *o, psClient *c, psEmbed *e, tableInfo *ti) {
    memset(ti, 0, sizeof(*ti));
    for (int s = 0;; s++) {
        const char *key = psEmbedShardKey(e, s);
        psKeyInfo ki;
        if (key == NULL) break;
        if (shard_info(o, c, key, &ki) != 0) return -1;
        ti->rows += (long long)ki.rows;
        ti->created += (long long)ki.created;
        ti->dropped += (long long)ki.dropped;
        ti->evicted += (long long)(ki.evicted_ttl + ki.evicted_capacity + ki.evicted_explicit);
        ti->version += (long long)ki.version;
    }
    return 0;
}

/* ========================================================================
 * init
 * ====================================================================== */

/* Bytes of 'path' once uncompressed (gzip files are read through once).
 * Returns them, or -1 after printing why not. */
static long long file_bytes(const trainOpts *o, const char *path) {
    struct stat st;
    unsigned char magic[2] = {0, 0};
    FILE *f = fopen(path, "rb");
    if (f == NULL || fstat(fileno(f), &st) != 0) {
        tr_err(o, "%s: %s", path, strerror(errno));
        if (f) fclose(f);
        return -1;
    }
    size_t got = fread(magic, 1, 2, f);
    fclose(f);
    if (got < 2 || magic[0] != 0x1f || magic[1] != 0x8b) return (long long)st.st_size;
    gzFile g = gzopen(path, "rb");
    long long n = 0;
    int k;
    static char buf[1 << 16];
    if (g == NULL) {
        tr_err(o, "%s: cannot open", path);
        return -1;
    }
    while ((k = gzread(g, buf, sizeof(buf))) > 0) n += k;
    int zerr = Z_OK;
    (void)gzerror(g, &zerr);
    gzclose(g);
    /* A stream cut short reads as a clean end (gzread 0): only gzerror
     * tells (Z_BUF_ERROR). */
    if (k < 0 || zerr == Z_BUF_ERROR) {
        tr_err(o, "%s: %s after %lld bytes", path,
               k < 0 ? "gzip read error" : "gzip stream cut short (a truncated file)", n);
        return -1;
    }
    return n;
}

/* Reads the first batch of 'path' with model 'm''s rules: a parse error or
 * a field the MLP does not have is caught before anything trains. 0 or -1. */
static int check_file(const trainOpts *o, const jobConfig *cfg, ps_ctr_model *m,
                      const char *path) {
    ps_sparse_opts so;
    ps_sparse_batch b = {0};
    ps_ctr_unique u = {0};
    char err[512];
    int rc = -1;
    ts_reader_opts(cfg, &so);
    if (strcmp(path, cfg->sp.train) != 0) so.expect_bytes = 0;
    ps_sparse_reader *r = ps_sparse_open(path, &so, err, sizeof(err));
    if (r == NULL) {
        tr_err(o, "%s", err);
        return -1;
    }
    int n = ps_sparse_read(r, &b, m->c.max_batch, err, sizeof(err));
    float *rows = NULL;
    if (n < 0) tr_err(o, "%s", err);
    else if (n == 0) tr_err(o, "%s: no samples", path);
    else if (ps_ctr_unique_build(&u, &b) != 0 ||
             (rows = calloc(u.n * (size_t)ps_ctr_row_dim(m) + 1, sizeof(float))) == NULL)
        tr_err(o, "out of memory");
    else if (ps_ctr_predict(m, &b, &u, rows, err, sizeof(err)) != 0)
        tr_err(o, "%s: %s", path, err);
    else
        rc = 0;
    free(rows);
    ps_ctr_unique_free(&u);
    ps_sparse_batch_free(&b);
    ps_sparse_close(r);
    return rc;
}

/* PS.CREATE options of the job's table rows. */
static void table_opts(const sparseConfig *sp, uint64_t seed, char *buf, size_t len) {
    size_t n;
    if (sp->init_std > 0)
        n = (size_t)snprintf(buf, len, "INIT NORMAL 0 %.17g SEED %llu", sp->init_std,
                             (unsigned long long)seed);
    else
        n = (size_t)snprintf(buf, len, "INIT ZEROS SEED %llu", (unsigned long long)seed);
    if (ps_proto_optim_for(sp->table_optim, PS_PROTO_KIND_TABLE, 1) == PS_PROTO_OPT_FTRL)
        n += (size_t)snprintf(buf + n, len - n, " OPTIM FTRL ALPHA %.17g BETA %.17g L1 %.17g "
                              "L2 %.17g", sp->table_lr, sp->ftrl_beta, sp->l1, sp->l2);
    else
        n += (size_t)snprintf(buf + n, len - n, " OPTIM %s LR %.17g", sp->table_optim,
                              sp->table_lr);
    if (sp->admit > 1)
        n += (size_t)snprintf(buf + n, len - n, " ADMIT %d FILTER %d", sp->admit, TS_FILTER_LOG2);
    if (sp->unknown_zeros) n += (size_t)snprintf(buf + n, len - n, " UNKNOWN ZEROS");
    if (sp->capacity > 0) /* the job's bound, shared by its shards */
        snprintf(buf + n, len - n, " CAPACITY %lld", (sp->capacity + sp->shards - 1) / sp->shards);
}

/* Creates the table shards and the dense tensors (NX). 0 or -1 (printed). */
static int create_keys(const trainOpts *o, psClient *c, const jobConfig *cfg, psEmbed *e,
                       psModel *dm) {
    char opts[512], wopts[256], bopts[256];
    table_opts(&cfg->sp, cfg->seed, opts, sizeof(opts));
    int n = psEmbedCreate(c, e, opts, 1);
    if (n < 0) {
        tr_err(o, "creating table %s:emb: %s", o->job, c->errstr);
        return -1;
    }
    snprintf(wopts, sizeof(wopts), "INIT HE SEED %llu OPTIM %s LR %.17g",
             (unsigned long long)cfg->seed, cfg->optim, cfg->lr);
    snprintf(bopts, sizeof(bopts), "INIT ZEROS OPTIM %s LR %.17g", cfg->optim, cfg->lr);
    for (int t = 0; t < psModelNumTensors(dm); t++) {
        const char *name = psModelTensorName(dm, t);
        if (psModelCreateTensor(c, dm, t, name[0] == 'W' ? wopts : bopts, 1) < 0) {
            tr_err(o, "creating tensor %s: %s", name, c->errstr);
            return -1;
        }
    }
    printf("ps-train %s: table %s:emb: %d shards (%d created): %s\n", o->cmd, o->job,
           cfg->sp.shards, n, opts);
    return 0;
}

/* Upper-cases 's' into 'dst' of 'cap' bytes. */
static void upper(char *dst, size_t cap, const char *s) {
    size_t i = 0;
    for (; s[i] && i + 1 < cap; i++)
        dst[i] = (char)(s[i] >= 'a' && s[i] <= 'z' ? s[i] - 32 : s[i]);
    dst[i] = '\0';
}

int tr_sparse_init(const trainOpts *o, psClient *c) {
    jobConfig cfg;
    sparseConfig *sp = &cfg.sp;
    ps_ctr_model m;
    ps_ctr_config mc;
    psEmbed *e = NULL;
    psModel *dm = NULL;
    char err[512], ckey[128];
    int status = TR_EXIT_FAIL, have_model = 0, made = 0;
    memset(&cfg, 0, sizeof(cfg));
    snprintf(sp->model, sizeof(sp->model), "%s", o->sparse.model);
    for (char *p = sp->model; *p; p++) *p = (char)(*p >= 'A' && *p <= 'Z' ? *p + 32 : *p);
    /* A stream job (--stream, no --train) has no file: its format, fields
     * and model come from the flags alone, it has no tasks, and its entries
     * are checked as they arrive (a malformed one is counted and skipped). */
    snprintf(sp->train, sizeof(sp->train), "%s", o->sparse.train ? o->sparse.train : "");
    if (o->stream) {
        if (strlen(o->stream) >= sizeof(sp->stream)) {
            tr_err(o, "--stream: at most %zu bytes", sizeof(sp->stream) - 1);
            return TR_EXIT_USAGE;
        }
        snprintf(sp->stream, sizeof(sp->stream), "%s", o->stream);
    }
    if (o->sparse.test) snprintf(sp->test, sizeof(sp->test), "%s", o->sparse.test);
    snprintf(sp->format, sizeof(sp->format), "%s", o->sparse.format);
    snprintf(sp->hidden, sizeof(sp->hidden), "%s", o->sparse.hidden);
    upper(sp->table_optim, sizeof(sp->table_optim), o->sparse.table_optim);
    sp->dim = o->sparse.dim;
    sp->fields = tr_given(o, "--fields") ? o->sparse.fields
                 : !strcmp(o->sparse.format, "criteo") ? PS_CRITEO_FIELDS : 26;
    sp->table_lr = o->sparse.table_lr;
    sp->ftrl_beta = o->sparse.ftrl_beta;
    sp->l1 = o->sparse.l1;
    sp->l2 = o->sparse.l2;
    sp->init_std = o->sparse.init_std >= 0 ? o->sparse.init_std
                   : ts_default_init_std(o->sparse.model, o->sparse.table_optim);
    sp->admit = o->sparse.admit;
    sp->unknown_zeros = !strcmp(o->sparse.unknown, "zeros");
    sp->capacity = o->sparse.capacity;
    sp->shards = o->sparse.table_shards;
    sp->shard_bytes = o->sparse.task_bytes;
    /* The dense tensors: --optim, --lr and --batch with a sparse job's
     * defaults (opts.c: per-element Adagrad at the table's rate, 256). */
    upper(cfg.optim, sizeof(cfg.optim), o->optim);
    cfg.lr = o->lr;
    cfg.batch = o->batch;
    cfg.epochs = o->epochs;
    cfg.seed = o->seed;
    /* Tables take F32, BF16 or F16 pushes (F16/BF16 with error feedback:
     * sparse_trainer.c); the dense tensors of the job push alike. */
    pushFormat pf;
    psWireFormat tf; /* a format tables take (tr_parse_wire without 'push') */
    if (tr_parse_push(o->push_format, &pf) != 0 || tr_parse_wire(o->push_format, 0, &tf) != 0) {
        tr_err(o, "--push-format %s: sparse jobs push f32, bf16 or f16",
               o->push_format ? o->push_format : tr_opts_default("--push-format"));
        return TR_EXIT_USAGE;
    }
    tr_push_name(&pf, cfg.push_format, sizeof(cfg.push_format));

    if (ts_ctr_config(&cfg, cfg.batch, &mc, err, sizeof(err)) != 0 ||
        ps_ctr_init(&m, &mc, cfg.seed, err, sizeof(err)) != 0) {
        tr_err(o, "%s", err);
        return TR_EXIT_USAGE;
    }
    have_model = 1;
    if (sp->train[0] && (sp->train_bytes = file_bytes(o, sp->train)) < 0) {
        status = TR_EXIT_USAGE;     /* like an unreadable --test: a bad flag value */
        goto out;
    }
    const long long ep = cfg.epochs > 0 ? cfg.epochs : 1;
    const long long ntasks_all = (sp->train_bytes + sp->shard_bytes - 1) / sp->shard_bytes * ep;
    if (ntasks_all > TR_SP_MAX_TASKS) {
        const long long per = TR_SP_MAX_TASKS / ep > 0 ? TR_SP_MAX_TASKS / ep : 1;
        tr_err(o, "--task-bytes %lld: %s (%lld bytes) in %lld epochs makes %lld tasks, at most "
               "%lld: give --task-bytes %lld or more", sp->shard_bytes, sp->train,
               sp->train_bytes, ep, ntasks_all, TR_SP_MAX_TASKS,
               (sp->train_bytes + per - 1) / per);
        status = TR_EXIT_USAGE;
        goto out;
    }
    if ((sp->train[0] && check_file(o, &cfg, &m, sp->train) != 0) ||
        (sp->test[0] && check_file(o, &cfg, &m, sp->test) != 0)) {
        status = TR_EXIT_USAGE;
        goto out;
    }

    tr_key(ckey, sizeof(ckey), o->job, "config");
    char nums[16][32];
    snprintf(nums[0], 32, "%.17g", cfg.lr);
    snprintf(nums[1], 32, "%d", cfg.batch);
    snprintf(nums[2], 32, "%d", cfg.epochs);
    snprintf(nums[3], 32, "%llu", (unsigned long long)cfg.seed);
    snprintf(nums[4], 32, "%d", sp->dim);
    snprintf(nums[5], 32, "%d", sp->fields);
    snprintf(nums[6], 32, "%.17g", sp->table_lr);
    snprintf(nums[7], 32, "%.17g", sp->ftrl_beta);
    snprintf(nums[8], 32, "%.17g", sp->l1);
    snprintf(nums[9], 32, "%.17g", sp->l2);
    snprintf(nums[10], 32, "%.17g", sp->init_std);
    snprintf(nums[11], 32, "%d", sp->admit);
    snprintf(nums[12], 32, "%d", sp->shards);
    snprintf(nums[13], 32, "%lld", sp->capacity);
    snprintf(nums[14], 32, "%lld", sp->shard_bytes);
    snprintf(nums[15], 32, "%lld", sp->train_bytes);
    {
        const char *argv[] = {"HSET", ckey, "optim", cfg.optim, "lr", nums[0], "batch", nums[1],
                              "epochs", nums[2], "seed", nums[3], "push_format", cfg.push_format,
                              "model", sp->model, "train", sp->train, "test", sp->test,
                              "stream", sp->stream,
                              "format", sp->format, "hidden", sp->hidden,
                              "table_optim", sp->table_optim, "dim", nums[4], "fields", nums[5],
                              "table_lr", nums[6], "ftrl_beta", nums[7], "l1", nums[8],
                              "l2", nums[9], "init_std", nums[10], "admit", nums[11],
                              "shards", nums[12], "capacity", nums[13], "shard_bytes", nums[14],
                              "train_bytes", nums[15],
                              "unknown", sp->unknown_zeros ? "zeros" : "init"};
        int argc = (int)(sizeof(argv) / sizeof(argv[0]));
        size_t argl[sizeof(argv) / sizeof(argv[0])];
        for (int i = 0; i < argc; i++) argl[i] = strlen(argv[i]);
        redisReply *r = psCommandArgv(c, ckey, argc, argv, argl);
        if (r == NULL || r->type == REDIS_REPLY_ERROR) {
            tr_err(o, "HSET %s: %s", ckey, r ? r->str : c->errstr);
            if (r) freeReplyObject(r);
            goto out;
        }
        freeReplyObject(r);
    }
    if ((e = ts_table(o->job, &cfg, ps_ctr_row_dim(&m))) == NULL ||
        (dm = ts_dense_model(c, o->job, &m)) == NULL) {
        if (e == NULL) tr_err(o, "--table-shards %d: cannot make the table handle", sp->shards);
        goto out;
    }
    made = 1;
    if (create_keys(o, c, &cfg, e, dm) != 0) goto out;
    if (sp->train[0] &&
        (cfg.tasks = tr_fill_tasks(o, c, &cfg, 0, sp->train_bytes, sp->shard_bytes)) < 0)
        goto out;
    char ntasks[32];
    snprintf(ntasks, sizeof(ntasks), "%lld", cfg.tasks);
    redisReply *r = tr_cmd_ok(o, c, ckey, "HSET %s tasks %s state ready", ckey, ntasks);
    if (r == NULL) goto out;
    freeReplyObject(r);
    if (sp->train[0])
        printf("ps-train %s: job %s: model %s (row dim %d), %s %s of %lld bytes, %d epochs, tasks "
               "of %lld bytes -> %lld tasks; batch %d; dense tensors %s lr %g\n", o->cmd, o->job,
               sp->model, ps_ctr_row_dim(&m), sp->format, sp->train, sp->train_bytes, cfg.epochs,
               sp->shard_bytes, cfg.tasks, cfg.batch, cfg.optim, cfg.lr);
    else
        printf("ps-train %s: job %s: model %s (row dim %d), a stream job: %s lines from stream "
               "%s (no train file, no tasks: ps-train stream trains it); batch %d; dense tensors "
               "%s lr %g\n", o->cmd, o->job, sp->model, ps_ctr_row_dim(&m), sp->format,
               sp->stream, cfg.batch, cfg.optim, cfg.lr);
    status = TR_EXIT_OK;
out:
    if (status != TR_EXIT_OK && made) {
        /* Leave no half-made job: the caller deletes config and stream. */
        if (e) psEmbedDelete(c, e);
        if (dm) psModelDelete(c, dm);
    }
    psEmbedFree(e);
    psModelFree(dm);
    if (have_model) ps_ctr_free(&m);
    return status;
}

int tr_sparse_delete(const trainOpts *o, psClient *c, const jobConfig *cfg) {
    ps_ctr_config mc;
    ps_ctr_model m;
    char err[256], ikey[128];
    int rc = -1;
    if (ts_ctr_config(cfg, 1, &mc, err, sizeof(err)) != 0 ||
        ps_ctr_init(&m, &mc, 1, err, sizeof(err)) != 0) {
        tr_err(o, "job %s: %s", o->job, err);
        return -1;
    }
    psEmbed *e = ts_table(o->job, cfg, ps_ctr_row_dim(&m));
    psModel *dm = ts_dense_model(c, o->job, &m);
    int nt = e ? psEmbedDelete(c, e) : -1;
    int nd = nt >= 0 && dm ? psModelDelete(c, dm) : -1;
    tr_key(ikey, sizeof(ikey), o->job, "ids");
    redisReply *r = nd >= 0 ? tr_cmd_ok(o, c, ikey, "DEL %s", ikey) : NULL;
    if (r) {
        freeReplyObject(r);
        printf("ps-train %s: --reset: deleted %d table shards and %d tensor keys of job %s\n",
               o->cmd, nt, nd, o->job);
        rc = 0;
    } else if (nd < 0) {
        tr_err(o, "deleting the table and tensors: %s", c->errstr);
    }
    psEmbedFree(e);
    psModelFree(dm);
    ps_ctr_free(&m);
    return rc;
}

psModel *tr_sparse_status(const trainOpts *o, psClient *c, const jobConfig *cfg) {
    const sparseConfig *sp = &cfg->sp;
    ps_ctr_config mc;
    ps_ctr_model m;
    char err[256];
    psModel *dm = NULL;
    if (ts_ctr_config(cfg, 1, &mc, err, sizeof(err)) != 0 ||
        ps_ctr_init(&m, &mc, 1, err, sizeof(err)) != 0) {
        tr_err(o, "job %s: %s", o->job, err);
        return NULL;
    }
    printf("sparse: model %s (row dim %d), %s %s (%lld bytes) in tasks of %lld bytes, test %s; "
           "table rows %s lr %g, admit %d, capacity %lld\n", sp->model, ps_ctr_row_dim(&m),
           sp->format, sp->train[0] ? sp->train : "(stream job)", sp->train_bytes, sp->shard_bytes,
           sp->test[0] ? sp->test : "-",
           sp->table_optim, sp->table_lr, sp->admit, sp->capacity);
    /* Every setting init recorded, defaults included (opts.c has them). */
    printf("sparse settings: --dim %d --fields %d --hidden %s --table-shards %d --task-bytes %lld "
           "--table-optim %s --table-lr %g --ftrl-beta %g --l1 %g --l2 %g --init-std %g "
           "--admit %d --unknown %s --capacity %lld --optim %s --lr %g --batch %d --epochs %d "
           "--seed %llu\n",
           sp->dim, sp->fields, sp->hidden, sp->shards, sp->shard_bytes, sp->table_optim,
           sp->table_lr, sp->ftrl_beta, sp->l1, sp->l2, sp->init_std, sp->admit,
           sp->unknown_zeros ? "zeros" : "init", sp->capacity,
           cfg->optim, cfg->lr, cfg->batch, cfg->epochs, (unsigned long long)cfg->seed);
    psEmbed *e = ts_table(o->job, cfg, ps_ctr_row_dim(&m));
    printf("table shards:\n");
    for (int s = 0; e && s < sp->shards; s++) {
        const char *key = psEmbedShardKey(e, s);
        psKeyInfo ki;
        if (shard_info(o, c, key, &ki) != 0) continue;
        printf("  %-24s rows %10lld version %8lld created %10lld evicted %10lld\n", key,
               (long long)ki.rows, (long long)ki.version, (long long)ki.created,
               (long long)(ki.evicted_ttl + ki.evicted_capacity + ki.evicted_explicit));
    }
    if (e) dm = ts_dense_model(c, o->job, &m);
    tr_stream_status(o, c);
    psEmbedFree(e);
    ps_ctr_free(&m);
    return dm;
}

/* ========================================================================
 * eval, run
 * ====================================================================== */

int tr_sparse_check_test(const trainOpts *o, const jobConfig *cfg) {
    ps_ctr_config mc;
    ps_ctr_model m;
    char err[256];
    const char *path = o->sparse.test ? o->sparse.test : cfg->sp.test;
    if (!path[0]) {
        tr_err(o, "job %s has no test file: give --test FILE", o->job);
        return -1;
    }
    if (ts_ctr_config(cfg, 256, &mc, err, sizeof(err)) != 0 ||
        ps_ctr_init(&m, &mc, 1, err, sizeof(err)) != 0) {
        tr_err(o, "%s", err);
        return -1;
    }
    int rc = check_file(o, cfg, &m, path);
    ps_ctr_free(&m);
    return rc;
}

/* What an evaluation found. */
typedef struct evalResult {
    double auc, logloss;
    long long n;
    tableInfo ti;
    long long distinct;   /* HyperLogLog estimate of the ids of epoch 1, -1 unknown */
    double zero_frac;     /* of the table's values (ts_table_zeros), 0 when empty */
} evalResult;

/* Pulls the dense tensors, streams the test file (--test or the job's) in
 * batches, pulls each batch's rows and scores it. 0 or -1 (printed). */
static int evaluate(const trainOpts *o, evalResult *res) {
    enum { EVAL_BATCH = 4096 };
    jobConfig cfg;
    ps_ctr_config mc;
    ps_ctr_model m;
    ps_sparse_opts so;
    ps_sparse_batch b = {0};
    ps_ctr_unique u = {0};
    ps_metrics met = {0};
    psEmbed *e = NULL;
    psModel *dm = NULL;
    ps_sparse_reader *r = NULL;
    float *rows = NULL, *dense[2 * (PS_CTR_MAX_HIDDEN + 1)];
    size_t cap = 0;
    char err[512], ikey[128];
    int status = -1, have_model = 0, got;
    psClient *c = tr_connect(o, 0, 0);
    if (c == NULL) return -1;
    if (tr_load_config(c, o->job, &cfg) != 0 || strcmp(cfg.state, "ready") != 0) {
        tr_err(o, "--job %s: no such job, or its init has not finished", o->job);
        goto out;
    }
    const char *path = o->sparse.test ? o->sparse.test : cfg.sp.test;
    if (!path[0]) {
        tr_err(o, "job %s has no test file: give --test FILE", o->job);
        goto out;
    }
    if (ts_ctr_config(&cfg, EVAL_BATCH, &mc, err, sizeof(err)) != 0 ||
        ps_ctr_init(&m, &mc, cfg.seed, err, sizeof(err)) != 0) {
        tr_err(o, "%s", err);
        goto out;
    }
    have_model = 1;
    if ((e = ts_table(o->job, &cfg, ps_ctr_row_dim(&m))) == NULL ||
        (dm = ts_dense_model(c, o->job, &m)) == NULL)
        goto out;
    ts_dense_arrays(&m, 0, dense);
    if (psModelPull(c, dm, dense, NULL) != PS_OK) {
        tr_err(o, "pull: %s", c->errstr);
        goto out;
    }
    ts_reader_opts(&cfg, &so);
    if (strcmp(path, cfg.sp.train) != 0) so.expect_bytes = 0;
    if ((r = ps_sparse_open(path, &so, err, sizeof(err))) == NULL) {
        tr_err(o, "%s", err);
        goto out;
    }
    while ((got = ps_sparse_read(r, &b, EVAL_BATCH, err, sizeof(err))) > 0) {
        size_t need = u.n;
        if (ps_ctr_unique_build(&u, &b) != 0) goto oom;
        need = u.n * (size_t)ps_ctr_row_dim(&m);
        if (need > cap) {
            free(rows);
            if ((rows = malloc(need * sizeof(float))) == NULL) goto oom;
            cap = need;
        }
        if (psEmbedPull(c, e, u.ids, u.n, rows) != PS_OK) {
            tr_err(o, "pull: %s", c->errstr);
            goto out;
        }
        if (ps_ctr_predict(&m, &b, &u, rows, err, sizeof(err)) != 0) {
            tr_err(o, "%s: %s", path, err);
            goto out;
        }
        for (int i = 0; i < b.n; i++)
            if (ps_metrics_add(&met, m.p[i], b.label[i] > 0.5f) != 0) goto oom;
    }
    if (got < 0) {
        tr_err(o, "%s", err);
        goto out;
    }
    if (met.n == 0) {
        /* No AUC (NaN) and a logloss of 0 would read as a result. */
        tr_err(o, "%s: no samples to evaluate on", path);
        goto out;
    }
    res->auc = ps_metrics_auc(&met);
    res->logloss = ps_metrics_logloss(&met);
    res->n = (long long)met.n;
    if (ts_table_info(o, c, e, &res->ti) != 0) goto out;
    long long nval, nzero;
    if (ts_table_zeros(o, c, e, ps_ctr_row_dim(&m), &nval, &nzero) != 0) goto out;
    res->zero_frac = nval ? (double)nzero / (double)nval : 0.0;
    tr_key(ikey, sizeof(ikey), o->job, "ids");
    redisReply *hr = tr_cmd_ok(o, c, ikey, "PFCOUNT %s", ikey);
    res->distinct = hr && hr->type == REDIS_REPLY_INTEGER ? hr->integer : -1;
    if (hr) freeReplyObject(hr);
    status = 0;
    goto out;
oom:
    tr_err(o, "out of memory");
out:
    if (r) ps_sparse_close(r);
    free(rows);
    ps_metrics_free(&met);
    ps_ctr_unique_free(&u);
    ps_sparse_batch_free(&b);
    psEmbedFree(e);
    psModelFree(dm);
    if (have_model) ps_ctr_free(&m);
    psClientFree(c);
    return status;
}

/* "table_rows=R rows_created=C rows_dropped=D rows_evicted=E distinct_ids=N table_version=V
 * table_zero_frac=Z" */
static void table_text(const evalResult *res, char *buf, size_t len) {
    snprintf(buf, len, "table_rows=%lld rows_created=%lld rows_dropped=%lld rows_evicted=%lld "
             "distinct_ids=%lld table_version=%lld table_zero_frac=%.4f", res->ti.rows,
             res->ti.created, res->ti.dropped, res->ti.evicted, res->distinct, res->ti.version,
             res->zero_frac);
}

static int check_auc(const trainOpts *o, double auc) {
    if (o->sparse.min_auc >= 0 && !(auc >= o->sparse.min_auc)) {
        tr_err(o, "test AUC %.4f is below --min-auc %.4f", auc, o->sparse.min_auc);
        return TR_EXIT_FAIL;
    }
    return TR_EXIT_OK;
}

/* The --log-json fields of an evaluation (eval and result events). */
#define SPARSE_EVAL_FIELDS(res)                                                                \
    RL_NUM("test_auc", (res).auc), RL_NUM("test_logloss", (res).logloss),                      \
        RL_INT("test_samples", (res).n), RL_INT("table_rows", (res).ti.rows),                  \
        RL_INT("distinct_ids", (res).distinct), RL_NUM("table_zero_frac", (res).zero_frac)

static int sparse_eval(const trainOpts *o, runLog *lg) {
    evalResult res;
    char tab[320];
    if (evaluate(o, &res) != 0) return TR_EXIT_FAIL;
    table_text(&res, tab, sizeof(tab));
    printf("eval job %s: test_auc=%.5f test_logloss=%.5f on %lld samples; %s\n", o->job, res.auc,
           res.logloss, res.n, tab);
    RUNLOG(lg, "eval", RL_STR("job", o->job), SPARSE_EVAL_FIELDS(res));
    return check_auc(o, res.auc);
}

static int sparse_run_result(const trainOpts *o, runLog *lg, const runTotals *rt) {
    double total_t0 = rt->t0, train_secs = rt->train_secs, span = rt->span;
    long long samples = rt->samples;
    int failed = rt->failed;
    evalResult res;
    char tab[320];
    if (evaluate(o, &res) != 0) return TR_EXIT_FAIL;
    table_text(&res, tab, sizeof(tab));
    double total = tr_now() - total_t0;
    printf("ps-train run: job %s: test_auc=%.5f test_logloss=%.5f (%lld test samples); table "
           "rows %lld of %lld distinct ids seen (created %lld, dropped %lld below admission, "
           "evicted %lld)\n", o->job, res.auc, res.logloss, res.n, res.ti.rows, res.distinct,
           res.ti.created, res.ti.dropped, res.ti.evicted);
    printf("RESULT test_auc=%.5f test_logloss=%.5f total_seconds=%.2f train_seconds=%.2f "
           "samples=%lld samples_per_s=%.0f workers=%d span_seconds=%.3f span_samples_per_s=%.0f "
           "%s\n", res.auc, res.logloss, total, train_secs, samples,
           train_secs > 0 ? samples / train_secs : 0.0, o->workers, span,
           span > 0 ? samples / span : 0.0, tab);
    fflush(stdout);
    RUNLOG(lg, "eval", RL_STR("job", o->job), SPARSE_EVAL_FIELDS(res), RL_INT("samples", samples));
    RUNLOG(lg, "result", RL_STR("job", o->job), SPARSE_EVAL_FIELDS(res),
           RL_NUM("total_seconds", total), RL_NUM("train_seconds", train_secs),
           RL_INT("samples", samples),
           RL_NUM("samples_per_s", train_secs > 0 ? samples / train_secs : 0.0),
           RL_INT("workers", o->workers), RL_NUM("span_seconds", span),
           RL_NUM("span_samples_per_s", span > 0 ? samples / span : 0.0),
           RL_INT("failed_workers", failed));
    if (failed) {
        tr_err(o, "%d of %d workers failed", failed, o->workers);
        return TR_EXIT_FAIL;
    }
    return check_auc(o, res.auc);
}

/* ========================================================================
 * The sparse kind (kind.h)
 * ====================================================================== */

static int sparse_wants(const trainOpts *o) {
    return o->sparse.model != NULL;
}

static int sparse_is_kind(const jobConfig *cfg) {
    return cfg->sp.model[0] != '\0';
}

static void sparse_describe(const trainOpts *o, const jobConfig *cfg, const char *state) {
    /* Its sparse settings follow (tr_sparse_status). */
    printf("job %s: state %s, sparse model %s, dense tensors optim %s lr %g, batch %d, "
           "epochs %d, %lld tasks, push %s\n", o->job, state, cfg->sp.model, cfg->optim,
           cfg->lr, cfg->batch, cfg->epochs, cfg->tasks,
           cfg->push_format[0] ? cfg->push_format : tr_opts_default("--push-format"));
}

static void sparse_log_start(const trainOpts *o, runLog *lg, const jobConfig *cfg) {
    RUNLOG(lg, "start", RL_STR("job", o->job), RL_INT("workers", o->workers),
           RL_STR("model", cfg->sp.model), RL_INT("epochs", cfg->epochs),
           RL_INT("tasks", cfg->tasks));
}

const modelKind SparseKind = {"sparse",           sparse_wants,     sparse_is_kind,
                              tr_sparse_init,     tr_sparse_delete, sparse_describe,
                              tr_sparse_status,   tr_sparse_check_test, sparse_log_start,
                              sparse_eval,        sparse_run_result};
