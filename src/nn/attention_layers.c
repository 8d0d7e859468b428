/* Attention layers: MultiHeadAttention (Keras'), PositionEmbedding and the Transformer encoder
 * and decoder blocks (KerasNLP's), as built-in classes of the custom-layer interface, so that they
 * take several inputs, work in the functional API and a Sequential, and save like any layer.
 *
 * The attention itself is the fused eg_scaled_dot_product_attention: the (Tq, Tk) scores never
 * exist whole. Masks are bool inputs: a key mask (B, Tk) (true: attend), as Keras derives from
 * padded inputs; causal masking is a construction option. Weight names use '_' where Keras
 * nests with '/' ("query_kernel"), since a layer's weights are "<layer>/<weight>". */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nn/internal.h"

enum { ATTENTION_WEIGHTS = 8 }; /* query, key, value, output: kernel and bias each */

/* ---- MultiHeadAttention ---- */

eg_mha_options eg_mha_options_default(int num_heads, int64_t key_dim) {
    eg_mha_options o = {0};
    o.num_heads = num_heads;
    o.key_dim = key_dim;
    o.use_bias = true;
    o.kernel_initializer = eg_initializer_of(EG_INITIALIZER_GLOROT_UNIFORM);
    o.bias_initializer = eg_initializer_of(EG_INITIALIZER_ZEROS);
    return o;
}

static int64_t value_dim(const eg_mha_options *o) {
    return o->value_dim > 0 ? o->value_dim : o->key_dim;
}

/* The weights of one attention, added under `prefix` ("" or "self_attention_"): kernels in
 * Keras' shapes (E, heads, key_dim) and (heads, value_dim, E_out). */
static eg_status add_attention_weights(eg_layer *layer, const eg_mha_options *o, const char *prefix,
                                       int64_t query_dim, int64_t key_dim_in, int64_t value_dim_in,
                                       int64_t output_dim) {
    static const char *const parts[4] = {"query", "key", "value", "attention_output"};
    int64_t heads = o->num_heads, vd = value_dim(o);
    int64_t in_dims[3] = {query_dim, key_dim_in, value_dim_in};
    for (int p = 0; p < 4; p++) {
        char name[96];
        int64_t kernel[3], bias[2];
        if (p < 3) {
            int64_t depth = p == 2 ? vd : o->key_dim;
            memcpy(kernel, (int64_t[]){in_dims[p], heads, depth}, sizeof kernel);
            memcpy(bias, (int64_t[]){heads, depth}, sizeof bias);
        } else {
            memcpy(kernel, (int64_t[]){heads, vd, output_dim}, sizeof kernel);
            bias[0] = output_dim;
        }
        snprintf(name, sizeof name, "%s%s_kernel", prefix, parts[p]);
        if (!eg_layer_add_weight(layer, name, 3, kernel, EG_DTYPE_F32, &o->kernel_initializer,
                                 true))
            return eg_last_status();
        if (!o->use_bias) continue;
        snprintf(name, sizeof name, "%s%s_bias", prefix, parts[p]);
        if (!eg_layer_add_weight(layer, name, p < 3 ? 2 : 1, bias, EG_DTYPE_F32,
                                 &o->bias_initializer, true))
            return eg_last_status();
    }
    return EG_OK;
}

/* x (B, T, E) times a kernel (E, ...) flattened to (E, n) plus bias: (B, T, n). */
static eg_tensor *project(eg__temps *t, const eg_tensor *x, const eg_tensor *kernel,
                          const eg_tensor *bias) {
    int64_t b = x->shape[0], steps = x->shape[1], e = x->shape[2];
    int64_t n = kernel->n_elems / (kernel->shape[0] ? kernel->shape[0] : 1);
    eg_tensor *rows = eg__temp(t, eg_reshape(x, 2, (const int64_t[]){b * steps, e}));
    eg_tensor *k2 = eg__temp(t, eg_reshape(kernel, 2, (const int64_t[]){kernel->shape[0], n}));
    eg_tensor *b1 = bias ? eg__temp(t, eg_reshape(bias, 1, &n)) : NULL;
    if (!rows || !k2 || (bias && !b1)) return NULL;
    eg_tensor *y =
        eg__temp(t, b1 ? eg_dense(rows, k2, b1, EG_ACTIVATION_NONE) : eg_matmul(rows, k2));
    return y ? eg__temp(t, eg_reshape(y, 3, (const int64_t[]){b, steps, n})) : NULL;
}

