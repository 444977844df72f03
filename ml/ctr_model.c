/* ctr_model.c -- LR, FM and embeddings + MLP on sparse batches (see
 * ctr_model.h). */

#include "ctr_model.h"
#include "ctr_score.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define seterr ps_sparse_seterr

/* ============================== unique ids ================================ */

static uint64_t hash_id(uint64_t z)
{
    z = (z ^ (z >> 33)) * 0xff51afd7ed558ccdULL;
    z = (z ^ (z >> 33)) * 0xc4ceb9fe1a85ec53ULL;
    return z ^ (z >> 33);
}

int ps_ctr_unique_build(ps_ctr_unique *u, const ps_sparse_batch *b)
{
    size_t nnz = b->nnz;
    u->n = 0;
    if (nnz > u->slot_cap) {
        uint32_t *s = realloc(u->slot, nnz * sizeof(*s));
        if (s == NULL) return -1;
        u->slot = s;
        u->slot_cap = nnz;
    }
    if (nnz > u->cap) {
        uint64_t *ids = realloc(u->ids, nnz * sizeof(*ids));
        if (ids == NULL) return -1;
        u->ids = ids;
        u->cap = nnz;
    }
    /* A table at most half full keeps the probes short. */
    size_t want = 16;
    while (want < 2 * nnz) want *= 2;
    if (want > u->tab_size) {
        free(u->tab);
        u->tab = malloc(want * sizeof(*u->tab));
        if (u->tab == NULL) {
            u->tab_size = 0;
            return -1;
        }
        u->tab_size = want;
    }
    size_t mask = u->tab_size - 1;
    memset(u->tab, 0, u->tab_size * sizeof(*u->tab));
    for (size_t j = 0; j < nnz; j++) {
        uint64_t id = b->id[j];
        size_t h = (size_t)hash_id(id) & mask;
        for (;;) {
            uint32_t e = u->tab[h];
            if (e == 0) {
                u->ids[u->n] = id;
                u->tab[h] = (uint32_t)(u->n + 1);
                u->slot[j] = (uint32_t)u->n;
                u->n++;
                break;
            }
            if (u->ids[e - 1] == id) {
                u->slot[j] = e - 1;
                break;
            }
            h = (h + 1) & mask;
        }
    }
    return 0;
}

void ps_ctr_unique_free(ps_ctr_unique *u)
{
    free(u->ids);
    free(u->slot);
    free(u->tab);
    memset(u, 0, sizeof(*u));
}

/* ============================ model lifetime ============================== */

static const char *const ModelNames[] = {"lr", "fm", "mlp"};

int ps_ctr_parse_model(const char *s)
{
    for (int i = 0; i < 3; i++)
        if (strcmp(s, ModelNames[i]) == 0) return i;
    return -1;
}

const char *ps_ctr_model_name(int model)
{
    return model >= 0 && model < 3 ? ModelNames[model] : "?";
}

void ps_ctr_free(ps_ctr_model *m)
{
    ps_mlp_free(&m->mlp);
    free(m->x);
    free(m->dx);
    free(m->y);
    free(m->p);
    free(m->s);
    memset(m, 0, sizeof(*m));
}

