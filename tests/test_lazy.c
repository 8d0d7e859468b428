/* Lazy mode: tensors get storage only when read, reading realizes only what is needed,
 * elementwise chains fuse, intermediates are given memory by liveness, schedules are cached,
 * errors are still raised at the call, and tapes work. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "base/cpu_features.h"
#include "eagle.h"
#include "test_util.h"

static int setup(void **state) {
    (void)state;
    eg_clear_error();
    return 0;
}

static eg_lazy_stats stats_now(void) {
    eg_lazy_stats s;
    eg_lazy_stats_get(&s);
    return s;
}

static void assert_bitwise_equal(const eg_tensor *a, const eg_tensor *b) {
    assert_int_equal(eg_tensor_n_elems(a), eg_tensor_n_elems(b));
    assert_int_equal(eg_tensor_dtype(a), eg_tensor_dtype(b));
    size_t bytes = (size_t)eg_tensor_n_elems(a) * eg_dtype_size(eg_tensor_dtype(a));
    const void *x = eg_tensor_data(a), *y = eg_tensor_data(b);
    assert_non_null(x);
    assert_non_null(y);
    assert_true(eg_tensor_is_contiguous(a) && eg_tensor_is_contiguous(b));
    assert_memory_equal(x, y, bytes);
}

/* The chain the tests share: six elementwise ops (y is read twice). */
static eg_tensor *chain(const eg_tensor *x, const eg_tensor *bias) {
    eg_tensor *y = eg_tanh(eg_mul_scalar(eg_add(eg_exp(x), bias), 0.5));
    return eg_sub(eg_square(y), y);
}

static void test_no_storage_until_read(void **state) {
    (void)state;
    eg_scope_begin();
    int64_t shape[2] = {3, 4};
    eg_tensor *x = uniform_tensor(2, shape, 1);
    eg_lazy_begin();
    eg_tensor *y = eg_exp(x);
    eg_tensor *z = eg_add(y, x);
    eg_tensor *unused = eg_matmul_ex(x, x, false, true);
    assert_int_equal(eg_lazy_end(), EG_OK);
    assert_non_null(z);
    assert_false(eg_tensor_is_realized(y));
    assert_false(eg_tensor_is_realized(z));
    assert_false(eg_tensor_is_realized(unused));
    /* shape, dtype and device are known without computing anything */
    assert_int_equal(eg_tensor_n_dims(z), 2);
    assert_int_equal(eg_tensor_dim(z, 1), 4);
    eg_lazy_stats before = stats_now();
    double value = eg_item(eg_sum(z, 0, NULL, false)); /* eager sum of a lazy tensor */
    eg_lazy_stats after = stats_now();
    assert_false(isnan(value));
    assert_true(eg_tensor_is_realized(z));
    /* only z's recipe ran: exp and add (fused: one kernel) — the matmul nobody read did not */
    assert_int_equal(after.n_nodes - before.n_nodes, 2);
    assert_int_equal(after.n_kernels - before.n_kernels, 1);
    assert_false(eg_tensor_is_realized(unused));
    assert_false(eg_tensor_is_realized(y)); /* fused away: never had a buffer */
    /* ... and is recomputed, correctly, when it is read after all */
    eg_tensor *y_eager = eg_exp(x);
    assert_bitwise_equal(y, y_eager);
    eg_scope_end();
}

static void test_fused_chain_matches_eager_and_saves_memory(void **state) {
    (void)state;
    eg_scope_begin();
    int64_t shape[2] = {256, 1024}, row[1] = {1024};
    eg_tensor *x = uniform_tensor(2, shape, 2), *bias = uniform_tensor(1, row, 3);
    eg_memory_stats m0, m1, m2;
    eg_memory_reset_peak(NULL);
    eg_memory_stats_get(NULL, &m0);
    eg_tensor *eager = chain(x, bias);
    eg_memory_stats_get(NULL, &m1);
    size_t eager_peak = m1.peak_bytes_in_use - m0.bytes_in_use;
    eg_memory_reset_peak(NULL);
    eg_memory_stats_get(NULL, &m1);
    eg_lazy_stats before = stats_now();
    eg_lazy_begin();
    eg_tensor *lazy = chain(x, bias);
    eg_lazy_end();
    assert_int_equal(eg_realize(1, &lazy), EG_OK);
    eg_memory_stats_get(NULL, &m2);
    size_t lazy_peak = m2.peak_bytes_in_use - m1.bytes_in_use;
    eg_lazy_stats after = stats_now();
    assert_bitwise_equal(eager, lazy);
    /* 6 ops in one fused loop: one buffer (the result) instead of six */
    assert_int_equal(after.n_kernels - before.n_kernels, 1);
    assert_int_equal(after.n_fused_nodes - before.n_fused_nodes, 5);
    size_t one = 256 * 1024 * sizeof(float);
    assert_true(eager_peak >= 6 * one);
    assert_true(lazy_peak <= one + 4096);
    eg_scope_end();
}

