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
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/uio.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

/* ------------------------------------------------------------------------- */
/* Ops, sizes, results                                                        */
/* ------------------------------------------------------------------------- */

enum { OP_SET, OP_SGD, OP_ADAM, OP_GET, OP_PULL, NOPS };

static const char *const op_name[NOPS] = {"SET", "PUSHGRAD SGD", "PUSHGRAD ADAM", "GET",
                                          "PULL F32"};
static const char *const op_flag[NOPS] = {"set", "sgd", "adam", "get", "pull"};
/* The Redis command each op is compared with (-1: it is a baseline itself). */
static const int op_base[NOPS] = {-1, OP_SET, OP_SET, -1, OP_GET};

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

static cell *cells;
static int ncells;

/* ------------------------------------------------------------------------- */
/* Small helpers                                                              */
/* ------------------------------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median of 'n' values (copied, 'v' is left as it is). */
static double median(const double *v, int n)
{
    double t[MAX_REPS];
    if (n <= 0) return 0;
    memcpy(t, v, (size_t)n * sizeof(double));
    qsort(t, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* Human size of 'floats' elements, e.g. "16", "64K", "1M", "16M". */
static const char *floats_str(size_t floats, char *buf, size_t cap)
{
    if (floats >= (1u << 20) && floats % (1u << 20) == 0)
        snprintf(buf, cap, "%zuM", floats >> 20);
    else if (floats >= 1024 && floats % 1024 == 0)
        snprintf(buf, cap, "%zuK", floats >> 10);
    else
        snprintf(buf, cap, "%zu", floats);
    return buf;
}

/* Human size of 'bytes', e.g. "64 B", "256 KB", "4 MB" (binary units). */
static const char *bytes_str(size_t bytes, char *buf, size_t cap)
{
    if (bytes >= (1u << 20) && bytes % (1u << 20) == 0)
        snprintf(buf, cap, "%zu MB", bytes >> 20);
    else if (bytes >= 1024 && bytes % 1024 == 0)
        snprintf(buf, cap, "%zu KB", bytes >> 10);
    else
        snprintf(buf, cap, "%zu B", bytes);
    return buf;
}

static int default_depth(size_t floats)
{
    return floats <= 1024 ? 32 : floats <= 65536 ? 16 : 4;
}

/* ------------------------------------------------------------------------- */
/* Reply objects that keep no payload                                         */
/* ------------------------------------------------------------------------- */

/* hiredis's default reply functions copy every bulk string into a fresh
 * allocation; for 64 MB replies that costs the client a page fault per 4 KB
 * and steals CPU from the server on a small machine. These keep the type, the
 * length, integers, the first bytes of status/error text, and two array
 * elements (enough for PS.PULL's [version, data]). */
typedef struct breply {
    int type;
    long long integer;
    size_t len;
    int elements;
    struct breply *el[2];
    char text[128];
} breply;

static void breply_free(void *p)
{
    breply *r = p;
    if (r == NULL) return;
    for (int i = 0; i < 2; i++) breply_free(r->el[i]);
    free(r);
}

/* Attaches 'r' to its parent array (if any); returns 'r', or NULL (out of memory). */
static void *breply_attach(const redisReadTask *task, breply *r)
{
    if (r == NULL) return NULL;
    if (task->parent != NULL) {
        breply *p = task->parent->obj;
        if (task->idx >= 0 && task->idx < 2) p->el[task->idx] = r;
        else free(r);
    }
    return r;
}

static void *breply_string(const redisReadTask *task, char *str, size_t len)
{
    breply *r = calloc(1, sizeof(*r));
    if (r == NULL) return NULL;
    r->type = task->type;
    r->len = len;
    if (task->type != REDIS_REPLY_STRING) {
        size_t k = len < sizeof(r->text) - 1 ? len : sizeof(r->text) - 1;
        memcpy(r->text, str, k);
    }
    return breply_attach(task, r);
}

static void *breply_array(const redisReadTask *task, int elements)
{
    breply *r = calloc(1, sizeof(*r));
    if (r == NULL) return NULL;
    r->type = REDIS_REPLY_ARRAY;
    r->elements = elements;
    return breply_attach(task, r);
}

static void *breply_integer(const redisReadTask *task, long long v)
{
    breply *r = calloc(1, sizeof(*r));
    if (r == NULL) return NULL;
    r->type = REDIS_REPLY_INTEGER;
    r->integer = v;
    return breply_attach(task, r);
}

static void *breply_nil(const redisReadTask *task)
{
    breply *r = calloc(1, sizeof(*r));
    if (r == NULL) return NULL;
    r->type = REDIS_REPLY_NIL;
    return breply_attach(task, r);
}

static redisReplyObjectFunctions breply_fns = {breply_string, breply_array, breply_integer,
                                               breply_nil, breply_free};

/* Reads one reply from 'c' into '*out' with reads of up to RBUF_BYTES into
 * 'rbuf' (hiredis itself reads 16 KB at a time). Returns 0, or -1 with a
 * message in 'err'. */
static int read_reply(redisContext *c, char *rbuf, breply **out, char *err, size_t errcap)
{
    void *r = NULL;
    if (redisReaderGetReply(c->reader, &r) != REDIS_OK) goto proto;
    while (r == NULL) {
        ssize_t n = read(c->fd, rbuf, RBUF_BYTES);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            snprintf(err, errcap, "read: %s", n == 0 ? "connection closed" : strerror(errno));
            return -1;
        }
        if (redisReaderFeed(c->reader, rbuf, (size_t)n) != REDIS_OK) goto proto;
        if (redisReaderGetReply(c->reader, &r) != REDIS_OK) goto proto;
    }
    *out = r;
    return 0;
proto:
    snprintf(err, errcap, "protocol error: %s", c->reader->errstr);
    return -1;
}

/* Writes 'count' copies of the 'len' bytes of 'cmd' to 'fd' with writev (one
 * system call for a whole pipeline of small commands, no copy of big ones).
 * Returns 0, or -1 with a message in 'err'. */
static int write_copies(int fd, const char *cmd, size_t len, int count, char *err, size_t errcap)
{
    size_t total = len * (size_t)count, off = 0;
    while (off < total) {
        struct iovec iov[IOV_BATCH];
        size_t first = off / len, skip = off % len;
        int n = 0;
        for (size_t k = first; k < (size_t)count && n < IOV_BATCH; k++, n++) {
            iov[n].iov_base = (char *)cmd + (n == 0 ? skip : 0);
            iov[n].iov_len = len - (n == 0 ? skip : 0);
        }
        ssize_t w = writev(fd, iov, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            snprintf(err, errcap, "write: %s", w == 0 ? "no progress" : strerror(errno));
            return -1;
        }
        off += (size_t)w;
    }
    return 0;
}

/* Checks that 'r' is the reply 'op' gives on success for 'bytes' of payload.
 * Returns 0, or -1 with a message in 'err'. */
static int check_reply(int op, size_t bytes, const breply *r, char *err, size_t errcap)
{
    if (r->type == REDIS_REPLY_ERROR) {
        snprintf(err, errcap, "%s answered an error: %s", op_name[op], r->text);
        return -1;
    }
    int ok = 0;
    switch (op) {
    case OP_SET: ok = r->type == REDIS_REPLY_STATUS && strcmp(r->text, "OK") == 0; break;
    case OP_SGD:
    case OP_ADAM: ok = r->type == REDIS_REPLY_INTEGER && r->integer > 0; break;
    case OP_GET: ok = r->type == REDIS_REPLY_STRING && r->len == bytes; break;
    case OP_PULL:
        ok = r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->el[0] && r->el[1] &&
             r->el[0]->type == REDIS_REPLY_INTEGER && r->el[1]->type == REDIS_REPLY_STRING &&
             r->el[1]->len == bytes;
        break;
    }
    if (!ok) snprintf(err, errcap, "%s: unexpected reply (type %d)", op_name[op], r->type);
    return ok ? 0 : -1;
}

/* ------------------------------------------------------------------------- */
/* Connections and the control channel                                       */
/* ------------------------------------------------------------------------- */

static const options *g_opt;

/* Connects to the server; the benchmark connections get the payload-free reply
 * functions and a read buffer that is kept between replies. Exits on failure. */
static redisContext *connect_or_die(int bench)
{
    redisContext *c = redisConnect(g_opt->host, g_opt->port);
    if (c == NULL || c->err) {
        fprintf(stderr, "ps_bench: cannot connect to %s:%d: %s\n", g_opt->host, g_opt->port,
                c ? c->errstr : "out of memory");
        exit(1);
    }
    if (bench) {
        c->reader->fn = &breply_fns;
        c->reader->maxbuf = 0; /* keep the read buffer: no re-allocation per big reply */
    }
    return c;
}

/* Runs a command on the control connection and checks it did not fail. Exits on error. */
static redisReply *ctl_cmd(redisContext *ctl, int argc, const char **argv, const size_t *lens)
{
    redisReply *r = redisCommandArgv(ctl, argc, argv, lens);
    if (r == NULL) {
        fprintf(stderr, "ps_bench: %s: %s\n", argv[0], ctl->errstr);
        exit(1);
    }
    if (r->type == REDIS_REPLY_ERROR) {
        fprintf(stderr, "ps_bench: %s %s: %s\n", argv[0], argc > 1 ? argv[1] : "", r->str);
        exit(1);
    }
    return r;
}

/* Server CPU seconds so far (INFO cpu: used_cpu_sys + used_cpu_user). */
static double server_cpu(redisContext *ctl)
{
    redisReply *r = redisCommand(ctl, "INFO cpu");
    double cpu = 0;
    if (r == NULL || r->type != REDIS_REPLY_STRING) {
        fprintf(stderr, "ps_bench: INFO cpu failed\n");
        exit(1);
    }
    const char *f[2] = {"used_cpu_sys:", "used_cpu_user:"};
    for (int i = 0; i < 2; i++) {
        const char *p = strstr(r->str, f[i]);
        if (p) cpu += strtod(p + strlen(f[i]), NULL);
    }
    freeReplyObject(r);
    return cpu;
}

/* ------------------------------------------------------------------------- */
/* One repetition                                                             */
/* ------------------------------------------------------------------------- */

typedef struct worker {
    redisContext *c;
    char *rbuf;
    const char *cmd; /* the formatted command, shared by the threads */
    size_t cmdlen;
    int op;
    size_t bytes;
    int depth;
    double seconds;
    pthread_barrier_t *start;
    long ops;
    double t0, t1;
    char err[256];
} worker;

/* Sends 'depth' commands at once and reads their 'depth' replies, again and
 * again until 'seconds' have passed (as redis-benchmark -P does). Counts
 * completed commands in 'ops'. */
static void *worker_main(void *arg)
{
    worker *w = arg;
    w->ops = 0;
    w->err[0] = '\0';
    pthread_barrier_wait(w->start);
    w->t0 = now_s();
    double deadline = w->t0 + w->seconds;
    do {
        if (write_copies(w->c->fd, w->cmd, w->cmdlen, w->depth, w->err, sizeof(w->err)))
            goto out;
        for (int i = 0; i < w->depth; i++) {
            breply *r;
            if (read_reply(w->c, w->rbuf, &r, w->err, sizeof(w->err))) goto out;
            int bad = check_reply(w->op, w->bytes, r, w->err, sizeof(w->err));
            breply_free(r);
            if (bad) goto out;
            w->ops++;
        }
    } while (now_s() < deadline);
out:
    w->t1 = now_s();
    return NULL;
}

/* The formatted commands of one size. */
typedef struct cmdset {
    char *cmd[NOPS];
    size_t len[NOPS];
} cmdset;

static redisContext *conns[MAX_THREADS];
static char *rbufs[MAX_THREADS];

/* Runs 'op' with 'clients' connections at 'depth' for 'seconds'. Returns the
 * sample; exits on error. */
static sample run_rep(redisContext *ctl, const cmdset *cs, int op, size_t bytes, int clients,
                      int depth, double seconds)
{
    worker w[MAX_THREADS];
    pthread_t th[MAX_THREADS];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)clients + 1);
    double cpu0 = server_cpu(ctl);
    for (int i = 0; i < clients; i++) {
        w[i] = (worker){.c = conns[i], .rbuf = rbufs[i], .cmd = cs->cmd[op],
                        .cmdlen = cs->len[op], .op = op, .bytes = bytes, .depth = depth,
                        .seconds = seconds, .start = &start};
        if (pthread_create(&th[i], NULL, worker_main, &w[i]) != 0) {
            fprintf(stderr, "ps_bench: pthread_create failed\n");
            exit(1);
        }
    }
    pthread_barrier_wait(&start);
    long ops = 0;
    double t0 = 1e300, t1 = 0;
    int failed = 0;
    for (int i = 0; i < clients; i++) {
        pthread_join(th[i], NULL);
        if (w[i].err[0]) {
            fprintf(stderr, "ps_bench: client %d: %s\n", i, w[i].err);
            failed = 1;
        }
        ops += w[i].ops;
        if (w[i].t0 < t0) t0 = w[i].t0;
        if (w[i].t1 > t1) t1 = w[i].t1;
    }
    double cpu1 = server_cpu(ctl);
    pthread_barrier_destroy(&start);
    if (failed) exit(1);
    sample s = {0, 0};
    if (ops > 0 && t1 > t0) {
        s.ops_s = (double)ops / (t1 - t0);
        s.cpu_us = (cpu1 - cpu0) * 1e6 / (double)ops;
    }
    return s;
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
    const char *a_pull[] = {"PS.PULL", ksgd, "FORMAT", "F32"};
    size_t l_set[] = {3, strlen(kset), bytes};
    size_t l_sgd[] = {11, strlen(ksgd), bytes};
    size_t l_adam[] = {11, strlen(kadam), bytes};
    size_t l_get[] = {3, strlen(kset)};
    size_t l_pull[] = {7, strlen(ksgd), 6, 3};
    const char **argvs[NOPS] = {a_set, a_sgd, a_adam, a_get, a_pull};
    const size_t *lens[NOPS] = {l_set, l_sgd, l_adam, l_get, l_pull};
    const int argcs[NOPS] = {3, 3, 3, 2, 4};
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
/* Report                                                                     */
/* ------------------------------------------------------------------------- */

