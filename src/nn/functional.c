/* Keras' functional API: symbols (the outputs of layer applications, Keras' nodes), and the
 * model that runs the graph between a set of inputs and outputs in topological order. */
#include <stdlib.h>
#include <string.h>

#include "nn/internal.h"

/* ---- symbols ---- */

/* Appends a node of `layer` reading `inputs`, with the layer's output shape; NULL when out of
 * host memory (error raised). */
static eg_symbol *add_node(eg_layer *layer, int n_inputs, const eg_symbol *const *inputs) {
    if (layer->n_nodes == layer->nodes_capacity) {
        int capacity = layer->nodes_capacity ? 2 * layer->nodes_capacity : 2;
        eg_symbol **grown = realloc(layer->nodes, (size_t)capacity * sizeof *grown);
        if (!grown) goto out_of_memory;
        layer->nodes = grown;
        layer->nodes_capacity = capacity;
    }
    eg_symbol *node = calloc(1, sizeof *node);
    if (!node) goto out_of_memory;
    if (n_inputs) {
        node->inputs = malloc((size_t)n_inputs * sizeof *node->inputs);
        if (!node->inputs) {
            free(node);
            goto out_of_memory;
        }
        memcpy(node->inputs, inputs, (size_t)n_inputs * sizeof *node->inputs);
    }
    node->layer = layer;
    node->node_index = layer->n_nodes;
    node->n_inputs = n_inputs;
    node->n_dims = layer->output_n_dims;
    memcpy(node->shape, layer->output_shape, sizeof node->shape);
    node->dtype = EG_DTYPE_F32;
    layer->nodes[layer->n_nodes++] = node;
    return node;
out_of_memory:
    eg__error(EG_ERR_OUT_OF_MEMORY, "layer_apply: out of host memory");
    return NULL;
}

void eg__layer_free_nodes(eg_layer *layer) {
    for (int i = 0; i < layer->n_nodes; i++) {
        free(layer->nodes[i]->inputs);
        free(layer->nodes[i]);
    }
    free(layer->nodes);
    layer->nodes = NULL;
    layer->n_nodes = layer->nodes_capacity = 0;
}

eg_symbol *eg_input(int n_dims, const int64_t *shape, eg_dtype dtype, const char *name) {
    if (n_dims < 0 || n_dims >= EG_MAX_DIMS || (n_dims > 0 && !shape)) {
        eg__error(EG_ERR_SHAPE, "input: a shape of 0 to %d dims (without the batch), got %d",
                  EG_MAX_DIMS - 1, n_dims);
        return NULL;
    }
    for (int d = 0; d < n_dims; d++)
        if (shape[d] < 1 && shape[d] != -1) {
            eg__error(EG_ERR_SHAPE, "input: size %lld of dim %d must be >= 1 or -1 (unknown)",
                      (long long)shape[d], d);
            return NULL;
        }
    if ((unsigned)dtype >= EG_DTYPE_COUNT) {
        eg__error(EG_ERR_DTYPE, "input: invalid dtype %d", (int)dtype);
        return NULL;
    }
    eg_layer *layer = eg__layer_new(EG__LAYER_INPUT, name, "input");
    if (!layer) return NULL;
    layer->built = true;
    layer->output_n_dims = n_dims + 1;
    layer->output_shape[0] = -1;
    if (n_dims) memcpy(layer->output_shape + 1, shape, (size_t)n_dims * sizeof *shape);
    eg_symbol *node = add_node(layer, 0, NULL);
    if (!node) {
        eg__layer_destroy(layer);
        return NULL;
    }
    node->dtype = dtype;
    return node;
}

static bool same_shape(const eg_symbol *a, const eg_symbol *b) {
    if (a->n_dims != b->n_dims) return false;
    for (int d = 0; d < a->n_dims; d++)
        if (a->shape[d] != b->shape[d]) return false;
    return true;
}

/* Builds the layer for the inputs' shapes, or checks that a shared layer gets the shapes it was
 * first applied to (its output shape is that application's). */
