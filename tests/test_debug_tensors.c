/* Debug tracking of tensors (eg_debug_track_tensors, EG_DEBUG_TENSORS=1): a released tensor's
 * header is kept aside and marked, so that an op or a read given it, or a second release, is an
 * error naming where it was made and where it was released, in eager and lazy mode; with the
 * switch off headers are reused at once, as before. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "eagle.h"
#include "test_util.h"

static const int64_t shape[2] = {2, 3};

/* "test_debug_tensors.c:<line>" into buf. */
static const char *here(char *buf, size_t size, int line) {
    snprintf(buf, size, "test_debug_tensors.c:%d", line);
    return buf;
}

/* The pending error is `problem`, by `what`, and names both sites; then it is cleared. */
static void expect_released_error(const char *what, const char *problem, int made_line,
                                  const char *released_by, int released_line) {
    char made[96], released[160], site[64];
    snprintf(made, sizeof made, "made at %s", here(site, sizeof site, made_line));
    snprintf(released, sizeof released, "released %s at %s", released_by,
             here(site, sizeof site, released_line));
    expect_error_containing(EG_ERR_STATE, what, problem, made, released, NULL);
}

/* Each case in a scope of its own, with tracking on. */
static int tracking_on(void **state) {
    eg_debug_track_tensors(true);
    return fresh_scope_setup(state);
}

static int tracking_off(void **state) {
    int failed = strict_scope_teardown(state);
    eg_debug_track_tensors(false);
    return failed;
}

static void test_use_after_release(void **state) {
    (void)state;
    eg_tensor *live = eg_ones(EG_DTYPE_F32, 2, shape);
    int made = __LINE__ + 1;
    eg_tensor *x = eg_full(EG_DTYPE_F32, 2, shape, 2.0);
    assert_true(eg_item(eg_sum(x, 0, NULL, false)) == 12.0);
    int released = __LINE__ + 1;
    eg_release(x);
    assert_null(eg_add(x, live));
    expect_released_error("add (input 0)", "tensor used after release", made, "by eg_release",
                          released);
    assert_null(eg_mul(live, x)); /* the check sees every input */
    expect_released_error("mul (input 1)", "tensor used after release", made, "by eg_release",
                          released);
    /* reads and other public calls too */
    assert_null(eg_tensor_data(x));
    expect_released_error("tensor used after release", "", made, "by eg_release", released);
    assert_true(isnan(eg_item(x)));
    expect_released_error("tensor used after release", "", made, "by eg_release", released);
    assert_null(eg_full_like(x, 1.0));
    expect_released_error("full_like (argument 0)", "tensor used after release", made,
                          "by eg_release", released);
    assert_ptr_equal(eg_retain(x), x);
    expect_released_error("retain", "tensor used after release", made, "by eg_release", released);
    eg_tape *tape = eg_tape_begin(false);
    assert_int_equal(eg_tape_watch(tape, x), EG_ERR_STATE);
    expect_released_error("tape_watch", "tensor used after release", made, "by eg_release",
                          released);
    eg_tape_free(tape);
    /* and lazy mode, where the op is only recorded */
    eg_lazy_begin();
    eg_tensor *pending = eg_exp(live);
    assert_null(eg_add(pending, x));
    assert_int_equal(eg_lazy_end(), EG_OK);
    expect_released_error("add (input 1)", "tensor used after release", made, "by eg_release",
                          released);
    assert_false(eg_tensor_is_realized(pending));
    eg_release(live);
}

static void test_use_after_scope_end(void **state) {
    (void)state;
    eg_scope_begin();
    int made = __LINE__ + 1;
    eg_tensor *x = eg_zeros(EG_DTYPE_F32, 2, shape);
    eg_tensor *y = eg_scope_keep(eg_exp(x)); /* handed out: lives on */
    int ended = __LINE__ + 1;
    assert_int_equal(eg_scope_end(), EG_OK);
    assert_true(eg_item(eg_sum(y, 0, NULL, false)) == 6.0);
    assert_null(eg_exp(x));
    expect_released_error("exp (input 0)", "tensor used after release", made, "by eg_scope_end",
                          ended);
    eg_release(y);
}

