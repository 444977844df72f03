/* raw.h -- raw requests: a command (formatted by hiredis) routed by a key,
 * whose reply is kept for the caller. psCommand* (client.c) and the
 * per-key create/delete of models (model.c) and tables (embed.c) send
 * them, pipelined, through the engine. Private to libps. */
#ifndef PS_RAW_H
#define PS_RAW_H

#include "ps_internal.h"

/* A command whose reply is kept for the caller. */
typedef struct psRawReq {
    psReq req;
    char *cmd;                  /* from redisFormatCommandArgv (owned) */
    redisReply *reply;          /* final reply, or NULL */
} psRawReq;

/* Route raw request 'q' by 'key' and send 'cmd' ('len' bytes, from
 * redisFormatCommandArgv, owned by q from now on). */
void psi_raw_init(psRawReq *q, const char *key, char *cmd, size_t len);
/* Submit the 'n' requests 'qs' (cmd NULL: skipped) and wait for all. */
void psi_raw_run(psClient *c, psRawReq *qs, size_t n);
/* Free the command of 'q' (not the reply). */
void psi_raw_free(psRawReq *q);

#endif /* PS_RAW_H */
