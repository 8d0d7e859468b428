/* CPU 2-d convolution: forward, gradient with respect to the input (also the transposed
 * convolution) and with respect to the filter, for NHWC and NCHW images of any strides and HWIO
 * filters, f32 and f64 (bf16 and f16 go to conv_lowp.c).
 *
 * Three algorithms, chosen per call (conv_use_avx512, conv_use_avx2, conv_use_direct;
 * bench/conv measures them):
 * - Eagle's own implicit GEMM over zero-padded input bands (the bands here, shared through
 *   conv_internal.h), for f32 NHWC with at least 8 output channels per group: conv_avx512.c
 *   (14 x 32 register blocks) at the dispatch level EG__CPU_AVX512, conv_avx2.c (6 x 16) at
 *   EG__CPU_AVX2, with the same bits (checked at run time: the library is built for baseline
 *   x86-64). The fastest on every layer of the CNN, forward, input gradient (stride 1: a
 *   flipped-filter forward) and filter gradient alike. The AVX-512 filter gradient wants 16
 *   input channels per group; below that the AVX2 one runs.
 * - im2col + GEMM (OpenBLAS, single-threaded like matmul.c): a tile of output pixels is unrolled
 *   into a (pixels, KH*KW*C_in/groups) column matrix and multiplied with the filter viewed as a
 *   (KH*KW*C_in/groups, C_out) matrix. Everything else: f64, NCHW, few output channels, CPUs
 *   without AVX2, and the input gradient of strided convolutions (col2im).
 * - A small direct AVX2 kernel (one output pixel at a time), kept for comparison
 *   (eg__conv_set_algorithm(2)); the implicit GEMM superseded it.
 *
 * Results never depend on the thread count: work is cut into fixed tiles (TILE_PIXELS output
 * pixels of one image; for the filter gradient, EG_CONV_FILTER_CHUNKS fixed groups of images whose
 * partial sums are added in a fixed order), and each tile is the same computation whichever
 * thread runs it. */
#include <cblas.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define EG_CONV_X86 1
#endif

#include "backend/cpu/conv_internal.h"
#include "backend/cpu/kernels.h"
#include "base/cpu_features.h"
#include "base/error.h"

/* Rows (output pixels, counted across the images of the batch) per im2col tile: enough that the
 * column matrix (rows x K) fills COL_BUDGET elements (it then stays within a core's L2) but at
 * least MIN_TILE_ROWS, so that every GEMM has a useful size; fixed by the shapes alone. */
#define COL_BUDGET    65536
#define MIN_TILE_ROWS 64
#define MAX_TILE_ROWS 4096
/* Without the implicit GEMM, the direct kernels (forward and filter gradient) handle K =
 * KH*KW*C_in/groups up to this (bench/conv: they beat im2col+GEMM for the 3x3x1 first layer,
 * lose from 3x3x32 on). */
#define DIRECT_MAX_K 32
/* Stride-1 input gradients run as a flipped-filter convolution from this many input channels
 * per group (below, the col2im path's wider GEMM wins). */
#define FLIPPED_MIN_CHANNELS 8

/* 0: choose by shape; 1: always im2col + GEMM (what a CPU without AVX2 runs); 2: direct where it
 * applies; 3: the input gradient by col2im even at stride 1; 4: the AVX2 implicit-GEMM kernels
 * (conv_avx2.c) wherever they apply, even on a CPU with AVX-512; 5: the AVX-512 ones
 * (conv_avx512.c) wherever they apply (at the level EG__CPU_AVX512; the AVX2 kernels where the
 * AVX-512 filter gradient does not fit); 6 and 7 are for bf16 / f16 (conv_lowp.c: AMX where it
 * applies; the f32 kernels on widened copies everywhere) and choose by shape here. For bench/conv
 * and the tests. */
static int forced_algorithm_code;
void eg__conv_set_algorithm(int algorithm);
void eg__conv_set_algorithm(int algorithm) {
    forced_algorithm_code = algorithm;
}

int eg__conv_forced_algorithm(void) {
    return forced_algorithm_code;
}

/* The forced choice among this file's algorithms. */
static int f32_algorithm(void) {
    return forced_algorithm_code >= 6 ? 0 : forced_algorithm_code;
}

typedef eg__conv_geometry conv_geometry;

static conv_geometry geometry(const eg_tensor *x, const eg_tensor *y, const int64_t *w_shape,
                              const eg__attrs *attrs) {
    const eg__window *win = &attrs->window;
    conv_geometry g;
    g.first = win->channels_first;
    g.x = eg__image_of(x, g.first);
    g.y = eg__image_of(y, g.first);
    g.kh = w_shape[0];
    g.kw = w_shape[1];
    g.cg = w_shape[2];
    g.out_c = w_shape[3];
    g.groups = win->groups;
    g.og = g.out_c / g.groups;
    g.k = g.kh * g.kw * g.cg;
    g.p = g.y.h * g.y.w;
    g.stride_h = win->stride[0];
    g.stride_w = win->stride[1];
    g.dil_h = win->dilation[0];
    g.dil_w = win->dilation[1];
    g.pad_t = win->pad[0];
    g.pad_l = win->pad[2];
    g.dtype = x->dtype;
    g.esize = eg_dtype_size(x->dtype);
    return g;
}

eg__conv_geometry eg__conv_geometry_of(const eg_tensor *x, const eg_tensor *y,
                                       const int64_t *w_shape, const eg__attrs *attrs) {
    return geometry(x, y, w_shape, attrs);
}

/* Row-major C (m x n) = op(A) op(B) + beta C. */
static void gemm(eg_dtype dtype, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void *a,
                 int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc) {
    enum CBLAS_TRANSPOSE ta_ = ta ? CblasTrans : CblasNoTrans, tb_ = tb ? CblasTrans : CblasNoTrans;
    if (dtype == EG_DTYPE_F32)
        cblas_sgemm(CblasRowMajor, ta_, tb_, (int)m, (int)n, (int)k, 1.0f, a, (int)lda, b, (int)ldb,
                    (float)beta, c, (int)ldc);
    else
        cblas_dgemm(CblasRowMajor, ta_, tb_, (int)m, (int)n, (int)k, 1.0, a, (int)lda, b, (int)ldb,
                    beta, c, (int)ldc);
}

