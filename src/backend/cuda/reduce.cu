// The reduction kernels (sum, mean, max, min, argmax, argmin, logsumexp, var) and the
// check-numerics scan, over the (outer, reduced, inner) view of reduce_launch.h.
//
// Sums and means add in the CPU's canonical order (reduce_launch.h, EG__CUDA_SUM_BLOCK), so their
// bits equal the CPU's: every (group, block) pair keeps its 8 double lanes, and the blocks'
// totals are added in block order by a last pass. A lane is a chain of dependent additions that
// no tree may reorder, so the parallelism of a sum is 8 lanes per 65536-element block: short
// rows and columns get a thread per (group, block) that walks the block in order (columns read
// side by side by neighbouring threads); long rows with few groups get a block per (group,
// block) whose warps 1-7 stage the next tile in shared memory while 8 threads of warp 0 add the
// current one (the chain, not memory, is then the bound).
//
// Max, min and the arg ops combine (value, index) candidates by rules that reproduce the CPU's
// sequential loops whatever the order (the first NaN; ties to the lower index), so their results
// equal the CPU's exactly. Logsumexp and var accumulate in double like the CPU: in the CPU's order
// where a thread walks a row alone (group size 1), otherwise by the fixed tree of
// reduce_device.cuh. exp and log are CUDA's (within 1 ulp, like glibc's, but not always rounded
// the same way): those two can differ from the CPU in the last bit.
#include <math.h>
#include <stdint.h>
#include <type_traits>

#include "backend/cuda/reduce_device.cuh"
#include "backend/cuda/reduce_launch.h"
#include "backend/cuda/strided_view.cuh"

