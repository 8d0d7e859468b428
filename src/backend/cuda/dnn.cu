// The convolution and pooling family's own kernels (dnn_launch.h says what each computes):
// the image repack that feeds cuDNN dense, symmetrically padded images (dnn_conv.c), and every
// pooling op. Pooling is computed here rather than by cuDNN so that it follows the CPU
// (src/backend/cpu/pool_impl.h) exactly: windows clipped to the image, asymmetric padding, the
// first maximum winning ties, a NaN winning only as a window's first element, averages over the
// elements inside the image summed in row-major window order, and gradients gathered per input
// element in the order the CPU scatters them (no atomics: the same bits every run).
#include <stdint.h>

#include "backend/cuda/dnn_launch.h"

namespace {

using image = eg__cuda_dnn_image;
using window = eg__cuda_pool_window;

struct coords {
    int64_t n, h, w, c;
};

// Element i of an image of these dims in its dense order: channels innermost (NHWC) or width
// innermost (NCHW).
__device__ inline coords unravel(int64_t i, const image &d, bool channels_last) {
    coords p;
    if (channels_last) {
        p.c = i % d.c;
        i /= d.c;
        p.w = i % d.w;
        i /= d.w;
        p.h = i % d.h;
        p.n = i / d.h;
    } else {
        p.w = i % d.w;
        i /= d.w;
        p.h = i % d.h;
        i /= d.h;
        p.c = i % d.c;
        p.n = i / d.c;
    }
    return p;
}

__device__ inline int64_t at(const image &d, int64_t n, int64_t h, int64_t w, int64_t c) {
    return n * d.sn + h * d.sh + w * d.sw + c * d.sc;
}

int64_t count(const image &d) {
    return d.n * d.h * d.w * d.c;
}

unsigned blocks_for(int64_t n) {
    int64_t blocks = (n + 255) / 256;
    return (unsigned)(blocks > 65535 ? 65535 : blocks);
}

template <typename U>
__global__ void repack(U *dst, image di, bool dst_last, const U *src, image si, int64_t shift_h,
                       int64_t shift_w, int64_t total) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        coords p = unravel(i, di, dst_last);
        int64_t h = p.h + shift_h, w = p.w + shift_w;
        U v = 0;
        if (h >= 0 && h < si.h && w >= 0 && w < si.w) v = src[at(si, p.n, h, w, p.c)];
        dst[at(di, p.n, p.h, p.w, p.c)] = v;
    }
}

// The taps of window (oh, ow) inside an H x W image: [i0, i1) x [j0, j1), never empty (the op's
// inference keeps every padding below the pool size).
struct span {
    int64_t i0, i1, j0, j1;
};

__device__ inline span clip(const window &win, int64_t oh, int64_t ow, int64_t height,
                            int64_t width) {
    int64_t h0 = oh * win.stride_h - win.pad_t, w0 = ow * win.stride_w - win.pad_l;
    span s;
    s.i0 = h0 < 0 ? 0 : h0;
    s.i1 = h0 + win.kh < height ? h0 + win.kh : height;
    s.j0 = w0 < 0 ? 0 : w0;
    s.j1 = w0 + win.kw < width ? w0 + win.kw : width;
    return s;
}

// The windows along one axis that hold input position pos: [*lo, *hi] (empty when lo > hi).
// Window o covers [o*stride - pad, o*stride - pad + k).
__device__ inline void windows_holding(int64_t pos, int64_t k, int64_t stride, int64_t pad,
                                       int64_t out, int64_t *lo, int64_t *hi) {
    int64_t a = pos + pad - k; // o*stride must exceed this
    *lo = a < 0 ? 0 : a / stride + 1;
    *hi = (pos + pad) / stride;
    if (*hi > out - 1) *hi = out - 1;
}

// The window's maximum and where it is (i*W + j): the first element, replaced only by a strictly
// greater one, scanning rows then columns (pool_impl.h's order and comparison).
template <typename T>
__device__ inline void window_max(const T *x, const image &xi, int64_t b, int64_t c, const span &s,
                                  T *best, int64_t *where) {
    const T *base = x + b * xi.sn + c * xi.sc;
    T m = base[s.i0 * xi.sh + s.j0 * xi.sw];
    int64_t w_at = s.i0 * xi.w + s.j0;
    for (int64_t i = s.i0; i < s.i1; i++)
        for (int64_t j = i == s.i0 ? s.j0 + 1 : s.j0; j < s.j1; j++) {
            T v = base[i * xi.sh + j * xi.sw];
            if (v > m) {
                m = v;
                w_at = i * xi.w + j;
            }
        }
    *best = m;
    *where = w_at;
}

