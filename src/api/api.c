/* The public op functions: argument normalisation, then eg__execute. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "api/internal.h"

static eg_tensor *run1(eg__op op, const eg_tensor *x, const eg__attrs *attrs) {
    const eg_tensor *in[1] = {x};
    return eg__execute(op, 1, in, attrs);
}

static eg_tensor *run2(eg__op op, const eg_tensor *a, const eg_tensor *b, const eg__attrs *attrs) {
    const eg_tensor *in[2] = {a, b};
    return eg__execute(op, 2, in, attrs);
}

static const eg__attrs no_attrs;

eg_tensor *eg__sum_to_shape(const eg_tensor *g, int n_dims, const int64_t *shape) {
    if (!g) return NULL;
    if (g->n_dims == n_dims && memcmp(g->shape, shape, sizeof(int64_t) * (size_t)n_dims) == 0) {
        eg__ref(g);
        return (eg_tensor *)g;
    }
    int axes[EG_MAX_DIMS], n_axes = 0, lead = g->n_dims - n_dims;
    for (int d = 0; d < g->n_dims; d++)
        if (d < lead || (shape[d - lead] == 1 && g->shape[d] != 1)) axes[n_axes++] = d;
    eg_tensor *summed = n_axes ? eg_sum(g, n_axes, axes, true) : (eg__ref(g), (eg_tensor *)g);
    eg_tensor *result = eg_reshape(summed, n_dims, shape);
    eg_release(summed);
    return result;
}

#define UNARY(name, OP)                                                                            \
    eg_tensor *eg_##name(const eg_tensor *x) {                                                     \
        return run1(EG__OP_##OP, x, &no_attrs);                                                    \
    }
/* The ops a fast-math region changes carry it in their attributes (the executors key and
 * compare ops by them), read when the op is built. */
#define UNARY_FAST_MATH(name, OP)                                                                  \
    eg_tensor *eg_##name(const eg_tensor *x) {                                                     \
        static const eg__attrs fast = {.fast_math = true};                                         \
        return run1(EG__OP_##OP, x, eg_fast_math_enabled() ? &fast : &no_attrs);                   \
    }
UNARY(neg, NEG)
UNARY(abs, ABS)
UNARY_FAST_MATH(exp, EXP)
UNARY(log, LOG)
UNARY(sqrt, SQRT)
UNARY(rsqrt, RSQRT)
UNARY(sin, SIN)
UNARY(cos, COS)
UNARY_FAST_MATH(tanh, TANH)
UNARY_FAST_MATH(sigmoid, SIGMOID)
UNARY(relu, RELU)
UNARY_FAST_MATH(gelu, GELU)
UNARY(softplus, SOFTPLUS)
UNARY(sign, SIGN)
UNARY(square, SQUARE)
UNARY(reciprocal, RECIPROCAL)
UNARY(erf, ERF)
#undef UNARY
#undef UNARY_FAST_MATH

#define BINARY(name, OP)                                                                           \
    eg_tensor *eg_##name(const eg_tensor *a, const eg_tensor *b) {                                 \
        return run2(EG__OP_##OP, a, b, &no_attrs);                                                 \
    }
BINARY(add, ADD)
BINARY(sub, SUB)
BINARY(mul, MUL)
BINARY(div, DIV)
BINARY(pow, POW)
BINARY(maximum, MAXIMUM)
BINARY(minimum, MINIMUM)
BINARY(equal, EQUAL)
BINARY(not_equal, NOT_EQUAL)
BINARY(less, LESS)
BINARY(less_equal, LESS_EQUAL)
BINARY(greater, GREATER)
BINARY(greater_equal, GREATER_EQUAL)
#undef BINARY

/* A 0-d constant in a's dtype, combined with a by op. The constant is released at once: the
 * result (and any tape record) holds its own reference. */
