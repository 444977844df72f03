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

typedef struct streamWork {
    const trainOpts *o;
    jobConfig cfg;
    ps_ctr_model m;
    int have_model;
    swModel own;
    char me[128], base[300], cid[300], skey[256], jkey[512], jpre[512], sauc_pre[160];
    uint64_t own_seq;           /* the last seq of this consumer's own batches */
    ps_sparse_reader *lp;       /* the line parser */
    ps_sparse_batch b;
    ps_ctr_unique u;
    float *rows, *grows;
    size_t cap;
    int ndense;
    float *dense[2 * (PS_CTR_MAX_HIDDEN + 1)];
    float *dgrad[2 * (PS_CTR_MAX_HIDDEN + 1)];
    /* The batch being built: its entry ids, space separated, and counts. */
    char *ids;
    size_t idlen, idcap;
    int nent, nbad;
    char first[48];
    /* Totals of this run. */
    long long trained, malformed, batches, fenced, replays, replayed, claimed, dups;
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
    int want;                   /* events the next batch may take (prefetch) */
    redisReply *pre;            /* a lease step's reply: the next batch's first entries */
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
} streamWork;

/* One lease step in flight (sw_lease_send). */
typedef struct leaseStep {
    psAsync *tx, *wait;
    int read;                   /* a transaction with a read (else drops only) */
    size_t ndrop;               /* bytes of w->drop it sent */
    uint64_t fresh;             /* the seq a new batch gets */
    int fenced, rebuild;        /* sw_lease_wait's findings */
} leaseStep;

/* stream_batch.c */
int sw_model_open(struct streamWork *w, psClient *c, swModel *sm, int create);
void sw_model_free(swModel *sm);
void sw_batch_reset(struct streamWork *w);
int sw_take_entry(struct streamWork *w, const redisReply *e);
int sw_read_batch(struct streamWork *w, int want, int block_ms);
int sw_read_ranges(struct streamWork *w, const char *line);
int sw_train_batch(struct streamWork *w, swModel *sm, int own, const char *cid, uint64_t seq);
int sw_replay_batch(struct streamWork *w, const char *cid, uint64_t seq);
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
void sw_record_scores(struct streamWork *w);
int sw_flush_hist(struct streamWork *w);
void sw_progress(struct streamWork *w, int final);

#endif
