/* The shape family on a GPU: concat, gather, scatter_add, unslice, one_hot and pad (kernels in
 * shape.cu). Each wrapper checks the geometry on the host, from the tensors' metadata only, so
 * that no kernel can read or write outside its buffers, then enqueues and returns.
 *
 * Layouts: every input may be strided. concat, unslice, gather and pad index their inputs with
 * their strides (a gather must not copy a whole embedding table to read a few rows of it);
 * scatter_add's updates and every index tensor are made dense first (eg__cuda_contiguous: a
 * copy only when strided), as on the CPU. Results are dense.
 *
 * Dtypes: the data-movement ops copy bits, so they take every dtype their schema admits, f16 and
 * bf16 included, with the CPU's exact results. pad's value and one_hot's 1 are converted to the
 * result's dtype here, by eg__store_from_double like on the CPU, and passed to the kernel as
 * bits. scatter_add adds, in f32 or f64 (its schema's dtypes).
 *
 * Indices out of range. On the CPU, gather and scatter_add raise EG_ERR_INVALID_ARGUMENT for an
 * index outside [-size, size) of the axis (negative ones count from the end, on both devices).
 * A GPU kernel cannot raise an error when it runs, and looking at the indices here would mean
 * reading device memory on the host, i.e. waiting for the stream, which no op may do. So on the
 * GPU, like TensorFlow's GPU kernels: gather writes zero bits (0, 0.0, false) where an index is
 * out of range, and scatter_add ignores such an index (its updates add nothing). The call itself
 * succeeds. A program whose indices may be out of range must check them itself to get the
 * CPU's error. (one_hot is the same on both devices: an index outside [0, depth) gives a row of
 * zeros, never an error.)
 *
 * scatter_add is deterministic and gives the CPU's bits: each output element adds its updates in
 * ascending index-list order, starting from 0, in the dtype; no float atomics (shape.cu says
 * how and what it costs). */
#include <string.h>

#include "backend/cuda/kernels.h"
#include "backend/cuda/shape_launch.h"
#include "base/error.h"

_Static_assert(EG_MAX_DIMS <= EG__CUDA_MAX_DIMS, "the kernels' geometry holds EG_MAX_DIMS dims");

/* The result must be dense (every kernel writes it in row-major order). */
static eg_status check_output(const eg__kernel_call *call, const eg__cuda_device *d) {
    const eg_tensor *out = call->output;
    if (!eg__is_contiguous(out) || eg__dtype_size(out->dtype) == 0)
        return eg__op_error(call->op, EG_ERR_INTERNAL, "on %s: the result must be dense",
                            d->device->name);
    return EG_OK;
}

/* The kernels' name for an index dtype; false when the op does not take it (u8: one_hot only). */
static bool index_type_of(eg_dtype dtype, bool u8_allowed, eg__cuda_index_type *type) {
    switch (dtype) {
    case EG_DTYPE_I32:
        *type = EG__CUDA_INDEX_I32;
        return true;
    case EG_DTYPE_I64:
        *type = EG__CUDA_INDEX_I64;
        return true;
    case EG_DTYPE_U8:
        *type = EG__CUDA_INDEX_U8;
        return u8_allowed;
    default:
        return false;
    }
}

/* value in dtype, converted like the CPU converts it, as the kernels take it: the bits of its
 * first eg__dtype_size(dtype) bytes (the union gives the store every type it may write). */
static uint64_t value_bits(eg_dtype dtype, double value) {
    union {
        uint64_t bits;
        double f64;
        float f32;
        int64_t i64;
        int32_t i32;
        uint16_t u16;
        uint8_t u8;
    } v = {.bits = 0};
    eg__store_from_double(&v, dtype, 0, value);
    return v.bits;
}

static eg_status bad_index_dtype(const eg__kernel_call *call, eg_dtype dtype) {
    return eg__op_error(call->op, EG_ERR_DTYPE, "indices of dtype %s are not supported",
                        eg_dtype_name(dtype));
}

/* Whether a's shape equals b's in every dim but `axis`. */
static bool same_off_axis(const eg_tensor *a, const eg_tensor *b, int axis) {
    if (a->n_dims != b->n_dims) return false;
    for (int dim = 0; dim < a->n_dims; dim++)
        if (dim != axis && a->shape[dim] != b->shape[dim]) return false;
    return true;
}

