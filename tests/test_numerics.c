/* NaN is never hidden: relu and its fused forms (the dense epilogue, batch norm with relu)
 * propagate NaN in every mode and on both CPU paths, with the same bits as before for every
 * other input (-0 still gives +0); and check numerics (eg_set_check_numerics,
 * EG_CHECK_NUMERICS=1) makes the first op whose result holds a NaN or an infinity an error naming
 * the op, the element and the call site — eagerly, lazily and in a traced function.
 * tests/CMakeLists.txt runs this program a second time with EG_CHECK_NUMERICS=1. */
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
#include "test_util.h"

/* Each case starts with check numerics off and leaves it off. */
static int setup(void **state) {
    eg_set_check_numerics(false);
    return fresh_scope_setup(state);
}

static int teardown(void **state) {
    eg_set_check_numerics(false);
    return strict_scope_teardown(state);
}

static eg_tensor *floats(const float *values, int n_dims, const int64_t *shape) {
    eg_tensor *t = eg_tensor_from_data(values, EG_DTYPE_F32, n_dims, shape);
    assert_non_null(t);
    return t;
}

static void read_floats(const eg_tensor *t, float *out, size_t bytes) {
    assert_non_null(t);
    assert_int_equal(eg_tensor_copy_to_host(t, out, bytes), EG_OK);
}

/* The environment's setting is read before anything else asks: with EG_CHECK_NUMERICS=1 (the
 * second registration of this test) check numerics starts on. Runs first. */
static void test_environment_setting(void **state) {
    (void)state;
    const char *env = getenv("EG_CHECK_NUMERICS");
    bool want = env && *env && strcmp(env, "0") != 0;
    assert_int_equal(eg_check_numerics(), want);
    if (want) { /* on from the first op */
        eg_tensor *x = floats((const float[]){-1.0f}, 0, NULL);
        assert_null(eg_sqrt(x));
        expect_error_containing(EG_ERR_NUMERICS, "sqrt", "NaN", NULL);
        eg_release(x);
    }
}

/* relu(NaN) is NaN, relu(-0) is +0, relu(-1) is +0, in f32 (both CPU paths, several vector
 * widths' worth of elements) and f64. */
static void test_relu_propagates_nan(void **state) {
    (void)state;
    float values[37];
    for (int i = 0; i < 37; i++) values[i] = (float)(i % 5) - 2.0f;
    values[3] = NAN;
    values[17] = -0.0f;
    values[36] = NAN;
    int64_t n = 37;
    for (int level = 0; level < 2; level++) {
        eg__cpu_level saved = eg__cpu_set_level(level ? EG__CPU_AVX2 : EG__CPU_BASELINE);
        float out[37];
        read_floats(eg_relu(floats(values, 1, &n)), out, sizeof out);
        eg__cpu_set_level(saved);
        for (int i = 0; i < 37; i++) {
            if (isnan(values[i])) {
                assert_true(isnan(out[i]));
            } else {
                float want = values[i] > 0 ? values[i] : 0.0f;
                assert_memory_equal(&out[i], &want, sizeof want); /* +0, never -0 */
            }
        }
    }
    double d[3] = {NAN, -3.0, 2.5};
    int64_t three = 3;
    eg_tensor *x64 = eg_tensor_from_data(d, EG_DTYPE_F64, 1, &three);
    double out64[3];
    assert_int_equal(eg_tensor_copy_to_host(eg_relu(x64), out64, sizeof out64), EG_OK);
    assert_true(isnan(out64[0]));
    assert_true(out64[1] == 0.0 && !signbit(out64[1]) && out64[2] == 2.5);
}

static eg_status relu_step(eg_tensor *const *inputs, eg_tensor **outputs, void *data) {
    (void)data;
    outputs[0] = eg_relu(eg_add_scalar(inputs[0], 0.0));
    return outputs[0] ? EG_OK : eg_last_status();
}

/* Lazily (a fused loop) and in a traced function too. */
static void test_relu_propagates_nan_in_every_mode(void **state) {
    (void)state;
    int64_t n = 4;
    const float values[4] = {NAN, -1, 1, NAN};
    eg_tensor *x = floats(values, 1, &n);
    float out[4];
    eg_lazy_begin();
    eg_tensor *lazy = NULL;
    assert_int_equal(relu_step(&x, &lazy, NULL), EG_OK);
    assert_int_equal(eg_lazy_end(), EG_OK);
    read_floats(lazy, out, sizeof out);
    assert_true(isnan(out[0]) && out[1] == 0 && out[2] == 1 && isnan(out[3]));
    eg_function *f = eg_function_new("relu_step", relu_step, 1, 1, NULL);
    for (int call = 0; call < 2; call++) {
        eg_tensor *y = NULL;
        assert_int_equal(eg_function_call(f, &x, &y), EG_OK);
        read_floats(y, out, sizeof out);
        assert_true(isnan(out[0]) && out[1] == 0 && out[2] == 1 && isnan(out[3]));
        eg_release(y);
    }
    eg_function_free(f);
}

