/* eg_model_save_weights / eg_model_load_weights: a round trip gives the same outputs bit for bit
 * (moving statistics included); a file with a missing, extra, mis-shaped or mis-typed tensor is
 * refused with an error naming it, and leaves every variable as it was. */
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

static eg_model *make_model(uint64_t seed, int64_t hidden) {
    eg_manual_seed(seed);
    eg_model *model = eg_sequential_new("weights");
    assert_int_equal(eg_sequential_add(model, eg_dense_new(hidden, EG_ACTIVATION_RELU)), EG_OK);
    assert_int_equal(eg_sequential_add(model, eg_batch_norm_new(NULL)), EG_OK);
    assert_int_equal(eg_sequential_add(model, eg_dense_new(3, EG_ACTIVATION_NONE)), EG_OK);
    assert_int_equal(eg_model_build(model, 2, (int64_t[]){-1, 5}), EG_OK);
    return model;
}

static void temp_path(char *path, size_t size) {
    snprintf(path, size, "/tmp/eagle_weights_XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
}

static void outputs_of(eg_model *model, float *out) {
    float x[4 * 5];
    for (int i = 0; i < 20; i++) x[i] = (float)(i % 7) - 3.0f;
    eg_tensor *in = eg_tensor_from_data(x, EG_DTYPE_F32, 2, (int64_t[]){4, 5});
    eg_tensor *y = eg_model_call(model, in, false);
    assert_non_null(y);
    assert_int_equal(eg_tensor_copy_to_host(y, out, 12 * sizeof(float)), EG_OK);
    eg_release(y);
    eg_release(in);
}

/* One training-mode call moves the batch norm's moving statistics off their initial values. */
static void move_statistics(eg_model *model) {
    float x[8 * 5];
    for (int i = 0; i < 40; i++) x[i] = (float)(i % 5) * 0.5f + 1.0f;
    eg_tensor *in = eg_tensor_from_data(x, EG_DTYPE_F32, 2, (int64_t[]){8, 5});
    eg_release(eg_model_call(model, in, true));
    eg_release(in);
}

static void test_round_trip(void **state) {
    (void)state;
    char path[64];
    temp_path(path, sizeof path);
    eg_model *a = make_model(1, 8), *b = make_model(2, 8);
    move_statistics(a);
    float ya[12], yb[12];
    outputs_of(a, ya);
    outputs_of(b, yb);
    assert_true(memcmp(ya, yb, sizeof ya) != 0); /* other seeds, other outputs */
    assert_int_equal(eg_model_save_weights(a, path), EG_OK);
    assert_int_equal(eg_model_load_weights(b, path), EG_OK);
    outputs_of(b, yb);
    assert_memory_equal(ya, yb, sizeof ya);
    /* the file names every variable */
    eg_safetensors *st = eg_safetensors_open(path);
    assert_non_null(st);
    assert_int_equal(eg_safetensors_count(st), 8); /* 2 x (kernel, bias) + 4 of batch norm */
    assert_true(eg_safetensors_contains(st, "dense/kernel"));
    eg_safetensors_close(st);
    unlink(path);
    eg_model_free(a);
    eg_model_free(b);
}

static void test_mismatches_are_named_and_change_nothing(void **state) {
    (void)state;
    char path[64];
    temp_path(path, sizeof path);
    eg_model *wide = make_model(1, 8), *narrow = make_model(3, 6);
    assert_int_equal(eg_model_save_weights(wide, path), EG_OK);
    float before[12], after[12];
    outputs_of(narrow, before);
    assert_int_equal(eg_model_load_weights(narrow, path), EG_ERR_SHAPE);
    assert_non_null(strstr(eg_last_error(), "'dense/kernel'"));
    assert_non_null(strstr(eg_last_error(), "f32 (5, 8); the model's variable is f32 (5, 6)"));
    eg_clear_error();
    outputs_of(narrow, after);
    assert_memory_equal(before, after, sizeof before);

    /* a file missing a variable, and one with a tensor too many */
    eg_tensor *t = eg_zeros(EG_DTYPE_F32, 1, (int64_t[]){3});
    const char *one[1] = {"dense_1/bias"};
    assert_int_equal(eg_safetensors_save(path, 1, one, &t, 0, NULL, NULL), EG_OK);
    assert_int_equal(eg_model_load_weights(wide, path), EG_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(eg_last_error(), "has no tensor 'dense/kernel'"));
    eg_clear_error();
    int n;
    eg_tensor *const *vars = eg_model_variables(wide, &n);
    const char *names[16];
    eg_tensor *tensors[16];
    for (int i = 0; i < n; i++) {
        names[i] = eg_variable_name(vars[i]);
        tensors[i] = vars[i];
    }
    names[n] = "stray";
    tensors[n] = t;
    assert_int_equal(eg_safetensors_save(path, n + 1, names, tensors, 0, NULL, NULL), EG_OK);
    assert_int_equal(eg_model_load_weights(wide, path), EG_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(eg_last_error(), "holds 'stray'"));
    eg_clear_error();
    /* another dtype */
    eg_tensor *as_f64 = eg_cast(vars[0], EG_DTYPE_F64);
    tensors[0] = as_f64;
    assert_int_equal(eg_safetensors_save(path, n, names, tensors, 0, NULL, NULL), EG_OK);
    assert_int_equal(eg_model_load_weights(wide, path), EG_ERR_SHAPE);
    assert_non_null(strstr(eg_last_error(), "is f64 (5, 8); the model's variable is f32 (5, 8)"));
    eg_clear_error();
    assert_int_equal(eg_model_load_weights(wide, "/nonexistent/weights.safetensors"), EG_ERR_IO);
    eg_clear_error();
    eg_release(as_f64);
    eg_release(t);
    unlink(path);
    eg_model_free(wide);
    eg_model_free(narrow);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip, fresh_scope_setup, strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_mismatches_are_named_and_change_nothing,
                                        fresh_scope_setup, strict_scope_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
