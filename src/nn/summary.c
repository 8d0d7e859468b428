/* Keras' model.summary(): a Sequential model's three columns, a functional model's four (with
 * "Connected to"), then the parameter counts. */
#include <stdio.h>
#include <string.h>

#include "nn/internal.h"

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

/* "(None, 64)"; "?" before the layer is built. An InputLayer's is in a list, as Keras 2 shows
 * it: "[(None, 784)]". */
static char *format_shape(const eg_layer *layer, char *buf, size_t size) {
    if (!layer->built) {
        snprintf(buf, size, "?");
        return buf;
    }
    bool listed = layer->kind == EG__LAYER_INPUT;
    size_t used = (size_t)snprintf(buf, size, listed ? "[(" : "(");
    for (int d = 0; d < layer->output_n_dims && used < size; d++) {
        int64_t v = layer->output_shape[d];
        const char *sep = d ? ", " : "";
        if (v < 0)
            used += (size_t)snprintf(buf + used, size - used, "%sNone", sep);
        else
            used += (size_t)snprintf(buf + used, size - used, "%s%lld", sep, (long long)v);
    }
    if (used < size)
        snprintf(buf + used, size - used, "%s%s", layer->output_n_dims == 1 ? ",)" : ")",
                 listed ? "]" : "");
    return buf;
}

/* A table's width and where its columns start (Keras 2's: 65 wide for Sequential models, 98 for
 * functional ones). */
typedef struct table {
    int width;
    int n_columns;
    int starts[4];
} table;

static const table sequential_table = {65, 3, {0, 29, 55}};
static const table functional_table = {98, 4, {0, 32, 53, 65}};

/* One row: each field from its column (at least one space after the previous one). */
static void print_row(FILE *out, const table *t, const char *const *fields) {
    int col = 0;
    for (int i = 0; i < t->n_columns; i++) {
        if (i) do
                fputc(' ', out);
            while (++col < t->starts[i]);
        col += fprintf(out, "%s%s", i ? "" : " ", fields[i]);
    }
    fputc('\n', out);
}

static void print_line(FILE *out, const table *t, char c) {
    for (int i = 0; i < t->width; i++) fputc(c, out);
    fputc('\n', out);
}

/* "['input_layer[0][0]', 'dense[1][0]']": every input of the layer's applications in the model,
 * as Keras' layer_name[node_index][tensor_index]. */
static void format_connections(const eg_model *model, const eg_layer *layer, char *buf,
                               size_t size) {
    size_t used = (size_t)snprintf(buf, size, "[");
    int listed = 0;
    for (int i = 0; i < model->n_nodes && used < size; i++) {
        const eg_symbol *node = model->nodes[i];
        if (node->layer != layer) continue;
        for (int k = 0; k < node->n_inputs && used < size; k++)
            used += (size_t)snprintf(buf + used, size - used, "%s'%s[%d][0]'", listed++ ? ", " : "",
                                     eg_layer_name(node->inputs[k]->layer),
                                     node->inputs[k]->node_index);
    }
    if (used < size) snprintf(buf + used, size - used, "]");
}

eg_status eg_model_summary(const eg_model *model, FILE *out) {
    if (!model || !out)
        return eg__error(EG_ERR_NULL_ARGUMENT, "model_summary: %s is NULL",
                         model ? "out" : "model");
    const table *t = model->functional ? &functional_table : &sequential_table;
    int64_t total = 0, trainable = 0;
    fprintf(out, "Model: \"%s\"\n", model->name);
    /* Keras prints no policy; a mixed one changes what every layer computes in, so it is named,
     * and a layer whose own policy differs says so after its type. */
    if (model->policy != EG_POLICY_FLOAT32)
        fprintf(out, "Policy: %s (variables f32, compute %s)\n", eg_policy_name(model->policy),
                eg_dtype_name(eg_policy_compute_dtype(model->policy)));
    print_line(out, t, '_');
    print_row(out, t,
              (const char *const[]){"Layer (type)", "Output Shape", "Param #", "Connected to"});
    print_line(out, t, '=');
    for (int i = 0; i < model->n_layers; i++) {
        const eg_layer *layer = model->layers[i];
        char name[192], shape[160], count[40], connections[1024] = "";
        if (layer->policy == model->policy || layer->kind == EG__LAYER_INPUT)
            snprintf(name, sizeof name, "%s (%s)", eg_layer_name(layer), eg_layer_type(layer));
        else
            snprintf(name, sizeof name, "%s (%s, %s)", eg_layer_name(layer), eg_layer_type(layer),
                     eg_policy_name(layer->policy));
        int64_t params = eg_layer_count_params(layer);
        total += params;
        for (int j = 0; j < layer->n_variables; j++)
            if (eg_variable_trainable(layer->variables[j]))
                trainable += layer->variables[j]->n_elems;
        if (model->functional) format_connections(model, layer, connections, sizeof connections);
        print_row(out, t,
                  (const char *const[]){name, format_shape(layer, shape, sizeof shape),
                                        format_count(params, count, sizeof count), connections});
        if (i + 1 < model->n_layers) print_line(out, t, '_');
    }
    print_line(out, t, '=');
    char count[40];
    fprintf(out, "Total params: %s\n", format_count(total, count, sizeof count));
    fprintf(out, "Trainable params: %s\n", format_count(trainable, count, sizeof count));
    fprintf(out, "Non-trainable params: %s\n",
            format_count(total - trainable, count, sizeof count));
    print_line(out, t, '_');
    return ferror(out) ? eg__error(EG_ERR_IO, "model_summary: write failed") : EG_OK;
}
