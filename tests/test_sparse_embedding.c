/* Row-sparse gradients of an Embedding (sparse_gradient): what the tape returns, what ops say to
 * it, how each optimizer applies it (only the rows read change, their slots too), clipping, lazy
 * mode, tracing, higher-order tapes, and the memory a step of a large table takes. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

enum { VOCAB = 10, WIDTH = 4 };

static eg_layer *embedding(bool sparse, eg_dtype dtype) {
    eg_embedding_options o = eg_embedding_options_default();
    o.sparse_gradient = sparse;
    o.dtype = dtype;
    o.embeddings_initializer = eg_initializer_random_uniform(-1, 1);
    eg_layer *layer = eg_embedding_new(VOCAB, WIDTH, &o);
    assert_non_null(layer);
    return layer;
}

static eg_tensor *ids_of(const int32_t *ids, int64_t rows, int64_t cols) {
    eg_tensor *t = eg_tensor_from_data(ids, EG_DTYPE_I32, 2, (const int64_t[]){rows, cols});
    assert_non_null(t);
    return t;
}

/* sum(embedding(ids) * w) with w = 1, 2, 3, ... : each lookup's gradient is its own. */
static eg_tensor *weighted_lookup(eg_layer *layer, const eg_tensor *ids) {
    eg_tensor *y = eg_layer_call(layer, ids, true);
    assert_non_null(y);
    int64_t n = eg_tensor_n_elems(y);
    eg_tensor *w = eg_arange(1, (double)n + 1, 1, EG_DTYPE_F32);
    eg_tensor *cast =
        eg_cast(eg_reshape(w, eg_tensor_n_dims(y), eg_tensor_shape(y)), eg_tensor_dtype(y));
    return eg_sum(eg_mul(y, cast), 0, NULL, false);
}

static eg_tensor *table_gradient(eg_layer *layer, const eg_tensor *ids) {
    eg_tape *tape = eg_tape_begin(false);
    eg_tensor *loss = weighted_lookup(layer, ids);
    int n = 0;
    eg_tensor *const *vars = eg_layer_variables(layer, &n);
    eg_tensor *grad = NULL;
    assert_int_equal(eg_tape_gradient(tape, loss, 1, vars, &grad, EG_UNCONNECTED_ZERO), EG_OK);
    eg_tape_free(tape);
    return grad;
}

static void copy_table(eg_layer *from, eg_layer *to) {
    int n = 0;
    eg_tensor *src = eg_layer_variables(from, &n)[0], *dst = eg_layer_variables(to, &n)[0];
    assert_int_equal(eg_assign(dst, src), EG_OK);
}

static void assert_same_bits(const eg_tensor *a, const eg_tensor *b) {
    assert_int_equal(eg_tensor_n_elems(a), eg_tensor_n_elems(b));
    eg_tensor *ca = eg_contiguous(a), *cb = eg_contiguous(b);
    size_t bytes = (size_t)eg_tensor_n_elems(a) * eg_dtype_size(eg_tensor_dtype(a));
    assert_memory_equal(eg_tensor_data(ca), eg_tensor_data(cb), bytes);
}

static const int32_t repeated[6] = {1, 3, 3, 7, 1, 3};

/* A sparse-gradient and a dense Embedding built with the same table; the ids that built them. */
static eg_tensor *twin_layers(eg_dtype dtype, eg_layer **sparse, eg_layer **dense) {
    *sparse = embedding(true, dtype);
    *dense = embedding(false, dtype);
    eg_tensor *ids = ids_of(repeated, 2, 3);
    assert_non_null(eg_layer_call(*sparse, ids, false));
    assert_non_null(eg_layer_call(*dense, ids, false));
    copy_table(*sparse, *dense);
    return ids;
}

