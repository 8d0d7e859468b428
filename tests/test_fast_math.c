/* Fast-math regions (eagle/ops.h: eg_fast_math_begin): nesting; exp, tanh, sigmoid and gelu built
 * inside one give the fast vector math's bits (src/backend/cpu/vecmath.h, whose error bounds
 * tests/test_vecmath.c asserts), differ from the exact ops somewhere and stay near them; eager,
 * lazy and graph agree bit for bit inside a region; a lazy schedule of the same structure and a
 * traced function are not confused across the two states; dense's sigmoid and tanh epilogue
 * equals the unfused chain inside a region (1 and 2 threads); f64 stays exact; gradients run. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "backend/cpu/vecmath.h"
#include "eagle.h"
#include "test_util.h"

enum { N = 4099 }; /* a tail past the last whole vector */

typedef eg_tensor *(*unary_op)(const eg_tensor *);
static eg_tensor *op_exp(const eg_tensor *x) {
    return eg_exp(x);
}
static eg_tensor *op_tanh(const eg_tensor *x) {
    return eg_tanh(x);
}
static eg_tensor *op_sigmoid(const eg_tensor *x) {
    return eg_sigmoid(x);
}
static eg_tensor *op_gelu(const eg_tensor *x) {
    return eg_gelu(x);
}
static const struct {
    const char *name;
    unary_op op;
    eg__vecmath_fn fast;
} ops[] = {
    {"exp", op_exp, EG__VECMATH_EXP_FAST},
    {"tanh", op_tanh, EG__VECMATH_TANH_FAST},
    {"sigmoid", op_sigmoid, EG__VECMATH_SIGMOID_FAST},
    {"gelu", op_gelu, EG__VECMATH_GELU_FAST},
};
enum { N_OPS = sizeof ops / sizeof ops[0] };

static int teardown(void **state) {
    (void)state;
    while (eg_fast_math_enabled()) eg_fast_math_end();
    while (eg_scope_depth() > 0) eg_scope_end();
    return eg_set_num_threads(1) == EG_OK ? 0 : -1;
}

static int setup(void **state) {
    (void)state;
    eg_scope_begin();
    return 0;
}

/* N inputs in [-12, 12], a few specials among them. */
static eg_tensor *inputs(void) {
    static float x[N];
    for (int i = 0; i < N; i++) x[i] = ((float)i / (N - 1) - 0.5f) * 24.0f;
    x[7] = NAN;
    x[100] = INFINITY;
    x[101] = -INFINITY;
    x[102] = -0.0f;
    x[103] = 95.0f;
    x[104] = -95.0f;
    int64_t shape[1] = {N};
    return eg_tensor_from_data(x, EG_DTYPE_F32, 1, shape);
}

static void test_region_nesting(void **state) {
    (void)state;
    assert_false(eg_fast_math_enabled());
    eg_fast_math_end(); /* at depth 0: nothing */
    assert_false(eg_fast_math_enabled());
    eg_fast_math_begin();
    eg_fast_math_begin();
    assert_true(eg_fast_math_enabled());
    eg_fast_math_end();
    assert_true(eg_fast_math_enabled());
    eg_fast_math_end();
    assert_false(eg_fast_math_enabled());
}

/* Each op: the fast kernel's bits inside a region, the exact op's outside, differing somewhere
 * and close everywhere (the ulp bounds themselves are test_vecmath's). */
