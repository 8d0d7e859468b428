// The normalization kernels: moments, batch normalization and its two gradient passes
// (norm_launch.h), with the CPU's arithmetic (src/backend/cpu/norm.c) operation for operation.
//
// Reductions keep the CPU's chunks (EG__CUDA_NORM_CHUNK consecutive reduced elements): a thread
// per (kept, chunk) adds its chunk in order in double into a partial, item = chunk * kept + k so
// that neighbouring threads take neighbouring kept elements (channels last: neighbouring
// addresses); then a thread per kept element combines the chunks in chunk order. No float
// atomics, no order that depends on timing: the results are the CPU's bits. Every product that
// feeds a sum goes through the *_rn intrinsics, which nvcc never contracts into a fused
// multiply-add (the CPU, built in ISO C mode, never contracts either), so that the relu variants
// recompute the forward's pre-activation x a + b bit for bit.
#include <math.h>
#include <stdint.h>

#include "backend/cuda/norm_launch.h"
#include "backend/cuda/reduce_device.cuh"

namespace {

using namespace eg_reduce;

constexpr int64_t kChunk = EG__CUDA_NORM_CHUNK;

int64_t chunk_count(int64_t reduced) {
    return (reduced + kChunk - 1) / kChunk;
}

__device__ inline double quiet_nan() {
    return __longlong_as_double(0x7ff8000000000000LL);
}

// The offsets of kept element k in sources 0 and 1.
__device__ inline void kept_offsets(const eg__cuda_norm_split &s, int64_t k, int64_t *off0,
                                    int64_t *off1) {
    int64_t a = 0, b = 0;
    for (int d = s.n_kept - 1; d >= 0; d--) {
        int64_t c = k % s.kept_shape[d];
        k /= s.kept_shape[d];
        a += c * s.kept_strides[0][d];
        b += c * s.kept_strides[1][d];
    }
    *off0 = a;
    *off1 = b;
}

// f(offset in source 0, offset in source 1) for reduced elements r0 .. r0 + count - 1, in order:
// one axis by multiplication, more by an odometer.
template <typename F>
__device__ inline void visit_reduced(const eg__cuda_norm_split &s, int64_t r0, int64_t count, F f) {
    if (s.n_reduced <= 1) {
        const int64_t st0 = s.n_reduced ? s.reduced_strides[0][0] : 0;
        const int64_t st1 = s.n_reduced ? s.reduced_strides[1][0] : 0;
        for (int64_t j = 0; j < count; j++) f((r0 + j) * st0, (r0 + j) * st1);
        return;
    }
    int64_t coord[EG__CUDA_MAX_DIMS];
    int64_t off0 = 0, off1 = 0, rest = r0;
    for (int d = s.n_reduced - 1; d >= 0; d--) {
        coord[d] = rest % s.reduced_shape[d];
        rest /= s.reduced_shape[d];
        off0 += coord[d] * s.reduced_strides[0][d];
        off1 += coord[d] * s.reduced_strides[1][d];
    }
    for (int64_t j = 0; j < count; j++) {
        f(off0, off1);
        for (int d = s.n_reduced - 1; d >= 0; d--) {
            off0 += s.reduced_strides[0][d];
            off1 += s.reduced_strides[1][d];
            if (++coord[d] < s.reduced_shape[d]) break;
            off0 -= s.reduced_strides[0][d] * s.reduced_shape[d];
            off1 -= s.reduced_strides[1][d] * s.reduced_shape[d];
            coord[d] = 0;
        }
    }
}

// ---- moments ----

// Each chunk's mean and sum of squared deviations from it: x -> partial (2, chunks, kept).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    moments_chunks(eg__cuda_norm_split s, const T *__restrict__ x, int64_t chunks,
                   double *__restrict__ partial) {
    const int64_t items = s.kept * chunks;
    for (int64_t item = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; item < items;
         item += (int64_t)gridDim.x * blockDim.x) {
        const int64_t k = item % s.kept, c = item / s.kept;
        const int64_t r0 = c * kChunk;
        const int64_t count = s.reduced - r0 < kChunk ? s.reduced - r0 : kChunk;
        int64_t base, unused;
        kept_offsets(s, k, &base, &unused);
        const T *xk = x + base;
        double mean = 0;
        visit_reduced(s, r0, count,
                      [&](int64_t o, int64_t) { mean = __dadd_rn(mean, (double)xk[o]); });
        mean = mean / (double)count;
        double m2 = 0;
        visit_reduced(s, r0, count, [&](int64_t o, int64_t) {
            double d = (double)xk[o] - mean;
            m2 = __dadd_rn(m2, __dmul_rn(d, d));
        });
        partial[item] = mean;
        partial[items + item] = m2;
    }
}

