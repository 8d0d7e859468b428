/* The CPU convolution kernels (forward, input gradient, filter gradient; f32 NHWC) against a
 * naive f64 reference on awkward shapes — channel counts that are not multiples of the 16-channel
 * register block, odd images, strides, dilation, valid/same/explicit padding, groups, strided
 * inputs, batch 1 and 3 — with each algorithm the dispatcher can pick: im2col + GEMM (what a CPU
 * without AVX2 runs), the AVX2 implicit GEMM (conv_avx2.c) where this CPU has AVX2, the AVX-512
 * one (conv_avx512.c) where it has AVX-512, and the automatic choice. Each result must also be
 * bitwise the same with 1, 2 and 4 threads, and the AVX-512 kernels bitwise the same as the AVX2
 * ones (conv_avx512.c says why). Runs under TSan (label "threads"). */
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

/* 0 auto, 1 im2col + GEMM, 2 direct, 3 col2im input gradient, 4 AVX2 implicit GEMM, 5 AVX-512
 * implicit GEMM */
void eg__conv_set_algorithm(int algorithm);

typedef struct conv_case {
    const char *name;
    int64_t b, h, w, c, kh, kw, o;
    int strides[2], dilations[2], groups;
    eg_padding padding;
    int64_t pads[4];
    bool transposed_view; /* x is a (B, W, H, C) tensor's transposed view */
} conv_case;

static const conv_case cases[] = {
    {"odd channels, same", 3, 7, 9, 5, 3, 3, 19, {1, 1}, {1, 1}, 1, EG_PADDING_SAME, {0}, false},
    {"stride 2, same, batch 1",
     1,
     11,
     6,
     37,
     3,
     3,
     24,
     {2, 2},
     {1, 1},
     1,
     EG_PADDING_SAME,
     {0},
     false},
    {"2x3 filter, valid", 3, 8, 5, 16, 2, 3, 16, {1, 1}, {1, 1}, 1, EG_PADDING_VALID, {0}, false},
    {"explicit padding, dilation (2, 1)",
     2,
     6,
     7,
     12,
     3,
     3,
     33,
     {1, 1},
     {2, 1},
     1,
     EG_PADDING_EXPLICIT,
     {2, 0, 1, 3},
     false},
    {"groups 2, same", 1, 9, 9, 16, 3, 3, 32, {1, 1}, {1, 1}, 2, EG_PADDING_SAME, {0}, false},
    {"5x5 filter on a narrow image",
     3,
     13,
     3,
     9,
     5,
     5,
     8,
     {1, 1},
     {1, 1},
     1,
     EG_PADDING_SAME,
     {0},
     false},
    {"stride (1, 2), transposed view",
     2,
     7,
     8,
     10,
     3,
     3,
     17,
     {1, 2},
     {1, 1},
     1,
     EG_PADDING_SAME,
     {0},
     true},
    {"the CNN's conv3 shape",
     2,
     14,
     14,
     32,
     3,
     3,
     64,
     {1, 1},
     {1, 1},
     1,
     EG_PADDING_SAME,
     {0},
     false},
    /* Shapes for conv_avx512.c's blocks: 14-pixel blocks that cross output rows, channel and
     * output tails, 64-channel pixel steps (stride 2 over 32 channels too), groups of 32,
     * filters whose 16-channel vectors do not come in threes, 1x1. */
    {"32 channels, width 17", 2, 5, 17, 32, 3, 3, 40, {1, 1}, {1, 1}, 1, EG_PADDING_SAME, {0},
     false},
    {"dilation 2, 20 channels, 37 outputs",
     2,
     9,
     8,
     20,
     3,
     3,
     37,
     {1, 1},
     {2, 2},
     1,
     EG_PADDING_SAME,
     {0},
     false},
    {"groups 2 of 32 channels", 1, 6, 15, 64, 3, 3, 48, {1, 1}, {1, 1}, 2, EG_PADDING_SAME, {0},
     false},
    {"5x5 filter, 16 channels, 64 outputs, explicit padding",
     2,
     7,
     6,
     16,
     5,
     5,
     64,
     {1, 1},
     {1, 1},
     1,
     EG_PADDING_EXPLICIT,
     {1, 2, 0, 2},
     false},
    {"1x1 filter, 64 channels, 16 outputs",
     2,
     5,
     14,
     64,
     1,
     1,
     16,
     {1, 1},
     {1, 1},
     1,
     EG_PADDING_VALID,
     {0},
     false},
    {"stride 2, 32 channels", 2, 9, 12, 32, 3, 3, 32, {2, 2}, {1, 1}, 1, EG_PADDING_SAME, {0},
     false},
    {"the CNN's conv4 shape", 1, 14, 14, 64, 3, 3, 64, {1, 1}, {1, 1}, 1, EG_PADDING_SAME, {0},
     false},
    {"one input channel (a first layer)",
     3,
     10,
     11,
     1,
     3,
     3,
     32,
     {1, 1},
     {1, 1},
     1,
     EG_PADDING_SAME,
     {0},
     false},
};

