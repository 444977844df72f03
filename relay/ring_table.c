/* ring_table.c -- ps-relay --ring (ring.h) on embedding tables: a key is a
 * tensor (ringKey.dim 0: deltas of elements) or a ring-tracked table
 * (ringKey.dim > 0: deltas of rows, u64 ids and dim floats each,
 * docs/commands.md "Ring commands"). The calls of a round go through the
 * three dispatchers here; the start check of a table (same dim, optimizer,
 * lr and row initializer everywhere, no eviction), its start hash and its
 * barrier comparison read the rows with the export scan. */

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <redis-ps/ps.h>

#include "agent.h"
#include "protocol.h"
#include "ring_int.h"

int ring_key_take(const ringKey *key, psClient *c, uint64_t seqfloor, double thr, psDelta *d) {
    if (key->dim) return psDeltaTakeRows(c, key->name, key->dim, seqfloor, thr, 0, d);
    return psDeltaTake(c, key->name, key->n, seqfloor, thr, 0, d);
}

int ring_key_fwd(const ringKey *key, psClient *c, psDelta *e) {
    if (key->dim) return psDeltaFwdRows(c, key->name, key->dim, e);
    return psDeltaFwd(c, key->name, key->n, e);
}

int ring_key_apply(const ringKey *key, psClient *c, const char *origin, uint64_t seq,
                   uint64_t prev, const psDelta *d, int64_t hops) {
    if (key->dim)
        return psDeltaApplyRows(c, key->name, origin, seq, prev, d->ids, d->vals, (size_t)d->count,
                                key->dim, hops);
    return psDeltaApplyPrev(c, key->name, origin, seq, prev, d->idx, d->vals, (size_t)d->count,
                            hops);
}

uint64_t ring_delta_bytes(const ringKey *key, uint64_t count) {
    return key->dim ? count * (8 + 4 * (uint64_t)key->dim) : count * 8;
}

/* Key k is a table on this group: every reachable group's must be a table
 * of the same dim, optimizer, lr and row initializer (rows a delta creates
 * start from their initial values, which must be the same bits everywhere),
 * without CAPACITY or TTL (a tracked table keeps its rows), not FTRL. 0, or
 * 2 (refused). */
int ring_table_fit(ring *r, int k) {
    const psKeyInfo *s = &r->g[r->self].info[k];
    const char *key = r->keys[k].name;
    const int ftrl = ps_proto_optim_parse(s->optimizer, strlen(s->optimizer)) == PS_PROTO_OPT_FTRL;
    if (ftrl || s->capacity || s->ttl) {
        ring_say(r, "%s is a table with %s: the ring tracks tables without eviction (CAPACITY, "
                    "TTL) and not FTRL; refusing to start",
                 key, ftrl ? "optimizer FTRL" : "eviction");
        return 2;
    }
    for (int i = 0; i < r->ng; i++) {
        const psKeyInfo *x = &r->g[i].info[k];
        if (i == r->self || !r->g[i].c || (x->version == 0 && x->ndim == 0 && !x->is_table))
            continue;
        int same = x->is_table && x->dim == s->dim && !strcmp(x->optimizer, s->optimizer) &&
                   x->lr == s->lr && x->seed == s->seed && !strcmp(x->init, s->init) &&
                   x->init_a == s->init_a && x->init_b == s->init_b;
        if (!same) {
            ring_say(r, "group %s's %s (%s, dim %d, %s, lr %g, init %s %g %g seed %" PRIu64 ") does "
                        "not fit this group's (table, dim %d, %s, lr %g, init %s %g %g seed %" PRIu64
                        "): refusing to start",
                     r->g[i].name, key, x->is_table ? "table" : "tensor", x->dim, x->optimizer,
                     x->lr, x->init, x->init_a, x->init_b, x->seed, s->dim, s->optimizer, s->lr,
                     s->init, s->init_a, s->init_b, s->seed);
            return 2;
        }
    }
    return 0;
}

typedef struct tabRows {
    size_t n;
    uint64_t *ids;  /* ascending */
    float *vals;    /* n x dim */
} tabRows;

static void rows_free(tabRows *t) {
    free(t->ids);
    free(t->vals);
    memset(t, 0, sizeof(*t));
}

static const uint64_t *sort_ids;
static int by_id(const void *a, const void *b) {
    uint64_t x = sort_ids[*(const size_t *)a], y = sort_ids[*(const size_t *)b];
    return x < y ? -1 : x > y;
}

/* Every row of the table (the export scan since 0), sorted by id. 0 or -1
 * (c->err set). */