static double cell_median_ops(const cell *c, int op)
{
    double v[MAX_REPS];
    for (int r = 0; r < c->reps; r++) v[r] = c->s[op][r].ops_s;
    return median(v, c->reps);
}

static double cell_median_cpu(const cell *c, int op)
{
    double v[MAX_REPS];
    for (int r = 0; r < c->reps; r++) v[r] = c->s[op][r].cpu_us;
    return median(v, c->reps);
}

/* Median over the repetitions of ops(op) / ops(base), each pair measured in
 * the same round. */
static double cell_ratio(const cell *c, int op, int base)
{
    double v[MAX_REPS];
    int n = 0;
    for (int r = 0; r < c->reps; r++)
        if (c->s[base][r].ops_s > 0) v[n++] = c->s[op][r].ops_s / c->s[base][r].ops_s;
    return median(v, n);
}

/* Smallest and largest per-round ratio of 'op' to 'base'. */
static void cell_ratio_range(const cell *c, int op, int base, double *lo, double *hi)
{
    *lo = 1e300;
    *hi = 0;
    for (int r = 0; r < c->reps; r++) {
        if (c->s[base][r].ops_s <= 0) continue;
        double x = c->s[op][r].ops_s / c->s[base][r].ops_s;
        if (x < *lo) *lo = x;
        if (x > *hi) *hi = x;
    }
    if (*hi == 0) *lo = 0;
}