static eg_tensor *with_scalar(eg__op op, const eg_tensor *a, double value, const char *name) {
    if (!eg__check_arg(a, name, 0)) return NULL;
    eg__scope_suspend();
    eg_tensor *s = eg__full_on(a->device, a->dtype, 0, NULL, value);
    eg__scope_resume();
    if (!s) return NULL;
    eg_tensor *result = run2(op, a, s, &no_attrs);
    eg__unref(s);
    return result;
}

eg_tensor *eg_add_scalar(const eg_tensor *a, double value) {
    return with_scalar(EG__OP_ADD, a, value, "add_scalar");
}
eg_tensor *eg_mul_scalar(const eg_tensor *a, double value) {
    return with_scalar(EG__OP_MUL, a, value, "mul_scalar");
}
eg_tensor *eg_pow_scalar(const eg_tensor *a, double exponent) {
    return with_scalar(EG__OP_POW, a, exponent, "pow_scalar");
}

eg_tensor *eg_where(const eg_tensor *cond, const eg_tensor *a, const eg_tensor *b) {
    const eg_tensor *in[3] = {cond, a, b};
    return eg__execute(EG__OP_WHERE, 3, in, &no_attrs);
}

eg_tensor *eg_cast(const eg_tensor *x, eg_dtype dtype) {
    eg__attrs attrs = {.dtype = dtype};
    return run1(EG__OP_CAST, x, &attrs);
}

eg_tensor *eg_clip(const eg_tensor *x, double low, double high) {
    if (!(low <= high)) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "clip: low (%g) must be <= high (%g)", low, high);
        return NULL;
    }
    eg__attrs attrs = {.scalars = {low, high}};
    return run1(EG__OP_CLIP, x, &attrs);
}

/* Sorted, deduplicated, normalised axes into attrs; all axes when n_axes == 0. */
static bool set_axes(eg__attrs *attrs, const eg_tensor *x, int n_axes, const int *axes,
                     const char *name) {
    bool chosen[EG_MAX_DIMS] = {0};
    if (n_axes < 0 || (n_axes > 0 && !axes)) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "%s: bad axes list", name);
        return false;
    }
    if (n_axes == 0)
        for (int d = 0; d < x->n_dims; d++) chosen[d] = true;
    for (int i = 0; i < n_axes; i++) {
        int a = axes[i];
        if (!eg__normalize_axis(&a, x->n_dims)) {
            eg__error(EG_ERR_AXIS, "%s: axis %d out of range for %d dims", name, axes[i],
                      x->n_dims);
            return false;
        }
        chosen[a] = true;
    }
    attrs->n_axes = 0;
    for (int d = 0; d < x->n_dims; d++)
        if (chosen[d]) attrs->axes[attrs->n_axes++] = d;
    return true;
}

static eg_tensor *reduce(eg__op op, const eg_tensor *x, int n_axes, const int *axes,
                         bool keepdims) {
    if (!eg__check_arg(x, eg__op_defs[op].name, 0)) return NULL;
    eg__attrs attrs = {.keepdims = keepdims};
    if (!set_axes(&attrs, x, n_axes, axes, eg__op_defs[op].name)) return NULL;
    return run1(op, x, &attrs);
}

eg_tensor *eg_sum(const eg_tensor *x, int n_axes, const int *axes, bool keepdims) {
    return reduce(EG__OP_SUM, x, n_axes, axes, keepdims);
}
eg_tensor *eg_mean(const eg_tensor *x, int n_axes, const int *axes, bool keepdims) {
    return reduce(EG__OP_MEAN, x, n_axes, axes, keepdims);
}
eg_tensor *eg_max(const eg_tensor *x, int n_axes, const int *axes, bool keepdims) {
    return reduce(EG__OP_MAX, x, n_axes, axes, keepdims);
}
eg_tensor *eg_min(const eg_tensor *x, int n_axes, const int *axes, bool keepdims) {
    return reduce(EG__OP_MIN, x, n_axes, axes, keepdims);
}
eg_tensor *eg_logsumexp(const eg_tensor *x, int n_axes, const int *axes, bool keepdims) {
    return reduce(EG__OP_LOGSUMEXP, x, n_axes, axes, keepdims);
}
eg_tensor *eg_var(const eg_tensor *x, int n_axes, const int *axes, bool keepdims) {
    return reduce(EG__OP_VAR, x, n_axes, axes, keepdims);
}

