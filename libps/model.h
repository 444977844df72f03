/* model.h -- private structures of libps models (model.c: definition,
 * layout, create/delete; model_io.c: pulls, pushes, the push batches). The
 * request engine never sees these: model requests are psReq's whose
 * 'udata' points back here. Not installed. */
#ifndef PS_MODEL_H
#define PS_MODEL_H

#include "ps_internal.h"
#include "pushtrack.h"
#include "codec.h"
#include "shape.h"
#include "wire.h"

typedef struct psModel psModel;

/* One partition: a key holding rows [first_row, first_row + nrows). */
typedef struct psPart {
    char *key;
    size_t keylen;
    uint64_t first_row, nrows;
    size_t offset, elements;    /* in the tensor's flat array */
    psModel *m;                 /* back pointers for the pull callbacks */
    int t;
    uint64_t version;           /* seen by the latest pull reply */
    int has_version;
    uint64_t pulled_version;    /* of the last completed pull: what pushes send */
    int has_pulled;
    uint64_t seq;               /* last seq used by a push of this partition */
    uint64_t acked_version;     /* highest version seen acknowledged (push or pull reply) */
    int has_acked;
    psReq pull;                 /* the partition's pull request (udata: this) */
    char *pullcmd;              /* its encoded PS.PULL */
    size_t pullcap;
    size_t direct;              /* bytes of the pull reply decoded by the sink */
    uint64_t pull_min;          /* MINVERSION of the pull in flight (0: none) */
    int pull_timed_out;         /* that pull's MINVERSION wait answered nil */
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
    uint32_t *topk_scratch;     /* TOPK selection scratch (max_part_elems) */
    float **pull_dst;           /* destination of the pull in progress (pull_dstv), or NULL */
    float **pull_dstv;          /* copy of the caller's array of destinations */
    int pull_pending;           /* partition pulls not yet finished */
    int pull_failed;            /* PS_ERR_* of the pull in flight's first failure, 0 none */
    char pull_errstr[256];
    int pull_wait_ms;           /* TIMEOUT of the parts' MINVERSION waits (pull_min) */
    psClient *client;           /* the client its requests were last sent on, or NULL */
};

/* One partition push of a push batch: the PS.PUSHGRAD request, its
 * arguments (kept for resends: same seq) and its encoded head and tail. */
typedef struct psPushReq {
    psPushAck ack;              /* the request (udata: this) and its WAIT state; acked
                                   pushes are counted in stats.pushes */
    struct psPushBatch *b;
    psPart *part;
    psWirePush args;
    char *head;                 /* RESP before the blob */
    size_t headcap;
    char tail[PS_WIRE_PUSH_TAIL_MAX(96)];
} psPushReq;

/* One model push in flight: the encoded blobs of all its partitions (kept
 * for resends) and one request per partition. Reused, never freed until
 * the client is. */
typedef struct psPushBatch {
    psPushGroup g;              /* in use, requests + WAITs outstanding (pushtrack.h) */
    psModel *m;
    unsigned char *buf;
    size_t bufcap;
    psPushReq *reqs;
    int nreqs, reqcap;
} psPushBatch;

/* A command whose reply is kept for the caller (client.c). */
typedef struct psRawReq {
    psReq req;
    char *cmd;                  /* from redisFormatCommandArgv (owned) */
    redisReply *reply;          /* final reply, or NULL */
} psRawReq;

/* client.c: route raw request 'q' by 'key' and send 'cmd' ('len' bytes,
 * from redisFormatCommandArgv, owned by q from now on) */
void psi_raw_init(psRawReq *q, const char *key, char *cmd, size_t len);
/* Submit the 'n' requests 'qs' (cmd NULL: skipped) and wait for all. */
void psi_raw_run(psClient *c, psRawReq *qs, size_t n);
/* Free the command of 'q' (not the reply). */
void psi_raw_free(psRawReq *q);

/* model_io.c: wait for every request of 'm' (a pull in flight is abandoned)
 * and forget its client. */
void psi_model_detach(psModel *m);

#endif /* PS_MODEL_H */
