/* sparse_cfg.c -- ps-train sparse jobs' settings: the sparse flags'
 * checks, the config hash fields (read, checked against the flags' bounds
 * after an edit on the server, compared with a second init's flags), and
 * the model, table and dense tensors a job's config describes (shared by
 * the trainer, sparse_trainer.c, and the job's commands, sparse_job.c). */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "protocol.h"
#include "sparse.h"
#include "util.h"

/* Server optimizers of table rows (PS.CREATE ... EMBEDDING OPTIM): those of
 * PS_PROTO_TABLE_OPTIMS (common/protocol.h). */
static int table_optim_ok(const char *name) {
    return ps_proto_optim_for(name, PS_PROTO_KIND_TABLE, 1) >= 0;
}

static int is_ftrl(const char *name) {
    return ps_proto_optim_for(name, PS_PROTO_KIND_TABLE, 1) == PS_PROTO_OPT_FTRL;
}

/* ========================================================================
 * Flags and config
 * ====================================================================== */

/* The default row init std: LR weights and FTRL rows start at 0 (FTRL
 * requires it), FM factors and MLP embeddings need random starts. */
double ts_default_init_std(const char *model, const char *optim) {
    return !strcasecmp(model, "lr") || is_ftrl(optim) ? 0.0 : 0.1;
}

int tr_sparse_validate(const trainOpts *o, int init_or_run) {
    const sparseOpts *g = &o->sparse;
    const char *c = o->cmd;
    /* Flags of the other kind were refused already (tr_opts_check_kind). */
    if (!init_or_run || g->model == NULL) return 0;
    int ok = 0;
    if (ps_ctr_parse_model(g->model) < 0) {
        fprintf(stderr, "ps-train %s: --model: '%s' is not lr, fm or mlp\n", c, g->model);
        return -1;
    }
    if (g->train == NULL && !(o->stream && !strcmp(c, "init"))) {
        fprintf(stderr, "ps-train %s: --model needs --train FILE (libsvm or Criteo)%s\n", c,
                strcmp(c, "init") ? "" : ", or --stream KEY for a job trained from a stream");
        return -1;
    }
    if (!strcmp(c, "run") && g->test == NULL) {
        fprintf(stderr, "ps-train run: --model needs --test FILE (run evaluates on it)\n");
        return -1;
    }
    if (strcmp(g->format, "libsvm") && strcmp(g->format, "criteo")) {
        fprintf(stderr, "ps-train %s: --format: '%s' is not libsvm or criteo\n", c, g->format);
        return -1;
    }
    if (strcmp(g->unknown, "init") && strcmp(g->unknown, "zeros")) {
        fprintf(stderr, "ps-train %s: --unknown: '%s' is not init or zeros\n", c, g->unknown);
        return -1;
    }
    ok = table_optim_ok(g->table_optim);
    if (!ok) {
        char names[160];
        fprintf(stderr, "ps-train %s: --table-optim: unknown '%s' (%s)\n", c, g->table_optim,
                ps_proto_optim_names(PS_PROTO_KIND_TABLE, 1, " ", names, sizeof(names)));
        return -1;
    }
    if (is_ftrl(g->table_optim) && g->init_std > 0) {
        fprintf(stderr, "ps-train %s: --table-optim ftrl rows start at 0: --init-std must be "
                        "0\n", c);
        return -1;
    }
    if (!strcasecmp(g->model, "mlp")) {
        int sizes[PS_CTR_MAX_HIDDEN + 2];
        char spec[80], err[256];
        snprintf(spec, sizeof(spec), "1,%s", g->hidden);
        if (ps_parse_layers(spec, sizes, PS_CTR_MAX_HIDDEN + 1, err, sizeof(err)) < 0) {
            fprintf(stderr, "ps-train %s: --hidden: %s\n", c, err);
            return -1;
        }
    }
    return 0;
}

/* Copies reply string 'v' into 'dst' of 'cap' bytes (truncated). */
static void copy_reply(char *dst, size_t cap, const redisReply *v) {
    size_t n = v->len < cap - 1 ? v->len : cap - 1;
    memcpy(dst, v->str, n);
    dst[n] = '\0';
}

