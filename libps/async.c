/* async.c -- one command in two halves (ps.h psCommandArgvAsync /
 * psCommandWait): sent at once, its reply read by this or any later call
 * on the client and handed over by the wait. A raw request (raw.h) that
 * outlives the call that sent it. */
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

psAsync *psTransactionAsync(psClient *c, const char *key, int ncmd, const int *argc,
                            const char *const *const *argv, const size_t *const *argvlen) {
    char *parts[PS_TX_MAX_COMMANDS + 2], *cmd = NULL;
    int lens[PS_TX_MAX_COMMANDS + 2], n = 0, ok = ncmd > 0 && ncmd <= PS_TX_MAX_COMMANDS;
    size_t total = 0;
    psAsync *a = NULL;
    psi_clear_error(c);
    if (!ok) {
        psi_set_error(c, PS_ERR_ARG, "a transaction of 1 to %d commands", PS_TX_MAX_COMMANDS);
        return NULL;
    }
    const char *multi[] = {"MULTI"}, *exec[] = {"EXEC"};
    for (int i = 0; ok && i < ncmd + 2; i++) {
        parts[n] = NULL;
        lens[n] = i == 0 ? redisFormatCommandArgv(&parts[n], 1, multi, NULL)
                : i == ncmd + 1 ? redisFormatCommandArgv(&parts[n], 1, exec, NULL)
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
    a->q.req.skip = ncmd + 1;
    psi_submit(c, &a->q.req);
    psi_flush(c);
    return a;
}

static int one_done(psClient *c, void *arg) {
    (void)c;
    return ((psRawReq *)arg)->req.state == PSS_DONE;
}

redisReply *psCommandWait(psClient *c, psAsync *a) {
    redisReply *r;
    psi_clear_error(c);
    if (a == NULL) {
        psi_set_error(c, PS_ERR_ARG, "no command");
        return NULL;
    }
    if (psi_run(c, one_done, &a->q) != 0 && !c->err)
        psi_set_error(c, PS_ERR_OTHER, "internal error: a request left without a reply");
    r = a->q.reply;
    if (r == NULL && !c->err) psi_set_error(c, PS_ERR_OTHER, "no reply");
    psi_raw_free(&a->q);
    free(a);
    return r;
}
