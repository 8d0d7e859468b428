/* Embedding, LSTM and GRU layers: outputs against plain-C references computed from the layers'
 * own variables (Keras' layouts and formulas), masks against unpadded runs, states, gradients by
 * central differences in f64, the three execution modes, the orthogonal initializer, and the
 * errors bad input gets. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "test_util.h"

enum { B = 2, T = 4, F = 3, H = 5 };

static double sigmoid(double x) {
    return 1.0 / (1.0 + exp(-x));
}

/* A tensor's values as doubles (any float dtype), malloc'ed. */
static double *values_of(const eg_tensor *t) {
    eg_tensor *wide = eg_cast(t, EG_DTYPE_F64);
    assert_non_null(wide);
    size_t n = (size_t)eg_tensor_n_elems(wide);
    double *v = malloc(n * sizeof *v);
    assert_non_null(v);
    assert_int_equal(eg_tensor_copy_to_host(wide, v, n * sizeof *v), EG_OK);
    eg_release(wide);
    return v;
}

static eg_tensor *uniform(eg_dtype dtype, int n_dims, const int64_t *shape, uint64_t seed) {
    eg_generator *g = eg_generator_new(seed);
    eg_tensor *t = eg_random_uniform(g, dtype, n_dims, shape, -1, 1);
    eg_generator_free(g);
    assert_non_null(t);
    return t;
}

/* The reference run of an LSTM (gates i f c o) or GRU (z r h, reset after) over x (B, T, F),
 * steps where keep[b][t] is false leaving state and output unchanged; out gets every step's
 * output (B, T, H) in processing order, h and c the final states. */
static void reference_rnn(bool lstm, const double *x, const double *kernel, const double *rec,
                          const double *bias, const bool *keep, bool backwards, double *out,
                          double *h_final, double *c_final) {
    int gates = lstm ? 4 : 3;
    for (int b = 0; b < B; b++) {
        double h[H] = {0}, c[H] = {0}, last[H] = {0};
        for (int k = 0; k < T; k++) {
            int t = backwards ? T - 1 - k : k;
            double xp[4 * H], hp[4 * H];
            for (int j = 0; j < gates * H; j++) {
                xp[j] = bias ? bias[j] : 0;
                hp[j] = bias && !lstm ? bias[gates * H + j] : 0;
                for (int f = 0; f < F; f++)
                    xp[j] += x[(b * T + t) * F + f] * kernel[f * gates * H + j];
                for (int u = 0; u < H; u++) hp[j] += h[u] * rec[u * gates * H + j];
            }
            double hn[H], cn[H];
            for (int j = 0; j < H; j++) {
                if (lstm) {
                    double i = sigmoid(xp[j] + hp[j]), f = sigmoid(xp[H + j] + hp[H + j]);
                    double g = tanh(xp[2 * H + j] + hp[2 * H + j]);
                    double o = sigmoid(xp[3 * H + j] + hp[3 * H + j]);
                    cn[j] = f * c[j] + i * g;
                    hn[j] = o * tanh(cn[j]);
                } else {
                    double z = sigmoid(xp[j] + hp[j]), r = sigmoid(xp[H + j] + hp[H + j]);
                    double n = tanh(xp[2 * H + j] + r * hp[2 * H + j]);
                    hn[j] = z * h[j] + (1 - z) * n;
                    cn[j] = 0;
                }
            }
            bool on = !keep || keep[b * T + t];
            for (int j = 0; j < H; j++) {
                if (on) {
                    h[j] = hn[j];
                    c[j] = cn[j];
                    last[j] = hn[j];
                }
                out[(b * T + k) * H + j] = last[j];
            }
        }
        for (int j = 0; j < H; j++) {
            h_final[b * H + j] = h[j];
            c_final[b * H + j] = c[j];
        }
    }
}

static void assert_close(const double *got, const double *want, size_t n, double tolerance) {
    for (size_t i = 0; i < n; i++)
        if (!(fabs(got[i] - want[i]) <= tolerance * (1 + fabs(want[i]))))
            fail_msg("element %zu is %.9g, expected %.9g", i, got[i], want[i]);
}

static eg_layer *new_rnn(bool lstm, bool sequences, bool backwards, eg_dtype dtype) {
    eg_rnn_options o = eg_rnn_options_default();
    o.return_sequences = sequences;
    o.go_backwards = backwards;
    o.dtype = dtype;
    /* a bias that is not zero, so that its layout is checked too */
    o.bias_initializer = eg_initializer_random_uniform(-0.5, 0.5);
    eg_layer *layer = lstm ? eg_lstm_new(H, &o) : eg_gru_new(H, &o);
    assert_non_null(layer);
    return layer;
}

