/* embed.h -- embedding tables: rows of 'dim' float32 values keyed by uint64
 * ids, with per-row optimizer state, admission and deterministic eviction.
 *
 * Pure core: no Redis calls. Memory comes from the allocator installed with
 * PSEmbed_SetAllocator() (the module installs RedisModule_TryAlloc). Every
 * function that can fail returns a PSE_* status and leaves the table
 * unchanged on failure. Everything that changes state is a function of the
 * pushes (and explicit evictions) applied, never of pulls or the clock, so a
 * master, its replicas and an AOF replay hold bit-identical tables.
 * docs/embed-design.md states every rule exactly. */

#ifndef PS_EMBED_H
#define PS_EMBED_H

#include <stddef.h>
#include <stdint.h>

#include "protocol.h"

/* Status codes. */
enum {
    PSE_OK = 0,
    PSE_ERR_OOM,       /* allocation failed */
    PSE_ERR_ARG,       /* bad argument (empty push, too many ids, bad age) */
    PSE_ERR_NONFINITE, /* NaN or Inf in a gradient */
    PSE_ERR_FULL,      /* the push would exceed PSE_MAX_ROWS rows */
    PSE_ERR_CORRUPT,   /* a rebuild from serialized rows failed validation */
    /* PSEmbed_PushOnce only: */
    PSE_DUPLICATE,     /* ID seq already applied: nothing done */
    PSE_ERR_STALE,     /* VERSION more than maxstale versions behind */
    PSE_ERR_FUTURE,    /* VERSION newer than the table */
    /* PSEmbed_Tombstones only: */
    PSE_ERR_HORIZON    /* SINCE at or before the tombstone horizon, or after the version */
};

/* Per-row optimizers (docs/embed-design.md "Optimizers"): PSE_OPT_<ID> for
 * each row of PS_PROTO_TABLE_OPTIMS (common/protocol.h), in its order, which
 * is the code a table's header stores. State vectors per row: none for SGD
 * and ROWADAGRAD (one accumulator in the row header), 1 for MOMENTUM
 * (velocity) and ADAGRAD, 2 for ADAM (bias correction from the row's push
 * count) and FTRL (z and n; the values are w). */
typedef enum {
#define PSE_OPT_ENUM_(ID) PSE_OPT_##ID,
    PS_PROTO_TABLE_OPTIMS(PSE_OPT_ENUM_, PSE_OPT_ENUM_)
#undef PSE_OPT_ENUM_
    PSE_OPT_COUNT
} PSEmbedOptim;

/* Row initializers. */
enum { PSE_INIT_ZEROS = 0, PSE_INIT_UNIFORM, PSE_INIT_NORMAL };

/* Bounds every configuration and every rebuild is checked against. */
#define PSE_MAX_DIM 65536u
#define PSE_MAX_ROWS ((1u << 26) - 1) /* row slots are 26 bits in the index */
#define PSE_MAX_PUSH_IDS (1u << 24)
#define PSE_MAX_ADMIT 255u           /* the admission filter's counters are 8 bits */
#define PSE_MAX_AGE (1ull << 31)     /* TTL and EVICT AGE bound: row ages saturate here */
#define PSE_MAX_VERSION (1ull << 63) /* a loaded table's version is below (pushes never wrap it) */
#define PSE_MIN_FILTER_LOG2 10u
#define PSE_MAX_FILTER_LOG2 30u
#define PSE_DEFAULT_TOMBSTONES 65536u /* removals a table's tombstone log keeps by default */
#define PSE_MAX_TOMBSTONES (1u << 24) /* TOMBSTONES bound (16 bytes each: 256 MB) */

/* Everything fixed at creation. Hyper-parameters are doubles as the user
 * gave them; the kernels round each to float32 once (embed_optim.c). */
