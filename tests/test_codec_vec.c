/* test_codec_vec.c -- the vectorized codecs (common/codec.c, codec_topk.c)
 * give the scalar reference's bytes (common/codec_ref.c), bit for bit: the
 * module decodes pushes, so a master and its replicas must agree whatever
 * CPU each runs on.
 *
 * Two builds are checked against the reference: the library's (the best
 * clone of each loop for this CPU, F16C for F16 encoding, TOPK's AVX2
 * filter), and a copy of the same sources compiled into this test without
 * clones or intrinsics (names base_*), at -O3 like the library: by default
 * for the x86-64 baseline (SSE2); test_codec_vec_avx2.c and
 * test_codec_vec_avx512.c include this file to build it for AVX2 and for
 * x86-64-v4 instead (skipped on a CPU without them), so every clone another
 * machine might run is pinned here. Every comparison also covers the bytes
 * around the output (no write past the encoded size). */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "codec_ref.h"
#include "rng.h"

/* The copy, every public name prefixed base_, built for the target that
 * CODEC_COPY_BEGIN selects (none: the baseline). */
#ifndef CODEC_COPY_NAME
#define CODEC_COPY_NAME "x86-64 baseline"
#define CODEC_COPY_SUPPORTED() 1
#define CODEC_COPY_BEGIN _Pragma("GCC push_options") _Pragma("GCC optimize(\"O3\")")
#endif
#ifdef CODEC_COPY_KERNELS
#define PS_CODEC_NO_CLONES /* one build, intrinsic kernels kept */
#else
#define PS_CODEC_BASELINE_ONLY
#endif
CODEC_COPY_BEGIN
#define ps_format_parse base_format_parse
#define ps_format_name base_format_name
#define ps_dense_encoded_size base_dense_encoded_size
#define ps_f32_to_f16 base_f32_to_f16
#define ps_f16_to_f32 base_f16_to_f32
#define ps_f32_to_bf16 base_f32_to_bf16
#define ps_bf16_to_f32 base_bf16_to_f32
#define ps_encode base_encode
#define ps_decode base_decode
#define ps_encode_feedback base_encode_feedback
#define ps_rows_check base_rows_check
#define ps_rows_get base_rows_get
#define ps_topk_encoded_size base_topk_encoded_size
#define ps_topk_encode base_topk_encode
#define ps_topk_check base_topk_check
#define ps_topk_scatter_add base_topk_scatter_add
#include "codec.c"
#include "codec_topk.c"
_Pragma("GCC pop_options")
#undef ps_format_parse
#undef ps_format_name
#undef ps_dense_encoded_size
#undef ps_f32_to_f16
#undef ps_f16_to_f32
#undef ps_f32_to_bf16
#undef ps_bf16_to_f32
#undef ps_encode
#undef ps_decode
#undef ps_encode_feedback
#undef ps_rows_check
#undef ps_rows_get
#undef ps_topk_encoded_size
#undef ps_topk_encode
#undef ps_topk_check
#undef ps_topk_scatter_add

/* ------------------------------------------------------------ helpers */

/* The project's seeded generator, so every run tests the same values. */
static PSRng rng;

static uint64_t rnd(void) {
    return ps_rng_next(&rng);
}

static float from_bits(uint32_t b) {
    float x;
    memcpy(&x, &b, 4);
    return x;
}

/* A float of any class: mostly normal values over many binades, some zeros
 * of either sign, subnormals, infinities and NaNs with random payloads. */
static float any_float(void) {
    uint64_t r = rnd();
    uint32_t sign = (uint32_t)(r >> 63) << 31;
    switch (r % 16) {
    case 0: return from_bits(sign);
    case 1: return from_bits(sign | ((uint32_t)(r >> 8) & 0x7fffffu)); /* subnormal */
    case 2: return from_bits(sign | 0x7f800000u);
    case 3: return from_bits(sign | 0x7f800000u | (((uint32_t)(r >> 8) & 0x7fffffu) | 1u));
    case 4: return from_bits(sign | 0x38000000u | ((uint32_t)(r >> 8) & 0xffffffu)); /* f16 subnormal range */
    case 5: return from_bits(sign | 0x47000000u | ((uint32_t)(r >> 8) & 0xffffffu)); /* near 65504 */
    default: return ldexpf((float)((double)(r >> 11) / 9007199254740992.0), (int)(r % 60) - 40);
    }
}

