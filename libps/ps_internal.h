/* ps_internal.h -- private structures of libps shared by its layers. Not
 * installed. From the bottom up (each file calls only files below it;
 * docs/design.md "libps layers" has the picture):
 *   slot.c, resid.c, wire.c, resp.c   pure: hash slots, error-feedback
 *              residuals, RESP encoders of the PS commands (wire.h), the
 *              engine's RESP2 reply framer (resp.h)
 *   conn.c     errors, connections, nodes and the hash-slot map (topology)
 *   proto.c    common/protocol.h on libps's side: reply classification,
 *              public wire formats -> codec formats
 *   engine.c   the request engine: routing, redirects, retries, WAIT,
 *              pipelining; completes requests through their callbacks and
 *              knows nothing of models
 *   durable.c  durability: degraded nodes (short WAITs, replica probes,
 *              the policies), lost-state events, event announcements
 *   raw.c      raw requests: a command whose reply is kept (raw.h)
 *   batch.c    the batch layer (batch.h): users (models, tables) attached
 *              to a client; batch_pull.c keyed pulls; batch_push.c push
 *              groups with their replies, resends and WAITs; batch_int.h
 *              what they share (reply classes, id sorting)
 *   model.c, model_io.c   models: tensors partitioned onto keys (model.h)
 *   embed.c    sharded embedding tables: ids onto shard keys
 *   info.c     PS.INFO (psInfo, psInfoParse)
 *   client.c   psConnect, generic commands, psDrain, psClientFree */
#ifndef PS_INTERNAL_H
#define PS_INTERNAL_H

#include "codec.h"
#include "redis-ps/ps.h"
#include "resp.h"
#include "slot.h"

#define PS_MAX_REDIRECTS 16     /* MOVED/ASK hops of one request */
#define PS_READ_CHUNK (256 * 1024)      /* min free room per read() of replies */
#define PS_SOCKET_BUFFER (4 * 1024 * 1024) /* SO_RCVBUF / SO_SNDBUF of node connections */
#define PS_DIRECT_WRITE_MIN (16 * 1024) /* a request blob this big skips hiredis's buffer */

/* ------------------------------------------------------------------------
 * Requests: one encoded command that must eventually get a final reply. A
 * request is (re)sent to the node owning its hash slot; redirects and
 * connection errors put it back on the client's retry list. The submitter
 * owns the request and every buffer it points to until 'done' was called.
 * ------------------------------------------------------------------------ */

#define PSS_IDLE 0      /* not submitted */
#define PSS_FLIGHT 1    /* written (or buffered) on a node, reply pending */
#define PSS_RETRY 2     /* on the retry list */
#define PSS_DONE 3      /* final reply handed to 'done' */

#define PSI_DONE 0      /* 'done' took the reply: the request is finished */
#define PSI_RESEND 1    /* 'done' re-encoded the request: send it again */

typedef struct psReq psReq;

/* Called once with the final reply of 'r' (the callee owns 'reply'), or
 * with NULL when the request failed (the error is recorded on 'c' unless an
 * earlier one was; r->failed is set). May return PSI_RESEND (only with a
 * reply) after changing the command: the engine sends it again, counted as
 * a redirect hop. */
typedef int psReqDoneFn(psClient *c, psReq *r, redisReply *reply);

/* Offered, before the reply of 'r' is parsed, each bulk string 'data' of
 * 'len' bytes that is element 'idx' of a top-level array of 'n' scalars,
 * still in the engine's read buffer. Returns 1 when it used the bytes (the
 * reply then holds an empty string there), 0 to leave them in the reply. */
typedef int psReqSinkFn(psClient *c, psReq *r, int idx, int n, const char *data, size_t len);

struct psReq {
    /* Set by the submitter (psi_req_init, then the command). The command
     * on the wire is cmd, then blob, then tail (blob and tail optional). */
    const char *key;            /* routing key (not owned), NULL = any node */
    size_t keylen;
    int slot;                   /* hash slot of the key, -1 = any node */
    const char *cmd;
    size_t cmdlen;
    const unsigned char *blob;  /* a large argument, sent without a copy */
    size_t bloblen;
    const char *tail;
    size_t taillen;
    psReqDoneFn *done;
    psReqSinkFn *sink;          /* NULL: none */
    void *udata;                /* the submitter's */
    /* Engine state. */
    int state;                  /* PSS_* */
    int attempts;               /* resends after errors (max_retries, retry_timeout_ms) */
    int64_t first_err_ms;       /* monotonic ms of the first error since submission */
    int redirects;              /* MOVED/ASK hops (bounded by PS_MAX_REDIRECTS) */
    int ask_node;               /* >= 0: next dispatch goes there after ASKING */
    int failed;                 /* finished without a reply */
    int node;                   /* node of the last dispatch, -1 none */
    /* A transaction (psTransactionAsync): the replies before the last one
     * (MULTI's +OK, each +QUEUED) are skipped; the first error among them
     * is handed over instead of the last reply (EXECABORT), so a redirect
     * or retry resends the whole transaction. */
    int skip;                   /* set by the submitter */
    int skip_left;              /* engine: replies still to skip on this dispatch */
    redisReply *skip_err;       /* engine: the first skipped error */
    /* 'trail' (set by the submitter, with skip): the last skipped reply is
     * the request's own (EXEC's) and the final reply trails it (a WAIT sent
     * right after EXEC): 'done' gets the former, and the latter is left in
     * 'trail_reply' (owned by the request until taken), or both are
     * dropped when the former is an error (a redirect resends all). */
    int trail;
    redisReply *held;           /* engine: the reply the trailing one follows */
    redisReply *trail_reply;
};

