/* codec_topk.c -- the TOPK wire codec (see codec.h): selection of the k
 * largest magnitudes, blob validation and scatter-add.
 *
 * Selection is exact and deterministic: the blob is the one the full radix
 * selection of codec_ref.c computes (ties to the lower index, NaN largest),
 * byte for byte, whatever the data. For large tensors a sampled bound lets
 * one vectorized pass keep a few percent of the entries as candidates, and
 * the exact selection then runs on those alone. */

#include "codec.h"
#include "codec_bits.h"
#include "codec_ref.h"

#include <string.h>

/* PS_CODEC_BASELINE_ONLY: tests/test_codec_vec.c builds a copy without the
 * AVX2 filter. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(PS_CODEC_BASELINE_ONLY)
#define PS_TOPK_X86 1
#include <immintrin.h>
#endif

size_t ps_topk_encoded_size(uint32_t k) {
    return 4 + 8 * (size_t)k;
}

/* Magnitude key of 'x': its bits without the sign. For non-negative IEEE
 * values the integer order of the bits is the numeric order, so this orders
 * 0 (either sign) < subnormals < normals < inf < NaN, a total order. */
static inline uint32_t mag_key(float x) {
    return f32_bits(x) & 0x7fffffffu;
}

/* Radix select over the 'm' keys at 'keys' (1 <= k <= m): returns the k-th
 * largest key T and stores in '*take_eq' how many entries equal to T belong
 * to the top k (the rest are the keys greater than T). One byte at a time,
 * from the top: histogram, pick the byte holding the k-th largest, keep (in
 * place) only the keys with that byte. O(m), deterministic; 'keys' holds
 * the survivors on return. */
static uint32_t select_keys(uint32_t *keys, size_t m, size_t k, size_t *take_eq) {
    size_t hist[256];
    size_t need = k;
    uint32_t prefix = 0;

    for (int shift = 24; shift >= 0; shift -= 8) {
        memset(hist, 0, sizeof hist);
        for (size_t i = 0; i < m; i++) hist[(keys[i] >> shift) & 0xffu]++;
        unsigned b = 255;
        while (hist[b] < need) {
            need -= hist[b];
            b--;
        }
        prefix |= (uint32_t)b << shift;
        size_t w = 0;
        for (size_t i = 0; i < m; i++)
            if (((keys[i] >> shift) & 0xffu) == b) keys[w++] = keys[i];
        m = w;
    }
    *take_eq = need; /* 1 <= need <= m: all survivors equal the prefix */
    return prefix;
}

/* ------------------------------------------------------------- filtering
 *
 * A filter writes, in increasing index order, the index and the key of every
 * float among the 'n' at 'src' whose key is >= 'lb' (a key, <= 0x7fffffff)
 * to 'cand' and 'keys', and returns their count; or SIZE_MAX once the count
 * would pass 'cap' (the bound was too low). Both arrays must have room for
 * cap + 8 entries: the AVX2 filter stores 8 lanes at a time. */

static size_t filter_scalar(const float *src, size_t from, size_t n, uint32_t lb, uint32_t *cand,
                            uint32_t *keys, size_t m, size_t cap) {
    for (size_t i = from; i < n; i++) {
        uint32_t key = mag_key(src[i]);
        if (key < lb) continue;
        if (m == cap) return SIZE_MAX;
        cand[m] = (uint32_t)i;
        keys[m++] = key;
    }
    return m;
}

#ifdef PS_TOPK_X86
/* Lane numbers of the set bits of each 8-bit mask, lowest first, one per
 * byte: the permutation that packs an AVX2 vector's selected lanes to its
 * front. Entry m's byte j is the position of the j-th set bit of m. */
