/* CPU 2-d pooling: max and average pooling over NHWC or NCHW images (any strides), their
 * gradients, and the argmax indices that max pooling's second-order gradient gathers with.
 * Forward tasks are output rows, gradient tasks whole images (overlapping windows add into the
 * same input elements in a fixed order), so results never depend on the thread count. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kernels.h"
#include "backend/cpu/lowp.h"
#include "backend/cpu/lowp_simd.h"
#include "base/cpu_features.h"
#include "base/error.h"

typedef struct pool_geometry {
    eg__image x, y, dx; /* input, output (or its gradient), input gradient */
    int64_t kh, kw, stride_h, stride_w, pad_t, pad_l;
    bool channels_first;
    void *out_index; /* max_pool2d_argmax's i64 output */
} pool_geometry;

#define POOL_TARGET
#define T       float
#define IDX     int32_t
#define NAME(x) x##_f32
#include "backend/cpu/pool_impl.h"
#undef T
#undef IDX
#undef NAME
#define T       double
#define IDX     int64_t
#define NAME(x) x##_f64
#include "backend/cpu/pool_impl.h"
#undef T
#undef IDX
#undef NAME
#undef POOL_TARGET

/* The f32 loops again for AVX2 and for AVX-512, chosen at the dispatch level: the max gradient's
 * compare-and-select chains are several times cheaper in wide registers with blends or masks than
 * in SSE2's and/andnot/or. Maxima and selects are exact and the means add in the same order, so
 * every variant gives the same bits. GCC uses 512-bit vectors only when asked to prefer them;
 * clang knows no such target option. */
#if defined(__x86_64__) || defined(__i386__)
#define POOL_X86 1
#define POOL_TARGET __attribute__((target("avx2")))
#define T           float
#define IDX         int32_t
#define NAME(x)     x##_f32_avx2
#include "backend/cpu/pool_impl.h"
#undef T
#undef IDX
#undef NAME
#undef POOL_TARGET
#ifdef __clang__
#define POOL_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2")))
#else
#define POOL_TARGET                                                                                \
    __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,prefer-vector-width=512")))
#endif
#define T       float
#define IDX     int32_t
#define NAME(x) x##_f32_avx512
#include "backend/cpu/pool_impl.h"
#undef T
#undef IDX
#undef NAME
#undef POOL_TARGET
#endif

static pool_geometry geometry(const eg_tensor *x, const eg_tensor *y, const eg__attrs *attrs) {
    const eg__window *w = &attrs->window;
    pool_geometry g = {0};
    g.channels_first = w->channels_first;
    g.x = eg__image_of(x, g.channels_first);
    g.y = eg__image_of(y, g.channels_first);
    g.kh = w->kernel[0];
    g.kw = w->kernel[1];
    g.stride_h = w->stride[0];
    g.stride_w = w->stride[1];
    g.pad_t = w->pad[0];
    g.pad_l = w->pad[2];
    return g;
}

typedef struct pool_job {
    const pool_geometry *g;
    eg_dtype dtype;
    const void *x, *dy;
    void *y;
    bool is_max, with_index;
    eg__cpu_level level; /* the dispatch level, read once per call */
    atomic_bool failed;
} pool_job;

/* Scratch for C values and C indices; NULL (and the job marked failed) when out of memory. */
static void *row_scratch(pool_job *j) {
    void *s = malloc((size_t)(j->g->x.c > 0 ? j->g->x.c : 1) * 16);
    if (!s) atomic_store(&j->failed, true);
    return s;
}

/* The f32 loops at the job's level. */
static void pool_row_f32_at(eg__cpu_level level, const pool_geometry *g, const float *x, float *y,
                            int64_t *index, float *best, int64_t b, int64_t oh, bool is_max) {
#ifdef POOL_X86
    if (level >= EG__CPU_AVX512) {
        pool_row_f32_avx512(g, x, y, index, best, b, oh, is_max);
        return;
    }
    if (level >= EG__CPU_AVX2) {
        pool_row_f32_avx2(g, x, y, index, best, b, oh, is_max);
        return;
    }
#else
    (void)level;
#endif
    pool_row_f32(g, x, y, index, best, b, oh, is_max);
}