static eg_tensor *axis_op(eg__op op, const eg_tensor *x, int axis, bool keepdims) {
    if (!eg__check_arg(x, eg__op_defs[op].name, 0)) return NULL;
    int a = axis;
    if (!eg__normalize_axis(&a, x->n_dims)) {
        eg__error(EG_ERR_AXIS, "%s: axis %d out of range for %d dims", eg__op_defs[op].name, axis,
                  x->n_dims);
        return NULL;
    }
    eg__attrs attrs = {.axis = a, .keepdims = keepdims};
    return run1(op, x, &attrs);
}

eg_tensor *eg_argmax(const eg_tensor *x, int axis, bool keepdims) {
    return axis_op(EG__OP_ARGMAX, x, axis, keepdims);
}
eg_tensor *eg_argmin(const eg_tensor *x, int axis, bool keepdims) {
    return axis_op(EG__OP_ARGMIN, x, axis, keepdims);
}
eg_tensor *eg_softmax(const eg_tensor *x, int axis) {
    return axis_op(EG__OP_SOFTMAX, x, axis, false);
}
eg_tensor *eg_log_softmax(const eg_tensor *x, int axis) {
    return axis_op(EG__OP_LOG_SOFTMAX, x, axis, false);
}

eg_tensor *eg_matmul_low_precision(const eg_tensor *a, const eg_tensor *b, bool transpose_a,
                                   bool transpose_b, eg_dtype compute_dtype,
                                   eg_dtype result_dtype) {
    if (!eg__check_arg(a, "matmul", 0) || !eg__check_arg(b, "matmul", 1)) return NULL;
    eg__attrs attrs = {.transpose_a = transpose_a,
                       .transpose_b = transpose_b,
                       .low_precision = true,
                       .compute_dtype = compute_dtype,
                       .result_dtype = result_dtype};
    return run2(EG__OP_MATMUL, a, b, &attrs);
}

eg_tensor *eg_matmul_ex(const eg_tensor *a, const eg_tensor *b, bool transpose_a,
                        bool transpose_b) {
    if (!eg__check_arg(a, "matmul", 0) || !eg__check_arg(b, "matmul", 1)) return NULL;
    if (a->n_dims == 0 || b->n_dims == 0) {
        eg__error(EG_ERR_SHAPE, "matmul: operands must have at least 1 dim");
        return NULL;
    }
    eg__attrs attrs = {.transpose_a = transpose_a, .transpose_b = transpose_b};
    if (a->n_dims >= 2 && b->n_dims >= 2) return run2(EG__OP_MATMUL, a, b, &attrs);
    /* numpy.matmul's 1-d rules: a vector is a row on the left, a column on the right, and the
     * added axis is removed from the result. */
    eg_tensor *a_row = a->n_dims == 1 ? eg_unsqueeze(a, 0) : NULL;
    eg_tensor *b_column = b->n_dims == 1 ? eg_unsqueeze(b, 1) : NULL;
    if (a_row) attrs.transpose_a = false;
    if (b_column) attrs.transpose_b = false;
    eg_tensor *c = run2(EG__OP_MATMUL, a_row ? a_row : a, b_column ? b_column : b, &attrs);
    if (c && a_row) {
        eg_tensor *squeezed = eg_squeeze(c, -2);
        eg_release(c);
        c = squeezed;
    }
    if (c && b_column) {
        eg_tensor *squeezed = eg_squeeze(c, -1);
        eg_release(c);
        c = squeezed;
    }
    eg_release(a_row);
    eg_release(b_column);
    return c;
}

eg_tensor *eg_matmul(const eg_tensor *a, const eg_tensor *b) {
    return eg_matmul_ex(a, b, false, false);
}

