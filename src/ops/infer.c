/* Shape and dtype inference for every op: the checks that make errors immediate. */
#include <string.h>

#include "base/error.h"
#include "eagle/nn.h"
#include "ops/internal.h"

#define SHAPE_TEXT 160

static const char *shape_text(const eg_tensor *t, char *buf) {
    return eg__shape_format(t->n_dims, t->shape, buf, SHAPE_TEXT);
}

static bool is_float_math(eg_dtype d) {
    return d == EG_DTYPE_F32 || d == EG_DTYPE_F64;
}
/* bf16 and f16 are stored in 16 bits and computed in f32: every kernel that takes them widens
 * its inputs to f32, accumulates in f32 and rounds its result once. The ops that need range or
 * accuracy (softmax, log-softmax, logsumexp, variance, cross-entropy: the autocast lists of
 * PyTorch and TensorFlow) take f32 and f64 only; mixed precision policies (nn/) cast to f32 before
 * them. Moments and batch normalization take bf16/f16 activations with f32 statistics and
 * parameters, and their statistics come out f32. */
static bool is_low_precision(eg_dtype d) {
    return d == EG_DTYPE_BF16 || d == EG_DTYPE_F16;
}
static bool is_float_any(eg_dtype d) {
    return is_float_math(d) || is_low_precision(d);
}
static bool is_numeric(eg_dtype d) {
    return is_float_any(d) || d == EG_DTYPE_I32 || d == EG_DTYPE_I64;
}
static bool is_index(eg_dtype d) {
    return d == EG_DTYPE_I32 || d == EG_DTYPE_I64;
}

static void same_as(eg__meta *meta, const eg_tensor *t) {
    meta->dtype = t->dtype;
    meta->n_dims = t->n_dims;
    memcpy(meta->shape, t->shape, sizeof meta->shape);
}

/* f32 or f64: the ops that run in full precision whatever the policy. */
static eg_status require_float(eg__op op, const eg_tensor *t, int index) {
    if (is_float_math(t->dtype)) return EG_OK;
    if (is_low_precision(t->dtype))
        return eg__op_error(op, EG_ERR_DTYPE,
                            "input %d is %s; %s runs in f32 or f64 (cast to f32 first: mixed "
                            "precision policies do)",
                            index, eg_dtype_name(t->dtype), eg__op_defs[op].name);
    return eg__op_error(op, EG_ERR_DTYPE, "input %d must be f32 or f64, got %s", index,
                        eg_dtype_name(t->dtype));
}

/* f32, f64, bf16 or f16. */
static eg_status require_any_float(eg__op op, const eg_tensor *t, int index) {
    if (is_float_any(t->dtype)) return EG_OK;
    return eg__op_error(op, EG_ERR_DTYPE, "input %d must be f32, f64, bf16 or f16, got %s", index,
                        eg_dtype_name(t->dtype));
}

/* numpy broadcasting of n shapes into meta->shape. */
static eg_status broadcast_general(eg__op op, int n, const eg_tensor *const *in, eg__meta *meta) {
    int n_dims = 0;
    for (int i = 0; i < n; i++) n_dims = in[i]->n_dims > n_dims ? in[i]->n_dims : n_dims;
    meta->n_dims = n_dims;
    for (int d = 0; d < n_dims; d++) {
        int64_t size = 1;
        for (int i = 0; i < n; i++) {
            int offset = n_dims - in[i]->n_dims;
            if (d < offset) continue;
            int64_t s = in[i]->shape[d - offset];
            if (s == size || s == 1) continue;
            if (size == 1) {
                size = s;
                continue;
            }
            char a[SHAPE_TEXT], b[SHAPE_TEXT];
            return eg__op_error(op, EG_ERR_SHAPE, "shapes %s and %s do not broadcast",
                                shape_text(in[0], a), shape_text(in[i], b));
        }
        meta->shape[d] = size;
    }
    return EG_OK;
}

/* Inputs of one shape, the common case, need no broadcasting: inlined into the elementwise
 * inference functions, the general walk out of line. */
static inline __attribute__((always_inline)) eg_status
broadcast_shapes(eg__op op, int n, const eg_tensor *const *in, eg__meta *meta) {
    int n_dims = in[0]->n_dims;
    for (int i = 1; i < n; i++)
        if (in[i]->n_dims != n_dims) return broadcast_general(op, n, in, meta);
    for (int d = 0; d < n_dims; d++)
        for (int i = 1; i < n; i++)
            if (in[i]->shape[d] != in[0]->shape[d]) return broadcast_general(op, n, in, meta);
    meta->n_dims = n_dims;
    for (int d = 0; d < n_dims; d++) meta->shape[d] = in[0]->shape[d];
    return EG_OK;
}

eg_status eg__infer_unary_float(eg__op op, int n_in, const eg_tensor *const *in,
                                const eg__attrs *attrs, eg__meta *meta) {
    (void)n_in;
    (void)attrs;
    if (require_any_float(op, in[0], 0) != EG_OK) return eg_last_status();
    same_as(meta, in[0]);
    return EG_OK;
}

static eg_status same_dtypes(eg__op op, int n, const eg_tensor *const *in) {
    for (int i = 1; i < n; i++)
        if (in[i]->dtype != in[0]->dtype)
            return eg__op_error(op, EG_ERR_DTYPE, "dtypes differ: %s and %s (cast one first)",
                                eg_dtype_name(in[0]->dtype), eg_dtype_name(in[i]->dtype));
    return EG_OK;
}

eg_status eg__infer_binary_numeric(eg__op op, int n_in, const eg_tensor *const *in,
                                   const eg__attrs *attrs, eg__meta *meta) {
    (void)attrs;
    if (same_dtypes(op, n_in, in) != EG_OK) return eg_last_status();
    if (!is_numeric(in[0]->dtype))
        return eg__op_error(op, EG_ERR_DTYPE, "unsupported dtype %s (f32, f64, bf16, f16, i32, i64)",
                            eg_dtype_name(in[0]->dtype));
    meta->dtype = in[0]->dtype;
    return broadcast_shapes(op, 2, in, meta);
}

eg_status eg__infer_binary_float(eg__op op, int n_in, const eg_tensor *const *in,
                                 const eg__attrs *attrs, eg__meta *meta) {
    (void)attrs;
    if (same_dtypes(op, n_in, in) != EG_OK) return eg_last_status();
    if (require_any_float(op, in[0], 0) != EG_OK) return eg_last_status();
    meta->dtype = in[0]->dtype;
    return broadcast_shapes(op, 2, in, meta);
}