/* Called with the reply of a "WAIT n ms" queued by psi_submit_wait() on
 * node 'node' (the callee owns 'reply'), or with NULL when the connection
 * died before it answered: the requests it covered were applied but maybe
 * not replicated, and the callee may resend them (psi_resend) before the
 * engine resends what was queued after the WAIT. */
typedef void psWaitFn(psClient *c, void *udata, int node, redisReply *reply);

/* Queue entry of a node: what the next reply on that connection answers. */
#define PSQ_REQ 0
#define PSQ_ASKING 1
#define PSQ_WAIT 2

typedef struct psQent {
    int kind;
    psReq *r;                   /* PSQ_REQ */
    psWaitFn *wait_done;        /* PSQ_WAIT */
    void *wait_udata;
} psQent;

/* A node's requests and replies in flight (engine.c). */
typedef struct psNodeIO {
    psQent *q;                  /* ring of pending replies */
    size_t qhead, qlen, qcap;
    char *in;                   /* bytes read, not yet handled */
    size_t inlen, incap;
    psScan scan;
    unsigned gen;               /* bumped when the connection is dropped */
} psNodeIO;

/* A node's durability (durable.c). */
typedef struct psNodeDur {
    int degraded;               /* announced as unable to satisfy wait_replicas */
    int probing;                /* an INFO replication probe is queued */
    int64_t probe_at;           /* monotonic ms of the next probe (degrade policy) */
    int probe_failed;           /* a probe failed (announced once until restored) */
} psNodeDur;

/* A node: its address and connection (conn.c), and each layer's part. */
typedef struct psNode {
    char *host;
    int port;
    redisContext *ctx;          /* NULL when not connected */
    int ever_connected;
    psNodeIO io;
    psNodeDur dur;
} psNode;

/* The private state of a client: one struct per layer, each written by its
 * own file (the other layers read it, downwards only). */

/* Topology and connections (conn.c). */
typedef struct psTopo {
    int connect_timeout_ms;
    int command_timeout_ms;     /* socket timeout of every node connection; -1 none */
    char *user, *password;
    char **seeds;               /* "host:port" strings */
    int nseeds;
    psNode *nodes;
    int nnodes, nodecap;
    int16_t slots[PS_CLUSTER_SLOTS];   /* node index per hash slot, -1 unknown */
    int need_refresh;
} psTopo;

/* The request engine (engine.c). */
typedef struct psEngine {
    int max_retries, retry_timeout_ms, backoff_ms;
    psReq **retry;              /* FIFO of requests to (re)dispatch */
    size_t nretry, retrycap;
    int backoff_level;          /* > 0: sleep before the next retry round */
    psStop *stop;               /* psSetStop(): bounded shutdown, or NULL */
} psEngine;

/* Durability options (durable.c; per node state in psNode). */
typedef struct psDurable {
    int wait_replicas, wait_timeout_ms;
    int durability_policy, probe_ms, lost_state_policy;
    psEventFn *on_event;
    void *event_udata;
} psDurable;

struct psBatches;               /* the batch layer's (batch.c) */

typedef struct psClientPriv {
    psTopo topo;
    psEngine eng;
    psDurable dur;
    struct psBatches *batch;    /* pushes, pulls and their users (batch.c) */
    size_t partition_bytes;     /* models' default partition size (model.c) */
} psClientPriv;

/* ------------------------------------------------------------------------
 * conn.c: errors, connections, topology
 * ------------------------------------------------------------------------ */

