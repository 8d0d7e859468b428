/* Eagle's own f32 GEMM: the BLIS/Goto structure (B packed into KC x NC panels, A into MC x KC
 * blocks, a 6x16 AVX2/FMA micro-kernel holding its tile of C in 12 registers), except that an
 * operand whose packing would not pay for itself (B of a product with few rows, op(A) of one
 * with few columns: packed_range) is read where it lies.
 *
 * Why our own rather than OpenBLAS (bench/gemm has the numbers): OpenBLAS's threading changes
 * the bits with the thread count, and running it single-threaded per output tile repacks B for
 * every tile, which costs most at the training shapes (M = 32..128). Here every element's value
 * depends only on the problem — k is cut into blocks that depend on k alone, each summed by the
 * micro-kernel in order and added to C in order — so any split of C among threads gives the same
 * bits, and the threads can split wherever it suits the shape. The epilogue (bias + activation)
 * runs on each block of C right after its last k block, while the block is still in cache.
 *
 * The AVX2 code is compiled with target attributes and only entered after cpuid says the CPU
 * has AVX2 and FMA: the library itself stays baseline x86-64 and runs anywhere (matmul.c then
 * uses OpenBLAS). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu_features.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/kernels.h"

#define MR EG_GEMM_MR
#define NR EG_GEMM_NR
#define KC EG_GEMM_KC /* an A micro-panel (6 x KC) and a B one (KC x 16) fit in L1 */
#define MC 144        /* rows per packed A block: 144 x 256 floats = 144 KiB, in L2 */
/* Columns per packed B panel (2 MiB, in L3). Op(A) is packed once per panel: at 512 columns a
 * 2048-square product packed it four times and its transposes took 9 % of the product's time
 * (perf, beside OpenBLAS in one process); at 2048, 2.5 %, about what OpenBLAS spends packing. */
#define NC                2048
#define DIRECT_B_MAX_ROWS 48  /* rows of C up to which B is used unpacked (row-major B only) */
#define DIRECT_A_MAX_COLS 128 /* columns of C up to which op(A) is used unpacked */

/* f32 C += bias and then relu (or no activation), in one pass over each row: the same IEEE
 * additions and the same select as the elementwise add and relu kernels (EG__RELU), so the
 * same bits, without their two calls per row. The seed model's first layer is 32 rows of 64: those
 * calls were most of its epilogue. */
static inline __attribute__((always_inline)) void
bias_relu_rows(float *c, int64_t ldc, int64_t rows, int64_t cols, const float *bias, bool relu) {
    for (int64_t r = 0; r < rows; r++) {
        float *restrict row = c + r * ldc;
        if (bias && relu) {
            for (int64_t j = 0; j < cols; j++) {
                float v = row[j] + bias[j];
                row[j] = EG__RELU(v, 0.0f);
            }
        } else if (bias) {
            for (int64_t j = 0; j < cols; j++) row[j] = row[j] + bias[j];
        } else if (relu) {
            for (int64_t j = 0; j < cols; j++) row[j] = EG__RELU(row[j], 0.0f);
        }
    }
}
static void bias_relu_rows_baseline(float *c, int64_t ldc, int64_t rows, int64_t cols,
                                    const float *bias, bool relu) {
    bias_relu_rows(c, ldc, rows, cols, bias, relu);
}
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx2,fma"))) static void bias_relu_rows_avx2(float *c, int64_t ldc,
                                                                    int64_t rows, int64_t cols,
                                                                    const float *bias, bool relu) {
    bias_relu_rows(c, ldc, rows, cols, bias, relu);
}
__attribute__((target("avx512f,avx512vl,avx2,fma"))) static void
bias_relu_rows_avx512(float *c, int64_t ldc, int64_t rows, int64_t cols, const float *bias,
                      bool relu) {
    bias_relu_rows(c, ldc, rows, cols, bias, relu);
}
#else
#define bias_relu_rows_avx2   bias_relu_rows_baseline
#define bias_relu_rows_avx512 bias_relu_rows_baseline
#endif

