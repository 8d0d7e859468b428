/* Keras' model.fit, in C with Eagle: the same model as fashion_mnist.c trained by eg_model_fit
 * with validation data, early stopping (restoring the best epoch's weights) and a CSV log, then
 * evaluated and used for predictions.
 * Build: see examples/CMakeLists.txt. Run: ./fit_fashion_mnist [data directory] [examples]
 * (examples: how many training images to use; default all 60,000). */
#include <eagle.h>
#include <stdio.h>
#include <stdlib.h>

/* (image f32 in [0, 1], label) batches of the first `limit` examples of a split, shuffled. */
static eg_dataset *batches(const char *dir, bool train, int64_t limit) {
    eg_tensor *images, *labels; /* u8 (N, 28, 28) and u8 (N,) */
    if (eg_mnist_load(dir, train, &images, &labels) != EG_OK) return NULL;
    int64_t n = eg_tensor_dim(images, 0);
    if (limit > 0 && limit < n) n = limit;
    eg_tensor *x = eg_mul_scalar(eg_cast(eg_slice(images, 0, 0, n, 1), EG_DTYPE_F32), 1.0 / 255);
    eg_tensor *y = eg_slice(labels, 0, 0, n, 1);
    eg_dataset *ds = eg_dataset_from_tensor_slices(2, (const eg_tensor *[]){x, y});
    eg_release(x);
    eg_release(y);
    eg_release(images);
    eg_release(labels);
    if (train) ds = eg_dataset_shuffle(ds, n, 42, true);
    return eg_dataset_batch(ds, 32, false);
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 && argv[1][0] ? argv[1] : NULL; /* "": the Debian package's */
    int64_t limit = argc > 2 ? atoll(argv[2]) : 0;
    eg_dataset *train = batches(dir, true, limit);
    eg_dataset *test = batches(dir, false, limit > 0 ? limit / 6 : 0);
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
