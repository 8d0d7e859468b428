/* The op cases' calls into Eagle for convolution, pooling and normalization (rows in
 * op_cases.c's table; their references are in op_reference_nn.c). */
#include <string.h>

#include "api/internal.h"
#include "op_reference.h"

/* ---- convolution, pooling, normalization ---- */

static eg_conv2d_options case_conv_options(const oc_case *c) {
    eg_conv2d_options o = {{(int)c->p[0], (int)c->p[1]},
                           {(int)c->p[2], (int)c->p[3]},
                           (eg_padding)(c->p[5] % 10),
                           {c->p[6], c->p[7], c->p[8], c->p[9]},
                           (int)c->p[4],
                           (eg_data_format)(c->p[5] / 10)};
    return o;
}

static eg_pool2d_options case_pool_options(const oc_case *c) {
    eg_pool2d_options o = {{(int)c->p[0], (int)c->p[1]},
                           {(int)c->p[2], (int)c->p[3]},
                           (eg_padding)(c->p[5] % 10),
                           {c->p[6], c->p[7], c->p[8], c->p[9]},
                           (eg_data_format)(c->p[5] / 10)};
    return o;
}

int apply_conv2d(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    eg_conv2d_options o = case_conv_options(c);
    return oc_one(eg_conv2d(in[0], in[1], &o), out);
}

int apply_conv2d_transpose(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    eg_conv2d_options o = case_conv_options(c);
    if (c->d[0] <= 0) return oc_one(eg_conv2d_transpose(in[0], in[1], NULL, &o), out);
    bool first = o.data_format == EG_DATA_FORMAT_NCHW;
    int64_t channels = eg_tensor_dim(in[1], 2) * (o.groups ? o.groups : 1);
    int64_t shape[4] = {eg_tensor_dim(in[0], 0), first ? channels : (int64_t)c->d[0],
                        first ? (int64_t)c->d[0] : (int64_t)c->d[1],
                        first ? (int64_t)c->d[1] : channels};
    return oc_one(eg_conv2d_transpose(in[0], in[1], shape, &o), out);
}

/* conv2d_backward_filter is internal: inputs (x, dy), filter (KH, KW) = d. */
int apply_conv2d_backward_filter(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    eg_conv2d_options o = case_conv_options(c);
    int groups = o.groups ? o.groups : 1;
    bool first = o.data_format == EG_DATA_FORMAT_NCHW;
    int64_t filter[4] = {(int64_t)c->d[0], (int64_t)c->d[1],
                         eg_tensor_dim(in[0], first ? 1 : 3) / groups,
                         eg_tensor_dim(in[1], first ? 1 : 3)};
    eg__attrs attrs;
    if (!eg__conv2d_attrs(&attrs, &o, eg_tensor_shape(in[0]), filter, "test")) return -1;
    attrs.n_dims = 4;
    memcpy(attrs.shape, filter, sizeof filter);
    return oc_one(eg__execute(EG__OP_CONV2D_BACKWARD_FILTER, 2, eg__const_tensors(in), &attrs),
                  out);
}

int apply_pool2d(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    eg_pool2d_options o = case_pool_options(c);
    if (c->op == EG__OP_MAX_POOL2D) return oc_one(eg_max_pool2d(in[0], &o), out);
    if (c->op == EG__OP_AVG_POOL2D) return oc_one(eg_avg_pool2d(in[0], &o), out);
    eg__attrs attrs; /* the internal ops */
    if (!eg__pool2d_attrs(&attrs, &o, eg_tensor_shape(in[0]), "test")) return -1;
    if (c->op == EG__OP_MAX_POOL2D_ARGMAX)
        return oc_one(eg__execute(EG__OP_MAX_POOL2D_ARGMAX, 1, eg__const_tensors(in), &attrs), out);
    return oc_one(eg__execute(EG__OP_MAX_POOL2D_BACKWARD, 2, eg__const_tensors(in), &attrs), out);
}

/* avg_pool2d_backward is internal: input dy; the input's (H, W) is d, its batch and channels
 * are dy's. */
int apply_avg_pool2d_backward(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    eg_pool2d_options o = case_pool_options(c);
    bool first = o.data_format == EG_DATA_FORMAT_NCHW;
    int64_t channels = eg_tensor_dim(in[0], first ? 1 : 3);
    int64_t shape[4] = {eg_tensor_dim(in[0], 0), first ? channels : (int64_t)c->d[0],
                        first ? (int64_t)c->d[0] : (int64_t)c->d[1],
                        first ? (int64_t)c->d[1] : channels};
    eg__attrs attrs;
    if (!eg__pool2d_attrs(&attrs, &o, shape, "test")) return -1;
    attrs.n_dims = 4;
    memcpy(attrs.shape, shape, sizeof shape);
    return oc_one(eg__execute(EG__OP_AVG_POOL2D_BACKWARD, 1, eg__const_tensors(in), &attrs), out);
}

