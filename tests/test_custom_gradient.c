/* Custom gradients (eg_custom_gradient): TF's log1pexp example (a finite gradient where the op
 * chain's is nan), a gradient-clipping identity, central differences in f64 for a two-input,
 * two-output node, second order through nested tapes (a backward reading inputs, one reading
 * outputs), eager = lazy = graph bit for bit, what the tape records, when ctx is freed, and the
 * errors: a callback's own, a missing output, a gradient of the wrong shape or dtype. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "eagle.h"
#include "test_util.h"

#define STEP      1e-6
#define TOLERANCE 1e-6

/* ---- helpers ---------------------------------------------------------------------------- */

static eg_tensor *f64_tensor(int n_dims, const int64_t *shape, const double *values) {
    eg_tensor *t = eg_tensor_from_data(values, EG_DTYPE_F64, n_dims, shape);
    assert_non_null(t);
    return t;
}

/* t's n values as doubles. */
static void read_values(const eg_tensor *t, double *out, int64_t n) {
    assert_non_null(t);
    assert_int_equal(eg_tensor_n_elems(t), n);
    eg_tensor *wide = eg_cast(t, EG_DTYPE_F64);
    assert_non_null(wide);
    assert_int_equal(eg_tensor_copy_to_host(wide, out, (size_t)n * sizeof *out), EG_OK);
    eg_release(wide);
}

static void assert_values_near(const eg_tensor *t, const double *want, int64_t n, double tol) {
    double got[16];
    assert_true(n <= 16);
    read_values(t, got, n);
    for (int64_t i = 0; i < n; i++) {
        if (!(fabs(got[i] - want[i]) <= tol * (1 + fabs(want[i]))))
            fail_msg("element %lld: %.17g, want %.17g", (long long)i, got[i], want[i]);
    }
}

/* What the callbacks saw: how often each ran, and how often ctx was freed. */
typedef struct counters {
    int forward, backward, freed;
    double clip; /* the clipping identity's bound */
} counters;

static void count_free(void *ctx) {
    ((counters *)ctx)->freed++;
}

static eg_status result_status(eg_tensor *const *tensors, int n) {
    for (int i = 0; i < n; i++)
        if (!tensors[i]) return eg_last_status();
    return EG_OK;
}

/* ---- log(1 + exp(x)) with the gradient sigmoid(x) (the example of tf.custom_gradient) ---- */

static eg_status log1pexp_forward(int n_inputs, eg_tensor *const *inputs, int n_outputs,
                                  eg_tensor **outputs, void *ctx) {
    (void)n_inputs, (void)n_outputs;
    if (ctx) ((counters *)ctx)->forward++;
    outputs[0] = eg_log(eg_add_scalar(eg_exp(inputs[0]), 1.0));
    return result_status(outputs, 1);
}

static eg_status log1pexp_backward(int n_inputs, eg_tensor *const *inputs, int n_outputs,
                                   eg_tensor *const *outputs, eg_tensor *const *output_grads,
                                   eg_tensor **input_grads, void *ctx) {
    (void)n_inputs, (void)n_outputs, (void)outputs;
    if (ctx) ((counters *)ctx)->backward++;
    eg_tensor *s = eg_sigmoid(inputs[0]);
    input_grads[0] = eg_mul(output_grads[0], s);
    eg_release(s);
    return result_status(input_grads, 1);
}

static const eg_custom_gradient_def log1pexp = {"log1pexp", log1pexp_forward, log1pexp_backward,
                                                NULL};

