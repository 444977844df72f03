/* batch.c -- the batch layer: keyed pulls and push groups on the request
 * engine, their replies, WAITs and resends (batch.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "clock.h"
#include "idlist.h"
#include "protocol.h"
#include "wire.h"

/* The batch layer's part of a client. */
struct psBatches {
    int push_window;
    int flags;                  /* PS_FLAG_* */
    uint64_t seq_base;          /* first seq of every key */
    uint64_t fixed_seq;         /* psSetPushSeq: the seq of every push added, 0 none */
    psPushWindow shared;        /* pushes of users without a window of their own (models) */
    psUser **users;             /* users with requests on this client */
    int nusers, usercap;
    int ids_ef;                 /* 1: key pulls and pushes by ids may send IDFORMAT EF; 0
                                   after PS_FLAG_RAW_IDS / PS_RAW_IDS=1 or a server without
                                   it (libps/batch.c "Compressed ids") */
    struct idpair *pairs;       /* sort scratch */
    size_t paircap;
    unsigned char *rowtmp;      /* push scratch: blob rows in sorted order */
    size_t rowcap;
};

/* A growable buffer of 'n' items of 'size' bytes at '*p' with room '*cap'.
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

/* ========================================================================
 * Replies: the one place a reply is classified
 * ======================================================================== */

/* Whether 'reply' is the module's "no such key" error. */
static int is_nokey(const redisReply *reply) {
    return psi_reply_error(reply) == PS_PROTO_ERR_NOKEY;
}

/* Whether 'reply' is "ERR VERSION v is newer than the tensor's version now". */
static int is_version_ahead(const redisReply *reply) {
    return psi_reply_error(reply) == PS_PROTO_ERR_FUTURE;
}

static int is_stale(const redisReply *reply) {
    return psi_reply_error(reply) == PS_PROTO_ERR_STALE;
}

/* Whether 'reply' refuses an option an older server lacks (VERSION, ID). */
/* "ERR unknown option 'IDFORMAT'": a server before IDFORMAT (common/protocol.h
 * PS_PROTO_ID_FORMATS), which changed nothing. */
static int is_unknown_idformat(const redisReply *reply) {
    return psi_reply_error(reply) == PS_PROTO_ERR_UNKNOWN_OPT && strstr(reply->str, "'IDFORMAT'");
}

static int is_unknown_option(const redisReply *reply) {
    int cls = psi_reply_error(reply);
    return cls == PS_PROTO_ERR_SYNTAX || cls == PS_PROTO_ERR_UNKNOWN_OPT ||
           cls == PS_PROTO_ERR_DUP_OPT || cls == PS_PROTO_ERR_MISSING_ARG;
}

static void key_acked(psKey *k, uint64_t v) {
    if (!k->has_acked || v > k->acked) k->acked = v;
    k->has_acked = 1;
}

void psi_key_take_pulled(psKey *k) {
    if (!k->seen_now) return;
    k->version = k->seen;
    k->has_version = 1;
}

/* ========================================================================
 * Users on a client
 * ======================================================================== */

static void window_free(psPushWindow *w) {
    for (int i = 0; i < w->n; i++) {
        psPushGroup *g = &w->g[i];
        for (int k = 0; k < g->cap; k++) {
            free(g->items[k].blob);
            free(g->items[k].ids);
            free(g->items[k].head);
            free(g->items[k].tail);
        }
        free(g->items);
    }
    free(w->g);
    w->g = NULL;
    w->n = 0;
}

static psPushWindow *window_of(psClient *c, psUser *u) {
    return u->own_window ? &u->own : &c->priv->batch->shared;
}

static int user_busy(const psUser *u) {
    const psPushWindow *w;
    if (u->pull.pending) return 1;
    if (u->client == NULL) return 0;
    w = u->own_window ? &u->own : &u->client->priv->batch->shared;
    for (int i = 0; i < w->n; i++)
        if (w->g[i].in_use && w->g[i].user == u) return 1;
    return 0;
}

static int user_idle(psClient *c, void *arg) {
    (void)c;
    return !user_busy(arg);
}

void psi_user_init(psUser *u, const char *kind, const char *name, const char *nokey_hint,
                   int own_window) {
    memset(u, 0, sizeof(*u));
    u->kind = kind;
    u->name = name;
    u->nokey_hint = nokey_hint ? nokey_hint : "";
    u->own_window = own_window;
}

