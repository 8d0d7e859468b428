/* Keras' model.fit, in C with Eagle: the same model as fashion_mnist.c trained by eg_model_fit
 * with validation data, early stopping (restoring the best epoch's weights) and a CSV log, then
 * evaluated and used for predictions.
 * Build: see examples/CMakeLists.txt. Run: ./fit_fashion_mnist [data directory] [examples]
 * (examples: how many training images to use; default all 60,000). */
#include <eagle.h>
#include <stdio.h>
#include <stdlib.h>

#include "fashion_mnist_data.h"

int main(int argc, char **argv) {
    const char *dir = argc > 1 && argv[1][0] ? argv[1] : NULL; /* "": the Debian package's */
    int64_t limit = argc > 2 ? atoll(argv[2]) : 0;
    eg_dataset *train = fashion_mnist_batches(dir, true, limit, 32, false);
    eg_dataset *test = fashion_mnist_batches(dir, false, limit > 0 ? limit / 6 : 0, 32, false);
    if (!train || !test) {
        fprintf(stderr, "%s\n", eg_last_error());
        return 1;
    }
    eg_manual_seed(42);
    eg_model *model = eg_sequential_new("fit");
    eg_sequential_add(model, eg_flatten_new(NULL));
    eg_sequential_add(model, eg_dense_new(64, EG_ACTIVATION_RELU));
    eg_sequential_add(model, eg_dense_new(10, EG_ACTIVATION_NONE));
    eg_model_build(model, 3, (int64_t[]){-1, 28, 28});
    eg_adam_options adam_options = eg_adam_options_default();
    eg_optimizer *adam = eg_adam_new(&adam_options);
    eg_compile_options compile = {.loss = EG_FIT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                                  .from_logits = true,
                                  .accuracy = true,
                                  .mode = EG_EXECUTION_GRAPH};
    if (eg_model_compile(model, adam, &compile) != EG_OK) {
        fprintf(stderr, "%s\n", eg_last_error());
        return 1;
    }

    eg_callback *callbacks[2] = {
        eg_callback_early_stopping_new(&(eg_early_stopping_options){
            .monitor = "val_accuracy", .patience = 2, .restore_best_weights = true}),
        eg_callback_csv_logger_new("fit_fashion_mnist.csv", false)};
    eg_fit_options options = eg_fit_options_default();
    options.epochs = 5;
    options.validation_data = test;
    options.n_callbacks = 2;
    options.callbacks = callbacks;
    eg_history *history = eg_model_fit(model, train, &options);
    if (!history) {
        fprintf(stderr, "%s\n", eg_last_error());
        return 1;
    }
    int epochs = 0;
    const double *val_accuracy = eg_history_values(history, "val_accuracy", &epochs);
    printf("%d epochs; last validation accuracy %.4f\n", epochs, val_accuracy[epochs - 1]);

    eg_logs results;
    if (eg_model_evaluate(model, test, NULL, &results) != EG_OK) {
        fprintf(stderr, "%s\n", eg_last_error());
        return 1;
    }
    double accuracy = 0;
    eg_logs_get(&results, "accuracy", &accuracy);
    printf("test accuracy %.4f (the best epoch's weights)\n", accuracy);
    eg_tensor *logits = eg_model_predict_dataset(model, test);
    if (logits) printf("predicted %lld test images\n", (long long)eg_tensor_dim(logits, 0));
    eg_release(logits);

    eg_history_free(history);
    eg_callback_free(callbacks[0]);
    eg_callback_free(callbacks[1]);
    eg_optimizer_free(adam);
    eg_model_free(model);
    eg_dataset_free(train);
    eg_dataset_free(test);
    return 0;
}