static void test_log1pexp_gradient_is_finite_where_the_op_chain_gives_nan(void **state) {
    (void)state;
    const float values[3] = {100.0f, 0.0f, -3.0f};
    int64_t n = 3;
    eg_tensor *x = eg_tensor_from_data(values, EG_DTYPE_F32, 1, &n);
    assert_non_null(x);

    eg_tape *tape = eg_tape_begin(false);
    assert_int_equal(eg_tape_watch(tape, x), EG_OK);
    eg_tensor *plain = eg_log(eg_add_scalar(eg_exp(x), 1.0)), *plain_grad = NULL;
    assert_int_equal(eg_tape_gradient(tape, eg_sum(plain, 0, NULL, false), 1, &x, &plain_grad,
                                      EG_UNCONNECTED_NULL),
                     EG_OK);
    eg_tape_free(tape);
    double got[3];
    read_values(plain_grad, got, 3);
    assert_true(isnan(got[0])); /* exp(100) overflows f32: 0 * inf */

    counters c = {0};
    tape = eg_tape_begin(false);
    assert_int_equal(eg_tape_watch(tape, x), EG_OK);
    eg_tensor *y = NULL, *grad = NULL;
    assert_int_equal(eg_custom_gradient(&log1pexp, &c, 1, &x, 1, &y), EG_OK);
    assert_int_equal(c.forward, 1);
    assert_int_equal(c.backward, 0);
    assert_int_equal(
        eg_tape_gradient(tape, eg_sum(y, 0, NULL, false), 1, &x, &grad, EG_UNCONNECTED_NULL),
        EG_OK);
    eg_tape_free(tape);
    assert_int_equal(c.backward, 1);
    double want[3];
    for (int i = 0; i < 3; i++) want[i] = 1 / (1 + exp(-(double)values[i]));
    assert_values_near(grad, want, 3, 1e-6);
    /* the forward is the op chain's, values included (inf at 100 in f32) */
    double forward[3], chain[3];
    read_values(y, forward, 3);
    read_values(plain, chain, 3);
    assert_memory_equal(forward, chain, sizeof forward);
}

/* ---- a clipping identity: forward y = x, backward clips the upstream gradient ---- */

static eg_status identity_forward(int n_inputs, eg_tensor *const *inputs, int n_outputs,
                                  eg_tensor **outputs, void *ctx) {
    (void)n_inputs, (void)n_outputs;
    ((counters *)ctx)->forward++;
    outputs[0] = eg_retain((eg_tensor *)inputs[0]); /* the input itself, passed through */
    return EG_OK;
}

static eg_status clip_backward(int n_inputs, eg_tensor *const *inputs, int n_outputs,
                               eg_tensor *const *outputs, eg_tensor *const *output_grads,
                               eg_tensor **input_grads, void *ctx) {
    (void)n_inputs, (void)n_outputs, (void)inputs, (void)outputs;
    counters *c = ctx;
    c->backward++;
    input_grads[0] = eg_clip(output_grads[0], -c->clip, c->clip);
    return result_status(input_grads, 1);
}

static const eg_custom_gradient_def clip_gradient = {"clip_gradient", identity_forward,
                                                     clip_backward, NULL};

static void test_clipping_identity_clips_gradients_only(void **state) {
    (void)state;
    int64_t n = 4;
    eg_tensor *start = f64_tensor(1, &n, (const double[]){1, 2, 3, 4});
    eg_tensor *x = eg_variable(start, "x"); /* a variable: tracked without a watch */
    eg_tensor *w = f64_tensor(1, &n, (const double[]){5, -0.5, -3, 0.25});
    counters c = {.clip = 1.0};
    eg_tape *tape = eg_tape_begin(true);
    eg_tensor *y = NULL;
    assert_int_equal(eg_custom_gradient(&clip_gradient, &c, 1, &x, 1, &y), EG_OK);
    assert_ptr_not_equal(y, x); /* a view of x, so the node is y's one producer */
    assert_values_near(y, (const double[]){1, 2, 3, 4}, 4, 0);
    eg_tensor *loss = eg_sum(eg_mul(eg_square(y), w), 0, NULL, false), *grad = NULL;
    assert_int_equal(eg_tape_gradient(tape, loss, 1, &x, &grad, EG_UNCONNECTED_NULL), EG_OK);
    /* upstream 2 x w = (10, -2, -18, 2), clipped to [-1, 1] */
    assert_values_near(grad, (const double[]){1, -1, -1, 1}, 4, 0);
    c.clip = 100; /* persistent: the backward runs again for the second gradient */
    assert_int_equal(eg_tape_gradient(tape, loss, 1, &x, &grad, EG_UNCONNECTED_NULL), EG_OK);
    assert_values_near(grad, (const double[]){10, -2, -18, 2}, 4, 0);
    assert_int_equal(c.forward, 1);
    assert_int_equal(c.backward, 2);
    eg_tape_free(tape);
    eg_release(x);
}

