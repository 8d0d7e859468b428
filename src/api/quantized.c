/* The int8 ops of eagle/approx.h: the quantization of weights composed of recorded ops (so it
 * runs on any device and in every mode), the products handed to their ops. */
#include <string.h>

#include "api/internal.h"
#include "base/error.h"
#include "eagle/approx.h"

eg_tensor *eg_quantize_int8(const eg_tensor *w, int bits, eg_tensor **scale) {
    if (scale) *scale = NULL;
    if (!scale) {
        eg__error(EG_ERR_NULL_ARGUMENT, "quantize_int8: scale is NULL");
        return NULL;
    }
    if (!eg__check_arg(w, "quantize_int8", 0)) return NULL;
    if (bits < 2 || bits > 8) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "quantize_int8: bits %d is not in [2, 8]", bits);
        return NULL;
    }
    if (w->dtype != EG_DTYPE_F32 || w->n_dims < 1) {
        eg__error(EG_ERR_DTYPE, "quantize_int8: the weight must be f32 with an axis, got %s %d-d",
                  eg_dtype_name(w->dtype), w->n_dims);
        return NULL;
    }
    const double largest = (double)((1 << (bits - 1)) - 1);
    int axes[EG_MAX_DIMS];
    for (int d = 0; d + 1 < w->n_dims; d++) axes[d] = d;
    eg_scope_begin();
    eg_tensor *peak = w->n_dims > 1 ? eg_max(eg_abs(w), w->n_dims - 1, axes, false) : eg_abs(w);
    /* constants made like peak: on its device */
    eg_tensor *step = eg_div(peak, eg_full_like(peak, largest));
    eg_tensor *s = eg_where(eg_greater(peak, eg_full_like(peak, 0)), step, eg_full_like(peak, 1));
    eg_tensor *q = NULL;
    if (s) {
        eg__attrs attrs;
        memset(&attrs, 0, sizeof attrs);
        attrs.ints[0] = (int64_t)largest;
        const eg_tensor *in[2] = {w, s};
        q = eg__execute(EG__OP_QUANTIZE_INT8, 2, in, &attrs);
    }
    if (q) {
        eg_scope_keep(q);
        eg_scope_keep(s);
        *scale = s;
    }
    eg_scope_end();
    return q;
}

eg_tensor *eg_int8_range(const eg_tensor *x) {
    if (!eg__check_arg(x, "int8_range", 0)) return NULL;
    const int64_t one = 1;
    eg_scope_begin();
    eg_tensor *lo = eg_min(x, 0, NULL, false), *hi = eg_max(x, 0, NULL, false);
    eg_tensor *zero = eg_full_like(lo, 0); /* on x's device */
    eg_tensor *parts[2] = {
        eg_reshape(eg_minimum(lo, zero), 1, &one),
        eg_reshape(eg_maximum(hi, zero), 1, &one),
    };
    eg_tensor *range = parts[0] && parts[1] ? eg_concat(2, parts, 0) : NULL;
    if (range) eg_scope_keep(range);
    eg_scope_end();
    return range;
}

eg_tensor *eg_int8_range_merge(const eg_tensor *a, const eg_tensor *b) {
    if (!eg__check_arg(a, "int8_range_merge", 0) || !eg__check_arg(b, "int8_range_merge", 1))
        return NULL;
    eg_scope_begin();
    eg_tensor *parts[2] = {
        eg_minimum(eg_slice(a, 0, 0, 1, 1), eg_slice(b, 0, 0, 1, 1)),
        eg_maximum(eg_slice(a, 0, 1, 2, 1), eg_slice(b, 0, 1, 2, 1)),
    };
    eg_tensor *range = parts[0] && parts[1] ? eg_concat(2, parts, 0) : NULL;
    if (range) eg_scope_keep(range);
    eg_scope_end();
    return range;
}

eg_tensor *eg_dense_int8(const eg_tensor *x, const eg_tensor *q, const eg_tensor *scale,
                         const eg_tensor *bias, const eg_tensor *range, eg_activation activation) {
    if (!eg__check_arg(x, "dense_int8", 0) || !eg__check_arg(q, "dense_int8", 1) ||
        !eg__check_arg(scale, "dense_int8", 2) || (bias && !eg__check_arg(bias, "dense_int8", 3)) ||
        (range && !eg__check_arg(range, "dense_int8", bias ? 4 : 3)))
        return NULL;
    eg__attrs attrs;
    memset(&attrs, 0, sizeof attrs);
    attrs.ints[0] = (int64_t)activation;
    attrs.ints[1] = bias != NULL;
    attrs.ints[2] = range != NULL;
    const eg_tensor *in[5] = {x, q, scale};
    int n = 3;
    if (bias) in[n++] = bias;
    if (range) in[n++] = range;
    return eg__execute(EG__OP_DENSE_INT8, n, in, &attrs);
}

eg_tensor *eg_conv2d_int8(const eg_tensor *x, const eg_tensor *q, const eg_tensor *scale,
                          const eg_tensor *range, const eg_conv2d_options *options) {
    if (!eg__check_arg(x, "conv2d_int8", 0) || !eg__check_arg(q, "conv2d_int8", 1) ||
        !eg__check_arg(scale, "conv2d_int8", 2) ||
        (range && !eg__check_arg(range, "conv2d_int8", 3)))
        return NULL;
    if (x->n_dims != 4 || q->n_dims != 4) {
        eg__error(EG_ERR_SHAPE, "conv2d_int8: x and the filter must be 4-d (NHWC, HWIO)");
        return NULL;
    }
    eg__attrs attrs;
    if (!eg__conv2d_attrs(&attrs, options, x->shape, q->shape, "conv2d_int8")) return NULL;
    attrs.ints[2] = range != NULL;
    const eg_tensor *in[4] = {x, q, scale, range};
    return eg__execute(EG__OP_CONV2D_INT8, range ? 4 : 3, in, &attrs);
}
