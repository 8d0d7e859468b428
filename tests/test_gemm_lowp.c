/* bf16 and f16 matrix products (backend/cpu/gemm_lowp.c) on every path this CPU has — AMX tiles,
 * AVX-512 BF16, converted to f32 while packing, portable C — each forced in turn (a path the CPU
 * or EG_CPU lacks is skipped, and says so), and through eg_matmul / eg_dense (the path the
 * library picks), against an f64 reference computed from the same 16-bit inputs.
 *
 * The bound, from the formats: every bf16 or f16 input is exact in f32, and so is the product of
 * two of them (at most 2 x 8 or 2 x 11 significand bits, within f32's range for these inputs).
 * Summing k such products in f32, in any order, errs by at most (k - 1) 2^-24 sum |a b| (to first
 * order; the bound below uses k + 3, which also covers the bias add). The epilogue's activation is
 * 1-Lipschitz and computed in f32 within a few ulps (2^-21 |y|). Rounding the result once to
 * bf16 adds at most 2^-8 |y| (8 significand bits, round to nearest even: half an ulp), to f16
 * 2^-11 |y| plus 2^-25 absolute (f16's subnormal spacing is 2^-24); f32 output adds nothing:
 *   |y - y_ref| <= (k + 3) 2^-24 (sum |a b| + |bias|) + 2^-21 |y_ref| + u_out (|y_ref| + that)
 * An f32-output run thus checks the accumulation to f32 precision (accumulating in bf16 would
 * miss it by a factor of ~2^16). Results must not depend on the split of C (compared bitwise over
 * ragged ranges) nor on the thread count (1 and 2 threads, bitwise). Output rounding is checked
 * bit for bit at ties, and f16 overflow and subnormal results exactly. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/gemm_lowp.h"
#include "base/cpu_features.h"
#include "eagle.h"
#include "test_util.h"

static const eg__lowp_path paths[] = {EG__GEMM_LOWP_AMX, EG__GEMM_LOWP_AVX512_BF16,
                                      EG__GEMM_LOWP_CONVERT, EG__GEMM_LOWP_PORTABLE};
#define N_PATHS (sizeof paths / sizeof *paths)
static const eg_dtype dtypes[] = {EG_DTYPE_BF16, EG_DTYPE_F16};

static bool usable(eg__lowp_path path, eg_dtype dtype) {
    if (eg__gemm_lowp_usable(path, dtype)) return true;
    static bool said[EG__GEMM_LOWP_PATH_COUNT][2];
    bool *s = &said[path][dtype == EG_DTYPE_F16];
    if (!*s)
        print_message("skipped: path %s for %s (not on this CPU at EG_CPU=%s)\n",
                      eg__gemm_lowp_path_name(path), eg_dtype_name(dtype),
                      eg__cpu_level_name(eg__cpu_active_level()));
    *s = true;
    return false;
}

static int teardown(void **state) {
    (void)state;
    while (eg_scope_depth() > 0) eg_scope_end();
    if (eg_last_status() != EG_OK) {
        print_error("unexpected pending error: %s\n", eg_last_error());
        return -1;
    }
    return eg_set_num_threads(1) == EG_OK ? 0 : -1;
}

/* ---- values ---- */

static uint64_t rng_state = 88172645463325252ull;
static double uniform(double lo, double hi) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return lo + (hi - lo) * (double)(rng_state >> 11) * 0x1p-53;
}

static uint16_t narrow(eg_dtype dtype, float x) {
    uint16_t h;
    if (dtype == EG_DTYPE_BF16)
        eg_f32_to_bf16(&x, &h, 1);
    else
        eg_f32_to_f16(&x, &h, 1);
    return h;
}
static double wide(eg_dtype dtype, uint16_t h) {
    float x;
    if (dtype == EG_DTYPE_BF16)
        eg_bf16_to_f32(&h, &x, 1);
    else
        eg_f16_to_f32(&h, &x, 1);
    return x;
}

/* Logical matrices (row-major, dense) of 16-bit values and the f64 reference of their product. */
typedef struct problem {
    eg_dtype dtype;
    int64_t m, n, k;
    uint16_t *a, *b; /* m x k, k x n */
    double *sum, *magnitude;
} problem;

