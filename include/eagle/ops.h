/* Eagle — ops. Each runs at once (eager mode) and is recorded on every active gradient tape.
 *
 * Common contract for every function here:
 *  - inputs are borrowed, the result is a new reference (owned by the current scope, if any);
 *  - on failure the result is NULL and eg_last_error() names the op, the shapes/dtypes involved
 *    and the caller's file:line; a NULL input returns NULL quietly when an error is already
 *    pending (so chains are checked once at the end), and raises EG_ERR_NULL_ARGUMENT otherwise;
 *  - binary ops broadcast like numpy; the dtypes of the operands must match (no implicit
 *    promotion, as in TensorFlow) — use eg_cast;
 *  - float math (unary ops, pow, softmax, ...) runs on f32 and f64; add/sub/mul/div/maximum/
 *    minimum and comparisons also on i32 and i64; f16/bf16 are storage types: cast them to f32;
 *  - negative axes count from the end;
 *  - view ops (reshape when possible, permute, transpose, slice, broadcast_to, squeeze, unsqueeze)
 *    share storage with their input: writing through one is visible through the other. */
#ifndef EAGLE_OPS_H
#define EAGLE_OPS_H

#include "eagle/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- elementwise unary: y = f(x), same shape and dtype ---- */
eg_tensor *eg_neg(const eg_tensor *x);
eg_tensor *eg_abs(const eg_tensor *x);
eg_tensor *eg_exp(const eg_tensor *x);
eg_tensor *eg_log(const eg_tensor *x);
eg_tensor *eg_sqrt(const eg_tensor *x);
eg_tensor *eg_rsqrt(const eg_tensor *x);
eg_tensor *eg_sin(const eg_tensor *x);
eg_tensor *eg_cos(const eg_tensor *x);
eg_tensor *eg_tanh(const eg_tensor *x);
eg_tensor *eg_sigmoid(const eg_tensor *x);
eg_tensor *eg_relu(const eg_tensor *x);
/* Exact GELU: x * Phi(x) (Keras approximate=False, PyTorch default). */
eg_tensor *eg_gelu(const eg_tensor *x);
/* log(1 + exp(x)), computed without overflow. */
eg_tensor *eg_softplus(const eg_tensor *x);
/* -1, 0 or 1; its gradient is zero (the op is not recorded on tapes). */
eg_tensor *eg_sign(const eg_tensor *x);
eg_tensor *eg_square(const eg_tensor *x);
eg_tensor *eg_reciprocal(const eg_tensor *x);
eg_tensor *eg_erf(const eg_tensor *x);

/* ---- elementwise binary with broadcasting ---- */
eg_tensor *eg_add(const eg_tensor *a, const eg_tensor *b);
eg_tensor *eg_sub(const eg_tensor *a, const eg_tensor *b);
eg_tensor *eg_mul(const eg_tensor *a, const eg_tensor *b);
eg_tensor *eg_div(const eg_tensor *a, const eg_tensor *b);
eg_tensor *eg_pow(const eg_tensor *a, const eg_tensor *b);
eg_tensor *eg_maximum(const eg_tensor *a, const eg_tensor *b);
eg_tensor *eg_minimum(const eg_tensor *a, const eg_tensor *b);
/* a (op) scalar, with the scalar in a's dtype. */
eg_tensor *eg_add_scalar(const eg_tensor *a, double value);
eg_tensor *eg_mul_scalar(const eg_tensor *a, double value);
eg_tensor *eg_pow_scalar(const eg_tensor *a, double exponent);

/* ---- comparisons (bool result, broadcasting) and selection ---- */
eg_tensor *eg_equal(const eg_tensor *a, const eg_tensor *b);
eg_tensor *eg_not_equal(const eg_tensor *a, const eg_tensor *b);
eg_tensor *eg_less(const eg_tensor *a, const eg_tensor *b);
eg_tensor *eg_less_equal(const eg_tensor *a, const eg_tensor *b);
eg_tensor *eg_greater(const eg_tensor *a, const eg_tensor *b);
eg_tensor *eg_greater_equal(const eg_tensor *a, const eg_tensor *b);
/* cond ? a : b elementwise; cond is bool; all three broadcast together. */
eg_tensor *eg_where(const eg_tensor *cond, const eg_tensor *a, const eg_tensor *b);
/* Converts between any two dtypes (floats to ints truncate toward zero; to bool: != 0). */
eg_tensor *eg_cast(const eg_tensor *x, eg_dtype dtype);
/* min(max(x, low), high). */
eg_tensor *eg_clip(const eg_tensor *x, double low, double high);

