/* Internal: bf16 and f16 on the CPU — stored in 16 bits, computed in f32.
 *
 * Every CPU kernel that takes bf16 or f16 widens its inputs to f32 (exactly: both formats are
 * subsets of f32), runs the f32 kernel's own arithmetic on them and rounds each result once, to
 * nearest even, into the 16-bit format. Reductions accumulate as their f32 kernels do (sums in
 * double, in the canonical order of reduce.c) and round once at the end. So a bf16 result is the
 * f32 kernel's result on the widened inputs, rounded: within the f32 kernel's bound plus half an
 * ulp of the format (u = 2^-8 for bf16, 2^-11 for f16).
 *
 * The kernels work on blocks of EG__LOWP_BLOCK elements widened into f32 buffers on the stack
 * (L1-sized: 512 floats is 2 KiB per operand), so the f32 inner loops run unchanged on them;
 * the hottest contiguous loops also have fused paths that widen and round in registers
 * (elementwise_lowp.c), with the same IEEE operations and so the same bits. */
#ifndef EAGLE_SRC_BACKEND_CPU_LOWP_H
#define EAGLE_SRC_BACKEND_CPU_LOWP_H

#include <stdbool.h>
#include <stdint.h>

#include "eagle/dtype.h"
#include "ops/internal.h"

enum { EG__LOWP_BLOCK = 512 };

static inline bool eg__is_lowp(eg_dtype dtype) {
    return dtype == EG_DTYPE_BF16 || dtype == EG_DTYPE_F16;
}

/* dst[i] = element i of src (bf16 or f16, `stride` bytes apart; 0 repeats one element), widened
 * exactly to f32. */
void eg__lowp_widen(eg_dtype dtype, int64_t n, const char *src, int64_t stride, float *dst);

/* Element i of dst (bf16 or f16, `stride` bytes apart) = src[i] rounded to nearest even. */
void eg__lowp_narrow(eg_dtype dtype, int64_t n, const float *src, char *dst, int64_t stride);

/* The same from doubles, each rounded once (not through f32's rounding first: a double rounded
 * to f32 and then to 8 bits can land on the wrong side of a tie). */
void eg__lowp_narrow_doubles(eg_dtype dtype, int64_t n, const double *src, char *dst,
                             int64_t stride);

/* One double rounded once to dtype's 16 bits. */
uint16_t eg__lowp_from_double(eg_dtype dtype, double value);

/* One 16-bit element widened to f32. */
float eg__lowp_to_float(eg_dtype dtype, uint16_t bits);

/* dst[i] = the f32 element i of src, `stride` bytes apart (a gather into a block). */
void eg__gather_f32(int64_t n, const char *src, int64_t stride, float *dst);

/* The fused paths (elementwise_lowp.c), for n elements at pointers p with byte strides s
 * (operand 0 the result, as an nd-loop's inner function gets them): true when they handled the
 * call, false when the block path must (a stride or op they do not take, or the level). */
bool eg__lowp_unary_fast(eg__op op, eg_dtype dtype, int64_t n, char **p, const int64_t *s);
bool eg__lowp_binary_fast(eg__op op, eg_dtype dtype, int64_t n, char **p, const int64_t *s);

/* Contiguous f32 <-> bf16 / f16 in registers at AVX-512 (the same bits as core/dtype.c's
 * conversions); false where the level has none (the caller converts through core/dtype.c). */
bool eg__lowp_narrow_fast(eg_dtype dtype, int64_t n, const float *src, uint16_t *dst);
bool eg__lowp_widen_fast(eg_dtype dtype, int64_t n, const uint16_t *src, float *dst);

/* The nd-loop inner functions of relu_backward (x, g) and mul_add (x, scale, shift) for bf16 and
 * f16; context points at the eg_dtype. */
void eg__lowp_relu_backward_inner(void *context, int64_t n, char **p, const int64_t *s);
void eg__lowp_mul_add_inner(void *context, int64_t n, char **p, const int64_t *s);

#endif
