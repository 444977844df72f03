/* ps.c -- libps public API: connection setup, generic commands, models
 * (layout, create, pull, push with error feedback). The request engine,
 * slot routing and redirects live in cluster.c. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <unistd.h>

#include "ps_internal.h"

/* ========================================================================
 * Connection
 * ======================================================================== */

static uint64_t now_us(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (uint64_t)tv.tv_sec * 1000000u + (uint64_t)tv.tv_usec;
}

/* 64 random bits from /dev/urandom, or the clock mixed with the pid. */
static uint64_t random64(void) {
    uint64_t x = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (f) {
        if (fread(&x, sizeof(x), 1, f) != 1) x = 0;
        fclose(f);
    }
    if (x == 0) x = now_us() * 6364136223846793005ull ^ (uint64_t)getpid();
    return x;
}

static char *dup_or_env(const char *v, const char *env) {
    if (v == NULL) v = getenv(env);
    if (v == NULL || *v == '\0') return NULL;
    return strdup(v);
}

psClient *psConnect(const char *addrs, const psOptions *opt) {
    psOptions o;
    psClient *c;
    psClientPriv *pv;
    int i;

    if (opt) o = *opt;
    else memset(&o, 0, sizeof(o));
    c = calloc(1, sizeof(*c));
    if (c == NULL) return NULL;
    pv = calloc(1, sizeof(*pv));
    if (pv == NULL) {
        free(c);
        return NULL;
    }
    c->priv = pv;
    pv->connect_timeout_ms = o.connect_timeout_ms > 0 ? o.connect_timeout_ms : PS_DEFAULT_CONNECT_TIMEOUT_MS;
    pv->command_timeout_ms = o.command_timeout_ms == 0 ? PS_DEFAULT_COMMAND_TIMEOUT_MS
                             : (o.command_timeout_ms < 0 ? -1 : o.command_timeout_ms);
    pv->max_retries = o.max_retries == 0 ? PS_DEFAULT_MAX_RETRIES : (o.max_retries < 0 ? 0 : o.max_retries);
    pv->backoff_ms = o.backoff_ms > 0 ? o.backoff_ms : PS_DEFAULT_BACKOFF_MS;
    pv->retry_timeout_ms = o.retry_timeout_ms == 0 ? PS_DEFAULT_RETRY_TIMEOUT_MS
                           : (o.retry_timeout_ms < 0 ? 0 : o.retry_timeout_ms);
    pv->push_window = o.push_window > 0 ? o.push_window : PS_DEFAULT_PUSH_WINDOW;
    pv->wait_replicas = o.wait_replicas > 0 ? o.wait_replicas : 0;
    pv->wait_timeout_ms = o.wait_timeout_ms > 0 ? o.wait_timeout_ms : PS_DEFAULT_WAIT_TIMEOUT_MS;
    pv->partition_bytes = o.partition_bytes > 0 ? o.partition_bytes : PS_DEFAULT_PARTITION_BYTES;
    pv->flags = o.flags;
    pv->seq_base = now_us();
    pv->user = dup_or_env(o.user, "PS_USER");
    pv->password = dup_or_env(o.password, "PS_PASSWORD");
    if (o.client_id && *o.client_id) {
        snprintf(c->client_id, sizeof(c->client_id), "%s", o.client_id);
    } else {
        char host[64] = "host";
        gethostname(host, sizeof(host) - 1);
        host[sizeof(host) - 1] = '\0';
        snprintf(c->client_id, sizeof(c->client_id), "%s:%d:%08llx", host, (int)getpid(),
                 (unsigned long long)(random64() & 0xffffffffull));
    }
    pv->npslots = pv->push_window;
    pv->pslots = calloc((size_t)pv->npslots, sizeof(psPushSlot));
    if (pv->pslots == NULL) {
        psi_set_error(c, PS_ERR_OOM, "out of memory");
        return c;
    }
    for (i = 0; i < PS_CLUSTER_SLOTS; i++) pv->slots[i] = -1;
    pv->reading_node = -1;
    if (addrs == NULL) {
        psi_set_error(c, PS_ERR_ARG, "no address given (want host:port[,host:port...])");
        return c;
    }
    psi_topology_init(c, addrs);
    return c;
}

void psClientFree(psClient *c) {
    psClientPriv *pv;
    int i;
    if (c == NULL) return;

    pv = c->priv;
    if (pv) {
        psi_topology_free(c);
        for (i = 0; i < pv->npslots && pv->pslots; i++) {
            free(pv->pslots[i].buf);
            free(pv->pslots[i].reqs);
        }
        free(pv->pslots);
        free(pv->user);
        free(pv->password);
        free(pv);
    }
    free(c);
}

/* ========================================================================
 * Completion callbacks (called by the engine in cluster.c)
 * ======================================================================== */

static void slot_release(psPushSlot *ps) {
    if (--ps->outstanding == 0) ps->in_use = 0;
}