static const cell *find_cell(size_t floats, int clients, int pipelined)
{
    for (int i = 0; i < ncells; i++)
        if (cells[i].floats == floats && cells[i].clients == clients &&
            (cells[i].depth > 1) == pipelined)
            return &cells[i];
    return NULL;
}

static void print_table(const options *o)
{
    char fb[32], bb[32];
    printf("\n%-14s %6s %7s %4s %5s %11s %9s %10s %-5s %9s %7s  %s\n", "op", "floats", "bytes",
           "cli", "pipe", "ops/s", "MB/s", "srv_us/op", "base", "base_MB/s", "ratio",
           "(min-max)");
    for (int i = 0; i < ncells; i++) {
        const cell *c = &cells[i];
        size_t bytes = c->floats * 4;
        for (int op = 0; op < NOPS; op++) {
            if (!o->ops[op]) continue;
            double ops = cell_median_ops(c, op);
            double mbs = ops * (double)bytes / 1e6;
            printf("%-14s %6s %7s %4d %5d %11.0f %9.1f %10.1f", op_name[op],
                   floats_str(c->floats, fb, sizeof(fb)), bytes_str(bytes, bb, sizeof(bb)),
                   c->clients, c->depth, ops, mbs, cell_median_cpu(c, op));
            int b = op_base[op];
            if (b >= 0 && o->ops[b]) {
                double bops = cell_median_ops(c, b), lo, hi;
                cell_ratio_range(c, op, b, &lo, &hi);
                printf(" %-5s %9.1f %6.2fx  (%.2f-%.2f)\n", op_name[b], bops * (double)bytes / 1e6,
                       cell_ratio(c, op, b), lo, hi);
            } else {
                printf(" %-5s %9s %7s\n", "-", "-", "-");
            }
        }
    }
}

