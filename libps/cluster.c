/* cluster.c -- libps topology and request engine.
 *
 * Nodes are reached through one blocking hiredis context each. Requests
 * (psReq) are appended to the context of the node that owns their hash
 * slot; every node keeps a FIFO of what its pending replies answer. The
 * engine (psi_run) writes every node's output buffer first, then polls all
 * sockets with pending replies and handles replies as they come, so a fan
 * out to N nodes costs one round trip, not N.
 *
 * Tensor bytes avoid hiredis's copies: a PS.PUSHGRAD blob of 16 KB or more
 * is written with one sendmsg from the push slot's buffer (after whatever
 * hiredis has buffered before it), replies are read up to 256 KB at a time
 * straight into the reader's buffer, and a PS.PULL data blob is decoded
 * from there into the caller's array (pull_create_string). The sockets get
 * 4 MB kernel buffers so a pull's reply can arrive while the caller computes.
 *
 * Failure handling, per reply or connection:
 *   MOVED slot addr   the slot map entry is updated, a full map refresh is
 *                     scheduled, the request is resent (same arguments).
 *   ASK slot addr     the request is resent once to addr, preceded by ASKING.
 *   TRYAGAIN, CLUSTERDOWN, LOADING, MASTERDOWN, READONLY
 *                     resent after an exponential backoff, until both
 *                     max_retries resends and retry_timeout_ms are used up.
 *   I/O error/timeout the context is dead (hiredis 0.14): it is freed, every
 *                     request pending on it is resent in its original order
 *                     after a backoff and (cluster) a map refresh.
 *   standalone with several addresses: on errors the first address that
 *                     answers ROLE as master becomes the node of every slot.
 *   ERR VERSION v is newer than the tensor's version c
 *                     (the server lost writes this client had pulled) the
 *                     push is resent with VERSION c.
 *   lost WAIT         (wait_replicas > 0) the pushes the WAIT covered are
 *                     resent too: they may not have reached a replica.
 * Resends keep their order per node, so the seqs of one key reach the
 * server increasing, and a PS.PUSHGRAD is resent with its original seq.
 */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ps_internal.h"

#define PS_BACKOFF_CAP_MS 2000

/* ========================================================================
 * Errors and small helpers
 * ======================================================================== */

/* Record an error on 'c' unless one is already recorded by this call (the
 * first error of a call is the one worth reading). */
void psi_set_error(psClient *c, int code, const char *fmt, ...) {
    va_list ap;
    if (c->err) return;
    c->err = code;
    va_start(ap, fmt);
    vsnprintf(c->errstr, sizeof(c->errstr), fmt, ap);
    va_end(ap);
}

static int64_t mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(long ms) {
    struct timespec ts;
    if (ms <= 0) return;
    ts.tv_sec = ms / 1000;
    ts.tv_nsec = (ms % 1000) * 1000000L;
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {}
}

/* Split "host:port" (the last ':' separates, "[v6]:port" allowed) into a
 * malloc'ed host and a port. Returns 0 or -1. */
static int parse_addr(const char *addr, size_t len, char **host, int *port) {
    const char *colon = NULL;
    size_t i, hlen;
    long p;
    char *end, pbuf[8];
    for (i = 0; i < len; i++)
        if (addr[i] == ':') colon = addr + i;
    if (colon == NULL || colon == addr) return -1;
    hlen = (size_t)(colon - addr);
    if (len - hlen - 1 == 0 || len - hlen - 1 >= sizeof(pbuf)) return -1;
    memcpy(pbuf, colon + 1, len - hlen - 1);
    pbuf[len - hlen - 1] = '\0';
    p = strtol(pbuf, &end, 10);
    if (*end != '\0' || p <= 0 || p > 65535) return -1;
    if (addr[0] == '[' && hlen >= 2 && addr[hlen - 1] == ']') {
        addr++;
        hlen -= 2;
    }
    *host = malloc(hlen + 1);
    if (*host == NULL) return -1;
    memcpy(*host, addr, hlen);
    (*host)[hlen] = '\0';
    *port = (int)p;
    return 0;
}

/* ========================================================================
 * Connections
 * ======================================================================== */

/* Open an authenticated connection to host:port with the client's timeouts.
 * Returns the context, or NULL with a message in 'err' (size 'errlen') and
 * *auth_failed set when the server refused the credentials. */
static redisContext *open_conn(psClient *c, const char *host, int port, char *err,
                               size_t errlen, int *auth_failed) {
    psClientPriv *pv = c->priv;
    struct timeval tv;
    redisContext *ctx;
    redisReply *r;

    *auth_failed = 0;
    tv.tv_sec = pv->connect_timeout_ms / 1000;
    tv.tv_usec = (pv->connect_timeout_ms % 1000) * 1000;
    ctx = redisConnectWithTimeout(host, port, tv);
    if (ctx == NULL) {
        snprintf(err, errlen, "%.50s:%d: out of memory", host, port);
        return NULL;
    }
    if (ctx->err) {
        snprintf(err, errlen, "%.50s:%d: %.70s", host, port, ctx->errstr);
        redisFree(ctx);
        return NULL;
    }
    if (pv->command_timeout_ms > 0) {
        tv.tv_sec = pv->command_timeout_ms / 1000;
        tv.tv_usec = (pv->command_timeout_ms % 1000) * 1000;
        redisSetTimeout(ctx, tv);
    }
    redisEnableKeepAlive(ctx);
    if (pv->password) {
        if (pv->user)
            r = redisCommand(ctx, "AUTH %s %s", pv->user, pv->password);
        else
            r = redisCommand(ctx, "AUTH %s", pv->password);
        if (r == NULL || r->type == REDIS_REPLY_ERROR) {
            snprintf(err, errlen, "%.50s:%d: AUTH failed: %.60s", host, port,
                     r ? r->str : ctx->errstr);
            *auth_failed = r != NULL;
            if (r) freeReplyObject(r);
            redisFree(ctx);
            return NULL;
        }
        freeReplyObject(r);
    }
    return ctx;
}