eg_status eg__infer_compare(eg__op op, int n_in, const eg_tensor *const *in, const eg__attrs *attrs,
                            eg__meta *meta) {
    (void)attrs;
    if (same_dtypes(op, n_in, in) != EG_OK) return eg_last_status();
    if (!is_numeric(in[0]->dtype) && in[0]->dtype != EG_DTYPE_U8 && in[0]->dtype != EG_DTYPE_BOOL)
        return eg__op_error(op, EG_ERR_DTYPE, "unsupported dtype %s", eg_dtype_name(in[0]->dtype));
    meta->dtype = EG_DTYPE_BOOL;
    return broadcast_shapes(op, 2, in, meta);
}

eg_status eg__infer_where(eg__op op, int n_in, const eg_tensor *const *in, const eg__attrs *attrs,
                          eg__meta *meta) {
    (void)n_in;
    (void)attrs;
    if (in[0]->dtype != EG_DTYPE_BOOL)
        return eg__op_error(op, EG_ERR_DTYPE, "condition must be bool, got %s",
                            eg_dtype_name(in[0]->dtype));
    if (same_dtypes(op, 2, in + 1) != EG_OK) return eg_last_status();
    meta->dtype = in[1]->dtype;
    return broadcast_shapes(op, 3, in, meta);
}

eg_status eg__infer_cast(eg__op op, int n_in, const eg_tensor *const *in, const eg__attrs *attrs,
                         eg__meta *meta) {
    (void)n_in;
    if ((unsigned)attrs->dtype >= EG_DTYPE_COUNT)
        return eg__op_error(op, EG_ERR_DTYPE, "invalid target dtype %d", (int)attrs->dtype);
    same_as(meta, in[0]);
    meta->dtype = attrs->dtype;
    return EG_OK;
}

static void reduced_shape(const eg_tensor *x, const eg__attrs *attrs, eg__meta *meta) {
    bool reduce[EG_MAX_DIMS] = {0};
    for (int i = 0; i < attrs->n_axes; i++) reduce[attrs->axes[i]] = true;
    meta->n_dims = 0;
    for (int d = 0; d < x->n_dims; d++) {
        if (!reduce[d])
            meta->shape[meta->n_dims++] = x->shape[d];
        else if (attrs->keepdims)
            meta->shape[meta->n_dims++] = 1;
    }
}

static eg_status check_axes(eg__op op, const eg_tensor *x, const eg__attrs *attrs) {
    for (int i = 0; i < attrs->n_axes; i++)
        if (attrs->axes[i] < 0 || attrs->axes[i] >= x->n_dims ||
            (i > 0 && attrs->axes[i] <= attrs->axes[i - 1]))
            return eg__op_error(op, EG_ERR_AXIS, "invalid axes for %d dims", x->n_dims);
    return EG_OK;
}

eg_status eg__infer_reduce(eg__op op, int n_in, const eg_tensor *const *in, const eg__attrs *attrs,
                           eg__meta *meta) {
    (void)n_in;
    if (check_axes(op, in[0], attrs) != EG_OK) return eg_last_status();
    if (!is_numeric(in[0]->dtype))
        return eg__op_error(op, EG_ERR_DTYPE, "unsupported dtype %s", eg_dtype_name(in[0]->dtype));
    if (op == EG__OP_MEAN && require_any_float(op, in[0], 0) != EG_OK) return eg_last_status();
    if (op == EG__OP_MAX || op == EG__OP_MIN)
        for (int i = 0; i < attrs->n_axes; i++)
            if (in[0]->shape[attrs->axes[i]] == 0)
                return eg__op_error(op, EG_ERR_SHAPE, "axis %d is empty: no %s", attrs->axes[i],
                                    eg__op_defs[op].name);
    meta->dtype = in[0]->dtype;
    reduced_shape(in[0], attrs, meta);
    return EG_OK;
}

eg_status eg__infer_reduce_float(eg__op op, int n_in, const eg_tensor *const *in,
                                 const eg__attrs *attrs, eg__meta *meta) {
    if (require_float(op, in[0], 0) != EG_OK) return eg_last_status();
    return eg__infer_reduce(op, n_in, in, attrs, meta);
}

eg_status eg__infer_arg_reduce(eg__op op, int n_in, const eg_tensor *const *in,
                               const eg__attrs *attrs, eg__meta *meta) {
    (void)n_in;
    const eg_tensor *x = in[0];
    if (attrs->axis < 0 || attrs->axis >= x->n_dims)
        return eg__op_error(op, EG_ERR_AXIS, "axis %d out of range for %d dims", attrs->axis,
                            x->n_dims);
    if (!is_numeric(x->dtype))
        return eg__op_error(op, EG_ERR_DTYPE, "unsupported dtype %s", eg_dtype_name(x->dtype));
    if (x->shape[attrs->axis] == 0)
        return eg__op_error(op, EG_ERR_SHAPE, "axis %d is empty", attrs->axis);
    eg__attrs one = *attrs;
    one.n_axes = 1;
    one.axes[0] = attrs->axis;
    reduced_shape(x, &one, meta);
    meta->dtype = EG_DTYPE_I64;
    return EG_OK;
}

eg_status eg__infer_softmax(eg__op op, int n_in, const eg_tensor *const *in, const eg__attrs *attrs,
                            eg__meta *meta) {
    (void)n_in;
    if (require_float(op, in[0], 0) != EG_OK) return eg_last_status();
    if (attrs->axis < 0 || attrs->axis >= in[0]->n_dims)
        return eg__op_error(op, EG_ERR_AXIS, "axis %d out of range for %d dims", attrs->axis,
                            in[0]->n_dims);
    same_as(meta, in[0]);
    return EG_OK;
}

/* A low-precision product's dtypes (attrs->low_precision): compute bf16 or f16, the result f32
 * or compute, each of the n operands f32 or compute. */
static eg_status check_low_precision(eg__op op, int n, const eg_tensor *const *in,
                                     const eg__attrs *attrs) {
    eg_dtype compute = attrs->compute_dtype;
    if (!is_low_precision(compute))
        return eg__op_error(op, EG_ERR_DTYPE, "a low-precision product computes in bf16 or f16, not %s",
                            eg_dtype_name(compute));
    if (attrs->result_dtype != EG_DTYPE_F32 && attrs->result_dtype != compute)
        return eg__op_error(op, EG_ERR_DTYPE, "the result of a %s product must be f32 or %s, not %s",
                            eg_dtype_name(compute), eg_dtype_name(compute),
                            eg_dtype_name(attrs->result_dtype));
    for (int i = 0; i < n; i++)
        if (in[i]->dtype != EG_DTYPE_F32 && in[i]->dtype != compute)
            return eg__op_error(op, EG_ERR_DTYPE, "input %d of a %s product must be f32 or %s, got %s",
                                i, eg_dtype_name(compute), eg_dtype_name(compute),
                                eg_dtype_name(in[i]->dtype));
    return EG_OK;
}