static void test_ops_inside_region(void **state) {
    (void)state;
    eg_tensor *x = inputs();
    const float *in = eg_tensor_data(x);
    for (int k = 0; k < N_OPS; k++) {
        eg_tensor *exact = ops[k].op(x);
        eg_fast_math_begin();
        eg_tensor *fast = ops[k].op(x);
        eg_fast_math_end();
        eg_tensor *again = ops[k].op(x); /* the region has ended */
        assert_non_null(exact);
        assert_non_null(fast);
        assert_true(tensors_same_bits(exact, again));
        static float expected[N];
        eg__vecmath_f32(ops[k].fast, N, expected, in);
        if (memcmp(expected, eg_tensor_data(fast), sizeof expected) != 0)
            fail_msg("%s: not the fast kernel's bits", ops[k].name);
        const float *e = eg_tensor_data(exact), *f = eg_tensor_data(fast);
        int differ = 0;
        for (int i = 0; i < N; i++) {
            differ += memcmp(&e[i], &f[i], sizeof(float)) != 0;
            if (isnan(e[i])) { /* NaN's sign may differ (sigmoid_fast negates x) */
                assert_true(isnan(f[i]));
                continue;
            }
            if (isinf(e[i])) {
                assert_true(e[i] == f[i]);
                continue;
            }
            if (!(fabs((double)f[i] - e[i]) <= 8e-6 * fabs(e[i]) + 2.5e-6))
                fail_msg("%s(%a): fast %a, exact %a", ops[k].name, (double)in[i], (double)f[i],
                         (double)e[i]);
        }
        print_message("%-8s fast differs from exact on %d of %d inputs\n", ops[k].name, differ, N);
        assert_true(differ > 0);
    }
}

/* A chain that lazy mode fuses into one loop: gelu(tanh(x) * 2) + sigmoid(x) * exp(-0.1 x). */
static eg_tensor *chain(const eg_tensor *x) {
    eg_tensor *a = eg_gelu(eg_mul_scalar(eg_tanh(x), 2.0));
    eg_tensor *b = eg_mul(eg_sigmoid(x), eg_exp(eg_mul_scalar(x, -0.1)));
    return eg_add(a, b);
}

static eg_status traced_chain(eg_tensor *const *in, eg_tensor **out, void *user) {
    (void)user;
    out[0] = chain(in[0]);
    return out[0] ? EG_OK : eg_last_status();
}

static void test_modes_agree(void **state) {
    (void)state;
    eg_tensor *x = inputs();
    eg_tensor *exact = chain(x);

    eg_fast_math_begin();
    eg_tensor *eager = chain(x);
    eg_lazy_begin();
    eg_tensor *lazy = chain(x);
    assert_int_equal(eg_realize(1, &lazy), EG_OK);
    assert_int_equal(eg_lazy_end(), EG_OK);
    eg_fast_math_end();
    assert_true(tensors_same_bits(eager, lazy));
    assert_false(tensors_same_bits(eager, exact));

    /* the same structure lazily outside the region: a cached schedule may be reused (it holds
     * no attributes), the values are the exact ones */
    eg_lazy_begin();
    eg_tensor *lazy_exact = chain(x);
    assert_int_equal(eg_realize(1, &lazy_exact), EG_OK);
    assert_int_equal(eg_lazy_end(), EG_OK);
    assert_true(tensors_same_bits(lazy_exact, exact));

    /* built inside a region, realized after it: fast (the region is read when the op is built) */
    eg_lazy_begin();
    eg_fast_math_begin();
    eg_tensor *late = chain(x);
    eg_fast_math_end();
    assert_int_equal(eg_realize(1, &late), EG_OK);
    assert_int_equal(eg_lazy_end(), EG_OK);
    assert_true(tensors_same_bits(late, eager));

    /* graph: traced inside a region; a call outside traces again and is exact */
    eg_function *f = eg_function_new("fast_chain", traced_chain, 1, 1, NULL);
    eg_tensor *graph = NULL, *graph_exact = NULL, *graph_again = NULL;
    eg_fast_math_begin();
    assert_int_equal(eg_function_call(f, &x, &graph), EG_OK);
    eg_fast_math_end();
    assert_true(tensors_same_bits(graph, eager));
    assert_int_equal(eg_function_call(f, &x, &graph_exact), EG_OK);
    assert_true(tensors_same_bits(graph_exact, exact));
    eg_function_stats stats;
    assert_int_equal(eg_function_stats_get(f, &stats), EG_OK);
    assert_int_equal(stats.n_traces, 2);
    assert_non_null(strstr(stats.last_trace_reason, "fast-math region left"));
    eg_fast_math_begin();
    assert_int_equal(eg_function_call(f, &x, &graph_again), EG_OK);
    eg_fast_math_end();
    assert_true(tensors_same_bits(graph_again, eager));
    assert_int_equal(eg_function_stats_get(f, &stats), EG_OK);
    assert_int_equal(stats.n_traces, 2); /* the first trace again */
    eg_release(graph);
    eg_release(graph_exact);
    eg_release(graph_again);
    eg_function_free(f);
}