void psi_finish_wait(psClient *c, psPushSlot *ps, redisReply *reply) {
    if (reply == NULL || reply->type != REDIS_REPLY_INTEGER ||
        reply->integer < c->priv->wait_replicas)
        c->stats.wait_short++;
    if (reply) freeReplyObject(reply);
    slot_release(ps);
}

static void finish_push(psClient *c, psReq *r, redisReply *reply) {
    if (reply == NULL) {
        c->stats.push_errors++;
    } else if (reply->type == REDIS_REPLY_INTEGER) {
        c->stats.pushes++;
        r->acked = 1;           /* a lost WAIT resends it (cluster.c node_fail) */
    } else if (reply->type == REDIS_REPLY_ERROR && strncmp(reply->str, "STALE", 5) == 0) {
        c->stats.stale_rejects++;
    } else {
        const char *hint = "";
        c->stats.push_errors++;
        if (reply->type == REDIS_REPLY_ERROR &&
            (strstr(reply->str, "syntax") || strstr(reply->str, "unknown") ||
             strstr(reply->str, "option")))
            hint = " (server without VERSION/ID? see PS_OPT_NO_PUSH_ID)";
        psi_set_error(c, PS_ERR_SERVER, "PS.PUSHGRAD %s: %.60s%s", r->key,
                      reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply", hint);
    }
    if (reply) freeReplyObject(reply);
    slot_release(r->ps);
}

/* Bytes of the data blob of a pull of partition 'p' in the model's pull format. */
static size_t pull_blob_size(const psModel *m, const psPart *p) {
    return ps_dense_encoded_size(m->pull_fmt, p->elements);
}

int psi_pull_direct(psClient *c, psReq *r, const unsigned char *blob, size_t len) {
    psModel *m = r->m;
    psPart *p = &m->tensors[r->t].parts[r->p];
    float *dst = m->pull_dst ? m->pull_dst[r->t] : NULL;
    (void)c;
    if (dst == NULL || len != pull_blob_size(m, p)) return -1;
    if (m->pull_fmt == PS_FMT_F32) memcpy(dst + p->offset, blob, len);
    else if (ps_decode(m->pull_fmt, blob, len, p->elements, dst + p->offset) != 0) return -1;
    r->direct = len;
    return 0;
}

/* Record a failed partition pull: on the client (the call that read it)
 * and, the first one, on the model, so that psModelPullWait() reports it
 * even when another call read the reply. */
static void pull_failed(psClient *c, psModel *m, int code, const char *msg) {
    psi_set_error(c, code, "%s", msg);
    if (m->pull_failed) return;
    m->pull_failed = code;
    snprintf(m->pull_errstr, sizeof(m->pull_errstr), "%.*s", (int)sizeof(m->pull_errstr) - 1, msg);
}

static void finish_pull(psClient *c, psReq *r, redisReply *reply) {
    psModel *m = r->m;
    psTensor *t = &m->tensors[r->t];
    psPart *p = &t->parts[r->p];
    size_t want = pull_blob_size(m, p);
    char msg[sizeof(c->errstr) + 64];
    m->pull_pending--;
    if (reply == NULL) {
        /* fail_req recorded why, unless an earlier error was recorded first */
        snprintf(msg, sizeof(msg), "PS.PULL %.60s: %s", p->key,
                 r->failed ? "failed after retries" : "no reply");
        pull_failed(c, m, c->err ? c->err : PS_ERR_IO, c->err ? c->errstr : msg);
        r->direct = 0;
        return;
    }
    if (reply->type == REDIS_REPLY_ERROR) {
        snprintf(msg, sizeof(msg), "PS.PULL %.40s: %.80s", p->key, reply->str);
        pull_failed(c, m, PS_ERR_SERVER, msg);
    } else if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
               reply->element[0]->type != REDIS_REPLY_INTEGER ||
               reply->element[1]->type != REDIS_REPLY_STRING ||
               (r->direct ? r->direct : reply->element[1]->len) != want) {
        snprintf(msg, sizeof(msg), "PS.PULL %.60s: unexpected reply (shape differs from the model's?)",
                 p->key);
        pull_failed(c, m, PS_ERR_PROTOCOL, msg);
    } else {
        float *dst = m->pull_dst[r->t];
        if (dst && !r->direct &&
            ps_decode(m->pull_fmt, (const unsigned char *)reply->element[1]->str,
                      reply->element[1]->len, p->elements, dst + p->offset) != 0) {
            snprintf(msg, sizeof(msg), "PS.PULL %.60s: undecodable data", p->key);
            pull_failed(c, m, PS_ERR_PROTOCOL, msg);
        } else {
            p->version = (uint64_t)reply->element[0]->integer;
            p->has_version = 1;
            c->stats.pulls++;
            c->stats.bytes_received += want;
        }
    }
    r->direct = 0;
    freeReplyObject(reply);
}

