/* The layers of convolutional networks, with Keras' defaults: Conv2D, MaxPooling2D,
 * AveragePooling2D, GlobalAveragePooling2D, BatchNormalization, LayerNormalization, Dropout. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "nn/internal.h"
#include "ops/internal.h"

/* ---- construction ---- */

static bool valid_initializer(const eg_initializer *init) {
    return (unsigned)init->kind < EG_INITIALIZER_COUNT;
}

static bool valid_float(eg_dtype dtype, const char *what) {
    if (dtype == EG_DTYPE_F32 || dtype == EG_DTYPE_F64) return true;
    eg__error(EG_ERR_DTYPE, "%s: variables must be f32 or f64, got %s", what, eg_dtype_name(dtype));
    return false;
}

eg_conv2d_layer_options eg_conv2d_layer_options_default(void) {
    eg_conv2d_layer_options o = {
        .strides = {1, 1},
        .padding = EG_PADDING_VALID,
        .data_format = EG_DATA_FORMAT_NHWC,
        .dilations = {1, 1},
        .groups = 1,
        .activation = EG_ACTIVATION_NONE,
        .use_bias = true,
        .kernel_initializer = eg_initializer_of(EG_INITIALIZER_GLOROT_UNIFORM),
        .bias_initializer = eg_initializer_of(EG_INITIALIZER_ZEROS),
        .dtype = EG_DTYPE_F32,
    };
    return o;
}

eg_layer *eg_conv2d_new(int64_t filters, int kernel_size, eg_padding padding,
                        eg_activation activation) {
    eg_conv2d_layer_options o = eg_conv2d_layer_options_default();
    o.padding = padding;
    o.activation = activation;
    return eg_conv2d_new_ex(filters, kernel_size, kernel_size, &o);
}

eg_layer *eg_conv2d_new_ex(int64_t filters, int kernel_h, int kernel_w,
                           const eg_conv2d_layer_options *options) {
    eg_conv2d_layer_options o = options ? *options : eg_conv2d_layer_options_default();
    const char *problem = NULL;
    if (filters < 1)
        problem = "filters must be >= 1";
    else if (kernel_h < 1 || kernel_w < 1)
        problem = "kernel sizes must be >= 1";
    else if (o.strides[0] < 1 || o.strides[1] < 1 || o.dilations[0] < 1 || o.dilations[1] < 1)
        problem = "strides and dilations must be >= 1";
    else if (o.groups < 1 || filters % o.groups != 0)
        problem = "groups must be >= 1 and divide filters";
    else if ((unsigned)o.padding >= EG_PADDING_COUNT ||
             (unsigned)o.data_format >= EG_DATA_FORMAT_COUNT)
        problem = "invalid padding or data format";
    else if ((unsigned)o.activation >= EG_ACTIVATION_COUNT)
        problem = "invalid activation";
    else if (!valid_initializer(&o.kernel_initializer) || !valid_initializer(&o.bias_initializer))
        problem = "invalid initializer kind";
    for (int i = 0; !problem && i < 4; i++)
        if (o.explicit_padding[i] < 0) problem = "negative explicit padding";
    if (problem) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "conv2d layer: %s (filters %lld, kernel %d x %d)",
                  problem, (long long)filters, kernel_h, kernel_w);
        return NULL;
    }
    if (!valid_float(o.dtype, "conv2d layer")) return NULL;
    eg_layer *layer = eg__layer_new(EG__LAYER_CONV2D, o.name, "conv2d layer");
    if (!layer) return NULL;
    o.name = NULL;
    layer->units = filters;
    layer->kernel[0] = kernel_h;
    layer->kernel[1] = kernel_w;
    layer->activation = o.activation;
    layer->dtype = o.dtype;
    layer->generator = o.generator;
    layer->conv = o;
    return layer;
}

static eg_layer *pool_new(eg__layer_kind kind, const eg_pool2d_options *options, const char *name,
                          const char *what) {
    eg_pool2d_options o = options ? *options : (eg_pool2d_options){0};
    for (int i = 0; i < 2; i++) {
        if (o.pool_size[i] == 0) o.pool_size[i] = 2;
        if (o.strides[i] == 0) o.strides[i] = o.pool_size[i];
    }
    if (o.pool_size[0] < 1 || o.pool_size[1] < 1 || o.strides[0] < 1 || o.strides[1] < 1 ||
        (unsigned)o.padding >= EG_PADDING_COUNT ||
        (unsigned)o.data_format >= EG_DATA_FORMAT_COUNT) {
        eg__error(EG_ERR_INVALID_ARGUMENT,
                  "%s: invalid options (pool size %d x %d, strides %d x %d, padding %d, data "
                  "format %d)",
                  what, o.pool_size[0], o.pool_size[1], o.strides[0], o.strides[1], (int)o.padding,
                  (int)o.data_format);
        return NULL;
    }
    eg_layer *layer = eg__layer_new(kind, name, what);
    if (layer) layer->pool = o;
    return layer;
}

