/* kind.h -- a model kind of ps-train jobs: how a job of that kind is
 * made, deleted, shown, evaluated and reported, and which trainer trains
 * it (trainer.h). kinds.c lists the kinds; everything that differs between
 * a dense MLP job and a sparse CTR job goes through them, so the
 * subcommands (job.c, run.c, eval.c, status.c, work.c) never ask which
 * kind a job is. A new kind is its job file (like dense_job.c), its
 * trainer file (like dense_trainer.c) and a row in kinds.c. */
#ifndef PS_TRAIN_KIND_H
#define PS_TRAIN_KIND_H

#include "config.h"
#include "runlog.h"
#include "trainer.h"

/* What run measured, for the kind's RESULT line. */
typedef struct runTotals {
    double t0;              /* run's start (tr_now) */
    double train_secs;      /* workers started .. all exited */
    long long samples;      /* trained by this run */
    double span;            /* first step .. last ack over the workers */
    double push_bytes, pull_bytes, steps; /* summed over the workers */
    int failed;             /* workers that failed */
} runTotals;

typedef struct modelKind {
    const char *name;
    /* 1 when init/run's flags ask for a job of this kind. */
    int (*wants)(const trainOpts *o);
    /* 1 when stored job 'cfg' is of this kind. */
    int (*is_kind)(const jobConfig *cfg);
    /* Fresh job after init's HSETNX: writes the config, creates its keys
     * (NX), fills the task stream; deletes the keys it made when it fails
     * (job.c deletes the config and the stream). TR_EXIT_*. */
    int (*init)(const trainOpts *o, psClient *c);
    /* --reset: DEL the job's model keys. 0 or -1 (printed). */
    int (*delete_keys)(const trainOpts *o, psClient *c, const jobConfig *cfg);
    /* status: the job's first line (its settings), with 'state' (finished,
     * training or ready: status.c reads it from the task stream). */
    void (*describe)(const trainOpts *o, const jobConfig *cfg, const char *state);
    /* status, after the tasks and workers: prints what the kind adds, and
     * returns the laid-out model whose partitions status lists (NULL on
     * error, printed). */
    psModel *(*status)(const trainOpts *o, psClient *c, const jobConfig *cfg);
    /* run, before any worker: the test data the final eval reads fits the
     * model. 0 or -1 (printed). */
    int (*check_test)(const trainOpts *o, const jobConfig *cfg);
    /* run: the "start" line of --log-json. */
    void (*log_start)(const trainOpts *o, runLog *lg, const jobConfig *cfg);
    /* eval: prints the result, logs it to 'lg' (may be NULL), checks
     * --min-acc/--min-auc. TR_EXIT_*. */
    int (*eval)(const trainOpts *o, runLog *lg);
    /* run after its workers: evaluates, prints the RESULT line. TR_EXIT_*. */
    int (*run_result)(const trainOpts *o, runLog *lg, const runTotals *rt);
} modelKind;

extern const modelKind DenseKind;  /* dense_job.c */
extern const modelKind SparseKind; /* sparse_job.c */

/* ---- kinds.c ---- */
/* The kind init/run's flags ask for. */
const modelKind *tr_kind_for(const trainOpts *o);
/* The kind of stored job 'cfg'. */
const modelKind *tr_kind_of(const jobConfig *cfg);
/* The trainer of stored job 'cfg'. */
const trainer *tr_trainer_of(const jobConfig *cfg);
/* Loads o->job's config on a connection of its own and sets *k to its kind
 * (dense when there is no such job: its commands then say so). 0, or -1
 * on error (printed). */
int tr_job_kind(const trainOpts *o, const modelKind **k);

#endif