void psi_finish(psClient *c, psReq *r, redisReply *reply) {
    if (r->kind == PSR_PUSH) finish_push(c, r, reply);
    else if (r->kind == PSR_PULL) finish_pull(c, r, reply);
    else r->reply = reply;
}

/* ========================================================================
 * Generic commands
 * ======================================================================== */

static void raw_init(psReq *r, const char *key) {
    memset(r, 0, sizeof(*r));
    r->kind = PSR_RAW;
    r->key = key;
    r->keylen = key ? strlen(key) : 0;
    r->slot = key ? (int)ps_key_hash_slot(key, r->keylen) : -1;
    r->node = -1;
    r->ask_node = -1;
}

static int raw_batch_done(psClient *c, void *arg) {
    psReq **b = arg;
    size_t i, n = (size_t)(uintptr_t)b[0];
    (void)c;
    for (i = 1; i <= n; i++)
        if (b[i]->state != PSS_DONE) return 0;
    return 1;
}

/* Submit the 'n' RAW requests 'reqs' and wait for all of them. */
static void raw_run(psClient *c, psReq *reqs, size_t n) {
    psReq **b = malloc(sizeof(psReq *) * (n + 1));
    size_t i;
    if (b == NULL) {
        psi_set_error(c, PS_ERR_OOM, "out of memory");
        for (i = 0; i < n; i++) reqs[i].state = PSS_DONE;
        return;
    }
    b[0] = (psReq *)(uintptr_t)n;
    for (i = 0; i < n; i++) {
        b[i + 1] = &reqs[i];
        psi_submit(c, &reqs[i]);
    }
    if (psi_run(c, raw_batch_done, b) != 0)
        psi_set_error(c, PS_ERR_OTHER, "internal error: requests left without replies");
    free(b);
}

static redisReply *command_formatted(psClient *c, const char *key, char *cmd, int len) {
    psReq r;
    if (len < 0 || cmd == NULL) {
        psi_set_error(c, len == -2 ? PS_ERR_ARG : PS_ERR_OOM, "cannot format the command");
        return NULL;
    }
    raw_init(&r, key);
    r.cmd = cmd;
    r.cmdlen = (size_t)len;
    raw_run(c, &r, 1);
    redisFreeCommand(cmd);
    if (r.reply == NULL && !c->err) psi_set_error(c, PS_ERR_OTHER, "no reply");
    return r.reply;
}

redisReply *psCommandArgv(psClient *c, const char *key, int argc, const char **argv,
                          const size_t *argvlen) {
    char *cmd = NULL;
    int len;
    c->err = 0;
    c->errstr[0] = '\0';
    len = redisFormatCommandArgv(&cmd, argc, argv, argvlen);
    return command_formatted(c, key, cmd, len);
}

redisReply *psCommand(psClient *c, const char *key, const char *format, ...) {
    char *cmd = NULL;
    int len;
    va_list ap;
    c->err = 0;
    c->errstr[0] = '\0';
    va_start(ap, format);
    len = redisvFormatCommand(&cmd, format, ap);
    va_end(ap);
    return command_formatted(c, key, cmd, len);
}

int psCommandBatchArgv(psClient *c, int n, const char *const *keys, const int *argcs,
                       const char **const *argvs, const size_t *const *argvlens,
                       redisReply **replies) {
    psReq *reqs;
    int i, ok = 0;
    c->err = 0;
    c->errstr[0] = '\0';
    if (n <= 0) return 0;
    if ((reqs = calloc((size_t)n, sizeof(psReq))) == NULL) {
        psi_set_error(c, PS_ERR_OOM, "out of memory");
        return PS_ERR;
    }
    for (i = 0; i < n; i++) {
        char *cmd = NULL;
        int len = redisFormatCommandArgv(&cmd, argcs[i], argvs[i], argvlens[i]);
        raw_init(&reqs[i], keys[i]);
        replies[i] = NULL;
        if (len < 0) {
            psi_set_error(c, PS_ERR_OOM, "cannot format command %d", i);
            reqs[i].state = PSS_DONE;
            continue;
        }
        reqs[i].cmd = cmd;
        reqs[i].cmdlen = (size_t)len;
    }
    if (!c->err) raw_run(c, reqs, (size_t)n);
    for (i = 0; i < n; i++) {
        replies[i] = reqs[i].reply;
        if (replies[i]) ok++;
        if (reqs[i].cmd) redisFreeCommand(reqs[i].cmd);
    }
    free(reqs);
    if (ok < n && !c->err) psi_set_error(c, PS_ERR_OTHER, "no reply");
    return ok;
}

/* ========================================================================
 * Pushes and drain
 * ======================================================================== */

static int slot_free_exists(psClient *c, void *arg) {
    int i;
    (void)arg;
    for (i = 0; i < c->priv->npslots; i++)
        if (!c->priv->pslots[i].in_use) return 1;
    return 0;
}

static int all_slots_free(psClient *c, void *arg) {
    int i;
    (void)arg;
    for (i = 0; i < c->priv->npslots; i++)
        if (c->priv->pslots[i].in_use) return 0;
    return 1;
}

