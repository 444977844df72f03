/* metrics.c -- logloss and exact AUC (see metrics.h). */

#include "metrics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

double ps_logloss1(double p, int y)
{
    if (!(p >= PS_LOGLOSS_EPS)) p = PS_LOGLOSS_EPS; /* NaN lands here too */
    if (p > 1.0 - PS_LOGLOSS_EPS) p = 1.0 - PS_LOGLOSS_EPS;
    return y ? -log(p) : -log(1.0 - p);
}

/* Sort key of the AUC: a score and its label. */
typedef struct aucPair {
    double s;
    unsigned char y;
} aucPair;

static int auc_cmp(const void *a, const void *b)
{
    double x = ((const aucPair *)a)->s, y = ((const aucPair *)b)->s;
    return (x > y) - (x < y);
}

double ps_auc(const double *score, const unsigned char *label, size_t n)
{
    size_t npos = 0;
    for (size_t i = 0; i < n; i++) npos += label[i] != 0;
    size_t nneg = n - npos;
    if (npos == 0 || nneg == 0) return NAN;
    aucPair *p = malloc(n * sizeof(*p));
    if (p == NULL) return NAN;
    for (size_t i = 0; i < n; i++) {
        /* NaN scores would break the ordering: they rank lowest. */
        p[i].s = score[i] == score[i] ? score[i] : -INFINITY;
        p[i].y = label[i] != 0;
    }
    qsort(p, n, sizeof(*p), auc_cmp);
    /* Ranks are 1-based; a run of ties i..j-1 shares the rank (i+1+j)/2. */
    double rank_sum = 0.0;
    size_t i = 0;
    while (i < n) {
        size_t j = i + 1;
        while (j < n && p[j].s == p[i].s) j++;
        double avg = ((double)(i + 1) + (double)j) / 2.0;
        size_t pos = 0;
        for (size_t t = i; t < j; t++) pos += p[t].y;
        rank_sum += avg * (double)pos;
        i = j;
    }
    free(p);
    double np = (double)npos, nn = (double)nneg;
    return (rank_sum - np * (np + 1.0) / 2.0) / (np * nn);
}

void ps_metrics_reset(ps_metrics *m)
{
    m->n = 0;
    m->loss_sum = 0.0;
}

int ps_metrics_add(ps_metrics *m, double p, int y)
{
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 1024;
        double *s = realloc(m->score, cap * sizeof(*s));
        if (s == NULL) return -1;
        m->score = s;
        unsigned char *l = realloc(m->label, cap);
        if (l == NULL) return -1;
        m->label = l;
        m->cap = cap;
    }
    m->score[m->n] = p;
    m->label[m->n] = y != 0;
    m->n++;
    m->loss_sum += ps_logloss1(p, y != 0);
    return 0;
}

double ps_metrics_logloss(const ps_metrics *m)
{
    return m->n ? m->loss_sum / (double)m->n : 0.0;
}

double ps_metrics_auc(const ps_metrics *m)
{
    return ps_auc(m->score, m->label, m->n);
}

void ps_metrics_free(ps_metrics *m)
{
    free(m->score);
    free(m->label);
    memset(m, 0, sizeof(*m));
}
