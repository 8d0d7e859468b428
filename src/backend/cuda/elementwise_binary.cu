// The two- and three-input elementwise kernels with broadcasting: binary arithmetic (and
// relu_backward), comparisons and where. Each op's math is ops_math.cuh's, the loop
// elementwise_kernels.cuh's. Arithmetic gets one kernel per op, as its ops differ in cost;
// the six comparisons of a type share one kernel that switches on the op (a branch every thread
// of the grid takes alike: the loads dominate), which keeps the kernel count down.
#include "backend/cuda/elementwise_kernels.cuh"
#include "backend/cuda/ops_math.cuh"

namespace {

using eg_ew::launch;

// ---- arithmetic: T one of float, double, int, long long ----

template <int OP, typename T> __device__ __forceinline__ T binary_apply(T a, T b) {
    if constexpr (OP == EG__CUDA_EW_ADD)
        return eg_math_add(a, b);
    else if constexpr (OP == EG__CUDA_EW_SUB)
        return eg_math_sub(a, b);
    else if constexpr (OP == EG__CUDA_EW_MUL)
        return eg_math_mul(a, b);
    else if constexpr (OP == EG__CUDA_EW_DIV)
        return eg_math_div(a, b);
    else if constexpr (OP == EG__CUDA_EW_POW)
        return eg_math_pow(a, b);
    else if constexpr (OP == EG__CUDA_EW_MAXIMUM)
        return eg_math_maximum(a, b);
    else if constexpr (OP == EG__CUDA_EW_MINIMUM)
        return eg_math_minimum(a, b);
    else
        return eg_math_relu_backward(a, b);
}

template <int OP, typename T> struct binary_fn {
    const T *a, *b;
    __device__ T operator()(const long long *offsets) const {
        return binary_apply<OP>(a[offsets[0]], b[offsets[1]]);
    }
};

template <int OP, typename T>
int binary_launch(void *out, const void *a, const void *b, const eg__cuda_ew_geometry *g,
                  cudaStream_t stream) {
    launch<2>(static_cast<T *>(out), g,
              binary_fn<OP, T>{static_cast<const T *>(a), static_cast<const T *>(b)}, stream);
    return 0;
}

// The ops every numeric type has; pow and relu_backward only for floats.
template <typename T>
int arithmetic(eg__cuda_ew_op op, void *out, const void *a, const void *b,
               const eg__cuda_ew_geometry *g, cudaStream_t stream) {
    constexpr bool is_float = (T)0.5 != (T)0;
    switch (op) {
    case EG__CUDA_EW_ADD:
        return binary_launch<EG__CUDA_EW_ADD, T>(out, a, b, g, stream);
    case EG__CUDA_EW_SUB:
        return binary_launch<EG__CUDA_EW_SUB, T>(out, a, b, g, stream);
    case EG__CUDA_EW_MUL:
        return binary_launch<EG__CUDA_EW_MUL, T>(out, a, b, g, stream);
    case EG__CUDA_EW_DIV:
        return binary_launch<EG__CUDA_EW_DIV, T>(out, a, b, g, stream);
    case EG__CUDA_EW_MAXIMUM:
        return binary_launch<EG__CUDA_EW_MAXIMUM, T>(out, a, b, g, stream);
    case EG__CUDA_EW_MINIMUM:
        return binary_launch<EG__CUDA_EW_MINIMUM, T>(out, a, b, g, stream);
    case EG__CUDA_EW_POW:
        if constexpr (is_float)
            return binary_launch<EG__CUDA_EW_POW, T>(out, a, b, g, stream);
        else
            return -1;
    case EG__CUDA_EW_RELU_BACKWARD:
        if constexpr (is_float)
            return binary_launch<EG__CUDA_EW_RELU_BACKWARD, T>(out, a, b, g, stream);
        else
            return -1;
    default:
        return -1;
    }
}

// ---- comparisons: T one of float, double, int, long long, unsigned char (u8 and bool) ----

template <typename T> struct compare_fn {
    const T *a, *b;
    int op;
    __device__ unsigned char operator()(const long long *offsets) const {
        T x = a[offsets[0]], y = b[offsets[1]];
        bool r;
        switch (op) {
        case EG__CUDA_EW_EQUAL:
            r = eg_math_equal(x, y);
            break;
        case EG__CUDA_EW_NOT_EQUAL:
            r = eg_math_not_equal(x, y);
            break;
        case EG__CUDA_EW_LESS:
            r = eg_math_less(x, y);
            break;
        case EG__CUDA_EW_LESS_EQUAL:
            r = eg_math_less_equal(x, y);
            break;
        case EG__CUDA_EW_GREATER:
            r = eg_math_greater(x, y);
            break;
        default:
            r = eg_math_greater_equal(x, y);
            break;
        }
        return (unsigned char)r;
    }
};

template <typename T>
int compare(eg__cuda_ew_op op, void *out, const void *a, const void *b,
            const eg__cuda_ew_geometry *g, cudaStream_t stream) {
    launch<2>(static_cast<unsigned char *>(out), g,
              compare_fn<T>{static_cast<const T *>(a), static_cast<const T *>(b), (int)op}, stream);
    return 0;
}

// ---- where: a selection of element_size-byte words ----

template <typename T> struct where_fn {
    const unsigned char *cond;
    const T *a, *b;
    __device__ T operator()(const long long *offsets) const {
        return eg_math_where(cond[offsets[0]] != 0, a[offsets[1]], b[offsets[2]]);
    }
};

template <typename T>
int where_launch(void *out, const void *cond, const void *a, const void *b,
                 const eg__cuda_ew_geometry *g, cudaStream_t stream) {
    launch<3>(static_cast<T *>(out), g,
              where_fn<T>{static_cast<const unsigned char *>(cond), static_cast<const T *>(a),
                          static_cast<const T *>(b)},
              stream);
    return 0;
}

} // namespace

