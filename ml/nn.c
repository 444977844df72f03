/* nn.c -- multi-layer perceptron: ReLU hidden layers, softmax cross-entropy
 * output, forward/backward on cblas_sgemm.
 *
 * Notation: the network has L = nlayers weight layers.  act[0] is the input
 * batch (the caller's x, never copied), act[l] for l = 1..L is the output of
 * weight layer l-1: ReLU(act[l-1] W[l-1]^T + b[l-1]) for l < L, the logits
 * (then the softmax probabilities) for l = L.  delta[l] is the derivative of
 * the mean loss with respect to the pre-activation that produced act[l].
 *
 * Pure core: no Redis, no sockets, no exit(). */

#include "nn.h"

#include <cblas.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ========================== errors and helpers =========================== */

/* Formats a message into 'err' (when it is non-NULL and 'errlen' > 0). */
static void nn_seterr(char *err, size_t errlen, const char *fmt, ...)
{
    if (err == NULL || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* Returns a*b, or 0 when the product overflows size_t (both are > 0 here). */
static size_t nn_mul(size_t a, size_t b)
{
    if (a != 0 && b > SIZE_MAX / a) return 0;
    return a * b;
}

/* Returns a zeroed array of 'n' floats (caller frees), NULL on overflow or
 * out of memory. */
static float *nn_floats(size_t n)
{
    if (n == 0 || n > SIZE_MAX / sizeof(float)) return NULL;
    return calloc(n, sizeof(float));
}

/* ============================ object lifetime ============================= */

void ps_mlp_free(ps_mlp *m)
{
    if (m == NULL) return;
    int L = m->nlayers;
    for (int l = 0; l < L; l++) {
        if (m->W) free(m->W[l]);
        if (m->b) free(m->b[l]);
        if (m->gW) free(m->gW[l]);
        if (m->gb) free(m->gb[l]);
    }
    for (int l = 0; l <= L; l++) {
        if (m->act) free(m->act[l]);
        if (m->delta) free(m->delta[l]);
    }
    free(m->W);
    free(m->b);
    free(m->gW);
    free(m->gb);
    free(m->act);
    free(m->delta);
    free(m->sizes);
    memset(m, 0, sizeof(*m));
}

int ps_mlp_init(ps_mlp *m, const int *sizes, int nsizes, int max_batch, char *err, size_t errlen)
{
    memset(m, 0, sizeof(*m));
    if (sizes == NULL || nsizes < 2) {
        nn_seterr(err, errlen, "an MLP needs at least 2 layer sizes (input and classes), got %d",
                  sizes == NULL ? 0 : nsizes);
        return -1;
    }
    for (int i = 0; i < nsizes; i++) {
        if (sizes[i] < 1 || sizes[i] > PS_MLP_MAX_SIZE) {
            nn_seterr(err, errlen, "layer size %d is %d, must be 1..%d", i, sizes[i],
                      PS_MLP_MAX_SIZE);
            return -1;
        }
    }
    if (max_batch < 1 || max_batch > PS_MLP_MAX_BATCH) {
        nn_seterr(err, errlen, "max batch %d must be 1..%d", max_batch, PS_MLP_MAX_BATCH);
        return -1;
    }

    int L = nsizes - 1;
    m->nlayers = L;
    m->max_batch = max_batch;
    m->sizes = malloc(sizeof(int) * (size_t)nsizes);
    m->W = calloc((size_t)L, sizeof(float *));
    m->b = calloc((size_t)L, sizeof(float *));
    m->gW = calloc((size_t)L, sizeof(float *));
    m->gb = calloc((size_t)L, sizeof(float *));
    m->act = calloc((size_t)L + 1, sizeof(float *));
    m->delta = calloc((size_t)L + 1, sizeof(float *));
    if (!m->sizes || !m->W || !m->b || !m->gW || !m->gb || !m->act || !m->delta) goto oom;
    memcpy(m->sizes, sizes, sizeof(int) * (size_t)nsizes);

    for (int l = 0; l < L; l++) {
        size_t nw = nn_mul((size_t)sizes[l + 1], (size_t)sizes[l]);
        size_t nrow = nn_mul((size_t)max_batch, (size_t)sizes[l + 1]);
        if (nw == 0 || nrow == 0) goto oom;
        m->W[l] = nn_floats(nw);
        m->gW[l] = nn_floats(nw);
        m->b[l] = nn_floats((size_t)sizes[l + 1]);
        m->gb[l] = nn_floats((size_t)sizes[l + 1]);
        m->act[l + 1] = nn_floats(nrow);
        m->delta[l + 1] = nn_floats(nrow);
        if (!m->W[l] || !m->gW[l] || !m->b[l] || !m->gb[l] || !m->act[l + 1] || !m->delta[l + 1])
            goto oom;
    }
    return 0;

oom:
    ps_mlp_free(m);
    nn_seterr(err, errlen, "out of memory allocating the MLP (max batch %d)", max_batch);
    return -1;
}

void ps_mlp_init_he(ps_mlp *m, uint64_t seed)
{
    PSRng r;
    ps_rng_seed(&r, seed);
    for (int l = 0; l < m->nlayers; l++) {
        double sd = sqrt(2.0 / (double)m->sizes[l]);
        size_t nw = ps_mlp_layer_params(m, l);
        for (size_t i = 0; i < nw; i++) m->W[l][i] = (float)(sd * ps_rng_normal(&r));
        memset(m->b[l], 0, sizeof(float) * (size_t)m->sizes[l + 1]);
    }
}

size_t ps_mlp_layer_params(const ps_mlp *m, int l)
{
    if (l < 0 || l >= m->nlayers) return 0;
    return (size_t)m->sizes[l + 1] * (size_t)m->sizes[l];
}

size_t ps_mlp_num_params(const ps_mlp *m)
{
    size_t n = 0;
    for (int l = 0; l < m->nlayers; l++)
        n += ps_mlp_layer_params(m, l) + (size_t)m->sizes[l + 1];
    return n;
}

/* =========================== forward / backward =========================== */

/* Runs the layers on 'batch' rows of 'x': fills act[1..L], leaving the raw
 * logits in act[L].  Hidden layers apply ReLU. */
static void nn_forward(ps_mlp *m, const float *x, int batch)
{
    const float *in = x;
    for (int l = 0; l < m->nlayers; l++) {
        int nin = m->sizes[l], nout = m->sizes[l + 1];
        float *z = m->act[l + 1];
        const float *bias = m->b[l];
        /* z (batch x nout) = in (batch x nin) * W^T (nin x nout) */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, batch, nout, nin, 1.0f, in, nin,
                    m->W[l], nin, 0.0f, z, nout);
        int hidden = l + 1 < m->nlayers;
        for (int i = 0; i < batch; i++) {
            float *row = z + (size_t)i * (size_t)nout;
            for (int j = 0; j < nout; j++) {
                float v = row[j] + bias[j];
                row[j] = (hidden && !(v > 0.0f)) ? 0.0f : v;
            }
        }
        in = z;
    }
}

/* Returns log(sum_j exp(row[j])) computed stably (shifted by the maximum),
 * and stores the maximum in *maxp. */
static double nn_logsumexp(const float *row, int n, float *maxp)
{
    float mx = row[0];
    for (int j = 1; j < n; j++)
        if (row[j] > mx) mx = row[j];
    double sum = 0.0;
    for (int j = 0; j < n; j++) sum += exp((double)row[j] - (double)mx);
    *maxp = mx;
    return (double)mx + log(sum);
}

/* Returns 1 when all 'n' labels are valid classes 0..k-1. */
static int nn_labels_ok(const int32_t *y, int n, int k)
{
    for (int i = 0; i < n; i++)
        if (y[i] < 0 || y[i] >= k) return 0;
    return 1;
}

float ps_mlp_grad(ps_mlp *m, const float *x, const int32_t *y, int batch)
{
    int L = m->nlayers;
    int K = m->sizes[L];
    if (batch < 1 || batch > m->max_batch || !nn_labels_ok(y, batch, K)) return NAN;

    nn_forward(m, x, batch);

    /* Softmax in place and the output delta (p - onehot) / batch. */
    float *z = m->act[L];
    float *d = m->delta[L];
    float inv = 1.0f / (float)batch;
    double loss = 0.0;
    for (int i = 0; i < batch; i++) {
        float *row = z + (size_t)i * (size_t)K;
        float *drow = d + (size_t)i * (size_t)K;
        float mx;
        double lse = nn_logsumexp(row, K, &mx);
        loss += lse - (double)row[y[i]];
        for (int j = 0; j < K; j++) {
            row[j] = (float)exp((double)row[j] - lse);
            drow[j] = row[j] * inv;
        }
        drow[y[i]] = (row[y[i]] - 1.0f) * inv;
    }

    /* Backward: weight layer l maps act[l] to act[l+1]. */
    for (int l = L - 1; l >= 0; l--) {
        int nin = m->sizes[l], nout = m->sizes[l + 1];
        const float *in = l == 0 ? x : m->act[l];
        const float *dout = m->delta[l + 1];
        /* gW (nout x nin) = dout^T (nout x batch) * in (batch x nin) */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nout, nin, batch, 1.0f, dout, nout,
                    in, nin, 0.0f, m->gW[l], nin);
        float *gb = m->gb[l];
        memset(gb, 0, sizeof(float) * (size_t)nout);
        for (int i = 0; i < batch; i++) {
            const float *drow = dout + (size_t)i * (size_t)nout;
            for (int j = 0; j < nout; j++) gb[j] += drow[j];
        }
        if (l == 0) break;
        /* delta[l] (batch x nin) = dout (batch x nout) * W (nout x nin), then
         * masked by the ReLU derivative (act[l] > 0). */
        float *din = m->delta[l];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, batch, nin, nout, 1.0f, dout, nout,
                    m->W[l], nin, 0.0f, din, nin);
        const float *a = m->act[l];
        size_t cnt = (size_t)batch * (size_t)nin;
        for (size_t i = 0; i < cnt; i++)
            if (!(a[i] > 0.0f)) din[i] = 0.0f;
    }
    return (float)(loss / (double)batch);
}

