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
    double tol = x->dtype == EG_DTYPE_F32 ? 1e-6 : 1e-14;
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

/* ---- convolution and pooling: naive direct loops ---- */

/* An image shape's (n, h, w, c) in the layout; index of an element. */
typedef struct ref_image {
    int64_t n, h, w, c;
    bool first;
} ref_image;

static ref_image ref_image_of(const int64_t *shape, bool first) {
    ref_image r = {shape[0], shape[1], shape[2], shape[3], first};
    if (first) r = (ref_image){shape[0], shape[2], shape[3], shape[1], first};
    return r;
}

static int64_t ref_at(const ref_image *r, int64_t b, int64_t h, int64_t w, int64_t c) {
    return r->first ? ((b * r->c + c) * r->h + h) * r->w + w
                    : ((b * r->h + h) * r->w + w) * r->c + c;
}

static void ref_image_shape(ref_image r, int64_t *shape) {
    shape[0] = r.n;
    shape[1] = r.first ? r.c : r.h;
    shape[2] = r.first ? r.h : r.w;
    shape[3] = r.first ? r.w : r.c;
}

/* The window parameters of a case (see op_cases.c), padding resolved for an in_h x in_w input
 * and a kh x kw window. */
typedef struct ref_window {
    int64_t kh, kw, sh, sw, dh, dw, groups, pad[4];
    bool first;
} ref_window;

static ref_window ref_window_of(const oc_case *c, bool pool, int64_t in_h, int64_t in_w, int64_t kh,
                                int64_t kw) {
    ref_window r = {.kh = kh, .kw = kw, .dh = 1, .dw = 1, .groups = 1, .first = c->p[5] / 10 == 1};
    if (pool) {
        r.sh = c->p[2] ? c->p[2] : kh;
        r.sw = c->p[3] ? c->p[3] : kw;
    } else {
        r.sh = c->p[0] ? c->p[0] : 1;
        r.sw = c->p[1] ? c->p[1] : 1;
        r.dh = c->p[2] ? c->p[2] : 1;
        r.dw = c->p[3] ? c->p[3] : 1;
        r.groups = c->p[4] ? c->p[4] : 1;
    }
    int padding = (int)(c->p[5] % 10);
    const int64_t in[2] = {in_h, in_w}, k[2] = {kh, kw}, s[2] = {r.sh, r.sw}, d[2] = {r.dh, r.dw};
    for (int a = 0; a < 2; a++) {
        if (padding == EG_PADDING_EXPLICIT) {
            r.pad[2 * a] = c->p[6 + 2 * a];
            r.pad[2 * a + 1] = c->p[7 + 2 * a];
        } else if (padding == EG_PADDING_SAME) {
            int64_t out = (in[a] + s[a] - 1) / s[a];
            int64_t total = (out - 1) * s[a] + d[a] * (k[a] - 1) + 1 - in[a];
            if (total < 0) total = 0;
            r.pad[2 * a] = total / 2;
            r.pad[2 * a + 1] = total - total / 2;
        }
    }
    return r;
}

static int64_t ref_out_size(int64_t in, int64_t k, int64_t s, int64_t d, int64_t before,
                            int64_t after) {
    return (in + before + after - d * (k - 1) - 1) / s + 1;
}

/* y = conv(x, w) for x image shape xi; fills yi. */
static void ref_conv_forward(const ref_window *win, const ref_image *xi, const double *x,
                             const oc_ref *w, ref_image *yi, double *y) {
    int64_t kh = w->shape[0], kw = w->shape[1], cg = w->shape[2], o_n = w->shape[3];
    int64_t og = o_n / win->groups;
    *yi = (ref_image){xi->n, ref_out_size(xi->h, kh, win->sh, win->dh, win->pad[0], win->pad[1]),
                      ref_out_size(xi->w, kw, win->sw, win->dw, win->pad[2], win->pad[3]), o_n,
                      xi->first};
    for (int64_t b = 0; b < yi->n; b++)
        for (int64_t oh = 0; oh < yi->h; oh++)
            for (int64_t ow = 0; ow < yi->w; ow++)
                for (int64_t o = 0; o < o_n; o++) {
                    double sum = 0;
                    int64_t group = o / og;
                    for (int64_t i = 0; i < kh; i++)
                        for (int64_t j = 0; j < kw; j++)
                            for (int64_t c = 0; c < cg; c++) {
                                int64_t ih = oh * win->sh - win->pad[0] + i * win->dh;
                                int64_t iw = ow * win->sw - win->pad[2] + j * win->dw;
                                if (ih < 0 || ih >= xi->h || iw < 0 || iw >= xi->w) continue;
                                sum += x[ref_at(xi, b, ih, iw, group * cg + c)] *
                                       w->data[((i * kw + j) * cg + c) * o_n + o];
                            }
                    y[ref_at(yi, b, oh, ow, o)] = sum;
                }
}

