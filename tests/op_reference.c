/* Plain-C references for the op cases: every expected value is computed here in doubles from the
 * input values, without calling Eagle. Parameters (c->p, c->d) are documented in op_cases.c. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "op_cases.h"
#include "op_reference.h"

static int norm_axis(int64_t axis, int n_dims) {
    return (int)(axis < 0 ? axis + n_dims : axis);
}

static bool is_int_dtype(eg_dtype dtype) {
    return dtype == EG_DTYPE_I32 || dtype == EG_DTYPE_I64 || dtype == EG_DTYPE_U8;
}

/* Rounds to `bits` significant bits, ties to even (normal range only). */
static double round_mantissa(double v, int bits) {
    if (v == 0 || !isfinite(v)) return v;
    int e;
    double m = frexp(v, &e);
    return ldexp(nearbyint(ldexp(m, bits)), e - bits);
}

/* What storing v into a tensor of dtype keeps (C conversion rules: truncation toward zero). */
double oc_convert(eg_dtype dtype, double v) {
    switch (dtype) {
    case EG_DTYPE_F32:
        return round_mantissa(v, 24);
    case EG_DTYPE_F16:
        return round_mantissa(v, 11);
    case EG_DTYPE_BF16:
        return round_mantissa(v, 8);
    case EG_DTYPE_I32:
        return fmin(fmax(trunc(v), -2147483648.0), 2147483647.0);
    case EG_DTYPE_I64:
        return trunc(v);
    case EG_DTYPE_U8:
        return fmin(fmax(trunc(v), 0.0), 255.0);
    case EG_DTYPE_BOOL:
        return v != 0;
    default:
        return v;
    }
}

/* ---- elementwise ---- */

static double unary_value(const oc_case *c, double x) {
    switch (c->op) {
    case EG__OP_NEG:
        return -x;
    case EG__OP_ABS:
        return fabs(x);
    case EG__OP_EXP:
        return exp(x);
    case EG__OP_LOG:
        return log(x);
    case EG__OP_SQRT:
        return sqrt(x);
    case EG__OP_RSQRT:
        return 1 / sqrt(x);
    case EG__OP_SIN:
        return sin(x);
    case EG__OP_COS:
        return cos(x);
    case EG__OP_TANH:
        return tanh(x);
    case EG__OP_SIGMOID:
        return 1 / (1 + exp(-x));
    case EG__OP_RELU:
        return x > 0 ? x : 0;
    case EG__OP_GELU:
        return 0.5 * x * (1 + erf(x / sqrt(2.0)));
    case EG__OP_SOFTPLUS:
        return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x));
    case EG__OP_SIGN:
        return (x > 0) - (x < 0);
    case EG__OP_SQUARE:
        return x * x;
    case EG__OP_RECIPROCAL:
        return 1 / x;
    case EG__OP_ERF:
        return erf(x);
    case EG__OP_CLIP:
        return fmin(fmax(x, c->d[0]), c->d[1]);
    default:
        return NAN;
    }
}

int oc_ref_unary(const oc_case *c, const oc_ref *in, oc_ref *out) {
    oc_ref_init(out, in[0].dtype, in[0].n_dims, in[0].shape);
    for (int64_t i = 0; i < out->n_elems; i++) out->data[i] = unary_value(c, in[0].data[i]);
    return 1;
}

static double binary_value(eg__op op, eg_dtype dtype, double a, double b) {
    switch (op) {
    case EG__OP_ADD:
        return a + b;
    case EG__OP_SUB:
        return a - b;
    case EG__OP_MUL:
        return a * b;
    case EG__OP_DIV:
        return is_int_dtype(dtype) ? trunc(a / b) : a / b;
    case EG__OP_POW:
        return pow(a, b);
    case EG__OP_MAXIMUM:
        return a >= b ? a : b;
    case EG__OP_MINIMUM:
        return a <= b ? a : b;
    case EG__OP_EQUAL:
        return a == b;
    case EG__OP_NOT_EQUAL:
        return a != b;
    case EG__OP_LESS:
        return a < b;
    case EG__OP_LESS_EQUAL:
        return a <= b;
    case EG__OP_GREATER:
        return a > b;
    case EG__OP_GREATER_EQUAL:
        return a >= b;
    default:
        return NAN;
    }
}

