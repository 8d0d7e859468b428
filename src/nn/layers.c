/* Layers: Dense, Flatten and Activation; building their variables and running them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/internal.h"

/* ---- construction ---- */

static const char *const layer_types[EG__LAYER_KIND_COUNT] = {
    [EG__LAYER_DENSE] = "Dense",
    [EG__LAYER_FLATTEN] = "Flatten",
    [EG__LAYER_ACTIVATION] = "Activation",
    [EG__LAYER_CONV2D] = "Conv2D",
    [EG__LAYER_MAX_POOL2D] = "MaxPooling2D",
    [EG__LAYER_AVG_POOL2D] = "AveragePooling2D",
    [EG__LAYER_GLOBAL_AVG_POOL2D] = "GlobalAveragePooling2D",
    [EG__LAYER_BATCH_NORM] = "BatchNormalization",
    [EG__LAYER_LAYER_NORM] = "LayerNormalization",
    [EG__LAYER_DROPOUT] = "Dropout",
    [EG__LAYER_EMBEDDING] = "Embedding",
    [EG__LAYER_LSTM] = "LSTM",
    [EG__LAYER_GRU] = "GRU",
    [EG__LAYER_BIDIRECTIONAL] = "Bidirectional",
    [EG__LAYER_INPUT] = "InputLayer",
};
static const char *const layer_prefixes[EG__LAYER_KIND_COUNT] = {
    [EG__LAYER_DENSE] = "dense",
    [EG__LAYER_FLATTEN] = "flatten",
    [EG__LAYER_ACTIVATION] = "activation",
    [EG__LAYER_CONV2D] = "conv2d",
    [EG__LAYER_MAX_POOL2D] = "max_pooling2d",
    [EG__LAYER_AVG_POOL2D] = "average_pooling2d",
    [EG__LAYER_GLOBAL_AVG_POOL2D] = "global_average_pooling2d",
    [EG__LAYER_BATCH_NORM] = "batch_normalization",
    [EG__LAYER_LAYER_NORM] = "layer_normalization",
    [EG__LAYER_DROPOUT] = "dropout",
    [EG__LAYER_EMBEDDING] = "embedding",
    [EG__LAYER_LSTM] = "lstm",
    [EG__LAYER_GRU] = "gru",
    [EG__LAYER_BIDIRECTIONAL] = "bidirectional",
    [EG__LAYER_INPUT] = "input_layer",
};

const char *eg__layer_prefix(const eg_layer *layer) {
    return layer->kind == EG__LAYER_CUSTOM ? layer->prefix : layer_prefixes[layer->kind];
}
const char *eg_layer_type(const eg_layer *layer) {
    if (!layer) return "";
    return layer->kind == EG__LAYER_CUSTOM ? layer->layer_class->type : layer_types[layer->kind];
}

void eg__layer_arity(const eg_layer *layer, int *min_inputs, int *max_inputs) {
    *min_inputs = *max_inputs = 1;
    if (layer->kind != EG__LAYER_CUSTOM || layer->layer_class->max_inputs == 0) return;
    *min_inputs = layer->layer_class->min_inputs;
    *max_inputs = layer->layer_class->max_inputs;
}
const char *eg_layer_name(const eg_layer *layer) {
    if (!layer) return "";
    return layer->name ? layer->name : eg__layer_prefix(layer);
}
bool eg_layer_built(const eg_layer *layer) {
    return layer && layer->built;
}

bool eg__layer_set_name(eg_layer *layer, const char *name) {
    char *copy = strdup(name);
    if (!copy) {
        eg__error(EG_ERR_OUT_OF_MEMORY, "layer: out of host memory for a name");
        return false;
    }
    free(layer->name);
    layer->name = copy;
    return true;
}

eg_layer *eg__layer_new(eg__layer_kind kind, const char *name, const char *what) {
    eg_layer *layer = calloc(1, sizeof *layer);
    if (!layer) {
        eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", what);
        return NULL;
    }
    layer->kind = kind;
    layer->trainable = true;
    layer->dtype = EG_DTYPE_F32;
    layer->policy = eg_global_policy();
    if (name && !eg__layer_set_name(layer, name)) {
        free(layer);
        return NULL;
    }
    layer->name_fixed = name != NULL;
    return layer;
}

