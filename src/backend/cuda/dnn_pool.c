/* 2-d pooling on a GPU: max and average pooling, their gradients and max pooling's argmax, for
 * NHWC and NCHW images of any strides, f32 and f64.
 *
 * Eagle's own kernels (dnn.cu), not cuDNN's pooling: the CPU (src/backend/cpu/pool_impl.h) pads
 * asymmetrically, lets the first maximum of a window win ties (a NaN only as the first element),
 * leaves padding out of averages and hands max pooling's second-order gradient flat argmax
 * indices, and cuDNN offers symmetric padding only, no indices and its own NaN rule. Each output
 * element is one thread walking its window in the CPU's row-major order, so forward results have
 * the CPU's bits. The gradients are gathers, not scatters: each input element sums its windows'
 * contributions in the order the CPU adds them (oh, then ow), starting from 0 as the CPU's zeroed
 * gradient does, so they have the CPU's bits too and never need atomics. Max pooling's gradient
 * first finds every window's winner (the argmax kernel into scratch), then gathers. */
#include "backend/cuda/dnn.h"
#include "base/error.h"

static eg__cuda_pool_window window_of(const eg__attrs *attrs) {
    const eg__window *w = &attrs->window;
    return (eg__cuda_pool_window){.kh = w->kernel[0],
                                  .kw = w->kernel[1],
                                  .stride_h = w->stride[0],
                                  .stride_w = w->stride[1],
                                  .pad_t = w->pad[0],
                                  .pad_l = w->pad[2]};
}

/* x: (B, H, W, C) / (B, C, H, W) -> y: (B, OH, OW, C) / (B, C, OH, OW) */
static eg_status pool_forward(const eg__kernel_call *call, bool is_max) {
    eg__cuda_device *d = eg__cuda_call_device(call);
    if (!d) return eg_last_status();
    const eg_tensor *x = call->inputs[0];
    eg_tensor *y = call->output;
    bool first = call->attrs->window.channels_first;
    if (y->n_elems > 0)
        eg__cuda_pool2d_forward(x->dtype == EG_DTYPE_F64, is_max, eg__data(x),
                                eg__cuda_dnn_image_of(x, first), eg__data(y),
                                eg__cuda_dnn_image_of(y, first), window_of(call->attrs), first,
                                eg__cuda_stream(d));
    return eg__cuda_launched(call);
}

static eg_status cuda_max_pool2d(const eg__kernel_call *call) {
    return pool_forward(call, true);
}

static eg_status cuda_avg_pool2d(const eg__kernel_call *call) {
    return pool_forward(call, false);
}

/* x -> i64, y-shaped: the flat index into x (row-major in x's logical shape) of each window's
 * first maximum */
static eg_status cuda_max_pool2d_argmax(const eg__kernel_call *call) {
    eg__cuda_device *d = eg__cuda_call_device(call);
    if (!d) return eg_last_status();
    const eg_tensor *x = call->inputs[0];
    eg_tensor *out = call->output;
    bool first = call->attrs->window.channels_first;
    if (out->n_elems > 0)
        eg__cuda_max_pool2d_argmax(x->dtype == EG_DTYPE_F64, eg__data(x),
                                   eg__cuda_dnn_image_of(x, first), eg__data(out),
                                   eg__cuda_dnn_image_of(out, first), window_of(call->attrs), first,
                                   1, eg__cuda_stream(d));
    return eg__cuda_launched(call);
}

