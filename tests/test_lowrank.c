/* Low-rank Dense layers (eagle/approx.h): the factorization's error is what Eckart-Young says
 * (the energy of the dropped singular values), full rank reproduces the layer, an energy
 * fraction picks the smallest rank keeping it, the factors train, a Sequential model's Dense
 * layers are replaced in place under their own names, and the error budget chooses per layer
 * within it (exact everywhere at 0). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "test_util.h"

/* A built Dense (in -> units) with random kernel and bias from seed. */
static eg_layer *random_dense(uint64_t seed, int64_t in, int64_t units, eg_activation activation) {
    eg_layer *dense = eg_dense_new(units, activation);
    assert_int_equal(eg_layer_build(dense, 2, (const int64_t[]){-1, in}), EG_OK);
    int n = 0;
    eg_tensor *const *vars = eg_layer_variables(dense, &n);
    eg_generator *g = eg_generator_new(seed);
    eg_scope_begin();
    assert_int_equal(eg_assign(vars[0], eg_random_normal(g, EG_DTYPE_F32, 2,
                                                         (const int64_t[]){in, units}, 0, 1)),
                     EG_OK);
    assert_int_equal(eg_assign(vars[1], eg_random_uniform(g, EG_DTYPE_F32, 1, &units, -0.5, 0.5)),
                     EG_OK);
    eg_scope_end();
    eg_generator_free(g);
    return dense;
}

/* U V against W: the dropped energy is 1 - kept (Eckart-Young), for several ranks; full rank is
 * W itself; the layer's calls follow. */
static void test_error_is_the_dropped_energy(void **state) {
    (void)state;
    eg_layer *dense = random_dense(1, 60, 40, EG_ACTIVATION_NONE);
    const eg_tensor *w = eg_layer_variables(dense, &(int){0})[0];
    eg_tensor *x = eg_random_uniform(NULL, EG_DTYPE_F32, 2, (const int64_t[]){7, 60}, -1, 1);
    eg_tensor *exact = eg_layer_call(dense, x, false);
    double previous = 0;
    const int64_t ranks[4] = {1, 8, 20, 40};
    for (int i = 0; i < 4; i++) {
        double kept = -1;
        eg_layer *thin = eg_dense_lowrank_new(dense, ranks[i], 0, &kept);
        assert_non_null(thin);
        assert_true(eg_layer_is_lowrank(thin));
        assert_false(eg_layer_is_lowrank(dense));
        assert_true(kept > previous && kept <= 1 + 1e-9);
        previous = kept;
        eg_tensor *const *f = eg_layer_variables(thin, &(int){0});
        assert_int_equal(eg_tensor_dim(f[0], 1), ranks[i]);
        eg_tensor *product = eg_matmul(f[0], f[1]);
        double dropped = pow(tensors_relative_error(product, w), 2);
        assert_true(fabs(dropped - (1 - kept)) < 1e-4);
        double output_error = pow(tensors_relative_error(eg_layer_call(thin, x, false), exact), 2);
        if (ranks[i] == 40) {
            assert_true(dropped < 1e-10);
            assert_true(output_error < 1e-10);
        } else {
            assert_true(dropped > 1e-3); /* a random matrix has no small singular values */
            assert_true(output_error > 0);
        }
        eg_layer_free(thin);
    }
    eg_layer_free(dense);
}

/* energy e: the smallest rank keeping e of the energy */
static void test_energy_picks_the_smallest_rank(void **state) {
    (void)state;
    eg_layer *dense = random_dense(2, 50, 30, EG_ACTIVATION_RELU);
    double kept = 0;
    eg_layer *thin = eg_dense_lowrank_new(dense, 0, 0.9, &kept);
    assert_non_null(thin);
    int64_t r = eg_tensor_dim(eg_layer_variables(thin, &(int){0})[0], 1);
    assert_true(kept >= 0.9);
    assert_true(r >= 1 && r < 30);
    double below = 1;
    eg_layer *smaller = eg_dense_lowrank_new(dense, r - 1 ? r - 1 : 1, 0, &below);
    assert_non_null(smaller);
    if (r > 1) assert_true(below < 0.9);
    eg_layer *all = eg_dense_lowrank_new(dense, 0, 1.0, &kept);
    assert_non_null(all);
    assert_true(fabs(kept - 1) < 1e-9);
    eg_layer_free(all);
    eg_layer_free(smaller);
    eg_layer_free(thin);
    eg_layer_free(dense);
}

/* The factors are trainable weights: a tape reaches both, and a few SGD steps on a target the
 * full layer fits lower the loss. */
