/* train_sparse_cfg.c -- ps-train sparse jobs' settings: the sparse flags'
 * checks, the config hash fields (read, checked against the flags' bounds
 * after an edit on the server, compared with a second init's flags). */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "protocol.h"
#include "train_sparse.h"

/* Server optimizers of table rows (PS.CREATE ... EMBEDDING OPTIM): those of
 * PS_PROTO_TABLE_OPTIMS (common/protocol.h). */
static int table_optim_ok(const char *name) {
    return ps_proto_optim_for(name, PS_PROTO_KIND_TABLE, 1) >= 0;
}

static int is_ftrl(const char *name) {
    return ps_proto_optim_for(name, PS_PROTO_KIND_TABLE, 1) == PS_PROTO_OPT_FTRL;
}

/* Flags that only a sparse job takes (init/run without --model refuses them). */
static const char *const SparseFlags[] = {
    "--train", "--format", "--dim", "--fields", "--hidden", "--table-optim", "--table-lr",
    "--ftrl-beta", "--l1", "--l2", "--init-std", "--admit", "--capacity", "--shards",
    "--shard-bytes"};

/* ========================================================================
 * Flags and config
 * ====================================================================== */

/* The default row init std: LR weights and FTRL rows start at 0 (FTRL
 * requires it), FM factors and MLP embeddings need random starts. */
double ts_default_init_std(const char *model, const char *optim) {
    return !strcasecmp(model, "lr") || is_ftrl(optim) ? 0.0 : 0.1;
}

