/* Plain-C references for the op cases of the layers' ops: convolution, pooling, resizing and
 * padding of images, dense, normalization (the rest is in op_reference.c; the same rules: every
 * expected value computed in doubles from the input values, without calling Eagle). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "eagle/nn.h"
#include "op_cases.h"
#include "op_reference.h"

/* ---- convolution and pooling: naive direct loops ---- */

/* An image shape's (n, h, w, c) in the layout; index of an element. */
typedef struct ref_image {
    int64_t n, h, w, c;
    bool first;
} ref_image;

static ref_image ref_image_of(const int64_t *shape, bool first) {
    ref_image r = {shape[0], shape[1], shape[2], shape[3], first};
    if (first) r = (ref_image){shape[0], shape[2], shape[3], shape[1], first};
    return r;
}

static int64_t ref_at(const ref_image *r, int64_t b, int64_t h, int64_t w, int64_t c) {
    return r->first ? ((b * r->c + c) * r->h + h) * r->w + w
                    : ((b * r->h + h) * r->w + w) * r->c + c;
}

static void ref_image_shape(ref_image r, int64_t *shape) {
    shape[0] = r.n;
    shape[1] = r.first ? r.c : r.h;
    shape[2] = r.first ? r.h : r.w;
    shape[3] = r.first ? r.w : r.c;
}

/* The window parameters of a case (see op_cases.c), padding resolved for an in_h x in_w input
 * and a kh x kw window. */
typedef struct ref_window {
    int64_t kh, kw, sh, sw, dh, dw, groups, pad[4];
    bool first;
} ref_window;

static ref_window ref_window_of(const oc_case *c, bool pool, int64_t in_h, int64_t in_w, int64_t kh,
                                int64_t kw) {
    ref_window r = {.kh = kh, .kw = kw, .dh = 1, .dw = 1, .groups = 1, .first = c->p[5] / 10 == 1};
    if (pool) {
        r.sh = c->p[2] ? c->p[2] : kh;
        r.sw = c->p[3] ? c->p[3] : kw;
    } else {
        r.sh = c->p[0] ? c->p[0] : 1;
        r.sw = c->p[1] ? c->p[1] : 1;
        r.dh = c->p[2] ? c->p[2] : 1;
        r.dw = c->p[3] ? c->p[3] : 1;
        r.groups = c->p[4] ? c->p[4] : 1;
    }
    int padding = (int)(c->p[5] % 10);
    const int64_t in[2] = {in_h, in_w}, k[2] = {kh, kw}, s[2] = {r.sh, r.sw}, d[2] = {r.dh, r.dw};
    for (int a = 0; a < 2; a++) {
        if (padding == EG_PADDING_EXPLICIT) {
            r.pad[2 * a] = c->p[6 + 2 * a];
            r.pad[2 * a + 1] = c->p[7 + 2 * a];
        } else if (padding == EG_PADDING_SAME) {
            int64_t out = (in[a] + s[a] - 1) / s[a];
            int64_t total = (out - 1) * s[a] + d[a] * (k[a] - 1) + 1 - in[a];
            if (total < 0) total = 0;
            r.pad[2 * a] = total / 2;
            r.pad[2 * a + 1] = total - total / 2;
        }
    }
    return r;
}

static int64_t ref_out_size(int64_t in, int64_t k, int64_t s, int64_t d, int64_t before,
                            int64_t after) {
    return (in + before + after - d * (k - 1) - 1) / s + 1;
}