int psDrain(psClient *c) {
    c->err = 0;
    c->errstr[0] = '\0';
    if (psi_run(c, all_slots_free, NULL) != 0)
        psi_set_error(c, PS_ERR_OTHER, "internal error: pushes left without replies");
    return c->err ? PS_ERR : PS_OK;
}

/* Grow '*buf' (capacity '*cap') to at least 'need' bytes. 0 or -1. */
static int grow(void **buf, size_t *cap, size_t need) {
    void *nb;
    if (*cap >= need) return 0;
    nb = realloc(*buf, need);
    if (nb == NULL) return -1;
    *buf = nb;
    *cap = need;
    return 0;
}

/* Encoded bytes of partition 'p' in the model's push format. */
static size_t part_encoded_size(const psModel *m, const psPart *p) {
    if (m->push_fmt == PS_FMT_TOPK) {
        double k = m->topk_ratio * (double)p->elements;
        size_t kk = (size_t)k;
        if ((double)kk < k) kk++;
        if (kk < 1) kk = 1;
        if (kk > p->elements) kk = p->elements;
        return ps_topk_encoded_size((uint32_t)kk);
    }
    return ps_dense_encoded_size(m->push_fmt, p->elements);
}

/* Encode partition 'p' of tensor 't' from 'src' (the tensor's flat array)
 * into 'dst'. With error feedback 'src' is the residual and what was sent is
 * subtracted from it. Returns the bytes written. */
static size_t encode_part(psModel *m, psPart *p, float *src, int feedback, unsigned char *dst) {
    float *x = src + p->offset;
    size_t len, i;
    if (m->push_fmt == PS_FMT_TOPK) {
        uint32_t k;
        len = ps_topk_encode(x, p->elements,
                             (uint32_t)((part_encoded_size(m, p) - 4) / 8), dst, m->topk_scratch);
        memcpy(&k, dst, 4);
        for (i = 0; i < k; i++) {
            uint32_t idx;
            float v;
            memcpy(&idx, dst + 4 + 4 * i, 4);
            memcpy(&v, dst + 4 + 4 * (size_t)k + 4 * i, 4);
            x[idx] -= v;
        }
        return len;
    }
    len = ps_dense_encoded_size(m->push_fmt, p->elements);
    ps_encode(m->push_fmt, x, p->elements, dst);
    if (feedback && ps_decode(m->push_fmt, dst, len, p->elements, m->scratch) == 0)
        for (i = 0; i < p->elements; i++) x[i] -= m->scratch[i];
    return len;
}

int psModelPush(psClient *c, psModel *m, const float *const *grads, const uint64_t *versions,
                float scale) {
    psClientPriv *pv = c->priv;
    psPushSlot *ps = NULL;
    size_t need = 0, off = 0, reqbytes;
    int t, i, nreq = 0, lossy;

    c->err = 0;
    c->errstr[0] = '\0';
    if (psModelLayout(c, m) != PS_OK) return PS_ERR;
    lossy = m->push_fmt != PS_FMT_F32;
    if (psi_run(c, slot_free_exists, NULL) != 0) {
        psi_set_error(c, PS_ERR_OTHER, "internal error: push window never freed");
        return PS_ERR;
    }
    for (i = 0; i < pv->npslots; i++)
        if (!pv->pslots[i].in_use) { ps = &pv->pslots[i]; break; }
    for (t = 0; t < m->ntensors; t++) {
        if (grads[t] == NULL) continue;
        for (i = 0; i < m->tensors[t].nparts; i++) {
            need += part_encoded_size(m, &m->tensors[t].parts[i]);
            nreq++;
        }
    }
    if (nreq == 0) return c->err ? PS_ERR : PS_OK;
    reqbytes = (size_t)ps->reqcap * sizeof(psReq);
    if (grow((void **)&ps->buf, &ps->bufcap, need) != 0 ||
        grow((void **)&ps->reqs, &reqbytes, (size_t)nreq * sizeof(psReq)) != 0) {
        psi_set_error(c, PS_ERR_OOM, "out of memory for the push buffer");
        return PS_ERR;
    }
    ps->reqcap = (int)(reqbytes / sizeof(psReq));
    if (lossy && m->scratch == NULL) {
        m->scratch = malloc(m->max_part_elems * sizeof(float));
        m->topk_scratch = malloc(m->max_part_elems * sizeof(uint32_t));
        if (m->scratch == NULL || m->topk_scratch == NULL) {
            psi_set_error(c, PS_ERR_OOM, "out of memory");
            return PS_ERR;
        }
    }
    ps->m = m;
    ps->nreqs = 0;
    for (t = 0; t < m->ntensors; t++) {
        psTensor *tt = &m->tensors[t];
        float *src = (float *)grads[t];
        size_t e;
        if (grads[t] == NULL) continue;
        if (lossy) {
            if (tt->resid == NULL && (tt->resid = calloc(tt->elements, sizeof(float))) == NULL) {
                psi_set_error(c, PS_ERR_OOM, "out of memory");
                return PS_ERR;
            }
            for (e = 0; e < tt->elements; e++) tt->resid[e] += grads[t][e];
            src = tt->resid;
        }
        for (i = 0; i < tt->nparts; i++) {
            psPart *p = &tt->parts[i];
            psReq *r = &ps->reqs[ps->nreqs++];
            memset(r, 0, sizeof(*r));
            r->kind = PSR_PUSH;
            r->key = p->key;
            r->keylen = strlen(p->key);
            r->slot = (int)ps_key_hash_slot(r->key, r->keylen);
            r->m = m;
            r->t = t;
            r->p = i;
            r->ps = ps;
            r->blob = ps->buf + off;
            r->bloblen = encode_part(m, p, src, lossy, ps->buf + off);
            off += r->bloblen;
            r->has_version = versions != NULL || p->has_version;
            r->version = versions ? versions[t] : p->version;
            if (p->seq == 0) p->seq = pv->seq_base;
            r->seq = ++p->seq;
            r->scale = scale;
            c->stats.bytes_sent += r->bloblen;
        }
    }
    ps->in_use = 1;
    ps->outstanding = ps->nreqs + 1;    /* +1 guards the slot while WAITs are queued */
    for (i = 0; i < ps->nreqs; i++) psi_submit(c, &ps->reqs[i]);
    if (pv->wait_replicas > 0) {
        for (i = 0; i < ps->nreqs; i++) {
            int node = ps->reqs[i].node, j, seen = 0;
            if (node < 0 || ps->reqs[i].state != PSS_FLIGHT) continue;
            for (j = 0; j < i && !seen; j++)
                seen = ps->reqs[j].node == node && ps->reqs[j].state == PSS_FLIGHT;
            if (!seen) psi_submit_wait(c, node, ps);
        }
    }
    slot_release(ps);
    psi_flush(c);
    return c->err ? PS_ERR : PS_OK;
}

