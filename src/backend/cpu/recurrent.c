/* CPU kernels of the recurrent cells (ops.def: lstm_cell, gru_cell and their fused gradients).
 *
 * A time step's gates are one pass over its rows: each row's units go in blocks of BLOCK, the
 * block's pre-activations of every gate are activated with the vector math (vecmath.h: f32; its
 * bits depend only on the input, so neither the thread count nor the block position changes a
 * result) and combined while they are in cache. The backward kernels recompute the activations
 * from the pre-activations instead of reading saved ones: a cell's forward outputs are all a
 * layer keeps per step, and recomputing costs less than the memory traffic of saving four gates.
 * f64 uses libm with the unary kernels' formulas (sigmoid = 1 / (1 + exp(-x))). */
#include <math.h>
#include <stdint.h>

#include "backend/cpu/kernels.h"
#include "backend/cpu/vecmath.h"
#include "base/error.h"

enum { BLOCK = 256 };

static void activate_f32(eg__vecmath_fn fn, float *v, int64_t n) {
    eg__vecmath_f32(fn, n, v, v);
}

static void activate_f64(eg__vecmath_fn fn, double *v, int64_t n) {
    for (int64_t k = 0; k < n; k++)
        v[k] = fn == EG__VECMATH_TANH ? tanh(v[k]) : 1.0 / (1.0 + exp(-v[k]));
}

typedef struct cell_job {
    const char *in[4]; /* contiguous inputs, in the op's order */
    char *out;
    int64_t batch, hidden;
} cell_job;

/* Each block's gates (n units each) are packed into a[g * n + k] and activated in place, so that
 * the gates with one activation are one call. */