/* y = conv(x, w) for x image shape xi; fills yi. */
static void ref_conv_forward(const ref_window *win, const ref_image *xi, const double *x,
                             const oc_ref *w, ref_image *yi, double *y) {
    int64_t kh = w->shape[0], kw = w->shape[1], cg = w->shape[2], o_n = w->shape[3];
    int64_t og = o_n / win->groups;
    *yi = (ref_image){xi->n, ref_out_size(xi->h, kh, win->sh, win->dh, win->pad[0], win->pad[1]),
                      ref_out_size(xi->w, kw, win->sw, win->dw, win->pad[2], win->pad[3]), o_n,
                      xi->first};
    for (int64_t b = 0; b < yi->n; b++)
        for (int64_t oh = 0; oh < yi->h; oh++)
            for (int64_t ow = 0; ow < yi->w; ow++)
                for (int64_t o = 0; o < o_n; o++) {
                    double sum = 0;
                    int64_t group = o / og;
                    for (int64_t i = 0; i < kh; i++)
                        for (int64_t j = 0; j < kw; j++)
                            for (int64_t c = 0; c < cg; c++) {
                                int64_t ih = oh * win->sh - win->pad[0] + i * win->dh;
                                int64_t iw = ow * win->sw - win->pad[2] + j * win->dw;
                                if (ih < 0 || ih >= xi->h || iw < 0 || iw >= xi->w) continue;
                                sum += x[ref_at(xi, b, ih, iw, group * cg + c)] *
                                       w->data[((i * kw + j) * cg + c) * o_n + o];
                            }
                    y[ref_at(yi, b, oh, ow, o)] = sum;
                }
}

int oc_ref_conv2d(const oc_case *c, const oc_ref *in, oc_ref *out) {
    const oc_ref *x = &in[0], *w = &in[1];
    ref_image xi = ref_image_of(x->shape, c->p[5] / 10 == 1), yi;
    ref_window win = ref_window_of(c, false, xi.h, xi.w, w->shape[0], w->shape[1]);
    static double y[OC_MAX_ELEMS * 4];
    ref_conv_forward(&win, &xi, x->data, w, &yi, y);
    int64_t shape[4];
    ref_image_shape(yi, shape);
    oc_ref_init(out, x->dtype, 4, shape);
    memcpy(out->data, y, sizeof(double) * (size_t)out->n_elems);
    return 1;
}

/* dx[b, ih, iw, c] = sum of dy[b, oh, ow, o] * w[i, j, c', o] over the taps that read it. */
int oc_ref_conv2d_transpose(const oc_case *c, const oc_ref *in, oc_ref *out) {
    const oc_ref *dy = &in[0], *w = &in[1];
    bool first = c->p[5] / 10 == 1;
    ref_image yi = ref_image_of(dy->shape, first);
    int64_t kh = w->shape[0], kw = w->shape[1], cg = w->shape[2], o_n = w->shape[3];
    int64_t groups = c->p[4] ? c->p[4] : 1, og = o_n / groups;
    int64_t sh = c->p[0] ? c->p[0] : 1, sw = c->p[1] ? c->p[1] : 1;
    int64_t dh = c->p[2] ? c->p[2] : 1, dw = c->p[3] ? c->p[3] : 1;
    int padding = (int)(c->p[5] % 10);
    int64_t out_h = (int64_t)c->d[0], out_w = (int64_t)c->d[1];
    if (c->d[0] <= 0) {
        out_h = padding == EG_PADDING_SAME ? yi.h * sh : (yi.h - 1) * sh + dh * (kh - 1) + 1;
        out_w = padding == EG_PADDING_SAME ? yi.w * sw : (yi.w - 1) * sw + dw * (kw - 1) + 1;
        if (padding == EG_PADDING_EXPLICIT) {
            out_h -= c->p[6] + c->p[7];
            out_w -= c->p[8] + c->p[9];
        }
    }
    ref_image xi = {yi.n, out_h, out_w, cg * groups, first};
    ref_window win = ref_window_of(c, false, out_h, out_w, kh, kw);
    int64_t shape[4];
    ref_image_shape(xi, shape);
    oc_ref_init(out, dy->dtype, 4, shape);
    for (int64_t b = 0; b < yi.n; b++)
        for (int64_t oh = 0; oh < yi.h; oh++)
            for (int64_t ow = 0; ow < yi.w; ow++)
                for (int64_t o = 0; o < o_n; o++)
                    for (int64_t i = 0; i < kh; i++)
                        for (int64_t j = 0; j < kw; j++)
                            for (int64_t cc = 0; cc < cg; cc++) {
                                int64_t ih = oh * win.sh - win.pad[0] + i * win.dh;
                                int64_t iw = ow * win.sw - win.pad[2] + j * win.dw;
                                if (ih < 0 || ih >= xi.h || iw < 0 || iw >= xi.w) continue;
                                out->data[ref_at(&xi, b, ih, iw, o / og * cg + cc)] +=
                                    dy->data[ref_at(&yi, b, oh, ow, o)] *
                                    w->data[((i * kw + j) * cg + cc) * o_n + o];
                            }
    return 1;
}

