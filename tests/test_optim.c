/* Optimizers and learning-rate schedules: three steps of every optimizer on a fixed tiny problem
 * compared with values computed independently by tests/optim_reference/reference.py (NumPy in
 * float32, Keras 3's update equations); slots, step counter, gradient conversions, refusals that
 * leave everything unchanged; schedule values; a small regression that Adam solves; and state
 * (slots, step counter) restored into a fresh optimizer continuing bit-identically; and Adam's f32
 * step on every CPU path within stated bounds of a double-precision evaluation. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu_features.h"
#include "eagle.h"

/* ---- reference values: printed by tests/optim_reference/reference.py ---- */
/* variable after 3 steps; then the slots in Keras' order */
static const float expected_sgd[] = {0.50150001, -1.00450003, 2.01200008, -0.0149999997};
static const float expected_sgd_momentum[] = {0.542900026, -1.04680002, 2.06870008, -0.24000001};
static const float expected_sgd_momentum_slot0[] = {0.0118999984, -0.0448000021, 0.125700012,
                                                    -0.140000001};
static const float expected_sgd_nesterov[] = {0.553610027, -1.08712006, 2.18182993, -0.365999997};
static const float expected_sgd_nesterov_slot0[] = {0.0118999984, -0.0448000021, 0.125700012,
                                                    -0.140000001};
static const float expected_sgd_weight_decay[] = {0.513471544, -1.04200292, 2.11406612,
                                                  -0.149900004};
static const float expected_adam[] = {0.499732316, -0.999924958, 1.99885488, -0.00154437358};
static const float expected_adam_slot0[] = {-0.0119000003, 0.0448000133, -0.125700027, 0.14000003};
static const float expected_adam_slot1[] = {0.000322225853, 0.000262256683, 0.00233979011,
                                            0.0012489839};
static const float expected_adam_lr[] = {0.482968837, -1.00597644, 1.90228081, -0.159318045};
static const float expected_adam_lr_slot0[] = {-0.0172000006, 0.0883999914, -0.261599958,
                                               0.25999999};
static const float expected_adam_lr_slot1[] = {0.00319800689, 0.00260103773, 0.0233820695,
                                               0.0123999882};
static const float expected_adamw[] = {0.499726325, -0.999912977, 1.99883091, -0.00154437055};
static const float expected_adamw_lr[] = {0.459770828, -0.964418113, 1.8287493, -0.153693199};
static const float expected_rmsprop[] = {0.498490632, -1.00131238, 1.99995005, -0.00463669468};
static const float expected_rmsprop_slot0[] = {0.0295600072, 0.0238900054, 0.232290059,
                                               0.115000024};
static const float expected_rmsprop_momentum_centered[] = {0.480977118, -1.00111735, 1.98017502,
                                                           -0.0507499538};
static const float expected_rmsprop_momentum_centered_slot0[] = {0.0537799969, 0.0432199985,
                                                                 0.461519986, 0.209999993};
static const float expected_rmsprop_momentum_centered_slot1[] = {0.00521457009, 0.0175632425,
                                                                 -0.017674787, 0.0257499628};
static const float expected_rmsprop_momentum_centered_slot2[] = {-0.0172000006, 0.0883999914,
                                                                 -0.261599988, 0.25999999};
static const int64_t schedule_steps[] = {0, 1, 5, 10, 15, 99, 100, 150};
static const double expected_exponential[] = {0.100000001,    0.0933033004,  0.0707106814,
                                              0.0500000007,   0.0353553407,  0.000104665407,
                                              9.76562515e-05, 3.05175786e-06};
static const double expected_exponential_staircase[] = {
    0.100000001,  0.100000001,    0.100000001,    0.0500000007,
    0.0500000007, 0.000195312503, 9.76562515e-05, 3.05175786e-06};
static const double expected_cosine[] = {0.100000001,  0.0999777913, 0.0994459763, 0.0977975428,
                                         0.0950952917, 0.0100222062, 0.0100000007, 0.0100000007};

/* The fixed problem (same as reference.py): a (2, 2) variable and three gradients. */
static const float w0[4] = {0.5f, -1.0f, 2.0f, 0.0f};
static const float grads_by_step[3][4] = {
    {0.1f, -0.2f, 0.3f, 0.0f}, {-0.5f, 0.4f, 0.0f, 1.0f}, {0.25f, 0.25f, -1.5f, 0.5f}};
static const int64_t shape22[2] = {2, 2};

static int setup(void **state) {
    (void)state;
    eg_clear_error();
    eg_scope_begin();
    return 0;
}

static int teardown(void **state) {
    (void)state;
    assert_int_equal(eg_scope_end(), EG_OK);
    assert_int_equal(eg_scope_depth(), 0);
    eg_clear_error();
    return 0;
}

static eg_tensor *new_variable(const float *values, const char *name) {
    eg_tensor *init = eg_tensor_from_data(values, EG_DTYPE_F32, 2, shape22);
    assert_non_null(init);
    eg_tensor *v = eg_variable(init, name);
    assert_non_null(v);
    return v;
}

static void expect_values(const eg_tensor *t, const float *expected, int n, double tol) {
    assert_non_null(t);
    assert_int_equal(eg_tensor_n_elems(t), n);
    float got[16];
    assert_int_equal(eg_tensor_copy_to_host(t, got, sizeof got), EG_OK);
    for (int i = 0; i < n; i++) {
        double scale = fmax(1.0, fabs(expected[i]));
        if (fabs(got[i] - expected[i]) > tol * scale)
            fail_msg("element %d: got %.9g, expected %.9g", i, got[i], expected[i]);
    }
}

