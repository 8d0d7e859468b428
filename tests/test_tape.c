/* Gradient tapes and variables: what gets recorded, persistent and nested tapes, no-grad regions,
 * accumulation, unconnected sources, upstream gradients, gradients through views, variable
 * updates, a 2-layer MLP checked against a hand-written backward pass, and a training loop that
 * must run from the allocator's cache (zero system allocations after warm-up). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "eagle.h"
#include "test_util.h"

/* ---- helpers ---------------------------------------------------------------------------- */

static eg_tensor *vec64(int64_t n, const double *values) {
    eg_tensor *t = eg_tensor_from_data(values, EG_DTYPE_F64, 1, &n);
    assert_non_null(t);
    return t;
}

static eg_tensor *mat64(int64_t rows, int64_t cols, const double *values) {
    int64_t shape[2] = {rows, cols};
    eg_tensor *t = eg_tensor_from_data(values, EG_DTYPE_F64, 2, shape);
    assert_non_null(t);
    return t;
}

/* t (any shape, f64 or f32) equals want[] in row-major order within tol. */
static void assert_close(const eg_tensor *t, const double *want, int64_t n, double tol) {
    assert_non_null(t);
    assert_int_equal(eg_tensor_n_elems(t), n);
    eg_tensor *d = eg_tensor_dtype(t) == EG_DTYPE_F64 ? (eg_tensor *)t : eg_cast(t, EG_DTYPE_F64);
    assert_non_null(d);
    double *got = malloc((size_t)n * sizeof *got);
    assert_non_null(got);
    assert_int_equal(eg_tensor_copy_to_host(d, got, (size_t)n * sizeof *got), EG_OK);
    for (int64_t i = 0; i < n; i++) {
        if (!(fabs(got[i] - want[i]) <= tol * (1 + fabs(want[i]))))
            print_error("element %lld: %.17g != %.17g\n", (long long)i, got[i], want[i]);
        assert_true(fabs(got[i] - want[i]) <= tol * (1 + fabs(want[i])));
    }
    free(got);
}

static eg_tensor *grad1(eg_tape *tape, const eg_tensor *target, eg_tensor *source,
                        eg_unconnected unconnected) {
    eg_tensor *g = NULL;
    assert_int_equal(eg_tape_gradient(tape, target, 1, &source, &g, unconnected), EG_OK);
    return g;
}

/* ---- tapes ------------------------------------------------------------------------------ */

static void test_watch(void **state) {
    (void)state;
    eg_tensor *x = eg_scalar(EG_DTYPE_F64, 3.0);
    /* not watched: nothing is recorded */
    eg_tape *tape = eg_tape_begin(false);
    eg_tensor *y = eg_mul(x, x);
    assert_int_equal(eg_tape_n_records(tape), 0);
    assert_null(grad1(tape, y, x, EG_UNCONNECTED_NULL));
    eg_tape_free(tape);

    tape = eg_tape_begin(false);
    assert_int_equal(eg_tape_watch(tape, x), EG_OK);
    assert_int_equal(eg_tape_watch(tape, x), EG_OK); /* twice is fine */
    y = eg_mul(x, x);
    assert_int_equal(eg_tape_n_records(tape), 1);
    eg_tensor *g = grad1(tape, y, x, EG_UNCONNECTED_NULL);
    assert_true(eg_item(g) == 6.0);
    eg_tape_free(tape);

    /* the target itself is a source: d x / d x = 1 */
    tape = eg_tape_begin(false);
    eg_tape_watch(tape, x);
    assert_true(eg_item(grad1(tape, x, x, EG_UNCONNECTED_NULL)) == 1.0);
    eg_tape_free(tape);

    /* ops after eg_tape_end are not recorded; the gradient still works on what was */
    tape = eg_tape_begin(false);
    eg_tape_watch(tape, x);
    eg_tensor *a = eg_sin(x);
    assert_int_equal(eg_tape_end(tape), EG_OK);
    assert_int_equal(eg_tape_end(tape), EG_OK); /* idempotent */
    eg_tensor *b = eg_mul(a, x);
    assert_int_equal(eg_tape_n_records(tape), 1);
    assert_null(grad1(tape, b, x, EG_UNCONNECTED_NULL));
    eg_tape_free(tape);
    (void)a;

    assert_int_equal(eg_tape_watch(NULL, x), EG_ERR_NULL_ARGUMENT);
    expect_error(EG_ERR_NULL_ARGUMENT);
    eg_tape_free(NULL);
}

static void test_variables_watched(void **state) {
    (void)state;
    eg_tensor *v = eg_variable(eg_scalar(EG_DTYPE_F64, 2.0), "v");
    assert_non_null(v);
    assert_true(eg_is_variable(v));
    assert_string_equal(eg_variable_name(v), "v");
    assert_true(eg_variable_trainable(v));
    eg_tape *tape = eg_tape_begin(false);
    eg_tensor *y = eg_mul(eg_mul(v, v), v);
    assert_int_equal(eg_tape_n_records(tape), 2);
    assert_true(eg_item(grad1(tape, y, v, EG_UNCONNECTED_NULL)) == 12.0);
    eg_tape_free(tape);
    /* a non-trainable variable is not watched */
    eg_variable_set_trainable(v, false);
    assert_false(eg_variable_trainable(v));
    tape = eg_tape_begin(false);
    y = eg_mul(v, v);
    assert_int_equal(eg_tape_n_records(tape), 0);
    assert_null(grad1(tape, y, v, EG_UNCONNECTED_NULL));
    eg_tape_free(tape);
    eg_release(v);
    /* a plain tensor is not a variable */
    eg_tensor *plain = eg_scalar(EG_DTYPE_F32, 1);
    assert_false(eg_is_variable(plain));
    assert_string_equal(eg_variable_name(plain), "");
    assert_null(eg_variable(eg_scalar(EG_DTYPE_I32, 1), NULL));
    expect_error(EG_ERR_DTYPE);
    eg_tensor *anonymous = eg_variable(plain, NULL);
    assert_string_equal(eg_variable_name(anonymous), "");
    eg_release(anonymous);
}