/* Broadcasts the n operands and applies fn(index of the result). */
static bool broadcast_init(int n, const oc_ref *const *ops, eg_dtype dtype, oc_ref *out) {
    int n_dims;
    int64_t shape[EG_MAX_DIMS];
    if (!oc_broadcast_shape(n, ops, &n_dims, shape)) return false;
    oc_ref_init(out, dtype, n_dims, shape);
    return true;
}

int oc_ref_binary(const oc_case *c, const oc_ref *in, oc_ref *out) {
    static oc_ref scalar;
    const oc_ref *ops[2] = {&in[0], &in[1]};
    if (c->p[0]) { /* the *_scalar functions: the scalar is stored in a's dtype */
        oc_ref_init(&scalar, in[0].dtype, 0, NULL);
        scalar.data[0] = oc_convert(in[0].dtype, c->d[0]);
        ops[1] = &scalar;
    }
    bool compare = c->op >= EG__OP_EQUAL && c->op <= EG__OP_GREATER_EQUAL;
    if (!broadcast_init(2, ops, compare ? EG_DTYPE_BOOL : in[0].dtype, out)) return -1;
    int64_t index[EG_MAX_DIMS];
    for (int64_t i = 0; i < out->n_elems; i++) {
        oc_unravel(out->n_dims, out->shape, i, index);
        double a = oc_broadcast_get(ops[0], out->n_dims, index);
        double b = oc_broadcast_get(ops[1], out->n_dims, index);
        out->data[i] = binary_value(c->op, in[0].dtype, a, b);
    }
    return 1;
}

int oc_ref_where(const oc_case *c, const oc_ref *in, oc_ref *out) {
    (void)c;
    const oc_ref *ops[3] = {&in[0], &in[1], &in[2]};
    if (!broadcast_init(3, ops, in[1].dtype, out)) return -1;
    int64_t index[EG_MAX_DIMS];
    for (int64_t i = 0; i < out->n_elems; i++) {
        oc_unravel(out->n_dims, out->shape, i, index);
        bool cond = oc_broadcast_get(ops[0], out->n_dims, index) != 0;
        out->data[i] = oc_broadcast_get(ops[cond ? 1 : 2], out->n_dims, index);
    }
    return 1;
}

/* p[0]: target dtype; p[2] != 0: cast back to the input's dtype afterwards. */
int oc_ref_cast(const oc_case *c, const oc_ref *in, oc_ref *out) {
    eg_dtype target = (eg_dtype)c->p[0];
    oc_ref_init(out, c->p[2] ? in[0].dtype : target, in[0].n_dims, in[0].shape);
    for (int64_t i = 0; i < out->n_elems; i++) {
        double v = oc_convert(target, in[0].data[i]);
        out->data[i] = c->p[2] ? oc_convert(in[0].dtype, v) : v;
    }
    return 1;
}

/* ---- reductions ---- */

/* p[0] = n_axes (0: all), p[1..4] = axes, p[5] = keepdims. For each input element, the flat
 * index of its group in the result. */
static void reduce_layout(const oc_ref *x, int n_axes, const int64_t *axes, bool keepdims,
                          bool *reduced, oc_ref *out, int64_t *group_of) {
    for (int d = 0; d < x->n_dims; d++) reduced[d] = n_axes == 0;
    for (int i = 0; i < n_axes; i++) reduced[norm_axis(axes[i], x->n_dims)] = true;
    int64_t shape[EG_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < x->n_dims; d++) {
        if (!reduced[d])
            shape[n++] = x->shape[d];
        else if (keepdims)
            shape[n++] = 1;
    }
    oc_ref_init(out, x->dtype, n, shape);
    int64_t index[EG_MAX_DIMS], out_index[EG_MAX_DIMS];
    for (int64_t i = 0; i < x->n_elems; i++) {
        oc_unravel(x->n_dims, x->shape, i, index);
        int k = 0;
        for (int d = 0; d < x->n_dims; d++) {
            if (!reduced[d])
                out_index[k++] = index[d];
            else if (keepdims)
                out_index[k++] = 0;
        }
        group_of[i] = oc_ravel(out->n_dims, out->shape, out_index);
    }
}

