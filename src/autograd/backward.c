/* Backward rules, one per differentiable op, written with Eagle ops so they run on every
 * backend and are themselves differentiable (higher-order gradients).
 *
 * They run inside eg_tape_gradient, where scopes are suspended: every tensor made here is a
 * plain reference, released with eg_release once used. */
#include <math.h>
#include <string.h>

#include "eagle/approx.h"
#include "autograd/internal.h"
#include "base/error.h"
#include "api/internal.h"

#define IN(i)    (call->inputs[i])
#define OUT      (call->output)
#define GRAD     (call->grad_output)
#define NEEDS(i) (call->needs_grad[i])
#define SET_GRAD(i, expr)                                                                          \
    do {                                                                                           \
        if (NEEDS(i)) call->grad_inputs[i] = (expr);                                               \
    } while (0)

/* Temporaries of one rule, released together when it ends. */
typedef struct temps {
    eg_tensor *items[24];
    int n;
} temps;

static eg_tensor *tmp(temps *t, eg_tensor *x) {
    if (x && t->n < 24) t->items[t->n++] = x;
    return x;
}

static eg_status finish(temps *t) {
    for (int i = 0; i < t->n; i++) eg_release(t->items[i]);
    return eg_last_status();
}

static eg_tensor *scalar_like(temps *t, const eg_tensor *x, double value) {
    return tmp(t, eg__full_on(x->device, x->dtype, 0, NULL, value));
}

static eg_tensor *reduce_like(const eg_tensor *g, const eg_tensor *x) {
    return eg__sum_to_shape(g, x->n_dims, x->shape);
}

eg_status eg__backward_none(const eg__backward_call *call) {
    (void)call;
    return EG_OK;
}

eg_status eg__backward_neg(const eg__backward_call *call) {
    SET_GRAD(0, eg_neg(GRAD));
    return eg_last_status();
}

eg_status eg__backward_abs(const eg__backward_call *call) {
    temps t = {0};
    SET_GRAD(0, eg_mul(GRAD, tmp(&t, eg_sign(IN(0)))));
    return finish(&t);
}

eg_status eg__backward_exp(const eg__backward_call *call) {
    SET_GRAD(0, eg_mul(GRAD, OUT));
    return eg_last_status();
}

eg_status eg__backward_log(const eg__backward_call *call) {
    SET_GRAD(0, eg_div(GRAD, IN(0)));
    return eg_last_status();
}

eg_status eg__backward_sqrt(const eg__backward_call *call) {
    temps t = {0};
    SET_GRAD(0, eg_div(tmp(&t, eg_mul_scalar(GRAD, 0.5)), OUT));
    return finish(&t);
}

eg_status eg__backward_rsqrt(const eg__backward_call *call) {
    temps t = {0};
    eg_tensor *cube = tmp(&t, eg_mul(OUT, tmp(&t, eg_square(OUT))));
    SET_GRAD(0, eg_mul(tmp(&t, eg_mul_scalar(GRAD, -0.5)), cube));
    return finish(&t);
}

eg_status eg__backward_sin(const eg__backward_call *call) {
    temps t = {0};
    SET_GRAD(0, eg_mul(GRAD, tmp(&t, eg_cos(IN(0)))));
    return finish(&t);
}

eg_status eg__backward_cos(const eg__backward_call *call) {
    temps t = {0};
    SET_GRAD(0, eg_mul(tmp(&t, eg_neg(GRAD)), tmp(&t, eg_sin(IN(0)))));
    return finish(&t);
}

eg_status eg__backward_tanh(const eg__backward_call *call) {
    temps t = {0}; /* g * (1 - y^2) */
    eg_tensor *one_minus = tmp(&t, eg_sub(scalar_like(&t, OUT, 1.0), tmp(&t, eg_square(OUT))));
    SET_GRAD(0, eg_mul(GRAD, one_minus));
    return finish(&t);
}

eg_status eg__backward_sigmoid(const eg__backward_call *call) {
    temps t = {0}; /* g * y * (1 - y) */
    eg_tensor *one_minus = tmp(&t, eg_sub(scalar_like(&t, OUT, 1.0), OUT));
    SET_GRAD(0, eg_mul(tmp(&t, eg_mul(GRAD, OUT)), one_minus));
    return finish(&t);
}

eg_status eg__backward_relu(const eg__backward_call *call) {
    const eg_tensor *in[2] = {IN(0), GRAD};
    static const eg__attrs no_attrs;
    SET_GRAD(0, eg__execute(EG__OP_RELU_BACKWARD, 2, in, &no_attrs));
    return eg_last_status();
}

/* g masked by x > 0: linear in g (the same mask again), piecewise constant in x (nothing). */
eg_status eg__backward_relu_backward(const eg__backward_call *call) {
    temps t = {0};
    const eg_tensor *in[2] = {IN(0), GRAD};
    static const eg__attrs no_attrs;
    SET_GRAD(1, reduce_like(tmp(&t, eg__execute(EG__OP_RELU_BACKWARD, 2, in, &no_attrs)), IN(1)));
    return finish(&t);
}