static void test_several_sources(void **state) {
    (void)state;
    const double av[3] = {0.5, -1.0, 2.0}, bv[3] = {3.0, 0.25, -2.0};
    eg_tensor *a = vec64(3, av), *b = vec64(3, bv);
    eg_tape *tape = eg_tape_begin(false);
    eg_tape_watch(tape, a);
    eg_tape_watch(tape, b);
    /* f = sum(a * b + sin(a) + b * b) */
    eg_tensor *f = eg_sum(eg_add(eg_add(eg_mul(a, b), eg_sin(a)), eg_mul(b, b)), 0, NULL, false);
    eg_tensor *sources[2] = {a, b};
    eg_tensor *grads[2];
    assert_int_equal(eg_tape_gradient(tape, f, 2, sources, grads, EG_UNCONNECTED_NULL), EG_OK);
    double want_a[3], want_b[3];
    for (int i = 0; i < 3; i++) {
        want_a[i] = bv[i] + cos(av[i]);
        want_b[i] = av[i] + 2 * bv[i];
    }
    assert_close(grads[0], want_a, 3, 1e-14);
    assert_close(grads[1], want_b, 3, 1e-14);
    eg_tape_free(tape);
}

static void test_persistent(void **state) {
    (void)state;
    eg_tensor *x = eg_scalar(EG_DTYPE_F64, 2.0);
    eg_tape *tape = eg_tape_begin(true);
    eg_tape_watch(tape, x);
    eg_tensor *y = eg_mul(x, x);         /* 2x = 4 */
    eg_tensor *z = eg_mul(y, eg_sin(x)); /* 2x sin x + x^2 cos x */
    eg_tape_end(tape);
    assert_true(eg_item(grad1(tape, y, x, EG_UNCONNECTED_NULL)) == 4.0);
    assert_true(eg_item(grad1(tape, y, x, EG_UNCONNECTED_NULL)) == 4.0);
    double want = 4 * sin(2.0) + 4 * cos(2.0);
    assert_true(fabs(eg_item(grad1(tape, z, x, EG_UNCONNECTED_NULL)) - want) < 1e-14);
    /* d z / d y = sin x */
    assert_true(fabs(eg_item(grad1(tape, z, y, EG_UNCONNECTED_NULL)) - sin(2.0)) < 1e-15);
    eg_tape_free(tape);

    /* a gradient taken while the tape records does not record its own backward ops */
    tape = eg_tape_begin(true);
    eg_tape_watch(tape, x);
    y = eg_exp(eg_mul(x, x));
    size_t n = eg_tape_n_records(tape);
    assert_int_equal(n, 2);
    assert_true(fabs(eg_item(grad1(tape, y, x, EG_UNCONNECTED_NULL)) - 4 * exp(4.0)) < 1e-12);
    assert_int_equal(eg_tape_n_records(tape), n);
    eg_tensor *after = eg_sin(y); /* still recording */
    assert_int_equal(eg_tape_n_records(tape), n + 1);
    assert_non_null(grad1(tape, after, x, EG_UNCONNECTED_NULL));
    eg_tape_free(tape);

    /* non-persistent: one call only */
    tape = eg_tape_begin(false);
    eg_tape_watch(tape, x);
    y = eg_mul(x, x);
    assert_true(eg_item(grad1(tape, y, x, EG_UNCONNECTED_NULL)) == 4.0);
    eg_tensor *g = (eg_tensor *)1;
    eg_tensor *source = x;
    assert_int_equal(eg_tape_gradient(tape, y, 1, &source, &g, EG_UNCONNECTED_NULL), EG_ERR_STATE);
    assert_null(g);
    assert_non_null(strstr(eg_last_error(), "persistent"));
    expect_error(EG_ERR_STATE);
    eg_tape_free(tape);
    /* the program goes on */
    tape = eg_tape_begin(false);
    eg_tape_watch(tape, x);
    assert_true(eg_item(grad1(tape, eg_mul(x, x), x, EG_UNCONNECTED_NULL)) == 4.0);
    eg_tape_free(tape);
}

/* TensorFlow's rule: a non-persistent tape is done after its one gradient and records nothing
 * more (its records are gone; recording would only cost time and hold tensors). */
static void test_non_persistent_tape_stops_after_its_gradient(void **state) {
    (void)state;
    eg_tensor *x = eg_scalar(EG_DTYPE_F64, 3.0);
    eg_tape *tape = eg_tape_begin(false);
    assert_int_equal(eg_tape_watch(tape, x), EG_OK);
    eg_tensor *y = eg_mul(x, x);
    assert_int_equal(eg_tape_n_records(tape), 1);
    assert_true(eg_item(grad1(tape, y, x, EG_UNCONNECTED_NULL)) == 6.0);
    eg_tensor *later = eg_sin(eg_mul(y, x));
    assert_non_null(later);
    assert_int_equal(eg_tape_n_records(tape), 0);
    eg_tape_free(tape);
    /* an outer tape goes on recording, and so the inner gradient's ops reach it */
    eg_tape *outer = eg_tape_begin(true);
    eg_tape_watch(outer, x);
    eg_tape *inner = eg_tape_begin(false);
    eg_tape_watch(inner, x);
    eg_tensor *dy = grad1(inner, eg_mul(eg_mul(x, x), x), x, EG_UNCONNECTED_NULL); /* 3x^2 */
    size_t outer_records = eg_tape_n_records(outer);
    eg_tensor *z = eg_mul(dy, x);
    assert_int_equal(eg_tape_n_records(inner), 0);
    assert_int_equal(eg_tape_n_records(outer), outer_records + 1);
    assert_true(eg_item(grad1(outer, z, x, EG_UNCONNECTED_NULL)) == 9 * 9.0); /* d 3x^3 */
    eg_tape_free(inner);
    eg_tape_free(outer);
    /* a persistent tape keeps recording after a gradient */
    tape = eg_tape_begin(true);
    eg_tape_watch(tape, x);
    y = eg_mul(x, x);
    assert_non_null(grad1(tape, y, x, EG_UNCONNECTED_NULL));
    assert_non_null(eg_sin(y));
    assert_int_equal(eg_tape_n_records(tape), 2);
    eg_tape_free(tape);
}

/* A target made before the tape began cannot be one it recorded: an error naming where it was
 * made, not a silent "no gradient". One watched by the tape is fine. */
static void test_target_from_before_the_tape_rejected(void **state) {
    (void)state;
    eg_tensor *x = eg_scalar(EG_DTYPE_F64, 3.0);
    int made_line = __LINE__ + 1;
    eg_tensor *early = eg_mul(x, x);
    eg_tape *tape = eg_tape_begin(false);
    eg_tape_watch(tape, x);
    eg_tensor *g = (eg_tensor *)1;
    eg_tensor *source = x;
    assert_int_equal(eg_tape_gradient(tape, early, 1, &source, &g, EG_UNCONNECTED_ZERO),
                     EG_ERR_INVALID_ARGUMENT);
    assert_null(g);
    char made_at[64];
    snprintf(made_at, sizeof made_at, "made at test_tape.c:%d", made_line);
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "before the tape began", made_at, NULL);
    /* the refused call did not use the tape up */
    assert_true(eg_item(grad1(tape, eg_mul(x, x), x, EG_UNCONNECTED_NULL)) == 6.0);
    eg_tape_free(tape);
    /* watched, the early tensor is a valid target: d early / d early = 1 */
    tape = eg_tape_begin(false);
    eg_tape_watch(tape, early);
    assert_true(eg_item(grad1(tape, early, early, EG_UNCONNECTED_NULL)) == 1.0);
    eg_tape_free(tape);
    /* made while the tape recorded, from nothing it tracks: no gradient, as before */
    tape = eg_tape_begin(false);
    eg_tape_watch(tape, x);
    assert_null(grad1(tape, eg_mul(early, early), x, EG_UNCONNECTED_NULL));
    eg_tape_free(tape);
}