static void test_the_gradient_lists_the_rows_read(void **state) {
    (void)state;
    eg_layer *sparse = NULL, *dense = NULL;
    eg_tensor *ids = twin_layers(EG_DTYPE_F32, &sparse, &dense);
    eg_tensor *g = table_gradient(sparse, ids), *want = table_gradient(dense, ids);
    assert_true(eg_tensor_is_row_sparse(g));
    assert_false(eg_tensor_is_row_sparse(want));
    assert_int_equal(eg_tensor_n_dims(g), 2);
    assert_int_equal(eg_tensor_shape(g)[0], VOCAB);
    assert_int_equal(eg_tensor_shape(g)[1], WIDTH);
    eg_tensor *rows = eg_row_sparse_indices(g), *values = eg_row_sparse_values(g);
    assert_int_equal(eg_tensor_dtype(rows), EG_DTYPE_I64);
    assert_int_equal(eg_tensor_n_elems(rows), 6);
    const int64_t *r = eg_tensor_data(rows);
    for (int k = 0; k < 6; k++) assert_int_equal(r[k], repeated[k]);
    assert_int_equal(eg_tensor_shape(values)[0], 6);
    const float *v = eg_tensor_data(eg_contiguous(values));
    for (int k = 0; k < 6 * WIDTH; k++) assert_true(v[k] == (float)(k + 1));
    assert_same_bits(eg_row_sparse_to_dense(g), want);
    assert_null(eg_row_sparse_indices(want));
    assert_null(eg_row_sparse_to_dense(want));
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "not row-sparse", NULL);
    eg_layer_free(sparse);
    eg_layer_free(dense);
}

static void test_ops_refuse_it_with_a_clear_error(void **state) {
    (void)state;
    eg_layer *layer = embedding(true, EG_DTYPE_F32);
    eg_tensor *ids = ids_of(repeated, 2, 3);
    eg_tensor *g = table_gradient(layer, ids);
    assert_null(eg_add(g, g));
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "row-sparse gradient",
                            "eg_row_sparse_to_dense", NULL);
    assert_null(eg_tensor_data(g));
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "row-sparse", NULL);
    assert_int_equal(
        eg_variable_set_sparse_gradient(eg_zeros(EG_DTYPE_F32, 1, (int64_t[]){3}), true),
        EG_ERR_INVALID_ARGUMENT);
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "not a variable", NULL);
    eg_layer_free(layer);
}

/* Two steps of an optimizer on a sparse and a dense table that start equal; *after1 gets the
 * sparse table after step 1. */
static void two_steps(eg_optimizer *sparse_opt, eg_optimizer *dense_opt, eg_layer *sparse,
                      eg_layer *dense, const int32_t *step1, const int32_t *step2,
                      eg_tensor **after1) {
    const int32_t *steps[2] = {step1, step2};
    int n = 0;
    for (int s = 0; s < 2; s++) {
        eg_tensor *ids = ids_of(steps[s], 1, 3);
        eg_layer *layers[2] = {sparse, dense};
        eg_optimizer *opts[2] = {sparse_opt, dense_opt};
        for (int l = 0; l < 2; l++) {
            if (!layers[l]) continue;
            eg_tensor *g = table_gradient(layers[l], ids);
            eg_tensor *const *vars = eg_layer_variables(layers[l], &n);
            assert_int_equal(eg_optimizer_apply_gradients(opts[l], 1, &g, vars), EG_OK);
        }
        if (s == 0 && after1) *after1 = eg_copy(eg_layer_variables(sparse, &n)[0]);
    }
}

static void test_sgd_gives_the_dense_bits(void **state) {
    (void)state;
    eg_layer *sparse = NULL, *dense = NULL;
    (void)twin_layers(EG_DTYPE_F32, &sparse, &dense);
    eg_sgd_options o = eg_sgd_options_default();
    o.learning_rate = eg_schedule_constant(0.1);
    eg_optimizer *a = eg_sgd_new(&o), *b = eg_sgd_new(&o);
    static const int32_t first[3] = {1, 3, 3}, second[3] = {3, 5, 1};
    two_steps(a, b, sparse, dense, first, second, NULL);
    int n = 0;
    assert_same_bits(eg_layer_variables(sparse, &n)[0], eg_layer_variables(dense, &n)[0]);
    eg_optimizer_free(a);
    eg_optimizer_free(b);
    eg_layer_free(sparse);
    eg_layer_free(dense);
}

/* Adam on an f64 table against the update written out (Keras' formulas, as the f64 loop computes
 * them): a row changes, slots included, only at steps that read it. */
