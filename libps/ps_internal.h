/* ps_internal.h -- private structures of libps shared by ps.c (API, models)
 * and cluster.c (nodes, slot map, the request engine). Not installed. */
#ifndef PS_INTERNAL_H
#define PS_INTERNAL_H

#include "redis-ps/ps.h"
#include "codec.h"
#include "slot.h"
#include "shape.h"

#define PS_MAX_REDIRECTS 16     /* MOVED/ASK hops of one request */
#define PS_READ_CHUNK (256 * 1024)      /* max bytes per read() of replies */
#define PS_SOCKET_BUFFER (4 * 1024 * 1024) /* SO_RCVBUF / SO_SNDBUF of node connections */
#define PS_DIRECT_WRITE_MIN (16 * 1024) /* pushes with a blob this big skip hiredis's buffer */

/* ------------------------------------------------------------------------
 * Requests: one command that must eventually get a final reply. A request
 * is (re)dispatched to the node owning its slot; redirects and connection
 * errors put it back on the client's retry list.
 * ------------------------------------------------------------------------ */

#define PSR_RAW 0       /* preformatted command; the reply is kept for the caller */
#define PSR_PUSH 1      /* PS.PUSHGRAD of one partition (argv built at dispatch) */
#define PSR_PULL 2      /* PS.PULL of one partition */

#define PSS_IDLE 0      /* not submitted, or finished and reaped */
#define PSS_FLIGHT 1    /* written (or buffered) on a node, reply pending */
#define PSS_RETRY 2     /* on the retry list */
#define PSS_DONE 3      /* final reply handled */

struct psPushSlot;

typedef struct psReq {
    int kind;                   /* PSR_* */
    int state;                  /* PSS_* */
    int slot;                   /* hash slot of the key, -1 = any node */
    int attempts;               /* resends after errors (max_retries, retry_timeout_ms) */
    int64_t first_err_ms;       /* monotonic ms of the first error since submission */
    int acked;                  /* PSR_PUSH: answered with a version (in stats.pushes) */
    int redirects;              /* MOVED/ASK hops (bounded by PS_MAX_REDIRECTS) */
    int ask_node;               /* >= 0: next dispatch goes there after ASKING */
    int failed;                 /* finished without a usable reply */
    int node;                   /* node of the last dispatch, -1 none */
    const char *key;            /* routing key (not owned) */
    size_t keylen;
    /* PSR_RAW */
    char *cmd;                  /* RESP text from redisFormatCommandArgv (owned) */
    size_t cmdlen;
    redisReply *reply;          /* final reply, handed to the caller */
    /* PSR_PUSH / PSR_PULL */
    psModel *m;
    int t, p;                   /* tensor, partition */
    struct psPushSlot *ps;      /* owning push slot (PSR_PUSH) */
    const unsigned char *blob;  /* encoded gradient inside ps->buf */
    size_t bloblen;
    size_t direct;              /* PSR_PULL: bytes decoded straight into the destination */
    uint64_t version;           /* VERSION argument */
    int has_version;
    uint64_t seq;               /* ID seq, fixed at first send */
    float scale;
} psReq;

/* One model push in flight: the encoded blobs of all its partitions (kept
 * for resends) and one request per partition. Reused, never freed until
 * the client is. */
typedef struct psPushSlot {
    int in_use;
    int outstanding;            /* requests + WAITs not yet answered */
    psModel *m;
    unsigned char *buf;
    size_t bufcap;
    psReq *reqs;
    int nreqs, reqcap;
} psPushSlot;

/* Queue entry of a node: what the next reply on that connection answers. */
#define PSQ_REQ 0
#define PSQ_ASKING 1
#define PSQ_WAIT 2

typedef struct psQent {
    int kind;
    psReq *r;                   /* PSQ_REQ */
    psPushSlot *ps;             /* PSQ_WAIT */
} psQent;

typedef struct psNode {
    char *host;
    int port;
    redisContext *ctx;          /* NULL when not connected */
    int ever_connected;
    psQent *q;                  /* ring of pending replies */
    size_t qhead, qlen, qcap;
} psNode;

