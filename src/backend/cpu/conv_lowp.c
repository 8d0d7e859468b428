/* bf16 and f16 2-d convolutions (forward, input gradient, filter gradient): the same dtype in and
 * out, products summed in f32, each output rounded once (to nearest even).
 *
 * Three routes, chosen per call:
 * - AMX (conv_amx.c): bf16, NHWC, stride 1 (every layer of the CNN; the input gradient as the
 *   flipped-filter forward, conv.c's transformation), at the dispatch level EG__CPU_AVX512 with
 *   the tile state granted. bench/conv (bench_conv --dtype bf16): several times the f32 kernels.
 * - The f32 implicit GEMMs (conv_avx512.c, conv_avx2.c) where they apply (NHWC, 8 or more
 *   output channels per group, AVX2 or better): f16, and bf16 without AMX. They widen the input
 *   as they copy its bands, round each band's output once as they write it and widen each
 *   sweep's dy: no pass over whole tensors (those passes made bf16 slower than f32 at
 *   EG_CPU=avx2, most on the first layer, whose output is 32x its input).
 * - Everything else (NCHW, strided input gradients, few output channels, baseline CPUs, a
 *   filter gradient whose input holds an infinity or NaN on the AMX route): the f32 kernels on
 *   widened copies, rounded once at the end.
 * Widening is exact (both formats are subsets of f32), so the last two routes give the f32
 * kernels' sums of the same values: the same bits as each other.
 *
 * Results never depend on the thread count: each route is deterministic (conv.c, conv_amx.c). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/conv_internal.h"
#include "backend/cpu/kernels.h"
#include "base/cpu_features.h"
#include "base/error.h"

/* eg__conv_set_algorithm's codes (conv.c): 0 chooses (AMX where it applies), 6 forces AMX where
 * it applies, 7 the f32 kernels (reading the format where they can) with their own choice, 8 the
 * f32 kernels on widened copies with their own choice; 1-5 the f32 kernels with that f32
 * algorithm (1: im2col + GEMM on widened copies). */
#define ALGORITHM_AMX     6
#define ALGORITHM_WIDENED 8

/* The AMX kernels' per-task scratch (bands, transposed bands, packed dy: hundreds of KiB, above
 * malloc's mmap threshold, so a fresh one faulted in zeroed pages on every call): a few kept
 * buffers, taken and given back under a lock. */
#define SCRATCH_KEPT 8
static pthread_mutex_t scratch_lock = PTHREAD_MUTEX_INITIALIZER;
static char *scratch_kept[SCRATCH_KEPT];
static size_t scratch_kept_bytes[SCRATCH_KEPT];

char *eg__conv_scratch_take(size_t bytes) {
    char *p = NULL;
    pthread_mutex_lock(&scratch_lock);
    for (int i = 0; i < SCRATCH_KEPT && !p; i++)
        if (scratch_kept[i] && scratch_kept_bytes[i] >= bytes) {
            p = scratch_kept[i];
            scratch_kept[i] = NULL;
        }
    pthread_mutex_unlock(&scratch_lock);
    return p ? p : aligned_alloc(64, (bytes + 63) / 64 * 64);
}

void eg__conv_scratch_give(char *p, size_t bytes) {
    if (!p) return;
    pthread_mutex_lock(&scratch_lock);
    int slot = 0; /* an empty slot, else the one holding the smallest buffer */
    for (int i = 0; i < SCRATCH_KEPT; i++) {
        if (!scratch_kept[i]) {
            slot = i;
            break;
        }
        if (scratch_kept_bytes[i] < scratch_kept_bytes[slot]) slot = i;
    }
    if (!scratch_kept[slot] || scratch_kept_bytes[slot] < bytes) {
        char *smaller = scratch_kept[slot];
        scratch_kept[slot] = p;
        scratch_kept_bytes[slot] = bytes;
        p = smaller;
    }
    pthread_mutex_unlock(&scratch_lock);
    free(p);
}

void eg__conv_scratch_release(void) {
    pthread_mutex_lock(&scratch_lock);
    for (int i = 0; i < SCRATCH_KEPT; i++) {
        free(scratch_kept[i]);
        scratch_kept[i] = NULL;
        scratch_kept_bytes[i] = 0;
    }
    pthread_mutex_unlock(&scratch_lock);
}

