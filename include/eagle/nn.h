/* Eagle — neural-network building blocks in the shape of Keras: initializers, layers (Dense,
 * Flatten, Activation, the convolutional ones, Add, Concatenate, and your own: eg_layer_class),
 * models (Sequential, and the functional API's graphs of layers applied to symbols) with their
 * summary, losses and metrics.
 *
 * Ownership follows tensor.h: every function returning an eg_tensor * returns a NEW reference
 * (owned by the innermost open scope, if any; otherwise released by the caller); tensor arguments
 * are borrowed. Layers and models are plain heap objects, not tensors: the creator frees a layer
 * with eg_layer_free() unless it handed it to a model with eg_sequential_add() or
 * eg_functional_model_new(), which then owns it. The variables a layer creates (its kernel and
 * bias) are owned by the layer: they live until the layer is freed, outlive every scope, and are
 * watched by every tape.
 *
 * Errors follow status.h: functions returning a pointer return NULL on failure, the others an
 * eg_status; eg_last_error() says why (with the caller's file:line). */
#ifndef EAGLE_NN_H
#define EAGLE_NN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "eagle/ops.h"
#include "eagle/status.h"
#include "eagle/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================================
 * Initializers: how a new variable is filled. Keras' formulas; fan_in / fan_out of a shape are
 * Keras' too: (in, out) for 2-d shapes; n, n for 1-d; for k >= 3 dims the product of the
 * leading k-2 dims (the receptive field) times shape[k-2] and shape[k-1]; 1, 1 for 0-d.
 * ====================================================================================== */

typedef enum eg_initializer_kind {
    EG_INITIALIZER_GLOROT_UNIFORM = 0, /* U(-l, l), l = sqrt(6 / (fan_in + fan_out)); Keras' */
                                       /* default kernel initializer */
    EG_INITIALIZER_GLOROT_NORMAL,      /* truncated normal, variance 2 / (fan_in + fan_out) */
    EG_INITIALIZER_HE_NORMAL,          /* truncated normal, variance 2 / fan_in */
    EG_INITIALIZER_HE_UNIFORM,         /* U(-l, l), l = sqrt(6 / fan_in) */
    EG_INITIALIZER_ZEROS,              /* Keras' default bias initializer */
    EG_INITIALIZER_ONES,
    EG_INITIALIZER_CONSTANT,       /* every element = value */
    EG_INITIALIZER_RANDOM_NORMAL,  /* N(mean, stddev^2), not truncated (Keras RandomNormal) */
    EG_INITIALIZER_RANDOM_UNIFORM, /* U(minval, maxval) */
    EG_INITIALIZER_ORTHOGONAL,     /* Keras Orthogonal (gain 1): the shape as a (rows, last dim)
                                      matrix with orthonormal columns (rows >= cols) or rows,
                                      from the QR decomposition of a standard normal draw with
                                      R's diagonal made positive; Keras' default recurrent
                                      kernel initializer */
    EG_INITIALIZER_COUNT
} eg_initializer_kind;

/* A plain value: copy it freely. The truncated normals (glorot_normal, he_normal) are Keras'
 * VarianceScaling: a normal with stddev sqrt(variance) / 0.87962566103423978, values beyond two
 * of its standard deviations drawn again, so the result has the stated variance. */
typedef struct eg_initializer {
    eg_initializer_kind kind;
    double value;          /* CONSTANT */
    double mean, stddev;   /* RANDOM_NORMAL (Keras defaults 0, 0.05) */
    double minval, maxval; /* RANDOM_UNIFORM (Keras defaults -0.05, 0.05) */
} eg_initializer;

/* An initializer of `kind` with Keras' default parameters (see the struct). */
eg_initializer eg_initializer_of(eg_initializer_kind kind);
/* Constant `value`. */
eg_initializer eg_initializer_constant(double value);
/* N(mean, stddev^2); stddev >= 0. */
eg_initializer eg_initializer_random_normal(double mean, double stddev);
/* U(minval, maxval); minval < maxval. */
eg_initializer eg_initializer_random_uniform(double minval, double maxval);
/* Keras' name of the kind ("glorot_uniform", "he_normal", ...); "invalid" when out of range. */
const char *eg_initializer_name(eg_initializer_kind kind);

/* A new tensor of `dtype` (a float type) and shape, filled by `initializer` with random numbers
 * from `generator` (NULL = the default generator; see eg_manual_seed): the same seed and the
 * same sequence of calls give the same values. NULL with an error for a NULL initializer, an
 * invalid kind or parameters, a non-float dtype or a bad shape. */
eg_tensor *eg_initializer_generate(const eg_initializer *initializer, eg_generator *generator,
                                   eg_dtype dtype, int n_dims, const int64_t *shape);

/* ======================================================================================
 * Precision policies (Keras' mixed precision)
 * ====================================================================================== */

/* What a layer computes in and what its variables are stored in, as Keras' dtype policies:
 * - FLOAT32: computes in its variables' dtype (f32, or f64 for layers made with dtype f64);
 * - MIXED_BFLOAT16 / MIXED_FLOAT16: variables stay f32 (the master weights an optimizer updates
 *   and a checkpoint keeps); each call casts its input and its variables to bf16 / f16 (the casts
 *   are ops: gradients flow back to the f32 variables) and computes in that dtype, accumulating
 *   products and sums in f32. What needs range or accuracy runs in f32 whatever the policy:
 *   batch normalization's statistics and normalization (its ops read and write the compute dtype
 *   with f32 statistics and variables), layer normalization (cast in, f32, cast back), the
 *   recurrent layers' states and gates (their products alone are low precision), attention's
 *   scores and softmax, and the losses (every eg_loss_* casts low-precision predictions to f32).
 * MIXED_FLOAT16 needs loss scaling against gradient underflow: eg_optimizer_enable_loss_scaling
 * (optim.h). MIXED_BFLOAT16 has f32's range and needs none. */
typedef enum eg_policy {
    EG_POLICY_FLOAT32 = 0,
    EG_POLICY_MIXED_BFLOAT16,
    EG_POLICY_MIXED_FLOAT16,
    EG_POLICY_COUNT
} eg_policy;

/* "float32", "mixed_bfloat16", "mixed_float16" (Keras' names); "invalid" otherwise. Static. */
const char *eg_policy_name(eg_policy policy);
/* The policy named `name` (one of eg_policy_name's) into *policy. EG_ERR_INVALID_ARGUMENT naming
 * the accepted names for any other text, EG_ERR_NULL_ARGUMENT for NULL arguments. */
eg_status eg_policy_from_name(const char *name, eg_policy *policy);
/* The dtype layers of this policy compute in: f32, bf16 or f16 (FLOAT32: f32, meaning "the
 * variables' dtype"). EG_DTYPE_COUNT for an invalid policy. */
eg_dtype eg_policy_compute_dtype(eg_policy policy);
/* The policy layers made from now on get (Keras' set_global_policy); FLOAT32 at start. Process
 * wide. EG_ERR_INVALID_ARGUMENT for an invalid policy (nothing changes). */
eg_status eg_set_global_policy(eg_policy policy);
eg_policy eg_global_policy(void);

/* ======================================================================================
 * Layers
 * ====================================================================================== */

/* Opaque layer. */
typedef struct eg_layer eg_layer;

