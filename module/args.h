/* args.h -- argument parsing of the module's commands: the shared helpers
 * (keywords, strict numbers, option lists) and the per-command structs that
 * the routers of cmd_table.c fill once before they call a tensor or a table
 * handler.
 *
 * Every parse function either fills its output and returns REDISMODULE_OK,
 * or replies the error (starting with its code, errors.h) and returns
 * REDISMODULE_ERR. Parsing is positional: an option's values are values,
 * whatever they spell ("PS.PULL t AT IDS" pulls the snapshot named IDS). A
 * parsed struct points into argv: it lives as long as the command. */

#ifndef PS_ARGS_H
#define PS_ARGS_H

#include <stddef.h>
#include <stdint.h>

#include "codec.h"
#include "redismodule.h"

/* Bytes of an ID client name (PS.PUSHGRAD ... ID client seq). */
#define PS_MAX_CLIENT_ID 256u

/* Case-insensitive comparison of an argument with a keyword. */
int ps_arg_is(RedisModuleString *arg, const char *keyword);

/* Strict number parsing; on failure they reply the error naming 'what' and
 * return REDISMODULE_ERR. */
int ps_arg_ll(RedisModuleCtx *ctx, RedisModuleString *arg, const char *what, long long min,
              long long max, long long *out);
int ps_arg_u64(RedisModuleCtx *ctx, RedisModuleString *arg, const char *what, uint64_t *out);
int ps_arg_double(RedisModuleCtx *ctx, RedisModuleString *arg, const char *what, double *out);

/* An option keyword and how many values follow it. */
typedef struct PSOption {
    const char *name;
    int nvals;
} PSOption;

/* Looks argv[i] up in 'opts' (terminated by a NULL name). Returns its index
 * when it is known, not yet in *seen, and followed by its values (marking
 * it seen); otherwise replies the error (unknown, repeated, missing value)
 * and returns -1. */
int ps_option_at(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, int i,
                 const PSOption *opts, unsigned *seen);

/* One option of a PS.CREATE / PS.CONFIG option list at argv[*i], among
 * 'count' names (name(k)), for tensors and tables: on a match checks it was
 * not given before (bit k of *seen) and has a value, sets *val to it,
 * advances *i past both and returns k. Returns 'count' when argv[*i] is no
 * such option, -1 after replying an error. */
int ps_arg_option(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, int *i, int count,
                  const char *(*name)(int), unsigned *seen, RedisModuleString **val);

/* One number of a PS.PUSHGRAD VALUES list into *d; "nan" parses (as NaN) so
 * that it is refused like a NaN in a blob. Returns 0 when 'arg' is not a
 * number. */
int ps_values_number(RedisModuleString *arg, double *d);

/* A dense format for tables: F32, F16 or BF16 (or VALUES when 'values' is
 * non-NULL: sets *values). Returns 0, or replies the error and returns -1. */
int ps_arg_table_format(RedisModuleCtx *ctx, RedisModuleString *arg, ps_format *fmt, int *values);

/* What a key holds, as the routers see it (ps_key_open, ps_module.h). */
typedef enum {
    PS_KIND_EMPTY = 0, /* no such key */
    PS_KIND_TENSOR,    /* ps-tensor */
    PS_KIND_TABLE,     /* ps-embeds */
    PS_KIND_OTHER      /* any other type */
} PSKeyKind;

/* Replies the error of a key that is neither a tensor nor a table: no such
 * key, or WRONGTYPE. */
int ps_reply_kind(RedisModuleCtx *ctx, PSKeyKind kind);

/* ========================================================================
 * Per-command arguments
 * ====================================================================== */

/* PS.PUSHGRAD key (grad [FORMAT f] | VALUES g1 ... gn) ...
 *   tensor: [ROWS idx] [VERSION v] [ID client seq] [SCALE s]
 *   table:  IDS idblob [IDFORMAT RAW|EF] [VERSION v] [ID client seq] */