namespace {

using namespace eg_reduce;

// ---- sums and means ----

// The accumulator: double for floats (the CPU's lanes), int64 for integers (wrapping).
template <typename T> struct accumulator { using type = double; };
template <> struct accumulator<int32_t> { using type = int64_t; };
template <> struct accumulator<int64_t> { using type = int64_t; };

__device__ inline double acc_add(double a, double b) {
    return __dadd_rn(a, b);
}
__device__ inline int64_t acc_add(int64_t a, int64_t b) {
    return (int64_t)((uint64_t)a + (uint64_t)b);
}

// The result of a group from its sum: the mean divides by the count (0 / 0: NaN, as the CPU).
template <typename T, typename A> __device__ inline T finish_sum(A sum, bool mean, int64_t r) {
    if constexpr (std::is_floating_point<A>::value) {
        if (mean) sum = sum / (double)r;
    } else {
        (void)mean;
        (void)r;
    }
    return (T)sum;
}

// A thread per (group, block): item = (o * n_blocks + b) * inner + i, so that neighbouring
// threads take neighbouring columns. totals NULL: one block per group, the results go to out.
// x: (outer, r, inner) -> out: (outer * inner) or totals: (outer * inner, n_blocks)
template <typename T>
__global__ void __launch_bounds__(kThreads)
    sum_lanes(const T *__restrict__ x, int64_t groups, int64_t inner, int64_t r, int64_t n_blocks,
              bool mean, T *__restrict__ out, typename accumulator<T>::type *__restrict__ totals) {
    using A = typename accumulator<T>::type;
    const int64_t items = groups * n_blocks;
    for (int64_t item = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; item < items;
         item += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = item % inner, rest = item / inner;
        const int64_t b = rest % n_blocks, o = rest / n_blocks;
        const int64_t k0 = b * EG__CUDA_SUM_BLOCK;
        const int64_t n = r - k0 < EG__CUDA_SUM_BLOCK ? r - k0 : EG__CUDA_SUM_BLOCK;
        const int64_t main_end = n - n % 8;
        const T *p = x + (o * r + k0) * inner + i;
        A lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int64_t k = 0;
        for (; k < main_end; k += 8) {
#pragma unroll
            for (int l = 0; l < 8; l++) lanes[l] = acc_add(lanes[l], (A)p[(k + l) * inner]);
        }
        for (; k < n; k++) lanes[0] = acc_add(lanes[0], (A)p[k * inner]);
        A total = 0;
#pragma unroll
        for (int l = 0; l < 8; l++) total = acc_add(total, lanes[l]);
        const int64_t g = o * inner + i;
        if (totals)
            totals[g * n_blocks + b] = total;
        else
            out[g] = finish_sum<T>(acc_add((A)0, total), mean, r);
    }
}

// A block per (group, block), item = g * n_blocks + b. Tile t + 1 is loaded by warps 1-7 into
// one buffer while threads 0-7 (lane = thread) add tile t from the other; lane 0 adds the block's
// tail after its main elements, as the CPU does. Same arguments as sum_lanes.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    sum_tiled(const T *__restrict__ x, int64_t groups, int64_t inner, int64_t r, int64_t n_blocks,
              bool mean, T *__restrict__ out, typename accumulator<T>::type *__restrict__ totals) {
    using A = typename accumulator<T>::type;
    // Tiles of 8 KiB: a multiple of 8 elements, so a tile's element j is in lane j % 8.
    constexpr int kTile = 8192 / (int)sizeof(T);
    constexpr int kLoaders = kThreads - 32;
    __shared__ T tile[2][kTile];
    const int t_id = (int)threadIdx.x;
    const int64_t items = groups * n_blocks;
    for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
        const int64_t g = item / n_blocks, b = item % n_blocks;
        const int64_t o = g / inner, i = g % inner;
        const int64_t k0 = b * EG__CUDA_SUM_BLOCK;
        const int64_t n = r - k0 < EG__CUDA_SUM_BLOCK ? r - k0 : EG__CUDA_SUM_BLOCK;
        const int64_t main_end = n - n % 8;
        const T *p = x + (o * r + k0) * inner + i;
        const int64_t n_tiles = (n + kTile - 1) / kTile;
        const int64_t first_length = n < kTile ? n : kTile;
        for (int64_t j = t_id; j < first_length; j += kThreads) tile[0][j] = p[j * inner];
        __syncthreads();
        A lane = 0;
        for (int64_t t = 0; t < n_tiles; t++) {
            const int cur = (int)(t & 1);
            if (t + 1 < n_tiles && t_id >= 32) {
                const int64_t start = (t + 1) * kTile;
                const int64_t length = n - start < kTile ? n - start : kTile;
                for (int64_t j = t_id - 32; j < length; j += kLoaders)
                    tile[cur ^ 1][j] = p[(start + j) * inner];
            }
            if (t_id < 8) {
                const int64_t main_length = main_end - t * kTile; // may be <= 0: only a tail
                const int64_t length = main_length < kTile ? main_length : kTile;
                for (int64_t j = t_id; j < length; j += 8) lane = acc_add(lane, (A)tile[cur][j]);
            }
            __syncthreads();
        }
        // No thread reads the tiles past the loop's last barrier: the next item may load them.
        if (t_id < 32) {
            if (t_id == 0)
                for (int64_t k = main_end; k < n; k++) lane = acc_add(lane, (A)p[k * inner]);
            A total = 0;
#pragma unroll
            for (int l = 0; l < 8; l++) total = acc_add(total, shfl(lane, l));
            if (t_id == 0) {
                if (totals)
                    totals[item] = total;
                else
                    out[g] = finish_sum<T>(acc_add((A)0, total), mean, r);
            }
        }
    }
}

// The blocks' totals of each group added in block order: totals (groups, n_blocks) -> out.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    sum_blocks(const typename accumulator<T>::type *__restrict__ totals, int64_t groups,
               int64_t n_blocks, int64_t r, bool mean, T *__restrict__ out) {
    using A = typename accumulator<T>::type;
    for (int64_t g = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; g < groups;
         g += (int64_t)gridDim.x * blockDim.x) {
        A result = 0;
        for (int64_t b = 0; b < n_blocks; b++) result = acc_add(result, totals[g * n_blocks + b]);
        out[g] = finish_sum<T>(result, mean, r);
    }
}

int64_t sum_block_count(int64_t r) {
    return r > 0 ? (r + EG__CUDA_SUM_BLOCK - 1) / EG__CUDA_SUM_BLOCK : 1;
}