/* Everything a Dense layer can be told; start from eg_dense_options_default(). */
typedef struct eg_dense_options {
    eg_activation activation;          /* default NONE */
    bool use_bias;                     /* default true */
    eg_initializer kernel_initializer; /* default glorot_uniform */
    eg_initializer bias_initializer;   /* default zeros */
    int64_t input_dim;                 /* > 0: build now for inputs (..., input_dim); 0 (default):
                                          build at the first call from the input's last dim */
    eg_dtype dtype;                    /* of the variables; default EG_DTYPE_F32 */
    eg_generator *generator;           /* for the initializers; NULL (default) = the default
                                          generator. Borrowed: it must live until the layer is
                                          built. */
    const char *name;                  /* NULL (default): "dense", made unique ("dense_1", ...)
                                          by the model it is added to. Copied. */
} eg_dense_options;

/* Keras' defaults: Dense(units) with no activation, a bias, glorot_uniform / zeros. */
eg_dense_options eg_dense_options_default(void);

/* Dense: y = activation(x @ kernel + bias), with kernel (input_dim, units) and bias (units,)
 * variables named "<layer>/kernel" and "<layer>/bias". x is (..., input_dim), y (..., units); x
 * must have the variables' dtype. Created unbuilt (no variables) unless input_dim is given; it
 * builds on its first call. Caller owns the result (eg_layer_free, or eg_sequential_add).
 * NULL with an error for units < 1, an invalid activation or initializer, a non-float dtype, or
 * (when input_dim > 0) a failed build. */
eg_layer *eg_dense_new(int64_t units, eg_activation activation);
/* Same with every option; options NULL = eg_dense_options_default(). */
eg_layer *eg_dense_new_ex(int64_t units, const eg_dense_options *options);

/* Flatten: (B, d1, d2, ...) -> (B, d1 * d2 * ...); a 1-d input (B,) becomes (B, 1). No
 * variables. name NULL = "flatten". Caller owns the result. */
eg_layer *eg_flatten_new(const char *name);

/* Activation: y = activation(x), same shape. No variables. name NULL = "activation". Caller
 * owns the result. */
eg_layer *eg_activation_new(eg_activation activation, const char *name);

/* ---- convolutional networks: Conv2D, pooling, normalization, dropout (Keras' defaults) ---- */

/* Everything a Conv2D layer can be told; start from eg_conv2d_layer_options_default(). */
typedef struct eg_conv2d_layer_options {
    int strides[2];                    /* default (1, 1) */
    eg_padding padding;                /* default VALID; SAME; EXPLICIT uses explicit_padding */
    int64_t explicit_padding[4];       /* top, bottom, left, right */
    eg_data_format data_format;        /* default NHWC (channels last, like Keras) */
    int dilations[2];                  /* default (1, 1) */
    int groups;                        /* default 1; filters and input channels divide by it */
    eg_activation activation;          /* default NONE */
    bool use_bias;                     /* default true */
    eg_initializer kernel_initializer; /* default glorot_uniform (fans from the HWIO kernel) */
    eg_initializer bias_initializer;   /* default zeros */
    eg_dtype dtype;                    /* of the variables; default EG_DTYPE_F32 */
    eg_generator *generator;           /* NULL (default): the default generator; borrowed */
    const char *name;                  /* NULL (default): "conv2d", made unique by the model */
} eg_conv2d_layer_options;

eg_conv2d_layer_options eg_conv2d_layer_options_default(void);

/* Conv2D: y = activation(conv2d(x, kernel) + bias), kernel (KH, KW, C_in / groups, filters) and
 * bias (filters,) named "<layer>/kernel" and "<layer>/bias"; x (B, H, W, C_in) (or NCHW). Built at
 * the first call (or eg_layer_build / eg_model_build) from the input's channels. NULL with an
 * error for filters < 1, kernel sizes < 1 or invalid options. */
eg_layer *eg_conv2d_new(int64_t filters, int kernel_size, eg_padding padding,
                        eg_activation activation);
/* Same with a (kernel_h, kernel_w) kernel and every option; options NULL = defaults. */
eg_layer *eg_conv2d_new_ex(int64_t filters, int kernel_h, int kernel_w,
                           const eg_conv2d_layer_options *options);

/* MaxPooling2D / AveragePooling2D (square pool_size, strides 0 = pool_size, like Keras' None),
 * NHWC. No variables. */
eg_layer *eg_max_pool2d_new(int pool_size, int strides, eg_padding padding);
eg_layer *eg_avg_pool2d_new(int pool_size, int strides, eg_padding padding);
/* Same with every option (options NULL: a 2x2 window; see eg_pool2d_options) and a name (NULL:
 * "max_pooling2d" / "average_pooling2d"). */
eg_layer *eg_max_pool2d_new_ex(const eg_pool2d_options *options, const char *name);
eg_layer *eg_avg_pool2d_new_ex(const eg_pool2d_options *options, const char *name);
/* GlobalAveragePooling2D: (B, H, W, C) -> (B, C) (or NCHW). name NULL: "global_average_pooling2d".
 */
eg_layer *eg_global_avg_pool2d_new(eg_data_format data_format, const char *name);

typedef struct eg_batch_norm_options {
    int axis;                                   /* the features axis; default -1 (NHWC: channels) */
    double momentum;                            /* default 0.99 */
    double epsilon;                             /* default 1e-3 */
    bool center, scale;                         /* beta / gamma variables; default true, true */
    eg_initializer beta_initializer;            /* default zeros */
    eg_initializer gamma_initializer;           /* default ones */
    eg_initializer moving_mean_initializer;     /* default zeros */
    eg_initializer moving_variance_initializer; /* default ones */
    eg_dtype dtype;                             /* default EG_DTYPE_F32 */
    const char *name;                           /* NULL (default): "batch_normalization" */
    eg_activation activation; /* applied to the result; default NONE. RELU while training runs
                                 fused with the normalization (eg_batch_norm_training_activation):
                                 one pass less each way than a separate Activation layer, same
                                 values. Other activations run after it. */
    bool synchronized;        /* default false: each replica of a distribution strategy
                                 (eagle/distribute.h) normalizes with its own share of the batch.
                                 true (Keras' synchronized=True): while training, every replica
                                 uses the mean and variance of the global batch, all-reduced over
                                 the replicas (three small all-reduces per layer and step, each
                                 replica waiting for the others), so the result and the moving
                                 statistics match one replica on the whole batch; gradients flow
                                 across the replicas. Outside a replica it is plain batch
                                 normalization, unfused. */
} eg_batch_norm_options;

eg_batch_norm_options eg_batch_norm_options_default(void);

/* BatchNormalization (Keras'): variables gamma, beta (trainable, when scale / center) and
 * moving_mean, moving_variance (never trainable; counted as non-trainable params, listed by
 * eg_model_variables, not by eg_model_trainable_variables), each (C,) for the features axis.
 * Called with training = true (and the layer trainable) it normalizes with the batch's mean and
 * population variance over every other axis and then updates the moving statistics, outside any
 * tape: moving = moving * momentum + batch * (1 - momentum). Otherwise (inference, or a layer made
 * non-trainable, as in Keras) it uses the moving statistics and changes nothing. options NULL:
 * the defaults. */
eg_layer *eg_batch_norm_new(const eg_batch_norm_options *options);

typedef struct eg_layer_norm_options {
    int axis;                         /* the normalized (last) axis; default -1 */
    double epsilon;                   /* default 1e-3 */
    bool center, scale;               /* default true, true */
    eg_initializer beta_initializer;  /* default zeros */
    eg_initializer gamma_initializer; /* default ones */
    eg_dtype dtype;                   /* default EG_DTYPE_F32 */
    const char *name;                 /* NULL (default): "layer_normalization" */
} eg_layer_norm_options;

eg_layer_norm_options eg_layer_norm_options_default(void);