/* bf16 and f16 in one fused loop: each op of the group rounds its result to its own dtype as in
 * eager mode (the fused loop runs the same inner loops on blocks), casts between f32, bf16 and
 * f16 inside the group included; an odd size leaves a partial block. At every CPU level. */
static eg_tensor *low_precision_chain(const eg_tensor *x, const eg_tensor *bias) {
    eg_tensor *xb = eg_cast(x, EG_DTYPE_BF16);
    eg_tensor *y = eg_gelu(eg_add(eg_mul_scalar(xb, 0.75), bias)); /* bias: bf16, broadcast */
    eg_tensor *h = eg_relu(eg_sub(eg_cast(y, EG_DTYPE_F16), eg_cast(x, EG_DTYPE_F16)));
    eg_tensor *z = eg_add(eg_exp(eg_cast(h, EG_DTYPE_F32)), x);
    eg_tensor *picked = eg_where(eg_greater(y, eg_cast(h, EG_DTYPE_BF16)), y,
                                 eg_maximum(xb, eg_cast(z, EG_DTYPE_BF16)));
    return eg_div(eg_cast(picked, EG_DTYPE_F16), eg_add_scalar(h, 2.0));
}

static void test_low_precision_chain_fuses_like_eager(void **state) {
    (void)state;
    eg_scope_begin();
    int64_t shape[2] = {129, 1001}, row[1] = {1001};
    eg_tensor *x = uniform_tensor(2, shape, 5);
    eg_tensor *bias = eg_cast(uniform_tensor(1, row, 6), EG_DTYPE_BF16);
    eg__cpu_level initial = eg__cpu_active_level();
    for (int level = 0; level < EG__CPU_LEVEL_COUNT; level++) {
        eg__cpu_set_level((eg__cpu_level)level);
        eg_tensor *eager = low_precision_chain(x, bias);
        eg_lazy_stats before = stats_now();
        eg_lazy_begin();
        eg_tensor *lazy = low_precision_chain(x, bias);
        eg_lazy_end();
        assert_int_equal(eg_realize(1, &lazy), EG_OK);
        eg_lazy_stats after = stats_now();
        assert_int_equal(eg_tensor_dtype(lazy), EG_DTYPE_F16);
        assert_bitwise_equal(eager, lazy);
        /* every op in one loop (the scalars and casts of the chain fuse too) */
        assert_int_equal(after.n_kernels - before.n_kernels, 1);
    }
    eg__cpu_set_level(initial);
    eg_scope_end();
}

/* A chain of 150 elementwise ops: fused groups stay within 64 ops (what one compiled kernel
 * takes), so the chain runs as three fused loops, and the values are eager mode's bits. */
static eg_tensor *long_chain(const eg_tensor *x) {
    eg_tensor *y = eg_mul_scalar(x, 1.0001);
    for (int i = 1; i < 150; i++)
        y = i % 3 == 0 ? eg_tanh(y) : i % 3 == 1 ? eg_add(y, x) : eg_mul_scalar(y, 0.5);
    return y;
}

static eg_status long_chain_step(eg_tensor *const *in, eg_tensor **out, void *user) {
    (void)user;
    out[0] = long_chain(in[0]);
    return out[0] ? EG_OK : eg_last_status();
}

static void test_long_chains_fuse_in_bounded_groups(void **state) {
    (void)state;
    eg_scope_begin();
    int64_t shape[2] = {8, 33};
    eg_tensor *x = uniform_tensor(2, shape, 4);
    eg_tensor *eager = long_chain(x);
    eg_lazy_stats before = stats_now();
    eg_lazy_begin();
    eg_tensor *lazy = long_chain(x);
    eg_lazy_end();
    assert_int_equal(eg_realize(1, &lazy), EG_OK);
    eg_lazy_stats after = stats_now();
    assert_bitwise_equal(eager, lazy);
    assert_int_equal(after.n_nodes - before.n_nodes, 150);
    assert_int_equal(after.n_kernels - before.n_kernels, 3); /* 64 + 64 + 22 */
    eg_function *f = eg_function_new("long_chain", long_chain_step, 1, 1, NULL);
    assert_non_null(f);
    for (int call = 0; call < 2; call++) {
        eg_tensor *in[1] = {x};
        eg_tensor *out[1];
        assert_int_equal(eg_function_call(f, in, out), EG_OK);
        assert_bitwise_equal(eager, out[0]);
        eg_release(out[0]);
    }
    eg_function_stats fs;
    assert_int_equal(eg_function_stats_get(f, &fs), EG_OK);
    assert_int_equal(fs.n_kernels, 3);
    eg_function_free(f);
    eg_scope_end();
}

