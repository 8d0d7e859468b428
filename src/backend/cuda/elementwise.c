/* Elementwise ops on a GPU: unary math, binary arithmetic with broadcasting, comparisons,
 * where, cast, clip, dropout, relu_backward and mul_add, one kernel launch each.
 *
 * The wrappers take any input layout: each input's strides (in elements) are aligned with the
 * result's axes, 0 along a broadcast axis, and axes every operand walks as one are merged
 * (elementwise_launch.h), so the kernels index strided and broadcast inputs directly, without
 * dense copies; dense same-shaped inputs and one-element ones become one axis, run without
 * index arithmetic. Dropout alone reads a dense copy (eg__cuda_contiguous), as the CPU does:
 * its mask belongs to the element's row-major index. Results are the freshly allocated dense
 * outputs. The math is ops_math.cuh's, which the fusion compiler shares (eg__cuda_fusable). */
#include <string.h>

#include "backend/cuda/elementwise_launch.h"
#include "backend/cuda/kernels.h"
#include "base/error.h"

/* The kernels' type code of each dtype, plus one (0: none; f16 and bf16 have no kernels yet). */
static const int type_codes[EG_DTYPE_COUNT] = {
    [EG_DTYPE_F32] = 1 + EG__CUDA_EW_F32, [EG_DTYPE_F64] = 1 + EG__CUDA_EW_F64,
    [EG_DTYPE_I32] = 1 + EG__CUDA_EW_I32, [EG_DTYPE_I64] = 1 + EG__CUDA_EW_I64,
    [EG_DTYPE_U8] = 1 + EG__CUDA_EW_U8,   [EG_DTYPE_BOOL] = 1 + EG__CUDA_EW_BOOL,
};

static bool type_of(eg_dtype dtype, eg__cuda_ew_type *type) {
    if ((unsigned)dtype >= EG_DTYPE_COUNT || !type_codes[dtype]) return false;
    *type = (eg__cuda_ew_type)(type_codes[dtype] - 1);
    return true;
}

/* The kernels' op code of each op of this family but where, cast, mul_add and dropout (their
 * own launch functions), plus one (0: none). The kernels' enum spells the ops' names. */
#define CODE(NAME) [EG__OP_##NAME] = 1 + EG__CUDA_EW_##NAME
static const int op_codes[EG__OP_COUNT] = {
    CODE(NEG),           CODE(ABS),           CODE(EXP),       CODE(LOG),     CODE(SQRT),
    CODE(RSQRT),         CODE(SIN),           CODE(COS),       CODE(TANH),    CODE(SIGMOID),
    CODE(RELU),          CODE(GELU),          CODE(SOFTPLUS),  CODE(SIGN),    CODE(SQUARE),
    CODE(RECIPROCAL),    CODE(ERF),           CODE(CLIP),      CODE(ADD),     CODE(SUB),
    CODE(MUL),           CODE(DIV),           CODE(POW),       CODE(MAXIMUM), CODE(MINIMUM),
    CODE(RELU_BACKWARD), CODE(EQUAL),         CODE(NOT_EQUAL), CODE(LESS),    CODE(LESS_EQUAL),
    CODE(GREATER),       CODE(GREATER_EQUAL),
};
#undef CODE

static bool op_of(eg__op op, eg__cuda_ew_op *code) {
    if ((unsigned)op >= EG__OP_COUNT || !op_codes[op]) return false;
    *code = (eg__cuda_ew_op)(op_codes[op] - 1);
    return true;
}

/* The geometry of out = f(inputs...) (numpy broadcasting against out's shape, as the CPU's
 * eg__nd_loop_init): size-1 result axes dropped, and an axis merged into the one before it
 * when every input steps over both as over one (outer stride = inner stride * inner size,
 * which also holds for two broadcast axes). */