int ps_ctr_init(ps_ctr_model *m, const ps_ctr_config *c, uint64_t seed, char *err, size_t errlen)
{
    memset(m, 0, sizeof(*m));
    if (c->max_batch < 1 || c->max_batch > PS_MLP_MAX_BATCH) {
        seterr(err, errlen, "max batch %d must be 1..%d", c->max_batch, PS_MLP_MAX_BATCH);
        return -1;
    }
    m->c = *c;
    switch (c->model) {
    case PS_CTR_LR:
        m->dim = 1;
        break;
    case PS_CTR_FM:
        if (c->k < 1 || c->k > PS_CTR_MAX_K) {
            seterr(err, errlen, "FM factors k=%d must be 1..%d", c->k, PS_CTR_MAX_K);
            return -1;
        }
        m->dim = 1 + c->k;
        break;
    case PS_CTR_MLP: {
        if (c->emb_dim < 1 || c->emb_dim > PS_CTR_MAX_K) {
            seterr(err, errlen, "embedding dim %d must be 1..%d", c->emb_dim, PS_CTR_MAX_K);
            return -1;
        }
        if (c->fields < 1 || c->fields > PS_SPARSE_MAX_FIELDS) {
            seterr(err, errlen, "fields %d must be 1..%d", c->fields, PS_SPARSE_MAX_FIELDS);
            return -1;
        }
        if (c->ndense < 0 || c->ndense > 4096 || c->nhidden < 0 ||
            c->nhidden > PS_CTR_MAX_HIDDEN) {
            seterr(err, errlen, "dense features %d must be 0..4096 and hidden layers %d 0..%d",
                   c->ndense, c->nhidden, PS_CTR_MAX_HIDDEN);
            return -1;
        }
        long in = (long)c->fields * c->emb_dim + c->ndense;
        if (in > PS_MLP_MAX_SIZE) {
            seterr(err, errlen, "MLP input width %ld (fields x dim + dense) exceeds %d", in,
                   PS_MLP_MAX_SIZE);
            return -1;
        }
        int sizes[PS_CTR_MAX_HIDDEN + 2];
        sizes[0] = (int)in;
        for (int l = 0; l < c->nhidden; l++) sizes[1 + l] = c->hidden[l];
        sizes[1 + c->nhidden] = 2;
        if (ps_mlp_init(&m->mlp, sizes, c->nhidden + 2, c->max_batch, err, errlen) != 0) {
            memset(m, 0, sizeof(*m));
            return -1;
        }
        ps_mlp_init_he(&m->mlp, seed);
        m->dim = c->emb_dim;
        m->in = (int)in;
        size_t nx = (size_t)c->max_batch * (size_t)in;
        m->x = malloc(nx * sizeof(float));
        m->dx = malloc(nx * sizeof(float));
        m->y = malloc((size_t)c->max_batch * sizeof(int32_t));
        if (m->x == NULL || m->dx == NULL || m->y == NULL) goto oom;
        break;
    }
    default:
        seterr(err, errlen, "unknown model %d", c->model);
        return -1;
    }
    m->p = malloc((size_t)c->max_batch * sizeof(float));
    m->s = malloc((size_t)m->dim * sizeof(double));
    if (m->p == NULL || m->s == NULL) goto oom;
    return 0;
oom:
    ps_ctr_free(m);
    seterr(err, errlen, "out of memory allocating the model (max batch %d)", c->max_batch);
    return -1;
}

int ps_ctr_dense_count(const ps_ctr_model *m)
{
    return m->c.model == PS_CTR_MLP ? 2 * m->mlp.nlayers : 1;
}

float *ps_ctr_dense(ps_ctr_model *m, int i, size_t *len, float **grad, const char **name)
{
    static const char *const Wn[] = {"W0", "W1", "W2", "W3", "W4", "W5", "W6", "W7", "W8"};
    static const char *const bn[] = {"b0", "b1", "b2", "b3", "b4", "b5", "b6", "b7", "b8"};
    _Static_assert(sizeof(Wn) / sizeof(Wn[0]) >= PS_CTR_MAX_HIDDEN + 1, "a name per layer");
    if (i < 0 || i >= ps_ctr_dense_count(m)) return NULL;
    if (m->c.model != PS_CTR_MLP) {
        if (len) *len = 1;
        if (grad) *grad = &m->gbias;
        if (name) *name = "bias";
        return &m->bias;
    }
    int l = i / 2;
    if (i % 2 == 0) {
        if (len) *len = ps_mlp_layer_params(&m->mlp, l);
        if (grad) *grad = m->mlp.gW[l];
        if (name) *name = Wn[l];
        return m->mlp.W[l];
    }
    if (len) *len = (size_t)m->mlp.sizes[l + 1];
    if (grad) *grad = m->mlp.gb[l];
    if (name) *name = bn[l];
    return m->mlp.b[l];
}

