/* Sampled products (eagle/approx.h): the mean of many column-row-sampled products converges to
 * the exact product (unbiased), its error shrinks as 1 / sqrt(draws), zero products stay exact,
 * a Dense layer's sampled gradients keep the exact forward and bias gradient, the three modes draw
 * the same samples for the same seed, a traced function draws anew at every call, and bad
 * arguments are named. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

static eg_tensor *random_matrix(uint64_t seed, int64_t rows, int64_t cols) {
    eg_generator *g = eg_generator_new(seed);
    eg_tensor *t = eg_random_normal(g, EG_DTYPE_F32, 2, (const int64_t[]){rows, cols}, 0, 1);
    eg_generator_free(g);
    assert_non_null(t);
    return t;
}

/* The mean of `draws` results of estimate(context, i), each made in a scope of its own. */
static eg_tensor *mean_of_draws(eg_tensor *(*estimate)(void *context), void *context, int draws) {
    eg_tensor *sum = NULL;
    for (int i = 0; i < draws; i++) {
        eg_scope_begin();
        eg_tensor *one = estimate(context);
        assert_non_null(one);
        eg_tensor *next = sum ? eg_add(sum, one) : eg_copy(one);
        eg_scope_keep(next);
        eg_scope_end();
        eg_release(sum);
        sum = next;
    }
    eg_tensor *mean = eg_mul_scalar(sum, 1.0 / draws);
    eg_release(sum);
    return mean;
}

typedef struct product {
    const eg_tensor *a, *b;
    bool transpose_a;
    eg_generator *generator;
} product;

static eg_tensor *sampled_product(void *context) {
    const product *p = context;
    return eg_matmul_sampled(p->a, p->b, p->transpose_a, false, 0.25, p->generator);
}

static eg_tensor *mean_of(const eg_tensor *a, const eg_tensor *b, bool transpose_a, int draws,
                          eg_generator *g) {
    product p = {a, b, transpose_a, g};
    return mean_of_draws(sampled_product, &p, draws);
}

/* a (20, 64) b (64, 15) at a quarter of the inner terms, and the transposed form the kernel's
 * gradient takes (x^T dz over the batch's rows): unbiased, error falling as 1 / sqrt(draws). */
static void test_mean_converges(void **state) {
    (void)state;
    eg_tensor *a = random_matrix(1, 20, 64), *b = random_matrix(2, 64, 15);
    eg_tensor *x = random_matrix(3, 64, 20), *dz = random_matrix(4, 64, 15);
    eg_tensor *exact[2] = {eg_matmul(a, b), eg_matmul_ex(x, dz, true, false)};
    eg_generator *g = eg_generator_new(9);
    for (int form = 0; form < 2; form++) {
        const eg_tensor *l = form ? x : a, *r = form ? dz : b;
        double one = tensors_relative_error(mean_of(l, r, form, 1, g), exact[form]);
        double few = tensors_relative_error(mean_of(l, r, form, 25, g), exact[form]);
        double many = tensors_relative_error(mean_of(l, r, form, 400, g), exact[form]);
        print_message("form %d: relative error of the mean of 1, 25, 400 estimates: %.4f %.4f "
                      "%.4f\n",
                      form, one, few, many);
        assert_true(one > 0.1); /* a single estimate is rough */
        assert_true(few < 0.6 * one);
        assert_true(many < 0.5 * few); /* 1 / sqrt(16) = 0.25 expected */
        assert_true(many < 0.1);
    }
    eg_generator_free(g);
}

/* A zero operand gives an exact zero (every weight 0: the draws are uniform, weighted 0); the
 * whole inner range at fraction 1 is still a sample (with replacement), but of the right shape;
 * an empty inner size is the exact empty sum. */
static void test_edge_cases(void **state) {
    (void)state;
    eg_tensor *zero = eg_zeros(EG_DTYPE_F32, 2, (const int64_t[]){5, 8});
    eg_tensor *b = random_matrix(5, 8, 3);
    eg_tensor *y = eg_matmul_sampled(zero, b, false, false, 0.5, NULL);
    assert_non_null(y);
    const float *v = eg_tensor_data(y);
    for (int i = 0; i < 15; i++) assert_true(v[i] == 0.0f);
    eg_tensor *full = eg_matmul_sampled(random_matrix(6, 5, 8), b, false, false, 1.0, NULL);
    assert_int_equal(eg_tensor_dim(full, 0), 5);
    assert_int_equal(eg_tensor_dim(full, 1), 3);
    eg_tensor *empty_a = eg_zeros(EG_DTYPE_F32, 2, (const int64_t[]){4, 0});
    eg_tensor *empty_b = eg_zeros(EG_DTYPE_F32, 2, (const int64_t[]){0, 3});
    eg_tensor *none = eg_matmul_sampled(empty_a, empty_b, false, false, 0.5, NULL);
    assert_non_null(none);
    assert_int_equal(eg_tensor_n_elems(none), 12);
}

