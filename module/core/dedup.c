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
 * the eviction order, (version, array position) ascending, is kept in two
 * parts whose union holds every entry:
 *   - a list, doubly linked through the entries' own prev/next fields,
 *     sorted by that key: an entry whose key is above the list's tail is
 *     appended. The push path gives a new or updated client the tensor's
 *     newest version, so nearly every entry lives here, and evicting the
 *     oldest is unlinking the head: O(1), and the lines it touches (the
 *     head's entry and slot) are known, and prefetched, one command ahead;
 *   - a 4-ary min-heap of the entries whose key came in below the tail (a
 *     sync round gives several clients one version, PS._RESTORE and a
 *     replicated record any version); an entry's hpos is its heap position
 *     (NIL: in the list). It is empty in the steady push path.
 * The oldest entry is the smaller of the list's head and the heap's root.
 * The order's links live in the entry (64 bytes, one cache line), so an
 * eviction touches the victim's line and its slot's, not three arrays.
 * The head's prev is never read (unlinking the head writes no neighbour).
 * One allocation: the struct, then the arrays. An index built from scratch
 * (after a load) heapifies every entry; one grown with the array keeps the
 * order (it lives in the entries, which are copied). */
typedef struct Slot {
    uint32_t pos1; /* entry position + 1; 0 = empty */
    uint32_t h32;  /* slot hash of the id */
} Slot;
typedef struct Node {
    uint64_t version;
    uint32_t pos;
    uint32_t unused;
} Node;
#define NIL UINT32_MAX
struct PSDedupIndex {
    PSDedupEntry *base; /* the array indexed */
    uint32_t len;       /* entries indexed */
    uint32_t cap;       /* entries the heap can hold */
    uint32_t mask;      /* slot count - 1 (a power of two >= 2 * cap) */
    uint32_t hlen;      /* entries in the heap */
    uint32_t head, tail; /* the list's ends (NIL: empty) */
    Slot *slots;
    Node *heap;
};

_Static_assert(sizeof(PSDedupEntry) == 64, "an entry is one cache line");

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
    return sizeof(PSDedupIndex) + (size_t)slot_count(cap) * sizeof(Slot) + (size_t)cap * sizeof(Node);
}

/* Slot hash: FNV-1a's low bits cluster for similar short ids ("w1",
 * "w2", ...), so the 64-bit hash is mixed once; its top 32 bits pick the
 * home slot and are kept in the slot. */
static uint32_t slot_hash(uint64_t h) { return (uint32_t)((h * 0x9e3779b97f4a7c15ULL) >> 32); }

/* Eviction order: the older version first, then the lower array position. */
static int key_lt(uint64_t va, uint32_t pa, uint64_t vb, uint32_t pb) {
    return va < vb || (va == vb && pa < pb);
}
static int older(const Node *a, const Node *b) { return key_lt(a->version, a->pos, b->version, b->pos); }

static void heap_swap(PSDedupIndex *ix, uint32_t p, uint32_t q) {
    const Node a = ix->heap[p];
    ix->heap[p] = ix->heap[q];
    ix->heap[q] = a;
    ix->base[ix->heap[p].pos].hpos = p;
    ix->base[a.pos].hpos = q;
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
        if (first >= ix->hlen) return;
        uint32_t m = p;
        for (uint64_t c = first; c < first + HEAP_D && c < ix->hlen; c++)
            if (older(&ix->heap[c], &ix->heap[m])) m = (uint32_t)c;
        if (m == p) return;
        heap_swap(ix, p, m);
        p = m;
    }
}

static void heap_push(PSDedupIndex *ix, uint32_t i) {
    const uint32_t p = ix->hlen++;
    ix->heap[p].version = ix->base[i].version;
    ix->heap[p].pos = i;
    ix->heap[p].unused = 0;
    ix->base[i].hpos = p;
    sift_up(ix, p);
}

static void heap_remove(PSDedupIndex *ix, uint32_t i) {
    const uint32_t p = ix->base[i].hpos;
    ix->hlen--;
    if (p < ix->hlen) {
        heap_swap(ix, p, ix->hlen);
        sift_up(ix, p);
        sift_down(ix, p);
    }
}

static void list_append(PSDedupIndex *ix, uint32_t i) {
    PSDedupEntry *e = &ix->base[i];
    e->prev = ix->tail;
    e->next = NIL;
    e->hpos = NIL;
    if (ix->tail != NIL) ix->base[ix->tail].next = i;
    else ix->head = i;
    ix->tail = i;
}

static void list_unlink(PSDedupIndex *ix, uint32_t i) {
    const PSDedupEntry *e = &ix->base[i];
    if (i == ix->head) { /* the new head's prev goes stale: never read */
        ix->head = e->next;
        if (e->next == NIL) ix->tail = NIL;
        return;
    }
    ix->base[e->prev].next = e->next;
    if (e->next != NIL) ix->base[e->next].prev = e->prev;
    else ix->tail = e->prev;
}

/* Puts entry i (its version set) into the order: the list when its key is
 * above the tail's, else the heap. */
