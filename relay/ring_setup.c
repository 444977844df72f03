/* ring_setup.c -- ps-relay --ring (ring.h): the keys, the start check
 * (shapes, optimizers, values), TRACK of every key, and JOIN: copying a live
 * neighbour's model (at --join, or when this group lacks deltas). */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <redis-ps/ps.h>

#include "agent.h"
#include "ring_int.h"

static int add_key(ring *r, const char *name, size_t len) {
    ringKey *nk = realloc(r->keys, (size_t)(r->nkeys + 1) * sizeof(ringKey));
    if (!nk) return -1;
    r->keys = nk;
    ringKey *k = &r->keys[r->nkeys++];
    memset(k, 0, sizeof(*k));
    k->name = strndup(name, len);
    return k->name ? 0 : -1;
}

static int cmp_keys(const void *a, const void *b) {
    return strcmp(((const ringKey *)a)->name, ((const ringKey *)b)->name);
}

int ring_find_keys(ring *r, psClient *c) {
    const ringOpts *o = r->o;
    if (o->keys) {
        for (const char *p = o->keys; *p;) {
            const char *e = strchr(p, ',');
            size_t l = e ? (size_t)(e - p) : strlen(p);
            if (l && add_key(r, p, l) != 0) return -1;
            p += l + (e ? 1 : 0);
        }
    } else {
        if (c->cluster) {
            ring_say(r, "--match needs a standalone server for this group (a SCAN reaches one node): "
                   "give --keys");
            return -1;
        }
        /* Tensors, then tables (ring_table.c). */
        static const char *const types[2] = {"ps-tensor", "ps-embeds"};
        for (int ty = 0; ty < 2; ty++) {
        char cursor[32] = "0";
        do {
            redisReply *rep = psCommand(c, NULL, "SCAN %s MATCH %s TYPE %s COUNT 1000", cursor,
                                        o->match, types[ty]);
            if (!rep || rep->type != REDIS_REPLY_ARRAY || rep->elements != 2) {
                ring_say(r, "SCAN on %s: %s", r->g[r->self].addr,
                    rep && rep->type == REDIS_REPLY_ERROR ? rep->str : c->errstr);
                if (rep) freeReplyObject(rep);
                return -1;
            }
            snprintf(cursor, sizeof(cursor), "%s", rep->element[0]->str);
            const redisReply *ks = rep->element[1];
            for (size_t i = 0; i < ks->elements; i++)
                if (add_key(r, ks->element[i]->str, ks->element[i]->len) != 0) {
                    freeReplyObject(rep);
                    return -1;
                }
            freeReplyObject(rep);
        } while (strcmp(cursor, "0") != 0);
        }
    }
    if (r->nkeys == 0) {
        ring_say(r, "no tensor or table keys %s%s on %s", o->keys ? "in --keys" : "match ",
            o->keys ? "" : o->match, r->g[r->self].addr);
        return -1;
    }
    qsort(r->keys, (size_t)r->nkeys, sizeof(ringKey), cmp_keys);
    return 0;
}

static uint64_t fnv1a(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ULL;
    return h;
}

/* The start check's hash of key k on group i: a tensor's values (PS.RING
 * STATE), a table's rows (ring_table.c). 0 or -1. */
static int start_hash(ring *r, int i, int k, uint64_t *h) {
    if (r->keys[k].dim) return ring_table_hash(r->g[i].c, r->keys[k].name, r->keys[k].dim, h);
    psRingSnapshot s;
    if (psRingState(r->g[i].c, r->keys[k].name, r->keys[k].n, &s) != PS_OK) return -1;
    *h = fnv1a(s.values, s.n * sizeof(float));
    psRingStateFree(&s);
    return 0;
}

/* Key k's shape, optimizer and lr on every reachable group must be self's.
 * 0, or 2 (refused). */
static int check_fit(ring *r, int k) {
    const psKeyInfo *s = &r->g[r->self].info[k];
    if (s->is_table) return ring_table_fit(r, k);
    for (int i = 0; i < r->ng; i++) {
        const psKeyInfo *x = &r->g[i].info[k];
        if (i == r->self || !r->g[i].c || (x->version == 0 && x->ndim == 0)) continue;
        int same = x->ndim == s->ndim && !memcmp(x->dims, s->dims, sizeof(s->dims)) &&
                   !strcmp(x->optimizer, s->optimizer) && x->lr == s->lr && !x->is_table;
        if (!same) {
            ring_say(r, "group %s's %s (%s, %d dims, %" PRIu64 " elements, lr %g) does not fit this "
                   "group's (%s, %d dims, %" PRIu64 " elements, lr %g): refusing to start",
                r->g[i].name, r->keys[k].name, x->optimizer, x->ndim, x->elements, x->lr,
                s->optimizer, s->ndim, s->elements, s->lr);
            return 2;
        }
    }
    return 0;
}

