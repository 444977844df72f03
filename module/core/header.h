/* header.h -- the scalar part of a saved ps-tensor: what the RDB value and
 * PS._RESTORE HEADER (the first command of an AOF rewrite) carry before the
 * arrays. Both paths read it field by field from PS_HEADER_FIELDS, validate it
 * with PSHeader_Check and build the tensor with PSHeader_ToTensor, so they
 * accept and produce the same values.
 *
 * Pure core: no Redis calls. */

#ifndef PS_HEADER_H
#define PS_HEADER_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "encver.h"
#include "tensor.h"

typedef struct PSHeader {
    uint64_t ndim;
    uint64_t dims[PS_MAX_DIMS];
    uint64_t version, optim;
    PSHyper h;
    uint64_t step;
    double b1pow, b2pow;
    int64_t maxstale;
    uint64_t policy, sync_n;
    int64_t sync_timeout_ms;
    uint64_t dedup_max, max_snapshots, round_count;
    uint64_t acc_count, acc_seq, pend_count; /* ACCUM tensors (PSAccum) */
    uint64_t acc_max_backlog, pend_parts, pend_done; /* from PS_ENCVER_ACCUM_ROUNDS */
    uint64_t acc_takes, acc_rounds, acc_forwarded, acc_round_max, acc_round_min;
} PSHeader;

/* The fields after ndim and the dims, in saved order. Expand it with
 * PS_HDR_X(kind, member, since) defined: 'kind' u (uint64_t), s (int64_t) or
 * d (double); 'since' the first encoding version that saves the field (an
 * older value leaves it at its PSHeader_Init default). The hyper-parameters
 * come from hparams.h, in their place after 'optim'. */
#define PS_HDR_HP(K, f, dflt, r, s) PS_HDR_X(d, h.f, s)
#define PS_HEADER_FIELDS                                                                       \
    PS_HDR_X(u, version, PS_ENCVER_FIRST) PS_HDR_X(u, optim, PS_ENCVER_FIRST)                  \
    PS_HYPERPARAMS(PS_HDR_HP)                                                                  \
    PS_HDR_X(u, step, PS_ENCVER_FIRST) PS_HDR_X(d, b1pow, PS_ENCVER_FIRST)                     \
    PS_HDR_X(d, b2pow, PS_ENCVER_FIRST) PS_HDR_X(s, maxstale, PS_ENCVER_FIRST)                 \
    PS_HDR_X(u, policy, PS_ENCVER_FIRST) PS_HDR_X(u, sync_n, PS_ENCVER_FIRST)                  \
    PS_HDR_X(s, sync_timeout_ms, PS_ENCVER_FIRST) PS_HDR_X(u, dedup_max, PS_ENCVER_FIRST)      \
    PS_HDR_X(u, max_snapshots, PS_ENCVER_FIRST) PS_HDR_X(u, round_count, PS_ENCVER_FIRST)      \
    PS_HDR_X(u, acc_count, PS_ENCVER_ACCUM) PS_HDR_X(u, acc_seq, PS_ENCVER_ACCUM)              \
    PS_HDR_X(u, pend_count, PS_ENCVER_ACCUM)                                                   \
    PS_HDR_X(u, acc_max_backlog, PS_ENCVER_ACCUM_ROUNDS)                                       \
    PS_HDR_X(u, pend_parts, PS_ENCVER_ACCUM_ROUNDS) PS_HDR_X(u, pend_done, PS_ENCVER_ACCUM_ROUNDS) \
    PS_HDR_X(u, acc_takes, PS_ENCVER_ACCUM_ROUNDS) PS_HDR_X(u, acc_rounds, PS_ENCVER_ACCUM_ROUNDS) \
    PS_HDR_X(u, acc_forwarded, PS_ENCVER_ACCUM_ROUNDS)                                         \
    PS_HDR_X(u, acc_round_max, PS_ENCVER_ACCUM_ROUNDS)                                         \
    PS_HDR_X(u, acc_round_min, PS_ENCVER_ACCUM_ROUNDS)

/* Scalars of the newest layout, and words of the largest encoded header. */
#define PS_HDR_X(k, f, s) +1
enum { PS_HEADER_SCALARS = 0 PS_HEADER_FIELDS };
#undef PS_HDR_X
#define PS_HEADER_MAX_WORDS (1 + PS_MAX_DIMS + PS_HEADER_SCALARS)

/* Number of scalars an encoding version saves. */
size_t PSHeader_Scalars(int encver);

/* Upper bounds of a loaded value, checked before anything is allocated
 * (they are the largest values the ps.* configs and commands allow). */
#define PS_LOAD_MAX_DEDUP (1u << 20)
#define PS_LOAD_MAX_SNAPSHOTS 4096u

/* Zeroes 'hd' and sets the fields an older encoding lacks to their defaults. */
void PSHeader_Init(PSHeader *hd);

/* Whether a saved running product beta^t is in [0, 1]. */
static inline int PSHeader_ValidPow(double x) { return isfinite(x) && x >= 0 && x <= 1; }

/* Returns NULL when the header is valid (and sets *n), or why it is not. */
const char *PSHeader_Check(const PSHeader *hd, uint64_t *n);

/* The tensor a checked header describes: its settings, version and
 * optimizer step. With 'zero_arrays' its values, optimizer state, open
 * round (if round_count) and ACCUM sum and pending take (if acc_count,
 * pend_count) are allocated and zeroed; otherwise they are left NULL for the
 * caller to load (round_count, acc.count and acc.pend_count then stay 0
 * until it does).
 * NULL on OOM. */
PSTensor *PSHeader_ToTensor(const PSHeader *hd, uint64_t n, int zero_arrays);

/* The header of a tensor (what its RDB value and AOF rewrite save). */
void PSHeader_FromTensor(const PSTensor *t, PSHeader *hd);

/* Header <-> blob of 8-byte little-endian words (PS._RESTORE HEADER).
 * Encode writes the newest layout into 'out' (PS_HEADER_MAX_WORDS words) and
 * returns the word count. Decode reads the layout of 'encver'; 0 on success,
 * -1 when the length does not match it. */
size_t PSHeader_Encode(const PSHeader *hd, uint64_t *out);
int PSHeader_Decode(const unsigned char *p, size_t len, int encver, PSHeader *hd);

/* The arrays a PS._RESTORE CHUNK may fill (snapshot ones with an index). */
enum {
    PS_RESTORE_DATA = 0,
    PS_RESTORE_S0,
    PS_RESTORE_S1,
    PS_RESTORE_ROUND,
    PS_RESTORE_SNAPDATA,
    PS_RESTORE_SNAPS0,
    PS_RESTORE_SNAPS1,
    PS_RESTORE_ACCSUM,  /* ACCUM tensors: the sum (header acc_count > 0) */
    PS_RESTORE_PENDING, /* and the pending take (header pend_count > 0) */
    PS_RESTORE_RINGBASE, /* a ring-tracked tensor's base (ring.h; after PS._RESTORE RING) */
    PS_RESTORE_TARGETS
};

/* Copies 'len' bytes of little-endian floats into array 'target' (of
 * snapshot 'snap' for the SNAP* targets) at float offset 'off'. The array
 * must exist, be held by nobody else and have room. Returns PST_OK, or
 * PST_ERR_RANGE with nothing changed. */
int PSTensor_RestoreChunk(PSTensor *t, int target, uint64_t snap, uint64_t off, const void *p,
                          size_t len);

#endif /* PS_HEADER_H */
