/* Elementwise ops and sums give the same bits whatever the CPU path (baseline, AVX2 or AVX-512),
 * the thread count, the layout (a transposed view, a broadcast) and the length: the canonical
 * summation order (src/backend/cpu/reduce.c) checked against a plain-C reference, long sums split
 * over threads, the plain unary and binary loops (compiled once per level), the vector-math ops
 * against a one-element-at-a-time evaluation, and Adam's fused update (one parallel pass over all
 * variables) against Keras' formula in plain C. The one exception is vector math (exp, tanh, ...):
 * its AVX2 and AVX-512 paths use FMA, so the baseline's bits differ from theirs (still not on
 * threads, layout or length) within both bounds; AVX-512 gives AVX2's bits exactly. bf16 and
 * f16 kernels give, at each level, the f32 kernel's result rounded once, bit for bit (elementwise,
 * vector math on every 16-bit input, pooling), and their sums the canonical order's. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api/internal.h"
#include "base/cpu_features.h"
#include "eagle.h"
#include "test_util.h"

/* The level the process started at (EG_CPU or the best the CPU has): every test leaves it so. */
static eg__cpu_level initial_level;

static int setup(void **state) {
    (void)state;
    initial_level = eg__cpu_active_level();
    eg_clear_error();
    eg_scope_begin();
    return 0;
}

static int teardown(void **state) {
    (void)state;
    eg_scope_end();
    eg__cpu_set_level(initial_level);
    eg_set_num_threads(2);
    return 0;
}

static void assert_same_bits(const eg_tensor *a, const eg_tensor *b) {
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(eg_tensor_n_elems(a), eg_tensor_n_elems(b));
    eg_tensor *ca = eg_contiguous(a), *cb = eg_contiguous(b);
    assert_memory_equal(eg_tensor_data(ca), eg_tensor_data(cb),
                        (size_t)eg_tensor_n_elems(a) * eg_dtype_size(eg_tensor_dtype(a)));
}

/* The canonical order, written out plainly: blocks of 65536, 8 double lanes per block. */
static double canonical_sum(const float *x, int64_t n, int64_t stride) {
    double result = 0;
    for (int64_t b = 0; b < n; b += 65536) {
        int64_t m = n - b < 65536 ? n - b : 65536, main_end = m - m % 8;
        double lanes[8] = {0}, total = 0;
        for (int64_t k = 0; k < m; k++) lanes[k < main_end ? k % 8 : 0] += x[(b + k) * stride];
        for (int l = 0; l < 8; l++) total += lanes[l];
        result += total;
    }
    return result;
}

/* The sum and mean of the contiguous 1-D f32 tensor x, on both CPU paths and at 1 and 2 threads,
 * have the bits of the canonical order. */
static void assert_sums_canonical(const eg_tensor *x) {
    int64_t n = eg_tensor_n_elems(x);
    const float *data = eg_tensor_data(x);
    double total = canonical_sum(data, n, 1);
    float expected[2] = {(float)total, (float)(total / (double)n)};
    int axis = 0;
    for (int level = 0; level < EG__CPU_LEVEL_COUNT; level++)
        for (int threads = 1; threads <= 2; threads++) {
            eg__cpu_set_level(level);
            assert_int_equal(eg_set_num_threads(threads), EG_OK);
            float got[2] = {*(const float *)eg_tensor_data(eg_sum(x, 1, &axis, false)),
                            *(const float *)eg_tensor_data(eg_mean(x, 1, &axis, false))};
            for (int which = 0; which < 2; which++)
                if (memcmp(&got[which], &expected[which], sizeof got[which]) != 0)
                    fail_msg("n %lld level %d threads %d: %s %.9g, canonical order %.9g",
                             (long long)n, level, threads, which ? "mean" : "sum", got[which],
                             expected[which]);
        }
}

static void test_sum_canonical_order(void **state) {
    (void)state;
    const int64_t lengths[] = {1, 7, 8, 9, 65535, 65536, 65537, 200003, 1 << 20};
    for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++) {
        int64_t n = lengths[i];
        assert_sums_canonical(uniform_tensor(1, &n, 10 + i));
    }
}

/* Pairs of +2^52 and -2^52 four elements apart (different lanes) at the start of each block of
 * the n floats at x and next to the places where the sum kernels change stride (the last groups
 * of 8 and the scalar tail): a lane holding 2^52 rounds what is added to it to an integer, so
 * which elements share a lane shows in the final f32. */
static void plant_cancelling_pairs(float *x, int64_t n) {
    const float big = 4503599627370496.0f; /* 2^52 */
    for (int64_t b = 0; b < n; b += 65536) {
        int64_t m = n - b < 65536 ? n - b : 65536, main_end = m - m % 8;
        const int64_t starts[] = {0, 16, main_end - 16, main_end - 8, main_end - 5};
        for (size_t s = 0; s < sizeof starts / sizeof starts[0]; s++) {
            int64_t at = starts[s];
            if (at < 0 || at + 4 >= m) continue;
            x[b + at] = big;
            x[b + at + 4] = -big;
        }
    }
}

/* Uniform data rounds to f32 the same whichever double lane each element went to, so the test
 * above cannot see a kernel that adds an element to the wrong lane; planted pairs can. Checked
 * to fail when the AVX2 kernel's last group of 8, or the second group of its unrolled loop, adds
 * its halves to the other four lanes. */
static void test_sum_canonical_order_cancelling(void **state) {
    (void)state;
    const int64_t lengths[] = {9, 12, 24, 40, 65535, 65536 + 20, 200003};
    for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++) {
        int64_t n = lengths[i];
        eg_tensor *x = uniform_tensor(1, &n, 40 + i); /* new, so contiguous and ours to change */
        plant_cancelling_pairs((float *)eg_tensor_data(x), n);
        assert_sums_canonical(x);
    }
}

/* Rows of a matrix and the columns of its transpose (row kernel, long-row kernel, column
 * kernel) sum to the same bits, at every level and thread count, for uniform data and for data
 * that shows a wrong lane. */
