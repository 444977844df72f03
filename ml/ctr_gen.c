/* ctr_gen.c -- planted-truth CTR data generator (see ctr_gen.h). */

#include "ctr_gen.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "ctr_model.h"
#include "metrics.h"
#include "sparse_data.h"

struct ps_ctr_gen {
    ps_ctr_gen_config c;
    double *cdf;      /* vocab entries: P(rank <= r + 1) */
    double sw, sv;    /* the truth's weight scales */
    double norm;      /* 1 / sqrt(E[scale^2]) over the Zipf ranks (1 without a head) */
    double *v;        /* fields * k factors of the sample being scored */
    uint32_t period;  /* drift: the period the truth is in */
};

void ps_ctr_gen_set_period(ps_ctr_gen *g, uint32_t period) { g->period = period; }

/* Drift: the last period <= the current one at which 'id' got new
 * parameters (0: its first ones). One hash of (seed, id, p) per period back. */
static uint32_t param_period(const ps_ctr_gen *g, uint64_t id)
{
    if (g->c.drift_every <= 0 || !(g->c.drift_frac > 0)) return 0;
    for (uint32_t p = g->period; p >= 1; p--) {
        PSRng r;
        ps_rng_seed(&r, (g->c.seed * 0xbf58476d1ce4e5b9ULL) ^ (id * 0x94d049bb133111ebULL) ^
                            ((uint64_t)p * 0xd1b54a32d192ed03ULL));
        if (ps_rng_uniform(&r) < g->c.drift_frac) return p;
    }
    return 0;
}

#define seterr ps_sparse_seterr

/* The scale of rank r's parameters before normalization: 1 up to the head,
 * (head / r)^decay past it. */
static double head_scale(const ps_ctr_gen *g, uint32_t r)
{
    if (g->c.head == 0 || r <= g->c.head) return 1.0;
    double q = (double)g->c.head / r;
    return g->c.decay == 1.0 ? q : pow(q, g->c.decay);
}

ps_ctr_gen *ps_ctr_gen_new(const ps_ctr_gen_config *c, char *err, size_t errlen)
{
    if (c->model != PS_CTR_LR && c->model != PS_CTR_FM) {
        seterr(err, errlen, "the planted model must be lr or fm");
        return NULL;
    }
    if (c->fields < 1 || c->fields >= PS_SPARSE_MAX_FIELDS) {
        seterr(err, errlen, "fields %d must be 1..%d", c->fields, PS_SPARSE_MAX_FIELDS - 1);
        return NULL;
    }
    if (c->vocab < 1 || c->vocab > PS_GEN_MAX_VOCAB) {
        seterr(err, errlen, "vocab %u must be 1..%u", c->vocab, PS_GEN_MAX_VOCAB);
        return NULL;
    }
    if (!(c->zipf >= 0 && c->zipf <= 10)) {
        seterr(err, errlen, "zipf exponent %g must be 0..10", c->zipf);
        return NULL;
    }
    if (c->model == PS_CTR_FM && (c->k < 1 || c->k > PS_GEN_MAX_K)) {
        seterr(err, errlen, "k %d must be 1..%d", c->k, PS_GEN_MAX_K);
        return NULL;
    }
    if (!(c->decay >= 0 && c->decay <= 16)) {
        seterr(err, errlen, "head decay %g must be 0..16 (0: 1)", c->decay);
        return NULL;
    }
    if (c->drift_every < 0 || !(c->drift_frac >= 0 && c->drift_frac <= 1)) {
        seterr(err, errlen, "drift every %lld samples must be >= 0, drift fraction %g 0..1",
               c->drift_every, c->drift_frac);
        return NULL;
    }
    if (!isfinite(c->bias) || fabs(c->bias) > 100) {
        seterr(err, errlen, "bias %g must be within -100..100", c->bias);
        return NULL;
    }
    ps_ctr_gen *g = calloc(1, sizeof(*g));
    if (g == NULL) goto oom;
    g->c = *c;
    if (c->model == PS_CTR_LR) g->c.k = 0;
    if (c->decay == 0) g->c.decay = 1.0;
    g->cdf = malloc((size_t)c->vocab * sizeof(double));
    g->v = malloc(((size_t)c->fields * (size_t)(g->c.k + 1)) * sizeof(double));
    if (g->cdf == NULL || g->v == NULL) goto oom;
    double sum = 0.0;
    for (uint32_t r = 0; r < c->vocab; r++) {
        sum += pow((double)r + 1.0, -c->zipf);
        g->cdf[r] = sum;
    }
    for (uint32_t r = 0; r < c->vocab; r++) g->cdf[r] /= sum;
    g->cdf[c->vocab - 1] = 1.0;
    /* With a head, the mean squared scale of a drawn id is E = sum_r P(r) s(r)^2
     * < 1; dividing every scale by sqrt(E) keeps the linear and pairwise parts
     * at variance about 1 (each is a sum of products of independent per-field
     * terms), so the truth's AUC stays comparable whatever the head. */
    g->norm = 1.0;
    if (c->head > 0 && c->head < c->vocab) {
        double e = 0.0, prev = 0.0;
        for (uint32_t r = 0; r < c->vocab; r++) {
            double s = head_scale(g, r + 1);
            e += (g->cdf[r] - prev) * s * s;
            prev = g->cdf[r];
        }
        g->norm = 1.0 / sqrt(e);
    }
    g->sw = 1.0 / sqrt((double)c->fields);
    double pairs = (double)c->fields * (double)(c->fields - 1) / 2.0;
    g->sv = g->c.k > 0 && pairs > 0 ? pow(pairs * g->c.k, -0.25) : 0.0;
    return g;
oom:
    ps_ctr_gen_free(g);
    seterr(err, errlen, "out of memory (vocab %u)", c->vocab);
    return NULL;
}

