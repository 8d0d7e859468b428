/* Mixed precision: policies (names, the global default, per model and per layer, what a layer
 * computes in and what its variables stay), losses widening low-precision predictions, and loss
 * scaling's logic (unscale, skip on inf/NaN, grow after growth_interval finite steps, back off,
 * the floor at 1, a fixed scale) with the same trajectory in eager, lazy and graph mode. */
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

/* ---- loss scaling ---- */

enum { N_WEIGHTS = 4 };

typedef struct scaled_problem {
    eg_tensor *w;
    eg_optimizer *opt;
} scaled_problem;

/* loss = sum(w * x); the gradient of the scaled loss is x * scale: an inf in x makes it inf. */
static eg_status scaled_step(eg_tensor *const *in, eg_tensor **out, void *user) {
    scaled_problem *p = user;
    eg_tape *tape = eg_tape_begin(false);
    eg_tensor *product = eg_mul(p->w, in[0]);
    eg_tensor *loss = eg_sum(product, 0, NULL, false);
    eg_release(product);
    eg_tensor *scaled = eg_optimizer_scale_loss(p->opt, loss);
    eg_tensor *grad = NULL;
    eg_status status = eg_tape_gradient(tape, scaled, 1, &p->w, &grad, EG_UNCONNECTED_ZERO);
    eg_tape_free(tape);
    if (status == EG_OK) status = eg_optimizer_apply_gradients(p->opt, 1, &grad, &p->w);
    eg_release(grad);
    eg_release(scaled);
    out[0] = loss;
    return status;
}

typedef enum run_mode { MODE_EAGER, MODE_LAZY, MODE_GRAPH } run_mode;

/* x of each step: finite except where marked */
#define N_STEPS 9
static const bool step_finite[N_STEPS] = {true, true, true, false, true, true, false, false, true};

static void run_scaled_steps(run_mode mode, bool dynamic, double initial, double *scales,
                             int64_t *skipped, float weights[N_STEPS][N_WEIGHTS],
                             int64_t *iterations) {
    float w0[N_WEIGHTS] = {1, 2, 3, 4};
    int64_t shape[1] = {N_WEIGHTS};
    scaled_problem p = {0};
    eg_tensor *initial_w = eg_tensor_from_data(w0, EG_DTYPE_F32, 1, shape);
    p.w = eg_variable(initial_w, "w");
    eg_release(initial_w);
    eg_sgd_options sgd = eg_sgd_options_default();
    sgd.learning_rate = eg_schedule_constant(0.5);
    p.opt = eg_sgd_new(&sgd);
    eg_loss_scale_options ls = eg_loss_scale_options_default();
    ls.dynamic = dynamic;
    ls.initial_scale = initial;
    ls.growth_interval = 2;
    assert_int_equal(eg_optimizer_enable_loss_scaling(p.opt, &ls), EG_OK);
    eg_function *f = mode == MODE_GRAPH ? eg_function_new("scaled", scaled_step, 1, 1, &p) : NULL;
    for (int s = 0; s < N_STEPS; s++) {
        float x[N_WEIGHTS] = {0.25f * (float)(s + 1), -0.5f, 1.0f, 0.125f};
        if (!step_finite[s]) x[s % N_WEIGHTS] = s % 2 ? INFINITY : NAN;
        eg_tensor *xt = eg_tensor_from_data(x, EG_DTYPE_F32, 1, shape);
        eg_tensor *loss = NULL;
        eg_tensor *inputs[1] = {xt};
        if (mode == MODE_GRAPH) {
            assert_int_equal(eg_function_call(f, inputs, &loss), EG_OK);
        } else {
            if (mode == MODE_LAZY) eg_lazy_begin();
            assert_int_equal(scaled_step(inputs, &loss, &p), EG_OK);
            if (mode == MODE_LAZY) assert_int_equal(eg_lazy_end(), EG_OK);
        }
        eg_release(loss);
        eg_release(xt);
        scales[s] = eg_optimizer_loss_scale(p.opt);
        skipped[s] = eg_optimizer_skipped_steps(p.opt);
        memcpy(weights[s], eg_tensor_data(p.w), sizeof weights[s]);
    }
    *iterations = eg_optimizer_iterations(p.opt);
    eg_function_free(f);
    eg_optimizer_free(p.opt);
    eg_release(p.w);
}

