/* 2-d convolution on a GPU through cuDNN's legacy API: forward, gradient with respect to the
 * input (also the transposed convolution) and with respect to the filter, for NHWC and NCHW
 * images of any strides and HWIO filters, f32 and f64. Reference: src/backend/cpu/conv.c.
 *
 * What cuDNN is given, and why:
 * - Dense images in one layout: f32 in the op's own (CUDNN_TENSOR_NHWC or NCHW), f64 always in
 *   NCHW (cuDNN's double-precision kernels are NCHW ones; PyTorch keeps double off NHWC for that
 *   reason). Inputs already dense in that layout are passed as they are; others are repacked
 *   into scratch (eg__cuda_dnn_repack), and results written in another layout are repacked back.
 * - The filter as KRSC (NHWC) or KCRS (NCHW), transposed from HWIO into scratch; the filter
 *   gradient is computed in that layout and transposed back into the HWIO result.
 * - Symmetric padding: cuDNN pads both sides of an axis alike. Of Eagle's explicit, possibly
 *   asymmetric padding, the part both sides share (at most the dilated filter's span - 1) goes
 *   to cuDNN; the rest is written as zero rows and columns into the repacked input (forward,
 *   filter gradient). The input gradient is computed for that padded input and cropped. This is
 *   exact: a zero that was read as padding and a zero in the input are the same term, and the
 *   gradient of the padded input restricted to the original elements is the input's gradient.
 * - Algorithms by cuDNN's heuristics (cudnnGetConvolution*Algorithm_v7), chosen once per shape
 *   and cached (a mutex-guarded table keyed by device, kind, dtype, layout, math mode and the
 *   whole geometry). Not cudnnFind*Ex: it runs every algorithm and waits for the GPU, which an
 *   asynchronous op must not do (and cannot inside a CUDA graph capture). The heuristics' list
 *   is reordered: deterministic algorithms first (for every kind, not only the gradients, so
 *   that the same call gives the same bits every run, as the CPU's fixed summation order does),
 *   FFT-based ones after the others (their rounding differs most from a direct sum), then the
 *   non-deterministic ones, used only where nothing else runs the shape. The first algorithm of
 *   that list that cuDNN accepts and whose workspace can be allocated runs; it is remembered
 *   unless an earlier one was skipped only for lack of memory. The summation order inside an
 *   algorithm is cuDNN's, not the CPU's: results agree up to float rounding.
 * - Math: f32 uses CUDNN_FMA_MATH (plain FP32 FMA kernels: cuDNN's CUDNN_DEFAULT_MATH permits
 *   TF32 tensor cores on Ampere and later), CUDNN_DEFAULT_MATH with EG_CUDA_TF32=1 (read once);
 *   f64 CUDNN_DEFAULT_MATH.
 * - Workspace: scratch from the device's allocator per call, freed once enqueued.
 * - cuDNN takes int dims: the batch is cut into chunks of at most 2^31 - 1 elements per tensor
 *   (the filter gradient adds the chunks up with beta = 1, in batch order); a single image or
 *   filter larger than that is EG_ERR_UNSUPPORTED.
 * One cuDNN handle per device (eg__cuda_device.dnn, made under the device's mutex, bound to its
 * stream); a handle must not be used by two threads at once, so every use holds a per-device
 * lock. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/copy_launch.h"
#include "backend/cuda/dnn.h"
#include "backend/cuda/libraries.h"
#include "base/error.h"

typedef enum conv_kind { CONV_FORWARD, CONV_DATA, CONV_FILTER } conv_kind;

/* The most algorithms of one kind (CUDNN_CONVOLUTION_FWD_ALGO_COUNT). */
#define MAX_ALGOS 8

/* ---- geometry ---- */

typedef struct conv_geometry {
    conv_kind kind;
    eg_dtype dtype;
    size_t esize;
    bool first;               /* Eagle's layout is NCHW */
    bool nhwc;                /* cuDNN's layout */
    int64_t n, c, h, w;       /* the convolution's input image */
    int64_t k, oh, ow;        /* its output */
    int64_t r, s, cg;         /* the filter: HWIO = (r, s, cg, k) */
    int64_t pad_h, pad_w;     /* the symmetric padding cuDNN adds */
    int64_t extra_t, extra_l; /* padding written into the repacked input, before ... */
    int64_t he, we;           /* ... and the input's height and width with all of it */
    int64_t stride_h, stride_w, dil_h, dil_w, groups;
} conv_geometry;

/* The input shape x, filter shape w and output shape y of the convolution call computes (or
 * whose gradient it computes). */
