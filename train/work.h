/* train_work.h -- private header of the ps-train worker: the worker state
 * and the task-stream functions shared by the dense loop (train_work.c)
 * and the sparse one (train_sparse.c).
 *
 *   train_tasks.c  taking tasks (own pending, new, XAUTOCLAIM), leases,
 *                  recording and XACKing them, signals, durability events
 *   train_work.c   the dense MLP loop, progress lines, the work command
 *   train_sparse.c sparse CTR models over embedding tables */
#ifndef PS_TRAIN_WORK_H
#define PS_TRAIN_WORK_H

#include <signal.h>
#include <stdio.h>

#include "runlog.h"
#include "job.h"

struct sparseWork;

/* A task of the stream: for dense jobs samples [start, start + count) of
 * the train split, for sparse jobs bytes [start, start + count) of the
 * train file. */
typedef struct task {
    char id[64];
    int epoch;
    long long start, count;
    long long samples;      /* sparse: samples the byte range held (set by its run) */
} task;

typedef struct worker {
    const trainOpts *o;
    psClient *c;
    psModel *m;
    jobConfig cfg;
    ps_dataset ds;
    ps_mlp mlp;
    float **params, **grads; /* params: the front buffer, mlp.W/mlp.b */
    float **back;           /* per tensor: the buffer an overlapped pull fills */
    FILE *trace;            /* PS_TRAIN_TRACE: one line per pull and per push */
    runLog *log;            /* --log-json: a progress line per progress interval */
    float *xb;
    int32_t *yb;
    int *perm;
    char name[128];
    char tkey[128], pkey[128], dkey[128];
    int batch;
    char push_name[32];     /* the push format in use (the job's) */
    char pull_name[16];     /* the pull format in use (--pull-format, else the job's) */
    int tty;                /* overwrite one line instead of printing lines */
    int quiet;
    /* counters */
    long long tasks_done, samples, claimed, lost;
    long long pushes;       /* model pushes: one PS.PUSHGRAD per partition each */
    long long my_tasks, my_samples; /* w:<name>:tasks/samples, over restarts */
    double t0, last_print;
    long long win_samples;  /* since last print */
    double win_loss;
    long long win_batches;
    double win_stale;
    long long win_stale_n;
    uint64_t last_version;
    int cur_epoch;
    int own_done;           /* own pending entries (XREADGROUP ... 0) all taken back */
    int waiting;            /* "waiting for" was printed for the current wait */
    char cur_task[64];      /* id of the task being trained, "" between tasks */
    /* pulls */
    uint64_t *vers;         /* per tensor: versions of the model in params */
    int have_params;        /* params hold a pulled model */
    int pull_inflight;      /* a psModelPullAsync into back is pending */
    int since_pull;         /* steps computed on the current params */
    int pushes_since_pull;
    /* durability (libps events) */
    char degraded[256];     /* "host:port host:port" of the shards degraded now */
    /* where the time of the steps goes (seconds) */
    double t_pull, t_grad, t_push, t_tasks, t_first, t_last;
    struct sparseWork *sp;  /* sparse jobs: the table state (train_sparse.c), else NULL */
} worker;

/* ---- train_tasks.c ---- */

/* Set to the signal number by SIGINT/SIGTERM (tw_catch_signals): the
 * worker stops after the step it is in, drains its pushes and exits
 * TR_EXIT_INTERRUPTED, leaving its task pending. */
extern volatile sig_atomic_t tw_stop;
void tw_catch_signals(void);
/* Takes the next task. Returns 1 with 't' filled, 0 when the job is done,
 * -1 on error. Waits (polling) while tasks are pending on live workers. */
int tw_next_task(worker *w, task *t);
/* Renews the lease of 't' if this worker still owns it. Returns 1 when
 * owned, 0 when another worker took it (or it was acked), -1 on error. */
int tw_renew_lease(worker *w, const task *t);
/* Drains the pushes, then records task 't' ('samples' trained) as done by
 * this worker and XACKs it. Returns 0 or -1. */
int tw_ack_task(worker *w, const task *t, long long samples);
/* Reads this worker's counters so a restart under its name continues them. */
int tw_load_counters(worker *w);
/* libps event callback (udata: the worker). */
void tw_on_event(void *udata, int ev, const char *node, const char *msg);
/* The durability state for the progress hash. */
void tw_durability_text(const worker *w, char *buf, size_t len);

/* ---- train_work.c ---- */

/* Prints the progress line (every --interval-ms, or now when 'final') and
 * writes the window's loss and rate to the progress hash. */
void print_progress(worker *w, int final);

#endif