/* Copies the model of a live neighbour into this group (PS.RING JOIN
 * ... KEEPOWN): PS.RING STATE answers its base (values minus its own change
 * not yet taken, which it sends to everyone later, this group included) and
 * its marks, its own origin at its take_seq first: exactly what the marks
 * then say this group has; this group's own change stays its own. With
 * 'lacking' >= 0 (this group lacks deltas that group acknowledged) the
 * nearest live group that the last probe shows holding them is preferred
 * (that group itself always does): a copy of one that lacks them too would
 * leave this group as stale as before. 0, or -1. */
int ring_rejoin(ring *r, const char *why, int lacking) {
    ringGroup *me = &r->g[r->self];
    int from = -1;
    for (int pass = lacking >= 0 ? 0 : 1; pass < 3 && from < 0; pass++)
        for (int k = 1; k < r->ng && from < 0; k++) {
            int j = (r->self + k) % r->ng;
            ringGroup *g = &r->g[j];
            if (!g->c || (pass < 2 && !g->live)) continue;
            if (pass == 0 && j != lacking && ring_stale_for(r, j, lacking)) continue;
            int all = 1;
            for (int q = 0; q < r->nkeys; q++)
                if (strcmp(g->info[q].ring_origin, g->name)) all = 0;
            if (all) from = j;
        }
    if (from < 0 || !me->c) {
        ring_say(r, "%s: no live tracked group to copy the model from (retrying)", why);
        return -1;
    }
    ringGroup *g = &r->g[from];
    for (int k = 0; k < r->nkeys; k++) {
        if (r->keys[k].dim) { /* a table: a paged copy (ring_table.c) */
            if (ring_table_join(r, k, g, me, why) != 0) return -1;
            r->keys[k].sent_seq[r->self] = 0;
            continue;
        }
        psRingSnapshot s;
        if (psRingState(g->c, r->keys[k].name, r->keys[k].n, &s) != PS_OK) {
            ring_say(r, "%s: PS.RING STATE %s on %s: %s", why, r->keys[k].name, g->name, g->c->errstr);
            ring_conn_failed(g);
            return -1;
        }
        /* STATE answers the neighbour's base and its marks, its own origin
         * (at its take_seq) first: passed on as they are. */
        int own = 0;
        for (size_t q = 0; q < s.norigins; q++)
            if (!strcmp(s.origins[q].name, g->name)) own = 1;
        if (!own)
            ring_say(r, "%s: %s's PS.RING STATE has no mark of its own origin (a module before the "
                   "base/own-mark contract): its change not yet taken is applied again here",
                why, g->name);
        const float *copy = s.values;
        int rc = psRingJoin(me->c, r->keys[k].name, me->name, copy, s.n, s.origins, s.norigins,
                            1);
        if (rc != PS_OK && me->c->err == PS_ERR_SERVER) {
            ring_say(r, "%s: JOIN ... KEEPOWN: %s: joining without it (this group's change not yet "
                   "taken is dropped)", why, me->c->errstr);
            rc = psRingJoin(me->c, r->keys[k].name, me->name, copy, s.n, s.origins, s.norigins, 0);
        }
        psRingStateFree(&s);
        if (rc != PS_OK) {
            ring_say(r, "%s: PS.RING %s JOIN: %s", why, r->keys[k].name, me->c->errstr);
            ring_conn_failed(me);
            return -1;
        }
        /* A new start for this key's own takes. */
        r->keys[k].sent_seq[r->self] = 0;
    }
    r->epoch++;
    printf("[ring %s] joined (%s): copied %d keys from group %s\n", me->name, why, r->nkeys,
           g->name);
    ring_event(r, "joined", ", \"from\": \"%s\", \"why\": \"%s\"", g->name, why);
    return 0;
}

