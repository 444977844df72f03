/* embed.c -- sharded embedding tables of libps (ps.h "Embedding tables"):
 * the shard mapping.
 *
 * A psEmbed is 'nshards' server tables (PS.CREATE key EMBEDDING); an id
 * lives in shard mix64(id) % nshards. A pull splits the caller's ids per
 * shard into one key pull by ids per shard of the batch layer (batch.h),
 * which scatters each shard's rows back to the caller's positions as the
 * reply is read. A push splits the gradient rows the same way (summing
 * repeated ids when asked, with error feedback for lossy formats) into one
 * key push by ids per shard; the batch layer sends, resends and WAITs for
 * them and interprets the replies. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "raw.h"
#include "resid.h"
#include "wire.h"

/* ========================================================================
 * Structures
 * ======================================================================== */

/* A growable array of 'n' items of 'size' bytes at '*p' with room '*cap'.
 * 0 or -1 (out of memory, '*p' unchanged). */
static int grow(void *pp, size_t *cap, size_t n, size_t size) {
    void **p = pp;
    void *np;
    if (*cap >= n) return 0;
    if ((np = realloc(*p, (n < 16 ? 16 : n) * size)) == NULL) return -1;
    *p = np;
    *cap = n < 16 ? 16 : n;
    return 0;
}

typedef struct psEmbedShard {
    psKey k;                    /* its key, versions and seqs (batch.h) */
    psPull pull;                /* the pull in progress (batch.h) */
    uint64_t *ids;              /* this shard's ids of the pull, in the caller's order */
    size_t *pos;                /* their positions in the caller's arrays */
    size_t nids, idcap, poscap;
} psEmbedShard;

struct psEmbed {
    char *name;
    int dim, nshards;
    psEmbedShard *shards;
    ps_format push_fmt, pull_fmt;
    psUser user;                /* its requests on a client (batch.h): a push window
                                   of its own */
    float *rows;                /* push scratch: one shard's gathered rows */
    size_t rowcap;
    int64_t *slot_of;           /* push scratch: id hash table (sum duplicates) */
    size_t slotcap;
    int *shard_of;              /* push scratch: shard of each id */
    size_t shardcap;
    psResid fb;                 /* error-feedback residuals of lossy pushes (fb.max 0: off) */
    float *dec;                 /* push scratch: the encoded rows decoded back */
    size_t deccap;
};

/* ========================================================================
 * Layout: shard of an id, shard keys
 * ======================================================================== */

int psEmbedShardOf(uint64_t id, int nshards) {
    uint64_t z = id;
    if (nshards <= 1) return 0;
    z ^= z >> 30;
    z *= 0xbf58476d1ce4e5b9ULL;
    z ^= z >> 27;
    z *= 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return (int)(z % (uint64_t)nshards);
}

/* The smallest decimal tag whose hash slot is in shard 's''s slot range. */
static unsigned long shard_tag(int s, int nshards) {
    unsigned lo = (unsigned)((long)s * PS_CLUSTER_SLOTS / nshards);
    unsigned hi = (unsigned)((long)(s + 1) * PS_CLUSTER_SLOTS / nshards);
    char b[24];
    for (unsigned long t = 0;; t++) {
        int k = snprintf(b, sizeof(b), "%lu", t);
        unsigned slot = ps_key_hash_slot(b, (size_t)k);
        if (slot >= lo && slot < hi) return t;
    }
}

psEmbed *psEmbedNew(const char *name, int dim, int nshards) {
    psEmbed *e;
    if (name == NULL || strpbrk(name, "{}") != NULL || dim < 1 || dim > 65536 || nshards < 1 ||
        nshards > PS_CLUSTER_SLOTS)
        return NULL;
    if ((e = calloc(1, sizeof(*e))) == NULL) return NULL;
    e->dim = dim;
    e->nshards = nshards;
    e->name = strdup(name);
    e->shards = calloc((size_t)nshards, sizeof(psEmbedShard));
    if (e->name == NULL || e->shards == NULL) goto oom;
    psi_user_init(&e->user, "table", e->name, "", 1);
    snprintf(e->user.shape_hint, sizeof(e->user.shape_hint), "not a table of dim %d?", dim);
    for (int s = 0; s < nshards; s++) {
        psEmbedShard *sh = &e->shards[s];
        size_t len = strlen(name) + 48;
        if ((sh->k.key = malloc(len)) == NULL) goto oom;
        sh->k.keylen = (size_t)snprintf(sh->k.key, len, "%s:%d{%lu}", name, s,
                                        shard_tag(s, nshards));
    }
    return e;
oom:
    psEmbedFree(e);
    return NULL;
}