/* Runs the three steps; returns the variable (caller releases). */
static eg_tensor *run_three_steps(eg_optimizer *opt) {
    assert_non_null(opt);
    eg_tensor *v = new_variable(w0, "w");
    for (int step = 0; step < 3; step++) {
        eg_tensor *g = eg_tensor_from_data(grads_by_step[step], EG_DTYPE_F32, 2, shape22);
        assert_int_equal(eg_optimizer_apply_gradients(opt, 1, &g, &v), EG_OK);
        assert_int_equal(eg_optimizer_iterations(opt), step + 1);
    }
    return v;
}

#define TOL 2e-6

static void test_sgd(void **state) {
    (void)state;
    eg_optimizer *opt = eg_sgd_new(NULL);
    assert_string_equal(eg_optimizer_name(opt), "sgd");
    assert_float_equal(eg_optimizer_learning_rate(opt), 0.01, 1e-15);
    eg_tensor *v = run_three_steps(opt);
    expect_values(v, expected_sgd, 4, TOL);
    assert_null(eg_optimizer_get_slot(opt, v, "momentum")); /* momentum 0: no slot */
    eg_optimizer_free(opt);
    eg_release(v);
}

static void test_sgd_momentum_and_nesterov(void **state) {
    (void)state;
    for (int nesterov = 0; nesterov < 2; nesterov++) {
        eg_sgd_options o = eg_sgd_options_default();
        o.learning_rate = eg_schedule_constant(0.1);
        o.momentum = 0.9;
        o.nesterov = nesterov;
        eg_optimizer *opt = eg_sgd_new(&o);
        eg_tensor *v = run_three_steps(opt);
        expect_values(v, nesterov ? expected_sgd_nesterov : expected_sgd_momentum, 4, TOL);
        expect_values(eg_optimizer_get_slot(opt, v, "momentum"),
                      nesterov ? expected_sgd_nesterov_slot0 : expected_sgd_momentum_slot0, 4, TOL);
        eg_optimizer_free(opt);
        eg_release(v);
    }
}

static void test_sgd_weight_decay(void **state) {
    (void)state;
    eg_sgd_options o = eg_sgd_options_default();
    o.learning_rate = eg_schedule_constant(0.1);
    o.weight_decay = 0.01;
    eg_optimizer *opt = eg_sgd_new(&o);
    eg_tensor *v = run_three_steps(opt);
    expect_values(v, expected_sgd_weight_decay, 4, TOL);
    eg_optimizer_free(opt);
    eg_release(v);
}

static void test_adam(void **state) {
    (void)state;
    eg_optimizer *opt = eg_adam_new(NULL); /* Keras' Adam() */
    assert_string_equal(eg_optimizer_name(opt), "adam");
    eg_tensor *v = run_three_steps(opt);
    expect_values(v, expected_adam, 4, TOL);
    expect_values(eg_optimizer_get_slot(opt, v, "momentum"), expected_adam_slot0, 4, TOL);
    expect_values(eg_optimizer_get_slot(opt, v, "velocity"), expected_adam_slot1, 4, TOL);
    assert_null(eg_optimizer_get_slot(opt, v, "average_gradient"));
    eg_optimizer_free(opt);
    eg_release(v);

    eg_adam_options o = eg_adam_options_default();
    o.learning_rate = eg_schedule_constant(0.1);
    o.beta_1 = 0.8;
    o.beta_2 = 0.99;
    o.epsilon = 1e-3;
    opt = eg_adam_new(&o);
    v = run_three_steps(opt);
    expect_values(v, expected_adam_lr, 4, TOL);
    expect_values(eg_optimizer_get_slot(opt, v, "momentum"), expected_adam_lr_slot0, 4, TOL);
    expect_values(eg_optimizer_get_slot(opt, v, "velocity"), expected_adam_lr_slot1, 4, TOL);
    eg_optimizer_free(opt);
    eg_release(v);
}

static void test_adam_f64(void **state) {
    (void)state;
    /* f64 variables take the double loop; the f32 reference holds to f32 precision. */
    double w64[4], g64[4];
    for (int i = 0; i < 4; i++) w64[i] = w0[i];
    eg_tensor *init = eg_tensor_from_data(w64, EG_DTYPE_F64, 2, shape22);
    eg_tensor *v = eg_variable(init, "w64");
    eg_optimizer *opt = eg_adam_new(NULL);
    for (int step = 0; step < 3; step++) {
        for (int i = 0; i < 4; i++) g64[i] = grads_by_step[step][i];
        eg_tensor *g = eg_tensor_from_data(g64, EG_DTYPE_F64, 2, shape22);
        assert_int_equal(eg_optimizer_apply_gradients(opt, 1, &g, &v), EG_OK);
    }
    eg_tensor *as32 = eg_cast(v, EG_DTYPE_F32);
    expect_values(as32, expected_adam, 4, 1e-5);
    assert_int_equal(eg_tensor_dtype(eg_optimizer_get_slot(opt, v, "velocity")), EG_DTYPE_F64);
    eg_optimizer_free(opt);
    eg_release(v);
}

static void test_adamw(void **state) {
    (void)state;
    eg_adam_options defaults = eg_adamw_options_default();
    assert_float_equal(defaults.weight_decay, 0.004, 1e-15);
    assert_float_equal(defaults.epsilon, 1e-7, 1e-20);
    eg_optimizer *opt = eg_adamw_new(NULL);
    assert_string_equal(eg_optimizer_name(opt), "adamw");
    eg_tensor *v = run_three_steps(opt);
    expect_values(v, expected_adamw, 4, TOL);
    eg_optimizer_free(opt);
    eg_release(v);

    eg_adam_options o = eg_adamw_options_default();
    o.learning_rate = eg_schedule_constant(0.1);
    o.weight_decay = 0.1;
    opt = eg_adamw_new(&o);
    v = run_three_steps(opt);
    expect_values(v, expected_adamw_lr, 4, TOL);
    eg_optimizer_free(opt);
    eg_release(v);
}

