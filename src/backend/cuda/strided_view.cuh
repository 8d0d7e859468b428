// Device side of a strided view walked in row-major order (the strided copy, check numerics):
// its shape and element strides by value, and the element offset of row-major index i.
#ifndef EAGLE_SRC_BACKEND_CUDA_STRIDED_VIEW_CUH
#define EAGLE_SRC_BACKEND_CUDA_STRIDED_VIEW_CUH

#include <stdint.h>

#include "backend/cuda/copy_launch.h" /* EG__CUDA_MAX_DIMS */

struct strided_view {
    int n_dims;
    int64_t shape[EG__CUDA_MAX_DIMS];
    int64_t strides[EG__CUDA_MAX_DIMS];
};

// n_dims <= EG__CUDA_MAX_DIMS (the callers' contract).
static inline strided_view make_strided_view(int n_dims, const int64_t *shape,
                                             const int64_t *strides) {
    strided_view v;
    v.n_dims = n_dims;
    for (int d = 0; d < n_dims; d++) {
        v.shape[d] = shape[d];
        v.strides[d] = strides[d];
    }
    return v;
}

// The element offset of the i-th element in row-major order.
__device__ inline int64_t strided_offset(const strided_view &v, int64_t i) {
    int64_t offset = 0;
    for (int d = v.n_dims - 1; d >= 0; d--) {
        offset += i % v.shape[d] * v.strides[d];
        i /= v.shape[d];
    }
    return offset;
}

#endif
