/* Normalization on a GPU — moments, batch_norm (with its fused relu) and the two passes of its
 * training gradient — the C wrappers of the kernel table over norm.cu.
 *
 * The CPU (src/backend/cpu/norm.c) copies a non-adjacent or strided input into (kept, reduced)
 * order first; here the kernels read the full-size tensors through their strides instead (a
 * batch norm's activations are the large operand, and a copy of them would double its memory
 * traffic), while keeping the CPU's enumeration: the kept index row-major over the kept axes,
 * the reduced index row-major over the reduced axes, chunks of 256 reduced elements. The small
 * kept-shaped parameters are made contiguous (eg__cuda_contiguous) and their per-element
 * coefficients computed by a kernel of their own, as the CPU computes them before its pass. */
#include <string.h>

#include "backend/cuda/kernels.h"
#include "backend/cuda/norm_launch.h"
#include "base/error.h"
#include "eagle/ops.h"

/* The kept and reduced axes of n same-shaped tensors (n = 1 or 2) over attrs->axes. */
static void split_axes(int n, const eg_tensor *const *xs, const eg__attrs *attrs,
                       eg__cuda_norm_split *s) {
    memset(s, 0, sizeof *s);
    bool reduce[EG_MAX_DIMS] = {0};
    for (int i = 0; i < attrs->n_axes; i++) reduce[attrs->axes[i]] = true;
    s->kept = s->reduced = 1;
    const eg_tensor *x = xs[0];
    for (int dim = 0; dim < x->n_dims; dim++) {
        int64_t size = x->shape[dim];
        bool reduced = reduce[dim];
        if (reduced)
            s->reduced *= size;
        else
            s->kept *= size;
        if (size == 1) continue; /* its index is always 0 */
        int *count = reduced ? &s->n_reduced : &s->n_kept;
        int64_t *shape = reduced ? s->reduced_shape : s->kept_shape;
        int64_t(*strides)[EG__CUDA_MAX_DIMS] = reduced ? s->reduced_strides : s->kept_strides;
        /* the previous axis of the same kind and this one as one axis, when every source steps
         * through them as through one (the row-major index over them is unchanged) */
        bool merge = *count > 0;
        for (int i = 0; i < n && merge; i++)
            merge = strides[i][*count - 1] == xs[i]->strides[dim] * size;
        int at = merge ? *count - 1 : (*count)++;
        shape[at] = merge ? shape[at] * size : size;
        for (int i = 0; i < n; i++) strides[i][at] = xs[i]->strides[dim];
    }
}

/* x's axes (and g's strides, g NULL for none) for the elementwise passes, with the kept index's
 * steps. */
static void affine_layout(const eg_tensor *x, const eg_tensor *g, const eg__attrs *attrs,
                          eg__cuda_norm_layout *l) {
    memset(l, 0, sizeof *l);
    bool reduce[EG_MAX_DIMS] = {0};
    for (int i = 0; i < attrs->n_axes; i++) reduce[attrs->axes[i]] = true;
    int64_t kept_strides[EG_MAX_DIMS], step = 1;
    for (int dim = x->n_dims - 1; dim >= 0; dim--) {
        kept_strides[dim] = reduce[dim] ? 0 : step;
        if (!reduce[dim]) step *= x->shape[dim];
    }
    l->n = x->n_elems;
    for (int dim = 0; dim < x->n_dims; dim++) {
        int64_t size = x->shape[dim];
        if (size == 1) continue;
        int64_t xs = x->strides[dim], gs = g ? g->strides[dim] : 0, ks = kept_strides[dim];
        int last = l->n_dims - 1;
        if (last >= 0 && l->strides[0][last] == xs * size && l->strides[1][last] == gs * size &&
            l->kept_strides[last] == ks * size) { /* one axis for x, g, the kept index (and the
                                                     contiguous output) */
            l->shape[last] *= size;
            l->strides[0][last] = xs;
            l->strides[1][last] = gs;
            l->kept_strides[last] = ks;
            continue;
        }
        l->shape[l->n_dims] = size;
        l->strides[0][l->n_dims] = xs;
        l->strides[1][l->n_dims] = gs;
        l->kept_strides[l->n_dims++] = ks;
    }
}

/* Up to 5 kept-shaped inputs made contiguous (copies enqueued on the stream). */
typedef struct dense_params {
    const void *data[5];
    eg__cuda_scratch scratch[5];
} dense_params;

static void free_params(dense_params *p) {
    for (int i = 0; i < 5; i++) eg__cuda_scratch_free(&p->scratch[i]);
}

static eg_status contiguous_params(eg__cuda_device *d, int n, const eg_tensor *const *in,
                                   dense_params *p) {
    memset(p, 0, sizeof *p);
    for (int i = 0; i < n; i++)
        if (!(p->data[i] = eg__cuda_contiguous(d, in[i], &p->scratch[i]))) {
            eg_status status = eg_last_status();
            free_params(p);
            return status;
        }
    return EG_OK;
}

