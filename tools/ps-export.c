/* ps-export -- base + delta export of embedding tables into a serving store
 * (another Redis, or files), with tombstones and resumable after its own
 * crash (docs/operations.md "Exporting to a serving store", docs/design.md
 * "Tombstones and incremental export").
 *
 *   ps-export --source ADDRS (--table NAME --shards N | --key KEY ...)
 *             (--target ADDRS [--prefix P] | --out-dir DIR)
 *             [--every-ms MS] [--passes N] [--count N] [--log-json] [--quiet]
 *
 * Credentials: PS_USER / PS_PASSWORD (the source's, as for every libps
 * program), PS_TARGET_USER / PS_TARGET_PASSWORD (the target's; none when
 * unset).
 *
 * Per source shard, a pass reads PS.TOMBSTONES since the version the target
 * is complete at (the rows removed since), then PS.SCANROWS SINCE ... GONE
 * (the rows changed since, as F16, and the rows dead by TTL), and leaves the
 * target complete as of the version the pass's first page answered. When the
 * source answers REBASE (the tombstone log's horizon passed that version, or
 * the target holds nothing yet) the pass is a base: every row, then the rows
 * of the shard the target holds but the base did not answer are deleted.
 *
 * Redis target (one table = two keys in one hash slot):
 *   P{T}:rows  hash: field = decimal row id, value = dim little-endian F16
 *   P{T}:meta  hash: dim, format (f16), shards, and per shard s:
 *              version:s  the table version the target is complete at (0: none)
 *              state:s    "phase cursor since start" of a pass in progress
 * Every page's deletes, rows and the shard's state:s go in one MULTI/EXEC, so
 * a crash leaves the target at a page boundary with the state to go on from;
 * a crashed base is restarted (its list of answered ids was in memory).
 *
 * File target (--out-dir): a pass of shard s writes T.s<s>.<base|delta>.
 * <from>-<to>.psx (records, see write_record), fsynced and renamed into
 * place, then T.manifest (the files in order and each shard's version) is
 * rewritten the same way: a crash before the manifest's rename loses that
 * pass only, which the next run does again.
 *
 * Exit codes: 0 ok, 1 failure, 2 usage. */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <redis-ps/ps.h>

#include "clock.h"

#define EX_MAX_KEYS 256
#define EX_MAX_SHARDS 1024
#define EX_DEFAULT_COUNT 1024
#define EX_SWEEP_COUNT 1000

typedef struct Opts {
    const char *source, *target, *out_dir, *prefix, *table;
    const char *keys[EX_MAX_KEYS];
    int nkeys, shards;
    long every_ms, passes;
    uint64_t count;
    int log_json, quiet;
} Opts;

/* One exported table: its source shard keys and where it goes. */
typedef struct Table {
    char name[256];
    int nshards, dim;
    char **keys;             /* source shard keys */
    char rows[300], meta[300]; /* target keys (Redis target) */
    uint64_t *version;       /* per shard: complete as of (files: from the manifest) */
    char **files;            /* file target: the manifest's files, in order */
    size_t nfiles;
} Table;

/* What one pass of one shard did. */
typedef struct PassStats {
    uint64_t since, version, rows, gone, pages;
    int base, resumed;
    double ms;
} PassStats;

static volatile sig_atomic_t Stop;
static void on_signal(int sig) {
    (void)sig;
    Stop = 1;
}

static double now_ms(void) { return ps_mono_s() * 1e3; }

static void die_usage(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ps-export: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (ps-export --help)\n");
    va_end(ap);
    exit(2);
}

static void usage(FILE *out) {
    fprintf(out,
            "usage: ps-export --source ADDRS (--table NAME --shards N | --key KEY ...)\n"
            "                 (--target ADDRS [--prefix P] | --out-dir DIR)\n"
            "                 [--every-ms MS] [--passes N] [--count N] [--log-json] [--quiet]\n"
            "Exports the rows of embedding tables changed since the last export (as F16) and\n"
            "deletes the rows removed meanwhile (tombstones), into another Redis or files.\n"
            "  --source ADDRS   the training servers (host:port[,host:port...]; a replica will do)\n"
            "  --table NAME     a sharded table (ps-train's is JOB:emb) of --shards N shards\n"
            "  --key KEY        a table key (repeatable; each exported as its own table)\n"
            "  --target ADDRS   the serving Redis: P{T}:rows (id -> F16 row) and P{T}:meta\n"
            "  --prefix P       key prefix on the target (ps:export:)\n"
            "  --out-dir DIR    files instead: T.s<s>.<base|delta>.<from>-<to>.psx and T.manifest\n"
            "  --every-ms MS    export continuously, a pass every MS ms (until SIGTERM)\n"
            "  --passes N       stop after N passes (1 without --every-ms; 0: no limit)\n"
            "  --count N        index buckets / log entries per page (1024, at most %u)\n"
            "  --log-json       one JSON object per pass and a summary on stdout\n"
            "  --quiet          no progress lines\n"
            "Credentials: PS_USER / PS_PASSWORD for the source, PS_TARGET_USER /\n"
            "PS_TARGET_PASSWORD for the target (none when unset).\n",
            PS_SCAN_MAX_COUNT);
}

