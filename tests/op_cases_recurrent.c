/* The recurrent cells' op cases (rows in op_cases.c's table): the calls into Eagle and their
 * plain-C references, computed in doubles from the formulas of eagle/ops.h (eg_lstm_cell,
 * eg_gru_cell) and, for the fused gradients, of src/autograd/backward_recurrent.c. */
#include <math.h>

#include "api/internal.h"
#include "op_reference.h"

static double sigmoid(double x) {
    return 1.0 / (1.0 + exp(-x));
}

int oc_apply_lstm_cell(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    (void)c;
    return eg_lstm_cell(in[0], in[1], &out[0], &out[1]) == EG_OK ? 2 : -1;
}

int oc_apply_gru_cell(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    (void)c;
    out[0] = eg_gru_cell(in[0], in[1], in[2]);
    return out[0] ? 1 : -1;
}

/* The fused gradients are internal: inputs as in ops.def */
int oc_apply_cell_backward(const oc_case *c, eg_tensor *const *in, eg_tensor **out) {
    static const eg__attrs no_attrs;
    out[0] = eg__execute(c->op, oc_case_n_inputs(c), eg__const_tensors(in), &no_attrs);
    return out[0] ? 1 : -1;
}

/* The activated gates of one unit: i, f, g, o, then c' and tanh(c'). */
typedef struct lstm_unit {
    double i, f, g, o, cell, tanh_cell;
} lstm_unit;

static lstm_unit lstm_unit_at(const oc_ref *z, const oc_ref *c, int64_t b, int64_t j) {
    int64_t h = c->shape[1];
    const double *zr = z->data + b * 4 * h;
    lstm_unit u = {
        sigmoid(zr[j]), sigmoid(zr[h + j]), tanh(zr[2 * h + j]), sigmoid(zr[3 * h + j]), 0, 0};
    u.cell = u.f * c->data[b * h + j] + u.i * u.g;
    u.tanh_cell = tanh(u.cell);
    return u;
}

int oc_ref_lstm_cell(const oc_case *c, const oc_ref *in, oc_ref *out) {
    (void)c;
    const oc_ref *state = &in[1];
    int64_t b = state->shape[0], h = state->shape[1];
    oc_ref_init(&out[0], in[0].dtype, 2, state->shape);
    oc_ref_init(&out[1], in[0].dtype, 2, state->shape);
    for (int64_t r = 0; r < b; r++)
        for (int64_t j = 0; j < h; j++) {
            lstm_unit u = lstm_unit_at(&in[0], state, r, j);
            out[0].data[r * h + j] = u.o * u.tanh_cell;
            out[1].data[r * h + j] = u.cell;
        }
    return 2;
}

int oc_ref_lstm_cell_backward(const oc_case *c, const oc_ref *in, oc_ref *out) {
    (void)c;
    const oc_ref *state = &in[1], *grad = &in[2];
    int64_t b = state->shape[0], h = state->shape[1], bh = b * h;
    oc_ref_init(&out[0], in[0].dtype, 1, (const int64_t[]){5 * bh});
    for (int64_t r = 0; r < b; r++)
        for (int64_t j = 0; j < h; j++) {
            lstm_unit u = lstm_unit_at(&in[0], state, r, j);
            double dh = grad->data[r * h + j], dc = grad->data[bh + r * h + j];
            double d_cell = dc + dh * u.o * (1 - u.tanh_cell * u.tanh_cell);
            double *dz = out[0].data + r * 4 * h;
            dz[j] = d_cell * u.g * u.i * (1 - u.i);
            dz[h + j] = d_cell * state->data[r * h + j] * u.f * (1 - u.f);
            dz[2 * h + j] = d_cell * u.i * (1 - u.g * u.g);
            dz[3 * h + j] = dh * u.tanh_cell * u.o * (1 - u.o);
            out[0].data[4 * bh + r * h + j] = d_cell * u.f;
        }
    return 1;
}

/* z, r and the candidate n of one unit. */
typedef struct gru_unit {
    double z, r, n;
} gru_unit;

static gru_unit gru_unit_at(const oc_ref *x, const oc_ref *hp, int64_t h, int64_t b, int64_t j) {
    const double *xr = x->data + b * 3 * h, *hr = hp->data + b * 3 * h;
    gru_unit u = {sigmoid(xr[j] + hr[j]), sigmoid(xr[h + j] + hr[h + j]), 0};
    u.n = tanh(xr[2 * h + j] + u.r * hr[2 * h + j]);
    return u;
}

int oc_ref_gru_cell(const oc_case *c, const oc_ref *in, oc_ref *out) {
    (void)c;
    const oc_ref *state = &in[2];
    int64_t b = state->shape[0], h = state->shape[1];
    oc_ref_init(&out[0], in[0].dtype, 2, state->shape);
    for (int64_t r = 0; r < b; r++)
        for (int64_t j = 0; j < h; j++) {
            gru_unit u = gru_unit_at(&in[0], &in[1], h, r, j);
            out[0].data[r * h + j] = u.z * state->data[r * h + j] + (1 - u.z) * u.n;
        }
    return 1;
}

int oc_ref_gru_cell_backward(const oc_case *c, const oc_ref *in, oc_ref *out) {
    (void)c;
    const oc_ref *state = &in[2], *grad = &in[3];
    int64_t b = state->shape[0], h = state->shape[1], bh = b * h;
    oc_ref_init(&out[0], in[0].dtype, 1, (const int64_t[]){7 * bh});
    double *dx = out[0].data, *dhp = dx + 3 * bh, *dh = dhp + 3 * bh;
    for (int64_t r = 0; r < b; r++)
        for (int64_t j = 0; j < h; j++) {
            gru_unit u = gru_unit_at(&in[0], &in[1], h, r, j);
            double g = grad->data[r * h + j];
            double d_n = g * (1 - u.z) * (1 - u.n * u.n);
            double d_z = g * (state->data[r * h + j] - u.n) * u.z * (1 - u.z);
            double d_r = d_n * in[1].data[r * 3 * h + 2 * h + j] * u.r * (1 - u.r);
            int64_t w = r * 3 * h + j;
            dx[w] = dhp[w] = d_z;
            dx[w + h] = dhp[w + h] = d_r;
            dx[w + 2 * h] = d_n;
            dhp[w + 2 * h] = d_n * u.r;
            dh[r * h + j] = g * u.z;
        }
    return 1;
}
