// The shape family's kernels: elements moved between shapes (concat's and unslice's placement,
// gather, pad, one_hot) and scatter_add, gather's adjoint.
//
// Data movement is templated on the element's size alone (1, 2, 4 or 8 bytes), so one kernel
// serves every dtype bit for bit. Strided operands are indexed with their strides rather than
// copied dense first: a gather reads a few rows of what may be a large embedding table, and a
// dense copy of the table would cost more than the op. Before a launch the host merges the dims
// that the operands step through as one (and drops size-1 dims), so the common dense cases pay
// for one or two divisions per element instead of one per dim.
//
// scatter_add must give the CPU's bits, which sums each output element's contributions in
// ascending index-list order. Float atomicAdd would add them in whatever order the threads
// arrive, so instead the index list is sorted stably by target row (CUB's radix sort, a header
// library of the toolkit: nothing more is linked), each row's run of list positions is found
// by binary search, and one thread per output element adds its run in order. Cost: a sort of
// n_indices keys (ceil(bits/8) passes, bits = what the axis size needs), axis_size binary
// searches, and one read of every update: O(n_indices + axis_size + pre * n_indices * post),
// the same order as the CPU's loop, however many indices repeat.
#include <stdint.h>
#include <string.h>

#include <cub/device/device_radix_sort.cuh>

#include "backend/cuda/shape_launch.h"

