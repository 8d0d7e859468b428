/* f32 vector math (see vecmath.h). Coefficients come from bench/elementwise/fit_vecmath.py
 * (near-minimax relative error, fitted against mpmath). */
#include "backend/cpu/vecmath.h"

#include <immintrin.h>
#include <stdbool.h>
#include <string.h>

/* FMAs are written out (vecmath_kernels.h's madd), never left to the compiler: GCC contracts
 * nothing in ISO C mode (-std=c11 implies -ffp-contract=off); clang contracts within an
 * expression unless told not to. So each level's bits are those of its source, whatever the
 * compiler. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif
/* The vector helpers (vecmath_kernels.h) are always inlined: no vector crosses a call boundary. */
#pragma GCC diagnostic ignored "-Wpsabi"

typedef float vf8 __attribute__((vector_size(32)));
typedef int32_t vi8 __attribute__((vector_size(32)));
typedef uint32_t vu8 __attribute__((vector_size(32)));
typedef float vf16 __attribute__((vector_size(64)));
typedef int32_t vi16 __attribute__((vector_size(64)));
typedef uint32_t vu16 __attribute__((vector_size(64)));

/* A macro, not a function: a function without the AVX2 target attribute, inlined into an AVX2
 * one, has its vectors assembled lane by lane by GCC 12. */
#define splat8(v) ((vf8){(v), (v), (v), (v), (v), (v), (v), (v)})
#define splat16(v)                                                                                 \
    ((vf16){(v), (v), (v), (v), (v), (v), (v), (v), (v), (v), (v), (v), (v), (v), (v), (v)})

/* The functions, once per level (vecmath_kernels.h): exp_baseline, exp_avx2, exp_avx512, ... */
#define vf        vf8
#define vi        vi8
#define vu        vu8
#define splat     splat8
#define LANES     8
#define VM_AVX512 0

#define VM_SUFFIX baseline
#define VM_TARGET
#define VM_FMA 0
#include "backend/cpu/vecmath_kernels.h"
#undef VM_SUFFIX
#undef VM_TARGET
#undef VM_FMA

#define VM_SUFFIX avx2
#define VM_TARGET __attribute__((target("avx2,fma,f16c")))
#define VM_FMA    1
#include "backend/cpu/vecmath_kernels.h"
#undef VM_SUFFIX
#undef VM_TARGET
#undef VM_FMA

#undef vf
#undef vi
#undef vu
#undef splat
#undef LANES
#undef VM_AVX512
#define vf        vf16
#define vi        vi16
#define vu        vu16
#define splat     splat16
#define LANES     16
#define VM_AVX512 1

#define VM_SUFFIX avx512
#define VM_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c")))
#define VM_FMA    1
#include "backend/cpu/vecmath_kernels.h"
#undef VM_SUFFIX
#undef VM_TARGET
#undef VM_FMA

#undef vf
#undef vi
#undef vu
#undef splat
#undef LANES
#undef VM_AVX512

typedef void (*driver_fn)(int64_t n, float *out, const float *in);
static const driver_fn drivers[EG__CPU_LEVEL_COUNT][EG__VECMATH_COUNT] = {
    {exp_baseline, log_baseline, tanh_baseline, sigmoid_baseline, gelu_baseline, softplus_baseline,
     exp_fast_baseline, tanh_fast_baseline, sigmoid_fast_baseline, gelu_fast_baseline},
    {exp_avx2, log_avx2, tanh_avx2, sigmoid_avx2, gelu_avx2, softplus_avx2, exp_fast_avx2,
     tanh_fast_avx2, sigmoid_fast_avx2, gelu_fast_avx2},
    {exp_avx512, log_avx512, tanh_avx512, sigmoid_avx512, gelu_avx512, softplus_avx512,
     exp_fast_avx512, tanh_fast_avx512, sigmoid_fast_avx512, gelu_fast_avx512},
};

void eg__vecmath_f32_at(eg__cpu_level level, eg__vecmath_fn fn, int64_t n, float *out,
                        const float *in) {
    if (level > eg__cpu_best_level()) level = eg__cpu_best_level();
    drivers[level][fn](n, out, in);
}

