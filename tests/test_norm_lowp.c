/* Batch normalization of bf16 and f16 activations with f32 statistics and parameters (mixed
 * precision): moments (x low -> f32 mean and variance), batch_norm (x low, the rest f32 -> x's
 * dtype, with and without the fused relu), batch_norm_backward_sums (g, x low -> f32 sums) and
 * batch_norm_backward_input (g, x low -> dx in x's dtype), on NHWC and NCHW axes, odd channel
 * counts, several chunks of 256 rows, rows too long for one block, an outer axis and a strided
 * view; then the gradient of the training op (the fused rule and the composite one a recording
 * outer tape takes, and a second order through it), thread-count independence and the
 * BatchNormalization layer fed bf16. Run it at every EG_CPU level: the kernels read bf16 and f16
 * in registers, and f16 rows of 16 or more elements through F16C at the AVX2 and AVX-512 levels
 * (the cases have both, and rows longer than one 512-element block).
 *
 * References are f64 computations from the same inputs (the format-rounded x and g, the f32
 * parameters, and the statistics and sums each op was given). The bounds, with u the format's
 * unit roundoff (bf16: 8 significand bits, u = 2^-8; f16: 11 bits, u = 2^-11) and the f32 terms
 * from f32's 2^-24:
 * - mean and variance are accumulated in double from exact inputs and rounded once to f32:
 *   |got - ref| <= 2^-23 |ref| + (N + 256) 2^-52 S, S the sum of the magnitudes added (N the
 *   reduced count; 256 the chunk length, whose partial results are combined in double);
 * - the sums likewise: 2^-23 |ref| + (N + 256) 2^-52 sum |term|;
 * - y = x a + b with a = scale / sqrt(variance + eps) and b = offset - mean a each rounded to f32,
 *   x a and the sum rounded in f32: within E = 2^-22 (|x a| + |mean a| + |offset|) of the exact
 *   value (four roundings of 2^-24 of those magnitudes at most), then rounded once to the
 *   format: |got - ref| <= E (1 + u) + u |ref| + floor (the format's absolute rounding below its
 *   normal range: f16 2^-25, bf16 2^-126); relu is 1-Lipschitz, so the same bound holds for it;
 * - dx = g k + (x c1 + c0) with k, c1, c0 rounded to f32 from double: within E = 2^-22 (|g k| +
 *   |x c1| + |c0|) in f32, then the format's rounding as for y.
 * Stronger, and exact: each op's result is the f32 op's on the widened inputs, rounded once (the
 * same f32 arithmetic runs on the widened chunks), so those are compared bit for bit too. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "eagle.h"
#include "api/internal.h"
#include "base/cpu_features.h"

#define EPS 1e-3

typedef struct format {
    eg_dtype dtype;
    double u, floor; /* unit roundoff; absolute rounding floor */
} format;

static const format formats[2] = {
    {EG_DTYPE_BF16, 0x1p-8, 0x1p-126},
    {EG_DTYPE_F16, 0x1p-11, 0x1p-25},
};

typedef struct norm_case {
    const char *name;
    int n_dims;
    int64_t shape[4];
    int n_axes;
    int axes[4];
    bool transposed; /* 2-d x as the transpose of a stored (D, B) tensor: a strided view */
} norm_case;

static const norm_case cases[] = {
    {"NHWC, 37 channels", 4, {3, 5, 7, 37}, 3, {0, 1, 2}, false},
    {"NHWC, 32 channels, 3 chunks (the last partial)", 4, {4, 8, 20, 32}, 3, {0, 1, 2}, false},
    {"NHWC, 64 channels, 8 chunks", 4, {8, 16, 16, 64}, 3, {0, 1, 2}, false},
    {"NHWC, 1 channel", 4, {2, 9, 31, 1}, 3, {0, 1, 2}, false},
    {"NCHW, 19 channels", 4, {3, 19, 6, 5}, 3, {0, 2, 3}, false},
    {"NCHW, 64 channels, 2 chunks", 4, {4, 64, 9, 9}, 3, {0, 2, 3}, false},
    {"(B, D) = (600, 100): blocks of 163 rows", 2, {600, 100}, 1, {0}, false},
    {"(B, D) = (3, 17000): rows split in blocks", 2, {3, 17000}, 1, {0}, false},
    {"(4, 300, 5) over axis 1: an outer axis", 3, {4, 300, 5}, 1, {1}, false},
    {"(7, 333) over the last axis", 2, {7, 333}, 1, {1}, false},
    {"(300, 21) of a transposed view", 2, {300, 21}, 1, {0}, true},
};
#define N_CASES (sizeof cases / sizeof cases[0])

