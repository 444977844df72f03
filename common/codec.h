/* codec.h -- wire codecs shared by the Redis module and the client.
 *
 * Everything here is pure: no Redis header, no hiredis, no allocation. Callers
 * pass every buffer. Input blobs may be unaligned (they point straight into
 * Redis argument strings), so every multi-byte load and store goes through
 * memcpy. The wire format is little-endian; the implementation assumes a
 * little-endian host and refuses to compile on anything else.
 *
 * The loops are vectorized (SSE2, AVX2 and AVX-512 builds picked at load,
 * F16C for F16) and compute exactly the bytes of the scalar
 * reference in codec_ref.h on every CPU: masters, replicas and clients agree.
 *
 * Formats:
 *   F32   n raw IEEE binary32 values                          (4n bytes)
 *   F16   n IEEE binary16 values, round to nearest even       (2n bytes)
 *   BF16  n bfloat16 values, round to nearest even            (2n bytes)
 *   I8    f32 scale, then n int8 q; value = q * scale          (4 + n bytes)
 *   TOPK  uint32 k, k uint32 indices (increasing), k f32 values (4 + 8k bytes)
 */
#ifndef PS_CODEC_H
#define PS_CODEC_H

#include <stddef.h>
#include <stdint.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "redis-ps codecs assume a little-endian host (the wire format is little-endian)"
#endif

#include "protocol.h"

/* The wire formats, PS_FMT_<ID> for each row of PS_PROTO_FORMATS (protocol.h),
 * in its order. */
typedef enum {
#define PS_FMT_ENUM_(ID, dense, table) PS_FMT_##ID,
    PS_PROTO_FORMATS(PS_FMT_ENUM_, PS_FMT_ENUM_)
#undef PS_FMT_ENUM_
    PS_FMT_COUNT
} ps_format;

/* ---------------------------------------------------------------- formats */

/* Parse the format name 's' of 'len' bytes, case-insensitively (the names
 * of PS_PROTO_FORMATS: F32, F16, BF16, I8, TOPK). Stores the result in '*out' and returns 0, or
 * returns -1 (leaving '*out' untouched) for any other name. */
int ps_format_parse(const char *s, size_t len, ps_format *out);

/* Upper-case name of format 'f' ("F32", ...), a static string; "?" for a
 * value outside the enum. */
const char *ps_format_name(ps_format f);

/* Bytes needed to encode 'n' floats in the dense format 'f': F32 4n, F16 2n,
 * BF16 2n, I8 4+n. Returns 0 for TOPK (not a dense format) and when the size
 * would not fit in size_t. */
size_t ps_dense_encoded_size(ps_format f, size_t n);

/* ------------------------------------------------------------ dense codec */

/* Encode the 'n' floats at 'src' into 'dst' in the dense format 'f'; 'dst'
 * must hold ps_dense_encoded_size(f, n) bytes and may be unaligned. Does
 * nothing for TOPK (use ps_topk_encode). Never fails: NaN/Inf inputs are
 * encoded as well as the format allows (I8 maps non-finite ratios to 0). */
void ps_encode(ps_format f, const float *src, size_t n, unsigned char *dst);

/* Decode 'len' bytes at 'src' (may be unaligned), which must be exactly the
 * dense encoding of 'n' floats in format 'f', into 'dst'. Returns 0, or -1
 * (writing nothing) when 'len' is not the encoded size or 'f' is TOPK. */
int ps_decode(ps_format f, const unsigned char *src, size_t len, size_t n, float *dst);

/* Error feedback for a lossy push in one pass: encodes the 'n' floats of
 * the residual 'r' into 'dst' in the dense format 'f' (the bytes ps_encode
 * writes; 'dst' as for ps_encode) and subtracts from each r[i] its decoded
 * value, leaving in 'r' exactly what ps_encode, then ps_decode into a
 * scratch array, then r[i] -= scratch[i] leave. Does nothing for TOPK. */
void ps_encode_feedback(ps_format f, float *r, size_t n, unsigned char *dst);

/* IEEE binary16 <-> binary32. Rounds to nearest, ties to even; values that
 * round past 65504 become infinity; subnormals are produced and read exactly;
 * NaN stays NaN (made quiet on the way down, payload kept where it fits). */
uint16_t ps_f32_to_f16(float x);
float ps_f16_to_f32(uint16_t h);

/* bfloat16 <-> binary32 (bfloat16 is the top half of a binary32). Rounds to
 * nearest, ties to even; NaN stays a quiet NaN. The way up is exact. */
uint16_t ps_f32_to_bf16(float x);
float ps_bf16_to_f32(uint16_t h);

/* ------------------------------------------------------------------- TOPK */

/* Bytes of a TOPK blob with 'k' entries: 4 + 8k. */
size_t ps_topk_encoded_size(uint32_t k);

/* Encode the 'k' entries of largest magnitude among the 'n' floats at 'src'
 * as a TOPK blob at 'dst' (room for ps_topk_encoded_size(min(k, n)) bytes,
 * may be unaligned). Ties in magnitude go to the lower index; NaN counts as
 * larger than any number; -0 and +0 are equal. 'k' is clamped to 'n'.
 * Indices are written in increasing order. 'scratch' must have room for 'n'
 * uint32 (its contents on return are unspecified); 'n' must be <= 2^32 so
 * every index fits in a uint32. Runs in O(n), no allocation: from 16384
 * floats a sampled bound keeps a few percent of the entries in one
 * vectorized pass and a radix select over their magnitude bits runs on those
 * alone; otherwise (or when the sample misjudges the data) the radix select
 * runs on all n. Both give the same blob. Returns bytes written. */
size_t ps_topk_encode(const float *src, size_t n, uint32_t k, unsigned char *dst,
                      uint32_t *scratch);

/* Validate a TOPK blob of 'len' bytes for a tensor of 'n' elements: len is at
 * least 4, equals 4 + 8k for the k it declares, and every index is < n
 * (indices may repeat and need not be sorted). Stores k in '*k_out' (when
 * not NULL) and returns 0, or returns -1. Values are not checked here. */
int ps_topk_check(const unsigned char *src, size_t len, size_t n, uint32_t *k_out);

/* Add the 'k' (index, value) pairs of the checked TOPK blob 'src' into
 * 'dense', in blob order: dense[idx] += val, so repeated indices add up. */
void ps_topk_scatter_add(const unsigned char *src, uint32_t k, float *dense);

/* -------------------------------------------------------------- row lists */

/* Validate a ROWS blob (little-endian uint32 row indices) of 'len' bytes for
 * a table of 'nrows' rows: len > 0, len % 4 == 0, every index < nrows
 * (repeats allowed). Stores the number of indices in '*count' (when not
 * NULL) and returns 0, or returns -1. */
int ps_rows_check(const unsigned char *blob, size_t len, uint64_t nrows, size_t *count);

/* The i-th index of a checked ROWS blob (may be unaligned). */
uint32_t ps_rows_get(const unsigned char *blob, size_t i);

#endif /* PS_CODEC_H */