eg_status eg__backward_gelu(const eg__backward_call *call) {
    temps t = {0}; /* g * (Phi(x) + x * phi(x)) */
    const eg_tensor *x = IN(0);
    eg_tensor *erf_term = tmp(&t, eg_erf(tmp(&t, eg_mul_scalar(x, M_SQRT1_2))));
    eg_tensor *cdf = tmp(&t, eg_mul_scalar(tmp(&t, eg_add_scalar(erf_term, 1.0)), 0.5));
    eg_tensor *pdf =
        tmp(&t, eg_mul_scalar(tmp(&t, eg_exp(tmp(&t, eg_mul_scalar(tmp(&t, eg_square(x)), -0.5)))),
                              0.5 * M_2_SQRTPI * M_SQRT1_2));
    eg_tensor *derivative = tmp(&t, eg_add(cdf, tmp(&t, eg_mul(x, pdf))));
    SET_GRAD(0, eg_mul(GRAD, derivative));
    return finish(&t);
}

eg_status eg__backward_softplus(const eg__backward_call *call) {
    temps t = {0};
    SET_GRAD(0, eg_mul(GRAD, tmp(&t, eg_sigmoid(IN(0)))));
    return finish(&t);
}

eg_status eg__backward_square(const eg__backward_call *call) {
    temps t = {0};
    SET_GRAD(0, eg_mul(GRAD, tmp(&t, eg_mul_scalar(IN(0), 2.0))));
    return finish(&t);
}

eg_status eg__backward_reciprocal(const eg__backward_call *call) {
    temps t = {0};
    SET_GRAD(0, eg_mul(tmp(&t, eg_neg(GRAD)), tmp(&t, eg_square(OUT))));
    return finish(&t);
}

eg_status eg__backward_erf(const eg__backward_call *call) {
    temps t = {0}; /* g * 2/sqrt(pi) * exp(-x^2) */
    eg_tensor *e = tmp(&t, eg_exp(tmp(&t, eg_neg(tmp(&t, eg_square(IN(0)))))));
    SET_GRAD(0, eg_mul(GRAD, tmp(&t, eg_mul_scalar(e, M_2_SQRTPI))));
    return finish(&t);
}

eg_status eg__backward_add(const eg__backward_call *call) {
    SET_GRAD(0, reduce_like(GRAD, IN(0)));
    SET_GRAD(1, reduce_like(GRAD, IN(1)));
    return eg_last_status();
}

eg_status eg__backward_sub(const eg__backward_call *call) {
    temps t = {0};
    SET_GRAD(0, reduce_like(GRAD, IN(0)));
    SET_GRAD(1, reduce_like(tmp(&t, eg_neg(GRAD)), IN(1)));
    return finish(&t);
}

eg_status eg__backward_mul(const eg__backward_call *call) {
    temps t = {0};
    SET_GRAD(0, reduce_like(tmp(&t, eg_mul(GRAD, IN(1))), IN(0)));
    SET_GRAD(1, reduce_like(tmp(&t, eg_mul(GRAD, IN(0))), IN(1)));
    return finish(&t);
}

eg_status eg__backward_div(const eg__backward_call *call) {
    temps t = {0}; /* d/da = g / b, d/db = -g * y / b */
    SET_GRAD(0, reduce_like(tmp(&t, eg_div(GRAD, IN(1))), IN(0)));
    if (NEEDS(1)) {
        eg_tensor *gy = tmp(&t, eg_mul(GRAD, OUT));
        SET_GRAD(1, reduce_like(tmp(&t, eg_neg(tmp(&t, eg_div(gy, IN(1))))), IN(1)));
    }
    return finish(&t);
}

eg_status eg__backward_pow(const eg__backward_call *call) {
    temps t = {0};
    const eg_tensor *a = IN(0), *b = IN(1);
    if (NEEDS(0)) { /* g * b * a^(b-1) */
        eg_tensor *power = tmp(&t, eg_pow(a, tmp(&t, eg_add_scalar(b, -1.0))));
        SET_GRAD(0, reduce_like(tmp(&t, eg_mul(tmp(&t, eg_mul(GRAD, b)), power)), a));
    }
    if (NEEDS(1)) { /* g * y * log(a), taken as 0 where a <= 0 */
        eg_tensor *zero = scalar_like(&t, a, 0.0);
        eg_tensor *positive = tmp(&t, eg_greater(a, zero));
        eg_tensor *safe_a =
            tmp(&t, eg_where(positive, a, tmp(&t, eg__full_on(a->device, a->dtype, 0, NULL, 1.0))));
        eg_tensor *term = tmp(&t, eg_mul(tmp(&t, eg_mul(GRAD, OUT)), tmp(&t, eg_log(safe_a))));
        SET_GRAD(1, reduce_like(tmp(&t, eg_where(positive, term, zero)), b));
    }
    return finish(&t);
}

/* maximum gives ties to a (a >= b), minimum too (a <= b), like TensorFlow. */
static eg_status select_backward(const eg__backward_call *call, eg_tensor *a_wins) {
    temps t = {0};
    tmp(&t, a_wins);
    eg_tensor *zero = scalar_like(&t, GRAD, 0.0);
    SET_GRAD(0, reduce_like(tmp(&t, eg_where(a_wins, GRAD, zero)), IN(0)));
    SET_GRAD(1, reduce_like(tmp(&t, eg_where(a_wins, zero, GRAD)), IN(1)));
    return finish(&t);
}

