/* From Eagle to Python: train a small MLP (Flatten -> Dense(64, relu) -> Dense(10)), save its
 * weights with eg_model_save_weights (a safetensors file, as Keras' save_weights names them:
 * "dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias"), and save a batch of test
 * images with the model's predictions for them (eg_safetensors_save). examples/python_compare.py
 * then loads both with numpy and the safetensors package, recomputes the forward pass in numpy
 * and checks that it predicts what Eagle did.
 * Build: see examples/CMakeLists.txt. Run:
 *     ./python_compare [data directory] [examples] [output directory]
 *     python3 examples/python_compare.py [output directory]
 * (data directory "" or none: the Debian package dataset-fashion-mnist's; examples: how many
 * training images, default 5,000; output directory default "."). The ctest
 * example_python_compare_interop runs both through examples/python_compare.sh. */
#include <eagle.h>
#include <stdio.h>
#include <stdlib.h>

enum { N_PREDICTED = 32 };

int main(int argc, char **argv) {
    const char *dir = argc > 1 && argv[1][0] ? argv[1] : NULL;
    int64_t limit = argc > 2 ? atoll(argv[2]) : 5000;
    const char *out = argc > 3 ? argv[3] : ".";
    eg_scope_begin();                                       /* owns every tensor below */
    eg_tensor *images, *labels, *test_images, *test_labels; /* u8 (N, 28, 28), u8 (N,) */
    if (eg_mnist_load(dir, true, &images, &labels) != EG_OK ||
        eg_mnist_load(dir, false, &test_images, &test_labels) != EG_OK) {
        fprintf(stderr, "%s\n", eg_last_error());
        return 1;
    }
    int64_t n = limit > 0 && limit < eg_tensor_dim(images, 0) ? limit : eg_tensor_dim(images, 0);
    eg_tensor *x = eg_mul_scalar(eg_cast(eg_slice(images, 0, 0, n, 1), EG_DTYPE_F32), 1.0 / 255);
    eg_tensor *y = eg_slice(labels, 0, 0, n, 1);

    eg_manual_seed(42);
    eg_model *model = eg_sequential_new("mlp");
    eg_sequential_add(model, eg_flatten_new(NULL));
    eg_sequential_add(model, eg_dense_new(64, EG_ACTIVATION_RELU));
    eg_sequential_add(model, eg_dense_new(10, EG_ACTIVATION_NONE));
    eg_model_build(model, 3, (int64_t[]){-1, 28, 28});
    eg_optimizer *adam = eg_adam_new(NULL);
    eg_compile_options compile = {
        .loss = EG_FIT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, .from_logits = true, .accuracy = true};
    eg_fit_options options = eg_fit_options_default();
    options.verbose = 2;
    eg_history *history = eg_model_compile(model, adam, &compile) == EG_OK
                              ? eg_model_fit_arrays(model, x, y, 32, 0.0, true, 42, &options)
                              : NULL;

    /* The first test images, their labels and what the trained model makes of them. */
    eg_tensor *batch = eg_mul_scalar(
        eg_cast(eg_slice(test_images, 0, 0, N_PREDICTED, 1), EG_DTYPE_F32), 1.0 / 255);
    eg_tensor *batch_labels = eg_slice(test_labels, 0, 0, N_PREDICTED, 1);
    eg_tensor *logits = history ? eg_model_predict(model, batch, N_PREDICTED) : NULL;

    char weights_path[4096], batch_path[4096];
    snprintf(weights_path, sizeof weights_path, "%s/python_compare_weights.safetensors", out);
    snprintf(batch_path, sizeof batch_path, "%s/python_compare_batch.safetensors", out);
    if (logits && eg_model_save_weights(model, weights_path) == EG_OK &&
        eg_safetensors_save(batch_path, 3, (const char *[]){"images", "labels", "logits"},
                            (eg_tensor *[]){batch, batch_labels, logits}, 0, NULL, NULL) == EG_OK)
        printf("wrote %s and %s\n", weights_path, batch_path);
    int status = eg_last_status() == EG_OK ? 0 : 1;
    if (status) fprintf(stderr, "error: %s\n", eg_last_error());

    eg_history_free(history);
    eg_optimizer_free(adam);
    eg_model_free(model);
    eg_scope_end();
    return status;
}