#define CELL_KERNELS(T, suffix)                                                                    \
    /* z (B, 4H) i f c o, c (B, H) -> [h'; c'] */                                                  \
    static void lstm_rows_##suffix(void *context, int64_t begin, int64_t end) {                    \
        const cell_job *job = context;                                                             \
        int64_t hidden = job->hidden, bh = job->batch * hidden;                                    \
        const T *z = (const T *)job->in[0], *c = (const T *)job->in[1];                            \
        T *h_out = (T *)job->out, *c_out = h_out + bh;                                             \
        T a[5 * BLOCK];                                                                            \
        for (int64_t row = begin; row < end; row++)                                                \
            for (int64_t j0 = 0; j0 < hidden; j0 += BLOCK) {                                       \
                int64_t n = hidden - j0 < BLOCK ? hidden - j0 : BLOCK;                             \
                const T *zr = z + row * 4 * hidden + j0;                                           \
                for (int g = 0; g < 4; g++)                                                        \
                    for (int64_t k = 0; k < n; k++) a[g * n + k] = zr[g * hidden + k];             \
                activate_##suffix(EG__VECMATH_SIGMOID, a, 2 * n);                                  \
                activate_##suffix(EG__VECMATH_TANH, a + 2 * n, n);                                 \
                activate_##suffix(EG__VECMATH_SIGMOID, a + 3 * n, n);                              \
                const T *cr = c + row * hidden + j0;                                               \
                T *hn = h_out + row * hidden + j0, *cn = c_out + row * hidden + j0;                \
                for (int64_t k = 0; k < n; k++) {                                                  \
                    T next = a[n + k] * cr[k] + a[k] * a[2 * n + k];                               \
                    cn[k] = next;                                                                  \
                    a[4 * n + k] = next;                                                           \
                }                                                                                  \
                activate_##suffix(EG__VECMATH_TANH, a + 4 * n, n);                                 \
                for (int64_t k = 0; k < n; k++) hn[k] = a[3 * n + k] * a[4 * n + k];               \
            }                                                                                      \
    }                                                                                              \
    /* (z, c, G = [dh'; dc']) -> [dz (B, 4H); dc (B, H)] */                                        \
    static void lstm_backward_rows_##suffix(void *context, int64_t begin, int64_t end) {           \
        const cell_job *job = context;                                                             \
        int64_t hidden = job->hidden, bh = job->batch * hidden;                                    \
        const T *z = (const T *)job->in[0], *c = (const T *)job->in[1];                            \
        const T *dh = (const T *)job->in[2], *dc_next = dh + bh;                                   \
        T *dz = (T *)job->out, *dc = dz + 4 * bh;                                                  \
        T a[5 * BLOCK];                                                                            \
        for (int64_t row = begin; row < end; row++)                                                \
            for (int64_t j0 = 0; j0 < hidden; j0 += BLOCK) {                                       \
                int64_t n = hidden - j0 < BLOCK ? hidden - j0 : BLOCK;                             \
                const T *zr = z + row * 4 * hidden + j0, *cr = c + row * hidden + j0;              \
                for (int g = 0; g < 4; g++)                                                        \
                    for (int64_t k = 0; k < n; k++) a[g * n + k] = zr[g * hidden + k];             \
                activate_##suffix(EG__VECMATH_SIGMOID, a, 2 * n);                                  \
                activate_##suffix(EG__VECMATH_TANH, a + 2 * n, n);                                 \
                activate_##suffix(EG__VECMATH_SIGMOID, a + 3 * n, n);                              \
                for (int64_t k = 0; k < n; k++)                                                    \
                    a[4 * n + k] = a[n + k] * cr[k] + a[k] * a[2 * n + k];                         \
                activate_##suffix(EG__VECMATH_TANH, a + 4 * n, n);                                 \
                const T *gh = dh + row * hidden + j0, *gc = dc_next + row * hidden + j0;           \
                T *dzr = dz + row * 4 * hidden + j0, *dcr = dc + row * hidden + j0;                \
                for (int64_t k = 0; k < n; k++) {                                                  \
                    T i = a[k], f = a[n + k], g = a[2 * n + k], o = a[3 * n + k];                  \
                    T tc = a[4 * n + k];                                                           \
                    T d_cell = gc[k] + gh[k] * o * ((T)1 - tc * tc);                               \
                    dzr[k] = d_cell * g * i * ((T)1 - i);                                          \
                    dzr[hidden + k] = d_cell * cr[k] * f * ((T)1 - f);                             \
                    dzr[2 * hidden + k] = d_cell * i * ((T)1 - g * g);                             \
                    dzr[3 * hidden + k] = gh[k] * tc * o * ((T)1 - o);                             \
                    dcr[k] = d_cell * f;                                                           \
                }                                                                                  \
            }                                                                                      \
    }                                                                                              \
    /* The GRU's activations of one block: a = [z; r; n] from x_proj and h_proj rows. */           \
    static void gru_block_##suffix(const T *xr, const T *hr, int64_t hidden, int64_t n, T *a) {    \
        for (int g = 0; g < 2; g++)                                                                \
            for (int64_t k = 0; k < n; k++)                                                        \
                a[g * n + k] = xr[g * hidden + k] + hr[g * hidden + k];                            \
        activate_##suffix(EG__VECMATH_SIGMOID, a, 2 * n);                                          \
        for (int64_t k = 0; k < n; k++)                                                            \
            a[2 * n + k] = xr[2 * hidden + k] + a[n + k] * hr[2 * hidden + k];                     \
        activate_##suffix(EG__VECMATH_TANH, a + 2 * n, n);                                         \
    }                                                                                              \
    /* (x_proj (B, 3H) z r h, h_proj (B, 3H), h (B, H)) -> h' */                                   \
    static void gru_rows_##suffix(void *context, int64_t begin, int64_t end) {                     \
        const cell_job *job = context;                                                             \
        int64_t hidden = job->hidden;                                                              \
        const T *x = (const T *)job->in[0], *hp = (const T *)job->in[1];                           \
        const T *h = (const T *)job->in[2];                                                        \
        T *out = (T *)job->out;                                                                    \
        T a[3 * BLOCK];                                                                            \
        for (int64_t row = begin; row < end; row++)                                                \
            for (int64_t j0 = 0; j0 < hidden; j0 += BLOCK) {                                       \
                int64_t n = hidden - j0 < BLOCK ? hidden - j0 : BLOCK;                             \
                gru_block_##suffix(x + row * 3 * hidden + j0, hp + row * 3 * hidden + j0, hidden,  \
                                   n, a);                                                          \
                const T *hr = h + row * hidden + j0;                                               \
                T *o = out + row * hidden + j0;                                                    \
                for (int64_t k = 0; k < n; k++)                                                    \
                    o[k] = a[k] * hr[k] + ((T)1 - a[k]) * a[2 * n + k];                            \
            }                                                                                      \
    }                                                                                              \
    /* (x_proj, h_proj, h, G) -> [dx_proj (B, 3H); dh_proj (B, 3H); dh (B, H)] */                  \
    static void gru_backward_rows_##suffix(void *context, int64_t begin, int64_t end) {            \
        const cell_job *job = context;                                                             \
        int64_t hidden = job->hidden, bh = job->batch * hidden;                                    \
        const T *x = (const T *)job->in[0], *hp = (const T *)job->in[1];                           \
        const T *h = (const T *)job->in[2], *grad = (const T *)job->in[3];                         \
        T *dx = (T *)job->out, *dhp = dx + 3 * bh, *dh = dhp + 3 * bh;                             \
        T a[3 * BLOCK];                                                                            \
        for (int64_t row = begin; row < end; row++)                                                \
            for (int64_t j0 = 0; j0 < hidden; j0 += BLOCK) {                                       \
                int64_t n = hidden - j0 < BLOCK ? hidden - j0 : BLOCK;                             \
                int64_t wide = row * 3 * hidden + j0, narrow = row * hidden + j0;                  \
                gru_block_##suffix(x + wide, hp + wide, hidden, n, a);                             \
                for (int64_t k = 0; k < n; k++) {                                                  \
                    T zg = a[k], r = a[n + k], cand = a[2 * n + k], g = grad[narrow + k];          \
                    T d_cand = g * ((T)1 - zg) * ((T)1 - cand * cand);                             \
                    T d_z = g * (h[narrow + k] - cand) * zg * ((T)1 - zg);                         \
                    T d_r = d_cand * hp[wide + 2 * hidden + k] * r * ((T)1 - r);                   \
                    dx[wide + k] = dhp[wide + k] = d_z;                                            \
                    dx[wide + hidden + k] = dhp[wide + hidden + k] = d_r;                          \
                    dx[wide + 2 * hidden + k] = d_cand;                                            \
                    dhp[wide + 2 * hidden + k] = d_cand * r;                                       \
                    dh[narrow + k] = g * zg;                                                       \
                }                                                                                  \
            }                                                                                      \
    }