/* Whether the AMX kernels may take a dtype convolution (where eg__conv_amx_fits). */
static bool amx_route(eg_dtype dtype) {
    int forced = eg__conv_forced_algorithm();
    return dtype == EG_DTYPE_BF16 && (forced == 0 || forced == ALGORITHM_AMX) &&
           eg__cpu_active_level() >= EG__CPU_AVX512 && eg__conv_amx_built() &&
           eg__cpu_has_avx512_bf16() && eg__cpu_amx_usable(NULL);
}

/* A new f32 tensor of t's shape, not in any scope (drop with eg__unref); NULL + error. */
static eg_tensor *f32_like(const eg_tensor *t) {
    eg__scope_suspend();
    eg_tensor *f = eg__tensor_alloc(EG_DTYPE_F32, t->n_dims, t->shape, t->device);
    eg__scope_resume();
    return f;
}

/* t's values in a new contiguous f32 tensor (exact). */
static eg_tensor *widened(const eg_tensor *t) {
    eg_tensor *c = eg__contiguous_temp(t);
    if (!c) return NULL;
    eg_tensor *f = f32_like(t);
    if (f) {
        if (t->dtype == EG_DTYPE_BF16)
            eg_bf16_to_f32(eg__data(c), eg__data(f), (size_t)t->n_elems);
        else
            eg_f16_to_f32(eg__data(c), eg__data(f), (size_t)t->n_elems);
    }
    eg__unref(c);
    return f;
}

/* call's op by the f32 kernel fn on widened copies of its inputs, rounded into its output. */
static eg_status widened_call(const eg__kernel_call *call, eg__kernel_fn fn) {
    eg_tensor *in[2] = {widened(call->inputs[0]), NULL}, *out = NULL;
    if (in[0]) in[1] = widened(call->inputs[1]);
    if (in[1]) out = f32_like(call->output);
    eg_status status = eg_last_status();
    if (out) {
        const eg_tensor *inputs[2] = {in[0], in[1]};
        eg__kernel_call wide = {call->op, 2, inputs, out, call->attrs};
        status = fn(&wide);
        if (status == EG_OK) {
            size_t n = (size_t)out->n_elems;
            if (call->output->dtype == EG_DTYPE_BF16)
                eg_f32_to_bf16(eg__data(out), eg__data(call->output), n);
            else
                eg_f32_to_f16(eg__data(out), eg__data(call->output), n);
        }
    }
    eg__unref(in[0]);
    eg__unref(in[1]);
    eg__unref(out);
    return status;
}

/* The f32 kernels reading and writing the format: w widened (small), the rest inside the
 * kernels. */
static bool fused_route(void) {
    return eg__conv_forced_algorithm() != ALGORITHM_WIDENED;
}

/* w (n elements of dtype) in a new f32 buffer (malloc; NULL + error). */
static float *widened_filter(eg_dtype dtype, const void *w, int64_t n, const char *what) {
    float *w32 = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!w32) {
        eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory for scratch space", what);
        return NULL;
    }
    if (dtype == EG_DTYPE_BF16)
        eg_bf16_to_f32(w, w32, (size_t)n);
    else
        eg_f16_to_f32(w, w32, (size_t)n);
    return w32;
}

/* y = conv(x, w) by the f32 implicit GEMM on the format; *done false where it does not apply. */
static eg_status fused_forward(const eg__conv_geometry *g, const void *x, const void *w,
                               int64_t w_elems, void *y, bool *done, const char *what) {
    *done = fused_route() && g->k > 0 && eg__conv_implicit_fits(g);
    if (!*done) return EG_OK;
    float *w32 = widened_filter(g->dtype, w, w_elems, what);
    if (!w32) return eg_last_status();
    eg_status status = eg__conv_implicit_forward(g, x, w32, y, what);
    free(w32);
    return status;
}