typedef struct PSPushArgs {
    RedisModuleString *grad; /* NULL with VALUES */
    int values_start;        /* VALUES: argv[values_start .. + nvalues) */
    int nvalues;
    ps_format fmt;
    RedisModuleString *rows; /* tensor: ROWS or NULL */
    const unsigned char *ids; /* table: nids little-endian uint64 ids: the IDS blob,
                                 or an IDFORMAT EF list decoded (ps_scratch_ids) */
    size_t nids;
    int idfmt;                /* table: PS_PROTO_IDFMT_* of the IDS blob */
    int argc, ids_at, idformat_at; /* argv positions of the IDS value and of IDFORMAT
                                      (0: absent), for ps_args_replicate_push */
    int has_version;
    uint64_t version;
    const char *id; /* ID client (NULL: none), idlen bytes, seq >= 1 */
    size_t idlen;
    uint64_t seq;
    double scale; /* tensor: SCALE (1 when absent) */
} PSPushArgs;

/* The numbers of a parsed VALUES list as float32 into dst (a->nvalues). */
void ps_values_fill(RedisModuleString **argv, const PSPushArgs *a, float *dst);

/* Parses a PS.PUSHGRAD of a key of 'kind' (the router's ps_key_kind). The
 * type faults come first, found by walking the option slots (keywords and
 * their values, never reading a value as a keyword): IDS, the table's
 * keyword, on a key that holds no table answers ERR no such key /
 * WRONGTYPE; a table's option list without IDS is a tensor's, parsed as one
 * and answered WRONGTYPE. Then the grammar of the kind: a table's (ROWS is
 * WRONGTYPE there) or a tensor's. */
int ps_args_push(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, PSKeyKind kind,
                 PSPushArgs *a);

/* Replicates an applied table push 'a' (argv as parsed): verbatim, or when it
 * had IDFORMAT, with its ids as a raw list and without IDFORMAT, so that a
 * replica, the AOF and a module before IDFORMAT replaying them read the
 * list every version reads (the same ids in the same order: same effect). */
void ps_args_replicate_push(RedisModuleCtx *ctx, RedisModuleString **argv, const PSPushArgs *a);

/* PS.PULL key ...
 *   tensor: [FORMAT f|VALUES] [ROWS idx] [AT snapshot] [MINVERSION v [TIMEOUT ms]]
 *   table:  IDS idblob [IDFORMAT RAW|EF] [FORMAT F32|F16|BF16|VALUES] */
typedef struct PSPullArgs {
    ps_format fmt;
    int values; /* FORMAT VALUES */
    const unsigned char *rows; /* tensor: ROWS blob or NULL */
    size_t rowslen;
    const char *at; /* tensor: AT snapshot name or NULL */
    size_t atlen;
    int has_min;
    uint64_t minversion;
    long long timeout_ms;
    const unsigned char *ids; /* table: nids ids, as PSPushArgs */
    size_t nids;
    int idfmt;
} PSPullArgs;

/* Parses a PS.PULL of a key of 'kind', as ps_args_push. An IDFORMAT EF
 * list is decoded here (into ps_scratch_ids, bounded before anything is
 * allocated: at most min(2^24, ps.max-pull-bytes / 4) ids for a pull, 2^24
 * for a push, and never more than 8 per byte of the blob). */
int ps_args_pull(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, PSKeyKind kind,
                 PSPullArgs *a);

/* PS.SCORE key MODEL LR|FM COUNTS countblob IDS idblob [VALS valblob]
 *          [BIAS b] [FORMAT F64|VALUES]
 * PS.SCORE key MODEL MLP COUNTS countblob IDS idblob [VALS valblob]
 *          FIELDS fieldblob FIELDCOUNT F [FORMAT F32|VALUES] (cmd_score.c) */
typedef struct PSScoreArgs {
    int model;                   /* PS_SCORE_LR / _FM / _MLP (ctr_score.h) */
    int values_reply;            /* FORMAT VALUES */
    float bias;
    const unsigned char *counts; /* n little-endian uint32 feature counts */
    size_t n;
    uint64_t nnz;                /* their sum: the ids, at most 2^24 */
    const unsigned char *ids;    /* nnz little-endian uint64 ids */
    const unsigned char *vals;   /* nnz little-endian float32 values, or NULL */
    const unsigned char *fields; /* MLP: nnz little-endian uint32 field ids, each < nfields */
    uint32_t nfields;            /* MLP: FIELDCOUNT, 1..PS_CTR_POOL_MAX_FIELDS */
} PSScoreArgs;

/* Parses PS.SCORE's options and checks the batch's shape (the blobs'
 * lengths against the counts) without opening the key: the table's
 * checks (dim, size) are the handler's. */
int ps_args_score(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, PSScoreArgs *a);

#endif /* PS_ARGS_H */
