/* sparse_baseline.c -- single-process CTR trainer: the sparse baseline.
 *
 * Trains the CTR models of ml/ctr_model.c (LR, FM, embeddings + MLP) on
 * libsvm or Criteo files with no parameter server: the embedding table is a
 * local id -> row table (ml/ref/sparse_table.c) applying Adagrad,
 * FTRL-Proximal or SGD per row, reached only through ps_row_store (pull rows
 * by id, push gradient rows by id), the calls a server answers; with --store
 * core (implied by --admit, --filter, --unknown, --capacity) the rows live in
 * the module's own pure embedding-table core instead (module/core/embed.c), so
 * admission, UNKNOWN ZEROS and CAPACITY act exactly as on a server. The dense
 * tensors (bias, MLP layers) take per-element Adagrad (SGD with --optim sgd).
 * Its samples/s is the yardstick of distributed sparse training; its test
 * AUC, next to the planted truth's (--truth, from `ps-gen-ctr`),
 * shows the models learn.
 *
 *   sparse_baseline --train FILE --test FILE [--truth FILE] [--format libsvm|criteo]
 *                   [--field-bits B] [--model lr|fm|mlp] [--k K] [--dim D] [--fields F]
 *                   [--hidden 64,32] [--dense] [--optim adagrad|ftrl|sgd] [--lr X]
 *                   [--dense-lr X] [--eps X] [--alpha X] [--beta X] [--l1 X] [--l2 X]
 *                   [--init-std X] [--batch B] [--epochs E] [--seed S] [--threads N]
 *                   [--store table|core] [--admit N] [--filter K] [--unknown init|zeros]
 *                   [--capacity N]
 *
 * Prints one line per epoch and finally:
 *   RESULT samples_per_s=... test_auc=... test_logloss=... train_logloss=...
 *          zero_frac=... rows=... seconds=... [truth_auc=... auc_gap=...] ... */

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctr_model.h"
#include "embed.h"
#include "metrics.h"
#include "nn.h"
#include "sparse_data.h"
#include "sparse_table.h"

typedef struct options {
    const char *train, *test, *truth;
    int format, field_bits, dense;
    int model, k, dim, fields;
    const char *hidden;
    int optim;
    double lr, dense_lr, reg, eps, alpha, beta, l1, l2, init_std;
    int batch, epochs, threads;
    uint64_t seed;
    int core;            /* rows in the module's pure embed core, not sparse_table */
    int admit, filter_log2, unknown_zeros;
    long long capacity;
} options;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: sparse_baseline --train FILE --test FILE [--truth FILE] [--format libsvm|criteo]\n"
            "         [--field-bits B] [--model lr|fm|mlp] [--k K] [--dim D] [--fields F]\n"
            "         [--hidden 64,32] [--dense] [--optim adagrad|ftrl|sgd] [--lr X] [--dense-lr X]\n"
            "         [--reg X] [--eps X] [--alpha X] [--beta X] [--l1 X] [--l2 X] [--init-std X]\n"
            "         [--batch B] [--epochs E] [--seed S] [--threads N] [--store table|core]\n"
            "         [--admit N] [--filter K] [--unknown init|zeros] [--capacity N]\n"
            "Trains a CTR model in one process (no server) and prints a RESULT line.\n"
            "Defaults: libsvm, field bits 8 (gen-ctr files), fm, k 4, dim 8, fields 26 (39 for\n"
            "criteo), hidden 64,32, adagrad lr 0.1 eps 1e-8 (dense-lr = lr), ftrl alpha 0.05\n"
            "beta 1 l1 1 l2 1, reg 0 (L2: adds reg * row to each pushed gradient row), init std\n"
            "0.1 (0 for lr and ftrl), batch 256, 1 epoch, seed 1. --dense gives Criteo's\n"
            "integers to the MLP as dense features too.\n"
            "--store core keeps the rows in the server's own embedding-table core\n"
            "(module/core/embed.c: the rules of PS.CREATE EMBEDDING, including ADMIT n with a\n"
            "2^FILTER counting filter (default 20), UNKNOWN ZEROS and CAPACITY); --admit,\n"
            "--filter, --unknown and --capacity imply it. Default: table (ml/ref/sparse_table.c).\n");
}