void psi_set_error(psClient *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Reset the error before a public call. */
void psi_clear_error(psClient *c);
/* The class of a reply (reply.c): PS_PROTO_ERR_NONE for any reply but an
 * error, else the PS_PROTO_ERRORS row (common/protocol.h) its text matches.
 * Every reply libps tells apart is told apart here (an int: the values are
 * protocol.h's ps_proto_error). */
int psi_reply_error(const redisReply *r);
/* The codec format of public wire format 'w' (proto.c): 0, or -1 when 'w'
 * is none. */
int psi_format(psWireFormat w, ps_format *out);
int64_t psi_mono_ms(void);
/* Split "host:port" into a malloc'ed host and a port. 0 or -1. */
int psi_parse_addr(const char *addr, size_t len, char **host, int *port);
/* The topology part of 'c' from its options (timeouts, credentials), with
 * every slot unknown. */
void psi_topology_config(psClient *c, const psOptions *o);
/* Connect to the seeds 'addrs' and load the slot map. */
int psi_topology_init(psClient *c, const char *addrs);
void psi_topology_free(psClient *c);
/* Index of node host:port, added (not connected) when unknown; -1 on OOM. */
int psi_node_find_or_add(psClient *c, const char *host, size_t hlen, int port);
/* Make sure node 'i' has a live context. 0, or -1 with a message in 'err'. */
int psi_node_ensure(psClient *c, int i, char *err, size_t errlen);
/* Reload the slot map (cluster) or find the master (several standalone
 * addresses). 0 or -1 with an error recorded. */
int psi_refresh(psClient *c);

/* ------------------------------------------------------------------------
 * engine.c
 * ------------------------------------------------------------------------ */

/* The engine part of 'c' from its options (retries, backoff). */
void psi_engine_config(psClient *c, const psOptions *o);
/* Zero 'r' and route it by 'key' (NULL: any node). */
void psi_req_init(psReq *r, const char *key, size_t keylen);
/* Submit 'r' (retries of older requests go first, keeping seq order). */
void psi_submit(psClient *c, psReq *r);
/* Put 'r', finished with a reply or in flight on a node that failed, back
 * on the retry list as after an error (backoff, counted in retries). */
void psi_resend(psClient *c, psReq *r, const char *why);
/* Queue "WAIT replicas timeout_ms" on node 'node'; 'done' gets its reply.
 * Returns 0, or -1 when the node has no connection (nothing queued). */
int psi_submit_wait(psClient *c, int node, int replicas, int timeout_ms, psWaitFn *done,
                    void *udata);
/* Queue "INFO replication" on node 'node' like psi_submit_wait. */
int psi_submit_probe(psClient *c, int node, psWaitFn *done, void *udata);
/* Write buffered commands (after pending retries), read ready replies. */
void psi_flush(psClient *c);
/* Run the engine until done(c, arg) is true or nothing is pending.
 * Returns 0 when done() became true, -1 otherwise. */
int psi_run(psClient *c, int (*done)(psClient *, void *), void *arg);
/* Free the engine's per-node buffers and the retry list. */
void psi_engine_free(psClient *c);

/* ------------------------------------------------------------------------
 * durable.c
 * ------------------------------------------------------------------------ */

/* The durability part of 'c' from its options. */
void psi_durable_config(psClient *c, const psOptions *o);
/* psOptions.wait_replicas (0: pushes are not WAITed for). */
int psi_wait_replicas(const psClient *c);
/* 1 under PS_LOST_STATE_CONTINUE, 0 under PS_LOST_STATE_STOP. */
int psi_lost_state_continues(const psClient *c);
/* Queue "WAIT wait_replicas wait_timeout_ms" on 'node' (psi_submit_wait). */
int psi_submit_durable_wait(psClient *c, int node, psWaitFn *done, void *udata);
/* Announce event 'ev' (PS_EVENT_*) about node 'node' (-1: none) with a
 * printf-style message: to the on_event callback, else to stderr. */
void psi_event(psClient *c, int ev, int node, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* "host:port" of node 'node' in 'buf' ("?" when out of range). Returns buf. */
const char *psi_node_name(const psClient *c, int node, char *buf, size_t len);
/* A WAIT on 'node' answered 'got' replicas (< wait_replicas): mark the node
 * degraded (announced once) per the policy. For PS_DURABILITY_FAIL records
 * the error on 'c'. Returns the policy (PS_DURABILITY_*). */
int psi_wait_short(psClient *c, int node, long long got);
/* A WAIT on 'node' answered enough replicas: a degraded node is restored. */
void psi_wait_full(psClient *c, int node);
/* Whether the pushes just sent to 'node' should be WAITed for: 0 when the
 * node is degraded under PS_DURABILITY_DEGRADE (a probe is queued when one
 * is due), else 1. */
int psi_wait_wanted(psClient *c, int node);
/* A lost-state event on 'key' served by 'node': 'acked' is the version this
 * client saw acknowledged, 'now' the server's (has_now 0: the key is gone).
 * Announces and counts it, and writes the error message into 'msg'. */
void psi_lost_state(psClient *c, int node, const char *key, uint64_t acked, int has_now,
                    uint64_t now, char *msg, size_t msglen);

/* A push that sent VERSION 'sent' to 'key' on 'node' was answered
 * 'errstr' = "ERR VERSION v is newer than the tensor's version now": the
 * server lost pushes this client saw acknowledged ('acked' when
 * 'has_acked'). Announces the lost-state event (message in 'msg') and
 * returns the server's version now. */
uint64_t psi_push_rollback(psClient *c, int node, const char *key, const char *errstr,
                           uint64_t sent, int has_acked, uint64_t acked, char *msg,
                           size_t msglen);

/* ring.c: parses an origins table ([[name, hwm, applied], ...], at most
 * PS_RING_MAX_ORIGINS rows) into 'rows' / '*n'. 0, or -1 when malformed. */
int psi_ring_origins(const redisReply *v, psRingOrigin *rows, size_t *n);

#endif /* PS_INTERNAL_H */