/* (B, T, heads * depth) -> (B, heads, T, depth) */
static eg_tensor *split_heads(eg__temps *t, const eg_tensor *x, int64_t heads) {
    int64_t shape[4] = {x->shape[0], x->shape[1], heads, x->shape[2] / heads};
    eg_tensor *four = eg__temp(t, eg_reshape(x, 4, shape));
    return four ? eg__temp(t, eg_permute(four, (const int[]){0, 2, 1, 3})) : NULL;
}

/* One multi-head attention with weights w (query, key, value, output kernel and bias each,
 * the biases NULL without use_bias): a new reference (B, Tq, E_out). */
static eg_tensor *attend(const eg_mha_options *o, const eg_tensor *const *w, const eg_tensor *query,
                         const eg_tensor *value, const eg_tensor *key, const eg_tensor *key_mask,
                         bool causal) {
    eg__temps t = {0};
    int64_t heads = o->num_heads;
    eg_tensor *q = split_heads(&t, project(&t, query, w[0], w[1]), heads);
    eg_tensor *k = q ? split_heads(&t, project(&t, key, w[2], w[3]), heads) : NULL;
    eg_tensor *v = k ? split_heads(&t, project(&t, value, w[4], w[5]), heads) : NULL;
    /* Under a mixed policy the projections are 16-bit; the scores and their softmax need f32's
     * range and accuracy (as the policies keep softmax), so the attention runs in f32 and its
     * result goes back to the projections' dtype. */
    eg_dtype low = v ? v->dtype : EG_DTYPE_F32;
    bool widen = v && low != EG_DTYPE_F32 && low != EG_DTYPE_F64;
    if (widen) {
        q = eg__temp(&t, eg_cast(q, EG_DTYPE_F32));
        k = q ? eg__temp(&t, eg_cast(k, EG_DTYPE_F32)) : NULL;
        v = k ? eg__temp(&t, eg_cast(v, EG_DTYPE_F32)) : NULL;
    }
    eg_tensor *a = v ? eg__temp(&t, eg_scaled_dot_product_attention(q, k, v, key_mask, causal,
                                                                    1.0 / sqrt((double)o->key_dim)))
                     : NULL;
    if (widen && a) a = eg__temp(&t, eg_cast(a, low));
    eg_tensor *merged =
        a ? eg__temp(&t, eg_contiguous(eg__temp(&t, eg_permute(a, (const int[]){0, 2, 1, 3}))))
          : NULL;
    eg_tensor *y = NULL;
    if (merged) {
        int64_t b = query->shape[0], tq = query->shape[1], hv = heads * value_dim(o);
        int64_t eo = w[6]->shape[2];
        eg_tensor *rows = eg__temp(&t, eg_reshape(merged, 2, (const int64_t[]){b * tq, hv}));
        eg_tensor *k2 = eg__temp(&t, eg_reshape(w[6], 2, (const int64_t[]){hv, eo}));
        eg_tensor *flat = rows && k2
                              ? eg__temp(&t, w[7] ? eg_dense(rows, k2, w[7], EG_ACTIVATION_NONE)
                                                  : eg_matmul(rows, k2))
                              : NULL;
        y = flat ? eg_reshape(flat, 3, (const int64_t[]){b, tq, eo}) : NULL;
    }
    eg__temps_release(&t);
    return y;
}

/* The weights of attention `index` of a layer starting at variables[first]: with or without
 * biases, into w[8]. */
static void attention_weights(const eg_mha_options *o, eg_tensor *const *variables, int first,
                              const eg_tensor **w) {
    for (int p = 0; p < 4; p++) {
        w[2 * p] = variables[first + (o->use_bias ? 2 * p : p)];
        w[2 * p + 1] = o->use_bias ? variables[first + 2 * p + 1] : NULL;
    }
}

