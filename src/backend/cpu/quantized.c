/* CPU kernels of the int8 ops (ops.def: quantize_int8, dense_int8, conv2d_int8) on the products
 * of gemm_int8.c. The activation is quantized once per call (its range measured first unless a
 * calibrated one is given); conv2d_int8 then unrolls tiles of output pixels from the u8 image
 * (im2col in bytes: a quarter of f32's traffic) and multiplies each tile with the packed filter.
 * Work is split in fixed tiles, so the bits never depend on the thread count. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/conv_internal.h"
#include "backend/cpu/gemm_int8.h"
#include "backend/cpu/kernels.h"
#include "base/error.h"

/* Output pixels per conv2d_int8 tile, and multiply-adds below which a job stays on one thread. */
enum { TILE_PIXELS = 64 };
#define MIN_PARALLEL_WORK (1 << 20)

static eg_status out_of_memory(const char *op) {
    return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of memory for the int8 buffers", op);
}

/* Contiguous copies (or the tensors themselves) of a call's inputs; NULL where absent. */
static eg_status contiguous_inputs(const eg__kernel_call *call, eg_tensor **in) {
    for (int i = 0; i < call->n_inputs; i++) {
        in[i] = eg__contiguous_temp(call->inputs[i]);
        if (!in[i]) return eg_last_status() ? eg_last_status() : EG_ERR_OUT_OF_MEMORY;
    }
    return EG_OK;
}

static void release_inputs(int n, eg_tensor **in) {
    for (int i = 0; i < n; i++) eg__unref(in[i]);
}

/* ---- quantize_int8 ---- */

typedef struct quantize_job {
    const float *w, *scale;
    int8_t *q;
    int64_t channels;
    float largest;
} quantize_job;

static void quantize_rows(void *context, int64_t begin, int64_t end) {
    const quantize_job *j = context;
    for (int64_t i = begin; i < end; i++) {
        float v = nearbyintf(j->w[i] / j->scale[i % j->channels]);
        v = v > j->largest ? j->largest : v;
        v = v < -j->largest ? -j->largest : v;
        j->q[i] = (int8_t)(v == v ? v : 0.0f);
    }
}

eg_status eg__cpu_quantize_int8(const eg__kernel_call *call);
eg_status eg__cpu_quantize_int8(const eg__kernel_call *call) {
    eg_tensor *in[2] = {NULL};
    eg_status status = contiguous_inputs(call, in);
    if (status == EG_OK) {
        const eg_tensor *w = call->inputs[0];
        quantize_job job = {eg__data(in[0]), eg__data(in[1]), eg__data(call->output),
                            w->shape[w->n_dims - 1], (float)call->attrs->ints[0]};
        eg__parallel_for(w->n_elems, EG_PARALLEL_GRAIN_ELEMENTWISE, quantize_rows, &job);
    }
    release_inputs(call->n_inputs, in);
    return status;
}

/* ---- the activation's quantization ---- */

typedef struct range_job {
    const float *x;
    int64_t n, chunk;
    float *lo, *hi; /* one per chunk */
} range_job;

static void range_chunks(void *context, int64_t begin, int64_t end) {
    const range_job *j = context;
    for (int64_t c = begin; c < end; c++) {
        int64_t start = c * j->chunk, stop = start + j->chunk < j->n ? start + j->chunk : j->n;
        eg__int8_min_max(j->x + start, stop - start, &j->lo[c], &j->hi[c]);
    }
}

/* The quantization of x (n floats): from the calibrated range (f32 (2)) or x's own. */
static eg_status activation_params(const float *x, int64_t n, const eg_tensor *range,
                                   const char *op, eg__int8_activation *out) {
    if (range) {
        const float *r = eg__data(range);
        *out = eg__int8_activation_of_range(r[0], r[1]);
        return EG_OK;
    }
    enum { CHUNK = 1 << 16 };
    int64_t chunks = n > 0 ? (n + CHUNK - 1) / CHUNK : 1;
    float *bounds = malloc(sizeof(float) * 2 * (size_t)chunks);
    if (!bounds) return out_of_memory(op);
    range_job job = {x, n, CHUNK, bounds, bounds + chunks};
    if (n > 0)
        eg__parallel_for(chunks, 1, range_chunks, &job);
    else
        bounds[0] = bounds[chunks] = 0;
    float lo = bounds[0], hi = bounds[chunks];
    for (int64_t c = 1; c < chunks; c++) {
        lo = bounds[c] < lo ? bounds[c] : lo;
        hi = bounds[chunks + c] > hi ? bounds[chunks + c] : hi;
    }
    free(bounds);
    *out = eg__int8_activation_of_range(lo, hi);
    return EG_OK;
}

typedef struct rows_job {
    const float *x;
    int64_t k, k_padded;
    eg__int8_activation a;
    uint8_t *q;
} rows_job;

