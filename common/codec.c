/* codec.c -- wire codecs shared by the Redis module and the client.
 *
 * Pure C over caller-provided buffers: no allocation, no Redis, no libm.
 * Blobs may be unaligned, so every multi-byte load/store is a memcpy (the
 * compiler turns each into a single move on x86-64 and arm64). The host is
 * little-endian (checked at compile time in codec.h), so the wire's byte
 * order is the host's and no byte swapping is needed. */

#include "fpguard.h" /* first: determinism guards */
#include "codec.h"
#include "codec_bits.h"

#include <string.h>

_Static_assert(sizeof(float) == 4, "float must be IEEE binary32");
_Static_assert(sizeof(uint32_t) == 4 && sizeof(uint16_t) == 2, "fixed-width types");

/* ASCII-only lower-casing, independent of the C locale. */
static inline char ascii_lower(char c) {
    return (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
}

/* ================================================================= formats */

/* The names are those of PS_PROTO_FORMATS (protocol.h). */
static const char *const format_names[PS_FMT_COUNT] = {
#define PS_FMT_NAME_(ID, dense, table) [PS_FMT_##ID] = #ID,
    PS_PROTO_FORMATS(PS_FMT_NAME_, PS_FMT_NAME_)
#undef PS_FMT_NAME_
};
#define PS_NFORMATS ((size_t)PS_FMT_COUNT)

/* 1 when the 'len' bytes at 's' equal 'name' ignoring ASCII case. */
static int name_eq_nocase(const char *s, size_t len, const char *name) {
    size_t nl = strlen(name);
    if (len != nl) return 0;
    for (size_t i = 0; i < len; i++)
        if (ascii_lower(s[i]) != ascii_lower(name[i])) return 0;
    return 1;
}

int ps_format_parse(const char *s, size_t len, ps_format *out) {
    if (s == NULL) return -1;
    for (size_t i = 0; i < PS_NFORMATS; i++) {
        if (name_eq_nocase(s, len, format_names[i])) {
            *out = (ps_format)i;
            return 0;
        }
    }
    return -1;
}

const char *ps_format_name(ps_format f) {
    if ((unsigned)f >= PS_NFORMATS) return "?";
    return format_names[f];
}

size_t ps_dense_encoded_size(ps_format f, size_t n) {
    switch (f) {
    case PS_FMT_F32:
        return n > SIZE_MAX / 4 ? 0 : n * 4;
    case PS_FMT_F16:
    case PS_FMT_BF16:
        return n > SIZE_MAX / 2 ? 0 : n * 2;
    case PS_FMT_I8:
        return n > SIZE_MAX - 4 ? 0 : n + 4;
    default:
        return 0;
    }
}

/* ================================================== element conversions
 *
 * Each conversion is written branch-free, as whole-lane integer operations and
 * selects, so the loops below vectorize: every lane computes every case and
 * a mask keeps the right one. The results are bit-identical to the branchy
 * scalar reference (codec_ref.c), which the tests and the fuzz harness check
 * on every edge case (NaN payloads, infinities, subnormals, ties, overflow).
 * On AVX2 CPUs F16 goes through the F16C instructions instead (below), with
 * the one fix-up they need to give the same bits (signalling NaNs up). */

/* All ones when 'c' is true, else zero. The callers compare magnitudes
 * (bits < 2^31) as int32: x86 has signed vector compares only, and GCC
 * cannot tell that an unsigned compare of such values needs no fix-up. */
static inline uint32_t mask_if(int c) {
    return (uint32_t)0 - (uint32_t)(c != 0);
}

/* binary32 bits 'b' -> binary16 bits: round to nearest even, overflow to
 * infinity, subnormals exact, NaN quiet with its top payload bits. */
static inline uint32_t f16_from_bits(uint32_t b) {
    uint32_t sign = (b >> 16) & 0x8000u;
    uint32_t a = b & 0x7fffffffu; /* |x| as bits: ordered like the values */
    /* |x| >= 65536, inf or NaN: infinity, or a quiet NaN keeping the top
     * payload bits (the quiet bit guarantees a non-zero mantissa). */
    uint32_t big = 0x7c00u | ((0x0200u | ((a >> 13) & 0x3ffu)) & mask_if((int32_t)a > 0x7f800000));
    /* |x| < 2^-14: a half subnormal or zero. Floats in [0.5, 1) are spaced
     * exactly 2^-24 apart, so adding 0.5 rounds |x| to the half-subnormal
     * grid, ties to even, in the FPU's default rounding mode (which nothing
     * in Redis or the client changes); the count of 2^-24 steps above 0.5 is
     * the half's bits, 1024 being correctly the smallest normal. Computed on
     * every lane: for large |x| the sum is discarded by the select below. */
    float f;
    memcpy(&f, &a, sizeof f);
    f += 0.5f;
    uint32_t fb;
    memcpy(&fb, &f, sizeof fb);
    uint32_t tiny = fb - 0x3f000000u;
    /* Normal half: rebias the exponent (127 -> 15) and round the 13 dropped
     * mantissa bits to nearest even. A carry out of the mantissa bumps the
     * exponent, which is exactly right, and 65520 up to 65535.99 lands on
     * 0x7c00, infinity. Wraps harmlessly for the lanes the select drops. */
    uint32_t r = a - (112u << 23);
    r += 0xfffu + ((r >> 13) & 1u);
    uint32_t normal = r >> 13;
    uint32_t m_big = mask_if((int32_t)a >= 0x47800000), m_tiny = mask_if((int32_t)a < 0x38800000);
    uint32_t h = (big & m_big) | (tiny & m_tiny) | (normal & ~(m_big | m_tiny));
    return sign | h;
}

/* binary16 bits 'h' (in the low 16 bits) -> binary32 bits; exact, NaN
 * payloads kept as they are (a signalling NaN stays signalling). */
static inline uint32_t f16_to_bits(uint32_t h) {
    uint32_t sign = (h & 0x8000u) << 16;
    uint32_t em = (h & 0x7fffu) << 13; /* exponent and mantissa in f32 position */
    uint32_t exp = em & 0x0f800000u;
    /* Zero or subnormal (mant * 2^-24): 2^-14 + mant * 2^-24 built as a normal
     * f32 minus 2^-14; the difference is exact. */
    uint32_t sb = em | (113u << 23);
    float f;
    memcpy(&f, &sb, sizeof f);
    f -= 0x1p-14f;
    uint32_t sub;
    memcpy(&sub, &f, sizeof sub);
    uint32_t m_special = mask_if(exp == 0x0f800000u), m_sub = mask_if(exp == 0);
    uint32_t b = ((em | 0x7f800000u) & m_special) | (sub & m_sub) |
                 ((em + (112u << 23)) & ~(m_special | m_sub));
    return sign | b;
}

/* binary32 bits -> bfloat16 bits: round to nearest even on the 16 dropped
 * bits (the largest finite values round up to infinity, as IEEE requires);
 * NaN keeps its top bits with the quiet bit forced (so it cannot round into
 * infinity). */
static inline uint32_t bf16_from_bits(uint32_t b) {
    uint32_t nan = (b >> 16) | 0x0040u;
    uint32_t rounded = (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
    uint32_t m_nan = mask_if((int32_t)(b & 0x7fffffffu) > 0x7f800000);
    return (nan & m_nan) | (rounded & ~m_nan); /* both fit in 16 bits */
}

uint16_t ps_f32_to_f16(float x) {
    return (uint16_t)f16_from_bits(f32_bits(x));
}

float ps_f16_to_f32(uint16_t h) {
    return bits_f32(f16_to_bits(h));
}

uint16_t ps_f32_to_bf16(float x) {
    return (uint16_t)bf16_from_bits(f32_bits(x));
}

float ps_bf16_to_f32(uint16_t h) {
    return bits_f32((uint32_t)h << 16);
}

/* ================================================================ kernels
 *
 * The loops are built for AVX-512 (x86-64-v4), AVX2 and the x86-64 baseline
 * (SSE2), picked at load time like the optimizer kernels (module/core/optim.c),
 * and compiled with -O3 (Makefile) so the vectorizer runs. Vectorizing
 * integer operations and IEEE-exact float adds, divides and conversions in
 * lanes does not change any result, so every build computes the scalar
 * reference's bits. PS_CODEC_BASELINE_ONLY (tests/test_codec_vec*.c) builds
 * a copy without clones or hardware conversions, to test those paths too;
 * clang builds (the fuzz harnesses) go without them as well (clang 14 has
 * no target_clones nor an "f16c" CPU check). PS_CODEC_NO_CLONES
 * (bench/codec_bench_avx2.c) keeps the hardware conversions but builds the
 * loops once, for the target of the including file. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(PS_CODEC_BASELINE_ONLY)
#define PS_CODEC_X86 1
#include <immintrin.h>
#ifdef PS_CODEC_NO_CLONES
#define PS_CODEC_KERNEL
#else
#define PS_CODEC_KERNEL __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#endif
#else
#define PS_CODEC_KERNEL
#endif

PS_CODEC_KERNEL static void encode_f16_loop(const float *restrict src, size_t n,
                                            unsigned char *restrict dst) {
    for (size_t i = 0; i < n; i++)
        store_u16(dst + 2 * i, (uint16_t)f16_from_bits(f32_bits(src[i])));
}

#ifdef PS_CODEC_X86
/* F16C's conversion down, with the rounding given in the instruction
 * (nearest even, whatever MXCSR says), computes the wire's bits for every
 * binary32 value: overflow to infinity, subnormal halves, and NaN quieted
 * with its top payload bits kept, as f16_from_bits does (checked on all 2^32
 * inputs when this was written, and by the tests on every exponent and tie
 * pattern). */
__attribute__((target("avx2,f16c"))) static void encode_f16_f16c(const float *src, size_t n,
                                                                   unsigned char *dst) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(src + i);
        __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm_storeu_si128((__m128i *)(void *)(dst + 2 * i), h);
    }
    encode_f16_loop(src + i, n - i, dst + 2 * i);
}
#endif