static bool float_type(const eg_tensor *t, eg__cuda_scalar *type) {
    if (t->dtype == EG_DTYPE_F32)
        *type = EG__CUDA_SCALAR_F32;
    else if (t->dtype == EG_DTYPE_F64)
        *type = EG__CUDA_SCALAR_F64;
    else
        return false;
    return true;
}

static eg_status no_kernel(const eg__kernel_call *call, const eg_tensor *t) {
    return eg__op_error(call->op, EG_ERR_UNSUPPORTED, "no kernel for %s on %s",
                        eg_dtype_name(t->dtype), call->output->device->name);
}

/* scratch for the chunk partials of split, or NULL (bytes 0, or out of memory: check *failed) */
static void *partials(eg__cuda_device *d, const eg__cuda_norm_split *split,
                      eg__cuda_scratch *scratch, bool *failed) {
    memset(scratch, 0, sizeof *scratch);
    size_t bytes = eg__cuda_norm_scratch_bytes(split);
    void *p = bytes ? eg__cuda_scratch_alloc(d, bytes, scratch) : NULL;
    *failed = bytes && !p;
    return p;
}

/* x -> (2, kept...): [0] the means, [1] the population variances over attrs->axes */
static eg_status cuda_moments(const eg__kernel_call *call) {
    eg__cuda_device *d = eg__cuda_call_device(call);
    if (!d) return eg_last_status();
    const eg_tensor *x = call->inputs[0];
    eg__cuda_scalar type;
    if (!float_type(x, &type)) return no_kernel(call, x);
    if (call->output->n_elems == 0) return eg__cuda_launched(call);
    eg__cuda_norm_split split;
    split_axes(1, &x, call->attrs, &split);
    eg__cuda_scratch scratch;
    bool failed;
    void *partial = partials(d, &split, &scratch, &failed);
    if (failed) return eg_last_status();
    eg__cuda_moments(type, &split, eg__data(x), eg__data(call->output), partial,
                     eg__cuda_stream(d));
    eg__cuda_scratch_free(&scratch);
    return eg__cuda_launched(call);
}

/* Kept-shaped scratch arrays of t's dtype: n of them, kept elements each, one after another. */
static char *coefficient_arrays(eg__cuda_device *d, const eg_tensor *t, int n, int64_t kept,
                                eg__cuda_scratch *scratch) {
    memset(scratch, 0, sizeof *scratch);
    return eg__cuda_scratch_alloc(d, (size_t)(n * kept) * eg__dtype_size(t->dtype), scratch);
}

/* x, mean, variance, scale, offset -> (x - mean) scale / sqrt(variance + eps) + offset as x a +
 * b with the CPU's a, b; relu of it with attrs->ints[0] = relu */
static eg_status cuda_batch_norm(const eg__kernel_call *call) {
    eg__cuda_device *d = eg__cuda_call_device(call);
    if (!d) return eg_last_status();
    const eg_tensor *x = call->inputs[0];
    eg__cuda_scalar type;
    if (!float_type(x, &type)) return no_kernel(call, x);
    if (call->output->n_elems == 0) return eg__cuda_launched(call);
    cudaStream_t stream = eg__cuda_stream(d);
    int64_t kept = call->inputs[1]->n_elems;
    size_t size = eg__dtype_size(x->dtype);
    dense_params p;
    eg_status status = contiguous_params(d, 4, call->inputs + 1, &p);
    if (status != EG_OK) return status;
    eg__cuda_scratch scratch;
    char *ab = coefficient_arrays(d, x, 2, kept, &scratch);
    if (!ab) {
        status = eg_last_status();
        free_params(&p);
        return status;
    }
    eg__cuda_batch_norm_coefficients(type, kept, p.data[0], p.data[1], p.data[2], p.data[3],
                                     call->attrs->scalars[0], ab, ab + kept * size, stream);
    eg__cuda_norm_layout layout;
    affine_layout(x, NULL, call->attrs, &layout);
    eg__cuda_norm_affine(type, &layout, eg__data(x), ab, ab + kept * size,
                         call->attrs->ints[0] == EG_ACTIVATION_RELU, eg__data(call->output),
                         stream);
    eg__cuda_scratch_free(&scratch);
    free_params(&p);
    return eg__cuda_launched(call);
}

/* g, x, mean[, variance, scale, offset] -> (2, kept...): [sum g, sum g (x - mean)] over
 * attrs->axes (with relu, g where the forward's pre-activation x a + b > 0) */