static void quantize_activation_rows(void *context, int64_t begin, int64_t end) {
    const rows_job *j = context;
    for (int64_t r = begin; r < end; r++)
        eg__int8_quantize(j->x + r * j->k, j->k, j->k_padded, j->a, j->q + r * j->k_padded);
}

/* ---- dense_int8 ---- */

typedef struct dense_job {
    const uint8_t *a;
    int64_t lda, m;
    const eg__int8_weights *w;
    const eg__int8_epilogue *epilogue;
    float *c;
} dense_job;

enum { ROW_BLOCK = 16 };

static void dense_rows(void *context, int64_t begin, int64_t end) {
    const dense_job *j = context;
    int64_t first = begin * ROW_BLOCK, last = end * ROW_BLOCK < j->m ? end * ROW_BLOCK : j->m;
    eg__int8_gemm(last - first, j->a + first * j->lda, j->lda, j->w, j->epilogue,
                  j->c + first * j->w->n, j->w->n);
}

eg_status eg__cpu_dense_int8(const eg__kernel_call *call);
eg_status eg__cpu_dense_int8(const eg__kernel_call *call) {
    const eg__attrs *attrs = call->attrs;
    eg_tensor *in[5] = {NULL};
    eg__int8_weights w = {0};
    uint8_t *a = NULL;
    eg_status status = contiguous_inputs(call, in);
    const eg_tensor *x = call->inputs[0], *q = call->inputs[1];
    int64_t m = x->shape[0], k = x->shape[1], n = q->shape[1];
    const eg_tensor *bias = attrs->ints[1] ? in[3] : NULL;
    const eg_tensor *range = attrs->ints[2] ? in[3 + (attrs->ints[1] != 0)] : NULL;
    eg__int8_activation params = {1, 0};
    if (status == EG_OK)
        status = activation_params(eg__data(in[0]), m * k, range, "dense_int8", &params);
    if (status == EG_OK) status = eg__int8_weights_pack(eg__data(in[1]), k, n, n, &w);
    int64_t k_padded = w.groups * EG_INT8_GROUP;
    size_t a_bytes = (size_t)(m * k_padded) + 1;
    if (status == EG_OK && !(a = (uint8_t *)eg__conv_partials_take(a_bytes)))
        status = out_of_memory("dense_int8");
    if (status == EG_OK) {
        rows_job quantize = {eg__data(in[0]), k, k_padded, params, a};
        int64_t row_grain = EG_PARALLEL_GRAIN_ELEMENTWISE / (k > 0 ? k : 1);
        eg__parallel_for(m, row_grain > 1 ? row_grain : 1, quantize_activation_rows, &quantize);
        eg__int8_epilogue epilogue = {params, eg__data(in[2]), bias ? eg__data(bias) : NULL,
                                      (int)attrs->ints[0]};
        dense_job job = {a, k_padded, m, &w, &epilogue, eg__data(call->output)};
        int64_t blocks = (m + ROW_BLOCK - 1) / ROW_BLOCK;
        int64_t block_work = ROW_BLOCK * (k > 0 ? k : 1) * (n > 0 ? n : 1);
        int64_t grain = MIN_PARALLEL_WORK / block_work;
        eg__parallel_for(blocks, grain > 1 ? grain : 1, dense_rows, &job);
    }
    eg__conv_partials_give((char *)a, a_bytes);
    eg__int8_weights_free(&w);
    release_inputs(call->n_inputs, in);
    return status;
}

/* ---- conv2d_int8 ---- */

typedef struct conv_job {
    const uint8_t *image; /* the quantized input, NHWC */
    int64_t h, w, c, out_h, out_w, k_h, k_w, k_padded;
    const eg__window *window;
    uint8_t zero;
    const eg__int8_weights *filter;
    const eg__int8_epilogue *epilogue;
    float *out;
    int64_t tiles_per_image;
    atomic_bool failed;
} conv_job;

/* Row p of the columns: the receptive field of output pixel (oy, ox) of image b, in the
 * filter's (KH, KW, C) order, with the zero point where the window leaves the image. */
static void unroll_pixel(const conv_job *j, int64_t b, int64_t oy, int64_t ox, uint8_t *row) {
    const eg__window *win = j->window;
    for (int64_t p = 0; p < j->k_h; p++) {
        int64_t iy = oy * win->stride[0] + p * win->dilation[0] - win->pad[0];
        for (int64_t q = 0; q < j->k_w; q++) {
            int64_t ix = ox * win->stride[1] + q * win->dilation[1] - win->pad[2];
            uint8_t *dst = row + (p * j->k_w + q) * j->c;
            if (iy < 0 || iy >= j->h || ix < 0 || ix >= j->w)
                memset(dst, j->zero, (size_t)j->c);
            else
                memcpy(dst, j->image + ((b * j->h + iy) * j->w + ix) * j->c, (size_t)j->c);
        }
    }
    int64_t k = j->k_h * j->k_w * j->c;
    memset(row + k, j->zero, (size_t)(j->k_padded - k));
}

