/* The Sequential model: an ordered list of owned layers, built and called in turn, with Keras'
 * variable collection and summary. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/random.h"
#include "nn/internal.h"

void *eg__model_attachment(const eg_model *model) {
    return model ? model->attachment : NULL;
}

void eg__model_attach(eg_model *model, void *attachment, void (*attachment_free)(void *)) {
    if (model->attachment && model->attachment_free) model->attachment_free(model->attachment);
    model->attachment = attachment;
    model->attachment_free = attachment_free;
}

bool eg__model_is_built(const eg_model *model) {
    return model && model->built;
}

eg_model *eg_sequential_new(const char *name) {
    eg_model *model = calloc(1, sizeof *model);
    char *copy = strdup(name ? name : "sequential");
    if (!model || !copy) {
        free(model);
        free(copy);
        eg__error(EG_ERR_OUT_OF_MEMORY, "sequential_new: out of host memory");
        return NULL;
    }
    model->name = copy;
    model->policy = eg_global_policy();
    return model;
}

eg_status eg_model_set_policy(eg_model *model, eg_policy policy) {
    if (!model) return eg__error(EG_ERR_NULL_ARGUMENT, "model_set_policy: model is NULL");
    eg_status status = eg__policy_check(policy, "model_set_policy");
    if (status != EG_OK) return status;
    model->policy = policy;
    model->policy_set = true;
    for (int i = 0; i < model->n_layers; i++)
        if (!model->layers[i]->policy_fixed) model->layers[i]->policy = policy;
    return EG_OK;
}

eg_policy eg_model_policy(const eg_model *model) {
    return model ? model->policy : EG_POLICY_FLOAT32;
}

const char *eg_model_name(const eg_model *model) {
    return model ? model->name : "";
}
int eg_model_n_layers(const eg_model *model) {
    return model ? model->n_layers : 0;
}
eg_layer *eg_model_layer(const eg_model *model, int index) {
    if (!model || index < 0 || index >= model->n_layers) return NULL;
    return model->layers[index];
}

static bool name_taken(const eg_model *model, const char *name) {
    for (int i = 0; i < model->n_layers; i++)
        if (strcmp(eg_layer_name(model->layers[i]), name) == 0) return true;
    return false;
}

/* The last layer's output shape, or the model's input shape when it has no layers. */
static void model_output_shape(const eg_model *model, int *n_dims, const int64_t **shape) {
    if (model->n_layers == 0) {
        *n_dims = model->input_n_dims;
        *shape = model->input_shape;
    } else {
        const eg_layer *last = model->layers[model->n_layers - 1];
        *n_dims = last->output_n_dims;
        *shape = last->output_shape;
    }
}