static void test_rmsprop(void **state) {
    (void)state;
    eg_optimizer *opt = eg_rmsprop_new(NULL);
    assert_string_equal(eg_optimizer_name(opt), "rmsprop");
    eg_tensor *v = run_three_steps(opt);
    expect_values(v, expected_rmsprop, 4, TOL);
    expect_values(eg_optimizer_get_slot(opt, v, "velocity"), expected_rmsprop_slot0, 4, TOL);
    assert_null(eg_optimizer_get_slot(opt, v, "momentum"));
    eg_optimizer_free(opt);
    eg_release(v);

    eg_rmsprop_options o = eg_rmsprop_options_default();
    o.learning_rate = eg_schedule_constant(0.01);
    o.rho = 0.8;
    o.momentum = 0.5;
    o.centered = true;
    opt = eg_rmsprop_new(&o);
    v = run_three_steps(opt);
    expect_values(v, expected_rmsprop_momentum_centered, 4, 1e-5);
    expect_values(eg_optimizer_get_slot(opt, v, "velocity"),
                  expected_rmsprop_momentum_centered_slot0, 4, TOL);
    expect_values(eg_optimizer_get_slot(opt, v, "momentum"),
                  expected_rmsprop_momentum_centered_slot1, 4, 1e-5);
    expect_values(eg_optimizer_get_slot(opt, v, "average_gradient"),
                  expected_rmsprop_momentum_centered_slot2, 4, TOL);
    eg_optimizer_free(opt);
    eg_release(v);
}

/* A transposed (non-contiguous) gradient and an f64 gradient give what the plain one gives. */
static void test_gradient_conversions(void **state) {
    (void)state;
    eg_tensor *plain = new_variable(w0, "plain");
    eg_tensor *strided = new_variable(w0, "strided");
    eg_tensor *wide = new_variable(w0, "wide");
    eg_optimizer *opt = eg_adam_new(NULL);
    const float g[4] = {0.1f, -0.2f, 0.3f, 0.4f};
    const float g_transposed[4] = {0.1f, 0.3f, -0.2f, 0.4f};
    const double g64[4] = {0.1f, -0.2f, 0.3f, 0.4f};
    eg_tensor *grad = eg_tensor_from_data(g, EG_DTYPE_F32, 2, shape22);
    eg_tensor *view =
        eg_transpose(eg_tensor_from_data(g_transposed, EG_DTYPE_F32, 2, shape22), 0, 1);
    assert_false(eg_tensor_is_contiguous(view));
    eg_tensor *grad64 = eg_tensor_from_data(g64, EG_DTYPE_F64, 2, shape22);
    eg_tensor *grads[3] = {grad, view, grad64};
    eg_tensor *vars[3] = {plain, strided, wide};
    assert_int_equal(eg_optimizer_apply_gradients(opt, 3, grads, vars), EG_OK);
    assert_int_equal(eg_optimizer_iterations(opt), 1); /* one step for the whole list */
    float a[4], b[4], c[4];
    eg_tensor_copy_to_host(plain, a, sizeof a);
    eg_tensor_copy_to_host(strided, b, sizeof b);
    eg_tensor_copy_to_host(wide, c, sizeof c);
    for (int i = 0; i < 4; i++) {
        assert_float_equal(a[i], b[i], 0);
        assert_float_equal(a[i], c[i], 0);
        assert_true(a[i] != w0[i]);
    }
    eg_optimizer_free(opt);
    eg_release(plain);
    eg_release(strided);
    eg_release(wide);
}

/* A gradient that is the variable itself (shared storage) is read before it is overwritten. */
static void test_gradient_aliasing_variable(void **state) {
    (void)state;
    eg_tensor *v = new_variable(w0, "v");
    eg_optimizer *opt = eg_sgd_new(NULL);
    assert_int_equal(eg_optimizer_apply_gradients(opt, 1, &v, &v), EG_OK);
    float expected[4];
    for (int i = 0; i < 4; i++) expected[i] = w0[i] - 0.01f * w0[i];
    expect_values(v, expected, 4, 1e-7);
    eg_optimizer_free(opt);
    eg_release(v);
}

/* A NULL gradient skips its variable; the other is updated; the counter moves once. */
static void test_null_gradient_skipped(void **state) {
    (void)state;
    eg_tensor *a = new_variable(w0, "a"), *b = new_variable(w0, "b");
    eg_optimizer *opt = eg_sgd_new(NULL);
    eg_tensor *g = eg_tensor_from_data(grads_by_step[0], EG_DTYPE_F32, 2, shape22);
    eg_tensor *grads[2] = {NULL, g};
    eg_tensor *vars[2] = {a, b};
    assert_int_equal(eg_optimizer_apply_gradients(opt, 2, grads, vars), EG_OK);
    expect_values(a, w0, 4, 0);
    float expected[4];
    for (int i = 0; i < 4; i++) expected[i] = w0[i] - 0.01f * grads_by_step[0][i];
    expect_values(b, expected, 4, 1e-7);
    assert_int_equal(eg_optimizer_iterations(opt), 1);
    assert_int_equal(eg_optimizer_apply_gradients(opt, 0, NULL, NULL), EG_OK);
    assert_int_equal(eg_optimizer_iterations(opt), 2);
    eg_optimizer_free(opt);
    eg_release(a);
    eg_release(b);
}

