/* Internal: int8 products for the CPU kernels of dense_int8 and conv2d_int8 (quantized.c).
 *
 * C (M, N) = activation(a_scale * w_scale[n] * (sum_k (A[m, k] - a_zero) * W[k, n]) + bias[n])
 *
 * A is u8 with one scale and zero point for the whole tensor (asymmetric, so a ReLU's output uses
 * all 256 steps); W is i8, symmetric with one scale per output column. The sums are exact in
 * int32 (|W| <= 127, K < 2^16 keeps them in range), so every instruction set gives the same
 * integers, and the float epilogue is one code for all of them: results are bitwise the same on
 * every CPU path and thread count.
 *
 * Paths (eg__cpu_active_level): AVX2 multiplies u8 by i8 pairwise into saturating int16
 * (vpmaddubsw), which is exact only while |W| <= 63 — weights quantized to 7 bits, the pitfall
 * FBGEMM and onnxruntime document; 8-bit weights there, and every CPU without AVX2, take the
 * portable loop. */
#ifndef EAGLE_SRC_BACKEND_CPU_GEMM_INT8_H
#define EAGLE_SRC_BACKEND_CPU_GEMM_INT8_H

#include <stdbool.h>
#include <stdint.h>

#include "eagle/status.h"

/* Columns of W per packed panel and inner elements per group (one 32-bit lane holds 4 bytes). */
enum { EG_INT8_PANEL = 16, EG_INT8_GROUP = 4 };

/* W packed for the kernels: panel p, group g holds W[4g .. 4g+3, 16p .. 16p+15] as 16 columns of
 * 4 consecutive bytes; missing rows and columns are zero. */
typedef struct eg__int8_weights {
    int64_t k, n;
    int64_t groups; /* ceil(k / 4) */
    int64_t panels; /* ceil(n / 16) */
    int8_t *packed;
    int32_t *column_sums; /* panels * 16: sum over k of W[k, n] (0 past n) */
    bool seven_bit;       /* every |W| <= 63: the AVX2 path is exact */
} eg__int8_weights;

/* Packs w (k, n), rows row_stride elements apart. EG_ERR_OUT_OF_MEMORY (with a message). */
eg_status eg__int8_weights_pack(const int8_t *w, int64_t k, int64_t n, int64_t row_stride,
                                eg__int8_weights *out);
void eg__int8_weights_free(eg__int8_weights *w);

/* One tensor's quantization: x ~ scale * (q - zero), q in [0, 255]. */
typedef struct eg__int8_activation {
    float scale;
    int32_t zero;
} eg__int8_activation;

/* The parameters that map [lo, hi] (widened to hold 0, so that 0 is exact: zero padding and
 * ReLU's zeros) onto [0, 255]. A range of one point gives scale 1. */
eg__int8_activation eg__int8_activation_of_range(float lo, float hi);
/* The smallest and largest of x[0 .. n) (NaN ignored); 0 and 0 for n == 0. */
void eg__int8_min_max(const float *x, int64_t n, float *lo, float *hi);
/* q[i] = round(clamp(x[i] * (1 / scale) + zero, 0, 255)) (to nearest even; NaN gives 0) for
 * i < n, then q[n .. n_padded) = zero. */
void eg__int8_quantize(const float *x, int64_t n, int64_t n_padded, eg__int8_activation q,
                       uint8_t *out);

/* The epilogue's activation: 0 none, 1 relu, 2 sigmoid, 3 tanh (eg_activation's numbering). */
typedef struct eg__int8_epilogue {
    eg__int8_activation a;
    const float *w_scale; /* n */
    const float *bias;    /* n, or NULL */
    int activation;
} eg__int8_epilogue;

/* Rows [0, m) of C = epilogue(A · W): A is m rows of w->groups * 4 bytes, lda apart (the
 * padding past k holds anything: W is zero there); C rows ldc floats apart. Single-threaded:
 * callers split rows across threads. */
void eg__int8_gemm(int64_t m, const uint8_t *a, int64_t lda, const eg__int8_weights *w,
                   const eg__int8_epilogue *epilogue, float *c, int64_t ldc);

/* For tests: force the portable loops, of the products and of eg__int8_quantize (true), or let
 * the CPU level decide (false). */
void eg__int8_gemm_force_portable(bool portable);

#endif