static int num(const char *v, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    if (errno || end == v || *end != '\0' || !(d >= lo && d <= hi)) return -1;
    *out = d;
    return 0;
}

/* Parses the command line. Returns 0, 1 for --help, -1 on error. */
static int parse_options(int argc, char **argv, options *o)
{
    memset(o, 0, sizeof(*o));
    o->field_bits = 8;
    o->model = PS_CTR_FM;
    o->k = 4;
    o->dim = 8;
    o->fields = -1;
    o->hidden = "64,32";
    o->optim = PS_TAB_ADAGRAD;
    o->lr = 0.1;
    o->dense_lr = -1;
    o->eps = 1e-8;
    o->alpha = 0.05;
    o->beta = 1;
    o->l1 = 1;
    o->l2 = 1;
    o->init_std = -1;
    o->batch = 256;
    o->epochs = 1;
    o->seed = 1;
    o->admit = 1;
    o->filter_log2 = 20;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return 1;
        if (!strcmp(a, "--dense")) {
            o->dense = 1;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "sparse_baseline: %s needs a value (or is unknown)\n", a);
            return -1;
        }
        const char *v = argv[++i];
        double d = 0;
        int bad = 0;
        if (!strcmp(a, "--train")) o->train = v;
        else if (!strcmp(a, "--test")) o->test = v;
        else if (!strcmp(a, "--truth")) o->truth = v;
        else if (!strcmp(a, "--hidden")) o->hidden = v;
        else if (!strcmp(a, "--format")) {
            o->format = !strcmp(v, "criteo") ? PS_SPARSE_CRITEO : PS_SPARSE_LIBSVM;
            bad = strcmp(v, "criteo") && strcmp(v, "libsvm");
        } else if (!strcmp(a, "--model")) bad = (o->model = ps_ctr_parse_model(v)) < 0;
        else if (!strcmp(a, "--optim")) bad = (o->optim = ps_table_parse_optim(v)) < 0;
        else if (!strcmp(a, "--field-bits")) { bad = num(v, 0, 16, &d); o->field_bits = (int)d; }
        else if (!strcmp(a, "--k")) { bad = num(v, 1, PS_CTR_MAX_K, &d); o->k = (int)d; }
        else if (!strcmp(a, "--dim")) { bad = num(v, 1, PS_CTR_MAX_K, &d); o->dim = (int)d; }
        else if (!strcmp(a, "--fields")) { bad = num(v, 1, PS_SPARSE_MAX_FIELDS, &d); o->fields = (int)d; }
        else if (!strcmp(a, "--batch")) { bad = num(v, 1, 65536, &d); o->batch = (int)d; }
        else if (!strcmp(a, "--epochs")) { bad = num(v, 1, 1000, &d); o->epochs = (int)d; }
        else if (!strcmp(a, "--threads")) { bad = num(v, 1, 1024, &d); o->threads = (int)d; }
        else if (!strcmp(a, "--seed")) { bad = num(v, 0, 1e18, &d); o->seed = (uint64_t)d; }
        else if (!strcmp(a, "--lr")) bad = num(v, 1e-12, 1e6, &o->lr);
        else if (!strcmp(a, "--dense-lr")) bad = num(v, 1e-12, 1e6, &o->dense_lr);
        else if (!strcmp(a, "--reg")) bad = num(v, 0, 1e6, &o->reg);
        else if (!strcmp(a, "--eps")) bad = num(v, 1e-30, 1, &o->eps);
        else if (!strcmp(a, "--alpha")) bad = num(v, 1e-12, 1e6, &o->alpha);
        else if (!strcmp(a, "--beta")) bad = num(v, 0, 1e6, &o->beta);
        else if (!strcmp(a, "--l1")) bad = num(v, 0, 1e6, &o->l1);
        else if (!strcmp(a, "--l2")) bad = num(v, 0, 1e6, &o->l2);
        else if (!strcmp(a, "--init-std")) bad = num(v, 0, 1e6, &o->init_std);
        else if (!strcmp(a, "--store")) {
            bad = strcmp(v, "core") && strcmp(v, "table");
            o->core = !strcmp(v, "core");
        } else if (!strcmp(a, "--admit")) {
            bad = num(v, 1, PSE_MAX_ADMIT, &d);
            o->admit = (int)d;
            o->core = 1;
        } else if (!strcmp(a, "--filter")) {
            bad = num(v, PSE_MIN_FILTER_LOG2, PSE_MAX_FILTER_LOG2, &d);
            o->filter_log2 = (int)d;
            o->core = 1;
        } else if (!strcmp(a, "--unknown")) {
            bad = strcmp(v, "zeros") && strcmp(v, "init");
            o->unknown_zeros = !strcmp(v, "zeros");
            o->core = 1;
        } else if (!strcmp(a, "--capacity")) {
            bad = num(v, 1, PSE_MAX_ROWS, &d);
            o->capacity = (long long)d;
            o->core = 1;
        }
        else {
            fprintf(stderr, "sparse_baseline: unknown option %s\n", a);
            return -1;
        }
        if (bad) {
            fprintf(stderr, "sparse_baseline: bad value '%s' for %s\n", v, a);
            return -1;
        }
    }
    if (o->train == NULL || o->test == NULL) {
        fprintf(stderr, "sparse_baseline: --train and --test are required\n");
        return -1;
    }
    if (o->fields < 0) o->fields = o->format == PS_SPARSE_CRITEO ? PS_CRITEO_FIELDS : 26;
    if (o->dense_lr < 0) o->dense_lr = o->lr;
    /* FM factors and MLP embeddings need random starts (an all-zero FM has
     * zero factor gradients); LR weights start at 0 (FTRL requires it). */
    if (o->init_std < 0)
        o->init_std = o->optim == PS_TAB_FTRL || o->model == PS_CTR_LR ? 0.0 : 0.1;
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The local optimizer of the dense tensors: Adagrad per element (its
 * accumulators in 'acc', one array per tensor), or SGD. */
