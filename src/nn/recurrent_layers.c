/* Sequence layers: Embedding, LSTM and GRU (Keras' layouts and defaults).
 *
 * A recurrent layer's call runs time-major: the input is made (T, B, features) once, so that the
 * input projection of every step is one product and each step's rows are a contiguous view of
 * it; each step is then one product h recurrent_kernel (GRU: eg_dense with the recurrent bias)
 * and one fused cell op. Masked steps keep the states with eg_where, which also records them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/internal.h"

enum { LSTM_GATES = 4, GRU_GATES = 3 };

bool eg__layer_is_recurrent(const eg_layer *layer) {
    return layer->kind == EG__LAYER_LSTM || layer->kind == EG__LAYER_GRU ||
           layer->kind == EG__LAYER_BIDIRECTIONAL;
}

/* The cell a recurrent layer runs: its own kind, or a Bidirectional's wrapped layer's. */
static eg__layer_kind cell_kind(const eg_layer *layer) {
    return layer->kind == EG__LAYER_BIDIRECTIONAL ? layer->inner->kind : layer->kind;
}

/* The variables one direction of the layer has: kernel, recurrent kernel and bias. */
static int direction_variables(const eg_layer *layer) {
    return layer->rnn.use_bias ? 3 : 2;
}

static bool valid_initializer(const eg_initializer *init) {
    return (unsigned)init->kind < EG_INITIALIZER_COUNT;
}

/* ---- construction ---- */

eg_embedding_options eg_embedding_options_default(void) {
    eg_embedding_options o = {0};
    o.embeddings_initializer = eg_initializer_random_uniform(-0.05, 0.05);
    o.dtype = EG_DTYPE_F32;
    return o;
}

eg_layer *eg_embedding_new(int64_t input_dim, int64_t output_dim,
                           const eg_embedding_options *options) {
    eg_embedding_options o = options ? *options : eg_embedding_options_default();
    if (input_dim < 1 || output_dim < 1) {
        eg__error(EG_ERR_INVALID_ARGUMENT,
                  "embedding: input_dim and output_dim must be >= 1, got %lld and %lld",
                  (long long)input_dim, (long long)output_dim);
        return NULL;
    }
    if (!valid_initializer(&o.embeddings_initializer) || !eg_dtype_is_float(o.dtype)) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "embedding: invalid initializer or non-float dtype %s",
                  eg_dtype_name(o.dtype));
        return NULL;
    }
    eg_layer *layer = eg__layer_new(EG__LAYER_EMBEDDING, o.name, "embedding");
    if (!layer) return NULL;
    o.name = NULL;
    layer->input_dim = input_dim;
    layer->units = output_dim;
    layer->dtype = o.dtype;
    layer->generator = o.generator;
    layer->embedding = o;
    return layer;
}

eg_rnn_options eg_rnn_options_default(void) {
    eg_rnn_options o = {0};
    o.use_bias = true;
    o.unit_forget_bias = true;
    o.kernel_initializer = eg_initializer_of(EG_INITIALIZER_GLOROT_UNIFORM);
    o.recurrent_initializer = eg_initializer_of(EG_INITIALIZER_ORTHOGONAL);
    o.bias_initializer = eg_initializer_of(EG_INITIALIZER_ZEROS);
    o.dtype = EG_DTYPE_F32;
    return o;
}

static eg_layer *rnn_new(eg__layer_kind kind, int64_t units, const eg_rnn_options *options,
                         const char *what) {
    eg_rnn_options o = options ? *options : eg_rnn_options_default();
    if (units < 1) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "%s: units must be >= 1, got %lld", what,
                  (long long)units);
        return NULL;
    }
    if (!valid_initializer(&o.kernel_initializer) || !valid_initializer(&o.recurrent_initializer) ||
        !valid_initializer(&o.bias_initializer)) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "%s: invalid initializer kind", what);
        return NULL;
    }
    if (o.dtype != EG_DTYPE_F32 && o.dtype != EG_DTYPE_F64) {
        eg__error(EG_ERR_DTYPE, "%s: variables must be f32 or f64, got %s", what,
                  eg_dtype_name(o.dtype));
        return NULL;
    }
    eg_layer *layer = eg__layer_new(kind, o.name, what);
    if (!layer) return NULL;
    o.name = NULL;
    layer->units = units;
    layer->dtype = o.dtype;
    layer->generator = o.generator;
    layer->rnn = o;
    return layer;
}

