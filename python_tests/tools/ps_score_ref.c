/* ps_score_ref -- integration-test driver: the trainer's forward pass of a
 * sparse LR / FM job on the parameters a server holds now, to compare with
 * PS.SCORE bit for bit (python_tests/test_score.py).
 *
 * Usage: ps_score_ref ADDRS JOB MODEL SHARDS DATA NSAMPLES OUTPREFIX
 * Reads the first NSAMPLES lines of libsvm file DATA, pulls the bias tensor
 * of JOB (as ps-train lays it out: psModel JOB, tensor "bias" of shape [1])
 * and the rows of the batch's distinct ids from table JOB:emb (SHARDS shards,
 * F32 pulls, as ps-train pulls them), then runs what ps-train's worker runs:
 * ps_ctr_unique_build, ps_ctr_predict (probabilities) and its linear_logit
 * (the common kernel with the unique-id slots). Also scores the batch with
 * libps's psScore. Writes OUTPREFIX.{counts,ids,vals} (the batch as
 * PS.SCORE takes it: uint32 counts, uint64 ids, float32 values), .bias
 * (float32), .z (trainer logits, float64), .p (trainer probabilities,
 * float32) and .psz (psScore logits, float64). Prints one JSON line.
 *
 * MLP: ps_score_ref ADDRS JOB mlp SHARDS DATA NSAMPLES OUTPREFIX FIELDS HIDDEN
 * (the job's --fields and --hidden, e.g. 8 and "16" or "16,8"): pulls the
 * job's dense tensors W<l>/b<l> as ps-train lays them out, runs
 * ps_ctr_predict (the MLP's forward pass, its input pooled by
 * common/ctr_score.c's ps_ctr_pool) and writes OUTPREFIX.{counts,ids,vals,
 * fields} (the batch as PS.SCORE MODEL MLP takes it), .x (the trainer's
 * pooled inputs: n x FIELDS x dim float32, the first FIELDS x dim of each
 * input row), .p (its class-1 probabilities, float32), .dense (W0, b0, W1,
 * ... float32, concatenated) and .psx (libps psScorePool's pooled inputs).
 * Exit codes: 0 ok, 2 library error, 3 usage or data. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctr_model.h"
#include "ctr_score.h"
#include "redis-ps/ps.h"
#include "sparse_data.h"

static int write_file(const char *prefix, const char *ext, const void *p, size_t len) {
    char path[4096];
    snprintf(path, sizeof(path), "%s.%s", prefix, ext);
    FILE *f = fopen(path, "wb");
    if (f == NULL) return -1;
    size_t w = len ? fwrite(p, 1, len, f) : 0;
    return fclose(f) == 0 && w == len ? 0 : -1;
}

static int mlp_main(int argc, char **argv);

/* What both references start with: the first 'nmax' samples of DATA (argv[5]),
 * a connection to ADDRS (argv[1]) and the row dim of table '<job>:emb' (shard
 * 0's PS.INFO). 0, or the exit status: 3 unreadable data, 2 a server error
 * (printed as the JSON line). */