int oc_ref_reduce(const oc_case *c, const oc_ref *in, oc_ref *out) {
    static int64_t group_of[OC_MAX_ELEMS];
    static double values[OC_MAX_ELEMS];
    bool reduced[EG_MAX_DIMS];
    const oc_ref *x = &in[0];
    reduce_layout(x, (int)c->p[0], &c->p[1], c->p[5] != 0, reduced, out, group_of);
    for (int64_t g = 0; g < out->n_elems; g++) {
        int n = 0;
        for (int64_t i = 0; i < x->n_elems; i++)
            if (group_of[i] == g) values[n++] = x->data[i];
        double r = 0, m = -INFINITY, lo = INFINITY, mean = 0;
        for (int k = 0; k < n; k++) {
            mean += values[k] / n;
            m = fmax(m, values[k]);
            lo = fmin(lo, values[k]);
        }
        switch (c->op) {
        case EG__OP_SUM:
            for (int k = 0; k < n; k++) r += values[k];
            break;
        case EG__OP_MEAN:
            r = n ? mean : NAN;
            break;
        case EG__OP_MAX:
            r = m;
            break;
        case EG__OP_MIN:
            r = lo;
            break;
        case EG__OP_LOGSUMEXP:
            for (int k = 0; k < n; k++) r += exp(values[k] - m);
            r = m + log(r);
            break;
        case EG__OP_VAR:
            for (int k = 0; k < n; k++) r += (values[k] - mean) * (values[k] - mean) / n;
            if (!n) r = NAN;
            break;
        default:
            r = NAN;
        }
        out->data[g] = r;
    }
    return 1;
}

/* p[0] = axis, p[1] = keepdims; the first extreme wins. */
int oc_ref_arg_reduce(const oc_case *c, const oc_ref *in, oc_ref *out) {
    static int64_t group_of[OC_MAX_ELEMS];
    bool reduced[EG_MAX_DIMS];
    const oc_ref *x = &in[0];
    int axis = norm_axis(c->p[0], x->n_dims);
    int64_t axes[1] = {axis};
    reduce_layout(x, 1, axes, c->p[1] != 0, reduced, out, group_of);
    out->dtype = EG_DTYPE_I64;
    int64_t index[EG_MAX_DIMS];
    for (int64_t g = 0; g < out->n_elems; g++) {
        double best = 0;
        int64_t best_k = -1;
        for (int64_t i = 0; i < x->n_elems; i++) {
            if (group_of[i] != g) continue;
            oc_unravel(x->n_dims, x->shape, i, index);
            double v = x->data[i];
            bool better = c->op == EG__OP_ARGMAX ? v > best : v < best;
            if (best_k < 0 || better) { /* row-major order visits the axis in order */
                best = v;
                best_k = index[axis];
            }
        }
        out->data[g] = (double)best_k;
    }
    return 1;
}

/* p[0] = axis. */
int oc_ref_softmax(const oc_case *c, const oc_ref *in, oc_ref *out) {
    const oc_ref *x = &in[0];
    int axis = norm_axis(c->p[0], x->n_dims);
    oc_ref_init(out, x->dtype, x->n_dims, x->shape);
    int64_t stride = 1;
    for (int d = axis + 1; d < x->n_dims; d++) stride *= x->shape[d];
    int64_t index[EG_MAX_DIMS];
    for (int64_t i = 0; i < x->n_elems; i++) {
        oc_unravel(x->n_dims, x->shape, i, index);
        int64_t first = i - index[axis] * stride;
        double m = -INFINITY, s = 0;
        for (int64_t k = 0; k < x->shape[axis]; k++) m = fmax(m, x->data[first + k * stride]);
        for (int64_t k = 0; k < x->shape[axis]; k++) s += exp(x->data[first + k * stride] - m);
        out->data[i] = c->op == EG__OP_SOFTMAX ? exp(x->data[i] - m) / s : x->data[i] - m - log(s);
    }
    return 1;
}

