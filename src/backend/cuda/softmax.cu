// Softmax, log softmax and the fused sparse softmax cross-entropy on the GPU.
//
// Each row (a group, reduce_device.cuh: 1 thread, a warp or the block) takes three passes like
// the CPU's rows (src/backend/cpu/reduce.c): the max, the sum of the exponentials in double, the
// results. A row walked by one thread adds in the CPU's order; a wider group by its fixed tree,
// so results never depend on timing. exp is CUDA's expf / exp (within 2 ulp in f32, 1 ulp in
// f64) where the CPU uses its own vector exp (1 ulp) and glibc: the last bits may differ.
#include <math.h>
#include <stdint.h>

#include "backend/cuda/reduce_device.cuh"
#include "backend/cuda/softmax_launch.h"

namespace {

using namespace eg_reduce;

__device__ inline float exp_of(float v) {
    return expf(v);
}
__device__ inline double exp_of(double v) {
    return exp(v);
}

template <typename T> __device__ inline T minus_infinity() {
    return -(T)INFINITY;
}

// x, y: (outer, r, inner), softmax along r; y may be x (each thread reads an element before it
// writes it, and only its own elements), hence no __restrict__.
template <typename T, int G>
__global__ void __launch_bounds__(kThreads)
    softmax_rows(const T *x, T *y, int64_t groups, int64_t inner, int64_t r, bool log_) {
    constexpr int kPerBlock = kThreads / G;
    __shared__ T shared_max[kThreads / 32 + 1];
    __shared__ double shared_sum[kThreads / 32 + 1];
    const int lane = (int)threadIdx.x % G, slot = (int)threadIdx.x / G;
    for (int64_t first = (int64_t)blockIdx.x * kPerBlock; first < groups;
         first += (int64_t)gridDim.x * kPerBlock) {
        const int64_t g = first + slot;
        const bool active = g < groups;
        const int64_t base = active ? g / inner * r * inner + g % inner : 0;
        const T *xr = x + base;
        T *yr = y + base;
        T m = minus_infinity<T>();
        if (active)
            for (int64_t k = lane; k < r; k += G) {
                T v = xr[k * inner];
                m = v > m ? v : m;
            }
        m = group_all_reduce<G>(m, max_op<T>(), minus_infinity<T>(), shared_max);
        double s = 0;
        if (active)
            for (int64_t k = lane; k < r; k += G) {
                T e = exp_of(xr[k * inner] - m);
                if (!log_) yr[k * inner] = e;
                s = __dadd_rn(s, (double)e);
            }
        s = group_all_reduce<G>(s, sum_op(), 0.0, shared_sum);
        if (!active) continue;
        if (log_) {
            const T log_s = (T)log(s);
            for (int64_t k = lane; k < r; k += G) yr[k * inner] = (xr[k * inner] - m) - log_s;
        } else {
            const T inv = (T)(1.0 / s);
            for (int64_t k = lane; k < r; k += G) yr[k * inner] = yr[k * inner] * inv;
        }
    }
}

template <typename T>
void launch_softmax(const void *x, void *y, int64_t groups, int64_t inner, int64_t r, bool log_,
                    cudaStream_t stream) {
    const T *src = static_cast<const T *>(x);
    T *dst = static_cast<T *>(y);
    switch (group_size(groups, inner, r)) {
    case 1:
        softmax_rows<T, 1><<<grid_blocks(groups, kThreads), kThreads, 0, stream>>>(src, dst, groups,
                                                                                   inner, r, log_);
        break;
    case 32:
        softmax_rows<T, 32><<<grid_blocks(groups, kThreads / 32), kThreads, 0, stream>>>(
            src, dst, groups, inner, r, log_);
        break;
    default:
        softmax_rows<T, kThreads>
            <<<grid_blocks(groups, 1), kThreads, 0, stream>>>(src, dst, groups, inner, r, log_);
        break;
    }
}

// loss_b = (log(sum_k exp(x_bk - m_b)) + m_b) - x_b[label_b], as the CPU's rows: exp of x - m
// rounded to T, summed in double. NaN for a label out of range.
// logits: (batch, classes) at (s0, s1), labels: (batch) at ls -> loss: (batch)
template <typename T, typename L, int G>
__global__ void __launch_bounds__(kThreads)
    xent_rows(const T *__restrict__ x, int64_t s0, int64_t s1, const L *__restrict__ labels,
              int64_t ls, int64_t batch, int64_t classes, T *__restrict__ loss) {
    constexpr int kPerBlock = kThreads / G;
    __shared__ T shared_max[kThreads / 32 + 1];
    __shared__ double shared_sum[kThreads / 32 + 1];
    const int lane = (int)threadIdx.x % G, slot = (int)threadIdx.x / G;
    for (int64_t first = (int64_t)blockIdx.x * kPerBlock; first < batch;
         first += (int64_t)gridDim.x * kPerBlock) {
        const int64_t b = first + slot;
        const bool active = b < batch;
        const T *row = x + (active ? b * s0 : 0);
        T m = minus_infinity<T>();
        if (active)
            for (int64_t k = lane; k < classes; k += G) {
                T v = row[k * s1];
                m = v > m ? v : m;
            }
        m = group_all_reduce<G>(m, max_op<T>(), minus_infinity<T>(), shared_max);
        double s = 0;
        if (active)
            for (int64_t k = lane; k < classes; k += G)
                s = __dadd_rn(s, (double)exp_of(row[k * s1] - m));
        s = group_all_reduce<G>(s, sum_op(), 0.0, shared_sum);
        if (active && lane == 0) {
            const int64_t label = (int64_t)labels[b * ls];
            loss[b] = label >= 0 && label < classes
                          ? (T)(log(s) + (double)m - (double)row[label * s1])
                          : (T)__longlong_as_double(0x7ff8000000000000LL);
        }
    }
}

template <typename T, typename L>
void launch_xent(const void *logits, int64_t s0, int64_t s1, const void *labels, int64_t ls,
                 int64_t batch, int64_t classes, void *loss, cudaStream_t stream) {
    const T *x = static_cast<const T *>(logits);
    const L *l = static_cast<const L *>(labels);
    T *out = static_cast<T *>(loss);
    switch (group_size(batch, 1, classes)) {
    case 1:
        xent_rows<T, L, 1><<<grid_blocks(batch, kThreads), kThreads, 0, stream>>>(
            x, s0, s1, l, ls, batch, classes, out);
        break;
    case 32:
        xent_rows<T, L, 32><<<grid_blocks(batch, kThreads / 32), kThreads, 0, stream>>>(
            x, s0, s1, l, ls, batch, classes, out);
        break;
    default:
        xent_rows<T, L, kThreads>
            <<<grid_blocks(batch, 1), kThreads, 0, stream>>>(x, s0, s1, l, ls, batch, classes, out);
        break;
    }
}

template <typename T>
void launch_xent_labels(eg__cuda_scalar label_type, const void *logits, int64_t s0, int64_t s1,
                        const void *labels, int64_t ls, int64_t batch, int64_t classes, void *loss,
                        cudaStream_t stream) {
    switch (label_type) {
    case EG__CUDA_SCALAR_I32:
        launch_xent<T, int32_t>(logits, s0, s1, labels, ls, batch, classes, loss, stream);
        break;
    case EG__CUDA_SCALAR_I64:
        launch_xent<T, int64_t>(logits, s0, s1, labels, ls, batch, classes, loss, stream);
        break;
    case EG__CUDA_SCALAR_U8:
        launch_xent<T, uint8_t>(logits, s0, s1, labels, ls, batch, classes, loss, stream);
        break;
    default:
        break;
    }
}

} // namespace