/* ========================================================================
 * Models: definition and layout
 * ======================================================================== */

psModel *psModelNew(const char *job) {
    psModel *m = calloc(1, sizeof(*m));
    if (m == NULL) return NULL;
    if ((m->job = strdup(job ? job : "ps")) == NULL) {
        free(m);
        return NULL;
    }
    m->push_fmt = PS_FMT_F32;
    m->topk_ratio = 0.01;
    return m;
}

int psModelSetPartitionBytes(psModel *m, size_t bytes) {
    if (m->laid_out || bytes == 0) return PS_ERR;
    m->partition_bytes = bytes;
    return PS_OK;
}

int psModelAddTensor(psModel *m, const char *name, int ndim, const uint64_t *dims) {
    psTensor *t;
    uint64_t nelem;
    int i;
    if (m->laid_out || name == NULL || *name == '\0' || ndim < 1 || ndim > PS_MAX_DIMS ||
        ps_shape_check((uint32_t)ndim, dims, 0, &nelem, NULL) != 0 || nelem > SIZE_MAX / 8)
        return PS_ERR;
    if (psModelTensorIndex(m, name) >= 0) return PS_ERR;
    if (m->ntensors == m->tcap) {
        int cap = m->tcap ? m->tcap * 2 : 8;
        psTensor *nt = realloc(m->tensors, sizeof(*nt) * (size_t)cap);
        if (nt == NULL) return PS_ERR;
        m->tensors = nt;
        m->tcap = cap;
    }
    t = &m->tensors[m->ntensors];
    memset(t, 0, sizeof(*t));
    if ((t->name = strdup(name)) == NULL) return PS_ERR;
    t->ndim = ndim;
    for (i = 0; i < ndim; i++) t->dims[i] = dims[i];
    t->elements = (size_t)nelem;
    t->row_elems = (size_t)(nelem / dims[0]);
    return m->ntensors++;
}

int psModelSetPushFormat(psModel *m, psWireFormat fmt, double topk_ratio) {
    static const ps_format map[] = {PS_FMT_F32, PS_FMT_F16, PS_FMT_BF16, PS_FMT_I8, PS_FMT_TOPK};
    if ((int)fmt < 0 || (int)fmt > (int)PS_WIRE_TOPK) return PS_ERR;
    if (fmt == PS_WIRE_TOPK && !(topk_ratio > 0 && topk_ratio <= 1)) return PS_ERR;
    m->push_fmt = map[fmt];
    if (fmt == PS_WIRE_TOPK) m->topk_ratio = topk_ratio;
    return PS_OK;
}

int psModelSetPullFormat(psModel *m, psWireFormat fmt) {
    static const ps_format map[] = {PS_FMT_F32, PS_FMT_F16, PS_FMT_BF16};
    if ((int)fmt < 0 || (int)fmt > (int)PS_WIRE_BF16) return PS_ERR;
    m->pull_fmt = map[fmt];
    return PS_OK;
}