eg_status eg__backward_maximum(const eg__backward_call *call) {
    return select_backward(call, eg_greater_equal(IN(0), IN(1)));
}

eg_status eg__backward_minimum(const eg__backward_call *call) {
    return select_backward(call, eg_less_equal(IN(0), IN(1)));
}

eg_status eg__backward_where(const eg__backward_call *call) {
    temps t = {0};
    eg_tensor *zero = scalar_like(&t, GRAD, 0.0);
    SET_GRAD(1, reduce_like(tmp(&t, eg_where(IN(0), GRAD, zero)), IN(1)));
    SET_GRAD(2, reduce_like(tmp(&t, eg_where(IN(0), zero, GRAD)), IN(2)));
    return finish(&t);
}

eg_status eg__backward_cast(const eg__backward_call *call) {
    if (eg_dtype_is_float(IN(0)->dtype) && eg_dtype_is_float(OUT->dtype))
        SET_GRAD(0, eg_cast(GRAD, IN(0)->dtype));
    return eg_last_status();
}

eg_status eg__backward_clip(const eg__backward_call *call) {
    temps t = {0};
    const eg_tensor *x = IN(0);
    eg_tensor *zero = scalar_like(&t, x, 0.0);
    eg_tensor *below = tmp(&t, eg_less(x, scalar_like(&t, x, call->attrs->scalars[0])));
    eg_tensor *above = tmp(&t, eg_greater(x, scalar_like(&t, x, call->attrs->scalars[1])));
    SET_GRAD(0, eg_where(below, zero, tmp(&t, eg_where(above, zero, GRAD))));
    return finish(&t);
}

/* GRAD of a reduction, reshaped to keepdims form and broadcast to the input (materialised, so
 * gradients handed to users are ordinary contiguous tensors). */
static eg_tensor *expand_reduced(temps *t, const eg_tensor *g, const eg__attrs *attrs,
                                 const eg_tensor *x) {
    int64_t kept[EG_MAX_DIMS];
    memcpy(kept, x->shape, sizeof kept);
    for (int i = 0; i < attrs->n_axes; i++) kept[attrs->axes[i]] = 1;
    eg_tensor *reshaped = tmp(t, eg_reshape(g, x->n_dims, kept));
    return tmp(t, eg_contiguous(tmp(t, eg_broadcast_to(reshaped, x->n_dims, x->shape))));
}

static double reduced_count(const eg__attrs *attrs, const eg_tensor *x) {
    double n = 1;
    for (int i = 0; i < attrs->n_axes; i++) n *= (double)x->shape[attrs->axes[i]];
    return n;
}

eg_status eg__backward_sum(const eg__backward_call *call) {
    temps t = {0};
    eg_tensor *g = expand_reduced(&t, GRAD, call->attrs, IN(0));
    if (g) eg__ref(g);
    SET_GRAD(0, g);
    return finish(&t);
}

eg_status eg__backward_mean(const eg__backward_call *call) {
    temps t = {0};
    /* the broadcast view straight into the product (contiguous out): the same values without
     * expand_reduced's copy */
    const eg_tensor *x = IN(0);
    int64_t kept[EG_MAX_DIMS];
    memcpy(kept, x->shape, sizeof kept);
    for (int i = 0; i < call->attrs->n_axes; i++) kept[call->attrs->axes[i]] = 1;
    eg_tensor *reshaped = tmp(&t, eg_reshape(GRAD, x->n_dims, kept));
    eg_tensor *g = tmp(&t, eg_broadcast_to(reshaped, x->n_dims, x->shape));
    SET_GRAD(0, eg_mul_scalar(g, 1.0 / reduced_count(call->attrs, IN(0))));
    return finish(&t);
}

/* The gradient goes to the extreme elements, shared equally among ties. */
eg_status eg__backward_max_min(const eg__backward_call *call) {
    temps t = {0};
    const eg_tensor *x = IN(0);
    eg_tensor *y = expand_reduced(&t, OUT, call->attrs, x);
    eg_tensor *mask = tmp(&t, eg_cast(tmp(&t, eg_equal(x, y)), x->dtype));
    eg_tensor *count = tmp(&t, eg_sum(mask, call->attrs->n_axes, call->attrs->axes, true));
    eg_tensor *g = expand_reduced(&t, GRAD, call->attrs, x);
    SET_GRAD(0, eg_div(tmp(&t, eg_mul(g, mask)), count));
    return finish(&t);
}

eg_status eg__backward_logsumexp(const eg__backward_call *call) {
    temps t = {0}; /* g * exp(x - y) */
    const eg_tensor *x = IN(0);
    eg_tensor *y = expand_reduced(&t, OUT, call->attrs, x);
    eg_tensor *g = expand_reduced(&t, GRAD, call->attrs, x);
    SET_GRAD(0, eg_mul(g, tmp(&t, eg_exp(tmp(&t, eg_sub(x, y))))));
    return finish(&t);
}

eg_status eg__backward_var(const eg__backward_call *call) {
    temps t = {0}; /* g * 2 (x - mean) / N */
    const eg_tensor *x = IN(0);
    eg_tensor *mean = tmp(&t, eg_mean(x, call->attrs->n_axes, call->attrs->axes, true));
    eg_tensor *centered = tmp(&t, eg_sub(x, mean));
    eg_tensor *g = expand_reduced(&t, GRAD, call->attrs, x);
    SET_GRAD(0, eg_mul(g, tmp(&t, eg_mul_scalar(centered, 2.0 / reduced_count(call->attrs, x)))));
    return finish(&t);
}

