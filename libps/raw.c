/* raw.c -- raw requests (raw.h): one command, its reply kept for the caller. */
#include <stdlib.h>
#include <string.h>

#include "raw.h"

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
    if (q->req.skip_err) freeReplyObject(q->req.skip_err);
    if (q->req.held) freeReplyObject(q->req.held);
    if (q->req.trail_reply) freeReplyObject(q->req.trail_reply);
    q->req.skip_err = q->req.held = q->req.trail_reply = NULL;
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