static int read_rows(psClient *c, const char *key, uint32_t dim, tabRows *out) {
    memset(out, 0, sizeof(*out));
    size_t cap = 0;
    uint64_t *ids = NULL;
    float *vals = NULL;
    uint64_t cursor = 0;
    do {
        psScanPage p;
        memset(&p, 0, sizeof(p));
        if (psTableScan(c, key, cursor, 0, 4096, PS_WIRE_F32, 0, &p) != PS_OK ||
            p.value_bytes != p.nrows * dim * sizeof(float)) {
            psScanPageFree(&p);
            free(ids);
            free(vals);
            return -1;
        }
        if (out->n + p.nrows > cap) {
            size_t nc = cap ? cap : 1024;
            while (nc < out->n + p.nrows) nc *= 2;
            uint64_t *ni = realloc(ids, nc * sizeof(uint64_t));
            if (ni) ids = ni;
            float *nv = ni ? realloc(vals, nc * dim * sizeof(float)) : NULL;
            if (nv) vals = nv;
            if (!ni || !nv) {
                psScanPageFree(&p);
                free(ids);
                free(vals);
                return -1;
            }
            cap = nc;
        }
        memcpy(ids + out->n, p.ids, p.nrows * sizeof(uint64_t));
        memcpy(vals + out->n * dim, p.values, p.nrows * dim * sizeof(float));
        out->n += p.nrows;
        cursor = p.cursor;
        psScanPageFree(&p);
    } while (cursor);
    /* Scan order is the table's index order (keyed per table): sort by id. */
    size_t *perm = malloc((out->n ? out->n : 1) * sizeof(size_t));
    out->ids = malloc((out->n ? out->n : 1) * sizeof(uint64_t));
    out->vals = malloc((out->n ? out->n : 1) * dim * sizeof(float));
    if (!perm || !out->ids || !out->vals) {
        free(perm);
        free(ids);
        free(vals);
        rows_free(out);
        return -1;
    }
    for (size_t i = 0; i < out->n; i++) perm[i] = i;
    sort_ids = ids;
    qsort(perm, out->n, sizeof(size_t), by_id);
    for (size_t i = 0; i < out->n; i++) {
        out->ids[i] = ids[perm[i]];
        memcpy(out->vals + i * dim, vals + perm[i] * dim, dim * sizeof(float));
    }
    free(perm);
    free(ids);
    free(vals);
    return 0;
}

int ring_table_hash(psClient *c, const char *key, uint32_t dim, uint64_t *h) {
    tabRows t;
    if (read_rows(c, key, dim, &t) != 0) return -1;
    uint64_t x = 1469598103934665603ULL;
    for (size_t i = 0; i < t.n; i++) {
        const unsigned char *p = (const unsigned char *)&t.ids[i];
        for (size_t b = 0; b < 8; b++) x = (x ^ p[b]) * 1099511628211ULL;
        p = (const unsigned char *)(t.vals + i * dim);
        for (size_t b = 0; b < dim * sizeof(float); b++) x = (x ^ p[b]) * 1099511628211ULL;
    }
    rows_free(&t);
    *h = x;
    return 0;
}

/* After a barrier: the live groups' rows of table key k compared, id by
 * id, on the rows both hold. A row only some groups hold is not compared:
 * after the barrier nothing is accumulated, so a group holds a row the
 * others lack only when its own change of that row came back to exactly
 * zero (never sent), i.e. its values are the row's initial values, which
 * is what the others answer for it. 0 bit-identical, 1 within the float
 * bound, 2 beyond it (the bound of ring_compare_groups). */
int ring_table_compare(ring *r, int k) {
    const uint32_t dim = r->keys[k].dim;
    tabRows ref;
    int have = 0, differ = 0;
    double maxd = 0, maxabs = 0;
    uint64_t applied = 0, only_some = 0, compared = 0;
    memset(&ref, 0, sizeof(ref));
    for (int i = 0; i < r->ng; i++)
        if (r->g[i].live) applied += r->g[i].info[k].ring_applied;
    for (int i = 0; i < r->ng; i++) {
        if (!r->g[i].live || !r->g[i].c) continue;
        tabRows t;
        if (read_rows(r->g[i].c, r->keys[k].name, dim, &t) != 0) continue;
        for (size_t j = 0; j < t.n * dim; j++) maxabs = fmax(maxabs, fabs((double)t.vals[j]));
        if (!have) {
            ref = t;
            have = 1;
            continue;
        }
        size_t a = 0, b = 0;
        while (a < ref.n || b < t.n) {
            if (b == t.n || (a < ref.n && ref.ids[a] < t.ids[b])) {
                a++;
                only_some++;
            } else if (a == ref.n || t.ids[b] < ref.ids[a]) {
                b++;
                only_some++;
            } else {
                const float *x = ref.vals + a * dim, *y = t.vals + b * dim;
                for (uint32_t j = 0; j < dim; j++) {
                    double dd = fabs((double)x[j] - (double)y[j]);
                    if (dd > maxd) maxd = dd;
                    if (memcmp(&x[j], &y[j], sizeof(float)) && !differ) differ = 1;
                }
                compared++;
                a++;
                b++;
            }
        }
        rows_free(&t);
    }
    double ulp = maxabs > 0 ? ldexp(1.0, ilogb(maxabs) - 23) : 0;
    double bound = (double)(applied + 2) * 2 * ulp;
    printf("[ring %s] barrier: %s: %" PRIu64 " rows compared, %" PRIu64 " held by some groups only; "
           "largest difference between groups %g (bound %g)\n",
           r->o->self, r->keys[k].name, compared, only_some, maxd, bound);
    if (maxd > bound) differ = 2;
    rows_free(&ref);
    return differ;
}

