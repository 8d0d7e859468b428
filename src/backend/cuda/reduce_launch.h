/* Internal: the reduction and check-numerics kernels (reduce.cu), in plain C types for both
 * compilers.
 *
 * A reduction's input is handed over as the CPU backend sees it (src/backend/cpu/reduce.c): a
 * contiguous array viewed as (outer, reduced, inner), group g = o * inner + i reducing the
 * elements o * reduced * inner + k * inner + i, k in [0, reduced), into out[g]. The C side
 * (reduce.c) makes that view, with a permuted copy where the axes demand one, exactly as the CPU
 * does, so that both backends enumerate every group's elements in the same order. */
#ifndef EAGLE_SRC_BACKEND_CUDA_REDUCE_LAUNCH_H
#define EAGLE_SRC_BACKEND_CUDA_REDUCE_LAUNCH_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/cuda/copy_launch.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The element types the reduction, softmax and normalization kernels take (the C side maps
 * Eagle's dtypes onto these). */
typedef enum eg__cuda_scalar {
    EG__CUDA_SCALAR_F32,
    EG__CUDA_SCALAR_F64,
    EG__CUDA_SCALAR_I32,
    EG__CUDA_SCALAR_I64,
    EG__CUDA_SCALAR_U8
} eg__cuda_scalar;

/* The CPU's canonical summation block (reduce.c's SUM_BLOCK): f32/f64 sums cut the reduced
 * elements into blocks of this many; within a block element k goes to double lane k % 8 (the
 * tail past the block's last multiple of 8 to lane 0), a block's total is 0 + lane 0 + ... +
 * lane 7 and the result 0 + total of block 0 + total of block 1 + .... The GPU adds in exactly
 * that order, so its sums and means have the CPU's bits. */
#define EG__CUDA_SUM_BLOCK 65536

/* Device scratch bytes eg__cuda_sum needs for groups sums over `reduced` elements: the block
 * totals when a group has more than one block, else 0 (scratch may then be NULL). */
size_t eg__cuda_sum_scratch_bytes(int64_t groups, int64_t reduced);

/* Enqueues out[g] = the sum (mean when `mean`: the sum / reduced) of group g, for type f32,
 * f64 (accumulated in double, the canonical order above) or i32, i64 (accumulated in int64,
 * wrapping; the result truncated to the type, like the CPU). */
void eg__cuda_sum(eg__cuda_scalar type, const void *x, int64_t groups, int64_t inner,
                  int64_t reduced, int mean, void *out, void *scratch, cudaStream_t stream);

/* The reductions other than sum and mean, one result per group. */
typedef enum eg__cuda_row_op {
    EG__CUDA_ROW_MAX,       /* the type's largest element; the first NaN if any (CPU rules) */
    EG__CUDA_ROW_MIN,       /* the smallest; the first NaN if any */
    EG__CUDA_ROW_ARGMAX,    /* int64 index of the first largest; NaN only wins at index 0 */
    EG__CUDA_ROW_ARGMIN,    /* int64 index of the first smallest; the same NaN rule */
    EG__CUDA_ROW_LOGSUMEXP, /* f32/f64 only: m + log(sum exp(x - m)), m the max, in double */
    EG__CUDA_ROW_VAR        /* f32/f64 only: population variance, two passes in double */
} eg__cuda_row_op;

/* Enqueues op over every group (reduced > 0 for max, min and the arg ops: inference rejects
 * empty ones). type f32, f64, i32 or i64; out of the input's type (int64 for the arg ops). */
void eg__cuda_reduce_rows(eg__cuda_row_op op, eg__cuda_scalar type, const void *x, int64_t groups,
                          int64_t inner, int64_t reduced, void *out, cudaStream_t stream);

/* Enqueues, for the strided tensor at base (n elements, row-major over shape and strides in
 * elements, n_dims <= EG__CUDA_MAX_DIMS, element_size 2, 4 or 8 bytes): *result = min(*result,
 * the row-major index of each element whose bits & exponent_mask == exponent_mask (NaN or an
 * infinity)). The caller sets *result to all ones first. */
void eg__cuda_find_nonfinite(const void *base, size_t element_size, uint64_t exponent_mask,
                             int n_dims, const int64_t *shape, const int64_t *strides, int64_t n,
                             unsigned long long *result, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
