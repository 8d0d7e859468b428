/* The fused dense op (matmul + bias + activation in one kernel) against the unfused chain
 * eg_activation_apply(act, eg_add(eg_matmul(x, w), b)): values and the gradients of x, w and b
 * are bitwise equal, for every fusable activation, f32 and f64, shapes with partial tiles and
 * with several k blocks, 1 and 2 threads; and its results do not depend on the thread count.
 * Eagle's GEMM against its documented summation order in plain C. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "backend/cpu/gemm.h"
#include "eagle.h"
#include "test_util.h"

static int case_teardown(void **state) {
    (void)state;
    while (eg_scope_depth() > 0) eg_scope_end();
    return eg_set_num_threads(1) == EG_OK ? 0 : -1;
}

static void assert_same_bits(const eg_tensor *a, const eg_tensor *b, const char *what) {
    assert_non_null(a);
    assert_non_null(b);
    int64_t n = eg_tensor_n_elems(a);
    assert_int_equal(n, eg_tensor_n_elems(b));
    size_t size = n * eg_dtype_size(eg_tensor_dtype(a));
    if (memcmp(eg_tensor_data(a), eg_tensor_data(b), size) != 0) fail_msg("%s differ", what);
}

/* y and the gradients of sum(y * weights) for x, w, b (the weights make the upstream gradient
 * non-uniform). out: y, dx, dw, db. */
static void run(bool fused, eg_activation act, eg_tensor *x, eg_tensor *w, eg_tensor *b,
                const eg_tensor *weights, eg_tensor **out) {
    eg_tape *tape = eg_tape_begin(false);
    assert_non_null(tape);
    eg_tape_watch(tape, x);
    eg_tape_watch(tape, w);
    eg_tape_watch(tape, b);
    eg_tensor *y =
        fused ? eg_dense(x, w, b, act) : eg_activation_apply(act, eg_add(eg_matmul(x, w), b));
    assert_non_null(y);
    eg_tensor *loss = eg_sum(eg_mul(y, weights), 0, NULL, false);
    eg_tensor *sources[3] = {x, w, b};
    assert_int_equal(eg_tape_gradient(tape, loss, 3, sources, out + 1, EG_UNCONNECTED_ZERO), EG_OK);
    eg_tape_free(tape);
    out[0] = y;
}

static void check(eg_dtype dtype, int64_t m, int64_t k, int64_t n) {
    static const eg_activation acts[] = {EG_ACTIVATION_NONE, EG_ACTIVATION_RELU,
                                         EG_ACTIVATION_SIGMOID, EG_ACTIVATION_TANH};
    eg_generator *g = eg_generator_new(7);
    int64_t xs[2] = {m, k}, ws[2] = {k, n}, bs[1] = {n}, ys[2] = {m, n};
    eg_tensor *x = eg_random_uniform(g, dtype, 2, xs, -1, 1);
    eg_tensor *w = eg_random_uniform(g, dtype, 2, ws, -0.2, 0.2);
    eg_tensor *b = eg_random_uniform(g, dtype, 1, bs, -0.5, 0.5);
    eg_tensor *weights = eg_random_uniform(g, dtype, 2, ys, -1, 1);
    eg_generator_free(g);
    for (size_t a = 0; a < sizeof acts / sizeof *acts; a++) {
        eg_tensor *first[4] = {0};
        for (int threads = 1; threads <= 2; threads++) {
            assert_int_equal(eg_set_num_threads(threads), EG_OK);
            eg_tensor *fused[4], *unfused[4];
            run(true, acts[a], x, w, b, weights, fused);
            run(false, acts[a], x, w, b, weights, unfused);
            static const char *names[4] = {"y", "dx", "dw", "db"};
            for (int i = 0; i < 4; i++) {
                assert_same_bits(fused[i], unfused[i], names[i]);
                if (threads == 1)
                    first[i] = fused[i];
                else
                    assert_same_bits(fused[i], first[i], "1 vs 2 threads");
            }
        }
    }
}

static void test_dense_equals_unfused(void **state) {
    (void)state;
    check(EG_DTYPE_F32, 5, 3, 7);      /* smaller than one micro-tile */
    check(EG_DTYPE_F32, 37, 300, 45);  /* partial tiles, two k blocks */
    check(EG_DTYPE_F32, 128, 784, 64); /* the MLP's first layer (4 k blocks) */
    check(EG_DTYPE_F32, 130, 40, 300); /* several OpenBLAS tiles (test_dense_openblas) */
    check(EG_DTYPE_F32, 128, 64, 10);  /* narrow: computed as C^T, the epilogue after */
    check(EG_DTYPE_F64, 37, 300, 45);
    check(EG_DTYPE_F32, 4, 0, 5); /* k = 0: act(b) */
}

