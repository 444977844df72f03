/* ring_table_int.h -- what ring_table.c (the state and its operations) and
 * ring_table_ser.c (its byte layout) share: allocation, origin names, the
 * forward FIFO and the base map's index. Internal to module/core. */

#ifndef PS_RING_TABLE_INT_H
#define PS_RING_TABLE_INT_H

#include <stddef.h>
#include <stdint.h>

#include "ring_table.h"

void *pst_alloc(size_t n);
void pst_free(void *p);
int pst_name_eq(const char *a, uint32_t alen, const char *b, size_t blen);
void pst_set_name(char *dst, uint32_t *dlen, const char *src, size_t len);
/* A delta of 'rows' rows of 'dim' floats (one allocation), or NULL. */
PSRingRows *pst_rows_new(const char *origin, size_t len, uint64_t seq, uint64_t hops,
                         uint64_t rows, uint32_t dim);
/* Appends 'd' to the forward FIFO (its bytes counted). */
void pst_fwd_push(PSRingTable *r, PSRingRows *d);
/* Index bucket holding the position of 'id' in the map, or the empty bucket
 * ending its probe run. */
uint64_t pst_map_bucket(const PSRingTable *r, uint64_t id);
/* Room for 'extra' more map rows. PS_RING_OK or PS_RING_EOOM. */
int pst_map_reserve(PSRingTable *r, uint64_t extra);

#endif /* PS_RING_TABLE_INT_H */