extern "C" int eg__cuda_ew_binary(eg__cuda_ew_op op, eg__cuda_ew_type type, void *out,
                                  const void *a, const void *b, const eg__cuda_ew_geometry *g,
                                  cudaStream_t stream) {
    if (op >= EG__CUDA_EW_EQUAL && op <= EG__CUDA_EW_GREATER_EQUAL) {
        switch (type) {
        case EG__CUDA_EW_F32:
            return compare<float>(op, out, a, b, g, stream);
        case EG__CUDA_EW_F64:
            return compare<double>(op, out, a, b, g, stream);
        case EG__CUDA_EW_I32:
            return compare<int>(op, out, a, b, g, stream);
        case EG__CUDA_EW_I64:
            return compare<long long>(op, out, a, b, g, stream);
        case EG__CUDA_EW_U8:
        case EG__CUDA_EW_BOOL:
            return compare<unsigned char>(op, out, a, b, g, stream);
        default:
            return -1;
        }
    }
    switch (type) {
    case EG__CUDA_EW_F32:
        return arithmetic<float>(op, out, a, b, g, stream);
    case EG__CUDA_EW_F64:
        return arithmetic<double>(op, out, a, b, g, stream);
    case EG__CUDA_EW_I32:
        return arithmetic<int>(op, out, a, b, g, stream);
    case EG__CUDA_EW_I64:
        return arithmetic<long long>(op, out, a, b, g, stream);
    default:
        return -1;
    }
}

extern "C" int eg__cuda_ew_where(size_t element_size, void *out, const void *cond, const void *a,
                                 const void *b, const eg__cuda_ew_geometry *g,
                                 cudaStream_t stream) {
    switch (element_size) {
    case 1:
        return where_launch<unsigned char>(out, cond, a, b, g, stream);
    case 2:
        return where_launch<unsigned short>(out, cond, a, b, g, stream);
    case 4:
        return where_launch<unsigned int>(out, cond, a, b, g, stream);
    case 8:
        return where_launch<unsigned long long>(out, cond, a, b, g, stream);
    default:
        return -1;
    }
}
