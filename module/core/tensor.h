/* tensor.h -- the ps-tensor value: shape, data, version, optimizer state,
 * staleness policy, sync rounds, exactly-once table, snapshots, counters.
 *
 * Pure core: no Redis calls. Memory comes from the allocator installed with
 * PSTensor_SetAllocator() (the module installs RedisModule_TryAlloc so that
 * tensors count toward maxmemory and a failed allocation is an error, not an
 * abort). Every function that can fail returns a PS_* status and leaves the
 * tensor unchanged on failure. */

#ifndef PS_TENSOR_H
#define PS_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "dedup.h"
#include "optim.h"
#include "shape.h"

/* Status codes of tensor operations. */
enum {
    PST_OK = 0,
    PST_ERR_OOM,       /* allocation failed */
    PST_ERR_STALE,     /* staleness beyond MAXSTALENESS with POLICY REJECT */
    PST_ERR_NONFINITE, /* NaN or Inf in the gradient */
    PST_ERR_FUTURE,    /* VERSION newer than the tensor */
    PST_ERR_ROUND,     /* sync mode: push for an older round */
    PST_ERR_RANGE,     /* effective step size not representable in float32 */
    PST_DUPLICATE,     /* ID seq already applied: nothing done */
    PST_PENDING,       /* sync mode: gradient added to the open round */
    PST_ERR_BACKLOG    /* ACCUM tensor: MAXBACKLOG un-forwarded gradients held (retry later) */
};

enum { PS_POLICY_REJECT = 0, PS_POLICY_SCALE = 1 };

/* Staleness histogram buckets: 0, 1, 2, 3-4, 5-8, 9-16, 17-32, 33+. */
#define PS_STALE_BUCKETS 8

/* A reference-counted float array, shared between a tensor, its snapshots
 * and its copies until one of them writes (copy on write). */
typedef struct PSBuf {
    uint64_t refs;
    uint64_t n;
    float v[];
} PSBuf;

/* Optimizer state: step count, running bias-correction products, arrays. */
typedef struct PSOptState {
    uint64_t step;
    double b1pow; /* beta1^step */
    double b2pow; /* beta2^step */
    PSBuf *s[2];  /* ps_optim_nstate() of them are non-NULL */
} PSOptState;

/* An immutable named copy of the values and optimizer state. */
typedef struct PSSnapshot {
    char *name;
    uint32_t namelen;
    uint64_t version;
    int64_t unix_ms;
    PSBuf *data;
    PSOptState opt;
} PSSnapshot;

/* Counters: observability only; not persisted, not in the digest (a read on
 * the master and not on a replica must not make their digests differ). */
typedef struct PSCounters {
    uint64_t pushes, pulls, sets, stale_rejects, dedup_hits, nonfinite_rejects;
    uint64_t scaled_pushes, rounds_closed, rounds_timed_out;
    uint64_t takes, take_acks; /* ACCUM tensors: pending slots created / dropped */
    uint64_t backlog_refusals; /* ACCUM tensors: pushes refused at MAXBACKLOG */
    uint64_t stale_hist[PS_STALE_BUCKETS];
} PSCounters;

/* State of an ACCUM tensor (OPTIM ACCUM, the local side of a relay; see
 * accum.h): pushes are summed into 'sum'; PS.TAKE moves the sum into the
 * pending slot under a new relay seq, and it stays there until PS.TAKEACK
 * says the upstream push of that seq was acknowledged. Persisted (from
 * PS_ENCVER_ACCUM), replicated and digested like the rest of the value. */
