/* fake_node.h -- fake Redis nodes for the libps tests (test_engine*.c):
 * tiny RESP servers on loopback ports, one thread each, that answer what a
 * test scripts (values, MOVED, ASK, TRYAGAIN, CLUSTERDOWN, version
 * roll-backs, short WAITs, INFO replication, vanished keys, slow or
 * trickled replies, dropped connections) and log every
 * command they get as "CMD key [V<version>] [S<seq>]". Test code only:
 * static inline functions (each test file uses what it needs), included
 * after <cmocka.h> (the set-up asserts with it). */
#ifndef PS_FAKE_NODE_H
#define PS_FAKE_NODE_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "slot.h"

#define MAXCONN 8
#define LOGMAX 512

typedef struct fconn {
    int fd;
    char in[1 << 20];
    size_t inlen;
} fconn;

typedef struct fake {
    int lfd, port, wake[2];
    pthread_t th;
    char name[8];
    fconn conns[MAXCONN];
    /* script (set before the client runs, read by the fake's thread) */
    int cluster;                /* answer CLUSTER SLOTS with every slot on 'slots_port' */
    int slots_port;
    int moved_port, ask_port;   /* > 0: GETs answer MOVED / ASK there */
    int moved_limit;            /* > 0: only the first this many GETs answer MOVED */
    int moved_sent;
    int tryagain;               /* GETs answer TRYAGAIN this many times */
    int backlog;                /* then BACKLOG this many times (a relay's full ACCUM tensor) */
    int clusterdown;            /* GETs always answer CLUSTERDOWN */
    int drop_get;               /* the first this many GETs close the connection */
    int drop_wait;              /* the first this many WAITs close the connection */
    int pull_version_add;       /* added to the versions PS.PULL answers */
    int rollback;               /* PS.PUSHGRADs with VERSION answer "newer than 7" this many times */
    int push_delay_ms;          /* sleep before answering PS.PUSHGRAD */
    int pull_floats;            /* floats per PS.PULL reply (0: 2) */
    int trickle;                /* write replies a byte at a time */
    int wait_zero;              /* WAITs answer 0 replicas this many times (< 0: always) */
    int info_online;            /* INFO replication lists this many online replicas */
    int nokey;                  /* PS.PULL and PS.PUSHGRAD answer "no such key" */
    /* > 0 set: offered every command first; returns 1 when it answered it
     * (setting *close_it to drop the connection), 0 to go on as scripted */
    int (*hook)(struct fake *f, int fd, int argc, char **argv, size_t *argl, int *close_it);
    /* log: "CMD key [VERSION v] [SEQ s]" per command */
    pthread_mutex_t mu;
    char log[LOGMAX][96];
    int nlog;
} fake;

/* Write 'n' bytes to 'fd', a byte per write() when the fake trickles. */
static inline void out_bytes(fake *f, int fd, const void *p, size_t n) {
    size_t step = f->trickle ? 1 : n;
    for (size_t i = 0; i < n; i += step)
        if (write(fd, (const char *)p + i, step) != (ssize_t)step) return;
}

static inline void out(fake *f, int fd, const char *fmt, ...) {
    char b[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b, sizeof(b), fmt, ap);
    va_end(ap);
    out_bytes(f, fd, b, (size_t)n);
}

static inline void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* The partition index at the end of a key "job:name:p". */
static inline int key_part(const char *key) {
    const char *c = strrchr(key, ':');
    return c ? atoi(c + 1) : 0;
}

static inline const char *arg_after(int argc, char **argv, const char *name) {
    for (int i = 0; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0) return argv[i + 1];
    return NULL;
}