#define GUARD 16

/* Encodes the 'n' floats at 'src' in format 'f' with the library, the
 * baseline copy and the reference, each into a buffer at an odd address
 * pre-filled with the same pattern, and asserts the three agree on the
 * encoding and the GUARD bytes after it. */
static void check_encode(ps_format f, const float *src, size_t n) {
    size_t len = ps_dense_encoded_size(f, n);
    if (n == 0) len = f == PS_FMT_I8 ? 4 : 0;
    unsigned char *ab = malloc(len + GUARD + 1), *bb = malloc(len + GUARD + 1);
    unsigned char *rb = malloc(len + GUARD + 1);
    assert_true(ab && bb && rb);
    memset(ab, 0xa5, len + GUARD + 1), memset(bb, 0xa5, len + GUARD + 1);
    memset(rb, 0xa5, len + GUARD + 1);
    unsigned char *a = ab + 1, *b = bb + 1, *r = rb + 1;
    ps_encode(f, src, n, a);
    base_encode(f, src, n, b);
    ps_encode_ref(f, src, n, r);
    assert_memory_equal(a, r, len + GUARD);
    assert_memory_equal(b, r, len + GUARD);
    free(ab), free(bb), free(rb);
}

/* Decodes the 'len' bytes at 'blob' as 'n' floats of format 'f' three ways
 * and asserts equal return codes and equal bits, guard floats included. */
static void check_decode(ps_format f, const unsigned char *blob, size_t len, size_t n) {
    size_t cnt = n + GUARD;
    float *a = malloc(cnt * 4), *b = malloc(cnt * 4), *r = malloc(cnt * 4);
    assert_true(a && b && r);
    memset(a, 0x5a, cnt * 4), memset(b, 0x5a, cnt * 4), memset(r, 0x5a, cnt * 4);
    int ra = ps_decode(f, blob, len, n, a);
    int rb = base_decode(f, blob, len, n, b);
    int rr = ps_decode_ref(f, blob, len, n, r);
    assert_int_equal(ra, rr);
    assert_int_equal(rb, rr);
    assert_memory_equal(a, r, cnt * 4);
    assert_memory_equal(b, r, cnt * 4);
    free(a), free(b), free(r);
}

/* Encodes a TOPK blob of the 'n' floats at 'src' with 'k' three ways and
 * asserts equal sizes and equal bytes, guard included. */
static void check_topk(const float *src, size_t n, uint32_t k) {
    size_t kk = k < n ? k : n;
    size_t len = ps_topk_encoded_size((uint32_t)kk) + GUARD;
    unsigned char *a = malloc(len), *b = malloc(len), *r = malloc(len);
    uint32_t *scratch = malloc((n + 1) * 4);
    assert_true(a && b && r && scratch);
    memset(a, 0xa5, len), memset(b, 0xa5, len), memset(r, 0xa5, len);
    size_t na = ps_topk_encode(src, n, k, a, scratch);
    size_t nb = base_topk_encode(src, n, k, b, scratch);
    size_t nr = ps_topk_encode_ref(src, n, k, r, scratch);
    assert_int_equal(na, nr);
    assert_int_equal(nb, nr);
    assert_memory_equal(a, r, len);
    assert_memory_equal(b, r, len);
    free(a), free(b), free(r), free(scratch);
}

/* ------------------------------------------------------- F16 and BF16 */

