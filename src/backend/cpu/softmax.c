/* CPU kernels for softmax and log_softmax along one axis and the fused sparse softmax
 * cross-entropy (moved out of reduce.c, which keeps the reductions). The f32 rows take their
 * exponentials from the vector math (vecmath.h). */
#include <math.h>
#include <stdint.h>

#include "backend/cpu/kernels.h"
#include "backend/cpu/vecmath.h"
#include "base/error.h"

/* ---- softmax and log_softmax along one axis ---- */

/* f32 rows: exp through the vector math (vecmath.h: within 1 ulp; the same bits whatever the row
 * length, stride or thread count), summed in double in k order. The exponentials' arguments are
 * x - m rounded to float, as the f64 rows round theirs to double. */
static void exp_strided_f32(int64_t n, float *out, int64_t out_stride, const float *in,
                            int64_t in_stride) {
    if (out_stride == 1 && in_stride == 1)
        eg__vecmath_f32(EG__VECMATH_EXP, n, out, in);
    else
        eg__vecmath_f32_strided(EG__VECMATH_EXP, n, (char *)out,
                                out_stride * (int64_t)sizeof(float), (const char *)in,
                                in_stride * (int64_t)sizeof(float));
}

/* The sum of exp(v[k * stride] - m) for k in [0, n), in double, in order. */
static double sum_exp_f32(const float *v, int64_t n, int64_t stride, float m) {
    enum { CHUNK = 256 };
    float e[CHUNK];
    double s = 0;
    for (int64_t begin = 0; begin < n; begin += CHUNK) {
        int64_t count = n - begin < CHUNK ? n - begin : CHUNK;
        for (int64_t k = 0; k < count; k++) e[k] = v[(begin + k) * stride] - m;
        eg__vecmath_f32(EG__VECMATH_EXP, count, e, e);
        for (int64_t k = 0; k < count; k++) s += e[k];
    }
    return s;
}

/* Rows of one block of contiguous rows (inner == 1), the exponentials of all of them taken in one
 * call: a batch of short rows (the seed model's 32 rows of 10 logits) otherwise pays the vector
 * math's call and its padded tail once per row. The exponentials' bits do not depend on where an
 * element sits in the call (vecmath.h), so a row's bits are those of softmax_f32's row loop. */
enum { SOFTMAX_BLOCK = 2048 }; /* floats of exponentials per call; rows longer go one by one */

/* The maxima of rows [0, rows) of x (r each). */
static void row_maxima_f32(const float *x, int64_t rows, int64_t r, float *maxima) {
    for (int64_t b = 0; b < rows; b++) {
        const float *row = x + b * r;
        float m = -INFINITY;
        for (int64_t k = 0; k < r; k++) m = row[k] > m ? row[k] : m;
        maxima[b] = m;
    }
}

/* e[b r + k] = exp(x[b r + k] - maxima[b]) for rows [0, rows); e may be x. */
static void row_exps_f32(const float *x, int64_t rows, int64_t r, const float *maxima, float *e) {
    for (int64_t b = 0; b < rows; b++)
        for (int64_t k = 0; k < r; k++) e[b * r + k] = x[b * r + k] - maxima[b];
    eg__vecmath_f32(EG__VECMATH_EXP, rows * r, e, e);
}

/* The sum of row b of e, in double, in k order. */
static double row_sum_f32(const float *e, int64_t b, int64_t r) {
    double s = 0;
    for (int64_t k = 0; k < r; k++) s += e[b * r + k];
    return s;
}

static void softmax_rows_f32(const float *x, float *y, int64_t rows, int64_t r, bool log_) {
    int64_t per_block = SOFTMAX_BLOCK / r;
    float maxima[SOFTMAX_BLOCK], e[SOFTMAX_BLOCK];
    for (int64_t first = 0; first < rows; first += per_block) {
        int64_t n = rows - first < per_block ? rows - first : per_block;
        const float *xb = x + first * r;
        float *yb = y + first * r;
        /* y may be x: every row's maximum is taken before any of the block is written */
        row_maxima_f32(xb, n, r, maxima);
        row_exps_f32(xb, n, r, maxima, log_ ? e : yb);
        for (int64_t b = 0; b < n; b++) {
            double s = row_sum_f32(log_ ? e : yb, b, r);
            if (log_) {
                float log_s = (float)log(s);
                for (int64_t k = 0; k < r; k++) yb[b * r + k] = xb[b * r + k] - maxima[b] - log_s;
            } else {
                float inv = (float)(1.0 / s);
                for (int64_t k = 0; k < r; k++) yb[b * r + k] *= inv;
            }
        }
    }
}