void psi_user_detach(psUser *u) {
    psClient *c = u->client;
    struct psBatches *bp;
    if (c == NULL) return;
    bp = c->priv->batch;
    /* A pull in flight is abandoned (its destinations may be gone already);
     * pushes are waited for, so they count and are not lost. */
    u->pull.live = 0;
    if (user_busy(u) && psi_run(c, user_idle, u) != 0 && user_busy(u)) {
        fprintf(stderr, "libps: %s '%s' freed with requests the client cannot finish\n", u->kind,
                u->name);
        abort();
    }
    u->pull.open = 0;
    for (int i = 0; i < bp->nusers; i++)
        if (bp->users[i] == u) {
            bp->users[i] = bp->users[--bp->nusers];
            break;
        }
    u->client = NULL;
}

int psi_user_attach(psClient *c, psUser *u) {
    struct psBatches *bp = c->priv->batch;
    if (u->client == c) return 0;
    if (u->client) psi_user_detach(u);
    if (bp->nusers == bp->usercap) {
        int cap = bp->usercap ? bp->usercap * 2 : 4;
        psUser **nu = realloc(bp->users, sizeof(*nu) * (size_t)cap);
        if (nu == NULL) {
            psi_set_error(c, PS_ERR_OOM, "out of memory");
            return -1;
        }
        bp->users = nu;
        bp->usercap = cap;
    }
    bp->users[bp->nusers++] = u;
    u->client = c;
    return 0;
}

void psi_user_free(psUser *u) {
    psi_user_detach(u);
    window_free(&u->own);
}

int psi_batches_init(psClient *c, const psOptions *o) {
    struct psBatches *bp = calloc(1, sizeof(*bp));
    if (bp == NULL) return -1;
    c->priv->batch = bp;
    bp->push_window = o->push_window > 0 ? o->push_window : PS_DEFAULT_PUSH_WINDOW;
    bp->flags = o->flags;
    const char *raw = getenv("PS_RAW_IDS");
    bp->ids_ef = !(o->flags & PS_FLAG_RAW_IDS) && !(raw && strcmp(raw, "1") == 0);
    bp->seq_base = ps_wall_us();
    bp->shared.n = bp->push_window;
    bp->shared.g = calloc((size_t)bp->shared.n, sizeof(psPushGroup));
    if (bp->shared.g == NULL) {
        bp->shared.n = 0;
        return -1;
    }
    return 0;
}

int psSetPushSeq(psClient *c, uint64_t seq) {
    if (c == NULL || c->priv->batch == NULL) return PS_ERR;
    c->priv->batch->fixed_seq = seq;
    return PS_OK;
}

void psi_batches_free(psClient *c) {
    struct psBatches *bp = c->priv->batch;
    if (bp == NULL) return;
    /* The engine and its requests go: every user forgets them. */
    for (int i = 0; i < bp->nusers; i++) {
        psUser *u = bp->users[i];
        u->client = NULL;
        u->pull.pending = 0;
        u->pull.open = 0;
        u->pull.live = 0;
        for (int k = 0; k < u->own.n; k++) u->own.g[k].in_use = 0;
    }
    free(bp->users);
    free(bp->pairs);
    free(bp->rowtmp);
    window_free(&bp->shared);
    free(bp);
    c->priv->batch = NULL;
}

/* ========================================================================
 * Compressed ids (IDFORMAT EF, common/protocol.h PS_PROTO_ID_FORMATS)
 *
 * A key pull or push by ids of PS_IDS_EF_MIN ids or more is sorted by id
 * (stably: repeated ids keep their order, so a push sums them in the order
 * given) and sent as IDFORMAT EF when that is smaller than the raw list
 * plus the two arguments. A pull's rows then come in ascending id order:
 * the sorted positions send each to its caller's slot. A server without
 * IDFORMAT answers "ERR unknown option 'IDFORMAT'" and changes nothing: the
 * request is re-encoded raw (same sorted order, same seq) and resent, and
 * the client sends raw ids from then on (ids_ef 0).
 * ======================================================================== */

struct idpair {
    uint64_t id;
    size_t at;                  /* original index */
};

/* Sorts 'ids' (n) with their indices into bp->pairs[0 .. n), stably (equal
 * ids keep their order): an LSD radix sort, 8 bits a pass, a pass skipped
 * when every id has the same byte there (a few microseconds for a step's
 * few hundred ids, where qsort took tens). 0 or -1 (out of memory). */
static int sort_ids(struct psBatches *bp, const uint64_t *ids, size_t n) {
    if (grow(&bp->pairs, &bp->paircap, 2 * n, sizeof(struct idpair))) return -1;
    struct idpair *a = bp->pairs, *b = bp->pairs + n, *t;
    for (size_t i = 0; i < n; i++) {
        a[i].id = ids[i];
        a[i].at = i;
    }
    if (n == 0 || ps_idlist_sorted(ids, n)) return 0;
    for (unsigned shift = 0; shift < 64; shift += 8) {
        size_t cnt[256] = {0}, sum = 0;
        for (size_t i = 0; i < n; i++) cnt[(a[i].id >> shift) & 255]++;
        if (cnt[(a[0].id >> shift) & 255] == n) continue;
        for (int d = 0; d < 256; d++) {
            size_t c = cnt[d];
            cnt[d] = sum;
            sum += c;
        }
        for (size_t i = 0; i < n; i++) b[cnt[(a[i].id >> shift) & 255]++] = a[i];
        t = a, a = b, b = t;
    }
    if (a != bp->pairs) memcpy(bp->pairs, a, n * sizeof(struct idpair));
    return 0;
}

