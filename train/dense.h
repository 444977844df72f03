/* dense.h -- ps-train's dense jobs: an MLP (ml/nn.h) on Fashion-MNIST or a
 * CSV, its tensors W<l>/b<l> a libps model "J" (dense_job.c); and the dense
 * trainer (dense_trainer.c). */
#ifndef PS_TRAIN_DENSE_H
#define PS_TRAIN_DENSE_H

#include "config.h"
#include "data.h"
#include "nn.h"
#include "trainer.h"

/* A libps model of the job's tensors W<l>/b<l>, laid out. NULL on error. */
psModel *tr_model(psClient *c, const char *job, const jobConfig *cfg);
/* Loads the train (train=1) or test split named by the config (or the
 * overrides in 'o' when not NULL). Returns 0 or -1 (printed). */
int tr_load_data(const jobConfig *cfg, const char *test_csv_override, int train, ps_dataset *ds);
/* Loads the test split eval will use and checks it fits the job's model.
 * Returns 0 or -1 (printed). */
int tr_check_test(const trainOpts *o, const jobConfig *cfg);
/* Fresh dense job after init's HSETNX (job.c). TR_EXIT_*. */
int tr_dense_init(const trainOpts *o, psClient *c);
/* DEL the tensors of dense job 'cfg'. 0 or -1 (printed). */
int tr_dense_delete(const trainOpts *o, psClient *c, const jobConfig *cfg);
/* Evaluates the job's model (or snapshot o->at) on the test split; writes
 * loss/accuracy/version when the pointers are not NULL. Returns 0 or -1. */
int tr_evaluate(const trainOpts *o, double *loss, double *acc, uint64_t *version, int *ntest);

/* The dense trainer (dense_trainer.c). */
extern const trainer DenseTrainer;

#endif
