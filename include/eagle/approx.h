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
/* The layer's int8 snapshot: *q (i8, the kernel's shape) and *scale (f32 (O)), new references
 * the caller releases (what an int8 checkpoint stores). EG_ERR_STATE when the layer holds none;
 * *q and *scale NULL on error. */
eg_status eg_layer_int8_snapshot(const eg_layer *layer, eg_tensor **q, eg_tensor **scale);
/* Installs a stored snapshot (eg_layer_int8_snapshot's, read back from a checkpoint) on a built
 * Dense or Conv2D layer, as eg_layer_quantize_int8 would have made it: q i8 with the kernel's
 * shape, scale f32 (O) with O the kernel's last axis, every scale finite and > 0. The layer takes
 * copies of its own (on the kernel's device). The f32 kernel is left as it is. Errors as
 * eg_layer_quantize_int8's, and EG_ERR_SHAPE / EG_ERR_DTYPE / EG_ERR_INVALID_ARGUMENT naming
 * what q or scale gets wrong. */
eg_status eg_layer_set_int8(eg_layer *layer, const eg_tensor *q, const eg_tensor *scale);

/* ---- sampled products (column-row sampling) ---- */

/* count draws of indices into weights (f32 or f64 (L), finite, >= 0), index l drawn
 * count * p_l times in expectation with p_l = weights[l] / sum(weights) (uniform when every
 * weight is 0), by systematic sampling: one uniform u, draw t at the point (u + t) / count of the
 * running sum (so each index is drawn within one of its expectation, and in order): i64 (count).
 * The draws
 * come from the next seed of `generator` (NULL: the default one; eg_manual_seed repeats them) and
 * are a function of that seed and the weights alone; a traced function draws anew at each call,
 * as dropout does. EG_ERR_INVALID_ARGUMENT for count < 1 or a negative or non-finite weight. */
eg_tensor *eg_sample_indices(const eg_tensor *weights, int64_t count, eg_generator *generator);
/* op(a) op(b) (2-d; op transposes when asked) estimated from s = ceil(fraction * L) of the L
 * inner terms op(a)[:, l] op(b)[l, :], drawn with probability proportional to
 * ||op(a)[:, l]|| ||op(b)[l, :]|| (eg_sample_indices: systematic) and each weighted
 * 1 / (s p_l) (Drineas, Kannan and Mahoney's column-row sampling): unbiased — the mean over draws
 * is the exact product — for about fraction of the product's work. fraction in (0, 1]; draws from
 * generator as eg_sample_indices does. Records its ops (the gradient of the estimate is the
 * estimate's, not the exact product's). Errors as eg_matmul_ex's, EG_ERR_INVALID_ARGUMENT for
 * fraction. */
eg_tensor *eg_matmul_sampled(const eg_tensor *a, const eg_tensor *b, bool transpose_a,
                             bool transpose_b, double fraction, eg_generator *generator);
/* eg_dense, bitwise, whose recorded gradient estimates the kernel's gradient x^T dz with
 * eg_matmul_sampled over the batch's rows (fraction of them; the default generator draws) and,
 * with sample_input_gradient, the input's dz kernel^T over the units too; the bias's gradient
 * stays exact. For training (Adelman et al., NeurIPS 2021): the step's products shrink, the
 * gradient stays unbiased. */
eg_tensor *eg_dense_sampled(const eg_tensor *x, const eg_tensor *kernel, const eg_tensor *bias,
                            eg_activation activation, double fraction, bool sample_input_gradient);
/* A Dense layer's training calls (training true, 2-d f32 inputs, activation none, relu, sigmoid
 * or tanh, the float32 policy; a layer without a bias adds a zero one) run eg_dense_sampled with
 * this fraction from now on;
 * fraction 0 makes them exact again. Inference calls are never sampled. EG_ERR_UNSUPPORTED for
 * other layers, EG_ERR_INVALID_ARGUMENT for a fraction outside [0, 1]. */
eg_status eg_layer_set_gradient_sampling(eg_layer *layer, double fraction,
                                         bool sample_input_gradient);
/* The layer's gradient-sampling fraction (0: exact, and for NULL or other layers). */
double eg_layer_gradient_sampling(const eg_layer *layer);
/* The same on every Dense layer of the model with at least min_units units (a classifier's
 * few outputs make a product too small to gain from sampling), fraction 0 on the others;
 * *n_sampled (may be NULL) gets how many sample. */
eg_status eg_model_set_gradient_sampling(eg_model *model, double fraction,
                                         bool sample_input_gradient, int64_t min_units,
                                         int *n_sampled);

/* ---- low-rank layers ---- */

/* A new layer "LowRankDense", built, computing activation(x · U · V + bias) with U (K, r) and
 * V (r, N) from the truncated SVD of a built Dense layer's f32 kernel W (K, N) (LAPACK's
 * sgesdd): W ~ U_r S_r V_r^T, U = U_r S_r^1/2, V = S_r^1/2 V_r^T, the bias and activation
 * copied. Its weights are trainable, so it fine-tunes like any layer. r is `rank` (1..min(K, N))
 * or, with rank 0, the smallest rank keeping the fraction `energy` (0, 1] of sum s_i^2; give one
 * of the two. *kept_energy (may be NULL) gets the fraction kept: 1 - that is
 * ||W - UV||_F^2 / ||W||_F^2 (Eckart-Young). Caller owns the layer. NULL with
 * EG_ERR_INVALID_ARGUMENT (rank / energy), EG_ERR_UNSUPPORTED (not a Dense layer), EG_ERR_STATE
 * (not built, or not an f32 2-d kernel), out of memory. */