static int64_t tile_rows(const conv_geometry *g) {
    int64_t rows = COL_BUDGET / (g->k > 0 ? g->k : 1);
    return rows < MIN_TILE_ROWS ? MIN_TILE_ROWS : rows > MAX_TILE_ROWS ? MAX_TILE_ROWS : rows;
}

/* The column matrix of output rows q0 .. q0+rows (q = image * P + pixel, possibly spanning
 * images), group grp: row r holds, for every filter tap (i, j) and channel c of the group, x at
 * that tap (0 in the padding). */
static void im2col(const conv_geometry *g, const char *x, int64_t grp, int64_t q0, int64_t rows,
                   char *col) {
    size_t es = g->esize, cg_bytes = (size_t)g->cg * es;
    char *dst = col;
    for (int64_t r = 0; r < rows; r++) {
        int64_t q = q0 + r, b = q / g->p, p = q % g->p, oh = p / g->y.w, ow = p % g->y.w;
        const char *xb = x + (size_t)(b * g->x.sn + grp * g->cg * g->x.sc) * es;
        for (int64_t i = 0; i < g->kh; i++) {
            int64_t ih = oh * g->stride_h - g->pad_t + i * g->dil_h;
            if (ih < 0 || ih >= g->x.h) {
                memset(dst, 0, (size_t)g->kw * cg_bytes);
                dst += (size_t)g->kw * cg_bytes;
                continue;
            }
            for (int64_t j = 0; j < g->kw; j++, dst += cg_bytes) {
                int64_t iw = ow * g->stride_w - g->pad_l + j * g->dil_w;
                if (iw < 0 || iw >= g->x.w) {
                    memset(dst, 0, cg_bytes);
                    continue;
                }
                const char *src = xb + (size_t)(ih * g->x.sh + iw * g->x.sw) * es;
                if (g->cg == 1 && es == 4) { /* one channel (a first layer): an inlined copy */
                    memcpy(dst, src, 4);
                } else if (g->x.sc == 1 || g->cg == 1) {
                    memcpy(dst, src, cg_bytes);
                } else if (es == 4) {
                    for (int64_t c = 0; c < g->cg; c++)
                        memcpy(dst + c * 4, src + (size_t)(c * g->x.sc) * 4, 4);
                } else {
                    for (int64_t c = 0; c < g->cg; c++)
                        memcpy(dst + c * 8, src + (size_t)(c * g->x.sc) * 8, 8);
                }
            }
        }
    }
}