static void test_double_release(void **state) {
    (void)state;
    int made = __LINE__ + 1;
    eg_tensor *x = eg_ones(EG_DTYPE_F64, 2, shape);
    int released = __LINE__ + 1;
    eg_release(x);
    eg_release(x);
    expect_released_error("release", "tensor released twice", made, "by eg_release", released);
    eg_release(x); /* still an error, still the first release named */
    expect_released_error("release", "tensor released twice", made, "by eg_release", released);
    /* a release after the scope released it */
    eg_scope_begin();
    made = __LINE__ + 1;
    eg_tensor *y = eg_ones(EG_DTYPE_F32, 1, shape);
    int ended = __LINE__ + 1;
    eg_scope_end();
    eg_release(y);
    expect_released_error("release", "tensor released twice", made, "by eg_scope_end", ended);
}

/* A tensor whose storage a view still holds: the view works on, the released tensor does not,
 * and neither is in the live list any more once both are gone. */
static void test_released_base_of_a_live_view(void **state) {
    (void)state;
    size_t live_before = eg_debug_live_tensors(NULL);
    int made = __LINE__ + 1;
    eg_tensor *base = eg_arange(0, 6, 1, EG_DTYPE_F32);
    eg_tensor *view = eg_reshape(base, 2, shape);
    assert_true(eg_tensor_shares_storage(base, view));
    int released = __LINE__ + 1;
    eg_release(base);
    assert_int_equal(eg_debug_live_tensors(NULL), live_before + 1);
    assert_true(eg_tensor_get(view, (int64_t[]){1, 2}) == 5.0);
    assert_null(eg_neg(base));
    expect_released_error("neg (input 0)", "tensor used after release", made, "by eg_release",
                          released);
    eg_release(view);
    assert_int_equal(eg_debug_live_tensors(NULL), live_before);
    assert_null(eg_neg(base)); /* still known after its storage went */
    expect_released_error("neg (input 0)", "tensor used after release", made, "by eg_release",
                          released);
}

/* Off, a released header is the next tensor's at once (the header cache), as it always was; on,
 * it is never handed out again while kept aside. */
static void test_headers_are_reused_only_while_off(void **state) {
    (void)state;
    eg_debug_track_tensors(false);
    eg_tensor *first = eg_ones(EG_DTYPE_F32, 2, shape);
    eg_release(first);
    eg_tensor *second = eg_ones(EG_DTYPE_F32, 2, shape);
    assert_ptr_equal(second, first);
    assert_true(eg_item(eg_sum(second, 0, NULL, false)) == 6.0);
    eg_release(second);
    assert_int_equal(eg_last_status(), EG_OK);

    eg_debug_track_tensors(true);
    first = eg_ones(EG_DTYPE_F32, 2, shape);
    eg_release(first);
    for (int i = 0; i < 100; i++) {
        second = eg_ones(EG_DTYPE_F32, 2, shape);
        assert_ptr_not_equal(second, first);
        eg_release(second);
    }
    assert_null(eg_relu(first));
    expect_error_containing(EG_ERR_STATE, "tensor used after release", NULL);
}

int main(int argc, char **argv) {
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_use_after_release, tracking_on, tracking_off),
        cmocka_unit_test_setup_teardown(test_use_after_scope_end, tracking_on, tracking_off),
        cmocka_unit_test_setup_teardown(test_double_release, tracking_on, tracking_off),
        cmocka_unit_test_setup_teardown(test_released_base_of_a_live_view, tracking_on,
                                        tracking_off),
        cmocka_unit_test_setup_teardown(test_headers_are_reused_only_while_off, tracking_on,
                                        tracking_off),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    eg_shutdown();
    return failed;
}