namespace {

constexpr int max_dims = EG__CUDA_MAX_DIMS;

unsigned blocks_for(int64_t n) {
    int64_t blocks = (n + 255) / 256;
    return (unsigned)(blocks > 65535 ? 65535 : blocks < 1 ? 1 : blocks);
}

// Calls f with a value of the unsigned type that is element_size bytes wide.
template <typename F> void by_size(size_t element_size, F f) {
    switch (element_size) {
    case 1:
        f(uint8_t{});
        break;
    case 2:
        f(uint16_t{});
        break;
    case 4:
        f(uint32_t{});
        break;
    default:
        f(uint64_t{});
        break;
    }
}

// The first sizeof(T) bytes of bits (where the host stored a value of the output's dtype).
template <typename T> T from_bits(uint64_t bits) {
    T value;
    memcpy(&value, &bits, sizeof value);
    return value;
}

// Merges dims of (shape, strides) that one stride steps through (the outer stride is the inner
// one times the inner size) and drops size-1 dims; returns the new count. The row-major order
// of the elements, and so the meaning of a flat index, is unchanged.
int coalesce(int n_dims, const int64_t *shape, const int64_t *strides, int64_t *out_shape,
             int64_t *out_strides) {
    int n = 0;
    for (int d = 0; d < n_dims; d++) {
        if (shape[d] == 1) continue;
        if (n > 0 && out_strides[n - 1] == strides[d] * shape[d]) {
            out_shape[n - 1] *= shape[d];
            out_strides[n - 1] = strides[d];
        } else {
            out_shape[n] = shape[d];
            out_strides[n] = strides[d];
            n++;
        }
    }
    return n;
}

__device__ inline int64_t grid_start() {
    return blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
}
__device__ inline int64_t grid_step() {
    return (int64_t)gridDim.x * blockDim.x;
}

// A negative index counts from the end, as on the CPU; -1 for one still outside [0, size).
template <typename I> __device__ inline int64_t normalized(I raw, int64_t size) {
    int64_t index = (int64_t)raw;
    if (index < 0) index += size;
    return index >= 0 && index < size ? index : -1;
}

// ---- placement: a strided tensor into a strided window (concat, unslice) ----

struct place_geometry {
    int n_dims;
    int64_t shape[max_dims];
    int64_t dst_strides[max_dims];
    int64_t src_strides[max_dims];
};

template <typename T>
__global__ void place_kernel(T *dst, const T *src, place_geometry g, int64_t n) {
    for (int64_t i = grid_start(); i < n; i += grid_step()) {
        int64_t rest = i, from = 0, to = 0;
        for (int d = g.n_dims - 1; d >= 0; d--) {
            int64_t c = rest % g.shape[d];
            rest /= g.shape[d];
            from += c * g.src_strides[d];
            to += c * g.dst_strides[d];
        }
        dst[to] = src[from];
    }
}

// ---- gather ----

// x seen as (pre..., axis, post...): the pre and post dims each merged where x allows.
struct gather_geometry {
    int n_pre, n_post;
    int64_t pre_shape[max_dims], pre_strides[max_dims];
    int64_t post_shape[max_dims], post_strides[max_dims];
    int64_t axis_size, axis_stride, n_indices, post;
};

// out (pre, n_indices, post) dense <- x (pre..., axis_size, post...) strided
template <typename T, typename I>
__global__ void gather_kernel(T *out, const T *x, const I *indices, gather_geometry g, int64_t n) {
    for (int64_t i = grid_start(); i < n; i += grid_step()) {
        int64_t q = i % g.post, rest = i / g.post;
        int64_t j = rest % g.n_indices, p = rest / g.n_indices;
        int64_t index = normalized(indices[j], g.axis_size);
        if (index < 0) {
            out[i] = T(0); // out of range: zero bits (shape.c says why)
            continue;
        }
        int64_t offset = index * g.axis_stride;
        for (int d = g.n_post - 1; d >= 0; d--) {
            offset += q % g.post_shape[d] * g.post_strides[d];
            q /= g.post_shape[d];
        }
        for (int d = g.n_pre - 1; d >= 0; d--) {
            offset += p % g.pre_shape[d] * g.pre_strides[d];
            p /= g.pre_shape[d];
        }
        out[i] = x[offset];
    }
}

// ---- scatter_add ----

// Sort keys: an index's target row, or axis_size (sorted last, read by no row) for one outside
// the axis; values: the index's position in the list.
template <typename I>
__global__ void scatter_keys_kernel(uint64_t *keys, int64_t *positions, const I *indices,
                                    int64_t axis_size, int64_t n) {
    for (int64_t j = grid_start(); j < n; j += grid_step()) {
        int64_t index = normalized(indices[j], axis_size);
        keys[j] = (uint64_t)(index < 0 ? axis_size : index);
        positions[j] = j;
    }
}

// starts[k] = the first sorted position whose key is >= k, for k in [0, axis_size]: row k's
// run is [starts[k], starts[k + 1]).
__global__ void scatter_runs_kernel(int64_t *starts, const uint64_t *keys, int64_t n,
                                    int64_t axis_size) {
    for (int64_t k = grid_start(); k <= axis_size; k += grid_step()) {
        int64_t low = 0, high = n;
        while (low < high) {
            int64_t middle = low + (high - low) / 2;
            if (keys[middle] < (uint64_t)k)
                low = middle + 1;
            else
                high = middle;
        }
        starts[k] = low;
    }
}

// out (pre, axis_size, post) <- updates (pre, n_indices, post), each row's run summed in list
// order from 0 (the CPU's additions, one by one, in the same order and precision)
template <typename T>
__global__ void scatter_sum_kernel(T *out, const T *updates, const int64_t *positions,
                                   const int64_t *starts, int64_t axis_size, int64_t n_indices,
                                   int64_t post, int64_t n) {
    for (int64_t i = grid_start(); i < n; i += grid_step()) {
        int64_t q = i % post, rest = i / post;
        int64_t k = rest % axis_size, p = rest / axis_size;
        const T *row = updates + p * n_indices * post + q;
        T sum = T(0);
        for (int64_t s = starts[k], end = starts[k + 1]; s < end; s++)
            sum += row[positions[s] * post];
        out[i] = sum;
    }
}

// Bits the sort keys need: values 0 ... axis_size.
int key_bits(int64_t axis_size) {
    int bits = 1;
    while (bits < 63 && (axis_size >> bits) != 0) bits++;
    return bits;
}

size_t aligned(size_t bytes) {
    return (bytes + 255) & ~(size_t)255;
}

// The scratch's parts, in order: keys in and out, positions in and out, runs, the sort's own.
struct scatter_scratch {
    uint64_t *keys_in, *keys_out;
    int64_t *positions_in, *positions_out, *starts;
    void *sort;
    size_t sort_bytes;
};

size_t sort_bytes(int64_t n_indices, int64_t axis_size) {
    size_t bytes = 0;
    cub::DeviceRadixSort::SortPairs(
        nullptr, bytes, static_cast<const uint64_t *>(nullptr), static_cast<uint64_t *>(nullptr),
        static_cast<const int64_t *>(nullptr), static_cast<int64_t *>(nullptr), n_indices, 0,
        key_bits(axis_size));
    return bytes;
}

scatter_scratch carve(void *base, int64_t n_indices, int64_t axis_size) {
    size_t list = aligned((size_t)n_indices * 8);
    char *p = static_cast<char *>(base);
    scatter_scratch s;
    s.keys_in = reinterpret_cast<uint64_t *>(p);
    s.keys_out = reinterpret_cast<uint64_t *>(p + list);
    s.positions_in = reinterpret_cast<int64_t *>(p + 2 * list);
    s.positions_out = reinterpret_cast<int64_t *>(p + 3 * list);
    s.starts = reinterpret_cast<int64_t *>(p + 4 * list);
    s.sort = p + 4 * list + aligned((size_t)(axis_size + 1) * 8);
    s.sort_bytes = sort_bytes(n_indices, axis_size);
    return s;
}

// ---- one_hot ----

// out (n_indices, depth) <- indices (n_indices)
template <typename T, typename I>
__global__ void one_hot_kernel(T *out, T one, const I *indices, int64_t depth, int64_t n) {
    for (int64_t i = grid_start(); i < n; i += grid_step()) {
        int64_t j = i / depth, c = i - j * depth;
        out[i] = (int64_t)indices[j] == c ? one : T(0);
    }
}

// ---- pad ----

struct pad_geometry {
    int n_dims;
    int64_t out_shape[max_dims], x_shape[max_dims], x_strides[max_dims], before[max_dims];
};

// out (out_shape) dense <- x (x_shape) strided at offset `before`, value elsewhere
template <typename T>
__global__ void pad_kernel(T *out, const T *x, T value, pad_geometry g, int64_t n) {
    for (int64_t i = grid_start(); i < n; i += grid_step()) {
        int64_t rest = i, offset = 0;
        bool inside = true;
        for (int d = g.n_dims - 1; d >= 0; d--) {
            int64_t c = rest % g.out_shape[d] - g.before[d];
            rest /= g.out_shape[d];
            if (c < 0 || c >= g.x_shape[d])
                inside = false;
            else
                offset += c * g.x_strides[d];
        }
        out[i] = inside ? x[offset] : value;
    }
}

} // namespace