static void encode_f16(const float *src, size_t n, unsigned char *dst) {
#ifdef PS_CODEC_X86
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c")) {
        encode_f16_f16c(src, n, dst);
        return;
    }
#endif
    encode_f16_loop(src, n, dst);
}

PS_CODEC_KERNEL static void decode_f16_loop(const unsigned char *restrict src, size_t n,
                                            float *restrict dst) {
    for (size_t i = 0; i < n; i++) dst[i] = bits_f32(f16_to_bits(load_u16(src + 2 * i)));
}

#ifdef PS_CODEC_X86
/* F16C's conversion up is exact for every half but a signalling NaN, which
 * it quiets (sets the f32 quiet bit, 1 << 22) where the wire keeps the
 * payload as it is: that bit is put back to the half's own quiet bit
 * (1 << 9) in NaN lanes. Checked on all 65536 halves by the tests. */
__attribute__((target("avx2,f16c"))) static inline __m256 f16c_up(__m128i h) {
    const __m256i absmask = _mm256_set1_epi32(0x7fff);
    const __m256i infbits = _mm256_set1_epi32(0x7c00);
    const __m256i quiet = _mm256_set1_epi32(0x00400000);
    __m256i f = _mm256_castps_si256(_mm256_cvtph_ps(h));
    __m256i hw = _mm256_cvtepu16_epi32(h);
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(hw, absmask), infbits);
    /* NaN lanes whose half had the quiet bit clear: clear it again. */
    __m256i fix = _mm256_andnot_si256(_mm256_slli_epi32(hw, 13), _mm256_and_si256(nan, quiet));
    return _mm256_castsi256_ps(_mm256_xor_si256(f, fix));
}