static float random_value(unsigned *seed) {
    *seed = *seed * 1103515245u + 12345u;
    return (float)((*seed >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static void to_format(const format *f, const float *src, uint16_t *dst, size_t n) {
    if (f->dtype == EG_DTYPE_BF16)
        eg_f32_to_bf16(src, dst, n);
    else
        eg_f32_to_f16(src, dst, n);
}

static void from_format(const format *f, const uint16_t *src, float *dst, size_t n) {
    if (f->dtype == EG_DTYPE_BF16)
        eg_bf16_to_f32(src, dst, n);
    else
        eg_f16_to_f32(src, dst, n);
}

static void *checked_malloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    assert_non_null(p);
    return p;
}

/* One case in one format: the inputs (format values as floats, logical row-major order), the
 * f32 parameters and each element's kept (statistics) index. */
typedef struct problem {
    const norm_case *c;
    const format *f;
    size_t n, kept;
    double count; /* N: elements per statistic */
    int64_t kept_shape[4];
    int64_t *kidx;
    float *x, *g, *scale, *offset;
    eg__attrs attrs;
} problem;

static void problem_init(problem *p, const norm_case *c, const format *f) {
    memset(p, 0, sizeof *p);
    p->c = c;
    p->f = f;
    bool reduce[4] = {0};
    for (int i = 0; i < c->n_axes; i++) reduce[c->axes[i]] = true;
    p->n = 1;
    p->kept = 1;
    for (int d = 0; d < c->n_dims; d++) {
        p->n *= (size_t)c->shape[d];
        p->kept_shape[d] = reduce[d] ? 1 : c->shape[d];
        p->kept *= (size_t)p->kept_shape[d];
    }
    p->count = (double)(p->n / p->kept);
    p->kidx = checked_malloc(p->n * sizeof *p->kidx);
    for (size_t e = 0; e < p->n; e++) {
        int64_t rest = (int64_t)e, k = 0, stride = 1;
        for (int d = c->n_dims - 1; d >= 0; d--) {
            int64_t i = rest % c->shape[d];
            rest /= c->shape[d];
            if (!reduce[d]) k += i * stride;
            stride *= p->kept_shape[d];
        }
        p->kidx[e] = k;
    }
    unsigned seed = 1234u + (unsigned)p->n * 7u + (unsigned)f->dtype;
    p->x = checked_malloc(p->n * sizeof *p->x);
    p->g = checked_malloc(p->n * sizeof *p->g);
    uint16_t *bits = checked_malloc(p->n * sizeof *bits);
    /* x in [-2, 3) (a mean away from 0) and g in [-1, 1), both rounded to the format */
    for (size_t e = 0; e < p->n; e++) p->x[e] = 0.5f + 2.5f * random_value(&seed);
    for (size_t e = 0; e < p->n; e++) p->g[e] = random_value(&seed);
    to_format(f, p->x, bits, p->n);
    from_format(f, bits, p->x, p->n);
    to_format(f, p->g, bits, p->n);
    from_format(f, bits, p->g, p->n);
    free(bits);
    p->scale = checked_malloc(p->kept * sizeof *p->scale);
    p->offset = checked_malloc(p->kept * sizeof *p->offset);
    for (size_t k = 0; k < p->kept; k++) {
        p->scale[k] = 1.0f + 0.5f * random_value(&seed);
        p->offset[k] = 0.5f * random_value(&seed);
    }
    p->attrs = (eg__attrs){.n_axes = c->n_axes, .keepdims = true, .scalars = {EPS}};
    memcpy(p->attrs.axes, c->axes, sizeof c->axes);
}

static void problem_free(problem *p) {
    free(p->kidx);
    free(p->x);
    free(p->g);
    free(p->scale);
    free(p->offset);
}

/* Values (logical order) as a tensor of the case's shape in dtype (f32, or the format's), a
 * transposed view when the case says so. Owned by the current scope. */
static eg_tensor *value_tensor(const problem *p, const float *v, eg_dtype dtype) {
    const norm_case *c = p->c;
    float *laid = checked_malloc(p->n * sizeof *laid);
    int64_t shape[4];
    memcpy(shape, c->shape, sizeof shape);
    if (c->transposed) { /* stored (D, B) */
        int64_t b = c->shape[0], d = c->shape[1];
        for (int64_t i = 0; i < b; i++)
            for (int64_t j = 0; j < d; j++) laid[j * b + i] = v[i * d + j];
        shape[0] = d;
        shape[1] = b;
    } else {
        memcpy(laid, v, p->n * sizeof *laid);
    }
    eg_tensor *t;
    if (dtype == EG_DTYPE_F32) {
        t = eg_tensor_from_data(laid, dtype, c->n_dims, shape);
    } else {
        uint16_t *bits = checked_malloc(p->n * sizeof *bits);
        to_format(p->f, laid, bits, p->n);
        t = eg_tensor_from_data(bits, dtype, c->n_dims, shape);
        free(bits);
    }
    free(laid);
    assert_non_null(t);
    if (c->transposed) t = eg_transpose(t, 0, 1);
    assert_non_null(t);
    return t;
}

/* A contiguous result as floats (f32, bf16 or f16); want_dtype checked. */
static float *read_values(const problem *p, const eg_tensor *t, eg_dtype want_dtype) {
    if (!t) fail_msg("%s: %s", p->c->name, eg_last_error());
    assert_int_equal(eg_tensor_dtype(t), want_dtype);
    size_t n = (size_t)eg_tensor_n_elems(t);
    float *v = checked_malloc(n * sizeof *v);
    if (want_dtype == EG_DTYPE_F32) {
        assert_int_equal(eg_tensor_copy_to_host(t, v, n * sizeof *v), EG_OK);
    } else {
        uint16_t *bits = checked_malloc(n * sizeof *bits);
        assert_int_equal(eg_tensor_copy_to_host(t, bits, n * sizeof *bits), EG_OK);
        from_format(p->f, bits, v, n);
        free(bits);
    }
    return v;
}

/* The four ops' results, with each op fed the previous ones' (for relu = 0 and 1). */
typedef struct results {
    float *moments; /* (2, kept): mean, variance */
    float *y[2], *sums[2], *dx[2];
} results;

static void results_free(results *r) {
    free(r->moments);
    for (int k = 0; k < 2; k++) {
        free(r->y[k]);
        free(r->sums[k]);
        free(r->dx[k]);
    }
}

/* Runs the ops on x and g in the format (wide: widened to f32, the f32 ops). */
static results run_ops(const problem *p, bool wide) {
    eg_dtype act = wide ? EG_DTYPE_F32 : p->f->dtype;
    results r = {0};
    eg_scope_begin();
    eg_tensor *x = value_tensor(p, p->x, act), *g = value_tensor(p, p->g, act);
    int nd = p->c->n_dims;
    eg_tensor *scale = eg_tensor_from_data(p->scale, EG_DTYPE_F32, nd, p->kept_shape);
    eg_tensor *offset = eg_tensor_from_data(p->offset, EG_DTYPE_F32, nd, p->kept_shape);
    const eg_tensor *in1[1] = {x};
    eg_tensor *both = eg__execute(EG__OP_MOMENTS, 1, in1, &p->attrs);
    r.moments = read_values(p, both, EG_DTYPE_F32);
    eg_tensor *mean = eg_tensor_from_data(r.moments, EG_DTYPE_F32, nd, p->kept_shape);
    eg_tensor *var = eg_tensor_from_data(r.moments + p->kept, EG_DTYPE_F32, nd, p->kept_shape);
    for (int relu = 0; relu < 2; relu++) {
        eg__attrs a = p->attrs;
        a.ints[0] = relu ? EG_ACTIVATION_RELU : EG_ACTIVATION_NONE;
        const eg_tensor *bn_in[5] = {x, mean, var, scale, offset};
        r.y[relu] = read_values(p, eg__execute(EG__OP_BATCH_NORM, 5, bn_in, &a), act);
        const eg_tensor *sums_in[6] = {g, x, mean, var, scale, offset};
        eg_tensor *sums = eg__execute(EG__OP_BATCH_NORM_BACKWARD_SUMS, relu ? 6 : 3, sums_in, &a);
        r.sums[relu] = read_values(p, sums, EG_DTYPE_F32);
        const eg_tensor *input_in[7] = {g, x, mean, var, scale, sums, offset};
        eg_tensor *dx = eg__execute(EG__OP_BATCH_NORM_BACKWARD_INPUT, relu ? 7 : 6, input_in, &a);
        r.dx[relu] = read_values(p, dx, act);
    }
    assert_int_equal(eg_scope_end(), EG_OK);
    return r;
}

/* batch_norm's f32 pre-activation as the kernel computes it: a and b rounded to f32, then
 * fl(fl(x a) + b); the products of a format value and an f32 are exact in double and double
 * rounding through double is exact for one f32 operation (53 >= 2 * 24 + 2). */
static float pre_activation(double mean, double var, double scale, double offset, float x) {
    float a = (float)(scale / sqrt(var + EPS));
    float b = (float)(offset - mean * a);
    float xa = (float)((double)x * (double)a);
    return (float)((double)xa + (double)b);
}

static void check(const problem *p, const char *what, int relu, size_t i, double got, double want,
                  double tolerance) {
    if (!(fabs(got - want) <= tolerance)) {
        print_error("%s, %s, relu %d: %s[%zu] = %.9g, reference %.9g (bound %.3g)\n", p->c->name,
                    eg_dtype_name(p->f->dtype), relu, what, i, got, want, tolerance);
        fail();
    }
}

/* r against the f64 references (see the bounds at the top). */
static void check_reference(const problem *p, const results *r) {
    size_t kept = p->kept;
    double n = p->count, u = p->f->u;
    double *sum = calloc(kept, sizeof *sum), *abs_sum = calloc(kept, sizeof *abs_sum);
    double *dev = calloc(kept, sizeof *dev), *sg = calloc(kept, sizeof *sg);
    double *sgx = calloc(kept, sizeof *sgx), *asg = calloc(kept, sizeof *asg);
    double *asgx = calloc(kept, sizeof *asgx);
    assert_true(sum && abs_sum && dev && sg && sgx && asg && asgx);
    for (size_t e = 0; e < p->n; e++) {
        sum[p->kidx[e]] += p->x[e];
        abs_sum[p->kidx[e]] += fabs(p->x[e]);
    }
    for (size_t e = 0; e < p->n; e++) {
        double d = p->x[e] - sum[p->kidx[e]] / n;
        dev[p->kidx[e]] += d * d;
    }
    double slack = (n + 256) * 0x1p-52;
    for (size_t k = 0; k < kept; k++) {
        double mean = sum[k] / n, var = dev[k] / n;
        check(p, "mean", 0, k, r->moments[k], mean, 0x1p-23 * fabs(mean) + slack * abs_sum[k]);
        check(p, "variance", 0, k, r->moments[kept + k], var, 0x1p-23 * var + slack * dev[k] * 2);
    }
    const float *mean = r->moments, *var = r->moments + kept;
    for (int relu = 0; relu < 2; relu++) {
        memset(sg, 0, kept * sizeof *sg);
        memset(sgx, 0, kept * sizeof *sgx);
        memset(asg, 0, kept * sizeof *asg);
        memset(asgx, 0, kept * sizeof *asgx);
        bool *pass = checked_malloc(p->n * sizeof *pass);
        for (size_t e = 0; e < p->n; e++) {
            int64_t k = p->kidx[e];
            double m = mean[k], v = var[k], s = p->scale[k], o = p->offset[k];
            double a = s / sqrt(v + EPS), x = p->x[e];
            double y = (x - m) * a + o;
            double e32 = 0x1p-22 * (fabs(x * a) + fabs(m * a) + fabs(o));
            pass[e] = !relu || pre_activation(m, v, s, o, p->x[e]) > 0;
            if (relu) y = y > 0 ? y : 0;
            check(p, "y", relu, e, r->y[relu][e], y, e32 * (1 + u) + u * fabs(y) + p->f->floor);
            double gm = pass[e] ? p->g[e] : 0;
            sg[k] += gm;
            sgx[k] += gm * (x - m);
            asg[k] += fabs(gm);
            asgx[k] += fabs(gm * (x - m));
        }
        const float *sums = r->sums[relu];
        for (size_t k = 0; k < kept; k++) {
            check(p, "sum g", relu, k, sums[k], sg[k], 0x1p-23 * fabs(sg[k]) + slack * asg[k]);
            check(p, "sum g (x - mean)", relu, k, sums[kept + k], sgx[k],
                  0x1p-23 * fabs(sgx[k]) + slack * asgx[k]);
        }
        for (size_t e = 0; e < p->n; e++) {
            int64_t k = p->kidx[e];
            double m = mean[k], v = var[k], s = p->scale[k];
            double rs = 1 / sqrt(v + EPS), kk = s * rs;
            double c1 = -kk * rs * rs * sums[kept + k] / n, c0 = -kk * sums[k] / n - m * c1;
            double gm = pass[e] ? p->g[e] : 0, x = p->x[e];
            double dx = gm * kk + (x * c1 + c0);
            double e32 = 0x1p-22 * (fabs(gm * kk) + fabs(x * c1) + fabs(c0));
            check(p, "dx", relu, e, r->dx[relu][e], dx, e32 * (1 + u) + u * fabs(dx) + p->f->floor);
        }
        free(pass);
    }
    free(sum);
    free(abs_sum);
    free(dev);
    free(sg);
    free(sgx);
    free(asg);
    free(asgx);
}

static void same_bits(const problem *p, const char *what, int relu, const float *a, const float *b,
                      size_t n, const char *how) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof a[i]) != 0) {
            print_error("%s, %s, relu %d: %s[%zu] = %.9g, %s %.9g\n", p->c->name,
                        eg_dtype_name(p->f->dtype), relu, what, i, (double)a[i], how, (double)b[i]);
            fail();
        }
}