int oc_ref_conv2d(const oc_case *c, const oc_ref *in, oc_ref *out) {
    const oc_ref *x = &in[0], *w = &in[1];
    ref_image xi = ref_image_of(x->shape, c->p[5] / 10 == 1), yi;
    ref_window win = ref_window_of(c, false, xi.h, xi.w, w->shape[0], w->shape[1]);
    static double y[OC_MAX_ELEMS * 4];
    ref_conv_forward(&win, &xi, x->data, w, &yi, y);
    int64_t shape[4];
    ref_image_shape(yi, shape);
    oc_ref_init(out, x->dtype, 4, shape);
    memcpy(out->data, y, sizeof(double) * (size_t)out->n_elems);
    return 1;
}

/* dx[b, ih, iw, c] = sum of dy[b, oh, ow, o] * w[i, j, c', o] over the taps that read it. */
int oc_ref_conv2d_transpose(const oc_case *c, const oc_ref *in, oc_ref *out) {
    const oc_ref *dy = &in[0], *w = &in[1];
    bool first = c->p[5] / 10 == 1;
    ref_image yi = ref_image_of(dy->shape, first);
    int64_t kh = w->shape[0], kw = w->shape[1], cg = w->shape[2], o_n = w->shape[3];
    int64_t groups = c->p[4] ? c->p[4] : 1, og = o_n / groups;
    int64_t sh = c->p[0] ? c->p[0] : 1, sw = c->p[1] ? c->p[1] : 1;
    int64_t dh = c->p[2] ? c->p[2] : 1, dw = c->p[3] ? c->p[3] : 1;
    int padding = (int)(c->p[5] % 10);
    int64_t out_h = (int64_t)c->d[0], out_w = (int64_t)c->d[1];
    if (c->d[0] <= 0) {
        out_h = padding == EG_PADDING_SAME ? yi.h * sh : (yi.h - 1) * sh + dh * (kh - 1) + 1;
        out_w = padding == EG_PADDING_SAME ? yi.w * sw : (yi.w - 1) * sw + dw * (kw - 1) + 1;
        if (padding == EG_PADDING_EXPLICIT) {
            out_h -= c->p[6] + c->p[7];
            out_w -= c->p[8] + c->p[9];
        }
    }
    ref_image xi = {yi.n, out_h, out_w, cg * groups, first};
    ref_window win = ref_window_of(c, false, out_h, out_w, kh, kw);
    int64_t shape[4];
    ref_image_shape(xi, shape);
    oc_ref_init(out, dy->dtype, 4, shape);
    for (int64_t b = 0; b < yi.n; b++)
        for (int64_t oh = 0; oh < yi.h; oh++)
            for (int64_t ow = 0; ow < yi.w; ow++)
                for (int64_t o = 0; o < o_n; o++)
                    for (int64_t i = 0; i < kh; i++)
                        for (int64_t j = 0; j < kw; j++)
                            for (int64_t cc = 0; cc < cg; cc++) {
                                int64_t ih = oh * win.sh - win.pad[0] + i * win.dh;
                                int64_t iw = ow * win.sw - win.pad[2] + j * win.dw;
                                if (ih < 0 || ih >= xi.h || iw < 0 || iw >= xi.w) continue;
                                out->data[ref_at(&xi, b, ih, iw, o / og * cg + cc)] +=
                                    dy->data[ref_at(&yi, b, oh, ow, o)] *
                                    w->data[((i * kw + j) * cg + cc) * o_n + o];
                            }
    return 1;
}