/* ---- matmul: p[0] = transpose_a, p[1] = transpose_b; numpy's rules for 1-d operands ---- */

int oc_ref_matmul(const oc_case *c, const oc_ref *in, oc_ref *out) {
    const oc_ref *a = &in[0], *b = &in[1];
    bool a_vec = a->n_dims == 1, b_vec = b->n_dims == 1;
    bool ta = c->p[0] && !a_vec, tb = c->p[1] && !b_vec;
    int64_t a_rows = a_vec ? 1 : a->shape[a->n_dims - 2];
    int64_t a_cols = a->shape[a->n_dims - 1];
    int64_t b_rows = b_vec ? b->shape[0] : b->shape[b->n_dims - 2];
    int64_t b_cols = b_vec ? 1 : b->shape[b->n_dims - 1];
    int64_t m = ta ? a_cols : a_rows, k = ta ? a_rows : a_cols;
    int64_t k2 = tb ? b_cols : b_rows, n = tb ? b_rows : b_cols;
    if (k != k2) return -1;
    int a_batch = a_vec ? 0 : a->n_dims - 2, b_batch = b_vec ? 0 : b->n_dims - 2;
    int batch = a_batch > b_batch ? a_batch : b_batch;
    int64_t shape[EG_MAX_DIMS];
    for (int d = 0; d < batch; d++) {
        int da = d - (batch - a_batch), db = d - (batch - b_batch);
        int64_t x = da >= 0 ? a->shape[da] : 1, y = db >= 0 ? b->shape[db] : 1;
        if (x != y && x != 1 && y != 1) return -1;
        shape[d] = x == 1 ? y : x;
    }
    int n_dims = batch;
    if (!a_vec) shape[n_dims++] = m;
    if (!b_vec) shape[n_dims++] = n;
    oc_ref_init(out, a->dtype, n_dims, shape);
    int64_t index[EG_MAX_DIMS], ai[EG_MAX_DIMS], bi[EG_MAX_DIMS];
    for (int64_t o = 0; o < out->n_elems; o++) {
        oc_unravel(out->n_dims, out->shape, o, index);
        int64_t row = a_vec ? 0 : index[batch], col = b_vec ? 0 : index[n_dims - 1];
        for (int d = 0; d < a_batch; d++) {
            int od = d + (batch - a_batch);
            ai[d] = a->shape[d] == 1 ? 0 : index[od];
        }
        for (int d = 0; d < b_batch; d++) {
            int od = d + (batch - b_batch);
            bi[d] = b->shape[d] == 1 ? 0 : index[od];
        }
        double s = 0;
        for (int64_t j = 0; j < k; j++) {
            double av, bv;
            if (a_vec) {
                av = a->data[j];
            } else {
                ai[a_batch] = ta ? j : row;
                ai[a_batch + 1] = ta ? row : j;
                av = a->data[oc_ravel(a->n_dims, a->shape, ai)];
            }
            if (b_vec) {
                bv = b->data[j];
            } else {
                bi[b_batch] = tb ? col : j;
                bi[b_batch + 1] = tb ? j : col;
                bv = b->data[oc_ravel(b->n_dims, b->shape, bi)];
            }
            s += av * bv;
        }
        out->data[o] = s;
    }
    return 1;
}

/* ---- shapes ---- */

/* Copies x's values into out with another shape. */
static int same_values(const oc_ref *x, int n_dims, const int64_t *shape, oc_ref *out) {
    oc_ref_init(out, x->dtype, n_dims, shape);
    if (out->n_elems != x->n_elems) return -1;
    memcpy(out->data, x->data, (size_t)x->n_elems * sizeof(double));
    return 1;
}

