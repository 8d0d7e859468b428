/* A recurrent layer's whole sequence as one node of the tape (eg_custom_gradient): an LSTM or a
 * GRU without a mask.
 *
 * Recorded step by step, every step's product h U gives the recurrent kernel a gradient of its
 * own, (H, gates H), from a product over only the batch's rows, and the tape then adds T of them:
 * at T = 128 that is most of the memory traffic of a training step. As one node the backward
 * pass runs back-propagation through time itself, keeps each step's gradient of the recurrent
 * product's result, and gets U's gradient from a single product over all T * B rows; the input
 * projection's gradient is the steps' gradients of it, side by side. The forward runs the same
 * ops as the step-by-step layer (LSTM: matmul, add, lstm_cell; GRU: dense or matmul, gru_cell),
 * so the outputs have the same bits. Gradients of gradients (a tape recording the backward)
 * recompute the steps with differentiable ops on a tape of their own instead, so they stay
 * exact. */
#include <stdlib.h>
#include <string.h>

#include "api/internal.h"
#include "autograd/internal.h"
#include "nn/internal.h"

/* inputs: projected (T * B, gates H) time-major, recurrent (H, gates H), h0 (B, H), then the
 * LSTM's c0 (B, H) or the GRU's recurrent bias (gates H) when it has one */
enum { PROJECTED, RECURRENT, H0, LAST_INPUT };

typedef struct sequence_ctx {
    bool gru;
    int n_inputs;
    int64_t steps, batch, units;
    bool reverse;      /* processing order: time T-1 first (go_backwards) */
    bool time_order;   /* output rows in the input's time order, else in processing order */
    eg_dtype products; /* bf16 / f16: the products' operands are rounded to it; 0: none */
    /* per processed step k: the cell's pre-activations (LSTM: z (B, 4H); GRU: its recurrent
     * projection h U + b (B, 3H)) and the states after it (c: LSTM only); plain references */
    eg_tensor **z, **h, **c;
} sequence_ctx;

static const char *name_of(const sequence_ctx *s) {
    return s->gru ? "gru" : "lstm";
}

/* a b (+ bias), a transposed with transpose_a, as the layer's products are computed. */
static eg_tensor *product(const sequence_ctx *s, const eg_tensor *a, const eg_tensor *b,
                          bool transpose_a, const eg_tensor *bias) {
    if (s->products && bias)
        return eg_dense_low_precision(a, b, bias, EG_ACTIVATION_NONE, s->products, a->dtype);
    if (s->products)
        return eg_matmul_low_precision(a, b, transpose_a, false, s->products, a->dtype);
    if (bias) return eg_dense(a, b, bias, EG_ACTIVATION_NONE);
    return transpose_a ? eg_matmul_ex(a, b, true, false) : eg_matmul(a, b);
}

/* The input time step processed k-th. */
static int64_t step_time(const sequence_ctx *s, int64_t k) {
    return s->reverse ? s->steps - 1 - k : k;
}

/* Where processed step k's h goes in the (T * B, H) output. */
static int64_t output_block(const sequence_ctx *s, int64_t k) {
    return s->time_order ? step_time(s, k) : k;
}

static eg_tensor *rows(const eg_tensor *t, int64_t block, int64_t batch) {
    return eg_slice(t, 0, block * batch, (block + 1) * batch, 1);
}

static void release_steps(sequence_ctx *s) {
    for (int64_t k = 0; k < s->steps; k++) {
        if (s->z) eg_release(s->z[k]);
        if (s->h) eg_release(s->h[k]);
        if (s->c) eg_release(s->c[k]);
    }
    free(s->z);
    free(s->h);
    free(s->c);
    s->z = s->h = s->c = NULL;
}

static void free_ctx(void *ctx) {
    sequence_ctx *s = ctx;
    release_steps(s);
    free(s);
}

/* Step k from the states before it (c NULL for the GRU): LSTM z = x_t + h U and (h', c') =
 * lstm_cell(z, c); GRU z = h U + b and h' = gru_cell(x_t, z, h). New references. */
