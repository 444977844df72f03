/* ps-train.c -- the redis-ps training tool: command line and dispatch.
 *
 *   ps-train init|work|eval|run|status|snapshot --addr A --job J [flags]
 *
 * Every subcommand has --help. Flags are parsed strictly from one table
 * (name, type, bounds, subcommands that take it); an error names the flag
 * and the problem and exits with TR_EXIT_USAGE (2). Runtime failures exit
 * with TR_EXIT_FAIL (1). The work itself is in train_*.c. */

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ctr_gen.h"
#include "protocol.h"
#include "train_job.h"

/* Subcommand bits. */
#define C_INIT (1 << 0)
#define C_WORK (1 << 1)
#define C_EVAL (1 << 2)
#define C_RUN (1 << 3)
#define C_STATUS (1 << 4)
#define C_SNAP (1 << 5)
#define C_ALL (C_INIT | C_WORK | C_EVAL | C_RUN | C_STATUS | C_SNAP)

enum { F_STR, F_INT, F_LL, F_DBL, F_U64, F_FLAG };

typedef struct flagDef {
    const char *name;
    int type;
    size_t off;         /* offset in trainOpts */
    double lo, hi;      /* bounds for numbers */
    int cmds;           /* C_* that accept it */
    const char *arg;    /* value placeholder for --help */
    const char *help;
} flagDef;

#define O(f) offsetof(trainOpts, f)