// Chan's weights of chunk c: nc / (n + nc) and n nc / (n + nc), n the elements before it. They
// depend on c alone: computed once here, not in every kept element's dependent chain.
__global__ void __launch_bounds__(kThreads)
    chan_weights(int64_t reduced, int64_t chunks, double *__restrict__ weights) {
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < chunks;
         c += (int64_t)gridDim.x * blockDim.x) {
        const double n = (double)(c * kChunk);
        const double nc = (double)((c + 1) * kChunk < reduced ? kChunk : reduced - c * kChunk);
        const double total = n + nc;
        weights[2 * c] = nc / total;
        weights[2 * c + 1] = __dmul_rn(n, nc) / total;
    }
}

// partial (2, chunks, kept) -> out (2, kept): mean += delta q; m2 += part + delta^2 w.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    moments_combine(const double *__restrict__ partial, const double *__restrict__ weights,
                    int64_t kept, int64_t chunks, int64_t reduced, T *__restrict__ out) {
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < kept;
         k += (int64_t)gridDim.x * blockDim.x) {
        if (chunks == 0) { // NaN, like mean and var of nothing
            out[k] = out[kept + k] = (T)quiet_nan();
            continue;
        }
        double mean = 0, m2 = 0;
        for (int64_t c = 0; c < chunks; c++) {
            const double part_mean = partial[c * kept + k];
            const double part_m2 = partial[(chunks + c) * kept + k];
            const double delta = part_mean - mean;
            mean = __dadd_rn(mean, __dmul_rn(delta, weights[2 * c]));
            m2 = __dadd_rn(
                m2, __dadd_rn(part_m2, __dmul_rn(__dmul_rn(delta, delta), weights[2 * c + 1])));
        }
        out[k] = (T)mean;
        out[kept + k] = (T)(m2 / (double)reduced);
    }
}

// ---- batch_norm_backward_sums ----

// The pre-activation's test: g where x a + b > 0, else +0 (relu_backward's value, the bits the
// CPU's integer mask gives).
template <typename T> __device__ inline T masked(T g, T x, T a, T b) {
    return add_rn(mul_rn(x, a), b) > (T)0 ? g : (T)0;
}

// (g, x) -> partial (2, chunks, kept): each chunk's sum g and sum g (x - mean).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    grad_sums_chunks(eg__cuda_norm_split s, const T *__restrict__ g, const T *__restrict__ x,
                     const T *__restrict__ mean, const T *__restrict__ fa, const T *__restrict__ fb,
                     int64_t chunks, double *__restrict__ partial) {
    const int64_t items = s.kept * chunks;
    for (int64_t item = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; item < items;
         item += (int64_t)gridDim.x * blockDim.x) {
        const int64_t k = item % s.kept, c = item / s.kept;
        const int64_t r0 = c * kChunk;
        const int64_t count = s.reduced - r0 < kChunk ? s.reduced - r0 : kChunk;
        int64_t g_base, x_base;
        kept_offsets(s, k, &g_base, &x_base);
        const T *gk = g + g_base, *xk = x + x_base;
        const double m = (double)mean[k];
        const bool relu = fa != nullptr;
        const T a = relu ? fa[k] : (T)0, b = relu ? fb[k] : (T)0;
        double sg = 0, sgx = 0;
        visit_reduced(s, r0, count, [&](int64_t og, int64_t ox) {
            const T xv = xk[ox];
            const double gi = (double)(relu ? masked(gk[og], xv, a, b) : gk[og]);
            sg = __dadd_rn(sg, gi);
            sgx = __dadd_rn(sgx, __dmul_rn(gi, (double)xv - m));
        });
        partial[item] = sg;
        partial[items + item] = sgx;
    }
}

