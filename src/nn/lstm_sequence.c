/* An LSTM's whole sequence as one node of the tape (eg_custom_gradient).
 *
 * Recorded step by step, every step's product h U gives the recurrent kernel a gradient of its
 * own, (H, 4H), from a product over only the batch's rows, and the tape then adds T of them: at
 * T = 128 that is most of the memory traffic of a training step. As one node the backward pass
 * runs back-propagation through time itself, keeps each step's dz, and gets U's gradient from a
 * single product over all T * B rows, H_prev^T dZ; the input projection's gradient is dZ itself.
 * The forward runs the same ops as the step-by-step layer (matmul, add, lstm_cell), so the
 * outputs have the same bits. Gradients of gradients (a tape recording the backward) recompute the
 * steps with differentiable ops on a tape of their own instead, so they stay exact. */
#include <stdlib.h>
#include <string.h>

#include "api/internal.h"
#include "autograd/internal.h"
#include "nn/internal.h"

typedef struct sequence_ctx {
    int64_t steps, batch, units;
    bool reverse;    /* processing order: time T-1 first (go_backwards) */
    bool time_order; /* output rows in the input's time order, else in processing order */
    /* per processed step k: z (B, 4H), and the states after it; plain references (no scope) */
    eg_tensor **z, **h, **c;
} sequence_ctx;

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

/* Step k from the states before it: z = x_t + h U, (h', c') = lstm_cell(z, c). New references. */
static eg_status run_step(const eg_tensor *projected, const eg_tensor *recurrent,
                          const eg_tensor *h, const eg_tensor *c, int64_t time, int64_t batch,
                          eg_tensor **z, eg_tensor **h_next, eg_tensor **c_next) {
    eg_tensor *x = rows(projected, time, batch);
    eg_tensor *hu = x ? eg_matmul(h, recurrent) : NULL;
    *z = hu ? eg_add(x, hu) : NULL;
    eg_status status = *z ? eg_lstm_cell(*z, c, h_next, c_next) : eg_last_status();
    eg_release(x);
    eg_release(hu);
    return status;
}

