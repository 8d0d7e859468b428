/* The Sequential model: an ordered list of owned layers, built and called in turn, with Keras'
 * variable collection and summary. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/random.h"
#include "nn/internal.h"

struct eg_model {
    char *name;
    eg_layer **layers; /* owned */
    int n_layers, capacity;
    bool built;
    int input_n_dims;
    int64_t input_shape[EG_MAX_DIMS];
    eg_tensor **trainable; /* cache returned by eg_model_trainable_variables */
    int trainable_capacity;
    eg_tensor **all; /* cache returned by eg_model_variables */
    int all_capacity;
    eg_policy policy; /* eg_model_set_policy's, else the global policy when made */
    bool policy_set;  /* layers added later get it */
    /* What a layer above attached (the training loop's compiled configuration), and how it
     * frees it: the model frees it without naming that layer. */
    void *attachment;
    void (*attachment_free)(void *attachment);
};

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
    if (!model) {
        status = eg__error(EG_ERR_NULL_ARGUMENT, "sequential_add: model is NULL");
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

eg_tensor *eg_model_call(eg_model *model, const eg_tensor *x, bool training) {
    if (!model) {
        eg__error(EG_ERR_NULL_ARGUMENT, "model_call: model is NULL");
        return NULL;
    }
    if (!eg__check_arg(x, "model_call", 1)) return NULL;
    if (!model->built) {
        int64_t shape[EG_MAX_DIMS];
        if (x->n_dims) memcpy(shape, x->shape, (size_t)x->n_dims * sizeof *shape);
        if (x->n_dims >= 2) shape[0] = -1;
        if (eg_model_build(model, x->n_dims, shape) != EG_OK) return NULL;
    }
    if (model->n_layers == 0) return eg_reshape(x, x->n_dims, x->shape);
    eg_tensor *h = NULL;
    for (int i = 0; i < model->n_layers; i++) {
        eg_tensor *next = eg_layer_call(model->layers[i], h ? h : x, training);
        eg_release(h); /* tapes keep what they need */
        h = next;
        if (!h) return NULL;
    }
    return h;
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

/* ---- summary ---- */

/* "50,890" */
static char *format_count(int64_t n, char *buf, size_t size) {
    char digits[32];
    int len = snprintf(digits, sizeof digits, "%lld", (long long)(n < 0 ? -n : n));
    size_t used = 0;
    if (n < 0 && used + 1 < size) buf[used++] = '-';
    for (int i = 0; i < len && used + 1 < size; i++) {
        buf[used++] = digits[i];
        int left = len - 1 - i;
        if (left > 0 && left % 3 == 0 && used + 1 < size) buf[used++] = ',';
    }
    buf[used] = '\0';
    return buf;
}

/* "(None, 64)" */
static char *format_shape(const eg_layer *layer, char *buf, size_t size) {
    if (!layer->built) {
        snprintf(buf, size, "?");
        return buf;
    }
    size_t used = (size_t)snprintf(buf, size, "(");
    for (int d = 0; d < layer->output_n_dims && used < size; d++) {
        int64_t v = layer->output_shape[d];
        const char *sep = d ? ", " : "";
        if (v < 0)
            used += (size_t)snprintf(buf + used, size - used, "%sNone", sep);
        else
            used += (size_t)snprintf(buf + used, size - used, "%s%lld", sep, (long long)v);
    }
    if (used < size) snprintf(buf + used, size - used, layer->output_n_dims == 1 ? ",)" : ")");
    return buf;
}

#define SUMMARY_WIDTH         65
#define SUMMARY_COLUMN_SHAPE  29
#define SUMMARY_COLUMN_PARAMS 55

/* One row: three fields starting at columns 0, 29 and 55 (each at least one space apart). */
static void print_row(FILE *out, const char *a, const char *b, const char *c) {
    int col = fprintf(out, " %s", a);
    do fputc(' ', out);
    while (++col < SUMMARY_COLUMN_SHAPE);
    col += fprintf(out, "%s", b);
    do fputc(' ', out);
    while (++col < SUMMARY_COLUMN_PARAMS);
    fprintf(out, "%s\n", c);
}

static void print_line(FILE *out, char c) {
    for (int i = 0; i < SUMMARY_WIDTH; i++) fputc(c, out);
    fputc('\n', out);
}

eg_status eg_model_summary(const eg_model *model, FILE *out) {
    if (!model || !out)
        return eg__error(EG_ERR_NULL_ARGUMENT, "model_summary: %s is NULL",
                         model ? "out" : "model");
    int64_t total = 0, trainable = 0;
    fprintf(out, "Model: \"%s\"\n", model->name);
    /* Keras prints no policy; a mixed one changes what every layer computes in, so it is named,
     * and a layer whose own policy differs says so after its type. */
    if (model->policy != EG_POLICY_FLOAT32)
        fprintf(out, "Policy: %s (variables f32, compute %s)\n", eg_policy_name(model->policy),
                eg_dtype_name(eg_policy_compute_dtype(model->policy)));
    print_line(out, '_');
    print_row(out, "Layer (type)", "Output Shape", "Param #");
    print_line(out, '=');
    for (int i = 0; i < model->n_layers; i++) {
        const eg_layer *layer = model->layers[i];
        char name[192], shape[160], count[40];
        if (layer->policy == model->policy)
            snprintf(name, sizeof name, "%s (%s)", eg_layer_name(layer), eg_layer_type(layer));
        else
            snprintf(name, sizeof name, "%s (%s, %s)", eg_layer_name(layer), eg_layer_type(layer),
                     eg_policy_name(layer->policy));
        int64_t params = eg_layer_count_params(layer);
        total += params;
        for (int j = 0; j < layer->n_variables; j++)
            if (eg_variable_trainable(layer->variables[j]))
                trainable += layer->variables[j]->n_elems;
        print_row(out, name, format_shape(layer, shape, sizeof shape),
                  format_count(params, count, sizeof count));
        if (i + 1 < model->n_layers) print_line(out, '_');
    }
    print_line(out, '=');
    char count[40];
    fprintf(out, "Total params: %s\n", format_count(total, count, sizeof count));
    fprintf(out, "Trainable params: %s\n", format_count(trainable, count, sizeof count));
    fprintf(out, "Non-trainable params: %s\n",
            format_count(total - trainable, count, sizeof count));
    print_line(out, '_');
    return ferror(out) ? eg__error(EG_ERR_IO, "model_summary: write failed") : EG_OK;
}

void eg_model_free(eg_model *model) {
    if (!model) return;
    if (model->attachment && model->attachment_free) model->attachment_free(model->attachment);
    for (int i = 0; i < model->n_layers; i++) eg__layer_destroy(model->layers[i]);
    free(model->layers);
    free(model->trainable);
    free(model->all);
    free(model->name);
    free(model);
}