eg_tensor *eg_reshape(const eg_tensor *t, int n_dims, const int64_t *shape) {
    if (!eg__check_arg(t, "reshape", 0)) return NULL;
    if (n_dims < 0 || n_dims > EG_MAX_DIMS || (n_dims > 0 && !shape)) {
        eg__error(EG_ERR_SHAPE, "reshape: invalid number of dims %d", n_dims);
        return NULL;
    }
    eg__attrs attrs = {.n_dims = n_dims};
    int inferred = -1;
    int64_t known = 1;
    for (int i = 0; i < n_dims; i++) {
        attrs.shape[i] = shape[i];
        if (shape[i] == -1 && inferred < 0) {
            inferred = i;
        } else if (shape[i] < 0) {
            eg__error(EG_ERR_SHAPE, "reshape: invalid size %lld on axis %d", (long long)shape[i],
                      i);
            return NULL;
        } else {
            known *= shape[i];
        }
    }
    if (inferred >= 0) attrs.shape[inferred] = known ? t->n_elems / known : 0;
    return run1(EG__OP_RESHAPE, t, &attrs);
}

eg_tensor *eg_permute(const eg_tensor *t, const int *axes) {
    if (!eg__check_arg(t, "permute", 0)) return NULL;
    if (!axes && t->n_dims > 0) {
        eg__error(EG_ERR_NULL_ARGUMENT, "permute: axes is NULL");
        return NULL;
    }
    eg__attrs attrs = {.n_axes = t->n_dims};
    for (int i = 0; i < t->n_dims; i++) {
        attrs.axes[i] = axes[i];
        if (attrs.axes[i] < 0) attrs.axes[i] += t->n_dims;
    }
    return run1(EG__OP_PERMUTE, t, &attrs);
}

eg_tensor *eg_transpose(const eg_tensor *t, int axis0, int axis1) {
    if (!eg__check_arg(t, "transpose", 0)) return NULL;
    int a = axis0, b = axis1;
    if (!eg__normalize_axis(&a, t->n_dims) || !eg__normalize_axis(&b, t->n_dims)) {
        eg__error(EG_ERR_AXIS, "transpose: axes %d, %d out of range for %d dims", axis0, axis1,
                  t->n_dims);
        return NULL;
    }
    int axes[EG_MAX_DIMS];
    for (int i = 0; i < t->n_dims; i++) axes[i] = i;
    axes[a] = b;
    axes[b] = a;
    return eg_permute(t, axes);
}

eg_tensor *eg_slice(const eg_tensor *t, int axis, int64_t start, int64_t stop, int64_t step) {
    if (!eg__check_arg(t, "slice", 0)) return NULL;
    int a = axis;
    if (!eg__normalize_axis(&a, t->n_dims)) {
        eg__error(EG_ERR_AXIS, "slice: axis %d out of range for %d dims", axis, t->n_dims);
        return NULL;
    }
    if (step <= 0) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "slice: step must be > 0, got %lld", (long long)step);
        return NULL;
    }
    int64_t size = t->shape[a];
    if (start < 0) start += size;
    if (stop < 0) stop += size;
    start = start < 0 ? 0 : (start > size ? size : start);
    stop = stop < 0 ? 0 : (stop > size ? size : stop);
    if (stop < start) stop = start;
    eg__attrs attrs = {.axis = a, .ints = {start, stop, step}};
    return run1(EG__OP_SLICE, t, &attrs);
}

eg_tensor *eg_broadcast_to(const eg_tensor *t, int n_dims, const int64_t *shape) {
    if (!eg__check_arg(t, "broadcast_to", 0)) return NULL;
    if (n_dims < 0 || n_dims > EG_MAX_DIMS || (n_dims > 0 && !shape)) {
        eg__error(EG_ERR_SHAPE, "broadcast_to: invalid number of dims %d", n_dims);
        return NULL;
    }
    eg__attrs attrs = {.n_dims = n_dims};
    if (n_dims) memcpy(attrs.shape, shape, (size_t)n_dims * sizeof *shape);
    return run1(EG__OP_BROADCAST_TO, t, &attrs);
}