/* The trajectory written out: w -= 0.5 * x on finite steps (the unscale is exact), nothing on
 * the others; the scale doubles after 2 finite steps in a row and halves on each skip. */
static void test_dynamic_loss_scale_in_every_mode(void **state) {
    (void)state;
    for (int mode = MODE_EAGER; mode <= MODE_GRAPH; mode++) {
        double scales[N_STEPS];
        int64_t skipped[N_STEPS], iterations;
        float weights[N_STEPS][N_WEIGHTS];
        run_scaled_steps((run_mode)mode, true, 1024, scales, skipped, weights, &iterations);
        double scale = 1024, expected_w[N_WEIGHTS] = {1, 2, 3, 4};
        int good = 0, n_skipped = 0, n_applied = 0;
        for (int s = 0; s < N_STEPS; s++) {
            if (step_finite[s]) {
                double x[N_WEIGHTS] = {0.25 * (s + 1), -0.5, 1.0, 0.125};
                for (int i = 0; i < N_WEIGHTS; i++) expected_w[i] -= 0.5 * x[i];
                n_applied++;
                if (++good == 2) {
                    scale *= 2;
                    good = 0;
                }
            } else {
                n_skipped++;
                good = 0;
                scale /= 2;
            }
            assert_true(scales[s] == scale);
            assert_int_equal(skipped[s], n_skipped);
            for (int i = 0; i < N_WEIGHTS; i++) assert_true(weights[s][i] == (float)expected_w[i]);
        }
        assert_int_equal(iterations, n_applied); /* skipped steps do not count */
    }
}

static void test_fixed_loss_scale_skips_but_never_moves(void **state) {
    (void)state;
    double scales[N_STEPS];
    int64_t skipped[N_STEPS], iterations;
    float weights[N_STEPS][N_WEIGHTS];
    run_scaled_steps(MODE_EAGER, false, 256, scales, skipped, weights, &iterations);
    for (int s = 0; s < N_STEPS; s++) assert_true(scales[s] == 256);
    assert_int_equal(skipped[N_STEPS - 1], 3);
    assert_int_equal(iterations, N_STEPS - 3);
}