typedef struct PSAccum {
    uint64_t count;      /* pushes summed into 'sum' since the last take */
    PSBuf *sum;          /* NULL while count == 0 */
    uint64_t seq;        /* seq given to the newest take (0: none yet) */
    uint64_t pend_count; /* pushes in the pending take; 0: nothing pending */
    PSBuf *pend;         /* the pending sum (seqs seq - pend_parts + 1 .. seq); NULL when none */
    /* From PS_ENCVER_ACCUM_ROUNDS: */
    uint64_t max_backlog; /* refuse a push while count + un-forwarded pending >= this (0: none) */
    uint64_t pend_parts;  /* upstream pushes the pending take is split into (1..; 0: none) */
    uint64_t pend_done;   /* of those, acknowledged (the slot is dropped when all are) */
    /* Round sizes of what went upstream, counted on each acknowledged part
     * (persisted: verifiable after the fact, across restarts). */
    uint64_t takes;       /* pending slots made */
    uint64_t rounds;      /* upstream pushes acknowledged (parts) */
    uint64_t forwarded;   /* gradients those carried */
    uint64_t round_max, round_min; /* largest / smallest gradients per upstream push (0: none) */
} PSAccum;

typedef struct PSTensor {
    uint32_t ndim;
    uint64_t dims[PS_MAX_DIMS];
    uint64_t n; /* element count */
    PSBuf *data;
    uint64_t version; /* +1 per applied update, never reset */

    int optim; /* PSOptimKind */
    PSHyper h;
    PSOptState opt;

    int64_t maxstale; /* -1 = no limit */
    int policy;       /* PS_POLICY_* */

    /* Sync mode: sync_n > 0 aggregates sync_n pushes per version. */
    uint32_t sync_n;
    int64_t sync_timeout_ms; /* 0 = wait for all n */
    uint32_t round_count;    /* gradients summed into round_acc so far */
    PSBuf *round_acc;        /* NULL while no round is open */

    uint32_t dedup_max; /* bound of the exactly-once table */
    uint32_t dedup_len;
    uint32_t dedup_cap;
    PSDedupEntry *dedup;
    PSDedupIndex *dedup_ix; /* lookup/eviction index over 'dedup' (dedup.c); NULL until needed */

    PSAccum acc; /* used by ACCUM tensors only (all zero otherwise) */

    struct PSRing *ring; /* ring tracking state (ring.h), NULL while untracked */

    uint32_t max_snapshots;
    uint32_t nsnap;
    PSSnapshot *snaps;

    PSCounters stats;
} PSTensor;

/* Everything PS.CREATE decides besides the shape and the values. */
typedef struct PSTensorOpts {
    int optim;
    PSHyper h;
    int64_t maxstale;
    int policy;
    uint32_t sync_n;
    int64_t sync_timeout_ms;
    uint32_t dedup_max;
    uint32_t max_snapshots;
} PSTensorOpts;

/* Initializers for PSTensor_Fill. */
enum { PS_INIT_ZEROS = 0, PS_INIT_CONST, PS_INIT_UNIFORM, PS_INIT_NORMAL, PS_INIT_XAVIER, PS_INIT_HE };

typedef struct PSInit {
    int kind;
    double a, b; /* CONST c: a; UNIFORM lo hi: a b; NORMAL mean std: a b */
    uint64_t seed;
} PSInit;

/* Installs the allocator (tryalloc returns NULL on failure). */
void PSTensor_SetAllocator(void *(*tryalloc)(size_t), void (*freefn)(void *));

/* Allocates raw memory through the installed allocator. */
void *PSTensor_Alloc(size_t bytes);
void PSTensor_Dealloc(void *p);

/* A NUL-terminated copy of 'len' bytes through the allocator, or NULL. */
char *PSTensor_DupBytes(const char *s, size_t len);

/* A new buffer of n floats (zeroed when 'zero'), refs 1; NULL on OOM. */
PSBuf *PSBuf_New(uint64_t n, int zero);
void PSBuf_Release(PSBuf *b);
/* One more holder of 'b' (may be NULL); returns 'b'. */
PSBuf *PSBuf_Retain(PSBuf *b);

/* Optimizer state held by one more holder (step and products copied, arrays
 * retained) / released by one. */
void PSOptState_Share(PSOptState *dst, const PSOptState *src);
void PSOptState_Release(PSOptState *o);