/* Index of node host:port, added (not connected) when unknown; -1 on OOM. */
static int node_find_or_add(psClient *c, const char *host, size_t hlen, int port) {
    psClientPriv *pv = c->priv;
    psNode *n;
    int i;
    for (i = 0; i < pv->nnodes; i++)
        if (pv->nodes[i].port == port && strlen(pv->nodes[i].host) == hlen &&
            memcmp(pv->nodes[i].host, host, hlen) == 0)
            return i;
    if (pv->nnodes == pv->nodecap) {
        int cap = pv->nodecap ? pv->nodecap * 2 : 8;
        psNode *nn = realloc(pv->nodes, sizeof(*nn) * (size_t)cap);
        if (nn == NULL) return -1;
        pv->nodes = nn;
        pv->nodecap = cap;
    }
    n = &pv->nodes[pv->nnodes];
    memset(n, 0, sizeof(*n));
    n->host = malloc(hlen + 1);
    if (n->host == NULL) return -1;
    memcpy(n->host, host, hlen);
    n->host[hlen] = '\0';
    n->port = port;
    return pv->nnodes++;
}

/* ========================================================================
 * Replies straight into the caller's arrays
 *
 * hiredis builds every bulk string as a fresh allocation and a copy; for a
 * pull of a large partition that is a page-faulting malloc plus a copy per
 * pull, on top of the copy into the model array. The node contexts use
 * reader functions that are hiredis's own, except that the data blob of a
 * PS.PULL reply is decoded right away from the reader's buffer into the
 * destination array (psReq.direct records it) and the reply keeps an empty
 * string in its place.
 * ======================================================================== */

static void *pull_create_string(const redisReadTask *task, char *str, size_t len) {
    psClient *c = task->privdata;
    psClientPriv *pv = c->priv;
    if (pv->reading_node >= 0 && task->type == REDIS_REPLY_STRING && task->parent &&
        task->idx == 1 && task->parent->elements == 2) {
        psNode *n = &pv->nodes[pv->reading_node];
        if (n->qlen && n->q[n->qhead].kind == PSQ_REQ) {
            psReq *r = n->q[n->qhead].r;
            if (r->kind == PSR_PULL && psi_pull_direct(c, r, (const unsigned char *)str, len) == 0)
                return pv->create_string(task, str, 0);
        }
    }
    return pv->create_string(task, str, len);
}

/* Give the fresh context 'ctx' of a node the client's reader settings. */
static void reader_setup(psClient *c, redisContext *ctx) {
    /* Keep the reader's buffer between replies: big pulls would otherwise
     * regrow it into fresh pages every time. */
    ctx->reader->maxbuf = 0;
    if (c->priv->create_string == NULL) {
        c->priv->fns = *ctx->reader->fn;
        c->priv->create_string = c->priv->fns.createString;
        c->priv->fns.createString = pull_create_string;
    }
    ctx->reader->fn = &c->priv->fns;
    ctx->reader->privdata = c;
    /* Room in the kernel for whole tensors both ways: a pull's reply can
     * land while the worker computes, and a push's write returns once the
     * bytes are queued, instead of trickling through the default buffers
     * one window per wakeup. The kernel caps it (net.core.[rw]mem_max). */
    int sz = PS_SOCKET_BUFFER;
    setsockopt(ctx->fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
    setsockopt(ctx->fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
}

/* Make sure node 'i' has a live context. Returns 0, or -1 with 'err'. */
static int node_ensure(psClient *c, int i, char *err, size_t errlen) {
    psNode *n = &c->priv->nodes[i];
    int auth_failed;
    if (n->ctx) return 0;
    n->ctx = open_conn(c, n->host, n->port, err, errlen, &auth_failed);
    if (n->ctx == NULL) return -1;
    reader_setup(c, n->ctx);
    if (n->ever_connected) c->stats.reconnects++;
    n->ever_connected = 1;
    return 0;
}

/* ========================================================================
 * Slot map
 * ======================================================================== */

/* Load the slot map from a CLUSTER SLOTS reply 'r' got from 'from_host'.
 * Returns 0 or -1 (malformed). Slots not covered become -1. */
static int load_slots(psClient *c, redisReply *r, const char *from_host) {
    psClientPriv *pv = c->priv;
    size_t i;
    int s;
    if (r->type != REDIS_REPLY_ARRAY) return -1;
    for (s = 0; s < PS_CLUSTER_SLOTS; s++) pv->slots[s] = -1;
    for (i = 0; i < r->elements; i++) {
        redisReply *e = r->element[i], *m;
        const char *host;
        size_t hlen;
        long long a, b;
        int node;
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
            e->element[0]->type != REDIS_REPLY_INTEGER ||
            e->element[1]->type != REDIS_REPLY_INTEGER ||
            e->element[2]->type != REDIS_REPLY_ARRAY)
            return -1;
        m = e->element[2];
        if (m->elements < 2 || m->element[0]->type != REDIS_REPLY_STRING ||
            m->element[1]->type != REDIS_REPLY_INTEGER)
            return -1;
        a = e->element[0]->integer;
        b = e->element[1]->integer;
        if (a < 0 || b >= PS_CLUSTER_SLOTS || a > b) return -1;
        host = m->element[0]->str;
        hlen = m->element[0]->len;
        if (hlen == 0 || (hlen == 1 && host[0] == '?')) {
            host = from_host;           /* a node that does not know its own IP */
            hlen = strlen(from_host);
        }
        node = node_find_or_add(c, host, hlen, (int)m->element[1]->integer);
        if (node < 0) return -1;
        for (s = (int)a; s <= (int)b; s++) pv->slots[s] = (int16_t)node;
    }
    return 0;
}

/* Several standalone addresses (a master and its replicas, failed over by
 * an operator with REPLICAOF NO ONE, or by Sentinel): point every slot at
 * the first address that answers ROLE as a master. Returns 0, or -1 with
 * an error recorded when none does (the caller keeps retrying). */
static int refresh_standalone(psClient *c) {
    psClientPriv *pv = c->priv;
    char err[128] = "no master among the addresses";
    int i, s;
    for (i = 0; i < pv->nseeds; i++) {
        char *host;
        int port, auth_failed, node, ok;
        redisContext *ctx;
        redisReply *r;
        if (parse_addr(pv->seeds[i], strlen(pv->seeds[i]), &host, &port) != 0) continue;
        ctx = open_conn(c, host, port, err, sizeof(err), &auth_failed);
        if (ctx == NULL) {
            free(host);
            continue;
        }
        r = redisCommand(ctx, "ROLE");
        ok = r && r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
             r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, "master") == 0;
        if (r) freeReplyObject(r);
        redisFree(ctx);
        node = ok ? node_find_or_add(c, host, strlen(host), port) : -1;
        free(host);
        if (node >= 0) {
            for (s = 0; s < PS_CLUSTER_SLOTS; s++) pv->slots[s] = (int16_t)node;
            c->stats.refreshes++;
            return 0;
        }
    }
    psi_set_error(c, PS_ERR_IO, "no master among %d addresses (%.70s)", pv->nseeds, err);
    return -1;
}