static void test_watching_an_integer_tensor_rejected(void **state) {
    (void)state;
    eg_tape *tape = eg_tape_begin(false);
    int64_t n = 3;
    eg_tensor *labels = eg_zeros(EG_DTYPE_I32, 1, &n), *mask = eg_zeros(EG_DTYPE_BOOL, 1, &n);
    assert_int_equal(eg_tape_watch(tape, labels), EG_ERR_DTYPE);
    expect_error_containing(EG_ERR_DTYPE, "tape_watch", "i32", NULL);
    assert_int_equal(eg_tape_watch(tape, mask), EG_ERR_DTYPE);
    expect_error_containing(EG_ERR_DTYPE, "bool", NULL);
    /* nothing was watched: ops on them are not recorded */
    assert_non_null(eg_add(labels, labels));
    assert_int_equal(eg_tape_n_records(tape), 0);
    eg_tape_free(tape);
}

static void test_nested_second_derivative(void **state) {
    (void)state;
    eg_tensor *x = eg_scalar(EG_DTYPE_F64, 1.5);
    eg_tape *outer = eg_tape_begin(false);
    eg_tape_watch(outer, x);
    eg_tape *inner = eg_tape_begin(false);
    eg_tape_watch(inner, x);
    eg_tensor *y = eg_mul(eg_mul(x, x), x); /* x^3 */
    /* taken while the inner tape still records: its backward ops land on the outer tape */
    eg_tensor *dy = grad1(inner, y, x, EG_UNCONNECTED_NULL);
    assert_true(fabs(eg_item(dy) - 3 * 1.5 * 1.5) < 1e-14);
    eg_tape_free(inner);
    eg_tensor *d2y = grad1(outer, dy, x, EG_UNCONNECTED_NULL);
    assert_non_null(d2y);
    assert_true(fabs(eg_item(d2y) - 6 * 1.5) < 1e-14);
    eg_tape_free(outer);

    /* sin'' = -sin, with the inner tape ended first */
    outer = eg_tape_begin(false);
    eg_tape_watch(outer, x);
    inner = eg_tape_begin(false);
    eg_tape_watch(inner, x);
    y = eg_sin(x);
    eg_tape_end(inner);
    dy = grad1(inner, y, x, EG_UNCONNECTED_NULL);
    assert_true(fabs(eg_item(dy) - cos(1.5)) < 1e-15);
    d2y = grad1(outer, dy, x, EG_UNCONNECTED_NULL);
    assert_true(fabs(eg_item(d2y) + sin(1.5)) < 1e-15);
    eg_tape_free(inner);
    eg_tape_free(outer);

    /* third derivative with three tapes: (x^4)''' = 24 x */
    eg_tape *t1 = eg_tape_begin(false), *t2 = eg_tape_begin(false), *t3 = eg_tape_begin(false);
    eg_tape_watch(t1, x);
    eg_tape_watch(t2, x);
    eg_tape_watch(t3, x);
    eg_tensor *x4 = eg_square(eg_square(x));
    eg_tensor *d1 = grad1(t3, x4, x, EG_UNCONNECTED_NULL);
    eg_tensor *d2 = grad1(t2, d1, x, EG_UNCONNECTED_NULL);
    eg_tensor *d3 = grad1(t1, d2, x, EG_UNCONNECTED_NULL);
    assert_true(fabs(eg_item(d1) - 4 * pow(1.5, 3)) < 1e-13);
    assert_true(fabs(eg_item(d2) - 12 * 1.5 * 1.5) < 1e-13);
    assert_true(fabs(eg_item(d3) - 24 * 1.5) < 1e-13);
    eg_tape_free(t3);
    eg_tape_free(t2);
    eg_tape_free(t1);
}

static void test_no_grad(void **state) {
    (void)state;
    const double xv[2] = {1.0, 2.0};
    eg_tensor *x = vec64(2, xv);
    eg_tape *tape = eg_tape_begin(true);
    eg_tape_watch(tape, x);
    eg_tensor *y = eg_mul_scalar(x, 2.0);
    size_t n = eg_tape_n_records(tape);
    assert_int_equal(n, 1);
    eg_no_grad_begin();
    eg_tensor *z = eg_mul(x, y);
    eg_no_grad_begin(); /* nests */
    eg_tensor *w = eg_exp(z);
    eg_no_grad_end();
    eg_tensor *u = eg_add(w, x);
    eg_no_grad_end();
    assert_int_equal(eg_tape_n_records(tape), n);
    assert_null(grad1(tape, z, x, EG_UNCONNECTED_NULL));
    assert_null(grad1(tape, u, x, EG_UNCONNECTED_NULL));
    eg_tensor *zero = grad1(tape, u, x, EG_UNCONNECTED_ZERO);
    const double zeros[2] = {0, 0};
    assert_close(zero, zeros, 2, 0);
    /* recording resumes after the region */
    eg_tensor *after = eg_mul(x, y);
    assert_int_equal(eg_tape_n_records(tape), n + 1);
    const double want[2] = {4.0 * xv[0], 4.0 * xv[1]};
    assert_close(grad1(tape, after, x, EG_UNCONNECTED_NULL), want, 2, 0);
    /* an unbalanced end is harmless */
    eg_no_grad_end();
    eg_mul(x, y);
    assert_int_equal(eg_tape_n_records(tape), n + 2);
    eg_tape_free(tape);
}

