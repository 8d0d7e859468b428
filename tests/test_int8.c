/* The int8 products (eagle/approx.h): their error against the exact f32 ops stays within bounds
 * on random matrices; the AVX2 path and the portable loop give the same bits, and so do one and
 * two threads; a calibrated range clips; bad arguments get clear errors. (The op table checks
 * each op against a plain-C reference of the quantization: op_cases_quantized.c.) */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/gemm_int8.h"
#include "test_util.h"

static eg_tensor *random_tensor(uint64_t seed, int n_dims, const int64_t *shape, double low,
                                double high) {
    eg_generator *g = eg_generator_new(seed);
    eg_tensor *t = eg_random_uniform(g, EG_DTYPE_F32, n_dims, shape, low, high);
    eg_generator_free(g);
    assert_non_null(t);
    return t;
}

/* Dense (64, 300) x (300, 70) relu: 7-bit weights and 8-bit activations keep the relative error
 * near 1 %; 8-bit weights lower it; 4-bit weights raise it (the bound is not vacuous). */
static void test_dense_error_bounds(void **state) {
    (void)state;
    eg_tensor *x = random_tensor(1, 2, (const int64_t[]){64, 300}, -1, 1);
    eg_tensor *w = random_tensor(2, 2, (const int64_t[]){300, 70}, -0.1, 0.1);
    eg_tensor *b = random_tensor(3, 1, (const int64_t[]){70}, -0.5, 0.5);
    eg_tensor *exact = eg_dense(x, w, b, EG_ACTIVATION_NONE);
    double errors[3];
    const int bits[3] = {4, 7, 8};
    for (int i = 0; i < 3; i++) {
        eg_tensor *scale = NULL;
        eg_tensor *q = eg_quantize_int8(w, bits[i], &scale);
        assert_non_null(q);
        assert_int_equal(eg_tensor_dtype(q), EG_DTYPE_I8);
        eg_tensor *y = eg_dense_int8(x, q, scale, b, NULL, EG_ACTIVATION_NONE);
        assert_non_null(y);
        errors[i] = tensors_relative_error(y, exact);
        print_message("dense int8, %d-bit weights: relative error %.4f\n", bits[i], errors[i]);
    }
    assert_true(errors[1] < 0.02);
    assert_true(errors[2] < errors[1]);
    assert_true(errors[0] > 2 * errors[1]);
}

/* conv2d 3x3 SAME, 16 -> 24 channels, on ReLU-like inputs (all >= 0: zero point 0). */
static void test_conv2d_error_bound(void **state) {
    (void)state;
    eg_tensor *x = random_tensor(4, 4, (const int64_t[]){2, 9, 11, 16}, 0, 2);
    eg_tensor *f = random_tensor(5, 4, (const int64_t[]){3, 3, 16, 24}, -0.2, 0.2);
    eg_conv2d_options o = {0};
    o.padding = EG_PADDING_SAME;
    eg_tensor *exact = eg_conv2d(x, f, &o);
    eg_tensor *scale = NULL;
    eg_tensor *q = eg_quantize_int8(f, 7, &scale);
    eg_tensor *y = eg_conv2d_int8(x, q, scale, NULL, &o);
    assert_non_null(y);
    double error = tensors_relative_error(y, exact);
    print_message("conv2d int8: relative error %.4f\n", error);
    assert_true(error < 0.02);
}

/* The AVX2 kernel (where the CPU has it) and the portable loop; one thread and two. */
/* The activation quantization's AVX2 loop writes the portable loop's bytes: ordinary values,
 * values past both ends, infinities and NaNs, lengths around its 32-element blocks. */