static void order_insert(PSDedupIndex *ix, uint32_t i) {
    if (ix->tail == NIL || key_lt(ix->base[ix->tail].version, ix->tail, ix->base[i].version, i))
        list_append(ix, i);
    else
        heap_push(ix, i);
}

static void order_remove(PSDedupIndex *ix, uint32_t i) {
    if (ix->base[i].hpos == NIL) list_unlink(ix, i);
    else heap_remove(ix, i);
}

/* Entry i's version changed (already stored): it takes its new place. */
static void order_update(PSDedupIndex *ix, uint32_t i) {
    order_remove(ix, i);
    order_insert(ix, i);
}

/* The entry with the oldest (version, position): the list's head or the
 * heap's root. The order is not empty. */
static uint32_t order_min(const PSDedupIndex *ix) {
    if (!ix->hlen) return ix->head;
    const Node *r = &ix->heap[0];
    if (ix->head == NIL || key_lt(r->version, r->pos, ix->base[ix->head].version, ix->head)) return r->pos;
    return ix->head;
}

/* Entry 'from' was copied to array position 'to' (< from: the swap-remove
 * of an eviction), its order fields with it. Its key went down (same
 * version, lower position): the order's references follow it. */
static void order_move(PSDedupIndex *ix, uint32_t from, uint32_t to) {
    PSDedupEntry *e = &ix->base[to];
    if (e->hpos != NIL) {
        ix->heap[e->hpos].pos = to;
        sift_up(ix, e->hpos);
        return;
    }
    const int was_head = ix->head == from;
    if (was_head) ix->head = to;
    else ix->base[e->prev].next = to;
    if (e->next != NIL) ix->base[e->next].prev = to;
    else ix->tail = to;
    /* Still above its predecessor? (Only an equal version at a position
     * between 'to' and 'from' can be above it now.) Else to the heap. */
    if (!was_head && !key_lt(ix->base[e->prev].version, e->prev, e->version, to)) {
        list_unlink(ix, to);
        heap_push(ix, to);
    }
}

static void slot_insert(PSDedupIndex *ix, uint32_t h32, uint32_t i) {
    uint32_t s = h32 & ix->mask;
    while (ix->slots[s].pos1) s = (s + 1) & ix->mask;
    ix->slots[s].pos1 = i + 1;
    ix->slots[s].h32 = h32;
}

/* The slot holding entry i, whose slot hash is h32. */
static uint32_t slot_find(const PSDedupIndex *ix, uint32_t h32, uint32_t i) {
    uint32_t s = h32 & ix->mask;
    while (ix->slots[s].pos1 != i + 1) s = (s + 1) & ix->mask;
    return s;
}