eg_status eg__infer_matmul(eg__op op, int n_in, const eg_tensor *const *in, const eg__attrs *attrs,
                           eg__meta *meta) {
    (void)n_in;
    const eg_tensor *a = in[0], *b = in[1];
    char sa[SHAPE_TEXT], sb[SHAPE_TEXT];
    if (a->n_dims < 2 || b->n_dims < 2)
        return eg__op_error(op, EG_ERR_SHAPE, "operands need at least 2 dims: %s x %s",
                            shape_text(a, sa), shape_text(b, sb));
    if (attrs->low_precision ? check_low_precision(op, 2, in, attrs) != EG_OK
                             : same_dtypes(op, 2, in) != EG_OK || require_any_float(op, a, 0) != EG_OK)
        return eg_last_status();
    int64_t m = a->shape[a->n_dims - (attrs->transpose_a ? 1 : 2)];
    int64_t k = a->shape[a->n_dims - (attrs->transpose_a ? 2 : 1)];
    int64_t k2 = b->shape[b->n_dims - (attrs->transpose_b ? 1 : 2)];
    int64_t n = b->shape[b->n_dims - (attrs->transpose_b ? 2 : 1)];
    if (k != k2)
        return eg__op_error(op, EG_ERR_SHAPE, "inner dimensions differ: %s%s x %s%s",
                            shape_text(a, sa), attrs->transpose_a ? "^T" : "", shape_text(b, sb),
                            attrs->transpose_b ? "^T" : "");
    /* batch dims broadcast */
    int batch_a = a->n_dims - 2, batch_b = b->n_dims - 2;
    int batch = batch_a > batch_b ? batch_a : batch_b;
    for (int d = 0; d < batch; d++) {
        int da = d - (batch - batch_a), db = d - (batch - batch_b);
        int64_t x = da >= 0 ? a->shape[da] : 1, y = db >= 0 ? b->shape[db] : 1;
        if (x != y && x != 1 && y != 1)
            return eg__op_error(op, EG_ERR_SHAPE, "batch dimensions do not broadcast: %s x %s",
                                shape_text(a, sa), shape_text(b, sb));
        meta->shape[d] = x == 1 ? y : x;
    }
    meta->n_dims = batch + 2;
    meta->shape[batch] = m;
    meta->shape[batch + 1] = n;
    meta->dtype = attrs->low_precision ? attrs->result_dtype : a->dtype;
    return EG_OK;
}

/* numpy's no-copy reshape: a view exists when every group of merged/split axes is contiguous
 * within itself. */
static bool reshape_strides(const eg_tensor *x, int n_dims, const int64_t *shape,
                            int64_t *strides) {
    int old_n = 0;
    int64_t old_shape[EG_MAX_DIMS], old_strides[EG_MAX_DIMS];
    for (int i = 0; i < x->n_dims; i++) {
        if (x->shape[i] == 1) continue;
        old_shape[old_n] = x->shape[i];
        old_strides[old_n++] = x->strides[i];
    }
    int oi = 0, oj = 1, ni = 0, nj = 1;
    while (ni < n_dims && oi < old_n) {
        int64_t np = shape[ni], op = old_shape[oi];
        while (np != op) {
            if (np < op)
                np *= shape[nj++];
            else
                op *= old_shape[oj++];
        }
        for (int k = oi; k < oj - 1; k++)
            if (old_strides[k] != old_shape[k + 1] * old_strides[k + 1]) return false;
        strides[nj - 1] = old_strides[oj - 1];
        for (int k = nj - 1; k > ni; k--) strides[k - 1] = strides[k] * shape[k];
        ni = nj++;
        oi = oj++;
    }
    int64_t last = ni > 0 ? strides[ni - 1] : 1;
    for (int k = ni; k < n_dims; k++) strides[k] = last;
    return true;
}

eg_status eg__infer_reshape(eg__op op, int n_in, const eg_tensor *const *in, const eg__attrs *attrs,
                            eg__meta *meta) {
    (void)n_in;
    const eg_tensor *x = in[0];
    int64_t n = eg__shape_n_elems(attrs->n_dims, attrs->shape);
    if (n != x->n_elems) {
        char a[SHAPE_TEXT], b[SHAPE_TEXT];
        return eg__op_error(op, EG_ERR_SHAPE, "cannot reshape %s (%lld elements) into %s",
                            shape_text(x, a), (long long)x->n_elems,
                            eg__shape_format(attrs->n_dims, attrs->shape, b, SHAPE_TEXT));
    }
    meta->dtype = x->dtype;
    meta->n_dims = attrs->n_dims;
    memcpy(meta->shape, attrs->shape, sizeof meta->shape);
    if (x->n_elems == 0 || reshape_strides(x, attrs->n_dims, attrs->shape, meta->strides)) {
        if (x->n_elems == 0) eg__contiguous_strides(meta->n_dims, meta->shape, meta->strides);
        meta->is_view = true;
        meta->offset = x->offset;
    }
    return EG_OK;
}

eg_status eg__infer_permute(eg__op op, int n_in, const eg_tensor *const *in, const eg__attrs *attrs,
                            eg__meta *meta) {
    (void)n_in;
    const eg_tensor *x = in[0];
    bool seen[EG_MAX_DIMS] = {0};
    if (attrs->n_axes != x->n_dims)
        return eg__op_error(op, EG_ERR_AXIS, "permutation has %d axes, tensor has %d",
                            attrs->n_axes, x->n_dims);
    for (int i = 0; i < x->n_dims; i++) {
        int a = attrs->axes[i];
        if (a < 0 || a >= x->n_dims || seen[a])
            return eg__op_error(op, EG_ERR_AXIS, "axes are not a permutation of 0..%d",
                                x->n_dims - 1);
        seen[a] = true;
        meta->shape[i] = x->shape[a];
        meta->strides[i] = x->strides[a];
    }
    meta->dtype = x->dtype;
    meta->n_dims = x->n_dims;
    meta->is_view = true;
    meta->offset = x->offset;
    return EG_OK;
}

