/* Internal: helpers shared by the CPU kernels. */
#ifndef EAGLE_SRC_BACKEND_CPU_KERNELS_H
#define EAGLE_SRC_BACKEND_CPU_KERNELS_H

#include "backend/backend.h"
#include "base/threadpool.h"

/* relu's select, x if x > 0 or x is NaN, else +0: NaN propagates (as TensorFlow and PyTorch do,
 * so NaN weights do not train on behind a finite loss) and every other input gives the bits of
 * x > 0 ? x : +0. x is evaluated twice: pass a plain value. Every relu kernel and fused relu uses
 * it, so their bits stay equal. */
#define EG__RELU(x, zero) (!((x) <= (zero)) ? (x) : (zero))

/* The kernel table (kernel_table.c). */
extern const eg__kernel_fn eg__cpu_kernels[EG__OP_COUNT];

#define EG_ND_MAX_OPERANDS 4

/* A strided loop over the result's shape for up to four operands (operand 0 is the result),
 * with broadcast axes given stride 0 and adjacent axes merged where every operand allows it, so
 * that the innermost axis is as long as possible. Strides are in bytes. */
typedef struct eg__nd_loop {
    int n_operands;
    int n_dims; /* >= 1 */
    int64_t shape[EG_MAX_DIMS];
    int64_t strides[EG_ND_MAX_OPERANDS][EG_MAX_DIMS];
    char *base[EG_ND_MAX_OPERANDS];
    int64_t element_sizes[EG_ND_MAX_OPERANDS]; /* bytes per element of each operand */
    int64_t n_elems;
} eg__nd_loop;

/* operands[0] is the output; the others broadcast to its shape. */
void eg__nd_loop_init(eg__nd_loop *loop, int n_operands, const eg_tensor *const *operands);

/* Processes n elements whose first elements are at pointers[i], stepping strides[i] bytes. */
typedef void (*eg__nd_inner_fn)(void *context, int64_t n, char **pointers, const int64_t *strides);

/* Runs inner over every element of the loop, in parallel when it is large. */
void eg__nd_loop_run(const eg__nd_loop *loop, eg__nd_inner_fn inner, void *context);

/* Copies src into dst element by element (same shape and dtype, any strides). */
eg_status eg__copy_into(eg_tensor *dst, const eg_tensor *src);

/* A contiguous tensor with src's values: src itself (a new reference) when already contiguous.
 * Not registered with any scope; drop with eg__unref. NULL on out of memory. */
eg_tensor *eg__contiguous_temp(const eg_tensor *src);

/* Whether op runs as one elementwise inner loop (and so can join a fused loop). */
bool eg__cpu_fusable(eg__op op);
/* Runs one fusable op over n elements: out is contiguous in out_dtype; input i starts at
 * inputs[i] and steps input_strides[i] bytes (0 for a broadcast scalar). in_dtype is the dtype of
 * the inputs that carry values (input 1 for where, whose input 0 is the bool condition). */
void eg__cpu_elementwise_flat(eg__op op, const eg__attrs *attrs, eg_dtype out_dtype,
                              eg_dtype in_dtype, int n_inputs, int64_t n, char *out,
                              char *const *inputs, const int64_t *input_strides);

/* Matmul whose output tiles go to a consumer instead of memory (graph mode hands them to the
 * optimizer, so a weight gradient never exists whole). Each tile is computed by the same BLAS
 * call as eg__cpu_matmul's, so its values are bitwise the same. Up to n_scratch lanes (threads)
 * compute tiles at once in one parallel job, each into its own tile of scratch (n_scratch *
 * eg__cpu_matmul_tile_bytes(output) bytes); fn
 * gets the element offset of the tile's first element in the row-major output, its rows and
 * cols, the output's row length and the tile (rows x cols, rows `cols` elements apart). fn runs
 * on pool threads, for disjoint tiles at once. call->output needs no storage. The backend's
 * tiled-product hooks (eg__tile_fn: backend/backend.h). */
size_t eg__cpu_matmul_tile_bytes(const eg_tensor *output);
int64_t eg__cpu_matmul_tile_count(const eg_tensor *output);
eg_status eg__cpu_matmul_tiles(const eg__kernel_call *call, void *scratch, int n_scratch,
                               eg__tile_fn fn, void *context);

/* The matmul or dense kernel for a replayed graph: the same bits as eg__cpu_matmul and
 * eg__cpu_dense, split among the threads from smaller products on. */
eg_status eg__cpu_matmul_graph(const eg__kernel_call *call);
/* A replayed graph's product split into parts that threads run as separate tasks: how many parts
 * call's product (matmul or dense) has for `threads` threads (1: not split), and part `part` of
 * n_parts (n_parts from eg__cpu_matmul_part_count; the parts together give eg__cpu_matmul_graph's
 * bits). */
int64_t eg__cpu_matmul_part_count(const eg__kernel_call *call, int threads);
eg_status eg__cpu_matmul_part(const eg__kernel_call *call, int64_t part, int64_t n_parts);
/* Tile `tile` of eg__cpu_matmul_tiles' tiles, computed into scratch (one tile's bytes) and
 * handed to fn. */
eg_status eg__cpu_matmul_tile(const eg__kernel_call *call, int64_t tile, void *scratch,
                              eg__tile_fn fn, void *context);

/* A 4-d image tensor's sizes and element strides as (n, h, w, c), NHWC or NCHW (convolution and
 * pooling kernels). */
typedef struct eg__image {
    int64_t n, h, w, c;
    int64_t sn, sh, sw, sc;
} eg__image;

static inline eg__image eg__image_of(const eg_tensor *t, bool channels_first) {
    int ah = channels_first ? 2 : 1, aw = channels_first ? 3 : 2, ac = channels_first ? 1 : 3;
    eg__image image = {t->shape[0],   t->shape[ah],   t->shape[aw],   t->shape[ac],
                       t->strides[0], t->strides[ah], t->strides[aw], t->strides[ac]};
    return image;
}

/* OpenBLAS single-threaded (Eagle's pool does the threading), and the server threads its pthread
 * build started at load stopped (matmul.c). Once per process; thread-safe. Every caller of BLAS
 * calls it first. */
void eg__blas_single_threaded(void);
/* The CPU backend's optimizer updates (update.c; backend.h: update_many, update_range). */
void eg__cpu_update_many(const eg__update_params *params, const eg__update_piece *pieces,
                         int n_pieces, int64_t total);
void eg__cpu_update_range(const eg__update_params *params, eg_dtype dtype, void *variable,
                          void *const *slots, int64_t start, int64_t n, const void *grad);
/* The CPU backend's check-numerics scan (numerics.c; backend.h: first_nonfinite). */
int64_t eg__cpu_first_nonfinite(const eg_tensor *t);
/* Frees the convolution's kept filter-gradient buffer (conv.c); the next call allocates anew.
 * For the backend's shutdown; thread-safe. */
void eg__cpu_conv_release_cached(void);
/* The CPU backend's set_threads hook: BLAS stays single-threaded whatever the count. */
void eg__blas_set_threads(int n);

#endif