int psModelLayout(psClient *c, psModel *m) {
    size_t pb = m->partition_bytes ? m->partition_bytes : c->priv->partition_bytes;
    int ti, global = 0;
    if (m->laid_out) return PS_OK;
    if (m->ntensors == 0) {
        psi_set_error(c, PS_ERR_ARG, "model '%s' has no tensors", m->job);
        return PS_ERR;
    }
    for (ti = 0; ti < m->ntensors; ti++) {
        psTensor *t = &m->tensors[ti];
        uint64_t rows = t->dims[0], rpp, base, extra, row = 0;
        size_t row_bytes = t->row_elems * sizeof(float);
        int p, nparts;
        rpp = row_bytes >= pb ? 1 : pb / row_bytes;
        nparts = (int)((rows + rpp - 1) / rpp);
        base = rows / (uint64_t)nparts;
        extra = rows % (uint64_t)nparts;
        t->parts = calloc((size_t)nparts, sizeof(psPart));
        if (t->parts == NULL) goto oom;
        t->nparts = nparts;
        t->first_part = global;
        global += nparts;
        for (p = 0; p < nparts; p++) {
            psPart *pp = &t->parts[p];
            size_t klen = strlen(m->job) + strlen(t->name) + 24;
            pp->nrows = base + ((uint64_t)p < extra ? 1 : 0);
            pp->first_row = row;
            row += pp->nrows;
            pp->offset = (size_t)pp->first_row * t->row_elems;
            pp->elements = (size_t)pp->nrows * t->row_elems;
            if (pp->elements > m->max_part_elems) m->max_part_elems = pp->elements;
            if ((pp->key = malloc(klen)) == NULL) goto oom;
            snprintf(pp->key, klen, "%s:%s:%d", m->job, t->name, p);
            pp->pull.kind = PSR_PULL;
            pp->pull.key = pp->key;
            pp->pull.keylen = strlen(pp->key);
            pp->pull.slot = (int)ps_key_hash_slot(pp->key, pp->pull.keylen);
            pp->pull.m = m;
            pp->pull.t = ti;
            pp->pull.p = p;
            pp->pull.node = -1;
            pp->pull.ask_node = -1;
        }
    }
    m->laid_out = 1;
    return PS_OK;
oom:
    psi_set_error(c, PS_ERR_OOM, "out of memory");
    return PS_ERR;
}

int psModelNumTensors(const psModel *m) { return m->ntensors; }

int psModelTensorIndex(const psModel *m, const char *name) {
    int i;
    for (i = 0; i < m->ntensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0) return i;
    return PS_ERR;
}

const char *psModelTensorName(const psModel *m, int t) {
    return t >= 0 && t < m->ntensors ? m->tensors[t].name : NULL;
}

size_t psModelTensorElements(const psModel *m, int t) {
    return t >= 0 && t < m->ntensors ? m->tensors[t].elements : 0;
}

int psModelNumPartitions(const psModel *m, int t) {
    return t >= 0 && t < m->ntensors ? m->tensors[t].nparts : 0;
}

static const psPart *get_part(const psModel *m, int t, int p) {
    if (t < 0 || t >= m->ntensors || p < 0 || p >= m->tensors[t].nparts) return NULL;
    return &m->tensors[t].parts[p];
}

const char *psModelPartitionKey(const psModel *m, int t, int p) {
    const psPart *pp = get_part(m, t, p);
    return pp ? pp->key : NULL;
}

void psModelPartitionRows(const psModel *m, int t, int p, uint64_t *first_row, uint64_t *nrows) {
    const psPart *pp = get_part(m, t, p);
    if (first_row) *first_row = pp ? pp->first_row : 0;
    if (nrows) *nrows = pp ? pp->nrows : 0;
}

uint64_t psModelPartitionVersion(const psModel *m, int t, int p) {
    const psPart *pp = get_part(m, t, p);
    return pp ? pp->version : 0;
}

void psModelFree(psModel *m) {
    int t, p;
    if (m == NULL) return;
    for (t = 0; t < m->ntensors; t++) {
        for (p = 0; p < m->tensors[t].nparts; p++) free(m->tensors[t].parts[p].key);
        free(m->tensors[t].parts);
        free(m->tensors[t].resid);
        free(m->tensors[t].name);
    }
    free(m->tensors);
    free(m->pull_dstv);
    free(m->scratch);
    free(m->topk_scratch);
    free(m->job);
    free(m);
}

/* ========================================================================
 * Models: create, delete, pull
 * ======================================================================== */

/* Submit one RAW request per partition of tensors [t0, t1), built by
 * 'build' (returns argc, fills argv/argl; 'nb' is scratch for numbers),
 * wait, and hand each reply to 'count'. Returns the sum of 'count' or PS_ERR. */
#define MAX_CMD_ARGS 96
typedef int (*buildFn)(psModel *m, int t, int p, const char **argv, size_t *argl,
                       char nb[][24], void *arg);