/* x: (B, H, W, C) / (B, C, H, W), w: (KH, KW, C/groups, O) -> y: (B, OH, OW, O) / (B, O, OH, OW) */
eg_status eg__conv_lowp_forward(const eg__kernel_call *call) {
    eg_tensor *w = eg__contiguous_temp(call->inputs[1]);
    if (!w) return eg_last_status();
    eg__conv_geometry g =
        eg__conv_geometry_of(call->inputs[0], call->output, w->shape, call->attrs);
    eg_status status = EG_OK;
    bool done = false;
    if (amx_route(g.dtype) && eg__conv_amx_fits(&g)) {
        status = eg__conv_amx_forward(&g, eg__data(call->inputs[0]), eg__data(w),
                                      eg__data(call->output), "conv2d");
        done = true;
    } else {
        status = fused_forward(&g, eg__data(call->inputs[0]), eg__data(w), w->n_elems,
                               eg__data(call->output), &done, "conv2d");
    }
    eg__unref(w);
    return done ? status : widened_call(call, eg__cpu_conv2d);
}

/* dy: the convolution's output shape, w: (KH, KW, C/groups, O) -> dx: the input's shape */
eg_status eg__conv_lowp_backward_input(const eg__kernel_call *call) {
    const char *what = "conv2d_backward_input";
    eg_tensor *dy = eg__contiguous_temp(call->inputs[0]);
    eg_tensor *w = dy ? eg__contiguous_temp(call->inputs[1]) : NULL;
    if (!w) {
        eg__unref(dy);
        return eg_last_status();
    }
    eg__conv_geometry g = eg__conv_geometry_of(call->output, dy, w->shape, call->attrs), f;
    eg_status status = EG_OK;
    bool done = false;
    if (g.k > 0 && g.p > 0) {
        bool amx = amx_route(g.dtype) && eg__conv_flip_geometry(&g, &f) && eg__conv_amx_fits(&f);
        bool fused =
            !amx && fused_route() && eg__conv_flip_preferred(&g, &f) && eg__conv_implicit_fits(&f);
        if (amx || fused) {
            uint16_t *flipped = malloc((size_t)w->n_elems * sizeof(uint16_t));
            if (!flipped) {
                status = eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory for scratch space",
                                   what);
            } else {
                eg__conv_flip_filter(&g, eg__data(w), flipped);
                if (amx)
                    status = eg__conv_amx_forward(&f, eg__data(dy), flipped, eg__data(call->output),
                                                  what);
                else
                    status = fused_forward(&f, eg__data(dy), flipped, w->n_elems,
                                           eg__data(call->output), &done, what);
                free(flipped);
            }
            done = true;
        }
    }
    eg__unref(dy);
    eg__unref(w);
    return done ? status : widened_call(call, eg__cpu_conv2d_backward_input);
}

/* x: the input, dy: the convolution's output shape -> dw: (KH, KW, C/groups, O) */
eg_status eg__conv_lowp_backward_filter(const eg__kernel_call *call) {
    const char *what = "conv2d_backward_filter";
    eg_tensor *dy = eg__contiguous_temp(call->inputs[1]);
    if (!dy) return eg_last_status();
    eg_tensor *dw = call->output;
    eg__conv_geometry g = eg__conv_geometry_of(call->inputs[0], dy, dw->shape, call->attrs);
    eg_status status = EG_OK;
    bool done = false;
    if (amx_route(g.dtype) && eg__conv_amx_fits(&g)) {
        bool nonfinite = false;
        status = eg__conv_amx_filter(&g, eg__data(call->inputs[0]), eg__data(dy), eg__data(dw),
                                     &nonfinite, what);
        done = status != EG_OK || !nonfinite; /* a non-finite input: an exact route */
    }
    if (!done && fused_route() && g.k > 0 && eg__conv_implicit_fits(&g)) {
        float *dw32 = malloc((size_t)dw->n_elems * sizeof(float));
        if (!dw32) {
            status =
                eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory for scratch space", what);
        } else {
            status =
                eg__conv_implicit_filter(&g, eg__data(call->inputs[0]), eg__data(dy), dw32, what);
            if (status == EG_OK) eg__conv_round_into(g.dtype, dw32, dw->n_elems, eg__data(dw), 0);
            free(dw32);
        }
        done = true;
    }
    eg__unref(dy);
    return done ? status : widened_call(call, eg__cpu_conv2d_backward_filter);
}
