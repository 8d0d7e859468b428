/* The public convolution, pooling and normalization functions: options resolved into
 * attrs->window (SAME padding becomes explicit amounts), then eg__execute; the composed ones
 * (moments, batch/layer normalization, upsampling, zero padding) are built of recorded ops. */
#include <string.h>

#include "base/error.h"
#include "api/internal.h"

/* ---- windows ---- */

/* Height and width of a 4-d image shape in the given layout. */
static void spatial(const int64_t *shape, bool channels_first, int64_t *h, int64_t *w) {
    *h = shape[channels_first ? 2 : 1];
    *w = shape[channels_first ? 3 : 2];
}

static bool check_image(const eg_tensor *x, const char *name, const char *what) {
    if (x->n_dims == 4) return true;
    char s[160];
    eg__error(EG_ERR_SHAPE, "%s: %s must be 4-d (%s), got %s", name, what, "NHWC or NCHW",
              eg__shape_format(x->n_dims, x->shape, s, sizeof s));
    return false;
}

static bool check_format(eg_data_format format, const char *name) {
    if ((unsigned)format < EG_DATA_FORMAT_COUNT) return true;
    eg__error(EG_ERR_INVALID_ARGUMENT, "%s: invalid data format %d", name, (int)format);
    return false;
}

/* Resolves padding for one spatial axis pair into window->pad. SAME follows TensorFlow: output
 * ceil(in / stride), total padding max((out - 1) * stride + dilated kernel - in, 0) split with
 * the odd one after. */
static bool resolve_padding(eg__window *window, eg_padding padding, const int64_t *explicit_pad,
                            int64_t in_h, int64_t in_w, int64_t k_h, int64_t k_w,
                            const char *name) {
    const int64_t in[2] = {in_h, in_w}, k[2] = {k_h, k_w};
    switch (padding) {
    case EG_PADDING_VALID:
        memset(window->pad, 0, sizeof window->pad);
        return true;
    case EG_PADDING_EXPLICIT:
        for (int i = 0; i < 4; i++) {
            if (explicit_pad[i] < 0) {
                eg__error(EG_ERR_INVALID_ARGUMENT, "%s: negative explicit padding %lld", name,
                          (long long)explicit_pad[i]);
                return false;
            }
            window->pad[i] = explicit_pad[i];
        }
        return true;
    case EG_PADDING_SAME:
        for (int a = 0; a < 2; a++) {
            int64_t stride = window->stride[a] > 0 ? window->stride[a] : 1;
            int64_t out = (in[a] + stride - 1) / stride;
            int64_t span = (int64_t)window->dilation[a] * (k[a] - 1) + 1;
            int64_t total = (out - 1) * stride + span - in[a];
            if (total < 0) total = 0;
            window->pad[2 * a] = total / 2;
            window->pad[2 * a + 1] = total - total / 2;
        }
        return true;
    default:
        eg__error(EG_ERR_INVALID_ARGUMENT, "%s: invalid padding %d", name, (int)padding);
        return false;
    }
}

static eg_conv2d_options conv_defaults(const eg_conv2d_options *options) {
    eg_conv2d_options o = options ? *options : (eg_conv2d_options){0};
    for (int i = 0; i < 2; i++) {
        if (o.strides[i] == 0) o.strides[i] = 1;
        if (o.dilations[i] == 0) o.dilations[i] = 1;
    }
    if (o.groups == 0) o.groups = 1;
    return o;
}

/* attrs for a convolution whose input (the forward one's) has spatial size in_h x in_w. */
static bool conv_attrs(eg__attrs *attrs, const eg_conv2d_options *o, int64_t in_h, int64_t in_w,
                       const int64_t *filter_shape, const char *name) {
    if (!check_format(o->data_format, name)) return false;
    memset(attrs, 0, sizeof *attrs);
    eg__window *w = &attrs->window;
    w->stride[0] = o->strides[0];
    w->stride[1] = o->strides[1];
    w->dilation[0] = o->dilations[0];
    w->dilation[1] = o->dilations[1];
    w->groups = o->groups;
    w->channels_first = o->data_format == EG_DATA_FORMAT_NCHW;
    return resolve_padding(w, o->padding, o->explicit_padding, in_h, in_w, filter_shape[0],
                           filter_shape[1], name);
}