static void pool_backward_image_f32_at(eg__cpu_level level, const pool_geometry *g,
                                       const float *x, const float *dy, float *dx, int32_t *index,
                                       float *best, int64_t b, bool is_max) {
#ifdef POOL_X86
    if (level >= EG__CPU_AVX512) {
        pool_backward_image_f32_avx512(g, x, dy, dx, index, best, b, is_max);
        return;
    }
    if (level >= EG__CPU_AVX2) {
        pool_backward_image_f32_avx2(g, x, dy, dx, index, best, b, is_max);
        return;
    }
#else
    (void)level;
#endif
    pool_backward_image_f32(g, x, dy, dx, index, best, b, is_max);
}

/* ---- bf16 and f16: the f32 loops on widened copies (lowp.h) ----
 *
 * An image's rows are widened into an f32 copy laid out NHWC (channels contiguous, whatever the
 * input's layout, so that NCHW runs the vectorized channel loops too), the f32 loops run on it
 * with a geometry describing the copy, and their f32 results are rounded once into the output.
 * Maxima are exact and means divide the f32 sum, as in f32. */

/* An (h, w, c) image with channels innermost, n images of sn = 0 apart (one copy reused). */
static eg__image packed_image(int64_t h, int64_t w, int64_t c) {
    eg__image image = {1, h, w, c, 0, w * c, c, 1};
    return image;
}

/* Row i of a bf16 / f16 image (geometry im, image b of src) widened into row i of an f32 copy
 * (geometry to, one image: channels innermost, or channel planes): runs along the copy's
 * contiguous axis, gathering from im's strides. */
static void widen_row(eg_dtype dtype, const char *src, const eg__image *im, int64_t b, int64_t i,
                      float *dst, const eg__image *to) {
    const char *row = src + 2 * (b * im->sn + i * im->sh);
    float *out = dst + i * to->sh;
    if (to->sc == 1 && im->sc == 1 && im->sw == im->c) {
        eg__lowp_widen(dtype, im->w * im->c, row, 2, out);
    } else if (to->sc == 1) {
        for (int64_t w = 0; w < im->w; w++)
            eg__lowp_widen(dtype, im->c, row + 2 * w * im->sw, 2 * im->sc, out + w * to->sw);
    } else {
        for (int64_t c = 0; c < im->c; c++)
            eg__lowp_widen(dtype, im->w, row + 2 * c * im->sc, 2 * im->sw, out + c * to->sc);
    }
}

/* Row i of an f32 copy (geometry from) rounded into row i of image b of a bf16 / f16 image. */
static void narrow_row(eg_dtype dtype, const float *src, const eg__image *from, int64_t i,
                       char *dst, const eg__image *im, int64_t b) {
    char *row = dst + 2 * (b * im->sn + i * im->sh);
    const float *in = src + i * from->sh;
    if (from->sc == 1 && im->sc == 1 && im->sw == im->c) {
        eg__lowp_narrow(dtype, im->w * im->c, in, row, 2);
    } else if (from->sc == 1) {
        for (int64_t w = 0; w < im->w; w++)
            eg__lowp_narrow(dtype, im->c, in + w * from->sw, row + 2 * w * im->sw, 2 * im->sc);
    } else {
        for (int64_t c = 0; c < im->c; c++)
            eg__lowp_narrow(dtype, im->w, in + c * from->sc, row + 2 * c * im->sc, 2 * im->sw);
    }
}

/* A one-image f32 copy of im's shape: channels innermost, or, with channels_first, channel
 * planes (sh = w, sw = 1, sc = h w), as the gradient loops must see the layout the f32 kernel
 * would (its tiled NHWC path writes dy where the general one adds it to +0: -0 differs). */
static eg__image copy_image(const eg__image *im, bool channels_first) {
    if (!channels_first) return packed_image(im->h, im->w, im->c);
    eg__image image = {1, im->h, im->w, im->c, 0, im->w, 1, im->h * im->w};
    return image;
}

#ifdef EG__LOWP_X86
/* NHWC (channels contiguous in x and y) max and average pooling of bf16 / f16 read and written
 * in place, 16 channels at a time widened in registers: a separate widening pass would wait on
 * memory with nothing to overlap it. The f32 row loop's operations in its order: the window's
 * first tap, then max(v, acc) (v > acc ? v : acc, NaN rules included) or acc + v over the taps
 * in row-major order, the mean divided by the f32 count; rounded once. */
