/* test_idlist.c -- the Elias-Fano id lists of IDFORMAT EF (common/idlist.c):
 * round trips (hashed ids, small ids, repeats, one id, the extremes, every
 * width), the size the plan promises, canonical bytes, and every malformed
 * class answered by its code with nothing written past the declared ids. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "idlist.h"

static uint64_t mix(uint64_t *z) {
    uint64_t x = (*z += 0x9e3779b97f4a7c15ULL);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Decodes 'blob' whole; the ids must equal 'want'. */
static void decodes_to(const unsigned char *blob, size_t len, const uint64_t *want, size_t n) {
    ps_idlist_hdr h;
    assert_int_equal(ps_idlist_header(blob, len, n, &h), PS_IDL_OK);
    assert_int_equal(h.n, n);
    uint64_t *out = malloc(sizeof(uint64_t) * (n + 1));
    out[n] = 0xdeadbeef; /* never written */
    assert_int_equal(ps_idlist_decode(blob, len, &h, out), PS_IDL_OK);
    assert_memory_equal(out, want, sizeof(uint64_t) * n);
    assert_true(out[n] == 0xdeadbeef);
    free(out);
}

/* Encodes sorted 'ids' with the plan, checks the size, decodes back. */
static void round_trip(const uint64_t *ids, size_t n) {
    uint64_t base;
    unsigned b;
    size_t size = ps_idlist_plan(ids, n, &base, &b);
    assert_true(size > 0);
    assert_true(base == ids[0]);
    unsigned char *blob = malloc(size + 1);
    assert_int_equal(ps_idlist_encode(ids, n, blob, size - 1), size); /* too small: nothing */
    assert_int_equal(ps_idlist_encode(ids, n, blob, size), size);
    decodes_to(blob, size, ids, n);
    /* the plan's high part holds at most about 3n bits (b minimizes the size) */
    assert_true(size <= 21 + ((size_t)n * b + 7) / 8 + (3 * n) / 8 + 1);
    /* every other width round-trips too, with its own size */
    for (unsigned k = 0; k < 64; k += 7) {
        size_t sk = ps_idlist_size_with(ids, n, base, k);
        if (sk == 0 || sk > (1u << 22)) continue;
        unsigned char *bk = malloc(sk);
        assert_int_equal(ps_idlist_encode_with(ids, n, base, k, bk, sk), sk);
        decodes_to(bk, sk, ids, n);
        assert_true(sk >= size); /* the plan picked the smallest */
        free(bk);
    }
    free(blob);
}

static void test_round_trips(void **state) {
    (void)state;
    enum { N = 5000 };
    static uint64_t ids[N];
    uint64_t z = 1;
    /* hashed 64-bit ids with a field tag in the top 8 bits (ps-gen-ctr's) */
    for (size_t i = 0; i < N; i++) ids[i] = ((i % 26) << 56) | (mix(&z) >> 8);
    qsort(ids, N, sizeof(uint64_t), cmp_u64);
    round_trip(ids, N);
    round_trip(ids, 17);
    /* small dense ids, with repeats */
    for (size_t i = 0; i < N; i++) ids[i] = mix(&z) % 20000;
    qsort(ids, N, sizeof(uint64_t), cmp_u64);
    round_trip(ids, N);
    /* all equal, one id, the extremes */
    for (size_t i = 0; i < 100; i++) ids[i] = 42;
    round_trip(ids, 100);
    ids[0] = UINT64_MAX;
    round_trip(ids, 1);
    ids[0] = 0;
    round_trip(ids, 1);
    ids[0] = 0, ids[1] = UINT64_MAX;
    round_trip(ids, 2);
    ids[0] = 0, ids[1] = 1, ids[2] = UINT64_MAX - 1, ids[3] = UINT64_MAX, ids[4] = UINT64_MAX;
    round_trip(ids, 5);
    /* consecutive ids: b = 0, two bits per id */
    for (size_t i = 0; i < 1000; i++) ids[i] = 1000000 + i;
    uint64_t base;
    unsigned b;
    assert_int_equal(ps_idlist_plan(ids, 1000, &base, &b), 2 + 3 + 1 + (2 * 1000 - 1) / 8 + 1);
    assert_int_equal(b, 0);
    round_trip(ids, 1000);
}

