/* trainer.h -- the interface of a ps-train trainer, and the worker state
 * it trains in.
 *
 * `ps-train work` (work.c) is one loop for every model kind: take a task
 * from the job's stream (tasks.c), have the job's trainer train it, record
 * and XACK it, print progress (progress.c). What differs between kinds is
 * one trainer: a table of five functions over the worker state (workCtx),
 * whose own data hangs off w->state. A model kind's trainer is one file
 * (dense_trainer.c: the MLP; sparse_trainer.c: CTR models over an
 * embedding table), named next to its kind in kinds.c (kind.h).
 *
 * A trainer counts what its steps did in w->st (progress lines and the
 * final report read them) and calls the services of tasks.h (tw_stop,
 * tw_renew_lease) and progress.h (print_progress) while it trains. */
#ifndef PS_TRAIN_TRAINER_H
#define PS_TRAIN_TRAINER_H

#include <stdint.h>

#include "config.h"
#include "runlog.h"

/* A task of the stream: for dense jobs samples [start, start + count) of
 * the train split, for sparse jobs bytes [start, start + count) of the
 * train file. */
typedef struct task {
    char id[64];
    int epoch;
    long long start, count;
    long long samples;      /* samples trained (set by the trainer's task()) */
} task;

/* Where the worker is in the task stream (tasks.c). */
typedef struct taskCursor {
    long long done;         /* tasks recorded by this run */
    long long claimed, lost;
    long long my_tasks, my_samples; /* w:<name>:tasks/samples, over restarts */
    int own_done;           /* own pending entries (XREADGROUP ... 0) all taken back */
    int waiting;            /* "waiting for" was printed for the current wait */
    char cur[64];           /* id of the task being trained, "" between tasks */
} taskCursor;

/* What the steps did: counted by the trainer, printed by progress.c. */
typedef struct stepStats {
    long long samples;
    long long pushes;       /* model pushes: one PS.PUSHGRAD per partition each */
    double t0, last_print;
    long long win_samples;  /* since last print */
    double win_loss;
    long long win_batches;
    double win_stale;
    long long win_stale_n;
    uint64_t last_version;
    int cur_epoch;
    /* where the time of the steps goes (seconds) */
    double t_pull, t_grad, t_push, t_tasks, t_first, t_last;
} stepStats;

/* The state of one worker process. */
typedef struct workCtx {
    const trainOpts *o;
    psClient *c;
    psModel *m;             /* the job's dense tensors (the trainer's setup lays them out) */
    jobConfig cfg;
    runLog *log;            /* --log-json: a progress line per progress interval */
    char name[128];
    char tkey[128], pkey[128], dkey[128];
    int batch;
    char push_name[32];     /* the push format in use (the job's) */
    char pull_name[16];     /* the pull format in use (--pull-format, else the job's) */
    int tty;                /* overwrite one line instead of printing lines */
    int quiet;
    char degraded[256];     /* "host:port host:port" of the shards degraded now */
    taskCursor q;
    stepStats st;
    void *state;            /* the trainer's own */
} workCtx;

typedef struct trainer {
    const char *kind;       /* "dense", "sparse" */
    /* After the job config was loaded into w->cfg: sets w->batch, w->m,
     * w->push_name/pull_name and w->state. 0 or -1 (printed). */
    int (*setup)(workCtx *w);
    /* Trains task 't'; sets t->samples. Returns 1 done, 0 abandoned (lease
     * lost), -1 error (printed), -2 interrupted (tw_stop). */
    int (*task)(workCtx *w, task *t);
    /* After the last task: waits for what it has in flight (pushes are
     * drained by work.c after it). 0 or -1 (printed). */
    int (*finish)(workCtx *w);
    /* After the final drain: its lines of the final report. */
    void (*report)(workCtx *w);
    /* Frees w->state (also after a failed setup; w->m is work.c's). */
    void (*free)(workCtx *w);
} trainer;

#include "progress.h"
#include "tasks.h"

#endif
