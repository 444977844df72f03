/* embed_glue.h -- what the embedding-table glue (type_embed.c, cmd_embed.c,
 * cmd_embed_restore.c) shares with module.c, glue.c and cmd_table.c: the
 * registered type, the key value wrapped around the pure core (embed.h), the
 * saved header layout and the command handlers. Not included by the pure
 * cores.
 *
 * The value of a ps-embeds key is a PSEmbedValue: the core table plus what
 * the glue adds on top of it (staleness bound, the exactly-once table of
 * client ids, counters that pulls move and that are therefore never
 * replicated, persisted or digested). */

#ifndef PS_EMBED_GLUE_H
#define PS_EMBED_GLUE_H

#include <stdint.h>

#include "embed.h"
#include "ps_module.h"

/* Module type names are exactly 9 characters: "ps-embeds". */
#define PS_EMBED_TYPE_NAME "ps-embeds"
extern RedisModuleType *PSEmbedType;

/* Encoding versions of ps-embeds (its own ladder; encver.h holds the
 * tensor's). The RDB value carries one as the type encoding version, PS._RESTORE
 * EMBED (the AOF rewrite) as its ENCVER token. */
#define PS_EMBED_ENCVER_FIRST 1 /* header words, filter chunks, row blocks, exactly-once entries */
#define PS_EMBED_ENCVER_SALT 2  /* the header ends with the index salt (before: salt 0) */
#define PS_EMBED_ENCVER_TOMBS 3 /* the header ends with TOMBSTONES, the log's horizon and total;
                                  the log's entries follow the exactly-once entries (before:
                                  the default size, horizon at the version, empty) */
#define PS_EMBED_ENCVER_RING 4  /* after the tombstones: the ring state's length (0: not
                                  tracked) and its serialization (ring_table.h) in
                                  PS_EMBED_CHUNK_BYTES pieces (before: not tracked) */
#define PS_EMBED_ENCVER_LATEST PS_EMBED_ENCVER_RING

/* Hyper-parameters of a table: PS.CREATE / PS.CONFIG keyword, PSEmbedConfig
 * member. Parsing, the replicated PS.CREATE, PS.INFO and the saved header are
 * generated from this list. */
#define PS_EMBED_HYPERPARAMS(X) \
    X(LR, lr)                   \
    X(MOMENTUM, momentum)       \
    X(BETA1, beta1)             \
    X(BETA2, beta2)             \
    X(EPS, eps)                 \
    X(ALPHA, alpha)             \
    X(BETA, beta)               \
    X(L1, l1)                   \
    X(L2, l2)

/* The saved header: 8-byte words in this order, for RDB (each word one
 * SaveUnsigned) and PS._RESTORE EMBED (one blob). u = integer config field,
 * d = double config field (saved as its bit pattern), g = glue field,
 * s = PSEmbedState field. */
#define PS_EMBED_HEADER_FIELDS(X)                                             \
    X(u, dim) X(u, optim) X(u, init) X(u, seed) X(u, unknown_zeros) X(u, admit) \
    X(u, filter_log2) X(u, capacity) X(u, ttl)                                \
    X(d, lr) X(d, momentum) X(d, beta1) X(d, beta2) X(d, eps) X(d, alpha)       \
    X(d, beta) X(d, l1) X(d, l2) X(d, init_a) X(d, init_b)                     \
    X(g, maxstale) X(g, dedup_max)                                            \
    X(s, version) X(s, nrows) X(s, sweep_pos) X(s, created) X(s, dropped)     \
    X(s, evicted_ttl) X(s, evicted_capacity) X(s, evicted_explicit)          \
    X(u, salt)                                                                \
    X(u, tombstones) X(s, tomb_horizon) X(s, tomb_total)
#define PS_EMBED_HDR_ONE(k, f) +1
enum { PS_EMBED_HEADER_WORDS = 0 PS_EMBED_HEADER_FIELDS(PS_EMBED_HDR_ONE) };

/* Header words saved by encoding 'encver' (a valid one): the list above
 * minus the fields newer than it ('salt' from PS_EMBED_ENCVER_SALT, the
 * last three from PS_EMBED_ENCVER_TOMBS). The missing ones load as 0, then
 * PSEmbed_HeaderUpgrade gives them their meaning. */