static eg_status cuda_batch_norm_backward_sums(const eg__kernel_call *call) {
    eg__cuda_device *d = eg__cuda_call_device(call);
    if (!d) return eg_last_status();
    const eg_tensor *x = call->inputs[1];
    eg__cuda_scalar type;
    if (!float_type(x, &type)) return no_kernel(call, x);
    int64_t kept = call->output->n_elems / 2;
    if (kept == 0) return eg__cuda_launched(call);
    bool relu = call->attrs->ints[0] == EG_ACTIVATION_RELU;
    cudaStream_t stream = eg__cuda_stream(d);
    size_t size = eg__dtype_size(x->dtype);
    dense_params p; /* mean[, variance, scale, offset] */
    eg_status status = contiguous_params(d, relu ? 4 : 1, call->inputs + 2, &p);
    if (status != EG_OK) return status;
    eg__cuda_scratch coefficients = {.pointer = NULL, .handle = NULL, .allocator = NULL};
    char *ab = NULL; /* the forward's a, b */
    if (relu) {
        if (!(ab = coefficient_arrays(d, x, 2, kept, &coefficients))) {
            status = eg_last_status();
            free_params(&p);
            return status;
        }
        eg__cuda_batch_norm_coefficients(type, kept, p.data[0], p.data[1], p.data[2], p.data[3],
                                         call->attrs->scalars[0], ab, ab + kept * size, stream);
    }
    eg__cuda_norm_split split;
    split_axes(2, call->inputs, call->attrs, &split);
    eg__cuda_scratch scratch;
    bool failed;
    void *partial = partials(d, &split, &scratch, &failed);
    if (failed) {
        status = eg_last_status();
    } else {
        eg__cuda_batch_norm_backward_sums(type, &split, eg__data(call->inputs[0]), eg__data(x),
                                          p.data[0], ab, ab ? ab + kept * size : NULL,
                                          eg__data(call->output), partial, stream);
    }
    eg__cuda_scratch_free(&scratch);
    eg__cuda_scratch_free(&coefficients);
    free_params(&p);
    return status == EG_OK ? eg__cuda_launched(call) : status;
}

/* g, x, mean, variance, scale, sums[, offset] -> dx = g k + (x c1 + c0) with the CPU's k, c1, c0
 * (with relu, g where the forward's pre-activation x a + b > 0) */
static eg_status cuda_batch_norm_backward_input(const eg__kernel_call *call) {
    eg__cuda_device *d = eg__cuda_call_device(call);
    if (!d) return eg_last_status();
    const eg_tensor *g = call->inputs[0], *x = call->inputs[1];
    eg__cuda_scalar type;
    if (!float_type(x, &type)) return no_kernel(call, x);
    if (call->output->n_elems == 0) return eg__cuda_launched(call);
    bool relu = call->attrs->ints[0] == EG_ACTIVATION_RELU;
    double eps = call->attrs->scalars[0];
    cudaStream_t stream = eg__cuda_stream(d);
    int64_t kept = call->inputs[2]->n_elems, reduced = 1;
    for (int i = 0; i < call->attrs->n_axes; i++) reduced *= x->shape[call->attrs->axes[i]];
    size_t size = eg__dtype_size(x->dtype);
    dense_params p; /* mean, variance, scale, sums[, offset] */
    eg_status status = contiguous_params(d, relu ? 5 : 4, call->inputs + 2, &p);
    if (status != EG_OK) return status;
    eg__cuda_scratch scratch;
    char *c = coefficient_arrays(d, x, relu ? 5 : 3, kept, &scratch); /* k, c1, c0[, a, b] */
    if (!c) {
        status = eg_last_status();
        free_params(&p);
        return status;
    }
    size_t step = (size_t)kept * size;
    eg__cuda_batch_norm_input_coefficients(type, kept, p.data[0], p.data[1], p.data[2], p.data[3],
                                           eps, (double)reduced, c, c + step, c + 2 * step, stream);
    if (relu)
        eg__cuda_batch_norm_coefficients(type, kept, p.data[0], p.data[1], p.data[2], p.data[4],
                                         eps, c + 3 * step, c + 4 * step, stream);
    eg__cuda_norm_layout layout;
    affine_layout(x, g, call->attrs, &layout);
    eg__cuda_norm_affine_grad(type, &layout, eg__data(g), eg__data(x), c, c + step, c + 2 * step,
                              relu ? c + 3 * step : NULL, relu ? c + 4 * step : NULL,
                              eg__data(call->output), stream);
    eg__cuda_scratch_free(&scratch);
    free_params(&p);
    return eg__cuda_launched(call);
}

void eg__cuda_register_norm(eg__cuda_kernel_table *table) {
    unsigned floats = EG__CUDA_FLOAT_DTYPES;
    /* any layout: the full-size tensors through their strides, the others made contiguous */
    eg__cuda_register(table, EG__OP_MOMENTS, cuda_moments, floats, true);
    eg__cuda_register(table, EG__OP_BATCH_NORM, cuda_batch_norm, floats, true);
    eg__cuda_register(table, EG__OP_BATCH_NORM_BACKWARD_SUMS, cuda_batch_norm_backward_sums, floats,
                      true);
    eg__cuda_register(table, EG__OP_BATCH_NORM_BACKWARD_INPUT, cuda_batch_norm_backward_input,
                      floats, true);
}