void ps_ctr_gen_free(ps_ctr_gen *g)
{
    if (g == NULL) return;
    free(g->cdf);
    free(g->v);
    free(g);
}

double ps_ctr_gen_logit(const ps_ctr_gen *g, const uint32_t *ranks, int n)
{
    int k = g->c.k;
    double z = g->c.bias, sq = 0.0;
    double s[PS_GEN_MAX_K] = {0};
    for (int f = 0; f < n; f++) {
        /* The truth's row of an id: normals from a PSRng seeded by (seed, id). */
        PSRng r;
        uint64_t id = ps_sparse_id_u64((uint32_t)f, ranks[f]);
        double scale = g->norm * head_scale(g, ranks[f]);
        uint32_t pp = param_period(g, id);
        ps_rng_seed(&r, (g->c.seed * 0x9e3779b97f4a7c15ULL) ^ id ^
                            ((uint64_t)pp * 0xd1b54a32d192ed03ULL));
        z += scale * g->sw * ps_rng_normal(&r);
        for (int t = 0; t < k; t++) {
            double v = scale * g->sv * ps_rng_normal(&r);
            s[t] += v;
            sq += v * v;
        }
    }
    double pair = 0.0;
    for (int t = 0; t < k; t++) pair += s[t] * s[t];
    return z + 0.5 * (pair - sq);
}

/* Zipf rank 1..vocab by inverse CDF (binary search). */
static uint32_t zipf_rank(const ps_ctr_gen *g, PSRng *rng)
{
    double u = ps_rng_uniform(rng);
    uint32_t lo = 0, hi = g->c.vocab - 1;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (g->cdf[mid] > u)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo + 1;
}

double ps_ctr_gen_sample(ps_ctr_gen *g, PSRng *rng, uint32_t *ranks, uint64_t *ids, int *label)
{
    for (int f = 0; f < g->c.fields; f++) {
        ranks[f] = zipf_rank(g, rng);
        ids[f] = ps_sparse_id_u64((uint32_t)f, ranks[f]);
    }
    double p = 1.0 / (1.0 + exp(-ps_ctr_gen_logit(g, ranks, g->c.fields)));
    *label = ps_rng_uniform(rng) < p;
    return p;
}

/* ================================ files =================================== */

/* An output file, plain or gzip. */
typedef struct genOut {
    FILE *f;
    gzFile gz;
    char *buf;
    size_t len, cap;
} genOut;

static int out_open(genOut *o, const char *path, int gz)
{
    memset(o, 0, sizeof(*o));
    o->cap = 1 << 16;
    o->buf = malloc(o->cap);
    if (o->buf == NULL) return -1;
    if (gz)
        o->gz = gzopen(path, "wb1");
    else
        o->f = fopen(path, "wb");
    return (gz ? o->gz != NULL : o->f != NULL) ? 0 : -1;
}

static int out_flush(genOut *o)
{
    if (o->len == 0) return 0;
    int ok = o->gz ? gzwrite(o->gz, o->buf, (unsigned)o->len) == (int)o->len
                   : fwrite(o->buf, 1, o->len, o->f) == o->len;
    o->len = 0;
    return ok ? 0 : -1;
}

/* Closes the file; returns -1 when anything failed to reach it. */
static int out_close(genOut *o)
{
    int rc = 0;
    if (o->f || o->gz) rc = out_flush(o);
    if (o->gz && gzclose(o->gz) != Z_OK) rc = -1;
    if (o->f && fclose(o->f) != 0) rc = -1;
    free(o->buf);
    memset(o, 0, sizeof(*o));
    return rc;
}

