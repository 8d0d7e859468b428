// Device-side helpers shared by the reduction and softmax kernels (reduce.cu, softmax.cu): the
// "group" a row is reduced by, and rounding-exact arithmetic.
//
// A group is G threads (1, 32 or 256) that reduce one row together: lane l of the group takes
// the row's elements l, l + G, l + 2G, ... in order, then the G partial results are combined by a
// fixed tree (warp shuffles, then the block's warps through shared memory). The order depends
// only on G and the row length, never on timing, so every run gives the same bits. With G = 1 a
// thread walks its row alone in element order: exactly the CPU's order, which the launchers pick
// for short rows and for columns (inner > 1, where neighbouring threads read neighbouring
// addresses).
//
// nvcc contracts a * b + c into one fused multiply-add unless told otherwise; the CPU backend is
// built in ISO C mode, which never does. The *_rn intrinsics below are never contracted, so the
// sums of products computed with them round like the CPU's.
#ifndef EAGLE_SRC_BACKEND_CUDA_REDUCE_DEVICE_CUH
#define EAGLE_SRC_BACKEND_CUDA_REDUCE_DEVICE_CUH

#include <stdint.h>

namespace eg_reduce {

constexpr int kThreads = 256;
constexpr unsigned kFullMask = 0xffffffffu;

// Blocks for `units` work items at per_block items a block: at least 1, at most 65535 (the
// kernels loop over the rest).
inline unsigned grid_blocks(int64_t units, int64_t per_block) {
    int64_t blocks = (units + per_block - 1) / per_block;
    if (blocks < 1) blocks = 1;
    if (blocks > 65535) blocks = 65535;
    return (unsigned)blocks;
}

// Threads a row gets: 1 for short rows and for columns the threads of a warp read side by side
// (inner > 1 with many groups), a warp for rows of medium length, the block for long ones.
inline int group_size(int64_t groups, int64_t inner, int64_t reduced) {
    if (inner > 1) return groups >= 2048 || reduced <= 64 ? 1 : 256;
    return reduced <= 32 ? 1 : reduced <= 2048 ? 32 : 256;
}

__device__ inline float add_rn(float a, float b) {
    return __fadd_rn(a, b);
}
__device__ inline double add_rn(double a, double b) {
    return __dadd_rn(a, b);
}
__device__ inline float mul_rn(float a, float b) {
    return __fmul_rn(a, b);
}
__device__ inline double mul_rn(double a, double b) {
    return __dmul_rn(a, b);
}

// A candidate of max/min/argmax/argmin: a value and its index in the row (-1: none yet).
template <typename C> struct best {
    C v;
    int64_t i;
};

__device__ inline float shfl_down(float v, int offset) {
    return __shfl_down_sync(kFullMask, v, offset);
}
__device__ inline double shfl_down(double v, int offset) {
    return __shfl_down_sync(kFullMask, v, offset);
}
__device__ inline int32_t shfl_down(int32_t v, int offset) {
    return __shfl_down_sync(kFullMask, v, offset);
}
__device__ inline int64_t shfl_down(int64_t v, int offset) {
    return (int64_t)__shfl_down_sync(kFullMask, (long long)v, offset);
}
template <typename C> __device__ inline best<C> shfl_down(best<C> b, int offset) {
    return best<C>{shfl_down(b.v, offset), shfl_down(b.i, offset)};
}

__device__ inline float shfl(float v, int lane) {
    return __shfl_sync(kFullMask, v, lane);
}
__device__ inline double shfl(double v, int lane) {
    return __shfl_sync(kFullMask, v, lane);
}
__device__ inline int32_t shfl(int32_t v, int lane) {
    return __shfl_sync(kFullMask, v, lane);
}
__device__ inline int64_t shfl(int64_t v, int lane) {
    return (int64_t)__shfl_sync(kFullMask, (long long)v, lane);
}
template <typename C> __device__ inline best<C> shfl(best<C> b, int lane) {
    return best<C>{shfl(b.v, lane), shfl(b.i, lane)};
}

// The group's combined value, in every thread of the group. Every thread of the block calls it
// (inactive ones with `identity`), as G = 256 synchronizes the block. shared: kThreads / 32 + 1
// slots, used only by G = 256.
template <int G, typename V, typename Op>
__device__ inline V group_all_reduce(V v, Op op, V identity, V *shared) {
    if constexpr (G == 1) {
        (void)op;
        (void)identity;
        (void)shared;
        return v;
    } else {
        for (int offset = 16; offset > 0; offset >>= 1) v = op(v, shfl_down(v, offset));
        if constexpr (G == 32) {
            (void)identity;
            (void)shared;
            return shfl(v, 0);
        } else {
            static_assert(G == kThreads, "a group is 1 thread, a warp or the block");
            int warp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32;
            if (lane == 0) shared[warp] = v;
            __syncthreads();
            if (warp == 0) {
                v = lane < kThreads / 32 ? shared[lane] : identity;
                for (int offset = 16; offset > 0; offset >>= 1) v = op(v, shfl_down(v, offset));
                if (lane == 0) shared[kThreads / 32] = v;
            }
            __syncthreads();
            v = shared[kThreads / 32];
            __syncthreads(); // the next call writes shared again
            return v;
        }
    }
}

struct sum_op {
    __device__ double operator()(double a, double b) const { return __dadd_rn(a, b); }
};

// The larger, as the CPU's `m = x > m ? x : m` (NaN never enters: the scans skip it that way).
template <typename T> struct max_op {
    __device__ T operator()(T a, T b) const { return b > a ? b : a; }
};

} // namespace eg_reduce

#endif