eg_dense_options eg_dense_options_default(void) {
    eg_dense_options options = {
        .activation = EG_ACTIVATION_NONE,
        .use_bias = true,
        .kernel_initializer = eg_initializer_of(EG_INITIALIZER_GLOROT_UNIFORM),
        .bias_initializer = eg_initializer_of(EG_INITIALIZER_ZEROS),
        .input_dim = 0,
        .dtype = EG_DTYPE_F32,
        .generator = NULL,
        .name = NULL,
    };
    return options;
}

eg_layer *eg_dense_new(int64_t units, eg_activation activation) {
    eg_dense_options options = eg_dense_options_default();
    options.activation = activation;
    return eg_dense_new_ex(units, &options);
}

eg_layer *eg_dense_new_ex(int64_t units, const eg_dense_options *options) {
    eg_dense_options o = options ? *options : eg_dense_options_default();
    if (units < 1) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "dense: units must be >= 1, got %lld", (long long)units);
        return NULL;
    }
    if ((unsigned)o.activation >= EG_ACTIVATION_COUNT) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "dense: invalid activation %d", (int)o.activation);
        return NULL;
    }
    if ((unsigned)o.kernel_initializer.kind >= EG_INITIALIZER_COUNT ||
        (unsigned)o.bias_initializer.kind >= EG_INITIALIZER_COUNT) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "dense: invalid initializer kind");
        return NULL;
    }
    if (o.dtype != EG_DTYPE_F32 && o.dtype != EG_DTYPE_F64) {
        eg__error(EG_ERR_DTYPE, "dense: variables must be f32 or f64, got %s",
                  eg_dtype_name(o.dtype));
        return NULL;
    }
    if (o.input_dim < 0) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "dense: input_dim must be >= 0, got %lld",
                  (long long)o.input_dim);
        return NULL;
    }
    eg_layer *layer = eg__layer_new(EG__LAYER_DENSE, o.name, "dense");
    if (!layer) return NULL;
    layer->units = units;
    layer->activation = o.activation;
    layer->dtype = o.dtype;
    layer->generator = o.generator;
    o.name = NULL; /* copied into layer->name */
    layer->dense = o;
    if (o.input_dim > 0) {
        int64_t shape[2] = {-1, o.input_dim};
        if (eg_layer_build(layer, 2, shape) != EG_OK) {
            eg_layer_free(layer);
            return NULL;
        }
    }
    return layer;
}

eg_layer *eg_flatten_new(const char *name) {
    return eg__layer_new(EG__LAYER_FLATTEN, name, "flatten");
}

eg_layer *eg_activation_new(eg_activation activation, const char *name) {
    if ((unsigned)activation >= EG_ACTIVATION_COUNT) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "activation: invalid activation %d", (int)activation);
        return NULL;
    }
    eg_layer *layer = eg__layer_new(EG__LAYER_ACTIVATION, name, "activation");
    if (layer) layer->activation = activation;
    return layer;
}

/* ---- building ---- */

static char *shape_text(int n_dims, const int64_t *shape, char *buf, size_t size) {
    return eg__shape_format(n_dims, shape, buf, size);
}

eg_tensor *eg__layer_make_variable(eg_layer *layer, const char *what, const eg_initializer *init,
                                   int n_dims, const int64_t *shape) {
    char name[256];
    snprintf(name, sizeof name, "%s/%s", eg_layer_name(layer), what);
    eg__scope_suspend();
    eg_tensor *value = eg_initializer_generate(init, layer->generator, layer->dtype, n_dims, shape);
    eg_tensor *variable = value ? eg_variable(value, name) : NULL;
    eg__unref(value);
    eg__scope_resume();
    if (variable)
        eg_variable_set_trainable(variable, layer->trainable && !layer->frozen[layer->n_variables]);
    return variable;
}