static void test_hashed_ids_cost_under_7_bytes(void **state) {
    (void)state;
    /* 400 hashed ids of 26 fields: EF ~ b + 2 bits, b ~ log2(26 * 2^56 / 400) */
    enum { N = 400 };
    uint64_t ids[N], z = 9, base;
    unsigned b;
    for (size_t i = 0; i < N; i++) ids[i] = ((i % 26) << 56) | (mix(&z) >> 8);
    qsort(ids, N, sizeof(uint64_t), cmp_u64);
    size_t size = ps_idlist_plan(ids, N, &base, &b);
    assert_true(size < 7 * N);
    assert_true(b >= 50 && b <= 54);
}

/* The status of decoding 'len' bytes at 'p' with bound 'max' (header, then
 * ids into a buffer of exactly n). */
static int status(const unsigned char *p, size_t len, uint64_t max) {
    ps_idlist_hdr h;
    int e = ps_idlist_header(p, len, max, &h);
    if (e != PS_IDL_OK) return e;
    uint64_t *out = malloc(sizeof(uint64_t) * h.n);
    e = ps_idlist_decode(p, len, &h, out);
    free(out);
    return e;
}

static void test_every_malformed_class(void **state) {
    (void)state;
    const uint64_t ids[5] = {1, 5, 9, 1000, 70000};
    unsigned char ok[64];
    size_t n = ps_idlist_encode(ids, 5, ok, sizeof(ok));
    assert_true(n > 0 && n < sizeof(ok));
    assert_int_equal(status(ok, n, 5), PS_IDL_OK);
    /* truncated: every proper prefix fails, never reads past it */
    for (size_t k = 0; k < n; k++) {
        unsigned char *cut = malloc(k ? k : 1);
        memcpy(cut, ok, k);
        assert_int_not_equal(status(cut, k, 5), PS_IDL_OK);
        free(cut);
    }
    assert_int_equal(status((const unsigned char *)"", 0, 5), PS_IDL_TRUNCATED);
    assert_int_equal(status((const unsigned char *)"\x80", 1, 5), PS_IDL_TRUNCATED);
    assert_int_equal(status((const unsigned char *)"\x05\x01", 2, 5), PS_IDL_TRUNCATED); /* no b */
    assert_int_equal(status((const unsigned char *)"\x05\x01\x10\x00", 4, 5), PS_IDL_TRUNCATED);
    /* overlong varints: 11 bytes, a 10th byte past bit 63, a redundant group */
    {
        unsigned char v[16] = {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01, 0x00, 0x00, 0x01};
        assert_int_equal(status(v, 14, 5), PS_IDL_OVERLONG);
        unsigned char w[14] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0x00, 0x00, 0x01};
        assert_int_equal(status(w, 13, UINT64_MAX), PS_IDL_OVERLONG);
        unsigned char x[5] = {0x85, 0x00, 0x01, 0x00, 0x1f};
        assert_int_equal(status(x, 5, 5), PS_IDL_OVERLONG);
        /* the largest count that fits, 2^64 - 1: a count error, not a varint one */
        w[9] = 0x01;
        assert_int_equal(status(w, 13, UINT64_MAX), PS_IDL_COUNT);
    }
    /* width above 63 */
    assert_int_equal(status((const unsigned char *)"\x01\x00\x40\x01", 4, 5), PS_IDL_WIDTH);
    /* count: 0, above the caller's bound, above what the blob can hold */
    assert_int_equal(status((const unsigned char *)"\x00\x00\x00\x01", 4, 5), PS_IDL_COUNT);
    assert_int_equal(status(ok, n, 4), PS_IDL_COUNT);
    assert_int_equal(status((const unsigned char *)"\x80\x08\x00\x00\xff", 5, UINT64_MAX), PS_IDL_COUNT);
    /* the high part (b 0, no low bits: bits 0, 2, 5, 10 of 0x25 0x04): fewer
     * ids, more ids, a trailing byte, a trailing bit */
    {
        const uint64_t t[4] = {1, 2, 4, 8};
        unsigned char m[32];
        size_t k = ps_idlist_encode_with(t, 4, 1, 0, m, sizeof(m));
        const unsigned char want[] = {0x04, 0x01, 0x00, 0x25, 0x04};
        assert_int_equal(k, sizeof(want));
        assert_memory_equal(m, want, k);
        assert_int_equal(status(m, k, 10), PS_IDL_OK);
        m[0] = 5;
        assert_int_equal(status(m, k, 10), PS_IDL_MISMATCH);
        m[0] = 3;
        assert_int_equal(status(m, k, 10), PS_IDL_MISMATCH);
        m[0] = 4;
        m[k] = 0;
        assert_int_equal(status(m, k + 1, 10), PS_IDL_MISMATCH);
        m[k] = 0x80;
        assert_int_equal(status(m, k + 1, 10), PS_IDL_MISMATCH);
        m[k - 1] |= 0x80;
        assert_int_equal(status(m, k, 10), PS_IDL_MISMATCH);
    }
    /* nonzero pad bits after the low part (3 ids x 3 bits: 7 pad bits) */
    {
        const uint64_t t[3] = {1, 2, 3};
        unsigned char m[32];
        size_t k = ps_idlist_encode_with(t, 3, 0, 3, m, sizeof(m));
        assert_int_equal(status(m, k, 3), PS_IDL_OK);
        m[3 + 1] |= 0x80;
        assert_int_equal(status(m, k, 3), PS_IDL_MISMATCH);
    }
    /* overflow past 2^64: base + value, and the high bits shifted past bit 63 */
    {
        const unsigned char a[] = {0x02, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x00, 0x09};
        assert_int_equal(status(a, sizeof(a), 2), PS_IDL_OVERFLOW);
        const unsigned char c[] = {0x01, 0x00, 63, 0, 0, 0, 0, 0, 0, 0, 0, 0x04};
        assert_int_equal(status(c, sizeof(c), 1), PS_IDL_OVERFLOW);
        const unsigned char d[] = {0x01, 0x00, 63, 0, 0, 0, 0, 0, 0, 0, 0, 0x02};
        assert_int_equal(status(d, sizeof(d), 1), PS_IDL_OK); /* h 1 at b 63: 2^63 */
        const unsigned char e[] = {0x01, 0x00, 63, 0, 0, 0, 0, 0, 0, 0, 0x80, 0x02};
        assert_int_equal(status(e, sizeof(e), 1), PS_IDL_MISMATCH); /* bit 63: padding */
    }
    /* low bits out of order within one high value: 3 then 1 at b 2 */
    {
        const unsigned char u[] = {0x02, 0x00, 0x02, 0x07, 0x03};
        assert_int_equal(status(u, sizeof(u), 2), PS_IDL_UNSORTED);
        const unsigned char v[] = {0x02, 0x00, 0x02, 0x0d, 0x03};
        assert_int_equal(status(v, sizeof(v), 2), PS_IDL_OK); /* 1 then 3 */
    }
    for (int e = 0; e < PS_IDL_NERRORS; e++) assert_true(strlen(ps_idlist_strerror(e)) > 0);
}

