/* ring_table.h -- ring tracking state of an embedding table (issue #22): the
 * table counterpart of ring.h, with the same take/ack, apply (ID origin seq,
 * PREV, HOPS), forward FIFO and MAXLAG rules, in rows instead of elements.
 * The commands are in docs/commands.md "Ring commands"; the consistency
 * argument in docs/design.md "Ring state".
 *
 *   base map  id -> the row's values as of its last take, moved by every
 *             received delta. A row enters the map on its first own change:
 *             an own push to a row not in the map inserts its values before
 *             the step (PSRingTable_BeforePush; the row's initial values
 *             PSEmbed_InitRow when it does not exist yet). For a row in the
 *             map the group's own change is values - base; for any other row
 *             it is zero. Rows never leave the table while tracked (TRACK
 *             refuses CAPACITY and TTL, which would evict them; PS.EVICT and
 *             PS.CONFIG refuse to evict on a tracked table).
 *   take      over the map's rows, element d = values - base is significant
 *             when nonzero, finite and |d| > r * |values| (r the THRESHOLD).
 *             Every row with a significant element travels, at most MAXELEMS
 *             rows (the rows with the largest significant |d|, ties by the
 *             lower id), as id + dim floats: the significant elements' d, the
 *             others 0. base := values for the sent elements only (the rest
 *             stays accumulated: nothing is dropped). A row whose change is
 *             then zero in every element leaves the map (so does any such row
 *             the take meets). Rows on the wire are in ascending id order.
 *             Pending under seq max(take_seq + 1, seqfloor) until acknowledged;
 *             a take while one is pending answers it again.
 *   apply     as for tensors (dedup by the origin's mark, own origin ignored,
 *             PREV above the mark refused as a GAP) and then, per row of the
 *             delta: a row missing here is created with PSEmbed_InitRow
 *             (a function of the table's seed and init and the id only, so
 *             every group starts a row from the same bits), values += v and,
 *             for a row in the map, base += v; the table version moves by 1
 *             and each touched row's last version is that version; the row's
 *             push count and optimizer state do not change (push count 0 for
 *             a row the delta created). Forwarded with hops - 1 when hops > 0.
 *   lag       own_pushes counts own pushes applied while tracked; take / ack /
 *             MAXLAG exactly as ring.h.
 *
 * Every operation validates everything before it changes anything and is a
 * function of the value and its arguments only (commands replicate
 * verbatim). Pure core: no Redis calls. Memory through the embedding
 * allocator (PSEmbed_SetAllocator). */

#ifndef PS_RING_TABLE_H
#define PS_RING_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "embed.h"
#include "ring.h"

/* Bytes a delta of 'rows' rows of width 'dim' counts in the forward FIFO's
 * bound: an u64 id and dim F32 values per row, plus a fixed 64 per entry. */
#define PS_RINGT_ENTRY_BYTES(rows, dim) ((8ull + 4ull * (uint64_t)(dim)) * (uint64_t)(rows) + 64ull)
/* Rows of one delta at most (a push's id bound). */
#define PS_RINGT_MAX_ROWS ((uint64_t)PSE_MAX_PUSH_IDS)

/* Further status codes (after ring.h's). */
enum {
    PS_RINGT_EEVICT = 100, /* TRACK on a table with CAPACITY or TTL */
    PS_RINGT_EFTRL,        /* TRACK on an FTRL table (values are w(z, n)) */
    PS_RINGT_ESIZE,        /* a delta whose values are not rows x dim floats */
    PS_RINGT_EJOINING,     /* a JOIN of the table is in progress (JOINBEGIN without JOINEND) */
    PS_RINGT_ENOJOIN,      /* JOINROWS / JOINEND without a JOINBEGIN */
    PS_RINGT_EPAGE,        /* a JOINROWS page out of order, or JOINEND's counts differ */
    PS_RINGT_EDUPROW       /* a JOINROWS row copied already */
};

