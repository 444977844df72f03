/* embed.c -- sharded embedding tables of libps (ps.h "Embedding tables").
 *
 * A psEmbed is 'nshards' server tables (PS.CREATE key EMBEDDING); an id
 * lives in shard mix64(id) % nshards. A pull splits the caller's ids per
 * shard, sends one PS.PULL IDS per shard (all in flight together) and
 * scatters each shard's rows back to the caller's positions as the reply is
 * read. A push splits the gradient rows the same way into one PS.PUSHGRAD
 * IDS per shard; a push batch keeps its encoded requests until every shard
 * answered, so the engine can resend them unchanged (same seq: the server
 * applies a resend at most once). Requests go through the engine (engine.c)
 * like model requests: the callbacks here interpret the replies. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "resid.h"

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
    psEmbed *e;                 /* back pointer for the callbacks */
    char *key;
    size_t keylen;
    uint64_t version;           /* of the rows of the last pull waited for (pushes send it) */
    int has_version;
    uint64_t pull_version;      /* of the reply of the pull in flight */
    int pull_seen;              /* 1: that reply was read */
    uint64_t acked_version;     /* highest version seen acknowledged (push or pull) */
    int has_acked;
    uint64_t seq;               /* last seq used by a push of this shard */
    /* the pull in progress */
    psReq pull;
    char *pullcmd;
    size_t pullcap;
    uint64_t *ids;              /* this shard's ids, in the caller's order */
    size_t *pos;                /* their positions in the caller's arrays */
    size_t nids, idcap, poscap;
    size_t direct;              /* bytes of the pull reply scattered by the sink */
} psEmbedShard;

struct psEmbedBatch;

/* One shard push of a batch: kept, encoded, until answered (resends). */
typedef struct psEmbedPushReq {
    psPushAck ack;              /* the request (udata: this) and its WAIT state */
    struct psEmbedBatch *b;
    int shard;
    psWirePushIds args;
    uint64_t *ids;
    size_t idcap;
    unsigned char *blob;
    size_t blobcap;
    char *head, *tail;
    size_t headcap, tailcap;
} psEmbedPushReq;

typedef struct psEmbedBatch {
    psPushGroup g;              /* in use, shard pushes + WAITs outstanding (pushtrack.h) */
    psEmbed *e;
    psEmbedPushReq *reqs;       /* nshards, those with ids are submitted */
} psEmbedBatch;

struct psEmbed {
    char *name;
    int dim, nshards;
    psEmbedShard *shards;
    ps_format push_fmt, pull_fmt;
    psEmbedBatch *batches;
    int nbatches;
    float *pull_dst;            /* destination of the pull in progress, or NULL */
    int pull_open;              /* 1 from psEmbedPullAsync() until its psEmbedPullWait() */
    int pull_pending;           /* shard pulls without a reply yet */
    int pull_failed;            /* PS_ERR_* of the pull's first failure, 0 none */
    char pull_errstr[256];
    psClient *client;           /* the client its requests were last sent on */
    float *rows;                /* push scratch: one shard's gathered rows */
    size_t rowcap;
    int64_t *slot_of;           /* push scratch: id hash table (sum duplicates) */
    size_t slotcap;
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
    for (int s = 0; s < nshards; s++) {
        psEmbedShard *sh = &e->shards[s];
        sh->e = e;
        size_t len = strlen(name) + 48;
        if ((sh->key = malloc(len)) == NULL) goto oom;
        sh->keylen = (size_t)snprintf(sh->key, len, "%s:%d{%lu}", name, s, shard_tag(s, nshards));
    }
    return e;
oom:
    psEmbedFree(e);
    return NULL;
}

const char *psEmbedShardKey(const psEmbed *e, int s) {
    return s >= 0 && s < e->nshards ? e->shards[s].key : NULL;
}