static eg_status run_step(const sequence_ctx *s, eg_tensor *const *inputs,
                          const eg_tensor *recurrent, const eg_tensor *h, const eg_tensor *c,
                          int64_t time, eg_tensor **z, eg_tensor **h_next, eg_tensor **c_next) {
    eg_tensor *x = rows(inputs[PROJECTED], time, s->batch);
    eg_status status;
    if (s->gru) {
        *z = x ? product(s, h, recurrent, false,
                         s->n_inputs > LAST_INPUT ? inputs[LAST_INPUT] : NULL)
               : NULL;
        *h_next = *z ? eg_gru_cell(x, *z, h) : NULL;
        status = *h_next ? EG_OK : eg_last_status();
    } else {
        eg_tensor *hu = x ? product(s, h, recurrent, false, NULL) : NULL;
        *z = hu ? eg_add(x, hu) : NULL;
        status = *z ? eg_lstm_cell(*z, c, h_next, c_next) : eg_last_status();
        eg_release(hu);
    }
    eg_release(x);
    return status;
}

/* outputs: every step's h (T * B, H), and the LSTM's last c (B, H). */
static eg_status sequence_forward(int n_inputs, eg_tensor *const *inputs, int n_outputs,
                                  eg_tensor **outputs, void *ctx) {
    (void)n_inputs;
    (void)n_outputs;
    sequence_ctx *s = ctx;
    size_t n = (size_t)s->steps;
    s->z = calloc(n, sizeof *s->z);
    s->h = calloc(n, sizeof *s->h);
    s->c = calloc(n, sizeof *s->c);
    if (!s->z || !s->h || !s->c)
        return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of memory for %lld steps", name_of(s),
                         (long long)s->steps);
    eg_status status = EG_OK;
    eg_tensor **ordered = calloc(n, sizeof *ordered);
    if (!ordered) return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of memory", name_of(s));
    eg__scope_suspend(); /* the steps' tensors belong to ctx until the tape lets the node go */
    /* rounded once, not by every step's product (the same values: a product rounds its f32
     * operands as a cast does) */
    eg_tensor *rounded = s->products ? eg_cast(inputs[RECURRENT], s->products) : NULL;
    const eg_tensor *recurrent = rounded ? rounded : inputs[RECURRENT];
    if (s->products && !rounded) status = eg_last_status();
    for (int64_t k = 0; k < s->steps && status == EG_OK; k++) {
        const eg_tensor *h = k ? s->h[k - 1] : inputs[H0];
        const eg_tensor *c = s->gru ? NULL : k ? s->c[k - 1] : inputs[LAST_INPUT];
        status =
            run_step(s, inputs, recurrent, h, c, step_time(s, k), &s->z[k], &s->h[k], &s->c[k]);
    }
    for (int64_t k = 0; k < s->steps && status == EG_OK; k++) ordered[output_block(s, k)] = s->h[k];
    eg_release(rounded);
    eg__scope_resume();
    if (status == EG_OK) outputs[0] = eg_concat((int)s->steps, ordered, 0);
    if (status == EG_OK && outputs[0] && !s->gru)
        outputs[1] = eg_reshape(s->c[n - 1], 2, s->c[n - 1]->shape);
    free(ordered);
    if (status == EG_OK && (!outputs[0] || (!s->gru && !outputs[1]))) status = eg_last_status();
    return status;
}

/* sum(a * b): a new reference. */
static eg_tensor *dot(const eg_tensor *a, const eg_tensor *b) {
    eg_tensor *product = eg_mul(a, b);
    eg_tensor *sum = product ? eg_sum(product, 0, NULL, false) : NULL;
    eg_release(product);
    return sum;
}

/* *total += term (both released; *total may start NULL). */
static eg_status accumulate(eg_tensor **total, eg_tensor *term) {
    if (!term) return eg_last_status();
    if (!*total) {
        *total = term;
        return EG_OK;
    }
    eg_tensor *sum = eg_add(*total, term);
    eg_release(*total);
    eg_release(term);
    *total = sum;
    return sum ? EG_OK : eg_last_status();
}

/* The vector-Jacobian product by recomputing the steps with differentiable ops on a tape of
 * their own, for when a tape records the backward (a gradient of a gradient): the gradient of
 * sum(outputs * output_grads), which the recording tapes differentiate again. */