#define POOL_ROW_16(NAME, TARGET, STORE)                                                           \
    TARGET static void NAME(const pool_geometry *g, const uint16_t *x, uint16_t *y, int64_t b,     \
                            int64_t oh, bool is_max, bool bf16) {                                  \
        const uint16_t *xb = x + b * g->x.sn;                                                      \
        int64_t C = g->x.c;                                                                        \
        for (int64_t ow = 0; ow < g->y.w; ow++) {                                                  \
            int64_t i0, i1, j0, j1;                                                                \
            window_f32(g, oh, ow, &i0, &i1, &j0, &j1);                                             \
            uint16_t *out = y + b * g->y.sn + oh * g->y.sh + ow * g->y.sw;                         \
            const uint16_t *first = xb + i0 * g->x.sh + j0 * g->x.sw;                              \
            float count = (float)((i1 - i0) * (j1 - j0));                                          \
            for (int64_t c = 0; c < C; c += 16) {                                                  \
                __mmask16 m = C - c >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (C - c)) - 1);  \
                __m512 acc = eg__lowp_load16(bf16, first + c, m);                                  \
                for (int64_t i = i0; i < i1; i++)                                                  \
                    for (int64_t j = i == i0 ? j0 + 1 : j0; j < j1; j++) {                         \
                        __m512 v = eg__lowp_load16(bf16, xb + i * g->x.sh + j * g->x.sw + c, m);   \
                        acc = is_max ? _mm512_max_ps(v, acc) : _mm512_add_ps(acc, v);              \
                    }                                                                              \
                if (!is_max) acc = _mm512_div_ps(acc, _mm512_set1_ps(count));                      \
                STORE(bf16, out + c, m, acc);                                                      \
            }                                                                                      \
        }                                                                                          \
    }
POOL_ROW_16(pool_row_lowp_avx512, EG__LOWP_AVX512_TARGET, eg__lowp_store16)
POOL_ROW_16(pool_row_lowp_native, EG__LOWP_AVX512_BF16_TARGET, eg__lowp_store16_native)
#undef POOL_ROW_16

/* The max gradient of image b when the windows tile it (pool_impl.h's max_backward_tiled: the
 * same first-maximum selects, each dx element written once: dy at its window's winner, +0
 * elsewhere, and at the rows and columns no window covers), read and written in bf16 / f16. */
#define MAX_BACKWARD_TILED_16(NAME, TARGET, STORE)                                                 \
    TARGET static void NAME(const pool_geometry *g, const uint16_t *x, const uint16_t *dy,         \
                            uint16_t *dx, int64_t b, bool bf16) {                                  \
        const int64_t C = g->x.c, kh = g->kh, kw = g->kw;                                          \
        const uint16_t *xb = x + b * g->x.sn, *dyb = dy + b * g->y.sn;                             \
        uint16_t *dxb = dx + b * g->dx.sn;                                                         \
        for (int64_t i = 0; i < g->dx.h; i++)                                                      \
            for (int64_t j = 0; j < g->dx.w; j++)                                                  \
                if (i >= g->y.h * kh || j >= g->y.w * kw)                                          \
                    memset(dxb + i * g->dx.sh + j * g->dx.sw, 0, 2 * (size_t)C);                   \
        for (int64_t oh = 0; oh < g->y.h; oh++)                                                    \
            for (int64_t ow = 0; ow < g->y.w; ow++) {                                              \
                const uint16_t *x0 = xb + oh * kh * g->x.sh + ow * kw * g->x.sw;                   \
                const uint16_t *grad = dyb + oh * g->y.sh + ow * g->y.sw;                          \
                for (int64_t c = 0; c < C; c += 16) {                                              \
                    __mmask16 m =                                                                  \
                        C - c >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (C - c)) - 1);        \
                    __m512 best = eg__lowp_load16(bf16, x0 + c, m);                                \
                    __m512i at = _mm512_setzero_si512();                                           \
                    for (int64_t t = 1; t < kh * kw; t++) {                                        \
                        __m512 v = eg__lowp_load16(                                                \
                            bf16, x0 + (t / kw) * g->x.sh + (t % kw) * g->x.sw + c, m);            \
                        __mmask16 wins = _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ);                  \
                        best = _mm512_mask_mov_ps(best, wins, v);                                  \
                        at = _mm512_mask_mov_epi32(at, wins, _mm512_set1_epi32((int)t));           \
                    }                                                                              \
                    __m512 gc = eg__lowp_load16(bf16, grad + c, m);                                \
                    for (int64_t t = 0; t < kh * kw; t++) {                                        \
                        __mmask16 here = _mm512_cmpeq_epi32_mask(at, _mm512_set1_epi32((int)t));   \
                        uint16_t *dp = dxb + (oh * kh + t / kw) * g->dx.sh +                       \
                                       (ow * kw + t % kw) * g->dx.sw + c;                          \
                        STORE(bf16, dp, m, _mm512_maskz_mov_ps(here, gc));                         \
                    }                                                                              \
                }                                                                                  \
            }                                                                                      \
    }
