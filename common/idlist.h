/* idlist.h -- the compact id list of PS.PULL / PS.PUSHGRAD ... IDS blob
 * IDFORMAT EF (common/protocol.h PS_PROTO_ID_FORMATS; docs/commands.md
 * "Compressed id lists"): a non-decreasing list of uint64 ids, Elias-Fano
 * coded.
 *
 * Layout, byte by byte (LEB128 varints: 7 bits per byte, low group first,
 * high bit = more; at most 10 bytes, no redundant trailing 0x00 group):
 *   varint  n       number of ids, >= 1
 *   varint  base    the value every id is offset from (the encoder uses the
 *                   smallest id)
 *   byte    b       low bits per id, 0 .. 63
 *   low     n * b bits: id i's low b bits of (id_i - base) at bit i * b,
 *           least significant bit first, in ceil(n * b / 8) bytes, the pad
 *           bits of the last byte 0
 *   high    the rest of the blob: a bit vector (bit j of byte j / 8 at
 *           position j % 8) with bit h_i + i set for each id, h_i = (id_i -
 *           base) >> b; exactly n bits set, the last set bit in the last
 *           byte (no trailing byte), the bits after it 0.
 * A valid list is non-decreasing (duplicates allowed): the high values are
 * by construction, the low bits of ids with equal high values must be too.
 * The encoder picks b so that the high part holds at most 2n + 1
 * bits: about b + 2 bits per id, b = floor(log2(spread / n)).
 *
 * The encoding of a list with a given (base, b) is unique: a blob decodes
 * only when re-encoding its ids with its base and b gives the same bytes.
 *
 * Pure C11: no allocation, no Redis or hiredis header. Every function is
 * bounded by its input: the decoder reads only [p, p + len) and writes
 * only out[0 .. n). */
#ifndef PS_IDLIST_H
#define PS_IDLIST_H

#include <stddef.h>
#include <stdint.h>

/* Results of the decoder (0 is success). */
enum {
    PS_IDL_OK = 0,
    PS_IDL_TRUNCATED,  /* the blob ends inside a varint, the b byte or the low bits */
    PS_IDL_OVERLONG,   /* a varint longer than 10 bytes, past 2^64 - 1, or with a
                          redundant last group */
    PS_IDL_WIDTH,      /* b > 63 */
    PS_IDL_COUNT,      /* n is 0, above the caller's bound, or more than the blob
                          could hold (one bit per id at least) */
    PS_IDL_MISMATCH,   /* the high part holds fewer or more than n ids, or
                          trailing bytes / nonzero pad bits */
    PS_IDL_OVERFLOW,   /* an id past 2^64 - 1 */
    PS_IDL_UNSORTED,   /* an id below the one before (low bits out of order within
                          a high value) */
    PS_IDL_NERRORS
};

/* The header of a blob: what ps_idlist_decode needs, found and checked
 * without touching the ids. */
typedef struct ps_idlist_hdr {
    uint64_t n;        /* ids */
    uint64_t base;
    unsigned b;        /* low bits per id */
    size_t low;        /* offset of the low bits in the blob */
    size_t high;       /* offset of the high part (its end is the blob's) */
} ps_idlist_hdr;

/* Reads and checks the header of 'len' bytes at 'p': n >= 1 and n <= 'max'
 * and the low part within the blob. PS_IDL_OK, or the error. Reads at most
 * 21 bytes; allocates nothing: a caller sizes its output by h->n (<= max). */
int ps_idlist_header(const unsigned char *p, size_t len, uint64_t max, ps_idlist_hdr *h);

/* Decodes the ids of a blob whose header 'h' ps_idlist_header accepted
 * into out[0 .. h->n). PS_IDL_OK, or the error (out then holds garbage).
 * Time is linear in len + n. */
int ps_idlist_decode(const unsigned char *p, size_t len, const ps_idlist_hdr *h, uint64_t *out);

/* A short message of decoder result 'e' ("truncated varint or low bits"). */
const char *ps_idlist_strerror(int e);

/* The encoder's choice for 'n' >= 1 non-decreasing ids: base = ids[0] and
 * b, and the encoded size in bytes. */
size_t ps_idlist_plan(const uint64_t *ids, size_t n, uint64_t *base, unsigned *b);

/* Size in bytes of the encoding of non-decreasing 'ids' ('n' >= 1, every id
 * >= 'base', b <= 63), or 0 when (id - base) >> b is too large to size
 * (never for the encoder's own plan). */
size_t ps_idlist_size_with(const uint64_t *ids, size_t n, uint64_t base, unsigned b);

/* Encodes non-decreasing 'ids' ('n' >= 1, each >= base, b <= 63) into
 * 'out' (room 'cap'). Returns the size; writes nothing when it exceeds
 * 'cap' (or 0 when ps_idlist_size_with is 0). */
size_t ps_idlist_encode_with(const uint64_t *ids, size_t n, uint64_t base, unsigned b,
                             unsigned char *out, size_t cap);

/* ps_idlist_plan + ps_idlist_encode_with. */
size_t ps_idlist_encode(const uint64_t *ids, size_t n, unsigned char *out, size_t cap);

/* 1 when ids[0 .. n) is non-decreasing. */
int ps_idlist_sorted(const uint64_t *ids, size_t n);

#endif /* PS_IDLIST_H */