static problem make_problem(eg_dtype dtype, int64_t m, int64_t n, int64_t k) {
    problem p = {dtype,
                 m,
                 n,
                 k,
                 malloc(sizeof(uint16_t) * (size_t)(m * k + 1)),
                 malloc(sizeof(uint16_t) * (size_t)(k * n + 1)),
                 malloc(sizeof(double) * (size_t)(m * n)),
                 malloc(sizeof(double) * (size_t)(m * n))};
    assert_true(p.a && p.b && p.sum && p.magnitude);
    for (int64_t i = 0; i < m * k; i++) p.a[i] = narrow(dtype, (float)uniform(-1, 1));
    for (int64_t i = 0; i < k * n; i++) p.b[i] = narrow(dtype, (float)uniform(-1, 1));
    double *bw = malloc(sizeof(double) * (size_t)(k * n + 1));
    assert_non_null(bw);
    for (int64_t i = 0; i < k * n; i++) bw[i] = wide(dtype, p.b[i]);
    for (int64_t i = 0; i < m; i++) {
        double *s = p.sum + i * n, *mg = p.magnitude + i * n;
        for (int64_t j = 0; j < n; j++) s[j] = mg[j] = 0;
        for (int64_t q = 0; q < k; q++) {
            double x = wide(dtype, p.a[i * k + q]);
            for (int64_t j = 0; j < n; j++) {
                s[j] += x * bw[q * n + j];
                mg[j] += fabs(x * bw[q * n + j]);
            }
        }
    }
    free(bw);
    return p;
}

static void free_problem(problem *p) {
    free(p->a);
    free(p->b);
    free(p->sum);
    free(p->magnitude);
}

static double activate(eg__op act, double x) {
    switch (act) {
    case EG__OP_RELU:
        return x > 0 ? x : 0;
    case EG__OP_SIGMOID:
        return 1 / (1 + exp(-x));
    case EG__OP_TANH:
        return tanh(x);
    default:
        return x;
    }
}

/* The bound of the header comment for one element. */
static double bound(eg_dtype out, int64_t k, double magnitude, double bias, double ref) {
    double e = (double)(k + 3) * 0x1p-24 * (magnitude + fabs(bias)) + 0x1p-21 * fabs(ref) + 1e-30;
    if (out == EG_DTYPE_BF16) e += 0x1p-8 * (fabs(ref) + e);
    if (out == EG_DTYPE_F16) e += 0x1p-11 * (fabs(ref) + e) + 0x1p-25;
    return e;
}

static double c_value(eg_dtype c_dtype, const void *c, int64_t index) {
    if (c_dtype == EG_DTYPE_F32) return ((const float *)c)[index];
    return wide(c_dtype, ((const uint16_t *)c)[index]);
}

/* Checks C (row stride ldc) against p's reference with bias (f64 values, or NULL) and act. */
static void check_c(const problem *p, eg_dtype c_dtype, const void *c, int64_t ldc,
                    const double *bias, eg__op act, const char *what) {
    for (int64_t i = 0; i < p->m; i++)
        for (int64_t j = 0; j < p->n; j++) {
            double b = bias ? bias[j] : 0;
            double ref = activate(act, p->sum[i * p->n + j] + b);
            double got = c_value(c_dtype, c, i * ldc + j);
            double e = bound(c_dtype, p->k, p->magnitude[i * p->n + j], b, ref);
            if (!(fabs(got - ref) <= e))
                fail_msg(
                    "%s: %s %lldx%lldx%lld C[%lld][%lld] = %.9g, f64 reference %.9g, bound %.3g",
                    what, eg_dtype_name(p->dtype), (long long)p->m, (long long)p->n,
                    (long long)p->k, (long long)i, (long long)j, got, ref, e);
        }
}

/* ---- layouts: op(A) and op(B) stored row-major (N), column-major (T), or with no unit stride
 * (S: every other element of a wider row-major array) ---- */

typedef struct stored {
    uint16_t *data;
    int64_t row, col;
} stored;

static stored store(const uint16_t *logical, int64_t rows, int64_t cols, char layout) {
    stored s = {NULL, 0, 0};
    if (layout == 'N') {
        s.row = cols + 3, s.col = 1;
    } else if (layout == 'T') {
        s.row = 1, s.col = rows + 5;
    } else {
        s.row = 2 * cols + 2, s.col = 2;
    }
    size_t size =
        (size_t)((rows > 0 ? rows - 1 : 0) * s.row + (cols > 0 ? cols - 1 : 0) * s.col + 1);
    s.data = malloc(size * sizeof(uint16_t));
    assert_non_null(s.data);
    for (size_t i = 0; i < size; i++) s.data[i] = 0x7fc0; /* NaN where nothing belongs */
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) s.data[i * s.row + j * s.col] = logical[i * cols + j];
    return s;
}

static eg__gemm_lowp problem_on(const problem *p, eg__lowp_path path, stored a, stored b,
                                eg_dtype c_dtype, void *c) {
    return (eg__gemm_lowp){.dtype = p->dtype,
                           .m = p->m,
                           .n = p->n,
                           .k = p->k,
                           .a = a.data,
                           .a_row = a.row,
                           .a_col = a.col,
                           .b = b.data,
                           .b_row = b.row,
                           .b_col = b.col,
                           .c_dtype = c_dtype,
                           .c = c,
                           .ldc = p->n,
                           .bias_dtype = EG_DTYPE_F32,
                           .activation = EG__OP_COUNT,
                           .path = path};
}

