/* sparse.h -- ps-train's sparse CTR jobs.
 *
 * A sparse job (init --model lr|fm|mlp) trains a ctr_model.h model on a
 * libsvm or Criteo file. Its keys, beside the job's psjob:{J}:* keys:
 *   table "J:emb": libps sharded embedding table (ps.h "Embedding tables"),
 *                  keys "J:emb:<s>{<tag>}", one per shard, rows of
 *                  ps_ctr_row_dim() floats (LR 1, FM 1 + k, MLP d)
 *   model "J":     the dense tensors of ctr_model.h ("bias" for LR/FM,
 *                  W<l>/b<l> for the MLP), keys "J:<name>:<p>"
 *   psjob:{J}:ids  HyperLogLog of the ids trained in epoch 1 (the distinct
 *                  ids the table could hold, for reports only)
 * A task is a byte range [start, start + count) of the train file
 * (ps_sparse_open ranges: every line is read by exactly one task).
 *
 *   sparse_cfg.c      flags' checks, config fields (read, checked, diffed),
 *                     the model, table and dense tensors of a config
 *   sparse_job.c      init, --reset's delete, status, eval, run's RESULT,
 *                     the table's totals and zero count
 *   sparse_trainer.c  the trainer (trainer.h): one task = batches of pull
 *                     rows by id, gradient, push rows by id (+ dense tensors) */
#ifndef PS_TRAIN_SPARSE_H
#define PS_TRAIN_SPARSE_H

#include "config.h"
#include "ctr_model.h"
#include "runlog.h"
#include "sparse_data.h"
#include "trainer.h"

/* ---- sparse_cfg.c: flags, config fields, the model a config describes ---- */

/* Checks the sparse flags of subcommand 'cmd' ("init", "run", ...). 0 or -1 (printed). */
int tr_sparse_validate(const trainOpts *o, int init_or_run);
/* Takes config hash field 'f' with value 'v' into cfg->sp: 1 when it is a
 * sparse field, else 0. */
int tr_sparse_field(jobConfig *cfg, const char *f, const redisReply *v);
/* Checks the sparse settings of a stored config (an operator or another
 * client may have edited the hash) against the flags' bounds. Returns 0, or
 * -1 with the first bad field and its value in 'err'. */
int tr_sparse_check_config(const jobConfig *cfg, char *err, size_t errlen);
/* Appends to 'out' ("--flag given (job: stored)", comma separated) every
 * sparse setting given that differs from job 'cfg'. Returns how many. */
int tr_sparse_diff(const trainOpts *o, const jobConfig *cfg, char *out, size_t len);
/* The ctr_model configuration of job 'cfg' for batches of 'max_batch'.
 * 0, or -1 with a message in 'err'. */
int ts_ctr_config(const jobConfig *cfg, int max_batch, ps_ctr_config *mc, char *err,
                  size_t errlen);
/* The default row init std of 'model' with table optimizer 'optim'. */
double ts_default_init_std(const char *model, const char *optim);
/* Reader options of the job's files (byte range left whole). */
void ts_reader_opts(const jobConfig *cfg, ps_sparse_opts *so);
/* The job's table handle (nothing sent). NULL when out of memory. */
psEmbed *ts_table(const char *job, const jobConfig *cfg, int dim);
/* The job's dense tensors as a laid-out libps model (the shapes of 'm').
 * NULL on error (printed). */
psModel *ts_dense_model(psClient *c, const char *job, ps_ctr_model *m);
/* Pointers to the values (grads 0) or gradients (grads 1) of the dense
 * tensors of 'm', in model order, into 'out' (ps_ctr_dense_count entries). */
void ts_dense_arrays(ps_ctr_model *m, int grads, float **out);

/* ---- sparse_job.c: init, delete, status, eval, run's result (SparseKind) ---- */

/* Fresh sparse job after init's HSETNX: writes the config, creates the
 * table shards and dense tensors (NX), fills the task stream. Deletes the
 * tables and tensors it made when it fails. Returns TR_EXIT_*. */
int tr_sparse_init(const trainOpts *o, psClient *c);
/* DEL the tables and tensors of sparse job 'cfg'. 0 or -1 (printed). */
int tr_sparse_delete(const trainOpts *o, psClient *c, const jobConfig *cfg);
/* Checks the test file run will evaluate (opens, parses a batch). 0 or -1. */
int tr_sparse_check_test(const trainOpts *o, const jobConfig *cfg);
/* status of a sparse job: prints its sparse settings and every table shard
 * (rows, version), and returns its dense tensors as a laid-out model for
 * the partition list (NULL on error, printed). */
psModel *tr_sparse_status(const trainOpts *o, psClient *c, const jobConfig *cfg);
/* Totals over a table's shards (PS.INFO). */
typedef struct tableInfo {
    long long rows, created, dropped, evicted, version;
} tableInfo;
/* 0, or -1 with c->err / a server error printed. */
int ts_table_info(const trainOpts *o, psClient *c, psEmbed *e, tableInfo *ti);
/* Values of the table's live rows and how many of them are
 * exactly 0 (an FTRL table's sparsity), by a full PS.SCANROWS of every
 * shard (O(rows), the rows' values cross the wire once). 0, or -1
 * (printed). */
int ts_table_zeros(const trainOpts *o, psClient *c, psEmbed *e, int dim, long long *values,
                   long long *zeros);

/* ---- sparse_trainer.c ---- */
extern const trainer SparseTrainer;

#endif