bool eg__conv2d_attrs(eg__attrs *attrs, const eg_conv2d_options *options, const int64_t *x_shape,
                      const int64_t *filter_shape, const char *name) {
    eg_conv2d_options o = conv_defaults(options);
    int64_t h, w;
    spatial(x_shape, o.data_format == EG_DATA_FORMAT_NCHW, &h, &w);
    return conv_attrs(attrs, &o, h, w, filter_shape, name);
}

eg_tensor *eg_conv2d(const eg_tensor *x, const eg_tensor *filter,
                     const eg_conv2d_options *options) {
    if (!eg__check_arg(x, "conv2d", 0) || !eg__check_arg(filter, "conv2d", 1)) return NULL;
    if (!check_image(x, "conv2d", "input") || !check_image(filter, "conv2d", "filter")) return NULL;
    eg_conv2d_options o = conv_defaults(options);
    eg__attrs attrs;
    int64_t h, w;
    spatial(x->shape, o.data_format == EG_DATA_FORMAT_NCHW, &h, &w);
    if (!conv_attrs(&attrs, &o, h, w, filter->shape, "conv2d")) return NULL;
    const eg_tensor *in[2] = {x, filter};
    return eg__execute(EG__OP_CONV2D, 2, in, &attrs);
}

eg_tensor *eg_conv2d_transpose(const eg_tensor *x, const eg_tensor *filter,
                               const int64_t *output_shape, const eg_conv2d_options *options) {
    if (!eg__check_arg(x, "conv2d_transpose", 0) || !eg__check_arg(filter, "conv2d_transpose", 1))
        return NULL;
    if (!check_image(x, "conv2d_transpose", "input") ||
        !check_image(filter, "conv2d_transpose", "filter"))
        return NULL;
    eg_conv2d_options o = conv_defaults(options);
    if (!check_format(o.data_format, "conv2d_transpose")) return NULL;
    bool first = o.data_format == EG_DATA_FORMAT_NCHW;
    int64_t shape[4];
    if (output_shape) {
        memcpy(shape, output_shape, sizeof shape);
    } else {
        int64_t in[2];
        spatial(x->shape, first, &in[0], &in[1]);
        int64_t out[2];
        for (int a = 0; a < 2; a++) {
            int64_t span = (int64_t)o.dilations[a] * (filter->shape[a] - 1) + 1;
            if (o.padding == EG_PADDING_SAME)
                out[a] = in[a] * o.strides[a];
            else
                out[a] = (in[a] - 1) * o.strides[a] + span -
                         (o.padding == EG_PADDING_EXPLICIT
                              ? o.explicit_padding[2 * a] + o.explicit_padding[2 * a + 1]
                              : 0);
        }
        int64_t channels = filter->shape[2] * o.groups;
        shape[0] = x->shape[0];
        shape[first ? 1 : 3] = channels;
        shape[first ? 2 : 1] = out[0];
        shape[first ? 3 : 2] = out[1];
    }
    for (int d = 0; d < 4; d++) {
        if (shape[d] < 0) {
            eg__error(EG_ERR_SHAPE, "conv2d_transpose: negative output size %lld on axis %d",
                      (long long)shape[d], d);
            return NULL;
        }
    }
    int64_t h, w;
    spatial(shape, first, &h, &w);
    eg__attrs attrs;
    if (!conv_attrs(&attrs, &o, h, w, filter->shape, "conv2d_transpose")) return NULL;
    attrs.n_dims = 4;
    memcpy(attrs.shape, shape, sizeof shape);
    const eg_tensor *in[2] = {x, filter};
    return eg__execute(EG__OP_CONV2D_BACKWARD_INPUT, 2, in, &attrs);
}

bool eg__pool2d_attrs(eg__attrs *attrs, const eg_pool2d_options *options, const int64_t *x_shape,
                      const char *name) {
    eg_pool2d_options o = options ? *options : (eg_pool2d_options){0};
    if (!check_format(o.data_format, name)) return false;
    memset(attrs, 0, sizeof *attrs);
    eg__window *w = &attrs->window;
    for (int i = 0; i < 2; i++) {
        w->kernel[i] = o.pool_size[i] ? o.pool_size[i] : 2;
        w->stride[i] = o.strides[i] ? o.strides[i] : w->kernel[i];
        w->dilation[i] = 1;
    }
    w->groups = 1;
    w->channels_first = o.data_format == EG_DATA_FORMAT_NCHW;
    int64_t h, wd;
    spatial(x_shape, w->channels_first, &h, &wd);
    return resolve_padding(w, o.padding, o.explicit_padding, h, wd, w->kernel[0], w->kernel[1],
                           name);
}