/* Runs the layer through eg_rnn_call and compares output and states with the reference. */
static void check_against_reference(bool lstm, bool sequences, bool backwards, const bool *keep) {
    eg_manual_seed(7);
    eg_layer *layer = new_rnn(lstm, sequences, backwards, EG_DTYPE_F32);
    int64_t xs[3] = {B, T, F};
    eg_tensor *x = uniform(EG_DTYPE_F32, 3, xs, 3);
    eg_tensor *mask = NULL;
    if (keep) {
        int64_t ms[2] = {B, T};
        mask = eg_tensor_from_data(keep, EG_DTYPE_BOOL, 2, ms);
    }
    eg_tensor *y = NULL, *states[2] = {NULL, NULL};
    assert_int_equal(eg_rnn_call(layer, x, mask, NULL, false, &y, states), EG_OK);
    assert_int_equal(eg_rnn_state_count(layer), lstm ? 2 : 1);
    int n_vars = 0;
    eg_tensor *const *vars = eg_layer_variables(layer, &n_vars);
    assert_int_equal(n_vars, 3);
    double *xv = values_of(x), *kernel = values_of(vars[0]), *rec = values_of(vars[1]);
    double *bias = values_of(vars[2]);
    double out[B * T * H], h[B * H], c[B * H];
    reference_rnn(lstm, xv, kernel, rec, bias, keep, backwards, out, h, c);
    double *got = values_of(y), *got_h = values_of(states[0]);
    if (sequences) {
        assert_int_equal(eg_tensor_n_dims(y), 3);
        assert_close(got, out, B * T * H, 1e-5);
    } else {
        assert_int_equal(eg_tensor_n_dims(y), 2);
        double final_out[B * H];
        for (int b = 0; b < B; b++)
            for (int j = 0; j < H; j++) final_out[b * H + j] = out[(b * T + T - 1) * H + j];
        assert_close(got, final_out, B * H, 1e-5);
    }
    assert_close(got_h, h, B * H, 1e-5);
    if (lstm) {
        double *got_c = values_of(states[1]);
        assert_close(got_c, c, B * H, 1e-5);
        free(got_c);
    }
    free(got_h);
    free(got);
    free(bias);
    free(rec);
    free(kernel);
    free(xv);
    eg_layer_free(layer);
}

static void test_lstm_matches_keras_formulas(void **state) {
    (void)state;
    check_against_reference(true, false, false, NULL);
    check_against_reference(true, true, false, NULL);
    check_against_reference(true, true, true, NULL);
}

static void test_gru_matches_keras_formulas(void **state) {
    (void)state;
    check_against_reference(false, false, false, NULL);
    check_against_reference(false, true, false, NULL);
    check_against_reference(false, false, true, NULL);
}

static void test_masked_steps_keep_the_state(void **state) {
    (void)state;
    /* post-padding, a gap in the middle, and a row masked from the start */
    static const bool keep[B * T] = {true, true, false, false, false, true, false, true};
    check_against_reference(true, true, false, keep);
    check_against_reference(true, false, false, keep);
    check_against_reference(false, true, true, keep);
    check_against_reference(false, false, false, keep);
}

/* Keras' defaults: the forget gate's bias starts at 1, the rest at 0; the recurrent kernel is
 * orthogonal per gate-wide matrix (units, 4 units): its rows are orthonormal. */
/* Bidirectional: the forward half as the reference runs forward, the backward half as it runs
 * backwards with the second set of weights, its sequence put back in time order. */
static void check_bidirectional(bool lstm, bool sequences, const bool *keep) {
    eg_manual_seed(8);
    eg_layer *inner = new_rnn(lstm, sequences, false, EG_DTYPE_F32);
    eg_layer *bidi = eg_bidirectional_new(inner, NULL);
    assert_non_null(bidi);
    int64_t xs[3] = {B, T, F}, ms[2] = {B, T};
    eg_tensor *x = uniform(EG_DTYPE_F32, 3, xs, 21);
    eg_tensor *mask = keep ? eg_tensor_from_data(keep, EG_DTYPE_BOOL, 2, ms) : NULL;
    eg_tensor *y = NULL, *states[4] = {NULL};
    assert_int_equal(eg_rnn_call(bidi, x, mask, NULL, false, &y, states), EG_OK);
    assert_int_equal(eg_rnn_state_count(bidi), lstm ? 4 : 2);
    assert_int_equal(eg_tensor_shape(y)[eg_tensor_n_dims(y) - 1], 2 * H);
    int n = 0;
    eg_tensor *const *vars = eg_layer_variables(bidi, &n);
    assert_int_equal(n, 6);
    assert_string_equal(eg_variable_name(vars[3]), "bidirectional/backward_kernel");
    double *xv = values_of(x), *got = values_of(y);
    for (int dir = 0; dir < 2; dir++) {
        double *kernel = values_of(vars[3 * dir]), *rec = values_of(vars[3 * dir + 1]);
        double *bias = values_of(vars[3 * dir + 2]);
        double out[B * T * H], h[B * H], c[B * H];
        reference_rnn(lstm, xv, kernel, rec, bias, keep, dir == 1, out, h, c);
        for (int b = 0; b < B; b++)
            for (int j = 0; j < H; j++) {
                if (!sequences) {
                    double want = out[(b * T + T - 1) * H + j];
                    double have = got[b * 2 * H + dir * H + j];
                    if (!(fabs(have - want) <= 1e-5))
                        fail_msg("dir %d: %.9g, expected %.9g", dir, have, want);
                    continue;
                }
                for (int t = 0; t < T; t++) {
                    int k = dir == 1 ? T - 1 - t : t; /* the backward run's step for time t */
                    double want = out[(b * T + k) * H + j];
                    double have = got[(b * T + t) * 2 * H + dir * H + j];
                    if (!(fabs(have - want) <= 1e-5))
                        fail_msg("dir %d t %d: %.9g, expected %.9g", dir, t, have, want);
                }
            }
        double *got_h = values_of(states[dir * (lstm ? 2 : 1)]);
        assert_close(got_h, h, B * H, 1e-5);
        free(got_h);
        free(kernel);
        free(rec);
        free(bias);
    }
    free(xv);
    free(got);
    eg_layer_free(bidi);
}