/* attrs: axis, ints[0..2] = start, stop, step, already clamped to the axis. */
eg_status eg__infer_slice(eg__op op, int n_in, const eg_tensor *const *in, const eg__attrs *attrs,
                          eg__meta *meta) {
    (void)n_in;
    const eg_tensor *x = in[0];
    int axis = attrs->axis;
    int64_t start = attrs->ints[0], stop = attrs->ints[1], step = attrs->ints[2];
    if (axis < 0 || axis >= x->n_dims)
        return eg__op_error(op, EG_ERR_AXIS, "axis %d out of range for %d dims", axis, x->n_dims);
    if (step <= 0 || start < 0 || stop > x->shape[axis])
        return eg__op_error(op, EG_ERR_INVALID_ARGUMENT, "bad slice %lld:%lld:%lld",
                            (long long)start, (long long)stop, (long long)step);
    same_as(meta, x);
    memcpy(meta->strides, x->strides, sizeof meta->strides);
    meta->shape[axis] = stop > start ? (stop - start + step - 1) / step : 0;
    meta->strides[axis] = x->strides[axis] * step;
    meta->offset = x->offset + (meta->shape[axis] ? start * x->strides[axis] : 0);
    meta->is_view = true;
    return EG_OK;
}

eg_status eg__infer_broadcast_to(eg__op op, int n_in, const eg_tensor *const *in,
                                 const eg__attrs *attrs, eg__meta *meta) {
    (void)n_in;
    const eg_tensor *x = in[0];
    char a[SHAPE_TEXT], b[SHAPE_TEXT];
    if (attrs->n_dims < x->n_dims) goto bad;
    for (int d = 0; d < attrs->n_dims; d++) {
        int xd = d - (attrs->n_dims - x->n_dims);
        if (xd < 0) {
            meta->strides[d] = 0;
        } else if (x->shape[xd] == attrs->shape[d]) {
            meta->strides[d] = x->strides[xd];
        } else if (x->shape[xd] == 1) {
            meta->strides[d] = 0;
        } else {
            goto bad;
        }
        meta->shape[d] = attrs->shape[d];
    }
    meta->dtype = x->dtype;
    meta->n_dims = attrs->n_dims;
    meta->offset = x->offset;
    meta->is_view = true;
    return EG_OK;
bad:
    return eg__op_error(op, EG_ERR_SHAPE, "cannot broadcast %s to %s", shape_text(x, a),
                        eg__shape_format(attrs->n_dims, attrs->shape, b, SHAPE_TEXT));
}

eg_status eg__infer_copy(eg__op op, int n_in, const eg_tensor *const *in, const eg__attrs *attrs,
                         eg__meta *meta) {
    (void)op;
    (void)n_in;
    (void)attrs;
    same_as(meta, in[0]);
    return EG_OK;
}

eg_status eg__infer_to_device(eg__op op, int n_in, const eg_tensor *const *in,
                              const eg__attrs *attrs, eg__meta *meta) {
    (void)n_in;
    if (!attrs->device) return eg__op_error(op, EG_ERR_NULL_ARGUMENT, "the device is NULL");
    same_as(meta, in[0]);
    meta->device = attrs->device;
    return EG_OK;
}

eg_status eg__infer_concat(eg__op op, int n_in, const eg_tensor *const *in, const eg__attrs *attrs,
                           eg__meta *meta) {
    int axis = attrs->axis;
    if (n_in < 1) return eg__op_error(op, EG_ERR_INVALID_ARGUMENT, "no tensors to join");
    if (axis < 0 || axis >= in[0]->n_dims)
        return eg__op_error(op, EG_ERR_AXIS, "axis %d out of range for %d dims", axis,
                            in[0]->n_dims);
    if (same_dtypes(op, n_in, in) != EG_OK) return eg_last_status();
    same_as(meta, in[0]);
    for (int i = 1; i < n_in; i++) {
        bool ok = in[i]->n_dims == in[0]->n_dims;
        for (int d = 0; ok && d < in[0]->n_dims; d++)
            ok = d == axis || in[i]->shape[d] == in[0]->shape[d];
        if (!ok) {
            char a[SHAPE_TEXT], b[SHAPE_TEXT];
            return eg__op_error(op, EG_ERR_SHAPE, "shapes %s and %s differ off axis %d",
                                shape_text(in[0], a), shape_text(in[i], b), axis);
        }
        meta->shape[axis] += in[i]->shape[axis];
    }
    return EG_OK;
}

eg_status eg__infer_gather(eg__op op, int n_in, const eg_tensor *const *in, const eg__attrs *attrs,
                           eg__meta *meta) {
    (void)n_in;
    const eg_tensor *x = in[0], *indices = in[1];
    int axis = attrs->axis;
    if (axis < 0 || axis >= x->n_dims)
        return eg__op_error(op, EG_ERR_AXIS, "axis %d out of range for %d dims", axis, x->n_dims);
    if (!is_index(indices->dtype))
        return eg__op_error(op, EG_ERR_DTYPE, "indices must be i32 or i64, got %s",
                            eg_dtype_name(indices->dtype));
    if (x->n_dims - 1 + indices->n_dims > EG_MAX_DIMS)
        return eg__op_error(op, EG_ERR_SHAPE, "result would have more than %d dims", EG_MAX_DIMS);
    meta->dtype = x->dtype;
    meta->n_dims = 0;
    for (int d = 0; d < axis; d++) meta->shape[meta->n_dims++] = x->shape[d];
    for (int d = 0; d < indices->n_dims; d++) meta->shape[meta->n_dims++] = indices->shape[d];
    for (int d = axis + 1; d < x->n_dims; d++) meta->shape[meta->n_dims++] = x->shape[d];
    return EG_OK;
}

/* The adjoint of gather: inputs (updates, indices); attrs->shape is the result's shape. */
eg_status eg__infer_scatter_add(eg__op op, int n_in, const eg_tensor *const *in,
                                const eg__attrs *attrs, eg__meta *meta) {
    (void)n_in;
    if (!is_index(in[1]->dtype) || require_any_float(op, in[0], 0) != EG_OK)
        return eg__op_error(op, EG_ERR_DTYPE, "needs float updates and i32/i64 indices");
    if (attrs->axis < 0 || attrs->axis >= attrs->n_dims ||
        in[0]->n_dims != attrs->n_dims - 1 + in[1]->n_dims)
        return eg__op_error(op, EG_ERR_SHAPE, "updates do not match indices and result shape");
    meta->dtype = in[0]->dtype;
    meta->n_dims = attrs->n_dims;
    memcpy(meta->shape, attrs->shape, sizeof meta->shape);
    return EG_OK;
}

/* The adjoint of slice: places input 0 at start:stop:step of zeros shaped attrs->shape. */
eg_status eg__infer_unslice(eg__op op, int n_in, const eg_tensor *const *in, const eg__attrs *attrs,
                            eg__meta *meta) {
    (void)n_in;
    if (attrs->n_dims != in[0]->n_dims || attrs->axis < 0 || attrs->axis >= attrs->n_dims)
        return eg__op_error(op, EG_ERR_SHAPE, "input does not match the result shape");
    meta->dtype = in[0]->dtype;
    meta->n_dims = attrs->n_dims;
    memcpy(meta->shape, attrs->shape, sizeof meta->shape);
    return EG_OK;
}