/* ---- reductions: over n_axes axes (n_axes == 0 or axes == NULL: all axes) ---- */
eg_tensor *eg_sum(const eg_tensor *x, int n_axes, const int *axes, bool keepdims);
eg_tensor *eg_mean(const eg_tensor *x, int n_axes, const int *axes, bool keepdims);
eg_tensor *eg_max(const eg_tensor *x, int n_axes, const int *axes, bool keepdims);
eg_tensor *eg_min(const eg_tensor *x, int n_axes, const int *axes, bool keepdims);
eg_tensor *eg_logsumexp(const eg_tensor *x, int n_axes, const int *axes, bool keepdims);
/* Population variance (divides by N), like tf.math.reduce_variance. */
eg_tensor *eg_var(const eg_tensor *x, int n_axes, const int *axes, bool keepdims);
/* Index (i64) of the first largest / smallest element along one axis. */
eg_tensor *eg_argmax(const eg_tensor *x, int axis, bool keepdims);
eg_tensor *eg_argmin(const eg_tensor *x, int axis, bool keepdims);
eg_tensor *eg_softmax(const eg_tensor *x, int axis);
eg_tensor *eg_log_softmax(const eg_tensor *x, int axis);

/* ---- linear algebra ----
 * a: (..., M, K), b: (..., K, N) -> (..., M, N); leading (batch) dims broadcast; a 1-d operand is
 * promoted like numpy.matmul. transpose_a/b transpose the last two axes of that operand first
 * (no copy is made). */
eg_tensor *eg_matmul(const eg_tensor *a, const eg_tensor *b);
eg_tensor *eg_matmul_ex(const eg_tensor *a, const eg_tensor *b, bool transpose_a, bool transpose_b);
/* The product computed in low precision, what mixed precision layers run: compute_dtype is bf16
 * or f16; a and b are each f32 or compute_dtype (f32 operands, e.g. master weights, are rounded
 * to compute_dtype as the product reads them: no cast pass, no copy); products are summed in f32
 * and the result is result_dtype, f32 or compute_dtype (rounded once). Values are those of
 * casting the f32 operands to compute_dtype first and multiplying in compute_dtype with f32
 * accumulation; the gradients follow the same rule (each in its operand's dtype). Both operands
 * at least 2-d. New reference; NULL with an error for other dtypes or shapes. */
eg_tensor *eg_matmul_low_precision(const eg_tensor *a, const eg_tensor *b, bool transpose_a,
                                   bool transpose_b, eg_dtype compute_dtype,
                                   eg_dtype result_dtype);

/* ---- shape and views ---- */
/* One entry of shape may be -1 (inferred). A view when t's strides allow, else a copy. */
eg_tensor *eg_reshape(const eg_tensor *t, int n_dims, const int64_t *shape);
/* axes: a permutation of 0..n_dims-1 (n_dims = t's). */
eg_tensor *eg_permute(const eg_tensor *t, const int *axes);
eg_tensor *eg_transpose(const eg_tensor *t, int axis0, int axis1);
/* Elements start, start+step, ... < stop (step > 0) along axis; start/stop clamp like Python
 * slices and may be negative. */
eg_tensor *eg_slice(const eg_tensor *t, int axis, int64_t start, int64_t stop, int64_t step);
eg_tensor *eg_broadcast_to(const eg_tensor *t, int n_dims, const int64_t *shape);
/* Removes a size-1 axis. */
eg_tensor *eg_squeeze(const eg_tensor *t, int axis);
/* Inserts a size-1 axis at position axis (0..n_dims). */
eg_tensor *eg_unsqueeze(const eg_tensor *t, int axis);
/* Row-major copy when t is not contiguous; otherwise a new view of t (same storage, no copy). */
eg_tensor *eg_contiguous(const eg_tensor *t);
/* Always a new contiguous copy with its own storage. */
eg_tensor *eg_copy(const eg_tensor *t);
/* A contiguous copy of t on `device` (any two devices, the same one included: then like
 * eg_copy); the one op whose input and result live on different devices. Differentiable: the
 * gradient is copied back to t's device. NULL + error for a NULL device. */
eg_tensor *eg_tensor_to(const eg_tensor *t, const eg_device *device);
/* Joins n tensors of equal shape except along axis. */
eg_tensor *eg_concat(int n, eg_tensor *const *tensors, int axis);
/* Joins n tensors of equal shape along a new axis. */
eg_tensor *eg_stack(int n, eg_tensor *const *tensors, int axis);
/* Splits t along axis into n pieces of the given sizes (sizes == NULL: n equal pieces; then the
 * axis size must divide by n). Writes n new references into out. */
