/* Internal: bf16 and f16 widened and rounded in AVX-512 registers, 16 lanes at a time (shared by
 * the fused elementwise loops and pooling). Each gives exactly the bits of core/dtype.c's
 * conversions: bf16 -> f32 is a shift; f32 -> bf16 takes dtype.c's integer steps,
 * (x + 0x7fff + lsb) >> 16 and a NaN's top half with the quiet bit; f16 both ways is F16C's
 * vcvtph2ps / vcvtps2ph (nearest even), as dtype.c uses. Loads and stores take a lane mask (all
 * ones in a loop's body, the tail's lanes at its end). */
#ifndef EAGLE_SRC_BACKEND_CPU_LOWP_SIMD_H
#define EAGLE_SRC_BACKEND_CPU_LOWP_SIMD_H

#include <stdbool.h>
#include <stdint.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define EG__LOWP_X86 1

#define EG__LOWP_AVX512_TARGET                                                                     \
    __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c")))
/* With AVX512_BF16 as well (eg__cpu_has_avx512_bf16()). */
#define EG__LOWP_AVX512_BF16_TARGET                                                                \
    __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c,avx512bf16")))
#define EG__LOWP_INLINE static inline __attribute__((always_inline))

EG__LOWP_AVX512_TARGET EG__LOWP_INLINE __m512 eg__lowp_load16(bool bf16, const uint16_t *p,
                                                              __mmask16 m) {
    __m256i h = _mm256_maskz_loadu_epi16(m, p);
    if (bf16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}

EG__LOWP_AVX512_TARGET EG__LOWP_INLINE void eg__lowp_store16(bool bf16, uint16_t *p, __mmask16 m,
                                                             __m512 v) {
    __m256i h;
    if (bf16) {
        __m512i x = _mm512_castps_si512(v);
        __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
        __m512i rounded = _mm512_srli_epi32(
            _mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), lsb), 16);
        __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x40));
        __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        h = _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(rounded, nan, quiet));
    } else {
        h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
    }
    _mm256_mask_storeu_epi16(p, m, h);
}

/* vcvtneps2bf16 rounds 16 lanes to bf16 in one instruction, with the integer steps' bits for every
 * f32 input but the subnormals, which it takes as zero (checked on all 2^32 inputs): a vector
 * holding one (|v| < 2^-126, rare) takes the integer steps instead. */
EG__LOWP_AVX512_BF16_TARGET EG__LOWP_INLINE void eg__lowp_store16_native(bool bf16, uint16_t *p,
                                                                         __mmask16 m, __m512 v) {
    if (bf16 && !_mm512_fpclass_ps_mask(v, 0x20)) {
        _mm256_mask_storeu_epi16(p, m, (__m256i)_mm512_cvtneps_pbh(v));
        return;
    }
    eg__lowp_store16(bf16, p, m, v);
}
#endif

#endif