/* parts (i)...: joined along attrs->axis -> out */
static eg_status cuda_concat(const eg__kernel_call *call) {
    eg__cuda_device *d = eg__cuda_call_device(call);
    if (!d) return eg_last_status();
    eg_tensor *out = call->output;
    int axis = call->attrs->axis;
    if (check_output(call, d) != EG_OK) return eg_last_status();
    if (axis < 0 || axis >= out->n_dims)
        return eg__op_error(call->op, EG_ERR_AXIS, "axis %d out of range for %d dims", axis,
                            out->n_dims);
    int64_t total = 0;
    for (int i = 0; i < call->n_inputs; i++) {
        const eg_tensor *part = call->inputs[i];
        if (part->dtype != out->dtype || !same_off_axis(part, out, axis))
            return eg__op_error(call->op, EG_ERR_INTERNAL, "input %d does not match the result", i);
        total += part->shape[axis];
    }
    if (total != out->shape[axis])
        return eg__op_error(call->op, EG_ERR_INTERNAL, "the inputs do not fill the result");
    if (out->n_elems == 0) return eg__cuda_launched(call);
    size_t size = eg__dtype_size(out->dtype);
    int64_t strides[EG_MAX_DIMS];
    eg__contiguous_strides(out->n_dims, out->shape, strides);
    /* One placement per part: a variadic list has no bound to pass to one kernel, and each
     * launch is a full-width copy of its part. */
    int64_t start = 0;
    for (int i = 0; i < call->n_inputs; i++) {
        const eg_tensor *part = call->inputs[i];
        if (part->n_elems)
            eg__cuda_place((char *)eg__data(out) + (size_t)(start * strides[axis]) * size, strides,
                           eg__data(part), part->strides, part->n_dims, part->shape, size,
                           eg__cuda_stream(d));
        start += part->shape[axis];
    }
    return eg__cuda_launched(call);
}

/* pre and post of t around axis: the products of the sizes before and after it. */
static void split_at(const eg_tensor *t, int axis, int64_t *pre, int64_t *post) {
    *pre = *post = 1;
    for (int dim = 0; dim < axis; dim++) *pre *= t->shape[dim];
    for (int dim = axis + 1; dim < t->n_dims; dim++) *post *= t->shape[dim];
}

/* Whether packed (pre..., indices..., post...) is `indexed` with its axis replaced by the
 * indices' dims: gather's result against x, scatter_add's updates against its result. */
static bool packed_matches(const eg_tensor *packed, const eg_tensor *indexed,
                           const eg_tensor *indices, int axis) {
    if (packed->n_dims != indexed->n_dims - 1 + indices->n_dims) return false;
    int dim = 0;
    for (int i = 0; i < axis; i++)
        if (packed->shape[dim++] != indexed->shape[i]) return false;
    for (int i = 0; i < indices->n_dims; i++)
        if (packed->shape[dim++] != indices->shape[i]) return false;
    for (int i = axis + 1; i < indexed->n_dims; i++)
        if (packed->shape[dim++] != indexed->shape[i]) return false;
    return true;
}

/* x: (pre..., A, post...), indices (idx...) -> (pre..., idx..., post...) */
static eg_status cuda_gather(const eg__kernel_call *call) {
    eg__cuda_device *d = eg__cuda_call_device(call);
    if (!d) return eg_last_status();
    const eg_tensor *x = call->inputs[0], *indices = call->inputs[1];
    eg_tensor *out = call->output;
    int axis = call->attrs->axis;
    eg__cuda_index_type index_type;
    if (!index_type_of(indices->dtype, false, &index_type))
        return bad_index_dtype(call, indices->dtype);
    if (check_output(call, d) != EG_OK) return eg_last_status();
    if (axis < 0 || axis >= x->n_dims)
        return eg__op_error(call->op, EG_ERR_AXIS, "axis %d out of range for %d dims", axis,
                            x->n_dims);
    if (x->dtype != out->dtype || !packed_matches(out, x, indices, axis))
        return eg__op_error(call->op, EG_ERR_INTERNAL, "the result does not match the inputs");
    if (out->n_elems == 0) return eg__cuda_launched(call);
    eg__cuda_scratch scratch;
    const void *index_data = eg__cuda_contiguous(d, indices, &scratch);
    if (!index_data) return eg_last_status();
    eg__cuda_gather(eg__data(out), eg__data(x), x->n_dims, x->shape, x->strides, axis, index_data,
                    index_type, indices->n_elems, eg__dtype_size(x->dtype), eg__cuda_stream(d));
    eg__cuda_scratch_free(&scratch);
    return eg__cuda_launched(call);
}