static long parse_long(const char *flag, const char *v, long lo, long hi) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *end || end == v || x < lo || x > hi)
        die_usage("%s: '%s' is not an integer in [%ld, %ld]", flag, v, lo, hi);
    return x;
}

static void parse_opts(int argc, char **argv, Opts *o) {
    memset(o, 0, sizeof(*o));
    o->prefix = "ps:export:";
    o->count = EX_DEFAULT_COUNT;
    o->passes = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            exit(0);
        }
        if (!strcmp(a, "--log-json")) {
            o->log_json = 1;
            continue;
        }
        if (!strcmp(a, "--quiet")) {
            o->quiet = 1;
            continue;
        }
        if (i + 1 >= argc) die_usage("%s needs a value", a);
        const char *v = argv[++i];
        if (!strcmp(a, "--source")) o->source = v;
        else if (!strcmp(a, "--target")) o->target = v;
        else if (!strcmp(a, "--out-dir")) o->out_dir = v;
        else if (!strcmp(a, "--prefix")) o->prefix = v;
        else if (!strcmp(a, "--table")) o->table = v;
        else if (!strcmp(a, "--shards")) o->shards = (int)parse_long(a, v, 1, EX_MAX_SHARDS);
        else if (!strcmp(a, "--every-ms")) o->every_ms = parse_long(a, v, 1, 86400000L);
        else if (!strcmp(a, "--passes")) o->passes = parse_long(a, v, 0, 1L << 40);
        else if (!strcmp(a, "--count")) o->count = (uint64_t)parse_long(a, v, 1, PS_SCAN_MAX_COUNT);
        else if (!strcmp(a, "--key")) {
            if (o->nkeys == EX_MAX_KEYS) die_usage("at most %d --key", EX_MAX_KEYS);
            o->keys[o->nkeys++] = v;
        } else die_usage("unknown option '%s'", a);
    }
    if (!o->source) die_usage("--source is required");
    if (!o->table == !o->nkeys) die_usage("give --table NAME --shards N, or --key KEY");
    if (o->table && !o->shards) die_usage("--table needs --shards (ps-train's --table-shards)");
    if (!o->target == !o->out_dir) die_usage("give --target ADDRS or --out-dir DIR");
    if (strlen(o->prefix) > 64) die_usage("--prefix: at most 64 bytes");
    if (o->passes < 0) o->passes = o->every_ms ? 0 : 1;
}

/* ------------------------------------------------------------------------
 * Progress
 * ---------------------------------------------------------------------- */

static void report_pass(const Opts *o, const Table *t, int s, const PassStats *p) {
    if (o->log_json) {
        printf("{\"event\":\"pass\",\"table\":\"%s\",\"shard\":%d,\"since\":%" PRIu64
               ",\"version\":%" PRIu64 ",\"base\":%d,\"resumed\":%d,\"rows\":%" PRIu64
               ",\"gone\":%" PRIu64 ",\"pages\":%" PRIu64 ",\"ms\":%.1f}\n",
               t->name, s, p->since, p->version, p->base, p->resumed, p->rows, p->gone, p->pages,
               p->ms);
        fflush(stdout);
    } else if (!o->quiet) {
        fprintf(stderr, "ps-export: %s shard %d: %s %" PRIu64 " -> %" PRIu64 ": %" PRIu64
                " rows written, %" PRIu64 " deleted, %" PRIu64 " pages, %.1f ms%s\n",
                t->name, s, p->base ? "base" : "delta since", p->since, p->version, p->rows, p->gone,
                p->pages, p->ms, p->resumed ? " (resumed)" : "");
    }
}

static int fail(const char *what, const psClient *c) {
    fprintf(stderr, "ps-export: %s: %s\n", what, c ? c->errstr : strerror(errno));
    return -1;
}

/* ------------------------------------------------------------------------
 * The Redis target
 * ---------------------------------------------------------------------- */

/* A MULTI ... EXEC of commands built in 'b' (argv arrays), one round trip. */
typedef struct Tx {
    int n, cap;
    int *argc;
    const char ***argv;
    size_t **argl;
    const char **keys;
} Tx;

static void tx_reset(Tx *x) {
    for (int i = 0; i < x->n; i++) {
        free(x->argv[i]);
        free(x->argl[i]);
    }
    x->n = 0;
}

static void tx_free(Tx *x) {
    tx_reset(x);
    free(x->argc);
    free(x->argv);
    free(x->argl);
    free(x->keys);
    memset(x, 0, sizeof(*x));
}

