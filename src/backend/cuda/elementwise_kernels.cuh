// Internal to the elementwise .cu files: the one loop every elementwise kernel runs. An op is a
// functor that, given each input's element offset, loads its operands and returns the result
// (its math is ops_math.cuh's); the loop walks the dense result and computes the offsets.
//
// Three versions of the loop, chosen by the geometry elementwise.c built (merged axes, see
// elementwise_launch.h):
//   flat  one axis: offset = i * stride, stride 1 for dense inputs and 0 for one-element ones
//         (the common case: no division at all);
//   nd    several axes (broadcasting, transposes): the result index decomposed axis by axis,
//         with 32-bit division while the tensor has fewer than 2^31 elements (64-bit integer
//         division costs several times the rest of a memory-bound kernel), 64-bit beyond.
// Grid-stride loops of 256-thread blocks, at most 65535 blocks; int64 offsets throughout, so
// negative strides work too.
#ifndef EAGLE_SRC_BACKEND_CUDA_ELEMENTWISE_KERNELS_CUH
#define EAGLE_SRC_BACKEND_CUDA_ELEMENTWISE_KERNELS_CUH

#include "backend/cuda/elementwise_launch.h"
#include "backend/cuda/ops_math.cuh"

namespace eg_ew {

constexpr int threads = 256;

// The stored type of a value type: bool tensors hold bytes.
template <typename T> struct storage { using type = T; };
template <> struct storage<bool> { using type = unsigned char; };

template <int N> struct flat_strides { long long s[N]; };

template <int N, typename Out, typename F>
__global__ void flat_kernel(Out *out, long long n, flat_strides<N> strides, F f) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        long long offsets[N];
#pragma unroll
        for (int k = 0; k < N; k++) offsets[k] = i * strides.s[k];
        out[i] = f(offsets);
    }
}

// I: the index type of the decomposition (unsigned int when n < 2^31, so that i plus the grid's
// stride never wraps; unsigned long long otherwise).
template <int N, typename I, typename Out, typename F>
__global__ void nd_kernel(Out *out, I n, eg__cuda_ew_geometry g, F f) {
    for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
        long long offsets[N];
#pragma unroll
        for (int k = 0; k < N; k++) offsets[k] = 0;
        I rest = i;
        for (int d = g.n_dims - 1; d > 0; d--) {
            I size = (I)g.shape[d];
            I index = rest % size;
            rest /= size;
#pragma unroll
            for (int k = 0; k < N; k++) offsets[k] += (long long)index * g.strides[k][d];
        }
#pragma unroll
        for (int k = 0; k < N; k++) offsets[k] += (long long)rest * g.strides[k][0];
        out[i] = f(offsets);
    }
}

inline unsigned blocks_for(long long n) {
    long long blocks = (n + threads - 1) / threads;
    return (unsigned)(blocks > 65535 ? 65535 : blocks);
}

// Enqueues out[i] = f(offsets of element i) over g's elements (N inputs).
template <int N, typename Out, typename F>
void launch(Out *out, const eg__cuda_ew_geometry *g, F f, cudaStream_t stream) {
    long long n = g->n_elems;
    if (n <= 0) return;
    unsigned blocks = blocks_for(n);
    if (g->n_dims == 1) {
        flat_strides<N> strides;
        for (int k = 0; k < N; k++) strides.s[k] = g->strides[k][0];
        flat_kernel<N><<<blocks, threads, 0, stream>>>(out, n, strides, f);
    } else if (n < (1ll << 31)) {
        nd_kernel<N, unsigned><<<blocks, threads, 0, stream>>>(out, (unsigned)n, *g, f);
    } else {
        nd_kernel<N, unsigned long long>
            <<<blocks, threads, 0, stream>>>(out, (unsigned long long)n, *g, f);
    }
}

} // namespace eg_ew

#endif