eg_status eg__infer_one_hot(eg__op op, int n_in, const eg_tensor *const *in, const eg__attrs *attrs,
                            eg__meta *meta) {
    (void)n_in;
    if (!is_index(in[0]->dtype) && in[0]->dtype != EG_DTYPE_U8)
        return eg__op_error(op, EG_ERR_DTYPE, "indices must be i32, i64 or u8, got %s",
                            eg_dtype_name(in[0]->dtype));
    if (attrs->ints[0] < 0) return eg__op_error(op, EG_ERR_INVALID_ARGUMENT, "negative depth");
    if ((unsigned)attrs->dtype >= EG_DTYPE_COUNT)
        return eg__op_error(op, EG_ERR_DTYPE, "invalid result dtype %d", (int)attrs->dtype);
    if (in[0]->n_dims >= EG_MAX_DIMS)
        return eg__op_error(op, EG_ERR_SHAPE, "result would have more than %d dims", EG_MAX_DIMS);
    same_as(meta, in[0]);
    meta->shape[meta->n_dims++] = attrs->ints[0];
    meta->dtype = attrs->dtype;
    return EG_OK;
}

eg_status eg__infer_pad(eg__op op, int n_in, const eg_tensor *const *in, const eg__attrs *attrs,
                        eg__meta *meta) {
    (void)n_in;
    same_as(meta, in[0]);
    for (int d = 0; d < in[0]->n_dims; d++) {
        if (attrs->ints[2 * d] < 0 || attrs->ints[2 * d + 1] < 0)
            return eg__op_error(op, EG_ERR_INVALID_ARGUMENT, "negative padding on axis %d", d);
        meta->shape[d] += attrs->ints[2 * d] + attrs->ints[2 * d + 1];
    }
    return EG_OK;
}

eg_status eg__infer_sparse_softmax_cross_entropy(eg__op op, int n_in, const eg_tensor *const *in,
                                                 const eg__attrs *attrs, eg__meta *meta) {
    (void)n_in;
    (void)attrs;
    const eg_tensor *logits = in[0], *labels = in[1];
    char a[SHAPE_TEXT], b[SHAPE_TEXT];
    if (require_float(op, logits, 0) != EG_OK) return eg_last_status();
    if (!is_index(labels->dtype) && labels->dtype != EG_DTYPE_U8)
        return eg__op_error(op, EG_ERR_DTYPE, "labels must be i32, i64 or u8, got %s",
                            eg_dtype_name(labels->dtype));
    if (logits->n_dims != 2 || labels->n_dims != 1 || labels->shape[0] != logits->shape[0])
        return eg__op_error(op, EG_ERR_SHAPE,
                            "expected logits (B, C) and labels (B,), got %s "
                            "and %s",
                            shape_text(logits, a), shape_text(labels, b));
    meta->dtype = logits->dtype;
    meta->n_dims = 1;
    meta->shape[0] = logits->shape[0];
    return EG_OK;
}

/* x * scale + shift: three float operands of one dtype, broadcast together. */
eg_status eg__infer_mul_add(eg__op op, int n_in, const eg_tensor *const *in, const eg__attrs *attrs,
                            eg__meta *meta) {
    (void)attrs;
    if (same_dtypes(op, n_in, in) != EG_OK || require_any_float(op, in[0], 0) != EG_OK)
        return eg_last_status();
    meta->dtype = in[0]->dtype;
    return broadcast_shapes(op, 3, in, meta);
}

/* x -> (2, x reduced over attrs->axes): mean and population variance; in f32 for bf16 and f16
 * x (the statistics of mixed precision's normalization layers, accumulated in double like f32's:
 * their accuracy, not the format's). */
eg_status eg__infer_moments(eg__op op, int n_in, const eg_tensor *const *in, const eg__attrs *attrs,
                            eg__meta *meta) {
    (void)n_in;
    if (require_any_float(op, in[0], 0) != EG_OK || check_axes(op, in[0], attrs) != EG_OK)
        return eg_last_status();
    eg__meta reduced;
    reduced_shape(in[0], attrs, &reduced);
    if (reduced.n_dims >= EG_MAX_DIMS)
        return eg__op_error(op, EG_ERR_SHAPE, "result would have more than %d dims", EG_MAX_DIMS);
    meta->dtype = is_low_precision(in[0]->dtype) ? EG_DTYPE_F32 : in[0]->dtype;
    meta->n_dims = reduced.n_dims + 1;
    meta->shape[0] = 2;
    memcpy(meta->shape + 1, reduced.shape, sizeof(int64_t) * (size_t)reduced.n_dims);
    return EG_OK;
}

/* batch_norm's (and its gradient's) attrs->ints[0]: the activation fused after it. */
static eg_status check_norm_activation(eg__op op, const eg__attrs *attrs) {
    if (attrs->ints[0] == EG_ACTIVATION_NONE || attrs->ints[0] == EG_ACTIVATION_RELU) return EG_OK;
    return eg__op_error(op, EG_ERR_INVALID_ARGUMENT, "activation %lld is not one of none, relu",
                        (long long)attrs->ints[0]);
}

/* (x, mean, variance, scale, offset) -> like x; the four shaped like x reduced over attrs->axes
 * with keepdims; attrs->ints[0] NONE or RELU. One float dtype throughout, or bf16 / f16 x with
 * the four in f32 (mixed precision: computed in f32, rounded once to x's dtype). */
eg_status eg__infer_batch_norm(eg__op op, int n_in, const eg_tensor *const *in,
                               const eg__attrs *attrs, eg__meta *meta) {
    if (require_any_float(op, in[0], 0) != EG_OK) return eg_last_status();
    if (is_low_precision(in[0]->dtype)) {
        for (int i = 1; i < n_in; i++)
            if (in[i]->dtype != EG_DTYPE_F32)
                return eg__op_error(op, EG_ERR_DTYPE,
                                    "x is %s, so input %d (a statistic or parameter) must be f32, "
                                    "got %s",
                                    eg_dtype_name(in[0]->dtype), i, eg_dtype_name(in[i]->dtype));
    } else if (same_dtypes(op, n_in, in) != EG_OK) {
        return eg_last_status();
    }
    if (check_axes(op, in[0], attrs) != EG_OK || check_norm_activation(op, attrs) != EG_OK)
        return eg_last_status();
    eg__attrs keep = *attrs;
    keep.keepdims = true;
    eg__meta kept;
    reduced_shape(in[0], &keep, &kept);
    for (int i = 1; i < 5; i++) {
        if (in[i]->n_dims != kept.n_dims ||
            memcmp(in[i]->shape, kept.shape, sizeof(int64_t) * (size_t)kept.n_dims) != 0) {
            char a[SHAPE_TEXT], b[SHAPE_TEXT];
            return eg__op_error(op, EG_ERR_SHAPE, "input %d has shape %s, expected %s", i,
                                shape_text(in[i], a),
                                eg__shape_format(kept.n_dims, kept.shape, b, SHAPE_TEXT));
        }
    }
    if (!(attrs->scalars[0] >= 0))
        return eg__op_error(op, EG_ERR_INVALID_ARGUMENT, "epsilon must be >= 0");
    same_as(meta, in[0]);
    return EG_OK;
}

