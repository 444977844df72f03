/* ps_topology.h -- libps, the calls of the tree relay and of the ring agent (ps-relay).
 *
 * Part of the libps API: <redis-ps/ps.h> includes this file, so a program
 * includes ps.h alone (including this file first works too). */
#ifndef PS_TOPOLOGY_H
#define PS_TOPOLOGY_H

#include "ps.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------
 * Relay: a relay's local ACCUM tensors and its upstream pushes (ps-relay,
 * docs/design.md "Tree topology"). One item per key; each call sends one
 * command per item, all pipelined (one round trip per node), and fills the
 * item's outputs. A call returns PS_OK when every item got a reply (check
 * each item's 'status'), or PS_ERR when some got none (c->err/errstr say
 * why; those items have status PS_ERR_IO or the like and err empty).
 * ------------------------------------------------------------------------ */

typedef struct psAccumItem {
    const char *key;          /* in: NUL-terminated */
    size_t n;                 /* in: elements of the tensor (replies are checked against it) */
    /* psAccumTake: the next unacknowledged part of the pending take, or short. */
    uint64_t seq;             /* out (take); in (ack, forward): the part's seq */
    uint64_t count;           /* out (take): gradients this part carries; 0: short */
    uint64_t total;           /* out (take): gradients of the whole take */
    uint64_t parts_left;      /* out (take): parts not acknowledged, this one included */
    uint64_t summed;          /* out (take, short): pushes summed so far */
    const float *sum;         /* out (take): the whole pending sum, n floats, valid until
                                 psAccumItemsRelease() */
    /* psAccumForward (upstream PS.PUSHGRAD), psAccumMirror (local PS.MIRROR),
     * psAccumPull (upstream PS.PULL). */
    const float *data;        /* in (forward, mirror): n floats */
    float *dst;               /* in (pull): room for n floats */
    uint64_t version;         /* in (mirror); out (forward, mirror, pull): the version
                                 the server answered */
    int64_t acked;            /* out (ack): 1 acknowledged, 0 not the next part (a repeat) */
    int status;               /* out: PS_OK, PS_ERR_SERVER (err has the server's error),
                                 PS_ERR_PROTOCOL (unexpected reply), or another PS_ERR_*
                                 (no reply; see c->errstr) */
    char err[200];            /* out: the error text when status != PS_OK */
    void *priv_;              /* private: the reply kept for 'sum' */
} psAccumItem;

/* Options of psAccumTake(), the arguments of PS.TAKE. */
typedef struct psAccumTakeOpts {
    uint64_t mincount;        /* >= 1: a new take needs this many pushes summed */
    uint64_t seqfloor;        /* the first seq of a new take is at least this */
    uint64_t maxround;        /* split a take into parts of at most this many (0: never) */
    int64_t maxbacklog;       /* set the tensor's MAXBACKLOG (< 0: leave it) */
} psAccumTakeOpts;

/* PS.CREATE key SHAPE dims OPTIM ACCUM NX on 'c'. PS_OK (created or there
 * already), or PS_ERR (c->errstr: the server's error or the I/O error). */
int psAccumCreate(psClient *c, const char *key, int ndim, const uint64_t *dims);

/* PS.TAKE for each item. A short take sets count 0 and summed. */
int psAccumTake(psClient *c, psAccumItem *items, size_t n, const psAccumTakeOpts *o);

/* PS.TAKEWAIT key MINCOUNT mincount TIMEOUT timeout_ms (>= 1): blocks on the
 * server until a take with that MINCOUNT would not be short. Returns 1
 * (ready), 0 (timed out), or PS_ERR (c->errstr). */
int psAccumWait(psClient *c, const char *key, uint64_t mincount, int timeout_ms);

/* PS.TAKEACK key seq for each item (acked 1 or 0). */
int psAccumAck(psClient *c, psAccumItem *items, size_t n);

/* PS.PUSHGRAD key data ID <c->client_id> seq (F32) for each item: the
 * upstream push of a part, applied once per seq. */
int psAccumForward(psClient *c, psAccumItem *items, size_t n);

/* PS.PULL key for each item into dst (version set). */
int psAccumPull(psClient *c, psAccumItem *items, size_t n);

/* PS.MIRROR key version data for each item (version: the local one after). */
int psAccumMirror(psClient *c, psAccumItem *items, size_t n);

/* Frees what the items keep from their last call (the take's sum). */
void psAccumItemsRelease(psAccumItem *items, size_t n);

/* ------------------------------------------------------------------------
 * Ring: groups that train against their own server and exchange their
 * accumulated parameter change around a ring (ps-relay --ring; docs/design.md
 * "Ring topology"). One key per call; each call is one command routed by
 * the key, with the usual retries. Replies are checked against the sizes
 * given (a reply of another shape is PS_ERR_PROTOCOL).
 * ------------------------------------------------------------------------ */