/* A NUL-terminated copy of 'len' bytes from the allocator; NULL on OOM. */
char *PSTensor_DupBytes(const char *s, size_t len);

/* Default options: SGD with 'lr', the other hyper-parameters at their
 * documented defaults, no staleness limit, async. */
void PSTensor_DefaultOpts(PSTensorOpts *o, double lr);

/* The one constructor: a tensor of a validated shape with the settings of
 * 'o', version 0, optimizer step 0. With 'zero_arrays' its values and
 * optimizer state are allocated and zeroed; otherwise they are NULL and the
 * caller (a loader) supplies them. Returns NULL on OOM. */
PSTensor *PSTensor_Create(uint32_t ndim, const uint64_t *dims, uint64_t n, const PSTensorOpts *o,
                          int zero_arrays);

/* The settings of a tensor as options (PS.CONFIG starts from them). */
void PSTensor_GetOpts(const PSTensor *t, PSTensorOpts *o);

/* Applies every option but the optimizer kind, which is fixed at creation
 * (PS.CONFIG, after checking them all). A lower dedup_max does not evict:
 * the caller trims the exactly-once table. */
void PSTensor_Configure(PSTensor *t, const PSTensorOpts *o);

/* PSTensor_Create with zeroed arrays (PS.CREATE). */
PSTensor *PSTensor_New(uint32_t ndim, const uint64_t *dims, uint64_t n, const PSTensorOpts *o);

void PSTensor_Free(PSTensor *t);

/* Fills the values from an initializer (deterministic from the seed). */
void PSTensor_Fill(PSTensor *t, const PSInit *init);

/* A copy sharing every buffer (copy on write). NULL on OOM. */
PSTensor *PSTensor_Copy(const PSTensor *t);

/* Bytes held by the value (buffers counted once per holder). */
size_t PSTensor_MemUsage(const PSTensor *t);

/* Makes the values and optimizer state exclusively owned before a write.
 * Returns PST_OK or PST_ERR_OOM (nothing changed). */
int PSTensor_MakeWritable(PSTensor *t);

/* One gradient push. 'g' holds t->n little-endian floats (any alignment) or,
 * with 'rows', nrows rows of the row length (dims[1..] product). */
typedef struct PSPush {
    const unsigned char *g;
    const unsigned char *rows; /* NULL, or nrows little-endian uint32 row indices */
    size_t nrows;
    double scale;          /* SCALE s (1 by default) */
    int has_version;
    uint64_t version;      /* VERSION v */
    const char *id;        /* ID client seq: NULL when absent */
    size_t idlen;
    uint64_t seq;
} PSPush;

/* Result of a push. */
typedef struct PSPushResult {
    uint64_t version;   /* version after the push (or produced by the duplicate) */
    uint64_t staleness; /* observed staleness */
} PSPushResult;

/* Validates and applies a push atomically. Returns PST_OK (applied),
 * PST_PENDING (sync round accumulating), PST_DUPLICATE (nothing done; version
 * = the original's), or an error status with nothing changed. */
int PSTensor_Push(PSTensor *t, const PSPush *p, PSPushResult *r);

/* Sync mode: closes the open round with what it has (timer decision).
 * Returns PST_OK when a round was applied, PST_PENDING when none was open. */
int PSTensor_CloseRound(PSTensor *t);

/* Overwrites the values with n floats from 'bytes'; version + 1. */
int PSTensor_SetValues(PSTensor *t, const unsigned char *bytes);

/* The exactly-once table's operations are in dedup.h. */

/* Snapshots (snapshot.c). A name is 1..PS_SNAP_NAME_MAX bytes. */
#define PS_SNAP_NAME_MAX 1024
PSSnapshot *PSTensor_SnapshotFind(const PSTensor *t, const char *name, size_t len);
int PSTensor_SnapshotTake(PSTensor *t, const char *name, size_t len, int64_t unix_ms);
/* Returns 1 when a snapshot of that name was dropped, 0 when none exists. */
int PSTensor_SnapshotDrop(PSTensor *t, const char *name, size_t len);
int PSTensor_Rollback(PSTensor *t, const PSSnapshot *s);

