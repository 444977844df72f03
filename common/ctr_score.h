/* ctr_score.h -- the logit of the sparse linear CTR models (LR, FM) and the
 * pooled embedding input of the MLP: the kernels the trainer's forward pass
 * (ml/ctr_model.c) and the module's PS.SCORE (module/cmd_score.c) both call,
 * so a served score has the bits of the trainer's on the same parameters.
 *
 * A sample's features j = begin .. end-1 have value x_j (float32) and a row
 * r_j of 'dim' float32s: r_j[0] the linear weight w_j, r_j[1..k] its k =
 * dim - 1 factors v_j (k = 0 is LR). The logit is
 *   z = b + sum_j w_j x_j + 1/2 (sum_f s_f^2 - sum_j sum_f (v_jf x_j)^2),
 *   s_f = sum_j v_jf x_j,
 * computed in double in exactly this order (docs/commands.md "PS.SCORE"):
 *   z = (double)b; sq = 0; s_f = 0
 *   for each feature j in order: z += (double)w_j * x_j;
 *       for f in order: vx = (double)v_jf * x_j; s_f += vx; sq += vx * vx
 *   pair = 0; for f in order: pair += s_f * s_f
 *   return z + 0.5 * (pair - sq)
 * No fused multiply-add (fpguard.h), no reassociation, no BLAS.
 *
 * Pure: no allocation; the caller passes the k doubles of scratch 's', which
 * hold the s_f on return (the trainer's backward pass reads them). */
#ifndef PS_CTR_SCORE_H
#define PS_CTR_SCORE_H

#include <stddef.h>
#include <stdint.h>

/* The models PS.SCORE serves; LR needs rows of dim 1, FM of dim >= 2, MLP
 * (its embedding part: the pooled input) any dim. */
enum { PS_SCORE_LR = 0, PS_SCORE_FM = 1, PS_SCORE_MLP = 2 };

/* Most fields an MLP input pools (the trainer's PS_SPARSE_MAX_FIELDS, which
 * ml/ctr_model.c asserts equal). */
#define PS_CTR_POOL_MAX_FIELDS 256

/* "lr" / "fm" / "mlp" (any case, 'len' bytes) -> PS_SCORE_*, or -1. */
int ps_ctr_score_model_parse(const char *s, size_t len);

/* The logit of one sample. Feature j's row is rows + slot[j] * dim (slot
 * NULL: rows + j * dim), its value val[j] (val NULL: 1). 's' holds dim - 1
 * doubles (may be NULL when dim is 1). */
double ps_ctr_score_logit(float bias, const float *rows, uint32_t dim, const uint32_t *slot,
                          const float *val, size_t begin, size_t end, double *s);

/* The MLP's pooled embedding input of one sample: 'fields' x 'dim' float32s
 * into 'out', field f's slot the sum of x_j r_j over the sample's features j
 * = begin .. end-1 of field[j] == f (a field with no feature is zeros). Row
 * r_j is rows + slot[j] * dim (slot NULL: rows + j * dim), x_j val[j] (val
 * NULL: 1). In float32, in exactly this order (docs/commands.md "PS.SCORE"):
 *   out = 0
 *   for each feature j in order: for t < dim: out[field_j][t] += x_j * r_j[t]
 * (one float32 multiply rounded, then one float32 add rounded; no fused
 * multiply-add). Every field[j] must be < fields (the caller checks). */
void ps_ctr_pool(float *out, uint32_t fields, uint32_t dim, const float *rows,
                 const uint32_t *slot, const uint32_t *field, const float *val, size_t begin,
                 size_t end);

#endif /* PS_CTR_SCORE_H */