static void test_sum_layouts_agree(void **state) {
    (void)state;
    const int64_t shapes[][2] = {{3, 200003}, {2, 65537}, {17, 1000}, {64, 64}, {300, 700}};
    for (size_t i = 0; i < 2 * sizeof shapes / sizeof shapes[0]; i++) {
        const int64_t *shape = shapes[i / 2];
        eg_tensor *x = uniform_tensor(2, shape, 20 + i);
        if (i % 2) /* every row with pairs that show a wrong lane (see plant_cancelling_pairs) */
            for (int64_t r = 0; r < shape[0]; r++)
                plant_cancelling_pairs((float *)eg_tensor_data(x) + r * shape[1], shape[1]);
        eg_tensor *xt = eg_contiguous(eg_transpose(x, 0, 1));
        int one = 1, zero = 0;
        eg_tensor *reference = NULL;
        for (int level = 0; level < EG__CPU_LEVEL_COUNT; level++)
            for (int threads = 1; threads <= 2; threads++) {
                eg__cpu_set_level(level);
                assert_int_equal(eg_set_num_threads(threads), EG_OK);
                eg_tensor *rows = eg_sum(x, 1, &one, false);
                if (!reference) reference = rows;
                assert_same_bits(rows, reference);
                assert_same_bits(eg_sum(xt, 1, &zero, false), reference); /* columns */
                assert_same_bits(eg_sum(eg_transpose(xt, 0, 1), 1, &one, false), reference);
            }
        const float *data = eg_tensor_data(x), *sums = eg_tensor_data(reference);
        for (int64_t r = 0; r < shape[0]; r++) {
            float expected = (float)canonical_sum(data + r * shape[1], shape[1], 1);
            assert_memory_equal(&sums[r], &expected, sizeof expected);
        }
    }
}

typedef eg_tensor *(*unary_op)(const eg_tensor *);
static eg_tensor *op_exp(const eg_tensor *x) {
    return eg_exp(x);
}
static eg_tensor *op_log(const eg_tensor *x) {
    return eg_log(eg_abs(x));
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
static eg_tensor *op_softplus(const eg_tensor *x) {
    return eg_softplus(x);
}
static eg_tensor *op_relu(const eg_tensor *x) {
    return eg_relu(x);
}

/* Distance in representable floats between a and b (0: the same value; NaNs compare by bits). */
static uint64_t ulp_distance(float a, float b) {
    if (isnan(a) || isnan(b)) return memcmp(&a, &b, sizeof a) == 0 ? 0 : UINT64_MAX;
    int32_t ia, ib;
    memcpy(&ia, &a, sizeof ia);
    memcpy(&ib, &b, sizeof ib);
    int64_t oa = ia < 0 ? (int64_t)INT32_MIN - ia : ia, ob = ib < 0 ? (int64_t)INT32_MIN - ib : ib;
    return (uint64_t)(oa > ob ? oa - ob : ob - oa);
}

/* Vector-math ops: at each level, a transposed view, a contiguous copy, every thread count and
 * each element computed alone agree bitwise. Between the baseline and AVX2 the bits may differ
 * (AVX2 uses FMA; each meets the bounds of tests/test_vecmath.c): there they agree within the sum
 * of both levels' bounds, and bitwise for relu (no vector math). AVX-512 gives AVX2's bits (the
 * same operations per lane, vecmath.h). */
static void test_unary_layouts_levels_threads(void **state) {
    (void)state;
    const unary_op ops[] = {op_exp, op_log, op_tanh, op_sigmoid, op_gelu, op_softplus, op_relu};
    const uint64_t level_ulp[] = {2, 2, 4, 5, 16, 4, 0}; /* 2 x vecmath.h's bound, relu exact */
    int64_t shape[2] = {300, 333};
    eg_tensor *x = eg_mul_scalar(uniform_tensor(2, shape, 3), 12.0);
    eg_tensor *xt = eg_transpose(x, 0, 1), *xt_copy = eg_contiguous(xt);
    const float *in = eg_tensor_data(xt_copy);
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
        eg_tensor *reference[EG__CPU_LEVEL_COUNT];
        for (int level = 0; level < EG__CPU_LEVEL_COUNT; level++) {
            eg__cpu_set_level((eg__cpu_level)level);
            assert_int_equal(eg_set_num_threads(1), EG_OK);
            reference[level] = ops[o](xt_copy);
            for (int threads = 1; threads <= 2; threads++) {
                assert_int_equal(eg_set_num_threads(threads), EG_OK);
                assert_same_bits(ops[o](xt), reference[level]);
                assert_same_bits(ops[o](xt_copy), reference[level]);
            }
            /* one element at a time (scalar tensors) */
            const float *ref = eg_tensor_data(reference[level]);
            for (int64_t i = 0; i < 2000; i += 7) {
                eg_tensor *one = eg_tensor_from_data(&in[i], EG_DTYPE_F32, 0, NULL);
                const float *y = eg_tensor_data(ops[o](one));
                assert_memory_equal(y, &ref[i], sizeof(float));
            }
        }
        const float *r0 = eg_tensor_data(reference[0]), *r1 = eg_tensor_data(reference[1]);
        for (int64_t i = 0; i < eg_tensor_n_elems(xt_copy); i++)
            if (ulp_distance(r0[i], r1[i]) > level_ulp[o])
                fail_msg("op %zu at x = %a: baseline %a, avx2 %a", o, (double)in[i], (double)r0[i],
                         (double)r1[i]);
        assert_same_bits(reference[EG__CPU_AVX512], reference[EG__CPU_AVX2]);
    }
}

/* |y - exact| in units of the last place of the f32 nearest to exact (2^-149 at least). */
static double ulps_off(float y, double exact) {
    int e;
    frexp(exact, &e);
    return fabs((double)y - exact) / ldexp(1.0, e - 24 < -149 ? -149 : e - 24);
}

/* f32 softmax, log_softmax and the fused sparse cross-entropy take exp from the vector math: at
 * each level and thread count, a row softmax equals the column softmax of the transpose bitwise
 * (contiguous and strided exps); and against double precision on the same float arguments
 * x - max (exp's 1 ulp, then the division's and the product's roundings) softmax is within 3 ulp,
 * log_softmax within 1e-6 absolute plus 1 ulp, the loss within 1e-6 relative. */
