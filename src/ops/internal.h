/* Internal: op identifiers, attributes, the op registry and the kernel/backward interfaces. */
#ifndef EAGLE_SRC_OPS_INTERNAL_H
#define EAGLE_SRC_OPS_INTERNAL_H

#include "core/tensor_internal.h"
#include "eagle/ops.h"

typedef enum eg__op {
#define EG_OP(ENUM, name, n_inputs, infer, backward, flags) EG__OP_##ENUM,
#include "ops/ops.def"
#undef EG_OP
    EG__OP_COUNT
} eg__op;

enum {
    EG__OPF_ELEMENTWISE = 1u << 0,
    EG__OPF_REDUCTION = 1u << 1,
    EG__OPF_VIEW = 1u << 2,
    EG__OPF_NO_GRAD = 1u << 3,
};

/* The geometry of 2-d windows (convolutions and pooling); spatial pairs are (height, width).
 * Padding is already resolved (SAME has become explicit amounts) by the public functions. */
typedef struct eg__window {
    int kernel[2];       /* pooling window (convolutions take theirs from the filter) */
    int stride[2];       /* >= 1 */
    int dilation[2];     /* >= 1; convolutions only (pooling: 1) */
    int64_t pad[4];      /* top, bottom, left, right; >= 0 */
    int groups;          /* convolutions: input and output channels split into this many groups */
    bool channels_first; /* NCHW images; NHWC (the default, like Keras) otherwise */
} eg__window;

/* Every op's parameters in one plain struct, so tapes and graphs can copy them by value. Each op
 * documents (in its infer function) which fields it reads. */
typedef struct eg__attrs {
    int axis;
    int n_axes;
    int axes[EG_MAX_DIMS]; /* normalised, ascending (reductions); a permutation (permute) */
    bool keepdims;
    bool transpose_a, transpose_b;
    bool training;
    eg_dtype dtype;
    double scalars[2];
    int n_dims;
    int64_t shape[EG_MAX_DIMS];    /* a target shape (reshape, broadcast_to, scatter/unslice) */
    int64_t ints[2 * EG_MAX_DIMS]; /* slice start/stop/step, pad widths */
    uint64_t seed;
    /* matmul and dense in low precision (eg_matmul_low_precision): when low_precision is set the
     * product multiplies in compute_dtype (bf16 or f16), reading f32 operands rounded to it (no
     * copy), sums in f32 and gives result_dtype (f32 or compute_dtype); otherwise the operands
     * share one dtype, the result's. */
    bool low_precision;
    /* exp, tanh, sigmoid, gelu and dense built inside a fast-math region (eg_fast_math_begin):
     * backends may compute the cheaper approximations (the CPU does for f32) */
    bool fast_math;
    eg_dtype compute_dtype, result_dtype;
    eg__window window;       /* conv2d*, *_pool2d* */
    const eg_device *device; /* to_device: the destination */
} eg__attrs;

typedef struct eg__kernel_call {
    eg__op op;
    int n_inputs;
    const eg_tensor *const *inputs;
    eg_tensor *output;
    const eg__attrs *attrs;
} eg__kernel_call;
typedef eg_status (*eg__kernel_fn)(const eg__kernel_call *call);

typedef eg_status (*eg__infer_fn)(eg__op op, int n_inputs, const eg_tensor *const *inputs,
                                  const eg__attrs *attrs, eg__meta *meta);

typedef struct eg__op_def {
    const char *name;
    int n_inputs;
    eg__infer_fn infer;
    unsigned flags;
} eg__op_def;

extern const eg__op_def eg__op_defs[EG__OP_COUNT];

#define EG_OP(ENUM, name, n_inputs, infer, backward, flags)                                        \
    eg_status eg__infer_##infer(eg__op op, int n_in, const eg_tensor *const *in,                   \
                                const eg__attrs *attrs, eg__meta *meta);
#include "ops/ops.def"
#undef EG_OP

/* Raises an error prefixed by the op's name ("matmul: ...") and returns status. */
eg_status eg__op_error(eg__op op, eg_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- which dtypes an op's schema takes (ops/schema_dtypes.c) ---- */

/* The most inputs an op's dtype probe gives it. */
#define EG__OP_PROBE_MAX_INPUTS 6

/* Whether op's schema (its infer function) accepts the op with its value inputs in `dtype`:
 * asked of eg__op_defs[op].infer on small valid storage-less inputs, the other inputs in their
 * fixed dtypes (bool conditions, i64 indices). one_hot's value input is its index tensor. Never
 * raises an error and leaves a pending one as it was; false for an op or dtype out of range. */
bool eg__op_accepts_dtype(eg__op op, eg_dtype dtype);
/* The dtypes of the probe's inputs for op with value inputs in value_dtype, into dtypes (room
 * for EG__OP_PROBE_MAX_INPUTS); returns how many (0 for an op out of range). What a backend's
 * supports() is asked about for the same question. */
int eg__op_probe_dtypes(eg__op op, eg_dtype value_dtype, eg_dtype *dtypes);

#endif