static eg_status build_for_symbols(eg_layer *layer, int n_inputs, const eg_symbol *const *inputs) {
    if (layer->n_nodes) {
        const eg_symbol *first = layer->nodes[0];
        bool same = first->n_inputs == n_inputs;
        for (int i = 0; same && i < n_inputs; i++) same = same_shape(first->inputs[i], inputs[i]);
        if (!same) {
            char was[160], now[160];
            eg__shape_format(first->inputs[0]->n_dims, first->inputs[0]->shape, was, sizeof was);
            eg__shape_format(inputs[0]->n_dims, inputs[0]->shape, now, sizeof now);
            return eg__error(EG_ERR_SHAPE,
                             "layer_apply: shared layer '%s' (%s) was applied to %s first and "
                             "now to %s; a shared layer takes the inputs' shapes of its first "
                             "application",
                             eg_layer_name(layer), eg_layer_type(layer), was, now);
        }
        return EG_OK;
    }
    /* A layer without variables built by an earlier call knows that call's output shape only:
     * it builds again for these inputs. */
    if (layer->built && layer->n_variables == 0 && layer->kind != EG__LAYER_CUSTOM)
        layer->built = false;
    eg_layer_shape shapes[EG__LAYER_MAX_INPUTS];
    for (int i = 0; i < n_inputs; i++) {
        shapes[i].n_dims = inputs[i]->n_dims;
        memcpy(shapes[i].dims, inputs[i]->shape, sizeof shapes[i].dims);
    }
    return eg__layer_build_multi(layer, n_inputs, shapes);
}

eg_symbol *eg_layer_apply_multi(eg_layer *layer, int n_inputs, const eg_symbol *const *inputs) {
    if (!layer) {
        if (!eg__error_pending()) eg__error(EG_ERR_NULL_ARGUMENT, "layer_apply: layer is NULL");
        return NULL;
    }
    bool fresh = layer->n_nodes == 0 && !layer->owner;
    eg_status status = EG_OK;
    int min_inputs, max_inputs;
    eg__layer_arity(layer, &min_inputs, &max_inputs);
    bool null_input = n_inputs > 0 && !inputs;
    for (int i = 0; !null_input && i < n_inputs; i++) null_input = !inputs[i];
    if (null_input) {
        status = EG_ERR_NULL_ARGUMENT; /* the error that made it NULL stands (DESIGN.md) */
    } else if (layer->owner) {
        status = eg__error(EG_ERR_INVALID_ARGUMENT,
                           "layer_apply: layer '%s' already belongs to model '%s'",
                           eg_layer_name(layer), layer->owner->name);
    } else if (layer->kind == EG__LAYER_INPUT) {
        status = eg__error(EG_ERR_INVALID_ARGUMENT,
                           "layer_apply: '%s' is an InputLayer: it is applied by eg_input",
                           eg_layer_name(layer));
    } else if (n_inputs < min_inputs || n_inputs > max_inputs) {
        status = eg__error(
            EG_ERR_INVALID_ARGUMENT, "layer_apply: '%s' (%s) takes %d to %d inputs, got %d",
            eg_layer_name(layer), eg_layer_type(layer), min_inputs, max_inputs, n_inputs);
    } else {
        status = build_for_symbols(layer, n_inputs, inputs);
    }
    eg_symbol *node = status == EG_OK ? add_node(layer, n_inputs, inputs) : NULL;
    if (!node && fresh) eg__layer_destroy(layer);
    return node;
}

eg_symbol *eg_layer_apply(eg_layer *layer, const eg_symbol *x) {
    return eg_layer_apply_multi(layer, 1, &x);
}

const int64_t *eg_symbol_shape(const eg_symbol *symbol, int *n_dims) {
    if (n_dims) *n_dims = symbol ? symbol->n_dims : 0;
    return symbol ? symbol->shape : NULL;
}

eg_layer *eg_symbol_layer(const eg_symbol *symbol) {
    return symbol ? symbol->layer : NULL;
}

/* ---- the model ---- */

/* A growing list of pointers. */
typedef struct pointer_list {
    const void **items;
    int n, capacity;
} pointer_list;

static int list_find(const pointer_list *list, const void *item) {
    for (int i = 0; i < list->n; i++)
        if (list->items[i] == item) return i;
    return -1;
}

static bool list_push(pointer_list *list, const void *item) {
    if (list->n == list->capacity) {
        int capacity = list->capacity ? 2 * list->capacity : 16;
        const void **grown = realloc(list->items, (size_t)capacity * sizeof *grown);
        if (!grown) {
            eg__error(EG_ERR_OUT_OF_MEMORY, "functional_model_new: out of host memory");
            return false;
        }
        list->items = grown;
        list->capacity = capacity;
    }
    list->items[list->n++] = item;
    return true;
}

/* Depth-first from node: every node it needs, then itself (a topological order). An InputLayer
 * node that is not one of the model's inputs disconnects the graph. */