static void test_softmax_f32_vector_exp(void **state) {
    (void)state;
    const int64_t shapes[][2] = {{300, 10}, {37, 1000}, {5, 3}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int64_t rows = shapes[si][0], classes = shapes[si][1];
        eg_tensor *x = eg_mul_scalar(uniform_tensor(2, shapes[si], 60 + si), 15.0);
        eg_tensor *xt = eg_contiguous(eg_transpose(x, 0, 1));
        int32_t *labels_v = malloc(sizeof(int32_t) * (size_t)rows);
        assert_non_null(labels_v);
        for (int64_t b = 0; b < rows; b++) labels_v[b] = (int32_t)((b * 7) % classes);
        eg_tensor *labels = eg_tensor_from_data(labels_v, EG_DTYPE_I32, 1, &rows);
        free(labels_v);
        const float *xv = eg_tensor_data(x);
        for (int level = 0; level < EG__CPU_LEVEL_COUNT; level++)
            for (int threads = 1; threads <= 2; threads++) {
                eg__cpu_set_level((eg__cpu_level)level);
                assert_int_equal(eg_set_num_threads(threads), EG_OK);
                eg_tensor *p = eg_softmax(x, -1), *log_p = eg_log_softmax(x, 1);
                assert_same_bits(eg_transpose(eg_softmax(xt, 0), 0, 1), p);
                assert_same_bits(eg_transpose(eg_log_softmax(xt, 0), 0, 1), log_p);
                eg_tensor *loss = eg_sparse_softmax_cross_entropy(x, labels);
                assert_non_null(loss);
                const float *pv = eg_tensor_data(p), *lv = eg_tensor_data(log_p);
                const float *loss_v = eg_tensor_data(loss);
                for (int64_t b = 0; b < rows; b++) {
                    const float *row = xv + b * classes;
                    float m = row[0];
                    for (int64_t k = 1; k < classes; k++) m = row[k] > m ? row[k] : m;
                    double s = 0;
                    for (int64_t k = 0; k < classes; k++) s += exp((double)(row[k] - m));
                    for (int64_t k = 0; k < classes; k++) {
                        double a = (double)(row[k] - m);
                        double want = exp(a) / s, want_log = a - log(s);
                        float got = pv[b * classes + k], got_log = lv[b * classes + k];
                        if (ulps_off(got, want) > 3 ||
                            fabs(got_log - want_log) > 1e-6 + ldexp(fabs(want_log), -23))
                            fail_msg("level %d row %lld class %lld: softmax %a (want %a), "
                                     "log_softmax %a (want %a)",
                                     level, (long long)b, (long long)k, (double)got, want,
                                     (double)got_log, want_log);
                    }
                    double want_loss = log(s) + (double)m - (double)row[(b * 7) % classes];
                    if (fabs(loss_v[b] - want_loss) > 1e-6 * fmax(1, fabs(want_loss)))
                        fail_msg("level %d row %lld: loss %a, want %a", level, (long long)b,
                                 (double)loss_v[b], want_loss);
                }
            }
    }
}

/* Broadcasts (row, column, scalar) and transposed operands of binary ops equal the same op on
 * materialized operands. */
static void test_binary_layouts(void **state) {
    (void)state;
    int64_t shape[2] = {129, 257}, row_shape[1] = {257}, column_shape[2] = {129, 1};
    int64_t tshape[2] = {257, 129};
    eg_tensor *x = uniform_tensor(2, shape, 5), *row = uniform_tensor(1, row_shape, 6);
    eg_tensor *column = uniform_tensor(2, column_shape, 7);
    eg_tensor *yt = eg_transpose(uniform_tensor(2, tshape, 8), 0, 1);
    eg_tensor *row_full = eg_contiguous(eg_broadcast_to(row, 2, shape));
    eg_tensor *column_full = eg_contiguous(eg_broadcast_to(column, 2, shape));
    eg_tensor *yt_full = eg_contiguous(yt);
    for (int level = 0; level < EG__CPU_LEVEL_COUNT; level++)
        for (int threads = 1; threads <= 2; threads++) {
            eg__cpu_set_level(level);
            assert_int_equal(eg_set_num_threads(threads), EG_OK);
            assert_same_bits(eg_add(x, row), eg_add(x, row_full));
            assert_same_bits(eg_mul(column, x), eg_mul(column_full, x));
            assert_same_bits(eg_sub(x, yt), eg_sub(x, yt_full));
            assert_same_bits(eg_add(yt, yt), eg_add(yt_full, yt_full));
            assert_same_bits(eg_maximum(yt, x), eg_maximum(yt_full, x));
        }
}

typedef eg_tensor *(*binary_op)(const eg_tensor *, const eg_tensor *);
static eg_tensor *op_div(const eg_tensor *a, const eg_tensor *b) {
    return eg_div(a, b);
}
static eg_tensor *op_pow(const eg_tensor *a, const eg_tensor *b) {
    return eg_pow(eg_abs(a), b);
}
static eg_tensor *op_neg(const eg_tensor *x) {
    return eg_neg(x);
}
static eg_tensor *op_sqrt(const eg_tensor *x) {
    return eg_sqrt(eg_abs(x));
}
static eg_tensor *op_rsqrt(const eg_tensor *x) {
    return eg_rsqrt(x);
}
static eg_tensor *op_square(const eg_tensor *x) {
    return eg_square(x);
}
static eg_tensor *op_reciprocal(const eg_tensor *x) {
    return eg_reciprocal(x);
}
static eg_tensor *op_clip(const eg_tensor *x) {
    return eg_clip(x, -0.5, 0.25);
}
static eg_tensor *op_sign(const eg_tensor *x) {
    return eg_sign(x);
}

/* The plain unary and binary loops (everything but f32 vector math) do the same IEEE operations
 * at every level, in f32 and f64, contiguous (lengths with every vector tail) and with a
 * broadcast scalar operand: the same bits as the baseline at every level, at 1 and 2 threads;
 * f64 exp and tanh (libm per element) too. */
