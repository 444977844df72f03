/* opts.c -- ps-train's flag table, its parser and its help (opts.h).
 *
 * Flags are parsed strictly: an error names the flag and the problem. A
 * flag's default is written once, in its row: 'def' for every job, and
 * 'def_sparse' where a sparse job's differs (a value, or "--flag": that
 * flag's value). Both show in --help and in `ps-train help flags`; a job
 * records the values it was made with, which `ps-train status` prints. */

#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "opts.h"
#include "protocol.h"

enum { F_STR, F_INT, F_LL, F_DBL, F_U64, F_FLAG };

typedef struct flagDef {
    const char *name;
    int type;
    size_t off;             /* offset in trainOpts */
    double lo, hi;          /* bounds for numbers */
    int cmds;               /* C_* that accept it */
    int kinds;              /* K_* it is for */
    const char *def;        /* default (parsed like a value; NULL: unset) */
    const char *def_sparse; /* a sparse job's default when it differs; "--flag": its value */
    int defcmds;            /* C_* the default applies to (0: all; D_FALLBACK: none) */
    const char *show;       /* the default as help says it, when 'def' is a sentinel */
    const char *arg;        /* value placeholder for --help */
    const char *help;
    const char *alias_of;   /* deprecated spelling of this flag (the row holds nothing else) */
} flagDef;

#define O(f) offsetof(trainOpts, f)
#define D(f) offsetof(trainOpts, dense.f)
#define S(f) offsetof(trainOpts, sparse.f)
#define ALIAS(old, new) {.name = old, .alias_of = new}
/* defcmds of a flag whose 'def' is never filled in: the value not given
 * means "the job's", and 'def' is what the code takes (tr_opts_default) when
 * the job names none either. */
#define D_FALLBACK (1 << 30)
/* Where a help text lists the optimizers: help_text() writes the names of
 * common/protocol.h's table there (ps_proto_optim_names). */
#define TENSOR_OPTIMS "\001"
#define TABLE_OPTIMS "\002"

