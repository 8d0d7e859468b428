/* Graph mode (eg_function): traced once per signature, replayed without allocation, planned
 * into one arena; and the training steps of the seed model and of 784-512-512-10 give the same
 * bits in eager, lazy and graph mode. Also the memory planner on random graphs. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eagle.h"
#include "graph/planner.h"

static int setup(void **state) {
    (void)state;
    eg_clear_error();
    return 0;
}

static eg_tensor *random_tensor(eg_dtype dtype, int n_dims, const int64_t *shape, uint64_t seed) {
    eg_generator *g = eg_generator_new(seed);
    eg_tensor *t = eg_random_uniform(g, dtype, n_dims, shape, -1, 1);
    eg_generator_free(g);
    return t;
}

/* ---- retracing ---- */

static eg_status scaled_sum(eg_tensor *const *in, eg_tensor **out, void *user) {
    (void)user;
    out[0] = eg_sum(eg_mul_scalar(eg_exp(in[0]), 2.0), 0, NULL, false);
    return EG_OK;
}

static void test_retrace_exactly_when_the_signature_changes(void **state) {
    (void)state;
    eg_function *f = eg_function_new("scaled_sum", scaled_sum, 1, 1, NULL);
    eg_function_set_retrace_limit(f, 2);
    int64_t a[2] = {4, 3}, b[2] = {5, 3};
    eg_function_stats s;
    struct {
        eg_dtype dtype;
        const int64_t *shape;
        int traces;
        const char *reason;
    } calls[] = {
        {EG_DTYPE_F32, a, 1, "first call"},
        {EG_DTYPE_F32, a, 1, "first call"},
        {EG_DTYPE_F32, b, 2, "input 0: shape (4, 3) -> (5, 3)"},
        {EG_DTYPE_F32, a, 2, "input 0: shape (4, 3) -> (5, 3)"}, /* seen before: no trace */
        {EG_DTYPE_F64, b, 3, "input 0: dtype f32 -> f64 (nearest of 2 traced signatures)"},
    };
    for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
        eg_scope_begin();
        eg_tensor *x = random_tensor(calls[i].dtype, 2, calls[i].shape, 1);
        eg_tensor *y;
        assert_int_equal(eg_function_call(f, &x, &y), EG_OK);
        double expected = eg_item(eg_sum(eg_mul_scalar(eg_exp(x), 2.0), 0, NULL, false));
        assert_true(eg_item(y) == expected);
        assert_int_equal(eg_function_stats_get(f, &s), EG_OK);
        assert_int_equal(s.n_traces, calls[i].traces);
        assert_string_equal(s.last_trace_reason, calls[i].reason);
        eg_scope_end();
    }
    assert_true(s.retrace_warning[0] != '\0'); /* 3 traces > limit 2 */
    assert_non_null(strstr(s.retrace_warning, "scaled_sum"));
    eg_function_free(f);
}

/* x plus the labels cast to x's dtype: a step that reads two inputs of different dtypes. */
static eg_status add_labels(eg_tensor *const *in, eg_tensor **out, void *user) {
    (void)user;
    out[0] = eg_add(in[0], eg_cast(in[1], eg_tensor_dtype(in[0])));
    return out[0] ? EG_OK : eg_last_status();
}

static void call_with_labels(eg_function *f, const int64_t *x_shape, eg_dtype labels_dtype) {
    eg_scope_begin();
    eg_tensor *in[2] = {random_tensor(EG_DTYPE_F32, 2, x_shape, 3),
                        eg_zeros(labels_dtype, 2, x_shape)};
    eg_tensor *y = NULL;
    assert_int_equal(eg_function_call(f, in, &y), EG_OK);
    assert_non_null(y);
    eg_scope_end();
}

/* The reason names what differs from the traced signature nearest to the call, not from the
 * last one traced: after a smaller last batch, changing only the labels' dtype is a dtype change
 * of input 1, not a shape change of input 0. */
