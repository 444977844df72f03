/* ps_serve.h -- libps, the calls for serving: scoring and incremental export of tables.
 *
 * Part of the libps API: <redis-ps/ps.h> includes this file, so a program
 * includes ps.h alone (including this file first works too). */
#ifndef PS_SERVE_H
#define PS_SERVE_H

#include "ps.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------
 * Scoring (serving the LR / FM models ps-train trains, and the embedding
 * part of its MLP)
 *
 * The logit of a sample whose features j have ids[j] and values vals[j] is
 *   z = bias + sum_j w_j x_j + 1/2 (sum_f s_f^2 - sum_j,f (v_jf x_j)^2),
 *   s_f = sum_j v_jf x_j,
 * with the table's row of ids[j] = [w_j, v_j1 .. v_jk] (LR: dim 1, FM: dim
 * k + 1), computed in double in one fixed order (docs/commands.md
 * "PS.SCORE"): the trainer's forward pass, bit for bit, on the same rows.
 * ------------------------------------------------------------------------ */

#define PS_SCORE_MODEL_LR 0 /* rows of dim 1 */
#define PS_SCORE_MODEL_FM 1 /* rows of dim >= 2 */

/* Logits of 'n' samples into 'out' (n doubles). Sample i has counts[i]
 * features, the next ones of 'ids' (and of 'vals', NULL: every value 1), in
 * sample order. 'bias' is the job's float32 bias (ps-train's "bias" tensor,
 * read with psModelPull). A table of one shard is scored by the server: one
 * PS.SCORE (read-only; a client connected to a replica is served by it).
 * A table of several shards is scored here: each shard's rows are pulled in
 * parallel (psEmbedPull, the handle's pull format) and the same kernel runs
 * on them, so with F32 pulls (the default) the logits are the same bits as
 * PS.SCORE's and the trainer's. Ids absent from the table read as a pull
 * answers them (initial values, or zeros with UNKNOWN ZEROS). Returns PS_OK,
 * or PS_ERR (PS_ERR_ARG for a bad model, PS_ERR_SERVER with the server's
 * error: a table of the wrong dim for the model, a batch over
 * ps.max-pull-bytes, ...). */
int psScore(psClient *c, psEmbed *e, int model, float bias, size_t n, const uint32_t *counts,
            const uint64_t *ids, const float *vals, double *out);

#define PS_SCORE_MODEL_MLP 2   /* psScorePool: rows of any dim */
#define PS_SCORE_MAX_FIELDS 256 /* most fields an MLP input pools */

/* The MLP's pooled embedding inputs of 'n' samples into 'out' (n x nfields
 * x dim floats, sample-major): sample i's slot f is the float32 sum, in
 * feature order, of vals[j] * row(ids[j]) over its features j with
 * fields[j] == f (a field with no feature is zeros) -- the first nfields x
 * dim inputs of ps-train's MLP (--model mlp --fields nfields), the same
 * bits (docs/commands.md "PS.SCORE", MODEL MLP). counts, ids and vals as
 * psScore; fields[j] (each < nfields, 1 <= nfields <= PS_SCORE_MAX_FIELDS)
 * the field of feature j. The dense layers are then the caller's (the job's
 * tensors "W<l>"/"b<l>", read with psModelPull). One shard: one PS.SCORE
 * MODEL MLP (read-only; a replica answers it); several: the rows pulled in
 * parallel (psEmbedPull, the handle's pull format: F32, the default, for
 * the same bits) and the same kernel run here. Returns PS_OK, or PS_ERR
 * (PS_ERR_ARG: nfields or a field out of range, before anything is sent;
 * PS_ERR_SERVER with the server's error, e.g. ps.max-pull-bytes). */
int psScorePool(psClient *c, psEmbed *e, uint32_t nfields, size_t n, const uint32_t *counts,
                const uint64_t *ids, const float *vals, const uint32_t *fields, float *out);

/* ------------------------------------------------------------------------
 * Incremental export of a table shard (docs/design.md "Tombstones and
 * incremental export"; ps-export uses these). A consumer that holds a copy
 * complete as of version S gets up to date by reading every page of
 * psTableTombstones(since S) (rows removed since), then every page of
 * psTableScan(since S, gone 1) (rows changed since, and rows dead by TTL),
 * and is then complete as of the version the first page answered. Both are
 * read-only: a replica answers them.
 * ------------------------------------------------------------------------ */

typedef struct psScanPage {
    uint64_t cursor;          /* the next cursor; 0: done */
    uint64_t version;         /* the table version that answered the page */
    uint64_t horizon;         /* psTableTombstones: the log's horizon */
    size_t nrows;             /* psTableScan: rows changed since */
    const uint64_t *ids;      /* nrows ids */
    const void *values;       /* nrows * dim values in the scan's format */
    size_t value_bytes;       /* bytes at 'values' */
    size_t ngone;             /* ids of rows gone (removed, or dead by TTL) */
    const uint64_t *gone;
    void *priv;               /* owned: psScanPageFree() */
} psScanPage;

#define PS_SCAN_MAX_COUNT (1u << 20) /* the server's COUNT bound */

/* One PS.SCANROWS key cursor SINCE since COUNT count FORMAT fmt [GONE] page
 * (fmt PS_WIRE_F32, _F16 or _BF16). PS_OK or PS_ERR; free the page with
 * psScanPageFree() either way. */
int psTableScan(psClient *c, const char *key, uint64_t cursor, uint64_t since, uint64_t count,
                psWireFormat fmt, int gone, psScanPage *out);

/* One PS.TOMBSTONES key cursor SINCE since COUNT count page. PS_OK, or
 * PS_ERR with c->err PS_ERR_REBASE when 'since' is at or before the log's
 * horizon (or after the version, or 0): the rows gone since are not known,
 * so the consumer must export every row again (psTableScan since 0) and drop
 * what it holds that the scan did not answer. */
int psTableTombstones(psClient *c, const char *key, uint64_t cursor, uint64_t since,
                      uint64_t count, psScanPage *out);

void psScanPageFree(psScanPage *p);


#ifdef __cplusplus
}
#endif

#endif /* PS_SERVE_H */