static inline size_t PSEmbed_HeaderWords(int encver) {
    return encver >= PS_EMBED_ENCVER_TOMBS  ? PS_EMBED_HEADER_WORDS
           : encver >= PS_EMBED_ENCVER_SALT ? PS_EMBED_HEADER_WORDS - 3
                                            : PS_EMBED_HEADER_WORDS - 4;
}

/* A table saved before the tombstone log: the default log size, empty, its
 * horizon past the saved version (removals up to it, PS.EVICT at it
 * included, are unknown: PS.TOMBSTONES answers REBASE to SINCE <= version). */
static inline void PSEmbed_HeaderUpgrade(int encver, PSEmbedConfig *c, PSEmbedState *st) {
    if (encver >= PS_EMBED_ENCVER_TOMBS) return;
    c->tombstones = PSE_DEFAULT_TOMBSTONES;
    st->tomb_horizon = st->version + 1;
    st->tomb_total = 0;
}

/* Bytes of one saved tombstone: id u64, version u64 (LE). */
#define PS_EMBED_TOMB_BYTES 16u

/* Bytes of one serialized row: id, last_version, pushes, rowacc, floats. */
#define PS_EMBED_ROW_HDR 24u
/* Bytes per RDB string / AOF argument of filter or rows: 32 MB (< 64 MB). */
#define PS_EMBED_CHUNK_BYTES (32u << 20)
/* Bound of the exactly-once table and of a client id. */
#define PS_EMBED_MAX_DEDUP (1u << 20)
#define PS_EMBED_MAX_CLIENT_ID PS_MAX_CLIENT_ID

/* A table being rebuilt by PS._RESTORE EMBED (AOF replay): the header is
 * known, the filter arrives in chunks, then the rows. */
typedef struct PSEmbedPending {
    PSEmbedConfig cfg;
    PSEmbedState st;
    uint8_t *filter; /* cfg's filter length, filled up to 'filled' */
    size_t filter_len, filled;
} PSEmbedPending;

typedef struct PSEmbedValue {
    PSEmbed *t;               /* NULL while 'pending' */
    PSEmbedPending *pending;  /* a PS._RESTORE in progress, or NULL */
    int restoring;            /* rows still arriving: commands refuse the key */
    int64_t maxstale;         /* -1 = none: a push VERSION older than this is STALE */
    PSDedupSet dd;            /* exactly-once table (dedup.h), bound dd.max */
    struct PSRingTable *ring; /* ring tracking (ring_table.h, cmd_ring.c), or NULL */
    unsigned char *ringload;  /* PS._RESTORE ERING: the ring state's bytes so far */
    size_t ringload_len, ringload_have;
    /* Not persisted, not digested (pulls move them). */
    uint64_t pushes, pulls, ids_pulled, dedup_hits, stale_rejects, nonfinite_rejects,
        ring_lag_refusals;
} PSEmbedValue;

/* A new value around 't' (owned), NULL on OOM. */
PSEmbedValue *PSEmbedValue_New(PSEmbed *t, int64_t maxstale, uint32_t dedup_max);
void PSEmbedValue_Free(PSEmbedValue *v);


/* Header words of a value / back. Decode checks every integer's range
 * before narrowing (RESTORE payloads are hostile); the rest is checked by
 * PSEmbed_LoadBegin. Returns NULL or why the header is bad. */
void PSEmbed_HeaderEncode(const PSEmbedValue *v, uint64_t *w);
const char *PSEmbed_HeaderDecode(const uint64_t *w, PSEmbedConfig *c, PSEmbedState *st,
                                 int64_t *maxstale, uint32_t *dedup_max);

/* Bytes of the admission filter of config 'c' (0 when ADMIT is 1). */
size_t PSEmbed_FilterLen(const PSEmbedConfig *c);

/* Rows of a serialized block 'blob' of 'len' bytes (whole rows, at most
 * 'remaining') into table 't' under rebuild; 'scratch' holds one row's
 * floats. Returns NULL or why the block is bad (rows before the bad one stay
 * stored). */
const char *PSEmbed_LoadBlock(PSEmbed *t, const unsigned char *blob, size_t len, float *scratch,
                              uint64_t remaining);