static void slot_remove(PSDedupIndex *ix, uint32_t i) {
    uint32_t hole = slot_find(ix, ix->base[i].h32, i);
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

/* Allocates an index of room 'cap' for array E with no slot used; NULL on
 * OOM. */
static PSDedupIndex *index_alloc(PSDedupEntry *E, uint32_t cap) {
    const uint32_t ns = slot_count(cap);
    PSDedupIndex *ix = PSTensor_Alloc(index_bytes(cap));
    if (!ix) return NULL;
    ps_advise_hugepages(ix, index_bytes(cap));
    ix->base = E;
    ix->len = 0;
    ix->cap = cap;
    ix->mask = ns - 1;
    ix->hlen = 0;
    ix->head = ix->tail = NIL;
    ix->heap = (Node *)(ix + 1);
    ix->slots = (Slot *)(ix->heap + cap);
    memset(ix->slots, 0, ns * sizeof(Slot));
    return ix;
}

/* Builds an index of room 'cap' over E[0..len): every entry goes into the
 * heap (heapified in O(len), as the index did before the list existed; a
 * sort into the list would stall the first command after loading a table
 * of 2^20 clients for a few hundred milliseconds). Entries that pushes touch
 * afterwards move to the list; the loaded ones leave the heap as they are
 * evicted. NULL on OOM. */
static PSDedupIndex *index_build(PSDedupEntry *E, uint32_t len, uint32_t cap) {
    PSDedupIndex *ix = index_alloc(E, cap);
    if (!ix) return NULL;
    for (uint32_t i = 0; i < len; i++) {
        E[i].hash = PSDedup_Hash(E[i].id, E[i].idlen);
        E[i].h32 = slot_hash(E[i].hash);
        E[i].unused = 0;
        E[i].prev = E[i].next = NIL;
        slot_insert(ix, E[i].h32, i);
        ix->heap[i].version = E[i].version;
        ix->heap[i].pos = i;
        ix->heap[i].unused = 0;
        E[i].hpos = i;
    }
    ix->hlen = len;
    ix->len = len;
    for (uint32_t p = len / HEAP_D + 1; p-- > 0;) sift_down(ix, p);
    return ix;
}

/* Index 'old' moved to entries copied to E (same positions) with room
 * 'cap': the order is in the entries, the heap is copied, the slots are
 * rehashed. NULL on OOM (old is kept). */
static PSDedupIndex *index_grow(const PSDedupIndex *old, PSDedupEntry *E, uint32_t cap) {
    PSDedupIndex *ix = index_alloc(E, cap);
    if (!ix) return NULL;
    memcpy(ix->heap, old->heap, old->hlen * sizeof(Node));
    ix->hlen = old->hlen;
    ix->head = old->head;
    ix->tail = old->tail;
    ix->len = old->len;
    for (uint32_t i = 0; i < ix->len; i++) slot_insert(ix, E[i].h32, i);
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

/* Fetches, ahead of time, what evicting the next victim will touch: its
 * entry and its slot, and the entry after it in the list (whose line the
 * next call reads). Called when a command is done with a full table, so
 * that the next new client's push (a later command, usually a few
 * microseconds away) finds these lines in the cache instead of paying
 * dependent misses in a row; a hint, with no effect on any result.
 * (always_inline: as a call, GCC finds a function of prefetches alone free
 * of side effects and deletes the calls.) */
static inline __attribute__((always_inline)) void prefetch_victim(const PSDedupSet *s) {
    const PSDedupIndex *ix = s->ix;
    if (!ix || ix->len == 0 || s->len < s->max || ix->base != s->e || ix->len != s->len) return;
    const uint32_t v = order_min(ix);
    const PSDedupEntry *e = &s->e[v]; /* prefetched by the previous call, as the next */
    const uint32_t slot = e->h32 & ix->mask;
    __builtin_prefetch(&ix->slots[slot], 1);
    if (((slot + 1) & 7) == 0) __builtin_prefetch(&ix->slots[(slot + 1) & ix->mask], 1);
    /* Only a list entry has list links (a heap entry's are not set). */
    if (v == ix->head && e->next != NIL) __builtin_prefetch(&s->e[e->next], 1);
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

/* (always_inline: see prefetch_victim.) */
static inline __attribute__((always_inline)) void prefetch_slot(const PSDedupSet *s, const char *id,
                                                                size_t idlen) {
    const PSDedupIndex *ix = s->ix;
    if (!ix || !s->len || ix->base != s->e || ix->len != s->len) return;
    const uint32_t h32 = slot_hash(PSDedup_Hash(id, idlen));
    __builtin_prefetch(&ix->slots[h32 & ix->mask]);
}

void PSDedupSet_Prefetch(const PSDedupSet *s, const char *id, size_t idlen) { prefetch_slot(s, id, idlen); }

/* Removes entry v: the last entry moves into its place (the order RDB and
 * AOF save in, unchanged from before the index existed). */
static void remove_at(PSDedupSet *s, PSDedupIndex *ix, uint32_t v) {
    PSDedupEntry *E = s->e;
    const uint32_t last = s->len - 1;
    if (ix) {
        slot_remove(ix, v);
        order_remove(ix, v);
        ix->len--;
    }
    PSTensor_Dealloc(E[v].id);
    if (v != last) {
        E[v] = E[last];
        if (ix) {
            ix->slots[slot_find(ix, E[v].h32, last)].pos1 = v + 1;
            order_move(ix, last, v); /* same version, lower position: only older */
        }
    }
    s->len--;
}

/* Evicts the entry with the oldest version (the first such in the array). */
static void evict_oldest(PSDedupSet *s) {
    PSDedupIndex *ix = index_of(s);
    uint32_t victim = 0;
    if (ix) {
        victim = order_min(ix);
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
        /* The index keeps its order (positions are unchanged); only the
         * slots are rehashed for the larger room. */
        PSDedupIndex *gx = NULL;
        if (s->ix && s->ix->base == s->e && s->ix->len == s->len) gx = index_grow(s->ix, nd, cap);
        PSTensor_Dealloc(s->ix);
        s->ix = gx;
        PSTensor_Dealloc(s->e);
        s->e = nd;
        s->cap = cap;
    }
    index_of(s); /* built when missing; on OOM the scan fallback */
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
    ne->h32 = slot_hash(ne->hash);
    ne->unused = 0;
    if (ix) {
        slot_insert(ix, ne->h32, i);
        order_insert(ix, i);
        ix->len++;
        prefetch_victim(s);
    }
}

void PSDedupSet_Applied(PSDedupSet *s, PSDedupEntry *e, uint64_t seq, uint64_t version) {
    const uint64_t before = e->version;
    PSDedupEntry_Mark(e, seq, version);
    if (e->version != before && s->ix) order_update(s->ix, (uint32_t)(e - s->e));
}

int PSDedupSet_Record(PSDedupSet *s, const char *id, size_t idlen, uint64_t seq, uint64_t window,
                      uint64_t version) {
    if (s->max == 0) return PST_OK;
    PSDedupEntry *e = PSDedupSet_Find(s, id, idlen);
    if (e) {
        e->seq = seq;
        e->window = window;
        e->version = version;
        if (s->ix) order_update(s->ix, (uint32_t)(e - s->e));
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

void PSTensor_DedupPrefetch(const PSTensor *t, const char *id, size_t idlen) {
    const PSDedupSet s = set_of(t);
    prefetch_slot(&s, id, idlen);
}

size_t PSTensor_DedupMemUsage(const PSTensor *t) {
    const PSDedupSet s = set_of(t);
    return PSDedupSet_MemUsage(&s);
}