/* ================================ kernels ================================= */

/* log(1 + exp(x)) without overflow. */
static double softplus(double x)
{
    return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x));
}

/* Logit of row i for LR (k = 0) or FM; leaves FM's per-factor sums in m->s.
 * The kernel is common/ctr_score.c's, which PS.SCORE also runs. */
static double linear_logit(ps_ctr_model *m, const ps_sparse_batch *b, const ps_ctr_unique *u,
                           const float *rows, int i)
{
    return ps_ctr_score_logit(m->bias, rows, (uint32_t)m->dim, u->slot, b->val, b->off[i],
                              b->off[i + 1], m->s);
}

/* Checks what the model needs of the batch. Returns 0 or -1. */
static int check_batch(const ps_ctr_model *m, const ps_sparse_batch *b, const ps_ctr_unique *u,
                       char *err, size_t errlen)
{
    if (b->n > m->c.max_batch) {
        seterr(err, errlen, "batch of %d rows exceeds the model's max batch %d", b->n,
               m->c.max_batch);
        return -1;
    }
    if (b->n > 0 && u->slot_cap < b->nnz) {
        seterr(err, errlen, "the unique ids were not built from this batch");
        return -1;
    }
    if (m->c.model != PS_CTR_MLP) return 0;
    if (b->n > 0 && b->ndense != m->c.ndense) {
        seterr(err, errlen, "batch has %d dense features, the model %d", b->ndense, m->c.ndense);
        return -1;
    }
    for (size_t j = 0; j < b->nnz; j++) {
        if (b->field[j] >= (uint32_t)m->c.fields) {
            seterr(err, errlen, "feature id %llu has field %u, the model has fields 0..%d",
                   (unsigned long long)b->id[j], b->field[j], m->c.fields - 1);
            return -1;
        }
    }
    return 0;
}

/* MLP input rows: pooled embeddings per field (common/ctr_score.c's kernel,
 * which PS.SCORE MODEL MLP also runs), then the dense features. */
_Static_assert(PS_SPARSE_MAX_FIELDS == PS_CTR_POOL_MAX_FIELDS, "one field limit");
static void mlp_input(ps_ctr_model *m, const ps_sparse_batch *b, const ps_ctr_unique *u,
                      const float *rows)
{
    size_t d = (size_t)m->dim, pooled = (size_t)m->c.fields * d;
    for (int i = 0; i < b->n; i++) {
        float *xi = m->x + (size_t)i * (size_t)m->in;
        ps_ctr_pool(xi, (uint32_t)m->c.fields, (uint32_t)d, rows, u->slot, b->field, b->val,
                    b->off[i], b->off[i + 1]);
        if (m->c.ndense > 0)
            memcpy(xi + pooled, b->dense + (size_t)i * (size_t)m->c.ndense,
                   (size_t)m->c.ndense * sizeof(float));
    }
}

int ps_ctr_predict(ps_ctr_model *m, const ps_sparse_batch *b, const ps_ctr_unique *u,
                   const float *rows, char *err, size_t errlen)
{
    if (check_batch(m, b, u, err, errlen) != 0) return -1;
    if (b->n == 0) return 0;
    if (m->c.model == PS_CTR_MLP) {
        mlp_input(m, b, u, rows);
        const float *pr = ps_mlp_predict(&m->mlp, m->x, b->n);
        for (int i = 0; i < b->n; i++) m->p[i] = pr[2 * i + 1];
        return 0;
    }
    for (int i = 0; i < b->n; i++) {
        double z = linear_logit(m, b, u, rows, i);
        m->p[i] = (float)(1.0 / (1.0 + exp(-z)));
    }
    return 0;
}

