/* Internal to gemm_lowp.c and gemm_amx.c: the blocked driver every low-precision path runs in,
 * and the pieces a path supplies. */
#ifndef EAGLE_SRC_BACKEND_CPU_GEMM_LOWP_INTERNAL_H
#define EAGLE_SRC_BACKEND_CPU_GEMM_LOWP_INTERNAL_H

#include <stddef.h>

#include "backend/cpu/gemm_lowp.h"

/* One path's packing and block kernel. The driver (gemm_lowp.c) runs the BLIS loops: columns in
 * panels of nc, k in blocks of kc (every block starts at a multiple of kc, so the blocks depend
 * on k alone), rows in blocks of mc; B's panel packed once per (column panel, k block), A's block
 * once per (k block, row block). block() computes the f32 product of a packed A block and a
 * packed B panel into C (row stride ldc), starting from C's values when accumulate and from zero
 * otherwise: every path continues each element's f32 sum where the previous k block left it
 * (a stored f32 partial sum reloads exactly), so the blocking never changes the bits. */
typedef struct eg__lowp_kernel {
    int64_t kc, mc, nc;
    /* bytes of a packed A block (mc x kc) and of a packed B panel (kc x nc) */
    size_t (*a_bytes)(int64_t mc, int64_t kc);
    size_t (*b_bytes)(int64_t kc, int64_t nc);
    void (*pack_a)(const eg__gemm_lowp *g, int64_t i0, int64_t mc, int64_t p0, int64_t kc,
                   void *out);
    void (*pack_b)(const eg__gemm_lowp *g, int64_t p0, int64_t kc, int64_t j0, int64_t nc,
                   void *out);
    void (*block)(const void *a, const void *b, int64_t mc, int64_t nc, int64_t kc, float *c,
                  int64_t ldc, bool accumulate);
    /* after the last block a thread runs (releases the AMX tiles), or NULL */
    void (*done)(void);
    /* A path with its own loops (AMX): computes the range instead of the driver, or NULL. false
     * when its buffers cannot be allocated. */
    bool (*range)(const eg__gemm_lowp *g, int64_t m0, int64_t m1, int64_t n0, int64_t n1);
} eg__lowp_kernel;

/* A thread's buffers, kept for its next products (freed when it exits). */
typedef struct eg__lowp_buffers {
    void *a, *b;
    float *c, *bias;
    uint16_t *a16, *b16; /* f32 operands rounded to the compute dtype */
    size_t a_bytes, b_bytes, c_bytes, bias_bytes, a16_bytes, b16_bytes;
} eg__lowp_buffers;

/* This thread's buffers (NULL when they cannot be created). */
eg__lowp_buffers *eg__lowp_thread_buffers(void);
/* *buffer holds at least `bytes` (64-byte aligned); false when they cannot be allocated. */
bool eg__lowp_reserve(void **buffer, size_t *capacity, size_t bytes);
/* The bias of columns [j0, j0 + cols) as contiguous f32 in buf->bias (which must hold cols
 * floats), or NULL without a bias. */
const float *eg__lowp_bias(const eg__gemm_lowp *g, eg__lowp_buffers *buf, int64_t j0, int64_t cols);
/* Rows [i0, + rows) x columns [j0, + cols) of the product are final in cf (f32, row stride ld): the
 * epilogue there, then (for a 16-bit C) the one rounding into C. bias: eg__lowp_bias's. */
void eg__lowp_finish(const eg__gemm_lowp *g, float *cf, int64_t ld, int64_t i0, int64_t rows,
                     int64_t j0, int64_t cols, const float *bias);

/* The AMX and AVX-512 BF16 kernels (gemm_amx.c); NULL where this build has none. */
const eg__lowp_kernel *eg__lowp_amx_kernel(void);
const eg__lowp_kernel *eg__lowp_avx512_bf16_kernel(void);

#endif
