/* Which dtypes each op's schema accepts, asked of the op's own infer function: the schema is the
 * single source of truth (ops.def, infer.c), so a table of "supported dtypes" written by hand
 * next to it would drift. eg__op_accepts_dtype builds storage-less input tensors on the stack
 * (a zeroed eg_tensor with dtype, shape, contiguous strides and n_elems) from a small template
 * per op and runs the infer function on them.
 *
 * That is safe because infer functions read metadata only: dtype, n_dims, shape, strides, offset
 * and n_elems of their inputs, and the attributes (checked for every eg__infer_* of infer.c and
 * eg__infer_dense, next to dense's builder: none reads storage, device, lazy or scope fields;
 * to_device reads attrs->device only to check that it is set). Their errors are raised through the
 * per-thread error state, which the probe sets aside first and restores afterwards, so a probe
 * never leaves an error behind nor hides an earlier one.
 *
 * Templates: each input is "ROLE SHAPE": v = a value input, in the probed dtype; b = a bool
 * condition (where); i = i64 indices (gather, scatter_add, labels); s = a statistic or parameter
 * of batch normalization, in the probed dtype but f32 when that is bf16 or f16 (the mix those
 * ops take: low-precision activations, f32 statistics); q = i8 quantized weights and f = f32
 * scales (the int8 ops). one_hot's only input is its
 * index tensor: it is the value input there (its schema takes i32, i64 and u8). Shapes and
 * attributes are small and valid for every dtype the op takes, so a rejection can only come from
 * the dtype. Every op of ops.def must have a row: a missing row (all zeros), a malformed one or
 * one whose input count is not the op's makes the probe accept no dtype at all, which
 * tests/test_op_devices.c (test_every_op_has_a_case) reports for each such op. */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "device/device.h"
#include "ops/internal.h"

typedef struct probe {
    const char *inputs[EG__OP_PROBE_MAX_INPUTS]; /* "ROLE SHAPE", NULL after the last */
    eg__attrs attrs;
} probe;

/* to_device only checks that a destination is named; a placeholder keeps the probe from
 * touching the device registry (which would fix the host's split before the caller's
 * eg_device_configure_cpus). */
static const struct eg_device probe_destination;

/* Designators of the window attributes: a 3x3 convolution, stride 1 (the filter gives the
 * size); a 2x2 pooling, stride 2. */
#define CONV_WINDOW .window.stride = {1, 1}, .window.dilation = {1, 1}, .window.groups = 1
#define POOL_WINDOW                                                                                \
    .window.kernel = {2, 2}, .window.stride = {2, 2}, .window.dilation = {1, 1}, .window.groups = 1

/* One row per op of ops.def: its inputs and attributes. A missing row is all zeros: its probe then
 * accepts no dtype, which test_op_devices (test_every_op_has_a_case) reports. */