static void test_factors_train(void **state) {
    (void)state;
    eg_layer *dense = random_dense(3, 20, 16, EG_ACTIVATION_NONE);
    eg_layer *thin = eg_dense_lowrank_new(dense, 4, 0, NULL);
    assert_non_null(thin);
    int n = 0;
    eg_tensor *const *vars = eg_layer_variables(thin, &n);
    assert_int_equal(n, 3); /* u, v, bias */
    eg_tensor *x = eg_random_uniform(NULL, EG_DTYPE_F32, 2, (const int64_t[]){32, 20}, -1, 1);
    eg_tensor *target = eg_layer_call(dense, x, false);
    eg_sgd_options options = eg_sgd_options_default();
    options.learning_rate = eg_schedule_constant(0.05);
    eg_optimizer *sgd = eg_sgd_new(&options);
    double first = 0, last = 0;
    for (int step = 0; step < 30; step++) {
        eg_scope_begin();
        eg_tape *tape = eg_tape_begin(false);
        eg_tensor *loss =
            eg_mean(eg_square(eg_sub(eg_layer_call(thin, x, true), target)), 0, NULL, false);
        eg_tensor *grads[3] = {0};
        assert_int_equal(eg_tape_gradient(tape, loss, 3, vars, grads, EG_UNCONNECTED_NULL), EG_OK);
        eg_tape_free(tape);
        for (int i = 0; i < 3; i++) assert_non_null(grads[i]);
        double value = eg_item(loss);
        if (step == 0) first = value;
        last = value;
        assert_int_equal(eg_optimizer_apply_gradients(sgd, 3, grads, vars), EG_OK);
        eg_scope_end();
    }
    assert_true(last < 0.9 * first);
    eg_optimizer_free(sgd);
    eg_layer_free(thin);
    eg_layer_free(dense);
}

/* A Sequential 30 -> 20 -> 10: both Dense layers replaced at rank 4 (they save weights), under
 * their names; the model's calls run the factors; a rank that saves nothing keeps the layer. */
static void test_model_layers_are_replaced(void **state) {
    (void)state;
    eg_model *model = eg_sequential_new(NULL);
    assert_int_equal(eg_sequential_add(model, eg_dense_new(20, EG_ACTIVATION_RELU)), EG_OK);
    assert_int_equal(eg_sequential_add(model, eg_dense_new(10, EG_ACTIVATION_NONE)), EG_OK);
    assert_int_equal(eg_model_build(model, 2, (const int64_t[]){-1, 30}), EG_OK);
    eg_tensor *x = eg_random_uniform(NULL, EG_DTYPE_F32, 2, (const int64_t[]){5, 30}, -1, 1);
    int64_t params = eg_model_count_params(model);
    int replaced = -1;
    assert_int_equal(eg_model_lowrank(model, 9, 0, &replaced), EG_OK);
    assert_int_equal(replaced, 1); /* 9 (20 + 10) >= 200: the second stays */
    assert_true(eg_layer_is_lowrank(eg_model_layer(model, 0)));
    assert_false(eg_layer_is_lowrank(eg_model_layer(model, 1)));
    assert_int_equal(eg_model_lowrank(model, 4, 0, &replaced), EG_OK);
    assert_int_equal(replaced, 1); /* the second now; a LowRankDense is no Dense */
    assert_string_equal(eg_layer_name(eg_model_layer(model, 0)), "dense");
    assert_string_equal(eg_layer_name(eg_model_layer(model, 1)), "dense_1");
    int n = 0;
    eg_tensor *const *vars = eg_model_variables(model, &n);
    assert_int_equal(n, 6);
    assert_string_equal(eg_variable_name(vars[0]), "dense/u");
    assert_string_equal(eg_variable_name(vars[4]), "dense_1/v");
    assert_int_equal(eg_model_count_params(model), 9 * 50 + 20 + 4 * 30 + 10);
    assert_true(eg_model_count_params(model) < params);
    eg_tensor *y = eg_model_call(model, x, false);
    assert_non_null(y);
    assert_int_equal(eg_tensor_dim(y, 1), 10);
    eg_model_free(model);
}

/* The budget: 0 keeps every layer exact (the model's outputs unchanged, bit for bit); a budget
 * of 5 % holds every choice within it, each approximation faster than its exact call; bad
 * arguments are named. */
