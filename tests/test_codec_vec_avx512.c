/* test_codec_vec_avx512.c -- test_codec_vec.c with its copy of the codecs
 * built for x86-64-v4 (AVX-512), the library's first clone. Skipped on a
 * CPU without AVX-512 F/BW/DQ/VL. */
#define CODEC_COPY_NAME "x86-64-v4"
#define CODEC_COPY_SUPPORTED()                                                   \
    (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && \
     __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
#define CODEC_COPY_BEGIN                                                  \
    _Pragma("GCC push_options") _Pragma("GCC optimize(\"O3\")")         \
        _Pragma("GCC target(\"arch=x86-64-v4\")")
#include "test_codec_vec.c"