/* Whether sorted 'ids' (n) go as EF: the client may and it is smaller. */
static int ef_pays(const struct psBatches *bp, const uint64_t *ids, size_t n) {
    /* "$8\r\nIDFORMAT\r\n$2\r\nEF\r\n" */
    return bp->ids_ef && n >= PS_IDS_EF_MIN && ps_wire_ids_size(ids, n, PS_PROTO_IDFMT_EF) + 24 < 8 * n;
}

static int window_busy(const psPushWindow *w) {
    for (int i = 0; i < w->n; i++)
        if (w->g[i].in_use) return 1;
    return 0;
}

int psi_batches_idle(psClient *c, void *arg) {
    struct psBatches *bp = c->priv->batch;
    (void)arg;
    if (window_busy(&bp->shared)) return 0;
    for (int i = 0; i < bp->nusers; i++)
        if (window_busy(&bp->users[i]->own)) return 0;
    return 1;
}

/* ========================================================================
 * Pulls
 * ======================================================================== */

static size_t pull_want(const psPull *p) {
    return p->nrows * ps_dense_encoded_size(p->fmt, p->width);
}

/* Decode the data of pull 'p' ('len' bytes) into its rows. 0, or -1 when
 * the bytes are not its rows. */
static int pull_deliver(const psPull *p, const char *data, size_t len) {
    size_t rowb = ps_dense_encoded_size(p->fmt, p->width);
    if (len != rowb * p->nrows) return -1;
    for (size_t i = 0; i < p->nrows; i++) {
        float *dst = p->dst + (p->pos ? p->pos[i] : i) * p->width;
        const unsigned char *src = (const unsigned char *)data + i * rowb;
        if (p->fmt == PS_FMT_F32) memcpy(dst, src, rowb);
        else if (ps_decode(p->fmt, src, rowb, p->width, dst) != 0) return -1;
    }
    return 0;
}

/* The sink of a key pull: the data blob of a [version, data] reply, decoded
 * from the engine's buffer straight into the destination. */
static int pull_sink(psClient *c, psReq *r, int idx, int n, const char *data, size_t len) {
    psPull *p = r->udata;
    (void)c;
    if (idx != 1 || n != 2 || !p->u->pull.live || p->dst == NULL || pull_deliver(p, data, len))
        return 0;
    p->direct = len;
    return 1;
}

/* Record a failed key pull: on the client (the call that read it) and, the
 * first one, on the user, so that its wait reports it even when another
 * call read the reply. */
static void pull_failed(psClient *c, psUser *u, int code, const char *msg) {
    psi_set_error(c, code, "%s", msg);
    if (u->pull.failed) return;
    u->pull.failed = code;
    snprintf(u->pull.errstr, sizeof(u->pull.errstr), "%.*s", (int)sizeof(u->pull.errstr) - 1,
             msg);
}

static int pull_encode_ids(psPull *p, const uint64_t *ids, size_t nids);

