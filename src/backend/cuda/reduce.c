/* Reductions (sum, mean, max, min, logsumexp, var, argmax, argmin), softmax, log softmax and
 * the sparse softmax cross-entropy on a GPU, and the check-numerics scan: the C wrappers of the
 * kernel table over reduce.cu and softmax.cu.
 *
 * A reduction sees its input as the CPU's does (src/backend/cpu/reduce.c): (outer, reduced,
 * inner) over contiguous memory, free when the input is contiguous and the axes adjacent, else a
 * copy with the kept axes first and the reduced ones last, made on the stream. The same view
 * gives both backends the same order of every group's elements, which the sums (bitwise the
 * CPU's) and the sequential rows of the other kernels rely on. Softmax reads a contiguous copy
 * like the CPU; the cross-entropy reads its 2-d logits and 1-d labels through their strides. */
#include <stdint.h>
#include <string.h>

#include "backend/cuda/copy_launch.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/reduce_launch.h"
#include "backend/cuda/softmax_launch.h"
#include "base/error.h"

static bool scalar_of(eg_dtype dtype, eg__cuda_scalar *out) {
    switch (dtype) {
    case EG_DTYPE_F32:
        *out = EG__CUDA_SCALAR_F32;
        return true;
    case EG_DTYPE_F64:
        *out = EG__CUDA_SCALAR_F64;
        return true;
    case EG_DTYPE_I32:
        *out = EG__CUDA_SCALAR_I32;
        return true;
    case EG_DTYPE_I64:
        *out = EG__CUDA_SCALAR_I64;
        return true;
    case EG_DTYPE_U8:
        *out = EG__CUDA_SCALAR_U8;
        return true;
    default:
        return false;
    }
}

static eg_status no_kernel(const eg__kernel_call *call, const eg_tensor *t) {
    return eg__op_error(call->op, EG_ERR_UNSUPPORTED, "no kernel for %s on %s",
                        eg_dtype_name(t->dtype), call->output->device->name);
}

/* Whether shape and strides lay out their (non-zero number of) elements densely in row-major
 * order: eg__is_contiguous's rule for a geometry that is not a tensor. */
static bool dense(int n_dims, const int64_t *shape, const int64_t *strides) {
    int64_t stride = 1;
    for (int i = n_dims - 1; i >= 0; i--) {
        if (shape[i] != 1 && strides[i] != stride) return false;
        stride *= shape[i];
    }
    return true;
}

typedef struct reduce_plan {
    const void *data;         /* (outer, reduced, inner), contiguous */
    eg__cuda_scratch scratch; /* the permuted copy, when one was made */
    int64_t outer, reduced, inner;
} reduce_plan;

/* The CPU's plan_reduction on the GPU: x itself when its memory already is in (outer, reduced,
 * inner) order, else a copy enqueued on d's stream with the kept axes first. */
static eg_status plan_reduction(eg__cuda_device *d, const eg_tensor *x, int n_axes, const int *axes,
                                reduce_plan *plan) {
    memset(plan, 0, sizeof *plan);
    bool reduce[EG_MAX_DIMS] = {0};
    for (int i = 0; i < n_axes; i++) reduce[axes[i]] = true;
    int first = n_axes ? axes[0] : 0, last = n_axes ? axes[n_axes - 1] : -1;
    bool adjacent = n_axes == 0 || last - first + 1 == n_axes;
    plan->outer = plan->reduced = plan->inner = 1;
    if (adjacent && eg__is_contiguous(x)) {
        plan->data = eg__data(x);
        for (int dim = 0; dim < x->n_dims; dim++) {
            if (n_axes && dim < first)
                plan->outer *= x->shape[dim];
            else if (n_axes && dim <= last)
                plan->reduced *= x->shape[dim];
            else
                plan->inner *= x->shape[dim];
        }
        if (n_axes == 0) { /* nothing reduced: every element is its own group */
            plan->outer = x->n_elems;
            plan->inner = 1;
        }
        return EG_OK;
    }
    int64_t shape[EG_MAX_DIMS], strides[EG_MAX_DIMS];
    int n = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int dim = 0; dim < x->n_dims; dim++) {
            if (reduce[dim] != (pass == 1)) continue;
            shape[n] = x->shape[dim];
            strides[n++] = x->strides[dim];
            if (pass == 0)
                plan->outer *= x->shape[dim];
            else
                plan->reduced *= x->shape[dim];
        }
    if (x->n_elems == 0 || dense(n, shape, strides)) { /* already in that order */
        plan->data = eg__data(x);
        return EG_OK;
    }
    size_t size = eg__dtype_size(x->dtype);
    void *copy = eg__cuda_scratch_alloc(d, (size_t)x->n_elems * size, &plan->scratch);
    if (!copy) return eg_last_status();
    eg__cuda_strided_copy(copy, eg__data(x), size, n, shape, strides, x->n_elems,
                          eg__cuda_stream(d));
    plan->data = copy;
    return EG_OK;
}