/* Checks that in[i] has the shape `want` (n_dims, shape). */
static eg_status require_shape(eg__op op, const eg_tensor *const *in, int i, int n_dims,
                               const int64_t *shape) {
    if (in[i]->n_dims == n_dims &&
        memcmp(in[i]->shape, shape, sizeof(int64_t) * (size_t)n_dims) == 0)
        return EG_OK;
    char a[SHAPE_TEXT], b[SHAPE_TEXT];
    return eg__op_error(op, EG_ERR_SHAPE, "input %d has shape %s, expected %s", i,
                        shape_text(in[i], a), eg__shape_format(n_dims, shape, b, SHAPE_TEXT));
}

/* batch_norm_backward_sums (g, x, mean) -> (2, kept): g like x, mean x reduced over attrs->axes
 * with keepdims; batch_norm_backward_input (g, x, mean, variance, scale, sums) -> like x, sums
 * being (2, kept) (what batch_norm_backward_sums returns). With attrs->ints[0] = RELU sums takes
 * (g, x, mean, variance, scale, offset) and input one more, offset, last; all kept-shaped. One
 * float dtype throughout, or g and x in one of bf16 / f16 and the rest f32: then the sums are
 * f32 and dx x's dtype. */
eg_status eg__infer_batch_norm_backward(eg__op op, int n_in, const eg_tensor *const *in,
                                        const eg__attrs *attrs, eg__meta *meta) {
    if (check_norm_activation(op, attrs) != EG_OK) return eg_last_status();
    bool relu = attrs->ints[0] == EG_ACTIVATION_RELU;
    bool sums_op = op == EG__OP_BATCH_NORM_BACKWARD_SUMS;
    int want = sums_op ? (relu ? 6 : 3) : (relu ? 7 : 6);
    if (n_in != want)
        return eg__op_error(op, EG_ERR_INVALID_ARGUMENT, "takes %d inputs%s, got %d", want,
                            relu ? " with relu" : "", n_in);
    if (require_any_float(op, in[1], 1) != EG_OK) return eg_last_status();
    bool low = is_low_precision(in[1]->dtype);
    if (low) {
        if (in[0]->dtype != in[1]->dtype)
            return eg__op_error(op, EG_ERR_DTYPE, "dtypes differ: g is %s, x %s (cast one first)",
                                eg_dtype_name(in[0]->dtype), eg_dtype_name(in[1]->dtype));
        for (int i = 2; i < n_in; i++)
            if (in[i]->dtype != EG_DTYPE_F32)
                return eg__op_error(op, EG_ERR_DTYPE,
                                    "x is %s, so input %d (a statistic or parameter) must be f32, "
                                    "got %s",
                                    eg_dtype_name(in[1]->dtype), i, eg_dtype_name(in[i]->dtype));
    } else if (same_dtypes(op, n_in, in) != EG_OK) {
        return eg_last_status();
    }
    if (check_axes(op, in[1], attrs) != EG_OK) return eg_last_status();
    eg__attrs keep = *attrs;
    keep.keepdims = true;
    eg__meta kept;
    reduced_shape(in[1], &keep, &kept);
    if (kept.n_dims >= EG_MAX_DIMS)
        return eg__op_error(op, EG_ERR_SHAPE, "result would have more than %d dims", EG_MAX_DIMS);
    int64_t stacked[EG_MAX_DIMS];
    stacked[0] = 2;
    memcpy(stacked + 1, kept.shape, sizeof(int64_t) * (size_t)kept.n_dims);
    if (require_shape(op, in, 0, in[1]->n_dims, in[1]->shape) != EG_OK) return eg_last_status();
    for (int i = 2; i < n_in; i++) {
        bool sums = !sums_op && i == 5;
        if (require_shape(op, in, i, kept.n_dims + sums, sums ? stacked : kept.shape) != EG_OK)
            return eg_last_status();
    }
    if (op == EG__OP_BATCH_NORM_BACKWARD_SUMS) {
        meta->dtype = low ? EG_DTYPE_F32 : in[1]->dtype;
        meta->n_dims = kept.n_dims + 1;
        memcpy(meta->shape, stacked, sizeof(int64_t) * (size_t)meta->n_dims);
        return EG_OK;
    }
    if (!(attrs->scalars[0] >= 0))
        return eg__op_error(op, EG_ERR_INVALID_ARGUMENT, "epsilon must be >= 0");
    same_as(meta, in[1]);
    return EG_OK;
}

/* ---- 2-d windows: convolution and pooling ---- */

/* Batch, height, width and channels of a 4-d image shape in the window's layout. */
typedef struct image_dims {
    int64_t n, h, w, c;
} image_dims;

static image_dims image_of(const int64_t *shape, bool channels_first) {
    image_dims d = {shape[0], shape[1], shape[2], shape[3]};
    if (channels_first) d = (image_dims){shape[0], shape[2], shape[3], shape[1]};
    return d;
}

static void image_shape(image_dims d, bool channels_first, eg__meta *meta) {
    meta->n_dims = 4;
    meta->shape[0] = d.n;
    meta->shape[1] = channels_first ? d.c : d.h;
    meta->shape[2] = channels_first ? d.h : d.w;
    meta->shape[3] = channels_first ? d.w : d.c;
}

/* Output size of one spatial axis: floor((in + pads - dilation (k - 1) - 1) / stride) + 1, or
 * -1 when the (dilated) window does not fit even once. */
static int64_t window_out(int64_t in, int64_t k, int stride, int dilation, int64_t pad_before,
                          int64_t pad_after) {
    int64_t span = (int64_t)dilation * (k - 1) + 1, room = in + pad_before + pad_after - span;
    return room < 0 ? -1 : room / stride + 1;
}

