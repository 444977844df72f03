/* embed_tomb.c -- embedding tables: the tombstone log (embed.h), a bounded
 * ring of (id, version) removals that tells an exporter which rows are gone
 * since a version (layout in embed_int.h). */

#include "embed_int.h"

/* ------------------------------------------------------------------------
 * Tombstone log (embed.h)
 * ---------------------------------------------------------------------- */

static inline uint64_t *tomb_at(const PSEmbed *t, uint64_t i) {
    return t->tomb + 2 * ((t->tomb_head + i) % t->tomb_alloc);
}

/* A ring of 'alloc' entries holding the newest 'keep' (<= tomb_len, <=
 * alloc) of the log; the horizon moves to the newest entry dropped.
 * PSE_ERR_OOM changes nothing. */
int pse_tomb_realloc(PSEmbed *t, uint64_t alloc, uint64_t keep) {
    uint64_t *ring = NULL;
    if (alloc) {
        ring = pse_alloc(t, (size_t)alloc * 16);
        if (!ring) return PSE_ERR_OOM;
    }
    const uint64_t drop = t->tomb_len - keep;
    if (drop) t->tomb_horizon = tomb_at(t, drop - 1)[1];
    for (uint64_t i = 0; i < keep; i++) memcpy(ring + 2 * i, tomb_at(t, drop + i), 16);
    pse_free(t, t->tomb, (size_t)t->tomb_alloc * 16);
    t->tomb = ring;
    t->tomb_alloc = alloc;
    t->tomb_len = keep;
    t->tomb_head = 0;
    return PSE_OK;
}

int pse_tomb_reserve(PSEmbed *t, uint64_t n) {
    const uint64_t cap = t->cfg.tombstones;
    const uint64_t need = t->tomb_len + n < cap ? t->tomb_len + n : cap;
    if (need <= t->tomb_alloc) return PSE_OK;
    uint64_t a = t->tomb_alloc < 32 ? 64 : 2 * t->tomb_alloc;
    if (a < need) a = need;
    if (a > cap) a = cap;
    return pse_tomb_realloc(t, a, t->tomb_len);
}

int pse_tomb_resize(PSEmbed *t, uint64_t cap) {
    const uint64_t keep = t->tomb_len < cap ? t->tomb_len : cap;
    if (cap >= t->tomb_alloc && keep == t->tomb_len) return PSE_OK;
    return pse_tomb_realloc(t, keep, keep);
}

int PSEmbed_TombReserve(PSEmbed *t, uint64_t n) { return pse_tomb_reserve(t, n); }

void pse_tomb_add(PSEmbed *t, uint64_t id) {
    const uint64_t cap = t->cfg.tombstones;
    t->tomb_total++;
    if (cap == 0) {
        t->tomb_horizon = t->rm_version;
        return;
    }
    if (t->tomb_len == t->tomb_alloc && pse_tomb_reserve(t, 1) != PSE_OK && t->tomb_alloc == 0) {
        /* Only when a caller did not reserve and memory ran out. */
        t->tomb_horizon = t->rm_version;
        return;
    }
    if (t->tomb_len == cap || t->tomb_len == t->tomb_alloc) {
        t->tomb_horizon = tomb_at(t, 0)[1];
        t->tomb_head = (t->tomb_head + 1) % t->tomb_alloc;
        t->tomb_len--;
    }
    uint64_t *e = tomb_at(t, t->tomb_len++);
    e[0] = id;
    e[1] = t->rm_version;
}

uint64_t PSEmbed_TombLen(const PSEmbed *t) { return t->tomb_len; }

void PSEmbed_TombAt(const PSEmbed *t, uint64_t i, uint64_t *id, uint64_t *version) {
    const uint64_t *e = tomb_at(t, i);
    *id = e[0];
    *version = e[1];
}

int PSEmbed_Tombstones(const PSEmbed *t, uint64_t since, uint64_t cursor, uint64_t count,
                       PSEmbedGoneFn fn, void *ud, uint64_t *next) {
    *next = 0;
    if (since == 0 || since < t->tomb_horizon || since > t->version) return PSE_ERR_HORIZON;
    const uint64_t oldest = t->tomb_total - t->tomb_len; /* absolute position of entry 0 */
    uint64_t i;                                          /* index into the log */
    if (cursor == 0) {
        /* The first entry at a version > since (versions never decrease). */
        uint64_t lo = 0, hi = t->tomb_len;
        while (lo < hi) {
            const uint64_t mid = lo + (hi - lo) / 2;
            if (tomb_at(t, mid)[1] <= since) lo = mid + 1;
            else hi = mid;
        }
        i = lo;
    } else {
        /* Entries that fell off since were older than since (the horizon
         * would have passed it otherwise). */
        const uint64_t pos = cursor - 1;
        i = pos < oldest ? 0 : pos - oldest;
        if (i > t->tomb_len) i = t->tomb_len;
    }
    if (count == 0) count = 1;
    for (uint64_t n = 0; n < count && i < t->tomb_len; n++, i++) {
        const uint64_t *e = tomb_at(t, i);
        if (e[1] > since && !PSEmbed_Lookup(t, e[0], NULL)) fn(ud, e[0], e[1]);
    }
    if (i < t->tomb_len) *next = oldest + i + 1;
    return PSE_OK;
}