/* dw[i, j, c', o] = sum over images and output pixels of x at the tap times dy. */
int oc_ref_conv2d_backward_filter(const oc_case *c, const oc_ref *in, oc_ref *out) {
    const oc_ref *x = &in[0], *dy = &in[1];
    bool first = c->p[5] / 10 == 1;
    ref_image xi = ref_image_of(x->shape, first), yi = ref_image_of(dy->shape, first);
    int64_t kh = (int64_t)c->d[0], kw = (int64_t)c->d[1];
    ref_window win = ref_window_of(c, false, xi.h, xi.w, kh, kw);
    int64_t cg = xi.c / win.groups, o_n = yi.c, og = o_n / win.groups;
    int64_t shape[4] = {kh, kw, cg, o_n};
    oc_ref_init(out, x->dtype, 4, shape);
    for (int64_t i = 0; i < kh; i++)
        for (int64_t j = 0; j < kw; j++)
            for (int64_t cc = 0; cc < cg; cc++)
                for (int64_t o = 0; o < o_n; o++) {
                    double sum = 0;
                    for (int64_t b = 0; b < xi.n; b++)
                        for (int64_t oh = 0; oh < yi.h; oh++)
                            for (int64_t ow = 0; ow < yi.w; ow++) {
                                int64_t ih = oh * win.sh - win.pad[0] + i * win.dh;
                                int64_t iw = ow * win.sw - win.pad[2] + j * win.dw;
                                if (ih < 0 || ih >= xi.h || iw < 0 || iw >= xi.w) continue;
                                sum += x->data[ref_at(&xi, b, ih, iw, o / og * cg + cc)] *
                                       dy->data[ref_at(&yi, b, oh, ow, o)];
                            }
                    out->data[((i * kw + j) * cg + cc) * o_n + o] = sum;
                }
    return 1;
}

/* max_pool2d, avg_pool2d, max_pool2d_argmax, max_pool2d_backward (x, dy) and
 * avg_pool2d_backward (dy; the input's (H, W) in d). */
int oc_ref_pool2d(const oc_case *c, const oc_ref *in, oc_ref *out) {
    bool first = c->p[5] / 10 == 1;
    int64_t kh = c->p[0] ? c->p[0] : 2, kw = c->p[1] ? c->p[1] : 2;
    bool avg_backward = c->op == EG__OP_AVG_POOL2D_BACKWARD;
    ref_image xi;
    if (avg_backward) {
        ref_image gi = ref_image_of(in[0].shape, first);
        xi = (ref_image){gi.n, (int64_t)c->d[0], (int64_t)c->d[1], gi.c, first};
    } else {
        xi = ref_image_of(in[0].shape, first);
    }
    ref_window win = ref_window_of(c, true, xi.h, xi.w, kh, kw);
    ref_image yi = {xi.n, ref_out_size(xi.h, kh, win.sh, 1, win.pad[0], win.pad[1]),
                    ref_out_size(xi.w, kw, win.sw, 1, win.pad[2], win.pad[3]), xi.c, first};
    int64_t shape[4];
    bool to_input = c->op == EG__OP_MAX_POOL2D_BACKWARD || avg_backward;
    ref_image_shape(to_input ? xi : yi, shape);
    oc_ref_init(out, c->op == EG__OP_MAX_POOL2D_ARGMAX ? EG_DTYPE_I64 : in[0].dtype, 4, shape);
    for (int64_t b = 0; b < yi.n; b++)
        for (int64_t oh = 0; oh < yi.h; oh++)
            for (int64_t ow = 0; ow < yi.w; ow++)
                for (int64_t ch = 0; ch < yi.c; ch++) {
                    double best = -INFINITY, sum = 0;
                    int64_t best_at = -1, count = 0;
                    for (int64_t i = 0; i < kh; i++)
                        for (int64_t j = 0; j < kw; j++) {
                            int64_t ih = oh * win.sh - win.pad[0] + i;
                            int64_t iw = ow * win.sw - win.pad[2] + j;
                            if (ih < 0 || ih >= xi.h || iw < 0 || iw >= xi.w) continue;
                            int64_t at = ref_at(&xi, b, ih, iw, ch);
                            count++;
                            if (avg_backward) continue;
                            sum += in[0].data[at];
                            if (in[0].data[at] > best) { /* strictly: the first max wins */
                                best = in[0].data[at];
                                best_at = at;
                            }
                        }
                    int64_t y_at = ref_at(&yi, b, oh, ow, ch);
                    switch (c->op) {
                    case EG__OP_MAX_POOL2D:
                        out->data[y_at] = best;
                        break;
                    case EG__OP_AVG_POOL2D:
                        out->data[y_at] = sum / (double)count;
                        break;
                    case EG__OP_MAX_POOL2D_ARGMAX:
                        out->data[y_at] = (double)best_at;
                        break;
                    case EG__OP_MAX_POOL2D_BACKWARD:
                        out->data[best_at] += in[1].data[y_at];
                        break;
                    default: /* avg_pool2d_backward */
                        for (int64_t i = 0; i < kh; i++)
                            for (int64_t j = 0; j < kw; j++) {
                                int64_t ih = oh * win.sh - win.pad[0] + i;
                                int64_t iw = ow * win.sw - win.pad[2] + j;
                                if (ih < 0 || ih >= xi.h || iw < 0 || iw >= xi.w) continue;
                                out->data[ref_at(&xi, b, ih, iw, ch)] +=
                                    in[0].data[y_at] / (double)count;
                            }
                        break;
                    }
                }
    return 1;
}