template <typename T>
__global__ void pool_forward(const T *x, image xi, T *y, image yi, window win, bool channels_last,
                             bool is_max, int64_t total) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        coords p = unravel(i, yi, channels_last);
        span s = clip(win, p.h, p.w, xi.h, xi.w);
        T r;
        if (is_max) {
            int64_t where;
            window_max(x, xi, p.n, p.c, s, &r, &where);
        } else { // the first element, then the others added in row-major order, then / count
            const T *base = x + p.n * xi.sn + p.c * xi.sc;
            T acc = base[s.i0 * xi.sh + s.j0 * xi.sw];
            for (int64_t row = s.i0; row < s.i1; row++)
                for (int64_t col = row == s.i0 ? s.j0 + 1 : s.j0; col < s.j1; col++)
                    acc += base[row * xi.sh + col * xi.sw];
            r = acc / (T)((s.i1 - s.i0) * (s.j1 - s.j0));
        }
        y[at(yi, p.n, p.h, p.w, p.c)] = r;
    }
}

template <typename T>
__global__ void argmax(const T *x, image xi, int64_t *index, image ii, window win,
                       bool channels_first, bool flat, int64_t total) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        coords p = unravel(i, ii, !channels_first);
        span s = clip(win, p.h, p.w, xi.h, xi.w);
        T best;
        int64_t where;
        window_max(x, xi, p.n, p.c, s, &best, &where);
        if (flat) {
            int64_t hw = xi.h * xi.w;
            where =
                channels_first ? (p.n * xi.c + p.c) * hw + where : (p.n * hw + where) * xi.c + p.c;
        }
        index[at(ii, p.n, p.h, p.w, p.c)] = where;
    }
}

template <typename T>
__global__ void max_backward(const int64_t *index, image ii, const T *dy, image yi, T *dx, image di,
                             window win, bool channels_first, bool assign_first, int64_t total) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        coords p = unravel(i, di, !channels_first);
        int64_t oh0, oh1, ow0, ow1;
        windows_holding(p.h, win.kh, win.stride_h, win.pad_t, yi.h, &oh0, &oh1);
        windows_holding(p.w, win.kw, win.stride_w, win.pad_l, yi.w, &ow0, &ow1);
        int64_t me = p.h * di.w + p.w;
        T acc = 0;
        bool any = false;
        for (int64_t oh = oh0; oh <= oh1; oh++)
            for (int64_t ow = ow0; ow <= ow1; ow++) {
                if (index[at(ii, p.n, oh, ow, p.c)] != me) continue;
                T g = dy[at(yi, p.n, oh, ow, p.c)];
                acc = assign_first && !any ? g : acc + g;
                any = true;
            }
        dx[at(di, p.n, p.h, p.w, p.c)] = acc;
    }
}

template <typename T>
__global__ void avg_backward(const T *dy, image yi, T *dx, image di, window win,
                             bool channels_first, int64_t total) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        coords p = unravel(i, di, !channels_first);
        int64_t oh0, oh1, ow0, ow1;
        windows_holding(p.h, win.kh, win.stride_h, win.pad_t, yi.h, &oh0, &oh1);
        windows_holding(p.w, win.kw, win.stride_w, win.pad_l, yi.w, &ow0, &ow1);
        T acc = 0;
        for (int64_t oh = oh0; oh <= oh1; oh++)
            for (int64_t ow = ow0; ow <= ow1; ow++) {
                span s = clip(win, oh, ow, di.h, di.w);
                acc += dy[at(yi, p.n, oh, ow, p.c)] / (T)((s.i1 - s.i0) * (s.j1 - s.j0));
            }
        dx[at(di, p.n, p.h, p.w, p.c)] = acc;
    }
}

} // namespace