static void test_f16_bf16_encode_match_scalar_over_every_exponent_and_rounding_pattern(void **state) {
    (void)state;
    /* Every value of the top 19 bits (sign, exponent, top mantissa bits)
     * with low 13 bits that sit on, next to and half-way between F16
     * neighbours; ties of the dropped bits above bit 13 (subnormal halves,
     * BF16) come from the top bits with low bits 0. */
    static const uint32_t lows[] = {0, 1, 0x7ff, 0x800, 0xfff, 0x1000, 0x1001, 0x1fff};
    const size_t chunk = 1 << 16;
    float *x = malloc(chunk * 4);
    assert_non_null(x);
    for (uint32_t hi = 0; hi < (1u << 19); hi += (uint32_t)(chunk / 8)) {
        size_t n = 0;
        for (uint32_t h = hi; h < hi + chunk / 8; h++)
            for (size_t l = 0; l < 8; l++) x[n++] = from_bits((h << 13) | lows[l]);
        check_encode(PS_FMT_F16, x, n);
        check_encode(PS_FMT_BF16, x, n);
        for (size_t i = 0; i < n; i += 7) {
            assert_int_equal(ps_f32_to_f16(x[i]), ps_f32_to_f16_ref(x[i]));
            assert_int_equal(ps_f32_to_bf16(x[i]), ps_f32_to_bf16_ref(x[i]));
        }
    }
    free(x);
}

static void test_f16_bf16_decode_match_scalar_on_every_16_bit_pattern(void **state) {
    (void)state;
    unsigned char *blob = malloc(2 * 65536 + 1);
    assert_non_null(blob);
    for (uint32_t h = 0; h < 65536; h++) {
        uint16_t v = (uint16_t)h;
        memcpy(blob + 1 + 2 * h, &v, 2);
        float up = ps_f16_to_f32(v), ref = ps_f16_to_f32_ref(v);
        assert_memory_equal(&up, &ref, 4);
        up = ps_bf16_to_f32(v), ref = ps_bf16_to_f32_ref(v);
        assert_memory_equal(&up, &ref, 4);
    }
    check_decode(PS_FMT_F16, blob + 1, 2 * 65536, 65536);
    check_decode(PS_FMT_BF16, blob + 1, 2 * 65536, 65536);
    /* A signalling NaN half keeps its payload unquieted on the way up (the
     * wire's rule, which F16C hardware conversion would not follow). */
    float f = ps_f16_to_f32(0x7c01);
    uint32_t bits;
    memcpy(&bits, &f, 4);
    assert_int_equal(bits, 0x7f802000u);
    free(blob);
}

/* --------------------------------------------------------- all formats */

static void test_codecs_match_scalar_at_every_short_length_and_alignment(void **state) {
    (void)state;
    static const ps_format fmts[] = {PS_FMT_F16, PS_FMT_BF16, PS_FMT_I8};
    for (size_t n = 0; n <= 72; n++) {
        for (size_t off = 0; off < 4; off++) {
            /* Floats are aligned (the API takes float *); blobs and outputs
             * sit at every offset, as Redis arguments do. */
            float src[80];
            for (size_t i = 0; i < n; i++) src[i] = any_float();
            for (size_t fi = 0; fi < 3; fi++) {
                check_encode(fmts[fi], src, n);
                size_t len = ps_dense_encoded_size(fmts[fi], n);
                unsigned char blob[4 * 80 + 8];
                for (size_t i = 0; i < sizeof blob; i++) blob[i] = (unsigned char)rnd();
                check_decode(fmts[fi], blob + off, len, n);
                check_decode(fmts[fi], blob + off, len + 1, n); /* wrong length: -1 */
            }
        }
    }
}

/* ------------------------------------------------------------------ I8 */