static eg__cuda_row_op row_op_of(eg__op op) {
    switch (op) {
    case EG__OP_MAX:
        return EG__CUDA_ROW_MAX;
    case EG__OP_MIN:
        return EG__CUDA_ROW_MIN;
    case EG__OP_ARGMAX:
        return EG__CUDA_ROW_ARGMAX;
    case EG__OP_ARGMIN:
        return EG__CUDA_ROW_ARGMIN;
    case EG__OP_LOGSUMEXP:
        return EG__CUDA_ROW_LOGSUMEXP;
    default:
        return EG__CUDA_ROW_VAR;
    }
}

/* x -> x reduced over attrs->axes (argmax/argmin: over attrs->axis, an int64 index) */
static eg_status cuda_reduce(const eg__kernel_call *call) {
    eg__cuda_device *d = eg__cuda_call_device(call);
    if (!d) return eg_last_status();
    const eg_tensor *x = call->inputs[0];
    eg__op op = call->op;
    bool is_float = x->dtype == EG_DTYPE_F32 || x->dtype == EG_DTYPE_F64;
    bool float_only = op == EG__OP_MEAN || op == EG__OP_LOGSUMEXP || op == EG__OP_VAR;
    eg__cuda_scalar type;
    if (!scalar_of(x->dtype, &type) || type == EG__CUDA_SCALAR_U8 || (float_only && !is_float))
        return no_kernel(call, x);
    if (call->output->n_elems == 0) return eg__cuda_launched(call);
    bool is_arg = op == EG__OP_ARGMAX || op == EG__OP_ARGMIN;
    reduce_plan plan;
    eg_status status = is_arg ? plan_reduction(d, x, 1, &call->attrs->axis, &plan)
                              : plan_reduction(d, x, call->attrs->n_axes, call->attrs->axes, &plan);
    if (status != EG_OK) return status;
    int64_t groups = plan.outer * plan.inner;
    void *out = eg__data(call->output);
    cudaStream_t stream = eg__cuda_stream(d);
    eg__cuda_scratch totals = {.pointer = NULL, .handle = NULL, .allocator = NULL};
    if (op == EG__OP_SUM || op == EG__OP_MEAN) {
        size_t bytes = eg__cuda_sum_scratch_bytes(groups, plan.reduced);
        void *scratch = bytes ? eg__cuda_scratch_alloc(d, bytes, &totals) : NULL;
        if (bytes && !scratch)
            status = eg_last_status();
        else
            eg__cuda_sum(type, plan.data, groups, plan.inner, plan.reduced, op == EG__OP_MEAN, out,
                         scratch, stream);
    } else {
        eg__cuda_reduce_rows(row_op_of(op), type, plan.data, groups, plan.inner, plan.reduced, out,
                             stream);
    }
    eg__cuda_scratch_free(&totals);
    eg__cuda_scratch_free(&plan.scratch);
    return status == EG_OK ? eg__cuda_launched(call) : status;
}

/* x -> softmax (log_softmax) of x along attrs->axis, of x's shape */
static eg_status cuda_softmax(const eg__kernel_call *call) {
    eg__cuda_device *d = eg__cuda_call_device(call);
    if (!d) return eg_last_status();
    const eg_tensor *x = call->inputs[0];
    eg__cuda_scalar type;
    if (!scalar_of(x->dtype, &type) || (type != EG__CUDA_SCALAR_F32 && type != EG__CUDA_SCALAR_F64))
        return no_kernel(call, x);
    if (x->n_elems == 0) return eg__cuda_launched(call);
    eg__cuda_scratch scratch;
    const void *src = eg__cuda_contiguous(d, x, &scratch);
    if (!src) return eg_last_status();
    int axis = call->attrs->axis;
    int64_t outer = 1, inner = 1, r = x->shape[axis];
    for (int dim = 0; dim < axis; dim++) outer *= x->shape[dim];
    for (int dim = axis + 1; dim < x->n_dims; dim++) inner *= x->shape[dim];
    eg__cuda_softmax(type, src, eg__data(call->output), outer * inner, inner, r,
                     call->op == EG__OP_LOG_SOFTMAX, eg__cuda_stream(d));
    eg__cuda_scratch_free(&scratch);
    return eg__cuda_launched(call);
}

/* logits (B, C), labels (B) -> loss (B); a label outside [0, C) gives a NaN loss (the GPU cannot
 * fail the call once it is enqueued; the CPU raises EG_ERR_INVALID_ARGUMENT) */