static const flagDef Flags[] = {
    /* connection (every subcommand, every kind) */
    {"--addr", F_STR, O(addr), 0, 0, C_ALL, K_ALL, NULL, NULL, 0, "required", "HOST:PORT[,...]",
     "server, or a comma list of cluster seeds", NULL},
    {"--job", F_STR, O(job), 0, 0, C_ALL, K_ALL, NULL, NULL, 0, "required", "NAME",
     "job name: [A-Za-z0-9_.-], 1..64", NULL},
    {"--user", F_STR, O(user), 0, 0, C_ALL, K_ALL, NULL, NULL, 0, "env PS_USER", "USER",
     "ACL user", NULL},
    {"--password", F_STR, O(password), 0, 0, C_ALL, K_ALL, NULL, NULL, 0, "env PS_PASSWORD",
     "PASS", "password", NULL},
    /* the job, both kinds */
    {"--optim", F_STR, O(optim), 0, 0, C_INIT | C_RUN, K_ALL, "sgd", "adagrad", 0, NULL, "NAME",
     "server optimizer of the tensors: " TENSOR_OPTIMS " (sparse jobs: their dense tensors)",
     NULL},
    {"--lr", F_DBL, O(lr), 1e-12, 1e6, C_INIT | C_RUN, K_ALL, "0.1", "--table-lr", 0, NULL, "X",
     "learning rate (sparse jobs: of their dense tensors)", NULL},
    {"--momentum", F_DBL, O(momentum), 0, 0.999999, C_INIT | C_RUN, K_ALL, "-1", NULL, 0,
     "server's 0.9", "M", "momentum for momentum/nesterov", NULL},
    {"--seed", F_U64, O(seed), 0, 0, C_INIT | C_RUN, K_ALL, "1", NULL, 0, NULL, "S",
     "init and shuffling seed", NULL},
    {"--epochs", F_INT, O(epochs), 1, 10000, C_INIT | C_RUN, K_ALL, "1", NULL, 0, NULL, "E",
     "passes over the data", NULL},
    {"--batch", F_INT, O(batch), 1, 65536, C_INIT | C_WORK | C_RUN | C_STREAM, K_ALL, "64", "256",
     C_INIT | C_RUN, "64, sparse 256; work: the job's", "B",
     "mini-batch size (work: override the job's)", NULL},
    {"--reset", F_FLAG, O(reset), 0, 0, C_INIT | C_RUN, K_ALL, NULL, NULL, 0, NULL, NULL,
     "delete the job's keys and tensors first", NULL},
    /* dense jobs */
    {"--layers", F_STR, D(layers), 0, 0, C_INIT | C_RUN, K_DENSE, "784,128,10", NULL, 0, NULL,
     "N0,N1,...", "MLP widths", NULL},
    {"--task-samples", F_INT, D(task_samples), 1, 1 << 28, C_INIT | C_RUN, K_DENSE, "1000", NULL,
     0, NULL, "N", "samples per task", NULL},
    {"--partition-bytes", F_LL, D(partition_bytes), 4, 1LL << 40, C_INIT | C_RUN, K_DENSE, NULL,
     NULL, 0, "libps's 1 MiB", "N", "split tensors into keys of at most N bytes", NULL},
    {"--data", F_STR, D(data), 0, 0, C_INIT | C_RUN, K_DENSE, NULL, NULL, 0, PS_FASHION_MNIST_DIR,
     "DIR", "Fashion-MNIST IDX dir", NULL},
    {"--csv", F_STR, D(csv), 0, 0, C_INIT | C_RUN, K_DENSE, NULL, NULL, 0, NULL, "FILE",
     "train on a numeric CSV instead", NULL},
    {"--test-csv", F_STR, D(test_csv), 0, 0, C_INIT | C_EVAL | C_RUN, K_DENSE, NULL, NULL, 0,
     NULL, "FILE", "test CSV for eval (with --csv)", NULL},
    {"--label-col", F_INT, D(label_col), -100000, 100000, C_INIT | C_RUN, K_DENSE, "-1", NULL, 0,
     NULL, "K", "CSV label column, negative from the end", NULL},
    {"--limit", F_INT, D(limit), 1, 1 << 28, C_INIT | C_RUN, K_DENSE, NULL, NULL, 0, "all",
     "N", "train on the first N samples only", NULL},
    {"--slice", F_STR, D(slice), 0, 0, C_INIT | C_RUN, K_DENSE, NULL, NULL, 0, "all", "K/N",
     "train on the K-th of N equal parts of the samples (after --limit): one site's share", NULL},
    {"--min-acc", F_DBL, D(min_acc), 0, 1, C_EVAL | C_RUN, K_DENSE, "-1", NULL, 0, "none", "A",
     "exit 1 when the test accuracy is below A", NULL},
    /* work */
    {"--name", F_STR, O(name), 0, 0, C_WORK, K_ALL, NULL, NULL, 0, "hostname-pid", "NAME",
     "consumer name", NULL},
    {"--lease-ms", F_INT, O(lease_ms), 10, 1 << 30, C_WORK | C_RUN, K_ALL, "30000", NULL, 0,
     NULL, "MS", "a task idle this long is claimed by another worker", NULL},
    {"--window", F_INT, O(window), 1, 1024, C_WORK | C_RUN | C_STREAM, K_ALL, "2", NULL, 0, NULL, "N",
     "outstanding pushes", NULL},
    {"--pull-every", F_INT, O(pull_every), 1, 1000, C_WORK | C_RUN, K_ALL, "1", NULL, 0, NULL,
     "K", "pull the model every K mini-batches, push every one", NULL},
    {"--overlap", F_INT, O(overlap), 0, 1, C_WORK | C_RUN | C_STREAM, K_ALL, "1", NULL, 0, NULL,
     "0|1", "send the next pull before computing the gradient", NULL},
    {"--sync-rounds", F_INT, O(sync_rounds), 1, 1 << 20, C_WORK, K_ALL, NULL, NULL, 0, "off",
     "MS", "behind ps-relay --sync: after each push wait up to MS for the round's new model "
     "(implies --overlap 0)", NULL},
    {"--pull-format", F_STR, O(pull_format), 0, 0, C_WORK | C_RUN | C_STREAM, K_ALL, "f32", NULL,
     D_FALLBACK, "the job's: i8 for a topk push format, else f32", "FMT",
     "model on the wire: f32, bf16, f16 or i8 (sparse jobs: not i8)", NULL},
    {"--push-format", F_STR, O(push_format), 0, 0, C_INIT | C_WORK | C_RUN, K_ALL, "f32", NULL,
     D_FALLBACK, "init: f32; workers: the job's", "FMT",
     "gradients on the wire: f32 bf16 f16 i8 topk[:K] (K 0.01, 1% or a count; topk: 1%); init "
     "records it, workers push the job's (sparse jobs: f32, bf16 or f16)", NULL},
    {"--wait", F_INT, O(wait), 0, 64, C_WORK | C_RUN | C_STREAM, K_ALL, "0", NULL, 0, NULL, "N",
     "WAIT for N replicas after each push", NULL},
    {"--on-degraded", F_STR, O(on_degraded), 0, 0, C_WORK | C_RUN | C_STREAM, K_ALL, "degrade", NULL, 0,
     NULL, "POLICY", "a shard short of --wait replicas: degrade (train on, count unreplicated "
     "pushes), block (until a replica is back) or fail", NULL},
    {"--on-lost-state", F_STR, O(on_lost_state), 0, 0, C_ALL, K_ALL, "stop", NULL, 0, NULL,
     "POLICY", "a tensor vanished or went back below an acknowledged version: stop or continue",
     NULL},
    {"--interval-ms", F_INT, O(interval_ms), 10, 1 << 30, C_WORK | C_RUN | C_STREAM, K_ALL, "2000", NULL, 0,
     NULL, "MS", "progress interval", NULL},
    {"--progress", F_STR, O(progress), 0, 0, C_WORK | C_RUN | C_STREAM, K_ALL, "auto", NULL, 0, NULL,
     "MODE", "auto | tty | line | none (auto: tty on a terminal)", NULL},
    {"--max-tasks", F_INT, O(max_tasks), 1, INT_MAX, C_WORK, K_ALL, NULL, NULL, 0, "no limit",
     "N", "exit after N tasks (for tests)", NULL},
    /* stream: online training from a Redis Stream of events (stream.c) */
    {"--stream", F_STR, O(stream), 0, 0, C_INIT | C_STREAM, K_SPARSE, NULL, NULL, 0, "required",
     "KEY", "the Redis Stream of events (one libsvm or Criteo line per entry); init: a job "
     "trained from it, --train then optional (recorded, no tasks)", NULL},
    {"--group", F_STR, O(group), 0, 0, C_STREAM, K_SPARSE, "ps-train", NULL, 0, NULL, "NAME",
     "consumer group (made at the stream's start when missing)", NULL},
    {"--consumer", F_STR, O(consumer), 0, 0, C_STREAM, K_SPARSE, NULL, NULL, 0, "hostname-pid",
     "NAME", "consumer name: a restart under the same name replays its journal first", NULL},
    {"--field", F_STR, O(field), 0, 0, C_STREAM, K_SPARSE, "l", NULL, 0, NULL, "NAME",
     "the entry field holding the event's line", NULL},
    {"--batch-ms", F_INT, O(batch_ms), 1, 1 << 24, C_STREAM, K_SPARSE, "100", NULL, 0, NULL,
     "MS", "a mini-batch closes after MS with what it has (or at --batch events)", NULL},
    {"--max-events", F_LL, O(max_events), 1, 1LL << 62, C_STREAM, K_SPARSE, NULL, NULL, 0,
     "no limit", "N", "exit after about N events (whole batches)", NULL},
    {"--idle-exit", F_INT, O(idle_exit), 1, 1 << 30, C_STREAM, K_SPARSE, NULL, NULL, 0, "never",
     "MS", "exit after MS without an event to train or claim", NULL},
    {"--claim-idle-ms", F_INT, O(claim_idle_ms), 10, 1 << 30, C_STREAM, K_SPARSE, "10000", NULL,
     0, NULL, "MS", "entries pending this long on another consumer are claimed (a dead worker's)",
     NULL},
    {"--auc-window", F_INT, O(auc_window), 10, 1 << 24, C_STREAM, K_SPARSE, "10000", NULL, 0,
     NULL, "N", "events of the online (progressive) AUC and logloss window", NULL},
    /* eval, snapshot, run */
    {"--at", F_STR, O(at), 0, 0, C_EVAL | C_SNAP, K_DENSE, NULL, NULL, 0, NULL, "SNAPSHOT",
     "eval: evaluate this snapshot; snapshot: its name", NULL},
    {"--workers", F_INT, O(workers), 1, 256, C_RUN, K_ALL, "2", NULL, 0, NULL, "N",
     "local worker processes", NULL},
    {"--threads", F_INT, O(threads), 1, 1024, C_ALL, K_ALL, NULL, NULL, 0, "workers: 1", "N",
     "OpenBLAS threads", NULL},
    {"--log-json", F_STR, O(log_json), 0, 0, C_WORK | C_EVAL | C_RUN | C_STREAM, K_ALL, NULL, NULL, 0, NULL,
     "FILE", "append the run as JSON lines to FILE (progress, eval, result; python3 -m "
     "redis_ps.plot)", NULL},
    /* sparse CTR jobs */
    {"--model", F_STR, S(model), 0, 0, C_INIT | C_RUN, K_SPARSE, NULL, NULL, 0, NULL,
     "lr|fm|mlp", "sparse CTR model over an embedding table (makes the job sparse)", NULL},
    {"--train", F_STR, S(train), 0, 0, C_INIT | C_RUN, K_SPARSE, NULL, NULL, 0, NULL, "FILE",
     "train file, libsvm or Criteo TSV, plain or gzip", NULL},
    {"--test", F_STR, S(test), 0, 0, C_INIT | C_EVAL | C_RUN, K_SPARSE, NULL, NULL, 0, NULL,
     "FILE", "test file (eval: instead of the job's)", NULL},
    {"--format", F_STR, S(format), 0, 0, C_INIT | C_RUN, K_SPARSE, "libsvm", NULL, 0, NULL,
     "libsvm|criteo", "file format (libsvm ids carry their field in the top 8 bits)", NULL},
    {"--dim", F_INT, S(dim), 1, TR_SP_MAX_DIM, C_INIT | C_RUN, K_SPARSE, "4", NULL, 0, NULL, "K",
     "FM factors per id, MLP embedding dim", NULL},
    {"--fields", F_INT, S(fields), 1, TR_SP_MAX_FIELDS, C_INIT | C_RUN, K_SPARSE, "26", NULL, 0,
     "26; criteo 39", "F", "mlp: field slots of the input", NULL},
    {"--hidden", F_STR, S(hidden), 0, 0, C_INIT | C_RUN, K_SPARSE, "64,32", NULL, 0, NULL,
     "W1,W2,...", "mlp: hidden widths", NULL},
    {"--table-optim", F_STR, S(table_optim), 0, 0, C_INIT | C_RUN, K_SPARSE, "adagrad", NULL, 0,
     NULL, "NAME", "row optimizer: " TABLE_OPTIMS, NULL},
    {"--table-lr", F_DBL, S(table_lr), 1e-12, 1e6, C_INIT | C_RUN, K_SPARSE, "0.05", NULL, 0,
     NULL, "X", "row learning rate, FTRL's alpha (--lr defaults to it)", NULL},
    {"--ftrl-beta", F_DBL, S(ftrl_beta), 1e-12, 1e6, C_INIT | C_RUN, K_SPARSE, "1", NULL, 0,
     NULL, "X", "FTRL beta", NULL},
    {"--l1", F_DBL, S(l1), 0, 1e6, C_INIT | C_RUN, K_SPARSE, "0", NULL, 0, NULL, "X", "FTRL L1",
     NULL},
    {"--l2", F_DBL, S(l2), 0, 1e6, C_INIT | C_RUN, K_SPARSE, "0", NULL, 0, NULL, "X", "FTRL L2",
     NULL},
    {"--init-std", F_DBL, S(init_std), 0, 1e6, C_INIT | C_RUN, K_SPARSE, "-1", NULL, 0,
     "fm/mlp 0.1; lr and ftrl 0", "S", "rows start N(0, S^2) from (seed, id)", NULL},
    {"--admit", F_INT, S(admit), 1, TR_SP_MAX_ADMIT, C_INIT | C_RUN, K_SPARSE, "1", NULL, 0,
     NULL, "N", "an id becomes a row on its N-th push, earlier gradients dropped", NULL},
    {"--unknown", F_STR, S(unknown), 0, 0, C_INIT | C_RUN, K_SPARSE, "init", NULL, 0, NULL,
     "init|zeros", "a pull of an id with no row answers its init row (computed) or zeros", NULL},
    {"--capacity", F_LL, S(capacity), 1, TR_SP_MAX_CAPACITY, C_INIT | C_RUN, K_SPARSE, NULL,
     NULL, 0, "no bound", "N",
     "keep about N rows (N/shards per shard, least recently pushed evicted)", NULL},
    {"--table-shards", F_INT, S(table_shards), 1, TR_SP_MAX_SHARDS, C_INIT | C_RUN, K_SPARSE, "4",
     NULL, 0, NULL, "N", "table shards (keys)", NULL},
    {"--task-bytes", F_LL, S(task_bytes), 1, TR_SP_MAX_SHARD_BYTES, C_INIT | C_RUN, K_SPARSE,
     "4194304", NULL, 0, NULL, "N", "bytes of the train file per task", NULL},
    {"--min-auc", F_DBL, S(min_auc), 0, 1, C_EVAL | C_RUN, K_SPARSE, "-1", NULL, 0, "none", "A",
     "exit 1 when the test AUC is below A", NULL},
    /* deprecated spellings: accepted with a note on stderr */
    ALIAS("--shard-size", "--task-samples"),
    ALIAS("--shard-bytes", "--task-bytes"),
    ALIAS("--shards", "--table-shards"),
};
#define NFLAGS (sizeof(Flags) / sizeof(Flags[0]))
_Static_assert(NFLAGS <= 128, "trainOpts.given has one bit per flag");

