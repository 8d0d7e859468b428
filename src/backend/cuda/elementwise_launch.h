/* Internal: the elementwise kernels (elementwise.cu, elementwise_binary.cu,
 * elementwise_select.cu), in plain C types for both compilers. elementwise.c builds the
 * geometry and maps Eagle's ops and dtypes to the codes below: the .cu files never see Eagle's
 * C11 headers, so they have their own small enums. */
#ifndef EAGLE_SRC_BACKEND_CUDA_ELEMENTWISE_LAUNCH_H
#define EAGLE_SRC_BACKEND_CUDA_ELEMENTWISE_LAUNCH_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/cuda/copy_launch.h" /* EG__CUDA_MAX_DIMS */

#ifdef __cplusplus
extern "C" {
#endif

/* The most inputs an elementwise kernel reads (where, mul_add). */
#define EG__CUDA_EW_MAX_INPUTS 3

/* The element types of the kernels (bool is stored as one byte, 0 or 1). */
typedef enum eg__cuda_ew_type {
    EG__CUDA_EW_F32,
    EG__CUDA_EW_F64,
    EG__CUDA_EW_I32,
    EG__CUDA_EW_I64,
    EG__CUDA_EW_U8,
    EG__CUDA_EW_BOOL
} eg__cuda_ew_type;

typedef enum eg__cuda_ew_op {
    /* unary, f32 and f64 */
    EG__CUDA_EW_NEG,
    EG__CUDA_EW_ABS,
    EG__CUDA_EW_EXP,
    EG__CUDA_EW_LOG,
    EG__CUDA_EW_SQRT,
    EG__CUDA_EW_RSQRT,
    EG__CUDA_EW_SIN,
    EG__CUDA_EW_COS,
    EG__CUDA_EW_TANH,
    EG__CUDA_EW_SIGMOID,
    EG__CUDA_EW_RELU,
    EG__CUDA_EW_GELU,
    EG__CUDA_EW_SOFTPLUS,
    EG__CUDA_EW_SIGN,
    EG__CUDA_EW_SQUARE,
    EG__CUDA_EW_RECIPROCAL,
    EG__CUDA_EW_ERF,
    EG__CUDA_EW_CLIP,
    /* binary, the result in the inputs' type: f32, f64, i32, i64 (pow, relu_backward: f32,
     * f64) */
    EG__CUDA_EW_ADD,
    EG__CUDA_EW_SUB,
    EG__CUDA_EW_MUL,
    EG__CUDA_EW_DIV,
    EG__CUDA_EW_POW,
    EG__CUDA_EW_MAXIMUM,
    EG__CUDA_EW_MINIMUM,
    EG__CUDA_EW_RELU_BACKWARD,
    /* comparisons, bool result: every type */
    EG__CUDA_EW_EQUAL,
    EG__CUDA_EW_NOT_EQUAL,
    EG__CUDA_EW_LESS,
    EG__CUDA_EW_LESS_EQUAL,
    EG__CUDA_EW_GREATER,
    EG__CUDA_EW_GREATER_EQUAL
} eg__cuda_ew_op;

/* Where an elementwise kernel finds its operands: the result is dense in row-major order over
 * shape (n_elems elements); input k's element at result index (i_0, ..., i_{n-1}) is at
 * sum_d i_d strides[k][d] elements from its element 0 (stride 0 along a broadcast axis).
 * elementwise.c drops the size-1 axes and merges axes every operand walks as one, so that
 * dense inputs (and one-element ones) come as one axis, n_dims 1, which the kernels run
 * without index arithmetic; n_dims >= 1. */
typedef struct eg__cuda_ew_geometry {
    int n_dims;
    int64_t n_elems;
    int64_t shape[EG__CUDA_MAX_DIMS];
    int64_t strides[EG__CUDA_EW_MAX_INPUTS][EG__CUDA_MAX_DIMS];
} eg__cuda_ew_geometry;

/* Each function enqueues its kernel on stream (nothing for n_elems 0) and returns 0, or -1
 * without enqueuing anything when it has no kernel for the op and types given. */

/* out = op(x) for a unary op (clip: between lo and hi, rounded to type); type f32 or f64. */
int eg__cuda_ew_unary(eg__cuda_ew_op op, eg__cuda_ew_type type, void *out, const void *x,
                      const eg__cuda_ew_geometry *g, double lo, double hi, cudaStream_t stream);

/* out = op(a, b) for a binary op; out in type, or bytes of 0/1 for a comparison. */
int eg__cuda_ew_binary(eg__cuda_ew_op op, eg__cuda_ew_type type, void *out, const void *a,
                       const void *b, const eg__cuda_ew_geometry *g, cudaStream_t stream);

/* out = cond ? a : b, cond bytes (non-zero is true), a, b and out element_size bytes each (1,
 * 2, 4 or 8): a pure selection. Geometry inputs: 0 cond, 1 a, 2 b. */
int eg__cuda_ew_where(size_t element_size, void *out, const void *cond, const void *a,
                      const void *b, const eg__cuda_ew_geometry *g, cudaStream_t stream);

/* out (to) = x (from) converted as the CPU's cast. */
int eg__cuda_ew_cast(eg__cuda_ew_type from, eg__cuda_ew_type to, void *out, const void *x,
                     const eg__cuda_ew_geometry *g, cudaStream_t stream);

/* out = x * scale + shift (two roundings); type f32 or f64. */
int eg__cuda_ew_mul_add(eg__cuda_ew_type type, void *out, const void *x, const void *scale,
                        const void *shift, const eg__cuda_ew_geometry *g, cudaStream_t stream);

/* out[i] = (word i % 4 of Philox block i / 4 under seed) >> 8 >= threshold ? x[i] * scale : 0
 * for i < n, x and out dense; type f32 (scale rounded to f32) or f64. live_seed: NULL, or
 * device memory the kernels read the seed from instead (a captured graph's dropout: each launch
 * gets its call's seed there). */
int eg__cuda_ew_dropout(eg__cuda_ew_type type, void *out, const void *x, int64_t n, uint64_t seed,
                        const uint64_t *live_seed, uint32_t threshold, double scale,
                        cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