static void test_retrace_reason_compares_with_the_nearest_traced_signature(void **state) {
    (void)state;
    eg_function *f = eg_function_new("add_labels", add_labels, 2, 1, NULL);
    int64_t full[2] = {4, 3}, last[2] = {2, 3};
    call_with_labels(f, full, EG_DTYPE_I32);
    call_with_labels(f, last, EG_DTYPE_I32);
    eg_function_stats s;
    assert_int_equal(eg_function_stats_get(f, &s), EG_OK);
    assert_string_equal(s.last_trace_reason,
                        "input 0: shape (4, 3) -> (2, 3); input 1: shape (4, 3) -> (2, 3)");
    call_with_labels(f, full, EG_DTYPE_I64);
    assert_int_equal(eg_function_stats_get(f, &s), EG_OK);
    assert_int_equal(s.n_traces, 3);
    assert_string_equal(s.last_trace_reason,
                        "input 1: dtype i32 -> i64 (nearest of 2 traced signatures)");
    /* With both a dtype and a shape changed against every trace, each difference is named. */
    int64_t other[2] = {6, 3};
    call_with_labels(f, other, EG_DTYPE_U8);
    assert_int_equal(eg_function_stats_get(f, &s), EG_OK);
    assert_non_null(strstr(s.last_trace_reason, "input 0: shape"));
    assert_non_null(
        strstr(s.last_trace_reason, "input 1: dtype i64 -> u8, shape (4, 3) -> (6, 3)"));
    eg_function_free(f);
}

/* ---- errors ---- */

static int error_line;
static eg_status bad_matmul(eg_tensor *const *in, eg_tensor **out, void *user) {
    (void)user;
    error_line = __LINE__ + 1;
    out[0] = eg_matmul(in[0], in[0]);
    return out[0] ? EG_OK : eg_last_status();
}

static eg_status reads_a_value(eg_tensor *const *in, eg_tensor **out, void *user) {
    (void)user;
    eg_tensor *y = eg_exp(in[0]);
    if (eg_item(eg_sum(y, 0, NULL, false)) > 0)
        out[0] = y; /* not allowed while traced */
    else
        out[0] = y;
    return eg_last_status();
}

static void test_errors_point_at_the_traced_line(void **state) {
    (void)state;
    eg_scope_begin();
    int64_t shape[2] = {2, 3};
    eg_tensor *x = random_tensor(EG_DTYPE_F32, 2, shape, 2), *y = NULL;
    eg_function *f = eg_function_new("bad", bad_matmul, 1, 1, NULL);
    assert_int_equal(eg_function_call(f, &x, &y), EG_ERR_SHAPE);
    char expected[64];
    snprintf(expected, sizeof expected, "test_graph.c:%d", error_line);
    assert_non_null(strstr(eg_last_error(), expected));
    eg_clear_error();
    eg_function_free(f);
    f = eg_function_new("reads", reads_a_value, 1, 1, NULL);
    assert_int_equal(eg_function_call(f, &x, &y), EG_ERR_STATE);
    assert_non_null(strstr(eg_last_error(), "traced"));
    eg_clear_error();
    eg_function_free(f);
    eg_scope_end();
}

/* ---- training steps in three modes ---- */

typedef struct step_context {
    eg_model *model;
    eg_optimizer *optimizer;
} step_context;

static eg_status train_step(eg_tensor *const *in, eg_tensor **out, void *user) {
    step_context *c = user;
    eg_tape *tape = eg_tape_begin(false);
    eg_tensor *logits = eg_model_call(c->model, in[0], true);
    eg_tensor *loss =
        eg_loss_sparse_categorical_crossentropy(in[1], logits, true, EG_REDUCTION_MEAN);
    int n;
    eg_tensor *const *vars = eg_model_trainable_variables(c->model, &n);
    eg_tensor *grads[8];
    eg_tape_gradient(tape, loss, n, vars, grads, EG_UNCONNECTED_ZERO);
    eg_tape_free(tape);
    eg_optimizer_apply_gradients(c->optimizer, n, grads, vars);
    out[0] = loss;
    return eg_last_status();
}