static void geometry_of(const eg_tensor *out, int n_inputs, const eg_tensor *const *inputs,
                        eg__cuda_ew_geometry *g) {
    memset(g, 0, sizeof *g);
    g->n_elems = out->n_elems;
    int n = 0;
    for (int d = 0; d < out->n_dims; d++) {
        int64_t size = out->shape[d];
        if (size == 1) continue;
        int64_t strides[EG__CUDA_EW_MAX_INPUTS];
        for (int k = 0; k < n_inputs; k++) {
            const eg_tensor *in = inputs[k];
            int axis = d - (out->n_dims - in->n_dims);
            strides[k] = axis < 0 || in->shape[axis] == 1 ? 0 : in->strides[axis];
        }
        bool merge = n > 0;
        for (int k = 0; k < n_inputs && merge; k++)
            merge = g->strides[k][n - 1] == strides[k] * size;
        if (merge) {
            g->shape[n - 1] *= size;
        } else {
            g->shape[n] = size;
            n++;
        }
        for (int k = 0; k < n_inputs; k++) g->strides[k][n - 1] = strides[k];
    }
    if (n == 0) g->shape[n++] = 1; /* one element (strides 0) */
    g->n_dims = n;
}

/* Common checks: the result dense (it is freshly allocated) and the device entered. */
static eg__cuda_device *enter(const eg__kernel_call *call) {
    if (!eg__is_contiguous(call->output)) {
        eg__op_error(call->op, EG_ERR_INTERNAL, "the result on %s must be dense",
                     call->output->device->name);
        return NULL;
    }
    return eg__cuda_call_device(call);
}

static eg_status no_kernel(const eg__kernel_call *call, eg_dtype dtype) {
    return eg__op_error(call->op, EG_ERR_UNSUPPORTED, "no %s kernel on %s", eg_dtype_name(dtype),
                        call->output->device->name);
}

/* Every input's element 0 (NULL when one cannot be had: an error is set). */
static bool data_of(const eg__kernel_call *call, const void **data) {
    for (int k = 0; k < call->n_inputs; k++)
        if (!(data[k] = eg__data(call->inputs[k]))) return false;
    return true;
}

/* x -> f(x): every unary op and clip (attrs->scalars[0..1] its bounds) */
static eg_status cuda_unary(const eg__kernel_call *call) {
    eg__cuda_device *d = enter(call);
    if (!d) return eg_last_status();
    eg__cuda_ew_op op;
    eg__cuda_ew_type type;
    const void *x[1];
    if (!op_of(call->op, &op) || !type_of(call->output->dtype, &type))
        return no_kernel(call, call->output->dtype);
    if (call->output->n_elems == 0) return eg__cuda_launched(call);
    if (!data_of(call, x)) return eg_last_status();
    eg__cuda_ew_geometry g;
    geometry_of(call->output, 1, call->inputs, &g);
    if (eg__cuda_ew_unary(op, type, eg__data(call->output), x[0], &g, call->attrs->scalars[0],
                          call->attrs->scalars[1], eg__cuda_stream(d)) != 0)
        return no_kernel(call, call->output->dtype);
    return eg__cuda_launched(call);
}

/* (a, b) broadcast together -> op(a, b): arithmetic, relu_backward and comparisons (bool) */
static eg_status cuda_binary(const eg__kernel_call *call) {
    eg__cuda_device *d = enter(call);
    if (!d) return eg_last_status();
    eg_dtype dtype = call->inputs[0]->dtype;
    eg__cuda_ew_op op;
    eg__cuda_ew_type type;
    const void *x[2];
    if (!op_of(call->op, &op) || !type_of(dtype, &type)) return no_kernel(call, dtype);
    if (call->output->n_elems == 0) return eg__cuda_launched(call);
    if (!data_of(call, x)) return eg_last_status();
    eg__cuda_ew_geometry g;
    geometry_of(call->output, 2, call->inputs, &g);
    if (eg__cuda_ew_binary(op, type, eg__data(call->output), x[0], x[1], &g, eg__cuda_stream(d)) !=
        0)
        return no_kernel(call, dtype);
    return eg__cuda_launched(call);
}

/* (cond, a, b) broadcast together -> cond ? a : b */
static eg_status cuda_where(const eg__kernel_call *call) {
    eg__cuda_device *d = enter(call);
    if (!d) return eg_last_status();
    const void *x[3];
    if (call->output->n_elems == 0) return eg__cuda_launched(call);
    if (!data_of(call, x)) return eg_last_status();
    eg__cuda_ew_geometry g;
    geometry_of(call->output, 3, call->inputs, &g);
    if (eg__cuda_ew_where(eg__dtype_size(call->output->dtype), eg__data(call->output), x[0], x[1],
                          x[2], &g, eg__cuda_stream(d)) != 0)
        return no_kernel(call, call->output->dtype);
    return eg__cuda_launched(call);
}