eg_layer *eg_max_pool2d_new(int pool_size, int strides, eg_padding padding) {
    eg_pool2d_options o = {{pool_size, pool_size}, {strides, strides}, padding, {0}, 0};
    if (pool_size < 1) o.pool_size[0] = o.pool_size[1] = -1; /* rejected below */
    return pool_new(EG__LAYER_MAX_POOL2D, &o, NULL, "max_pooling2d");
}

eg_layer *eg_avg_pool2d_new(int pool_size, int strides, eg_padding padding) {
    eg_pool2d_options o = {{pool_size, pool_size}, {strides, strides}, padding, {0}, 0};
    if (pool_size < 1) o.pool_size[0] = o.pool_size[1] = -1;
    return pool_new(EG__LAYER_AVG_POOL2D, &o, NULL, "average_pooling2d");
}

eg_layer *eg_max_pool2d_new_ex(const eg_pool2d_options *options, const char *name) {
    return pool_new(EG__LAYER_MAX_POOL2D, options, name, "max_pooling2d");
}

eg_layer *eg_avg_pool2d_new_ex(const eg_pool2d_options *options, const char *name) {
    return pool_new(EG__LAYER_AVG_POOL2D, options, name, "average_pooling2d");
}

eg_layer *eg_global_avg_pool2d_new(eg_data_format data_format, const char *name) {
    if ((unsigned)data_format >= EG_DATA_FORMAT_COUNT) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "global_average_pooling2d: invalid data format %d",
                  (int)data_format);
        return NULL;
    }
    eg_layer *layer = eg__layer_new(EG__LAYER_GLOBAL_AVG_POOL2D, name, "global_average_pooling2d");
    if (layer) layer->pool.data_format = data_format;
    return layer;
}

eg_batch_norm_options eg_batch_norm_options_default(void) {
    eg_batch_norm_options o = {
        .axis = -1,
        .momentum = 0.99,
        .epsilon = 1e-3,
        .center = true,
        .scale = true,
        .beta_initializer = eg_initializer_of(EG_INITIALIZER_ZEROS),
        .gamma_initializer = eg_initializer_of(EG_INITIALIZER_ONES),
        .moving_mean_initializer = eg_initializer_of(EG_INITIALIZER_ZEROS),
        .moving_variance_initializer = eg_initializer_of(EG_INITIALIZER_ONES),
        .dtype = EG_DTYPE_F32,
        .activation = EG_ACTIVATION_NONE,
    };
    return o;
}

static bool check_norm(const eg_batch_norm_options *o, const char *what) {
    if (!(o->epsilon > 0) || !(o->momentum >= 0 && o->momentum <= 1) ||
        !valid_initializer(&o->beta_initializer) || !valid_initializer(&o->gamma_initializer) ||
        !valid_initializer(&o->moving_mean_initializer) ||
        !valid_initializer(&o->moving_variance_initializer) ||
        (unsigned)o->activation >= EG_ACTIVATION_COUNT) {
        eg__error(EG_ERR_INVALID_ARGUMENT,
                  "%s: invalid options (epsilon %g must be > 0, momentum %g in [0, 1], "
                  "valid initializers and activation %d)",
                  what, o->epsilon, o->momentum, (int)o->activation);
        return false;
    }
    return valid_float(o->dtype, what);
}

eg_layer *eg_batch_norm_new(const eg_batch_norm_options *options) {
    eg_batch_norm_options o = options ? *options : eg_batch_norm_options_default();
    if (!check_norm(&o, "batch_normalization")) return NULL;
    eg_layer *layer = eg__layer_new(EG__LAYER_BATCH_NORM, o.name, "batch_normalization");
    if (!layer) return NULL;
    o.name = NULL;
    layer->norm = o;
    layer->dtype = o.dtype;
    return layer;
}