/* ---- a two-input, two-output node with a correct backward, checked by central differences ----
 *   u = x * y + sin(x)                  (2, 3)
 *   v = sum(exp(y) * x, axis 1)         (2,)
 * du: dx = g_u (y + cos x), dy = g_u x;  dv: dx = g_v exp(y), dy = g_v exp(y) x */

static eg_status pair_forward(int n_inputs, eg_tensor *const *inputs, int n_outputs,
                              eg_tensor **outputs, void *ctx) {
    (void)n_inputs, (void)n_outputs;
    if (ctx) ((counters *)ctx)->forward++;
    const eg_tensor *x = inputs[0], *y = inputs[1];
    int axis = 1;
    outputs[0] = eg_add(eg_mul(x, y), eg_sin(x));
    outputs[1] = eg_sum(eg_mul(eg_exp(y), x), 1, &axis, false);
    return result_status(outputs, 2);
}

static eg_status pair_backward(int n_inputs, eg_tensor *const *inputs, int n_outputs,
                               eg_tensor *const *outputs, eg_tensor *const *g,
                               eg_tensor **input_grads, void *ctx) {
    (void)n_inputs, (void)n_outputs, (void)outputs;
    if (ctx) ((counters *)ctx)->backward++;
    eg_tensor *x = inputs[0], *y = inputs[1];
    int64_t column[2] = {eg_tensor_shape(x)[0], 1};
    /* scopes are suspended in a backward: every temporary is released by hand */
    eg_tensor *t[7];
    t[0] = eg_reshape(g[1], 2, column); /* g_v as (2, 1) */
    t[1] = eg_exp(y);
    t[2] = eg_mul(t[0], t[1]); /* g_v exp(y) */
    t[3] = eg_cos(x);
    t[4] = eg_add(y, t[3]);
    t[5] = eg_mul(g[0], t[4]); /* g_u (y + cos x) */
    t[6] = eg_mul(t[2], x);    /* g_v exp(y) x */
    input_grads[0] = eg_add(t[5], t[2]);
    eg_tensor *gu_x = eg_mul(g[0], x);
    input_grads[1] = eg_add(gu_x, t[6]);
    eg_release(gu_x);
    for (int i = 0; i < 7; i++) eg_release(t[i]);
    return result_status(input_grads, 2);
}

static const eg_custom_gradient_def pair = {"pair", pair_forward, pair_backward, NULL};

static const double pair_x[6] = {0.3, -1.2, 0.7, 2.0, -0.4, 1.1};
static const double pair_y[6] = {-0.5, 0.25, 1.5, -2.0, 0.8, 0.1};
static const double pair_wu[6] = {0.9, -0.3, 0.5, 1.7, -1.1, 0.2};
static const double pair_wv[2] = {-0.6, 1.3};
static const int64_t pair_shape[2] = {2, 3};

/* L = sum(w_u u) + sum(w_v v) of the node at x, y (no tape). */
static double pair_loss(const double *x, const double *y) {
    eg_scope_begin();
    int64_t n = 2;
    eg_tensor *in[2] = {f64_tensor(2, pair_shape, x), f64_tensor(2, pair_shape, y)};
    eg_tensor *out[2] = {0};
    assert_int_equal(eg_custom_gradient(&pair, NULL, 2, in, 2, out), EG_OK);
    eg_tensor *loss =
        eg_add(eg_sum(eg_mul(out[0], f64_tensor(2, pair_shape, pair_wu)), 0, NULL, false),
               eg_sum(eg_mul(out[1], f64_tensor(1, &n, pair_wv)), 0, NULL, false));
    double value = eg_item(loss);
    eg_scope_end();
    return value;
}

