/* Graph mode's memory: peak activation memory against eager mode's, optimizer updates run
 * inside the replay (every optimizer, several steps per call, tiles), common subexpressions,
 * and the memory budget (recomputation) — always with the same bits as eager mode, and at every
 * thread count (parallel replay). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eagle.h"

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

static eg_tensor *random_labels(int64_t batch, uint64_t seed) {
    return eg_cast(
        eg_mul_scalar(eg_add_scalar(random_tensor(EG_DTYPE_F32, 1, &batch, seed), 1.0), 4.99),
        EG_DTYPE_I32);
}

/* Dense layers fuse their relu into the product (the dense op); with this set the relu is a layer
 * of its own, an elementwise intermediate the memory budget can recompute. */
static bool separate_activations;

static eg_model *make_model(const int64_t *hidden, int n_hidden, eg_dtype dtype) {
    eg_manual_seed(321);
    eg_model *m = eg_sequential_new("mlp");
    for (int i = 0; i < n_hidden; i++) {
        if (separate_activations) {
            eg_sequential_add(m, eg_dense_new(hidden[i], EG_ACTIVATION_NONE));
            eg_sequential_add(m, eg_activation_new(EG_ACTIVATION_RELU, NULL));
        } else {
            eg_sequential_add(m, eg_dense_new(hidden[i], EG_ACTIVATION_RELU));
        }
    }
    eg_sequential_add(m, eg_dense_new(10, EG_ACTIVATION_NONE));
    int64_t input[2] = {1, 784};
    (void)dtype;
    assert_int_equal(eg_model_build(m, 2, input), EG_OK);
    return m;
}

/* ---- one step, with up to two optimizers (first layer / the rest) and a step counter ---- */

typedef struct step_context {
    eg_model *model;
    eg_optimizer *first, *rest; /* rest may be NULL: first updates everything */
    eg_tensor *counter;         /* a non-trainable variable, assigned every step (may be NULL) */
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
    if (c->counter) eg_assign_add(c->counter, eg_scalar(EG_DTYPE_F32, 1.0));
    if (c->rest) {
        eg_optimizer_apply_gradients(c->first, 2, grads, vars);
        eg_optimizer_apply_gradients(c->rest, n - 2, grads + 2, vars + 2);
    } else {
        eg_optimizer_apply_gradients(c->first, n, grads, vars);
    }
    out[0] = loss;
    return eg_last_status();
}

typedef eg_optimizer *(*optimizer_maker)(void);

static eg_optimizer *make_adam(void) {
    return eg_adam_new(NULL);
}
static eg_optimizer *make_adamw(void) {
    return eg_adamw_new(NULL);
}
static eg_optimizer *make_sgd_nesterov(void) {
    eg_sgd_options o = eg_sgd_options_default();
    o.momentum = 0.9;
    o.nesterov = true;
    o.weight_decay = 0.01;
    return eg_sgd_new(&o);
}
static eg_optimizer *make_sgd(void) {
    return eg_sgd_new(NULL);
}
static eg_optimizer *make_rmsprop(void) {
    eg_rmsprop_options o = eg_rmsprop_options_default();
    o.momentum = 0.5;
    o.centered = true;
    return eg_rmsprop_new(&o);
}

static size_t eager_step_peak(step_context *c, eg_tensor *const *in) {
    eg_memory_stats before, after;
    eg_memory_reset_peak(NULL);
    eg_memory_stats_get(NULL, &before);
    eg_scope_begin();
    eg_tensor *loss;
    assert_int_equal(train_step(in, &loss, c), EG_OK);
    eg_scope_end();
    eg_memory_stats_get(NULL, &after);
    return after.peak_bytes_in_use - before.bytes_in_use;
}

/* Trains eager and graph copies side by side; variables, slots' effects and losses must agree
 * bitwise. Returns the function's stats; *eager_peak gets eager's step peak (steady state). */
