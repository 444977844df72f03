/* accum.h -- ACCUM tensors, the local side of a relay (ps-relay): pushes are
 * summed instead of stepped, and the sum is handed to the relay through a
 * pending slot that survives until the relay says its upstream push was
 * acknowledged.
 *
 *   push     sum += g * f, count += 1    (PSTensor_Push, through the same
 *                                         dedup / staleness / finite checks);
 *            refused (PST_ERR_BACKLOG, nothing changes) while the tensor
 *            holds max_backlog un-forwarded gradients: backpressure on the
 *            workers while their relay is down or behind.
 *   take     pending = (count, sum) split into parts = ceil(count / maxround)
 *            upstream pushes (1 without a maxround), with the seqs
 *            first .. first + parts - 1, first = max(seq + 1, floor); sum and
 *            count start again. If a pending slot exists, nothing changes and
 *            its next unacknowledged part is answered again (idempotent).
 *   ack seq  acknowledges the part of seq 'seq' when it is the next one; the
 *            slot is dropped with its last part. Each acknowledged part
 *            counts in the persisted round counters (takes, rounds,
 *            forwarded, round_max, round_min).
 *   mirror   values and version := the upstream's (never backwards).
 *
 * Part j of a take of 'count' gradients in 'parts' parts carries
 * count / parts gradients, one more for the first count % parts parts; the
 * relay sends the pending sum scaled by part / count (mean: by 1 / count),
 * so an upstream step never carries more than maxround gradients and the
 * parts add up to the whole sum.
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
 * and counts one push. Returns PST_OK, PST_ERR_OOM, PST_ERR_BACKLOG when
 * PSAccum_Backlog(t) >= max_backlog (> 0), or PST_ERR_NONFINITE when the sum
 * would overflow float32; nothing changes on failure. */
int PSAccum_Add(PSTensor *t, const unsigned char *g, const unsigned char *rows, size_t nrows,
                float f);

/* Take outcomes. */
enum {
    PS_TAKE_NEW = 0, /* a pending slot was made from the sum */
    PS_TAKE_AGAIN,   /* the existing pending slot is answered again */
    PS_TAKE_SHORT    /* no pending slot and fewer than 'mincount' pushes: nothing */
};

/* Makes the sum pending when at least 'mincount' (>= 1) pushes are summed
 * and nothing is pending, split into ceil(count / maxround) parts (one when
 * 'maxround' is 0 or count <= maxround), the first under seq
 * max(seq + 1, seqfloor). Returns PS_TAKE_*; on NEW and AGAIN the next part
 * is PSAccum_NextPart(). */
int PSAccum_Take(PSTensor *t, uint64_t mincount, uint64_t seqfloor, uint64_t maxround);

/* The next unacknowledged part of the pending slot: its seq and the
 * gradients it carries. 0, or -1 when nothing is pending. */
int PSAccum_NextPart(const PSTensor *t, uint64_t *seq, uint64_t *count);

/* Gradients in parts 0 .. j-1 of a take of 'count' in 'parts' parts. */
uint64_t PSAccum_PartsBefore(uint64_t count, uint64_t parts, uint64_t j);

/* Gradients the tensor holds that are not acknowledged upstream yet: the
 * sum's count plus the pending parts not acknowledged. */
uint64_t PSAccum_Backlog(const PSTensor *t);

/* Acknowledges the next part if its seq is 'seq' (the slot is dropped with
 * its last part). Returns 1 when acknowledged, 0 otherwise (a repeated
 * acknowledgement, or another seq). */
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
