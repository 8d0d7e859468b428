/* Eagle — element types, and conversions to and from the 16-bit floats. */
#ifndef EAGLE_DTYPE_H
#define EAGLE_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum eg_dtype {
    EG_DTYPE_F32 = 0,
    EG_DTYPE_F64,
    EG_DTYPE_F16,
    EG_DTYPE_BF16,
    EG_DTYPE_I32,
    EG_DTYPE_I64,
    EG_DTYPE_U8,
    EG_DTYPE_BOOL,
    EG_DTYPE_I8, /* signed bytes: quantized weights (eg_quantize_int8, ops.h) */
    EG_DTYPE_COUNT
} eg_dtype;

/* Bytes per element; 0 for an invalid dtype. */
size_t eg_dtype_size(eg_dtype dtype);
/* "f32", "bf16", ...; "invalid" for an out-of-range value. Static storage. */
const char *eg_dtype_name(eg_dtype dtype);
bool eg_dtype_is_float(eg_dtype dtype);

/* IEEE half and bfloat16 conversions (round to nearest even; NaN stays NaN). Uses F16C when the
 * CPU has it. n may be 0. */
void eg_f32_to_f16(const float *src, uint16_t *dst, size_t n);
void eg_f16_to_f32(const uint16_t *src, float *dst, size_t n);
void eg_f32_to_bf16(const float *src, uint16_t *dst, size_t n);
void eg_bf16_to_f32(const uint16_t *src, float *dst, size_t n);

#ifdef __cplusplus
}
#endif
#endif