static eg_function_stats compare(const int64_t *hidden, int n_hidden, int64_t batch, int steps,
                                 optimizer_maker first, optimizer_maker rest, bool counter,
                                 size_t budget, size_t *eager_peak) {
    step_context c[2];
    for (int m = 0; m < 2; m++) {
        c[m] = (step_context){make_model(hidden, n_hidden, EG_DTYPE_F32), first(),
                              rest ? rest() : NULL, NULL};
        if (counter) {
            eg_tensor *zero = eg_scalar(EG_DTYPE_F32, 0.0);
            c[m].counter = eg_variable(zero, "counter");
            eg_variable_set_trainable(c[m].counter, false);
            eg_release(zero);
        }
    }
    eg_function *f = eg_function_new("train_step", train_step, 2, 1, &c[1]);
    if (budget) assert_int_equal(eg_function_set_memory_budget(f, budget), EG_OK);
    int64_t xs[2] = {batch, 784};
    for (int step = 0; step < steps; step++) {
        eg_scope_begin();
        eg_tensor *x = random_tensor(EG_DTYPE_F32, 2, xs, 500 + (uint64_t)step);
        eg_tensor *labels = random_labels(batch, 900 + (uint64_t)step);
        eg_tensor *in[2] = {x, labels};
        eg_tensor *loss[2];
        if (step == steps - 1 && eager_peak)
            *eager_peak = eager_step_peak(&c[0], in);
        else
            assert_int_equal(train_step(in, &loss[0], &c[0]), EG_OK);
        assert_int_equal(eg_function_call(f, in, &loss[1]), EG_OK);
        if (!(step == steps - 1 && eager_peak)) {
            double a = eg_item(loss[0]), b = eg_item(loss[1]);
            assert_memory_equal(&a, &b, sizeof a);
        }
        eg_release(loss[1]);
        eg_scope_end();
    }
    int n;
    eg_tensor *const *a = eg_model_trainable_variables(c[0].model, &n);
    eg_tensor *const *b = eg_model_trainable_variables(c[1].model, &n);
    for (int i = 0; i < n; i++)
        assert_memory_equal(eg_tensor_data(a[i]), eg_tensor_data(b[i]),
                            (size_t)eg_tensor_n_elems(a[i]) * sizeof(float));
    assert_int_equal(eg_optimizer_iterations(c[0].first), eg_optimizer_iterations(c[1].first));
    if (counter) assert_true(eg_item(c[0].counter) == eg_item(c[1].counter));
    eg_function_stats s;
    assert_int_equal(eg_function_stats_get(f, &s), EG_OK);
    eg_function_free(f);
    for (int m = 0; m < 2; m++) {
        eg_optimizer_free(c[m].first);
        eg_optimizer_free(c[m].rest);
        eg_model_free(c[m].model);
        eg_release(c[m].counter);
    }
    return s;
}

static void test_activation_memory_at_most_half_of_eager(void **state) {
    (void)state;
    int64_t seed_hidden[1] = {64}, wide_hidden[2] = {512, 512};
    size_t eager;
    eg_function_stats s = compare(seed_hidden, 1, 32, 4, make_adam, NULL, false, 0, &eager);
    fprintf(stderr, "  seed model: graph arena %zu B, eager step peak %zu B (%.2fx)\n",
            s.arena_bytes, eager, (double)s.arena_bytes / (double)eager);
    assert_true(2 * s.arena_bytes <= eager);
    assert_int_equal(s.n_early_updates, 4);
    assert_true(s.n_tiled_updates >= 1); /* the 784x64 kernel's gradient never exists whole */
    s = compare(wide_hidden, 2, 128, 3, make_adam, NULL, false, 0, &eager);
    fprintf(stderr, "  784-512-512-10: graph arena %zu B, eager step peak %zu B (%.2fx)\n",
            s.arena_bytes, eager, (double)s.arena_bytes / (double)eager);
    assert_true(2 * s.arena_bytes <= eager);
    assert_true(s.n_tiled_updates >= 2);
}

static void test_every_optimizer_updates_inside_the_graph(void **state) {
    (void)state;
    int64_t hidden[1] = {600}; /* 784x600: tiles narrower than a row (at most 512 columns) */
    optimizer_maker makers[] = {make_adam, make_adamw, make_sgd, make_sgd_nesterov, make_rmsprop};
    for (size_t i = 0; i < sizeof makers / sizeof makers[0]; i++) {
        eg_function_stats s = compare(hidden, 1, 16, 3, makers[i], NULL, false, 0, NULL);
        assert_true(s.n_tiled_updates >= 1);
    }
}