static const flagDef *find_flag(const char *name) {
    for (size_t k = 0; k < NFLAGS; k++)
        if (!strcmp(name, Flags[k].name)) return &Flags[k];
    return NULL;
}

/* The row a deprecated spelling stands for (the row itself otherwise). */
static const flagDef *canonical(const flagDef *f) {
    return f->alias_of ? find_flag(f->alias_of) : f;
}

static void set_given(trainOpts *o, const flagDef *f) {
    size_t i = (size_t)(f - Flags);
    o->given[i / 64] |= 1ULL << (i % 64);
}

static int is_given(const trainOpts *o, const flagDef *f) {
    size_t i = (size_t)(f - Flags);
    return (o->given[i / 64] >> (i % 64)) & 1;
}

int tr_given(const trainOpts *o, const char *name) {
    const flagDef *f = find_flag(name);
    return f ? is_given(o, canonical(f)) : 0;
}

/* Stores value 'v' of flag 'f' into 'o'. 'check': the bounds apply (a
 * given value); defaults may be sentinels outside them. Returns 0 or -1
 * (message printed). */
static int parse_value(const char *cmd, const flagDef *f, const char *v, trainOpts *o,
                       int check) {
    char *p = (char *)o + f->off;
    char *end;
    errno = 0;
    switch (f->type) {
    case F_STR:
        if (*v == '\0') goto empty;
        *(const char **)p = v;
        return 0;
    case F_INT:
    case F_LL: {
        long long n = strtoll(v, &end, 10);
        if (errno || end == v || *end != '\0') goto notnum;
        if (check && ((double)n < f->lo || (double)n > f->hi)) goto range;
        if (f->type == F_INT)
            *(int *)p = (int)n;
        else
            *(long long *)p = n;
        return 0;
    }
    case F_DBL: {
        double d = strtod(v, &end);
        if (errno || end == v || *end != '\0' || d != d) goto notnum;
        if (check && (d < f->lo || d > f->hi)) goto range;
        *(double *)p = d;
        return 0;
    }
    case F_U64: {
        if (v[0] == '-') goto notnum;
        unsigned long long n = strtoull(v, &end, 10);
        if (errno || end == v || *end != '\0') goto notnum;
        *(uint64_t *)p = n;
        return 0;
    }
    case F_FLAG:
        *(int *)p = 1;
        return 0;
    }
    return -1;
empty:
    fprintf(stderr, "ps-train %s: %s: empty value\n", cmd, f->name);
    return -1;
notnum:
    fprintf(stderr, "ps-train %s: %s: '%s' is not a valid %s\n", cmd, f->name, v,
            f->type == F_DBL ? "number" : f->type == F_U64 ? "non-negative integer" : "integer");
    return -1;
range:
    fprintf(stderr, "ps-train %s: %s: %s is out of range (%g .. %g)\n", cmd, f->name, v, f->lo,
            f->hi);
    return -1;
}