int oc_ref_global_avg_pool2d(const oc_case *c, const oc_ref *in, oc_ref *out) {
    bool first = c->p[0] == EG_DATA_FORMAT_NCHW, keep = c->p[1] != 0;
    ref_image xi = ref_image_of(in[0].shape, first);
    int64_t shape[4] = {xi.n, first ? xi.c : 1, 1, first ? 1 : xi.c};
    if (!keep) shape[1] = xi.c;
    oc_ref_init(out, in[0].dtype, keep ? 4 : 2, shape);
    for (int64_t b = 0; b < xi.n; b++)
        for (int64_t ch = 0; ch < xi.c; ch++) {
            double sum = 0;
            for (int64_t h = 0; h < xi.h; h++)
                for (int64_t w = 0; w < xi.w; w++) sum += in[0].data[ref_at(&xi, b, h, w, ch)];
            out->data[b * xi.c + ch] = sum / (double)(xi.h * xi.w);
        }
    return 1;
}

int oc_ref_upsample2d(const oc_case *c, const oc_ref *in, oc_ref *out) {
    bool first = c->p[2] == EG_DATA_FORMAT_NCHW;
    ref_image xi = ref_image_of(in[0].shape, first);
    ref_image yi = {xi.n, xi.h * c->p[0], xi.w * c->p[1], xi.c, first};
    int64_t shape[4];
    ref_image_shape(yi, shape);
    oc_ref_init(out, in[0].dtype, 4, shape);
    for (int64_t b = 0; b < yi.n; b++)
        for (int64_t h = 0; h < yi.h; h++)
            for (int64_t w = 0; w < yi.w; w++)
                for (int64_t ch = 0; ch < yi.c; ch++)
                    out->data[ref_at(&yi, b, h, w, ch)] =
                        in[0].data[ref_at(&xi, b, h / c->p[0], w / c->p[1], ch)];
    return 1;
}

int oc_ref_zero_padding2d(const oc_case *c, const oc_ref *in, oc_ref *out) {
    bool first = c->p[4] == EG_DATA_FORMAT_NCHW;
    ref_image xi = ref_image_of(in[0].shape, first);
    ref_image yi = {xi.n, xi.h + c->p[0] + c->p[1], xi.w + c->p[2] + c->p[3], xi.c, first};
    int64_t shape[4];
    ref_image_shape(yi, shape);
    oc_ref_init(out, in[0].dtype, 4, shape);
    for (int64_t b = 0; b < xi.n; b++)
        for (int64_t h = 0; h < xi.h; h++)
            for (int64_t w = 0; w < xi.w; w++)
                for (int64_t ch = 0; ch < xi.c; ch++)
                    out->data[ref_at(&yi, b, h + c->p[0], w + c->p[2], ch)] =
                        in[0].data[ref_at(&xi, b, h, w, ch)];
    return 1;
}