static void test_bidirectional(void **state) {
    (void)state;
    static const bool keep[B * T] = {true, true, true, false, true, true, false, true};
    check_bidirectional(true, true, NULL);
    check_bidirectional(true, false, keep);
    check_bidirectional(false, true, keep);
    check_bidirectional(false, false, NULL);
    eg_layer *built = eg_lstm_new(H, NULL);
    assert_int_equal(eg_layer_build(built, 3, (const int64_t[]){-1, T, F}), EG_OK);
    assert_null(eg_bidirectional_new(built, NULL)); /* consumed: freed */
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "unbuilt LSTM or GRU", NULL);
}

static void test_lstm_default_variables(void **state) {
    (void)state;
    eg_layer *layer = eg_lstm_new(H, NULL);
    int64_t shape[3] = {-1, T, F};
    assert_int_equal(eg_layer_build(layer, 3, shape), EG_OK);
    int n = 0;
    eg_tensor *const *vars = eg_layer_variables(layer, &n);
    assert_int_equal(n, 3);
    assert_string_equal(eg_variable_name(vars[0]), "lstm/kernel");
    assert_string_equal(eg_variable_name(vars[1]), "lstm/recurrent_kernel");
    assert_string_equal(eg_variable_name(vars[2]), "lstm/bias");
    assert_int_equal(eg_tensor_shape(vars[0])[1], 4 * H);
    double *bias = values_of(vars[2]), *rec = values_of(vars[1]);
    for (int j = 0; j < 4 * H; j++) assert_true(bias[j] == (j >= H && j < 2 * H ? 1.0 : 0.0));
    for (int a = 0; a < H; a++)
        for (int b = 0; b < H; b++) {
            double dot = 0;
            for (int j = 0; j < 4 * H; j++) dot += rec[a * 4 * H + j] * rec[b * 4 * H + j];
            assert_true(fabs(dot - (a == b)) < 1e-5);
        }
    free(bias);
    free(rec);
    eg_layer_free(layer);
}

static void test_orthogonal_initializer(void **state) {
    (void)state;
    static const int64_t shapes[3][3] = {{7, 3, 0}, {3, 7, 0}, {2, 3, 4}};
    static const int n_dims[3] = {2, 2, 3};
    for (int s = 0; s < 3; s++) {
        eg_initializer init = eg_initializer_of(EG_INITIALIZER_ORTHOGONAL);
        eg_tensor *q = eg_initializer_generate(&init, NULL, EG_DTYPE_F64, n_dims[s], shapes[s]);
        assert_non_null(q);
        int64_t cols = shapes[s][n_dims[s] - 1], rows = eg_tensor_n_elems(q) / cols;
        double *v = values_of(q);
        /* the shorter side is orthonormal */
        int64_t n = rows < cols ? rows : cols, len = rows < cols ? cols : rows;
        for (int64_t a = 0; a < n; a++)
            for (int64_t b = 0; b < n; b++) {
                double dot = 0;
                for (int64_t k = 0; k < len; k++)
                    dot += rows >= cols ? v[k * cols + a] * v[k * cols + b]
                                        : v[a * cols + k] * v[b * cols + k];
                assert_true(fabs(dot - (a == b)) < 1e-12);
            }
        free(v);
    }
    eg_initializer init = eg_initializer_of(EG_INITIALIZER_ORTHOGONAL);
    int64_t one = 4;
    assert_null(eg_initializer_generate(&init, NULL, EG_DTYPE_F32, 1, &one));
    expect_error_containing(EG_ERR_SHAPE, "orthogonal", NULL);
}

