/* The op case table: every op of ops.def, run through its public API (internal-only ops through
 * eg__execute), each case paired with a plain-C reference from op_reference.c.
 *
 * Parameters per family (c->p integers, c->d reals):
 *   unary    clip: d = (low, high)
 *   binary   p[0] = 1: the *_scalar function with scalar d[0]
 *   cast     p[0] = target dtype; p[2] = 1: cast back to the input dtype afterwards
 *   reduce   p[0] = n_axes (0: all, passed as NULL), p[1..4] = axes, p[5] = keepdims
 *   arg      p[0] = axis, p[1] = keepdims          softmax  p[0] = axis
 *   matmul   p[0], p[1] = transpose_a, transpose_b (both 0: eg_matmul)
 *   reshape  p[0] = n_dims, p[1..] = shape        squeeze, unsqueeze  p[0] = axis
 *   permute  p[0..] = axes     transpose  p[0], p[1] = axes
 *   slice    p[0..3] = axis, start, stop, step
 *   split    p[0] = axis, p[1] = n, p[2] = 1: sizes p[3..] given (else NULL: equal parts)
 *   broadcast_to  p[0] = n_dims, p[1..] = shape   copy  p[0] = 1: eg_contiguous, else eg_copy
 *   concat, stack, gather  p[0] = axis
 *   scatter_add  p[0] = axis, p[1] = the result's size on axis
 *   unslice  p[0] = axis, p[1] = start, p[2] = step, p[3] = the result's size on axis
 *   one_hot  p[0] = depth, p[1] = dtype           pad  p[0..] = widths, d[0] = value
 *   dropout  d[0] = rate, p[0] = seed
 *   conv2d, conv2d_transpose, conv2d_backward_filter  p[0], p[1] = strides, p[2], p[3] =
 *            dilations, p[4] = groups (0s: defaults), p[5] = 10 * data_format + padding,
 *            p[6..9] = explicit padding; conv2d_transpose: d = the output's spatial size (0: the
 *            default); conv2d_backward_filter: d = (KH, KW)
 *   pool2d (max, avg, argmax and the backward ops)  p[0], p[1] = pool size, p[2], p[3] =
 *            strides, p[5] = 10 * data_format + padding, p[6..9] = explicit padding
 *   batch_norm  p[0] = 1: batch moments over every axis but the channels (p[1] = data_format),
 *            inputs (x, offset, scale); else inputs (x, mean, variance, offset, scale);
 *            d[0] = epsilon
 *   layer_norm  inputs (x, scale, offset), last axis, d[0] = epsilon
 *   batch_norm_backward  (the fused gradient kernels, internal) p as for reductions (axes),
 *            d[0] = epsilon; sums: inputs (g, x, mean), input: (g, x, mean, variance, scale,
 *            sums)
 *   upsample2d  p[0], p[1] = sizes, p[2] = data_format   zero_padding2d  p[0..3], p[4] = format
 *   global_avg_pool2d  p[0] = data_format, p[1] = keepdims */
#include <string.h>

#include "api/internal.h"
#include "eagle/nn.h"
#include "op_cases.h"
#include "op_reference.h"

int oc_one(eg_tensor *t, eg_tensor **out) {
    out[0] = t;
    return t ? 1 : -1;
}

static int apply_unary(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    const eg_tensor *x = in[0];
    switch (c->op) {
    case EG__OP_NEG:
        return oc_one(eg_neg(x), out);
    case EG__OP_ABS:
        return oc_one(eg_abs(x), out);
    case EG__OP_EXP:
        return oc_one(eg_exp(x), out);
    case EG__OP_LOG:
        return oc_one(eg_log(x), out);
    case EG__OP_SQRT:
        return oc_one(eg_sqrt(x), out);
    case EG__OP_RSQRT:
        return oc_one(eg_rsqrt(x), out);
    case EG__OP_SIN:
        return oc_one(eg_sin(x), out);
    case EG__OP_COS:
        return oc_one(eg_cos(x), out);
    case EG__OP_TANH:
        return oc_one(eg_tanh(x), out);
    case EG__OP_SIGMOID:
        return oc_one(eg_sigmoid(x), out);
    case EG__OP_RELU:
        return oc_one(eg_relu(x), out);
    case EG__OP_GELU:
        return oc_one(eg_gelu(x), out);
    case EG__OP_SOFTPLUS:
        return oc_one(eg_softplus(x), out);
    case EG__OP_SIGN:
        return oc_one(eg_sign(x), out);
    case EG__OP_SQUARE:
        return oc_one(eg_square(x), out);
    case EG__OP_RECIPROCAL:
        return oc_one(eg_reciprocal(x), out);
    case EG__OP_ERF:
        return oc_one(eg_erf(x), out);
    case EG__OP_CLIP:
        return oc_one(eg_clip(x, c->d[0], c->d[1]), out);
    default:
        return -1;
    }
}

static int apply_binary(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    const eg_tensor *a = in[0], *b = in[1];
    if (c->p[0]) {
        switch (c->op) {
        case EG__OP_ADD:
            return oc_one(eg_add_scalar(a, c->d[0]), out);
        case EG__OP_MUL:
            return oc_one(eg_mul_scalar(a, c->d[0]), out);
        case EG__OP_POW:
            return oc_one(eg_pow_scalar(a, c->d[0]), out);
        default:
            return -1;
        }
    }
    switch (c->op) {
    case EG__OP_ADD:
        return oc_one(eg_add(a, b), out);
    case EG__OP_SUB:
        return oc_one(eg_sub(a, b), out);
    case EG__OP_MUL:
        return oc_one(eg_mul(a, b), out);
    case EG__OP_DIV:
        return oc_one(eg_div(a, b), out);
    case EG__OP_POW:
        return oc_one(eg_pow(a, b), out);
    case EG__OP_MAXIMUM:
        return oc_one(eg_maximum(a, b), out);
    case EG__OP_MINIMUM:
        return oc_one(eg_minimum(a, b), out);
    case EG__OP_EQUAL:
        return oc_one(eg_equal(a, b), out);
    case EG__OP_NOT_EQUAL:
        return oc_one(eg_not_equal(a, b), out);
    case EG__OP_LESS:
        return oc_one(eg_less(a, b), out);
    case EG__OP_LESS_EQUAL:
        return oc_one(eg_less_equal(a, b), out);
    case EG__OP_GREATER:
        return oc_one(eg_greater(a, b), out);
    case EG__OP_GREATER_EQUAL:
        return oc_one(eg_greater_equal(a, b), out);
    default:
        return -1;
    }
}

static int apply_where(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    (void)c;
    return oc_one(eg_where(in[0], in[1], in[2]), out);
}

static int apply_cast(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    eg_tensor *y = eg_cast(in[0], (eg_dtype)c->p[0]);
    if (y && c->p[2]) y = eg_cast(y, eg_tensor_dtype(in[0]));
    return oc_one(y, out);
}

void oc_int_axes(const oc_case *c, int first, int n, int *axes) {
    for (int i = 0; i < n; i++) axes[i] = (int)c->p[first + i];
}

static int apply_reduce(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    int axes[4], n = (int)c->p[0];
    oc_int_axes(c, 1, n, axes);
    const int *a = n ? axes : NULL;
    bool keep = c->p[5] != 0;
    switch (c->op) {
    case EG__OP_SUM:
        return oc_one(eg_sum(in[0], n, a, keep), out);
    case EG__OP_MEAN:
        return oc_one(eg_mean(in[0], n, a, keep), out);
    case EG__OP_MAX:
        return oc_one(eg_max(in[0], n, a, keep), out);
    case EG__OP_MIN:
        return oc_one(eg_min(in[0], n, a, keep), out);
    case EG__OP_LOGSUMEXP:
        return oc_one(eg_logsumexp(in[0], n, a, keep), out);
    case EG__OP_VAR:
        return oc_one(eg_var(in[0], n, a, keep), out);
    default:
        return -1;
    }
}

static int apply_arg(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    if (c->op == EG__OP_ARGMAX) return oc_one(eg_argmax(in[0], (int)c->p[0], c->p[1] != 0), out);
    return oc_one(eg_argmin(in[0], (int)c->p[0], c->p[1] != 0), out);
}

static int apply_softmax(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    if (c->op == EG__OP_SOFTMAX) return oc_one(eg_softmax(in[0], (int)c->p[0]), out);
    return oc_one(eg_log_softmax(in[0], (int)c->p[0]), out);
}

static int apply_matmul(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    if (!c->p[0] && !c->p[1]) return oc_one(eg_matmul(in[0], in[1]), out);
    return oc_one(eg_matmul_ex(in[0], in[1], c->p[0] != 0, c->p[1] != 0), out);
}

static int apply_reshape(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    return oc_one(eg_reshape(in[0], (int)c->p[0], &c->p[1]), out);
}

static int apply_squeeze(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    return oc_one(eg_squeeze(in[0], (int)c->p[0]), out);
}

static int apply_unsqueeze(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    return oc_one(eg_unsqueeze(in[0], (int)c->p[0]), out);
}

static int apply_permute(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    int axes[EG_MAX_DIMS];
    oc_int_axes(c, 0, eg_tensor_n_dims(in[0]), axes);
    return oc_one(eg_permute(in[0], axes), out);
}

static int apply_transpose(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    return oc_one(eg_transpose(in[0], (int)c->p[0], (int)c->p[1]), out);
}

static int apply_slice(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    return oc_one(eg_slice(in[0], (int)c->p[0], c->p[1], c->p[2], c->p[3]), out);
}

static int apply_split(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    int n = (int)c->p[1];
    if (eg_split(in[0], (int)c->p[0], n, c->p[2] ? &c->p[3] : NULL, out) != EG_OK) return -1;
    return n;
}

static int apply_broadcast_to(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    return oc_one(eg_broadcast_to(in[0], (int)c->p[0], &c->p[1]), out);
}

static int apply_copy(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    return oc_one(c->p[0] ? eg_contiguous(in[0]) : eg_copy(in[0]), out);
}

/* Onto the last visible device (cpu:1 with EG_CPU_DEVICES=2; the input's own device when the
 * host is not split) and, with p[0] = 1, back again. */
