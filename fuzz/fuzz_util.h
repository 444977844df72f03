/* fuzz_util.h -- a tiny consumer of libFuzzer input for the C harnesses:
 * takes integers and byte slices off the front of the fuzz input. Reading
 * past the end yields zeros / empty slices, never an error, so every input
 * is a valid test case. */
#ifndef PS_FUZZ_UTIL_H
#define PS_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct FuzzIn {
    const uint8_t *p;
    size_t len;
} FuzzIn;

/* Next 'n' (<= 8) bytes as a little-endian integer; zeros past the end. */
static inline uint64_t fz_uint(FuzzIn *in, size_t n) {
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (!in->len) break;
        v |= (uint64_t)in->p[0] << (8 * i);
        in->p++;
        in->len--;
    }
    return v;
}

static inline uint8_t fz_u8(FuzzIn *in) { return (uint8_t)fz_uint(in, 1); }

/* A value in [0, n) (n > 0) from one or two bytes. */
static inline uint32_t fz_range(FuzzIn *in, uint32_t n) {
    return (uint32_t)(fz_uint(in, n > 256 ? 2 : 1) % n);
}

/* Up to 'max' bytes: points '*out' into the input, returns the count taken.
 * The count comes from one length byte (0..255) unless 'max' is smaller. */
static inline size_t fz_bytes(FuzzIn *in, size_t max, const uint8_t **out) {
    size_t want = fz_u8(in);
    if (want > max) want = max;
    if (want > in->len) want = in->len;
    *out = in->p;
    in->p += want;
    in->len -= want;
    return want;
}

/* Everything left. */
static inline size_t fz_rest(FuzzIn *in, const uint8_t **out) {
    size_t n = in->len;
    *out = in->p;
    in->p += n;
    in->len = 0;
    return n;
}

/* A float: mostly a small finite value (k/8), sometimes 4 raw input bytes,
 * so the fuzzer reaches both the arithmetic paths and the non-finite rejects. */
static inline float fz_float(FuzzIn *in) {
    uint8_t sel = fz_u8(in);
    if (sel < 192) return (float)((int)(sel % 64) - 32) / 8.0f;
    uint32_t bits = (uint32_t)fz_uint(in, 4);
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

#define FZ_CHECK(cond)                                                               \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                 \
        }                                                                            \
    } while (0)

#endif /* PS_FUZZ_UTIL_H */
