/* CPU 2-d convolution: forward, gradient with respect to the input (also the transposed
 * convolution) and with respect to the filter, for NHWC and NCHW images of any strides and HWIO
 * filters, f32 and f64.
 *
 * The main path is im2col + GEMM (OpenBLAS, single-threaded like matmul.c): a tile of output
 * pixels is unrolled into a (pixels, KH*KW*C_in/groups) column matrix and multiplied with the
 * filter viewed as a (KH*KW*C_in/groups, C_out) matrix. For small kernels (few input channels:
 * the first layer of a CNN) a direct kernel of our own (AVX2/FMA, f32, NHWC) is faster than a
 * GEMM with a tiny inner dimension; bench/conv measures both, and conv_use_direct() holds the
 * rule the measurements gave.
 *
 * Results never depend on the thread count: work is cut into fixed tiles (TILE_PIXELS output
 * pixels of one image; for the filter gradient, FILTER_CHUNKS fixed groups of images whose
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

#include "backend/cpu/kernels.h"
#include "core/error.h"

/* Output pixels per im2col tile: the column matrix of a tile (TILE_PIXELS x K) stays within a
 * core's L2 for K up to ~1000 (f32). */
#define TILE_PIXELS 256
/* The filter gradient sums over images in this many fixed chunks at most (parallel work). */
#define FILTER_CHUNKS 16
/* The direct kernel handles K = KH*KW*C_in/groups up to this (bench/conv: it beats im2col+GEMM
 * for the 3x3x1 first layer, loses from 3x3x32 on). */
#define DIRECT_MAX_K 32

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static void blas_single_thread(void) {
    openblas_set_num_threads(1);
}

/* 0: choose by shape; 1: always im2col + GEMM; 2: direct where it applies. For bench/conv. */
static int forced_algorithm;
void eg__conv_set_algorithm(int algorithm);
void eg__conv_set_algorithm(int algorithm) {
    forced_algorithm = algorithm;
}

typedef struct conv_geometry {
    eg__image x, y;              /* the convolution's input and output (y also for dy) */
    int64_t kh, kw, cg, og, k;   /* filter; cg/og channels per group; k = kh * kw * cg */
    int64_t groups, p, out_c;    /* p = output pixels per image */
    int64_t stride_h, stride_w, dil_h, dil_w, pad_t, pad_l;
    bool first;                  /* NCHW */
    eg_dtype dtype;
    size_t esize;
} conv_geometry;

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

/* Row-major C (m x n) = op(A) op(B) + beta C. */
static void gemm(eg_dtype dtype, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void *a,
                 int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc) {
    enum CBLAS_TRANSPOSE ta_ = ta ? CblasTrans : CblasNoTrans, tb_ = tb ? CblasTrans : CblasNoTrans;
    if (dtype == EG_DTYPE_F32)
        cblas_sgemm(CblasRowMajor, ta_, tb_, (int)m, (int)n, (int)k, 1.0f, a, (int)lda, b,
                    (int)ldb, (float)beta, c, (int)ldc);
    else
        cblas_dgemm(CblasRowMajor, ta_, tb_, (int)m, (int)n, (int)k, 1.0, a, (int)lda, b, (int)ldb,
                    beta, c, (int)ldc);
}

/* The column matrix of output pixels p0 .. p0+rows of image b, group grp: row r holds, for every
 * filter tap (i, j) and channel c of the group, x at that tap (0 in the padding). */