/* Copies the value of flag 'from' into the field of 'f' (same type). */
static void copy_value(const flagDef *f, const flagDef *from, trainOpts *o) {
    size_t n = f->type == F_DBL ? sizeof(double) : f->type == F_LL ? sizeof(long long)
               : f->type == F_U64 ? sizeof(uint64_t) : f->type == F_STR ? sizeof(char *)
                                                                        : sizeof(int);
    memcpy((char *)o + f->off, (const char *)o + from->off, n);
}

const char *tr_opts_default(const char *flag) {
    const flagDef *f = find_flag(flag);
    return f && f->def ? f->def : "";
}

/* Fills the flags not given with their defaults for subcommand 'bit' and
 * the job's kind; references ("--flag") after the values they copy. */
static void apply_defaults(trainOpts *o, int bit) {
    int sparse = o->sparse.model != NULL;
    for (int pass = 0; pass < 2; pass++) {
        for (size_t k = 0; k < NFLAGS; k++) {
            const flagDef *f = &Flags[k];
            if (f->alias_of || is_given(o, f) || (f->defcmds && !(f->defcmds & bit))) continue;
            const char *d = sparse && f->def_sparse ? f->def_sparse : f->def;
            if (d == NULL || (d[0] == '-' && d[1] == '-') != pass) continue;
            if (pass)
                copy_value(f, find_flag(d), o);
            else
                parse_value(o->cmd, f, d, o, 0);
        }
    }
}