static int load(char **argv, const ps_sparse_opts *so, int nmax, int shards, const char *job,
                ps_sparse_batch *b, psClient **cp, char *name, size_t namecap, int *dim) {
    char err[256];
    ps_sparse_reader *rd = ps_sparse_open(argv[5], so, err, sizeof(err));
    if (rd == NULL || ps_sparse_read(rd, b, nmax, err, sizeof(err)) < 1) {
        fprintf(stderr, "ps_score_ref: %s\n", err);
        return 3;
    }
    ps_sparse_close(rd);
    psOptions opt = {0};
    psClient *c = psConnect(argv[1], &opt);
    if (c == NULL) return 2;
    *cp = c;
    snprintf(name, namecap, "%s:emb", job);
    psKeyInfo ki;
    psEmbed *probe = psEmbedNew(name, 1, shards);
    int ok = !c->err && probe && psInfo(c, psEmbedShardKey(probe, 0), &ki) == PS_OK;
    psEmbedFree(probe);
    if (!ok) {
        printf("{\"ok\": false, \"error\": \"%s\"}\n", c->errstr);
        return 2;
    }
    *dim = ki.dim;
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 10 && strcmp(argv[3], "mlp") == 0) return mlp_main(argc, argv);
    if (argc != 8) {
        fprintf(stderr, "usage: ps_score_ref ADDRS JOB MODEL SHARDS DATA NSAMPLES OUTPREFIX\n");
        return 3;
    }
    const char *job = argv[2], *prefix = argv[7];
    int model = ps_ctr_parse_model(argv[3]), shards = atoi(argv[4]), nmax = atoi(argv[6]);
    char err[256], name[512];
    if ((model != PS_CTR_LR && model != PS_CTR_FM) || shards < 1 || nmax < 1) return 3;

    ps_sparse_batch b = {0};
    psClient *c = NULL;
    int dim, st = load(argv, NULL, nmax, shards, job, &b, &c, name, sizeof(name), &dim);
    if (st) return st;
    psEmbed *e = psEmbedNew(name, dim, shards);
    psModel *dm = psModelNew(job);
    uint64_t one = 1;
    float bias = 0.0f, *dst[1] = {&bias};
    if (e == NULL || dm == NULL || psModelAddTensor(dm, "bias", 1, &one) < 0 ||
        psModelLayout(c, dm) != PS_OK || psModelPull(c, dm, dst, NULL) != PS_OK)
        goto fail;

    /* The worker's step: unique ids, their rows, the forward pass. */
    ps_ctr_config cfg = {.model = model, .k = dim - 1, .max_batch = b.n};
    ps_ctr_model m;
    if (ps_ctr_init(&m, &cfg, 1, err, sizeof(err)) != 0) {
        fprintf(stderr, "ps_score_ref: %s\n", err);
        return 3;
    }
    m.bias = bias;
    ps_ctr_unique u = {0};
    if (ps_ctr_unique_build(&u, &b) != 0) return 3;
    float *rows = malloc((u.n + 1) * (size_t)dim * sizeof(float));
    double *z = malloc((size_t)b.n * sizeof(double)), *psz = malloc((size_t)b.n * sizeof(double));
    double *s = malloc((size_t)dim * sizeof(double));
    uint32_t *counts = malloc((size_t)b.n * sizeof(uint32_t));
    if (!rows || !z || !psz || !s || !counts) return 3;
    if (u.n && psEmbedPull(c, e, u.ids, u.n, rows) != PS_OK) goto fail;
    if (ps_ctr_predict(&m, &b, &u, rows, err, sizeof(err)) != 0) {
        fprintf(stderr, "ps_score_ref: %s\n", err);
        return 3;
    }
    for (int i = 0; i < b.n; i++) {
        /* worker/ctr_model.c's linear_logit, which ps_ctr_predict ran. */
        z[i] = ps_ctr_score_logit(m.bias, rows, (uint32_t)dim, u.slot, b.val, b.off[i],
                                  b.off[i + 1], s);
        counts[i] = (uint32_t)(b.off[i + 1] - b.off[i]);
    }
    if (psScore(c, e, model == PS_CTR_LR ? PS_SCORE_MODEL_LR : PS_SCORE_MODEL_FM, bias,
                (size_t)b.n, counts, b.id, b.val, psz) != PS_OK)
        goto fail;
    if (write_file(prefix, "counts", counts, 4 * (size_t)b.n) ||
        write_file(prefix, "ids", b.id, 8 * b.nnz) || write_file(prefix, "vals", b.val, 4 * b.nnz) ||
        write_file(prefix, "bias", &bias, 4) || write_file(prefix, "z", z, 8 * (size_t)b.n) ||
        write_file(prefix, "p", m.p, 4 * (size_t)b.n) || write_file(prefix, "psz", psz, 8 * (size_t)b.n))
        return 3;
    printf("{\"ok\": true, \"samples\": %d, \"nnz\": %zu, \"unique\": %zu, \"dim\": %d, "
           "\"bias\": %.9g}\n",
           b.n, b.nnz, u.n, dim, (double)bias);
    return 0;
fail:
    printf("{\"ok\": false, \"error\": \"%s\"}\n", c->errstr);
    return 2;
}

