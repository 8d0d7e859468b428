/* What many of the cmocka tests share: each case in a fresh scope, a teardown that fails on a
 * pending error, expecting an error, random f32 inputs, comparing results. Include after cmocka.h.
 * Header-only: static inline, so a test that uses part of it gets no unused-function warnings. */
#ifndef EAGLE_TESTS_TEST_UTIL_H
#define EAGLE_TESTS_TEST_UTIL_H

#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "eagle.h"

/* Starts from a clean state even after a failed case (which leaves its scopes open). */
static inline int fresh_scope_setup(void **state) {
    (void)state;
    while (eg_scope_depth() > 0) eg_scope_end();
    eg_clear_error();
    eg_scope_begin();
    return 0;
}

/* Ends the case's scope; fails the case when it left an error pending or other scopes open. */
static inline int strict_scope_teardown(void **state) {
    (void)state;
    if (eg_last_status() != EG_OK) {
        print_error("unexpected pending error: %s\n", eg_last_error());
        return -1;
    }
    if (eg_scope_end() != EG_OK || eg_scope_depth() != 0) return -1;
    return 0;
}

/* Fails unless the last call set `expected`; then clears it. */
static inline void expect_error(eg_status expected) {
    if (eg_last_status() != expected) {
        print_error("expected %s, got %s: \"%s\"\n", eg_status_string(expected),
                    eg_status_string(eg_last_status()), eg_last_error());
        fail();
    }
    eg_clear_error();
}

/* Fails unless the last call set `status` with a message holding every given fragment (a list
 * ended by NULL); then clears it. */
static inline void expect_error_containing(eg_status status, ...) {
    const char *message = eg_last_error();
    if (eg_last_status() != status)
        fail_msg("expected %s, got %s: \"%s\"", eg_status_string(status),
                 eg_status_string(eg_last_status()), message);
    va_list args;
    va_start(args, status);
    for (const char *part; (part = va_arg(args, const char *));)
        if (!strstr(message, part)) fail_msg("\"%s\" lacks \"%s\"", message, part);
    va_end(args);
    eg_clear_error();
}

/* A new f32 tensor of uniform values in [-1, 1) drawn from its own generator seeded with seed
 * (owned by the current scope, if any). */
static inline eg_tensor *uniform_tensor(int n_dims, const int64_t *shape, uint64_t seed) {
    eg_generator *g = eg_generator_new(seed);
    eg_tensor *t = eg_random_uniform(g, EG_DTYPE_F32, n_dims, shape, -1, 1);
    eg_generator_free(g);
    return t;
}

/* Fails unless the f32 tensors a and b (any layout) agree elementwise within tolerance, relative
 * to 1 + |b|. */
static inline void assert_all_close(const eg_tensor *a, const eg_tensor *b, double tolerance) {
    assert_int_equal(eg_tensor_n_elems(a), eg_tensor_n_elems(b));
    eg_tensor *ac = eg_contiguous(a), *bc = eg_contiguous(b);
    const float *x = eg_tensor_data(ac), *y = eg_tensor_data(bc);
    for (int64_t i = 0; i < eg_tensor_n_elems(a); i++)
        if (!(fabs(x[i] - y[i]) <= tolerance * (1 + fabs(y[i]))))
            fail_msg("element %lld: %.9g against %.9g", (long long)i, x[i], y[i]);
    eg_release(ac);
    eg_release(bc);
}

/* Whether the tensors a and b hold the same bytes (fails the test unless their counts agree). */
static inline bool tensors_same_bits(const eg_tensor *a, const eg_tensor *b) {
    int64_t n = eg_tensor_n_elems(a);
    assert_int_equal(n, eg_tensor_n_elems(b));
    return memcmp(eg_tensor_data(a), eg_tensor_data(b),
                  (size_t)n * eg_dtype_size(eg_tensor_dtype(a))) == 0;
}

/* ||a - b||_F / ||b||_F of two f32 tensors of one count (||a - b||_F when b is all zeros). */
static inline double tensors_relative_error(const eg_tensor *a, const eg_tensor *b) {
    int64_t n = eg_tensor_n_elems(b);
    assert_int_equal(eg_tensor_n_elems(a), n);
    const float *x = eg_tensor_data(a), *y = eg_tensor_data(b);
    assert_non_null(x);
    assert_non_null(y);
    double diff = 0, norm = 0;
    for (int64_t i = 0; i < n; i++) {
        diff += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
        norm += (double)y[i] * y[i];
    }
    return norm > 0 ? sqrt(diff / norm) : sqrt(diff);
}

#endif