/* x, dy (y-shaped) -> dx (x-shaped) */
static eg_status cuda_max_pool2d_backward(const eg__kernel_call *call) {
    eg__cuda_device *d = eg__cuda_call_device(call);
    if (!d) return eg_last_status();
    const eg_tensor *x = call->inputs[0], *dy = call->inputs[1];
    eg_tensor *dx = call->output;
    const eg__window *win = &call->attrs->window;
    bool first = win->channels_first;
    if (dx->n_elems == 0) return eg__cuda_launched(call);
    eg__cuda_dnn_image x_image = eg__cuda_dnn_image_of(x, first),
                       dy_image = eg__cuda_dnn_image_of(dy, first);
    eg__cuda_dnn_image dx_image = eg__cuda_dnn_image_of(dx, first);
    eg__cuda_dnn_image index_image = eg__cuda_dnn_dense(dy_image, first);
    eg__cuda_pool_window window = window_of(call->attrs);
    /* dx non-empty: every image has at least one window (the op's inference) */
    eg__cuda_scratch scratch;
    int64_t *index =
        eg__cuda_scratch_alloc(d, (size_t)(dy->n_elems > 0 ? dy->n_elems : 1) * 8, &scratch);
    if (!index) return eg_last_status();
    cudaStream_t stream = eg__cuda_stream(d);
    int is_double = x->dtype == EG_DTYPE_F64;
    eg__cuda_max_pool2d_argmax(is_double, eg__data(x), x_image, index, index_image, window, first,
                               0, stream);
    /* The CPU's tiled path (windows that tile the image, channels innermost in x and dx) stores
     * dy where the other adds it to a zeroed gradient: the same values but for the sign of a
     * -0.0 gradient, which assign_first reproduces. */
    bool tiled = win->stride[0] == win->kernel[0] && win->stride[1] == win->kernel[1] &&
                 win->pad[0] == 0 && win->pad[2] == 0 && x_image.sc == 1 && dx_image.sc == 1;
    eg__cuda_max_pool2d_backward(is_double, index, index_image, eg__data(dy), dy_image,
                                 eg__data(dx), dx_image, window, first, tiled, stream);
    eg__cuda_scratch_free(&scratch); /* stream-ordered: the kernels above run first */
    return eg__cuda_launched(call);
}

/* dy (y-shaped) -> dx (attrs->shape) */
static eg_status cuda_avg_pool2d_backward(const eg__kernel_call *call) {
    eg__cuda_device *d = eg__cuda_call_device(call);
    if (!d) return eg_last_status();
    const eg_tensor *dy = call->inputs[0];
    eg_tensor *dx = call->output;
    bool first = call->attrs->window.channels_first;
    if (dx->n_elems > 0)
        eg__cuda_avg_pool2d_backward(
            dy->dtype == EG_DTYPE_F64, eg__data(dy), eg__cuda_dnn_image_of(dy, first), eg__data(dx),
            eg__cuda_dnn_image_of(dx, first), window_of(call->attrs), first, eg__cuda_stream(d));
    return eg__cuda_launched(call);
}

const char *eg__cuda_pool_note(eg__op op) {
    switch (op) {
    case EG__OP_MAX_POOL2D:
        return "eagle kernel: max pool, a thread per output";
    case EG__OP_AVG_POOL2D:
        return "eagle kernel: average pool, a thread per output";
    case EG__OP_MAX_POOL2D_ARGMAX:
        return "eagle kernel: max pool argmax, a thread per output";
    case EG__OP_MAX_POOL2D_BACKWARD:
        return "eagle kernels: argmax into scratch, then a gather per input element";
    case EG__OP_AVG_POOL2D_BACKWARD:
        return "eagle kernel: a gather per input element";
    default:
        return NULL;
    }
}

void eg__cuda_register_pooling(eg__cuda_kernel_table *table) {
    unsigned floats = EG__CUDA_FLOAT_DTYPES;
    eg__cuda_register(table, EG__OP_MAX_POOL2D, cuda_max_pool2d, floats, true);
    eg__cuda_register(table, EG__OP_AVG_POOL2D, cuda_avg_pool2d, floats, true);
    eg__cuda_register(table, EG__OP_MAX_POOL2D_ARGMAX, cuda_max_pool2d_argmax, floats, true);
    eg__cuda_register(table, EG__OP_MAX_POOL2D_BACKWARD, cuda_max_pool2d_backward, floats, true);
    eg__cuda_register(table, EG__OP_AVG_POOL2D_BACKWARD, cuda_avg_pool2d_backward, floats, true);
}