/* dw[i, j, c', o] = sum over images and output pixels of x at the tap times dy. */
int oc_ref_conv2d_backward_filter(const oc_case *c, const oc_ref *in, oc_ref *out) {
    const oc_ref *x = &in[0], *dy = &in[1];
    bool first = c->p[5] / 10 == 1;
    ref_image xi = ref_image_of(x->shape, first), yi = ref_image_of(dy->shape, first);
    int64_t kh = (int64_t)c->d[0], kw = (int64_t)c->d[1];
    ref_window win = ref_window_of(c, false, xi.h, xi.w, kh, kw);
    int64_t cg = xi.c / win.groups, o_n = yi.c, og = o_n / win.groups;
    int64_t shape[4] = {kh, kw, cg, o_n};
    oc_ref_init(out, x->dtype, 4, shape);
    for (int64_t i = 0; i < kh; i++)
        for (int64_t j = 0; j < kw; j++)
            for (int64_t cc = 0; cc < cg; cc++)
                for (int64_t o = 0; o < o_n; o++) {
                    double sum = 0;
                    for (int64_t b = 0; b < xi.n; b++)
                        for (int64_t oh = 0; oh < yi.h; oh++)
                            for (int64_t ow = 0; ow < yi.w; ow++) {
                                int64_t ih = oh * win.sh - win.pad[0] + i * win.dh;
                                int64_t iw = ow * win.sw - win.pad[2] + j * win.dw;
                                if (ih < 0 || ih >= xi.h || iw < 0 || iw >= xi.w) continue;
                                sum += x->data[ref_at(&xi, b, ih, iw, o / og * cg + cc)] *
                                       dy->data[ref_at(&yi, b, oh, ow, o)];
                            }
                    out->data[((i * kw + j) * cg + cc) * o_n + o] = sum;
                }
    return 1;
}

/* max_pool2d, avg_pool2d, max_pool2d_argmax, max_pool2d_backward (x, dy) and
 * avg_pool2d_backward (dy; the input's (H, W) in d). */
int oc_ref_pool2d(const oc_case *c, const oc_ref *in, oc_ref *out) {
    bool first = c->p[5] / 10 == 1;
    int64_t kh = c->p[0] ? c->p[0] : 2, kw = c->p[1] ? c->p[1] : 2;
    bool avg_backward = c->op == EG__OP_AVG_POOL2D_BACKWARD;
    ref_image xi;
    if (avg_backward) {
        ref_image gi = ref_image_of(in[0].shape, first);
        xi = (ref_image){gi.n, (int64_t)c->d[0], (int64_t)c->d[1], gi.c, first};
    } else {
        xi = ref_image_of(in[0].shape, first);
    }
    ref_window win = ref_window_of(c, true, xi.h, xi.w, kh, kw);
    ref_image yi = {xi.n, ref_out_size(xi.h, kh, win.sh, 1, win.pad[0], win.pad[1]),
                    ref_out_size(xi.w, kw, win.sw, 1, win.pad[2], win.pad[3]), xi.c, first};
    int64_t shape[4];
    bool to_input = c->op == EG__OP_MAX_POOL2D_BACKWARD || avg_backward;
    ref_image_shape(to_input ? xi : yi, shape);
    oc_ref_init(out, c->op == EG__OP_MAX_POOL2D_ARGMAX ? EG_DTYPE_I64 : in[0].dtype, 4, shape);
    for (int64_t b = 0; b < yi.n; b++)
        for (int64_t oh = 0; oh < yi.h; oh++)
            for (int64_t ow = 0; ow < yi.w; ow++)
                for (int64_t ch = 0; ch < yi.c; ch++) {
                    double best = -INFINITY, sum = 0;
                    int64_t best_at = -1, count = 0;
                    for (int64_t i = 0; i < kh; i++)
                        for (int64_t j = 0; j < kw; j++) {
                            int64_t ih = oh * win.sh - win.pad[0] + i;
                            int64_t iw = ow * win.sw - win.pad[2] + j;
                            if (ih < 0 || ih >= xi.h || iw < 0 || iw >= xi.w) continue;
                            int64_t at = ref_at(&xi, b, ih, iw, ch);
                            count++;
                            if (avg_backward) continue;
                            sum += in[0].data[at];
                            if (in[0].data[at] > best) { /* strictly: the first max wins */
                                best = in[0].data[at];
                                best_at = at;
                            }
                        }
                    int64_t y_at = ref_at(&yi, b, oh, ow, ch);
                    switch (c->op) {
                    case EG__OP_MAX_POOL2D:
                        out->data[y_at] = best;
                        break;
                    case EG__OP_AVG_POOL2D:
                        out->data[y_at] = sum / (double)count;
                        break;
                    case EG__OP_MAX_POOL2D_ARGMAX:
                        out->data[y_at] = (double)best_at;
                        break;
                    case EG__OP_MAX_POOL2D_BACKWARD:
                        out->data[best_at] += in[1].data[y_at];
                        break;
                    default: /* avg_pool2d_backward */
                        for (int64_t i = 0; i < kh; i++)
                            for (int64_t j = 0; j < kw; j++) {
                                int64_t ih = oh * win.sh - win.pad[0] + i;
                                int64_t iw = ow * win.sw - win.pad[2] + j;
                                if (ih < 0 || ih >= xi.h || iw < 0 || iw >= xi.w) continue;
                                out->data[ref_at(&xi, b, ih, iw, ch)] +=
                                    in[0].data[y_at] / (double)count;
                            }
                        break;
                    }
                }
    return 1;
}

