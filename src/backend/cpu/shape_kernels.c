/* CPU kernels that move data between shapes: concat, gather and its adjoint scatter_add,
 * unslice (the adjoint of slice), one_hot and pad. */
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kernels.h"
#include "backend/cpu/lowp.h"
#include "base/error.h"

/* A view of `base` (the output) restricted to [start, start + step * (count-1)] on axis. */
static eg_tensor window(const eg_tensor *base, int axis, int64_t start, int64_t count,
                        int64_t step) {
    eg_tensor w = *base;
    w.offset = base->offset + start * base->strides[axis];
    w.shape[axis] = count;
    w.strides[axis] = base->strides[axis] * step;
    w.n_elems = eg__shape_n_elems(w.n_dims, w.shape);
    return w;
}

eg_status eg__cpu_concat(const eg__kernel_call *call);
eg_status eg__cpu_concat(const eg__kernel_call *call) {
    int axis = call->attrs->axis;
    int64_t start = 0;
    for (int i = 0; i < call->n_inputs; i++) {
        const eg_tensor *part = call->inputs[i];
        eg_tensor w = window(call->output, axis, start, part->shape[axis], 1);
        if (w.n_elems) {
            eg_status status = eg__copy_into(&w, part);
            if (status != EG_OK) return status;
        }
        start += part->shape[axis];
    }
    return EG_OK;
}

static int64_t load_index(const eg_tensor *indices, const char *base, int64_t offset) {
    return indices->dtype == EG_DTYPE_I32 ? ((const int32_t *)base)[offset]
                                          : ((const int64_t *)base)[offset];
}

/* gather: out[pre, idx..., post] = x[pre, indices[idx...], post], with (pre, n_idx, post) the
 * flattened shapes; scatter_add is the same walk with the data moving the other way. */
static eg_status gather_or_scatter(const eg__kernel_call *call, bool scatter) {
    const eg_tensor *indices_in = call->inputs[1];
    const eg_tensor *dense_in = scatter ? call->inputs[0] : call->inputs[0];
    int axis = call->attrs->axis;
    eg_tensor *indices = eg__contiguous_temp(indices_in);
    eg_tensor *dense = eg__contiguous_temp(dense_in);
    if (!indices || !dense) {
        eg__unref(indices);
        eg__unref(dense);
        return eg_last_status();
    }
    /* The tensor indexed along `axis` is x for gather and the output for scatter. */
    const eg_tensor *indexed = scatter ? call->output : dense;
    int64_t pre = 1, post = 1, axis_size = indexed->shape[axis];
    for (int d = 0; d < axis; d++) pre *= indexed->shape[d];
    for (int d = axis + 1; d < indexed->n_dims; d++) post *= indexed->shape[d];
    int64_t n_indices = indices->n_elems;
    size_t size = eg_dtype_size(call->output->dtype);
    const char *index_base = eg__data(indices);
    char *out = eg__data(call->output);
    const char *src = eg__data(dense);
    eg_status status = EG_OK;
    /* bf16 / f16 sums accumulate in f32 (in the f32 kernel's order) and are rounded once */
    eg_dtype dtype = call->output->dtype;
    float *sums = NULL;
    if (scatter && eg__is_lowp(dtype)) {
        sums = calloc((size_t)(call->output->n_elems ? call->output->n_elems : 1), sizeof *sums);
        if (!sums) status = eg__error(EG_ERR_OUT_OF_MEMORY, "scatter_add: out of host memory");
    } else if (scatter) {
        memset(out, 0, (size_t)call->output->n_elems * size);
    }
    /* Every index checked (negative ones counted from the end) before any data moves. */
    int64_t *picked = malloc(sizeof(int64_t) * (size_t)(n_indices ? n_indices : 1));
    if (!picked && status == EG_OK)
        status = eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory",
                           scatter ? "scatter_add" : "gather");
    for (int64_t j = 0; j < n_indices && status == EG_OK; j++) {
        int64_t index = load_index(indices, index_base, j);
        picked[j] = index < 0 ? index + axis_size : index;
        if (picked[j] < 0 || picked[j] >= axis_size)
            status = eg__error(
                EG_ERR_INVALID_ARGUMENT, "%s: index %lld out of range for axis %d of size %lld",
                scatter ? "scatter_add" : "gather", (long long)index, axis, (long long)axis_size);
    }
    /* A gather along the last axis (columns: eg_matmul_sampled's) moves single elements: a
     * typed loop over rows instead of a memcpy per element. */
    bool columns = !scatter && post == 1 && (size == 4 || size == 8);
    for (int64_t p = 0; columns && p < pre && status == EG_OK; p++) {
        if (size == 4) {
            const uint32_t *row = (const uint32_t *)src + p * axis_size;
            uint32_t *o = (uint32_t *)out + p * n_indices;
            for (int64_t j = 0; j < n_indices; j++) o[j] = row[picked[j]];
        } else {
            const uint64_t *row = (const uint64_t *)src + p * axis_size;
            uint64_t *o = (uint64_t *)out + p * n_indices;
            for (int64_t j = 0; j < n_indices; j++) o[j] = row[picked[j]];
        }
    }
    for (int64_t j = 0; !columns && j < n_indices && status == EG_OK; j++) {
        int64_t index = picked[j];
        for (int64_t p = 0; p < pre; p++) {
            int64_t indexed_offset = (p * axis_size + index) * post;
            int64_t packed_offset = (p * n_indices + j) * post;
            if (!scatter) {
                memcpy(out + (size_t)packed_offset * size, src + (size_t)indexed_offset * size,
                       (size_t)post * size);
            } else if (sums) {
                float *o = sums + indexed_offset, g[EG__LOWP_BLOCK];
                for (int64_t q0 = 0; q0 < post; q0 += EG__LOWP_BLOCK) {
                    int64_t count = post - q0 < EG__LOWP_BLOCK ? post - q0 : EG__LOWP_BLOCK;
                    eg__lowp_widen(dtype, count, src + (size_t)(packed_offset + q0) * size,
                                   (int64_t)size, g);
                    for (int64_t q = 0; q < count; q++) o[q0 + q] += g[q];
                }
            } else if (call->output->dtype == EG_DTYPE_F32) {
                float *o = (float *)out + indexed_offset;
                const float *g = (const float *)src + packed_offset;
                for (int64_t q = 0; q < post; q++) o[q] += g[q];
            } else {
                double *o = (double *)out + indexed_offset;
                const double *g = (const double *)src + packed_offset;
                for (int64_t q = 0; q < post; q++) o[q] += g[q];
            }
        }
    }
    if (sums && status == EG_OK)
        eg__lowp_narrow(dtype, call->output->n_elems, sums, out, (int64_t)size);
    free(picked);
    free(sums);
    eg__unref(indices);
    eg__unref(dense);
    return status;
}

