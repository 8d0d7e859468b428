/* The approximations a layer can hold (eagle/approx.h): int8 snapshots of Dense and Conv2D layers
 * (the kernel quantized once, the layer's inference calls on eg_dense_int8 / eg_conv2d_int8, its
 * training calls untouched), and Dense gradient sampling (its training calls on
 * eg_dense_sampled). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "eagle/approx.h"
#include "nn/internal.h"

bool eg_layer_is_quantized(const eg_layer *layer) {
    return layer && layer->int8_kernel;
}

/* What every int8 snapshot needs of its layer (`what` names the call in the messages). */
static eg_status check_layer(const eg_layer *layer, const char *what) {
    if (!layer) return eg__error(EG_ERR_NULL_ARGUMENT, "%s: layer is NULL", what);
    if (layer->kind != EG__LAYER_DENSE && layer->kind != EG__LAYER_CONV2D)
        return eg__error(EG_ERR_UNSUPPORTED,
                         "%s: '%s' is a %s; only Dense and Conv2D layers have int8 products", what,
                         eg_layer_name(layer), eg_layer_type(layer));
    if (!layer->built)
        return eg__error(EG_ERR_STATE, "%s: '%s' is not built yet", what, eg_layer_name(layer));
    if (layer->variables[0]->dtype != EG_DTYPE_F32)
        return eg__error(EG_ERR_DTYPE, "%s: '%s' has %s weights, not f32", what,
                         eg_layer_name(layer), eg_dtype_name(layer->variables[0]->dtype));
    if (layer->kind == EG__LAYER_CONV2D &&
        (layer->conv.groups > 1 || layer->conv.data_format != EG_DATA_FORMAT_NHWC))
        return eg__error(EG_ERR_UNSUPPORTED,
                         "%s: '%s' is grouped or NCHW; int8 convolutions take NHWC and one group",
                         what, eg_layer_name(layer));
    return EG_OK;
}

/* Replaces the layer's snapshot with (q, scale), which it then owns (NULL, NULL: none). */
static void keep_snapshot(eg_layer *layer, eg_tensor *q, eg_tensor *scale) {
    /* a scope open around the call must not release what the layer keeps */
    if (q) eg__scope_forget(q);
    if (scale) eg__scope_forget(scale);
    eg_release(layer->int8_kernel);
    eg_release(layer->int8_scale);
    layer->int8_kernel = q;
    layer->int8_scale = scale;
}

eg_status eg_layer_quantize_int8(eg_layer *layer, int bits) {
    static const char *what = "layer_quantize_int8";
    if (!layer) return eg__error(EG_ERR_NULL_ARGUMENT, "%s: layer is NULL", what);
    if (layer->kind != EG__LAYER_DENSE && layer->kind != EG__LAYER_CONV2D)
        return check_layer(layer, what); /* names the kind */
    if (bits != 0 && (bits < 2 || bits > 8))
        return eg__error(EG_ERR_INVALID_ARGUMENT, "%s: bits %d is not 0 (exact again) or in [2, 8]",
                         what, bits);
    if (bits == 0) {
        keep_snapshot(layer, NULL, NULL);
        return EG_OK;
    }
    eg_status status = check_layer(layer, what);
    if (status != EG_OK) return status;
    eg_tensor *scale = NULL;
    eg_no_grad_begin();
    eg_tensor *q = eg_quantize_int8(layer->variables[0], bits, &scale);
    eg_no_grad_end();
    if (!q) return eg_last_status();
    keep_snapshot(layer, q, scale);
    return EG_OK;
}

eg_status eg_layer_int8_snapshot(const eg_layer *layer, eg_tensor **q, eg_tensor **scale) {
    if (q) *q = NULL;
    if (scale) *scale = NULL;
    if (!layer || !q || !scale)
        return eg__error(EG_ERR_NULL_ARGUMENT, "layer_int8_snapshot: %s is NULL",
                         !layer ? "layer"
                         : !q   ? "q"
                                : "scale");
    if (!layer->int8_kernel)
        return eg__error(EG_ERR_STATE, "layer_int8_snapshot: '%s' holds no int8 snapshot",
                         eg_layer_name(layer));
    eg__ref(layer->int8_kernel);
    eg__ref(layer->int8_scale);
    *q = layer->int8_kernel;
    *scale = layer->int8_scale;
    return EG_OK;
}

