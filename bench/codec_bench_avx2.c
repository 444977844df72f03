/* codec_bench_avx2.c -- codec_bench on a copy of the codecs built for AVX2,
 * the clone a CPU without AVX-512 picks: on an AVX-512 machine the library
 * never runs it, so its speed is measured here (`make bench` part 1b).
 *
 * The copy is common/codec.c and codec_topk.c compiled into this program at
 * -O3 for the "avx2" target, every public name prefixed avx2_ (as
 * tests/test_codec_vec_avx2.c builds one to pin its bits), with
 * PS_CODEC_NO_CLONES: the loops are built once, for AVX2, and the paths an
 * AVX2 CPU picks at run time stay (F16C for F16, TOPK's AVX2 filter).
 * codec_bench.c's body then times the copy instead of the library. Exits 0
 * with a SKIP line on a CPU without AVX2. */

#include "codec.h"

#define CODEC_BENCH_NAME "codec_bench_avx2"
#define CODEC_BENCH_WHAT "a copy of the codecs built for AVX2 (the clone a CPU without AVX-512 runs)"
#define CODEC_BENCH_SUPPORTED() __builtin_cpu_supports("avx2")

#define PS_CODEC_NO_CLONES
#pragma GCC push_options
#pragma GCC optimize("O3")
#pragma GCC target("avx2")
#define ps_format_parse avx2_format_parse
#define ps_format_name avx2_format_name
#define ps_dense_encoded_size avx2_dense_encoded_size
#define ps_f32_to_f16 avx2_f32_to_f16
#define ps_f16_to_f32 avx2_f16_to_f32
#define ps_f32_to_bf16 avx2_f32_to_bf16
#define ps_bf16_to_f32 avx2_bf16_to_f32
#define ps_encode avx2_encode
#define ps_decode avx2_decode
#define ps_encode_feedback avx2_encode_feedback
#define ps_rows_check avx2_rows_check
#define ps_rows_get avx2_rows_get
#define ps_topk_encoded_size avx2_topk_encoded_size
#define ps_topk_encode avx2_topk_encode
#define ps_topk_check avx2_topk_check
#define ps_topk_scatter_add avx2_topk_scatter_add
#include "codec.c"
#include "codec_topk.c"
#pragma GCC pop_options

/* The names stay mapped: codec_bench.c's calls go to the copy. */
#include "codec_bench.c"
