/* Internal: the products' own kernel (products.cu) in plain C types for both compilers, and what
 * the profiler may ask of the products family (products.c).
 *
 * cuBLASLt computes the product and, where it can, adds a dense layer's bias in its epilogue;
 * the activation runs in this kernel instead of cuBLASLt's RELU epilogue, which computes
 * max(x, 0) and so may turn a NaN into 0, where Eagle's relu keeps the NaN (cpu/kernels.h
 * EG__RELU). */
#ifndef EAGLE_SRC_BACKEND_CUDA_PRODUCTS_LAUNCH_H
#define EAGLE_SRC_BACKEND_CUDA_PRODUCTS_LAUNCH_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The activations of the epilogue kernel (the values of include/eagle/ops.h's eg_activation). */
enum {
    EG__CUDA_ACTIVATION_NONE = 0,
    EG__CUDA_ACTIVATION_RELU = 1,
    EG__CUDA_ACTIVATION_SIGMOID = 2,
    EG__CUDA_ACTIVATION_TANH = 3
};

/* out: (rows, cols) dense, f32 (is_f64 0) or f64 -> out[r, c] = activation(out[r, c] +
 * bias[c * bias_stride]), in place; bias NULL: no addition. Enqueued on stream. */
void eg__cuda_product_epilogue(int is_f64, void *out, int64_t rows, int64_t cols, const void *bias,
                               int64_t bias_stride, int activation, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#ifndef __cplusplus
struct eg__kernel_call;
/* What ran (or would run) on the GPU for a matmul or dense call of this shape, layout and
 * device, for the profiler: "cublasLt algo 21, tile 128x128, stages id 17, split-k 1, epilogue
 * bias, then the relu kernel" (static storage, valid until the process ends), or NULL when the
 * call is not one of these ops or no product of its kind has run yet. Takes no lock on the GPU
 * and queries nothing: it reads the table of algorithms chosen so far. */
const char *eg__cuda_product_note(const struct eg__kernel_call *call);
/* Forgets that device `index`'s workspace was tried (its workspace was freed: eg_shutdown). */
void eg__cuda_products_reset(int index);
#endif

#endif