/* updates (pre..., idx..., post...), indices (idx...) -> (pre..., A, post...) = attrs->shape */
static eg_status cuda_scatter_add(const eg__kernel_call *call) {
    eg__cuda_device *d = eg__cuda_call_device(call);
    if (!d) return eg_last_status();
    const eg_tensor *updates = call->inputs[0], *indices = call->inputs[1];
    eg_tensor *out = call->output;
    int axis = call->attrs->axis;
    eg__cuda_index_type index_type;
    if (!index_type_of(indices->dtype, false, &index_type))
        return bad_index_dtype(call, indices->dtype);
    if (out->dtype != EG_DTYPE_F32 && out->dtype != EG_DTYPE_F64)
        return eg__op_error(call->op, EG_ERR_DTYPE, "updates of dtype %s are not supported",
                            eg_dtype_name(out->dtype));
    if (check_output(call, d) != EG_OK) return eg_last_status();
    if (axis < 0 || axis >= out->n_dims)
        return eg__op_error(call->op, EG_ERR_AXIS, "axis %d out of range for %d dims", axis,
                            out->n_dims);
    if (updates->dtype != out->dtype || !packed_matches(updates, out, indices, axis))
        return eg__op_error(call->op, EG_ERR_SHAPE,
                            "updates do not match indices and result shape");
    if (out->n_elems == 0) return eg__cuda_launched(call);
    size_t size = eg__dtype_size(out->dtype);
    cudaStream_t stream = eg__cuda_stream(d);
    if (indices->n_elems == 0) { /* nothing to add: zeros, like the CPU's memset */
        cudaError_t e = cudaMemsetAsync(eg__data(out), 0, (size_t)out->n_elems * size, stream);
        if (e != cudaSuccess) return eg__cuda_error(e, d->device, "scatter_add");
        return eg__cuda_launched(call);
    }
    int64_t pre, post;
    split_at(out, axis, &pre, &post);
    int64_t axis_size = out->shape[axis];
    eg__cuda_scratch dense_scratch, index_scratch, work_scratch;
    const void *dense = eg__cuda_contiguous(d, updates, &dense_scratch);
    if (!dense) return eg_last_status();
    const void *index_data = eg__cuda_contiguous(d, indices, &index_scratch);
    if (!index_data) {
        eg__cuda_scratch_free(&dense_scratch);
        return eg_last_status();
    }
    size_t bytes = eg__cuda_scatter_add_scratch_bytes(indices->n_elems, axis_size);
    void *work = eg__cuda_scratch_alloc(d, bytes, &work_scratch);
    eg_status status = EG_OK;
    if (!work) {
        status = eg_last_status();
    } else {
        cudaError_t e = eg__cuda_scatter_add(eg__data(out), dense, out->dtype == EG_DTYPE_F64,
                                             index_data, index_type, pre, indices->n_elems,
                                             axis_size, post, work, bytes, stream);
        if (e != cudaSuccess) status = eg__cuda_error(e, d->device, "scatter_add");
    }
    eg__cuda_scratch_free(&work_scratch);
    eg__cuda_scratch_free(&index_scratch);
    eg__cuda_scratch_free(&dense_scratch);
    return status == EG_OK ? eg__cuda_launched(call) : status;
}

/* grad (..., n, ...) -> attrs->shape: zeros with grad at start, start + step, ... on axis */
static eg_status cuda_unslice(const eg__kernel_call *call) {
    eg__cuda_device *d = eg__cuda_call_device(call);
    if (!d) return eg_last_status();
    const eg_tensor *grad = call->inputs[0];
    eg_tensor *out = call->output;
    const eg__attrs *a = call->attrs;
    int axis = a->axis;
    if (check_output(call, d) != EG_OK) return eg_last_status();
    if (axis < 0 || axis >= out->n_dims)
        return eg__op_error(call->op, EG_ERR_AXIS, "axis %d out of range for %d dims", axis,
                            out->n_dims);
    int64_t count = grad->shape[axis], start = a->ints[0], step = a->ints[2];
    int64_t size_on_axis = out->shape[axis];
    /* The window start, start + step, ..., start + step * (count - 1) must lie on the axis
     * (written without the product, which could overflow). */
    bool fits = count == 0 || (start >= 0 && start < size_on_axis && step >= 1 &&
                               (size_on_axis - 1 - start) / step >= count - 1);
    if (grad->dtype != out->dtype || !same_off_axis(grad, out, axis) || !fits)
        return eg__op_error(call->op, EG_ERR_SHAPE, "input does not match the result shape");
    if (out->n_elems == 0) return eg__cuda_launched(call);
    size_t size = eg__dtype_size(out->dtype);
    cudaStream_t stream = eg__cuda_stream(d);
    /* Zeros everywhere first, then the window: the window is usually most of the result's
     * elements or a strided fraction of them, and a memset is the cheapest write there is. */
    cudaError_t e = cudaMemsetAsync(eg__data(out), 0, (size_t)out->n_elems * size, stream);
    if (e != cudaSuccess) return eg__cuda_error(e, d->device, "unslice");
    if (grad->n_elems) {
        int64_t strides[EG_MAX_DIMS];
        eg__contiguous_strides(out->n_dims, out->shape, strides);
        char *window = (char *)eg__data(out) + (size_t)(start * strides[axis]) * size;
        strides[axis] *= step;
        eg__cuda_place(window, strides, eg__data(grad), grad->strides, grad->n_dims, grad->shape,
                       size, stream);
    }
    return eg__cuda_launched(call);
}

