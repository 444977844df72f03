/* test_codec_vec_avx2.c -- test_codec_vec.c with its copy of the codecs
 * built for AVX2: the loops the library's AVX2 clones run, which a CPU with
 * AVX-512 never picks. Skipped on a CPU without AVX2. */
#define CODEC_COPY_NAME "AVX2"
#define CODEC_COPY_SUPPORTED() __builtin_cpu_supports("avx2")
#define CODEC_COPY_BEGIN \
    _Pragma("GCC push_options") _Pragma("GCC optimize(\"O3\")") _Pragma("GCC target(\"avx2\")")
#include "test_codec_vec.c"
