/* embed_push.c -- embedding tables: the push (PSEmbed_Push: repeats summed,
 * rows looked up, created through the admission filter, stepped by the
 * optimizer), eviction (TTL sweep, CAPACITY, PS.EVICT) and reconfiguration
 * (see embed.h; layout in embed_int.h; rules in docs/embed-design.md). */

#include "embed_int.h"

#include "optim.h"

/* Key of the per-push repeat finder (see PSEmbed_SetPushSalt). */
static uint64_t PushSalt;

void PSEmbed_SetPushSalt(uint64_t salt) { PushSalt = salt; }

/* ------------------------------------------------------------------------
 * Admission filter: 8-bit counters, 3 positions by double hashing,
 * conservative update (only the counters equal to the minimum grow).
 * ---------------------------------------------------------------------- */

static void filter_pos(const PSEmbed *t, uint64_t id, uint64_t pos[3]) {
    const uint64_t h2 = PSEmbed_Mix64(id ^ 0x9e3779b97f4a7c15ULL);
    const uint64_t h3 = PSEmbed_Mix64(h2) | 1;
    const uint64_t mask = t->filter_len - 1;
    for (int j = 0; j < 3; j++) pos[j] = (h2 + (uint64_t)j * h3) & mask;
}

/* Counts one push of 'id' and returns the new estimate of its pushes. */
static uint32_t filter_add(PSEmbed *t, uint64_t id) {
    uint64_t p[3];
    filter_pos(t, id, p);
    uint8_t m = t->filter[p[0]];
    if (t->filter[p[1]] < m) m = t->filter[p[1]];
    if (t->filter[p[2]] < m) m = t->filter[p[2]];
    if (m == 255) return 255;
    for (int j = 0; j < 3; j++)
        if (t->filter[p[j]] == m) t->filter[p[j]] = (uint8_t)(m + 1);
    return (uint32_t)m + 1;
}

/* Fetches the 3 counters of 'id' ahead of its filter_add: a push's absent
 * ids are mostly ids the filter does not admit yet, and each reads 3
 * random bytes of a multi-megabyte array (3 misses per id, in a row, when
 * not fetched ahead). A hint: the counters are read and written in the
 * same order either way. (always_inline: see lookup_run's prefetches.) */
#define FILTER_DIST 12
static inline __attribute__((always_inline)) void filter_prefetch(const PSEmbed *t, uint64_t id) {
    uint64_t p[3];
    filter_pos(t, id, p);
    for (int j = 0; j < 3; j++) __builtin_prefetch(&t->filter[p[j]], 1);
}

/* ------------------------------------------------------------------------
 * Eviction
 * ---------------------------------------------------------------------- */

enum { EV_AGE, EV_KEY };

/* Removes every row matching the rule: EV_AGE: version - last >= a;
 * EV_KEY: (last, id) <= (a, b) in lexicographic order. */
static uint64_t evict_where(PSEmbed *t, int rule, uint64_t a, uint64_t b) {
    uint64_t n = 0, i = 0;
    while (i < t->nrows) {
        const unsigned char *r = pse_rec(t, i);
        const uint64_t v = pse_rec_ver(t, r);
        const int hit = rule == EV_AGE ? t->version - v >= a
                                       : (v < a || (v == a && pse_rec_id(r) <= b));
        if (hit) {
            pse_remove_slot(t, i);
            n++;
        } else {
            i++;
        }
    }
    return n;
}

/* The m-th smallest key (1-based) among rows' last versions (by_id = 0) or
 * among the ids of rows whose last version is 'ver' (by_id = 1), found by
 * narrowing a histogram of 4096 buckets: a few passes, no allocation. */