/* Appends a command of 'argc' arguments; returns its argv/argl to fill. */
static int tx_add(Tx *x, const char *key, int argc, const char ***argv, size_t **argl) {
    if (x->n == x->cap) {
        int cap = x->cap ? 2 * x->cap : 8;
        int *na = realloc(x->argc, cap * sizeof(int));
        if (na) x->argc = na;
        const char ***nv = realloc(x->argv, cap * sizeof(*nv));
        if (nv) x->argv = nv;
        size_t **nl = realloc(x->argl, cap * sizeof(*nl));
        if (nl) x->argl = nl;
        const char **nk = realloc(x->keys, cap * sizeof(*nk));
        if (nk) x->keys = nk;
        if (!na || !nv || !nl || !nk) return -1;
        x->cap = cap;
    }
    *argv = calloc((size_t)argc, sizeof(**argv));
    *argl = calloc((size_t)argc, sizeof(**argl));
    if (!*argv || !*argl) {
        free(*argv);
        free(*argl);
        return -1;
    }
    x->argc[x->n] = argc;
    x->argv[x->n] = *argv;
    x->argl[x->n] = *argl;
    x->keys[x->n] = key;
    x->n++;
    return 0;
}

static int tx_simple(Tx *x, const char *key, int argc, ...) {
    const char **av;
    size_t *al;
    if (tx_add(x, key, argc, &av, &al) != 0) return -1;
    va_list ap;
    va_start(ap, argc);
    for (int i = 0; i < argc; i++) {
        av[i] = va_arg(ap, const char *);
        al[i] = strlen(av[i]);
    }
    va_end(ap);
    return 0;
}

/* Sends the commands of 'x' (MULTI first, EXEC last) and checks EXEC ran
 * them all. */
static int tx_run(psClient *c, Tx *x) {
    redisReply **rep = calloc((size_t)x->n, sizeof(*rep));
    if (!rep) return -1;
    int got = psCommandBatchArgv(c, x->n, x->keys, x->argc, (const char **const *)x->argv,
                                 (const size_t *const *)x->argl, rep);
    int rc = got == x->n ? 0 : -1;
    if (rc == 0) {
        const redisReply *e = rep[x->n - 1];
        if (!e || e->type != REDIS_REPLY_ARRAY || e->elements != (size_t)(x->n - 2)) {
            fprintf(stderr, "ps-export: target transaction failed: %s\n",
                    e && e->type == REDIS_REPLY_ERROR ? e->str : "EXEC did not run every command");
            rc = -1;
        } else {
            for (size_t i = 0; i < e->elements; i++)
                if (e->element[i]->type == REDIS_REPLY_ERROR) {
                    fprintf(stderr, "ps-export: target: %s\n", e->element[i]->str);
                    rc = -1;
                }
        }
    } else {
        fail("target", c);
    }
    for (int i = 0; i < x->n; i++)
        if (rep[i]) freeReplyObject(rep[i]);
    free(rep);
    return rc;
}

/* Decimal ids of a page, one buffer (fields of HSET / HDEL). */
typedef struct IdText {
    char *buf;
    size_t *off, *len;
} IdText;

static int idtext_make(IdText *t, const uint64_t *ids, size_t n) {
    t->buf = malloc(n * 21 + 1);
    t->off = malloc((n + 1) * sizeof(size_t));
    t->len = malloc((n + 1) * sizeof(size_t));
    if (!t->buf || !t->off || !t->len) return -1;
    size_t p = 0;
    for (size_t i = 0; i < n; i++) {
        t->off[i] = p;
        t->len[i] = (size_t)sprintf(t->buf + p, "%" PRIu64, ids[i]);
        p += t->len[i] + 1;
    }
    return 0;
}

static void idtext_free(IdText *t) {
    free(t->buf);
    free(t->off);
    free(t->len);
}

/* The shard's state in the target: "phase cursor since start". */
enum { PH_IDLE = 0, PH_TOMB, PH_ROWS, PH_BASE };
static const char *const PhaseName[] = {"idle", "tomb", "rows", "base"};

typedef struct ShardState {
    int phase;
    uint64_t cursor, since, start;
} ShardState;

static void state_text(const ShardState *s, char *buf, size_t cap) {
    snprintf(buf, cap, "%s %" PRIu64 " %" PRIu64 " %" PRIu64, PhaseName[s->phase], s->cursor,
             s->since, s->start);
}

static int state_parse(const char *txt, ShardState *s) {
    char ph[16];
    unsigned long long c, si, st;
    if (sscanf(txt, "%15s %llu %llu %llu", ph, &c, &si, &st) != 4) return -1;
    for (int k = 0; k < 4; k++)
        if (!strcmp(ph, PhaseName[k])) {
            *s = (ShardState){k, c, si, st};
            return 0;
        }
    return -1;
}