/* Embedding(mask_zero) -> LSTM in a Sequential: padded rows give what the unpadded rows give. */
static void test_sequential_hands_the_embedding_mask_on(void **state) {
    (void)state;
    for (int lstm = 0; lstm < 2; lstm++) {
        eg_manual_seed(11);
        eg_model *model = eg_sequential_new("masked");
        eg_embedding_options eo = eg_embedding_options_default();
        eo.mask_zero = true;
        assert_int_equal(eg_sequential_add(model, eg_embedding_new(10, F, &eo)), EG_OK);
        assert_int_equal(
            eg_sequential_add(model, lstm ? eg_lstm_new(H, NULL) : eg_gru_new(H, NULL)), EG_OK);
        static const int32_t padded[2 * 5] = {3, 1, 4, 0, 0, 2, 7, 0, 0, 0};
        static const int64_t lengths[2] = {3, 2};
        int64_t ps[2] = {2, 5};
        eg_tensor *ids = eg_tensor_from_data(padded, EG_DTYPE_I32, 2, ps);
        eg_tensor *y = eg_model_call(model, ids, false);
        assert_non_null(y);
        double *batch = values_of(y);
        for (int b = 0; b < 2; b++) {
            int64_t rs[2] = {1, lengths[b]};
            eg_tensor *row = eg_tensor_from_data(padded + 5 * b, EG_DTYPE_I32, 2, rs);
            eg_tensor *alone = eg_model_call(model, row, false);
            assert_non_null(alone);
            double *v = values_of(alone);
            assert_close(batch + b * H, v, H, 1e-6);
            free(v);
        }
        free(batch);
        eg_model_free(model);
    }
}

/* d sum(W * y) / d (x, variables) against central differences, f64, with a mask. */
static double weighted_output(eg_layer *layer, const eg_tensor *x, const eg_tensor *mask,
                              const eg_tensor *w) {
    eg_scope_begin();
    eg_tensor *y = NULL;
    assert_int_equal(eg_rnn_call(layer, x, mask, NULL, true, &y, NULL), EG_OK);
    double value = eg_item(eg_sum(eg_mul(y, w), 0, NULL, false));
    eg_scope_end();
    return value;
}

/* With a mask the layer runs step by step; an LSTM without one runs as one node of the tape. */
static void check_gradients(bool lstm, bool sequences, bool masked, bool backwards) {
    eg_manual_seed(5);
    eg_layer *layer = new_rnn(lstm, sequences, backwards, EG_DTYPE_F64);
    int64_t xs[3] = {B, T, F}, ms[2] = {B, T};
    eg_tensor *x = uniform(EG_DTYPE_F64, 3, xs, 9);
    static const bool keep[B * T] = {true, true, true, false, true, false, true, true};
    eg_tensor *mask = masked ? eg_tensor_from_data(keep, EG_DTYPE_BOOL, 2, ms) : NULL;
    eg_tensor *y = NULL;
    assert_int_equal(eg_rnn_call(layer, x, mask, NULL, true, &y, NULL), EG_OK);
    eg_tensor *w = uniform(EG_DTYPE_F64, eg_tensor_n_dims(y), eg_tensor_shape(y), 13);
    int n_vars = 0;
    eg_tensor *const *vars = eg_layer_variables(layer, &n_vars);
    eg_tensor *sources[4] = {x, vars[0], vars[1], vars[2]};
    eg_tape *tape = eg_tape_begin(false);
    eg_tape_watch(tape, x);
    eg_tensor *y2 = NULL;
    assert_int_equal(eg_rnn_call(layer, x, mask, NULL, true, &y2, NULL), EG_OK);
    eg_tensor *loss = eg_sum(eg_mul(y2, w), 0, NULL, false);
    eg_tensor *grads[4] = {NULL};
    assert_int_equal(eg_tape_gradient(tape, loss, 4, sources, grads, EG_UNCONNECTED_ZERO), EG_OK);
    eg_tape_free(tape);
    int checked = 0;
    for (int s = 0; s < 4; s++) {
        double *g = values_of(grads[s]);
        double *data = eg_tensor_data(sources[s]);
        int64_t n = eg_tensor_n_elems(sources[s]);
        for (int64_t i = 0; i < n; i += 3) { /* every third element keeps the test short */
            double keep_value = data[i], h = 1e-6;
            data[i] = keep_value + h;
            double up = weighted_output(layer, x, mask, w);
            data[i] = keep_value - h;
            double down = weighted_output(layer, x, mask, w);
            data[i] = keep_value;
            double numeric = (up - down) / (2 * h);
            if (!(fabs(g[i] - numeric) <= 1e-6 * (1 + fabs(numeric))))
                fail_msg("%s source %d element %lld: analytic %.12g, numeric %.12g",
                         lstm ? "lstm" : "gru", s, (long long)i, g[i], numeric);
            checked++;
        }
        free(g);
    }
    assert_true(checked > 40);
    eg_layer_free(layer);
}