/* Answer one command; returns 1 to close the connection instead. */
static inline int fake_command(fake *f, int fd, int argc, char **argv, size_t *argl) {
    const char *cmd = argv[0], *key = argc > 1 ? argv[1] : "";
    char entry[96];
    int close_it = 0;
    const char *v = arg_after(argc, argv, "VERSION");
    const char *seq = NULL;
    for (int i = 0; i + 2 < argc; i++)
        if (strcmp(argv[i], "ID") == 0) seq = argv[i + 2];
    snprintf(entry, sizeof(entry), "%s %s%s%s%s%s", cmd, key, v ? " V" : "", v ? v : "",
             seq ? " S" : "", seq ? seq : "");
    pthread_mutex_lock(&f->mu);
    if (f->nlog < LOGMAX) snprintf(f->log[f->nlog++], 96, "%s", entry);
    pthread_mutex_unlock(&f->mu);

    if (f->hook && f->hook(f, fd, argc, argv, argl, &close_it)) {
        /* answered by the test's hook */
    } else if (!strcmp(cmd, "CLUSTER")) {
        if (!f->cluster) out(f, fd, "-ERR This instance has cluster support disabled\r\n");
        else out(f, fd, "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:%d\r\n", f->slots_port);
    } else if (!strcmp(cmd, "ASKING") || !strcmp(cmd, "AUTH")) {
        out(f, fd, "+OK\r\n");
    } else if (!strcmp(cmd, "PING")) {
        out(f, fd, "+PONG\r\n");
    } else if (!strcmp(cmd, "GET")) {
        unsigned slot = ps_key_hash_slot(key, argl[1]);
        if (f->drop_get > 0) {
            f->drop_get--;
            close_it = 1;
        } else if (f->moved_port && (!f->moved_limit || f->moved_sent++ < f->moved_limit)) {
            out(f, fd, "-MOVED %u 127.0.0.1:%d\r\n", slot, f->moved_port);
        } else if (f->ask_port) {
            out(f, fd, "-ASK %u 127.0.0.1:%d\r\n", slot, f->ask_port);
        } else if (f->tryagain > 0) {
            f->tryagain--;
            out(f, fd, "-TRYAGAIN Multiple keys request during rehashing of slot\r\n");
        } else if (f->backlog > 0) {
            f->backlog--;
            out(f, fd, "-BACKLOG the ACCUM tensor holds MAXBACKLOG gradients\r\n");
        } else if (f->clusterdown) {
            out(f, fd, "-CLUSTERDOWN The cluster is down\r\n");
        } else {
            out(f, fd, "$%zu\r\n%s=%s\r\n", strlen(f->name) + 1 + argl[1], f->name, key);
        }
    } else if (!strcmp(cmd, "INFO")) {
        char b[400];
        int n = snprintf(b, sizeof(b), "# Replication\r\nrole:master\r\nconnected_slaves:%d\r\n",
                         f->info_online);
        for (int i = 0; i < f->info_online && n < 300; i++)
            n += snprintf(b + n, sizeof(b) - (size_t)n,
                          "slave%d:ip=127.0.0.1,port=1,state=online,offset=1,lag=0\r\n", i);
        out(f, fd, "$%d\r\n%s\r\n", n, b);
    } else if ((!strcmp(cmd, "PS.PULL") || !strcmp(cmd, "PS.PUSHGRAD")) && f->nokey) {
        out(f, fd, "-ERR no such key\r\n");
    } else if (!strcmp(cmd, "PS.PULL")) {
        /* pull_floats floats per partition, all (p + 1); version 10 + 5p (+ add) */
        int p = key_part(key), n = f->pull_floats ? f->pull_floats : 2;
        float *x = malloc(sizeof(float) * (size_t)n);
        for (int i = 0; i < n; i++) x[i] = (float)(p + 1);
        out(f, fd, "*2\r\n:%d\r\n$%d\r\n", 10 + 5 * p + f->pull_version_add, 4 * n);
        out_bytes(f, fd, x, sizeof(float) * (size_t)n);
        out(f, fd, "\r\n");
        free(x);
    } else if (!strcmp(cmd, "PS.PUSHGRAD")) {
        if (f->push_delay_ms) sleep_ms(f->push_delay_ms);
        if (v && f->rollback > 0) {
            f->rollback--;
            out(f, fd, "-ERR VERSION %s is newer than the tensor's version 7\r\n", v);
        } else {
            out(f, fd, ":1\r\n");
        }
    } else if (!strcmp(cmd, "WAIT")) {
        if (f->drop_wait > 0) {
            f->drop_wait--;
            close_it = 1;
        } else if (f->wait_zero) {
            if (f->wait_zero > 0) f->wait_zero--;
            out(f, fd, ":0\r\n");
        } else {
            out(f, fd, ":1\r\n");
        }
    } else {
        out(f, fd, "-ERR unknown command '%s'\r\n", cmd);
    }
    return close_it;
}