eg_tensor *eg_squeeze(const eg_tensor *t, int axis) {
    if (!eg__check_arg(t, "squeeze", 0)) return NULL;
    int a = axis;
    if (!eg__normalize_axis(&a, t->n_dims) || t->shape[a] != 1) {
        eg__error(EG_ERR_AXIS, "squeeze: axis %d is not a size-1 axis of %d dims", axis, t->n_dims);
        return NULL;
    }
    int64_t shape[EG_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < t->n_dims; d++)
        if (d != a) shape[n++] = t->shape[d];
    return eg_reshape(t, n, shape);
}

eg_tensor *eg_unsqueeze(const eg_tensor *t, int axis) {
    if (!eg__check_arg(t, "unsqueeze", 0)) return NULL;
    int a = axis < 0 ? axis + t->n_dims + 1 : axis;
    if (a < 0 || a > t->n_dims || t->n_dims >= EG_MAX_DIMS) {
        eg__error(EG_ERR_AXIS, "unsqueeze: axis %d out of range for %d dims", axis, t->n_dims);
        return NULL;
    }
    int64_t shape[EG_MAX_DIMS];
    int n = 0;
    for (int d = 0; d <= t->n_dims; d++) {
        if (d == a) shape[n++] = 1;
        if (d < t->n_dims) shape[n++] = t->shape[d];
    }
    return eg_reshape(t, n, shape);
}

eg_tensor *eg_copy(const eg_tensor *t) {
    return run1(EG__OP_COPY, t, &no_attrs);
}

eg_tensor *eg_tensor_to(const eg_tensor *t, const eg_device *device) {
    eg__attrs attrs = {.device = device};
    return run1(EG__OP_TO_DEVICE, t, &attrs);
}

eg_tensor *eg_contiguous(const eg_tensor *t) {
    if (!eg__check_arg(t, "contiguous", 0)) return NULL;
    /* An identity reshape gives a new tensor object (one owner each) that tapes still connect. */
    if (eg__is_contiguous(t)) return eg_reshape(t, t->n_dims, t->shape);
    return eg_copy(t);
}

eg_tensor *eg_concat(int n, eg_tensor *const *tensors_in, int axis) {
    const eg_tensor *const *tensors = eg__const_tensors(tensors_in);
    if (n < 1 || !tensors) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "concat: needs at least one tensor");
        return NULL;
    }
    for (int i = 0; i < n; i++)
        if (!eg__check_arg(tensors[i], "concat", i)) return NULL;
    int a = axis;
    if (!eg__normalize_axis(&a, tensors[0]->n_dims)) {
        eg__error(EG_ERR_AXIS, "concat: axis %d out of range for %d dims", axis,
                  tensors[0]->n_dims);
        return NULL;
    }
    if (n == 1) return eg_copy(tensors[0]);
    eg__attrs attrs = {.axis = a};
    return eg__execute(EG__OP_CONCAT, n, tensors, &attrs);
}

eg_tensor *eg_stack(int n, eg_tensor *const *tensors_in, int axis) {
    const eg_tensor *const *tensors = eg__const_tensors(tensors_in);
    if (n < 1 || !tensors) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "stack: needs at least one tensor");
        return NULL;
    }
    if (n == 1) return eg_unsqueeze(tensors[0], axis);
    const eg_tensor *inline_parts[16];
    const eg_tensor **parts = n <= 16 ? inline_parts : malloc((size_t)n * sizeof *parts);
    if (!parts) {
        eg__error(EG_ERR_OUT_OF_MEMORY, "stack: out of host memory");
        return NULL;
    }
    int made = 0;
    for (; made < n; made++) {
        parts[made] = eg_unsqueeze(tensors[made], axis);
        if (!parts[made]) break;
    }
    eg_tensor *result = NULL;
    if (made == n) {
        eg__attrs attrs = {.axis = axis < 0 ? axis + parts[0]->n_dims : axis};
        result = eg__execute(EG__OP_CONCAT, n, parts, &attrs);
    }
    for (int i = 0; i < made; i++) eg_release((eg_tensor *)parts[i]);
    if (parts != inline_parts) free(parts);
    return result;
}