static void test_gradients_by_central_differences(void **state) {
    (void)state;
    check_gradients(true, true, true, false);
    check_gradients(true, false, true, false);
    check_gradients(false, true, true, false);
    check_gradients(false, false, true, false);
    check_gradients(true, true, false, false);
    check_gradients(true, false, false, true);
    check_gradients(false, true, false, false);
    check_gradients(false, false, false, true);
}

/* One recurrent call's outputs and the gradients of sum(y w) + sum(h w_h) + sum(c w_c) for x, the
 * variables and the initial states, every value of them in *values (malloc'ed). */
static size_t rnn_results(eg_layer *layer, eg_tensor *x, const eg_tensor *mask,
                          eg_tensor *const *initial, double **values) {
    eg_scope_begin();
    int n_states = eg_rnn_state_count(layer), n_vars = 0;
    eg_tape *tape = eg_tape_begin(false);
    eg_tape_watch(tape, x);
    for (int i = 0; i < n_states; i++) eg_tape_watch(tape, initial[i]);
    eg_tensor *y = NULL, *final[4] = {NULL};
    assert_int_equal(eg_rnn_call(layer, x, mask, initial, true, &y, final), EG_OK);
    eg_tensor *loss =
        eg_sum(eg_mul(y, uniform(EG_DTYPE_F64, eg_tensor_n_dims(y), eg_tensor_shape(y), 21)), 0,
               NULL, false);
    for (int i = 0; i < n_states; i++)
        loss = eg_add(loss, eg_sum(eg_mul(final[i], uniform(EG_DTYPE_F64, 2,
                                                            eg_tensor_shape(final[i]), 22 + i)),
                                   0, NULL, false));
    eg_tensor *const *vars = eg_layer_variables(layer, &n_vars);
    eg_tensor *sources[12] = {x};
    int n_sources = 1;
    for (int i = 0; i < n_vars; i++) sources[n_sources++] = vars[i];
    for (int i = 0; i < n_states; i++) sources[n_sources++] = initial[i];
    eg_tensor *grads[12] = {NULL};
    assert_int_equal(eg_tape_gradient(tape, loss, n_sources, sources, grads, EG_UNCONNECTED_ZERO),
                     EG_OK);
    eg_tape_free(tape);
    eg_tensor *parts[16] = {y};
    int n_parts = 1;
    for (int i = 0; i < n_states; i++) parts[n_parts++] = final[i];
    for (int i = 0; i < n_sources; i++) parts[n_parts++] = grads[i];
    size_t total = 0;
    for (int i = 0; i < n_parts; i++) total += (size_t)eg_tensor_n_elems(parts[i]);
    *values = malloc(total * sizeof **values);
    assert_non_null(*values);
    size_t at = 0;
    for (int i = 0; i < n_parts; i++) {
        double *v = values_of(parts[i]);
        size_t n = (size_t)eg_tensor_n_elems(parts[i]);
        for (size_t k = 0; k < n; k++) (*values)[at + k] = v[k];
        at += n;
        free(v);
    }
    eg_scope_end();
    return total;
}

/* The LSTM and GRU run as one node (no mask) against the step-by-step run (a mask that keeps
 * every step): outputs, final states and every gradient, forwards, backwards and Bidirectional. */
static void test_one_node_matches_the_steps(void **state) {
    (void)state;
    for (int variant = 0; variant < 10; variant++) {
        bool lstm = variant < 5, sequences = variant % 2 == 0;
        bool backwards = variant % 5 == 1 || variant % 5 == 2;
        eg_manual_seed(11);
        eg_layer *layer = new_rnn(lstm, sequences, backwards, EG_DTYPE_F64);
        if (variant % 5 == 4) layer = eg_bidirectional_new(layer, NULL);
        int64_t xs[3] = {B, T, F}, ss[2] = {B, H}, ms[2] = {B, T};
        eg_tensor *x = uniform(EG_DTYPE_F64, 3, xs, 31);
        eg_tensor *initial[4];
        for (int i = 0; i < 4; i++) initial[i] = uniform(EG_DTYPE_F64, 2, ss, 40 + i);
        static const bool all[B * T] = {true, true, true, true, true, true, true, true};
        eg_tensor *keep_all = eg_tensor_from_data(all, EG_DTYPE_BOOL, 2, ms);
        double *node = NULL, *steps = NULL;
        size_t n = rnn_results(layer, x, NULL, initial, &node);
        assert_int_equal(rnn_results(layer, x, keep_all, initial, &steps), n);
        assert_true(n > 100);
        assert_close(node, steps, n, 1e-12);
        free(node);
        free(steps);
        eg_layer_free(layer);
    }
}

