/* Internal: the device code of the convolution and pooling family (dnn.cu), in plain C types for
 * both compilers. cuDNN does the convolutions themselves (dnn_conv.c); these kernels move images
 * between Eagle's layouts and the dense, symmetrically padded ones cuDNN is given, and run every
 * pooling op (Eagle's own kernels: cuDNN's pooling has no argmax, takes symmetric padding only and
 * does not promise the CPU's tie and NaN rules, see dnn_pool.c).
 *
 * An image is described by its logical dims (n, h, w, c) and the stride of each in elements, so a
 * kernel reads NHWC, NCHW or any strided view alike. Every kernel is a grid-stride loop over the
 * elements of its output in that output's dense order (channels last or first), with 64-bit
 * indices; each element is computed by one thread in a fixed order, so results never depend on
 * the launch shape. */
#ifndef EAGLE_SRC_BACKEND_CUDA_DNN_LAUNCH_H
#define EAGLE_SRC_BACKEND_CUDA_DNN_LAUNCH_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct eg__cuda_dnn_image {
    int64_t n, h, w, c;     /* logical dims */
    int64_t sn, sh, sw, sc; /* strides in elements */
} eg__cuda_dnn_image;

/* A pooling window: size, stride and the padding before each axis (the padding after only
 * shortens the last windows, which the image's height and width clip). */
typedef struct eg__cuda_pool_window {
    int64_t kh, kw, stride_h, stride_w, pad_t, pad_l;
} eg__cuda_pool_window;

/* dst(n, h, w, c) = src(n, h + shift_h, w + shift_w, c), and 0 (all bits clear) where that lies
 * outside src, for every element of dst (dims of dst; n and c equal in both). Bitwise copies of
 * element_size (4 or 8) bytes. dst_channels_last: the order the threads walk dst in (its dense
 * layout, for coalesced stores). A negative shift pads, a positive one crops. */
void eg__cuda_dnn_repack(void *dst, eg__cuda_dnn_image dst_image, int dst_channels_last,
                         const void *src, eg__cuda_dnn_image src_image, int64_t shift_h,
                         int64_t shift_w, size_t element_size, cudaStream_t stream);

/* y = max (average: 0; max: 1) pooling of x: each window clipped to the image, the max's first
 * element in row-major window order winning ties (a later element wins only when strictly
 * greater, so a NaN wins only as the first element), the average the sum in that order divided
 * by the count of elements inside the image. is_double: T is double, else float. */
void eg__cuda_pool2d_forward(int is_double, int is_max, const void *x, eg__cuda_dnn_image x_image,
                             void *y, eg__cuda_dnn_image y_image, eg__cuda_pool_window window,
                             int channels_first, cudaStream_t stream);

/* index(b, oh, ow, c) = where the max of that window is (the winner above): flat != 0, the flat
 * index of x's element in x's logical row-major shape ((b*C + c)*H*W + i*W + j for NCHW,
 * ((b*H + i)*W + j)*C + c for NHWC); flat == 0, i*W + j. index_image: y's dims, the strides of
 * the index array. */
void eg__cuda_max_pool2d_argmax(int is_double, const void *x, eg__cuda_dnn_image x_image,
                                int64_t *index, eg__cuda_dnn_image index_image,
                                eg__cuda_pool_window window, int channels_first, int flat,
                                cudaStream_t stream);

/* dx(b, i, j, c) = the sum of dy over the windows whose winner (index, as argmax with flat == 0
 * gives it) is (i, j), taken in row-major window order (oh, then ow) starting from 0, like the
 * CPU's scatter; assign_first: the first term is taken as is instead of added to 0 (the CPU's
 * tiled path, which stores dy: they differ only for -0.0). 0 where no window picks the element. */
void eg__cuda_max_pool2d_backward(int is_double, const int64_t *index,
                                  eg__cuda_dnn_image index_image, const void *dy,
                                  eg__cuda_dnn_image dy_image, void *dx,
                                  eg__cuda_dnn_image dx_image, eg__cuda_pool_window window,
                                  int channels_first, int assign_first, cudaStream_t stream);

/* dx(b, i, j, c) = 0 + the sum, in row-major window order, of dy / count over the windows that
 * hold (i, j) (count: that window's elements inside the image), like the CPU. */
void eg__cuda_avg_pool2d_backward(int is_double, const void *dy, eg__cuda_dnn_image dy_image,
                                  void *dx, eg__cuda_dnn_image dx_image,
                                  eg__cuda_pool_window window, int channels_first,
                                  cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
