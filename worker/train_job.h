/* train_job.h -- shared declarations of the ps-train subcommands.
 *
 * ps-train.c parses the command line into a trainOpts and dispatches to one
 * of the train_*.c files:
 *   train_job.c    job keys, config hash, init, status, snapshot, helpers
 *   train_work.c   the worker loop (work)
 *   train_eval.c   eval and run
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
 * w:*:samples (tr_progress). */
#ifndef PS_TRAIN_JOB_H
#define PS_TRAIN_JOB_H

#include <stddef.h>
#include <stdint.h>

#include "data.h"
#include "nn.h"
#include "redis-ps/ps.h"

/* Exit codes of ps-train. */
#define TR_EXIT_OK 0
#define TR_EXIT_FAIL 1  /* runtime failure: server, data, training */
#define TR_EXIT_USAGE 2 /* bad command line, or settings that differ from the job's */
#define TR_EXIT_FINISHED 3 /* init/run: every task of the job was trained already */
#define TR_EXIT_INTERRUPTED 130 /* SIGINT/SIGTERM: the job is resumable */

#define TR_MAX_LAYERS 16
#define TR_GROUP "workers"
#define TR_JOB_MAX 64

/* Every option of every subcommand; each subcommand reads the ones it has. */
typedef struct trainOpts {
    const char *cmd;            /* subcommand name */
    const char *self;           /* argv[0] as given */
    /* connection */
    const char *addr;
    const char *job;
    const char *user, *password;
    /* init: model and job */
    const char *layers;         /* "784,128,10" */
    const char *optim;          /* upper case PS.CREATE OPTIM name */
    double lr;
    double momentum;            /* < 0: server default */
    uint64_t seed;
    int epochs;
    int batch;                  /* 0: from the job config (work) */
    int shard_size;             /* samples per task */
    long long partition_bytes;  /* 0: libps default */
    const char *data;           /* IDX dir (NULL: Fashion-MNIST default) */
    const char *csv;            /* train CSV (instead of IDX) */
    const char *test_csv;       /* test CSV for eval */
    int label_col;
    int limit;                  /* 0: all train samples */
    int reset;                  /* delete the job first */
    /* work */
    const char *name;
    int lease_ms;
    int window;
    int wait;
    const char *on_degraded;    /* degrade | block | fail: a shard short of --wait replicas */
    const char *on_lost_state;  /* stop | continue: a tensor vanished or rolled back */
    psEventFn *on_event;        /* work: libps events (tr_connect passes them on) */
    void *event_udata;
    int pull_every;             /* pull every K mini-batches (bounded staleness) */
    int overlap;                /* 1: next pull in flight while computing */
    const char *pull_format;    /* f32 | bf16 | f16 | i8; NULL: the job's default */
    const char *push_format;    /* f32 | bf16 | f16 | i8 | topk[:K]; NULL: the job's */
    int interval_ms;
    const char *progress;       /* auto | tty | line | none */
    int max_tasks;              /* 0: no limit (tests) */
    /* eval */
    const char *at;
    double min_acc;             /* < 0: no requirement */
    /* run */
    int workers;
    /* misc */
    int threads;                /* OpenBLAS threads, 0: default (1 for workers) */
    uint64_t given;             /* bit i: Flags[i] of ps-train.c was on the command line */
} trainOpts;

/* The job configuration as stored in psjob:{J}:config. */
typedef struct jobConfig {
    char layers[256];
    int sizes[TR_MAX_LAYERS];
    int nsizes;
    char optim[16];
    double lr;
    int batch;
    int epochs;
    int shard_size;
    long long partition_bytes;
    char data[512];
    char csv[512];
    char test_csv[512];
    int label_col;
    int train_n;                /* samples the tasks cover */
    long long tasks;            /* stream entries written */
    uint64_t seed;
    double momentum;            /* < 0: server default */
    int limit;                  /* --limit as given, 0: none */
    int has_momentum, has_limit; /* fields present (jobs made before they were stored lack them) */
    char push_format[32];       /* set at init ("" in jobs made before it was) */
    char pull_format[16];       /* workers' default pull format, set at init ("": f32) */
    char state[16];             /* "init" while being created, then "ready" */
} jobConfig;

/* ---- ps-train.c ---- */

/* 1 when flag 'name' (e.g. "--epochs") was given on the command line. */
int tr_given(const trainOpts *o, const char *name);
/* A parsed --push-format. TOPK's k is either a fraction of every partition
 * (topk_ratio) or a count over the whole model (topk_count, turned into a
 * fraction by tr_push_apply(); libps rounds k up per partition, at least 1). */