/* A gradient of a gradient through the one-node LSTM and GRU: d sum(V * dL/dU) / dx against central
 * differences of the first-order gradient (the node recomputes its steps when a tape records
 * its backward). */
static double gradient_objective(eg_layer *layer, const eg_tensor *x, const eg_tensor *w,
                                 const eg_tensor *v, eg_tensor **objective) {
    eg_tape *tape = eg_tape_begin(false);
    eg_tape_watch(tape, x);
    eg_tensor *y = NULL;
    assert_int_equal(eg_rnn_call(layer, x, NULL, NULL, true, &y, NULL), EG_OK);
    int n_vars = 0;
    eg_tensor *const *vars = eg_layer_variables(layer, &n_vars);
    eg_tensor *loss = eg_sum(eg_mul(y, w), 0, NULL, false);
    eg_tensor *grad = NULL;
    assert_int_equal(eg_tape_gradient(tape, loss, 1, &vars[1], &grad, EG_UNCONNECTED_ZERO), EG_OK);
    eg_tape_free(tape);
    *objective = eg_sum(eg_mul(grad, v), 0, NULL, false);
    return eg_item(*objective);
}

static void check_gradient_of_gradient(bool lstm) {
    eg_manual_seed(3);
    eg_layer *layer = new_rnn(lstm, true, false, EG_DTYPE_F64);
    int64_t xs[3] = {B, T, F}, ys[3] = {B, T, H}, us[2] = {H, (lstm ? 4 : 3) * H};
    eg_tensor *x = uniform(EG_DTYPE_F64, 3, xs, 51);
    eg_tensor *w = uniform(EG_DTYPE_F64, 3, ys, 52), *v = uniform(EG_DTYPE_F64, 2, us, 53);
    eg_tensor *objective = NULL;
    eg_tape *outer = eg_tape_begin(false);
    eg_tape_watch(outer, x);
    gradient_objective(layer, x, w, v, &objective);
    eg_tensor *second = NULL;
    assert_int_equal(eg_tape_gradient(outer, objective, 1, &x, &second, EG_UNCONNECTED_ZERO),
                     EG_OK);
    eg_tape_free(outer);
    double *g = values_of(second), *data = eg_tensor_data(x);
    for (int64_t i = 0; i < B * T * F; i++) {
        double keep = data[i], h = 1e-5;
        eg_scope_begin();
        eg_tensor *unused = NULL;
        data[i] = keep + h;
        double up = gradient_objective(layer, x, w, v, &unused);
        data[i] = keep - h;
        double down = gradient_objective(layer, x, w, v, &unused);
        data[i] = keep;
        eg_scope_end();
        double numeric = (up - down) / (2 * h);
        if (!(fabs(g[i] - numeric) <= 1e-6 * (1 + fabs(numeric))))
            fail_msg("%s element %lld: analytic %.12g, numeric %.12g", lstm ? "lstm" : "gru",
                     (long long)i, g[i], numeric);
    }
    free(g);
    eg_layer_free(layer);
}

static void test_gradient_of_gradient(void **state) {
    (void)state;
    check_gradient_of_gradient(true);
    check_gradient_of_gradient(false);
}

/* Eager, lazy and graph runs of one training step's loss and gradients agree. */
typedef struct step_context {
    eg_model *model;
} step_context;

static eg_status loss_and_gradients(eg_tensor *const *in, eg_tensor **out, void *data) {
    step_context *ctx = data;
    eg_tape *tape = eg_tape_begin(false);
    eg_tensor *y = eg_model_call(ctx->model, in[0], true);
    eg_tensor *loss = eg_sum(eg_square(y), 0, NULL, false);
    int n = 0;
    eg_tensor *const *vars = eg_model_trainable_variables(ctx->model, &n);
    eg_tensor *grads[8] = {NULL};
    eg_status status = eg_tape_gradient(tape, loss, n, vars, grads, EG_UNCONNECTED_ZERO);
    eg_tape_free(tape);
    out[0] = loss;
    out[1] = status == EG_OK ? eg_sum(eg_square(grads[0]), 0, NULL, false) : NULL;
    out[2] = status == EG_OK ? eg_sum(eg_square(grads[n - 1]), 0, NULL, false) : NULL;
    return eg_last_status();
}

