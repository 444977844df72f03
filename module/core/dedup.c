/* dedup.c -- the exactly-once table (see dedup.h). No Redis calls here.
 * The operations work on a PSDedupSet; the PSTensor_Dedup* / PSDedup_*
 * functions view a tensor's fields as one (set_of) and store them back. */

#include "dedup.h"

#include <string.h>

#include "hugepage.h"
#include "tensor.h"

_Static_assert((int)PS_DEDUP_OK == (int)PST_OK && (int)PS_DEDUP_ERR_OOM == (int)PST_ERR_OOM,
               "the set operations answer the tensor status codes");

/* The index over s->e[0..len): 'slots' maps an id's hash to an entry
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
    uint32_t h32; /* the entry's slot hash (in what was padding): where its slot is, without
                   * reading the entry */
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

uint64_t PSDedup_Hash(const char *id, size_t idlen) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < idlen; i++) {
        h ^= (unsigned char)id[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

int PSDedupEntry_Seen(const PSDedupEntry *e, uint64_t seq) {
    if (seq >= e->seq) return seq == e->seq;
    const uint64_t d = e->seq - seq;
    if (d > PS_DEDUP_WINDOW) return 1;
    return (e->window >> (d - 1)) & 1;
}

void PSDedupEntry_Mark(PSDedupEntry *e, uint64_t seq, uint64_t version) {
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

/* A D-ary heap, HEAP_D children per node. */
#ifndef HEAP_D
#define HEAP_D 4
#endif

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
        if (first >= ix->len) return;
        const char *blk = (const char *)&ix->heap[first];
        for (size_t b = 0; b < HEAP_D * sizeof(Node); b += 64) __builtin_prefetch(blk + b);
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

/* The slot holding entry i, whose slot hash is h32 (its heap node has it:
 * the slot is found without reading the entry). */
static uint32_t slot_find(const PSDedupIndex *ix, uint32_t h32, uint32_t i) {
    uint32_t s = h32 & ix->mask;
    while (ix->slots[s].pos1 != i + 1) s = (s + 1) & ix->mask;
    return s;
}

static void slot_remove(PSDedupIndex *ix, uint32_t i) {
    uint32_t hole = slot_find(ix, ix->heap[ix->hpos[i]].h32, i);
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
    ps_advise_hugepages(ix, index_bytes(cap));
    ix->base = E;
    ix->cap = cap;
    ix->mask = ns - 1;
    ix->heap = (Node *)(ix + 1);
    ix->slots = (Slot *)(ix->heap + cap);
    ix->hpos = (uint32_t *)(ix->slots + ns);
    memset(ix->slots, 0, ns * sizeof(Slot));
    for (uint32_t i = 0; i < len; i++) {
        E[i].hash = PSDedup_Hash(E[i].id, E[i].idlen);
        slot_insert(ix, E[i].hash, i);
        ix->heap[i].version = E[i].version;
        ix->heap[i].pos = i;
        ix->heap[i].h32 = slot_hash(E[i].hash);
        ix->hpos[i] = i;
    }
    ix->len = len;
    for (uint32_t p = len / HEAP_D + 1; p-- > 0;) sift_down(ix, p);
    return ix;
}

/* The set's index, (re)built when missing or not describing the array
 * (filled directly by a loader); NULL when it cannot be allocated. */
static PSDedupIndex *index_of(PSDedupSet *s) {
    PSDedupIndex *ix = s->ix;
    if (ix && ix->base == s->e && ix->len == s->len && ix->cap >= s->cap) return ix;
    PSTensor_Dealloc(ix);
    s->ix = NULL;
    if (!s->cap) return NULL;
    s->ix = index_build(s->e, s->len, s->cap);
    return s->ix;
}

/* Fetches, ahead of time, what evicting the next victim will read: its
 * entry, its slot and its heap position. Called when a command is done
 * with a full table, so that the next new client's push (a later command,
 * usually a few microseconds away) finds these lines in the cache instead
 * of paying three dependent misses in a row; a hint, with no effect on
 * any result. (always_inline: as a call, GCC finds a function of
 * prefetches alone free of side effects and deletes the calls.) */
static inline __attribute__((always_inline)) void prefetch_victim(const PSDedupSet *s) {
    const PSDedupIndex *ix = s->ix;
    if (!ix || ix->len == 0 || s->len < s->max || ix->base != s->e) return;
    const Node *r = &ix->heap[0];
    __builtin_prefetch(&s->e[r->pos]);
    __builtin_prefetch(&ix->slots[r->h32 & ix->mask]);
    __builtin_prefetch(&ix->hpos[r->pos]);
}

/* ------------------------------------------------------------------------
 * Table operations
 * ---------------------------------------------------------------------- */

PSDedupEntry *PSDedupSet_Find(PSDedupSet *s, const char *id, size_t idlen) {
    if (!s->len) return NULL;
    const uint64_t h = PSDedup_Hash(id, idlen);
    PSDedupIndex *ix = index_of(s);
    if (ix) {
        const uint32_t h32 = slot_hash(h);
        for (uint32_t k = h32 & ix->mask; ix->slots[k].pos1; k = (k + 1) & ix->mask) {
            if (ix->slots[k].h32 != h32) continue;
            PSDedupEntry *e = &s->e[ix->slots[k].pos1 - 1];
            if (e->hash == h && e->idlen == idlen && memcmp(e->id, id, idlen) == 0) return e;
        }
        prefetch_victim(s); /* a new client: at a full table its push evicts */
        return NULL;
    }
    for (uint32_t i = 0; i < s->len; i++) { /* no memory for the index */
        PSDedupEntry *e = &s->e[i];
        if (e->hash == h && e->idlen == idlen && memcmp(e->id, id, idlen) == 0) return e;
    }
    return NULL;
}

/* Removes entry v: the last entry moves into its place (the order RDB and
 * AOF save in, unchanged from before the index existed). */
static void remove_at(PSDedupSet *s, PSDedupIndex *ix, uint32_t v) {
    PSDedupEntry *E = s->e;
    const uint32_t last = s->len - 1;
    if (ix) {
        slot_remove(ix, v);
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
            const uint32_t p = ix->hpos[last];
            ix->slots[slot_find(ix, ix->heap[p].h32, last)].pos1 = v + 1;
            ix->heap[p].pos = v;
            ix->hpos[v] = p;
            sift_up(ix, p); /* same version, lower position: only older */
        }
    }
    s->len--;
}

/* Evicts the entry with the oldest version (the first such in the array). */
static void evict_oldest(PSDedupSet *s) {
    PSDedupIndex *ix = index_of(s);
    uint32_t victim = 0;
    if (ix) {
        victim = ix->heap[0].pos;
    } else {
        for (uint32_t i = 1; i < s->len; i++)
            if (s->e[i].version < s->e[victim].version) victim = i;
    }
    remove_at(s, ix, victim);
}

void PSDedupSet_Shrink(PSDedupSet *s) {
    while (s->len > s->max) evict_oldest(s);
}

char *PSDedupSet_Prepare(PSDedupSet *s, const char *id, size_t idlen) {
    if (s->len == s->cap && s->len < s->max) {
        uint32_t cap = s->cap ? s->cap * 2 : 4;
        if (cap > s->max) cap = s->max;
        PSDedupEntry *nd = PSTensor_Alloc(cap * sizeof(PSDedupEntry));
        if (!nd) return NULL;
        ps_advise_hugepages(nd, cap * sizeof(PSDedupEntry));
        if (s->len) memcpy(nd, s->e, s->len * sizeof(PSDedupEntry));
        PSTensor_Dealloc(s->e);
        s->e = nd;
        s->cap = cap;
    }
    index_of(s); /* rebuilt for the new array; on OOM the scan fallback */
    return PSTensor_DupBytes(id, idlen);
}

void PSDedupSet_Commit(PSDedupSet *s, char *idcopy, size_t idlen, uint64_t seq, uint64_t window,
                       uint64_t version) {
    while (s->len > 0 && s->len >= s->max) evict_oldest(s);
    PSDedupIndex *ix = index_of(s);
    const uint32_t i = s->len++;
    PSDedupEntry *ne = &s->e[i];
    ne->id = idcopy;
    ne->hash = PSDedup_Hash(idcopy, idlen);
    ne->idlen = (uint32_t)idlen;
    ne->seq = seq;
    ne->window = window;
    ne->version = version;
    if (ix) {
        slot_insert(ix, ne->hash, i);
        ix->heap[ix->len].version = version;
        ix->heap[ix->len].pos = i;
        ix->heap[ix->len].h32 = slot_hash(ne->hash);
        ix->hpos[i] = ix->len;
        ix->len++;
        sift_up(ix, ix->hpos[i]);
        prefetch_victim(s);
    }
}

void PSDedupSet_Applied(PSDedupSet *s, PSDedupEntry *e, uint64_t seq, uint64_t version) {
    const uint64_t before = e->version;
    PSDedupEntry_Mark(e, seq, version);
    if (e->version != before && s->ix) heap_fix(s->ix, s->e, (uint32_t)(e - s->e));
}

int PSDedupSet_Record(PSDedupSet *s, const char *id, size_t idlen, uint64_t seq, uint64_t window,
                      uint64_t version) {
    if (s->max == 0) return PST_OK;
    PSDedupEntry *e = PSDedupSet_Find(s, id, idlen);
    if (e) {
        e->seq = seq;
        e->window = window;
        e->version = version;
        if (s->ix) heap_fix(s->ix, s->e, (uint32_t)(e - s->e));
        return PST_OK;
    }
    char *copy = PSDedupSet_Prepare(s, id, idlen);
    if (!copy) return PST_ERR_OOM;
    PSDedupSet_Commit(s, copy, idlen, seq, window, version);
    return PST_OK;
}

int PSDedupSet_CopyInto(PSDedupSet *dst, const PSDedupSet *src) {
    dst->e = NULL;
    dst->ix = NULL;
    dst->len = dst->cap = 0;
    if (!src->len) return PST_OK;
    dst->e = PSTensor_Alloc(src->len * sizeof(PSDedupEntry));
    if (!dst->e) return PST_ERR_OOM;
    dst->cap = src->len;
    for (uint32_t i = 0; i < src->len; i++) {
        dst->e[i] = src->e[i];
        dst->e[i].id = PSTensor_DupBytes(src->e[i].id, src->e[i].idlen);
        if (!dst->e[i].id) return PST_ERR_OOM;
        dst->len = i + 1;
    }
    return PST_OK;
}

void PSDedupSet_Free(PSDedupSet *s) {
    for (uint32_t i = 0; i < s->len; i++) PSTensor_Dealloc(s->e[i].id);
    PSTensor_Dealloc(s->e);
    PSTensor_Dealloc(s->ix);
    s->e = NULL;
    s->ix = NULL;
    s->len = s->cap = 0;
}

void PSDedupSet_Discard(char *idcopy) { PSTensor_Dealloc(idcopy); }

size_t PSDedupSet_MemUsage(const PSDedupSet *s) {
    if (!s->cap) return 0;
    size_t bytes = s->cap * sizeof(PSDedupEntry) + index_bytes(s->cap);
    for (uint32_t i = 0; i < s->len; i++) bytes += s->e[i].idlen + 1;
    return bytes;
}

/* ------------------------------------------------------------------------
 * A tensor's table: its fields viewed as a set, and stored back
 * ---------------------------------------------------------------------- */

static PSDedupSet set_of(const PSTensor *t) {
    return (PSDedupSet){.max = t->dedup_max, .len = t->dedup_len, .cap = t->dedup_cap,
                        .e = t->dedup, .ix = t->dedup_ix};
}

static void set_back(PSTensor *t, const PSDedupSet *s) {
    t->dedup_len = s->len;
    t->dedup_cap = s->cap;
    t->dedup = s->e;
    t->dedup_ix = s->ix;
}

PSDedupEntry *PSTensor_DedupFind(PSTensor *t, const char *id, size_t idlen) {
    PSDedupSet s = set_of(t);
    PSDedupEntry *e = PSDedupSet_Find(&s, id, idlen);
    set_back(t, &s);
    return e;
}

int PSTensor_DedupRecord(PSTensor *t, const char *id, size_t idlen, uint64_t seq,
                         uint64_t window, uint64_t version) {
    PSDedupSet s = set_of(t);
    const int rc = PSDedupSet_Record(&s, id, idlen, seq, window, version);
    set_back(t, &s);
    return rc;
}

void PSTensor_DedupShrink(PSTensor *t) {
    PSDedupSet s = set_of(t);
    PSDedupSet_Shrink(&s);
    set_back(t, &s);
}

char *PSTensor_DedupPrepare(PSTensor *t, const char *id, size_t idlen) {
    PSDedupSet s = set_of(t);
    char *copy = PSDedupSet_Prepare(&s, id, idlen);
    set_back(t, &s);
    return copy;
}

void PSTensor_DedupCommit(PSTensor *t, char *idcopy, size_t idlen, uint64_t seq, uint64_t window,
                    uint64_t version) {
    PSDedupSet s = set_of(t);
    PSDedupSet_Commit(&s, idcopy, idlen, seq, window, version);
    set_back(t, &s);
}

void PSTensor_DedupApplied(PSTensor *t, PSDedupEntry *e, uint64_t seq, uint64_t version) {
    PSDedupSet s = set_of(t);
    PSDedupSet_Applied(&s, e, seq, version);
}

int PSTensor_DedupCopyInto(PSTensor *dst, const PSTensor *src) {
    PSDedupSet d = set_of(dst);
    const PSDedupSet s = set_of(src);
    const int rc = PSDedupSet_CopyInto(&d, &s);
    set_back(dst, &d);
    return rc;
}

void PSTensor_DedupFree(PSTensor *t) {
    PSDedupSet s = set_of(t);
    PSDedupSet_Free(&s);
    set_back(t, &s);
}

size_t PSTensor_DedupMemUsage(const PSTensor *t) {
    const PSDedupSet s = set_of(t);
    return PSDedupSet_MemUsage(&s);
}
