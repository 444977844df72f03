/* ps_bench.c -- PS.PUSHGRAD and PS.PULL throughput next to Redis's own SET and
 * GET of the same bytes, measured in one run against the same server.
 *
 * Absolute numbers on a shared 2-core VM drift by +-30% from run to run, so
 * what this program reports are ratios: every PS command is measured in the
 * same repetition round as its baseline (PUSHGRAD next to SET, PULL next to
 * GET), the rounds are interleaved (SET, PUSHGRAD SGD, PUSHGRAD ADAM, GET,
 * PULL, SET, ...) so drift hits all of them, and the ratio column is the
 * median over the rounds of the paired per-round ratios.
 *
 *   ps_bench --port P [--host 127.0.0.1] [--reps 7] [--reps-big 3] [--time-ms 200]
 *            [--sizes 16,65536,1048576,16777216] [--clients 1,4] [--pipeline 0,1]
 *            [--ops set,sgd,adam,get,pull] [--no-targets]
 *
 * It starts nothing: the server (redis-server --loadmodule build/ps.so) is
 * given by --host/--port (bench/run.sh starts a private one). It creates and
 * finally deletes keys named "ps-bench:*".
 *
 * For every size (float32 elements), number of clients (threads, one
 * connection each) and pipeline depth (1 = one outstanding command; 0 in
 * --pipeline stands for the default depth of the size: 32 for <= 1K floats,
 * 16 for <= 64K floats, 4 above) it runs --reps rounds (--reps-big for sizes
 * above 4M floats) of every op for --time-ms each, and prints one table row
 * per op: ops/s, MB/s (payload bytes, 1 MB = 10^6 bytes), server CPU per op
 * (delta of INFO cpu used_cpu_sys + used_cpu_user over the repetition, in
 * microseconds), the baseline op and its MB/s, and the ratio. A 'targets'
 * block then evaluates the targets of the benchmark issue (PASS / MISS).
 *
 * A client sends 'depth' commands with one writev, reads the 'depth' replies,
 * and repeats (as redis-benchmark -P does). Commands are formatted once and
 * written to the socket from that one buffer; replies
 * are parsed by hiredis's reader with reply functions that keep only lengths
 * and integers, so the client does not copy or allocate the payload per
 * reply. Exit status: 0 when every command answered as expected (a MISS is
 * not an error), 1 on any error, 2 on bad usage. */

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_bench.h"

/* Files: ps_bench.c (this: the command line, setup of each size, main),
 * client.c (the measuring client), report.c (table and targets). */

const char *const op_name[NOPS] = {"SET", "PUSHGRAD SGD", "PUSHGRAD ADAM", "GET", "PULL F32"};
const char *const op_flag[NOPS] = {"set", "sgd", "adam", "get", "pull"};
const int op_base[NOPS] = {-1, OP_SET, OP_SET, -1, OP_GET};

/* The results, one cell per (size, clients, pipeline), in measuring order. */
static cell *cells;
static int ncells;

/* The pipeline depth that --pipeline 0 stands for. */
static int default_depth(size_t floats)
{
    return floats <= 1024 ? 32 : floats <= 65536 ? 16 : 4;
}

/* ------------------------------------------------------------------------- */
/* Setup of one size                                                          */
/* ------------------------------------------------------------------------- */

static void key_of(char *buf, size_t cap, const char *kind, size_t floats)
{
    snprintf(buf, cap, "ps-bench:%s:%zu", kind, floats);
}

/* Creates the two tensors and the string key of 'floats' elements and
 * formats the five commands. 'blob' holds the payload. */