static void test_intermediates_share_memory_by_liveness(void **state) {
    (void)state;
    /* matmuls cannot fuse: each result is a temporary, freed as soon as the next is computed */
    eg_scope_begin();
    int64_t shape[2] = {256, 256};
    eg_tensor *x = uniform_tensor(2, shape, 4);
    eg_memory_stats m0, m1;
    eg_lazy_begin();
    eg_tensor *y = x;
    for (int i = 0; i < 6; i++) y = eg_matmul(y, x);
    eg_lazy_end();
    eg_memory_reset_peak(NULL);
    eg_memory_stats_get(NULL, &m0);
    eg_lazy_stats before = stats_now();
    assert_int_equal(eg_realize(1, &y), EG_OK);
    eg_memory_stats_get(NULL, &m1);
    eg_lazy_stats after = stats_now();
    size_t one = 256 * 256 * sizeof(float);
    assert_int_equal(after.n_temporaries - before.n_temporaries, 5);
    /* at most two matrices at once (an input and an output) plus the kept result */
    assert_true(m1.peak_bytes_in_use - m0.bytes_in_use <= 3 * one);
    /* the value is right: compare with eager */
    eg_tensor *z = x;
    for (int i = 0; i < 6; i++) z = eg_matmul(z, x);
    assert_bitwise_equal(y, z);
    eg_scope_end();
}

static void test_schedule_is_cached_by_structure(void **state) {
    (void)state;
    int64_t shape[2] = {16, 16}, row[1] = {16};
    eg_lazy_stats first = {0}, last = {0};
    for (int step = 0; step < 5; step++) {
        eg_scope_begin();
        eg_tensor *x = uniform_tensor(2, shape, 10 + (uint64_t)step),
                  *b = uniform_tensor(1, row, 5);
        eg_lazy_begin();
        eg_tensor *y = eg_matmul(chain(x, b), x);
        eg_lazy_end();
        assert_int_equal(eg_realize(1, &y), EG_OK);
        if (step == 0) first = stats_now();
        last = stats_now();
        eg_scope_end();
    }
    /* steps 2..5 reuse step 1's schedule */
    assert_int_equal(last.n_schedule_hits - first.n_schedule_hits, 4);
}

static void test_errors_are_raised_at_the_call(void **state) {
    (void)state;
    eg_scope_begin();
    int64_t a[2] = {2, 3}, b[2] = {4, 5};
    eg_tensor *x = uniform_tensor(2, a, 6), *y = uniform_tensor(2, b, 7);
    eg_lazy_begin();
    int line = __LINE__ + 1;
    eg_tensor *bad = eg_matmul(x, y);
    eg_lazy_end();
    assert_null(bad);
    assert_int_equal(eg_last_status(), EG_ERR_SHAPE);
    char expected[64];
    snprintf(expected, sizeof expected, "test_lazy.c:%d", line);
    assert_non_null(strstr(eg_last_error(), expected));
    assert_non_null(strstr(eg_last_error(), "matmul"));
    eg_clear_error();
    assert_int_equal(eg_lazy_end(), EG_ERR_STATE); /* not in lazy mode any more */
    eg_clear_error();
    eg_scope_end();
}

static void test_gradients_in_lazy_mode(void **state) {
    (void)state;
    eg_scope_begin();
    int64_t xs[2] = {8, 5}, ws[2] = {5, 3}, bs[1] = {3};
    eg_tensor *x = uniform_tensor(2, xs, 8);
    eg_tensor *w = eg_variable(uniform_tensor(2, ws, 9), "w");
    eg_tensor *bias = eg_variable(uniform_tensor(1, bs, 10), "b");
    eg_tensor *grads[2][2];
    for (int mode = 0; mode < 2; mode++) {
        if (mode) eg_lazy_begin();
        eg_tape *tape = eg_tape_begin(false);
        eg_tensor *h = eg_sigmoid(eg_add(eg_matmul(x, w), bias));
        eg_tensor *loss = eg_mean(eg_square(h), 0, NULL, false);
        eg_tensor *sources[2] = {w, bias};
        assert_int_equal(eg_tape_gradient(tape, loss, 2, sources, grads[mode], EG_UNCONNECTED_NULL),
                         EG_OK);
        eg_tape_free(tape);
        if (mode) {
            assert_int_equal(eg_lazy_end(), EG_OK);
            assert_false(eg_tensor_is_realized(grads[mode][0]));
            assert_int_equal(eg_realize(2, grads[mode]), EG_OK);
        }
    }
    assert_bitwise_equal(grads[0][0], grads[1][0]);
    assert_bitwise_equal(grads[0][1], grads[1][1]);
    eg_release(w);
    eg_release(bias);
    eg_scope_end();
}