static const flagDef Flags[] = {
    {"--addr", F_STR, O(addr), 0, 0, C_ALL, "HOST:PORT[,...]",
     "server, or a comma list of cluster seeds (required)"},
    {"--job", F_STR, O(job), 0, 0, C_ALL, "NAME", "job name: [A-Za-z0-9_.-], 1..64 (required)"},
    {"--user", F_STR, O(user), 0, 0, C_ALL, "USER", "ACL user (default: env PS_USER)"},
    {"--password", F_STR, O(password), 0, 0, C_ALL, "PASS", "password (default: env PS_PASSWORD)"},
    {"--layers", F_STR, O(layers), 0, 0, C_INIT | C_RUN, "N0,N1,...", "MLP widths (784,128,10)"},
    {"--optim", F_STR, O(optim), 0, 0, C_INIT | C_RUN, "NAME",
     "server optimizer: sgd momentum nesterov adagrad rmsprop adam adamw (sgd)"},
    {"--lr", F_DBL, O(lr), 1e-12, 1e6, C_INIT | C_RUN, "X", "learning rate (0.1)"},
    {"--momentum", F_DBL, O(momentum), 0, 0.999999, C_INIT | C_RUN, "M",
     "momentum for momentum/nesterov (server default 0.9)"},
    {"--seed", F_U64, O(seed), 0, 0, C_INIT | C_RUN, "S", "init and shuffling seed (1)"},
    {"--epochs", F_INT, O(epochs), 1, 10000, C_INIT | C_RUN, "E", "passes over the data (1)"},
    {"--batch", F_INT, O(batch), 1, 65536, C_INIT | C_WORK | C_RUN, "B",
     "mini-batch size (64; work: override the job's)"},
    {"--shard-size", F_INT, O(shard_size), 1, 1 << 28, C_INIT | C_RUN, "N",
     "samples per task (1000)"},
    {"--partition-bytes", F_LL, O(partition_bytes), 4, 1LL << 40, C_INIT | C_RUN, "N",
     "split tensors into keys of at most N bytes (libps default 1 MiB)"},
    {"--data", F_STR, O(data), 0, 0, C_INIT | C_RUN, "DIR",
     "Fashion-MNIST IDX dir (" PS_FASHION_MNIST_DIR ")"},
    {"--csv", F_STR, O(csv), 0, 0, C_INIT | C_RUN, "FILE", "train on a numeric CSV instead"},
    {"--test-csv", F_STR, O(test_csv), 0, 0, C_INIT | C_EVAL | C_RUN, "FILE",
     "test CSV for eval (with --csv)"},
    {"--label-col", F_INT, O(label_col), -100000, 100000, C_INIT | C_RUN, "K",
     "CSV label column, negative from the end (-1)"},
    {"--limit", F_INT, O(limit), 1, 1 << 28, C_INIT | C_RUN, "N",
     "train on the first N samples only"},
    {"--reset", F_FLAG, O(reset), 0, 0, C_INIT | C_RUN, NULL,
     "delete the job's keys and tensors first"},
    {"--name", F_STR, O(name), 0, 0, C_WORK, "NAME", "consumer name (hostname-pid)"},
    {"--lease-ms", F_INT, O(lease_ms), 10, 1 << 30, C_WORK | C_RUN, "MS",
     "a task idle this long is claimed by another worker (30000)"},
    {"--window", F_INT, O(window), 1, 1024, C_WORK | C_RUN, "N", "outstanding pushes (2)"},
    {"--pull-every", F_INT, O(pull_every), 1, 1000, C_WORK | C_RUN, "K",
     "pull the model every K mini-batches, push every one (1)"},
    {"--overlap", F_INT, O(overlap), 0, 1, C_WORK | C_RUN, "0|1",
     "send the next pull before computing the gradient (1)"},
    {"--sync-rounds", F_INT, O(sync_rounds), 1, 1 << 20, C_WORK, "MS",
     "behind ps-relay --sync: after each push wait up to MS for the round's new model "
     "(implies --overlap 0)"},
    {"--pull-format", F_STR, O(pull_format), 0, 0, C_WORK | C_RUN, "FMT",
     "model on the wire: f32, bf16, f16 or i8 (the job's: i8 for a topk push format, else f32)"},
    {"--push-format", F_STR, O(push_format), 0, 0, C_INIT | C_WORK | C_RUN, "FMT",
     "gradients on the wire: f32 bf16 f16 i8 topk[:K] (K 0.01, 1% or a count; 1%); init "
     "records it (f32), workers push the job's"},
    {"--wait", F_INT, O(wait), 0, 64, C_WORK | C_RUN, "N",
     "WAIT for N replicas after each push (0)"},
    {"--on-degraded", F_STR, O(on_degraded), 0, 0, C_WORK | C_RUN, "POLICY",
     "a shard short of --wait replicas: degrade (train on, count unreplicated pushes), "
     "block (until a replica is back) or fail (degrade)"},
    {"--on-lost-state", F_STR, O(on_lost_state), 0, 0, C_ALL, "POLICY",
     "a tensor vanished or went back below an acknowledged version: stop or continue (stop)"},
    {"--interval-ms", F_INT, O(interval_ms), 10, 1 << 30, C_WORK | C_RUN, "MS",
     "progress interval (2000)"},
    {"--progress", F_STR, O(progress), 0, 0, C_WORK | C_RUN, "MODE",
     "auto | tty | line | none (auto: tty on a terminal)"},
    {"--max-tasks", F_INT, O(max_tasks), 1, INT_MAX, C_WORK, "N",
     "exit after N tasks (for tests)"},
    {"--at", F_STR, O(at), 0, 0, C_EVAL | C_SNAP, "SNAPSHOT",
     "eval: evaluate this snapshot; snapshot: its name"},
    {"--min-acc", F_DBL, O(min_acc), 0, 1, C_EVAL | C_RUN, "A",
     "exit 1 when the test accuracy is below A"},
    {"--workers", F_INT, O(workers), 1, 256, C_RUN, "N", "local worker processes (2)"},
    {"--threads", F_INT, O(threads), 1, 1024, C_ALL, "N",
     "OpenBLAS threads (workers: 1)"},
    {"--log-json", F_STR, O(log_json), 0, 0, C_WORK | C_EVAL | C_RUN, "FILE",
     "append the run as JSON lines to FILE (progress, eval, result; python3 -m redis_ps.plot)"},
    /* sparse CTR jobs (train_sparse_job.c) */
    {"--model", F_STR, O(model), 0, 0, C_INIT | C_RUN, "lr|fm|mlp",
     "sparse CTR model over an embedding table (makes the job sparse)"},
    {"--train", F_STR, O(train), 0, 0, C_INIT | C_RUN, "FILE",
     "sparse: train file, libsvm or Criteo TSV, plain or gzip"},
    {"--test", F_STR, O(test), 0, 0, C_INIT | C_EVAL | C_RUN, "FILE",
     "sparse: test file (eval: instead of the job's)"},
    {"--format", F_STR, O(format), 0, 0, C_INIT | C_RUN, "libsvm|criteo",
     "sparse: file format (libsvm; ids carry their field in the top 8 bits)"},
    {"--dim", F_INT, O(dim), 1, TR_SP_MAX_DIM, C_INIT | C_RUN, "K",
     "sparse: FM factors per id, MLP embedding dim (4)"},
    {"--fields", F_INT, O(fields), 1, TR_SP_MAX_FIELDS, C_INIT | C_RUN, "F",
     "sparse mlp: field slots of the input (26; criteo 39)"},
    {"--hidden", F_STR, O(hidden), 0, 0, C_INIT | C_RUN, "W1,W2,...",
     "sparse mlp: hidden widths (64,32)"},
    {"--table-optim", F_STR, O(table_optim), 0, 0, C_INIT | C_RUN, "NAME",
     "sparse: row optimizer: sgd momentum adagrad rowadagrad adam ftrl (adagrad)"},
    {"--table-lr", F_DBL, O(table_lr), 1e-12, 1e6, C_INIT | C_RUN, "X",
     "sparse: row learning rate, FTRL's alpha (0.05); dense tensors default to it"},
    {"--ftrl-beta", F_DBL, O(ftrl_beta), 1e-12, 1e6, C_INIT | C_RUN, "X", "FTRL beta (1)"},
    {"--l1", F_DBL, O(l1), 0, 1e6, C_INIT | C_RUN, "X", "FTRL L1 (0)"},
    {"--l2", F_DBL, O(l2), 0, 1e6, C_INIT | C_RUN, "X", "FTRL L2 (0)"},
    {"--init-std", F_DBL, O(init_std), 0, 1e6, C_INIT | C_RUN, "S",
     "sparse: rows start N(0, S^2) from (seed, id) (fm/mlp 0.1; lr and ftrl 0)"},
    {"--admit", F_INT, O(admit), 1, TR_SP_MAX_ADMIT, C_INIT | C_RUN, "N",
     "sparse: an id becomes a row on its N-th push, earlier gradients dropped (1)"},
    {"--capacity", F_LL, O(capacity), 1, TR_SP_MAX_CAPACITY, C_INIT | C_RUN, "N",
     "sparse: keep about N rows (N/shards per shard, least recently pushed evicted)"},
    {"--shards", F_INT, O(shards), 1, TR_SP_MAX_SHARDS, C_INIT | C_RUN, "N", "sparse: table shards (4)"},
    {"--shard-bytes", F_LL, O(shard_bytes), 1, TR_SP_MAX_SHARD_BYTES, C_INIT | C_RUN, "N",
     "sparse: bytes of the train file per task (4194304)"},
    {"--min-auc", F_DBL, O(min_auc), 0, 1, C_EVAL | C_RUN, "A",
     "sparse: exit 1 when the test AUC is below A"},
};
#define NFLAGS (sizeof(Flags) / sizeof(Flags[0]))
_Static_assert(NFLAGS <= 64, "trainOpts.given has one bit per flag");