MAX_BACKWARD_TILED_16(max_backward_tiled_lowp_avx512, EG__LOWP_AVX512_TARGET, eg__lowp_store16)
MAX_BACKWARD_TILED_16(max_backward_tiled_lowp_native, EG__LOWP_AVX512_BF16_TARGET,
                      eg__lowp_store16_native)
#undef MAX_BACKWARD_TILED_16
#endif

/* Forward tasks (output rows) in bf16 / f16: the input rows their windows read are widened as
 * the rows advance (each once per run of tasks on the same image), the f32 row loop writes an
 * f32 row (or, with indices, the i64 output itself), which is rounded into the output. */
static void forward_tasks_lowp(pool_job *j, int64_t begin, int64_t end) {
    const pool_geometry *g = j->g;
#ifdef EG__LOWP_X86
    bool bf16 = j->dtype == EG_DTYPE_BF16;
    if (!j->with_index && g->x.sc == 1 && g->y.sc == 1 && j->level >= EG__CPU_AVX512 &&
        (bf16 || eg__cpu_has_f16c())) {
        bool native = bf16 && eg__cpu_has_avx512_bf16();
        for (int64_t task = begin; task < end; task++) {
            int64_t b = task / g->y.h, oh = task % g->y.h;
            if (native)
                pool_row_lowp_native(g, j->x, j->y, b, oh, j->is_max, bf16);
            else
                pool_row_lowp_avx512(g, j->x, j->y, b, oh, j->is_max, bf16);
        }
        return;
    }
#endif
    int64_t H = g->x.h, W = g->x.w, C = g->x.c;
    size_t image_floats = (size_t)(H * W * C), row_floats = (size_t)(g->y.w * C);
    size_t index_at = image_floats + row_floats + (size_t)C;
    index_at += index_at & 1; /* 8-byte aligned */
    float *image = malloc(sizeof(float) * (index_at + 2 * (size_t)C));
    if (!image) {
        atomic_store(&j->failed, true);
        return;
    }
    float *row = image + image_floats, *best = row + row_floats;
    int64_t *index = j->with_index ? (int64_t *)(void *)(image + index_at) : NULL;
    pool_geometry local = *g;
    local.x = packed_image(H, W, C); /* channels innermost whatever x's layout: the fast loops */
    if (!j->with_index) { /* one packed output row, rewritten per task */
        local.y = packed_image(1, g->y.w, C);
        local.y.sh = 0;
    }
    int64_t cached_b = -1, lo = 0, hi = 0; /* rows [lo, hi) of image cached_b are widened */
    for (int64_t task = begin; task < end; task++) {
        int64_t b = task / g->y.h, oh = task % g->y.h, h0 = oh * g->stride_h - g->pad_t;
        int64_t i0 = h0 < 0 ? 0 : h0, i1 = h0 + g->kh < H ? h0 + g->kh : H;
        if (b != cached_b || i0 < lo || i0 > hi) {
            cached_b = b;
            lo = hi = i0;
        }
        for (; hi < i1; hi++) widen_row(j->dtype, j->x, &g->x, b, hi, image, &local.x);
        pool_row_f32_at(j->level, &local, image, row, index, best, b, oh, j->is_max);
        if (!j->with_index) narrow_row(j->dtype, row, &local.y, oh, j->y, &g->y, b); /* sh: 0 */
    }
    free(image);
}

/* Gradient tasks (images) in bf16 / f16: x (max) and dy widened whole, the f32 image loop into
 * an f32 dx, rounded into dx. */