/* Backing off stops at 1 (TF's floor): a run of non-finite steps from 2 ends at 1. */
static void test_loss_scale_floor_and_state(void **state) {
    (void)state;
    eg_optimizer *opt = eg_sgd_new(NULL);
    assert_true(eg_optimizer_loss_scale(opt) == 1.0);
    eg_tensor *loss = eg_scalar(EG_DTYPE_F32, 3.0);
    eg_tensor *same = eg_optimizer_scale_loss(opt, loss); /* no scaling: the values */
    assert_true(eg_item(same) == 3.0);
    eg_release(same);
    eg_loss_scale_options o = eg_loss_scale_options_default();
    assert_true(o.dynamic && o.initial_scale == 32768 && o.growth_interval == 2000);
    o.initial_scale = 3;
    assert_int_equal(eg_optimizer_enable_loss_scaling(opt, &o), EG_ERR_INVALID_ARGUMENT);
    o.initial_scale = 2;
    o.growth_interval = 0;
    assert_int_equal(eg_optimizer_enable_loss_scaling(opt, &o), EG_ERR_INVALID_ARGUMENT);
    eg_clear_error();
    o.growth_interval = 5;
    assert_int_equal(eg_optimizer_enable_loss_scaling(opt, &o), EG_OK);
    assert_int_equal(eg_optimizer_enable_loss_scaling(opt, &o), EG_ERR_STATE);
    eg_clear_error();
    eg_tensor *scaled = eg_optimizer_scale_loss(opt, loss);
    assert_true(eg_item(scaled) == 6.0);
    eg_release(scaled);

    float w0 = 1, bad = INFINITY;
    eg_tensor *initial = eg_tensor_from_data(&w0, EG_DTYPE_F32, 0, NULL);
    eg_tensor *w = eg_variable(initial, "w");
    eg_tensor *g = eg_tensor_from_data(&bad, EG_DTYPE_F32, 0, NULL);
    for (int s = 0; s < 3; s++)
        assert_int_equal(eg_optimizer_apply_gradients(opt, 1, &g, &w), EG_OK);
    assert_true(eg_optimizer_loss_scale(opt) == 1.0);
    assert_int_equal(eg_optimizer_skipped_steps(opt), 3);
    assert_true(*(float *)eg_tensor_data(w) == 1.0f);

    assert_int_equal(eg_optimizer_set_loss_scale_state(opt, 64, 4, 7), EG_OK);
    assert_true(eg_optimizer_loss_scale(opt) == 64);
    assert_int_equal(eg_optimizer_loss_scale_good_steps(opt), 4);
    assert_int_equal(eg_optimizer_skipped_steps(opt), 7);
    scaled = eg_optimizer_scale_loss(opt, loss); /* the restored scale reaches the variable */
    assert_true(eg_item(scaled) == 192.0);
    eg_release(scaled);
    assert_int_equal(eg_optimizer_set_loss_scale_state(opt, 48, 0, 0), EG_ERR_INVALID_ARGUMENT);
    assert_int_equal(eg_optimizer_set_loss_scale_state(opt, 64, -1, 0), EG_ERR_INVALID_ARGUMENT);
    eg_clear_error();
    eg_optimizer *plain = eg_adam_new(NULL);
    assert_int_equal(eg_optimizer_set_loss_scale_state(plain, 64, 0, 0), EG_ERR_STATE);
    eg_clear_error();
    eg_optimizer_free(plain);
    eg_release(g);
    eg_release(w);
    eg_release(initial);
    eg_release(loss);
    eg_optimizer_free(opt);
}

/* ---- policies ---- */

static void test_policy_names(void **state) {
    (void)state;
    const char *names[] = {"float32", "mixed_bfloat16", "mixed_float16"};
    const eg_dtype dtypes[] = {EG_DTYPE_F32, EG_DTYPE_BF16, EG_DTYPE_F16};
    for (int p = 0; p < EG_POLICY_COUNT; p++) {
        eg_policy parsed;
        assert_string_equal(eg_policy_name((eg_policy)p), names[p]);
        assert_int_equal(eg_policy_from_name(names[p], &parsed), EG_OK);
        assert_int_equal(parsed, p);
        assert_int_equal(eg_policy_compute_dtype((eg_policy)p), dtypes[p]);
    }
    eg_policy parsed = EG_POLICY_FLOAT32;
    assert_int_equal(eg_policy_from_name("float16", &parsed), EG_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(eg_last_error(), "mixed_bfloat16"));
    assert_string_equal(eg_policy_name(EG_POLICY_COUNT), "invalid");
    eg_clear_error();
    assert_int_equal(eg_set_global_policy(EG_POLICY_COUNT), EG_ERR_INVALID_ARGUMENT);
    eg_clear_error();
    assert_int_equal(eg_global_policy(), EG_POLICY_FLOAT32);
}

