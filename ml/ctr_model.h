/* ctr_model.h -- click-through-rate models on sparse batches: logistic
 * regression, factorization machine, embeddings + MLP.
 *
 * Every model has one embedding table whose rows hold 'dim' floats per
 * feature id (ps_ctr_row_dim) and a few dense tensors (ps_ctr_dense). A
 * training step is:
 *   1. ps_ctr_unique_build(): the distinct ids of the batch, in the order they
 *      first appear, and for every feature the index of its id in that list;
 *   2. the caller fetches those ids' rows (from a server or a local table)
 *      into one array, n_unique x dim, in that order;
 *   3. ps_ctr_grad(): forward, loss, and the gradient rows per unique id
 *      (same order and layout) plus the dense gradients.
 * Gradients are of the SUM of the per-sample loglosses over the batch (not
 * the mean): a row's gradient is the sum of its occurrences' contributions,
 * as per-example optimizers such as FTRL-Proximal expect.
 *
 * The models, with z the logit, p = sigmoid(z), x_j the feature values and
 * r_j the row of feature j's id:
 *   LR   dim 1      z = b + sum_j r_j[0] x_j
 *   FM   dim 1 + k  z = b + sum_j w_j x_j + 1/2 sum_f ((sum_j v_jf x_j)^2 - sum_j v_jf^2 x_j^2)
 *                   with w_j = r_j[0], v_j = r_j[1..k]; O(k * nnz) per batch
 *   MLP  dim d      input = per field f < fields the sum of x_j r_j over the
 *                   row's features of field f (an empty field is zeros), then
 *                   the row's dense features; hidden ReLU layers and a 2-class
 *                   softmax output (ml/nn.c), p = its class-1 probability.
 * A feature listed twice in a row counts twice (FM: it also pairs with
 * itself once, as two distinct features would).
 *
 * Pure core: no Redis, no sockets. All scratch is allocated once by
 * ps_ctr_init() for batches of at most max_batch rows. */
#ifndef PS_CTR_MODEL_H
#define PS_CTR_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "nn.h"
#include "sparse_data.h"

enum { PS_CTR_LR = 0, PS_CTR_FM, PS_CTR_MLP };

#define PS_CTR_MAX_K 1024       /* FM factors and MLP embedding dims */
#define PS_CTR_MAX_HIDDEN 8     /* hidden layers of the MLP */

typedef struct ps_ctr_config {
    int model;        /* PS_CTR_* */
    int k;            /* FM: factors per id */
    int emb_dim;      /* MLP: embedding dim d */
    int fields;       /* MLP: field slots of the input (features need field < fields) */
    int ndense;       /* MLP: dense features per row (batches must have this ndense) */
    int nhidden;      /* MLP: hidden layers */
    int hidden[PS_CTR_MAX_HIDDEN]; /* their widths */
    int max_batch;    /* most rows per call */
} ps_ctr_config;

/* The distinct ids of a batch. Start from {0}; memory is reused. */
typedef struct ps_ctr_unique {
    size_t n;          /* distinct ids */
    uint64_t *ids;     /* n ids in order of first appearance */
    uint32_t *slot;    /* per feature of the batch (nnz): its id's index in ids */
    size_t cap, slot_cap;
    uint32_t *tab;     /* open-addressing index: position + 1, 0 = empty */
    size_t tab_size;
} ps_ctr_unique;

/* Fills 'u' from batch 'b'. Returns 0, or -1 when out of memory. */
int ps_ctr_unique_build(ps_ctr_unique *u, const ps_sparse_batch *b);
void ps_ctr_unique_free(ps_ctr_unique *u);

typedef struct ps_ctr_model {
    ps_ctr_config c;
    int dim;          /* floats per table row */
    float bias, gbias; /* LR, FM: the bias and its gradient */
    ps_mlp mlp;       /* MLP: dense layers (W/b, gW/gb after ps_ctr_grad) */
    int in;           /* MLP input width: fields * emb_dim + ndense */
    float *x, *dx;    /* MLP: max_batch x in input and its gradient */
    int32_t *y;       /* MLP: labels as classes */
    float *p;         /* max_batch probabilities of the last call */
    double *s;        /* FM: k sums of one row */
} ps_ctr_model;

/* Parses "lr", "fm" or "mlp". Returns PS_CTR_* or -1. */
int ps_ctr_parse_model(const char *s);
const char *ps_ctr_model_name(int model);

/* Checks 'c' and allocates 'm': bias 0, MLP weights He-initialised from
 * 'seed' (ps_mlp_init_he). Returns 0, or -1 with a message in 'err' (m then
 * owns nothing). */
int ps_ctr_init(ps_ctr_model *m, const ps_ctr_config *c, uint64_t seed, char *err, size_t errlen);
void ps_ctr_free(ps_ctr_model *m);

/* Floats per embedding-table row. */
static inline int ps_ctr_row_dim(const ps_ctr_model *m)
{
    return m->dim;
}

/* The dense tensors: count, and tensor 'i' (its name "bias" or "W<l>"/"b<l>",
 * values and gradient, 'len' floats each). */
int ps_ctr_dense_count(const ps_ctr_model *m);
float *ps_ctr_dense(ps_ctr_model *m, int i, size_t *len, float **grad, const char **name);

/* Training step on batch 'b' whose distinct ids are 'u' and their rows
 * 'rows' (u->n x dim). Writes the gradient rows 'grows' (u->n x dim) and the
 * dense gradients, stores the probabilities in m->p, and sets *loss_sum to
 * the summed logloss. An empty batch gives zero gradients and loss 0.
 * Returns 0, or -1 with a message in 'err' (more than max_batch rows, a
 * field or dense width the MLP does not have). */
int ps_ctr_grad(ps_ctr_model *m, const ps_sparse_batch *b, const ps_ctr_unique *u,
                const float *rows, float *grows, double *loss_sum, char *err, size_t errlen);

/* Forward only: probabilities of the rows of 'b' into m->p. Returns 0, or
 * -1 with a message in 'err' as ps_ctr_grad. */
int ps_ctr_predict(ps_ctr_model *m, const ps_sparse_batch *b, const ps_ctr_unique *u,
                   const float *rows, char *err, size_t errlen);

#endif