static eg_status build_dense(eg_layer *layer, int n_dims, const int64_t *input_shape) {
    char buf[160];
    int64_t input_dim = n_dims >= 1 ? input_shape[n_dims - 1] : -1;
    if (n_dims < 1 || input_dim < 1)
        return eg__error(EG_ERR_SHAPE,
                         "dense: cannot build '%s' for input shape %s: the last dim must be "
                         "known and >= 1",
                         eg_layer_name(layer), shape_text(n_dims, input_shape, buf, sizeof buf));
    if (layer->built) {
        if (input_dim != layer->input_dim)
            return eg__error(EG_ERR_SHAPE,
                             "dense: input last dim %lld does not match the input_dim %lld of "
                             "'%s'",
                             (long long)input_dim, (long long)layer->input_dim,
                             eg_layer_name(layer));
        return EG_OK;
    }
    int64_t kernel_shape[2] = {input_dim, layer->units};
    eg_tensor *kernel =
        eg__layer_make_variable(layer, "kernel", &layer->dense.kernel_initializer, 2, kernel_shape);
    if (!kernel) return eg_last_status();
    eg_tensor *bias = NULL;
    if (layer->dense.use_bias) {
        bias = eg__layer_make_variable(layer, "bias", &layer->dense.bias_initializer, 1,
                                       &layer->units);
        if (!bias) {
            eg_release(kernel);
            return eg_last_status();
        }
    }
    layer->variables[0] = kernel;
    layer->variables[1] = bias;
    layer->n_variables = bias ? 2 : 1;
    layer->input_dim = input_dim;
    layer->output_n_dims = n_dims;
    memcpy(layer->output_shape, input_shape, (size_t)n_dims * sizeof *input_shape);
    layer->output_shape[n_dims - 1] = layer->units;
    return EG_OK;
}

static eg_status build_flatten(eg_layer *layer, int n_dims, const int64_t *input_shape) {
    char buf[160];
    if (n_dims < 1)
        return eg__error(EG_ERR_SHAPE, "flatten: '%s' needs at least 1 dim, got shape %s",
                         eg_layer_name(layer), shape_text(n_dims, input_shape, buf, sizeof buf));
    int64_t rest = 1;
    for (int d = 1; d < n_dims; d++)
        rest = input_shape[d] < 0 || rest < 0 ? -1 : rest * input_shape[d];
    layer->output_n_dims = 2;
    layer->output_shape[0] = input_shape[0];
    layer->output_shape[1] = rest;
    return EG_OK;
}

void eg__layer_unbuild(eg_layer *layer) {
    for (int i = 0; i < layer->n_variables; i++) {
        eg_release(layer->variables[i]);
        layer->variables[i] = NULL;
    }
    layer->n_variables = 0;
    layer->input_dim = 0;
    layer->built = false;
}

eg_status eg_layer_build(eg_layer *layer, int n_dims, const int64_t *input_shape) {
    if (!layer) return eg__error(EG_ERR_NULL_ARGUMENT, "layer_build: layer is NULL");
    if (n_dims < 0 || n_dims > EG_MAX_DIMS || (n_dims > 0 && !input_shape))
        return eg__error(EG_ERR_SHAPE, "layer_build: invalid input shape (%d dims)", n_dims);
    for (int d = 0; d < n_dims; d++)
        if (input_shape[d] < -1)
            return eg__error(EG_ERR_SHAPE, "layer_build: invalid size %lld in the input shape",
                             (long long)input_shape[d]);
    /* A standalone layer takes its prefix as its name when its variables get named. */
    if (!layer->name && !eg__layer_set_name(layer, eg__layer_prefix(layer)))
        return eg_last_status();
    eg_status status = EG_OK;
    switch (layer->kind) {
    case EG__LAYER_DENSE:
        status = build_dense(layer, n_dims, input_shape);
        break;
    case EG__LAYER_FLATTEN:
        if (!layer->built) status = build_flatten(layer, n_dims, input_shape);
        break;
    case EG__LAYER_ACTIVATION:
        if (!layer->built) {
            layer->output_n_dims = n_dims;
            if (n_dims) memcpy(layer->output_shape, input_shape, (size_t)n_dims * sizeof(int64_t));
        }
        break;
    case EG__LAYER_CUSTOM: {
        eg_layer_shape shape = {.n_dims = n_dims};
        if (n_dims) memcpy(shape.dims, input_shape, (size_t)n_dims * sizeof(int64_t));
        status = eg__layer_build_multi(layer, 1, &shape);
        break;
    }
    case EG__LAYER_INPUT:
        break;
    case EG__LAYER_EMBEDDING:
    case EG__LAYER_LSTM:
    case EG__LAYER_GRU:
    case EG__LAYER_BIDIRECTIONAL:
        status = eg__recurrent_layer_build(layer, n_dims, input_shape);
        break;
    default:
        status = eg__conv_layer_build(layer, n_dims, input_shape);
        break;
    }
    if (status == EG_OK) layer->built = true;
    return status;
}