typedef int (*countFn)(psClient *c, const char *key, redisReply *r);

static int per_partition(psClient *c, psModel *m, int t0, int t1, buildFn build, void *arg,
                         countFn count) {
    psReq *reqs;
    size_t n = 0, i;
    int t, p, total = 0;
    if (psModelLayout(c, m) != PS_OK) return PS_ERR;
    for (t = t0; t < t1; t++) n += (size_t)m->tensors[t].nparts;
    if ((reqs = calloc(n, sizeof(psReq))) == NULL) {
        psi_set_error(c, PS_ERR_OOM, "out of memory");
        return PS_ERR;
    }
    i = 0;
    for (t = t0; t < t1; t++) {
        for (p = 0; p < m->tensors[t].nparts; p++, i++) {
            const char *argv[MAX_CMD_ARGS];
            size_t argl[MAX_CMD_ARGS];
            char nb[MAX_CMD_ARGS][24];
            int argc = build(m, t, p, argv, argl, nb, arg), len;
            char *cmd = NULL;
            raw_init(&reqs[i], m->tensors[t].parts[p].key);
            if (argc < 0) {
                psi_set_error(c, PS_ERR_ARG, "too many create options");
                reqs[i].state = PSS_DONE;
                continue;
            }
            len = redisFormatCommandArgv(&cmd, argc, argv, argl);
            if (len < 0) {
                psi_set_error(c, PS_ERR_OOM, "out of memory");
                reqs[i].state = PSS_DONE;
                continue;
            }
            reqs[i].cmd = cmd;
            reqs[i].cmdlen = (size_t)len;
        }
    }
    if (!c->err) raw_run(c, reqs, n);
    for (i = 0; i < n; i++) {
        if (reqs[i].reply) {
            int k = count(c, reqs[i].key, reqs[i].reply);
            if (k > 0) total += k;
            freeReplyObject(reqs[i].reply);
        }
        if (reqs[i].cmd) redisFreeCommand(reqs[i].cmd);
    }
    free(reqs);
    return c->err ? PS_ERR : total;
}

typedef struct createArgs {
    char *opts;                 /* private copy, tokens NUL-separated */
    const char *tok[64];
    int ntok, seed_at;          /* index of the SEED value token, -1 none */
    unsigned long long seed;
    int nx;
} createArgs;

static int build_create(psModel *m, int t, int p, const char **argv, size_t *argl, char nb[][24],
                        void *arg) {
    createArgs *ca = arg;
    psTensor *tt = &m->tensors[t];
    int argc = 0, i, nbi = 0;
    argv[argc++] = "PS.CREATE";
    argv[argc++] = tt->parts[p].key;
    argv[argc++] = "SHAPE";
    snprintf(nb[nbi], 24, "%llu", (unsigned long long)tt->parts[p].nrows);
    argv[argc++] = nb[nbi++];
    for (i = 1; i < tt->ndim; i++) {
        snprintf(nb[nbi], 24, "%llu", (unsigned long long)tt->dims[i]);
        argv[argc++] = nb[nbi++];
    }
    for (i = 0; i < ca->ntok; i++) {
        if (argc >= MAX_CMD_ARGS - 2) return -1;
        if (i == ca->seed_at) {
            snprintf(nb[nbi], 24, "%llu", ca->seed + (unsigned long long)(tt->first_part + p));
            argv[argc++] = nb[nbi++];
        } else {
            argv[argc++] = ca->tok[i];
        }
    }
    if (ca->nx) argv[argc++] = "NX";
    for (i = 0; i < argc; i++) argl[i] = strlen(argv[i]);
    return argc;
}