static void dense_step(ps_ctr_model *m, float **acc, int optim, float lr, float eps)
{
    for (int i = 0; i < ps_ctr_dense_count(m); i++) {
        size_t len;
        float *g;
        float *w = ps_ctr_dense(m, i, &len, &g, NULL);
        for (size_t t = 0; t < len; t++) {
            if (optim == PS_TAB_SGD) {
                w[t] = w[t] - lr * g[t];
                continue;
            }
            acc[i][t] = acc[i][t] + g[t] * g[t];
            w[t] = w[t] - lr * (g[t] / (sqrtf(acc[i][t]) + eps));
        }
    }
}

/* Scratch of one batch: its distinct ids, their rows and gradient rows. */
typedef struct batchWork {
    ps_sparse_batch b;
    ps_ctr_unique u;
    float *rows, *grows;
    size_t cap;
} batchWork;

/* Reads nothing; gathers the batch's ids and pulls their rows. Returns 0 or -1. */
static int gather(batchWork *w, ps_row_store *st, int dim)
{
    if (ps_ctr_unique_build(&w->u, &w->b) != 0) return -1;
    size_t need = (w->u.n ? w->u.n : 1) * (size_t)dim;
    if (need > w->cap) {
        free(w->rows);
        free(w->grows);
        w->rows = malloc(need * sizeof(float));
        w->grows = malloc(need * sizeof(float));
        if (w->rows == NULL || w->grows == NULL) return -1;
        w->cap = need;
    }
    return st->pull(st->self, w->u.ids, w->u.n, w->rows);
}