static eg_model *make_model(const int64_t *hidden, int n_hidden) {
    eg_manual_seed(123);
    eg_model *m = eg_sequential_new("mlp");
    for (int i = 0; i < n_hidden; i++)
        eg_sequential_add(m, eg_dense_new(hidden[i], EG_ACTIVATION_RELU));
    eg_sequential_add(m, eg_dense_new(10, EG_ACTIVATION_NONE));
    int64_t input[2] = {1, 784};
    assert_int_equal(eg_model_build(m, 2, input), EG_OK);
    return m;
}

static uint64_t allocator_calls(void) {
    eg_memory_stats s;
    eg_memory_stats_get(NULL, &s);
    return s.n_allocs;
}

static void three_modes(const int64_t *hidden, int n_hidden, int64_t batch, int steps) {
    step_context modes[3];
    for (int m = 0; m < 3; m++)
        modes[m] = (step_context){make_model(hidden, n_hidden), eg_adam_new(NULL)};
    eg_function *f = eg_function_new("train_step", train_step, 2, 1, &modes[2]);
    int64_t xs[2] = {batch, 784};
    uint64_t replay_allocations = 0;
    for (int step = 0; step < steps; step++) {
        eg_scope_begin();
        eg_tensor *x = random_tensor(EG_DTYPE_F32, 2, xs, 100 + (uint64_t)step);
        eg_tensor *labels = eg_cast(
            eg_mul_scalar(eg_add_scalar(random_tensor(EG_DTYPE_F32, 1, &batch, 7), 1.0), 4.99),
            EG_DTYPE_I32);
        eg_tensor *in[2] = {x, labels};
        double losses[3];
        eg_tensor *loss;
        /* eager */
        assert_int_equal(train_step(in, &loss, &modes[0]), EG_OK);
        losses[0] = eg_item(loss);
        /* lazy: the same code; the optimizer realizes the gradients together */
        eg_lazy_begin();
        assert_int_equal(train_step(in, &loss, &modes[1]), EG_OK);
        assert_int_equal(eg_lazy_end(), EG_OK);
        losses[1] = eg_item(loss);
        /* graph */
        uint64_t before = allocator_calls();
        assert_int_equal(eg_function_call(f, in, &loss), EG_OK);
        if (step >= 2) replay_allocations += allocator_calls() - before;
        losses[2] = eg_item(loss);
        eg_release(loss);
        if (getenv("SHOW"))
            fprintf(stderr, "step %d: %.17g %.17g %.17g\n", step, losses[0], losses[1], losses[2]);
        assert_memory_equal(&losses[0], &losses[1], sizeof(double));
        assert_memory_equal(&losses[0], &losses[2], sizeof(double));
        eg_scope_end();
    }
    /* a replayed step asks the allocator for nothing */
    assert_int_equal(replay_allocations, 0);
    int n;
    for (int m = 1; m < 3; m++) {
        eg_tensor *const *a = eg_model_trainable_variables(modes[0].model, &n);
        eg_tensor *const *b = eg_model_trainable_variables(modes[m].model, &n);
        for (int i = 0; i < n; i++)
            assert_memory_equal(eg_tensor_data(a[i]), eg_tensor_data(b[i]),
                                (size_t)eg_tensor_n_elems(a[i]) * sizeof(float));
    }
    eg_function_stats s;
    assert_int_equal(eg_function_stats_get(f, &s), EG_OK);
    assert_int_equal(s.n_traces, 1);
    assert_int_equal(s.n_arena_allocations, 1);
    assert_true(s.arena_bytes <= s.unplanned_bytes);
    assert_true(s.n_fused_nodes > 0);
    fprintf(stderr, "  %lld ops, %lld kernels, arena %zu B, unplanned %zu B, eager %zu B\n",
            (long long)s.n_nodes, (long long)s.n_kernels, s.arena_bytes, s.unplanned_bytes,
            s.eager_bytes);
    eg_function_free(f);
    for (int m = 0; m < 3; m++) {
        eg_optimizer_free(modes[m].optimizer);
        eg_model_free(modes[m].model);
    }
}