/* Where array 'j' (0 values, 1 and 2 optimizer state) of snapshot 'i' is
 * held: PS_SNAP_ABSENT (the optimizer keeps no such array), PS_SNAP_LIVE
 * (the live tensor's), PS_SNAP_OWNS (first held by this snapshot), or k >= 0:
 * the same array as earlier snapshot k (taken with no write between them).
 * Saving and MEMORY USAGE count an array only where it is PS_SNAP_OWNS. */
enum { PS_SNAP_OWNS = -1, PS_SNAP_LIVE = -2, PS_SNAP_ABSENT = -3 };
long PSTensor_SnapshotArrayOwner(const PSTensor *t, uint32_t i, int j);

/* A snapshot as saved (RDB value, PS._RESTORE SNAPSHOT), without its name
 * and arrays. Bit j of 'flags' (PS_SNAP_SHARES_LIVE << j) says array j is
 * the live tensor's; bit 3 + j (PS_SNAP_SHARES_EARLIER << j) says it is
 * snapshot earlier[j]'s. Values up to PS_SNAP_FLAGS_LIVE_ONLY are all that
 * encodings before PS_ENCVER_SNAP_SHARING carry. */
#define PS_SNAP_SHARES_LIVE 1u
#define PS_SNAP_SHARES_EARLIER 8u
#define PS_SNAP_FLAGS_LIVE_ONLY 7u
#define PS_SNAP_FLAGS_ALL 63u
_Static_assert(PS_SNAP_FLAGS_LIVE_ONLY == PS_SNAP_SHARES_EARLIER - 1 &&
                   PS_SNAP_FLAGS_ALL == (PS_SNAP_SHARES_EARLIER << 3) - 1,
               "one sharing bit of each kind per array (values, state 0, state 1)");
typedef struct PSSnapshotSaved {
    uint64_t version;
    int64_t unix_ms;
    uint64_t step;
    double b1pow, b2pow;
    uint64_t flags;
    uint64_t earlier[3];
} PSSnapshotSaved;

/* The saved form of snapshot 'i' (sharing found with ..._ArrayOwner). */
void PSTensor_SnapshotDescribe(const PSTensor *t, uint32_t i, PSSnapshotSaved *ss);

/* Whether array 'j' of a saved snapshot is saved with it (not shared). */
int PSTensor_SnapshotSavesArray(const PSTensor *t, const PSSnapshotSaved *ss, int j);

/* The one validator of a saved snapshot joining 't' as its next one (RDB
 * loader and PS._RESTORE SNAPSHOT): name length, count, duplicate name,
 * version not newer than the tensor, products, flags up to 'max_flags',
 * sharing references. Returns NULL when valid, else why not. */
const char *PSTensor_SnapshotCheck(const PSTensor *t, const char *name, size_t namelen,
                                   const PSSnapshotSaved *ss, uint64_t max_flags);

/* Appends a checked saved snapshot. The arrays it shares are retained; the
 * others are taken from own[j] (ownership passes in every case, own may be
 * NULL) or, when absent, allocated zeroed for CHUNKs to fill. Returns
 * PST_OK or PST_ERR_OOM (nothing added). */
int PSTensor_SnapshotAdd(PSTensor *t, const char *name, size_t namelen, const PSSnapshotSaved *ss,
                         PSBuf *own[3]);

/* Staleness histogram bucket of a staleness value. */
int PSTensor_StaleBucket(uint64_t staleness);

/* Fan-in and fan-out of a shape (see docs: fan_in = product of dims[1:]). */
void PSTensor_Fans(const PSTensor *t, double *fan_in, double *fan_out);

#endif /* PS_TENSOR_H */
