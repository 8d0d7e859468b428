/* The int8 ops' cases (rows in op_cases.c's table): the calls into Eagle and their references.
 * The references quantize as eagle/approx.h specifies, in the same float steps (a float
 * division for the weights' levels, x times the reciprocal of the activation's scale), sum the
 * integers exactly and apply the scales in doubles, so they differ from Eagle's only in the
 * epilogue's last bits. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "api/internal.h"
#include "eagle/approx.h"
#include "op_reference.h"

/* ---- quantization, shared by the references ---- */

/* The weights' scales (one per last-axis slice) and levels, as eg_quantize_int8 computes. */
static void quantize_weights(const oc_ref *w, int bits, double *scale, double *levels) {
    int64_t channels = w->shape[w->n_dims - 1];
    float largest = (float)((1 << (bits - 1)) - 1);
    for (int64_t j = 0; j < channels; j++) {
        float peak = 0;
        for (int64_t i = j; i < w->n_elems; i += channels)
            peak = fabsf((float)w->data[i]) > peak ? fabsf((float)w->data[i]) : peak;
        scale[j] = peak > 0 ? peak / largest : 1.0f;
    }
    for (int64_t i = 0; i < w->n_elems; i++) {
        float v = nearbyintf((float)w->data[i] / (float)scale[i % channels]);
        levels[i] = v > largest ? largest : v < -largest ? -largest : v;
    }
}

typedef struct activation {
    float scale;
    double zero;
} activation;

static activation activation_of(float lo, float hi) {
    lo = lo < 0 ? lo : 0;
    hi = hi > 0 ? hi : 0;
    if (hi - lo <= 0) return (activation){1, 0};
    float scale = (float)(((double)hi - lo) / 255.0);
    double zero = (double)lrint(-(double)lo / scale);
    return (activation){scale, zero < 0 ? 0 : zero > 255 ? 255 : zero};
}

static activation activation_of_ref(const oc_ref *x) {
    float lo = 0, hi = 0;
    for (int64_t i = 0; i < x->n_elems; i++) {
        lo = (float)x->data[i] < lo ? (float)x->data[i] : lo;
        hi = (float)x->data[i] > hi ? (float)x->data[i] : hi;
    }
    return activation_of(lo, hi);
}

/* The activation's level minus its zero point: what the integer sums multiply. */
static double centered(activation a, double x) {
    float v = (float)x * (1.0f / a.scale) + (float)a.zero;
    v = v > 255 ? 255 : v < 0 ? 0 : v;
    return nearbyintf(v) - a.zero;
}

static double activate(int64_t activation_kind, double s) {
    switch (activation_kind) {
    case 1:
        return s > 0 ? s : 0;
    case 2:
        return 1 / (1 + exp(-s));
    case 3:
        return tanh(s);
    default:
        return s;
    }
}

/* ---- quantize_int8: p[0] bits ---- */

int oc_apply_quantize_int8(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    out[0] = eg_quantize_int8(in[0], (int)c->p[0], &out[1]);
    return out[0] ? 2 : -1;
}

int oc_ref_quantize_int8(const oc_case *c, const oc_ref *in, oc_ref *out) {
    int64_t channels = in[0].shape[in[0].n_dims - 1];
    oc_ref_init(&out[0], EG_DTYPE_I8, in[0].n_dims, in[0].shape);
    oc_ref_init(&out[1], EG_DTYPE_F32, 1, &channels);
    quantize_weights(&in[0], (int)c->p[0], out[1].data, out[0].data);
    return 2;
}

/* ---- dense_int8: p[0] activation, p[1] bits, p[2] 1 with a bias (in[2]), p[3] 1 with the
 * calibrated range [d[0], d[1]] ---- */

/* On like's device (the walk of devices puts the inputs on each in turn). */
static eg_tensor *range_of(const oc_case *c, const eg_tensor *like) {
    const float range[2] = {(float)c->d[0], (float)c->d[1]};
    eg_tensor *host = eg_tensor_from_data(range, EG_DTYPE_F32, 1, (const int64_t[]){2});
    eg_tensor *there = host ? eg_tensor_to(host, eg_tensor_device(like)) : NULL;
    eg_release(host);
    return there;
}

int oc_apply_dense_int8(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    eg_tensor *scale = NULL;
    eg_tensor *q = eg_quantize_int8(in[1], (int)c->p[1], &scale);
    eg_tensor *range = c->p[3] ? range_of(c, in[0]) : NULL;
    out[0] =
        q ? eg_dense_int8(in[0], q, scale, c->p[2] ? in[2] : NULL, range, (eg_activation)c->p[0])
          : NULL;
    eg_release(q);
    eg_release(scale);
    eg_release(range);
    return out[0] ? 1 : -1;
}

int oc_ref_dense_int8(const oc_case *c, const oc_ref *in, oc_ref *out) {
    const oc_ref *x = &in[0], *w = &in[1];
    int64_t m = x->shape[0], k = x->shape[1], n = w->shape[1];
    static double scale[OC_MAX_ELEMS], levels[OC_MAX_ELEMS];
    quantize_weights(w, (int)c->p[1], scale, levels);
    activation a = c->p[3] ? activation_of((float)c->d[0], (float)c->d[1]) : activation_of_ref(x);
    oc_ref_init(out, EG_DTYPE_F32, 2, (const int64_t[]){m, n});
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double sum = 0; /* integers: exact in a double */
            for (int64_t p = 0; p < k; p++)
                sum += centered(a, x->data[i * k + p]) * levels[p * n + j];
            double v = sum * a.scale * scale[j] + (c->p[2] ? in[2].data[j] : 0);
            out->data[i * n + j] = activate(c->p[0], v);
        }
    return 1;
}