static void *c_buffer(const problem *p) {
    void *c = malloc((size_t)(p->m * p->n + 1) * sizeof(float));
    assert_non_null(c);
    return c;
}

/* ---- shapes, layouts, both output dtypes, every path ---- */

static void test_shapes(void **state) {
    (void)state;
    static const int64_t shapes[][3] = {{1, 1, 1},    {17, 33, 65},  {100, 3, 7},  {256, 512, 300},
                                        {40, 50, 1},  {33, 17, 513}, {64, 64, 64}, {5, 200, 31},
                                        {130, 20, 2}, {3, 70, 33}};
    static const char *layouts[] = {"NN", "TN", "NT", "TT", "SS"};
    for (size_t d = 0; d < 2; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
            problem p = make_problem(dtypes[d], shapes[s][0], shapes[s][1], shapes[s][2]);
            bool big = p.m * p.n * p.k > 1000000;
            void *c = c_buffer(&p);
            for (size_t l = 0; l < sizeof layouts / sizeof *layouts; l++) {
                /* the large shape: both operands as stored and both transposed (the emulated CI
                 * runs this test under qemu, a hundred times slower) */
                if (big && l != 0 && l != 3) continue;
                stored a = store(p.a, p.m, p.k, layouts[l][0]);
                stored b = store(p.b, p.k, p.n, layouts[l][1]);
                for (size_t q = 0; q < N_PATHS; q++) {
                    if (!usable(paths[q], p.dtype)) continue;
                    if (big && paths[q] == EG__GEMM_LOWP_PORTABLE && l > 0) continue;
                    if (big && paths[q] == EG__GEMM_LOWP_AVX512_BF16 && l > 0) continue;
                    for (int out = 0; out < 2; out++) {
                        eg_dtype c_dtype = out ? p.dtype : EG_DTYPE_F32;
                        eg__gemm_lowp g = problem_on(&p, paths[q], a, b, c_dtype, c);
                        assert_int_equal(eg__gemm_lowp_run(&g), EG_OK);
                        char what[96];
                        snprintf(what, sizeof what, "path %s, %s, C %s",
                                 eg__gemm_lowp_path_name(paths[q]), layouts[l],
                                 eg_dtype_name(c_dtype));
                        check_c(&p, c_dtype, c, p.n, NULL, EG__OP_COUNT, what);
                    }
                }
                free(a.data);
                free(b.data);
            }
            free(c);
            free_problem(&p);
        }
}

/* ---- the epilogue: bias (f32 or 16-bit, strided) and each activation ---- */

static void test_epilogue(void **state) {
    (void)state;
    static const eg__op acts[] = {EG__OP_COUNT, EG__OP_RELU, EG__OP_SIGMOID, EG__OP_TANH};
    static const int64_t shapes[][3] = {{17, 33, 65}, {70, 40, 300}, {2, 600, 9}};
    for (size_t d = 0; d < 2; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
            problem p = make_problem(dtypes[d], shapes[s][0], shapes[s][1], shapes[s][2]);
            void *c = c_buffer(&p);
            stored a = store(p.a, p.m, p.k, 'N'), b = store(p.b, p.k, p.n, 'N');
            float *bias32 = malloc(sizeof(float) * (size_t)(2 * p.n));
            uint16_t *bias16 = malloc(sizeof(uint16_t) * (size_t)(2 * p.n));
            double *bias = malloc(sizeof(double) * (size_t)p.n);
            assert_true(bias32 && bias16 && bias);
            for (int64_t j = 0; j < 2 * p.n; j++) {
                bias16[j] = narrow(p.dtype, (float)uniform(-2, 2));
                bias32[j] = (float)wide(p.dtype, bias16[j]);
            }
            for (size_t q = 0; q < N_PATHS; q++) {
                if (!usable(paths[q], p.dtype)) continue;
                for (size_t t = 0; t < sizeof acts / sizeof *acts; t++)
                    for (int variant = 0; variant < 3;
                         variant++) { /* f32, 16-bit, strided 16-bit */
                        int64_t stride = variant == 2 ? 2 : 1;
                        for (int64_t j = 0; j < p.n; j++) bias[j] = bias32[j * stride];
                        for (int out = 0; out < 2; out++) {
                            eg_dtype c_dtype = out ? p.dtype : EG_DTYPE_F32;
                            eg__gemm_lowp g = problem_on(&p, paths[q], a, b, c_dtype, c);
                            g.bias = variant == 0 ? (const void *)bias32 : (const void *)bias16;
                            g.bias_dtype = variant == 0 ? EG_DTYPE_F32 : p.dtype;
                            g.bias_stride = stride;
                            g.activation = acts[t];
                            assert_int_equal(eg__gemm_lowp_run(&g), EG_OK);
                            char what[96];
                            snprintf(what, sizeof what, "path %s, activation %d, bias %d, C %s",
                                     eg__gemm_lowp_path_name(paths[q]), (int)acts[t], variant,
                                     eg_dtype_name(c_dtype));
                            check_c(&p, c_dtype, c, p.n, bias, acts[t], what);
                        }
                    }
            }
            free(bias32);
            free(bias16);
            free(bias);
            free(a.data);
            free(b.data);
            free(c);
            free_problem(&p);
        }
}

