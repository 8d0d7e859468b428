/* Backward rules of the recurrent cells (ops.def: lstm_cell, gru_cell). When no tape records
 * the backward itself, one fused kernel (lstm_cell_backward, gru_cell_backward) computes every
 * input's gradient in one pass; otherwise (a gradient of a gradient) the same formulas run as
 * differentiable Eagle ops, so higher-order gradients are exact. The two agree to rounding.
 *
 * LSTM, with s' = s (1 - s) for a sigmoid s and t' = 1 - t^2 for a tanh t:
 *   d_cell = dc' + dh' o tanh'(c'),  dz = [d_cell g i', d_cell c f', d_cell i g', dh' tanh(c') o'],
 *   dc = d_cell f.
 * GRU (reset after), h' = z h + (1 - z) n, n = tanh(x_h + r h_h):
 *   d_n = G (1 - z) n',  d_z = G (h - n) z',  d_r = d_n h_h r',
 *   dx_proj = [d_z, d_r, d_n],  dh_proj = [d_z, d_r, d_n r],  dh = G z. */
#include "api/internal.h"
#include "autograd/internal.h"
#include "autograd/rule_temps.h"
#include "base/error.h"

#define IN(i) (call->inputs[i])
#define GRAD  (call->grad_output)

/* Gate `index` (of `gates`, each `hidden` wide) of rows x (B, gates * H): a view. */
static eg_tensor *gate(eg__rule_temps *t, const eg_tensor *x, int index, int64_t hidden) {
    return eg__rule_temp(t, eg_slice(x, 1, index * hidden, (index + 1) * hidden, 1));
}

/* s (1 - s): a sigmoid's derivative from its value. */
static eg_tensor *sigmoid_slope(eg__rule_temps *t, const eg_tensor *s) {
    return eg__rule_temp(t, eg_sub(s, eg__rule_temp(t, eg_square(s))));
}

/* 1 - t^2: a tanh's derivative from its value. */
static eg_tensor *tanh_slope(eg__rule_temps *t, const eg_tensor *v) {
    return eg__rule_temp(
        t, eg_add_scalar(eg__rule_temp(t, eg_neg(eg__rule_temp(t, eg_square(v)))), 1.0));
}

static eg_tensor *mul3(eg__rule_temps *t, const eg_tensor *a, const eg_tensor *b,
                       const eg_tensor *c) {
    return eg__rule_temp(t, eg_mul(eg__rule_temp(t, eg_mul(a, b)), c));
}

/* Part [begin, end) of a flat result, as a contiguous (rows, cols) view: a new reference. */
static eg_tensor *flat_part(eg__rule_temps *t, const eg_tensor *flat, int64_t begin, int64_t rows,
                            int64_t cols) {
    eg_tensor *part = eg__rule_temp(t, eg_slice(flat, 0, begin, begin + rows * cols, 1));
    return part ? eg_reshape(part, 2, (const int64_t[]){rows, cols}) : NULL;
}

static eg_status lstm_backward_fused(const eg__backward_call *call) {
    eg__rule_temps t = {0};
    int64_t b = IN(1)->shape[0], h = IN(1)->shape[1];
    const eg_tensor *in[3] = {IN(0), IN(1), GRAD};
    eg_tensor *flat = eg__rule_temp(&t, eg__execute(EG__OP_LSTM_CELL_BACKWARD, 3, in, call->attrs));
    if (!flat) return eg__rule_finish(&t, "recurrent cell");
    if (call->needs_grad[0]) call->grad_inputs[0] = flat_part(&t, flat, 0, b, 4 * h);
    if (call->needs_grad[1]) call->grad_inputs[1] = flat_part(&t, flat, 4 * b * h, b, h);
    return eg__rule_finish(&t, "recurrent cell");
}

