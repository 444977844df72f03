/* ctr_gen.h -- synthetic CTR data from a planted model (the ps-gen-ctr tool, tools/ps-gen-ctr.c).
 *
 * A sample has one feature per field f < fields: a rank r in 1..vocab drawn
 * with P(r) proportional to r^-zipf, whose id is ps_sparse_id_u64(f, r) (the
 * field in the top bits, so libsvm readers recover it with field_bits 8).
 * The planted truth is a logistic regression or a factorization machine
 * whose parameters are pure functions of (seed, id): w(id) ~ N(0, sw^2),
 * v(id) ~ N(0, sv^2 I_k), with sw = 1/sqrt(fields) and
 * sv = (fields (fields - 1) / 2 * k)^(-1/4), so the linear and the pairwise
 * parts of the logit each have variance about 1, plus a bias. With a head
 * H > 0, an id of rank r > H has its parameters scaled by (H / r)^P (P the
 * decay, 1 by default): rare ids
 * carry little signal, as in real click logs, so that a trainer that sees
 * each of them only a few times can still approach the truth. All scales are
 * then divided by sqrt(E[s^2]), the mean squared scale of a drawn id, so the
 * two parts keep variance about 1 (the truth's AUC does not sink with H). The label is
 * drawn from Bernoulli(sigmoid(logit)). The truth's own logloss and AUC on
 * the test samples are the ceiling a trainer can reach.
 *
 * Drift (drift_every > 0): time is cut into periods of drift_every
 * training samples; at the start of every period p >= 1 a fraction
 * drift_frac of all ids, chosen by a hash of (seed, id, p), get new
 * parameters drawn from (seed, id, p): their effect on the click changes at
 * a known moment, as a user's taste or an ad's appeal does. A model frozen
 * after the first period then loses accuracy period by period; one that
 * keeps learning does not (make demo-online). Without drift every output
 * byte is what it was before drift existed.
 *
 * Everything is a function of the configuration and the seed (common/rng.h
 * PSRng, own arithmetic for the normals): the same command writes the same
 * bytes. Pure core apart from ps_ctr_gen_write's files. */
#ifndef PS_CTR_GEN_H
#define PS_CTR_GEN_H

#include <stddef.h>
#include <stdint.h>

#include "rng.h"

#define PS_GEN_MAX_VOCAB (1u << 24)
#define PS_GEN_MAX_K 64

typedef struct ps_ctr_gen_config {
    int model;        /* PS_CTR_LR or PS_CTR_FM (ctr_model.h) */
    int fields;       /* 1..PS_SPARSE_MAX_FIELDS - 1 */
    uint32_t vocab;   /* ids per field, 1..PS_GEN_MAX_VOCAB */
    double zipf;      /* exponent >= 0 (0 = uniform) */
    int k;            /* FM factors, 1..PS_GEN_MAX_K */
    double bias;      /* the truth's bias */
    uint32_t head;    /* 0, or ranks above it get parameters scaled by (head / rank)^decay */
    double decay;     /* 0..16, 0 meaning 1 */
    uint64_t seed;
    long long drift_every; /* 0: no drift; else training samples per period */
    double drift_frac;     /* 0..1: share of ids given new parameters each period */
} ps_ctr_gen_config;

typedef struct ps_ctr_gen ps_ctr_gen;

/* Checks 'c' and builds a generator (the Zipf table: 8 bytes per vocab
 * entry). Returns NULL with a message in 'err'. */
ps_ctr_gen *ps_ctr_gen_new(const ps_ctr_gen_config *c, char *err, size_t errlen);
void ps_ctr_gen_free(ps_ctr_gen *g);

/* Draws one sample's ranks from 'rng' into ranks[0..fields-1] and their ids
 * into ids[0..fields-1], its label into *label, and returns the truth's
 * probability of label 1. */
double ps_ctr_gen_sample(ps_ctr_gen *g, PSRng *rng, uint32_t *ranks, uint64_t *ids, int *label);

/* The period whose parameters the truth uses from now on (0 first). */
void ps_ctr_gen_set_period(ps_ctr_gen *g, uint32_t period);

/* The truth's logit for one feature per field f < n of rank ranks[f] (id
 * ps_sparse_id_u64(f, rank), value 1). */
double ps_ctr_gen_logit(const ps_ctr_gen *g, const uint32_t *ranks, int n);

/* The truth's metrics over what ps_ctr_gen_write wrote. */
typedef struct ps_ctr_gen_result {
    double train_logloss, test_logloss, test_auc;
    double train_ctr, test_ctr; /* fraction of label 1 */
} ps_ctr_gen_result;

/* Writes 'train' samples to PREFIX.train.libsvm and then 'test' samples to
 * PREFIX.test.libsvm (".gz" appended and gzip-compressed when 'gz'), both
 * from one PSRng stream seeded with c->seed, and the truth's metrics line
 * to PREFIX.truth. With drift the two files are written period by period
 * (both in time order: period p's drift_every training samples, and its
 * share of the test samples, test * (p + 1) / periods - test * p / periods),
 * and PREFIX.truth gets one more line per period:
 *   PERIOD p=P train_first=I train_count=N test_first=J test_count=M truth_test_auc=A
 * Returns 0, or -1 with a message in 'err'. */
int ps_ctr_gen_write(const ps_ctr_gen_config *c, long long train, long long test,
                     const char *prefix, int gz, ps_ctr_gen_result *res, char *err,
                     size_t errlen);

#endif