int tr_sparse_field(jobConfig *cfg, const char *f, const redisReply *v) {
    sparseConfig *sp = &cfg->sp;
    char num[64];
    if (v->type != REDIS_REPLY_STRING) return 0;
    copy_reply(num, sizeof(num), v);
    if (!strcmp(f, "model")) copy_reply(sp->model, sizeof(sp->model), v);
    else if (!strcmp(f, "train")) copy_reply(sp->train, sizeof(sp->train), v);
    else if (!strcmp(f, "test")) copy_reply(sp->test, sizeof(sp->test), v);
    else if (!strcmp(f, "stream")) copy_reply(sp->stream, sizeof(sp->stream), v);
    else if (!strcmp(f, "format")) copy_reply(sp->format, sizeof(sp->format), v);
    else if (!strcmp(f, "hidden")) copy_reply(sp->hidden, sizeof(sp->hidden), v);
    else if (!strcmp(f, "table_optim")) copy_reply(sp->table_optim, sizeof(sp->table_optim), v);
    else if (!strcmp(f, "dim")) sp->dim = atoi(num);
    else if (!strcmp(f, "fields")) sp->fields = atoi(num);
    else if (!strcmp(f, "table_lr")) sp->table_lr = strtod(num, NULL);
    else if (!strcmp(f, "ftrl_beta")) sp->ftrl_beta = strtod(num, NULL);
    else if (!strcmp(f, "l1")) sp->l1 = strtod(num, NULL);
    else if (!strcmp(f, "l2")) sp->l2 = strtod(num, NULL);
    else if (!strcmp(f, "init_std")) sp->init_std = strtod(num, NULL);
    else if (!strcmp(f, "admit")) sp->admit = atoi(num);
    else if (!strcmp(f, "unknown")) sp->unknown_zeros = !strcmp(num, "zeros") ? 1 : !strcmp(num, "init") ? 0 : -1;
    else if (!strcmp(f, "shards")) sp->shards = atoi(num);
    else if (!strcmp(f, "capacity")) sp->capacity = atoll(num);
    else if (!strcmp(f, "shard_bytes")) sp->shard_bytes = atoll(num);
    else if (!strcmp(f, "train_bytes")) sp->train_bytes = atoll(num);
    else return 0;
    return 1;
}

int tr_sparse_check_config(const jobConfig *cfg, char *err, size_t errlen) {
    const sparseConfig *sp = &cfg->sp;
    int optim_ok = table_optim_ok(sp->table_optim);
#define BAD(cond, ...) do { if (cond) { snprintf(err, errlen, __VA_ARGS__); return -1; } } while (0)
    BAD(ps_ctr_parse_model(sp->model) < 0, "model '%s'", sp->model);
    BAD(strcmp(sp->format, "libsvm") && strcmp(sp->format, "criteo"), "format '%s'", sp->format);
    BAD(!sp->train[0] && !sp->stream[0], "train: empty (and no stream)");
    BAD(!optim_ok, "table_optim '%s'", sp->table_optim);
    BAD(sp->dim < 1 || sp->dim > TR_SP_MAX_DIM, "dim %d", sp->dim);
    BAD(sp->fields < 1 || sp->fields > TR_SP_MAX_FIELDS, "fields %d", sp->fields);
    BAD(sp->shards < 1 || sp->shards > TR_SP_MAX_SHARDS, "shards %d", sp->shards);
    BAD(sp->admit < 0 || sp->admit > TR_SP_MAX_ADMIT, "admit %d", sp->admit);
    BAD(sp->unknown_zeros != 0 && sp->unknown_zeros != 1, "unknown: not init or zeros");
    BAD(sp->capacity < 0 || sp->capacity > TR_SP_MAX_CAPACITY, "capacity %lld", sp->capacity);
    BAD(sp->shard_bytes < 1 || sp->shard_bytes > TR_SP_MAX_SHARD_BYTES, "shard_bytes %lld",
        sp->shard_bytes);
    BAD(sp->train[0] && sp->train_bytes < 1, "train_bytes %lld", sp->train_bytes);
    BAD(!(sp->table_lr > 0 && sp->table_lr <= 1e6), "table_lr %g", sp->table_lr);
    BAD(!(sp->ftrl_beta > 0 && sp->ftrl_beta <= 1e6), "ftrl_beta %g", sp->ftrl_beta);
    BAD(!(sp->l1 >= 0 && sp->l1 <= 1e6), "l1 %g", sp->l1);
    BAD(!(sp->l2 >= 0 && sp->l2 <= 1e6), "l2 %g", sp->l2);
    BAD(!(sp->init_std >= 0 && sp->init_std <= 1e6), "init_std %g", sp->init_std);
    BAD(cfg->batch < 1, "batch %d", cfg->batch);
    BAD(cfg->tasks < 0 || cfg->tasks > TR_SP_MAX_TASKS, "tasks %lld", cfg->tasks);
#undef BAD
    ps_ctr_config mc;
    char why[200];
    if (ts_ctr_config(cfg, 1, &mc, why, sizeof(why)) != 0) {
        snprintf(err, errlen, "hidden '%s': %s", sp->hidden, why);
        return -1;
    }
    return 0;
}