static void test_two_optimizers_and_an_assign_in_one_step(void **state) {
    (void)state;
    int64_t hidden[2] = {32, 16};
    /* the assign comes first in traced order: the updates then run after the graph, in order */
    compare(hidden, 2, 8, 4, make_adam, make_rmsprop, true, 0, NULL);
    /* without it, two steps of two optimizers both run early */
    eg_function_stats s = compare(hidden, 2, 8, 4, make_sgd_nesterov, make_adam, false, 0, NULL);
    assert_int_equal(s.n_early_updates, 6);
}

/* ---- a gradient read by something else than its update stays whole ---- */

typedef struct kept_context {
    eg_tensor *w, *copy;
    eg_optimizer *optimizer;
} kept_context;

static eg_status step_keeping_gradient(eg_tensor *const *in, eg_tensor **out, void *user) {
    kept_context *c = user;
    eg_tape *tape = eg_tape_begin(false);
    eg_tensor *loss = eg_mean(eg_relu(eg_matmul(in[0], c->w)), 0, NULL, false);
    eg_tensor *grad;
    eg_tape_gradient(tape, loss, 1, &c->w, &grad, EG_UNCONNECTED_ZERO);
    eg_tape_free(tape);
    eg_optimizer_apply_gradients(c->optimizer, 1, &grad, &c->w);
    eg_assign(c->copy, grad); /* reads the gradient after the update */
    out[0] = loss;
    return eg_last_status();
}

static void test_gradient_read_after_its_update_is_kept(void **state) {
    (void)state;
    int64_t ws[2] = {784, 16}, xs[2] = {4, 784};
    eg_tensor *w0 = random_tensor(EG_DTYPE_F32, 2, ws, 5);
    kept_context c[2];
    for (int m = 0; m < 2; m++)
        c[m] = (kept_context){eg_variable(w0, "w"), eg_variable(w0, "copy"), eg_adam_new(NULL)};
    eg_function *f = eg_function_new("keeps", step_keeping_gradient, 1, 1, &c[1]);
    for (int step = 0; step < 3; step++) {
        eg_scope_begin();
        eg_tensor *x = random_tensor(EG_DTYPE_F32, 2, xs, 40 + (uint64_t)step);
        eg_tensor *loss[2];
        assert_int_equal(step_keeping_gradient(&x, &loss[0], &c[0]), EG_OK);
        assert_int_equal(eg_function_call(f, &x, &loss[1]), EG_OK);
        assert_memory_equal(eg_tensor_data(c[0].w), eg_tensor_data(c[1].w), 784 * 16 * 4);
        assert_memory_equal(eg_tensor_data(c[0].copy), eg_tensor_data(c[1].copy), 784 * 16 * 4);
        eg_release(loss[1]);
        eg_scope_end();
    }
    eg_function_stats s;
    assert_int_equal(eg_function_stats_get(f, &s), EG_OK);
    assert_int_equal(s.n_tiled_updates, 0);
    eg_function_free(f);
    for (int m = 0; m < 2; m++) {
        eg_release(c[m].w);
        eg_release(c[m].copy);
        eg_optimizer_free(c[m].optimizer);
    }
    eg_release(w0);
}

/* ---- common subexpressions ---- */

static eg_status twice(eg_tensor *const *in, eg_tensor **out, void *user) {
    (void)user;
    /* (constants made by two calls, like eg_mul_scalar's, are two tensors: not merged) */
    eg_tensor *a = eg_mul(eg_exp(in[0]), in[1]);
    eg_tensor *b = eg_mul(eg_exp(in[0]), in[1]);
    eg_tensor *t = eg_transpose(in[0], 0, 1), *u = eg_transpose(in[0], 0, 1);
    out[0] = eg_add(eg_matmul(a, t), eg_matmul(b, u));
    return eg_last_status();
}

static void test_common_subexpressions_are_computed_once(void **state) {
    (void)state;
    eg_scope_begin();
    int64_t shape[2] = {5, 7};
    eg_tensor *x = random_tensor(EG_DTYPE_F32, 2, shape, 11), *y;
    eg_tensor *in[2] = {x, eg_scalar(EG_DTYPE_F32, 2.0)};
    eg_tensor *expected;
    assert_int_equal(twice(in, &expected, NULL), EG_OK);
    eg_function *f = eg_function_new("twice", twice, 2, 1, NULL);
    assert_int_equal(eg_function_call(f, in, &y), EG_OK);
    assert_memory_equal(eg_tensor_data(expected), eg_tensor_data(y), 25 * sizeof(float));
    eg_function_stats s;
    assert_int_equal(eg_function_stats_get(f, &s), EG_OK);
    /* exp, mul, transpose and matmul: the second of each merged; one matmul, one add */
    assert_int_equal(s.n_cse_merged, 4);
    assert_int_equal(s.n_kernels, 3); /* exp*2 fused, matmul, add */
    eg_release(y);
    eg_function_free(f);
    eg_scope_end();
}