eg_status eg_layer_set_int8(eg_layer *layer, const eg_tensor *q, const eg_tensor *scale) {
    static const char *what = "layer_set_int8";
    eg_status status = check_layer(layer, what);
    if (status != EG_OK) return status;
    if (!q || !scale)
        return eg__error(EG_ERR_NULL_ARGUMENT, "%s: %s is NULL", what, !q ? "q" : "scale");
    const eg_tensor *kernel = layer->variables[0];
    if (q->dtype != EG_DTYPE_I8 || scale->dtype != EG_DTYPE_F32)
        return eg__error(EG_ERR_DTYPE, "%s: '%s' takes q i8 and scale f32, not %s and %s", what,
                         eg_layer_name(layer), eg_dtype_name(q->dtype),
                         eg_dtype_name(scale->dtype));
    int64_t outputs = kernel->shape[kernel->n_dims - 1];
    bool same_shape = q->n_dims == kernel->n_dims &&
                      !memcmp(q->shape, kernel->shape, sizeof(int64_t) * (size_t)q->n_dims);
    if (!same_shape || scale->n_dims != 1 || scale->shape[0] != outputs) {
        char want[64], got[64], got_scale[64];
        eg__shape_format(kernel->n_dims, kernel->shape, want, sizeof want);
        eg__shape_format(q->n_dims, q->shape, got, sizeof got);
        eg__shape_format(scale->n_dims, scale->shape, got_scale, sizeof got_scale);
        return eg__error(
            EG_ERR_SHAPE, "%s: '%s' has a %s kernel: q must be %s and scale (%lld), not %s and %s",
            what, eg_layer_name(layer), want, want, (long long)outputs, got, got_scale);
    }
    float *values = malloc(sizeof(float) * (size_t)(outputs ? outputs : 1));
    if (!values) return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", what);
    status = eg_tensor_copy_to_host(scale, values, sizeof(float) * (size_t)outputs);
    for (int64_t i = 0; status == EG_OK && i < outputs; i++)
        if (!(values[i] > 0) || !isfinite(values[i]))
            status = eg__error(EG_ERR_INVALID_ARGUMENT,
                               "%s: '%s': scale[%lld] is %g; scales must be finite and > 0", what,
                               eg_layer_name(layer), (long long)i, (double)values[i]);
    free(values);
    if (status != EG_OK) return status;
    eg_tensor *own_q = eg_tensor_to(q, kernel->device);
    eg_tensor *own_scale = own_q ? eg_tensor_to(scale, kernel->device) : NULL;
    if (!own_scale) {
        eg_release(own_q);
        return eg_last_status();
    }
    keep_snapshot(layer, own_q, own_scale);
    return EG_OK;
}

eg_status eg_model_quantize_int8(eg_model *model, int bits, int64_t min_inner, int *n_quantized) {
    if (n_quantized) *n_quantized = 0;
    if (!model) return eg__error(EG_ERR_NULL_ARGUMENT, "model_quantize_int8: model is NULL");
    int count = 0;
    for (int i = 0; i < eg_model_n_layers(model); i++) {
        eg_layer *layer = eg_model_layer(model, i);
        if (layer->kind != EG__LAYER_DENSE && layer->kind != EG__LAYER_CONV2D) continue;
        const eg_tensor *kernel = layer->variables[0];
        int64_t inner = kernel ? kernel->n_elems / kernel->shape[kernel->n_dims - 1] : 0;
        bool wanted = bits && inner >= min_inner;
        eg_status status = eg_layer_quantize_int8(layer, wanted ? bits : 0);
        if (status != EG_OK) return status;
        count += wanted;
    }
    if (n_quantized) *n_quantized = count;
    return EG_OK;
}

/* Conv2D's bias and activation after the int8 product, as call_conv applies them. */
static eg_tensor *conv_int8(eg_layer *layer, const eg_tensor *x,
                            const eg_tensor *const *variables) {
    const eg_conv2d_layer_options *o = &layer->conv;
    eg_conv2d_options options = eg__conv_layer_options(layer); /* NHWC, one group: checked */
    eg_tensor *y = eg_conv2d_int8(x, layer->int8_kernel, layer->int8_scale, NULL, &options);
    if (y && o->use_bias) {
        eg_tensor *biased = eg_add(y, variables[1]);
        eg_release(y);
        y = biased;
    }
    if (y && layer->activation != EG_ACTIVATION_NONE) {
        eg_tensor *activated = eg_activation_apply(layer->activation, y);
        eg_release(y);
        y = activated;
    }
    return y;
}

