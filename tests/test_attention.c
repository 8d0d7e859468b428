/* The fused scaled dot-product attention beyond the op table: its memory at a long sequence
 * against the score matrix it never makes, agreement with the materialized computation (values
 * and gradients, masks, causal), thread-count independence, and errors. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "test_util.h"

static eg_tensor *uniform4(int64_t b, int64_t n, int64_t t, int64_t d, uint64_t seed) {
    int64_t shape[4] = {b, n, t, d};
    eg_tensor *x = uniform_tensor(4, shape, seed);
    assert_non_null(x);
    return x;
}

/* softmax(scale q k^T + mask) v with the scores materialized: the unfused reference. */
static eg_tensor *materialized(const eg_tensor *q, const eg_tensor *k, const eg_tensor *v,
                               const eg_tensor *visible) {
    double scale = 1.0 / sqrt((double)eg_tensor_shape(q)[3]);
    eg_tensor *s = eg_mul_scalar(eg_matmul_ex(q, k, false, true), scale);
    eg_tensor *hidden = eg_full(EG_DTYPE_F32, 0, NULL, -1e30);
    eg_tensor *p = eg_softmax(eg_where(visible, s, hidden), -1);
    return eg_matmul(p, v);
}

/* Causal with padded keys, 200 steps (several blocks): outputs and gradients as materialized. */
static void test_matches_the_materialized_attention(void **state) {
    (void)state;
    const int64_t b = 2, n = 3, t = 200, d = 16;
    eg_tensor *q = uniform4(b, n, t, d, 1), *k = uniform4(b, n, t, d, 2);
    eg_tensor *v = uniform4(b, n, t, d, 3), *g = uniform4(b, n, t, d, 4);
    bool keys[2 * 200];
    for (int i = 0; i < 2 * 200; i++) keys[i] = i < 200 ? true : (i - 200) < 150; /* padding */
    eg_tensor *mask = eg_tensor_from_data(keys, EG_DTYPE_BOOL, 2, (const int64_t[]){b, t});
    /* visible (B, 1, T, T): j <= i and the key is not padding */
    eg_tensor *rows =
        eg_reshape(eg_arange(0, (double)t, 1, EG_DTYPE_F32), 2, (const int64_t[]){t, 1});
    eg_tensor *causal = eg_less_equal(eg_arange(0, (double)t, 1, EG_DTYPE_F32), rows);
    eg_tensor *key4 = eg_reshape(mask, 4, (const int64_t[]){b, 1, 1, t});
    eg_tensor *visible =
        eg_greater(eg_mul(eg_cast(causal, EG_DTYPE_F32), eg_cast(key4, EG_DTYPE_F32)),
                   eg_full(EG_DTYPE_F32, 0, NULL, 0.5));
    eg_tensor *sources[3] = {q, k, v}, *fused_grads[3] = {0}, *ref_grads[3] = {0};
    eg_tape *tape = eg_tape_begin(true);
    for (int i = 0; i < 3; i++) eg_tape_watch(tape, sources[i]);
    eg_tensor *fused = eg_scaled_dot_product_attention(q, k, v, mask, true, 0);
    eg_tensor *ref = materialized(q, k, v, visible);
    assert_non_null(fused);
    assert_all_close(fused, ref, 1e-5);
    eg_tensor *fused_loss = eg_sum(eg_mul(fused, g), 0, NULL, false);
    eg_tensor *ref_loss = eg_sum(eg_mul(ref, g), 0, NULL, false);
    assert_int_equal(
        eg_tape_gradient(tape, fused_loss, 3, sources, fused_grads, EG_UNCONNECTED_ZERO), EG_OK);
    assert_int_equal(eg_tape_gradient(tape, ref_loss, 3, sources, ref_grads, EG_UNCONNECTED_ZERO),
                     EG_OK);
    eg_tape_free(tape);
    for (int i = 0; i < 3; i++) assert_all_close(fused_grads[i], ref_grads[i], 1e-4);
}

/* Memory at T = 4096 (one head of 64): what the forward and backward allocate beyond their inputs,
 * against the (T, T) f32 score matrix a materialized attention holds (64 MiB). */
