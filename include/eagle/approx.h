/* Eagle — approximate computation: int8 products for inference.
 *
 * The ops here trade accuracy for speed on purpose; their results differ from eg_dense's and
 * eg_conv2d's by the quantization error, which a caller measures against the exact op on the
 * same inputs. They follow ops.h's common contract (new references, NULL arguments give NULL,
 * errors name the call site) and record no gradient (they are for evaluation).
 *
 * Quantization: weights are symmetric with one f32 scale per output channel (the last axis of a
 * Dense kernel (K, N) or an HWIO filter (KH, KW, C, O)); activations are asymmetric u8 with one
 * scale and zero point for the whole tensor, taken from the tensor's own minimum and maximum
 * (dynamic) or from a calibrated range. Sums are exact in int32, so the result does not depend on
 * the CPU path or the thread count. On CPUs with AVX2 the products use vpmaddubsw, whose int16
 * pair sums are exact only for weights of at most 7 bits (|q| <= 63): quantize with bits = 7 for
 * them (8-bit weights run there too, through a slower portable loop). */
#ifndef EAGLE_APPROX_H
#define EAGLE_APPROX_H

#include "eagle/nn.h"
#include "eagle/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* q = clamp(round(w / scale), -L, L) with L = 2^(bits-1) - 1 and scale, per slice along w's last
 * axis, the slice's largest |w| / L (1 for a slice of zeros). w f32 with at least one axis;
 * bits 2..8. Returns q (i8, w's shape) and puts the scales (f32 (C), a new reference) in *scale;
 * NULL and *scale NULL on error (EG_ERR_INVALID_ARGUMENT for bits, EG_ERR_DTYPE for w). */
eg_tensor *eg_quantize_int8(const eg_tensor *w, int bits, eg_tensor **scale);

/* The range a calibration keeps for an activation: f32 (2) [min(min x, 0), max(max x, 0)]. To
 * calibrate over several batches take eg_int8_range_merge of the ranges. x f32, any shape. */
eg_tensor *eg_int8_range(const eg_tensor *x);
/* The range covering both a and b (f32 (2) each): a new (2). */
eg_tensor *eg_int8_range_merge(const eg_tensor *a, const eg_tensor *b);

/* activation(x · (q * scale) + bias) with x quantized to u8 first: x f32 (M, K), q i8 (K, N) and
 * scale f32 (N) from eg_quantize_int8, bias f32 (N) or NULL, range f32 (2) from eg_int8_range (a
 * calibration) or NULL (x's own range, each call). activation none, relu, sigmoid or tanh.
 * K <= 65535 (int32 sums stay exact). f32 (M, N). */
eg_tensor *eg_dense_int8(const eg_tensor *x, const eg_tensor *q, const eg_tensor *scale,
                         const eg_tensor *bias, const eg_tensor *range, eg_activation activation);

/* eg_conv2d of x with the filter q * scale, x quantized to u8 first (padding holds exact zeros):
 * x f32 NHWC, q i8 HWIO (KH, KW, C, O), scale f32 (O), range as eg_dense_int8's. One group,
 * NHWC only; options as eg_conv2d's (NULL: defaults). f32 NHWC. */
eg_tensor *eg_conv2d_int8(const eg_tensor *x, const eg_tensor *q, const eg_tensor *scale,
                          const eg_tensor *range, const eg_conv2d_options *options);

/* ---- layers ---- */

/* Snapshots a built Dense or Conv2D layer's f32 kernel as int8 (eg_quantize_int8 with `bits`):
 * from then on its inference calls (training false, f32 inputs under the float32 policy; Dense
 * on 2-d inputs, Conv2D NHWC with one group) run eg_dense_int8 / eg_conv2d_int8 on the snapshot
 * with dynamic activation ranges; training calls still run the exact ops. The snapshot does not
 * follow later changes of the weights: quantize again after training. bits 0 drops it (exact
 * again). EG_ERR_UNSUPPORTED for other layers (or grouped / NCHW convolutions), EG_ERR_STATE
 * before the layer is built, EG_ERR_INVALID_ARGUMENT for bits, EG_ERR_DTYPE for non-f32 weights. */
eg_status eg_layer_quantize_int8(eg_layer *layer, int bits);
/* eg_layer_quantize_int8 on every Dense and Conv2D layer of the model whose kernel has at least
 * min_inner inputs per output (KH * KW * C_in, or D_in: small products gain nothing from int8),
 * bits 0 on the others; *n_quantized (may be NULL) gets how many were quantized. Stops at the
 * first error. */
eg_status eg_model_quantize_int8(eg_model *model, int bits, int64_t min_inner, int *n_quantized);
/* Whether the layer holds an int8 snapshot. false for NULL. */
bool eg_layer_is_quantized(const eg_layer *layer);

#if !defined(EG_NO_CALLSITE)
#define eg_quantize_int8(...)       EG_CALLSITE_(eg_quantize_int8(__VA_ARGS__))
#define eg_int8_range(...)          EG_CALLSITE_(eg_int8_range(__VA_ARGS__))
#define eg_int8_range_merge(...)    EG_CALLSITE_(eg_int8_range_merge(__VA_ARGS__))
#define eg_dense_int8(...)          EG_CALLSITE_(eg_dense_int8(__VA_ARGS__))
#define eg_conv2d_int8(...)         EG_CALLSITE_(eg_conv2d_int8(__VA_ARGS__))
#define eg_layer_quantize_int8(...) EG_CALLSITE_(eg_layer_quantize_int8(__VA_ARGS__))
#define eg_model_quantize_int8(...) EG_CALLSITE_(eg_model_quantize_int8(__VA_ARGS__))
#endif

#ifdef __cplusplus
}
#endif
#endif