static conv_geometry geometry_of(const eg__kernel_call *call, conv_kind kind) {
    const eg__window *win = &call->attrs->window;
    const int64_t *x = kind == CONV_DATA ? call->output->shape : call->inputs[0]->shape;
    const int64_t *w = kind == CONV_FILTER ? call->output->shape : call->inputs[1]->shape;
    const int64_t *y = kind == CONV_FORWARD ? call->output->shape
                       : kind == CONV_DATA  ? call->inputs[0]->shape
                                            : call->inputs[1]->shape;
    bool first = win->channels_first;
    int ah = first ? 2 : 1, aw = first ? 3 : 2, ac = first ? 1 : 3;
    conv_geometry g = {.kind = kind, .dtype = call->output->dtype, .first = first};
    g.esize = eg__dtype_size(g.dtype);
    g.nhwc = !first && g.dtype == EG_DTYPE_F32;
    g.n = x[0];
    g.h = x[ah];
    g.w = x[aw];
    g.c = x[ac];
    g.oh = y[ah];
    g.ow = y[aw];
    g.k = y[ac];
    g.r = w[0];
    g.s = w[1];
    g.cg = w[2];
    g.stride_h = win->stride[0];
    g.stride_w = win->stride[1];
    g.dil_h = win->dilation[0];
    g.dil_w = win->dilation[1];
    g.groups = win->groups;
    /* cuDNN pads by the part both sides share, and less than the dilated span (a window reading
     * padding alone is left to the explicit rows, whatever cuDNN thinks of it) */
    int64_t span_h = g.dil_h * (g.r - 1) + 1, span_w = g.dil_w * (g.s - 1) + 1;
    int64_t sym_h = win->pad[0] < win->pad[1] ? win->pad[0] : win->pad[1];
    int64_t sym_w = win->pad[2] < win->pad[3] ? win->pad[2] : win->pad[3];
    g.pad_h = sym_h < span_h - 1 ? sym_h : span_h - 1;
    g.pad_w = sym_w < span_w - 1 ? sym_w : span_w - 1;
    g.extra_t = win->pad[0] - g.pad_h;
    g.extra_l = win->pad[2] - g.pad_w;
    g.he = g.h + g.extra_t + win->pad[1] - g.pad_h;
    g.we = g.w + g.extra_l + win->pad[3] - g.pad_w;
    return g;
}

/* Images per cuDNN call: as many as keep every tensor within int range. */
static eg_status chunk_images(const eg__kernel_call *call, const conv_geometry *g, int64_t *chunk) {
    int64_t per_x = g->c * g->he * g->we, per_y = g->k * g->oh * g->ow;
    int64_t per = per_x > per_y ? per_x : per_y, filter = g->k * g->r * g->s * g->cg;
    if (per > INT32_MAX || filter > INT32_MAX || g->stride_h > INT32_MAX ||
        g->stride_w > INT32_MAX || g->pad_h > INT32_MAX || g->pad_w > INT32_MAX)
        return eg__op_error(call->op, EG_ERR_UNSUPPORTED,
                            "on %s: cuDNN takes at most 2^31 - 1 elements per image (here %lld, "
                            "padded) and per filter (%lld)",
                            call->output->device->name, (long long)per, (long long)filter);
    int64_t fit = INT32_MAX / per;
    *chunk = g->n < fit ? g->n : fit;
    return EG_OK;
}

/* ---- the algorithm table ---- */

/* One cuDNN problem: all ints, so that memcmp compares keys (no padding bytes). */
typedef struct conv_key {
    int kind, device, dtype, nhwc, math;
    int n, c, h, w, k, r, s, cg, oh, ow;
    int pad_h, pad_w, stride_h, stride_w, dil_h, dil_w, groups;
} conv_key;

static conv_key key_of(const conv_geometry *g, int device, int64_t images) {
    conv_key key;
    memset(&key, 0, sizeof key);
    key.kind = (int)g->kind;
    key.device = device;
    key.dtype = (int)g->dtype;
    key.nhwc = g->nhwc;
    key.math =
        g->dtype == EG_DTYPE_F32 && !eg__cuda_tf32_allowed() ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH;
    key.n = (int)images;
    key.c = (int)g->c;
    key.h = (int)g->he;
    key.w = (int)g->we;
    key.k = (int)g->k;
    key.r = (int)g->r;
    key.s = (int)g->s;
    key.cg = (int)g->cg;
    key.oh = (int)g->oh;
    key.ow = (int)g->ow;
    key.pad_h = (int)g->pad_h;
    key.pad_w = (int)g->pad_w;
    key.stride_h = (int)g->stride_h;
    key.stride_w = (int)g->stride_w;
    key.dil_h = (int)g->dil_h;
    key.dil_w = (int)g->dil_w;
    key.groups = (int)g->groups;
    return key;
}

typedef struct algo_entry {
    conv_key key;
    int n_candidates;
    int algos[MAX_ALGOS]; /* in the order they are tried */
    bool deterministic[MAX_ALGOS];
    atomic_int chosen; /* index into algos; -1 until one has run */
    char note[160];    /* written before chosen is set, never after */
    struct algo_entry *next;
} algo_entry;

/* Entries live until the process ends: one per shape a program convolves. */
#define BUCKETS 256
static algo_entry *buckets[BUCKETS];
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;

static unsigned key_hash(const conv_key *key) {
    const unsigned char *b = (const unsigned char *)key;
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < sizeof *key; i++) h = (h ^ b[i]) * 16777619u;
    return h % BUCKETS;
}

