/* The strided, broadcasting loop machinery every elementwise kernel runs on. */
#include <string.h>

#include "backend/cpu/kernels.h"
#include "base/error.h"

void eg__nd_loop_init(eg__nd_loop *loop, int n_operands, const eg_tensor *const *operands) {
    const eg_tensor *out = operands[0];
    loop->n_operands = n_operands;
    loop->n_elems = out->n_elems;
    int n = 0;
    /* Walk the output's axes, dropping size-1 axes and merging an axis into the previous one
     * when every operand steps through both as one. */
    for (int d = 0; d < out->n_dims; d++) {
        if (out->shape[d] == 1) continue;
        int64_t strides[EG_ND_MAX_OPERANDS];
        for (int i = 0; i < n_operands; i++) {
            const eg_tensor *t = operands[i];
            int td = d - (out->n_dims - t->n_dims);
            strides[i] = (td < 0 || t->shape[td] == 1)
                             ? 0
                             : t->strides[td] * (int64_t)eg_dtype_size(t->dtype);
        }
        bool merge = n > 0;
        for (int i = 0; merge && i < n_operands; i++)
            merge = loop->strides[i][n - 1] == strides[i] * out->shape[d];
        if (merge) {
            loop->shape[n - 1] *= out->shape[d];
            for (int i = 0; i < n_operands; i++) loop->strides[i][n - 1] = strides[i];
        } else {
            loop->shape[n] = out->shape[d];
            for (int i = 0; i < n_operands; i++) loop->strides[i][n] = strides[i];
            n++;
        }
    }
    if (n == 0) {
        loop->shape[0] = 1;
        for (int i = 0; i < n_operands; i++) loop->strides[i][0] = 0;
        n = 1;
    }
    loop->n_dims = n;
    for (int i = 0; i < n_operands; i++) {
        loop->base[i] = eg__data(operands[i]);
        loop->element_sizes[i] = (int64_t)eg_dtype_size(operands[i]->dtype);
    }
}

typedef struct run_context {
    const eg__nd_loop *loop;
    eg__nd_inner_fn inner;
    void *context;
} run_context;

static void run_range(void *arg, int64_t begin, int64_t end) {
    const run_context *rc = arg;
    const eg__nd_loop *loop = rc->loop;
    int last = loop->n_dims - 1;
    int64_t index[EG_MAX_DIMS];
    char *pointers[EG_ND_MAX_OPERANDS];
    int64_t inner_strides[EG_ND_MAX_OPERANDS];
    int64_t rest = begin;
    for (int d = last; d >= 0; d--) {
        index[d] = rest % loop->shape[d];
        rest /= loop->shape[d];
    }
    for (int i = 0; i < loop->n_operands; i++) {
        pointers[i] = loop->base[i];
        for (int d = 0; d <= last; d++) pointers[i] += index[d] * loop->strides[i][d];
        inner_strides[i] = loop->strides[i][last];
    }
    int64_t position = begin;
    while (position < end) {
        int64_t count = loop->shape[last] - index[last];
        if (count > end - position) count = end - position;
        rc->inner(rc->context, count, pointers, inner_strides);
        position += count;
        if (position >= end) break;
        /* carry into the outer axes */
        index[last] = 0;
        int d = last - 1;
        while (d >= 0 && ++index[d] == loop->shape[d]) index[d--] = 0;
        for (int i = 0; i < loop->n_operands; i++) {
            pointers[i] = loop->base[i];
            for (int k = 0; k < last; k++) pointers[i] += index[k] * loop->strides[i][k];
        }
    }
}

/* Transposed operands: when an operand steps far between neighbours of the innermost axis, a
 * plain walk touches a new cache line (and often a new page) per element. The last two axes are
 * walked in tiles instead, TILE_ROWS x TILE_COLUMNS, so such an operand reads each cache line for
 * TILE_ROWS rows in a row while it is still cached. Elementwise results do not depend on the
 * order they are computed in. The tile shape and the prefetch distance were chosen on a
 * transposed 4096 x 4096 f32 add (one thread, best of 30 by CPU time: 84 ms before staging,
 * ~32 ms with it; 32 x 128 tiles and other distances were no better). */
enum { TILE_ROWS = 64, TILE_COLUMNS = 128, FAR_STRIDE = 64 };
enum { PREFETCH_AHEAD = 8 };

static bool is_far(int64_t stride) {
    return stride > FAR_STRIDE || stride < -FAR_STRIDE;
}

/* dst[r][c] (rows x columns, row stride TILE_COLUMNS) = the 4-byte element at
 * src + r * 4 + c * column_stride: a transposed matrix's tile made contiguous, 4 x 4 blocks at a
 * time so that each source row is read 16 bytes at a time. */