int tr_sparse_diff(const trainOpts *o, const jobConfig *cfg, char *out, size_t len) {
    const sparseOpts *g = &o->sparse; /* what was given */
    const sparseConfig *sp = &cfg->sp;
    int n = 0;
#define SDIFF(cond, ...) do { if (cond) { tr_add_diff(out, len, __VA_ARGS__); n++; } } while (0)
    SDIFF(g->model && strcasecmp(g->model, sp->model), "--model %s (job: %s)", g->model,
          sp->model[0] ? sp->model : "none, a dense MLP");
    if (!sp->model[0]) return n;
    SDIFF(tr_given(o, "--train") && strcmp(g->train, sp->train), "--train %s (job: %s)",
          g->train, sp->train);
    SDIFF(!strcmp(o->cmd, "init") && tr_given(o, "--stream") && strcmp(o->stream, sp->stream),
          "--stream %s (job: %s)", o->stream, sp->stream[0] ? sp->stream : "none");
    SDIFF(!strcmp(o->cmd, "init") && !tr_given(o, "--train") && sp->train[0], "no --train (job: %s)",
          sp->train);
    SDIFF(tr_given(o, "--test") && strcmp(g->test, sp->test), "--test %s (job: %s)", g->test,
          sp->test[0] ? sp->test : "none");
    SDIFF(tr_given(o, "--format") && strcmp(g->format, sp->format), "--format %s (job: %s)",
          g->format, sp->format);
    SDIFF(tr_given(o, "--dim") && g->dim != sp->dim, "--dim %d (job: %d)", g->dim, sp->dim);
    SDIFF(tr_given(o, "--fields") && g->fields != sp->fields, "--fields %d (job: %d)", g->fields,
          sp->fields);
    SDIFF(tr_given(o, "--hidden") && strcmp(g->hidden, sp->hidden), "--hidden %s (job: %s)",
          g->hidden, sp->hidden);
    SDIFF(tr_given(o, "--table-optim") && strcasecmp(g->table_optim, sp->table_optim),
          "--table-optim %s (job: %s)", g->table_optim, sp->table_optim);
    SDIFF(tr_given(o, "--table-lr") && g->table_lr != sp->table_lr, "--table-lr %g (job: %g)",
          g->table_lr, sp->table_lr);
    SDIFF(tr_given(o, "--ftrl-beta") && g->ftrl_beta != sp->ftrl_beta,
          "--ftrl-beta %g (job: %g)", g->ftrl_beta, sp->ftrl_beta);
    SDIFF(tr_given(o, "--l1") && g->l1 != sp->l1, "--l1 %g (job: %g)", g->l1, sp->l1);
    SDIFF(tr_given(o, "--l2") && g->l2 != sp->l2, "--l2 %g (job: %g)", g->l2, sp->l2);
    SDIFF(tr_given(o, "--init-std") && g->init_std != sp->init_std, "--init-std %g (job: %g)",
          g->init_std, sp->init_std);
    SDIFF(tr_given(o, "--admit") && g->admit != sp->admit, "--admit %d (job: %d)", g->admit,
          sp->admit);
    SDIFF(tr_given(o, "--unknown") && (strcmp(g->unknown, "zeros") == 0) != sp->unknown_zeros,
          "--unknown %s (job: %s)", g->unknown, sp->unknown_zeros ? "zeros" : "init");
    SDIFF(tr_given(o, "--capacity") && g->capacity != sp->capacity, "--capacity %lld (job: %lld)",
          g->capacity, sp->capacity);
    SDIFF(tr_given(o, "--table-shards") && g->table_shards != sp->shards,
          "--table-shards %d (job: %d)", g->table_shards, sp->shards);
    SDIFF(tr_given(o, "--task-bytes") && g->task_bytes != sp->shard_bytes,
          "--task-bytes %lld (job: %lld)", g->task_bytes, sp->shard_bytes);
#undef SDIFF
    return n;
}