/* One page's writes to the target and the shard's new state, atomically. */
static int commit_page(psClient *tgt, const Table *t, int s, const uint64_t *gone, size_t ngone,
                       const uint64_t *ids, size_t nrows, const unsigned char *f16,
                       const ShardState *st, uint64_t complete_version) {
    Tx x = {0};
    IdText gt = {0}, rt = {0};
    char field[32], state[128], vfield[32], vtext[32];
    int rc = -1;
    snprintf(field, sizeof(field), "state:%d", s);
    state_text(st, state, sizeof(state));
    if (idtext_make(&gt, gone, ngone) != 0 || idtext_make(&rt, ids, nrows) != 0) goto out;
    if (tx_simple(&x, t->rows, 1, "MULTI") != 0) goto out;
    if (ngone) {
        const char **av;
        size_t *al;
        if (tx_add(&x, t->rows, (int)ngone + 2, &av, &al) != 0) goto out;
        av[0] = "HDEL", al[0] = 4;
        av[1] = t->rows, al[1] = strlen(t->rows);
        for (size_t i = 0; i < ngone; i++) av[2 + i] = gt.buf + gt.off[i], al[2 + i] = gt.len[i];
    }
    if (nrows) {
        const char **av;
        size_t *al;
        const size_t rb = (size_t)t->dim * 2;
        if (tx_add(&x, t->rows, (int)(2 * nrows) + 2, &av, &al) != 0) goto out;
        av[0] = "HSET", al[0] = 4;
        av[1] = t->rows, al[1] = strlen(t->rows);
        for (size_t i = 0; i < nrows; i++) {
            av[2 + 2 * i] = rt.buf + rt.off[i], al[2 + 2 * i] = rt.len[i];
            av[3 + 2 * i] = (const char *)f16 + i * rb, al[3 + 2 * i] = rb;
        }
    }
    if (complete_version) {
        snprintf(vfield, sizeof(vfield), "version:%d", s);
        snprintf(vtext, sizeof(vtext), "%" PRIu64, complete_version);
        if (tx_simple(&x, t->meta, 6, "HSET", t->meta, field, state, vfield, vtext) != 0) goto out;
    } else if (tx_simple(&x, t->meta, 4, "HSET", t->meta, field, state) != 0) {
        goto out;
    }
    if (tx_simple(&x, t->rows, 1, "EXEC") != 0) goto out;
    rc = tx_run(tgt, &x);
out:
    if (rc != 0 && x.n == 0) fprintf(stderr, "ps-export: out of memory\n");
    tx_free(&x);
    idtext_free(&gt);
    idtext_free(&rt);
    return rc;
}

/* Reads the shard's state (absent: a base from the start). */
static int load_state(psClient *tgt, const Table *t, int s, ShardState *st, uint64_t *version) {
    redisReply *r = psCommand(tgt, t->meta, "HMGET %s state:%d version:%d", t->meta, s, s);
    if (!r) return fail("target", tgt);
    int rc = 0;
    *st = (ShardState){PH_BASE, 0, 0, 0};
    *version = 0;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
        fprintf(stderr, "ps-export: target: unexpected HMGET reply for %s\n", t->meta);
        rc = -1;
    } else {
        if (r->element[1]->type == REDIS_REPLY_STRING) *version = strtoull(r->element[1]->str, NULL, 10);
        if (r->element[0]->type == REDIS_REPLY_STRING && state_parse(r->element[0]->str, st) != 0) {
            fprintf(stderr, "ps-export: target: bad state '%s' in %s (starting a base)\n",
                    r->element[0]->str, t->meta);
            *st = (ShardState){PH_BASE, 0, 0, 0};
        }
    }
    freeReplyObject(r);
    return rc;
}

/* A sorted set of ids (the rows a base answered). */
typedef struct IdSet {
    uint64_t *v;
    size_t n, cap;
} IdSet;