static void test_i8_matches_scalar_on_scale_edge_cases(void **state) {
    (void)state;
    enum { N = 1000 };
    float *x = malloc(N * 4);
    assert_non_null(x);
    for (int c = 0; c < 14; c++) {
        for (size_t i = 0; i < N; i++) {
            float g = (float)((double)(rnd() >> 11) / 9007199254740992.0 - 0.5);
            switch (c) {
            case 0: x[i] = 0.0f; break;                            /* scale 0 */
            case 1: x[i] = -0.0f; break;
            case 2: x[i] = from_bits(1); break;                    /* scale underflows to 0 */
            case 3: x[i] = g * 1e-37f; break;                      /* subnormal scale, clamps */
            case 4: x[i] = i == 7 ? INFINITY : g; break;           /* scale inf: NaN ratio */
            case 5: x[i] = i == 9 ? NAN : g; break;                /* NaN ignored by the max */
            case 6: x[i] = i % 3 ? -NAN : -INFINITY; break;        /* nothing finite */
            case 7: x[i] = g * FLT_MAX; break;                     /* huge values */
            /* Ratios exactly half-way: max 127, others j + 0.5 (ties away). */
            case 8: x[i] = i == 0 ? 127.0f : (float)((int)(i % 255) - 127) + (i & 1 ? 0.5f : -0.5f); break;
            case 9: x[i] = any_float(); break;
            case 10: x[i] = i == 3 ? -FLT_MAX : g; break;
            /* Subnormals up to 190 units: the scale rounds to 1 unit and
             * ratios up to 190 must clamp to 127. */
            case 11: x[i] = from_bits((uint32_t)(rnd() % 191) | (i & 1 ? 0x80000000u : 0)); break;
            /* Scale 1 (max 127) and ratios one unit either side of every
             * half-integer, 0.5 - 2^-25 (whose + 0.5 rounds up) included. */
            case 12: {
                float h = (float)(i % 127) + 0.5f;
                uint32_t hb;
                memcpy(&hb, &h, 4);
                hb = hb - 1 + (uint32_t)((i / 127) % 3);
                x[i] = from_bits(hb | (i & 1 ? 0x80000000u : 0));
                if (i == 0) x[i] = 127.0f;
                if (i == 2) x[i] = from_bits(0x3effffffu);
                break;
            }
            default: x[i] = g * 1e-3f; break;
            }
        }
        for (size_t n = 1; n <= N; n = n * 3 + 1) check_encode(PS_FMT_I8, x, n);
        check_encode(PS_FMT_I8, x, N);
        /* And the decode of what was encoded, and of special scales. */
        unsigned char blob[4 + N];
        ps_encode_ref(PS_FMT_I8, x, N, blob);
        check_decode(PS_FMT_I8, blob, 4 + N, N);
        static const uint32_t scales[] = {0x7fc00001u, 0x7f800000u, 0xff800000u, 0x00000001u,
                                          0x80000000u, 0x7f7fffffu};
        memcpy(blob, &scales[c % 6], 4);
        check_decode(PS_FMT_I8, blob, 4 + N, N);
    }
    free(x);
}

/* ------------------------------------------------------- error feedback */

/* ps_encode_feedback (library and copy) against the three passes it replaces:
 * the reference's encode, decode into scratch, subtract. Same blob, same
 * residual bits, nothing written past either. */
static void check_feedback(ps_format f, const float *x, size_t n) {
    size_t len = ps_dense_encoded_size(f, n);
    if (n == 0) len = f == PS_FMT_I8 ? 4 : 0;
    unsigned char *want = malloc(len + GUARD), *got = malloc(len + GUARD);
    float *wr = malloc((n + GUARD) * 4), *gr = malloc((n + GUARD) * 4), *dec = malloc(n * 4 + 4);
    assert_true(want && got && wr && gr && dec);
    memset(want, 0xa5, len + GUARD);
    memcpy(wr, x, n * 4);
    memset(wr + n, 0x5a, GUARD * 4);
    ps_encode_ref(f, wr, n, want);
    assert_int_equal(ps_decode_ref(f, want, len, n, dec), 0);
    for (size_t i = 0; i < n; i++) wr[i] -= dec[i];
    for (int copy = 0; copy < 2; copy++) {
        memset(got, 0xa5, len + GUARD);
        memcpy(gr, x, n * 4);
        memset(gr + n, 0x5a, GUARD * 4);
        (copy ? base_encode_feedback : ps_encode_feedback)(f, gr, n, got);
        assert_memory_equal(got, want, len + GUARD);
        assert_memory_equal(gr, wr, (n + GUARD) * 4);
    }
    free(want), free(got), free(wr), free(gr), free(dec);
}