/* Appends the decimal digits of 'v' and then 'tail'. */
static void out_u64(genOut *o, uint64_t v, const char *tail)
{
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n > 0) o->buf[o->len++] = tmp[--n];
    while (*tail) o->buf[o->len++] = *tail++;
}

/* One libsvm line "label id:1 id:1 ...\n". Returns 0 or -1. */
static int out_sample(genOut *o, int label, const uint64_t *ids, int n)
{
    if (o->len + (size_t)n * 24 + 8 > o->cap && out_flush(o) != 0) return -1;
    o->buf[o->len++] = label ? '1' : '0';
    for (int f = 0; f < n; f++) {
        o->buf[o->len++] = ' ';
        out_u64(o, ids[f], ":1");
    }
    o->buf[o->len++] = '\n';
    return 0;
}

#define GEN_MAX_PERIODS 1000 /* drift: each id's parameters look back over the periods */

/* The drift writer: both files at once, period by period (ctr_gen.h). */
static int write_drift(ps_ctr_gen *g, const ps_ctr_gen_config *c, long long train, long long test,
                       const char *prefix, int gz, ps_ctr_gen_result *res, char *err,
                       size_t errlen)
{
    long long periods = (train + c->drift_every - 1) / c->drift_every;
    int rc = -1;
    uint64_t ids[PS_SPARSE_MAX_FIELDS];
    uint32_t ranks[PS_SPARSE_MAX_FIELDS];
    ps_metrics all = {0}, per = {0};
    genOut o[2];
    char path[2][4096], tpath[4096];
    FILE *tf = NULL;
    memset(o, 0, sizeof(o));
    if (periods > GEN_MAX_PERIODS) {
        seterr(err, errlen, "drift: %lld periods (samples / drift-every) exceed %d", periods,
               GEN_MAX_PERIODS);
        return -1;
    }
    for (int part = 0; part < 2; part++) {
        snprintf(path[part], sizeof(path[part]), "%s.%s.libsvm%s", prefix,
                 part == 0 ? "train" : "test", gz ? ".gz" : "");
        if (out_open(&o[part], path[part], gz) != 0) {
            seterr(err, errlen, "%s: cannot create: %s", path[part], strerror(errno));
            goto out;
        }
    }
    snprintf(tpath, sizeof(tpath), "%s.truth", prefix);
    if ((tf = fopen(tpath, "w")) == NULL) {
        seterr(err, errlen, "%s: cannot create: %s", tpath, strerror(errno));
        goto out;
    }
    PSRng rng;
    ps_rng_seed(&rng, c->seed);
    double loss[2] = {0, 0}, pos[2] = {0, 0};
    long long first[2] = {0, 0};
    char lines[GEN_MAX_PERIODS][160];
    for (long long p = 0; p < periods; p++) {
        long long n[2];
        n[0] = train - p * c->drift_every < c->drift_every ? train - p * c->drift_every
                                                           : c->drift_every;
        n[1] = test * (p + 1) / periods - test * p / periods;
        ps_ctr_gen_set_period(g, (uint32_t)p);
        ps_metrics_free(&per);
        memset(&per, 0, sizeof(per));
        for (int part = 0; part < 2; part++) {
            for (long long i = 0; i < n[part]; i++) {
                int y;
                double pr = ps_ctr_gen_sample(g, &rng, ranks, ids, &y);
                loss[part] += ps_logloss1(pr, y);
                pos[part] += y;
                if (part == 1 && (ps_metrics_add(&all, pr, y) != 0 ||
                                  ps_metrics_add(&per, pr, y) != 0)) {
                    seterr(err, errlen, "out of memory");
                    goto out;
                }
                if (out_sample(&o[part], y, ids, c->fields) != 0) {
                    seterr(err, errlen, "%s: write failed: %s", path[part], strerror(errno));
                    goto out;
                }
            }
        }
        snprintf(lines[p], sizeof(lines[p]),
                 "PERIOD p=%lld train_first=%lld train_count=%lld test_first=%lld test_count=%lld "
                 "truth_test_auc=%.6f\n", p, first[0], n[0], first[1], n[1],
                 n[1] > 0 ? ps_metrics_auc(&per) : 0.0);
        first[0] += n[0];
        first[1] += n[1];
    }
    for (int part = 0; part < 2; part++)
        if (out_close(&o[part]) != 0) {
            seterr(err, errlen, "%s: write failed: %s", path[part], strerror(errno));
            goto out;
        }
    res->train_logloss = loss[0] / (double)train;
    res->train_ctr = pos[0] / (double)train;
    res->test_logloss = loss[1] / (double)test;
    res->test_ctr = pos[1] / (double)test;
    res->test_auc = ps_metrics_auc(&all);
    fprintf(tf,
            "TRUTH model=%s fields=%d vocab=%u zipf=%g k=%d bias=%g head=%u seed=%llu train=%lld "
            "test=%lld truth_test_logloss=%.6f truth_test_auc=%.6f truth_train_logloss=%.6f "
            "train_ctr=%.4f test_ctr=%.4f decay=%g drift_every=%lld drift_frac=%g periods=%lld\n",
            ps_ctr_model_name(c->model), c->fields, c->vocab, c->zipf, g->c.k, c->bias, c->head,
            (unsigned long long)c->seed, train, test, res->test_logloss, res->test_auc,
            res->train_logloss, res->train_ctr, res->test_ctr, g->c.decay, c->drift_every,
            c->drift_frac, periods);
    for (long long p = 0; p < periods; p++) fputs(lines[p], tf);
    if (fclose(tf) != 0) {
        tf = NULL;
        seterr(err, errlen, "%s: write failed", tpath);
        goto out;
    }
    tf = NULL;
    rc = 0;
out:
    if (tf) fclose(tf);
    out_close(&o[0]);
    out_close(&o[1]);
    ps_metrics_free(&all);
    ps_metrics_free(&per);
    return rc;
}