eg_layer_norm_options eg_layer_norm_options_default(void) {
    eg_layer_norm_options o = {
        .axis = -1,
        .epsilon = 1e-3,
        .center = true,
        .scale = true,
        .beta_initializer = eg_initializer_of(EG_INITIALIZER_ZEROS),
        .gamma_initializer = eg_initializer_of(EG_INITIALIZER_ONES),
        .dtype = EG_DTYPE_F32,
    };
    return o;
}

eg_layer *eg_layer_norm_new(const eg_layer_norm_options *options) {
    eg_layer_norm_options l = options ? *options : eg_layer_norm_options_default();
    eg_batch_norm_options o = eg_batch_norm_options_default();
    o.axis = l.axis;
    o.epsilon = l.epsilon;
    o.center = l.center;
    o.scale = l.scale;
    o.beta_initializer = l.beta_initializer;
    o.gamma_initializer = l.gamma_initializer;
    o.dtype = l.dtype;
    if (!check_norm(&o, "layer_normalization")) return NULL;
    eg_layer *layer = eg__layer_new(EG__LAYER_LAYER_NORM, l.name, "layer_normalization");
    if (!layer) return NULL;
    layer->norm = o;
    layer->dtype = o.dtype;
    return layer;
}

eg_layer *eg_dropout_new(double rate, const char *name) {
    if (!(rate >= 0 && rate < 1)) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "dropout: rate must be in [0, 1), got %g", rate);
        return NULL;
    }
    eg_layer *layer = eg__layer_new(EG__LAYER_DROPOUT, name, "dropout");
    if (layer) layer->rate = rate;
    return layer;
}

/* ---- building ---- */

static char *shape_text(int n_dims, const int64_t *shape, char *buf) {
    return eg__shape_format(n_dims, shape, buf, 160);
}

/* Output size along one axis for a window of k (dilated by d) at stride s; -1 when unknown. */
static int64_t window_out(int64_t in, int64_t k, int64_t s, int64_t d, eg_padding padding,
                          const int64_t *pads) {
    if (in < 0) return -1;
    if (padding == EG_PADDING_SAME) return (in + s - 1) / s;
    int64_t room = in - d * (k - 1) - 1;
    if (padding == EG_PADDING_EXPLICIT) room += pads[0] + pads[1];
    return room < 0 ? -2 : room / s + 1;
}

/* (n, h, w, c) axes of a 4-d shape. */
static void image_axes(eg_data_format format, int *h, int *w, int *c) {
    *h = format == EG_DATA_FORMAT_NCHW ? 2 : 1;
    *w = *h + 1;
    *c = format == EG_DATA_FORMAT_NCHW ? 1 : 3;
}

/* The output shape of a window layer (conv or pooling) on input_shape. */
static eg_status window_shape(eg_layer *layer, int n_dims, const int64_t *input_shape,
                              const int *kernel, const int *strides, const int *dilations,
                              eg_padding padding, const int64_t *pads, eg_data_format format,
                              int64_t channels, const char *what) {
    char buf[160];
    if (n_dims != 4)
        return eg__error(EG_ERR_SHAPE, "%s: '%s' needs 4-d inputs (%s), got shape %s", what,
                         eg_layer_name(layer), format == EG_DATA_FORMAT_NCHW ? "NCHW" : "NHWC",
                         shape_text(n_dims, input_shape, buf));
    int h, w, c;
    image_axes(format, &h, &w, &c);
    int64_t out_h = window_out(input_shape[h], kernel[0], strides[0], dilations[0], padding, pads);
    int64_t out_w =
        window_out(input_shape[w], kernel[1], strides[1], dilations[1], padding, pads + 2);
    if (out_h == -2 || out_w == -2)
        return eg__error(EG_ERR_SHAPE, "%s: the %d x %d window of '%s' is larger than the input %s",
                         what, kernel[0], kernel[1], eg_layer_name(layer),
                         shape_text(n_dims, input_shape, buf));
    layer->output_n_dims = 4;
    layer->output_shape[0] = input_shape[0];
    layer->output_shape[h] = out_h;
    layer->output_shape[w] = out_w;
    layer->output_shape[c] = channels;
    return EG_OK;
}

/* Creates variables[n_variables] and counts it; false with an error. */
static bool add_variable(eg_layer *layer, const char *what, const eg_initializer *init, bool frozen,
                         int n_dims, const int64_t *shape) {
    layer->frozen[layer->n_variables] = frozen;
    eg_tensor *v = eg__layer_make_variable(layer, what, init, n_dims, shape);
    if (!v) return false;
    layer->variables[layer->n_variables++] = v;
    return true;
}

