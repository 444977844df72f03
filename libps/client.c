/* client.c -- libps public API of the client itself: psConnect, generic
 * commands (psCommand*, each a request whose reply is kept for the caller),
 * psDrain and psClientFree: composes the layers (ps_internal.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "batch.h"
#include "clock.h"
#include "raw.h"

/* ========================================================================
 * Connection
 * ======================================================================== */

/* 64 random bits from /dev/urandom, or the clock mixed with the pid. */
static uint64_t random64(void) {
    uint64_t x = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (f) {
        if (fread(&x, sizeof(x), 1, f) != 1) x = 0;
        fclose(f);
    }
    if (x == 0) x = ps_wall_us() * 6364136223846793005ull ^ (uint64_t)getpid();
    return x;
}

psClient *psConnect(const char *addrs, const psOptions *opt) {
    psOptions o;
    psClient *c;
    psClientPriv *pv;

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
    /* Each layer resolves its own options and defaults. */
    psi_topology_config(c, &o);
    psi_engine_config(c, &o);
    psi_durable_config(c, &o);
    pv->partition_bytes = o.partition_bytes > 0 ? o.partition_bytes : PS_DEFAULT_PARTITION_BYTES;
    if (o.client_id && *o.client_id) {
        snprintf(c->client_id, sizeof(c->client_id), "%s", o.client_id);
    } else {
        char host[64] = "host";
        gethostname(host, sizeof(host) - 1);
        host[sizeof(host) - 1] = '\0';
        snprintf(c->client_id, sizeof(c->client_id), "%s:%d:%08llx", host, (int)getpid(),
                 (unsigned long long)(random64() & 0xffffffffull));
    }
    if (psi_batches_init(c, &o) != 0) {
        psi_set_error(c, PS_ERR_OOM, "out of memory");
        return c;
    }
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
        psi_batches_free(c);
        psi_engine_free(c);
        psi_topology_free(c);
        free(pv);
    }
    free(c);
}

int psDrain(psClient *c) {
    psi_clear_error(c);
    if (psi_run(c, psi_batches_idle, NULL) != 0)
        psi_set_error(c, PS_ERR_OTHER, "internal error: pushes left without replies");
    return c->err ? PS_ERR : PS_OK;
}

/* ========================================================================
 * Generic commands
 * ======================================================================== */

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