/* Reload the slot map through a fresh connection to any known node or
 * seed (a separate connection keeps the pipelines of the node contexts
 * untouched). Returns 0 or -1 with an error recorded. */
static int refresh(psClient *c) {
    psClientPriv *pv = c->priv;
    char err[128] = "no address";
    int i, total = pv->nnodes + pv->nseeds;
    pv->need_refresh = 0;
    if (!c->cluster) return pv->nseeds > 1 ? refresh_standalone(c) : 0;
    for (i = 0; i < total; i++) {
        char *host = NULL;
        int port, auth_failed, ok;
        redisContext *ctx;
        redisReply *r;
        if (i < pv->nnodes) {
            host = strdup(pv->nodes[i].host);
            port = pv->nodes[i].port;
            if (host == NULL) continue;
        } else if (parse_addr(pv->seeds[i - pv->nnodes], strlen(pv->seeds[i - pv->nnodes]),
                              &host, &port) != 0) {
            continue;
        }
        ctx = open_conn(c, host, port, err, sizeof(err), &auth_failed);
        if (ctx == NULL) {
            free(host);
            continue;
        }
        r = redisCommand(ctx, "CLUSTER SLOTS");
        ok = r && r->type == REDIS_REPLY_ARRAY && r->elements > 0 && load_slots(c, r, host) == 0;
        if (r) freeReplyObject(r);
        redisFree(ctx);
        free(host);
        if (ok) {
            c->stats.refreshes++;
            return 0;
        }
    }
    psi_set_error(c, PS_ERR_CLUSTER, "cluster unreachable: no node answered CLUSTER SLOTS (%.70s)", err);
    return -1;
}

/* Split 'addrs' into seeds, find the first that answers and detect the
 * mode. Returns 0 or -1 with the error recorded. */
