/* encver.h -- the ps-tensor encoding versions, named by the feature that
 * introduced them (one per format change, never reused). The RDB value
 * carries one as its type encoding version; PS._RESTORE HEADER (the AOF
 * rewrite) carries one as its ENCVER token, so both paths share one ladder.
 * Readers accept every version from PS_ENCVER_FIRST to PS_ENCVER_LATEST and
 * branch on the named feature ("encver >= PS_ENCVER_DEDUP_WINDOW"), never on
 * a bare number.
 *
 * Pure: included by the cores (hparams.h says from which version each
 * hyper-parameter is saved) and by the glue. */

#ifndef PS_ENCVER_H
#define PS_ENCVER_H

#define PS_ENCVER_FIRST 1        /* the first format */
#define PS_ENCVER_DEDUP_WINDOW 2 /* each exactly-once entry carries its 64-seq window */
#define PS_ENCVER_SNAP_SHARING 3 /* a snapshot array shared with an earlier snapshot is
                                    saved once, as that snapshot's index */
#define PS_ENCVER_ACCUM 4        /* ACCUM tensors: the relay's sum, count, seq and
                                    pending take (header fields and two arrays) */
#define PS_ENCVER_ACCUM_ROUNDS 5 /* ACCUM tensors: MAXBACKLOG, a pending take split into
                                    parts, and the round counters (header fields) */
#define PS_ENCVER_RING 6         /* ring tracking (ring.h): after the snapshots, 0 for an
                                    untracked tensor, else 1 and the ring state; the
                                    header is unchanged */
#define PS_ENCVER_LATEST PS_ENCVER_RING

/* What PS._RESTORE HEADER without an ENCVER token means: the AOFs written
 * before the token existed (golden file python_tests/golden/aof-v0). */
#define PS_ENCVER_AOF_UNTAGGED PS_ENCVER_DEDUP_WINDOW

#endif /* PS_ENCVER_H */