static float *random_floats(size_t n, unsigned *seed) {
    float *v = malloc(n * sizeof *v);
    assert_non_null(v);
    for (size_t i = 0; i < n; i++) {
        *seed = *seed * 1103515245u + 12345u;
        v[i] = (float)((*seed >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
    return v;
}

/* The three results of one case, and their f64 references with the sums of absolute terms
 * (the tolerance scales with those). */
typedef struct results {
    float *y, *dx, *dw;
} results;

typedef struct reference {
    double *y, *dx, *dw, *y_abs, *dx_abs, *dw_abs;
} reference;

typedef struct problem {
    const conv_case *c;
    eg_conv2d_options options;
    eg__attrs attrs;
    int64_t xs[4], ws[4], ys[4];
    size_t nx, nw, ny;
    float *x, *w, *dy;
} problem;

static void problem_init(problem *p, const conv_case *c) {
    memset(p, 0, sizeof *p);
    p->c = c;
    p->options = (eg_conv2d_options){{c->strides[0], c->strides[1]},
                                     {c->dilations[0], c->dilations[1]},
                                     c->padding,
                                     {c->pads[0], c->pads[1], c->pads[2], c->pads[3]},
                                     c->groups,
                                     EG_DATA_FORMAT_NHWC};
    int64_t xs[4] = {c->b, c->h, c->w, c->c}, ws[4] = {c->kh, c->kw, c->c / c->groups, c->o};
    memcpy(p->xs, xs, sizeof xs);
    memcpy(p->ws, ws, sizeof ws);
    assert_true(eg__conv2d_attrs(&p->attrs, &p->options, xs, ws, "test"));
    p->attrs.n_dims = 4;
    memcpy(p->attrs.shape, ws, sizeof ws);
    const eg__window *win = &p->attrs.window;
    int64_t span_h = (c->kh - 1) * win->dilation[0] + 1,
            span_w = (c->kw - 1) * win->dilation[1] + 1;
    p->ys[0] = c->b;
    p->ys[1] = (c->h + win->pad[0] + win->pad[1] - span_h) / win->stride[0] + 1;
    p->ys[2] = (c->w + win->pad[2] + win->pad[3] - span_w) / win->stride[1] + 1;
    p->ys[3] = c->o;
    p->nx = (size_t)(xs[0] * xs[1] * xs[2] * xs[3]);
    p->nw = (size_t)(ws[0] * ws[1] * ws[2] * ws[3]);
    p->ny = (size_t)(p->ys[0] * p->ys[1] * p->ys[2] * p->ys[3]);
    unsigned seed = 12345u + (unsigned)c->o;
    p->x = random_floats(p->nx, &seed);
    p->w = random_floats(p->nw, &seed);
    p->dy = random_floats(p->ny, &seed);
}

static void problem_free(problem *p) {
    free(p->x);
    free(p->w);
    free(p->dy);
}

static void reference_compute(const problem *p, reference *r) {
    const conv_case *c = p->c;
    const eg__window *win = &p->attrs.window;
    int64_t cg = c->c / c->groups, og = c->o / c->groups, oh_n = p->ys[1], ow_n = p->ys[2];
    r->y = calloc(p->ny, sizeof(double));
    r->y_abs = calloc(p->ny, sizeof(double));
    r->dx = calloc(p->nx, sizeof(double));
    r->dx_abs = calloc(p->nx, sizeof(double));
    r->dw = calloc(p->nw, sizeof(double));
    r->dw_abs = calloc(p->nw, sizeof(double));
    assert_true(r->y && r->y_abs && r->dx && r->dx_abs && r->dw && r->dw_abs);
    for (int64_t b = 0; b < c->b; b++)
        for (int64_t oh = 0; oh < oh_n; oh++)
            for (int64_t ow = 0; ow < ow_n; ow++)
                for (int64_t o = 0; o < c->o; o++) {
                    int64_t grp = o / og, yi = ((b * oh_n + oh) * ow_n + ow) * c->o + o;
                    for (int64_t i = 0; i < c->kh; i++) {
                        int64_t ih = oh * win->stride[0] + i * win->dilation[0] - win->pad[0];
                        if (ih < 0 || ih >= c->h) continue;
                        for (int64_t j = 0; j < c->kw; j++) {
                            int64_t iw = ow * win->stride[1] + j * win->dilation[1] - win->pad[2];
                            if (iw < 0 || iw >= c->w) continue;
                            for (int64_t ch = 0; ch < cg; ch++) {
                                int64_t xi = ((b * c->h + ih) * c->w + iw) * c->c + grp * cg + ch;
                                int64_t wi = ((i * c->kw + j) * cg + ch) * c->o + o;
                                double xv = p->x[xi], wv = p->w[wi], dv = p->dy[yi];
                                r->y[yi] += xv * wv;
                                r->y_abs[yi] += fabs(xv * wv);
                                r->dx[xi] += dv * wv;
                                r->dx_abs[xi] += fabs(dv * wv);
                                r->dw[wi] += xv * dv;
                                r->dw_abs[wi] += fabs(xv * dv);
                            }
                        }
                    }
                }
}

static void reference_free(reference *r) {
    free(r->y);
    free(r->y_abs);
    free(r->dx);
    free(r->dx_abs);
    free(r->dw);
    free(r->dw_abs);
}

static float *host_copy(const eg_tensor *t) {
    assert_non_null(t);
    size_t n = (size_t)eg_tensor_n_elems(t);
    float *v = malloc((n ? n : 1) * sizeof *v);
    assert_non_null(v);
    assert_int_equal(eg_tensor_copy_to_host(t, v, n * sizeof *v), EG_OK);
    return v;
}

/* The three kernels for problem p with the current algorithm and thread count. */
static results run_kernels(const problem *p) {
    eg_scope_begin();
    eg_tensor *x;
    if (p->c->transposed_view) {
        int64_t ts[4] = {p->xs[0], p->xs[2], p->xs[1], p->xs[3]};
        float *t = malloc(p->nx * sizeof *t);
        assert_non_null(t);
        for (int64_t b = 0; b < ts[0]; b++)
            for (int64_t i = 0; i < ts[1]; i++)
                for (int64_t j = 0; j < ts[2]; j++)
                    for (int64_t ch = 0; ch < ts[3]; ch++)
                        t[((b * ts[1] + i) * ts[2] + j) * ts[3] + ch] =
                            p->x[((b * p->xs[1] + j) * p->xs[2] + i) * p->xs[3] + ch];
        x = eg_transpose(eg_tensor_from_data(t, EG_DTYPE_F32, 4, ts), 1, 2);
        free(t);
    } else {
        x = eg_tensor_from_data(p->x, EG_DTYPE_F32, 4, p->xs);
    }
    eg_tensor *w = eg_tensor_from_data(p->w, EG_DTYPE_F32, 4, p->ws);
    eg_tensor *dy = eg_tensor_from_data(p->dy, EG_DTYPE_F32, 4, p->ys);
    results r;
    r.y = host_copy(eg_conv2d(x, w, &p->options));
    r.dx = host_copy(eg_conv2d_transpose(dy, w, p->xs, &p->options));
    const eg_tensor *in[2] = {x, dy};
    r.dw = host_copy(eg__execute(EG__OP_CONV2D_BACKWARD_FILTER, 2, in, &p->attrs));
    assert_int_equal(eg_scope_end(), EG_OK);
    return r;
}

static void results_free(results *r) {
    free(r->y);
    free(r->dx);
    free(r->dw);
}

static void check_close(const char *what, const conv_case *c, int algorithm, const float *got,
                        const double *want, const double *abs_sum, size_t n) {
    for (size_t i = 0; i < n; i++) {
        double tolerance = 1e-5 * abs_sum[i] + 1e-6;
        if (fabs((double)got[i] - want[i]) > tolerance) {
            print_error("%s, algorithm %d: %s[%zu] = %.9g, reference %.9g\n", c->name, algorithm,
                        what, i, (double)got[i], want[i]);
            fail();
        }
    }
}

static void check_same(const char *what, const conv_case *c, int algorithm, int threads,
                       const float *a, const float *b, size_t n) {
    if (memcmp(a, b, n * sizeof *a) != 0) {
        print_error("%s, algorithm %d: %s differs between 1 and %d threads\n", c->name, algorithm,
                    what, threads);
        fail();
    }
}

static void test_algorithm(int algorithm) {
    int original_threads = eg_get_num_threads();
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        problem p;
        problem_init(&p, &cases[k]);
        reference ref;
        reference_compute(&p, &ref);
        eg__conv_set_algorithm(algorithm);
        assert_int_equal(eg_set_num_threads(1), EG_OK);
        results one = run_kernels(&p);
        check_close("y", p.c, algorithm, one.y, ref.y, ref.y_abs, p.ny);
        check_close("dx", p.c, algorithm, one.dx, ref.dx, ref.dx_abs, p.nx);
        check_close("dw", p.c, algorithm, one.dw, ref.dw, ref.dw_abs, p.nw);
        for (int threads = 2; threads <= 4; threads += 2) {
            assert_int_equal(eg_set_num_threads(threads), EG_OK);
            results many = run_kernels(&p);
            check_same("y", p.c, algorithm, threads, one.y, many.y, p.ny);
            check_same("dx", p.c, algorithm, threads, one.dx, many.dx, p.nx);
            check_same("dw", p.c, algorithm, threads, one.dw, many.dw, p.nw);
            results_free(&many);
        }
        eg__conv_set_algorithm(0);
        results_free(&one);
        reference_free(&ref);
        problem_free(&p);
    }
    assert_int_equal(eg_set_num_threads(original_threads), EG_OK);
}

/* What a CPU without AVX2 runs (and f64, NCHW everywhere). */
static void test_im2col_gemm(void **state) {
    (void)state;
    test_algorithm(1);
}

/* conv_avx2.c wherever it applies (on a CPU without AVX2 this is the fallback again). */
static void test_avx2_implicit_gemm(void **state) {
    (void)state;
    test_algorithm(4);
}

/* conv_avx512.c wherever it applies (the AVX2 kernels on a CPU without AVX-512). */
static void test_avx512_implicit_gemm(void **state) {
    (void)state;
    eg__cpu_level level = eg__cpu_set_level(EG__CPU_AVX512);
    test_algorithm(5);
    eg__cpu_set_level(level);
}

/* The AVX-512 kernels give the AVX2 kernels' bits, and so does the automatic choice at the two
 * levels (on a CPU without AVX-512 both runs are AVX2 and this holds trivially). */
static void test_avx512_same_bits_as_avx2(void **state) {
    (void)state;
    static const struct {
        int algorithm_avx2, algorithm_avx512;
    } pairs[] = {{4, 5}, {0, 0}};
    eg__cpu_level level = eg__cpu_active_level();
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        problem p;
        problem_init(&p, &cases[k]);
        for (size_t q = 0; q < sizeof pairs / sizeof pairs[0]; q++) {
            eg__cpu_set_level(EG__CPU_AVX2);
            eg__conv_set_algorithm(pairs[q].algorithm_avx2);
            results a = run_kernels(&p);
            eg__cpu_set_level(EG__CPU_AVX512);
            eg__conv_set_algorithm(pairs[q].algorithm_avx512);
            results b = run_kernels(&p);
            eg__conv_set_algorithm(0);
            const char *what[3] = {"y", "dx", "dw"};
            const float *got[3] = {b.y, b.dx, b.dw}, *want[3] = {a.y, a.dx, a.dw};
            size_t n[3] = {p.ny, p.nx, p.nw};
            for (int r = 0; r < 3; r++)
                if (memcmp(got[r], want[r], n[r] * sizeof(float)) != 0) {
                    print_error("%s: %s, algorithm %d at avx512 differs from %d at avx2\n",
                                p.c->name, what[r], pairs[q].algorithm_avx512,
                                pairs[q].algorithm_avx2);
                    fail();
                }
            results_free(&a);
            results_free(&b);
        }
        problem_free(&p);
    }
    eg__cpu_set_level(level);
}

/* The CNN step's other per-level loops, pool.c's and norm.c's (compiled for SSE2, AVX2 and
 * AVX-512): max and average pooling and their gradients (tiled 2x2, overlapping 3x3 windows with
 * SAME padding) and fused batch norm + relu with its gradients, bitwise the same at every level
 * this CPU has (selects, maxima and adds in the same order per element). */
typedef struct level_outputs {
    float *v[8];
    size_t n[8];
    int count;
} level_outputs;

/* Keeps a copy of t, which must not be all zeros (a gradient that did not flow would be). */
static void keep(level_outputs *o, const eg_tensor *t) {
    assert_true(o->count < 8);
    size_t n = (size_t)eg_tensor_n_elems(t);
    float *v = host_copy(t);
    bool any = false;
    for (size_t i = 0; i < n; i++) any = any || v[i] != 0;
    assert_true(any);
    o->n[o->count] = n;
    o->v[o->count++] = v;
}

static level_outputs pool_and_norm_outputs(eg_tensor *x, const eg_tensor *g) {
    level_outputs o = {.count = 0};
    eg_scope_begin();
    eg_pool2d_options tiled = {{0, 0}, {0, 0}, EG_PADDING_VALID, {0}, EG_DATA_FORMAT_NHWC};
    eg_pool2d_options overlapping = {{3, 3}, {2, 2}, EG_PADDING_SAME, {0}, EG_DATA_FORMAT_NHWC};
    const eg_pool2d_options *pools[2] = {&tiled, &overlapping};
    for (int k = 0; k < 2; k++)
        for (int is_max = 0; is_max < 2; is_max++) {
            eg_tape *tape = eg_tape_begin(false);
            assert_int_equal(eg_tape_watch(tape, x), EG_OK);
            eg_tensor *y = is_max ? eg_max_pool2d(x, pools[k]) : eg_avg_pool2d(x, pools[k]);
            assert_non_null(y);
            eg_tensor *dy = eg_full_like(y, 0.5); /* any gradient */
            eg_tensor *sources[1] = {x};
            eg_tensor *dx[1];
            assert_int_equal(eg_tape_gradient_ex(tape, y, dy, 1, sources, dx, EG_UNCONNECTED_ZERO),
                             EG_OK);
            eg_tape_free(tape);
            if (is_max) keep(&o, y); /* the means' values are the same sums; their gradients too */
            if (is_max || k == 1) keep(&o, dx[0]);
        }
    int64_t c = eg_tensor_shape(x)[3];
    eg_tensor *scale = eg_variable(eg_full(EG_DTYPE_F32, 1, &c, 1.25), "scale");
    eg_tensor *offset = eg_variable(eg_full(EG_DTYPE_F32, 1, &c, 0.25), "offset");
    eg_tape *tape = eg_tape_begin(false);
    assert_int_equal(eg_tape_watch(tape, x), EG_OK);
    int axes[3] = {0, 1, 2};
    eg_tensor *y = eg_batch_norm_training_activation(x, 3, axes, offset, scale, 1e-3,
                                                     EG_ACTIVATION_RELU, NULL, NULL);
    assert_non_null(y);
    eg_tensor *sources[3] = {x, scale, offset};
    eg_tensor *grads[3];
    assert_int_equal(eg_tape_gradient_ex(tape, y, g, 3, sources, grads, EG_UNCONNECTED_ZERO),
                     EG_OK);
    eg_tape_free(tape);
    keep(&o, y);
    keep(&o, grads[0]);
    keep(&o, grads[1]);
    assert_int_equal(eg_scope_end(), EG_OK);
    eg_release(scale);
    eg_release(offset);
    return o;
}

static void test_pool_and_batch_norm_levels(void **state) {
    (void)state;
    eg__cpu_level level = eg__cpu_active_level(), best = eg__cpu_best_level();
    int64_t shape[4] = {3, 9, 10, 37};
    size_t n = 3 * 9 * 10 * 37;
    unsigned seed = 99u;
    float *xv = random_floats(n, &seed), *gv = random_floats(n, &seed);
    eg_scope_begin();
    eg_tensor *x = eg_tensor_from_data(xv, EG_DTYPE_F32, 4, shape);
    eg_tensor *g = eg_tensor_from_data(gv, EG_DTYPE_F32, 4, shape);
    eg__cpu_set_level(EG__CPU_BASELINE);
    level_outputs want = pool_and_norm_outputs(x, g);
    for (int l = EG__CPU_AVX2; l <= (int)best; l++) {
        eg__cpu_set_level((eg__cpu_level)l);
        level_outputs got = pool_and_norm_outputs(x, g);
        assert_int_equal(got.count, want.count);
        for (int k = 0; k < got.count; k++) {
            assert_int_equal(got.n[k], want.n[k]);
            if (memcmp(got.v[k], want.v[k], got.n[k] * sizeof(float)) != 0) {
                print_error("output %d differs between %s and baseline\n", k,
                            eg__cpu_level_name((eg__cpu_level)l));
                fail();
            }
            free(got.v[k]);
        }
    }
    for (int k = 0; k < want.count; k++) free(want.v[k]);
    eg__cpu_set_level(level);
    assert_int_equal(eg_scope_end(), EG_OK);
    free(xv);
    free(gv);
}

static void test_automatic_choice(void **state) {
    (void)state;
    test_algorithm(0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_im2col_gemm),
        cmocka_unit_test(test_avx2_implicit_gemm),
        cmocka_unit_test(test_avx512_implicit_gemm),
        cmocka_unit_test(test_avx512_same_bits_as_avx2),
        cmocka_unit_test(test_pool_and_batch_norm_levels),
        cmocka_unit_test(test_automatic_choice),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    eg_shutdown();
    return failed;
}
