/* ps_bench.h -- what the files of ps_bench share: the ops, the command-line
 * options, the results (samples and cells), and the functions of the
 * measuring client (client.c) and of the report (report.c). main() and the
 * command line are in ps_bench.c, whose opening comment describes the
 * program. */
#ifndef PS_BENCH_H
#define PS_BENCH_H

#include <stddef.h>

#include <hiredis/hiredis.h>

enum { OP_SET, OP_SGD, OP_ADAM, OP_GET, OP_PULL, NOPS };

/* Names in the table, --ops flags, and the Redis command each op is compared
 * with (-1: it is a baseline itself); defined in ps_bench.c. */
extern const char *const op_name[NOPS];
extern const char *const op_flag[NOPS];
extern const int op_base[NOPS];

#define MAX_SIZES 8
#define MAX_CLIENTS 4   /* distinct client counts */
#define MAX_PIPES 4     /* distinct pipeline settings */
#define MAX_REPS 32
#define MAX_THREADS 64
#define RBUF_BYTES (1 << 20)
#define IOV_BATCH 64

typedef struct options {
    const char *host;
    int port;
    int reps;     /* repetition rounds per cell */
    int reps_big; /* ... for sizes above BIG_FLOATS */
    int time_ms;  /* duration of one repetition of one op */
    size_t sizes[MAX_SIZES];
    int nsizes;
    int clients[MAX_CLIENTS];
    int nclients;
    int pipes[MAX_PIPES]; /* 0 = the default depth of the size */
    int npipes;
    int ops[NOPS]; /* 1 = measured */
    int targets;
} options;

#define BIG_FLOATS (4u << 20)

/* One repetition of one op in one cell. */
typedef struct sample {
    double ops_s;  /* operations per second, all clients together */
    double cpu_us; /* server CPU per operation, microseconds */
} sample;

/* One cell: a size, a number of clients, a pipeline depth; every op, every rep. */
typedef struct cell {
    size_t floats;
    int clients;
    int depth;
    int reps;
    sample s[NOPS][MAX_REPS];
} cell;

/* The formatted commands of one size, one per op (from redisFormatCommandArgv). */
typedef struct cmdset {
    char *cmd[NOPS];
    size_t len[NOPS];
} cmdset;

/* ---- small helpers (report.c) */

/* Monotonic clock in seconds. */
double now_s(void);
/* Human size of 'floats' elements ("16", "64K", "1M") or of 'bytes' ("64 B",
 * "256 KB", "4 MB"), written into 'buf'; returns 'buf'. */
const char *floats_str(size_t floats, char *buf, size_t cap);
const char *bytes_str(size_t bytes, char *buf, size_t cap);

/* ---- the measuring client (client.c) */

/* Connects to 'host':'port'; 'bench' connections get the payload-free reply
 * functions and a kept read buffer. Exits on failure. */
redisContext *connect_or_die(const char *host, int port, int bench);
/* Runs a command on the control connection; the reply is the caller's (free
 * with freeReplyObject). Exits on an error or an error reply. */
redisReply *ctl_cmd(redisContext *ctl, int argc, const char **argv, const size_t *lens);
/* Opens the 'n' benchmark connections run_rep uses (n <= MAX_THREADS), and
 * closes them. Exit on failure. */
void bench_conns_open(const char *host, int port, int n);
void bench_conns_close(void);
/* Runs 'op' with 'clients' connections at 'depth' for 'seconds'. Returns the
 * sample; exits on error. */
sample run_rep(redisContext *ctl, const cmdset *cs, int op, size_t bytes, int clients, int depth,
               double seconds);

/* ---- the report (report.c) */

/* The table of every measured op in every cell. */
void print_table(const options *o, const cell *cells, int ncells);
/* The 'targets' block: PASS / MISS per target of the benchmark issue. */
void print_targets(const options *o, const cell *cells, int ncells);

#endif