static eg_tensor *pool(eg__op op, const eg_tensor *x, const eg_pool2d_options *options,
                       const char *name) {
    if (!eg__check_arg(x, name, 0)) return NULL;
    if (!check_image(x, name, "input")) return NULL;
    eg__attrs attrs;
    if (!eg__pool2d_attrs(&attrs, options, x->shape, name)) return NULL;
    const eg_tensor *in[1] = {x};
    return eg__execute(op, 1, in, &attrs);
}

eg_tensor *eg_max_pool2d(const eg_tensor *x, const eg_pool2d_options *options) {
    return pool(EG__OP_MAX_POOL2D, x, options, "max_pool2d");
}

eg_tensor *eg_avg_pool2d(const eg_tensor *x, const eg_pool2d_options *options) {
    return pool(EG__OP_AVG_POOL2D, x, options, "avg_pool2d");
}

eg_tensor *eg_global_avg_pool2d(const eg_tensor *x, eg_data_format data_format, bool keepdims) {
    if (!eg__check_arg(x, "global_avg_pool2d", 0)) return NULL;
    if (!check_image(x, "global_avg_pool2d", "input") ||
        !check_format(data_format, "global_avg_pool2d"))
        return NULL;
    int axes[2] = {1, 2};
    if (data_format == EG_DATA_FORMAT_NCHW) axes[0] = 2, axes[1] = 3;
    return eg_mean(x, 2, axes, keepdims);
}

/* x (B, H, W, C) -> reshape (B, H, 1, W, 1, C) -> broadcast (B, H, sh, W, sw, C) -> reshape
 * (B, H*sh, W*sw, C) (the copy); NCHW likewise. The gradient sums each block. */
eg_tensor *eg_upsample2d(const eg_tensor *x, int size_h, int size_w, eg_data_format data_format) {
    if (!eg__check_arg(x, "upsample2d", 0)) return NULL;
    if (!check_image(x, "upsample2d", "input") || !check_format(data_format, "upsample2d"))
        return NULL;
    if (size_h < 1 || size_w < 1) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "upsample2d: sizes must be >= 1, got (%d, %d)", size_h,
                  size_w);
        return NULL;
    }
    bool first = data_format == EG_DATA_FORMAT_NCHW;
    int64_t b = x->shape[0], c = x->shape[first ? 1 : 3], h, w;
    spatial(x->shape, first, &h, &w);
    int64_t split[6], wide[6], out[4];
    if (first) {
        memcpy(split, (int64_t[]){b, c, h, 1, w, 1}, sizeof split);
        memcpy(wide, (int64_t[]){b, c, h, size_h, w, size_w}, sizeof wide);
        memcpy(out, (int64_t[]){b, c, h * size_h, w * size_w}, sizeof out);
    } else {
        memcpy(split, (int64_t[]){b, h, 1, w, 1, c}, sizeof split);
        memcpy(wide, (int64_t[]){b, h, size_h, w, size_w, c}, sizeof wide);
        memcpy(out, (int64_t[]){b, h * size_h, w * size_w, c}, sizeof out);
    }
    eg_tensor *s = eg_reshape(x, 6, split);
    eg_tensor *broad = eg_broadcast_to(s, 6, wide);
    eg_tensor *y = eg_reshape(broad, 4, out);
    eg_release(broad);
    eg_release(s);
    return y;
}

eg_tensor *eg_zero_padding2d(const eg_tensor *x, const int64_t *padding,
                             eg_data_format data_format) {
    if (!eg__check_arg(x, "zero_padding2d", 0)) return NULL;
    if (!check_image(x, "zero_padding2d", "input") || !check_format(data_format, "zero_padding2d"))
        return NULL;
    if (!padding) {
        eg__error(EG_ERR_NULL_ARGUMENT, "zero_padding2d: padding is NULL");
        return NULL;
    }
    int64_t widths[8] = {0};
    int h_axis = data_format == EG_DATA_FORMAT_NCHW ? 2 : 1;
    for (int i = 0; i < 4; i++) widths[2 * h_axis + i] = padding[i];
    return eg_pad(x, widths, 0.0);
}

/* ---- normalization ---- */

eg_tensor *eg_mul_add(const eg_tensor *x, const eg_tensor *scale, const eg_tensor *shift) {
    static const eg__attrs no_attrs;
    const eg_tensor *in[3] = {x, scale, shift};
    return eg__execute(EG__OP_MUL_ADD, 3, in, &no_attrs);
}