static void setup_size(redisContext *ctl, size_t floats, const char *blob, cmdset *cs)
{
    char ksgd[64], kadam[64], kset[64], nbuf[32];
    size_t bytes = floats * 4;
    key_of(ksgd, sizeof(ksgd), "sgd", floats);
    key_of(kadam, sizeof(kadam), "adam", floats);
    key_of(kset, sizeof(kset), "set", floats);
    snprintf(nbuf, sizeof(nbuf), "%zu", floats);

    const char *del[] = {"DEL", ksgd, kadam, kset};
    freeReplyObject(ctl_cmd(ctl, 4, del, NULL));
    const char *cs_sgd[] = {"PS.CREATE", ksgd, "SHAPE", nbuf, "INIT", "ZEROS", "OPTIM", "SGD",
                            "LR", "0.001"};
    freeReplyObject(ctl_cmd(ctl, 10, cs_sgd, NULL));
    const char *cs_adam[] = {"PS.CREATE", kadam, "SHAPE", nbuf, "INIT", "ZEROS", "OPTIM", "ADAM",
                             "LR", "0.001"};
    freeReplyObject(ctl_cmd(ctl, 10, cs_adam, NULL));
    const char *set[] = {"SET", kset, blob};
    size_t setl[] = {3, strlen(kset), bytes};
    freeReplyObject(ctl_cmd(ctl, 3, set, setl));

    const char *a_set[] = {"SET", kset, blob};
    const char *a_sgd[] = {"PS.PUSHGRAD", ksgd, blob};
    const char *a_adam[] = {"PS.PUSHGRAD", kadam, blob};
    const char *a_get[] = {"GET", kset};
    /* F32 is PS.PULL's default format: libps sends no FORMAT for it. */
    const char *a_pull[] = {"PS.PULL", ksgd};
    size_t l_set[] = {3, strlen(kset), bytes};
    size_t l_sgd[] = {11, strlen(ksgd), bytes};
    size_t l_adam[] = {11, strlen(kadam), bytes};
    size_t l_get[] = {3, strlen(kset)};
    size_t l_pull[] = {7, strlen(ksgd)};
    const char **argvs[NOPS] = {a_set, a_sgd, a_adam, a_get, a_pull};
    const size_t *lens[NOPS] = {l_set, l_sgd, l_adam, l_get, l_pull};
    const int argcs[NOPS] = {3, 3, 3, 2, 2};
    for (int op = 0; op < NOPS; op++) {
        int n = redisFormatCommandArgv(&cs->cmd[op], argcs[op], argvs[op], lens[op]);
        if (n < 0) {
            fprintf(stderr, "ps_bench: out of memory formatting %s\n", op_name[op]);
            exit(1);
        }
        cs->len[op] = (size_t)n;
    }
}

static void teardown_size(redisContext *ctl, size_t floats, cmdset *cs)
{
    char ksgd[64], kadam[64], kset[64];
    key_of(ksgd, sizeof(ksgd), "sgd", floats);
    key_of(kadam, sizeof(kadam), "adam", floats);
    key_of(kset, sizeof(kset), "set", floats);
    const char *del[] = {"DEL", ksgd, kadam, kset};
    freeReplyObject(ctl_cmd(ctl, 4, del, NULL));
    for (int op = 0; op < NOPS; op++) redisFreeCommand(cs->cmd[op]);
}

/* ------------------------------------------------------------------------- */
/* Command line                                                               */
/* ------------------------------------------------------------------------- */

static void usage(FILE *out)
{
    fprintf(out,
            "usage: ps_bench --port P [--host 127.0.0.1] [--reps 7] [--reps-big 3]\n"
            "                [--time-ms 200] [--sizes 16,65536,1048576,16777216]\n"
            "                [--clients 1,4] [--pipeline 1,0] [--ops set,sgd,adam,get,pull]\n"
            "                [--no-targets]\n"
            "Measures PS.PUSHGRAD / PS.PULL next to SET / GET of the same bytes on a server\n"
            "that loads the ps module. --pipeline: depths, 0 = default of the size (32 for\n"
            "<= 1K floats, 16 for <= 64K, 4 above). --reps-big: rounds for sizes > 4M floats.\n");
}

/* Parses a comma list of integers in [lo, hi] into 'out' (at most 'max').
 * Returns the count, or -1. */
static int parse_list(const char *s, long lo, long hi, long *out, int max)
{
    int n = 0;
    while (*s) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (errno || end == s || v < lo || v > hi || n == max) return -1;
        out[n++] = v;
        if (*end == ',') end++;
        else if (*end != '\0') return -1;
        s = end;
    }
    return n;
}

static int parse_options(int argc, char **argv, options *o)
{
    long v[MAX_SIZES];
    int n;
    const char *a = "";
    *o = (options){.host = "127.0.0.1", .port = 0, .reps = 7, .reps_big = 3, .time_ms = 200,
                   .sizes = {16, 65536, 1u << 20, 16u << 20}, .nsizes = 4,
                   .clients = {1, 4}, .nclients = 2, .pipes = {1, 0}, .npipes = 2,
                   .ops = {1, 1, 1, 1, 1}, .targets = 1};
    for (int i = 1; i < argc; i++) {
        a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return 1;
        if (!strcmp(a, "--no-targets")) {
            o->targets = 0;
            continue;
        }
        if (i + 1 >= argc) goto bad;
        const char *val = argv[++i];
        if (!strcmp(a, "--host")) {
            o->host = val;
        } else if (!strcmp(a, "--port")) {
            if (parse_list(val, 1, 65535, v, 1) != 1) goto bad;
            o->port = (int)v[0];
        } else if (!strcmp(a, "--reps")) {
            if (parse_list(val, 1, MAX_REPS, v, 1) != 1) goto bad;
            o->reps = (int)v[0];
        } else if (!strcmp(a, "--reps-big")) {
            if (parse_list(val, 1, MAX_REPS, v, 1) != 1) goto bad;
            o->reps_big = (int)v[0];
        } else if (!strcmp(a, "--time-ms")) {
            if (parse_list(val, 1, 600000, v, 1) != 1) goto bad;
            o->time_ms = (int)v[0];
        } else if (!strcmp(a, "--sizes")) {
            if ((n = parse_list(val, 1, 1L << 28, v, MAX_SIZES)) < 1) goto bad;
            for (int k = 0; k < n; k++) o->sizes[k] = (size_t)v[k];
            o->nsizes = n;
        } else if (!strcmp(a, "--clients")) {
            if ((n = parse_list(val, 1, MAX_THREADS, v, MAX_CLIENTS)) < 1) goto bad;
            for (int k = 0; k < n; k++) o->clients[k] = (int)v[k];
            o->nclients = n;
        } else if (!strcmp(a, "--pipeline")) {
            if ((n = parse_list(val, 0, 1024, v, MAX_PIPES)) < 1) goto bad;
            for (int k = 0; k < n; k++) o->pipes[k] = (int)v[k];
            o->npipes = n;
        } else if (!strcmp(a, "--ops")) {
            char buf[128];
            snprintf(buf, sizeof(buf), "%s", val);
            memset(o->ops, 0, sizeof(o->ops));
            for (char *save, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                int found = 0;
                for (int op = 0; op < NOPS; op++)
                    if (!strcmp(t, op_flag[op])) o->ops[op] = found = 1;
                if (!found) goto bad;
            }
        } else {
            goto bad;
        }
    }
    if (o->port == 0) {
        fprintf(stderr, "ps_bench: --port is required\n");
        return -1;
    }
    return 0;
bad:
    fprintf(stderr, "ps_bench: bad value or unknown option '%s'\n", a);
    return -1;
}

