/* codec_ref.c -- the scalar reference codecs (see codec_ref.h): the
 * conversions and loops codec.c used before it was vectorized, kept verbatim
 * apart from their names. One element at a time, with branches. */

#include "codec_ref.h"
#include "codec_bits.h"

#include <string.h>

/* ============================================================ half / bf16 */

uint16_t ps_f32_to_f16_ref(float x) {
    uint32_t b = f32_bits(x);
    uint16_t sign = (uint16_t)((b >> 16) & 0x8000u);
    uint32_t a = b & 0x7fffffffu; /* |x| as bits: ordered like the values */

    if (a >= 0x47800000u) {
        /* |x| >= 65536, inf or NaN. NaN becomes a quiet NaN keeping the top
         * payload bits (the quiet bit guarantees a non-zero mantissa). */
        if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
        return (uint16_t)(sign | 0x7c00u);
    }
    if (a < 0x38800000u) {
        /* |x| < 2^-14: a half subnormal (units of 2^-24) or zero. Floats in
         * [0.5, 1) are spaced exactly 2^-24 apart, so adding 0.5 lets the FPU
         * round |x| to that grid, ties to even (the parity of the float's last
         * bit is the parity of the count). The count of 2^-24 steps above 0.5
         * is the half's bits; 1024 is correctly the smallest normal. f32
         * zeros and subnormals land on 0. Relies on the default rounding
         * mode (nearest even), which nothing in Redis or the client changes. */
        float f = bits_f32(a) + 0.5f;
        return (uint16_t)(sign | (f32_bits(f) - 0x3f000000u));
    }
    /* Normal half: rebias the exponent (127 -> 15) and round the 13 dropped
     * mantissa bits to nearest even. A carry out of the mantissa bumps the
     * exponent, which is exactly right, and everything from 65520 up lands on
     * 0x7c00, infinity. */
    a -= 112u << 23;
    a += 0xfffu + ((a >> 13) & 1u);
    return (uint16_t)(sign | (a >> 13));
}

float ps_f16_to_f32_ref(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t em = (uint32_t)(h & 0x7fffu) << 13; /* exponent and mantissa in f32 position */
    uint32_t exp = em & 0x0f800000u;
    uint32_t b;

    if (exp == 0x0f800000u) {
        b = em | 0x7f800000u; /* inf, or NaN with its payload */
    } else if (exp == 0) {
        /* Zero or subnormal (mant * 2^-24): build 2^-14 + mant * 2^-24 as a
         * normal f32 and subtract 2^-14; the difference is exact. */
        float f = bits_f32(em | (113u << 23)) - 0x1p-14f;
        b = f32_bits(f);
    } else {
        b = em + (112u << 23); /* rebias 15 -> 127 */
    }
    return bits_f32(b | sign);
}