/* LayerNormalization (Keras'): each example normalized over `axis` with its own mean and
 * variance, then gamma * . + beta (trainable, shaped like that axis). Same in training and
 * inference. */
eg_layer *eg_layer_norm_new(const eg_layer_norm_options *options);

/* Dropout(rate) in [0, 1): while training, zeroes each element with probability rate and scales
 * the rest by 1 / (1 - rate), with a fresh seed from the default generator at every call
 * (eg_generator_next_seed; eg_manual_seed makes runs repeatable); at inference the identity.
 * name NULL: "dropout". */
eg_layer *eg_dropout_new(double rate, const char *name);

/* ---- sequences: Embedding and the recurrent layers LSTM and GRU (Keras' defaults) ---- */

/* Everything an Embedding layer can be told; start from eg_embedding_options_default(). */
typedef struct eg_embedding_options {
    bool mask_zero;                        /* id 0 is padding: the layer's mask is ids != 0, which
                                              a Sequential hands to the recurrent layers after it
                                              (default false) */
    bool sparse_gradient;                  /* the table's gradient is row-sparse: only the rows
                                              a batch looks up are in it, and the optimizers
                                              update only those, their slots too (see
                                              eg_variable_set_sparse_gradient; default false) */
    eg_initializer embeddings_initializer; /* default random_uniform(-0.05, 0.05) */
    eg_dtype dtype;                        /* of the table; default EG_DTYPE_F32 */
    eg_generator *generator;               /* as eg_dense_options' */
    const char *name;                      /* NULL (default): "embedding". Copied. */
} eg_embedding_options;
eg_embedding_options eg_embedding_options_default(void);

/* Embedding(input_dim, output_dim): integer ids (any shape, i32 or i64, each in [0, input_dim))
 * -> their rows of the table "<layer>/embeddings" (input_dim, output_dim): shape (..., output_dim).
 * An id out of range is an error naming it. options NULL = the defaults. Caller owns the result.
 * NULL with an error for sizes < 1 or invalid options. */
eg_layer *eg_embedding_new(int64_t input_dim, int64_t output_dim,
                           const eg_embedding_options *options);

/* Everything a recurrent layer can be told; start from eg_rnn_options_default(). */
typedef struct eg_rnn_options {
    bool return_sequences; /* the output at every step (B, T, units), else the last (B, units) */
    bool go_backwards;     /* process the sequence in reverse (return_sequences: reversed too) */
    bool use_bias;         /* default true */
    bool unit_forget_bias; /* LSTM: the forget gate's bias starts at 1 (default true) */
    eg_initializer kernel_initializer;    /* default glorot_uniform */
    eg_initializer recurrent_initializer; /* default orthogonal */
    eg_initializer bias_initializer;      /* default zeros */
    eg_dtype dtype;                       /* of the variables, f32 or f64; default EG_DTYPE_F32 */
    eg_generator *generator;              /* as eg_dense_options' */
    const char *name;                     /* NULL (default): "lstm" / "gru". Copied. */
} eg_rnn_options;
eg_rnn_options eg_rnn_options_default(void);

/* LSTM(units) as Keras' (tanh, sigmoid recurrent activation): x (B, T, features) -> (B, units),
 * or (B, T, units) with return_sequences. Variables in Keras' layout and gate order i, f, c, o:
 * "<layer>/kernel" (features, 4 units), "<layer>/recurrent_kernel" (units, 4 units),
 * "<layer>/bias" (4 units). Each step is one product h recurrent_kernel and one fused cell op
 * (eg_lstm_cell); the input projection of all steps is one product. Its states and gates are
 * computed in its variables' dtype under every policy (the state is carried over many steps);
 * under a mixed policy its products round their operands to the compute dtype and sum in f32,
 * as Dense's do, and its output is in the compute dtype. Caller owns the result; NULL with an
 * error for units < 1 or invalid options. */
eg_layer *eg_lstm_new(int64_t units, const eg_rnn_options *options);
/* GRU(units) as Keras' with reset_after = true (gates z, r, h; eg_gru_cell): variables
 * "<layer>/kernel" (features, 3 units), "<layer>/recurrent_kernel" (units, 3 units) and
 * "<layer>/bias" (2, 3 units): the input bias, then the recurrent one. Otherwise as eg_lstm_new. */
eg_layer *eg_gru_new(int64_t units, const eg_rnn_options *options);

/* Keras' Bidirectional (merge_mode "concat"): layer (an unbuilt LSTM or GRU, consumed: freed
 * with the wrapper, or at once when this call fails) runs forward and, with its own variables,
 * backward over the sequence; the outputs (B, [T,] 2 units) are the forward's then the
 * backward's, the backward's sequences in the input's time order. Variables "<wrapper>/forward_*"
 * then "<wrapper>/backward_*" (kernel, recurrent_kernel, bias). name NULL: "bidirectional". */
eg_layer *eg_bidirectional_new(eg_layer *layer, const char *name);
/* The states a recurrent layer carries: 2 for LSTM (h, c), 1 for GRU (h), twice that for a
 * Bidirectional (the forward's, then the backward's); 0 (with an error) for another layer. */
int eg_rnn_state_count(const eg_layer *layer);
/* Runs a recurrent layer with everything Keras' call takes. mask (B, T) bool or NULL: at a step
 * where it is false the states carry over unchanged and the step's output is the previous one
 * (zeros before the first unmasked step). initial_state NULL (zeros) or eg_rnn_state_count
 * tensors (B, units). *output gets the layer's output (as eg_layer_call's); final_state NULL or
 * room for eg_rnn_state_count new references: the states after the last step (Keras'
 * return_state). Builds the layer first when needed. Everything NULL on failure, with an error
 * for a layer that is not recurrent, shapes that do not fit, or a failed op. */
eg_status eg_rnn_call(eg_layer *layer, const eg_tensor *x, const eg_tensor *mask,
                      eg_tensor *const *initial_state, bool training, eg_tensor **output,
                      eg_tensor **final_state);
/* An Embedding layer's mask for ids: ids != 0 (bool, ids' shape) with mask_zero, NULL without
 * an error otherwise (no mask). NULL with an error for a layer that is not an Embedding. */
eg_tensor *eg_embedding_mask(const eg_layer *layer, const eg_tensor *ids);

/* The next token of each sequence from its logits (batch, vocabulary), as text generation draws
 * it: softmax(logits / temperature) restricted to the top_k largest logits (0: all; ties at the
 * k-th value all stay), one uniform draw per row from generator (NULL: the default generator) in
 * row order, so a seed gives the same tokens anywhere. temperature 0: the largest logit (the
 * first of ties), nothing drawn. New i64 tensor (batch,) on the host. NULL with an error for other
 * shapes, a negative or non-finite temperature, or top_k < 0. */
eg_tensor *eg_sample_logits(const eg_tensor *logits, double temperature, int64_t top_k,
                            eg_generator *generator);

/* ---- attention and Transformer blocks ----
 * They take several inputs (eg_layer_call_multi, the functional API) or one (a Sequential): the
 * float inputs are sequences (batch, time, features); a bool input (batch, time) is a key mask,
 * true where a position may be attended (padding false), as Keras derives from padded inputs. A
 * Sequential hands an Embedding's mask_zero mask to MultiHeadAttention and TransformerEncoder.
 * Attention runs fused (eg_scaled_dot_product_attention): memory grows linearly with length. */