static int apply_to_device(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    const eg_device *there = eg_device_at(eg_device_count() - 1);
    eg_tensor *moved = eg_tensor_to(in[0], there);
    if (!c->p[0]) return oc_one(moved, out);
    eg_tensor *back = eg_tensor_to(moved, eg_tensor_device(in[0]));
    eg_release(moved);
    return oc_one(back, out);
}

static int apply_concat(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    return oc_one(eg_concat(oc_case_n_inputs(c), in, (int)c->p[0]), out);
}

/* Outside a replica the collectives act on a group of one: all_reduce is the tensor, and
 * all_reduce_start + _done pack the inputs (both cases run the pair). */
static int apply_collective(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    if (c->op == EG__OP_ALL_REDUCE) return oc_one(eg_all_reduce(in[0]), out);
    int64_t tag = -1;
    eg_tensor *started = eg_all_reduce_start(oc_case_n_inputs(c), in, &tag);
    eg_tensor *sum = eg_all_reduce_done(started, tag);
    eg_release(started);
    return oc_one(sum, out);
}

static int apply_stack(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    return oc_one(eg_stack(oc_case_n_inputs(c), in, (int)c->p[0]), out);
}

static int apply_gather(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    return oc_one(eg_gather(in[0], in[1], (int)c->p[0]), out);
}

/* scatter_add is internal (the adjoint of gather): called through eg__execute. */
static int apply_scatter_add(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    int n_idx = eg_tensor_n_dims(in[1]), axis = (int)c->p[0];
    const int64_t *u = eg_tensor_shape(in[0]);
    eg__attrs attrs = {.axis = axis, .n_dims = eg_tensor_n_dims(in[0]) - n_idx + 1};
    for (int d = 0; d < attrs.n_dims; d++)
        attrs.shape[d] = d < axis ? u[d] : d == axis ? c->p[1] : u[d - 1 + n_idx];
    return oc_one(eg__execute(EG__OP_SCATTER_ADD, 2, eg__const_tensors(in), &attrs), out);
}

/* unslice is internal (the adjoint of slice): called through eg__execute. */
static int apply_unslice(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    int axis = (int)c->p[0];
    int64_t count = eg_tensor_dim(in[0], axis);
    eg__attrs attrs = {.axis = axis, .n_dims = eg_tensor_n_dims(in[0])};
    memcpy(attrs.shape, eg_tensor_shape(in[0]), sizeof(int64_t) * (size_t)attrs.n_dims);
    attrs.shape[axis] = c->p[3];
    attrs.ints[0] = c->p[1];
    attrs.ints[1] = c->p[1] + (count - 1) * c->p[2] + 1;
    attrs.ints[2] = c->p[2];
    return oc_one(eg__execute(EG__OP_UNSLICE, 1, eg__const_tensors(in), &attrs), out);
}

static int apply_one_hot(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    return oc_one(eg_one_hot(in[0], c->p[0], (eg_dtype)c->p[1]), out);
}

static int apply_pad(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    return oc_one(eg_pad(in[0], c->p, c->d[0]), out);
}

static int apply_sparse_xent(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    (void)c;
    return oc_one(eg_sparse_softmax_cross_entropy(in[0], in[1]), out);
}

static int apply_dropout(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    return oc_one(eg_dropout(in[0], c->d[0], (uint64_t)c->p[0], true), out);
}

/* ---- the table ---- */

#define CASE(OP, NAME, FAMILY, REF, ...)                                                           \
    {                                                                                              \
        .op = EG__OP_##OP, .name = NAME, .apply = apply_##FAMILY, .reference = oc_ref_##REF,       \
        __VA_ARGS__                                                                                \
    }
#define IN(...) .inputs = {__VA_ARGS__}
#define P(...)  .p = {__VA_ARGS__}
#define D(...)  .d = {__VA_ARGS__}

/* contiguous, a transposed view, a step-sliced 3-d view */
#define UNARY(OP, NAME, G)                                                                         \
    CASE(OP, NAME, unary, unary, IN("F 2,3 " G)),                                                  \
        CASE(OP, NAME " of a transposed view", unary, unary, IN("F 4,3:T " G)),                    \
        CASE(OP, NAME " of a step slice", unary, unary, IN("F 6,2,2:S " G)),                       \
        CASE(OP, NAME " of a broadcast view", unary, unary, IN("F 3,2:B " G))

/* same shapes, broadcasting, views with broadcasting, a 0-d operand, two transposed views */
#define BINARY(OP, NAME, GA, GB)                                                                   \
    CASE(OP, NAME, binary, binary, IN("F 3,4 " GA, "F 3,4 " GB)),                                  \
        CASE(OP, NAME " (3,1,4) with (2,4)", binary, binary, IN("F 3,1,4 " GA, "F 2,4 " GB)),      \
        CASE(OP, NAME " of views (2,3,4)^T with (3,4) sliced", binary, binary,                     \
             IN("F 2,4,3:T " GA, "F 6,4:S " GB)),                                                  \
        CASE(OP, NAME " with a 0-d operand", binary, binary, IN("F - " GA, "F 2,3 " GB)),          \
        CASE(OP, NAME " (2,1) with (1,3) transposed views", binary, binary,                        \
             IN("F 1,2:T " GA, "F 3,1:T " GB)),                                                    \
        CASE(OP, NAME " of a broadcast view with a transposed view", binary, binary,               \
             IN("F 3,4:B " GA, "F 4,3:T " GB))

#define COMPARE(OP, NAME)                                                                          \
    CASE(OP, NAME " (3,4) with (4)", binary, binary, IN("F 3,4 z", "F 4 z")),                      \
        CASE(OP, NAME " i32 of views", binary, binary, IN("i32 4,3:T z", "i32 - z")),              \
        CASE(OP, NAME " i64", binary, binary, IN("i64 2,3 z", "i64 2,3 z"))

#define REDUCE(OP, NAME, G)                                                                        \
    CASE(OP, NAME " over all axes", reduce, reduce, IN("F 2,3,4 " G)),                             \
        CASE(OP, NAME " over all axes keepdims", reduce, reduce, IN("F 2,3,4 " G),                 \
             P(0, 0, 0, 0, 0, 1)),                                                                 \
        CASE(OP, NAME " over axis 1", reduce, reduce, IN("F 2,3,4 " G), P(1, 1)),                  \
        CASE(OP, NAME " over axes (0, 2) keepdims", reduce, reduce, IN("F 2,3,4 " G),              \
             P(2, 0, 2, 0, 0, 1)),                                                                 \
        CASE(OP, NAME " over axes (-1, 0)", reduce, reduce, IN("F 2,3,4 " G), P(2, -1, 0)),        \
        CASE(OP, NAME " over axes (1, 2) keepdims of a transposed view", reduce, reduce,           \
             IN("F 2,4,3:T " G), P(2, 1, 2, 0, 0, 1)),                                             \
        CASE(OP, NAME " over axis 0 of a step slice", reduce, reduce, IN("F 6,5:S " G), P(1, 0)),  \
        CASE(OP, NAME " of long rows", reduce, reduce, IN("F 3,21 " G), P(1, 1)),                  \
        CASE(OP, NAME " of long columns keepdims", reduce, reduce, IN("F 19,3 " G),                \
             P(1, 0, 0, 0, 0, 1)),                                                                 \
        CASE(OP, NAME " over axes (0, 2) of a broadcast view", reduce, reduce, IN("F 3,4:B " G),   \
             P(2, 0, 2))

#define ARG(OP, NAME)                                                                              \
    CASE(OP, NAME " axis 1", arg, arg_reduce, IN("F 3,4 d"), P(1)),                                \
        CASE(OP, NAME " axis 0 keepdims", arg, arg_reduce, IN("F 3,4 d"), P(0, 1)),                \
        CASE(OP, NAME " axis -1 of a transposed view", arg, arg_reduce, IN("F 2,4,3:T d"), P(-1)), \
        CASE(OP, NAME " with ties (first wins)", arg, arg_reduce, IN("F 4,6 z"), P(1)),            \
        CASE(OP, NAME " i32 axis 0", arg, arg_reduce, IN("i32 5,3 z"), P(0)),                      \
        CASE(OP, NAME " axis 0 of a broadcast view (ties)", arg, arg_reduce, IN("F 3,4:B d"),      \
             P(0))

#define SOFTMAX(OP, NAME)                                                                          \
    CASE(OP, NAME " axis -1", softmax, softmax, IN("F 3,4 n"), P(-1)),                             \
        CASE(OP, NAME " axis 0", softmax, softmax, IN("F 3,4 n"), P(0)),                           \
        CASE(OP, NAME " middle axis", softmax, softmax, IN("F 2,3,4 n"), P(1)),                    \
        CASE(OP, NAME " axis -1 of a transposed view", softmax, softmax, IN("F 5,3:T n"), P(-1)),  \
        CASE(OP, NAME " axis 0 of a broadcast view", softmax, softmax, IN("F 3,4:B n"), P(0)),     \
        CASE(OP, NAME " of large logits", softmax, softmax, IN("F 3,5 w"), P(-1),                  \
             .flags = OC_FORWARD_ONLY)