static eg_status visit(const eg_symbol *node, const pointer_list *inputs, pointer_list *order,
                       const eg_symbol *output) {
    if (list_find(order, node) >= 0) return EG_OK;
    if (node->layer->kind == EG__LAYER_INPUT)
        return eg__error(EG_ERR_INVALID_ARGUMENT,
                         "functional_model_new: graph disconnected: output '%s' needs input "
                         "'%s', which is not among the model's inputs",
                         eg_layer_name(output->layer), eg_layer_name(node->layer));
    for (int i = 0; i < node->n_inputs; i++) {
        eg_status status = visit(node->inputs[i], inputs, order, output);
        if (status != EG_OK) return status;
    }
    return list_push(order, node) ? EG_OK : eg_last_status();
}

static bool name_in(char *const *names, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (names[i] && strcmp(names[i], name) == 0) return true;
    return false;
}

/* Keras' unique names for the layers (kept: the names given; the others: prefix, prefix_1, ...
 * avoiding every given name), into names[i] (owned). */
static eg_status unique_names(eg_layer *const *layers, int n, char **names) {
    for (int i = 0; i < n; i++) {
        if (!layers[i]->name_fixed) continue;
        if (name_in(names, n, layers[i]->name))
            return eg__error(EG_ERR_STATE,
                             "functional_model_new: two layers are named '%s'; names must be "
                             "unique in a model",
                             layers[i]->name);
        if (!(names[i] = strdup(layers[i]->name))) goto out_of_memory;
    }
    for (int i = 0; i < n; i++) {
        if (layers[i]->name_fixed) continue;
        char name[128];
        const char *prefix = eg__layer_prefix(layers[i]);
        snprintf(name, sizeof name, "%s", prefix);
        for (int k = 1; name_in(names, n, name); k++)
            snprintf(name, sizeof name, "%s_%d", prefix, k);
        if (!(names[i] = strdup(name))) goto out_of_memory;
    }
    return EG_OK;
out_of_memory:
    return eg__error(EG_ERR_OUT_OF_MEMORY, "functional_model_new: out of host memory");
}

/* Where each node's inputs are in the node order: model->input_positions[offsets[i] + k]. */
static eg_status index_inputs(eg_model *model, int **offsets, int **positions) {
    size_t total = 0, n_nodes = (size_t)(model->n_nodes > 0 ? model->n_nodes : 0);
    for (size_t i = 0; i < n_nodes; i++) total += (size_t)model->nodes[i]->n_inputs;
    *offsets = malloc((n_nodes + 1) * sizeof **offsets);
    *positions = malloc((total ? total : 1) * sizeof **positions);
    model->n_readers = calloc(n_nodes ? n_nodes : 1, sizeof *model->n_readers);
    if (!*offsets || !*positions || !model->n_readers)
        return eg__error(EG_ERR_OUT_OF_MEMORY, "functional_model_new: out of host memory");
    int used = 0;
    for (int i = 0; i < model->n_nodes; i++) {
        (*offsets)[i] = used;
        for (int k = 0; k < model->nodes[i]->n_inputs; k++) {
            int p = eg__model_node_position(model, model->nodes[i]->inputs[k]);
            (*positions)[used++] = p;
            model->n_readers[p]++;
        }
    }
    (*offsets)[model->n_nodes] = used;
    return EG_OK;
}

int eg__model_node_position(const eg_model *model, const eg_symbol *node) {
    for (int i = 0; i < model->n_nodes; i++)
        if (model->nodes[i] == node) return i;
    return -1;
}

