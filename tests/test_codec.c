/* test_codec.c -- cmocka tests of common/codec.[ch]: format names, F16/BF16
 * conversions, dense round trips (F32/F16/BF16/I8), TOPK selection and
 * scatter-add, ROWS lists, unaligned blobs. */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"

/* The wire is little-endian and the codecs copy host bytes verbatim. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "host must be little-endian");

/* ------------------------------------------------------------ helpers */

/* Deterministic xorshift64* so every run tests the same values. */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rng_next(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}

/* Uniform float in [-1, 1). */
static float rng_unit(void) {
    return (float)((double)(rng_next() >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* A random float spread over many binades: unit * 2^[-30, 15]. */
static float rng_wide(void) {
    int e = (int)(rng_next() % 46) - 30;
    return ldexpf(rng_unit(), e);
}

static uint32_t bits_of(float x) {
    uint32_t b;
    memcpy(&b, &x, 4);
    return b;
}

static float float_of(uint32_t b) {
    float x;
    memcpy(&x, &b, 4);
    return x;
}

/* ------------------------------------------------------------ formats */

static void test_format_parse_accepts_every_name_in_any_case(void **state) {
    (void)state;
    static const struct { const char *s; ps_format f; } cases[] = {
        {"F32", PS_FMT_F32}, {"f32", PS_FMT_F32}, {"F16", PS_FMT_F16}, {"f16", PS_FMT_F16},
        {"BF16", PS_FMT_BF16}, {"bF16", PS_FMT_BF16}, {"I8", PS_FMT_I8}, {"i8", PS_FMT_I8},
        {"TOPK", PS_FMT_TOPK}, {"TopK", PS_FMT_TOPK},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ps_format f = (ps_format)99;
        assert_int_equal(ps_format_parse(cases[i].s, strlen(cases[i].s), &f), 0);
        assert_int_equal(f, cases[i].f);
    }
}

static void test_format_parse_rejects_unknown_names_and_prefixes(void **state) {
    (void)state;
    static const char *bad[] = {"", "F", "F3", "F32X", "FP32", "BF1", "I16", "TOP", "VALUES", "F64"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ps_format f = PS_FMT_I8;
        assert_int_equal(ps_format_parse(bad[i], strlen(bad[i]), &f), -1);
        assert_int_equal(f, PS_FMT_I8); /* untouched on failure */
    }
    /* The length bounds the comparison: "F32" followed by junk is not F32. */
    ps_format f;
    assert_int_equal(ps_format_parse("F32junk", 7, &f), -1);
    assert_int_equal(ps_format_parse("F32junk", 3, &f), 0);
    assert_int_equal(f, PS_FMT_F32);
}

static void test_format_name_is_the_parseable_upper_case_name(void **state) {
    (void)state;
    assert_string_equal(ps_format_name(PS_FMT_F32), "F32");
    assert_string_equal(ps_format_name(PS_FMT_F16), "F16");
    assert_string_equal(ps_format_name(PS_FMT_BF16), "BF16");
    assert_string_equal(ps_format_name(PS_FMT_I8), "I8");
    assert_string_equal(ps_format_name(PS_FMT_TOPK), "TOPK");
    assert_string_equal(ps_format_name((ps_format)42), "?");
    for (int f = PS_FMT_F32; f <= PS_FMT_TOPK; f++) {
        const char *name = ps_format_name((ps_format)f);
        ps_format back;
        assert_int_equal(ps_format_parse(name, strlen(name), &back), 0);
        assert_int_equal(back, f);
    }
}

static void test_dense_encoded_size_per_format(void **state) {
    (void)state;
    assert_int_equal(ps_dense_encoded_size(PS_FMT_F32, 10), 40);
    assert_int_equal(ps_dense_encoded_size(PS_FMT_F16, 10), 20);
    assert_int_equal(ps_dense_encoded_size(PS_FMT_BF16, 10), 20);
    assert_int_equal(ps_dense_encoded_size(PS_FMT_I8, 10), 14);
    assert_int_equal(ps_dense_encoded_size(PS_FMT_I8, 0), 4);
    assert_int_equal(ps_dense_encoded_size(PS_FMT_F32, 0), 0);
    assert_int_equal(ps_dense_encoded_size(PS_FMT_TOPK, 10), 0);
    /* Sizes that do not fit in size_t are reported as 0, never wrapped. */
    assert_int_equal(ps_dense_encoded_size(PS_FMT_F32, SIZE_MAX / 4 + 1), 0);
    assert_int_equal(ps_dense_encoded_size(PS_FMT_F16, SIZE_MAX / 2 + 1), 0);
    assert_int_equal(ps_dense_encoded_size(PS_FMT_I8, SIZE_MAX - 3), 0);
}

static void test_f32_wire_bytes_are_little_endian(void **state) {
    (void)state;
    float v[2] = {1.0f, -2.0f};
    unsigned char out[8];
    ps_encode(PS_FMT_F32, v, 2, out);
    static const unsigned char want[8] = {0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0xc0};
    assert_memory_equal(out, want, 8);
    unsigned char h[4];
    ps_encode(PS_FMT_F16, v, 2, h);
    static const unsigned char want16[4] = {0x00, 0x3c, 0x00, 0xc0};
    assert_memory_equal(h, want16, 4);
}

/* ---------------------------------------------------------------- F16 */

static void test_f16_encodes_known_bit_patterns(void **state) {
    (void)state;
    static const struct { float x; uint16_t h; } cases[] = {
        {1.0f, 0x3C00}, {-2.0f, 0xC000}, {0.5f, 0x3800}, {0.0f, 0x0000},
        {65504.0f, 0x7BFF},            /* largest half */
        {65519.99f, 0x7BFF},           /* just below the overflow tie */
        {65520.0f, 0x7C00},            /* tie at the top rounds to infinity */
        {1e6f, 0x7C00}, {-1e6f, 0xFC00},
        {0x1p-14f, 0x0400},            /* smallest normal */
        {0x1p-24f, 0x0001},            /* smallest subnormal */
        {0x1.ff8p-15f, 0x03FF},        /* largest subnormal */
        {0x1p-25f, 0x0000},            /* tie between 0 and 1 ulp: even is 0 */
        {0x1.000002p-25f, 0x0001},     /* just above the tie */
        {0x1.8p-24f, 0x0002},          /* tie between 1 and 2 ulps: even is 2 */
        {0x1.ffcp-15f, 0x0400},        /* subnormal rounding carries into the smallest normal */
        {1e-10f, 0x0000}, {-1e-10f, 0x8000},
        {0.1f, 0x2E66}, {0.33333334f, 0x3555},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        assert_int_equal(ps_f32_to_f16(cases[i].x), cases[i].h);
    assert_int_equal(ps_f32_to_f16(-0.0f), 0x8000);
    assert_int_equal(ps_f32_to_f16(INFINITY), 0x7C00);
    assert_int_equal(ps_f32_to_f16(-INFINITY), 0xFC00);
    assert_int_equal(ps_f32_to_f16(FLT_MAX), 0x7C00);
    assert_int_equal(ps_f32_to_f16(float_of(0x00000001)), 0x0000); /* f32 subnormal */
}

static void test_f16_rounds_to_nearest_even(void **state) {
    (void)state;
    /* 1 + 2^-11 is halfway between 0x3C00 and 0x3C01: the even one wins. */
    assert_int_equal(ps_f32_to_f16(1.0f + 0x1p-11f), 0x3C00);
    /* 1 + 3*2^-11 is halfway between 0x3C01 and 0x3C02. */
    assert_int_equal(ps_f32_to_f16(1.0f + 0x3p-11f), 0x3C02);
    /* Any bit past the halfway point rounds up. */
    assert_int_equal(ps_f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f), 0x3C01);
    assert_int_equal(ps_f32_to_f16(1.0f + 0x1p-11f - 0x1p-23f), 0x3C00);
    /* Mantissa carry into the exponent: 2 - 2^-12 rounds up to 2.0. */
    assert_int_equal(ps_f32_to_f16(2.0f - 0x1p-12f), 0x4000);
    assert_int_equal(ps_f32_to_f16(-(1.0f + 0x3p-11f)), 0xBC02);
}

static void test_f16_decodes_known_bit_patterns(void **state) {
    (void)state;
    assert_true(ps_f16_to_f32(0x3C00) == 1.0f);
    assert_true(ps_f16_to_f32(0xC000) == -2.0f);
    assert_true(ps_f16_to_f32(0x7BFF) == 65504.0f);
    assert_true(ps_f16_to_f32(0x0001) == 0x1p-24f);
    assert_true(ps_f16_to_f32(0x03FF) == 0x1.ff8p-15f);
    assert_true(ps_f16_to_f32(0x0400) == 0x1p-14f);
    assert_true(ps_f16_to_f32(0x8001) == -0x1p-24f);
    assert_true(isinf(ps_f16_to_f32(0x7C00)) && ps_f16_to_f32(0x7C00) > 0);
    assert_true(isinf(ps_f16_to_f32(0xFC00)) && ps_f16_to_f32(0xFC00) < 0);
    assert_int_equal(bits_of(ps_f16_to_f32(0x8000)), 0x80000000u); /* -0 keeps its sign */
    assert_int_equal(bits_of(ps_f16_to_f32(0x0000)), 0x00000000u);
    assert_true(isnan(ps_f16_to_f32(0x7E00)));
    assert_true(isnan(ps_f16_to_f32(0x7C01)));
}

static void test_f16_nan_stays_nan(void **state) {
    (void)state;
    /* Including a NaN whose payload sits only in bits a half drops. */
    static const uint32_t nans[] = {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0x7FBFFFFFu, 0xFF800001u};
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
        uint16_t h = ps_f32_to_f16(float_of(nans[i]));
        assert_int_equal(h & 0x7C00, 0x7C00);
        assert_true((h & 0x03FF) != 0);
        assert_true(h & 0x0200); /* quiet */
        assert_int_equal(h & 0x8000, (nans[i] >> 16) & 0x8000);
        assert_true(isnan(ps_f16_to_f32(h)));
    }
}

static void test_f16_every_half_survives_a_round_trip(void **state) {
    (void)state;
    for (uint32_t h = 0; h <= 0xFFFF; h++) {
        float x = ps_f16_to_f32((uint16_t)h);
        uint16_t back = ps_f32_to_f16(x);
        if ((h & 0x7C00) == 0x7C00 && (h & 0x03FF)) {
            assert_true(isnan(x));
            assert_int_equal(back, h | 0x0200); /* NaN comes back quiet, payload kept */
        } else {
            assert_int_equal(back, h);
        }
    }
}

/* For random finite floats, the chosen half is the nearest one, and on a
 * tie the even one: checked against both neighbours in exact double math. */
static void test_f16_picks_the_nearest_half_for_random_floats(void **state) {
    (void)state;
    for (int i = 0; i < 200000; i++) {
        float x = (i & 1) ? rng_wide() : float_of((uint32_t)rng_next() & 0xC7FFFFFFu);
        if (!isfinite(x) || fabsf(x) >= 65520.0f) continue;
        uint16_t h = ps_f32_to_f16(x);
        double d = fabs((double)x - (double)ps_f16_to_f32(h));
        uint16_t mag = h & 0x7FFF;
        uint16_t sign = h & 0x8000;
        if (mag < 0x7BFF) {
            double du = fabs((double)x - (double)ps_f16_to_f32((uint16_t)(sign | (mag + 1))));
            assert_true(d < du || (d == du && (h & 1) == 0));
        }
        if (mag > 0) {
            double dd = fabs((double)x - (double)ps_f16_to_f32((uint16_t)(sign | (mag - 1))));
            assert_true(d < dd || (d == dd && (h & 1) == 0));
        }
#ifdef __FLT16_MAX__
        /* The compiler's own conversion is an independent reference. */
        _Float16 ref = (_Float16)x;
        uint16_t rb;
        memcpy(&rb, &ref, 2);
        assert_int_equal(h, rb);
#endif
    }
}

/* --------------------------------------------------------------- BF16 */

static void test_bf16_encodes_known_bit_patterns(void **state) {
    (void)state;
    assert_int_equal(ps_f32_to_bf16(1.0f), 0x3F80);
    assert_int_equal(ps_f32_to_bf16(-2.0f), 0xC000);
    assert_int_equal(ps_f32_to_bf16(0.0f), 0x0000);
    assert_int_equal(ps_f32_to_bf16(-0.0f), 0x8000);
    assert_int_equal(ps_f32_to_bf16(INFINITY), 0x7F80);
    assert_int_equal(ps_f32_to_bf16(-INFINITY), 0xFF80);
    assert_int_equal(ps_f32_to_bf16(FLT_MAX), 0x7F80);  /* above the last tie: infinity */
    assert_int_equal(ps_f32_to_bf16(float_of(0x7F7F7FFFu)), 0x7F7F); /* below it: max bf16 */
    assert_int_equal(ps_f32_to_bf16(0.1f), 0x3DCD);
    assert_int_equal(ps_f32_to_bf16(float_of(0x00010000u)), 0x0001); /* subnormal */
    assert_int_equal(ps_f32_to_bf16(float_of(0x00008000u)), 0x0000); /* tie to even 0 */
    assert_int_equal(ps_f32_to_bf16(float_of(0x00018000u)), 0x0002); /* tie to even 2 */
}

static void test_bf16_rounds_to_nearest_even(void **state) {
    (void)state;
    assert_int_equal(ps_f32_to_bf16(float_of(0x3F808000u)), 0x3F80); /* tie, even below */
    assert_int_equal(ps_f32_to_bf16(float_of(0x3F818000u)), 0x3F82); /* tie, even above */
    assert_int_equal(ps_f32_to_bf16(float_of(0x3F808001u)), 0x3F81); /* just past the tie */
    assert_int_equal(ps_f32_to_bf16(float_of(0x3F807FFFu)), 0x3F80); /* just before it */
    assert_int_equal(ps_f32_to_bf16(float_of(0xBF818000u)), 0xBF82); /* sign does not matter */
    assert_int_equal(ps_f32_to_bf16(float_of(0x3FFF8000u)), 0x4000); /* carry into exponent */
}

static void test_bf16_nan_stays_a_quiet_nan(void **state) {
    (void)state;
    static const uint32_t nans[] = {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0x7FBFFFFFu, 0xFF80FFFFu};
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
        uint16_t h = ps_f32_to_bf16(float_of(nans[i]));
        assert_int_equal(h & 0x7F80, 0x7F80);
        assert_true(h & 0x0040);
        assert_int_equal(h & 0x8000, (nans[i] >> 16) & 0x8000);
        assert_true(isnan(ps_bf16_to_f32(h)));
    }
}

static void test_bf16_every_value_survives_a_round_trip(void **state) {
    (void)state;
    for (uint32_t h = 0; h <= 0xFFFF; h++) {
        float x = ps_bf16_to_f32((uint16_t)h);
        assert_int_equal(bits_of(x), h << 16); /* widening is exact */
        uint16_t back = ps_f32_to_bf16(x);
        if ((h & 0x7F80) == 0x7F80 && (h & 0x007F))
            assert_int_equal(back, h | 0x0040);
        else
            assert_int_equal(back, h);
    }
}

/* --------------------------------------------------- dense round trips */

/* Edge values every dense format must carry: signed zeros, subnormals of
 * both widths, extremes, infinities and NaN. */
static const float edge_values[] = {
    0.0f, -0.0f, 1.0f, -1.0f, 0x1p-24f, -0x1p-24f, 0x1p-14f, 65504.0f, -65504.0f,
    0x1p-149f /* f32 min subnormal */, 0x1p-126f, FLT_MAX, -FLT_MAX,
    1.0f + 0x1p-11f /* f16 tie */, 1.0f + 0x1p-8f /* bf16 tie */,
};

static void test_f32_round_trip_is_bit_exact(void **state) {
    (void)state;
    enum { N = 1000 };
    float src[N], back[N];
    for (int i = 0; i < N; i++) src[i] = float_of((uint32_t)rng_next()); /* any bits, NaNs too */
    for (size_t i = 0; i < sizeof edge_values / sizeof edge_values[0]; i++) src[i] = edge_values[i];
    src[100] = INFINITY;
    src[101] = -INFINITY;
    src[102] = NAN;
    unsigned char blob[4 * N];
    ps_encode(PS_FMT_F32, src, N, blob);
    assert_int_equal(ps_decode(PS_FMT_F32, blob, sizeof blob, N, back), 0);
    assert_memory_equal(src, back, sizeof src);
}

static void test_f16_and_bf16_round_trips_match_the_scalar_conversions(void **state) {
    (void)state;
    enum { N = 4096 };
    static float src[N], back[N];
    static unsigned char blob[2 * N];
    for (int i = 0; i < N; i++) src[i] = rng_wide();
    size_t ne = sizeof edge_values / sizeof edge_values[0];
    for (size_t i = 0; i < ne; i++) src[i] = edge_values[i];
    src[ne] = INFINITY;
    src[ne + 1] = -INFINITY;
    src[ne + 2] = NAN;

    ps_format fmts[2] = {PS_FMT_F16, PS_FMT_BF16};
    for (int f = 0; f < 2; f++) {
        ps_encode(fmts[f], src, N, blob);
        assert_int_equal(ps_decode(fmts[f], blob, 2 * N, N, back), 0);
        for (int i = 0; i < N; i++) {
            uint16_t h = fmts[f] == PS_FMT_F16 ? ps_f32_to_f16(src[i]) : ps_f32_to_bf16(src[i]);
            uint16_t wire;
            memcpy(&wire, blob + 2 * i, 2);
            assert_int_equal(wire, h);
            float want = fmts[f] == PS_FMT_F16 ? ps_f16_to_f32(h) : ps_bf16_to_f32(h);
            if (isnan(src[i])) {
                assert_true(isnan(back[i]));
                continue;
            }
            assert_int_equal(bits_of(back[i]), bits_of(want));
            assert_int_equal(signbit(back[i]) != 0, signbit(src[i]) != 0);
            /* Relative error of a normal result: half an ulp of the format. */
            float ax = fabsf(src[i]);
            if (fmts[f] == PS_FMT_F16 && ax >= 0x1p-14f && ax <= 65504.0f)
                assert_true(fabsf(back[i] - src[i]) <= ax * 0x1p-11f);
            if (fmts[f] == PS_FMT_BF16 && ax >= 0x1p-126f && ax <= 0x1.fep127f)
                assert_true(fabsf(back[i] - src[i]) <= ax * 0x1p-8f);
        }
        /* Signed zero, infinity and NaN survive both formats. */
        assert_int_equal(bits_of(back[1]), 0x80000000u);
        assert_true(isinf(back[ne]) && back[ne] > 0);
        assert_true(isinf(back[ne + 1]) && back[ne + 1] < 0);
        assert_true(isnan(back[ne + 2]));
    }
}

static void test_decode_rejects_wrong_lengths_and_writes_nothing(void **state) {
    (void)state;
    unsigned char blob[64] = {0};
    float dst[8];
    for (int f = PS_FMT_F32; f <= PS_FMT_I8; f++) {
        size_t good = ps_dense_encoded_size((ps_format)f, 8);
        for (int i = 0; i < 8; i++) dst[i] = 42.0f;
        assert_int_equal(ps_decode((ps_format)f, blob, good - 1, 8, dst), -1);
        assert_int_equal(ps_decode((ps_format)f, blob, good + 1, 8, dst), -1);
        assert_int_equal(ps_decode((ps_format)f, blob, 0, 8, dst), -1);
        for (int i = 0; i < 8; i++) assert_true(dst[i] == 42.0f);
        assert_int_equal(ps_decode((ps_format)f, blob, good, 8, dst), 0);
        assert_true(dst[0] == 0.0f);
    }
    /* I8 of zero elements is a bare scale; anything shorter is refused. */
    assert_int_equal(ps_decode(PS_FMT_I8, blob, 4, 0, dst), 0);
    assert_int_equal(ps_decode(PS_FMT_I8, blob, 0, 0, dst), -1);
    /* TOPK is not a dense format and an overflowing n is refused. */
    assert_int_equal(ps_decode(PS_FMT_TOPK, blob, 0, 0, dst), -1);
    assert_int_equal(ps_decode(PS_FMT_TOPK, blob, 12, 1, dst), -1);
    assert_int_equal(ps_decode(PS_FMT_F32, blob, 0, SIZE_MAX / 4 + 1, dst), -1);
}

/* Blobs point into Redis argument strings at any address: encode into and
 * decode from a buffer offset by one byte. */
static void test_codecs_handle_unaligned_blobs(void **state) {
    (void)state;
    enum { N = 257 };
    float src[N], back[N], ref[N];
    static unsigned char raw[4 * N + 16], aligned[4 * N + 16];
    for (int i = 0; i < N; i++) src[i] = rng_unit() * 3.0f;
    for (int f = PS_FMT_F32; f <= PS_FMT_I8; f++) {
        size_t sz = ps_dense_encoded_size((ps_format)f, N);
        unsigned char *odd = raw + 1;
        ps_encode((ps_format)f, src, N, odd);
        ps_encode((ps_format)f, src, N, aligned);
        assert_memory_equal(odd, aligned, sz);
        assert_int_equal(ps_decode((ps_format)f, odd, sz, N, back), 0);
        assert_int_equal(ps_decode((ps_format)f, aligned, sz, N, ref), 0);
        assert_memory_equal(back, ref, sizeof back);
    }
}

/* ----------------------------------------------------------------- I8 */

static float i8_scale_of(const unsigned char *blob) {
    float s;
    memcpy(&s, blob, 4);
    return s;
}

static void test_i8_error_is_at_most_half_a_step(void **state) {
    (void)state;
    enum { N = 2000 };
    static float src[N], back[N];
    static unsigned char blob[N + 4];
    for (int round = 0; round < 20; round++) {
        float mag = ldexpf(1.0f, (int)(rng_next() % 40) - 20);
        for (int i = 0; i < N; i++) src[i] = rng_unit() * mag;
        ps_encode(PS_FMT_I8, src, N, blob);
        assert_int_equal(ps_decode(PS_FMT_I8, blob, N + 4, N, back), 0);
        float scale = i8_scale_of(blob);
        float maxabs = 0;
        for (int i = 0; i < N; i++) maxabs = fmaxf(maxabs, fabsf(src[i]));
        assert_true(scale == maxabs / 127.0f);
        for (int i = 0; i < N; i++) {
            int8_t q;
            memcpy(&q, blob + 4 + i, 1);
            assert_true(q != -128); /* the clamp keeps the range symmetric */
            assert_true(back[i] == (float)q * scale);
            assert_true(fabsf(src[i] - back[i]) <= scale * 0.5f + scale * 1e-4f);
        }
    }
}

static void test_i8_maps_the_largest_magnitude_to_127(void **state) {
    (void)state;
    /* max 31.75 = 127 * 0.25, so the scale and every ratio below are exact. */
    float src[4] = {0.25f, -31.75f, 15.875f, 0.0f};
    unsigned char blob[8];
    ps_encode(PS_FMT_I8, src, 4, blob);
    assert_true(i8_scale_of(blob) == 0.25f);
    int8_t q[4];
    memcpy(q, blob + 4, 4);
    assert_int_equal(q[0], 1);
    assert_int_equal(q[1], -127);
    assert_int_equal(q[2], 64); /* 63.5 rounds away from zero */
    assert_int_equal(q[3], 0);
}

static void test_i8_rounds_half_away_from_zero(void **state) {
    (void)state;
    /* max 127 makes the scale exactly 1, so q is x rounded. */
    float src[] = {127.0f, 2.5f, -2.5f, 0.5f, -0.5f, 0.49999997f, -0.49999997f, 126.5f, 3.4999998f, -126.5f};
    enum { N = sizeof src / sizeof src[0] };
    unsigned char blob[N + 4];
    ps_encode(PS_FMT_I8, src, N, blob);
    assert_true(i8_scale_of(blob) == 1.0f);
    static const int8_t want[N] = {127, 3, -3, 1, -1, 0, 0, 127, 3, -127};
    assert_memory_equal(blob + 4, want, N);
}

/* With subnormal inputs the scale max/127 rounds coarsely and a ratio can
 * exceed 127.5; it must clamp to 127, never wrap to the byte of -128. */
static void test_i8_clamps_ratios_above_127_from_a_rounded_scale(void **state) {
    (void)state;
    float src[3] = {float_of(510), -float_of(511), float_of(2)}; /* 510, 511, 2 x 2^-149 */
    unsigned char blob[7];
    ps_encode(PS_FMT_I8, src, 3, blob);
    assert_int_equal(bits_of(i8_scale_of(blob)), 4); /* 510/127 = 4.02 rounds to 4 ulps */
    int8_t q[3];
    memcpy(q, blob + 4, 3);
    assert_int_equal(q[0], 127);
    assert_int_equal(q[1], -127);
    assert_int_equal(q[2], 1); /* 2/4 = 0.5 rounds away from zero */
}

static void test_i8_all_zero_input_has_zero_scale(void **state) {
    (void)state;
    float src[5] = {0.0f, -0.0f, 0.0f, 0.0f, 0.0f};
    unsigned char blob[9];
    memset(blob, 0xAB, sizeof blob);
    ps_encode(PS_FMT_I8, src, 5, blob);
    static const unsigned char zeros[9] = {0};
    assert_memory_equal(blob, zeros, 9);
    float back[5] = {1, 1, 1, 1, 1};
    assert_int_equal(ps_decode(PS_FMT_I8, blob, 9, 5, back), 0);
    for (int i = 0; i < 5; i++) assert_true(back[i] == 0.0f);
    /* n == 0: just a zero scale. */
    unsigned char empty[4] = {1, 2, 3, 4};
    ps_encode(PS_FMT_I8, src, 0, empty);
    assert_memory_equal(empty, zeros, 4);
}

static void test_i8_decode_reads_bytes_as_signed(void **state) {
    (void)state;
    unsigned char blob[4 + 4];
    float scale = 0.5f;
    memcpy(blob, &scale, 4);
    blob[4] = 0x81; /* -127 */
    blob[5] = 0xFF; /* -1 */
    blob[6] = 0x7F; /* 127 */
    blob[7] = 0x80; /* -128: never produced, still decoded as a number */
    float back[4];
    assert_int_equal(ps_decode(PS_FMT_I8, blob, 8, 4, back), 0);
    assert_true(back[0] == -63.5f);
    assert_true(back[1] == -0.5f);
    assert_true(back[2] == 63.5f);
    assert_true(back[3] == -64.0f);
}

static void test_i8_survives_nan_and_inf_input(void **state) {
    (void)state;
    float src[4] = {NAN, 0.5f, -31.75f, NAN};
    unsigned char blob[8];
    float back[4];
    ps_encode(PS_FMT_I8, src, 4, blob);
    assert_true(i8_scale_of(blob) == 0.25f); /* NaN ignored for the scale */
    int8_t q[4];
    memcpy(q, blob + 4, 4);
    assert_int_equal(q[0], 0);
    assert_int_equal(q[1], 2);
    assert_int_equal(q[2], -127);
    assert_int_equal(q[3], 0);

    float inf[3] = {INFINITY, 1.0f, -INFINITY};
    unsigned char b2[7];
    ps_encode(PS_FMT_I8, inf, 3, b2);
    assert_true(isinf(i8_scale_of(b2)));
    assert_int_equal(ps_decode(PS_FMT_I8, b2, 7, 3, back), 0);

    float allnan[2] = {NAN, NAN};
    unsigned char b3[6];
    ps_encode(PS_FMT_I8, allnan, 2, b3);
    assert_true(i8_scale_of(b3) == 0.0f);
}

/* --------------------------------------------------------------- TOPK */

/* Read entry j of a TOPK blob of k entries. */
static uint32_t topk_idx(const unsigned char *blob, size_t j) {
    uint32_t v;
    memcpy(&v, blob + 4 + 4 * j, 4);
    return v;
}

static float topk_val(const unsigned char *blob, uint32_t k, size_t j) {
    float v;
    memcpy(&v, blob + 4 + 4 * (size_t)k + 4 * j, 4);
    return v;
}

static uint32_t topk_k(const unsigned char *blob) {
    uint32_t k;
    memcpy(&k, blob, 4);
    return k;
}

static void test_topk_encoded_size_is_4_plus_8k(void **state) {
    (void)state;
    assert_int_equal(ps_topk_encoded_size(0), 4);
    assert_int_equal(ps_topk_encoded_size(3), 28);
    assert_true(ps_topk_encoded_size(UINT32_MAX) == 4 + 8 * (size_t)UINT32_MAX);
}

static void test_topk_picks_largest_magnitudes_in_index_order(void **state) {
    (void)state;
    float src[7] = {0.1f, -5.0f, 3.0f, 0.0f, -3.0f, 7.0f, 2.0f};
    uint32_t scratch[7];
    unsigned char blob[4 + 8 * 3];
    assert_int_equal(ps_topk_encode(src, 7, 3, blob, scratch), sizeof blob);
    assert_int_equal(topk_k(blob), 3);
    /* |-5|, |7| and the first of the tied |3| (index 2 beats index 4). */
    assert_int_equal(topk_idx(blob, 0), 1);
    assert_int_equal(topk_idx(blob, 1), 2);
    assert_int_equal(topk_idx(blob, 2), 5);
    assert_true(topk_val(blob, 3, 0) == -5.0f);
    assert_true(topk_val(blob, 3, 1) == 3.0f);
    assert_true(topk_val(blob, 3, 2) == 7.0f);
}

static void test_topk_ties_go_to_the_lower_index(void **state) {
    (void)state;
    float src[6] = {-0.0f, 0.0f, 0.0f, -0.0f, 0.0f, 0.0f};
    uint32_t scratch[6];
    unsigned char blob[4 + 8 * 4];
    ps_topk_encode(src, 6, 4, blob, scratch);
    for (uint32_t j = 0; j < 4; j++) assert_int_equal(topk_idx(blob, j), j);
    assert_int_equal(bits_of(topk_val(blob, 4, 0)), 0x80000000u); /* value kept verbatim */

    float mixed[5] = {2.0f, -2.0f, 1.0f, 2.0f, -2.0f};
    ps_topk_encode(mixed, 5, 2, blob, scratch);
    assert_int_equal(topk_idx(blob, 0), 0);
    assert_int_equal(topk_idx(blob, 1), 1);
}

static void test_topk_clamps_k_to_n_and_handles_k_zero(void **state) {
    (void)state;
    float src[4] = {1.0f, -4.0f, 2.0f, 0.5f};
    uint32_t scratch[4];
    unsigned char blob[4 + 8 * 4];
    assert_int_equal(ps_topk_encode(src, 4, 100, blob, scratch), 4 + 8 * 4);
    assert_int_equal(topk_k(blob), 4);
    for (uint32_t j = 0; j < 4; j++) {
        assert_int_equal(topk_idx(blob, j), j);
        assert_true(topk_val(blob, 4, j) == src[j]);
    }
    assert_int_equal(ps_topk_encode(src, 4, 0, blob, scratch), 4);
    assert_int_equal(topk_k(blob), 0);
    assert_int_equal(ps_topk_encode(src, 0, 5, blob, scratch), 4);
    assert_int_equal(topk_k(blob), 0);
}

static void test_topk_counts_nan_and_inf_as_largest(void **state) {
    (void)state;
    float src[5] = {1e30f, NAN, 5.0f, -INFINITY, 1e-3f};
    uint32_t scratch[5];
    unsigned char blob[4 + 8 * 2];
    ps_topk_encode(src, 5, 2, blob, scratch);
    assert_int_equal(topk_idx(blob, 0), 1);
    assert_int_equal(topk_idx(blob, 1), 3);
}

/* Reference ranking for qsort: larger magnitude first, then lower index. */
static const float *ref_src;

static int ref_cmp(const void *a, const void *b) {
    uint32_t ia = *(const uint32_t *)a, ib = *(const uint32_t *)b;
    float ma = fabsf(ref_src[ia]), mb = fabsf(ref_src[ib]);
    if (ma != mb) return ma > mb ? -1 : 1;
    return ia < ib ? -1 : (ia > ib);
}

static int u32_cmp(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : (x > y);
}

static void test_topk_matches_a_full_sort_on_random_inputs(void **state) {
    (void)state;
    enum { MAXN = 3000 };
    static float src[MAXN];
    static uint32_t scratch[MAXN], order[MAXN];
    static unsigned char blob[4 + 8 * MAXN + 1];
    for (int round = 0; round < 200; round++) {
        size_t n = 1 + rng_next() % MAXN;
        uint32_t k = (uint32_t)(rng_next() % (n + 2));
        int style = round % 4;
        for (size_t i = 0; i < n; i++) {
            if (style == 0) src[i] = rng_wide();
            else if (style == 1) src[i] = (float)((int)(rng_next() % 7) - 3); /* many ties */
            else if (style == 2) src[i] = 1.0f + (float)(rng_next() % 4) * 0x1p-23f; /* differ in the low byte */
            else src[i] = ldexpf(1.0f, (int)(rng_next() % 5)) * ((rng_next() & 1) ? -1.0f : 1.0f);
        }
        uint32_t kk = k > n ? (uint32_t)n : k;
        unsigned char *out = blob + (round & 1); /* aligned and unaligned */
        assert_int_equal(ps_topk_encode(src, n, k, out, scratch), 4 + 8 * (size_t)kk);
        assert_int_equal(topk_k(out), kk);

        for (size_t i = 0; i < n; i++) order[i] = (uint32_t)i;
        ref_src = src;
        qsort(order, n, sizeof order[0], ref_cmp);
        qsort(order, kk, sizeof order[0], u32_cmp);
        for (uint32_t j = 0; j < kk; j++) {
            assert_int_equal(topk_idx(out, j), order[j]);
            assert_int_equal(bits_of(topk_val(out, kk, j)), bits_of(src[order[j]]));
        }
    }
}

/* A large input: every unselected magnitude is no larger than every selected
 * one, and indices strictly increase. */
static void test_topk_selects_correctly_on_a_million_floats(void **state) {
    (void)state;
    size_t n = 1u << 20;
    uint32_t k = 10007;
    float *src = malloc(n * sizeof *src);
    uint32_t *scratch = malloc(n * sizeof *scratch);
    unsigned char *blob = malloc(ps_topk_encoded_size(k));
    char *chosen = calloc(n, 1);
    assert_non_null(src);
    assert_non_null(scratch);
    assert_non_null(blob);
    assert_non_null(chosen);
    for (size_t i = 0; i < n; i++) src[i] = rng_unit() * 1e-3f;
    ps_topk_encode(src, n, k, blob, scratch);
    float min_sel = INFINITY;
    for (uint32_t j = 0; j < k; j++) {
        uint32_t idx = topk_idx(blob, j);
        if (j) assert_true(idx > topk_idx(blob, j - 1));
        chosen[idx] = 1;
        min_sel = fminf(min_sel, fabsf(topk_val(blob, k, j)));
    }
    for (size_t i = 0; i < n; i++)
        if (!chosen[i]) assert_true(fabsf(src[i]) <= min_sel);
    free(src);
    free(scratch);
    free(blob);
    free(chosen);
}

static void test_topk_check_accepts_valid_blobs(void **state) {
    (void)state;
    float src[5] = {1, -2, 3, -4, 5};
    uint32_t scratch[5];
    unsigned char raw[1 + 4 + 8 * 3];
    unsigned char *blob = raw + 1; /* unaligned */
    size_t len = ps_topk_encode(src, 5, 3, blob, scratch);
    uint32_t k = 0;
    assert_int_equal(ps_topk_check(blob, len, 5, &k), 0);
    assert_int_equal(k, 3);
    unsigned char empty[4] = {0, 0, 0, 0};
    assert_int_equal(ps_topk_check(empty, 4, 5, &k), 0);
    assert_int_equal(k, 0);
}

static void test_topk_check_rejects_bad_lengths_and_indices(void **state) {
    (void)state;
    /* k = 2, indices {1, 4}, values {1, 2}: valid for n = 5. */
    unsigned char blob[20];
    uint32_t words[5] = {2, 1, 4, 0, 0};
    float one = 1.0f, two = 2.0f;
    memcpy(blob, words, 20);
    memcpy(blob + 12, &one, 4);
    memcpy(blob + 16, &two, 4);
    uint32_t k = 77;
    assert_int_equal(ps_topk_check(blob, 20, 5, &k), 0);
    assert_int_equal(ps_topk_check(blob, 20, 4, &k), -1); /* index 4 == n */
    assert_int_equal(ps_topk_check(blob, 19, 5, &k), -1);
    assert_int_equal(ps_topk_check(blob, 21, 5, &k), -1);
    assert_int_equal(ps_topk_check(blob, 3, 5, &k), -1);
    assert_int_equal(ps_topk_check(blob, 0, 5, &k), -1);
    /* A huge declared k must not wrap the length arithmetic. */
    uint32_t huge = UINT32_MAX;
    memcpy(blob, &huge, 4);
    assert_int_equal(ps_topk_check(blob, 20, 5, &k), -1);
    /* 8k wraps a 32-bit size to 0 (4 + 8k == 4 mod 2^32); with n = SIZE_MAX
     * every index would pass, so only the length check can refuse it. */
    huge = 0x20000000u;
    memcpy(blob, &huge, 4);
    assert_int_equal(ps_topk_check(blob, 4, SIZE_MAX, &k), -1);
    assert_int_equal(k, 2); /* untouched by the failures */
}

static void test_topk_scatter_add_accumulates_repeated_indices(void **state) {
    (void)state;
    /* k = 3: indices {2, 0, 2}, values {1, 2, 3.5}. */
    unsigned char raw[1 + 28];
    unsigned char *blob = raw + 1;
    uint32_t hdr[4] = {3, 2, 0, 2};
    float vals[3] = {1.0f, 2.0f, 3.5f};
    memcpy(blob, hdr, 16);
    memcpy(blob + 16, vals, 12);
    uint32_t k;
    assert_int_equal(ps_topk_check(blob, 28, 3, &k), 0);
    float dense[3] = {10.0f, 10.0f, 10.0f};
    ps_topk_scatter_add(blob, k, dense);
    assert_true(dense[0] == 12.0f);
    assert_true(dense[1] == 10.0f);
    assert_true(dense[2] == 14.5f);
}

static void test_topk_encode_then_scatter_rebuilds_the_kept_entries(void **state) {
    (void)state;
    enum { N = 500 };
    float src[N], dense[N];
    uint32_t scratch[N];
    static unsigned char raw[1 + 4 + 8 * N];
    for (int i = 0; i < N; i++) src[i] = rng_wide();
    unsigned char *blob = raw + 1;
    size_t len = ps_topk_encode(src, N, 50, blob, scratch);
    uint32_t k;
    assert_int_equal(ps_topk_check(blob, len, N, &k), 0);
    memset(dense, 0, sizeof dense);
    ps_topk_scatter_add(blob, k, dense);
    int kept = 0;
    for (int i = 0; i < N; i++) {
        if (dense[i] != 0.0f) {
            assert_true(dense[i] == src[i]);
            kept++;
        }
    }
    assert_int_equal(kept, 50);
}

/* ---------------------------------------------------------------- ROWS */

static void test_rows_check_accepts_valid_lists_and_counts_them(void **state) {
    (void)state;
    uint32_t rows[4] = {0, 9, 3, 9}; /* repeats are fine */
    unsigned char raw[17];
    memcpy(raw + 1, rows, 16);
    size_t count = 0;
    assert_int_equal(ps_rows_check(raw + 1, 16, 10, &count), 0);
    assert_int_equal(count, 4);
    assert_int_equal(ps_rows_get(raw + 1, 0), 0);
    assert_int_equal(ps_rows_get(raw + 1, 1), 9);
    assert_int_equal(ps_rows_get(raw + 1, 2), 3);
    /* Indices up to 2^32-1 are fine for a big enough table. */
    uint32_t big = UINT32_MAX;
    assert_int_equal(ps_rows_check((unsigned char *)&big, 4, (uint64_t)UINT32_MAX + 1, &count), 0);
    assert_int_equal(ps_rows_check((unsigned char *)&big, 4, UINT32_MAX, &count), -1);
}

static void test_rows_check_rejects_empty_odd_length_and_out_of_range(void **state) {
    (void)state;
    uint32_t rows[3] = {0, 10, 2};
    size_t count = 123;
    assert_int_equal(ps_rows_check((unsigned char *)rows, 0, 10, &count), -1);
    assert_int_equal(ps_rows_check((unsigned char *)rows, 3, 10, &count), -1);
    assert_int_equal(ps_rows_check((unsigned char *)rows, 6, 10, &count), -1);
    assert_int_equal(ps_rows_check((unsigned char *)rows, 12, 10, &count), -1); /* 10 == nrows */
    assert_int_equal(ps_rows_check((unsigned char *)rows, 4, 0, &count), -1);
    assert_int_equal(count, 123);
    assert_int_equal(ps_rows_check((unsigned char *)rows, 12, 11, &count), 0);
    assert_int_equal(count, 3);
}

static void test_rows_get_reads_little_endian_at_any_address(void **state) {
    (void)state;
    unsigned char raw[9] = {0xEE, 0x01, 0x02, 0x03, 0x04, 0xFF, 0xFF, 0xFF, 0x7F};
    assert_int_equal(ps_rows_get(raw + 1, 0), 0x04030201u);
    assert_int_equal(ps_rows_get(raw + 1, 1), 0x7FFFFFFFu);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_format_parse_accepts_every_name_in_any_case),
        cmocka_unit_test(test_format_parse_rejects_unknown_names_and_prefixes),
        cmocka_unit_test(test_format_name_is_the_parseable_upper_case_name),
        cmocka_unit_test(test_dense_encoded_size_per_format),
        cmocka_unit_test(test_f32_wire_bytes_are_little_endian),
        cmocka_unit_test(test_f16_encodes_known_bit_patterns),
        cmocka_unit_test(test_f16_rounds_to_nearest_even),
        cmocka_unit_test(test_f16_decodes_known_bit_patterns),
        cmocka_unit_test(test_f16_nan_stays_nan),
        cmocka_unit_test(test_f16_every_half_survives_a_round_trip),
        cmocka_unit_test(test_f16_picks_the_nearest_half_for_random_floats),
        cmocka_unit_test(test_bf16_encodes_known_bit_patterns),
        cmocka_unit_test(test_bf16_rounds_to_nearest_even),
        cmocka_unit_test(test_bf16_nan_stays_a_quiet_nan),
        cmocka_unit_test(test_bf16_every_value_survives_a_round_trip),
        cmocka_unit_test(test_f32_round_trip_is_bit_exact),
        cmocka_unit_test(test_f16_and_bf16_round_trips_match_the_scalar_conversions),
        cmocka_unit_test(test_decode_rejects_wrong_lengths_and_writes_nothing),
        cmocka_unit_test(test_codecs_handle_unaligned_blobs),
        cmocka_unit_test(test_i8_error_is_at_most_half_a_step),
        cmocka_unit_test(test_i8_maps_the_largest_magnitude_to_127),
        cmocka_unit_test(test_i8_rounds_half_away_from_zero),
        cmocka_unit_test(test_i8_clamps_ratios_above_127_from_a_rounded_scale),
        cmocka_unit_test(test_i8_all_zero_input_has_zero_scale),
        cmocka_unit_test(test_i8_decode_reads_bytes_as_signed),
        cmocka_unit_test(test_i8_survives_nan_and_inf_input),
        cmocka_unit_test(test_topk_encoded_size_is_4_plus_8k),
        cmocka_unit_test(test_topk_picks_largest_magnitudes_in_index_order),
        cmocka_unit_test(test_topk_ties_go_to_the_lower_index),
        cmocka_unit_test(test_topk_clamps_k_to_n_and_handles_k_zero),
        cmocka_unit_test(test_topk_counts_nan_and_inf_as_largest),
        cmocka_unit_test(test_topk_matches_a_full_sort_on_random_inputs),
        cmocka_unit_test(test_topk_selects_correctly_on_a_million_floats),
        cmocka_unit_test(test_topk_check_accepts_valid_blobs),
        cmocka_unit_test(test_topk_check_rejects_bad_lengths_and_indices),
        cmocka_unit_test(test_topk_scatter_add_accumulates_repeated_indices),
        cmocka_unit_test(test_topk_encode_then_scatter_rebuilds_the_kept_entries),
        cmocka_unit_test(test_rows_check_accepts_valid_lists_and_counts_them),
        cmocka_unit_test(test_rows_check_rejects_empty_odd_length_and_out_of_range),
        cmocka_unit_test(test_rows_get_reads_little_endian_at_any_address),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