static void transpose_into(float *dst, const char *src, int64_t column_stride, int64_t rows,
                           int64_t columns) {
    int64_t main_rows = rows - rows % 4, main_columns = columns - columns % 4;
    for (int64_t c = 0; c < main_columns; c += 4) {
        const char *s = src + c * column_stride;
        /* the rows to come are far apart: no hardware prefetcher follows them */
        for (int64_t k = c + PREFETCH_AHEAD; k < c + PREFETCH_AHEAD + 4 && k < columns; k++)
            for (int64_t offset = 0; offset < rows * 4; offset += 64)
                __builtin_prefetch(src + k * column_stride + offset);
        for (int64_t r = 0; r < main_rows; r += 4) {
            float block[4][4];
            for (int k = 0; k < 4; k++) memcpy(block[k], s + k * column_stride + r * 4, 16);
            for (int k = 0; k < 4; k++)
                for (int j = 0; j < 4; j++) dst[(r + k) * TILE_COLUMNS + c + j] = block[j][k];
        }
        for (int64_t r = main_rows; r < rows; r++)
            for (int j = 0; j < 4; j++)
                memcpy(&dst[r * TILE_COLUMNS + c + j], s + j * column_stride + r * 4, 4);
    }
    for (int64_t c = main_columns; c < columns; c++)
        for (int64_t r = 0; r < rows; r++)
            memcpy(&dst[r * TILE_COLUMNS + c], src + c * column_stride + r * 4, 4);
}

static bool wants_tiles(const eg__nd_loop *loop) {
    int last = loop->n_dims - 1;
    if (last < 1 || loop->shape[last] < TILE_ROWS || loop->shape[last - 1] < TILE_ROWS)
        return false;
    for (int i = 0; i < loop->n_operands; i++) {
        int64_t inner = loop->strides[i][last], outer = loop->strides[i][last - 1];
        if (is_far(inner) && outer < inner && outer > -inner) return true;
    }
    return false;
}

typedef struct tiles {
    int64_t row_tiles, column_tiles, per_matrix; /* tiles per (rows, columns) matrix */
} tiles;

static void run_tiles(void *arg, int64_t begin, int64_t end) {
    const run_context *rc = arg;
    const eg__nd_loop *loop = rc->loop;
    int last = loop->n_dims - 1;
    tiles t = {(loop->shape[last - 1] + TILE_ROWS - 1) / TILE_ROWS,
               (loop->shape[last] + TILE_COLUMNS - 1) / TILE_COLUMNS, 0};
    t.per_matrix = t.row_tiles * t.column_tiles;
    int64_t inner_strides[EG_ND_MAX_OPERANDS];
    for (int i = 0; i < loop->n_operands; i++) inner_strides[i] = loop->strides[i][last];
    for (int64_t item = begin; item < end; item++) {
        int64_t matrix = item / t.per_matrix, tile = item % t.per_matrix;
        int64_t row0 = tile / t.column_tiles * TILE_ROWS;
        int64_t column0 = tile % t.column_tiles * TILE_COLUMNS;
        int64_t rows =
            loop->shape[last - 1] - row0 < TILE_ROWS ? loop->shape[last - 1] - row0 : TILE_ROWS;
        int64_t columns =
            loop->shape[last] - column0 < TILE_COLUMNS ? loop->shape[last] - column0 : TILE_COLUMNS;
        char *base[EG_ND_MAX_OPERANDS];
        for (int i = 0; i < loop->n_operands; i++) {
            base[i] = loop->base[i] + row0 * loop->strides[i][last - 1] +
                      column0 * loop->strides[i][last];
            int64_t rest = matrix; /* the outer axes' index, last outer axis fastest */
            for (int d = last - 2; d >= 0; d--) {
                base[i] += rest % loop->shape[d] * loop->strides[i][d];
                rest /= loop->shape[d];
            }
        }
        /* Inputs stored transposed (4-byte elements, rows of the tile contiguous in memory) are
         * first transposed into a small local tile: read straight, each of their cache lines is
         * used by one row of the tile while dozens of others compete for the same L1 sets
         * (columns of a power-of-two-wide matrix are a multiple of 4 KiB apart). */
        float staged[2][TILE_ROWS * TILE_COLUMNS];
        char *tile_base[EG_ND_MAX_OPERANDS];
        int64_t row_strides[EG_ND_MAX_OPERANDS], strides[EG_ND_MAX_OPERANDS];
        int n_staged = 0;
        for (int i = 0; i < loop->n_operands; i++) {
            tile_base[i] = base[i];
            row_strides[i] = loop->strides[i][last - 1];
            strides[i] = inner_strides[i];
            if (i > 0 && n_staged < 2 && loop->element_sizes[i] == 4 && row_strides[i] == 4 &&
                is_far(inner_strides[i])) {
                transpose_into(staged[n_staged], base[i], inner_strides[i], rows, columns);
                tile_base[i] = (char *)staged[n_staged++];
                row_strides[i] = TILE_COLUMNS * 4;
                strides[i] = 4;
            }
        }
        for (int64_t r = 0; r < rows; r++) {
            char *pointers[EG_ND_MAX_OPERANDS];
            for (int i = 0; i < loop->n_operands; i++)
                pointers[i] = tile_base[i] + r * row_strides[i];
            rc->inner(rc->context, columns, pointers, strides);
        }
    }
}

