/* fuzz_ids.c -- libFuzzer harness for the IDFORMAT EF id lists
 * (common/idlist.c), the decoder PS.PULL / PS.PUSHGRAD ... IDS blob
 * IDFORMAT EF runs over what a client sends (module/args.c ids_arg).
 *
 * The first input byte picks the mode and the caller's bound:
 *   even: the rest is a blob, decoded as args.c does: the header with a
 *         bound max = 2^(byte/2 % 24) ids, then the ids into an array of
 *         exactly the declared count (ASan catches a write past it);
 *   odd:  the rest is a list of 8-byte ids, sorted, encoded with the plan
 *         and with a width from the second byte, and decoded back.
 * Invariants besides memory safety: an accepted blob declares 1..max ids,
 * at most 8 per byte; its ids are non-decreasing; re-encoding them with its
 * base and width gives its exact bytes (the encoding is canonical); any
 * list encodes to the size the plan promised and decodes to itself. */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "idlist.h"

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "invariant failed: %s (line %d)\n", #c, __LINE__);                     \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static void decode_blob(const uint8_t *p, size_t len, uint64_t max) {
    ps_idlist_hdr h;
    if (ps_idlist_header(p, len, max, &h) != PS_IDL_OK) return;
    CHECK(h.n >= 1 && h.n <= max && h.n / 8 <= len);
    CHECK(h.b <= 63 && h.low <= h.high && h.high <= len);
    uint64_t *out = malloc(sizeof(uint64_t) * h.n);
    CHECK(out != NULL);
    int e = ps_idlist_decode(p, len, &h, out);
    CHECK(e >= 0 && e < PS_IDL_NERRORS);
    if (e == PS_IDL_OK) {
        CHECK(ps_idlist_sorted(out, h.n));
        CHECK(out[0] >= h.base);
        CHECK(ps_idlist_size_with(out, h.n, h.base, h.b) == len);
        uint8_t *q = malloc(len);
        CHECK(ps_idlist_encode_with(out, h.n, h.base, h.b, q, len) == len);
        CHECK(memcmp(p, q, len) == 0);
        free(q);
    }
    free(out);
}

static void encode_list(const uint8_t *p, size_t len, unsigned bsel) {
    size_t n = len / 8;
    if (n == 0) return;
    uint64_t *ids = malloc(sizeof(uint64_t) * n), *back = malloc(sizeof(uint64_t) * n);
    memcpy(ids, p, 8 * n);
    qsort(ids, n, sizeof(uint64_t), cmp_u64);
    uint64_t base;
    unsigned b;
    size_t size = ps_idlist_plan(ids, n, &base, &b);
    CHECK(size > 0 && base == ids[0] && b <= 63);
    uint8_t *q = malloc(size);
    CHECK(ps_idlist_encode(ids, n, q, size) == size);
    ps_idlist_hdr h;
    CHECK(ps_idlist_header(q, size, n, &h) == PS_IDL_OK && h.n == n);
    CHECK(ps_idlist_decode(q, size, &h, back) == PS_IDL_OK);
    CHECK(memcmp(ids, back, 8 * n) == 0);
    free(q);
    /* another width: its own size (or 0 when unsizable), never smaller */
    unsigned k = bsel % 64;
    size_t sk = ps_idlist_size_with(ids, n, base, k);
    if (sk && sk <= (1u << 20)) {
        CHECK(sk >= size);
        q = malloc(sk);
        CHECK(ps_idlist_encode_with(ids, n, base, k, q, sk) == sk);
        CHECK(ps_idlist_header(q, sk, n, &h) == PS_IDL_OK);
        CHECK(ps_idlist_decode(q, sk, &h, back) == PS_IDL_OK);
        CHECK(memcmp(ids, back, 8 * n) == 0);
        free(q);
    }
    free(ids);
    free(back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FuzzIn in = {data, size};
    unsigned mode = fz_u8(&in);
    if (mode % 2 == 0) {
        decode_blob(in.p, in.len, (uint64_t)1 << (mode / 2 % 24));
    } else {
        unsigned bsel = fz_u8(&in);
        encode_list(in.p, in.len, bsel);
    }
    return 0;
}