int psi_topology_init(psClient *c, const char *addrs) {
    psClientPriv *pv = c->priv;
    const char *p = addrs, *comma;
    char err[128] = "", lasterr[128] = "no address given";
    int i, s;

    for (s = 0; s < PS_CLUSTER_SLOTS; s++) pv->slots[s] = -1;
    while (p && *p) {
        size_t len;
        char **ns;
        comma = strchr(p, ',');
        len = comma ? (size_t)(comma - p) : strlen(p);
        while (len && (*p == ' ')) { p++; len--; }
        while (len && p[len - 1] == ' ') len--;
        if (len) {
            char *host;
            int port;
            if (parse_addr(p, len, &host, &port) != 0) {
                psi_set_error(c, PS_ERR_ARG, "bad address '%.*s' (want host:port)", (int)len, p);
                return -1;
            }
            free(host);
            ns = realloc(pv->seeds, sizeof(char *) * (size_t)(pv->nseeds + 1));
            if (ns == NULL) goto oom;
            pv->seeds = ns;
            if ((pv->seeds[pv->nseeds] = strndup(p, len)) == NULL) goto oom;
            pv->nseeds++;
        }
        p = comma ? comma + 1 : NULL;
    }
    if (pv->nseeds == 0) {
        psi_set_error(c, PS_ERR_ARG, "no address given (want host:port[,host:port...])");
        return -1;
    }
    for (i = 0; i < pv->nseeds; i++) {
        char *host;
        int port, auth_failed, node;
        redisContext *ctx;
        redisReply *r;
        parse_addr(pv->seeds[i], strlen(pv->seeds[i]), &host, &port);
        ctx = open_conn(c, host, port, err, sizeof(err), &auth_failed);
        if (ctx == NULL) {
            free(host);
            memcpy(lasterr, err, sizeof(err));
            if (auth_failed) {
                psi_set_error(c, PS_ERR_AUTH, "%s", err);
                return -1;
            }
            continue;
        }
        r = redisCommand(ctx, "CLUSTER SLOTS");
        if (r == NULL) {
            snprintf(lasterr, sizeof(lasterr), "%.50s: %.70s", pv->seeds[i], ctx->errstr);
            redisFree(ctx);
            free(host);
            continue;
        }
        if (r->type == REDIS_REPLY_ERROR && strstr(r->str, "cluster support disabled")) {
            /* standalone: this connection becomes node 0, owner of every slot */
            freeReplyObject(r);
            node = node_find_or_add(c, host, strlen(host), port);
            free(host);
            if (node < 0) { redisFree(ctx); goto oom; }
            pv->nodes[node].ctx = ctx;
            pv->nodes[node].ever_connected = 1;
            reader_setup(c, ctx);
            for (s = 0; s < PS_CLUSTER_SLOTS; s++) pv->slots[s] = (int16_t)node;
            c->cluster = 0;
            return 0;
        }
        if (r->type == REDIS_REPLY_ARRAY && r->elements > 0) {
            c->cluster = 1;
            if (load_slots(c, r, host) != 0) {
                snprintf(lasterr, sizeof(lasterr), "%.50s: malformed CLUSTER SLOTS reply", pv->seeds[i]);
                freeReplyObject(r);
                redisFree(ctx);
                free(host);
                c->cluster = 0;
                continue;
            }
            freeReplyObject(r);
            redisFree(ctx);
            free(host);
            return 0;
        }
        snprintf(lasterr, sizeof(lasterr), "%.50s: CLUSTER SLOTS: %.60s", pv->seeds[i],
                 r->type == REDIS_REPLY_ERROR ? r->str
                 : (r->type == REDIS_REPLY_ARRAY ? "no slots assigned" : "unexpected reply"));
        freeReplyObject(r);
        redisFree(ctx);
        free(host);
    }
    psi_set_error(c, PS_ERR_CLUSTER, "cannot connect to any of %.40s (%.80s)", addrs, lasterr);
    return -1;
oom:
    psi_set_error(c, PS_ERR_OOM, "out of memory");
    return -1;
}

void psi_topology_free(psClient *c) {
    psClientPriv *pv = c->priv;
    int i;
    for (i = 0; i < pv->nnodes; i++) {
        if (pv->nodes[i].ctx) redisFree(pv->nodes[i].ctx);
        free(pv->nodes[i].host);
        free(pv->nodes[i].q);
    }
    free(pv->nodes);
    for (i = 0; i < pv->nseeds; i++) free(pv->seeds[i]);
    free(pv->seeds);
    free(pv->retry);
}

/* ========================================================================
 * Node queues and the retry list
 * ======================================================================== */

static int q_push(psNode *n, int kind, psReq *r, psPushSlot *ps) {
    if (n->qlen == n->qcap) {
        size_t cap = n->qcap ? n->qcap * 2 : 64, i;
        psQent *nq = malloc(sizeof(*nq) * cap);
        if (nq == NULL) return -1;
        for (i = 0; i < n->qlen; i++) nq[i] = n->q[(n->qhead + i) % n->qcap];
        free(n->q);
        n->q = nq;
        n->qcap = cap;
        n->qhead = 0;
    }
    n->q[(n->qhead + n->qlen) % n->qcap] = (psQent){kind, r, ps};
    n->qlen++;
    return 0;
}

static psQent q_pop(psNode *n) {
    psQent e = n->q[n->qhead];
    n->qhead = (n->qhead + 1) % n->qcap;
    n->qlen--;
    return e;
}

/* Finish 'r' as failed with an error naming its key. */
static void fail_req(psClient *c, psReq *r, int code, const char *why) {
    psi_set_error(c, code, "%.*s: %.100s", (int)(r->keylen > 40 ? 40 : r->keylen),
                  r->key ? r->key : "(no key)", why);
    r->failed = 1;
    r->state = PSS_DONE;
    psi_finish(c, r, NULL);
}

/* Put 'r' on the retry list. 'backoff': an error (sleeps before the
 * resend; the request is given up once it was resent max_retries times
 * and retry_timeout_ms passed since its first error, so a failover that
 * takes longer than the backoff sequence is still waited for); otherwise
 * a redirect. */