static int pull_done(psClient *c, psReq *r, redisReply *reply) {
    psPull *p = r->udata;
    psUser *u = p->u;
    psKey *k = p->k;
    size_t want = pull_want(p);
    char msg[sizeof(c->errstr) + 64], lost[256];
    u->pull.pending--;
    if (reply != NULL && reply->type == REDIS_REPLY_NIL && p->minver > 0) {
        /* The MINVERSION wait timed out: nothing decoded, the caller pulls again. */
        p->timed_out = 1;
        p->direct = 0;
        freeReplyObject(reply);
        return PSI_DONE;
    }
    if (reply == NULL) {
        /* the engine recorded why, unless an earlier error was recorded first */
        snprintf(msg, sizeof(msg), "PS.PULL %.60s: %s", k->key,
                 r->failed ? "failed after retries" : "no reply");
        pull_failed(c, u, c->err ? c->err : PS_ERR_IO, c->err ? c->errstr : msg);
        p->direct = 0;
        return PSI_DONE;
    }
    if (p->by_ids && p->idfmt == PS_PROTO_IDFMT_EF && is_unknown_idformat(reply)) {
        /* A server before IDFORMAT: the same pull again, raw (the rows
         * still in sorted order), and raw ids on this client from now on. */
        c->priv->batch->ids_ef = 0;
        p->idfmt = PS_PROTO_IDFMT_RAW;
        if (pull_encode_ids(p, p->sids, p->nrows) == 0) {
            freeReplyObject(reply);
            u->pull.pending++;
            return PSI_RESEND;
        }
    }
    if (is_nokey(reply) && k->has_acked) {
        psi_lost_state(c, r->node, k->key, k->acked, 0, 0, lost, sizeof(lost));
        snprintf(msg, sizeof(msg), "PS.PULL: %s", lost);
        pull_failed(c, u, PS_ERR_LOST_STATE, msg);
    } else if (reply->type == REDIS_REPLY_ERROR) {
        snprintf(msg, sizeof(msg), "PS.PULL %.60s: %.160s%s", k->key, reply->str,
                 is_nokey(reply) ? u->nokey_hint : "");
        pull_failed(c, u, PS_ERR_SERVER, msg);
    } else if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
               reply->element[0]->type != REDIS_REPLY_INTEGER ||
               reply->element[1]->type != REDIS_REPLY_STRING ||
               (p->direct ? p->direct : reply->element[1]->len) != want) {
        snprintf(msg, sizeof(msg), "PS.PULL %.60s: unexpected reply (%s)", k->key, u->shape_hint);
        pull_failed(c, u, PS_ERR_PROTOCOL, msg);
    } else if (!p->direct && u->pull.live && p->dst &&
               pull_deliver(p, reply->element[1]->str, reply->element[1]->len) != 0) {
        snprintf(msg, sizeof(msg), "PS.PULL %.60s: undecodable data", k->key);
        pull_failed(c, u, PS_ERR_PROTOCOL, msg);
    } else {
        uint64_t v = (uint64_t)reply->element[0]->integer;
        k->seen = v;
        k->has_seen = 1;
        k->seen_now = 1;
        if (k->has_acked && v < k->acked) {
            /* Older than what this client saw acknowledged: lost writes. */
            psi_lost_state(c, r->node, k->key, k->acked, 1, v, lost, sizeof(lost));
            if (psi_lost_state_continues(c) == 0) {
                snprintf(msg, sizeof(msg), "PS.PULL: %s", lost);
                pull_failed(c, u, PS_ERR_LOST_STATE, msg);
            }
            k->acked = v;
        }
        key_acked(k, v);
        c->stats.pulls++;
        c->stats.bytes_received += want;
        if (p->by_ids) c->stats.rows_pulled += p->nrows;
    }
    p->direct = 0;
    freeReplyObject(reply);
    return PSI_DONE;
}

/* Route pull 'p' (encoded 'len' bytes in p->cmd) by its key. */
static void pull_init(psPull *p, psUser *u, psKey *k, size_t len) {
    psi_req_init(&p->req, k->key, k->keylen);
    p->req.cmd = p->cmd;
    p->req.cmdlen = len;
    p->req.done = pull_done;
    p->req.sink = pull_sink;
    p->req.udata = p;
    p->u = u;
    p->k = k;
    p->timed_out = 0;
    p->direct = 0;
    k->seen_now = 0;
}

int psi_pull_dense(psPull *p, psUser *u, psKey *k, ps_format fmt, uint64_t minver, int wait_ms,
                   float *dst, size_t elements) {
    psWirePull a = {k->key, k->keylen, fmt, minver, wait_ms, NULL, 0, 0, NULL};
    size_t len = ps_wire_pull(&a, p->cmd, p->cmdcap);
    if (len > p->cmdcap) {
        if (grow(&p->cmd, &p->cmdcap, len, 1)) return -1;
        ps_wire_pull(&a, p->cmd, p->cmdcap);
    }
    pull_init(p, u, k, len);
    p->fmt = fmt;
    p->dst = dst;
    p->pos = NULL;
    p->nrows = 1;
    p->width = elements;
    p->by_ids = 0;
    p->minver = minver;
    return 0;
}

/* Encode key pull by ids 'p' (p->idfmt) of 'ids' (nids) into p->cmd and
 * route it. 0 or -1. */
static int pull_encode_ids(psPull *p, const uint64_t *ids, size_t nids) {
    psKey *k = p->k;
    psWirePull a = {k->key, k->keylen, p->fmt, 0, 0, ids, nids, p->idfmt, NULL};
    size_t len = ps_wire_pull(&a, p->cmd, p->cmdcap);
    if (len > p->cmdcap) {
        if (grow(&p->cmd, &p->cmdcap, len, 1)) return -1;
        ps_wire_pull(&a, p->cmd, p->cmdcap);
    }
    p->req.cmd = p->cmd;
    p->req.cmdlen = len;
    return 0;
}

