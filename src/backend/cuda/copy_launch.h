/* Internal: the strided-copy kernel (copy.cu), in plain C types for both compilers. */
#ifndef EAGLE_SRC_BACKEND_CUDA_COPY_LAUNCH_H
#define EAGLE_SRC_BACKEND_CUDA_COPY_LAUNCH_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The most dims a kernel's index math takes (EG_MAX_DIMS). */
#define EG__CUDA_MAX_DIMS 8

/* Enqueues on stream: dst[i] = the i-th element (row-major) of the strided tensor at src
 * (shape, strides in elements, n_dims <= EG__CUDA_MAX_DIMS), for i < n; element_size 1, 2, 4
 * or 8 bytes. */
void eg__cuda_strided_copy(void *dst, const void *src, size_t element_size, int n_dims,
                           const int64_t *shape, const int64_t *strides, int64_t n,
                           cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