/* PS.RING key STATE, read atomically: what a joining group copies. */
typedef struct psRingSnapshot {
    float *values;            /* malloc'd (psRingStateFree), n floats: a tracked tensor's
                                 base (its values minus the group's own change not yet
                                 taken), an untracked one's values */
    size_t n;
    uint64_t version;
    char origin[PS_RING_ORIGIN_MAX + 1]; /* "" when the tensor is not tracked */
    size_t norigins;          /* the marks: first the group's own origin at its take_seq
                                 (applied 0), then every origin it applied deltas of */
    psRingOrigin origins[PS_RING_MAX_ORIGINS];
} psRingSnapshot;

/* A delta: this group's own take (psDeltaTake) or the oldest entry of the
 * forward queue (psDeltaFwd). idx/vals stay valid until psDeltaRelease(). */
typedef struct psDelta {
    char origin[PS_RING_ORIGIN_MAX + 1]; /* fwd: whose delta; take: "" */
    uint64_t seq;
    uint64_t count;           /* elements (>= 1) */
    const uint32_t *idx;      /* ascending element indices */
    const float *vals;        /* their changes */
    uint64_t hops;            /* fwd: hops left */
    uint64_t accumulated;     /* take: nonzero elements still accumulated (a table: rows) */
    /* A table's delta (psDeltaTakeRows, psDeltaFwdRows): 'count' rows, their
     * ascending ids, and 'vals' count x dim floats (elements not sent: 0);
     * 'idx' NULL. A tensor's: ids NULL, dim 0. */
    const uint64_t *ids;
    uint32_t dim;
    void *priv_;
} psDelta;

/* PS.RING key TRACK origin [MAXQUEUE maxqueue] [MAXLAG maxlag] (each left
 * out when < 0). Returns 1 (turned on), 0 (already on with this origin;
 * the options updated) or PS_ERR. */
int psRingTrack(psClient *c, const char *key, const char *origin, int64_t maxqueue,
                int64_t maxlag);

/* PS.RING key UNTRACK: the group leaves the ring for good (its ring state
 * dropped, values kept). 1 (dropped), 0 (was not tracked) or PS_ERR. */
int psRingUntrack(psClient *c, const char *key);

/* PS.RING key STATE into *out (free with psRingStateFree). 'n' > 0: the
 * values must have n elements; 'n' 0 also takes a table's answer (no copy:
 * out->n 0, its marks only). PS_OK or PS_ERR. */
int psRingState(psClient *c, const char *key, size_t n, psRingSnapshot *out);
void psRingStateFree(psRingSnapshot *s);

/* PS.RING key JOIN origin values [FROM name hwm]... [KEEPOWN] (the 'nfrom'
 * rows of 'from'; KEEPOWN when 'keepown': the group's own change not yet
 * taken, and a pending take nobody has, stay its own on top of 'values').
 * PS_OK or PS_ERR. */
int psRingJoin(psClient *c, const char *key, const char *origin, const float *values, size_t n,
               const psRingOrigin *from, size_t nfrom, int keepown);

/* A table's JOIN (docs/commands.md "Ring commands"): a paged copy of a
 * neighbour's base view. One page of PS.RING key ROWS cursor COUNT count
 * (free with psRingPageFree): 'rows' ids ascending, rows x dim floats. */
typedef struct psRingPage {
    uint64_t next;  /* the next cursor; 0: the scan is complete */
    size_t rows;
    uint64_t *ids;  /* malloc'd */
    float *vals;    /* malloc'd */
} psRingPage;
int psRingRows(psClient *c, const char *key, uint32_t dim, uint64_t cursor, uint64_t count,
               psRingPage *out);
void psRingPageFree(psRingPage *p);
/* PS.RING key JOINBEGIN origin [FROM name hwm]... (the table's rows are
 * dropped; a join in progress until psRingJoinEnd), JOINROWS page ids
 * values (page 0, 1, ...), JOINEND pages rows. PS_OK or PS_ERR. */
int psRingJoinBegin(psClient *c, const char *key, const char *origin, const psRingOrigin *from,
                    size_t nfrom);
int psRingJoinRows(psClient *c, const char *key, uint64_t page, const uint64_t *ids,
                   const float *vals, size_t rows, uint32_t dim);
int psRingJoinEnd(psClient *c, const char *key, uint64_t pages, uint64_t rows);

/* (A psDelta must be zeroed before its first use: each call releases what
 * it held.)
 * PS.DELTATAKE key [SEQFLOOR s] [THRESHOLD r] [MAXELEMS m] (each left out
 * when 0) on a tensor of 'n' elements. Returns 1 with *out the pending take
 * (a new one, or the one not yet acknowledged), 0 when nothing is
 * significant, or PS_ERR. */
int psDeltaTake(psClient *c, const char *key, size_t n, uint64_t seqfloor, double threshold,
                uint64_t maxelems, psDelta *out);

/* PS.DELTAACK key seq: 1 (the pending take dropped), 0 (not pending), PS_ERR. */
int psDeltaAck(psClient *c, const char *key, uint64_t seq);