#define SEL_BUCKETS 4096
static uint64_t select_kth(const PSEmbed *t, uint64_t m, int by_id, uint64_t ver) {
    uint32_t hist[SEL_BUCKETS]; /* 16 KB of stack */
    uint64_t lo = UINT64_MAX, hi = 0;
    for (uint64_t i = 0; i < t->nrows; i++) {
        const unsigned char *r = pse_rec(t, i);
        if (by_id && pse_rec_ver(t, r) != ver) continue;
        const uint64_t key = by_id ? pse_rec_id(r) : pse_rec_ver(t, r);
        if (key < lo) lo = key;
        if (key > hi) hi = key;
    }
    while (lo < hi) {
        const uint64_t width = (hi - lo) / SEL_BUCKETS + 1;
        memset(hist, 0, sizeof(hist));
        for (uint64_t i = 0; i < t->nrows; i++) {
            const unsigned char *r = pse_rec(t, i);
            if (by_id && pse_rec_ver(t, r) != ver) continue;
            const uint64_t key = by_id ? pse_rec_id(r) : pse_rec_ver(t, r);
            if (key >= lo && key <= hi) hist[(key - lo) / width]++;
        }
        uint64_t cum = 0, bkt = 0;
        while (cum + hist[bkt] < m) cum += hist[bkt++];
        m -= cum;
        lo = lo + bkt * width;
        if (hi - lo > width - 1) hi = lo + width - 1;
    }
    return lo;
}

/* CAPACITY: when rows exceed it, removes the least recently pushed rows
 * (smallest (last_version, id)) down to capacity - capacity/16, so the
 * passes this costs are paid once per capacity/16 new rows. */
static uint64_t evict_capacity(PSEmbed *t) {
    const uint64_t cap = t->cfg.capacity;
    if (!cap || t->nrows <= cap) return 0;
    const uint64_t low = cap - cap / 16;
    const uint64_t m = t->nrows - low;
    const uint64_t v = select_kth(t, m, 0, 0);
    uint64_t less = 0, eq = 0;
    for (uint64_t i = 0; i < t->nrows; i++) {
        const uint64_t rv = pse_rec_ver(t, pse_rec(t, i));
        less += rv < v;
        eq += rv == v;
    }
    const uint64_t r = m - less;
    const uint64_t idmax = r == eq ? UINT64_MAX : select_kth(t, r, 1, v);
    const uint64_t n = evict_where(t, EV_KEY, v, idmax);
    t->stats.evicted_capacity += n;
    return n;
}

/* TTL: reclaims dead rows from a cursor over storage order, 'budget' slots
 * per push (dead rows are already invisible to pulls and pushes). */
static uint64_t sweep_ttl(PSEmbed *t, uint64_t budget) {
    uint64_t n = 0;
    if (!t->cfg.ttl) return 0;
    while (budget-- && t->nrows) {
        if (t->sweep_pos >= t->nrows) t->sweep_pos = 0;
        if (pse_dead(t, pse_rec(t, t->sweep_pos))) {
            pse_remove_slot(t, t->sweep_pos);
            n++;
        } else {
            t->sweep_pos++;
        }
    }
    t->stats.evicted_ttl += n;
    return n;
}

uint64_t PSEmbed_EvictAge(PSEmbed *t, uint64_t age) {
    if (age == 0 || age > PSE_MAX_AGE) return 0;
    t->rm_version = t->version + 1;
    const uint64_t n = evict_where(t, EV_AGE, age, 0);
    t->stats.evicted_explicit += n;
    if (n) pse_after_evictions(t);
    return n;
}