typedef struct PSEmbedConfig {
    uint32_t dim;
    int optim;        /* PSEmbedOptim */
    double lr;        /* SGD, MOMENTUM, ADAGRAD, ROWADAGRAD, ADAM */
    double momentum;  /* MOMENTUM */
    double beta1, beta2; /* ADAM */
    double eps;       /* ADAGRAD, ROWADAGRAD, ADAM */
    double alpha, beta, l1, l2; /* FTRL */
    int init;         /* PSE_INIT_*; FTRL requires ZEROS */
    double init_a, init_b; /* UNIFORM lo hi | NORMAL mean std */
    uint64_t seed;    /* row values are a pure function of (seed, id) */
    int unknown_zeros; /* pulls of absent ids answer zeros instead of initial values */
    uint32_t admit;   /* pushes an id needs before it becomes a row (1 = first push) */
    uint32_t filter_log2; /* admission filter of 2^filter_log2 byte counters (admit > 1) */
    uint64_t capacity; /* 0 = unbounded, else rows are kept <= capacity */
    uint64_t ttl;     /* 0 = none, else rows not pushed for ttl versions are dead (<= PSE_MAX_AGE) */
    uint64_t salt;    /* keys the index hash Mix64(id ^ salt): random per table, replicated and
                         saved, so crafted ids cannot predict buckets (0 = the unkeyed hash) */
    uint64_t tombstones; /* removals the tombstone log keeps (0 .. PSE_MAX_TOMBSTONES; 0 = none:
                          * every removal moves the horizon) */
} PSEmbedConfig;

/* Counters that are a function of the pushes: persisted and digested. */
typedef struct PSEmbedStats {
    uint64_t created;          /* rows created (first admitted push, or re-created) */
    uint64_t dropped;          /* id-gradients dropped below the admission threshold */
    uint64_t evicted_ttl;      /* rows removed because they expired */
    uint64_t evicted_capacity; /* rows removed to stay within CAPACITY */
    uint64_t evicted_explicit; /* rows removed by PSEmbed_EvictAge */
} PSEmbedStats;

/* The table scalars a serialization carries besides config, filter, rows. */
typedef struct PSEmbedState {
    uint64_t version;   /* +1 per applied push */
    uint64_t nrows;     /* rows stored (expired rows not yet reclaimed included) */
    uint64_t sweep_pos; /* where the incremental TTL sweep resumes */
    PSEmbedStats stats;
    uint64_t tomb_horizon; /* the tombstone log holds every removal at a version > this */
    uint64_t tomb_total;   /* removals ever logged (the log's entries are the last ones) */
} PSEmbedState;

/* One stored row as serialization sees it. 'data' holds nfloats floats:
 * the values, then each state vector (PSEmbed_NumFloats). */
typedef struct PSEmbedRow {
    uint64_t id;
    uint64_t last_version; /* table version of the row's last push (rows not pushed
                            * for PSE_MAX_AGE versions or more: at least
                            * version - PSE_MAX_AGE - 2^30 + 1, see embed_int.h) */
    uint32_t pushes;       /* pushes applied to the row (Adam's step count) */
    float rowacc;          /* ROWADAGRAD's accumulator, 0 otherwise */
    const float *data;
} PSEmbedRow;

/* What a push did. */
typedef struct PSEmbedPushResult {
    uint64_t version; /* the table version after the push */
    uint64_t unique;  /* distinct ids in the push */
    uint64_t updated; /* rows stepped (created ones included) */
    uint64_t created;
    uint64_t dropped;
    uint64_t evicted; /* rows removed after the push (TTL sweep + CAPACITY) */
    uint64_t staleness; /* PSEmbed_PushOnce: table version - VERSION (0 without VERSION) */
} PSEmbedPushResult;

typedef struct PSEmbed PSEmbed;

/* Installs the allocator (tryalloc returns NULL on failure). */
void PSEmbed_SetAllocator(void *(*tryalloc)(size_t), void (*freefn)(void *));

/* Sets the key of the per-push repeat finder (PSEmbed_Push's transient
 * hash of the ids of one push). The module draws it at load from the
 * server's random bytes, so clients cannot choose ids that all land in one
 * bucket and make a push quadratic. Nothing replicated or observable
 * depends on it; the default (tests) is 0. */
