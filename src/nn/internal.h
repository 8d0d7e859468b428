/* Internal: what the files of src/nn share — the layer and model structs and a list of
 * temporaries released together. */
#ifndef EAGLE_SRC_NN_INTERNAL_H
#define EAGLE_SRC_NN_INTERNAL_H

#include "base/error.h"
#include "core/tensor_internal.h"
#include "eagle/autograd.h"
#include "eagle/checkpoint.h"
#include "eagle/nn.h"
#include "eagle/ops.h"

typedef enum eg__layer_kind {
    EG__LAYER_DENSE,
    EG__LAYER_FLATTEN,
    EG__LAYER_ACTIVATION,
    EG__LAYER_CONV2D,
    EG__LAYER_MAX_POOL2D,
    EG__LAYER_AVG_POOL2D,
    EG__LAYER_GLOBAL_AVG_POOL2D,
    EG__LAYER_BATCH_NORM,
    EG__LAYER_LAYER_NORM,
    EG__LAYER_DROPOUT,
    EG__LAYER_EMBEDDING, /* recurrent_layers.c */
    EG__LAYER_LSTM,
    EG__LAYER_GRU,
    EG__LAYER_BIDIRECTIONAL,
    EG__LAYER_CUSTOM, /* a user's eg_layer_class (custom_layers.c); Add and Concatenate too */
    EG__LAYER_INPUT,  /* the functional API's InputLayer (functional.c) */
    EG__LAYER_KIND_COUNT
} eg__layer_kind;

/* Custom layers add weights freely (a TransformerDecoder has 26); the built-in kinds use at
 * most 4. */
#define EG__LAYER_MAX_VARIABLES 32
/* The most inputs one call of a layer takes (a custom class's max_inputs). */
#define EG__LAYER_MAX_INPUTS 16

/* One application of a layer to symbols (Keras' Node): the symbol it outputs. Allocated one by
 * one, so that the pointers handed out stay valid while the layer's node list grows. */
struct eg_symbol {
    eg_layer *layer; /* the layer applied; it owns this node */
    int node_index;  /* in layer->nodes */
    int n_inputs;
    const struct eg_symbol **inputs; /* borrowed: other layers' nodes */
    int n_dims;
    int64_t shape[EG_MAX_DIMS]; /* -1: unknown (the batch) */
    eg_dtype dtype;             /* InputLayer's: what the model checks its input against */
};

struct eg_layer {
    eg__layer_kind kind;
    char *name;             /* NULL until named (by the user, a model, or the first build) */
    bool name_fixed;        /* named by the user or by the owning model */
    struct eg_model *owner; /* the model that owns the layer, or NULL */
    bool trainable;
    bool built;
    int output_n_dims; /* known once built; -1 entries are unknown sizes */
    int64_t output_shape[EG_MAX_DIMS];
    eg_tensor *variables[EG__LAYER_MAX_VARIABLES]; /* owned */
    bool frozen[EG__LAYER_MAX_VARIABLES];          /* never trainable (moving statistics) */
    int n_variables;
    eg_dtype dtype;           /* of the variables */
    eg_policy policy;         /* what a call computes in (policy.c) */
    bool policy_fixed;        /* set by eg_layer_set_policy: a model's policy leaves it alone */
    eg_generator *generator;  /* for their initializers (NULL: the default generator) */
    eg_activation activation; /* DENSE, ACTIVATION */
    /* DENSE, CONV2D: an int8 snapshot of the kernel (eg_layer_quantize_int8; owned, or NULL) that
     * inference calls use (quantized_layers.c) */
    eg_tensor *int8_kernel, *int8_scale;
    /* DENSE: training calls estimate the gradient from this fraction of the batch (and of the
     * units, with sample_inputs): eg_layer_set_gradient_sampling; 0 exact */
    double sample_fraction;
    bool sample_inputs;
    /* DENSE */
    int64_t units;
    int64_t input_dim; /* 0 until built */
    eg_dense_options dense;
    /* CONV2D (filters in units) */
    int kernel[2];
    eg_conv2d_layer_options conv;
    /* MAX_POOL2D, AVG_POOL2D, GLOBAL_AVG_POOL2D (pool.data_format) */
    eg_pool2d_options pool;
    /* BATCH_NORM, LAYER_NORM (axis normalized when built) */
    eg_batch_norm_options norm;
    int norm_axis;
    /* DROPOUT */
    double rate;
    /* EMBEDDING (input_dim: the vocabulary, units: output_dim), LSTM and GRU (units) */
    eg_embedding_options embedding;
    eg_rnn_options rnn;
    struct eg_layer *inner; /* BIDIRECTIONAL: the wrapped LSTM or GRU (owned; its cell only) */
    /* CUSTOM: the class (borrowed), the user's state (owned: free_state at destruction) and the
     * default name prefix (owned: the class's, or its type in snake_case) */
    const eg_layer_class *layer_class;
    void *state;
    char *prefix;
    /* Applications to symbols (functional API), owned */
    struct eg_symbol **nodes;
    int n_nodes, nodes_capacity;
};