eg_status eg_split(const eg_tensor *t, int axis, int n, const int64_t *sizes, eg_tensor **out);
/* Picks entries along axis by indices (i32/i64, any shape): the result's shape is
 * t.shape[:axis] + indices.shape + t.shape[axis+1:]. Out-of-range indices are an error. */
eg_tensor *eg_gather(const eg_tensor *t, const eg_tensor *indices, int axis);
/* The dense tensor a row-sparse one (tensor.h) stands for: zeros but for its rows, repeated rows
 * added up. EG_ERR_INVALID_ARGUMENT for a tensor that is not row-sparse. */
eg_tensor *eg_row_sparse_to_dense(const eg_tensor *t);
/* (…) int indices -> (…, depth) with on/off values 1/0 in dtype; out-of-range rows are all 0. */
eg_tensor *eg_one_hot(const eg_tensor *indices, int64_t depth, eg_dtype dtype);
/* Pads with a constant; widths has 2 entries per axis (before, after), all >= 0. */
eg_tensor *eg_pad(const eg_tensor *t, const int64_t *widths, double value);

/* ---- neural-network ops ---- */
/* logits: (B, C) float, labels: (B,) i32/i64 in [0, C) -> (B,) per-example loss, computed in one
 * numerically stable pass; gradient (softmax - one_hot) * upstream. */
eg_tensor *eg_sparse_softmax_cross_entropy(const eg_tensor *logits, const eg_tensor *labels);
/* training: zeroes each element with probability rate and scales the rest by 1/(1-rate); the
 * mask depends only on (seed, element index). Not training or rate == 0: returns x itself. */
eg_tensor *eg_dropout(const eg_tensor *x, double rate, uint64_t seed, bool training);
/* Training-mode dropout whose seed is drawn from generator (NULL: the default generator, see
 * eg_manual_seed): each call a new mask, also in a traced function, where every replay draws a
 * new seed as the eager call would (eg_dropout's explicit seed stays fixed there). What the
 * Dropout layer uses. rate == 0: returns x itself. */
eg_tensor *eg_dropout_random(const eg_tensor *x, double rate, eg_generator *generator);

/* ---- convolution and pooling over 2-d images ----
 * Images are 4-d: NHWC (batch, height, width, channels; Keras' default) or NCHW. Filters are
 * HWIO: (KH, KW, C_in / groups, C_out) whatever the data format, like TensorFlow's. Results do
 * not depend on the number of threads. */
typedef enum eg_padding {
    EG_PADDING_VALID = 0, /* none: every window lies inside the input */
    EG_PADDING_SAME,      /* TF/Keras 'same': output size ceil(input / stride), the padding split
                             evenly with any odd row/column at the bottom/right */
    EG_PADDING_EXPLICIT,  /* the options' explicit_padding */
    EG_PADDING_COUNT
} eg_padding;

typedef enum eg_data_format {
    EG_DATA_FORMAT_NHWC = 0, /* channels last */
    EG_DATA_FORMAT_NCHW,     /* channels first (PyTorch's layout) */
    EG_DATA_FORMAT_COUNT
} eg_data_format;

/* A zero-initialised struct is a valid default: stride 1, no dilation, VALID, one group, NHWC. */
typedef struct eg_conv2d_options {
    int strides[2];              /* (height, width); 0 means 1 */
    int dilations[2];            /* 0 means 1 */
    eg_padding padding;          /* default VALID */
    int64_t explicit_padding[4]; /* EXPLICIT: top, bottom, left, right (>= 0) */
    int groups;                  /* 0 means 1; C_in and C_out must divide by it; groups == C_in
                                    is a depthwise convolution */
    eg_data_format data_format;  /* default NHWC */
} eg_conv2d_options;

/* y[b, i, j, o] = sum over (p, q, c) of x[b, i*s + p*d - pad, j*s + q*d - pad, c] *
 * filter[p, q, c, o] (cross-correlation, like every framework), within o's group. x (B, H, W, C)
 * or (B, C, H, W); filter (KH, KW, C / groups, O); same float dtype. options NULL: defaults. */
eg_tensor *eg_conv2d(const eg_tensor *x, const eg_tensor *filter, const eg_conv2d_options *options);
/* The transposed convolution (the gradient of eg_conv2d with respect to its input, like
 * tf.nn.conv2d_transpose): x holds C_out channels, filter is the forward convolution's
 * (KH, KW, C / groups, C_out), the result has C channels. output_shape (4 entries in the data
 * format) gives the result's shape; NULL picks the smallest: (in - 1) * stride + dilated kernel
 * (minus the padding) for VALID/EXPLICIT, in * stride for SAME. */
