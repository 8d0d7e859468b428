/* bf16 and f16 convolutions (forward, input gradient, filter gradient) against an f64 reference
 * of the same format-rounded inputs, on awkward shapes: channel counts that are not multiples of
 * 16 or 32, one input channel (a first layer), odd images, strides, dilation, valid / same /
 * explicit padding (and padding past the filter, whose flipped form pads negatively), groups,
 * NCHW, a strided input view, batch 1 and 64. Each runs the automatic choice (AMX where the CPU
 * grants the tiles at the AVX-512 level, else the f32 kernels) and the f32 routes forced; the
 * automatic result must be bitwise the same with 1, 2 and 3 threads, and the f32 kernels reading
 * the format bitwise the same as on widened copies. Run it at every EG_CPU level (the unforced
 * run takes AMX on a CPU that has it).
 *
 * The bound, for an output whose exact value is s = sum of n products of format values: the
 * products are exact in f32 (8- or 11-bit significands), the f32 sum of n terms in any order is
 * within (n - 1) 2^-24 sum|x w| of s (we allow (n + 2)), and the one rounding to the format adds
 * u |computed| (u = 2^-8 for bf16, 2^-11 for f16), so |got - s| <= E (1 + u) + u |s| with
 * E = (n + 2) 2^-24 sum|x w|, plus the format's absolute rounding floor below its normal range
 * (f16: 2^-25; bf16 and AMX's flushed f32 denormals: 2^-126). n is KH*KW*C/groups for y,
 * KH*KW*O/groups for dx and B*OH*OW for dw. */
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

/* conv.c / conv_lowp.c: 0 auto, 1 the f32 im2col + GEMM on widened copies, 4 / 5 the AVX2 /
 * AVX-512 implicit GEMM, 6 AMX, 7 the f32 kernels' own choice reading the format, 8 the f32
 * kernels' own choice on widened copies */
void eg__conv_set_algorithm(int algorithm);

typedef struct conv_case {
    const char *name;
    int64_t b, h, w, c, kh, kw, o;
    int strides[2], dilations[2], groups;
    eg_padding padding;
    int64_t pads[4];
    bool nchw, transposed_view;
} conv_case;