/* L = sum((x W + b) * w_out): with sampling the output and db are eg_dense's bits; dW is not, but
 * its mean over draws is; eager, lazy and a traced call draw the same for the same seed, and a
 * replay draws anew. */
typedef struct dense_case {
    eg_tensor *x, *kernel, *bias, *weight;
} dense_case;

static eg_status sampled_step(eg_tensor *const *in, eg_tensor **out, void *user) {
    (void)user;
    eg_tape *tape = eg_tape_begin(false);
    assert_int_equal(eg_tape_watch(tape, in[1]), EG_OK);
    assert_int_equal(eg_tape_watch(tape, in[2]), EG_OK);
    eg_tensor *y = eg_dense_sampled(in[0], in[1], in[2], EG_ACTIVATION_RELU, 0.5, true);
    eg_tensor *loss = eg_sum(eg_mul(y, in[3]), 0, NULL, false);
    eg_tensor *grads[2] = {0};
    eg_status status = eg_tape_gradient(tape, loss, 2, (eg_tensor *const[]){in[1], in[2]}, grads,
                                        EG_UNCONNECTED_ZERO);
    eg_tape_free(tape);
    out[0] = y;
    out[1] = grads[0];
    out[2] = grads[1];
    return status;
}

/* One sampled kernel gradient of the case in (x, kernel, bias, weight). */
static eg_tensor *kernel_gradient(void *context) {
    eg_tensor **in = context, *out[3];
    assert_int_equal(sampled_step(in, out, NULL), EG_OK);
    return out[1];
}

static void test_dense_gradients(void **state) {
    (void)state;
    eg_tensor *x = random_matrix(7, 32, 24), *kernel = random_matrix(8, 24, 16);
    eg_tensor *bias = eg_random_uniform(NULL, EG_DTYPE_F32, 1, (const int64_t[]){16}, -1, 1);
    eg_tensor *weight = random_matrix(9, 32, 16);
    eg_tensor *in[4] = {x, kernel, bias, weight};
    /* exact */
    eg_tape *tape = eg_tape_begin(false);
    assert_int_equal(eg_tape_watch(tape, kernel), EG_OK);
    assert_int_equal(eg_tape_watch(tape, bias), EG_OK);
    eg_tensor *y = eg_dense(x, kernel, bias, EG_ACTIVATION_RELU);
    eg_tensor *loss = eg_sum(eg_mul(y, weight), 0, NULL, false);
    eg_tensor *exact[2] = {0};
    assert_int_equal(eg_tape_gradient(tape, loss, 2, (eg_tensor *const[]){kernel, bias}, exact,
                                      EG_UNCONNECTED_ZERO),
                     EG_OK);
    eg_tape_free(tape);

    eg_tensor *eager[3], *lazy[3], *graph[3], *replay[3];
    eg_manual_seed(21);
    assert_int_equal(sampled_step(in, eager, NULL), EG_OK);
    assert_true(tensors_same_bits(eager[0], y));
    assert_true(tensors_same_bits(eager[2], exact[1])); /* the bias's gradient stays exact */
    assert_false(tensors_same_bits(eager[1], exact[0]));
    eg_manual_seed(21);
    eg_lazy_begin();
    assert_int_equal(sampled_step(in, lazy, NULL), EG_OK);
    eg_lazy_end();
    assert_int_equal(eg_realize(3, lazy), EG_OK);
    eg_function *f = eg_function_new("sampled", sampled_step, 4, 3, NULL);
    eg_manual_seed(21);
    assert_int_equal(eg_function_call(f, in, graph), EG_OK);
    assert_int_equal(eg_function_call(f, in, replay), EG_OK);
    for (int k = 0; k < 3; k++) {
        assert_true(tensors_same_bits(eager[k], lazy[k]));
        assert_true(tensors_same_bits(eager[k], graph[k]));
    }
    assert_false(tensors_same_bits(graph[1], replay[1])); /* drawn anew */
    assert_true(tensors_same_bits(graph[0], replay[0]));
    for (int k = 0; k < 3; k++) eg_release(replay[k]);
    eg_function_free(f);

    /* unbiased: the mean of the sampled kernel gradients nears the exact one */
    const int draws = 200;
    eg_tensor *mean = mean_of_draws(kernel_gradient, in, draws);
    double one = tensors_relative_error(eager[1], exact[0]),
           averaged = tensors_relative_error(mean, exact[0]);
    print_message("dense kernel gradient: relative error %.4f for one draw, %.4f for the mean of "
                  "%d\n",
                  one, averaged, draws);
    assert_true(averaged < 0.2 * one);
}