eg_tensor *eg_conv2d_transpose(const eg_tensor *x, const eg_tensor *filter,
                               const int64_t *output_shape, const eg_conv2d_options *options);

/* A zero-initialised struct means a 2x2 window, strides = the window, VALID, NHWC. */
typedef struct eg_pool2d_options {
    int pool_size[2];            /* 0 means 2 (Keras' default) */
    int strides[2];              /* 0 means the pool size (Keras' default) */
    eg_padding padding;          /* default VALID */
    int64_t explicit_padding[4]; /* EXPLICIT: top, bottom, left, right, each < the pool size */
    eg_data_format data_format;  /* default NHWC */
} eg_pool2d_options;

/* Largest element of each window (padding never wins); the gradient goes to the first largest
 * element of each window (row-major order). options NULL: defaults. */
eg_tensor *eg_max_pool2d(const eg_tensor *x, const eg_pool2d_options *options);
/* Mean of each window over the elements inside the input (padding is not counted, like
 * TensorFlow/Keras). */
eg_tensor *eg_avg_pool2d(const eg_tensor *x, const eg_pool2d_options *options);
/* Mean over height and width: (B, C), or (B, 1, 1, C) / (B, C, 1, 1) with keepdims. */
eg_tensor *eg_global_avg_pool2d(const eg_tensor *x, eg_data_format data_format, bool keepdims);
/* Nearest-neighbour upsampling by integer factors (>= 1): each pixel repeated size_h x size_w
 * times (Keras UpSampling2D, interpolation "nearest"). */
eg_tensor *eg_upsample2d(const eg_tensor *x, int size_h, int size_w, eg_data_format data_format);
/* Zeros around the images: padding = (top, bottom, left, right), all >= 0 (Keras ZeroPadding2D). */
eg_tensor *eg_zero_padding2d(const eg_tensor *x, const int64_t *padding,
                             eg_data_format data_format);

/* ---- normalization ---- */
/* x * scale + shift in one pass; the three broadcast together (same float dtype). */
eg_tensor *eg_mul_add(const eg_tensor *x, const eg_tensor *scale, const eg_tensor *shift);
/* Mean and population variance of x over n_axes axes (0: all), like tf.nn.moments; writes two
 * new references (NULL both on failure). */
eg_status eg_moments(const eg_tensor *x, int n_axes, const int *axes, bool keepdims,
                     eg_tensor **mean, eg_tensor **variance);
/* (x - mean) * scale / sqrt(variance + epsilon) + offset, all broadcasting against x, like
 * tf.nn.batch_normalization: with batch moments this is batch normalization while training,
 * with running averages at inference. offset and scale may be NULL (0 and 1). Gradients flow to
 * every tensor argument, through mean and variance to x when they were computed from it. */
eg_tensor *eg_batch_normalization(const eg_tensor *x, const eg_tensor *mean,
                                  const eg_tensor *variance, const eg_tensor *offset,
                                  const eg_tensor *scale, double epsilon);
/* Batch normalization while training, fused: x normalized with its own mean and population
 * variance over n_axes axes (0: all), then * scale + offset (NULL: 1 and 0; both broadcast to the
 * statistics' keepdims shape, e.g. (C,) for NHWC over (0, 1, 2)). The same values as
 * eg_moments + eg_batch_normalization, with a backward of five passes over x instead of about a
 * dozen. batch_mean / batch_variance (may be NULL) get new references to the statistics, shaped
 * like x with the reduced axes kept as size 1 (for running averages). */
eg_tensor *eg_batch_norm_training(const eg_tensor *x, int n_axes, const int *axes,
                                  const eg_tensor *offset, const eg_tensor *scale, double epsilon,
                                  eg_tensor **batch_mean, eg_tensor **batch_variance);
/* Normalizes x over n_axes axes (0 or NULL: the last axis) with its own moments, then scales
 * and shifts: (x - mean) / sqrt(var + epsilon) * scale + offset (scale/offset may be NULL and
 * broadcast against x, typically shaped like the normalized axes). */
eg_tensor *eg_layer_normalization(const eg_tensor *x, int n_axes, const int *axes,
                                  const eg_tensor *scale, const eg_tensor *offset, double epsilon);