/* Rounds f32 values to the format (RNE), as floats. */
static float *rounded(const problem *p, const float *v, size_t n) {
    uint16_t *bits = checked_malloc(n * sizeof *bits);
    float *out = checked_malloc(n * sizeof *out);
    to_format(p->f, v, bits, n);
    from_format(p->f, bits, out, n);
    free(bits);
    return out;
}

/* The low-precision results are the f32 ops' on the widened inputs, rounded once. */
static void check_widened(const problem *p, const results *low, const results *wide) {
    const char *how = "the f32 op on widened inputs gives";
    same_bits(p, "moments", 0, low->moments, wide->moments, 2 * p->kept, how);
    for (int relu = 0; relu < 2; relu++) {
        float *y = rounded(p, wide->y[relu], p->n), *dx = rounded(p, wide->dx[relu], p->n);
        same_bits(p, "y", relu, low->y[relu], y, p->n, "the f32 op's, rounded, is");
        same_bits(p, "sums", relu, low->sums[relu], wide->sums[relu], 2 * p->kept, how);
        same_bits(p, "dx", relu, low->dx[relu], dx, p->n, "the f32 op's, rounded, is");
        free(y);
        free(dx);
    }
}

static void test_ops_format(const format *f) {
    for (size_t c = 0; c < N_CASES; c++) {
        problem p;
        problem_init(&p, &cases[c], f);
        results low = run_ops(&p, false), wide = run_ops(&p, true);
        check_reference(&p, &low);
        check_widened(&p, &low, &wide);
        results_free(&low);
        results_free(&wide);
        problem_free(&p);
    }
}