/* Prints one target line: the ratio of 'op' to 'base' in the cell (floats,
 * clients, pipelined) against 'goal', and the same ratio in the other cells
 * of that size for context. */
static void print_target(const char *what, size_t floats, int clients, int pipelined, int op,
                         int base, double goal)
{
    const cell *c = find_cell(floats, clients, pipelined);
    if (c == NULL || !g_opt->ops[op] || !g_opt->ops[base]) {
        printf("  %-62s   n/a (not measured)\n", what);
        return;
    }
    double r = cell_ratio(c, op, base), lo, hi;
    cell_ratio_range(c, op, base, &lo, &hi);
    printf("  %-62s %5.2fx  %s  (%d client%s, pipeline %d; rounds %.2f-%.2f)\n", what, r,
           r >= goal ? "PASS" : "MISS", clients, clients > 1 ? "s" : "", c->depth, lo, hi);
    printf("  %-62s", "    same size, other cells:");
    for (int i = 0; i < ncells; i++) {
        const cell *o = &cells[i];
        if (o == c || o->floats != floats) continue;
        printf(" %dc/p%d %.2fx", o->clients, o->depth, cell_ratio(o, op, base));
    }
    printf("\n");
}

static void print_targets(void)
{
    printf("\ntargets (ratio = median of the per-round ratios; goal in brackets)\n");
    print_target("PUSHGRAD SGD 1M floats vs SET 4 MB, MB/s [>= 0.90]", 1u << 20, 1, 0, OP_SGD,
                 OP_SET, 0.90);
    print_target("PULL F32 1M floats vs GET 4 MB, MB/s [>= 0.95]", 1u << 20, 1, 0, OP_PULL,
                 OP_GET, 0.95);
    print_target("PULL F32 64K floats vs GET 256 KB, MB/s [>= 0.95]", 65536, 1, 0, OP_PULL,
                 OP_GET, 0.95);
    print_target("PUSHGRAD SGD 16 floats vs SET 64 B, ops/s, pipelined [>= 0.90]", 16, 1, 1,
                 OP_SGD, OP_SET, 0.90);
    print_target("PUSHGRAD ADAM vs SGD, 1M floats [>= 0.80]", 1u << 20, 1, 0, OP_ADAM, OP_SGD,
                 0.80);
    print_target("PUSHGRAD ADAM vs SGD, 16M floats [>= 0.80]", 16u << 20, 1, 0, OP_ADAM, OP_SGD,
                 0.80);
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
    g_opt = &o;
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);

    int max_clients = 1;
    for (int i = 0; i < o.nclients; i++)
        if (o.clients[i] > max_clients) max_clients = o.clients[i];
    redisContext *ctl = connect_or_die(0);
    for (int i = 0; i < max_clients; i++) {
        conns[i] = connect_or_die(1);
        if ((rbufs[i] = malloc(RBUF_BYTES)) == NULL) return 1;
    }

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
    print_table(&o);
    if (o.targets) print_targets();
    printf("\nps_bench: done in %.0f s\n", now_s() - tstart);

    for (int i = 0; i < max_clients; i++) {
        redisFree(conns[i]);
        free(rbufs[i]);
    }
    redisFree(ctl);
    free(cells);
    return 0;
}
