/* A user's own layer (eg_layer_class, eagle/nn.h):
 *   - in a Sequential model it builds, names itself from its type, lists its weights and shows
 *     in the summary like a built-in layer;
 *   - eg_model_fit trains it exactly as a hand-written loop does (same bits), in eager, lazy and
 *     graph mode alike;
 *   - its gradient (through eg_layer_call) matches central differences in f64;
 *   - the training flag reaches its call; non-trainable weights are variables fit leaves alone;
 *   - under a mixed policy its call sees the compute dtype;
 *   - its state is freed with it (and on a failed construction); bad use gets clear errors. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eagle.h"
#include "test_util.h"

/* ---- a layer y = x * scale + shift (per feature), with a non-trainable call counter ---- */

typedef struct affine_state {
    int builds;          /* how often build ran */
    int training_calls;  /* calls with training = true */
    eg_dtype seen_dtype; /* the dtype of the last call's scale */
    int *freed;          /* incremented by free_state */
    eg_dtype dtype;      /* of the weights */
} affine_state;

static eg_status affine_build(eg_layer *layer, void *state, int n_inputs,
                              const eg_layer_shape *shapes) {
    (void)n_inputs;
    affine_state *s = state;
    s->builds++;
    int64_t units = shapes[0].dims[shapes[0].n_dims - 1];
    eg_initializer spread = eg_initializer_random_uniform(0.5, 1.5);
    eg_initializer small = eg_initializer_random_uniform(-0.1, 0.1);
    if (!eg_layer_add_weight(layer, "scale", 1, &units, s->dtype, &spread, true) ||
        !eg_layer_add_weight(layer, "shift", 1, &units, s->dtype, &small, true) ||
        !eg_layer_add_weight(layer, "calls", 0, NULL, s->dtype, NULL, false))
        return eg_last_status();
    return EG_OK;
}

static eg_tensor *affine_call(eg_layer *layer, void *state, int n_inputs, eg_tensor *const *inputs,
                              eg_tensor *const *variables, bool training) {
    (void)n_inputs;
    affine_state *s = state;
    s->seen_dtype = eg_tensor_dtype(variables[0]);
    if (training) {
        s->training_calls++;
        /* a non-trainable weight updated outside the tape, as BatchNormalization's statistics */
        eg_tensor *const *weights = eg_layer_variables(layer, NULL);
        eg_tensor *next = eg_add_scalar(weights[2], 1.0);
        eg_status status = next ? eg_assign(weights[2], next) : eg_last_status();
        eg_release(next);
        if (status != EG_OK) return NULL;
    }
    eg_tensor *scaled = eg_mul(inputs[0], variables[0]);
    eg_tensor *y = scaled ? eg_add(scaled, variables[1]) : NULL;
    eg_release(scaled);
    return y;
}

static void affine_free(void *state) {
    affine_state *s = state;
    if (s->freed) (*s->freed)++;
    free(s);
}

static const eg_layer_class affine_class = {
    .type = "MyAffine",
    .build = affine_build,
    .call = affine_call,
    .free_state = affine_free,
};

static eg_layer *affine_new(eg_dtype dtype, int *freed) {
    affine_state *s = calloc(1, sizeof *s);
    assert_non_null(s);
    s->dtype = dtype;
    s->freed = freed;
    return eg_layer_new_custom(&affine_class, s, NULL);
}

/* ---- the data and model of tests/test_fit.c's kind: three separable blobs ---- */

enum { N = 192, FEATURES = 4, CLASSES = 3, BATCH = 32, HIDDEN = 8 };
static float xs[N * FEATURES];
static int64_t ys[N];

static void make_data(void) {
    uint64_t state = 77;
    for (int i = 0; i < N; i++) {
        ys[i] = i % CLASSES;
        for (int f = 0; f < FEATURES; f++) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            double u = (double)(state >> 40) / (double)(1 << 24) - 0.5;
            xs[i * FEATURES + f] = (float)((f == ys[i] ? 2.0 : 0.0) + 0.6 * u);
        }
    }
}