static int attention_weight_count(const eg_mha_options *o) {
    return o->use_bias ? ATTENTION_WEIGHTS : ATTENTION_WEIGHTS / 2;
}

/* The inputs of an attention call: the float ones (3-d) in order, the bool key mask (2-d). */
typedef struct sorted_inputs {
    const eg_tensor *seq[3];
    int n_seq;
    const eg_tensor *masks[2];
    int n_masks;
} sorted_inputs;

static eg_status sort_inputs(const eg_layer *layer, int n, eg_tensor *const *inputs,
                             sorted_inputs *s) {
    memset(s, 0, sizeof *s);
    for (int i = 0; i < n; i++) {
        const eg_tensor *x = inputs[i];
        if (x->dtype == EG_DTYPE_BOOL) {
            if (s->n_masks == 2)
                return eg__error(EG_ERR_INVALID_ARGUMENT, "%s: '%s' takes at most two masks",
                                 eg_layer_type(layer), eg_layer_name(layer));
            s->masks[s->n_masks++] = x;
        } else if (x->n_dims != 3) {
            char buf[96];
            return eg__error(EG_ERR_SHAPE,
                             "%s: '%s': input %d must be (batch, time, features), got %s",
                             eg_layer_type(layer), eg_layer_name(layer), i,
                             eg__shape_format(x->n_dims, x->shape, buf, sizeof buf));
        } else if (s->n_seq == 3) {
            return eg__error(EG_ERR_INVALID_ARGUMENT, "%s: '%s' takes at most three sequences",
                             eg_layer_type(layer), eg_layer_name(layer));
        } else {
            s->seq[s->n_seq++] = x;
        }
    }
    if (!s->n_seq)
        return eg__error(EG_ERR_INVALID_ARGUMENT, "%s: '%s' got no sequence input",
                         eg_layer_type(layer), eg_layer_name(layer));
    return EG_OK;
}

/* The float inputs' shapes at build time (masks are the 2-d ones). */
static int sequence_shapes(int n, const eg_layer_shape *shapes, const eg_layer_shape **seq) {
    int count = 0;
    for (int i = 0; i < n && count < 3; i++)
        if (shapes[i].n_dims == 3) seq[count++] = &shapes[i];
    return count;
}

static eg_status mha_build(eg_layer *layer, void *state, int n, const eg_layer_shape *shapes) {
    const eg_mha_options *o = state;
    const eg_layer_shape *seq[3];
    int count = sequence_shapes(n, shapes, seq);
    if (!count)
        return eg__error(EG_ERR_SHAPE,
                         "MultiHeadAttention: '%s' needs a (batch, time, features) "
                         "query",
                         eg_layer_name(layer));
    int64_t eq = seq[0]->dims[2], ev = seq[count > 1 ? 1 : 0]->dims[2];
    int64_t ek = seq[count > 2 ? 2 : count > 1 ? 1 : 0]->dims[2];
    return add_attention_weights(layer, o, "", eq, ek, ev, o->output_dim > 0 ? o->output_dim : eq);
}

static eg_status mha_output_shape(eg_layer *layer, void *state, int n, const eg_layer_shape *shapes,
                                  eg_layer_shape *out) {
    (void)layer;
    const eg_mha_options *o = state;
    const eg_layer_shape *seq[3];
    if (!sequence_shapes(n, shapes, seq))
        return eg__error(EG_ERR_SHAPE, "MultiHeadAttention: no (batch, time, features) query");
    *out = *seq[0];
    if (o->output_dim > 0) out->dims[2] = o->output_dim;
    return EG_OK;
}