/* Everything MultiHeadAttention can be told; start from eg_mha_options_default. */
typedef struct eg_mha_options {
    int num_heads;
    int64_t key_dim;                   /* per head, for queries and keys */
    int64_t value_dim;                 /* per head; 0 (default): key_dim */
    int64_t output_dim;                /* 0 (default): the query's features (Keras' output_shape) */
    bool use_bias;                     /* default true */
    bool use_causal_mask;              /* query i sees keys j <= i (default false) */
    eg_initializer kernel_initializer; /* default glorot_uniform */
    eg_initializer bias_initializer;   /* default zeros */
    const char *name;                  /* NULL (default): "multi_head_attention". Copied. */
} eg_mha_options;
eg_mha_options eg_mha_options_default(int num_heads, int64_t key_dim);

/* Keras' MultiHeadAttention, batch first: inputs (query[, value[, key]][, key mask]); value
 * defaults to the query (self-attention), key to the value. Weights in Keras' shapes, named with
 * '_' for Keras' '/': query_kernel (E_q, heads, key_dim), query_bias (heads, key_dim), key_*,
 * value_* (value_dim), attention_output_kernel (heads, value_dim, E_out), attention_output_bias
 * (E_out). Output (batch, T_query, E_out). f32 weights. NULL with an error for invalid options. */
eg_layer *eg_multi_head_attention_new(const eg_mha_options *options);

/* KerasNLP's PositionEmbedding, added: x (batch, T, E) + the first T rows of a learned
 * (sequence_length, E) table "embeddings" (glorot_uniform). T > sequence_length is an error. */
eg_layer *eg_position_embedding_new(int64_t sequence_length, const char *name);

/* Everything a Transformer block can be told; start from eg_transformer_options_default. */
typedef struct eg_transformer_options {
    int num_heads;             /* the features split into this many heads (key_dim = E / heads) */
    int64_t intermediate_dim;  /* the feed-forward's hidden width */
    double dropout;            /* after attention and feed-forward, while training; default 0 */
    double layer_norm_epsilon; /* default 1e-5 */
    eg_activation activation;  /* the feed-forward's; default RELU */
    bool normalize_first;      /* pre-LN (x + f(LN(x))); default false: post-LN, LN(x + f(x)) */
    bool causal;               /* encoder: causal self-attention (a decoder-only model's block) */
    const char *name;          /* NULL (default): the type's prefix. Copied. */
} eg_transformer_options;
eg_transformer_options eg_transformer_options_default(int num_heads, int64_t intermediate_dim);

/* KerasNLP's TransformerEncoder: inputs (x[, padding mask]); self-attention, residual and layer
 * norm, then Dense(intermediate, activation), Dense(E), residual and layer norm. 16 weights. */
eg_layer *eg_transformer_encoder_new(const eg_transformer_options *options);
/* KerasNLP's TransformerDecoder: inputs (x, encoder outputs[, decoder mask[, encoder mask]]);
 * causal self-attention, cross-attention over the encoder outputs, then the feed-forward, each
 * with its residual and layer norm. 26 weights. */
eg_layer *eg_transformer_decoder_new(const eg_transformer_options *options);

/* Runs the layer on x (borrowed) and returns a new tensor; builds the layer first when it is
 * not built. `training` selects the training behaviour of the layers that have one (Dropout
 * drops, BatchNormalization uses and updates batch statistics); the others ignore it. Recorded on
 * active tapes like any op. NULL with an error for a NULL layer or x, a shape that does not fit the
 * built layer
 * ("dense: input last dim 3 does not match the input_dim 4 of 'dense'"), or a failed op. */
eg_tensor *eg_layer_call(eg_layer *layer, const eg_tensor *x, bool training);

/* Builds the layer's variables for inputs of shape `input_shape` (n_dims entries; -1 marks an
 * unknown size, typically the batch). Dense needs a known last dim. Building a built layer again
 * is EG_OK when the shape fits and EG_ERR_SHAPE otherwise. */
eg_status eg_layer_build(eg_layer *layer, int n_dims, const int64_t *input_shape);

/* Whether the layer has been built (has its variables, knows its output shape). */
bool eg_layer_built(const eg_layer *layer);
/* The layer's name ("dense_1"); valid while the layer lives. "" for NULL. */
const char *eg_layer_name(const eg_layer *layer);
/* The layer's class name ("Dense", "Flatten", "Activation", "Conv2D", "MaxPooling2D",
 * "AveragePooling2D", "GlobalAveragePooling2D", "BatchNormalization", "LayerNormalization",
 * "Dropout", "Add", "Concatenate", "InputLayer", or a custom class's type). Static storage (a
 * custom class's: the class's). */
const char *eg_layer_type(const eg_layer *layer);
/* Number of scalars in the layer's variables (0 when unbuilt or NULL). */
int64_t eg_layer_count_params(const eg_layer *layer);
/* The layer's variables (trainable or not) in creation order (Dense: kernel, then bias) as an
 * array owned by the layer and valid until it is freed; the variables are borrowed. *n_variables
 * gets the count (0 when unbuilt). NULL (and *n_variables = 0) when there are none. */
eg_tensor *const *eg_layer_variables(const eg_layer *layer, int *n_variables);
/* Marks all the layer's variables (present and future) trainable or not, like Keras'
 * layer.trainable; variables that are never trainable (BatchNormalization's moving statistics)
 * stay so. A non-trainable BatchNormalization runs in inference mode. */
void eg_layer_set_trainable(eg_layer *layer, bool trainable);
/* Sets the layer's policy (it had the global policy when it was made). A layer given its own
 * policy keeps it when its model's policy is set. EG_ERR_NULL_ARGUMENT, EG_ERR_INVALID_ARGUMENT
 * for an invalid policy. The next call computes in the new policy's dtype. */
eg_status eg_layer_set_policy(eg_layer *layer, eg_policy policy);
/* The layer's policy (FLOAT32 for NULL). */
eg_policy eg_layer_policy(const eg_layer *layer);
/* Frees a layer that no model owns, with its variables (they must not be used afterwards).
 * NULL is ignored. Freeing a layer a model owns is refused (the model frees it). */
void eg_layer_free(eg_layer *layer);

/* ---- your own layers: Keras' Layer subclass, in C ----
 *
 * A layer class is a table of callbacks; a layer made from it (eg_layer_new_custom) goes into a
 * Sequential model or a functional graph like a built-in one: it is built from its input shapes
 * at the first call (or by eg_model_build, or when applied to symbols), creates its weights with
 * eg_layer_add_weight, is recorded on tapes (its call is made of ops), runs in eager, lazy and
 * graph mode, is listed by the summary with its type, and its weights are the model's variables
 * (saved, loaded, trained). Under a mixed policy its float inputs and its variables reach `call`
 * cast to the compute dtype, as Keras autocasts them.
 *
 *     static eg_status scale_build(eg_layer *layer, void *state, int n_inputs,
 *                                  const eg_layer_shape *shapes) {
 *         int64_t units = shapes[0].dims[shapes[0].n_dims - 1];
 *         eg_initializer ones = eg_initializer_of(EG_INITIALIZER_ONES);
 *         return eg_layer_add_weight(layer, "scale", 1, &units, EG_DTYPE_F32, &ones, true)
 *                    ? EG_OK : eg_last_status();
 *     }
 *     static eg_tensor *scale_call(eg_layer *layer, void *state, int n_inputs,
 *                                  eg_tensor *const *inputs,
 *                                  eg_tensor *const *variables, bool training) {
 *         return eg_mul(inputs[0], variables[0]);
 *     }
 *     static const eg_layer_class scale_class = {
 *         .type = "Scale", .build = scale_build, .call = scale_call};
 *     eg_sequential_add(model, eg_layer_new_custom(&scale_class, NULL, NULL));
 */