static const probe probes[EG__OP_COUNT] = {
    [EG__OP_NEG] = {.inputs = {"v 2,3"}},
    [EG__OP_ABS] = {.inputs = {"v 2,3"}},
    [EG__OP_EXP] = {.inputs = {"v 2,3"}},
    [EG__OP_LOG] = {.inputs = {"v 2,3"}},
    [EG__OP_SQRT] = {.inputs = {"v 2,3"}},
    [EG__OP_RSQRT] = {.inputs = {"v 2,3"}},
    [EG__OP_SIN] = {.inputs = {"v 2,3"}},
    [EG__OP_COS] = {.inputs = {"v 2,3"}},
    [EG__OP_TANH] = {.inputs = {"v 2,3"}},
    [EG__OP_SIGMOID] = {.inputs = {"v 2,3"}},
    [EG__OP_RELU] = {.inputs = {"v 2,3"}},
    [EG__OP_GELU] = {.inputs = {"v 2,3"}},
    [EG__OP_SOFTPLUS] = {.inputs = {"v 2,3"}},
    [EG__OP_SIGN] = {.inputs = {"v 2,3"}},
    [EG__OP_SQUARE] = {.inputs = {"v 2,3"}},
    [EG__OP_RECIPROCAL] = {.inputs = {"v 2,3"}},
    [EG__OP_ERF] = {.inputs = {"v 2,3"}},
    [EG__OP_ADD] = {.inputs = {"v 2,3", "v 2,3"}},
    [EG__OP_SUB] = {.inputs = {"v 2,3", "v 2,3"}},
    [EG__OP_MUL] = {.inputs = {"v 2,3", "v 2,3"}},
    [EG__OP_DIV] = {.inputs = {"v 2,3", "v 2,3"}},
    [EG__OP_POW] = {.inputs = {"v 2,3", "v 2,3"}},
    [EG__OP_MAXIMUM] = {.inputs = {"v 2,3", "v 2,3"}},
    [EG__OP_MINIMUM] = {.inputs = {"v 2,3", "v 2,3"}},
    [EG__OP_EQUAL] = {.inputs = {"v 2,3", "v 2,3"}},
    [EG__OP_NOT_EQUAL] = {.inputs = {"v 2,3", "v 2,3"}},
    [EG__OP_LESS] = {.inputs = {"v 2,3", "v 2,3"}},
    [EG__OP_LESS_EQUAL] = {.inputs = {"v 2,3", "v 2,3"}},
    [EG__OP_GREATER] = {.inputs = {"v 2,3", "v 2,3"}},
    [EG__OP_GREATER_EQUAL] = {.inputs = {"v 2,3", "v 2,3"}},
    [EG__OP_WHERE] = {.inputs = {"b 2,3", "v 2,3", "v 2,3"}},
    [EG__OP_CAST] = {.inputs = {"v 2,3"}, .attrs = {.dtype = EG_DTYPE_F32}},
    [EG__OP_CLIP] = {.inputs = {"v 2,3"}},
    [EG__OP_SUM] = {.inputs = {"v 2,3"}, .attrs = {.n_axes = 1, .axes = {1}}},
    [EG__OP_MEAN] = {.inputs = {"v 2,3"}, .attrs = {.n_axes = 1, .axes = {1}}},
    [EG__OP_MAX] = {.inputs = {"v 2,3"}, .attrs = {.n_axes = 1, .axes = {1}}},
    [EG__OP_MIN] = {.inputs = {"v 2,3"}, .attrs = {.n_axes = 1, .axes = {1}}},
    [EG__OP_LOGSUMEXP] = {.inputs = {"v 2,3"}, .attrs = {.n_axes = 1, .axes = {1}}},
    [EG__OP_VAR] = {.inputs = {"v 2,3"}, .attrs = {.n_axes = 1, .axes = {1}}},
    [EG__OP_ARGMAX] = {.inputs = {"v 2,3"}, .attrs = {.axis = 1}},
    [EG__OP_ARGMIN] = {.inputs = {"v 2,3"}, .attrs = {.axis = 1}},
    [EG__OP_SOFTMAX] = {.inputs = {"v 2,3"}, .attrs = {.axis = 1}},
    [EG__OP_LOG_SOFTMAX] = {.inputs = {"v 2,3"}, .attrs = {.axis = 1}},
    [EG__OP_MATMUL] = {.inputs = {"v 2,3", "v 3,4"}},
    [EG__OP_DENSE] = {.inputs = {"v 2,3", "v 3,4", "v 4"}},
    [EG__OP_RESHAPE] = {.inputs = {"v 2,3"}, .attrs = {.n_dims = 1, .shape = {6}}},
    [EG__OP_PERMUTE] = {.inputs = {"v 2,3"}, .attrs = {.n_axes = 2, .axes = {1, 0}}},
    [EG__OP_SLICE] = {.inputs = {"v 2,3"}, .attrs = {.axis = 1, .ints = {0, 2, 1}}},
    [EG__OP_BROADCAST_TO] = {.inputs = {"v 1,3"}, .attrs = {.n_dims = 2, .shape = {2, 3}}},
    [EG__OP_COPY] = {.inputs = {"v 2,3"}},
    [EG__OP_TO_DEVICE] = {.inputs = {"v 2,3"}, .attrs = {.device = &probe_destination}},
    [EG__OP_CONCAT] = {.inputs = {"v 2,3", "v 2,1"}, .attrs = {.axis = 1}},
    [EG__OP_GATHER] = {.inputs = {"v 4,3", "i 5"}},
    [EG__OP_SCATTER_ADD] = {.inputs = {"v 5,3", "i 5"}, .attrs = {.n_dims = 2, .shape = {4, 3}}},
    [EG__OP_UNSLICE] = {.inputs = {"v 2,3"},
                        .attrs = {.axis = 1, .n_dims = 2, .shape = {2, 6}, .ints = {1, 6, 2}}},
    [EG__OP_ONE_HOT] = {.inputs = {"v 2,3"}, .attrs = {.dtype = EG_DTYPE_F32, .ints = {4}}},
    [EG__OP_PAD] = {.inputs = {"v 2,3"}, .attrs = {.ints = {1, 0, 0, 1}}},
    [EG__OP_SPARSE_SOFTMAX_CROSS_ENTROPY] = {.inputs = {"v 4,5", "i 4"}},
    [EG__OP_DROPOUT] = {.inputs = {"v 2,3"}},
    [EG__OP_RELU_BACKWARD] = {.inputs = {"v 2,3", "v 2,3"}},
    [EG__OP_MUL_ADD] = {.inputs = {"v 2,3", "v 3", "v 3"}},
    [EG__OP_MOMENTS] = {.inputs = {"v 4,3"}, .attrs = {.n_axes = 1, .axes = {0}}},
    [EG__OP_BATCH_NORM] = {.inputs = {"v 4,3", "s 1,3", "s 1,3", "s 1,3", "s 1,3"},
                           .attrs = {.n_axes = 1, .axes = {0}, .scalars = {1e-3}}},
    [EG__OP_BATCH_NORM_BACKWARD_SUMS] = {.inputs = {"v 4,3", "v 4,3", "s 1,3"},
                                         .attrs = {.n_axes = 1, .axes = {0}}},
    [EG__OP_BATCH_NORM_BACKWARD_INPUT] = {.inputs = {"v 4,3", "v 4,3", "s 1,3", "s 1,3", "s 1,3",
                                                     "s 2,1,3"},
                                          .attrs = {.n_axes = 1, .axes = {0}, .scalars = {1e-3}}},
    [EG__OP_LSTM_CELL] = {.inputs = {"v 2,12", "v 2,3"}},
    [EG__OP_LSTM_CELL_BACKWARD] = {.inputs = {"v 2,12", "v 2,3", "v 2,2,3"}},
    [EG__OP_GRU_CELL] = {.inputs = {"v 2,9", "v 2,9", "v 2,3"}},
    [EG__OP_GRU_CELL_BACKWARD] = {.inputs = {"v 2,9", "v 2,9", "v 2,3", "v 2,3"}},
    [EG__OP_ATTENTION] = {.inputs = {"v 1,2,3,4", "v 1,2,5,4", "v 1,2,5,3"},
                          .attrs = {.scalars = {0.5}}},
    [EG__OP_ATTENTION_BACKWARD] = {.inputs = {"v 1,2,3,4", "v 1,2,5,4", "v 1,2,5,3", "v 24",
                                              "v 1,2,3,3"},
                                   .attrs = {.scalars = {0.5}}},
    [EG__OP_CONV2D] = {.inputs = {"v 1,4,4,2", "v 3,3,2,3"}, .attrs = {CONV_WINDOW}},
    [EG__OP_CONV2D_BACKWARD_INPUT] = {.inputs = {"v 1,2,2,3", "v 3,3,2,3"},
                                      .attrs = {CONV_WINDOW, .n_dims = 4, .shape = {1, 4, 4, 2}}},
    [EG__OP_CONV2D_BACKWARD_FILTER] = {.inputs = {"v 1,4,4,2", "v 1,2,2,3"},
                                       .attrs = {CONV_WINDOW, .n_dims = 4, .shape = {3, 3, 2, 3}}},
    [EG__OP_MAX_POOL2D] = {.inputs = {"v 1,4,4,2"}, .attrs = {POOL_WINDOW}},
    [EG__OP_MAX_POOL2D_BACKWARD] = {.inputs = {"v 1,4,4,2", "v 1,2,2,2"}, .attrs = {POOL_WINDOW}},
    [EG__OP_MAX_POOL2D_ARGMAX] = {.inputs = {"v 1,4,4,2"}, .attrs = {POOL_WINDOW}},
    [EG__OP_AVG_POOL2D] = {.inputs = {"v 1,4,4,2"}, .attrs = {POOL_WINDOW}},
    [EG__OP_AVG_POOL2D_BACKWARD] = {.inputs = {"v 1,2,2,2"},
                                    .attrs = {POOL_WINDOW, .n_dims = 4, .shape = {1, 4, 4, 2}}},
    [EG__OP_QUANTIZE_INT8] = {.inputs = {"v 2,3", "f 3"}, .attrs = {.ints = {63}}},
    [EG__OP_SAMPLE_INDICES] = {.inputs = {"v 5"}, .attrs = {.ints = {3}}},
    [EG__OP_DENSE_INT8] = {.inputs = {"v 2,3", "q 3,4", "f 4"}},
    [EG__OP_CONV2D_INT8] = {.inputs = {"v 1,4,4,2", "q 3,3,2,3", "f 3"}, .attrs = {CONV_WINDOW}},
    [EG__OP_ALL_REDUCE] = {.inputs = {"v 2,3"}},
    [EG__OP_ALL_REDUCE_START] = {.inputs = {"v 2,3", "v 4"}},
    [EG__OP_ALL_REDUCE_DONE] = {.inputs = {"v 10"}},
};