int oc_ref_global_avg_pool2d(const oc_case *c, const oc_ref *in, oc_ref *out) {
    bool first = c->p[0] == EG_DATA_FORMAT_NCHW, keep = c->p[1] != 0;
    ref_image xi = ref_image_of(in[0].shape, first);
    int64_t shape[4] = {xi.n, first ? xi.c : 1, 1, first ? 1 : xi.c};
    if (!keep) shape[1] = xi.c;
    oc_ref_init(out, in[0].dtype, keep ? 4 : 2, shape);
    for (int64_t b = 0; b < xi.n; b++)
        for (int64_t ch = 0; ch < xi.c; ch++) {
            double sum = 0;
            for (int64_t h = 0; h < xi.h; h++)
                for (int64_t w = 0; w < xi.w; w++) sum += in[0].data[ref_at(&xi, b, h, w, ch)];
            out->data[b * xi.c + ch] = sum / (double)(xi.h * xi.w);
        }
    return 1;
}

int oc_ref_upsample2d(const oc_case *c, const oc_ref *in, oc_ref *out) {
    bool first = c->p[2] == EG_DATA_FORMAT_NCHW;
    ref_image xi = ref_image_of(in[0].shape, first);
    ref_image yi = {xi.n, xi.h * c->p[0], xi.w * c->p[1], xi.c, first};
    int64_t shape[4];
    ref_image_shape(yi, shape);
    oc_ref_init(out, in[0].dtype, 4, shape);
    for (int64_t b = 0; b < yi.n; b++)
        for (int64_t h = 0; h < yi.h; h++)
            for (int64_t w = 0; w < yi.w; w++)
                for (int64_t ch = 0; ch < yi.c; ch++)
                    out->data[ref_at(&yi, b, h, w, ch)] =
                        in[0].data[ref_at(&xi, b, h / c->p[0], w / c->p[1], ch)];
    return 1;
}

int oc_ref_zero_padding2d(const oc_case *c, const oc_ref *in, oc_ref *out) {
    bool first = c->p[4] == EG_DATA_FORMAT_NCHW;
    ref_image xi = ref_image_of(in[0].shape, first);
    ref_image yi = {xi.n, xi.h + c->p[0] + c->p[1], xi.w + c->p[2] + c->p[3], xi.c, first};
    int64_t shape[4];
    ref_image_shape(yi, shape);
    oc_ref_init(out, in[0].dtype, 4, shape);
    for (int64_t b = 0; b < xi.n; b++)
        for (int64_t h = 0; h < xi.h; h++)
            for (int64_t w = 0; w < xi.w; w++)
                for (int64_t ch = 0; ch < xi.c; ch++)
                    out->data[ref_at(&yi, b, h + c->p[0], w + c->p[2], ch)] =
                        in[0].data[ref_at(&xi, b, h, w, ch)];
    return 1;
}

/* ---- normalization ---- */

/* activation(x · w + b), p[0] an eg_activation (none, relu, sigmoid, tanh) */
int oc_ref_dense(const oc_case *c, const oc_ref *in, oc_ref *out) {
    const oc_ref *x = &in[0], *w = &in[1], *b = &in[2];
    int64_t m = x->shape[0], k = x->shape[1], n = w->shape[1];
    int64_t shape[2] = {m, n};
    oc_ref_init(out, x->dtype, 2, shape);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0;
            for (int64_t p = 0; p < k; p++) s += x->data[i * k + p] * w->data[p * n + j];
            s += b->data[j];
            switch (c->p[0]) {
            case 1:
                s = s > 0 ? s : 0;
                break;
            case 2:
                s = 1 / (1 + exp(-s));
                break;
            case 3:
                s = tanh(s);
                break;
            default:
                break;
            }
            out->data[i * n + j] = s;
        }
    return 1;
}