void eg__vecmath_f32(eg__vecmath_fn fn, int64_t n, float *out, const float *in) {
    drivers[eg__cpu_active_level()][fn](n, out, in);
}

void eg__vecmath_f32_strided(eg__vecmath_fn fn, int64_t n, char *out, int64_t out_stride,
                             const char *in, int64_t in_stride) {
    enum { CHUNK = 256 };
    driver_fn driver = drivers[eg__cpu_active_level()][fn];
    float buffer[CHUNK];
    for (int64_t begin = 0; begin < n; begin += CHUNK) {
        int64_t count = n - begin < CHUNK ? n - begin : CHUNK;
        for (int64_t i = 0; i < count; i++)
            memcpy(&buffer[i], in + (begin + i) * in_stride, sizeof(float));
        driver(count, buffer, buffer);
        for (int64_t i = 0; i < count; i++)
            memcpy(out + (begin + i) * out_stride, &buffer[i], sizeof(float));
    }
}

typedef void (*driver16_fn)(int64_t n, uint16_t *out, const uint16_t *in);
/* [level][0: bf16, 1: f16][fn]; the baseline has no f16 drivers (no F16C); the fast variants
 * have none (fast math is f32 only: vecmath.h) */
static const driver16_fn drivers16[EG__CPU_LEVEL_COUNT][2][EG__VECMATH_COUNT] = {
    {{exp_bf16_baseline, log_bf16_baseline, tanh_bf16_baseline, sigmoid_bf16_baseline,
      gelu_bf16_baseline, softplus_bf16_baseline},
     {NULL, NULL, NULL, NULL, NULL, NULL}},
    {{exp_bf16_avx2, log_bf16_avx2, tanh_bf16_avx2, sigmoid_bf16_avx2, gelu_bf16_avx2,
      softplus_bf16_avx2},
     {exp_f16_avx2, log_f16_avx2, tanh_f16_avx2, sigmoid_f16_avx2, gelu_f16_avx2,
      softplus_f16_avx2}},
    {{exp_bf16_avx512, log_bf16_avx512, tanh_bf16_avx512, sigmoid_bf16_avx512, gelu_bf16_avx512,
      softplus_bf16_avx512},
     {exp_f16_avx512, log_f16_avx512, tanh_f16_avx512, sigmoid_f16_avx512, gelu_f16_avx512,
      softplus_f16_avx512}},
};

/* AVX-512 with AVX512_BF16: the same bits (vecmath_kernels.h) */
static const driver16_fn bf16_native[EG__VECMATH_COUNT] = {
    exp_bf16_native_avx512,     log_bf16_native_avx512,  tanh_bf16_native_avx512,
    sigmoid_bf16_native_avx512, gelu_bf16_native_avx512, softplus_bf16_native_avx512};

bool eg__vecmath_lowp(eg__vecmath_fn fn, eg_dtype dtype, int64_t n, uint16_t *out,
                      const uint16_t *in) {
    bool f16 = dtype == EG_DTYPE_F16;
    if (fn >= EG__VECMATH_EXP_FAST) return false;
    if ((!f16 && dtype != EG_DTYPE_BF16) || (f16 && !eg__cpu_has_f16c())) return false;
    eg__cpu_level level = eg__cpu_active_level();
    if (!f16 && level >= EG__CPU_AVX512 && eg__cpu_has_avx512_bf16()) {
        bf16_native[fn](n, out, in);
        return true;
    }
    driver16_fn driver = drivers16[level][f16][fn];
    if (!driver) return false;
    driver(n, out, in);
    return true;
}

const char *eg__vecmath_name(eg__vecmath_fn fn) {
    static const char *const names[EG__VECMATH_COUNT] = {
        "exp",      "log",      "tanh",      "sigmoid",      "gelu",
        "softplus", "exp_fast", "tanh_fast", "sigmoid_fast", "gelu_fast"};
    return (unsigned)fn < EG__VECMATH_COUNT ? names[fn] : "?";
}