int psi_pull_ids(psPull *p, psUser *u, psKey *k, ps_format fmt, const uint64_t *ids,
                 size_t nids, const size_t *pos, float *dst, size_t dim) {
    struct psBatches *bp = u->client->priv->batch;
    p->idfmt = PS_PROTO_IDFMT_RAW;
    if (bp->ids_ef && nids >= PS_IDS_EF_MIN) {
        /* Sorted copies of the ids and their positions: EF sends the ids
         * sorted and the rows come back in that order. */
        if (nids > p->scap) {
            free(p->sids);
            free(p->spos);
            p->scap = 0;
            p->sids = malloc(nids * sizeof(uint64_t));
            p->spos = malloc(nids * sizeof(size_t));
            if (p->sids == NULL || p->spos == NULL) return -1;
            p->scap = nids;
        }
        if (sort_ids(bp, ids, nids)) return -1;
        for (size_t i = 0; i < nids; i++) {
            p->sids[i] = bp->pairs[i].id;
            p->spos[i] = pos ? pos[bp->pairs[i].at] : bp->pairs[i].at;
        }
        if (ef_pays(bp, p->sids, nids)) {
            p->idfmt = PS_PROTO_IDFMT_EF;
            ids = p->sids;
            pos = p->spos;
        }
    }
    pull_init(p, u, k, 0);
    p->fmt = fmt;
    if (pull_encode_ids(p, ids, nids)) return -1;
    p->dst = dst;
    p->pos = pos;
    p->nrows = nids;
    p->width = dim;
    p->by_ids = 1;
    p->minver = 0;
    return 0;
}

void psi_pull_free(psPull *p) {
    free(p->cmd);
    free(p->sids);
    free(p->spos);
    p->cmd = NULL;
    p->sids = NULL;
    p->spos = NULL;
    p->cmdcap = p->scap = 0;
}

void psi_pulls_begin(psUser *u) {
    u->pull.open = 1;
    u->pull.live = 1;
    u->pull.pending = 0;
    u->pull.failed = 0;
}

void psi_pull_submit(psClient *c, psPull *p) {
    p->u->pull.pending++;
    psi_submit(c, &p->req);
}

static int pulls_finished(psClient *c, void *arg) {
    (void)c;
    return ((psUser *)arg)->pull.pending == 0;
}

int psi_pulls_sent(psClient *c, psUser *u) {
    psi_flush(c);
    if (u->pull.failed) {
        /* Failed already: finish it here, so that PS_ERR always means no
         * pull is left in flight. */
        int code = u->pull.failed;
        char msg[sizeof(u->pull.errstr)];
        snprintf(msg, sizeof(msg), "%s", u->pull.errstr);
        psi_run(c, pulls_finished, u);
        u->pull.open = 0;
        u->pull.live = 0;
        c->err = 0;
        psi_set_error(c, code, "%s", msg);
        return PS_ERR;
    }
    return PS_OK;
}

int psi_pulls_wait(psClient *c, psUser *u) {
    if (u->pull.pending && psi_run(c, pulls_finished, u) != 0 && u->pull.pending)
        psi_set_error(c, PS_ERR_OTHER, "internal error: pulls left without replies");
    u->pull.open = 0;
    u->pull.live = 0;
    if (u->pull.failed && !c->err) psi_set_error(c, u->pull.failed, "%s", u->pull.errstr);
    return c->err ? PS_ERR : PS_OK;
}

/* ========================================================================
 * Pushes: encoding
 * ======================================================================== */

/* Encode push 'p' from its arguments (again after a change). 0 or -1. */
static int push_encode(psClient *c, psPush *p) {
    const psKey *k = p->k;
    int flags = c->priv->batch->flags;
    int wflags = (flags & PS_FLAG_NO_PUSH_ID ? PS_WIRE_NO_ID : 0) |
                 (flags & PS_FLAG_NO_PUSH_VERSION ? PS_WIRE_NO_VERSION : 0);
    size_t hl, tl, idlen = strlen(c->client_id);
    if (grow(&p->head, &p->headcap, ps_wire_pushgrad_head_size(k->keylen), 1)) return -1;
    /* by ids: IDS, never SCALE */
    psWirePush a = {k->key, k->keylen, p->bloblen, p->fmt, p->has_version, p->version,
                    c->client_id, p->seq, p->by_ids ? 1.0f : p->scale, wflags,
                    p->by_ids ? p->ids : NULL, p->nids, p->idfmt};
    if (grow(&p->tail, &p->tailcap, p->by_ids ? PS_WIRE_PUSH_IDS_TAIL_MAX(p->nids, idlen)
                                              : PS_WIRE_PUSH_TAIL_MAX(idlen), 1) ||
        ps_wire_pushgrad(&a, p->head, p->headcap, &hl, p->tail, p->tailcap, &tl) != 0)
        return -1;
    p->req.cmd = p->head;
    p->req.cmdlen = hl;
    p->req.blob = p->blob;
    p->req.bloblen = p->bloblen;
    p->req.tail = p->tail;
    p->req.taillen = tl;
    return 0;
}