static int idset_add(IdSet *s, const uint64_t *ids, size_t n) {
    if (s->n + n > s->cap) {
        size_t cap = s->cap ? s->cap : 1024;
        while (cap < s->n + n) cap *= 2;
        uint64_t *nv = realloc(s->v, cap * sizeof(uint64_t));
        if (!nv) return -1;
        s->v = nv;
        s->cap = cap;
    }
    memcpy(s->v + s->n, ids, n * sizeof(uint64_t));
    s->n += n;
    return 0;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int idset_has(const IdSet *s, uint64_t id) {
    return bsearch(&id, s->v, s->n, sizeof(uint64_t), cmp_u64) != NULL;
}

/* After a base of shard 's': deletes the target's rows of the shard that
 * the base did not answer (removed before or while it ran). */
static int sweep_stale(psClient *tgt, const Table *t, int s, IdSet *seen, uint64_t *deleted) {
    qsort(seen->v, seen->n, sizeof(uint64_t), cmp_u64);
    char cursor[32] = "0";
    do {
        redisReply *r = psCommand(tgt, t->rows, "HSCAN %s %s COUNT %d", t->rows, cursor, EX_SWEEP_COUNT);
        if (!r) return fail("target", tgt);
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != REDIS_REPLY_STRING ||
            r->element[0]->len >= sizeof(cursor) || r->element[1]->type != REDIS_REPLY_ARRAY) {
            freeReplyObject(r);
            fprintf(stderr, "ps-export: target: unexpected HSCAN reply\n");
            return -1;
        }
        memcpy(cursor, r->element[0]->str, r->element[0]->len);
        cursor[r->element[0]->len] = '\0';
        const redisReply *kv = r->element[1];
        uint64_t *stale = malloc((kv->elements / 2 + 1) * sizeof(uint64_t));
        size_t n = 0;
        for (size_t i = 0; stale && i + 1 < kv->elements; i += 2) {
            char *end;
            uint64_t id = strtoull(kv->element[i]->str, &end, 10);
            if (*end) continue; /* not a row field */
            if (t->nshards > 1 && psEmbedShardOf(id, t->nshards) != s) continue;
            if (!idset_has(seen, id)) stale[n++] = id;
        }
        freeReplyObject(r);
        if (!stale) return -1;
        if (n) {
            IdText tx = {0};
            Tx x = {0};
            const char **av;
            size_t *al;
            int rc = idtext_make(&tx, stale, n) == 0 && tx_simple(&x, t->rows, 1, "MULTI") == 0 &&
                             tx_add(&x, t->rows, (int)n + 2, &av, &al) == 0
                         ? 0 : -1;
            if (rc == 0) {
                av[0] = "HDEL", al[0] = 4;
                av[1] = t->rows, al[1] = strlen(t->rows);
                for (size_t i = 0; i < n; i++) av[2 + i] = tx.buf + tx.off[i], al[2 + i] = tx.len[i];
                rc = tx_simple(&x, t->rows, 1, "EXEC") == 0 ? tx_run(tgt, &x) : -1;
            }
            tx_free(&x);
            idtext_free(&tx);
            if (rc != 0) {
                free(stale);
                return -1;
            }
            *deleted += n;
        }
        free(stale);
    } while (strcmp(cursor, "0") != 0 && !Stop);
    return Stop ? -1 : 0;
}

/* One pass of shard 's' into the Redis target. */
static int pass_redis(const Opts *o, psClient *src, psClient *tgt, Table *t, int s, PassStats *ps) {
    ShardState st;
    uint64_t complete;
    if (load_state(tgt, t, s, &st, &complete) != 0) return -1;
    memset(ps, 0, sizeof(*ps));
    const double t0 = now_ms();
    if (st.phase == PH_IDLE) {
        st = (ShardState){complete ? PH_TOMB : PH_BASE, 0, complete, 0};
    } else if (st.phase == PH_BASE) {
        /* A crashed base starts again (the ids it answered were in memory). */
        ps->resumed = st.start != 0;
        st = (ShardState){PH_BASE, 0, 0, 0};
    } else {
        ps->resumed = 1;
    }
    ps->since = st.since;
    const char *key = t->keys[s];
    IdSet seen = {0};
    int rc = 0;
    while (!Stop) {
        psScanPage pg;
        if (st.phase == PH_TOMB) {
            if (psTableTombstones(src, key, st.cursor, st.since, o->count, &pg) != PS_OK) {
                psScanPageFree(&pg);
                if (src->err != PS_ERR_REBASE) {
                    rc = fail(key, src);
                    break;
                }
                st = (ShardState){PH_BASE, 0, 0, 0};
                continue;
            }
            if (!st.start) st.start = pg.version;
            ShardState nx = st;
            nx.cursor = pg.cursor;
            if (!pg.cursor) nx.phase = PH_ROWS;
            rc = commit_page(tgt, t, s, pg.gone, pg.ngone, NULL, 0, NULL, &nx, 0);
            ps->gone += pg.ngone;
            ps->pages++;
            psScanPageFree(&pg);
            if (rc != 0) break;
            st = nx;
            continue;
        }
        const int base = st.phase == PH_BASE;
        ps->base |= base;
        if (psTableScan(src, key, st.cursor, base ? 0 : st.since, o->count, PS_WIRE_F16, !base, &pg) != PS_OK) {
            psScanPageFree(&pg);
            rc = fail(key, src);
            break;
        }
        if (pg.value_bytes != pg.nrows * (size_t)t->dim * 2) {
            psScanPageFree(&pg);
            fprintf(stderr, "ps-export: %s: rows are not of dim %d\n", key, t->dim);
            rc = -1;
            break;
        }
        if (!st.start) st.start = pg.version;
        if (base && idset_add(&seen, pg.ids, pg.nrows) != 0) {
            psScanPageFree(&pg);
            rc = fail("out of memory", NULL);
            break;
        }
        ShardState nx = st;
        nx.cursor = pg.cursor;
        uint64_t done = 0;
        if (!pg.cursor && !base) {
            nx = (ShardState){PH_IDLE, 0, st.start, st.start};
            done = st.start;
        }
        rc = commit_page(tgt, t, s, pg.gone, pg.ngone, pg.ids, pg.nrows, pg.values, &nx, done);
        ps->rows += pg.nrows;
        ps->gone += pg.ngone;
        ps->pages++;
        psScanPageFree(&pg);
        if (rc != 0) break;
        st = nx;
        if (!nx.cursor && base) {
            /* The base is written: drop what it did not answer, then done. */
            if ((rc = sweep_stale(tgt, t, s, &seen, &ps->gone)) != 0) break;
            st = (ShardState){PH_IDLE, 0, st.start, st.start};
            if ((rc = commit_page(tgt, t, s, NULL, 0, NULL, 0, NULL, &st, st.start)) != 0) break;
        }
        if (st.phase == PH_IDLE) break;
    }
    free(seen.v);
    if (Stop && rc == 0 && st.phase != PH_IDLE) rc = -1;
    ps->version = st.start;
    ps->ms = now_ms() - t0;
    t->version[s] = st.phase == PH_IDLE ? st.start : t->version[s];
    return rc;
}