uint64_t psEmbedShardVersion(const psEmbed *e, int s) {
    return s >= 0 && s < e->nshards ? e->shards[s].version : 0;
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

/* ========================================================================
 * Tables on a client (as models: the engine points into the table while
 * its requests are in flight)
 * ======================================================================== */

static int embed_busy(const psEmbed *e) {
    if (e->pull_pending) return 1;
    for (int i = 0; i < e->nbatches; i++)
        if (e->batches[i].g.in_use) return 1;
    return 0;
}

static int embed_idle(psClient *c, void *arg) {
    (void)c;
    return !embed_busy(arg);
}

int psi_embeds_idle(psClient *c, void *arg) {
    (void)arg;
    for (int i = 0; i < c->priv->nembeds; i++)
        if (embed_busy(c->priv->embeds[i])) return 0;
    return 1;
}

void psi_embeds_free(psClient *c) {
    psClientPriv *pv = c->priv;
    for (int i = 0; i < pv->nembeds; i++) {
        psEmbed *e = pv->embeds[i];
        e->client = NULL;
        e->pull_pending = 0;
        e->pull_open = 0;
        e->pull_dst = NULL;
        for (int k = 0; k < e->nbatches; k++) e->batches[k].g.in_use = 0;
    }
    free(pv->embeds);
    pv->embeds = NULL;
    pv->nembeds = pv->embedcap = 0;
}

/* Wait for the requests of 'e' and forget its client (a pull in flight is
 * abandoned: its replies are read but no longer written to its dst). */
static void embed_detach(psEmbed *e) {
    psClient *c = e->client;
    psClientPriv *pv;
    if (c == NULL) return;
    pv = c->priv;
    e->pull_dst = NULL;
    if (embed_busy(e) && psi_run(c, embed_idle, e) != 0 && embed_busy(e)) {
        fprintf(stderr, "libps: table '%s' freed with requests the client cannot finish\n",
                e->name);
        abort();
    }
    e->pull_open = 0;
    for (int i = 0; i < pv->nembeds; i++)
        if (pv->embeds[i] == e) {
            pv->embeds[i] = pv->embeds[--pv->nembeds];
            break;
        }
    e->client = NULL;
}

/* Attach 'e' to 'c' (its push window sized by the client's at the first
 * attach). 0 or -1 (out of memory, recorded). */
static int embed_attach(psClient *c, psEmbed *e) {
    psClientPriv *pv = c->priv;
    if (e->batches == NULL) {
        e->nbatches = pv->push_window;
        e->batches = calloc((size_t)e->nbatches, sizeof(psEmbedBatch));
        for (int i = 0; e->batches && i < e->nbatches; i++) {
            e->batches[i].e = e;
            e->batches[i].reqs = calloc((size_t)e->nshards, sizeof(psEmbedPushReq));
            if (e->batches[i].reqs == NULL) {
                psi_set_error(c, PS_ERR_OOM, "out of memory");
                return -1;
            }
        }
        if (e->batches == NULL) {
            e->nbatches = 0;
            psi_set_error(c, PS_ERR_OOM, "out of memory");
            return -1;
        }
    }
    if (e->client == c) return 0;
    if (e->client) embed_detach(e);
    if (pv->nembeds == pv->embedcap) {
        int cap = pv->embedcap ? pv->embedcap * 2 : 4;
        psEmbed **ne = realloc(pv->embeds, sizeof(*ne) * (size_t)cap);
        if (ne == NULL) {
            psi_set_error(c, PS_ERR_OOM, "out of memory");
            return -1;
        }
        pv->embeds = ne;
        pv->embedcap = cap;
    }
    pv->embeds[pv->nembeds++] = e;
    e->client = c;
    return 0;
}

void psEmbedFree(psEmbed *e) {
    if (e == NULL) return;
    embed_detach(e);
    for (int s = 0; e->shards && s < e->nshards; s++) {
        free(e->shards[s].key);
        free(e->shards[s].pullcmd);
        free(e->shards[s].ids);
        free(e->shards[s].pos);
    }
    for (int i = 0; i < e->nbatches; i++) {
        for (int s = 0; e->batches[i].reqs && s < e->nshards; s++) {
            psEmbedPushReq *q = &e->batches[i].reqs[s];
            free(q->ids);
            free(q->blob);
            free(q->head);
            free(q->tail);
        }
        free(e->batches[i].reqs);
    }
    free(e->batches);
    free(e->shards);
    free(e->rows);
    free(e->slot_of);
    psi_resid_free(&e->fb);
    free(e->dec);
    free(e->name);
    free(e);
}

/* Whether 'reply' is the module's "no such key" error. */
static int is_nokey(const redisReply *reply) {
    return psi_reply_error(reply) == PS_PROTO_ERR_NOKEY;
}

static void shard_seen(psEmbedShard *sh, uint64_t v) {
    if (!sh->has_acked || v > sh->acked_version) sh->acked_version = v;
    sh->has_acked = 1;
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
    const char *argv[80];
    size_t argl[80];
    char dim[16];
    int argc = 0, n = 0, s;
    psi_clear_error(c);
    if (qs == NULL || (opts && optcopy == NULL)) {
        free(qs);
        free(optcopy);
        psi_set_error(c, PS_ERR_OOM, "out of memory");
        return PS_ERR;
    }
    if (create) {
        argv[argc++] = "PS.CREATE";
        argv[argc++] = NULL;            /* the key, per shard */
        argv[argc++] = "EMBEDDING";
        argv[argc++] = "DIM";
        snprintf(dim, sizeof(dim), "%d", e->dim);
        argv[argc++] = dim;
        for (char *tok = optcopy ? strtok(optcopy, " \t") : NULL; tok; tok = strtok(NULL, " \t")) {
            if (argc >= 78) {
                free(qs);
                free(optcopy);
                psi_set_error(c, PS_ERR_ARG, "too many create options");
                return PS_ERR;
            }
            argv[argc++] = tok;
        }
        if (nx) argv[argc++] = "NX";
    } else {
        argv[argc++] = "DEL";
        argv[argc++] = NULL;
    }
    for (int i = 0; i < argc; i++) argl[i] = argv[i] ? strlen(argv[i]) : 0;
    for (s = 0; s < e->nshards; s++) {
        char *cmd = NULL;
        int len;
        argv[1] = e->shards[s].key;
        argl[1] = e->shards[s].keylen;
        len = redisFormatCommandArgv(&cmd, argc, argv, argl);
        if (len < 0) {
            psi_set_error(c, PS_ERR_OOM, "out of memory");
            break;
        }
        psi_raw_init(&qs[s], e->shards[s].key, cmd, (size_t)len);
    }
    if (!c->err) psi_raw_run(c, qs, (size_t)e->nshards);
    for (s = 0; s < e->nshards; s++) {
        redisReply *r = qs[s].reply;
        if (r && r->type == REDIS_REPLY_ERROR)
            psi_set_error(c, PS_ERR_SERVER, "%s %s: %.160s", create ? "PS.CREATE" : "DEL",
                          e->shards[s].key, r->str);
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

/* Scatter shard 'sh''s reply rows ('len' bytes at 'data') to the caller's
 * positions. 0, or -1 when the bytes are not its rows. */
static int scatter(psEmbed *e, psEmbedShard *sh, const char *data, size_t len) {
    size_t rowb = ps_dense_encoded_size(e->pull_fmt, (size_t)e->dim);
    if (len != rowb * sh->nids) return -1;
    for (size_t i = 0; i < sh->nids; i++) {
        float *dst = e->pull_dst + sh->pos[i] * (size_t)e->dim;
        const unsigned char *src = (const unsigned char *)data + i * rowb;
        if (e->pull_fmt == PS_FMT_F32) memcpy(dst, src, rowb);
        else if (ps_decode(e->pull_fmt, src, rowb, (size_t)e->dim, dst) != 0) return -1;
    }
    return 0;
}

/* The sink: the values blob of a [version, values] reply, scattered from
 * the engine's buffer. */
static int pull_sink(psClient *c, psReq *r, int idx, int n, const char *data, size_t len) {
    psEmbedShard *sh = r->udata;
    psEmbed *e = sh->e;
    (void)c;
    if (idx != 1 || n != 2 || e->pull_dst == NULL || scatter(e, sh, data, len) != 0) return 0;
    sh->direct = len;
    return 1;
}

static void pull_failed(psClient *c, psEmbed *e, int code, const char *msg) {
    psi_set_error(c, code, "%s", msg);
    if (e->pull_failed) return;
    e->pull_failed = code;
    snprintf(e->pull_errstr, sizeof(e->pull_errstr), "%.*s", (int)sizeof(e->pull_errstr) - 1, msg);
}

static int pull_done(psClient *c, psReq *r, redisReply *reply) {
    psEmbedShard *sh = r->udata;
    psEmbed *e = sh->e;
    char msg[sizeof(c->errstr) + 64], lost[256];
    e->pull_pending--;
    if (reply == NULL) {
        snprintf(msg, sizeof(msg), "PS.PULL %.60s: %s", sh->key,
                 r->failed ? "failed after retries" : "no reply");
        pull_failed(c, e, c->err ? c->err : PS_ERR_IO, c->err ? c->errstr : msg);
    } else if (is_nokey(reply) && sh->has_acked) {
        psi_lost_state(c, r->node, sh->key, sh->acked_version, 0, 0, lost, sizeof(lost));
        snprintf(msg, sizeof(msg), "PS.PULL: %s", lost);
        pull_failed(c, e, PS_ERR_LOST_STATE, msg);
    } else if (reply->type == REDIS_REPLY_ERROR) {
        snprintf(msg, sizeof(msg), "PS.PULL %.60s: %.160s", sh->key, reply->str);
        pull_failed(c, e, PS_ERR_SERVER, msg);
    } else if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
               reply->element[0]->type != REDIS_REPLY_INTEGER ||
               reply->element[1]->type != REDIS_REPLY_STRING ||
               (!sh->direct && e->pull_dst != NULL &&
                scatter(e, sh, reply->element[1]->str, reply->element[1]->len))) {
        /* (pull_dst NULL: an abandoned pull, embed_detach) */
        snprintf(msg, sizeof(msg), "PS.PULL %.60s: unexpected reply (not a table of dim %d?)",
                 sh->key, e->dim);
        pull_failed(c, e, PS_ERR_PROTOCOL, msg);
    } else {
        uint64_t v = (uint64_t)reply->element[0]->integer;
        sh->pull_version = v;
        sh->pull_seen = 1;
        if (sh->has_acked && v < sh->acked_version) {
            /* Older than what this client saw acknowledged: lost writes. */
            psi_lost_state(c, r->node, sh->key, sh->acked_version, 1, v, lost, sizeof(lost));
            if (c->priv->lost_state_policy != PS_LOST_STATE_CONTINUE) {
                snprintf(msg, sizeof(msg), "PS.PULL: %s", lost);
                pull_failed(c, e, PS_ERR_LOST_STATE, msg);
            }
            sh->acked_version = v;
        }
        shard_seen(sh, v);
        c->stats.pulls++;
        c->stats.rows_pulled += sh->nids;
        c->stats.bytes_received += sh->nids * ps_dense_encoded_size(e->pull_fmt, (size_t)e->dim);
    }
    sh->direct = 0;
    if (reply) freeReplyObject(reply);
    return PSI_DONE;
}

static int pull_finished(psClient *c, void *arg) {
    (void)c;
    return ((psEmbed *)arg)->pull_pending == 0;
}

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
    if (embed_attach(c, e) != 0) return PS_ERR;
    if (e->pull_open) {
        psi_set_error(c, PS_ERR_ARG, "a pull of table '%s' is already in flight", e->name);
        return PS_ERR;
    }
    if (split_pull(e, ids, n) != 0) {
        psi_set_error(c, PS_ERR_OOM, "out of memory");
        return PS_ERR;
    }
    for (s = 0; s < e->nshards; s++) {
        psEmbedShard *sh = &e->shards[s];
        size_t len;
        if (sh->nids == 0) continue;
        len = ps_wire_pull_ids(sh->key, sh->keylen, sh->ids, sh->nids, e->pull_fmt, sh->pullcmd,
                               sh->pullcap);
        if (len > sh->pullcap) {
            char *nc = realloc(sh->pullcmd, len);
            if (nc == NULL) {
                psi_set_error(c, PS_ERR_OOM, "out of memory");
                return PS_ERR;
            }
            sh->pullcmd = nc;
            sh->pullcap = len;
            ps_wire_pull_ids(sh->key, sh->keylen, sh->ids, sh->nids, e->pull_fmt, sh->pullcmd,
                             sh->pullcap);
        }
        psi_req_init(&sh->pull, sh->key, sh->keylen);
        sh->pull.cmd = sh->pullcmd;
        sh->pull.cmdlen = len;
        sh->pull.done = pull_done;
        sh->pull.sink = pull_sink;
        sh->pull.udata = sh;
        sh->direct = 0;
        sh->pull_seen = 0;
    }
    e->pull_open = 1;
    e->pull_dst = n ? dst : NULL;
    e->pull_failed = 0;
    e->pull_pending = 0;
    for (s = 0; s < e->nshards; s++) e->pull_pending += e->shards[s].nids > 0;
    if (e->pull_pending == 0) return PS_OK;
    for (s = 0; s < e->nshards; s++)
        if (e->shards[s].nids) psi_submit(c, &e->shards[s].pull);
    psi_flush(c);
    if (e->pull_failed) {
        /* Failed already (e.g. no node for a slot): finish it here, so that
         * PS_ERR always means no pull is left in flight. */
        psEmbedPullWait(c, e);
        return PS_ERR;
    }
    return PS_OK;
}

int psEmbedPullWait(psClient *c, psEmbed *e) {
    psi_clear_error(c);
    if (!e->pull_open) {
        psi_set_error(c, PS_ERR_ARG, "no pull of table '%s' in flight", e->name);
        return PS_ERR;
    }
    if (e->pull_pending && psi_run(c, pull_finished, e) != 0 && e->pull_pending)
        psi_set_error(c, PS_ERR_OTHER, "internal error: pulls left without replies");
    e->pull_open = 0;
    e->pull_dst = NULL;
    if (e->pull_failed && !c->err) psi_set_error(c, e->pull_failed, "%s", e->pull_errstr);
    /* What pushes send as VERSION from now on: the versions of the rows
     * this pull delivered (not of a later pull's replies read meanwhile). */
    for (int s = 0; s < e->nshards; s++) {
        psEmbedShard *sh = &e->shards[s];
        if (!sh->pull_seen) continue;
        sh->version = sh->pull_version;
        sh->has_version = 1;
    }
    return c->err ? PS_ERR : PS_OK;
}

int psEmbedPull(psClient *c, psEmbed *e, const uint64_t *ids, size_t n, float *dst) {
    if (psEmbedPullAsync(c, e, ids, n, dst) != PS_OK) return PS_ERR;
    return psEmbedPullWait(c, e);
}

/* ========================================================================
 * Pushes
 * ======================================================================== */

/* Encode shard push 'q' from its arguments (again after a change). 0 or -1. */
static int push_encode(psEmbedPushReq *q) {
    size_t hl, tl, hneed = ps_wire_pushgrad_head_size(q->args.keylen);
    size_t tneed = PS_WIRE_PUSH_IDS_TAIL_MAX(q->args.nids, strlen(q->args.client_id));
    if (grow(&q->head, &q->headcap, hneed, 1) || grow(&q->tail, &q->tailcap, tneed, 1)) return -1;
    if (ps_wire_pushgrad_ids(&q->args, q->head, q->headcap, &hl, q->tail, q->tailcap, &tl) != 0)
        return -1;
    q->ack.req.cmd = q->head;
    q->ack.req.cmdlen = hl;
    q->ack.req.tail = q->tail;
    q->ack.req.taillen = tl;
    return 0;
}

static int push_done(psClient *c, psReq *r, redisReply *reply) {
    psEmbedPushReq *q = r->udata;
    psEmbedShard *sh = &q->b->e->shards[q->shard];
    switch (psi_push_reply(c, r, reply, sh->key, q->args.has_version, &q->args.version,
                           &sh->has_acked, &sh->acked_version)) {
    case PSI_PUSH_RESEND:
        if (push_encode(q) == 0) return PSI_RESEND;
        c->stats.push_errors++;
        psi_set_error(c, PS_ERR_OOM, "out of memory");
        break;
    case PSI_PUSH_ACKED:
        c->stats.rows_pushed += q->args.nids;
        psi_push_acked(c, &q->ack, r->node); /* a lost WAIT resends it (pushtrack.c) */
        break;
    default: break;
    }
    psi_group_release(&q->b->g);
    return PSI_DONE;
}

static int batch_free_exists(psClient *c, void *arg) {
    psEmbed *e = arg;
    (void)c;
    for (int i = 0; i < e->nbatches; i++)
        if (!e->batches[i].g.in_use) return 1;
    return 0;
}

/* The items of a table push batch (pushtrack.h): the shard pushes that
 * carry ids this time. */
static psPushAck *batch_item(psPushGroup *g, int k) {
    psEmbedBatch *b = (psEmbedBatch *)(void *)((char *)g - offsetof(psEmbedBatch, g));
    return b->reqs[k].args.nids ? &b->reqs[k].ack : NULL;
}

/* A shard push taken back after its WAIT was lost: counted again when
 * resent. */
static void batch_unacked(psClient *c, psPushAck *a) {
    const psEmbedPushReq *q = a->req.udata;
    c->stats.rows_pushed -= q->args.nids;
}

static uint64_t id_hash(uint64_t id) {
    return id * 0x9e3779b97f4a7c15ULL;
}

/* Gather shard 's''s rows of 'grads' into request 'q' (ids and encoded
 * blob). With 'sum', repeated ids are summed into the first one's row in
 * the order given (the server's own order, so the result is the same bits
 * as sending them all). 0 or -1 (out of memory). */
static int gather_shard(psEmbed *e, psEmbedPushReq *q, int s, const int *shard_of,
                        const uint64_t *ids, size_t n, const float *grads, int sum) {
    size_t dim = (size_t)e->dim, k = 0, cnt = 0, mask = 0, i;
    for (i = 0; i < n; i++) cnt += shard_of[i] == s;
    if (grow(&q->ids, &q->idcap, cnt, sizeof(uint64_t)) ||
        grow(&e->rows, &e->rowcap, cnt * dim, sizeof(float)))
        return -1;
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
            while (e->slot_of[h] >= 0 && q->ids[e->slot_of[h]] != ids[i]) h = (h + 1) & mask;
            if (e->slot_of[h] >= 0) {
                float *row = e->rows + (size_t)e->slot_of[h] * dim;
                for (size_t j = 0; j < dim; j++) row[j] += g[j];
                continue;
            }
            e->slot_of[h] = (int64_t)k;
        }
        q->ids[k] = ids[i];
        memcpy(e->rows + k * dim, g, dim * sizeof(float));
        k++;
    }
    q->args.nids = k;
    q->args.bloblen = ps_dense_encoded_size(e->push_fmt, k * dim);
    if (grow(&q->blob, &q->blobcap, q->args.bloblen, 1)) return -1;
    if (!feedback_on(e)) {
        ps_encode(e->push_fmt, e->rows, k * dim, q->blob);
        return 0;
    }
    /* Error feedback: each id's row carries what rounding took from its
     * earlier pushes, and keeps what rounding takes from this one. */
    if (grow(&e->dec, &e->deccap, k * dim, sizeof(float))) return -1;
    for (i = 0; i < k; i++) {
        const float *r = psi_resid_row(&e->fb, q->ids[i]);
        float *row = e->rows + i * dim;
        for (size_t j = 0; r && j < dim; j++) row[j] += r[j];
    }
    ps_encode(e->push_fmt, e->rows, k * dim, q->blob);
    if (ps_decode(e->push_fmt, q->blob, q->args.bloblen, k * dim, e->dec) != 0) return -1;
    for (i = 0; i < k; i++) {
        float *r = psi_resid_row(&e->fb, q->ids[i]);
        for (size_t j = 0; r && j < dim; j++) r[j] = e->rows[i * dim + j] - e->dec[i * dim + j];
    }
    return 0;
}