static void test_global_model_and_layer_policies(void **state) {
    (void)state;
    assert_int_equal(eg_set_global_policy(EG_POLICY_MIXED_FLOAT16), EG_OK);
    eg_layer *made_now = eg_dense_new(3, EG_ACTIVATION_NONE);
    assert_int_equal(eg_layer_policy(made_now), EG_POLICY_MIXED_FLOAT16);
    assert_int_equal(eg_set_global_policy(EG_POLICY_FLOAT32), EG_OK);
    eg_layer_free(made_now);

    eg_model *model = eg_sequential_new("m");
    eg_layer *first = eg_dense_new(4, EG_ACTIVATION_RELU);
    eg_layer *own = eg_dense_new(2, EG_ACTIVATION_NONE);
    assert_int_equal(eg_layer_set_policy(own, EG_POLICY_FLOAT32), EG_OK);
    assert_int_equal(eg_sequential_add(model, first), EG_OK);
    assert_int_equal(eg_model_set_policy(model, EG_POLICY_MIXED_BFLOAT16), EG_OK);
    assert_int_equal(eg_sequential_add(model, own), EG_OK);
    eg_layer *later = eg_dense_new(2, EG_ACTIVATION_NONE);
    assert_int_equal(eg_sequential_add(model, later), EG_OK);
    assert_int_equal(eg_model_policy(model), EG_POLICY_MIXED_BFLOAT16);
    assert_int_equal(eg_layer_policy(first), EG_POLICY_MIXED_BFLOAT16);
    assert_int_equal(eg_layer_policy(own), EG_POLICY_FLOAT32); /* its own stays */
    assert_int_equal(eg_layer_policy(later), EG_POLICY_MIXED_BFLOAT16);
    int64_t shape[2] = {-1, 5};
    assert_int_equal(eg_model_build(model, 2, shape), EG_OK);
    char text[4096] = {0};
    FILE *out = fmemopen(text, sizeof text - 1, "w");
    assert_int_equal(eg_model_summary(model, out), EG_OK);
    fclose(out);
    assert_non_null(strstr(text, "Policy: mixed_bfloat16 (variables f32, compute bf16)"));
    assert_non_null(strstr(text, "(Dense, float32)"));
    int n_vars;
    eg_tensor *const *vars = eg_model_variables(model, &n_vars);
    for (int i = 0; i < n_vars; i++) assert_int_equal(eg_tensor_dtype(vars[i]), EG_DTYPE_F32);
    assert_int_equal(eg_layer_set_policy(NULL, EG_POLICY_FLOAT32), EG_ERR_NULL_ARGUMENT);
    eg_clear_error();
    assert_int_equal(eg_model_set_policy(model, (eg_policy)7), EG_ERR_INVALID_ARGUMENT);
    eg_clear_error();
    eg_model_free(model);
}

/* A loss of bf16 or f16 logits runs in f32: the value of the same logits in f32, and the
 * gradient reaches the low-precision logits in their dtype. */
static void test_losses_widen_low_precision(void **state) {
    (void)state;
    float logits[6] = {0.5f, -1.25f, 2.0f, 0.75f, 0.0f, -0.5f}; /* exact in bf16 and f16 */
    int64_t labels[2] = {2, 0}, shape[2] = {2, 3}, label_shape[1] = {2};
    eg_tensor *y = eg_tensor_from_data(labels, EG_DTYPE_I64, 1, label_shape);
    eg_tensor *x32 = eg_tensor_from_data(logits, EG_DTYPE_F32, 2, shape);
    eg_tensor *ref = eg_loss_sparse_categorical_crossentropy(y, x32, true, EG_REDUCTION_MEAN);
    const eg_dtype low[2] = {EG_DTYPE_BF16, EG_DTYPE_F16};
    for (int d = 0; d < 2; d++) {
        eg_tensor *x = eg_cast(x32, low[d]);
        eg_tape *tape = eg_tape_begin(false);
        eg_tape_watch(tape, x);
        eg_tensor *loss = eg_loss_sparse_categorical_crossentropy(y, x, true, EG_REDUCTION_MEAN);
        assert_non_null(loss);
        assert_int_equal(eg_tensor_dtype(loss), EG_DTYPE_F32);
        assert_true(eg_item(loss) == eg_item(ref));
        eg_tensor *grad = NULL;
        assert_int_equal(eg_tape_gradient(tape, loss, 1, &x, &grad, EG_UNCONNECTED_NULL), EG_OK);
        assert_int_equal(eg_tensor_dtype(grad), low[d]);
        eg_tape_free(tape);
        eg_release(grad);
        eg_release(loss);
        eg_release(x);
    }
    eg_release(ref);
    eg_release(x32);
    eg_release(y);
}

/* ---- training runs per policy ---- */

/* A separable problem: class c's points around (+-2, +-2, ...) in 16 dims, fixed by a seed. */
enum { TRAIN_N = 256, TRAIN_D = 16, TRAIN_STEPS = 60, TRAIN_BATCH = 64 };