CELL_KERNELS(float, f32)
CELL_KERNELS(double, f64)

/* Rows of a cell per chunk: a few blocks of units each, so that small batches of wide cells still
 * split across threads. */
static int64_t row_grain(int64_t hidden, int gates) {
    int64_t per_row = hidden * gates;
    int64_t rows = EG_PARALLEL_GRAIN_ELEMENTWISE / 4 / (per_row > 0 ? per_row : 1);
    return rows > 1 ? rows : 1;
}

static eg_status run_cell(const eg__kernel_call *call, int64_t hidden, int gates,
                          eg__parallel_fn f32, eg__parallel_fn f64) {
    eg_tensor *in[4] = {NULL};
    cell_job job = {.out = eg__data(call->output), .hidden = hidden};
    eg_status status = EG_OK;
    for (int i = 0; i < call->n_inputs && status == EG_OK; i++) {
        in[i] = eg__contiguous_temp(call->inputs[i]);
        if (!in[i])
            status = eg_last_status() ? eg_last_status() : EG_ERR_OUT_OF_MEMORY;
        else
            job.in[i] = eg__data(in[i]);
    }
    if (status == EG_OK) {
        job.batch = call->inputs[0]->shape[0];
        eg__parallel_for(job.batch, row_grain(hidden, gates),
                         call->output->dtype == EG_DTYPE_F64 ? f64 : f32, &job);
    }
    for (int i = 0; i < call->n_inputs; i++) eg__unref(in[i]);
    return status;
}

eg_status eg__cpu_lstm_cell(const eg__kernel_call *call);
eg_status eg__cpu_lstm_cell(const eg__kernel_call *call) {
    return run_cell(call, call->inputs[1]->shape[1], 6, lstm_rows_f32, lstm_rows_f64);
}

eg_status eg__cpu_lstm_cell_backward(const eg__kernel_call *call);
eg_status eg__cpu_lstm_cell_backward(const eg__kernel_call *call) {
    return run_cell(call, call->inputs[1]->shape[1], 8, lstm_backward_rows_f32,
                    lstm_backward_rows_f64);
}

eg_status eg__cpu_gru_cell(const eg__kernel_call *call);
eg_status eg__cpu_gru_cell(const eg__kernel_call *call) {
    return run_cell(call, call->inputs[2]->shape[1], 7, gru_rows_f32, gru_rows_f64);
}

eg_status eg__cpu_gru_cell_backward(const eg__kernel_call *call);
eg_status eg__cpu_gru_cell_backward(const eg__kernel_call *call) {
    return run_cell(call, call->inputs[2]->shape[1], 10, gru_backward_rows_f32,
                    gru_backward_rows_f64);
}