/* Parses "ROLE SHAPE" into a storage-less tensor; the dtype is `value_dtype` for a value input.
 * false for a malformed template (a bug in the table above). */
static bool template_tensor(const char *text, eg_dtype value_dtype, eg_tensor *t) {
    memset(t, 0, sizeof *t);
    switch (text[0]) {
    case 'v':
        t->dtype = value_dtype;
        break;
    case 'b':
        t->dtype = EG_DTYPE_BOOL;
        break;
    case 'i':
        t->dtype = EG_DTYPE_I64;
        break;
    case 'q':
        t->dtype = EG_DTYPE_I8;
        break;
    case 'f':
        t->dtype = EG_DTYPE_F32;
        break;
    case 's':
        t->dtype = value_dtype == EG_DTYPE_BF16 || value_dtype == EG_DTYPE_F16 ? EG_DTYPE_F32
                                                                               : value_dtype;
        break;
    default:
        return false;
    }
    if (text[1] != ' ') return false;
    for (const char *p = text + 2; *p;) {
        char *end;
        long size = strtol(p, &end, 10);
        if (end == p || size < 0 || t->n_dims == EG_MAX_DIMS) return false;
        t->shape[t->n_dims++] = size;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return false;
    }
    eg__contiguous_strides(t->n_dims, t->shape, t->strides);
    t->n_elems = eg__shape_n_elems(t->n_dims, t->shape);
    return true;
}