eg_layer *eg_lstm_new(int64_t units, const eg_rnn_options *options) {
    return rnn_new(EG__LAYER_LSTM, units, options, "lstm");
}

eg_layer *eg_gru_new(int64_t units, const eg_rnn_options *options) {
    return rnn_new(EG__LAYER_GRU, units, options, "gru");
}

eg_layer *eg_bidirectional_new(eg_layer *layer, const char *name) {
    if (!layer) {
        eg__error(EG_ERR_NULL_ARGUMENT, "bidirectional: layer is NULL");
        return NULL;
    }
    if ((layer->kind != EG__LAYER_LSTM && layer->kind != EG__LAYER_GRU) || layer->built ||
        layer->owner) {
        eg__error(EG_ERR_INVALID_ARGUMENT,
                  "bidirectional: '%s' (%s) must be an unbuilt LSTM or GRU of no model",
                  eg_layer_name(layer), eg_layer_type(layer));
        eg_layer_free(layer->owner ? NULL : layer);
        return NULL;
    }
    eg_layer *wrapper = eg__layer_new(EG__LAYER_BIDIRECTIONAL, name, "bidirectional");
    if (!wrapper) {
        eg_layer_free(layer);
        return NULL;
    }
    wrapper->inner = layer;
    wrapper->units = layer->units;
    wrapper->dtype = layer->dtype;
    wrapper->generator = layer->generator;
    wrapper->rnn = layer->rnn;
    return wrapper;
}

int eg_rnn_state_count(const eg_layer *layer) {
    if (!layer || !eg__layer_is_recurrent(layer)) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "rnn_state_count: '%s' is not a recurrent layer",
                  layer ? eg_layer_name(layer) : "(null)");
        return 0;
    }
    int per_direction = cell_kind(layer) == EG__LAYER_LSTM ? 2 : 1;
    return layer->kind == EG__LAYER_BIDIRECTIONAL ? 2 * per_direction : per_direction;
}

/* ---- building ---- */

static eg_status build_embedding(eg_layer *layer, int n_dims, const int64_t *input_shape) {
    if (n_dims >= EG_MAX_DIMS)
        return eg__error(EG_ERR_SHAPE, "embedding: '%s' takes ids of at most %d dims, got %d",
                         eg_layer_name(layer), EG_MAX_DIMS - 1, n_dims);
    if (!layer->n_variables) {
        int64_t shape[2] = {layer->input_dim, layer->units};
        eg_tensor *table = eg__layer_make_variable(
            layer, "embeddings", &layer->embedding.embeddings_initializer, 2, shape);
        if (!table) return eg_last_status();
        if (layer->embedding.sparse_gradient &&
            eg_variable_set_sparse_gradient(table, true) != EG_OK) {
            eg_release(table);
            return eg_last_status();
        }
        layer->variables[0] = table;
        layer->n_variables = 1;
    }
    layer->output_n_dims = n_dims + 1;
    if (n_dims) memcpy(layer->output_shape, input_shape, (size_t)n_dims * sizeof(int64_t));
    layer->output_shape[n_dims] = layer->units;
    return EG_OK;
}

/* The LSTM bias with the forget gate's quarter at 1 (Keras' unit_forget_bias). */
static eg_tensor *forget_bias(eg_layer *layer, const char *name) {
    int64_t units = layer->units, n = LSTM_GATES * units;
    eg_tensor *bias = eg__layer_make_variable(layer, name, &layer->rnn.bias_initializer, 1, &n);
    if (!bias || !layer->rnn.unit_forget_bias) return bias;
    eg_tensor *ones = eg_ones(layer->dtype, 1, &units);
    eg_tensor *updated = NULL;
    if (ones) {
        eg_tensor *parts[3] = {NULL, NULL, NULL};
        eg__scope_suspend();
        parts[0] = eg_slice(bias, 0, 0, units, 1);
        parts[1] = ones;
        parts[2] = eg_slice(bias, 0, 2 * units, n, 1);
        if (parts[0] && parts[2]) updated = eg_concat(3, parts, 0);
        eg_release(parts[0]);
        eg_release(parts[2]);
        eg__scope_resume();
    }
    eg_status status = updated ? eg_assign(bias, updated) : eg_last_status();
    eg_release(ones);
    eg_release(updated);
    if (status != EG_OK) {
        eg_release(bias);
        return NULL;
    }
    return bias;
}