static void test_ops_bf16(void **state) {
    (void)state;
    test_ops_format(&formats[0]);
}

static void test_ops_f16(void **state) {
    (void)state;
    test_ops_format(&formats[1]);
}

/* The bits depend neither on the thread count nor on how the chunks are split among threads. */
static void test_threads(void **state) {
    (void)state;
    int original = eg_get_num_threads();
    for (int k = 0; k < 2; k++)
        for (size_t c = 0; c < N_CASES; c++) {
            problem p;
            problem_init(&p, &cases[c], &formats[k]);
            assert_int_equal(eg_set_num_threads(1), EG_OK);
            results one = run_ops(&p, false);
            for (int threads = 2; threads <= 3; threads++) {
                assert_int_equal(eg_set_num_threads(threads), EG_OK);
                results many = run_ops(&p, false);
                const char *how = "with more threads";
                same_bits(&p, "moments", 0, one.moments, many.moments, 2 * p.kept, how);
                for (int relu = 0; relu < 2; relu++) {
                    same_bits(&p, "y", relu, one.y[relu], many.y[relu], p.n, how);
                    same_bits(&p, "sums", relu, one.sums[relu], many.sums[relu], 2 * p.kept, how);
                    same_bits(&p, "dx", relu, one.dx[relu], many.dx[relu], p.n, how);
                }
                results_free(&many);
            }
            results_free(&one);
            problem_free(&p);
        }
    assert_int_equal(eg_set_num_threads(original), EG_OK);
}