int PSEmbed_Reconfigure(PSEmbed *t, const PSEmbedConfig *c, const char **err) {
    const PSEmbedConfig *o = &t->cfg;
    const char *e = PSEmbed_CheckConfig(c);
    if (!e && (c->dim != o->dim || c->optim != o->optim || c->init != o->init ||
               c->init_a != o->init_a || c->init_b != o->init_b || c->seed != o->seed || c->salt != o->salt ||
               c->admit != o->admit || (o->admit > 1 && c->filter_log2 != o->filter_log2)))
        e = "DIM, optimizer, INIT, SEED, ADMIT and FILTER are fixed at creation";
    if (e) {
        *err = e;
        return PSE_ERR_ARG;
    }
    /* The log's new ring, with room for what a lower CAPACITY evicts, is
     * allocated before anything changes. A TTL change makes rows dead or
     * alive again without a removal: the log restarts at this version. */
    const int ttl_changed = c->ttl != o->ttl;
    const uint64_t keep0 = ttl_changed ? 0 : t->tomb_len;
    const uint64_t keep = keep0 < c->tombstones ? keep0 : c->tombstones;
    const uint64_t evict = c->capacity && t->nrows > c->capacity
                               ? t->nrows - (c->capacity - c->capacity / 16) : 0;
    uint64_t alloc = keep + evict < c->tombstones ? keep + evict : c->tombstones;
    if (alloc < t->tomb_alloc && c->tombstones >= t->tomb_alloc) alloc = t->tomb_alloc;
    if (alloc != t->tomb_alloc || keep != t->tomb_len) {
        if (pse_tomb_realloc(t, alloc, keep) != PSE_OK) {
            *err = "out of memory";
            return PSE_ERR_OOM;
        }
    }
    if (ttl_changed) {
        t->tomb_len = 0;
        t->tomb_head = 0;
        t->tomb_horizon = t->version + 1;
    }
    t->rm_version = t->version + 1;
    t->cfg = *c;
    t->cfg.filter_log2 = o->filter_log2;
    PSEmbed_MakeCoef(c, &t->coef);
    if (evict_capacity(t)) pse_after_evictions(t);
    return PSE_OK;
}

/* ------------------------------------------------------------------------
 * Push
 * ---------------------------------------------------------------------- */

enum { ACT_STEP = 0, ACT_RESET, ACT_ABSENT };
#define APPLY_DIST 8