const float *ps_mlp_predict(ps_mlp *m, const float *x, int batch)
{
    if (batch < 1 || batch > m->max_batch) return NULL;
    nn_forward(m, x, batch);
    int K = m->sizes[m->nlayers];
    float *z = m->act[m->nlayers];
    for (int i = 0; i < batch; i++) {
        float *row = z + (size_t)i * (size_t)K;
        float mx;
        double lse = nn_logsumexp(row, K, &mx);
        for (int j = 0; j < K; j++) row[j] = (float)exp((double)row[j] - lse);
    }
    return z;
}

void ps_mlp_evaluate(ps_mlp *m, const float *x, const int32_t *y, int n, double *loss, double *acc)
{
    if (loss) *loss = 0.0;
    if (acc) *acc = 0.0;
    if (n <= 0) return;
    int L = m->nlayers;
    int K = m->sizes[L];
    size_t dim = (size_t)m->sizes[0];
    double total = 0.0;
    long correct = 0;
    for (int start = 0; start < n; start += m->max_batch) {
        int cnt = n - start < m->max_batch ? n - start : m->max_batch;
        nn_forward(m, x + (size_t)start * dim, cnt);
        const float *z = m->act[L];
        for (int i = 0; i < cnt; i++) {
            const float *row = z + (size_t)i * (size_t)K;
            int32_t label = y[start + i];
            int best = 0;
            for (int j = 1; j < K; j++)
                if (row[j] > row[best]) best = j;
            if (label < 0 || label >= K) continue;
            float mx;
            total += nn_logsumexp(row, K, &mx) - (double)row[label];
            if (best == label) correct++;
        }
    }
    if (loss) *loss = total / (double)n;
    if (acc) *acc = (double)correct / (double)n;
}