/* moments: two outputs (mean, variance); p as for reductions */
int apply_moments(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    int axes[4], n = (int)c->p[0];
    oc_int_axes(c, 1, n, axes);
    return eg_moments(in[0], n, n ? axes : NULL, c->p[5] != 0, &out[0], &out[1]) == EG_OK ? 2 : -1;
}

/* relu_backward is internal: inputs (x, g) */
int apply_relu_backward(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    (void)c;
    static const eg__attrs no_attrs;
    return oc_one(eg__execute(EG__OP_RELU_BACKWARD, 2, eg__const_tensors(in), &no_attrs), out);
}

int apply_dense(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    return oc_one(eg_dense(in[0], in[1], in[2], (eg_activation)c->p[0]), out);
}

int apply_mul_add(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    (void)c;
    return oc_one(eg_mul_add(in[0], in[1], in[2]), out);
}

int apply_batch_norm(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    if (!c->p[0])
        return oc_one(eg_batch_normalization(in[0], in[1], in[2], in[3], in[4], c->d[0]), out);
    int axes[3] = {0, 1, 2};
    if (c->p[1] == EG_DATA_FORMAT_NCHW) axes[1] = 2, axes[2] = 3;
    eg_tensor *mean, *variance;
    if (eg_moments(in[0], 3, axes, c->p[1] == EG_DATA_FORMAT_NCHW, &mean, &variance) != EG_OK)
        return -1;
    return oc_one(eg_batch_normalization(in[0], mean, variance, in[1], in[2], c->d[0]), out);
}

/* batch_norm_training: inputs (x, offset, scale); p as for reductions (axes); outputs y and the
 * batch mean and variance (keepdims); d[0] = epsilon */
int apply_batch_norm_training(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    int axes[4], n = (int)c->p[0];
    oc_int_axes(c, 1, n, axes);
    out[0] =
        eg_batch_norm_training(in[0], n, n ? axes : NULL, in[1], in[2], c->d[0], &out[1], &out[2]);
    return out[0] ? 3 : -1;
}

/* batch_norm_training_activation with relu: as batch_norm_training */
int apply_batch_norm_relu(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    int axes[4], n = (int)c->p[0];
    oc_int_axes(c, 1, n, axes);
    out[0] = eg_batch_norm_training_activation(in[0], n, n ? axes : NULL, in[1], in[2], c->d[0],
                                               EG_ACTIVATION_RELU, &out[1], &out[2]);
    return out[0] ? 3 : -1;
}

/* p[8] = EG_ACTIVATION_RELU: the fused relu's variant (more inputs: see ops.def) */
int apply_batch_norm_backward(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    eg__attrs attrs = {.scalars = {c->d[0]}};
    attrs.ints[0] = c->p[8];
    int axes[4], n = (int)c->p[0];
    oc_int_axes(c, 1, n, axes);
    int n_dims = eg_tensor_n_dims(in[1]);
    bool chosen[EG_MAX_DIMS] = {0};
    for (int i = 0; i < n; i++) chosen[axes[i] < 0 ? axes[i] + n_dims : axes[i]] = true;
    for (int d = 0; d < n_dims; d++)
        if (chosen[d]) attrs.axes[attrs.n_axes++] = d;
    bool sums = c->op == EG__OP_BATCH_NORM_BACKWARD_SUMS;
    bool relu = c->p[8] == EG_ACTIVATION_RELU;
    return oc_one(
        eg__execute(c->op, sums ? (relu ? 6 : 3) : (relu ? 7 : 6), eg__const_tensors(in), &attrs),
        out);
}

int apply_layer_norm(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    return oc_one(eg_layer_normalization(in[0], 0, NULL, in[1], in[2], c->d[0]), out);
}

int apply_upsample2d(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    return oc_one(eg_upsample2d(in[0], (int)c->p[0], (int)c->p[1], (eg_data_format)c->p[2]), out);
}

int apply_zero_padding2d(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    return oc_one(eg_zero_padding2d(in[0], c->p, (eg_data_format)c->p[4]), out);
}

int apply_global_avg_pool2d(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    return oc_one(eg_global_avg_pool2d(in[0], (eg_data_format)c->p[0], c->p[1] != 0), out);
}
