/* wire.h -- the RESP encoding of the commands libps sends for models.
 *
 * Pure: no hiredis, no allocation; callers pass every buffer. One encoder
 * per command, so a new option of PS.PUSHGRAD or PS.PULL is added here and
 * nowhere else. The bytes are exactly what hiredis's redisFormatCommandArgv
 * would produce for the same arguments. */
#ifndef PS_WIRE_H
#define PS_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "codec.h"

/* Flags of a psWirePush. */
#define PS_WIRE_NO_ID (1 << 0)       /* leave out "ID client seq" */
#define PS_WIRE_NO_VERSION (1 << 1)  /* leave out "VERSION v" */

/* The arguments of one PS.PUSHGRAD besides its blob (a tensor's gradient,
 * or a table's rows by ids when 'ids' is set):
 *   PS.PUSHGRAD key blob [FORMAT f] [IDS idblob [IDFORMAT EF]] [VERSION v]
 *               [ID client seq] [SCALE s]
 * FORMAT is left out for F32 (the server's default). The ids are sent as
 * little-endian uint64 (idfmt PS_PROTO_IDFMT_RAW) or as an Elias-Fano list
 * (PS_PROTO_IDFMT_EF: the ids non-decreasing; common/idlist.h). */
typedef struct psWirePush {
    const char *key;
    size_t keylen;
    size_t bloblen;             /* the blob is sent between head and tail */
    ps_format fmt;
    int has_version;            /* send VERSION (unless PS_WIRE_NO_VERSION) */
    uint64_t version;
    const char *client_id;      /* NUL-terminated */
    uint64_t seq;
    float scale;                /* SCALE is sent when != 1 */
    int flags;                  /* PS_WIRE_NO_* */
    const uint64_t *ids;        /* NULL: a tensor push; else the 'nids' row ids */
    size_t nids;
    int idfmt;                  /* PS_PROTO_IDFMT_RAW or _EF (common/protocol.h) */
} psWirePush;

/* Room the tail of any PS.PUSHGRAD needs with a client id of at most
 * 'idlen' bytes (without IDS; PS_WIRE_PUSH_IDS_TAIL_MAX with). */
#define PS_WIRE_PUSH_TAIL_MAX(idlen) (160 + (idlen))

/* Tail room PS.PUSHGRAD by ids needs for 'nids' ids and a client id of at
 * most 'idlen' bytes. */
#define PS_WIRE_PUSH_IDS_TAIL_MAX(nids, idlen) (224 + 8 * (size_t)(nids) + (idlen))

/* Encode the RESP text of PS.PUSHGRAD 'a' in two parts, the blob going in
 * between: 'head' ends with the blob's "$<len>\r\n", 'tail' starts with the
 * blob's "\r\n". Writes at most 'headcap' / 'tailcap' bytes. Returns 0 and
 * the lengths, or -1 when a buffer is too small (*headlen then holds the
 * head room needed). */
int ps_wire_pushgrad(const psWirePush *a, char *head, size_t headcap, size_t *headlen,
                     char *tail, size_t tailcap, size_t *taillen);

/* Head room PS.PUSHGRAD needs for a key of 'keylen' bytes. */
size_t ps_wire_pushgrad_head_size(size_t keylen);

/* The arguments of one PS.PULL:
 *   PS.PULL key [IDS idblob [IDFORMAT EF]] [FORMAT f] [MINVERSION v TIMEOUT ms] [AT name]
 * IDS (a table's rows; 'nids' ids in id format 'idfmt', as psWirePush) when
 * 'ids' is set; FORMAT left out for F32; MINVERSION / TIMEOUT (a tensor pull
 * that waits on the server) when 'minversion' > 0 (0 waits for nothing:
 * every version is >= 0), TIMEOUT 0 waiting without a limit; AT (a snapshot's
 * values) when 'at' is set. A NULL 'key' is the bare "PS.PULL" (no
 * arguments: the module probe, answered with an arity error). */
typedef struct psWirePull {
    const char *key;
    size_t keylen;
    ps_format fmt;
    uint64_t minversion;
    int timeout_ms;
    const uint64_t *ids;        /* NULL: a tensor pull */
    size_t nids;
    int idfmt;                  /* PS_PROTO_IDFMT_RAW or _EF */
    const char *at;             /* NULL, or the snapshot name (NUL-terminated) */
} psWirePull;

/* Encode PS.PULL 'a' into 'buf' (room 'cap'). Returns the length, or the
 * length needed when it exceeds 'cap' (nothing useful written then). */
size_t ps_wire_pull(const psWirePull *a, char *buf, size_t cap);

/* ---- embedding tables (embed.c) -------------------------------------- */

/* Bytes of the IDS blob of 'nids' ids in id format 'idfmt' (EF: the ids
 * non-decreasing, nids >= 1). */
size_t ps_wire_ids_size(const uint64_t *ids, size_t nids, int idfmt);