static void test_three_modes_agree(void **state) {
    (void)state;
    eg_manual_seed(3);
    step_context ctx = {eg_sequential_new("text")};
    eg_embedding_options eo = eg_embedding_options_default();
    eo.mask_zero = true;
    eg_rnn_options ro = eg_rnn_options_default();
    ro.return_sequences = true;
    assert_int_equal(eg_sequential_add(ctx.model, eg_embedding_new(12, F, &eo)), EG_OK);
    assert_int_equal(eg_sequential_add(ctx.model, eg_gru_new(H, &ro)), EG_OK);
    assert_int_equal(eg_sequential_add(ctx.model, eg_lstm_new(H, NULL)), EG_OK);
    static const int64_t ids_data[B * T] = {5, 2, 0, 0, 1, 11, 3, 0};
    int64_t is[2] = {B, T};
    eg_tensor *ids = eg_tensor_from_data(ids_data, EG_DTYPE_I64, 2, is);
    double results[3][3];
    for (int mode = 0; mode < 3; mode++) {
        eg_tensor *out[3] = {NULL};
        if (mode == 0) {
            assert_int_equal(loss_and_gradients(&ids, out, &ctx), EG_OK);
        } else if (mode == 1) {
            eg_lazy_begin();
            assert_int_equal(loss_and_gradients(&ids, out, &ctx), EG_OK);
            assert_int_equal(eg_lazy_end(), EG_OK);
            assert_int_equal(eg_realize(3, out), EG_OK);
        } else {
            eg_function *f = eg_function_new("text_step", loss_and_gradients, 1, 3, &ctx);
            assert_int_equal(eg_function_call(f, &ids, out), EG_OK);
            for (int k = 0; k < 3; k++) results[mode][k] = eg_item(out[k]);
            for (int k = 0; k < 3; k++) eg_release(out[k]);
            assert_int_equal(eg_function_call(f, &ids, out), EG_OK); /* the replay */
            eg_function_free(f);
        }
        for (int k = 0; k < 3; k++) {
            results[mode][k] = eg_item(out[k]);
            eg_release(out[k]);
        }
    }
    for (int mode = 1; mode < 3; mode++)
        for (int k = 0; k < 3; k++)
            if (!(fabs(results[mode][k] - results[0][k]) <= 1e-6 * fabs(results[0][k])))
                fail_msg("mode %d result %d: %.9g, eager %.9g", mode, k, results[mode][k],
                         results[0][k]);
    assert_true(results[0][1] > 0 && results[0][2] > 0);
    eg_model_free(ctx.model);
}

/* Under mixed_bfloat16 the products round their operands to bf16 (sums in f32) and the states
 * stay f32: the output is bf16, near the f32 layer's; the one node (no mask) and the steps (a
 * mask that keeps all) compute the same values; the f32 variables get gradients near f32's. */
static void test_mixed_bfloat16_products(void **state) {
    (void)state;
    for (int lstm = 0; lstm < 2; lstm++) {
        eg_manual_seed(13);
        eg_layer *layer = new_rnn(lstm, true, false, EG_DTYPE_F32);
        int64_t xs[3] = {B, T, F}, ms[2] = {B, T};
        eg_tensor *x = uniform(EG_DTYPE_F32, 3, xs, 61);
        static const bool all[B * T] = {true, true, true, true, true, true, true, true};
        eg_tensor *keep_all = eg_tensor_from_data(all, EG_DTYPE_BOOL, 2, ms);
        eg_tensor *y[3] = {NULL}, *grads[3][3] = {{NULL}};
        for (int run = 0; run < 3; run++) { /* f32; bf16 as one node; bf16 step by step */
            if (run == 1)
                assert_int_equal(eg_layer_set_policy(layer, EG_POLICY_MIXED_BFLOAT16), EG_OK);
            eg_tape *tape = eg_tape_begin(false);
            assert_int_equal(
                eg_rnn_call(layer, x, run == 2 ? keep_all : NULL, NULL, true, &y[run], NULL),
                EG_OK);
            eg_tensor *wide = eg_cast(y[run], EG_DTYPE_F32);
            eg_tensor *loss = eg_sum(eg_square(wide), 0, NULL, false);
            int n = 0;
            eg_tensor *const *vars = eg_layer_variables(layer, &n);
            assert_int_equal(eg_tape_gradient(tape, loss, 3, vars, grads[run], EG_UNCONNECTED_ZERO),
                             EG_OK);
            eg_tape_free(tape);
            assert_int_equal(eg_tensor_dtype(y[run]), run ? EG_DTYPE_BF16 : EG_DTYPE_F32);
            y[run] = wide;
        }
        assert_all_close(y[1], y[0], 2e-2);
        assert_all_close(y[2], y[1], 0);
        for (int i = 0; i < 3; i++) {
            assert_int_equal(eg_tensor_dtype(grads[1][i]), EG_DTYPE_F32);
            assert_all_close(grads[1][i], grads[0][i], 5e-2);
            assert_all_close(grads[2][i], grads[1][i], 1e-2);
        }
        eg_layer_free(layer);
    }
}