/* What an acknowledged push adds to the client's counters (sign -1: an
 * acknowledgement taken back). */
static void count_acked(psClient *c, const psPush *p, int sign) {
    if (p->by_ids && sign > 0) c->stats.rows_pushed += p->nids;
    else if (p->by_ids) c->stats.rows_pushed -= p->nids;
    else if (sign > 0) c->stats.pushes++;
    else c->stats.pushes--;
}

/* ========================================================================
 * Pushes: groups and their WAITs
 * ======================================================================== */

static void group_release(psPushGroup *g) {
    if (--g->outstanding == 0) g->in_use = 0;
}

/* Count the acknowledged pushes of 'g' answered by 'node' as not
 * replicated (each once). */
static void count_unreplicated(psClient *c, psPushGroup *g, int node) {
    for (int k = 0; k < g->n; k++) {
        psPush *a = &g->items[k];
        if (a->req.node != node || a->req.state != PSS_DONE || !a->acked || a->unreplicated)
            continue;
        a->unreplicated = 1;
        c->stats.unreplicated_pushes++;
    }
}

/* The WAIT after the group's pushes on 'node' answered, or (reply NULL)
 * was lost with its connection (batch.h). */
static void wait_done(psClient *c, void *udata, int node, redisReply *reply) {
    psPushGroup *g = udata;
    int wait_replicas = psi_wait_replicas(c);
    if (reply == NULL) {
        for (int k = 0; k < g->n; k++) {
            psPush *a = &g->items[k];
            if (a->req.node != node || a->req.state != PSS_DONE || !a->acked) continue;
            a->acked = 0;
            a->rewait = 1;
            count_acked(c, a, -1);  /* counted again when acknowledged again */
            g->outstanding++;
            psi_resend(c, &a->req, "connection lost before WAIT answered");
        }
        c->stats.wait_short++;
    } else if (reply->type == REDIS_REPLY_ERROR) {
        /* The server refused the WAIT (NOPERM: a role without +wait; a
         * server that cannot WAIT). Not a replica count: asking again
         * (policy block) would be refused at once, forever, and "degraded"
         * would name the wrong cause. The pushes are applied; the
         * durability asked for cannot be had: an error under every policy. */
        char name[80];
        c->stats.wait_short++;
        count_unreplicated(c, g, node);
        psi_set_error(c, PS_ERR_DURABILITY,
                      "durability: WAIT %d on %s refused: %.120s (pushes there are applied, "
                      "not known replicated; grant +wait or run without wait_replicas)",
                      wait_replicas, psi_node_name(c, node, name, sizeof(name)), reply->str);
    } else if (reply->type != REDIS_REPLY_INTEGER || reply->integer < wait_replicas) {
        int policy = psi_wait_short(c, node, reply->type == REDIS_REPLY_INTEGER ? reply->integer : 0);
        if (policy == PS_DURABILITY_BLOCK) {
            /* Not done until replicated: the same WAIT again (it blocks up
             * to wait_timeout_ms on the server, no busy loop). */
            freeReplyObject(reply);
            if (psi_submit_durable_wait(c, node, wait_done, g) == 0) return;
            group_release(g);
            return;
        }
        if (policy == PS_DURABILITY_DEGRADE) count_unreplicated(c, g, node);
    } else {
        psi_wait_full(c, node);
    }
    if (reply) freeReplyObject(reply);
    group_release(g);
}

/* Push 'a' answered with a version by 'node'. A push resent after its WAIT
 * was lost gets a WAIT of its own, after the last such push in flight there. */
static void push_acked(psClient *c, psPush *a, int node) {
    psPushGroup *g = a->g;
    int later = 0;
    a->acked = 1;
    if (!a->rewait) return;
    /* Resent after its WAIT was lost (a failover): the node that applied it
     * now must confirm its replicas too, with one WAIT after the last such
     * push in flight there. */
    a->rewait = 0;
    for (int k = 0; k < g->n && !later; k++) {
        const psPush *o = &g->items[k];
        later = o->rewait && o->req.node == node && o->req.state == PSS_FLIGHT;
    }
    if (later) return; /* that one WAITs */
    if (!psi_wait_wanted(c, node))
        count_unreplicated(c, g, node);
    else if (psi_submit_durable_wait(c, node, wait_done, g) == 0)
        g->outstanding++;
}

/* What the reply of push 'p' means (reply NULL: the request failed). */
#define PUSH_ACKED 0            /* applied or a duplicate */
#define PUSH_RESEND 1           /* lost state under policy continue: resend with the new VERSION */
#define PUSH_FAILED 2           /* counted and recorded; the push is finished */