#define SAME  EG_PADDING_SAME
#define VALID EG_PADDING_VALID
#define EXPL  EG_PADDING_EXPLICIT
static const conv_case cases[] = {
    /* name, b, h, w, c, kh, kw, o, strides, dilations, groups, padding, pads, nchw, view */
    {"odd channels, same", 3, 7, 9, 5, 3, 3, 19, {1, 1}, {1, 1}, 1, SAME, {0}, false, false},
    {"stride 2, batch 1", 1, 11, 6, 37, 3, 3, 24, {2, 2}, {1, 1}, 1, SAME, {0}, false, false},
    {"2x3 filter, 16 channels, valid",
     3,
     8,
     5,
     16,
     2,
     3,
     16,
     {1, 1},
     {1, 1},
     1,
     VALID,
     {0},
     false,
     false},
    {"explicit padding, dilation (2, 1), 33 outputs",
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
     EXPL,
     {2, 0, 1, 3},
     false,
     false},
    {"groups 2 of 8 channels", 1, 9, 9, 16, 3, 3, 32, {1, 1}, {1, 1}, 2, SAME, {0}, false, false},
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
     SAME,
     {0},
     false,
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
     SAME,
     {0},
     false,
     true},
    {"transposed view, stride 1, 32 channels",
     2,
     6,
     7,
     32,
     3,
     3,
     20,
     {1, 1},
     {1, 1},
     1,
     SAME,
     {0},
     false,
     true},
    {"the CNN's conv3 shape", 2, 14, 14, 32, 3, 3, 64, {1, 1}, {1, 1}, 1, SAME, {0}, false, false},
    {"32 channels, width 17, 40 outputs",
     2,
     5,
     17,
     32,
     3,
     3,
     40,
     {1, 1},
     {1, 1},
     1,
     SAME,
     {0},
     false,
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
     SAME,
     {0},
     false,
     false},
    {"groups 2 of 32 channels, 24 outputs each",
     1,
     6,
     15,
     64,
     3,
     3,
     48,
     {1, 1},
     {1, 1},
     2,
     SAME,
     {0},
     false,
     false},
    {"5x5 filter, 16 channels, explicit padding",
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
     EXPL,
     {1, 2, 0, 2},
     false,
     false},
    {"padding past the filter",
     2,
     5,
     6,
     18,
     3,
     3,
     16,
     {1, 1},
     {1, 1},
     1,
     EXPL,
     {3, 1, 0, 3},
     false,
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
     VALID,
     {0},
     false,
     false},
    {"48 channels, 20 outputs", 2, 6, 6, 48, 3, 3, 20, {1, 1}, {1, 1}, 1, SAME, {0}, false, false},
    {"stride 2, 32 channels", 2, 9, 12, 32, 3, 3, 32, {2, 2}, {1, 1}, 1, SAME, {0}, false, false},
    {"the CNN's conv4 shape, batch 1",
     1,
     14,
     14,
     64,
     3,
     3,
     64,
     {1, 1},
     {1, 1},
     1,
     SAME,
     {0},
     false,
     false},
    {"one input channel, batch 3",
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
     SAME,
     {0},
     false,
     false},
    {"the CNN's conv1 shape, batch 64",
     64,
     28,
     28,
     1,
     3,
     3,
     32,
     {1, 1},
     {1, 1},
     1,
     SAME,
     {0},
     false,
     false},
    {"conv2's channels at batch 64, 9x10",
     64,
     9,
     10,
     32,
     3,
     3,
     32,
     {1, 1},
     {1, 1},
     1,
     SAME,
     {0},
     false,
     false},
    {"NCHW, same", 2, 7, 8, 12, 3, 3, 20, {1, 1}, {1, 1}, 1, SAME, {0}, true, false},
    {"NCHW, stride 2, groups 2", 2, 9, 7, 16, 3, 3, 24, {2, 2}, {1, 1}, 2, SAME, {0}, true, false},
};

static float random_value(unsigned *seed) {
    *seed = *seed * 1103515245u + 12345u;
    return (float)((*seed >> 8) & 0xffff) / 32768.0f - 1.0f;
}

typedef struct format {
    eg_dtype dtype;
    double u, floor; /* unit roundoff; absolute rounding floor */
} format;

static const format formats[2] = {
    {EG_DTYPE_BF16, 0x1p-8, 0x1p-126},
    {EG_DTYPE_F16, 0x1p-11, 0x1p-25},
};

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

/* A case's operands (values representable in the format; NHWC / HWIO index order) and the f64
 * reference of its three results with the sums of absolute products. */
typedef struct problem {
    const conv_case *c;
    const format *f;
    eg_conv2d_options options;
    eg__attrs attrs;
    int64_t ys[4]; /* NHWC */
    size_t nx, nw, ny;
    float *x, *w, *dy;
    double *y, *dx, *dw, *y_abs, *dx_abs, *dw_abs;
} problem;

static float *format_values(const format *f, size_t n, unsigned *seed) {
    float *v = malloc(n * sizeof *v);
    uint16_t *bits = malloc(n * sizeof *bits);
    assert_true(v && bits);
    for (size_t i = 0; i < n; i++) v[i] = random_value(seed);
    to_format(f, v, bits, n);
    from_format(f, bits, v, n);
    free(bits);
    return v;
}

static void tensor_shape(const problem *p, const int64_t *nhwc, int64_t *shape) {
    if (!p->c->nchw) {
        memcpy(shape, nhwc, 4 * sizeof *shape);
        return;
    }
    int64_t s[4] = {nhwc[0], nhwc[3], nhwc[1], nhwc[2]};
    memcpy(shape, s, sizeof s);
}

