/* snapshot.c -- single tensor keys, one command each (ps.h "Snapshots and
 * single tensor pulls"): psSnapshot (PS.SNAPSHOT), psTensorPull (PS.PULL
 * [AT name]) and psModuleLoaded (the bare PS.PULL probe), encoded by wire.c
 * and run by the engine like any request (redirects, retries). */
#include <stdlib.h>
#include <string.h>

#include "protocol.h"
#include "ps_internal.h"
#include "raw.h"
#include "wire.h"

/* Runs PS.PULL 'pull' or (NULL) PS.SNAPSHOT key 'snapname', routed by 'key'
 * (NULL: any node), and returns its reply (NULL with the error set). */
static redisReply *run_encoded(psClient *c, const char *key, const psWirePull *pull,
                               const char *snapname) {
    const size_t kl = key ? strlen(key) : 0;
    size_t len = pull ? ps_wire_pull(pull, NULL, 0) : ps_wire_snapshot(key, kl, snapname, NULL, 0);
    char *cmd = malloc(len);
    if (cmd == NULL) {
        psi_set_error(c, PS_ERR_OOM, "out of memory");
        return NULL;
    }
    if (pull) ps_wire_pull(pull, cmd, len);
    else ps_wire_snapshot(key, kl, snapname, cmd, len);
    psRawReq q;
    psi_raw_init(&q, key, cmd, len);
    psi_raw_run(c, &q, 1);
    q.cmd = NULL; /* ours: malloc'ed */
    free(cmd);
    if (q.reply == NULL && !c->err) psi_set_error(c, PS_ERR_OTHER, "no reply");
    return q.reply;
}

/* The error an error reply 'r' of command 'what' on 'key' sets. */
static void reply_set_error(psClient *c, const char *what, const char *key, const redisReply *r) {
    psi_set_error(c, psi_reply_error(r) == PS_PROTO_ERR_NOKEY ? PS_ERR_NOKEY : PS_ERR_SERVER,
                  "%s %s: %s", what, key, r->str);
}

int psSnapshot(psClient *c, const char *key, const char *name) {
    psi_clear_error(c);
    if (!key || !name || !*name) {
        psi_set_error(c, PS_ERR_ARG, "psSnapshot needs a key and a name");
        return PS_ERR;
    }
    redisReply *r = run_encoded(c, key, NULL, name);
    if (r == NULL) return PS_ERR;
    int rc = PS_OK;
    if (r->type == REDIS_REPLY_ERROR) {
        reply_set_error(c, "PS.SNAPSHOT", key, r);
        rc = PS_ERR;
    }
    freeReplyObject(r);
    return rc;
}

int psTensorPull(psClient *c, const char *key, const char *at, float *dst, size_t n,
                 uint64_t *version) {
    psi_clear_error(c);
    if (!key || (n && !dst) || (at && !*at)) {
        psi_set_error(c, PS_ERR_ARG, "psTensorPull needs a key, a destination, a non-empty AT");
        return PS_ERR;
    }
    psWirePull a = {key, strlen(key), PS_FMT_F32, 0, 0, NULL, 0, 0, at};
    redisReply *r = run_encoded(c, key, &a, NULL);
    if (r == NULL) return PS_ERR;
    int rc = PS_ERR;
    if (r->type == REDIS_REPLY_ERROR) {
        reply_set_error(c, "PS.PULL", key, r);
    } else if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
               r->element[0]->type != REDIS_REPLY_INTEGER ||
               r->element[1]->type != REDIS_REPLY_STRING) {
        psi_set_error(c, PS_ERR_PROTOCOL, "PS.PULL %s: unexpected reply", key);
    } else if (r->element[1]->len != n * sizeof(float)) {
        psi_set_error(c, PS_ERR_PROTOCOL, "PS.PULL %s: %zu bytes of values, expected %zu", key,
                      r->element[1]->len, n * sizeof(float));
    } else {
        if (n) memcpy(dst, r->element[1]->str, n * sizeof(float));
        if (version) *version = (uint64_t)r->element[0]->integer;
        rc = PS_OK;
    }
    freeReplyObject(r);
    return rc;
}

int psModuleLoaded(psClient *c) {
    psi_clear_error(c);
    psWirePull a = {NULL, 0, PS_FMT_F32, 0, 0, NULL, 0, 0, NULL};
    redisReply *r = run_encoded(c, NULL, &a, NULL);
    if (r == NULL) return PS_ERR;
    /* Redis answers a command it does not know before looking at anything
     * else; the module answers the bare PS.PULL with an arity error. */
    int missing = r->type == REDIS_REPLY_ERROR && strstr(r->str, "unknown command") != NULL;
    freeReplyObject(r);
    return missing ? 0 : 1;
}