/* The fused forms: relu in dense's epilogue and in batch norm's pass. */
static void test_fused_relu_propagates_nan(void **state) {
    (void)state;
    int64_t xs[2] = {2, 3}, ws[2] = {3, 2}, bs[1] = {2};
    eg_tensor *x = floats((const float[]){1, 2, 3, NAN, 1, 1}, 2, xs);
    eg_tensor *w = floats((const float[]){-1, 1, -1, 1, -1, 1}, 2, ws);
    eg_tensor *b = floats((const float[]){0, 0}, 1, bs);
    float out[4];
    read_floats(eg_dense(x, w, b, EG_ACTIVATION_RELU), out, sizeof out);
    /* row 0: (-6, 6) -> (0, 6); row 1 holds the NaN */
    assert_true(out[0] == 0 && out[1] == 6 && isnan(out[2]) && isnan(out[3]));

    int64_t shape[2] = {4, 2}, kept[2] = {1, 2};
    eg_tensor *images = floats((const float[]){1, -1, 2, -2, 3, -3, 4, -4}, 2, shape);
    eg_tensor *offset = floats((const float[]){NAN, 0}, 2, kept);
    eg_tensor *scale = floats((const float[]){1, 1}, 2, kept);
    eg_tensor *mean = NULL, *variance = NULL;
    eg_tensor *y = eg_batch_norm_training_activation(images, 1, (const int[]){0}, offset, scale,
                                                     1e-3, EG_ACTIVATION_RELU, &mean, &variance);
    float bn[8];
    read_floats(y, bn, sizeof bn);
    for (int r = 0; r < 4; r++) {
        assert_true(isnan(bn[2 * r])); /* offset NaN: every value of channel 0 */
        assert_false(isnan(bn[2 * r + 1]));
        assert_true(bn[2 * r + 1] >= 0);
    }
}

/* Eagerly: the op that makes the first NaN or infinity fails at its call. */
static void test_check_numerics_eager(void **state) {
    (void)state;
    int64_t n = 3;
    eg_tensor *x = floats((const float[]){4, -1, 9}, 1, &n);
    eg_tensor *zero = floats((const float[]){1, 0, 1}, 1, &n);
    /* off: NaN flows */
    eg_tensor *quiet = eg_sqrt(x);
    assert_non_null(quiet);
    eg_set_check_numerics(true);
    assert_true(eg_check_numerics());
    char line[32];
    snprintf(line, sizeof line, "test_numerics.c:%d", __LINE__ + 1);
    assert_null(eg_sqrt(x));
    expect_error_containing(EG_ERR_NUMERICS, "sqrt: check numerics", "NaN at element 1", "(3,) f32",
                            line, NULL);
    assert_null(eg_div(x, zero));
    expect_error_containing(EG_ERR_NUMERICS, "div", "-inf at element 1", NULL);
    /* finite results and integer ops pass */
    assert_non_null(eg_sqrt(zero));
    assert_non_null(eg_add(eg_ones(EG_DTYPE_I32, 1, &n), eg_ones(EG_DTYPE_I32, 1, &n)));
    /* a NaN already in an input makes the first op that reads it fail */
    assert_null(eg_mul_scalar(quiet, 2.0));
    expect_error_containing(EG_ERR_NUMERICS, "mul", NULL);
}

static eg_status log_step(eg_tensor *const *inputs, eg_tensor **outputs, void *data) {
    (void)data;
    outputs[0] = eg_exp(eg_log(eg_add_scalar(inputs[0], 1.0)));
    return outputs[0] ? EG_OK : eg_last_status();
}

/* Lazily the error comes when the value is computed, naming the op that made the NaN (each op
 * runs on its own while check numerics is on); in a traced function at the replay. */
static void test_check_numerics_lazy_and_graph(void **state) {
    (void)state;
    int64_t n = 4;
    eg_tensor *good = floats((const float[]){0, 1, 2, 3}, 1, &n);
    eg_tensor *bad = floats((const float[]){0, 1, -3, 3}, 1, &n);
    eg_set_check_numerics(true);
    eg_lazy_begin();
    eg_tensor *y = NULL;
    assert_int_equal(log_step(&bad, &y, NULL), EG_OK); /* recorded: no values yet */
    assert_int_equal(eg_lazy_end(), EG_OK);
    assert_int_equal(eg_realize(1, &y), EG_ERR_NUMERICS);
    expect_error_containing(EG_ERR_NUMERICS, "log: check numerics", "NaN at element 2", NULL);

    eg_function *f = eg_function_new("log_step", log_step, 1, 1, NULL);
    eg_tensor *out = NULL;
    assert_int_equal(eg_function_call(f, &good, &out), EG_OK); /* the trace */
    eg_release(out);
    out = NULL;
    assert_int_equal(eg_function_call(f, &good, &out), EG_OK); /* a replay */
    eg_release(out);
    out = NULL;
    assert_int_equal(eg_function_call(f, &bad, &out), EG_ERR_NUMERICS);
    expect_error_containing(EG_ERR_NUMERICS, "log: check numerics", "NaN at element 2", NULL);
    assert_null(out);
    eg_function_free(f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_environment_setting),
        cmocka_unit_test_setup_teardown(test_relu_propagates_nan, setup, teardown),
        cmocka_unit_test_setup_teardown(test_relu_propagates_nan_in_every_mode, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fused_relu_propagates_nan, setup, teardown),
        cmocka_unit_test_setup_teardown(test_check_numerics_eager, setup, teardown),
        cmocka_unit_test_setup_teardown(test_check_numerics_lazy_and_graph, setup, teardown),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    eg_shutdown();
    return failed;
}