int tr_opts_parse(const char *cmd, int bit, const char *summary, int argc, char **argv,
                  int first, trainOpts *o) {
    o->cmd = cmd;
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            tr_opts_help(stdout, cmd, bit, summary);
            return 1;
        }
        const flagDef *f = find_flag(a);
        if (!f) {
            fprintf(stderr, "ps-train %s: unknown flag '%s' (see ps-train %s --help)\n", cmd, a,
                    cmd);
            return -1;
        }
        if (f->alias_of) {
            fprintf(stderr, "ps-train %s: note: %s is deprecated, use %s\n", cmd, a, f->alias_of);
            f = canonical(f);
        }
        if (!(f->cmds & bit)) {
            fprintf(stderr, "ps-train %s: %s does not apply to %s\n", cmd, a, cmd);
            return -1;
        }
        set_given(o, f);
        if (f->type == F_FLAG) {
            parse_value(cmd, f, "1", o, 0);
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "ps-train %s: %s needs a value (%s)\n", cmd, a, f->arg);
            return -1;
        }
        if (parse_value(cmd, f, argv[++i], o, 1) != 0) return -1;
    }
    apply_defaults(o, bit);
    return 0;
}

int tr_opts_check_kind(const trainOpts *o) {
    int sparse = o->sparse.model != NULL;
    for (size_t k = 0; k < NFLAGS; k++) {
        const flagDef *f = &Flags[k];
        /* A job's settings (what init takes); --min-acc/--min-auc are only
         * checks of run's result. */
        if (f->alias_of || !is_given(o, f) || !(f->cmds & C_INIT) ||
            (f->kinds & (sparse ? K_SPARSE : K_DENSE)))
            continue;
        if (sparse)
            fprintf(stderr, "ps-train %s: %s is for dense jobs, not with --model\n", o->cmd,
                    f->name);
        else if (!strcmp(f->name, "--test"))
            fprintf(stderr, "ps-train %s: --test is for sparse jobs (--model); dense CSV jobs "
                            "take --test-csv\n", o->cmd);
        else
            fprintf(stderr, "ps-train %s: %s is for sparse jobs: add --model lr|fm|mlp\n",
                    o->cmd, f->name);
        return -1;
    }
    return 0;
}