static void test_plain_loops_levels_agree(void **state) {
    (void)state;
    const unary_op unary[] = {op_neg,  op_sqrt, op_rsqrt, op_square, op_reciprocal, op_clip,
                              op_sign, op_relu, op_log,   op_exp,    op_tanh};
    const binary_op binary[] = {eg_add, eg_sub, eg_mul, op_div, eg_maximum, eg_minimum, op_pow};
    const eg_dtype dtypes[] = {EG_DTYPE_F32, EG_DTYPE_F64};
    const int64_t lengths[] = {1, 15, 17, 33, 4099, 100003};
    for (size_t d = 0; d < 2; d++)
        for (size_t l = 0; l < sizeof lengths / sizeof lengths[0]; l++) {
            int64_t n = lengths[l], one = 1;
            eg_tensor *x = eg_cast(eg_mul_scalar(uniform_tensor(1, &n, 70 + l), 8.0), dtypes[d]);
            eg_tensor *y = eg_cast(uniform_tensor(1, &n, 80 + l), dtypes[d]);
            eg_tensor *scalar =
                eg_cast(eg_add_scalar(uniform_tensor(1, &one, 90 + l), 1.5), dtypes[d]);
            float *xv = eg_tensor_data(x);
            if (dtypes[d] == EG_DTYPE_F32 && n > 10) /* special values: NaN, -0, a 0 divisor */
                xv[3] = NAN, xv[5] = -0.0f, ((float *)eg_tensor_data(y))[7] = 0.0f;
            for (size_t o = 0;
                 o < sizeof unary / sizeof unary[0] + sizeof binary / sizeof binary[0]; o++) {
                bool is_unary = o < sizeof unary / sizeof unary[0];
                /* f32 exp, log, tanh are vector math (the test above); f64 ones are plain loops */
                if (is_unary && dtypes[d] == EG_DTYPE_F32 &&
                    (unary[o] == op_log || unary[o] == op_exp || unary[o] == op_tanh))
                    continue;
                eg_tensor *reference[3] = {NULL};
                for (int level = 0; level < EG__CPU_LEVEL_COUNT; level++)
                    for (int threads = 1; threads <= 2; threads++) {
                        eg__cpu_set_level((eg__cpu_level)level);
                        assert_int_equal(eg_set_num_threads(threads), EG_OK);
                        const binary_op b =
                            is_unary ? NULL : binary[o - sizeof unary / sizeof unary[0]];
                        eg_tensor *r[3] = {is_unary ? unary[o](x) : b(x, y),
                                           is_unary ? NULL : b(x, scalar),
                                           is_unary ? NULL : b(scalar, y)};
                        for (int k = 0; k < (is_unary ? 1 : 3); k++) {
                            assert_non_null(r[k]);
                            if (!reference[k]) reference[k] = r[k];
                            assert_same_bits(r[k], reference[k]);
                        }
                    }
            }
        }
}

/* Adam's update of a weight (odd size, so every vector loop has a tail) and a bias, applied as
 * one parallel pass over both: the same bits at 1 and 2 threads on every CPU path; on the
 * baseline and AVX2 paths equal to Keras' formula evaluated one element at a time in float; on
 * the AVX-512 path (update.c: fused moments, the step without the divider) the moments equal the
 * fused formula in float bitwise and the variable is within 3 ulp of each step (tests/test_optim.c
 * bounds the step) plus one ulp of the variable per step (the rounding of x - step) of that
 * formula's variable. */
static void test_adam_levels_threads(void **state) {
    (void)state;
    enum { STEPS = 3, FORMS = 2 }; /* form 0: Keras' float formula; 1: the fused one */
    const int64_t weight_shape[2] = {613, 509}, bias_shape[1] = {7}; /* > the split size */
    const int64_t sizes[2] = {613 * 509, 7};
    float *expected[FORMS][2], *m_ref[FORMS][2], *u_ref[FORMS][2];
    double *steps_fused[2]; /* the sum of |step| over the steps, for the AVX-512 bound */
    for (int f = 0; f < FORMS; f++)
        for (int k = 0; k < 2; k++) {
            expected[f][k] = calloc((size_t)sizes[k], sizeof(float));
            m_ref[f][k] = calloc((size_t)sizes[k], sizeof(float));
            u_ref[f][k] = calloc((size_t)sizes[k], sizeof(float));
            assert_non_null(expected[f][k]);
            assert_non_null(m_ref[f][k]);
            assert_non_null(u_ref[f][k]);
            if (f) assert_non_null(steps_fused[k] = calloc((size_t)sizes[k], sizeof(double)));
        }
    eg_tensor *initial[2] = {uniform_tensor(2, weight_shape, 1), uniform_tensor(1, bias_shape, 2)};
    eg_tensor *grads[STEPS][2];
    for (int t = 0; t < STEPS; t++) {
        grads[t][0] = uniform_tensor(2, weight_shape, 10 + (uint64_t)t);
        grads[t][1] = uniform_tensor(1, bias_shape, 20 + (uint64_t)t);
    }
    /* the reference: eagle's float formula of Keras' Adam (lr 1e-3, betas .9/.999, eps 1e-7) */
    for (int f = 0; f < FORMS; f++)
        for (int k = 0; k < 2; k++)
            memcpy(expected[f][k], eg_tensor_data(initial[k]), sizes[k] * 4);
    for (int t = 0; t < STEPS; t++) {
        double step = t + 1;
        float alpha = (float)(1e-3 * sqrt(1.0 - pow(0.999, step)) / (1.0 - pow(0.9, step)));
        float b1 = (float)(1.0 - 0.9), b2 = (float)(1.0 - 0.999), eps = (float)1e-7;
        for (int f = 0; f < FORMS; f++)
            for (int k = 0; k < 2; k++) {
                const float *g = eg_tensor_data(grads[t][k]);
                float *m = m_ref[f][k], *u = u_ref[f][k];
                for (int64_t i = 0; i < sizes[k]; i++) {
                    float mi = f ? fmaf(g[i] - m[i], b1, m[i]) : m[i] + (g[i] - m[i]) * b1;
                    float ui = f ? fmaf(fmaf(g[i], g[i], -u[i]), b2, u[i])
                                 : u[i] + (g[i] * g[i] - u[i]) * b2;
                    m[i] = mi;
                    u[i] = ui;
                    float increment = (mi * alpha) / (sqrtf(ui) + eps);
                    expected[f][k][i] = expected[f][k][i] - increment;
                    if (f) steps_fused[k][i] += fabsf(increment);
                }
            }
    }
    for (int level = EG__CPU_BASELINE; level <= (int)eg__cpu_best_level(); level++) {
        eg__cpu_set_level((eg__cpu_level)level);
        int f = level == EG__CPU_AVX512;
        float *first_threads[2] = {NULL, NULL};
        for (int threads = 1; threads <= 2; threads++) {
            assert_int_equal(eg_set_num_threads(threads), EG_OK);
            eg_tensor *vars[2] = {eg_variable(initial[0], "w"), eg_variable(initial[1], "b")};
            assert_non_null(vars[0]);
            assert_non_null(vars[1]);
            eg_optimizer *opt = eg_adam_new(NULL);
            for (int t = 0; t < STEPS; t++)
                assert_int_equal(eg_optimizer_apply_gradients(opt, 2, grads[t], vars), EG_OK);
            for (int k = 0; k < 2; k++) {
                const float *got = eg_tensor_data(vars[k]);
                if (threads == 1) {
                    first_threads[k] = malloc((size_t)sizes[k] * 4);
                    assert_non_null(first_threads[k]);
                    memcpy(first_threads[k], got, (size_t)sizes[k] * 4);
                } else {
                    assert_memory_equal(got, first_threads[k], (size_t)sizes[k] * 4);
                }
                if (f)
                    for (int64_t i = 0; i < sizes[k]; i++) {
                        double want = expected[f][k][i];
                        if (fabs(got[i] - want) > 0x1p-23 * (STEPS * fabs(want) + 3 * steps_fused[k][i]))
                            fail_msg("AVX-512 variable %d element %lld: %a, want %a", k,
                                     (long long)i, (double)got[i], (double)expected[f][k][i]);
                    }
                else
                    assert_memory_equal(got, expected[f][k], sizes[k] * 4);
                assert_memory_equal(eg_tensor_data(eg_optimizer_get_slot(opt, vars[k], "momentum")),
                                    m_ref[f][k], sizes[k] * 4);
                assert_memory_equal(eg_tensor_data(eg_optimizer_get_slot(opt, vars[k], "velocity")),
                                    u_ref[f][k], sizes[k] * 4);
            }
            eg_optimizer_free(opt);
            eg_release(vars[0]);
            eg_release(vars[1]);
        }
        for (int k = 0; k < 2; k++) free(first_threads[k]);
    }
    for (int f = 0; f < FORMS; f++)
        for (int k = 0; k < 2; k++) {
            free(expected[f][k]);
            free(m_ref[f][k]);
            free(u_ref[f][k]);
            if (f) free(steps_fused[k]);
        }
}

