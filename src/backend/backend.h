/* Internal: the device interface, second half — what a backend computes with.
 *
 * Every device kind has one backend (the CPU's serves all host devices cpu:N). The dispatch
 * layer finds a device's backend by its kind (eg__backend_of) and is the only caller of these
 * pointers besides the executors, which reach the optional hooks through it. The first half, a
 * device's memory, is src/device/device.h. */
#ifndef EAGLE_SRC_BACKEND_BACKEND_H
#define EAGLE_SRC_BACKEND_BACKEND_H

#include "device/device.h"
#include "ops/internal.h"

/* What a supports() query describes: the op, its inputs' dtypes, and whether every input is
 * contiguous (a backend may take strided inputs for some ops only). */
typedef struct eg__op_signature {
    eg__op op;
    int n_inputs;
    const eg_dtype *dtypes;
    bool contiguous;
} eg__op_signature;

/* ---- optimizer updates: an update is an effect with a kernel per device ---- */

typedef enum eg__update_rule {
    EG__UPDATE_SGD,
    EG__UPDATE_ADAM,
    EG__UPDATE_RMSPROP
} eg__update_rule;

/* Slots per variable at most (RMSprop: velocity, momentum, average gradient). */
#define EG__UPDATE_MAX_SLOTS 3

/* The scalars of one update step, computed once in double by the optimizer; the kernels compute
 * in the variable's dtype (Keras' formulas). alpha: Adam's bias-corrected step size. */
typedef struct eg__update_params {
    eg__update_rule rule;
    double lr;
    double weight_decay; /* 0: none */
    double momentum;
    bool nesterov;
    double beta_1, beta_2, epsilon, alpha;
    double rho;
} eg__update_params;

/* One variable's share of a multi-tensor update: its contiguous data, gradient and slots (NULL
 * where a slot is unused), as elements [first, first + count) of the concatenation. */
typedef struct eg__update_piece {
    eg_dtype dtype; /* f32 or f64 */
    void *variable;
    const void *grad;
    void *slots[EG__UPDATE_MAX_SLOTS];
    int64_t first, count;
} eg__update_piece;

/* ---- fused elementwise groups, handed whole to a backend that compiles them ---- */

/* The most members and leaves one fused group has (the lazy planner never builds larger). */
#define EG__FUSED_MAX_MEMBERS 64
#define EG__FUSED_MAX_LEAVES  64

/* An input of a member: another member's value (is_member) or a leaf. */
typedef struct eg__fused_operand {
    bool is_member;
    int index;
} eg__fused_operand;

/* A tensor the group reads: its data and its byte strides aligned with the root's axes (0 along
 * a broadcast axis). */
typedef struct eg__fused_leaf {
    eg_dtype dtype;
    const char *data;
    int64_t strides[EG_MAX_DIMS];
} eg__fused_leaf;

/* One op of the group, in evaluation order; the last member is the root (the group's output,
 * contiguous in the root's shape). in_dtype: the dtype of its value inputs. */
typedef struct eg__fused_member {
    eg__op op;
    const eg__attrs *attrs;
    eg_dtype dtype, in_dtype;
    int n_inputs;
    eg__fused_operand operands[3];
} eg__fused_member;

typedef struct eg__fused_group {
    int n_dims;
    int64_t shape[EG_MAX_DIMS];
    int64_t n_elems;
    char *out;
    const eg_device *device;
    int n_members, n_leaves;
    eg__fused_member members[EG__FUSED_MAX_MEMBERS];
    eg__fused_leaf leaves[EG__FUSED_MAX_LEAVES];
} eg__fused_group;

/* A consumer of an output's tiles: see tiled_product below. */
typedef void (*eg__tile_fn)(void *context, int64_t offset, int rows, int cols, int64_t row_length,
                            const void *tile);