static void retry_req(psClient *c, psReq *r, int backoff, const char *why) {
    psClientPriv *pv = c->priv;
    if (backoff) {
        int64_t now = mono_ms();
        if (r->attempts == 0) r->first_err_ms = now;
        if (++r->attempts > pv->max_retries &&
            (pv->max_retries == 0 || now - r->first_err_ms >= pv->retry_timeout_ms)) {
            char msg[128];
            snprintf(msg, sizeof(msg), "%.80s (gave up after %d retries in %lld ms)", why,
                     r->attempts - 1, (long long)(now - r->first_err_ms));
            fail_req(c, r, c->cluster ? PS_ERR_CLUSTER : PS_ERR_IO, msg);
            return;
        }
        if (r->attempts > pv->backoff_level) pv->backoff_level = r->attempts;
        c->stats.retries++;
    } else if (++r->redirects > PS_MAX_REDIRECTS) {
        fail_req(c, r, PS_ERR_CLUSTER, "too many MOVED/ASK redirects");
        return;
    }
    if (pv->nretry == pv->retrycap) {
        size_t cap = pv->retrycap ? pv->retrycap * 2 : 64;
        psReq **nr = realloc(pv->retry, sizeof(*nr) * cap);
        if (nr == NULL) {
            fail_req(c, r, PS_ERR_OOM, "out of memory");
            return;
        }
        pv->retry = nr;
        pv->retrycap = cap;
    }
    r->state = PSS_RETRY;
    pv->retry[pv->nretry++] = r;
}

/* A WAIT of push slot 'ps' on node 'i' will never be answered (the
 * connection died): its pushes on that node were applied but maybe not
 * replicated, so they are not acknowledged yet. Resend them (same seqs)
 * before whatever was queued after the WAIT, keeping the seq order per key:
 * the node that serves the slot next applies them once. */
static void resend_unconfirmed(psClient *c, psPushSlot *ps, int i, const char *why) {
    int k;
    for (k = 0; k < ps->nreqs; k++) {
        psReq *r = &ps->reqs[k];
        if (r->node != i || r->state != PSS_DONE || !r->acked) continue;
        r->acked = 0;
        c->stats.pushes--;
        ps->outstanding++;
        retry_req(c, r, 1, why);
    }
}

/* The connection of node 'i' is dead: free it and resend, in order, every
 * request that was waiting on it. */
static void node_fail(psClient *c, int i, const char *why) {
    psClientPriv *pv = c->priv;
    psNode *n = &pv->nodes[i];
    char msg[128];
    snprintf(msg, sizeof(msg), "%.50s:%d: %.60s", n->host, n->port, why);
    if (n->ctx) {
        redisFree(n->ctx);
        n->ctx = NULL;
    }
    while (n->qlen) {
        psQent e = q_pop(n);
        if (e.kind == PSQ_REQ) retry_req(c, e.r, 1, msg);
        else if (e.kind == PSQ_WAIT) {
            resend_unconfirmed(c, e.ps, i, msg);
            psi_finish_wait(c, e.ps, NULL);
        }
        n = &pv->nodes[i];
    }
    if (c->cluster || pv->nseeds > 1) pv->need_refresh = 1;
}

/* ========================================================================
 * Dispatch
 * ======================================================================== */

static int route(psClient *c, psReq *r) {
    psClientPriv *pv = c->priv;
    int i;
    if (r->ask_node >= 0) return r->ask_node;
    if (r->slot >= 0) return pv->slots[r->slot];
    if (pv->slots[0] >= 0) return pv->slots[0];
    for (i = 0; i < pv->nnodes; i++)
        if (pv->nodes[i].ctx) return i;
    return pv->nnodes ? 0 : -1;
}

/* Write the RESP text of PS.PUSHGRAD request 'r' on 'ctx' now: first what
 * hiredis has buffered (commands before it), then the command with one
 * sendmsg of header, blob (straight from the push slot's buffer) and the
 * trailing arguments. The socket is blocking with the command timeout.
 * Returns 0, or -1 with a message in 'err'. */
static int write_push(psClient *c, redisContext *ctx, psReq *r, char *err, size_t errlen) {
    psClientPriv *pv = c->priv;
    char head[400], tail[400];
    size_t hl, tl = 0;
    int argc = 5, wdone = 0, k;
    struct iovec iov[3];

    while (!wdone) {
        if (redisBufferWrite(ctx, &wdone) != REDIS_OK) {
            snprintf(err, errlen, "%.100s", ctx->errstr);
            return -1;
        }
    }
    if (r->has_version && !(pv->flags & PS_OPT_NO_PUSH_VERSION)) argc += 2;
    if (!(pv->flags & PS_OPT_NO_PUSH_ID)) argc += 3;
    if (r->scale != 1.0f) argc += 2;
    hl = (size_t)snprintf(head, sizeof(head), "*%d\r\n$11\r\nPS.PUSHGRAD\r\n$%zu\r\n%s\r\n$%zu\r\n",
                          argc, r->keylen, r->key, r->bloblen);
    const char *fmt = ps_format_name(r->m->push_fmt);
    k = snprintf(tail, sizeof(tail), "\r\n$6\r\nFORMAT\r\n$%zu\r\n%s\r\n", strlen(fmt), fmt);
    tl += (size_t)k;
    if (r->has_version && !(pv->flags & PS_OPT_NO_PUSH_VERSION)) {
        char v[24];
        int vl = snprintf(v, sizeof(v), "%llu", (unsigned long long)r->version);
        tl += (size_t)snprintf(tail + tl, sizeof(tail) - tl, "$7\r\nVERSION\r\n$%d\r\n%s\r\n", vl, v);
    }
    if (!(pv->flags & PS_OPT_NO_PUSH_ID)) {
        char v[24];
        int vl = snprintf(v, sizeof(v), "%llu", (unsigned long long)r->seq);
        tl += (size_t)snprintf(tail + tl, sizeof(tail) - tl, "$2\r\nID\r\n$%zu\r\n%s\r\n$%d\r\n%s\r\n",
                               strlen(c->client_id), c->client_id, vl, v);
    }
    if (r->scale != 1.0f) {
        char v[32];
        int vl = snprintf(v, sizeof(v), "%.9g", (double)r->scale);
        tl += (size_t)snprintf(tail + tl, sizeof(tail) - tl, "$5\r\nSCALE\r\n$%d\r\n%s\r\n", vl, v);
    }
    iov[0].iov_base = head;
    iov[0].iov_len = hl;
    iov[1].iov_base = (void *)r->blob;
    iov[1].iov_len = r->bloblen;
    iov[2].iov_base = tail;
    iov[2].iov_len = tl;
    k = 0;
    while (k < 3) {
        /* sendmsg, not writev: MSG_NOSIGNAL, a connection killed meanwhile is
         * an EPIPE error (resend elsewhere), not a SIGPIPE. */
        struct msghdr msg;
        memset(&msg, 0, sizeof(msg));
        msg.msg_iov = iov + k;
        msg.msg_iovlen = (size_t)(3 - k);
        ssize_t w = sendmsg(ctx->fd, &msg, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR) continue;
            snprintf(err, errlen, "%s", errno == EAGAIN || errno == EWOULDBLOCK
                                        ? "timeout writing a command" : strerror(errno));
            return -1;
        }
        while (k < 3 && (size_t)w >= iov[k].iov_len) {
            w -= (ssize_t)iov[k].iov_len;
            k++;
        }
        if (k < 3) {
            iov[k].iov_base = (char *)iov[k].iov_base + w;
            iov[k].iov_len -= (size_t)w;
        }
    }
    return 0;
}