/* One direction's variables "<layer>/<prefix>kernel", "<prefix>recurrent_kernel" and
 * "<prefix>bias" into v (direction_variables of them). */
static eg_status make_cell_variables(eg_layer *layer, const char *prefix, int64_t features,
                                     int gates, eg_tensor **v) {
    int64_t units = layer->units;
    int64_t kernel_shape[2] = {features, gates * units},
            recurrent_shape[2] = {units, gates * units};
    char kernel[64], recurrent[64], bias[64];
    snprintf(kernel, sizeof kernel, "%skernel", prefix);
    snprintf(recurrent, sizeof recurrent, "%srecurrent_kernel", prefix);
    snprintf(bias, sizeof bias, "%sbias", prefix);
    eg_tensor *made[3] = {NULL, NULL, NULL};
    made[0] =
        eg__layer_make_variable(layer, kernel, &layer->rnn.kernel_initializer, 2, kernel_shape);
    made[1] = made[0] ? eg__layer_make_variable(layer, recurrent, &layer->rnn.recurrent_initializer,
                                                2, recurrent_shape)
                      : NULL;
    if (made[1] && layer->rnn.use_bias) {
        int64_t gru_bias[2] = {2, gates * units};
        made[2] =
            cell_kind(layer) == EG__LAYER_LSTM
                ? forget_bias(layer, bias)
                : eg__layer_make_variable(layer, bias, &layer->rnn.bias_initializer, 2, gru_bias);
    }
    if (made[1] && (!layer->rnn.use_bias || made[2])) {
        for (int i = 0; i < direction_variables(layer); i++) v[i] = made[i];
        return EG_OK;
    }
    for (int i = 0; i < 3; i++) eg_release(made[i]);
    return eg_last_status();
}

static eg_status build_rnn(eg_layer *layer, int n_dims, const int64_t *input_shape) {
    char buf[160];
    const char *type = eg_layer_type(layer);
    if (n_dims != 3 || input_shape[2] < 1)
        return eg__error(
            EG_ERR_SHAPE, "%s: '%s' takes (batch, time, features) with features known, got %s",
            type, eg_layer_name(layer), eg__shape_format(n_dims, input_shape, buf, sizeof buf));
    int64_t features = input_shape[2], units = layer->units;
    int gates = cell_kind(layer) == EG__LAYER_LSTM ? LSTM_GATES : GRU_GATES;
    if (layer->n_variables) {
        if (features != layer->input_dim)
            return eg__error(EG_ERR_SHAPE, "%s: '%s' was built for %lld features, got %lld", type,
                             eg_layer_name(layer), (long long)layer->input_dim,
                             (long long)features);
    } else {
        int directions = layer->kind == EG__LAYER_BIDIRECTIONAL ? 2 : 1;
        int per = direction_variables(layer);
        for (int d = 0; d < directions; d++) {
            const char *prefix = directions == 1 ? "" : d == 0 ? "forward_" : "backward_";
            eg_status made =
                make_cell_variables(layer, prefix, features, gates, layer->variables + d * per);
            if (made != EG_OK) {
                for (int i = 0; i < d * per; i++) {
                    eg_release(layer->variables[i]);
                    layer->variables[i] = NULL;
                }
                return made;
            }
        }
        layer->n_variables = directions * per;
        layer->input_dim = features;
    }
    bool sequences = layer->rnn.return_sequences;
    int64_t width = layer->kind == EG__LAYER_BIDIRECTIONAL ? 2 * units : units;
    layer->output_n_dims = sequences ? 3 : 2;
    layer->output_shape[0] = input_shape[0];
    layer->output_shape[1] = sequences ? input_shape[1] : width;
    if (sequences) layer->output_shape[2] = width;
    return EG_OK;
}