int oc_ref_mul_add(const oc_case *c, const oc_ref *in, oc_ref *out) {
    (void)c;
    const oc_ref *ops[3] = {&in[0], &in[1], &in[2]};
    int n_dims;
    int64_t shape[EG_MAX_DIMS], index[EG_MAX_DIMS];
    oc_broadcast_shape(3, ops, &n_dims, shape);
    oc_ref_init(out, in[0].dtype, n_dims, shape);
    for (int64_t o = 0; o < out->n_elems; o++) {
        oc_unravel(n_dims, shape, o, index);
        out->data[o] =
            oc_broadcast_get(&in[0], n_dims, index) * oc_broadcast_get(&in[1], n_dims, index) +
            oc_broadcast_get(&in[2], n_dims, index);
    }
    return 1;
}

/* (x - mean) / sqrt(var + eps) * scale + offset, per channel (the axis the parameters vary
 * along, or given moments broadcast like numpy). */
int oc_ref_batch_norm(const oc_case *c, const oc_ref *in, oc_ref *out) {
    const oc_ref *x = &in[0];
    oc_ref_init(out, x->dtype, x->n_dims, x->shape);
    int64_t index[EG_MAX_DIMS];
    if (!c->p[0]) { /* given moments (x, mean, variance, offset, scale) */
        for (int64_t o = 0; o < x->n_elems; o++) {
            oc_unravel(x->n_dims, x->shape, o, index);
            double mean = oc_broadcast_get(&in[1], x->n_dims, index);
            double var = oc_broadcast_get(&in[2], x->n_dims, index);
            out->data[o] = (x->data[o] - mean) / sqrt(var + c->d[0]) *
                               oc_broadcast_get(&in[4], x->n_dims, index) +
                           oc_broadcast_get(&in[3], x->n_dims, index);
        }
        return 1;
    }
    int channel_axis = c->p[1] == EG_DATA_FORMAT_NCHW ? 1 : x->n_dims - 1;
    int64_t channels = x->shape[channel_axis], per = x->n_elems / channels;
    for (int64_t ch = 0; ch < channels; ch++) {
        double sum = 0, sq = 0;
        for (int64_t o = 0; o < x->n_elems; o++) {
            oc_unravel(x->n_dims, x->shape, o, index);
            if (index[channel_axis] == ch) sum += x->data[o];
        }
        double mean = sum / (double)per;
        for (int64_t o = 0; o < x->n_elems; o++) {
            oc_unravel(x->n_dims, x->shape, o, index);
            if (index[channel_axis] == ch) sq += (x->data[o] - mean) * (x->data[o] - mean);
        }
        double inv = 1 / sqrt(sq / (double)per + c->d[0]);
        for (int64_t o = 0; o < x->n_elems; o++) {
            oc_unravel(x->n_dims, x->shape, o, index);
            if (index[channel_axis] == ch)
                out->data[o] = (x->data[o] - mean) * inv * in[2].data[ch] + in[1].data[ch];
        }
    }
    return 1;
}

/* Over the last axis: inputs (x, scale, offset). */
int oc_ref_layer_norm(const oc_case *c, const oc_ref *in, oc_ref *out) {
    const oc_ref *x = &in[0];
    int64_t d = x->shape[x->n_dims - 1], rows = x->n_elems / d;
    oc_ref_init(out, x->dtype, x->n_dims, x->shape);
    for (int64_t r = 0; r < rows; r++) {
        const double *v = x->data + r * d;
        double mean = 0, var = 0;
        for (int64_t i = 0; i < d; i++) mean += v[i] / (double)d;
        for (int64_t i = 0; i < d; i++) var += (v[i] - mean) * (v[i] - mean) / (double)d;
        for (int64_t i = 0; i < d; i++)
            out->data[r * d + i] =
                (v[i] - mean) / sqrt(var + c->d[0]) * in[1].data[i] + in[2].data[i];
    }
    return 1;
}

/* Two outputs: the mean and the population variance (p as for reductions). */
int oc_ref_moments(const oc_case *c, const oc_ref *in, oc_ref *out) {
    oc_case as = *c;
    as.op = EG__OP_MEAN;
    oc_ref_reduce(&as, in, &out[0]);
    as.op = EG__OP_VAR;
    oc_ref_reduce(&as, in, &out[1]);
    return 2;
}

/* y = (x - mean) / sqrt(var + eps) * scale + offset with x's own moments over the axes (p as for
 * reductions), then the moments themselves (keepdims); scale/offset broadcast like numpy. */
