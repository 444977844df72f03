/* accum.h -- ACCUM tensors, the local side of a relay (ps-relay): pushes are
 * summed instead of stepped, and the sum is handed to the relay through a
 * pending slot that survives until the relay says its upstream push was
 * acknowledged.
 *
 *   push     sum += g * f, count += 1    (PSTensor_Push, through the same
 *                                         dedup / staleness / finite checks)
 *   take     pending = (seq', count, sum) with seq' = max(seq + 1, floor);
 *            sum and count start again. If a pending slot exists, nothing
 *            changes and the same slot is answered again (idempotent).
 *   ack seq  drops the pending slot when its seq is 'seq'.
 *   mirror   values and version := the upstream's (never backwards).
 *
 * Every operation is a function of the value and its arguments only, so
 * the commands replicate verbatim and replay identically from the AOF.
 *
 * Pure core: no Redis calls. */

#ifndef PS_ACCUM_H
#define PS_ACCUM_H

#include <stddef.h>
#include <stdint.h>

#include "tensor.h"

/* Adds 'f' times gradient 'g' (t->n floats, or 'nrows' rows of the row
 * length with 'rows' strictly increasing) to the sum of ACCUM tensor 't'
 * and counts one push. Returns PST_OK, PST_ERR_OOM, or PST_ERR_NONFINITE
 * when the sum would overflow float32; nothing changes on failure. */
int PSAccum_Add(PSTensor *t, const unsigned char *g, const unsigned char *rows, size_t nrows,
                float f);

/* Take outcomes. */
enum {
    PS_TAKE_NEW = 0, /* a pending slot was made from the sum */
    PS_TAKE_AGAIN,   /* the existing pending slot is answered again */
    PS_TAKE_SHORT    /* no pending slot and fewer than 'mincount' pushes: nothing */
};

/* Makes the sum pending under seq max(seq + 1, seqfloor) when at least
 * 'mincount' (>= 1) pushes are summed and nothing is pending. Returns
 * PS_TAKE_*; on NEW and AGAIN the slot is t->acc.{seq, pend_count, pend}. */
int PSAccum_Take(PSTensor *t, uint64_t mincount, uint64_t seqfloor);

/* Drops the pending slot if its seq is 'seq'. Returns 1 when dropped. */
int PSAccum_Ack(PSTensor *t, uint64_t seq);

/* Sets the values (t->n little-endian floats) and the version of the
 * upstream tensor when 'version' is newer than t->version, or equal with
 * other values. Returns 1 when something changed, 0 when not (an older or
 * identical state arrived late), -1 on OOM (nothing changed). */
int PSAccum_Mirror(PSTensor *t, uint64_t version, const unsigned char *bytes);

/* Releases the sum and the pending slot (PSTensor_Free). */
void PSAccum_Release(PSAccum *a);

/* 'dst' as a copy of 'src' (own buffers). Returns PST_OK or PST_ERR_OOM
 * (dst left empty). */
int PSAccum_Copy(PSAccum *dst, const PSAccum *src, uint64_t n);

#endif /* PS_ACCUM_H */