int psEmbedPush(psClient *c, psEmbed *e, const uint64_t *ids, size_t n, const float *grads,
                int flags) {
    psClientPriv *pv = c->priv;
    psEmbedBatch *b = NULL;
    int *shard_of, s, nreq = 0;
    size_t i;

    psi_clear_error(c);
    if (n == 0) return PS_OK;
    if (ids == NULL || grads == NULL) {
        psi_set_error(c, PS_ERR_ARG, "psEmbedPush: ids and grads are required");
        return PS_ERR;
    }
    if (embed_attach(c, e) != 0) return PS_ERR;
    if (psi_run(c, batch_free_exists, e) != 0) {
        psi_set_error(c, PS_ERR_OTHER, "internal error: push window never freed");
        return PS_ERR;
    }
    for (int k = 0; k < e->nbatches; k++)
        if (!e->batches[k].g.in_use) { b = &e->batches[k]; break; }
    if ((shard_of = malloc(n * sizeof(int))) == NULL) {
        psi_set_error(c, PS_ERR_OOM, "out of memory");
        return PS_ERR;
    }
    for (i = 0; i < n; i++) shard_of[i] = psEmbedShardOf(ids[i], e->nshards);
    for (s = 0; s < e->nshards; s++) {
        psEmbedPushReq *q = &b->reqs[s];
        psEmbedShard *sh = &e->shards[s];
        psWirePushIds *a = &q->args;
        q->args.nids = 0;
        if (gather_shard(e, q, s, shard_of, ids, n, grads,
                         (flags & PS_EMBED_SUM_DUPLICATES) || feedback_on(e))) {
            free(shard_of);
            psi_set_error(c, PS_ERR_OOM, "out of memory");
            return PS_ERR;
        }
        if (a->nids == 0) continue;
        psi_push_init(&q->ack, &b->g, sh->key, sh->keylen);
        q->ack.req.done = push_done;
        q->ack.req.udata = q;
        q->ack.req.blob = q->blob;
        q->ack.req.bloblen = a->bloblen;
        q->b = b;
        q->shard = s;
        a->key = sh->key;
        a->keylen = sh->keylen;
        a->fmt = e->push_fmt;
        a->ids = q->ids;
        a->has_version = sh->has_version;
        a->version = sh->version;
        a->client_id = c->client_id;
        if (sh->seq == 0) sh->seq = pv->seq_base;
        a->seq = ++sh->seq;
        a->flags = (pv->flags & PS_FLAG_NO_PUSH_ID ? PS_WIRE_NO_ID : 0) |
                   (pv->flags & PS_FLAG_NO_PUSH_VERSION ? PS_WIRE_NO_VERSION : 0);
        if (push_encode(q) != 0) {
            free(shard_of);
            psi_set_error(c, PS_ERR_OOM, "out of memory");
            return PS_ERR;
        }
        c->stats.bytes_sent += a->bloblen;
        nreq++;
    }
    free(shard_of);
    if (nreq == 0) return c->err ? PS_ERR : PS_OK;
    b->g.n = e->nshards;
    b->g.item = batch_item;
    b->g.unacked = batch_unacked;
    psi_group_submit(c, &b->g);
    return c->err ? PS_ERR : PS_OK;
}
