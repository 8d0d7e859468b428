/* A model build that fails part way (here: the memory limit, at the second layer) leaves nothing
 * behind: the layers it built are unbuilt again and the random stream is where it was, so a
 * retry gives the same initial weights, bit for bit, as a build that succeeded at once. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "eagle.h"

/* 784 -> 64 -> 20000: the second kernel (5 MiB) does not fit a 2 MiB limit, the first does. */
static eg_model *new_model(void) {
    eg_model *model = eg_sequential_new("m");
    assert_non_null(model);
    assert_int_equal(eg_sequential_add(model, eg_dense_new(64, EG_ACTIVATION_RELU)), EG_OK);
    assert_int_equal(eg_sequential_add(model, eg_dense_new(20000, EG_ACTIVATION_NONE)), EG_OK);
    return model;
}

/* All of the model's variables as one host array (caller frees); *n_floats its length. */
static float *weights_of(eg_model *model, size_t *n_floats) {
    int n = 0;
    eg_tensor *const *variables = eg_model_variables(model, &n);
    assert_int_equal(n, 4);
    size_t total = 0;
    for (int i = 0; i < n; i++) total += (size_t)eg_tensor_n_elems(variables[i]);
    float *all = malloc(total * sizeof *all), *at = all;
    assert_non_null(all);
    for (int i = 0; i < n; i++) {
        size_t count = (size_t)eg_tensor_n_elems(variables[i]);
        assert_int_equal(eg_tensor_copy_to_host(variables[i], at, count * sizeof *at), EG_OK);
        at += count;
    }
    *n_floats = total;
    return all;
}

static void test_a_failed_build_leaves_the_random_stream(void **state) {
    (void)state;
    int64_t input[2] = {-1, 784};
    eg_manual_seed(7);
    eg_model *reference = new_model();
    assert_int_equal(eg_model_build(reference, 2, input), EG_OK);
    size_t n_reference;
    float *want = weights_of(reference, &n_reference);
    eg_model_free(reference);

    eg_manual_seed(7);
    eg_model *model = new_model();
    assert_int_equal(eg_memory_trim(NULL), EG_OK);
    assert_int_equal(eg_memory_set_limit(NULL, 2u << 20), EG_OK);
    assert_int_equal(eg_model_build(model, 2, input), EG_ERR_OUT_OF_MEMORY);
    eg_clear_error();
    assert_int_equal(eg_memory_set_limit(NULL, 0), EG_OK);
    int n = -1;
    eg_model_variables(model, &n);
    assert_int_equal(n, 0); /* the first layer, built before the failure, is unbuilt again */
    assert_int_equal(eg_model_build(model, 2, input), EG_OK);
    size_t n_got;
    float *got = weights_of(model, &n_got);
    assert_int_equal(n_got, n_reference);
    assert_memory_equal(got, want, n_got * sizeof *got);
    free(got);
    free(want);
    eg_model_free(model);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_failed_build_leaves_the_random_stream),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