/* x -> x in attrs->dtype (the output's) */
static eg_status cuda_cast(const eg__kernel_call *call) {
    eg__cuda_device *d = enter(call);
    if (!d) return eg_last_status();
    eg__cuda_ew_type from, to;
    const void *x[1];
    if (!type_of(call->inputs[0]->dtype, &from)) return no_kernel(call, call->inputs[0]->dtype);
    if (!type_of(call->output->dtype, &to))
        return eg__op_error(call->op, EG_ERR_UNSUPPORTED, "no cast from %s to %s on %s",
                            eg_dtype_name(call->inputs[0]->dtype),
                            eg_dtype_name(call->output->dtype), call->output->device->name);
    if (call->output->n_elems == 0) return eg__cuda_launched(call);
    if (!data_of(call, x)) return eg_last_status();
    eg__cuda_ew_geometry g;
    geometry_of(call->output, 1, call->inputs, &g);
    if (eg__cuda_ew_cast(from, to, eg__data(call->output), x[0], &g, eg__cuda_stream(d)) != 0)
        return no_kernel(call, call->inputs[0]->dtype);
    return eg__cuda_launched(call);
}

/* (x, scale, shift) broadcast together -> x * scale + shift */
static eg_status cuda_mul_add(const eg__kernel_call *call) {
    eg__cuda_device *d = enter(call);
    if (!d) return eg_last_status();
    eg__cuda_ew_type type;
    const void *x[3];
    if (!type_of(call->output->dtype, &type)) return no_kernel(call, call->output->dtype);
    if (call->output->n_elems == 0) return eg__cuda_launched(call);
    if (!data_of(call, x)) return eg_last_status();
    eg__cuda_ew_geometry g;
    geometry_of(call->output, 3, call->inputs, &g);
    if (eg__cuda_ew_mul_add(type, eg__data(call->output), x[0], x[1], x[2], &g,
                            eg__cuda_stream(d)) != 0)
        return no_kernel(call, call->output->dtype);
    return eg__cuda_launched(call);
}

/* x (any strides) -> x / (1 - rate) where kept, else 0: rate attrs->scalars[0], seed
 * attrs->seed; the CPU's masks (dropout.c), bit for bit. */
static eg_status cuda_dropout(const eg__kernel_call *call) {
    eg__cuda_device *d = enter(call);
    if (!d) return eg_last_status();
    eg__cuda_ew_type type;
    if (!type_of(call->output->dtype, &type)) return no_kernel(call, call->output->dtype);
    if (call->output->n_elems == 0) return eg__cuda_launched(call);
    /* In a captured graph the seed, which changes every call, is read from the graph's memory
     * (graphs.c); a refresh writes this call's seed there and launches nothing. */
    uint64_t seed = call->attrs->seed;
    const uint64_t *live_seed = NULL;
    if (d->refreshing) {
        eg__cuda_refresh_scalars(d, &seed, sizeof seed);
        return EG_OK;
    }
    if (d->capturing && !(live_seed = eg__cuda_capture_scalars(d, &seed, sizeof seed)))
        return eg_last_status();
    double rate = call->attrs->scalars[0];
    /* As dropout.c: uniform_f32(w) = (w >> 8) 2^-24 >= (float)rate exactly when (w >> 8) >=
     * ceil((float)rate 2^24), a product that is exact in double. */
    double bound = (double)(float)rate * 16777216.0;
    uint32_t threshold = (uint32_t)bound;
    if ((double)threshold < bound) threshold++;
    eg__cuda_scratch scratch;
    const void *x = eg__cuda_contiguous(d, call->inputs[0], &scratch);
    if (!x) return eg_last_status();
    int status = eg__cuda_ew_dropout(type, eg__data(call->output), x, call->output->n_elems, seed,
                                     live_seed, threshold, 1.0 / (1.0 - rate), eg__cuda_stream(d));
    eg__cuda_scratch_free(&scratch); /* safe once enqueued: the stream orders its reuse */
    if (status != 0) return no_kernel(call, call->output->dtype);
    return eg__cuda_launched(call);
}