eg_status eg__backward_lstm_cell(const eg__backward_call *call) {
    const eg_tensor *recorded[4] = {IN(0), IN(1), GRAD, call->output};
    if (!eg__tapes_would_record(4, recorded)) return lstm_backward_fused(call);
    eg__rule_temps t = {0};
    const eg_tensor *z = IN(0), *c = IN(1);
    int64_t b = c->shape[0], h = c->shape[1];
    eg_tensor *i = eg__rule_temp(&t, eg_sigmoid(gate(&t, z, 0, h)));
    eg_tensor *f = eg__rule_temp(&t, eg_sigmoid(gate(&t, z, 1, h)));
    eg_tensor *g = eg__rule_temp(&t, eg_tanh(gate(&t, z, 2, h)));
    eg_tensor *o = eg__rule_temp(&t, eg_sigmoid(gate(&t, z, 3, h)));
    eg_tensor *cell =
        eg__rule_temp(&t, eg_add(eg__rule_temp(&t, eg_mul(f, c)), eg__rule_temp(&t, eg_mul(i, g))));
    eg_tensor *tanh_cell = eg__rule_temp(&t, eg_tanh(cell));
    eg_tensor *dh = eg__rule_temp(
        &t, eg_reshape(eg__rule_temp(&t, eg_slice(GRAD, 0, 0, 1, 1)), 2, (const int64_t[]){b, h}));
    eg_tensor *dc_next = eg__rule_temp(
        &t, eg_reshape(eg__rule_temp(&t, eg_slice(GRAD, 0, 1, 2, 1)), 2, (const int64_t[]){b, h}));
    eg_tensor *d_cell =
        eg__rule_temp(&t, eg_add(dc_next, mul3(&t, dh, o, tanh_slope(&t, tanh_cell))));
    if (eg_last_status() != EG_OK) return eg__rule_finish(&t, "recurrent cell");
    if (call->needs_grad[0]) {
        eg_tensor *parts[4] = {
            mul3(&t, d_cell, g, sigmoid_slope(&t, i)),
            mul3(&t, d_cell, c, sigmoid_slope(&t, f)),
            mul3(&t, d_cell, i, tanh_slope(&t, g)),
            mul3(&t, dh, tanh_cell, sigmoid_slope(&t, o)),
        };
        if (eg_last_status() == EG_OK) call->grad_inputs[0] = eg_concat(4, parts, 1);
    }
    if (call->needs_grad[1] && eg_last_status() == EG_OK) call->grad_inputs[1] = eg_mul(d_cell, f);
    return eg__rule_finish(&t, "recurrent cell");
}

static eg_status gru_backward_fused(const eg__backward_call *call) {
    eg__rule_temps t = {0};
    int64_t b = IN(2)->shape[0], h = IN(2)->shape[1];
    const eg_tensor *in[4] = {IN(0), IN(1), IN(2), GRAD};
    eg_tensor *flat = eg__rule_temp(&t, eg__execute(EG__OP_GRU_CELL_BACKWARD, 4, in, call->attrs));
    if (!flat) return eg__rule_finish(&t, "recurrent cell");
    if (call->needs_grad[0]) call->grad_inputs[0] = flat_part(&t, flat, 0, b, 3 * h);
    if (call->needs_grad[1]) call->grad_inputs[1] = flat_part(&t, flat, 3 * b * h, b, 3 * h);
    if (call->needs_grad[2]) call->grad_inputs[2] = flat_part(&t, flat, 6 * b * h, b, h);
    return eg__rule_finish(&t, "recurrent cell");
}

eg_status eg__backward_gru_cell(const eg__backward_call *call) {
    const eg_tensor *recorded[5] = {IN(0), IN(1), IN(2), GRAD, call->output};
    if (!eg__tapes_would_record(5, recorded)) return gru_backward_fused(call);
    eg__rule_temps t = {0};
    const eg_tensor *xp = IN(0), *hp = IN(1), *state = IN(2);
    int64_t h = state->shape[1];
    eg_tensor *z = eg__rule_temp(
        &t, eg_sigmoid(eg__rule_temp(&t, eg_add(gate(&t, xp, 0, h), gate(&t, hp, 0, h)))));
    eg_tensor *r = eg__rule_temp(
        &t, eg_sigmoid(eg__rule_temp(&t, eg_add(gate(&t, xp, 1, h), gate(&t, hp, 1, h)))));
    eg_tensor *hh = gate(&t, hp, 2, h);
    eg_tensor *cand = eg__rule_temp(
        &t,
        eg_tanh(eg__rule_temp(&t, eg_add(gate(&t, xp, 2, h), eg__rule_temp(&t, eg_mul(r, hh))))));
    eg_tensor *one_minus_z = eg__rule_temp(&t, eg_add_scalar(eg__rule_temp(&t, eg_neg(z)), 1.0));
    eg_tensor *d_cand = mul3(&t, GRAD, one_minus_z, tanh_slope(&t, cand));
    eg_tensor *d_z = mul3(&t, GRAD, eg__rule_temp(&t, eg_sub(state, cand)), sigmoid_slope(&t, z));
    eg_tensor *d_r = mul3(&t, d_cand, hh, sigmoid_slope(&t, r));
    if (eg_last_status() != EG_OK) return eg__rule_finish(&t, "recurrent cell");
    if (call->needs_grad[0]) {
        eg_tensor *parts[3] = {d_z, d_r, d_cand};
        call->grad_inputs[0] = eg_concat(3, parts, 1);
    }
    if (call->needs_grad[1] && eg_last_status() == EG_OK) {
        eg_tensor *parts[3] = {d_z, d_r, eg__rule_temp(&t, eg_mul(d_cand, r))};
        if (parts[2]) call->grad_inputs[1] = eg_concat(3, parts, 1);
    }
    if (call->needs_grad[2] && eg_last_status() == EG_OK) call->grad_inputs[2] = eg_mul(GRAD, z);
    return eg__rule_finish(&t, "recurrent cell");
}