eg_status eg_moments(const eg_tensor *x, int n_axes, const int *axes, bool keepdims,
                     eg_tensor **mean, eg_tensor **variance) {
    if (!mean || !variance)
        return eg__error(EG_ERR_NULL_ARGUMENT, "moments: mean or variance is NULL");
    *mean = *variance = NULL;
    if (!eg__check_arg(x, "moments", 0)) return eg_last_status();
    if (n_axes < 0 || (n_axes > 0 && !axes))
        return eg__error(EG_ERR_INVALID_ARGUMENT, "moments: bad axes list");
    eg__attrs attrs = {.keepdims = keepdims};
    bool chosen[EG_MAX_DIMS] = {0};
    for (int i = 0; i < n_axes; i++) {
        int a = axes[i];
        if (!eg__normalize_axis(&a, x->n_dims))
            return eg__error(EG_ERR_AXIS, "moments: axis %d out of range for %d dims", axes[i],
                             x->n_dims);
        chosen[a] = true;
    }
    for (int d = 0; d < x->n_dims; d++)
        if (chosen[d] || n_axes == 0) attrs.axes[attrs.n_axes++] = d;
    const eg_tensor *in[1] = {x};
    eg_tensor *both = eg__execute(EG__OP_MOMENTS, 1, in, &attrs);
    if (!both) return eg_last_status();
    /* (2, kept...) -> two views shaped kept... */
    eg_tensor *parts[2];
    eg_status status = eg_split(both, 0, 2, NULL, parts);
    eg_release(both);
    if (status != EG_OK) return status;
    *mean = eg_reshape(parts[0], parts[0]->n_dims - 1, parts[0]->shape + 1);
    *variance = eg_reshape(parts[1], parts[1]->n_dims - 1, parts[1]->shape + 1);
    eg_release(parts[0]);
    eg_release(parts[1]);
    if (!*mean || !*variance) {
        eg_release(*mean);
        eg_release(*variance);
        *mean = *variance = NULL;
        return eg_last_status();
    }
    return EG_OK;
}

/* a = scale / sqrt(variance + epsilon) and b = offset - mean * a are small when the moments are
 * per channel; then one pass y = x * a + b. bf16 or f16 x with f32 statistics (eg_moments gives
 * f32 for them) is normalized in f32 and rounded once to x's dtype. */
eg_tensor *eg_batch_normalization(const eg_tensor *x, const eg_tensor *mean,
                                  const eg_tensor *variance, const eg_tensor *offset,
                                  const eg_tensor *scale, double epsilon) {
    if (!eg__check_arg(x, "batch_normalization", 0) ||
        !eg__check_arg(mean, "batch_normalization", 1) ||
        !eg__check_arg(variance, "batch_normalization", 2))
        return NULL;
    if (!(epsilon >= 0)) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "batch_normalization: epsilon must be >= 0, got %g",
                  epsilon);
        return NULL;
    }
    eg_tensor *items[7] = {0};
    int n = 0;
#define KEEP(expr) (items[n++] = (expr))
    eg_tensor *shifted = KEEP(eg_add_scalar(variance, epsilon));
    eg_tensor *a = KEEP(eg_rsqrt(shifted));
    if (scale) a = KEEP(eg_mul(a, scale));
    eg_tensor *b = KEEP(eg_mul(mean, a));
    b = offset ? KEEP(eg_sub(offset, b)) : KEEP(eg_neg(b));
    bool widen =
        a && (x->dtype == EG_DTYPE_BF16 || x->dtype == EG_DTYPE_F16) && a->dtype == EG_DTYPE_F32;
    const eg_tensor *source = widen ? KEEP(eg_cast(x, EG_DTYPE_F32)) : x;
#undef KEEP
    eg_tensor *y = source ? eg_mul_add(source, a, b) : NULL;
    if (widen && y) {
        eg_tensor *narrow = eg_cast(y, x->dtype);
        eg_release(y);
        y = narrow;
    }
    for (int i = n; i-- > 0;) eg_release(items[i]);
    return y;
}