static void test_initial_state_and_final_state(void **state) {
    (void)state;
    eg_manual_seed(2);
    eg_layer *layer = new_rnn(true, false, false, EG_DTYPE_F32);
    int64_t xs[3] = {B, T, F}, ss[2] = {B, H};
    eg_tensor *x = uniform(EG_DTYPE_F32, 3, xs, 1);
    eg_tensor *first[2] = {NULL}, *y = NULL;
    /* T steps in one call equal two calls of T/2 steps, the second starting from the first's
     * states */
    assert_int_equal(eg_rnn_call(layer, x, NULL, NULL, false, &y, first), EG_OK);
    eg_tensor *head = eg_slice(x, 1, 0, T / 2, 1), *tail = eg_slice(x, 1, T / 2, T, 1);
    eg_tensor *mid[2] = {NULL}, *end[2] = {NULL}, *y1 = NULL, *y2 = NULL;
    assert_int_equal(eg_rnn_call(layer, head, NULL, NULL, false, &y1, mid), EG_OK);
    assert_int_equal(eg_rnn_call(layer, tail, NULL, mid, false, &y2, end), EG_OK);
    double *a = values_of(y), *b = values_of(y2), *ca = values_of(first[1]),
           *cb = values_of(end[1]);
    assert_close(b, a, B * H, 1e-6);
    assert_close(cb, ca, B * H, 1e-6);
    free(a);
    free(b);
    free(ca);
    free(cb);
    eg_tensor *wrong = eg_zeros(EG_DTYPE_F32, 2, (const int64_t[]){B, H + 1});
    eg_tensor *bad[2] = {wrong, wrong};
    assert_int_equal(eg_rnn_call(layer, x, NULL, bad, false, &y, NULL), EG_ERR_SHAPE);
    expect_error_containing(EG_ERR_SHAPE, "initial state 0", NULL);
    (void)ss;
    eg_layer_free(layer);
}

static void test_bad_input_gets_clear_errors(void **state) {
    (void)state;
    eg_layer *lstm = eg_lstm_new(H, NULL);
    int64_t two[2] = {B, F}, xs[3] = {B, T, F};
    assert_null(eg_layer_call(lstm, eg_zeros(EG_DTYPE_F32, 2, two), false));
    expect_error_containing(EG_ERR_SHAPE, "(batch, time, features)", NULL);
    eg_tensor *x = eg_zeros(EG_DTYPE_F32, 3, xs);
    eg_tensor *y = NULL;
    eg_tensor *float_mask = eg_zeros(EG_DTYPE_F32, 2, (const int64_t[]){B, T});
    assert_int_equal(eg_rnn_call(lstm, x, float_mask, NULL, false, &y, NULL), EG_ERR_SHAPE);
    expect_error_containing(EG_ERR_SHAPE, "mask must be bool", NULL);
    assert_null(y);
    eg_layer *dense = eg_dense_new(3, EG_ACTIVATION_NONE);
    assert_int_equal(eg_rnn_call(dense, x, NULL, NULL, false, &y, NULL), EG_ERR_INVALID_ARGUMENT);
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "not a recurrent layer", NULL);
    assert_null(eg_lstm_new(0, NULL));
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "units must be >= 1", NULL);
    eg_rnn_options o = eg_rnn_options_default();
    o.dtype = EG_DTYPE_BF16;
    assert_null(eg_gru_new(4, &o));
    expect_error_containing(EG_ERR_DTYPE, "f32 or f64", NULL);
    eg_layer *embedding = eg_embedding_new(5, 2, NULL);
    int64_t n = 3;
    static const int32_t out_of_range[3] = {1, 5, 2};
    assert_null(
        eg_layer_call(embedding, eg_tensor_from_data(out_of_range, EG_DTYPE_I32, 1, &n), false));
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "5", NULL);
    assert_null(eg_layer_call(embedding, eg_zeros(EG_DTYPE_F32, 1, &n), false));
    expect_error_containing(EG_ERR_DTYPE, "i32 or i64 ids", NULL);
    assert_null(eg_embedding_mask(dense, x));
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "not an Embedding", NULL);
    /* no mask_zero: no mask and no error */
    assert_null(eg_embedding_mask(embedding, x));
    assert_int_equal(eg_last_status(), EG_OK);
    eg_layer_free(embedding);
    eg_layer_free(dense);
    eg_layer_free(lstm);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_lstm_matches_keras_formulas, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_gru_matches_keras_formulas, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_masked_steps_keep_the_state, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_bidirectional, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_lstm_default_variables, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_orthogonal_initializer, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_sequential_hands_the_embedding_mask_on,
                                        fresh_scope_setup, strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_gradients_by_central_differences, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_one_node_matches_the_steps, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_gradient_of_gradient, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_three_modes_agree, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_mixed_bfloat16_products, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_initial_state_and_final_state, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_bad_input_gets_clear_errors, fresh_scope_setup,
                                        strict_scope_teardown),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    eg_shutdown();
    return failed;
}
