/* TensorFlow's eager training example, a custom training loop in C with Eagle: Dense(64, relu)
 * -> Dense(10), sparse categorical cross-entropy from logits, Adam, a gradient tape over batches
 * of 32 (TensorFlow's GradientTape: record the forward pass, ask for the gradients of the loss,
 * apply them).
 * Build: see examples/CMakeLists.txt. Run: ./fashion_mnist [data directory] [examples]
 * (data directory "" or none: the Debian package dataset-fashion-mnist's; examples: how many
 * training images to use, default all 60,000). */
#include <eagle.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    eg_tensor *images, *labels; /* u8 (60000, 28, 28) and u8 (60000,) */
    const char *dir = argc > 1 && argv[1][0] ? argv[1] : NULL;
    int64_t limit = argc > 2 ? atoll(argv[2]) : 0;
    if (eg_mnist_load(dir, true, &images, &labels) != EG_OK) {
        fprintf(stderr, "%s\n", eg_last_error());
        return 1;
    }
    eg_manual_seed(42);
    eg_model *model = eg_sequential_new("seed");
    eg_sequential_add(model, eg_flatten_new(NULL));
    eg_sequential_add(model, eg_dense_new(64, EG_ACTIVATION_RELU));
    eg_sequential_add(model, eg_dense_new(10, EG_ACTIVATION_NONE));
    eg_adam_options adam_options = eg_adam_options_default();
    eg_optimizer *adam = eg_adam_new(&adam_options);

    const int64_t batch = 32;
    int64_t n = eg_tensor_dim(images, 0);
    if (limit > 0 && limit < n) n = limit;
    double last_loss = 0;
    for (int64_t start = 0; start + batch <= n; start += batch) {
        eg_scope_begin(); /* everything made in this step is released at its end */
        eg_tensor *x = eg_mul_scalar(
            eg_cast(eg_slice(images, 0, start, start + batch, 1), EG_DTYPE_F32), 1.0 / 255);
        eg_tensor *y = eg_slice(labels, 0, start, start + batch, 1);

        eg_tape *tape = eg_tape_begin(false);
        eg_tensor *logits = eg_model_call(model, x, true);
        eg_tensor *loss =
            eg_loss_sparse_categorical_crossentropy(y, logits, true, EG_REDUCTION_MEAN);
        int n_vars;
        eg_tensor *const *vars = eg_model_trainable_variables(model, &n_vars);
        eg_tensor *grads[4];
        eg_tape_gradient(tape, loss, n_vars, vars, grads, EG_UNCONNECTED_ZERO);
        eg_tape_free(tape);
        eg_optimizer_apply_gradients(adam, n_vars, grads, vars);

        last_loss = eg_item(loss);
        if (start / batch % 200 == 0)
            printf("step %5lld  loss %.4f\n", (long long)(start / batch), last_loss);
        eg_scope_end();
        if (eg_last_status() != EG_OK) break; /* one check covers the whole step */
    }
    int status = eg_last_status() == EG_OK ? 0 : 1;
    if (status)
        fprintf(stderr, "error: %s\n", eg_last_error());
    else
        printf("%lld steps; last loss %.4f\n", (long long)(n / batch), last_loss);
    eg_optimizer_free(adam);
    eg_model_free(model);
    eg_release(images);
    eg_release(labels);
    return status;
}