__attribute__((target("avx2,f16c"))) static void decode_f16_f16c(const unsigned char *src,
                                                                   size_t n, float *dst) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(src + 2 * i));
        _mm256_storeu_ps(dst + i, f16c_up(h));
    }
    decode_f16_loop(src + 2 * i, n - i, dst + i);
}
#endif

static void decode_f16(const unsigned char *src, size_t n, float *dst) {
#ifdef PS_CODEC_X86
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c")) {
        decode_f16_f16c(src, n, dst);
        return;
    }
#endif
    decode_f16_loop(src, n, dst);
}

#ifdef PS_CODEC_X86
/* 1 when the AVX2 kernels below (BF16 encode, I8 encode) run: on an AVX2 CPU
 * below x86-64-v4. There the compiler's AVX2 clones of the loops take about
 * 2.2x a memcpy of the input (bench/codec_bench_avx2.c), the kernels about
 * 1.0x (BF16) and 1.4x (I8); on x86-64-v4 the clones (narrowing stores,
 * 16-lane divides) are a little faster than the kernels and stay. A PS_CODEC_NO_CLONES copy is built
 * for one target: it takes the kernels wherever AVX2 is. */
static int avx2_kernels(void) {
#ifdef PS_CODEC_NO_CLONES
    return __builtin_cpu_supports("avx2");
#else
    return __builtin_cpu_supports("avx2") && !__builtin_cpu_supports("x86-64-v4");
#endif
}
#endif

