#include <math.h>
#include <string.h>

#define EG_DTYPE_SIZE_DEFINITION /* the real eg_dtype_size is defined here */
#include "base/cpu_features.h"
#include "core/tensor_internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define EG_HAVE_X86 1
#endif

const size_t eg__dtype_sizes[EG_DTYPE_COUNT] = {4, 8, 2, 2, 4, 8, 1, 1, 1};
static const char *const dtype_names[EG_DTYPE_COUNT] = {"f32", "f64", "f16", "bf16", "i32",
                                                        "i64", "u8",  "bool", "i8"};

size_t eg_dtype_size(eg_dtype dtype) {
    return (unsigned)dtype < EG_DTYPE_COUNT ? eg__dtype_sizes[dtype] : 0;
}

const char *eg_dtype_name(eg_dtype dtype) {
    return (unsigned)dtype < EG_DTYPE_COUNT ? dtype_names[dtype] : "invalid";
}

bool eg_dtype_is_float(eg_dtype dtype) {
    return dtype == EG_DTYPE_F32 || dtype == EG_DTYPE_F64 || dtype == EG_DTYPE_F16 ||
           dtype == EG_DTYPE_BF16;
}

/* ---- scalar reference conversions (also the fallback without F16C) ---- */

static uint16_t f32_to_f16_scalar(float value) {
    uint32_t x;
    memcpy(&x, &value, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t exponent = (x >> 23) & 0xffu;
    uint32_t mantissa = x & 0x7fffffu;
    if (exponent == 0xffu) /* inf or NaN; keep NaN quiet and non-zero */
        return (uint16_t)(sign | 0x7c00u | (mantissa ? 0x200u | (mantissa >> 13) : 0));
    int32_t e = (int32_t)exponent - 127 + 15;
    if (e >= 31) return (uint16_t)(sign | 0x7c00u);
    if (e <= 0) {
        if (e < -10) return (uint16_t)sign;
        mantissa |= 0x800000u;
        uint32_t shift = (uint32_t)(14 - e);
        uint32_t half = mantissa >> shift;
        uint32_t remainder = mantissa & ((1u << shift) - 1);
        uint32_t halfway = 1u << (shift - 1);
        if (remainder > halfway || (remainder == halfway && (half & 1u))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = sign | ((uint32_t)e << 10) | (mantissa >> 13);
    uint32_t remainder = mantissa & 0x1fffu;
    if (remainder > 0x1000u || (remainder == 0x1000u && (half & 1u))) half++; /* may carry */
    return (uint16_t)half;
}

static float f16_to_f32_scalar(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exponent = (h >> 10) & 0x1fu;
    uint32_t mantissa = h & 0x3ffu;
    uint32_t x;
    if (exponent == 0) {
        if (mantissa == 0) {
            x = sign;
        } else { /* subnormal: renormalise */
            int e = -1;
            do {
                e++;
                mantissa <<= 1;
            } while ((mantissa & 0x400u) == 0);
            x = sign | ((uint32_t)(127 - 15 - e) << 23) | ((mantissa & 0x3ffu) << 13);
        }
    } else if (exponent == 31) {
        x = sign | 0x7f800000u | (mantissa << 13);
    } else {
        x = sign | ((exponent - 15 + 127) << 23) | (mantissa << 13);
    }
    float value;
    memcpy(&value, &x, 4);
    return value;
}

#ifdef EG_HAVE_X86
__attribute__((target("f16c,avx"))) static void f32_to_f16_f16c(const float *src, uint16_t *dst,
                                                                  size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128((__m128i *)(dst + i), h);
    }
    for (; i < n; i++) dst[i] = f32_to_f16_scalar(src[i]);
}

__attribute__((target("f16c,avx"))) static void f16_to_f32_f16c(const uint16_t *src, float *dst,
                                                                  size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++) dst[i] = f16_to_f32_scalar(src[i]);
}
#endif

void eg_f32_to_f16(const float *src, uint16_t *dst, size_t n) {
#ifdef EG_HAVE_X86
    if (eg__cpu_has_f16c()) {
        f32_to_f16_f16c(src, dst, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++) dst[i] = f32_to_f16_scalar(src[i]);
}

void eg_f16_to_f32(const uint16_t *src, float *dst, size_t n) {
#ifdef EG_HAVE_X86
    if (eg__cpu_has_f16c()) {
        f16_to_f32_f16c(src, dst, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++) dst[i] = f16_to_f32_scalar(src[i]);
}

/* Round to nearest even; a NaN keeps its sign and top payload bits with the quiet bit set
 * (truncating could make it an infinity). Written without branches so that the compiler
 * vectorizes it: compiled once per dispatch level (the same integer operations, so the same
 * bits on every path). */
static inline __attribute__((always_inline)) void f32_to_bf16_body(const float *src,
                                                                   uint16_t *dst, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t x;
        memcpy(&x, &src[i], 4);
        uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
        uint32_t quiet_nan = (x >> 16) | 0x40u;
        dst[i] = (uint16_t)((x & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
    }
}

static void f32_to_bf16_baseline(const float *src, uint16_t *dst, size_t n) {
    f32_to_bf16_body(src, dst, n);
}
#ifdef EG_HAVE_X86
__attribute__((target("avx2"))) static void f32_to_bf16_avx2(const float *src, uint16_t *dst,
                                                              size_t n) {
    f32_to_bf16_body(src, dst, n);
}
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2"))) static void
f32_to_bf16_avx512(const float *src, uint16_t *dst, size_t n) {
    f32_to_bf16_body(src, dst, n);
}
#endif

void eg_f32_to_bf16(const float *src, uint16_t *dst, size_t n) {
#ifdef EG_HAVE_X86
    eg__cpu_level level = eg__cpu_active_level();
    if (level >= EG__CPU_AVX512) {
        f32_to_bf16_avx512(src, dst, n);
        return;
    }
    if (level >= EG__CPU_AVX2) {
        f32_to_bf16_avx2(src, dst, n);
        return;
    }
#endif
    f32_to_bf16_baseline(src, dst, n);
}

void eg_bf16_to_f32(const uint16_t *src, float *dst, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t x = (uint32_t)src[i] << 16;
        memcpy(&dst[i], &x, 4);
    }
}

double eg__load_as_double(const void *data, eg_dtype dtype, int64_t index) {
    switch (dtype) {
    case EG_DTYPE_F32: return ((const float *)data)[index];
    case EG_DTYPE_F64: return ((const double *)data)[index];
    case EG_DTYPE_F16: return f16_to_f32_scalar(((const uint16_t *)data)[index]);
    case EG_DTYPE_BF16: {
        float value;
        eg_bf16_to_f32(&((const uint16_t *)data)[index], &value, 1);
        return value;
    }
    case EG_DTYPE_I32: return ((const int32_t *)data)[index];
    case EG_DTYPE_I64: return (double)((const int64_t *)data)[index];
    case EG_DTYPE_U8: return ((const uint8_t *)data)[index];
    case EG_DTYPE_BOOL: return ((const uint8_t *)data)[index] != 0;
    case EG_DTYPE_I8: return ((const int8_t *)data)[index];
    default: return NAN;
    }
}

/* Float to integer conversion of out-of-range values is undefined in C; saturate instead. */
static int64_t saturate_i64(double value, double low, double high) {
    if (value != value) return 0;
    if (value <= low) return (int64_t)low;
    if (value >= high) return (int64_t)high;
    return (int64_t)value;
}

void eg__store_from_double(void *data, eg_dtype dtype, int64_t index, double value) {
    switch (dtype) {
    case EG_DTYPE_F32: ((float *)data)[index] = (float)value; break;
    case EG_DTYPE_F64: ((double *)data)[index] = value; break;
    case EG_DTYPE_F16: ((uint16_t *)data)[index] = f32_to_f16_scalar((float)value); break;
    case EG_DTYPE_BF16: {
        float f = (float)value;
        eg_f32_to_bf16(&f, &((uint16_t *)data)[index], 1);
        break;
    }
    case EG_DTYPE_I32:
        ((int32_t *)data)[index] = (int32_t)saturate_i64(value, -2147483648.0, 2147483647.0);
        break;
    case EG_DTYPE_I64:
        ((int64_t *)data)[index] = saturate_i64(value, -9223372036854775808.0, 9223372036854774784.0);
        break;
    case EG_DTYPE_U8: ((uint8_t *)data)[index] = (uint8_t)saturate_i64(value, 0.0, 255.0); break;
    case EG_DTYPE_BOOL: ((uint8_t *)data)[index] = value != 0.0; break;
    case EG_DTYPE_I8: ((int8_t *)data)[index] = (int8_t)saturate_i64(value, -128.0, 127.0); break;
    default: break;
    }
}
