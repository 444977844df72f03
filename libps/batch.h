/* batch.h -- the batch layer of libps: keyed blobs on the request engine.
 *
 * What a model (model_io.c), an embedding table (embed.c) and, later, the
 * relay share: they map their data onto server keys (partitions, shards)
 * and hand this layer one blob per key, which
 *   - pulls keyed blobs: one PS.PULL per key, all in flight together; the
 *     reply's data is decoded by the request's sink straight from the
 *     engine's read buffer into the caller's rows (psPull);
 *   - pushes keyed blobs: a push group is one PS.PUSHGRAD per key (dense or
 *     by ids), kept encoded until every one answered, so the engine can
 *     resend them unchanged (same seq: the server applies a resend at most
 *     once); up to push_window groups are in flight per window (psPush,
 *     psPushGroup);
 *   - keeps, per key, the versions and seqs that make pushes exactly-once
 *     and detect lost state (psKey);
 *   - interprets every reply: acknowledgements, STALE, lost state per
 *     lost_state_policy, server errors;
 *   - WAITs after each group's pushes per node (wait_replicas) with the
 *     durability policies of durable.c:
 *       one "WAIT n ms" per node after the group's pushes on that node
 *       (none to a node degraded under PS_DURABILITY_DEGRADE: those pushes
 *       count as unreplicated); a WAIT lost with its connection takes back
 *       the acknowledgement of the pushes it covered and resends them (same
 *       seqs), before whatever was queued after it: whoever serves the slot
 *       next applies each once, and they are WAITed for again once
 *       acknowledged; a short WAIT is the policy's: unreplicated (degrade),
 *       the same WAIT again (block) or an error (fail); a WAIT the server
 *       refuses (an error reply, e.g. NOPERM) is an error under every policy.
 * The engine points into a user's pulls and pushes while they are in
 * flight, so a user is attached to one client at a time (psi_user_attach)
 * and waited for before it is freed or moves (psi_user_detach).
 * Private to libps. */
#ifndef PS_BATCH_H
#define PS_BATCH_H

#include "codec.h"
#include "ps_internal.h"

/* The fewest ids of a key pull or push sent as IDFORMAT EF (fewer: raw). */
#define PS_IDS_EF_MIN 16

/* ------------------------------------------------------------------------
 * Keys
 * ------------------------------------------------------------------------ */

/* One server key of a user: what its pushes send and what was seen. */
typedef struct psKey {
    char *key;                  /* owned by the user */
    size_t keylen;
    uint64_t seq;               /* last seq used by a push (0: none yet) */
    uint64_t acked;             /* highest version seen acknowledged (push or pull reply) */
    int has_acked;
    uint64_t seen;              /* version of the latest pull reply read */
    int has_seen;
    int seen_now;               /* that reply answers the current pull (psi_pull_* resets it) */
    uint64_t version;           /* version of the data of the last pull waited for: what
                                   pushes send as VERSION (psi_key_take_pulled) */
    int has_version;
} psKey;

/* After a pull was waited for: its reply's version is what pushes send. */
void psi_key_take_pulled(psKey *k);

/* ------------------------------------------------------------------------
 * Users (a model, a table) and their pulls
 * ------------------------------------------------------------------------ */

struct psPushGroup;

/* A push window: groups reused round robin, at most all in flight. */
typedef struct psPushWindow {
    struct psPushGroup *g;
    int n;
} psPushWindow;

/* The pull in flight of a user: at most one. */
typedef struct psPullSet {
    int open;                   /* begun (psi_pulls_begin), not yet waited for */
    int live;                   /* replies may still write into their destinations */
    int pending;                /* key pulls without a final reply */
    int failed;                 /* PS_ERR_* of the first failure, 0 none */
    char errstr[256];
} psPullSet;

typedef struct psUser {
    const char *kind;           /* "model", "table": messages */
    const char *name;           /* not owned */
    const char *nokey_hint;     /* appended to a "no such key" error of a key never seen */
    char shape_hint[64];        /* why a reply of the wrong size may come */
    int own_window;             /* 1: pushes in a window of its own (push_window groups
                                   of this user); 0: in the client's shared window */
    psPushWindow own;
    psClient *client;           /* the client its requests were last sent on, or NULL */
    psPullSet pull;
} psUser;

/* Start 'u' detached ('name' and the hints stay the caller's). */
void psi_user_init(psUser *u, const char *kind, const char *name, const char *nokey_hint,
                   int own_window);
/* Detach 'u' (waiting for its requests) and free its own window. */
void psi_user_free(psUser *u);
/* Remember that 'u' has requests on 'c' (after waiting for those it has on
 * another client). 0 or -1 (out of memory, error recorded). */
int psi_user_attach(psClient *c, psUser *u);
/* Wait for every request of 'u' (a pull in flight is abandoned: its replies
 * are read but no longer written to their destinations) and forget its
 * client. */
void psi_user_detach(psUser *u);

/* One key pull: "PS.PULL key [FORMAT f] [MINVERSION v TIMEOUT ms]" (dense)
 * or "PS.PULL key IDS ids [FORMAT f]", whose [version, data] reply is
 * decoded into 'nrows' rows of 'width' floats: row i at dst + pos[i] *
 * width (pos NULL: dst + i * width). */
typedef struct psPull {
    psReq req;                  /* udata: this */
    psUser *u;
    psKey *k;
    char *cmd;
    size_t cmdcap;
    ps_format fmt;
    float *dst;
    const size_t *pos;
    size_t nrows, width;
    int by_ids;                 /* rows counted in stats.rows_pulled */
    uint64_t minver;            /* MINVERSION (0: none) */
    int timed_out;              /* the MINVERSION wait answered nil: nothing decoded */
    size_t direct;              /* bytes of the reply decoded by the sink */
    int idfmt;                  /* by ids: PS_PROTO_IDFMT_* sent (EF: rows in ascending
                                   id order, sids/spos) */
    uint64_t *sids;             /* by ids, sorted: the ids and their positions, owned */
    size_t *spos;
    size_t scap;
} psPull;