eg_status eg__recurrent_layer_build(eg_layer *layer, int n_dims, const int64_t *input_shape) {
    return layer->kind == EG__LAYER_EMBEDDING ? build_embedding(layer, n_dims, input_shape)
                                              : build_rnn(layer, n_dims, input_shape);
}

/* ---- calls ---- */

static eg_tensor *call_embedding(eg_layer *layer, const eg_tensor *ids, const eg_tensor *table) {
    if (ids->dtype != EG_DTYPE_I32 && ids->dtype != EG_DTYPE_I64) {
        eg__error(EG_ERR_DTYPE, "embedding: '%s' takes i32 or i64 ids, got %s",
                  eg_layer_name(layer), eg_dtype_name(ids->dtype));
        return NULL;
    }
    return eg_gather(table, ids, 0);
}

eg_tensor *eg_embedding_mask(const eg_layer *layer, const eg_tensor *ids) {
    if (!layer || layer->kind != EG__LAYER_EMBEDDING) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "embedding_mask: '%s' is not an Embedding layer",
                  layer ? eg_layer_name(layer) : "(null)");
        return NULL;
    }
    if (!eg__check_arg(ids, "embedding_mask", 2) || !layer->embedding.mask_zero) return NULL;
    eg_tensor *zero = eg__full_on(ids->device, ids->dtype, 0, NULL, 0);
    eg_tensor *mask = zero ? eg_not_equal(ids, zero) : NULL;
    eg_release(zero);
    return mask;
}

/* The states of one sequence being run: h (and c for the LSTM), and the last output. */
typedef struct rnn_run {
    eg_layer *layer;
    int64_t batch, steps, units;
    const eg_tensor *kernel, *recurrent, *bias; /* bias may be NULL */
    eg_tensor *input_bias, *recurrent_bias;     /* GRU: the rows of its (2, 3 units) bias */
    eg_tensor *projected;                       /* (T * B, gates * units), time-major */
    eg_tensor **step_inputs; /* T views of its rows: each step's (B, gates units) */
    eg_tensor *state[2];
    eg_dtype products; /* bf16 / f16 under a mixed policy, else 0 (EG_DTYPE_F32): no rounding */
    eg__temps temps;
} rnn_run;

/* a b (+ bias): in the variables' dtype, or under a mixed policy with the operands rounded to
 * its compute dtype and the sums in f32 (eg_dense_low_precision), as a Dense layer computes. */
static eg_tensor *product(const rnn_run *run, const eg_tensor *a, const eg_tensor *b,
                          const eg_tensor *bias) {
    if (run->products)
        return bias
                   ? eg_dense_low_precision(a, b, bias, EG_ACTIVATION_NONE, run->products, a->dtype)
                   : eg_matmul_low_precision(a, b, false, false, run->products, a->dtype);
    return bias ? eg_dense(a, b, bias, EG_ACTIVATION_NONE) : eg_matmul(a, b);
}

/* x (B, T, F) -> the input projection of every step, (T * B, gates units) time-major. */
static eg_tensor *project_inputs(rnn_run *run, const eg_tensor *x) {
    eg__temps *t = &run->temps;
    int64_t flat[2] = {run->steps * run->batch, x->shape[2]};
    eg_tensor *time_major = eg__temp(t, eg_contiguous(eg__temp(t, eg_transpose(x, 0, 1))));
    eg_tensor *rows = time_major ? eg__temp(t, eg_reshape(time_major, 2, flat)) : NULL;
    if (!rows) return NULL;
    const eg_tensor *bias = run->layer->kind == EG__LAYER_LSTM ? run->bias : run->input_bias;
    return product(run, rows, run->kernel, bias);
}

/* The projection's rows of each step as views, made by one node whose gradient is the steps'
 * gradients concatenated. Slicing the steps one by one would give each step's gradient the whole
 * projection's size (an unslice) and then add T of them: quadratic in T, most of a training
 * step's time at T = 128. */