static void drop_variables(eg_layer *layer) {
    for (int i = 0; i < layer->n_variables; i++) eg_release(layer->variables[i]);
    layer->n_variables = 0;
}

static eg_status build_conv(eg_layer *layer, int n_dims, const int64_t *input_shape) {
    const eg_conv2d_layer_options *o = &layer->conv;
    int h, w, c;
    image_axes(o->data_format, &h, &w, &c);
    char buf[160];
    int64_t channels = n_dims == 4 ? input_shape[c] : -1;
    if (n_dims == 4 && (channels < 1 || channels % o->groups != 0))
        return eg__error(EG_ERR_SHAPE,
                         "conv2d layer: '%s' needs a known number of input channels divisible "
                         "by groups %d, got shape %s",
                         eg_layer_name(layer), o->groups, shape_text(n_dims, input_shape, buf));
    eg_status status =
        window_shape(layer, n_dims, input_shape, layer->kernel, o->strides, o->dilations,
                     o->padding, o->explicit_padding, o->data_format, layer->units, "conv2d layer");
    if (status != EG_OK) return status;
    int64_t kernel_shape[4] = {layer->kernel[0], layer->kernel[1], channels / o->groups,
                               layer->units};
    if (layer->built) {
        if (layer->variables[0]->shape[2] != kernel_shape[2])
            return eg__error(EG_ERR_SHAPE,
                             "conv2d layer: input channels %lld do not match the kernel %s of "
                             "'%s'",
                             (long long)channels, shape_text(4, layer->variables[0]->shape, buf),
                             eg_layer_name(layer));
        return EG_OK;
    }
    if (!add_variable(layer, "kernel", &o->kernel_initializer, false, 4, kernel_shape) ||
        (o->use_bias &&
         !add_variable(layer, "bias", &o->bias_initializer, false, 1, &layer->units))) {
        drop_variables(layer);
        return eg_last_status();
    }
    return EG_OK;
}

/* The features axis (BN) or normalized axis (LN), checked against the shape. */
static eg_status norm_axis(eg_layer *layer, int n_dims, const int64_t *input_shape,
                           const char *what) {
    char buf[160];
    int axis = layer->norm.axis;
    if (!eg__normalize_axis(&axis, n_dims))
        return eg__error(EG_ERR_AXIS, "%s: axis %d of '%s' is out of range for shape %s", what,
                         layer->norm.axis, eg_layer_name(layer),
                         shape_text(n_dims, input_shape, buf));
    if (input_shape[axis] < 1)
        return eg__error(EG_ERR_SHAPE, "%s: axis %d of '%s' must have a known size, got shape %s",
                         what, axis, eg_layer_name(layer), shape_text(n_dims, input_shape, buf));
    if (layer->built && (layer->norm_axis != axis || layer->input_dim != input_shape[axis]))
        return eg__error(EG_ERR_SHAPE, "%s: shape %s does not fit '%s' built for %lld features",
                         what, shape_text(n_dims, input_shape, buf), eg_layer_name(layer),
                         (long long)layer->input_dim);
    layer->norm_axis = axis;
    return EG_OK;
}

static eg_status build_norm(eg_layer *layer, int n_dims, const int64_t *input_shape) {
    bool batch = layer->kind == EG__LAYER_BATCH_NORM;
    const char *what = batch ? "batch_normalization" : "layer_normalization";
    eg_status status = norm_axis(layer, n_dims, input_shape, what);
    if (status != EG_OK || layer->built) return status;
    const eg_batch_norm_options *o = &layer->norm;
    int64_t features = input_shape[layer->norm_axis];
    bool ok =
        (!o->scale || add_variable(layer, "gamma", &o->gamma_initializer, false, 1, &features)) &&
        (!o->center || add_variable(layer, "beta", &o->beta_initializer, false, 1, &features)) &&
        (!batch ||
         (add_variable(layer, "moving_mean", &o->moving_mean_initializer, true, 1, &features) &&
          add_variable(layer, "moving_variance", &o->moving_variance_initializer, true, 1,
                       &features)));
    if (!ok) {
        drop_variables(layer);
        return eg_last_status();
    }
    layer->input_dim = features;
    layer->output_n_dims = n_dims;
    memcpy(layer->output_shape, input_shape, (size_t)n_dims * sizeof *input_shape);
    return EG_OK;
}