static void test_dense_errors(void **state) {
    (void)state;
    int64_t xs[2] = {2, 3}, ws[2] = {3, 4}, bs[1] = {4}, bad[1] = {5};
    eg_tensor *x = eg_zeros(EG_DTYPE_F32, 2, xs), *w = eg_zeros(EG_DTYPE_F32, 2, ws);
    eg_tensor *b = eg_zeros(EG_DTYPE_F32, 1, bs), *b5 = eg_zeros(EG_DTYPE_F32, 1, bad);
    assert_null(eg_dense(x, w, b5, EG_ACTIVATION_RELU));
    assert_non_null(strstr(eg_last_error(), "dense"));
    eg_clear_error();
    assert_null(eg_dense(x, w, b, EG_ACTIVATION_SOFTMAX));
    eg_clear_error();
    assert_null(eg_dense(w, x, b, EG_ACTIVATION_NONE));
    assert_non_null(strstr(eg_last_error(), "inner dimensions differ"));
    eg_clear_error();
    assert_null(eg_dense(x, w, NULL, EG_ACTIVATION_NONE));
    eg_clear_error();
}

/* Eagle's GEMM computes each element in one fixed order (gemm.h): here that order written out in
 * plain C must give the same bits, for all four transposition cases and for shapes that take
 * every path: narrow products computed as C^T = B^T A^T, partial micro-tiles, several k blocks,
 * A and B read in place or packed. */
static float ordered_dot(const float *a, int64_t a_step, const float *b, int64_t b_step,
                         int64_t k) {
    int64_t blocks = (k + EG_GEMM_KC - 1) / EG_GEMM_KC, block = (k + blocks - 1) / blocks;
    float result = 0;
    for (int64_t p0 = 0; p0 < k; p0 += block) {
        float partial = 0;
        for (int64_t p = p0; p < p0 + block && p < k; p++)
            partial = fmaf(a[p * a_step], b[p * b_step], partial);
        result = p0 == 0 ? partial : result + partial;
    }
    return result;
}

static void test_gemm_order(void **state) {
    (void)state;
    if (!eg__gemm_f32_available()) skip(); /* OpenBLAS computes the products there */
    /* {m, k, n}; m = 6j + 2 ends in two 4-row panels (m = 2: one of 2 rows); up to 128 columns
     * op(A) is read in place (direct), past that packed; 16-column tiles of 6, 4 or 2 rows are
     * written into C, with several k blocks where k > 256; with AVX-512, 32-column tiles of 12,
     * 8, 6 and 4 rows (4 x 64, 10 x 96 and 16 x 300 take the lone 4- and 6-row ones) */
    static const int64_t shapes[][3] = {{32, 64, 10},  {128, 512, 10}, {512, 128, 10}, {64, 32, 10},
                                        {5, 3, 7},     {37, 300, 45},  {33, 600, 17},  {130, 40, 1},
                                        {49, 257, 3},  {32, 784, 64},  {8, 9, 16},     {20, 50, 33},
                                        {50, 70, 140}, {134, 40, 200}, {2, 300, 32},
                                        {4, 33, 64},   {10, 20, 96},   {16, 300, 300}};
    eg_generator *g = eg_generator_new(11);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t m = shapes[s][0], k = shapes[s][1], n = shapes[s][2];
        for (int trans = 0; trans < 4; trans++) {
            bool ta = trans & 1, tb = trans & 2;
            int64_t as[2] = {ta ? k : m, ta ? m : k}, bs[2] = {tb ? n : k, tb ? k : n};
            eg_tensor *a = eg_random_uniform(g, EG_DTYPE_F32, 2, as, -1, 1);
            eg_tensor *b = eg_random_uniform(g, EG_DTYPE_F32, 2, bs, -1, 1);
            const float *av = eg_tensor_data(a), *bv = eg_tensor_data(b);
            for (int threads = 1; threads <= 2; threads++) {
                assert_int_equal(eg_set_num_threads(threads), EG_OK);
                eg_tensor *c =
                    eg_matmul(ta ? eg_transpose(a, 0, 1) : a, tb ? eg_transpose(b, 0, 1) : b);
                assert_non_null(c);
                const float *cv = eg_tensor_data(c);
                for (int64_t i = 0; i < m; i++)
                    for (int64_t j = 0; j < n; j++) {
                        float want = ordered_dot(ta ? av + i : av + i * k, ta ? m : 1,
                                                 tb ? bv + j * k : bv + j, tb ? 1 : n, k);
                        if (memcmp(&cv[i * n + j], &want, sizeof want) != 0)
                            fail_msg("%lld x %lld x %lld%s%s, %d thread(s): C[%lld, %lld] = %.9g, "
                                     "the ordered sum %.9g",
                                     (long long)m, (long long)k, (long long)n, ta ? " A^T" : "",
                                     tb ? " B^T" : "", threads, (long long)i, (long long)j,
                                     cv[i * n + j], want);
                    }
            }
        }
    }
    eg_generator_free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_dense_equals_unfused, fresh_scope_setup,
                                        case_teardown),
        cmocka_unit_test_setup_teardown(test_dense_errors, fresh_scope_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_gemm_order, fresh_scope_setup, case_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
