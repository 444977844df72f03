/* dedup.h -- the exactly-once table of a tensor or an embedding table:
 * which pushes (client id, seq) were applied, bounded by DEDUPMAX entries.
 * Names: PSDedupSet_* (a table), PSDedupEntry_* (one client's entry) and
 * PSDedup_Hash are shared by both value types; a tensor keeps its set's
 * fields in PSTensor (dedup_max, dedup_len, dedup_cap, dedup, dedup_ix) and
 * goes through the PSTensor_Dedup* wrappers, an embedding table holds a
 * PSDedupSet (embed_glue.h) that its push core (PSEmbed_PushOnce, embed.h)
 * uses. Both types save the same fields (client id, seq, window, version) in
 * the same array order.
 *
 * The entries live in the array s->e[0..len) in the
 * order RDB, AOF rewrite and DEBUG DIGEST walk them; that order is the same
 * as before the table had an index (an insert appends, an eviction moves
 * the last entry into the victim's slot), so the persisted bytes of a table
 * are unchanged. Beside the array, an index (built on demand, and rebuilt
 * when the array was filled directly, as the RDB loader does) gives:
 *   - lookup by client id in O(1): open addressing on the id's hash;
 *   - eviction of the entry with the oldest version: the order by
 *     (version, array position) is a list sorted by that key (linked
 *     through the entries' prev/next) for every entry whose key came in
 *     above the list's tail, which is where the push path puts a client (the
 *     tensor's newest version), plus a 4-ary min-heap for the others; the
 *     victim is the smaller of the list's head and the heap's root, O(1) in
 *     the push path, O(log n) for heap entries. The position breaks ties
 *     exactly as the former linear scan did (the first entry with the
 *     smallest version), so a replica or an AOF replay evicts the same
 *     entry. Versions do not grow monotonically across entries (a sync
 *     round gives several clients one version, PS._RESTORE sets any), hence
 *     the heap beside the list.
 * When the index cannot be allocated, every operation falls back to a scan
 * of the array (same results, linear time).
 *
 * Pure core: no Redis calls; memory from PSTensor_Alloc. */

#ifndef PS_DEDUP_H
#define PS_DEDUP_H

#include <stddef.h>
#include <stdint.h>

struct PSTensor;

/* Exactly-once table entry: the highest seq applied for a client id, which
 * of the PS_DEDUP_WINDOW seqs below it were applied too (bit k of 'window':
 * seq - 1 - k), and the version the newest push produced. A push that
 * arrives late (a resend overtaken by a newer push after a redirect or a
 * failover) is applied when its seq is inside the window and not yet
 * marked; below the window it is treated as applied. 'version' is the
 * newest version any applied push of the client produced, so a duplicate is
 * answered with a version that includes the original. */
#define PS_DEDUP_WINDOW 64
typedef struct PSDedupEntry {
    char *id;
    uint64_t hash; /* PSDedup_Hash(id): compared first on lookup */
    uint32_t idlen;
    uint32_t h32; /* index (dedup.c): the slot hash */
    uint64_t seq;
    uint64_t window;
    uint64_t version;
    /* index (dedup.c): the eviction order's links, kept in the entry's own
     * cache line; not persisted (rebuilt from the fields above). */
    uint32_t prev, next, hpos, unused;
} PSDedupEntry;

/* The index over an entry array (dedup.c). */
typedef struct PSDedupIndex PSDedupIndex;

/* One exactly-once table. Zero-initialized it is empty; 'max' is its bound
 * (0 records nothing). A loader may fill e[0..len) directly (cap >= len):
 * the index is rebuilt on the next operation. */
typedef struct PSDedupSet {
    uint32_t max;
    uint32_t len;
    uint32_t cap;
    PSDedupEntry *e;
    PSDedupIndex *ix; /* NULL until needed (or when it cannot be allocated) */
} PSDedupSet;

/* Status of the set operations that allocate (the values of PST_OK and
 * PST_ERR_OOM, dedup.c checks). */
enum { PS_DEDUP_OK = 0, PS_DEDUP_ERR_OOM = 1 };

/* The operations on a set; what each does is described at the tensor
 * wrapper of the same name below (PSTensor_DedupFind for Find, ...).
 * Memory from PSTensor_Alloc. */
PSDedupEntry *PSDedupSet_Find(PSDedupSet *s, const char *id, size_t idlen);
int PSDedupSet_Record(PSDedupSet *s, const char *id, size_t idlen, uint64_t seq, uint64_t window,
                      uint64_t version);
