/* CPU dropout: element i is kept when the uniform of Philox word (i % 4) of block i / 4 under the
 * op's seed is >= rate, and scaled by 1 / (1 - rate). The mask is a pure function of (seed, i),
 * so it never depends on the thread count, the mode, or how the work was split; the backward
 * (dropout of the gradient with the same seed) sees the same mask.
 *
 * Philox is most of the work: blocks are generated eight at a time with AVX2 (vpmuludq gives the
 * 32 x 32 -> 64 products) into a buffer in element order, then a plain loop applies them. */
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define EG_DROPOUT_X86 1
#endif

#include "backend/cpu/kernels.h"
#include "backend/cpu/lowp.h"
#include "base/cpu_features.h"
#include "base/error.h"
#include "core/random.h"

/* Blocks per buffer: 256 words, 1 KiB on the stack. */
#define DROPOUT_BLOCKS 64

/* words[4 b + j] = word j of Philox block (first + b), b < n (the portable path). */
static void philox_blocks_scalar(uint64_t key, uint64_t first, int n, uint32_t *words) {
    for (int b = 0; b < n; b++) eg__philox4x32(key, 2, first + (uint64_t)b, words + 4 * b);
}

#ifdef EG_DROPOUT_X86
/* The AVX2 blocks follow EG_CPU like every other kernel (so EG_CPU=baseline tests the portable
 * path), and the dispatch level also checks that the OS saves the YMM registers. */
static bool cpu_has_avx2(void) {
    return eg__cpu_active_level() >= EG__CPU_AVX2;
}

/* hi and lo halves of the eight 32 x 32 -> 64 products a[l] * m. */
__attribute__((target("avx2"), always_inline)) static inline void
mul_hi_lo(__m256i a, __m256i m, __m256i *hi, __m256i *lo) {
    __m256i even = _mm256_mul_epu32(a, m);                       /* lanes 0, 2, 4, 6 */
    __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m); /* lanes 1, 3, 5, 7 */
    *hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
    *lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
}

/* Blocks first .. first + 7 (the same rounds as eg__philox4x32 with counter_high = 2, lane l
 * holding block first + l), returned in element order: out[v] holds elements 8 v .. 8 v + 7 of
 * the 32 the blocks cover. */
__attribute__((target("avx2"), always_inline)) static inline void
philox8_avx2(uint64_t key, uint64_t first, __m256i out[4]) {
    const __m256i m0 = _mm256_set1_epi32((int)0xD2511F53u),
                  m1 = _mm256_set1_epi32((int)0xCD9E8D57u);
    uint32_t low[8], high[8];
    for (int l = 0; l < 8; l++) {
        uint64_t counter = first + (uint64_t)l;
        low[l] = (uint32_t)counter;
        high[l] = (uint32_t)(counter >> 32);
    }
    __m256i c0 = _mm256_loadu_si256((const __m256i *)low);
    __m256i c1 = _mm256_loadu_si256((const __m256i *)high);
    __m256i c2 = _mm256_set1_epi32(2), c3 = _mm256_setzero_si256();
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int round = 0; round < 10; round++) {
        __m256i hi0, lo0, hi1, lo1;
        mul_hi_lo(c0, m0, &hi0, &lo0);
        mul_hi_lo(c2, m1, &hi1, &lo1);
        c0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), _mm256_set1_epi32((int)k0));
        c2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), _mm256_set1_epi32((int)k1));
        c1 = lo1;
        c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    /* (word j of lane l) -> element 4 l + j */
    __m256i t0 = _mm256_unpacklo_epi32(c0, c1), t1 = _mm256_unpackhi_epi32(c0, c1);
    __m256i t2 = _mm256_unpacklo_epi32(c2, c3), t3 = _mm256_unpackhi_epi32(c2, c3);
    __m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
    __m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
    out[0] = _mm256_permute2x128_si256(u0, u1, 0x20);
    out[1] = _mm256_permute2x128_si256(u2, u3, 0x20);
    out[2] = _mm256_permute2x128_si256(u0, u1, 0x31);
    out[3] = _mm256_permute2x128_si256(u2, u3, 0x31);
}

__attribute__((target("avx2"))) static void philox_blocks_avx2(uint64_t key, uint64_t first, int n,
                                                               uint32_t *words) {
    for (int b = 0; b < n; b += 8) {
        __m256i v[4];
        philox8_avx2(key, first + (uint64_t)b, v);
        for (int i = 0; i < 4; i++) _mm256_storeu_si256((__m256i *)(words + 4 * b) + i, v[i]);
    }
}