template <typename T>
void launch_sum(const void *x, int64_t groups, int64_t inner, int64_t r, bool mean, void *out,
                void *scratch, cudaStream_t stream) {
    using A = typename accumulator<T>::type;
    const T *src = static_cast<const T *>(x);
    T *dst = static_cast<T *>(out);
    const int64_t n_blocks = sum_block_count(r), items = groups * n_blocks;
    A *totals = n_blocks > 1 ? static_cast<A *>(scratch) : nullptr;
    // A thread per item while there are enough of them to fill the GPU (or the chains are
    // short); else a block per item, whose chains run at the speed of dependent additions.
    bool tiled = r > 256 && (inner == 1 ? items < 16384 : items < 4096 && r > 4096);
    if (tiled)
        sum_tiled<T><<<grid_blocks(items, 1), kThreads, 0, stream>>>(src, groups, inner, r,
                                                                     n_blocks, mean, dst, totals);
    else
        sum_lanes<T><<<grid_blocks(items, kThreads), kThreads, 0, stream>>>(
            src, groups, inner, r, n_blocks, mean, dst, totals);
    if (totals)
        sum_blocks<T><<<grid_blocks(groups, kThreads), kThreads, 0, stream>>>(
            totals, groups, n_blocks, r, mean, dst);
}

// ---- max, min, argmax, argmin, logsumexp, var ----

__device__ inline bool is_nan(float v) {
    return isnan(v);
}
__device__ inline bool is_nan(double v) {
    return isnan(v);
}
template <typename I> __device__ inline bool is_nan(I) {
    return false;
}

// Which of two NaNs max / min return: the CPU's loop below starts from x[0] and stops at the
// first NaN after it, so a NaN at index 0 is returned only when no other follows (its payload
// may differ).
__device__ inline int64_t nan_rank(int64_t i) {
    return i == 0 ? INT64_MAX : i;
}

// max / min: a NaN if there is one (nan_rank), else the extreme value at its lowest index (which
// keeps the sign of the first of equal zeros): the CPU's loop `if (v != v) {best = v; break;}
// if (v > best) best = v;` from best = x[0].
template <typename C, bool kMax> struct extreme_op {
    __device__ best<C> operator()(best<C> a, best<C> b) const {
        if (b.i < 0) return a;
        if (a.i < 0) return b;
        const bool a_nan = is_nan(a.v), b_nan = is_nan(b.v);
        if (a_nan || b_nan)
            return a_nan && b_nan ? (nan_rank(b.i) < nan_rank(a.i) ? b : a) : (a_nan ? a : b);
        if (b.v == a.v) return b.i < a.i ? b : a;
        return (kMax ? b.v > a.v : b.v < a.v) ? b : a;
    }
};

// argmax / argmin: the CPU's `if (v > best_value)` from index 0 never takes a NaN, and a NaN at
// index 0 is never displaced. The scan leaves other NaNs out; a NaN at 0 beats everything.
template <typename C, bool kMax> struct arg_op {
    __device__ best<C> operator()(best<C> a, best<C> b) const {
        if (b.i < 0) return a;
        if (a.i < 0) return b;
        if (a.i == 0 && is_nan(a.v)) return a;
        if (b.i == 0 && is_nan(b.v)) return b;
        if (b.v == a.v) return b.i < a.i ? b : a;
        return (kMax ? b.v > a.v : b.v < a.v) ? b : a;
    }
};

__device__ inline double quiet_nan() {
    return __longlong_as_double(0x7ff8000000000000LL);
}