PS_CODEC_KERNEL static void encode_bf16_loop(const float *restrict src, size_t n,
                                             unsigned char *restrict dst) {
    for (size_t i = 0; i < n; i++)
        store_u16(dst + 2 * i, (uint16_t)bf16_from_bits(f32_bits(src[i])));
}

#ifdef PS_CODEC_X86
/* bf16_from_bits on 8 lanes: the same integer operations, lane for lane. */
__attribute__((target("avx2"))) static inline __m256i bf16_lanes(__m256i b) {
    const __m256i one = _mm256_set1_epi32(1), round = _mm256_set1_epi32(0x7fff);
    const __m256i absmask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    __m256i hi = _mm256_srli_epi32(b, 16);
    __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(b, round), _mm256_and_si256(hi, one)), 16);
    __m256i nan = _mm256_or_si256(hi, _mm256_set1_epi32(0x0040));
    __m256i m_nan = _mm256_cmpgt_epi32(_mm256_and_si256(b, absmask), inf);
    return _mm256_blendv_epi8(rounded, nan, m_nan);
}

/* The AVX2 clone of encode_bf16_loop narrows 32-bit lanes to 16 with
 * shuffles the compiler picks poorly: here 16 values per step, one
 * saturating pack (every lane is below 2^16, so nothing saturates) and one
 * cross-lane permute to undo the pack's lane order. */
__attribute__((target("avx2"))) static void encode_bf16_avx2(const float *src, size_t n,
                                                             unsigned char *dst) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i a = bf16_lanes(_mm256_loadu_si256((const __m256i *)(const void *)(src + i)));
        __m256i b = bf16_lanes(_mm256_loadu_si256((const __m256i *)(const void *)(src + i + 8)));
        __m256i h = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8);
        _mm256_storeu_si256((__m256i *)(void *)(dst + 2 * i), h);
    }
    encode_bf16_loop(src + i, n - i, dst + 2 * i);
}
#endif

static void encode_bf16(const float *src, size_t n, unsigned char *dst) {
#ifdef PS_CODEC_X86
    if (avx2_kernels()) {
        encode_bf16_avx2(src, n, dst);
        return;
    }
#endif
    encode_bf16_loop(src, n, dst);
}

PS_CODEC_KERNEL static void decode_bf16(const unsigned char *restrict src, size_t n,
                                        float *restrict dst) {
    for (size_t i = 0; i < n; i++) dst[i] = bits_f32((uint32_t)load_u16(src + 2 * i) << 16);
}

/* ====================================================================== I8 */