int tr_sparse_validate(const trainOpts *o, int init_or_run) {
    const char *c = o->cmd;
    if (!init_or_run) return 0;
    if (o->model == NULL) {
        for (size_t i = 0; i < sizeof(SparseFlags) / sizeof(SparseFlags[0]); i++)
            if (tr_given(o, SparseFlags[i])) {
                fprintf(stderr, "ps-train %s: %s is for sparse jobs: add --model lr|fm|mlp\n", c,
                        SparseFlags[i]);
                return -1;
            }
        if (o->test) {
            fprintf(stderr, "ps-train %s: --test is for sparse jobs (--model); dense CSV jobs "
                            "take --test-csv\n", c);
            return -1;
        }
        return 0;
    }
    int ok = 0;
    if (ps_ctr_parse_model(o->model) < 0) {
        fprintf(stderr, "ps-train %s: --model: '%s' is not lr, fm or mlp\n", c, o->model);
        return -1;
    }
    if (o->train == NULL) {
        fprintf(stderr, "ps-train %s: --model needs --train FILE (libsvm or Criteo)\n", c);
        return -1;
    }
    if (!strcmp(c, "run") && o->test == NULL) {
        fprintf(stderr, "ps-train run: --model needs --test FILE (run evaluates on it)\n");
        return -1;
    }
    if (o->data || o->csv || o->test_csv) {
        fprintf(stderr, "ps-train %s: --data/--csv/--test-csv are for dense jobs, not with "
                        "--model\n", c);
        return -1;
    }
    if (strcmp(o->format, "libsvm") && strcmp(o->format, "criteo")) {
        fprintf(stderr, "ps-train %s: --format: '%s' is not libsvm or criteo\n", c, o->format);
        return -1;
    }
    ok = table_optim_ok(o->table_optim);
    if (!ok) {
        char names[160];
        fprintf(stderr, "ps-train %s: --table-optim: unknown '%s' (%s)\n", c, o->table_optim,
                ps_proto_optim_names(PS_PROTO_KIND_TABLE, 1, " ", names, sizeof(names)));
        return -1;
    }
    if (is_ftrl(o->table_optim) && o->init_std > 0) {
        fprintf(stderr, "ps-train %s: --table-optim ftrl rows start at 0: --init-std must be "
                        "0\n", c);
        return -1;
    }
    if (!strcasecmp(o->model, "mlp")) {
        int sizes[PS_CTR_MAX_HIDDEN + 2];
        char spec[80], err[256];
        snprintf(spec, sizeof(spec), "1,%s", o->hidden);
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
    BAD(!sp->train[0], "train: empty");
    BAD(!optim_ok, "table_optim '%s'", sp->table_optim);
    BAD(sp->dim < 1 || sp->dim > TR_SP_MAX_DIM, "dim %d", sp->dim);
    BAD(sp->fields < 1 || sp->fields > TR_SP_MAX_FIELDS, "fields %d", sp->fields);
    BAD(sp->shards < 1 || sp->shards > TR_SP_MAX_SHARDS, "shards %d", sp->shards);
    BAD(sp->admit < 0 || sp->admit > TR_SP_MAX_ADMIT, "admit %d", sp->admit);
    BAD(sp->capacity < 0 || sp->capacity > TR_SP_MAX_CAPACITY, "capacity %lld", sp->capacity);
    BAD(sp->shard_bytes < 1 || sp->shard_bytes > TR_SP_MAX_SHARD_BYTES, "shard_bytes %lld",
        sp->shard_bytes);
    BAD(sp->train_bytes < 1, "train_bytes %lld", sp->train_bytes);
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
    const sparseConfig *sp = &cfg->sp;
    int n = 0;
#define SDIFF(cond, ...) do { if (cond) { tr_add_diff(out, len, __VA_ARGS__); n++; } } while (0)
    SDIFF(o->model && strcasecmp(o->model, sp->model), "--model %s (job: %s)", o->model,
          sp->model[0] ? sp->model : "none, a dense MLP");
    if (!sp->model[0]) return n;
    SDIFF(tr_given(o, "--train") && strcmp(o->train, sp->train), "--train %s (job: %s)",
          o->train, sp->train);
    SDIFF(tr_given(o, "--test") && strcmp(o->test, sp->test), "--test %s (job: %s)", o->test,
          sp->test[0] ? sp->test : "none");
    SDIFF(tr_given(o, "--format") && strcmp(o->format, sp->format), "--format %s (job: %s)",
          o->format, sp->format);
    SDIFF(tr_given(o, "--dim") && o->dim != sp->dim, "--dim %d (job: %d)", o->dim, sp->dim);
    SDIFF(tr_given(o, "--fields") && o->fields != sp->fields, "--fields %d (job: %d)", o->fields,
          sp->fields);
    SDIFF(tr_given(o, "--hidden") && strcmp(o->hidden, sp->hidden), "--hidden %s (job: %s)",
          o->hidden, sp->hidden);
    SDIFF(tr_given(o, "--table-optim") && strcasecmp(o->table_optim, sp->table_optim),
          "--table-optim %s (job: %s)", o->table_optim, sp->table_optim);
    SDIFF(tr_given(o, "--table-lr") && o->table_lr != sp->table_lr, "--table-lr %g (job: %g)",
          o->table_lr, sp->table_lr);
    SDIFF(tr_given(o, "--ftrl-beta") && o->ftrl_beta != sp->ftrl_beta,
          "--ftrl-beta %g (job: %g)", o->ftrl_beta, sp->ftrl_beta);
    SDIFF(tr_given(o, "--l1") && o->l1 != sp->l1, "--l1 %g (job: %g)", o->l1, sp->l1);
    SDIFF(tr_given(o, "--l2") && o->l2 != sp->l2, "--l2 %g (job: %g)", o->l2, sp->l2);
    SDIFF(tr_given(o, "--init-std") && o->init_std != sp->init_std, "--init-std %g (job: %g)",
          o->init_std, sp->init_std);
    SDIFF(tr_given(o, "--admit") && o->admit != sp->admit, "--admit %d (job: %d)", o->admit,
          sp->admit);
    SDIFF(tr_given(o, "--capacity") && o->capacity != sp->capacity, "--capacity %lld (job: %lld)",
          o->capacity, sp->capacity);
    SDIFF(tr_given(o, "--shards") && o->shards != sp->shards, "--shards %d (job: %d)", o->shards,
          sp->shards);
    SDIFF(tr_given(o, "--shard-bytes") && o->shard_bytes != sp->shard_bytes,
          "--shard-bytes %lld (job: %lld)", o->shard_bytes, sp->shard_bytes);
#undef SDIFF
    return n;
}