static eg_status backward_recomputed(const sequence_ctx *s, eg_tensor *const *inputs,
                                     eg_tensor *const *output_grads, eg_tensor **input_grads) {
    eg_tape *tape = eg_tape_begin(false);
    if (!tape) return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of memory", name_of(s));
    eg_status status = EG_OK;
    for (int i = 0; i < s->n_inputs && status == EG_OK; i++)
        status = eg_tape_watch(tape, inputs[i]);
    eg_tensor *h = eg_reshape(inputs[H0], 2, inputs[H0]->shape);
    eg_tensor *c =
        h && !s->gru ? eg_reshape(inputs[LAST_INPUT], 2, inputs[LAST_INPUT]->shape) : NULL;
    eg_tensor *objective = NULL;
    if (status == EG_OK && (!h || (!s->gru && !c))) status = eg_last_status();
    for (int64_t k = 0; k < s->steps && status == EG_OK; k++) {
        eg_tensor *z = NULL, *h_next = NULL, *c_next = NULL;
        status =
            run_step(s, inputs, inputs[RECURRENT], h, c, step_time(s, k), &z, &h_next, &c_next);
        eg_release(z);
        eg_release(h);
        eg_release(c);
        h = h_next;
        c = c_next;
        if (status != EG_OK) break;
        eg_tensor *g = rows(output_grads[0], output_block(s, k), s->batch);
        status = accumulate(&objective, g ? dot(h, g) : NULL);
        eg_release(g);
    }
    if (status == EG_OK && !s->gru) status = accumulate(&objective, dot(c, output_grads[1]));
    if (status == EG_OK)
        status = eg_tape_gradient(tape, objective, s->n_inputs, inputs, input_grads,
                                  EG_UNCONNECTED_ZERO);
    eg_release(objective);
    eg_release(h);
    eg_release(c);
    eg_tape_free(tape);
    return status;
}

/* [dh'; dc'] (2, B, H) for the cell's fused backward. */
static eg_tensor *stacked(const eg_tensor *dh, const eg_tensor *dc) {
    const eg_tensor *pair[2] = {dh, dc};
    return eg_stack(2, eg__tensor_handles(pair), 0);
}

/* U^T made row-major once: each step's product with U^T then reads it where it lies (the
 * product's direct path for few rows) instead of transposing all of U into its packing buffers
 * at every step. */
static eg_tensor *transposed(const sequence_ctx *s, const eg_tensor *u) {
    eg_tensor *view = eg_transpose(u, 0, 1);
    eg_tensor *t = view ? (s->products ? eg_cast(view, s->products) : eg_contiguous(view)) : NULL;
    eg_release(view);
    return t;
}

/* A (rows, cols) view of flat's elements [begin, begin + rows * cols): a new reference. */
static eg_tensor *part(const eg_tensor *flat, int64_t begin, int64_t rows, int64_t cols) {
    eg_tensor *piece = eg_slice(flat, 0, begin, begin + rows * cols, 1);
    eg_tensor *shaped = piece ? eg_reshape(piece, 2, (int64_t[]){rows, cols}) : NULL;
    eg_release(piece);
    return shaped;
}

/* An LSTM's back-propagation through time, with the cell's fused backward op at every step. */
static eg_status backward_lstm(const sequence_ctx *s, eg_tensor *const *inputs,
                               eg_tensor *const *output_grads, eg_tensor **input_grads) {
    int64_t T = s->steps, B = s->batch, H = s->units;
    eg_tensor **dz = calloc((size_t)T, sizeof *dz), **h_prev = calloc((size_t)T, sizeof *h_prev);
    eg_status status =
        dz && h_prev ? EG_OK : eg__error(EG_ERR_OUT_OF_MEMORY, "lstm: out of memory");
    eg_tensor *dh = NULL,
              *dc = status == EG_OK ? eg_reshape(output_grads[1], 2, (int64_t[]){B, H}) : NULL;
    if (status == EG_OK && !dc) status = eg_last_status();
    eg_tensor *u_t = status == EG_OK ? transposed(s, inputs[RECURRENT]) : NULL;
    if (status == EG_OK && !u_t) status = eg_last_status();
    eg__attrs attrs;
    memset(&attrs, 0, sizeof attrs);
    for (int64_t k = T - 1; k >= 0 && status == EG_OK; k--) {
        eg_tensor *g = rows(output_grads[0], output_block(s, k), B);
        eg_tensor *gh = g && dh ? eg_add(g, dh) : g ? eg_reshape(g, 2, g->shape) : NULL;
        eg_tensor *pair = gh ? stacked(gh, dc) : NULL;
        const eg_tensor *in[3] = {s->z[k], k ? s->c[k - 1] : inputs[LAST_INPUT], pair};
        eg_tensor *flat = pair ? eg__execute(EG__OP_LSTM_CELL_BACKWARD, 3, in, &attrs) : NULL;
        eg_release(g);
        eg_release(gh);
        eg_release(pair);
        eg_release(dh);
        eg_release(dc);
        dh = dc = NULL;
        dz[step_time(s, k)] = flat ? part(flat, 0, B, 4 * H) : NULL;
        dc = dz[step_time(s, k)] ? part(flat, 4 * B * H, B, H) : NULL;
        eg_release(flat);
        const eg_tensor *before = k ? s->h[k - 1] : inputs[H0];
        h_prev[step_time(s, k)] = dc ? eg_reshape(before, 2, before->shape) : NULL;
        dh = h_prev[step_time(s, k)] ? product(s, dz[step_time(s, k)], u_t, false, NULL) : NULL;
        if (!dh) status = eg_last_status();
    }
    if (status == EG_OK) {
        eg_tensor *dz_all = eg_concat((int)T, dz, 0);
        eg_tensor *h_all = dz_all ? eg_concat((int)T, h_prev, 0) : NULL;
        input_grads[1] = h_all ? product(s, h_all, dz_all, true, NULL) : NULL;
        input_grads[0] = input_grads[1] ? dz_all : NULL;
        if (!input_grads[0]) eg_release(dz_all);
        eg_release(h_all);
        input_grads[2] = input_grads[0] ? dh : NULL;
        input_grads[3] = input_grads[0] ? dc : NULL;
        if (input_grads[0])
            dh = dc = NULL;
        else
            status = eg_last_status();
    }
    for (int64_t k = 0; k < T; k++) {
        if (dz) eg_release(dz[k]);
        if (h_prev) eg_release(h_prev[k]);
    }
    free(dz);
    free(h_prev);
    eg_release(u_t);
    eg_release(dh);
    eg_release(dc);
    return status;
}