/* dense(HIDDEN, relu) -> my_affine -> dense(CLASSES) */
static eg_model *make_model(void) {
    eg_manual_seed(5);
    eg_model *model = eg_sequential_new("custom");
    assert_int_equal(eg_sequential_add(model, eg_dense_new(HIDDEN, EG_ACTIVATION_RELU)), EG_OK);
    assert_int_equal(eg_sequential_add(model, affine_new(EG_DTYPE_F32, NULL)), EG_OK);
    assert_int_equal(eg_sequential_add(model, eg_dense_new(CLASSES, EG_ACTIVATION_NONE)), EG_OK);
    assert_int_equal(eg_model_build(model, 2, (int64_t[]){-1, FEATURES}), EG_OK);
    return model;
}

static eg_optimizer *adam(void) {
    eg_adam_options o = eg_adam_options_default();
    o.learning_rate = eg_schedule_constant(0.01);
    return eg_adam_new(&o);
}

enum { MAX_WEIGHTS = 256 };

static int64_t weights_of(eg_model *model, float *out) {
    int n;
    eg_tensor *const *vars = eg_model_variables(model, &n);
    int64_t used = 0;
    for (int i = 0; i < n; i++) {
        int64_t k = eg_tensor_n_elems(vars[i]);
        assert_true(used + k <= MAX_WEIGHTS);
        assert_int_equal(eg_tensor_copy_to_host(vars[i], out + used, (size_t)k * 4), EG_OK);
        used += k;
    }
    return used;
}

static int64_t fit_in_mode(eg_execution_mode mode, float *out) {
    eg_model *model = make_model();
    eg_optimizer *opt = adam();
    eg_compile_options c = {.loss = EG_FIT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                            .from_logits = true,
                            .accuracy = true,
                            .mode = mode};
    assert_int_equal(eg_model_compile(model, opt, &c), EG_OK);
    eg_tensor *x = eg_tensor_from_data(xs, EG_DTYPE_F32, 2, (int64_t[]){N, FEATURES});
    eg_tensor *y = eg_tensor_from_data(ys, EG_DTYPE_I64, 1, (int64_t[]){N});
    eg_dataset *ds =
        eg_dataset_batch(eg_dataset_from_tensor_slices(2, (eg_tensor *[]){x, y}), BATCH, false);
    eg_release(x);
    eg_release(y);
    eg_fit_options o = eg_fit_options_default();
    o.epochs = 2;
    o.verbose = 0;
    eg_history *h = eg_model_fit(model, ds, &o);
    assert_non_null(h);
    int64_t n = weights_of(model, out);
    eg_history_free(h);
    eg_dataset_free(ds);
    eg_optimizer_free(opt);
    eg_model_free(model);
    return n;
}

static void test_custom_layer_in_a_sequential_model(void **state) {
    (void)state;
    int freed = 0;
    eg_model *model = eg_sequential_new(NULL);
    assert_int_equal(eg_sequential_add(model, eg_dense_new(HIDDEN, EG_ACTIVATION_RELU)), EG_OK);
    eg_layer *affine = affine_new(EG_DTYPE_F32, &freed);
    assert_int_equal(eg_sequential_add(model, affine), EG_OK);
    assert_int_equal(eg_sequential_add(model, affine_new(EG_DTYPE_F32, &freed)), EG_OK);
    assert_false(eg_layer_built(affine));
    assert_int_equal(eg_model_build(model, 2, (int64_t[]){-1, FEATURES}), EG_OK);
    assert_true(eg_layer_built(affine));
    assert_string_equal(eg_layer_type(affine), "MyAffine");
    assert_string_equal(eg_layer_name(affine), "my_affine"); /* the type in snake_case */
    assert_string_equal(eg_layer_name(eg_model_layer(model, 2)), "my_affine_1");
    assert_int_equal(((affine_state *)eg_layer_state(affine))->builds, 1);
    int n;
    eg_tensor *const *vars = eg_layer_variables(affine, &n);
    assert_int_equal(n, 3);
    assert_string_equal(eg_variable_name(vars[0]), "my_affine/scale");
    assert_string_equal(eg_variable_name(vars[2]), "my_affine/calls");
    assert_false(eg_variable_trainable(vars[2]));
    eg_model_trainable_variables(model, &n);
    assert_int_equal(n, 2 + 2 + 2); /* dense's two, each affine's scale and shift */
    eg_model_variables(model, &n);
    assert_int_equal(n, 2 + 3 + 3);
    /* (HIDDEN scale + HIDDEN shift + 1 counter) per affine */
    assert_int_equal(eg_model_count_params(model),
                     FEATURES * HIDDEN + HIDDEN + 2 * (2 * HIDDEN + 1));

    char *text = NULL;
    size_t size = 0;
    FILE *out = open_memstream(&text, &size);
    assert_int_equal(eg_model_summary(model, out), EG_OK);
    fclose(out);
    assert_non_null(strstr(text, " my_affine (MyAffine)        (None, 8)                 17\n"));
    assert_non_null(strstr(text, "Non-trainable params: 2\n"));
    free(text);

    /* the training flag reaches the call; the model's output is its weights' arithmetic */
    eg_tensor *x = uniform_tensor(2, (int64_t[]){3, FEATURES}, 9);
    eg_tensor *inference = eg_model_call(model, x, false);
    assert_int_equal(((affine_state *)eg_layer_state(affine))->training_calls, 0);
    eg_tensor *training = eg_model_call(model, x, true);
    assert_int_equal(((affine_state *)eg_layer_state(affine))->training_calls, 1);
    assert_float_equal(eg_item(eg_layer_variables(affine, NULL)[2]), 1.0, 0);
    assert_memory_equal(eg_tensor_data(inference), eg_tensor_data(training), 3 * HIDDEN * 4);
    eg_tensor *h = eg_layer_call(eg_model_layer(model, 0), x, false);
    eg_tensor *expected = eg_add(eg_mul(h, vars[0]), vars[1]);
    eg_tensor *got = eg_layer_call(affine, h, false);
    assert_memory_equal(eg_tensor_data(expected), eg_tensor_data(got), 3 * HIDDEN * 4);
    eg_model_free(model);
    assert_int_equal(freed, 2);
}

