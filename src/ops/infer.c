/* Shape and dtype inference for every op: the checks that make errors immediate. */
#include <string.h>

#include "core/error.h"
#include "ops/internal.h"

#define SHAPE_TEXT 160

static const char *shape_text(const eg_tensor *t, char *buf) {
    return eg__shape_format(t->n_dims, t->shape, buf, SHAPE_TEXT);
}

static bool is_float_math(eg_dtype d) {
    return d == EG_DTYPE_F32 || d == EG_DTYPE_F64;
}
static bool is_numeric(eg_dtype d) {
    return is_float_math(d) || d == EG_DTYPE_I32 || d == EG_DTYPE_I64;
}
static bool is_index(eg_dtype d) {
    return d == EG_DTYPE_I32 || d == EG_DTYPE_I64;
}

static void same_as(eg__meta *meta, const eg_tensor *t) {
    meta->dtype = t->dtype;
    meta->n_dims = t->n_dims;
    memcpy(meta->shape, t->shape, sizeof meta->shape);
}

static eg_status require_float(eg__op op, const eg_tensor *t, int index) {
    if (is_float_math(t->dtype)) return EG_OK;
    return eg__op_error(op, EG_ERR_DTYPE, "input %d must be f32 or f64, got %s", index,
                        eg_dtype_name(t->dtype));
}

/* numpy broadcasting of n shapes into meta->shape. */
static eg_status broadcast_shapes(eg__op op, int n, const eg_tensor *const *in, eg__meta *meta) {
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

eg_status eg__infer_unary_float(eg__op op, int n_in, const eg_tensor *const *in,
                                const eg__attrs *attrs, eg__meta *meta) {
    (void)n_in;
    (void)attrs;
    if (require_float(op, in[0], 0) != EG_OK) return eg_last_status();
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
        return eg__op_error(op, EG_ERR_DTYPE, "unsupported dtype %s (f32, f64, i32, i64)",
                            eg_dtype_name(in[0]->dtype));
    meta->dtype = in[0]->dtype;
    return broadcast_shapes(op, 2, in, meta);
}

eg_status eg__infer_binary_float(eg__op op, int n_in, const eg_tensor *const *in,
                                 const eg__attrs *attrs, eg__meta *meta) {
    (void)attrs;
    if (same_dtypes(op, n_in, in) != EG_OK) return eg_last_status();
    if (require_float(op, in[0], 0) != EG_OK) return eg_last_status();
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
    if (op == EG__OP_MEAN && require_float(op, in[0], 0) != EG_OK) return eg_last_status();
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

eg_status eg__infer_matmul(eg__op op, int n_in, const eg_tensor *const *in, const eg__attrs *attrs,
                           eg__meta *meta) {
    (void)n_in;
    const eg_tensor *a = in[0], *b = in[1];
    char sa[SHAPE_TEXT], sb[SHAPE_TEXT];
    if (a->n_dims < 2 || b->n_dims < 2)
        return eg__op_error(op, EG_ERR_SHAPE, "operands need at least 2 dims: %s x %s",
                            shape_text(a, sa), shape_text(b, sb));
    if (same_dtypes(op, 2, in) != EG_OK || require_float(op, a, 0) != EG_OK)
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
    meta->dtype = a->dtype;
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
    if (!is_index(in[1]->dtype) || require_float(op, in[0], 0) != EG_OK)
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
