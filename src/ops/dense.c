/* dense: activation(x · kernel + bias) in one op, so that the CPU kernel applies the bias and the
 * activation to each tile of the product while it is still in cache (matmul.c's epilogue)
 * instead of two more passes over memory. Its values are bitwise those of the unfused
 * eg_matmul -> eg_add -> activation chain, and its backward rule is the chain's, op for op, so
 * the gradients are bitwise the same too. */
#include <string.h>

#include "base/error.h"
#include "eagle/nn.h"
#include "ops/internal.h"

#define SHAPE_TEXT 160

static bool fusable_activation(int64_t activation) {
    return activation == EG_ACTIVATION_NONE || activation == EG_ACTIVATION_RELU ||
           activation == EG_ACTIVATION_SIGMOID || activation == EG_ACTIVATION_TANH;
}

eg_tensor *eg_dense(const eg_tensor *x, const eg_tensor *kernel, const eg_tensor *bias,
                    eg_activation activation) {
    if (!eg__check_arg(x, "dense", 0) || !eg__check_arg(kernel, "dense", 1) ||
        !eg__check_arg(bias, "dense", 2))
        return NULL;
    eg__attrs attrs;
    memset(&attrs, 0, sizeof attrs);
    attrs.ints[0] = (int64_t)activation;
    const eg_tensor *in[3] = {x, kernel, bias};
    return eg__execute(EG__OP_DENSE, 3, in, &attrs);
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
    if (x->dtype != EG_DTYPE_F32 && x->dtype != EG_DTYPE_F64)
        return eg__op_error(op, EG_ERR_DTYPE, "input 0 must be f32 or f64, got %s",
                            eg_dtype_name(x->dtype));
    if (w->dtype != x->dtype || b->dtype != x->dtype)
        return eg__op_error(op, EG_ERR_DTYPE, "dtypes differ: %s, %s, %s", eg_dtype_name(x->dtype),
                            eg_dtype_name(w->dtype), eg_dtype_name(b->dtype));
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
    meta->dtype = x->dtype;
    meta->n_dims = 2;
    meta->shape[0] = x->shape[0];
    meta->shape[1] = w->shape[1];
    return EG_OK;
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
    if (dz) {
        if (call->needs_grad[0]) call->grad_inputs[0] = eg_matmul_ex(dz, w, false, true);
        if (call->needs_grad[1]) call->grad_inputs[1] = eg_matmul_ex(x, dz, true, false);
        if (call->needs_grad[2]) call->grad_inputs[2] = eg__sum_to_shape(dz, 1, b->shape);
    }
    for (int i = 0; i < n; i++) eg_release(items[i]);
    return eg_last_status();
}