typedef struct psClientPriv {
    /* options, defaults resolved */
    int connect_timeout_ms, command_timeout_ms;
    char *user, *password;
    int max_retries, retry_timeout_ms, backoff_ms, push_window;
    int wait_replicas, wait_timeout_ms;
    size_t partition_bytes;
    int flags;
    uint64_t seq_base;          /* first seq of every key */
    /* topology */
    char **seeds;               /* "host:port" strings */
    int nseeds;
    psNode *nodes;
    int nnodes, nodecap;
    int16_t slots[PS_CLUSTER_SLOTS];   /* node index per slot, -1 unknown */
    int need_refresh;
    /* engine */
    psReq **retry;              /* FIFO of requests to (re)dispatch */
    size_t nretry, retrycap;
    int backoff_level;          /* > 0: sleep before the next retry round */
    psPushSlot *pslots;
    int npslots;
    int reading_node;           /* node whose replies are being parsed, -1 none */
    redisReplyObjectFunctions fns;      /* hiredis's reply builders, but createString */
    void *(*create_string)(const redisReadTask *, char *, size_t);   /* hiredis's */
} psClientPriv;

/* ------------------------------------------------------------------------
 * Models
 * ------------------------------------------------------------------------ */

typedef struct psPart {
    char *key;
    uint64_t first_row, nrows;
    size_t offset, elements;    /* in the tensor's flat array */
    uint64_t version;
    int has_version;
    uint64_t seq;               /* last seq used by a push of this partition */
    psReq pull;                 /* the partition's pull request */
} psPart;

typedef struct psTensor {
    char *name;
    int ndim;
    uint64_t dims[PS_MAX_DIMS];
    size_t elements, row_elems;
    int nparts;
    int first_part;             /* global partition index of part 0 */
    psPart *parts;
    float *resid;               /* error feedback (lossy push formats) */
} psTensor;

struct psModel {
    char *job;
    int ntensors, tcap;
    psTensor *tensors;
    size_t partition_bytes;     /* 0 = the client's */
    int laid_out;
    ps_format push_fmt;
    ps_format pull_fmt;         /* F32 (default), F16 or BF16 */
    double topk_ratio;
    size_t max_part_elems;
    float *scratch;             /* decode scratch (max_part_elems) */
    uint32_t *topk_scratch;
    float **pull_dst;           /* destination of the pull in progress (pull_dstv), or NULL */
    float **pull_dstv;          /* copy of the caller's array of destinations */
    int pull_pending;
    int pull_failed;            /* PS_ERR_* of the pull in flight's first failure, 0 none */
    char pull_errstr[128];
    uint64_t seq_base;
};

/* ------------------------------------------------------------------------
 * cluster.c
 * ------------------------------------------------------------------------ */

void psi_set_error(psClient *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int psi_topology_init(psClient *c, const char *addrs);
void psi_topology_free(psClient *c);
/* Submit 'r' (retries of older requests go first, keeping seq order). */
void psi_submit(psClient *c, psReq *r);
/* Queue "WAIT n ms" on 'node' for push slot 'ps'. */
void psi_submit_wait(psClient *c, int node, psPushSlot *ps);
/* Write buffered commands (after pending retries), read ready replies. */
void psi_flush(psClient *c);
/* Run the engine until done(c, arg) is true or nothing is pending.
 * Returns 0 when done() became true, -1 otherwise. */
int psi_run(psClient *c, int (*done)(psClient *, void *), void *arg);
/* Called by the engine with the final reply of a request (reply may be NULL
 * when the request failed; the callee owns 'reply'). Defined in ps.c. */
void psi_finish(psClient *c, psReq *r, redisReply *reply);
void psi_finish_wait(psClient *c, psPushSlot *ps, redisReply *reply);
/* Called by the reply parser with the data blob of pull 'r' while it is
 * still in the reader's buffer: decodes it into the pull's destination.
 * Returns 0 when it did (r->direct is set), -1 to keep the blob in the reply. */
int psi_pull_direct(psClient *c, psReq *r, const unsigned char *blob, size_t len);

#endif /* PS_INTERNAL_H */