/* ---- the memory budget ---- */

static void test_memory_budget_recomputes_and_fits(void **state) {
    (void)state;
    int64_t hidden[3] = {256, 256, 256};
    separate_activations = true;
    eg_function_stats plain = compare(hidden, 3, 64, 3, make_adam, NULL, false, 0, NULL);
    assert_int_equal(plain.n_recomputed, 0);
    assert_true(plain.budget_met);
    size_t budget = plain.arena_bytes - plain.arena_bytes / 8;
    eg_function_stats s = compare(hidden, 3, 64, 3, make_adam, NULL, false, budget, NULL);
    separate_activations = false;
    fprintf(stderr, "  arena %zu B -> %zu B under a budget of %zu B: %s (%lld flops)\n",
            plain.arena_bytes, s.arena_bytes, budget, s.recomputed,
            (long long)s.recompute_extra_flops);
    assert_true(s.n_recomputed > 0);
    assert_true(s.arena_bytes <= budget);
    assert_true(s.budget_met);
    assert_int_equal(s.memory_budget, budget);
    assert_true(s.recompute_saved_bytes >= plain.arena_bytes - s.arena_bytes);
    assert_true(s.recompute_extra_flops > 0);
    assert_non_null(strstr(s.recomputed, "relu"));
    /* an impossible budget: the plan still runs (same bits), and says it did not fit */
    s = compare(hidden, 3, 64, 2, make_adam, NULL, false, 1024, NULL);
    assert_false(s.budget_met);
    assert_true(s.arena_bytes > 1024);
    assert_int_equal(eg_function_set_memory_budget(NULL, 1), EG_ERR_NULL_ARGUMENT);
    eg_clear_error();
}

/* ---- parallel replay: the same bits at every thread count ---- */

/* Trains a graph-mode copy for `steps` steps, the thread count following threads[step % 4], and
 * returns the losses and final variables, concatenated (the caller frees them). */
static float *train_graph(const int64_t *hidden, int n_hidden, int64_t batch, int steps,
                          optimizer_maker first, optimizer_maker rest, bool counter,
                          const int *threads, size_t *n_out) {
    step_context c = {make_model(hidden, n_hidden, EG_DTYPE_F32), first(), rest ? rest() : NULL,
                      NULL};
    if (counter) {
        eg_tensor *zero = eg_scalar(EG_DTYPE_F32, 0.0);
        c.counter = eg_variable(zero, "counter");
        eg_variable_set_trainable(c.counter, false);
        eg_release(zero);
    }
    eg_function *f = eg_function_new("train_step", train_step, 2, 1, &c);
    int64_t xs[2] = {batch, 784};
    int n;
    eg_tensor *const *vars = eg_model_trainable_variables(c.model, &n);
    size_t total = (size_t)steps + 1;
    for (int i = 0; i < n; i++) total += (size_t)eg_tensor_n_elems(vars[i]);
    float *out = malloc(sizeof *out * total);
    assert_non_null(out);
    for (int step = 0; step < steps; step++) {
        assert_int_equal(eg_set_num_threads(threads[step % 4]), EG_OK);
        eg_scope_begin();
        eg_tensor *x = random_tensor(EG_DTYPE_F32, 2, xs, 700 + (uint64_t)step);
        eg_tensor *labels = random_labels(batch, 800 + (uint64_t)step);
        eg_tensor *in[2] = {x, labels};
        eg_tensor *loss;
        assert_int_equal(eg_function_call(f, in, &loss), EG_OK);
        out[step] = (float)eg_item(loss);
        eg_release(loss);
        eg_scope_end();
    }
    size_t at = (size_t)steps;
    for (int i = 0; i < n; i++) {
        size_t count = (size_t)eg_tensor_n_elems(vars[i]);
        memcpy(out + at, eg_tensor_data(vars[i]), count * sizeof *out);
        at += count;
    }
    out[at++] = c.counter ? (float)eg_item(c.counter) : 0;
    *n_out = at;
    eg_function_free(f);
    eg_optimizer_free(c.first);
    eg_optimizer_free(c.rest);
    eg_model_free(c.model);
    eg_release(c.counter);
    return out;
}

