/* config.h -- a ps-train job's keys and its stored configuration
 * (config.c reads and checks it; init writes it: job.c, dense_job.c,
 * sparse_job.c).
 *
 * Keys of job J. The model tensors are libps model "J" (keys "J:W0:0",
 * "J:b0:0", ..., one per partition, no hash tag so a cluster spreads them).
 * Everything else lives under the hash tag {J}, one cluster slot, so the
 * worker can reach it with psCommand() routed by key:
 *   psjob:{J}:config    hash: layers, optim, lr, batch, epochs, data, ...
 *   psjob:{J}:tasks     stream: one entry per data shard per epoch
 *                       (epoch, start, count), consumer group "workers"
 *   psjob:{J}:progress  hash: w:<name>:tasks, w:<name>:samples (absolute,
 *                       written by that worker only), w:<name>:loss, ...
 *   psjob:{J}:done      hash: task id -> 1, one field per task trained (its
 *                       field count is the number of tasks done)
 * Every write of a worker's bookkeeping is idempotent (HSET of fixed or
 * absolute values), so a command resent after a lost reply counts nothing
 * twice; totals are derived: tasks done = HLEN done, samples = the sum of
 * w:*:samples (tr_progress). Sparse jobs add their table: sparse.h. */
#ifndef PS_TRAIN_CONFIG_H
#define PS_TRAIN_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "opts.h"
#include "redis-ps/ps.h"

#define TR_MAX_LAYERS 16

/* The sparse settings of a job (fields of psjob:{J}:config; model "" for
 * a dense job). */
typedef struct sparseConfig {
    char model[8];              /* lr | fm | mlp */
    char train[512], test[512]; /* train "": a stream job (init --stream, no file) */
    char stream[256];           /* init --stream: the stream it trains from ("" none) */
    char format[8];             /* libsvm | criteo */
    int dim, fields;
    char hidden[64];
    char table_optim[16];       /* upper case PS.CREATE OPTIM name */
    double table_lr, ftrl_beta, l1, l2, init_std;
    int admit, shards;
    int unknown_zeros;          /* PS.CREATE ... UNKNOWN ZEROS (record: unknown=zeros) */
    long long capacity, shard_bytes;
    long long train_bytes;      /* bytes of the (uncompressed) train file the tasks tile */
} sparseConfig;

/* The job configuration as stored in psjob:{J}:config. */
typedef struct jobConfig {
    char layers[256];
    int sizes[TR_MAX_LAYERS];
    int nsizes;
    char optim[16];
    double lr;
    int batch;
    int epochs;
    int shard_size;             /* samples per task (--task-samples) */
    long long partition_bytes;
    char data[512];
    char csv[512];
    char test_csv[512];
    int label_col;
    int train_n;                /* samples the tasks cover */
    int train_off;              /* ... starting at this sample (--slice) */
    char slice[32];             /* --slice as given ("" none) */
    long long tasks;            /* stream entries written */
    uint64_t seed;
    double momentum;            /* < 0: server default */
    int limit;                  /* --limit as given, 0: none */
    int has_momentum, has_limit; /* fields present (jobs made before they were stored lack them) */
    char push_format[32];       /* set at init ("" in jobs made before it was) */
    char pull_format[16];       /* workers' default pull format, set at init ("": f32) */
    char state[16];             /* "init" while being created, then "ready" */
    sparseConfig sp;            /* sparse jobs */
} jobConfig;

/* Loads the config of job 'job' into 'cfg'. Returns 0, 1 when there is no
 * such job, -1 on error (printed). */
int tr_load_config(psClient *c, const char *job, jobConfig *cfg);
/* Refuses (printed, -1) an explicit --push-format that differs from the one
 * job 'cfg' recorded at init; 0 when it matches or either is unset. */
int tr_check_push_format(const trainOpts *o, const jobConfig *cfg);

#endif