/* PS.APPLYDELTA key ID origin seq idx vals [HOPS hops] (hops < 0: left
 * out): 1 applied, 0 already applied here or this group's own, PS_ERR
 * (a full forward queue answers BACKLOG, which is retried within the
 * client's retry budget). */
int psDeltaApply(psClient *c, const char *key, const char *origin, uint64_t seq,
                 const uint32_t *idx, const float *vals, size_t count, int64_t hops);

/* The same with PREV prev (0 < prev < seq; 0: left out): the seq of the
 * origin's delta before this one. A server that lacks it (its mark of the
 * origin is below prev) answers GAP (PS_ERR, class PS_PROTO_ERR_GAP) and
 * applies nothing: that group must copy the ring again (PS.RING JOIN). */
int psDeltaApplyPrev(psClient *c, const char *key, const char *origin, uint64_t seq,
                     uint64_t prev, const uint32_t *idx, const float *vals, size_t count,
                     int64_t hops);

/* PS.DELTAFWD key on a tensor of 'n' elements: 1 with *out the oldest
 * forward-queue entry, 0 when the queue is empty, PS_ERR. */
int psDeltaFwd(psClient *c, const char *key, size_t n, psDelta *out);

/* PS.DELTAFWDACK key origin seq: 1 (popped), 0 (not the oldest), PS_ERR. */
int psDeltaFwdAck(psClient *c, const char *key, const char *origin, uint64_t seq);

/* The same three on a ring-tracked embedding table of 'dim' floats per row
 * (docs/commands.md "Ring commands"): a delta is rows, ids ascending.
 * psDeltaTakeRows: 'maxrows' bounds the rows (MAXELEMS; 0: none). */
int psDeltaTakeRows(psClient *c, const char *key, uint32_t dim, uint64_t seqfloor,
                    double threshold, uint64_t maxrows, psDelta *out);
int psDeltaApplyRows(psClient *c, const char *key, const char *origin, uint64_t seq,
                     uint64_t prev, const uint64_t *ids, const float *vals, size_t rows,
                     uint32_t dim, int64_t hops);
int psDeltaFwdRows(psClient *c, const char *key, uint32_t dim, psDelta *out);

/* Frees what a psDelta keeps. Zeroed or released deltas are fine. */
void psDeltaRelease(psDelta *d);

/* Pipelined ring commands: what an agent sends to another group in one
 * round (its takes and forward entries, PS.INFO of the keys it waits on),
 * sent in one go by psRingSend and answered by psRingWait, so a batch costs
 * one round trip however many keys it covers; batches on several clients
 * (groups) sent before any is waited for overlap. The server runs a batch's
 * commands in order, so a PS.INFO after a PS.APPLYDELTA of the same key
 * reads the applied mark. */
#define PS_RING_OP_APPLY 1    /* PS.APPLYDELTA key ID origin seq idx vals HOPS hops [PREV prev] */
#define PS_RING_OP_INFO 2     /* PS.INFO key into *info */

typedef struct psRingOp {
    int op;                   /* in: PS_RING_OP_* */
    const char *key;          /* in */
    /* APPLY: as psDeltaApplyPrev (hops < 0 and prev 0 are left out). */
    const char *origin;
    uint64_t seq, prev;
    const uint32_t *idx;      /* a tensor's element indices, or NULL for a table's rows: */
    const uint64_t *ids;      /* a table's ascending row ids (idx NULL), 'dim' floats each */
    uint32_t dim;
    const float *vals;        /* count (a table: count x dim) F32 */
    size_t count;
    int64_t hops;
    psKeyInfo *info;          /* INFO: out (zeroed when it failed) */
    int rc;                   /* out: APPLY 1 applied / 0 a repeat / PS_ERR; INFO PS_OK / PS_ERR */
    int status;               /* out: PS_OK, PS_ERR_SERVER (err has the server's error),
                                 PS_ERR_NOKEY (INFO: no such key), PS_ERR_PROTOCOL, PS_ERR_ARG,
                                 or another PS_ERR_* (no reply; see c->errstr) */
    char err[200];            /* out: the error text when status != PS_OK */
} psRingOp;

typedef struct psRingBatch psRingBatch;

/* Encodes and sends the 'n' ops (kept by the caller until psRingWait).
 * Returns the batch in flight, or NULL (c->err: out of memory; nothing sent). */
psRingBatch *psRingSend(psClient *c, psRingOp *ops, size_t n);

/* Without blocking: sends what is still buffered, reads the replies that
 * arrived, and returns 1 when every op of 'b' has its reply (psRingWait
 * then returns at once), else 0. Lets a caller with batches on several
 * clients see which group answered first. */
int psRingReady(psClient *c, psRingBatch *b);

/* Waits for every reply of 'b' (sent on 'c'), fills the ops and frees 'b'.
 * PS_OK when every op got a reply (check each op's status), PS_ERR when some
 * got none (c->errstr says why). */
int psRingWait(psClient *c, psRingBatch *b);


#ifdef __cplusplus
}
#endif

#endif /* PS_TOPOLOGY_H */