static void conv_tiles(void *context, int64_t begin, int64_t end) {
    conv_job *j = context;
    uint8_t *columns = malloc((size_t)(TILE_PIXELS * j->k_padded));
    if (!columns) {
        atomic_store(&j->failed, true);
        return;
    }
    int64_t pixels = j->out_h * j->out_w;
    for (int64_t t = begin; t < end; t++) {
        int64_t b = t / j->tiles_per_image;
        int64_t first = (t % j->tiles_per_image) * TILE_PIXELS;
        int64_t count = pixels - first < TILE_PIXELS ? pixels - first : TILE_PIXELS;
        for (int64_t i = 0; i < count; i++) {
            int64_t pixel = first + i;
            unroll_pixel(j, b, pixel / j->out_w, pixel % j->out_w, columns + i * j->k_padded);
        }
        float *out = j->out + (b * pixels + first) * j->filter->n;
        eg__int8_gemm(count, columns, j->k_padded, j->filter, j->epilogue, out, j->filter->n);
    }
    free(columns);
}

typedef struct image_job {
    const float *x;
    int64_t n, chunk;
    eg__int8_activation a;
    uint8_t *q;
} image_job;

static void quantize_image(void *context, int64_t begin, int64_t end) {
    const image_job *j = context;
    for (int64_t c = begin; c < end; c++) {
        int64_t start = c * j->chunk, stop = start + j->chunk < j->n ? start + j->chunk : j->n;
        eg__int8_quantize(j->x + start, stop - start, stop - start, j->a, j->q + start);
    }
}

eg_status eg__cpu_conv2d_int8(const eg__kernel_call *call);
eg_status eg__cpu_conv2d_int8(const eg__kernel_call *call) {
    eg_tensor *in[4] = {NULL};
    eg__int8_weights filter = {0};
    uint8_t *image = NULL;
    eg_status status = contiguous_inputs(call, in);
    const eg_tensor *x = call->inputs[0], *q = call->inputs[1], *y = call->output;
    int64_t k = q->shape[0] * q->shape[1] * q->shape[2], channels_out = q->shape[3];
    eg__int8_activation params = {1, 0};
    if (status == EG_OK)
        status = activation_params(eg__data(in[0]), x->n_elems, call->attrs->ints[2] ? in[3] : NULL,
                                   "conv2d_int8", &params);
    if (status == EG_OK)
        status = eg__int8_weights_pack(eg__data(in[1]), k, channels_out, channels_out, &filter);
    /* conv.c's cached buffer: a fresh one of megabytes costs its page faults every call */
    size_t image_bytes = (size_t)x->n_elems + 1;
    if (status == EG_OK && !(image = (uint8_t *)eg__conv_partials_take(image_bytes)))
        status = out_of_memory("conv2d_int8");
    if (status == EG_OK) {
        enum { CHUNK = 1 << 16 };
        image_job quantize = {eg__data(in[0]), x->n_elems, CHUNK, params, image};
        eg__parallel_for((x->n_elems + CHUNK - 1) / CHUNK, 1, quantize_image, &quantize);
        eg__int8_epilogue epilogue = {params, eg__data(in[2]), NULL, 0};
        int64_t pixels = y->shape[1] * y->shape[2];
        conv_job job = {
            .image = image,
            .h = x->shape[1],
            .w = x->shape[2],
            .c = x->shape[3],
            .out_h = y->shape[1],
            .out_w = y->shape[2],
            .k_h = q->shape[0],
            .k_w = q->shape[1],
            .k_padded = filter.groups * EG_INT8_GROUP,
            .window = &call->attrs->window,
            .zero = (uint8_t)params.zero,
            .filter = &filter,
            .epilogue = &epilogue,
            .out = eg__data(call->output),
            .tiles_per_image = (pixels + TILE_PIXELS - 1) / TILE_PIXELS,
        };
        int64_t tiles = x->shape[0] * job.tiles_per_image;
        int64_t tile_work = TILE_PIXELS * (k > 0 ? k : 1) * channels_out;
        int64_t grain = MIN_PARALLEL_WORK / tile_work;
        if (tiles > 0) eg__parallel_for(tiles, grain > 1 ? grain : 1, conv_tiles, &job);
        if (atomic_load(&job.failed)) status = out_of_memory("conv2d_int8");
    }
    eg__conv_partials_give((char *)image, image_bytes);
    eg__int8_weights_free(&filter);
    release_inputs(call->n_inputs, in);
    return status;
}