/* "PS.SNAPSHOT key name" ('name' NUL-terminated), as ps_wire_pull(). */
size_t ps_wire_snapshot(const char *key, size_t keylen, const char *name, char *buf, size_t cap);

/* ---- a relay's ACCUM tensors (accum.c) -------------------------------- */
/* Each encodes its command into 'buf' (room 'cap') and returns the length,
 * or the length needed when it exceeds 'cap' (nothing useful written). */

/* The arguments of one PS.CREATE (a model's tensor partition, model.c; a
 * table's shard, embed.c; a relay's ACCUM tensor, accum.c):
 *   PS.CREATE key SHAPE d1 .. dn <opts> [NX]      (ndim >= 1: a tensor)
 *   PS.CREATE key EMBEDDING DIM d <opts> [NX]     (ndim 0: a table)
 * 'opts' are the option tokens as given, except that opts[seed_at] (when
 * seed_at >= 0) is sent as the decimal 'seed' (a partition's own seed). */
typedef struct psWireCreate {
    const char *key;
    size_t keylen;
    int ndim;                   /* 0..8 */
    const uint64_t *dims;
    int dim;                    /* ndim 0: DIM */
    const char *const *opts;
    int nopts;
    int seed_at;                /* -1: none */
    uint64_t seed;
    int nx;                     /* send NX */
} psWireCreate;

#define PS_WIRE_CREATE_MAXARGS 96

/* The arguments of PS.CREATE 'a' into 'argv' / 'argl' (room 'maxargs'; the
 * numbers printed into 'nb', room 'maxargs' too). Returns argc, or -1 when
 * they need more than 'maxargs' (or ndim > 8). */
int ps_wire_create_argv(const psWireCreate *a, char nb[][24], const char **argv, size_t *argl,
                        int maxargs);

/* PS.CREATE 'a' encoded into 'buf' (room 'cap'): the length, or the length
 * needed when it exceeds 'cap' (nothing useful written); 0 when it needs
 * more than PS_WIRE_CREATE_MAXARGS arguments. */
size_t ps_wire_create(const psWireCreate *a, char *buf, size_t cap);

/* "PS.TAKE key MINCOUNT m SEQFLOOR f MAXROUND r [MAXBACKLOG b]" (b < 0: left
 * out, the tensor keeps its bound). */
size_t ps_wire_accum_take(const char *key, size_t keylen, uint64_t mincount, uint64_t seqfloor,
                          uint64_t maxround, int64_t maxbacklog, char *buf, size_t cap);

/* "PS.TAKEWAIT key MINCOUNT m TIMEOUT ms" */
size_t ps_wire_accum_wait(const char *key, size_t keylen, uint64_t mincount, uint64_t timeout_ms,
                          char *buf, size_t cap);

/* "PS.TAKEACK key seq" */
size_t ps_wire_accum_ack(const char *key, size_t keylen, uint64_t seq, char *buf, size_t cap);

/* The head of "PS.MIRROR key version <blob>": it ends with the blob's
 * "$<bloblen>\r\n"; the blob and "\r\n" follow. */
size_t ps_wire_accum_mirror_head(const char *key, size_t keylen, uint64_t version,
                                 size_t bloblen, char *buf, size_t cap);

/* The arguments of "PS.SCORE key MODEL m COUNTS countblob IDS idblob
 * [VALS valblob] BIAS b" into 'argv' / 'argl' (room PS_WIRE_SCORE_MAXARGS;
 * the blobs point into the caller's arrays, the bias text into 'biasbuf' of
 * 'biascap' >= 32 bytes, printed so that it parses back to the same float).
 * 'model' 0 = LR, 1 = FM, 2 = MLP: then "FIELDS fieldblob FIELDCOUNT
 * nfields" ('fields': nids uint32s; the number printed into 'biasbuf') in
 * place of BIAS. Returns argc. */
#define PS_WIRE_SCORE_MAXARGS 14
int ps_wire_score_argv(const char *key, size_t keylen, int model, const uint32_t *counts,
                       size_t n, const uint64_t *ids, size_t nids, const float *vals, float bias,
                       const uint32_t *fields, uint32_t nfields, char *biasbuf, size_t biascap,
                       const char **argv, size_t *argl);

/* ---- a table's incremental export (export.c) -------------------------- */

/* The arguments of "PS.SCANROWS key cursor SINCE since COUNT count FORMAT f
 * [GONE]" into 'argv' / 'argl' (room PS_WIRE_SCAN_MAXARGS); the numbers are
 * printed into 'numbuf' (room >= 64). Returns argc. */
#define PS_WIRE_SCAN_MAXARGS 10
int ps_wire_scanrows_argv(const char *key, size_t keylen, uint64_t cursor, uint64_t since,
                          uint64_t count, ps_format fmt, int gone, char *numbuf,
                          const char **argv, size_t *argl);