const oc_case oc_cases[] = {
    /* ---- elementwise unary ---- */
    UNARY(NEG, "neg", "n"),
    UNARY(ABS, "abs", "a"),
    UNARY(EXP, "exp", "n"),
    UNARY(LOG, "log", "p"),
    UNARY(SQRT, "sqrt", "p"),
    UNARY(RSQRT, "rsqrt", "p"),
    UNARY(SIN, "sin", "n"),
    UNARY(COS, "cos", "n"),
    UNARY(TANH, "tanh", "n"),
    UNARY(SIGMOID, "sigmoid", "n"),
    UNARY(RELU, "relu", "a"),
    UNARY(GELU, "gelu", "n"),
    UNARY(SOFTPLUS, "softplus", "n"),
    UNARY(SIGN, "sign", "a"),
    UNARY(SQUARE, "square", "n"),
    UNARY(RECIPROCAL, "reciprocal", "a"),
    UNARY(ERF, "erf", "n"),
    CASE(EXP, "exp of a 0-d tensor", unary, unary, IN("F - n")),
    CASE(SIGN, "sign with zeros", unary, unary, IN("F 3,3 z")),
    CASE(RELU, "relu with zeros", unary, unary, IN("F 3,3 z"), .flags = OC_FORWARD_ONLY),
    CASE(ABS, "abs with zeros", unary, unary, IN("F 3,3 z"), .flags = OC_FORWARD_ONLY),
    CASE(SOFTPLUS, "softplus of large values", unary, unary, IN("F 4,5 w"),
         .flags = OC_FORWARD_ONLY),
    CASE(SIGMOID, "sigmoid of large values", unary, unary, IN("F 4,5 w"), .flags = OC_FORWARD_ONLY),
    CASE(TANH, "tanh of large values", unary, unary, IN("F 4,5 w"), .flags = OC_FORWARD_ONLY),
    CASE(GELU, "gelu of large values", unary, unary, IN("F 4,5 w"), .flags = OC_FORWARD_ONLY),
    CASE(CLIP, "clip", unary, unary, IN("F 3,4 d"), D(-0.55, 0.65)),
    CASE(CLIP, "clip of a transposed view", unary, unary, IN("F 4,3:T d"), D(-1.1, 0.2)),
    CASE(CLIP, "clip with low == high", unary, unary, IN("F 3,4 d"), D(0.1, 0.1)),

    /* ---- elementwise binary ---- */
    BINARY(ADD, "add", "n", "n"),
    BINARY(SUB, "sub", "n", "n"),
    BINARY(MUL, "mul", "n", "n"),
    BINARY(DIV, "div", "n", "a"),
    BINARY(POW, "pow", "p", "n"),
    BINARY(MAXIMUM, "maximum", "d", "d"),
    BINARY(MINIMUM, "minimum", "d", "d"),
    CASE(ADD, "add_scalar", binary, binary, IN("F 2,3 n"), P(1), D(0.75)),
    CASE(MUL, "mul_scalar of a transposed view", binary, binary, IN("F 3,2:T n"), P(1), D(-1.5)),
    CASE(POW, "pow_scalar 2.5", binary, binary, IN("F 2,3 p"), P(1), D(2.5)),
    CASE(POW, "pow_scalar 3 of negative bases", binary, binary, IN("F 2,3 n"), P(1), D(3)),
    CASE(ADD, "add i32 (3,4) with (4)", binary, binary, IN("i32 3,4 z", "i32 4 z")),
    CASE(ADD, "add_scalar i64", binary, binary, IN("i64 2,3 z"), P(1), D(7)),
    CASE(SUB, "sub i64 of views", binary, binary, IN("i64 4,3:T z", "i64 6,4:S z")),
    CASE(MUL, "mul i32", binary, binary, IN("i32 3,4 z", "i32 3,1 z")),
    CASE(DIV, "div i32 truncates toward zero", binary, binary, IN("i32 3,4 z", "i32 3,4 q")),
    CASE(DIV, "div i64 truncates toward zero", binary, binary, IN("i64 3,4 z", "i64 4 q")),
    CASE(MAXIMUM, "maximum i32 with ties", binary, binary, IN("i32 3,4 z", "i32 4 z")),
    CASE(MINIMUM, "minimum i64 with ties", binary, binary, IN("i64 3,4 z", "i64 3,1 z")),
    CASE(MAXIMUM, "maximum with ties", binary, binary, IN("F 3,4 z", "F 4 z"),
         .flags = OC_FORWARD_ONLY),

    /* ---- comparisons and selection ---- */
    COMPARE(EQUAL, "equal"),
    COMPARE(NOT_EQUAL, "not_equal"),
    COMPARE(LESS, "less"),
    COMPARE(LESS_EQUAL, "less_equal"),
    COMPARE(GREATER, "greater"),
    COMPARE(GREATER_EQUAL, "greater_equal"),
    CASE(EQUAL, "equal bool", binary, binary, IN("b 3,4 b", "b 4 b")),
    CASE(LESS, "less u8", binary, binary, IN("u8 3,4 i5", "u8 3,4 i5")),
    CASE(WHERE, "where (3,1) ? (1,4) : (3,4)", where, where, IN("b 3,1 b", "F 1,4 n", "F 3,4 n")),
    CASE(WHERE, "where of views with a 0-d operand", where, where,
         IN("b 3,4 b", "F 4,3:T n", "F - n")),
    CASE(WHERE, "where i32", where, where, IN("b 2,3 b", "i32 2,3 z", "i32 3 z")),

    /* ---- cast ---- */
    CASE(CAST, "cast to f64", cast, cast, IN("F 2,3 n"), P(EG_DTYPE_F64)),
    CASE(CAST, "cast to f32 and back", cast, cast, IN("F 4,3:T n"), P(EG_DTYPE_F32, 0, 1),
         .h = 1e-2),
    CASE(CAST, "cast f32 to f16 and back", cast, cast, IN("f32 3,4 n"), P(EG_DTYPE_F16, 0, 1)),
    CASE(CAST, "cast f32 to bf16 and back", cast, cast, IN("f32 4,3:T n"), P(EG_DTYPE_BF16, 0, 1)),
    CASE(CAST, "cast to i32 (toward zero)", cast, cast, IN("F 3,4 w"), P(EG_DTYPE_I32)),
    CASE(CAST, "cast f64 to i64 of a view", cast, cast, IN("f64 2,3:T w"), P(EG_DTYPE_I64)),
    CASE(CAST, "cast to bool", cast, cast, IN("F 3,4 z"), P(EG_DTYPE_BOOL)),
    CASE(CAST, "cast bool to f32", cast, cast, IN("b 3,4 b"), P(EG_DTYPE_F32)),
    CASE(CAST, "cast i32 to f64", cast, cast, IN("i32 3,4 z"), P(EG_DTYPE_F64)),
    CASE(CAST, "cast u8 to f32", cast, cast, IN("u8 3,4 i200"), P(EG_DTYPE_F32)),
    CASE(CAST, "cast f32 to u8 (saturates)", cast, cast, IN("f32 3,4 w"), P(EG_DTYPE_U8)),
    CASE(CAST, "cast bf16 to f16", cast, cast, IN("bf16 3,4 n"), P(EG_DTYPE_F16)),
    CASE(CAST, "cast f16 to bf16 of a view", cast, cast, IN("f16 4,3:T n"), P(EG_DTYPE_BF16)),
    CASE(CAST, "cast f64 to bf16", cast, cast, IN("f64 3,4 n"), P(EG_DTYPE_BF16)),
    CASE(CAST, "cast f64 to f16 of a view", cast, cast, IN("f64 4,3:T n"), P(EG_DTYPE_F16)),
    CASE(CAST, "cast f32 to f16 of a view", cast, cast, IN("f32 4,3:T n"), P(EG_DTYPE_F16)),
    CASE(CAST, "cast bf16 to i32 (toward zero)", cast, cast, IN("bf16 3,4 w"), P(EG_DTYPE_I32)),
    CASE(CAST, "cast f16 to i64 of a view", cast, cast, IN("f16 4,3:T w"), P(EG_DTYPE_I64)),
    CASE(CAST, "cast f16 to u8 (saturates)", cast, cast, IN("f16 3,4 w"), P(EG_DTYPE_U8)),
    CASE(CAST, "cast bf16 to bool", cast, cast, IN("bf16 3,4 z"), P(EG_DTYPE_BOOL)),
    CASE(CAST, "cast i32 to bf16", cast, cast, IN("i32 3,4 z"), P(EG_DTYPE_BF16)),
    CASE(CAST, "cast i64 to f16 of a view", cast, cast, IN("i64 4,3:T z"), P(EG_DTYPE_F16)),
    CASE(CAST, "cast u8 to f16", cast, cast, IN("u8 3,4 i200"), P(EG_DTYPE_F16)),
    CASE(CAST, "cast bool to bf16", cast, cast, IN("b 3,4 b"), P(EG_DTYPE_BF16)),
    CASE(CAST, "cast bf16 to f32 of a view", cast, cast, IN("bf16 4,3:T n"), P(EG_DTYPE_F32)),
    CASE(CAST, "cast f16 to f64", cast, cast, IN("f16 3,4 n"), P(EG_DTYPE_F64)),

    /* ---- reductions ---- */
    REDUCE(SUM, "sum", "n"),
    REDUCE(MEAN, "mean", "n"),
    REDUCE(MAX, "max", "d"),
    REDUCE(MIN, "min", "d"),
    REDUCE(LOGSUMEXP, "logsumexp", "n"),
    REDUCE(VAR, "var", "n"),
    CASE(SUM, "sum i32 over axis 1", reduce, reduce, IN("i32 3,4 z"), P(1, 1)),
    CASE(SUM, "sum i64 over axis 0 of a view", reduce, reduce, IN("i64 4,3:T z"), P(1, 0)),
    CASE(MAX, "max i32 over all axes", reduce, reduce, IN("i32 3,4 z")),
    CASE(MIN, "min i64 over axis 1 keepdims", reduce, reduce, IN("i64 3,4 z"), P(1, 1, 0, 0, 0, 1)),
    CASE(LOGSUMEXP, "logsumexp of large values", reduce, reduce, IN("F 3,4 w"), P(1, 1),
         .flags = OC_FORWARD_ONLY),
    ARG(ARGMAX, "argmax"),
    ARG(ARGMIN, "argmin"),
    SOFTMAX(SOFTMAX, "softmax"),
    SOFTMAX(LOG_SOFTMAX, "log_softmax"),

    /* ---- matmul ---- */
    CASE(MATMUL, "matmul (3,4) x (4,5)", matmul, matmul, IN("F 3,4 n", "F 4,5 n")),
    CASE(MATMUL, "matmul transpose_a", matmul, matmul, IN("F 4,3 n", "F 4,5 n"), P(1, 0)),
    CASE(MATMUL, "matmul transpose_b", matmul, matmul, IN("F 3,4 n", "F 5,4 n"), P(0, 1)),
    CASE(MATMUL, "matmul transpose_a and _b", matmul, matmul, IN("F 4,3 n", "F 5,4 n"), P(1, 1)),
    CASE(MATMUL, "matmul (2,3,4) x (4,5)", matmul, matmul, IN("F 2,3,4 n", "F 4,5 n")),
    CASE(MATMUL, "matmul (2,1,3,4) x (3,4,2) batch broadcast", matmul, matmul,
         IN("F 2,1,3,4 n", "F 3,4,2 n")),
    CASE(MATMUL, "matmul (3,4) x (2,4,2)^T_b batch broadcast", matmul, matmul,
         IN("F 3,4 n", "F 2,2,4 n"), P(0, 1)),
    CASE(MATMUL, "matmul vector x matrix", matmul, matmul, IN("F 4 n", "F 4,5 n")),
    CASE(MATMUL, "matmul matrix x vector", matmul, matmul, IN("F 3,4 n", "F 4 n")),
    CASE(MATMUL, "matmul vector x vector", matmul, matmul, IN("F 4 n", "F 4 n")),
    CASE(MATMUL, "matmul batch x vector", matmul, matmul, IN("F 2,3,4 n", "F 4 n")),
    CASE(MATMUL, "matmul transposed view x step slice", matmul, matmul,
         IN("F 4,3:T n", "F 8,5:S n")),
    CASE(MATMUL, "matmul batched transposed views", matmul, matmul,
         IN("F 2,4,3:T n", "F 2,5,4:T n")),
    CASE(MATMUL, "matmul transpose_a of a transposed view", matmul, matmul,
         IN("F 3,4:T n", "F 4,5 n"), P(1, 0)),
    CASE(MATMUL, "matmul of step-sliced batches", matmul, matmul, IN("F 4,3,2:S n", "F 2,2 n")),

    /* ---- shapes and views ---- */
    CASE(RESHAPE, "reshape (2,3,4) to (6,4)", reshape, reshape, IN("F 2,3,4 n"), P(2, 6, 4)),
    CASE(RESHAPE, "reshape with -1", reshape, reshape, IN("F 2,3,4 n"), P(3, 4, -1, 2)),
    CASE(RESHAPE, "reshape a transposed view (copies)", reshape, reshape, IN("F 2,4,3:T n"),
         P(2, 6, 4)),
    CASE(RESHAPE, "reshape a step slice to 1-d", reshape, reshape, IN("F 6,4:S n"), P(1, 12)),
    CASE(RESHAPE, "reshape a step slice keeping rows", reshape, reshape, IN("F 6,2,2:S n"),
         P(2, 3, 4)),
    CASE(RESHAPE, "reshape 0-d to (1,1)", reshape, reshape, IN("F - n"), P(2, 1, 1)),
    CASE(RESHAPE, "squeeze axis 1", squeeze, squeeze, IN("F 3,1,4 n"), P(1)),
    CASE(RESHAPE, "squeeze axis -1 of a transposed view", squeeze, squeeze, IN("F 1,3:T n"), P(-1)),
    CASE(RESHAPE, "unsqueeze axis 0", unsqueeze, unsqueeze, IN("F 3,4 n"), P(0)),
    CASE(RESHAPE, "unsqueeze axis -1 of a transposed view", unsqueeze, unsqueeze, IN("F 3,4:T n"),
         P(-1)),
    CASE(RESHAPE, "unsqueeze axis 1 of a step slice", unsqueeze, unsqueeze, IN("F 6,4:S n"), P(1)),
    CASE(PERMUTE, "permute (2,0,1)", permute, permute, IN("F 2,3,4 n"), P(2, 0, 1)),
    CASE(PERMUTE, "permute negative axes of a view", permute, permute, IN("F 2,4,3:T n"),
         P(-1, 0, 1)),
    CASE(PERMUTE, "transpose (0,2)", transpose, transpose, IN("F 2,3,4 n"), P(0, 2)),
    CASE(PERMUTE, "transpose (-1,-2) of a step slice", transpose, transpose, IN("F 6,4:S n"),
         P(-1, -2)),
    CASE(SLICE, "slice axis 1 1:4:2", slice, slice, IN("F 3,5 n"), P(1, 1, 4, 2)),
    CASE(SLICE, "slice negative start, clamped stop", slice, slice, IN("F 5,3 n"),
         P(0, -3, 100, 1)),
    CASE(SLICE, "slice of a transposed view", slice, slice, IN("F 4,6:T n"), P(1, 0, 4, 3)),
    CASE(SLICE, "slice to nothing", slice, slice, IN("F 3,4 n"), P(1, 3, 1, 1)),
    CASE(SLICE, "split sizes (1,3,2) on axis 1", split, split, IN("F 2,6 n"), P(1, 3, 1, 1, 3, 2)),
    CASE(SLICE, "split in 3 equal parts on axis 0", split, split, IN("F 6,2 n"), P(0, 3)),
    CASE(SLICE, "split a transposed view on axis -1", split, split, IN("F 4,3:T n"),
         P(-1, 2, 1, 1, 3)),
    CASE(BROADCAST_TO, "broadcast_to (3,1) -> (2,3,4)", broadcast_to, broadcast_to, IN("F 3,1 n"),
         P(3, 2, 3, 4)),
    CASE(BROADCAST_TO, "broadcast_to (4) -> (3,4)", broadcast_to, broadcast_to, IN("F 4 n"),
         P(2, 3, 4)),
    CASE(BROADCAST_TO, "broadcast_to 0-d -> (2,2)", broadcast_to, broadcast_to, IN("F - n"),
         P(2, 2, 2)),
    CASE(BROADCAST_TO, "broadcast_to of a transposed view", broadcast_to, broadcast_to,
         IN("F 1,3:T n"), P(3, 2, 3, 4)),
    CASE(COPY, "copy", copy, identity, IN("F 3,4 n")),
    CASE(TO_DEVICE, "to the last device", to_device, identity, IN("F 3,4 n")),
    CASE(TO_DEVICE, "a transposed view there and back", to_device, identity, IN("F 2,4,3:T n"),
         P(1)),
    CASE(COPY, "copy of a transposed view", copy, identity, IN("F 2,4,3:T n")),
    CASE(COPY, "contiguous of a step slice", copy, identity, IN("F 6,4:S n"), P(1)),
    CASE(RESHAPE, "contiguous of a contiguous tensor", copy, identity, IN("F 3,4 n"), P(1)),
    CASE(CONCAT, "concat axis 1", concat, concat, IN("F 2,3 n", "F 2,1 n", "F 2,2 n"), P(1)),
    CASE(CONCAT, "concat axis 0 with a transposed view", concat, concat, IN("F 3,2:T n", "F 1,3 n"),
         P(0)),
    CASE(CONCAT, "concat axis -1 of 3-d with a step slice", concat, concat,
         IN("F 2,2,3 n", "F 4,2,2:S n", "F 2,2,1 n"), P(-1)),
    CASE(COPY, "concat of one tensor", concat, concat, IN("F 2,3 n"), P(0)),
    CASE(CONCAT, "concat i32", concat, concat, IN("i32 2,3 z", "i32 1,3 z"), P(0)),
    CASE(CONCAT, "concat of four (views)", concat, concat,
         IN("F 1,2 n", "F 2,2:T n", "F 2:B n", "F 4,2:S n"), P(0)),
    CASE(CONCAT, "concat of ten", concat, concat,
         IN("F 1,2 n", "F 2,2 n", "F 1,2 n", "F 3,2 n", "F 1,2 n", "F 2,1:T n", "F 1,2 n",
            "F 2,2 n", "F 1,2 n", "F 1,2 n"),
         P(0)),

    CASE(ALL_REDUCE, "all_reduce alone", collective, identity, IN("F 3,4 n")),
    CASE(ALL_REDUCE, "all_reduce alone of a transposed view", collective, identity,
         IN("F 2,4,3:T n")),
    CASE(ALL_REDUCE_START, "all_reduce_start alone packs views", collective, packed,
         IN("F 2,3 n", "F 3,2:T n", "F 4,2:S n")),
    CASE(ALL_REDUCE_DONE, "all_reduce_done alone of one", collective, packed, IN("F 5 n")),

    CASE(CONCAT, "stack axis 0", stack, stack, IN("F 2,3 n", "F 2,3 n", "F 2,3 n"), P(0)),
    CASE(CONCAT, "stack axis -1 of views", stack, stack, IN("F 3,2:T n", "F 4,3:S n"), P(-1)),
    CASE(CONCAT, "stack axis 1", stack, stack, IN("F 2,3 n", "F 2,3 n"), P(1)),
    CASE(RESHAPE, "stack of one tensor", stack, stack, IN("F 2,3 n"), P(1)),
    CASE(GATHER, "gather rows with repeats", gather, gather, IN("F 4,3 n", "i64 6 i4"), P(0)),
    CASE(GATHER, "gather axis 1 with 2-d i32 indices", gather, gather, IN("F 2,3 n", "i32 2,2 i3"),
         P(1)),
    CASE(GATHER, "gather axis 1 of 3-d", gather, gather, IN("F 2,3,4 n", "i64 5 i3"), P(1)),
    CASE(GATHER, "gather axis -1 of a transposed view", gather, gather, IN("F 4,3:T n", "i64 3 i4"),
         P(-1)),
    CASE(GATHER, "gather with a 0-d index", gather, gather, IN("F 4,3 n", "i64 - i4"), P(0)),
    CASE(SCATTER_ADD, "scatter_add axis 1", scatter_add, scatter_add, IN("F 2,5,3 n", "i64 5 i4"),
         P(1, 4)),
    CASE(SCATTER_ADD, "scatter_add axis 0 with repeats", scatter_add, scatter_add,
         IN("F 6,3 n", "i32 6 i2"), P(0, 3)),
    CASE(SCATTER_ADD, "scatter_add of a transposed view", scatter_add, scatter_add,
         IN("F 3,4:T n", "i64 4 i3"), P(0, 5)),
    CASE(UNSLICE, "unslice axis 1 1::2", unslice, unslice, IN("F 2,3 n"), P(1, 1, 2, 6)),
    CASE(UNSLICE, "unslice axis 0 of a view", unslice, unslice, IN("F 3,2:T n"), P(0, 1, 1, 4)),
    CASE(ONE_HOT, "one_hot i64 with out-of-range", one_hot, one_hot, IN("i64 2,3 i6"),
         P(4, EG_DTYPE_F32)),
    CASE(ONE_HOT, "one_hot i32 to f64", one_hot, one_hot, IN("i32 5 i3"), P(3, EG_DTYPE_F64)),
    CASE(ONE_HOT, "one_hot with negative indices", one_hot, one_hot, IN("i64 3,2 z"),
         P(3, EG_DTYPE_F32)),
    CASE(ONE_HOT, "one_hot u8 to i32", one_hot, one_hot, IN("u8 4 i5"), P(5, EG_DTYPE_I32)),
    CASE(PAD, "pad (2,3)", pad, pad, IN("F 2,3 n"), P(1, 0, 2, 1), D(0.5)),
    CASE(PAD, "pad 1-d with zeros", pad, pad, IN("F 3 n"), P(2, 2)),
    CASE(PAD, "pad a transposed view", pad, pad, IN("F 3,4:T n"), P(0, 1, 1, 0), D(-1)),
    CASE(PAD, "pad 3-d of a step slice", pad, pad, IN("F 4,2,2:S n"), P(1, 1, 0, 0, 2, 1), D(3)),
    CASE(PAD, "pad i32", pad, pad, IN("i32 2,2 z"), P(1, 1, 1, 1), D(9)),

    /* ---- neural-network ops ---- */
    CASE(SPARSE_SOFTMAX_CROSS_ENTROPY, "sparse_softmax_cross_entropy", sparse_xent, sparse_xent,
         IN("F 4,5 n", "i64 4 i5")),
    CASE(SPARSE_SOFTMAX_CROSS_ENTROPY, "sparse_softmax_cross_entropy of a view, i32 labels",
         sparse_xent, sparse_xent, IN("F 5,3:T n", "i32 3 i5")),
    CASE(SPARSE_SOFTMAX_CROSS_ENTROPY, "sparse_softmax_cross_entropy u8 labels", sparse_xent,
         sparse_xent, IN("F 2,3 n", "u8 2 i3")),
    CASE(SPARSE_SOFTMAX_CROSS_ENTROPY, "sparse_softmax_cross_entropy of large logits", sparse_xent,
         sparse_xent, IN("F 3,4 w", "i64 3 i4"), .flags = OC_FORWARD_ONLY),
    /* ---- more views: zero strides (broadcast views) ---- */
    CASE(CAST, "cast a broadcast view to f64", cast, cast, IN("F 3,4:B n"), P(EG_DTYPE_F64)),
    CASE(WHERE, "where with a broadcast condition", where, where,
         IN("b 4:B b", "F 2,4 n", "F 4 n")),
    CASE(MATMUL, "matmul of a broadcast batch view", matmul, matmul, IN("F 3,4:B n", "F 2,4,5 n")),
    CASE(MATMUL, "matmul transpose_b of a broadcast view", matmul, matmul,
         IN("F 2,3,4 n", "F 5,4:B n"), P(0, 1)),
    CASE(RESHAPE, "reshape a broadcast view (copies)", reshape, reshape, IN("F 3,4:B n"),
         P(2, 6, 4)),
    CASE(RESHAPE, "reshape a broadcast view (stays a view)", reshape, reshape, IN("F 3,4:B n"),
         P(3, 2, 12, 1)),
    CASE(PERMUTE, "permute a broadcast view", permute, permute, IN("F 3,4:B n"), P(1, 2, 0)),
    CASE(SLICE, "slice a broadcast view", slice, slice, IN("F 3,4:B n"), P(2, 1, 4, 2)),
    CASE(SLICE, "split a broadcast view on axis 0", split, split, IN("F 3:B n"), P(0, 2)),
    CASE(COPY, "contiguous of a broadcast view", copy, identity, IN("F 2,3:B n"), P(1)),
    CASE(BROADCAST_TO, "broadcast_to of a broadcast view", broadcast_to, broadcast_to,
         IN("F 3:B n"), P(3, 4, 2, 3)),
    CASE(CONCAT, "concat with a broadcast view", concat, concat, IN("F 2,3:B n", "F 2,2,1 n"),
         P(-1)),
    CASE(CONCAT, "stack broadcast views", stack, stack, IN("F 3:B n", "F 3:B n"), P(1)),
    CASE(GATHER, "gather from a broadcast view", gather, gather, IN("F 3:B n", "i64 4 i3"), P(1)),
    CASE(SCATTER_ADD, "scatter_add of a broadcast view", scatter_add, scatter_add,
         IN("F 5:B n", "i64 5 i3"), P(1, 3)),
    CASE(PAD, "pad a broadcast view", pad, pad, IN("F 3:B n"), P(1, 0, 0, 2), D(0.25)),
    CASE(SPARSE_SOFTMAX_CROSS_ENTROPY, "sparse_softmax_cross_entropy of a broadcast view",
         sparse_xent, sparse_xent, IN("F 4:B n", "i64 2 i4")),
    {.op = EG__OP_DROPOUT,
     .name = "dropout of a broadcast view",
     .apply = apply_dropout,
     .check = oc_check_dropout,
     IN("F 3,4:B a"),
     P(5),
     D(0.5)},

/* ---- convolution (p: strides, dilations, groups, 10 * format + padding, explicit pads) ---- */
#define NCHW(padding) (10 + (padding))
    CASE(CONV2D, "conv2d 3x3 valid", conv2d, conv2d, IN("F 2,5,5,3 n", "F 3,3,3,4 n")),
    CASE(CONV2D, "conv2d same stride 2 odd sizes", conv2d, conv2d, IN("F 2,7,6,2 n", "F 3,3,2,3 n"),
         P(2, 2, 0, 0, 0, EG_PADDING_SAME)),
    CASE(CONV2D, "conv2d NCHW dilation (2,1) explicit padding", conv2d, conv2d,
         IN("F 1,2,7,6 n", "F 3,2,2,3 n"), P(1, 1, 2, 1, 0, NCHW(EG_PADDING_EXPLICIT), 1, 2, 0, 1)),
    CASE(CONV2D, "conv2d groups 2 stride (1,2)", conv2d, conv2d, IN("F 1,5,6,4 n", "F 3,3,2,6 n"),
         P(1, 2, 0, 0, 2)),
    CASE(CONV2D, "conv2d depthwise (groups = C) same", conv2d, conv2d,
         IN("F 2,4,5,3 n", "F 3,3,1,6 n"), P(0, 0, 0, 0, 3, EG_PADDING_SAME)),
    CASE(CONV2D, "conv2d NCHW groups 2 same stride 2", conv2d, conv2d,
         IN("F 2,4,5,5 n", "F 2,3,2,4 n"), P(2, 2, 0, 0, 2, NCHW(EG_PADDING_SAME))),
    CASE(CONV2D, "conv2d 1x1 stride 2", conv2d, conv2d, IN("F 2,5,5,3 n", "F 1,1,3,2 n"), P(2, 2)),
    CASE(CONV2D, "conv2d of a transposed view", conv2d, conv2d, IN("F 2,5,3,4:T n", "F 2,2,3,2 n"),
         P(1, 1, 1, 2, 0, EG_PADDING_SAME)),
    CASE(CONV2D, "conv2d of a step slice", conv2d, conv2d, IN("F 4,4,4,2:S n", "F 2,3,2,3 n")),
    CASE(CONV2D, "conv2d one input channel, 8 filters (direct kernel)", conv2d, conv2d,
         IN("F 2,6,6,1 n", "F 3,3,1,8 n"), P(0, 0, 0, 0, 0, EG_PADDING_SAME)),
    CASE(CONV2D, "conv2d 2 channels, 16 filters, stride 2 (direct kernel)", conv2d, conv2d,
         IN("F 1,5,5,2 n", "F 3,3,2,16 n"), P(2, 2, 0, 0, 0, EG_PADDING_SAME)),
    CASE(CONV2D, "conv2d groups 2 of 8 filters each (direct kernel)", conv2d, conv2d,
         IN("F 1,4,4,2 n", "F 2,2,1,16 n"), P(0, 0, 0, 0, 2)),
    CASE(CONV2D, "conv2d NCHW one channel (im2col)", conv2d, conv2d,
         IN("F 2,1,5,5 n", "F 3,3,1,8 n"), P(0, 0, 0, 0, 0, NCHW(EG_PADDING_SAME))),
    CASE(CONV2D, "conv2d filter larger than the input with padding", conv2d, conv2d,
         IN("F 1,2,2,1 n", "F 3,3,1,2 n"), P(0, 0, 0, 0, 0, EG_PADDING_EXPLICIT, 1, 1, 1, 1)),
    CASE(CONV2D_BACKWARD_INPUT, "conv2d_transpose same stride 2", conv2d_transpose,
         conv2d_transpose, IN("F 1,3,3,4 n", "F 3,3,2,4 n"), P(2, 2, 0, 0, 0, EG_PADDING_SAME)),
    CASE(CONV2D_BACKWARD_INPUT, "conv2d_transpose NCHW valid stride 2 dilation 2", conv2d_transpose,
         conv2d_transpose, IN("F 1,3,2,2 n", "F 2,2,2,3 n"),
         P(2, 2, 2, 2, 0, NCHW(EG_PADDING_VALID))),
    CASE(CONV2D_BACKWARD_INPUT, "conv2d_transpose with an output shape (5, 6)", conv2d_transpose,
         conv2d_transpose, IN("F 2,2,3,3 n", "F 2,2,2,3 n"), P(2, 2), D(5, 6)),
    CASE(CONV2D_BACKWARD_INPUT, "conv2d_transpose groups 2 explicit padding", conv2d_transpose,
         conv2d_transpose, IN("F 1,3,3,4 n", "F 3,2,3,4 n"),
         P(1, 2, 0, 0, 2, EG_PADDING_EXPLICIT, 1, 0, 0, 1)),
    CASE(CONV2D_BACKWARD_INPUT, "conv2d_transpose of a transposed view", conv2d_transpose,
         conv2d_transpose, IN("F 1,3,4,3:T n", "F 2,2,3,4 n"), P(1, 1)),
    CASE(CONV2D_BACKWARD_FILTER, "conv2d_backward_filter 3x3 valid", conv2d_backward_filter,
         conv2d_backward_filter, IN("F 2,5,5,3 n", "F 2,3,3,4 n"), D(3, 3)),
    CASE(CONV2D_BACKWARD_FILTER, "conv2d_backward_filter NCHW same stride 2 groups 2",
         conv2d_backward_filter, conv2d_backward_filter, IN("F 2,4,5,5 n", "F 2,4,3,3 n"),
         P(2, 2, 0, 0, 2, NCHW(EG_PADDING_SAME)), D(2, 3)),
    CASE(CONV2D_BACKWARD_FILTER, "conv2d_backward_filter dilation 2 of views",
         conv2d_backward_filter, conv2d_backward_filter, IN("F 2,6,3,5:T n", "F 2,5,2,4:T n"),
         P(1, 1, 2, 1, 0, EG_PADDING_EXPLICIT, 1, 0, 0, 0), D(2, 2)),
    CASE(CONV2D_BACKWARD_FILTER, "conv2d_backward_filter one channel, 8 filters (direct)",
         conv2d_backward_filter, conv2d_backward_filter, IN("F 3,5,4,1 n", "F 3,5,4,8 n"),
         P(0, 0, 0, 0, 0, EG_PADDING_SAME), D(3, 3)),
    CASE(CONV2D_BACKWARD_FILTER, "conv2d_backward_filter groups 2 of 16 filters (direct)",
         conv2d_backward_filter, conv2d_backward_filter, IN("F 2,4,4,2 n", "F 2,2,2,32 n"),
         P(2, 2, 0, 0, 2), D(2, 2)),
    CASE(CONV2D_BACKWARD_FILTER, "conv2d_backward_filter of 17 images (chunked sum)",
         conv2d_backward_filter, conv2d_backward_filter, IN("F 17,3,3,1 n", "F 17,2,2,2 n"),
         D(2, 2)),

    /* ---- pooling (p: pool size, strides, -, 10 * format + padding, explicit pads) ---- */
    CASE(MAX_POOL2D, "max_pool2d 2x2", pool2d, pool2d, IN("F 2,4,4,3 d")),
    CASE(MAX_POOL2D, "max_pool2d 3x3 stride 2 same odd sizes", pool2d, pool2d, IN("F 1,5,7,2 d"),
         P(3, 3, 2, 2, 0, EG_PADDING_SAME)),
    CASE(MAX_POOL2D, "max_pool2d NCHW 2x3 stride (1,2) explicit padding", pool2d, pool2d,
         IN("F 2,2,4,5 d"), P(2, 3, 1, 2, 0, NCHW(EG_PADDING_EXPLICIT), 1, 0, 2, 1)),
    CASE(MAX_POOL2D, "max_pool2d of a transposed view", pool2d, pool2d, IN("F 2,4,3,4:T d"),
         P(2, 2, 1, 1)),
    CASE(MAX_POOL2D, "max_pool2d with ties", pool2d, pool2d, IN("F 2,4,4,3 z"), P(3, 3, 1, 1),
         .flags = OC_FORWARD_ONLY),
    CASE(MAX_POOL2D_BACKWARD, "max_pool2d_backward 2x2", pool2d, pool2d,
         IN("F 2,4,4,3 d", "F 2,2,2,3 n")),
    CASE(MAX_POOL2D_BACKWARD, "max_pool2d_backward 2x2 tiling odd sizes (last row, column 0)",
         pool2d, pool2d, IN("F 2,5,7,3 d", "F 2,2,3,3 n")),
    CASE(MAX_POOL2D_BACKWARD, "max_pool2d_backward 3x2 tiled with ties (first wins)", pool2d,
         pool2d, IN("F 2,6,4,5 z", "F 2,2,2,5 n"), P(3, 2), .flags = OC_FORWARD_ONLY),
    /* 2x2 stride 2 SAME on odd sizes pads only the bottom and right: the last windows reach
     * past the image (the tiled path once read past it) */
    CASE(MAX_POOL2D_BACKWARD, "max_pool2d_backward 2x2 stride 2 same odd sizes", pool2d, pool2d,
         IN("F 1,5,5,4 d", "F 1,3,3,4 n"), P(2, 2, 2, 2, 0, EG_PADDING_SAME)),
    CASE(MAX_POOL2D_BACKWARD, "max_pool2d_backward overlapping windows, same", pool2d, pool2d,
         IN("F 1,5,5,2 d", "F 1,3,3,2 n"), P(3, 3, 2, 2, 0, EG_PADDING_SAME)),
    CASE(MAX_POOL2D_BACKWARD, "max_pool2d_backward NCHW of a view", pool2d, pool2d,
         IN("F 1,3,4,4 d", "F 1,3,3,3:T n"), P(2, 2, 1, 1, 0, NCHW(EG_PADDING_VALID))),
    CASE(MAX_POOL2D_BACKWARD, "max_pool2d_backward with ties (first wins)", pool2d, pool2d,
         IN("F 2,4,4,3 z", "F 2,4,4,3 n"), P(3, 3, 1, 1, 0, EG_PADDING_SAME),
         .flags = OC_FORWARD_ONLY),
    CASE(MAX_POOL2D_ARGMAX, "max_pool2d_argmax with ties", pool2d, pool2d, IN("F 2,4,4,3 z"),
         P(2, 2, 1, 1)),
    CASE(MAX_POOL2D_ARGMAX, "max_pool2d_argmax NCHW same", pool2d, pool2d, IN("F 2,2,5,4 z"),
         P(3, 2, 2, 2, 0, NCHW(EG_PADDING_SAME))),
    CASE(AVG_POOL2D, "avg_pool2d 2x2", pool2d, pool2d, IN("F 2,4,4,3 n")),
    CASE(AVG_POOL2D, "avg_pool2d 3x3 stride 2 same (padding not counted)", pool2d, pool2d,
         IN("F 1,5,7,2 n"), P(3, 3, 2, 2, 0, EG_PADDING_SAME)),
    CASE(AVG_POOL2D, "avg_pool2d NCHW explicit padding of a view", pool2d, pool2d,
         IN("F 2,2,5,4:T n"), P(2, 3, 1, 2, 0, NCHW(EG_PADDING_EXPLICIT), 1, 0, 2, 1)),
    CASE(AVG_POOL2D_BACKWARD, "avg_pool2d_backward 3x3 stride 2 same", avg_pool2d_backward, pool2d,
         IN("F 1,3,4,2 n"), P(3, 3, 2, 2, 0, EG_PADDING_SAME), D(5, 7)),
    CASE(AVG_POOL2D_BACKWARD, "avg_pool2d_backward NCHW 2x2", avg_pool2d_backward, pool2d,
         IN("F 2,3,2,2 n"), P(0, 0, 0, 0, 0, NCHW(EG_PADDING_VALID)), D(4, 5)),
    CASE(MEAN, "global_avg_pool2d", global_avg_pool2d, global_avg_pool2d, IN("F 2,3,4,5 n")),
    CASE(MEAN, "global_avg_pool2d NCHW keepdims", global_avg_pool2d, global_avg_pool2d,
         IN("F 2,3,4,5 n"), P(EG_DATA_FORMAT_NCHW, 1)),
    CASE(BROADCAST_TO, "upsample2d (2, 3)", upsample2d, upsample2d, IN("F 2,2,3,2 n"), P(2, 3)),
    CASE(BROADCAST_TO, "upsample2d NCHW (3, 1) of a view", upsample2d, upsample2d,
         IN("F 1,2,3,2:T n"), P(3, 1, EG_DATA_FORMAT_NCHW)),
    CASE(PAD, "zero_padding2d", zero_padding2d, zero_padding2d, IN("F 2,2,3,2 n"), P(1, 0, 2, 1)),
    CASE(PAD, "zero_padding2d NCHW", zero_padding2d, zero_padding2d, IN("F 1,2,2,3 n"),
         P(0, 2, 1, 1, EG_DATA_FORMAT_NCHW)),

    /* ---- normalization ---- */
    CASE(RELU_BACKWARD, "relu_backward", relu_backward, relu_backward, IN("F 3,4 a", "F 3,4 n")),
    CASE(RELU_BACKWARD, "relu_backward of views, broadcast g", relu_backward, relu_backward,
         IN("F 4,3:T a", "F 4 n")),
    CASE(RELU_BACKWARD, "relu_backward with zeros", relu_backward, relu_backward,
         IN("F 3,3 z", "F 3,3 n"), .flags = OC_FORWARD_ONLY),
    CASE(DENSE, "dense (3,4) x (4,5) + (5)", dense, dense, IN("F 3,4 n", "F 4,5 n", "F 5 n")),
    CASE(DENSE, "dense relu", dense, dense, IN("F 3,4 n", "F 4,5 n", "F 5 n"),
         P(EG_ACTIVATION_RELU)),
    CASE(DENSE, "dense sigmoid of views", dense, dense, IN("F 4,3:T n", "F 5,4:T n", "F 10:S n"),
         P(EG_ACTIVATION_SIGMOID)),
    CASE(DENSE, "dense tanh, 17 units (a partial tile)", dense, dense,
         IN("F 7,3 n", "F 3,17 n", "F 17 n"), P(EG_ACTIVATION_TANH)),
    CASE(MUL_ADD, "mul_add (3,4) * (4) + (4)", mul_add, mul_add, IN("F 3,4 n", "F 4 n", "F 4 n")),
    CASE(MUL_ADD, "mul_add same shapes", mul_add, mul_add, IN("F 2,3 n", "F 2,3 n", "F 2,3 n")),
    CASE(MUL_ADD, "mul_add of views with a 0-d scale", mul_add, mul_add,
         IN("F 4,3:T n", "F - n", "F 6,4:S n")),
    CASE(MUL_ADD, "mul_add broadcasting x (3,1) with (1,4)", mul_add, mul_add,
         IN("F 3,1 n", "F 1,4 n", "F 3,4:B n")),
    CASE(MOMENTS, "moments over axis 0 (columns)", moments, moments, IN("F 4,3 n"), P(1, 0)),
    CASE(MOMENTS, "moments over axes (0,1,2) keepdims", moments, moments, IN("F 2,3,3,4 n"),
         P(3, 0, 1, 2, 0, 1)),
    CASE(MOMENTS, "moments over the last axis (rows)", moments, moments, IN("F 3,5 n"), P(1, -1)),
    CASE(MOMENTS, "moments over axes (0,2,3) (NCHW, permuted)", moments, moments, IN("F 2,3,2,2 n"),
         P(3, 0, 2, 3, 0, 1)),
    CASE(MOMENTS, "moments over all axes of a transposed view", moments, moments, IN("F 3,4:T n")),
    CASE(MOMENTS, "moments over axis 0 of 300 rows (chunks)", moments, moments, IN("F 300,2 n"),
         P(1, 0)),
    CASE(MOMENTS, "moments over axis 1 of a broadcast view", moments, moments, IN("F 3,4:B n"),
         P(1, 1)),
    CASE(BATCH_NORM, "batch_norm_training NHWC over (0,1,2)", batch_norm_training,
         batch_norm_training, IN("F 2,3,3,4 n", "F 4 n", "F 4 n"), P(3, 0, 1, 2), D(1e-3),
         .flags = OC_MIXED_DTYPES),
    CASE(BATCH_NORM, "batch_norm_training NCHW over (0,2,3)", batch_norm_training,
         batch_norm_training, IN("F 3,2,2,3 n", "F 2,1,1 n", "F 2,1,1 n"), P(3, 0, 2, 3), D(1e-3),
         .flags = OC_MIXED_DTYPES),
    CASE(BATCH_NORM, "batch_norm_training (B, D) of a transposed view", batch_norm_training,
         batch_norm_training, IN("F 5,6:T n", "F 5 n", "F 1,5 n"), P(1, 0), D(1e-2),
         .flags = OC_MIXED_DTYPES),
    CASE(BATCH_NORM, "batch_norm_training over the last axis, broadcast scale", batch_norm_training,
         batch_norm_training, IN("F 3,5 n", "F 3,1 n", "F - n"), P(1, -1), D(1e-3),
         .flags = OC_MIXED_DTYPES),
    CASE(BATCH_NORM, "batch_norm_training relu NHWC over (0,1,2)", batch_norm_relu, batch_norm_relu,
         IN("F 2,3,3,4 n", "F 4 n", "F 4 n"), P(3, 0, 1, 2), D(1e-3), .flags = OC_MIXED_DTYPES),
    CASE(BATCH_NORM, "batch_norm_training relu NCHW over (0,2,3)", batch_norm_relu, batch_norm_relu,
         IN("F 3,2,2,3 n", "F 2,1,1 n", "F 2,1,1 n"), P(3, 0, 2, 3), D(1e-3),
         .flags = OC_MIXED_DTYPES),
    CASE(BATCH_NORM, "batch_norm_training relu (B, D) of a transposed view", batch_norm_relu,
         batch_norm_relu, IN("F 5,6:T n", "F 5 n", "F 1,5 n"), P(1, 0), D(1e-2),
         .flags = OC_MIXED_DTYPES),
/* ---- recurrent cells (op_cases_recurrent.c) ---- */
#define CELL(OP, NAME, FAMILY, REF, ...)                                                           \
    {                                                                                              \
        .op = EG__OP_##OP, .name = NAME, .apply = oc_apply_##FAMILY, .reference = oc_ref_##REF,    \
        __VA_ARGS__                                                                                \
    }
    CELL(LSTM_CELL, "lstm_cell (3, 4 x 2)", lstm_cell, lstm_cell, IN("F 3,8 n", "F 3,2 n")),
    CELL(LSTM_CELL, "lstm_cell of transposed views, large pre-activations", lstm_cell, lstm_cell,
         IN("F 12,2:T w", "F 3,2:T n"), .flags = OC_FORWARD_ONLY),
    CELL(LSTM_CELL, "lstm_cell of a step slice and a broadcast state", lstm_cell, lstm_cell,
         IN("F 4,20:S n", "F 5:B n")),
    CELL(LSTM_CELL_BACKWARD, "lstm_cell_backward", cell_backward, lstm_cell_backward,
         IN("F 3,8 n", "F 3,2 n", "F 2,3,2 n")),
    CELL(LSTM_CELL_BACKWARD, "lstm_cell_backward of a transposed gradient", cell_backward,
         lstm_cell_backward, IN("F 2,12 n", "F 2,3 n", "F 2,3,2:T n")),
    CELL(GRU_CELL, "gru_cell (3, 3 x 2)", gru_cell, gru_cell, IN("F 3,6 n", "F 3,6 n", "F 3,2 n")),
    CELL(GRU_CELL, "gru_cell of views, large pre-activations", gru_cell, gru_cell,
         IN("F 9,2:T w", "F 4,9:S n", "F 3,2:T n"), .flags = OC_FORWARD_ONLY),
    CELL(GRU_CELL, "gru_cell of a broadcast state", gru_cell, gru_cell,
         IN("F 2,12 n", "F 2,12 n", "F 4:B n")),
    CELL(GRU_CELL_BACKWARD, "gru_cell_backward", cell_backward, gru_cell_backward,
         IN("F 3,6 n", "F 3,6 n", "F 3,2 n", "F 3,2 n")),
    CELL(GRU_CELL_BACKWARD, "gru_cell_backward of views", cell_backward, gru_cell_backward,
         IN("F 6,2:T n", "F 4,6:S n", "F 2,2 n", "F 2:B n")),
    /* ---- attention (op_cases_attention.c); p: causal, key mask; d: scale ---- */
    CELL(ATTENTION, "attention (1, 2 heads, 3 queries, 5 keys)", attention, attention,
         IN("F 1,2,3,4 n", "F 1,2,5,4 n", "F 1,2,5,3 n")),
    CELL(ATTENTION, "attention causal, scale 0.7", attention, attention,
         IN("F 2,1,4,3 n", "F 2,1,4,3 n", "F 2,1,4,2 n"), P(1), D(0.7)),
    CELL(ATTENTION, "attention with a key mask, of views", attention, attention,
         IN("F 2,1,4,3:S n", "F 1,1,3,5:T n", "F 1,1,5,2 n", "b 1,5 b"), P(0, 1)),
    CELL(ATTENTION, "attention causal with a key mask over 70 keys (two blocks)", attention,
         attention, IN("F 1,1,70,2 n", "F 1,1,70,2 n", "F 1,1,70,2 n", "b 1,70 b"), P(1, 1)),
    CELL(ATTENTION, "attention of large scores", attention, attention,
         IN("F 1,1,66,2 w", "F 1,1,66,2 n", "F 1,1,66,3 n"), .flags = OC_FORWARD_ONLY,
         .tol = 1e-4), /* scores up to ~100: f32 rounds them by ~1e-5 */
    CELL(ATTENTION_BACKWARD, "attention_backward", attention_backward, attention_backward,
         IN("F 1,2,3,4 n", "F 1,2,5,4 n", "F 1,2,5,3 n", "F 24 n", "F 1,2,3,3 n"), D(0.5)),
    CELL(ATTENTION_BACKWARD, "attention_backward causal with a mask over 70 keys",
         attention_backward, attention_backward,
         IN("F 1,1,70,2 n", "F 1,1,70,2 n", "F 1,1,70,2 n", "F 210 n", "F 1,1,70,2 n", "b 1,70 b"),
         P(1, 1), D(0.7)),
    /* ---- sampled products' draws (op_cases_quantized.c): p = seed, draws ---- */
    {.op = EG__OP_SAMPLE_INDICES,
     .name = "sample_indices of weights with zeros",
     .apply = oc_apply_sample_indices,
     .check = oc_check_sample_indices,
     IN("F 9 z"),
     P(11, 400),
     .flags = OC_COMPOSITE},
    {.op = EG__OP_SAMPLE_INDICES,
     .name = "sample_indices of a step slice",
     .apply = oc_apply_sample_indices,
     .check = oc_check_sample_indices,
     IN("F 12:S p"),
     P(5, 300),
     .flags = OC_COMPOSITE},
    /* ---- int8 products (op_cases_quantized.c) ---- */
    CELL(QUANTIZE_INT8, "quantize_int8 7 bits", quantize_int8, quantize_int8, IN("f32 4,5 n"),
         P(7)),
    CELL(QUANTIZE_INT8, "quantize_int8 8 bits of an HWIO filter", quantize_int8, quantize_int8,
         IN("f32 3,3,2,4 n"), P(8)),
    CELL(QUANTIZE_INT8, "quantize_int8 4 bits of a transposed view", quantize_int8, quantize_int8,
         IN("f32 5,4:T n"), P(4)),
    CELL(DENSE_INT8, "dense_int8 (3,4) x (4,5)", dense_int8, dense_int8,
         IN("f32 3,4 n", "f32 4,5 n"), P(EG_ACTIVATION_NONE, 7, 0, 0), .flags = OC_COMPOSITE),
    CELL(DENSE_INT8, "dense_int8 relu with a bias", dense_int8, dense_int8,
         IN("f32 6,9 n", "f32 9,5 n", "f32 5 n"), P(EG_ACTIVATION_RELU, 7, 1, 0),
         .flags = OC_COMPOSITE),
    CELL(DENSE_INT8, "dense_int8 with a calibrated range that clips", dense_int8, dense_int8,
         IN("f32 5,6 n", "f32 6,3 n"), P(EG_ACTIVATION_NONE, 7, 0, 1), D(-1, 1.5),
         .flags = OC_COMPOSITE),
    CELL(DENSE_INT8, "dense_int8 tanh, 8-bit weights, 17 units, 37 inputs (tails)", dense_int8,
         dense_int8, IN("f32 7,37 n", "f32 37,17 n", "f32 17 n"), P(EG_ACTIVATION_TANH, 8, 1, 0),
         .flags = OC_COMPOSITE),
    CELL(DENSE_INT8, "dense_int8 sigmoid of views", dense_int8, dense_int8,
         IN("f32 4,3:T n", "f32 5,4:T n", "f32 10:S n"), P(EG_ACTIVATION_SIGMOID, 7, 1, 0),
         .flags = OC_COMPOSITE),
    CELL(CONV2D_INT8, "conv2d_int8 3x3 padded", conv2d_int8, conv2d_int8,
         IN("f32 2,5,5,3 n", "f32 3,3,3,4 n"), P(1, 1, 1, 1, 1), .flags = OC_COMPOSITE),
    CELL(CONV2D_INT8, "conv2d_int8 stride 2 valid", conv2d_int8, conv2d_int8,
         IN("f32 1,7,6,2 n", "f32 3,2,2,3 n"), P(2, 0, 0, 0, 0), .flags = OC_COMPOSITE),
    CELL(CONV2D_INT8, "conv2d_int8 20 filters, uneven padding", conv2d_int8, conv2d_int8,
         IN("f32 1,4,4,5 n", "f32 2,2,5,20 n"), P(1, 0, 1, 0, 1), .flags = OC_COMPOSITE),
#undef CELL
    CASE(BATCH_NORM_BACKWARD_SUMS, "batch_norm_backward_sums NHWC over (0,1,2)",
         batch_norm_backward, batch_norm_backward_sums,
         IN("F 2,3,3,4 n", "F 2,3,3,4 n", "Fs 1,1,1,4 n"), P(3, 0, 1, 2)),
    CASE(BATCH_NORM_BACKWARD_SUMS, "batch_norm_backward_sums NCHW over (0,2,3) of views",
         batch_norm_backward, batch_norm_backward_sums,
         IN("F 3,2,3,2:T n", "F 3,2,2,3 n", "Fs 1,2,1,1 n"), P(3, 0, 2, 3)),
    CASE(BATCH_NORM_BACKWARD_SUMS, "batch_norm_backward_sums over 300 rows (chunks)",
         batch_norm_backward, batch_norm_backward_sums, IN("F 300,3 n", "F 300,3 n", "Fs 1,3 n"),
         P(1, 0)),
    CASE(BATCH_NORM_BACKWARD_SUMS, "batch_norm_backward_sums over the last axis",
         batch_norm_backward, batch_norm_backward_sums, IN("F 3,5 n", "F 3,5 n", "Fs 3,1 n"),
         P(1, -1)),
    CASE(BATCH_NORM_BACKWARD_INPUT, "batch_norm_backward_input NHWC over (0,1,2)",
         batch_norm_backward, batch_norm_backward_input,
         IN("F 2,3,3,4 n", "F 2,3,3,4 n", "Fs 1,1,1,4 n", "Fs 1,1,1,4 p", "Fs 1,1,1,4 n",
            "Fs 2,1,1,1,4 n"),
         P(3, 0, 1, 2), D(1e-3)),
    CASE(BATCH_NORM_BACKWARD_INPUT, "batch_norm_backward_input NCHW over (0,2,3) of views",
         batch_norm_backward, batch_norm_backward_input,
         IN("F 3,2,3,2:T n", "F 3,2,2,3 n", "Fs 1,2,1,1 n", "Fs 1,2,1,1 p", "Fs 1,2,1,1 n",
            "Fs 2,1,2,1,1 n"),
         P(3, 0, 2, 3), D(1e-3)),
    CASE(BATCH_NORM_BACKWARD_INPUT, "batch_norm_backward_input over 300 rows (chunks)",
         batch_norm_backward, batch_norm_backward_input,
         IN("F 300,3 n", "F 300,3 n", "Fs 1,3 n", "Fs 1,3 p", "Fs 1,3 n", "Fs 2,1,3 n"), P(1, 0),
         D(1e-2)),
    CASE(BATCH_NORM_BACKWARD_SUMS, "batch_norm_backward_sums relu NHWC over (0,1,2)",
         batch_norm_backward, batch_norm_backward_sums,
         IN("F 2,3,3,4 n", "F 2,3,3,4 n", "Fs 1,1,1,4 n", "Fs 1,1,1,4 p", "Fs 1,1,1,4 n",
            "Fs 1,1,1,4 n"),
         P(3, 0, 1, 2, [8] = EG_ACTIVATION_RELU), D(1e-3)),
    CASE(BATCH_NORM_BACKWARD_SUMS, "batch_norm_backward_sums relu NCHW of views",
         batch_norm_backward, batch_norm_backward_sums,
         IN("F 3,2,3,2:T n", "F 3,2,2,3 n", "Fs 1,2,1,1 n", "Fs 1,2,1,1 p", "Fs 1,2,1,1 n",
            "Fs 1,2,1,1 n"),
         P(3, 0, 2, 3, [8] = EG_ACTIVATION_RELU), D(1e-3)),
    CASE(BATCH_NORM_BACKWARD_SUMS, "batch_norm_backward_sums relu over 300 rows (chunks)",
         batch_norm_backward, batch_norm_backward_sums,
         IN("F 300,3 n", "F 300,3 n", "Fs 1,3 n", "Fs 1,3 p", "Fs 1,3 n", "Fs 1,3 n"),
         P(1, 0, [8] = EG_ACTIVATION_RELU), D(1e-2)),
    CASE(BATCH_NORM_BACKWARD_INPUT, "batch_norm_backward_input relu NHWC over (0,1,2)",
         batch_norm_backward, batch_norm_backward_input,
         IN("F 2,3,3,4 n", "F 2,3,3,4 n", "Fs 1,1,1,4 n", "Fs 1,1,1,4 p", "Fs 1,1,1,4 n",
            "Fs 2,1,1,1,4 n", "Fs 1,1,1,4 n"),
         P(3, 0, 1, 2, [8] = EG_ACTIVATION_RELU), D(1e-3)),
    CASE(BATCH_NORM_BACKWARD_INPUT, "batch_norm_backward_input relu NCHW of views",
         batch_norm_backward, batch_norm_backward_input,
         IN("F 3,2,3,2:T n", "F 3,2,2,3 n", "Fs 1,2,1,1 n", "Fs 1,2,1,1 p", "Fs 1,2,1,1 n",
            "Fs 2,1,2,1,1 n", "Fs 1,2,1,1 n"),
         P(3, 0, 2, 3, [8] = EG_ACTIVATION_RELU), D(1e-3)),
    CASE(BATCH_NORM_BACKWARD_INPUT, "batch_norm_backward_input relu over 300 rows (chunks)",
         batch_norm_backward, batch_norm_backward_input,
         IN("F 300,3 n", "F 300,3 n", "Fs 1,3 n", "Fs 1,3 p", "Fs 1,3 n", "Fs 2,1,3 n", "Fs 1,3 n"),
         P(1, 0, [8] = EG_ACTIVATION_RELU), D(1e-2)),
    CASE(MUL_ADD, "batch_normalization with batch moments (NHWC)", batch_norm, batch_norm,
         IN("F 2,3,3,4 n", "F 4 n", "F 4 n"), P(1), D(1e-3), .flags = OC_COMPOSITE),
    CASE(MUL_ADD, "batch_normalization with batch moments (NCHW)", batch_norm, batch_norm,
         IN("F 3,2,2,2 n", "F 2,1,1 n", "F 2,1,1 n"), P(1, EG_DATA_FORMAT_NCHW), D(1e-3),
         .flags = OC_COMPOSITE),
    CASE(MUL_ADD, "batch_normalization with given moments", batch_norm, batch_norm,
         IN("F 2,3,4 n", "F 4 n", "F 4 p", "F 4 n", "F 4 n"), D(1e-3), .flags = OC_COMPOSITE),
    CASE(MUL_ADD, "layer_normalization", layer_norm, layer_norm, IN("F 3,5 n", "F 5 n", "F 5 n"),
         D(1e-5), .flags = OC_COMPOSITE),
#undef NCHW

    /* ---- empty tensors ---- */
    CASE(EXP, "exp of an empty tensor", unary, unary, IN("F 0,3 n")),
    CASE(ADD, "add with an empty broadcast", binary, binary, IN("F 0,1 n", "F 3 n")),
    CASE(SUM, "sum over an empty axis", reduce, reduce, IN("F 3,0 n"), P(1, 1)),
    CASE(SUM, "sum of an empty tensor", reduce, reduce, IN("F 0,4 n")),
    CASE(MEAN, "mean over an empty axis is NaN", reduce, reduce, IN("F 0,2 n"), P(1, 0)),
    CASE(LOGSUMEXP, "logsumexp over an empty axis is -inf", reduce, reduce, IN("F 2,0 n"), P(1, 1)),
    CASE(MATMUL, "matmul with k = 0", matmul, matmul, IN("F 3,0 n", "F 0,2 n")),
    CASE(MATMUL, "matmul with m = 0", matmul, matmul, IN("F 0,3 n", "F 3,2 n")),
    CASE(CONCAT, "concat with an empty piece", concat, concat, IN("F 2,0 n", "F 2,3 n"), P(1)),
    CASE(GATHER, "gather with no indices", gather, gather, IN("F 4,3 n", "i64 0 i4"), P(0)),
    CASE(RESHAPE, "reshape an empty tensor", reshape, reshape, IN("F 0,3 n"), P(2, 3, 0)),
    CASE(PAD, "pad an empty tensor", pad, pad, IN("F 0,2 n"), P(1, 1, 0, 0), D(2)),

    {.op = EG__OP_DROPOUT,
     .name = "dropout",
     .apply = apply_dropout,
     .check = oc_check_dropout,
     IN("F 4,5 a"),
     P(3),
     D(0.5)},
    {.op = EG__OP_DROPOUT,
     .name = "dropout of a transposed view",
     .apply = apply_dropout,
     .check = oc_check_dropout,
     IN("F 5,4:T a"),
     P(11),
     D(0.25)},
    {.op = EG__OP_DROPOUT,
     .name = "dropout rate 0.3 on 1000 elements",
     .apply = apply_dropout,
     .check = oc_check_dropout,
     IN("F 25,40 a"),
     P(7),
     D(0.3),
     .flags = OC_FORWARD_ONLY},
};

const int oc_n_cases = (int)(sizeof oc_cases / sizeof oc_cases[0]);