/* The default of 'f' for subcommand 'bit' ("X; sparse jobs: Y") into
 * 'buf': "" when the flag has none, "required" for a required one. */
static const char *default_text(const flagDef *f, int bit, char *buf, size_t len) {
    buf[0] = '\0';
    if (f->show)
        snprintf(buf, len, "%s", f->show);
    else if (f->def && (!f->defcmds || (f->defcmds & bit))) {
        if (f->def_sparse && f->def_sparse[0] == '-')
            snprintf(buf, len, "%s; sparse jobs: %s's value", f->def, f->def_sparse);
        else if (f->def_sparse)
            snprintf(buf, len, "%s; sparse jobs: %s", f->def, f->def_sparse);
        else
            snprintf(buf, len, "%s", f->def);
    }
    return buf;
}

/* Prints 'text' from column 31 on, wrapped before column 100. */
static void print_wrapped(FILE *out, const char *text) {
    int col = 31;
    for (const char *p = text; *p;) {
        while (*p == ' ') p++;
        size_t n = strcspn(p, " ");
        if (n == 0) break;
        if (col > 31 && col + 1 + (int)n > 100) {
            fprintf(out, "\n%31s", "");
            col = 31;
        } else if (col > 31) {
            fputc(' ', out);
            col++;
        }
        fprintf(out, "%.*s", (int)n, p);
        col += (int)n;
        p += n;
    }
    fputc('\n', out);
}