static void test_quantize_paths_agree(void **state) {
    (void)state;
    enum { N = 1000 };
    static float x[N];
    static uint8_t fast[N + 8], portable[N + 8];
    uint64_t z = 12345;
    for (int i = 0; i < N; i++) {
        z = z * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(z >> 11) * 0x1.0p-53 * 8.0 - 3.0); /* [-3, 5) */
    }
    x[3] = NAN;
    x[40] = INFINITY;
    x[41] = -INFINITY;
    x[77] = 1e30f;
    x[78] = -1e30f;
    x[90] = -0.0f;
    eg__int8_activation q = eg__int8_activation_of_range(-2.0f, 4.0f);
    const int64_t lengths[] = {0, 5, 31, 32, 33, 64, 95, N};
    for (size_t k = 0; k < sizeof lengths / sizeof *lengths; k++) {
        int64_t n = lengths[k];
        memset(fast, 0xAA, sizeof fast);
        memset(portable, 0x55, sizeof portable);
        eg__int8_quantize(x, n, n + 8, q, fast);
        eg__int8_gemm_force_portable(true);
        eg__int8_quantize(x, n, n + 8, q, portable);
        eg__int8_gemm_force_portable(false);
        assert_memory_equal(fast, portable, (size_t)(n + 8));
    }
    assert_int_equal(portable[3], 0); /* NaN */
    assert_int_equal(portable[40], 255);
    assert_int_equal(portable[41], 0);
}

static void test_paths_and_threads_agree(void **state) {
    (void)state;
    eg_tensor *x = random_tensor(6, 2, (const int64_t[]){133, 517}, -3, 1);
    eg_tensor *w = random_tensor(7, 2, (const int64_t[]){517, 45}, -1, 1);
    eg_tensor *img = random_tensor(8, 4, (const int64_t[]){3, 12, 10, 8}, -1, 1);
    eg_tensor *f = random_tensor(9, 4, (const int64_t[]){3, 3, 8, 33}, -1, 1);
    eg_tensor *ws = NULL, *fs = NULL;
    eg_tensor *wq = eg_quantize_int8(w, 7, &ws), *fq = eg_quantize_int8(f, 7, &fs);
    eg_conv2d_options o = {0};
    o.padding = EG_PADDING_SAME;
    o.strides[0] = 2;
    eg_tensor *dense[3], *conv[3];
    for (int run = 0; run < 3; run++) {
        eg__int8_gemm_force_portable(run == 1);
        assert_int_equal(eg_set_num_threads(run == 2 ? 1 : 2), EG_OK);
        dense[run] = eg_dense_int8(x, wq, ws, NULL, NULL, EG_ACTIVATION_RELU);
        conv[run] = eg_conv2d_int8(img, fq, fs, NULL, &o);
        assert_non_null(dense[run]);
        assert_non_null(conv[run]);
    }
    eg__int8_gemm_force_portable(false);
    for (int run = 1; run < 3; run++) {
        assert_true(tensors_same_bits(dense[0], dense[run]));
        assert_true(tensors_same_bits(conv[0], conv[run]));
    }
}

/* A calibrated range narrower than x clips it: the result is that of the clipped input. */
static void test_calibrated_range_clips(void **state) {
    (void)state;
    eg_tensor *x = random_tensor(10, 2, (const int64_t[]){8, 40}, -4, 4);
    eg_tensor *w = random_tensor(11, 2, (const int64_t[]){40, 6}, -1, 1);
    eg_tensor *narrow = random_tensor(12, 2, (const int64_t[]){3, 40}, -1, 1);
    eg_tensor *range = eg_int8_range(narrow);
    assert_non_null(range);
    const float *r = eg_tensor_data(range);
    assert_true(r[0] < 0 && r[0] >= -1 && r[1] > 0 && r[1] <= 1);
    eg_tensor *merged = eg_int8_range_merge(range, eg_int8_range(x));
    const float *m = eg_tensor_data(merged);
    assert_true(m[0] < -3.5 && m[1] > 3.5);
    eg_tensor *scale = NULL;
    eg_tensor *q = eg_quantize_int8(w, 7, &scale);
    eg_tensor *clipped = eg_clip(x, r[0], r[1]);
    eg_tensor *a = eg_dense_int8(x, q, scale, NULL, range, EG_ACTIVATION_NONE);
    eg_tensor *b = eg_dense_int8(clipped, q, scale, NULL, range, EG_ACTIVATION_NONE);
    assert_non_null(a);
    assert_true(tensors_same_bits(a, b));
    /* dynamic: the clipped input has its own (narrower) range, the full one differs */
    eg_tensor *full = eg_dense_int8(x, q, scale, NULL, NULL, EG_ACTIVATION_NONE);
    assert_false(tensors_same_bits(a, full));
}

