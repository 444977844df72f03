/* dedup.c -- the exactly-once table (see dedup.h). No Redis calls here. */

#include "dedup.h"

#include <string.h>

#include "tensor.h"

/* The index over t->dedup[0..len): 'slots' maps an id's hash to an entry
 * position + 1 (0 = empty; linear probing, backward-shift deletion), and
 * 'heap' is a 4-ary min-heap of entry positions ordered by (version,
 * position), with hpos[i] the heap position of entry i. Slots carry the
 * hash's low bits and heap nodes the version, so probing and sifting read
 * only the index, not the (much larger) entries: at 2^20 clients that is
 * what keeps a push as fast as at 16. One allocation: the struct, then the
 * arrays. */
typedef struct Slot {
    uint32_t pos1; /* entry position + 1; 0 = empty */
    uint32_t h32;  /* low 32 bits of the id's hash */
} Slot;
typedef struct Node {
    uint64_t version;
    uint32_t pos;
} Node;
struct PSDedupIndex {
    const PSDedupEntry *base; /* the array indexed */
    uint32_t len;             /* entries indexed */
    uint32_t cap;             /* entries the heap can hold */
    uint32_t mask;            /* slot count - 1 (a power of two >= 2 * cap) */
    Slot *slots;
    Node *heap;
    uint32_t *hpos;
};