/* ---- normalization ---- */

/* activation(x · w + b), p[0] an eg_activation (none, relu, sigmoid, tanh) */
int oc_ref_dense(const oc_case *c, const oc_ref *in, oc_ref *out) {
    const oc_ref *x = &in[0], *w = &in[1], *b = &in[2];
    int64_t m = x->shape[0], k = x->shape[1], n = w->shape[1];
    int64_t shape[2] = {m, n};
    oc_ref_init(out, x->dtype, 2, shape);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0;
            for (int64_t p = 0; p < k; p++) s += x->data[i * k + p] * w->data[p * n + j];
            s += b->data[j];
            switch (c->p[0]) {
            case 1:
                s = s > 0 ? s : 0;
                break;
            case 2:
                s = 1 / (1 + exp(-s));
                break;
            case 3:
                s = tanh(s);
                break;
            default:
                break;
            }
            out->data[i * n + j] = s;
        }
    return 1;
}

int oc_ref_mul_add(const oc_case *c, const oc_ref *in, oc_ref *out) {
    (void)c;
    const oc_ref *ops[3] = {&in[0], &in[1], &in[2]};
    int n_dims;
    int64_t shape[EG_MAX_DIMS], index[EG_MAX_DIMS];
    oc_broadcast_shape(3, ops, &n_dims, shape);
    oc_ref_init(out, in[0].dtype, n_dims, shape);
    for (int64_t o = 0; o < out->n_elems; o++) {
        oc_unravel(n_dims, shape, o, index);
        out->data[o] =
            oc_broadcast_get(&in[0], n_dims, index) * oc_broadcast_get(&in[1], n_dims, index) +
            oc_broadcast_get(&in[2], n_dims, index);
    }
    return 1;
}

/* (x - mean) / sqrt(var + eps) * scale + offset, per channel (the axis the parameters vary
 * along, or given moments broadcast like numpy). */
int oc_ref_batch_norm(const oc_case *c, const oc_ref *in, oc_ref *out) {
    const oc_ref *x = &in[0];
    oc_ref_init(out, x->dtype, x->n_dims, x->shape);
    int64_t index[EG_MAX_DIMS];
    if (!c->p[0]) { /* given moments (x, mean, variance, offset, scale) */
        for (int64_t o = 0; o < x->n_elems; o++) {
            oc_unravel(x->n_dims, x->shape, o, index);
            double mean = oc_broadcast_get(&in[1], x->n_dims, index);
            double var = oc_broadcast_get(&in[2], x->n_dims, index);
            out->data[o] = (x->data[o] - mean) / sqrt(var + c->d[0]) *
                               oc_broadcast_get(&in[4], x->n_dims, index) +
                           oc_broadcast_get(&in[3], x->n_dims, index);
        }
        return 1;
    }
    int channel_axis = c->p[1] == EG_DATA_FORMAT_NCHW ? 1 : x->n_dims - 1;
    int64_t channels = x->shape[channel_axis], per = x->n_elems / channels;
    for (int64_t ch = 0; ch < channels; ch++) {
        double sum = 0, sq = 0;
        for (int64_t o = 0; o < x->n_elems; o++) {
            oc_unravel(x->n_dims, x->shape, o, index);
            if (index[channel_axis] == ch) sum += x->data[o];
        }
        double mean = sum / (double)per;
        for (int64_t o = 0; o < x->n_elems; o++) {
            oc_unravel(x->n_dims, x->shape, o, index);
            if (index[channel_axis] == ch) sq += (x->data[o] - mean) * (x->data[o] - mean);
        }
        double inv = 1 / sqrt(sq / (double)per + c->d[0]);
        for (int64_t o = 0; o < x->n_elems; o++) {
            oc_unravel(x->n_dims, x->shape, o, index);
            if (index[channel_axis] == ch)
                out->data[o] = (x->data[o] - mean) * inv * in[2].data[ch] + in[1].data[ch];
        }
    }
    return 1;
}

