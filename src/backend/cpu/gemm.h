/* Internal: Eagle's own single-precision GEMM (packed panels, AVX2/FMA 6x16 micro-kernel) and
 * the epilogue (bias add + activation) that matmul and dense apply to an output tile. */
#ifndef EAGLE_SRC_BACKEND_CPU_GEMM_H
#define EAGLE_SRC_BACKEND_CPU_GEMM_H

#include <stdbool.h>
#include <stdint.h>

#include "ops/internal.h"

/* C = epilogue(op(A) · op(B)) for one f32 matrix product, operands given by element strides so
 * that transposed views need no copies:
 *   op(A)[i, p] = a[i * a_row + p * a_col]   (m x k)
 *   op(B)[p, j] = b[p * b_row + j * b_col]   (k x n)
 *   C[i, j]     = c[i * ldc + j]             (m x n)
 * The epilogue, when bias != NULL or activation != EG__OP_COUNT, is C = act(C + bias[j]) with
 * bias[j] = bias[j * bias_stride], computed by the same elementwise kernels as eg_add and the
 * activation op, so it is bitwise the unfused composition. */
typedef struct eg__gemm_f32 {
    int64_t m, n, k;
    const float *a;
    int64_t a_row, a_col;
    const float *b;
    int64_t b_row, b_col;
    float *c;
    int64_t ldc;
    const float *bias; /* NULL: no bias */
    int64_t bias_stride;
    eg__op activation; /* EG__OP_RELU, _SIGMOID, _TANH, or EG__OP_COUNT for none */
} eg__gemm_f32;

/* Rows of the micro-kernel's tile (a task's row range should start at a multiple of it). */
#define EG_GEMM_MR 6
/* Columns of the micro-kernel's tile. */
#define EG_GEMM_NR 16
/* The most k one block sums: k is cut into ceil(k / EG_GEMM_KC) blocks of equal size (the last
 * smaller); each C element is the first block's sum, then + each next block's, each block summed
 * from 0 by fused multiply-adds in k order (tests/test_dense.c writes the order out). */
#define EG_GEMM_KC 256

/* Whether this CPU runs Eagle's GEMM (AVX2 and FMA, checked once with cpuid) and the user has
 * not asked for OpenBLAS with EG_MATMUL=openblas. */
bool eg__gemm_f32_available(void);

/* Frees the calling thread's packing buffers (eg_shutdown: other threads' go when they exit);
 * the next product on this thread makes them again. */
void eg__gemm_release_thread_buffers(void);

/* Computes rows [m0, m1) x columns [n0, n1) of g's C (epilogue included). Each element's value
 * depends only on g (its k is summed in fixed blocks in a fixed order), never on the range it
 * was computed in, so any split of C among threads gives the same bits. Returns false when the
 * per-thread packing buffers cannot be allocated (nothing written then). */
bool eg__gemm_f32_range(const eg__gemm_f32 *g, int64_t m0, int64_t m1, int64_t n0, int64_t n1);

/* The epilogue on rows x cols of C at c (row stride ldc, in elements) whose first column is
 * column j0 of the product; dtype f32 or f64. bias at element j * bias_stride, or NULL. */
void eg__gemm_epilogue(eg_dtype dtype, char *c, int64_t ldc, int64_t rows, int64_t cols, int64_t j0,
                       const char *bias, int64_t bias_stride, eg__op activation);

/* The matmul kernel with an epilogue: C = activation(op(A) · op(B) + bias), bias a 1-d tensor of
 * C's last dim (or NULL), activation EG__OP_RELU/_SIGMOID/_TANH or EG__OP_COUNT (none). f32 uses
 * Eagle's GEMM where the CPU allows, otherwise (and for f64) single-threaded OpenBLAS per fixed
 * output tile; either way the bits do not depend on the thread count. */
eg_status eg__cpu_matmul_fused(const eg__kernel_call *call, const eg_tensor *bias,
                               eg__op activation);

#endif