typedef struct cmdDef {
    const char *name;
    int bit;
    const char *summary;
} cmdDef;

static const cmdDef Cmds[] = {
    {"init", C_INIT, "create the model tensors (or tables), the job config and its task stream"},
    {"work", C_WORK, "one worker: take tasks from the stream, train, push, ack"},
    {"eval", C_EVAL, "pull the model (or a snapshot) and report test loss/accuracy"},
    {"run", C_RUN, "init + N local workers + eval; prints accuracy, time, samples/s"},
    {"status", C_STATUS, "tasks total/acked/pending, versions, per-worker progress"},
    {"snapshot", C_SNAP, "PS.SNAPSHOT every partition of the model as --at NAME"},
    {"gen-ctr", 0, "write synthetic CTR data (libsvm) from a planted LR/FM model (own flags)"},
};
#define NCMDS (sizeof(Cmds) / sizeof(Cmds[0]))

static void usage_main(FILE *out) {
    fprintf(out, "usage: ps-train <command> --addr HOST:PORT --job NAME [flags]\n\n"
                 "Trains an MLP, or a sparse CTR model (--model), with the redis-ps parameter\nserver.\n\ncommands:\n");
    for (size_t i = 0; i < NCMDS; i++) fprintf(out, "  %-9s %s\n", Cmds[i].name, Cmds[i].summary);
    fprintf(out, "\n'ps-train <command> --help' lists the flags of a command.\n"
                 "exit codes: 0 ok, 1 runtime failure, 2 usage error (or settings that differ\n"
                 "from the existing job's), 3 the job has finished already (init, run),\n"
                 "130 interrupted (the job is resumable)\n"
                 "ps-train --version prints the release.\n");
}

static void usage_cmd(FILE *out, const cmdDef *cd) {
    fprintf(out, "usage: ps-train %s [flags]\n%s\n\nflags:\n", cd->name, cd->summary);
    for (size_t i = 0; i < NFLAGS; i++) {
        const flagDef *f = &Flags[i];
        char left[64];
        if (!(f->cmds & cd->bit)) continue;
        snprintf(left, sizeof(left), "%s%s%s", f->name, f->arg ? " " : "", f->arg ? f->arg : "");
        fprintf(out, "  %-28s %s\n", left, f->help);
    }
    if (cd->bit == C_RUN)
        fprintf(out, "\nrun passes the work flags to its workers and evaluates at the end.\n");
}