static void test_seed_model_step_in_three_modes(void **state) {
    (void)state;
    int64_t hidden[1] = {64};
    three_modes(hidden, 1, 32, 6);
}

static void test_wide_model_step_in_three_modes(void **state) {
    (void)state;
    int64_t hidden[2] = {512, 512};
    three_modes(hidden, 2, 128, 3);
}

/* ---- the planner ---- */

/* ---- random ops: a Dropout layer draws a new mask at every replay, as eager calls do ---- */

/* out[0] = sum(dropout(x) * w) and out[1] = its gradient with respect to w (the backward
 * applies the same mask) */
static eg_status dropout_step(eg_tensor *const *in, eg_tensor **out, void *user) {
    eg_layer *dropout = user;
    eg_tape *tape = eg_tape_begin(false);
    eg_tape_watch(tape, in[1]);
    eg_tensor *y = eg_layer_call(dropout, eg_mul(in[0], in[1]), true);
    out[0] = eg_sum(y, 0, NULL, false);
    eg_tensor *grad = NULL;
    eg_status status = eg_tape_gradient(tape, out[0], 1, &in[1], &grad, EG_UNCONNECTED_ZERO);
    eg_tape_free(tape);
    out[1] = grad;
    return status;
}

static void test_dropout_masks_are_drawn_again_at_every_replay(void **state) {
    (void)state;
    eg_scope_begin();
    int64_t shape[1] = {257};
    eg_tensor *x = random_tensor(EG_DTYPE_F32, 1, shape, 5),
              *w = random_tensor(EG_DTYPE_F32, 1, shape, 6);
    eg_layer *dropout = eg_dropout_new(0.5, NULL);
    eg_function *f = eg_function_new("dropout_step", dropout_step, 2, 2, dropout);
    eg_tensor *in[2] = {x, w};
    float previous = 0;
    for (int call = 0; call < 4; call++) {
        eg_tensor *eager[2], *graph[2];
        eg_manual_seed(100 + (uint64_t)call);
        assert_int_equal(dropout_step(in, eager, dropout), EG_OK);
        eg_manual_seed(100 + (uint64_t)call);
        assert_int_equal(eg_function_call(f, in, graph), EG_OK);
        assert_memory_equal(eg_tensor_data(eager[0]), eg_tensor_data(graph[0]), sizeof(float));
        assert_memory_equal(eg_tensor_data(eager[1]), eg_tensor_data(graph[1]),
                            257 * sizeof(float));
        float value = *(const float *)eg_tensor_data(graph[0]);
        if (call > 0) assert_true(value != previous); /* a new mask each call */
        previous = value;
        eg_release(graph[0]);
        eg_release(graph[1]);
    }
    eg_function_stats stats;
    assert_int_equal(eg_function_stats_get(f, &stats), EG_OK);
    assert_int_equal(stats.n_traces, 1);
    eg_function_free(f);
    eg_layer_free(dropout);
    eg_scope_end();
}

/* A step drawing random tensors itself (noise, a hand-made mask) interleaved with dropout
 * seeds, from an explicit generator and from the default one (a Dropout layer's): each replay
 * draws new values, the eager calls' values in the same order. */
typedef struct noisy_context {
    eg_layer *dropout;
    eg_generator *generator;
} noisy_context;

static eg_status noisy_step(eg_tensor *const *in, eg_tensor **out, void *user) {
    noisy_context *c = user;
    int64_t shape[1] = {257};
    eg_tensor *noise = eg_random_normal(c->generator, EG_DTYPE_F32, 1, shape, 0.0, 0.1);
    eg_tensor *noisy = eg_dropout_random(eg_add(in[0], noise), 0.5, c->generator);
    eg_tensor *dropped = eg_layer_call(c->dropout, noisy, true);
    eg_tensor *keep = eg_random_uniform(NULL, EG_DTYPE_F32, 1, shape, 0.0, 1.0);
    out[0] = eg_mul(dropped, keep);
    return eg_last_status();
}