/* Largest |x| among the 'n' floats at 'src', NaN ignored, as binary32 bits.
 * The magnitudes compare as integers (sign bit cleared, NaN mapped to 0),
 * which orders them like the floats and vectorizes as an integer max. */
PS_CODEC_KERNEL static uint32_t i8_maxabs_bits(const float *restrict src, size_t n) {
    uint32_t best = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t a = f32_bits(src[i]) & 0x7fffffffu;
        a &= mask_if((int32_t)a <= 0x7f800000);
        best = (int32_t)a > (int32_t)best ? a : best;
    }
    return best;
}

/* The I8 byte of ratio 'r': r rounded half away from zero and clamped to
 * [-127, 127], NaN to 0. Works on the magnitude a = |r| (its bits, ordered
 * like the values once NaN is out, so the clamp is an integer min): a + 0.5
 * is exact for every a <= 127 except a = 0.5 - 2^-25, whose sum rounds up to
 * 1.0, so that one value is sent to 0 explicitly; truncating the sum then
 * rounds half away from zero, and the sign goes back on as a two's
 * complement negation. Every step is a lane-wise integer or IEEE-exact float
 * operation, so the loop vectorizes without changing a bit. */
static inline unsigned char i8_byte(float r) {
    uint32_t b = f32_bits(r);
    uint32_t a = b & 0x7fffffffu;
    a &= mask_if((int32_t)a <= 0x7f800000);        /* NaN -> 0 */
    a = (int32_t)a < 0x42fe0000 ? a : 0x42fe0000u; /* a <= 127.0f */
    a &= mask_if(a != 0x3effffffu);                /* 0.49999997 -> 0 */
    uint32_t m = (uint32_t)(int32_t)(bits_f32(a) + 0.5f);
    uint32_t neg = (uint32_t)((int32_t)b >> 31); /* all ones when r < 0 */
    return (unsigned char)(((m ^ neg) - neg) & 0xffu);
}

/* q_i = the I8 byte of x_i / scale. */
PS_CODEC_KERNEL static void i8_quantize_loop(const float *restrict src, size_t n, float scale,
                                             unsigned char *restrict q) {
    for (size_t i = 0; i < n; i++) q[i] = i8_byte(src[i] / scale);
}

#ifdef PS_CODEC_X86
/* i8_byte on 8 lanes of ratios 'b' (binary32 bits): the same operations,
 * lane for lane. */
__attribute__((target("avx2"))) static inline __m256i i8_lanes(__m256i b) {
    const __m256i absmask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    const __m256i top = _mm256_set1_epi32(0x42fe0000), below_half = _mm256_set1_epi32(0x3effffff);
    __m256i a = _mm256_and_si256(b, absmask);
    a = _mm256_andnot_si256(_mm256_cmpgt_epi32(a, inf), a);       /* NaN -> 0 */
    a = _mm256_min_epi32(a, top);                                 /* a <= 127.0f */
    a = _mm256_andnot_si256(_mm256_cmpeq_epi32(a, below_half), a); /* 0.49999997 -> 0 */
    __m256i m = _mm256_cvttps_epi32(_mm256_add_ps(_mm256_castsi256_ps(a), _mm256_set1_ps(0.5f)));
    __m256i neg = _mm256_srai_epi32(b, 31);
    return _mm256_sub_epi32(_mm256_xor_si256(m, neg), neg);
}

/* Four vectors of 8 int32 lanes in [-127, 127] -> 32 bytes in lane order:
 * two saturating packs (nothing saturates) and a permute that undoes the
 * packs' per-128-bit-lane interleaving. */
__attribute__((target("avx2"))) static inline void i8_store32(unsigned char *q, __m256i a,
                                                              __m256i b, __m256i c, __m256i d) {
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    __m256i w = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
    _mm256_storeu_si256((__m256i *)(void *)q, _mm256_permutevar8x32_epi32(w, order));
}