/* The adjoint of im2col: adds the column matrix of rows q0 .. q0+rows into dx (group grp). */
#define COL2IM(T, suffix)                                                                          \
    static void col2im_##suffix(const conv_geometry *g, T *dx, int64_t grp, int64_t q0,            \
                                int64_t rows, const T *col) {                                      \
        int64_t sc = g->x.sc;                                                                      \
        for (int64_t r = 0; r < rows; r++) {                                                       \
            int64_t q = q0 + r, b = q / g->p, p = q % g->p, oh = p / g->y.w, ow = p % g->y.w;      \
            T *xb = dx + b * g->x.sn + grp * g->cg * sc;                                           \
            const T *src = col + r * g->k;                                                         \
            for (int64_t i = 0; i < g->kh; i++) {                                                  \
                int64_t ih = oh * g->stride_h - g->pad_t + i * g->dil_h;                           \
                if (ih < 0 || ih >= g->x.h) continue;                                              \
                for (int64_t j = 0; j < g->kw; j++) {                                              \
                    int64_t iw = ow * g->stride_w - g->pad_l + j * g->dil_w;                       \
                    if (iw < 0 || iw >= g->x.w) continue;                                          \
                    T *d = xb + ih * g->x.sh + iw * g->x.sw;                                       \
                    const T *s = src + (i * g->kw + j) * g->cg;                                    \
                    if (sc == 1)                                                                   \
                        for (int64_t c = 0; c < g->cg; c++) d[c] += s[c];                          \
                    else                                                                           \
                        for (int64_t c = 0; c < g->cg; c++) d[c * sc] += s[c];                     \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }
COL2IM(float, f32)
COL2IM(double, f64)
#undef COL2IM

static void col2im(const conv_geometry *g, void *dx, int64_t grp, int64_t q0, int64_t rows,
                   const void *col) {
    if (g->dtype == EG_DTYPE_F32)
        col2im_f32(g, dx, grp, q0, rows, col);
    else
        col2im_f64(g, dx, grp, q0, rows, col);
}

/* ---- the zero-padded input bands of the implicit-GEMM kernels (conv_internal.h) ---- */

eg__conv_band eg__conv_band_layout(const conv_geometry *g, int64_t band_pixels) {
    eg__conv_band l;
    l.rows = band_pixels / g->y.w;
    if (l.rows < 1) l.rows = 1;
    if (l.rows > g->y.h) l.rows = g->y.h;
    l.n_bands = (g->y.h + l.rows - 1) / l.rows;
    l.in_rows_max = eg__conv_band_in_rows(g, l.rows);
    l.wp = (g->y.w - 1) * g->stride_w + g->dil_w * (g->kw - 1) + 1;
    l.c = g->x.c;
    l.row_step = g->stride_h * l.wp * l.c;
    l.col_step = g->stride_w * l.c;
    return l;
}

size_t eg__conv_band_floats(const eg__conv_band *l) {
    return (size_t)(l->in_rows_max * l->wp * l->c);
}

int64_t eg__conv_band_in_rows(const conv_geometry *g, int64_t n_rows) {
    return (n_rows - 1) * g->stride_h + g->dil_h * (g->kh - 1) + 1;
}

/* n values of x (f32, bf16 or f16: g->dtype) from src, src_step apart, into dst as f32. */
static void widen_run(eg_dtype dtype, const void *src, int64_t src_step, int64_t n, float *dst) {
    if (dtype == EG_DTYPE_F32) {
        const float *s = src;
        if (src_step == 1)
            memcpy(dst, s, (size_t)n * sizeof(float));
        else
            for (int64_t i = 0; i < n; i++) dst[i] = s[i * src_step];
        return;
    }
    const uint16_t *s = src;
    if (src_step == 1) {
        if (dtype == EG_DTYPE_BF16)
            eg_bf16_to_f32(s, dst, (size_t)n);
        else
            eg_f16_to_f32(s, dst, (size_t)n);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        if (dtype == EG_DTYPE_BF16)
            eg_bf16_to_f32(s + i * src_step, dst + i, 1);
        else
            eg_f16_to_f32(s + i * src_step, dst + i, 1);
    }
}

void eg__conv_pad_band(const conv_geometry *g, const eg__conv_band *l, const void *x, int64_t b,
                       int64_t first_row, int64_t n_rows, float *pad) {
    const eg__image *xi = &g->x;
    int64_t c = l->c, wp = l->wp;
    int64_t col_lo = g->pad_l < 0 ? 0 : g->pad_l > wp ? wp : g->pad_l;
    int64_t col_hi = g->pad_l + xi->w < col_lo ? col_lo
                     : g->pad_l + xi->w > wp   ? wp
                                               : g->pad_l + xi->w;
    bool dense = xi->sc == 1 && xi->sw == c;
    for (int64_t r = 0; r < n_rows; r++) {
        float *dst = pad + r * wp * c;
        int64_t ih = first_row + r - g->pad_t;
        if (ih < 0 || ih >= xi->h || col_hi == col_lo) {
            memset(dst, 0, (size_t)(wp * c) * sizeof(float));
            continue;
        }
        memset(dst, 0, (size_t)(col_lo * c) * sizeof(float));
        const char *src =
            (const char *)x +
            (size_t)(b * xi->sn + ih * xi->sh + (col_lo - g->pad_l) * xi->sw) * g->esize;
        if (dense) {
            widen_run(g->dtype, src, 1, (col_hi - col_lo) * c, dst + col_lo * c);
        } else {
            for (int64_t col = col_lo; col < col_hi; col++)
                widen_run(g->dtype, src + (size_t)((col - col_lo) * xi->sw) * g->esize, xi->sc, c,
                          dst + col * c);
        }
        memset(dst + col_hi * c, 0, (size_t)((wp - col_hi) * c) * sizeof(float));
    }
}

void eg__conv_round_into(eg_dtype dtype, const float *src, int64_t n, void *dst, int64_t offset) {
    if (dtype == EG_DTYPE_BF16)
        eg_f32_to_bf16(src, (uint16_t *)dst + offset, (size_t)n);
    else
        eg_f32_to_f16(src, (uint16_t *)dst + offset, (size_t)n);
}

const float *eg__conv_sweep_dy(const conv_geometry *g, const void *dy, int64_t offset, int64_t n,
                               float *buffer) {
    if (g->dtype == EG_DTYPE_F32) return (const float *)dy + offset;
    widen_run(g->dtype, (const uint16_t *)dy + offset, 1, n, buffer);
    return buffer;
}

void eg__conv_pack_filter(const conv_geometry *g, const float *w, int64_t nr, float *dst) {
    int64_t n_ob = (g->og + nr - 1) / nr;
    for (int64_t grp = 0; grp < g->groups; grp++)
        for (int64_t ob = 0; ob < n_ob; ob++) {
            int64_t o0 = grp * g->og + ob * nr, n = g->og - ob * nr < nr ? g->og - ob * nr : nr;
            for (int64_t kk = 0; kk < g->k; kk++, dst += nr) {
                memcpy(dst, w + kk * g->out_c + o0, (size_t)n * sizeof(float));
                memset(dst + n, 0, (size_t)(nr - n) * sizeof(float));
            }
        }
}

int64_t *eg__conv_tap_offsets(const conv_geometry *g, const eg__conv_band *l) {
    int64_t *taps = malloc((size_t)(g->kh * g->kw) * sizeof *taps);
    if (!taps) return NULL;
    for (int64_t i = 0; i < g->kh; i++)
        for (int64_t j = 0; j < g->kw; j++)
            taps[i * g->kw + j] = (i * g->dil_h * l->wp + j * g->dil_w) * l->c;
    return taps;
}

eg_status eg__conv_run_forward(const conv_geometry *g, const eg__conv_band *l, const float *w,
                               int64_t nr, const float **wpack, const int64_t **taps,
                               void (*tasks)(void *job, int64_t begin, int64_t end), void *job,
                               atomic_bool *failed, const char *what) {
    size_t pack_floats = (size_t)(g->groups * ((g->og + nr - 1) / nr) * g->k * nr);
    float *packed = aligned_alloc(64, (pack_floats * sizeof(float) + 63) / 64 * 64);
    int64_t *offsets = eg__conv_tap_offsets(g, l);
    bool ok = packed && offsets;
    if (ok) {
        eg__conv_pack_filter(g, w, nr, packed);
        *wpack = packed;
        *taps = offsets;
        atomic_init(failed, false);
        eg__parallel_for(g->x.n * l->n_bands, 1, tasks, job);
        ok = !atomic_load(failed);
    }
    free(packed);
    free(offsets);
    return ok ? EG_OK
              : eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory for scratch space", what);
}

/* ---- the direct kernel (f32, NHWC output, AVX2 + FMA) ---- */

#ifdef EG_CONV_X86
/* At the dispatch level, so that EG_CPU=baseline takes the baseline path here too. */
static bool cpu_has_avx2_fma(void) {
    return eg__cpu_active_level() >= EG__CPU_AVX2;
}

/* One output pixel of one group: acc[v] (8 outputs each) over every valid tap and channel. */
__attribute__((target("avx2,fma"), always_inline)) static inline void
direct_pixel(const conv_geometry *g, const float *xb, const float *w, float *out, int64_t oh,
             int64_t ow, int nv) {
    __m256 acc[8];
    for (int v = 0; v < nv; v++) acc[v] = _mm256_setzero_ps();
    for (int64_t i = 0; i < g->kh; i++) {
        int64_t ih = oh * g->stride_h - g->pad_t + i * g->dil_h;
        if (ih < 0 || ih >= g->x.h) continue;
        for (int64_t j = 0; j < g->kw; j++) {
            int64_t iw = ow * g->stride_w - g->pad_l + j * g->dil_w;
            if (iw < 0 || iw >= g->x.w) continue;
            const float *xp = xb + ih * g->x.sh + iw * g->x.sw;
            const float *wp = w + (i * g->kw + j) * g->cg * g->out_c;
            for (int64_t c = 0; c < g->cg; c++, wp += g->out_c) {
                __m256 xv = _mm256_broadcast_ss(xp + c * g->x.sc);
                for (int v = 0; v < nv; v++)
                    acc[v] = _mm256_fmadd_ps(xv, _mm256_loadu_ps(wp + 8 * v), acc[v]);
            }
        }
    }
    for (int v = 0; v < nv; v++) _mm256_storeu_ps(out + 8 * v, acc[v]);
}

#define DIRECT_ROWS(NV)                                                                            \
    __attribute__((target("avx2,fma"))) static void direct_rows_##NV(                              \
        const conv_geometry *g, const float *x, const float *w, float *y, int64_t q0,              \
        int64_t rows) {                                                                            \
        for (int64_t q = q0; q < q0 + rows; q++) {                                                 \
            int64_t b = q / g->p, p = q % g->p, oh = p / g->y.w, ow = p % g->y.w;                  \
            for (int64_t grp = 0; grp < g->groups; grp++)                                          \
                direct_pixel(g, x + b * g->x.sn + grp * g->cg * g->x.sc, w + grp * g->og,          \
                             y + q * g->out_c + grp * g->og, oh, ow, NV);                          \
        }                                                                                          \
    }
DIRECT_ROWS(1)
DIRECT_ROWS(2)
DIRECT_ROWS(4)
DIRECT_ROWS(8)
#undef DIRECT_ROWS

/* The filter gradient the direct way: for every output row q and valid tap, partial[tap, c, o] +=
 * x[tap, c] * dy[q, o] (the partial, K x out_c floats, stays in L1 for small K). */
__attribute__((target("avx2,fma"), always_inline)) static inline void
direct_filter_row(const conv_geometry *g, const float *x, const float *dy, float *partial,
                  int64_t q, int nv) {
    int64_t b = q / g->p, p = q % g->p, oh = p / g->y.w, ow = p % g->y.w;
    for (int64_t grp = 0; grp < g->groups; grp++) {
        __m256 d[8];
        const float *dyq = dy + q * g->out_c + grp * g->og;
        for (int v = 0; v < nv; v++) d[v] = _mm256_loadu_ps(dyq + 8 * v);
        const float *xb = x + b * g->x.sn + grp * g->cg * g->x.sc;
        for (int64_t i = 0; i < g->kh; i++) {
            int64_t ih = oh * g->stride_h - g->pad_t + i * g->dil_h;
            if (ih < 0 || ih >= g->x.h) continue;
            for (int64_t j = 0; j < g->kw; j++) {
                int64_t iw = ow * g->stride_w - g->pad_l + j * g->dil_w;
                if (iw < 0 || iw >= g->x.w) continue;
                const float *xp = xb + ih * g->x.sh + iw * g->x.sw;
                float *acc = partial + (i * g->kw + j) * g->cg * g->out_c + grp * g->og;
                for (int64_t c = 0; c < g->cg; c++, acc += g->out_c) {
                    __m256 xv = _mm256_broadcast_ss(xp + c * g->x.sc);
                    for (int v = 0; v < nv; v++)
                        _mm256_storeu_ps(acc + 8 * v,
                                         _mm256_fmadd_ps(xv, d[v], _mm256_loadu_ps(acc + 8 * v)));
                }
            }
        }
    }
}

#define DIRECT_FILTER_ROWS(NV)                                                                     \
    __attribute__((target("avx2,fma"))) static void direct_filter_rows_##NV(                       \
        const conv_geometry *g, const float *x, const float *dy, float *partial, int64_t q0,       \
        int64_t q1) {                                                                              \
        for (int64_t q = q0; q < q1; q++) direct_filter_row(g, x, dy, partial, q, NV);             \
    }
DIRECT_FILTER_ROWS(1)
DIRECT_FILTER_ROWS(2)
DIRECT_FILTER_ROWS(4)
DIRECT_FILTER_ROWS(8)
#undef DIRECT_FILTER_ROWS
#endif

/* Whether conv_avx2.c's implicit-GEMM kernels compute this convolution's forward and filter
 * gradient: f32 (or bf16 / f16 for conv_lowp.c, which the kernels widen as they copy the input
 * bands and round as they write each band's output) NHWC on a CPU with AVX2 and FMA, with at
 * least 8 output channels per group (the
 * register block is 16 channels wide; fewer would leave most of it idle). bench/conv: they beat
 * im2col + sgemm and the direct kernel on every layer of the CNN, the 3x3x1 first layer included
 * (forward ~45 GFLOP/s against ~12 for the direct kernel). */
static bool conv_use_avx2(const conv_geometry *g) {
#ifdef EG_CONV_X86
    if (f32_algorithm() == 1 || f32_algorithm() == 2 || g->dtype == EG_DTYPE_F64 || g->first ||
        g->p == 0 || g->og == 0 || !cpu_has_avx2_fma() || !eg__conv_avx2_built())
        return false;
    return f32_algorithm() >= 4 || g->og >= 8;
#else
    (void)g;
    return false;
#endif
}

/* Whether conv_avx512.c's kernels compute it instead: where the AVX2 ones would (or always, with
 * eg__conv_set_algorithm(5)), at the dispatch level EG__CPU_AVX512. eg__conv_set_algorithm(4)
 * keeps the AVX2 kernels on an AVX-512 CPU, for comparison. */
static bool conv_use_avx512(const conv_geometry *g) {
#ifdef EG_CONV_X86
    if (f32_algorithm() != 0 && f32_algorithm() != 3 && f32_algorithm() != 5) return false;
    if (g->dtype == EG_DTYPE_F64 || g->first || g->p == 0 || g->og == 0 ||
        eg__cpu_active_level() < EG__CPU_AVX512 || !eg__conv_avx512_built())
        return false;
    return f32_algorithm() == 5 || g->og >= 8;
#else
    (void)g;
    return false;
#endif
}

/* Whether the direct kernels compute this convolution's forward and filter gradient. */
static bool conv_use_direct(const conv_geometry *g) {
#ifdef EG_CONV_X86
    if (f32_algorithm() == 1 || f32_algorithm() >= 4 || g->dtype != EG_DTYPE_F32 || g->first)
        return false;
    int nv = (int)(g->og / 8);
    if (g->og % 8 != 0 || (nv != 1 && nv != 2 && nv != 4 && nv != 8) || !cpu_has_avx2_fma())
        return false;
    return f32_algorithm() == 2 || g->k <= DIRECT_MAX_K;
#else
    (void)g;
    return false;
#endif
}

/* ---- tiles ---- */

/* The tiles of rows [q_begin, q_end) of the flattened (image, pixel) range: `rows` per tile, not
 * crossing an image boundary when per_image (NCHW layouts keep one image's pixels together). */
typedef struct tiling {
    int64_t rows, p;
    bool per_image;
} tiling;

static int64_t tile_length(const tiling *t, int64_t q, int64_t q_end) {
    int64_t n = q_end - q < t->rows ? q_end - q : t->rows;
    if (t->per_image && t->p - q % t->p < n) n = t->p - q % t->p;
    return n;
}

/* Number of tiles of [0, batch * P), and the first row of tile `index`. */
static int64_t tile_count(const tiling *t, int64_t batch) {
    if (!t->per_image) return (batch * t->p + t->rows - 1) / t->rows;
    return batch * ((t->p + t->rows - 1) / t->rows);
}

static int64_t tile_start(const tiling *t, int64_t index) {
    if (!t->per_image) return index * t->rows;
    int64_t per = (t->p + t->rows - 1) / t->rows;
    return index / per * t->p + index % per * t->rows;
}

/* ---- forward ---- */

typedef struct conv_job {
    const conv_geometry *g;
    const char *x, *w;
    char *y;
    const char *dy;
    tiling tiles;
    int64_t chunk_images, n_chunks;
    char *partials;
    size_t partial_elems; /* of one chunk's partial filter gradient */
    size_t acc_size;      /* bytes per partial element: g's, or f32 for bf16 / f16 */
    bool direct, avx2, avx512;
    atomic_bool failed; /* a task found no memory for its scratch space */
} conv_job;

static void *scratch(size_t bytes) {
    return aligned_alloc(64, (bytes + 63) / 64 * 64);
}

static char *col_scratch(conv_job *j) {
    char *col = scratch((size_t)(j->tiles.rows * j->g->k) * j->g->esize);
    if (!col) atomic_store(&j->failed, true);
    return col;
}

/* Tasks: tiles of output rows. */
static void conv_forward_tasks(void *context, int64_t begin, int64_t end) {
    conv_job *j = context;
    const conv_geometry *g = j->g;
    size_t es = g->esize;
    char *col = j->direct ? NULL : col_scratch(j);
    if (!j->direct && !col) return;
    for (int64_t task = begin; task < end; task++) {
        int64_t q0 = tile_start(&j->tiles, task);
        int64_t rows = tile_length(&j->tiles, q0, g->x.n * g->p);
#ifdef EG_CONV_X86
        if (j->direct) {
            const float *x = (const float *)j->x, *w = (const float *)j->w;
            float *y = (float *)j->y;
            switch (g->og / 8) {
            case 1:
                direct_rows_1(g, x, w, y, q0, rows);
                break;
            case 2:
                direct_rows_2(g, x, w, y, q0, rows);
                break;
            case 4:
                direct_rows_4(g, x, w, y, q0, rows);
                break;
            default:
                direct_rows_8(g, x, w, y, q0, rows);
                break;
            }
            continue;
        }
#endif
        int64_t b = q0 / g->p, p0 = q0 % g->p;
        for (int64_t grp = 0; grp < g->groups; grp++) {
            im2col(g, j->x, grp, q0, rows, col);
            const char *wg = j->w + (size_t)(grp * g->og) * es;
            if (!g->first) /* y (q, o): rows of the flattened batch */
                gemm(g->dtype, false, false, rows, g->og, g->k, col, g->k, wg, g->out_c, 0.0,
                     j->y + (size_t)(q0 * g->out_c + grp * g->og) * es, g->out_c);
            else /* y (b, o, p): (og x rows) = W_g^T col^T, within image b */
                gemm(g->dtype, true, true, g->og, rows, g->k, wg, g->out_c, col, g->k, 0.0,
                     j->y + (size_t)((b * g->out_c + grp * g->og) * g->p + p0) * es, g->p);
        }
    }
    free(col);
}

static eg_status out_of_memory(const char *what) {
    return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory for scratch space", what);
}

/* y = conv(x, w) for the geometry (y contiguous in its layout, w contiguous HWIO). */
static eg_status run_forward(const conv_geometry *g, const char *x, const char *w, char *y,
                             const char *what) {
    if (g->k == 0) {
        memset(y, 0, (size_t)(g->y.n * g->p * g->out_c) * g->esize);
        return EG_OK;
    }
    if (conv_use_avx512(g)) return eg__conv_avx512_forward(g, x, (const float *)w, y, what);
    if (conv_use_avx2(g)) return eg__conv_avx2_forward(g, x, (const float *)w, y, what);
    if (g->dtype == EG_DTYPE_BF16 || g->dtype == EG_DTYPE_F16)
        return eg__error(EG_ERR_INTERNAL, "%s: no kernel for a %s convolution", what,
                         eg_dtype_name(g->dtype));
    conv_job job = {.g = g, .x = x, .w = w, .y = y};
    job.direct = conv_use_direct(g);
    job.tiles = (tiling){tile_rows(g), g->p, g->first};
    atomic_init(&job.failed, false);
    eg__parallel_for(tile_count(&job.tiles, g->x.n), 1, conv_forward_tasks, &job);
    return atomic_load(&job.failed) ? out_of_memory(what) : EG_OK;
}

/* x: (B, H, W, C) / (B, C, H, W), w: (KH, KW, C/groups, O) -> y: (B, OH, OW, O) / (B, O, OH, OW) */
eg_status eg__cpu_conv2d(const eg__kernel_call *call) {
    if (call->output->dtype == EG_DTYPE_BF16 || call->output->dtype == EG_DTYPE_F16)
        return eg__conv_lowp_forward(call);
    eg__blas_single_threaded();
    eg_tensor *w = eg__contiguous_temp(call->inputs[1]);
    if (!w) return eg_last_status();
    conv_geometry g = geometry(call->inputs[0], call->output, w->shape, call->attrs);
    eg_status status =
        run_forward(&g, eg__data(call->inputs[0]), eg__data(w), eg__data(call->output), "conv2d");
    eg__unref(w);
    return status;
}

/* ---- gradient with respect to the input ---- */

/* With stride 1 the input gradient is itself a convolution: dx[h] = sum_i dy[h + pad - i * d]
 * w[i] = sum_i' dy[h - (span - pad) + i' * d] w[k - 1 - i'], i.e. dy convolved with the filter
 * flipped in space and with its input and output channels swapped (per group), padded by
 * span - pad (possibly negative: im2col reads zeros outside dy either way). That runs as the
 * forward does (no scatter, a larger GEMM inner dimension) and is every stride-1 layer's path. */
bool eg__conv_flip_geometry(const conv_geometry *g, conv_geometry *f) {
    if (g->stride_h != 1 || g->stride_w != 1) return false;
    *f = *g;
    f->x = g->y; /* reads dy */
    f->y = g->x; /* writes dx */
    f->cg = g->og;
    f->og = g->cg;
    f->out_c = g->cg * g->groups;
    f->k = g->kh * g->kw * f->cg;
    f->p = g->x.h * g->x.w;
    f->pad_t = g->dil_h * (g->kh - 1) - g->pad_t;
    f->pad_l = g->dil_w * (g->kw - 1) - g->pad_l;
    return true;
}

static bool flipped_geometry(const conv_geometry *g, conv_geometry *f);

bool eg__conv_flip_preferred(const conv_geometry *g, conv_geometry *f) {
    return flipped_geometry(g, f);
}

static bool flipped_geometry(const conv_geometry *g, conv_geometry *f) {
    /* With few input channels per group the flipped GEMM would be too narrow (N = cg); when the
     * input is much larger than the output (valid padding on small images) the flipped form
     * multiplies many padding zeros (bench/conv: col2im wins from ~25% more). */
    if (g->cg < FLIPPED_MIN_CHANNELS || g->x.h * g->x.w * 4 > g->p * 5 || f32_algorithm() == 3)
        return false;
    return eg__conv_flip_geometry(g, f);
}

void eg__conv_flip_filter(const conv_geometry *g, const void *w_, void *out_) {
    const char *w = w_;
    char *out = out_;
    size_t es = g->esize;
    int64_t c_total = g->cg * g->groups;
    for (int64_t i = 0; i < g->kh; i++)
        for (int64_t j = 0; j < g->kw; j++) {
            const char *src =
                w + (size_t)(((g->kh - 1 - i) * g->kw + (g->kw - 1 - j)) * g->cg * g->out_c) * es;
            char *dst = out + (size_t)((i * g->kw + j) * g->og * c_total) * es;
            for (int64_t grp = 0; grp < g->groups; grp++)
                for (int64_t o = 0; o < g->og; o++)
                    for (int64_t c = 0; c < g->cg; c++)
                        memcpy(dst + (size_t)(o * c_total + grp * g->cg + c) * es,
                               src + (size_t)(c * g->out_c + grp * g->og + o) * es, es);
        }
}

/* Tasks: images (every tile of an image adds into the same dx rows, in a fixed order). */
static void conv_input_tasks(void *context, int64_t begin, int64_t end) {
    conv_job *j = context;
    const conv_geometry *g = j->g;
    size_t es = g->esize;
    char *col = col_scratch(j);
    if (!col) return;
    for (int64_t b = begin; b < end; b++) {
        /* dx is contiguous in its layout: image b is one block */
        memset(j->y + (size_t)(b * g->x.sn) * es, 0, (size_t)(g->x.h * g->x.w * g->x.c) * es);
        for (int64_t q0 = b * g->p; q0 < (b + 1) * g->p;) {
            int64_t rows = tile_length(&j->tiles, q0, (b + 1) * g->p), p0 = q0 % g->p;
            for (int64_t grp = 0; grp < g->groups; grp++) {
                const char *wg = j->w + (size_t)(grp * g->og) * es;
                if (!g->first) /* dcol (rows x k) = dy (rows x og) W_g^T */
                    gemm(g->dtype, false, true, rows, g->k, g->og,
                         j->dy + (size_t)(q0 * g->out_c + grp * g->og) * es, g->out_c, wg, g->out_c,
                         0.0, col, g->k);
                else
                    gemm(g->dtype, true, true, rows, g->k, g->og,
                         j->dy + (size_t)((b * g->out_c + grp * g->og) * g->p + p0) * es, g->p, wg,
                         g->out_c, 0.0, col, g->k);
                col2im(g, j->y, grp, q0, rows, col);
            }
            q0 += rows;
        }
    }
    free(col);
}

/* dy: the convolution's output shape, w: (KH, KW, C/groups, O) -> dx: the input's shape */
eg_status eg__cpu_conv2d_backward_input(const eg__kernel_call *call) {
    if (call->output->dtype == EG_DTYPE_BF16 || call->output->dtype == EG_DTYPE_F16)
        return eg__conv_lowp_backward_input(call);
    eg__blas_single_threaded();
    eg_tensor *dx = call->output;
    eg_tensor *dy = eg__contiguous_temp(call->inputs[0]);
    eg_tensor *w = dy ? eg__contiguous_temp(call->inputs[1]) : NULL;
    if (!w) {
        eg__unref(dy);
        return eg_last_status();
    }
    conv_geometry g = geometry(dx, dy, w->shape, call->attrs), f;
    eg_status status = EG_OK;
    if (g.k == 0 || g.p == 0 || g.out_c == 0) {
        memset(eg__data(dx), 0, (size_t)dx->n_elems * g.esize);
    } else if (flipped_geometry(&g, &f)) {
        char *flipped = scratch((size_t)w->n_elems * g.esize);
        if (!flipped) {
            status = out_of_memory("conv2d_backward_input");
        } else {
            eg__conv_flip_filter(&g, eg__data(w), flipped);
            status = run_forward(&f, eg__data(dy), flipped, eg__data(dx), "conv2d_backward_input");
            free(flipped);
        }
    } else {
        conv_job job = {.g = &g, .w = eg__data(w), .y = eg__data(dx), .dy = eg__data(dy)};
        job.tiles = (tiling){tile_rows(&g), g.p, true};
        atomic_init(&job.failed, false);
        eg__parallel_for(g.x.n, 1, conv_input_tasks, &job);
        if (atomic_load(&job.failed)) status = out_of_memory("conv2d_backward_input");
    }
    eg__unref(dy);
    eg__unref(w);
    return status;
}

/* ---- gradient with respect to the filter ---- */

/* Tasks: chunks of images, each summing into its own partial (k x out_c) gradient. */
static void conv_filter_tasks(void *context, int64_t begin, int64_t end) {
    conv_job *j = context;
    const conv_geometry *g = j->g;
    size_t es = j->acc_size, partial_elems = j->partial_elems;
    char *col = j->direct   ? NULL
                : j->avx512 ? scratch(eg__conv_avx512_filter_scratch(g) * sizeof(float))
                : j->avx2   ? scratch(eg__conv_avx2_filter_scratch(g) * sizeof(float))
                            : col_scratch(j);
    if (!j->direct && !col) {
        atomic_store(&j->failed, true);
        return;
    }
    for (int64_t chunk = begin; chunk < end; chunk++) {
        char *partial = j->partials + (size_t)chunk * partial_elems * es;
        if (!j->avx512) memset(partial, 0, partial_elems * es); /* the AVX-512 chunk zeroes it */
        int64_t b_end = (chunk + 1) * j->chunk_images;
        if (b_end > g->x.n) b_end = g->x.n;
        if (j->avx512) {
            eg__conv_avx512_filter_chunk(g, j->x, j->dy, (float *)partial, chunk * j->chunk_images,
                                         b_end, (float *)col);
            continue;
        }
        if (j->avx2) {
            eg__conv_avx2_filter_chunk(g, j->x, j->dy, (float *)partial, chunk * j->chunk_images,
                                       b_end, (float *)col);
            continue;
        }
#ifdef EG_CONV_X86
        if (j->direct) {
            const float *x = (const float *)j->x, *dy = (const float *)j->dy;
            float *acc = (float *)partial;
            int64_t q0 = chunk * j->chunk_images * g->p, q1 = b_end * g->p;
            switch (g->og / 8) {
            case 1:
                direct_filter_rows_1(g, x, dy, acc, q0, q1);
                break;
            case 2:
                direct_filter_rows_2(g, x, dy, acc, q0, q1);
                break;
            case 4:
                direct_filter_rows_4(g, x, dy, acc, q0, q1);
                break;
            default:
                direct_filter_rows_8(g, x, dy, acc, q0, q1);
                break;
            }
            continue;
        }
#endif
        for (int64_t q0 = chunk * j->chunk_images * g->p; q0 < b_end * g->p;) {
            int64_t rows = tile_length(&j->tiles, q0, b_end * g->p);
            int64_t b = q0 / g->p, p0 = q0 % g->p;
            for (int64_t grp = 0; grp < g->groups; grp++) {
                im2col(g, j->x, grp, q0, rows, col);
                char *pg = partial + (size_t)(grp * g->og) * es;
                if (!g->first) /* (k x og) += col^T dy */
                    gemm(g->dtype, true, false, g->k, g->og, rows, col, g->k,
                         j->dy + (size_t)(q0 * g->out_c + grp * g->og) * es, g->out_c, 1.0, pg,
                         g->out_c);
                else
                    gemm(g->dtype, true, true, g->k, g->og, rows, col, g->k,
                         j->dy + (size_t)((b * g->out_c + grp * g->og) * g->p + p0) * es, g->p, 1.0,
                         pg, g->out_c);
            }
            q0 += rows;
        }
    }
    free(col);
}

typedef struct sum_job {
    char *out;
    const char *partials;
    int64_t n_parts, n;
    eg_dtype dtype;
} sum_job;

/* out[e] = partials[0][e] + partials[1][e] + ..., always in that order. */
static void sum_partials(void *context, int64_t begin, int64_t end) {
    const sum_job *s = context;
    if (s->dtype == EG_DTYPE_F32) {
        float *out = (float *)s->out;
        const float *parts = (const float *)s->partials;
        for (int64_t e = begin; e < end; e++) {
            float v = parts[e];
            for (int64_t c = 1; c < s->n_parts; c++) v += parts[c * s->n + e];
            out[e] = v;
        }
    } else {
        double *out = (double *)s->out;
        const double *parts = (const double *)s->partials;
        for (int64_t e = begin; e < end; e++) {
            double v = parts[e];
            for (int64_t c = 1; c < s->n_parts; c++) v += parts[c * s->n + e];
            out[e] = v;
        }
    }
}

typedef struct avx512_sum_job {
    const conv_geometry *g;
    const float *partials;
    int64_t n_parts;
    float *dw;
} avx512_sum_job;

static void avx512_sum_partials(void *context, int64_t begin, int64_t end) {
    const avx512_sum_job *s = context;
    eg__conv_avx512_filter_sum(s->g, s->partials, s->n_parts, s->dw, begin, end);
}

/* The filter gradient's partials (megabytes for the CNN's layers) are kept for the next call: a
 * fresh buffer of that size comes from mmap, and the kernel zeroing its pages on first touch
 * showed in perf profiles of the filter gradient as a sizeable share of it. One buffer, the
 * largest asked for so far, held until eg_shutdown (eg__cpu_conv_release_cached); a call that
 * finds it taken (another thread's convolution) allocates its own. */
static pthread_mutex_t partials_lock = PTHREAD_MUTEX_INITIALIZER;
static char *partials_cached;
static size_t partials_cached_bytes;

char *eg__conv_partials_take(size_t bytes) {
    char *p = NULL;
    pthread_mutex_lock(&partials_lock);
    if (partials_cached && partials_cached_bytes >= bytes) {
        p = partials_cached;
        partials_cached = NULL;
    }
    pthread_mutex_unlock(&partials_lock);
    return p ? p : scratch(bytes);
}

void eg__cpu_conv_release_cached(void) {
    pthread_mutex_lock(&partials_lock);
    free(partials_cached);
    partials_cached = NULL;
    partials_cached_bytes = 0;
    pthread_mutex_unlock(&partials_lock);
    eg__conv_scratch_release();
}

void eg__conv_partials_give(char *p, size_t bytes) {
    if (!p) return;
    pthread_mutex_lock(&partials_lock);
    if (!partials_cached || partials_cached_bytes < bytes) {
        char *old = partials_cached;
        partials_cached = p;
        partials_cached_bytes = bytes;
        p = old;
    }
    pthread_mutex_unlock(&partials_lock);
    free(p);
}

/* dw (k x out_c, HWIO; f32 for bf16 / f16 geometries, which only the implicit GEMMs take) = the
 * filter gradient of x (g->x's strides) and dy (contiguous). */
static eg_status filter_gradient(const conv_geometry *g, const char *x, const char *dy, char *dw,
                                 const char *what) {
    bool lowp = g->dtype == EG_DTYPE_BF16 || g->dtype == EG_DTYPE_F16;
    conv_job job = {.g = g, .x = x, .dy = dy};
    job.tiles = (tiling){tile_rows(g), g->p, g->first};
    job.avx512 = conv_use_avx512(g) && eg__conv_avx512_filter_fits(g);
    job.avx2 = !job.avx512 && conv_use_avx2(g);
    job.direct = !job.avx512 && !job.avx2 && conv_use_direct(g);
    job.acc_size = lowp ? sizeof(float) : g->esize;
    if (lowp && !job.avx512 && !job.avx2)
        return eg__error(EG_ERR_INTERNAL, "%s: no kernel for a %s filter gradient", what,
                         eg_dtype_name(g->dtype));
    atomic_init(&job.failed, false);
    job.chunk_images = (g->x.n + EG_CONV_FILTER_CHUNKS - 1) / EG_CONV_FILTER_CHUNKS;
    if (job.chunk_images < 1) job.chunk_images = 1;
    job.n_chunks = (g->x.n + job.chunk_images - 1) / job.chunk_images;
    eg_status status = EG_OK;
    size_t n = (size_t)(g->k * g->out_c);
    job.partial_elems = job.avx512 ? eg__conv_avx512_filter_partial_floats(g) : n;
    if (job.n_chunks == 0 || g->p == 0) {
        memset(dw, 0, n * job.acc_size);
    } else {
        size_t partials_bytes = (size_t)job.n_chunks * job.partial_elems * job.acc_size;
        job.partials = eg__conv_partials_take(partials_bytes);
        if (job.partials) eg__parallel_for(job.n_chunks, 1, conv_filter_tasks, &job);
        if (!job.partials || atomic_load(&job.failed)) {
            status = out_of_memory(what);
        } else if (job.avx512) {
            avx512_sum_job s = {g, (const float *)job.partials, job.n_chunks, (float *)dw};
            eg__parallel_for(eg__conv_avx512_filter_units(g), 1, avx512_sum_partials, &s);
        } else {
            sum_job s = {dw, job.partials, job.n_chunks, (int64_t)n,
                         lowp ? EG_DTYPE_F32 : g->dtype};
            eg__parallel_for((int64_t)n, EG_PARALLEL_GRAIN_ELEMENTWISE, sum_partials, &s);
        }
        eg__conv_partials_give(job.partials, partials_bytes);
    }
    return status;
}

bool eg__conv_implicit_fits(const conv_geometry *g) {
    return conv_use_avx512(g) || conv_use_avx2(g);
}

eg_status eg__conv_implicit_forward(const conv_geometry *g, const void *x, const float *w, void *y,
                                    const char *what) {
    return run_forward(g, x, (const char *)w, y, what);
}

eg_status eg__conv_implicit_filter(const conv_geometry *g, const void *x, const void *dy, float *dw,
                                   const char *what) {
    return filter_gradient(g, x, dy, (char *)dw, what);
}

/* x: the input, dy: the convolution's output shape -> dw: (KH, KW, C/groups, O) */
eg_status eg__cpu_conv2d_backward_filter(const eg__kernel_call *call) {
    if (call->output->dtype == EG_DTYPE_BF16 || call->output->dtype == EG_DTYPE_F16)
        return eg__conv_lowp_backward_filter(call);
    eg__blas_single_threaded();
    const eg_tensor *x = call->inputs[0];
    eg_tensor *dw = call->output;
    eg_tensor *dy = eg__contiguous_temp(call->inputs[1]);
    if (!dy) return eg_last_status();
    conv_geometry g = geometry(x, dy, dw->shape, call->attrs);
    eg_status status =
        filter_gradient(&g, eg__data(x), eg__data(dy), eg__data(dw), "conv2d_backward_filter");
    eg__unref(dy);
    return status;
}