extern "C" void eg__cuda_softmax(eg__cuda_scalar type, const void *x, void *y, int64_t groups,
                                 int64_t inner, int64_t reduced, int log_, cudaStream_t stream) {
    if (groups <= 0 || reduced <= 0) return;
    if (type == EG__CUDA_SCALAR_F32)
        launch_softmax<float>(x, y, groups, inner, reduced, log_ != 0, stream);
    else if (type == EG__CUDA_SCALAR_F64)
        launch_softmax<double>(x, y, groups, inner, reduced, log_ != 0, stream);
}

extern "C" void eg__cuda_sparse_softmax_cross_entropy(eg__cuda_scalar type, const void *logits,
                                                      int64_t row_stride, int64_t class_stride,
                                                      eg__cuda_scalar label_type,
                                                      const void *labels, int64_t label_stride,
                                                      int64_t batch, int64_t classes, void *loss,
                                                      cudaStream_t stream) {
    if (batch <= 0) return;
    if (type == EG__CUDA_SCALAR_F32)
        launch_xent_labels<float>(label_type, logits, row_stride, class_stride, labels,
                                  label_stride, batch, classes, loss, stream);
    else if (type == EG__CUDA_SCALAR_F64)
        launch_xent_labels<double>(label_type, logits, row_stride, class_stride, labels,
                                   label_stride, batch, classes, loss, stream);
}