/* x / scale needs a division per value, and AVX2's divider (8 lanes every
 * ~5 cycles) plus i8_lanes' dozen operations take twice a memcpy of the
 * input. So this multiplies by inv = 1/scale (rounded) instead: v = x * inv
 * is within 2^-22 |r| <= 2^-15 of the exact r = x / scale (two roundings of
 * 2^-24 relative; |r| <= 127 plus a rounding, as |x| <= max|x|). Adding and
 * subtracting M = 1.5 * 2^23 rounds v to the nearest integer k (ties to
 * even), which sits in the low bits of v + M; e = v - k, computed exactly,
 * is the rounding's residual. Where |e| < 0.5 - 2^-14, no k + 0.5 threshold
 * lies between r and v, so k is i8_byte(r) (round half away from zero; the
 * clamp at 127 and the 0.49999997 case only matter at such thresholds, and
 * |v| < 127.5 needs no clamp). A group of 32 values with a lane closer to a
 * threshold (or a NaN: it compares unordered) is recomputed with the
 * division and i8_lanes, so every byte is the division's, hence the scalar
 * reference's. Only for 2^-100 <= scale <= 2^100 (inv normal, no overflow
 * in v); otherwise every group divides. */
__attribute__((target("avx2"))) static inline __m256i i8_lanes_mul(__m256 x, __m256 inv,
                                                                   __m256 *near) {
    const __m256 magic = _mm256_set1_ps(12582912.0f), sign = _mm256_set1_ps(-0.0f);
    const __m256 far = _mm256_set1_ps(0.5f - 0x1p-14f);
    __m256 v = _mm256_mul_ps(x, inv);
    __m256 t = _mm256_add_ps(v, magic);
    __m256 e = _mm256_andnot_ps(sign, _mm256_sub_ps(v, _mm256_sub_ps(t, magic)));
    *near = _mm256_or_ps(*near, _mm256_cmp_ps(e, far, _CMP_NLT_UQ));
    return _mm256_sub_epi32(_mm256_castps_si256(t), _mm256_castps_si256(magic));
}

__attribute__((target("avx2"))) static void i8_quantize_avx2(const float *src, size_t n,
                                                             float scale, unsigned char *q) {
    const __m256 s = _mm256_set1_ps(scale), inv = _mm256_set1_ps(1.0f / scale);
    const int mul_ok = scale >= 0x1p-100f && scale <= 0x1p100f;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256 x0 = _mm256_loadu_ps(src + i), x1 = _mm256_loadu_ps(src + i + 8);
        __m256 x2 = _mm256_loadu_ps(src + i + 16), x3 = _mm256_loadu_ps(src + i + 24);
        if (mul_ok) {
            __m256 near = _mm256_setzero_ps();
            __m256i a = i8_lanes_mul(x0, inv, &near), b = i8_lanes_mul(x1, inv, &near);
            __m256i c = i8_lanes_mul(x2, inv, &near), d = i8_lanes_mul(x3, inv, &near);
            if (_mm256_movemask_ps(near) == 0) {
                i8_store32(q + i, a, b, c, d);
                continue;
            }
        }
        i8_store32(q + i, i8_lanes(_mm256_castps_si256(_mm256_div_ps(x0, s))),
                   i8_lanes(_mm256_castps_si256(_mm256_div_ps(x1, s))),
                   i8_lanes(_mm256_castps_si256(_mm256_div_ps(x2, s))),
                   i8_lanes(_mm256_castps_si256(_mm256_div_ps(x3, s))));
    }
    i8_quantize_loop(src + i, n - i, scale, q + i);
}
#endif

static void i8_quantize(const float *src, size_t n, float scale, unsigned char *q) {
#ifdef PS_CODEC_X86
    if (avx2_kernels()) {
        i8_quantize_avx2(src, n, scale, q);
        return;
    }
#endif
    i8_quantize_loop(src, n, scale, q);
}

#ifdef PS_CODEC_X86
/* i8_maxabs_bits with float maxima: max(|x|, m) keeps m when x is NaN (the
 * second operand wins on an unordered compare), and on numbers and
 * infinities the larger magnitude is the larger bit pattern, so the result
 * is the same; two operations per 8 values instead of four. */
