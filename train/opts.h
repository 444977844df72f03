/* opts.h -- ps-train's command line: the options of every subcommand and
 * the one table of flags that fills them (opts.c).
 *
 * Each row of the flag table (opts.c Flags[]) carries the flag's name,
 * value type and bounds, the subcommands that take it, the model kinds it
 * is for (dense MLP jobs, sparse CTR jobs, or both), its default (and a
 * sparse job's default when that differs), its help text, and, for a
 * deprecated spelling, the flag it stands for. `ps-train CMD --help` and
 * `ps-train help flags` print the table; nothing else holds a default. */
#ifndef PS_TRAIN_OPTS_H
#define PS_TRAIN_OPTS_H

#include <stdint.h>
#include <stdio.h>

#include "redis-ps/ps.h"

/* Subcommand bits. */
#define C_INIT (1 << 0)
#define C_WORK (1 << 1)
#define C_EVAL (1 << 2)
#define C_RUN (1 << 3)
#define C_STATUS (1 << 4)
#define C_SNAP (1 << 5)
#define C_STREAM (1 << 6)
#define C_ALL (C_INIT | C_WORK | C_EVAL | C_RUN | C_STATUS | C_SNAP | C_STREAM)

/* Model kinds a flag is for. */
#define K_DENSE (1 << 0)  /* the MLP (no --model) */
#define K_SPARSE (1 << 1) /* sparse CTR models (--model lr|fm|mlp) */
#define K_ALL (K_DENSE | K_SPARSE)

/* Options of dense (MLP) jobs. */
typedef struct denseOpts {
    const char *layers;         /* "784,128,10" */
    const char *data;           /* IDX dir (NULL: Fashion-MNIST default) */
    const char *csv;            /* train CSV (instead of IDX) */
    const char *test_csv;       /* test CSV for eval */
    int label_col;
    int limit;                  /* 0: all train samples */
    const char *slice;          /* "K/N": the K-th of N parts of the samples (NULL: all) */
    int task_samples;           /* samples per task */
    long long partition_bytes;  /* 0: libps default */
    double min_acc;             /* < 0: no requirement */
} denseOpts;

/* Options of sparse CTR jobs: --model makes a job sparse. */
typedef struct sparseOpts {
    const char *model;          /* lr | fm | mlp; NULL: a dense job */
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
    const char *unknown;        /* init | zeros: what a pull answers for an id with no row */
    long long capacity;         /* CAPACITY n, 0: none */
    int table_shards;           /* table shards (keys) */
    long long task_bytes;       /* train-file bytes per task */
    double min_auc;             /* < 0: no requirement */
} sparseOpts;

/* Every option of every subcommand; each subcommand reads the ones it has. */
typedef struct trainOpts {
    const char *cmd;            /* subcommand name */
    const char *self;           /* argv[0] as given */
    /* connection */
    const char *addr;
    const char *job;
    const char *user, *password;
    /* init: the job (both kinds) */
    const char *optim;          /* PS.CREATE OPTIM name of the (dense) tensors */
    double lr;
    double momentum;            /* < 0: server default */
    uint64_t seed;
    int epochs;
    int batch;                  /* work: 0 (not given) takes the job's */
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
    /* stream (stream.c) */
    const char *stream;         /* the Redis Stream of events */
    const char *group;          /* its consumer group */
    const char *consumer;       /* consumer name, NULL: hostname-pid */
    const char *field;          /* the entry field holding the event line */
    int batch_ms;               /* a batch closes after this long with what it has */
    long long max_events;       /* 0: no limit */
    int idle_exit;              /* 0: never; else exit after this long without events */
    int claim_idle_ms;          /* entries pending this long are claimed */
    int auc_window;             /* events of the online AUC/logloss window */
    /* eval */
    const char *at;
    /* run */
    int workers;
    /* misc */
    int threads;                /* OpenBLAS threads, 0: default (1 for workers) */
    const char *log_json;       /* --log-json FILE: JSON lines of the run (runlog.h), or NULL */
    uint64_t given[2];          /* bit i: row i of the flag table was on the command line */
    denseOpts dense;
    sparseOpts sparse;
} trainOpts;

/* Bounds of the sparse settings, shared by the flags and the check of a
 * stored config (tr_sparse_check_config). */
#define TR_SP_MAX_DIM 1024
#define TR_SP_MAX_FIELDS 256
#define TR_SP_MAX_ADMIT 255
#define TR_SP_MAX_CAPACITY (67108863LL * 1024)
#define TR_SP_MAX_SHARDS 1024
#define TR_SP_MAX_SHARD_BYTES (1LL << 40)
/* Tasks of a job (all epochs): one stream entry and one XADD round trip
 * each, so a tiny --task-bytes cannot fill the server. */
#define TR_SP_MAX_TASKS (1LL << 20)

/* Parses the flags argv[first..argc) of subcommand 'cmd' (bit C_*) into
 * 'o', then fills every flag not given with its default: a sparse job's
 * (--model given) where the table has one. Returns 0, 1 after printing the
 * subcommand's help (--help), or -1 after printing the error. */
int tr_opts_parse(const char *cmd, int bit, const char *summary, int argc, char **argv,
                  int first, trainOpts *o);
/* Prints subcommand 'cmd''s flags grouped by kind, with their defaults. */
void tr_opts_help(FILE *out, const char *cmd, int bit, const char *summary);
/* Prints the whole flag table: flag, subcommands, kinds, default. */
void tr_opts_table(FILE *out);

/* The default written in the flag table's row of 'flag' ("--push-format"),
 * for the flags whose value not given means "the job's": what a job or a
 * worker uses when the job names none either. "" when it has none. */
const char *tr_opts_default(const char *flag);
/* At init/run: refuses (printed, -1) a job setting given (a flag init
 * takes) that is not for the job's kind (dense without --model, sparse
 * with it). 0 otherwise. */
int tr_opts_check_kind(const trainOpts *o);
/* 1 when flag 'name' (e.g. "--epochs", or a deprecated spelling of it) was
 * given on the command line. */
int tr_given(const trainOpts *o, const char *name);

#endif
