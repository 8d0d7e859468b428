/* Layers of a user's class (eg_layer_class: Keras' Layer subclass in C) and the merging layers
 * Add and Concatenate, which are written as such classes themselves. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "nn/internal.h"

/* "MyDense" -> "my_dense", "ResNetBlock" -> "res_net_block"; NULL when out of memory. */
static char *snake_case(const char *type) {
    size_t n = strlen(type);
    char *out = malloc(2 * n + 1);
    if (!out) return NULL;
    size_t used = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)type[i];
        if (isupper(c)) {
            bool after_lower = i > 0 && (islower((unsigned char)type[i - 1]) ||
                                         isdigit((unsigned char)type[i - 1]));
            bool before_lower = i > 0 && i + 1 < n && isupper((unsigned char)type[i - 1]) &&
                                islower((unsigned char)type[i + 1]);
            if (after_lower || before_lower) out[used++] = '_';
            out[used++] = (char)tolower(c);
        } else {
            out[used++] = isalnum(c) ? (char)c : '_';
        }
    }
    out[used] = '\0';
    return out;
}

eg_layer *eg_layer_new_custom(const eg_layer_class *layer_class, void *state, const char *name) {
    const char *problem = NULL;
    eg_status code = EG_ERR_NULL_ARGUMENT;
    if (!layer_class)
        problem = "layer_class is NULL";
    else if (!layer_class->type || !layer_class->type[0])
        problem = "the class has no type name";
    else if (!layer_class->call)
        problem = "the class has no call";
    else if (layer_class->min_inputs != 0 || layer_class->max_inputs != 0) {
        code = EG_ERR_INVALID_ARGUMENT;
        if (layer_class->min_inputs < 1 || layer_class->max_inputs < layer_class->min_inputs ||
            layer_class->max_inputs > EG__LAYER_MAX_INPUTS)
            problem = "the class's input counts must satisfy 1 <= min_inputs <= max_inputs <= 16";
    }
    if (problem) {
        eg__error(code, "layer_new_custom: %s", problem);
        if (layer_class && layer_class->free_state) layer_class->free_state(state);
        return NULL;
    }
    eg_layer *layer = eg__layer_new(EG__LAYER_CUSTOM, name, "layer_new_custom");
    char *prefix = layer ? (layer_class->name_prefix ? strdup(layer_class->name_prefix)
                                                     : snake_case(layer_class->type))
                         : NULL;
    if (!prefix) {
        if (layer) eg__error(EG_ERR_OUT_OF_MEMORY, "layer_new_custom: out of host memory");
        if (layer) free(layer->name);
        free(layer);
        if (layer_class->free_state) layer_class->free_state(state);
        return NULL;
    }
    layer->layer_class = layer_class;
    layer->state = state;
    layer->prefix = prefix;
    return layer;
}

void *eg_layer_state(const eg_layer *layer) {
    return layer ? layer->state : NULL;
}

eg_tensor *eg_layer_add_weight(eg_layer *layer, const char *name, int n_dims, const int64_t *shape,
                               eg_dtype dtype, const eg_initializer *initializer, bool trainable) {
    if (!layer || !name || !name[0]) {
        eg__error(EG_ERR_NULL_ARGUMENT, "layer_add_weight: %s is NULL or empty",
                  layer ? "name" : "layer");
        return NULL;
    }
    if (layer->kind != EG__LAYER_CUSTOM) {
        eg__error(EG_ERR_INVALID_ARGUMENT,
                  "layer_add_weight: '%s' is a built-in %s; weights are added to custom layers",
                  eg_layer_name(layer), eg_layer_type(layer));
        return NULL;
    }
    if (layer->n_variables == EG__LAYER_MAX_VARIABLES) {
        eg__error(EG_ERR_INVALID_ARGUMENT,
                  "layer_add_weight: '%s' already has %d weights, the most", eg_layer_name(layer),
                  EG__LAYER_MAX_VARIABLES);
        return NULL;
    }
    if (dtype != EG_DTYPE_F32 && dtype != EG_DTYPE_F64) {
        eg__error(EG_ERR_DTYPE, "layer_add_weight: weight '%s' of '%s' must be f32 or f64, got %s",
                  name, eg_layer_name(layer), eg_dtype_name(dtype));
        return NULL;
    }
    if (!layer->name && !eg__layer_set_name(layer, eg__layer_prefix(layer))) return NULL;
    for (int i = 0; i < layer->n_variables; i++) {
        const char *existing = strrchr(eg_variable_name(layer->variables[i]), '/');
        if (existing && strcmp(existing + 1, name) == 0) {
            eg__error(EG_ERR_INVALID_ARGUMENT, "layer_add_weight: '%s' already has a weight '%s'",
                      eg_layer_name(layer), name);
            return NULL;
        }
    }
    eg_initializer zeros = eg_initializer_of(EG_INITIALIZER_ZEROS);
    /* the layer computes in its first weight's dtype (eg__layer_compute_dtype);
     * eg__layer_make_variable makes variables of the layer's dtype */
    eg_dtype previous = layer->dtype;
    layer->dtype = dtype;
    layer->frozen[layer->n_variables] = !trainable;
    eg_tensor *v =
        eg__layer_make_variable(layer, name, initializer ? initializer : &zeros, n_dims, shape);
    layer->dtype = v && layer->n_variables == 0 ? dtype : previous;
    if (!v) return NULL;
    layer->variables[layer->n_variables++] = v;
    return v;
}