typedef struct policy_run {
    eg_model *model;
    eg_optimizer *optimizer;
    bool loss_scaling;
} policy_run;

static eg_status policy_step(eg_tensor *const *in, eg_tensor **out, void *user) {
    policy_run *r = user;
    int n_vars;
    eg_tensor *const *vars = eg_model_trainable_variables(r->model, &n_vars);
    eg_tensor *grads[8] = {0};
    eg_tape *tape = eg_tape_begin(false);
    eg_tensor *logits = eg_model_call(r->model, in[0], true);
    eg_tensor *loss =
        eg_loss_sparse_categorical_crossentropy(in[1], logits, true, EG_REDUCTION_MEAN);
    eg_tensor *scaled = r->loss_scaling ? eg_optimizer_scale_loss(r->optimizer, loss) : NULL;
    eg_status status =
        eg_tape_gradient(tape, scaled ? scaled : loss, n_vars, vars, grads, EG_UNCONNECTED_ZERO);
    eg_tape_free(tape);
    if (status == EG_OK) status = eg_optimizer_apply_gradients(r->optimizer, n_vars, grads, vars);
    for (int i = 0; i < n_vars; i++) eg_release(grads[i]);
    eg_release(scaled);
    eg_release(logits);
    out[0] = loss;
    return status;
}

typedef struct run_result {
    double first_loss, last_loss, accuracy;
    int64_t skipped;
    double scale;
    float weights[TRAIN_D * 32];
    eg_dtype logits_dtype;
} run_result;

static void train_with_policy(eg_policy policy, run_mode mode, double initial_scale,
                              run_result *result) {
    eg_scope_begin();
    eg_manual_seed(5);
    eg_generator *g = eg_generator_new(11);
    int64_t xs[2] = {TRAIN_N, TRAIN_D}, ys[1] = {TRAIN_N};
    float *x = eg_tensor_data(eg_random_normal(g, EG_DTYPE_F32, 2, xs, 0.0, 1.0));
    int64_t labels[TRAIN_N];
    for (int i = 0; i < TRAIN_N; i++) {
        labels[i] = i % 2;
        for (int d = 0; d < TRAIN_D; d++)
            x[i * TRAIN_D + d] += (i % 2 ? 1.0f : -1.0f) * (d % 2 ? 1 : -1);
    }
    eg_tensor *x_all = eg_tensor_from_data(x, EG_DTYPE_F32, 2, xs);
    eg_tensor *y_all = eg_tensor_from_data(labels, EG_DTYPE_I64, 1, ys);
    policy_run r = {eg_sequential_new("p"), eg_adam_new(NULL), policy == EG_POLICY_MIXED_FLOAT16};
    assert_int_equal(eg_sequential_add(r.model, eg_dense_new(32, EG_ACTIVATION_RELU)), EG_OK);
    assert_int_equal(eg_sequential_add(r.model, eg_dense_new(2, EG_ACTIVATION_NONE)), EG_OK);
    int64_t in_shape[2] = {-1, TRAIN_D};
    assert_int_equal(eg_model_build(r.model, 2, in_shape), EG_OK);
    assert_int_equal(eg_model_set_policy(r.model, policy), EG_OK);
    if (r.loss_scaling) {
        eg_loss_scale_options o = eg_loss_scale_options_default();
        o.initial_scale = initial_scale;
        assert_int_equal(eg_optimizer_enable_loss_scaling(r.optimizer, &o), EG_OK);
    }
    eg_function *f = mode == MODE_GRAPH ? eg_function_new("step", policy_step, 2, 1, &r) : NULL;
    for (int s = 0; s < TRAIN_STEPS; s++) {
        int64_t start = (int64_t)(s % (TRAIN_N / TRAIN_BATCH)) * TRAIN_BATCH;
        eg_tensor *xb = eg_slice(x_all, 0, start, start + TRAIN_BATCH, 1);
        eg_tensor *yb = eg_slice(y_all, 0, start, start + TRAIN_BATCH, 1);
        eg_tensor *inputs[2] = {xb, yb};
        eg_tensor *loss = NULL;
        if (mode == MODE_GRAPH) {
            if (eg_function_call(f, inputs, &loss) != EG_OK) fail_msg("%s", eg_last_error());
        } else {
            if (mode == MODE_LAZY) eg_lazy_begin();
            eg_status status = policy_step(inputs, &loss, &r);
            if (status != EG_OK) fail_msg("%s", eg_last_error());
            if (mode == MODE_LAZY) assert_int_equal(eg_lazy_end(), EG_OK);
        }
        double value = eg_item(loss);
        if (s == 0) result->first_loss = value;
        result->last_loss = value;
        eg_release(loss);
    }
    eg_tensor *logits = eg_model_call(r.model, x_all, false);
    result->logits_dtype = eg_tensor_dtype(logits);
    result->accuracy =
        eg_item(eg_mean(eg_cast(eg_metric_sparse_categorical_accuracy(y_all, logits), EG_DTYPE_F32),
                        0, NULL, false));
    result->skipped = eg_optimizer_skipped_steps(r.optimizer);
    result->scale = eg_optimizer_loss_scale(r.optimizer);
    int n_vars;
    eg_tensor *const *vars = eg_model_variables(r.model, &n_vars);
    assert_int_equal(eg_tensor_dtype(vars[0]), EG_DTYPE_F32); /* master weights */
    memcpy(result->weights, eg_tensor_data(vars[0]), sizeof result->weights);
    eg_function_free(f);
    eg_optimizer_free(r.optimizer);
    eg_model_free(r.model);
    eg_generator_free(g);
    eg_scope_end();
}