/* A Dense layer with gradient sampling: its training calls sample, its inference calls don't. */
static void test_layer_policy(void **state) {
    (void)state;
    eg_layer *dense = eg_dense_new(16, EG_ACTIVATION_RELU);
    assert_int_equal(eg_layer_build(dense, 2, (const int64_t[]){-1, 24}), EG_OK);
    int n = 0;
    eg_tensor *const *vars = eg_layer_variables(dense, &n);
    eg_tensor *x = random_matrix(10, 32, 24);
    eg_tensor *exact_grads[2], *sampled_grads[2];
    for (int pass = 0; pass < 2; pass++) {
        assert_int_equal(eg_layer_set_gradient_sampling(dense, pass ? 0.5 : 0, false), EG_OK);
        eg_tape *tape = eg_tape_begin(false);
        eg_tensor *loss = eg_sum(eg_layer_call(dense, x, true), 0, NULL, false);
        assert_int_equal(eg_tape_gradient(tape, loss, 2, vars, pass ? sampled_grads : exact_grads,
                                          EG_UNCONNECTED_ZERO),
                         EG_OK);
        eg_tape_free(tape);
    }
    assert_false(tensors_same_bits(sampled_grads[0], exact_grads[0]));
    assert_true(tensors_same_bits(sampled_grads[1], exact_grads[1]));
    assert_true(tensors_relative_error(sampled_grads[0], exact_grads[0]) < 1.5);
    eg_layer *flatten = eg_flatten_new(NULL);
    assert_int_equal(eg_layer_set_gradient_sampling(flatten, 0.5, false), EG_ERR_UNSUPPORTED);
    eg_clear_error();
    assert_int_equal(eg_layer_set_gradient_sampling(dense, 1.5, false), EG_ERR_INVALID_ARGUMENT);
    eg_clear_error();
    eg_layer_free(flatten);
    eg_layer_free(dense);
}

static void test_refusals(void **state) {
    (void)state;
    eg_tensor *a = random_matrix(11, 4, 6), *b = random_matrix(12, 5, 3);
    assert_null(eg_matmul_sampled(a, b, false, false, 0.5, NULL));
    expect_error_containing(EG_ERR_SHAPE, "inner sizes 6 and 5 differ", NULL);
    assert_null(eg_matmul_sampled(a, a, false, true, 0, NULL));
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "fraction 0 is not in (0, 1]", NULL);
    eg_tensor *v = eg_random_uniform(NULL, EG_DTYPE_F32, 1, (const int64_t[]){6}, -1, 1);
    assert_null(eg_matmul_sampled(v, a, false, false, 0.5, NULL));
    expect_error_containing(EG_ERR_SHAPE, "takes 2-d a and b", NULL);
    eg_tensor *negative = eg_full(EG_DTYPE_F32, 1, (const int64_t[]){3}, -1.0);
    assert_null(eg_sample_indices(negative, 4, NULL));
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "weights must be finite and >= 0", NULL);
    assert_null(eg_sample_indices(v, 0, NULL));
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "at least 1", NULL);
    eg_tensor *ints = eg_zeros(EG_DTYPE_I32, 1, (const int64_t[]){3});
    assert_null(eg_sample_indices(ints, 2, NULL));
    expect_error_containing(EG_ERR_DTYPE, "f32 or f64", NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_mean_converges, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_edge_cases, fresh_scope_setup, strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_dense_gradients, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_layer_policy, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_refusals, fresh_scope_setup, strict_scope_teardown),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    eg_shutdown();
    return failed;
}
