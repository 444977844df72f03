/* fuzz_codec.c -- libFuzzer harness for the wire codecs and validators in
 * common/: format names, dense decode (F32/F16/BF16/I8), f16 and bf16
 * conversions, TOPK encode/check/scatter, ROWS check and the shape
 * validator. The first input byte picks the unit; the rest is its input.
 * Besides memory safety it checks each unit's documented contract, and that
 * the vectorized codecs give the scalar reference's bytes (codec_ref.h). */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "codec_ref.h"
#include "fuzz_util.h"
#include "shape.h"

#define MAXN 4096

/* TOPK's fast path starts at 16384 floats: BIGN leaves room above it. */
#define BIGN (1 << 17)

static float F[MAXN], G[MAXN], H[BIGN];
static unsigned char E[4 + 8 * MAXN], R[4 + 8 * BIGN], T[4 + 8 * BIGN];
static uint32_t S[BIGN];

static int same_bits(float a, float b) { return memcmp(&a, &b, 4) == 0; }

static void fuzz_format(FuzzIn *in) {
    const uint8_t *s;
    size_t len = fz_rest(in, &s);
    ps_format f;
    if (ps_format_parse((const char *)s, len, &f) != 0) return;
    const char *name = ps_format_name(f);
    FZ_CHECK(strcmp(name, "?") != 0);
    ps_format g;
    FZ_CHECK(ps_format_parse(name, strlen(name), &g) == 0 && g == f);
    FZ_CHECK(len == strlen(name));
}

/* Vector == scalar: the blob decoded as format 'f' (return code and bits),
 * and its bytes read as raw floats encoded in every dense format. */
static void check_vs_ref(ps_format f, const uint8_t *blob, size_t len, size_t n) {
    memset(F, 0x5a, sizeof F);
    memset(G, 0x5a, sizeof G);
    int a = ps_decode(f, blob, len, n, F), b = ps_decode_ref(f, blob, len, n, G);
    FZ_CHECK(a == b && memcmp(F, G, sizeof F) == 0);
    size_t m = len / 4 < MAXN ? len / 4 : MAXN;
    memcpy(H, blob, 4 * m);
    for (ps_format g = PS_FMT_F16; g <= PS_FMT_I8; g++) {
        size_t sz = ps_dense_encoded_size(g, m);
        memset(R, 0xa5, sz + 8);
        memset(T, 0xa5, sz + 8);
        ps_encode(g, H, m, R);
        ps_encode_ref(g, H, m, T);
        FZ_CHECK(memcmp(R, T, sz + 8) == 0);
    }
}

/* A blob that decodes must have exactly the encoded size, and (F32, F16,
 * BF16) re-encode to the same bytes except for NaNs, which may be quieted. */
static void fuzz_decode(FuzzIn *in) {
    ps_format f = (ps_format)fz_range(in, 5);
    size_t n = fz_uint(in, 2) % (MAXN + 1);
    const uint8_t *blob;
    size_t len = fz_rest(in, &blob);
    check_vs_ref(f, blob, len, n);
    if (ps_decode(f, blob, len, n, F) != 0) {
        FZ_CHECK(f == PS_FMT_TOPK || len != ps_dense_encoded_size(f, n));
        return;
    }
    FZ_CHECK(f != PS_FMT_TOPK && len == ps_dense_encoded_size(f, n));
    ps_encode(f, F, n, E);
    if (f == PS_FMT_I8) {
        /* value = q * scale: every value is a multiple of the scale. */
        float scale;
        memcpy(&scale, blob, 4);
        for (size_t i = 0; i < n; i++) {
            float q = (float)(int8_t)blob[4 + i];
            FZ_CHECK(same_bits(F[i], q * scale) || (isnan(F[i]) && isnan(q * scale)));
        }
        return;
    }
    size_t w = f == PS_FMT_F32 ? 4 : 2;
    for (size_t i = 0; i < n; i++)
        if (!isnan(F[i])) FZ_CHECK(memcmp(E + w * i, blob + w * i, w) == 0);
}

/* Round to nearest: no other half-precision value is closer to x. */
static void check_nearest(float x, uint16_t h, float (*up)(uint16_t)) {
    if (!isfinite(x)) return;
    float y = up(h);
    if (isinf(y)) return; /* overflow to infinity past the largest finite */
    double d = fabs((double)y - (double)x);
    for (int delta = -1; delta <= 1; delta += 2) {
        uint16_t nb = (uint16_t)(h + delta);
        if ((nb & 0x7fff) == 0x7fff || ((nb ^ h) & 0x8000)) continue; /* wrapped sign */
        float z = up(nb);
        if (!isfinite(z)) continue;
        FZ_CHECK(fabs((double)z - (double)x) >= d);
    }
}

static void fuzz_half(FuzzIn *in) {
    uint16_t h = (uint16_t)fz_uint(in, 2);
    float x = ps_f16_to_f32(h);
    if (!isnan(x)) FZ_CHECK(ps_f32_to_f16(x) == h);
    else FZ_CHECK(isnan(ps_f16_to_f32(ps_f32_to_f16(x))));
    x = ps_bf16_to_f32(h);
    if (!isnan(x)) FZ_CHECK(ps_f32_to_bf16(x) == h);
    else FZ_CHECK(isnan(ps_bf16_to_f32(ps_f32_to_bf16(x))));
    uint32_t bits = (uint32_t)fz_uint(in, 4);
    float v;
    memcpy(&v, &bits, 4);
    uint16_t a = ps_f32_to_f16(v), b = ps_f32_to_bf16(v);
    if (isnan(v)) {
        FZ_CHECK(isnan(ps_f16_to_f32(a)) && isnan(ps_bf16_to_f32(b)));
        return;
    }
    check_nearest(v, a, ps_f16_to_f32);
    check_nearest(v, b, ps_bf16_to_f32);
    FZ_CHECK(signbit(ps_f16_to_f32(a)) == signbit(v));
}