void PSEmbed_SetPushSalt(uint64_t salt);

/* NULL when 'c' is a valid configuration, else an error message (static). */
const char *PSEmbed_CheckConfig(const PSEmbedConfig *c);

/* Defaults: SGD lr 0.01, ZEROS, ADMIT 1, filter 2^20, no capacity/TTL. */
void PSEmbed_DefaultConfig(PSEmbedConfig *c, uint32_t dim);

/* Name / parse of optimizer names ("sgd", "rowadagrad", "ftrl", ...). */
const char *PSEmbed_OptimName(int optim);
int PSEmbed_OptimParse(const char *s, size_t len);

/* State vectors per row of an optimizer (0, 1 or 2). */
int PSEmbed_NumStateVectors(int optim);

/* Floats a row's data holds: dim * (1 + state vectors). */
uint32_t PSEmbed_NumFloats(const PSEmbedConfig *c);

/* Writes the initial values of row 'id' (dim floats). */
void PSEmbed_InitRow(const PSEmbedConfig *c, uint64_t id, float *out);

/* A new empty table; NULL on OOM or invalid config (*err says which). */
PSEmbed *PSEmbed_New(const PSEmbedConfig *c, const char **err);
void PSEmbed_Free(PSEmbed *t);

/* A deep copy; NULL on OOM. */
PSEmbed *PSEmbed_Copy(const PSEmbed *t);

const PSEmbedConfig *PSEmbed_Config(const PSEmbed *t);
void PSEmbed_GetState(const PSEmbed *t, PSEmbedState *st);
uint64_t PSEmbed_Rows(const PSEmbed *t);
uint64_t PSEmbed_Version(const PSEmbed *t);

/* Bytes allocated for the table (what MEMORY USAGE reports). */
size_t PSEmbed_MemUsage(const PSEmbed *t);

/* Copies the values of 'k' ids (little-endian uint64 at 'idblob', any
 * alignment; repeats allowed) into 'out' (k * dim floats). Absent, expired
 * and not admitted ids answer their initial values (zeros with
 * unknown_zeros). Changes nothing. */
void PSEmbed_Pull(const PSEmbed *t, const unsigned char *idblob, size_t k, float *out);

/* Whether 'id' is a live row; fills *row when 'row' is non-NULL. */
int PSEmbed_Lookup(const PSEmbed *t, uint64_t id, PSEmbedRow *row);

/* Applies one push: 'k' ids and k * dim little-endian float32 gradients.
 * Duplicate ids are summed in the order given, then each distinct row gets
 * one optimizer step. Returns PSE_OK (and fills *res if non-NULL),
 * PSE_ERR_ARG, PSE_ERR_NONFINITE, PSE_ERR_FULL or PSE_ERR_OOM (table
 * unchanged). */
int PSEmbed_Push(PSEmbed *t, const unsigned char *idblob, size_t k, const unsigned char *grad,
                 PSEmbedPushResult *res);

/* One push of PS.PUSHGRAD ... IDS (PSEmbed_PushOnce). */
typedef struct PSEmbedPush {
    const unsigned char *ids; /* k little-endian uint64 ids */
    size_t k;
    const unsigned char *grad; /* k * dim little-endian float32 */
    const char *id;            /* ID client (NULL: none), idlen bytes */
    size_t idlen;
    uint64_t seq;              /* ID seq (>= 1) */
    int has_version;
    uint64_t version;          /* VERSION: the table version the gradient was computed at */
} PSEmbedPush;

struct PSDedupSet;

/* A table push with its exactly-once and staleness rules, as PSTensor_Push
 * for tensors (embed_once.c), in this order:
 *   1. an ID seq already applied (dedup.h) answers PSE_DUPLICATE with
 *      res->version the version the client's pushes reached;
 *   2. a VERSION newer than the table answers PSE_ERR_FUTURE; one more than
 *      'maxstale' (>= 0; -1 = no bound) versions behind answers
 *      PSE_ERR_STALE with res->staleness set;
 *   3. a new client's entry gets its room in 'dd' (PSE_ERR_OOM), then
 *      PSEmbed_Push applies the gradient (its errors);
 *   4. once applied, the client's entry records seq and the new version.
 * Nothing changes unless it answers PSE_OK. */
