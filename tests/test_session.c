/* TF1-style placeholders, graphs and sessions: same bits as eager mode, a training graph whose
 * optimizer step runs at every run, replays without allocator calls, clear errors for bad
 * feeds and placeholders. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <math.h>
#include <string.h>

#include "eagle.h"
#include "test_util.h"

static int setup(void **state) {
    (void)state;
    eg_clear_error();
    return 0;
}

static uint64_t allocator_calls(void) {
    eg_memory_stats s;
    eg_memory_stats_get(NULL, &s);
    return s.n_allocs;
}

static void test_inference_graph_matches_eager(void **state) {
    (void)state;
    int64_t ws[2] = {6, 4}, xs[2] = {3, 6};
    eg_tensor *w0 = uniform_tensor(2, ws, 1);
    eg_tensor *w = eg_variable(w0, "w");
    eg_graph *g = eg_graph_new();
    eg_scope_begin(); /* the graph keeps what it records: its tensors outlive the scope */
    assert_int_equal(eg_graph_begin(g), EG_OK);
    eg_tensor *x = eg_placeholder(g, EG_DTYPE_F32, 2, xs, "x");
    assert_non_null(x);
    eg_tensor *h = eg_relu(eg_matmul(x, w));
    eg_tensor *y = eg_sum(eg_mul(h, h), 0, NULL, false);
    eg_tensor *fetches[2] = {h, y};
    assert_int_equal(eg_graph_end(g), EG_OK);
    eg_scope_end();
    eg_session *s = eg_session_new(g);
    for (int run = 0; run < 4; run++) {
        eg_scope_begin();
        eg_tensor *value = uniform_tensor(2, xs, 10 + (uint64_t)run);
        eg_tensor *expected_h = eg_relu(eg_matmul(value, w));
        eg_tensor *expected_y = eg_sum(eg_mul(expected_h, expected_h), 0, NULL, false);
        eg_tensor *results[2];
        uint64_t before = allocator_calls();
        assert_int_equal(eg_session_run(s, 1, &x, &value, 2, fetches, results), EG_OK);
        if (run >= 2) assert_int_equal(allocator_calls(), before); /* replayed */
        assert_memory_equal(eg_tensor_data(results[0]), eg_tensor_data(expected_h),
                            12 * sizeof(float));
        double a = eg_item(results[1]), b = eg_item(expected_y);
        assert_memory_equal(&a, &b, sizeof a);
        eg_release(results[0]);
        eg_release(results[1]);
        eg_scope_end();
    }
    eg_function_stats st;
    assert_int_equal(eg_session_stats_get(s, &st), EG_OK);
    assert_int_equal(st.n_traces, 1);
    assert_int_equal(st.n_arena_allocations, 1);
    /* the graph cannot grow after running */
    assert_int_equal(eg_graph_begin(g), EG_ERR_STATE);
    eg_clear_error();
    eg_session_free(s);
    eg_graph_free(g);
    eg_release(w);
    eg_release(w0);
}

static void test_training_graph_updates_at_every_run(void **state) {
    (void)state;
    int64_t ws[2] = {784, 16}, xs[2] = {8, 784}, batch = 8;
    eg_tensor *w0 = uniform_tensor(2, ws, 2);
    eg_tensor *w[2] = {eg_variable(w0, "w_eager"), eg_variable(w0, "w_graph")};
    eg_optimizer *opt[2] = {eg_adam_new(NULL), eg_adam_new(NULL)};
    /* the graph: loss = mean(relu(x w)^2 * t), tape gradient, Adam step */
    eg_graph *g = eg_graph_new();
    eg_scope_begin();
    assert_int_equal(eg_graph_begin(g), EG_OK);
    eg_tensor *x = eg_placeholder(g, EG_DTYPE_F32, 2, xs, "x");
    eg_tensor *target = eg_placeholder(g, EG_DTYPE_F32, 1, &batch, "target");
    eg_tape *tape = eg_tape_begin(false);
    eg_tensor *h = eg_relu(eg_matmul(x, w[1]));
    eg_tensor *loss =
        eg_mean(eg_mul(eg_sum(eg_mul(h, h), 1, (int[]){1}, false), target), 0, NULL, false);
    eg_tensor *grad;
    assert_int_equal(eg_tape_gradient(tape, loss, 1, &w[1], &grad, EG_UNCONNECTED_ZERO), EG_OK);
    eg_tape_free(tape);
    assert_int_equal(eg_optimizer_apply_gradients(opt[1], 1, &grad, &w[1]), EG_OK);
    assert_int_equal(eg_graph_end(g), EG_OK);
    eg_scope_end();
    eg_session *s = eg_session_new(g);
    eg_tensor *placeholders[2] = {x, target};
    for (int run = 0; run < 3; run++) {
        eg_scope_begin();
        eg_tensor *feeds[2] = {uniform_tensor(2, xs, 20 + (uint64_t)run),
                               uniform_tensor(1, &batch, 30 + (uint64_t)run)};
        /* eager */
        eg_tape *t = eg_tape_begin(false);
        eg_tensor *eh = eg_relu(eg_matmul(feeds[0], w[0]));
        eg_tensor *eloss =
            eg_mean(eg_mul(eg_sum(eg_mul(eh, eh), 1, (int[]){1}, false), feeds[1]), 0, NULL, false);
        eg_tensor *egrad;
        eg_tape_gradient(t, eloss, 1, &w[0], &egrad, EG_UNCONNECTED_ZERO);
        eg_tape_free(t);
        eg_optimizer_apply_gradients(opt[0], 1, &egrad, &w[0]);
        /* graph */
        eg_tensor *result;
        assert_int_equal(eg_session_run(s, 2, placeholders, feeds, 1, &loss, &result), EG_OK);
        double a = eg_item(eloss), b = eg_item(result);
        assert_memory_equal(&a, &b, sizeof a);
        assert_memory_equal(eg_tensor_data(w[0]), eg_tensor_data(w[1]), 784 * 16 * sizeof(float));
        eg_release(result);
        eg_scope_end();
    }
    assert_int_equal(eg_optimizer_iterations(opt[1]), 3);
    eg_function_stats st;
    assert_int_equal(eg_session_stats_get(s, &st), EG_OK);
    assert_int_equal(st.n_early_updates, 1);
    eg_session_free(s);
    eg_graph_free(g);
    for (int i = 0; i < 2; i++) {
        eg_optimizer_free(opt[i]);
        eg_release(w[i]);
    }
    eg_release(w0);
}