/* How many inputs a call of the layer takes: [*min, *max] (1, 1 for the built-in kinds). */
void eg__layer_arity(const eg_layer *layer, int *min_inputs, int *max_inputs);
/* Builds the layer for n inputs (n == 1 for the built-in kinds: eg_layer_build). */
eg_status eg__layer_build_multi(eg_layer *layer, int n_inputs, const eg_layer_shape *shapes);
/* CUSTOM's build and output shape (custom_layers.c): layer->output_shape from the class. */
eg_status eg__custom_layer_build(eg_layer *layer, int n_inputs, const eg_layer_shape *shapes);
/* CUSTOM's call with the variables already cast for its policy. */
eg_tensor *eg__custom_layer_call(eg_layer *layer, int n_inputs, const eg_tensor *const *inputs,
                                 const eg_tensor *const *variables, bool training);
/* Frees the nodes of a layer (functional.c). */
void eg__layer_free_nodes(eg_layer *layer);

/* The dtype the layer computes in: its policy's, or its variables' under FLOAT32. */
eg_dtype eg__layer_compute_dtype(const eg_layer *layer);
/* EG_OK for a valid policy, else EG_ERR_INVALID_ARGUMENT naming `what`. */
eg_status eg__policy_check(eg_policy policy, const char *what);

/* The type's default name prefix ("dense"). */
const char *eg__layer_prefix(const eg_layer *layer);
/* Sets the layer's name (copied); false when out of host memory (error raised). */
bool eg__layer_set_name(eg_layer *layer, const char *name);

/* A new layer of `kind` named `name` (NULL: named later), trainable; NULL when out of memory. */
eg_layer *eg__layer_new(eg__layer_kind kind, const char *name, const char *what);
/* A new variable `<layer>/<what>` of the layer's dtype filled by `init` (with the layer's
 * generator), trainable unless frozen or the layer is not; NULL with an error. */
eg_tensor *eg__layer_make_variable(eg_layer *layer, const char *what, const eg_initializer *init,
                                   int n_dims, const int64_t *shape);
/* Build and call for the kinds of conv_layers.c (CONV2D and after). */
eg_status eg__conv_layer_build(eg_layer *layer, int n_dims, const int64_t *input_shape);
/* variables: the layer's, cast to what the call computes in (eg_layer_call). */
eg_tensor *eg__conv_layer_call(eg_layer *layer, const eg_tensor *x,
                               const eg_tensor *const *variables, bool training);

/* Build and call for EMBEDDING, LSTM and GRU (recurrent_layers.c); mask NULL or (B, T) bool. */
eg_status eg__recurrent_layer_build(eg_layer *layer, int n_dims, const int64_t *input_shape);
eg_tensor *eg__recurrent_layer_call(eg_layer *layer, const eg_tensor *x, const eg_tensor *mask,
                                    const eg_tensor *const *variables);
/* Whether the layer takes a bool key mask among its inputs (MultiHeadAttention and
 * TransformerEncoder: attention_layers.c), which a Sequential then hands it. */
bool eg__layer_takes_mask(const eg_layer *layer);
/* Whether a Sequential hands a mask on past the layer (it keeps the time axis): the ones that
 * take a mask, and PositionEmbedding. */
bool eg__layer_passes_mask(const eg_layer *layer);
/* Whether the layer is LSTM, GRU or Bidirectional. */
bool eg__layer_is_recurrent(const eg_layer *layer);
/* An LSTM over a whole sequence as one tape node (rnn_sequence.c): projected (T * B, 4H) is
 * every step's input projection, time-major; recurrent (H, 4H); h0, c0 (B, H) the states before
 * the first step. Steps run from time 0, or from T - 1 with reverse; outputs[0] gets every
 * step's h (T * B, H), its blocks in time order with time_order, else in processing order, and
 * outputs[1] the last c (B, H): new references. products bf16 / f16: every product's operands
 * rounded to it, sums in f32 (a mixed policy); EG_DTYPE_F32: the inputs' own products. */
/* The GRU's (rnn_sequence.c): projected (T * B, 3H) with the input bias added, recurrent_bias
 * (3H) or NULL, h0 (B, H); outputs[0] every step's h (T * B, H), outputs[1] set to NULL. */
