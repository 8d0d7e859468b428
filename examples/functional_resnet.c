/* Keras' functional API in C with Eagle: a small ResNet-style network on Fashion-MNIST (a stem
 * convolution; a residual block: conv, batch norm + relu, conv, batch norm, the skip added,
 * relu; then max pooling and a dense classifier), built from symbols, summarized and trained by
 * eg_model_fit in graph mode.
 * Build: see examples/CMakeLists.txt. Run: ./functional_resnet [data directory] [examples]
 * [epochs] (examples: how many training images to use, default all 60,000; epochs default 3). */
#include <eagle.h>
#include <stdio.h>
#include <stdlib.h>

#include "fashion_mnist_data.h"

static eg_symbol *conv(eg_symbol *x, int64_t filters, eg_activation activation) {
    return eg_layer_apply(eg_conv2d_new(filters, 3, EG_PADDING_SAME, activation), x);
}

static eg_symbol *batch_norm(eg_symbol *x, eg_activation activation) {
    eg_batch_norm_options o = eg_batch_norm_options_default();
    o.activation = activation;
    return eg_layer_apply(eg_batch_norm_new(&o), x);
}

/* x -> conv -> bn + relu -> conv -> bn -> (+ x) -> relu: the shape of x is kept. */
static eg_symbol *residual_block(eg_symbol *x, int64_t filters) {
    eg_symbol *h = batch_norm(conv(x, filters, EG_ACTIVATION_NONE), EG_ACTIVATION_RELU);
    h = batch_norm(conv(h, filters, EG_ACTIVATION_NONE), EG_ACTIVATION_NONE);
    eg_symbol *sum = eg_layer_apply_multi(eg_add_layer_new(NULL), 2, (const eg_symbol *[]){x, h});
    return eg_layer_apply(eg_activation_new(EG_ACTIVATION_RELU, NULL), sum);
}

static eg_model *small_resnet(void) {
    eg_symbol *image = eg_input(3, (int64_t[]){28, 28, 1}, EG_DTYPE_F32, "image");
    eg_symbol *h = conv(image, 16, EG_ACTIVATION_RELU); /* the stem: 16 channels for the skip */
    h = residual_block(h, 16);
    h = eg_layer_apply(eg_max_pool2d_new(2, 0, EG_PADDING_VALID), h);
    h = eg_layer_apply(eg_flatten_new(NULL), h);
    eg_symbol *logits = eg_layer_apply(eg_dense_new(10, EG_ACTIVATION_NONE), h);
    /* a NULL anywhere above reaches here: one check for the whole graph */
    return eg_functional_model_new(1, (const eg_symbol *[]){image}, 1,
                                   (const eg_symbol *[]){logits}, "small_resnet");
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 && argv[1][0] ? argv[1] : NULL; /* "": the Debian package's */
    int64_t limit = argc > 2 ? atoll(argv[2]) : 0;
    int epochs = argc > 3 ? atoi(argv[3]) : 3;
    eg_dataset *train = fashion_mnist_batches(dir, true, limit, 32, true);
    eg_dataset *test = fashion_mnist_batches(dir, false, limit > 0 ? limit / 6 : 0, 32, true);
    if (!train || !test) {
        fprintf(stderr, "%s\n", eg_last_error());
        return 1;
    }
    eg_manual_seed(42);
    eg_model *model = small_resnet();
    if (!model) {
        fprintf(stderr, "%s\n", eg_last_error());
        return 1;
    }
    eg_model_summary(model, stdout);
    eg_adam_options adam_options = eg_adam_options_default();
    adam_options.learning_rate = eg_schedule_constant(0.003);
    eg_optimizer *adam = eg_adam_new(&adam_options);
    eg_compile_options compile = {.loss = EG_FIT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                                  .from_logits = true,
                                  .accuracy = true,
                                  .mode = EG_EXECUTION_GRAPH};
    eg_fit_options options = eg_fit_options_default();
    options.epochs = epochs;
    options.validation_data = test;
    eg_history *history = eg_model_compile(model, adam, &compile) == EG_OK
                              ? eg_model_fit(model, train, &options)
                              : NULL;
    eg_logs results;
    if (!history || eg_model_evaluate(model, test, NULL, &results) != EG_OK) {
        fprintf(stderr, "%s\n", eg_last_error());
        return 1;
    }
    double accuracy = 0;
    eg_logs_get(&results, "accuracy", &accuracy);
    printf("test accuracy %.4f\n", accuracy);

    eg_history_free(history);
    eg_optimizer_free(adam);
    eg_model_free(model);
    eg_dataset_free(train);
    eg_dataset_free(test);
    return 0;
}