/* A delta of rows: ids strictly ascending, rows x dim finite values. */
typedef struct PSRingRows {
    struct PSRingRows *next;
    char origin[PS_RING_ORIGIN_MAX + 1];
    uint32_t originlen;
    uint64_t seq;
    uint64_t hops;
    uint64_t rows;
    uint32_t dim;
    uint64_t *ids;
    float *val;
} PSRingRows;

typedef struct PSRingTable {
    char origin[PS_RING_ORIGIN_MAX + 1];
    uint32_t originlen;
    uint32_t dim;
    uint64_t salt; /* keys the map's hash (the table's index salt) */
    /* The base map: entries 0 .. n-1 in a deterministic order (appended,
     * removed by moving the last into the hole), found through 'index'
     * (open addressing, linear probing, entry = position + 1, 0 empty). */
    uint64_t n, cap;
    uint64_t *ids;
    float *base; /* cap x dim */
    uint32_t *index;
    uint64_t isize; /* power of two, > 2n */
    uint64_t take_seq;
    PSRingRows *pend;
    uint32_t norigins;
    PSRingOrigin origins[PS_RING_MAX_ORIGINS];
    PSRingRows *fwd_head, *fwd_tail;
    uint64_t fwd_len, fwd_bytes;
    uint64_t maxqueue;
    uint64_t applied;
    uint64_t maxlag, own_pushes, acked_own, pend_own;
    /* A JOIN in progress (PSRingTable_JoinBegin .. JoinEnd): 0 none, else
     * 1 + the pages copied so far; join_rows the rows they held. While it is
     * nonzero the table refuses pushes and ring traffic. */
    uint64_t joining, join_rows;
} PSRingTable;

/* Whether table 't' may be tracked: PS_RING_OK or the status. */
int PSRingTable_CanTrack(const PSEmbed *t);

/* A new tracked state (empty map) for table 't', or NULL (*st the status). */
PSRingTable *PSRingTable_New(const PSEmbed *t, const char *origin, size_t len, uint64_t maxqueue,
                             int *st);
void PSRingTable_Free(PSRingTable *r);
size_t PSRingTable_MemUsage(const PSRingTable *r);

static inline uint64_t PSRingTable_Lag(const PSRingTable *r) {
    return r ? r->own_pushes - r->acked_own : 0;
}
static inline int PSRingTable_LagFull(const PSRingTable *r) {
    return r && r->maxlag && PSRingTable_Lag(r) >= r->maxlag;
}

/* Before an own push of 'k' ids (little-endian u64, repeats allowed): every
 * id not in the map enters it with its current values (initial values when
 * the row does not exist). *mark receives the map size before, for
 * PSRingTable_AfterPush. PS_RING_OK or PS_RING_EOOM (nothing changed). */
int PSRingTable_BeforePush(PSRingTable *r, const PSEmbed *t, const unsigned char *ids, size_t k,
                           uint64_t *mark);
/* After the push: applied (own_pushes + 1), or not (the entries BeforePush
 * added are removed again, newest first: the map is exactly as before). */
void PSRingTable_AfterPush(PSRingTable *r, int applied, uint64_t mark);

/* The take (PSRingTakeOpts of ring.h; maxelems bounds rows). Outcomes as
 * PSRing_Take: PS_RING_TAKE_NEW / _AGAIN (r->pend), _NONE, _NONE_CAUGHTUP,
 * or -PS_RING_E*. */
int PSRingTable_Take(PSRingTable *r, const PSEmbed *t, const PSRingTakeOpts *o);
/* Map rows whose change is nonzero in some element. */
uint64_t PSRingTable_Accumulated(const PSRingTable *r, const PSEmbed *t);
int PSRingTable_Ack(PSRingTable *r, uint64_t seq);

/* Checks a delta of 'rows' rows: ids (rows LE u64) strictly ascending,
 * 'vlen' bytes of values == rows x dim x 4, finite. PS_RING_OK or status. */
int PSRingTable_CheckDelta(const PSRingTable *r, const unsigned char *ids, uint64_t rows,
                           const unsigned char *val, size_t vlen);
/* Applies a received delta (checked here too): 1 applied, 0 ignored, or
 * -status (nothing changed). */
