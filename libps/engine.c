/* engine.c -- the libps request engine.
 *
 * A request (psReq, ps_internal.h) is an encoded command with a routing key
 * and a completion callback; the engine knows nothing of models. Requests
 * are appended to the connection of the node that owns their hash slot;
 * every node keeps a FIFO of what its pending replies answer. psi_run
 * writes every node's output first, then polls all sockets with pending
 * replies and handles replies as they come, so a fan out to N nodes costs
 * one round trip, not N.
 *
 * Bytes avoid copies: a request blob of 16 KB or more is written with one
 * sendmsg straight from the submitter's buffer (after whatever hiredis has
 * buffered before it); replies are read up to the size of the reply in
 * flight (at least 256 KB of room) into the node's own buffer, where a
 * request's sink may decode a bulk string straight into its destination
 * before hiredis's reader builds the rest of the reply. The engine frames
 * replies itself (RESP2), and hands hiredis only complete replies.
 *
 * Failure handling, per reply or connection:
 *   MOVED slot addr   the slot map entry is updated, a full map refresh is
 *                     scheduled, the request is resent (same bytes).
 *   ASK slot addr     the request is resent once to addr, preceded by ASKING.
 *                     A transaction (psTransactionAsync) is redirected as a
 *                     whole: a queued command answered ASK, MOVED or
 *                     TRYAGAIN made the server discard it (EXECABORT), so it
 *                     is resent whole (ASKING, MULTI, ..., EXEC: Redis keeps
 *                     the ASKING flag of a client in MULTI until EXEC).
 *   TRYAGAIN, CLUSTERDOWN, LOADING, MASTERDOWN, READONLY
 *                     resent after an exponential backoff, until both
 *                     max_retries resends and retry_timeout_ms are used up.
 *   BACKLOG           (a relay's local ACCUM tensor is full: the relay is
 *                     down or behind) the same, counted in stats.backlog_waits,
 *                     with the sleep capped at PS_BACKLOG_BACKOFF_CAP_MS so a
 *                     worker resumes soon after its relay takes again.
 *   I/O error/timeout the context is dead: it is freed, every request
 *                     pending on it is resent in its original order after a
 *                     backoff and (cluster) a map refresh.
 *   standalone with several addresses: on errors the first address that
 *                     answers ROLE as master becomes the node of every slot.
 *   lost WAIT         its callback hears of it (NULL reply) and may resend
 *                     the requests the WAIT covered (also a lost probe).
 *   anything else     the request's callback, which may re-encode the
 *                     request and have it resent (PSI_RESEND).
 * Resends keep their order per node, so a sequence of commands on one key
 * reaches the server in the order it was submitted.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "ps_internal.h"
#include "resp.h"

#define PS_BACKOFF_CAP_MS 2000
#define PS_BACKLOG_BACKOFF_CAP_MS 160

/* ========================================================================
 * Node queues and the retry list
 * ======================================================================== */

static int q_push(psNode *n, psQent e) {
    if (n->io.qlen == n->io.qcap) {
        size_t cap = n->io.qcap ? n->io.qcap * 2 : 64, i;
        psQent *nq = malloc(sizeof(*nq) * cap);
        if (nq == NULL) return -1;
        for (i = 0; i < n->io.qlen; i++) nq[i] = n->io.q[(n->io.qhead + i) % n->io.qcap];
        free(n->io.q);
        n->io.q = nq;
        n->io.qcap = cap;
        n->io.qhead = 0;
    }
    n->io.q[(n->io.qhead + n->io.qlen) % n->io.qcap] = e;
    n->io.qlen++;
    return 0;
}

static psQent q_pop(psNode *n) {
    psQent e = n->io.q[n->io.qhead];
    n->io.qhead = (n->io.qhead + 1) % n->io.qcap;
    n->io.qlen--;
    return e;
}

/* Finish 'r' as failed with an error naming its key (and, in a cluster,
 * its hash slot: a slot left migrating is found by it). */
