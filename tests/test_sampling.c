/* eg_sample_logits: greedy, top-k and temperature against the distributions they define, measured
 * over many rows, and the same tokens for the same seed. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "test_util.h"

enum { ROWS = 40000 };

/* ROWS rows of logits log(p) for p = 0.5, 0.3, 0.2, 0 (the last -inf in effect: log 1e-30). */
static eg_tensor *rows_of_logits(void) {
    static float values[ROWS * 4];
    const float row[4] = {logf(0.5f), logf(0.3f), logf(0.2f), logf(1e-30f)};
    for (int r = 0; r < ROWS; r++)
        for (int j = 0; j < 4; j++) values[r * 4 + j] = row[j];
    return eg_tensor_from_data(values, EG_DTYPE_F32, 2, (const int64_t[]){ROWS, 4});
}

static void frequencies(const eg_tensor *ids, double *f) {
    const int64_t *v = eg_tensor_data((eg_tensor *)ids);
    for (int j = 0; j < 4; j++) f[j] = 0;
    for (int r = 0; r < ROWS; r++) f[v[r]] += 1.0 / ROWS;
}

static void expect_frequencies(double temperature, int64_t top_k, const double *want) {
    eg_generator *g = eg_generator_new(17);
    eg_tensor *ids = eg_sample_logits(rows_of_logits(), temperature, top_k, g);
    eg_generator_free(g);
    assert_non_null(ids);
    assert_int_equal(eg_tensor_dtype(ids), EG_DTYPE_I64);
    double f[4];
    frequencies(ids, f);
    for (int j = 0; j < 4; j++)
        if (fabs(f[j] - want[j]) > 0.01)
            fail_msg("T %g top_k %lld: token %d drawn %.4f, expected %.4f", temperature,
                     (long long)top_k, j, f[j], want[j]);
}

static void test_distributions(void **state) {
    (void)state;
    expect_frequencies(1.0, 0, (const double[]){0.5, 0.3, 0.2, 0});
    expect_frequencies(1.0, 2, (const double[]){0.625, 0.375, 0, 0});
    expect_frequencies(1.0, 1, (const double[]){1, 0, 0, 0});
    /* T = 0.5 squares the probabilities: 0.25, 0.09, 0.04 over 0.38 */
    expect_frequencies(0.5, 0, (const double[]){0.25 / 0.38, 0.09 / 0.38, 0.04 / 0.38, 0});
    expect_frequencies(0.0, 0, (const double[]){1, 0, 0, 0});
}

static void test_same_seed_same_tokens(void **state) {
    (void)state;
    int64_t shape[2] = {64, 50};
    eg_tensor *logits = uniform_tensor(2, shape, 3);
    eg_tensor *ids[2];
    for (int run = 0; run < 2; run++) {
        eg_generator *g = eg_generator_new(99);
        ids[run] = eg_sample_logits(logits, 0.8, 10, g);
        eg_generator_free(g);
        assert_non_null(ids[run]);
    }
    assert_memory_equal(eg_tensor_data(ids[0]), eg_tensor_data(ids[1]), 64 * sizeof(int64_t));
}

static void test_bad_input_gets_clear_errors(void **state) {
    (void)state;
    int64_t n = 5;
    assert_null(eg_sample_logits(uniform_tensor(1, &n, 1), 1.0, 0, NULL));
    expect_error_containing(EG_ERR_SHAPE, "(batch, vocabulary)", NULL);
    int64_t shape[2] = {2, 5};
    assert_null(eg_sample_logits(uniform_tensor(2, shape, 1), -1.0, 0, NULL));
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "temperature", NULL);
    assert_null(eg_sample_logits(uniform_tensor(2, shape, 1), 1.0, -2, NULL));
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "top_k", NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_distributions, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_same_seed_same_tokens, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_bad_input_gets_clear_errors, fresh_scope_setup,
                                        strict_scope_teardown),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    eg_shutdown();
    return failed;
}
