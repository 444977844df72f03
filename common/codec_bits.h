/* codec_bits.h -- private to common/codec*.c: loads and stores of
 * little-endian values at possibly unaligned addresses (blobs point straight
 * into Redis argument strings), and float <-> bits. Each memcpy compiles to a
 * single move on x86-64 and arm64. */
#ifndef PS_CODEC_BITS_H
#define PS_CODEC_BITS_H

#include <stdint.h>
#include <string.h>

/* Load/store one little-endian value at a possibly unaligned address. */
static inline uint32_t load_u32(const unsigned char *p) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void store_u32(unsigned char *p, uint32_t v) {
    memcpy(p, &v, sizeof v);
}

static inline float load_f32(const unsigned char *p) {
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void store_f32(unsigned char *p, float v) {
    memcpy(p, &v, sizeof v);
}

static inline uint16_t load_u16(const unsigned char *p) {
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void store_u16(unsigned char *p, uint16_t v) {
    memcpy(p, &v, sizeof v);
}

static inline uint32_t f32_bits(float x) {
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    return b;
}

static inline float bits_f32(uint32_t b) {
    float x;
    memcpy(&x, &b, sizeof x);
    return x;
}

#endif /* PS_CODEC_BITS_H */