static void fail_req(psClient *c, psReq *r, int code, const char *why) {
    char slot[24] = "";
    if (c->cluster && r->key && r->slot >= 0) snprintf(slot, sizeof(slot), " (slot %d)", r->slot);
    psi_set_error(c, code, "%.*s%s: %.100s", (int)(r->keylen > 40 ? 40 : r->keylen),
                  r->key ? r->key : "(no key)", slot, why);
    r->failed = 1;
    r->state = PSS_DONE;
    r->done(c, r, NULL);
}

/* Milliseconds left before a stop request's grace ends (psSetStop): -1 when
 * no stop was requested, 0 once the grace is over. The grace runs from the
 * first time any client sharing the psStop saw the flag. */
static int64_t stop_left(psClient *c) {
    psStop *s = c->priv->eng.stop;
    if (!s || !s->flag || !*s->flag) return -1;
    int64_t now = psi_mono_ms();
    if (s->seen_ms_ == 0) s->seen_ms_ = now;
    int64_t left = s->seen_ms_ + (s->grace_ms > 0 ? s->grace_ms : 0) - now;
    return left > 0 ? left : 0;
}

void psSetStop(psClient *c, psStop *stop) {
    if (c) c->priv->eng.stop = stop;
}

/* Sleeps 'ms', cut short when a stop request's grace ends. */
static void stop_sleep(psClient *c, long ms) {
    for (;;) {
        int64_t left = stop_left(c);
        if (left >= 0 && ms > left) ms = (long)left;
        if (ms <= 0) return;
        ms = ps_sleep_ms(ms);
    }
}

/* Put 'r' on the retry list. 'backoff': an error (sleeps before the
 * resend; the request is given up once it was resent max_retries times
 * and retry_timeout_ms passed since its first error, so a failover that
 * takes longer than the backoff sequence is still waited for); otherwise
 * a redirect. */
static void retry_req(psClient *c, psReq *r, int backoff, const char *why) {
    psClientPriv *pv = c->priv;
    if (backoff) {
        int64_t now = psi_mono_ms();
        const int stopped = stop_left(c) == 0; /* a stop's grace is over */
        if (r->attempts == 0) r->first_err_ms = now;
        if ((++r->attempts > pv->eng.max_retries &&
             (pv->eng.max_retries == 0 || now - r->first_err_ms >= pv->eng.retry_timeout_ms)) ||
            stopped) {
            char msg[160];
            snprintf(msg, sizeof(msg), "%.80s (%sgave up after %d retries in %lld ms)", why,
                     stopped ? "stop requested: " : "", r->attempts - 1,
                     (long long)(now - r->first_err_ms));
            fail_req(c, r, c->cluster ? PS_ERR_CLUSTER : PS_ERR_IO, msg);
            return;
        }
        if (r->attempts > pv->eng.backoff_level) pv->eng.backoff_level = r->attempts;
        c->stats.retries++;
    } else if (++r->redirects > PS_MAX_REDIRECTS) {
        /* A redirect loop: nodes that disagree about a slot while it
         * migrates or fails over MOVE the request to each other until the
         * cluster settles (a CI run lost a worker this way mid-reshard).
         * Back off as for an error, bounded by max_retries and
         * retry_timeout_ms, instead of failing at once. */
        r->redirects = 0;
        retry_req(c, r, 1, "too many MOVED/ASK redirects");
        return;
    }
    if (pv->eng.nretry == pv->eng.retrycap) {
        size_t cap = pv->eng.retrycap ? pv->eng.retrycap * 2 : 64;
        psReq **nr = realloc(pv->eng.retry, sizeof(*nr) * cap);
        if (nr == NULL) {
            fail_req(c, r, PS_ERR_OOM, "out of memory");
            return;
        }
        pv->eng.retry = nr;
        pv->eng.retrycap = cap;
    }
    r->state = PSS_RETRY;
    pv->eng.retry[pv->eng.nretry++] = r;
}

void psi_resend(psClient *c, psReq *r, const char *why) { retry_req(c, r, 1, why); }

/* The connection of node 'i' is dead: free it and its unread bytes, and
 * resend, in order, every request that was waiting on it. */