static eg_tensor *mha_call(eg_layer *layer, void *state, int n, eg_tensor *const *inputs,
                           eg_tensor *const *variables, bool training) {
    (void)training;
    const eg_mha_options *o = state;
    sorted_inputs s;
    if (sort_inputs(layer, n, inputs, &s) != EG_OK) return NULL;
    const eg_tensor *query = s.seq[0], *value = s.n_seq > 1 ? s.seq[1] : query;
    const eg_tensor *key = s.n_seq > 2 ? s.seq[2] : value;
    const eg_tensor *w[ATTENTION_WEIGHTS];
    attention_weights(o, variables, 0, w);
    return attend(o, w, query, value, key, s.n_masks ? s.masks[0] : NULL, o->use_causal_mask);
}

static void free_options(void *state) {
    free(state);
}

static const eg_layer_class mha_class = {
    .type = "MultiHeadAttention",
    .name_prefix = "multi_head_attention",
    .min_inputs = 1,
    .max_inputs = 4,
    .build = mha_build,
    .compute_output_shape = mha_output_shape,
    .call = mha_call,
    .free_state = free_options,
};

static bool valid_initializers(const eg_initializer *a, const eg_initializer *b) {
    return (unsigned)a->kind < EG_INITIALIZER_COUNT && (unsigned)b->kind < EG_INITIALIZER_COUNT;
}

eg_layer *eg_multi_head_attention_new(const eg_mha_options *options) {
    if (!options) {
        eg__error(EG_ERR_NULL_ARGUMENT, "multi_head_attention: options is NULL");
        return NULL;
    }
    if (options->num_heads < 1 || options->key_dim < 1 || options->value_dim < 0 ||
        options->output_dim < 0 ||
        !valid_initializers(&options->kernel_initializer, &options->bias_initializer)) {
        eg__error(EG_ERR_INVALID_ARGUMENT,
                  "multi_head_attention: num_heads and key_dim must be >= 1, value_dim and "
                  "output_dim >= 0, initializers valid (got %d heads, key_dim %lld)",
                  options->num_heads, (long long)options->key_dim);
        return NULL;
    }
    eg_mha_options *state = malloc(sizeof *state);
    if (!state) {
        eg__error(EG_ERR_OUT_OF_MEMORY, "multi_head_attention: out of host memory");
        return NULL;
    }
    *state = *options;
    const char *name = options->name;
    state->name = NULL;
    return eg_layer_new_custom(&mha_class, state, name);
}

/* ---- PositionEmbedding: x + a learned (sequence_length, E) table's first T rows ---- */

typedef struct position_state {
    int64_t sequence_length;
} position_state;

static eg_status position_build(eg_layer *layer, void *state, int n, const eg_layer_shape *shapes) {
    (void)n;
    const position_state *p = state;
    if (shapes[0].n_dims != 3 || shapes[0].dims[2] < 1)
        return eg__error(EG_ERR_SHAPE, "PositionEmbedding: '%s' takes (batch, time, features)",
                         eg_layer_name(layer));
    eg_initializer init = eg_initializer_of(EG_INITIALIZER_GLOROT_UNIFORM);
    int64_t shape[2] = {p->sequence_length, shapes[0].dims[2]};
    return eg_layer_add_weight(layer, "embeddings", 2, shape, EG_DTYPE_F32, &init, true)
               ? EG_OK
               : eg_last_status();
}

static eg_tensor *position_call(eg_layer *layer, void *state, int n, eg_tensor *const *inputs,
                                eg_tensor *const *variables, bool training) {
    (void)n;
    (void)training;
    const position_state *p = state;
    const eg_tensor *x = inputs[0];
    if (x->n_dims != 3 || x->shape[1] > p->sequence_length) {
        eg__error(EG_ERR_SHAPE, "PositionEmbedding: '%s' holds %lld positions; got %s of %lld",
                  eg_layer_name(layer), (long long)p->sequence_length,
                  x->n_dims == 3 ? "a sequence" : "an input that is not (batch, time, features)",
                  x->n_dims == 3 ? (long long)x->shape[1] : 0LL);
        return NULL;
    }
    eg_tensor *rows = eg_slice(variables[0], 0, 0, x->shape[1], 1);
    eg_tensor *y = rows ? eg_add(x, rows) : NULL;
    eg_release(rows);
    return y;
}