static void test_central_differences_agree_with_the_custom_backward(void **state) {
    (void)state;
    int64_t n = 2;
    eg_tensor *in[2] = {f64_tensor(2, pair_shape, pair_x), f64_tensor(2, pair_shape, pair_y)};
    eg_tape *tape = eg_tape_begin(false);
    eg_tape_watch(tape, in[0]);
    eg_tape_watch(tape, in[1]);
    eg_tensor *out[2] = {0}, *grads[2] = {0};
    assert_int_equal(eg_custom_gradient(&pair, NULL, 2, in, 2, out), EG_OK);
    eg_tensor *loss =
        eg_add(eg_sum(eg_mul(out[0], f64_tensor(2, pair_shape, pair_wu)), 0, NULL, false),
               eg_sum(eg_mul(out[1], f64_tensor(1, &n, pair_wv)), 0, NULL, false));
    assert_int_equal(eg_tape_gradient(tape, loss, 2, in, grads, EG_UNCONNECTED_NULL), EG_OK);
    eg_tape_free(tape);
    int compared = 0;
    for (int s = 0; s < 2; s++) {
        double analytic[6], x[6], y[6];
        read_values(grads[s], analytic, 6);
        for (int j = 0; j < 6; j++) {
            memcpy(x, pair_x, sizeof x);
            memcpy(y, pair_y, sizeof y);
            double *moved = s == 0 ? x : y;
            moved[j] += STEP;
            double plus = pair_loss(x, y);
            moved[j] -= 2 * STEP;
            double minus = pair_loss(x, y);
            double numeric = (plus - minus) / (2 * STEP);
            if (!(fabs(analytic[j] - numeric) <= TOLERANCE * (1 + fabs(numeric))))
                fail_msg("d/d%s[%d]: custom backward %.12g, central difference %.12g",
                         s ? "y" : "x", j, analytic[j], numeric);
            compared++;
        }
    }
    assert_int_equal(compared, 12);
}

/* A target reading only u: the backward gets zeros for v, and the gradient is u's alone. */
static void test_an_output_no_gradient_reaches_gets_zeros(void **state) {
    (void)state;
    eg_tensor *in[2] = {f64_tensor(2, pair_shape, pair_x), f64_tensor(2, pair_shape, pair_y)};
    eg_tape *tape = eg_tape_begin(false);
    eg_tape_watch(tape, in[0]);
    eg_tensor *out[2] = {0}, *grad = NULL;
    counters c = {0};
    assert_int_equal(eg_custom_gradient(&pair, &c, 2, in, 2, out), EG_OK);
    assert_int_equal(
        eg_tape_gradient(tape, eg_sum(out[0], 0, NULL, false), 1, in, &grad, EG_UNCONNECTED_NULL),
        EG_OK);
    eg_tape_free(tape);
    assert_int_equal(c.backward, 1);
    double want[6];
    for (int j = 0; j < 6; j++) want[j] = pair_y[j] + cos(pair_x[j]);
    assert_values_near(grad, want, 6, 1e-12);
}

/* ---- second order through nested tapes ---- */

/* y = x^3 with dy = 3 x^2 g: the backward reads the input. */
static eg_status cube_forward(int n_inputs, eg_tensor *const *inputs, int n_outputs,
                              eg_tensor **outputs, void *ctx) {
    (void)n_inputs, (void)n_outputs, (void)ctx;
    outputs[0] = eg_mul(eg_square(inputs[0]), inputs[0]);
    return result_status(outputs, 1);
}

static eg_status cube_backward(int n_inputs, eg_tensor *const *inputs, int n_outputs,
                               eg_tensor *const *outputs, eg_tensor *const *output_grads,
                               eg_tensor **input_grads, void *ctx) {
    (void)n_inputs, (void)n_outputs, (void)outputs, (void)ctx;
    eg_tensor *square = eg_square(inputs[0]), *scaled = eg_mul_scalar(square, 3.0);
    input_grads[0] = eg_mul(output_grads[0], scaled);
    eg_release(square);
    eg_release(scaled);
    return result_status(input_grads, 1);
}

/* y = exp(x) with dy = y g: the backward reads the output, so second order meets the node again
 * on the outer tape. */
static eg_status exp_forward(int n_inputs, eg_tensor *const *inputs, int n_outputs,
                             eg_tensor **outputs, void *ctx) {
    (void)n_inputs, (void)n_outputs, (void)ctx;
    outputs[0] = eg_exp(inputs[0]);
    return result_status(outputs, 1);
}

static eg_status exp_backward(int n_inputs, eg_tensor *const *inputs, int n_outputs,
                              eg_tensor *const *outputs, eg_tensor *const *output_grads,
                              eg_tensor **input_grads, void *ctx) {
    (void)n_inputs, (void)n_outputs, (void)inputs;
    ((counters *)ctx)->backward++;
    input_grads[0] = eg_mul(output_grads[0], outputs[0]);
    return result_status(input_grads, 1);
}

