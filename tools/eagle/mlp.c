#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlp.h"

bool mlp_parse_hidden(const char *text, mlp_config *config) {
    config->n_hidden = 0;
    const char *p = text;
    while (*p) {
        char *end;
        long units = strtol(p, &end, 10);
        if (end == p || units < 1 || units > 1 << 20 || config->n_hidden == MLP_MAX_HIDDEN)
            return false;
        config->hidden[config->n_hidden++] = units;
        if (*end == ',')
            end++;
        else if (*end)
            return false;
        p = end;
    }
    return config->n_hidden > 0;
}

void mlp_format_hidden(const mlp_config *config, char *buf, size_t size) {
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < config->n_hidden && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, i ? ",%lld" : "%lld",
                                 (long long)config->hidden[i]);
}

eg_model *mlp_build(const mlp_config *config) {
    eg_model *model = eg_sequential_new("mlp");
    if (!model) return NULL;
    for (int i = 0; i < config->n_hidden; i++)
        if (eg_sequential_add(model, eg_dense_new(config->hidden[i], EG_ACTIVATION_RELU)) != EG_OK)
            goto fail;
    if (eg_sequential_add(model, eg_dense_new(10, EG_ACTIVATION_NONE)) != EG_OK) goto fail;
    int64_t input_shape[2] = {1, 784};
    if (eg_model_build(model, 2, input_shape) != EG_OK) goto fail;
    return model;
fail:
    eg_model_free(model);
    return NULL;
}

bool mlp_data_load(const char *directory, bool train, int64_t limit, mlp_data *data) {
    memset(data, 0, sizeof *data);
    if (eg_mnist_load(directory, train, &data->images, &data->labels) != EG_OK) {
        fprintf(stderr, "eagle: %s\n", eg_last_error());
        return false;
    }
    data->n = eg_tensor_dim(data->images, 0);
    if (limit > 0 && limit < data->n) {
        eg_tensor *images = eg_slice(data->images, 0, 0, limit, 1);
        eg_tensor *labels = eg_slice(data->labels, 0, 0, limit, 1);
        eg_release(data->images);
        eg_release(data->labels);
        data->images = images;
        data->labels = labels;
        data->n = limit;
    }
    return true;
}

void mlp_data_free(mlp_data *data) {
    eg_release(data->images);
    eg_release(data->labels);
    memset(data, 0, sizeof *data);
}

eg_status mlp_batch(const mlp_data *data, const int64_t *indices, int64_t n, eg_tensor **x,
                    eg_tensor **labels) {
    eg_tensor *index = eg_tensor_from_data(indices, EG_DTYPE_I64, 1, &n);
    eg_tensor *pixels = eg_gather(data->images, index, 0);
    int64_t flat[2] = {n, 784};
    *x = eg_reshape(eg_mul_scalar(eg_cast(pixels, EG_DTYPE_F32), 1.0 / 255.0), 2, flat);
    *labels = eg_gather(data->labels, index, 0);
    return *x && *labels ? EG_OK : eg_last_status();
}

eg_status mlp_evaluate(eg_model *model, const mlp_data *data, double *accuracy, double *loss) {
    enum { BATCH = 1000 };
    int64_t *indices = malloc(BATCH * sizeof *indices);
    if (!indices) return EG_ERR_OUT_OF_MEMORY;
    eg_metric_mean hits = {0}, losses = {0};
    eg_status status = EG_OK;
    eg_no_grad_begin();
    for (int64_t start = 0; start < data->n && status == EG_OK; start += BATCH) {
        int64_t n = data->n - start < BATCH ? data->n - start : BATCH;
        for (int64_t i = 0; i < n; i++) indices[i] = start + i;
        eg_scope_begin();
        eg_tensor *x, *y;
        status = mlp_batch(data, indices, n, &x, &y);
        eg_tensor *logits = status == EG_OK ? eg_model_call(model, x, false) : NULL;
        eg_tensor *batch_loss =
            eg_loss_sparse_categorical_crossentropy(y, logits, true, EG_REDUCTION_NONE);
        eg_tensor *batch_hits = eg_metric_sparse_categorical_accuracy(y, logits);
        if (batch_loss && batch_hits) {
            eg_metric_mean_update(&losses, batch_loss);
            eg_metric_mean_update(&hits, batch_hits);
        }
        status = eg_last_status();
        eg_scope_end();
    }
    eg_no_grad_end();
    free(indices);
    *accuracy = eg_metric_mean_result(&hits);
    *loss = eg_metric_mean_result(&losses);
    return status;
}

eg_status mlp_step(const eg_tensor *const *in, eg_tensor **out, void *user) {
    mlp_step_state *s = user;
    int n_vars;
    eg_tensor *const *vars = eg_model_trainable_variables(s->model, &n_vars);
    eg_tensor *grads[MODEL_MAX_VARIABLES];
    if (!vars) return eg_last_status();
    if (n_vars > MODEL_MAX_VARIABLES) {
        fprintf(stderr, "eagle: a model of %d trainable variables is more than a step takes\n",
                n_vars);
        return EG_ERR_INVALID_ARGUMENT;
    }
    eg_profiler_range_push("forward");
    eg_tape *tape = eg_tape_begin(false);
    eg_tensor *logits = eg_model_call(s->model, in[0], true);
    eg_tensor *loss =
        eg_loss_sparse_categorical_crossentropy(in[1], logits, true, EG_REDUCTION_MEAN);
    eg_profiler_range_pop();
    eg_profiler_range_push("backward");
    eg_status status = eg_tape_gradient(tape, loss, n_vars, (const eg_tensor *const *)vars, grads,
                                        EG_UNCONNECTED_ZERO);
    eg_tape_free(tape);
    eg_profiler_range_pop();
    eg_profiler_range_push("optimizer");
    if (status == EG_OK) status = eg_optimizer_apply_gradients(s->optimizer, n_vars, grads, vars);
    eg_profiler_range_pop();
    out[0] = loss;
    out[1] = eg_sum(eg_metric_sparse_categorical_accuracy(in[1], logits), 0, NULL, false);
    return status == EG_OK ? eg_last_status() : status;
}
