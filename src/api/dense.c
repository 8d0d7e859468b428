/* dense: activation(x · kernel + bias) in one op, so that the CPU kernel applies the bias and the
 * activation to each tile of the product while it is still in cache (matmul.c's epilogue)
 * instead of two more passes over memory. Its values are bitwise those of the unfused
 * eg_matmul -> eg_add -> activation chain, and its backward rule is the chain's, op for op, so
 * the gradients are bitwise the same too. */
#include <string.h>

#include "base/error.h"
#include "api/internal.h"

/* ---- activations ---- */

static const char *const activation_names[EG_ACTIVATION_COUNT] = {
    [EG_ACTIVATION_NONE] = "linear",     [EG_ACTIVATION_RELU] = "relu",
    [EG_ACTIVATION_SIGMOID] = "sigmoid", [EG_ACTIVATION_TANH] = "tanh",
    [EG_ACTIVATION_GELU] = "gelu",       [EG_ACTIVATION_SOFTMAX] = "softmax",
};

const char *eg_activation_name(eg_activation activation) {
    return (unsigned)activation < EG_ACTIVATION_COUNT ? activation_names[activation] : "invalid";
}

eg_tensor *eg_activation_apply(eg_activation activation, const eg_tensor *x) {
    if (!eg__check_arg(x, "activation_apply", 1)) return NULL;
    switch (activation) {
    case EG_ACTIVATION_NONE:
        return eg_reshape(x, x->n_dims, x->shape);
    case EG_ACTIVATION_RELU:
        return eg_relu(x);
    case EG_ACTIVATION_SIGMOID:
        return eg_sigmoid(x);
    case EG_ACTIVATION_TANH:
        return eg_tanh(x);
    case EG_ACTIVATION_GELU:
        return eg_gelu(x);
    case EG_ACTIVATION_SOFTMAX:
        return eg_softmax(x, -1);
    default:
        break;
    }
    eg__error(EG_ERR_INVALID_ARGUMENT, "activation_apply: invalid activation %d", (int)activation);
    return NULL;
}

eg_tensor *eg_dense(const eg_tensor *x, const eg_tensor *kernel, const eg_tensor *bias,
                    eg_activation activation) {
    if (!eg__check_arg(x, "dense", 0) || !eg__check_arg(kernel, "dense", 1) ||
        !eg__check_arg(bias, "dense", 2))
        return NULL;
    eg__attrs attrs;
    memset(&attrs, 0, sizeof attrs);
    attrs.ints[0] = (int64_t)activation;
    attrs.fast_math = eg_fast_math_enabled();
    const eg_tensor *in[3] = {x, kernel, bias};
    return eg__execute(EG__OP_DENSE, 3, in, &attrs);
}

eg_tensor *eg_dense_low_precision(const eg_tensor *x, const eg_tensor *kernel,
                                  const eg_tensor *bias, eg_activation activation,
                                  eg_dtype compute_dtype, eg_dtype result_dtype) {
    if (!eg__check_arg(x, "dense", 0) || !eg__check_arg(kernel, "dense", 1) ||
        !eg__check_arg(bias, "dense", 2))
        return NULL;
    eg__attrs attrs;
    memset(&attrs, 0, sizeof attrs);
    attrs.ints[0] = (int64_t)activation;
    attrs.low_precision = true;
    attrs.compute_dtype = compute_dtype;
    attrs.result_dtype = result_dtype;
    attrs.fast_math = eg_fast_math_enabled();
    const eg_tensor *in[3] = {x, kernel, bias};
    return eg__execute(EG__OP_DENSE, 3, in, &attrs);
}