extern "C" void eg__cuda_dnn_repack(void *dst, eg__cuda_dnn_image dst_image, int dst_channels_last,
                                    const void *src, eg__cuda_dnn_image src_image, int64_t shift_h,
                                    int64_t shift_w, size_t element_size, cudaStream_t stream) {
    int64_t total = count(dst_image);
    if (total <= 0) return;
    unsigned blocks = blocks_for(total);
    if (element_size == 8)
        repack<uint64_t><<<blocks, 256, 0, stream>>>(
            static_cast<uint64_t *>(dst), dst_image, dst_channels_last != 0,
            static_cast<const uint64_t *>(src), src_image, shift_h, shift_w, total);
    else
        repack<uint32_t><<<blocks, 256, 0, stream>>>(
            static_cast<uint32_t *>(dst), dst_image, dst_channels_last != 0,
            static_cast<const uint32_t *>(src), src_image, shift_h, shift_w, total);
}

extern "C" void eg__cuda_pool2d_forward(int is_double, int is_max, const void *x,
                                        eg__cuda_dnn_image x_image, void *y,
                                        eg__cuda_dnn_image y_image, eg__cuda_pool_window window,
                                        int channels_first, cudaStream_t stream) {
    int64_t total = count(y_image);
    if (total <= 0) return;
    unsigned blocks = blocks_for(total);
    if (is_double)
        pool_forward<double><<<blocks, 256, 0, stream>>>(static_cast<const double *>(x), x_image,
                                                         static_cast<double *>(y), y_image, window,
                                                         !channels_first, is_max != 0, total);
    else
        pool_forward<float><<<blocks, 256, 0, stream>>>(static_cast<const float *>(x), x_image,
                                                        static_cast<float *>(y), y_image, window,
                                                        !channels_first, is_max != 0, total);
}

extern "C" void eg__cuda_max_pool2d_argmax(int is_double, const void *x, eg__cuda_dnn_image x_image,
                                           int64_t *index, eg__cuda_dnn_image index_image,
                                           eg__cuda_pool_window window, int channels_first,
                                           int flat, cudaStream_t stream) {
    int64_t total = count(index_image);
    if (total <= 0) return;
    unsigned blocks = blocks_for(total);
    if (is_double)
        argmax<double><<<blocks, 256, 0, stream>>>(static_cast<const double *>(x), x_image, index,
                                                   index_image, window, channels_first != 0,
                                                   flat != 0, total);
    else
        argmax<float><<<blocks, 256, 0, stream>>>(static_cast<const float *>(x), x_image, index,
                                                  index_image, window, channels_first != 0,
                                                  flat != 0, total);
}

extern "C" void eg__cuda_max_pool2d_backward(int is_double, const int64_t *index,
                                             eg__cuda_dnn_image index_image, const void *dy,
                                             eg__cuda_dnn_image dy_image, void *dx,
                                             eg__cuda_dnn_image dx_image,
                                             eg__cuda_pool_window window, int channels_first,
                                             int assign_first, cudaStream_t stream) {
    int64_t total = count(dx_image);
    if (total <= 0) return;
    unsigned blocks = blocks_for(total);
    if (is_double)
        max_backward<double>
            <<<blocks, 256, 0, stream>>>(index, index_image, static_cast<const double *>(dy),
                                         dy_image, static_cast<double *>(dx), dx_image, window,
                                         channels_first != 0, assign_first != 0, total);
    else
        max_backward<float><<<blocks, 256, 0, stream>>>(
            index, index_image, static_cast<const float *>(dy), dy_image, static_cast<float *>(dx),
            dx_image, window, channels_first != 0, assign_first != 0, total);
}

extern "C" void eg__cuda_avg_pool2d_backward(int is_double, const void *dy,
                                             eg__cuda_dnn_image dy_image, void *dx,
                                             eg__cuda_dnn_image dx_image,
                                             eg__cuda_pool_window window, int channels_first,
                                             cudaStream_t stream) {
    int64_t total = count(dx_image);
    if (total <= 0) return;
    unsigned blocks = blocks_for(total);
    if (is_double)
        avg_backward<double><<<blocks, 256, 0, stream>>>(static_cast<const double *>(dy), dy_image,
                                                         static_cast<double *>(dx), dx_image,
                                                         window, channels_first != 0, total);
    else
        avg_backward<float><<<blocks, 256, 0, stream>>>(static_cast<const float *>(dy), dy_image,
                                                        static_cast<float *>(dx), dx_image, window,
                                                        channels_first != 0, total);
}