eg_status eg__custom_layer_build(eg_layer *layer, int n_inputs, const eg_layer_shape *shapes) {
    const eg_layer_class *c = layer->layer_class;
    int had = layer->n_variables;
    eg_status status = c->build ? c->build(layer, layer->state, n_inputs, shapes) : EG_OK;
    if (status != EG_OK && !eg__error_pending())
        eg__error(status, "layer '%s' (%s): build failed", eg_layer_name(layer), c->type);
    eg_layer_shape output = {0};
    if (status == EG_OK) {
        if (c->compute_output_shape) {
            status = c->compute_output_shape(layer, layer->state, n_inputs, shapes, &output);
            if (status != EG_OK && !eg__error_pending())
                eg__error(status, "layer '%s' (%s): compute_output_shape failed",
                          eg_layer_name(layer), c->type);
            if (status == EG_OK && (output.n_dims < 0 || output.n_dims > EG_MAX_DIMS))
                status =
                    eg__error(EG_ERR_SHAPE, "layer '%s' (%s): compute_output_shape gave %d dims",
                              eg_layer_name(layer), c->type, output.n_dims);
        } else {
            output = shapes[0];
        }
    }
    if (status != EG_OK) {
        /* a failed build keeps no half of its weights: a retry starts afresh */
        for (int i = had; i < layer->n_variables; i++) {
            eg_release(layer->variables[i]);
            layer->variables[i] = NULL;
        }
        layer->n_variables = had;
        return status;
    }
    layer->output_n_dims = output.n_dims;
    memcpy(layer->output_shape, output.dims, sizeof output.dims);
    return EG_OK;
}

eg_tensor *eg__custom_layer_call(eg_layer *layer, int n_inputs, const eg_tensor *const *inputs,
                                 const eg_tensor *const *variables, bool training) {
    const eg_layer_class *c = layer->layer_class;
    eg_tensor *y = c->call(layer, layer->state, n_inputs, eg__tensor_handles(inputs),
                           eg__tensor_handles(variables), training);
    if (!y && !eg__error_pending())
        eg__error(EG_ERR_INTERNAL, "layer '%s' (%s): call returned NULL without an error",
                  eg_layer_name(layer), c->type);
    return y;
}

/* ---- Add and Concatenate ---- */

/* Whether two sizes can be one (-1 is unknown and matches any). */
static bool sizes_agree(int64_t a, int64_t b) {
    return a < 0 || b < 0 || a == b;
}

static eg_status shape_mismatch(const eg_layer *layer, int n_inputs, const eg_layer_shape *shapes,
                                const char *rule) {
    char text[512];
    size_t used = 0;
    for (int i = 0; i < n_inputs && used < sizeof text; i++) {
        char one[160];
        eg__shape_format(shapes[i].n_dims, shapes[i].dims, one, sizeof one);
        used += (size_t)snprintf(text + used, sizeof text - used, "%s%s", i ? ", " : "", one);
    }
    return eg__error(EG_ERR_SHAPE, "%s: '%s' needs inputs %s, got %s", eg_layer_type(layer),
                     eg_layer_name(layer), rule, text);
}