void eg__gemm_epilogue(eg_dtype dtype, char *c, int64_t ldc, int64_t rows, int64_t cols, int64_t j0,
                       const char *bias, int64_t bias_stride, eg__op activation) {
    if (dtype == EG_DTYPE_F32 && (!bias || bias_stride == 1) &&
        (activation == EG__OP_RELU || activation == EG__OP_COUNT)) {
        const float *b = bias ? (const float *)bias + j0 : NULL;
        eg__cpu_level level = eg__cpu_active_level();
        (level >= EG__CPU_AVX512 ? bias_relu_rows_avx512
         : level >= EG__CPU_AVX2 ? bias_relu_rows_avx2
                                 : bias_relu_rows_baseline)((float *)c, ldc, rows, cols, b,
                                                            activation == EG__OP_RELU);
        return;
    }
    size_t size = eg_dtype_size(dtype);
    eg__attrs attrs;
    memset(&attrs, 0, sizeof attrs);
    for (int64_t r = 0; r < rows; r++) {
        char *row = c + (size_t)(r * ldc) * size;
        if (bias) {
            char *inputs[2] = {row, (char *)bias + (size_t)(j0 * bias_stride) * size};
            int64_t strides[2] = {(int64_t)size, bias_stride * (int64_t)size};
            eg__cpu_elementwise_flat(EG__OP_ADD, &attrs, dtype, dtype, 2, cols, row, inputs,
                                     strides);
        }
        if (activation != EG__OP_COUNT) {
            char *inputs[1] = {row};
            int64_t strides[1] = {(int64_t)size};
            eg__cpu_elementwise_flat(activation, &attrs, dtype, dtype, 1, cols, row, inputs,
                                     strides);
        }
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,fma")))

static bool detect(void) {
    const char *env = getenv("EG_MATMUL");
    return !(env && strcmp(env, "openblas") == 0);
}

static bool available;
static pthread_once_t detect_once = PTHREAD_ONCE_INIT;
static void run_detect(void) {
    available = detect();
}

bool eg__gemm_f32_available(void) {
    pthread_once(&detect_once, run_detect);
    return available && eg__cpu_active_level() >= EG__CPU_AVX2;
}

/* Packing buffers, one pair per thread, freed when the thread exits. */
typedef struct buffers {
    float *a, *b;
} buffers;

static pthread_key_t buffers_key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static bool key_ok;

static void free_buffers(void *p) {
    buffers *b = p;
    free(b->a);
    free(b->b);
    free(b);
}
static void make_key(void) {
    key_ok = pthread_key_create(&buffers_key, free_buffers) == 0;
}

void eg__gemm_release_thread_buffers(void) {
    pthread_once(&key_once, make_key);
    if (!key_ok) return;
    buffers *b = pthread_getspecific(buffers_key);
    if (!b) return;
    pthread_setspecific(buffers_key, NULL);
    free_buffers(b);
}

static buffers *thread_buffers(void) {
    pthread_once(&key_once, make_key);
    if (!key_ok) return NULL;
    buffers *b = pthread_getspecific(buffers_key);
    if (b) return b;
    b = calloc(1, sizeof *b);
    if (!b) return NULL;
    b->a = aligned_alloc(64, (size_t)MC * KC * sizeof(float));
    b->b = aligned_alloc(64, (size_t)KC * NC * sizeof(float));
    if (!b->a || !b->b || pthread_setspecific(buffers_key, b) != 0) {
        free_buffers(b);
        return NULL;
    }
    return b;
}

/* Transposes 8 rows of 8 floats at src (row stride ld; rows past `rows` read as zeros) into
 * dst (row stride dst_ld): dst[i][j] = src[j][i], storing the first `width` floats of each
 * row of dst (8, or 6 for an A micro-panel). */
AVX2 static inline void transpose_8x8(const float *src, int64_t ld, int rows, float *dst,
                                      int64_t dst_ld, int width) {
    __m256 r[8];
    for (int i = 0; i < 8; i++)
        r[i] = i < rows ? _mm256_loadu_ps(src + i * ld) : _mm256_setzero_ps();
    __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    __m256 o[8] = {_mm256_permute2f128_ps(s0, s4, 0x20), _mm256_permute2f128_ps(s1, s5, 0x20),
                   _mm256_permute2f128_ps(s2, s6, 0x20), _mm256_permute2f128_ps(s3, s7, 0x20),
                   _mm256_permute2f128_ps(s0, s4, 0x31), _mm256_permute2f128_ps(s1, s5, 0x31),
                   _mm256_permute2f128_ps(s2, s6, 0x31), _mm256_permute2f128_ps(s3, s7, 0x31)};
    if (width == 8) {
        for (int i = 0; i < 8; i++) _mm256_storeu_ps(dst + i * dst_ld, o[i]);
    } else {
        /* 4 + 2 floats, not vmaskmovps: AMD's masked stores are microcoded (the forward pass
         * of the seed model spent 9% of its time in this loop with them) */
        for (int i = 0; i < 8; i++) {
            _mm_storeu_ps(dst + i * dst_ld, _mm256_castps256_ps128(o[i]));
            _mm_storel_pi((__m64 *)(dst + i * dst_ld + 4), _mm256_extractf128_ps(o[i], 1));
        }
    }
}

/* The height of the micro-panel that starts `remaining` rows before the end of a block: MR, but
 * a block ending in MR + 2 rows ends in two panels of 4, which the 4-row kernel runs at the full
 * rate (8 chains of multiply-adds), where a 2-row panel would wait on its 4 chains' latency. A
 * batch of 32 is then 4 panels of 6 and 2 of 4, 128 is 20 of 6 and 2 of 4. */
static int64_t panel_rows(int64_t remaining) {
    return remaining == MR + 2 ? 4 : remaining < MR ? remaining : MR;
}

/* Whether the micro-kernels read a panel of `rows` where op(A) lies (direct A): full panels and
 * 4-row ones; others are packed with their zero padding. */
static bool reads_own_a(int64_t rows) {
    return rows == MR || rows == 4;
}

/* op(A)[i0.., p0..] (mc x kc) into micro-panels of panel_rows() rows, each kc x MR, zero-padded. */
AVX2 static void pack_a(const eg__gemm_f32 *g, int64_t i0, int64_t mc, int64_t p0, int64_t kc,
                        float *out) {
    int64_t ir = 0;
    if (g->a_row == 1 && mc >= MR) {
        /* op(A) column-major (a transposed activation in a weight gradient): row by row of
         * storage across all full micro-panels, each row read once from left to right. Panel by
         * panel, every 24-byte piece came from a row 3 KiB further on (the wide MLP's x^T), and
         * those loads stalled: this copy was 3 % of the step (perf). */
        int64_t full = mc / MR - (mc % MR == 2); /* the last 8 rows are two panels of 4 */
        for (int64_t p = 0; p < kc; p++) {
            const float *s = g->a + i0 + (p0 + p) * g->a_col;
            float *o = out + p * MR;
            for (int64_t panel = 0; panel < full; panel++) /* a 16- and an 8-byte move */
                memcpy(o + panel * kc * MR, s + panel * MR, MR * sizeof(float));
        }
        ir = full * MR;
        out += full * kc * MR;
    }
    for (int64_t rows; ir < mc; ir += rows) {
        rows = panel_rows(mc - ir);
        const float *src = g->a + (i0 + ir) * g->a_row + p0 * g->a_col;
        if (g->a_col == 1 && reads_own_a(rows)) { /* row-major op(A): 8 x 6 transposes */
            int64_t p = 0;
            for (; p + 8 <= kc; p += 8)
                transpose_8x8(src + p, g->a_row, (int)rows, out + p * MR, MR, MR);
            for (; p < kc; p++)
                for (int r = 0; r < MR; r++)
                    out[p * MR + r] = r < rows ? src[r * g->a_row + p] : 0.0f;
        } else {
            for (int64_t r = 0; r < rows; r++) {
                const float *s = src + r * g->a_row;
                for (int64_t p = 0; p < kc; p++) out[p * MR + r] = s[p * g->a_col];
            }
            for (int64_t r = rows; r < MR; r++)
                for (int64_t p = 0; p < kc; p++) out[p * MR + r] = 0.0f;
        }
        out += kc * MR;
    }
}

/* op(B)[p0.., j0..] (kc x nc) into NR-column micro-panels, each kc x NR, zero-padded. */
AVX2 static void pack_b(const eg__gemm_f32 *g, int64_t p0, int64_t kc, int64_t j0, int64_t nc,
                        float *out) {
    int64_t jr = 0;
    if (g->b_col == 1 && nc >= NR) {
        /* A row-major op(B): row by row across all full micro-panels, reading each row of B once
         * from left to right. Panel by panel, the walk down a 16-column strip hits rows that are
         * often a power of two apart (2 KiB for 512 columns), which share a handful of L1 sets:
         * that order made packing 10% of the wide MLP's step. */
        int64_t full = nc / NR;
        for (int64_t p = 0; p < kc; p++) {
            const float *s = g->b + (p0 + p) * g->b_row + j0;
            float *o = out + p * NR;
            for (int64_t panel = 0; panel < full; panel++) {
                _mm256_store_ps(o + panel * kc * NR, _mm256_loadu_ps(s + panel * NR));
                _mm256_store_ps(o + panel * kc * NR + 8, _mm256_loadu_ps(s + panel * NR + 8));
            }
        }
        jr = full * NR;
        out += full * kc * NR;
    }
    for (; jr < nc; jr += NR) {
        int64_t cols = nc - jr < NR ? nc - jr : NR;
        const float *src = g->b + p0 * g->b_row + (j0 + jr) * g->b_col;
        if (g->b_row == 1 && cols == NR) { /* op(B) = a row-major matrix^T */
            int64_t p = 0;
            for (; p + 8 <= kc; p += 8) {
                transpose_8x8(src + p, g->b_col, 8, out + p * NR, NR, 8);
                transpose_8x8(src + 8 * g->b_col + p, g->b_col, 8, out + p * NR + 8, NR, 8);
            }
            for (; p < kc; p++)
                for (int j = 0; j < NR; j++) out[p * NR + j] = src[j * g->b_col + p];
        } else {
            for (int64_t j = 0; j < cols; j++) {
                const float *s = src + j * g->b_col;
                for (int64_t p = 0; p < kc; p++) out[p * NR + j] = s[p * g->b_row];
            }
            for (int64_t j = cols; j < NR; j++)
                for (int64_t p = 0; p < kc; p++) out[p * NR + j] = 0.0f;
        }
        out += kc * NR;
    }
}

/* One k step of a micro-kernel for row r of its tile: broadcast A's element, two FMAs against
 * the 16 B values in b0, b1 (accumulators lo, hi). Every kernel below is these steps in k order,
 * so an element's bits do not depend on which kernel computed it. */
#define FMA_ROW(r, lo, hi)                                                                         \
    do {                                                                                           \
        __m256 x_ = _mm256_broadcast_ss(a + (r)*a_rs);                                             \
        lo = _mm256_fmadd_ps(x_, b0, lo);                                                          \
        hi = _mm256_fmadd_ps(x_, b1, hi);                                                          \
    } while (0)

/* A micro-panel of op(A): row r's element for k step p at a[r * a_rs + p * a_ps]. Packed, that is
 * (1, MR); read where it lies (direct), op(A)'s own strides. */
typedef struct a_panel {
    const float *a;
    int64_t a_rs, a_ps;
} a_panel;

/* c (6 x 16, row stride ldc) = [c +] a-panel · b-panel over kc. Inlined into one function with
 * the packed strides as constants and one with A's own. */
AVX2 static inline __attribute__((always_inline)) void
tile_6x16(int64_t kc, const float *a, int64_t a_rs, int64_t a_ps, const float *b, int64_t b_stride,
          float *c, int64_t ldc, bool accumulate) {
    /* C's rows are far apart (often a power of two): start loading them now, not at the end */
    for (int r = 0; r < MR; r++) {
        _mm_prefetch((const char *)(c + r * ldc), _MM_HINT_T0);
        _mm_prefetch((const char *)(c + r * ldc + NR - 1), _MM_HINT_T0);
    }
    __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps();
    __m256 c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();
    __m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
    __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
    __m256 c40 = _mm256_setzero_ps(), c41 = _mm256_setzero_ps();
    __m256 c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
#pragma GCC unroll 2
    for (int64_t p = 0; p < kc; p++) {
        __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
        FMA_ROW(0, c00, c01);
        FMA_ROW(1, c10, c11);
        FMA_ROW(2, c20, c21);
        FMA_ROW(3, c30, c31);
        FMA_ROW(4, c40, c41);
        FMA_ROW(5, c50, c51);
        a += a_ps;
        b += b_stride;
    }
#define STORE_ROW(r, lo, hi)                                                                       \
    do {                                                                                           \
        float *row = c + (r)*ldc;                                                                  \
        if (accumulate) {                                                                          \
            lo = _mm256_add_ps(_mm256_loadu_ps(row), lo);                                          \
            hi = _mm256_add_ps(_mm256_loadu_ps(row + 8), hi);                                      \
        }                                                                                          \
        _mm256_storeu_ps(row, lo);                                                                 \
        _mm256_storeu_ps(row + 8, hi);                                                             \
    } while (0)
    STORE_ROW(0, c00, c01);
    STORE_ROW(1, c10, c11);
    STORE_ROW(2, c20, c21);
    STORE_ROW(3, c30, c31);
    STORE_ROW(4, c40, c41);
    STORE_ROW(5, c50, c51);
#undef STORE_ROW
}

AVX2 static void kernel_6x16(int64_t kc, const float *a, const float *b, int64_t b_stride, float *c,
                             int64_t ldc, bool accumulate) {
    tile_6x16(kc, a, 1, MR, b, b_stride, c, ldc, accumulate);
}

AVX2 static void kernel_6x16_direct(int64_t kc, a_panel a, const float *b, int64_t b_stride,
                                    float *c, int64_t ldc, bool accumulate) {
    tile_6x16(kc, a.a, a.a_rs, a.a_ps, b, b_stride, c, ldc, accumulate);
}

/* kc steps of FMA_ROW for the first `rows` (2 or 4, a constant once inlined) rows into
 * acc[2 * r], acc[2 * r + 1]. */
AVX2 static inline __attribute__((always_inline)) void
few_rows_steps(int rows, int64_t kc, const float *a, int64_t a_rs, int64_t a_ps, const float *b,
               int64_t b_stride, __m256 acc[8]) {
#pragma GCC unroll 2
    for (int64_t p = 0; p < kc; p++) {
        __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
        FMA_ROW(0, acc[0], acc[1]);
        FMA_ROW(1, acc[2], acc[3]);
        if (rows > 2) {
            FMA_ROW(2, acc[4], acc[5]);
            FMA_ROW(3, acc[6], acc[7]);
        }
        a += a_ps;
        b += b_stride;
    }
}

/* Rows 0..count-1 (count 2 or 4, a constant once inlined) of acc to out (row stride ld),
 * added to what is there when accumulate. */
AVX2 static inline __attribute__((always_inline)) void
store_rows(int count, const __m256 acc[8], float *out, int64_t ld, bool accumulate) {
#pragma GCC unroll 8
    for (int i = 0; i < 2 * count; i++) {
        float *p = out + i / 2 * ld + i % 2 * 8;
        _mm256_storeu_ps(p, accumulate ? _mm256_add_ps(_mm256_loadu_ps(p), acc[i]) : acc[i]);
    }
}

/* The first `rows` of kernel_6x16's tile, for a micro-panel of fewer than 6 rows: the 6-row
 * kernel would spend a third or more of its multiply-adds on zero padding. 2 or 4 rows are
 * computed (rows <= 2: 2) and stored to out (row stride ld) [+]=, like kernel_6x16: into C
 * itself when rows is 2 or 4, else into a local tile (accumulate false). Each element is the
 * same chain of fused multiply-adds in k order as in kernel_6x16, so the bits are the same. */
AVX2 static inline __attribute__((always_inline)) void
few_rows_tile(int rows, int64_t kc, const float *a, int64_t a_rs, int64_t a_ps, const float *b,
              int64_t b_stride, float *out, int64_t ld, bool accumulate) {
    __m256 acc[8];
    for (int i = 0; i < 8; i++) acc[i] = _mm256_setzero_ps();
    if (rows <= 2) {
        few_rows_steps(2, kc, a, a_rs, a_ps, b, b_stride, acc);
        store_rows(2, acc, out, ld, accumulate);
    } else {
        few_rows_steps(4, kc, a, a_rs, a_ps, b, b_stride, acc);
        store_rows(4, acc, out, ld, accumulate);
    }
}

AVX2 static void kernel_few_rows_x16(int rows, int64_t kc, const float *a, const float *b,
                                     int64_t b_stride, float *out, int64_t ld, bool accumulate) {
    few_rows_tile(rows, kc, a, 1, MR, b, b_stride, out, ld, accumulate);
}

/* Only for rows 4: the packed partial panel keeps its zero padding for 1, 2, 3 and 5 rows. */
AVX2 static void kernel_4x16_direct(int64_t kc, a_panel a, const float *b, int64_t b_stride,
                                    float *out, int64_t ld, bool accumulate) {
    few_rows_tile(4, kc, a.a, a.a_rs, a.a_ps, b, b_stride, out, ld, accumulate);
}
#undef FMA_ROW

#define AVX512 __attribute__((target("avx512f,avx2,fma")))

/* `rows` rows by 32 columns: one micro-panel of A at a, or two (rows 0..first-1 at a, the rest at
 * a2), against two 16-column micro-panels of B side by side (at b0 and b1, the same stride; C
 * tiles at c0 and c1), in 512-bit accumulators. rows and first are constants once inlined: 12
 * and 6 (two full panels), 6 and 6 (a lone one), 8 and 4 (the two 4-row panels a block of
 * 6n + 2 rows ends in), 4 and 4. Twelve rows make 24 chains of multiply-adds and, per k step,
 * two B loads and twelve broadcasts for 24 FMAs, so the FMA units, not the loads, bound it;
 * four rows still make the eight chains that cover the FMA latency on two ports. Each element
 * is the same chain of fused multiply-adds in k order as in tile_6x16, so the bits are the same
 * as the AVX2 kernels'. */
AVX512 static inline __attribute__((always_inline)) void
tile_x32(int rows, int first, int64_t kc, const float *a, const float *a2, int64_t a_rs,
         int64_t a_ps, const float *b0, const float *b1, int64_t b_stride, float *c0, float *c1,
         int64_t ldc, bool accumulate) {
    /* C's rows are far apart: start loading them now, not at the end */
    for (int r = 0; r < rows; r++) {
        _mm_prefetch((const char *)(c0 + r * ldc), _MM_HINT_T0);
        _mm_prefetch((const char *)(c1 + r * ldc + NR - 1), _MM_HINT_T0);
    }
    __m512 acc[24];
#pragma GCC unroll 24
    for (int i = 0; i < 2 * rows; i++) acc[i] = _mm512_setzero_ps();
#pragma GCC unroll 2
    for (int64_t p = 0; p < kc; p++) {
        __m512 v0 = _mm512_loadu_ps(b0), v1 = _mm512_loadu_ps(b1);
#pragma GCC unroll 12
        for (int r = 0; r < rows; r++) {
            __m512 x = _mm512_set1_ps(r < first ? a[r * a_rs] : a2[(r - first) * a_rs]);
            acc[2 * r] = _mm512_fmadd_ps(x, v0, acc[2 * r]);
            acc[2 * r + 1] = _mm512_fmadd_ps(x, v1, acc[2 * r + 1]);
        }
        a += a_ps;
        a2 += a_ps;
        b0 += b_stride;
        b1 += b_stride;
    }
#pragma GCC unroll 12
    for (int r = 0; r < rows; r++) {
        float *left = c0 + r * ldc, *right = c1 + r * ldc;
        __m512 lo = acc[2 * r], hi = acc[2 * r + 1];
        if (accumulate) {
            lo = _mm512_add_ps(_mm512_loadu_ps(left), lo);
            hi = _mm512_add_ps(_mm512_loadu_ps(right), hi);
        }
        _mm512_storeu_ps(left, lo);
        _mm512_storeu_ps(right, hi);
    }
}

/* The zmm kernels by (rows, first): packed A (the second panel follows the first, kc x MR
 * each), and A where it lies (a_panel). With one panel, a2 is never read (a stands in, so that
 * stepping it stays defined). */
#define DEFINE_X32(ROWS, FIRST)                                                                    \
    AVX512 static void kernel_##ROWS##x32(int64_t kc, const float *a, const float *b0,            \
                                          const float *b1, int64_t b_stride, float *c0,           \
                                          float *c1, int64_t ldc, bool accumulate) {              \
        tile_x32(ROWS, FIRST, kc, a, ROWS > FIRST ? a + kc * MR : a, 1, MR, b0, b1, b_stride, c0, \
                 c1, ldc, accumulate);                                                             \
    }                                                                                              \
    AVX512 static void kernel_##ROWS##x32_direct(int64_t kc, a_panel a, const float *b0,          \
                                                 const float *b1, int64_t b_stride, float *c0,    \
                                                 float *c1, int64_t ldc, bool accumulate) {       \
        tile_x32(ROWS, FIRST, kc, a.a, ROWS > FIRST ? a.a + FIRST * a.a_rs : a.a, a.a_rs, a.a_ps, \
                 b0, b1, b_stride, c0, c1, ldc, accumulate);                                       \
    }