int psEmbedDim(const psEmbed *e) {
    return e->dim;
}

int psEmbedShards(const psEmbed *e) {
    return e->nshards;
}

const char *psEmbedShardKey(const psEmbed *e, int s) {
    return s >= 0 && s < e->nshards ? e->shards[s].k.key : NULL;
}

uint64_t psEmbedShardVersion(const psEmbed *e, int s) {
    return s >= 0 && s < e->nshards ? e->shards[s].k.version : 0;
}

int psEmbedSetPushFormat(psEmbed *e, psWireFormat fmt) {
    ps_format f; /* the formats tables take (common/protocol.h) */
    if (psi_format(fmt, &f) != 0 || !ps_proto_format_table(f)) return PS_ERR;
    e->push_fmt = f;
    return PS_OK;
}

int psEmbedSetErrorFeedback(psEmbed *e, size_t max_ids) {
    psi_resid_free(&e->fb);
    psi_resid_init(&e->fb, e->dim, max_ids);
    return PS_OK;
}

/* Whether pushes carry error feedback: a lossy format and a residual table. */
static int feedback_on(const psEmbed *e) { return e->fb.max > 0 && e->push_fmt != PS_FMT_F32; }

int psEmbedSetPullFormat(psEmbed *e, psWireFormat fmt) {
    ps_format f;
    if (psi_format(fmt, &f) != 0 || !ps_proto_format_table(f)) return PS_ERR;
    e->pull_fmt = f;
    return PS_OK;
}

void psEmbedFree(psEmbed *e) {
    if (e == NULL) return;
    /* The engine points into the table while its requests are in flight:
     * wait for them first (a pull in flight is abandoned). */
    psi_user_free(&e->user);
    for (int s = 0; e->shards && s < e->nshards; s++) {
        free(e->shards[s].k.key);
        psi_pull_free(&e->shards[s].pull);
        free(e->shards[s].ids);
        free(e->shards[s].pos);
    }
    free(e->shards);
    free(e->rows);
    free(e->slot_of);
    free(e->shard_of);
    psi_resid_free(&e->fb);
    free(e->dec);
    free(e->name);
    free(e);
}

/* ========================================================================
 * Create, delete
 * ======================================================================== */

/* Send to every shard, pipelined, "PS.CREATE key EMBEDDING DIM d 'opts'
 * [NX]" ('create') or "DEL key". Returns the shards created (OK replies) or
 * keys deleted, or PS_ERR (the first error reply recorded). */
static int per_shard(psClient *c, psEmbed *e, const char *opts, int nx, int create) {
    psRawReq *qs = calloc((size_t)e->nshards, sizeof(*qs));
    char *optcopy = opts ? strdup(opts) : NULL;
    const char *argv[80], *tok[80];
    size_t argl[80];
    char nb[80][24];
    int argc = 0, ntok = 0, n = 0, s;
    psi_clear_error(c);
    if (qs == NULL || (opts && optcopy == NULL)) {
        free(qs);
        free(optcopy);
        psi_set_error(c, PS_ERR_OOM, "out of memory");
        return PS_ERR;
    }
    for (char *t = create && optcopy ? strtok(optcopy, " \t") : NULL; t; t = strtok(NULL, " \t")) {
        if (ntok == 73) { /* PS.CREATE key EMBEDDING DIM d, 73 options, NX: within 80 */
            free(qs);
            free(optcopy);
            psi_set_error(c, PS_ERR_ARG, "too many create options");
            return PS_ERR;
        }
        tok[ntok++] = t;
    }
    for (s = 0; s < e->nshards; s++) {
        char *cmd = NULL;
        int len;
        if (create) {
            psWireCreate a = {e->shards[s].k.key, e->shards[s].k.keylen, 0, NULL, e->dim,
                              tok, ntok, -1, 0, nx};
            argc = ps_wire_create_argv(&a, nb, argv, argl, 80);
        } else {
            argc = 2;
            argv[0] = "DEL";
            argl[0] = 3;
            argv[1] = e->shards[s].k.key;
            argl[1] = e->shards[s].k.keylen;
        }
        len = argc < 0 ? -1 : redisFormatCommandArgv(&cmd, argc, argv, argl);
        if (len < 0) {
            psi_set_error(c, PS_ERR_OOM, "out of memory");
            break;
        }
        psi_raw_init(&qs[s], e->shards[s].k.key, cmd, (size_t)len);
    }
    if (!c->err) psi_raw_run(c, qs, (size_t)e->nshards);
    for (s = 0; s < e->nshards; s++) {
        redisReply *r = qs[s].reply;
        if (r && r->type == REDIS_REPLY_ERROR)
            psi_set_error(c, PS_ERR_SERVER, "%s %s: %.160s", create ? "PS.CREATE" : "DEL",
                          e->shards[s].k.key, r->str);
        else if (r && create && r->type == REDIS_REPLY_STATUS)
            n++;
        else if (r && !create && r->type == REDIS_REPLY_INTEGER)
            n += (int)r->integer;
        else if (r == NULL && !c->err)
            psi_set_error(c, PS_ERR_OTHER, "no reply");
        if (r) freeReplyObject(r);
        psi_raw_free(&qs[s]);
    }
    free(qs);
    free(optcopy);
    return c->err ? PS_ERR : n;
}