eg_status eg__cpu_gather(const eg__kernel_call *call);
eg_status eg__cpu_gather(const eg__kernel_call *call) {
    return gather_or_scatter(call, false);
}
eg_status eg__cpu_scatter_add(const eg__kernel_call *call);
eg_status eg__cpu_scatter_add(const eg__kernel_call *call) {
    return gather_or_scatter(call, true);
}

eg_status eg__cpu_unslice(const eg__kernel_call *call);
eg_status eg__cpu_unslice(const eg__kernel_call *call) {
    eg_tensor *out = call->output;
    memset(eg__data(out), 0, (size_t)out->n_elems * eg_dtype_size(out->dtype));
    const eg__attrs *a = call->attrs;
    const eg_tensor *grad = call->inputs[0];
    eg_tensor w = window(out, a->axis, a->ints[0], grad->shape[a->axis], a->ints[2]);
    return w.n_elems ? eg__copy_into(&w, grad) : EG_OK;
}

eg_status eg__cpu_one_hot(const eg__kernel_call *call);
eg_status eg__cpu_one_hot(const eg__kernel_call *call) {
    eg_tensor *indices = eg__contiguous_temp(call->inputs[0]);
    if (!indices) return eg_last_status();
    eg_tensor *out = call->output;
    int64_t depth = call->attrs->ints[0];
    size_t size = eg_dtype_size(out->dtype);
    char *data = eg__data(out);
    memset(data, 0, (size_t)out->n_elems * size);
    const char *index_base = eg__data(indices);
    for (int64_t i = 0; i < indices->n_elems; i++) {
        int64_t index = indices->dtype == EG_DTYPE_U8 ? ((const uint8_t *)index_base)[i]
                                                      : load_index(indices, index_base, i);
        if (index >= 0 && index < depth)
            eg__store_from_double(data, out->dtype, i * depth + index, 1.0);
    }
    eg__unref(indices);
    return EG_OK;
}

eg_status eg__cpu_pad(const eg__kernel_call *call);
eg_status eg__cpu_pad(const eg__kernel_call *call) {
    eg_tensor *out = call->output;
    const eg_tensor *x = call->inputs[0];
    char *data = eg__data(out);
    size_t size = eg_dtype_size(out->dtype);
    if (out->n_elems) {
        if (eg__is_lowp(out->dtype)) { /* rounded once, not through f32 first */
            uint16_t bits = eg__lowp_from_double(out->dtype, call->attrs->scalars[0]);
            memcpy(data, &bits, 2);
        } else {
            eg__store_from_double(data, out->dtype, 0, call->attrs->scalars[0]);
        }
        for (int64_t i = 1; i < out->n_elems; i++) memcpy(data + (size_t)i * size, data, size);
    }
    eg_tensor inner = *out;
    for (int d = 0; d < out->n_dims; d++) {
        inner.offset += call->attrs->ints[2 * d] * out->strides[d];
        inner.shape[d] = x->shape[d];
    }
    inner.n_elems = x->n_elems;
    return inner.n_elems ? eg__copy_into(&inner, x) : EG_OK;
}
