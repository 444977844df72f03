/* async.c -- one command in two halves (ps.h psCommandArgvAsync /
 * psCommandWait): sent at once, its reply read by this or any later call
 * on the client and handed over by the wait. A raw request (raw.h) that
 * outlives the call that sent it. */
#include <stdlib.h>

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
