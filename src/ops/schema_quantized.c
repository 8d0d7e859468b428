/* Shape and dtype inference for the approximate ops (ops.def: quantize_int8, dense_int8,
 * conv2d_int8; sample_indices).
 * Activations and results are f32; weights i8 with one f32 scale per output channel (the last
 * axis); an optional calibrated activation range is f32 (2): lo, hi. */
#include "base/error.h"
#include "ops/internal.h"

enum { TEXT = 160 };

/* The int32 sums of the kernels stay exact below this inner size: 65535 * 255 * 127 < 2^31. */
#define EG_INT8_MAX_INNER 65535

static eg_status require(eg__op op, const eg_tensor *t, eg_dtype dtype, const char *what) {
    if (t->dtype == dtype) return EG_OK;
    return eg__op_error(op, EG_ERR_DTYPE, "%s must be %s, got %s", what, eg_dtype_name(dtype),
                        eg_dtype_name(t->dtype));
}

static eg_status require_vector(eg__op op, const eg_tensor *t, int64_t n, const char *what) {
    if (t->n_dims == 1 && t->shape[0] == n) return EG_OK;
    char s[TEXT];
    return eg__op_error(op, EG_ERR_SHAPE, "%s must have shape (%lld), got %s", what, (long long)n,
                        eg__shape_format(t->n_dims, t->shape, s, TEXT));
}

/* The scale (f32 (channels)) and the optional range at in[range_index]. */
static eg_status check_scale_and_range(eg__op op, int n_in, const eg_tensor *const *in,
                                       int scale_index, int range_index, int64_t channels) {
    if (require(op, in[scale_index], EG_DTYPE_F32, "the scale") != EG_OK ||
        require_vector(op, in[scale_index], channels, "the scale") != EG_OK)
        return eg_last_status();
    if (n_in > range_index && (require(op, in[range_index], EG_DTYPE_F32, "the range") != EG_OK ||
                               require_vector(op, in[range_index], 2, "the range") != EG_OK))
        return eg_last_status();
    return EG_OK;
}

/* (w f32 (..., C), scale f32 (C)) -> q i8, w's shape; attrs->ints[0] = the largest |q| (1..127) */
eg_status eg__infer_quantize_int8(eg__op op, int n_in, const eg_tensor *const *in,
                                  const eg__attrs *attrs, eg__meta *meta) {
    (void)n_in;
    const eg_tensor *w = in[0];
    if (require(op, w, EG_DTYPE_F32, "the weight") != EG_OK) return eg_last_status();
    if (w->n_dims < 1)
        return eg__op_error(op, EG_ERR_SHAPE, "the weight needs an axis of output channels");
    if (check_scale_and_range(op, 2, in, 1, 2, w->shape[w->n_dims - 1]) != EG_OK)
        return eg_last_status();
    if (attrs->ints[0] < 1 || attrs->ints[0] > 127)
        return eg__op_error(op, EG_ERR_INVALID_ARGUMENT, "largest level %lld is not in [1, 127]",
                            (long long)attrs->ints[0]);
    meta->dtype = EG_DTYPE_I8;
    meta->n_dims = w->n_dims;
    for (int d = 0; d < w->n_dims; d++) meta->shape[d] = w->shape[d];
    return EG_OK;
}

static bool fusable_activation(int64_t activation) {
    return activation >= EG_ACTIVATION_NONE && activation <= EG_ACTIVATION_TANH;
}

/* (x f32 (M, K), q i8 (K, N), scale f32 (N)[, bias f32 (N)][, range f32 (2)]) -> f32 (M, N);
 * attrs->ints[0] the activation (none, relu, sigmoid, tanh), ints[1] 1 when a bias is given
 * (then it is input 3 and the range input 4), ints[2] 1 when a range is given. */