bool eg__cuda_fusable(eg__op op) {
    switch (op) {
    case EG__OP_NEG:
    case EG__OP_ABS:
    case EG__OP_EXP:
    case EG__OP_LOG:
    case EG__OP_SQRT:
    case EG__OP_RSQRT:
    case EG__OP_SIN:
    case EG__OP_COS:
    case EG__OP_TANH:
    case EG__OP_SIGMOID:
    case EG__OP_RELU:
    case EG__OP_GELU:
    case EG__OP_SOFTPLUS:
    case EG__OP_SIGN:
    case EG__OP_SQUARE:
    case EG__OP_RECIPROCAL:
    case EG__OP_ERF:
    case EG__OP_CLIP:
    case EG__OP_ADD:
    case EG__OP_SUB:
    case EG__OP_MUL:
    case EG__OP_DIV:
    case EG__OP_POW:
    case EG__OP_MAXIMUM:
    case EG__OP_MINIMUM:
    case EG__OP_EQUAL:
    case EG__OP_NOT_EQUAL:
    case EG__OP_LESS:
    case EG__OP_LESS_EQUAL:
    case EG__OP_GREATER:
    case EG__OP_GREATER_EQUAL:
    case EG__OP_WHERE:
    case EG__OP_CAST:
    case EG__OP_RELU_BACKWARD:
    case EG__OP_MUL_ADD:
        return true;
    default:
        return false; /* dropout among them: the fusion compiler does not generate Philox */
    }
}

void eg__cuda_register_elementwise(eg__cuda_kernel_table *table) {
    const unsigned floats = EG__CUDA_FLOAT_DTYPES;
    const unsigned numeric =
        EG__CUDA_DTYPES(EG_DTYPE_F32, EG_DTYPE_F64, EG_DTYPE_I32, EG_DTYPE_I64);
    const unsigned plain = EG__CUDA_DTYPES(EG_DTYPE_F32, EG_DTYPE_F64, EG_DTYPE_I32, EG_DTYPE_I64,
                                           EG_DTYPE_U8, EG_DTYPE_BOOL);
    static const eg__op unary[] = {
        EG__OP_NEG,      EG__OP_ABS,  EG__OP_EXP,    EG__OP_LOG,        EG__OP_SQRT, EG__OP_RSQRT,
        EG__OP_SIN,      EG__OP_COS,  EG__OP_TANH,   EG__OP_SIGMOID,    EG__OP_RELU, EG__OP_GELU,
        EG__OP_SOFTPLUS, EG__OP_SIGN, EG__OP_SQUARE, EG__OP_RECIPROCAL, EG__OP_ERF,  EG__OP_CLIP,
    };
    for (size_t i = 0; i < sizeof unary / sizeof unary[0]; i++)
        eg__cuda_register(table, unary[i], cuda_unary, floats, true);
    static const eg__op arithmetic[] = {EG__OP_ADD, EG__OP_SUB,     EG__OP_MUL,
                                        EG__OP_DIV, EG__OP_MAXIMUM, EG__OP_MINIMUM};
    for (size_t i = 0; i < sizeof arithmetic / sizeof arithmetic[0]; i++)
        eg__cuda_register(table, arithmetic[i], cuda_binary, numeric, true);
    eg__cuda_register(table, EG__OP_POW, cuda_binary, floats, true);
    eg__cuda_register(table, EG__OP_RELU_BACKWARD, cuda_binary, floats, true);
    static const eg__op comparisons[] = {EG__OP_EQUAL,      EG__OP_NOT_EQUAL, EG__OP_LESS,
                                         EG__OP_LESS_EQUAL, EG__OP_GREATER,   EG__OP_GREATER_EQUAL};
    for (size_t i = 0; i < sizeof comparisons / sizeof comparisons[0]; i++)
        eg__cuda_register(table, comparisons[i], cuda_binary, plain, true);
    /* a selection by element size: f16 and bf16 values select as exactly as the others */
    eg__cuda_register(table, EG__OP_WHERE, cuda_where,
                      plain | EG__CUDA_DTYPES(EG_DTYPE_F16, EG_DTYPE_BF16), true);
    /* the input's dtype; a cast to f16 or bf16 is refused by the wrapper (supports() sees only
     * the inputs) */
    eg__cuda_register(table, EG__OP_CAST, cuda_cast, plain, true);
    eg__cuda_register(table, EG__OP_MUL_ADD, cuda_mul_add, floats, true);
    eg__cuda_register(table, EG__OP_DROPOUT, cuda_dropout, floats, true);
}