uint16_t ps_f32_to_bf16_ref(float x) {
    uint32_t b = f32_bits(x);
    if ((b & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((b >> 16) | 0x0040u); /* NaN: force the quiet bit */
    /* Round to nearest even on the 16 dropped bits. No NaN reaches here, so
     * the sum cannot wrap; overflow of the largest finite values lands on
     * infinity as IEEE rounding requires. */
    b += 0x7fffu + ((b >> 16) & 1u);
    return (uint16_t)(b >> 16);
}

float ps_bf16_to_f32_ref(uint16_t h) {
    return bits_f32((uint32_t)h << 16);
}

/* ====================================================================== I8 */

/* Quantise the ratio 'r' to [-127, 127], rounding half away from zero. NaN
 * maps to 0 so a non-finite input never reaches an undefined conversion. The
 * truncation and the subtraction of the integer part are exact in float, so
 * no libm rounding function is needed. */
static inline int i8_quantize(float r) {
    r = (r == r) ? r : 0.0f;
    r = r > 127.0f ? 127.0f : r;
    r = r < -127.0f ? -127.0f : r;
    int t = (int)r;
    float frac = r - (float)t;
    /* Comparisons, not branches: the rounding direction of random data is
     * unpredictable and mispredictions would dominate the loop. */
    return t + (frac >= 0.5f) - (frac <= -0.5f);
}

/* I8 encoding: scale = max|x| / 127 written first, then q_i = x_i / scale. */
static void encode_i8(const float *src, size_t n, unsigned char *dst) {
    float maxabs = 0.0f;
    for (size_t i = 0; i < n; i++) {
        /* |x| by clearing the sign bit: a branch on the sign would be
         * mispredicted half the time on gradients. */
        float a = bits_f32(f32_bits(src[i]) & 0x7fffffffu);
        if (a > maxabs) maxabs = a; /* NaN never compares greater: ignored */
    }
    float scale = maxabs / 127.0f;
    store_f32(dst, scale);
    unsigned char *q = dst + 4;
    if (!(scale > 0.0f)) {
        /* All zero (or so tiny the scale underflowed to 0): every q is 0. */
        memset(q, 0, n);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        int v = i8_quantize(src[i] / scale);
        q[i] = (unsigned char)(v & 0xff); /* two's complement byte */
    }
}

static void decode_i8(const unsigned char *src, size_t n, float *dst) {
    float scale = load_f32(src);
    const unsigned char *q = src + 4;
    for (size_t i = 0; i < n; i++) {
        int v = (int)q[i] - ((q[i] & 0x80u) ? 256 : 0);
        dst[i] = (float)v * scale;
    }
}

/* ============================================================ dense codec */

void ps_encode_ref(ps_format f, const float *src, size_t n, unsigned char *dst) {
    switch (f) {
    case PS_FMT_F32:
        if (n) memcpy(dst, src, n * 4); /* little-endian host: bytes are the wire */
        break;
    case PS_FMT_F16:
        for (size_t i = 0; i < n; i++) store_u16(dst + 2 * i, ps_f32_to_f16_ref(src[i]));
        break;
    case PS_FMT_BF16:
        for (size_t i = 0; i < n; i++) store_u16(dst + 2 * i, ps_f32_to_bf16_ref(src[i]));
        break;
    case PS_FMT_I8:
        encode_i8(src, n, dst);
        break;
    default:
        break; /* TOPK is not dense: see ps_topk_encode */
    }
}

int ps_decode_ref(ps_format f, const unsigned char *src, size_t len, size_t n, float *dst) {
    size_t want = ps_dense_encoded_size(f, n);
    if (want == 0 && !(n == 0 && f != PS_FMT_TOPK)) return -1; /* TOPK or overflow */
    if (len != want) return -1;
    switch (f) {
    case PS_FMT_F32:
        if (n) memcpy(dst, src, n * 4);
        return 0;
    case PS_FMT_F16:
        for (size_t i = 0; i < n; i++) dst[i] = ps_f16_to_f32_ref(load_u16(src + 2 * i));
        return 0;
    case PS_FMT_BF16:
        for (size_t i = 0; i < n; i++) dst[i] = ps_bf16_to_f32_ref(load_u16(src + 2 * i));
        return 0;
    case PS_FMT_I8:
        decode_i8(src, n, dst);
        return 0;
    default:
        return -1;
    }
}

/* ==================================================================== TOPK */

/* Magnitude key of 'x': its bits without the sign. For non-negative IEEE
 * values the integer order of the bits is the numeric order, so this orders
 * 0 (either sign) < subnormals < normals < inf < NaN, a total order. */
static inline uint32_t mag_key(float x) {
    return f32_bits(x) & 0x7fffffffu;
}

/* Radix select: find the 'k'-th largest magnitude key (1 <= k <= n) among the
 * 'n' floats at 'src'. Returns that key T and stores in '*take_eq' how many
 * entries equal to T belong to the top k (the rest of the top k are the keys
 * greater than T). One histogram pass over 'src' on the top byte, then the
 * candidates sharing the chosen top byte are compacted into 'scratch' and the
 * three lower bytes are resolved on them alone: O(n), deterministic. */
static uint32_t topk_threshold(const float *src, size_t n, size_t k, uint32_t *scratch,
                               size_t *take_eq) {
    size_t hist[256];
    size_t need = k;

    memset(hist, 0, sizeof hist);
    for (size_t i = 0; i < n; i++) hist[mag_key(src[i]) >> 24]++;
    unsigned b = 255;
    while (hist[b] < need) {
        need -= hist[b];
        b--;
    }
    uint32_t prefix = (uint32_t)b << 24;

    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t key = mag_key(src[i]);
        if ((key >> 24) == b) scratch[m++] = key;
    }

    for (int shift = 16; shift >= 0; shift -= 8) {
        memset(hist, 0, sizeof hist);
        for (size_t i = 0; i < m; i++) hist[(scratch[i] >> shift) & 0xffu]++;
        b = 255;
        while (hist[b] < need) {
            need -= hist[b];
            b--;
        }
        prefix |= (uint32_t)b << shift;
        size_t w = 0;
        for (size_t i = 0; i < m; i++)
            if (((scratch[i] >> shift) & 0xffu) == b) scratch[w++] = scratch[i];
        m = w;
    }
    *take_eq = need; /* 1 <= need <= m: all survivors equal the prefix */
    return prefix;
}

size_t ps_topk_encode_ref(const float *src, size_t n, uint32_t k, unsigned char *dst,
                          uint32_t *scratch) {
    if ((size_t)k > n) k = (uint32_t)n;
    store_u32(dst, k);
    if (k == 0) return 4;

    unsigned char *idx_out = dst + 4;
    unsigned char *val_out = dst + 4 + 4 * (size_t)k;
    size_t take_eq = 0;
    uint32_t thr = topk_threshold(src, n, k, scratch, &take_eq);

    /* Emit in index order: every key above the threshold, and the first
     * 'take_eq' keys equal to it (lower index wins ties). Exactly k entries. */
    size_t j = 0;
    for (size_t i = 0; i < n && j < k; i++) {
        uint32_t key = mag_key(src[i]);
        if (key > thr || (key == thr && take_eq > 0)) {
            if (key == thr) take_eq--;
            store_u32(idx_out + 4 * j, (uint32_t)i);
            store_f32(val_out + 4 * j, src[i]);
            j++;
        }
    }
    return ps_topk_encoded_size(k);
}