/* Append request 'r' to its node's output buffer. */
static void dispatch(psClient *c, psReq *r) {
    psClientPriv *pv = c->priv;
    char err[128];
    int i = route(c, r), asking = r->ask_node >= 0, rc;
    psNode *n;

    r->ask_node = -1;
    r->node = -1;
    if (i < 0) {
        pv->need_refresh = c->cluster || pv->nseeds > 1;
        retry_req(c, r, 1, "no node serves this hash slot");
        return;
    }
    if (node_ensure(c, i, err, sizeof(err)) != 0) {
        pv->need_refresh = c->cluster || pv->nseeds > 1;
        retry_req(c, r, 1, err);
        return;
    }
    n = &pv->nodes[i];
    if (asking) {
        if (redisAppendCommand(n->ctx, "ASKING") != REDIS_OK || q_push(n, PSQ_ASKING, NULL, NULL)) {
            node_fail(c, i, "out of memory");
            retry_req(c, r, 1, "out of memory");
            return;
        }
    }
    if (r->kind == PSR_RAW) {
        rc = redisAppendFormattedCommand(n->ctx, r->cmd, r->cmdlen);
    } else if (r->kind == PSR_PULL) {
        const char *argv[4] = {"PS.PULL", r->key, "FORMAT", ps_format_name(r->m->pull_fmt)};
        size_t argl[4] = {7, r->keylen, 6, strlen(argv[3])};
        r->direct = 0;
        rc = redisAppendCommandArgv(n->ctx, r->m->pull_fmt == PS_FMT_F32 ? 2 : 4, argv, argl);
    } else if (r->bloblen >= PS_DIRECT_WRITE_MIN && r->keylen < 256) {
        /* A big push is written from the encode buffer itself (see
         * write_push), not copied twice into hiredis's output buffer. */
        if (q_push(n, PSQ_REQ, r, NULL) != 0) {
            node_fail(c, i, "out of memory");
            retry_req(c, r, 1, "out of memory");
            return;
        }
        r->state = PSS_FLIGHT;
        r->node = i;
        if (write_push(c, n->ctx, r, err, sizeof(err)) != 0) node_fail(c, i, err);
        return;
    } else {
        const char *argv[12];
        size_t argl[12];
        char vbuf[24], sbuf[24], scbuf[32];
        int argc = 0;
        argv[argc] = "PS.PUSHGRAD"; argl[argc++] = 11;
        argv[argc] = r->key; argl[argc++] = r->keylen;
        argv[argc] = (const char *)r->blob; argl[argc++] = r->bloblen;
        argv[argc] = "FORMAT"; argl[argc++] = 6;
        argv[argc] = ps_format_name(r->m->push_fmt); argl[argc] = strlen(argv[argc]); argc++;
        if (r->has_version && !(pv->flags & PS_OPT_NO_PUSH_VERSION)) {
            argv[argc] = "VERSION"; argl[argc++] = 7;
            argl[argc] = (size_t)snprintf(vbuf, sizeof(vbuf), "%llu", (unsigned long long)r->version);
            argv[argc++] = vbuf;
        }
        if (!(pv->flags & PS_OPT_NO_PUSH_ID)) {
            argv[argc] = "ID"; argl[argc++] = 2;
            argv[argc] = c->client_id; argl[argc++] = strlen(c->client_id);
            argl[argc] = (size_t)snprintf(sbuf, sizeof(sbuf), "%llu", (unsigned long long)r->seq);
            argv[argc++] = sbuf;
        }
        if (r->scale != 1.0f) {
            argv[argc] = "SCALE"; argl[argc++] = 5;
            argl[argc] = (size_t)snprintf(scbuf, sizeof(scbuf), "%.9g", (double)r->scale);
            argv[argc++] = scbuf;
        }
        rc = redisAppendCommandArgv(n->ctx, argc, argv, argl);
    }
    if (rc != REDIS_OK || q_push(n, PSQ_REQ, r, NULL) != 0) {
        node_fail(c, i, "out of memory");
        retry_req(c, r, 1, "out of memory");
        return;
    }
    r->state = PSS_FLIGHT;
    r->node = i;
}