static eg_status check_window(eg__op op, const eg__window *w, bool pooling) {
    if (w->stride[0] < 1 || w->stride[1] < 1)
        return eg__op_error(op, EG_ERR_INVALID_ARGUMENT, "strides must be >= 1, got (%d, %d)",
                            w->stride[0], w->stride[1]);
    if (!pooling && (w->dilation[0] < 1 || w->dilation[1] < 1))
        return eg__op_error(op, EG_ERR_INVALID_ARGUMENT, "dilations must be >= 1, got (%d, %d)",
                            w->dilation[0], w->dilation[1]);
    for (int i = 0; i < 4; i++)
        if (w->pad[i] < 0)
            return eg__op_error(op, EG_ERR_INVALID_ARGUMENT, "negative padding %lld",
                                (long long)w->pad[i]);
    if (pooling) {
        if (w->kernel[0] < 1 || w->kernel[1] < 1)
            return eg__op_error(op, EG_ERR_INVALID_ARGUMENT, "pool size must be >= 1, got (%d, %d)",
                                w->kernel[0], w->kernel[1]);
        /* every window then holds at least one element of the input */
        for (int i = 0; i < 4; i++)
            if (w->pad[i] >= w->kernel[i / 2])
                return eg__op_error(op, EG_ERR_INVALID_ARGUMENT,
                                    "padding %lld must be smaller than the pool size %d",
                                    (long long)w->pad[i], w->kernel[i / 2]);
    }
    return EG_OK;
}

static eg_status require_image(eg__op op, const eg_tensor *t, const char *what) {
    if (t->n_dims == 4) return EG_OK;
    char s[SHAPE_TEXT];
    return eg__op_error(op, EG_ERR_SHAPE, "%s must be 4-d, got %s", what, shape_text(t, s));
}

/* The convolution of an image shaped x_shape with a filter shaped w_shape (HWIO): checks both and
 * writes the result's shape into meta. */
static eg_status conv_shape(eg__op op, const int64_t *x_shape, const int64_t *w_shape,
                            const eg__attrs *attrs, eg__meta *meta) {
    const eg__window *win = &attrs->window;
    if (check_window(op, win, false) != EG_OK) return eg_last_status();
    image_dims x = image_of(x_shape, win->channels_first);
    char a[SHAPE_TEXT], b[SHAPE_TEXT];
    eg__shape_format(4, x_shape, a, SHAPE_TEXT);
    eg__shape_format(4, w_shape, b, SHAPE_TEXT);
    int64_t groups = win->groups;
    if (groups < 1 || x.c % groups != 0 || w_shape[3] % groups != 0)
        return eg__op_error(op, EG_ERR_INVALID_ARGUMENT,
                            "groups %lld must be >= 1 and divide the input channels and the "
                            "filters: input %s, filter %s",
                            (long long)groups, a, b);
    if (w_shape[2] * groups != x.c)
        return eg__op_error(op, EG_ERR_SHAPE,
                            "filter %s (KH, KW, C_in/groups, C_out) does not match input %s "
                            "(%s) with groups %lld",
                            b, a, win->channels_first ? "NCHW" : "NHWC", (long long)groups);
    if (w_shape[0] < 1 || w_shape[1] < 1 || w_shape[3] < 1)
        return eg__op_error(op, EG_ERR_SHAPE, "empty filter %s", b);
    int64_t out_h =
        window_out(x.h, w_shape[0], win->stride[0], win->dilation[0], win->pad[0], win->pad[1]);
    int64_t out_w =
        window_out(x.w, w_shape[1], win->stride[1], win->dilation[1], win->pad[2], win->pad[3]);
    if (out_h < 0 || out_w < 0)
        return eg__op_error(op, EG_ERR_SHAPE,
                            "the filter %s (dilation %d, %d) is larger than the padded input %s", b,
                            win->dilation[0], win->dilation[1], a);
    image_shape((image_dims){x.n, out_h, out_w, w_shape[3]}, win->channels_first, meta);
    return EG_OK;
}

static eg_status same_shape(eg__op op, const eg_tensor *t, const eg__meta *want, const char *what) {
    if (t->n_dims == want->n_dims &&
        memcmp(t->shape, want->shape, sizeof(int64_t) * (size_t)t->n_dims) == 0)
        return EG_OK;
    char a[SHAPE_TEXT], b[SHAPE_TEXT];
    return eg__op_error(op, EG_ERR_SHAPE, "%s has shape %s, expected %s", what, shape_text(t, a),
                        eg__shape_format(want->n_dims, want->shape, b, SHAPE_TEXT));
}

/* inputs (x, filter) -> y */
eg_status eg__infer_conv2d(eg__op op, int n_in, const eg_tensor *const *in, const eg__attrs *attrs,
                           eg__meta *meta) {
    (void)n_in;
    if (require_image(op, in[0], "input") != EG_OK || require_image(op, in[1], "filter") != EG_OK ||
        same_dtypes(op, 2, in) != EG_OK || require_any_float(op, in[0], 0) != EG_OK)
        return eg_last_status();
    meta->dtype = in[0]->dtype;
    return conv_shape(op, in[0]->shape, in[1]->shape, attrs, meta);
}

/* inputs (dy, filter), attrs->shape = the input's shape -> dx (also conv2d_transpose) */
eg_status eg__infer_conv2d_backward_input(eg__op op, int n_in, const eg_tensor *const *in,
                                          const eg__attrs *attrs, eg__meta *meta) {
    (void)n_in;
    if (require_image(op, in[0], "gradient") != EG_OK ||
        require_image(op, in[1], "filter") != EG_OK || same_dtypes(op, 2, in) != EG_OK ||
        require_any_float(op, in[0], 0) != EG_OK)
        return eg_last_status();
    if (attrs->n_dims != 4) return eg__op_error(op, EG_ERR_SHAPE, "the input shape must be 4-d");
    eg__meta y;
    if (conv_shape(op, attrs->shape, in[1]->shape, attrs, &y) != EG_OK ||
        same_shape(op, in[0], &y, "the gradient") != EG_OK)
        return eg_last_status();
    meta->dtype = in[0]->dtype;
    meta->n_dims = 4;
    memcpy(meta->shape, attrs->shape, sizeof meta->shape);
    return EG_OK;
}

/* inputs (x, dy), attrs->shape = the filter's shape -> dfilter */
eg_status eg__infer_conv2d_backward_filter(eg__op op, int n_in, const eg_tensor *const *in,
                                           const eg__attrs *attrs, eg__meta *meta) {
    (void)n_in;
    if (require_image(op, in[0], "input") != EG_OK ||
        require_image(op, in[1], "gradient") != EG_OK || same_dtypes(op, 2, in) != EG_OK ||
        require_any_float(op, in[0], 0) != EG_OK)
        return eg_last_status();
    if (attrs->n_dims != 4) return eg__op_error(op, EG_ERR_SHAPE, "the filter shape must be 4-d");
    eg__meta y;
    if (conv_shape(op, in[0]->shape, attrs->shape, attrs, &y) != EG_OK ||
        same_shape(op, in[1], &y, "the gradient") != EG_OK)
        return eg_last_status();
    meta->dtype = in[0]->dtype;
    meta->n_dims = 4;
    memcpy(meta->shape, attrs->shape, sizeof meta->shape);
    return EG_OK;
}