__attribute__((target("avx2"))) static uint32_t i8_maxabs_avx2(const float *src, size_t n) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m0 = _mm256_setzero_ps(), m1 = m0, m2 = m0, m3 = m0;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        m0 = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(src + i)), m0);
        m1 = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(src + i + 8)), m1);
        m2 = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(src + i + 16)), m2);
        m3 = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(src + i + 24)), m3);
    }
    float lanes[8];
    _mm256_storeu_ps(lanes, _mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3)));
    uint32_t best = i8_maxabs_bits(src + i, n - i);
    for (int j = 0; j < 8; j++) best = f32_bits(lanes[j]) > best ? f32_bits(lanes[j]) : best;
    return best;
}
#endif

static uint32_t i8_maxabs(const float *src, size_t n) {
#ifdef PS_CODEC_X86
    if (avx2_kernels()) return i8_maxabs_avx2(src, n);
#endif
    return i8_maxabs_bits(src, n);
}

/* I8 encoding: scale = max|x| / 127 written first, then the quantised x. */
static void encode_i8(const float *src, size_t n, unsigned char *dst) {
    float scale = bits_f32(i8_maxabs(src, n)) / 127.0f;
    store_f32(dst, scale);
    if (!(scale > 0.0f)) {
        /* All zero (or so tiny the scale underflowed to 0): every q is 0. */
        memset(dst + 4, 0, n);
        return;
    }
    i8_quantize(src, n, scale, dst + 4);
}

PS_CODEC_KERNEL static void decode_i8(const unsigned char *restrict src, size_t n,
                                      float *restrict dst) {
    float scale = load_f32(src);
    const unsigned char *restrict q = src + 4;
    for (size_t i = 0; i < n; i++) dst[i] = (float)(int8_t)q[i] * scale;
}

/* ============================================================ dense codec */

void ps_encode(ps_format f, const float *src, size_t n, unsigned char *dst) {
    switch (f) {
    case PS_FMT_F32:
        if (n) memcpy(dst, src, n * 4); /* little-endian host: bytes are the wire */
        break;
    case PS_FMT_F16:
        encode_f16(src, n, dst);
        break;
    case PS_FMT_BF16:
        encode_bf16(src, n, dst);
        break;
    case PS_FMT_I8:
        encode_i8(src, n, dst);
        break;
    default:
        break; /* TOPK is not dense: see ps_topk_encode */
    }
}

int ps_decode(ps_format f, const unsigned char *src, size_t len, size_t n, float *dst) {
    size_t want = ps_dense_encoded_size(f, n);
    if (want == 0 && !(n == 0 && f != PS_FMT_TOPK)) return -1; /* TOPK or overflow */
    if (len != want) return -1;
    switch (f) {
    case PS_FMT_F32:
        if (n) memcpy(dst, src, n * 4);
        return 0;
    case PS_FMT_F16:
        decode_f16(src, n, dst);
        return 0;
    case PS_FMT_BF16:
        decode_bf16(src, n, dst);
        return 0;
    case PS_FMT_I8:
        decode_i8(src, n, dst);
        return 0;
    default:
        return -1;
    }
}

/* ========================================================= error feedback
 *
 * ps_encode_feedback: encode, decode and subtract in one pass over the
 * residual instead of three (libps runs it on every lossy push). Each
 * decoded value is computed by the expression ps_decode uses (F16: the same
 * F16C up-conversion and fix-up, or f16_to_bits), so the residual keeps
 * the bits the three passes gave. */

PS_CODEC_KERNEL static void feedback_f16_loop(float *restrict r, size_t n,
                                              unsigned char *restrict dst) {
    for (size_t i = 0; i < n; i++) {
        uint32_t h = f16_from_bits(f32_bits(r[i]));
        store_u16(dst + 2 * i, (uint16_t)h);
        r[i] = r[i] - bits_f32(f16_to_bits(h));
    }
}