eg_status eg__infer_dense_int8(eg__op op, int n_in, const eg_tensor *const *in,
                               const eg__attrs *attrs, eg__meta *meta) {
    const bool has_bias = attrs->ints[1] != 0, has_range = attrs->ints[2] != 0;
    if (n_in != 3 + has_bias + has_range)
        return eg__op_error(op, EG_ERR_INVALID_ARGUMENT, "%d inputs, expected %d", n_in,
                            3 + has_bias + has_range);
    if (!fusable_activation(attrs->ints[0]))
        return eg__op_error(op, EG_ERR_INVALID_ARGUMENT,
                            "activation %lld is not one of none, relu, sigmoid, tanh",
                            (long long)attrs->ints[0]);
    const eg_tensor *x = in[0], *q = in[1];
    if (require(op, x, EG_DTYPE_F32, "x") != EG_OK ||
        require(op, q, EG_DTYPE_I8, "the quantized kernel") != EG_OK)
        return eg_last_status();
    char a[TEXT], b[TEXT];
    if (x->n_dims != 2 || q->n_dims != 2 || x->shape[1] != q->shape[0])
        return eg__op_error(op, EG_ERR_SHAPE, "needs x (M, K) and kernel (K, N): got %s and %s",
                            eg__shape_format(x->n_dims, x->shape, a, TEXT),
                            eg__shape_format(q->n_dims, q->shape, b, TEXT));
    if (q->shape[0] > EG_INT8_MAX_INNER)
        return eg__op_error(op, EG_ERR_UNSUPPORTED,
                            "inner size %lld is above %d, where int32 sums could overflow",
                            (long long)q->shape[0], EG_INT8_MAX_INNER);
    int64_t n = q->shape[1];
    if (check_scale_and_range(op, n_in, in, 2, 3 + has_bias, n) != EG_OK) return eg_last_status();
    if (has_bias && (require(op, in[3], EG_DTYPE_F32, "the bias") != EG_OK ||
                     require_vector(op, in[3], n, "the bias") != EG_OK))
        return eg_last_status();
    meta->dtype = EG_DTYPE_F32;
    meta->n_dims = 2;
    meta->shape[0] = x->shape[0];
    meta->shape[1] = n;
    return EG_OK;
}

/* (x f32 NHWC, q i8 (KH, KW, C, O), scale f32 (O)[, range f32 (2)]) -> f32 NHWC, attrs->window
 * as conv2d's (one group, NHWC); ints[2] 1 when a range is given. */
eg_status eg__infer_conv2d_int8(eg__op op, int n_in, const eg_tensor *const *in,
                                const eg__attrs *attrs, eg__meta *meta) {
    const bool has_range = attrs->ints[2] != 0;
    if (n_in != 3 + has_range)
        return eg__op_error(op, EG_ERR_INVALID_ARGUMENT, "%d inputs, expected %d", n_in,
                            3 + has_range);
    if (require(op, in[0], EG_DTYPE_F32, "x") != EG_OK ||
        require(op, in[1], EG_DTYPE_I8, "the quantized filter") != EG_OK)
        return eg_last_status();
    if (attrs->window.channels_first || attrs->window.groups != 1)
        return eg__op_error(op, EG_ERR_UNSUPPORTED, "takes NHWC images and one group only");
    if (in[1]->n_dims != 4)
        return eg__op_error(op, EG_ERR_SHAPE, "the filter must be 4-d (KH, KW, C_in, C_out)");
    if (in[1]->shape[0] * in[1]->shape[1] * in[1]->shape[2] > EG_INT8_MAX_INNER)
        return eg__op_error(op, EG_ERR_UNSUPPORTED,
                            "filter window of %lld values is above %d, where int32 sums could "
                            "overflow",
                            (long long)(in[1]->shape[0] * in[1]->shape[1] * in[1]->shape[2]),
                            EG_INT8_MAX_INNER);
    if (check_scale_and_range(op, n_in, in, 2, 3, in[1]->shape[3]) != EG_OK)
        return eg_last_status();
    /* conv2d's own shape rules, asked of an f32 twin of the filter (infer reads metadata only) */
    eg_tensor filter = *in[1];
    filter.dtype = EG_DTYPE_F32;
    const eg_tensor *pair[2] = {in[0], &filter};
    return eg__infer_conv2d(op, 2, pair, attrs, meta);
}

/* (w f32 or f64 (L), L >= 1) -> i64 (s); attrs->ints[0] = s >= 1 (sample_indices). */
eg_status eg__infer_sample_indices(eg__op op, int n_in, const eg_tensor *const *in,
                                   const eg__attrs *attrs, eg__meta *meta) {
    (void)n_in;
    const eg_tensor *w = in[0];
    char s[TEXT];
    if (w->dtype != EG_DTYPE_F32 && w->dtype != EG_DTYPE_F64)
        return eg__op_error(op, EG_ERR_DTYPE, "the weights must be f32 or f64, got %s",
                            eg_dtype_name(w->dtype));
    if (w->n_dims != 1 || w->shape[0] < 1)
        return eg__op_error(op, EG_ERR_SHAPE, "the weights must be one non-empty axis, got %s",
                            eg__shape_format(w->n_dims, w->shape, s, TEXT));
    if (attrs->ints[0] < 1)
        return eg__op_error(op, EG_ERR_INVALID_ARGUMENT, "%lld draws; at least 1",
                            (long long)attrs->ints[0]);
    meta->dtype = EG_DTYPE_I64;
    meta->n_dims = 1;
    meta->shape[0] = attrs->ints[0];
    return EG_OK;
}