// partial (2, chunks, kept) -> out (2, kept), chunks added in order from 0.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    sums_combine(const double *__restrict__ partial, int64_t kept, int64_t chunks,
                 T *__restrict__ out) {
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < kept;
         k += (int64_t)gridDim.x * blockDim.x) {
        double sg = 0, sgx = 0;
        for (int64_t c = 0; c < chunks; c++) {
            sg = __dadd_rn(sg, partial[c * kept + k]);
            sgx = __dadd_rn(sgx, partial[(chunks + c) * kept + k]);
        }
        out[k] = (T)sg;
        out[kept + k] = (T)sgx;
    }
}

// ---- coefficients (kept-shaped, contiguous) ----

template <typename T>
__global__ void __launch_bounds__(kThreads)
    bn_coefficients(int64_t kept, const T *__restrict__ mean, const T *__restrict__ variance,
                    const T *__restrict__ scale, const T *__restrict__ offset, double eps,
                    T *__restrict__ a_out, T *__restrict__ b_out) {
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < kept;
         k += (int64_t)gridDim.x * blockDim.x) {
        double a = __ddiv_rn((double)scale[k], __dsqrt_rn(__dadd_rn((double)variance[k], eps)));
        if (sizeof(T) == sizeof(float)) a = (double)(float)a;
        a_out[k] = (T)a;
        b_out[k] = (T)__dsub_rn((double)offset[k], __dmul_rn((double)mean[k], a));
    }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    input_coefficients(int64_t kept, const T *__restrict__ mean, const T *__restrict__ variance,
                       const T *__restrict__ scale, const T *__restrict__ sums, double eps,
                       double n, T *__restrict__ k_out, T *__restrict__ c1_out,
                       T *__restrict__ c0_out) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < kept;
         i += (int64_t)gridDim.x * blockDim.x) {
        const double r = __ddiv_rn(1.0, __dsqrt_rn(__dadd_rn((double)variance[i], eps)));
        const double k = __dmul_rn((double)scale[i], r);
        const double sg = (double)sums[i], sgx = (double)sums[kept + i];
        const double c1 = __ddiv_rn(__dmul_rn(__dmul_rn(__dmul_rn(-k, r), r), sgx), n);
        k_out[i] = (T)k;
        c1_out[i] = (T)c1;
        c0_out[i] = (T)__dsub_rn(__ddiv_rn(__dmul_rn(-k, sg), n), __dmul_rn((double)mean[i], c1));
    }
}

// ---- the elementwise passes ----

// Element idx's offsets in x and g and its kept index.
__device__ inline void layout_offsets(const eg__cuda_norm_layout &l, int64_t idx, int64_t *xo,
                                      int64_t *go, int64_t *k) {
    int64_t a = 0, b = 0, c = 0;
    for (int d = l.n_dims - 1; d >= 0; d--) {
        const int64_t coord = idx % l.shape[d];
        idx /= l.shape[d];
        a += coord * l.strides[0][d];
        b += coord * l.strides[1][d];
        c += coord * l.kept_strides[d];
    }
    *xo = a;
    *go = b;
    *k = c;
}

// x -> out = x a + b (relu: !(z <= 0) ? z : 0, the CPU's EG__RELU)
template <typename T>
__global__ void __launch_bounds__(kThreads)
    affine(eg__cuda_norm_layout l, const T *__restrict__ x, const T *__restrict__ a,
           const T *__restrict__ b, bool relu, T *__restrict__ out) {
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < l.n;
         idx += (int64_t)gridDim.x * blockDim.x) {
        int64_t xo, go, k;
        layout_offsets(l, idx, &xo, &go, &k);
        const T z = add_rn(mul_rn(x[xo], a[k]), b[k]);
        out[idx] = relu ? (!(z <= (T)0) ? z : (T)0) : z;
    }
}