int PSEmbed_Push(PSEmbed *t, const unsigned char *idblob, size_t k, const unsigned char *grad,
                 PSEmbedPushResult *res) {
    const uint32_t dim = t->cfg.dim;
    if (k == 0 || k > PSE_MAX_PUSH_IDS) return PSE_ERR_ARG;
    if (!ps_all_finite(grad, k * dim)) return PSE_ERR_NONFINITE;

    /* Scratch: distinct ids, their slots and actions, summed gradients and
     * a small hash (2k..4k buckets) that finds repeats in the push, keyed
     * with the process's salt so crafted ids cannot share a bucket. */
    uint64_t hsize = 16;
    while (hsize < 2 * (uint64_t)k) hsize *= 2;
    const size_t bytes = k * (sizeof(uint64_t) + sizeof(int64_t) + 1) + hsize * sizeof(uint32_t) +
                         (size_t)k * dim * sizeof(float) + 16;
    unsigned char *scratch = pse_alloc(NULL, bytes);
    if (!scratch) return PSE_ERR_OOM;
    uint64_t *uid = (uint64_t *)(void *)scratch;
    int64_t *uslot = (int64_t *)(void *)(uid + k);
    float *sum = (float *)(void *)(uslot + k);
    uint32_t *dh = (uint32_t *)(void *)(sum + (size_t)k * dim);
    uint8_t *act = (uint8_t *)(dh + hsize);
    memset(dh, 0, hsize * sizeof(uint32_t));

    /* Sum repeats in the order given: the first occurrence is copied, each
     * later one added element by element. */
    size_t nu = 0;
    for (size_t i = 0; i < k; i++) {
        const uint64_t id = pse_ld64(idblob + 8 * i);
        uint64_t p = PSEmbed_Mix64(id ^ PushSalt) & (hsize - 1);
        while (dh[p] && uid[dh[p] - 1] != id) p = (p + 1) & (hsize - 1);
        const unsigned char *g = grad + (size_t)4 * dim * i;
        if (!dh[p]) {
            dh[p] = (uint32_t)(nu + 1);
            uid[nu] = id;
            memcpy(sum + nu * dim, g, (size_t)4 * dim);
            nu++;
        } else {
            float *s = sum + (size_t)(dh[p] - 1) * dim;
            for (uint32_t j = 0; j < dim; j++) {
                float x;
                memcpy(&x, g + 4 * j, 4);
                s[j] = s[j] + x;
            }
        }
    }

    uint64_t absent = 0;
    pse_lookup_ids(t, uid, nu, uslot);
    for (size_t u = 0; u < nu; u++) {
        if (uslot[u] < 0) {
            act[u] = ACT_ABSENT;
            absent++;
        } else {
            act[u] = pse_dead(t, pse_rec(t, (uint64_t)uslot[u])) ? ACT_RESET : ACT_STEP;
        }
    }
    /* Room for every absent id (admission may drop some): the only step
     * that can fail, and it changes nothing visible. */
    int rc = pse_reserve(t, t->nrows + absent);
    if (rc == PSE_OK && t->cfg.tombstones) {
        /* Room in the tombstone log for every removal this push can make:
         * the TTL sweep's budget and what CAPACITY evicts. */
        const uint64_t most = t->nrows + absent, sweep = t->cfg.ttl ? 2 * (uint64_t)nu + 16 : 0;
        const uint64_t cap = t->cfg.capacity;
        const uint64_t over = cap && most > cap ? most - (cap - cap / 16) : 0;
        rc = pse_tomb_reserve(t, sweep + over < most ? sweep + over : most);
    }
    if (rc != PSE_OK) {
        pse_free(NULL, scratch, bytes);
        return rc;
    }

    PSEmbedPushResult out = {0};
    t->version++;
    t->rm_version = t->version;
    if (t->version % PSE_AGE_PASS == 0) pse_saturate_ages(t);
    out.unique = nu;
    const uint32_t nst = (uint32_t)PSEmbed_NumStateVectors(t->cfg.optim);
    if (t->filter)
        for (size_t u = 0; u < nu && u < FILTER_DIST; u++)
            if (act[u] == ACT_ABSENT) filter_prefetch(t, uid[u]);
    for (size_t u = 0; u < nu; u++) {
        if (t->filter && u + FILTER_DIST < nu && act[u + FILTER_DIST] == ACT_ABSENT)
            filter_prefetch(t, uid[u + FILTER_DIST]);
        /* The lookup's prefetches of the first rows have left L1 by now:
         * the records a few steps ahead are fetched again (their slots are
         * known, so these misses overlap). */
        if (u + APPLY_DIST < nu && uslot[u + APPLY_DIST] >= 0)
            prefetch_span(pse_rec(t, (uint64_t)uslot[u + APPLY_DIST]), t->rec_bytes);
        unsigned char *r;
        if (act[u] == ACT_ABSENT) {
            if (t->filter && filter_add(t, uid[u]) < t->cfg.admit) {
                out.dropped++;
                continue;
            }
            r = pse_append(t, uid[u]);
            PSEmbed_InitRow(&t->cfg, uid[u], pse_rec_data(t, r));
            out.created++;
        } else {
            r = pse_rec(t, (uint64_t)uslot[u]);
            if (act[u] == ACT_RESET) {
                /* A dead row found by its next push: evicted, then
                 * created afresh in place. */
                memset(r + 8, 0, t->rec_bytes - 8);
                PSEmbed_InitRow(&t->cfg, uid[u], pse_rec_data(t, r));
                t->stats.evicted_ttl++;
                out.created++;
            }
        }
        uint32_t pushes = pse_rec_pushes(r);
        if (pushes < UINT32_MAX) pushes++;
        pse_rec_set_pushes(r, pushes);
        pse_rec_set_ver(r, t->version);
        float *w = pse_rec_data(t, r);
        PSEmbed_StepRow(t->cfg.optim, &t->coef, dim, w, nst > 0 ? w + dim : NULL,
                        nst > 1 ? w + 2 * (size_t)dim : NULL, pse_rec_acc(t, r), sum + u * dim,
                        pushes);
        out.updated++;
    }
    pse_free(NULL, scratch, bytes);

    t->stats.created += out.created;
    t->stats.dropped += out.dropped;
    out.evicted = sweep_ttl(t, 2 * (uint64_t)nu + 16);
    out.evicted += evict_capacity(t);
    if (out.evicted) pse_after_evictions(t);
    out.version = t->version;
    if (res) *res = out;
    return PSE_OK;
}