static eg_status split_steps_forward(int n_inputs, eg_tensor *const *inputs, int n_outputs,
                                     eg_tensor **outputs, void *ctx) {
    (void)n_inputs;
    (void)ctx;
    int64_t rows = inputs[0]->shape[0] / n_outputs;
    for (int k = 0; k < n_outputs; k++)
        if (!(outputs[k] = eg_slice(inputs[0], 0, k * rows, (k + 1) * rows, 1)))
            return eg_last_status();
    return EG_OK;
}

static eg_status split_steps_backward(int n_inputs, eg_tensor *const *inputs, int n_outputs,
                                      eg_tensor *const *outputs, eg_tensor *const *output_grads,
                                      eg_tensor **input_grads, void *ctx) {
    (void)n_inputs;
    (void)inputs;
    (void)outputs;
    (void)ctx;
    input_grads[0] = eg_concat(n_outputs, output_grads, 0);
    return input_grads[0] ? EG_OK : eg_last_status();
}

static const eg_custom_gradient_def split_steps = {
    .name = "rnn_steps", .forward = split_steps_forward, .backward = split_steps_backward};

/* One step: the new states into next[] (new references). */
static eg_status rnn_step(rnn_run *run, int64_t t, eg_tensor **next) {
    const eg_tensor *x = run->step_inputs[t];
    eg_status status;
    if (run->layer->kind == EG__LAYER_LSTM) {
        eg_tensor *hu = product(run, run->state[0], run->recurrent, NULL);
        eg_tensor *z = hu ? eg_add(x, hu) : NULL;
        status = z ? eg_lstm_cell(z, run->state[1], &next[0], &next[1]) : eg_last_status();
        eg_release(hu);
        eg_release(z);
    } else {
        eg_tensor *hp = product(run, run->state[0], run->recurrent, run->recurrent_bias);
        next[0] = hp ? eg_gru_cell(x, hp, run->state[0]) : NULL;
        status = next[0] ? EG_OK : eg_last_status();
        eg_release(hp);
    }
    return status;
}

/* A new reference to t's values: a view of its own, registered with the current scope like an
 * op's result. (eg_retain would add a reference to t itself, and releasing the scope's reference
 * elsewhere would then take t out of its scope.) */
static eg_tensor *new_handle(const eg_tensor *t) {
    return eg_reshape(t, t->n_dims, t->shape);
}

/* where(mask_t, new, old) for each state (and the output): a masked step keeps the old. */
static eg_status keep_masked(const eg_tensor *keep, int n, eg_tensor **next,
                             eg_tensor *const *old) {
    for (int i = 0; i < n; i++) {
        eg_tensor *chosen = eg_where(keep, next[i], old[i]);
        if (!chosen) return eg_last_status();
        eg_release(next[i]);
        next[i] = chosen;
    }
    return EG_OK;
}

static eg_status check_rnn_inputs(const eg_layer *layer, const eg_tensor *x, const eg_tensor *mask,
                                  eg_tensor *const *initial, int n_states) {
    char a[96], b[96];
    const char *type = eg_layer_type(layer);
    if (x->n_dims != 3)
        return eg__error(EG_ERR_SHAPE, "%s: '%s' takes (batch, time, features), got %s", type,
                         eg_layer_name(layer), eg__shape_format(x->n_dims, x->shape, a, sizeof a));
    if (x->shape[1] < 1)
        return eg__error(EG_ERR_SHAPE, "%s: '%s' needs at least one time step", type,
                         eg_layer_name(layer));
    if (mask && (mask->dtype != EG_DTYPE_BOOL || mask->n_dims != 2 ||
                 mask->shape[0] != x->shape[0] || mask->shape[1] != x->shape[1]))
        return eg__error(EG_ERR_SHAPE, "%s: '%s': the mask must be bool (%lld, %lld), got %s %s",
                         type, eg_layer_name(layer), (long long)x->shape[0], (long long)x->shape[1],
                         eg_dtype_name(mask->dtype),
                         eg__shape_format(mask->n_dims, mask->shape, b, sizeof b));
    for (int i = 0; initial && i < n_states; i++) {
        const eg_tensor *s = initial[i];
        if (!eg__check_arg(s, "rnn_call", 4)) return eg_last_status();
        if (s->n_dims != 2 || s->shape[0] != x->shape[0] || s->shape[1] != layer->units)
            return eg__error(
                EG_ERR_SHAPE, "%s: '%s': initial state %d must be (%lld, %lld), got %s", type,
                eg_layer_name(layer), i, (long long)x->shape[0], (long long)layer->units,
                eg__shape_format(s->n_dims, s->shape, a, sizeof a));
    }
    return EG_OK;
}