static void backward_tasks_lowp(pool_job *j, int64_t begin, int64_t end) {
    const pool_geometry *g = j->g;
#ifdef EG__LOWP_X86
    bool bf16 = j->dtype == EG_DTYPE_BF16;
    if (j->is_max && g->stride_h == g->kh && g->stride_w == g->kw && g->pad_t == 0 &&
        g->pad_l == 0 && g->y.h * g->kh <= g->x.h && g->y.w * g->kw <= g->x.w && g->x.sc == 1 &&
        g->y.sc == 1 && g->dx.sc == 1 && j->level >= EG__CPU_AVX512 &&
        (bf16 || eg__cpu_has_f16c())) {
        bool native = bf16 && eg__cpu_has_avx512_bf16();
        for (int64_t b = begin; b < end; b++) {
            if (native)
                max_backward_tiled_lowp_native(g, j->x, j->dy, j->y, b, bf16);
            else
                max_backward_tiled_lowp_avx512(g, j->x, j->dy, j->y, b, bf16);
        }
        return;
    }
#endif
    int64_t H = g->dx.h, W = g->dx.w, C = g->dx.c, OH = g->y.h, OW = g->y.w;
    size_t image_floats = (size_t)(H * W * C), grad_floats = (size_t)(OH * OW * C);
    size_t total = (j->is_max ? 2 : 1) * image_floats + grad_floats + 2 * (size_t)C;
    float *scratch = malloc(sizeof(float) * total);
    if (!scratch) {
        atomic_store(&j->failed, true);
        return;
    }
    float *dx = scratch, *dy = dx + image_floats, *best = dy + grad_floats;
    int32_t *index = (int32_t *)(void *)(best + C);
    float *x = j->is_max ? (float *)(void *)(index + C) : NULL;
    pool_geometry local = *g;
    /* the f32 kernel's tiled path needs channels innermost in x and dx: keep to the layout */
    bool planes = !(g->x.sc == 1 && g->dx.sc == 1);
    local.x = local.dx = copy_image(&g->dx, planes);
    local.y = copy_image(&g->y, planes);
    for (int64_t b = begin; b < end; b++) {
        for (int64_t i = 0; j->is_max && i < H; i++)
            widen_row(j->dtype, j->x, &g->x, b, i, x, &local.x);
        for (int64_t i = 0; i < OH; i++) widen_row(j->dtype, j->dy, &g->y, b, i, dy, &local.y);
        pool_backward_image_f32_at(j->level, &local, x, dy, dx, index, best, 0, j->is_max);
        for (int64_t i = 0; i < H; i++) narrow_row(j->dtype, dx, &local.dx, i, j->y, &g->dx, b);
    }
    free(scratch);
}

/* Tasks: output rows (image, oh). */
static void forward_tasks(void *context, int64_t begin, int64_t end) {
    pool_job *j = context;
    const pool_geometry *g = j->g;
    if (eg__is_lowp(j->dtype)) {
        forward_tasks_lowp(j, begin, end);
        return;
    }
    void *s = j->with_index ? row_scratch(j) : NULL;
    if (j->with_index && !s) return;
    int64_t *index = s;
    char *best = s ? (char *)s + (size_t)g->x.c * 8 : NULL;
    for (int64_t task = begin; task < end; task++) {
        int64_t b = task / g->y.h, oh = task % g->y.h;
        if (j->dtype == EG_DTYPE_F32) {
#ifdef POOL_X86
            if (j->level >= EG__CPU_AVX512) {
                pool_row_f32_avx512(g, j->x, j->y, index, (float *)best, b, oh, j->is_max);
                continue;
            }
            if (j->level >= EG__CPU_AVX2) {
                pool_row_f32_avx2(g, j->x, j->y, index, (float *)best, b, oh, j->is_max);
                continue;
            }
#endif
            pool_row_f32(g, j->x, j->y, index, (float *)best, b, oh, j->is_max);
        } else
            pool_row_f64(g, j->x, j->y, index, (double *)best, b, oh, j->is_max);
    }
    free(s);
}

/* Tasks: images. */
static void backward_tasks(void *context, int64_t begin, int64_t end) {
    pool_job *j = context;
    const pool_geometry *g = j->g;
    if (eg__is_lowp(j->dtype)) {
        backward_tasks_lowp(j, begin, end);
        return;
    }
    void *s = row_scratch(j);
    if (!s) return;
    int64_t *index = s;
    char *best = (char *)s + (size_t)g->x.c * 8;
    for (int64_t b = begin; b < end; b++) {
        if (j->dtype == EG_DTYPE_F32) {
#ifdef POOL_X86
            if (j->level >= EG__CPU_AVX512) {
                pool_backward_image_f32_avx512(g, j->x, j->dy, j->y, (int32_t *)index,
                                               (float *)best, b, j->is_max);
                continue;
            }
            if (j->level >= EG__CPU_AVX2) {
                pool_backward_image_f32_avx2(g, j->x, j->dy, j->y, (int32_t *)index,
                                             (float *)best, b, j->is_max);
                continue;
            }
#endif
            pool_backward_image_f32(g, j->x, j->dy, j->y, (int32_t *)index, (float *)best, b,
                                    j->is_max);
        } else
            pool_backward_image_f64(g, j->x, j->dy, j->y, index, (double *)best, b, j->is_max);
    }
    free(s);
}