static void test_random_tensors_are_drawn_again_at_every_replay(void **state) {
    (void)state;
    eg_scope_begin();
    int64_t shape[1] = {257};
    eg_tensor *x = random_tensor(EG_DTYPE_F32, 1, shape, 7);
    noisy_context c = {eg_dropout_new(0.25, NULL), eg_generator_new(1)};
    eg_generator *eager_generator = eg_generator_new(1);
    eg_function *f = eg_function_new("noisy_step", noisy_step, 1, 1, &c);
    eg_tensor *in[1] = {x};
    eg_tensor *first = NULL;
    for (int call = 0; call < 3; call++) {
        eg_tensor *eager, *graph;
        eg_generator *traced_generator = c.generator;
        c.generator = eager_generator; /* the same stream, run eagerly */
        eg_manual_seed(200 + (uint64_t)call);
        assert_int_equal(noisy_step(in, &eager, &c), EG_OK);
        c.generator = traced_generator;
        eg_manual_seed(200 + (uint64_t)call);
        assert_int_equal(eg_function_call(f, in, &graph), EG_OK);
        assert_memory_equal(eg_tensor_data(eager), eg_tensor_data(graph), 257 * sizeof(float));
        if (call == 0)
            first = eg_contiguous(graph);
        else /* new draws, not the traced ones */
            assert_memory_not_equal(eg_tensor_data(first), eg_tensor_data(graph),
                                    257 * sizeof(float));
        eg_release(graph);
    }
    eg_function_stats stats;
    assert_int_equal(eg_function_stats_get(f, &stats), EG_OK);
    assert_int_equal(stats.n_traces, 1);
    eg_function_free(f);
    eg_generator_free(eager_generator);
    eg_generator_free(c.generator);
    eg_layer_free(c.dropout);
    eg_scope_end();
}

static void test_planner_on_random_graphs(void **state) {
    (void)state;
    uint64_t seed = 42;
    for (int trial = 0; trial < 300; trial++) {
        eg__buffer_request r[40];
        int n = 1 + (int)((seed = seed * 6364136223846793005ull + 1442695040888963407ull) >> 59);
        n = 1 + (int)((seed >> 33) % 40);
        size_t sum = 0;
        for (int i = 0; i < n; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            int first = (int)((seed >> 20) % 50);
            int length = (int)((seed >> 40) % 20);
            r[i] = (eg__buffer_request){64 * (1 + (seed >> 8) % 100), first, first + length, 0};
            sum += r[i].bytes;
        }
        size_t arena = eg__plan_buffers(r, n);
        assert_true(arena <= sum);
        for (int i = 0; i < n; i++) {
            assert_int_equal(r[i].offset % 64, 0);
            assert_true(r[i].offset + r[i].bytes <= arena);
            for (int j = 0; j < i; j++) {
                bool live_together =
                    r[i].first_use <= r[j].last_use && r[j].first_use <= r[i].last_use;
                bool overlap = r[i].offset < r[j].offset + r[j].bytes &&
                               r[j].offset < r[i].offset + r[i].bytes;
                assert_false(live_together && overlap);
            }
        }
    }
}

int main(int argc, char **argv) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_retrace_exactly_when_the_signature_changes, setup),
        cmocka_unit_test_setup(test_retrace_reason_compares_with_the_nearest_traced_signature,
                               setup),
        cmocka_unit_test_setup(test_errors_point_at_the_traced_line, setup),
        cmocka_unit_test_setup(test_seed_model_step_in_three_modes, setup),
        cmocka_unit_test_setup(test_wide_model_step_in_three_modes, setup),
        cmocka_unit_test_setup(test_planner_on_random_graphs, setup),
        cmocka_unit_test_setup(test_dropout_masks_are_drawn_again_at_every_replay, setup),
        cmocka_unit_test_setup(test_random_tensors_are_drawn_again_at_every_replay, setup),
    };
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