/* A sequence without a mask: one node (eg__lstm_sequence, eg__gru_sequence), from the states in
 * run->state (borrowed). *output and final (the layer's states, may be NULL) get new
 * references. */
static eg_status run_whole_sequence(rnn_run *run, bool time_order, eg_tensor **output,
                                    eg_tensor **final) {
    bool reverse = run->layer->rnn.go_backwards, lstm = run->layer->kind == EG__LAYER_LSTM;
    int64_t T = run->steps, B = run->batch, H = run->units;
    eg_tensor *out[2] = {NULL, NULL};
    eg_status status =
        lstm ? eg__lstm_sequence(run->projected, run->recurrent, run->state[0], run->state[1],
                                 reverse, time_order, run->products, out)
             : eg__gru_sequence(run->projected, run->recurrent, run->recurrent_bias, run->state[0],
                                reverse, time_order, run->products, out);
    if (status != EG_OK) return status;
    int64_t last = time_order && reverse ? 0 : T - 1; /* the block of the last step processed */
    eg_tensor *h_rows = eg_slice(out[0], 0, last * B, (last + 1) * B, 1);
    eg_tensor *h_last = h_rows ? eg_reshape(h_rows, 2, (int64_t[]){B, H}) : NULL;
    eg_release(h_rows);
    if (h_last && run->layer->rnn.return_sequences) {
        eg_tensor *steps = eg_reshape(out[0], 3, (int64_t[]){T, B, H});
        eg_tensor *batch_major = steps ? eg_transpose(steps, 0, 1) : NULL;
        *output = batch_major ? eg_contiguous(batch_major) : NULL;
        eg_release(steps);
        eg_release(batch_major);
    } else if (h_last) {
        *output = new_handle(h_last);
    }
    status = h_last && *output ? EG_OK : eg_last_status();
    if (status == EG_OK && final) {
        final[0] = h_last;
        if (lstm) final[1] = out[1];
        h_last = out[1] = NULL;
    }
    eg_release(h_last);
    eg_release(out[0]);
    eg_release(out[1]);
    return status;
}

/* Runs the sequence; *output and final (n_states, may be NULL) get new references. Outputs of
 * every step are stacked in processing order (Keras' go_backwards), or in the input's time
 * order with time_order (a Bidirectional's backward half). */