/* Random bytes never crash the decoder and a blob it accepts re-encodes to
 * the same bytes (with its base and width): the encoding is canonical. */
static void test_random_blobs_are_refused_or_canonical(void **state) {
    (void)state;
    uint64_t z = 77;
    unsigned char p[48], q[64];
    uint64_t out[8 * 48];
    int accepted = 0;
    for (int it = 0; it < 60000; it++) {
        size_t len = (size_t)(mix(&z) % sizeof(p));
        for (size_t i = 0; i < len; i++) p[i] = (unsigned char)mix(&z);
        if (len) p[0] &= 0x0f; /* small counts, so that some are accepted */
        if (len > 2) p[2] &= 0x0f;
        ps_idlist_hdr h;
        if (ps_idlist_header(p, len, 8 * 48, &h) != PS_IDL_OK) continue;
        if (ps_idlist_decode(p, len, &h, out) != PS_IDL_OK) continue;
        accepted++;
        assert_true(ps_idlist_sorted(out, h.n));
        assert_int_equal(ps_idlist_encode_with(out, h.n, h.base, h.b, q, sizeof(q)), len);
        assert_memory_equal(p, q, len);
    }
    assert_true(accepted > 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trips),
        cmocka_unit_test(test_hashed_ids_cost_under_7_bytes),
        cmocka_unit_test(test_every_malformed_class),
        cmocka_unit_test(test_random_blobs_are_refused_or_canonical),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
