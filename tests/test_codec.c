/* test_codec.c -- cmocka tests of common/codec.[ch]: format names, F16/BF16
 * conversions, dense round trips (F32/F16/BF16/I8), unaligned blobs (TOPK
 * and ROWS: test_codec_topk.c). */

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
#include "codec_helpers.h"

/* The wire is little-endian and the codecs copy host bytes verbatim. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "host must be little-endian");

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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