static void test_replay_bits_do_not_depend_on_the_thread_count(void **state) {
    (void)state;
    int restore = eg_get_num_threads();
    static const int one[4] = {1, 1, 1, 1},
                     counts[][4] = {{2, 2, 2, 2}, {3, 3, 3, 3}, {2, 4, 1, 3}};
    int64_t seed[1] = {64}, wide[2] = {256, 128};
    struct {
        const int64_t *hidden;
        int n_hidden;
        int64_t batch;
        optimizer_maker first, rest;
        bool counter;
    } cases[] = {
        {seed, 1, 32, make_adam, NULL, false},
        {wide, 2, 48, make_adam, make_rmsprop, true},
        {wide, 2, 16, make_sgd_nesterov, NULL, false},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        size_t n_reference, n;
        float *reference =
            train_graph(cases[k].hidden, cases[k].n_hidden, cases[k].batch, 5, cases[k].first,
                        cases[k].rest, cases[k].counter, one, &n_reference);
        for (size_t t = 0; t < sizeof counts / sizeof counts[0]; t++) {
            float *other =
                train_graph(cases[k].hidden, cases[k].n_hidden, cases[k].batch, 5, cases[k].first,
                            cases[k].rest, cases[k].counter, counts[t], &n);
            assert_int_equal(n, n_reference);
            assert_memory_equal(other, reference, n * sizeof *other);
            free(other);
        }
        /* EG_GRAPH_PROFILE runs the tasks on one thread, timed: the same bits */
        setenv("EG_GRAPH_PROFILE", "1", 1);
        float *profiled =
            train_graph(cases[k].hidden, cases[k].n_hidden, cases[k].batch, 5, cases[k].first,
                        cases[k].rest, cases[k].counter, counts[0], &n);
        unsetenv("EG_GRAPH_PROFILE");
        assert_int_equal(n, n_reference);
        assert_memory_equal(profiled, reference, n * sizeof *profiled);
        free(profiled);
        free(reference);
    }
    /* a kernel failing on a pool thread: the caller gets its status and message */
    assert_int_equal(eg_set_num_threads(2), EG_OK);
    step_context c = {make_model(seed, 1, EG_DTYPE_F32), make_adam(), NULL, NULL};
    eg_function *f = eg_function_new("train_step", train_step, 2, 1, &c);
    int64_t xs[2] = {32, 784}, batch = 32;
    for (int step = 0; step < 4; step++) {
        eg_scope_begin();
        eg_tensor *x = random_tensor(EG_DTYPE_F32, 2, xs, 1);
        eg_tensor *labels = eg_mul_scalar(random_labels(batch, 2), step == 2 ? 7.0 : 1.0);
        eg_tensor *in[2] = {x, labels};
        eg_tensor *loss = NULL;
        eg_status status = eg_function_call(f, in, &loss);
        if (step == 2) {
            assert_int_equal(status, EG_ERR_INVALID_ARGUMENT);
            assert_non_null(strstr(eg_last_error(), "out of range"));
            assert_null(loss);
            eg_clear_error();
        } else {
            assert_int_equal(status, EG_OK);
            assert_true(eg_item(loss) > 0);
        }
        eg_release(loss);
        eg_scope_end();
    }
    eg_function_free(f);
    eg_optimizer_free(c.first);
    eg_model_free(c.model);
    assert_int_equal(eg_set_num_threads(restore), EG_OK);
}

int main(int argc, char **argv) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_activation_memory_at_most_half_of_eager, setup),
        cmocka_unit_test_setup(test_every_optimizer_updates_inside_the_graph, setup),
        cmocka_unit_test_setup(test_two_optimizers_and_an_assign_in_one_step, setup),
        cmocka_unit_test_setup(test_gradient_read_after_its_update_is_kept, setup),
        cmocka_unit_test_setup(test_common_subexpressions_are_computed_once, setup),
        cmocka_unit_test_setup(test_memory_budget_recomputes_and_fits, setup),
        cmocka_unit_test_setup(test_replay_bits_do_not_depend_on_the_thread_count, setup),
    };
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
