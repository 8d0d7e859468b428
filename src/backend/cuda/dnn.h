/* Internal: the convolution and pooling family (dnn_conv.c: cuDNN convolutions; dnn_pool.c:
 * Eagle's pooling kernels) as the rest of the CUDA backend sees it beyond its kernel table. */
#ifndef EAGLE_SRC_BACKEND_CUDA_DNN_H
#define EAGLE_SRC_BACKEND_CUDA_DNN_H

#include "backend/cuda/dnn_launch.h"
#include "backend/cuda/kernels.h"

/* What runs call on the GPU, for the profiler: for a convolution the cuDNN algorithm chosen for
 * its shape and the workspace it takes ("cudnn fwd IMPLICIT_PRECOMP_GEMM, deterministic,
 * workspace 1.2 MiB"), NULL until that shape has run once; for pooling the kernel's name; NULL
 * for other ops. Static storage that never changes once returned. Thread-safe; never raises an
 * error and never touches the GPU. */
const char *eg__cuda_dnn_note(const eg__kernel_call *call);

/* dnn_pool.c: registers the pooling ops (called by eg__cuda_register_dnn) and names their
 * kernels (NULL for an op that is not pooling). */
void eg__cuda_register_pooling(eg__cuda_kernel_table *table);
const char *eg__cuda_pool_note(eg__op op);

/* t's image axes in a layout (channels_first: NCHW, else NHWC), with t's strides. */
static inline eg__cuda_dnn_image eg__cuda_dnn_image_of(const eg_tensor *t, bool channels_first) {
    int ah = channels_first ? 2 : 1, aw = channels_first ? 3 : 2, ac = channels_first ? 1 : 3;
    return (eg__cuda_dnn_image){.n = t->shape[0],
                                .h = t->shape[ah],
                                .w = t->shape[aw],
                                .c = t->shape[ac],
                                .sn = t->strides[0],
                                .sh = t->strides[ah],
                                .sw = t->strides[aw],
                                .sc = t->strides[ac]};
}

/* d's dims, dense in a layout. */
static inline eg__cuda_dnn_image eg__cuda_dnn_dense(eg__cuda_dnn_image d, bool channels_first) {
    if (channels_first) {
        d.sw = 1;
        d.sh = d.w;
        d.sc = d.h * d.w;
        d.sn = d.c * d.h * d.w;
    } else {
        d.sc = 1;
        d.sw = d.c;
        d.sh = d.w * d.c;
        d.sn = d.h * d.w * d.c;
    }
    return d;
}

#endif