static void test_accumulation(void **state) {
    (void)state;
    const double xv[4] = {-1.5, 0.0, 2.0, 10.0};
    eg_tensor *x = vec64(4, xv);
    eg_tape *tape = eg_tape_begin(false);
    eg_tape_watch(tape, x);
    eg_tensor *y = eg_add(eg_mul(x, x), x); /* x used three times */
    eg_tensor *g = grad1(tape, y, x, EG_UNCONNECTED_NULL);
    double want[4];
    for (int i = 0; i < 4; i++) want[i] = 2 * xv[i] + 1;
    assert_close(g, want, 4, 0);
    eg_tape_free(tape);

    /* a tensor reached by two paths through intermediates: y = a*b with a = 2x, b = x^2 */
    tape = eg_tape_begin(false);
    eg_tape_watch(tape, x);
    eg_tensor *a = eg_mul_scalar(x, 2.0), *b = eg_square(x);
    y = eg_sum(eg_add(eg_mul(a, b), a), 0, NULL, false); /* 2x^3 + 2x */
    for (int i = 0; i < 4; i++) want[i] = 6 * xv[i] * xv[i] + 2;
    assert_close(grad1(tape, y, x, EG_UNCONNECTED_NULL), want, 4, 1e-15);
    eg_tape_free(tape);
}

static void test_unconnected(void **state) {
    (void)state;
    eg_tensor *x = eg_ones(EG_DTYPE_F32, 2, (int64_t[]){2, 3});
    eg_tensor *unused = eg_ones(EG_DTYPE_F64, 1, (int64_t[]){5});
    eg_tape *tape = eg_tape_begin(true);
    eg_tape_watch(tape, x);
    eg_tape_watch(tape, unused);
    eg_tensor *y = eg_sum(eg_exp(x), 0, NULL, false);
    eg_tensor *sources[2] = {x, unused};
    eg_tensor *grads[2];
    assert_int_equal(eg_tape_gradient(tape, y, 2, sources, grads, EG_UNCONNECTED_NULL), EG_OK);
    assert_non_null(grads[0]);
    assert_null(grads[1]);
    assert_int_equal(eg_tape_gradient(tape, y, 2, sources, grads, EG_UNCONNECTED_ZERO), EG_OK);
    assert_non_null(grads[1]);
    assert_int_equal(eg_tensor_dtype(grads[1]), EG_DTYPE_F64);
    assert_int_equal(eg_tensor_n_dims(grads[1]), 1);
    assert_int_equal(eg_tensor_shape(grads[1])[0], 5);
    const double zeros[5] = {0};
    assert_close(grads[1], zeros, 5, 0);
    /* a target that does not depend on the tape at all */
    eg_tensor *constant = eg_ones(EG_DTYPE_F32, 0, NULL);
    assert_int_equal(eg_tape_gradient(tape, constant, 2, sources, grads, EG_UNCONNECTED_NULL),
                     EG_OK);
    assert_null(grads[0]);
    assert_null(grads[1]);
    eg_tape_free(tape);
}

static void test_output_gradient(void **state) {
    (void)state;
    const double xv[3] = {1, 2, 3}, upstream[3] = {1, -2, 0.5};
    eg_tensor *x = vec64(3, xv);
    eg_tape *tape = eg_tape_begin(true);
    eg_tape_watch(tape, x);
    eg_tensor *y = eg_mul(eg_mul_scalar(x, 3.0), x); /* 3x^2 */
    eg_tensor *source = x;
    eg_tensor *g = NULL;
    assert_int_equal(
        eg_tape_gradient_ex(tape, y, vec64(3, upstream), 1, &source, &g, EG_UNCONNECTED_NULL),
        EG_OK);
    double want[3];
    for (int i = 0; i < 3; i++) want[i] = 6 * xv[i] * upstream[i];
    assert_close(g, want, 3, 1e-15);
    /* NULL means ones */
    assert_int_equal(eg_tape_gradient_ex(tape, y, NULL, 1, &source, &g, EG_UNCONNECTED_NULL),
                     EG_OK);
    for (int i = 0; i < 3; i++) want[i] = 6 * xv[i];
    assert_close(g, want, 3, 1e-15);
    /* a wrong shape or dtype is refused */
    assert_int_equal(
        eg_tape_gradient_ex(tape, y, vec64(2, upstream), 1, &source, &g, EG_UNCONNECTED_NULL),
        EG_ERR_SHAPE);
    assert_null(g);
    expect_error(EG_ERR_SHAPE);
    assert_int_equal(eg_tape_gradient_ex(tape, y, eg_ones(EG_DTYPE_F32, 1, (int64_t[]){3}), 1,
                                         &source, &g, EG_UNCONNECTED_NULL),
                     EG_ERR_SHAPE);
    expect_error(EG_ERR_SHAPE);
    eg_tape_free(tape);
}

static void test_integer_target_rejected(void **state) {
    (void)state;
    eg_tensor *x = eg_ones(EG_DTYPE_F32, 1, (int64_t[]){3});
    eg_tape *tape = eg_tape_begin(false);
    eg_tape_watch(tape, x);
    eg_tensor *y = eg_cast(eg_mul_scalar(x, 2.5), EG_DTYPE_I32);
    assert_non_null(y);
    eg_tensor *g = (eg_tensor *)1;
    eg_tensor *source = x;
    assert_int_equal(eg_tape_gradient(tape, y, 1, &source, &g, EG_UNCONNECTED_NULL), EG_ERR_DTYPE);
    assert_null(g);
    assert_non_null(strstr(eg_last_error(), "i32"));
    expect_error(EG_ERR_DTYPE);
    /* the failed call did not use the tape up: integer -> float is not differentiable but the
     * float path still is */
    eg_tensor *z = eg_sum(eg_mul(x, x), 0, NULL, false);
    const double want[3] = {2, 2, 2};
    assert_close(grad1(tape, z, x, EG_UNCONNECTED_NULL), want, 3, 0);
    eg_tape_free(tape);
    /* NULL target / NULL tape */
    tape = eg_tape_begin(false);
    assert_int_equal(eg_tape_gradient(tape, NULL, 1, &source, &g, EG_UNCONNECTED_NULL),
                     EG_ERR_NULL_ARGUMENT);
    expect_error(EG_ERR_NULL_ARGUMENT);
    assert_int_equal(eg_tape_gradient(NULL, x, 1, &source, &g, EG_UNCONNECTED_NULL),
                     EG_ERR_NULL_ARGUMENT);
    expect_error(EG_ERR_NULL_ARGUMENT);
    eg_tape_free(tape);
}