typedef struct pushFormat {
    psWireFormat fmt;
    double topk_ratio;          /* 0 < r <= 1 with topk_count 0 */
    long long topk_count;       /* >= 1, or 0 */
} pushFormat;

/* ---- train_job.c ---- */

/* Builds key "psjob:{job}:<what>" into 'buf'. Returns buf. */
const char *tr_key(char *buf, size_t len, const char *job, const char *what);
/* Connects with the options' address and credentials; prints the error and
 * returns NULL on failure. */
psClient *tr_connect(const trainOpts *o, int push_window, int wait_replicas);
/* Loads the config of o->job into 'cfg'. Returns 0, 1 when there is no such
 * job, -1 on error (printed). */
int tr_load_config(psClient *c, const char *job, jobConfig *cfg);
/* A libps model of the job's tensors W<l>/b<l>, laid out. NULL on error. */
psModel *tr_model(psClient *c, const char *job, const jobConfig *cfg);
/* Loads the train (train=1) or test split named by the config (or the
 * overrides in 'o' when not NULL). Returns 0 or -1 (printed). */
int tr_load_data(const jobConfig *cfg, const char *test_csv_override, int train, ps_dataset *ds);
/* Parses --on-degraded / --on-lost-state names into PS_DURABILITY_* /
 * PS_LOST_STATE_*. Returns 0 or -1. */
int tr_parse_policies(const trainOpts *o, int *durability, int *lost_state);
/* Runs a command routed by 'key': every %s of 'fmt' is one argument,
 * literals split on spaces. Returns the reply, or NULL after printing the
 * client error or the server error reply (which is freed). */
redisReply *tr_cmd_ok(const trainOpts *o, psClient *c, const char *key, const char *fmt, ...);
/* Prints an error with the subcommand prefix. */
/* Parses a --pull-format/--push-format name (case-insensitive) into *out;
 * 'push' (any pull too) also allows i8. Returns 0 or -1. */
int tr_parse_wire(const char *name, int push, psWireFormat *out);
/* Parses a --push-format: f32, bf16, f16, i8, or topk[:K] with K a fraction
 * (0.01, needs a '.'), a percentage (1%) or a count (1000), case-insensitive.
 * NULL is f32. Returns 0 or -1. */
int tr_parse_push(const char *name, pushFormat *out);
/* The canonical name of 'pf' (what init records), written into 'buf'. */
const char *tr_push_name(const pushFormat *pf, char *buf, size_t len);
/* 1 when 'a' and 'b' send the same bytes (same format and k). */
int tr_push_same(const pushFormat *a, const pushFormat *b);
/* Sets 'pf' as the push format of laid-out model 'm'. PS_OK or PS_ERR. */
int tr_push_apply(psModel *m, const pushFormat *pf);
/* Prints an error with the subcommand prefix. */
void tr_err(const trainOpts *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
double tr_now(void);
/* Wall clock (unix seconds), comparable between processes. */
double tr_wall(void);
void tr_sleep_ms(long ms);

/* Loads the test split eval will use and checks it fits the job's model.
 * Returns 0 or -1 (printed). */
int tr_check_test(const trainOpts *o, const jobConfig *cfg);
/* Derived totals of the job: tasks done (fields of psjob:{J}:done) and
 * samples trained (sum of w:*:samples). Returns 0 or -1 (printed). */
int tr_progress(const trainOpts *o, psClient *c, long long *tasks, long long *samples);
/* Refuses (printed, -1) an explicit --push-format that differs from the one
 * job 'cfg' recorded at init; 0 when it matches or either is unset. */
int tr_check_push_format(const trainOpts *o, const jobConfig *cfg);
int tr_cmd_init(const trainOpts *o);
int tr_cmd_status(const trainOpts *o);
int tr_cmd_snapshot(const trainOpts *o);

/* ---- train_work.c ---- */
int tr_cmd_work(const trainOpts *o);

/* ---- train_eval.c ---- */
/* Evaluates the job's model (or snapshot o->at) on the test split; writes
 * loss/accuracy/version when the pointers are not NULL. Returns 0 or -1. */
int tr_evaluate(const trainOpts *o, double *loss, double *acc, uint64_t *version, int *ntest);
int tr_cmd_eval(const trainOpts *o);
int tr_cmd_run(const trainOpts *o, int argc, char **argv);

#endif