/* TOPK of 'n' floats at H with 'k' == the scalar reference, byte for byte. */
static void topk_vs_ref(size_t n, uint32_t k) {
    size_t kk = k < n ? k : n;
    size_t sz = ps_topk_encoded_size((uint32_t)kk);
    memset(R, 0xa5, sz + 8);
    memset(T, 0xa5, sz + 8);
    size_t a = ps_topk_encode(H, n, k, R, S), b = ps_topk_encode_ref(H, n, k, T, S);
    FZ_CHECK(a == b && a == sz && memcmp(R, T, sz + 8) == 0);
}

static void fuzz_topk(FuzzIn *in) {
    size_t n = 1 + fz_uint(in, 2) % MAXN;
    uint8_t mode = fz_u8(in);
    if (mode & 2) {
        /* Big enough for the fast path: the input's floats tiled over
         * 16384 + x entries, some scaled by a per-tile factor (ties galore,
         * spikes the sample may or may not see). */
        size_t big = 16384 + fz_uint(in, 2) % (BIGN - 16384);
        uint32_t k = (uint32_t)fz_uint(in, 3);
        uint32_t every = 1 + fz_u8(in);
        const uint8_t *p;
        size_t len = fz_rest(in, &p);
        if (len < 4) return;
        size_t m = len / 4;
        for (size_t i = 0; i < big; i++) {
            memcpy(&H[i], p + 4 * (i % m), 4);
            if ((i / m) % every == 0) H[i] *= 3.0f;
        }
        topk_vs_ref(big, k % 4 == 0 ? k : k % (uint32_t)(big / 8 + 1));
        return;
    }
    if (mode & 1) {
        /* encode -> check -> scatter gives back exactly the k largest. */
        uint32_t k = (uint32_t)fz_uint(in, 2);
        for (size_t i = 0; i < n; i++) F[i] = fz_float(in);
        memcpy(H, F, n * sizeof(float));
        topk_vs_ref(n, k);
        size_t bytes = ps_topk_encode(F, n, k, E, S);
        uint32_t kk = k < n ? k : (uint32_t)n, got;
        FZ_CHECK(bytes == ps_topk_encoded_size(kk));
        FZ_CHECK(ps_topk_check(E, bytes, n, &got) == 0 && got == kk);
        uint32_t prev = 0;
        for (uint32_t j = 0; j < kk; j++) {
            uint32_t idx;
            memcpy(&idx, E + 4 + 4 * j, 4);
            FZ_CHECK(idx < n && (j == 0 || idx > prev));
            prev = idx;
        }
        memset(G, 0, n * sizeof(float));
        ps_topk_scatter_add(E, kk, G);
        return;
    }
    const uint8_t *blob;
    size_t len = fz_rest(in, &blob);
    uint32_t k = 0;
    if (ps_topk_check(blob, len, n, &k) != 0) return;
    FZ_CHECK(len == ps_topk_encoded_size(k));
    for (uint32_t j = 0; j < k; j++) {
        uint32_t idx;
        memcpy(&idx, blob + 4 + 4 * j, 4);
        FZ_CHECK(idx < n);
    }
    memset(G, 0, n * sizeof(float));
    ps_topk_scatter_add(blob, k, G);
}

static void fuzz_rows(FuzzIn *in) {
    uint64_t nrows = fz_uint(in, 5);
    const uint8_t *blob;
    size_t len = fz_rest(in, &blob);
    size_t cnt = 0;
    if (ps_rows_check(blob, len, nrows, &cnt) != 0) return;
    FZ_CHECK(len > 0 && len % 4 == 0 && cnt == len / 4);
    for (size_t i = 0; i < cnt; i++) FZ_CHECK(ps_rows_get(blob, i) < nrows);
}

static void fuzz_shape(FuzzIn *in) {
    uint32_t ndim = fz_u8(in) % 12;
    uint64_t dims[12];
    for (uint32_t i = 0; i < ndim; i++) {
        /* Mostly small dims, sometimes any 64-bit value. */
        uint8_t sel = fz_u8(in);
        dims[i] = sel < 200 ? sel : fz_uint(in, 8);
    }
    uint64_t max = fz_uint(in, 8);
    uint64_t n = 12345;
    const char *err = NULL;
    int rc = ps_shape_check(ndim, dims, max, &n, &err);
    unsigned __int128 prod = 1;
    int over = 0;
    for (uint32_t i = 0; i < ndim; i++) {
        prod *= dims[i];
        if (prod > (unsigned __int128)UINT64_MAX) over = 1, prod = (unsigned __int128)UINT64_MAX + 1;
    }
    int ok = ndim >= 1 && ndim <= PS_MAX_DIMS && !over && prod != 0 &&
             prod * 4 <= (unsigned __int128)UINT64_MAX && (max == 0 || prod * 4 <= max);
    FZ_CHECK(ok == (rc == 0));
    if (rc == 0) FZ_CHECK(n == (uint64_t)prod);
    else FZ_CHECK(n == 12345 && err && *err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FuzzIn in = {data, size};
    switch (fz_u8(&in) % 6) {
    case 0: fuzz_format(&in); break;
    case 1: fuzz_decode(&in); break;
    case 2: fuzz_half(&in); break;
    case 3: fuzz_topk(&in); break;
    case 4: fuzz_rows(&in); break;
    default: fuzz_shape(&in); break;
    }
    return 0;
}