static void problem_init(problem *p, const conv_case *c, const format *f) {
    memset(p, 0, sizeof *p);
    p->c = c;
    p->f = f;
    p->options = (eg_conv2d_options){{c->strides[0], c->strides[1]},
                                     {c->dilations[0], c->dilations[1]},
                                     c->padding,
                                     {c->pads[0], c->pads[1], c->pads[2], c->pads[3]},
                                     c->groups,
                                     c->nchw ? EG_DATA_FORMAT_NCHW : EG_DATA_FORMAT_NHWC};
    int64_t xs[4] = {c->b, c->h, c->w, c->c}, ws[4] = {c->kh, c->kw, c->c / c->groups, c->o}, xt[4];
    tensor_shape(p, xs, xt);
    assert_true(eg__conv2d_attrs(&p->attrs, &p->options, xt, ws, "test"));
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
    unsigned seed = 777u + (unsigned)c->o * 31u + (unsigned)c->c;
    p->x = format_values(f, p->nx, &seed);
    p->w = format_values(f, p->nw, &seed);
    p->dy = format_values(f, p->ny, &seed);
}

static void reference_compute(problem *p) {
    const conv_case *c = p->c;
    const eg__window *win = &p->attrs.window;
    int64_t cg = c->c / c->groups, og = c->o / c->groups, oh_n = p->ys[1], ow_n = p->ys[2];
    p->y = calloc(p->ny, sizeof(double));
    p->y_abs = calloc(p->ny, sizeof(double));
    p->dx = calloc(p->nx, sizeof(double));
    p->dx_abs = calloc(p->nx, sizeof(double));
    p->dw = calloc(p->nw, sizeof(double));
    p->dw_abs = calloc(p->nw, sizeof(double));
    assert_true(p->y && p->y_abs && p->dx && p->dx_abs && p->dw && p->dw_abs);
    for (int64_t b = 0; b < c->b; b++)
        for (int64_t oh = 0; oh < oh_n; oh++)
            for (int64_t ow = 0; ow < ow_n; ow++)
                for (int64_t i = 0; i < c->kh; i++) {
                    int64_t ih = oh * win->stride[0] + i * win->dilation[0] - win->pad[0];
                    if (ih < 0 || ih >= c->h) continue;
                    for (int64_t j = 0; j < c->kw; j++) {
                        int64_t iw = ow * win->stride[1] + j * win->dilation[1] - win->pad[2];
                        if (iw < 0 || iw >= c->w) continue;
                        for (int64_t o = 0; o < c->o; o++) {
                            int64_t grp = o / og, yi = ((b * oh_n + oh) * ow_n + ow) * c->o + o;
                            double dv = p->dy[yi], ys = 0, ya = 0;
                            for (int64_t ch = 0; ch < cg; ch++) {
                                int64_t xi = ((b * c->h + ih) * c->w + iw) * c->c + grp * cg + ch;
                                int64_t wi = ((i * c->kw + j) * cg + ch) * c->o + o;
                                double xv = p->x[xi], wv = p->w[wi];
                                ys += xv * wv;
                                ya += fabs(xv * wv);
                                p->dx[xi] += dv * wv;
                                p->dx_abs[xi] += fabs(dv * wv);
                                p->dw[wi] += xv * dv;
                                p->dw_abs[wi] += fabs(xv * dv);
                            }
                            p->y[yi] += ys;
                            p->y_abs[yi] += ya;
                        }
                    }
                }
}

static void problem_free(problem *p) {
    free(p->x);
    free(p->w);
    free(p->dy);
    free(p->y);
    free(p->dx);
    free(p->dw);
    free(p->y_abs);
    free(p->dx_abs);
    free(p->dw_abs);
}