eg_tensor *eg__layer_int8_call(eg_layer *layer, const eg_tensor *x,
                               const eg_tensor *const *variables, bool *handled) {
    *handled = x->dtype == EG_DTYPE_F32 && layer->policy == EG_POLICY_FLOAT32 &&
               (layer->kind == EG__LAYER_CONV2D ? x->n_dims == 4 : x->n_dims == 2);
    if (!*handled) return NULL;
    if (layer->kind == EG__LAYER_CONV2D) return conv_int8(layer, x, variables);
    eg_activation act = layer->activation;
    bool fused = act == EG_ACTIVATION_NONE || act == EG_ACTIVATION_RELU ||
                 act == EG_ACTIVATION_SIGMOID || act == EG_ACTIVATION_TANH;
    eg_tensor *y = eg_dense_int8(x, layer->int8_kernel, layer->int8_scale, variables[1], NULL,
                                 fused ? act : EG_ACTIVATION_NONE);
    if (y && !fused) {
        eg_tensor *activated = eg_activation_apply(act, y);
        eg_release(y);
        y = activated;
    }
    return y;
}

/* ---- gradient sampling (eg_dense_sampled) ---- */

eg_status eg_layer_set_gradient_sampling(eg_layer *layer, double fraction,
                                         bool sample_input_gradient) {
    static const char *what = "layer_set_gradient_sampling";
    if (!layer) return eg__error(EG_ERR_NULL_ARGUMENT, "%s: layer is NULL", what);
    if (layer->kind != EG__LAYER_DENSE)
        return eg__error(EG_ERR_UNSUPPORTED, "%s: '%s' is a %s; only Dense layers sample", what,
                         eg_layer_name(layer), eg_layer_type(layer));
    if (!(fraction >= 0 && fraction <= 1))
        return eg__error(EG_ERR_INVALID_ARGUMENT, "%s: fraction %g is not in [0, 1]", what,
                         fraction);
    layer->sample_fraction = fraction;
    layer->sample_inputs = sample_input_gradient;
    return EG_OK;
}

double eg_layer_gradient_sampling(const eg_layer *layer) {
    return layer && layer->kind == EG__LAYER_DENSE ? layer->sample_fraction : 0;
}

eg_status eg_model_set_gradient_sampling(eg_model *model, double fraction,
                                         bool sample_input_gradient, int64_t min_units,
                                         int *n_sampled) {
    if (n_sampled) *n_sampled = 0;
    if (!model)
        return eg__error(EG_ERR_NULL_ARGUMENT, "model_set_gradient_sampling: model is NULL");
    int count = 0;
    for (int i = 0; i < eg_model_n_layers(model); i++) {
        eg_layer *layer = eg_model_layer(model, i);
        if (layer->kind != EG__LAYER_DENSE) continue;
        const eg_tensor *kernel = layer->variables[0];
        bool wanted = fraction > 0 && kernel && kernel->shape[1] >= min_units;
        eg_status status =
            eg_layer_set_gradient_sampling(layer, wanted ? fraction : 0, sample_input_gradient);
        if (status != EG_OK) return status;
        count += wanted;
    }
    if (n_sampled) *n_sampled = count;
    return EG_OK;
}

eg_tensor *eg__layer_sampled_call(eg_layer *layer, const eg_tensor *x,
                                  const eg_tensor *const *variables, bool *handled) {
    eg_activation act = layer->activation;
    *handled = x->dtype == EG_DTYPE_F32 && layer->policy == EG_POLICY_FLOAT32 && x->n_dims == 2 &&
               (act == EG_ACTIVATION_NONE || act == EG_ACTIVATION_RELU ||
                act == EG_ACTIVATION_SIGMOID || act == EG_ACTIVATION_TANH);
    if (!*handled) return NULL;
    const eg_tensor *kernel = variables[0];
    /* without a bias (the CNN's hidden Dense), a zero one: the op takes one */
    eg_tensor *zero = layer->n_variables > 1
                          ? NULL
                          : eg__full_on(kernel->device, kernel->dtype, 1, &kernel->shape[1], 0);
    const eg_tensor *bias = layer->n_variables > 1 ? variables[1] : zero;
    eg_tensor *y = bias ? eg_dense_sampled(x, kernel, bias, act, layer->sample_fraction,
                                           layer->sample_inputs)
                        : NULL;
    eg_release(zero);
    return y;
}