static const uint64_t pack_lanes[256] = {
    0x0000000000000000ull, 0x0000000000000000ull, 0x0000000000000001ull, 0x0000000000000100ull,
    0x0000000000000002ull, 0x0000000000000200ull, 0x0000000000000201ull, 0x0000000000020100ull,
    0x0000000000000003ull, 0x0000000000000300ull, 0x0000000000000301ull, 0x0000000000030100ull,
    0x0000000000000302ull, 0x0000000000030200ull, 0x0000000000030201ull, 0x0000000003020100ull,
    0x0000000000000004ull, 0x0000000000000400ull, 0x0000000000000401ull, 0x0000000000040100ull,
    0x0000000000000402ull, 0x0000000000040200ull, 0x0000000000040201ull, 0x0000000004020100ull,
    0x0000000000000403ull, 0x0000000000040300ull, 0x0000000000040301ull, 0x0000000004030100ull,
    0x0000000000040302ull, 0x0000000004030200ull, 0x0000000004030201ull, 0x0000000403020100ull,
    0x0000000000000005ull, 0x0000000000000500ull, 0x0000000000000501ull, 0x0000000000050100ull,
    0x0000000000000502ull, 0x0000000000050200ull, 0x0000000000050201ull, 0x0000000005020100ull,
    0x0000000000000503ull, 0x0000000000050300ull, 0x0000000000050301ull, 0x0000000005030100ull,
    0x0000000000050302ull, 0x0000000005030200ull, 0x0000000005030201ull, 0x0000000503020100ull,
    0x0000000000000504ull, 0x0000000000050400ull, 0x0000000000050401ull, 0x0000000005040100ull,
    0x0000000000050402ull, 0x0000000005040200ull, 0x0000000005040201ull, 0x0000000504020100ull,
    0x0000000000050403ull, 0x0000000005040300ull, 0x0000000005040301ull, 0x0000000504030100ull,
    0x0000000005040302ull, 0x0000000504030200ull, 0x0000000504030201ull, 0x0000050403020100ull,
    0x0000000000000006ull, 0x0000000000000600ull, 0x0000000000000601ull, 0x0000000000060100ull,
    0x0000000000000602ull, 0x0000000000060200ull, 0x0000000000060201ull, 0x0000000006020100ull,
    0x0000000000000603ull, 0x0000000000060300ull, 0x0000000000060301ull, 0x0000000006030100ull,
    0x0000000000060302ull, 0x0000000006030200ull, 0x0000000006030201ull, 0x0000000603020100ull,
    0x0000000000000604ull, 0x0000000000060400ull, 0x0000000000060401ull, 0x0000000006040100ull,
    0x0000000000060402ull, 0x0000000006040200ull, 0x0000000006040201ull, 0x0000000604020100ull,
    0x0000000000060403ull, 0x0000000006040300ull, 0x0000000006040301ull, 0x0000000604030100ull,
    0x0000000006040302ull, 0x0000000604030200ull, 0x0000000604030201ull, 0x0000060403020100ull,
    0x0000000000000605ull, 0x0000000000060500ull, 0x0000000000060501ull, 0x0000000006050100ull,
    0x0000000000060502ull, 0x0000000006050200ull, 0x0000000006050201ull, 0x0000000605020100ull,
    0x0000000000060503ull, 0x0000000006050300ull, 0x0000000006050301ull, 0x0000000605030100ull,
    0x0000000006050302ull, 0x0000000605030200ull, 0x0000000605030201ull, 0x0000060503020100ull,
    0x0000000000060504ull, 0x0000000006050400ull, 0x0000000006050401ull, 0x0000000605040100ull,
    0x0000000006050402ull, 0x0000000605040200ull, 0x0000000605040201ull, 0x0000060504020100ull,
    0x0000000006050403ull, 0x0000000605040300ull, 0x0000000605040301ull, 0x0000060504030100ull,
    0x0000000605040302ull, 0x0000060504030200ull, 0x0000060504030201ull, 0x0006050403020100ull,
    0x0000000000000007ull, 0x0000000000000700ull, 0x0000000000000701ull, 0x0000000000070100ull,
    0x0000000000000702ull, 0x0000000000070200ull, 0x0000000000070201ull, 0x0000000007020100ull,
    0x0000000000000703ull, 0x0000000000070300ull, 0x0000000000070301ull, 0x0000000007030100ull,
    0x0000000000070302ull, 0x0000000007030200ull, 0x0000000007030201ull, 0x0000000703020100ull,
    0x0000000000000704ull, 0x0000000000070400ull, 0x0000000000070401ull, 0x0000000007040100ull,
    0x0000000000070402ull, 0x0000000007040200ull, 0x0000000007040201ull, 0x0000000704020100ull,
    0x0000000000070403ull, 0x0000000007040300ull, 0x0000000007040301ull, 0x0000000704030100ull,
    0x0000000007040302ull, 0x0000000704030200ull, 0x0000000704030201ull, 0x0000070403020100ull,
    0x0000000000000705ull, 0x0000000000070500ull, 0x0000000000070501ull, 0x0000000007050100ull,
    0x0000000000070502ull, 0x0000000007050200ull, 0x0000000007050201ull, 0x0000000705020100ull,
    0x0000000000070503ull, 0x0000000007050300ull, 0x0000000007050301ull, 0x0000000705030100ull,
    0x0000000007050302ull, 0x0000000705030200ull, 0x0000000705030201ull, 0x0000070503020100ull,
    0x0000000000070504ull, 0x0000000007050400ull, 0x0000000007050401ull, 0x0000000705040100ull,
    0x0000000007050402ull, 0x0000000705040200ull, 0x0000000705040201ull, 0x0000070504020100ull,
    0x0000000007050403ull, 0x0000000705040300ull, 0x0000000705040301ull, 0x0000070504030100ull,
    0x0000000705040302ull, 0x0000070504030200ull, 0x0000070504030201ull, 0x0007050403020100ull,
    0x0000000000000706ull, 0x0000000000070600ull, 0x0000000000070601ull, 0x0000000007060100ull,
    0x0000000000070602ull, 0x0000000007060200ull, 0x0000000007060201ull, 0x0000000706020100ull,
    0x0000000000070603ull, 0x0000000007060300ull, 0x0000000007060301ull, 0x0000000706030100ull,
    0x0000000007060302ull, 0x0000000706030200ull, 0x0000000706030201ull, 0x0000070603020100ull,
    0x0000000000070604ull, 0x0000000007060400ull, 0x0000000007060401ull, 0x0000000706040100ull,
    0x0000000007060402ull, 0x0000000706040200ull, 0x0000000706040201ull, 0x0000070604020100ull,
    0x0000000007060403ull, 0x0000000706040300ull, 0x0000000706040301ull, 0x0000070604030100ull,
    0x0000000706040302ull, 0x0000070604030200ull, 0x0000070604030201ull, 0x0007060403020100ull,
    0x0000000000070605ull, 0x0000000007060500ull, 0x0000000007060501ull, 0x0000000706050100ull,
    0x0000000007060502ull, 0x0000000706050200ull, 0x0000000706050201ull, 0x0000070605020100ull,
    0x0000000007060503ull, 0x0000000706050300ull, 0x0000000706050301ull, 0x0000070605030100ull,
    0x0000000706050302ull, 0x0000070605030200ull, 0x0000070605030201ull, 0x0007060503020100ull,
    0x0000000007060504ull, 0x0000000706050400ull, 0x0000000706050401ull, 0x0000070605040100ull,
    0x0000000706050402ull, 0x0000070605040200ull, 0x0000070605040201ull, 0x0007060504020100ull,
    0x0000000706050403ull, 0x0000070605040300ull, 0x0000070605040301ull, 0x0007060504030100ull,
    0x0000070605040302ull, 0x0007060504030200ull, 0x0007060504030201ull, 0x0706050403020100ull,
};

