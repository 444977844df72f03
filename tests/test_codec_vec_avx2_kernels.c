/* test_codec_vec_avx2_kernels.c -- test_codec_vec.c with its copy of the
 * codecs built for AVX2 with the intrinsic kernels kept (PS_CODEC_NO_CLONES):
 * what an AVX2 CPU without AVX-512 runs (F16C conversions, the BF16 and I8
 * encode kernels, TOPK's AVX2 filter), which the library on an AVX-512 CPU
 * never picks. Skipped on a CPU without AVX2 and F16C. */
#define CODEC_COPY_NAME "AVX2 with kernels"
#define CODEC_COPY_KERNELS
#define CODEC_COPY_SUPPORTED() (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c"))
#define CODEC_COPY_BEGIN \
    _Pragma("GCC push_options") _Pragma("GCC optimize(\"O3\")") _Pragma("GCC target(\"avx2\")")
#include "test_codec_vec.c"