/* Parse and answer every complete command in 'k'. 1: close it. */
static inline int fake_input(fake *f, fconn *k) {
    for (;;) {
        char *argv[32] = {0}, *p = k->in, *end = k->in + k->inlen, *nl;
        size_t argl[32], used;
        int argc, i;
        if (k->inlen == 0 || *p != '*') return k->inlen ? 1 : 0;
        if ((nl = memchr(p, '\n', (size_t)(end - p))) == NULL) return 0;
        argc = atoi(p + 1);
        if (argc < 1 || argc > 32) return 1;
        p = nl + 1;
        for (i = 0; i < argc && i < 32; i++) {
            size_t n;
            if (p >= end || (nl = memchr(p, '\n', (size_t)(end - p))) == NULL) return 0;
            n = (size_t)atol(p + 1);
            p = nl + 1;
            if ((size_t)(end - p) < n + 2) return 0;
            argv[i] = p;
            argl[i] = n;
            p[n] = '\0';        /* over the '\r' */
            p += n + 2;
        }
        used = (size_t)(p - k->in);
        if (fake_command(f, k->fd, argc, argv, argl)) return 1;
        memmove(k->in, k->in + used, k->inlen - used);
        k->inlen -= used;
    }
}

static inline void *fake_main(void *arg) {
    fake *f = arg;
    for (;;) {
        struct pollfd pf[MAXCONN + 2];
        int n = 0, idx[MAXCONN];
        pf[n].fd = f->wake[0];
        pf[n++].events = POLLIN;
        pf[n].fd = f->lfd;
        pf[n++].events = POLLIN;
        for (int i = 0; i < MAXCONN; i++)
            if (f->conns[i].fd >= 0) {
                idx[n - 2] = i;
                pf[n].fd = f->conns[i].fd;
                pf[n++].events = POLLIN;
            }
        if (poll(pf, (nfds_t)n, -1) < 0) continue;
        if (pf[0].revents) return NULL;
        if (pf[1].revents) {
            int fd = accept(f->lfd, NULL, NULL);
            for (int i = 0; i < MAXCONN && fd >= 0; i++)
                if (f->conns[i].fd < 0) {
                    f->conns[i].fd = fd;
                    f->conns[i].inlen = 0;
                    fd = -1;
                }
            if (fd >= 0) close(fd);
        }
        for (int j = 2; j < n; j++) {
            fconn *k = &f->conns[idx[j - 2]];
            ssize_t r;
            if (!pf[j].revents) continue;
            r = read(k->fd, k->in + k->inlen, sizeof(k->in) - k->inlen);
            if (r <= 0 || (k->inlen += (size_t)r, fake_input(f, k))) {
                close(k->fd);
                k->fd = -1;
            }
        }
    }
}

static inline fake *fake_start(const char *name) {
    fake *f = calloc(1, sizeof(*f));
    struct sockaddr_in a;
    socklen_t al = sizeof(a);
    int one = 1;
    assert_non_null(f);
    snprintf(f->name, sizeof(f->name), "%s", name);
    for (int i = 0; i < MAXCONN; i++) f->conns[i].fd = -1;
    pthread_mutex_init(&f->mu, NULL);
    assert_int_equal(pipe(f->wake), 0);
    f->lfd = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(f->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(f->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(f->lfd, 16), 0);
    getsockname(f->lfd, (struct sockaddr *)&a, &al);
    f->port = ntohs(a.sin_port);
    f->slots_port = f->port;
    assert_int_equal(pthread_create(&f->th, NULL, fake_main, f), 0);
    return f;
}

static inline void fake_stop(fake *f) {
    if (write(f->wake[1], "x", 1) != 1) {}
    pthread_join(f->th, NULL);
    for (int i = 0; i < MAXCONN; i++)
        if (f->conns[i].fd >= 0) close(f->conns[i].fd);
    close(f->lfd);
    close(f->wake[0]);
    close(f->wake[1]);
    pthread_mutex_destroy(&f->mu);
    free(f);
}

/* Number of log entries of 'f' that start with 'prefix'. */
static inline int fake_count(fake *f, const char *prefix) {
    int n = 0;
    pthread_mutex_lock(&f->mu);
    for (int i = 0; i < f->nlog; i++)
        if (strncmp(f->log[i], prefix, strlen(prefix)) == 0) n++;
    pthread_mutex_unlock(&f->mu);
    return n;
}

/* Index of the first log entry of 'f' starting with 'prefix', -1 none. */
static inline int fake_find(fake *f, const char *prefix) {
    int at = -1;
    pthread_mutex_lock(&f->mu);
    for (int i = 0; i < f->nlog && at < 0; i++)
        if (strncmp(f->log[i], prefix, strlen(prefix)) == 0) at = i;
    pthread_mutex_unlock(&f->mu);
    return at;
}

#endif /* PS_FAKE_NODE_H */
