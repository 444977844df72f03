/* relay.c -- ps-relay's engine: key setup (mirror the upstream shapes as
 * local ACCUM tensors, refuse what does not fit), then the take / push /
 * ack / mirror cycle of relay.h, with progress lines. */

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "relay.h"

/* One relayed tensor key. */
typedef struct relayKey {
    char *name;
    int ndim;
    uint64_t dims[8];
    uint64_t n;               /* elements */
    uint64_t mirror_version;  /* local version after the last mirror */
    long long summed;         /* pushes summed at the last peek (-1: pending slot) */
    uint64_t backlog;         /* un-forwarded gradients at the last peek (summed, or
                                 the pending take's) */
    uint64_t seq, part;       /* the part taken this cycle: its seq and gradients */
    float *buf;               /* the scaled part (--mean, or a split take) */
} relayKey;

typedef struct relay {
    const relayOpts *o;
    psClient *local, *up;
    relayKey *keys;
    int nkeys, capkeys;
    long long max_backlog;    /* MAXBACKLOG sent with every take */
    long long max_round;      /* MAXROUND sent with every take (0: none) */
    uint64_t seqfloor;        /* wall clock in us at start: seqs of a wiped local server move on */
    relayStats st;
    long long start_ms, last_pull_ms, last_progress_ms;
    long long round_start_ms; /* first push of the open round seen; -1: none */
    long long last_warn_ms;   /* rate limit of the "upstream unreachable" line */
    char backlog_arg[24];     /* MAXBACKLOG as sent */
    const char *fault;        /* PS_RELAY_FAULT "phase:n": SIGKILL itself (tests) */
} relay;

static volatile sig_atomic_t Stop = 0;

static void on_signal(int sig) {
    (void)sig;
    Stop = 1;
}

static long long mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR && !Stop) {
    }
}