static void test_bad_arguments(void **state) {
    (void)state;
    eg_tensor *w = random_tensor(13, 2, (const int64_t[]){4, 3}, -1, 1);
    eg_tensor *scale = NULL;
    assert_null(eg_quantize_int8(w, 9, &scale));
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "bits 9 is not in [2, 8]", NULL);
    assert_null(scale);
    eg_tensor *w64 = eg_cast(w, EG_DTYPE_F64);
    assert_null(eg_quantize_int8(w64, 7, &scale));
    expect_error_containing(EG_ERR_DTYPE, "must be f32", NULL);
    eg_tensor *q = eg_quantize_int8(w, 7, &scale);
    assert_non_null(q);
    eg_tensor *x = random_tensor(14, 2, (const int64_t[]){2, 5}, -1, 1);
    assert_null(eg_dense_int8(x, q, scale, NULL, NULL, EG_ACTIVATION_NONE));
    expect_error_containing(EG_ERR_SHAPE, "dense_int8: needs x (M, K) and kernel (K, N)", NULL);
    eg_tensor *x4 = random_tensor(15, 2, (const int64_t[]){2, 4}, -1, 1);
    assert_null(eg_dense_int8(x4, w, scale, NULL, NULL, EG_ACTIVATION_NONE));
    expect_error_containing(EG_ERR_DTYPE, "the quantized kernel must be i8, got f32", NULL);
    assert_null(eg_dense_int8(x4, q, scale, NULL, NULL, EG_ACTIVATION_SOFTMAX));
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "is not one of none, relu, sigmoid, tanh",
                            NULL);
    eg_tensor *big = eg_zeros(EG_DTYPE_I8, 2, (const int64_t[]){70000, 1});
    eg_tensor *one = eg_ones(EG_DTYPE_F32, 1, (const int64_t[]){1});
    eg_tensor *xb = eg_zeros(EG_DTYPE_F32, 2, (const int64_t[]){1, 70000});
    assert_null(eg_dense_int8(xb, big, one, NULL, NULL, EG_ACTIVATION_NONE));
    expect_error_containing(EG_ERR_UNSUPPORTED, "int32 sums could overflow", NULL);
    eg_tensor *img = random_tensor(16, 4, (const int64_t[]){1, 3, 4, 4}, -1, 1);
    eg_tensor *f = random_tensor(17, 4, (const int64_t[]){1, 1, 3, 2}, -1, 1);
    eg_tensor *fs = NULL, *fq = eg_quantize_int8(f, 7, &fs);
    eg_conv2d_options nchw = {0};
    nchw.data_format = EG_DATA_FORMAT_NCHW;
    assert_null(eg_conv2d_int8(img, fq, fs, NULL, &nchw));
    expect_error_containing(EG_ERR_UNSUPPORTED, "NHWC images and one group only", NULL);
    eg_clear_error();
}

/* A Dense layer's snapshot: inference calls run int8 (close to, not equal to, exact), training
 * calls stay exact, bits 0 drops it; other layers refuse. */
static void test_layer_snapshot(void **state) {
    (void)state;
    eg_layer *dense = eg_dense_new(20, EG_ACTIVATION_RELU);
    assert_int_equal(eg_layer_quantize_int8(dense, 7), EG_ERR_STATE); /* not built */
    assert_int_equal(eg_layer_build(dense, 2, (const int64_t[]){-1, 64}), EG_OK);
    eg_tensor *x = random_tensor(18, 2, (const int64_t[]){8, 64}, -1, 1);
    eg_tensor *exact = eg_layer_call(dense, x, false);
    assert_false(eg_layer_is_quantized(dense));
    eg_scope_begin(); /* the snapshot outlives a scope around the call (the layer owns it) */
    assert_int_equal(eg_layer_quantize_int8(dense, 7), EG_OK);
    eg_scope_end();
    assert_true(eg_layer_is_quantized(dense));
    eg_tensor *approx = eg_layer_call(dense, x, false);
    eg_tensor *trained = eg_layer_call(dense, x, true);
    assert_false(tensors_same_bits(approx, exact));
    assert_true(tensors_relative_error(approx, exact) < 0.02);
    assert_true(tensors_same_bits(trained, exact));
    assert_int_equal(eg_layer_quantize_int8(dense, 0), EG_OK);
    assert_false(eg_layer_is_quantized(dense));
    assert_true(tensors_same_bits(eg_layer_call(dense, x, false), exact));
    eg_layer *flatten = eg_flatten_new(NULL);
    assert_int_equal(eg_layer_quantize_int8(flatten, 7), EG_ERR_UNSUPPORTED);
    expect_error_containing(EG_ERR_UNSUPPORTED, "only Dense and Conv2D", NULL);
    eg_clear_error();
    eg_layer_free(flatten);
    eg_layer_free(dense);
}