eg_model *eg_functional_model_new(int n_inputs, const eg_symbol *const *inputs, int n_outputs,
                                  const eg_symbol *const *outputs, const char *name) {
    const char *what = "functional_model_new";
    if (n_inputs < 1 || n_outputs < 1 || !inputs || !outputs) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "%s: needs inputs and outputs (got %d and %d)", what,
                  n_inputs, n_outputs);
        return NULL;
    }
    for (int i = 0; i < n_inputs + n_outputs; i++) {
        const eg_symbol *s = i < n_inputs ? inputs[i] : outputs[i - n_inputs];
        if (!s) {
            if (!eg__error_pending())
                eg__error(EG_ERR_NULL_ARGUMENT, "%s: %s %d is NULL", what,
                          i < n_inputs ? "input" : "output", i < n_inputs ? i : i - n_inputs);
            return NULL;
        }
    }
    pointer_list input_list = {0}, order = {0}, layers = {0};
    char **names = NULL;
    eg_model *model = NULL;
    eg_status status = EG_OK;
    for (int i = 0; i < n_inputs && status == EG_OK; i++) {
        if (inputs[i]->layer->kind != EG__LAYER_INPUT)
            status = eg__error(EG_ERR_INVALID_ARGUMENT,
                               "%s: input %d comes from layer '%s' (%s), not from eg_input", what,
                               i, eg_layer_name(inputs[i]->layer), eg_layer_type(inputs[i]->layer));
        else if (list_find(&input_list, inputs[i]) >= 0)
            status = eg__error(EG_ERR_INVALID_ARGUMENT, "%s: input '%s' is given twice", what,
                               eg_layer_name(inputs[i]->layer));
        else if (!list_push(&input_list, inputs[i]) || !list_push(&order, inputs[i]))
            status = eg_last_status();
    }
    for (int i = 0; i < n_outputs && status == EG_OK; i++)
        status = visit(outputs[i], &input_list, &order, outputs[i]);
    for (int i = 0; i < order.n && status == EG_OK; i++) {
        eg_layer *layer = ((const eg_symbol *)order.items[i])->layer;
        if (layer->owner)
            status =
                eg__error(EG_ERR_INVALID_ARGUMENT, "%s: layer '%s' already belongs to model '%s'",
                          what, eg_layer_name(layer), layer->owner->name);
        else if (list_find(&layers, layer) < 0 && !list_push(&layers, layer))
            status = eg_last_status();
    }
    if (status == EG_OK && !(names = calloc((size_t)layers.n, sizeof *names)))
        status = eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", what);
    if (status == EG_OK) status = unique_names((eg_layer *const *)layers.items, layers.n, names);
    if (status == EG_OK && !(model = eg_sequential_new(name ? name : "model")))
        status = eg_last_status();
    int *offsets = NULL, *positions = NULL;
    if (status == EG_OK) {
        model->functional = true;
        model->nodes = (const eg_symbol **)order.items;
        model->n_nodes = order.n;
        order.items = NULL;
        model->inputs = malloc((size_t)n_inputs * sizeof *model->inputs);
        model->outputs = malloc((size_t)n_outputs * sizeof *model->outputs);
        if (!model->inputs || !model->outputs)
            status = eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", what);
    }
    if (status == EG_OK) {
        memcpy(model->inputs, inputs, (size_t)n_inputs * sizeof *inputs);
        memcpy(model->outputs, outputs, (size_t)n_outputs * sizeof *outputs);
        model->n_inputs = n_inputs;
        model->n_outputs = n_outputs;
        status = index_inputs(model, &offsets, &positions);
    }
    /* everything checked: rename (new variables for built layers renamed), then take */
    for (int i = 0; i < layers.n && status == EG_OK; i++) {
        eg_layer *layer = (eg_layer *)layers.items[i];
        bool renamed = strcmp(eg_layer_name(layer), names[i]) != 0;
        if (!eg__layer_set_name(layer, names[i]))
            status = eg_last_status();
        else if (renamed && layer->n_variables)
            status = eg__layer_rename_variables(layer);
        layer->name_fixed = true;
    }
    if (status == EG_OK) {
        model->layers = (eg_layer **)layers.items;
        model->n_layers = model->capacity = layers.n;
        layers.items = NULL;
        model->input_offsets = offsets;
        model->input_positions = positions;
        offsets = positions = NULL;
        for (int i = 0; i < model->n_layers; i++) model->layers[i]->owner = model;
        model->input_n_dims = inputs[0]->n_dims;
        memcpy(model->input_shape, inputs[0]->shape, sizeof model->input_shape);
        model->built = true;
    }
    for (int i = 0; names && i < layers.n; i++) free(names[i]);
    free(names);
    free(offsets);
    free(positions);
    free(input_list.items);
    free(order.items);
    free(layers.items);
    if (status != EG_OK) {
        eg_model_free(model);
        return NULL;
    }
    return model;
}