static void test_adam_updates_only_the_rows_read(void **state) {
    (void)state;
    eg_layer *sparse = NULL, *dense = NULL;
    (void)twin_layers(EG_DTYPE_F64, &sparse, &dense);
    int n = 0;
    eg_tensor *table = eg_layer_variables(sparse, &n)[0];
    double start[VOCAB * WIDTH];
    memcpy(start, eg_tensor_data(table), sizeof start);
    eg_adam_options o = eg_adam_options_default();
    o.learning_rate = eg_schedule_constant(0.01);
    eg_optimizer *a = eg_adam_new(&o), *b = eg_adam_new(&o);
    static const int32_t first[3] = {1, 3, 3}, second[3] = {3, 5, 5};
    eg_tensor *after1 = NULL;
    two_steps(a, b, sparse, dense, first, second, &after1);
    /* the reference: coalesced gradients (w = 1.. per lookup), Adam on the rows read */
    double want[VOCAB * WIDTH], m[VOCAB * WIDTH] = {0}, u[VOCAB * WIDTH] = {0};
    memcpy(want, start, sizeof want);
    const int32_t *steps[2] = {first, second};
    for (int s = 0; s < 2; s++) {
        double g[VOCAB * WIDTH] = {0};
        bool read[VOCAB] = {false};
        for (int k = 0; k < 3; k++) {
            read[steps[s][k]] = true;
            for (int j = 0; j < WIDTH; j++) g[steps[s][k] * WIDTH + j] += k * WIDTH + j + 1;
        }
        double t = s + 1, alpha = 0.01 * sqrt(1.0 - pow(0.999, t)) / (1.0 - pow(0.9, t));
        for (int r = 0; r < VOCAB; r++)
            for (int j = 0; read[r] && j < WIDTH; j++) {
                int i = r * WIDTH + j;
                m[i] = m[i] + (g[i] - m[i]) * (1.0 - 0.9);
                u[i] = u[i] + (g[i] * g[i] - u[i]) * (1.0 - 0.999);
                want[i] = want[i] - (m[i] * alpha) / (sqrt(u[i]) + 1e-7);
            }
    }
    assert_memory_equal(eg_tensor_data(table), want, sizeof want);
    const double *velocity = eg_tensor_data(eg_optimizer_get_slot(a, table, "velocity"));
    assert_memory_equal(velocity, u, sizeof u);
    /* row 1 was read at step 1 only: dense Adam moves it again at step 2, sparse Adam does not */
    const double *got = eg_tensor_data(table), *once = eg_tensor_data(after1);
    const double *moved = eg_tensor_data(eg_layer_variables(dense, &n)[0]);
    for (int j = 0; j < WIDTH; j++) {
        assert_true(got[WIDTH + j] == once[WIDTH + j]);
        assert_true(moved[WIDTH + j] != once[WIDTH + j]);
        /* row 3, read at both steps, is where both agree bit for bit */
        assert_true(got[3 * WIDTH + j] == moved[3 * WIDTH + j]);
    }
    eg_release(after1);
    eg_optimizer_free(a);
    eg_optimizer_free(b);
    eg_layer_free(sparse);
    eg_layer_free(dense);
}

/* RMSprop with momentum and SGD with momentum keep their slots of unread rows too. */
static void test_every_optimizer_keeps_unread_rows(void **state) {
    (void)state;
    for (int kind = 0; kind < 3; kind++) {
        eg_layer *layer = embedding(true, EG_DTYPE_F32);
        eg_tensor *ids = ids_of(repeated, 2, 3);
        assert_non_null(eg_layer_call(layer, ids, false));
        eg_optimizer *opt = NULL;
        if (kind == 0) {
            eg_sgd_options o = eg_sgd_options_default();
            o.momentum = 0.9;
            opt = eg_sgd_new(&o);
        } else if (kind == 1) {
            eg_rmsprop_options o = eg_rmsprop_options_default();
            o.momentum = 0.5;
            o.centered = true;
            opt = eg_rmsprop_new(&o);
        } else {
            opt = eg_adamw_new(NULL); /* weight decay: unread rows do not decay either */
        }
        eg_tensor *after1 = NULL;
        static const int32_t first[3] = {2, 4, 4}, second[3] = {4, 6, 6};
        two_steps(opt, NULL, layer, NULL, first, second, &after1);
        int n = 0;
        const float *got = eg_tensor_data(eg_layer_variables(layer, &n)[0]);
        const float *once = eg_tensor_data(after1);
        for (int j = 0; j < WIDTH; j++) {
            assert_true(got[2 * WIDTH + j] == once[2 * WIDTH + j]); /* read at step 1 only */
            assert_true(got[4 * WIDTH + j] != once[4 * WIDTH + j]); /* read at both */
        }
        eg_release(after1);
        eg_optimizer_free(opt);
        eg_layer_free(layer);
    }
}