/* ---- the split of C and the thread count change no bits ---- */

static void test_split_and_threads(void **state) {
    (void)state;
    for (size_t d = 0; d < 2; d++) {
        problem p = make_problem(dtypes[d], 150, 130, 300);
        size_t bytes = (size_t)(p.m * p.n) * sizeof(uint16_t);
        uint16_t *whole = malloc(bytes), *pieces = malloc(bytes), *threaded = malloc(bytes);
        float *bias = malloc(sizeof(float) * (size_t)p.n);
        assert_true(whole && pieces && threaded && bias);
        for (int64_t j = 0; j < p.n; j++) bias[j] = (float)uniform(-1, 1);
        for (int layout = 0; layout < 2; layout++) {
            stored a = store(p.a, p.m, p.k, layout ? 'T' : 'N');
            stored b = store(p.b, p.k, p.n, layout ? 'T' : 'N');
            for (size_t q = 0; q < N_PATHS; q++) {
                if (!usable(paths[q], p.dtype)) continue;
                eg__gemm_lowp g = problem_on(&p, paths[q], a, b, p.dtype, whole);
                g.bias = bias;
                g.activation = EG__OP_TANH;
                assert_int_equal(eg_set_num_threads(1), EG_OK);
                assert_int_equal(eg__gemm_lowp_run(&g), EG_OK);
                static const int64_t rows[] = {0, 7, 45, 46, 150}, cols[] = {0, 13, 50, 99, 130};
                g.c = pieces;
                for (int r = 0; r < 4; r++)
                    for (int s = 0; s < 4; s++)
                        assert_true(
                            eg__gemm_lowp_range(&g, rows[r], rows[r + 1], cols[s], cols[s + 1]));
                if (memcmp(whole, pieces, bytes) != 0)
                    fail_msg("path %s: ragged ranges differ from the whole product",
                             eg__gemm_lowp_path_name(paths[q]));
                assert_int_equal(eg_set_num_threads(2), EG_OK);
                g.c = threaded;
                assert_int_equal(eg__gemm_lowp_run(&g), EG_OK);
                if (memcmp(whole, threaded, bytes) != 0)
                    fail_msg("path %s: 2 threads differ from 1", eg__gemm_lowp_path_name(paths[q]));
                assert_int_equal(eg_set_num_threads(1), EG_OK);
            }
            free(a.data);
            free(b.data);
        }
        free(whole);
        free(pieces);
        free(threaded);
        free(bias);
        free_problem(&p);
    }
}

/* ---- f32 operands (mixed precision's master weights), rounded as the product reads them ---- */

/* f32 values that round (nearest even) to the 16-bit ones: each nudged by less than half an
 * ulp of its format (bf16: 2^-9 relative, f16: 2^-12), as a weight between two bf16 values is. */
static float *nudged(eg_dtype dtype, const uint16_t *v, int64_t n, int64_t *row, int64_t *col,
                     int64_t rows, int64_t cols, char layout) {
    stored s = store(v, rows, cols, layout);
    size_t size = (size_t)((rows - 1) * s.row + (cols - 1) * s.col + 1);
    float *f = malloc(size * sizeof(float));
    assert_non_null(f);
    float nudge = dtype == EG_DTYPE_BF16 ? 0x1p-11f : 0x1p-14f;
    for (size_t i = 0; i < size; i++)
        f[i] = (float)wide(dtype, s.data[i]) * (1 + (i % 2 ? nudge : -nudge));
    *row = s.row, *col = s.col;
    free(s.data);
    (void)n;
    return f;
}