/* d/dx and d2/dx2 of sum(f(x)) through nested tapes. */
static void first_and_second(const eg_custom_gradient_def *def, void *ctx, eg_tensor *x,
                             eg_tensor **first, eg_tensor **second) {
    eg_tape *outer = eg_tape_begin(false), *inner = eg_tape_begin(false);
    eg_tape_watch(outer, x);
    eg_tape_watch(inner, x);
    eg_tensor *y = NULL;
    assert_int_equal(eg_custom_gradient(def, ctx, 1, &x, 1, &y), EG_OK);
    assert_int_equal(
        eg_tape_gradient(inner, eg_sum(y, 0, NULL, false), 1, &x, first, EG_UNCONNECTED_NULL),
        EG_OK);
    assert_int_equal(
        eg_tape_gradient(outer, eg_sum(*first, 0, NULL, false), 1, &x, second, EG_UNCONNECTED_NULL),
        EG_OK);
    eg_tape_free(inner);
    eg_tape_free(outer);
}

static void test_second_order_through_nested_tapes(void **state) {
    (void)state;
    const double values[3] = {0.5, -2.0, 1.5};
    int64_t n = 3;
    eg_tensor *x = f64_tensor(1, &n, values), *first = NULL, *second = NULL;
    const eg_custom_gradient_def cube = {"cube", cube_forward, cube_backward, NULL};
    first_and_second(&cube, NULL, x, &first, &second);
    double want1[3], want2[3];
    for (int i = 0; i < 3; i++) {
        want1[i] = 3 * values[i] * values[i];
        want2[i] = 6 * values[i];
    }
    assert_values_near(first, want1, 3, 1e-14);
    assert_values_near(second, want2, 3, 1e-14);

    counters c = {0};
    const eg_custom_gradient_def exp_def = {"exp", exp_forward, exp_backward, NULL};
    first_and_second(&exp_def, &c, x, &first, &second);
    for (int i = 0; i < 3; i++) want1[i] = exp(values[i]);
    assert_values_near(first, want1, 3, 1e-14);
    assert_values_near(second, want1, 3, 1e-14);
    assert_int_equal(c.backward, 2); /* the inner gradient, then the outer one through y */
}

/* ---- eager, lazy and graph agree ---- */

/* outputs: u, v of the pair node and d/dx, d/dy of sum(u * u) + sum(v). */
static eg_status pair_step(eg_tensor *const *inputs, eg_tensor **outputs, void *user) {
    eg_tape *tape = eg_tape_begin(false);
    eg_tape_watch(tape, inputs[0]);
    eg_tape_watch(tape, inputs[1]);
    eg_status status = eg_custom_gradient(&pair, user, 2, inputs, 2, outputs);
    if (status == EG_OK) {
        eg_tensor *loss = eg_add(eg_sum(eg_square(outputs[0]), 0, NULL, false),
                                 eg_sum(outputs[1], 0, NULL, false));
        status = loss ? eg_tape_gradient(tape, loss, 2, inputs, outputs + 2, EG_UNCONNECTED_NULL)
                      : eg_last_status();
    }
    eg_tape_free(tape);
    return status;
}

static void assert_same_bits(eg_tensor *const *a, eg_tensor *const *b, int n) {
    for (int i = 0; i < n; i++) {
        double x[6], y[6];
        int64_t count = eg_tensor_n_elems(a[i]);
        read_values(a[i], x, count);
        read_values(b[i], y, count);
        assert_memory_equal(x, y, (size_t)count * sizeof *x);
    }
}