eg_status eg__conv_layer_build(eg_layer *layer, int n_dims, const int64_t *input_shape) {
    static const int ones[2] = {1, 1};
    eg_pool2d_options *p = &layer->pool;
    char buf[160];
    switch (layer->kind) {
    case EG__LAYER_CONV2D:
        return build_conv(layer, n_dims, input_shape);
    case EG__LAYER_MAX_POOL2D:
    case EG__LAYER_AVG_POOL2D:
        if (layer->built) return EG_OK;
        return window_shape(layer, n_dims, input_shape, p->pool_size, p->strides, ones, p->padding,
                            p->explicit_padding, p->data_format,
                            n_dims == 4 ? input_shape[p->data_format == EG_DATA_FORMAT_NCHW ? 1 : 3]
                                        : 0,
                            eg__layer_prefix(layer));
    case EG__LAYER_GLOBAL_AVG_POOL2D:
        if (layer->built) return EG_OK;
        if (n_dims != 4)
            return eg__error(EG_ERR_SHAPE,
                             "global_average_pooling2d: '%s' needs 4-d inputs, got %s",
                             eg_layer_name(layer), shape_text(n_dims, input_shape, buf));
        layer->output_n_dims = 2;
        layer->output_shape[0] = input_shape[0];
        layer->output_shape[1] = input_shape[p->data_format == EG_DATA_FORMAT_NCHW ? 1 : 3];
        return EG_OK;
    case EG__LAYER_BATCH_NORM:
    case EG__LAYER_LAYER_NORM:
        return build_norm(layer, n_dims, input_shape);
    case EG__LAYER_DROPOUT:
        if (!layer->built) {
            layer->output_n_dims = n_dims;
            if (n_dims) memcpy(layer->output_shape, input_shape, (size_t)n_dims * sizeof(int64_t));
        }
        return EG_OK;
    default:
        return eg__error(EG_ERR_INTERNAL, "layer_build: unknown layer kind %d", (int)layer->kind);
    }
}

/* ---- calling ---- */

static bool same_dtype(eg_layer *layer, const eg_tensor *x, const eg_tensor *variable,
                       const char *what) {
    if (!variable || x->dtype == variable->dtype) return true;
    eg__error(EG_ERR_DTYPE, "%s: input of '%s' is %s but it computes in %s", what,
              eg_layer_name(layer), eg_dtype_name(x->dtype), eg_dtype_name(variable->dtype));
    return false;
}

eg_conv2d_options eg__conv_layer_options(const eg_layer *layer) {
    const eg_conv2d_layer_options *o = &layer->conv;
    return (eg_conv2d_options){{o->strides[0], o->strides[1]},
                               {o->dilations[0], o->dilations[1]},
                               o->padding,
                               {o->explicit_padding[0], o->explicit_padding[1],
                                o->explicit_padding[2], o->explicit_padding[3]},
                               o->groups,
                               o->data_format};
}

static eg_tensor *call_conv(eg_layer *layer, const eg_tensor *x,
                            const eg_tensor *const *variables) {
    if (!same_dtype(layer, x, variables[0], "conv2d layer")) return NULL;
    const eg_conv2d_layer_options *o = &layer->conv;
    eg_conv2d_options options = eg__conv_layer_options(layer);
    eg__temps temps = {0};
    /* x: (B, H, W, C), kernel: (KH, KW, C / groups, F) -> (B, OH, OW, F) */
    eg_tensor *y = eg__temp(&temps, eg_conv2d(x, variables[0], &options));
    if (o->use_bias && y) {
        const eg_tensor *bias = variables[1];
        if (o->data_format == EG_DATA_FORMAT_NCHW) {
            int64_t shape[3] = {layer->units, 1, 1};
            bias = eg__temp(&temps, eg_reshape(bias, 3, shape));
        }
        y = eg__temp(&temps, eg_add(y, bias));
    }
    eg_tensor *out = y ? eg_activation_apply(layer->activation, y) : NULL;
    eg__temps_release(&temps);
    return out;
}

/* A (C,) variable viewed with x's rank, C on the features axis (for broadcasting). */
static eg_tensor *along_axis(eg__temps *temps, const eg_tensor *v, int n_dims, int axis) {
    int64_t shape[EG_MAX_DIMS];
    for (int d = 0; d < n_dims; d++) shape[d] = d == axis ? v->n_elems : 1;
    return eg__temp(temps, eg_reshape(v, n_dims, shape));
}