static void node_fail(psClient *c, int i, const char *why) {
    psClientPriv *pv = c->priv;
    psNode *n = &pv->topo.nodes[i];
    char msg[128];
    snprintf(msg, sizeof(msg), "%.50s:%d: %.60s", n->host, n->port, why);
    if (n->ctx) {
        redisFree(n->ctx);
        n->ctx = NULL;
    }
    n->io.inlen = 0;
    memset(&n->io.scan, 0, sizeof(n->io.scan));
    n->io.gen++;
    while (n->io.qlen) {
        psQent e = q_pop(n);
        if (e.kind == PSQ_REQ) retry_req(c, e.r, 1, msg);
        else if (e.kind == PSQ_WAIT) e.wait_done(c, e.wait_udata, i, NULL);
        n = &pv->topo.nodes[i];
    }
    if (c->cluster || pv->topo.nseeds > 1) pv->topo.need_refresh = 1;
}

void psi_engine_free(psClient *c) {
    psClientPriv *pv = c->priv;
    int i;
    for (i = 0; i < pv->topo.nnodes; i++) {
        free(pv->topo.nodes[i].io.q);
        free(pv->topo.nodes[i].io.in);
    }
    free(pv->eng.retry);
}

/* ========================================================================
 * Dispatch
 * ======================================================================== */

static int route(psClient *c, psReq *r) {
    psClientPriv *pv = c->priv;
    int i;
    if (r->ask_node >= 0) return r->ask_node;
    if (r->slot >= 0) return pv->topo.slots[r->slot];
    if (pv->topo.slots[0] >= 0) return pv->topo.slots[0];
    for (i = 0; i < pv->topo.nnodes; i++)
        if (pv->topo.nodes[i].ctx) return i;
    return pv->topo.nnodes ? 0 : -1;
}

/* Write request 'r' on 'ctx' now: first what hiredis has buffered
 * (commands before it), then cmd, blob and tail with sendmsg, the blob
 * straight from the submitter's buffer. The socket is blocking with the
 * command timeout. Returns 0, or -1 with a message in 'err'. */
