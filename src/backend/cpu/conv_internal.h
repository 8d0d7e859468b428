/* Internal: the convolution geometry shared by conv.c (dispatch, im2col + GEMM, the small direct
 * kernel) and conv_avx2.c (Eagle's own register-blocked AVX2 kernels). */
#ifndef EAGLE_SRC_BACKEND_CPU_CONV_INTERNAL_H
#define EAGLE_SRC_BACKEND_CPU_CONV_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/cpu/kernels.h"

typedef struct eg__conv_geometry {
    eg__image x, y;            /* the convolution's input and output (y also for dy) */
    int64_t kh, kw, cg, og, k; /* filter; cg/og channels per group; k = kh * kw * cg */
    int64_t groups, p, out_c;  /* p = output pixels per image */
    int64_t stride_h, stride_w, dil_h, dil_w, pad_t, pad_l; /* pads may be negative (flipped) */
    bool first;                                             /* NCHW */
    eg_dtype dtype;
    size_t esize;
} eg__conv_geometry;

/* The filter gradient sums over images in this many fixed chunks at most (parallel work). */
#define EG_CONV_FILTER_CHUNKS 16

/* ---- conv_avx2.c: every function below executes AVX2 and FMA instructions; call them only
 * when eg__conv_cpu_has_avx2_fma() says so. They need f32, NHWC, y (and dy) contiguous NHWC,
 * w contiguous HWIO; x may have any strides. p > 0 and k > 0. ---- */

/* Whether this build has the AVX2 kernels (x86-64 with a compiler that accepts -mavx2 -mfma).
 * Call it only after the CPU check too: this file is compiled for AVX2. */
bool eg__conv_avx2_built(void);

/* y = conv(x, w), in parallel over (image, band of output rows) tasks. EG_OK or out of memory
 * (error set, naming `what`). */
eg_status eg__conv_avx2_forward(const eg__conv_geometry *g, const float *x, const float *w,
                                float *y, const char *what);

/* Floats of scratch space eg__conv_avx2_filter_chunk needs (one per concurrent caller). */
size_t eg__conv_avx2_filter_scratch(const eg__conv_geometry *g);

/* partial (k x out_c, HWIO) += the filter gradient of images [b0, b1): sum over their output
 * pixels of x at each tap times dy, always in the same order. */
void eg__conv_avx2_filter_chunk(const eg__conv_geometry *g, const float *x, const float *dy,
                                float *partial, int64_t b0, int64_t b1, float *scratch);

#endif