extern "C" void eg__cuda_place(void *dst, const int64_t *dst_strides, const void *src,
                               const int64_t *src_strides, int n_dims, const int64_t *shape,
                               size_t element_size, cudaStream_t stream) {
    int64_t n = 1;
    for (int d = 0; d < n_dims; d++) n *= shape[d];
    if (n <= 0) return;
    // Both stride arrays must allow a merge: the same test as coalesce(), on the pair.
    place_geometry g;
    g.n_dims = 0;
    for (int d = 0; d < n_dims; d++) {
        if (shape[d] == 1) continue;
        int last = g.n_dims - 1;
        if (last >= 0 && g.dst_strides[last] == dst_strides[d] * shape[d] &&
            g.src_strides[last] == src_strides[d] * shape[d]) {
            g.shape[last] *= shape[d];
            g.dst_strides[last] = dst_strides[d];
            g.src_strides[last] = src_strides[d];
        } else {
            g.shape[g.n_dims] = shape[d];
            g.dst_strides[g.n_dims] = dst_strides[d];
            g.src_strides[g.n_dims] = src_strides[d];
            g.n_dims++;
        }
    }
    by_size(element_size, [&](auto tag) {
        using T = decltype(tag);
        place_kernel<T><<<blocks_for(n), 256, 0, stream>>>(static_cast<T *>(dst),
                                                           static_cast<const T *>(src), g, n);
    });
}

extern "C" void eg__cuda_gather(void *out, const void *x, int n_dims, const int64_t *x_shape,
                                const int64_t *x_strides, int axis, const void *indices,
                                eg__cuda_index_type index_type, int64_t n_indices,
                                size_t element_size, cudaStream_t stream) {
    gather_geometry g;
    g.n_pre = coalesce(axis, x_shape, x_strides, g.pre_shape, g.pre_strides);
    g.n_post = coalesce(n_dims - axis - 1, x_shape + axis + 1, x_strides + axis + 1, g.post_shape,
                        g.post_strides);
    g.axis_size = x_shape[axis];
    g.axis_stride = x_strides[axis];
    g.n_indices = n_indices;
    int64_t pre = 1;
    g.post = 1;
    for (int d = 0; d < axis; d++) pre *= x_shape[d];
    for (int d = axis + 1; d < n_dims; d++) g.post *= x_shape[d];
    int64_t n = pre * n_indices * g.post;
    if (n <= 0) return;
    by_size(element_size, [&](auto tag) {
        using T = decltype(tag);
        T *o = static_cast<T *>(out);
        const T *source = static_cast<const T *>(x);
        if (index_type == EG__CUDA_INDEX_I32)
            gather_kernel<T, int32_t><<<blocks_for(n), 256, 0, stream>>>(
                o, source, static_cast<const int32_t *>(indices), g, n);
        else
            gather_kernel<T, int64_t><<<blocks_for(n), 256, 0, stream>>>(
                o, source, static_cast<const int64_t *>(indices), g, n);
    });
}

extern "C" size_t eg__cuda_scatter_add_scratch_bytes(int64_t n_indices, int64_t axis_size) {
    return 4 * aligned((size_t)n_indices * 8) + aligned((size_t)(axis_size + 1) * 8) +
           sort_bytes(n_indices, axis_size);
}