/* ------------------------------------------------------------------------- */
/* main                                                                       */
/* ------------------------------------------------------------------------- */

int main(int argc, char **argv)
{
    options o;
    int rc = parse_options(argc, argv, &o);
    if (rc) {
        usage(rc > 0 ? stdout : stderr);
        return rc > 0 ? 0 : 2;
    }
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);

    int max_clients = 1;
    for (int i = 0; i < o.nclients; i++)
        if (o.clients[i] > max_clients) max_clients = o.clients[i];
    redisContext *ctl = connect_or_die(o.host, o.port, 0);
    bench_conns_open(o.host, o.port, max_clients);

    redisReply *info = redisCommand(ctl, "INFO server");
    if (info && info->type == REDIS_REPLY_STRING) {
        const char *p = strstr(info->str, "redis_version:");
        int len = p ? (int)strcspn(p, "\r\n") : 0;
        printf("ps_bench: server %s:%d, %.*s; %d reps (%d above 4M floats) of %d ms per op "
               "and cell, rounds interleaved\n",
               o.host, o.port, len, p ? p : "", o.reps, o.reps_big, o.time_ms);
    }
    freeReplyObject(info);

    cells = calloc((size_t)o.nsizes * MAX_CLIENTS * MAX_PIPES, sizeof(cell));
    if (cells == NULL) return 1;
    double tstart = now_s();
    for (int si = 0; si < o.nsizes; si++) {
        size_t floats = o.sizes[si], bytes = floats * 4;
        char *blob = malloc(bytes);
        if (blob == NULL) {
            fprintf(stderr, "ps_bench: out of memory for %zu floats\n", floats);
            return 1;
        }
        for (size_t i = 0; i < floats; i++) {
            float x = (float)((int)(i % 97) - 48) * 1e-4f;
            memcpy(blob + 4 * i, &x, 4);
        }
        cmdset cs;
        setup_size(ctl, floats, blob, &cs);
        free(blob);
        int reps = floats > BIG_FLOATS ? o.reps_big : o.reps;
        /* Warm-up: touch every value, state array and buffer once. */
        for (int op = 0; op < NOPS; op++)
            if (o.ops[op]) run_rep(ctl, &cs, op, bytes, 1, 1, 0.0);
        for (int ci = 0; ci < o.nclients; ci++) {
            for (int pi = 0; pi < o.npipes; pi++) {
                cell *c = &cells[ncells++];
                c->floats = floats;
                c->clients = o.clients[ci];
                c->depth = o.pipes[pi] ? o.pipes[pi] : default_depth(floats);
                c->reps = reps;
                double t0 = now_s();
                for (int r = 0; r < reps; r++)
                    for (int op = 0; op < NOPS; op++)
                        if (o.ops[op])
                            c->s[op][r] = run_rep(ctl, &cs, op, bytes, c->clients, c->depth,
                                                  o.time_ms / 1e3);
                char fb[32];
                fprintf(stderr, "ps_bench: %s floats, %d client(s), pipeline %d: %.1f s\n",
                        floats_str(floats, fb, sizeof(fb)), c->clients, c->depth,
                        now_s() - t0);
            }
        }
        teardown_size(ctl, floats, &cs);
    }
    print_table(&o, cells, ncells);
    if (o.targets) print_targets(&o, cells, ncells);
    printf("\nps_bench: done in %.0f s\n", now_s() - tstart);

    bench_conns_close();
    redisFree(ctl);
    free(cells);
    return 0;
}