/* Transposed inputs are staged through small transposed tiles (src/backend/cpu/loops.c): the
 * copy of a transposed view and an op on one against plain C, for 4-byte types (staged) and
 * others (walked directly), with sizes that leave partial tiles and partial 4 x 4 blocks, and a
 * batch of matrices. */
static void test_transposed_inputs_plain_c(void **state) {
    (void)state;
    const int64_t batch = 2, rows = 131, columns = 70; /* x: (batch, rows, columns) */
    int64_t shape[3] = {batch, rows, columns};
    const eg_dtype dtypes[] = {EG_DTYPE_F32, EG_DTYPE_I32, EG_DTYPE_F64, EG_DTYPE_U8};
    for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) {
        eg_tensor *x = eg_cast(eg_mul_scalar(uniform_tensor(3, shape, 40 + d), 100.0), dtypes[d]);
        eg_tensor *xd = eg_cast(x, EG_DTYPE_F64); /* plain C reads these */
        const double *xv = eg_tensor_data(xd);
        for (int threads = 1; threads <= 2; threads++) {
            assert_int_equal(eg_set_num_threads(threads), EG_OK);
            eg_tensor *xt = eg_transpose(x, 1, 2); /* (batch, columns, rows) */
            eg_tensor *copy = eg_cast(eg_contiguous(xt), EG_DTYPE_F64);
            eg_tensor *sum = eg_cast(eg_add(xt, xt), EG_DTYPE_F64);
            const double *cv = eg_tensor_data(copy), *sv = eg_tensor_data(sum);
            for (int64_t b = 0; b < batch; b++)
                for (int64_t i = 0; i < columns; i++)
                    for (int64_t j = 0; j < rows; j++) {
                        double want = xv[(b * rows + j) * columns + i];
                        int64_t at = (b * columns + i) * rows + j;
                        if (cv[at] != want || (dtypes[d] != EG_DTYPE_U8 && sv[at] != want + want))
                            fail_msg("dtype %d threads %d at (%lld, %lld, %lld): copy %g sum %g, "
                                     "want %g",
                                     (int)dtypes[d], threads, (long long)b, (long long)i,
                                     (long long)j, cv[at], sv[at], want);
                    }
        }
    }
}

/* ---- bf16 and f16: the f32 kernel's result, rounded once ----
 *
 * A bf16 / f16 kernel widens its inputs to f32, runs the f32 kernel's arithmetic and rounds once
 * (backend/cpu/lowp.h); its contiguous cheap ops take fused paths that widen and round in
 * registers, the rest (and strided operands) blocks through the f32 loops. Whichever path, at
 * each level the bits must be those of cast(f32 op(cast(x, f32)), dtype) at that level, specials
 * included (of two NaN inputs, either may pass on: SAME_VALUES): checked here on contiguous
 * tensors (the fused paths, with tails of every length mod 16), broadcast operands and
 * transposed views (the block path). */

/* n values in dtype: magnitudes over 2^-8 .. 2^8 of both signs, and every 13th a special one:
 * NaN of both signs, infinities, signed zeros, subnormals, the largest finite and 1. */
static eg_tensor *low_precision_values(eg_dtype dtype, int n_dims, const int64_t *shape,
                                       uint64_t seed) {
    int64_t n = 1;
    for (int d = 0; d < n_dims; d++) n *= shape[d];
    float *v = malloc(sizeof(float) * (size_t)(n ? n : 1));
    assert_non_null(v);
    bool f16 = dtype == EG_DTYPE_F16;
    const float specials[] = {NAN,
                              -NAN,
                              INFINITY,
                              -INFINITY,
                              0.0f,
                              -0.0f,
                              f16 ? 3e-6f : 2e-39f,
                              f16 ? -1e-7f : -3e-40f,
                              f16 ? 65504.0f : 3.0e38f,
                              f16 ? -65504.0f : -3.0e38f,
                              1.0f,
                              -1.0f};
    uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int64_t i = 0; i < n; i++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        double u = (double)(state >> 11) * 0x1p-53; /* [0, 1) */
        int exponent = (int)((state >> 3) % 17) - 8;
        v[i] = i % 13 == 5 ? specials[(i / 13) % (sizeof specials / sizeof specials[0])]
                           : (float)ldexp(2 * u - 1, exponent);
    }
    eg_tensor *x = eg_cast(eg_tensor_from_data(v, EG_DTYPE_F32, n_dims, shape), dtype);
    free(v);
    assert_non_null(x);
    /* signaling NaNs of both signs (no f32 value casts to one: rounding sets the quiet bit) */
    uint16_t *bits = eg_tensor_data(x);
    for (int64_t i = 3; i < n; i += 29)
        bits[i] = (uint16_t)((i / 29 % 2 ? 0x8000u : 0u) | (f16 ? 0x7c01u : 0x7f81u));
    return x;
}