eg_status eg_sequential_add(eg_model *model, eg_layer *layer) {
    if (!layer) {
        eg__error(EG_ERR_NULL_ARGUMENT, "sequential_add: layer is NULL");
        return eg_last_status();
    }
    if (layer->owner)
        return eg__error(EG_ERR_INVALID_ARGUMENT,
                         "sequential_add: layer '%s' already belongs to model '%s'",
                         eg_layer_name(layer), layer->owner->name);
    eg_status status = EG_OK;
    int min_inputs, max_inputs;
    eg__layer_arity(layer, &min_inputs, &max_inputs);
    if (!model) {
        status = eg__error(EG_ERR_NULL_ARGUMENT, "sequential_add: model is NULL");
        goto fail;
    }
    if (model->functional) {
        status = eg__error(EG_ERR_INVALID_ARGUMENT,
                           "sequential_add: model '%s' is functional: its layers come from "
                           "eg_functional_model_new",
                           model->name);
        goto fail;
    }
    if (min_inputs != 1 || layer->kind == EG__LAYER_INPUT || layer->n_nodes) {
        status = eg__error(EG_ERR_INVALID_ARGUMENT,
                           "sequential_add: layer '%s' (%s) %s; a Sequential model holds "
                           "layers of one input",
                           eg_layer_name(layer), eg_layer_type(layer),
                           layer->n_nodes ? "was applied to symbols (functional API)"
                                          : "takes several inputs or none");
        goto fail;
    }
    if (layer->name_fixed) {
        if (name_taken(model, layer->name)) {
            status = eg__error(EG_ERR_STATE,
                               "sequential_add: model '%s' already has a layer "
                               "named '%s'",
                               model->name, layer->name);
            goto fail;
        }
    } else {
        /* Keras-style unique names within the model: dense, dense_1, dense_2, ... */
        char name[128];
        const char *prefix = eg__layer_prefix(layer);
        snprintf(name, sizeof name, "%s", prefix);
        for (int k = 1; name_taken(model, name); k++)
            snprintf(name, sizeof name, "%s_%d", prefix, k);
        bool renamed = strcmp(eg_layer_name(layer), name) != 0;
        if (!eg__layer_set_name(layer, name)) {
            status = eg_last_status();
            goto fail;
        }
        layer->name_fixed = true;
        if (renamed && layer->n_variables && (status = eg__layer_rename_variables(layer)) != EG_OK)
            goto fail;
    }
    if (model->n_layers == model->capacity) {
        int capacity = model->capacity ? model->capacity * 2 : 8;
        eg_layer **layers = realloc(model->layers, (size_t)capacity * sizeof *layers);
        if (!layers) {
            status = eg__error(EG_ERR_OUT_OF_MEMORY, "sequential_add: out of host memory");
            goto fail;
        }
        model->layers = layers;
        model->capacity = capacity;
    }
    if (model->built) {
        /* A built model builds the new layer at once from its current output shape. */
        int n_dims;
        const int64_t *shape;
        model_output_shape(model, &n_dims, &shape);
        if ((status = eg_layer_build(layer, n_dims, shape)) != EG_OK) goto fail;
    }
    layer->owner = model;
    if (model->policy_set && !layer->policy_fixed) layer->policy = model->policy;
    model->layers[model->n_layers++] = layer;
    return EG_OK;
fail:
    eg__layer_destroy(layer);
    return status;
}

eg_status eg_model_build(eg_model *model, int n_dims, const int64_t *input_shape) {
    if (!model) return eg__error(EG_ERR_NULL_ARGUMENT, "model_build: model is NULL");
    if (n_dims < 0 || n_dims > EG_MAX_DIMS || (n_dims > 0 && !input_shape))
        return eg__error(EG_ERR_SHAPE, "model_build: invalid input shape (%d dims)", n_dims);
    /* the batch dim is unknown, as eg_model_call builds it: a model serves every batch size,
     * and its summary says None there as Keras' does */
    int64_t batchless[EG_MAX_DIMS];
    if (n_dims) memcpy(batchless, input_shape, (size_t)n_dims * sizeof *batchless);
    if (n_dims >= 2) batchless[0] = -1;
    input_shape = batchless;
    if (model->functional) {
        bool fits = n_dims == model->input_n_dims && model->n_inputs == 1;
        for (int d = 0; fits && d < n_dims; d++)
            fits = model->input_shape[d] < 0 || model->input_shape[d] == input_shape[d];
        if (fits) return EG_OK;
        char wanted[160], got[160];
        eg__shape_format(model->input_n_dims, model->input_shape, wanted, sizeof wanted);
        eg__shape_format(n_dims, input_shape, got, sizeof got);
        return eg__error(EG_ERR_SHAPE,
                         "model_build: functional model '%s' is built for input %s%s, not %s",
                         model->name, wanted, model->n_inputs > 1 ? " (and more inputs)" : "", got);
    }
    /* A build that fails part way (out of memory at the third layer, say) is undone: the layers
     * it built lose their variables again and every generator goes back to where it was, so that
     * a retry draws the same initial weights as a build that succeeded the first time. */
    typedef struct undo {
        bool was_built;
        uint64_t position;
    } undo;
    undo *undos = model->n_layers ? malloc(sizeof *undos * (size_t)model->n_layers) : NULL;
    if (model->n_layers && !undos)
        return eg__error(EG_ERR_OUT_OF_MEMORY, "model_build: out of host memory");
    for (int i = 0; i < model->n_layers; i++)
        undos[i] =
            (undo){model->layers[i]->built, eg__generator_position(model->layers[i]->generator)};
    const int64_t *shape = input_shape;
    int n = n_dims;
    eg_status status = EG_OK;
    for (int i = 0; i < model->n_layers && status == EG_OK; i++) {
        eg_layer *layer = model->layers[i];
        status = eg_layer_build(layer, n, shape);
        n = layer->output_n_dims;
        shape = layer->output_shape;
    }
    if (status != EG_OK)
        for (int i = model->n_layers - 1; i >= 0; i--) {
            if (!undos[i].was_built && model->layers[i]->built) eg__layer_unbuild(model->layers[i]);
            eg__generator_set_position(model->layers[i]->generator, undos[i].position);
        }
    free(undos);
    if (status != EG_OK) return status;
    if (!model->built) {
        model->input_n_dims = n_dims;
        if (n_dims) memcpy(model->input_shape, input_shape, (size_t)n_dims * sizeof(int64_t));
        model->built = true;
    }
    return EG_OK;
}

