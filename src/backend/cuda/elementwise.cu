// The one-input elementwise kernels: unary math and clip, cast, dropout, and mul_add (three
// inputs, but one formula like the unary ones). Each op's math is ops_math.cuh's, the loop
// elementwise_kernels.cuh's; binary ops, comparisons and where are in elementwise_binary.cu
// (two files keep each one's compile time and length down).
#include "backend/cuda/elementwise_kernels.cuh"
#include "backend/cuda/ops_math.cuh"

namespace {

using eg_ew::launch;
using eg_ew::storage;

// ---- unary ----

template <int OP, typename T> __device__ __forceinline__ T unary_apply(T x) {
    if constexpr (OP == EG__CUDA_EW_NEG)
        return eg_math_neg(x);
    else if constexpr (OP == EG__CUDA_EW_ABS)
        return eg_math_abs(x);
    else if constexpr (OP == EG__CUDA_EW_EXP)
        return eg_math_exp(x);
    else if constexpr (OP == EG__CUDA_EW_LOG)
        return eg_math_log(x);
    else if constexpr (OP == EG__CUDA_EW_SQRT)
        return eg_math_sqrt(x);
    else if constexpr (OP == EG__CUDA_EW_RSQRT)
        return eg_math_rsqrt(x);
    else if constexpr (OP == EG__CUDA_EW_SIN)
        return eg_math_sin(x);
    else if constexpr (OP == EG__CUDA_EW_COS)
        return eg_math_cos(x);
    else if constexpr (OP == EG__CUDA_EW_TANH)
        return eg_math_tanh(x);
    else if constexpr (OP == EG__CUDA_EW_SIGMOID)
        return eg_math_sigmoid(x);
    else if constexpr (OP == EG__CUDA_EW_RELU)
        return eg_math_relu(x);
    else if constexpr (OP == EG__CUDA_EW_GELU)
        return eg_math_gelu(x);
    else if constexpr (OP == EG__CUDA_EW_SOFTPLUS)
        return eg_math_softplus(x);
    else if constexpr (OP == EG__CUDA_EW_SIGN)
        return eg_math_sign(x);
    else if constexpr (OP == EG__CUDA_EW_SQUARE)
        return eg_math_square(x);
    else if constexpr (OP == EG__CUDA_EW_RECIPROCAL)
        return eg_math_reciprocal(x);
    else
        return eg_math_erf(x);
}

template <int OP, typename T> struct unary_fn {
    const T *x;
    __device__ T operator()(const long long *offsets) const {
        return unary_apply<OP>(x[offsets[0]]);
    }
};

template <typename T> struct clip_fn {
    const T *x;
    double lo, hi;
    __device__ T operator()(const long long *offsets) const {
        return eg_math_clip(x[offsets[0]], lo, hi);
    }
};

template <typename T>
int unary_typed(eg__cuda_ew_op op, T *out, const T *x, const eg__cuda_ew_geometry *g, double lo,
                double hi, cudaStream_t stream) {
    switch (op) {
#define UNARY_CASE(OP)                                                                             \
    case OP:                                                                                       \
        launch<1>(out, g, unary_fn<OP, T>{x}, stream);                                             \
        return 0;
        UNARY_CASE(EG__CUDA_EW_NEG)
        UNARY_CASE(EG__CUDA_EW_ABS)
        UNARY_CASE(EG__CUDA_EW_EXP)
        UNARY_CASE(EG__CUDA_EW_LOG)
        UNARY_CASE(EG__CUDA_EW_SQRT)
        UNARY_CASE(EG__CUDA_EW_RSQRT)
        UNARY_CASE(EG__CUDA_EW_SIN)
        UNARY_CASE(EG__CUDA_EW_COS)
        UNARY_CASE(EG__CUDA_EW_TANH)
        UNARY_CASE(EG__CUDA_EW_SIGMOID)
        UNARY_CASE(EG__CUDA_EW_RELU)
        UNARY_CASE(EG__CUDA_EW_GELU)
        UNARY_CASE(EG__CUDA_EW_SOFTPLUS)
        UNARY_CASE(EG__CUDA_EW_SIGN)
        UNARY_CASE(EG__CUDA_EW_SQUARE)
        UNARY_CASE(EG__CUDA_EW_RECIPROCAL)
        UNARY_CASE(EG__CUDA_EW_ERF)
#undef UNARY_CASE
    case EG__CUDA_EW_CLIP:
        launch<1>(out, g, clip_fn<T>{x, lo, hi}, stream);
        return 0;
    default:
        return -1;
    }
}

// ---- mul_add ----

template <typename T> struct mul_add_fn {
    const T *x, *scale, *shift;
    __device__ T operator()(const long long *offsets) const {
        return eg_math_mul_add(x[offsets[0]], scale[offsets[1]], shift[offsets[2]]);
    }
};

// ---- cast: To and From are value types (bool for bool tensors), stored as storage<> ----

template <typename To, typename From> struct cast_fn {
    const typename storage<From>::type *x;
    __device__ typename storage<To>::type operator()(const long long *offsets) const {
        return (typename storage<To>::type)eg_math_cast<To, From>(x[offsets[0]]);
    }
};

template <typename To, typename From>
void cast_launch(void *out, const void *x, const eg__cuda_ew_geometry *g, cudaStream_t stream) {
    using In = typename storage<From>::type;
    using Out = typename storage<To>::type;
    launch<1>(static_cast<Out *>(out), g, cast_fn<To, From>{static_cast<const In *>(x)}, stream);
}

template <typename From>
int cast_from(eg__cuda_ew_type to, void *out, const void *x, const eg__cuda_ew_geometry *g,
              cudaStream_t stream) {
    switch (to) {
    case EG__CUDA_EW_F32:
        cast_launch<float, From>(out, x, g, stream);
        return 0;
    case EG__CUDA_EW_F64:
        cast_launch<double, From>(out, x, g, stream);
        return 0;
    case EG__CUDA_EW_I32:
        cast_launch<int, From>(out, x, g, stream);
        return 0;
    case EG__CUDA_EW_I64:
        cast_launch<long long, From>(out, x, g, stream);
        return 0;
    case EG__CUDA_EW_U8:
        cast_launch<unsigned char, From>(out, x, g, stream);
        return 0;
    case EG__CUDA_EW_BOOL:
        cast_launch<bool, From>(out, x, g, stream);
        return 0;
    default:
        return -1;
    }
}

// ---- dropout: one thread per Philox block of four elements ----

// Blocks [first, first + count) of the dense tensor's (n elements; the last may be partial).
template <typename T>
__global__ void dropout_kernel(T *out, const T *x, long long n, long long first, long long count,
                               unsigned long long seed, const unsigned long long *live_seed,
                               unsigned threshold, T scale) {
    if (live_seed) seed = *live_seed;
    for (long long b = blockIdx.x * (long long)blockDim.x + threadIdx.x; b < count;
         b += (long long)gridDim.x * blockDim.x) {
        unsigned long long block = (unsigned long long)(first + b);
        unsigned int words[4];
        eg_math_philox4x32(seed, 2, block, words);
        long long i0 = 4 * (long long)block;
#pragma unroll
        for (int j = 0; j < 4; j++)
            if (i0 + j < n) out[i0 + j] = eg_math_dropout(x[i0 + j], words[j], threshold, scale);
    }
}

// f32 with 16-byte aligned x and out: a block's four elements in one float4 load and store
// (the scalar kernel's warp touches each sector with four separate instructions).
__global__ void dropout_f32x4_kernel(float4 *out, const float4 *x, long long count,
                                     unsigned long long seed, const unsigned long long *live_seed,
                                     unsigned threshold, float scale) {
    if (live_seed) seed = *live_seed;
    for (long long b = blockIdx.x * (long long)blockDim.x + threadIdx.x; b < count;
         b += (long long)gridDim.x * blockDim.x) {
        unsigned int words[4];
        eg_math_philox4x32(seed, 2, (unsigned long long)b, words);
        float4 v = x[b], r;
        r.x = eg_math_dropout(v.x, words[0], threshold, scale);
        r.y = eg_math_dropout(v.y, words[1], threshold, scale);
        r.z = eg_math_dropout(v.z, words[2], threshold, scale);
        r.w = eg_math_dropout(v.w, words[3], threshold, scale);
        out[b] = r;
    }
}

template <typename T>
void dropout_launch(T *out, const T *x, long long n, unsigned long long seed,
                    const unsigned long long *live_seed, unsigned threshold, T scale,
                    cudaStream_t stream) {
    long long blocks = (n + 3) / 4, first = 0;
    if constexpr (sizeof(T) == 4) {
        if ((reinterpret_cast<uintptr_t>(out) | reinterpret_cast<uintptr_t>(x)) % 16 == 0) {
            long long whole = n / 4;
            if (whole > 0)
                dropout_f32x4_kernel<<<eg_ew::blocks_for(whole), eg_ew::threads, 0, stream>>>(
                    reinterpret_cast<float4 *>(out), reinterpret_cast<const float4 *>(x), whole,
                    seed, live_seed, threshold, scale);
            first = whole;
        }
    }
    if (blocks > first)
        dropout_kernel<T><<<eg_ew::blocks_for(blocks - first), eg_ew::threads, 0, stream>>>(
            out, x, n, first, blocks - first, seed, live_seed, threshold, scale);
}

} // namespace