/* ---- fast-math regions: cheaper transcendental functions, their error on the table ----
 * While this thread's depth is > 0, eg_exp, eg_tanh, eg_sigmoid and eg_gelu, and the sigmoid and
 * tanh activations of eg_dense / eg_dense_low_precision, are built to compute with cheaper
 * approximations where they can: on the CPU, for an f32 result (the activation's input and
 * output f32), in eager mode and inside lazy mode's and graph mode's fused elementwise loops
 * alike, with the same bits in all three. Their maximum errors against the exact functions (at
 * each CPU level; gelu against the exact erf gelu, not a tanh form) are documented and asserted
 * by tests/test_vecmath.c: tens of ulp (a relative error of about 1e-6 to 7e-6) where the exact
 * result is not tiny, where the exact functions promise 1 to 8 ulp. Results saturate: exp_fast
 * gives inf above about 88.72 and 0 below -87.33 (no subnormal results), tanh gives +-1, sigmoid
 * 0 and 1; NaN gives NaN.
 *
 * What the region changes is read when an op is built (recorded, in lazy and graph modes) and
 * kept with the op: a lazy tensor built inside a region and realized outside computes fast, and
 * a function traced by eg_function outside a region is traced again for calls inside one (and
 * the other way round). Other devices (CUDA) and dtypes (f64, bf16, f16) compute exactly; other
 * ops (softmax, log, softplus, the recurrent cells, attention) are not affected. Gradients: the
 * backward rules of exp, tanh, sigmoid and dense reuse the forward output, so they carry its
 * approximation; gelu's rule builds exp and erf ops when the gradient is computed, which are
 * fast when that happens inside a region.
 *
 * Regions nest (a depth count); eg_fast_math_end at depth 0 does nothing. They are per thread:
 * a thread starts with none. */
void eg_fast_math_begin(void);
void eg_fast_math_end(void);
/* Whether this thread is inside a fast-math region. */
bool eg_fast_math_enabled(void);

/* ---- activations and fused layer ops ---- */

/* Activation functions of Dense and Activation layers. SOFTMAX is over the last axis; GELU is
 * the exact x * Phi(x). */
typedef enum eg_activation {
    EG_ACTIVATION_NONE = 0, /* identity ("linear") */
    EG_ACTIVATION_RELU,
    EG_ACTIVATION_SIGMOID,
    EG_ACTIVATION_TANH,
    EG_ACTIVATION_GELU,
    EG_ACTIVATION_SOFTMAX,
    EG_ACTIVATION_COUNT
} eg_activation;

/* Keras' name ("linear", "relu", "sigmoid", "tanh", "gelu", "softmax"); "invalid" when out of
 * range. Static storage. */
const char *eg_activation_name(eg_activation activation);
/* activation(x) as a new tensor (NONE: a new reference to the same values, as a view). NULL with
 * an error for an invalid activation or a failed op. */
eg_tensor *eg_activation_apply(eg_activation activation, const eg_tensor *x);
/* activation(x · kernel + bias) as one op (a Dense layer's forward pass): x (M, K), kernel
 * (K, N), bias (N,), all f32 or all f64; activation NONE, RELU, SIGMOID or TANH. The bias and the
 * activation are applied to each tile of the product while it is in cache; values and gradients
 * are bitwise those of eg_activation_apply(activation, eg_add(eg_matmul(x, kernel), bias)). New
 * reference, NULL with an error for other shapes, dtypes or activations. */
eg_tensor *eg_dense(const eg_tensor *x, const eg_tensor *kernel, const eg_tensor *bias,
                    eg_activation activation);
/* eg_dense computed in low precision as eg_matmul_low_precision computes: x, kernel and bias
 * each f32 or compute_dtype (bf16 or f16); the bias and activation are applied in f32 before
 * the one rounding to result_dtype (f32 or compute_dtype). */
eg_tensor *eg_dense_low_precision(const eg_tensor *x, const eg_tensor *kernel,
                                  const eg_tensor *bias, eg_activation activation,
                                  eg_dtype compute_dtype, eg_dtype result_dtype);
/* activation(eg_batch_norm_training(x, ...)) as one op (a BatchNormalization layer with an
 * activation, while training); activation NONE or RELU. The activation is applied in the same
 * pass as the normalization, and the backward's two passes apply relu's gradient themselves
 * (relu_backward's pass over memory disappears); values and gradients are bitwise those of
 * eg_activation_apply(activation, eg_batch_norm_training(...)). Arguments, statistics and
 * ownership as eg_batch_norm_training (eagle/ops.h). New reference, NULL with an error for other
 * activations or what eg_batch_norm_training refuses. */
eg_tensor *eg_batch_norm_training_activation(const eg_tensor *x, int n_axes, const int *axes,
                                             const eg_tensor *offset, const eg_tensor *scale,
                                             double epsilon, eg_activation activation,
                                             eg_tensor **batch_mean, eg_tensor **batch_variance);