/* The input tensor fits the Input node: its dtype, rank and every known size. */
static eg_status check_input(const eg_model *model, int index, const eg_tensor *x) {
    const eg_symbol *node = model->inputs[index];
    if (x->dtype != node->dtype)
        return eg__error(EG_ERR_DTYPE, "model_call: input %d ('%s') of model '%s' is %s, not %s",
                         index, eg_layer_name(node->layer), model->name, eg_dtype_name(x->dtype),
                         eg_dtype_name(node->dtype));
    bool fits = x->n_dims == node->n_dims;
    for (int d = 0; fits && d < x->n_dims; d++)
        fits = node->shape[d] < 0 || node->shape[d] == x->shape[d];
    if (!fits) {
        char wanted[160], got[160];
        eg__shape_format(node->n_dims, node->shape, wanted, sizeof wanted);
        eg__shape_format(x->n_dims, x->shape, got, sizeof got);
        return eg__error(EG_ERR_SHAPE,
                         "model_call: input %d ('%s') of model '%s' must be %s (-1: any), got %s",
                         index, eg_layer_name(node->layer), model->name, wanted, got);
    }
    return EG_OK;
}

eg_status eg__functional_call(eg_model *model, int n_inputs, const eg_tensor *const *inputs,
                              bool training, int n_outputs, eg_tensor **outputs) {
    for (int i = 0; i < n_outputs; i++) outputs[i] = NULL;
    if (n_inputs != model->n_inputs || n_outputs != model->n_outputs)
        return eg__error(EG_ERR_INVALID_ARGUMENT,
                         "model_call: model '%s' takes %d input(s) and gives %d output(s), "
                         "asked for %d and %d%s",
                         model->name, model->n_inputs, model->n_outputs, n_inputs, n_outputs,
                         n_inputs == 1 && n_outputs == 1 ? " (eg_model_call_multi)" : "");
    for (int i = 0; i < n_inputs; i++) {
        if (!eg__check_arg(inputs[i], "model_call", i + 1)) return eg_last_status();
        eg_status status = check_input(model, i, inputs[i]);
        if (status != EG_OK) return status;
    }
    /* values[i]: node i's output; the inputs' are borrowed, the others released after their
     * last reader unless they are outputs */
    const eg_tensor **values = calloc((size_t)model->n_nodes, sizeof *values);
    int *readers = malloc((size_t)model->n_nodes * sizeof *readers);
    bool *kept = calloc((size_t)model->n_nodes, sizeof *kept);
    if (!values || !readers || !kept) {
        free(values);
        free(readers);
        free(kept);
        return eg__error(EG_ERR_OUT_OF_MEMORY, "model_call: out of host memory");
    }
    memcpy(readers, model->n_readers, (size_t)model->n_nodes * sizeof *readers);
    for (int j = 0; j < n_outputs; j++)
        kept[eg__model_node_position(model, model->outputs[j])] = true;
    for (int i = 0; i < n_inputs; i++) values[i] = inputs[i]; /* inputs come first in the order */
    eg_status status = EG_OK;
    for (int i = n_inputs; i < model->n_nodes && status == EG_OK; i++) {
        const eg_symbol *node = model->nodes[i];
        const eg_tensor *args[EG__LAYER_MAX_INPUTS];
        const int *from = model->input_positions + model->input_offsets[i];
        for (int k = 0; k < node->n_inputs; k++) args[k] = values[from[k]];
        eg_tensor *y =
            eg_layer_call_multi(node->layer, node->n_inputs, eg__tensor_handles(args), training);
        if (!y) status = eg_last_status();
        values[i] = y;
        for (int k = 0; k < node->n_inputs; k++)
            if (--readers[from[k]] == 0 && from[k] >= n_inputs && !kept[from[k]]) {
                eg_release((eg_tensor *)values[from[k]]); /* tapes keep what they need */
                values[from[k]] = NULL;
            }
    }
    for (int j = 0; j < n_outputs && status == EG_OK; j++) {
        int p = eg__model_node_position(model, model->outputs[j]);
        if (p >= n_inputs && values[p]) {
            outputs[j] = (eg_tensor *)values[p]; /* handed on, scope and all */
            values[p] = NULL;
            continue;
        }
        /* an input, or a node given as an output twice: a new view (as an empty Sequential) */
        const eg_tensor *v = values[p];
        for (int k = 0; !v && k < j; k++)
            if (model->outputs[k] == model->outputs[j]) v = outputs[k];
        outputs[j] = eg_reshape(v, v->n_dims, v->shape);
        if (!outputs[j]) status = eg_last_status();
    }
    for (int i = n_inputs; i < model->n_nodes; i++) eg_release((eg_tensor *)values[i]);
    if (status != EG_OK)
        for (int j = 0; j < n_outputs; j++) {
            eg_release(outputs[j]);
            outputs[j] = NULL;
        }
    free(values);
    free(readers);
    free(kept);
    return status;
}