static void test_fit_trains_it_as_a_hand_loop_does(void **state) {
    (void)state;
    static float by_fit[MAX_WEIGHTS], by_hand[MAX_WEIGHTS], lazy[MAX_WEIGHTS], graph[MAX_WEIGHTS];
    int64_t n_weights = fit_in_mode(EG_EXECUTION_EAGER, by_fit);

    eg_model *model = make_model();
    eg_optimizer *opt = adam();
    int n;
    eg_tensor *const *vars = eg_model_trainable_variables(model, &n);
    assert_int_equal(n, 6);
    for (int epoch = 0; epoch < 2; epoch++)
        for (int64_t first = 0; first < N; first += BATCH) {
            eg_scope_begin();
            eg_tensor *x = eg_tensor_from_data(xs + first * FEATURES, EG_DTYPE_F32, 2,
                                               (int64_t[]){BATCH, FEATURES});
            eg_tensor *y = eg_tensor_from_data(ys + first, EG_DTYPE_I64, 1, (int64_t[]){BATCH});
            eg_tape *tape = eg_tape_begin(false);
            eg_tensor *loss = eg_loss_sparse_categorical_crossentropy(
                y, eg_model_call(model, x, true), true, EG_REDUCTION_MEAN);
            eg_tensor *grads[6];
            assert_int_equal(eg_tape_gradient(tape, loss, n, vars, grads, EG_UNCONNECTED_ZERO),
                             EG_OK);
            eg_tape_free(tape);
            assert_int_equal(eg_optimizer_apply_gradients(opt, n, grads, vars), EG_OK);
            eg_scope_end();
        }
    assert_int_equal(weights_of(model, by_hand), n_weights);
    assert_memory_equal(by_fit, by_hand, (size_t)n_weights * 4);
    /* the counter counted every training step: 2 epochs of N / BATCH batches */
    float calls = by_hand[FEATURES * HIDDEN + HIDDEN + 2 * HIDDEN];
    assert_float_equal(calls, 2.0 * N / BATCH, 0);
    eg_optimizer_free(opt);
    eg_model_free(model);

    assert_int_equal(fit_in_mode(EG_EXECUTION_LAZY, lazy), n_weights);
    assert_int_equal(fit_in_mode(EG_EXECUTION_GRAPH, graph), n_weights);
    double worst = 0;
    for (int64_t i = 0; i < n_weights; i++) {
        double scale = 1 + fabs(by_fit[i]);
        worst = fmax(worst, fabs(lazy[i] - by_fit[i]) / scale);
        worst = fmax(worst, fabs(graph[i] - by_fit[i]) / scale);
    }
    print_message("largest difference from eager: %.2e\n", worst);
    assert_true(worst <= 1e-6);
    /* the traced step updated the non-trainable counter at every replay too */
    assert_float_equal(graph[FEATURES * HIDDEN + HIDDEN + 2 * HIDDEN], 2.0 * N / BATCH, 0);
}