/* Mixed dtypes other than low-precision activations with f32 for the rest are refused. */
static void test_dtype_errors(void **state) {
    (void)state;
    eg_scope_begin();
    int64_t xs[2] = {4, 3}, ks[2] = {1, 3}, ss[3] = {2, 1, 3};
    eg_tensor *x = eg_zeros(EG_DTYPE_BF16, 2, xs), *xh = eg_zeros(EG_DTYPE_F16, 2, xs);
    eg_tensor *k32 = eg_ones(EG_DTYPE_F32, 2, ks), *k16 = eg_ones(EG_DTYPE_BF16, 2, ks);
    eg_tensor *k64 = eg_ones(EG_DTYPE_F64, 2, ks), *s32 = eg_zeros(EG_DTYPE_F32, 3, ss);
    eg__attrs attrs = {.n_axes = 1, .axes = {0}, .keepdims = true, .scalars = {EPS}};
    const eg_tensor *bad_bn[5] = {x, k32, k16, k32, k32};
    assert_null(eg__execute(EG__OP_BATCH_NORM, 5, bad_bn, &attrs));
    assert_int_equal(eg_last_status(), EG_ERR_DTYPE);
    assert_non_null(strstr(eg_last_error(), "must be f32"));
    eg_clear_error();
    const eg_tensor *f64_bn[5] = {x, k64, k64, k64, k64};
    assert_null(eg__execute(EG__OP_BATCH_NORM, 5, f64_bn, &attrs));
    assert_int_equal(eg_last_status(), EG_ERR_DTYPE);
    eg_clear_error();
    const eg_tensor *mixed_gx[3] = {xh, x, k32};
    assert_null(eg__execute(EG__OP_BATCH_NORM_BACKWARD_SUMS, 3, mixed_gx, &attrs));
    assert_int_equal(eg_last_status(), EG_ERR_DTYPE);
    eg_clear_error();
    const eg_tensor *bad_input[6] = {x, x, k32, k32, k32, eg_cast(s32, EG_DTYPE_BF16)};
    assert_null(eg__execute(EG__OP_BATCH_NORM_BACKWARD_INPUT, 6, bad_input, &attrs));
    assert_int_equal(eg_last_status(), EG_ERR_DTYPE);
    eg_clear_error();
    /* and the accepted mixes */
    const eg_tensor *good_bn[5] = {xh, k32, k32, k32, k32};
    eg_tensor *y = eg__execute(EG__OP_BATCH_NORM, 5, good_bn, &attrs);
    assert_non_null(y);
    assert_int_equal(eg_tensor_dtype(y), EG_DTYPE_F16);
    const eg_tensor *mom_in[1] = {x};
    eg_tensor *mom = eg__execute(EG__OP_MOMENTS, 1, mom_in, &attrs);
    assert_non_null(mom);
    assert_int_equal(eg_tensor_dtype(mom), EG_DTYPE_F32);
    assert_int_equal(eg_scope_end(), EG_OK);
}

