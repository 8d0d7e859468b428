/* Internal: the convolution geometry shared by conv.c (dispatch, im2col + GEMM, the small direct
 * kernel, the padded input bands) and Eagle's own register-blocked implicit-GEMM kernels,
 * conv_avx2.c (AVX2 + FMA) and conv_avx512.c (AVX-512). */
#ifndef EAGLE_SRC_BACKEND_CPU_CONV_INTERNAL_H
#define EAGLE_SRC_BACKEND_CPU_CONV_INTERNAL_H

#include <stdatomic.h>
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

/* The implicit-GEMM filter gradients (AVX2 and AVX-512) walk each image in bands of about this
 * many output pixels and each band in sweeps of about EG_CONV_FILTER_SWEEP_PIXELS, summing each
 * sweep from zero before adding it into the partial gradient: both kernels cut the same sweeps,
 * so that they give the same bits. bench_conv --batch 8, best call: 128 beat 64 and 256 on
 * conv2-conv4 (a sweep's dy rows and the input they read stay in L1). */
#define EG_CONV_FILTER_BAND_PIXELS  256
#define EG_CONV_FILTER_SWEEP_PIXELS 128

/* ---- the zero-padded input band (conv.c), shared by the AVX2 and AVX-512 kernels: a task of
 * the implicit GEMM first copies the input rows its band of output rows reads into a buffer with
 * the padding written out as zeros, so that every tap of every output pixel is a valid address
 * and strides, dilation and strided inputs become plain pointer offsets. ---- */

typedef struct eg__conv_band {
    int64_t rows;        /* output rows per band */
    int64_t n_bands;     /* bands per image */
    int64_t in_rows_max; /* padded input rows a full band reads */
    int64_t wp, c;       /* padded columns; channels (all groups) */
    int64_t row_step;    /* floats between output rows in the padded buffer: stride_h rows */
    int64_t col_step;    /* floats between output columns: stride_w pixels */
} eg__conv_band;

/* The bands of about band_pixels output pixels (whole output rows, at least one) of g. */
eg__conv_band eg__conv_band_layout(const eg__conv_geometry *g, int64_t band_pixels);

/* Floats of one band's padded input (l->in_rows_max rows of wp pixels of c channels). */
size_t eg__conv_band_floats(const eg__conv_band *l);

/* Padded input rows that n_rows output rows read. */
int64_t eg__conv_band_in_rows(const eg__conv_geometry *g, int64_t n_rows);

/* pad[(r * wp + col) * c + ch] = x[b, first_row + r - pad_t, col - pad_l, ch] for the n_rows
 * padded rows from first_row (padded coordinates), 0 outside the image. f32. */
void eg__conv_pad_band(const eg__conv_geometry *g, const eg__conv_band *l, const float *x,
                       int64_t b, int64_t first_row, int64_t n_rows, float *pad);

/* The filter w (k x out_c, HWIO) packed per group and block of nr output channels: block
 * (grp, ob) is the (k x nr) matrix at dst + (grp * n_ob + ob) * k * nr, n_ob = ceil(og / nr),
 * zeros past og. */
void eg__conv_pack_filter(const eg__conv_geometry *g, const float *w, int64_t nr, float *dst);

/* Offsets in a padded band of the filter taps (i, j): ((i * dil_h) * wp + j * dil_w) * c, kh * kw
 * of them, in a new malloc'ed array (NULL when out of memory). */
int64_t *eg__conv_tap_offsets(const eg__conv_geometry *g, const eg__conv_band *l);

/* The implicit-GEMM forwards' common run (conv_avx2.c, conv_avx512.c): packs w in blocks of nr
 * output channels (eg__conv_pack_filter) into *wpack and the tap offsets of layout l into *taps,
 * runs `tasks` (eg__parallel_for, one task per band of every image) over `job`, which reads
 * them, then frees both. A task sets *failed when it runs out of memory. Errors name `what`. */
eg_status eg__conv_run_forward(const eg__conv_geometry *g, const eg__conv_band *l, const float *w,
                               int64_t nr, const float **wpack, const int64_t **taps,
                               void (*tasks)(void *job, int64_t begin, int64_t end), void *job,
                               atomic_bool *failed, const char *what);

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

/* ---- conv_avx512.c: every function below executes AVX-512 instructions; call them only when
 * the dispatch level is EG__CPU_AVX512. The same contracts as the AVX2 kernels above, with the
 * same results bit for bit (each output is the same sequence of multiply-adds; see the file).
 * ---- */

/* Whether this build has the AVX-512 kernels (x86-64 with a compiler that accepts the flags). */
bool eg__conv_avx512_built(void);

/* y = conv(x, w), in parallel over (image, band of output rows) tasks. EG_OK or out of memory
 * (error set, naming `what`). */
eg_status eg__conv_avx512_forward(const eg__conv_geometry *g, const float *x, const float *w,
                                  float *y, const char *what);

/* Whether eg__conv_avx512_filter_chunk computes g's filter gradient well: its vectors run along
 * the input channels, so it wants at least 16 per group (the AVX2 kernel takes the others). */
bool eg__conv_avx512_filter_fits(const eg__conv_geometry *g);

/* Floats of scratch space eg__conv_avx512_filter_chunk needs (one per concurrent caller). */
size_t eg__conv_avx512_filter_scratch(const eg__conv_geometry *g);

/* Floats of one chunk's partial gradient in the AVX-512 kernels' transposed layout (per group,
 * vector of 16 input channels of a tap and output channel, 16 floats). Partials must be 64-byte
 * aligned. */
size_t eg__conv_avx512_filter_partial_floats(const eg__conv_geometry *g);

/* partial (transposed, as above) = the filter gradient of images [b0, b1), summed as
 * eg__conv_avx2_filter_chunk sums it into a zeroed partial (the same bits). */
void eg__conv_avx512_filter_chunk(const eg__conv_geometry *g, const float *x, const float *dy,
                                  float *partial, int64_t b0, int64_t b1, float *scratch);

/* Units of eg__conv_avx512_filter_sum's work: groups x vectors of input channels. */
int64_t eg__conv_avx512_filter_units(const eg__conv_geometry *g);

/* dw (HWIO) = partials[0] + partials[1] + ... + partials[n_parts - 1], in that order (the
 * chunks' transposed partials, eg__conv_avx512_filter_partial_floats apart), for the units
 * [begin, end). */
void eg__conv_avx512_filter_sum(const eg__conv_geometry *g, const float *partials, int64_t n_parts,
                                float *dw, int64_t begin, int64_t end);

#endif