/* moving = moving * momentum + batch * (1 - momentum), not recorded. */
static eg_status update_moving(eg_tensor *moving, const eg_tensor *batch, double momentum) {
    eg_no_grad_begin();
    eg__temps temps = {0};
    eg_tensor *flat = eg__temp(&temps, eg_reshape(batch, 1, moving->shape));
    eg_tensor *kept = eg__temp(&temps, eg_mul_scalar(moving, momentum));
    eg_tensor *added = eg__temp(&temps, eg_mul_scalar(flat, 1.0 - momentum));
    eg_tensor *value = eg__temp(&temps, eg_add(kept, added));
    eg_status status = value ? eg_assign(moving, value) : eg_last_status();
    eg__temps_release(&temps);
    eg_no_grad_end();
    return status;
}

/* The mean and population variance over every replica's batch (the synchronized option): the
 * per-replica sums and element counts are all-reduced, so each replica normalizes with the
 * statistics of the global batch, and all_reduce's gradient (the all-reduced gradient) carries
 * the other replicas' terms back to this replica's x. Two passes, as eg_moments, so that a large
 * mean does not cancel the variance's digits. Outside a strategy's replica the all-reduces are
 * the identity: eg_moments of this batch. x is f32 or f64; the statistics keep the reduced axes
 * as size 1. */
static eg_status synchronized_moments(const eg_tensor *x, int n_axes, const int *axes,
                                      eg_tensor **mean, eg_tensor **variance) {
    *mean = *variance = NULL;
    double count = 1;
    for (int k = 0; k < n_axes; k++) count *= (double)x->shape[axes[k]];
    eg__temps temps = {0};
    eg_tensor *local_count = eg__temp(&temps, eg_scalar(x->dtype, count));
    eg_tensor *total_count = eg__temp(&temps, eg_all_reduce(local_count));
    eg_tensor *local_sum = eg__temp(&temps, eg_sum(x, n_axes, axes, true));
    eg_tensor *sum = eg__temp(&temps, eg_all_reduce(local_sum));
    eg_tensor *m = eg_div(sum, total_count);
    eg_tensor *centered = eg__temp(&temps, eg_sub(x, m));
    eg_tensor *squares = eg__temp(&temps, eg_square(centered));
    eg_tensor *local_squares = eg__temp(&temps, eg_sum(squares, n_axes, axes, true));
    eg_tensor *all_squares = eg__temp(&temps, eg_all_reduce(local_squares));
    eg_tensor *v = eg_div(all_squares, total_count);
    eg__temps_release(&temps);
    if (!m || !v) {
        eg_status status = eg_last_status();
        eg_release(m);
        eg_release(v);
        return status;
    }
    *mean = m;
    *variance = v;
    return EG_OK;
}

/* Batch normalization over every replica's batch (the synchronized option, while training): the
 * global statistics, then the normalization (in f32 for 16-bit activations, the result cast
 * back to x's dtype); mean and variance get the statistics for the moving averages. */
static eg_tensor *synchronized_batch_norm(eg__temps *temps, const eg_tensor *x, int n_axes,
                                          const int *axes, const eg_tensor *beta,
                                          const eg_tensor *gamma, double epsilon, eg_tensor **mean,
                                          eg_tensor **variance) {
    const eg_tensor *wide = x;
    if (x->dtype == EG_DTYPE_BF16 || x->dtype == EG_DTYPE_F16)
        wide = eg__temp(temps, eg_cast(x, EG_DTYPE_F32));
    if (!wide || synchronized_moments(wide, n_axes, axes, mean, variance) != EG_OK) return NULL;
    eg__temp(temps, *mean);
    eg__temp(temps, *variance);
    eg_tensor *y = eg_batch_normalization(wide, *mean, *variance, beta, gamma, epsilon);
    if (!y || wide == x) return y;
    eg_tensor *narrow = eg_cast(y, x->dtype);
    eg_release(y);
    return narrow;
}

/* bf16 and f16 inputs (a mixed policy's activations) are normalized as they are with the f32
 * variables: the statistics and normalization run in f32 inside the ops, which read and write
 * the 16-bit activations without casting passes; the output keeps x's dtype. */