static void test_eager_lazy_and_graph_agree(void **state) {
    (void)state;
    eg_tensor *in[2] = {f64_tensor(2, pair_shape, pair_x), f64_tensor(2, pair_shape, pair_y)};
    eg_tensor *eager[4] = {0}, *lazy[4] = {0};
    counters c = {0};
    assert_int_equal(pair_step(in, eager, &c), EG_OK);
    assert_int_equal(c.backward, 1);

    eg_lazy_begin();
    assert_int_equal(pair_step(in, lazy, &c), EG_OK);
    assert_int_equal(eg_lazy_end(), EG_OK);
    for (int i = 0; i < 4; i++) assert_false(eg_tensor_is_realized(lazy[i])); /* pending */
    assert_int_equal(eg_realize(4, lazy), EG_OK);
    assert_same_bits(eager, lazy, 4);
    assert_int_equal(c.backward, 2);

    eg_function *f = eg_function_new("pair_step", pair_step, 2, 4, &c);
    assert_non_null(f);
    for (int call = 0; call < 3; call++) {
        eg_tensor *graph[4] = {0};
        assert_int_equal(eg_function_call(f, in, graph), EG_OK);
        assert_same_bits(eager, graph, 4);
        for (int i = 0; i < 4; i++) eg_release(graph[i]);
    }
    /* traced once: replays run the callbacks' ops without calling them */
    assert_int_equal(c.forward, 3);
    assert_int_equal(c.backward, 3);
    eg_function_stats stats;
    assert_int_equal(eg_function_stats_get(f, &stats), EG_OK);
    assert_int_equal(stats.n_traces, 1);
    assert_int_equal(stats.n_replays, 3); /* the first call runs its fresh trace too */
    eg_function_free(f);
}

/* ---- what the tape records, and when ctx is freed ---- */

static void test_the_tape_records_the_node_not_the_forward_ops(void **state) {
    (void)state;
    int64_t n = 2;
    eg_tensor *x = f64_tensor(1, &n, (const double[]){0.5, 1.0});
    const eg_custom_gradient_def cube = {"cube", cube_forward, cube_backward, NULL};
    size_t records[2];
    const eg_custom_gradient_def *defs[2] = {&cube, &log1pexp}; /* 2 ops, 3 ops */
    for (int d = 0; d < 2; d++) {
        eg_tape *tape = eg_tape_begin(false);
        eg_tape_watch(tape, x);
        eg_tensor *y = NULL;
        assert_int_equal(eg_custom_gradient(defs[d], NULL, 1, &x, 1, &y), EG_OK);
        records[d] = eg_tape_n_records(tape);
        eg_tape_free(tape);
    }
    assert_true(records[0] >= 1);
    assert_true(records[0] == records[1]);
    /* inputs the tape does not track, or a no-grad region: nothing recorded */
    eg_tape *tape = eg_tape_begin(false);
    eg_tensor *y = NULL;
    assert_int_equal(eg_custom_gradient(&cube, NULL, 1, &x, 1, &y), EG_OK);
    eg_tape_watch(tape, x);
    eg_no_grad_begin();
    assert_int_equal(eg_custom_gradient(&cube, NULL, 1, &x, 1, &y), EG_OK);
    eg_no_grad_end();
    assert_int_equal(eg_tape_n_records(tape), 0);
    eg_tape_free(tape);
}

static void test_ctx_is_freed_once_when_nothing_holds_the_node(void **state) {
    (void)state;
    int64_t n = 2;
    eg_tensor *x = f64_tensor(1, &n, (const double[]){0.5, 1.0}), *y = NULL, *grad = NULL;
    eg_custom_gradient_def def = log1pexp;
    def.free_ctx = count_free;
    counters c = {0};
    /* no tape: freed as the call returns */
    assert_int_equal(eg_custom_gradient(&def, &c, 1, &x, 1, &y), EG_OK);
    assert_int_equal(c.freed, 1);
    /* a non-persistent tape: freed after its gradient */
    eg_tape *tape = eg_tape_begin(false);
    eg_tape_watch(tape, x);
    assert_int_equal(eg_custom_gradient(&def, &c, 1, &x, 1, &y), EG_OK);
    assert_int_equal(c.freed, 1);
    assert_int_equal(
        eg_tape_gradient(tape, eg_sum(y, 0, NULL, false), 1, &x, &grad, EG_UNCONNECTED_NULL),
        EG_OK);
    assert_int_equal(c.freed, 2);
    eg_tape_free(tape);
    assert_int_equal(c.freed, 2);
    /* two persistent tapes: freed with the last */
    eg_tape *first = eg_tape_begin(true), *second = eg_tape_begin(true);
    eg_tape_watch(first, x);
    eg_tape_watch(second, x);
    assert_int_equal(eg_custom_gradient(&def, &c, 1, &x, 1, &y), EG_OK);
    eg_tape_free(second);
    assert_int_equal(c.freed, 2);
    eg_tape_free(first);
    assert_int_equal(c.freed, 3);
    /* a failed call frees it too */
    def.forward = NULL;
    assert_int_not_equal(eg_custom_gradient(&def, &c, 1, &x, 1, &y), EG_OK);
    expect_error(EG_ERR_NULL_ARGUMENT);
    assert_null(y);
    assert_int_equal(c.freed, 4);
}