static eg_status finish(pool_job *job, const char *name) {
    if (!atomic_load(&job->failed)) return EG_OK;
    return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory for scratch space", name);
}

/* Rows of output per task below which one thread does everything. */
static int64_t row_grain(const pool_geometry *g) {
    int64_t per_row = g->y.w * g->x.c * g->kh * g->kw;
    return EG_PARALLEL_GRAIN_ELEMENTWISE / (per_row > 0 ? per_row : 1) + 1;
}

static eg_status pool_forward(const eg__kernel_call *call, bool is_max, bool with_index,
                              const char *name) {
    const eg_tensor *x = call->inputs[0];
    pool_geometry g = geometry(x, call->output, call->attrs);
    pool_job job = {.g = &g, .dtype = x->dtype, .x = eg__data(x), .is_max = is_max};
    job.with_index = with_index;
    job.level = eg__cpu_active_level();
    if (with_index)
        g.out_index = eg__data(call->output);
    else
        job.y = eg__data(call->output);
    atomic_init(&job.failed, false);
    eg__parallel_for(g.y.n * g.y.h, row_grain(&g), forward_tasks, &job);
    return finish(&job, name);
}

/* x: (B, H, W, C) / (B, C, H, W) -> y: (B, OH, OW, C) / (B, C, OH, OW) */
eg_status eg__cpu_max_pool2d(const eg__kernel_call *call);
eg_status eg__cpu_max_pool2d(const eg__kernel_call *call) {
    return pool_forward(call, true, false, "max_pool2d");
}

eg_status eg__cpu_avg_pool2d(const eg__kernel_call *call);
eg_status eg__cpu_avg_pool2d(const eg__kernel_call *call) {
    return pool_forward(call, false, false, "avg_pool2d");
}

/* x -> i64 y-shaped: flat index into x (row-major in x's shape) of each window's first max */
eg_status eg__cpu_max_pool2d_argmax(const eg__kernel_call *call);
eg_status eg__cpu_max_pool2d_argmax(const eg__kernel_call *call) {
    return pool_forward(call, true, true, "max_pool2d_argmax");
}

/* x, dy (y-shaped) -> dx (x-shaped) */
eg_status eg__cpu_max_pool2d_backward(const eg__kernel_call *call);
eg_status eg__cpu_max_pool2d_backward(const eg__kernel_call *call) {
    const eg_tensor *x = call->inputs[0], *dy = call->inputs[1];
    if ((x->dtype == EG_DTYPE_F32 || eg__is_lowp(x->dtype)) &&
        x->n_elems / (x->shape[0] ? x->shape[0] : 1) > INT32_MAX)
        return eg__error(EG_ERR_UNSUPPORTED,
                         "max_pool2d_backward: %s images of more than 2^31 elements each",
                         eg_dtype_name(x->dtype));
    pool_geometry g = geometry(x, dy, call->attrs);
    g.dx = eg__image_of(call->output, g.channels_first);
    pool_job job = {.g = &g, .dtype = x->dtype, .x = eg__data(x), .dy = eg__data(dy)};
    job.y = eg__data(call->output);
    job.is_max = true;
    job.level = eg__cpu_active_level();
    atomic_init(&job.failed, false);
    eg__parallel_for(g.x.n, 1, backward_tasks, &job);
    return finish(&job, "max_pool2d_backward");
}

/* dy (y-shaped) -> dx (attrs->shape) */
eg_status eg__cpu_avg_pool2d_backward(const eg__kernel_call *call);
eg_status eg__cpu_avg_pool2d_backward(const eg__kernel_call *call) {
    const eg_tensor *dy = call->inputs[0];
    eg_tensor *dx = call->output;
    pool_geometry g = geometry(dx, dy, call->attrs);
    g.dx = eg__image_of(dx, g.channels_first);
    pool_job job = {.g = &g, .dtype = dy->dtype, .dy = eg__data(dy), .y = eg__data(dx)};
    job.level = eg__cpu_active_level();
    atomic_init(&job.failed, false);
    eg__parallel_for(g.x.n, 1, backward_tasks, &job);
    return finish(&job, "avg_pool2d_backward");
}