/* Builds the op's template inputs; their count, or 0 for a template that does not fit the op
 * (wrong arity for ops.def, or malformed). */
static int template_inputs(eg__op op, eg_dtype value_dtype, eg_tensor *tensors) {
    const probe *p = &probes[op];
    int n = 0;
    while (n < EG__OP_PROBE_MAX_INPUTS && p->inputs[n]) {
        if (!template_tensor(p->inputs[n], value_dtype, &tensors[n])) return 0;
        n++;
    }
    int arity = eg__op_defs[op].n_inputs;
    return (arity < 0 && n > 0) || arity == n ? n : 0;
}

int eg__op_probe_dtypes(eg__op op, eg_dtype value_dtype, eg_dtype *dtypes) {
    if ((unsigned)op >= EG__OP_COUNT) return 0;
    eg_tensor tensors[EG__OP_PROBE_MAX_INPUTS];
    int n = template_inputs(op, value_dtype, tensors);
    for (int i = 0; i < n; i++) dtypes[i] = tensors[i].dtype;
    return n;
}

bool eg__op_accepts_dtype(eg__op op, eg_dtype dtype) {
    if ((unsigned)op >= EG__OP_COUNT || (unsigned)dtype >= EG_DTYPE_COUNT) return false;
    eg_tensor tensors[EG__OP_PROBE_MAX_INPUTS];
    const eg_tensor *inputs[EG__OP_PROBE_MAX_INPUTS];
    int n = template_inputs(op, dtype, tensors);
    if (n == 0) return false;
    for (int i = 0; i < n; i++) inputs[i] = &tensors[i];
    eg__saved_error saved;
    eg__error_set_aside(&saved);
    eg__meta meta;
    memset(&meta, 0, sizeof meta);
    eg_status status = eg__op_defs[op].infer(op, n, inputs, &probes[op].attrs, &meta);
    eg_clear_error();
    eg__error_restore(&saved);
    return status == EG_OK;
}