static void test_f32_operands(void **state) {
    (void)state;
    static const int64_t shapes[][3] = {{17, 33, 65}, {70, 40, 300}, {1, 5, 1}};
    for (size_t d = 0; d < 2; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
            problem p = make_problem(dtypes[d], shapes[s][0], shapes[s][1], shapes[s][2]);
            size_t bytes = (size_t)(p.m * p.n) * sizeof(float);
            void *c = c_buffer(&p), *c16 = c_buffer(&p);
            for (int layout = 0; layout < 2; layout++) {
                char l = layout ? 'T' : 'N';
                stored a = store(p.a, p.m, p.k, l), b = store(p.b, p.k, p.n, l);
                int64_t ar, ac, br, bc;
                float *a32 = nudged(p.dtype, p.a, p.m * p.k, &ar, &ac, p.m, p.k, l);
                float *b32 = nudged(p.dtype, p.b, p.k * p.n, &br, &bc, p.k, p.n, l);
                for (size_t q = 0; q < N_PATHS; q++) {
                    if (!usable(paths[q], p.dtype)) continue;
                    for (int which = 1; which < 4; which++) /* A, B, both in f32 */
                        for (int out = 0; out < 2; out++) {
                            eg_dtype c_dtype = out ? p.dtype : EG_DTYPE_F32;
                            eg__gemm_lowp g = problem_on(&p, paths[q], a, b, c_dtype, c16);
                            assert_int_equal(eg__gemm_lowp_run(&g), EG_OK);
                            g.c = c;
                            if (which & 1) g.a = NULL, g.a32 = a32, g.a_row = ar, g.a_col = ac;
                            if (which & 2) g.b = NULL, g.b32 = b32, g.b_row = br, g.b_col = bc;
                            assert_int_equal(eg__gemm_lowp_run(&g), EG_OK);
                            char what[96];
                            snprintf(what, sizeof what, "path %s, f32 operands %d, %c, C %s",
                                     eg__gemm_lowp_path_name(paths[q]), which, l,
                                     eg_dtype_name(c_dtype));
                            check_c(&p, c_dtype, c, p.n, NULL, EG__OP_COUNT, what);
                            /* rounding as it reads = casting first, bit for bit */
                            if (memcmp(c, c16, out ? bytes / 2 : bytes) != 0)
                                fail_msg("%s: not the bits of the pre-rounded operands", what);
                        }
                }
                free(a32);
                free(b32);
                free(a.data);
                free(b.data);
            }
            free(c);
            free(c16);
            free_problem(&p);
        }
}

/* ---- the one rounding of the output, bit for bit ---- */

/* C (1 x 1) of a 1 x k by k x 1 product of the given values (B all ones unless b given). */
static uint16_t dot(eg__lowp_path path, eg_dtype dtype, int k, const float *a, const float *b) {
    uint16_t a16[8], b16[8], c = 0xffff;
    for (int i = 0; i < k; i++) {
        a16[i] = narrow(dtype, a[i]);
        b16[i] = narrow(dtype, b ? b[i] : 1.0f);
        assert_true(wide(dtype, a16[i]) == a[i] && wide(dtype, b16[i]) == (b ? b[i] : 1.0f));
    }
    eg__gemm_lowp g = {.dtype = dtype,
                       .m = 1,
                       .n = 1,
                       .k = k,
                       .a = a16,
                       .a_row = k,
                       .a_col = 1,
                       .b = b16,
                       .b_row = 1,
                       .b_col = 1,
                       .c_dtype = dtype,
                       .c = &c,
                       .ldc = 1,
                       .activation = EG__OP_COUNT,
                       .path = path};
    assert_true(eg__gemm_lowp_range(&g, 0, 1, 0, 1));
    return c;
}

static void test_rounding(void **state) {
    (void)state;
    for (size_t q = 0; q < N_PATHS; q++) {
        if (usable(paths[q], EG_DTYPE_BF16)) {
            eg__lowp_path path = paths[q];
            /* 1 + 2^-8 is halfway between 1 and 1 + 2^-7: to the even 1 */
            assert_int_equal(dot(path, EG_DTYPE_BF16, 2, (float[]){1, 0x1p-8f}, NULL), 0x3f80);
            /* 1 + 3 2^-8: halfway between 1 + 2^-7 (odd) and 1 + 2^-6: up */
            assert_int_equal(dot(path, EG_DTYPE_BF16, 2, (float[]){1, 0x3p-8f}, NULL), 0x3f82);
            /* just above the tie: up, once (rounding twice would give 1) */
            assert_int_equal(dot(path, EG_DTYPE_BF16, 3, (float[]){1, 0x1p-8f, 0x1p-16f}, NULL),
                             0x3f81);
            assert_int_equal(dot(path, EG_DTYPE_BF16, 2, (float[]){-1, -0x1p-8f}, NULL), 0xbf80);
            assert_int_equal(dot(path, EG_DTYPE_BF16, 2, (float[]){-1, 1}, NULL), 0x0000);
            assert_int_equal(dot(path, EG_DTYPE_BF16, 2, (float[]){0, 0}, NULL), 0x0000);
            assert_int_equal(dot(path, EG_DTYPE_BF16, 1, (float[]){-3}, (float[]){0x1p100f}),
                             0xf240); /* -3 2^100: bf16 keeps f32's range */
        }
        if (usable(paths[q], EG_DTYPE_F16)) {
            eg__lowp_path path = paths[q];
            assert_int_equal(dot(path, EG_DTYPE_F16, 2, (float[]){1, 0x1p-11f}, NULL), 0x3c00);
            assert_int_equal(dot(path, EG_DTYPE_F16, 2, (float[]){1, 0x3p-11f}, NULL), 0x3c02);
            assert_int_equal(dot(path, EG_DTYPE_F16, 3, (float[]){1, 0x1p-11f, 0x1p-20f}, NULL),
                             0x3c01);
            assert_int_equal(dot(path, EG_DTYPE_F16, 2, (float[]){-1, 1}, NULL), 0x0000);
            /* 256 x 256 = 65536 is past f16's largest finite (65504): +inf */
            assert_int_equal(dot(path, EG_DTYPE_F16, 1, (float[]){256}, (float[]){256}), 0x7c00);
            /* 2^-12 x 2^-12 = 2^-24, f16's smallest subnormal, exactly */
            assert_int_equal(dot(path, EG_DTYPE_F16, 1, (float[]){0x1p-12f}, (float[]){0x1p-12f}),
                             0x0001);
            /* subnormal inputs are exact too: 2^-24 x 2^10 = 2^-14, the smallest normal */
            assert_int_equal(dot(path, EG_DTYPE_F16, 1, (float[]){0x1p-24f}, (float[]){1024}),
                             0x0400);
        }
    }
}

