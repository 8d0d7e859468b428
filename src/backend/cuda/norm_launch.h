/* Internal: the normalization kernels (norm.cu) — moments, batch normalization and its two
 * gradient passes — in plain C types for both compilers.
 *
 * The full-size tensors (x, and g for the gradients) are read through their strides, never
 * copied: a reduction is described by its kept and reduced axes (eg__cuda_norm_split), an
 * elementwise pass by x's axes (eg__cuda_norm_layout). The kept-shaped parameters (mean,
 * variance, scale, offset, sums) are contiguous arrays indexed by the kept index: the row-major
 * index over the kept axes, what the CPU's (outer, inner) index o * inner + i is. */
#ifndef EAGLE_SRC_BACKEND_CUDA_NORM_LAUNCH_H
#define EAGLE_SRC_BACKEND_CUDA_NORM_LAUNCH_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/cuda/copy_launch.h"
#include "backend/cuda/reduce_launch.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The CPU's NORM_ROWS (src/backend/cpu/norm.c): sums run over chunks of this many consecutive
 * reduced elements, each chunk added in order in double, the chunks combined in chunk order.
 * The GPU keeps exactly those chunks and orders (a thread per (kept, chunk), then a thread per
 * kept element walking the chunks in order; no atomics), so its results have the CPU's bits. */
#define EG__CUDA_NORM_CHUNK 256

/* A reduction of one or two same-shaped sources over some axes: element (k, r) of source s,
 * k the kept index and r the reduced index (row-major over the reduced axes in their order), at
 * k's offset over kept_shape / kept_strides[s] plus r's over reduced_shape /
 * reduced_strides[s] (elements). Axes of size 1 are left out and mergeable neighbours merged,
 * which changes no index. */
typedef struct eg__cuda_norm_split {
    int n_kept, n_reduced;
    int64_t kept_shape[EG__CUDA_MAX_DIMS], reduced_shape[EG__CUDA_MAX_DIMS];
    int64_t kept_strides[2][EG__CUDA_MAX_DIMS], reduced_strides[2][EG__CUDA_MAX_DIMS];
    int64_t kept, reduced; /* the products */
} eg__cuda_norm_split;

/* An elementwise pass over x's n elements in row-major order (the output contiguous in that
 * order): per axis its size, the strides of x (strides[0]) and g (strides[1]), and the step of
 * the kept index (0 along reduced axes). */
typedef struct eg__cuda_norm_layout {
    int n_dims;
    int64_t shape[EG__CUDA_MAX_DIMS];
    int64_t strides[2][EG__CUDA_MAX_DIMS];
    int64_t kept_strides[EG__CUDA_MAX_DIMS];
    int64_t n;
} eg__cuda_norm_layout;

/* Device scratch bytes the two reductions below need (0 when nothing is reduced). */
size_t eg__cuda_norm_scratch_bytes(const eg__cuda_norm_split *split);

/* x -> out (2, kept): the means, then the population variances (NaN when reduced is 0); chunks
 * combined with Chan et al.'s update as the CPU. type f32 or f64. */
void eg__cuda_moments(eg__cuda_scalar type, const eg__cuda_norm_split *split, const void *x,
                      void *out, void *scratch, cudaStream_t stream);

/* (g, x) (sources 0, 1), mean (kept) -> out (2, kept): [sum g, sum g (x - mean)]. With fa and
 * fb (kept; NULL: none) g counts only where the forward's pre-activation x fa + fb > 0. */
void eg__cuda_batch_norm_backward_sums(eg__cuda_scalar type, const eg__cuda_norm_split *split,
                                       const void *g, const void *x, const void *mean,
                                       const void *fa, const void *fb, void *out, void *scratch,
                                       cudaStream_t stream);

/* Per kept element, in double and rounded to the type as the CPU: a = scale / sqrt(variance +
 * epsilon) (rounded to f32 first for f32), b = offset - mean a. */
void eg__cuda_batch_norm_coefficients(eg__cuda_scalar type, int64_t kept, const void *mean,
                                      const void *variance, const void *scale, const void *offset,
                                      double epsilon, void *a, void *b, cudaStream_t stream);

/* Per kept element: r = 1 / sqrt(variance + epsilon), k = scale r, c1 = -k r r sgx / n, c0 =
 * -k sg / n - mean c1, sums = [sg (kept), sgx (kept)], n the reduced count. */
void eg__cuda_batch_norm_input_coefficients(eg__cuda_scalar type, int64_t kept, const void *mean,
                                            const void *variance, const void *scale,
                                            const void *sums, double epsilon, double n, void *k,
                                            void *c1, void *c0, cudaStream_t stream);

/* out = x a + b (relu: clamped at 0 as EG__RELU), a and b by the kept index. */
void eg__cuda_norm_affine(eg__cuda_scalar type, const eg__cuda_norm_layout *layout, const void *x,
                          const void *a, const void *b, int relu, void *out, cudaStream_t stream);

/* out = g k + (x c1 + c0), g taken as 0 where x fa + fb <= 0 when fa, fb are given. */
void eg__cuda_norm_affine_grad(eg__cuda_scalar type, const eg__cuda_norm_layout *layout,
                               const void *g, const void *x, const void *k, const void *c1,
                               const void *c0, const void *fa, const void *fb, void *out,
                               cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