eg_layer *eg_dense_lowrank_new(const eg_layer *dense, int64_t rank, double energy,
                               double *kept_energy);
/* Whether the layer is a LowRankDense. false for NULL. */
bool eg_layer_is_lowrank(const eg_layer *layer);
/* Replaces each Dense layer of a built Sequential model by its eg_dense_lowrank_new (rank, or the
 * energy fraction with rank 0), where that has fewer weights (r (K + N) < K N; a larger rank than
 * a layer has is its full rank, which saves nothing); the replacement takes the layer's name, so
 * its variables are "<name>/u", "<name>/v", "<name>/bias". Variables and tensors taken from the
 * model before are stale (eg_model_variables again); a training configuration fit compiled is
 * dropped. *n_factorized (may be NULL) gets how many layers were replaced. EG_ERR_UNSUPPORTED
 * for a functional model; stops at the first error. */
eg_status eg_model_lowrank(eg_model *model, int64_t rank, double energy, int *n_factorized);

/* ---- choosing per layer within an error budget ---- */

/* What eg_model_choose_approx chose for one layer. */
typedef struct eg_approx_choice {
    char layer[64];   /* the layer's name */
    char policy[32];  /* "exact", "int8" or "lowrank:R" */
    double error;     /* ||y' - y||_F / ||y||_F of its output on the calibration batch */
    double exact_ms;  /* the exact call's time (the fastest of 3) */
    double chosen_ms; /* the chosen call's (exact_ms for "exact") */
    int candidates;   /* how many approximations were measured */
} eg_approx_choice;

/* Calibrates on x (a batch of the model's input) and picks, for each Dense and Conv2D layer of a
 * built Sequential model, the fastest of its approximations whose relative output error on x is
 * at most `budget` and that is faster than the exact call — int8 (7-bit weights, where the layer
 * has 32 or more inputs per output and its convolution is NHWC with one group) and, for Dense,
 * lowrank at ranks min(K, N) / 8, / 4 and / 2 (where they have fewer weights) — else keeps it
 * exact; then applies the choices (an int8 snapshot, or the layer replaced by its LowRankDense).
 * Each layer is measured on the exact outputs of the layers before it, so its error is its own.
 * budget 0 keeps every layer exact. The choices (one per Dense or Conv2D layer, in order) go to
 * choices[0 .. *n_choices), at most max_choices of them (choices may be NULL with max_choices
 * 0; *n_choices counts them all). EG_ERR_UNSUPPORTED for a functional model,
 * EG_ERR_INVALID_ARGUMENT for a negative budget; a layer's own error stops it. */
eg_status eg_model_choose_approx(eg_model *model, const eg_tensor *x, double budget,
                                 eg_approx_choice *choices, int max_choices, int *n_choices);

#if !defined(EG_NO_CALLSITE)
#define eg_quantize_int8(...)       EG_CALLSITE_(eg_quantize_int8(__VA_ARGS__))
#define eg_int8_range(...)          EG_CALLSITE_(eg_int8_range(__VA_ARGS__))
#define eg_int8_range_merge(...)    EG_CALLSITE_(eg_int8_range_merge(__VA_ARGS__))
#define eg_dense_int8(...)          EG_CALLSITE_(eg_dense_int8(__VA_ARGS__))
#define eg_conv2d_int8(...)         EG_CALLSITE_(eg_conv2d_int8(__VA_ARGS__))
#define eg_layer_quantize_int8(...) EG_CALLSITE_(eg_layer_quantize_int8(__VA_ARGS__))
#define eg_model_quantize_int8(...) EG_CALLSITE_(eg_model_quantize_int8(__VA_ARGS__))
#define eg_layer_int8_snapshot(...) EG_CALLSITE_(eg_layer_int8_snapshot(__VA_ARGS__))
#define eg_layer_set_int8(...)      EG_CALLSITE_(eg_layer_set_int8(__VA_ARGS__))
#define eg_dense_lowrank_new(...)   EG_CALLSITE_(eg_dense_lowrank_new(__VA_ARGS__))
#define eg_sample_indices(...)      EG_CALLSITE_(eg_sample_indices(__VA_ARGS__))
#define eg_matmul_sampled(...)      EG_CALLSITE_(eg_matmul_sampled(__VA_ARGS__))
#define eg_dense_sampled(...)       EG_CALLSITE_(eg_dense_sampled(__VA_ARGS__))
#define eg_layer_set_gradient_sampling(...)                                                        \
    EG_CALLSITE_(eg_layer_set_gradient_sampling(__VA_ARGS__))
#define eg_model_set_gradient_sampling(...)                                                        \
    EG_CALLSITE_(eg_model_set_gradient_sampling(__VA_ARGS__))
#define eg_model_lowrank(...)       EG_CALLSITE_(eg_model_lowrank(__VA_ARGS__))
#define eg_model_choose_approx(...) EG_CALLSITE_(eg_model_choose_approx(__VA_ARGS__))
#endif

#ifdef __cplusplus
}
#endif
#endif