extern "C" int eg__cuda_ew_unary(eg__cuda_ew_op op, eg__cuda_ew_type type, void *out, const void *x,
                                 const eg__cuda_ew_geometry *g, double lo, double hi,
                                 cudaStream_t stream) {
    switch (type) {
    case EG__CUDA_EW_F32:
        return unary_typed(op, static_cast<float *>(out), static_cast<const float *>(x), g, lo, hi,
                           stream);
    case EG__CUDA_EW_F64:
        return unary_typed(op, static_cast<double *>(out), static_cast<const double *>(x), g, lo,
                           hi, stream);
    default:
        return -1;
    }
}

extern "C" int eg__cuda_ew_mul_add(eg__cuda_ew_type type, void *out, const void *x,
                                   const void *scale, const void *shift,
                                   const eg__cuda_ew_geometry *g, cudaStream_t stream) {
    switch (type) {
    case EG__CUDA_EW_F32:
        launch<3>(static_cast<float *>(out), g,
                  mul_add_fn<float>{static_cast<const float *>(x),
                                    static_cast<const float *>(scale),
                                    static_cast<const float *>(shift)},
                  stream);
        return 0;
    case EG__CUDA_EW_F64:
        launch<3>(static_cast<double *>(out), g,
                  mul_add_fn<double>{static_cast<const double *>(x),
                                     static_cast<const double *>(scale),
                                     static_cast<const double *>(shift)},
                  stream);
        return 0;
    default:
        return -1;
    }
}