static const eg_layer_class position_class = {
    .type = "PositionEmbedding",
    .name_prefix = "position_embedding",
    .build = position_build,
    .call = position_call,
    .free_state = free_options,
};

eg_layer *eg_position_embedding_new(int64_t sequence_length, const char *name) {
    if (sequence_length < 1) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "position_embedding: sequence_length must be >= 1");
        return NULL;
    }
    position_state *state = malloc(sizeof *state);
    if (!state) {
        eg__error(EG_ERR_OUT_OF_MEMORY, "position_embedding: out of host memory");
        return NULL;
    }
    state->sequence_length = sequence_length;
    return eg_layer_new_custom(&position_class, state, name);
}

/* ---- Transformer blocks (KerasNLP's TransformerEncoder / TransformerDecoder) ---- */

typedef struct transformer_state {
    eg_transformer_options options;
    eg_mha_options attention; /* heads, key_dim = hidden / heads, biases */
    bool decoder;
} transformer_state;

eg_transformer_options eg_transformer_options_default(int num_heads, int64_t intermediate_dim) {
    eg_transformer_options o = {0};
    o.num_heads = num_heads;
    o.intermediate_dim = intermediate_dim;
    o.layer_norm_epsilon = 1e-5;
    o.activation = EG_ACTIVATION_RELU;
    return o;
}

static eg_status add_norm(eg_layer *layer, const char *prefix, int64_t hidden) {
    char name[64];
    eg_initializer ones = eg_initializer_of(EG_INITIALIZER_ONES);
    snprintf(name, sizeof name, "%s_gamma", prefix);
    if (!eg_layer_add_weight(layer, name, 1, &hidden, EG_DTYPE_F32, &ones, true))
        return eg_last_status();
    snprintf(name, sizeof name, "%s_beta", prefix);
    return eg_layer_add_weight(layer, name, 1, &hidden, EG_DTYPE_F32, NULL, true)
               ? EG_OK
               : eg_last_status();
}

static eg_status transformer_build(eg_layer *layer, void *state, int n,
                                   const eg_layer_shape *shapes) {
    transformer_state *s = state;
    const eg_layer_shape *seq[3];
    int count = sequence_shapes(n, shapes, seq);
    if (!count || seq[0]->dims[2] < 1)
        return eg__error(EG_ERR_SHAPE, "%s: '%s' takes (batch, time, features)",
                         eg_layer_type(layer), eg_layer_name(layer));
    int64_t hidden = seq[0]->dims[2];
    if (hidden % s->options.num_heads)
        return eg__error(EG_ERR_SHAPE, "%s: '%s': %lld features do not split into %d heads",
                         eg_layer_type(layer), eg_layer_name(layer), (long long)hidden,
                         s->options.num_heads);
    if (s->decoder && count < 2)
        return eg__error(EG_ERR_INVALID_ARGUMENT,
                         "TransformerDecoder: '%s' takes (x, encoder outputs[, decoder mask[, "
                         "encoder mask]]): no encoder outputs",
                         eg_layer_name(layer));
    s->attention = eg_mha_options_default(s->options.num_heads, hidden / s->options.num_heads);
    eg_status st = add_attention_weights(layer, &s->attention, "self_attention_", hidden, hidden,
                                         hidden, hidden);
    if (st == EG_OK) st = add_norm(layer, "self_attention_layer_norm", hidden);
    if (st == EG_OK && s->decoder) {
        int64_t encoded = seq[1]->dims[2];
        st = add_attention_weights(layer, &s->attention, "cross_attention_", hidden, encoded,
                                   encoded, hidden);
        if (st == EG_OK) st = add_norm(layer, "cross_attention_layer_norm", hidden);
    }
    eg_initializer glorot = eg_initializer_of(EG_INITIALIZER_GLOROT_UNIFORM);
    int64_t inner = s->options.intermediate_dim;
    if (st == EG_OK &&
        (!eg_layer_add_weight(layer, "intermediate_kernel", 2, (const int64_t[]){hidden, inner},
                              EG_DTYPE_F32, &glorot, true) ||
         !eg_layer_add_weight(layer, "intermediate_bias", 1, &inner, EG_DTYPE_F32, NULL, true) ||
         !eg_layer_add_weight(layer, "output_kernel", 2, (const int64_t[]){inner, hidden},
                              EG_DTYPE_F32, &glorot, true) ||
         !eg_layer_add_weight(layer, "output_bias", 1, &hidden, EG_DTYPE_F32, NULL, true)))
        st = eg_last_status();
    if (st == EG_OK) st = add_norm(layer, "feedforward_layer_norm", hidden);
    return st;
}