/* global_clipnorm over a row-sparse and a dense gradient: the norm is the dense gradients'. */
static void test_clipping_uses_the_dense_norm(void **state) {
    (void)state;
    eg_layer *sparse = NULL, *dense = NULL;
    (void)twin_layers(EG_DTYPE_F64, &sparse, &dense);
    eg_sgd_options o = eg_sgd_options_default();
    o.learning_rate = eg_schedule_constant(1.0);
    o.clipping.global_clipnorm = 1.0;
    eg_optimizer *a = eg_sgd_new(&o), *b = eg_sgd_new(&o);
    static const int32_t first[3] = {1, 3, 3}, second[3] = {3, 5, 5};
    two_steps(a, b, sparse, dense, first, second, NULL);
    int n = 0;
    assert_all_close(eg_layer_variables(sparse, &n)[0], eg_layer_variables(dense, &n)[0], 1e-14);
    /* clipped: the table moved by at most 1 per step */
    eg_optimizer_free(a);
    eg_optimizer_free(b);
    eg_layer_free(sparse);
    eg_layer_free(dense);
}

/* Lazy mode makes the same row-sparse gradient and the same update as eager. */
static void test_lazy_mode_agrees(void **state) {
    (void)state;
    eg_tensor *tables[2];
    for (int lazy = 0; lazy < 2; lazy++) {
        eg_manual_seed(4);
        eg_layer *layer = embedding(true, EG_DTYPE_F32);
        eg_optimizer *opt = eg_adam_new(NULL);
        for (int s = 0; s < 2; s++) {
            eg_scope_begin();
            if (lazy) eg_lazy_begin();
            eg_tensor *g = table_gradient(layer, ids_of(repeated, 2, 3));
            assert_true(eg_tensor_is_row_sparse(g));
            int n = 0;
            eg_tensor *const *vars = eg_layer_variables(layer, &n);
            assert_int_equal(eg_optimizer_apply_gradients(opt, 1, &g, vars), EG_OK);
            if (lazy) assert_int_equal(eg_lazy_end(), EG_OK);
            eg_scope_end();
        }
        int n = 0;
        tables[lazy] = eg_copy(eg_layer_variables(layer, &n)[0]);
        eg_optimizer_free(opt);
        eg_layer_free(layer);
    }
    assert_same_bits(tables[0], tables[1]);
    eg_release(tables[0]);
    eg_release(tables[1]);
}

typedef struct traced_step {
    eg_layer *layer;
} traced_step;

static eg_status traced_gradient(eg_tensor *const *in, eg_tensor **out, void *data) {
    traced_step *t = data;
    eg_tape *tape = eg_tape_begin(false);
    eg_tensor *loss = weighted_lookup(t->layer, in[0]);
    int n = 0;
    eg_tensor *const *vars = eg_layer_variables(t->layer, &n);
    eg_tensor *grad = NULL;
    eg_status status = eg_tape_gradient(tape, loss, 1, vars, &grad, EG_UNCONNECTED_ZERO);
    eg_tape_free(tape);
    out[0] = loss;
    return status;
}

static void test_a_traced_function_refuses_it(void **state) {
    (void)state;
    traced_step t = {embedding(true, EG_DTYPE_F32)};
    eg_tensor *ids = ids_of(repeated, 2, 3);
    assert_non_null(eg_layer_call(t.layer, ids, false));
    eg_function *f = eg_function_new("step", traced_gradient, 1, 1, &t);
    eg_tensor *out = NULL;
    assert_int_equal(eg_function_call(f, &ids, &out), EG_ERR_UNSUPPORTED);
    expect_error_containing(EG_ERR_UNSUPPORTED, "row-sparse", "sparse_gradient", NULL);
    eg_function_free(f);
    eg_layer_free(t.layer);
}