/* Over the last axis: inputs (x, scale, offset). */
int oc_ref_layer_norm(const oc_case *c, const oc_ref *in, oc_ref *out) {
    const oc_ref *x = &in[0];
    int64_t d = x->shape[x->n_dims - 1], rows = x->n_elems / d;
    oc_ref_init(out, x->dtype, x->n_dims, x->shape);
    for (int64_t r = 0; r < rows; r++) {
        const double *v = x->data + r * d;
        double mean = 0, var = 0;
        for (int64_t i = 0; i < d; i++) mean += v[i] / (double)d;
        for (int64_t i = 0; i < d; i++) var += (v[i] - mean) * (v[i] - mean) / (double)d;
        for (int64_t i = 0; i < d; i++)
            out->data[r * d + i] =
                (v[i] - mean) / sqrt(var + c->d[0]) * in[1].data[i] + in[2].data[i];
    }
    return 1;
}

/* The dtype of normalization statistics of x: f32 for bf16 / f16 x (ops/infer.c), else x's. */
static eg_dtype statistics_dtype(eg_dtype x) {
    return x == EG_DTYPE_BF16 || x == EG_DTYPE_F16 ? EG_DTYPE_F32 : x;
}

/* Two outputs: the mean and the population variance (p as for reductions). */
int oc_ref_moments(const oc_case *c, const oc_ref *in, oc_ref *out) {
    oc_case as = *c;
    as.op = EG__OP_MEAN;
    oc_ref_reduce(&as, in, &out[0]);
    as.op = EG__OP_VAR;
    oc_ref_reduce(&as, in, &out[1]);
    out[0].dtype = out[1].dtype = statistics_dtype(in[0].dtype);
    return 2;
}

/* y = (x - mean) / sqrt(var + eps) * scale + offset with x's own moments over the axes (p as for
 * reductions), then the moments themselves (keepdims); scale/offset broadcast like numpy. */
int oc_ref_batch_norm_training(const oc_case *c, const oc_ref *in, oc_ref *out) {
    oc_case as = *c;
    as.p[5] = 1; /* keepdims */
    as.op = EG__OP_MEAN;
    oc_ref_reduce(&as, in, &out[1]);
    as.op = EG__OP_VAR;
    oc_ref_reduce(&as, in, &out[2]);
    const oc_ref *x = &in[0];
    out[1].dtype = out[2].dtype = statistics_dtype(x->dtype);
    oc_ref_init(&out[0], x->dtype, x->n_dims, x->shape);
    int64_t index[EG_MAX_DIMS];
    for (int64_t o = 0; o < x->n_elems; o++) {
        oc_unravel(x->n_dims, x->shape, o, index);
        double mean = oc_broadcast_get(&out[1], x->n_dims, index);
        double var = oc_broadcast_get(&out[2], x->n_dims, index);
        out[0].data[o] =
            (x->data[o] - mean) / sqrt(var + c->d[0]) * oc_broadcast_get(&in[2], x->n_dims, index) +
            oc_broadcast_get(&in[1], x->n_dims, index);
    }
    return 3;
}

/* batch_norm_training's three outputs, the first clamped at 0 (relu). */
int oc_ref_batch_norm_relu(const oc_case *c, const oc_ref *in, oc_ref *out) {
    int n = oc_ref_batch_norm_training(c, in, out);
    for (int64_t o = 0; o < out[0].n_elems; o++)
        out[0].data[o] = out[0].data[o] > 0 ? out[0].data[o] : 0;
    return n;
}

/* g where x > 0, else 0 (broadcasting). */
int oc_ref_relu_backward(const oc_case *c, const oc_ref *in, oc_ref *out) {
    (void)c;
    const oc_ref *ops[2] = {&in[0], &in[1]};
    int n_dims;
    int64_t shape[EG_MAX_DIMS], index[EG_MAX_DIMS];
    oc_broadcast_shape(2, ops, &n_dims, shape);
    oc_ref_init(out, in[0].dtype, n_dims, shape);
    for (int64_t o = 0; o < out->n_elems; o++) {
        oc_unravel(n_dims, shape, o, index);
        out->data[o] = oc_broadcast_get(&in[0], n_dims, index) > 0
                           ? oc_broadcast_get(&in[1], n_dims, index)
                           : 0;
    }
    return 1;
}