DEFINE_X32(12, 6)
DEFINE_X32(6, 6)
DEFINE_X32(8, 4)
DEFINE_X32(4, 4)
#undef DEFINE_X32

typedef void (*x32_kernel)(int64_t, const float *, const float *, const float *, int64_t, float *,
                           float *, int64_t, bool);
typedef void (*x32_direct_kernel)(int64_t, a_panel, const float *, const float *, int64_t, float *,
                                  float *, int64_t, bool);

/* Where micro-panel jr of B is read: packed at bp, or for direct B (k = p0..) B's own rows when
 * the micro-panel is full, the packed last one (at bp) when not. */
static inline const float *b_micro_panel(const eg__gemm_f32 *g, const float *bp, bool direct,
                                         int64_t j0, int64_t jr, int64_t cols, int64_t p0,
                                         int64_t kc, int64_t *b_stride) {
    *b_stride = NR;
    if (direct && cols == NR) {
        *b_stride = g->b_row;
        return g->b + p0 * g->b_row + (j0 + jr);
    }
    return direct ? bp : bp + jr * kc;
}

/* The geometry of one macro-kernel tile: rows [i0 + ir, + rows) (micro-panel `panel` of the A
 * block), columns [j0 + jr, + cols). */
typedef struct tile_place {
    int64_t ir, rows, panel, jr, cols;
} tile_place;

