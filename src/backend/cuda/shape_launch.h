/* Internal: the kernels of the shape family (shape.cu) — concat, unslice, gather, scatter_add,
 * one_hot, pad — in plain C types for both compilers.
 *
 * The pure data-movement kernels see elements only as 1, 2, 4 or 8 bytes (every Eagle dtype is
 * one of these sizes), so one kernel serves every dtype. Fill values (pad's constant, one_hot's
 * one) are converted to the output dtype on the host, by the same function the CPU uses, and
 * handed over as bits: the GPU never converts a value, so it gives the CPU's exact bits. */
#ifndef EAGLE_SRC_BACKEND_CUDA_SHAPE_LAUNCH_H
#define EAGLE_SRC_BACKEND_CUDA_SHAPE_LAUNCH_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/cuda/copy_launch.h" /* EG__CUDA_MAX_DIMS */

#ifdef __cplusplus
extern "C" {
#endif

/* The element types an index tensor may have (the kernels cannot see eg_dtype). */
typedef enum eg__cuda_index_type {
    EG__CUDA_INDEX_I32,
    EG__CUDA_INDEX_I64,
    EG__CUDA_INDEX_U8
} eg__cuda_index_type;

/* Enqueues dst[c . dst_strides] = src[c . src_strides] for every coordinate c of shape (n_dims
 * <= EG__CUDA_MAX_DIMS, strides in elements, element_size 1, 2, 4 or 8 bytes): a strided tensor
 * copied into a strided window of another (concat's parts, unslice's input). The destination
 * elements must not overlap. */
void eg__cuda_place(void *dst, const int64_t *dst_strides, const void *src,
                    const int64_t *src_strides, int n_dims, const int64_t *shape,
                    size_t element_size, cudaStream_t stream);

/* x: (pre..., axis_size, post...) strided, indices: n_indices contiguous (i32 or i64)
 *   -> out: (pre..., n_indices, post...) dense.
 * out[p, j, q] = x[p, indices[j], q]; a negative index counts from the end (index + axis_size,
 * like the CPU); an index still outside [0, axis_size) gives zero bits (see shape.c). */
void eg__cuda_gather(void *out, const void *x, int n_dims, const int64_t *x_shape,
                     const int64_t *x_strides, int axis, const void *indices,
                     eg__cuda_index_type index_type, int64_t n_indices, size_t element_size,
                     cudaStream_t stream);

/* Device scratch bytes eg__cuda_scatter_add needs for these sizes (a host-side computation:
 * nothing is enqueued). */
size_t eg__cuda_scatter_add_scratch_bytes(int64_t n_indices, int64_t axis_size);

/* updates: (pre, n_indices, post) dense, indices: n_indices contiguous (i32 or i64)
 *   -> out: (pre, axis_size, post) dense.
 * out[p, k, q] = the sum over j ascending with indices[j] == k (negative ones counting from the
 * end) of updates[p, j, q], starting from 0 and in the updates' dtype (is_f64 ? double : float):
 * the CPU's order, hence its bits. Indices outside the axis add nothing. n_indices >= 1 and out
 * non-empty; scratch: eg__cuda_scatter_add_scratch_bytes(n_indices, axis_size) bytes. Returns
 * the first failed enqueue's error (the sort's), cudaSuccess otherwise. */
cudaError_t eg__cuda_scatter_add(void *out, const void *updates, int is_f64, const void *indices,
                                 eg__cuda_index_type index_type, int64_t pre, int64_t n_indices,
                                 int64_t axis_size, int64_t post, void *scratch,
                                 size_t scratch_bytes, cudaStream_t stream);

/* indices: n_indices contiguous -> out: (n_indices, depth) dense: out[j, c] holds the first
 * element_size bytes of one_bits where indices[j] == c, zero bits elsewhere (an index outside
 * [0, depth), negative ones included, gives a row of zeros, like the CPU). */
void eg__cuda_one_hot(void *out, size_t element_size, uint64_t one_bits, const void *indices,
                      eg__cuda_index_type index_type, int64_t n_indices, int64_t depth,
                      cudaStream_t stream);

/* x: x_shape strided -> out: out_shape dense, out_shape[d] = before[d] + x_shape[d] + after[d]:
 * x's elements at offset `before` in every dim, the first element_size bytes of value_bits
 * everywhere else. */
void eg__cuda_pad(void *out, const int64_t *out_shape, int n_dims, const void *x,
                  const int64_t *x_shape, const int64_t *x_strides, const int64_t *before,
                  size_t element_size, uint64_t value_bits, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