eg_status eg__layer_build_multi(eg_layer *layer, int n_inputs, const eg_layer_shape *shapes) {
    int min_inputs, max_inputs;
    eg__layer_arity(layer, &min_inputs, &max_inputs);
    if (n_inputs < min_inputs || n_inputs > max_inputs)
        return eg__error(EG_ERR_INVALID_ARGUMENT, "layer '%s' (%s) takes %d to %d inputs, got %d",
                         eg_layer_name(layer), eg_layer_type(layer), min_inputs, max_inputs,
                         n_inputs);
    if (layer->kind != EG__LAYER_CUSTOM)
        return eg_layer_build(layer, shapes[0].n_dims, shapes[0].dims);
    for (int i = 0; i < n_inputs; i++)
        if (shapes[i].n_dims < 0 || shapes[i].n_dims > EG_MAX_DIMS)
            return eg__error(EG_ERR_SHAPE, "layer_build: invalid input shape (%d dims)",
                             shapes[i].n_dims);
    if (layer->built) return EG_OK;
    if (!layer->name && !eg__layer_set_name(layer, eg__layer_prefix(layer)))
        return eg_last_status();
    eg_status status = eg__custom_layer_build(layer, n_inputs, shapes);
    if (status == EG_OK) layer->built = true;
    return status;
}

/* ---- calling ---- */

/* Dense in its compute dtype. Under a mixed policy the f32 kernel and bias enter the product as
 * they are, rounded to the compute dtype while the product reads them, and the weights'
 * gradients come out in f32 (eg_dense_low_precision): no cast passes over the weights either
 * way. */
static eg_tensor *call_dense(eg_layer *layer, const eg_tensor *x, const eg_tensor *const *variables,
                             eg_dtype compute) {
    const eg_tensor *kernel = variables[0], *bias = variables[1];
    bool low = compute != kernel->dtype;
    if (!low && x->dtype != kernel->dtype) {
        eg__error(EG_ERR_DTYPE, "dense: input of '%s' is %s but it computes in %s",
                  eg_layer_name(layer), eg_dtype_name(x->dtype), eg_dtype_name(kernel->dtype));
        return NULL;
    }
    eg_activation act = layer->activation;
    /* x: (B, D_in), kernel: (D_in, D_out), bias: (D_out,) -> (B, D_out) in one op whose kernel
     * applies the bias and activation to the product's tiles while they are in cache */
    if (bias && x->n_dims == 2 &&
        (act == EG_ACTIVATION_NONE || act == EG_ACTIVATION_RELU || act == EG_ACTIVATION_SIGMOID ||
         act == EG_ACTIVATION_TANH))
        return low ? eg_dense_low_precision(x, kernel, bias, act, compute, compute)
                   : eg_dense(x, kernel, bias, act);
    eg__temps temps = {0};
    /* x: (..., D_in), kernel: (D_in, D_out) -> (..., D_out) */
    eg_tensor *y =
        eg__temp(&temps, low ? eg_matmul_low_precision(x, kernel, false, false, compute, compute)
                             : eg_matmul(x, kernel));
    if (bias && low) bias = eg__temp(&temps, eg_cast(bias, compute));
    if (bias) y = eg__temp(&temps, eg_add(y, bias));
    eg_tensor *out = y ? eg_activation_apply(layer->activation, y) : NULL;
    eg__temps_release(&temps);
    return out;
}

static eg_tensor *call_flatten(const eg_tensor *x) {
    int64_t shape[2] = {x->shape[0], 1};
    for (int d = 1; d < x->n_dims; d++) shape[1] *= x->shape[d];
    return eg_reshape(x, 2, shape);
}

/* Layer normalization runs in its variables' dtype whatever the policy: its statistics need
 * f32's accuracy (on the f32 lists of PyTorch's and TensorFlow's autocast). Batch normalization
 * reads and writes the compute dtype itself: its ops take bf16 / f16 activations with the f32
 * variables as they are and compute the statistics and normalization in f32 (conv_layers.c,
 * call_norm), with no cast passes over the activations. */
static bool runs_in_full_precision(const eg_layer *layer) {
    return layer->kind == EG__LAYER_LAYER_NORM || eg__layer_is_recurrent(layer);
}

/* Builds a custom layer from its inputs' shapes (batch unknown) at its first call. */
static eg_status build_for_inputs(eg_layer *layer, int n_inputs, const eg_tensor *const *inputs) {
    eg_layer_shape shapes[EG__LAYER_MAX_INPUTS];
    for (int i = 0; i < n_inputs; i++) {
        shapes[i].n_dims = inputs[i]->n_dims;
        if (inputs[i]->n_dims)
            memcpy(shapes[i].dims, inputs[i]->shape, (size_t)inputs[i]->n_dims * sizeof(int64_t));
        if (inputs[i]->n_dims >= 2) shapes[i].dims[0] = -1;
    }
    return eg__layer_build_multi(layer, n_inputs, shapes);
}