/* Tombstones of a serialized block (whole entries, at most 'remaining')
 * into table 't' (rows loaded). Returns NULL or why the block is bad. */
const char *PSEmbed_LoadTombBlock(PSEmbed *t, const unsigned char *blob, size_t len,
                                  uint64_t remaining);

/* A PS._RESTORE EMBED in progress: frees it; turns a value whose filter is
 * complete into a table under rebuild (NULL or why not). */
void PSEmbedPending_Free(PSEmbedPending *p);
const char *PSEmbedValue_PendingBegin(PSEmbedValue *v);

/* Opens 'keyname' as a table. Empty: NULL, *empty = 1, no reply. Another
 * type, or a table still being restored: replies the error, NULL. */
PSEmbedValue *ps_open_embed(RedisModuleCtx *ctx, RedisModuleString *keyname, int mode,
                            RedisModuleKey **key, int *empty);
/* Replies the error for a PSE_* status. */
int ps_embed_reply_status(RedisModuleCtx *ctx, int status);

int PSEmbedType_Register(RedisModuleCtx *ctx);

/* PS._RESTORE key EMBED|EFILTER|EROWS|EEND|EDEDUP ... (cmd_embed_restore.c). */
int PSEmbedRestore_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);

/* cmd_embed.c: the table handlers of the shared verbs, which cmd_table.c's
 * routers call for a key holding a table (not being restored) with the
 * arguments parsed once (args.h; PS.CREATE and PS.CONFIG parse their own
 * option lists), and the table-only commands. A handler replies; the
 * router closes the key. */
int ps_table_create(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);
int ps_table_pull(RedisModuleCtx *ctx, PSEmbedValue *v, const PSPullArgs *a);
int ps_table_push(RedisModuleCtx *ctx, RedisModuleString **argv, PSEmbedValue *v, const PSPushArgs *a);
int ps_table_info(RedisModuleCtx *ctx, PSEmbedValue *v);
int ps_table_config(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, PSEmbedValue *v);
int PSScanRows_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);
int PSEvict_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);
int PSTombstones_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);

/* Ring tracking of a table (cmd_ring.c): the push hooks (before: replies
 * and returns -1 when MAXLAG refuses the push, which a duplicate ID seq is
 * not: it is answered as one; after: with whether the push
 * was applied), PS.INFO fields, and the value's ring state in an RDB, an
 * AOF rewrite (PS._RESTORE key ERING offset total piece), a digest, a copy. */
int ps_ring_table_before_push(RedisModuleCtx *ctx, PSEmbedValue *v, const unsigned char *ids,
                              size_t k, const char *id, size_t idlen, uint64_t seq, uint64_t *mark);
void ps_ring_table_after_push(PSEmbedValue *v, int applied, uint64_t mark);
void ps_ring_table_info(RedisModuleCtx *ctx, const PSEmbedValue *v, long *n);
/* (ring_table_io.c) Attaches the state of 'len' serialized bytes to 'v'
 * (replacing any): NULL or why not (nothing changed). */
const char *ps_ring_table_attach(PSEmbedValue *v, const unsigned char *b, size_t len);
void ps_ring_table_save(RedisModuleIO *io, const PSEmbedValue *v);
const char *ps_ring_table_load(RedisModuleIO *io, PSEmbedValue *v);
void ps_ring_table_aof(RedisModuleIO *aof, RedisModuleString *key, const PSEmbedValue *v);
const char *ps_ring_table_restore(PSEmbedValue *v, RedisModuleString **argv, int argc);
void ps_ring_table_digest(RedisModuleDigest *md, const PSEmbedValue *v);
size_t ps_ring_table_mem(const PSEmbedValue *v);
void ps_ring_table_free(PSEmbedValue *v);
int ps_ring_table_copy(PSEmbedValue *dst, const PSEmbedValue *src);

/* INFO ps counters of tables. */
typedef struct PSEmbedModuleStats {
    unsigned long long creates, pushes, pulls, ids_pushed, ids_pulled, rows_created,
        ids_dropped, rows_evicted, scans;
} PSEmbedModuleStats;
extern PSEmbedModuleStats PSEmbedCounters;

#endif /* PS_EMBED_GLUE_H */