static eg_tensor *batch_norm_training(const char *name, const eg_tensor *x, int n_axes,
                                      const int *axes, const eg_tensor *offset,
                                      const eg_tensor *scale, double epsilon,
                                      eg_activation activation, eg_tensor **batch_mean,
                                      eg_tensor **batch_variance) {
    if (batch_mean) *batch_mean = NULL;
    if (batch_variance) *batch_variance = NULL;
    if (!eg__check_arg(x, name, 0)) return NULL;
    if (activation != EG_ACTIVATION_NONE && activation != EG_ACTIVATION_RELU) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "%s: activation %s (%d) is not one of linear, relu",
                  name, eg_activation_name(activation), (int)activation);
        return NULL;
    }
    eg_tensor *mean, *variance;
    if (eg_moments(x, n_axes, axes, true, &mean, &variance) != EG_OK) return NULL;
    /* eg_moments has checked the axes */
    eg__attrs attrs = {.scalars = {epsilon}, .training = true};
    attrs.ints[0] = (int64_t)activation;
    bool chosen[EG_MAX_DIMS] = {0};
    for (int i = 0; i < n_axes; i++) {
        int a = axes[i];
        eg__normalize_axis(&a, x->n_dims);
        chosen[a] = true;
    }
    for (int d = 0; d < x->n_dims; d++)
        if (chosen[d] || n_axes == 0) attrs.axes[attrs.n_axes++] = d;
    /* scale and offset broadcast to the statistics' (keepdims) shape; missing ones are 1 and 0.
     * The statistics of bf16 and f16 x are f32, and so must the parameters be: low-precision
     * ones are widened (the op computes in f32 anyway). */
    eg_tensor *items[4] = {0};
    bool low = x->dtype == EG_DTYPE_BF16 || x->dtype == EG_DTYPE_F16, widened = true;
    if (low && scale && scale->dtype != mean->dtype)
        widened = (scale = items[2] = eg_cast(scale, mean->dtype)) != NULL;
    if (widened && low && offset && offset->dtype != mean->dtype)
        widened = (offset = items[3] = eg_cast(offset, mean->dtype)) != NULL;
    eg_tensor *g = NULL, *o = NULL;
    if (widened) {
        g = scale ? eg_broadcast_to(scale, mean->n_dims, mean->shape) : eg_full_like(mean, 1.0);
        o = offset ? eg_broadcast_to(offset, mean->n_dims, mean->shape) : eg_full_like(mean, 0.0);
    }
    items[0] = g;
    items[1] = o;
    eg_tensor *y = NULL;
    if (g && o) {
        const eg_tensor *in[5] = {x, mean, variance, g, o};
        y = eg__execute(EG__OP_BATCH_NORM, 5, in, &attrs);
    }
    for (int i = 0; i < 4; i++) eg_release(items[i]);
    if (y && batch_mean)
        *batch_mean = mean;
    else
        eg_release(mean);
    if (y && batch_variance)
        *batch_variance = variance;
    else
        eg_release(variance);
    return y;
}

eg_tensor *eg_batch_norm_training(const eg_tensor *x, int n_axes, const int *axes,
                                  const eg_tensor *offset, const eg_tensor *scale, double epsilon,
                                  eg_tensor **batch_mean, eg_tensor **batch_variance) {
    return batch_norm_training("batch_norm_training", x, n_axes, axes, offset, scale, epsilon,
                               EG_ACTIVATION_NONE, batch_mean, batch_variance);
}

eg_tensor *eg_batch_norm_training_activation(const eg_tensor *x, int n_axes, const int *axes,
                                             const eg_tensor *offset, const eg_tensor *scale,
                                             double epsilon, eg_activation activation,
                                             eg_tensor **batch_mean, eg_tensor **batch_variance) {
    return batch_norm_training("batch_norm_training_activation", x, n_axes, axes, offset, scale,
                               epsilon, activation, batch_mean, batch_variance);
}

eg_tensor *eg_layer_normalization(const eg_tensor *x, int n_axes, const int *axes,
                                  const eg_tensor *scale, const eg_tensor *offset, double epsilon) {
    if (!eg__check_arg(x, "layer_normalization", 0)) return NULL;
    if (x->n_dims < 1) {
        eg__error(EG_ERR_SHAPE, "layer_normalization: x must have at least 1 dim");
        return NULL;
    }
    int last = -1;
    if (n_axes == 0 || !axes) {
        n_axes = 1;
        axes = &last;
    }
    eg_tensor *mean, *variance;
    if (eg_moments(x, n_axes, axes, true, &mean, &variance) != EG_OK) return NULL;
    eg_tensor *y = eg_batch_normalization(x, mean, variance, offset, scale, epsilon);
    eg_release(mean);
    eg_release(variance);
    return y;
}
