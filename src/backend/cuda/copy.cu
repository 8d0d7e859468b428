// The strided-copy kernel: a strided view into contiguous memory (what eg_contiguous does, and
// what a kernel needing dense inputs asks of eg__cuda_contiguous).
#include <stdint.h>

#include "backend/cuda/copy_launch.h"
#include "backend/cuda/strided_view.cuh"

namespace {

template <typename T>
__global__ void strided_copy(T *dst, const T *src, strided_view g, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = src[strided_offset(g, i)];
}

template <typename T>
void launch(void *dst, const void *src, const strided_view &g, int64_t n, cudaStream_t stream) {
    int64_t blocks = (n + 255) / 256;
    if (blocks > 65535) blocks = 65535;
    strided_copy<T><<<(unsigned)blocks, 256, 0, stream>>>(static_cast<T *>(dst),
                                                          static_cast<const T *>(src), g, n);
}

} // namespace

extern "C" void eg__cuda_strided_copy(void *dst, const void *src, size_t element_size, int n_dims,
                                      const int64_t *shape, const int64_t *strides, int64_t n,
                                      cudaStream_t stream) {
    if (n <= 0) return;
    strided_view g = make_strided_view(n_dims, shape, strides);
    switch (element_size) {
    case 1:
        launch<uint8_t>(dst, src, g, n, stream);
        break;
    case 2:
        launch<uint16_t>(dst, src, g, n, stream);
        break;
    case 4:
        launch<uint32_t>(dst, src, g, n, stream);
        break;
    default:
        launch<uint64_t>(dst, src, g, n, stream);
        break;
    }
}