/* ---- a forced path that cannot run is an error, never a crash ---- */

static void test_unusable_path(void **state) {
    (void)state;
    uint16_t a = 0x3f80, b = 0x3f80, c = 0;
    /* no CPU has AMX or vdpbf16ps for f16 */
    eg__gemm_lowp g = {.dtype = EG_DTYPE_F16,
                       .m = 1,
                       .n = 1,
                       .k = 1,
                       .a = &a,
                       .a_row = 1,
                       .a_col = 1,
                       .b = &b,
                       .b_row = 1,
                       .b_col = 1,
                       .c_dtype = EG_DTYPE_F16,
                       .c = &c,
                       .ldc = 1,
                       .activation = EG__OP_COUNT,
                       .path = EG__GEMM_LOWP_AMX};
    assert_false(eg__gemm_lowp_range(&g, 0, 1, 0, 1));
    expect_error(EG_ERR_UNSUPPORTED);
    g.path = EG__GEMM_LOWP_AVX512_BF16;
    assert_int_equal(eg__gemm_lowp_run(&g), EG_ERR_UNSUPPORTED);
    expect_error(EG_ERR_UNSUPPORTED);
    for (size_t d = 0; d < 2; d++) {
        const char *path = eg__gemm_lowp_path(dtypes[d]);
        assert_non_null(path);
        print_message("%s products: %s\n", eg_dtype_name(dtypes[d]), path);
        assert_true(eg__gemm_lowp_usable(eg__gemm_lowp_choose(dtypes[d]), dtypes[d]));
    }
    assert_non_null(strstr(eg_blas_info(), "bf16 matmul"));
}

/* ---- through the ops: matmul (transposed views, batches with broadcasting) and dense ---- */

static eg_tensor *tensor16(eg_dtype dtype, int n_dims, const int64_t *shape) {
    int64_t n = 1;
    for (int d = 0; d < n_dims; d++) n *= shape[d];
    uint16_t *v = malloc(sizeof(uint16_t) * (size_t)(n + 1));
    assert_non_null(v);
    for (int64_t i = 0; i < n; i++) v[i] = narrow(dtype, (float)uniform(-1, 1));
    eg_tensor *t = eg_tensor_from_data(v, dtype, n_dims, shape);
    free(v);
    assert_non_null(t);
    return t;
}

/* Element (i, j) of a 2-d tensor, any strides, as f64. */
static double at(const eg_tensor *t, int64_t offset, int64_t i, int64_t j, int d0) {
    const int64_t *strides = eg_tensor_strides(t);
    const uint16_t *data = eg_tensor_data(t);
    return wide(eg_tensor_dtype(t), data[offset + i * strides[d0] + j * strides[d0 + 1]]);
}

/* y (.., m, n) against op(a) . op(b) [+ bias, act] for 2-d operands given as (rows, cols) views. */
static void check_product(const eg_tensor *y, const eg_tensor *a, bool ta, const eg_tensor *b,
                          bool tb, const eg_tensor *bias, eg__op act) {
    assert_non_null(y);
    eg_dtype dtype = eg_tensor_dtype(a);
    assert_int_equal(eg_tensor_dtype(y), dtype);
    const int64_t *as = eg_tensor_shape(a), *bs = eg_tensor_shape(b);
    int64_t m = ta ? as[1] : as[0], k = ta ? as[0] : as[1], n = tb ? bs[0] : bs[1];
    const uint16_t *out = eg_tensor_data(y);
    /* op(A) row-major and op(B) column-major in f64, read once */
    double *av = malloc(sizeof(double) * (size_t)(m * k + 1));
    double *bv_ = malloc(sizeof(double) * (size_t)(k * n + 1));
    assert_true(av && bv_);
    for (int64_t i = 0; i < m; i++)
        for (int64_t p = 0; p < k; p++) av[i * k + p] = ta ? at(a, 0, p, i, 0) : at(a, 0, i, p, 0);
    for (int64_t j = 0; j < n; j++)
        for (int64_t p = 0; p < k; p++) bv_[j * k + p] = tb ? at(b, 0, j, p, 0) : at(b, 0, p, j, 0);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double sum = 0, magnitude = 0;
            for (int64_t p = 0; p < k; p++) {
                double x = av[i * k + p], w = bv_[j * k + p];
                sum += x * w;
                magnitude += fabs(x * w);
            }
            double bv = bias ? wide(dtype, ((const uint16_t *)eg_tensor_data(bias))[j]) : 0;
            double ref = activate(act, sum + bv);
            double got = wide(dtype, out[i * n + j]);
            double e = bound(dtype, k, magnitude, bv, ref);
            if (!(fabs(got - ref) <= e))
                fail_msg("%s op: y[%lld][%lld] = %.9g, reference %.9g, bound %.3g",
                         eg_dtype_name(dtype), (long long)i, (long long)j, got, ref, e);
        }
    free(av);
    free(bv_);
}

