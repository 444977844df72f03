/* codec_ref.h -- the scalar reference codecs: the element-at-a-time loops the
 * vectorized ones in codec.c replaced, kept so tests, the fuzz harness and the
 * codec benchmark can check vector == scalar bit for bit and show the speedup.
 *
 * Same contracts as the functions of codec.h without the _ref suffix: for
 * every input, the outputs (every byte written, the return value) are
 * identical to those functions' outputs. Only ps_topk_encode calls one of
 * them (ps_topk_encode_ref, its fallback for small or unusual inputs); the
 * rest serve the tests, the fuzz harness and bench/codec_bench. */
#ifndef PS_CODEC_REF_H
#define PS_CODEC_REF_H

#include "codec.h"

uint16_t ps_f32_to_f16_ref(float x);
float ps_f16_to_f32_ref(uint16_t h);
uint16_t ps_f32_to_bf16_ref(float x);
float ps_bf16_to_f32_ref(uint16_t h);

void ps_encode_ref(ps_format f, const float *src, size_t n, unsigned char *dst);
int ps_decode_ref(ps_format f, const unsigned char *src, size_t len, size_t n, float *dst);
size_t ps_topk_encode_ref(const float *src, size_t n, uint32_t k, unsigned char *dst,
                          uint32_t *scratch);

#endif /* PS_CODEC_REF_H */