/* Resend everything on the retry list, after a map refresh and a backoff
 * when an error (not a redirect) put requests there. */
static void run_retries(psClient *c) {
    psClientPriv *pv = c->priv;
    psReq **list;
    size_t n, i;
    if (pv->nretry == 0) return;
    if (pv->backoff_level > 0) {
        long ms = (long)pv->backoff_ms << (pv->backoff_level - 1 < 16 ? pv->backoff_level - 1 : 16);
        sleep_ms(ms > PS_BACKOFF_CAP_MS ? PS_BACKOFF_CAP_MS : ms);
        pv->backoff_level = 0;
    }
    if (pv->need_refresh) {
        int saved = c->err;
        refresh(c);
        if (!saved) c->err = 0;   /* a failed refresh shows up as failed dispatches */
    }
    /* Take the list: dispatch may put requests back on a new one. */
    list = pv->retry;
    n = pv->nretry;
    pv->retry = NULL;
    pv->nretry = pv->retrycap = 0;
    for (i = 0; i < n; i++) dispatch(c, list[i]);
    free(list);
}

void psi_submit(psClient *c, psReq *r) {
    if (c->priv->nretry) run_retries(c);
    r->attempts = r->redirects = 0;
    r->first_err_ms = 0;
    r->ask_node = -1;
    r->failed = 0;
    dispatch(c, r);
}

void psi_submit_wait(psClient *c, int i, psPushSlot *ps) {
    psNode *n = &c->priv->nodes[i];
    if (n->ctx == NULL) return;
    if (redisAppendCommand(n->ctx, "WAIT %d %d", c->priv->wait_replicas,
                           c->priv->wait_timeout_ms) != REDIS_OK ||
        q_push(n, PSQ_WAIT, NULL, ps) != 0) {
        node_fail(c, i, "out of memory");
        return;
    }
    ps->outstanding++;
}

/* ========================================================================
 * Replies
 * ======================================================================== */

static int err_is(const redisReply *r, const char *code) {
    size_t n = strlen(code);
    return r->len >= n && strncmp(r->str, code, n) == 0 && (r->len == n || r->str[n] == ' ');
}

/* Handle one reply read from node 'i' for queue entry 'e'. */
static void handle_reply(psClient *c, int i, psQent e, redisReply *reply) {
    psClientPriv *pv = c->priv;
    psReq *r = e.r;
    (void)i;
    if (e.kind == PSQ_ASKING) {
        freeReplyObject(reply);
        return;
    }
    if (e.kind == PSQ_WAIT) {
        psi_finish_wait(c, e.ps, reply);
        return;
    }
    if (reply->type == REDIS_REPLY_ERROR) {
        int moved = err_is(reply, "MOVED"), ask = err_is(reply, "ASK");
        if (moved || ask) {
            /* "MOVED <slot> <host>:<port>" */
            char *sp1 = strchr(reply->str, ' '), *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
            char *host;
            int port, node = -1;
            long slot = sp1 ? strtol(sp1 + 1, NULL, 10) : -1;
            if (sp2 && parse_addr(sp2 + 1, strlen(sp2 + 1), &host, &port) == 0) {
                node = node_find_or_add(c, host, strlen(host), port);
                free(host);
            }
            if (node < 0 || slot < 0 || slot >= PS_CLUSTER_SLOTS) {
                fail_req(c, r, PS_ERR_PROTOCOL, reply->str);
                freeReplyObject(reply);
                return;
            }
            if (moved) {
                c->stats.moved++;
                pv->slots[slot] = (int16_t)node;
                pv->need_refresh = 1;
            } else {
                c->stats.ask++;
                r->ask_node = node;
            }
            freeReplyObject(reply);
            retry_req(c, r, 0, "redirect");
            return;
        }
        if (r->kind == PSR_PUSH && r->has_version &&
            strstr(reply->str, "is newer than the tensor's version") != NULL) {
            /* "ERR VERSION v is newer than the tensor's version c": the server
             * lost updates this client had pulled (a failover or restart that
             * lost acknowledged writes). The gradient is still good: resend it
             * as computed from version c, once per hop like a redirect. */
            const char *cur = strrchr(reply->str, ' ');
            r->version = cur ? strtoull(cur + 1, NULL, 10) : 0;
            freeReplyObject(reply);
            retry_req(c, r, 0, "version rolled back");
            return;
        }
        if (err_is(reply, "TRYAGAIN") || err_is(reply, "CLUSTERDOWN") ||
            err_is(reply, "LOADING") || err_is(reply, "MASTERDOWN") ||
            err_is(reply, "READONLY")) {
            char msg[128];
            snprintf(msg, sizeof(msg), "%.100s", reply->str);
            if (!err_is(reply, "TRYAGAIN") && !err_is(reply, "LOADING") &&
                (c->cluster || pv->nseeds > 1))
                pv->need_refresh = 1;
            freeReplyObject(reply);
            retry_req(c, r, 1, msg);
            return;
        }
    }
    r->state = PSS_DONE;
    psi_finish(c, r, reply);
}

