/* A small convolutional network on Fashion-MNIST, in C with Eagle, as in Keras:
 *
 *     Conv2D(16, 3, relu) -> BatchNormalization -> MaxPooling2D(2)
 *     -> Conv2D(32, 3, relu) -> MaxPooling2D(2) -> Flatten -> Dropout(0.25) -> Dense(10)
 *
 * trained by eg_model_fit (graph mode: the step is traced once and replayed), then evaluated on
 * the test split. Dropout and batch normalization behave differently in training and in
 * inference: fit passes training = true, evaluate false.
 * Build: see examples/CMakeLists.txt. Run: ./cnn_fashion_mnist [data directory] [examples]
 * [epochs] (data directory "" or none: the Debian package dataset-fashion-mnist's; examples: how
 * many training images, default all 60,000; epochs default 2). */
#include <eagle.h>
#include <stdio.h>
#include <stdlib.h>

#include "fashion_mnist_data.h"

static eg_model *small_cnn(void) {
    eg_model *model = eg_sequential_new("cnn");
    eg_sequential_add(model, eg_conv2d_new(16, 3, EG_PADDING_SAME, EG_ACTIVATION_RELU));
    eg_sequential_add(model, eg_batch_norm_new(NULL));
    eg_sequential_add(model, eg_max_pool2d_new(2, 0, EG_PADDING_VALID)); /* 28 -> 14 */
    eg_sequential_add(model, eg_conv2d_new(32, 3, EG_PADDING_SAME, EG_ACTIVATION_RELU));
    eg_sequential_add(model, eg_max_pool2d_new(2, 0, EG_PADDING_VALID)); /* 14 -> 7 */
    eg_sequential_add(model, eg_flatten_new(NULL));
    eg_sequential_add(model, eg_dropout_new(0.25, NULL));
    eg_sequential_add(model, eg_dense_new(10, EG_ACTIVATION_NONE));
    /* a failed add above leaves its error pending: building reports it */
    if (eg_model_build(model, 4, (int64_t[]){-1, 28, 28, 1}) != EG_OK) {
        eg_model_free(model);
        return NULL;
    }
    return model;
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 && argv[1][0] ? argv[1] : NULL;
    int64_t limit = argc > 2 ? atoll(argv[2]) : 0;
    int epochs = argc > 3 ? atoi(argv[3]) : 2;
    eg_dataset *train = fashion_mnist_batches(dir, true, limit, 64, true);
    eg_dataset *test = fashion_mnist_batches(dir, false, limit > 0 ? limit / 4 : 0, 64, true);
    eg_manual_seed(42); /* the initial weights and dropout's draws */
    eg_model *model = train && test ? small_cnn() : NULL;
    if (!model) {
        fprintf(stderr, "%s\n", eg_last_error());
        return 1;
    }
    eg_model_summary(model, stdout);

    eg_adam_options adam_options = eg_adam_options_default();
    eg_optimizer *adam = eg_adam_new(&adam_options);
    eg_compile_options compile = {.loss = EG_FIT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                                  .from_logits = true,
                                  .accuracy = true,
                                  .mode = EG_EXECUTION_GRAPH};
    eg_fit_options options = eg_fit_options_default();
    options.epochs = epochs;
    options.verbose = 2; /* one line per epoch */
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