/* A shape as layers see it: n_dims sizes, -1 where unknown (the batch dimension). */
typedef struct eg_layer_shape {
    int n_dims;
    int64_t dims[EG_MAX_DIMS];
} eg_layer_shape;

/* What a custom layer does. Only `type` and `call` are required. The callbacks get the layer and
 * the state given to eg_layer_new_custom; a callback that fails raises its error (eg_last_error)
 * and returns a non-OK status or NULL. */
typedef struct eg_layer_class {
    /* The class name the summary shows ("Scale"). Borrowed, like the whole table: it must
     * outlive every layer made from it (a static const table does). */
    const char *type;
    /* The default layer name, made unique by its model ("scale", "scale_1"); NULL: the type in
     * snake_case ("MyDense" -> "my_dense"). */
    const char *name_prefix;
    /* How many inputs a call takes: min_inputs..max_inputs (at most 16); 0, 0 means exactly one.
     * A layer that takes more than one is applied with eg_layer_apply_multi / called with
     * eg_layer_call_multi and cannot go into a Sequential model. */
    int min_inputs, max_inputs;
    /* Creates the weights (eg_layer_add_weight) for inputs of these shapes (the batch size
     * unknown: -1). Called once, before the first call. NULL: the layer has no weights. */
    eg_status (*build)(eg_layer *layer, void *state, int n_inputs,
                       const eg_layer_shape *input_shapes);
    /* The output's shape for inputs of these shapes (-1 passes on as unknown), into *output
     * (zeroed before the call). Called after build. NULL: the first input's shape (layers that
     * keep the shape, as Keras' default). The summary and the layers after it rely on it. */
    eg_status (*compute_output_shape)(eg_layer *layer, void *state, int n_inputs,
                                      const eg_layer_shape *input_shapes, eg_layer_shape *output);
    /* The layer's output: a new reference (ops return one). inputs and variables are borrowed;
     * variables are the layer's weights in eg_layer_add_weight order, cast to the compute dtype
     * under a mixed policy (to assign to a weight, take it from eg_layer_variables). `training`
     * is the model's (fit passes true while training, false when evaluating). */
    eg_tensor *(*call)(eg_layer *layer, void *state, int n_inputs, eg_tensor *const *inputs,
                       eg_tensor *const *variables, bool training);
    /* Frees the state when the layer is freed (NULL: the state is not the layer's to free). */
    void (*free_state)(void *state);
} eg_layer_class;

/* A new, unbuilt layer of layer_class (borrowed: it must outlive the layer) holding `state`
 * (the layer owns it from now on: free_state is called when the layer is freed, and at once when
 * this call fails, so a failed construction leaks nothing). name NULL: the class's prefix, made
 * unique by the model. Caller owns the result (eg_layer_free, or hand it to a model). NULL with
 * EG_ERR_NULL_ARGUMENT when layer_class, its type or its call is NULL, EG_ERR_INVALID_ARGUMENT for
 * an impossible input count, or out of host memory. */
eg_layer *eg_layer_new_custom(const eg_layer_class *layer_class, void *state, const char *name);
/* The state given to eg_layer_new_custom (NULL for built-in layers). Borrowed. */
void *eg_layer_state(const eg_layer *layer);
/* Keras' add_weight: a new variable "<layer>/<name>" of `dtype` (f32 or f64) and shape, filled
 * by `initializer` (NULL: zeros) from the default generator, appended to the layer's variables
 * (at most 32) and owned by the layer. A non-trainable weight is a variable the model lists but
 * fit never updates (like BatchNormalization's moving statistics). Returns it, borrowed: it lives
 * as long as the layer, unless the layer is renamed by the model it joins (an unnamed layer
 * built before it was added): read the weights in `call` from its `variables` argument or with
 * eg_layer_variables. The layer computes in the dtype of its first weight. NULL with an error
 * for a NULL layer or name, a built-in layer, a name already used by the layer, more than 16
 * weights, or a bad shape, dtype or initializer. */
eg_tensor *eg_layer_add_weight(eg_layer *layer, const char *name, int n_dims, const int64_t *shape,
                               eg_dtype dtype, const eg_initializer *initializer, bool trainable);
/* Runs a layer on n_inputs inputs (Add, Concatenate or a custom layer that takes several), as
 * eg_layer_call does on one; builds it first from their shapes. NULL with an error when the
 * count is not the layer's, or as eg_layer_call. */
eg_tensor *eg_layer_call_multi(eg_layer *layer, int n_inputs, eg_tensor *const *inputs,
                               bool training);

/* ---- merging layers (Keras' Add and Concatenate), for the functional API ---- */

/* Add: the element-wise sum of 2 or more inputs of one shape (unknown sizes match any). No
 * variables. name NULL: "add". Caller owns the result. */
eg_layer *eg_add_layer_new(const char *name);
/* Concatenate: 2 or more inputs joined along `axis` (negative counts from the end; Keras'
 * default is -1); their other sizes must agree. No variables. name NULL: "concatenate". NULL with
 * an error for an axis that is 0 (the batch) once the rank is known (at build). */
eg_layer *eg_concatenate_new(int axis, const char *name);

/* ======================================================================================
 * Models: a Sequential stack of layers
 * ====================================================================================== */

typedef struct eg_model eg_model;

/* An empty Sequential model named `name` (NULL = "sequential"). Caller owns; eg_model_free.
 * NULL only when out of host memory. */
eg_model *eg_sequential_new(const char *name);
/* Appends `layer` and takes ownership of it. An unnamed layer gets its type's prefix made unique
 * in this model: "dense", "dense_1", "dense_2"... (an unnamed layer built before it was added,
 * e.g. with input_dim, that is renamed here gets new variables under the new name holding the
 * same values; the old ones are released). On failure the layer is freed too (so a chain
 * eg_sequential_add(model, eg_dense_new(...)) leaks nothing), except when it already belongs
 * to a model (EG_ERR_INVALID_ARGUMENT; it is left alone). Other errors: NULL model or layer
 * (EG_ERR_NULL_ARGUMENT, or the pending error that made the layer NULL), a name already taken
 * in this model (EG_ERR_STATE), a built model whose output does not fit the layer (EG_ERR_SHAPE),
 * out of host memory. */
eg_status eg_sequential_add(eg_model *model, eg_layer *layer);
/* Builds every layer for inputs of shape input_shape (-1 for unknown sizes), so that variables
 * exist and the summary knows every output shape. The first of two or more dims is the batch:
 * a model serves every batch size, so it is built (and summarized) as unknown, "None", whatever
 * size is given. A functional model is built when made: the shape must fit its input. */
eg_status eg_model_build(eg_model *model, int n_dims, const int64_t *input_shape);
/* Runs the layers in order on x and returns the last one's output (new reference); builds the
 * model from x's shape (batch dim unknown) on the first call. The intermediates are released
 * (tapes keep what they need). `training` is passed to every layer. An empty model returns a
 * new reference to x's values (a view). A functional model runs its graph; it must have one
 * input and one output (else eg_model_call_multi). NULL with an error on any failure. */
eg_tensor *eg_model_call(eg_model *model, const eg_tensor *x, bool training);
/* The model on n_inputs tensors (borrowed; a functional model's inputs in the order given to
 * eg_functional_model_new, each with its Input's dtype, rank and known sizes), writing its
 * n_outputs outputs (new references) to outputs[]. A Sequential model has one of each. On
 * failure every outputs[i] is NULL: EG_ERR_NULL_ARGUMENT, EG_ERR_INVALID_ARGUMENT for counts that
 * are not the model's, EG_ERR_SHAPE / EG_ERR_DTYPE for an input that does not fit, or the error
 * of the layer that failed. */