/* Layer normalization in f32 whatever the policy (as the LayerNormalization layer runs it: the
 * statistics need the range), its result in x's dtype. */
static eg_tensor *layer_norm(eg__temps *t, const eg_tensor *x, const eg_tensor *gamma,
                             const eg_tensor *beta, double epsilon) {
    if (x->dtype == EG_DTYPE_F32 || x->dtype == EG_DTYPE_F64)
        return eg__temp(t, eg_layer_normalization(x, 1, (const int[]){-1}, gamma, beta, epsilon));
    eg_tensor *wide = eg__temp(t, eg_cast(x, EG_DTYPE_F32));
    eg_tensor *g = wide ? eg__temp(t, eg_cast(gamma, EG_DTYPE_F32)) : NULL;
    eg_tensor *b = g ? eg__temp(t, eg_cast(beta, EG_DTYPE_F32)) : NULL;
    eg_tensor *y =
        b ? eg__temp(t, eg_layer_normalization(wide, 1, (const int[]){-1}, g, b, epsilon)) : NULL;
    return y ? eg__temp(t, eg_cast(y, x->dtype)) : NULL;
}

static eg_tensor *dropout(eg__temps *t, const eg_tensor *x, double rate, bool training) {
    if (!training || rate <= 0) return (eg_tensor *)x;
    return eg__temp(t, eg_dropout_random(x, rate, NULL));
}

/* x + sublayer(x) with KerasNLP's placement of the normalization (after, or first). */
typedef struct block {
    const transformer_state *s;
    eg__temps *t;
    bool training;
} block;

static eg_tensor *residual_norm(const block *b, const eg_tensor *x, const eg_tensor *y,
                                eg_tensor *const *norm) {
    eg_tensor *sum =
        eg__temp(b->t, eg_add(x, dropout(b->t, y, b->s->options.dropout, b->training)));
    if (!sum || b->s->options.normalize_first) return sum;
    return layer_norm(b->t, sum, norm[0], norm[1], b->s->options.layer_norm_epsilon);
}

static const eg_tensor *pre_norm(const block *b, const eg_tensor *x, eg_tensor *const *norm) {
    if (!b->s->options.normalize_first) return x;
    return layer_norm(b->t, x, norm[0], norm[1], b->s->options.layer_norm_epsilon);
}