/* A GRU's back-propagation through time: each step's fused backward op gives the gradients of
 * its input projection, of its recurrent projection dP and of h directly; h's gradient before the
 * step adds dP U^T, and U's and the recurrent bias's gradients come from all steps' dP at once. */
static eg_status backward_gru(const sequence_ctx *s, eg_tensor *const *inputs,
                              eg_tensor *const *output_grads, eg_tensor **input_grads) {
    int64_t T = s->steps, B = s->batch, H = s->units;
    eg_tensor **dx = calloc((size_t)T, sizeof *dx), **dp = calloc((size_t)T, sizeof *dp);
    eg_tensor **h_prev = calloc((size_t)T, sizeof *h_prev);
    eg_status status =
        dx && dp && h_prev ? EG_OK : eg__error(EG_ERR_OUT_OF_MEMORY, "gru: out of memory");
    eg_tensor *u_t = status == EG_OK ? transposed(s, inputs[RECURRENT]) : NULL, *dh = NULL;
    if (status == EG_OK && !u_t) status = eg_last_status();
    eg__attrs attrs;
    memset(&attrs, 0, sizeof attrs);
    for (int64_t k = T - 1; k >= 0 && status == EG_OK; k--) {
        int64_t t = step_time(s, k);
        eg_tensor *g = rows(output_grads[0], output_block(s, k), B);
        eg_tensor *gh = g && dh ? eg_add(g, dh) : g ? eg_reshape(g, 2, g->shape) : NULL;
        eg_tensor *x = gh ? rows(inputs[PROJECTED], t, B) : NULL;
        const eg_tensor *before = k ? s->h[k - 1] : inputs[H0];
        const eg_tensor *in[4] = {x, s->z[k], before, gh};
        eg_tensor *flat = x ? eg__execute(EG__OP_GRU_CELL_BACKWARD, 4, in, &attrs) : NULL;
        eg_release(g);
        eg_release(gh);
        eg_release(x);
        eg_release(dh);
        dh = NULL;
        dx[t] = flat ? part(flat, 0, B, 3 * H) : NULL;
        dp[t] = dx[t] ? part(flat, 3 * B * H, B, 3 * H) : NULL;
        eg_tensor *direct = dp[t] ? part(flat, 6 * B * H, B, H) : NULL;
        eg_release(flat);
        h_prev[t] = direct ? eg_reshape(before, 2, before->shape) : NULL;
        eg_tensor *through = h_prev[t] ? product(s, dp[t], u_t, false, NULL) : NULL;
        dh = through ? eg_add(direct, through) : NULL;
        eg_release(direct);
        eg_release(through);
        if (!dh) status = eg_last_status();
    }
    if (status == EG_OK) {
        eg_tensor *dp_all = eg_concat((int)T, dp, 0);
        eg_tensor *h_all = dp_all ? eg_concat((int)T, h_prev, 0) : NULL;
        input_grads[PROJECTED] = h_all ? eg_concat((int)T, dx, 0) : NULL;
        input_grads[RECURRENT] =
            input_grads[PROJECTED] ? product(s, h_all, dp_all, true, NULL) : NULL;
        if (input_grads[RECURRENT] && s->n_inputs > LAST_INPUT)
            input_grads[LAST_INPUT] = eg_sum(dp_all, 1, (const int[]){0}, false);
        eg_release(dp_all);
        eg_release(h_all);
        if (input_grads[RECURRENT] && (s->n_inputs == LAST_INPUT || input_grads[LAST_INPUT])) {
            input_grads[H0] = dh;
            dh = NULL;
        } else {
            status = eg_last_status();
        }
    }
    for (int64_t k = 0; k < T; k++) {
        if (dx) eg_release(dx[k]);
        if (dp) eg_release(dp[k]);
        if (h_prev) eg_release(h_prev[k]);
    }
    free(dx);
    free(dp);
    free(h_prev);
    eg_release(u_t);
    eg_release(dh);
    return status;
}