static eg_status pool_shape(eg__op op, const int64_t *x_shape, const eg__attrs *attrs,
                            eg__meta *meta) {
    const eg__window *win = &attrs->window;
    if (check_window(op, win, true) != EG_OK) return eg_last_status();
    image_dims x = image_of(x_shape, win->channels_first);
    int64_t out_h = window_out(x.h, win->kernel[0], win->stride[0], 1, win->pad[0], win->pad[1]);
    int64_t out_w = window_out(x.w, win->kernel[1], win->stride[1], 1, win->pad[2], win->pad[3]);
    if (out_h < 0 || out_w < 0) {
        char a[SHAPE_TEXT];
        return eg__op_error(op, EG_ERR_SHAPE, "the pool size (%d, %d) is larger than the input %s",
                            win->kernel[0], win->kernel[1],
                            eg__shape_format(4, x_shape, a, SHAPE_TEXT));
    }
    image_shape((image_dims){x.n, out_h, out_w, x.c}, win->channels_first, meta);
    return EG_OK;
}

/* max_pool2d, avg_pool2d and max_pool2d_argmax (i64 flat indices into x): x -> y */
eg_status eg__infer_pool2d(eg__op op, int n_in, const eg_tensor *const *in, const eg__attrs *attrs,
                           eg__meta *meta) {
    (void)n_in;
    if (require_image(op, in[0], "input") != EG_OK || require_any_float(op, in[0], 0) != EG_OK)
        return eg_last_status();
    meta->dtype = op == EG__OP_MAX_POOL2D_ARGMAX ? EG_DTYPE_I64 : in[0]->dtype;
    return pool_shape(op, in[0]->shape, attrs, meta);
}

/* inputs (x, dy) -> dx */
eg_status eg__infer_max_pool2d_backward(eg__op op, int n_in, const eg_tensor *const *in,
                                        const eg__attrs *attrs, eg__meta *meta) {
    (void)n_in;
    if (require_image(op, in[0], "input") != EG_OK || same_dtypes(op, 2, in) != EG_OK ||
        require_any_float(op, in[0], 0) != EG_OK)
        return eg_last_status();
    eg__meta y;
    if (pool_shape(op, in[0]->shape, attrs, &y) != EG_OK ||
        same_shape(op, in[1], &y, "the gradient") != EG_OK)
        return eg_last_status();
    same_as(meta, in[0]);
    return EG_OK;
}

/* input dy, attrs->shape = the input's shape -> dx */
eg_status eg__infer_avg_pool2d_backward(eg__op op, int n_in, const eg_tensor *const *in,
                                        const eg__attrs *attrs, eg__meta *meta) {
    (void)n_in;
    if (require_image(op, in[0], "gradient") != EG_OK || require_any_float(op, in[0], 0) != EG_OK)
        return eg_last_status();
    if (attrs->n_dims != 4) return eg__op_error(op, EG_ERR_SHAPE, "the input shape must be 4-d");
    eg__meta y;
    if (pool_shape(op, attrs->shape, attrs, &y) != EG_OK ||
        same_shape(op, in[0], &y, "the gradient") != EG_OK)
        return eg_last_status();
    meta->dtype = in[0]->dtype;
    meta->n_dims = 4;
    memcpy(meta->shape, attrs->shape, sizeof meta->shape);
    return EG_OK;
}

/* ---- dense: activation(x · kernel + bias) in one op ---- */

static bool fusable_activation(int64_t activation) {
    return activation == EG_ACTIVATION_NONE || activation == EG_ACTIVATION_RELU ||
           activation == EG_ACTIVATION_SIGMOID || activation == EG_ACTIVATION_TANH;
}

/* x: (M, K), kernel: (K, N), bias: (N,) -> (M, N) */
eg_status eg__infer_dense(eg__op op, int n_in, const eg_tensor *const *in, const eg__attrs *attrs,
                          eg__meta *meta) {
    (void)n_in;
    const eg_tensor *x = in[0], *w = in[1], *b = in[2];
    /* The shapes are formatted only for an error: six snprintf calls a step were ~1 % of the
     * seed model's instructions. */
    char sx[SHAPE_TEXT], sw[SHAPE_TEXT], sb[SHAPE_TEXT];
#define FORMAT_SHAPES()                                                                            \
    (eg__shape_format(x->n_dims, x->shape, sx, SHAPE_TEXT),                                        \
     eg__shape_format(w->n_dims, w->shape, sw, SHAPE_TEXT),                                        \
     eg__shape_format(b->n_dims, b->shape, sb, SHAPE_TEXT))
    if (!fusable_activation(attrs->ints[0]))
        return eg__op_error(op, EG_ERR_INVALID_ARGUMENT,
                            "activation %lld is not one of none, relu, sigmoid, tanh",
                            (long long)attrs->ints[0]);
    if (attrs->low_precision) {
        if (check_low_precision(op, 3, in, attrs) != EG_OK) return eg_last_status();
    } else if (!is_float_any(x->dtype)) {
        return eg__op_error(op, EG_ERR_DTYPE, "input 0 must be f32, f64, bf16 or f16, got %s",
                            eg_dtype_name(x->dtype));
    } else if (w->dtype != x->dtype || b->dtype != x->dtype) {
        return eg__op_error(op, EG_ERR_DTYPE, "dtypes differ: %s, %s, %s", eg_dtype_name(x->dtype),
                            eg_dtype_name(w->dtype), eg_dtype_name(b->dtype));
    }
    if (x->n_dims != 2 || w->n_dims != 2 || b->n_dims != 1)
        return FORMAT_SHAPES(),
               eg__op_error(op, EG_ERR_SHAPE,
                            "needs x (M, K), kernel (K, N), bias (N): got %s, %s, %s", sx, sw, sb);
    if (x->shape[1] != w->shape[0])
        return FORMAT_SHAPES(),
               eg__op_error(op, EG_ERR_SHAPE, "inner dimensions differ: %s x %s", sx, sw);
    if (b->shape[0] != w->shape[1])
        return FORMAT_SHAPES(),
               eg__op_error(op, EG_ERR_SHAPE, "bias %s does not match the kernel's %lld units", sb,
                            (long long)w->shape[1]);
#undef FORMAT_SHAPES
    meta->dtype = attrs->low_precision ? attrs->result_dtype : x->dtype;
    meta->n_dims = 2;
    meta->shape[0] = x->shape[0];
    meta->shape[1] = w->shape[1];
    return EG_OK;
}