static void test_gradient_through_views(void **state) {
    (void)state;
    double xv[6];
    for (int i = 0; i < 6; i++) xv[i] = i + 1;
    eg_tensor *x = mat64(2, 3, xv);
    const double cv[6] = {1, 10, 100, 1000, 10000, 100000};
    eg_tape *tape = eg_tape_begin(true);
    eg_tape_watch(tape, x);

    /* slice with a step: columns 0 and 2 */
    eg_tensor *s = eg_sum(eg_mul(eg_slice(x, 1, 0, 3, 2), eg_slice(x, 1, 0, 3, 2)), 0, NULL, false);
    const double want_s[6] = {2 * 1, 0, 2 * 3, 2 * 4, 0, 2 * 6};
    assert_close(grad1(tape, s, x, EG_UNCONNECTED_NULL), want_s, 6, 0);

    /* reshape: (2, 3) -> (3, 2), times a constant */
    eg_tensor *r =
        eg_sum(eg_mul(eg_reshape(x, 2, (int64_t[]){3, 2}), mat64(3, 2, cv)), 0, NULL, false);
    assert_close(grad1(tape, r, x, EG_UNCONNECTED_NULL), cv, 6, 0);

    /* transpose: (2, 3) -> (3, 2); the gradient is the constant transposed back */
    eg_tensor *t = eg_sum(eg_mul(eg_transpose(x, 0, 1), mat64(3, 2, cv)), 0, NULL, false);
    const double want_t[6] = {1, 100, 10000, 10, 1000, 100000};
    assert_close(grad1(tape, t, x, EG_UNCONNECTED_NULL), want_t, 6, 0);

    /* broadcast: a row (3,) to (4, 3) sums 4 copies; (2, 1) to (2, 5) sums 5 */
    eg_tensor *row = eg_slice(eg_reshape(x, 1, (int64_t[]){6}), 0, 0, 3, 1);
    eg_tensor *b = eg_sum(eg_broadcast_to(row, 2, (int64_t[]){4, 3}), 0, NULL, false);
    const double want_b[6] = {4, 4, 4, 0, 0, 0};
    assert_close(grad1(tape, b, x, EG_UNCONNECTED_NULL), want_b, 6, 0);
    eg_tensor *column = eg_slice(x, 1, 1, 2, 1); /* (2, 1) */
    eg_tensor *bc =
        eg_sum(eg_square(eg_broadcast_to(column, 2, (int64_t[]){2, 5})), 0, NULL, false);
    const double want_bc[6] = {0, 5 * 2 * 2, 0, 0, 5 * 2 * 5, 0};
    assert_close(grad1(tape, bc, x, EG_UNCONNECTED_NULL), want_bc, 6, 0);

    /* permute + squeeze/unsqueeze + contiguous chain */
    eg_tensor *chain = eg_contiguous(
        eg_squeeze(eg_permute(eg_unsqueeze(x, 0), (int[]){2, 0, 1}), 1)); /* (3, 2) = x^T */
    eg_tensor *p = eg_sum(eg_mul(chain, mat64(3, 2, cv)), 0, NULL, false);
    assert_close(grad1(tape, p, x, EG_UNCONNECTED_NULL), want_t, 6, 0);
    /* the gradient of a view source: d/d(slice) of sum(slice^2) */
    eg_tensor *sl = eg_slice(x, 0, 1, 2, 1);
    eg_tensor *q = eg_sum(eg_square(sl), 0, NULL, false);
    const double want_q[3] = {8, 10, 12};
    assert_close(grad1(tape, q, sl, EG_UNCONNECTED_NULL), want_q, 3, 0);
    eg_tape_free(tape);
}

/* A gradient succeeds even when an unrelated error from earlier is still pending, and that
 * earlier error stays the one reported (first error wins). */
static void test_gradient_with_stale_error(void **state) {
    (void)state;
    eg_tensor *x = eg_scalar(EG_DTYPE_F64, 3.0);
    assert_null(
        eg_add(eg_ones(EG_DTYPE_F32, 1, (int64_t[]){2}), eg_ones(EG_DTYPE_F32, 1, (int64_t[]){3})));
    assert_int_equal(eg_last_status(), EG_ERR_SHAPE);
    eg_tape *tape = eg_tape_begin(false);
    eg_tape_watch(tape, x);
    eg_tensor *y = eg_sin(eg_mul(x, x));
    assert_true(fabs(eg_item(grad1(tape, y, x, EG_UNCONNECTED_NULL)) - 6 * cos(9.0)) < 1e-14);
    eg_tape_free(tape);
    assert_int_equal(eg_last_status(), EG_ERR_SHAPE);
    assert_non_null(strstr(eg_last_error(), "add"));
    eg_clear_error();
}

/* Returned gradients are ordinary scope-owned tensors: releasing each one (even when the tape
 * could hand out one tensor for several sources) must be safe. */
static void test_gradient_ownership(void **state) {
    (void)state;
    const double av[2] = {1, 2};
    eg_tensor *a = vec64(2, av), *b = vec64(2, av);
    eg_tape *tape = eg_tape_begin(true);
    eg_tape_watch(tape, a);
    eg_tape_watch(tape, b);
    eg_tensor *y = eg_add(a, b); /* both gradients are the upstream gradient itself */
    eg_tensor *sources[3] = {a, b, y};
    eg_tensor *grads[3];
    eg_scope_begin();
    assert_int_equal(eg_tape_gradient(tape, y, 3, sources, grads, EG_UNCONNECTED_NULL), EG_OK);
    const double ones[2] = {1, 1};
    for (int i = 0; i < 3; i++) assert_close(grads[i], ones, 2, 0);
    for (int i = 0; i < 3; i++) eg_release(grads[i]);
    assert_int_equal(eg_scope_end(), EG_OK);
    /* the same, kept out of the scope and released by the caller */
    eg_scope_begin();
    assert_int_equal(eg_tape_gradient(tape, y, 3, sources, grads, EG_UNCONNECTED_NULL), EG_OK);
    for (int i = 0; i < 3; i++) eg_scope_keep(grads[i]);
    assert_int_equal(eg_scope_end(), EG_OK);
    for (int i = 0; i < 3; i++) assert_close(grads[i], ones, 2, 0);
    for (int i = 0; i < 3; i++) eg_release(grads[i]);
    /* with an upstream gradient that the caller owns */
    const double up[2] = {3, 4};
    eg_scope_begin();
    eg_tensor *upstream = vec64(2, up);
    assert_int_equal(eg_tape_gradient_ex(tape, y, upstream, 3, sources, grads, EG_UNCONNECTED_NULL),
                     EG_OK);
    for (int i = 0; i < 3; i++) assert_close(grads[i], up, 2, 0);
    eg_release(grads[2]);
    eg_release(grads[0]);
    assert_close(upstream, up, 2, 0);
    assert_int_equal(eg_scope_end(), EG_OK);
    /* the same sources twice */
    eg_tensor *twice[2] = {a, a};
    assert_int_equal(eg_tape_gradient(tape, y, 2, twice, grads, EG_UNCONNECTED_NULL), EG_OK);
    eg_release(grads[0]);
    eg_release(grads[1]);
    eg_tape_free(tape);
}