static eg_status run_rnn(eg_layer *layer, const eg_tensor *x, const eg_tensor *mask,
                         eg_tensor *const *initial, const eg_tensor *const *variables,
                         bool time_order, eg_tensor **output, eg_tensor **final) {
    int n_states = layer->kind == EG__LAYER_LSTM ? 2 : 1;
    eg_status status = check_rnn_inputs(layer, x, mask, initial, n_states);
    if (status != EG_OK) return status;
    rnn_run run = {.layer = layer,
                   .batch = x->shape[0],
                   .steps = x->shape[1],
                   .units = layer->units,
                   .kernel = variables[0],
                   .recurrent = variables[1],
                   .bias = layer->rnn.use_bias ? variables[2] : NULL};
    eg_dtype compute = eg__layer_compute_dtype(layer);
    if (compute == EG_DTYPE_BF16 || compute == EG_DTYPE_F16) run.products = compute;
    eg__temps *t = &run.temps;
    if (run.bias && layer->kind == EG__LAYER_GRU) {
        int64_t row[1] = {GRU_GATES * run.units};
        run.input_bias =
            eg__temp(t, eg_reshape(eg__temp(t, eg_slice(run.bias, 0, 0, 1, 1)), 1, row));
        run.recurrent_bias =
            eg__temp(t, eg_reshape(eg__temp(t, eg_slice(run.bias, 0, 1, 2, 1)), 1, row));
    }
    run.projected = eg__temp(t, project_inputs(&run, x));
    int64_t state_shape[2] = {run.batch, run.units};
    for (int i = 0; i < n_states; i++)
        run.state[i] =
            initial ? eg_reshape(initial[i], 2, state_shape) : eg_zeros(x->dtype, 2, state_shape);
    if (!mask) {
        status = run.projected && run.state[n_states - 1] &&
                         (!run.bias || layer->kind == EG__LAYER_LSTM || run.recurrent_bias)
                     ? run_whole_sequence(&run, time_order, output, final)
                     : eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of memory", eg_layer_type(layer));
        for (int i = 0; i < n_states; i++) eg_release(run.state[i]);
        eg__temps_release(t);
        return status;
    }
    run.step_inputs = calloc((size_t)run.steps, sizeof *run.step_inputs);
    if (run.projected && run.step_inputs && run.steps <= INT32_MAX)
        eg_custom_gradient(&split_steps, NULL, 1, &run.projected, (int)run.steps, run.step_inputs);
    bool sequences = layer->rnn.return_sequences;
    eg_tensor **outputs = sequences ? calloc((size_t)run.steps, sizeof *outputs) : NULL;
    eg_tensor *last = mask ? eg_zeros(x->dtype, 2, state_shape) : NULL;
    status = eg_last_status();
    if (status == EG_OK && (!run.projected || !run.step_inputs || !run.step_inputs[0] ||
                            !run.state[n_states - 1] || (sequences && !outputs)))
        status = eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of memory", eg_layer_type(layer));
    for (int64_t k = 0; k < run.steps && status == EG_OK; k++) {
        int64_t step = layer->rnn.go_backwards ? run.steps - 1 - k : k;
        eg_tensor *next[3] = {NULL, NULL, NULL};
        status = rnn_step(&run, step, next);
        if (status == EG_OK && mask) {
            eg_tensor *column = eg_slice(mask, 1, step, step + 1, 1);
            next[n_states] = next[0] ? new_handle(next[0]) : NULL;
            eg_tensor *old[3] = {run.state[0], run.state[1], last};
            if (n_states == 1) old[1] = last;
            status = column ? keep_masked(column, n_states + 1, next, old) : eg_last_status();
            eg_release(column);
            eg_release(last);
            last = next[n_states];
        }
        for (int i = 0; i < n_states; i++) {
            eg_release(run.state[i]);
            run.state[i] = next[i];
        }
        if (status == EG_OK && sequences)
            outputs[time_order ? step : k] = new_handle(mask ? last : run.state[0]);
    }
    if (status == EG_OK)
        *output = sequences ? eg_stack((int)run.steps, outputs, 1)
                            : new_handle(mask ? last : run.state[0]);
    if (status == EG_OK && !*output) status = eg_last_status();
    for (int i = 0; i < n_states; i++) {
        if (status == EG_OK && final)
            final[i] = run.state[i];
        else
            eg_release(run.state[i]);
    }
    for (int64_t k = 0; outputs && k < run.steps; k++) eg_release(outputs[k]);
    free(outputs);
    for (int64_t k = 0; run.step_inputs && k < run.steps; k++) eg_release(run.step_inputs[k]);
    free(run.step_inputs);
    eg_release(last);
    eg__temps_release(t);
    return status;
}

/* A recurrent layer's run: one direction, or a Bidirectional's two with their outputs joined on
 * the last axis (Keras' merge_mode "concat"); final gets the forward states, then the backward. */