/* The mask (Keras' masking) after a layer of a Sequential: an Embedding with mask_zero makes one
 * from its ids; layers that keep the time axis (elementwise ones, Dense, recurrent layers that
 * return sequences) hand it on; any other layer drops it. Consumes *mask and replaces it;
 * false with an error when the Embedding's mask could not be made. */
static bool next_mask(const eg_layer *layer, const eg_tensor *in, const eg_tensor *out,
                      eg_tensor **mask) {
    if (layer->kind == EG__LAYER_EMBEDDING) {
        eg_release(*mask);
        *mask = eg_embedding_mask(layer, in);
        return *mask || !layer->embedding.mask_zero;
    }
    bool keeps = out->n_dims >= 2 && in->n_dims >= 2 && out->shape[1] == in->shape[1];
    switch (layer->kind) {
    case EG__LAYER_DROPOUT:
    case EG__LAYER_ACTIVATION:
    case EG__LAYER_DENSE:
    case EG__LAYER_LAYER_NORM:
        break;
    case EG__LAYER_LSTM:
    case EG__LAYER_GRU:
    case EG__LAYER_BIDIRECTIONAL:
        keeps = keeps && layer->rnn.return_sequences;
        break;
    case EG__LAYER_CUSTOM:
        keeps = keeps && eg__layer_passes_mask(layer);
        break;
    default:
        keeps = false;
        break;
    }
    if (!keeps) {
        eg_release(*mask);
        *mask = NULL;
    }
    return true;
}

eg_tensor *eg_model_call(eg_model *model, const eg_tensor *x, bool training) {
    if (!model) {
        eg__error(EG_ERR_NULL_ARGUMENT, "model_call: model is NULL");
        return NULL;
    }
    if (!eg__check_arg(x, "model_call", 1)) return NULL;
    if (model->functional) {
        eg_tensor *y = NULL;
        return eg__functional_call(model, 1, &x, training, 1, &y) == EG_OK ? y : NULL;
    }
    if (!model->built) {
        int64_t shape[EG_MAX_DIMS];
        if (x->n_dims) memcpy(shape, x->shape, (size_t)x->n_dims * sizeof *shape);
        if (x->n_dims >= 2) shape[0] = -1;
        if (eg_model_build(model, x->n_dims, shape) != EG_OK) return NULL;
    }
    if (model->n_layers == 0) return eg_reshape(x, x->n_dims, x->shape);
    eg_tensor *h = NULL, *mask = NULL;
    for (int i = 0; i < model->n_layers; i++) {
        eg_layer *layer = model->layers[i];
        const eg_tensor *in = h ? h : x;
        eg_tensor *next = NULL;
        if (mask && eg__layer_is_recurrent(layer)) {
            if (eg_rnn_call(layer, in, mask, NULL, training, &next, NULL) != EG_OK) next = NULL;
        } else if (mask && eg__layer_takes_mask(layer)) {
            eg_tensor *both[2] = {(eg_tensor *)in, mask};
            next = eg_layer_call_multi(layer, 2, both, training);
        } else {
            next = eg_layer_call(layer, in, training);
        }
        bool masked = next && next_mask(layer, in, next, &mask);
        eg_release(h); /* tapes keep what they need */
        h = next;
        if (!masked) {
            eg_release(mask);
            eg_release(h);
            return NULL;
        }
    }
    eg_release(mask);
    return h;
}