/* The target's meta fields a serving client reads (dim, format, shards). */
static int init_meta(psClient *tgt, const Table *t) {
    char dim[16], shards[16];
    snprintf(dim, sizeof(dim), "%d", t->dim);
    snprintf(shards, sizeof(shards), "%d", t->nshards);
    redisReply *r = psCommand(tgt, t->meta, "HSET %s dim %s format f16 shards %s", t->meta, dim, shards);
    if (!r) return fail("target", tgt);
    int rc = r->type == REDIS_REPLY_ERROR ? -1 : 0;
    if (rc) fprintf(stderr, "ps-export: target: %s\n", r->str);
    freeReplyObject(r);
    return rc;
}

/* ------------------------------------------------------------------------
 * The file target
 * ---------------------------------------------------------------------- */

/* A .psx file: a 33-byte header (the magic "PSX1", u32 dim, u32 format
 * (1 = F16), u32 shard, u64 from, u64 to, u8 base: 1 = the shard's rows are
 * these, drop what you hold of it), then records: 'G' u64 n, n ids (rows gone);
 * 'R' u64 n, n ids, n * dim F16 (rows); 'E' (the end). Little-endian. */
static int write_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

static int write_record(int fd, char kind, const uint64_t *ids, size_t n, const void *vals, size_t vbytes) {
    uint64_t n64 = n;
    if (write_all(fd, &kind, 1) || write_all(fd, &n64, 8) || write_all(fd, ids, n * 8)) return -1;
    return vbytes ? write_all(fd, vals, vbytes) : 0;
}

/* Writes 'tmp' (already written) into 'path' durably: fsync, rename, fsync
 * of the directory. */
static int commit_file(int fd, const char *tmp, const char *path, const char *dir) {
    if (fsync(fd) != 0 || close(fd) != 0 || rename(tmp, path) != 0) return -1;
    int d = open(dir, O_RDONLY);
    if (d >= 0) {
        fsync(d);
        close(d);
    }
    return 0;
}

/* The manifest: "psx-manifest 1", "table T", "dim D", "shards N", one
 * "version s v" per shard, then one "file NAME" per file in order. */
static int save_manifest(const Opts *o, const Table *t) {
    char path[4096], tmp[4200];
    snprintf(path, sizeof(path), "%s/%s.manifest", o->out_dir, t->name);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return fail(tmp, NULL);
    fprintf(f, "psx-manifest 1\ntable %s\ndim %d\nshards %d\n", t->name, t->dim, t->nshards);
    for (int s = 0; s < t->nshards; s++) fprintf(f, "version %d %" PRIu64 "\n", s, t->version[s]);
    for (size_t i = 0; i < t->nfiles; i++) fprintf(f, "file %s\n", t->files[i]);
    if (fflush(f) != 0) {
        fclose(f);
        return fail(tmp, NULL);
    }
    int fd = dup(fileno(f));
    fclose(f);
    if (fd < 0 || commit_file(fd, tmp, path, o->out_dir) != 0) return fail(path, NULL);
    return 0;
}

static int load_manifest(const Opts *o, Table *t) {
    char path[4096], line[1024];
    snprintf(path, sizeof(path), "%s/%s.manifest", o->out_dir, t->name);
    FILE *f = fopen(path, "r");
    if (!f) return errno == ENOENT ? 0 : fail(path, NULL);
    int rc = 0;
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = '\0';
        int s;
        unsigned long long v;
        if (sscanf(line, "version %d %llu", &s, &v) == 2 && s >= 0 && s < t->nshards) {
            t->version[s] = v;
        } else if (!strncmp(line, "file ", 5)) {
            char **nf = realloc(t->files, (t->nfiles + 1) * sizeof(char *));
            if (!nf || !(nf[t->nfiles] = strdup(line + 5))) {
                if (nf) t->files = nf;
                rc = fail("out of memory", NULL);
                break;
            }
            t->files = nf;
            t->nfiles++;
        }
    }
    fclose(f);
    return rc;
}

