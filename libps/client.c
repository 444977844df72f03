/* client.c -- libps public API of the client itself: psConnect, generic
 * commands (psCommand*, each a request whose reply is kept for the caller),
 * psDrain and psClientFree. Models are in model.c and model_io.c, the
 * request engine in engine.c, topology in conn.c. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "clock.h"
#include "model.h"

/* ========================================================================
 * Connection
 * ======================================================================== */

static uint64_t now_us(void) { return ps_wall_us(); }

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
    pv->durability_policy = o.durability_policy == PS_DURABILITY_BLOCK ||
                            o.durability_policy == PS_DURABILITY_FAIL
                            ? o.durability_policy : PS_DURABILITY_DEGRADE;
    pv->probe_ms = o.probe_ms > 0 ? o.probe_ms : PS_DEFAULT_PROBE_MS;
    pv->lost_state_policy = o.lost_state_policy == PS_LOST_STATE_CONTINUE
                            ? PS_LOST_STATE_CONTINUE : PS_LOST_STATE_STOP;
    pv->on_event = o.on_event;
    pv->event_udata = o.event_udata;
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
    if (psi_models_init(c) != 0) {
        psi_set_error(c, PS_ERR_OOM, "out of memory");
        return c;
    }
    for (i = 0; i < PS_CLUSTER_SLOTS; i++) pv->slots[i] = -1;
    if (addrs == NULL) {
        psi_set_error(c, PS_ERR_ARG, "no address given (want host:port[,host:port...])");
        return c;
    }
    psi_topology_init(c, addrs);
    return c;
}


void psClientFree(psClient *c) {
    psClientPriv *pv;
    if (c == NULL) return;
    pv = c->priv;
    if (pv) {
        psi_models_free(c);
        psi_embeds_free(c);
        psi_engine_free(c);
        psi_topology_free(c);
        free(pv->user);
        free(pv->password);
        free(pv);
    }
    free(c);
}

/* Model and embedding pushes all answered. */
static int all_pushes_idle(psClient *c, void *arg) {
    return psi_pushes_idle(c, arg) && psi_embeds_idle(c, arg);
}

int psDrain(psClient *c) {
    psi_clear_error(c);
    if (psi_run(c, all_pushes_idle, NULL) != 0)
        psi_set_error(c, PS_ERR_OTHER, "internal error: pushes left without replies");
    return c->err ? PS_ERR : PS_OK;
}

/* ========================================================================
 * Generic commands
 * ======================================================================== */

static int raw_done(psClient *c, psReq *r, redisReply *reply) {
    (void)c;
    ((psRawReq *)r->udata)->reply = reply;
    return PSI_DONE;
}

void psi_raw_init(psRawReq *q, const char *key, char *cmd, size_t len) {
    psi_req_init(&q->req, key, key ? strlen(key) : 0);
    q->req.cmd = cmd;
    q->req.cmdlen = len;
    q->req.done = raw_done;
    q->req.udata = q;
    q->cmd = cmd;
    q->reply = NULL;
}

void psi_raw_free(psRawReq *q) {
    if (q->cmd) redisFreeCommand(q->cmd);
    q->cmd = NULL;
}

typedef struct rawBatch {
    psRawReq *qs;
    size_t n;
} rawBatch;

static int raw_batch_done(psClient *c, void *arg) {
    rawBatch *b = arg;
    size_t i;
    (void)c;
    for (i = 0; i < b->n; i++)
        if (b->qs[i].cmd && b->qs[i].req.state != PSS_DONE) return 0;
    return 1;
}

void psi_raw_run(psClient *c, psRawReq *qs, size_t n) {
    rawBatch b = {qs, n};
    size_t i;
    for (i = 0; i < n; i++)
        if (qs[i].cmd) psi_submit(c, &qs[i].req);
    if (psi_run(c, raw_batch_done, &b) != 0)
        psi_set_error(c, PS_ERR_OTHER, "internal error: requests left without replies");
}

static redisReply *command_formatted(psClient *c, const char *key, char *cmd, int len) {
    psRawReq q;
    if (len < 0 || cmd == NULL) {
        psi_set_error(c, len == -2 ? PS_ERR_ARG : PS_ERR_OOM, "cannot format the command");
        return NULL;
    }
    psi_raw_init(&q, key, cmd, (size_t)len);
    psi_raw_run(c, &q, 1);
    psi_raw_free(&q);
    if (q.reply == NULL && !c->err) psi_set_error(c, PS_ERR_OTHER, "no reply");
    return q.reply;
}

redisReply *psCommandArgv(psClient *c, const char *key, int argc, const char **argv,
                          const size_t *argvlen) {
    char *cmd = NULL;
    int len;
    psi_clear_error(c);
    len = redisFormatCommandArgv(&cmd, argc, argv, argvlen);
    return command_formatted(c, key, cmd, len);
}

redisReply *psCommand(psClient *c, const char *key, const char *format, ...) {
    char *cmd = NULL;
    int len;
    va_list ap;
    psi_clear_error(c);
    va_start(ap, format);
    len = redisvFormatCommand(&cmd, format, ap);
    va_end(ap);
    return command_formatted(c, key, cmd, len);
}

int psCommandBatchArgv(psClient *c, int n, const char *const *keys, const int *argcs,
                       const char **const *argvs, const size_t *const *argvlens,
                       redisReply **replies) {
    psRawReq *qs;
    int i, ok = 0;
    psi_clear_error(c);
    if (n <= 0) return 0;
    if ((qs = calloc((size_t)n, sizeof(*qs))) == NULL) {
        psi_set_error(c, PS_ERR_OOM, "out of memory");
        return PS_ERR;
    }
    for (i = 0; i < n; i++) {
        char *cmd = NULL;
        int len = redisFormatCommandArgv(&cmd, argcs[i], argvs[i], argvlens[i]);
        replies[i] = NULL;
        if (len < 0) {
            psi_set_error(c, PS_ERR_OOM, "cannot format command %d", i);
            continue;
        }
        psi_raw_init(&qs[i], keys[i], cmd, (size_t)len);
    }
    if (!c->err) psi_raw_run(c, qs, (size_t)n);
    for (i = 0; i < n; i++) {
        replies[i] = qs[i].reply;
        if (replies[i]) ok++;
        psi_raw_free(&qs[i]);
    }
    free(qs);
    if (ok < n && !c->err) psi_set_error(c, PS_ERR_OTHER, "no reply");
    return ok;
}