/* An NHWC-ordered array as the case's tensor (NCHW when the case says so), in the format. */
static eg_tensor *image_tensor(const problem *p, const float *v, const int64_t *nhwc) {
    size_t n = (size_t)(nhwc[0] * nhwc[1] * nhwc[2] * nhwc[3]);
    float *laid = malloc(n * sizeof *laid);
    uint16_t *bits = malloc(n * sizeof *bits);
    assert_true(laid && bits);
    int64_t shape[4];
    tensor_shape(p, nhwc, shape);
    for (int64_t b = 0; b < nhwc[0]; b++)
        for (int64_t h = 0; h < nhwc[1]; h++)
            for (int64_t w = 0; w < nhwc[2]; w++)
                for (int64_t c = 0; c < nhwc[3]; c++) {
                    int64_t src = ((b * nhwc[1] + h) * nhwc[2] + w) * nhwc[3] + c;
                    int64_t dst =
                        p->c->nchw ? ((b * nhwc[3] + c) * nhwc[1] + h) * nhwc[2] + w : src;
                    laid[dst] = v[src];
                }
    to_format(p->f, laid, bits, n);
    eg_tensor *t = eg_tensor_from_data(bits, p->f->dtype, 4, shape);
    free(laid);
    free(bits);
    return t;
}

/* An image result back in NHWC order as floats. */
static float *image_values(const problem *p, const eg_tensor *t, const int64_t *nhwc) {
    assert_non_null(t);
    assert_int_equal(eg_tensor_dtype(t), p->f->dtype);
    size_t n = (size_t)eg_tensor_n_elems(t);
    assert_int_equal(n, (size_t)(nhwc[0] * nhwc[1] * nhwc[2] * nhwc[3]));
    uint16_t *bits = malloc((n ? n : 1) * sizeof *bits);
    float *laid = malloc((n ? n : 1) * sizeof *laid), *v = malloc((n ? n : 1) * sizeof *v);
    assert_true(bits && laid && v);
    assert_int_equal(eg_tensor_copy_to_host(t, bits, n * sizeof *bits), EG_OK);
    from_format(p->f, bits, laid, n);
    for (int64_t b = 0; b < nhwc[0]; b++)
        for (int64_t h = 0; h < nhwc[1]; h++)
            for (int64_t w = 0; w < nhwc[2]; w++)
                for (int64_t c = 0; c < nhwc[3]; c++) {
                    int64_t dst = ((b * nhwc[1] + h) * nhwc[2] + w) * nhwc[3] + c;
                    int64_t src =
                        p->c->nchw ? ((b * nhwc[3] + c) * nhwc[1] + h) * nhwc[2] + w : dst;
                    v[dst] = laid[src];
                }
    free(bits);
    free(laid);
    return v;
}

typedef struct results {
    float *y, *dx, *dw;
} results;

/* The three ops with the current algorithm, level and thread count. */
static results run_ops(const problem *p) {
    const conv_case *c = p->c;
    eg_scope_begin();
    int64_t xs[4] = {c->b, c->h, c->w, c->c}, xt[4];
    tensor_shape(p, xs, xt);
    eg_tensor *x;
    if (c->transposed_view) { /* NHWC x as the transposed view of a (B, W, H, C) tensor */
        float *t = malloc(p->nx * sizeof *t);
        assert_non_null(t);
        int64_t ts[4] = {c->b, c->w, c->h, c->c};
        for (int64_t b = 0; b < c->b; b++)
            for (int64_t i = 0; i < c->w; i++)
                for (int64_t j = 0; j < c->h; j++)
                    for (int64_t ch = 0; ch < c->c; ch++)
                        t[((b * c->w + i) * c->h + j) * c->c + ch] =
                            p->x[((b * c->h + j) * c->w + i) * c->c + ch];
        x = eg_transpose(image_tensor(p, t, ts), 1, 2);
        free(t);
    } else {
        x = image_tensor(p, p->x, xs);
    }
    int64_t ws[4] = {c->kh, c->kw, c->c / c->groups, c->o};
    uint16_t *wbits = malloc(p->nw * sizeof *wbits);
    assert_non_null(wbits);
    to_format(p->f, p->w, wbits, p->nw);
    eg_tensor *w = eg_tensor_from_data(wbits, p->f->dtype, 4, ws);
    free(wbits);
    eg_tensor *dy = image_tensor(p, p->dy, p->ys);
    results r;
    r.y = image_values(p, eg_conv2d(x, w, &p->options), p->ys);
    r.dx = image_values(p, eg_conv2d_transpose(dy, w, xt, &p->options), xs);
    const eg_tensor *in[2] = {x, dy};
    eg_tensor *dw = eg__execute(EG__OP_CONV2D_BACKWARD_FILTER, 2, in, &p->attrs);
    int64_t wn[4] = {1, 1, 1, (int64_t)p->nw};
    problem flat = *p;
    flat.c = &(conv_case){.nchw = false};
    r.dw = image_values(&flat, dw, wn);
    assert_int_equal(eg_scope_end(), EG_OK);
    return r;
}