int PSEmbed_PushOnce(PSEmbed *t, struct PSDedupSet *dd, int64_t maxstale, const PSEmbedPush *p,
                     PSEmbedPushResult *res);

/* Changes what may change after creation (PS.CONFIG): the
 * hyper-parameters, unknown_zeros, capacity and ttl. dim, optim, init,
 * seed, admit and filter_log2 must equal the table's. A capacity below the
 * row count evicts at once (as after a push). Returns PSE_OK or
 * PSE_ERR_ARG with *err set (table unchanged). */
int PSEmbed_Reconfigure(PSEmbed *t, const PSEmbedConfig *c, const char **err);

/* Removes every row whose last push is 'age' or more versions old
 * (version - last_version >= age, 1 <= age <= PSE_MAX_AGE; other ages
 * remove nothing). Returns the rows removed. Each removal is logged
 * (tombstones): call PSEmbed_TombReserve(t, rows) first, or removals
 * beyond the log's room move its horizon. */
uint64_t PSEmbed_EvictAge(PSEmbed *t, uint64_t age);

/* Export: calls 'fn' for live rows changed after version 'since'
 * (last_version > since) whose id hash lies in the cursor's next interval,
 * covering about 'count' index buckets. Returns the next cursor; 0 when the
 * scan is complete (start with 0). A row present for the whole scan is
 * reported exactly once; rows inserted or evicted meanwhile may or may not
 * be. 'fn' must not change the table. */
typedef void (*PSEmbedScanFn)(void *ud, const PSEmbedRow *row);
uint64_t PSEmbed_Scan(const PSEmbed *t, uint64_t cursor, uint64_t count, uint64_t since,
                      PSEmbedScanFn fn, void *ud);

/* ---- tombstones: the removal log (docs/design.md "Tombstones and
 * incremental export") -------------------------------------------------
 *
 * Every row removal (TTL sweep, CAPACITY, PSEmbed_EvictAge) appends (id,
 * table version at the removal) to a ring of at most cfg.tombstones
 * entries; when it is full the oldest entry falls off and the horizon moves
 * to that entry's version. The log is a function of the pushes and
 * evictions applied, like the rows, so replicas and AOF replays hold the
 * same one. A change of TTL (which makes rows dead or alive again without a
 * removal) empties the log and moves the horizon to the version + 1. */

/* An entry's version is the first version whose state lacks the row: the
 * version a push made (its TTL sweep and CAPACITY removals), or version + 1
 * for removals without a push (PSEmbed_EvictAge, PSEmbed_Reconfigure), since
 * a consumer complete as of this version may still hold those rows.
 * Rows changed after 'since' are what PSEmbed_Scan reports; rows gone since
 * are the log's entries at a version > since whose id is not a live row
 * now, plus the stored rows that are dead (TTL) since a version > since
 * (PSEmbed_ScanGone). Answers PSE_ERR_HORIZON when since is 0, below the
 * horizon or above the version (the consumer must export every row
 * again), else PSE_OK
 * with 'fn' called for up to 'count' log entries from 'cursor' (0 = the
 * start; the next cursor in *next, 0 when the log is done). The cursor is
 * the log position + 1, so it stays valid while entries are appended. */
typedef void (*PSEmbedGoneFn)(void *ud, uint64_t id, uint64_t version);
int PSEmbed_Tombstones(const PSEmbed *t, uint64_t since, uint64_t cursor, uint64_t count,
                       PSEmbedGoneFn fn, void *ud, uint64_t *next);

/* The log's entries, oldest first (serialization): *len entries, entry i
 * read with PSEmbed_TombAt. */
uint64_t PSEmbed_TombLen(const PSEmbed *t);
void PSEmbed_TombAt(const PSEmbed *t, uint64_t i, uint64_t *id, uint64_t *version);