static void im2col(const conv_geometry *g, const char *x, int64_t b, int64_t grp, int64_t p0,
                   int64_t rows, char *col) {
    size_t es = g->esize, cg_bytes = (size_t)g->cg * es;
    const char *xb = x + (size_t)(b * g->x.sn + grp * g->cg * g->x.sc) * es;
    char *dst = col;
    for (int64_t r = 0; r < rows; r++) {
        int64_t p = p0 + r, oh = p / g->y.w, ow = p % g->y.w;
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
                if (g->x.sc == 1 || g->cg == 1) {
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

/* The adjoint of im2col: adds the column matrix's rows into dx (image b, group grp). */
#define COL2IM(T, suffix)                                                                          \
    static void col2im_##suffix(const conv_geometry *g, T *dx, int64_t b, int64_t grp, int64_t p0, \
                                int64_t rows, const T *col) {                                      \
        T *xb = dx + b * g->x.sn + grp * g->cg * g->x.sc;                                          \
        int64_t sc = g->x.sc;                                                                      \
        for (int64_t r = 0; r < rows; r++) {                                                       \
            int64_t p = p0 + r, oh = p / g->y.w, ow = p % g->y.w;                                  \
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

static void col2im(const conv_geometry *g, void *dx, int64_t b, int64_t grp, int64_t p0,
                   int64_t rows, const void *col) {
    if (g->dtype == EG_DTYPE_F32)
        col2im_f32(g, dx, b, grp, p0, rows, col);
    else
        col2im_f64(g, dx, b, grp, p0, rows, col);
}

/* ---- the direct kernel (f32, NHWC output, AVX2 + FMA) ---- */

#ifdef EG_CONV_X86
static bool cpu_has_avx2_fma(void) {
    static int known; /* 0 unknown, 1 yes, 2 no; racing first calls write the same value */
    if (!known) {
        __builtin_cpu_init();
        known = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 1 : 2;
    }
    return known == 1;
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
        const conv_geometry *g, const float *x, const float *w, float *y, int64_t b, int64_t p0,   \
        int64_t rows) {                                                                            \
        for (int64_t r = 0; r < rows; r++) {                                                       \
            int64_t p = p0 + r, oh = p / g->y.w, ow = p % g->y.w;                                  \
            for (int64_t grp = 0; grp < g->groups; grp++)                                          \
                direct_pixel(g, x + b * g->x.sn + grp * g->cg * g->x.sc, w + grp * g->og,          \
                             y + (b * g->p + p) * g->out_c + grp * g->og, oh, ow, NV);             \
        }                                                                                          \
    }
DIRECT_ROWS(1)
DIRECT_ROWS(2)
DIRECT_ROWS(4)
DIRECT_ROWS(8)
#undef DIRECT_ROWS
#endif

/* Whether the direct kernel computes this forward convolution. */
static bool conv_use_direct(const conv_geometry *g) {
#ifdef EG_CONV_X86
    if (forced_algorithm == 1 || g->dtype != EG_DTYPE_F32 || g->first) return false;
    int nv = (int)(g->og / 8);
    if (g->og % 8 != 0 || (nv != 1 && nv != 2 && nv != 4 && nv != 8) || !cpu_has_avx2_fma())
        return false;
    return forced_algorithm == 2 || g->k <= DIRECT_MAX_K;
#else
    (void)g;
    return false;
#endif
}

/* ---- forward ---- */

typedef struct conv_job {
    const conv_geometry *g;
    const char *x, *w;
    char *y;
    const char *dy;
    int64_t tiles; /* per image */
    int64_t chunk_images, n_chunks;
    char *partials;
    bool direct;
    atomic_bool failed; /* a task found no memory for its scratch space */
} conv_job;

static void *scratch(size_t bytes) {
    return aligned_alloc(64, (bytes + 63) / 64 * 64);
}

/* Tasks: (image, pixel tile). */
static void conv_forward_tasks(void *context, int64_t begin, int64_t end) {
    const conv_job *j = context;
    const conv_geometry *g = j->g;
    size_t es = g->esize;
    char *col = j->direct ? NULL : scratch((size_t)(TILE_PIXELS * g->k) * es);
    if (!j->direct && !col) {
        atomic_store(&((conv_job *)context)->failed, true);
        return;
    }
    for (int64_t task = begin; task < end; task++) {
        int64_t b = task / j->tiles, p0 = task % j->tiles * TILE_PIXELS;
        int64_t rows = g->p - p0 < TILE_PIXELS ? g->p - p0 : TILE_PIXELS;
#ifdef EG_CONV_X86
        if (j->direct) {
            const float *x = (const float *)j->x, *w = (const float *)j->w;
            float *y = (float *)j->y;
            switch (g->og / 8) {
            case 1:
                direct_rows_1(g, x, w, y, b, p0, rows);
                break;
            case 2:
                direct_rows_2(g, x, w, y, b, p0, rows);
                break;
            case 4:
                direct_rows_4(g, x, w, y, b, p0, rows);
                break;
            default:
                direct_rows_8(g, x, w, y, b, p0, rows);
                break;
            }
            continue;
        }
#endif
        for (int64_t grp = 0; grp < g->groups; grp++) {
            im2col(g, j->x, b, grp, p0, rows, col);
            const char *wg = j->w + (size_t)(grp * g->og) * es;
            if (!g->first) /* y (b, p, o) */
                gemm(g->dtype, false, false, rows, g->og, g->k, col, g->k, wg, g->out_c, 0.0,
                     j->y + (size_t)((b * g->p + p0) * g->out_c + grp * g->og) * es, g->out_c);
            else /* y (b, o, p): (og x rows) = W_g^T col^T */
                gemm(g->dtype, true, true, g->og, rows, g->k, wg, g->out_c, col, g->k, 0.0,
                     j->y + (size_t)((b * g->out_c + grp * g->og) * g->p + p0) * es, g->p);
        }
    }
    free(col);
}

static eg_status out_of_memory(const char *what) {
    return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory for scratch space", what);
}

/* x: (B, H, W, C) / (B, C, H, W), w: (KH, KW, C/groups, O) -> y: (B, OH, OW, O) / (B, O, OH, OW) */
eg_status eg__cpu_conv2d(const eg__kernel_call *call);
eg_status eg__cpu_conv2d(const eg__kernel_call *call) {
    pthread_once(&blas_once, blas_single_thread);
    const eg_tensor *x = call->inputs[0];
    eg_tensor *y = call->output;
    eg_tensor *w = eg__contiguous_temp(call->inputs[1]);
    if (!w) return eg_last_status();
    conv_geometry g = geometry(x, y, w->shape, call->attrs);
    if (g.k == 0) {
        memset(eg__data(y), 0, (size_t)y->n_elems * g.esize);
        eg__unref(w);
        return EG_OK;
    }
    conv_job job = {.g = &g, .x = eg__data(x), .w = eg__data(w), .y = eg__data(y)};
    job.direct = conv_use_direct(&g);
    job.tiles = (g.p + TILE_PIXELS - 1) / TILE_PIXELS;
    atomic_init(&job.failed, false);
    eg__parallel_for(g.x.n * job.tiles, 1, conv_forward_tasks, &job);
    eg__unref(w);
    return atomic_load(&job.failed) ? out_of_memory("conv2d") : EG_OK;
}

/* ---- gradient with respect to the input ---- */

/* Tasks: images (every tile of an image adds into the same dx rows, in a fixed order). */
static void conv_input_tasks(void *context, int64_t begin, int64_t end) {
    const conv_job *j = context;
    const conv_geometry *g = j->g;
    size_t es = g->esize;
    char *col = scratch((size_t)(TILE_PIXELS * g->k) * es);
    if (!col) {
        atomic_store(&((conv_job *)context)->failed, true);
        return;
    }
    for (int64_t b = begin; b < end; b++) {
        /* dx is contiguous in its layout: image b is one block */
        memset(j->y + (size_t)(b * g->x.sn) * es, 0, (size_t)(g->x.h * g->x.w * g->x.c) * es);
        for (int64_t p0 = 0; p0 < g->p; p0 += TILE_PIXELS) {
            int64_t rows = g->p - p0 < TILE_PIXELS ? g->p - p0 : TILE_PIXELS;
            for (int64_t grp = 0; grp < g->groups; grp++) {
                const char *wg = j->w + (size_t)(grp * g->og) * es;
                if (!g->first) /* dcol (rows x k) = dy (rows x og) W_g^T */
                    gemm(g->dtype, false, true, rows, g->k, g->og,
                         j->dy + (size_t)((b * g->p + p0) * g->out_c + grp * g->og) * es,
                         g->out_c, wg, g->out_c, 0.0, col, g->k);
                else
                    gemm(g->dtype, true, true, rows, g->k, g->og,
                         j->dy + (size_t)((b * g->out_c + grp * g->og) * g->p + p0) * es, g->p,
                         wg, g->out_c, 0.0, col, g->k);
                col2im(g, j->y, b, grp, p0, rows, col);
            }
        }
    }
    free(col);
}

/* dy: the convolution's output shape, w: (KH, KW, C/groups, O) -> dx: the input's shape */
eg_status eg__cpu_conv2d_backward_input(const eg__kernel_call *call);
eg_status eg__cpu_conv2d_backward_input(const eg__kernel_call *call) {
    pthread_once(&blas_once, blas_single_thread);
    eg_tensor *dx = call->output;
    eg_tensor *dy = eg__contiguous_temp(call->inputs[0]);
    eg_tensor *w = dy ? eg__contiguous_temp(call->inputs[1]) : NULL;
    if (!w) {
        eg__unref(dy);
        return eg_last_status();
    }
    conv_geometry g = geometry(dx, dy, w->shape, call->attrs);
    eg_status status = EG_OK;
    if (g.k == 0 || g.p == 0 || g.out_c == 0) {
        memset(eg__data(dx), 0, (size_t)dx->n_elems * g.esize);
    } else {
        conv_job job = {.g = &g, .w = eg__data(w), .y = eg__data(dx), .dy = eg__data(dy)};
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
    const conv_job *j = context;
    const conv_geometry *g = j->g;
    size_t es = g->esize, partial_elems = (size_t)(g->k * g->out_c);
    char *col = scratch((size_t)(TILE_PIXELS * g->k) * es);
    if (!col) {
        atomic_store(&((conv_job *)context)->failed, true);
        return;
    }
    for (int64_t chunk = begin; chunk < end; chunk++) {
        char *partial = j->partials + (size_t)chunk * partial_elems * es;
        memset(partial, 0, partial_elems * es);
        int64_t b_end = (chunk + 1) * j->chunk_images;
        if (b_end > g->x.n) b_end = g->x.n;
        for (int64_t b = chunk * j->chunk_images; b < b_end; b++) {
            for (int64_t p0 = 0; p0 < g->p; p0 += TILE_PIXELS) {
                int64_t rows = g->p - p0 < TILE_PIXELS ? g->p - p0 : TILE_PIXELS;
                for (int64_t grp = 0; grp < g->groups; grp++) {
                    im2col(g, j->x, b, grp, p0, rows, col);
                    char *pg = partial + (size_t)(grp * g->og) * es;
                    if (!g->first) /* (k x og) += col^T dy */
                        gemm(g->dtype, true, false, g->k, g->og, rows, col, g->k,
                             j->dy + (size_t)((b * g->p + p0) * g->out_c + grp * g->og) * es,
                             g->out_c, 1.0, pg, g->out_c);
                    else
                        gemm(g->dtype, true, true, g->k, g->og, rows, col, g->k,
                             j->dy + (size_t)((b * g->out_c + grp * g->og) * g->p + p0) * es,
                             g->p, 1.0, pg, g->out_c);
                }
            }
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

/* x: the input, dy: the convolution's output shape -> dw: (KH, KW, C/groups, O) */
eg_status eg__cpu_conv2d_backward_filter(const eg__kernel_call *call);
eg_status eg__cpu_conv2d_backward_filter(const eg__kernel_call *call) {
    pthread_once(&blas_once, blas_single_thread);
    const eg_tensor *x = call->inputs[0];
    eg_tensor *dw = call->output;
    eg_tensor *dy = eg__contiguous_temp(call->inputs[1]);
    if (!dy) return eg_last_status();
    conv_geometry g = geometry(x, dy, dw->shape, call->attrs);
    conv_job job = {.g = &g, .x = eg__data(x), .dy = eg__data(dy)};
    atomic_init(&job.failed, false);
    job.chunk_images = (g.x.n + FILTER_CHUNKS - 1) / FILTER_CHUNKS;
    if (job.chunk_images < 1) job.chunk_images = 1;
    job.n_chunks = (g.x.n + job.chunk_images - 1) / job.chunk_images;
    eg_status status = EG_OK;
    size_t n = (size_t)dw->n_elems;
    if (job.n_chunks == 0 || g.p == 0) {
        memset(eg__data(dw), 0, n * g.esize);
    } else {
        job.partials = scratch((size_t)job.n_chunks * n * g.esize);
        if (job.partials) eg__parallel_for(job.n_chunks, 1, conv_filter_tasks, &job);
        if (!job.partials || atomic_load(&job.failed)) {
            status = out_of_memory("conv2d_backward_filter");
        } else {
            sum_job s = {eg__data(dw), job.partials, job.n_chunks, (int64_t)n, g.dtype};
            eg__parallel_for((int64_t)n, EG_PARALLEL_GRAIN_ELEMENTWISE, sum_partials, &s);
        }
        free(job.partials);
    }
    eg__unref(dy);
    return status;
}