/* One tile of macro_kernel: the kernel for its rows, into C, or through a local tile at edges. */
AVX2 static inline __attribute__((always_inline)) void
one_tile(const eg__gemm_f32 *g, bool c_transposed, const float *ap, bool direct_a, int64_t i0,
         int64_t j0, int64_t p0, int64_t kc, tile_place t, const float *b, int64_t b_stride,
         bool accumulate) {
    int64_t c_row = c_transposed ? 1 : g->ldc, c_col = c_transposed ? g->ldc : 1;
    bool own_a = direct_a && reads_own_a(t.rows);
    const float *a = direct_a ? ap : ap + t.panel * kc * MR;
    a_panel own = {g->a + (i0 + t.ir) * g->a_row + p0 * g->a_col, g->a_row, g->a_col};
    float *c = g->c + (i0 + t.ir) * c_row + (j0 + t.jr) * c_col;
    /* the kernels write exactly 6, 4 or 2 rows of 16 columns: such tiles go into C */
    bool in_place = t.cols == NR && !c_transposed && (t.rows == MR || t.rows == 4 || t.rows == 2);
    float tile[MR * NR] __attribute__((aligned(32)));
    float *out = in_place ? c : tile;
    int64_t ld = in_place ? g->ldc : NR;
    bool add = in_place && accumulate;
    if (own_a && t.rows == MR)
        kernel_6x16_direct(kc, own, b, b_stride, out, ld, add);
    else if (own_a)
        kernel_4x16_direct(kc, own, b, b_stride, out, ld, add);
    else if (t.rows <= 4)
        kernel_few_rows_x16((int)t.rows, kc, a, b, b_stride, out, ld, add);
    else
        kernel_6x16(kc, a, b, b_stride, out, ld, add);
    if (in_place) return;
    for (int64_t r = 0; r < t.rows; r++)
        for (int64_t j = 0; j < t.cols; j++) {
            float *element = &c[r * c_row + j * c_col];
            *element = accumulate ? *element + tile[r * NR + j] : tile[r * NR + j];
        }
}

