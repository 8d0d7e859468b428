/* The CUDA backend: its kernel table, what it supports, and its devices (runtime.c). */
#include <pthread.h>

#include "backend/cuda/dnn.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/products_launch.h"

static eg__cuda_kernel_table table;
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

/* Every kernel's entry: a family kernel may assume its inputs are in the dtypes it registered
 * (a bf16 tensor must never reach a kernel written for f32 and f64). */
static eg_status checked_kernel(const eg__kernel_call *call) {
    unsigned dtypes = table.dtypes[call->op];
    for (int i = 0; i < call->n_inputs; i++)
        if (!(dtypes >> call->inputs[i]->dtype & 1u))
            return eg__op_error(call->op, EG_ERR_UNSUPPORTED, "no kernel for %s on %s",
                                eg_dtype_name(call->inputs[i]->dtype), call->output->device->name);
    return table.family[call->op](call);
}

static void fill_table(void) {
    eg__cuda_register_copies(&table);
    eg__cuda_register_elementwise(&table);
    eg__cuda_register_shape(&table);
    eg__cuda_register_reductions(&table);
    eg__cuda_register_norm(&table);
    eg__cuda_register_products(&table);
    eg__cuda_register_dnn(&table);
    eg__cuda_register_collectives(&table);
    for (int op = 0; op < EG__OP_COUNT; op++)
        if (table.family[op]) table.kernels[op] = checked_kernel;
}

const eg__cuda_kernel_table *eg__cuda_kernel_table_get(void) {
    pthread_once(&table_once, fill_table);
    return &table;
}

static bool cuda_supports(const eg__op_signature *sig) {
    if ((unsigned)sig->op >= EG__OP_COUNT) return false;
    if (eg__op_defs[sig->op].flags & EG__OPF_VIEW) return true; /* a view needs no kernel */
    const eg__cuda_kernel_table *t = eg__cuda_kernel_table_get();
    if (!t->kernels[sig->op] || (!sig->contiguous && !t->strided[sig->op])) return false;
    for (int i = 0; i < sig->n_inputs; i++)
        if ((unsigned)sig->dtypes[i] >= EG_DTYPE_COUNT ||
            !(t->dtypes[sig->op] >> sig->dtypes[i] & 1u))
            return false;
    return true;
}

static int cuda_device_count(void) {
    (void)eg__cuda_kernel_table_get(); /* before any device can run a kernel */
    return eg__cuda_device_count();
}

/* The library choice behind a product or a convolution (made once per shape). */
static const char *cuda_kernel_note(const eg__kernel_call *call) {
    switch (call->op) {
    case EG__OP_MATMUL:
    case EG__OP_DENSE:
        return eg__cuda_product_note(call);
    case EG__OP_CONV2D:
    case EG__OP_CONV2D_BACKWARD_INPUT:
    case EG__OP_CONV2D_BACKWARD_FILTER:
    case EG__OP_MAX_POOL2D:
    case EG__OP_MAX_POOL2D_BACKWARD:
    case EG__OP_MAX_POOL2D_ARGMAX:
    case EG__OP_AVG_POOL2D:
    case EG__OP_AVG_POOL2D_BACKWARD:
        return eg__cuda_dnn_note(call);
    default:
        return NULL;
    }
}

const eg__backend eg__cuda_backend = {
    .name = "cuda",
    .type = EG_DEVICE_CUDA,
    .kernels = table.kernels,
    .supports = cuda_supports,
    .update_many = eg__cuda_update_many,
    .update_range = eg__cuda_update_range,
    .fusable = eg__cuda_fusable,
    .run_fused = eg__cuda_run_fused,
    .compile_fused = eg__cuda_compile_fused,
    .first_nonfinite = eg__cuda_first_nonfinite,
    .shutdown = eg__cuda_shutdown,
    .kernel_note = cuda_kernel_note,
    .capture_begin = eg__cuda_capture_begin,
    .capture_end = eg__cuda_capture_end,
    .graph_launch = eg__cuda_graph_launch,
    .graph_free = eg__cuda_graph_free,
    .graph_refresh_begin = eg__cuda_graph_refresh_begin,
    .graph_refresh_end = eg__cuda_graph_refresh_end,
    .device_count = cuda_device_count,
    .device_at = eg__cuda_device_at,
    .unavailable = eg__cuda_unavailable,
    .describe = eg__cuda_describe,
    .describe_device = eg__cuda_describe_device,
};