/* f32 dropout of elements 4 b0 .. 4 b1 (whole groups of 8 blocks, all inside the tensor). */
__attribute__((target("avx2"))) static void dropout_f32_avx2(uint64_t key, uint32_t threshold,
                                                             float scale, const float *x, float *y,
                                                             int64_t b0, int64_t b1) {
    const __m256i below = _mm256_set1_epi32((int32_t)threshold - 1); /* (w >> 8) < 2^24 */
    const __m256 s = _mm256_set1_ps(scale);
    for (int64_t b = b0; b < b1; b += 8) {
        __m256i v[4];
        philox8_avx2(key, (uint64_t)b, v);
        for (int i = 0; i < 4; i++) {
            __m256i keep = _mm256_cmpgt_epi32(_mm256_srli_epi32(v[i], 8), below);
            __m256 value = _mm256_mul_ps(_mm256_loadu_ps(x + 4 * b + 8 * i), s);
            _mm256_storeu_ps(y + 4 * b + 8 * i, _mm256_and_ps(value, _mm256_castsi256_ps(keep)));
        }
    }
}
#endif

static void philox_blocks(uint64_t key, uint64_t first, int n, uint32_t *words) {
#ifdef EG_DROPOUT_X86
    if (cpu_has_avx2()) {
        int whole = n - n % 8;
        philox_blocks_avx2(key, first, whole, words);
        philox_blocks_scalar(key, first + (uint64_t)whole, n - whole, words + 4 * whole);
        return;
    }
#endif
    philox_blocks_scalar(key, first, n, words);
}

typedef struct dropout_job {
    eg_dtype dtype;
    uint64_t seed;
    uint32_t threshold; /* kept when (word >> 8) >= threshold: uniform_f32(word) >= (float)rate */
    double scale;
    const char *x;
    char *y;
    int64_t n;
} dropout_job;

/* Tasks: Philox blocks (four elements each). */
static void dropout_range(void *context, int64_t begin, int64_t end) {
    const dropout_job *j = context;
    uint32_t words[4 * DROPOUT_BLOCKS];
    const uint32_t threshold = j->threshold;
#ifdef EG_DROPOUT_X86
    if (j->dtype == EG_DTYPE_F32 && cpu_has_avx2()) {
        int64_t whole = end * 4 <= j->n ? end : j->n / 4; /* blocks wholly inside the tensor */
        if (whole > begin) {
            whole = begin + (whole - begin) / 8 * 8;
            dropout_f32_avx2(j->seed, threshold, (float)j->scale, (const float *)j->x,
                             (float *)j->y, begin, whole);
            begin = whole;
        }
    }
#endif
    for (int64_t b0 = begin; b0 < end; b0 += DROPOUT_BLOCKS) {
        int blocks = (int)(end - b0 < DROPOUT_BLOCKS ? end - b0 : DROPOUT_BLOCKS);
        philox_blocks(j->seed, (uint64_t)b0, blocks, words);
        int64_t first = 4 * b0, count = 4 * (int64_t)blocks;
        if (first + count > j->n) count = j->n - first;
        if (eg__is_lowp(j->dtype)) { /* the f32 loop on the widened block, rounded once */
            float v[4 * DROPOUT_BLOCKS];
            const char *x = j->x + 2 * first;
            eg__lowp_widen(j->dtype, count, x, 2, v);
            const float scale = (float)j->scale;
            for (int64_t i = 0; i < count; i++) {
                float kept = v[i] * scale;
                v[i] = (words[i] >> 8) >= threshold ? kept : 0.0f;
            }
            eg__lowp_narrow(j->dtype, count, v, j->y + 2 * first, 2);
        } else if (j->dtype == EG_DTYPE_F32) {
            const float *restrict x = (const float *)j->x + first;
            float *restrict y = (float *)j->y + first;
            const float scale = (float)j->scale;
            for (int64_t i = 0; i < count; i++) {
                float v = x[i] * scale;
                y[i] = (words[i] >> 8) >= threshold ? v : 0.0f;
            }
        } else {
            const double *restrict x = (const double *)j->x + first;
            double *restrict y = (double *)j->y + first;
            const double scale = j->scale;
            for (int64_t i = 0; i < count; i++) {
                double v = x[i] * scale;
                y[i] = (words[i] >> 8) >= threshold ? v : 0.0;
            }
        }
    }
}

/* x (any strides) -> y (contiguous): x / (1 - rate) where kept, else 0 */
eg_status eg__cpu_dropout(const eg__kernel_call *call);
eg_status eg__cpu_dropout(const eg__kernel_call *call) {
    eg_tensor *x = eg__contiguous_temp(call->inputs[0]);
    if (!x) return eg_last_status();
    double rate = call->attrs->scalars[0];
    /* uniform_f32(w) = (w >> 8) 2^-24 >= r exactly when (w >> 8) >= ceil(r 2^24): r 2^24 is exact
     */
    double bound = (double)(float)rate * 16777216.0;
    uint32_t threshold = (uint32_t)bound;
    if ((double)threshold < bound) threshold++;
    dropout_job job = {call->output->dtype,  call->attrs->seed, threshold,
                       1.0 / (1.0 - rate),   eg__data(x),       eg__data(call->output),
                       call->output->n_elems};
    int64_t blocks = (job.n + 3) / 4;
    eg__parallel_for(blocks, EG_PARALLEL_GRAIN_ELEMENTWISE / 4, dropout_range, &job);
    eg__unref(x);
    return EG_OK;
}