/* ---- the gradient of the training op ---- */

typedef struct grads {
    float *y, *dx, *dscale, *doffset;
} grads;

static void grads_free(grads *g) {
    free(g->y);
    free(g->dx);
    free(g->dscale);
    free(g->doffset);
}

/* y = batch_norm_training_activation(x) and its gradients for upstream gradient p->g, x and g in
 * dtype act. With composite, the backward runs while a persistent outer tape records (the
 * composite rule), and that tape then gives the second order: d/dx of sum(dx * p->g) (into
 * *second, when not NULL). */
static grads run_training(const problem *p, eg_dtype act, bool relu, bool composite,
                          float **second) {
    grads r = {0};
    eg_scope_begin();
    eg_tensor *x = value_tensor(p, p->x, act), *up = value_tensor(p, p->g, act);
    int nd = p->c->n_dims;
    eg_tensor *scale = eg_tensor_from_data(p->scale, EG_DTYPE_F32, nd, p->kept_shape);
    eg_tensor *offset = eg_tensor_from_data(p->offset, EG_DTYPE_F32, nd, p->kept_shape);
    eg_tape *outer = composite ? eg_tape_begin(true) : NULL;
    if (outer) {
        eg_tape_watch(outer, x);
        eg_tape_watch(outer, scale);
        eg_tape_watch(outer, offset);
    }
    eg_tape *tape = eg_tape_begin(false);
    eg_tape_watch(tape, x);
    eg_tape_watch(tape, scale);
    eg_tape_watch(tape, offset);
    eg_tensor *y = eg_batch_norm_training_activation(
        x, p->c->n_axes, p->c->axes, offset, scale, EPS,
        relu ? EG_ACTIVATION_RELU : EG_ACTIVATION_NONE, NULL, NULL);
    r.y = read_values(p, y, act);
    eg_tensor *sources[3] = {x, scale, offset};
    eg_tensor *out[3] = {0};
    size_t before = outer ? eg_tape_n_records(outer) : 0;
    assert_int_equal(eg_tape_gradient_ex(tape, y, up, 3, sources, out, EG_UNCONNECTED_ZERO), EG_OK);
    /* the composite rule ran, recorded: some twenty ops (the fused one would record the few
     * that turn its sums into the parameters' gradients) */
    if (outer) assert_true(eg_tape_n_records(outer) >= before + 15);
    r.dx = read_values(p, out[0], act);
    r.dscale = read_values(p, out[1], EG_DTYPE_F32);
    r.doffset = read_values(p, out[2], EG_DTYPE_F32);
    if (outer) {
        eg_tensor *target = second ? eg_mul(out[0], up) : NULL;
        eg_tape_end(outer);
        if (second) {
            eg_tensor *d2 = NULL;
            assert_int_equal(eg_tape_gradient(outer, target, 1, sources, &d2, EG_UNCONNECTED_ZERO),
                             EG_OK);
            *second = read_values(p, d2, act);
            eg_release(target);
            eg_release(d2);
        }
    }
    for (int i = 0; i < 3; i++) eg_release(out[i]);
    eg_tape_free(tape);
    eg_tape_free(outer);
    assert_int_equal(eg_scope_end(), EG_OK);
    return r;
}

/* The exact gradient in f64 for the f32 statistics the forward computed (mean, var from the
 * f32 moments of the widened x), with the kernel's relu mask. */
static void reference_dx(const problem *p, bool relu, double *dx, double *scale_of) {
    size_t kept = p->kept;
    results moments = {0};
    eg_scope_begin();
    eg_tensor *x = value_tensor(p, p->x, EG_DTYPE_F32);
    const eg_tensor *in[1] = {x};
    moments.moments = read_values(p, eg__execute(EG__OP_MOMENTS, 1, in, &p->attrs), EG_DTYPE_F32);
    assert_int_equal(eg_scope_end(), EG_OK);
    const float *mean = moments.moments, *var = mean + kept;
    double *sg = calloc(kept, sizeof *sg), *sgx = calloc(kept, sizeof *sgx);
    assert_true(sg && sgx);
    bool *pass = checked_malloc(p->n * sizeof *pass);
    for (size_t e = 0; e < p->n; e++) {
        int64_t k = p->kidx[e];
        pass[e] = !relu || pre_activation(mean[k], var[k], p->scale[k], p->offset[k], p->x[e]) > 0;
        double gm = pass[e] ? p->g[e] : 0;
        sg[k] += gm;
        sgx[k] += gm * (p->x[e] - mean[k]);
    }
    double n = p->count;
    for (size_t e = 0; e < p->n; e++) {
        int64_t k = p->kidx[e];
        double rs = 1 / sqrt(var[k] + EPS), kk = p->scale[k] * rs, gm = pass[e] ? p->g[e] : 0;
        double c1 = -kk * rs * rs * sgx[k] / n, c0 = -kk * sg[k] / n - mean[k] * c1;
        dx[e] = gm * kk + (p->x[e] * c1 + c0);
        scale_of[e] = fabs(gm * kk) + fabs(p->x[e] * c1) + fabs(mean[k] * c1) +
                      fabs(kk * sg[k] / n) + fabs(c0);
    }
    free(sg);
    free(sgx);
    free(pass);
    results_free(&moments);
}