static eg_status traced_dense(eg_tensor *const *in, eg_tensor **out, void *user) {
    out[0] = eg_dense(in[0], in[1], in[2], *(const eg_activation *)user);
    return out[0] ? EG_OK : eg_last_status();
}

/* dense's sigmoid and tanh inside a region: the unfused chain's bits with the fast activation,
 * at 1 and 2 threads, in eager and graph mode; other than the exact dense's. */
static void test_dense_epilogue(void **state) {
    (void)state;
    int64_t xs[2] = {70, 96}, ws[2] = {96, 300}, bs[1] = {300};
    eg_tensor *x = uniform_tensor(2, xs, 1), *w = uniform_tensor(2, ws, 2);
    eg_tensor *b = uniform_tensor(1, bs, 3);
    const eg_activation acts[] = {EG_ACTIVATION_SIGMOID, EG_ACTIVATION_TANH, EG_ACTIVATION_RELU};
    for (int threads = 1; threads <= 2; threads++) {
        assert_int_equal(eg_set_num_threads(threads), EG_OK);
        for (int k = 0; k < 3; k++) {
            eg_tensor *exact = eg_dense(x, w, b, acts[k]);
            eg_fast_math_begin();
            eg_tensor *fused = eg_dense(x, w, b, acts[k]);
            eg_tensor *chained = eg_activation_apply(acts[k], eg_add(eg_matmul(x, w), b));
            eg_function *f = eg_function_new("dense", traced_dense, 3, 1, (void *)&acts[k]);
            eg_tensor *args[3] = {x, w, b}, *graph = NULL;
            assert_int_equal(eg_function_call(f, args, &graph), EG_OK);
            eg_fast_math_end();
            assert_true(tensors_same_bits(fused, chained));
            assert_true(tensors_same_bits(fused, graph));
            /* relu has no fast variant */
            assert_true(tensors_same_bits(fused, exact) == (acts[k] == EG_ACTIVATION_RELU));
            assert_all_close(fused, exact, 1e-5);
            eg_release(graph);
            eg_function_free(f);
        }
    }
}

/* Other dtypes compute exactly inside a region. */
static void test_f64_exact(void **state) {
    (void)state;
    eg_tensor *x = eg_cast(inputs(), EG_DTYPE_F64);
    for (int k = 0; k < N_OPS; k++) {
        eg_tensor *exact = ops[k].op(x);
        eg_fast_math_begin();
        eg_tensor *fast = ops[k].op(x);
        eg_fast_math_end();
        assert_true(tensors_same_bits(exact, fast));
    }
}

/* sigmoid's gradient inside a region is g y (1 - y) of the fast y. */
static void test_gradient(void **state) {
    (void)state;
    int64_t shape[1] = {257};
    eg_tensor *x = uniform_tensor(1, shape, 9);
    eg_fast_math_begin();
    eg_tape *tape = eg_tape_begin(false);
    eg_tape_watch(tape, x);
    eg_tensor *y = eg_sigmoid(x);
    eg_tensor *loss = eg_sum(y, 0, NULL, false);
    eg_tensor *grad = NULL;
    assert_int_equal(eg_tape_gradient(tape, loss, 1, &x, &grad, EG_UNCONNECTED_ZERO), EG_OK);
    eg_tape_free(tape);
    eg_fast_math_end();
    const float *yv = eg_tensor_data(y), *gv = eg_tensor_data(grad);
    for (int i = 0; i < 257; i++) assert_true(gv[i] == yv[i] * (1.0f - yv[i]));
    eg_release(grad);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_region_nesting, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ops_inside_region, setup, teardown),
        cmocka_unit_test_setup_teardown(test_modes_agree, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dense_epilogue, setup, teardown),
        cmocka_unit_test_setup_teardown(test_f64_exact, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gradient, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
