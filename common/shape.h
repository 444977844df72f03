/* shape.h -- the one shape validator, shared by commands and RDB loading.
 *
 * Pure C, no Redis. A tensor is float32, so its byte size is 4 * elements. */
#ifndef PS_SHAPE_H
#define PS_SHAPE_H

#include <stdint.h>

#define PS_MAX_DIMS 8           /* most dimensions a tensor may have */
#define PS_ELEM_BYTES 4         /* bytes per stored element (float32) */

/* Validate a shape of 'ndim' dimensions 'dims' against 'max_bytes' (0 = no
 * limit): ndim in 1..PS_MAX_DIMS, every dim >= 1, the element count and the
 * byte size (4 bytes per element) computed without uint64 overflow, and the
 * byte size <= max_bytes. On success stores the element count in '*nelem'
 * and returns 0. On failure returns -1, leaves '*nelem' alone and points
 * '*err' (when not NULL) at a lower-case phrase without an error code, e.g.
 * "ndim must be 1..8" or "dimension 2 is 0" (dimensions are counted from 1).
 * Phrases with numbers live in a thread-local buffer that stays valid until
 * the next failing call on the same thread; copy it before calling again. */
int ps_shape_check(uint32_t ndim, const uint64_t *dims, uint64_t max_bytes,
                   uint64_t *nelem, const char **err);

#endif /* PS_SHAPE_H */