eg_status eg__backward_softmax(const eg__backward_call *call) {
    temps t = {0}; /* y * (g - sum(g * y)) */
    int axis = call->attrs->axis;
    eg_tensor *dot = tmp(&t, eg_sum(tmp(&t, eg_mul(GRAD, OUT)), 1, &axis, true));
    SET_GRAD(0, eg_mul(OUT, tmp(&t, eg_sub(GRAD, dot))));
    return finish(&t);
}

eg_status eg__backward_log_softmax(const eg__backward_call *call) {
    temps t = {0}; /* g - exp(y) * sum(g) */
    int axis = call->attrs->axis;
    eg_tensor *total = tmp(&t, eg_sum(GRAD, 1, &axis, true));
    SET_GRAD(0, eg_sub(GRAD, tmp(&t, eg_mul(tmp(&t, eg_exp(OUT)), total))));
    return finish(&t);
}

eg_status eg__backward_matmul(const eg__backward_call *call) {
    temps t = {0};
    const eg_tensor *a = IN(0), *b = IN(1);
    bool ta = call->attrs->transpose_a, tb = call->attrs->transpose_b;
    if (call->attrs->low_precision) { /* the same products in low precision, each gradient in
                                         its operand's dtype */
        eg_dtype compute = call->attrs->compute_dtype;
        if (NEEDS(0)) {
            eg_tensor *da = !ta ? eg_matmul_low_precision(GRAD, b, false, !tb, compute, a->dtype)
                                : eg_matmul_low_precision(b, GRAD, tb, true, compute, a->dtype);
            SET_GRAD(0, reduce_like(tmp(&t, da), a));
        }
        if (NEEDS(1)) {
            eg_tensor *db = !tb ? eg_matmul_low_precision(a, GRAD, !ta, false, compute, b->dtype)
                                : eg_matmul_low_precision(GRAD, a, true, ta, compute, b->dtype);
            SET_GRAD(1, reduce_like(tmp(&t, db), b));
        }
        return finish(&t);
    }
    if (NEEDS(0)) {
        eg_tensor *da = !ta ? eg_matmul_ex(GRAD, b, false, !tb) : eg_matmul_ex(b, GRAD, tb, true);
        SET_GRAD(0, reduce_like(tmp(&t, da), a));
    }
    if (NEEDS(1)) {
        eg_tensor *db = !tb ? eg_matmul_ex(a, GRAD, !ta, false) : eg_matmul_ex(GRAD, a, true, ta);
        SET_GRAD(1, reduce_like(tmp(&t, db), b));
    }
    return finish(&t);
}

eg_status eg__backward_reshape(const eg__backward_call *call) {
    SET_GRAD(0, eg_reshape(GRAD, IN(0)->n_dims, IN(0)->shape));
    return eg_last_status();
}

eg_status eg__backward_permute(const eg__backward_call *call) {
    int inverse[EG_MAX_DIMS];
    for (int i = 0; i < call->attrs->n_axes; i++) inverse[call->attrs->axes[i]] = i;
    SET_GRAD(0, eg_permute(GRAD, inverse));
    return eg_last_status();
}

eg_status eg__backward_slice(const eg__backward_call *call) {
    eg__attrs attrs = *call->attrs;
    attrs.n_dims = IN(0)->n_dims;
    memcpy(attrs.shape, IN(0)->shape, sizeof attrs.shape);
    const eg_tensor *in[1] = {GRAD};
    SET_GRAD(0, eg__execute(EG__OP_UNSLICE, 1, in, &attrs));
    return eg_last_status();
}

eg_status eg__backward_unslice(const eg__backward_call *call) {
    const eg__attrs *a = call->attrs;
    SET_GRAD(0, eg_slice(GRAD, a->axis, a->ints[0], a->ints[1], a->ints[2]));
    return eg_last_status();
}

eg_status eg__backward_broadcast_to(const eg__backward_call *call) {
    SET_GRAD(0, reduce_like(GRAD, IN(0)));
    return eg_last_status();
}

eg_status eg__backward_copy(const eg__backward_call *call) {
    if (NEEDS(0)) {
        eg__ref(GRAD);
        call->grad_inputs[0] = (eg_tensor *)GRAD;
    }
    return EG_OK;
}

/* The gradient goes back to the input's device. */
eg_status eg__backward_to_device(const eg__backward_call *call) {
    if (NEEDS(0)) call->grad_inputs[0] = eg_tensor_to(GRAD, call->inputs[0]->device);
    return EG_OK;
}

eg_status eg__backward_concat(const eg__backward_call *call) {
    int axis = call->attrs->axis;
    int64_t start = 0;
    for (int i = 0; i < call->n_inputs; i++) {
        int64_t size = IN(i)->shape[axis];
        SET_GRAD(i, eg_slice(GRAD, axis, start, start + size, 1));
        start += size;
    }
    return eg_last_status();
}

/* The rows a lookup read and their gradients, as a row-sparse tensor: indices flattened to i64,
 * the gradient's leading axes (the indices') to one. */