/* Each policy learns the problem (the loss falls by more than half, >= 95 % of the points right),
 * computes in its dtype (the logits), keeps f32 variables, and the three modes give the same
 * weights bit for bit. */
static void test_training_runs_per_policy(void **state) {
    (void)state;
    const eg_dtype compute[EG_POLICY_COUNT] = {EG_DTYPE_F32, EG_DTYPE_BF16, EG_DTYPE_F16};
    for (int p = 0; p < EG_POLICY_COUNT; p++) {
        run_result runs[3];
        for (int mode = MODE_EAGER; mode <= MODE_GRAPH; mode++) {
            train_with_policy((eg_policy)p, (run_mode)mode, 32768, &runs[mode]);
            const run_result *r = &runs[mode];
            if (!(r->last_loss < 0.5 * r->first_loss && r->accuracy >= 0.95))
                fail_msg("%s, mode %d: loss %g -> %g, accuracy %g", eg_policy_name((eg_policy)p),
                         mode, r->first_loss, r->last_loss, r->accuracy);
            assert_int_equal(r->logits_dtype, compute[p]);
            assert_int_equal(r->skipped, 0);
        }
        for (int mode = MODE_LAZY; mode <= MODE_GRAPH; mode++)
            assert_memory_equal(runs[mode].weights, runs[MODE_EAGER].weights,
                                sizeof runs[0].weights);
    }
}

/* mixed_float16 from a scale that overflows f16's gradients: steps are skipped and the scale
 * halves until the gradients fit, then training proceeds. */
static void test_float16_backs_off_from_overflow(void **state) {
    (void)state;
    run_result r;
    train_with_policy(EG_POLICY_MIXED_FLOAT16, MODE_EAGER, 0x1p40, &r);
    assert_true(r.skipped > 0);
    assert_true(r.scale == 0x1p40 / (double)(1LL << r.skipped));
    if (!(r.accuracy >= 0.95))
        fail_msg("accuracy %g after %lld skipped steps", r.accuracy, (long long)r.skipped);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dynamic_loss_scale_in_every_mode),
        cmocka_unit_test(test_fixed_loss_scale_skips_but_never_moves),
        cmocka_unit_test(test_loss_scale_floor_and_state),
        cmocka_unit_test(test_policy_names),
        cmocka_unit_test(test_global_model_and_layer_policies),
        cmocka_unit_test(test_losses_widen_low_precision),
        cmocka_unit_test(test_training_runs_per_policy),
        cmocka_unit_test(test_float16_backs_off_from_overflow),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