/* One pass of shard 's' into a file; the manifest names it once complete. */
static int pass_file(const Opts *o, psClient *src, Table *t, int s, PassStats *ps) {
    memset(ps, 0, sizeof(*ps));
    const double t0 = now_ms();
    const char *key = t->keys[s];
    uint64_t since = t->version[s], start = 0, cursor = 0;
    const uint64_t asked = since; /* reported: what the pass started from */
    int base = since == 0, rc = 0;
    char tmp[4200], name[512], path[4800];
    snprintf(tmp, sizeof(tmp), "%s/.%s.s%d.partial", o->out_dir, t->name, s);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return fail(tmp, NULL);
    unsigned char head[4 + 12 + 16 + 1] = {0};
    int tomb = !base;
    if (write_all(fd, head, sizeof(head)) != 0) rc = fail(tmp, NULL); /* filled in at the end */
    while (!Stop && rc == 0) {
        psScanPage pg;
        if (tomb) {
            if (psTableTombstones(src, key, cursor, since, o->count, &pg) != PS_OK) {
                psScanPageFree(&pg);
                if (src->err != PS_ERR_REBASE) {
                    rc = fail(key, src);
                    break;
                }
                /* Re-base: start the file again. */
                base = 1, tomb = 0, cursor = 0, start = 0, since = 0;
                ps->gone = 0;
                if (ftruncate(fd, (off_t)sizeof(head)) != 0 || lseek(fd, (off_t)sizeof(head), SEEK_SET) < 0) {
                    rc = fail(tmp, NULL);
                    break;
                }
                continue;
            }
            if (!start) start = pg.version;
            if (pg.ngone && write_record(fd, 'G', pg.gone, pg.ngone, NULL, 0) != 0) rc = fail(tmp, NULL);
            ps->gone += pg.ngone;
        } else {
            if (psTableScan(src, key, cursor, base ? 0 : since, o->count, PS_WIRE_F16, !base, &pg) != PS_OK) {
                psScanPageFree(&pg);
                rc = fail(key, src);
                break;
            }
            if (!start) start = pg.version;
            if (pg.ngone && write_record(fd, 'G', pg.gone, pg.ngone, NULL, 0) != 0) rc = fail(tmp, NULL);
            if (pg.nrows && write_record(fd, 'R', pg.ids, pg.nrows, pg.values, pg.value_bytes) != 0)
                rc = fail(tmp, NULL);
            ps->rows += pg.nrows;
            ps->gone += pg.ngone;
        }
        ps->pages++;
        cursor = pg.cursor;
        psScanPageFree(&pg);
        if (rc) break;
        if (!cursor) {
            if (!tomb) break;
            tomb = 0;
        }
    }
    if (rc == 0 && Stop) rc = -1;
    if (rc == 0) {
        /* The end record, then the header (its room was left at the start). */
        uint32_t dim = (uint32_t)t->dim, fmt = 1, shard = (uint32_t)s;
        memcpy(head, "PSX1", 4);
        memcpy(head + 4, &dim, 4);
        memcpy(head + 8, &fmt, 4);
        memcpy(head + 12, &shard, 4);
        memcpy(head + 16, &since, 8);
        memcpy(head + 24, &start, 8);
        head[32] = (unsigned char)base;
        if (write_all(fd, "E", 1) != 0 || pwrite(fd, head, sizeof(head), 0) != (ssize_t)sizeof(head))
            rc = fail(tmp, NULL);
    }
    snprintf(name, sizeof(name), "%s.s%d.%s.%" PRIu64 "-%" PRIu64 ".psx", t->name, s,
             base ? "base" : "delta", base ? 0 : since, start);
    snprintf(path, sizeof(path), "%s/%s", o->out_dir, name);
    if (rc == 0 && commit_file(fd, tmp, path, o->out_dir) != 0) rc = fail(path, NULL);
    else if (rc != 0) close(fd);
    if (rc == 0) {
        char **nf = realloc(t->files, (t->nfiles + 1) * sizeof(char *));
        if (!nf || !(nf[t->nfiles] = strdup(name))) return fail("out of memory", NULL);
        t->files = nf;
        t->nfiles++;
        const uint64_t old = t->version[s];
        t->version[s] = start;
        if ((rc = save_manifest(o, t)) != 0) t->version[s] = old;
    }
    ps->since = asked;
    ps->base = base;
    ps->version = start;
    ps->ms = now_ms() - t0;
    return rc;
}

/* ------------------------------------------------------------------------
 * Main
 * ---------------------------------------------------------------------- */

