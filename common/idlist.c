/* idlist.c -- the Elias-Fano id lists of IDFORMAT EF (see idlist.h). */

#include "idlist.h"

#include <string.h>

/* ---------------------------------------------------------------- varints */

/* Reads a LEB128 varint at p[*at .. len). PS_IDL_OK (advances *at), or
 * PS_IDL_TRUNCATED / PS_IDL_OVERLONG. */
static int get_varint(const unsigned char *p, size_t len, size_t *at, uint64_t *v) {
    uint64_t x = 0;
    for (unsigned k = 0; k < 10; k++) {
        if (*at >= len) return PS_IDL_TRUNCATED;
        const unsigned char c = p[(*at)++];
        /* The 10th byte holds bit 63 only. */
        if (k == 9 && c > 1) return PS_IDL_OVERLONG;
        x |= (uint64_t)(c & 0x7f) << (7 * k);
        if (!(c & 0x80)) {
            if (k > 0 && c == 0) return PS_IDL_OVERLONG; /* a redundant last group */
            *v = x;
            return PS_IDL_OK;
        }
    }
    return PS_IDL_OVERLONG;
}

static size_t varint_size(uint64_t v) {
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static size_t put_varint(unsigned char *o, uint64_t v) {
    size_t n = 0;
    while (v >= 0x80) {
        o[n++] = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    o[n++] = (unsigned char)v;
    return n;
}

/* ---------------------------------------------------------------- header */

int ps_idlist_header(const unsigned char *p, size_t len, uint64_t max, ps_idlist_hdr *h) {
    size_t at = 0;
    int e;
    if ((e = get_varint(p, len, &at, &h->n)) != PS_IDL_OK) return e;
    if ((e = get_varint(p, len, &at, &h->base)) != PS_IDL_OK) return e;
    if (at >= len) return PS_IDL_TRUNCATED;
    h->b = p[at++];
    if (h->b > 63) return PS_IDL_WIDTH;
    /* Each id sets one bit of the high part: n <= 8 * len bounds what a
     * caller allocates by the blob's own size, besides its 'max'. */
    if (h->n == 0 || h->n > max || h->n / 8 > len) return PS_IDL_COUNT;
    const uint64_t lowbits = h->n * h->b; /* n <= 8 len: no overflow */
    const uint64_t lowbytes = (lowbits + 7) / 8;
    if (lowbytes > len - at) return PS_IDL_TRUNCATED;
    h->low = at;
    h->high = at + (size_t)lowbytes;
    return PS_IDL_OK;
}

/* ---------------------------------------------------------------- decode */

/* 8 bytes of p[0 .. len) from byte 'i', zeros past the end. */
static uint64_t load8(const unsigned char *p, size_t len, size_t i) {
    uint64_t w = 0;
    if (i + 8 <= len) {
        memcpy(&w, p + i, 8); /* little-endian host (codec.h) */
        return w;
    }
    for (size_t k = 0; i + k < len && k < 8; k++) w |= (uint64_t)p[i + k] << (8 * k);
    return w;
}

int ps_idlist_decode(const unsigned char *p, size_t len, const ps_idlist_hdr *h, uint64_t *out) {
    const unsigned b = h->b;
    const uint64_t n = h->n;
    const unsigned char *lo = p + h->low;
    const size_t lolen = len - h->low; /* the low bits, then the high part */
    const unsigned char *hp = p + h->high;
    const size_t hlen = len - h->high;
    const uint64_t mask = b ? (~0ULL >> (64 - b)) : 0;
    /* The pad bits of the low part's last byte are 0. */
    if ((n * b) % 8 && (p[h->high - 1] >> ((n * b) % 8)))
        return PS_IDL_MISMATCH;
    if (hlen == 0) return PS_IDL_MISMATCH;
    size_t chunk = 0; /* byte offset of the 8 high bytes in w */
    uint64_t w = load8(hp, hlen, 0);
    size_t pos = 0;
    uint64_t prev = 0, bit = 0;
    const uint64_t top = ~0ULL - h->base;    /* the largest id - base */
    const uint64_t himax = top >> b;         /* hi above it: past 2^64 - 1 */
    /* Ids whose 8 low bytes (9 when b > 56) lie inside the blob take the
     * plain unaligned load; the last few the bounded one. */
    const uint64_t fast = lolen >= 9 ? ((uint64_t)(lolen - 9) * 8) / (b ? b : 1) : 0;
    for (uint64_t i = 0; i < n; i++, bit += b) {
        while (w == 0) {
            chunk += 8;
            if (chunk >= hlen) return PS_IDL_MISMATCH; /* fewer ids than n */
            w = load8(hp, hlen, chunk);
        }
        pos = chunk * 8 + (size_t)__builtin_ctzll(w);
        w &= w - 1;
        const uint64_t hi = (uint64_t)pos - i; /* bits before pos: i of them */
        const size_t byte = (size_t)(bit / 8);
        const unsigned sh = (unsigned)(bit % 8);
        uint64_t low;
        if (i < fast) {
            memcpy(&low, lo + byte, 8); /* little-endian host (codec.h) */
            low >>= sh;
        } else {
            low = load8(lo, lolen, byte) >> sh;
        }
        if (sh + b > 64) low |= (uint64_t)lo[byte + 8] << (64 - sh);
        low &= mask;
        if (hi > himax) return PS_IDL_OVERFLOW;
        const uint64_t v = (hi << b) | low; /* hi <= himax: no bit lost */
        if (v > top) return PS_IDL_OVERFLOW;
        if (v < prev) return PS_IDL_UNSORTED;
        prev = v;
        out[i] = h->base + v;
    }
    /* The last set bit is in the last byte, and none follows it. */
    if (w != 0 || pos / 8 != hlen - 1) return PS_IDL_MISMATCH;
    return PS_IDL_OK;
}

const char *ps_idlist_strerror(int e) {
    switch (e) {
    case PS_IDL_OK: return "ok";
    case PS_IDL_TRUNCATED: return "truncated (a varint, the width byte or the low bits)";
    case PS_IDL_OVERLONG: return "overlong varint";
    case PS_IDL_WIDTH: return "low-bit width above 63";
    case PS_IDL_COUNT: return "id count 0, above the limit, or more than the blob holds";
    case PS_IDL_MISMATCH: return "the high bits do not hold exactly the declared ids";
    case PS_IDL_OVERFLOW: return "an id past 2^64-1";
    case PS_IDL_UNSORTED: return "ids out of order";
    default: return "unknown error";
    }
}

/* ---------------------------------------------------------------- encode */

int ps_idlist_sorted(const uint64_t *ids, size_t n) {
    for (size_t i = 1; i < n; i++)
        if (ids[i] < ids[i - 1]) return 0;
    return 1;
}

/* Bytes of the low and high parts for spread 's' (last - base) at width b,
 * or 0 when the high part cannot be sized. */
static uint64_t body_size(uint64_t n, uint64_t s, unsigned b) {
    const uint64_t top = s >> b; /* h of the last id */
    if (top >= (1ULL << 60) || n >= (1ULL << 56)) return 0;
    return (n * b + 7) / 8 + (top + n - 1) / 8 + 1;
}

size_t ps_idlist_size_with(const uint64_t *ids, size_t n, uint64_t base, unsigned b) {
    if (n == 0 || b > 63 || ids[0] < base) return 0;
    const uint64_t body = body_size(n, ids[n - 1] - base, b);
    if (body == 0) return 0;
    return varint_size(n) + varint_size(base) + 1 + (size_t)body;
}

size_t ps_idlist_plan(const uint64_t *ids, size_t n, uint64_t *base, unsigned *b) {
    *base = n ? ids[0] : 0;
    *b = 0;
    if (n == 0) return 0;
    const uint64_t s = ids[n - 1] - ids[0];
    uint64_t best = 0;
    for (unsigned k = 0; k < 64; k++) {
        const uint64_t body = body_size(n, s, k);
        if (body && (best == 0 || body < best)) {
            best = body;
            *b = k;
        }
    }
    return ps_idlist_size_with(ids, n, *base, *b);
}

/* ORs the low 'nb' bits of v into zeroed dst at bit 'at'. */
static void put_bits(unsigned char *dst, uint64_t at, uint64_t v, unsigned nb) {
    while (nb) {
        const size_t byte = (size_t)(at / 8);
        const unsigned sh = (unsigned)(at % 8);
        unsigned take = 8 - sh;
        if (take > nb) take = nb;
        dst[byte] |= (unsigned char)((v & ((1u << take) - 1)) << sh);
        v >>= take;
        nb -= take;
        at += take;
    }
}

size_t ps_idlist_encode_with(const uint64_t *ids, size_t n, uint64_t base, unsigned b,
                             unsigned char *out, size_t cap) {
    const size_t size = ps_idlist_size_with(ids, n, base, b);
    if (size == 0 || size > cap) return size;
    size_t at = put_varint(out, n);
    at += put_varint(out + at, base);
    out[at++] = (unsigned char)b;
    memset(out + at, 0, size - at);
    unsigned char *lo = out + at;
    unsigned char *hi = lo + ((uint64_t)n * b + 7) / 8;
    const uint64_t mask = b ? (~0ULL >> (64 - b)) : 0;
    /* The low parts through a 64-bit accumulator, 8 bytes at a time. */
    uint64_t acc = 0;
    unsigned nacc = 0; /* bits in acc, < 64 */
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        const uint64_t v = ids[i] - base;
        if (b) {
            const uint64_t low = v & mask;
            acc |= low << nacc;
            if (nacc + b >= 64) {
                memcpy(lo + o, &acc, 8); /* little-endian host (codec.h) */
                o += 8;
                const unsigned used = 64 - nacc; /* bits of low that fit */
                acc = used < 64 ? low >> used : 0;
                nacc = nacc + b - 64;
            } else {
                nacc += b;
            }
        }
        const uint64_t j = (v >> b) + i;
        hi[j / 8] |= (unsigned char)(1u << (j % 8));
    }
    if (nacc) put_bits(lo + o, 0, acc, nacc); /* the last, partial bytes */
    return size;
}

size_t ps_idlist_encode(const uint64_t *ids, size_t n, unsigned char *out, size_t cap) {
    uint64_t base;
    unsigned b;
    if (ps_idlist_plan(ids, n, &base, &b) == 0) return 0;
    return ps_idlist_encode_with(ids, n, base, b, out, cap);
}
