/* client.c -- the measuring client of ps_bench: connections whose replies
 * keep no payload, pipelined writes from one formatted command, and one
 * repetition of one op over N client threads. */

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "ps_bench.h"

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

/* ------------------------------------------------------------------------- */
/* Connections and the control channel                                       */
/* ------------------------------------------------------------------------- */

/* See ps_bench.h. The read buffer is kept between replies. */
redisContext *connect_or_die(const char *host, int port, int bench)
{
    redisContext *c = redisConnect(host, port);
    if (c == NULL || c->err) {
        fprintf(stderr, "ps_bench: cannot connect to %s:%d: %s\n", host, port,
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
redisReply *ctl_cmd(redisContext *ctl, int argc, const char **argv, const size_t *lens)
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

static redisContext *conns[MAX_THREADS];
static char *rbufs[MAX_THREADS];
static int nconns;

void bench_conns_open(const char *host, int port, int n)
{
    for (; nconns < n; nconns++) {
        conns[nconns] = connect_or_die(host, port, 1);
        if ((rbufs[nconns] = malloc(RBUF_BYTES)) == NULL) {
            fprintf(stderr, "ps_bench: out of memory\n");
            exit(1);
        }
    }
}

void bench_conns_close(void)
{
    for (; nconns > 0; nconns--) {
        redisFree(conns[nconns - 1]);
        free(rbufs[nconns - 1]);
    }
}

/* See ps_bench.h. */
sample run_rep(redisContext *ctl, const cmdset *cs, int op, size_t bytes, int clients, int depth,
               double seconds)
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