/* ---- recurrent cells: one time step, its gates in one kernel ----
 * The products that make a cell's pre-activations are separate ops (a layer computes the whole
 * sequence's input projection as one product). f32 or f64, one dtype for all arguments; the
 * gradient flows to every argument (second order too). */
/* An LSTM step as Keras' LSTM computes it (activation tanh, recurrent activation sigmoid): z
 * (B, 4H) = x kernel + h recurrent_kernel + bias, gates in Keras' order i, f, c, o; c (B, H) the
 * previous cell state. i = sigmoid(z_i), f = sigmoid(z_f), g = tanh(z_c), o = sigmoid(z_o);
 * c' = f c + i g; h' = o tanh(c'). *h_out and *c_out get new references to h' and c' (B, H); both
 * NULL with an error for other shapes or dtypes, or NULL h_out / c_out. */
eg_status eg_lstm_cell(const eg_tensor *z, const eg_tensor *c, eg_tensor **h_out,
                       eg_tensor **c_out);
/* A GRU step as Keras' GRU with reset_after = true (its default, and cuDNN's): x_proj (B, 3H) =
 * x kernel + input bias, h_proj (B, 3H) = h recurrent_kernel + recurrent bias, gates in Keras'
 * order z, r, h; h (B, H) the previous state. z = sigmoid(x_z + h_z), r = sigmoid(x_r + h_r),
 * n = tanh(x_h + r h_h), h' = z h + (1 - z) n. New reference (B, H), NULL with an error for other
 * shapes or dtypes. */
eg_tensor *eg_gru_cell(const eg_tensor *x_proj, const eg_tensor *h_proj, const eg_tensor *h);

/* ---- attention ---- */
/* softmax(scale q k^T, masked) v per batch and head, fused (FlashAttention's scheme: the keys are
 * visited in blocks with an online softmax), so the (Tq, Tk) scores never exist whole: memory
 * beyond the result is a few blocks per thread whatever the lengths. q (B, N, Tq, D), k (B, N,
 * Tk, D), v (B, N, Tk, Dv), one float dtype (f32 or f64); key_mask NULL or bool (B, Tk), true
 * where a key may be attended (padding false); causal: query i sees keys j <= i (PyTorch's
 * is_causal). scale 0 means 1 / sqrt(D). A query with no visible key gets zeros. Result (B, N,
 * Tq, Dv); the gradient flows to q, k and v (second order too). NULL with an error for other
 * shapes or dtypes or a negative scale. */
eg_tensor *eg_scaled_dot_product_attention(const eg_tensor *q, const eg_tensor *k,
                                           const eg_tensor *v, const eg_tensor *key_mask,
                                           bool causal, double scale);

/* ---- collectives: sums over the replicas of a data-parallel step (eagle/distribute.h) ----
 * Inside a replica's step (eg_strategy_run) they sum over every replica of the strategy, each
 * replica getting the sum, added in replica order (replica 0 first) whatever the timing, so the
 * bits never depend on it; outside any replica they act on a group of one. Every replica must make
 * the same collective calls in the same order (a replica that does not is reported when the
 * group's timeout passes, naming it). f32 or f64 only. Made on the replica's device. */
/* x summed over the replicas (a copy of x outside a replica). Differentiable: the gradient is the
 * all-reduce of the gradient (the gradient of the sum of every replica's objective). */
eg_tensor *eg_all_reduce(const eg_tensor *x);
/* Starts summing n tensors (one float dtype) over the replicas: returns a 1-d buffer holding them
 * packed in order, which is being summed while the caller goes on (the first way to overlap
 * communication with computation); *tag gets the reduction's name. Only eg_all_reduce_done may
 * read the buffer. Not differentiable. */
eg_tensor *eg_all_reduce_start(int n, eg_tensor *const *tensors, int64_t *tag);
/* Waits for the sum started as `tag` and returns it (a new 1-d tensor). */
eg_tensor *eg_all_reduce_done(const eg_tensor *started, int64_t tag);

