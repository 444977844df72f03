/* stream_work.h -- one `ps-train stream` worker's state and the functions
 * its files share (internal to train/):
 *   stream.c          setup, claims and the worker's loop (the design notes)
 *   stream_batch.c    the model's pieces, entries into a batch, training one
 *   stream_journal.c  the lease step (journal records + XREADGROUP NOACK, WAIT)
 *   stream_auc.c      progressive validation: window, histograms, global AUC */
#ifndef PS_TRAIN_STREAM_WORK_H
#define PS_TRAIN_STREAM_WORK_H

#include <stdint.h>

#include "redis-ps/ps.h"
#include "sparse.h"
#include "stream.h"

/* The pieces of one worker's model: the job's table and dense tensors on
 * one client (the worker's own, or a replay's under another push ID). */
typedef struct swModel {
    psClient *c;
    psEmbed *e;
    psModel *dm;                /* the job's dense tensors */
    psModel *cm;                /* stream_events: [trained, malformed] */
} swModel;

/* A kept client of replays under another consumer's push identity. */
#define SW_REPLAY_CLIENTS 4
typedef struct swReplay {
    char cid[300];
    swModel sm;
} swReplay;

/* Where a worker's wall time goes, per phase (the STREAM line's t_* fields,
 * ms): the names, in order. */
enum {
    SWP_CLAIM,                  /* claim scripts and the replays they start */
    SWP_LEASE,                  /* lease steps waited for in full (a batch not filled ahead) */
    SWP_IDLE,                   /* XREAD BLOCK: the stream had nothing new */
    SWP_PARSE,                  /* entries into the batch (lines parsed) */
    SWP_IDS,                    /* a batch's distinct ids (before its pulls) */
    SWP_PULL,                   /* pulls: sent, and waited for */
    SWP_DRAIN,                  /* waiting for the batch before's push acknowledgements */
    SWP_AHEAD,                  /* waiting for the lease step sent ahead */
    SWP_GRAD,                   /* forward, scores and the gradient */
    SWP_PUSH,                   /* pushes sent */
    SWP_REPORT,                 /* progress lines, AUC histograms */
    SWP_N
};
#define SW_PHASE_NAMES \
    {"claim", "lease", "idle", "parse", "ids", "pull", "drain", "ahead", "grad", "push", "report"}

/* One lease step in flight (sw_lease_send). */
typedef struct leaseStep {
    psAsync *tx;
    int wait;                   /* tx ends in "WAIT --wait" (psTransactionWaitAsync) */
    int read;                   /* a transaction with a read (else drops only) */
    size_t ndrop;               /* bytes of w->drop it sent */
    uint64_t fresh;             /* the seq a new batch gets */
    int fenced, rebuild;        /* sw_lease_wait's findings */
} leaseStep;

/* One batch: leased entries parsed, its distinct ids and pulled rows. A
 * worker has two: the batch it trains and the one read ahead of it (whose
 * pulls fly while the first one's gradient is computed, --overlap 1). */
typedef struct swBatch {
    ps_sparse_batch b;
    ps_ctr_unique u;
    float *rows;                /* u.n x dim: its pulled rows */
    size_t cap;
    int nent, nbad;             /* entries taken (malformed ones among them) */
    char first[48];             /* its first entry's id (messages) */
    char cid[300];              /* its push identity, once closed */
    uint64_t seq;
    int want;                   /* the events it is filled to */
    int closed;                 /* full (or --batch-ms passed): trained next */
    int inflight;               /* its pulls were sent, not waited for */
} swBatch;