void ps_mlp_sgd(ps_mlp *m, float lr)
{
    for (int l = 0; l < m->nlayers; l++) {
        size_t nw = ps_mlp_layer_params(m, l);
        float *w = m->W[l];
        const float *g = m->gW[l];
        for (size_t i = 0; i < nw; i++) w[i] -= lr * g[i];
        float *b = m->b[l];
        const float *gb = m->gb[l];
        for (int j = 0; j < m->sizes[l + 1]; j++) b[j] -= lr * gb[j];
    }
}

/* ================================ parsing ================================= */

int ps_parse_layers(const char *s, int *sizes, int max, char *err, size_t errlen)
{
    if (s == NULL || *s == '\0') {
        nn_seterr(err, errlen, "empty layer list (expected e.g. 784,256,10)");
        return -1;
    }
    int count = 0;
    const char *p = s;
    for (;;) {
        const char *start = p;
        long v = 0;
        while (*p >= '0' && *p <= '9') {
            if (v <= PS_MLP_MAX_SIZE) v = v * 10 + (*p - '0');
            p++;
        }
        if (p == start || (*p != ',' && *p != '\0')) {
            nn_seterr(err, errlen, "bad layer list '%s': item %d is not a plain positive integer",
                      s, count + 1);
            return -1;
        }
        if (v < 1 || v > PS_MLP_MAX_SIZE) {
            nn_seterr(err, errlen, "bad layer list '%s': size %.*s must be 1..%d", s,
                      (int)(p - start), start, PS_MLP_MAX_SIZE);
            return -1;
        }
        if (count >= max) {
            nn_seterr(err, errlen, "bad layer list '%s': more than %d sizes", s, max);
            return -1;
        }
        sizes[count++] = (int)v;
        if (*p == '\0') break;
        p++; /* skip ',' */
    }
    if (count < 2) {
        nn_seterr(err, errlen, "bad layer list '%s': need at least 2 sizes (input,classes)", s);
        return -1;
    }
    return count;
}