/* C[i0.., j0..] (mc x nc) [+]= A block · B panel. A is the packed block at ap, or when direct_a
 * op(A) where it lies, except a panel reads_own_a refuses, packed at ap. B is the packed panel at
 * bp, or when direct B's own rows (k = p0..) for full micro-panels and the packed last one (at bp)
 * for a partial one. Tiles of 16 columns with 6, 4 or 2 rows are written into C; other edge
 * tiles go through a local tile and the same additions, so an element's bits do not depend on
 * whether it is at an edge, nor on whether A or B was packed. With AVX-512, two full 16-column
 * tiles side by side run as one 32-column zmm tile (tile_x32; the same bits) for every panel of 6
 * or 4 rows, two such panels at once where two follow. */
AVX2 static void macro_kernel(const eg__gemm_f32 *g, bool c_transposed, const float *ap,
                              bool direct_a, const float *bp, bool direct, int64_t i0, int64_t mc,
                              int64_t j0, int64_t nc, int64_t p0, int64_t kc, bool accumulate) {
    bool wide = !c_transposed && eg__cpu_avx512_active();
    for (int64_t jr = 0; jr < nc;) {
        int64_t cols = nc - jr < NR ? nc - jr : NR, b_stride, b2_stride = NR;
        const float *b = b_micro_panel(g, bp, direct, j0, jr, cols, p0, kc, &b_stride);
        bool pair = wide && nc - jr >= 2 * NR;
        const float *b2 =
            pair ? b_micro_panel(g, bp, direct, j0, jr + NR, NR, p0, kc, &b2_stride) : NULL;
        for (int64_t ir = 0, rows, panel = 0; ir < mc; ir += rows, panel++) {
            rows = panel_rows(mc - ir);
            if (pair && (rows == MR || rows == 4)) { /* zmm tiles, two panels at once if can */
                bool two = ir + rows < mc && panel_rows(mc - ir - rows) == rows;
                float *c = g->c + (i0 + ir) * g->ldc + (j0 + jr);
                int which = (rows == MR ? 0 : 2) + (two ? 0 : 1);
                if (direct_a) {
                    static const x32_direct_kernel kernels[4] = {
                        kernel_12x32_direct, kernel_6x32_direct, kernel_8x32_direct,
                        kernel_4x32_direct};
                    a_panel own = {g->a + (i0 + ir) * g->a_row + p0 * g->a_col, g->a_row, g->a_col};
                    kernels[which](kc, own, b, b2, b_stride, c, c + NR, g->ldc, accumulate);
                } else {
                    static const x32_kernel kernels[4] = {kernel_12x32, kernel_6x32, kernel_8x32,
                                                          kernel_4x32};
                    kernels[which](kc, ap + panel * kc * MR, b, b2, b_stride, c, c + NR, g->ldc,
                                   accumulate);
                }
                if (two) {
                    rows *= 2;
                    panel++;
                }
                continue;
            }
            tile_place t = {ir, rows, panel, jr, cols};
            one_tile(g, c_transposed, ap, direct_a, i0, j0, p0, kc, t, b, b_stride, accumulate);
            if (pair) {
                t.jr = jr + NR;
                t.cols = NR;
                one_tile(g, c_transposed, ap, direct_a, i0, j0, p0, kc, t, b2, b2_stride,
                         accumulate);
            }
        }
        jr += pair ? 2 * NR : NR;
    }
}