static int count_create(psClient *c, const char *key, redisReply *r) {
    if (r->type == REDIS_REPLY_STATUS) return 1;
    if (r->type == REDIS_REPLY_NIL) return 0;
    psi_set_error(c, PS_ERR_SERVER, "PS.CREATE %s: %.80s", key,
                  r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    return 0;
}

static int create_range(psClient *c, psModel *m, int t0, int t1, const char *opts, int nx) {
    createArgs ca;
    char *s, *save = NULL, *tok;
    int rc;
    memset(&ca, 0, sizeof(ca));
    ca.seed_at = -1;
    ca.nx = nx;
    if ((ca.opts = strdup(opts ? opts : "")) == NULL) {
        psi_set_error(c, PS_ERR_OOM, "out of memory");
        return PS_ERR;
    }
    for (s = ca.opts; (tok = strtok_r(s, " \t\n", &save)) != NULL; s = NULL) {
        if (ca.ntok == 64) {
            free(ca.opts);
            psi_set_error(c, PS_ERR_ARG, "too many create options");
            return PS_ERR;
        }
        if (ca.ntok > 0 && strcasecmp(ca.tok[ca.ntok - 1], "SEED") == 0) {
            char *end;
            ca.seed = strtoull(tok, &end, 10);
            if (*end == '\0' && *tok != '-') ca.seed_at = ca.ntok;
        }
        ca.tok[ca.ntok++] = tok;
    }
    rc = per_partition(c, m, t0, t1, build_create, &ca, count_create);
    free(ca.opts);
    return rc;
}

int psModelCreateTensor(psClient *c, psModel *m, int t, const char *create_opts, int nx) {
    c->err = 0;
    c->errstr[0] = '\0';
    if (t < 0 || t >= m->ntensors) {
        psi_set_error(c, PS_ERR_ARG, "no tensor %d in model '%s'", t, m->job);
        return PS_ERR;
    }
    return create_range(c, m, t, t + 1, create_opts, nx);
}

int psModelCreate(psClient *c, psModel *m, const char *create_opts, int nx) {
    c->err = 0;
    c->errstr[0] = '\0';
    return create_range(c, m, 0, m->ntensors, create_opts, nx);
}

static int build_del(psModel *m, int t, int p, const char **argv, size_t *argl, char nb[][24],
                     void *arg) {
    (void)nb;
    (void)arg;
    argv[0] = "DEL";
    argv[1] = m->tensors[t].parts[p].key;
    argl[0] = 3;
    argl[1] = strlen(argv[1]);
    return 2;
}

static int count_del(psClient *c, const char *key, redisReply *r) {
    if (r->type == REDIS_REPLY_INTEGER) return (int)r->integer;
    psi_set_error(c, PS_ERR_SERVER, "DEL %s: %.80s", key,
                  r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    return 0;
}

int psModelDelete(psClient *c, psModel *m) {
    c->err = 0;
    c->errstr[0] = '\0';
    return per_partition(c, m, 0, m->ntensors, build_del, NULL, count_del);
}

static int pull_done(psClient *c, void *arg) {
    (void)c;
    return ((psModel *)arg)->pull_pending == 0;
}

int psModelPullAsync(psClient *c, psModel *m, float **dst) {
    int t, p;
    c->err = 0;
    c->errstr[0] = '\0';
    if (psModelLayout(c, m) != PS_OK) return PS_ERR;
    if (m->pull_pending || m->pull_dst) {
        psi_set_error(c, PS_ERR_ARG, "a pull of model '%s' is already in flight", m->job);
        return PS_ERR;
    }
    if (m->pull_dstv == NULL &&
        (m->pull_dstv = calloc((size_t)m->ntensors, sizeof(float *))) == NULL) {
        psi_set_error(c, PS_ERR_OOM, "out of memory");
        return PS_ERR;
    }
    memcpy(m->pull_dstv, dst, sizeof(float *) * (size_t)m->ntensors);
    m->pull_dst = m->pull_dstv;
    m->pull_failed = 0;
    m->pull_pending = 0;
    for (t = 0; t < m->ntensors; t++)
        if (dst[t]) m->pull_pending += m->tensors[t].nparts;
    for (t = 0; t < m->ntensors; t++) {
        if (dst[t] == NULL) continue;
        for (p = 0; p < m->tensors[t].nparts; p++) {
            psReq *r = &m->tensors[t].parts[p].pull;
            r->state = PSS_IDLE;
            psi_submit(c, r);
        }
    }
    psi_flush(c);
    if (m->pull_failed) {
        /* Failed already (e.g. no node for a slot): finish it here, so that
         * PS_ERR always means no pull is left in flight. */
        int code = m->pull_failed;
        char msg[128];
        snprintf(msg, sizeof(msg), "%s", m->pull_errstr);
        psi_run(c, pull_done, m);
        m->pull_dst = NULL;
        c->err = 0;
        psi_set_error(c, code, "%s", msg);
        return PS_ERR;
    }
    return PS_OK;
}

int psModelPullWait(psClient *c, psModel *m, uint64_t *versions_out) {
    int t, p;
    c->err = 0;
    c->errstr[0] = '\0';
    if (m->pull_dst == NULL) {
        psi_set_error(c, PS_ERR_ARG, "no pull of model '%s' in flight", m->job);
        return PS_ERR;
    }
    if (psi_run(c, pull_done, m) != 0)
        psi_set_error(c, PS_ERR_OTHER, "internal error: pulls left without replies");
    if (m->pull_failed && !c->err) psi_set_error(c, m->pull_failed, "%s", m->pull_errstr);
    if (versions_out) {
        for (t = 0; t < m->ntensors; t++) {
            uint64_t v = UINT64_MAX;
            for (p = 0; p < m->tensors[t].nparts; p++)
                if (m->tensors[t].parts[p].version < v) v = m->tensors[t].parts[p].version;
            versions_out[t] = (m->pull_dst[t] && m->tensors[t].nparts) ? v : 0;
        }
    }
    m->pull_dst = NULL;
    return c->err ? PS_ERR : PS_OK;
}

int psModelPull(psClient *c, psModel *m, float **dst, uint64_t *versions_out) {
    if (psModelPullAsync(c, m, dst) != PS_OK) return PS_ERR;
    return psModelPullWait(c, m, versions_out);
}