/* Prepare 'p' to pull the whole of key 'k' ('elements' floats into dst),
 * waiting on the server for version 'minver' ('wait_ms') when > 0. 0 or -1
 * (out of memory). */
int psi_pull_dense(psPull *p, psUser *u, psKey *k, ps_format fmt, uint64_t minver, int wait_ms,
                   float *dst, size_t elements);
/* Prepare 'p' to pull rows 'ids' ('nids', copied into the command) of 'dim'
 * floats of key 'k' into dst + pos[i] * dim ('pos' must live until the pull
 * is waited for). From PS_IDS_EF_MIN ids on, unless the client sends raw
 * ids (PS_FLAG_RAW_IDS, or a server without IDFORMAT met), the ids are
 * sorted (with their positions, copies owned by 'p') and sent as IDFORMAT EF
 * when that is smaller: the rows then come in ascending id order. 0 or -1. */
int psi_pull_ids(psPull *p, psUser *u, psKey *k, ps_format fmt, const uint64_t *ids,
                 size_t nids, const size_t *pos, float *dst, size_t dim);
void psi_pull_free(psPull *p);

/* A pull of 'u' begins: reset its state (the caller checked none is open). */
void psi_pulls_begin(psUser *u);
/* Submit prepared pull 'p' of the pull begun on 'u'. */
void psi_pull_submit(psClient *c, psPull *p);
/* All submitted: write them. PS_OK, or PS_ERR when one failed already
 * (e.g. no node for a slot): then the pull is finished (none left in
 * flight, none open) and the error recorded. */
int psi_pulls_sent(psClient *c, psUser *u);
/* Wait for the pull of 'u' (the caller checked one is open) and close it.
 * PS_OK, or PS_ERR with the first failure (or a later call's) recorded. */
int psi_pulls_wait(psClient *c, psUser *u);

/* ------------------------------------------------------------------------
 * Pushes
 * ------------------------------------------------------------------------ */

/* One key push of a group: PS.PUSHGRAD key blob FORMAT fmt [IDS ids]
 * [VERSION v] [ID client seq] [SCALE s]. The user fills fmt, the blob
 * (psi_push_blob), the ids (psi_push_ids, nids), has_version/version and
 * scale; the rest is this layer's. */
typedef struct psPush {
    psReq req;                  /* udata: this */
    struct psPushGroup *g;
    psKey *k;
    ps_format fmt;
    unsigned char *blob;
    size_t bloblen, blobcap;
    int by_ids;                 /* a push by ids (counted in stats.rows_pushed, else
                                   stats.pushes) */
    uint64_t *ids;
    size_t nids, idcap;
    int has_version;
    uint64_t version;
    float scale;                /* dense only: SCALE is sent when != 1 */
    uint64_t seq;
    char *head, *tail;          /* encoded RESP before and after the blob */
    size_t headcap, tailcap;
    int acked;                  /* answered with a version */
    int rewait;                 /* resent after its WAIT was lost: WAIT again once acked */
    int unreplicated;           /* counted in stats.unreplicated_pushes */
    int idfmt;                  /* by ids: PS_PROTO_IDFMT_* (EF: ids and blob rows sorted
                                   by id at psi_push_send) */
} psPush;

/* One push of a user: a request per key, released when every request and
 * every WAIT queued after them answered. Reused, never freed before its
 * window. */
typedef struct psPushGroup {
    int in_use;
    int outstanding;            /* requests + WAITs not yet answered */
    psUser *user;
    psPush *items;
    int n, cap;
} psPushGroup;

/* A push of 'u' (attached to 'c') of at most 'nmax' keys begins: waits for
 * a free group of its window. NULL on error (recorded). */
psPushGroup *psi_push_begin(psClient *c, psUser *u, int nmax);
/* Add a push to key 'k' (a new seq) to 'g'. The item is valid until
 * psi_push_send. */
psPush *psi_push_add(psClient *c, psPushGroup *g, psKey *k);
/* Room for a blob of 'len' bytes (sets bloblen). NULL: out of memory. */
unsigned char *psi_push_blob(psPush *p, size_t len);
/* Room for 'n' ids: makes 'p' a push by ids (the user sets nids). NULL:
 * out of memory. */
uint64_t *psi_push_ids(psPush *p, size_t n);
/* Encode and submit the pushes of 'g' (a push by ids of PS_IDS_EF_MIN ids or
 * more as psi_pull_ids: its ids and blob rows sorted by id, stably, and
 * sent as IDFORMAT EF when smaller), queue the WAITs after them
 * (wait_replicas > 0), write. PS_OK, or PS_ERR (recorded; nothing sent
 * when encoding failed). */
int psi_push_send(psClient *c, psPushGroup *g);

/* ------------------------------------------------------------------------
 * The layer on a client (client.c)
 * ------------------------------------------------------------------------ */

/* The layer's part of client 'c' from its options (push_window, flags),
 * with the client's shared push window. 0 or -1 (out of memory). */
int psi_batches_init(psClient *c, const psOptions *o);
/* Forget every user attached to 'c' and free the shared window. */
void psi_batches_free(psClient *c);
/* 1 when no push of any user is in flight on 'c' (psDrain; pulls in flight
 * are their waits'). */
int psi_batches_idle(psClient *c, void *arg);

#endif /* PS_BATCH_H */
