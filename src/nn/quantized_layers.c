/* int8 snapshots of Dense and Conv2D layers (eagle/approx.h): the kernel quantized once, the
 * layer's inference calls on eg_dense_int8 / eg_conv2d_int8, its training calls untouched. */
#include "eagle/approx.h"
#include "nn/internal.h"

bool eg_layer_is_quantized(const eg_layer *layer) {
    return layer && layer->int8_kernel;
}

eg_status eg_layer_quantize_int8(eg_layer *layer, int bits) {
    if (!layer) return eg__error(EG_ERR_NULL_ARGUMENT, "layer_quantize_int8: layer is NULL");
    if (layer->kind != EG__LAYER_DENSE && layer->kind != EG__LAYER_CONV2D)
        return eg__error(EG_ERR_UNSUPPORTED,
                         "layer_quantize_int8: '%s' is a %s; only Dense and Conv2D layers have "
                         "int8 products",
                         eg_layer_name(layer), eg_layer_type(layer));
    if (bits != 0 && (bits < 2 || bits > 8))
        return eg__error(EG_ERR_INVALID_ARGUMENT,
                         "layer_quantize_int8: bits %d is not 0 (exact again) or in [2, 8]", bits);
    if (!layer->built)
        return eg__error(EG_ERR_STATE, "layer_quantize_int8: '%s' is not built yet",
                         eg_layer_name(layer));
    eg_tensor *kernel = layer->variables[0];
    if (bits && kernel->dtype != EG_DTYPE_F32)
        return eg__error(EG_ERR_DTYPE, "layer_quantize_int8: '%s' has %s weights, not f32",
                         eg_layer_name(layer), eg_dtype_name(kernel->dtype));
    if (bits && layer->kind == EG__LAYER_CONV2D &&
        (layer->conv.groups > 1 || layer->conv.data_format != EG_DATA_FORMAT_NHWC))
        return eg__error(EG_ERR_UNSUPPORTED,
                         "layer_quantize_int8: '%s' is grouped or NCHW; int8 convolutions take "
                         "NHWC and one group",
                         eg_layer_name(layer));
    eg_tensor *scale = NULL, *q = NULL;
    if (bits) {
        eg_no_grad_begin();
        q = eg_quantize_int8(kernel, bits, &scale);
        eg_no_grad_end();
        if (!q) return eg_last_status();
        /* the layer owns them: a scope open around this call must not release them */
        eg__scope_forget(q);
        eg__scope_forget(scale);
    }
    eg_release(layer->int8_kernel);
    eg_release(layer->int8_scale);
    layer->int8_kernel = q;
    layer->int8_scale = scale;
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