/* The fused rule: bit for bit the f32 gradient of the widened inputs (dx rounded once). The
 * composite rule: within the format's rounding of the f64 gradient plus the f32 error of its
 * longer chain of ops (every op rounds to f32 and the sums are taken of x rather than of
 * x - mean: 2^-16 of the magnitudes, generously), its parameter gradients within the same
 * slack of the fused ones; its second order within 8 u of the f32 one's largest element (each
 * path to x rounds once to the format; the contributions are added in it). */
static void test_gradient_format(const format *f) {
    static const norm_case grad_cases[] = {
        {"NHWC (4, 6, 7, 19)", 4, {4, 6, 7, 19}, 3, {0, 1, 2}, false},
        {"NCHW (3, 11, 5, 6)", 4, {3, 11, 5, 6}, 3, {0, 2, 3}, false},
    };
    for (size_t c = 0; c < 2; c++) {
        problem p;
        problem_init(&p, &grad_cases[c], f);
        double *want = checked_malloc(p.n * sizeof *want), *mag = checked_malloc(p.n * sizeof *mag);
        for (int relu = 0; relu < 2; relu++) {
            grads low = run_training(&p, f->dtype, relu, false, NULL);
            grads wide = run_training(&p, EG_DTYPE_F32, relu, false, NULL);
            float *y = rounded(&p, wide.y, p.n), *dx = rounded(&p, wide.dx, p.n);
            same_bits(&p, "y (training op)", relu, low.y, y, p.n, "the f32 op's, rounded, is");
            same_bits(&p, "dx (fused)", relu, low.dx, dx, p.n, "the f32 gradient, rounded, is");
            same_bits(&p, "d scale (fused)", relu, low.dscale, wide.dscale, p.kept, "f32 gives");
            same_bits(&p, "d offset (fused)", relu, low.doffset, wide.doffset, p.kept, "f32 gives");
            free(y);
            free(dx);
            float *second_low = NULL, *second_wide = NULL;
            grads comp = run_training(&p, f->dtype, relu, true, &second_low);
            grads comp_wide = run_training(&p, EG_DTYPE_F32, relu, true, &second_wide);
            reference_dx(&p, relu, want, mag);
            double u = f->u;
            for (size_t e = 0; e < p.n; e++) {
                double tolerance = 0x1p-16 * mag[e] * (1 + u) + u * fabs(want[e]) + f->floor;
                check(&p, "dx (composite)", relu, e, comp.dx[e], want[e], tolerance);
                check(&p, "dx (fused)", relu, e, low.dx[e], want[e], tolerance);
            }
            for (size_t k = 0; k < p.kept; k++) {
                double ds = fabs(low.dscale[k]) + 1, doff = fabs(low.doffset[k]) + 1;
                check(&p, "d scale (composite)", relu, k, comp.dscale[k], low.dscale[k],
                      0x1p-16 * ds * p.count);
                check(&p, "d offset (composite)", relu, k, comp.doffset[k], low.doffset[k],
                      0x1p-20 * doff * p.count);
            }
            double largest = 0;
            for (size_t e = 0; e < p.n; e++) largest = fmax(largest, fabs((double)second_wide[e]));
            assert_true(largest > 0);
            for (size_t e = 0; e < p.n; e++)
                check(&p, "second order", relu, e, second_low[e], second_wide[e],
                      8 * u * largest + f->floor);
            free(second_low);
            free(second_wide);
            grads_free(&low);
            grads_free(&wide);
            grads_free(&comp);
            grads_free(&comp_wide);
        }
        free(want);
        free(mag);
        problem_free(&p);
    }
}

static void test_gradient_bf16(void **state) {
    (void)state;
    test_gradient_format(&formats[0]);
}

static void test_gradient_f16(void **state) {
    (void)state;
    test_gradient_format(&formats[1]);
}

/* ---- the BatchNormalization layer fed bf16 (an f32 layer: the mix the ops take) ---- */

/* A fresh relu BatchNormalization layer called on x (training or not); y and the moving
 * statistics afterwards, and with training the gradients of gamma and beta for upstream p->g. */