/* Read what node 'i' has sent and handle every complete reply. */
static void node_read(psClient *c, int i) {
    psClientPriv *pv = c->priv;
    redisContext *ctx = pv->nodes[i].ctx;
    redisReader *rd = ctx->reader;
    ssize_t nr;
    /* Read straight into the end of the reader's buffer, up to
     * PS_READ_CHUNK bytes at a time (redisBufferRead reads 16 KB into a
     * stack buffer and copies it there: 25 poll+read rounds and one extra
     * copy for one 400 KB pull). The buffer is an sds (hiredis's public
     * read.h/sds.h), kept between replies since maxbuf is 0. */
    if (rd->err || rd->buf == NULL) {
        node_fail(c, i, rd->err ? rd->errstr : "out of memory");
        return;
    }
    if (sdsavail(rd->buf) < PS_READ_CHUNK / 4) {
        sds nb = sdsMakeRoomFor(rd->buf, PS_READ_CHUNK);
        if (nb == NULL) {
            node_fail(c, i, "out of memory");
            return;
        }
        rd->buf = nb;
    }
    nr = read(ctx->fd, rd->buf + sdslen(rd->buf), sdsavail(rd->buf));
    if (nr < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (nr <= 0) {
        node_fail(c, i, nr == 0 ? "connection lost" : strerror(errno));
        return;
    }
    sdsIncrLen(rd->buf, (int)nr);
    rd->len = sdslen(rd->buf);
    pv->reading_node = i;
    while (pv->nodes[i].ctx && pv->nodes[i].qlen) {
        void *reply = NULL;
        if (redisGetReplyFromReader(pv->nodes[i].ctx, &reply) != REDIS_OK) {
            node_fail(c, i, pv->nodes[i].ctx->errstr);
            return;
        }
        if (reply == NULL) break;
        pv->reading_node = -1;
        handle_reply(c, i, q_pop(&pv->nodes[i]), reply);
        pv->reading_node = i;
    }
    pv->reading_node = -1;
}

/* ========================================================================
 * The engine loop
 * ======================================================================== */

int psi_run(psClient *c, int (*done)(psClient *, void *), void *arg) {
    psClientPriv *pv = c->priv;
    struct pollfd *fds = NULL;
    int *idx = NULL, cap = 0, rc = -1;

    for (;;) {
        int i, nfds = 0, pr, wdone;
        if (done(c, arg)) { rc = 0; break; }
        if (pv->nretry) {
            run_retries(c);
            continue;
        }
        /* Write every node's buffered commands before waiting for any reply. */
        for (i = 0; i < pv->nnodes; i++) {
            if (pv->nodes[i].ctx == NULL) continue;
            wdone = 0;
            while (!wdone) {
                if (redisBufferWrite(pv->nodes[i].ctx, &wdone) != REDIS_OK) {
                    node_fail(c, i, pv->nodes[i].ctx->errstr);
                    break;
                }
            }
        }
        if (pv->nretry) continue;
        if (cap < pv->nnodes) {
            free(fds);
            free(idx);
            cap = pv->nnodes;
            fds = malloc(sizeof(*fds) * (size_t)cap);
            idx = malloc(sizeof(*idx) * (size_t)cap);
            if (fds == NULL || idx == NULL) {
                psi_set_error(c, PS_ERR_OOM, "out of memory");
                break;
            }
        }
        for (i = 0; i < pv->nnodes; i++) {
            if (pv->nodes[i].ctx == NULL || pv->nodes[i].qlen == 0) continue;
            fds[nfds].fd = pv->nodes[i].ctx->fd;
            fds[nfds].events = POLLIN;
            fds[nfds].revents = 0;
            idx[nfds++] = i;
        }
        if (nfds == 0) break;   /* nothing pending and not done: cannot progress */
        pr = poll(fds, (nfds_t)nfds, pv->command_timeout_ms > 0 ? pv->command_timeout_ms : -1);
        if (pr < 0) {
            if (errno == EINTR) continue;
            psi_set_error(c, PS_ERR_IO, "poll: %s", strerror(errno));
            break;
        }
        if (pr == 0) {
            for (i = 0; i < nfds; i++) node_fail(c, idx[i], "timeout waiting for a reply");
            continue;
        }
        for (i = 0; i < nfds; i++)
            if (fds[i].revents && pv->nodes[idx[i]].ctx) node_read(c, idx[i]);
    }
    free(fds);
    free(idx);
    return rc;
}

/* Send what is buffered (retries first) without waiting for replies, then
 * handle whatever replies have already arrived. */
void psi_flush(psClient *c) {
    psClientPriv *pv = c->priv;
    struct pollfd pfd;
    int i, wdone;
    if (pv->nretry) run_retries(c);
    for (i = 0; i < pv->nnodes; i++) {
        if (pv->nodes[i].ctx == NULL) continue;
        wdone = 0;
        while (!wdone) {
            if (redisBufferWrite(pv->nodes[i].ctx, &wdone) != REDIS_OK) {
                node_fail(c, i, pv->nodes[i].ctx->errstr);
                break;
            }
        }
    }
    for (i = 0; i < pv->nnodes; i++) {
        if (pv->nodes[i].ctx == NULL || pv->nodes[i].qlen == 0) continue;
        pfd.fd = pv->nodes[i].ctx->fd;
        pfd.events = POLLIN;
        pfd.revents = 0;
        if (poll(&pfd, 1, 0) == 1) node_read(c, i);
    }
}