static int setup_table(const Opts *o, psClient *src, Table *t, const char *name, char **keys,
                       int nshards) {
    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->nshards = nshards;
    t->keys = keys;
    snprintf(t->rows, sizeof(t->rows), "%s{%s}:rows", o->prefix, name);
    snprintf(t->meta, sizeof(t->meta), "%s{%s}:meta", o->prefix, name);
    t->version = calloc((size_t)nshards, sizeof(uint64_t));
    if (!t->version) return fail("out of memory", NULL);
    psKeyInfo ki;
    if (psInfo(src, keys[0], &ki) != PS_OK) return fail(keys[0], src);
    if (!ki.is_table) {
        fprintf(stderr, "ps-export: %s is not an embedding table\n", keys[0]);
        return -1;
    }
    t->dim = ki.dim;
    if (o->out_dir && strchr(name, '/')) {
        fprintf(stderr, "ps-export: table name '%s' has a '/': not a file name\n", name);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    Opts o;
    parse_opts(argc, argv, &o);
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    psClient *src = psConnect(o.source, NULL);
    if (!src || src->err) return fail("source", src), psClientFree(src), 1;
    psClient *tgt = NULL;
    if (o.target) {
        /* The target's own credentials (PS_USER / PS_PASSWORD are the source's). */
        psOptions to = {0};
        to.user = getenv("PS_TARGET_USER") ? getenv("PS_TARGET_USER") : "";
        to.password = getenv("PS_TARGET_PASSWORD") ? getenv("PS_TARGET_PASSWORD") : "";
        tgt = psConnect(o.target, &to);
        if (!tgt || tgt->err) return fail("target", tgt), psClientFree(tgt), psClientFree(src), 1;
    } else if (mkdir(o.out_dir, 0755) != 0 && errno != EEXIST) {
        return fail(o.out_dir, NULL), psClientFree(src), 1;
    }

    int ntables = o.table ? 1 : o.nkeys, rc = 0;
    Table *tables = calloc((size_t)ntables, sizeof(Table));
    psEmbed *e = NULL;
    if (!tables) return fail("out of memory", NULL), 1;
    if (o.table) {
        e = psEmbedNew(o.table, 1, o.shards);
        char **keys = e ? calloc((size_t)o.shards, sizeof(char *)) : NULL;
        if (!keys) return fail("out of memory", NULL), 1;
        for (int s = 0; s < o.shards; s++) keys[s] = (char *)psEmbedShardKey(e, s);
        rc = setup_table(&o, src, &tables[0], o.table, keys, o.shards);
    } else {
        for (int i = 0; i < o.nkeys && rc == 0; i++)
            rc = setup_table(&o, src, &tables[i], o.keys[i], (char **)&o.keys[i], 1);
    }
    for (int i = 0; i < ntables && rc == 0; i++)
        rc = tgt ? init_meta(tgt, &tables[i]) : load_manifest(&o, &tables[i]);

    uint64_t passes = 0, rows = 0, gone = 0, bases = 0;
    while (rc == 0 && !Stop) {
        const double t0 = now_ms();
        for (int i = 0; i < ntables && rc == 0 && !Stop; i++)
            for (int s = 0; s < tables[i].nshards && rc == 0 && !Stop; s++) {
                PassStats p;
                rc = tgt ? pass_redis(&o, src, tgt, &tables[i], s, &p) : pass_file(&o, src, &tables[i], s, &p);
                if (rc == 0) {
                    report_pass(&o, &tables[i], s, &p);
                    rows += p.rows;
                    gone += p.gone;
                    bases += (uint64_t)p.base;
                }
            }
        if (rc != 0) break;
        passes++;
        if (o.passes && passes >= (uint64_t)o.passes) break;
        if (!o.every_ms) continue;
        /* Sleeps of at most 100 ms, so a SIGTERM is seen soon. */
        for (double left = o.every_ms - (now_ms() - t0); left > 0 && !Stop; left = o.every_ms - (now_ms() - t0))
            ps_sleep_ms(left > 100 ? 100 : (long)left + 1);
    }
    if (Stop && rc != 0) rc = 0; /* stopped mid-pass: the target holds its progress */
    if (o.log_json) {
        printf("{\"event\":\"done\",\"ok\":%s,\"passes\":%" PRIu64 ",\"rows\":%" PRIu64
               ",\"gone\":%" PRIu64 ",\"bases\":%" PRIu64 ",\"versions\":[",
               rc == 0 ? "true" : "false", passes, rows, gone, bases);
        const char *sep = "";
        for (int i = 0; i < ntables; i++)
            for (int s = 0; s < tables[i].nshards; s++) {
                printf("%s%" PRIu64, sep, tables[i].version ? tables[i].version[s] : 0);
                sep = ",";
            }
        printf("]}\n");
    } else if (!o.quiet) {
        fprintf(stderr, "ps-export: %s: %" PRIu64 " passes, %" PRIu64 " rows written, %" PRIu64
                " deleted\n", rc == 0 ? "done" : "FAILED", passes, rows, gone);
    }
    for (int i = 0; i < ntables; i++) {
        free(tables[i].version);
        for (size_t k = 0; k < tables[i].nfiles; k++) free(tables[i].files[k]);
        free(tables[i].files);
        if (o.table) free(tables[i].keys);
    }
    free(tables);
    psEmbedFree(e);
    psClientFree(tgt);
    psClientFree(src);
    return rc == 0 ? 0 : 1;
}