/* A write to a variable (assign, an optimizer step) does not change what lazy values that read
 * it are: never computed, or computed and dropped, they still give the eager values of the
 * time they were called. */
static void test_pending_readers_keep_a_variables_old_value(void **state) {
    (void)state;
    eg_scope_begin();
    int64_t xs[2] = {6, 4}, ws[2] = {4, 4};
    eg_tensor *x = uniform_tensor(2, xs, 20);
    eg_tensor *w = eg_variable(uniform_tensor(2, ws, 21), "w");
    eg_tensor *doubled_eager = eg_mul_scalar(w, 2.0);
    eg_tensor *product_eager = eg_matmul(x, w);
    eg_tensor *result_eager = eg_matmul(eg_exp(product_eager), w);
    eg_lazy_begin();
    eg_tensor *doubled = eg_mul_scalar(w, 2.0); /* never computed before the write */
    eg_tensor *product = eg_matmul(x, w);       /* computed, then only the scope holds it */
    eg_tensor *result = eg_matmul(eg_exp(product), w);
    assert_int_equal(eg_lazy_end(), EG_OK);
    assert_int_equal(eg_realize(1, &result), EG_OK);
    assert_int_equal(eg_assign(w, eg_zeros(EG_DTYPE_F32, 2, ws)), EG_OK);
    assert_bitwise_equal(result, result_eager);
    assert_bitwise_equal(product, product_eager);
    assert_bitwise_equal(doubled, doubled_eager);
    eg_release(w);
    eg_scope_end();
}

/* b = a * 2 recorded, then a written through eg_tensor_data: b is what eager mode gives (a's old
 * value doubled), also through a fused chain and a view, while ops recorded after the write see
 * the new value. */
static void test_host_write_after_recording_keeps_eager_values(void **state) {
    (void)state;
    int64_t shape[2] = {3, 4};
    eg_tensor *results[2][4];
    for (int lazy = 0; lazy < 2; lazy++) {
        eg_scope_begin();
        eg_tensor *a = uniform_tensor(2, shape, 50);
        eg_tensor *bias = uniform_tensor(2, shape, 51);
        if (lazy) eg_lazy_begin();
        eg_tensor *doubled = eg_mul_scalar(a, 2.0);
        eg_tensor *chained = chain(a, bias);
        eg_tensor *row = eg_add_scalar(eg_transpose(a, 0, 1), 1.0); /* through a view */
        if (lazy) assert_false(eg_tensor_is_realized(doubled));
        float *memory = eg_tensor_data(a);
        assert_non_null(memory);
        for (int i = 0; i < 12; i++) memory[i] = (float)(i + 1);
        eg_tensor *after = eg_add(a, bias); /* recorded after the write: sees it */
        if (lazy) assert_int_equal(eg_lazy_end(), EG_OK);
        eg_tensor *four[4] = {doubled, chained, row, after};
        for (int i = 0; i < 4; i++) results[lazy][i] = eg_scope_keep(four[i]);
        eg_scope_end();
    }
    for (int i = 0; i < 4; i++) {
        assert_bitwise_equal(results[1][i], results[0][i]);
        eg_release(results[0][i]);
        eg_release(results[1][i]);
    }
}

/* The two-layer step the next test runs; returns the hidden activations, fills grads. */
static eg_tensor *mlp_grads(const eg_tensor *x, eg_tensor *const *vars, eg_tensor **grads) {
    eg_tape *tape = eg_tape_begin(false);
    eg_tensor *h = eg_relu(eg_add(eg_matmul(x, vars[0]), vars[1]));
    eg_tensor *y = eg_add(eg_matmul(h, vars[2]), vars[3]);
    eg_tensor *loss = eg_mean(eg_square(y), 0, NULL, false);
    assert_int_equal(eg_tape_gradient(tape, loss, 4, vars, grads, EG_UNCONNECTED_ZERO), EG_OK);
    eg_tape_free(tape);
    return h;
}