static eg_status cuda_sparse_softmax_cross_entropy(const eg__kernel_call *call) {
    eg__cuda_device *d = eg__cuda_call_device(call);
    if (!d) return eg_last_status();
    const eg_tensor *logits = call->inputs[0], *labels = call->inputs[1];
    eg__cuda_scalar type, label_type;
    if (!scalar_of(logits->dtype, &type) ||
        (type != EG__CUDA_SCALAR_F32 && type != EG__CUDA_SCALAR_F64))
        return no_kernel(call, logits);
    if (!scalar_of(labels->dtype, &label_type) ||
        (label_type != EG__CUDA_SCALAR_I32 && label_type != EG__CUDA_SCALAR_I64 &&
         label_type != EG__CUDA_SCALAR_U8))
        return no_kernel(call, labels);
    int64_t batch = logits->shape[0], classes = logits->shape[1];
    if (batch == 0) return eg__cuda_launched(call);
    eg__cuda_sparse_softmax_cross_entropy(type, eg__data(logits), logits->strides[0],
                                          logits->strides[1], label_type, eg__data(labels),
                                          labels->strides[0], batch, classes,
                                          eg__data(call->output), eg__cuda_stream(d));
    return eg__cuda_launched(call);
}

/* Check numerics: the only call of this family that waits for the GPU (it must give the index
 * to the host). On a CUDA failure the error is raised and -1 returned. */
int64_t eg__cuda_first_nonfinite(const eg_tensor *t) {
    uint64_t mask;
    switch (t->dtype) {
    case EG_DTYPE_F32:
        mask = 0x7f800000u;
        break;
    case EG_DTYPE_F64:
        mask = 0x7ff0000000000000u;
        break;
    case EG_DTYPE_F16:
        mask = 0x7c00u;
        break;
    case EG_DTYPE_BF16:
        mask = 0x7f80u;
        break;
    default:
        return -1;
    }
    if (t->n_elems <= 0) return -1;
    eg__cuda_device *d = eg__cuda_of(t->device);
    if (eg__cuda_enter(d) != EG_OK) return -1;
    const void *base = eg__data(t);
    if (!base) return -1;
    eg__cuda_scratch scratch;
    unsigned long long *found = eg__cuda_scratch_alloc(d, sizeof *found, &scratch);
    if (!found) return -1;
    cudaStream_t stream = eg__cuda_stream(d);
    /* a contiguous tensor as one axis: no index arithmetic per element */
    int64_t flat_shape[1] = {t->n_elems}, flat_strides[1] = {1};
    bool flat = eg__is_contiguous(t);
    cudaError_t e = cudaMemsetAsync(found, 0xff, sizeof *found, stream);
    if (e == cudaSuccess) {
        eg__cuda_find_nonfinite(base, eg__dtype_size(t->dtype), mask, flat ? 1 : t->n_dims,
                                flat ? flat_shape : t->shape, flat ? flat_strides : t->strides,
                                t->n_elems, found, stream);
        e = cudaGetLastError();
    }
    unsigned long long host = ~0ull;
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(&host, found, sizeof host, cudaMemcpyDeviceToHost, stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
    eg__cuda_scratch_free(&scratch);
    if (e != cudaSuccess) {
        (void)eg__cuda_error(e, t->device, "check numerics");
        return -1;
    }
    return host == ~0ull ? -1 : (int64_t)host;
}

void eg__cuda_register_reductions(eg__cuda_kernel_table *table) {
    unsigned numeric = EG__CUDA_DTYPES(EG_DTYPE_F32, EG_DTYPE_F64, EG_DTYPE_I32, EG_DTYPE_I64);
    unsigned floats = EG__CUDA_FLOAT_DTYPES;
    /* every wrapper takes any layout (a copy or the strides) */
    eg__cuda_register(table, EG__OP_SUM, cuda_reduce, numeric, true);
    eg__cuda_register(table, EG__OP_MEAN, cuda_reduce, floats, true);
    eg__cuda_register(table, EG__OP_MAX, cuda_reduce, numeric, true);
    eg__cuda_register(table, EG__OP_MIN, cuda_reduce, numeric, true);
    eg__cuda_register(table, EG__OP_LOGSUMEXP, cuda_reduce, floats, true);
    eg__cuda_register(table, EG__OP_VAR, cuda_reduce, floats, true);
    eg__cuda_register(table, EG__OP_ARGMAX, cuda_reduce, numeric, true);
    eg__cuda_register(table, EG__OP_ARGMIN, cuda_reduce, numeric, true);
    eg__cuda_register(table, EG__OP_SOFTMAX, cuda_softmax, floats, true);
    eg__cuda_register(table, EG__OP_LOG_SOFTMAX, cuda_softmax, floats, true);
    /* logits f32/f64, labels i32/i64/u8 */
    eg__cuda_register(
        table, EG__OP_SPARSE_SOFTMAX_CROSS_ENTROPY, cuda_sparse_softmax_cross_entropy,
        EG__CUDA_DTYPES(EG_DTYPE_F32, EG_DTYPE_F64, EG_DTYPE_I32, EG_DTYPE_I64, EG_DTYPE_U8), true);
}
