/* cluster.c -- libps topology and request engine.
 *
 * Nodes are reached through one blocking hiredis context each. Requests
 * (psReq) are appended to the context of the node that owns their hash
 * slot; every node keeps a FIFO of what its pending replies answer. The
 * engine (psi_run) writes every node's output buffer first, then polls all
 * sockets with pending replies and handles replies as they come, so a fan
 * out to N nodes costs one round trip, not N.
 *
 * Failure handling, per reply or connection:
 *   MOVED slot addr   the slot map entry is updated, a full map refresh is
 *                     scheduled, the request is resent (same arguments).
 *   ASK slot addr     the request is resent once to addr, preceded by ASKING.
 *   TRYAGAIN, CLUSTERDOWN, LOADING, MASTERDOWN, READONLY
 *                     resent after an exponential backoff (bounded retries).
 *   I/O error/timeout the context is dead (hiredis 0.14): it is freed, every
 *                     request pending on it is resent in its original order
 *                     after a backoff and (cluster) a map refresh.
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
#include <time.h>

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

/* Make sure node 'i' has a live context. Returns 0, or -1 with 'err'. */
static int node_ensure(psClient *c, int i, char *err, size_t errlen) {
    psNode *n = &c->priv->nodes[i];
    int auth_failed;
    if (n->ctx) return 0;
    n->ctx = open_conn(c, n->host, n->port, err, errlen, &auth_failed);
    if (n->ctx == NULL) return -1;
    /* Keep the reader's buffer between replies: big pulls would otherwise
     * regrow it into fresh pages every time. */
    n->ctx->reader->maxbuf = 0;
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

/* Reload the slot map through a fresh connection to any known node or
 * seed (a separate connection keeps the pipelines of the node contexts
 * untouched). Returns 0 or -1 with an error recorded. */
static int refresh(psClient *c) {
    psClientPriv *pv = c->priv;
    char err[128] = "no address";
    int i, total = pv->nnodes + pv->nseeds;
    pv->need_refresh = 0;
    if (!c->cluster) return 0;
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
            ctx->reader->maxbuf = 0;
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

/* Put 'r' on the retry list. 'backoff': an error (counts against
 * max_retries, sleeps before the resend); otherwise a redirect. */
static void retry_req(psClient *c, psReq *r, int backoff, const char *why) {
    psClientPriv *pv = c->priv;
    if (backoff) {
        if (++r->attempts > pv->max_retries) {
            char msg[128];
            snprintf(msg, sizeof(msg), "%.90s (gave up after %d retries)", why, pv->max_retries);
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
        else if (e.kind == PSQ_WAIT) psi_finish_wait(c, e.ps, NULL);
        n = &pv->nodes[i];
    }
    if (c->cluster) pv->need_refresh = 1;
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

/* Append request 'r' to its node's output buffer. */
static void dispatch(psClient *c, psReq *r) {
    psClientPriv *pv = c->priv;
    char err[128];
    int i = route(c, r), asking = r->ask_node >= 0, rc;
    psNode *n;

    r->ask_node = -1;
    r->node = -1;
    if (i < 0) {
        pv->need_refresh = c->cluster;
        retry_req(c, r, 1, "no node serves this hash slot");
        return;
    }
    if (node_ensure(c, i, err, sizeof(err)) != 0) {
        pv->need_refresh = c->cluster;
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
        const char *argv[2] = {"PS.PULL", r->key};
        size_t argl[2] = {7, r->keylen};
        rc = redisAppendCommandArgv(n->ctx, 2, argv, argl);
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
        if (err_is(reply, "TRYAGAIN") || err_is(reply, "CLUSTERDOWN") ||
            err_is(reply, "LOADING") || err_is(reply, "MASTERDOWN") ||
            err_is(reply, "READONLY")) {
            char msg[128];
            snprintf(msg, sizeof(msg), "%.100s", reply->str);
            if (!err_is(reply, "TRYAGAIN") && !err_is(reply, "LOADING") && c->cluster)
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
    if (redisBufferRead(pv->nodes[i].ctx) != REDIS_OK) {
        node_fail(c, i, pv->nodes[i].ctx->errstr[0] ? pv->nodes[i].ctx->errstr : "connection lost");
        return;
    }
    while (pv->nodes[i].ctx && pv->nodes[i].qlen) {
        void *reply = NULL;
        if (redisGetReplyFromReader(pv->nodes[i].ctx, &reply) != REDIS_OK) {
            node_fail(c, i, pv->nodes[i].ctx->errstr);
            return;
        }
        if (reply == NULL) break;
        handle_reply(c, i, q_pop(&pv->nodes[i]), reply);
    }
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