eg_status eg_model_call_multi(eg_model *model, int n_inputs, eg_tensor *const *inputs_in,
                              bool training, int n_outputs, eg_tensor **outputs) {
    const eg_tensor *const *inputs = eg__const_tensors(inputs_in);
    if (outputs)
        for (int i = 0; i < n_outputs; i++) outputs[i] = NULL;
    if (!model || !outputs || (n_inputs > 0 && !inputs)) {
        if (eg__error_pending()) return eg_last_status();
        return eg__error(EG_ERR_NULL_ARGUMENT, "model_call_multi: %s is NULL",
                         !model     ? "model"
                         : !outputs ? "outputs"
                                    : "inputs");
    }
    if (model->functional)
        return eg__functional_call(model, n_inputs, inputs, training, n_outputs, outputs);
    if (n_inputs != 1 || n_outputs != 1)
        return eg__error(EG_ERR_INVALID_ARGUMENT,
                         "model_call_multi: Sequential model '%s' takes 1 input and gives 1 "
                         "output, asked for %d and %d",
                         model->name, n_inputs, n_outputs);
    outputs[0] = eg_model_call(model, inputs[0], training);
    return outputs[0] ? EG_OK : eg_last_status();
}

int eg_model_n_inputs(const eg_model *model) {
    return !model ? 0 : model->functional ? model->n_inputs : 1;
}

int eg_model_n_outputs(const eg_model *model) {
    return !model ? 0 : model->functional ? model->n_outputs : 1;
}

/* Fills *array (grown as needed) with the layers' variables, trainable ones only or all. */
static eg_tensor *const *collect_variables(eg_model *model, int *n_variables, bool trainable_only,
                                           eg_tensor ***array, int *capacity, const char *what) {
    if (n_variables) *n_variables = 0;
    if (!model || !n_variables) {
        eg__error(EG_ERR_NULL_ARGUMENT, "%s: %s is NULL", what, model ? "n_variables" : "model");
        return NULL;
    }
    int n = 0;
    for (int i = 0; i < model->n_layers; i++) n += model->layers[i]->n_variables;
    if (n + 1 > *capacity) {
        eg_tensor **grown = realloc(*array, (size_t)(n + 1) * sizeof *grown);
        if (!grown) {
            eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", what);
            return NULL;
        }
        *array = grown;
        *capacity = n + 1;
    }
    int count = 0;
    for (int i = 0; i < model->n_layers; i++) {
        const eg_layer *layer = model->layers[i];
        for (int j = 0; j < layer->n_variables; j++)
            if (!trainable_only || eg_variable_trainable(layer->variables[j]))
                (*array)[count++] = layer->variables[j];
    }
    (*array)[count] = NULL;
    *n_variables = count;
    return *array;
}

eg_tensor *const *eg_model_trainable_variables(eg_model *model, int *n_variables) {
    return collect_variables(model, n_variables, true, model ? &model->trainable : NULL,
                             model ? &model->trainable_capacity : NULL,
                             "model_trainable_variables");
}

eg_tensor *const *eg_model_variables(eg_model *model, int *n_variables) {
    return collect_variables(model, n_variables, false, model ? &model->all : NULL,
                             model ? &model->all_capacity : NULL, "model_variables");
}

int64_t eg_model_count_params(const eg_model *model) {
    int64_t n = 0;
    for (int i = 0; model && i < model->n_layers; i++) n += eg_layer_count_params(model->layers[i]);
    return n;
}

void eg_model_free(eg_model *model) {
    if (!model) return;
    if (model->attachment && model->attachment_free) model->attachment_free(model->attachment);
    for (int i = 0; i < model->n_layers; i++) eg__layer_destroy(model->layers[i]);
    free(model->layers);
    free(model->nodes);
    free(model->inputs);
    free(model->outputs);
    free(model->n_readers);
    free(model->input_offsets);
    free(model->input_positions);
    free(model->trainable);
    free(model->all);
    free(model->name);
    free(model);
}