#if !defined(EG_NO_CALLSITE)
#define eg_neg(...)           EG_CALLSITE_(eg_neg(__VA_ARGS__))
#define eg_abs(...)           EG_CALLSITE_(eg_abs(__VA_ARGS__))
#define eg_exp(...)           EG_CALLSITE_(eg_exp(__VA_ARGS__))
#define eg_log(...)           EG_CALLSITE_(eg_log(__VA_ARGS__))
#define eg_sqrt(...)          EG_CALLSITE_(eg_sqrt(__VA_ARGS__))
#define eg_rsqrt(...)         EG_CALLSITE_(eg_rsqrt(__VA_ARGS__))
#define eg_sin(...)           EG_CALLSITE_(eg_sin(__VA_ARGS__))
#define eg_cos(...)           EG_CALLSITE_(eg_cos(__VA_ARGS__))
#define eg_tanh(...)          EG_CALLSITE_(eg_tanh(__VA_ARGS__))
#define eg_sigmoid(...)       EG_CALLSITE_(eg_sigmoid(__VA_ARGS__))
#define eg_relu(...)          EG_CALLSITE_(eg_relu(__VA_ARGS__))
#define eg_gelu(...)          EG_CALLSITE_(eg_gelu(__VA_ARGS__))
#define eg_softplus(...)      EG_CALLSITE_(eg_softplus(__VA_ARGS__))
#define eg_sign(...)          EG_CALLSITE_(eg_sign(__VA_ARGS__))
#define eg_square(...)        EG_CALLSITE_(eg_square(__VA_ARGS__))
#define eg_reciprocal(...)    EG_CALLSITE_(eg_reciprocal(__VA_ARGS__))
#define eg_erf(...)           EG_CALLSITE_(eg_erf(__VA_ARGS__))
#define eg_add(...)           EG_CALLSITE_(eg_add(__VA_ARGS__))
#define eg_sub(...)           EG_CALLSITE_(eg_sub(__VA_ARGS__))
#define eg_mul(...)           EG_CALLSITE_(eg_mul(__VA_ARGS__))
#define eg_div(...)           EG_CALLSITE_(eg_div(__VA_ARGS__))
#define eg_pow(...)           EG_CALLSITE_(eg_pow(__VA_ARGS__))
#define eg_maximum(...)       EG_CALLSITE_(eg_maximum(__VA_ARGS__))
#define eg_minimum(...)       EG_CALLSITE_(eg_minimum(__VA_ARGS__))
#define eg_add_scalar(...)    EG_CALLSITE_(eg_add_scalar(__VA_ARGS__))
#define eg_mul_scalar(...)    EG_CALLSITE_(eg_mul_scalar(__VA_ARGS__))
#define eg_pow_scalar(...)    EG_CALLSITE_(eg_pow_scalar(__VA_ARGS__))
#define eg_equal(...)         EG_CALLSITE_(eg_equal(__VA_ARGS__))
#define eg_not_equal(...)     EG_CALLSITE_(eg_not_equal(__VA_ARGS__))
#define eg_less(...)          EG_CALLSITE_(eg_less(__VA_ARGS__))
#define eg_less_equal(...)    EG_CALLSITE_(eg_less_equal(__VA_ARGS__))
#define eg_greater(...)       EG_CALLSITE_(eg_greater(__VA_ARGS__))
#define eg_greater_equal(...) EG_CALLSITE_(eg_greater_equal(__VA_ARGS__))
#define eg_where(...)         EG_CALLSITE_(eg_where(__VA_ARGS__))
#define eg_cast(...)          EG_CALLSITE_(eg_cast(__VA_ARGS__))
#define eg_clip(...)          EG_CALLSITE_(eg_clip(__VA_ARGS__))
#define eg_sum(...)           EG_CALLSITE_(eg_sum(__VA_ARGS__))
#define eg_mean(...)          EG_CALLSITE_(eg_mean(__VA_ARGS__))
#define eg_max(...)           EG_CALLSITE_(eg_max(__VA_ARGS__))
#define eg_min(...)           EG_CALLSITE_(eg_min(__VA_ARGS__))
#define eg_logsumexp(...)     EG_CALLSITE_(eg_logsumexp(__VA_ARGS__))
#define eg_var(...)           EG_CALLSITE_(eg_var(__VA_ARGS__))
#define eg_argmax(...)        EG_CALLSITE_(eg_argmax(__VA_ARGS__))
#define eg_argmin(...)        EG_CALLSITE_(eg_argmin(__VA_ARGS__))
#define eg_softmax(...)       EG_CALLSITE_(eg_softmax(__VA_ARGS__))
#define eg_log_softmax(...)   EG_CALLSITE_(eg_log_softmax(__VA_ARGS__))
#define eg_matmul(...)        EG_CALLSITE_(eg_matmul(__VA_ARGS__))
#define eg_row_sparse_to_dense(...)  EG_CALLSITE_(eg_row_sparse_to_dense(__VA_ARGS__))
#define eg_matmul_ex(...)     EG_CALLSITE_(eg_matmul_ex(__VA_ARGS__))
#define eg_matmul_low_precision(...) EG_CALLSITE_(eg_matmul_low_precision(__VA_ARGS__))
#define eg_reshape(...)       EG_CALLSITE_(eg_reshape(__VA_ARGS__))
#define eg_permute(...)       EG_CALLSITE_(eg_permute(__VA_ARGS__))
#define eg_transpose(...)     EG_CALLSITE_(eg_transpose(__VA_ARGS__))
#define eg_slice(...)         EG_CALLSITE_(eg_slice(__VA_ARGS__))
#define eg_broadcast_to(...)  EG_CALLSITE_(eg_broadcast_to(__VA_ARGS__))
#define eg_squeeze(...)       EG_CALLSITE_(eg_squeeze(__VA_ARGS__))
#define eg_unsqueeze(...)     EG_CALLSITE_(eg_unsqueeze(__VA_ARGS__))
#define eg_contiguous(...)    EG_CALLSITE_(eg_contiguous(__VA_ARGS__))
#define eg_copy(...)          EG_CALLSITE_(eg_copy(__VA_ARGS__))
#define eg_tensor_to(...)     EG_CALLSITE_(eg_tensor_to(__VA_ARGS__))
#define eg_concat(...)        EG_CALLSITE_(eg_concat(__VA_ARGS__))
#define eg_stack(...)         EG_CALLSITE_(eg_stack(__VA_ARGS__))
#define eg_split(...)         EG_CALLSITE_(eg_split(__VA_ARGS__))
#define eg_gather(...)        EG_CALLSITE_(eg_gather(__VA_ARGS__))
#define eg_one_hot(...)       EG_CALLSITE_(eg_one_hot(__VA_ARGS__))
#define eg_pad(...)           EG_CALLSITE_(eg_pad(__VA_ARGS__))
#define eg_sparse_softmax_cross_entropy(...)                                                       \
    EG_CALLSITE_(eg_sparse_softmax_cross_entropy(__VA_ARGS__))
