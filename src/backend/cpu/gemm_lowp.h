/* Internal: matrix products of bf16 or f16 operands accumulated in f32 (matmul, dense, and the
 * convolutions through im2col), on whichever path this CPU and EG_CPU allow:
 *   AMX bf16 tiles (tdpbf16ps)                       bf16, AVX-512 level, tile state granted;
 *   AVX-512 BF16 (vdpbf16ps)                         bf16, AVX-512 level, no usable AMX, and a
 *                                                    CPU where it beats the next path (not Intel);
 *   converted to f32 while packing, f32 micro-kernel f16 everywhere, bf16 otherwise (AVX2, or
 *                                                    AVX-512 without usable AMX on Intel);
 *   portable C                                       EG_CPU=baseline.
 * Every path sums each element's k products in f32 in a fixed order that depends on the problem
 * alone, so any split of C among threads gives the same bits; different paths may differ in the
 * last bits of the f32 sum (each stays within (k + 2) 2^-24 sum |a b| of the exact product). */
#ifndef EAGLE_SRC_BACKEND_CPU_GEMM_LOWP_H
#define EAGLE_SRC_BACKEND_CPU_GEMM_LOWP_H

#include <stdbool.h>
#include <stdint.h>

#include "ops/internal.h"

/* Which code computes a product. AUTO (0, what a zero-initialized problem asks for) picks the
 * fastest path this CPU and EG_CPU allow for the dtype; the others force one (tests, benches). */
typedef enum eg__lowp_path {
    EG__GEMM_LOWP_AUTO = 0,
    EG__GEMM_LOWP_AMX,         /* bf16 only: AMX tiles */
    EG__GEMM_LOWP_AVX512_BF16, /* bf16 only: vdpbf16ps */
    EG__GEMM_LOWP_CONVERT,     /* widened to f32 while packing; AVX-512 or AVX2 f32 micro-kernel */
    EG__GEMM_LOWP_PORTABLE,    /* widened to f32 while packing; plain C (any x86-64, any CPU) */
    EG__GEMM_LOWP_PATH_COUNT
} eg__lowp_path;

/* C = epilogue(op(A) · op(B)) with A and B in bf16 or f16 (both the same dtype), f32 accumulation:
 *   op(A)[i, p] = a[i * a_row + p * a_col]   (m x k, uint16_t elements)
 *   op(B)[p, j] = b[p * b_row + j * b_col]   (k x n)
 *   C[i, j]     = c[i * ldc + j], c_dtype f32 or the operands' dtype (then rounded once, RNE)
 * Epilogue (bias != NULL or activation != EG__OP_COUNT): C = act(C + bias[j * bias_stride]) in f32,
 * bias of dtype bias_dtype (f32 or the operands' dtype), by the f32 elementwise kernels (so the
 * epilogue of an f32 C is bitwise eg_add then the activation op on the f32 product). */
typedef struct eg__gemm_lowp {
    eg_dtype dtype; /* EG_DTYPE_BF16 or EG_DTYPE_F16 */
    int64_t m, n, k;
    const uint16_t *a;
    int64_t a_row, a_col;
    const uint16_t *b;
    int64_t b_row, b_col;
    eg_dtype c_dtype; /* EG_DTYPE_F32 or dtype */
    void *c;
    int64_t ldc;
    const void *bias; /* NULL: no bias */
    eg_dtype bias_dtype;
    int64_t bias_stride;
    eg__op activation;  /* EG__OP_RELU, _SIGMOID, _TANH, or EG__OP_COUNT for none */
    eg__lowp_path path; /* AUTO (0): the best this CPU allows; else forced (must be usable) */
    /* Mixed precision's f32 operands (master weights): when a32 (b32) is set, op(A) (op(B)) is
     * read from it instead of a (b), f32 with the same element strides, each value rounded to
     * dtype (nearest even, as eg_cast rounds) as the product reads it: the values of casting
     * first, without a cast tensor. NULL (the default): a (b) holds dtype values. */
    const float *a32, *b32;
} eg__gemm_lowp;

/* Row and column counts a range should start at multiples of, for speed (any range is correct
 * and gives the same bits). */
#define EG_GEMM_LOWP_MR 32
#define EG_GEMM_LOWP_NR 32

/* Rows [m0, m1) x columns [n0, n1) of C; the bits of an element do not depend on the range.
 * false when buffers cannot be allocated (error raised, nothing written), or when g->path is
 * forced to a path that cannot run here (EG_ERR_UNSUPPORTED raised). Any thread. */
bool eg__gemm_lowp_range(const eg__gemm_lowp *g, int64_t m0, int64_t m1, int64_t n0, int64_t n1);
/* The whole product, split over Eagle's thread pool (the same bits for any thread count). */
eg_status eg__gemm_lowp_run(const eg__gemm_lowp *g);

/* The path AUTO takes for dtype now (follows EG_CPU and the AMX permission). */
eg__lowp_path eg__gemm_lowp_choose(eg_dtype dtype);
/* Whether path can run for dtype on this CPU at the active level (AMX: also the tile state). */
bool eg__gemm_lowp_usable(eg__lowp_path path, eg_dtype dtype);
/* "amx", "avx512-bf16", "convert", "portable" ("auto" for AUTO). Static. */
const char *eg__gemm_lowp_path_name(eg__lowp_path path);
/* What runs for dtype on this CPU and EG_CPU level, for eagle info / logs: e.g. "AMX bf16 tiles",
 * "AVX-512 BF16 (vdpbf16ps)", "converted to f32 while packing, AVX-512 f32 micro-kernel". Static.
 */
const char *eg__gemm_lowp_path(eg_dtype dtype);

#endif