/* LR and FM: forward and backward row by row. */
static double linear_grad(ps_ctr_model *m, const ps_sparse_batch *b, const ps_ctr_unique *u,
                          const float *rows, float *grows)
{
    int dim = m->dim, k = dim - 1;
    double loss = 0.0, gb = 0.0;
    for (int i = 0; i < b->n; i++) {
        double z = linear_logit(m, b, u, rows, i);
        int y = b->label[i] > 0.5f;
        loss += softplus(y ? -z : z);
        double p = 1.0 / (1.0 + exp(-z));
        m->p[i] = (float)p;
        double dz = p - (double)y;
        gb += dz;
        for (size_t j = b->off[i]; j < b->off[i + 1]; j++) {
            size_t at = (size_t)u->slot[j] * (size_t)dim;
            const float *r = rows + at;
            float *g = grows + at;
            double x = b->val[j];
            g[0] += (float)(dz * x);
            for (int f = 0; f < k; f++)
                g[1 + f] += (float)(dz * x * (m->s[f] - (double)r[1 + f] * x));
        }
    }
    m->gbias = (float)gb;
    return loss;
}

/* MLP: nn.c's forward/backward on the pooled input, then the input gradient
 * spread back onto the rows. nn.c's gradients are of the mean loss: scaled
 * by the batch size to the sum. */
static double mlp_grad(ps_ctr_model *m, const ps_sparse_batch *b, const ps_ctr_unique *u,
                       const float *rows, float *grows)
{
    int n = b->n, d = m->dim;
    mlp_input(m, b, u, rows);
    for (int i = 0; i < n; i++) m->y[i] = b->label[i] > 0.5f;
    double mean = ps_mlp_grad(&m->mlp, m->x, m->y, n);
    ps_mlp *nn = &m->mlp;
    const float *probs = nn->act[nn->nlayers];
    for (int i = 0; i < n; i++) m->p[i] = probs[2 * i + 1];
    /* dx (n x in) = delta[1] (n x sizes[1]) * W[0] (sizes[1] x in), times n. */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, m->in, nn->sizes[1], (float)n,
                nn->delta[1], nn->sizes[1], nn->W[0], m->in, 0.0f, m->dx, m->in);
    for (int l = 0; l < nn->nlayers; l++) {
        size_t nw = ps_mlp_layer_params(nn, l);
        for (size_t t = 0; t < nw; t++) nn->gW[l][t] *= (float)n;
        for (int t = 0; t < nn->sizes[l + 1]; t++) nn->gb[l][t] *= (float)n;
    }
    for (int i = 0; i < n; i++) {
        const float *dxi = m->dx + (size_t)i * (size_t)m->in;
        for (size_t j = b->off[i]; j < b->off[i + 1]; j++) {
            float *g = grows + (size_t)u->slot[j] * (size_t)d;
            const float *src = dxi + (size_t)b->field[j] * (size_t)d;
            float v = b->val[j];
            for (int t = 0; t < d; t++) g[t] += v * src[t];
        }
    }
    return mean * (double)n;
}

int ps_ctr_grad(ps_ctr_model *m, const ps_sparse_batch *b, const ps_ctr_unique *u,
                const float *rows, float *grows, double *loss_sum, char *err, size_t errlen)
{
    if (check_batch(m, b, u, err, errlen) != 0) return -1;
    size_t nu = b->n > 0 ? u->n : 0;
    if (nu > 0) memset(grows, 0, nu * (size_t)m->dim * sizeof(float));
    *loss_sum = 0.0;
    if (b->n == 0) {
        for (int i = 0; i < ps_ctr_dense_count(m); i++) {
            size_t len;
            float *g;
            ps_ctr_dense(m, i, &len, &g, NULL);
            memset(g, 0, len * sizeof(float));
        }
        return 0;
    }
    *loss_sum = m->c.model == PS_CTR_MLP ? mlp_grad(m, b, u, rows, grows)
                                         : linear_grad(m, b, u, rows, grows);
    return 0;
}