/* L = sum(w_out * layer(x)) for the layer in f64; dL/dscale and dL/dshift by the tape against
 * central differences. */
static void test_gradient_matches_central_differences(void **state) {
    (void)state;
    enum { B = 3, D = 4 };
    eg_manual_seed(3);
    eg_layer *layer = affine_new(EG_DTYPE_F64, NULL);
    double x_data[B * D], w_data[B * D];
    for (int i = 0; i < B * D; i++) {
        x_data[i] = sin(1.3 * i + 0.2);
        w_data[i] = cos(0.7 * i);
    }
    eg_tensor *x = eg_tensor_from_data(x_data, EG_DTYPE_F64, 2, (int64_t[]){B, D});
    eg_tensor *w = eg_tensor_from_data(w_data, EG_DTYPE_F64, 2, (int64_t[]){B, D});
    /* a square makes the gradient depend on the weights, not just on x */
    eg_tape *tape = eg_tape_begin(false);
    eg_tensor *y = eg_layer_call(layer, x, false);
    eg_tensor *loss = eg_sum(eg_mul(eg_mul(y, y), w), 0, NULL, false);
    eg_tensor *const *vars = eg_layer_variables(layer, NULL);
    eg_tensor *grads[2];
    assert_int_equal(eg_tape_gradient(tape, loss, 2, vars, grads, EG_UNCONNECTED_ZERO), EG_OK);
    eg_tape_free(tape);
    const double step = 1e-6;
    int checked = 0;
    for (int v = 0; v < 2; v++) {
        double values[D];
        assert_int_equal(eg_tensor_copy_to_host(vars[v], values, sizeof values), EG_OK);
        const double *analytic = eg_tensor_data(grads[v]);
        for (int i = 0; i < D; i++) {
            double around[2];
            for (int side = 0; side < 2; side++) {
                double moved[D];
                memcpy(moved, values, sizeof moved);
                moved[i] += side ? -step : step;
                eg_tensor *t = eg_tensor_from_data(moved, EG_DTYPE_F64, 1, (int64_t[]){D});
                assert_int_equal(eg_assign(vars[v], t), EG_OK);
                eg_tensor *out = eg_layer_call(layer, x, false);
                around[side] = eg_item(eg_sum(eg_mul(eg_mul(out, out), w), 0, NULL, false));
            }
            double numeric = (around[0] - around[1]) / (2 * step);
            assert_true(fabs(analytic[i] - numeric) <= 1e-6 * (1 + fabs(numeric)));
            checked++;
        }
        assert_int_equal(
            eg_assign(vars[v], eg_tensor_from_data(values, EG_DTYPE_F64, 1, (int64_t[]){D})),
            EG_OK);
    }
    assert_int_equal(checked, 2 * D);
    eg_layer_free(layer);
}

static void test_mixed_policy_casts_what_the_call_sees(void **state) {
    (void)state;
    eg_layer *layer = affine_new(EG_DTYPE_F32, NULL);
    assert_int_equal(eg_layer_set_policy(layer, EG_POLICY_MIXED_BFLOAT16), EG_OK);
    eg_tensor *x = uniform_tensor(2, (int64_t[]){2, 3}, 4);
    eg_tensor *y = eg_layer_call(layer, x, false);
    assert_non_null(y);
    assert_int_equal(eg_tensor_dtype(y), EG_DTYPE_BF16);
    assert_int_equal(((affine_state *)eg_layer_state(layer))->seen_dtype, EG_DTYPE_BF16);
    /* the master weights stay f32 */
    assert_int_equal(eg_tensor_dtype(eg_layer_variables(layer, NULL)[0]), EG_DTYPE_F32);
    eg_layer_free(layer);
}

static eg_status failing_build(eg_layer *layer, void *state, int n_inputs,
                               const eg_layer_shape *shapes) {
    (void)state, (void)n_inputs, (void)shapes;
    int64_t two = 2;
    assert_non_null(eg_layer_add_weight(layer, "half", 1, &two, EG_DTYPE_F32, NULL, true));
    return EG_ERR_SHAPE; /* without a message: the library names the layer */
}