/* p[0] = n_dims, p[1..] = shape (one -1 allowed). */
int oc_ref_reshape(const oc_case *c, const oc_ref *in, oc_ref *out) {
    int64_t shape[EG_MAX_DIMS], known = 1;
    int n = (int)c->p[0], inferred = -1;
    for (int i = 0; i < n; i++) {
        shape[i] = c->p[1 + i];
        if (shape[i] == -1)
            inferred = i;
        else
            known *= shape[i];
    }
    if (inferred >= 0) shape[inferred] = in[0].n_elems / known;
    return same_values(&in[0], n, shape, out);
}

/* p[0] = axis (squeeze: a size-1 axis to remove; unsqueeze: where a size-1 axis goes). */
int oc_ref_squeeze(const oc_case *c, const oc_ref *in, oc_ref *out) {
    int64_t shape[EG_MAX_DIMS];
    int n = 0, axis = norm_axis(c->p[0], in[0].n_dims);
    for (int d = 0; d < in[0].n_dims; d++)
        if (d != axis) shape[n++] = in[0].shape[d];
    return same_values(&in[0], n, shape, out);
}

int oc_ref_unsqueeze(const oc_case *c, const oc_ref *in, oc_ref *out) {
    int64_t shape[EG_MAX_DIMS];
    int n = 0, axis = norm_axis(c->p[0], in[0].n_dims + 1);
    for (int d = 0; d <= in[0].n_dims; d++) {
        if (d == axis) shape[n++] = 1;
        if (d < in[0].n_dims) shape[n++] = in[0].shape[d];
    }
    return same_values(&in[0], n, shape, out);
}

static int permuted(const oc_ref *x, const int *perm, oc_ref *out) {
    int64_t shape[EG_MAX_DIMS], index[EG_MAX_DIMS], src[EG_MAX_DIMS];
    for (int i = 0; i < x->n_dims; i++) shape[i] = x->shape[perm[i]];
    oc_ref_init(out, x->dtype, x->n_dims, shape);
    for (int64_t o = 0; o < out->n_elems; o++) {
        oc_unravel(out->n_dims, out->shape, o, index);
        for (int i = 0; i < x->n_dims; i++) src[perm[i]] = index[i];
        out->data[o] = x->data[oc_ravel(x->n_dims, x->shape, src)];
    }
    return 1;
}

/* p[0..n_dims-1] = the permutation. */
int oc_ref_permute(const oc_case *c, const oc_ref *in, oc_ref *out) {
    int perm[EG_MAX_DIMS];
    for (int i = 0; i < in[0].n_dims; i++) perm[i] = norm_axis(c->p[i], in[0].n_dims);
    return permuted(&in[0], perm, out);
}

/* p[0], p[1] = the two axes. */
int oc_ref_transpose(const oc_case *c, const oc_ref *in, oc_ref *out) {
    int perm[EG_MAX_DIMS];
    for (int i = 0; i < in[0].n_dims; i++) perm[i] = i;
    int a = norm_axis(c->p[0], in[0].n_dims), b = norm_axis(c->p[1], in[0].n_dims);
    perm[a] = b;
    perm[b] = a;
    return permuted(&in[0], perm, out);
}