/* assert_same_bits with the case named on failure. */
#define SAME_BITS(got, want, ...)                                                                  \
    do {                                                                                           \
        eg_tensor *got_ = (got), *want_ = (want);                                                  \
        if (!got_ || !want_) fail_msg("%s: %s", #got, eg_last_error());                            \
        eg_tensor *cg_ = eg_contiguous(got_), *cw_ = eg_contiguous(want_);                         \
        size_t bytes_ = (size_t)eg_tensor_n_elems(cg_) * eg_dtype_size(eg_tensor_dtype(cg_));      \
        if (eg_tensor_n_elems(cg_) != eg_tensor_n_elems(cw_) ||                                    \
            eg_tensor_dtype(cg_) != eg_tensor_dtype(cw_) ||                                        \
            memcmp(eg_tensor_data(cg_), eg_tensor_data(cw_), bytes_) != 0) {                       \
            fprintf(stderr, __VA_ARGS__);                                                          \
            const unsigned char *g_ = eg_tensor_data(cg_), *w_ = eg_tensor_data(cw_);              \
            for (size_t k_ = 0; k_ < bytes_; k_++)                                                 \
                if (g_[k_] != w_[k_]) {                                                            \
                    fprintf(stderr, "first difference at byte %zu: %02x, want %02x\n", k_,         \
                            g_[k_], w_[k_]);                                                       \
                    break;                                                                         \
                }                                                                                  \
            fail_msg("%s differs from the rounded f32 result", #got);                              \
        }                                                                                          \
    } while (0)

/* SAME_BITS where a result may come from two NaN inputs: which NaN an IEEE operation passes on
 * then depends on the order of its operands, which the compiler may swap for a commutative one
 * (and does differently per build), so two NaNs count as equal there; every other value, NaN
 * against a number included, must match bit for bit. 16-bit results. */
static bool same_16_or_both_nan(const eg_tensor *a, const eg_tensor *b) {
    eg_dtype dtype = eg_tensor_dtype(a);
    if (dtype != eg_tensor_dtype(b) || eg_tensor_n_elems(a) != eg_tensor_n_elems(b)) return false;
    eg_tensor *ca = eg_contiguous(a), *cb = eg_contiguous(b);
    if (eg_dtype_size(dtype) != 2)
        return memcmp(eg_tensor_data(ca), eg_tensor_data(cb),
                      (size_t)eg_tensor_n_elems(a) * eg_dtype_size(dtype)) == 0;
    const uint16_t *x = eg_tensor_data(ca), *y = eg_tensor_data(cb);
    uint16_t inf = dtype == EG_DTYPE_BF16 ? 0x7f80u : 0x7c00u;
    for (int64_t i = 0; i < eg_tensor_n_elems(a); i++)
        if (x[i] != y[i] && !((x[i] & 0x7fffu) > inf && (y[i] & 0x7fffu) > inf)) {
            fprintf(stderr, "element %lld: %04x, want %04x\n", (long long)i, x[i], y[i]);
            return false;
        }
    return true;
}
#define SAME_VALUES(got, want, ...)                                                                \
    do {                                                                                           \
        eg_tensor *got_ = (got), *want_ = (want);                                                  \
        if (!got_ || !want_) fail_msg("%s: %s", #got, eg_last_error());                            \
        if (!same_16_or_both_nan(got_, want_)) {                                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fail_msg("%s differs from the rounded f32 result", #got);                              \
        }                                                                                          \
    } while (0)

static eg_tensor *widened(const eg_tensor *x) {
    return eg_cast(x, EG_DTYPE_F32);
}

static eg_tensor *lp_sign(const eg_tensor *x) {
    return eg_sign(x);
}
static eg_tensor *lp_sin(const eg_tensor *x) {
    return eg_sin(x);
}
static eg_tensor *lp_erf(const eg_tensor *x) {
    return eg_erf(x);
}
static eg_tensor *lp_abs(const eg_tensor *x) {
    return eg_abs(x);
}
static eg_tensor *lp_clip(const eg_tensor *x) {
    return eg_clip(x, -0.3, 0.7);
}
static eg_tensor *lp_dropout(const eg_tensor *x) {
    return eg_dropout(x, 0.375, 11, true);
}
static eg_tensor *lp_raw_log(const eg_tensor *x) {
    return eg_log(x);
}

typedef eg_tensor *(*binary_fn_t)(const eg_tensor *, const eg_tensor *);
static eg_tensor *lp_add(const eg_tensor *a, const eg_tensor *b) {
    return eg_add(a, b);
}
static eg_tensor *lp_sub(const eg_tensor *a, const eg_tensor *b) {
    return eg_sub(a, b);
}
static eg_tensor *lp_mul(const eg_tensor *a, const eg_tensor *b) {
    return eg_mul(a, b);
}
static eg_tensor *lp_maximum(const eg_tensor *a, const eg_tensor *b) {
    return eg_maximum(a, b);
}
static eg_tensor *lp_minimum(const eg_tensor *a, const eg_tensor *b) {
    return eg_minimum(a, b);
}
static eg_tensor *lp_less(const eg_tensor *a, const eg_tensor *b) {
    return eg_less(a, b);
}
static eg_tensor *lp_equal(const eg_tensor *a, const eg_tensor *b) {
    return eg_equal(a, b);
}
static eg_tensor *lp_relu_backward(const eg_tensor *x, const eg_tensor *g) {
    static const eg__attrs no_attrs;
    const eg_tensor *in[2] = {x, g};
    return eg__execute(EG__OP_RELU_BACKWARD, 2, in, &no_attrs);
}
static eg_tensor *lp_mul_add_full(const eg_tensor *x, const eg_tensor *a) {
    return eg_mul_add(x, a, eg_neg(x));
}
/* a scale and a shift broadcast (one element each), then a broadcast scale with a full shift */
static eg_tensor *lp_mul_add_scalars(const eg_tensor *x, const eg_tensor *a) {
    eg_tensor *flat = eg_reshape(a, 1, (int64_t[]){-1});
    int64_t n = eg_tensor_n_elems(a);
    return eg_mul_add(x, eg_slice(flat, 0, 0, 1, 1), eg_slice(flat, 0, n - 1, n, 1));
}
static eg_tensor *lp_mul_add_mixed(const eg_tensor *x, const eg_tensor *a) {
    return eg_mul_add(x, eg_slice(eg_reshape(a, 1, (int64_t[]){-1}), 0, 0, 1, 1), a);
}

static void test_low_precision_is_rounded_f32(void **state) {
    (void)state;
    const unary_op unary[] = {op_exp,        lp_raw_log, op_tanh, op_sigmoid, op_gelu,  op_softplus,
                              op_relu,       op_neg,     lp_abs,  op_sqrt,    op_rsqrt, op_square,
                              op_reciprocal, lp_sign,    lp_sin,  lp_erf,     lp_clip,  lp_dropout};
    const binary_fn_t binary[] = {
        lp_add,          lp_sub,  lp_mul,   op_div,           op_pow,          lp_maximum,
        lp_minimum,      lp_less, lp_equal, lp_relu_backward, lp_mul_add_full, lp_mul_add_scalars,
        lp_mul_add_mixed};
    const eg_dtype dtypes[] = {EG_DTYPE_BF16, EG_DTYPE_F16};
    const int64_t lengths[] = {1, 15, 16, 17, 31, 1000, 4099};
    for (size_t d = 0; d < 2; d++)
        for (int level = 0; level < EG__CPU_LEVEL_COUNT; level++) {
            eg__cpu_set_level((eg__cpu_level)level);
            eg_dtype dtype = dtypes[d];
            for (size_t l = 0; l < sizeof lengths / sizeof lengths[0]; l++) {
                int64_t n = lengths[l];
                eg_tensor *x = low_precision_values(dtype, 1, &n, 100 + l);
                eg_tensor *y = low_precision_values(dtype, 1, &n, 200 + l);
                eg_tensor *x0 = eg_reshape(eg_slice(x, 0, 0, 1, 1), 0, NULL);
                for (size_t o = 0; o < sizeof unary / sizeof unary[0]; o++)
                    SAME_BITS(unary[o](x), eg_cast(unary[o](widened(x)), dtype),
                              "%s level %d unary %zu\n", eg_dtype_name(dtype), level, o);
                for (size_t o = 0; o < sizeof binary / sizeof binary[0]; o++) {
                    eg_tensor *want = binary[o](widened(x), widened(y));
                    eg_tensor *got = binary[o](x, y);
                    if (eg_tensor_dtype(want) == EG_DTYPE_F32) want = eg_cast(want, dtype);
                    SAME_VALUES(got, want, "%s level %d n %lld binary %zu\n", eg_dtype_name(dtype),
                              level, (long long)n, o);
                    if (o >= 10) continue; /* mul_add broadcasts its own way */
                    /* a broadcast element on either side */
                    want = binary[o](widened(x), widened(x0));
                    if (eg_tensor_dtype(want) == EG_DTYPE_F32) want = eg_cast(want, dtype);
                    SAME_VALUES(binary[o](x, x0), want, "%s level %d binary %zu (x, x0)\n",
                              eg_dtype_name(dtype), level, o);
                    want = binary[o](widened(x0), widened(y));
                    if (eg_tensor_dtype(want) == EG_DTYPE_F32) want = eg_cast(want, dtype);
                    SAME_VALUES(binary[o](x0, y), want, "%s level %d binary %zu (x0, y)\n",
                              eg_dtype_name(dtype), level, o);
                }
            }
            /* transposed views: the strided block path */
            int64_t shape[2] = {37, 29};
            eg_tensor *x = eg_transpose(low_precision_values(dtype, 2, shape, 7), 0, 1);
            eg_tensor *y = eg_transpose(low_precision_values(dtype, 2, shape, 8), 0, 1);
            for (size_t o = 0; o < sizeof unary / sizeof unary[0]; o++)
                SAME_BITS(unary[o](x), eg_cast(unary[o](widened(x)), dtype),
                          "%s level %d unary %zu\n", eg_dtype_name(dtype), level, o);
            for (size_t o = 0; o < sizeof binary / sizeof binary[0]; o++) {
                eg_tensor *want = binary[o](widened(x), widened(y));
                if (eg_tensor_dtype(want) == EG_DTYPE_F32) want = eg_cast(want, dtype);
                SAME_VALUES(binary[o](x, y), want, "%s level %d binary %zu transposed\n",
                          eg_dtype_name(dtype), level, o);
            }
            /* casts between the formats, and from f64 and the integers: one rounding each way */
            eg_tensor *other = eg_cast(x, dtypes[1 - d]);
            assert_same_bits(other, eg_cast(widened(x), dtypes[1 - d]));
            /* exact both ways (a NaN comes back quiet, as from f32) */
            assert_same_bits(eg_cast(eg_cast(x, EG_DTYPE_F64), dtype), eg_cast(widened(x), dtype));
            assert_same_bits(eg_cast(x, EG_DTYPE_I32), eg_cast(widened(x), EG_DTYPE_I32));
        }
}

/* The vector-math ops on every bf16 and every f16 value (all 2^16 bit patterns, tails of odd
 * lengths too) at every level: the f32 result rounded once, bit for bit. */
static void test_low_precision_vector_math_every_input(void **state) {
    (void)state;
    const unary_op ops[] = {op_exp, lp_raw_log, op_tanh, op_sigmoid, op_gelu, op_softplus};
    const eg_dtype dtypes[] = {EG_DTYPE_BF16, EG_DTYPE_F16};
    int64_t n = 65536;
    uint16_t *bits = malloc(sizeof(uint16_t) * (size_t)n);
    assert_non_null(bits);
    for (int64_t i = 0; i < n; i++) bits[i] = (uint16_t)i;
    for (size_t d = 0; d < 2; d++) {
        eg_tensor *all = eg_tensor_from_data(bits, dtypes[d], 1, &n);
        eg_tensor *odd = eg_slice(all, 0, 5, n - 2, 1); /* not a multiple of any vector */
        for (int level = 0; level < EG__CPU_LEVEL_COUNT; level++) {
            eg__cpu_set_level((eg__cpu_level)level);
            for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
                SAME_BITS(ops[o](all), eg_cast(ops[o](widened(all)), dtypes[d]),
                          "%s level %d op %zu, all inputs\n", eg_dtype_name(dtypes[d]), level, o);
                SAME_BITS(ops[o](eg_contiguous(odd)), eg_cast(ops[o](widened(odd)), dtypes[d]),
                          "%s level %d op %zu, odd length\n", eg_dtype_name(dtypes[d]), level, o);
            }
        }
    }
    free(bits);
}

/* Pooling in bf16 / f16 (the fused NHWC loops and the widened-copy path for the rest): max, mean,
 * argmax and both gradients are the f32 kernels' results rounded once, bit for bit, NHWC and
 * NCHW, tiling and overlapping windows, with specials in the data. */
static eg_tensor *pool_op(int which, const eg_tensor *x, const eg_tensor *dy,
                          const eg_pool2d_options *o) {
    if (which == 0) return eg_max_pool2d(x, o);
    if (which == 1) return eg_avg_pool2d(x, o);
    eg__attrs attrs;
    if (!eg__pool2d_attrs(&attrs, o, eg_tensor_shape(x), "test")) return NULL;
    if (which == 2) return eg__execute(EG__OP_MAX_POOL2D_ARGMAX, 1, &x, &attrs);
    if (which == 3) {
        const eg_tensor *in[2] = {x, dy};
        return eg__execute(EG__OP_MAX_POOL2D_BACKWARD, 2, in, &attrs);
    }
    attrs.n_dims = 4;
    memcpy(attrs.shape, eg_tensor_shape(x), sizeof(int64_t) * 4);
    return eg__execute(EG__OP_AVG_POOL2D_BACKWARD, 1, &dy, &attrs);
}

static void test_low_precision_pooling_is_rounded_f32(void **state) {
    (void)state;
    const eg_dtype dtypes[] = {EG_DTYPE_BF16, EG_DTYPE_F16};
    const int windows[][4] = {{2, 2, 2, 2}, {3, 3, 2, 2}, {3, 2, 3, 2}}; /* pool size, strides */
    for (size_t d = 0; d < 2; d++)
        for (int format = 0; format < 2; format++)
            for (size_t w = 0; w < sizeof windows / sizeof windows[0]; w++)
                for (int level = 0; level < EG__CPU_LEVEL_COUNT; level++) {
                    eg__cpu_set_level((eg__cpu_level)level);
                    eg_dtype dtype = dtypes[d];
                    eg_pool2d_options o = {{windows[w][0], windows[w][1]},
                                           {windows[w][2], windows[w][3]},
                                           w == 1 ? EG_PADDING_SAME : EG_PADDING_VALID,
                                           {0},
                                           format ? EG_DATA_FORMAT_NCHW : EG_DATA_FORMAT_NHWC};
                    int64_t shape[4] = {2, 9, 8, 19}; /* channels: one vector and a tail */
                    if (format) shape[1] = 19, shape[2] = 9, shape[3] = 8;
                    eg_tensor *x = low_precision_values(dtype, 4, shape, 300 + w);
                    eg_tensor *y = eg_max_pool2d(x, &o);
                    assert_non_null(y);
                    eg_tensor *dy = low_precision_values(dtype, 4, eg_tensor_shape(y), 400 + w);
                    for (int which = 0; which < 5; which++) {
                        eg_tensor *want = pool_op(which, widened(x), widened(dy), &o);
                        if (which != 2) want = eg_cast(want, dtype);
                        SAME_VALUES(pool_op(which, x, dy, &o), want,
                                  "%s format %d window %zu level %d pool op %d\n",
                                  eg_dtype_name(dtype), format, w, level, which);
                    }
                }
}

/* bf16 / f16 sums are the canonical order's double sum of the widened values, rounded once to
 * nearest even (here by hand from the double: normal results only), at every level and thread
 * count, for rows, long rows and columns, planted cancelling pairs included (bf16 holds 2^52). */
static uint16_t round_double_to(eg_dtype dtype, double v) {
    int bits = dtype == EG_DTYPE_BF16 ? 8 : 11, e;
    double m = frexp(v, &e);
    float rounded = (float)ldexp(nearbyint(ldexp(m, bits)), e - bits); /* exact in f32 */
    uint16_t out;
    if (dtype == EG_DTYPE_BF16)
        eg_f32_to_bf16(&rounded, &out, 1);
    else
        eg_f32_to_f16(&rounded, &out, 1);
    return out;
}

static void test_low_precision_sums(void **state) {
    (void)state;
    const eg_dtype dtypes[] = {EG_DTYPE_BF16, EG_DTYPE_F16};
    const int64_t shapes[][2] = {{3, 200003}, {2, 65537}, {17, 1000}, {64, 64}, {5, 9}};
    for (size_t d = 0; d < 2; d++)
        for (size_t i = 0; i < 2 * sizeof shapes / sizeof shapes[0]; i++) {
            eg_dtype dtype = dtypes[d];
            const int64_t *shape = shapes[i / 2];
            eg_tensor *f = uniform_tensor(2, shape, 60 + i);
            if (i % 2 && dtype == EG_DTYPE_BF16)
                for (int64_t r = 0; r < shape[0]; r++)
                    plant_cancelling_pairs((float *)eg_tensor_data(f) + r * shape[1], shape[1]);
            eg_tensor *x = eg_cast(f, dtype), *wide = widened(x);
            eg_tensor *xt = eg_contiguous(eg_transpose(x, 0, 1));
            const float *values = eg_tensor_data(wide);
            uint16_t want[2][64];
            for (int64_t r = 0; r < shape[0] && r < 64; r++) {
                double total = canonical_sum(values + r * shape[1], shape[1], 1);
                want[0][r] = round_double_to(dtype, total);
                want[1][r] = round_double_to(dtype, total / (double)shape[1]);
            }
            int one = 1, zero = 0;
            for (int level = 0; level < EG__CPU_LEVEL_COUNT; level++)
                for (int threads = 1; threads <= 2; threads++) {
                    eg__cpu_set_level(level);
                    assert_int_equal(eg_set_num_threads(threads), EG_OK);
                    eg_tensor *got[6] = {eg_sum(x, 1, &one, false),
                                         eg_mean(x, 1, &one, false),
                                         eg_sum(xt, 1, &zero, false),
                                         eg_mean(xt, 1, &zero, false),
                                         eg_sum(eg_transpose(xt, 0, 1), 1, &one, false),
                                         eg_mean(eg_transpose(xt, 0, 1), 1, &one, false)};
                    for (int k = 0; k < 6; k++) {
                        assert_non_null(got[k]);
                        assert_int_equal(eg_tensor_dtype(got[k]), dtype);
                        assert_memory_equal(eg_tensor_data(got[k]), want[k % 2],
                                            sizeof(uint16_t) * (size_t)shape[0]);
                    }
                }
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_sum_canonical_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sum_canonical_order_cancelling, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sum_layouts_agree, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unary_layouts_levels_threads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_softmax_f32_vector_exp, setup, teardown),
        cmocka_unit_test_setup_teardown(test_binary_layouts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_plain_loops_levels_agree, setup, teardown),
        cmocka_unit_test_setup_teardown(test_adam_levels_threads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_transposed_inputs_plain_c, setup, teardown),
        cmocka_unit_test_setup_teardown(test_low_precision_is_rounded_f32, setup, teardown),
        cmocka_unit_test_setup_teardown(test_low_precision_vector_math_every_input, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_low_precision_pooling_is_rounded_f32, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_low_precision_sums, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