static eg_status sequence_backward(int n_inputs, eg_tensor *const *inputs, int n_outputs,
                                   eg_tensor *const *outputs, eg_tensor *const *output_grads,
                                   eg_tensor **input_grads, void *ctx) {
    (void)outputs;
    const sequence_ctx *s = ctx;
    const eg_tensor *read[6];
    int n_read = 0;
    for (int i = 0; i < n_inputs; i++) read[n_read++] = inputs[i];
    for (int i = 0; i < n_outputs; i++) read[n_read++] = output_grads[i];
    if (eg__tapes_would_record(n_read, read))
        return backward_recomputed(s, inputs, output_grads, input_grads);
    return s->gru ? backward_gru(s, inputs, output_grads, input_grads)
                  : backward_lstm(s, inputs, output_grads, input_grads);
}

static const eg_custom_gradient_def lstm_sequence = {.name = "lstm",
                                                     .forward = sequence_forward,
                                                     .backward = sequence_backward,
                                                     .free_ctx = free_ctx};
static const eg_custom_gradient_def gru_sequence = {.name = "gru",
                                                    .forward = sequence_forward,
                                                    .backward = sequence_backward,
                                                    .free_ctx = free_ctx};

static eg_status run_sequence(bool gru, int n_inputs, const eg_tensor *const *inputs, bool reverse,
                              bool time_order, eg_dtype products, eg_tensor **outputs) {
    outputs[0] = outputs[1] = NULL;
    int64_t batch = inputs[H0]->shape[0];
    sequence_ctx *s = calloc(1, sizeof *s);
    if (!s) return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of memory", gru ? "gru" : "lstm");
    *s = (sequence_ctx){.gru = gru,
                        .n_inputs = n_inputs,
                        .steps = inputs[PROJECTED]->shape[0] / batch,
                        .batch = batch,
                        .units = inputs[H0]->shape[1],
                        .reverse = reverse,
                        .time_order = time_order,
                        .products = products};
    if (s->steps > INT32_MAX) {
        eg_status status =
            eg__error(EG_ERR_SHAPE, "%s: %lld steps are too many", name_of(s), (long long)s->steps);
        free(s);
        return status;
    }
    return eg_custom_gradient(gru ? &gru_sequence : &lstm_sequence, s, n_inputs,
                              eg__tensor_handles(inputs), gru ? 1 : 2, outputs);
}

eg_status eg__lstm_sequence(const eg_tensor *projected, const eg_tensor *recurrent,
                            const eg_tensor *h0, const eg_tensor *c0, bool reverse, bool time_order,
                            eg_dtype products, eg_tensor **outputs) {
    const eg_tensor *inputs[4] = {projected, recurrent, h0, c0};
    return run_sequence(false, 4, inputs, reverse, time_order, products, outputs);
}

eg_status eg__gru_sequence(const eg_tensor *projected, const eg_tensor *recurrent,
                           const eg_tensor *recurrent_bias, const eg_tensor *h0, bool reverse,
                           bool time_order, eg_dtype products, eg_tensor **outputs) {
    const eg_tensor *inputs[4] = {projected, recurrent, h0, recurrent_bias};
    return run_sequence(true, recurrent_bias ? 4 : 3, inputs, reverse, time_order, products,
                        outputs);
}