static void test_encode_feedback_matches_encode_decode_subtract(void **state) {
    (void)state;
    enum { N = 1000 };
    static const ps_format fmts[] = {PS_FMT_F32, PS_FMT_F16, PS_FMT_BF16, PS_FMT_I8};
    float *x = malloc(N * 4);
    assert_non_null(x);
    for (int c = 0; c < 3; c++) {
        for (size_t i = 0; i < N; i++) {
            float g = (float)((double)(rnd() >> 11) / 9007199254740992.0 - 0.5);
            x[i] = c == 0 ? any_float() : c == 1 ? g * 1e-3f : (float)((int)(i % 255) - 127) + 0.5f;
        }
        for (size_t fi = 0; fi < sizeof(fmts) / sizeof(fmts[0]); fi++)
            for (size_t n = 0; n <= N; n = n * 3 + 1) check_feedback(fmts[fi], x, n);
    }
    free(x);
}

/* ---------------------------------------------------------------- TOPK */

/* Fills 'x' with pattern 'c' (see the cases) of 'n' floats. */
static void fill_pattern(float *x, size_t n, int c) {
    for (size_t i = 0; i < n; i++) {
        float g = (float)((double)(rnd() >> 11) / 9007199254740992.0 - 0.5);
        switch (c) {
        case 0: x[i] = g; break;                                       /* distinct values */
        case 1: x[i] = (float)((int)(rnd() % 9) - 4); break;           /* massive ties */
        case 2: x[i] = i % 2 ? 0.0f : -0.0f; break;                    /* all zero, both signs */
        case 3: x[i] = i % 97 == 0 ? (i % 2 ? NAN : -INFINITY) : g; break;
        case 4: x[i] = (float)i; break;                                /* ascending */
        case 5: x[i] = (float)(n - i); break;                          /* descending */
        case 6: x[i] = i % 256 == 0 ? 100.0f + g : g; break;           /* spikes the sample sees */
        case 7: x[i] = i % 256 == 17 ? 100.0f + g : g * 1e-3f; break;  /* spikes it misses */
        case 8: x[i] = i % 4096 == 0 ? 1e30f : 1.0f; break;            /* ties at the bound */
        default: x[i] = any_float(); break;
        }
    }
}

static void test_topk_matches_scalar_for_every_k_class_and_data_shape(void **state) {
    (void)state;
    /* Sizes around the fast path's minimum (16384), odd sizes that leave a
     * tail after the 8-wide blocks, and a million. */
    static const size_t sizes[] = {1, 7, 1000, 16383, 16384, 16385, 100003, 1 << 20};
    float *x = malloc((1u << 20) * 4);
    assert_non_null(x);
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        size_t n = sizes[si];
        for (int c = 0; c < 10; c++) {
            if (n == (1u << 20) && c > 3) break; /* the big size: a few shapes suffice */
            fill_pattern(x, n, c);
            const uint32_t ks[] = {0, 1, 2, (uint32_t)(n / 100), (uint32_t)(n / 100) + 1,
                                   (uint32_t)(n / 20), (uint32_t)(n / 3),
                                   (uint32_t)(n - 1), (uint32_t)n, (uint32_t)n + 5};
            for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
                if (n == (1u << 20) && ks[ki] > n / 20) continue; /* the full selection: slow at this size */
                check_topk(x, n, ks[ki]);
            }
        }
    }
    free(x);
}

int main(void) {
    if (!(CODEC_COPY_SUPPORTED())) {
        printf("test_codec_vec: this CPU cannot run the %s copy: skipped\n", CODEC_COPY_NAME);
        return 0;
    }
    ps_rng_seed(&rng, 20261201);
    printf("test_codec_vec: library codecs and the %s copy against the scalar reference\n",
           CODEC_COPY_NAME);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16_bf16_encode_match_scalar_over_every_exponent_and_rounding_pattern),
        cmocka_unit_test(test_f16_bf16_decode_match_scalar_on_every_16_bit_pattern),
        cmocka_unit_test(test_codecs_match_scalar_at_every_short_length_and_alignment),
        cmocka_unit_test(test_i8_matches_scalar_on_scale_edge_cases),
        cmocka_unit_test(test_encode_feedback_matches_encode_decode_subtract),
        cmocka_unit_test(test_topk_matches_scalar_for_every_k_class_and_data_shape),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