/* L2 regularization, lazily: each row a batch touches gets reg * row added
 * to its gradient once per batch. */
static void l2_rows(batchWork *w, int dim, float reg)
{
    if (reg == 0.0f) return;
    size_t n = w->u.n * (size_t)dim;
    for (size_t t = 0; t < n; t++) w->grows[t] = w->grows[t] + reg * w->rows[t];
}

/* ========= rows in the module's embedding-table core (--store core) ========= */

/* The ids go to the core as its little-endian id blob: a uint64 array on the
 * little-endian hosts this builds on. */
static int core_pull(void *self, const uint64_t *ids, size_t k, float *out)
{
    PSEmbed_Pull(self, (const unsigned char *)ids, k, out);
    return 0;
}

static int core_push(void *self, const uint64_t *ids, size_t k, const float *grad)
{
    if (k == 0) return 0;
    return PSEmbed_Push(self, (const unsigned char *)ids, k, (const unsigned char *)grad, NULL) ==
                   PSE_OK
               ? 0
               : -1;
}

/* The core table of the options, as PS.CREATE key EMBEDDING DIM dim ... would
 * make it. Returns NULL with a message in 'err'. */
static PSEmbed *core_new(const options *o, int dim, char *err, size_t errlen)
{
    PSEmbedConfig c;
    PSEmbed_DefaultConfig(&c, (uint32_t)dim);
    c.optim = o->optim == PS_TAB_FTRL      ? PSE_OPT_FTRL
              : o->optim == PS_TAB_ADAGRAD ? PSE_OPT_ADAGRAD
                                           : PSE_OPT_SGD;
    c.lr = o->lr;
    c.eps = o->eps;
    c.alpha = o->alpha;
    c.beta = o->beta;
    c.l1 = o->l1;
    c.l2 = o->l2;
    c.init = o->init_std > 0 ? PSE_INIT_NORMAL : PSE_INIT_ZEROS;
    c.init_a = 0.0;
    c.init_b = o->init_std;
    c.seed = o->seed;
    c.unknown_zeros = o->unknown_zeros;
    c.admit = (uint32_t)o->admit;
    c.filter_log2 = (uint32_t)o->filter_log2;
    c.capacity = (uint64_t)o->capacity;
    const char *why = NULL;
    PSEmbed *t = PSEmbed_New(&c, &why);
    if (t == NULL) snprintf(err, errlen, "embedding core: %s", why ? why : "out of memory");
    return t;
}

/* Values of the core's rows that are exactly 0. */
static uint64_t core_zeros(const PSEmbed *t, int dim)
{
    uint64_t z = 0, n = PSEmbed_Rows(t);
    for (uint64_t i = 0; i < n; i++) {
        PSEmbedRow r;
        PSEmbed_RowAt(t, i, &r);
        for (int j = 0; j < dim; j++) z += r.data[j] == 0.0f;
    }
    return z;
}

/* Reads the truth's test AUC and logloss from a gen-ctr .truth file. */
static int read_truth(const char *path, double *auc, double *loss)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) return -1;
    char line[2048];
    int ok = fgets(line, sizeof(line), f) != NULL;
    fclose(f);
    const char *a = ok ? strstr(line, "truth_test_auc=") : NULL;
    const char *l = ok ? strstr(line, "truth_test_logloss=") : NULL;
    if (a == NULL || l == NULL) return -1;
    *auc = strtod(a + strlen("truth_test_auc="), NULL);
    *loss = strtod(l + strlen("truth_test_logloss="), NULL);
    return 0;
}