/* AVX2 filter: per 8 floats one compare, a movemask, and a left-pack of the
 * selected indices and keys through a lane permutation, stored whole; the
 * count advances by the number selected. No branch depends on the data, so
 * the pass runs near memory speed at any selection rate. */
__attribute__((target("avx2,popcnt"))) static size_t filter_avx2(const float *src, size_t n,
                                                                   uint32_t lb, uint32_t *cand,
                                                                   uint32_t *keys, size_t cap) {
    const __m256i absmask = _mm256_set1_epi32(0x7fffffff);
    const __m256i below = _mm256_set1_epi32((int32_t)lb - 1); /* key >= lb iff key > lb - 1 */
    const __m256i eight = _mm256_set1_epi32(8);
    __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7); /* the lanes' indices */
    size_t m = 0, i = 0;
    for (; i + 8 <= n; i += 8) {
        if (m > cap) return SIZE_MAX;
        __m256i v = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(const void *)(src + i)),
                                     absmask);
        __m256i hit = _mm256_cmpgt_epi32(v, below);
        unsigned mask = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(hit));
        __m128i lanes = _mm_loadl_epi64((const __m128i *)(const void *)&pack_lanes[mask]);
        __m256i perm = _mm256_cvtepu8_epi32(lanes);
        _mm256_storeu_si256((__m256i *)(void *)(cand + m), _mm256_permutevar8x32_epi32(idx, perm));
        _mm256_storeu_si256((__m256i *)(void *)(keys + m), _mm256_permutevar8x32_epi32(v, perm));
        m += (size_t)__builtin_popcount(mask);
        idx = _mm256_add_epi32(idx, eight);
    }
    if (m > cap) return SIZE_MAX;
    return filter_scalar(src, i, n, lb, cand, keys, m, cap);
}
#endif

static size_t topk_filter(const float *src, size_t n, uint32_t lb, uint32_t *cand,
                          uint32_t *keys, size_t cap) {
#ifdef PS_TOPK_X86
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("popcnt"))
        return filter_avx2(src, n, lb, cand, keys, cap);
#endif
    return filter_scalar(src, 0, n, lb, cand, keys, 0, cap);
}