static void results_free(results *r) {
    free(r->y);
    free(r->dx);
    free(r->dw);
}

static void check_close(const problem *p, const char *what, const char *route, const float *got,
                        const double *want, const double *abs_sum, size_t n, double terms) {
    double u = p->f->u;
    for (size_t i = 0; i < n; i++) {
        double e = (terms + 2) * 0x1p-24 * abs_sum[i];
        double tolerance = e * (1 + u) + u * fabs(want[i]) + p->f->floor;
        if (!(fabs((double)got[i] - want[i]) <= tolerance)) {
            print_error("%s, %s, %s: %s[%zu] = %.9g, reference %.9g (bound %.3g)\n", p->c->name,
                        eg_dtype_name(p->f->dtype), route, what, i, (double)got[i], want[i],
                        tolerance);
            fail();
        }
    }
}

static void check_results(const problem *p, const results *r, const char *route) {
    const conv_case *c = p->c;
    double cg = (double)(c->c / c->groups), og = (double)(c->o / c->groups);
    double taps = (double)(c->kh * c->kw);
    check_close(p, "y", route, r->y, p->y, p->y_abs, p->ny, taps * cg);
    check_close(p, "dx", route, r->dx, p->dx, p->dx_abs, p->nx, taps * og);
    check_close(p, "dw", route, r->dw, p->dw, p->dw_abs, p->nw,
                (double)(p->ys[0] * p->ys[1] * p->ys[2]));
}

static void check_same(const problem *p, const char *what, int threads, const float *a,
                       const float *b, size_t n) {
    if (memcmp(a, b, n * sizeof *a) != 0) {
        print_error("%s, %s: %s differs between 1 and %d threads\n", p->c->name,
                    eg_dtype_name(p->f->dtype), what, threads);
        fail();
    }
}

static void check_same_as(const problem *p, const char *what, int algorithm, int threads,
                          const float *want, const float *got, size_t n) {
    if (memcmp(want, got, n * sizeof *got) != 0) {
        print_error("%s, %s: %s with algorithm %d and %d thread(s) differs from the widened "
                    "copies\n",
                    p->c->name, eg_dtype_name(p->f->dtype), what, algorithm, threads);
        fail();
    }
}

/* Every case in format f: the automatic choice (checked against the reference and for the same
 * bits with 2 and 3 threads), the f32 kernels on widened copies (with their choice and with
 * im2col + GEMM), and the f32 kernels reading the format, which must give the widened copies'
 * bits. */