int PSRingTable_Apply(PSRingTable *r, PSEmbed *t, const char *origin, size_t len, uint64_t seq,
                      uint64_t prev, const unsigned char *ids, uint64_t rows,
                      const unsigned char *val, size_t vlen, uint64_t hops);

const PSRingRows *PSRingTable_FwdPeek(const PSRingTable *r);
int PSRingTable_FwdAck(PSRingTable *r, const char *origin, size_t len, uint64_t seq);

/* The row 'id' of the map (its base, dim floats) or NULL. */
const float *PSRingTable_Base(const PSRingTable *r, uint64_t id);

/* ---- JOIN of a table: a paged copy of a neighbour's base view ----
 *
 * The base view of a tracked table: for a row in the map its base, for any
 * other row its values (PSRingTable_BaseView); of an untracked table its
 * values. It changes only when a delta is applied or a take is made (both
 * move STATE's marks), so pages of it read between two equal readings of
 * the marks are one consistent copy (docs/design.md "Ring state").
 *
 * JoinBegin: checks origin and FROM as PSRing_Join (every origin at most
 * once, at most PS_RING_MAX_ORIGINS others, seq <= PS_RING_MAX_SEQ); then
 * *tp := a new empty table of the same configuration (version = the old
 * version + 1; rows, filter, tombstones and push statistics start empty),
 * the ring state: map, pending take and forward queue cleared, marks :=
 * FROM, take_seq raised to a FROM naming 'origin' (never lowered), origin
 * := 'origin', lag zeroed (the own change is dropped), MAXQUEUE and MAXLAG
 * kept (a new state for an untracked table: 'maxqueue', no MAXLAG), and
 * joining := 1. A join in progress may begin again (restart).
 * JoinRows: page 'page' (0, 1, ... in order) of 'rows' rows: ids strictly
 * ascending and not yet in the table, rows x dim finite values; each row is
 * created with these values, push count 0, zero optimizer state; version +1.
 * JoinEnd: 'pages' and 'rows' must equal what the pages brought; joining
 * := 0. Each returns PS_RING_OK or the status (nothing changed). */
int PSRingTable_JoinBegin(PSRingTable **rp, PSEmbed **tp, const char *origin, size_t len,
                          const PSRingFrom *from, size_t nfrom, uint64_t maxqueue);
int PSRingTable_JoinRows(PSRingTable *r, PSEmbed *t, uint64_t page, const unsigned char *ids,
                         uint64_t rows, const unsigned char *val, size_t vlen);
int PSRingTable_JoinEnd(PSRingTable *r, uint64_t pages, uint64_t rows);
/* The base view of 'row' (dim floats): its base when in r's map, else its
 * values ('r' may be NULL: untracked). */
const float *PSRingTable_BaseView(const PSRingTable *r, const PSEmbedRow *row);

/* Serialization: every field, in a canonical byte layout (little-endian):
 *   "PSRT" u32 layout 1 | u32 dim | u32 originlen, origin | u64 take_seq,
 *   maxqueue, applied, maxlag, own_pushes, acked_own, pend_own |
 *   u64 norigins, each u32 len, name, u64 hwm, u64 applied |
 *   u64 n, each u64 id, dim F32 base |
 *   u64 pending (0 or 1) [delta] | u64 nfwd, each delta
 *   [layout 2 only (written while a JOIN is in progress): u64 joining,
 *   u64 join_rows]
 * delta: u32 originlen, origin, u64 seq, u64 hops, u64 rows, rows u64 ids,
 *   rows x dim F32.
 * The same state gives the same bytes (RDB, AOF rewrite, digest, copy). */
size_t PSRingTable_SerialSize(const PSRingTable *r);
void PSRingTable_Serialize(const PSRingTable *r, unsigned char *out);
/* Rebuilds a state for table 't' from 'len' bytes (hostile input: every
 * field validated). NULL with *why set. */
PSRingTable *PSRingTable_Deserialize(const PSEmbed *t, const unsigned char *p, size_t len,
                                     const char **why);
/* A deep copy (NULL on OOM). */
PSRingTable *PSRingTable_Clone(const PSRingTable *r, const PSEmbed *t);

#endif /* PS_RING_TABLE_H */