int ps_ctr_gen_write(const ps_ctr_gen_config *c, long long train, long long test,
                     const char *prefix, int gz, ps_ctr_gen_result *res, char *err,
                     size_t errlen)
{
    memset(res, 0, sizeof(*res));
    if (train < 1 || test < 1 || train > (1LL << 40) || test > (1LL << 32)) {
        seterr(err, errlen, "train samples %lld must be 1..2^40, test samples %lld 1..2^32",
               train, test);
        return -1;
    }
    ps_ctr_gen *g = ps_ctr_gen_new(c, err, errlen);
    if (g == NULL) return -1;
    if (c->drift_every > 0) {
        int drc = write_drift(g, c, train, test, prefix, gz, res, err, errlen);
        ps_ctr_gen_free(g);
        return drc;
    }
    int rc = -1;
    uint64_t ids[PS_SPARSE_MAX_FIELDS];
    uint32_t ranks[PS_SPARSE_MAX_FIELDS];
    ps_metrics met = {0};
    genOut o;
    memset(&o, 0, sizeof(o));
    char path[4096];
    PSRng rng;
    ps_rng_seed(&rng, c->seed);
    for (int part = 0; part < 2; part++) {
        long long n = part == 0 ? train : test;
        snprintf(path, sizeof(path), "%s.%s.libsvm%s", prefix, part == 0 ? "train" : "test",
                 gz ? ".gz" : "");
        if (out_open(&o, path, gz) != 0) {
            seterr(err, errlen, "%s: cannot create: %s", path, strerror(errno));
            goto out;
        }
        double loss = 0.0, pos = 0.0;
        for (long long i = 0; i < n; i++) {
            int y;
            double p = ps_ctr_gen_sample(g, &rng, ranks, ids, &y);
            loss += ps_logloss1(p, y);
            pos += y;
            if (part == 1 && ps_metrics_add(&met, p, y) != 0) {
                seterr(err, errlen, "out of memory");
                goto out;
            }
            if (out_sample(&o, y, ids, c->fields) != 0) {
                seterr(err, errlen, "%s: write failed: %s", path, strerror(errno));
                goto out;
            }
        }
        if (out_close(&o) != 0) {
            seterr(err, errlen, "%s: write failed: %s", path, strerror(errno));
            goto out;
        }
        if (part == 0) {
            res->train_logloss = loss / (double)n;
            res->train_ctr = pos / (double)n;
        } else {
            res->test_logloss = loss / (double)n;
            res->test_ctr = pos / (double)n;
        }
    }
    res->test_auc = ps_metrics_auc(&met);
    snprintf(path, sizeof(path), "%s.truth", prefix);
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        seterr(err, errlen, "%s: cannot create: %s", path, strerror(errno));
        goto out;
    }
    fprintf(f,
            "TRUTH model=%s fields=%d vocab=%u zipf=%g k=%d bias=%g head=%u seed=%llu train=%lld "
            "test=%lld truth_test_logloss=%.6f truth_test_auc=%.6f truth_train_logloss=%.6f "
            "train_ctr=%.4f test_ctr=%.4f decay=%g\n",
            ps_ctr_model_name(c->model), c->fields, c->vocab, c->zipf, g->c.k, c->bias, c->head,
            (unsigned long long)c->seed, train, test, res->test_logloss, res->test_auc,
            res->train_logloss, res->train_ctr, res->test_ctr, g->c.decay);
    if (fclose(f) != 0) {
        seterr(err, errlen, "%s: write failed", path);
        goto out;
    }
    rc = 0;
out:
    out_close(&o); /* frees the buffer of a failed open too */
    ps_metrics_free(&met);
    ps_ctr_gen_free(g);
    return rc;
}