/* The entry of key, NULL when there is none yet (table_lock held). */
static algo_entry *table_find(const conv_key *key) {
    for (algo_entry *e = buckets[key_hash(key)]; e; e = e->next)
        if (memcmp(&e->key, key, sizeof *key) == 0) return e;
    return NULL;
}

static const char *const fwd_names[] = {
    "IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING",
    "WINOGRAD",      "WINOGRAD_NONFUSED"};
static const char *const data_names[] = {"ALGO_0",     "ALGO_1",   "FFT",
                                         "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
static const char *const filter_names[] = {
    "ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED", "FFT_TILING"};

static int algo_count(conv_kind kind) {
    return kind == CONV_FORWARD ? CUDNN_CONVOLUTION_FWD_ALGO_COUNT
           : kind == CONV_DATA  ? CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT
                                : CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
}

static const char *algo_name(conv_kind kind, int algo) {
    if (algo < 0 || algo >= algo_count(kind)) return "unknown";
    return kind == CONV_FORWARD ? fwd_names[algo]
           : kind == CONV_DATA  ? data_names[algo]
                                : filter_names[algo];
}

static bool algo_is_fft(conv_kind kind, int algo) {
    switch (kind) {
    case CONV_FORWARD:
        return algo == CUDNN_CONVOLUTION_FWD_ALGO_FFT ||
               algo == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING;
    case CONV_DATA:
        return algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT ||
               algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING;
    default:
        return algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT ||
               algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING;
    }
}

/* What cudnn_ops.h says of each algorithm, for when the heuristics offer none. */
static bool algo_is_deterministic(conv_kind kind, int algo) {
    if (kind == CONV_DATA) return algo != CUDNN_CONVOLUTION_BWD_DATA_ALGO_0;
    if (kind == CONV_FILTER)
        return algo != CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 &&
               algo != CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
    return true;
}

/* ---- cuDNN objects ---- */

static eg_status dnn_error(const eg__kernel_call *call, cudnnStatus_t status, const char *what) {
    return eg__op_error(call->op,
                        status == CUDNN_STATUS_ALLOC_FAILED ||
                                status == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED
                            ? EG_ERR_OUT_OF_MEMORY
                            : EG_ERR_DEVICE,
                        "%s on %s: %s", what, call->output->device->name,
                        eg__cuda_fn(cudnnGetErrorString)(status));
}

/* Serializes the use of each device's handle. */
static pthread_mutex_t handle_locks[EG__MAX_DEVICES_PER_KIND];
static pthread_once_t handle_locks_once = PTHREAD_ONCE_INIT;
static void init_handle_locks(void) {
    for (int i = 0; i < EG__MAX_DEVICES_PER_KIND; i++) pthread_mutex_init(&handle_locks[i], NULL);
}

/* d's cuDNN handle (made at first use, on d's stream), with its lock held; NULL + error. */
static cudnnHandle_t handle_acquire(const eg__kernel_call *call, eg__cuda_device *d) {
    const char *problem = eg__cuda_open_dnn();
    if (problem) {
        eg__op_error(call->op, EG_ERR_UNSUPPORTED, "on %s: cuDNN is not available: %s",
                     d->device->name, problem);
        return NULL;
    }
    pthread_once(&handle_locks_once, init_handle_locks);
    cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
    pthread_mutex_lock(&d->mutex);
    if (!d->dnn) {
        cudnnHandle_t handle = NULL;
        status = eg__cuda_fn(cudnnCreate)(&handle);
        if (status == CUDNN_STATUS_SUCCESS) {
            status = eg__cuda_fn(cudnnSetStream)(handle, eg__cuda_stream(d));
            if (status == CUDNN_STATUS_SUCCESS)
                d->dnn = handle;
            else
                (void)eg__cuda_fn(cudnnDestroy)(handle);
        }
    }
    cudnnHandle_t handle = d->dnn;
    pthread_mutex_unlock(&d->mutex);
    if (!handle) {
        dnn_error(call, status, "creating the cuDNN handle");
        return NULL;
    }
    pthread_mutex_lock(&handle_locks[d->device->index]);
    return handle;
}

static void handle_release(eg__cuda_device *d) {
    pthread_mutex_unlock(&handle_locks[d->device->index]);
}

typedef struct descriptors {
    cudnnTensorDescriptor_t x, y; /* the input and output images */
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
} descriptors;

static void descriptors_free(descriptors *ds) {
    if (ds->x) (void)eg__cuda_fn(cudnnDestroyTensorDescriptor)(ds->x);
    if (ds->y) (void)eg__cuda_fn(cudnnDestroyTensorDescriptor)(ds->y);
    if (ds->w) (void)eg__cuda_fn(cudnnDestroyFilterDescriptor)(ds->w);
    if (ds->conv) (void)eg__cuda_fn(cudnnDestroyConvolutionDescriptor)(ds->conv);
}

static cudnnStatus_t descriptors_make(descriptors *ds, const conv_key *key) {
    *ds = (descriptors){.x = NULL, .y = NULL, .w = NULL, .conv = NULL};
    cudnnTensorFormat_t format = key->nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    cudnnDataType_t type = key->dtype == EG_DTYPE_F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    cudnnStatus_t s = eg__cuda_fn(cudnnCreateTensorDescriptor)(&ds->x);
    if (s == CUDNN_STATUS_SUCCESS) s = eg__cuda_fn(cudnnCreateTensorDescriptor)(&ds->y);
    if (s == CUDNN_STATUS_SUCCESS) s = eg__cuda_fn(cudnnCreateFilterDescriptor)(&ds->w);
    if (s == CUDNN_STATUS_SUCCESS) s = eg__cuda_fn(cudnnCreateConvolutionDescriptor)(&ds->conv);
    if (s == CUDNN_STATUS_SUCCESS)
        s = eg__cuda_fn(cudnnSetTensor4dDescriptor)(ds->x, format, type, key->n, key->c, key->h,
                                                    key->w);
    if (s == CUDNN_STATUS_SUCCESS)
        s = eg__cuda_fn(cudnnSetTensor4dDescriptor)(ds->y, format, type, key->n, key->k, key->oh,
                                                    key->ow);
    if (s == CUDNN_STATUS_SUCCESS)
        s = eg__cuda_fn(cudnnSetFilter4dDescriptor)(ds->w, type, format, key->k, key->cg, key->r,
                                                    key->s);
    if (s == CUDNN_STATUS_SUCCESS)
        s = eg__cuda_fn(cudnnSetConvolution2dDescriptor)(ds->conv, key->pad_h, key->pad_w,
                                                         key->stride_h, key->stride_w, key->dil_h,
                                                         key->dil_w, CUDNN_CROSS_CORRELATION, type);
    if (s == CUDNN_STATUS_SUCCESS)
        s = eg__cuda_fn(cudnnSetConvolutionGroupCount)(ds->conv, key->groups);
    if (s == CUDNN_STATUS_SUCCESS)
        s = eg__cuda_fn(cudnnSetConvolutionMathType)(ds->conv, (cudnnMathType_t)key->math);
    return s;
}

/* What the heuristics say of one algorithm. */
typedef struct algo_perf {
    int algo;
    cudnnStatus_t status;
    bool deterministic;
} algo_perf;

/* Fills e's candidates from cuDNN's heuristics for the described problem (handle held). */
static eg_status rank_candidates(const eg__kernel_call *call, cudnnHandle_t handle,
                                 const descriptors *ds, conv_kind kind, algo_entry *e) {
    algo_perf perf[MAX_ALGOS];
    int got = 0;
    cudnnStatus_t s;
    if (kind == CONV_FORWARD) {
        cudnnConvolutionFwdAlgoPerf_t p[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        s = eg__cuda_fn(cudnnGetConvolutionForwardAlgorithm_v7)(
            handle, ds->x, ds->w, ds->conv, ds->y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, p);
        for (int i = 0; s == CUDNN_STATUS_SUCCESS && i < got; i++)
            perf[i] = (algo_perf){.algo = (int)p[i].algo,
                                  .status = p[i].status,
                                  .deterministic = p[i].determinism == CUDNN_DETERMINISTIC};
    } else if (kind == CONV_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t p[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        s = eg__cuda_fn(cudnnGetConvolutionBackwardDataAlgorithm_v7)(
            handle, ds->w, ds->y, ds->conv, ds->x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, p);
        for (int i = 0; s == CUDNN_STATUS_SUCCESS && i < got; i++)
            perf[i] = (algo_perf){.algo = (int)p[i].algo,
                                  .status = p[i].status,
                                  .deterministic = p[i].determinism == CUDNN_DETERMINISTIC};
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t p[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        s = eg__cuda_fn(cudnnGetConvolutionBackwardFilterAlgorithm_v7)(
            handle, ds->x, ds->y, ds->conv, ds->w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got,
            p);
        for (int i = 0; s == CUDNN_STATUS_SUCCESS && i < got; i++)
            perf[i] = (algo_perf){.algo = (int)p[i].algo,
                                  .status = p[i].status,
                                  .deterministic = p[i].determinism == CUDNN_DETERMINISTIC};
    }
    if (s != CUDNN_STATUS_SUCCESS) return dnn_error(call, s, "asking cuDNN's heuristics");
    if (got > MAX_ALGOS) got = MAX_ALGOS;
    /* rank 0: deterministic, not FFT; 1: deterministic FFT; 2: non-deterministic */
    for (int rank = 0; rank < 3; rank++)
        for (int i = 0; i < got; i++) {
            if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
            int r = !perf[i].deterministic ? 2 : algo_is_fft(kind, perf[i].algo) ? 1 : 0;
            bool seen = false;
            for (int j = 0; j < e->n_candidates; j++) seen |= e->algos[j] == perf[i].algo;
            if (r != rank || seen) continue;
            e->deterministic[e->n_candidates] = perf[i].deterministic;
            e->algos[e->n_candidates++] = perf[i].algo;
        }
    if (e->n_candidates == 0) /* none recommended: try them all, deterministic ones first */
        for (int pass = 0; pass < 2; pass++)
            for (int a = 0; a < algo_count(kind); a++) {
                bool deterministic = algo_is_deterministic(kind, a);
                if (deterministic != (pass == 0)) continue;
                e->deterministic[e->n_candidates] = deterministic;
                e->algos[e->n_candidates++] = a;
            }
    return EG_OK;
}

/* key's entry, made (with its candidates) at the first call of its shape; NULL + error. */
static algo_entry *entry_for(const eg__kernel_call *call, cudnnHandle_t handle,
                             const descriptors *ds, const conv_key *key) {
    pthread_mutex_lock(&table_lock);
    algo_entry *e = table_find(key);
    pthread_mutex_unlock(&table_lock);
    if (e) return e;
    algo_entry *fresh = calloc(1, sizeof *fresh);
    if (!fresh) {
        eg__op_error(call->op, EG_ERR_OUT_OF_MEMORY, "out of host memory");
        return NULL;
    }
    fresh->key = *key;
    atomic_init(&fresh->chosen, -1);
    if (rank_candidates(call, handle, ds, (conv_kind)key->kind, fresh) != EG_OK) {
        free(fresh);
        return NULL;
    }
    pthread_mutex_lock(&table_lock);
    e = table_find(key);
    if (!e) {
        unsigned b = key_hash(key);
        fresh->next = buckets[b];
        buckets[b] = fresh;
        e = fresh;
        fresh = NULL;
    }
    pthread_mutex_unlock(&table_lock);
    free(fresh);
    return e;
}

/* Remembers candidate i of e as the shape's algorithm. */
static void settle(algo_entry *e, int i, size_t workspace) {
    pthread_mutex_lock(&table_lock);
    if (atomic_load_explicit(&e->chosen, memory_order_relaxed) < 0) {
        const conv_key *k = &e->key;
        conv_kind kind = (conv_kind)k->kind;
        char amount[32];
        if (workspace < 1024)
            snprintf(amount, sizeof amount, "%zu B", workspace);
        else if (workspace < ((size_t)1 << 20))
            snprintf(amount, sizeof amount, "%.1f KiB", (double)workspace / 1024.0);
        else
            snprintf(amount, sizeof amount, "%.1f MiB", (double)workspace / (1024.0 * 1024.0));
        snprintf(e->note, sizeof e->note, "cudnn %s %s (%s %s%s, %s), workspace %s",
                 kind == CONV_FORWARD ? "fwd"
                 : kind == CONV_DATA  ? "bwd_data"
                                      : "bwd_filter",
                 algo_name(kind, e->algos[i]), k->nhwc ? "NHWC" : "NCHW",
                 k->dtype == EG_DTYPE_F64 ? "f64" : "f32",
                 k->math == CUDNN_DEFAULT_MATH && k->dtype == EG_DTYPE_F32 ? " TF32 allowed" : "",
                 e->deterministic[i] ? "deterministic" : "non-deterministic", amount);
        atomic_store_explicit(&e->chosen, i, memory_order_release);
    }
    pthread_mutex_unlock(&table_lock);
}

/* ---- running ---- */

typedef struct conv_run {
    const eg__kernel_call *call;
    eg__cuda_device *d;
    cudnnHandle_t handle;
    conv_kind kind;
    bool f64;
} conv_run;

/* One algorithm on one chunk: x, w, y the cuDNN-side input image, filter and output image (the
 * kind says which are written); accumulate: beta = 1. *oom when its workspace could not be had
 * (the allocator's error raised). */
static cudnnStatus_t execute(const conv_run *run, const descriptors *ds, int algo, void *x, void *w,
                             void *y, bool accumulate, size_t *workspace_bytes, bool *oom) {
    size_t bytes = 0;
    cudnnStatus_t s;
    cudnnHandle_t h = run->handle;
    if (run->kind == CONV_FORWARD)
        s = eg__cuda_fn(cudnnGetConvolutionForwardWorkspaceSize)(
            h, ds->x, ds->w, ds->conv, ds->y, (cudnnConvolutionFwdAlgo_t)algo, &bytes);
    else if (run->kind == CONV_DATA)
        s = eg__cuda_fn(cudnnGetConvolutionBackwardDataWorkspaceSize)(
            h, ds->w, ds->y, ds->conv, ds->x, (cudnnConvolutionBwdDataAlgo_t)algo, &bytes);
    else
        s = eg__cuda_fn(cudnnGetConvolutionBackwardFilterWorkspaceSize)(
            h, ds->x, ds->y, ds->conv, ds->w, (cudnnConvolutionBwdFilterAlgo_t)algo, &bytes);
    if (s != CUDNN_STATUS_SUCCESS) return s;
    eg__cuda_scratch scratch = {.pointer = NULL, .handle = NULL, .allocator = NULL};
    void *workspace = NULL;
    if (bytes) {
        workspace = eg__cuda_scratch_alloc(run->d, bytes, &scratch);
        if (!workspace) {
            *oom = true;
            return CUDNN_STATUS_ALLOC_FAILED;
        }
    }
    /* scaling factors are host values of the compute type: double for double data */
    float one_f = 1.0f, beta_f = accumulate ? 1.0f : 0.0f;
    double one_d = 1.0, beta_d = accumulate ? 1.0 : 0.0;
    const void *alpha = run->f64 ? (const void *)&one_d : (const void *)&one_f;
    const void *beta = run->f64 ? (const void *)&beta_d : (const void *)&beta_f;
    if (run->kind == CONV_FORWARD)
        s = eg__cuda_fn(cudnnConvolutionForward)(h, alpha, ds->x, x, ds->w, w, ds->conv,
                                                 (cudnnConvolutionFwdAlgo_t)algo, workspace, bytes,
                                                 beta, ds->y, y);
    else if (run->kind == CONV_DATA)
        s = eg__cuda_fn(cudnnConvolutionBackwardData)(h, alpha, ds->w, w, ds->y, y, ds->conv,
                                                      (cudnnConvolutionBwdDataAlgo_t)algo,
                                                      workspace, bytes, beta, ds->x, x);
    else
        s = eg__cuda_fn(cudnnConvolutionBackwardFilter)(h, alpha, ds->x, x, ds->y, y, ds->conv,
                                                        (cudnnConvolutionBwdFilterAlgo_t)algo,
                                                        workspace, bytes, beta, ds->w, w);
    eg__cuda_scratch_free(&scratch); /* stream-ordered: the convolution runs first */
    *workspace_bytes = bytes;
    return s;
}

/* One chunk of images through the shape's algorithm: the remembered one first, then the other
 * candidates in order while cuDNN refuses them or their workspace cannot be allocated. */
static eg_status run_chunk(const conv_run *run, const conv_key *key, void *x, void *w, void *y,
                           bool accumulate) {
    const eg__kernel_call *call = run->call;
    descriptors ds;
    cudnnStatus_t s = descriptors_make(&ds, key);
    if (s != CUDNN_STATUS_SUCCESS) {
        descriptors_free(&ds);
        return dnn_error(call, s, "describing the convolution to cuDNN");
    }
    algo_entry *e = entry_for(call, run->handle, &ds, key);
    if (!e) {
        descriptors_free(&ds);
        return eg_last_status();
    }
    int chosen = atomic_load_explicit(&e->chosen, memory_order_acquire);
    int order[MAX_ALGOS], n = 0;
    if (chosen >= 0) order[n++] = chosen;
    for (int i = 0; i < e->n_candidates; i++)
        if (i != chosen) order[n++] = i;
    uint64_t mark = eg__error_mark();
    bool skipped_for_memory = false, oom = false;
    s = CUDNN_STATUS_NOT_SUPPORTED;
    for (int t = 0; t < n; t++) {
        size_t workspace = 0;
        oom = false;
        s = execute(run, &ds, e->algos[order[t]], x, w, y, accumulate, &workspace, &oom);
        if (s == CUDNN_STATUS_SUCCESS) {
            if (chosen < 0 && !skipped_for_memory) settle(e, order[t], workspace);
            break;
        }
        skipped_for_memory |= oom;
        if (oom && t + 1 < n && eg__error_since(mark))
            eg_clear_error(); /* the next may need less */
    }
    descriptors_free(&ds);
    if (s == CUDNN_STATUS_SUCCESS) return EG_OK;
    if (oom) return eg_last_status();
    return dnn_error(call, s, "no cuDNN convolution algorithm accepted the shape");
}

/* Scratch buffers of one call, freed together once everything is enqueued. */
typedef struct conv_buffers {
    eg__cuda_scratch scratch[4];
    int n;
} conv_buffers;

static void *buffer(eg__cuda_device *d, conv_buffers *b, size_t bytes) {
    void *p = eg__cuda_scratch_alloc(d, bytes ? bytes : 1, &b->scratch[b->n]);
    if (p) b->n++;
    return p;
}

/* An image dims as cuDNN gets it: dense in its layout. */
static eg__cuda_dnn_image cudnn_image(const conv_geometry *g, int64_t h, int64_t w, int64_t c) {
    return eg__cuda_dnn_dense((eg__cuda_dnn_image){.n = g->n, .h = h, .w = w, .c = c}, !g->nhwc);
}

/* t (an input image) as cuDNN reads it: dims (h, w), t's elements from (-shift_h, -shift_w) on,
 * zeros around them. t itself when it already is that. NULL + error. */
static void *image_in(const conv_run *run, conv_buffers *b, const conv_geometry *g,
                      const eg_tensor *t, int64_t h, int64_t w, int64_t shift_h, int64_t shift_w) {
    eg__cuda_dnn_image src = eg__cuda_dnn_image_of(t, g->first);
    if (g->nhwc == !g->first && eg__is_contiguous(t) && h == src.h && w == src.w)
        return eg__data(t);
    eg__cuda_dnn_image dst = cudnn_image(g, h, w, src.c);
    void *p = buffer(run->d, b, (size_t)(dst.n * dst.h * dst.w * dst.c) * g->esize);
    if (p)
        eg__cuda_dnn_repack(p, dst, g->nhwc, eg__data(t), src, shift_h, shift_w, g->esize,
                            eg__cuda_stream(run->d));
    return p;
}

/* Where cuDNN writes the output image t (dims (h, w) on the cuDNN side): t itself when it has
 * that form, else scratch that image_out repacks into t. NULL + error. */
static void *image_out(const conv_run *run, conv_buffers *b, const conv_geometry *g, eg_tensor *t,
                       int64_t h, int64_t w) {
    eg__cuda_dnn_image dims = eg__cuda_dnn_image_of(t, g->first);
    if (g->nhwc == !g->first && eg__is_contiguous(t) && h == dims.h && w == dims.w)
        return eg__data(t);
    eg__cuda_dnn_image dst = cudnn_image(g, h, w, dims.c);
    return buffer(run->d, b, (size_t)(dst.n * dst.h * dst.w * dst.c) * g->esize);
}

static void image_out_finish(const conv_run *run, const conv_geometry *g, eg_tensor *t, void *side,
                             int64_t h, int64_t w, int64_t shift_h, int64_t shift_w) {
    if (side == eg__data(t)) return;
    eg__cuda_dnn_image dst = eg__cuda_dnn_image_of(t, g->first);
    eg__cuda_dnn_repack(eg__data(t), dst, !g->first, side, cudnn_image(g, h, w, dst.c), shift_h,
                        shift_w, g->esize, eg__cuda_stream(run->d));
}

/* The HWIO filter t as KRSC (NHWC) or KCRS (NCHW), dense, in scratch. NULL + error. */
static void *filter_in(const conv_run *run, conv_buffers *b, const conv_geometry *g,
                       const eg_tensor *t) {
    void *p = buffer(run->d, b, (size_t)t->n_elems * g->esize);
    if (!p) return NULL;
    const int64_t *st = t->strides;
    int64_t krsc[4] = {g->k, g->r, g->s, g->cg}, krsc_strides[4] = {st[3], st[0], st[1], st[2]};
    int64_t kcrs[4] = {g->k, g->cg, g->r, g->s}, kcrs_strides[4] = {st[3], st[2], st[0], st[1]};
    eg__cuda_strided_copy(p, eg__data(t), g->esize, 4, g->nhwc ? krsc : kcrs,
                          g->nhwc ? krsc_strides : kcrs_strides, t->n_elems,
                          eg__cuda_stream(run->d));
    return p;
}

/* The dense HWIO result t from the filter gradient cuDNN wrote as KRSC / KCRS into side. */
static void filter_out_finish(const conv_run *run, const conv_geometry *g, eg_tensor *t,
                              const void *side) {
    int64_t shape[4] = {g->r, g->s, g->cg, g->k};
    int64_t krsc[4] = {g->s * g->cg, g->cg, 1, g->r * g->s * g->cg};
    int64_t kcrs[4] = {g->s, 1, g->r * g->s, g->cg * g->r * g->s};
    eg__cuda_strided_copy(eg__data(t), side, g->esize, 4, shape, g->nhwc ? krsc : kcrs, t->n_elems,
                          eg__cuda_stream(run->d));
}

/* Everything between the handle's acquisition and release: sides, chunks, results. */
static eg_status convolve(const conv_run *run, conv_buffers *b, const conv_geometry *g,
                          int64_t chunk) {
    const eg__kernel_call *call = run->call;
    const eg_tensor *const *in = call->inputs;
    eg_tensor *out = call->output;
    char *x = NULL, *w = NULL, *y = NULL; /* the cuDNN sides */
    switch (g->kind) {
    case CONV_FORWARD: /* x, w -> y */
        x = image_in(run, b, g, in[0], g->he, g->we, -g->extra_t, -g->extra_l);
        w = x ? filter_in(run, b, g, in[1]) : NULL;
        y = w ? image_out(run, b, g, out, g->oh, g->ow) : NULL;
        break;
    case CONV_DATA: /* dy, w -> dx */
        y = image_in(run, b, g, in[0], g->oh, g->ow, 0, 0);
        w = y ? filter_in(run, b, g, in[1]) : NULL;
        x = w ? image_out(run, b, g, out, g->he, g->we) : NULL;
        break;
    case CONV_FILTER: /* x, dy -> dw */
        if (!eg__is_contiguous(out))
            return eg__op_error(call->op, EG_ERR_INTERNAL, "on %s: the result must be dense",
                                out->device->name);
        x = image_in(run, b, g, in[0], g->he, g->we, -g->extra_t, -g->extra_l);
        y = x ? image_in(run, b, g, in[1], g->oh, g->ow, 0, 0) : NULL;
        w = y ? buffer(run->d, b, (size_t)out->n_elems * g->esize) : NULL;
        break;
    }
    if (!x || !w || !y) return eg_last_status();
    int64_t per_x = g->c * g->he * g->we, per_y = g->k * g->oh * g->ow;
    int device = call->output->device->index;
    for (int64_t b0 = 0; b0 < g->n; b0 += chunk) {
        int64_t images = g->n - b0 < chunk ? g->n - b0 : chunk;
        conv_key key = key_of(g, device, images);
        eg_status status =
            run_chunk(run, &key, x + (size_t)(b0 * per_x) * g->esize, w,
                      y + (size_t)(b0 * per_y) * g->esize, g->kind == CONV_FILTER && b0 > 0);
        if (status != EG_OK) return status;
    }
    if (g->kind == CONV_FORWARD) image_out_finish(run, g, out, y, g->oh, g->ow, 0, 0);
    if (g->kind == CONV_DATA)
        image_out_finish(run, g, out, x, g->he, g->we, g->extra_t, g->extra_l);
    if (g->kind == CONV_FILTER) filter_out_finish(run, g, out, w);
    return EG_OK;
}

static eg_status run_convolution(const eg__kernel_call *call, conv_kind kind) {
    eg__cuda_device *d = eg__cuda_call_device(call);
    if (!d) return eg_last_status();
    eg_tensor *out = call->output;
    if (out->n_elems == 0) return eg__cuda_launched(call);
    conv_geometry g = geometry_of(call, kind);
    /* No terms to add (forward without input channels or of an image that is all padding,
     * filter gradient of an empty batch): zeros, like the CPU. cuDNN takes no empty tensor. */
    if (g.n == 0 || g.cg == 0 || g.h == 0 || g.w == 0) {
        if (!eg__is_contiguous(out))
            return eg__op_error(call->op, EG_ERR_INTERNAL, "on %s: the result must be dense",
                                out->device->name);
        cudaError_t e =
            cudaMemsetAsync(eg__data(out), 0, (size_t)out->n_elems * g.esize, eg__cuda_stream(d));
        if (e != cudaSuccess) return eg__cuda_error(e, d->device, eg__op_defs[call->op].name);
        return eg__cuda_launched(call);
    }
    int64_t chunk;
    if (chunk_images(call, &g, &chunk) != EG_OK) return eg_last_status();
    cudnnHandle_t handle = handle_acquire(call, d);
    if (!handle) return eg_last_status();
    conv_run run = {.call = call, .d = d, .handle = handle, .kind = kind};
    run.f64 = g.dtype == EG_DTYPE_F64;
    conv_buffers b = {.n = 0};
    eg_status status = convolve(&run, &b, &g, chunk);
    handle_release(d);
    for (int i = 0; i < b.n; i++) eg__cuda_scratch_free(&b.scratch[i]); /* stream-ordered */
    return status == EG_OK ? eg__cuda_launched(call) : status;
}

/* x: (B, H, W, C) / (B, C, H, W), w: (KH, KW, C/groups, O) -> y: (B, OH, OW, O) / (B, O, OH, OW) */
static eg_status cuda_conv2d(const eg__kernel_call *call) {
    return run_convolution(call, CONV_FORWARD);
}

/* dy: the convolution's output shape, w: (KH, KW, C/groups, O) -> dx: attrs->shape */
static eg_status cuda_conv2d_backward_input(const eg__kernel_call *call) {
    return run_convolution(call, CONV_DATA);
}

/* x: the input, dy: the convolution's output shape -> dw: attrs->shape (KH, KW, C/groups, O) */
static eg_status cuda_conv2d_backward_filter(const eg__kernel_call *call) {
    return run_convolution(call, CONV_FILTER);
}

const char *eg__cuda_dnn_note(const eg__kernel_call *call) {
    if (!call || !call->output) return NULL;
    conv_kind kind;
    switch (call->op) {
    case EG__OP_CONV2D:
        kind = CONV_FORWARD;
        break;
    case EG__OP_CONV2D_BACKWARD_INPUT:
        kind = CONV_DATA;
        break;
    case EG__OP_CONV2D_BACKWARD_FILTER:
        kind = CONV_FILTER;
        break;
    default:
        return eg__cuda_pool_note(call->op);
    }
    if (call->output->device->type != EG_DEVICE_CUDA) return NULL;
    if (call->output->n_elems == 0) return "no work: an empty result";
    conv_geometry g = geometry_of(call, kind);
    if (g.n == 0 || g.cg == 0 || g.h == 0 || g.w == 0)
        return "no cuDNN call: zeros (no terms to add)";
    int64_t chunk;
    eg__saved_error earlier; /* the note never raises */
    eg__error_set_aside(&earlier);
    eg_status status = chunk_images(call, &g, &chunk);
    eg_clear_error();
    eg__error_restore(&earlier);
    if (status != EG_OK) return NULL;
    conv_key key = key_of(&g, call->output->device->index, chunk);
    pthread_mutex_lock(&table_lock);
    algo_entry *e = table_find(&key);
    const char *note =
        e && atomic_load_explicit(&e->chosen, memory_order_acquire) >= 0 ? e->note : NULL;
    pthread_mutex_unlock(&table_lock);
    return note;
}

void eg__cuda_register_dnn(eg__cuda_kernel_table *table) {
    unsigned floats = EG__CUDA_FLOAT_DTYPES;
    eg__cuda_register(table, EG__OP_CONV2D, cuda_conv2d, floats, true);
    eg__cuda_register(table, EG__OP_CONV2D_BACKWARD_INPUT, cuda_conv2d_backward_input, floats,
                      true);
    eg__cuda_register(table, EG__OP_CONV2D_BACKWARD_FILTER, cuda_conv2d_backward_filter, floats,
                      true);
    eg__cuda_register_pooling(table);
}