/* f->help with the optimizer lists (TENSOR_OPTIMS, TABLE_OPTIMS) written out. */
static const char *help_text(const flagDef *f, char *buf, size_t len) {
    const char *mark = strpbrk(f->help, TENSOR_OPTIMS TABLE_OPTIMS);
    char names[160];
    if (mark == NULL) return f->help;
    ps_proto_optim_names(*mark == TENSOR_OPTIMS[0] ? PS_PROTO_KIND_TENSOR : PS_PROTO_KIND_TABLE,
                         1, " ", names, sizeof(names));
    snprintf(buf, len, "%.*s%s%s", (int)(mark - f->help), f->help, names, mark + 1);
    return buf;
}

void tr_opts_help(FILE *out, const char *cmd, int bit, const char *summary) {
    static const struct {
        int kinds;
        const char *title;
    } groups[] = {{K_ALL, "flags"},
                  {K_DENSE, "dense jobs (an MLP: no --model)"},
                  {K_SPARSE, "sparse jobs (--model lr|fm|mlp)"}};
    fprintf(out, "usage: ps-train %s [flags]\n%s\n", cmd, summary);
    for (size_t g = 0; g < sizeof(groups) / sizeof(groups[0]); g++) {
        int header = 0;
        for (size_t i = 0; i < NFLAGS; i++) {
            const flagDef *f = &Flags[i];
            char left[64], def[160], text[640], hbuf[400];
            if (f->alias_of || !(f->cmds & bit) || f->kinds != groups[g].kinds) continue;
            if (!header++) fprintf(out, "\n%s:\n", groups[g].title);
            snprintf(left, sizeof(left), "%s%s%s", f->name, f->arg ? " " : "",
                     f->arg ? f->arg : "");
            const char *help = help_text(f, hbuf, sizeof(hbuf));
            default_text(f, bit, def, sizeof(def));
            if (!strcmp(def, "required"))
                snprintf(text, sizeof(text), "%s (required)", help);
            else if (def[0])
                snprintf(text, sizeof(text), "%s [default %s]", help, def);
            else
                snprintf(text, sizeof(text), "%s", help);
            fprintf(out, "  %-28s ", left);
            print_wrapped(out, text);
        }
    }
    int n = 0;
    for (size_t i = 0; i < NFLAGS; i++) {
        const flagDef *f = &Flags[i];
        if (!f->alias_of || !(canonical(f)->cmds & bit)) continue;
        fprintf(out, "%s%s (%s)", n++ ? ", " : "\ndeprecated spellings, accepted with a note: ",
                f->name, f->alias_of);
    }
    if (n) fputc('\n', out);
    if (bit == C_RUN)
        fprintf(out, "\nrun passes the work flags to its workers and evaluates at the end.\n");
}

void tr_opts_table(FILE *out) {
    static const char *cmds[] = {"init", "work", "eval", "run", "status", "snapshot", "stream"};
    fprintf(out, "%-18s %-30s %-13s %s\n", "FLAG", "SUBCOMMANDS", "KINDS", "DEFAULT");
    for (size_t i = 0; i < NFLAGS; i++) {
        const flagDef *f = &Flags[i];
        const flagDef *c = canonical(f);
        char sub[64] = "", def[160];
        for (int b = 0; b < 7; b++)
            if (c->cmds & (1 << b))
                snprintf(sub + strlen(sub), sizeof(sub) - strlen(sub), "%s%s", sub[0] ? "," : "",
                         cmds[b]);
        if (f->alias_of)
            snprintf(def, sizeof(def), "deprecated spelling of %s", f->alias_of);
        else
            default_text(f, C_ALL, def, sizeof(def));
        fprintf(out, "%-18s %-30s %-13s %s\n", f->name, c->cmds == C_ALL ? "all" : sub,
                c->kinds == K_ALL ? "dense,sparse" : c->kinds == K_DENSE ? "dense" : "sparse",
                def[0] ? def : "-");
    }
}