/* A snapshot read out (what eagle quantize stores) and installed on a fresh layer of the same
 * shape gives the same int8 calls, bit for bit; what eg_layer_set_int8 refuses is named. */
static void test_snapshot_round_trip(void **state) {
    (void)state;
    const int64_t input_shape[2] = {-1, 48};
    eg_layer *source = eg_dense_new(12, EG_ACTIVATION_NONE);
    eg_layer *target = eg_dense_new(12, EG_ACTIVATION_NONE);
    assert_int_equal(eg_layer_build(source, 2, input_shape), EG_OK);
    assert_int_equal(eg_layer_build(target, 2, input_shape), EG_OK);
    int n = 0;
    eg_tensor *const *from = eg_layer_variables(source, &n);
    eg_tensor *const *to = eg_layer_variables(target, &n);
    assert_int_equal(eg_assign(to[1], from[1]), EG_OK); /* the same bias */
    eg_tensor *q = NULL, *scale = NULL;
    assert_int_equal(eg_layer_int8_snapshot(source, &q, &scale), EG_ERR_STATE);
    assert_null(q);
    eg_clear_error();
    assert_int_equal(eg_layer_quantize_int8(source, 7), EG_OK);
    assert_int_equal(eg_layer_int8_snapshot(source, &q, &scale), EG_OK);
    assert_int_equal(eg_tensor_dtype(q), EG_DTYPE_I8);
    assert_int_equal(eg_layer_set_int8(target, q, scale), EG_OK);
    assert_true(eg_layer_is_quantized(target));
    eg_tensor *x = random_tensor(5, 2, (const int64_t[]){6, 48}, -1, 1);
    assert_true(
        tensors_same_bits(eg_layer_call(source, x, false), eg_layer_call(target, x, false)));

    /* refusals: dtypes, shapes, scales, layers */
    eg_tensor *wide = eg_cast(q, EG_DTYPE_F32);
    assert_int_equal(eg_layer_set_int8(target, wide, scale), EG_ERR_DTYPE);
    expect_error_containing(EG_ERR_DTYPE, "takes q i8 and scale f32", NULL);
    eg_clear_error();
    eg_tensor *part = eg_slice(q, 0, 0, 40, 1);
    assert_int_equal(eg_layer_set_int8(target, part, scale), EG_ERR_SHAPE);
    expect_error_containing(EG_ERR_SHAPE, "q must be (48, 12) and scale (12)", NULL);
    eg_clear_error();
    eg_tensor *negative = eg_neg(scale);
    assert_int_equal(eg_layer_set_int8(target, q, negative), EG_ERR_INVALID_ARGUMENT);
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "scales must be finite and > 0", NULL);
    eg_clear_error();
    assert_int_equal(eg_layer_set_int8(target, NULL, scale), EG_ERR_NULL_ARGUMENT);
    eg_clear_error();
    eg_layer *unbuilt = eg_dense_new(12, EG_ACTIVATION_NONE);
    assert_int_equal(eg_layer_set_int8(unbuilt, q, scale), EG_ERR_STATE);
    eg_clear_error();
    /* the refusals left the installed snapshot alone */
    assert_true(
        tensors_same_bits(eg_layer_call(source, x, false), eg_layer_call(target, x, false)));
    eg_release(q);
    eg_release(scale);
    eg_layer_free(unbuilt);
    eg_layer_free(source);
    eg_layer_free(target);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_dense_error_bounds, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_conv2d_error_bound, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test(test_quantize_paths_agree),
        cmocka_unit_test_setup_teardown(test_paths_and_threads_agree, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_calibrated_range_clips, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_bad_arguments, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_layer_snapshot, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_snapshot_round_trip, fresh_scope_setup,
                                        strict_scope_teardown),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    eg_shutdown();
    return failed;
}
