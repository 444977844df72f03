/* metrics.h -- evaluation metrics of binary classifiers (CTR models):
 * logloss and exact ROC AUC.
 *
 * Pure core: no Redis, no sockets. A ps_metrics accumulates (score, label)
 * pairs of a test pass and computes both metrics at the end; the scores are
 * predicted probabilities of label 1. */
#ifndef PS_METRICS_H
#define PS_METRICS_H

#include <stddef.h>

/* Probabilities are clipped to [PS_LOGLOSS_EPS, 1 - PS_LOGLOSS_EPS] before
 * the logarithm, so a confident wrong answer costs a large finite loss. */
#define PS_LOGLOSS_EPS 1e-15

typedef struct ps_metrics {
    size_t n, cap;
    double *score; /* n predicted probabilities */
    unsigned char *label; /* n labels, 0 or 1 */
    double loss_sum;  /* sum of the per-sample loglosses */
} ps_metrics;

/* Logloss of one prediction 'p' of label 'y' (0 or 1): -log(p) or -log(1-p),
 * with p clipped as above. */
double ps_logloss1(double p, int y);

/* Exact AUC of 'n' scores and labels (nonzero = positive): the probability
 * that a random positive scores above a random negative, ties counting one
 * half, computed from the ranks of the sorted scores (tied scores share
 * their average rank). O(n log n) time, O(n) scratch memory. Returns NAN
 * when there is no positive or no negative (or out of memory). */
double ps_auc(const double *score, const unsigned char *label, size_t n);

/* Empties 'm' (keeps its memory). ps_metrics starts zeroed ({0}). */
void ps_metrics_reset(ps_metrics *m);

/* Appends one prediction. Returns 0, or -1 when out of memory. */
int ps_metrics_add(ps_metrics *m, double p, int y);

/* Mean logloss of what was added (0 when empty) and its AUC (NAN when a
 * class is missing). */
double ps_metrics_logloss(const ps_metrics *m);
double ps_metrics_auc(const ps_metrics *m);

/* Frees the arrays and zeroes 'm'. */
void ps_metrics_free(ps_metrics *m);

#endif
