/* A program that uses an installed Eagle: fits y = 2 x0 - 3 x1 + 0.5 with one Dense layer and
 * Adam for a few steps, and exits 0 only when the loss went down (by 10x). */
#include <stdio.h>

#include <eagle.h>

int main(void) {
    eg_generator *generator = eg_generator_new(1);
    eg_model *model = eg_sequential_new("tiny");
    eg_dense_options dense = eg_dense_options_default();
    dense.generator = generator;
    eg_adam_options adam = eg_adam_options_default();
    adam.learning_rate = eg_schedule_constant(0.1);
    eg_optimizer *optimizer = eg_adam_new(&adam);
    if (!generator || !model || !optimizer ||
        eg_sequential_add(model, eg_dense_new_ex(1, &dense)) != EG_OK) {
        fprintf(stderr, "train_tiny: %s\n", eg_last_error());
        return 1;
    }

    eg_scope_begin();
    int64_t x_shape[2] = {64, 2}, w_shape[2] = {2, 1};
    const float w_true[2] = {2.0f, -3.0f};
    eg_tensor *x = eg_random_uniform(generator, EG_DTYPE_F32, 2, x_shape, -1, 1);
    eg_tensor *y =
        eg_add_scalar(eg_matmul(x, eg_tensor_from_data(w_true, EG_DTYPE_F32, 2, w_shape)), 0.5);
    double first = 0, last = 0;
    eg_status status = y ? EG_OK : eg_last_status();
    for (int step = 0; step < 60 && status == EG_OK; step++) {
        eg_scope_begin();
        eg_tape *tape = eg_tape_begin(false);
        eg_tensor *loss =
            eg_loss_mean_squared_error(y, eg_model_call(model, x, true), EG_REDUCTION_MEAN);
        eg_tape_end(tape);
        int n = 0;
        eg_tensor *const *variables = eg_model_trainable_variables(model, &n);
        eg_tensor *grads[2];
        if (!loss || n != 2)
            status = eg_last_status() != EG_OK ? eg_last_status() : EG_ERR_STATE;
        else
            status = eg_tape_gradient(tape, loss, n, variables, grads, EG_UNCONNECTED_ZERO);
        if (status == EG_OK) status = eg_optimizer_apply_gradients(optimizer, n, grads, variables);
        if (status == EG_OK) {
            last = eg_item(loss);
            if (step == 0) first = last;
        }
        eg_tape_free(tape);
        eg_scope_end();
    }
    eg_scope_end();
    eg_optimizer_free(optimizer);
    eg_model_free(model);
    eg_generator_free(generator);
    if (status != EG_OK) {
        fprintf(stderr, "train_tiny: %s\n", eg_last_error());
        return 1;
    }
    printf("eagle %s: loss %.4f -> %.6f after 60 steps\n", eg_version(), first, last);
    return last < first / 10 ? 0 : 1;
}