eg_tensor *eg_layer_call_multi(eg_layer *layer, int n_inputs, eg_tensor *const *inputs_in,
                               bool training) {
    const eg_tensor *const *inputs = eg__const_tensors(inputs_in);
    if (!layer) {
        eg__error(EG_ERR_NULL_ARGUMENT, "layer_call: layer is NULL");
        return NULL;
    }
    int min_inputs, max_inputs;
    eg__layer_arity(layer, &min_inputs, &max_inputs);
    if (n_inputs < min_inputs || n_inputs > max_inputs || (n_inputs && !inputs)) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "layer_call: '%s' (%s) takes %d to %d inputs, got %d",
                  eg_layer_name(layer), eg_layer_type(layer), min_inputs, max_inputs, n_inputs);
        return NULL;
    }
    for (int i = 0; i < n_inputs; i++)
        if (!eg__check_arg(inputs[i], "layer_call", i + 1)) return NULL;
    if (layer->kind == EG__LAYER_CUSTOM) {
        if (!layer->built && build_for_inputs(layer, n_inputs, inputs) != EG_OK) return NULL;
    } else if (n_inputs != 1 || layer->kind == EG__LAYER_INPUT) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "layer_call: '%s' (%s) cannot be called",
                  eg_layer_name(layer), eg_layer_type(layer));
        return NULL;
    }
    const eg_tensor *x = inputs[0];
    if (layer->kind != EG__LAYER_CUSTOM &&
        (layer->n_variables || layer->kind == EG__LAYER_DENSE || !layer->built)) {
        /* Build from x's shape with the batch dim unknown (when there is one). */
        int64_t shape[EG_MAX_DIMS];
        if (x->n_dims) memcpy(shape, x->shape, (size_t)x->n_dims * sizeof *shape);
        if (x->n_dims >= 2) shape[0] = -1;
        if (eg_layer_build(layer, x->n_dims, shape) != EG_OK) return NULL;
    }
    eg_dtype compute = eg__layer_compute_dtype(layer);
    eg_dtype runs_in = runs_in_full_precision(layer) ? layer->dtype : compute;
    eg__temps temps = {0};
    /* Under a mixed policy floating inputs are cast to what the layer runs in, as Keras' layers
     * autocast theirs (a layer already in its input's dtype adds no op); a low-precision Dense
     * reads f32 inputs as they are (its product rounds them). Under FLOAT32 inputs pass as they
     * are: a layer without variables keeps their dtype, one with variables refuses another. */
    bool reads_f32 =
        layer->kind == EG__LAYER_DENSE && runs_in != layer->dtype && layer->dtype == EG_DTYPE_F32;
    const eg_tensor *cast_inputs[EG__LAYER_MAX_INPUTS] = {0};
    bool inputs_ok = true;
    for (int i = 0; i < n_inputs; i++) {
        const eg_tensor *in = inputs[i];
        cast_inputs[i] = in;
        if (layer->policy != EG_POLICY_FLOAT32 && eg_dtype_is_float(in->dtype) &&
            in->dtype != runs_in && !(reads_f32 && in->dtype == EG_DTYPE_F32))
            inputs_ok =
                (cast_inputs[i] = eg__temp(&temps, eg_cast(in, runs_in))) != NULL && inputs_ok;
    }
    const eg_tensor *input = inputs_ok ? cast_inputs[0] : NULL;
    /* Under a mixed policy the f32 variables are cast at each call (Keras' AutoCastVariable):
     * the gradient flows back through the cast to the f32 master weights. Dense and batch
     * normalization keep theirs: their low-precision ops read f32 variables as they are. */
    bool keeps_variables = reads_f32 || layer->kind == EG__LAYER_BATCH_NORM;
    const eg_tensor *variables[EG__LAYER_MAX_VARIABLES] = {0};
    for (int i = 0; i < layer->n_variables; i++) {
        const eg_tensor *v = layer->variables[i];
        variables[i] = v && v->dtype != runs_in && !keeps_variables
                           ? eg__temp(&temps, eg_cast(v, runs_in))
                           : v;
    }
    eg_tensor *y = NULL;
    if (input) switch (layer->kind) {
        case EG__LAYER_DENSE: {
            bool handled = false;
            if (!training && layer->int8_kernel)
                y = eg__layer_int8_call(layer, input, variables, &handled);
            if (training && layer->sample_fraction > 0)
                y = eg__layer_sampled_call(layer, input, variables, &handled);
            if (!handled) y = call_dense(layer, input, variables, runs_in);
            break;
        }
        case EG__LAYER_FLATTEN:
            if (input->n_dims < 1)
                eg__error(EG_ERR_SHAPE, "flatten: '%s' needs at least 1 dim, got a 0-d tensor",
                          eg_layer_name(layer));
            else
                y = call_flatten(input);
            break;
        case EG__LAYER_ACTIVATION:
            y = eg_activation_apply(layer->activation, input);
            break;
        case EG__LAYER_CUSTOM:
            y = eg__custom_layer_call(layer, n_inputs, cast_inputs, variables, training);
            break;
        case EG__LAYER_EMBEDDING:
        case EG__LAYER_LSTM:
        case EG__LAYER_GRU:
        case EG__LAYER_BIDIRECTIONAL:
            y = eg__recurrent_layer_call(layer, input, NULL, variables);
            break;
        default:
            y = eg__conv_layer_call(layer, input, variables, training);
            break;
        }
    /* a layer that ran in full precision hands the policy's compute dtype on */
    if (y && runs_in != compute && eg_dtype_is_float(y->dtype) && y->dtype != compute) {
        eg_tensor *cast = eg_cast(y, compute);
        eg_release(y);
        y = cast;
    }
    eg__temps_release(&temps);
    return y;
}