eg_status eg__gru_sequence(const eg_tensor *projected, const eg_tensor *recurrent,
                           const eg_tensor *recurrent_bias, const eg_tensor *h0, bool reverse,
                           bool time_order, eg_dtype products, eg_tensor **outputs);
eg_status eg__lstm_sequence(const eg_tensor *projected, const eg_tensor *recurrent,
                            const eg_tensor *h0, const eg_tensor *c0, bool reverse, bool time_order,
                            eg_dtype products, eg_tensor **outputs);

/* Undoes a build: releases the layer's variables and marks it unbuilt (a model build that failed
 * after it). */
void eg__layer_unbuild(eg_layer *layer);

/* Replaces the variables of a built layer by copies named after its current name. */
eg_status eg__layer_rename_variables(eg_layer *layer);
/* Frees the layer and releases its variables, whoever owns it. */
void eg__layer_destroy(eg_layer *layer);

/* ---- models (model.c: Sequential; functional.c: the functional API) ---- */

struct eg_model {
    char *name;
    bool functional;   /* built by eg_functional_model_new */
    eg_layer **layers; /* owned; a functional model's in topological order, inputs first */
    int n_layers, capacity;
    bool built;
    int input_n_dims;
    int64_t input_shape[EG_MAX_DIMS];
    eg_tensor **trainable; /* cache returned by eg_model_trainable_variables */
    int trainable_capacity;
    eg_tensor **all; /* cache returned by eg_model_variables */
    int all_capacity;
    eg_policy policy; /* eg_model_set_policy's, else the global policy when made */
    bool policy_set;  /* layers added later get it */
    /* What a layer above attached (the training loop's compiled configuration), and how it
     * frees it: the model frees it without naming that layer. */
    void *attachment;
    void (*attachment_free)(void *attachment);
    /* Functional: the nodes to run in order (borrowed from their layers), the model's inputs
     * (InputLayer nodes) and outputs, and for each node how many later nodes (or outputs) read
     * it, so that a call releases each intermediate after its last reader. */
    const struct eg_symbol **nodes;
    int n_nodes;
    const struct eg_symbol **inputs, **outputs;
    int n_inputs, n_outputs;
    int *n_readers;
    /* node i reads the nodes at input_positions[input_offsets[i] .. input_offsets[i + 1]) */
    int *input_offsets, *input_positions;
};

/* A functional model's call (functional.c). */
eg_status eg__functional_call(eg_model *model, int n_inputs, const eg_tensor *const *inputs,
                              bool training, int n_outputs, eg_tensor **outputs);
/* The index of node in the model's node order, -1 when it is not the model's. */
int eg__model_node_position(const eg_model *model, const struct eg_symbol *node);

/* ---- what layers above attach to a model (model.c) ---- */
/* The attachment (NULL: none). */
void *eg__model_attachment(const eg_model *model);
/* Replaces the attachment, freeing the previous one with its function; eg_model_free frees the
 * last. attachment_free may be NULL (nothing to free). */
void eg__model_attach(eg_model *model, void *attachment, void (*attachment_free)(void *));
bool eg__model_is_built(const eg_model *model);

/* The safetensors file's tensor named like variable v has v's dtype and shape; else an error
 * from `what` naming the tensor, the file and both shapes (model_weights.c). */
eg_status eg__check_stored_variable(const eg_safetensors *st, const eg_tensor *v, const char *path,
                                    const char *what);

/* The eg_conv2d options of a Conv2D layer's call (conv_layers.c). */
eg_conv2d_options eg__conv_layer_options(const eg_layer *layer);
/* Puts layer (built, unowned) in place of a Sequential model's layer `index`, under the old
 * one's name (its variables renamed), and frees the old one; a compiled training configuration
 * is dropped. On failure the layer is freed and the model unchanged (lowrank_layers.c). */
eg_status eg__model_replace_layer(eg_model *model, int index, eg_layer *layer);
/* A training call of a Dense layer with gradient sampling (quantized_layers.c): *handled false
 * (and NULL) where eg_dense_sampled does not apply (then the exact call runs); a layer without a
 * bias adds a zero one (its output's -0.0 become +0.0). */
eg_tensor *eg__layer_sampled_call(eg_layer *layer, const eg_tensor *x,
                                  const eg_tensor *const *variables, bool *handled);
/* An inference call of a Dense or Conv2D layer with an int8 snapshot (quantized_layers.c): its
 * result, or NULL with *handled false where the snapshot does not apply (then the exact call
 * runs). */
eg_tensor *eg__layer_int8_call(eg_layer *layer, const eg_tensor *x,
                               const eg_tensor *const *variables, bool *handled);

#endif