/* Index of x's element (index) in a kept-shaped (keepdims) tensor of shape kept. */
static int64_t kept_flat(int n_dims, const int64_t *kept, const int64_t *index) {
    int64_t k[EG_MAX_DIMS];
    for (int d = 0; d < n_dims; d++) k[d] = kept[d] == 1 ? 0 : index[d];
    return oc_ravel(n_dims, kept, k);
}

/* With relu (p[8]) g where batch norm's pre-activation (x - mean) / sqrt(variance + d[0]) scale
 * + offset > 0, else 0 (into *masked); the others kept-shaped. */
static const oc_ref *relu_masked(const oc_case *c, const oc_ref *g, const oc_ref *x,
                                 const oc_ref *m, const oc_ref *v, const oc_ref *scale,
                                 const oc_ref *offset, oc_ref *masked) {
    if (c->p[8] != EG_ACTIVATION_RELU) return g;
    *masked = *g;
    int64_t index[EG_MAX_DIMS];
    for (int64_t o = 0; o < g->n_elems; o++) {
        oc_unravel(x->n_dims, x->shape, o, index);
        int64_t k = kept_flat(x->n_dims, m->shape, index);
        double z = (x->data[o] - m->data[k]) / sqrt(v->data[k] + c->d[0]) * scale->data[k] +
                   offset->data[k];
        masked->data[o] = z > 0 ? g->data[o] : 0;
    }
    return masked;
}

/* inputs (g, x, mean[, variance, scale, offset]) -> (2, kept): [sum g, sum g (x - mean)] over
 * the axes mean has as 1 (g masked with relu) */
int oc_ref_batch_norm_backward_sums(const oc_case *c, const oc_ref *in, oc_ref *out) {
    static oc_ref masked;
    const oc_ref *g = relu_masked(c, &in[0], &in[1], &in[2], &in[3], &in[4], &in[5], &masked),
                 *x = &in[1], *m = &in[2];
    int64_t shape[EG_MAX_DIMS + 1] = {2}, index[EG_MAX_DIMS];
    memcpy(shape + 1, m->shape, sizeof(int64_t) * (size_t)m->n_dims);
    oc_ref_init(out, statistics_dtype(x->dtype), m->n_dims + 1, shape);
    for (int64_t i = 0; i < out->n_elems; i++) out->data[i] = 0;
    for (int64_t o = 0; o < x->n_elems; o++) {
        oc_unravel(x->n_dims, x->shape, o, index);
        int64_t k = kept_flat(x->n_dims, m->shape, index);
        out->data[k] += g->data[o];
        out->data[m->n_elems + k] += g->data[o] * (x->data[o] - m->data[k]);
    }
    return 1;
}

/* inputs (g, x, mean, variance, scale, sums[, offset]) -> dx = k (g - sg / N - (x - m) r^2 sgx
 * / N) with r = 1 / sqrt(variance + d[0]), k = scale r, (sg, sgx) = sums, N = elements per kept
 * one (g masked with relu) */
int oc_ref_batch_norm_backward_input(const oc_case *c, const oc_ref *in, oc_ref *out) {
    static oc_ref masked;
    const oc_ref *g = relu_masked(c, &in[0], &in[1], &in[2], &in[3], &in[4], &in[6], &masked),
                 *x = &in[1], *m = &in[2], *v = &in[3], *scale = &in[4], *sums = &in[5];
    int64_t index[EG_MAX_DIMS];
    double n = (double)x->n_elems / (double)m->n_elems;
    oc_ref_init(out, x->dtype, x->n_dims, x->shape);
    for (int64_t o = 0; o < x->n_elems; o++) {
        oc_unravel(x->n_dims, x->shape, o, index);
        int64_t k = kept_flat(x->n_dims, m->shape, index);
        double r = 1 / sqrt(v->data[k] + c->d[0]);
        double sg = sums->data[k], sgx = sums->data[m->n_elems + k];
        out->data[o] = scale->data[k] * r *
                       (g->data[o] - sg / n - (x->data[o] - m->data[k]) * r * r * sgx / n);
    }
    return 1;
}