static void say(const relay *r, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "ps-relay %s: ", r->o->name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* Tests only: PS_RELAY_FAULT=phase:n kills the relay (SIGKILL, no cleanup)
 * right after the n-th completion of 'phase' (take, push or ack), so that
 * the crash points of the exactly-once argument are hit on purpose. */
static void fault_point(relay *r, const char *phase) {
    static long count[3];
    static const char *const phases[3] = {"take", "push", "ack"};
    if (!r->fault) return;
    for (int i = 0; i < 3; i++) {
        size_t l = strlen(phases[i]);
        if (strcmp(phase, phases[i]) || strncmp(r->fault, phase, l) || r->fault[l] != ':') continue;
        if (++count[i] == atol(r->fault + l + 1)) {
            fflush(NULL);
            raise(SIGKILL);
        }
    }
}

/* ========================================================================
 * Setup: keys, shapes, local ACCUM tensors
 * ====================================================================== */

/* The shape, optimizer and version from a PS.INFO reply. 0, or -1. */
static int parse_info(const redisReply *rep, int *ndim, uint64_t *dims, char *optim, size_t olen,
                      uint64_t *version) {
    if (rep->type != REDIS_REPLY_ARRAY) return -1;
    int have = 0;
    for (size_t i = 0; i + 1 < rep->elements; i += 2) {
        const redisReply *f = rep->element[i], *v = rep->element[i + 1];
        if (f->type != REDIS_REPLY_STRING && f->type != REDIS_REPLY_STATUS) continue;
        if (!strcmp(f->str, "shape") && v->type == REDIS_REPLY_ARRAY && v->elements >= 1 &&
            v->elements <= 8) {
            *ndim = (int)v->elements;
            for (size_t k = 0; k < v->elements; k++) dims[k] = (uint64_t)v->element[k]->integer;
            have |= 1;
        } else if (!strcmp(f->str, "optimizer") && v->type == REDIS_REPLY_STRING) {
            snprintf(optim, olen, "%s", v->str);
            have |= 2;
        } else if (!strcmp(f->str, "version") && v->type == REDIS_REPLY_INTEGER) {
            *version = (uint64_t)v->integer;
            have |= 4;
        }
    }
    return have == 7 ? 0 : -1;
}

static void shape_str(char *buf, size_t len, int ndim, const uint64_t *dims) {
    size_t o = 0;
    buf[0] = '\0';
    for (int i = 0; i < ndim && o + 2 < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%" PRIu64, i ? " " : "", dims[i]);
}

/* Adds a key name (copied). 0, or -1 when there are too many. */
static int add_key(relay *r, const char *name, size_t len) {
    if (r->nkeys == r->capkeys) {
        int cap = r->capkeys ? r->capkeys * 2 : 16;
        relayKey *nk = realloc(r->keys, (size_t)cap * sizeof(relayKey));
        if (!nk) return -1;
        r->keys = nk;
        r->capkeys = cap;
    }
    relayKey *k = &r->keys[r->nkeys++];
    memset(k, 0, sizeof(*k));
    k->name = strndup(name, len);
    return k->name ? 0 : -1;
}

static int cmp_keys(const void *a, const void *b) {
    return strcmp(((const relayKey *)a)->name, ((const relayKey *)b)->name);
}

/* Fills r->keys from --keys or from SCAN MATCH on the upstream. 0 or -1. */
static int find_keys(relay *r) {
    const relayOpts *o = r->o;
    if (o->keys) {
        for (const char *p = o->keys; *p;) {
            const char *e = strchr(p, ',');
            size_t l = e ? (size_t)(e - p) : strlen(p);
            if (l && add_key(r, p, l) != 0) return -1;
            p += l + (e ? 1 : 0);
        }
    } else {
        if (r->up->cluster) {
            say(r, "--match needs a standalone upstream (a SCAN reaches one node): give --keys");
            return -1;
        }
        char cursor[32] = "0";
        do {
            redisReply *rep = psCommand(r->up, NULL, "SCAN %s MATCH %s TYPE ps-tensor COUNT 1000",
                                        cursor, o->match);
            if (!rep || rep->type != REDIS_REPLY_ARRAY || rep->elements != 2) {
                say(r, "SCAN upstream: %s", rep && rep->type == REDIS_REPLY_ERROR ? rep->str
                                                                               : r->up->errstr);
                if (rep) freeReplyObject(rep);
                return -1;
            }
            snprintf(cursor, sizeof(cursor), "%s", rep->element[0]->str);
            const redisReply *ks = rep->element[1];
            for (size_t i = 0; i < ks->elements; i++)
                if (add_key(r, ks->element[i]->str, ks->element[i]->len) != 0) {
                    freeReplyObject(rep);
                    say(r, "out of memory");
                    return -1;
                }
            freeReplyObject(rep);
        } while (strcmp(cursor, "0") != 0);
    }
    if (r->nkeys == 0) {
        say(r, "no tensor keys %s%s upstream", o->keys ? "in --keys" : "match ",
            o->keys ? "" : o->match);
        return -1;
    }
    qsort(r->keys, (size_t)r->nkeys, sizeof(relayKey), cmp_keys);
    return 0;
}

/* Checks key 'k' upstream and creates or checks its local ACCUM tensor.
 * Returns 0, 1 on a connection problem, 2 when the tensors do not fit. */
static int setup_key(relay *r, relayKey *k) {
    char optim[32], lopt[32], a[128], b[128];
    uint64_t ver, ldims[8];
    int lndim;
    redisReply *rep = psCommand(r->up, k->name, "PS.INFO %s", k->name);
    if (!rep) {
        say(r, "PS.INFO %s upstream: %s", k->name, r->up->errstr);
        return 1;
    }
    if (rep->type == REDIS_REPLY_ERROR || parse_info(rep, &k->ndim, k->dims, optim, sizeof(optim),
                                                     &ver) != 0) {
        say(r, "upstream key %s is not a tensor the relay can serve: %s", k->name,
            rep->type == REDIS_REPLY_ERROR ? rep->str : "unexpected PS.INFO reply");
        freeReplyObject(rep);
        return 2;
    }
    freeReplyObject(rep);
    k->n = 1;
    for (int i = 0; i < k->ndim; i++) k->n *= k->dims[i];
    if (r->o->optim && strcasecmp(optim, r->o->optim) && strcmp(optim, "accum")) {
        say(r, "upstream tensor %s has optimizer %s, but --optim says %s: refusing to relay it",
            k->name, optim, r->o->optim);
        return 2;
    }
    shape_str(a, sizeof(a), k->ndim, k->dims);
    for (int attempt = 0; attempt < 2; attempt++) {
        rep = psCommand(r->local, k->name, "PS.INFO %s", k->name);
        if (!rep) {
            say(r, "PS.INFO %s local: %s", k->name, r->local->errstr);
            return 1;
        }
        if (rep->type == REDIS_REPLY_ERROR && strstr(rep->str, "no such key")) {
            freeReplyObject(rep);
            /* Create it mirroring the upstream shape; NX: a concurrent
             * creator wins and is checked on the next round. */
            const char *argv[16];
            size_t argl[16];
            char dbuf[8][24];
            int c = 0;
            argv[c++] = "PS.CREATE", argv[c++] = k->name, argv[c++] = "SHAPE";
            for (int i = 0; i < k->ndim; i++) {
                snprintf(dbuf[i], sizeof(dbuf[i]), "%" PRIu64, k->dims[i]);
                argv[c++] = dbuf[i];
            }
            argv[c++] = "OPTIM", argv[c++] = "ACCUM", argv[c++] = "NX";
            for (int i = 0; i < c; i++) argl[i] = strlen(argv[i]);
            rep = psCommandArgv(r->local, k->name, c, argv, argl);
            if (!rep || rep->type == REDIS_REPLY_ERROR) {
                say(r, "PS.CREATE %s local: %s", k->name, rep ? rep->str : r->local->errstr);
                if (rep) freeReplyObject(rep);
                return rep ? 2 : 1;
            }
            freeReplyObject(rep);
            continue;
        }
        if (rep->type == REDIS_REPLY_ERROR ||
            parse_info(rep, &lndim, ldims, lopt, sizeof(lopt), &ver) != 0) {
            say(r, "local key %s is not a tensor: %s", k->name,
                rep->type == REDIS_REPLY_ERROR ? rep->str : "unexpected PS.INFO reply");
            freeReplyObject(rep);
            return 2;
        }
        freeReplyObject(rep);
        if (strcmp(lopt, "accum") != 0) {
            say(r, "local tensor %s has optimizer %s: a relay's local tensors must be ACCUM "
                   "tensors (delete it and start the relay before the local workers' init; "
                   "the relay creates it)", k->name, lopt);
            return 2;
        }
        shape_str(b, sizeof(b), lndim, ldims);
        if (strcmp(a, b) != 0) {
            say(r, "local tensor %s has shape [%s] but the upstream one has shape [%s]: "
                   "refusing to relay it", k->name, b, a);
            return 2;
        }
        k->mirror_version = ver;
        return 0;
    }
    say(r, "local tensor %s could not be created", k->name);
    return 1;
}

/* ========================================================================
 * The cycle
 * ====================================================================== */

/* A batch of at most one command per key: argv per command (room for the
 * longest command the relay sends), sized for the relay's keys. */
#define RELAY_ARGV 12
typedef struct batch {
    int n, cap;
    const char **keys;
    int *argc;
    const char *(*argv)[RELAY_ARGV];
    size_t (*argl)[RELAY_ARGV];
    const char ***argvp;     /* per command: argv[i] as the pointer psCommandBatchArgv wants */
    const size_t **arglp;
    int *idx;                /* key index of each command */
    redisReply **rep;
    char (*num)[3][24];      /* per command: formatted numbers */
} batch;

static void batch_free(batch *b) {
    if (!b) return;
    free(b->keys), free(b->argc), free(b->argv), free(b->argl), free(b->argvp);
    free(b->arglp), free(b->idx), free(b->rep), free(b->num);
    free(b);
}

static batch *batch_new(int cap) {
    batch *b = calloc(1, sizeof(batch));
    if (!b) return NULL;
    size_t c = (size_t)(cap > 0 ? cap : 1);
    b->cap = (int)c;
    b->keys = calloc(c, sizeof(*b->keys));
    b->argc = calloc(c, sizeof(*b->argc));
    b->argv = calloc(c, sizeof(*b->argv));
    b->argl = calloc(c, sizeof(*b->argl));
    b->argvp = calloc(c, sizeof(*b->argvp));
    b->arglp = calloc(c, sizeof(*b->arglp));
    b->idx = calloc(c, sizeof(*b->idx));
    b->rep = calloc(c, sizeof(*b->rep));
    b->num = calloc(c, sizeof(*b->num));
    if (!b->keys || !b->argc || !b->argv || !b->argl || !b->argvp || !b->arglp || !b->idx ||
        !b->rep || !b->num) {
        batch_free(b);
        return NULL;
    }
    return b;
}

/* Starts command j of 'b' for key index 'i': returns its argv to fill. */
static const char **batch_add(batch *b, relay *r, int i) {
    int j = b->n++;
    b->keys[j] = r->keys[i].name;
    b->idx[j] = i;
    b->argc[j] = 0;
    return b->argv[j];
}

/* Appends argument 's' (length 'l', or strlen when (size_t)-1) to the last command. */
static void batch_arg(batch *b, const char *s, size_t l) {
    int j = b->n - 1;
    b->argv[j][b->argc[j]] = s;
    b->argl[j][b->argc[j]] = l == (size_t)-1 ? strlen(s) : l;
    b->argc[j]++;
}

/* A number argument of the last command (slot 0..2 of its buffers). */
static void batch_num(batch *b, int slot, long long v) {
    int j = b->n - 1;
    snprintf(b->num[j][slot], sizeof(b->num[j][slot]), "%lld", v);
    batch_arg(b, b->num[j][slot], (size_t)-1);
}

/* Runs the batch on 'c'. Returns the number of replies, or -1. */
static int batch_run(psClient *c, batch *b) {
    for (int j = 0; j < b->n; j++) {
        b->argvp[j] = b->argv[j];
        b->arglp[j] = b->argl[j];
    }
    return psCommandBatchArgv(c, b->n, b->keys, b->argc, (const char **const *)b->argvp,
                              (const size_t *const *)b->arglp, b->rep);
}

static void free_replies(batch *b) {
    for (int i = 0; i < b->n; i++) {
        if (b->rep[i]) freeReplyObject(b->rep[i]);
        b->rep[i] = NULL;
    }
}

/* Pulls every key upstream and mirrors it locally. 0, or -1 (retry later). */
static int pull_and_mirror(relay *r, batch *b, batch *m) {
    b->n = 0;
    for (int i = 0; i < r->nkeys; i++) {
        batch_add(b, r, i);
        batch_arg(b, "PS.PULL", (size_t)-1);
        batch_arg(b, r->keys[i].name, (size_t)-1);
    }
    if (batch_run(r->up, b) < 0) return -1;
    int rc = 0;
    m->n = 0;
    for (int j = 0; j < b->n; j++) {
        redisReply *p = b->rep[j];
        relayKey *k = &r->keys[b->idx[j]];
        if (!p || p->type != REDIS_REPLY_ARRAY || p->elements != 2 ||
            p->element[1]->type != REDIS_REPLY_STRING || p->element[1]->len != k->n * 4) {
            rc = -1;
            continue;
        }
        if (b->idx[j] == 0) r->st.up_version = (uint64_t)p->element[0]->integer;
        batch_add(m, r, b->idx[j]);
        batch_arg(m, "PS.MIRROR", (size_t)-1);
        batch_arg(m, k->name, (size_t)-1);
        batch_num(m, 0, p->element[0]->integer);
        batch_arg(m, p->element[1]->str, p->element[1]->len);
    }
    if (m->n && batch_run(r->local, m) >= 0) {
        for (int j = 0; j < m->n; j++) {
            if (m->rep[j] && m->rep[j]->type == REDIS_REPLY_INTEGER)
                r->keys[m->idx[j]].mirror_version = (uint64_t)m->rep[j]->integer;
            else rc = -1;
        }
    } else if (m->n) {
        rc = -1;
    }
    free_replies(m);
    free_replies(b);
    if (rc == 0) r->st.pulls++;
    r->last_pull_ms = mono_ms();
    return rc;
}

static void progress(relay *r, const char *what) {
    const relayStats *s = &r->st;
    double saved = s->bytes_local ? 100.0 * (1.0 - (double)s->bytes_up / (double)s->bytes_local) : 0;
    uint64_t backlog = 0;
    for (int i = 0; i < r->nkeys; i++)
        if (r->keys[i].backlog > backlog) backlog = r->keys[i].backlog;
    fprintf(stdout,
            "[relay %s] %s%.1fs | local pushes in %" PRIu64 " | upstream pushes out %" PRIu64
            " (resent %" PRIu64 ", rounds not of N %" PRIu64 ", split parts %" PRIu64
            ", largest take %" PRIu64 ", largest push %" PRIu64 ") | backlog %" PRIu64
            " of %lld%s (full %" PRIu64 "x) | bytes in %.1f MB out %.1f MB saved %.1f%% | "
            "upstream version %" PRIu64 " | upstream staleness %.2f\n",
            r->o->name, what, (double)(mono_ms() - r->start_ms) / 1000.0, s->local_pushes,
            s->up_pushes, s->resends, s->uneven_rounds, s->split_parts, s->largest_take,
            s->largest_part, backlog, r->max_backlog,
            r->max_backlog && backlog >= (uint64_t)r->max_backlog ? " FULL: workers paused" : "",
            s->backlog_full, (double)s->bytes_local / 1e6, (double)s->bytes_up / 1e6, saved,
            s->up_version, s->up_pushes ? (double)s->stale_sum / (double)s->up_pushes : 0.0);
    fflush(stdout);
}

/* The fewest pushes a take needs now: the round size until the round's
 * time is up (or the relay stops), then 1. */
static long long take_mincount(const relay *r, long long now) {
    const relayOpts *o = r->o;
    if (Stop) return 1;
    long long limit = o->sync ? o->round_timeout_ms : o->every_ms;
    if (r->round_start_ms >= 0 && now - r->round_start_ms >= limit) return 1;
    if (o->sync) return o->workers;
    return o->every_pushes > 0 ? o->every_pushes : (1LL << 62);
}

/* Fills 'tk' with PS.TAKE key MINCOUNT 'min' SEQFLOOR f MAXROUND r
 * MAXBACKLOG b for every key and runs it on the local server. 0, or -1
 * when nothing came back. */
static int take_all(relay *r, batch *tk, long long min) {
    tk->n = 0;
    for (int i = 0; i < r->nkeys; i++) {
        batch_add(tk, r, i);
        batch_arg(tk, "PS.TAKE", (size_t)-1);
        batch_arg(tk, r->keys[i].name, (size_t)-1);
        batch_arg(tk, "MINCOUNT", (size_t)-1);
        batch_num(tk, 0, min);
        batch_arg(tk, "SEQFLOOR", (size_t)-1);
        batch_num(tk, 1, (long long)r->seqfloor);
        batch_arg(tk, "MAXROUND", (size_t)-1);
        batch_num(tk, 2, r->max_round);
        batch_arg(tk, "MAXBACKLOG", (size_t)-1);
        batch_arg(tk, r->backlog_arg, (size_t)-1);
    }
    return batch_run(r->local, tk) < 0 ? -1 : 0;
}

/* Whether a round is due: a pending slot is there (to resend), or enough
 * is summed: async, some key has the round's count; sync, EVERY key has
 * the N pushes (a worker pushes its keys one after the other, and a round
 * taken between two of them would split that model push over two rounds).
 * A round is decided once for all keys, so a worker's push of the whole
 * model lands in one upstream push per round and one pull follows it (not
 * one per key). A peek is a PS.TAKE whose MINCOUNT cannot be met: it
 * changes nothing (but sets MAXBACKLOG the first time). Sets each key's
 * 'summed' and 'backlog' and *summed when any key has something summed. */
static int round_due(relay *r, batch *tk, long long need, int *summed) {
    if (take_all(r, tk, 1LL << 62) != 0) return 0;
    long long most = 0, least = 1LL << 62;
    int pending = 0;
    for (int j = 0; j < tk->n; j++) {
        const redisReply *t = tk->rep[j];
        relayKey *k = &r->keys[tk->idx[j]];
        if (t && t->type == REDIS_REPLY_ARRAY) {
            pending = 1;
            k->summed = -1;
            if (t->elements == 5) k->backlog = (uint64_t)t->element[3]->integer;
        }
        if (t && t->type == REDIS_REPLY_INTEGER) {
            k->summed = t->integer;
            k->backlog = (uint64_t)t->integer;
            if (t->integer > most) most = t->integer;
            if (t->integer < least) least = t->integer;
        }
        if (t && t->type == REDIS_REPLY_ERROR) pending = 1; /* the take below reports it */
        if (r->max_backlog && k->backlog >= (uint64_t)r->max_backlog) r->st.backlog_full++;
    }
    free_replies(tk);
    *summed = most > 0;
    /* need 1 is a closing round (timeout, stop): whatever any key has. */
    long long have = r->o->sync && need > 1 ? least : most;
    return pending || (most > 0 && have >= need);
}

/* Sleeps on the local server (PS.TAKEWAIT) until a round may be due: on
 * the key that decides it (sync: the one with the fewest pushes summed;
 * async: the one with the most), for the round's count, at most until the
 * round's time is up, the next pull or progress line, or --poll-ms. */
static void wait_for_round(relay *r, long long need, long long now) {
    const relayOpts *o = r->o;
    long long timeout = o->poll_ms;
    int pick = 0;
    long long min = 1;
    if (r->round_start_ms >= 0) {
        long long limit = o->sync ? o->round_timeout_ms : o->every_ms;
        long long left = r->round_start_ms + limit - now;
        if (left < timeout) timeout = left;
        for (int i = 1; i < r->nkeys; i++)
            if (o->sync ? r->keys[i].summed < r->keys[pick].summed
                        : r->keys[i].summed > r->keys[pick].summed)
                pick = i;
        min = need;
    }
    if (!o->sync) {
        long long left = r->last_pull_ms + o->pull_ms - now;
        if (left < timeout) timeout = left;
    }
    if (o->progress_ms > 0) {
        long long left = r->last_progress_ms + o->progress_ms - now;
        if (left < timeout) timeout = left;
    }
    if (timeout < 1) timeout = 1;
    if (min < 1) min = 1;
    r->st.waits++;
    redisReply *rep = psCommand(r->local, r->keys[pick].name, "PS.TAKEWAIT %s MINCOUNT %lld TIMEOUT %lld",
                                r->keys[pick].name, min, timeout);
    if (!rep || rep->type == REDIS_REPLY_ERROR) sleep_ms(timeout); /* reported by the takes */
    if (rep) freeReplyObject(rep);
}

/* One cycle over every key. Returns the number of upstream pushes
 * acknowledged, 0 when nothing was due, -1 on a fatal error. */
static int cycle(relay *r, batch *tk, batch *pu, batch *ak) {
    long long now = mono_ms();
    int summed = 0;
    const long long need = take_mincount(r, now);
    const int due = round_due(r, tk, need, &summed);
    if (summed && r->round_start_ms < 0) r->round_start_ms = now;
    if (!due) {
        if (!Stop) wait_for_round(r, need, now);
        return 0;
    }
    if (take_all(r, tk, 1) != 0) return 0;
    int fatal = 0;
    pu->n = 0;
    for (int j = 0; j < tk->n; j++) {
        redisReply *t = tk->rep[j];
        const int i = tk->idx[j];
        relayKey *k = &r->keys[i];
        if (!t) continue;
        if (t->type == REDIS_REPLY_INTEGER) continue;
        if (t->type == REDIS_REPLY_ERROR) {
            say(r, "PS.TAKE %s: %s", k->name, t->str);
            fatal = 1;
            continue;
        }
        if (t->type != REDIS_REPLY_ARRAY || t->elements != 5 ||
            t->element[2]->type != REDIS_REPLY_STRING || t->element[2]->len != k->n * 4 ||
            t->element[1]->integer < 1 || t->element[3]->integer < t->element[1]->integer) {
            say(r, "PS.TAKE %s: unexpected reply", k->name);
            fatal = 1;
            continue;
        }
        const redisReply *blob = t->element[2];
        const uint64_t part = (uint64_t)t->element[1]->integer;
        const uint64_t count = (uint64_t)t->element[3]->integer;
        k->part = part;
        k->seq = (uint64_t)t->element[0]->integer;
        if (count > r->st.largest_take) r->st.largest_take = count;
        if (part > r->st.largest_part) r->st.largest_part = part;
        const char *data = blob->str;
        if (r->o->mean || part != count) {
            /* The mean of the count pushes (each element divided once), or
             * this part's share of the sum: part / count of it, so the
             * parts add up to the sum and none carries more than MAXROUND
             * gradients. A whole sum is sent as it is (bit for bit). */
            float *mb = realloc(k->buf, blob->len);
            if (!mb) return -1;
            k->buf = mb;
            memcpy(mb, blob->str, blob->len);
            if (r->o->mean)
                for (uint64_t e = 0; e < k->n; e++) mb[e] = mb[e] / (float)count;
            else
                for (uint64_t e = 0; e < k->n; e++) mb[e] = mb[e] * (float)part / (float)count;
            data = (const char *)mb;
        }
        if (part != count) r->st.split_parts++;
        batch_add(pu, r, i);
        batch_arg(pu, "PS.PUSHGRAD", (size_t)-1);
        batch_arg(pu, k->name, (size_t)-1);
        batch_arg(pu, data, blob->len);
        batch_arg(pu, "ID", (size_t)-1);
        batch_arg(pu, r->o->name, (size_t)-1);
        batch_num(pu, 0, (long long)k->seq);
    }
    for (int j = 0; r->o->sync && j < pu->n; j++)
        if (r->keys[pu->idx[j]].part != (uint64_t)r->o->workers) {
            r->st.uneven_rounds++;
            break;
        }
    if (pu->n) fault_point(r, "take");
    int acked = 0;
    if (pu->n && batch_run(r->up, pu) >= 0) {
        fault_point(r, "push");
        ak->n = 0;
        for (int j = 0; j < pu->n; j++) {
            redisReply *p = pu->rep[j];
            const int i = pu->idx[j];
            relayKey *k = &r->keys[i];
            if (!p) { /* no answer: the slot stays pending and is resent next cycle */
                long long t = mono_ms();
                if (t - r->last_warn_ms >= 1000) {
                    say(r, "upstream push of %s: %s (kept pending, retried)", k->name,
                        r->up->errstr[0] ? r->up->errstr : "no reply");
                    r->last_warn_ms = t;
                }
                continue;
            }
            if (p->type == REDIS_REPLY_ERROR) {
                say(r, "upstream PS.PUSHGRAD %s: %s%s", k->name, p->str,
                    strncmp(p->str, "ERR", 3) && strncmp(p->str, "WRONGTYPE", 9)
                        ? " (kept pending, retried)"
                        : " (kept pending; fix the upstream tensor and restart the relay)");
                if (!strncmp(p->str, "ERR", 3) || !strncmp(p->str, "WRONGTYPE", 9)) fatal = 1;
            } else if (p->type == REDIS_REPLY_INTEGER) {
                uint64_t v = (uint64_t)p->integer;
                r->st.stale_sum += v > k->mirror_version + 1 ? v - k->mirror_version - 1 : 0;
                r->st.local_pushes += k->part;
                r->st.bytes_local += k->part * k->n * 4;
                r->st.bytes_up += k->n * 4;
                batch_add(ak, r, i);
                batch_arg(ak, "PS.TAKEACK", (size_t)-1);
                batch_arg(ak, k->name, (size_t)-1);
                batch_num(ak, 0, (long long)k->seq);
            }
        }
        if (ak->n && batch_run(r->local, ak) >= 0) {
            for (int m = 0; m < ak->n; m++) {
                redisReply *a = ak->rep[m];
                if (a && a->type == REDIS_REPLY_INTEGER) {
                    acked++;
                    r->st.up_pushes++;
                    if (a->integer == 0) r->st.resends++;
                }
            }
            fault_point(r, "ack");
        }
        free_replies(ak);
        free_replies(pu);
    }
    free_replies(tk);
    if (acked) r->round_start_ms = -1;
    return fatal ? -1 : acked;
}

/* The defaults of --max-backlog and --max-round (relay.h). */
static void round_bounds(relay *r) {
    const relayOpts *o = r->o;
    long long round = o->sync ? o->workers : o->every_pushes; /* 0: time only */
    r->max_round = o->max_round >= 0 ? o->max_round : (o->sync ? round : 2 * round);
    r->max_backlog = o->max_backlog >= 0 ? o->max_backlog : (round ? 4 * round : 64);
    snprintf(r->backlog_arg, sizeof(r->backlog_arg), "%lld", r->max_backlog);
}

/* ps-relay --status: the local tensors' persisted round counters. */
static int print_status(relay *r) {
    int bad = 0;
    printf("%-24s %8s %8s %10s %6s %6s %8s %8s %9s %8s\n", "key", "takes", "rounds", "forwarded",
           "min", "max", "backlog", "max_bl", "refusals", "pending");
    for (int i = 0; i < r->nkeys; i++) {
        redisReply *rep = psCommand(r->local, r->keys[i].name, "PS.INFO %s", r->keys[i].name);
        if (!rep || rep->type != REDIS_REPLY_ARRAY) {
            printf("%-24s %s\n", r->keys[i].name,
                   rep && rep->type == REDIS_REPLY_ERROR ? rep->str : r->local->errstr);
            bad = 1;
            if (rep) freeReplyObject(rep);
            continue;
        }
        static const char *const f[] = {"relay_takes", "relay_rounds", "relay_forwarded",
                                        "relay_round_min", "relay_round_max", "backlog",
                                        "max_backlog", "backlog_refusals", "pending_parts"};
        long long v[9];
        for (int x = 0; x < 9; x++) v[x] = -1;
        for (size_t e = 0; e + 1 < rep->elements; e += 2)
            for (int x = 0; x < 9; x++)
                if (rep->element[e]->type == REDIS_REPLY_STRING &&
                    !strcmp(rep->element[e]->str, f[x]) &&
                    rep->element[e + 1]->type == REDIS_REPLY_INTEGER)
                    v[x] = rep->element[e + 1]->integer;
        freeReplyObject(rep);
        if (v[0] < 0) {
            printf("%-24s not an ACCUM tensor of this module version\n", r->keys[i].name);
            bad = 1;
            continue;
        }
        printf("%-24s %8lld %8lld %10lld %6lld %6lld %8lld %8lld %9lld %8lld\n", r->keys[i].name,
               v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8]);
    }
    fflush(stdout);
    return bad ? 1 : 0;
}

int relay_run(const relayOpts *o) {
    relay r;
    memset(&r, 0, sizeof(r));
    r.o = o;
    r.fault = getenv("PS_RELAY_FAULT");
    r.round_start_ms = -1;
    r.start_ms = r.last_progress_ms = mono_ms();
    round_bounds(&r);
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    r.seqfloor = (uint64_t)wall.tv_sec * 1000000u + (uint64_t)wall.tv_nsec / 1000u;
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    int rc = 1;
    batch *b[4] = {NULL, NULL, NULL, NULL};
    psOptions opt = {0};
    opt.client_id = o->name;
    r.local = psConnect(o->local, &opt);
    r.up = o->status ? NULL : psConnect(o->upstream, &opt);
    if (!r.local || (!o->status && !r.up)) {
        say(&r, "out of memory");
        goto out;
    }
    if (r.local->err) {
        say(&r, "--local %s: %s", o->local, r.local->errstr);
        goto out;
    }
    if (o->status) {
        /* The keys as given, or matched on the local server. */
        r.up = r.local;
        rc = find_keys(&r) != 0 ? 2 : print_status(&r);
        r.up = NULL;
        goto out;
    }
    if (r.up->err) {
        say(&r, "--upstream %s: %s", o->upstream, r.up->errstr);
        goto out;
    }
    if (find_keys(&r) != 0) {
        rc = 2;
        goto out;
    }
    for (int i = 0; i < 4; i++)
        if (!(b[i] = batch_new(r.nkeys))) {
            say(&r, "out of memory");
            goto out;
        }
    for (int i = 0; i < r.nkeys; i++)
        if ((rc = setup_key(&r, &r.keys[i])) != 0) goto out;
    rc = 1;
    if (pull_and_mirror(&r, b[0], b[3]) != 0) {
        say(&r, "the first upstream pull failed: %s", r.up->err ? r.up->errstr : "bad reply");
        goto out;
    }
    printf("[relay %s] relaying %d keys from %s to %s, %s, sending the %s, seq floor %" PRIu64
           ", at most %lld gradients per upstream push%s, local backlog bound %lld%s\n",
           o->name, r.nkeys, o->local, o->upstream, o->sync ? "sync rounds" : "async",
           o->mean ? "mean" : "sum", r.seqfloor, r.max_round, r.max_round ? "" : " (no bound)",
           r.max_backlog, r.max_backlog ? "" : " (none)");
    fflush(stdout);
    for (;;) {
        int stopping = Stop;
        int n = cycle(&r, b[0], b[1], b[2]);
        if (n < 0) goto out;
        long long now = mono_ms();
        /* Sync: the local version moves only after a forwarded round, so a
         * worker waiting for the version above its model's (ps-train
         * --sync-rounds, MINVERSION) wakes when its own round is upstream,
         * never on a periodic pull of the other relays' progress. */
        if (n > 0 || (!o->sync && now - r.last_pull_ms >= o->pull_ms))
            pull_and_mirror(&r, b[0], b[3]);
        if (o->progress_ms > 0 && now - r.last_progress_ms >= o->progress_ms) {
            progress(&r, "");
            r.last_progress_ms = now;
        }
        /* Stopping: one more cycle took everything summed (MINCOUNT 1); stop
         * once a cycle forwards nothing. */
        if (stopping && n == 0) break;
    }
    progress(&r, "stopped after ");
    rc = 0;
out:
    psClientFree(r.local);
    psClientFree(r.up);
    for (int i = 0; r.keys && i < r.nkeys; i++) free(r.keys[i].name), free(r.keys[i].buf);
    free(r.keys);
    for (int i = 0; i < 4; i++) batch_free(b[i]);
    return rc;
}