extern "C" cudaError_t eg__cuda_scatter_add(void *out, const void *updates, int is_f64,
                                            const void *indices, eg__cuda_index_type index_type,
                                            int64_t pre, int64_t n_indices, int64_t axis_size,
                                            int64_t post, void *scratch, size_t scratch_bytes,
                                            cudaStream_t stream) {
    int64_t n = pre * axis_size * post;
    if (n <= 0 || n_indices <= 0) return cudaSuccess;
    if (scratch_bytes < eg__cuda_scatter_add_scratch_bytes(n_indices, axis_size))
        return cudaErrorInvalidValue;
    scatter_scratch s = carve(scratch, n_indices, axis_size);
    if (index_type == EG__CUDA_INDEX_I32)
        scatter_keys_kernel<int32_t><<<blocks_for(n_indices), 256, 0, stream>>>(
            s.keys_in, s.positions_in, static_cast<const int32_t *>(indices), axis_size, n_indices);
    else
        scatter_keys_kernel<int64_t><<<blocks_for(n_indices), 256, 0, stream>>>(
            s.keys_in, s.positions_in, static_cast<const int64_t *>(indices), axis_size, n_indices);
    // Stable (CUB's radix sort keeps equal keys in input order): each row's run lists its
    // positions ascending, the CPU's order of addition.
    size_t bytes = s.sort_bytes;
    cudaError_t e =
        cub::DeviceRadixSort::SortPairs(s.sort, bytes, s.keys_in, s.keys_out, s.positions_in,
                                        s.positions_out, n_indices, 0, key_bits(axis_size), stream);
    if (e != cudaSuccess) return e;
    scatter_runs_kernel<<<blocks_for(axis_size + 1), 256, 0, stream>>>(s.starts, s.keys_out,
                                                                       n_indices, axis_size);
    if (is_f64)
        scatter_sum_kernel<double><<<blocks_for(n), 256, 0, stream>>>(
            static_cast<double *>(out), static_cast<const double *>(updates), s.positions_out,
            s.starts, axis_size, n_indices, post, n);
    else
        scatter_sum_kernel<float><<<blocks_for(n), 256, 0, stream>>>(
            static_cast<float *>(out), static_cast<const float *>(updates), s.positions_out,
            s.starts, axis_size, n_indices, post, n);
    return cudaSuccess;
}

extern "C" void eg__cuda_one_hot(void *out, size_t element_size, uint64_t one_bits,
                                 const void *indices, eg__cuda_index_type index_type,
                                 int64_t n_indices, int64_t depth, cudaStream_t stream) {
    int64_t n = n_indices * depth;
    if (n <= 0) return;
    by_size(element_size, [&](auto tag) {
        using T = decltype(tag);
        T *o = static_cast<T *>(out);
        T one = from_bits<T>(one_bits);
        switch (index_type) {
        case EG__CUDA_INDEX_I32:
            one_hot_kernel<T, int32_t><<<blocks_for(n), 256, 0, stream>>>(
                o, one, static_cast<const int32_t *>(indices), depth, n);
            break;
        case EG__CUDA_INDEX_I64:
            one_hot_kernel<T, int64_t><<<blocks_for(n), 256, 0, stream>>>(
                o, one, static_cast<const int64_t *>(indices), depth, n);
            break;
        case EG__CUDA_INDEX_U8:
            one_hot_kernel<T, uint8_t><<<blocks_for(n), 256, 0, stream>>>(
                o, one, static_cast<const uint8_t *>(indices), depth, n);
            break;
        }
    });
}

extern "C" void eg__cuda_pad(void *out, const int64_t *out_shape, int n_dims, const void *x,
                             const int64_t *x_shape, const int64_t *x_strides,
                             const int64_t *before, size_t element_size, uint64_t value_bits,
                             cudaStream_t stream) {
    int64_t n = 1;
    for (int d = 0; d < n_dims; d++) n *= out_shape[d];
    if (n <= 0) return;
    // Merges an inner dim into its outer one where the inner dim is not padded and x steps
    // through both as one; drops dims that are 1 in both (a size-1 dim of the result over an
    // empty x dim stays: it is all padding).
    pad_geometry g;
    g.n_dims = 0;
    for (int d = 0; d < n_dims; d++) {
        if (out_shape[d] == 1 && x_shape[d] == 1) continue;
        int last = g.n_dims - 1;
        if (last >= 0 && out_shape[d] == x_shape[d] && before[d] == 0 &&
            g.x_strides[last] == x_strides[d] * x_shape[d]) {
            g.out_shape[last] *= out_shape[d];
            g.x_shape[last] *= x_shape[d];
            g.before[last] *= out_shape[d];
            g.x_strides[last] = x_strides[d];
        } else {
            g.out_shape[g.n_dims] = out_shape[d];
            g.x_shape[g.n_dims] = x_shape[d];
            g.x_strides[g.n_dims] = x_strides[d];
            g.before[g.n_dims] = before[d];
            g.n_dims++;
        }
    }
    by_size(element_size, [&](auto tag) {
        using T = decltype(tag);
        pad_kernel<T><<<blocks_for(n), 256, 0, stream>>>(
            static_cast<T *>(out), static_cast<const T *>(x), from_bits<T>(value_bits), g, n);
    });
}
