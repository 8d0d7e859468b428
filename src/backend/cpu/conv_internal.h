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
 * padded rows from first_row (padded coordinates), 0 outside the image. pad is f32; x is f32, or
 * bf16 / f16 (g->dtype), widened as it is copied. */
void eg__conv_pad_band(const eg__conv_geometry *g, const eg__conv_band *l, const void *x, int64_t b,
                       int64_t first_row, int64_t n_rows, float *pad);

/* dst[offset ..] (bf16 or f16: dtype) = the n floats of src, each rounded once. */
void eg__conv_round_into(eg_dtype dtype, const float *src, int64_t n, void *dst, int64_t offset);

/* The n elements of dy (g->dtype) from offset as f32: dy itself for f32, else widened into
 * buffer. */
const float *eg__conv_sweep_dy(const eg__conv_geometry *g, const void *dy, int64_t offset,
                               int64_t n, float *buffer);

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
 * when eg__conv_cpu_has_avx2_fma() says so. They need NHWC, y (and dy) contiguous NHWC, w
 * contiguous HWIO; x may have any strides. p > 0 and k > 0. x, y and dy are f32, or bf16 / f16
 * (g->dtype: conv_lowp.c), which they widen as they copy bands of them and round once as they
 * write each band's output (the same sums as on widened copies); w and the filter-gradient
 * partials are f32. ---- */

/* Whether this build has the AVX2 kernels (x86-64 with a compiler that accepts -mavx2 -mfma).
 * Call it only after the CPU check too: this file is compiled for AVX2. */
bool eg__conv_avx2_built(void);

/* y = conv(x, w), in parallel over (image, band of output rows) tasks. EG_OK or out of memory
 * (error set, naming `what`). */
eg_status eg__conv_avx2_forward(const eg__conv_geometry *g, const void *x, const float *w, void *y,
                                const char *what);

/* Floats of scratch space eg__conv_avx2_filter_chunk needs (one per concurrent caller). */
size_t eg__conv_avx2_filter_scratch(const eg__conv_geometry *g);

/* partial (k x out_c, HWIO) += the filter gradient of images [b0, b1): sum over their output
 * pixels of x at each tap times dy, always in the same order. */
void eg__conv_avx2_filter_chunk(const eg__conv_geometry *g, const void *x, const void *dy,
                                float *partial, int64_t b0, int64_t b1, float *scratch);

/* ---- conv_avx512.c: every function below executes AVX-512 instructions; call them only when
 * the dispatch level is EG__CPU_AVX512. The same contracts as the AVX2 kernels above, with the
 * same results bit for bit (each output is the same sequence of multiply-adds; see the file).
 * ---- */

/* Whether this build has the AVX-512 kernels (x86-64 with a compiler that accepts the flags). */
bool eg__conv_avx512_built(void);

/* y = conv(x, w), in parallel over (image, band of output rows) tasks. EG_OK or out of memory
 * (error set, naming `what`). */
eg_status eg__conv_avx512_forward(const eg__conv_geometry *g, const void *x, const float *w,
                                  void *y, const char *what);

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
void eg__conv_avx512_filter_chunk(const eg__conv_geometry *g, const void *x, const void *dy,
                                  float *partial, int64_t b0, int64_t b1, float *scratch);

/* Units of eg__conv_avx512_filter_sum's work: groups x vectors of input channels. */
int64_t eg__conv_avx512_filter_units(const eg__conv_geometry *g);

/* dw (HWIO) = partials[0] + partials[1] + ... + partials[n_parts - 1], in that order (the
 * chunks' transposed partials, eg__conv_avx512_filter_partial_floats apart), for the units
 * [begin, end). */
void eg__conv_avx512_filter_sum(const eg__conv_geometry *g, const float *partials, int64_t n_parts,
                                float *dw, int64_t begin, int64_t end);

/* ---- conv.c's pieces that the low-precision convolutions (conv_lowp.c) share ---- */

/* The geometry of a convolution of x giving y with a filter of shape w_shape (HWIO) under attrs
 * (for the input gradient, x is dx's and y is dy's tensor). */
eg__conv_geometry eg__conv_geometry_of(const eg_tensor *x, const eg_tensor *y,
                                       const int64_t *w_shape, const eg__attrs *attrs);

/* The algorithm eg__conv_set_algorithm forced (0: choose by shape). */
int eg__conv_forced_algorithm(void);

/* f = the stride-1 input gradient of g as a forward convolution of dy with the flipped filter
 * (see conv.c); false when g's strides are not 1. */
bool eg__conv_flip_geometry(const eg__conv_geometry *g, eg__conv_geometry *f);