static void softmax_f32(const float *x, float *y, int64_t outer, int64_t r, int64_t inner,
                        bool log_) {
    if (inner == 1 && r > 0 && r <= SOFTMAX_BLOCK) {
        softmax_rows_f32(x, y, outer, r, log_);
        return;
    }
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const float *xr = x + o * r * inner + i;
            float *yr = y + o * r * inner + i;
            float m = -INFINITY;
            for (int64_t k = 0; k < r; k++) m = xr[k * inner] > m ? xr[k * inner] : m;
            /* y may be x: each element is read before it is written */
            if (log_) {
                float log_s = (float)log(sum_exp_f32(xr, r, inner, m));
                for (int64_t k = 0; k < r; k++) yr[k * inner] = xr[k * inner] - m - log_s;
            } else {
                for (int64_t k = 0; k < r; k++) yr[k * inner] = xr[k * inner] - m;
                exp_strided_f32(r, yr, inner, yr, inner);
                double s = 0;
                for (int64_t k = 0; k < r; k++) s += yr[k * inner];
                float inv = (float)(1.0 / s);
                for (int64_t k = 0; k < r; k++) yr[k * inner] *= inv;
            }
        }
}

/* f64 rows: libm's exp */
#define SOFTMAX_ROWS(T)                                                                            \
    static void softmax_##T(const T *x, T *y, int64_t outer, int64_t r, int64_t inner,             \
                            bool log_) {                                                           \
        for (int64_t o = 0; o < outer; o++)                                                        \
            for (int64_t i = 0; i < inner; i++) {                                                  \
                const T *xr = x + o * r * inner + i;                                               \
                T *yr = y + o * r * inner + i;                                                     \
                T m = -INFINITY;                                                                   \
                for (int64_t k = 0; k < r; k++) m = xr[k * inner] > m ? xr[k * inner] : m;         \
                double s = 0;                                                                      \
                for (int64_t k = 0; k < r; k++) {                                                  \
                    T e = (T)exp((double)(xr[k * inner] - m));                                     \
                    if (!log_) yr[k * inner] = e;                                                  \
                    s += e;                                                                        \
                }                                                                                  \
                if (log_) {                                                                        \
                    T log_s = (T)log(s);                                                           \
                    for (int64_t k = 0; k < r; k++) yr[k * inner] = xr[k * inner] - m - log_s;     \
                } else {                                                                           \
                    T inv = (T)(1.0 / s);                                                          \
                    for (int64_t k = 0; k < r; k++) yr[k * inner] *= inv;                          \
                }                                                                                  \
            }                                                                                      \
    }
SOFTMAX_ROWS(double)

eg_status eg__cpu_softmax(const eg__kernel_call *call);
eg_status eg__cpu_softmax(const eg__kernel_call *call) {
    const eg_tensor *x0 = call->inputs[0];
    eg_tensor *x = eg__contiguous_temp(x0);
    if (!x) return eg_last_status();
    int axis = call->attrs->axis;
    int64_t outer = 1, inner = 1, r = x->shape[axis];
    for (int d = 0; d < axis; d++) outer *= x->shape[d];
    for (int d = axis + 1; d < x->n_dims; d++) inner *= x->shape[d];
    bool log_ = call->op == EG__OP_LOG_SOFTMAX;
    if (x->dtype == EG_DTYPE_F32)
        softmax_f32(eg__data(x), eg__data(call->output), outer, r, inner, log_);
    else
        softmax_double(eg__data(x), eg__data(call->output), outer, r, inner, log_);
    eg__unref(x);
    return EG_OK;
}

/* ---- sparse softmax cross-entropy: loss_b = logsumexp(x_b) - x_b[label_b] ---- */