/* ---- errors ---- */

static eg_status matmul_forward(int n_inputs, eg_tensor *const *inputs, int n_outputs,
                                eg_tensor **outputs, void *ctx) {
    (void)n_inputs, (void)n_outputs, (void)ctx;
    outputs[0] = eg_matmul(inputs[0], inputs[0]); /* (2, 3) x (2, 3) */
    return result_status(outputs, 1);
}

static eg_status refusing_forward(int n_inputs, eg_tensor *const *inputs, int n_outputs,
                                  eg_tensor **outputs, void *ctx) {
    (void)n_inputs, (void)n_outputs, (void)ctx;
    outputs[0] = eg_neg(inputs[0]); /* made, then refused: the library releases it */
    return EG_ERR_INVALID_ARGUMENT;
}

static eg_status half_forward(int n_inputs, eg_tensor *const *inputs, int n_outputs,
                              eg_tensor **outputs, void *ctx) {
    (void)n_inputs, (void)n_outputs, (void)ctx;
    outputs[0] = eg_neg(inputs[0]); /* output 1 left NULL */
    return EG_OK;
}

static eg_status failing_backward(int n_inputs, eg_tensor *const *inputs, int n_outputs,
                                  eg_tensor *const *outputs, eg_tensor *const *output_grads,
                                  eg_tensor **input_grads, void *ctx) {
    (void)n_inputs, (void)n_outputs, (void)outputs, (void)ctx, (void)output_grads;
    input_grads[0] = eg_matmul(inputs[0], inputs[0]);
    return result_status(input_grads, 1);
}

static void test_callback_errors_carry_their_message(void **state) {
    (void)state;
    eg_tensor *x = f64_tensor(2, pair_shape, pair_x), *out[2] = {0};
    eg_tensor *in[1] = {x};
    const eg_custom_gradient_def bad_forward = {"bad_forward", matmul_forward, cube_backward, NULL};
    assert_int_equal(eg_custom_gradient(&bad_forward, NULL, 1, in, 1, out), EG_ERR_SHAPE);
    expect_error_containing(EG_ERR_SHAPE, "custom_gradient 'bad_forward': forward: matmul",
                            "test_custom_gradient.c", NULL);
    assert_null(out[0]);

    const eg_custom_gradient_def refusing = {NULL, refusing_forward, cube_backward, NULL};
    assert_int_equal(eg_custom_gradient(&refusing, NULL, 1, in, 1, out), EG_ERR_INVALID_ARGUMENT);
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "custom_gradient 'custom_gradient'",
                            "the forward returned 'invalid argument' without raising", NULL);
    assert_null(out[0]);

    const eg_custom_gradient_def half = {"half", half_forward, cube_backward, NULL};
    assert_int_equal(eg_custom_gradient(&half, NULL, 1, in, 2, out), EG_ERR_STATE);
    expect_error_containing(EG_ERR_STATE, "'half'", "output 1 NULL", NULL);
    assert_null(out[0]);
    assert_null(out[1]);

    /* the backward's error comes out of eg_tape_gradient, with no gradient */
    const eg_custom_gradient_def bad_backward = {"bad_backward", cube_forward, failing_backward,
                                                 NULL};
    eg_tape *tape = eg_tape_begin(false);
    eg_tape_watch(tape, x);
    assert_int_equal(eg_custom_gradient(&bad_backward, NULL, 1, in, 1, out), EG_OK);
    eg_tensor *grad = NULL;
    assert_int_equal(
        eg_tape_gradient(tape, eg_sum(out[0], 0, NULL, false), 1, in, &grad, EG_UNCONNECTED_NULL),
        EG_ERR_SHAPE);
    expect_error_containing(EG_ERR_SHAPE, "custom_gradient 'bad_backward': backward: matmul", NULL);
    assert_null(grad);
    eg_tape_free(tape);

    /* arguments */
    assert_int_equal(eg_custom_gradient(NULL, NULL, 1, in, 1, out), EG_ERR_NULL_ARGUMENT);
    expect_error(EG_ERR_NULL_ARGUMENT);
    assert_int_equal(eg_custom_gradient(&log1pexp, NULL, 1, in, 0, out), EG_ERR_INVALID_ARGUMENT);
    expect_error(EG_ERR_INVALID_ARGUMENT);
    eg_tensor *missing[1] = {NULL};
    assert_int_equal(eg_custom_gradient(&log1pexp, NULL, 1, missing, 1, out), EG_ERR_NULL_ARGUMENT);
    expect_error(EG_ERR_NULL_ARGUMENT);
}