/* ========================================================================
 * Model, table and dense tensors of a job (the trainer's and the job's)
 * ====================================================================== */

int ts_ctr_config(const jobConfig *cfg, int max_batch, ps_ctr_config *mc, char *err,
                  size_t errlen) {
    const sparseConfig *sp = &cfg->sp;
    memset(mc, 0, sizeof(*mc));
    mc->model = ps_ctr_parse_model(sp->model);
    mc->k = sp->dim;
    mc->emb_dim = sp->dim;
    mc->fields = sp->fields;
    mc->max_batch = max_batch;
    if (mc->model < 0) {
        snprintf(err, errlen, "job has an unknown model '%s'", sp->model);
        return -1;
    }
    if (mc->model == PS_CTR_MLP) {
        int sizes[PS_CTR_MAX_HIDDEN + 2];
        char spec[80];
        snprintf(spec, sizeof(spec), "1,%s", sp->hidden);
        int ns = ps_parse_layers(spec, sizes, PS_CTR_MAX_HIDDEN + 1, err, errlen);
        if (ns < 0) return -1;
        mc->nhidden = ns - 1;
        memcpy(mc->hidden, sizes + 1, (size_t)mc->nhidden * sizeof(int));
    }
    return 0;
}


void ts_reader_opts(const jobConfig *cfg, ps_sparse_opts *so) {
    memset(so, 0, sizeof(*so));
    so->format = !strcmp(cfg->sp.format, "criteo") ? PS_SPARSE_CRITEO : PS_SPARSE_LIBSVM;
    so->field_bits = PS_SPARSE_FIELD_BITS;
    /* The train file as init measured it: a file changed since fails its
     * read instead of training other lines (readers of another file, the
     * test file, clear this). */
    so->expect_bytes = cfg->sp.train_bytes > 0 ? (uint64_t)cfg->sp.train_bytes : 0;
}


psEmbed *ts_table(const char *job, const jobConfig *cfg, int dim) {
    char name[TR_JOB_MAX + 8];
    snprintf(name, sizeof(name), "%s:emb", job);
    return psEmbedNew(name, dim, cfg->sp.shards);
}


void ts_dense_arrays(ps_ctr_model *m, int grads, float **out) {
    for (int i = 0; i < ps_ctr_dense_count(m); i++) {
        float *g;
        float *v = ps_ctr_dense(m, i, NULL, &g, NULL);
        out[i] = grads ? g : v;
    }
}


psModel *ts_dense_model(psClient *c, const char *job, ps_ctr_model *m) {
    psModel *dm = psModelNew(job);
    if (dm == NULL) return NULL;
    for (int i = 0; i < ps_ctr_dense_count(m); i++) {
        const char *name;
        size_t len;
        ps_ctr_dense(m, i, &len, NULL, &name);
        /* MLP weights are out x in matrices (He init by fan-in). */
        uint64_t d[2] = {(uint64_t)len, 1};
        int nd = 1;
        if (m->c.model == PS_CTR_MLP && i % 2 == 0) {
            d[0] = (uint64_t)m->mlp.sizes[i / 2 + 1];
            d[1] = (uint64_t)m->mlp.sizes[i / 2];
            nd = 2;
        }
        if (psModelAddTensor(dm, name, nd, d) < 0) goto fail;
    }
    if (psModelLayout(c, dm) != PS_OK) goto fail;
    return dm;
fail:
    fprintf(stderr, "ps-train: dense tensors layout failed: %s\n", c->err ? c->errstr : "shape");
    psModelFree(dm);
    return NULL;
}

