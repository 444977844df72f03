/* nn.h -- multi-layer perceptron core of the redis-ps worker.
 *
 * A fully connected network with ReLU hidden layers and a softmax
 * cross-entropy output, forward and backward on OpenBLAS cblas_sgemm.
 * This is a pure core: it knows nothing of Redis, sockets or the parameter
 * server.  The worker copies W[l]/b[l] from the server tensors "W<l>"/"b<l>"
 * (W<l> has SHAPE sizes[l+1] sizes[l]), calls ps_mlp_grad() and pushes
 * gW[l]/gb[l] back.
 *
 * All memory (parameters, gradients and the scratch of forward/backward) is
 * allocated once by ps_mlp_init(); training steps never allocate. */
#ifndef PS_NN_H
#define PS_NN_H

#include <stddef.h>
#include <stdint.h>

#include "rng.h" /* PSRng: common/, shared with the module's INIT */

#define PS_MLP_MAX_SIZE (1 << 20)   /* largest layer width ps_parse_layers accepts */
#define PS_MLP_MAX_BATCH (1 << 20)  /* largest max_batch ps_mlp_init accepts */

typedef struct ps_mlp {
    int nlayers;      /* weight layers = nsizes - 1 */
    int *sizes;       /* nsizes entries: input, hidden..., classes */
    float **W;        /* W[l]: sizes[l+1] x sizes[l], row-major */
    float **b;        /* b[l]: sizes[l+1] */
    float **gW, **gb; /* mean gradient over the last batch, same shapes */
    int max_batch;    /* most rows one ps_mlp_grad() call may take */
    /* Scratch, max_batch rows each, reused by every step. */
    float **act;      /* act[l] (l = 1..nlayers): output of layer l-1; act[nlayers]
                       * holds the logits, then the softmax probabilities */
    float **delta;    /* delta[l] (l = 1..nlayers): dLoss/d(pre-activation of
                       * layer l-1) for the rows of the batch */
} ps_mlp;

/* Sets up 'm' for the layer widths sizes[0..nsizes-1] (input, hidden...,
 * classes) and batches of at most 'max_batch' rows: allocates parameters,
 * gradients and scratch, all zeroed.  Returns 0, or -1 with a message in
 * 'err' (nsizes < 2, a width outside 1..PS_MLP_MAX_SIZE, max_batch outside
 * 1..PS_MLP_MAX_BATCH, out of memory); on failure 'm' owns nothing and
 * ps_mlp_free() on it is a no-op.  The caller owns 'm' and frees it with
 * ps_mlp_free(). */
int ps_mlp_init(ps_mlp *m, const int *sizes, int nsizes, int max_batch, char *err, size_t errlen);

/* Releases everything ps_mlp_init() allocated and zeroes 'm'.  Safe on a
 * zeroed struct and after a failed init; safe to call twice. */
void ps_mlp_free(ps_mlp *m);

/* He initialisation: W[l] ~ N(0, 2 / sizes[l]) drawn, layer after layer in
 * row-major order, from a PSRng seeded with 'seed' (ps_rng_normal, as the
 * module's INIT HE; same seed, same values), b[l] = 0. */
void ps_mlp_init_he(ps_mlp *m, uint64_t seed);

/* Forward and backward pass on the 'batch' rows of 'x' (batch x sizes[0],
 * row-major) with class labels 'y'.  Writes gW/gb = gradient of the MEAN
 * softmax cross-entropy loss over the batch and returns that mean loss.
 * Returns NAN and leaves gW/gb untouched when batch is outside
 * 1..max_batch or a label is outside 0..classes-1. */
float ps_mlp_grad(ps_mlp *m, const float *x, const int32_t *y, int batch);

/* Mean softmax cross-entropy loss and accuracy (argmax, lowest index on ties)
 * of the current parameters on 'n' rows of 'x'/'y', computed in chunks of
 * max_batch rows; gW/gb are not touched.  Rows with a label outside
 * 0..classes-1 count as wrong and add nothing to the loss.  Writes 0 to both
 * when n <= 0.  Either output pointer may be NULL. */
void ps_mlp_evaluate(ps_mlp *m, const float *x, const int32_t *y, int n, double *loss, double *acc);

/* Class scores of the current parameters for 'batch' rows of 'x'
 * (1..max_batch): returns a pointer to batch x classes softmax
 * probabilities inside m's scratch (valid until the next call on 'm'), or
 * NULL when batch is out of range. */
const float *ps_mlp_predict(ps_mlp *m, const float *x, int batch);

/* Plain SGD step on the local copy: W -= lr * gW, b -= lr * gb. */
void ps_mlp_sgd(ps_mlp *m, float lr);

/* Number of floats in W[l] (sizes[l+1] * sizes[l]) and in all of W and b. */
size_t ps_mlp_layer_params(const ps_mlp *m, int l);
size_t ps_mlp_num_params(const ps_mlp *m);

/* Parses a comma-separated list of layer widths such as "784,256,10" into
 * sizes[0..max-1].  Each width is a plain decimal number 1..PS_MLP_MAX_SIZE
 * (no sign, spaces or empty items); at least 2 and at most 'max' widths.
 * Returns the count, or -1 with a message in 'err'. */
int ps_parse_layers(const char *s, int *sizes, int max, char *err, size_t errlen);

#endif