/* eg__conv_flip_geometry where conv.c's own choice takes the flipped form for the input gradient
 * (enough channels, not too much padding; false otherwise: col2im). */
bool eg__conv_flip_preferred(const eg__conv_geometry *g, eg__conv_geometry *f);

/* w (KH, KW, cg, O) -> (KH, KW, og, C): flipped in space, channels swapped within each group
 * (elements of g->esize bytes). */
void eg__conv_flip_filter(const eg__conv_geometry *g, const void *w, void *out);

/* The filter gradients' kept partials buffer: at least `bytes` (64-byte aligned, contents
 * undefined), NULL when out of memory; hand it back with eg__conv_partials_give. */
char *eg__conv_partials_take(size_t bytes);
void eg__conv_partials_give(char *partials, size_t bytes);

/* conv_lowp.c: per-task scratch of at least `bytes` (64-byte aligned, contents undefined) from a
 * few kept buffers, NULL when out of memory; hand it back with eg__conv_scratch_give.
 * Thread-safe. */
char *eg__conv_scratch_take(size_t bytes);
void eg__conv_scratch_give(char *scratch, size_t bytes);
/* Frees the kept scratch buffers (eg__cpu_conv_release_cached). Thread-safe. */
void eg__conv_scratch_release(void);

/* Whether conv_avx512.c's or conv_avx2.c's implicit GEMM computes g (any of f32, bf16, f16:
 * those kernels widen the low-precision formats themselves); the two below need it. */
bool eg__conv_implicit_fits(const eg__conv_geometry *g);

/* y (g->dtype) = conv(x (g->dtype), w (f32, contiguous HWIO)) by the implicit GEMM. */
eg_status eg__conv_implicit_forward(const eg__conv_geometry *g, const void *x, const float *w,
                                    void *y, const char *what);

/* dw (f32, k x out_c HWIO) = the filter gradient of x and dy (g->dtype; dy contiguous) by the
 * implicit GEMM, over conv.c's fixed chunks of images. */
eg_status eg__conv_implicit_filter(const eg__conv_geometry *g, const void *x, const void *dy,
                                   float *dw, const char *what);

/* The f32/f64 kernels' entry points (conv.c). */
eg_status eg__cpu_conv2d(const eg__kernel_call *call);
eg_status eg__cpu_conv2d_backward_input(const eg__kernel_call *call);
eg_status eg__cpu_conv2d_backward_filter(const eg__kernel_call *call);

/* ---- conv_lowp.c: bf16 and f16 (the same dtype in and out, f32 accumulation, each output
 * rounded once): AMX where it applies (conv_amx.c), else the f32 kernels on widened copies. ---- */
eg_status eg__conv_lowp_forward(const eg__kernel_call *call);
eg_status eg__conv_lowp_backward_input(const eg__kernel_call *call);
eg_status eg__conv_lowp_backward_filter(const eg__kernel_call *call);

/* ---- conv_amx.c: bf16 NHWC convolutions on AMX tiles. Every function below but
 * eg__conv_amx_built executes AMX, AVX-512 and AVX512-BF16 instructions: call them only at the
 * dispatch level EG__CPU_AVX512 with eg__cpu_has_avx512_bf16() and eg__cpu_amx_usable() true. bf16
 * only; x (and dy) NHWC with any strides whose channel stride is 1, y, dy and w contiguous (NHWC,
 * HWIO). ---- */

/* Whether this build has the AMX kernels (x86-64 with a compiler that accepts the flags). */
bool eg__conv_amx_built(void);

/* Whether eg__conv_amx_forward and eg__conv_amx_filter compute g (stride 1, NHWC, bf16). */
bool eg__conv_amx_fits(const eg__conv_geometry *g);

/* y = conv(x, w), in parallel over (image, band of output rows) tasks. EG_OK or out of memory
 * (error set, naming `what`). */
eg_status eg__conv_amx_forward(const eg__conv_geometry *g, const uint16_t *x, const uint16_t *w,
                               uint16_t *y, const char *what);

/* dw (HWIO) = the filter gradient of x and dy, summed over fixed chunks of images
 * (EG_CONV_FILTER_CHUNKS) in a fixed order. *nonfinite is set when x holds an infinity or NaN:
 * dw is then not computed (the kernel multiplies some inputs by zeros of dy that a convolution
 * never reads, so it would turn them into NaN). EG_OK or out of memory. */
eg_status eg__conv_amx_filter(const eg__conv_geometry *g, const uint16_t *x, const uint16_t *dy,
                              uint16_t *dw, bool *nonfinite, const char *what);

#endif