void PSDedupSet_Shrink(PSDedupSet *s);
char *PSDedupSet_Prepare(PSDedupSet *s, const char *id, size_t idlen);
void PSDedupSet_Commit(PSDedupSet *s, char *idcopy, size_t idlen, uint64_t seq, uint64_t window,
                       uint64_t version);
void PSDedupSet_Applied(PSDedupSet *s, PSDedupEntry *e, uint64_t seq, uint64_t version);
int PSDedupSet_CopyInto(PSDedupSet *dst, const PSDedupSet *src); /* dst->max is kept */
void PSDedupSet_Free(PSDedupSet *s);
size_t PSDedupSet_MemUsage(const PSDedupSet *s);
/* Starts fetching the cache line a lookup of 'id' probes first, so that a
 * push can overlap that (likely) miss with its argument checks and gradient
 * decoding before it calls Find; a hint with no effect on any result, and
 * nothing when the index is not built. */
void PSDedupSet_Prefetch(const PSDedupSet *s, const char *id, size_t idlen);
/* Frees an id copy from PSDedupSet_Prepare that is not committed (the push
 * failed after it); NULL does nothing. */
void PSDedupSet_Discard(char *idcopy);

/* Hash of a client id (FNV-1a 64), cached in each entry. */
uint64_t PSDedup_Hash(const char *id, size_t idlen);

/* Whether push 'seq' of an entry's client was already applied (or is too
 * old to tell, below the window). */
int PSDedupEntry_Seen(const PSDedupEntry *e, uint64_t seq);

/* Marks 'seq' applied in a lone entry (advancing it when seq is the
 * newest); 'version' is what the push produced. It may raise the entry's
 * version, so an entry of a set goes through PSDedupSet_Applied instead. */
void PSDedupEntry_Mark(PSDedupEntry *e, uint64_t seq, uint64_t version);

/* Lookup: the entry for 'id', or NULL. O(1). The pointer is valid until the
 * table next changes. */
PSDedupEntry *PSTensor_DedupFind(struct PSTensor *t, const char *id, size_t idlen);

/* PSDedupSet_Prefetch on a tensor's table. */
void PSTensor_DedupPrefetch(const struct PSTensor *t, const char *id, size_t idlen);

/* Records (id, seq, window, version) as is (restoring a saved table):
 * updates the entry of 'id', or inserts one, evicting the entry with the
 * oldest version when the table is full. Returns PST_OK or PST_ERR_OOM
 * (nothing changed). A bound of 0 records nothing. */
int PSTensor_DedupRecord(struct PSTensor *t, const char *id, size_t idlen, uint64_t seq,
                         uint64_t window, uint64_t version);

/* Evicts the oldest entries until the table holds at most t->dedup_max
 * (PS.CONFIG DEDUPMAX shrinking it). */
void PSTensor_DedupShrink(struct PSTensor *t);

/* The push path, in two steps so that everything that can fail happens
 * before the tensor changes:
 *   PSTensor_DedupPrepare makes room for one more entry (growing the array and
 *   the index) and returns a copy of 'id' the caller owns, or NULL on OOM
 *   with the table unchanged;
 *   PSTensor_DedupCommit inserts it (taking ownership), evicting the oldest entry
 *   when the table is full. */
char *PSTensor_DedupPrepare(struct PSTensor *t, const char *id, size_t idlen);
void PSTensor_DedupCommit(struct PSTensor *t, char *idcopy, size_t idlen, uint64_t seq,
                    uint64_t window, uint64_t version);

/* Marks push 'seq' of table entry 'e' applied with 'version' (keeps the
 * eviction order right). */
void PSTensor_DedupApplied(struct PSTensor *t, PSDedupEntry *e, uint64_t seq, uint64_t version);

/* Copies the table of 'src' into 'dst' (whose table is empty). Returns
 * PST_OK or PST_ERR_OOM (dst's partial table is freed by PSTensor_DedupFree). */
int PSTensor_DedupCopyInto(struct PSTensor *dst, const struct PSTensor *src);

/* Frees the entries, the array and the index. */
void PSTensor_DedupFree(struct PSTensor *t);

/* Bytes the table holds: the array, the ids, and the index counted as if
 * built (so that MEMORY USAGE does not depend on whether a lookup ran). */
size_t PSTensor_DedupMemUsage(const struct PSTensor *t);

#endif /* PS_DEDUP_H */