int main(int argc, char **argv)
{
    options o;
    int rc = parse_options(argc, argv, &o);
    if (rc != 0) {
        usage(rc > 0 ? stdout : stderr);
        return rc > 0 ? 0 : 2;
    }
    openblas_set_num_threads(o.threads > 0 ? o.threads : 1);
    char err[1024];
    ps_ctr_config mc = {.model = o.model, .k = o.k, .emb_dim = o.dim, .fields = o.fields,
                        .ndense = o.dense && o.format == PS_SPARSE_CRITEO ? PS_CRITEO_INTS : 0,
                        .max_batch = o.batch};
    if (o.model == PS_CTR_MLP) {
        int sizes[PS_CTR_MAX_HIDDEN + 2];
        char spec[256];
        snprintf(spec, sizeof(spec), "1,%s", o.hidden);
        int ns = ps_parse_layers(spec, sizes, PS_CTR_MAX_HIDDEN + 1, err, sizeof(err));
        if (ns < 0) {
            fprintf(stderr, "sparse_baseline: --hidden: %s\n", err);
            return 2;
        }
        mc.nhidden = ns - 1;
        memcpy(mc.hidden, sizes + 1, (size_t)mc.nhidden * sizeof(int));
    }
    ps_ctr_model m;
    if (ps_ctr_init(&m, &mc, o.seed, err, sizeof(err)) != 0) {
        fprintf(stderr, "sparse_baseline: %s\n", err);
        return 2;
    }
    ps_table_config tc = {.dim = ps_ctr_row_dim(&m), .optim = o.optim, .lr = (float)o.lr,
                          .eps = (float)o.eps, .alpha = (float)o.alpha, .beta = (float)o.beta,
                          .l1 = (float)o.l1, .l2 = (float)o.l2, .init_std = (float)o.init_std,
                          .seed = o.seed};
    ps_sparse_table *tab = NULL;
    PSEmbed *core = NULL;
    if (o.core)
        core = core_new(&o, tc.dim, err, sizeof(err));
    else
        tab = ps_table_new(&tc, err, sizeof(err));
    if (tab == NULL && core == NULL) {
        fprintf(stderr, "sparse_baseline: %s\n", err);
        ps_ctr_free(&m);
        return 2;
    }
    ps_row_store st = {.self = core, .dim = tc.dim, .pull = core_pull, .push = core_push};
    if (tab != NULL) st = ps_table_store(tab);
    int status = 1, nd = ps_ctr_dense_count(&m);
    batchWork w;
    memset(&w, 0, sizeof(w));
    ps_metrics met = {0};
    float *acc[2 * (PS_CTR_MAX_HIDDEN + 1)] = {0};
    for (int i = 0; i < nd; i++) {
        size_t len;
        ps_ctr_dense(&m, i, &len, NULL, NULL);
        if ((acc[i] = calloc(len, sizeof(float))) == NULL) goto out_oom;
    }
    ps_sparse_opts so = {.format = o.format, .field_bits = o.field_bits,
                         .criteo_dense = mc.ndense > 0};
    printf("sparse_baseline: model %s (row dim %d), optim %s, lr %g, batch %d, train %s\n",
           ps_ctr_model_name(o.model), tc.dim,
           o.optim == PS_TAB_FTRL ? "ftrl" : o.optim == PS_TAB_ADAGRAD ? "adagrad" : "sgd", o.lr,
           o.batch, o.train);
    fflush(stdout);

    double train_seconds = 0.0, train_loss = 0.0, test_loss = 0.0, test_auc = NAN;
    long long samples = 0;
    for (int epoch = 1; epoch <= o.epochs; epoch++) {
        double t0 = now_s(), loss_sum = 0.0;
        long long n = 0;
        ps_sparse_reader *r = ps_sparse_open(o.train, &so, err, sizeof(err));
        if (r == NULL) goto out_err;
        int got;
        while ((got = ps_sparse_read(r, &w.b, o.batch, err, sizeof(err))) > 0) {
            double loss;
            if (gather(&w, &st, tc.dim) != 0 ||
                ps_ctr_grad(&m, &w.b, &w.u, w.rows, w.grows, &loss, err, sizeof(err)) != 0 ||
                (l2_rows(&w, tc.dim, (float)o.reg), 0) ||
                st.push(st.self, w.u.ids, w.u.n, w.grows) != 0) {
                if (!err[0]) snprintf(err, sizeof(err), "out of memory");
                ps_sparse_close(r);
                goto out_err;
            }
            dense_step(&m, acc, o.optim == PS_TAB_SGD ? PS_TAB_SGD : PS_TAB_ADAGRAD,
                       (float)o.dense_lr, (float)o.eps);
            loss_sum += loss;
            n += got;
        }
        ps_sparse_close(r);
        if (got < 0) goto out_err;
        double secs = now_s() - t0;
        train_seconds += secs;
        samples += n;
        train_loss = n ? loss_sum / (double)n : 0.0;

        /* Test pass: forward only, nothing is pushed. */
        ps_metrics_reset(&met);
        r = ps_sparse_open(o.test, &so, err, sizeof(err));
        if (r == NULL) goto out_err;
        while ((got = ps_sparse_read(r, &w.b, o.batch, err, sizeof(err))) > 0) {
            if (gather(&w, &st, tc.dim) != 0 ||
                ps_ctr_predict(&m, &w.b, &w.u, w.rows, err, sizeof(err)) != 0) {
                ps_sparse_close(r);
                goto out_err;
            }
            for (int i = 0; i < w.b.n; i++)
                if (ps_metrics_add(&met, m.p[i], w.b.label[i] > 0.5f) != 0) goto out_oom;
        }
        ps_sparse_close(r);
        if (got < 0) goto out_err;
        test_loss = ps_metrics_logloss(&met);
        test_auc = ps_metrics_auc(&met);
        printf("epoch %d/%d train_logloss=%.5f test_logloss=%.5f test_auc=%.5f rows=%llu "
               "samples_per_s=%.0f epoch_seconds=%.2f\n",
               epoch, o.epochs, train_loss, test_loss, test_auc,
               (unsigned long long)(tab ? ps_table_rows(tab) : PSEmbed_Rows(core)), (double)n / secs, secs);
        fflush(stdout);
    }
    uint64_t rows = tab ? ps_table_rows(tab) : PSEmbed_Rows(core);
    uint64_t zeros = tab ? ps_table_zeros(tab) : core_zeros(core, tc.dim);
    double zero_frac = rows ? (double)zeros / ((double)rows * tc.dim) : 0.0;
    printf("RESULT samples_per_s=%.0f test_auc=%.5f test_logloss=%.5f train_logloss=%.5f "
           "zero_frac=%.4f rows=%llu seconds=%.3f epochs=%d batch=%d model=%s optim=%s",
           train_seconds > 0 ? (double)samples / train_seconds : 0.0, test_auc, test_loss,
           train_loss, zero_frac, (unsigned long long)rows, train_seconds, o.epochs, o.batch,
           ps_ctr_model_name(o.model),
           o.optim == PS_TAB_FTRL ? "ftrl" : o.optim == PS_TAB_ADAGRAD ? "adagrad" : "sgd");
    if (core != NULL)
        printf(" store=core admit=%d unknown=%s", o.admit, o.unknown_zeros ? "zeros" : "init");
    double tauc, tloss;
    if (o.truth && read_truth(o.truth, &tauc, &tloss) == 0)
        printf(" truth_auc=%.5f truth_logloss=%.5f auc_gap=%.5f", tauc, tloss, tauc - test_auc);
    printf("\n");
    status = 0;
    goto out;
out_oom:
    snprintf(err, sizeof(err), "out of memory");
out_err:
    fprintf(stderr, "sparse_baseline: %s\n", err);
out:
    ps_metrics_free(&met);
    ps_sparse_batch_free(&w.b);
    ps_ctr_unique_free(&w.u);
    free(w.rows);
    free(w.grows);
    for (int i = 0; i < nd; i++) free(acc[i]);
    ps_table_free(tab);
    PSEmbed_Free(core);
    ps_ctr_free(&m);
    return status;
}