/* The marks of a STATE answer as a join compares them: names and seqs. */
static int same_marks(const psRingSnapshot *a, const psRingSnapshot *b) {
    if (a->norigins != b->norigins) return 0;
    for (size_t i = 0; i < a->norigins; i++)
        if (strcmp(a->origins[i].name, b->origins[i].name) || a->origins[i].hwm != b->origins[i].hwm)
            return 0;
    return 1;
}

/* Rows per ROWS page of a table's copy (index buckets scanned). */
#define RING_JOIN_PAGE 4096
/* Copies tried before a join gives up for this round (the marks moved). */
#define RING_JOIN_TRIES 8

int ring_table_join(ring *r, int k, ringGroup *g, ringGroup *me, const char *why) {
    const char *key = r->keys[k].name;
    const uint32_t dim = r->keys[k].dim;
    for (int attempt = 0; attempt < RING_JOIN_TRIES; attempt++) {
        psRingSnapshot s0, s1;
        if (psRingState(g->c, key, 0, &s0) != PS_OK) {
            ring_say(r, "%s: PS.RING STATE %s on %s: %s", why, key, g->name, g->c->errstr);
            ring_conn_failed(g);
            return -1;
        }
        /* The joiner's rows and ring state start anew under the marks read
         * before the first page (a half-finished join of an earlier try is
         * restarted by this JOINBEGIN). */
        if (psRingJoinBegin(me->c, key, me->name, s0.origins, s0.norigins) != PS_OK) {
            ring_say(r, "%s: PS.RING %s JOINBEGIN: %s", why, key, me->c->errstr);
            psRingStateFree(&s0);
            ring_conn_failed(me);
            return -1;
        }
        uint64_t cursor = 0, pages = 0, rows = 0;
        do {
            psRingPage p;
            if (psRingRows(g->c, key, dim, cursor, RING_JOIN_PAGE, &p) != PS_OK) {
                ring_say(r, "%s: PS.RING %s ROWS on %s: %s", why, key, g->name, g->c->errstr);
                psRingStateFree(&s0);
                ring_conn_failed(g);
                return -1;
            }
            int rc = PS_OK;
            if (p.rows) rc = psRingJoinRows(me->c, key, pages, p.ids, p.vals, p.rows, dim);
            if (rc != PS_OK) {
                ring_say(r, "%s: PS.RING %s JOINROWS: %s", why, key, me->c->errstr);
                psRingPageFree(&p);
                psRingStateFree(&s0);
                ring_conn_failed(me);
                return -1;
            }
            if (p.rows) {
                pages++;
                rows += p.rows;
            }
            cursor = p.next;
            psRingPageFree(&p);
        } while (cursor);
        if (psRingState(g->c, key, 0, &s1) != PS_OK) {
            ring_say(r, "%s: PS.RING STATE %s on %s: %s", why, key, g->name, g->c->errstr);
            psRingStateFree(&s0);
            ring_conn_failed(g);
            return -1;
        }
        const int same = same_marks(&s0, &s1);
        psRingStateFree(&s0);
        psRingStateFree(&s1);
        if (!same) {
            ring_say(r, "%s: %s moved on %s during the copy of %s: copying again", why, g->name,
                     g->name, key);
            continue;
        }
        if (psRingJoinEnd(me->c, key, pages, rows) != PS_OK) {
            ring_say(r, "%s: PS.RING %s JOINEND: %s", why, key, me->c->errstr);
            ring_conn_failed(me);
            return -1;
        }
        ring_say(r, "%s: copied %" PRIu64 " rows of %s from %s (%" PRIu64 " pages)", why, rows,
                 key, g->name, pages);
        return 0;
    }
    ring_say(r, "%s: %s kept moving during %d copies of %s: retrying later (the join stays "
                "unfinished until then)", why, g->name, RING_JOIN_TRIES, key);
    return -1;
}