uint64_t PSTensor_DedupHash(const char *id, size_t idlen) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < idlen; i++) {
        h ^= (unsigned char)id[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

int PSTensor_DedupSeen(const PSDedupEntry *e, uint64_t seq) {
    if (seq >= e->seq) return seq == e->seq;
    const uint64_t d = e->seq - seq;
    if (d > PS_DEDUP_WINDOW) return 1;
    return (e->window >> (d - 1)) & 1;
}

void PSTensor_DedupMark(PSDedupEntry *e, uint64_t seq, uint64_t version) {
    if (seq > e->seq) {
        const uint64_t d = seq - e->seq;
        uint64_t w = d < 64 ? e->window << d : 0;
        if (d <= PS_DEDUP_WINDOW) w |= 1ULL << (d - 1); /* the previous newest */
        e->window = w;
        e->seq = seq;
        e->version = version;
    } else if (seq < e->seq && e->seq - seq <= PS_DEDUP_WINDOW) {
        e->window |= 1ULL << (e->seq - seq - 1);
        if (version > e->version) e->version = version;
    }
}

/* ------------------------------------------------------------------------
 * The index
 * ---------------------------------------------------------------------- */

static uint32_t slot_count(uint32_t cap) {
    uint32_t n = 8;
    while (n < 2 * (uint64_t)cap) n *= 2;
    return n;
}

static size_t index_bytes(uint32_t cap) {
    return sizeof(PSDedupIndex) + (size_t)slot_count(cap) * sizeof(Slot) +
           (size_t)cap * (sizeof(Node) + sizeof(uint32_t));
}

/* Slot hash: FNV-1a's low bits cluster for similar short ids ("w1",
 * "w2", ...), so the 64-bit hash is mixed once; its top 32 bits pick the
 * home slot and are kept in the slot. */
static uint32_t slot_hash(uint64_t h) { return (uint32_t)((h * 0x9e3779b97f4a7c15ULL) >> 32); }

/* Heap order: the older version first, then the lower array position. */
static int older(const Node *a, const Node *b) {
    return a->version < b->version || (a->version == b->version && a->pos < b->pos);
}

static void heap_swap(PSDedupIndex *ix, uint32_t p, uint32_t q) {
    const Node a = ix->heap[p];
    ix->heap[p] = ix->heap[q];
    ix->heap[q] = a;
    ix->hpos[ix->heap[p].pos] = p;
    ix->hpos[a.pos] = q;
}

/* A 4-ary heap: half the levels of a binary one, and the four children
 * of a node share one cache line. */
#define HEAP_D 4

static void sift_up(PSDedupIndex *ix, uint32_t p) {
    while (p > 0) {
        const uint32_t parent = (p - 1) / HEAP_D;
        if (!older(&ix->heap[p], &ix->heap[parent])) break;
        heap_swap(ix, p, parent);
        p = parent;
    }
}

static void sift_down(PSDedupIndex *ix, uint32_t p) {
    for (;;) {
        const uint64_t first = (uint64_t)HEAP_D * p + 1;
        uint32_t m = p;
        for (uint64_t c = first; c < first + HEAP_D && c < ix->len; c++)
            if (older(&ix->heap[c], &ix->heap[m])) m = (uint32_t)c;
        if (m == p) return;
        heap_swap(ix, p, m);
        p = m;
    }
}

/* Restores the heap order after entry i's version changed. */
static void heap_fix(PSDedupIndex *ix, const PSDedupEntry *E, uint32_t i) {
    ix->heap[ix->hpos[i]].version = E[i].version;
    sift_up(ix, ix->hpos[i]);
    sift_down(ix, ix->hpos[i]);
}

static void slot_insert(PSDedupIndex *ix, uint64_t hash, uint32_t i) {
    const uint32_t h32 = slot_hash(hash);
    uint32_t s = h32 & ix->mask;
    while (ix->slots[s].pos1) s = (s + 1) & ix->mask;
    ix->slots[s].pos1 = i + 1;
    ix->slots[s].h32 = h32;
}

/* The slot holding entry i (whose id hashes to 'hash'). */
static uint32_t slot_find(const PSDedupIndex *ix, uint64_t hash, uint32_t i) {
    uint32_t s = slot_hash(hash) & ix->mask;
    while (ix->slots[s].pos1 != i + 1) s = (s + 1) & ix->mask;
    return s;
}

static void slot_remove(PSDedupIndex *ix, const PSDedupEntry *E, uint32_t i) {
    uint32_t hole = slot_find(ix, E[i].hash, i);
    ix->slots[hole].pos1 = 0;
    for (uint32_t j = (hole + 1) & ix->mask; ix->slots[j].pos1; j = (j + 1) & ix->mask) {
        const uint32_t home = ix->slots[j].h32 & ix->mask;
        /* Entry j may fill the hole unless its home lies in (hole, j]. */
        const int stays = hole < j ? (home > hole && home <= j) : (home > hole || home <= j);
        if (stays) continue;
        ix->slots[hole] = ix->slots[j];
        ix->slots[j].pos1 = 0;
        hole = j;
    }
}

/* Builds an index of room 'cap' over E[0..len); NULL on OOM. */
static PSDedupIndex *index_build(PSDedupEntry *E, uint32_t len, uint32_t cap) {
    const uint32_t ns = slot_count(cap);
    PSDedupIndex *ix = PSTensor_Alloc(index_bytes(cap));
    if (!ix) return NULL;
    ix->base = E;
    ix->cap = cap;
    ix->mask = ns - 1;
    ix->heap = (Node *)(ix + 1);
    ix->slots = (Slot *)(ix->heap + cap);
    ix->hpos = (uint32_t *)(ix->slots + ns);
    memset(ix->slots, 0, ns * sizeof(Slot));
    for (uint32_t i = 0; i < len; i++) {
        E[i].hash = PSTensor_DedupHash(E[i].id, E[i].idlen);
        slot_insert(ix, E[i].hash, i);
        ix->heap[i].version = E[i].version;
        ix->heap[i].pos = i;
        ix->hpos[i] = i;
    }
    ix->len = len;
    for (uint32_t p = len / HEAP_D + 1; p-- > 0;) sift_down(ix, p);
    return ix;
}

/* The tensor's index, (re)built when missing or not describing the array
 * (filled directly by a loader); NULL when it cannot be allocated. */
static PSDedupIndex *index_of(PSTensor *t) {
    PSDedupIndex *ix = t->dedup_ix;
    if (ix && ix->base == t->dedup && ix->len == t->dedup_len && ix->cap >= t->dedup_cap) return ix;
    PSTensor_Dealloc(ix);
    t->dedup_ix = NULL;
    if (!t->dedup_cap) return NULL;
    t->dedup_ix = index_build(t->dedup, t->dedup_len, t->dedup_cap);
    return t->dedup_ix;
}

/* ------------------------------------------------------------------------
 * Table operations
 * ---------------------------------------------------------------------- */

PSDedupEntry *PSTensor_DedupFind(PSTensor *t, const char *id, size_t idlen) {
    if (!t->dedup_len) return NULL;
    const uint64_t h = PSTensor_DedupHash(id, idlen);
    PSDedupIndex *ix = index_of(t);
    if (ix) {
        const uint32_t h32 = slot_hash(h);
        for (uint32_t s = h32 & ix->mask; ix->slots[s].pos1; s = (s + 1) & ix->mask) {
            if (ix->slots[s].h32 != h32) continue;
            PSDedupEntry *e = &t->dedup[ix->slots[s].pos1 - 1];
            if (e->hash == h && e->idlen == idlen && memcmp(e->id, id, idlen) == 0) return e;
        }
        return NULL;
    }
    for (uint32_t i = 0; i < t->dedup_len; i++) { /* no memory for the index */
        PSDedupEntry *e = &t->dedup[i];
        if (e->hash == h && e->idlen == idlen && memcmp(e->id, id, idlen) == 0) return e;
    }
    return NULL;
}

/* Removes entry v: the last entry moves into its place (the order RDB and
 * AOF save in, unchanged from before the index existed). */
static void remove_at(PSTensor *t, PSDedupIndex *ix, uint32_t v) {
    PSDedupEntry *E = t->dedup;
    const uint32_t last = t->dedup_len - 1;
    if (ix) {
        slot_remove(ix, E, v);
        const uint32_t p = ix->hpos[v];
        ix->len--;
        if (p < ix->len) {
            heap_swap(ix, p, ix->len);
            sift_up(ix, p);
            sift_down(ix, p);
        }
    }
    PSTensor_Dealloc(E[v].id);
    if (v != last) {
        E[v] = E[last];
        if (ix) {
            ix->slots[slot_find(ix, E[v].hash, last)].pos1 = v + 1;
            const uint32_t p = ix->hpos[last];
            ix->heap[p].pos = v;
            ix->hpos[v] = p;
            sift_up(ix, p); /* same version, lower position: only older */
        }
    }
    t->dedup_len--;
}

/* Evicts the entry with the oldest version (the first such in the array). */
static void evict_oldest(PSTensor *t) {
    PSDedupIndex *ix = index_of(t);
    uint32_t victim = 0;
    if (ix) {
        victim = ix->heap[0].pos;
    } else {
        for (uint32_t i = 1; i < t->dedup_len; i++)
            if (t->dedup[i].version < t->dedup[victim].version) victim = i;
    }
    remove_at(t, ix, victim);
}

void PSTensor_DedupShrink(PSTensor *t) {
    while (t->dedup_len > t->dedup_max) evict_oldest(t);
}

char *PSDedup_Prepare(PSTensor *t, const char *id, size_t idlen) {
    if (t->dedup_len == t->dedup_cap && t->dedup_len < t->dedup_max) {
        uint32_t cap = t->dedup_cap ? t->dedup_cap * 2 : 4;
        if (cap > t->dedup_max) cap = t->dedup_max;
        PSDedupEntry *nd = PSTensor_Alloc(cap * sizeof(PSDedupEntry));
        if (!nd) return NULL;
        if (t->dedup_len) memcpy(nd, t->dedup, t->dedup_len * sizeof(PSDedupEntry));
        PSTensor_Dealloc(t->dedup);
        t->dedup = nd;
        t->dedup_cap = cap;
    }
    index_of(t); /* rebuilt for the new array; on OOM the scan fallback */
    return PSTensor_DupBytes(id, idlen);
}

void PSDedup_Commit(PSTensor *t, char *idcopy, size_t idlen, uint64_t seq, uint64_t window,
                    uint64_t version) {
    while (t->dedup_len > 0 && t->dedup_len >= t->dedup_max) evict_oldest(t);
    PSDedupIndex *ix = index_of(t);
    const uint32_t i = t->dedup_len++;
    PSDedupEntry *ne = &t->dedup[i];
    ne->id = idcopy;
    ne->hash = PSTensor_DedupHash(idcopy, idlen);
    ne->idlen = (uint32_t)idlen;
    ne->seq = seq;
    ne->window = window;
    ne->version = version;
    if (ix) {
        slot_insert(ix, ne->hash, i);
        ix->heap[ix->len].version = version;
        ix->heap[ix->len].pos = i;
        ix->hpos[i] = ix->len;
        ix->len++;
        sift_up(ix, ix->hpos[i]);
    }
}

void PSDedup_Applied(PSTensor *t, PSDedupEntry *e, uint64_t seq, uint64_t version) {
    const uint64_t before = e->version;
    PSTensor_DedupMark(e, seq, version);
    PSDedupIndex *ix = t->dedup_ix;
    if (e->version != before && ix) heap_fix(ix, t->dedup, (uint32_t)(e - t->dedup));
}

int PSTensor_DedupRecord(PSTensor *t, const char *id, size_t idlen, uint64_t seq,
                         uint64_t window, uint64_t version) {
    if (t->dedup_max == 0) return PST_OK;
    PSDedupEntry *e = PSTensor_DedupFind(t, id, idlen);
    if (e) {
        e->seq = seq;
        e->window = window;
        e->version = version;
        if (t->dedup_ix) heap_fix(t->dedup_ix, t->dedup, (uint32_t)(e - t->dedup));
        return PST_OK;
    }
    char *copy = PSDedup_Prepare(t, id, idlen);
    if (!copy) return PST_ERR_OOM;
    PSDedup_Commit(t, copy, idlen, seq, window, version);
    return PST_OK;
}

int PSDedup_CopyInto(PSTensor *dst, const PSTensor *src) {
    dst->dedup = NULL;
    dst->dedup_ix = NULL;
    dst->dedup_len = dst->dedup_cap = 0;
    if (!src->dedup_len) return PST_OK;
    dst->dedup = PSTensor_Alloc(src->dedup_len * sizeof(PSDedupEntry));
    if (!dst->dedup) return PST_ERR_OOM;
    dst->dedup_cap = src->dedup_len;
    for (uint32_t i = 0; i < src->dedup_len; i++) {
        dst->dedup[i] = src->dedup[i];
        dst->dedup[i].id = PSTensor_DupBytes(src->dedup[i].id, src->dedup[i].idlen);
        if (!dst->dedup[i].id) return PST_ERR_OOM;
        dst->dedup_len = i + 1;
    }
    return PST_OK;
}

void PSDedup_Free(PSTensor *t) {
    for (uint32_t i = 0; i < t->dedup_len; i++) PSTensor_Dealloc(t->dedup[i].id);
    PSTensor_Dealloc(t->dedup);
    PSTensor_Dealloc(t->dedup_ix);
    t->dedup = NULL;
    t->dedup_ix = NULL;
    t->dedup_len = t->dedup_cap = 0;
}

size_t PSDedup_MemUsage(const PSTensor *t) {
    if (!t->dedup_cap) return 0;
    size_t bytes = t->dedup_cap * sizeof(PSDedupEntry) + index_bytes(t->dedup_cap);
    for (uint32_t i = 0; i < t->dedup_len; i++) bytes += t->dedup[i].idlen + 1;
    return bytes;
}
