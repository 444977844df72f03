/* tasks.h -- a job's task stream (tasks.c): filling it at init, the
 * derived totals, and a worker's side: taking tasks (own pending, new,
 * XAUTOCLAIM), renewing their leases, recording and XACKing them, and the
 * signals that stop it. Leases and bookkeeping only: no model state. */
#ifndef PS_TRAIN_TASKS_H
#define PS_TRAIN_TASKS_H

#include <signal.h>

#include "config.h"

#define TR_GROUP "workers"

struct task;
struct workCtx;

/* XADDs one task per shard of [first, first + total) in pieces of 'per' (samples or
 * bytes) per epoch of 'cfg', shard order shuffled per epoch from its seed;
 * creates the stream and group. Returns the number of tasks or -1. */
long long tr_fill_tasks(const trainOpts *o, psClient *c, const jobConfig *cfg, long long first,
                        long long total,
                        long long per);
/* Derived totals of the job: tasks done (fields of psjob:{J}:done) and
 * samples trained (sum of w:*:samples). Returns 0 or -1 (printed). */
int tr_progress(const trainOpts *o, psClient *c, long long *tasks, long long *samples);
/* Samples the job's workers trained so far, on a connection of its own (0
 * when it cannot tell). */
long long tr_samples_trained(const trainOpts *o);

/* Set to the signal number by SIGINT/SIGTERM (tw_catch_signals): the
 * worker stops after the step it is in, drains its pushes and exits
 * TR_EXIT_INTERRUPTED, leaving its task pending. */
extern volatile sig_atomic_t tw_stop;
void tw_catch_signals(void);
/* Takes the next task. Returns 1 with 't' filled, 0 when the job is done,
 * -1 on error. Waits (polling) while tasks are pending on live workers. */
int tw_next_task(struct workCtx *w, struct task *t);
/* Renews the lease of 't' if this worker still owns it. Returns 1 when
 * owned, 0 when another worker took it (or it was acked), -1 on error. */
int tw_renew_lease(struct workCtx *w, const struct task *t);
/* Drains the pushes, then records task 't' ('samples' trained) as done by
 * this worker and XACKs it. Returns 0 or -1. */
int tw_ack_task(struct workCtx *w, const struct task *t, long long samples);
/* Reads this worker's counters so a restart under its name continues them. */
int tw_load_counters(struct workCtx *w);

#endif