static eg_tensor *call_norm(eg_layer *layer, const eg_tensor *x, bool training) {
    bool batch = layer->kind == EG__LAYER_BATCH_NORM;
    const eg_tensor *first = layer->n_variables ? layer->variables[0] : NULL;
    bool mixed = first && first->dtype == EG_DTYPE_F32 &&
                 (x->dtype == EG_DTYPE_BF16 || x->dtype == EG_DTYPE_F16);
    if (!mixed &&
        !same_dtype(layer, x, first, batch ? "batch_normalization" : "layer_normalization"))
        return NULL;
    const eg_batch_norm_options *o = &layer->norm;
    int axis = layer->norm_axis, n_dims = x->n_dims, v = 0;
    eg__temps temps = {0};
    eg_tensor *gamma = o->scale ? along_axis(&temps, layer->variables[v++], n_dims, axis) : NULL;
    eg_tensor *beta = o->center ? along_axis(&temps, layer->variables[v++], n_dims, axis) : NULL;
    eg_tensor *mean = NULL, *variance = NULL;
    int axes[EG_MAX_DIMS], n_axes = 0;
    if (batch)
        for (int d = 0; d < n_dims; d++)
            if (d != axis) axes[n_axes++] = d;
    if (!batch) {
        axes[n_axes++] = axis;
    }
    bool batch_stats = !batch || (training && layer->trainable);
    bool synchronized = batch && batch_stats && o->synchronized;
    /* relu fuses into the training op; other activations (and inference) run after it */
    eg_activation fused =
        batch && batch_stats && !synchronized && o->activation == EG_ACTIVATION_RELU
            ? EG_ACTIVATION_RELU
            : EG_ACTIVATION_NONE;
    eg_tensor *y = NULL;
    if (batch && batch_stats) { /* the training op, then the moving statistics */
        if (synchronized) {
            y = synchronized_batch_norm(&temps, x, n_axes, axes, beta, gamma, o->epsilon, &mean,
                                        &variance);
        } else {
            y = eg_batch_norm_training_activation(x, n_axes, axes, beta, gamma, o->epsilon, fused,
                                                  &mean, &variance);
            eg__temp(&temps, mean);
            eg__temp(&temps, variance);
        }
        if (y && (update_moving(layer->variables[v], mean, o->momentum) != EG_OK ||
                  update_moving(layer->variables[v + 1], variance, o->momentum) != EG_OK)) {
            eg_release(y);
            y = NULL;
        }
    } else {
        if (batch_stats) { /* layer normalization: each example's own statistics */
            if (eg_moments(x, n_axes, axes, true, &mean, &variance) == EG_OK) {
                eg__temp(&temps, mean);
                eg__temp(&temps, variance);
            }
        } else {
            mean = along_axis(&temps, layer->variables[v], n_dims, axis);
            variance = along_axis(&temps, layer->variables[v + 1], n_dims, axis);
        }
        if (mean && variance)
            y = eg_batch_normalization(x, mean, variance, beta, gamma, o->epsilon);
    }
    if (y && o->activation != fused) {
        eg_tensor *activated = eg_activation_apply(o->activation, y);
        eg_release(y);
        y = activated;
    }
    eg__temps_release(&temps);
    return y;
}

eg_tensor *eg__conv_layer_call(eg_layer *layer, const eg_tensor *x,
                               const eg_tensor *const *variables, bool training) {
    switch (layer->kind) {
    case EG__LAYER_CONV2D: {
        bool handled = false;
        eg_tensor *y = !training && layer->int8_kernel
                           ? eg__layer_int8_call(layer, x, variables, &handled)
                           : NULL;
        return handled ? y : call_conv(layer, x, variables);
    }
    case EG__LAYER_MAX_POOL2D:
        return eg_max_pool2d(x, &layer->pool);
    case EG__LAYER_AVG_POOL2D:
        return eg_avg_pool2d(x, &layer->pool);
    case EG__LAYER_GLOBAL_AVG_POOL2D:
        return eg_global_avg_pool2d(x, layer->pool.data_format, false);
    case EG__LAYER_BATCH_NORM:
    case EG__LAYER_LAYER_NORM:
        return call_norm(layer, x, training);
    case EG__LAYER_DROPOUT:
        if (!training || layer->rate == 0) return eg_reshape(x, x->n_dims, x->shape);
        return eg_dropout_random(x, layer->rate, NULL);
    default:
        eg__error(EG_ERR_INTERNAL, "layer_call: unknown layer kind %d", (int)layer->kind);
        return NULL;
    }
}