#define eg_dropout(...)             EG_CALLSITE_(eg_dropout(__VA_ARGS__))
#define eg_dropout_random(...)      EG_CALLSITE_(eg_dropout_random(__VA_ARGS__))
#define eg_conv2d(...)              EG_CALLSITE_(eg_conv2d(__VA_ARGS__))
#define eg_conv2d_transpose(...)    EG_CALLSITE_(eg_conv2d_transpose(__VA_ARGS__))
#define eg_max_pool2d(...)          EG_CALLSITE_(eg_max_pool2d(__VA_ARGS__))
#define eg_avg_pool2d(...)          EG_CALLSITE_(eg_avg_pool2d(__VA_ARGS__))
#define eg_global_avg_pool2d(...)   EG_CALLSITE_(eg_global_avg_pool2d(__VA_ARGS__))
#define eg_upsample2d(...)          EG_CALLSITE_(eg_upsample2d(__VA_ARGS__))
#define eg_zero_padding2d(...)      EG_CALLSITE_(eg_zero_padding2d(__VA_ARGS__))
#define eg_mul_add(...)             EG_CALLSITE_(eg_mul_add(__VA_ARGS__))
#define eg_moments(...)             EG_CALLSITE_(eg_moments(__VA_ARGS__))
#define eg_batch_normalization(...) EG_CALLSITE_(eg_batch_normalization(__VA_ARGS__))
#define eg_layer_normalization(...) EG_CALLSITE_(eg_layer_normalization(__VA_ARGS__))
#define eg_batch_norm_training(...) EG_CALLSITE_(eg_batch_norm_training(__VA_ARGS__))
#define eg_activation_apply(...)    EG_CALLSITE_(eg_activation_apply(__VA_ARGS__))
#define eg_dense(...)               EG_CALLSITE_(eg_dense(__VA_ARGS__))
#define eg_dense_low_precision(...) EG_CALLSITE_(eg_dense_low_precision(__VA_ARGS__))
#define eg_batch_norm_training_activation(...)                                                     \
    EG_CALLSITE_(eg_batch_norm_training_activation(__VA_ARGS__))
#define eg_scaled_dot_product_attention(...)                                                       \
    EG_CALLSITE_(eg_scaled_dot_product_attention(__VA_ARGS__))
#define eg_lstm_cell(...)        EG_CALLSITE_(eg_lstm_cell(__VA_ARGS__))
#define eg_gru_cell(...)         EG_CALLSITE_(eg_gru_cell(__VA_ARGS__))
#define eg_all_reduce(...)       EG_CALLSITE_(eg_all_reduce(__VA_ARGS__))
#define eg_all_reduce_start(...) EG_CALLSITE_(eg_all_reduce_start(__VA_ARGS__))
#define eg_all_reduce_done(...)  EG_CALLSITE_(eg_all_reduce_done(__VA_ARGS__))
#endif

#ifdef __cplusplus
}
#endif
#endif