static int write_direct(redisContext *ctx, const psReq *r, char *err, size_t errlen) {
    struct iovec iov[3];
    int wdone = 0, k = 0;
    while (!wdone) {
        if (redisBufferWrite(ctx, &wdone) != REDIS_OK) {
            snprintf(err, errlen, "%.100s", ctx->errstr);
            return -1;
        }
    }
    iov[0].iov_base = (void *)r->cmd;
    iov[0].iov_len = r->cmdlen;
    iov[1].iov_base = (void *)r->blob;
    iov[1].iov_len = r->bloblen;
    iov[2].iov_base = (void *)r->tail;
    iov[2].iov_len = r->taillen;
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

/* Append the bytes of 'r' to hiredis's output buffer of 'ctx'. */
static int append_req(redisContext *ctx, const psReq *r) {
    if (redisAppendFormattedCommand(ctx, r->cmd, r->cmdlen) != REDIS_OK) return -1;
    if (r->bloblen && redisAppendFormattedCommand(ctx, (const char *)r->blob, r->bloblen) != REDIS_OK)
        return -1;
    if (r->taillen && redisAppendFormattedCommand(ctx, r->tail, r->taillen) != REDIS_OK)
        return -1;
    return 0;
}

/* Send request 'r' to the node that serves it (or put it back on the
 * retry list). */
static void dispatch(psClient *c, psReq *r) {
    psClientPriv *pv = c->priv;
    char err[128];
    int i = route(c, r), asking = r->ask_node >= 0;
    psNode *n;
    psQent e = {PSQ_REQ, r, NULL, NULL};

    r->ask_node = -1;
    r->node = -1;
    r->skip_left = r->skip;
    if (r->skip_err) freeReplyObject(r->skip_err);
    if (r->held) freeReplyObject(r->held);
    if (r->trail_reply) freeReplyObject(r->trail_reply);
    r->skip_err = r->held = r->trail_reply = NULL;
    if (i < 0) {
        pv->topo.need_refresh = c->cluster || pv->topo.nseeds > 1;
        retry_req(c, r, 1, "no node serves this hash slot");
        return;
    }
    if (psi_node_ensure(c, i, err, sizeof(err)) != 0) {
        pv->topo.need_refresh = c->cluster || pv->topo.nseeds > 1;
        retry_req(c, r, 1, err);
        return;
    }
    n = &pv->topo.nodes[i];
    if (asking) {
        psQent a = {PSQ_ASKING, NULL, NULL, NULL};
        if (redisAppendCommand(n->ctx, "ASKING") != REDIS_OK || q_push(n, a) != 0) {
            node_fail(c, i, "out of memory");
            retry_req(c, r, 1, "out of memory");
            return;
        }
    }
    if (q_push(n, e) != 0) {
        node_fail(c, i, "out of memory");
        retry_req(c, r, 1, "out of memory");
        return;
    }
    r->state = PSS_FLIGHT;
    r->node = i;
    if (r->bloblen >= PS_DIRECT_WRITE_MIN) {
        /* Not copied twice into hiredis's output buffer: see write_direct. */
        if (write_direct(n->ctx, r, err, sizeof(err)) != 0) node_fail(c, i, err);
    } else if (append_req(n->ctx, r) != 0) {
        node_fail(c, i, "out of memory");
    }
}

/* Resend everything on the retry list, after a map refresh and a backoff
 * when an error (not a redirect) put requests there. */
static void run_retries(psClient *c) {
    psClientPriv *pv = c->priv;
    psReq **list;
    size_t n, i;
    if (pv->eng.nretry == 0) return;
    if (pv->eng.backoff_level > 0) {
        long ms = (long)pv->eng.backoff_ms << (pv->eng.backoff_level - 1 < 16 ? pv->eng.backoff_level - 1 : 16);
        stop_sleep(c, ms > PS_BACKOFF_CAP_MS ? PS_BACKOFF_CAP_MS : ms);
        pv->eng.backoff_level = 0;
    }
    if (pv->topo.need_refresh) {
        int saved = c->err;
        psi_refresh(c);
        if (!saved) c->err = 0;   /* a failed refresh shows up as failed dispatches */
    }
    /* Take the list: dispatch may put requests back on a new one. */
    list = pv->eng.retry;
    n = pv->eng.nretry;
    pv->eng.retry = NULL;
    pv->eng.nretry = pv->eng.retrycap = 0;
    for (i = 0; i < n; i++) dispatch(c, list[i]);
    free(list);
}

void psi_engine_config(psClient *c, const psOptions *o) {
    psEngine *e = &c->priv->eng;
    e->max_retries = o->max_retries == 0 ? PS_DEFAULT_MAX_RETRIES
                     : (o->max_retries < 0 ? 0 : o->max_retries);
    e->backoff_ms = o->backoff_ms > 0 ? o->backoff_ms : PS_DEFAULT_BACKOFF_MS;
    e->retry_timeout_ms = o->retry_timeout_ms == 0 ? PS_DEFAULT_RETRY_TIMEOUT_MS
                          : (o->retry_timeout_ms < 0 ? 0 : o->retry_timeout_ms);
}

void psi_req_init(psReq *r, const char *key, size_t keylen) {
    memset(r, 0, sizeof(*r));
    r->key = key;
    r->keylen = key ? keylen : 0;
    r->slot = key ? (int)ps_key_hash_slot(key, keylen) : -1;
    r->node = -1;
    r->ask_node = -1;
}

void psi_submit(psClient *c, psReq *r) {
    if (c->priv->eng.nretry) run_retries(c);
    r->attempts = r->redirects = 0;
    r->first_err_ms = 0;
    r->ask_node = -1;
    r->failed = 0;
    dispatch(c, r);
}

/* Queue control command 'cmd' (formatted by redisFormatCommand) on node
 * 'i'; 'done' gets its reply (NULL when the connection dies first). 0, or
 * -1 when nothing was queued (no connection, or out of memory: the
 * connection is dropped then). */
static int submit_ctl(psClient *c, int i, psWaitFn *done, void *udata, char *cmd, int len) {
    psNode *n = &c->priv->topo.nodes[i];
    psQent e = {PSQ_WAIT, NULL, done, udata};
    int rc = 0;
    if (len < 0) return -1;
    if (n->ctx == NULL) rc = -1;
    else if (redisAppendFormattedCommand(n->ctx, cmd, (size_t)len) != REDIS_OK || q_push(n, e) != 0) {
        node_fail(c, i, "out of memory");
        rc = -1;
    }
    redisFreeCommand(cmd);
    return rc;
}

int psi_submit_wait(psClient *c, int i, int replicas, int timeout_ms, psWaitFn *done,
                    void *udata) {
    char *cmd = NULL;
    int len = redisFormatCommand(&cmd, "WAIT %d %d", replicas, timeout_ms);
    return submit_ctl(c, i, done, udata, cmd, len);
}

int psi_submit_probe(psClient *c, int i, psWaitFn *done, void *udata) {
    char *cmd = NULL;
    int len = redisFormatCommand(&cmd, "INFO replication");
    return submit_ctl(c, i, done, udata, cmd, len);
}

/* ========================================================================
 * Replies
 *
 * Bytes are read into the node's buffer, grown to hold the reply in
 * flight, and framed here; a complete reply is handed to hiredis's reader
 * (public API: redisReaderFeed, redisReaderGetReply), after the request's
 * sink had the chance to take its bulk strings from the buffer, which
 * saves hiredis's allocation and copy of a pulled tensor.
 * ======================================================================== */

#define PS_SINK_MAX 8   /* arrays of at most this many scalars are offered */

/* A request's sink as the framer's bulk callback. */
typedef struct sinkArg {
    psClient *c;
    psReq *r;
} sinkArg;

static int sink_bulk(void *arg, int idx, int n, const char *data, size_t len) {
    sinkArg *a = arg;
    return a->r->sink(a->c, a->r, idx, n, data, len);
}

/* Build the reply of 'r' from the complete RESP reply 'buf' ('len' bytes)
 * with the reader of 'ctx', after offering its bulk strings to r's sink.
 * Returns the reply, or NULL (protocol error or out of memory). */
static redisReply *build_reply(psClient *c, redisContext *ctx, psReq *r, const char *buf,
                               size_t len) {
    redisReader *rd = ctx->reader;
    size_t from[PS_SINK_MAX], to[PS_SINK_MAX], done = 0;
    int ntaken = 0;
    void *reply = NULL;

    if (r && r->sink) {
        sinkArg a = {c, r};
        ntaken = psi_resp_array_bulks(buf, len, PS_SINK_MAX, sink_bulk, &a, from, to);
    }
    /* Feed the reply, an empty string in place of each bulk the sink took. */
    for (int k = 0; k < ntaken; k++) {
        if (redisReaderFeed(rd, buf + done, from[k] - done) != REDIS_OK ||
            redisReaderFeed(rd, "$0\r\n\r\n", 6) != REDIS_OK)
            return NULL;
        done = to[k];
    }
    if (redisReaderFeed(rd, buf + done, len - done) != REDIS_OK ||
        redisReaderGetReply(rd, &reply) != REDIS_OK)
        return NULL;
    return reply;
}


/* Handle one reply read from node 'i' for queue entry 'e'. */
static void handle_reply(psClient *c, int i, psQent e, redisReply *reply) {
    psClientPriv *pv = c->priv;
    psReq *r = e.r;
    if (e.kind == PSQ_ASKING) {
        freeReplyObject(reply);
        return;
    }
    if (e.kind == PSQ_WAIT) {
        e.wait_done(c, e.wait_udata, i, reply);
        return;
    }
    if (reply->type == REDIS_REPLY_ERROR) {
        const int cls = psi_reply_error(reply);
        int moved = cls == PS_PROTO_ERR_MOVED, ask = cls == PS_PROTO_ERR_ASK;
        if (moved || ask) {
            /* "MOVED <slot> <host>:<port>" */
            char *sp1 = strchr(reply->str, ' '), *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
            char *host;
            int port, node = -1;
            long slot = sp1 ? strtol(sp1 + 1, NULL, 10) : -1;
            if (sp2 && psi_parse_addr(sp2 + 1, strlen(sp2 + 1), &host, &port) == 0) {
                node = psi_node_find_or_add(c, host, strlen(host), port);
                free(host);
            }
            if (node < 0 || slot < 0 || slot >= PS_CLUSTER_SLOTS) {
                fail_req(c, r, PS_ERR_PROTOCOL, reply->str);
                freeReplyObject(reply);
                return;
            }
            if (moved) {
                c->stats.moved++;
                pv->topo.slots[slot] = (int16_t)node;
                pv->topo.need_refresh = 1;
            } else {
                c->stats.ask++;
                r->ask_node = node;
            }
            freeReplyObject(reply);
            retry_req(c, r, 0, "redirect");
            return;
        }
        if (cls == PS_PROTO_ERR_BACKLOG) {
            char msg[128];
            snprintf(msg, sizeof(msg), "%.100s", reply->str);
            freeReplyObject(reply);
            c->stats.backlog_waits++;
            retry_req(c, r, 1, msg);
            while (pv->eng.backoff_level > 1 &&
                   ((long)pv->eng.backoff_ms
                    << (pv->eng.backoff_level - 1 < 16 ? pv->eng.backoff_level - 1 : 16)) >
                       PS_BACKLOG_BACKOFF_CAP_MS)
                pv->eng.backoff_level--;
            return;
        }
        if (cls == PS_PROTO_ERR_TRYAGAIN || cls == PS_PROTO_ERR_CLUSTERDOWN ||
            cls == PS_PROTO_ERR_LOADING || cls == PS_PROTO_ERR_MASTERDOWN ||
            cls == PS_PROTO_ERR_READONLY) {
            char msg[128];
            snprintf(msg, sizeof(msg), "%.100s", reply->str);
            if (cls != PS_PROTO_ERR_TRYAGAIN && cls != PS_PROTO_ERR_LOADING &&
                (c->cluster || pv->topo.nseeds > 1))
                pv->topo.need_refresh = 1;
            freeReplyObject(reply);
            retry_req(c, r, 1, msg);
            return;
        }
    }
    r->state = PSS_DONE;
    if (r->done(c, r, reply) == PSI_RESEND) retry_req(c, r, 0, "resent re-encoded");
}

/* Read what node 'i' has sent and handle every complete reply. */
static void node_read(psClient *c, int i) {
    psClientPriv *pv = c->priv;
    psNode *n = &pv->topo.nodes[i];
    unsigned gen = n->io.gen;
    size_t off = 0, want = n->io.inlen + PS_READ_CHUNK / 4;
    ssize_t nr;

    if (n->io.scan.need > want) want = n->io.scan.need;
    if (n->io.incap < want) {
        size_t cap = n->io.inlen + PS_READ_CHUNK > n->io.scan.need ? n->io.inlen + PS_READ_CHUNK : n->io.scan.need;
        char *nb = realloc(n->io.in, cap);
        if (nb == NULL) {
            node_fail(c, i, "out of memory");
            return;
        }
        n->io.in = nb;
        n->io.incap = cap;
    }
    nr = read(n->ctx->fd, n->io.in + n->io.inlen, n->io.incap - n->io.inlen);
    if (nr < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (nr <= 0) {
        node_fail(c, i, nr == 0 ? "connection lost" : strerror(errno));
        return;
    }
    n->io.inlen += (size_t)nr;
    while (n->io.qlen && off < n->io.inlen) {
        psQent *head = &n->io.q[n->io.qhead];
        redisReply *reply;
        size_t len;
        int rc = psi_scan_reply(&n->io.scan, n->io.in + off, n->io.inlen - off);
        if (rc < 0) {
            node_fail(c, i, "protocol error in a reply");
            return;
        }
        if (rc == 0) break;     /* s->need counts from the reply's start */
        len = n->io.scan.pos;
        memset(&n->io.scan, 0, sizeof(n->io.scan));
        reply = build_reply(c, n->ctx, head->kind == PSQ_REQ ? head->r : NULL, n->io.in + off, len);
        if (reply == NULL) {
            node_fail(c, i, "protocol error in a reply");
            return;
        }
        off += len;
        if (head->kind == PSQ_REQ && head->r->skip_left > 0) {
            head->r->skip_left--;       /* a transaction's +OK or +QUEUED */
            if (reply->type == REDIS_REPLY_ERROR && head->r->skip_err == NULL)
                head->r->skip_err = reply;
            else if (head->r->trail && head->r->skip_left == 0 && head->r->skip_err == NULL)
                head->r->held = reply;  /* EXEC's, a WAIT's reply trails it */
            else
                freeReplyObject(reply);
            continue;
        }
        if (head->kind == PSQ_REQ && head->r->skip_err) {
            freeReplyObject(reply);
            reply = head->r->skip_err;
            head->r->skip_err = NULL;
        } else if (head->kind == PSQ_REQ && head->r->held) {
            head->r->trail_reply = reply;
            reply = head->r->held;
            head->r->held = NULL;
        }
        handle_reply(c, i, q_pop(n), reply);
        n = &pv->topo.nodes[i];      /* a redirect may have added nodes */
        if (n->io.gen != gen) return;      /* the callback dropped the connection */
    }
    if (off) {
        memmove(n->io.in, n->io.in + off, n->io.inlen - off);
        n->io.inlen -= off;
    }
}

/* ========================================================================
 * The engine loop
 * ======================================================================== */

/* Write every node's buffered commands. */
static void write_all(psClient *c) {
    psClientPriv *pv = c->priv;
    int i, wdone;
    for (i = 0; i < pv->topo.nnodes; i++) {
        if (pv->topo.nodes[i].ctx == NULL) continue;
        wdone = 0;
        while (!wdone) {
            if (redisBufferWrite(pv->topo.nodes[i].ctx, &wdone) != REDIS_OK) {
                node_fail(c, i, pv->topo.nodes[i].ctx->errstr);
                break;
            }
        }
    }
}

int psi_run(psClient *c, int (*done)(psClient *, void *), void *arg) {
    psClientPriv *pv = c->priv;
    struct pollfd *fds = NULL;
    int *idx = NULL, cap = 0, rc = -1;

    for (;;) {
        int i, nfds = 0, pr;
        if (done(c, arg)) { rc = 0; break; }
        if (pv->eng.nretry) {
            run_retries(c);
            continue;
        }
        /* Write every node's buffered commands before waiting for any reply. */
        write_all(c);
        if (pv->eng.nretry) continue;
        if (cap < pv->topo.nnodes) {
            free(fds);
            free(idx);
            cap = pv->topo.nnodes;
            fds = malloc(sizeof(*fds) * (size_t)cap);
            idx = malloc(sizeof(*idx) * (size_t)cap);
            if (fds == NULL || idx == NULL) {
                psi_set_error(c, PS_ERR_OOM, "out of memory");
                break;
            }
        }
        for (i = 0; i < pv->topo.nnodes; i++) {
            if (pv->topo.nodes[i].ctx == NULL || pv->topo.nodes[i].io.qlen == 0) continue;
            fds[nfds].fd = pv->topo.nodes[i].ctx->fd;
            fds[nfds].events = POLLIN;
            fds[nfds].revents = 0;
            idx[nfds++] = i;
        }
        if (nfds == 0) break;   /* nothing pending and not done: cannot progress */
        int timeout = pv->topo.command_timeout_ms > 0 ? pv->topo.command_timeout_ms : -1;
        const int64_t left = stop_left(c);
        const int stop_wait = left >= 0 && (timeout < 0 || left < timeout);
        if (stop_wait) timeout = (int)left;
        pr = poll(fds, (nfds_t)nfds, timeout);
        if (pr < 0) {
            if (errno == EINTR) continue;
            psi_set_error(c, PS_ERR_IO, "poll: %s", strerror(errno));
            break;
        }
        if (pr == 0) {
            for (i = 0; i < nfds; i++)
                node_fail(c, idx[i], stop_wait ? "stop requested: no reply within its grace"
                                               : "timeout waiting for a reply");
            continue;
        }
        for (i = 0; i < nfds; i++)
            if (fds[i].revents && pv->topo.nodes[idx[i]].ctx) node_read(c, idx[i]);
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
    int i;
    if (pv->eng.nretry) run_retries(c);
    write_all(c);
    for (i = 0; i < pv->topo.nnodes; i++) {
        if (pv->topo.nodes[i].ctx == NULL || pv->topo.nodes[i].io.qlen == 0) continue;
        pfd.fd = pv->topo.nodes[i].ctx->fd;
        pfd.events = POLLIN;
        pfd.revents = 0;
        if (poll(&pfd, 1, 0) == 1) node_read(c, i);
    }
}