/* Gives input 1 a gradient of the wrong shape (mode 0) or input 0 one of the wrong dtype. */
static eg_status wrong_backward(int n_inputs, eg_tensor *const *inputs, int n_outputs,
                                eg_tensor *const *outputs, eg_tensor *const *output_grads,
                                eg_tensor **input_grads, void *ctx) {
    (void)n_inputs, (void)n_outputs, (void)outputs, (void)output_grads;
    int64_t three = 3;
    if (*(int *)ctx == 0) {
        input_grads[0] = eg_full_like(inputs[0], 1.0);
        input_grads[1] = eg_zeros(EG_DTYPE_F64, 1, &three);
    } else {
        input_grads[0] = eg_cast(inputs[0], EG_DTYPE_F32);
    }
    return EG_OK;
}

static eg_status sum_forward(int n_inputs, eg_tensor *const *inputs, int n_outputs,
                             eg_tensor **outputs, void *ctx) {
    (void)n_inputs, (void)n_outputs, (void)ctx;
    outputs[0] = eg_add(inputs[0], inputs[1]);
    return result_status(outputs, 1);
}

static void test_a_gradient_of_the_wrong_shape_or_dtype_names_its_input(void **state) {
    (void)state;
    int64_t n = 2;
    eg_tensor *in[2] = {f64_tensor(1, &n, (const double[]){1, 2}),
                        f64_tensor(1, &n, (const double[]){3, 4})};
    const eg_custom_gradient_def wrong = {"wrong", sum_forward, wrong_backward, NULL};
    const eg_status expected[2] = {EG_ERR_SHAPE, EG_ERR_DTYPE};
    const char *names[2] = {"gradient for input 1 has shape", "gradient for input 0 is f32"};
    for (int mode = 0; mode < 2; mode++) {
        eg_tape *tape = eg_tape_begin(false);
        eg_tape_watch(tape, in[0]);
        eg_tape_watch(tape, in[1]);
        eg_tensor *y = NULL, *grads[2] = {0};
        assert_int_equal(eg_custom_gradient(&wrong, &mode, 2, in, 1, &y), EG_OK);
        assert_int_equal(
            eg_tape_gradient(tape, eg_sum(y, 0, NULL, false), 2, in, grads, EG_UNCONNECTED_NULL),
            expected[mode]);
        expect_error_containing(expected[mode], "custom_gradient 'wrong'", names[mode], NULL);
        assert_null(grads[0]);
        assert_null(grads[1]);
        eg_tape_free(tape);
    }
}

int main(int argc, char **argv) {
    const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, fresh_scope_setup, strict_scope_teardown)
        T(test_log1pexp_gradient_is_finite_where_the_op_chain_gives_nan),
        T(test_clipping_identity_clips_gradients_only),
        T(test_central_differences_agree_with_the_custom_backward),
        T(test_an_output_no_gradient_reaches_gets_zeros),
        T(test_second_order_through_nested_tapes),
        T(test_eager_lazy_and_graph_agree),
        T(test_the_tape_records_the_node_not_the_forward_ops),
        T(test_ctx_is_freed_once_when_nothing_holds_the_node),
        T(test_callback_errors_carry_their_message),
        T(test_a_gradient_of_the_wrong_shape_or_dtype_names_its_input),
#undef T
    };
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