/* "PS.TOMBSTONES key cursor SINCE since COUNT count", as above. */
int ps_wire_tombstones_argv(const char *key, size_t keylen, uint64_t cursor, uint64_t since,
                            uint64_t count, char *numbuf, const char **argv, size_t *argl);

/* ---- the ring (issue #22; ring.c) ------------------------------------
 * Each encoder writes the whole command, blobs included, into 'buf' (room
 * 'cap') and returns its length, or the length needed when it exceeds
 * 'cap' (nothing useful written then). */

#define PS_WIRE_RING_TRACK 0
#define PS_WIRE_RING_STATE 1
#define PS_WIRE_RING_JOIN 2
#define PS_WIRE_RING_UNTRACK 3
#define PS_WIRE_RING_ROWS 4      /* a table's JOIN (docs/commands.md "Ring commands") */
#define PS_WIRE_RING_JOINBEGIN 5
#define PS_WIRE_RING_JOINROWS 6
#define PS_WIRE_RING_JOINEND 7

/* The arguments of one PS.RING:
 *   PS.RING key TRACK origin [MAXQUEUE bytes] [MAXLAG pushes]
 *   PS.RING key STATE
 *   PS.RING key UNTRACK
 *   PS.RING key JOIN origin values [FROM origin seq]... [KEEPOWN]
 *   PS.RING key ROWS u1 COUNT u2           (cursor, count)
 *   PS.RING key JOINBEGIN origin [FROM origin seq]...
 *   PS.RING key JOINROWS u1 ids values     (page; 'ids' nids u64, 'values' the F32 rows)
 *   PS.RING key JOINEND u1 u2              (pages, rows) */
typedef struct psWireRing {
    const char *key;
    size_t keylen;
    int op;                      /* PS_WIRE_RING_* */
    const char *origin;          /* TRACK, JOIN: NUL-terminated */
    int64_t maxqueue;            /* TRACK: MAXQUEUE (< 0: left out) */
    int64_t maxlag;              /* TRACK: MAXLAG (< 0: left out) */
    const float *values;         /* JOIN: the values blob */
    size_t nvalues;
    const char *const *from_origin; /* JOIN: the FROM pairs */
    const uint64_t *from_seq;
    size_t nfrom;
    int keepown;                 /* JOIN: send KEEPOWN (keep the group's own change) */
    uint64_t u1, u2;             /* ROWS, JOINROWS, JOINEND: the numbers above */
    const uint64_t *ids;         /* JOINROWS: the row ids */
    size_t nids;
} psWireRing;

size_t ps_wire_ring(const psWireRing *a, char *buf, size_t cap);

/* PS.DELTATAKE key [SEQFLOOR s] [THRESHOLD r] [MAXELEMS m]: each option is
 * left out when 0. */
size_t ps_wire_delta_take(const char *key, size_t keylen, uint64_t seqfloor, double threshold,
                          uint64_t maxelems, char *buf, size_t cap);

/* PS.DELTAACK key seq */
size_t ps_wire_delta_ack(const char *key, size_t keylen, uint64_t seq, char *buf, size_t cap);

/* PS.APPLYDELTA key ID origin seq idxblob valblob [HOPS h] [PREV p]
 * ('count' u32 indices and F32 values; HOPS left out when 'hops' < 0, PREV
 * when 'prev' is 0). */
size_t ps_wire_apply_delta_prev(const char *key, size_t keylen, const char *origin, uint64_t seq,
                                const uint32_t *idx, const float *vals, size_t count,
                                int64_t hops, uint64_t prev, char *buf, size_t cap);

/* The same with the delta's two blobs as they go on the wire: 'idx' of
 * 'idxlen' bytes (u32 element indices of a tensor, or u64 row ids of a
 * table) and 'vals' of 'vlen' bytes (F32). */
size_t ps_wire_apply_delta_blobs(const char *key, size_t keylen, const char *origin, uint64_t seq,
                                 const void *idx, size_t idxlen, const void *vals, size_t vlen,
                                 int64_t hops, uint64_t prev, char *buf, size_t cap);

/* The same without PREV. */
static inline size_t ps_wire_apply_delta(const char *key, size_t keylen, const char *origin,
                                         uint64_t seq, const uint32_t *idx, const float *vals,
                                         size_t count, int64_t hops, char *buf, size_t cap) {
    return ps_wire_apply_delta_prev(key, keylen, origin, seq, idx, vals, count, hops, 0, buf, cap);
}

/* PS.DELTAFWD key */
size_t ps_wire_delta_fwd(const char *key, size_t keylen, char *buf, size_t cap);

/* PS.INFO key (the ring agent's pipelined reads, psRingSend) */
size_t ps_wire_info(const char *key, size_t keylen, char *buf, size_t cap);

/* PS.DELTAFWDACK key origin seq */
size_t ps_wire_delta_fwdack(const char *key, size_t keylen, const char *origin, uint64_t seq,
                            char *buf, size_t cap);

#endif /* PS_WIRE_H */