static void assert_same_bits(const eg_tensor *x, const eg_tensor *y) {
    assert_non_null(x);
    assert_non_null(y);
    assert_int_equal(eg_tensor_n_elems(x), eg_tensor_n_elems(y));
    size_t bytes = (size_t)eg_tensor_n_elems(x) * eg_dtype_size(eg_tensor_dtype(x));
    if (memcmp(eg_tensor_data(x), eg_tensor_data(y), bytes) != 0)
        fail_msg("1 and 2 threads give different bits");
}

static void test_matmul_op(void **state) {
    (void)state;
    for (size_t d = 0; d < 2; d++) {
        eg_dtype dtype = dtypes[d];
        eg_scope_begin();
        int64_t as[2] = {130, 70}, bs[2] = {70, 90}, ats[2] = {70, 130}, bts[2] = {90, 70};
        eg_tensor *a = tensor16(dtype, 2, as), *b = tensor16(dtype, 2, bs);
        eg_tensor *at_ = tensor16(dtype, 2, ats), *bt = tensor16(dtype, 2, bts);
        check_product(eg_matmul(a, b), a, false, b, false, NULL, EG__OP_COUNT);
        /* transposes as flags and as views: no copies, the strides say it */
        check_product(eg_matmul_ex(at_, bt, true, true), at_, true, bt, true, NULL, EG__OP_COUNT);
        check_product(eg_matmul(eg_transpose(at_, 0, 1), b), at_, true, b, false, NULL,
                      EG__OP_COUNT);
        check_product(eg_matmul(a, eg_transpose(bt, 0, 1)), a, false, bt, true, NULL, EG__OP_COUNT);
        /* k = 1 and one row */
        int64_t k1a[2] = {40, 1}, k1b[2] = {1, 33};
        eg_tensor *x1 = tensor16(dtype, 2, k1a), *y1 = tensor16(dtype, 2, k1b);
        check_product(eg_matmul(x1, y1), x1, false, y1, false, NULL, EG__OP_COUNT);
        /* batched, broadcasting: (3, 1, 20, 30) x (4, 30, 25) -> (3, 4, 20, 25) */
        int64_t bas[4] = {3, 1, 20, 30}, bbs[3] = {4, 30, 25};
        eg_tensor *ba = tensor16(dtype, 4, bas), *bb = tensor16(dtype, 3, bbs);
        eg_tensor *by = eg_matmul(ba, bb);
        assert_non_null(by);
        assert_int_equal(eg_tensor_n_dims(by), 4);
        for (int64_t i = 0; i < 3; i++)
            for (int64_t j = 0; j < 4; j++) {
                int64_t two_a[2] = {20, 30}, two_b[2] = {30, 25}, two_y[2] = {20, 25};
                eg_tensor *sa = eg_reshape(eg_copy(eg_slice(ba, 0, i, i + 1, 1)), 2, two_a);
                eg_tensor *sb = eg_reshape(eg_copy(eg_slice(bb, 0, j, j + 1, 1)), 2, two_b);
                eg_tensor *sy = eg_reshape(
                    eg_copy(eg_slice(eg_slice(by, 0, i, i + 1, 1), 1, j, j + 1, 1)), 2, two_y);
                check_product(sy, sa, false, sb, false, NULL, EG__OP_COUNT);
            }
        /* the thread count changes no bits (a product large enough to split) */
        int64_t ls[2] = {256, 200}, rs[2] = {200, 256};
        eg_tensor *l = tensor16(dtype, 2, ls), *r = tensor16(dtype, 2, rs);
        assert_int_equal(eg_set_num_threads(1), EG_OK);
        eg_tensor *one = eg_matmul(l, r), *one_t = eg_matmul_ex(r, l, true, true);
        assert_int_equal(eg_set_num_threads(2), EG_OK);
        assert_same_bits(one, eg_matmul(l, r));
        assert_same_bits(one_t, eg_matmul_ex(r, l, true, true));
        assert_int_equal(eg_set_num_threads(1), EG_OK);
        eg_scope_end();
    }
}