// G threads per group (reduce_device.cuh), kThreads / G groups a block.
// x: (outer, r, inner) -> out: (outer * inner), of T (int64 for the arg ops)
template <typename T, int kOp, int G>
__global__ void __launch_bounds__(kThreads)
    reduce_rows(const T *__restrict__ x, int64_t groups, int64_t inner, int64_t r,
                void *__restrict__ out) {
    constexpr int kPerBlock = kThreads / G;
    const int lane = (int)threadIdx.x % G, slot = (int)threadIdx.x / G;
    for (int64_t first = (int64_t)blockIdx.x * kPerBlock; first < groups;
         first += (int64_t)gridDim.x * kPerBlock) {
        const int64_t g = first + slot;
        const bool active = g < groups;
        const T *row = x + (active ? g / inner * r * inner + g % inner : 0);
        if constexpr (kOp == EG__CUDA_ROW_LOGSUMEXP) {
            __shared__ double shared[kThreads / 32 + 1];
            double m = -(double)INFINITY;
            if (active)
                for (int64_t k = lane; k < r; k += G) {
                    double v = (double)row[k * inner];
                    m = v > m ? v : m;
                }
            m = group_all_reduce<G>(m, max_op<double>(), -(double)INFINITY, shared);
            double result = m; // m is the group's: every thread of it takes the same branch
            if (!isinf(m)) {
                double s = 0;
                if (active)
                    for (int64_t k = lane; k < r; k += G)
                        s = __dadd_rn(s, exp((double)row[k * inner] - m));
                s = group_all_reduce<G>(s, sum_op(), 0.0, shared);
                result = m + log(s);
            }
            if (active && lane == 0) static_cast<T *>(out)[g] = (T)result;
        } else if constexpr (kOp == EG__CUDA_ROW_VAR) {
            __shared__ double shared[kThreads / 32 + 1];
            double sum = 0;
            if (active)
                for (int64_t k = lane; k < r; k += G) sum = __dadd_rn(sum, (double)row[k * inner]);
            sum = group_all_reduce<G>(sum, sum_op(), 0.0, shared);
            const double mean = sum / (double)(r ? r : 1);
            double s = 0;
            if (active)
                for (int64_t k = lane; k < r; k += G) {
                    double d = (double)row[k * inner] - mean;
                    s = __dadd_rn(s, __dmul_rn(d, d));
                }
            s = group_all_reduce<G>(s, sum_op(), 0.0, shared);
            if (active && lane == 0)
                static_cast<T *>(out)[g] = (T)(r ? s / (double)r : quiet_nan());
        } else {
            constexpr bool kArg = kOp == EG__CUDA_ROW_ARGMAX || kOp == EG__CUDA_ROW_ARGMIN;
            constexpr bool kMax = kOp == EG__CUDA_ROW_MAX || kOp == EG__CUDA_ROW_ARGMAX;
            // The CPU's argmax compares integers as doubles (eg__load_as_double), max in T.
            using C = std::conditional_t<kArg && std::is_integral<T>::value, double, T>;
            using Op = std::conditional_t<kArg, arg_op<C, kMax>, extreme_op<C, kMax>>;
            __shared__ best<C> shared[kThreads / 32 + 1];
            best<C> acc{C(0), -1};
            if (active)
                for (int64_t k = lane; k < r; k += G) {
                    C v = (C)row[k * inner];
                    if (!kArg || k == 0 || !is_nan(v)) acc = Op()(acc, best<C>{v, k});
                }
            acc = group_all_reduce<G>(acc, Op(), best<C>{C(0), -1}, shared);
            if (active && lane == 0) {
                if constexpr (kArg)
                    static_cast<int64_t *>(out)[g] = acc.i;
                else
                    static_cast<T *>(out)[g] = acc.v;
            }
        }
    }
}

template <typename T, int kOp>
void launch_rows(const void *x, int64_t groups, int64_t inner, int64_t r, void *out,
                 cudaStream_t stream) {
    const T *src = static_cast<const T *>(x);
    switch (group_size(groups, inner, r)) {
    case 1:
        reduce_rows<T, kOp, 1>
            <<<grid_blocks(groups, kThreads), kThreads, 0, stream>>>(src, groups, inner, r, out);
        break;
    case 32:
        reduce_rows<T, kOp, 32><<<grid_blocks(groups, kThreads / 32), kThreads, 0, stream>>>(
            src, groups, inner, r, out);
        break;
    default:
        reduce_rows<T, kOp, kThreads>
            <<<grid_blocks(groups, 1), kThreads, 0, stream>>>(src, groups, inner, r, out);
        break;
    }
}

template <typename T>
void launch_rows_op(eg__cuda_row_op op, const void *x, int64_t groups, int64_t inner, int64_t r,
                    void *out, cudaStream_t stream) {
    switch (op) {
    case EG__CUDA_ROW_MAX:
        launch_rows<T, EG__CUDA_ROW_MAX>(x, groups, inner, r, out, stream);
        break;
    case EG__CUDA_ROW_MIN:
        launch_rows<T, EG__CUDA_ROW_MIN>(x, groups, inner, r, out, stream);
        break;
    case EG__CUDA_ROW_ARGMAX:
        launch_rows<T, EG__CUDA_ROW_ARGMAX>(x, groups, inner, r, out, stream);
        break;
    case EG__CUDA_ROW_ARGMIN:
        launch_rows<T, EG__CUDA_ROW_ARGMIN>(x, groups, inner, r, out, stream);
        break;
    case EG__CUDA_ROW_LOGSUMEXP:
        if constexpr (std::is_floating_point<T>::value)
            launch_rows<T, EG__CUDA_ROW_LOGSUMEXP>(x, groups, inner, r, out, stream);
        break;
    case EG__CUDA_ROW_VAR:
        if constexpr (std::is_floating_point<T>::value)
            launch_rows<T, EG__CUDA_ROW_VAR>(x, groups, inner, r, out, stream);
        break;
    }
}

