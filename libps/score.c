/* score.c -- psScore (ps.h "Scoring"): the LR / FM logits of a batch of
 * samples against a sharded table, and psScorePool: the MLP's pooled
 * embedding inputs. One shard: the server's PS.SCORE. Several shards: the
 * rows are pulled per shard and common/ctr_score.c's kernel (the server's
 * and the trainer's) runs here, in the same order, because an FM logit (or
 * a field's float32 sum) does not split into per-shard sums without
 * changing its bits. */
#include <stdlib.h>
#include <string.h>

#include "ctr_score.h"
#include "protocol.h"
#include "ps_internal.h"
#include "wire.h"

_Static_assert(PS_SCORE_MODEL_LR == PS_SCORE_LR && PS_SCORE_MODEL_FM == PS_SCORE_FM &&
                   PS_SCORE_MODEL_MLP == PS_SCORE_MLP,
               "ps.h's model codes are common/ctr_score.h's");
_Static_assert(PS_SCORE_MAX_FIELDS == PS_CTR_POOL_MAX_FIELDS, "one field limit");

/* One PS.SCORE on the table's only shard (MODEL 'model'; the MLP's 'fields'
 * and 'nf', else NULL and 0); its reply blob, which must be 'want' bytes,
 * into 'out'. */
static int score_on_server(psClient *c, psEmbed *e, int model, float bias, size_t n,
                           const uint32_t *counts, const uint64_t *ids, size_t nids,
                           const float *vals, const uint32_t *fields, uint32_t nf, void *out,
                           size_t want) {
    const char *argv[PS_WIRE_SCORE_MAXARGS];
    size_t argl[PS_WIRE_SCORE_MAXARGS];
    char numbuf[32];
    const char *key = psEmbedShardKey(e, 0);
    int argc = ps_wire_score_argv(key, strlen(key), model, counts, n, ids, nids, vals, bias, fields,
                                  nf, numbuf, sizeof(numbuf), argv, argl);
    redisReply *r = psCommandArgv(c, key, argc, argv, argl);
    if (r == NULL) return PS_ERR;
    int rc = PS_OK;
    if (r->type == REDIS_REPLY_ERROR) {
        int nokey = psi_reply_error(r) == PS_PROTO_ERR_NOKEY;
        psi_set_error(c, nokey ? PS_ERR_NOKEY : PS_ERR_SERVER, "%s: %s", key, r->str);
        rc = PS_ERR;
    } else if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
               r->element[1]->type != REDIS_REPLY_STRING || r->element[1]->len != want) {
        psi_set_error(c, PS_ERR_PROTOCOL, "%s: unexpected PS.SCORE reply", key);
        rc = PS_ERR;
    } else {
        memcpy(out, r->element[1]->str, want);
    }
    freeReplyObject(r);
    return rc;
}

int psScore(psClient *c, psEmbed *e, int model, float bias, size_t n, const uint32_t *counts,
            const uint64_t *ids, const float *vals, double *out) {
    int dim = psEmbedDim(e);
    if (model != PS_SCORE_MODEL_LR && model != PS_SCORE_MODEL_FM) {
        psi_set_error(c, PS_ERR_ARG, "psScore: model %d is not PS_SCORE_MODEL_LR or _FM", model);
        return PS_ERR;
    }
    if ((model == PS_SCORE_MODEL_LR) != (dim == 1)) {
        psi_set_error(c, PS_ERR_ARG, "psScore: model %s needs rows of dim %s; the table has dim %d",
                      model == PS_SCORE_MODEL_LR ? "LR" : "FM",
                      model == PS_SCORE_MODEL_LR ? "1" : ">= 2", dim);
        return PS_ERR;
    }
    if (n == 0) return PS_OK;
    size_t nids = 0;
    for (size_t i = 0; i < n; i++) nids += counts[i];
    if (psEmbedShards(e) == 1)
        return score_on_server(c, e, model, bias, n, counts, ids, nids, vals, NULL, 0, out,
                               8 * n);
    float *rows = malloc((nids ? nids : 1) * (size_t)dim * sizeof(float));
    double *s = malloc((size_t)dim * sizeof(double));
    if (rows == NULL || s == NULL) {
        free(rows);
        free(s);
        psi_set_error(c, PS_ERR_OOM, "psScore: out of memory for %zu rows of dim %d", nids, dim);
        return PS_ERR;
    }
    int rc = nids ? psEmbedPull(c, e, ids, nids, rows) : PS_OK;
    for (size_t i = 0, off = 0; rc == PS_OK && i < n; off += counts[i], i++)
        out[i] = ps_ctr_score_logit(bias, rows, (uint32_t)dim, NULL, vals, off, off + counts[i], s);
    free(rows);
    free(s);
    return rc;
}

int psScorePool(psClient *c, psEmbed *e, uint32_t nfields, size_t n, const uint32_t *counts,
                const uint64_t *ids, const float *vals, const uint32_t *fields, float *out) {
    int dim = psEmbedDim(e);
    if (nfields < 1 || nfields > PS_SCORE_MAX_FIELDS) {
        psi_set_error(c, PS_ERR_ARG, "psScorePool: nfields %u must be 1..%d", nfields,
                      PS_SCORE_MAX_FIELDS);
        return PS_ERR;
    }
    if (n == 0) return PS_OK;
    size_t nids = 0;
    for (size_t i = 0; i < n; i++) nids += counts[i];
    for (size_t j = 0; j < nids; j++) {
        if (fields[j] >= nfields) {
            psi_set_error(c, PS_ERR_ARG, "psScorePool: feature %zu has field %u; nfields %u",
                          j, fields[j], nfields);
            return PS_ERR;
        }
    }
    if (psEmbedShards(e) == 1)
        return score_on_server(c, e, PS_SCORE_MLP, 0.0f, n, counts, ids, nids, vals, fields,
                               nfields, out, 4 * n * (size_t)nfields * (size_t)dim);
    float *rows = malloc((nids ? nids : 1) * (size_t)dim * sizeof(float));
    if (rows == NULL) {
        psi_set_error(c, PS_ERR_OOM, "psScorePool: out of memory for %zu rows of dim %d", nids,
                      dim);
        return PS_ERR;
    }
    int rc = nids ? psEmbedPull(c, e, ids, nids, rows) : PS_OK;
    size_t per = (size_t)nfields * (size_t)dim;
    for (size_t i = 0, off = 0; rc == PS_OK && i < n; off += counts[i], i++)
        ps_ctr_pool(out + i * per, nfields, (uint32_t)dim, rows, NULL, fields, vals, off,
                    off + counts[i]);
    free(rows);
    return rc;
}
