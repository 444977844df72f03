/* conn.c -- libps connections and topology: node addresses, one blocking
 * hiredis context per node (authenticated, with the client's timeouts and
 * big socket buffers), the hash-slot map of a Redis Cluster (CLUSTER SLOTS)
 * or, with several standalone addresses, the master among them (ROLE).
 * The request engine (engine.c) routes requests through what this file
 * knows; nothing here sends a request's command. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "clock.h"
#include "ps_internal.h"

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

void psi_clear_error(psClient *c) {
    c->err = 0;
    c->errstr[0] = '\0';
}

int64_t psi_mono_ms(void) { return ps_mono_ms(); }

/* Split "host:port" (the last ':' separates, "[v6]:port" allowed) into a
 * malloc'ed host and a port. Returns 0 or -1. */
int psi_parse_addr(const char *addr, size_t len, char **host, int *port) {
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
    tv.tv_sec = pv->topo.connect_timeout_ms / 1000;
    tv.tv_usec = (pv->topo.connect_timeout_ms % 1000) * 1000;
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
    if (pv->topo.command_timeout_ms > 0) {
        tv.tv_sec = pv->topo.command_timeout_ms / 1000;
        tv.tv_usec = (pv->topo.command_timeout_ms % 1000) * 1000;
        redisSetTimeout(ctx, tv);
    }
    redisEnableKeepAlive(ctx);
    if (pv->topo.password) {
        if (pv->topo.user)
            r = redisCommand(ctx, "AUTH %s %s", pv->topo.user, pv->topo.password);
        else
            r = redisCommand(ctx, "AUTH %s", pv->topo.password);
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
int psi_node_find_or_add(psClient *c, const char *host, size_t hlen, int port) {
    psClientPriv *pv = c->priv;
    psNode *n;
    int i;
    for (i = 0; i < pv->topo.nnodes; i++)
        if (pv->topo.nodes[i].port == port && strlen(pv->topo.nodes[i].host) == hlen &&
            memcmp(pv->topo.nodes[i].host, host, hlen) == 0)
            return i;
    if (pv->topo.nnodes == pv->topo.nodecap) {
        int cap = pv->topo.nodecap ? pv->topo.nodecap * 2 : 8;
        psNode *nn = realloc(pv->topo.nodes, sizeof(*nn) * (size_t)cap);
        if (nn == NULL) return -1;
        pv->topo.nodes = nn;
        pv->topo.nodecap = cap;
    }
    n = &pv->topo.nodes[pv->topo.nnodes];
    memset(n, 0, sizeof(*n));
    n->host = malloc(hlen + 1);
    if (n->host == NULL) return -1;
    memcpy(n->host, host, hlen);
    n->host[hlen] = '\0';
    n->port = port;
    return pv->topo.nnodes++;
}

/* Give the fresh context 'ctx' of a node its socket settings. */
static void conn_setup(redisContext *ctx) {
    /* Room in the kernel for whole tensors both ways: a pull's reply can
     * land while the worker computes, and a push's write returns once the
     * bytes are queued, instead of trickling through the default buffers
     * one window per wakeup. The kernel caps it (net.core.[rw]mem_max). */
    int sz = PS_SOCKET_BUFFER;
    setsockopt(ctx->fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
    setsockopt(ctx->fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
}

/* Make sure node 'i' has a live context. Returns 0, or -1 with 'err'. */
int psi_node_ensure(psClient *c, int i, char *err, size_t errlen) {
    psNode *n = &c->priv->topo.nodes[i];
    int auth_failed;
    if (n->ctx) return 0;
    n->ctx = open_conn(c, n->host, n->port, err, errlen, &auth_failed);
    if (n->ctx == NULL) return -1;
    conn_setup(n->ctx);
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
    for (s = 0; s < PS_CLUSTER_SLOTS; s++) pv->topo.slots[s] = -1;
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
        node = psi_node_find_or_add(c, host, hlen, (int)m->element[1]->integer);
        if (node < 0) return -1;
        for (s = (int)a; s <= (int)b; s++) pv->topo.slots[s] = (int16_t)node;
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
    for (i = 0; i < pv->topo.nseeds; i++) {
        char *host;
        int port, auth_failed, node, ok;
        redisContext *ctx;
        redisReply *r;
        if (psi_parse_addr(pv->topo.seeds[i], strlen(pv->topo.seeds[i]), &host, &port) != 0) continue;
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
        node = ok ? psi_node_find_or_add(c, host, strlen(host), port) : -1;
        free(host);
        if (node >= 0) {
            for (s = 0; s < PS_CLUSTER_SLOTS; s++) pv->topo.slots[s] = (int16_t)node;
            c->stats.refreshes++;
            return 0;
        }
    }
    psi_set_error(c, PS_ERR_IO, "no master among %d addresses (%.70s)", pv->topo.nseeds, err);
    return -1;
}

/* Reload the slot map through a fresh connection to any known node or
 * seed (a separate connection keeps the pipelines of the node contexts
 * untouched). Returns 0 or -1 with an error recorded. */
int psi_refresh(psClient *c) {
    psClientPriv *pv = c->priv;
    char err[128] = "no address";
    int i, total = pv->topo.nnodes + pv->topo.nseeds;
    pv->topo.need_refresh = 0;
    if (!c->cluster) return pv->topo.nseeds > 1 ? refresh_standalone(c) : 0;
    for (i = 0; i < total; i++) {
        char *host = NULL;
        int port, auth_failed, ok;
        redisContext *ctx;
        redisReply *r;
        if (i < pv->topo.nnodes) {
            host = strdup(pv->topo.nodes[i].host);
            port = pv->topo.nodes[i].port;
            if (host == NULL) continue;
        } else if (psi_parse_addr(pv->topo.seeds[i - pv->topo.nnodes], strlen(pv->topo.seeds[i - pv->topo.nnodes]),
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

static char *dup_or_env(const char *v, const char *env) {
    if (v == NULL) v = getenv(env);
    if (v == NULL || *v == '\0') return NULL;
    return strdup(v);
}

void psi_topology_config(psClient *c, const psOptions *o) {
    psTopo *t = &c->priv->topo;
    t->connect_timeout_ms = o->connect_timeout_ms > 0 ? o->connect_timeout_ms
                                                      : PS_DEFAULT_CONNECT_TIMEOUT_MS;
    t->command_timeout_ms = o->command_timeout_ms == 0 ? PS_DEFAULT_COMMAND_TIMEOUT_MS
                            : (o->command_timeout_ms < 0 ? -1 : o->command_timeout_ms);
    t->user = dup_or_env(o->user, "PS_USER");
    t->password = dup_or_env(o->password, "PS_PASSWORD");
    for (int s = 0; s < PS_CLUSTER_SLOTS; s++) t->slots[s] = -1;
}

/* Split 'addrs' into seeds, find the first that answers and detect the
 * mode. Returns 0 or -1 with the error recorded. */
int psi_topology_init(psClient *c, const char *addrs) {
    psClientPriv *pv = c->priv;
    const char *p = addrs, *comma;
    char err[128] = "", lasterr[128] = "no address given";
    int i, s;

    for (s = 0; s < PS_CLUSTER_SLOTS; s++) pv->topo.slots[s] = -1;
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
            if (psi_parse_addr(p, len, &host, &port) != 0) {
                psi_set_error(c, PS_ERR_ARG, "bad address '%.*s' (want host:port)", (int)len, p);
                return -1;
            }
            free(host);
            ns = realloc(pv->topo.seeds, sizeof(char *) * (size_t)(pv->topo.nseeds + 1));
            if (ns == NULL) goto oom;
            pv->topo.seeds = ns;
            if ((pv->topo.seeds[pv->topo.nseeds] = strndup(p, len)) == NULL) goto oom;
            pv->topo.nseeds++;
        }
        p = comma ? comma + 1 : NULL;
    }
    if (pv->topo.nseeds == 0) {
        psi_set_error(c, PS_ERR_ARG, "no address given (want host:port[,host:port...])");
        return -1;
    }
    for (i = 0; i < pv->topo.nseeds; i++) {
        char *host;
        int port, auth_failed, node;
        redisContext *ctx;
        redisReply *r;
        psi_parse_addr(pv->topo.seeds[i], strlen(pv->topo.seeds[i]), &host, &port);
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
            snprintf(lasterr, sizeof(lasterr), "%.50s: %.70s", pv->topo.seeds[i], ctx->errstr);
            redisFree(ctx);
            free(host);
            continue;
        }
        if (psi_reply_error(r) == PS_PROTO_ERR_NOCLUSTER) {
            /* standalone: this connection becomes node 0, owner of every slot */
            freeReplyObject(r);
            node = psi_node_find_or_add(c, host, strlen(host), port);
            free(host);
            if (node < 0) { redisFree(ctx); goto oom; }
            pv->topo.nodes[node].ctx = ctx;
            pv->topo.nodes[node].ever_connected = 1;
            conn_setup(ctx);
            for (s = 0; s < PS_CLUSTER_SLOTS; s++) pv->topo.slots[s] = (int16_t)node;
            c->cluster = 0;
            return 0;
        }
        if (r->type == REDIS_REPLY_ARRAY && r->elements > 0) {
            c->cluster = 1;
            if (load_slots(c, r, host) != 0) {
                snprintf(lasterr, sizeof(lasterr), "%.50s: malformed CLUSTER SLOTS reply", pv->topo.seeds[i]);
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
        snprintf(lasterr, sizeof(lasterr), "%.50s: CLUSTER SLOTS: %.60s", pv->topo.seeds[i],
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
    for (i = 0; i < pv->topo.nnodes; i++) {
        if (pv->topo.nodes[i].ctx) redisFree(pv->topo.nodes[i].ctx);
        free(pv->topo.nodes[i].host);
    }
    free(pv->topo.nodes);
    for (i = 0; i < pv->topo.nseeds; i++) free(pv->topo.seeds[i]);
    free(pv->topo.seeds);
    free(pv->topo.user);
    free(pv->topo.password);
}