typedef struct eg__backend {
    const char *name; /* "cpu" */
    eg_device_type type;
    /* Indexed by eg__op; NULL entries are unsupported on this backend. */
    const eg__kernel_fn *kernels;
    /* Whether the kernel of sig->op takes these inputs (dtype, layout); false also for ops
     * without a kernel. Never raises an error. */
    bool (*supports)(const eg__op_signature *sig);

    /* Optimizer updates, in place: several variables' whole updates as one piece of work over
     * their concatenation (total elements), and elements [start, start + n) of one variable
     * (variable and slots its whole arrays, grad the n gradient elements of the range: graph
     * replay updates a weight tile by tile as its gradient's product makes it). Every update is
     * elementwise, so any split gives the same bits. */
    void (*update_many)(const eg__update_params *params, const eg__update_piece *pieces,
                        int n_pieces, int64_t total);
    void (*update_range)(const eg__update_params *params, eg_dtype dtype, void *variable,
                         void *const *slots, int64_t start, int64_t n, const void *grad);

    /* ---- optional hooks (NULL where the backend has none) ---- */

    /* Fused elementwise groups (lazy and graph modes): whether op can join a fused loop, and one
     * op of such a loop over n elements (out contiguous in out_dtype; input i at inputs[i],
     * stepping input_strides[i] bytes, 0 for a broadcast scalar; in_dtype the dtype of the
     * value inputs). */
    bool (*fusable)(eg__op op);
    void (*elementwise_flat)(eg__op op, const eg__attrs *attrs, eg_dtype out_dtype,
                             eg_dtype in_dtype, int n_inputs, int64_t n, char *out,
                             char *const *inputs, const int64_t *input_strides);

    /* A whole fused group in one kernel (the CUDA backend generates its source and compiles it
     * with NVRTC); NULL: the group runs block by block through elementwise_flat. */
    eg_status (*run_fused)(const eg__fused_group *group);
    /* Compiles (or finds in its caches) the kernel for group's pattern without running it: what
     * EG_FUSION_CHECK asks of every group the CPU fuses, so that CI compiles each pattern the
     * tests produce even without a GPU. EG_ERR_DTYPE for a dtype the backend does not fuse,
     * EG_ERR_UNSUPPORTED with the compiler's log when the source does not compile. */
    eg_status (*compile_fused)(const eg__fused_group *group);

    /* Graph replay: a kernel to use instead of kernels[op] in a replayed graph (which may split
     * differently among the threads but gives the same bits); NULL entries: kernels[op]. */
    const eg__kernel_fn *replay_kernels;

    /* Tiled products with an epilogue (graph mode hands a weight gradient's tiles straight to
     * the optimizer update, so the gradient never exists whole): scratch bytes one tile needs,
     * the tile count, all tiles in one parallel job (n_scratch lanes, scratch n_scratch * bytes
     * long), and one tile into scratch. fn gets the element offset of the tile's first element
     * in the row-major output, its rows and cols, the output's row length and the tile. */
    size_t (*product_tile_bytes)(const eg_tensor *output);
    int64_t (*product_tile_count)(const eg_tensor *output);
    eg_status (*product_tiles)(const eg__kernel_call *call, void *scratch, int n_scratch,
                               eg__tile_fn fn, void *context);
    eg_status (*product_tile)(const eg__kernel_call *call, int64_t tile, void *scratch,
                              eg__tile_fn fn, void *context);

    /* Parallel replay: how many parts a product (matmul or dense) splits into for `threads`
     * threads (1: not split), and part `part` of n_parts (the parts together give the replay
     * kernel's bits). */
    int64_t (*product_part_count)(const eg__kernel_call *call, int threads);
    eg_status (*product_part)(const eg__kernel_call *call, int64_t part, int64_t n_parts);

    /* The host thread count changed (eg_set_num_threads): the CPU backend keeps its BLAS
     * single-threaded under Eagle's pool. */
    void (*set_threads)(int n);
    /* The index of t's first element that is NaN or infinite (t a float tensor on one of this
     * backend's devices, any layout, in row-major order), -1 when every element is finite: what
     * check numerics asks of every result. */
    int64_t (*first_nonfinite)(const eg_tensor *t);
    /* What ran for call, for the profiler's trace ("cudnn fwd IMPLICIT_PRECOMP_GEMM ...", "cublasLt
     * algo 23 ..."): a string that lives as long as the process, or NULL. Never raises. */
    const char *(*kernel_note)(const eg__kernel_call *call);
    /* Frees what the backend holds (eg_shutdown). */
    void (*shutdown)(void);

    /* ---- captured graphs (CUDA graphs; NULL where the backend has none) ---- */

    /* Starts recording the work enqueued on device's stream instead of running it; every kernel
     * launch, library call and device-to-device copy until capture_end is recorded. Work that
     * cannot be recorded (a copy from or to the host, a synchronization) fails while capturing,
     * and so does capture_end then. */
    eg_status (*capture_begin)(const eg_device *device);
    /* Ends the recording: *graph receives an executable graph that owns the temporaries its
     * kernels use (on failure NULL, and the work is discarded). */
    eg_status (*capture_end)(const eg_device *device, void **graph);
    /* Enqueues the recorded work again, as one launch. */
    eg_status (*graph_launch)(const eg_device *device, void *graph);
    void (*graph_free)(const eg_device *device, void *graph);
    /* A graph's per-call scalars (an optimizer step's learning rate and bias corrections): the
     * update kernels recorded in a capture read them from memory of the graph's, and between
     * refresh_begin and refresh_end an update call launches nothing but writes this call's
     * scalars there, in the order of the capture (after the previous launch has read them).
     * refresh_end: EG_ERR_STATE when the calls differed from the capture's. */
    eg_status (*graph_refresh_begin)(const eg_device *device, void *graph);
    eg_status (*graph_refresh_end)(const eg_device *device, void *graph);

    /* ---- the devices of a kind that is not the host's (NULL for the CPU) ---- */

    /* The usable devices, found at the first call (thread-safe): cuda:0 … in order. */
    int (*device_count)(void);
    const eg_device *(*device_at)(int index);
    /* Why no device of this kind is usable (no driver, driver too old, no GPU), NULL when one
     * is; static storage. */
    const char *(*unavailable)(void);
    /* One line on the backend (versions, architectures, libraries found), static storage. */
    const char *(*describe)(void);
    /* One line on one of its devices (model, memory, compute capability), static storage. */
    const char *(*describe_device)(const eg_device *device);
} eg__backend;

/* The CPU backend (src/backend/cpu/backend.c). */
extern const eg__backend eg__cpu_backend;
#ifdef EG_HAVE_CUDA
/* The CUDA backend (src/backend/cuda/backend.c), in builds with CUDA. */
extern const eg__backend eg__cuda_backend;
#endif

#endif