static void set_defaults(trainOpts *o) {
    memset(o, 0, sizeof(*o));
    o->layers = "784,128,10";
    o->optim = "sgd";
    o->lr = 0.1;
    o->momentum = -1;
    o->seed = 1;
    o->epochs = 1;
    o->shard_size = 1000;
    o->label_col = -1;
    o->lease_ms = 30000;
    o->window = 2;
    o->pull_every = 1;
    o->overlap = 1;
    o->on_degraded = "degrade";
    o->on_lost_state = "stop";
    o->interval_ms = 2000;
    o->progress = "auto";
    o->min_acc = -1;
    o->workers = 2;
    o->format = "libsvm";
    o->dim = 4;
    o->hidden = "64,32";
    o->table_optim = "adagrad";
    o->table_lr = 0.05;
    o->ftrl_beta = 1;
    o->init_std = -1;
    o->admit = 1;
    o->shards = 4;
    o->shard_bytes = 4 << 20;
    o->min_auc = -1;
}

/* Parses one flag value into 'o'. Returns 0 or -1 (message printed). */
static int parse_value(const char *cmd, const flagDef *f, const char *v, trainOpts *o) {
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
        if ((double)n < f->lo || (double)n > f->hi) goto range;
        if (f->type == F_INT)
            *(int *)p = (int)n;
        else
            *(long long *)p = n;
        return 0;
    }
    case F_DBL: {
        double d = strtod(v, &end);
        if (errno || end == v || *end != '\0' || d != d) goto notnum;
        if (d < f->lo || d > f->hi) goto range;
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

static int valid_job(const char *j) {
    size_t n = strlen(j);
    if (n == 0 || n > TR_JOB_MAX) return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = j[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_' || ch == '.' || ch == '-'))
            return 0;
    }
    return 1;
}

/* Checks cross-flag rules after parsing. Returns 0 or -1 (printed). */
static int validate(trainOpts *o, int bit) {
    const char *c = o->cmd;
    if (!o->addr) {
        fprintf(stderr, "ps-train %s: --addr is required\n", c);
        return -1;
    }
    if (!o->job) {
        fprintf(stderr, "ps-train %s: --job is required\n", c);
        return -1;
    }
    if (!valid_job(o->job)) {
        fprintf(stderr, "ps-train %s: --job: '%s' must be 1..%d of [A-Za-z0-9_.-]\n", c, o->job,
                TR_JOB_MAX);
        return -1;
    }
    if (bit & (C_INIT | C_RUN)) {
        /* The tensor optimizers that train (common/protocol.h). */
        if (ps_proto_optim_for(o->optim, PS_PROTO_KIND_TENSOR, 1) < 0) {
            char names[160];
            fprintf(stderr, "ps-train %s: --optim: unknown optimizer '%s' (%s)\n", c, o->optim,
                    ps_proto_optim_names(PS_PROTO_KIND_TENSOR, 1, " ", names, sizeof(names)));
            return -1;
        }
        char err[256];
        int sizes[TR_MAX_LAYERS];
        if (ps_parse_layers(o->layers, sizes, TR_MAX_LAYERS, err, sizeof(err)) < 0) {
            fprintf(stderr, "ps-train %s: --layers: %s\n", c, err);
            return -1;
        }
        if (o->data && o->csv) {
            fprintf(stderr, "ps-train %s: --data and --csv are exclusive\n", c);
            return -1;
        }
        if (o->test_csv && !o->csv) {
            fprintf(stderr, "ps-train %s: --test-csv needs --csv\n", c);
            return -1;
        }
        if (bit == C_RUN && o->csv && !o->test_csv) {
            fprintf(stderr, "ps-train run: --csv needs --test-csv FILE (run evaluates the "
                            "model on it at the end)\n");
            return -1;
        }
    }
    if (tr_sparse_validate(o, (bit & (C_INIT | C_RUN)) != 0) != 0) return -1;
    if (bit == C_SNAP && !o->at) {
        fprintf(stderr, "ps-train snapshot: --at NAME is required\n");
        return -1;
    }
    if (bit & (C_WORK | C_RUN)) {
        psWireFormat wf;
        if (tr_parse_wire(o->pull_format, 1, &wf) != 0) {
            fprintf(stderr, "ps-train %s: --pull-format: '%s' is not f32, bf16, f16 or i8\n", c,
                    o->pull_format);
            return -1;
        }
    }
    pushFormat pf;
    if ((bit & (C_INIT | C_WORK | C_RUN)) && tr_parse_push(o->push_format, &pf) != 0) {
        fprintf(stderr, "ps-train %s: --push-format: '%s' is not f32, bf16, f16, i8 or topk[:K] "
                        "(K: a fraction 0.01, a percent 1%% or a count 1000)\n", c,
                o->push_format);
        return -1;
    }
    {
        int dp, lp;
        if (tr_parse_policies(o, &dp, &lp) != 0) {
            fprintf(stderr, "ps-train %s: --on-degraded is degrade, block or fail; "
                            "--on-lost-state is stop or continue\n", c);
            return -1;
        }
    }
    if (o->sync_rounds && (o->pull_every != 1 || (tr_given(o, "--overlap") && o->overlap))) {
        fprintf(stderr, "ps-train %s: --sync-rounds pulls after every push: it needs "
                        "--pull-every 1 and --overlap 0\n", c);
        return -1;
    }
    if (o->sync_rounds) o->overlap = 0;
    if (o->progress && strcmp(o->progress, "auto") && strcmp(o->progress, "tty") &&
        strcmp(o->progress, "line") && strcmp(o->progress, "none")) {
        fprintf(stderr, "ps-train %s: --progress: '%s' is not auto, tty, line or none\n", c,
                o->progress);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    trainOpts o;
    /* A connection killed by the server (CLIENT KILL, failover) must be an
     * I/O error that libps retries, not a SIGPIPE that ends the worker. */
    signal(SIGPIPE, SIG_IGN);
    set_defaults(&o);
    o.self = argv[0];
    if (argc < 2) {
        usage_main(stderr);
        return TR_EXIT_USAGE;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage_main(stdout);
        return TR_EXIT_OK;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
#ifndef REDIS_PS_VERSION
#define REDIS_PS_VERSION "unknown"
#endif
        printf("ps-train (redis-ps) %s, hiredis %d.%d.%d\n", REDIS_PS_VERSION, HIREDIS_MAJOR,
               HIREDIS_MINOR, HIREDIS_PATCH);
        return TR_EXIT_OK;
    }
    if (!strcmp(argv[1], "gen-ctr")) return ps_gen_ctr_main(argc - 1, argv + 1);
    const cmdDef *cd = NULL;
    for (size_t i = 0; i < NCMDS; i++)
        if (!strcmp(argv[1], Cmds[i].name)) cd = &Cmds[i];
    if (!cd) {
        fprintf(stderr, "ps-train: unknown command '%s'\n", argv[1]);
        usage_main(stderr);
        return TR_EXIT_USAGE;
    }
    o.cmd = cd->name;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage_cmd(stdout, cd);
            return TR_EXIT_OK;
        }
        const flagDef *f = NULL;
        for (size_t k = 0; k < NFLAGS; k++)
            if (!strcmp(a, Flags[k].name)) f = &Flags[k];
        if (!f) {
            fprintf(stderr, "ps-train %s: unknown flag '%s' (see ps-train %s --help)\n", cd->name,
                    a, cd->name);
            return TR_EXIT_USAGE;
        }
        if (!(f->cmds & cd->bit)) {
            fprintf(stderr, "ps-train %s: %s does not apply to %s\n", cd->name, a, cd->name);
            return TR_EXIT_USAGE;
        }
        o.given |= 1ULL << (f - Flags);
        if (f->type == F_FLAG) {
            *(int *)((char *)&o + f->off) = 1;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "ps-train %s: %s needs a value (%s)\n", cd->name, a, f->arg);
            return TR_EXIT_USAGE;
        }
        if (parse_value(cd->name, f, argv[++i], &o) != 0) return TR_EXIT_USAGE;
    }
    if (validate(&o, cd->bit) != 0) return TR_EXIT_USAGE;

    switch (cd->bit) {
    case C_INIT: return tr_cmd_init(&o);
    case C_WORK: return tr_cmd_work(&o);
    case C_EVAL: return tr_cmd_eval(&o);
    case C_RUN: return tr_cmd_run(&o, argc, argv);
    case C_STATUS: return tr_cmd_status(&o);
    case C_SNAP: return tr_cmd_snapshot(&o);
    }
    return TR_EXIT_USAGE;
}

int tr_given(const trainOpts *o, const char *name) {
    for (size_t i = 0; i < NFLAGS; i++)
        if (!strcmp(Flags[i].name, name)) return (o->given >> i) & 1;
    return 0;
}
