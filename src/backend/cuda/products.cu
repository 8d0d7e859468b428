// The products' epilogue kernel: a dense layer's bias (when cuBLASLt could not add it) and its
// activation, applied in place to the product cuBLASLt wrote. The formulas are the elementwise
// ops' own (ops_math.cuh: eg_math_add, eg_math_relu, eg_math_sigmoid, eg_math_tanh), so a dense
// layer gives the bits of matmul, add and the activation run one after the other on the GPU, as
// the CPU's dense gives those of its own three ops.
#include <stdint.h>

#include "backend/cuda/ops_math.cuh"
#include "backend/cuda/products_launch.h"

namespace {

template <typename T, int ACTIVATION> __device__ __forceinline__ T activate(T x) {
    if (ACTIVATION == EG__CUDA_ACTIVATION_RELU) return eg_math_relu(x);
    if (ACTIVATION == EG__CUDA_ACTIVATION_SIGMOID) return eg_math_sigmoid(x);
    if (ACTIVATION == EG__CUDA_ACTIVATION_TANH) return eg_math_tanh(x);
    return x;
}

// out: (rows, cols) dense; element i is in column i % cols.
template <typename T, int ACTIVATION>
__global__ void epilogue(T *out, int64_t n, int64_t cols, const T *bias, int64_t bias_stride) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        T x = out[i];
        if (bias) x = eg_math_add(x, bias[i % cols * bias_stride]);
        out[i] = activate<T, ACTIVATION>(x);
    }
}

template <typename T, int ACTIVATION>
void launch(void *out, int64_t n, int64_t cols, const void *bias, int64_t bias_stride,
            cudaStream_t stream) {
    int64_t blocks = (n + 255) / 256;
    if (blocks > 65535) blocks = 65535;
    epilogue<T, ACTIVATION><<<(unsigned)blocks, 256, 0, stream>>>(
        static_cast<T *>(out), n, cols, static_cast<const T *>(bias), bias_stride);
}

template <typename T>
void launch_activation(int activation, void *out, int64_t n, int64_t cols, const void *bias,
                       int64_t bias_stride, cudaStream_t stream) {
    switch (activation) {
    case EG__CUDA_ACTIVATION_RELU:
        launch<T, EG__CUDA_ACTIVATION_RELU>(out, n, cols, bias, bias_stride, stream);
        break;
    case EG__CUDA_ACTIVATION_SIGMOID:
        launch<T, EG__CUDA_ACTIVATION_SIGMOID>(out, n, cols, bias, bias_stride, stream);
        break;
    case EG__CUDA_ACTIVATION_TANH:
        launch<T, EG__CUDA_ACTIVATION_TANH>(out, n, cols, bias, bias_stride, stream);
        break;
    default:
        launch<T, EG__CUDA_ACTIVATION_NONE>(out, n, cols, bias, bias_stride, stream);
        break;
    }
}

} // namespace

extern "C" void eg__cuda_product_epilogue(int is_f64, void *out, int64_t rows, int64_t cols,
                                          const void *bias, int64_t bias_stride, int activation,
                                          cudaStream_t stream) {
    int64_t n = rows * cols;
    if (n <= 0 || (!bias && activation == EG__CUDA_ACTIVATION_NONE)) return;
    if (is_f64)
        launch_activation<double>(activation, out, n, cols, bias, bias_stride, stream);
    else
        launch_activation<float>(activation, out, n, cols, bias, bias_stride, stream);
}
