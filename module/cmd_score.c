/* cmd_score.c -- PS.SCORE: the logits of a batch of samples under the LR or
 * FM model whose rows an embedding table holds, or the pooled embedding
 * input of ps-train's MLP (docs/commands.md "PS.SCORE"), for serving what
 * ps-train trains.
 *
 *   PS.SCORE key MODEL LR|FM COUNTS countblob IDS idblob [VALS valblob]
 *            [BIAS b] [FORMAT F64|VALUES]
 *   PS.SCORE key MODEL MLP COUNTS countblob IDS idblob [VALS valblob]
 *            FIELDS fieldblob FIELDCOUNT F [FORMAT F32|VALUES]
 *
 * The rows are read as PS.PULL key IDS reads them (PSEmbed_Pull: an absent,
 * dead or not yet admitted id answers its initial values, or zeros with
 * UNKNOWN ZEROS), which is what the trainer's forward pass sees when it
 * pulls the same ids, and the logit (or the MLP's pooled input) is
 * common/ctr_score.c's kernel, the one the trainer runs: same parameters,
 * same bits. Read-only: it creates,
 * changes and counts nothing, so it runs on replicas and under a read-only
 * ACL role; never replicated. Its memory and time are bounded by the request
 * and by ps.max-pull-bytes (ps_score_size, ps_score_pool_size: ps_limits.h). */

#include <float.h>
#include <math.h>
#include <string.h>

#include "cmd_score.h"
#include "ctr_score.h"
#include "embed_glue.h"
#include "args.h"
#include "ps_limits.h"

/* MODEL MLP: n x fields x dim float32s, each sample's pooled embedding input
 * (ps_ctr_pool), the trainer's first fields x dim inputs of the sample. */
static void score_mlp(RedisModuleCtx *ctx, PSEmbedValue *v, const PSScoreArgs *a) {
    const uint32_t dim = PSEmbed_Config(v->t)->dim, nf = a->nfields;
    const size_t n = a->n, nnz = (size_t)a->nnz, per = (size_t)nf * dim;
    uint64_t bytes;
    if (ps_score_pool_size(n, nnz, dim, nf, a->values_reply, (uint64_t)PSConf.max_pull_bytes,
                           &bytes) != 0) {
        ps_reply_errorf(ctx, PSERR_SCORE_POOL_BIG_F, (unsigned long long)n, nf,
                        (unsigned long long)nnz, dim, (unsigned long long)bytes,
                        (unsigned long long)PSConf.max_pull_bytes);
        return;
    }
    /* Scratch: the rows of every feature in order (nnz x dim floats), then
     * the pooled inputs (n x fields x dim); the values and field ids copied
     * aligned. */
    float *rows = ps_scratch((uint64_t)nnz * dim + (uint64_t)n * per);
    unsigned char *mem = ps_scratch_bytes(8 * nnz + 8);
    if (!rows || !mem) {
        RedisModule_ReplyWithError(ctx, PSERR_OOM);
        return;
    }
    float *out = rows + nnz * dim, *x = NULL;
    uint32_t *field = (uint32_t *)mem;
    memcpy(field, a->fields, 4 * nnz);
    if (a->vals) {
        x = (float *)(field + nnz);
        memcpy(x, a->vals, 4 * nnz);
    }
    if (nnz) PSEmbed_Pull(v->t, a->ids, nnz, rows);
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t c;
        memcpy(&c, a->counts + 4 * i, 4);
        ps_ctr_pool(out + i * per, nf, dim, rows, NULL, field, x, off, off + c);
        off += c;
    }
    RedisModule_ReplyWithArray(ctx, 2);
    RedisModule_ReplyWithLongLong(ctx, (long long)PSEmbed_Version(v->t));
    if (a->values_reply) {
        RedisModule_ReplyWithArray(ctx, (long)(n * per));
        for (size_t i = 0; i < n * per; i++) RedisModule_ReplyWithDouble(ctx, (double)out[i]);
    } else {
        RedisModule_ReplyWithStringBuffer(ctx, (const char *)out, 4 * n * per);
    }
}

int PSScore_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc < 2) return RedisModule_WrongArity(ctx);
    PSScoreArgs a;
    if (ps_args_score(ctx, argv, argc, &a) != REDISMODULE_OK) return REDISMODULE_OK;
    const size_t n = a.n;
    const uint64_t nnz = a.nnz;
    const int model = a.model, values_reply = a.values_reply;
    const float bias = a.bias;
    const unsigned char *cp = a.counts, *idp = a.ids, *vp = a.vals;
    const int vals = vp != NULL;

    RedisModuleKey *key;
    int empty;
    PSEmbedValue *v = ps_open_embed(ctx, argv[1], REDISMODULE_READ, &key, &empty);
    if (!v) {
        if (empty) RedisModule_ReplyWithError(ctx, PSERR_NOKEY);
        RedisModule_CloseKey(key);
        return REDISMODULE_OK;
    }
    const uint32_t dim = PSEmbed_Config(v->t)->dim;
    if (model == PS_SCORE_MLP) {
        score_mlp(ctx, v, &a);
        goto done;
    }
    if ((model == PS_SCORE_LR) != (dim == 1)) {
        ps_reply_errorf(ctx, PSERR_SCORE_DIM_F, model == PS_SCORE_LR ? "LR" : "FM",
                        model == PS_SCORE_LR ? "1" : ">= 2 (w and k >= 1 factors)", dim);
        goto done;
    }
    uint64_t bytes;
    if (ps_score_size(n, nnz, dim, values_reply, (uint64_t)PSConf.max_pull_bytes, &bytes) != 0) {
        ps_reply_errorf(ctx, PSERR_SCORE_BIG_F, (unsigned long long)n, (unsigned long long)nnz,
                        dim, (unsigned long long)bytes, (unsigned long long)PSConf.max_pull_bytes);
        goto done;
    }
    /* Scratch: the rows of every feature in order (nnz x dim floats), then
     * the logits (n doubles), FM's k sums and the values copied aligned. */
    float *rows = nnz ? ps_scratch(nnz * dim) : NULL;
    size_t k = dim - 1;
    unsigned char *mem = ps_scratch_bytes(8 * (n + k) + 4 * (size_t)nnz);
    if ((nnz && !rows) || !mem) {
        RedisModule_ReplyWithError(ctx, PSERR_OOM);
        goto done;
    }
    double *z = (double *)mem, *s = z + n;
    float *x = NULL;
    if (vals) {
        x = (float *)(s + k);
        memcpy(x, vp, 4 * (size_t)nnz);
    }
    if (nnz) PSEmbed_Pull(v->t, idp, (size_t)nnz, rows);
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t c;
        memcpy(&c, cp + 4 * i, 4);
        z[i] = ps_ctr_score_logit(bias, rows, dim, NULL, x, off, off + c, s);
        off += c;
    }
    RedisModule_ReplyWithArray(ctx, 2);
    RedisModule_ReplyWithLongLong(ctx, (long long)PSEmbed_Version(v->t));
    if (values_reply) {
        RedisModule_ReplyWithArray(ctx, (long)n);
        for (size_t i = 0; i < n; i++) RedisModule_ReplyWithDouble(ctx, z[i]);
    } else {
        RedisModule_ReplyWithStringBuffer(ctx, (const char *)z, 8 * n);
    }
done:
    RedisModule_CloseKey(key);
    return REDISMODULE_OK;
}