static eg_tensor *identity_call(eg_layer *layer, void *state, int n_inputs,
                                eg_tensor *const *inputs, eg_tensor *const *variables,
                                bool training) {
    (void)layer, (void)state, (void)n_inputs, (void)variables, (void)training;
    return eg_reshape(inputs[0], eg_tensor_n_dims(inputs[0]), eg_tensor_shape(inputs[0]));
}

static void count_free(void *state) {
    (*(int *)state)++;
}

static void test_bad_use_gets_clear_errors(void **state) {
    (void)state;
    int freed = 0;
    assert_null(eg_layer_new_custom(NULL, NULL, NULL));
    expect_error(EG_ERR_NULL_ARGUMENT);
    /* a class without a call is refused, and the state given is freed */
    static const eg_layer_class no_call = {.type = "NoCall", .free_state = count_free};
    assert_null(eg_layer_new_custom(&no_call, &freed, NULL));
    expect_error_containing(EG_ERR_NULL_ARGUMENT, "no call", NULL);
    assert_int_equal(freed, 1);
    static const eg_layer_class bad_counts = {
        .type = "Bad", .call = identity_call, .min_inputs = 3, .max_inputs = 2};
    assert_null(eg_layer_new_custom(&bad_counts, NULL, NULL));
    expect_error(EG_ERR_INVALID_ARGUMENT);

    /* weights only for custom layers, one name once */
    eg_layer *dense = eg_dense_new(2, EG_ACTIVATION_NONE);
    int64_t two = 2;
    assert_null(eg_layer_add_weight(dense, "extra", 1, &two, EG_DTYPE_F32, NULL, true));
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "built-in Dense", NULL);
    eg_layer_free(dense);
    static const eg_layer_class plain = {.type = "Plain", .call = identity_call};
    eg_layer *layer = eg_layer_new_custom(&plain, NULL, "mine");
    assert_non_null(eg_layer_add_weight(layer, "w", 1, &two, EG_DTYPE_F32, NULL, true));
    assert_null(eg_layer_add_weight(layer, "w", 1, &two, EG_DTYPE_F32, NULL, true));
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "'mine' already has a weight 'w'", NULL);
    assert_null(eg_layer_add_weight(layer, "i", 1, &two, EG_DTYPE_I32, NULL, true));
    expect_error(EG_ERR_DTYPE);
    eg_layer_free(layer);

    /* a failing build names the layer and keeps none of its weights; a retry builds again */
    static const eg_layer_class fails = {
        .type = "Fails", .build = failing_build, .call = identity_call};
    layer = eg_layer_new_custom(&fails, NULL, NULL);
    eg_tensor *x = uniform_tensor(2, (int64_t[]){2, 3}, 1);
    assert_null(eg_layer_call(layer, x, false));
    expect_error_containing(EG_ERR_SHAPE, "'fails' (Fails): build failed", NULL);
    assert_false(eg_layer_built(layer));
    assert_int_equal(eg_layer_count_params(layer), 0);
    eg_layer_free(layer);

    /* a layer of several inputs is not for a Sequential model (it is freed, as on any failure) */
    eg_model *model = eg_sequential_new(NULL);
    assert_int_equal(eg_sequential_add(model, eg_add_layer_new(NULL)), EG_ERR_INVALID_ARGUMENT);
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "several inputs", NULL);
    eg_model_free(model);
    /* and one input is not enough for it */
    eg_layer *add = eg_add_layer_new(NULL);
    assert_null(eg_layer_call(add, x, false));
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "takes 2 to 16 inputs, got 1", NULL);
    eg_tensor *sum = eg_layer_call_multi(add, 2, (eg_tensor *[]){x, x}, false);
    eg_tensor *twice = eg_add(x, x);
    assert_memory_equal(eg_tensor_data(sum), eg_tensor_data(twice), 6 * 4);
    eg_layer_free(add);
}

int main(void) {
    make_data();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_custom_layer_in_a_sequential_model, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_fit_trains_it_as_a_hand_loop_does, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_gradient_matches_central_differences,
                                        fresh_scope_setup, strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_mixed_policy_casts_what_the_call_sees,
                                        fresh_scope_setup, strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_bad_use_gets_clear_errors, fresh_scope_setup,
                                        strict_scope_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