static eg_tensor *sparse_table_gradient(const eg__backward_call *call) {
    const eg_tensor *table = IN(0), *ids = IN(1);
    int64_t n = ids->n_elems, shape[EG_MAX_DIMS];
    shape[0] = n;
    for (int d = 1; d < table->n_dims; d++) shape[d] = table->shape[d];
    eg_tensor *flat = eg_reshape(ids, 1, &n);
    eg_tensor *rows = flat && ids->dtype != EG_DTYPE_I64 ? eg_cast(flat, EG_DTYPE_I64) : flat;
    if (rows != flat) eg_release(flat);
    eg_tensor *values = rows ? eg_reshape(GRAD, table->n_dims, shape) : NULL;
    eg_tensor *sparse =
        values ? eg__row_sparse_new(rows, values, table->n_dims, table->shape) : NULL;
    eg_release(rows);
    eg_release(values);
    return sparse;
}

eg_status eg__backward_gather(const eg__backward_call *call) {
    if (NEEDS(0) && call->attrs->axis == 0 && eg_variable_sparse_gradient(IN(0))) {
        if (eg__executor_current() == &eg__graph_executor)
            return eg__error(EG_ERR_UNSUPPORTED,
                             "gather: '%s' has a row-sparse gradient (sparse_gradient), which a "
                             "traced function cannot apply yet; turn it off to trace",
                             eg_variable_name(IN(0)));
        const eg_tensor *recorded[3] = {IN(0), IN(1), GRAD};
        if (!eg__tapes_would_record(3, recorded)) {
            SET_GRAD(0, sparse_table_gradient(call));
            return eg_last_status();
        }
    }
    eg__attrs attrs = {.axis = call->attrs->axis, .n_dims = IN(0)->n_dims};
    memcpy(attrs.shape, IN(0)->shape, sizeof attrs.shape);
    const eg_tensor *in[2] = {GRAD, IN(1)};
    SET_GRAD(0, eg__execute(EG__OP_SCATTER_ADD, 2, in, &attrs));
    return eg_last_status();
}

eg_status eg__backward_scatter_add(const eg__backward_call *call) {
    SET_GRAD(0, eg_gather(GRAD, IN(1), call->attrs->axis));
    return eg_last_status();
}

eg_status eg__backward_pad(const eg__backward_call *call) {
    const eg_tensor *x = IN(0);
    eg_tensor *g = (eg_tensor *)GRAD;
    eg__ref(g);
    for (int d = 0; d < x->n_dims && g; d++) {
        int64_t before = call->attrs->ints[2 * d];
        eg_tensor *sliced = eg_slice(g, d, before, before + x->shape[d], 1);
        eg_release(g);
        g = sliced;
    }
    SET_GRAD(0, g);
    if (!NEEDS(0)) eg_release(g);
    return eg_last_status();
}

eg_status eg__backward_sparse_softmax_cross_entropy(const eg__backward_call *call) {
    temps t = {0}; /* (softmax(logits) - one_hot(labels)) * g[:, None] */
    const eg_tensor *logits = IN(0);
    eg_tensor *p = tmp(&t, eg_softmax(logits, 1));
    eg_tensor *hot = tmp(&t, eg_one_hot(IN(1), logits->shape[1], logits->dtype));
    eg_tensor *g = tmp(&t, eg_unsqueeze(GRAD, 1));
    SET_GRAD(0, eg_mul(tmp(&t, eg_sub(p, hot)), g));
    return finish(&t);
}

eg_status eg__backward_dropout(const eg__backward_call *call) {
    const eg_tensor *in[1] = {GRAD}; /* same seed: the same mask */
    SET_GRAD(0, eg__execute(EG__OP_DROPOUT, 1, in, call->attrs));
    return eg_last_status();
}

eg_status eg__backward_mul_add(const eg__backward_call *call) {
    temps t = {0}; /* y = x * a + b */
    SET_GRAD(0, reduce_like(tmp(&t, eg_mul(GRAD, IN(1))), IN(0)));
    SET_GRAD(1, reduce_like(tmp(&t, eg_mul(GRAD, IN(0))), IN(1)));
    SET_GRAD(2, reduce_like(GRAD, IN(2)));
    return finish(&t);
}

/* out = (mean, var) over the axes, N elements each: dmean/dx = 1/N, dvar/dx = 2 (x - mean) / N,
 * so dx = x * s + t with s = 2 g_var / N and t = g_mean / N - mean * s: one mul_add pass. The
 * moments of bf16 and f16 x are f32, and mul_add takes one dtype: x is widened to f32 for it and
 * dx rounded back to x's dtype. */
