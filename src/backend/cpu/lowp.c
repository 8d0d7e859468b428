/* bf16 and f16 blocks to and from f32 (see lowp.h). Contiguous runs go straight through the
 * vectorized conversions of core/dtype.c; strided ones are gathered into (or scattered from) a
 * block of 16-bit elements first. */
#include "backend/cpu/lowp.h"

#include <math.h>
#include <string.h>

enum { GATHER_BLOCK = 256 };

void eg__lowp_widen(eg_dtype dtype, int64_t n, const char *src, int64_t stride, float *dst) {
    if (n <= 0) return;
    if (stride == 0) {
        float value = eg__lowp_to_float(dtype, *(const uint16_t *)(const void *)src);
        for (int64_t i = 0; i < n; i++) dst[i] = value;
        return;
    }
    if (stride == 2) {
        if (eg__lowp_widen_fast(dtype, n, (const uint16_t *)(const void *)src, dst)) return;
        if (dtype == EG_DTYPE_BF16)
            eg_bf16_to_f32((const uint16_t *)(const void *)src, dst, (size_t)n);
        else
            eg_f16_to_f32((const uint16_t *)(const void *)src, dst, (size_t)n);
        return;
    }
    uint16_t bits[GATHER_BLOCK];
    for (int64_t begin = 0; begin < n; begin += GATHER_BLOCK) {
        int64_t count = n - begin < GATHER_BLOCK ? n - begin : GATHER_BLOCK;
        const char *p = src + begin * stride;
        for (int64_t i = 0; i < count; i++) memcpy(&bits[i], p + i * stride, 2);
        if (dtype == EG_DTYPE_BF16)
            eg_bf16_to_f32(bits, dst + begin, (size_t)count);
        else
            eg_f16_to_f32(bits, dst + begin, (size_t)count);
    }
}

void eg__lowp_narrow(eg_dtype dtype, int64_t n, const float *src, char *dst, int64_t stride) {
    if (n <= 0) return;
    if (stride == 2) {
        if (eg__lowp_narrow_fast(dtype, n, src, (uint16_t *)(void *)dst)) return;
        if (dtype == EG_DTYPE_BF16)
            eg_f32_to_bf16(src, (uint16_t *)(void *)dst, (size_t)n);
        else
            eg_f32_to_f16(src, (uint16_t *)(void *)dst, (size_t)n);
        return;
    }
    uint16_t bits[GATHER_BLOCK];
    for (int64_t begin = 0; begin < n; begin += GATHER_BLOCK) {
        int64_t count = n - begin < GATHER_BLOCK ? n - begin : GATHER_BLOCK;
        if (dtype == EG_DTYPE_BF16)
            eg_f32_to_bf16(src + begin, bits, (size_t)count);
        else
            eg_f32_to_f16(src + begin, bits, (size_t)count);
        char *p = dst + begin * stride;
        for (int64_t i = 0; i < count; i++) memcpy(p + i * stride, &bits[i], 2);
    }
}

/* d rounded to f32 toward zero, with the last bit set when that was inexact ("round to odd"):
 * rounding this to a format of at most 22 significant bits rounds d itself correctly, since the
 * odd bit stands for everything cut off and can never make a tie. */
static float round_to_odd(double d) {
    float f = (float)d;
    if (isfinite(f) && (double)f != d) {
        uint32_t bits;
        memcpy(&bits, &f, 4);
        if (fabs((double)f) > fabs(d)) bits--; /* one ulp toward zero: f is not 0 here */
        bits |= 1u;
        memcpy(&f, &bits, 4);
    }
    return f; /* an f32 overflow is past either format's range: infinity is its rounding too */
}

void eg__lowp_narrow_doubles(eg_dtype dtype, int64_t n, const double *src, char *dst,
                             int64_t stride) {
    float block[GATHER_BLOCK];
    for (int64_t begin = 0; begin < n; begin += GATHER_BLOCK) {
        int64_t count = n - begin < GATHER_BLOCK ? n - begin : GATHER_BLOCK;
        for (int64_t i = 0; i < count; i++) block[i] = round_to_odd(src[begin + i]);
        eg__lowp_narrow(dtype, count, block, dst + begin * stride, stride);
    }
}

uint16_t eg__lowp_from_double(eg_dtype dtype, double value) {
    float f = round_to_odd(value);
    uint16_t bits;
    if (dtype == EG_DTYPE_BF16)
        eg_f32_to_bf16(&f, &bits, 1);
    else
        eg_f32_to_f16(&f, &bits, 1);
    return bits;
}

float eg__lowp_to_float(eg_dtype dtype, uint16_t bits) {
    float f;
    if (dtype == EG_DTYPE_BF16)
        eg_bf16_to_f32(&bits, &f, 1);
    else
        eg_f16_to_f32(&bits, &f, 1);
    return f;
}

void eg__gather_f32(int64_t n, const char *src, int64_t stride, float *dst) {
    if (stride == 4) {
        memcpy(dst, src, (size_t)n * 4);
        return;
    }
    for (int64_t i = 0; i < n; i++) memcpy(&dst[i], src + i * stride, 4);
}
