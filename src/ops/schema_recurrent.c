/* Shape and dtype inference for the recurrent cells (ops.def: lstm_cell, gru_cell and their fused
 * gradients). They take f32 or f64, one dtype for all inputs: a cell's state is carried over
 * many steps, so mixed precision keeps it in f32 (as Keras' policies keep RNN cells' state). */
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "ops/internal.h"

static eg_status require_cell_dtypes(eg__op op, int n_in, const eg_tensor *const *in) {
    for (int i = 0; i < n_in; i++) {
        if (in[i]->dtype != EG_DTYPE_F32 && in[i]->dtype != EG_DTYPE_F64)
            return eg__op_error(op, EG_ERR_DTYPE, "input %d must be f32 or f64, got %s", i,
                                eg_dtype_name(in[i]->dtype));
        if (in[i]->dtype != in[0]->dtype)
            return eg__op_error(op, EG_ERR_DTYPE, "input %d is %s, input 0 %s: one dtype for all",
                                i, eg_dtype_name(in[i]->dtype), eg_dtype_name(in[0]->dtype));
    }
    return EG_OK;
}

/* Input `index` must be (batch, units) with units = `gates` * hidden. */
static eg_status require_rows(eg__op op, const eg_tensor *t, int index, const char *what,
                              int64_t batch, int64_t units) {
    if (t->n_dims == 2 && t->shape[0] == batch && t->shape[1] == units) return EG_OK;
    char shape[96];
    eg__shape_format(t->n_dims, t->shape, shape, sizeof shape);
    return eg__op_error(op, EG_ERR_SHAPE, "input %d (%s) must be (%lld, %lld), got %s", index, what,
                        (long long)batch, (long long)units, shape);
}

/* The batch and hidden size from the state input (batch, H), which every cell op has. */
static eg_status state_size(eg__op op, const eg_tensor *state, int index, int64_t *batch,
                            int64_t *hidden) {
    if (state->n_dims != 2 || state->shape[1] < 1) {
        char shape[96];
        eg__shape_format(state->n_dims, state->shape, shape, sizeof shape);
        return eg__op_error(op, EG_ERR_SHAPE, "input %d (the state) must be (batch, units), got %s",
                            index, shape);
    }
    *batch = state->shape[0];
    *hidden = state->shape[1];
    return EG_OK;
}

static void set_meta(eg__meta *meta, eg_dtype dtype, int n_dims, const int64_t *shape) {
    meta->dtype = dtype;
    meta->n_dims = n_dims;
    memcpy(meta->shape, shape, sizeof(int64_t) * (size_t)n_dims);
}

/* (z (B, 4H), c (B, H)) -> (2, B, H) */
eg_status eg__infer_lstm_cell(eg__op op, int n_in, const eg_tensor *const *in,
                              const eg__attrs *attrs, eg__meta *meta) {
    (void)attrs;
    int64_t b = 0, h = 0;
    if (require_cell_dtypes(op, n_in, in) != EG_OK || state_size(op, in[1], 1, &b, &h) != EG_OK ||
        require_rows(op, in[0], 0, "the gates' pre-activations i, f, c, o", b, 4 * h) != EG_OK)
        return eg_last_status();
    set_meta(meta, in[0]->dtype, 3, (const int64_t[]){2, b, h});
    return EG_OK;
}

/* (z (B, 4H), c (B, H), G (2, B, H)) -> (B*4H + B*H) */
eg_status eg__infer_lstm_cell_backward(eg__op op, int n_in, const eg_tensor *const *in,
                                       const eg__attrs *attrs, eg__meta *meta) {
    (void)attrs;
    int64_t b = 0, h = 0;
    if (require_cell_dtypes(op, n_in, in) != EG_OK || state_size(op, in[1], 1, &b, &h) != EG_OK ||
        require_rows(op, in[0], 0, "the gates' pre-activations", b, 4 * h) != EG_OK)
        return eg_last_status();
    const eg_tensor *g = in[2];
    if (g->n_dims != 3 || g->shape[0] != 2 || g->shape[1] != b || g->shape[2] != h) {
        char shape[96];
        eg__shape_format(g->n_dims, g->shape, shape, sizeof shape);
        return eg__op_error(op, EG_ERR_SHAPE,
                            "input 2 (the gradient) must be (2, %lld, %lld), got %s", (long long)b,
                            (long long)h, shape);
    }
    set_meta(meta, in[0]->dtype, 1, (const int64_t[]){5 * b * h});
    return EG_OK;
}

/* (x_proj (B, 3H), h_proj (B, 3H), h (B, H)) -> (B, H) */
eg_status eg__infer_gru_cell(eg__op op, int n_in, const eg_tensor *const *in,
                             const eg__attrs *attrs, eg__meta *meta) {
    (void)attrs;
    int64_t b = 0, h = 0;
    if (require_cell_dtypes(op, n_in, in) != EG_OK || state_size(op, in[2], 2, &b, &h) != EG_OK ||
        require_rows(op, in[0], 0, "the input projection z, r, h", b, 3 * h) != EG_OK ||
        require_rows(op, in[1], 1, "the recurrent projection z, r, h", b, 3 * h) != EG_OK)
        return eg_last_status();
    set_meta(meta, in[0]->dtype, 2, (const int64_t[]){b, h});
    return EG_OK;
}

/* (x_proj, h_proj, h, G (B, H)) -> (B*3H + B*3H + B*H) */
eg_status eg__infer_gru_cell_backward(eg__op op, int n_in, const eg_tensor *const *in,
                                      const eg__attrs *attrs, eg__meta *meta) {
    (void)attrs;
    int64_t b = 0, h = 0;
    if (require_cell_dtypes(op, n_in, in) != EG_OK || state_size(op, in[2], 2, &b, &h) != EG_OK ||
        require_rows(op, in[0], 0, "the input projection", b, 3 * h) != EG_OK ||
        require_rows(op, in[1], 1, "the recurrent projection", b, 3 * h) != EG_OK ||
        require_rows(op, in[3], 3, "the gradient", b, h) != EG_OK)
        return eg_last_status();
    set_meta(meta, in[0]->dtype, 1, (const int64_t[]){7 * b * h});
    return EG_OK;
}
