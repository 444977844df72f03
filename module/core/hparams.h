/* hparams.h -- the optimizer hyper-parameters, written once.
 *
 * Every place that lists them is generated from PS_HYPERPARAMS: the PSHyper
 * struct and its validation (optim.[ch]), the defaults of a new tensor
 * (tensor.c), the PS.CREATE / PS.CONFIG options, their COMMAND DOCS entries,
 * the spelled-out PS.CREATE that replicas and the AOF receive, PS.INFO
 * (cmd_tensor.c), the RDB value and the PS._RESTORE HEADER blob (type.c).
 * Adding one (FTRL's alpha/beta/l1/l2, ...) is one X line here, appended at
 * the end, with 'since' set to a new encoding version in encver.h; values
 * saved by an older version load with the default. The kernels that use it
 * and the tests change too.
 *
 * X(KEYWORD, field, default, range, since)
 *   KEYWORD  the PS.CREATE / PS.CONFIG option; PS.INFO prints 'field'
 *   field    the PSHyper member (a double, persisted as such)
 *   default  value of a new tensor (LR's default is ps.default-lr)
 *   range    PS_HP_<range> class that ps_optim_check() enforces
 *   since    first PS_ENCVER_* that saves it (RDB and PS._RESTORE HEADER)
 *
 * Pure: no Redis header. */

#ifndef PS_HPARAMS_H
#define PS_HPARAMS_H

#include "encver.h"

/* Validity classes ('range' names one without the PS_HP_ prefix). Every
 * value must stay finite once rounded to float32, the precision the kernels
 * compute in. PS_HP_MSG_* is the error phrase after the keyword. */
#define PS_HP_NONNEG 0   /* finite, >= 0, <= FLT_MAX */
#define PS_HP_UNIT 1     /* in [0, 1) */
#define PS_HP_POSITIVE 2 /* finite, > 0, <= FLT_MAX, non-zero as a float32 */
#define PS_HP_MSG_NONNEG " must be a finite number >= 0"
#define PS_HP_MSG_UNIT " must be in [0, 1)"
#define PS_HP_MSG_POSITIVE " must be a finite number > 0 (and >= 1.4e-45, the smallest float32)"

#define PS_HYPERPARAMS(X)                                                         \
    X(LR, lr, 0.01, NONNEG, PS_ENCVER_FIRST)       /* learning rate */     \
    X(MOMENTUM, momentum, 0.9, UNIT, PS_ENCVER_FIRST) /* MOMENTUM/NESTEROV */ \
    X(BETA1, beta1, 0.9, UNIT, PS_ENCVER_FIRST)    /* ADAM(W) 1st moment */ \
    X(BETA2, beta2, 0.999, UNIT, PS_ENCVER_FIRST)  /* ADAM(W) 2nd; RMSPROP rho */ \
    X(EPS, eps, 1e-8, POSITIVE, PS_ENCVER_FIRST)   /* denominator term */  \
    X(WD, wd, 0.0, NONNEG, PS_ENCVER_FIRST)        /* weight decay */      \
    X(CLIPNORM, clipnorm, 0.0, NONNEG, PS_ENCVER_FIRST) /* 0 = off */

/* How many there are (sizes of the tables generated from the list). */
#define PS_HP_ONE(K, f, d, r, s) +1
enum { PS_HP_COUNT = 0 PS_HYPERPARAMS(PS_HP_ONE) };

#endif /* PS_HPARAMS_H */