/* ---- conv2d_int8: p[0] stride, p[1..4] explicit padding (top, bottom, left, right) ---- */

static eg_conv2d_options conv_options(const oc_case *c) {
    eg_conv2d_options o = {0};
    o.strides[0] = o.strides[1] = (int)c->p[0];
    o.padding = EG_PADDING_EXPLICIT;
    for (int i = 0; i < 4; i++) o.explicit_padding[i] = c->p[1 + i];
    return o;
}

int oc_apply_conv2d_int8(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    eg_tensor *scale = NULL;
    eg_tensor *q = eg_quantize_int8(in[1], 7, &scale);
    eg_conv2d_options o = conv_options(c);
    out[0] = q ? eg_conv2d_int8(in[0], q, scale, NULL, &o) : NULL;
    eg_release(q);
    eg_release(scale);
    return out[0] ? 1 : -1;
}

int oc_ref_conv2d_int8(const oc_case *c, const oc_ref *in, oc_ref *out) {
    const oc_ref *x = &in[0], *w = &in[1];
    int64_t batch = x->shape[0], h = x->shape[1], wd = x->shape[2], ch = x->shape[3];
    int64_t kh = w->shape[0], kw = w->shape[1], o = w->shape[3], s = c->p[0];
    int64_t oh = (h + c->p[1] + c->p[2] - kh) / s + 1, ow = (wd + c->p[3] + c->p[4] - kw) / s + 1;
    static double scale[OC_MAX_ELEMS], levels[OC_MAX_ELEMS];
    quantize_weights(w, 7, scale, levels);
    activation a = activation_of_ref(x);
    oc_ref_init(out, EG_DTYPE_F32, 4, (const int64_t[]){batch, oh, ow, o});
    for (int64_t b = 0; b < batch; b++)
        for (int64_t i = 0; i < oh; i++)
            for (int64_t j = 0; j < ow; j++)
                for (int64_t f = 0; f < o; f++) {
                    double sum = 0;
                    for (int64_t p = 0; p < kh; p++)
                        for (int64_t q = 0; q < kw; q++) {
                            int64_t y = i * s + p - c->p[1], xx = j * s + q - c->p[3];
                            if (y < 0 || y >= h || xx < 0 || xx >= wd) continue; /* exact 0 */
                            for (int64_t k = 0; k < ch; k++)
                                sum += centered(a, x->data[((b * h + y) * wd + xx) * ch + k]) *
                                       levels[((p * kw + q) * ch + k) * o + f];
                        }
                    out->data[((b * oh + i) * ow + j) * o + f] = sum * a.scale * scale[f];
                }
    return 1;
}

/* ---- sample_indices (eg_matmul_sampled's draws) ---- */

/* The draws from |x| (zeros where x is 0) under the fixed seed p[0], p[1] of them: the op itself,
 * not eg_sample_indices, whose seed a traced function redraws at every call. */
int oc_apply_sample_indices(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    eg_tensor *weights = eg_abs(in[0]);
    eg__attrs attrs;
    memset(&attrs, 0, sizeof attrs);
    attrs.ints[0] = c->p[1];
    attrs.seed = (uint64_t)c->p[0];
    const eg_tensor *args[1] = {weights};
    eg_tensor *drawn = weights ? eg__execute(EG__OP_SAMPLE_INDICES, 1, args, &attrs) : NULL;
    eg_release(weights);
    return oc_one(drawn, out);
}

/* p[1] indices into x, none of a zero weight, and the draws spread as the weights are: each
 * index's count within 5 standard deviations of its expectation. */
bool oc_check_sample_indices(const oc_case *c, const oc_ref *in, int n_out, const oc_ref *out,
                             char *why, size_t why_size) {
    const oc_ref *x = &in[0];
    int64_t draws = c->p[1];
    if (n_out != 1 || out->dtype != EG_DTYPE_I64 || out->n_dims != 1 || out->n_elems != draws) {
        snprintf(why, why_size, "sample_indices: not %lld i64 indices", (long long)draws);
        return false;
    }
    double total = 0;
    for (int64_t l = 0; l < x->n_elems; l++) total += fabs(x->data[l]);
    static int64_t counts[OC_MAX_ELEMS];
    memset(counts, 0, sizeof counts);
    for (int64_t t = 0; t < draws; t++) {
        double v = out->data[t];
        int64_t l = (int64_t)v;
        if (v != (double)l || l < 0 || l >= x->n_elems || (total > 0 && x->data[l] == 0)) {
            snprintf(why, why_size, "sample_indices: draw %lld is %g, of weight %g", (long long)t,
                     v, l >= 0 && l < x->n_elems ? fabs(x->data[l]) : -1.0);
            return false;
        }
        counts[l]++;
    }
    for (int64_t l = 0; l < x->n_elems; l++) {
        double p = total > 0 ? fabs(x->data[l]) / total : 1.0 / (double)x->n_elems;
        double expected = p * (double)draws, sigma = sqrt((double)draws * p * (1 - p));
        if (fabs((double)counts[l] - expected) > 5 * sigma + 1) {
            snprintf(why, why_size, "sample_indices: index %lld drawn %lld times, expected %.1f",
                     (long long)l, (long long)counts[l], expected);
            return false;
        }
    }
    return true;
}