static void test_memory_grows_linearly(void **state) {
    (void)state;
    const int64_t t = 4096, d = 64;
    eg_tensor *q = uniform4(1, 1, t, d, 5), *k = uniform4(1, 1, t, d, 6),
              *v = uniform4(1, 1, t, d, 7);
    eg_tensor *sources[3] = {q, k, v}, *grads[3] = {0};
    eg_memory_stats before, after;
    assert_int_equal(eg_memory_stats_get(eg_device_cpu(), &before), EG_OK);
    eg_memory_reset_peak(eg_device_cpu());
    eg_tape *tape = eg_tape_begin(false);
    for (int i = 0; i < 3; i++) eg_tape_watch(tape, sources[i]);
    eg_tensor *y = eg_scaled_dot_product_attention(q, k, v, NULL, true, 0);
    eg_tensor *loss = eg_sum(y, 0, NULL, false);
    assert_int_equal(eg_tape_gradient(tape, loss, 3, sources, grads, EG_UNCONNECTED_ZERO), EG_OK);
    eg_tape_free(tape);
    assert_int_equal(eg_memory_stats_get(eg_device_cpu(), &after), EG_OK);
    double scores = (double)t * (double)t * sizeof(float);
    double used = (double)after.peak_bytes_in_use - (double)before.bytes_in_use;
    fprintf(stderr,
            "attention T=%lld D=%lld forward+backward: %.2f MiB beyond the inputs, %.1f%% of "
            "the %.0f MiB score matrix\n",
            (long long)t, (long long)d, used / (1 << 20), 100 * used / scores, scores / (1 << 20));
    assert_true(used <= scores / 8);
    /* the gradient of the last value only reaches... every key before it (causal) */
    assert_true(eg_item(eg_sum(eg_abs(grads[1]), 0, NULL, false)) > 0);
}

/* The result's bits do not depend on the thread count (the tasks' blocks are fixed). */
static void test_same_bits_at_any_thread_count(void **state) {
    (void)state;
    eg_tensor *q = uniform4(2, 2, 130, 8, 8), *k = uniform4(2, 2, 97, 8, 9);
    eg_tensor *v = uniform4(2, 2, 97, 8, 10);
    int threads = eg_get_num_threads();
    eg_tensor *results[2];
    for (int run = 0; run < 2; run++) {
        assert_int_equal(eg_set_num_threads(run ? 2 : 1), EG_OK);
        results[run] = eg_contiguous(eg_scaled_dot_product_attention(q, k, v, NULL, false, 0.3));
        assert_non_null(results[run]);
    }
    assert_int_equal(eg_set_num_threads(threads), EG_OK);
    assert_memory_equal(eg_tensor_data(results[0]), eg_tensor_data(results[1]),
                        (size_t)eg_tensor_n_elems(results[0]) * sizeof(float));
}

static void test_bad_input_gets_clear_errors(void **state) {
    (void)state;
    eg_tensor *q = uniform4(1, 2, 3, 4, 1), *k = uniform4(1, 2, 5, 4, 2),
              *v = uniform4(1, 2, 5, 3, 3);
    int64_t three[3] = {2, 3, 4};
    assert_null(eg_scaled_dot_product_attention(uniform_tensor(3, three, 4), k, v, NULL, false, 0));
    expect_error_containing(EG_ERR_SHAPE, "(batch, heads, time, depth)", NULL);
    assert_null(eg_scaled_dot_product_attention(q, uniform4(1, 2, 5, 3, 5), v, NULL, false, 0));
    expect_error_containing(EG_ERR_SHAPE, "depth", NULL);
    assert_null(eg_scaled_dot_product_attention(q, k, uniform4(1, 2, 4, 3, 6), NULL, false, 0));
    expect_error_containing(EG_ERR_SHAPE, "v", NULL);
    eg_tensor *float_mask = eg_ones(EG_DTYPE_F32, 2, (const int64_t[]){1, 5});
    assert_null(eg_scaled_dot_product_attention(q, k, v, float_mask, false, 0));
    expect_error_containing(EG_ERR_SHAPE, "key mask must be bool", NULL);
    assert_null(eg_scaled_dot_product_attention(q, k, v, NULL, false, -1));
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "scale", NULL);
    assert_null(eg_scaled_dot_product_attention(q, k, eg_cast(v, EG_DTYPE_F64), NULL, false, 0));
    expect_error_containing(EG_ERR_DTYPE, "one dtype", NULL);
    /* every key hidden: zeros, not NaN */
    bool none[5] = {false, false, false, false, false};
    eg_tensor *hidden = eg_tensor_from_data(none, EG_DTYPE_BOOL, 2, (const int64_t[]){1, 5});
    eg_tensor *y = eg_scaled_dot_product_attention(q, k, v, hidden, false, 0);
    assert_non_null(y);
    assert_true(eg_item(eg_sum(eg_abs(y), 0, NULL, false)) == 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_matches_the_materialized_attention, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_memory_grows_linearly, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_same_bits_at_any_thread_count, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_bad_input_gets_clear_errors, fresh_scope_setup,
                                        strict_scope_teardown),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    eg_shutdown();
    return failed;
}