/* indices (idx...) -> (idx..., depth) in attrs->dtype */
static eg_status cuda_one_hot(const eg__kernel_call *call) {
    eg__cuda_device *d = eg__cuda_call_device(call);
    if (!d) return eg_last_status();
    const eg_tensor *indices = call->inputs[0];
    eg_tensor *out = call->output;
    int64_t depth = call->attrs->ints[0];
    eg__cuda_index_type index_type;
    if (!index_type_of(indices->dtype, true, &index_type))
        return bad_index_dtype(call, indices->dtype);
    if (check_output(call, d) != EG_OK) return eg_last_status();
    bool ok =
        depth >= 0 && out->n_dims == indices->n_dims + 1 && out->shape[indices->n_dims] == depth;
    for (int dim = 0; ok && dim < indices->n_dims; dim++)
        ok = out->shape[dim] == indices->shape[dim];
    if (!ok)
        return eg__op_error(call->op, EG_ERR_INTERNAL, "the result does not match the indices");
    if (out->n_elems == 0) return eg__cuda_launched(call);
    eg__cuda_scratch scratch;
    const void *index_data = eg__cuda_contiguous(d, indices, &scratch);
    if (!index_data) return eg_last_status();
    eg__cuda_one_hot(eg__data(out), eg__dtype_size(out->dtype), value_bits(out->dtype, 1.0),
                     index_data, index_type, indices->n_elems, depth, eg__cuda_stream(d));
    eg__cuda_scratch_free(&scratch);
    return eg__cuda_launched(call);
}

/* x (shape) -> (shape + before + after), widths attrs->ints[2d], [2d + 1], value scalars[0] */
static eg_status cuda_pad(const eg__kernel_call *call) {
    eg__cuda_device *d = eg__cuda_call_device(call);
    if (!d) return eg_last_status();
    const eg_tensor *x = call->inputs[0];
    eg_tensor *out = call->output;
    const eg__attrs *a = call->attrs;
    if (check_output(call, d) != EG_OK) return eg_last_status();
    bool ok = x->dtype == out->dtype && x->n_dims == out->n_dims;
    int64_t before[EG_MAX_DIMS];
    for (int dim = 0; ok && dim < x->n_dims; dim++) {
        before[dim] = a->ints[2 * dim];
        ok = before[dim] >= 0 && a->ints[2 * dim + 1] >= 0 &&
             out->shape[dim] == before[dim] + x->shape[dim] + a->ints[2 * dim + 1];
    }
    if (!ok) return eg__op_error(call->op, EG_ERR_INTERNAL, "the result does not match the input");
    if (out->n_elems == 0) return eg__cuda_launched(call);
    eg__cuda_pad(eg__data(out), out->shape, out->n_dims, eg__data(x), x->shape, x->strides, before,
                 eg__dtype_size(out->dtype), value_bits(out->dtype, a->scalars[0]),
                 eg__cuda_stream(d));
    return eg__cuda_launched(call);
}

void eg__cuda_register_shape(eg__cuda_kernel_table *table) {
    unsigned all = (1u << EG_DTYPE_COUNT) - 1u;
    /* The mask covers every input position: gather's data in any dtype and its i32/i64
     * indices; scatter_add's f32/f64 updates and its indices; one_hot's index tensor (its
     * result's dtype, any, is an attribute). */
    eg__cuda_register(table, EG__OP_CONCAT, cuda_concat, all, true);
    eg__cuda_register(table, EG__OP_GATHER, cuda_gather, all, true);
    eg__cuda_register(table, EG__OP_SCATTER_ADD, cuda_scatter_add,
                      EG__CUDA_DTYPES(EG_DTYPE_F32, EG_DTYPE_F64, EG_DTYPE_I32, EG_DTYPE_I64),
                      true);
    eg__cuda_register(table, EG__OP_UNSLICE, cuda_unslice, all, true);
    eg__cuda_register(table, EG__OP_ONE_HOT, cuda_one_hot,
                      EG__CUDA_DTYPES(EG_DTYPE_I32, EG_DTYPE_I64, EG_DTYPE_U8), true);
    eg__cuda_register(table, EG__OP_PAD, cuda_pad, all, true);
}