/* The MLP reference (see the top of the file). */
static int mlp_main(int argc, char **argv) {
    (void)argc;
    const char *job = argv[2], *prefix = argv[7];
    int shards = atoi(argv[4]), nmax = atoi(argv[6]), fields = atoi(argv[8]);
    char err[256], name[512];
    ps_ctr_config cfg = {.model = PS_CTR_MLP, .fields = fields};
    for (char *h = argv[9]; *h; h += *h == ',') {
        char *end;
        long w = strtol(h, &end, 10);
        if (end == h || w < 1 || cfg.nhidden == PS_CTR_MAX_HIDDEN) return 3;
        cfg.hidden[cfg.nhidden++] = (int)w;
        h = end;
    }
    if (shards < 1 || nmax < 1 || fields < 1) return 3;

    ps_sparse_batch b = {0};
    ps_sparse_opts so = {.format = PS_SPARSE_LIBSVM, .field_bits = PS_SPARSE_FIELD_BITS};
    psClient *c = NULL;
    int dim, st = load(argv, &so, nmax, shards, job, &b, &c, name, sizeof(name), &dim);
    if (st) return st;
    cfg.emb_dim = dim;
    cfg.ndense = b.ndense;
    cfg.max_batch = b.n;
    ps_ctr_model m;
    if (ps_ctr_init(&m, &cfg, 1, err, sizeof(err)) != 0) {
        fprintf(stderr, "ps_score_ref: %s\n", err);
        return 3;
    }
    /* The dense tensors as ps-train lays them out (train/sparse_cfg.c). */
    psEmbed *e = psEmbedNew(name, dim, shards);
    psModel *dm = psModelNew(job);
    int nd = ps_ctr_dense_count(&m);
    float *dst[2 * (PS_CTR_MAX_HIDDEN + 1)];
    size_t dense_len = 0;
    if (e == NULL || dm == NULL) return 3;
    for (int i = 0; i < nd; i++) {
        const char *tn;
        size_t len;
        dst[i] = ps_ctr_dense(&m, i, &len, NULL, &tn);
        dense_len += len;
        uint64_t d[2] = {(uint64_t)len, 1};
        int ndim = 1;
        if (i % 2 == 0) {
            d[0] = (uint64_t)m.mlp.sizes[i / 2 + 1];
            d[1] = (uint64_t)m.mlp.sizes[i / 2];
            ndim = 2;
        }
        if (psModelAddTensor(dm, tn, ndim, d) < 0) return 3;
    }
    if (psModelLayout(c, dm) != PS_OK || psModelPull(c, dm, dst, NULL) != PS_OK) goto fail;

    ps_ctr_unique u = {0};
    if (ps_ctr_unique_build(&u, &b) != 0) return 3;
    size_t per = (size_t)fields * (size_t)dim;
    float *rows = malloc((u.n + 1) * (size_t)dim * sizeof(float));
    float *x = malloc((size_t)b.n * per * sizeof(float) + 1);
    float *psx = malloc((size_t)b.n * per * sizeof(float) + 1);
    float *dense = malloc(dense_len * sizeof(float) + 1);
    uint32_t *counts = malloc((size_t)b.n * sizeof(uint32_t));
    if (!rows || !x || !psx || !dense || !counts) return 3;
    if (u.n && psEmbedPull(c, e, u.ids, u.n, rows) != PS_OK) goto fail;
    if (ps_ctr_predict(&m, &b, &u, rows, err, sizeof(err)) != 0) {
        fprintf(stderr, "ps_score_ref: %s\n", err);
        return 3;
    }
    for (int i = 0; i < b.n; i++) {
        memcpy(x + (size_t)i * per, m.x + (size_t)i * (size_t)m.in, per * sizeof(float));
        counts[i] = (uint32_t)(b.off[i + 1] - b.off[i]);
    }
    for (int i = 0, at = 0; i < nd; i++) {
        size_t len;
        const float *v = ps_ctr_dense(&m, i, &len, NULL, NULL);
        memcpy(dense + at, v, len * sizeof(float));
        at += (int)len;
    }
    if (psScorePool(c, e, (uint32_t)fields, (size_t)b.n, counts, b.id, b.val, b.field, psx) !=
        PS_OK)
        goto fail;
    if (write_file(prefix, "counts", counts, 4 * (size_t)b.n) ||
        write_file(prefix, "ids", b.id, 8 * b.nnz) || write_file(prefix, "vals", b.val, 4 * b.nnz) ||
        write_file(prefix, "fields", b.field, 4 * b.nnz) ||
        write_file(prefix, "x", x, 4 * (size_t)b.n * per) ||
        write_file(prefix, "p", m.p, 4 * (size_t)b.n) ||
        write_file(prefix, "dense", dense, 4 * dense_len) ||
        write_file(prefix, "psx", psx, 4 * (size_t)b.n * per))
        return 3;
    printf("{\"ok\": true, \"samples\": %d, \"nnz\": %zu, \"unique\": %zu, \"dim\": %d, "
           "\"fields\": %d, \"sizes\": [",
           b.n, b.nnz, u.n, dim, fields);
    for (int l = 0; l <= m.mlp.nlayers; l++) printf("%s%d", l ? ", " : "", m.mlp.sizes[l]);
    printf("]}\n");
    return 0;
fail:
    printf("{\"ok\": false, \"error\": \"%s\"}\n", c->errstr);
    return 2;
}