/* Every refusal leaves variables, slots and the counter as they were. */
static void test_errors_change_nothing(void **state) {
    (void)state;
    eg_tensor *a = new_variable(w0, "a"), *b = new_variable(w0, "b");
    eg_optimizer *opt = eg_adam_new(NULL);
    eg_tensor *good = eg_tensor_from_data(grads_by_step[0], EG_DTYPE_F32, 2, shape22);
    int64_t four = 4;
    eg_tensor *bad_shape = eg_tensor_from_data(grads_by_step[0], EG_DTYPE_F32, 1, &four);
    eg_tensor *plain = eg_tensor_from_data(w0, EG_DTYPE_F32, 2, shape22);
    int32_t ints[4] = {1, 2, 3, 4};
    eg_tensor *int_grad = eg_tensor_from_data(ints, EG_DTYPE_I32, 2, shape22);

    struct {
        eg_tensor *grads[2], *vars[2];
        eg_status status;
        const char *text;
    } cases[] = {
        {{good, bad_shape}, {a, b}, EG_ERR_SHAPE, "does not match variable 'b'"},
        {{good, good}, {a, plain}, EG_ERR_INVALID_ARGUMENT, "is not a variable"},
        {{good, good}, {a, a}, EG_ERR_INVALID_ARGUMENT, "appears twice"},
        {{good, int_grad}, {a, b}, EG_ERR_DTYPE, "must be a float tensor"},
        {{good, good}, {a, NULL}, EG_ERR_NULL_ARGUMENT, "variables[1] is NULL"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        eg_clear_error();
        assert_int_equal(eg_optimizer_apply_gradients(opt, 2, cases[k].grads, cases[k].vars),
                         cases[k].status);
        if (!strstr(eg_last_error(), cases[k].text))
            fail_msg("case %zu: message '%s' lacks '%s'", k, eg_last_error(), cases[k].text);
        assert_non_null(strstr(eg_last_error(), "test_optim.c:")); /* the caller's line */
        expect_values(a, w0, 4, 0);
        expect_values(b, w0, 4, 0);
        assert_int_equal(eg_optimizer_iterations(opt), 0);
        assert_null(eg_optimizer_get_slot(opt, a, "momentum"));
    }
    eg_clear_error();
    assert_int_equal(eg_optimizer_apply_gradients(NULL, 0, NULL, NULL), EG_ERR_NULL_ARGUMENT);
    eg_clear_error();
    assert_int_equal(eg_optimizer_apply_gradients(opt, -1, NULL, NULL), EG_ERR_INVALID_ARGUMENT);
    eg_clear_error();
    eg_optimizer_free(opt);
    eg_release(a);
    eg_release(b);
}

static void test_invalid_options(void **state) {
    (void)state;
    eg_sgd_options sgd = eg_sgd_options_default();
    sgd.momentum = -1;
    assert_null(eg_sgd_new(&sgd));
    assert_int_equal(eg_last_status(), EG_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(eg_last_error(), "momentum"));
    eg_clear_error();
    eg_adam_options adam = eg_adam_options_default();
    adam.beta_1 = 1.0;
    assert_null(eg_adam_new(&adam));
    assert_non_null(strstr(eg_last_error(), "beta_1"));
    eg_clear_error();
    adam = eg_adam_options_default();
    adam.learning_rate = eg_schedule_exponential_decay(0.1, 0, 0.5, false);
    assert_null(eg_adam_new(&adam));
    assert_non_null(strstr(eg_last_error(), "decay_steps"));
    eg_clear_error();
    eg_rmsprop_options rms = eg_rmsprop_options_default();
    rms.epsilon = 0;
    assert_null(eg_rmsprop_new(&rms));
    eg_clear_error();
    eg_optimizer *opt = eg_sgd_new(NULL);
    assert_int_equal(eg_optimizer_set_learning_rate(opt, eg_schedule_constant(-1)),
                     EG_ERR_INVALID_ARGUMENT);
    eg_clear_error();
    assert_int_equal(eg_optimizer_set_learning_rate(opt, eg_schedule_constant(0.5)), EG_OK);
    assert_float_equal(eg_optimizer_learning_rate(opt), 0.5, 0);
    eg_optimizer_free(opt);
    eg_optimizer_free(NULL);
}

static void test_schedules(void **state) {
    (void)state;
    eg_schedule exponential = eg_schedule_exponential_decay(0.1, 10, 0.5, false);
    eg_schedule staircase = eg_schedule_exponential_decay(0.1, 10, 0.5, true);
    eg_schedule cosine = eg_schedule_cosine_decay(0.1, 100, 0.1);
    eg_schedule constant = eg_schedule_constant(0.25);
    for (size_t i = 0; i < sizeof schedule_steps / sizeof schedule_steps[0]; i++) {
        int64_t s = schedule_steps[i];
        assert_float_equal(eg_schedule_value(&exponential, s), expected_exponential[i],
                           1e-6 * expected_exponential[i]);
        assert_float_equal(eg_schedule_value(&staircase, s), expected_exponential_staircase[i],
                           1e-6 * expected_exponential_staircase[i]);
        assert_float_equal(eg_schedule_value(&cosine, s), expected_cosine[i],
                           1e-6 * expected_cosine[i]);
        assert_float_equal(eg_schedule_value(&constant, s), 0.25, 0);
    }
    assert_true(isnan(eg_schedule_value(&exponential, -1)));
    assert_int_equal(eg_last_status(), EG_ERR_INVALID_ARGUMENT);
    eg_clear_error();
    eg_schedule broken = eg_schedule_cosine_decay(0.1, 0, 0.0);
    assert_true(isnan(eg_schedule_value(&broken, 0)));
    eg_clear_error();
    assert_true(isnan(eg_schedule_value(NULL, 0)));
    eg_clear_error();
}

/* The optimizer evaluates its schedule at its step counter before each update (Keras). */
static void test_optimizer_follows_schedule(void **state) {
    (void)state;
    eg_sgd_options o = eg_sgd_options_default();
    o.learning_rate = eg_schedule_exponential_decay(0.1, 1, 0.5, false); /* 0.1, 0.05, 0.025 */
    eg_optimizer *opt = eg_sgd_new(&o);
    const float zero[4] = {0, 0, 0, 0}, one[4] = {1, 1, 1, 1};
    eg_tensor *v = new_variable(zero, "v");
    eg_tensor *g = eg_tensor_from_data(one, EG_DTYPE_F32, 2, shape22);
    const double rates[3] = {0.1, 0.05, 0.025};
    double expected = 0;
    for (int step = 0; step < 3; step++) {
        assert_float_equal(eg_optimizer_learning_rate(opt), rates[step], 1e-15);
        assert_int_equal(eg_optimizer_apply_gradients(opt, 1, &g, &v), EG_OK);
        expected -= rates[step];
        int64_t index[2] = {1, 1};
        assert_float_equal(eg_tensor_get(v, index), expected, 1e-7);
    }
    eg_optimizer_free(opt);
    eg_release(v);
}

/* Updates write raw memory: nothing lands on a recording tape. */
static void test_update_not_recorded(void **state) {
    (void)state;
    eg_tensor *v = new_variable(w0, "v");
    eg_tensor *g = eg_transpose(eg_tensor_from_data(w0, EG_DTYPE_F32, 2, shape22), 0, 1);
    eg_optimizer *opt = eg_rmsprop_new(NULL);
    eg_tape *tape = eg_tape_begin(false);
    assert_int_equal(eg_tape_watch(tape, g), EG_OK);
    size_t before = eg_tape_n_records(tape);
    assert_int_equal(eg_optimizer_apply_gradients(opt, 1, &g, &v), EG_OK);
    assert_int_equal(eg_tape_n_records(tape), before);
    eg_tape_free(tape);
    eg_optimizer_free(opt);
    eg_release(v);
}

/* y = x @ [2, -3] + 0.5 learned by a Dense(1) layer with Adam and MSE. */
static void test_adam_solves_regression(void **state) {
    (void)state;
    eg_generator *gen = eg_generator_new(7);
    int64_t xs[2] = {64, 2};
    eg_tensor *x = eg_random_uniform(gen, EG_DTYPE_F32, 2, xs, -1, 1);
    const float w_true[2] = {2.0f, -3.0f};
    int64_t ws[2] = {2, 1};
    eg_tensor *y =
        eg_add_scalar(eg_matmul(x, eg_tensor_from_data(w_true, EG_DTYPE_F32, 2, ws)), 0.5);
    assert_non_null(y);
    eg_dense_options o = eg_dense_options_default();
    o.generator = gen;
    eg_model *model = eg_sequential_new(NULL);
    assert_int_equal(eg_sequential_add(model, eg_dense_new_ex(1, &o)), EG_OK);
    eg_adam_options ao = eg_adam_options_default();
    ao.learning_rate = eg_schedule_constant(0.05);
    eg_optimizer *opt = eg_adam_new(&ao);
    double first = 0, last = 0;
    for (int step = 0; step < 400; step++) {
        eg_scope_begin();
        eg_tape *tape = eg_tape_begin(false);
        eg_tensor *loss =
            eg_loss_mean_squared_error(y, eg_model_call(model, x, true), EG_REDUCTION_MEAN);
        eg_tape_end(tape);
        assert_non_null(loss);
        int n = 0;
        eg_tensor *const *vars = eg_model_trainable_variables(model, &n);
        assert_int_equal(n, 2);
        eg_tensor *grads[2];
        assert_int_equal(eg_tape_gradient(tape, loss, n, vars, grads, EG_UNCONNECTED_NULL), EG_OK);
        assert_int_equal(eg_optimizer_apply_gradients(opt, n, grads, vars), EG_OK);
        if (step == 0) first = eg_item(loss);
        last = eg_item(loss);
        eg_tape_free(tape);
        assert_int_equal(eg_scope_end(), EG_OK);
    }
    assert_true(first > 1.0);
    if (!(last < 1e-4)) fail_msg("loss went from %g to %g", first, last);
    eg_layer *dense = eg_model_layer(model, 0);
    int n = 0;
    eg_tensor *const *vars = eg_layer_variables(dense, &n);
    int64_t i0[2] = {0, 0}, i1[2] = {1, 0}, b0[1] = {0};
    assert_float_equal(eg_tensor_get(vars[0], i0), 2.0, 0.02);
    assert_float_equal(eg_tensor_get(vars[0], i1), -3.0, 0.02);
    assert_float_equal(eg_tensor_get(vars[1], b0), 0.5, 0.02);
    eg_optimizer_free(opt);
    eg_model_free(model);
    eg_generator_free(gen);
}

/* Saving the state (slots + step counter) and restoring it into a fresh optimizer continues
 * bit-identically: a learning-rate schedule, Adam's bias correction and every slot included. */
static void check_state_restore(eg_optimizer *a, eg_optimizer *b, int expected_slots) {
    assert_int_equal(eg_optimizer_slot_count(a), expected_slots);
    eg_tensor *va = run_three_steps(a);
    /* b gets a's variable values, slots and counter, then both take the same two steps. */
    float values[4];
    assert_int_equal(eg_tensor_copy_to_host(va, values, sizeof values), EG_OK);
    eg_tensor *vb = new_variable(values, "w");
    for (int k = 0; k < eg_optimizer_slot_count(a); k++) {
        const char *name = eg_optimizer_slot_name(a, k);
        assert_non_null(name);
        assert_string_equal(name, eg_optimizer_slot_name(b, k));
        eg_tensor *slot = eg_optimizer_get_slot(a, va, name);
        assert_non_null(slot);
        if (k == 0) assert_null(eg_optimizer_get_slot(b, vb, name)); /* then zeros, made */
        assert_int_equal(eg_optimizer_set_slot(b, vb, name, slot), EG_OK);
    }
    assert_null(eg_optimizer_slot_name(a, expected_slots));
    assert_int_equal(eg_last_status(), EG_ERR_INVALID_ARGUMENT);
    eg_clear_error();
    assert_int_equal(eg_optimizer_set_iterations(b, eg_optimizer_iterations(a)), EG_OK);
    assert_true(eg_optimizer_learning_rate(a) == eg_optimizer_learning_rate(b));
    for (int step = 0; step < 2; step++) {
        eg_tensor *g = eg_tensor_from_data(grads_by_step[step], EG_DTYPE_F32, 2, shape22);
        assert_int_equal(eg_optimizer_apply_gradients(a, 1, &g, &va), EG_OK);
        assert_int_equal(eg_optimizer_apply_gradients(b, 1, &g, &vb), EG_OK);
    }
    float got_a[4], got_b[4];
    assert_int_equal(eg_tensor_copy_to_host(va, got_a, sizeof got_a), EG_OK);
    assert_int_equal(eg_tensor_copy_to_host(vb, got_b, sizeof got_b), EG_OK);
    assert_memory_equal(got_a, got_b, sizeof got_a);
    for (int k = 0; k < eg_optimizer_slot_count(a); k++) {
        const char *name = eg_optimizer_slot_name(a, k);
        assert_int_equal(
            eg_tensor_copy_to_host(eg_optimizer_get_slot(a, va, name), got_a, sizeof got_a), EG_OK);
        assert_int_equal(
            eg_tensor_copy_to_host(eg_optimizer_get_slot(b, vb, name), got_b, sizeof got_b), EG_OK);
        assert_memory_equal(got_a, got_b, sizeof got_a);
    }
    assert_int_equal(eg_optimizer_iterations(b), 5);
    eg_optimizer_free(a);
    eg_optimizer_free(b);
    eg_release(va);
    eg_release(vb);
}

static void test_state_restore(void **state) {
    (void)state;
    eg_adam_options adam = eg_adam_options_default();
    adam.learning_rate = eg_schedule_exponential_decay(0.1, 2, 0.5, false);
    check_state_restore(eg_adam_new(&adam), eg_adam_new(&adam), 2);
    eg_sgd_options sgd = eg_sgd_options_default();
    sgd.momentum = 0.9;
    sgd.nesterov = true;
    check_state_restore(eg_sgd_new(&sgd), eg_sgd_new(&sgd), 1);
    check_state_restore(eg_sgd_new(NULL), eg_sgd_new(NULL), 0);
    eg_rmsprop_options rms = eg_rmsprop_options_default();
    rms.momentum = 0.5;
    rms.centered = true;
    check_state_restore(eg_rmsprop_new(&rms), eg_rmsprop_new(&rms), 3);
}

#if defined(__x86_64__) || defined(__SSE2__)
#include <xmmintrin.h>
#endif

/* Updates flush subnormals to zero (optimizer.c: a decayed moment is 0, not a subnormal that
 * costs a microcode assist each step) and leave the caller's floating-point mode as it was. */
static void check_subnormal_moments_flush(eg_dtype dtype, double tiny) {
    enum { N = 19 }; /* the 8-wide loop and its scalar tail */
    int64_t shape[1] = {N};
    double values[N], tinies[N];
    for (int i = 0; i < N; i++) values[i] = (double)(i - 9) * 0.25, tinies[i] = tiny * (i + 1);
    eg_tensor *v =
        eg_variable(eg_cast(eg_tensor_from_data(values, EG_DTYPE_F64, 1, shape), dtype), "w");
    eg_tensor *g = eg_zeros(dtype, 1, shape);
    eg_optimizer *opt = eg_adam_new(NULL);
    eg_tensor *t = eg_cast(eg_tensor_from_data(tinies, EG_DTYPE_F64, 1, shape), dtype);
    assert_non_null(v);
    assert_true(eg_tensor_get(t, (int64_t[1]){0}) != 0.0); /* subnormal, not already 0 */
    assert_int_equal(eg_optimizer_set_slot(opt, v, "momentum", t), EG_OK);
    assert_int_equal(eg_optimizer_set_slot(opt, v, "velocity", t), EG_OK);
#if defined(__x86_64__) || defined(__SSE2__)
    unsigned int mode = _mm_getcsr();
#endif
    assert_int_equal(eg_optimizer_apply_gradients(opt, 1, &g, &v), EG_OK);
#if defined(__x86_64__) || defined(__SSE2__)
    assert_int_equal(_mm_getcsr(), mode);
#endif
    volatile double half_of_tiny = tiny;
    half_of_tiny *= 0.5; /* still subnormal out here */
    assert_true(half_of_tiny != 0.0);
    const char *slots[2] = {"momentum", "velocity"};
    for (int k = 0; k < 2; k++) {
        eg_tensor *slot = eg_optimizer_get_slot(opt, v, slots[k]);
        for (int i = 0; i < N; i++) {
            int64_t index[1] = {i};
            assert_true(eg_tensor_get(slot, index) == 0.0); /* not 0.9 * tiny */
        }
    }
    for (int i = 0; i < N; i++) {
        int64_t index[1] = {i};
        assert_true(eg_tensor_get(v, index) == values[i]);
    }
    eg_optimizer_free(opt);
    eg_release(v); /* a variable outlives the scope */
}

static void test_subnormal_moments_flush_to_zero(void **state) {
    (void)state;
    check_subnormal_moments_flush(EG_DTYPE_F32, 1e-40);
    check_subnormal_moments_flush(EG_DTYPE_F64, 1e-310);
}

/* set_slot: casts and views accepted, the other slots untouched; refusals change nothing. */
static void test_set_slot_errors(void **state) {
    (void)state;
    eg_optimizer *opt = eg_adam_new(NULL);
    eg_tensor *v = new_variable(w0, "v");
    const float m[4] = {1, 2, 3, 4};
    const double u[4] = {5, 6, 7, 8};
    /* A transposed f64 value: cast and read in row-major order of its shape. */
    eg_tensor *u64 = eg_transpose(eg_tensor_from_data(u, EG_DTYPE_F64, 2, shape22), 0, 1);
    assert_int_equal(eg_optimizer_set_slot(opt, v, "velocity", u64), EG_OK);
    const float u_expected[4] = {5, 7, 6, 8}, zeros[4] = {0};
    expect_values(eg_optimizer_get_slot(opt, v, "velocity"), u_expected, 4, 0);
    expect_values(eg_optimizer_get_slot(opt, v, "momentum"), zeros, 4, 0);
    eg_tensor *mt = eg_tensor_from_data(m, EG_DTYPE_F32, 2, shape22);
    assert_int_equal(eg_optimizer_set_slot(opt, v, "momentum", mt), EG_OK);
    expect_values(eg_optimizer_get_slot(opt, v, "momentum"), m, 4, 0);
    /* The slot itself as the value. */
    assert_int_equal(
        eg_optimizer_set_slot(opt, v, "momentum", eg_optimizer_get_slot(opt, v, "momentum")),
        EG_OK);
    expect_values(eg_optimizer_get_slot(opt, v, "momentum"), m, 4, 0);

    struct {
        eg_status status;
        eg_tensor *variable, *value;
        const char *slot;
    } refusals[] = {
        {EG_ERR_INVALID_ARGUMENT, v, mt, "average_gradient"},
        {EG_ERR_INVALID_ARGUMENT, mt, mt, "momentum"},
        {EG_ERR_SHAPE, v, eg_ones(EG_DTYPE_F32, 1, (int64_t[]){4}), "momentum"},
        {EG_ERR_DTYPE, v, eg_ones(EG_DTYPE_I32, 2, shape22), "momentum"},
        {EG_ERR_NULL_ARGUMENT, v, NULL, "momentum"},
        {EG_ERR_NULL_ARGUMENT, v, mt, NULL},
        {EG_ERR_NULL_ARGUMENT, NULL, mt, "momentum"},
    };
    for (size_t i = 0; i < sizeof refusals / sizeof refusals[0]; i++) {
        eg_clear_error();
        assert_int_equal(
            eg_optimizer_set_slot(opt, refusals[i].variable, refusals[i].slot, refusals[i].value),
            refusals[i].status);
    }
    eg_clear_error();
    assert_int_equal(eg_optimizer_set_slot(NULL, v, "momentum", mt), EG_ERR_NULL_ARGUMENT);
    eg_clear_error();
    expect_values(eg_optimizer_get_slot(opt, v, "momentum"), m, 4, 0);
    expect_values(eg_optimizer_get_slot(opt, v, "velocity"), u_expected, 4, 0);
    assert_int_equal(eg_optimizer_set_iterations(opt, -1), EG_ERR_INVALID_ARGUMENT);
    eg_clear_error();
    assert_int_equal(eg_optimizer_set_iterations(NULL, 1), EG_ERR_NULL_ARGUMENT);
    eg_clear_error();
    assert_int_equal(eg_optimizer_iterations(opt), 0);
    assert_int_equal(eg_optimizer_slot_count(NULL), 0);
    assert_null(eg_optimizer_slot_name(NULL, 0));
    eg_clear_error();
    eg_optimizer_free(opt);
    eg_release(v);
}

/* |got - want| in units of the last place of the f32 nearest want; FLT_MIN at least, so that a
 * value the update flushed to zero (it runs with subnormals flushed) is not counted. */
static double ulps_from(double got, double want) {
    int e;
    frexp(want, &e);
    double ulp = ldexp(1.0, e - 24 < -149 ? -149 : e - 24);
    double diff = fabs(got - want);
    return diff <= 0x1p-126 ? 0 : diff / ulp;
}

/* got is want, or 0 where want is subnormal (the update flushes subnormals). */
static bool same_or_flushed(float got, float want) {
    return got == want || (fabsf(want) < 0x1p-126f && got == 0);
}

static uint64_t next_random(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* sign * 10^[lo, hi), uniform in the exponent: moments and gradients of every scale. */
static float random_scale(uint64_t *s, double lo, double hi, bool signed_) {
    double t = (double)(next_random(s) >> 11) * 0x1p-53;
    float x = (float)pow(10.0, lo + (hi - lo) * t);
    return signed_ && (next_random(s) & 1) ? -x : x;
}

/* One f32 Adam step (from 0, so that the variable is minus the step) over moments and gradients
 * of every scale, on each CPU path this CPU has. The AVX-512 moments are bitwise the fused
 * formulas fmaf(g - m, 1 - b1, m) and fmaf(fmaf(g, g, -u), 1 - b2, u) (the other paths' are
 * checked bitwise against the unfused ones in tests/test_elementwise_dispatch.c), and every
 * path's step is within 3 ulp of (m alpha) / (sqrt(u) + eps) evaluated in double from the moments
 * that path computed: the exact sqrt and divide round three times, AVX-512's refined rsqrt14 and
 * rcp14 add a fraction of an ulp to that. The lanes that the AVX-512 approximations do not cover
 * (u infinite, NaN or negative; m alpha infinite or NaN; a step that overflows), and u = 0, give
 * the exact formula's float result. An odd size, so the vector loops have tails. */
static void test_adam_f32_paths_within_bounds(void **state) {
    (void)state;
    enum { N = 40013, SPECIAL = 8 };
    int64_t shape[1] = {N};
    float *m0 = malloc(N * sizeof(float)), *u0 = malloc(N * sizeof(float));
    float *g = malloc(N * sizeof(float));
    assert_non_null(m0);
    assert_non_null(u0);
    assert_non_null(g);
    uint64_t seed = 12345;
    for (int i = 0; i < N; i++) {
        m0[i] = random_scale(&seed, -12, 6, true);
        u0[i] = i % 97 == 0 ? 0.0f : random_scale(&seed, -30, 20, false);
        g[i] = i % 89 == 0 ? 0.0f : random_scale(&seed, -10, 5, true);
    }
    /* the special lanes, spread over vectors and the tail */
    const int at[SPECIAL] = {3, 100, 1001, 5000, 17000, 30001, N - 2, N - 1};
    g[at[0]] = 0, u0[at[0]] = 0;                    /* u stays 0: the step is m alpha / eps */
    u0[at[1]] = INFINITY;                           /* the step is 0 */
    u0[at[2]] = NAN;                                /* NaN */
    m0[at[3]] = NAN;                                /* NaN */
    g[at[4]] = 1e30f;                               /* g g overflows: u is infinite */
    m0[at[5]] = 3e38f, g[at[5]] = 0, u0[at[5]] = 0; /* m alpha / eps overflows */
    m0[at[6]] = -INFINITY;                          /* -inf / d */
    u0[at[7]] = -1;                                 /* sqrt of a negative: NaN */
    const double lr = 1e-3, beta_1 = 0.9, beta_2 = 0.999, epsilon = 1e-7;
    const float alpha = (float)(lr * sqrt(1.0 - beta_2) / (1.0 - beta_1));
    const float c1 = (float)(1.0 - beta_1), c2 = (float)(1.0 - beta_2), eps = (float)epsilon;
    eg_tensor *moment = eg_tensor_from_data(m0, EG_DTYPE_F32, 1, shape);
    eg_tensor *velocity = eg_tensor_from_data(u0, EG_DTYPE_F32, 1, shape);
    eg_tensor *grad = eg_tensor_from_data(g, EG_DTYPE_F32, 1, shape);
    eg__cpu_level saved = eg__cpu_active_level();
    for (int level = EG__CPU_BASELINE; level <= (int)eg__cpu_best_level(); level++) {
        eg__cpu_set_level((eg__cpu_level)level);
        eg_tensor *v = eg_variable(eg_zeros(EG_DTYPE_F32, 1, shape), "w");
        eg_optimizer *opt = eg_adam_new(NULL);
        assert_int_equal(eg_optimizer_set_slot(opt, v, "momentum", moment), EG_OK);
        assert_int_equal(eg_optimizer_set_slot(opt, v, "velocity", velocity), EG_OK);
        assert_int_equal(eg_optimizer_apply_gradients(opt, 1, &grad, &v), EG_OK);
        const float *x = eg_tensor_data(v);
        const float *m = eg_tensor_data(eg_optimizer_get_slot(opt, v, "momentum"));
        const float *u = eg_tensor_data(eg_optimizer_get_slot(opt, v, "velocity"));
        double worst_step = 0;
        for (int i = 0; i < N; i++) {
            bool special = false;
            for (int k = 0; k < SPECIAL; k++) special = special || at[k] == i;
            if (special) {
                float want = 0.0f - (m[i] * alpha) / (sqrtf(u[i]) + eps);
                if (!(isnan(want) ? isnan(x[i]) : x[i] == want))
                    fail_msg("level %d element %d: %a, want %a (m %a, u %a)", level, i,
                             (double)x[i], (double)want, (double)m[i], (double)u[i]);
                continue;
            }
            if (level == EG__CPU_AVX512) {
                float want_m = fmaf(g[i] - m0[i], c1, m0[i]);
                float want_u = fmaf(fmaf(g[i], g[i], -u0[i]), c2, u0[i]);
                if (!same_or_flushed(m[i], want_m) || !same_or_flushed(u[i], want_u))
                    fail_msg("element %d: moments %a %a, want %a %a", i, (double)m[i], (double)u[i],
                             (double)want_m, (double)want_u);
            }
            double want = -(double)(m[i] * alpha) / (sqrt((double)u[i]) + eps);
            double off = ulps_from(x[i], want);
            worst_step = fmax(worst_step, off);
            if (off > 3)
                fail_msg("level %d element %d: step %a, want %a (%.2f ulp; m %a, u %a)", level, i,
                         (double)x[i], want, off, (double)m[i], (double)u[i]);
        }
        print_message("level %s: Adam's step within %.2f ulp\n",
                      eg__cpu_level_name((eg__cpu_level)level), worst_step);
        eg_optimizer_free(opt);
        eg_release(v);
    }
    eg__cpu_set_level(saved);
    free(m0);
    free(u0);
    free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_sgd, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sgd_momentum_and_nesterov, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sgd_weight_decay, setup, teardown),
        cmocka_unit_test_setup_teardown(test_adam, setup, teardown),
        cmocka_unit_test_setup_teardown(test_adam_f64, setup, teardown),
        cmocka_unit_test_setup_teardown(test_adamw, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rmsprop, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gradient_conversions, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gradient_aliasing_variable, setup, teardown),
        cmocka_unit_test_setup_teardown(test_null_gradient_skipped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_errors_change_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_invalid_options, setup, teardown),
        cmocka_unit_test_setup_teardown(test_schedules, setup, teardown),
        cmocka_unit_test_setup_teardown(test_optimizer_follows_schedule, setup, teardown),
        cmocka_unit_test_setup_teardown(test_update_not_recorded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_adam_solves_regression, setup, teardown),
        cmocka_unit_test_setup_teardown(test_state_restore, setup, teardown),
        cmocka_unit_test_setup_teardown(test_set_slot_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_subnormal_moments_flush_to_zero, setup, teardown),
        cmocka_unit_test_setup_teardown(test_adam_f32_paths_within_bounds, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