/* A tape recording the gradient computation (for a gradient of it) gets the dense gradient; a
 * table read twice gets both lookups' rows; read by a product too, a dense sum. */
static void test_where_the_gradient_stays_dense(void **state) {
    (void)state;
    eg_layer *layer = embedding(true, EG_DTYPE_F32);
    eg_tensor *ids = ids_of(repeated, 2, 3);
    assert_non_null(eg_layer_call(layer, ids, false));
    int n = 0;
    eg_tensor *table = eg_layer_variables(layer, &n)[0];
    eg_tape *outer = eg_tape_begin(false);
    eg_tensor *g = table_gradient(layer, ids);
    assert_false(eg_tensor_is_row_sparse(g));
    eg_tape_free(outer);

    eg_tape *tape = eg_tape_begin(false);
    eg_tensor *loss = eg_add(weighted_lookup(layer, ids), weighted_lookup(layer, ids));
    assert_int_equal(eg_tape_gradient(tape, loss, 1, &table, &g, EG_UNCONNECTED_ZERO), EG_OK);
    eg_tape_free(tape);
    assert_true(eg_tensor_is_row_sparse(g));
    assert_int_equal(eg_tensor_n_elems(eg_row_sparse_indices(g)), 12);
    eg_tensor *twice = eg_mul_scalar(eg_row_sparse_to_dense(table_gradient(layer, ids)), 2.0);
    assert_same_bits(eg_row_sparse_to_dense(g), twice);

    tape = eg_tape_begin(false);
    loss = eg_add(weighted_lookup(layer, ids), eg_sum(eg_square(table), 0, NULL, false));
    assert_int_equal(eg_tape_gradient(tape, loss, 1, &table, &g, EG_UNCONNECTED_ZERO), EG_OK);
    eg_tape_free(tape);
    assert_false(eg_tensor_is_row_sparse(g));
    eg_tensor *want =
        eg_add(eg_row_sparse_to_dense(table_gradient(layer, ids)), eg_mul_scalar(table, 2.0));
    assert_all_close(g, want, 1e-6);
    eg_layer_free(layer);
}

/* A step on a 100,000 x 64 table (25.6 MB) reading 32 rows allocates a few KiB, not a table. */
static void test_a_large_table_step_allocates_rows_only(void **state) {
    (void)state;
    eg_embedding_options o = eg_embedding_options_default();
    o.sparse_gradient = true;
    eg_layer *layer = eg_embedding_new(100000, 64, &o);
    eg_optimizer *opt = eg_adam_new(NULL);
    int32_t rows[32];
    for (int k = 0; k < 32; k++) rows[k] = k * 3001 % 100000;
    eg_tensor *ids = ids_of(rows, 4, 8);
    size_t extra = 0;
    for (int s = 0; s < 2; s++) { /* the first step makes Adam's two slots */
        eg_memory_stats before, after;
        assert_int_equal(eg_memory_stats_get(NULL, &before), EG_OK);
        eg_memory_reset_peak(NULL);
        eg_scope_begin();
        eg_tensor *g = table_gradient(layer, ids);
        int n = 0;
        assert_int_equal(eg_optimizer_apply_gradients(opt, 1, &g, eg_layer_variables(layer, &n)),
                         EG_OK);
        eg_scope_end();
        assert_int_equal(eg_memory_stats_get(NULL, &after), EG_OK);
        extra = after.peak_bytes_in_use - before.bytes_in_use;
    }
    assert_true(extra < (size_t)1 << 20);
    eg_optimizer_free(opt);
    eg_layer_free(layer);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_the_gradient_lists_the_rows_read, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_ops_refuse_it_with_a_clear_error, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_sgd_gives_the_dense_bits, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_adam_updates_only_the_rows_read, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_every_optimizer_keeps_unread_rows, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_clipping_uses_the_dense_norm, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_lazy_mode_agrees, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_a_traced_function_refuses_it, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_where_the_gradient_stays_dense, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_a_large_table_step_allocates_rows_only,
                                        fresh_scope_setup, strict_scope_teardown),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    eg_shutdown();
    return failed;
}