static int64_t load_label(const eg_tensor *labels, const char *base, int64_t b) {
    int64_t offset = b * labels->strides[0];
    switch (labels->dtype) {
    case EG_DTYPE_I32:
        return ((const int32_t *)base)[offset];
    case EG_DTYPE_I64:
        return ((const int64_t *)base)[offset];
    default:
        return ((const uint8_t *)base)[offset];
    }
}

/* The sum of exp(row[k] - m): the f32 one through the vector math, as softmax_f32. */
static double sum_exp_row_float(const float *row, int64_t n, float m) {
    return sum_exp_f32(row, n, 1, m);
}
static double sum_exp_row_double(const double *row, int64_t n, double m) {
    double s = 0;
    for (int64_t k = 0; k < n; k++) s += exp(row[k] - m);
    return s;
}

#define XENT_ROWS(T)                                                                               \
    static eg_status xent_##T(const eg_tensor *logits, const eg_tensor *labels, T *loss) {         \
        int64_t batch = logits->shape[0], classes = logits->shape[1];                              \
        const T *x = eg__data(logits);                                                             \
        const char *label_base = eg__data(labels);                                                 \
        for (int64_t b = 0; b < batch; b++) {                                                      \
            int64_t label = load_label(labels, label_base, b);                                     \
            if (label < 0 || label >= classes)                                                     \
                return eg__error(EG_ERR_INVALID_ARGUMENT,                                          \
                                 "sparse_softmax_cross_entropy: label %lld of row %lld is out "    \
                                 "of range [0, %lld)",                                             \
                                 (long long)label, (long long)b, (long long)classes);              \
            const T *row = x + b * classes;                                                        \
            T m = -INFINITY;                                                                       \
            for (int64_t k = 0; k < classes; k++) m = row[k] > m ? row[k] : m;                     \
            double s = sum_exp_row_##T(row, classes, m);                                           \
            loss[b] = (T)(log(s) + (double)m - (double)row[label]);                                \
        }                                                                                          \
        return EG_OK;                                                                              \
    }
XENT_ROWS(float)
XENT_ROWS(double)

/* The f32 rows in blocks, the exponentials of a block in one call (as softmax_rows_f32): the
 * same bits as xent_float's row loop, which takes rows longer than a block. */
static eg_status xent_blocks_float(const eg_tensor *logits, const eg_tensor *labels, float *loss) {
    int64_t batch = logits->shape[0], classes = logits->shape[1];
    if (classes < 1 || classes > SOFTMAX_BLOCK) return xent_float(logits, labels, loss);
    const float *x = eg__data(logits);
    const char *label_base = eg__data(labels);
    int64_t per_block = SOFTMAX_BLOCK / classes;
    float maxima[SOFTMAX_BLOCK], e[SOFTMAX_BLOCK];
    for (int64_t first = 0; first < batch; first += per_block) {
        int64_t n = batch - first < per_block ? batch - first : per_block;
        const float *xb = x + first * classes;
        for (int64_t b = first; b < first + n; b++) {
            int64_t label = load_label(labels, label_base, b);
            if (label < 0 || label >= classes)
                return eg__error(EG_ERR_INVALID_ARGUMENT,
                                 "sparse_softmax_cross_entropy: label %lld of row %lld is out "
                                 "of range [0, %lld)",
                                 (long long)label, (long long)b, (long long)classes);
        }
        row_maxima_f32(xb, n, classes, maxima);
        row_exps_f32(xb, n, classes, maxima, e);
        for (int64_t b = 0; b < n; b++) {
            double s = row_sum_f32(e, b, classes);
            int64_t label = load_label(labels, label_base, first + b);
            loss[first + b] = (float)(log(s) + (double)maxima[b] - (double)xb[b * classes + label]);
        }
    }
    return EG_OK;
}

eg_status eg__cpu_sparse_softmax_cross_entropy(const eg__kernel_call *call);
eg_status eg__cpu_sparse_softmax_cross_entropy(const eg__kernel_call *call) {
    eg_tensor *logits = eg__contiguous_temp(call->inputs[0]);
    if (!logits) return eg_last_status();
    eg_status status = logits->dtype == EG_DTYPE_F32
                           ? xent_blocks_float(logits, call->inputs[1], eg__data(call->output))
                           : xent_double(logits, call->inputs[1], eg__data(call->output));
    eg__unref(logits);
    return status;
}