// (g, x) -> out = g k + (x c1 + c0), g masked by x fa + fb > 0 when fa is given
template <typename T>
__global__ void __launch_bounds__(kThreads)
    affine_grad(eg__cuda_norm_layout l, const T *__restrict__ g, const T *__restrict__ x,
                const T *__restrict__ kk, const T *__restrict__ c1, const T *__restrict__ c0,
                const T *__restrict__ fa, const T *__restrict__ fb, T *__restrict__ out) {
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < l.n;
         idx += (int64_t)gridDim.x * blockDim.x) {
        int64_t xo, go, k;
        layout_offsets(l, idx, &xo, &go, &k);
        const T xi = x[xo];
        const T gi = fa ? masked(g[go], xi, fa[k], fb[k]) : g[go];
        out[idx] = add_rn(mul_rn(gi, kk[k]), add_rn(mul_rn(xi, c1[k]), c0[k]));
    }
}

// ---- launchers ----

template <typename T>
void launch_moments(const eg__cuda_norm_split &s, const void *x, void *out, void *scratch,
                    cudaStream_t stream) {
    const int64_t chunks = chunk_count(s.reduced);
    double *partial = static_cast<double *>(scratch);
    double *weights = partial ? partial + 2 * s.kept * chunks : nullptr;
    if (chunks > 0) {
        moments_chunks<T><<<grid_blocks(s.kept * chunks, kThreads), kThreads, 0, stream>>>(
            s, static_cast<const T *>(x), chunks, partial);
        chan_weights<<<grid_blocks(chunks, kThreads), kThreads, 0, stream>>>(s.reduced, chunks,
                                                                             weights);
    }
    moments_combine<T><<<grid_blocks(s.kept, kThreads), kThreads, 0, stream>>>(
        partial, weights, s.kept, chunks, s.reduced, static_cast<T *>(out));
}

template <typename T>
void launch_grad_sums(const eg__cuda_norm_split &s, const void *g, const void *x, const void *mean,
                      const void *fa, const void *fb, void *out, void *scratch,
                      cudaStream_t stream) {
    const int64_t chunks = chunk_count(s.reduced);
    double *partial = static_cast<double *>(scratch);
    if (chunks > 0)
        grad_sums_chunks<T><<<grid_blocks(s.kept * chunks, kThreads), kThreads, 0, stream>>>(
            s, static_cast<const T *>(g), static_cast<const T *>(x), static_cast<const T *>(mean),
            static_cast<const T *>(fa), static_cast<const T *>(fb), chunks, partial);
    sums_combine<T><<<grid_blocks(s.kept, kThreads), kThreads, 0, stream>>>(partial, s.kept, chunks,
                                                                            static_cast<T *>(out));
}

} // namespace

extern "C" size_t eg__cuda_norm_scratch_bytes(const eg__cuda_norm_split *split) {
    const int64_t chunks = chunk_count(split->reduced);
    return (size_t)(2 * split->kept * chunks + 2 * chunks) * sizeof(double);
}

extern "C" void eg__cuda_moments(eg__cuda_scalar type, const eg__cuda_norm_split *split,
                                 const void *x, void *out, void *scratch, cudaStream_t stream) {
    if (split->kept <= 0) return;
    if (type == EG__CUDA_SCALAR_F32)
        launch_moments<float>(*split, x, out, scratch, stream);
    else
        launch_moments<double>(*split, x, out, scratch, stream);
}

extern "C" void eg__cuda_batch_norm_backward_sums(eg__cuda_scalar type,
                                                  const eg__cuda_norm_split *split, const void *g,
                                                  const void *x, const void *mean, const void *fa,
                                                  const void *fb, void *out, void *scratch,
                                                  cudaStream_t stream) {
    if (split->kept <= 0) return;
    if (type == EG__CUDA_SCALAR_F32)
        launch_grad_sums<float>(*split, g, x, mean, fa, fb, out, scratch, stream);
    else
        launch_grad_sums<double>(*split, g, x, mean, fa, fb, out, scratch, stream);
}