eg_status eg__backward_moments(const eg__backward_call *call) {
    temps t = {0};
    const eg_tensor *x = IN(0);
    bool low = x->dtype != OUT->dtype;
    double n = reduced_count(call->attrs, x);
    int64_t kept[EG_MAX_DIMS];
    memcpy(kept, x->shape, sizeof kept);
    for (int i = 0; i < call->attrs->n_axes; i++) kept[call->attrs->axes[i]] = 1;
    eg_tensor *parts[2], *means[2];
    if (eg_split(GRAD, 0, 2, NULL, parts) != EG_OK) return finish(&t);
    tmp(&t, parts[0]);
    tmp(&t, parts[1]);
    if (eg_split(OUT, 0, 2, NULL, means) != EG_OK) return finish(&t);
    tmp(&t, means[0]);
    tmp(&t, means[1]);
    eg_tensor *g_mean = tmp(&t, eg_reshape(parts[0], x->n_dims, kept));
    eg_tensor *g_var = tmp(&t, eg_reshape(parts[1], x->n_dims, kept));
    eg_tensor *mean = tmp(&t, eg_reshape(means[0], x->n_dims, kept));
    eg_tensor *scale = tmp(&t, eg_mul_scalar(g_var, 2.0 / n));
    eg_tensor *shift =
        tmp(&t, eg_sub(tmp(&t, eg_mul_scalar(g_mean, 1.0 / n)), tmp(&t, eg_mul(mean, scale))));
    if (low && NEEDS(0)) {
        eg_tensor *wide = tmp(&t, eg_cast(x, OUT->dtype));
        call->grad_inputs[0] = eg_cast(tmp(&t, eg_mul_add(wide, scale, shift)), x->dtype);
        return finish(&t);
    }
    SET_GRAD(0, eg_mul_add(x, scale, shift));
    return finish(&t);
}

/* y = (x - m) r g + o with r = rsqrt(v + eps) and m, v x's batch moments over N elements:
 *   d offset = sum(G), d scale = r (sum(G x) - m sum(G)),
 *   dx = k (G - sum(G) / N - xhat d_scale / N) with k = g r, xhat = (x - m) r
 *      = G k + x c1 + c0,  c1 = -k r d_scale / N,  c0 = -k (sum(G) - m r d_scale) / N,
 * i.e. two mul_adds; mean and variance get nothing (their dependence on x is already in dx).
 * Every term is an Eagle op and m, v are recorded moments of x, so second order is exact.
 * With a fused relu (attrs->ints[0]) G is relu's gradient first: GRAD where y > 0 (y = relu(z) > 0
 * exactly where z > 0, so relu_backward(y, GRAD) is relu_backward(z, GRAD) bit for bit).
 * bf16 and f16 x (and y, GRAD) with f32 statistics and parameters: x and G are widened to f32
 * first, the rest runs in f32, and dx is rounded back to x's dtype (the parameters' gradients
 * stay f32). */
/* The same gradient from two fused kernels (batch_norm_backward_sums, then _input): two passes
 * over x-sized data instead of seven. They are not differentiable, so this runs only when no
 * tape records the backward computation. With relu they mask GRAD themselves where the
 * pre-activation, recomputed from x (and offset, one more input) with the forward's bits, is > 0:
 * relu_backward's pass disappears, and neither reads y. They take bf16 and f16 GRAD and x as they
 * are (with f32 for the rest): sums in f32, dx in x's dtype. */
static eg_status batch_norm_backward_fused(const eg__backward_call *call) {
    temps t = {0};
    const eg_tensor *x = IN(0), *m = IN(1), *v = IN(2), *g = IN(3);
    bool relu = call->attrs->ints[0] == EG_ACTIVATION_RELU;
    const eg_tensor *sums_in[6] = {GRAD, x, m, v, g, IN(4)};
    const eg_tensor *in[7] = {GRAD, x, m, v, g, NULL, IN(4)};
    eg_tensor *sums =
        tmp(&t, eg__execute(EG__OP_BATCH_NORM_BACKWARD_SUMS, relu ? 6 : 3, sums_in, call->attrs));
    if (!sums) return finish(&t);
    if (NEEDS(3) || NEEDS(4)) {
        eg_tensor *parts[2];
        if (eg_split(sums, 0, 2, NULL, parts) != EG_OK) return finish(&t);
        tmp(&t, parts[0]);
        tmp(&t, parts[1]);
        eg_tensor *sum_g = tmp(&t, eg_reshape(parts[0], m->n_dims, m->shape));
        eg_tensor *sum_gxm = tmp(&t, eg_reshape(parts[1], m->n_dims, m->shape));
        eg_tensor *r = tmp(&t, eg_rsqrt(tmp(&t, eg_add_scalar(v, call->attrs->scalars[0]))));
        SET_GRAD(3, eg_mul(r, sum_gxm));
        SET_GRAD(4, reduce_like(sum_g, IN(4)));
    }
    in[5] = sums;
    SET_GRAD(0, eg__execute(EG__OP_BATCH_NORM_BACKWARD_INPUT, 6 + relu, in, call->attrs));
    return finish(&t);
}