/* Out of memory in the middle of a forward pass or a gradient is an error, never a crash or a
 * leak: raise a limit step by step until the whole step fits. */
static void test_gradient_out_of_memory(void **state) {
    (void)state;
    const size_t mib = (size_t)1 << 20;
    eg_tensor *w = eg_variable(eg_full(EG_DTYPE_F32, 2, (int64_t[]){512, 512}, 0.001), "w");
    eg_memory_stats stats;
    eg_memory_stats_get(NULL, &stats);
    size_t baseline = stats.bytes_in_use;
    int failures = 0;
    bool done = false;
    for (size_t limit = 2 * mib; limit <= 64 * mib && !done; limit += mib) {
        assert_int_equal(eg_memory_trim(NULL), EG_OK);
        eg_scope_begin();
        eg_tensor *x = eg_ones(EG_DTYPE_F32, 2, (int64_t[]){512, 512});
        assert_non_null(x);
        if (eg_memory_set_limit(NULL, limit) != EG_OK) { /* below what w and x hold already */
            assert_int_equal(eg_last_status(), EG_ERR_INVALID_ARGUMENT);
            eg_clear_error();
            assert_int_equal(eg_scope_end(), EG_OK);
            continue;
        }
        eg_tape *tape = eg_tape_begin(false);
        eg_tensor *loss = eg_sum(eg_tanh(eg_matmul(x, w)), 0, NULL, false);
        eg_tensor *g = NULL;
        eg_tensor *source = w;
        eg_status status = loss ? eg_tape_gradient(tape, loss, 1, &source, &g, EG_UNCONNECTED_NULL)
                                : eg_last_status();
        if (status == EG_OK) {
            assert_non_null(g);
            /* d/dw sum(tanh(x w)) = x^T (1 - tanh^2): every x is 1, so each entry is 512 (1 -
             * tanh(0.512)^2) */
            int64_t index[2] = {3, 7};
            double t = tanh(0.512);
            assert_true(fabs(eg_tensor_get(g, index) - 512 * (1 - t * t)) < 1e-2);
            done = true;
        } else {
            failures++;
            assert_int_equal(status, EG_ERR_OUT_OF_MEMORY);
            assert_null(g);
            assert_non_null(strstr(eg_last_error(), "out of memory"));
            eg_clear_error();
        }
        eg_tape_free(tape);
        assert_int_equal(eg_scope_end(), EG_OK);
        assert_int_equal(eg_memory_set_limit(NULL, 0), EG_OK);
        eg_memory_stats_get(NULL, &stats);
        assert_int_equal(stats.bytes_in_use, baseline); /* nothing leaked by the failure */
    }
    assert_true(done);
    assert_true(failures > 0);
    eg_release(w);
}

/* ---- variables -------------------------------------------------------------------------- */

static void test_variable_updates(void **state) {
    (void)state;
    const double init[3] = {1, 2, 3};
    eg_tensor *v = eg_variable(vec64(3, init), "weights");
    assert_non_null(v);
    assert_close(v, init, 3, 0);
    const double d[3] = {0.5, -1, 4};
    assert_int_equal(eg_assign_add(v, vec64(3, d)), EG_OK);
    const double after_add[3] = {1.5, 1, 7};
    assert_close(v, after_add, 3, 0);
    assert_int_equal(eg_assign_sub(v, eg_scalar(EG_DTYPE_F64, 1.0)), EG_OK); /* broadcast */
    const double after_sub[3] = {0.5, 0, 6};
    assert_close(v, after_sub, 3, 0);
    assert_int_equal(eg_assign(v, vec64(3, d)), EG_OK);
    assert_close(v, d, 3, 0);
    assert_int_equal(eg_assign(v, eg_scalar(EG_DTYPE_F64, 9.0)), EG_OK);
    const double nines[3] = {9, 9, 9};
    assert_close(v, nines, 3, 0);
    /* assigning from a strided view */
    eg_tensor *source = eg_slice(eg_arange(0, 9, 1, EG_DTYPE_F64), 0, 1, 9, 3); /* 1, 4, 7 */
    assert_int_equal(eg_assign(v, source), EG_OK);
    const double strided[3] = {1, 4, 7};
    assert_close(v, strided, 3, 0);

    /* assigning a view of the variable itself (the value overlaps the destination) */
    const double square[4] = {1, 2, 3, 4}, square_t[4] = {1, 3, 2, 4};
    eg_tensor *m = eg_variable(mat64(2, 2, square), "m");
    assert_int_equal(eg_assign(m, eg_transpose(m, 0, 1)), EG_OK);
    assert_close(m, square_t, 4, 0);
    assert_int_equal(eg_assign(m, eg_slice(m, 0, 1, 2, 1)), EG_OK); /* row 1 into both rows */
    const double rows[4] = {2, 4, 2, 4};
    assert_close(m, rows, 4, 0);
    assert_int_equal(eg_assign_add(m, eg_transpose(m, 0, 1)), EG_OK);
    const double sums[4] = {4, 6, 6, 8};
    assert_close(m, sums, 4, 0);
    eg_release(m);

    /* errors leave the value alone */
    assert_int_equal(eg_assign(v, vec64(2, d)), EG_ERR_SHAPE);
    assert_non_null(strstr(eg_last_error(), "assign"));
    expect_error(EG_ERR_SHAPE);
    assert_int_equal(eg_assign_add(v, eg_ones(EG_DTYPE_F64, 2, (int64_t[]){2, 3})), EG_ERR_SHAPE);
    assert_non_null(strstr(eg_last_error(), "(2, 3)"));
    expect_error(EG_ERR_SHAPE);
    assert_int_equal(eg_assign_sub(v, eg_ones(EG_DTYPE_F32, 1, (int64_t[]){3})), EG_ERR_DTYPE);
    expect_error(EG_ERR_DTYPE);
    assert_int_equal(eg_assign(eg_ones(EG_DTYPE_F64, 1, (int64_t[]){3}), v),
                     EG_ERR_INVALID_ARGUMENT);
    expect_error(EG_ERR_INVALID_ARGUMENT);
    assert_int_equal(eg_assign(v, NULL), EG_ERR_NULL_ARGUMENT);
    expect_error(EG_ERR_NULL_ARGUMENT);
    assert_close(v, strided, 3, 0);

    /* assignments are not recorded, and a tape sees the new value afterwards */
    eg_tape *tape = eg_tape_begin(true);
    eg_tensor *y = eg_sum(eg_square(v), 0, NULL, false);
    size_t n = eg_tape_n_records(tape);
    assert_int_equal(eg_assign_add(v, vec64(3, d)), EG_OK);
    assert_int_equal(eg_tape_n_records(tape), n);
    (void)y;
    eg_tape_free(tape);
    eg_release(v);
}

