#include <stdlib.h>

#include "cnn.h"

/* BatchNormalization followed by ReLU, as one layer: the training step runs them as one op
 * (one pass over the activations each way instead of two; the same values). */
static eg_layer *batch_norm_relu_new(bool synchronized) {
    eg_batch_norm_options o = eg_batch_norm_options_default();
    o.activation = EG_ACTIVATION_RELU;
    o.synchronized = synchronized;
    return eg_batch_norm_new(&o);
}

/* Conv2D without bias, then BatchNormalization and ReLU. */
static eg_status conv_block(eg_model *model, int64_t filters, eg_padding padding, bool synced) {
    eg_conv2d_layer_options o = eg_conv2d_layer_options_default();
    o.padding = padding;
    o.use_bias = false;
    eg_status status = eg_sequential_add(model, eg_conv2d_new_ex(filters, 3, 3, &o));
    if (status == EG_OK) status = eg_sequential_add(model, batch_norm_relu_new(synced));
    return status;
}

eg_model *cnn_build(bool synchronized_batch_norm) {
    bool synced = synchronized_batch_norm;
    eg_model *model = eg_sequential_new("cnn");
    if (!model) return NULL;
    eg_dense_options hidden = eg_dense_options_default();
    hidden.use_bias = false;
    eg_status s = conv_block(model, 32, EG_PADDING_SAME, synced);
    if (s == EG_OK) s = conv_block(model, 32, EG_PADDING_SAME, synced);
    if (s == EG_OK) s = eg_sequential_add(model, eg_max_pool2d_new(2, 0, EG_PADDING_VALID));
    if (s == EG_OK) s = eg_sequential_add(model, eg_dropout_new(0.25, NULL));
    if (s == EG_OK) s = conv_block(model, 64, EG_PADDING_SAME, synced);
    if (s == EG_OK) s = conv_block(model, 64, EG_PADDING_SAME, synced);
    if (s == EG_OK) s = eg_sequential_add(model, eg_max_pool2d_new(2, 0, EG_PADDING_VALID));
    if (s == EG_OK) s = eg_sequential_add(model, eg_dropout_new(0.25, NULL));
    if (s == EG_OK) s = eg_sequential_add(model, eg_flatten_new(NULL));
    if (s == EG_OK) s = eg_sequential_add(model, eg_dense_new_ex(256, &hidden));
    if (s == EG_OK) s = eg_sequential_add(model, batch_norm_relu_new(synced));
    if (s == EG_OK) s = eg_sequential_add(model, eg_dropout_new(0.5, NULL));
    if (s == EG_OK) s = eg_sequential_add(model, eg_dense_new(10, EG_ACTIVATION_NONE));
    int64_t input_shape[4] = {-1, 28, 28, 1};
    if (s == EG_OK) s = eg_model_build(model, 4, input_shape);
    if (s != EG_OK) {
        eg_model_free(model);
        return NULL;
    }
    return model;
}

eg_optimizer *cnn_optimizer_new(double learning_rate, int64_t total_steps) {
    eg_adam_options options = eg_adam_options_default();
    options.learning_rate = total_steps > 0
                                ? eg_schedule_cosine_decay(learning_rate, total_steps, 0.0)
                                : eg_schedule_constant(learning_rate);
    return eg_adam_new(&options);
}

eg_status cnn_batch(const mlp_data *data, const int64_t *indices, int64_t n, eg_tensor **x,
                    eg_tensor **labels) {
    int64_t image[4] = {n, 28, 28, 1};
    return mlp_image_batch(data, indices, n, 4, image, x, labels);
}

eg_status cnn_evaluate(eg_model *model, const mlp_data *data, double *accuracy, double *loss) {
    enum { BATCH = 500 };
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
        status = cnn_batch(data, indices, n, &x, &y);
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