eg_tensor *eg_layer_call(eg_layer *layer, const eg_tensor *x, bool training) {
    return eg_layer_call_multi(layer, 1, eg__tensor_handles(&x), training);
}

eg_status eg__layer_rename_variables(eg_layer *layer) {
    eg_tensor *renamed[EG__LAYER_MAX_VARIABLES] = {0};
    for (int i = 0; i < layer->n_variables; i++) {
        const char *old = eg_variable_name(layer->variables[i]);
        const char *slash = strrchr(old, '/');
        char name[256];
        snprintf(name, sizeof name, "%s/%s", eg_layer_name(layer), slash ? slash + 1 : old);
        renamed[i] = eg_variable(layer->variables[i], name);
        if (!renamed[i]) {
            for (int j = 0; j < i; j++) eg_release(renamed[j]);
            return eg_last_status();
        }
        eg_variable_set_trainable(renamed[i], eg_variable_trainable(layer->variables[i]));
        if (eg_variable_sparse_gradient(layer->variables[i]))
            (void)eg_variable_set_sparse_gradient(renamed[i], true); /* allowed on the original */
    }
    for (int i = 0; i < layer->n_variables; i++) {
        eg_release(layer->variables[i]);
        layer->variables[i] = renamed[i];
    }
    return EG_OK;
}

/* ---- queries and ownership ---- */

int64_t eg_layer_count_params(const eg_layer *layer) {
    if (!layer) return 0;
    int64_t n = 0;
    for (int i = 0; i < layer->n_variables; i++) n += layer->variables[i]->n_elems;
    return n;
}

eg_tensor *const *eg_layer_variables(const eg_layer *layer, int *n_variables) {
    int n = layer ? layer->n_variables : 0;
    if (n_variables) *n_variables = n;
    return n ? layer->variables : NULL;
}

void eg_layer_set_trainable(eg_layer *layer, bool trainable) {
    if (!layer) return;
    layer->trainable = trainable;
    for (int i = 0; i < layer->n_variables; i++)
        eg_variable_set_trainable(layer->variables[i], trainable && !layer->frozen[i]);
}

void eg__layer_destroy(eg_layer *layer) {
    for (int i = 0; i < layer->n_variables; i++) eg_release(layer->variables[i]);
    eg_release(layer->int8_kernel);
    eg_release(layer->int8_scale);
    if (layer->inner) eg__layer_destroy(layer->inner);
    eg__layer_free_nodes(layer);
    if (layer->layer_class && layer->layer_class->free_state)
        layer->layer_class->free_state(layer->state);
    free(layer->prefix);
    free(layer->name);
    free(layer);
}

void eg_layer_free(eg_layer *layer) {
    if (!layer) return;
    if (layer->owner) {
        eg__error(EG_ERR_STATE, "layer_free: '%s' belongs to a model; eg_model_free frees it",
                  eg_layer_name(layer));
        return;
    }
    eg__layer_destroy(layer);
}