static void test_bad_feeds_and_placeholders_give_clear_errors(void **state) {
    (void)state;
    int64_t xs[2] = {4, 3}, other[2] = {5, 3}, unknown[2] = {-1, 3};
    eg_graph *g = eg_graph_new();
    eg_scope_begin();
    assert_null(eg_placeholder(g, EG_DTYPE_F32, 2, xs, "x")); /* not building */
    assert_int_equal(eg_last_status(), EG_ERR_STATE);
    eg_clear_error();
    assert_int_equal(eg_graph_begin(g), EG_OK);
    assert_int_equal(eg_graph_begin(g), EG_ERR_STATE);
    eg_clear_error();
    assert_null(eg_placeholder(g, EG_DTYPE_F32, 2, unknown, "batch"));
    assert_int_equal(eg_last_status(), EG_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(eg_last_error(), "must be known"));
    eg_clear_error();
    eg_tensor *x = eg_placeholder(g, EG_DTYPE_F32, 2, xs, "x");
    eg_tensor *y = eg_exp(x);
    /* shape errors while building name the caller's line */
    int line = __LINE__ + 1;
    assert_null(eg_matmul(x, x));
    char where[64];
    snprintf(where, sizeof where, "test_session.c:%d", line);
    assert_non_null(strstr(eg_last_error(), where));
    eg_clear_error();
    assert_int_equal(eg_graph_end(g), EG_OK);
    eg_scope_end();
    eg_session *s = eg_session_new(g);
    eg_scope_begin();
    eg_tensor *result = NULL;
    eg_tensor *wrong_shape = eg_zeros(EG_DTYPE_F32, 2, other);
    assert_int_equal(eg_session_run(s, 1, &x, &wrong_shape, 1, &y, &result), EG_ERR_SHAPE);
    assert_non_null(strstr(eg_last_error(), "placeholder 'x' is (4, 3), fed (5, 3)"));
    eg_clear_error();
    eg_tensor *wrong_dtype = eg_zeros(EG_DTYPE_F64, 2, xs);
    assert_int_equal(eg_session_run(s, 1, &x, &wrong_dtype, 1, &y, &result), EG_ERR_DTYPE);
    assert_non_null(strstr(eg_last_error(), "'x' is f32"));
    eg_clear_error();
    assert_int_equal(eg_session_run(s, 0, NULL, NULL, 1, &y, &result), EG_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(eg_last_error(), "'x' was not fed"));
    eg_clear_error();
    assert_int_equal(eg_session_stats_get(s, &(eg_function_stats){0}), EG_ERR_STATE);
    eg_clear_error();
    eg_tensor *good = eg_ones(EG_DTYPE_F32, 2, xs);
    assert_int_equal(eg_session_run(s, 1, &x, &good, 1, &y, &result), EG_OK);
    assert_true(eg_item(eg_sum(result, 0, NULL, false)) == 12 * (double)expf(1.0f));
    eg_release(result);
    eg_scope_end();
    /* the graph outlives its user reference while a session holds it */
    eg_graph_free(g);
    eg_session_free(s);
}

int main(int argc, char **argv) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_inference_graph_matches_eager, setup),
        cmocka_unit_test_setup(test_training_graph_updates_at_every_run, setup),
        cmocka_unit_test_setup(test_bad_feeds_and_placeholders_give_clear_errors, setup),
    };
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