eg_status eg_model_call_multi(eg_model *model, int n_inputs, eg_tensor *const *inputs,
                              bool training, int n_outputs, eg_tensor **outputs);
/* How many inputs and outputs the model takes and gives (1 and 1 for a Sequential one). */
int eg_model_n_inputs(const eg_model *model);
int eg_model_n_outputs(const eg_model *model);
/* Number of layers; the i-th (borrowed, owned by the model), NULL when out of range. A
 * functional model's are in topological order, InputLayers included, each shared layer once. */
int eg_model_n_layers(const eg_model *model);
eg_layer *eg_model_layer(const eg_model *model, int index);
/* The model's name ("sequential"); valid while it lives. */
const char *eg_model_name(const eg_model *model);
/* The trainable variables of all layers in layer order (each layer's in creation order, e.g.
 * dense/kernel, dense/bias, dense_1/kernel, dense_1/bias), as an array owned by the model, valid
 * until the next call of this function or a change to the model; the variables are borrowed.
 * *n_variables gets the count (0 before the model is built). NULL with an error when model or
 * n_variables is NULL or host memory runs out; otherwise never NULL. The array passes as is to
 * eg_tape_gradient and eg_optimizer_apply_gradients. */
eg_tensor *const *eg_model_trainable_variables(eg_model *model, int *n_variables);
/* Every variable of all layers (trainable or not: e.g. BatchNormalization's moving statistics
 * too) in layer order, each layer's in creation order; what a checkpoint must save and restore
 * to reproduce the model. Same ownership and lifetime rules as eg_model_trainable_variables
 * (the two arrays are separate). */
eg_tensor *const *eg_model_variables(eg_model *model, int *n_variables);
/* Total number of scalars in all layers' variables (trainable or not). */
int64_t eg_model_count_params(const eg_model *model);
/* Writes a table like Keras' (2.x) model.summary() to out: one row per layer with its name and
 * type, its output shape ("(None, 64)": None for unknown sizes; "?" before the layer is built)
 * and its parameter count, then total, trainable and non-trainable parameters:
 *
 *   Model: "sequential"
 *   _________________________________________________________________
 *    Layer (type)                Output Shape              Param #
 *   =================================================================
 *    dense (Dense)               (None, 64)                50,240
 *   _________________________________________________________________
 *    dense_1 (Dense)             (None, 10)                650
 *   =================================================================
 *   Total params: 50,890
 *   Trainable params: 50,890
 *   Non-trainable params: 0
 *   _________________________________________________________________
 *
 * EG_ERR_NULL_ARGUMENT for a NULL model or out; EG_ERR_IO when writing fails. */
eg_status eg_model_summary(const eg_model *model, FILE *out);

/* Keras' save_weights: every variable of the model (eg_model_variables: trainable ones and
 * moving statistics) into a safetensors file at path (atomically), named by variable name
 * ("dense/kernel"), readable by the safetensors package. Errors as eg_safetensors_save. */
eg_status eg_model_save_weights(eg_model *model, const char *path);
/* Keras' load_weights, by name: the file must hold exactly the model's variables, each with its
 * dtype and shape. A missing tensor, one the model has no variable for, or one of another dtype
 * or shape is an error naming it (EG_ERR_INVALID_ARGUMENT / EG_ERR_SHAPE) and changes nothing:
 * everything is checked before any variable is written. The model must be built. */
eg_status eg_model_load_weights(eg_model *model, const char *path);
/* Sets `policy` on every layer of the model that was not given its own (eg_layer_set_policy),
 * and on layers added later; eg_model_summary prints it. EG_ERR_NULL_ARGUMENT,
 * EG_ERR_INVALID_ARGUMENT for an invalid policy. */
eg_status eg_model_set_policy(eg_model *model, eg_policy policy);
/* The model's policy: the last one set, else the global policy when it was made. */
eg_policy eg_model_policy(const eg_model *model);
/* Frees the model, its layers and their variables. NULL is ignored. */
void eg_model_free(eg_model *model);

/* ======================================================================================
 * Models beyond a stack: Keras' functional API
 *
 *     eg_symbol *x = eg_input(3, (int64_t[]){28, 28, 1}, EG_DTYPE_F32, NULL);
 *     eg_symbol *h = eg_layer_apply(eg_conv2d_new(16, 3, EG_PADDING_SAME, EG_ACTIVATION_RELU), x);
 *     eg_symbol *y = eg_layer_apply(eg_conv2d_new(16, 3, EG_PADDING_SAME, EG_ACTIVATION_NONE), h);
 *     eg_symbol *sum = eg_layer_apply_multi(eg_add_layer_new(NULL), 2, (const eg_symbol *[]){h,
 * y});
 *     ...
 *     eg_model *model = eg_functional_model_new(1, &x, 1, &logits, "resnet");
 *
 * A symbol stands for a tensor the model will compute: its shape (the batch unknown) and the
 * layer application that makes it. Applying a layer to symbols builds the layer for their shapes
 * and records the application (Keras' node) on it; applying one layer object twice shares it
 * (one set of weights, listed once, whose gradient sums both uses). eg_functional_model_new
 * gathers every application between the outputs and the inputs into a graph run in topological
 * order. The model is an eg_model like a Sequential one: the same call (eg_model_call with one
 * input and output, eg_model_call_multi otherwise), variables, summary (with Keras' "Connected
 * to" column), save/load weights, policies, and the training loop of eagle/fit.h in each of its
 * execution modes.
 *
 * OWNERSHIP: a symbol belongs to the layer that made it (eg_input's to its InputLayer): it is
 * valid while that layer lives and is never freed on its own. eg_functional_model_new takes every
 * layer of the graph (InputLayers too): the model frees them. Layers applied but left out of
 * every model stay the caller's (eg_layer_free; eg_symbol_layer gives an Input's layer). A
 * layer belongs to at most one model.
 * ====================================================================================== */

typedef struct eg_symbol eg_symbol;

/* Keras' Input: a symbol of shape (batch, shape...) with the batch unknown, for inputs of
 * `dtype` (n_dims >= 0 sizes, each >= 1 or -1 for unknown). Made by a new InputLayer, named
 * `name` (NULL: "input_layer", made unique by the model). NULL with an error for a bad shape or
 * dtype, or out of host memory. */
eg_symbol *eg_input(int n_dims, const int64_t *shape, eg_dtype dtype, const char *name);
/* Applies `layer` to x: builds the layer for x's shape when it is unbuilt (a built layer must
 * fit it) and returns the symbol of its output, owned by the layer. A NULL x returns NULL
 * without a new error (chains check once at the end). On failure (NULL with an error: a shape
 * the layer does not take, a layer of another model or with more inputs) a layer applied for the
 * first time is freed, so that a chain eg_layer_apply(eg_dense_new(...), x) leaks nothing; a
 * layer applied before is left alone. */
eg_symbol *eg_layer_apply(eg_layer *layer, const eg_symbol *x);
/* The same for a layer that takes n_inputs symbols (Add, Concatenate, a custom class). */
eg_symbol *eg_layer_apply_multi(eg_layer *layer, int n_inputs, const eg_symbol *const *inputs);
/* The symbol's shape (*n_dims sizes, -1 where unknown; the array is the symbol's), the layer
 * that made it (borrowed). NULL / 0 for NULL. */