/* Elements start, start + step, ... < stop of axis, Python-clamped. */
static int sliced(const oc_ref *x, int axis, int64_t start, int64_t stop, int64_t step,
                  oc_ref *out) {
    int64_t size = x->shape[axis];
    if (start < 0) start += size;
    if (stop < 0) stop += size;
    start = start < 0 ? 0 : (start > size ? size : start);
    stop = stop < 0 ? 0 : (stop > size ? size : stop);
    int64_t shape[EG_MAX_DIMS], index[EG_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[axis] = stop > start ? (stop - start + step - 1) / step : 0;
    oc_ref_init(out, x->dtype, x->n_dims, shape);
    for (int64_t o = 0; o < out->n_elems; o++) {
        oc_unravel(out->n_dims, out->shape, o, index);
        index[axis] = start + index[axis] * step;
        out->data[o] = x->data[oc_ravel(x->n_dims, x->shape, index)];
    }
    return 1;
}

/* p[0] = axis, p[1] = start, p[2] = stop, p[3] = step. */
int oc_ref_slice(const oc_case *c, const oc_ref *in, oc_ref *out) {
    return sliced(&in[0], norm_axis(c->p[0], in[0].n_dims), c->p[1], c->p[2], c->p[3], out);
}

/* p[0] = axis, p[1] = n, p[2] = whether sizes are given, p[3..] = sizes. */
int oc_ref_split(const oc_case *c, const oc_ref *in, oc_ref *out) {
    int axis = norm_axis(c->p[0], in[0].n_dims), n = (int)c->p[1];
    int64_t start = 0;
    for (int i = 0; i < n; i++) {
        int64_t size = c->p[2] ? c->p[3 + i] : in[0].shape[axis] / n;
        sliced(&in[0], axis, start, start + size, 1, &out[i]);
        start += size;
    }
    return n;
}

/* p[0] = n_dims, p[1..] = shape. */
int oc_ref_broadcast_to(const oc_case *c, const oc_ref *in, oc_ref *out) {
    oc_ref_init(out, in[0].dtype, (int)c->p[0], &c->p[1]);
    int64_t index[EG_MAX_DIMS];
    for (int64_t o = 0; o < out->n_elems; o++) {
        oc_unravel(out->n_dims, out->shape, o, index);
        out->data[o] = oc_broadcast_get(&in[0], out->n_dims, index);
    }
    return 1;
}

int oc_ref_identity(const oc_case *c, const oc_ref *in, oc_ref *out) {
    (void)c;
    return same_values(&in[0], in[0].n_dims, in[0].shape, out);
}

/* Every input's elements in row-major order, one after the other: a 1-d result. */
int oc_ref_packed(const oc_case *c, const oc_ref *in, oc_ref *out) {
    int n = oc_case_n_inputs(c);
    int64_t total = 0;
    for (int i = 0; i < n; i++) total += in[i].n_elems;
    oc_ref_init(out, in[0].dtype, 1, &total);
    int64_t o = 0;
    for (int i = 0; i < n; i++)
        for (int64_t k = 0; k < in[i].n_elems; k++) out->data[o++] = in[i].data[k];
    return 1;
}

/* p[0] = axis; all spec inputs are joined. */
int oc_ref_concat(const oc_case *c, const oc_ref *in, oc_ref *out) {
    int n = oc_case_n_inputs(c), axis = norm_axis(c->p[0], in[0].n_dims);
    int64_t shape[EG_MAX_DIMS], index[EG_MAX_DIMS];
    memcpy(shape, in[0].shape, sizeof shape);
    for (int i = 1; i < n; i++) shape[axis] += in[i].shape[axis];
    oc_ref_init(out, in[0].dtype, in[0].n_dims, shape);
    for (int64_t o = 0; o < out->n_elems; o++) {
        oc_unravel(out->n_dims, out->shape, o, index);
        int i = 0;
        while (index[axis] >= in[i].shape[axis]) index[axis] -= in[i++].shape[axis];
        out->data[o] = in[i].data[oc_ravel(in[i].n_dims, in[i].shape, index)];
    }
    return 1;
}

/* p[0] = the new axis (of the result). */
int oc_ref_stack(const oc_case *c, const oc_ref *in, oc_ref *out) {
    int n = oc_case_n_inputs(c), axis = norm_axis(c->p[0], in[0].n_dims + 1);
    int64_t shape[EG_MAX_DIMS], index[EG_MAX_DIMS], src[EG_MAX_DIMS];
    int k = 0;
    for (int d = 0; d <= in[0].n_dims; d++) {
        if (d == axis) shape[k++] = n;
        if (d < in[0].n_dims) shape[k++] = in[0].shape[d];
    }
    oc_ref_init(out, in[0].dtype, in[0].n_dims + 1, shape);
    for (int64_t o = 0; o < out->n_elems; o++) {
        oc_unravel(out->n_dims, out->shape, o, index);
        k = 0;
        for (int d = 0; d < out->n_dims; d++)
            if (d != axis) src[k++] = index[d];
        const oc_ref *x = &in[index[axis]];
        out->data[o] = x->data[oc_ravel(x->n_dims, x->shape, src)];
    }
    return 1;
}

/* inputs (x, indices); p[0] = axis. */
int oc_ref_gather(const oc_case *c, const oc_ref *in, oc_ref *out) {
    const oc_ref *x = &in[0], *idx = &in[1];
    int axis = norm_axis(c->p[0], x->n_dims), ni = idx->n_dims;
    int64_t shape[EG_MAX_DIMS], index[EG_MAX_DIMS], src[EG_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < axis; d++) shape[n++] = x->shape[d];
    for (int d = 0; d < ni; d++) shape[n++] = idx->shape[d];
    for (int d = axis + 1; d < x->n_dims; d++) shape[n++] = x->shape[d];
    oc_ref_init(out, x->dtype, n, shape);
    for (int64_t o = 0; o < out->n_elems; o++) {
        oc_unravel(out->n_dims, out->shape, o, index);
        for (int d = 0; d < axis; d++) src[d] = index[d];
        src[axis] = (int64_t)idx->data[oc_ravel(ni, idx->shape, index + axis)];
        for (int d = axis + 1; d < x->n_dims; d++) src[d] = index[d - 1 + ni];
        out->data[o] = x->data[oc_ravel(x->n_dims, x->shape, src)];
    }
    return 1;
}

/* inputs (updates, indices); p[0] = axis, p[1] = the result's size on axis. */
int oc_ref_scatter_add(const oc_case *c, const oc_ref *in, oc_ref *out) {
    const oc_ref *u = &in[0], *idx = &in[1];
    int ni = idx->n_dims, axis = (int)c->p[0];
    int n_dims = u->n_dims - ni + 1;
    int64_t shape[EG_MAX_DIMS], index[EG_MAX_DIMS], dst[EG_MAX_DIMS];
    for (int d = 0; d < n_dims; d++)
        shape[d] = d < axis ? u->shape[d] : d == axis ? c->p[1] : u->shape[d - 1 + ni];
    oc_ref_init(out, u->dtype, n_dims, shape);
    for (int64_t i = 0; i < u->n_elems; i++) {
        oc_unravel(u->n_dims, u->shape, i, index);
        for (int d = 0; d < n_dims; d++)
            dst[d] = d < axis    ? index[d]
                     : d == axis ? (int64_t)idx->data[oc_ravel(ni, idx->shape, index + axis)]
                                 : index[d - 1 + ni];
        out->data[oc_ravel(n_dims, shape, dst)] += u->data[i];
    }
    return 1;
}

/* p[0] = axis, p[1] = start, p[2] = step, p[3] = the result's size on axis. */
int oc_ref_unslice(const oc_case *c, const oc_ref *in, oc_ref *out) {
    const oc_ref *g = &in[0];
    int axis = (int)c->p[0];
    int64_t shape[EG_MAX_DIMS], index[EG_MAX_DIMS];
    memcpy(shape, g->shape, sizeof shape);
    shape[axis] = c->p[3];
    oc_ref_init(out, g->dtype, g->n_dims, shape);
    for (int64_t i = 0; i < g->n_elems; i++) {
        oc_unravel(g->n_dims, g->shape, i, index);
        index[axis] = c->p[1] + index[axis] * c->p[2];
        out->data[oc_ravel(out->n_dims, out->shape, index)] = g->data[i];
    }
    return 1;
}

/* p[0] = depth, p[1] = dtype. */
int oc_ref_one_hot(const oc_case *c, const oc_ref *in, oc_ref *out) {
    int64_t shape[EG_MAX_DIMS], depth = c->p[0];
    memcpy(shape, in[0].shape, sizeof shape);
    shape[in[0].n_dims] = depth;
    oc_ref_init(out, (eg_dtype)c->p[1], in[0].n_dims + 1, shape);
    for (int64_t i = 0; i < in[0].n_elems; i++) {
        int64_t v = (int64_t)in[0].data[i];
        if (v >= 0 && v < depth) out->data[i * depth + v] = 1;
    }
    return 1;
}

/* p[0..2n-1] = widths (before, after) per axis; d[0] = value. */
int oc_ref_pad(const oc_case *c, const oc_ref *in, oc_ref *out) {
    const oc_ref *x = &in[0];
    int64_t shape[EG_MAX_DIMS], index[EG_MAX_DIMS];
    for (int d = 0; d < x->n_dims; d++) shape[d] = x->shape[d] + c->p[2 * d] + c->p[2 * d + 1];
    oc_ref_init(out, x->dtype, x->n_dims, shape);
    for (int64_t o = 0; o < out->n_elems; o++) out->data[o] = c->d[0];
    for (int64_t i = 0; i < x->n_elems; i++) {
        oc_unravel(x->n_dims, x->shape, i, index);
        for (int d = 0; d < x->n_dims; d++) index[d] += c->p[2 * d];
        out->data[oc_ravel(out->n_dims, out->shape, index)] = x->data[i];
    }
    return 1;
}

/* loss_b = log(sum_k exp(x_bk)) - x_b,label_b */
int oc_ref_sparse_xent(const oc_case *c, const oc_ref *in, oc_ref *out) {
    (void)c;
    const oc_ref *x = &in[0], *labels = &in[1];
    int64_t batch = x->shape[0], classes = x->shape[1];
    oc_ref_init(out, x->dtype, 1, &batch);
    for (int64_t b = 0; b < batch; b++) {
        const double *row = x->data + b * classes;
        double m = -INFINITY, s = 0;
        for (int64_t k = 0; k < classes; k++) m = fmax(m, row[k]);
        for (int64_t k = 0; k < classes; k++) s += exp(row[k] - m);
        out->data[b] = m + log(s) - row[(int64_t)labels->data[b]];
    }
    return 1;
}

/* Dropout (d[0] = rate): every element is dropped (0) or kept and scaled by 1/(1-rate), and the
 * number dropped is within 5 sigma of rate * n. The inputs are never 0. */
bool oc_check_dropout(const oc_case *c, const oc_ref *in, int n_out, const oc_ref *out, char *why,
                      size_t why_size) {
    const oc_ref *x = &in[0];
    double rate = c->d[0], scale = 1 / (1 - rate);
    /* bf16 / f16: the f32 product (x * the f32 scale: two roundings of 2^-24) rounded once more
     * to the format (u = 2^-8 or 2^-11) */
    double tol = x->dtype == EG_DTYPE_F32    ? 1e-6
                 : x->dtype == EG_DTYPE_BF16 ? 0x1p-8 + 1e-6
                 : x->dtype == EG_DTYPE_F16  ? 0x1p-11 + 1e-6
                                             : 1e-14;
    if (n_out != 1 || out->n_elems != x->n_elems || out->dtype != x->dtype ||
        out->n_dims != x->n_dims ||
        memcmp(out->shape, x->shape, sizeof(int64_t) * (size_t)x->n_dims) != 0) {
        snprintf(why, why_size, "dropout: result shape/dtype differs from the input");
        return false;
    }
    int64_t dropped = 0;
    for (int64_t i = 0; i < x->n_elems; i++) {
        double kept = x->data[i] * scale;
        if (out->data[i] == 0) {
            dropped++;
        } else if (fabs(out->data[i] - kept) > tol * fabs(kept)) {
            snprintf(why, why_size, "dropout: element %lld is %.9g, expected 0 or %.9g",
                     (long long)i, out->data[i], kept);
            return false;
        }
    }
    double n = (double)x->n_elems, sigma = sqrt(n * rate * (1 - rate));
    if (fabs((double)dropped - rate * n) > 5 * sigma + 1) {
        snprintf(why, why_size, "dropout: %lld of %lld dropped at rate %g", (long long)dropped,
                 (long long)x->n_elems, rate);
        return false;
    }
    return true;
}