/* ------------------------------------------------------------- selection */

/* Sample size of the fast path's bound, and the smallest 'n' it is used for
 * (below, the sample costs more than it saves). */
#define TOPK_SAMPLE 4096
#define TOPK_FAST_MIN 16384

/* The fast path of ps_topk_encode, for TOPK_FAST_MIN <= n and 1 <= k <= n:
 * a bound 'lb' from a deterministic sample (every stride-th key), chosen so
 * that a few more than the k largest keys are >= lb; one filtering pass
 * keeps those candidates; the exact threshold is selected among them alone.
 * The result is exact whatever the sample says: when at least k keys are
 * >= lb, the top k are all among the candidates (listed in index order, so
 * ties go to the lower index as in the full pass). Returns 0 having written
 * the blob's entries, or -1 when the bound was too high (fewer than k
 * candidates) or too low (more than about n/3): the caller then runs the
 * full selection. 'scratch' (n uint32) holds candidate indices, their keys
 * and a copy of the keys the selection consumes, a third each. */
static int topk_fast(const float *src, size_t n, size_t k, unsigned char *dst,
                     uint32_t *scratch) {
    uint32_t sample[TOPK_SAMPLE];
    size_t s = n / 4 < TOPK_SAMPLE ? n / 4 : TOPK_SAMPLE;
    size_t stride = n / s;
    for (size_t i = 0; i < s; i++) sample[i] = mag_key(src[i * stride]);
    /* Rank in the sample of the bound: the expected count of sampled keys
     * above the true threshold, plus slack for sampling noise (a binomial
     * count's standard deviation is about its square root). */
    size_t ks = (size_t)((double)k * (double)s / (double)n), sd = 0;
    while ((sd + 1) * (sd + 1) <= ks) sd++;
    size_t rank = ks + 4 * sd + 8;
    if (rank >= s / 4) return -1; /* k is a large fraction: filtering would not pay */
    size_t unused;
    uint32_t lb = select_keys(sample, s, rank, &unused);

    size_t third = n / 3, cap = third - 8;
    uint32_t *cand = scratch, *keys = scratch + third, *work = scratch + 2 * third;
    size_t m = topk_filter(src, n, lb, cand, keys, cap);
    if (m == SIZE_MAX || m < k) return -1;

    memcpy(work, keys, m * sizeof *work);
    size_t take_eq = 0;
    uint32_t thr = select_keys(work, m, k, &take_eq);

    /* Emit as the full pass does: every key above the threshold and the
     * first 'take_eq' equal to it, in index order. Exactly k entries. */
    unsigned char *idx_out = dst + 4;
    unsigned char *val_out = dst + 4 + 4 * k;
    size_t w = 0;
    for (size_t j = 0; j < m && w < k; j++) {
        uint32_t key = keys[j];
        if (key > thr || (key == thr && take_eq > 0)) {
            if (key == thr) take_eq--;
            store_u32(idx_out + 4 * w, cand[j]);
            store_f32(val_out + 4 * w, src[cand[j]]);
            w++;
        }
    }
    return 0;
}

size_t ps_topk_encode(const float *src, size_t n, uint32_t k, unsigned char *dst,
                      uint32_t *scratch) {
    if ((size_t)k > n) k = (uint32_t)n;
    if (k > 0 && n >= TOPK_FAST_MIN) {
        store_u32(dst, k);
        if (topk_fast(src, n, k, dst, scratch) == 0) return ps_topk_encoded_size(k);
    }
    /* Small tensors, zero k, large k or a sample that misjudged the data:
     * the full selection (codec_ref.c), which computes the same blob. */
    return ps_topk_encode_ref(src, n, k, dst, scratch);
}

/* ------------------------------------------------------- checks, scatter */

int ps_topk_check(const unsigned char *src, size_t len, size_t n, uint32_t *k_out) {
    if (src == NULL || len < 4) return -1;
    uint32_t k = load_u32(src);
    if ((uint64_t)len != 4 + 8 * (uint64_t)k) return -1;
    const unsigned char *idx = src + 4;
    for (uint32_t j = 0; j < k; j++)
        if ((size_t)load_u32(idx + 4 * (size_t)j) >= n) return -1;
    if (k_out) *k_out = k;
    return 0;
}

void ps_topk_scatter_add(const unsigned char *src, uint32_t k, float *dense) {
    const unsigned char *idx = src + 4;
    const unsigned char *val = src + 4 + 4 * (size_t)k;
    for (uint32_t j = 0; j < k; j++)
        dense[load_u32(idx + 4 * (size_t)j)] += load_f32(val + 4 * (size_t)j);
}

