/* CPU 2-d pooling: max and average pooling over NHWC or NCHW images (any strides), their
 * gradients, and the argmax indices that max pooling's second-order gradient gathers with.
 * Forward tasks are output rows, gradient tasks whole images (overlapping windows add into the
 * same input elements in a fixed order), so results never depend on the thread count. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kernels.h"
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

/* Tasks: output rows (image, oh). */
static void forward_tasks(void *context, int64_t begin, int64_t end) {
    pool_job *j = context;
    const pool_geometry *g = j->g;
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
    if (x->dtype == EG_DTYPE_F32 && x->n_elems / (x->shape[0] ? x->shape[0] : 1) > INT32_MAX)
        return eg__error(EG_ERR_UNSUPPORTED,
                         "max_pool2d_backward: f32 images of more than 2^31 elements each");
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