int psEmbedCreate(psClient *c, psEmbed *e, const char *create_opts, int nx) {
    return per_shard(c, e, create_opts, nx, 1);
}

int psEmbedDelete(psClient *c, psEmbed *e) { return per_shard(c, e, NULL, 0, 0); }

/* ========================================================================
 * Pulls
 * ======================================================================== */

/* Split 'n' ids over the shards: each shard's ids and positions, in the
 * caller's order. 0 or -1 (out of memory). */
static int split_pull(psEmbed *e, const uint64_t *ids, size_t n) {
    int s;
    for (s = 0; s < e->nshards; s++) e->shards[s].nids = 0;
    for (size_t i = 0; i < n; i++) {
        psEmbedShard *sh = &e->shards[psEmbedShardOf(ids[i], e->nshards)];
        if (grow(&sh->ids, &sh->idcap, sh->nids + 1 + sh->nids / 2, sizeof(uint64_t)) ||
            grow(&sh->pos, &sh->poscap, sh->nids + 1 + sh->nids / 2, sizeof(size_t)))
            return -1;
        sh->ids[sh->nids] = ids[i];
        sh->pos[sh->nids++] = i;
    }
    return 0;
}

int psEmbedPullAsync(psClient *c, psEmbed *e, const uint64_t *ids, size_t n, float *dst) {
    int s;
    psi_clear_error(c);
    if (n > 0 && (ids == NULL || dst == NULL)) {
        psi_set_error(c, PS_ERR_ARG, "psEmbedPull: ids and dst are required");
        return PS_ERR;
    }
    if (psi_user_attach(c, &e->user) != 0) return PS_ERR;
    if (e->user.pull.open) {
        psi_set_error(c, PS_ERR_ARG, "a pull of table '%s' is already in flight", e->name);
        return PS_ERR;
    }
    if (split_pull(e, ids, n) != 0) {
        psi_set_error(c, PS_ERR_OOM, "out of memory");
        return PS_ERR;
    }
    for (s = 0; s < e->nshards; s++) {
        psEmbedShard *sh = &e->shards[s];
        sh->k.seen_now = 0;
        if (sh->nids == 0) continue;
        if (psi_pull_ids(&sh->pull, &e->user, &sh->k, e->pull_fmt, sh->ids, sh->nids, sh->pos,
                         dst, (size_t)e->dim) != 0) {
            psi_set_error(c, PS_ERR_OOM, "out of memory");
            return PS_ERR;
        }
    }
    psi_pulls_begin(&e->user);
    for (s = 0; s < e->nshards; s++)
        if (e->shards[s].nids) psi_pull_submit(c, &e->shards[s].pull);
    return psi_pulls_sent(c, &e->user);
}

int psEmbedPullWait(psClient *c, psEmbed *e) {
    psi_clear_error(c);
    if (!e->user.pull.open) {
        psi_set_error(c, PS_ERR_ARG, "no pull of table '%s' in flight", e->name);
        return PS_ERR;
    }
    psi_pulls_wait(c, &e->user);
    /* What pushes send as VERSION from now on: the versions of the rows
     * this pull delivered (not of a later pull's replies read meanwhile). */
    for (int s = 0; s < e->nshards; s++) psi_key_take_pulled(&e->shards[s].k);
    return c->err ? PS_ERR : PS_OK;
}

int psEmbedPull(psClient *c, psEmbed *e, const uint64_t *ids, size_t n, float *dst) {
    if (psEmbedPullAsync(c, e, ids, n, dst) != PS_OK) return PS_ERR;
    return psEmbedPullWait(c, e);
}

/* ========================================================================
 * Pushes
 * ======================================================================== */

static uint64_t id_hash(uint64_t id) {
    return id * 0x9e3779b97f4a7c15ULL;
}

/* Gather shard 's''s rows of 'grads' into request 'q' (ids and encoded
 * blob). With 'sum', repeated ids are summed into the first one's row in
 * the order given (the server's own order, so the result is the same bits
 * as sending them all). 0 or -1 (out of memory). */
