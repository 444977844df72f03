/* async.c -- one command in two halves (ps.h psCommandArgvAsync /
 * psCommandWait): sent at once, its reply read by this or any later call
 * on the client and handed over by the wait. A raw request (raw.h) that
 * outlives the call that sent it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "raw.h"

struct psAsync {
    psRawReq q;
};

psAsync *psCommandArgvAsync(psClient *c, const char *key, int argc, const char **argv,
                            const size_t *argvlen) {
    char *cmd = NULL;
    psAsync *a;
    int len;
    psi_clear_error(c);
    len = redisFormatCommandArgv(&cmd, argc, argv, argvlen);
    if (len < 0 || cmd == NULL || (a = calloc(1, sizeof(*a))) == NULL) {
        if (cmd) redisFreeCommand(cmd);
        psi_set_error(c, PS_ERR_OOM, "cannot format the command");
        return NULL;
    }
    psi_raw_init(&a->q, key, cmd, (size_t)len);
    psi_submit(c, &a->q.req);
    psi_flush(c);
    return a;
}

/* MULTI, the commands, EXEC and, with replicas > 0, "WAIT replicas
 * timeout_ms" (its reply trails EXEC's: psReq.trail), as one request. */
static psAsync *tx_async(psClient *c, const char *key, int ncmd, const int *argc,
                         const char *const *const *argv, const size_t *const *argvlen,
                         int replicas, int timeout_ms) {
    char *parts[PS_TX_MAX_COMMANDS + 3], *cmd = NULL;
    int lens[PS_TX_MAX_COMMANDS + 3], n = 0, ok = ncmd > 0 && ncmd <= PS_TX_MAX_COMMANDS;
    size_t total = 0;
    psAsync *a = NULL;
    psi_clear_error(c);
    if (!ok || replicas < 0 || timeout_ms < 0) {
        psi_set_error(c, PS_ERR_ARG, "a transaction of 1 to %d commands (WAIT: replicas and "
                      "timeout >= 0)", PS_TX_MAX_COMMANDS);
        return NULL;
    }
    char s_rep[16], s_ms[16];
    snprintf(s_rep, sizeof(s_rep), "%d", replicas);
    snprintf(s_ms, sizeof(s_ms), "%d", timeout_ms);
    const char *multi[] = {"MULTI"}, *exec[] = {"EXEC"}, *wait[] = {"WAIT", s_rep, s_ms};
    const int trail = replicas > 0;
    for (int i = 0; ok && i < ncmd + 2 + trail; i++) {
        parts[n] = NULL;
        lens[n] = i == 0 ? redisFormatCommandArgv(&parts[n], 1, multi, NULL)
                : i == ncmd + 1 ? redisFormatCommandArgv(&parts[n], 1, exec, NULL)
                : i == ncmd + 2 ? redisFormatCommandArgv(&parts[n], 3, wait, NULL)
                : redisFormatCommandArgv(&parts[n], argc[i - 1], (const char **)argv[i - 1],
                                         argvlen ? argvlen[i - 1] : NULL);
        if (lens[n] < 0 || parts[n] == NULL) ok = 0;
        else total += (size_t)lens[n];
        n++;
    }
    /* One buffer, freed as a formatted command (psi_raw_free). */
    if (ok && (cmd = malloc(total + 1)) != NULL && (a = calloc(1, sizeof(*a))) != NULL) {
        size_t off = 0;
        for (int i = 0; i < n; i++) {
            memcpy(cmd + off, parts[i], (size_t)lens[i]);
            off += (size_t)lens[i];
        }
        cmd[total] = '\0';
    }
    for (int i = 0; i < n; i++)
        if (parts[i]) redisFreeCommand(parts[i]);
    if (a == NULL) {
        free(cmd);
        psi_set_error(c, PS_ERR_OOM, "cannot format the transaction");
        return NULL;
    }
    psi_raw_init(&a->q, key, cmd, total);
    a->q.req.skip = ncmd + 1 + trail;
    a->q.req.trail = trail;
    psi_submit(c, &a->q.req);
    psi_flush(c);
    return a;
}

psAsync *psTransactionAsync(psClient *c, const char *key, int ncmd, const int *argc,
                            const char *const *const *argv, const size_t *const *argvlen) {
    return tx_async(c, key, ncmd, argc, argv, argvlen, 0, 0);
}

psAsync *psTransactionWaitAsync(psClient *c, const char *key, int ncmd, const int *argc,
                                const char *const *const *argv, const size_t *const *argvlen,
                                int replicas, int timeout_ms) {
    if (replicas < 1) {
        psi_clear_error(c);
        psi_set_error(c, PS_ERR_ARG, "WAIT: at least 1 replica");
        return NULL;
    }
    return tx_async(c, key, ncmd, argc, argv, argvlen, replicas, timeout_ms);
}

static int one_done(psClient *c, void *arg) {
    (void)c;
    return ((psRawReq *)arg)->req.state == PSS_DONE;
}

redisReply *psTransactionWait(psClient *c, psAsync *a, redisReply **waited) {
    redisReply *r;
    psi_clear_error(c);
    if (waited) *waited = NULL;
    if (a == NULL) {
        psi_set_error(c, PS_ERR_ARG, "no command");
        return NULL;
    }
    if (psi_run(c, one_done, &a->q) != 0 && !c->err)
        psi_set_error(c, PS_ERR_OTHER, "internal error: a request left without a reply");
    r = a->q.reply;
    if (r == NULL && !c->err) psi_set_error(c, PS_ERR_OTHER, "no reply");
    if (r && waited) {
        *waited = a->q.req.trail_reply;
        a->q.req.trail_reply = NULL;
    }
    psi_raw_free(&a->q);
    free(a);
    return r;
}

redisReply *psCommandWait(psClient *c, psAsync *a) { return psTransactionWait(c, a, NULL); }