eg_status eg__backward_batch_norm(const eg__backward_call *call) {
    const eg_tensor *recorded[7] = {IN(0), IN(1), IN(2), IN(3), IN(4), GRAD, OUT};
    if (!eg__tapes_would_record(7, recorded)) return batch_norm_backward_fused(call);
    temps t = {0};
    const eg_tensor *x = IN(0), *m = IN(1), *v = IN(2), *g = IN(3), *G = GRAD;
    if (call->attrs->ints[0] == EG_ACTIVATION_RELU) {
        const eg_tensor *mask_in[2] = {OUT, GRAD};
        static const eg__attrs no_attrs;
        G = tmp(&t, eg__execute(EG__OP_RELU_BACKWARD, 2, mask_in, &no_attrs));
        if (!G) return finish(&t);
    }
    bool low = x->dtype != m->dtype;
    if (low) {
        x = tmp(&t, eg_cast(x, m->dtype));
        G = tmp(&t, eg_cast(G, m->dtype));
    }
    double n = reduced_count(call->attrs, x);
    eg_tensor *r = tmp(&t, eg_rsqrt(tmp(&t, eg_add_scalar(v, call->attrs->scalars[0]))));
    eg_tensor *sum_g = tmp(&t, reduce_like(G, m));
    eg_tensor *sum_gx = tmp(&t, reduce_like(tmp(&t, eg_mul(G, x)), m));
    eg_tensor *d_scale = tmp(&t, eg_mul(r, tmp(&t, eg_sub(sum_gx, tmp(&t, eg_mul(m, sum_g))))));
    SET_GRAD(4, reduce_like(sum_g, IN(4)));
    if (NEEDS(3)) {
        eg__ref(d_scale);
        call->grad_inputs[3] = d_scale;
    }
    if (NEEDS(0)) {
        eg_tensor *k = tmp(&t, eg_mul(g, r));
        eg_tensor *k_n = tmp(&t, eg_mul_scalar(k, -1.0 / n));
        eg_tensor *c1 = tmp(&t, eg_mul(k_n, tmp(&t, eg_mul(r, d_scale))));
        eg_tensor *c0 = tmp(
            &t,
            eg_mul(k_n, tmp(&t, eg_sub(sum_g, tmp(&t, eg_mul(tmp(&t, eg_mul(m, r)), d_scale))))));
        eg_tensor *dx = eg_mul_add(G, k, tmp(&t, eg_mul_add(x, c1, c0)));
        if (low) dx = eg_cast(tmp(&t, dx), IN(0)->dtype);
        call->grad_inputs[0] = dx;
    }
    return finish(&t);
}

/* Runs an op with call's attrs, and attrs->shape set to `shape` when given. */
static eg_tensor *run_with_shape(const eg__backward_call *call, eg__op op, int n,
                                 const eg_tensor *a, const eg_tensor *b, const eg_tensor *shape) {
    eg__attrs attrs = *call->attrs;
    if (shape) {
        attrs.n_dims = shape->n_dims;
        memcpy(attrs.shape, shape->shape, sizeof attrs.shape);
    }
    const eg_tensor *in[2] = {a, b};
    return eg__execute(op, n, in, &attrs);
}

/* y = conv(x, w): dx = conv2d_backward_input(g, w), dw = conv2d_backward_filter(x, g). */
eg_status eg__backward_conv2d(const eg__backward_call *call) {
    SET_GRAD(0, run_with_shape(call, EG__OP_CONV2D_BACKWARD_INPUT, 2, GRAD, IN(1), IN(0)));
    SET_GRAD(1, run_with_shape(call, EG__OP_CONV2D_BACKWARD_FILTER, 2, IN(0), GRAD, IN(1)));
    return eg_last_status();
}

/* dx = BI(dy, w) is linear in dy and in w: <G, BI(dy, w)> = <conv(G, w), dy>, so
 * d/d(dy) = conv(G, w) and d/dw = BF(G, dy). */
eg_status eg__backward_conv2d_backward_input(const eg__backward_call *call) {
    SET_GRAD(0, run_with_shape(call, EG__OP_CONV2D, 2, GRAD, IN(1), NULL));
    SET_GRAD(1, run_with_shape(call, EG__OP_CONV2D_BACKWARD_FILTER, 2, GRAD, IN(0), IN(1)));
    return eg_last_status();
}

/* dw = BF(x, dy): <G, BF(x, dy)> = <conv(x, G), dy> = <x, BI(dy, G)>. */
eg_status eg__backward_conv2d_backward_filter(const eg__backward_call *call) {
    SET_GRAD(0, run_with_shape(call, EG__OP_CONV2D_BACKWARD_INPUT, 2, IN(1), GRAD, IN(0)));
    SET_GRAD(1, run_with_shape(call, EG__OP_CONV2D, 2, IN(0), GRAD, NULL));
    return eg_last_status();
}

/* The gradient goes to the first largest element of each window. */
eg_status eg__backward_max_pool2d(const eg__backward_call *call) {
    SET_GRAD(0, run_with_shape(call, EG__OP_MAX_POOL2D_BACKWARD, 2, IN(0), GRAD, NULL));
    return eg_last_status();
}

/* dx = routes dy to each window's argmax: linear in dy, whose gradient picks G at the argmax
 * of every window; piecewise constant in x (no gradient). */
eg_status eg__backward_max_pool2d_backward(const eg__backward_call *call) {
    if (!NEEDS(1)) return EG_OK;
    temps t = {0};
    eg_tensor *index =
        tmp(&t, run_with_shape(call, EG__OP_MAX_POOL2D_ARGMAX, 1, IN(0), NULL, NULL));
    int64_t n = GRAD->n_elems;
    eg_tensor *flat = tmp(&t, eg_reshape(GRAD, 1, &n));
    SET_GRAD(1, eg_gather(flat, index, 0));
    return finish(&t);
}

eg_status eg__backward_avg_pool2d(const eg__backward_call *call) {
    SET_GRAD(0, run_with_shape(call, EG__OP_AVG_POOL2D_BACKWARD, 1, GRAD, NULL, IN(0)));
    return eg_last_status();
}

