/* optim.h -- optimizer kernels: pure functions over float arrays.
 *
 * Nothing here knows about Redis. Every kernel has a fixed order of
 * operations written in the source and is compiled with -ffp-contract=off and
 * without -ffast-math, so the same inputs give the same bits on every
 * machine: that is what keeps a master, its replicas and an AOF replay
 * bit-identical. No libm transcendental is used on the update path (sqrt is
 * correctly rounded by IEEE 754, so it is allowed). */

#ifndef PS_OPTIM_H
#define PS_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "hparams.h"
#include "protocol.h"

/* The tensor optimizers: PS_OPT_<ID> for each row of PS_PROTO_TENSOR_OPTIMS
 * (common/protocol.h), in its order, which is the code a tensor's header
 * stores. PS_OPT_ACCUM is no optimizer: pushes are summed for a relay
 * (accum.h). */
typedef enum {
#define PS_OPT_ENUM_(ID) PS_OPT_##ID,
    PS_PROTO_TENSOR_OPTIMS(PS_OPT_ENUM_, PS_OPT_ENUM_)
#undef PS_OPT_ENUM_
    PS_OPT_COUNT
} PSOptimKind;

/* Hyper-parameters as the user set them (doubles, persisted as such): one
 * member per line of PS_HYPERPARAMS (hparams.h). */
typedef struct PSHyper {
#define PS_HP_MEMBER(K, f, d, r, s) double f;
    PS_HYPERPARAMS(PS_HP_MEMBER)
#undef PS_HP_MEMBER
} PSHyper;

/* Per-push coefficients, computed once by ps_optim_coef() and then used for
 * every element (and every row of a row-sparse push). */
typedef struct PSStepCoef {
    float lr;     /* effective rate: lr * scale / (1 + staleness) */
    float gscale; /* clipping factor applied to the raw gradient (1 = none) */
    float wd;     /* L2 coefficient added to the gradient (0 for ADAMW) */
    float mu;     /* momentum */
    float b1, omb1, b2, omb2; /* beta and 1 - beta */
    float eps;
    float step;   /* ADAM(W): lr / (1 - beta1^t) */
    float rbc2;   /* ADAM(W): 1 / sqrt(1 - beta2^t) */
    float decay;  /* ADAMW: 1 - lr * wd */
    int plain;    /* gscale == 1 and wd == 0: the gradient is used as is */
} PSStepCoef;

/* Name of an optimizer in lower case ("sgd", "adamw", ...). */
const char *ps_optim_name(int kind);

/* Parses an optimizer name case-insensitively; returns the kind or -1. */
int ps_optim_parse(const char *s, size_t len);

/* Number of float state arrays of the same length as the tensor that the
 * optimizer keeps (0 for SGD, 1 for momentum/adagrad/rmsprop, 2 for Adam). */
int ps_optim_nstate(int kind);

/* Validates hyper-parameters; returns NULL or a static phrase naming the bad one. */
const char *ps_optim_check(const PSHyper *h);

/* Fills 'c' for one push. 'lr_eff' is the learning rate after SCALE and
 * staleness scaling; 'gscale' the clipping factor; 'b1pow'/'b2pow' are the
 * running products beta^t already advanced for this step. */
void ps_optim_coef(int kind, const PSHyper *h, double lr_eff, double gscale, double b1pow,
                   double b2pow, PSStepCoef *c);

/* Applies one optimizer step to 'n' weights 'w' with gradient bytes 'g'
 * (n little-endian floats, any alignment: it may point straight into a
 * command argument) and state arrays s0/s1 (NULL when unused). */
void ps_optim_step(int kind, const PSStepCoef *c, float *w, float *s0, float *s1,
                   const unsigned char *g, size_t n);

/* Returns 1 when all n floats at 'g' (any alignment) are finite, 0 otherwise. */
int ps_all_finite(const unsigned char *g, size_t n);

/* Sum of squares of n floats at 'g' in double, accumulated in 8 interleaved
 * partial sums combined in a fixed order (deterministic and vectorizable).
 * A non-finite input makes the result non-finite. */
double ps_sum_squares(const unsigned char *g, size_t n);

#endif /* PS_OPTIM_H */