/* A lazy training step updates the variables without copying them for the lazy values that
 * read them (the forward pass): the update allocates nothing, as in eager mode, and every
 * value is still the eager one. */
static void test_lazy_training_step_does_not_copy_variables(void **state) {
    (void)state;
    int64_t xs[2] = {16, 32}, w0s[2] = {32, 64}, b0s[1] = {64}, w1s[2] = {64, 8}, b1s[1] = {8};
    const int64_t *shapes[4] = {w0s, b0s, w1s, b1s};
    int dims[4] = {2, 1, 2, 1};
    eg_tensor *vars[2][4];
    eg_optimizer *adam[2];
    eg_scope_begin(); /* the initial values; variables outlive scopes */
    for (int mode = 0; mode < 2; mode++) {
        for (int i = 0; i < 4; i++)
            vars[mode][i] = eg_variable(uniform_tensor(dims[i], shapes[i], 30 + (uint64_t)i), "v");
        adam[mode] = eg_adam_new(NULL);
    }
    eg_scope_end();
    for (int step = 0; step < 3; step++) {
        eg_scope_begin();
        eg_tensor *x = uniform_tensor(2, xs, 40 + (uint64_t)step);
        eg_tensor *grads[2][4];
        eg_tensor *h_eager = mlp_grads(x, vars[0], grads[0]);
        assert_int_equal(eg_optimizer_apply_gradients(adam[0], 4, grads[0], vars[0]), EG_OK);
        eg_lazy_begin();
        eg_tensor *h_lazy = mlp_grads(x, vars[1], grads[1]);
        assert_int_equal(eg_lazy_end(), EG_OK);
        assert_false(eg_tensor_is_realized(grads[1][0]));
        assert_int_equal(eg_realize(4, grads[1]), EG_OK);
        eg_memory_stats before, after;
        eg_memory_stats_get(NULL, &before);
        assert_int_equal(eg_optimizer_apply_gradients(adam[1], 4, grads[1], vars[1]), EG_OK);
        eg_memory_stats_get(NULL, &after);
        if (step > 0) { /* the first step makes the optimizer's slots */
            assert_int_equal(after.n_allocs - before.n_allocs, 0);
            assert_int_equal(after.peak_bytes_in_use, before.peak_bytes_in_use);
        }
        assert_bitwise_equal(h_lazy, h_eager); /* computed with the weights before the step */
        eg_scope_end();
    }
    for (int i = 0; i < 4; i++) assert_bitwise_equal(vars[1][i], vars[0][i]);
    for (int mode = 0; mode < 2; mode++) {
        for (int i = 0; i < 4; i++) eg_release(vars[mode][i]);
        eg_optimizer_free(adam[mode]);
    }
}

static void test_nothing_leaks(void **state) {
    (void)state;
    eg_debug_track_tensors(true);
    size_t before = eg_debug_live_tensors(NULL);
    eg_scope_begin();
    int64_t shape[2] = {4, 4};
    eg_tensor *x = uniform_tensor(2, shape, 11);
    eg_lazy_begin();
    eg_tensor *y = eg_relu(eg_matmul(eg_exp(x), x));
    eg_tensor *never_read = eg_log(y);
    eg_lazy_end();
    assert_non_null(never_read);
    assert_false(isnan(eg_item(eg_sum(y, 0, NULL, false))));
    eg_scope_end();
    assert_int_equal(eg_debug_live_tensors(NULL), before);
    eg_debug_track_tensors(false);
}

int main(int argc, char **argv) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_no_storage_until_read, setup),
        cmocka_unit_test_setup(test_fused_chain_matches_eager_and_saves_memory, setup),
        cmocka_unit_test_setup(test_low_precision_chain_fuses_like_eager, setup),
        cmocka_unit_test_setup(test_long_chains_fuse_in_bounded_groups, setup),
        cmocka_unit_test_setup(test_intermediates_share_memory_by_liveness, setup),
        cmocka_unit_test_setup(test_schedule_is_cached_by_structure, setup),
        cmocka_unit_test_setup(test_errors_are_raised_at_the_call, setup),
        cmocka_unit_test_setup(test_gradients_in_lazy_mode, setup),
        cmocka_unit_test_setup(test_pending_readers_keep_a_variables_old_value, setup),
        cmocka_unit_test_setup(test_lazy_training_step_does_not_copy_variables, setup),
        cmocka_unit_test_setup(test_host_write_after_recording_keeps_eager_values, setup),
        cmocka_unit_test_setup(test_nothing_leaks, setup),
    };
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
