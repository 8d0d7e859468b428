/* Elementwise ops and sums give the same bits whatever the CPU path (baseline, AVX2 or AVX-512),
 * the thread count, the layout (a transposed view, a broadcast) and the length: the canonical
 * summation order (src/backend/cpu/reduce.c) checked against a plain-C reference, long sums split
 * over threads, the plain unary and binary loops (compiled once per level), the vector-math ops
 * against a one-element-at-a-time evaluation, and Adam's fused update (one parallel pass over all
 * variables) against Keras' formula in plain C. The one exception is vector math (exp, tanh, ...):
 * its AVX2 and AVX-512 paths use FMA, so the baseline's bits differ from theirs (still not on
 * threads, layout or length) within both bounds; AVX-512 gives AVX2's bits exactly. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
