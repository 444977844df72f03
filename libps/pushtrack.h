/* pushtrack.h -- what model pushes (model_io.c) and embedding-table pushes
 * (embed.c) share: a group of push requests in flight, released when every
 * request and every WAIT queued after them answered, and the bookkeeping of
 * the durability options (wait_replicas, durability_policy):
 *   - one "WAIT n ms" per node after the group's pushes on that node (none
 *     to a node degraded under PS_DURABILITY_DEGRADE: those pushes count as
 *     unreplicated);
 *   - a WAIT lost with its connection takes back the acknowledgement of the
 *     pushes it covered and resends them (same seqs), before whatever was
 *     queued after it: whoever serves the slot next applies each once, and
 *     WAITs again once they are acknowledged (psi_push_acked);
 *   - a short WAIT is the policy's (durable.c): unreplicated (degrade), the
 *     same WAIT again (block) or an error (fail); a WAIT the server refuses
 *     (an error reply, e.g. NOPERM) is an error under every policy.
 * Private to libps. */
#ifndef PS_PUSHTRACK_H
#define PS_PUSHTRACK_H

#include "ps_internal.h"

struct psPushGroup;

/* One push request of a group, as the WAIT bookkeeping sees it. The owner
 * embeds it in its own request struct (req.udata points to that). */
typedef struct psPushAck {
    psReq req;
    struct psPushGroup *g;
    int acked;                  /* answered with a version */
    int rewait;                 /* resent after its WAIT was lost: WAIT again once acked */
    int unreplicated;           /* counted in stats.unreplicated_pushes */
} psPushAck;

/* A group of pushes: a model push (one request per partition) or a table
 * push (one per shard). Reused: the owner fills item/n before each
 * psi_group_submit. */
typedef struct psPushGroup {
    int in_use;
    int outstanding;            /* requests + WAITs not yet answered */
    int n;
    /* Push k (k < n), or NULL when it is not part of the group this time. */
    psPushAck *(*item)(struct psPushGroup *g, int k);
    /* An acknowledged push taken back (its WAIT was lost): undo the
     * owner's count of it. NULL: nothing to undo. */
    void (*unacked)(psClient *c, psPushAck *a);
} psPushGroup;

/* Reset 'a' for a new use in group 'g' (routing by 'key'). */
void psi_push_init(psPushAck *a, psPushGroup *g, const char *key, size_t keylen);

/* Mark 'g' in use, submit its pushes and queue the WAITs after them
 * (wait_replicas > 0), then write. */
void psi_group_submit(psClient *c, psPushGroup *g);

/* One request or WAIT of 'g' answered: the group is free when none is left. */
void psi_group_release(psPushGroup *g);

/* Push 'a' answered with a version by 'node'. A push resent after its WAIT
 * was lost gets a WAIT of its own, after the last such push in flight there. */
void psi_push_acked(psClient *c, psPushAck *a, int node);

/* What a push's reply means to its owner (psi_push_reply). */
#define PSI_PUSH_ACKED 0        /* applied or a duplicate (*acked updated) */
#define PSI_PUSH_RESEND 1       /* lost state under policy continue: re-encode with the
                                   new *sent version and return PSI_RESEND */
#define PSI_PUSH_FAILED 2       /* counted and recorded; the push is finished */

/* Interprets the reply of a push to 'key' (NULL: the request failed),
 * what model and table pushes share: "VERSION is newer than the tensor's
 * version" and a key gone after an acknowledgement are lost state
 * (announced; policy continue resends, stop fails the push), STALE is
 * counted in stale_rejects, anything else in push_errors with the error
 * recorded. '*sent' is the push's VERSION (has_version), '*acked' the
 * highest version this client saw acknowledged (valid when *has_acked);
 * both are updated. Frees 'reply'. */
int psi_push_reply(psClient *c, psReq *r, redisReply *reply, const char *key, int has_version,
                   uint64_t *sent, int *has_acked, uint64_t *acked);

#endif /* PS_PUSHTRACK_H */