static void test_dense_op(void **state) {
    (void)state;
    static const eg_activation acts[] = {EG_ACTIVATION_NONE, EG_ACTIVATION_RELU,
                                         EG_ACTIVATION_SIGMOID, EG_ACTIVATION_TANH};
    static const eg__op ops[] = {EG__OP_COUNT, EG__OP_RELU, EG__OP_SIGMOID, EG__OP_TANH};
    for (size_t d = 0; d < 2; d++) {
        eg_dtype dtype = dtypes[d];
        eg_scope_begin();
        int64_t xs[2] = {64, 300}, ws[2] = {300, 48}, bs[1] = {48};
        eg_tensor *x = tensor16(dtype, 2, xs), *w = tensor16(dtype, 2, ws);
        eg_tensor *b = tensor16(dtype, 1, bs);
        for (size_t t = 0; t < 4; t++) {
            assert_int_equal(eg_set_num_threads(1), EG_OK);
            eg_tensor *y = eg_dense(x, w, b, acts[t]);
            check_product(y, x, false, w, false, b, ops[t]);
            assert_int_equal(eg_set_num_threads(2), EG_OK);
            assert_same_bits(y, eg_dense(x, w, b, acts[t]));
        }
        assert_int_equal(eg_set_num_threads(1), EG_OK);
        eg_scope_end();
    }
}

/* eg_matmul_low_precision / eg_dense_low_precision: f32 operands (master weights) read rounded,
 * the same bits as casting them first; f32 or 16-bit results; 1 and 2 threads alike. */
static void test_low_precision_ops(void **state) {
    (void)state;
    for (size_t d = 0; d < 2; d++) {
        eg_dtype dtype = dtypes[d];
        eg_scope_begin();
        eg_generator *gen = eg_generator_new(9);
        int64_t xs[2] = {70, 300}, ws[2] = {300, 40}, bs[1] = {40};
        eg_tensor *x = tensor16(dtype, 2, xs);
        eg_tensor *w = eg_random_uniform(gen, EG_DTYPE_F32, 2, ws, -0.5, 0.5);
        eg_tensor *bias = eg_random_uniform(gen, EG_DTYPE_F32, 1, bs, -0.5, 0.5);
        eg_generator_free(gen);
        eg_tensor *w16 = eg_cast(w, dtype), *bias16 = eg_cast(bias, dtype);
        for (int result = 0; result < 2; result++) {
            eg_dtype out = result ? dtype : EG_DTYPE_F32;
            eg_tensor *y = eg_matmul_low_precision(x, w, false, false, dtype, out);
            eg_tensor *y16 = eg_matmul_low_precision(x, w16, false, false, dtype, out);
            assert_non_null(y);
            assert_int_equal(eg_tensor_dtype(y), out);
            assert_same_bits(y, y16);
            /* transposed: (w^T)^T, with an f32 left operand too */
            eg_tensor *wt = eg_copy(eg_transpose(w, 0, 1));
            assert_same_bits(y, eg_matmul_low_precision(x, wt, false, true, dtype, out));
            eg_tensor *xf = eg_cast(x, EG_DTYPE_F32);
            assert_same_bits(y, eg_matmul_low_precision(xf, w, false, false, dtype, out));
            for (int act = EG_ACTIVATION_NONE; act <= EG_ACTIVATION_TANH; act++) {
                assert_int_equal(eg_set_num_threads(1), EG_OK);
                eg_tensor *z = eg_dense_low_precision(x, w, bias, act, dtype, out);
                eg_tensor *z16 = eg_dense_low_precision(x, w16, bias, act, dtype, out);
                assert_non_null(z);
                assert_same_bits(z, z16);
                assert_int_equal(eg_set_num_threads(2), EG_OK);
                assert_same_bits(z, eg_dense_low_precision(x, w, bias, act, dtype, out));
                /* the values: against the f64 reference of the rounded operands */
                if (result) {
                    static const eg__op ops[] = {EG__OP_COUNT, EG__OP_RELU, EG__OP_SIGMOID,
                                                 EG__OP_TANH};
                    eg_tensor *zb = eg_dense_low_precision(x, w16, bias16, act, dtype, out);
                    check_product(zb, x, false, w16, false, bias16, ops[act]);
                }
            }
            assert_int_equal(eg_set_num_threads(1), EG_OK);
        }
        eg_scope_end();
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_shapes, teardown),
        cmocka_unit_test_teardown(test_epilogue, teardown),
        cmocka_unit_test_teardown(test_split_and_threads, teardown),
        cmocka_unit_test_teardown(test_f32_operands, teardown),
        cmocka_unit_test_teardown(test_rounding, teardown),
        cmocka_unit_test_teardown(test_unusable_path, teardown),
        cmocka_unit_test_teardown(test_matmul_op, teardown),
        cmocka_unit_test_teardown(test_dense_op, teardown),
        cmocka_unit_test_teardown(test_low_precision_ops, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