static void test_variable_outlives_scope(void **state) {
    (void)state;
    eg_tensor *v;
    eg_scope_begin();
    v = eg_variable(eg_full(EG_DTYPE_F32, 2, (int64_t[]){2, 2}, 0.25), "w");
    eg_tensor *doubled = eg_mul_scalar(v, 2.0);
    assert_true(eg_item(eg_sum(doubled, 0, NULL, false)) == 2.0);
    assert_int_equal(eg_scope_end(), EG_OK);
    /* still alive and usable */
    assert_true(eg_is_variable(v));
    assert_string_equal(eg_variable_name(v), "w");
    eg_scope_begin();
    assert_int_equal(eg_assign_add(v, eg_scalar(EG_DTYPE_F32, 1.0)), EG_OK);
    assert_true(eg_item(eg_sum(v, 0, NULL, false)) == 5.0);
    assert_int_equal(eg_scope_end(), EG_OK);
    eg_release(v);
}

/* ---- a 2-layer MLP against a hand-written backward pass -------------------------------- */

enum { B = 4, D = 5, H = 6, C = 3 };

static void fill(double *p, int n, double scale, int seed) {
    for (int i = 0; i < n; i++) p[i] = scale * sin(1.7 * (i + 1) + 0.37 * seed);
}

static void test_mlp_gradients(void **state) {
    (void)state;
    double x[B * D], w1[D * H], b1[H], w2[H * C], b2[C];
    fill(x, B * D, 1.0, 1);
    fill(w1, D * H, 0.6, 2);
    fill(b1, H, 0.1, 3);
    fill(w2, H * C, 0.5, 4);
    fill(b2, C, 0.2, 5);
    const int64_t labels[B] = {0, 2, 1, 2};

    /* forward and backward by hand */
    double z[B * H], h[B * H], logits[B * C], loss = 0, dlogits[B * C];
    for (int i = 0; i < B; i++)
        for (int j = 0; j < H; j++) {
            double s = b1[j];
            for (int k = 0; k < D; k++) s += x[i * D + k] * w1[k * H + j];
            z[i * H + j] = s;
            h[i * H + j] = s > 0 ? s : 0;
        }
    for (int i = 0; i < B; i++) {
        double m = -INFINITY, sum = 0;
        for (int j = 0; j < C; j++) {
            double s = b2[j];
            for (int k = 0; k < H; k++) s += h[i * H + k] * w2[k * C + j];
            logits[i * C + j] = s;
            m = s > m ? s : m;
        }
        for (int j = 0; j < C; j++) sum += exp(logits[i * C + j] - m);
        loss += (log(sum) + m - logits[i * C + labels[i]]) / B;
        for (int j = 0; j < C; j++)
            dlogits[i * C + j] = (exp(logits[i * C + j] - m) / sum - (j == labels[i])) / B;
    }
    double dw2[H * C] = {0}, db2[C] = {0}, dh[B * H] = {0}, dw1[D * H] = {0}, db1[H] = {0};
    for (int i = 0; i < B; i++)
        for (int j = 0; j < C; j++) {
            db2[j] += dlogits[i * C + j];
            for (int k = 0; k < H; k++) {
                dw2[k * C + j] += h[i * H + k] * dlogits[i * C + j];
                dh[i * H + k] += dlogits[i * C + j] * w2[k * C + j];
            }
        }
    double dx[B * D] = {0};
    for (int i = 0; i < B; i++)
        for (int k = 0; k < H; k++) {
            double dz = z[i * H + k] > 0 ? dh[i * H + k] : 0;
            db1[k] += dz;
            for (int d = 0; d < D; d++) {
                dw1[d * H + k] += x[i * D + d] * dz;
                dx[i * D + d] += dz * w1[d * H + k];
            }
        }

    /* the same with Eagle */
    eg_tensor *X = mat64(B, D, x);
    eg_tensor *W1 = eg_variable(mat64(D, H, w1), "w1"), *B1 = eg_variable(vec64(H, b1), "b1");
    eg_tensor *W2 = eg_variable(mat64(H, C, w2), "w2"), *B2 = eg_variable(vec64(C, b2), "b2");
    int64_t n_labels = B;
    eg_tensor *Y = eg_tensor_from_data(labels, EG_DTYPE_I64, 1, &n_labels);
    eg_tape *tape = eg_tape_begin(false);
    eg_tensor *hidden = eg_relu(eg_add(eg_matmul(X, W1), B1));
    eg_tensor *out = eg_add(eg_matmul(hidden, W2), B2);
    eg_tensor *L = eg_mean(eg_sparse_softmax_cross_entropy(out, Y), 0, NULL, false);
    assert_non_null(L);
    assert_true(fabs(eg_item(L) - loss) < 1e-13);
    eg_tensor *sources[5] = {W1, B1, W2, B2, X};
    eg_tensor *grads[5];
    assert_int_equal(eg_tape_gradient(tape, L, 5, sources, grads, EG_UNCONNECTED_NULL), EG_OK);
    assert_close(grads[0], dw1, D * H, 1e-13);
    assert_close(grads[1], db1, H, 1e-13);
    assert_close(grads[2], dw2, H * C, 1e-13);
    assert_close(grads[3], db2, C, 1e-13);
    /* X was not watched, but it is an input of recorded ops (with W1), and asked for as a
     * source: it gets its gradient too (TensorFlow would give None here) */
    assert_close(grads[4], dx, B * D, 1e-13);
    for (int i = 0; i < 5; i++) assert_int_equal(eg_tensor_dtype(grads[i]), EG_DTYPE_F64);
    eg_tape_free(tape);
    eg_release(W1);
    eg_release(B1);
    eg_release(W2);
    eg_release(B2);
}

/* ---- steady state: the caching allocator serves a training loop ------------------------- */

typedef struct model {
    eg_tensor *params[4]; /* w1 (D, H), b1 (H), w2 (H, C), b2 (C): f32 variables */
} model;

static double train_step(model *m, const eg_tensor *x, const eg_tensor *y, double lr) {
    eg_scope_begin();
    eg_tape *tape = eg_tape_begin(false);
    eg_tensor *hidden = eg_relu(eg_add(eg_matmul(x, m->params[0]), m->params[1]));
    eg_tensor *logits = eg_add(eg_matmul(hidden, m->params[2]), m->params[3]);
    eg_tensor *loss = eg_mean(eg_sparse_softmax_cross_entropy(logits, y), 0, NULL, false);
    assert_non_null(loss);
    eg_tensor *grads[4];
    assert_int_equal(eg_tape_gradient(tape, loss, 4, m->params, grads, EG_UNCONNECTED_ZERO), EG_OK);
    for (int i = 0; i < 4; i++)
        assert_int_equal(eg_assign_sub(m->params[i], eg_mul_scalar(grads[i], lr)), EG_OK);
    double value = eg_item(loss);
    eg_tape_free(tape);
    assert_int_equal(eg_scope_end(), EG_OK);
    return value;
}