eg_status eg_split(const eg_tensor *t, int axis, int n, const int64_t *sizes, eg_tensor **out) {
    if (!out || n < 1) return eg__error(EG_ERR_INVALID_ARGUMENT, "split: bad output array");
    for (int i = 0; i < n; i++) out[i] = NULL;
    if (!eg__check_arg(t, "split", 0)) return eg_last_status();
    int a = axis;
    if (!eg__normalize_axis(&a, t->n_dims))
        return eg__error(EG_ERR_AXIS, "split: axis %d out of range for %d dims", axis, t->n_dims);
    int64_t total = 0;
    for (int i = 0; i < n && sizes; i++) {
        if (sizes[i] < 0) return eg__error(EG_ERR_SHAPE, "split: negative size");
        total += sizes[i];
    }
    if (sizes ? total != t->shape[a] : t->shape[a] % n != 0)
        return eg__error(EG_ERR_SHAPE, "split: axis %d of size %lld cannot be split that way", a,
                         (long long)t->shape[a]);
    int64_t start = 0;
    for (int i = 0; i < n; i++) {
        int64_t size = sizes ? sizes[i] : t->shape[a] / n;
        out[i] = eg_slice(t, a, start, start + size, 1);
        if (!out[i]) {
            for (int j = 0; j < i; j++) {
                eg_release(out[j]);
                out[j] = NULL;
            }
            return eg_last_status();
        }
        start += size;
    }
    return EG_OK;
}

eg_tensor *eg_gather(const eg_tensor *t, const eg_tensor *indices, int axis) {
    if (!eg__check_arg(t, "gather", 0)) return NULL;
    int a = axis;
    if (!eg__normalize_axis(&a, t->n_dims)) {
        eg__error(EG_ERR_AXIS, "gather: axis %d out of range for %d dims", axis, t->n_dims);
        return NULL;
    }
    eg__attrs attrs = {.axis = a};
    return run2(EG__OP_GATHER, t, indices, &attrs);
}

eg_tensor *eg_one_hot(const eg_tensor *indices, int64_t depth, eg_dtype dtype) {
    eg__attrs attrs = {.ints = {depth}, .dtype = dtype};
    return run1(EG__OP_ONE_HOT, indices, &attrs);
}

eg_tensor *eg_pad(const eg_tensor *t, const int64_t *widths, double value) {
    if (!eg__check_arg(t, "pad", 0)) return NULL;
    if (!widths && t->n_dims > 0) {
        eg__error(EG_ERR_NULL_ARGUMENT, "pad: widths is NULL");
        return NULL;
    }
    eg__attrs attrs = {.scalars = {value}};
    for (int i = 0; i < 2 * t->n_dims; i++) attrs.ints[i] = widths[i];
    return run1(EG__OP_PAD, t, &attrs);
}

eg_tensor *eg_sparse_softmax_cross_entropy(const eg_tensor *logits, const eg_tensor *labels) {
    return run2(EG__OP_SPARSE_SOFTMAX_CROSS_ENTROPY, logits, labels, &no_attrs);
}

eg_tensor *eg_dropout_random(const eg_tensor *x, double rate, eg_generator *generator) {
    if (!eg__check_arg(x, "dropout", 0)) return NULL;
    if (rate == 0) return eg_reshape(x, x->n_dims, x->shape);
    eg_tensor *y = eg_dropout(x, rate, eg_generator_next_seed(generator), true);
    if (y) eg__executor_current()->random_drawn(y, generator);
    return y;
}

eg_tensor *eg_dropout(const eg_tensor *x, double rate, uint64_t seed, bool training) {
    if (!eg__check_arg(x, "dropout", 0)) return NULL;
    if (!(rate >= 0 && rate < 1)) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "dropout: rate must be in [0, 1), got %g", rate);
        return NULL;
    }
    if (!training || rate == 0) return eg_reshape(x, x->n_dims, x->shape);
    eg__attrs attrs = {.scalars = {rate}, .seed = seed, .training = true};
    return run1(EG__OP_DROPOUT, x, &attrs);
}
