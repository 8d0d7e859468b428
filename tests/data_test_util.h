/* Helpers shared by the input pipeline's single-thread tests (test_data.c, test_data_io.c):
 * per-case scope and error hygiene, and a whole pass of a dataset read back as numbers. Include
 * after <cmocka.h>. */
#ifndef EAGLE_TESTS_DATA_TEST_UTIL_H
#define EAGLE_TESTS_DATA_TEST_UTIL_H

#include <stdint.h>

#include "eagle.h"

__attribute__((unused)) static int case_setup(void **state) {
    (void)state;
    while (eg_scope_depth() > 0) eg_scope_end();
    eg_clear_error();
    eg_scope_begin();
    return 0;
}

__attribute__((unused)) static int case_teardown(void **state) {
    (void)state;
    if (eg_last_status() != EG_OK) {
        print_error("unexpected pending error: %s\n", eg_last_error());
        return -1;
    }
    return eg_scope_end() == EG_OK && eg_scope_depth() == 0 ? 0 : -1;
}

/* Iterates a whole pass: component 0 of each element, flattened to doubles, one after another,
 * into values (up to capacity); returns the element count. Fails the test on an error. */
__attribute__((unused)) static int64_t collect(eg_dataset *ds, double *values, int64_t capacity,
                                               int64_t *n_values) {
    eg_dataset_iterator *it = eg_dataset_iterator_new(ds);
    assert_non_null(it);
    int64_t n = 0, used = 0;
    for (;;) {
        eg_scope_begin();
        eg_element e;
        bool end;
        eg_status status = eg_dataset_iterator_next(it, &e, &end);
        if (status != EG_OK) fail_msg("iteration failed: %s", eg_last_error());
        if (end) {
            assert_int_equal(e.n_tensors, 0);
            eg_scope_end();
            break;
        }
        assert_true(e.n_tensors >= 1);
        const eg_tensor *t = e.tensors[0];
        for (int64_t i = 0; i < eg_tensor_n_elems(t); i++) {
            assert_true(used < capacity);
            int64_t index[EG_MAX_DIMS] = {0}, rest = i;
            for (int d = eg_tensor_n_dims(t) - 1; d >= 0; d--) {
                index[d] = rest % eg_tensor_shape(t)[d];
                rest /= eg_tensor_shape(t)[d];
            }
            values[used++] = eg_tensor_get(t, index);
        }
        n++;
        eg_scope_end();
    }
    eg_dataset_iterator_free(it);
    if (n_values) *n_values = used;
    return n;
}

__attribute__((unused)) static void assert_values(const double *actual, int64_t n_actual,
                                                  const double *expected, int64_t n_expected) {
    assert_int_equal(n_actual, n_expected);
    for (int64_t i = 0; i < n_expected; i++)
        if (actual[i] != expected[i])
            fail_msg("value %lld: %g, expected %g", (long long)i, actual[i], expected[i]);
}

/* The next element, expecting one. */
__attribute__((unused)) static eg_element next_element(eg_dataset_iterator *it) {
    eg_element e;
    bool end;
    if (eg_dataset_iterator_next(it, &e, &end) != EG_OK) fail_msg("next: %s", eg_last_error());
    assert_false(end);
    return e;
}

__attribute__((unused)) static void expect_end(eg_dataset_iterator *it) {
    eg_element e;
    bool end;
    assert_int_equal(eg_dataset_iterator_next(it, &e, &end), EG_OK);
    assert_true(end);
    assert_int_equal(e.n_tensors, 0);
}

__attribute__((unused)) static eg_tensor *arange_f32(int64_t n, int n_dims, const int64_t *shape) {
    eg_tensor *t = eg_arange(0, (double)n, 1, EG_DTYPE_F32);
    return eg_reshape(t, n_dims, shape);
}

#endif
