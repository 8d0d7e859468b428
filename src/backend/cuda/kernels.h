/* Internal: the CUDA kernel table and how each family of kernels joins it.
 *
 * The table is filled once, when the backend first looks for devices (no kernel can be called
 * before a device exists). Each family (elementwise.c, reduce.c, ...) has a registration
 * function that sets, for each op it runs, the wrapper and the dtypes it takes. */
#ifndef EAGLE_SRC_BACKEND_CUDA_KERNELS_H
#define EAGLE_SRC_BACKEND_CUDA_KERNELS_H

#include "backend/cuda/cuda_internal.h"

/* A dtype set: bit (1u << dtype). */
#define EG__CUDA_DTYPES(...)                                                                       \
    eg__cuda_dtype_mask((const eg_dtype[]){__VA_ARGS__},                                           \
                        (int)(sizeof((const eg_dtype[]){__VA_ARGS__}) / sizeof(eg_dtype)))
static inline unsigned eg__cuda_dtype_mask(const eg_dtype *dtypes, int n) {
    unsigned mask = 0;
    for (int i = 0; i < n; i++) mask |= 1u << dtypes[i];
    return mask;
}
#define EG__CUDA_FLOAT_DTYPES EG__CUDA_DTYPES(EG_DTYPE_F32, EG_DTYPE_F64)

typedef struct eg__cuda_kernel_table {
    /* What the backend launches: for each op with a kernel, a check of the inputs' dtypes
     * against `dtypes` (EG_ERR_UNSUPPORTED naming the dtype), then the family's kernel. */
    eg__kernel_fn kernels[EG__OP_COUNT];
    eg__kernel_fn family[EG__OP_COUNT]; /* the families' own kernels */
    /* The dtypes an op's kernel takes, in any input position (value inputs, conditions,
     * indices). */
    unsigned dtypes[EG__OP_COUNT];
    /* Whether the kernel takes strided inputs (else supports() says no for them, and the
     * wrapper still copies them dense through eg__cuda_contiguous when called anyway). */
    bool strided[EG__OP_COUNT];
} eg__cuda_kernel_table;

/* Sets op's entry. */
static inline void eg__cuda_register(eg__cuda_kernel_table *table, eg__op op, eg__kernel_fn fn,
                                     unsigned dtypes, bool strided) {
    table->family[op] = fn;
    table->dtypes[op] = dtypes;
    table->strided[op] = strided;
}

/* The families (each in its own file). */
void eg__cuda_register_copies(eg__cuda_kernel_table *table); /* copy, to_device */
void eg__cuda_register_elementwise(eg__cuda_kernel_table *table);
void eg__cuda_register_shape(eg__cuda_kernel_table *table);       /* concat, gather, pad, ... */
void eg__cuda_register_reductions(eg__cuda_kernel_table *table);  /* reductions, softmax, loss */
void eg__cuda_register_norm(eg__cuda_kernel_table *table);        /* moments, batch norm */
void eg__cuda_register_products(eg__cuda_kernel_table *table);    /* matmul, dense (cuBLASLt) */
void eg__cuda_register_dnn(eg__cuda_kernel_table *table);         /* conv2d, pooling (cuDNN) */
void eg__cuda_register_collectives(eg__cuda_kernel_table *table); /* all_reduce (staged) */

/* The table, filled (backend.c). */
const eg__cuda_kernel_table *eg__cuda_kernel_table_get(void);

/* Optimizer updates (update.c), fused elementwise groups (fusion.c), the numerics scan
 * (reduce.c). */
void eg__cuda_update_many(const eg__update_params *params, const eg__update_piece *pieces,
                          int n_pieces, int64_t total);
void eg__cuda_update_range(const eg__update_params *params, eg_dtype dtype, void *variable,
                           void *const *slots, int64_t start, int64_t n, const void *grad);
bool eg__cuda_fusable(eg__op op);
eg_status eg__cuda_run_fused(const eg__fused_group *group);
eg_status eg__cuda_compile_fused(const eg__fused_group *group);
int64_t eg__cuda_first_nonfinite(const eg_tensor *t);

#endif