static void test_budget(void **state) {
    (void)state;
    eg_manual_seed(5);
    eg_model *model = eg_sequential_new(NULL);
    assert_int_equal(eg_sequential_add(model, eg_dense_new(256, EG_ACTIVATION_RELU)), EG_OK);
    assert_int_equal(eg_sequential_add(model, eg_dense_new(256, EG_ACTIVATION_RELU)), EG_OK);
    assert_int_equal(eg_sequential_add(model, eg_dense_new(10, EG_ACTIVATION_NONE)), EG_OK);
    assert_int_equal(eg_model_build(model, 2, (const int64_t[]){-1, 300}), EG_OK);
    eg_tensor *x = eg_random_uniform(NULL, EG_DTYPE_F32, 2, (const int64_t[]){128, 300}, 0, 1);
    eg_tensor *before = eg_model_call(model, x, false);
    eg_approx_choice choices[4];
    int n = -1;
    assert_int_equal(eg_model_choose_approx(model, x, 0, choices, 4, &n), EG_OK);
    assert_int_equal(n, 3);
    for (int i = 0; i < n; i++) {
        assert_string_equal(choices[i].policy, "exact");
        assert_int_equal(choices[i].candidates, 0);
    }
    assert_false(eg_layer_is_quantized(eg_model_layer(model, 0)));
    eg_tensor *after = eg_model_call(model, x, false);
    assert_memory_equal(eg_tensor_data(before), eg_tensor_data(after), 128 * 10 * sizeof(float));

    assert_int_equal(eg_model_choose_approx(model, x, 0.05, choices, 4, &n), EG_OK);
    assert_int_equal(n, 3);
    assert_string_equal(choices[0].layer, "dense");
    for (int i = 0; i < n; i++) {
        print_message("%s: %s, error %.4f, %.3f ms against %.3f exact (%d candidates)\n",
                      choices[i].layer, choices[i].policy, choices[i].error, choices[i].chosen_ms,
                      choices[i].exact_ms, choices[i].candidates);
        assert_true(choices[i].error <= 0.05);
        assert_true(choices[i].candidates >= 1);
        bool exact = !strcmp(choices[i].policy, "exact");
        assert_true(exact || !strcmp(choices[i].policy, "int8") ||
                    !strncmp(choices[i].policy, "lowrank:", 8));
        assert_true(exact || choices[i].chosen_ms < choices[i].exact_ms);
        assert_int_equal(eg_layer_is_lowrank(eg_model_layer(model, i)),
                         !strncmp(choices[i].policy, "lowrank:", 8));
        assert_int_equal(eg_layer_is_quantized(eg_model_layer(model, i)),
                         !strcmp(choices[i].policy, "int8"));
    }
    assert_non_null(eg_model_call(model, x, false));
    assert_int_equal(eg_model_choose_approx(model, x, -1, NULL, 0, NULL), EG_ERR_INVALID_ARGUMENT);
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "budget -1 is negative", NULL);
    assert_int_equal(eg_model_choose_approx(model, NULL, 0, NULL, 0, NULL), EG_ERR_NULL_ARGUMENT);
    eg_clear_error();
    eg_model_free(model);
}

static void test_refusals(void **state) {
    (void)state;
    eg_layer *dense = random_dense(4, 12, 8, EG_ACTIVATION_NONE);
    assert_null(eg_dense_lowrank_new(dense, 4, 0.5, NULL));
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "not both", NULL);
    eg_clear_error();
    assert_null(eg_dense_lowrank_new(dense, 9, 0, NULL));
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "a rank in [1, 8]", NULL);
    eg_clear_error();
    assert_null(eg_dense_lowrank_new(dense, 0, 1.5, NULL));
    eg_clear_error();
    assert_null(eg_dense_lowrank_new(NULL, 2, 0, NULL));
    expect_error_containing(EG_ERR_NULL_ARGUMENT, "dense is NULL", NULL);
    eg_clear_error();
    eg_layer *unbuilt = eg_dense_new(3, EG_ACTIVATION_NONE);
    assert_null(eg_dense_lowrank_new(unbuilt, 2, 0, NULL));
    expect_error_containing(EG_ERR_STATE, "not a built Dense layer", NULL);
    eg_clear_error();
    eg_layer *flatten = eg_flatten_new(NULL);
    assert_null(eg_dense_lowrank_new(flatten, 2, 0, NULL));
    expect_error_containing(EG_ERR_UNSUPPORTED, "not a built Dense layer", NULL);
    eg_clear_error();
    assert_int_equal(eg_model_lowrank(NULL, 2, 0, NULL), EG_ERR_NULL_ARGUMENT);
    eg_clear_error();
    eg_layer_free(flatten);
    eg_layer_free(unbuilt);
    eg_layer_free(dense);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_error_is_the_dropped_energy, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_energy_picks_the_smallest_rank, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_factors_train, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_model_layers_are_replaced, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_budget, fresh_scope_setup, strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_refusals, fresh_scope_setup, strict_scope_teardown),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    eg_shutdown();
    return failed;
}