static eg_tensor *transformer_call(eg_layer *layer, void *state, int n, eg_tensor *const *inputs,
                                   eg_tensor *const *variables, bool training) {
    const transformer_state *s = state;
    sorted_inputs in;
    if (sort_inputs(layer, n, inputs, &in) != EG_OK) return NULL;
    if (s->decoder && in.n_seq < 2) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "TransformerDecoder: '%s' got no encoder outputs",
                  eg_layer_name(layer));
        return NULL;
    }
    eg__temps t = {0};
    block b = {s, &t, training};
    int aw = attention_weight_count(&s->attention), at = 0;
    const eg_tensor *w[ATTENTION_WEIGHTS];
    const eg_tensor *x = in.seq[0];
    /* self-attention: the decoder's is causal, the encoder's when asked */
    attention_weights(&s->attention, variables, at, w);
    eg_tensor *const *norm = variables + aw;
    const eg_tensor *q = pre_norm(&b, x, norm);
    eg_tensor *a =
        q ? eg__temp(&t, attend(&s->attention, w, q, q, q, in.n_masks ? in.masks[0] : NULL,
                                s->decoder || s->options.causal))
          : NULL;
    const eg_tensor *h = a ? residual_norm(&b, x, a, norm) : NULL;
    at = aw + 2;
    if (h && s->decoder) {
        attention_weights(&s->attention, variables, at, w);
        norm = variables + at + aw;
        const eg_tensor *qc = pre_norm(&b, h, norm);
        const eg_tensor *enc = in.seq[1];
        eg_tensor *c = qc ? eg__temp(&t, attend(&s->attention, w, qc, enc, enc,
                                                in.n_masks > 1 ? in.masks[1] : NULL, false))
                          : NULL;
        h = c ? residual_norm(&b, h, c, norm) : NULL;
        at += aw + 2;
    }
    eg_tensor *y = NULL;
    if (h) {
        norm = variables + at + 4;
        const eg_tensor *f = pre_norm(&b, h, norm);
        int64_t bt = h->shape[0] * h->shape[1], hidden = h->shape[2];
        eg_tensor *rows = f ? eg__temp(&t, eg_reshape(f, 2, (const int64_t[]){bt, hidden})) : NULL;
        eg_tensor *mid = rows ? eg__temp(&t, eg_dense(rows, variables[at], variables[at + 1],
                                                      s->options.activation))
                              : NULL;
        eg_tensor *out = mid ? eg__temp(&t, eg_dense(mid, variables[at + 2], variables[at + 3],
                                                     EG_ACTIVATION_NONE))
                             : NULL;
        eg_tensor *out3 = out ? eg__temp(&t, eg_reshape(out, 3, h->shape)) : NULL;
        eg_tensor *r = out3 ? residual_norm(&b, h, out3, norm) : NULL;
        y = r ? eg_reshape(r, r->n_dims, r->shape) : NULL; /* a scope-registered handle */
    }
    eg__temps_release(&t);
    return y;
}

static const eg_layer_class encoder_class = {
    .type = "TransformerEncoder",
    .name_prefix = "transformer_encoder",
    .min_inputs = 1,
    .max_inputs = 2,
    .build = transformer_build,
    .call = transformer_call,
    .free_state = free_options,
};

static const eg_layer_class decoder_class = {
    .type = "TransformerDecoder",
    .name_prefix = "transformer_decoder",
    .min_inputs = 2,
    .max_inputs = 4,
    .build = transformer_build,
    .call = transformer_call,
    .free_state = free_options,
};

static eg_layer *transformer_new(const eg_transformer_options *options, bool decoder) {
    const char *what = decoder ? "transformer_decoder" : "transformer_encoder";
    if (!options) {
        eg__error(EG_ERR_NULL_ARGUMENT, "%s: options is NULL", what);
        return NULL;
    }
    if (options->num_heads < 1 || options->intermediate_dim < 1 || !(options->dropout >= 0) ||
        !(options->dropout < 1) || !(options->layer_norm_epsilon > 0) ||
        (unsigned)options->activation >= EG_ACTIVATION_COUNT) {
        eg__error(EG_ERR_INVALID_ARGUMENT,
                  "%s: num_heads and intermediate_dim must be >= 1, dropout in [0, 1), "
                  "layer_norm_epsilon > 0 and the activation valid",
                  what);
        return NULL;
    }
    transformer_state *state = calloc(1, sizeof *state);
    if (!state) {
        eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", what);
        return NULL;
    }
    state->options = *options;
    state->options.name = NULL;
    state->decoder = decoder;
    return eg_layer_new_custom(decoder ? &decoder_class : &encoder_class, state, options->name);
}

eg_layer *eg_transformer_encoder_new(const eg_transformer_options *options) {
    return transformer_new(options, false);
}

eg_layer *eg_transformer_decoder_new(const eg_transformer_options *options) {
    return transformer_new(options, true);
}

bool eg__layer_takes_mask(const eg_layer *layer) {
    return layer->kind == EG__LAYER_CUSTOM &&
           (layer->layer_class == &encoder_class || layer->layer_class == &mha_class);
}

bool eg__layer_passes_mask(const eg_layer *layer) {
    return eg__layer_takes_mask(layer) ||
           (layer->kind == EG__LAYER_CUSTOM && layer->layer_class == &position_class);
}