/* "VERSION is newer than the tensor's version" and a key gone after an
 * acknowledgement are lost state (announced; policy continue resends, stop
 * fails the push), STALE is counted in stale_rejects, anything else in
 * push_errors with the error recorded. Frees 'reply'. */
static int push_reply(psClient *c, psPush *p, redisReply *reply) {
    psKey *k = p->k;
    char msg[256];
    int out = PUSH_FAILED;
    if (reply == NULL) {
        c->stats.push_errors++;
    } else if (reply->type == REDIS_REPLY_INTEGER) {
        key_acked(k, (uint64_t)reply->integer);
        out = PUSH_ACKED;
    } else if (p->has_version && is_version_ahead(reply)) {
        /* The server lost updates this client had pulled (a failover or
         * restart that lost acknowledged writes). Policy continue: the
         * gradient is still good, resend it as computed from version now,
         * once per hop like a redirect. */
        k->acked = psi_push_rollback(c, p->req.node, k->key, reply->str, p->version, k->has_acked,
                                     k->acked, msg, sizeof(msg));
        if (psi_lost_state_continues(c)) {
            p->version = k->acked;
            out = PUSH_RESEND;
        } else {
            c->stats.push_errors++;
            psi_set_error(c, PS_ERR_LOST_STATE, "PS.PUSHGRAD: %s", msg);
        }
    } else if (p->by_ids && p->idfmt == PS_PROTO_IDFMT_EF && is_unknown_idformat(reply)) {
        /* A server before IDFORMAT refused it whole: resend it raw (same
         * seq), and raw ids on this client from now on. */
        c->priv->batch->ids_ef = 0;
        p->idfmt = PS_PROTO_IDFMT_RAW;
        out = PUSH_RESEND;
    } else if (is_stale(reply)) {
        c->stats.stale_rejects++;
    } else if (is_nokey(reply) && k->has_acked) {
        c->stats.push_errors++;
        psi_lost_state(c, p->req.node, k->key, k->acked, 0, 0, msg, sizeof(msg));
        psi_set_error(c, PS_ERR_LOST_STATE, "PS.PUSHGRAD: %s", msg);
    } else {
        const char *hint = "";
        c->stats.push_errors++;
        if (is_unknown_option(reply))
            hint = " (server without VERSION/ID? see PS_FLAG_NO_PUSH_ID)";
        else if (is_nokey(reply))
            hint = " (never seen by this client: not created yet, or created with another "
                   "partition size?)";
        psi_set_error(c, PS_ERR_SERVER, "PS.PUSHGRAD %s: %.60s%s", k->key,
                      reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply", hint);
    }
    if (reply) freeReplyObject(reply);
    return out;
}

static int push_done(psClient *c, psReq *r, redisReply *reply) {
    psPush *p = r->udata;
    switch (push_reply(c, p, reply)) {
    case PUSH_RESEND:
        if (push_encode(c, p) == 0) return PSI_RESEND;
        c->stats.push_errors++;
        psi_set_error(c, PS_ERR_OOM, "out of memory");
        break;
    case PUSH_ACKED:
        count_acked(c, p, 1);
        push_acked(c, p, r->node); /* a lost WAIT resends it (wait_done) */
        break;
    default: break;
    }
    group_release(p->g);
    return PSI_DONE;
}

static int window_has_free(psClient *c, void *arg) {
    const psPushWindow *w = arg;
    (void)c;
    for (int i = 0; i < w->n; i++)
        if (!w->g[i].in_use) return 1;
    return 0;
}

psPushGroup *psi_push_begin(psClient *c, psUser *u, int nmax) {
    psPushWindow *w = window_of(c, u);
    psPushGroup *g = NULL;
    if (w->g == NULL) {
        /* A window of its own, sized by the client's at the first push. */
        int n = c->priv->batch->push_window;
        if ((w->g = calloc((size_t)n, sizeof(psPushGroup))) == NULL) {
            psi_set_error(c, PS_ERR_OOM, "out of memory");
            return NULL;
        }
        w->n = n;
    }
    if (psi_run(c, window_has_free, w) != 0) {
        psi_set_error(c, PS_ERR_OTHER, "internal error: push window never freed");
        return NULL;
    }
    for (int i = 0; i < w->n; i++)
        if (!w->g[i].in_use) { g = &w->g[i]; break; }
    if (g->cap < nmax) {
        psPush *ni = realloc(g->items, sizeof(*ni) * (size_t)nmax);
        if (ni == NULL) {
            psi_set_error(c, PS_ERR_OOM, "out of memory for the push buffer");
            return NULL;
        }
        memset(ni + g->cap, 0, sizeof(*ni) * (size_t)(nmax - g->cap));
        g->items = ni;
        g->cap = nmax;
    }
    g->user = u;
    g->n = 0;
    return g;
}

psPush *psi_push_add(psClient *c, psPushGroup *g, psKey *k) {
    psPush *p = &g->items[g->n++];
    p->g = g;
    p->k = k;
    p->fmt = PS_FMT_F32;
    p->bloblen = 0;
    p->by_ids = 0;
    p->nids = 0;
    p->idfmt = PS_PROTO_IDFMT_RAW;
    p->has_version = 0;
    p->version = 0;
    p->scale = 1.0f;
    if (k->seq == 0) k->seq = c->priv->batch->seq_base;
    if (c->priv->batch->fixed_seq) {
        p->seq = c->priv->batch->fixed_seq;
        if (k->seq < p->seq) k->seq = p->seq;
    } else {
        p->seq = ++k->seq;
    }
    p->acked = p->rewait = p->unreplicated = 0;
    return p;
}

unsigned char *psi_push_blob(psPush *p, size_t len) {
    if (grow(&p->blob, &p->blobcap, len, 1)) return NULL;
    p->bloblen = len;
    return p->blob;
}

uint64_t *psi_push_ids(psPush *p, size_t n) {
    if (grow(&p->ids, &p->idcap, n, sizeof(uint64_t))) return NULL;
    p->by_ids = 1;
    return p->ids;
}

/* Sort push by ids 'p' (ids and blob rows, stably) and choose its id
 * format, once before its first encoding. 0 or -1 (out of memory). */
static int push_plan_ids(struct psBatches *bp, psPush *p) {
    size_t n = p->nids, rb;
    p->idfmt = PS_PROTO_IDFMT_RAW;
    if (!p->by_ids || !bp->ids_ef || n < PS_IDS_EF_MIN || p->bloblen % n) return 0;
    rb = p->bloblen / n; /* the table formats have fixed-size rows */
    if (!ps_idlist_sorted(p->ids, n)) {
        if (sort_ids(bp, p->ids, n) || grow(&bp->rowtmp, &bp->rowcap, p->bloblen, 1)) return -1;
        for (size_t i = 0; i < n; i++) {
            p->ids[i] = bp->pairs[i].id;
            memcpy(bp->rowtmp + i * rb, p->blob + bp->pairs[i].at * rb, rb);
        }
        /* the sorted rows become the push's blob, its old buffer the scratch */
        unsigned char *t = p->blob;
        size_t tc = p->blobcap;
        p->blob = bp->rowtmp;
        p->blobcap = bp->rowcap;
        bp->rowtmp = t;
        bp->rowcap = tc;
    }
    if (ef_pays(bp, p->ids, n)) p->idfmt = PS_PROTO_IDFMT_EF;
    return 0;
}

int psi_push_send(psClient *c, psPushGroup *g) {
    int k, j;
    if (g->n == 0) return c->err ? PS_ERR : PS_OK;
    for (k = 0; k < g->n; k++) {
        psPush *p = &g->items[k];
        psi_req_init(&p->req, p->k->key, p->k->keylen);
        p->req.done = push_done;
        p->req.udata = p;
        if (push_plan_ids(c->priv->batch, p) != 0 || push_encode(c, p) != 0) {
            psi_set_error(c, PS_ERR_OOM, "out of memory");
            return PS_ERR;
        }
        c->stats.bytes_sent += p->bloblen;
    }
    g->in_use = 1;
    g->outstanding = 1; /* guards the group while its WAITs are queued */
    for (k = 0; k < g->n; k++) {
        g->outstanding++;
        psi_submit(c, &g->items[k].req);
    }
    if (psi_wait_replicas(c) > 0) {
        /* One WAIT per node after the group's pushes on it. */
        for (k = 0; k < g->n; k++) {
            psPush *a = &g->items[k];
            int node, seen = 0;
            if (a->req.node < 0 || a->req.state != PSS_FLIGHT) continue;
            node = a->req.node;
            for (j = 0; j < k && !seen; j++) {
                const psPush *o = &g->items[j];
                seen = o->req.node == node && o->req.state == PSS_FLIGHT;
            }
            if (seen) continue;
            if (!psi_wait_wanted(c, node)) {
                /* Degraded node, policy degrade: not WAITed for, not replicated. */
                for (j = k; j < g->n; j++) {
                    psPush *o = &g->items[j];
                    if (o->req.node == node && o->req.state == PSS_FLIGHT) {
                        o->unreplicated = 1;
                        c->stats.unreplicated_pushes++;
                    }
                }
                continue;
            }
            if (psi_submit_durable_wait(c, node, wait_done, g) == 0) g->outstanding++;
        }
    }
    group_release(g);
    psi_flush(c);
    return c->err ? PS_ERR : PS_OK;
}
