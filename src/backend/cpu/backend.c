/* The CPU backend: the kernel table, what it supports, and the hooks lazy fusion and graph
 * replay use. It computes for every host device (cpu:N): their memory is all host memory. */
#include "backend/backend.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/kernels.h"
#include "base/threadpool.h"

static bool cpu_supports(const eg__op_signature *sig) {
    if ((unsigned)sig->op >= EG__OP_COUNT) return false;
    /* Every CPU kernel takes every dtype and layout its op's schema admits (strided inputs are
     * copied or looped over where a kernel needs them contiguous); view ops need no kernel. */
    return eg__cpu_kernels[sig->op] != NULL || (eg__op_defs[sig->op].flags & EG__OPF_VIEW);
}

static const eg__kernel_fn cpu_replay_kernels[EG__OP_COUNT] = {
    [EG__OP_MATMUL] = eg__cpu_matmul_graph,
    [EG__OP_DENSE] = eg__cpu_matmul_graph,
};

static void cpu_shutdown(void) {
    eg__threadpool_shutdown();
    eg__cpu_conv_release_cached();
    eg__gemm_release_thread_buffers();
}

const eg__backend eg__cpu_backend = {
    .name = "cpu",
    .type = EG_DEVICE_CPU,
    .kernels = eg__cpu_kernels,
    .supports = cpu_supports,
    .update_many = eg__cpu_update_many,
    .update_range = eg__cpu_update_range,
    .fusable = eg__cpu_fusable,
    .elementwise_flat = eg__cpu_elementwise_flat,
    .replay_kernels = cpu_replay_kernels,
    .product_tile_bytes = eg__cpu_matmul_tile_bytes,
    .product_tile_count = eg__cpu_matmul_tile_count,
    .product_tiles = eg__cpu_matmul_tiles,
    .product_tile = eg__cpu_matmul_tile,
    .product_part_count = eg__cpu_matmul_part_count,
    .product_part = eg__cpu_matmul_part,
    .set_threads = eg__blas_set_threads,
    .first_nonfinite = eg__cpu_first_nonfinite,
    .shutdown = cpu_shutdown,
};