#ifdef PS_CODEC_X86
__attribute__((target("avx2,f16c"))) static void feedback_f16_f16c(float *r, size_t n,
                                                                     unsigned char *dst) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(r + i);
        __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm_storeu_si128((__m128i *)(void *)(dst + 2 * i), h);
        _mm256_storeu_ps(r + i, _mm256_sub_ps(v, f16c_up(h)));
    }
    feedback_f16_loop(r + i, n - i, dst + 2 * i);
}
#endif

PS_CODEC_KERNEL static void feedback_bf16_loop(float *restrict r, size_t n,
                                               unsigned char *restrict dst) {
    for (size_t i = 0; i < n; i++) {
        uint32_t h = bf16_from_bits(f32_bits(r[i]));
        store_u16(dst + 2 * i, (uint16_t)h);
        r[i] = r[i] - bits_f32(h << 16);
    }
}

#ifdef PS_CODEC_X86
/* feedback_bf16_loop as encode_bf16_avx2 narrows, for the same reason. */
__attribute__((target("avx2"))) static void feedback_bf16_avx2(float *r, size_t n,
                                                               unsigned char *dst) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 v0 = _mm256_loadu_ps(r + i), v1 = _mm256_loadu_ps(r + i + 8);
        __m256i a = bf16_lanes(_mm256_castps_si256(v0)), b = bf16_lanes(_mm256_castps_si256(v1));
        __m256i h = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8);
        _mm256_storeu_si256((__m256i *)(void *)(dst + 2 * i), h);
        _mm256_storeu_ps(r + i, _mm256_sub_ps(v0, _mm256_castsi256_ps(_mm256_slli_epi32(a, 16))));
        _mm256_storeu_ps(r + i + 8,
                         _mm256_sub_ps(v1, _mm256_castsi256_ps(_mm256_slli_epi32(b, 16))));
    }
    feedback_bf16_loop(r + i, n - i, dst + 2 * i);
}
#endif

/* r_i -= q_i * scale, the decode of the I8 blob 'src' just encoded. */
PS_CODEC_KERNEL static void feedback_i8_sub(float *restrict r, size_t n,
                                            const unsigned char *restrict src) {
    float scale = load_f32(src);
    const unsigned char *restrict q = src + 4;
    for (size_t i = 0; i < n; i++) r[i] = r[i] - (float)(int8_t)q[i] * scale;
}

void ps_encode_feedback(ps_format f, float *r, size_t n, unsigned char *dst) {
    switch (f) {
    case PS_FMT_F16:
#ifdef PS_CODEC_X86
        if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c")) {
            feedback_f16_f16c(r, n, dst);
            return;
        }
#endif
        feedback_f16_loop(r, n, dst);
        return;
    case PS_FMT_BF16:
#ifdef PS_CODEC_X86
        if (avx2_kernels()) {
            feedback_bf16_avx2(r, n, dst);
            return;
        }
#endif
        feedback_bf16_loop(r, n, dst);
        return;
    case PS_FMT_I8:
        encode_i8(r, n, dst);
        feedback_i8_sub(r, n, dst);
        return;
    case PS_FMT_F32:
        ps_encode(f, r, n, dst);
        for (size_t i = 0; i < n; i++) r[i] = r[i] - r[i]; /* as decoding it back would */
        return;
    default:
        return; /* TOPK: see ps_topk_encode */
    }
}

/* =============================================================== row lists */

int ps_rows_check(const unsigned char *blob, size_t len, uint64_t nrows, size_t *count) {
    if (blob == NULL || len == 0 || len % 4 != 0) return -1;
    size_t c = len / 4;
    for (size_t i = 0; i < c; i++)
        if ((uint64_t)load_u32(blob + 4 * i) >= nrows) return -1;
    if (count) *count = c;
    return 0;
}

uint32_t ps_rows_get(const unsigned char *blob, size_t i) {
    return load_u32(blob + 4 * i);
}
