/* ps-train.c -- the redis-ps training tool: command line and dispatch.
 *
 *   ps-train init|work|eval|run|status|snapshot|stream --addr A --job J [flags]
 *
 * Every subcommand has --help. Flags are parsed strictly from one table
 * (opts.c: name, type, bounds, subcommands, model kinds, default); an error names the flag
 * and the problem and exits with TR_EXIT_USAGE (2). Runtime failures exit
 * with TR_EXIT_FAIL (1). The flag table is opts.c's; the subcommands are
 * cmds.h's. */

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cmds.h"
#include "config.h"
#include "conn.h"
#include "opts.h"
#include "protocol.h"
#include "sparse.h"
#include "util.h"
#include "wirefmt.h"

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
    {"stream", C_STREAM, "online training of a sparse job from a Redis Stream of events "
                         "(exactly once, progressive AUC)"},
    {"gen-ctr", 0, "deprecated: runs ps-gen-ctr (synthetic CTR data; own flags)"},
};
#define NCMDS (sizeof(Cmds) / sizeof(Cmds[0]))

static void usage_main(FILE *out) {
    fprintf(out, "usage: ps-train <command> --addr HOST:PORT --job NAME [flags]\n\n"
                 "Trains an MLP, or a sparse CTR model (--model), with the redis-ps parameter\nserver.\n\ncommands:\n");
    for (size_t i = 0; i < NCMDS; i++) fprintf(out, "  %-9s %s\n", Cmds[i].name, Cmds[i].summary);
    fprintf(out, "\n'ps-train <command> --help' lists the flags of a command, 'ps-train help "
                 "flags'\nevery flag with its subcommands, model kinds and default.\n"
                 "exit codes: 0 ok, 1 runtime failure, 2 usage error (or settings that differ\n"
                 "from the existing job's), 3 the job has finished already (init, run),\n"
                 "130 interrupted (the job is resumable)\n"
                 "ps-train --version prints the release.\n");
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
        if (ps_parse_layers(o->dense.layers, sizes, TR_MAX_LAYERS, err, sizeof(err)) < 0) {
            fprintf(stderr, "ps-train %s: --layers: %s\n", c, err);
            return -1;
        }
        if (o->dense.data && o->dense.csv) {
            fprintf(stderr, "ps-train %s: --data and --csv are exclusive\n", c);
            return -1;
        }
        if (o->dense.test_csv && !o->dense.csv) {
            fprintf(stderr, "ps-train %s: --test-csv needs --csv\n", c);
            return -1;
        }
        if (bit == C_RUN && o->dense.csv && !o->dense.test_csv) {
            fprintf(stderr, "ps-train run: --csv needs --test-csv FILE (run evaluates the "
                            "model on it at the end)\n");
            return -1;
        }
    }
    if ((bit & (C_INIT | C_RUN)) && tr_opts_check_kind(o) != 0) return -1;
    if (tr_sparse_validate(o, (bit & (C_INIT | C_RUN)) != 0) != 0) return -1;
    if (bit == C_STREAM && !o->stream) {
        fprintf(stderr, "ps-train stream: --stream KEY is required\n");
        return -1;
    }
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

/* `ps-train gen-ctr ARGS` (deprecated): runs ps-gen-ctr ARGS, first the one
 * next to this binary (build/ or the install's bin/), then from PATH. */
static int gen_ctr_alias(int argc, char **argv) {
    char self[4096], path[4200];
    fprintf(stderr, "ps-train: note: 'ps-train gen-ctr' is deprecated; run ps-gen-ctr (same "
                    "flags)\n");
    fflush(stderr);
    char **args = calloc((size_t)argc, sizeof(char *));
    if (args == NULL) return TR_EXIT_FAIL;
    args[0] = "ps-gen-ctr";
    for (int i = 2; i < argc; i++) args[i - 1] = argv[i];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n > 0) {
        self[n] = '\0';
        char *slash = strrchr(self, '/');
        if (slash) {
            *slash = '\0';
            snprintf(path, sizeof(path), "%s/ps-gen-ctr", self);
            execv(path, args);
        }
    }
    execvp("ps-gen-ctr", args);
    fprintf(stderr, "ps-train gen-ctr: cannot run ps-gen-ctr: %s\n", strerror(errno));
    free(args);
    return TR_EXIT_FAIL;
}

int main(int argc, char **argv) {
    trainOpts o;
    /* A connection killed by the server (CLIENT KILL, failover) must be an
     * I/O error that libps retries, not a SIGPIPE that ends the worker. */
    signal(SIGPIPE, SIG_IGN);
    memset(&o, 0, sizeof(o));
    o.self = argv[0];
    if (argc < 2) {
        usage_main(stderr);
        return TR_EXIT_USAGE;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        if (argc > 2 && !strcmp(argv[1], "help") && !strcmp(argv[2], "flags"))
            tr_opts_table(stdout);
        else
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
    if (!strcmp(argv[1], "gen-ctr")) return gen_ctr_alias(argc, argv);
    const cmdDef *cd = NULL;
    for (size_t i = 0; i < NCMDS; i++)
        if (!strcmp(argv[1], Cmds[i].name)) cd = &Cmds[i];
    if (!cd) {
        fprintf(stderr, "ps-train: unknown command '%s'\n", argv[1]);
        usage_main(stderr);
        return TR_EXIT_USAGE;
    }
    int rc = tr_opts_parse(cd->name, cd->bit, cd->summary, argc, argv, 2, &o);
    if (rc != 0) return rc > 0 ? TR_EXIT_OK : TR_EXIT_USAGE;
    if (validate(&o, cd->bit) != 0) return TR_EXIT_USAGE;

    switch (cd->bit) {
    case C_INIT: return tr_cmd_init(&o);
    case C_WORK: return tr_cmd_work(&o);
    case C_EVAL: return tr_cmd_eval(&o);
    case C_RUN: return tr_cmd_run(&o);
    case C_STATUS: return tr_cmd_status(&o);
    case C_SNAP: return tr_cmd_snapshot(&o);
    case C_STREAM: return tr_cmd_stream(&o);
    }
    return TR_EXIT_USAGE;
}