static eg_status add_output_shape(eg_layer *layer, void *state, int n_inputs,
                                  const eg_layer_shape *shapes, eg_layer_shape *output) {
    (void)state;
    *output = shapes[0];
    for (int i = 1; i < n_inputs; i++) {
        if (shapes[i].n_dims != output->n_dims)
            return shape_mismatch(layer, n_inputs, shapes, "of one shape");
        for (int d = 0; d < output->n_dims; d++) {
            if (!sizes_agree(shapes[i].dims[d], output->dims[d]))
                return shape_mismatch(layer, n_inputs, shapes, "of one shape");
            if (output->dims[d] < 0) output->dims[d] = shapes[i].dims[d];
        }
    }
    return EG_OK;
}

static eg_tensor *add_call(eg_layer *layer, void *state, int n_inputs, eg_tensor *const *inputs,
                           eg_tensor *const *variables, bool training) {
    (void)layer, (void)state, (void)variables, (void)training;
    eg_tensor *sum = eg_add(inputs[0], inputs[1]);
    for (int i = 2; i < n_inputs && sum; i++) {
        eg_tensor *next = eg_add(sum, inputs[i]);
        eg_release(sum);
        sum = next;
    }
    return sum;
}

static const eg_layer_class add_class = {
    .type = "Add",
    .name_prefix = "add",
    .min_inputs = 2,
    .max_inputs = EG__LAYER_MAX_INPUTS,
    .compute_output_shape = add_output_shape,
    .call = add_call,
};

eg_layer *eg_add_layer_new(const char *name) {
    return eg_layer_new_custom(&add_class, NULL, name);
}

/* The concatenation axis for inputs of n_dims dims, or -1 when it is out of range or the batch. */
static int concat_axis(const eg_layer *layer, int n_dims) {
    int axis = *(const int *)layer->state;
    if (axis < 0) axis += n_dims;
    return axis >= 1 && axis < n_dims ? axis : -1;
}

static eg_status concat_output_shape(eg_layer *layer, void *state, int n_inputs,
                                     const eg_layer_shape *shapes, eg_layer_shape *output) {
    int axis = concat_axis(layer, shapes[0].n_dims);
    if (axis < 0)
        return eg__error(EG_ERR_INVALID_ARGUMENT,
                         "Concatenate: '%s' has axis %d, which inputs of %d dims lack (or is "
                         "the batch)",
                         eg_layer_name(layer), *(const int *)state, shapes[0].n_dims);
    *output = shapes[0];
    for (int i = 1; i < n_inputs; i++) {
        if (shapes[i].n_dims != output->n_dims)
            return shape_mismatch(layer, n_inputs, shapes, "of one rank");
        for (int d = 0; d < output->n_dims; d++) {
            if (d == axis) {
                int64_t a = output->dims[d], b = shapes[i].dims[d];
                output->dims[d] = a < 0 || b < 0 ? -1 : a + b;
            } else if (!sizes_agree(shapes[i].dims[d], output->dims[d])) {
                return shape_mismatch(layer, n_inputs, shapes, "that agree off the axis");
            } else if (output->dims[d] < 0) {
                output->dims[d] = shapes[i].dims[d];
            }
        }
    }
    return EG_OK;
}

static eg_tensor *concat_call(eg_layer *layer, void *state, int n_inputs, eg_tensor *const *inputs,
                              eg_tensor *const *variables, bool training) {
    (void)state, (void)variables, (void)training;
    int axis = concat_axis(layer, inputs[0]->n_dims);
    if (axis < 0) {
        eg__error(EG_ERR_SHAPE, "Concatenate: '%s' has no axis %d in an input of %d dims",
                  eg_layer_name(layer), *(const int *)layer->state, inputs[0]->n_dims);
        return NULL;
    }
    return eg_concat(n_inputs, inputs, axis);
}

static const eg_layer_class concatenate_class = {
    .type = "Concatenate",
    .name_prefix = "concatenate",
    .min_inputs = 2,
    .max_inputs = EG__LAYER_MAX_INPUTS,
    .compute_output_shape = concat_output_shape,
    .call = concat_call,
    .free_state = free,
};

eg_layer *eg_concatenate_new(int axis, const char *name) {
    int *state = malloc(sizeof *state);
    if (!state) {
        eg__error(EG_ERR_OUT_OF_MEMORY, "concatenate: out of host memory");
        return NULL;
    }
    *state = axis;
    return eg_layer_new_custom(&concatenate_class, state, name);
}