extern "C" void eg__cuda_batch_norm_coefficients(eg__cuda_scalar type, int64_t kept,
                                                 const void *mean, const void *variance,
                                                 const void *scale, const void *offset,
                                                 double epsilon, void *a, void *b,
                                                 cudaStream_t stream) {
    if (kept <= 0) return;
    const unsigned blocks = grid_blocks(kept, kThreads);
    if (type == EG__CUDA_SCALAR_F32)
        bn_coefficients<float><<<blocks, kThreads, 0, stream>>>(
            kept, static_cast<const float *>(mean), static_cast<const float *>(variance),
            static_cast<const float *>(scale), static_cast<const float *>(offset), epsilon,
            static_cast<float *>(a), static_cast<float *>(b));
    else
        bn_coefficients<double><<<blocks, kThreads, 0, stream>>>(
            kept, static_cast<const double *>(mean), static_cast<const double *>(variance),
            static_cast<const double *>(scale), static_cast<const double *>(offset), epsilon,
            static_cast<double *>(a), static_cast<double *>(b));
}

extern "C" void eg__cuda_batch_norm_input_coefficients(eg__cuda_scalar type, int64_t kept,
                                                       const void *mean, const void *variance,
                                                       const void *scale, const void *sums,
                                                       double epsilon, double n, void *k, void *c1,
                                                       void *c0, cudaStream_t stream) {
    if (kept <= 0) return;
    const unsigned blocks = grid_blocks(kept, kThreads);
    if (type == EG__CUDA_SCALAR_F32)
        input_coefficients<float><<<blocks, kThreads, 0, stream>>>(
            kept, static_cast<const float *>(mean), static_cast<const float *>(variance),
            static_cast<const float *>(scale), static_cast<const float *>(sums), epsilon, n,
            static_cast<float *>(k), static_cast<float *>(c1), static_cast<float *>(c0));
    else
        input_coefficients<double><<<blocks, kThreads, 0, stream>>>(
            kept, static_cast<const double *>(mean), static_cast<const double *>(variance),
            static_cast<const double *>(scale), static_cast<const double *>(sums), epsilon, n,
            static_cast<double *>(k), static_cast<double *>(c1), static_cast<double *>(c0));
}

extern "C" void eg__cuda_norm_affine(eg__cuda_scalar type, const eg__cuda_norm_layout *layout,
                                     const void *x, const void *a, const void *b, int relu,
                                     void *out, cudaStream_t stream) {
    if (layout->n <= 0) return;
    const unsigned blocks = grid_blocks(layout->n, kThreads);
    if (type == EG__CUDA_SCALAR_F32)
        affine<float><<<blocks, kThreads, 0, stream>>>(
            *layout, static_cast<const float *>(x), static_cast<const float *>(a),
            static_cast<const float *>(b), relu != 0, static_cast<float *>(out));
    else
        affine<double><<<blocks, kThreads, 0, stream>>>(
            *layout, static_cast<const double *>(x), static_cast<const double *>(a),
            static_cast<const double *>(b), relu != 0, static_cast<double *>(out));
}

extern "C" void eg__cuda_norm_affine_grad(eg__cuda_scalar type, const eg__cuda_norm_layout *layout,
                                          const void *g, const void *x, const void *k,
                                          const void *c1, const void *c0, const void *fa,
                                          const void *fb, void *out, cudaStream_t stream) {
    if (layout->n <= 0) return;
    const unsigned blocks = grid_blocks(layout->n, kThreads);
    if (type == EG__CUDA_SCALAR_F32)
        affine_grad<float><<<blocks, kThreads, 0, stream>>>(
            *layout, static_cast<const float *>(g), static_cast<const float *>(x),
            static_cast<const float *>(k), static_cast<const float *>(c1),
            static_cast<const float *>(c0), static_cast<const float *>(fa),
            static_cast<const float *>(fb), static_cast<float *>(out));
    else
        affine_grad<double><<<blocks, kThreads, 0, stream>>>(
            *layout, static_cast<const double *>(g), static_cast<const double *>(x),
            static_cast<const double *>(k), static_cast<const double *>(c1),
            static_cast<const double *>(c0), static_cast<const double *>(fa),
            static_cast<const double *>(fb), static_cast<double *>(out));
}