const int64_t *eg_symbol_shape(const eg_symbol *symbol, int *n_dims);
eg_layer *eg_symbol_layer(const eg_symbol *symbol);
/* A functional model named `name` (NULL: "model") computing the outputs (n_outputs >= 1) from
 * the inputs (n_inputs >= 1, each made by eg_input), built. Unnamed layers get Keras' unique
 * names ("dense", "dense_1", ...; see eg_sequential_add). Takes ownership of every layer of the
 * graph. NULL with an error (nothing is taken) for NULL arguments, an input that is not an
 * eg_input symbol or is given twice, an output that needs an input not among `inputs`
 * ("graph disconnected"), a layer of another model, two layers of one name, or out of host
 * memory. */
eg_model *eg_functional_model_new(int n_inputs, const eg_symbol *const *inputs, int n_outputs,
                                  const eg_symbol *const *outputs, const char *name);

/* ======================================================================================
 * Losses: Keras' formulas. Arguments are (y_true, y_pred) like Keras. The per-sample loss has
 * y_pred's shape without its last axis; `reduction` then gives:
 *   MEAN (Keras' sum_over_batch_size): a 0-d tensor, the mean of the per-sample losses;
 *   SUM: a 0-d tensor, their sum;
 *   NONE: the per-sample losses.
 * When y_true's dtype differs from y_pred's (except for the sparse labels) it is cast to
 * y_pred's (integer labels for regression, etc.). y_pred must be f32 or f64. All are built of
 * recorded ops, so gradients flow to y_pred.
 * ====================================================================================== */

typedef enum eg_reduction {
    EG_REDUCTION_MEAN = 0,
    EG_REDUCTION_SUM,
    EG_REDUCTION_NONE,
    EG_REDUCTION_COUNT
} eg_reduction;

/* labels (...): integer class indices (i32, i64, u8 or an integral float) in [0, C);
 * y_pred (..., C). from_logits: y_pred are logits, and the loss is the fused, stable
 * eg_sparse_softmax_cross_entropy op (-log_softmax(logits)[label]); otherwise y_pred are
 * probabilities, normalised to sum 1 along the last axis and clipped to [1e-7, 1 - 1e-7] as
 * Keras does, the loss being -log(p[label]). Labels of shape (..., 1) are accepted too.
 * Out-of-range labels are an error. */
eg_tensor *eg_loss_sparse_categorical_crossentropy(const eg_tensor *labels, const eg_tensor *y_pred,
                                                   bool from_logits, eg_reduction reduction);
/* y_true (..., C): a distribution over the classes (one-hot or smoothed), y_pred (..., C).
 * from_logits: -sum(y_true * log_softmax(y_pred)); otherwise the probabilities are normalised
 * and clipped as above: -sum(y_true * log(p)). */
eg_tensor *eg_loss_categorical_crossentropy(const eg_tensor *y_true, const eg_tensor *y_pred,
                                            bool from_logits, eg_reduction reduction);
/* Element-wise binary cross-entropy, averaged over the last axis. from_logits: the stable
 * form max(x, 0) - x z + log(1 + exp(-|x|)) (TF's sigmoid_cross_entropy_with_logits, with the
 * exact gradient sigmoid(x) - z everywhere); otherwise p clipped to [1e-7, 1 - 1e-7] and
 * -(z log p + (1 - z) log(1 - p)). y_true and y_pred must have the same shape after Keras' rank
 * fix-up (see eg_loss_mean_squared_error). */
eg_tensor *eg_loss_binary_crossentropy(const eg_tensor *y_true, const eg_tensor *y_pred,
                                       bool from_logits, eg_reduction reduction);
/* mean((y_pred - y_true)^2) over the last axis. y_true and y_pred must have the same shape after
 * Keras' rank fix-up: when the ranks differ by one and the longer ends in a size-1 axis, a 1-d
 * partner is expanded (y_true (B,) with y_pred (B, 1) is compared element by element, never
 * broadcast to (B, B)), otherwise that axis is squeezed. EG_ERR_SHAPE otherwise. */
eg_tensor *eg_loss_mean_squared_error(const eg_tensor *y_true, const eg_tensor *y_pred,
                                      eg_reduction reduction);
/* mean(|y_pred - y_true|) over the last axis; shapes as for eg_loss_mean_squared_error. */
eg_tensor *eg_loss_mean_absolute_error(const eg_tensor *y_true, const eg_tensor *y_pred,
                                       eg_reduction reduction);
/* Huber: with e = y_pred - y_true, 0.5 e^2 where |e| <= delta, else delta (|e| - 0.5 delta),
 * averaged over the last axis; shapes as for eg_loss_mean_squared_error. delta > 0 (Keras'
 * default is 1.0), else EG_ERR_INVALID_ARGUMENT. */
eg_tensor *eg_loss_huber(const eg_tensor *y_true, const eg_tensor *y_pred, double delta,
                         eg_reduction reduction);

/* ======================================================================================
 * Metrics: per-sample functions returning f32 tensors of 1 (hit) and 0 (miss), never recorded on
 * tapes, plus a running mean to accumulate them (or losses) over batches.
 * ====================================================================================== */

/* Keras' accuracy with argmax: when predictions has one more axis than labels, its argmax over
 * the last axis are the predicted classes; otherwise predictions are the predicted values
 * themselves. Returns 1.0f where they equal labels (compared as doubles), shaped like labels.
 * Labels: any integer or float dtype. */
eg_tensor *eg_metric_accuracy(const eg_tensor *labels, const eg_tensor *predictions);
/* labels (...) or (..., 1): integer class indices (i32, i64, u8, or integral floats);
 * predictions (..., C) logits or probabilities. 1.0f where argmax(predictions) == label.
 * Ties take the first index, like argmax. */
eg_tensor *eg_metric_sparse_categorical_accuracy(const eg_tensor *labels,
                                                 const eg_tensor *predictions);
/* y_true (..., C) one-hot, predictions (..., C): 1.0f where the argmaxes agree. */
eg_tensor *eg_metric_categorical_accuracy(const eg_tensor *y_true, const eg_tensor *predictions);

/* A running (weighted) mean, Keras' metrics.Mean. A plain struct: zero-initialise it
 * (eg_metric_mean m = {0};) or call eg_metric_mean_reset. No ownership, nothing to free. */
typedef struct eg_metric_mean {
    double total; /* sum of value * weight */
    double count; /* sum of weights */
} eg_metric_mean;

/* Forgets everything (total = count = 0). */
void eg_metric_mean_reset(eg_metric_mean *metric);
/* Adds one value with a weight (weight >= 0). EG_ERR_NULL_ARGUMENT for a NULL metric,
 * EG_ERR_INVALID_ARGUMENT for a negative or non-finite weight. */
eg_status eg_metric_mean_add(eg_metric_mean *metric, double value, double weight);
/* Adds every element of `values` (any dtype, e.g. a batch's per-sample hits or a 0-d loss) with
 * weight 1 each. Reads the values on the host; nothing is recorded on tapes. */
eg_status eg_metric_mean_update(eg_metric_mean *metric, const eg_tensor *values);
/* total / count, or 0 when nothing was added (as Keras). 0 for NULL. */
double eg_metric_mean_result(const eg_metric_mean *metric);