static bool has_epilogue(const eg__gemm_f32 *g) {
    return g->bias || g->activation != EG__OP_COUNT;
}

/* The packed product over rows [m0, m1) x columns [n0, n1) of C (k > 0); C column-major when
 * c_transposed (g is then a swapped product, without an epilogue). */
static bool packed_range(const eg__gemm_f32 *g, bool c_transposed, int64_t m0, int64_t m1,
                         int64_t n0, int64_t n1) {
    buffers *buf = thread_buffers();
    if (!buf) return false;
    /* k blocks of equal size that depend on k alone: the summation order is fixed by the
     * problem, not by the range or the thread. */
    int64_t k_blocks = (g->k + KC - 1) / KC, kb = (g->k + k_blocks - 1) / k_blocks;
    /* With few rows each B micro-panel serves few A micro-panels: packing B would cost about
     * as much as the products, so a row-major B is read where it lies. */
    bool direct = g->b_col == 1 && m1 - m0 <= DIRECT_B_MAX_ROWS;
    /* Likewise op(A) when each of its micro-panels serves few B micro-panels: packing x (32 x
     * 784) for the seed model's first layer was 12 % of that product, and its 8x6 transposes
     * cost more than the products' reads of x where it lies (row-major: 6 rows, each read
     * forwards; column-major: a 24-byte piece of each row). Best of 400 samples of eg_matmul,
     * one thread: 32 x 64 x 784 41.2 -> 37.0 us, 784 x 64 x 32 (A^T) 41.6 -> 38.9 us; past 128
     * columns packing wins (784 x 512 x 128, A^T: 1,168 us packed, 1,205 us in place). */
    bool direct_a = (g->a_col == 1 || g->a_row == 1) && n1 - n0 <= DIRECT_A_MAX_COLS;
    for (int64_t jc = n0; jc < n1; jc += NC) {
        int64_t nc = n1 - jc < NC ? n1 - jc : NC;
        for (int64_t block = 0; block < k_blocks; block++) {
            int64_t p0 = block * kb, kc = g->k - p0 < kb ? g->k - p0 : kb;
            if (direct) /* only a partial last micro-panel needs packing (zero padding) */
                pack_b(g, p0, kc, jc + nc / NR * NR, nc % NR, buf->b);
            else
                pack_b(g, p0, kc, jc, nc, buf->b);
            for (int64_t ic = m0; ic < m1; ic += MC) {
                int64_t mc = m1 - ic < MC ? m1 - ic : MC;
                if (!direct_a) {
                    pack_a(g, ic, mc, p0, kc, buf->a);
                } else { /* only a last panel that reads_own_a refuses */
                    int64_t last = 0;
                    for (int64_t ir = 0; ir < mc; ir += panel_rows(mc - ir)) last = ir;
                    if (!reads_own_a(mc - last)) pack_a(g, ic + last, mc - last, p0, kc, buf->a);
                }
                macro_kernel(g, c_transposed, buf->a, direct_a, buf->b, direct, ic, mc, jc, nc, p0,
                             kc, block > 0);
                if (block == k_blocks - 1 && has_epilogue(g))
                    eg__gemm_epilogue(EG_DTYPE_F32, (char *)(g->c + ic * g->ldc + jc), g->ldc, mc,
                                      nc, jc, (const char *)g->bias, g->bias_stride, g->activation);
            }
        }
    }
    return true;
}