static int gather_shard(psEmbed *e, psPush *q, int s, size_t cnt, const int *shard_of,
                        const uint64_t *ids, size_t n, const float *grads, int sum) {
    size_t dim = (size_t)e->dim, k = 0, mask = 0, i;
    uint64_t *qids = psi_push_ids(q, cnt);
    unsigned char *blob;
    if (qids == NULL || grow(&e->rows, &e->rowcap, cnt * dim, sizeof(float))) return -1;
    if (sum) {
        size_t want = 16;
        while (want < 2 * cnt) want *= 2;
        if (grow(&e->slot_of, &e->slotcap, want, sizeof(int64_t))) return -1;
        mask = want - 1;
        for (i = 0; i < want; i++) e->slot_of[i] = -1;
    }
    for (i = 0; i < n; i++) {
        const float *g = grads + i * dim;
        if (shard_of[i] != s) continue;
        if (sum) {
            size_t h = (size_t)(id_hash(ids[i]) >> 20) & mask;
            while (e->slot_of[h] >= 0 && qids[e->slot_of[h]] != ids[i]) h = (h + 1) & mask;
            if (e->slot_of[h] >= 0) {
                float *row = e->rows + (size_t)e->slot_of[h] * dim;
                for (size_t j = 0; j < dim; j++) row[j] += g[j];
                continue;
            }
            e->slot_of[h] = (int64_t)k;
        }
        qids[k] = ids[i];
        memcpy(e->rows + k * dim, g, dim * sizeof(float));
        k++;
    }
    q->nids = k;
    q->fmt = e->push_fmt;
    if ((blob = psi_push_blob(q, ps_dense_encoded_size(e->push_fmt, k * dim))) == NULL) return -1;
    if (!feedback_on(e)) {
        ps_encode(e->push_fmt, e->rows, k * dim, blob);
        return 0;
    }
    /* Error feedback: each id's row carries what rounding took from its
     * earlier pushes, and keeps what rounding takes from this one. */
    if (grow(&e->dec, &e->deccap, k * dim, sizeof(float))) return -1;
    for (i = 0; i < k; i++) {
        const float *r = psi_resid_row(&e->fb, qids[i]);
        float *row = e->rows + i * dim;
        for (size_t j = 0; r && j < dim; j++) row[j] += r[j];
    }
    ps_encode(e->push_fmt, e->rows, k * dim, blob);
    if (ps_decode(e->push_fmt, blob, q->bloblen, k * dim, e->dec) != 0) return -1;
    for (i = 0; i < k; i++) {
        float *r = psi_resid_row(&e->fb, qids[i]);
        for (size_t j = 0; r && j < dim; j++) r[j] = e->rows[i * dim + j] - e->dec[i * dim + j];
    }
    return 0;
}

int psEmbedPush(psClient *c, psEmbed *e, const uint64_t *ids, size_t n, const float *grads,
                int flags) {
    psPushGroup *g;
    size_t i, *cnt;
    int s;

    psi_clear_error(c);
    if (n == 0) return PS_OK;
    if (ids == NULL || grads == NULL) {
        psi_set_error(c, PS_ERR_ARG, "psEmbedPush: ids and grads are required");
        return PS_ERR;
    }
    if (psi_user_attach(c, &e->user) != 0) return PS_ERR;
    if ((g = psi_push_begin(c, &e->user, e->nshards)) == NULL) return PS_ERR;
    if (grow(&e->shard_of, &e->shardcap, n, sizeof(int)) ||
        (cnt = calloc((size_t)e->nshards, sizeof(size_t))) == NULL) {
        psi_set_error(c, PS_ERR_OOM, "out of memory");
        return PS_ERR;
    }
    for (i = 0; i < n; i++) {
        e->shard_of[i] = psEmbedShardOf(ids[i], e->nshards);
        cnt[e->shard_of[i]]++;
    }
    for (s = 0; s < e->nshards; s++) {
        psEmbedShard *sh = &e->shards[s];
        psPush *q;
        if (cnt[s] == 0) continue;
        q = psi_push_add(c, g, &sh->k);
        if (gather_shard(e, q, s, cnt[s], e->shard_of, ids, n, grads,
                         (flags & PS_EMBED_SUM_DUPLICATES) || feedback_on(e))) {
            free(cnt);
            psi_set_error(c, PS_ERR_OOM, "out of memory");
            return PS_ERR;
        }
        q->has_version = sh->k.has_version;
        q->version = sh->k.version;
    }
    free(cnt);
    return psi_push_send(c, g);
}