/* Appends a saved entry to a table under rebuild (after its rows; the
 * state's horizon and total are already set): versions non-decreasing,
 * >= horizon and <= version + 1, at most cfg.tombstones entries. */
int PSEmbed_LoadTomb(PSEmbed *t, uint64_t id, uint64_t version, const char **err);

/* PSEmbed_Scan that also calls 'gone' (may be NULL) for the stored rows in
 * the interval that are dead since a version > since (since > 0). */
uint64_t PSEmbed_ScanGone(const PSEmbed *t, uint64_t cursor, uint64_t count, uint64_t since,
                          PSEmbedScanFn fn, PSEmbedGoneFn gone, void *ud);

/* Makes room in the log for 'n' more removals (PS.EVICT before
 * PSEmbed_EvictAge): PSE_OK or PSE_ERR_OOM (nothing changed). */
int PSEmbed_TombReserve(PSEmbed *t, uint64_t n);

/* Serialization: rows in storage order (0 .. nrows-1), which is a function
 * of the pushes applied and which a rebuild preserves. */
void PSEmbed_RowAt(const PSEmbed *t, uint64_t i, PSEmbedRow *row);

/* The admission filter's counters (NULL and 0 when admit == 1). */
const uint8_t *PSEmbed_Filter(const PSEmbed *t, size_t *len);

/* Rebuild: Begin validates config, state scalars and the filter before
 * allocating anything; AddRow validates one row (id unique, version and
 * push count consistent, sums of squares >= 0 or +Inf, FTRL values equal
 * to w(z, n); values may be any float, as a push can overflow them) and
 * appends it; End checks the row count and sweep position.
 * On failure the builder must be freed with PSEmbed_Free. */
PSEmbed *PSEmbed_LoadBegin(const PSEmbedConfig *c, const PSEmbedState *st,
                           const uint8_t *filter, size_t filter_len, const char **err, int *rc);
int PSEmbed_LoadRow(PSEmbed *t, const PSEmbedRow *row, const char **err);
int PSEmbed_LoadEnd(PSEmbed *t, const char **err);

/* Feeds every piece of state (config, scalars, filter, rows in storage
 * order) to 'add' in a fixed order, for DEBUG DIGEST. */
typedef void (*PSEmbedDigestFn)(void *ud, const void *buf, size_t len);
void PSEmbed_Digest(const PSEmbed *t, PSEmbedDigestFn add, void *ud);

/* FNV-1a 64 of the PSEmbed_Digest stream (tests, benchmarks). */
uint64_t PSEmbed_Digest64(const PSEmbed *t);

/* ---- per-row optimizer kernels (embed_optim.c) ----------------------- */

/* Float32 coefficients, rounded once from the config's doubles. */
typedef struct PSEmbedCoef {
    float lr, mu, b1, omb1, b2, omb2, eps;
    float alpha, beta, l1, l2;
    double lr_d, beta1_d, beta2_d; /* ADAM's per-row bias correction is computed in double */
} PSEmbedCoef;

void PSEmbed_MakeCoef(const PSEmbedConfig *c, PSEmbedCoef *k);

/* One optimizer step on one row: 'w' (dim values), 's0'/'s1' (state
 * vectors or NULL), '*rowacc' (ROWADAGRAD's; NULL for the others), 'g'
 * (summed gradient), 't' the row's push count including this push. */
void PSEmbed_StepRow(int optim, const PSEmbedCoef *k, uint32_t dim, float *w, float *s0,
                     float *s1, float *rowacc, const float *g, uint32_t t);

/* FTRL's w of one element from z and n. */
float PSEmbed_FtrlWeight(const PSEmbedCoef *k, float z, float n);

/* MurmurHash3's 64-bit finalizer (a bijection): hashes ids for the index
 * (keyed: Mix64(id ^ salt)), the admission filter and row initialization. */
static inline uint64_t PSEmbed_Mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

/* x^t by binary powering in double (Adam's bias correction). */
double PSEmbed_PowU(double x, uint32_t t);

#endif /* PS_EMBED_H */