/* The share of a micro-kernel's work that is useful for an m x n product. */
static double tile_efficiency(int64_t m, int64_t n) {
    return (double)m / (double)((m + MR - 1) / MR * MR) * (double)n /
           (double)((n + NR - 1) / NR * NR);
}

bool eg__gemm_f32_range(const eg__gemm_f32 *g, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
    if (m0 >= m1 || n0 >= n1) return true;
    if (g->k == 0) {
        for (int64_t i = m0; i < m1; i++)
            memset(g->c + i * g->ldc + n0, 0, (size_t)(n1 - n0) * sizeof(float));
    } else if (n1 - n0 < NR &&
               tile_efficiency(n1 - n0, m1 - m0) > 1.1 * tile_efficiency(m1 - m0, n1 - n0)) {
        /* A narrow C (a layer of 10 outputs) fills 16-column tiles poorly: compute C^T = op(B)^T
         * op(A)^T instead. Each element is the same sum of the same fused multiply-adds in the
         * same order (a product's factors commute exactly), so the bits do not change; the
         * epilogue then runs over C as usual. */
        eg__gemm_f32 swapped = {.m = g->n,
                                .n = g->m,
                                .k = g->k,
                                .a = g->b,
                                .a_row = g->b_col,
                                .a_col = g->b_row,
                                .b = g->a,
                                .b_row = g->a_col,
                                .b_col = g->a_row,
                                .c = g->c,
                                .ldc = g->ldc,
                                .activation = EG__OP_COUNT};
        if (!packed_range(&swapped, true, n0, n1, m0, m1)) return false;
    } else {
        return packed_range(g, false, m0, m1, n0, n1);
    }
    if (has_epilogue(g))
        eg__gemm_epilogue(EG_DTYPE_F32, (char *)(g->c + m0 * g->ldc + n0), g->ldc, m1 - m0, n1 - n0,
                          n0, (const char *)g->bias, g->bias_stride, g->activation);
    return true;
}

#else /* not x86-64: OpenBLAS does every product */

bool eg__gemm_f32_available(void) {
    return false;
}

bool eg__gemm_f32_range(const eg__gemm_f32 *g, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
    (void)g, (void)m0, (void)m1, (void)n0, (void)n1;
    return false;
}

#endif