/* inputs: projected (T * B, 4H) time-major, recurrent (H, 4H), h0, c0 (B, H);
 * outputs: every step's h (T * B, H), the last c (B, H). */
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
        return eg__error(EG_ERR_OUT_OF_MEMORY, "lstm: out of memory for %lld steps",
                         (long long)s->steps);
    eg_status status = EG_OK;
    eg_tensor **ordered = calloc(n, sizeof *ordered);
    if (!ordered) return eg__error(EG_ERR_OUT_OF_MEMORY, "lstm: out of memory");
    eg__scope_suspend(); /* the steps' tensors belong to ctx until the tape lets the node go */
    for (int64_t k = 0; k < s->steps && status == EG_OK; k++) {
        const eg_tensor *h = k ? s->h[k - 1] : inputs[2], *c = k ? s->c[k - 1] : inputs[3];
        status = run_step(inputs[0], inputs[1], h, c, step_time(s, k), s->batch, &s->z[k], &s->h[k],
                          &s->c[k]);
    }
    for (int64_t k = 0; k < s->steps && status == EG_OK; k++) ordered[output_block(s, k)] = s->h[k];
    eg__scope_resume();
    if (status == EG_OK) outputs[0] = eg_concat((int)s->steps, ordered, 0);
    if (status == EG_OK && outputs[0]) outputs[1] = eg_reshape(s->c[n - 1], 2, s->c[n - 1]->shape);
    free(ordered);
    if (status == EG_OK && (!outputs[0] || !outputs[1])) status = eg_last_status();
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
    if (!tape) return eg__error(EG_ERR_OUT_OF_MEMORY, "lstm: out of memory");
    eg_status status = EG_OK;
    for (int i = 0; i < 4 && status == EG_OK; i++) status = eg_tape_watch(tape, inputs[i]);
    eg_tensor *h = eg_reshape(inputs[2], 2, inputs[2]->shape);
    eg_tensor *c = h ? eg_reshape(inputs[3], 2, inputs[3]->shape) : NULL;
    eg_tensor *objective = NULL;
    if (status == EG_OK && !c) status = eg_last_status();
    for (int64_t k = 0; k < s->steps && status == EG_OK; k++) {
        eg_tensor *z = NULL, *h_next = NULL, *c_next = NULL;
        status =
            run_step(inputs[0], inputs[1], h, c, step_time(s, k), s->batch, &z, &h_next, &c_next);
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
    if (status == EG_OK) status = accumulate(&objective, dot(c, output_grads[1]));
    if (status == EG_OK)
        status = eg_tape_gradient(tape, objective, 4, inputs, input_grads, EG_UNCONNECTED_ZERO);
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

/* Back-propagation through time, with the cell's fused backward op at every step. */
static eg_status backward_fused(const sequence_ctx *s, eg_tensor *const *inputs,
                                eg_tensor *const *output_grads, eg_tensor **input_grads) {
    int64_t T = s->steps, B = s->batch, H = s->units;
    eg_tensor **dz = calloc((size_t)T, sizeof *dz), **h_prev = calloc((size_t)T, sizeof *h_prev);
    eg_status status =
        dz && h_prev ? EG_OK : eg__error(EG_ERR_OUT_OF_MEMORY, "lstm: out of memory");
    eg_tensor *dh = NULL,
              *dc = status == EG_OK ? eg_reshape(output_grads[1], 2, (int64_t[]){B, H}) : NULL;
    if (status == EG_OK && !dc) status = eg_last_status();
    /* U^T once, row-major: each step's dz U^T then reads it where it lies (the product's direct
     * path for few rows) instead of transposing all of U into its packing buffers T times */
    eg_tensor *u_view = status == EG_OK ? eg_transpose(inputs[1], 0, 1) : NULL;
    eg_tensor *u_t = u_view ? eg_contiguous(u_view) : NULL;
    eg_release(u_view);
    if (status == EG_OK && !u_t) status = eg_last_status();
    eg__attrs attrs;
    memset(&attrs, 0, sizeof attrs);
    for (int64_t k = T - 1; k >= 0 && status == EG_OK; k--) {
        eg_tensor *g = rows(output_grads[0], output_block(s, k), B);
        eg_tensor *gh = g && dh ? eg_add(g, dh) : g ? eg_reshape(g, 2, g->shape) : NULL;
        eg_tensor *pair = gh ? stacked(gh, dc) : NULL;
        const eg_tensor *in[3] = {s->z[k], k ? s->c[k - 1] : inputs[3], pair};
        eg_tensor *flat = pair ? eg__execute(EG__OP_LSTM_CELL_BACKWARD, 3, in, &attrs) : NULL;
        eg_release(g);
        eg_release(gh);
        eg_release(pair);
        eg_release(dh);
        eg_release(dc);
        dh = dc = NULL;
        eg_tensor *dz_flat = flat ? eg_slice(flat, 0, 0, 4 * B * H, 1) : NULL;
        eg_tensor *dc_flat = dz_flat ? eg_slice(flat, 0, 4 * B * H, 5 * B * H, 1) : NULL;
        eg_release(flat);
        dz[step_time(s, k)] = dz_flat ? eg_reshape(dz_flat, 2, (int64_t[]){B, 4 * H}) : NULL;
        dc = dc_flat ? eg_reshape(dc_flat, 2, (int64_t[]){B, H}) : NULL;
        eg_release(dz_flat);
        eg_release(dc_flat);
        const eg_tensor *before = k ? s->h[k - 1] : inputs[2];
        h_prev[step_time(s, k)] = dc ? eg_reshape(before, 2, before->shape) : NULL;
        dh = h_prev[step_time(s, k)] ? eg_matmul(dz[step_time(s, k)], u_t) : NULL;
        if (!dh) status = eg_last_status();
    }
    if (status == EG_OK) {
        eg_tensor *dz_all = eg_concat((int)T, dz, 0);
        eg_tensor *h_all = dz_all ? eg_concat((int)T, h_prev, 0) : NULL;
        input_grads[1] = h_all ? eg_matmul_ex(h_all, dz_all, true, false) : NULL;
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

static eg_status sequence_backward(int n_inputs, eg_tensor *const *inputs, int n_outputs,
                                   eg_tensor *const *outputs, eg_tensor *const *output_grads,
                                   eg_tensor **input_grads, void *ctx) {
    (void)outputs;
    const eg_tensor *read[6] = {inputs[0], inputs[1],       inputs[2],
                                inputs[3], output_grads[0], output_grads[1]};
    (void)n_inputs;
    (void)n_outputs;
    return eg__tapes_would_record(6, read)
               ? backward_recomputed(ctx, inputs, output_grads, input_grads)
               : backward_fused(ctx, inputs, output_grads, input_grads);
}

static const eg_custom_gradient_def lstm_sequence = {.name = "lstm",
                                                     .forward = sequence_forward,
                                                     .backward = sequence_backward,
                                                     .free_ctx = free_ctx};

eg_status eg__lstm_sequence(const eg_tensor *projected, const eg_tensor *recurrent,
                            const eg_tensor *h0, const eg_tensor *c0, bool reverse, bool time_order,
                            eg_tensor **outputs) {
    outputs[0] = outputs[1] = NULL;
    int64_t batch = c0->shape[0];
    sequence_ctx *s = calloc(1, sizeof *s);
    if (!s) return eg__error(EG_ERR_OUT_OF_MEMORY, "lstm: out of memory");
    *s = (sequence_ctx){.steps = projected->shape[0] / batch,
                        .batch = batch,
                        .units = c0->shape[1],
                        .reverse = reverse,
                        .time_order = time_order};
    if (s->steps > INT32_MAX) {
        eg_status status =
            eg__error(EG_ERR_SHAPE, "lstm: %lld steps are too many", (long long)s->steps);
        free(s);
        return status;
    }
    const eg_tensor *inputs[4] = {projected, recurrent, h0, c0};
    return eg_custom_gradient(&lstm_sequence, s, 4, eg__tensor_handles(inputs), 2, outputs);
}
