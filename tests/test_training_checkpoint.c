/* eg_training_save / eg_training_load: a user's own loop (with dropout, so the generator's state
 * matters) stopped in the middle of an epoch and restored into a fresh model and optimizer
 * continues with exactly the losses and weights of the uninterrupted run; a checkpoint for
 * another optimizer or model is refused, naming the difference. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "eagle.h"
#include "test_util.h"

enum { N = 96, FEATURES = 4, CLASSES = 3, BATCH = 16, EPOCHS = 3, STEPS = N / BATCH };

static float xs[N * FEATURES];
static int64_t ys[N];

static void make_data(void) {
    uint64_t state = 99;
    for (int i = 0; i < N; i++) {
        ys[i] = i % CLASSES;
        for (int f = 0; f < FEATURES; f++) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            xs[i * FEATURES + f] =
                (float)((f == ys[i] ? 1.0 : 0.0) + (double)(state >> 40) / (double)(1 << 24));
        }
    }
}

static eg_model *make_model(uint64_t seed, int64_t hidden) {
    eg_manual_seed(seed);
    eg_model *model = eg_sequential_new("resumable");
    assert_int_equal(eg_sequential_add(model, eg_dense_new(hidden, EG_ACTIVATION_RELU)), EG_OK);
    assert_int_equal(eg_sequential_add(model, eg_dropout_new(0.3, NULL)), EG_OK);
    assert_int_equal(eg_sequential_add(model, eg_dense_new(CLASSES, EG_ACTIVATION_NONE)), EG_OK);
    assert_int_equal(eg_model_build(model, 2, (int64_t[]){-1, FEATURES}), EG_OK);
    return model;
}

static eg_optimizer *adam(void) {
    eg_adam_options o = eg_adam_options_default();
    o.learning_rate = eg_schedule_constant(0.02);
    return eg_adam_new(&o);
}

/* One step of the user's loop on batch `step`; returns the loss. */
static float step(eg_model *model, eg_optimizer *opt, int s) {
    eg_scope_begin();
    eg_tensor *x = eg_tensor_from_data(xs + s * BATCH * FEATURES, EG_DTYPE_F32, 2,
                                       (int64_t[]){BATCH, FEATURES});
    eg_tensor *y = eg_tensor_from_data(ys + s * BATCH, EG_DTYPE_I64, 1, (int64_t[]){BATCH});
    int n;
    eg_tensor *const *vars = eg_model_trainable_variables(model, &n);
    eg_tape *tape = eg_tape_begin(false);
    eg_tensor *loss = eg_loss_sparse_categorical_crossentropy(y, eg_model_call(model, x, true),
                                                              true, EG_REDUCTION_MEAN);
    eg_tensor *grads[4];
    assert_int_equal(eg_tape_gradient(tape, loss, n, vars, grads, EG_UNCONNECTED_ZERO), EG_OK);
    eg_tape_free(tape);
    assert_int_equal(eg_optimizer_apply_gradients(opt, n, grads, vars), EG_OK);
    float value = (float)eg_item(loss);
    eg_scope_end();
    return value;
}

static void weights_of(eg_model *model, float *out, size_t bytes) {
    int n;
    eg_tensor *const *vars = eg_model_variables(model, &n);
    size_t used = 0;
    for (int i = 0; i < n; i++) {
        size_t k = (size_t)eg_tensor_n_elems(vars[i]) * sizeof(float);
        assert_true(used + k <= bytes);
        assert_int_equal(eg_tensor_copy_to_host(vars[i], (char *)out + used, k), EG_OK);
        used += k;
    }
}

static void test_a_restored_loop_continues_exactly(void **state) {
    (void)state;
    char path[] = "/tmp/eagle_training_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    static float whole[EPOCHS * STEPS], resumed[EPOCHS * STEPS];
    static float whole_weights[256], resumed_weights[256];
    eg_model *model = make_model(3, 12);
    eg_optimizer *opt = adam();
    for (int e = 0; e < EPOCHS; e++)
        for (int s = 0; s < STEPS; s++) whole[e * STEPS + s] = step(model, opt, s);
    weights_of(model, whole_weights, sizeof whole_weights);
    eg_optimizer_free(opt);
    eg_model_free(model);

    /* the same run stopped after 1 epoch and 2 steps */
    model = make_model(3, 12);
    opt = adam();
    int stop = STEPS + 2;
    for (int k = 0; k < stop; k++) resumed[k] = step(model, opt, k % STEPS);
    eg_training_position at = {.epoch = stop / STEPS, .step = stop % STEPS};
    const char *keys[1] = {"my.note"}, *values[1] = {"stopped early"};
    assert_int_equal(eg_training_save(path, model, opt, &at, 1, keys, values), EG_OK);
    eg_optimizer_free(opt);
    eg_model_free(model);

    /* restored into a model made from another seed (its draws would differ) */
    model = make_model(777, 12);
    opt = adam();
    eg_training_position from = {0};
    assert_int_equal(eg_training_load(path, model, opt, &from), EG_OK);
    assert_int_equal(from.epoch, 1);
    assert_int_equal(from.step, 2);
    assert_int_equal(eg_optimizer_iterations(opt), stop);
    for (int k = (int)(from.epoch * STEPS + from.step); k < EPOCHS * STEPS; k++)
        resumed[k] = step(model, opt, k % STEPS);
    weights_of(model, resumed_weights, sizeof resumed_weights);
    assert_memory_equal(whole, resumed, sizeof whole);
    assert_memory_equal(whole_weights, resumed_weights, sizeof whole_weights);
    eg_safetensors *st = eg_safetensors_open(path);
    assert_non_null(st);
    assert_string_equal(eg_safetensors_metadata(st, "my.note"), "stopped early");
    eg_safetensors_close(st);

    /* another optimizer, another model, a reserved key */
    eg_sgd_options sgd_options = eg_sgd_options_default();
    eg_optimizer *sgd = eg_sgd_new(&sgd_options);
    assert_int_equal(eg_training_load(path, model, sgd, &from), EG_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(eg_last_error(), "state of an adam optimizer, not of sgd"));
    eg_clear_error();
    eg_optimizer_free(sgd);
    eg_model *other = make_model(3, 10);
    eg_optimizer *fresh = adam();
    assert_int_equal(eg_training_load(path, other, fresh, &from), EG_ERR_SHAPE);
    assert_non_null(strstr(eg_last_error(), "'dense/kernel'"));
    eg_clear_error();
    assert_int_equal(eg_optimizer_iterations(fresh), 0); /* nothing changed */
    const char *reserved[1] = {"eagle.epoch"};
    assert_int_equal(eg_training_save(path, model, opt, &at, 1, reserved, values),
                     EG_ERR_INVALID_ARGUMENT);
    eg_clear_error();
    eg_optimizer_free(fresh);
    eg_model_free(other);
    unlink(path);
    eg_optimizer_free(opt);
    eg_model_free(model);
}

int main(void) {
    make_data();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_a_restored_loop_continues_exactly, fresh_scope_setup,
                                        strict_scope_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