void eg__nd_loop_run(const eg__nd_loop *loop, eg__nd_inner_fn inner, void *context) {
    run_context rc = {loop, inner, context};
    if (wants_tiles(loop)) {
        int last = loop->n_dims - 1;
        int64_t n_tiles = loop->n_elems / (loop->shape[last] * loop->shape[last - 1]) *
                          ((loop->shape[last - 1] + TILE_ROWS - 1) / TILE_ROWS) *
                          ((loop->shape[last] + TILE_COLUMNS - 1) / TILE_COLUMNS);
        eg__parallel_for(n_tiles, EG_PARALLEL_GRAIN_ELEMENTWISE / (TILE_ROWS * TILE_COLUMNS) + 1,
                         run_tiles, &rc);
        return;
    }
    eg__parallel_for(loop->n_elems, EG_PARALLEL_GRAIN_ELEMENTWISE, run_range, &rc);
}

typedef struct copy_context {
    size_t size;
} copy_context;

static void copy_inner(void *arg, int64_t n, char **p, const int64_t *s) {
    size_t size = ((copy_context *)arg)->size;
    if (s[0] == (int64_t)size && s[1] == (int64_t)size) {
        memcpy(p[0], p[1], (size_t)n * size);
        return;
    }
    char *dst = p[0];
    const char *src = p[1];
    switch (size) {
    case 2:
        for (int64_t i = 0; i < n; i++, dst += s[0], src += s[1]) memcpy(dst, src, 2);
        break;
    case 4:
        for (int64_t i = 0; i < n; i++, dst += s[0], src += s[1]) memcpy(dst, src, 4);
        break;
    case 8:
        for (int64_t i = 0; i < n; i++, dst += s[0], src += s[1]) memcpy(dst, src, 8);
        break;
    default:
        for (int64_t i = 0; i < n; i++, dst += s[0], src += s[1]) memcpy(dst, src, size);
        break;
    }
}

eg_status eg__copy_into(eg_tensor *dst, const eg_tensor *src) {
    if (dst->dtype != src->dtype || dst->n_elems != src->n_elems)
        return eg__error(EG_ERR_INTERNAL, "copy_into: mismatched tensors");
    if (dst->n_elems == 0) return EG_OK;
    if (eg__is_contiguous(dst) && eg__is_contiguous(src) && dst->n_dims == src->n_dims) {
        memcpy(eg__data(dst), eg__data(src), (size_t)dst->n_elems * eg_dtype_size(dst->dtype));
        return EG_OK;
    }
    /* A reshaping copy: walk dst as if it had src's shape (dst is contiguous then). */
    eg_tensor dst_as_src;
    if (dst->n_dims != src->n_dims ||
        memcmp(dst->shape, src->shape, sizeof(int64_t) * (size_t)dst->n_dims) != 0) {
        if (!eg__is_contiguous(dst))
            return eg__error(EG_ERR_INTERNAL, "copy_into: reshaping into a strided tensor");
        dst_as_src = *dst;
        dst_as_src.n_dims = src->n_dims;
        memcpy(dst_as_src.shape, src->shape, sizeof dst_as_src.shape);
        eg__contiguous_strides(src->n_dims, src->shape, dst_as_src.strides);
        dst = &dst_as_src;
    }
    const eg_tensor *operands[2] = {dst, src};
    eg__nd_loop loop;
    eg__nd_loop_init(&loop, 2, operands);
    copy_context context = {eg_dtype_size(dst->dtype)};
    eg__nd_loop_run(&loop, copy_inner, &context);
    return EG_OK;
}

eg_tensor *eg__contiguous_temp(const eg_tensor *src) {
    if (eg__is_contiguous(src)) {
        eg__ref(src);
        return (eg_tensor *)src;
    }
    eg__scope_suspend();
    eg_tensor *t = eg__tensor_alloc(src->dtype, src->n_dims, src->shape, src->device);
    eg__scope_resume();
    if (t && eg__copy_into(t, src) != EG_OK) {
        eg__unref(t);
        return NULL;
    }
    return t;
}
