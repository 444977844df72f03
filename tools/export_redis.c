/* export_redis.c -- ps-export (ps-export.c) into another Redis: per page,
 * the deletes, the rows (F16) and the shard's progress in one MULTI/EXEC;
 * a crashed pass resumes from the progress; a base ends with a sweep of
 * the rows it did not answer. */

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
#include "export.h"

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
int pass_redis(const Opts *o, psClient *src, psClient *tgt, Table *t, int s, PassStats *ps) {
    ShardState st = {0};        /* load_state sets both (fail() is opaque here) */
    uint64_t complete = 0;
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
int init_meta(psClient *tgt, const Table *t) {
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