static void run_layer(const problem *p, eg_dtype act, bool training, eg_policy policy,
                      float **y_out, float **moving, float **dgamma) {
    eg_scope_begin();
    eg_batch_norm_options options = eg_batch_norm_options_default();
    options.activation = EG_ACTIVATION_RELU;
    options.momentum = 0.5;
    eg_layer *layer = eg_batch_norm_new(&options);
    assert_non_null(layer);
    assert_int_equal(eg_layer_set_policy(layer, policy), EG_OK);
    eg_tensor *x = value_tensor(p, p->x, act), *up = value_tensor(p, p->g, act);
    eg_tape *tape = eg_tape_begin(false);
    eg_tensor *y = eg_layer_call(layer, x, training);
    eg_tape_end(tape);
    eg_dtype out_dtype = policy == EG_POLICY_MIXED_BFLOAT16  ? EG_DTYPE_BF16
                         : policy == EG_POLICY_MIXED_FLOAT16 ? EG_DTYPE_F16
                                                             : act;
    *y_out = read_values(p, y, out_dtype);
    int n_vars = 0;
    eg_tensor *const *vars = eg_layer_variables(layer, &n_vars);
    assert_int_equal(n_vars, 4); /* gamma, beta, moving mean, moving variance */
    size_t c = p->kept;
    *moving = checked_malloc(2 * c * sizeof **moving);
    assert_int_equal(eg_tensor_copy_to_host(vars[2], *moving, c * sizeof **moving), EG_OK);
    assert_int_equal(eg_tensor_copy_to_host(vars[3], *moving + c, c * sizeof **moving), EG_OK);
    if (dgamma) {
        eg_tensor *sources[2] = {vars[0], vars[1]};
        eg_tensor *d[2] = {0};
        eg_tensor *g = eg_tensor_dtype(up) == out_dtype ? up : eg_cast(up, out_dtype);
        assert_int_equal(eg_tape_gradient_ex(tape, y, g, 2, sources, d, EG_UNCONNECTED_ZERO),
                         EG_OK);
        *dgamma = checked_malloc(2 * c * sizeof **dgamma);
        assert_int_equal(eg_tensor_copy_to_host(d[0], *dgamma, c * sizeof **dgamma), EG_OK);
        assert_int_equal(eg_tensor_copy_to_host(d[1], *dgamma + c, c * sizeof **dgamma), EG_OK);
        eg_release(d[0]);
        eg_release(d[1]);
    }
    eg_tape_free(tape);
    eg_layer_free(layer);
    assert_int_equal(eg_scope_end(), EG_OK);
}

/* Training, a bf16 input gives the f32 layer's output on the widened input rounded once, the
 * same moving statistics and gamma / beta gradients (bit for bit); at inference too (moving
 * statistics). Under MIXED_BFLOAT16 the layer's output is bf16 with the same bits whichever way
 * the policy routes it (casting around the layer or not). */
static void test_layer(void **state) {
    (void)state;
    static const norm_case layer_case = {
        "layer, NHWC (4, 5, 6, 24)", 4, {4, 5, 6, 24}, 3, {0, 1, 2}, false};
    problem p;
    problem_init(&p, &layer_case, &formats[0]);
    size_t c = p.kept;
    for (int training = 0; training < 2; training++) {
        float *y_low, *mov_low, *dg_low = NULL, *y32, *mov32, *dg32 = NULL, *y_mixed, *mov_mixed;
        run_layer(&p, EG_DTYPE_BF16, training, EG_POLICY_FLOAT32, &y_low, &mov_low,
                  training ? &dg_low : NULL);
        run_layer(&p, EG_DTYPE_F32, training, EG_POLICY_FLOAT32, &y32, &mov32,
                  training ? &dg32 : NULL);
        run_layer(&p, EG_DTYPE_BF16, training, EG_POLICY_MIXED_BFLOAT16, &y_mixed, &mov_mixed,
                  NULL);
        float *y = rounded(&p, y32, p.n);
        same_bits(&p, "layer y", training, y_low, y, p.n, "the f32 layer's, rounded, is");
        same_bits(&p, "layer y (mixed_bfloat16)", training, y_mixed, y, p.n,
                  "the f32 layer's, rounded, is");
        same_bits(&p, "moving statistics", training, mov_low, mov32, 2 * c, "f32 gives");
        same_bits(&p, "moving statistics (mixed)", training, mov_mixed, mov32, 2 * c, "f32 gives");
        if (training) same_bits(&p, "d gamma, d beta", training, dg_low, dg32, 2 * c, "f32 gives");
        free(y);
        free(y_low);
        free(mov_low);
        free(dg_low);
        free(y32);
        free(mov32);
        free(dg32);
        free(y_mixed);
        free(mov_mixed);
    }
    problem_free(&p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ops_bf16),      cmocka_unit_test(test_ops_f16),
        cmocka_unit_test(test_threads),       cmocka_unit_test(test_dtype_errors),
        cmocka_unit_test(test_gradient_bf16), cmocka_unit_test(test_gradient_f16),
        cmocka_unit_test(test_layer),
    };
    print_message("[ INFO     ] CPU path %s\n", eg__cpu_level_name(eg__cpu_active_level()));
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    eg_shutdown();
    return failed;
}
