/* train_sparse.h -- private header of ps-train's sparse CTR jobs.
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
 *   train_sparse_cfg.c  flags' checks, config fields (read, checked, diffed)
 *   train_sparse_job.c  init, eval, run's RESULT
 *   train_sparse.c      the worker: one task = batches of pull rows by id,
 *                       gradient, push rows by id (+ dense tensors); the
 *                       table's zero count for eval */
#ifndef PS_TRAIN_SPARSE_H
#define PS_TRAIN_SPARSE_H

#include "ctr_model.h"
#include "sparse_data.h"
#include "work.h"

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

/* Totals over a table's shards (PS.INFO). */
typedef struct tableInfo {
    long long rows, created, dropped, evicted, version;
} tableInfo;
/* 0, or -1 with c->err / a server error printed. */
int ts_table_info(const trainOpts *o, psClient *c, psEmbed *e, tableInfo *ti);
/* train_sparse.c: values of the table's live rows and how many of them are
 * exactly 0 (an FTRL table's sparsity), by a full PS.SCANROWS of every
 * shard (O(rows), the rows' values cross the wire once). 0, or -1
 * (printed). */
int ts_table_zeros(const trainOpts *o, psClient *c, psEmbed *e, int dim, long long *values,
                   long long *zeros);

/* ---- train_sparse.c: the worker (dispatched from train_work.c) ---- */
/* After the job config was loaded into w->cfg: sets up the model, table and
 * w->m (dense tensors). Returns 0 or -1 (printed). */
int tr_sparse_setup(worker *w);
/* Trains task 't' (a byte range); sets t->samples. Returns 1 done, 0
 * abandoned (lease lost), -1 error, -2 interrupted. */
int tr_sparse_task(worker *w, task *t);
/* The sparse part of the final report (ACKED_TABLE line). */
void tr_sparse_report(worker *w);
void tr_sparse_free(worker *w);

#endif