// ---- check numerics ----

// The smallest row-major index of an element with every exponent bit set, into *result.
template <typename U>
__global__ void __launch_bounds__(kThreads)
    find_nonfinite(const U *__restrict__ base, strided_view g, int64_t n, U mask,
                   unsigned long long *result) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        if ((base[strided_offset(g, i)] & mask) == mask) atomicMin(result, (unsigned long long)i);
}

template <typename U>
void launch_nonfinite(const void *base, uint64_t mask, const strided_view &g, int64_t n,
                      unsigned long long *result, cudaStream_t stream) {
    find_nonfinite<U><<<grid_blocks(n, kThreads), kThreads, 0, stream>>>(
        static_cast<const U *>(base), g, n, (U)mask, result);
}

} // namespace

extern "C" size_t eg__cuda_sum_scratch_bytes(int64_t groups, int64_t reduced) {
    int64_t n_blocks = sum_block_count(reduced);
    return n_blocks > 1 ? (size_t)(groups * n_blocks) * sizeof(double) : 0;
}

extern "C" void eg__cuda_sum(eg__cuda_scalar type, const void *x, int64_t groups, int64_t inner,
                             int64_t reduced, int mean, void *out, void *scratch,
                             cudaStream_t stream) {
    if (groups <= 0) return;
    switch (type) {
    case EG__CUDA_SCALAR_F32:
        launch_sum<float>(x, groups, inner, reduced, mean != 0, out, scratch, stream);
        break;
    case EG__CUDA_SCALAR_F64:
        launch_sum<double>(x, groups, inner, reduced, mean != 0, out, scratch, stream);
        break;
    case EG__CUDA_SCALAR_I32:
        launch_sum<int32_t>(x, groups, inner, reduced, false, out, scratch, stream);
        break;
    case EG__CUDA_SCALAR_I64:
        launch_sum<int64_t>(x, groups, inner, reduced, false, out, scratch, stream);
        break;
    default:
        break;
    }
}

extern "C" void eg__cuda_reduce_rows(eg__cuda_row_op op, eg__cuda_scalar type, const void *x,
                                     int64_t groups, int64_t inner, int64_t reduced, void *out,
                                     cudaStream_t stream) {
    if (groups <= 0) return;
    switch (type) {
    case EG__CUDA_SCALAR_F32:
        launch_rows_op<float>(op, x, groups, inner, reduced, out, stream);
        break;
    case EG__CUDA_SCALAR_F64:
        launch_rows_op<double>(op, x, groups, inner, reduced, out, stream);
        break;
    case EG__CUDA_SCALAR_I32:
        launch_rows_op<int32_t>(op, x, groups, inner, reduced, out, stream);
        break;
    case EG__CUDA_SCALAR_I64:
        launch_rows_op<int64_t>(op, x, groups, inner, reduced, out, stream);
        break;
    default:
        break;
    }
}

extern "C" void eg__cuda_find_nonfinite(const void *base, size_t element_size,
                                        uint64_t exponent_mask, int n_dims, const int64_t *shape,
                                        const int64_t *strides, int64_t n,
                                        unsigned long long *result, cudaStream_t stream) {
    if (n <= 0) return;
    strided_view g = make_strided_view(n_dims, shape, strides);
    switch (element_size) {
    case 2:
        launch_nonfinite<uint16_t>(base, exponent_mask, g, n, result, stream);
        break;
    case 4:
        launch_nonfinite<uint32_t>(base, exponent_mask, g, n, result, stream);
        break;
    default:
        launch_nonfinite<uint64_t>(base, exponent_mask, g, n, result, stream);
        break;
    }
}