static void test_steady_state_no_system_allocations(void **state) {
    (void)state;
    enum { BATCH = 64, IN = 32, HIDDEN = 48, CLASSES = 10 };
    eg_generator *g = eg_generator_new(11);
    model m;
    m.params[0] =
        eg_variable(eg_random_normal(g, EG_DTYPE_F32, 2, (int64_t[]){IN, HIDDEN}, 0, 0.2), "w1");
    m.params[1] = eg_variable(eg_zeros(EG_DTYPE_F32, 1, (int64_t[]){HIDDEN}), "b1");
    m.params[2] = eg_variable(
        eg_random_normal(g, EG_DTYPE_F32, 2, (int64_t[]){HIDDEN, CLASSES}, 0, 0.2), "w2");
    m.params[3] = eg_variable(eg_zeros(EG_DTYPE_F32, 1, (int64_t[]){CLASSES}), "b2");
    eg_tensor *x = eg_random_normal(g, EG_DTYPE_F32, 2, (int64_t[]){BATCH, IN}, 0, 1);
    int64_t labels[BATCH];
    for (int i = 0; i < BATCH; i++) labels[i] = (i * 7) % CLASSES;
    eg_tensor *y = eg_tensor_from_data(labels, EG_DTYPE_I64, 1, (int64_t[]){BATCH});
    eg_generator_free(g);

    double first = train_step(&m, x, y, 0.5);
    train_step(&m, x, y, 0.5);
    eg_memory_stats before, after;
    assert_int_equal(eg_memory_stats_get(NULL, &before), EG_OK);
    double last = first;
    for (int step = 0; step < 100; step++) {
        last = train_step(&m, x, y, 0.5);
        eg_memory_stats now;
        eg_memory_stats_get(NULL, &now);
        assert_int_equal(now.bytes_in_use, before.bytes_in_use); /* nothing leaks per step */
    }
    assert_int_equal(eg_memory_stats_get(NULL, &after), EG_OK);
    if (after.n_system_allocs != before.n_system_allocs)
        print_error("system allocations during the loop: %llu\n",
                    (unsigned long long)(after.n_system_allocs - before.n_system_allocs));
    if (strcmp(eg_memory_allocator_name(NULL), "caching") == 0) {
        assert_int_equal(after.n_system_allocs, before.n_system_allocs);
        assert_true(after.n_cache_hits > before.n_cache_hits);
    }
    assert_true(after.n_allocs > before.n_allocs + 100);
    /* and it learns: the loss went down */
    assert_true(last < first * 0.5);
    for (int i = 0; i < 4; i++) eg_release(m.params[i]);
}

/* eg_tape_gradients takes a model's variables as they come (no cast) and sizes the array. */
static void test_gradients_sized_by_the_library(void **state) {
    (void)state;
    eg_manual_seed(4);
    eg_model *net = eg_sequential_new("sized");
    assert_int_equal(eg_sequential_add(net, eg_dense_new(5, EG_ACTIVATION_RELU)), EG_OK);
    assert_int_equal(eg_sequential_add(net, eg_dense_new(2, EG_ACTIVATION_NONE)), EG_OK);
    assert_int_equal(eg_model_build(net, 2, (int64_t[]){-1, 3}), EG_OK);
    int n;
    eg_tensor *const *vars = eg_model_trainable_variables(net, &n);
    eg_tensor *x = eg_random_normal(NULL, EG_DTYPE_F32, 2, (int64_t[]){4, 3}, 0, 1);
    eg_tape *tape = eg_tape_begin(true);
    eg_tensor *loss = eg_sum(eg_square(eg_model_call(net, x, true)), 0, NULL, false);
    eg_tensor **sized = eg_tape_gradients(tape, loss, n, vars, EG_UNCONNECTED_ZERO);
    assert_non_null(sized);
    eg_tensor *fixed[4];
    assert_int_equal(n, 4);
    assert_int_equal(eg_tape_gradient(tape, loss, n, vars, fixed, EG_UNCONNECTED_ZERO), EG_OK);
    for (int i = 0; i < n; i++) {
        float a[16], b[16];
        size_t bytes = (size_t)eg_tensor_n_elems(vars[i]) * sizeof(float);
        assert_true(bytes <= sizeof a);
        assert_int_equal(eg_tensor_copy_to_host(sized[i], a, bytes), EG_OK);
        assert_int_equal(eg_tensor_copy_to_host(fixed[i], b, bytes), EG_OK);
        assert_memory_equal(a, b, bytes);
    }
    eg_gradients_free(sized, n);
    eg_tape_free(tape);
    /* a second gradient of a non-persistent tape: NULL with the tape's error */
    tape = eg_tape_begin(false);
    eg_tensor *again = eg_sum(eg_model_call(net, x, true), 0, NULL, false);
    eg_gradients_free(eg_tape_gradients(tape, again, n, vars, EG_UNCONNECTED_ZERO), n);
    assert_null(eg_tape_gradients(tape, again, n, vars, EG_UNCONNECTED_ZERO));
    assert_int_equal(eg_last_status(), EG_ERR_STATE);
    eg_clear_error();
    eg_tape_free(tape);
    eg_model_free(net);
}

int main(int argc, char **argv) {
    if (argc > 1) cmocka_set_test_filter(argv[1]); /* e.g. "test_print" or "test_*" */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_watch, fresh_scope_setup, strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_variables_watched, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_several_sources, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_persistent, fresh_scope_setup, strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_non_persistent_tape_stops_after_its_gradient,
                                        fresh_scope_setup, strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_target_from_before_the_tape_rejected,
                                        fresh_scope_setup, strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_watching_an_integer_tensor_rejected, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_nested_second_derivative, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_no_grad, fresh_scope_setup, strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_accumulation, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_unconnected, fresh_scope_setup, strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_output_gradient, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_integer_target_rejected, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_gradient_through_views, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_gradient_ownership, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_gradient_with_stale_error, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_gradient_out_of_memory, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_variable_updates, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_variable_outlives_scope, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_mlp_gradients, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_gradients_sized_by_the_library, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_steady_state_no_system_allocations, fresh_scope_setup,
                                        strict_scope_teardown),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    eg_shutdown();
    return failed;
}