static void test_format(const format *f) {
    int original_threads = eg_get_num_threads();
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        problem p;
        problem_init(&p, &cases[k], f);
        reference_compute(&p);
        assert_int_equal(eg_set_num_threads(1), EG_OK);
        results one = run_ops(&p);
        check_results(&p, &one, "automatic");
        for (int threads = 2; threads <= 3; threads++) {
            assert_int_equal(eg_set_num_threads(threads), EG_OK);
            results many = run_ops(&p);
            check_same(&p, "y", threads, one.y, many.y, p.ny);
            check_same(&p, "dx", threads, one.dx, many.dx, p.nx);
            check_same(&p, "dw", threads, one.dw, many.dw, p.nw);
            results_free(&many);
        }
        assert_int_equal(eg_set_num_threads(1), EG_OK);
        eg__conv_set_algorithm(1);
        results im2col = run_ops(&p);
        check_results(&p, &im2col, "widened, im2col + GEMM");
        results_free(&im2col);
        eg__conv_set_algorithm(8);
        results wide = run_ops(&p);
        check_results(&p, &wide, "widened copies");
        /* the f32 kernels reading the format (7: their choice; 4, 5: AVX2, AVX-512 forced) sum
         * the same values in the same order as on widened copies */
        static const int fused[3] = {7, 4, 5};
        for (int a = 0; a < 3; a++)
            for (int threads = 1; threads <= 2; threads++) {
                assert_int_equal(eg_set_num_threads(threads), EG_OK);
                eg__conv_set_algorithm(fused[a]);
                results r = run_ops(&p);
                check_same_as(&p, "y", fused[a], threads, wide.y, r.y, p.ny);
                check_same_as(&p, "dx", fused[a], threads, wide.dx, r.dx, p.nx);
                check_same_as(&p, "dw", fused[a], threads, wide.dw, r.dw, p.nw);
                results_free(&r);
            }
        eg__conv_set_algorithm(0);
        results_free(&wide);
        results_free(&one);
        problem_free(&p);
    }
    assert_int_equal(eg_set_num_threads(original_threads), EG_OK);
}

static void test_bf16(void **state) {
    (void)state;
    test_format(&formats[0]);
}

static void test_f16(void **state) {
    (void)state;
    test_format(&formats[1]);
}

/* An infinite input reaches exactly the outputs whose window holds it: y and dw are finite where
 * the reference is. (The AMX filter gradient would multiply it by the zero dy of a dropped column;
 * conv_amx.c reports it and the f32 route runs instead.) */
static void test_infinite_input(void **state) {
    (void)state;
    static const conv_case cnn = {"conv2's channels, an infinite input",
                                  2,
                                  8,
                                  9,
                                  32,
                                  3,
                                  3,
                                  32,
                                  {1, 1},
                                  {1, 1},
                                  1,
                                  SAME,
                                  {0},
                                  false,
                                  false};
    static const conv_case one = {"one channel, an infinite input",
                                  2,
                                  8,
                                  9,
                                  1,
                                  3,
                                  3,
                                  32,
                                  {1, 1},
                                  {1, 1},
                                  1,
                                  SAME,
                                  {0},
                                  false,
                                  false};
    const conv_case *list[2] = {&cnn, &one};
    for (int k = 0; k < 2; k++) {
        problem p;
        problem_init(&p, list[k], &formats[0]);
        /* column 0 of row 3, image 1: read by the taps j = 0 and 1 only */
        p.x[((1 * p.c->h + 3) * p.c->w + 0) * p.c->c + p.c->c / 2] = INFINITY;
        reference_compute(&p);
        results r = run_ops(&p);
        const float *got[2] = {r.y, r.dw};
        const double *want[2] = {p.y, p.dw};
        size_t n[2] = {p.ny, p.nw};
        int finite_want = 0;
        for (int o = 0; o < 2; o++)
            for (size_t i = 0; i < n[o]; i++) {
                finite_want += isfinite(want[o][i]);
                if (isfinite(got[o][i]) != isfinite(want[o][i])) {
                    print_error("%s: %s[%zu] = %g, reference %g\n", p.c->name, o ? "dw" : "y", i,
                                (double)got[o][i], want[o][i]);
                    fail();
                }
            }
        assert_true(finite_want > 0);
        results_free(&r);
        problem_free(&p);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_f16),
        cmocka_unit_test(test_infinite_input),
    };
    const char *reason = NULL;
    bool amx = eg__cpu_amx_usable(&reason);
    print_message("[ INFO     ] CPU path %s; AMX %s (%s)\n",
                  eg__cpu_level_name(eg__cpu_active_level()),
                  amx && eg__cpu_active_level() == EG__CPU_AVX512 ? "used" : "not used", reason);
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    eg_shutdown();
    return failed;
}