static eg_status run_layer(eg_layer *layer, const eg_tensor *x, const eg_tensor *mask,
                           eg_tensor *const *initial, const eg_tensor *const *variables,
                           eg_tensor **output, eg_tensor **final) {
    if (layer->kind != EG__LAYER_BIDIRECTIONAL)
        return run_rnn(layer, x, mask, initial, variables, false, output, final);
    eg_layer forward = *layer->inner; /* the wrapped layer's cell, the wrapper's name */
    forward.name = layer->name;
    forward.rnn = layer->rnn;
    forward.policy = layer->policy; /* the wrapper's: what its model or user set */
    eg_layer backward = forward;
    backward.rnn.go_backwards = !forward.rnn.go_backwards;
    int per = direction_variables(layer), n = eg_rnn_state_count(layer) / 2;
    eg_tensor *halves[2] = {NULL, NULL};
    eg_status status = run_rnn(&forward, x, mask, initial, variables, false, &halves[0], final);
    if (status == EG_OK)
        status = run_rnn(&backward, x, mask, initial ? initial + n : NULL, variables + per, true,
                         &halves[1], final ? final + n : NULL);
    if (status == EG_OK) {
        *output = eg_concat(2, halves, -1);
        if (!*output) status = eg_last_status();
    }
    if (status != EG_OK && final && halves[1])
        for (int i = 0; i < 2 * n; i++) {
            eg_release(final[i]);
            final[i] = NULL;
        }
    eg_release(halves[0]);
    eg_release(halves[1]);
    return status;
}

eg_tensor *eg__recurrent_layer_call(eg_layer *layer, const eg_tensor *x, const eg_tensor *mask,
                                    const eg_tensor *const *variables) {
    if (layer->kind == EG__LAYER_EMBEDDING) return call_embedding(layer, x, variables[0]);
    eg_tensor *y = NULL;
    return run_layer(layer, x, mask, NULL, variables, &y, NULL) == EG_OK ? y : NULL;
}

eg_status eg_rnn_call(eg_layer *layer, const eg_tensor *x, const eg_tensor *mask,
                      eg_tensor *const *initial_state, bool training, eg_tensor **output,
                      eg_tensor **final_state) {
    (void)training; /* the cells have no dropout yet: training changes nothing */
    if (output) *output = NULL;
    int n_states = layer && eg__layer_is_recurrent(layer) ? eg_rnn_state_count(layer) : 0;
    if (final_state)
        for (int i = 0; i < n_states; i++) final_state[i] = NULL;
    if (!layer || !output)
        return eg__error(EG_ERR_NULL_ARGUMENT, "rnn_call: %s is NULL", !layer ? "layer" : "output");
    if (!n_states)
        return eg__error(EG_ERR_INVALID_ARGUMENT, "rnn_call: '%s' (%s) is not a recurrent layer",
                         eg_layer_name(layer), eg_layer_type(layer));
    if (!eg__check_arg(x, "rnn_call", 2) || (mask && !eg__check_arg(mask, "rnn_call", 3)))
        return eg_last_status();
    if (x->n_dims == 3) {
        int64_t shape[3] = {-1, x->shape[1], x->shape[2]};
        eg_status built = eg_layer_build(layer, 3, shape);
        if (built != EG_OK) return built;
    }
    /* as eg_layer_call: under a mixed policy the input is cast to the variables' dtype (the
     * layer runs in full precision) and the output handed on in the policy's compute dtype */
    eg__temps temps = {0};
    const eg_tensor *input = x;
    if (layer->policy != EG_POLICY_FLOAT32 && eg_dtype_is_float(x->dtype) &&
        x->dtype != layer->dtype)
        input = eg__temp(&temps, eg_cast(x, layer->dtype));
    eg_status status = input ? run_layer(layer, input, mask, initial_state,
                                         eg__const_tensors(layer->variables), output, final_state)
                             : eg_last_status();
    eg_dtype compute = eg__layer_compute_dtype(layer);
    if (status == EG_OK && (*output)->dtype != compute) {
        eg_tensor *cast = eg_cast(*output, compute);
        eg_release(*output);
        *output = cast;
        status = cast ? EG_OK : eg_last_status();
        for (int i = 0; status != EG_OK && final_state && i < n_states; i++) {
            eg_release(final_state[i]);
            final_state[i] = NULL;
        }
    }
    eg__temps_release(&temps);
    return status;
}