typedef struct streamWork {
    const trainOpts *o;
    jobConfig cfg;
    ps_ctr_model m;
    int have_model;
    swModel own;
    char me[128], base[300], cid[300], skey[256], jkey[512], jpre[512], sauc_pre[160];
    uint64_t own_seq;           /* the last seq of this consumer's own batches */
    ps_sparse_reader *lp;       /* the line parser */
    swBatch bt[2];
    swBatch *cur, *nxt;         /* the batch trained next; the one read ahead */
    float *grows;               /* the gradient rows (of the batch trained) */
    size_t gcap;
    int ndense;
    float *dense[2 * (PS_CTR_MAX_HIDDEN + 1)];
    float *dgrad[2 * (PS_CTR_MAX_HIDDEN + 1)];
    float *dback[2 * (PS_CTR_MAX_HIDDEN + 1)]; /* the dense pulls' targets */
    size_t dlen[2 * (PS_CTR_MAX_HIDDEN + 1)];
    /* Totals of this run. */
    long long trained, malformed, batches, fenced, replays, replayed, claimed;
    long long piped;            /* batches pulled and leased ahead (the pipeline) */
    double t0, last_print, last_event, last_claim;
    long long last_trained;
    /* Progressive validation: the window ring and the histogram to flush. */
    double *wp;
    unsigned char *wy;
    long long wn;               /* events ever put in the ring */
    double wloss;               /* logloss summed over the ring */
    double *wl;
    long long *hpos, *hneg;
    int hdirty;
    runLog *log;
    int tty, quiet;
    leaseStep ahead;            /* the lease step in flight that reads w->nxt's entries */
    int ahead_on;
    int ahead_want;             /* the events it asked for */
    /* The batch being leased (nseq 0: none yet): its push identity and the
     * ranges of it this process took in; the batches the journal held at
     * the last lease step ("cid seq" lines); the batches acknowledged, to
     * drop at the next one. */
    char ncid[300];
    uint64_t nseq;
    int nranges;
    char *held;
    char *drop;
    size_t droplen, dropcap;
    char *rebuild;              /* the journal's line of a batch to read again */
    char lastE[48];             /* the group's last-delivered-id at the last lease */
    swReplay replay[SW_REPLAY_CLIENTS];
    int nreplay;
    char tcid[300];             /* the own batch pushed last, until acknowledged */
    uint64_t tseq;
    int jshort;                 /* the last journal WAIT came back short */
    long long jshort_total;     /* journal WAITs answered short */
    double jprobe;              /* degraded: when the journal WAITs again */
    double tp[SWP_N];           /* seconds spent per phase */
} streamWork;

/* Adds the time since *t to phase k and sets *t to now. */
void sw_phase(struct streamWork *w, int k, double *t);


/* stream_batch.c */
int sw_model_open(struct streamWork *w, psClient *c, swModel *sm, int create);
void sw_model_free(swModel *sm);
void sw_batch_reset(swBatch *x);
void sw_batch_free(swBatch *x);
int sw_take_entry(struct streamWork *w, swBatch *x, const redisReply *e);
int sw_read_batch(struct streamWork *w, swBatch *x, int block_ms);
int sw_read_ranges(struct streamWork *w, swBatch *x, const char *line);
int sw_lease_want(const struct streamWork *w, int filling);
double sw_claim_every(const struct streamWork *w);
int sw_claim_due(const struct streamWork *w);
int sw_train_batch(struct streamWork *w, swModel *sm, int own, swBatch *x);
int sw_replay_batch(struct streamWork *w, swBatch *x);
int sw_settle(struct streamWork *w);
void sw_replay_free(swReplay *rp);

/* stream_journal.c */
int sw_drop_add(struct streamWork *w, const char *cid, uint64_t seq);
/* What an ACL refusal 'err' of one of our scripts ('script', NULL: not a
 * script) refused, for the error line: " (refused: the script's XINFO
 * CONSUMERS, line 9; the role: docs/operations.md ...)", or "" when 'err' is
 * no refusal. Returns 'out'. */
const char *sw_refused(const char *script, const char *err, char *out, size_t len);
extern const char SwLeasePreLua[], SwLeasePostLua[];
int sw_lease_send(struct streamWork *w, int count, leaseStep *ls);
int sw_lease_wait(struct streamWork *w, leaseStep *ls, redisReply **entries);
int sw_lease(struct streamWork *w, int count, leaseStep *ls, redisReply **entries);
const redisReply *sw_lease_entries(const redisReply *r);
int sw_holds(const struct streamWork *w, const char *cid, uint64_t seq);

/* stream_auc.c */
void sw_record_scores(struct streamWork *w, const swBatch *x);
int sw_flush_hist(struct streamWork *w);
void sw_progress(struct streamWork *w, int final);

#endif