int oc_ref_batch_norm_training(const oc_case *c, const oc_ref *in, oc_ref *out) {
    oc_case as = *c;
    as.p[5] = 1; /* keepdims */
    as.op = EG__OP_MEAN;
    oc_ref_reduce(&as, in, &out[1]);
    as.op = EG__OP_VAR;
    oc_ref_reduce(&as, in, &out[2]);
    const oc_ref *x = &in[0];
    oc_ref_init(&out[0], x->dtype, x->n_dims, x->shape);
    int64_t index[EG_MAX_DIMS];
    for (int64_t o = 0; o < x->n_elems; o++) {
        oc_unravel(x->n_dims, x->shape, o, index);
        double mean = oc_broadcast_get(&out[1], x->n_dims, index);
        double var = oc_broadcast_get(&out[2], x->n_dims, index);
        out[0].data[o] =
            (x->data[o] - mean) / sqrt(var + c->d[0]) * oc_broadcast_get(&in[2], x->n_dims, index) +
            oc_broadcast_get(&in[1], x->n_dims, index);
    }
    return 3;
}

/* g where x > 0, else 0 (broadcasting). */
int oc_ref_relu_backward(const oc_case *c, const oc_ref *in, oc_ref *out) {
    (void)c;
    const oc_ref *ops[2] = {&in[0], &in[1]};
    int n_dims;
    int64_t shape[EG_MAX_DIMS], index[EG_MAX_DIMS];
    oc_broadcast_shape(2, ops, &n_dims, shape);
    oc_ref_init(out, in[0].dtype, n_dims, shape);
    for (int64_t o = 0; o < out->n_elems; o++) {
        oc_unravel(n_dims, shape, o, index);
        out->data[o] = oc_broadcast_get(&in[0], n_dims, index) > 0
                           ? oc_broadcast_get(&in[1], n_dims, index)
                           : 0;
    }
    return 1;
}

/* Index of x's element (index) in a kept-shaped (keepdims) tensor of shape kept. */
static int64_t kept_flat(int n_dims, const int64_t *kept, const int64_t *index) {
    int64_t k[EG_MAX_DIMS];
    for (int d = 0; d < n_dims; d++) k[d] = kept[d] == 1 ? 0 : index[d];
    return oc_ravel(n_dims, kept, k);
}

/* inputs (g, x, mean) -> (2, kept): [sum g, sum g (x - mean)] over the axes mean has as 1 */
int oc_ref_batch_norm_backward_sums(const oc_case *c, const oc_ref *in, oc_ref *out) {
    (void)c;
    const oc_ref *g = &in[0], *x = &in[1], *m = &in[2];
    int64_t shape[EG_MAX_DIMS + 1] = {2}, index[EG_MAX_DIMS];
    memcpy(shape + 1, m->shape, sizeof(int64_t) * (size_t)m->n_dims);
    oc_ref_init(out, x->dtype, m->n_dims + 1, shape);
    for (int64_t i = 0; i < out->n_elems; i++) out->data[i] = 0;
    for (int64_t o = 0; o < x->n_elems; o++) {
        oc_unravel(x->n_dims, x->shape, o, index);
        int64_t k = kept_flat(x->n_dims, m->shape, index);
        out->data[k] += g->data[o];
        out->data[m->n_elems + k] += g->data[o] * (x->data[o] - m->data[k]);
    }
    return 1;
}

/* inputs (g, x, mean, variance, scale, sums) -> dx = k (g - sg / N - (x - m) r^2 sgx / N) with
 * r = 1 / sqrt(variance + d[0]), k = scale r, (sg, sgx) = sums, N = elements per kept one */
int oc_ref_batch_norm_backward_input(const oc_case *c, const oc_ref *in, oc_ref *out) {
    const oc_ref *g = &in[0], *x = &in[1], *m = &in[2], *v = &in[3], *scale = &in[4],
                 *sums = &in[5];
    int64_t index[EG_MAX_DIMS];
    double n = (double)x->n_elems / (double)m->n_elems;
    oc_ref_init(out, x->dtype, x->n_dims, x->shape);
    for (int64_t o = 0; o < x->n_elems; o++) {
        oc_unravel(x->n_dims, x->shape, o, index);
        int64_t k = kept_flat(x->n_dims, m->shape, index);
        double r = 1 / sqrt(v->data[k] + c->d[0]);
        double sg = sums->data[k], sgx = sums->data[m->n_elems + k];
        out->data[o] = scale->data[k] * r *
                       (g->data[o] - sg / n - (x->data[o] - m->data[k]) * r * r * sgx / n);
    }
    return 1;
}
