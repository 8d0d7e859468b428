/* Internal: the softmax and sparse softmax cross-entropy kernels (softmax.cu), in plain C types
 * for both compilers. */
#ifndef EAGLE_SRC_BACKEND_CUDA_SOFTMAX_LAUNCH_H
#define EAGLE_SRC_BACKEND_CUDA_SOFTMAX_LAUNCH_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/cuda/reduce_launch.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Enqueues softmax (log softmax when log_) of the contiguous x viewed as (outer, reduced, inner)
 * along its middle axis into y (the same layout; y may be x), groups = outer * inner; type f32
 * or f64. The CPU's arithmetic: m the max (NaN skipped), e = exp(x - m) with x - m rounded to
 * the type, s = the sum of e in double; y = e * (T)(1 / s), or (x - m) - (T)log(s). */
void eg__cuda_softmax(eg__cuda_scalar type, const void *x, void *y, int64_t groups, int64_t inner,
                      int64_t reduced, int log_, cudaStream_t stream);

/* Enqueues loss[b] = logsumexp(row b) - row b[label b] for logits (batch, classes) at
 * row_stride, class_stride elements (any layout, broadcast views included) and labels
 * (label_type i32, i64 or u8) every label_stride elements; type f32 or f64. A label outside
 * [0, classes) cannot fail the call from the GPU (the CPU raises EG_ERR_INVALID_ARGUMENT): its
 * row's loss is NaN, which check numerics reports. */
void eg__cuda_sparse_softmax_cross_entropy(eg__cuda_scalar type, const void *logits,
                                           int64_t row_stride, int64_t class_stride,
                                           eg__cuda_scalar label_type, const void *labels,
                                           int64_t label_stride, int64_t batch, int64_t classes,
                                           void *loss, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