#if !defined(EG_NO_CALLSITE)
#define eg_policy_from_name(...)          EG_CALLSITE_(eg_policy_from_name(__VA_ARGS__))
#define eg_set_global_policy(...)         EG_CALLSITE_(eg_set_global_policy(__VA_ARGS__))
#define eg_flatten_new(...)               EG_CALLSITE_(eg_flatten_new(__VA_ARGS__))
#define eg_activation_new(...)            EG_CALLSITE_(eg_activation_new(__VA_ARGS__))
#define eg_layer_set_policy(...)          EG_CALLSITE_(eg_layer_set_policy(__VA_ARGS__))
#define eg_layer_free(...)                EG_CALLSITE_(eg_layer_free(__VA_ARGS__))
#define eg_sequential_new(...)            EG_CALLSITE_(eg_sequential_new(__VA_ARGS__))
#define eg_model_trainable_variables(...) EG_CALLSITE_(eg_model_trainable_variables(__VA_ARGS__))
#define eg_model_set_policy(...)          EG_CALLSITE_(eg_model_set_policy(__VA_ARGS__))
#define eg_metric_mean_add(...)           EG_CALLSITE_(eg_metric_mean_add(__VA_ARGS__))

#define eg_initializer_generate(...)  EG_CALLSITE_(eg_initializer_generate(__VA_ARGS__))
#define eg_model_save_weights(...)    EG_CALLSITE_(eg_model_save_weights(__VA_ARGS__))
#define eg_model_load_weights(...)    EG_CALLSITE_(eg_model_load_weights(__VA_ARGS__))
#define eg_dense_new(...)             EG_CALLSITE_(eg_dense_new(__VA_ARGS__))
#define eg_dense_new_ex(...)          EG_CALLSITE_(eg_dense_new_ex(__VA_ARGS__))
#define eg_conv2d_new(...)            EG_CALLSITE_(eg_conv2d_new(__VA_ARGS__))
#define eg_conv2d_new_ex(...)         EG_CALLSITE_(eg_conv2d_new_ex(__VA_ARGS__))
#define eg_max_pool2d_new(...)        EG_CALLSITE_(eg_max_pool2d_new(__VA_ARGS__))
#define eg_max_pool2d_new_ex(...)     EG_CALLSITE_(eg_max_pool2d_new_ex(__VA_ARGS__))
#define eg_avg_pool2d_new(...)        EG_CALLSITE_(eg_avg_pool2d_new(__VA_ARGS__))
#define eg_avg_pool2d_new_ex(...)     EG_CALLSITE_(eg_avg_pool2d_new_ex(__VA_ARGS__))
#define eg_global_avg_pool2d_new(...) EG_CALLSITE_(eg_global_avg_pool2d_new(__VA_ARGS__))
#define eg_batch_norm_new(...)        EG_CALLSITE_(eg_batch_norm_new(__VA_ARGS__))
#define eg_layer_norm_new(...)        EG_CALLSITE_(eg_layer_norm_new(__VA_ARGS__))
#define eg_dropout_new(...)           EG_CALLSITE_(eg_dropout_new(__VA_ARGS__))
#define eg_embedding_new(...)         EG_CALLSITE_(eg_embedding_new(__VA_ARGS__))
#define eg_lstm_new(...)              EG_CALLSITE_(eg_lstm_new(__VA_ARGS__))
#define eg_gru_new(...)               EG_CALLSITE_(eg_gru_new(__VA_ARGS__))
#define eg_bidirectional_new(...)        EG_CALLSITE_(eg_bidirectional_new(__VA_ARGS__))
#define eg_rnn_state_count(...)       EG_CALLSITE_(eg_rnn_state_count(__VA_ARGS__))
#define eg_multi_head_attention_new(...) EG_CALLSITE_(eg_multi_head_attention_new(__VA_ARGS__))
#define eg_position_embedding_new(...)   EG_CALLSITE_(eg_position_embedding_new(__VA_ARGS__))
#define eg_transformer_encoder_new(...)  EG_CALLSITE_(eg_transformer_encoder_new(__VA_ARGS__))
#define eg_transformer_decoder_new(...)  EG_CALLSITE_(eg_transformer_decoder_new(__VA_ARGS__))
#define eg_sample_logits(...)            EG_CALLSITE_(eg_sample_logits(__VA_ARGS__))
#define eg_rnn_call(...)              EG_CALLSITE_(eg_rnn_call(__VA_ARGS__))
#define eg_embedding_mask(...)        EG_CALLSITE_(eg_embedding_mask(__VA_ARGS__))
#define eg_layer_call(...)            EG_CALLSITE_(eg_layer_call(__VA_ARGS__))
#define eg_layer_build(...)           EG_CALLSITE_(eg_layer_build(__VA_ARGS__))
#define eg_sequential_add(...)        EG_CALLSITE_(eg_sequential_add(__VA_ARGS__))
#define eg_model_build(...)           EG_CALLSITE_(eg_model_build(__VA_ARGS__))
#define eg_model_call(...)            EG_CALLSITE_(eg_model_call(__VA_ARGS__))
#define eg_model_call_multi(...)      EG_CALLSITE_(eg_model_call_multi(__VA_ARGS__))
#define eg_layer_new_custom(...)      EG_CALLSITE_(eg_layer_new_custom(__VA_ARGS__))
#define eg_layer_add_weight(...)      EG_CALLSITE_(eg_layer_add_weight(__VA_ARGS__))
#define eg_layer_call_multi(...)      EG_CALLSITE_(eg_layer_call_multi(__VA_ARGS__))
#define eg_add_layer_new(...)         EG_CALLSITE_(eg_add_layer_new(__VA_ARGS__))
#define eg_concatenate_new(...)       EG_CALLSITE_(eg_concatenate_new(__VA_ARGS__))
#define eg_input(...)                 EG_CALLSITE_(eg_input(__VA_ARGS__))
#define eg_layer_apply(...)           EG_CALLSITE_(eg_layer_apply(__VA_ARGS__))
#define eg_layer_apply_multi(...)     EG_CALLSITE_(eg_layer_apply_multi(__VA_ARGS__))
#define eg_functional_model_new(...)  EG_CALLSITE_(eg_functional_model_new(__VA_ARGS__))
#define eg_model_summary(...)         EG_CALLSITE_(eg_model_summary(__VA_ARGS__))
#define eg_model_variables(...)       EG_CALLSITE_(eg_model_variables(__VA_ARGS__))
#define eg_loss_sparse_categorical_crossentropy(...)                                               \
    EG_CALLSITE_(eg_loss_sparse_categorical_crossentropy(__VA_ARGS__))
#define eg_loss_categorical_crossentropy(...)                                                      \
    EG_CALLSITE_(eg_loss_categorical_crossentropy(__VA_ARGS__))
#define eg_loss_binary_crossentropy(...) EG_CALLSITE_(eg_loss_binary_crossentropy(__VA_ARGS__))
#define eg_loss_mean_squared_error(...)  EG_CALLSITE_(eg_loss_mean_squared_error(__VA_ARGS__))
#define eg_loss_mean_absolute_error(...) EG_CALLSITE_(eg_loss_mean_absolute_error(__VA_ARGS__))
#define eg_loss_huber(...)               EG_CALLSITE_(eg_loss_huber(__VA_ARGS__))
#define eg_metric_accuracy(...)          EG_CALLSITE_(eg_metric_accuracy(__VA_ARGS__))
#define eg_metric_sparse_categorical_accuracy(...)                                                 \
    EG_CALLSITE_(eg_metric_sparse_categorical_accuracy(__VA_ARGS__))
#define eg_metric_categorical_accuracy(...)                                                        \
    EG_CALLSITE_(eg_metric_categorical_accuracy(__VA_ARGS__))
#define eg_metric_mean_update(...) EG_CALLSITE_(eg_metric_mean_update(__VA_ARGS__))
#endif

#ifdef __cplusplus
}
#endif
#endif
