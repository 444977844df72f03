/* train_job.h -- shared declarations of the ps-train subcommands.
 *
 * ps-train.c parses the command line into a trainOpts and dispatches to one
 * of the train_*.c files:
 *   train_job.c    job keys, config hash, init, status, snapshot, helpers
 *   train_work.c   the worker loop (work); train_tasks.c its task stream
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
    int sync_rounds;            /* > 0: each pull waits up to this many ms for a model newer
                                   than the last one (a relay's sync round, MINVERSION) */
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
    const char *log_json;       /* --log-json FILE: JSON lines of the run (runlog.h), or NULL */
    uint64_t given;             /* bit i: Flags[i] of ps-train.c was on the command line */
    /* sparse CTR jobs (train_sparse.c): --model makes the job sparse */
    const char *model;          /* lr | fm | mlp; NULL: the dense MLP */
    const char *train, *test;   /* libsvm or Criteo files (test: also eval's override) */
    const char *format;         /* libsvm | criteo */
    int dim;                    /* fm: factors per id; mlp: embedding dim */
    int fields;                 /* mlp: field slots of the input */
    const char *hidden;         /* mlp: hidden widths "64,32" */
    const char *table_optim;    /* server optimizer of the table rows */
    double table_lr;            /* its LR (FTRL: ALPHA) */
    double ftrl_beta, l1, l2;   /* FTRL */
    double init_std;            /* rows start N(0, init_std^2); < 0: per model */
    int admit;                  /* ADMIT n */
    long long capacity;         /* CAPACITY n, 0: none */
    int shards;                 /* table shards (keys) */
    long long shard_bytes;      /* train-file bytes per task */
    double min_auc;             /* < 0: no requirement */
} trainOpts;

/* The sparse settings of a job (fields of psjob:{J}:config; model "" for
 * a dense job). */
/* Bounds of the sparse settings, shared by the flags (ps-train.c) and the
 * check of a stored config (tr_sparse_check_config). */
#define TR_SP_MAX_DIM 1024
#define TR_SP_MAX_FIELDS 256
#define TR_SP_MAX_ADMIT 255
#define TR_SP_MAX_CAPACITY (67108863LL * 1024)
#define TR_SP_MAX_SHARDS 1024
#define TR_SP_MAX_SHARD_BYTES (1LL << 40)
/* Tasks of a job (all epochs): one stream entry and one XADD round trip
 * each, so a tiny --shard-bytes cannot fill the server. */
#define TR_SP_MAX_TASKS (1LL << 20)

typedef struct sparseConfig {
    char model[8];              /* lr | fm | mlp */
    char train[512], test[512];
    char format[8];             /* libsvm | criteo */
    int dim, fields;
    char hidden[64];
    char table_optim[16];       /* upper case PS.CREATE OPTIM name */
    double table_lr, ftrl_beta, l1, l2, init_std;
    int admit, shards;
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
    sparseConfig sp;            /* sparse jobs */
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

/* Prints, once per process, the server(s) behind the connection (--addr,
 * standalone or cluster node/master counts, port, version, run_id). */
void tr_announce_server(const trainOpts *o, psClient *c);

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
/* Appends printf-formatted text to 'out' of 'len' bytes, comma separated
 * from what it holds (the "--flag given (job: stored)" lists). */
void tr_add_diff(char *out, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* XADDs one task per shard of [0, total) in pieces of 'per' (samples or
 * bytes) per epoch of 'cfg', shard order shuffled per epoch from its seed;
 * creates the stream and group. Returns the number of tasks or -1. */
long long tr_fill_tasks(const trainOpts *o, psClient *c, const jobConfig *cfg, long long total,
                        long long per);
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
/* Opens --log-json into *lg (NULL when the flag is not given). Returns 0, or
 * -1 when the file cannot be opened (printed). */
struct runLog;
int tr_open_log(const trainOpts *o, struct runLog **lg);

/* ---- train_sparse_cfg.c, train_sparse_job.c (sparse CTR jobs: settings;
 * init, eval, run's result) ---- */
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
/* Fresh sparse job after init's HSETNX: writes the config, creates the
 * table shards and dense tensors (NX), fills the task stream. Deletes the
 * tables and tensors it made when it fails. Returns TR_EXIT_*. */
int tr_sparse_init(const trainOpts *o, psClient *c);
/* DEL the tables and tensors of sparse job 'cfg'. 0 or -1 (printed). */
int tr_sparse_delete(const trainOpts *o, psClient *c, const jobConfig *cfg);
/* 1 when o->job is a sparse job, 0 when dense or absent, -1 on error. */
int tr_sparse_job(const trainOpts *o);
/* Checks the test file run will evaluate (opens, parses a batch). 0 or -1. */
int tr_sparse_check_test(const trainOpts *o, const jobConfig *cfg);
/* eval of a sparse job; 'lg' (may be NULL) gets the eval line. */
int tr_sparse_cmd_eval(const trainOpts *o, struct runLog *lg);
/* status of a sparse job: prints its sparse settings and every table shard
 * (rows, version), and returns its dense tensors as a laid-out model for
 * the partition list (NULL on error, printed). */
psModel *tr_sparse_status(const trainOpts *o, psClient *c, const jobConfig *cfg);
/* run after its workers: evaluates and prints the RESULT line (and the eval
 * and result lines to 'lg', may be NULL). TR_EXIT_*. */
int tr_sparse_run_result(const trainOpts *o, struct runLog *lg, double total_t0, double train_secs,
                         long long samples, double span, int failed);

#endif