/* avg_pool2d_backward is avg_pool2d's adjoint, so its gradient is avg_pool2d. */
eg_status eg__backward_avg_pool2d_backward(const eg__backward_call *call) {
    SET_GRAD(0, run_with_shape(call, EG__OP_AVG_POOL2D, 1, GRAD, NULL, NULL));
    return eg_last_status();
}

/* The unfused chain's rules in order: the activation's (from the output, as sigmoid's and
 * tanh's own rules do; relu's mask y > 0 is z > 0), add's (the bias's gradient summed over the
 * batch), matmul's. */
eg_status eg__backward_dense(const eg__backward_call *call) {
    const eg_tensor *x = call->inputs[0], *w = call->inputs[1], *b = call->inputs[2];
    const eg_tensor *y = call->output, *g = call->grad_output;
    eg_tensor *items[6] = {0}, *dz = NULL;
    int n = 0;
    switch (call->attrs->ints[0]) {
    case EG_ACTIVATION_RELU: {
        const eg_tensor *in[2] = {y, g};
        eg__attrs no_attrs;
        memset(&no_attrs, 0, sizeof no_attrs);
        dz = items[n++] = eg__execute(EG__OP_RELU_BACKWARD, 2, in, &no_attrs);
        break;
    }
    case EG_ACTIVATION_SIGMOID: { /* g * y * (1 - y) */
        eg_tensor *one = items[n++] = eg__full_on(y->device, y->dtype, 0, NULL, 1.0);
        eg_tensor *one_minus = items[n++] = eg_sub(one, y);
        eg_tensor *gy = items[n++] = eg_mul(g, y);
        dz = items[n++] = eg_mul(gy, one_minus);
        break;
    }
    case EG_ACTIVATION_TANH: { /* g * (1 - y^2) */
        eg_tensor *one = items[n++] = eg__full_on(y->device, y->dtype, 0, NULL, 1.0);
        eg_tensor *square = items[n++] = eg_square(y);
        eg_tensor *one_minus = items[n++] = eg_sub(one, square);
        dz = items[n++] = eg_mul(g, one_minus);
        break;
    }
    default:
        dz = (eg_tensor *)g;
        break;
    }
    bool low = call->attrs->low_precision;
    eg_dtype compute = call->attrs->compute_dtype;
    if (dz && low) { /* the products in low precision, each gradient in its input's dtype */
        if (call->needs_grad[0])
            call->grad_inputs[0] = eg_matmul_low_precision(dz, w, false, true, compute, x->dtype);
        if (call->needs_grad[1])
            call->grad_inputs[1] = eg_matmul_low_precision(x, dz, true, false, compute, w->dtype);
        int rows_axis = 0;
        eg_tensor *db = call->needs_grad[2] ? eg_sum(dz, 1, &rows_axis, false) : NULL;
        if (db && db->dtype != b->dtype) {
            eg_tensor *cast = eg_cast(db, b->dtype);
            eg_release(db);
            db = cast;
        }
        if (call->needs_grad[2]) call->grad_inputs[2] = db;
    } else if (dz) {
        /* eg_dense_sampled's fraction (0: exact): the products estimated from a sample of their
         * inner terms, the batch's rows for the kernel's gradient, the units for the input's */
        double fraction = call->attrs->scalars[1];
        bool sample_input = fraction > 0 && call->attrs->ints[1] == 2;
        if (call->needs_grad[0])
            call->grad_inputs[0] = sample_input
                                       ? eg_matmul_sampled(dz, w, false, true, fraction, NULL)
                                       : eg_matmul_ex(dz, w, false, true);
        if (call->needs_grad[1])
            call->grad_inputs[1] = fraction > 0
                                       ? eg_matmul_sampled(x, dz, true, false, fraction, NULL)
                                       : eg_matmul_ex(x, dz, true, false);
        /* (N, U) to (U,): the column sum itself, without sum_to_shape's keepdims and reshape */
        int rows_axis = 0;
        if (call->needs_grad[2])
            call->grad_inputs[2] = dz->n_dims == 2 && b->n_dims == 1 && dz->shape[1] == b->shape[0]
                                       ? eg_sum(dz, 1, &rows_axis, false)
                                       : eg__sum_to_shape(dz, 1, b->shape);
    }
    for (int i = 0; i < n; i++) eg_release(items[i]);
    return eg_last_status();
}

/* y = sum over replicas of x: every replica's objective reads y, so d/dx of their sum is the sum
 * of their gradients, an all_reduce of GRAD in the same group (each replica's backward makes the
 * same calls in the same order, so the tags agree). */
eg_status eg__backward_all_reduce(const eg__backward_call *call) {
    if (!NEEDS(0)) return EG_OK;
    eg__attrs attrs = eg__collective_attrs(call->attrs->ints[0], NULL);
    const eg_tensor *in[1] = {GRAD};
    call->grad_inputs[0] = eg__execute(EG__OP_ALL_REDUCE, 1, in, &attrs);
    return eg_last_status();
}

const eg__backward_fn eg__backward_rules[EG__OP_COUNT] = {
#define EG_OP(ENUM, name, n_inputs, infer, backward, flags)                                        \
    [EG__OP_##ENUM] = eg__backward_##backward,
#include "ops/ops.def"
#undef EG_OP
};