/* The start check and TRACK of every key (or JOIN with --join). 0, 1 or 2. */
int ring_setup(ring *r) {
    ringGroup *me = &r->g[r->self];
    long long now = agent_mono_ms();
    for (int i = 0; i < r->ng; i++) {
        r->g[i].info = calloc((size_t)r->nkeys, sizeof(psKeyInfo));
        if (!r->g[i].info) return 1;
    }
    /* PS.INFO of every key everywhere reachable. */
    for (int i = 0; i < r->ng; i++) {
        ringGroup *g = &r->g[i];
        if (ring_ensure_conn(r, g, now) != 0) {
            if (i == r->self) {
                ring_say(r, "this group's server %s does not answer", g->addr);
                return 1;
            }
            ring_say(r, "group %s (%s) does not answer: starting without it", g->name, g->addr);
            continue;
        }
        for (int k = 0; k < r->nkeys; k++) {
            if (psInfo(g->c, r->keys[k].name, &g->info[k]) == PS_OK) continue;
            if (g->c->err == PS_ERR_SERVER || g->c->err == PS_ERR_NOKEY ||
                g->c->err == PS_ERR_PROTOCOL) {
                ring_say(r, "group %s (%s) has no tensor %s (%s): a ring address that is not a "
                       "group of this model; refusing to start", g->name, g->addr,
                    r->keys[k].name, g->c->errstr);
                return 2;
            }
            ring_say(r, "group %s (%s): %s: starting without it", g->name, g->addr, g->c->errstr);
            ring_conn_failed(g);
            memset(g->info, 0, (size_t)r->nkeys * sizeof(psKeyInfo));
            break;
        }
    }
    for (int k = 0; k < r->nkeys; k++) {
        if (check_fit(r, k)) return 2;
        r->keys[k].n = me->info[k].elements;
        r->keys[k].dim = me->info[k].is_table ? (uint32_t)me->info[k].dim : 0;
        for (int i = 0; i < r->ng; i++) {
            const psKeyInfo *x = &r->g[i].info[k];
            if (r->g[i].c && x->ring_origin[0] && strcmp(x->ring_origin, r->g[i].name)) {
                ring_say(r, "group %s's %s is tracked as group '%s': a ring address that is not that "
                       "group; refusing to start", r->g[i].name, r->keys[k].name, x->ring_origin);
                return 2;
            }
        }
    }
    /* Has the ring exchanged anything yet? Then an untracked group joins. */
    int running = 0, me_tracked = 1;
    for (int k = 0; k < r->nkeys; k++) {
        if (!me->info[k].ring_origin[0]) me_tracked = 0;
        for (int i = 0; i < r->ng; i++) {
            const psKeyInfo *x = &r->g[i].info[k];
            if (i != r->self && r->g[i].c && x->ring_origin[0] &&
                (x->ring_take_seq || x->ring_applied))
                running = 1;
        }
    }
    int join = r->o->join;
    if (join) {
        if (!running && me_tracked) ring_say(r, "--join: this group is tracked already; joining anew");
    } else if (!me_tracked && running) {
        ring_say(r, "the ring is running but this group is not in it: joining (its model is replaced "
               "by a live group's)");
        join = 1;
    } else if (!me_tracked) {
        /* A fresh start: every reachable group must hold the same values. */
        for (int k = 0; k < r->nkeys; k++) {
            uint64_t mine = 0;
            for (int pass = 0; pass < 2; pass++)
                for (int i = 0; i < r->ng; i++) {
                    if (!r->g[i].c || (pass == 0) != (i == r->self)) continue;
                    uint64_t h;
                    if (start_hash(r, i, k, &h) != 0) {
                        ring_say(r, "reading %s on %s for the start check: %s", r->keys[k].name,
                                 r->g[i].name, r->g[i].c->errstr);
                        return r->g[i].c->err == PS_ERR_SERVER ? 2 : 1;
                    }
                    if (i == r->self) mine = h;
                    else if (h != mine) {
                        ring_say(r, "group %s's %s holds other values than this group's (hash %016" PRIx64
                               " vs %016" PRIx64 "): every group must start from the same model; "
                               "refusing to start", r->g[i].name, r->keys[k].name, h, mine);
                        ring_event(r, "refused", ", \"key\": \"%s\", \"other\": \"%s\"",
                              r->keys[k].name, r->g[i].name);
                        return 2;
                    }
                }
        }
    }
    for (int k = 0; k < r->nkeys; k++) {
        int t = psRingTrack(me->c, r->keys[k].name, me->name, r->o->maxqueue, r->o->maxlag);
        if (t == PS_ERR && me->c->err == PS_ERR_SERVER && r->o->maxlag > 0) {
            ring_say(r, "PS.RING %s TRACK ... MAXLAG %lld: %s: tracking without a lag bound", r->keys[k].name,
                r->o->maxlag, me->c->errstr);
            t = psRingTrack(me->c, r->keys[k].name, me->name, r->o->maxqueue, -1);
        }
        if (t == PS_ERR) {
            ring_say(r, "PS.RING %s TRACK %s: %s", r->keys[k].name, me->name, me->c->errstr);
            return me->c->err == PS_ERR_SERVER ? 2 : 1;
        }
    }
    if (join) {
        /* Visible as tracked first, so that origins wait for this group from
         * here on (it answers as tracked); then copy a live neighbour. */
        agent_sleep_ms(3 * r->o->every_ms + 50);
        if (ring_rejoin(r, r->o->join ? "--join" : "the ring is running without this group", -1) != 0)
            return 1;
    }
    /* This group's seqs must pass what the others already have of it (a
     * wiped or joining server starts again at take_seq 0). */
    now = agent_mono_ms();
    for (int k = 0; k < r->nkeys; k++) {
        uint64_t hi = 0;
        for (int i = 0; i < r->ng; i++) {
            if (!r->g[i].c || psInfo(r->g[i].c, r->keys[k].name, &r->g[i].info[k]) != PS_OK)
                continue;
            const psRingOrigin *row = ring_origin_row(&r->g[i].info[k], me->name);
            if (row && row->hwm > hi) hi = row->hwm;
        }
        if (hi > me->info[k].ring_take_seq) r->keys[k].seqfloor = hi + 1;
    }
    return 0;
}