extern "C" int eg__cuda_ew_cast(eg__cuda_ew_type from, eg__cuda_ew_type to, void *out,
                                const void *x, const eg__cuda_ew_geometry *g, cudaStream_t stream) {
    switch (from) {
    case EG__CUDA_EW_F32:
        return cast_from<float>(to, out, x, g, stream);
    case EG__CUDA_EW_F64:
        return cast_from<double>(to, out, x, g, stream);
    case EG__CUDA_EW_I32:
        return cast_from<int>(to, out, x, g, stream);
    case EG__CUDA_EW_I64:
        return cast_from<long long>(to, out, x, g, stream);
    case EG__CUDA_EW_U8:
        return cast_from<unsigned char>(to, out, x, g, stream);
    case EG__CUDA_EW_BOOL:
        return cast_from<bool>(to, out, x, g, stream);
    default:
        return -1;
    }
}

extern "C" int eg__cuda_ew_dropout(eg__cuda_ew_type type, void *out, const void *x, int64_t n,
                                   uint64_t seed, const uint64_t *live_seed, uint32_t threshold,
                                   double scale, cudaStream_t stream) {
    if (n <= 0) return type == EG__CUDA_EW_F32 || type == EG__CUDA_EW_F64 ? 0 : -1;
    const unsigned long long *live = reinterpret_cast<const unsigned long long *>(live_seed);
    switch (type) {
    case EG__CUDA_EW_F32:
        dropout_launch(static_cast<float *>(out), static_cast<const float *>(x), (long long)n,
                       (unsigned long long)seed, live, threshold, (float)scale, stream);
        return 0;
    case EG__CUDA_EW_F64:
        dropout_launch(static_cast<double *>(out), static_cast<const double *>(x), (long long)n,
                       (unsigned long long)seed, live, threshold, scale, stream);
        return 0;
    default:
        return -1;
    }
}
