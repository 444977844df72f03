/* ps_limits.h -- what a pull may cost (issue 11 item 1). Pure core: the
 * PS.PULL handler asks before it allocates anything, and the fuzz harness
 * checks the bound holds for any request. */

#ifndef PS_LIMITS_H
#define PS_LIMITS_H

#include <stddef.h>
#include <stdint.h>

#include "tensor.h"

enum {
    PS_PULL_OK = 0,
    PS_PULL_TOO_MANY_ROWS, /* ROWS (repeats count) beyond dim 0 */
    PS_PULL_TOO_BIG        /* more than max_bytes as float32 */
};

/* What one element of a pull costs: 4 bytes (the float32 gathered, and at
 * most that once encoded), or for FORMAT VALUES the RESP number it becomes
 * (up to ~25 bytes with its header: counted as 32). */
#define PS_PULL_ELEM_BYTES 4
#define PS_PULL_VALUE_BYTES 32

/* Elements a pull of 't' returns: the whole tensor (nrows 0) or 'nrows'
 * rows given in ROWS (a checked count). Sets *m and returns PS_PULL_OK
 * when the pull stays within at most dim 0 rows and 'max_bytes' at
 * 'elem_bytes' per element, so that it never costs more than a pull of the
 * whole tensor nor than the configured bound; otherwise returns why not. */
int ps_pull_size(const PSTensor *t, size_t nrows, uint64_t elem_bytes, uint64_t max_bytes,
                 uint64_t *m);

/* What a PS.SCORE of 'nsamples' samples with 'nids' features on a table
 * of dim 'dim' holds at once: the features' rows (4 * nids * dim bytes),
 * their values and FM's dim - 1 sums, and the reply (8 bytes per logit,
 * PS_PULL_VALUE_BYTES each with FORMAT VALUES). Sets *bytes (nids is at
 * most 2^24 and nsamples a blob's bytes / 4: no overflow) and returns
 * PS_PULL_OK when it is at most 'max_bytes', else PS_PULL_TOO_BIG. The
 * time is O(bytes) too: one pass over the rows. */
int ps_score_size(uint64_t nsamples, uint64_t nids, uint32_t dim, int values_reply,
                  uint64_t max_bytes, uint64_t *bytes);

/* The same for PS.SCORE MODEL MLP with 'fields' fields: the features' rows
 * (4 * nids * dim bytes), their values and field ids (4 + 4 per feature),
 * and the pooled reply, nsamples x fields x dim floats (4 bytes each,
 * PS_PULL_VALUE_BYTES each with FORMAT VALUES), which the handler also
 * zeroes and fills: the time is O(bytes). *bytes is UINT64_MAX when the
 * product does not fit 64 bits (then PS_PULL_TOO_BIG). */
int ps_score_pool_size(uint64_t nsamples, uint64_t nids, uint32_t dim, uint32_t fields,
                       int values_reply, uint64_t max_bytes, uint64_t *bytes);

#endif /* PS_LIMITS_H */
