/* Products of bf16 and f16 matrices accumulated in f32 (gemm_lowp.h): the path chosen at run
 * time, the blocked driver every path runs in (gemm_lowp_internal.h), the epilogue and the one
 * rounding of the output, the split among threads, and the path that widens the operands to f32
 * while packing them and runs f32 micro-kernels (f16 everywhere: this CPU class has no AMX-FP16,
 * and AVX512-FP16's FMAs accumulate in f16; bf16 on CPUs without AVX-512 BF16).
 *
 * Why convert while packing (the requirement, bench/gemm --dtype): every product of two
 * bf16 or two f16 values is exact in f32, so widening first loses nothing, and the packing pass
 * that an f32 GEMM makes anyway does the widening on the way; the micro-kernels then run at f32
 * speed. PyTorch's bf16 matmul on AVX2-only CPUs falls to a scalar loop instead.
 *
 * Each element is one chain of f32 multiply-adds in k order, started from zero and continued
 * from its stored partial sum at each k block, so its bits depend on the problem alone; the AVX2,
 * AVX-512 and portable kernels of this path give the same bits (the products are exact, so a
 * fused multiply-add and a multiply then an add round the same). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/gemm.h"
#include "backend/cpu/gemm_lowp.h"
#include "backend/cpu/gemm_lowp_internal.h"
#include "backend/cpu/kernels.h"
#include "base/cpu_features.h"
#include "base/error.h"
#include "base/threadpool.h"
#include "eagle/dtype.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define EG_LOWP_X86 1
#include <cpuid.h>
#include <immintrin.h>
#endif

/* ---- per-thread buffers ---- */

typedef eg__lowp_buffers buffers;

static pthread_key_t buffers_key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static bool key_ok;

static void free_buffers(void *p) {
    buffers *b = p;
    free(b->a);
    free(b->b);
    free(b->c);
    free(b->bias);
    free(b->a16);
    free(b->b16);
    free(b);
}
static void make_key(void) {
    key_ok = pthread_key_create(&buffers_key, free_buffers) == 0;
}

eg__lowp_buffers *eg__lowp_thread_buffers(void) {
    pthread_once(&key_once, make_key);
    if (!key_ok) return NULL;
    buffers *b = pthread_getspecific(buffers_key);
    if (b) return b;
    b = calloc(1, sizeof *b);
    if (b && pthread_setspecific(buffers_key, b) != 0) {
        free(b);
        return NULL;
    }
    return b;
}

bool eg__lowp_reserve(void **buffer, size_t *capacity, size_t bytes) {
    if (bytes <= *capacity) return true;
    size_t rounded = (bytes + 4095) / 4096 * 4096;
    void *fresh = aligned_alloc(64, rounded);
    if (!fresh) return false;
    free(*buffer);
    *buffer = fresh;
    *capacity = rounded;
    return true;
}

/* ---- scalar widening ---- */

static inline float bf16_value(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline float f16_value(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exponent = (h >> 10) & 0x1fu,
             mantissa = h & 0x3ffu;
    uint32_t u;
    if (exponent == 0x1f) {
        u = sign | 0x7f800000u | (mantissa << 13);
    } else if (exponent) {
        u = sign | ((exponent + 112) << 23) | (mantissa << 13);
    } else { /* zero or subnormal: mantissa 2^-24, exact in f32 */
        float f = (float)mantissa * 0x1p-24f;
        memcpy(&u, &f, sizeof u);
        u |= sign;
    }
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline float widen(bool f16, uint16_t h) {
    return f16 ? f16_value(h) : bf16_value(h);
}

/* ---- the convert path's packed layouts: A in panels of CMR rows (element (r, p) of a panel at
 * [p * CMR + r]), B in panels of CNR columns ((p, j) at [p * CNR + j]), zero-padded ---- */

#define CMR 12
#define CNR 32
#define CKC 256
#define CMC 144 /* 12 panels: 144 KiB of f32, in L2 */
#define CNC 512 /* a 512 KiB B panel, in L2 */

static size_t convert_a_bytes(int64_t mc, int64_t kc) {
    return (size_t)((mc + CMR - 1) / CMR * CMR * kc) * sizeof(float);
}
static size_t convert_b_bytes(int64_t kc, int64_t nc) {
    return (size_t)((nc + CNR - 1) / CNR * CNR * kc) * sizeof(float);
}

/* Panel of A rows [i0, i0 + rows) (rows <= CMR) x k [p0, p0 + kc), element by element. */
static void pack_a_panel_scalar(const eg__gemm_lowp *g, int64_t i0, int64_t rows, int64_t p0,
                                int64_t kc, float *out) {
    bool f16 = g->dtype == EG_DTYPE_F16;
    for (int64_t r = 0; r < CMR; r++) {
        const uint16_t *s = g->a + (i0 + r) * g->a_row + p0 * g->a_col;
        if (r < rows)
            for (int64_t p = 0; p < kc; p++) out[p * CMR + r] = widen(f16, s[p * g->a_col]);
        else
            for (int64_t p = 0; p < kc; p++) out[p * CMR + r] = 0.0f;
    }
}

/* Panel of B columns [j0, j0 + cols) (cols <= CNR) x k [p0, p0 + kc), element by element. */
static void pack_b_panel_scalar(const eg__gemm_lowp *g, int64_t p0, int64_t kc, int64_t j0,
                                int64_t cols, float *out) {
    bool f16 = g->dtype == EG_DTYPE_F16;
    for (int64_t p = 0; p < kc; p++) {
        const uint16_t *s = g->b + (p0 + p) * g->b_row + j0 * g->b_col;
        float *o = out + p * CNR;
        for (int64_t j = 0; j < cols; j++) o[j] = widen(f16, s[j * g->b_col]);
        for (int64_t j = cols; j < CNR; j++) o[j] = 0.0f;
    }
}

static void pack_a_portable(const eg__gemm_lowp *g, int64_t i0, int64_t mc, int64_t p0, int64_t kc,
                            void *out) {
    float *o = out;
    for (int64_t ir = 0; ir < mc; ir += CMR, o += kc * CMR)
        pack_a_panel_scalar(g, i0 + ir, mc - ir < CMR ? mc - ir : CMR, p0, kc, o);
}

static void pack_b_portable(const eg__gemm_lowp *g, int64_t p0, int64_t kc, int64_t j0, int64_t nc,
                            void *out) {
    float *o = out;
    for (int64_t jr = 0; jr < nc; jr += CNR, o += kc * CNR)
        pack_b_panel_scalar(g, p0, kc, j0 + jr, nc - jr < CNR ? nc - jr : CNR, o);
}

/* The CMR x CNR tile c (row stride ldc) [continued] from a panel pair, in plain C: each element
 * the same chain of f32 multiply-adds in k order as the vector kernels (the products are exact,
 * so contracted or not they round the same). */
static void tile_portable(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                          bool accumulate, int rows, int cols) {
    (void)rows, (void)cols;
    for (int r0 = 0; r0 < CMR; r0 += 2) {
        float acc[2][CNR];
        for (int r = 0; r < 2; r++)
            for (int j = 0; j < CNR; j++) acc[r][j] = accumulate ? c[(r0 + r) * ldc + j] : 0.0f;
        for (int64_t p = 0; p < kc; p++) {
            const float *bp = b + p * CNR;
            float x0 = a[p * CMR + r0], x1 = a[p * CMR + r0 + 1];
            for (int j = 0; j < CNR; j++) {
                acc[0][j] = acc[0][j] + x0 * bp[j];
                acc[1][j] = acc[1][j] + x1 * bp[j];
            }
        }
        for (int r = 0; r < 2; r++)
            for (int j = 0; j < CNR; j++) c[(r0 + r) * ldc + j] = acc[r][j];
    }
}

/* A tile function computes at least the first rows x cols of the CMR x CNR tile (a kernel may
 * skip the 16-column half or 6-row half that is only padding: a layer of 10 outputs) and leaves
 * the rest of c's tile alone or computed, never wrong. */
typedef void (*convert_tile_fn)(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                                bool accumulate, int rows, int cols);

/* C block (mc x nc) [continued] from a packed A block and B panel, tile by tile: B's micro-panel
 * stays in L1 while A's block streams from L2. Edge tiles go through a local tile, the same
 * arithmetic. */
static inline __attribute__((always_inline)) void
convert_block(convert_tile_fn tile_fn, const float *ap, const float *bp, int64_t mc, int64_t nc,
              int64_t kc, float *c, int64_t ldc, bool accumulate) {
    float local[CMR * CNR] __attribute__((aligned(64)));
    for (int64_t jr = 0; jr < nc; jr += CNR) {
        int64_t cols = nc - jr < CNR ? nc - jr : CNR;
        const float *b = bp + jr * kc;
        for (int64_t ir = 0; ir < mc; ir += CMR) {
            int64_t rows = mc - ir < CMR ? mc - ir : CMR;
            const float *a = ap + ir * kc;
            float *ct = c + ir * ldc + jr;
            if (rows == CMR && cols == CNR) {
                tile_fn(kc, a, b, ct, ldc, accumulate, CMR, CNR);
                continue;
            }
            /* only C's valid part is read: masked loads of the rest fault under emulators */
            memset(local, 0, sizeof local);
            for (int64_t r = 0; accumulate && r < rows; r++)
                memcpy(local + r * CNR, ct + r * ldc, (size_t)cols * sizeof(float));
            tile_fn(kc, a, b, local, CNR, accumulate, (int)rows, (int)cols);
            for (int64_t r = 0; r < rows; r++)
                memcpy(ct + r * ldc, local + r * CNR, (size_t)cols * sizeof(float));
        }
    }
}

static void block_portable(const void *a, const void *b, int64_t mc, int64_t nc, int64_t kc,
                           float *c, int64_t ldc, bool accumulate) {
    convert_block(tile_portable, a, b, mc, nc, kc, c, ldc, accumulate);
}

static const eg__lowp_kernel portable_kernel = {
    .kc = CKC,
    .mc = CMC,
    .nc = CNC,
    .a_bytes = convert_a_bytes,
    .b_bytes = convert_b_bytes,
    .pack_a = pack_a_portable,
    .pack_b = pack_b_portable,
    .block = block_portable,
};

#ifdef EG_LOWP_X86

#define AVX2   __attribute__((target("avx2,fma,f16c")))
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

/* 8 halves at p as f32. */
AVX2 static inline __m256 widen8(bool f16, const uint16_t *p) {
    __m128i h = _mm_loadu_si128((const __m128i *)p);
    return f16 ? _mm256_cvtph_ps(h)
               : _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
/* 4 halves at p as f32. */
AVX2 static inline __m128 widen4(bool f16, const uint16_t *p) {
    __m128i h = _mm_loadl_epi64((const __m128i *)p);
    return f16 ? _mm_cvtph_ps(h) : _mm_castsi128_ps(_mm_slli_epi32(_mm_cvtepu16_epi32(h), 16));
}

/* r[i][j] = r[j][i] for 8 rows of 8 floats. */
AVX2 static inline void transpose8(__m256 r[8]) {
    __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
    r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
    r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
    r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
    r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
    r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
    r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
    r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

/* 8 strided runs of 8 halves (run i at src + i * ld; runs past `count` read as zeros), transposed:
 * dst + t * dst_ld receives element t of each run (the first `width` of them: 8 or 4). */
AVX2 static inline void widen_transpose8(bool f16, const uint16_t *src, int64_t ld, int count,
                                         float *dst, int64_t dst_ld, int width) {
    __m256 r[8];
    for (int i = 0; i < 8; i++) r[i] = i < count ? widen8(f16, src + i * ld) : _mm256_setzero_ps();
    transpose8(r);
    for (int t = 0; t < 8; t++) {
        if (width == 8)
            _mm256_storeu_ps(dst + t * dst_ld, r[t]);
        else
            _mm_storeu_ps(dst + t * dst_ld, _mm256_castps256_ps128(r[t]));
    }
}

AVX2 static void pack_a_avx2(const eg__gemm_lowp *g, int64_t i0, int64_t mc, int64_t p0, int64_t kc,
                             void *out) {
    bool f16 = g->dtype == EG_DTYPE_F16;
    float *o = out;
    for (int64_t ir = 0; ir < mc; ir += CMR, o += kc * CMR) {
        int64_t rows = mc - ir < CMR ? mc - ir : CMR;
        const uint16_t *src = g->a + (i0 + ir) * g->a_row + p0 * g->a_col;
        if (rows == CMR && g->a_row == 1) { /* op(A) column-major: 12 contiguous per k step */
            for (int64_t p = 0; p < kc; p++) {
                const uint16_t *s = src + p * g->a_col;
                _mm256_storeu_ps(o + p * CMR, widen8(f16, s));
                _mm_storeu_ps(o + p * CMR + 8, widen4(f16, s + 8));
            }
        } else if (rows == CMR && g->a_col == 1) { /* row-major: 8 x 8 and 4 x 8 transposes */
            int64_t p = 0;
            for (; p + 8 <= kc; p += 8) {
                widen_transpose8(f16, src + p, g->a_row, 8, o + p * CMR, CMR, 8);
                widen_transpose8(f16, src + 8 * g->a_row + p, g->a_row, 4, o + p * CMR + 8, CMR, 4);
            }
            for (; p < kc; p++)
                for (int r = 0; r < CMR; r++) o[p * CMR + r] = widen(f16, src[r * g->a_row + p]);
        } else {
            pack_a_panel_scalar(g, i0 + ir, rows, p0, kc, o);
        }
    }
}

AVX2 static void pack_b_avx2(const eg__gemm_lowp *g, int64_t p0, int64_t kc, int64_t j0, int64_t nc,
                             void *out) {
    bool f16 = g->dtype == EG_DTYPE_F16;
    float *o = out;
    int64_t full = nc / CNR, jr = 0;
    if (g->b_col == 1 && full > 0) { /* row-major: each row of B read once, left to right */
        for (int64_t p = 0; p < kc; p++) {
            const uint16_t *s = g->b + (p0 + p) * g->b_row + j0;
            for (int64_t q = 0; q < full; q++)
                for (int i = 0; i < CNR / 8; i++)
                    _mm256_storeu_ps(o + q * kc * CNR + p * CNR + i * 8,
                                     widen8(f16, s + q * CNR + i * 8));
        }
        jr = full * CNR;
        o += full * kc * CNR;
    } else if (g->b_row == 1 && full > 0) { /* op(B) = a row-major matrix^T: 8 x 8 transposes */
        for (int64_t q = 0; q < full; q++, o += kc * CNR) {
            const uint16_t *src = g->b + p0 + (j0 + q * CNR) * g->b_col;
            int64_t p = 0;
            for (; p + 8 <= kc; p += 8)
                for (int i = 0; i < CNR / 8; i++)
                    widen_transpose8(f16, src + i * 8 * g->b_col + p, g->b_col, 8,
                                     o + p * CNR + i * 8, CNR, 8);
            for (; p < kc; p++)
                for (int j = 0; j < CNR; j++) o[p * CNR + j] = widen(f16, src[j * g->b_col + p]);
        }
        jr = full * CNR;
    }
    for (; jr < nc; jr += CNR, o += kc * CNR)
        pack_b_panel_scalar(g, p0, kc, j0 + jr, nc - jr < CNR ? nc - jr : CNR, o);
}

/* Six rows by 16 columns of the tile: a at the panel's row r0, b at column c0 (strides CMR, CNR
 * per k step). */
AVX2 static inline __attribute__((always_inline)) void
tile_6x16_avx2(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, bool accumulate) {
    __m256 acc[12];
    for (int r = 0; r < 6; r++) {
        acc[2 * r] = accumulate ? _mm256_loadu_ps(c + r * ldc) : _mm256_setzero_ps();
        acc[2 * r + 1] = accumulate ? _mm256_loadu_ps(c + r * ldc + 8) : _mm256_setzero_ps();
    }
#pragma GCC unroll 2
    for (int64_t p = 0; p < kc; p++) {
        __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
#pragma GCC unroll 6
        for (int r = 0; r < 6; r++) {
            __m256 x = _mm256_broadcast_ss(a + r);
            acc[2 * r] = _mm256_fmadd_ps(x, b0, acc[2 * r]);
            acc[2 * r + 1] = _mm256_fmadd_ps(x, b1, acc[2 * r + 1]);
        }
        a += CMR;
        b += CNR;
    }
    for (int r = 0; r < 6; r++) {
        _mm256_storeu_ps(c + r * ldc, acc[2 * r]);
        _mm256_storeu_ps(c + r * ldc + 8, acc[2 * r + 1]);
    }
}

AVX2 static void tile_avx2(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                           bool accumulate, int rows, int cols) {
    for (int half = 0; half * 16 < cols; half++) /* columns 0..15, then 16..31 (B stays in L1) */
        for (int r = 0; r < rows; r += 6)
            tile_6x16_avx2(kc, a + r, b + half * 16, c + r * ldc + half * 16, ldc, accumulate);
}

/* 12 rows by 16 (halves 1) or 32 (halves 2, a constant once inlined) columns. */
AVX512 static inline __attribute__((always_inline)) void
tile_x16_avx512(int halves, int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                bool accumulate) {
    __m512 acc[2 * CMR];
#pragma GCC unroll 12
    for (int r = 0; r < CMR; r++) {
        acc[2 * r] = accumulate ? _mm512_loadu_ps(c + r * ldc) : _mm512_setzero_ps();
        acc[2 * r + 1] =
            accumulate && halves > 1 ? _mm512_loadu_ps(c + r * ldc + 16) : _mm512_setzero_ps();
    }
#pragma GCC unroll 2
    for (int64_t p = 0; p < kc; p++) {
        __m512 b0 = _mm512_loadu_ps(b), b1 = halves > 1 ? _mm512_loadu_ps(b + 16) : b0;
#pragma GCC unroll 12
        for (int r = 0; r < CMR; r++) {
            __m512 x = _mm512_set1_ps(a[r]);
            acc[2 * r] = _mm512_fmadd_ps(x, b0, acc[2 * r]);
            if (halves > 1) acc[2 * r + 1] = _mm512_fmadd_ps(x, b1, acc[2 * r + 1]);
        }
        a += CMR;
        b += CNR;
    }
#pragma GCC unroll 12
    for (int r = 0; r < CMR; r++) {
        _mm512_storeu_ps(c + r * ldc, acc[2 * r]);
        if (halves > 1) _mm512_storeu_ps(c + r * ldc + 16, acc[2 * r + 1]);
    }
}

AVX512 static void tile_avx512(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                               bool accumulate, int rows, int cols) {
    (void)rows;
    if (cols > 16)
        tile_x16_avx512(2, kc, a, b, c, ldc, accumulate);
    else
        tile_x16_avx512(1, kc, a, b, c, ldc, accumulate);
}

AVX2 static void block_avx2(const void *a, const void *b, int64_t mc, int64_t nc, int64_t kc,
                            float *c, int64_t ldc, bool accumulate) {
    convert_block(tile_avx2, a, b, mc, nc, kc, c, ldc, accumulate);
}

AVX512 static void block_avx512(const void *a, const void *b, int64_t mc, int64_t nc, int64_t kc,
                                float *c, int64_t ldc, bool accumulate) {
    convert_block(tile_avx512, a, b, mc, nc, kc, c, ldc, accumulate);
}

static const eg__lowp_kernel convert_avx2_kernel = {
    .kc = CKC,
    .mc = CMC,
    .nc = CNC,
    .a_bytes = convert_a_bytes,
    .b_bytes = convert_b_bytes,
    .pack_a = pack_a_avx2,
    .pack_b = pack_b_avx2,
    .block = block_avx2,
};

static const eg__lowp_kernel convert_avx512_kernel = {
    .kc = CKC,
    .mc = CMC,
    .nc = CNC,
    .a_bytes = convert_a_bytes,
    .b_bytes = convert_b_bytes,
    .pack_a = pack_a_avx2,
    .pack_b = pack_b_avx2,
    .block = block_avx512,
};

#endif /* EG_LOWP_X86 */

/* ---- paths ---- */

bool eg__gemm_lowp_usable(eg__lowp_path path, eg_dtype dtype) {
    if (dtype != EG_DTYPE_BF16 && dtype != EG_DTYPE_F16) return false;
    eg__cpu_level level = eg__cpu_active_level();
    switch (path) {
    case EG__GEMM_LOWP_AUTO:
    case EG__GEMM_LOWP_PORTABLE:
        return true;
    case EG__GEMM_LOWP_CONVERT:
#ifdef EG_LOWP_X86
        /* f16 widens with F16C (every AVX2 CPU made has it; checked all the same) */
        return level >= EG__CPU_AVX2 && (dtype == EG_DTYPE_BF16 || eg__cpu_has_f16c());
#else
        return false;
#endif
    case EG__GEMM_LOWP_AVX512_BF16:
        return dtype == EG_DTYPE_BF16 && level >= EG__CPU_AVX512 && eg__cpu_has_avx512_bf16() &&
               eg__lowp_avx512_bf16_kernel() != NULL;
    case EG__GEMM_LOWP_AMX:
        return dtype == EG_DTYPE_BF16 && level >= EG__CPU_AVX512 && eg__cpu_has_amx_bf16() &&
               eg__lowp_amx_kernel() != NULL && eg__cpu_amx_usable(NULL);
    default:
        return false;
    }
}

/* Whether vdpbf16ps outruns f32 FMAs on packed f32 (the convert path). On Intel's cores it issues
 * at half the rate of a zmm FMA for twice the multiply-adds, so no faster, and the convert path's
 * 12 x 32 f32 kernel beats the 8 x 32 vdpbf16ps one: Sapphire Rapids, one core, bench_amx,
 * 1024-cube: 98 against 146 GFLOP/s. Elsewhere (AMD's Zen 4 issues it at the FMA rate) it runs
 * where AMX does not, as issue 20 planned; unmeasured here. */
static bool dot_wins;
static void detect_dot_wins(void) {
#ifdef EG_LOWP_X86
    unsigned eax, ebx, ecx, edx;
    if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)) return;
    bool intel = ebx == 0x756e6547u && edx == 0x49656e69u && ecx == 0x6c65746eu; /* GenuineIntel */
    dot_wins = !intel;
#endif
}
/* cpuid once: in a virtual machine each one is a trip to the hypervisor */
static bool dot_product_wins(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, detect_dot_wins);
    return dot_wins;
}

eg__lowp_path eg__gemm_lowp_choose(eg_dtype dtype) {
    if (eg__gemm_lowp_usable(EG__GEMM_LOWP_AMX, dtype)) return EG__GEMM_LOWP_AMX;
    if (eg__gemm_lowp_usable(EG__GEMM_LOWP_AVX512_BF16, dtype) && dot_product_wins())
        return EG__GEMM_LOWP_AVX512_BF16;
    if (eg__gemm_lowp_usable(EG__GEMM_LOWP_CONVERT, dtype)) return EG__GEMM_LOWP_CONVERT;
    return EG__GEMM_LOWP_PORTABLE;
}

const char *eg__gemm_lowp_path_name(eg__lowp_path path) {
    static const char *const names[EG__GEMM_LOWP_PATH_COUNT] = {"auto", "amx", "avx512-bf16",
                                                                "convert", "portable"};
    return (unsigned)path < EG__GEMM_LOWP_PATH_COUNT ? names[path] : "invalid";
}

const char *eg__gemm_lowp_path(eg_dtype dtype) {
    if (dtype != EG_DTYPE_BF16 && dtype != EG_DTYPE_F16) return "none (not a 16-bit float dtype)";
    switch (eg__gemm_lowp_choose(dtype)) {
    case EG__GEMM_LOWP_AMX:
        return "AMX bf16 tiles (tdpbf16ps), f32 accumulation";
    case EG__GEMM_LOWP_AVX512_BF16:
        return "AVX-512 BF16 (vdpbf16ps), f32 accumulation";
    case EG__GEMM_LOWP_CONVERT:
        return eg__cpu_active_level() >= EG__CPU_AVX512
                   ? "converted to f32 while packing, AVX-512 f32 micro-kernel"
                   : "converted to f32 while packing, AVX2/FMA f32 micro-kernel";
    default:
        return "converted to f32 while packing, portable C micro-kernel";
    }
}

static const eg__lowp_kernel *kernel_for(eg__lowp_path path) {
    switch (path) {
    case EG__GEMM_LOWP_AMX:
        return eg__lowp_amx_kernel();
    case EG__GEMM_LOWP_AVX512_BF16:
        return eg__lowp_avx512_bf16_kernel();
#ifdef EG_LOWP_X86
    case EG__GEMM_LOWP_CONVERT:
        return eg__cpu_active_level() >= EG__CPU_AVX512 ? &convert_avx512_kernel
                                                        : &convert_avx2_kernel;
#endif
    default:
        return &portable_kernel;
    }
}

/* ---- the driver ---- */

static bool has_epilogue(const eg__gemm_lowp *g) {
    return g->bias || g->activation != EG__OP_COUNT;
}

const float *eg__lowp_bias(const eg__gemm_lowp *g, eg__lowp_buffers *buf, int64_t j0,
                           int64_t cols) {
    if (!g->bias) return NULL;
    if (g->bias_dtype == EG_DTYPE_F32) {
        const float *b32 = g->bias;
        for (int64_t j = 0; j < cols; j++) buf->bias[j] = b32[(j0 + j) * g->bias_stride];
    } else {
        const uint16_t *b16 = g->bias;
        bool f16 = g->bias_dtype == EG_DTYPE_F16;
        for (int64_t j = 0; j < cols; j++)
            buf->bias[j] = widen(f16, b16[(j0 + j) * g->bias_stride]);
    }
    return buf->bias;
}

void eg__lowp_finish(const eg__gemm_lowp *g, float *cf, int64_t ld, int64_t i0, int64_t rows,
                     int64_t j0, int64_t cols, const float *bias) {
    if (has_epilogue(g)) {
        if (bias)
            eg__gemm_epilogue(EG_DTYPE_F32, (char *)cf, ld, rows, cols, 0, (const char *)bias, 1,
                              g->activation);
        else
            eg__gemm_epilogue(EG_DTYPE_F32, (char *)cf, ld, rows, cols, j0, (const char *)g->bias,
                              g->bias_stride, g->activation);
    }
    if (g->c_dtype == EG_DTYPE_F32) return;
    for (int64_t r = 0; r < rows; r++) {
        uint16_t *out = (uint16_t *)g->c + (i0 + r) * g->ldc + j0;
        if (g->c_dtype == EG_DTYPE_BF16)
            eg_f32_to_bf16(cf + r * ld, out, (size_t)cols);
        else
            eg_f32_to_f16(cf + r * ld, out, (size_t)cols);
    }
}

/* Rows of a chunk whose f32 partial sums (for a 16-bit C) live in the thread's buffer at once:
 * about 2 MiB of them. */
static int64_t chunk_rows(const eg__lowp_kernel *kern, int64_t rows, int64_t nc) {
    int64_t chunk = ((int64_t)1 << 19) / (nc > 0 ? nc : 1) / kern->mc * kern->mc;
    if (chunk < kern->mc) chunk = kern->mc;
    return rows < chunk ? rows : chunk;
}

static bool drive(const eg__gemm_lowp *g, const eg__lowp_kernel *kern, int64_t m0, int64_t m1,
                  int64_t n0, int64_t n1) {
    if (kern->range) return kern->range(g, m0, m1, n0, n1);
    buffers *buf = eg__lowp_thread_buffers();
    if (!buf) return false;
    bool f32_c = g->c_dtype == EG_DTYPE_F32;
    bool has_bias = g->bias != NULL;
    int64_t nc_max = n1 - n0 < kern->nc ? n1 - n0 : kern->nc;
    int64_t kc_max = g->k < kern->kc ? g->k : kern->kc;
    int64_t rows_max = chunk_rows(kern, m1 - m0, nc_max);
    int64_t mc_max = rows_max < kern->mc ? rows_max : kern->mc;
    if (g->k > 0 && (!eg__lowp_reserve(&buf->a, &buf->a_bytes, kern->a_bytes(mc_max, kc_max)) ||
                     !eg__lowp_reserve(&buf->b, &buf->b_bytes, kern->b_bytes(kc_max, nc_max))))
        return false;
    if (!f32_c && !eg__lowp_reserve((void **)&buf->c, &buf->c_bytes,
                                    (size_t)(rows_max * nc_max) * sizeof(float)))
        return false;
    if (has_bias &&
        !eg__lowp_reserve((void **)&buf->bias, &buf->bias_bytes, (size_t)nc_max * sizeof(float)))
        return false;
    for (int64_t r0 = m0; r0 < m1; r0 += rows_max) {
        int64_t rows = m1 - r0 < rows_max ? m1 - r0 : rows_max;
        for (int64_t jc = n0; jc < n1; jc += kern->nc) {
            int64_t nc = n1 - jc < kern->nc ? n1 - jc : kern->nc;
            float *c = f32_c ? (float *)g->c + r0 * g->ldc + jc : buf->c;
            int64_t ldc = f32_c ? g->ldc : nc;
            const float *bias = eg__lowp_bias(g, buf, jc, nc);
            if (g->k == 0) {
                for (int64_t r = 0; r < rows; r++) memset(c + r * ldc, 0, (size_t)nc * 4);
                eg__lowp_finish(g, c, ldc, r0, rows, jc, nc, bias);
                continue;
            }
            for (int64_t pc = 0; pc < g->k; pc += kern->kc) {
                int64_t kc = g->k - pc < kern->kc ? g->k - pc : kern->kc;
                kern->pack_b(g, pc, kc, jc, nc, buf->b);
                for (int64_t ic = 0; ic < rows; ic += kern->mc) {
                    int64_t mc = rows - ic < kern->mc ? rows - ic : kern->mc;
                    kern->pack_a(g, r0 + ic, mc, pc, kc, buf->a);
                    kern->block(buf->a, buf->b, mc, nc, kc, c + ic * ldc, ldc, pc > 0);
                    if (pc + kc == g->k)
                        eg__lowp_finish(g, c + ic * ldc, ldc, r0 + ic, mc, jc, nc, bias);
                }
            }
        }
    }
    if (kern->done) kern->done();
    return true;
}

/* rows x cols of an f32 matrix (element (i, j) at src[i * row + j * col]) rounded to dtype into
 * *out (reserved in the thread's buffer), keeping whichever axis is contiguous contiguous: row-
 * major, or column-major when the source is. *out_row, *out_col: its strides. */
static bool round_operand(eg_dtype dtype, const float *src, int64_t rows, int64_t cols, int64_t row,
                          int64_t col, uint16_t **out, size_t *capacity, int64_t *out_row,
                          int64_t *out_col) {
    size_t n = (size_t)(rows * cols);
    if (!eg__lowp_reserve((void **)out, capacity, (n > 0 ? n : 1) * sizeof(uint16_t))) return false;
    bool column_major = col != 1 && row == 1;
    *out_row = column_major ? 1 : cols;
    *out_col = column_major ? rows : 1;
    void (*round_to)(const float *, uint16_t *, size_t) =
        dtype == EG_DTYPE_BF16 ? eg_f32_to_bf16 : eg_f32_to_f16;
    if (column_major) {
        for (int64_t j = 0; j < cols; j++) round_to(src + j * col, *out + j * rows, (size_t)rows);
    } else if (col == 1) {
        for (int64_t i = 0; i < rows; i++) round_to(src + i * row, *out + i * cols, (size_t)cols);
    } else {
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < cols; j++)
                round_to(src + i * row + j * col, *out + i * cols + j, 1);
    }
    return true;
}

static eg_status range_status(const eg__gemm_lowp *g, int64_t m0, int64_t m1, int64_t n0,
                              int64_t n1);

/* A range with f32 operands: the rows of op(A) and the columns of op(B) it reads, rounded into
 * the thread's buffers, then the range as a sub-problem of those (an element's bits depend only
 * on its row of A, its column of B and k, so they are the whole problem's). */
static eg_status rounded_range(const eg__gemm_lowp *g, int64_t m0, int64_t m1, int64_t n0,
                               int64_t n1) {
    eg__lowp_buffers *buf = eg__lowp_thread_buffers();
    if (!buf) return EG_ERR_OUT_OF_MEMORY;
    eg__gemm_lowp sub = *g;
    sub.m = m1 - m0;
    sub.n = n1 - n0;
    sub.c = (char *)g->c + (size_t)(m0 * g->ldc + n0) * eg_dtype_size(g->c_dtype);
    if (g->bias)
        sub.bias =
            (const char *)g->bias + (size_t)(n0 * g->bias_stride) * eg_dtype_size(g->bias_dtype);
    sub.a32 = sub.b32 = NULL;
    if (g->a32) {
        if (!round_operand(g->dtype, g->a32 + m0 * g->a_row, sub.m, g->k, g->a_row, g->a_col,
                           &buf->a16, &buf->a16_bytes, &sub.a_row, &sub.a_col))
            return EG_ERR_OUT_OF_MEMORY;
        sub.a = buf->a16;
    } else {
        sub.a = g->a + m0 * g->a_row;
    }
    if (g->b32) {
        if (!round_operand(g->dtype, g->b32 + n0 * g->b_col, g->k, sub.n, g->b_row, g->b_col,
                           &buf->b16, &buf->b16_bytes, &sub.b_row, &sub.b_col))
            return EG_ERR_OUT_OF_MEMORY;
        sub.b = buf->b16;
    } else {
        sub.b = g->b + n0 * g->b_col;
    }
    return range_status(&sub, 0, sub.m, 0, sub.n);
}

/* The range without raising (pool threads report through the caller): 0 done, else the status. */
static eg_status range_status(const eg__gemm_lowp *g, int64_t m0, int64_t m1, int64_t n0,
                              int64_t n1) {
    eg__lowp_path path = g->path == EG__GEMM_LOWP_AUTO ? eg__gemm_lowp_choose(g->dtype) : g->path;
    if (!eg__gemm_lowp_usable(path, g->dtype)) return EG_ERR_UNSUPPORTED;
    if (m0 >= m1 || n0 >= n1) return EG_OK;
    if (g->a32 || g->b32) return rounded_range(g, m0, m1, n0, n1);
    return drive(g, kernel_for(path), m0, m1, n0, n1) ? EG_OK : EG_ERR_OUT_OF_MEMORY;
}

static eg_status raise(const eg__gemm_lowp *g, eg_status status) {
    if (status == EG_ERR_UNSUPPORTED)
        return eg__error(status,
                         "matmul: the %s path cannot compute %s products on this CPU "
                         "(EG_CPU=%s)",
                         eg__gemm_lowp_path_name(g->path), eg_dtype_name(g->dtype),
                         eg__cpu_level_name(eg__cpu_active_level()));
    return eg__error(status, "matmul: no memory for the %s packing buffers",
                     eg_dtype_name(g->dtype));
}

bool eg__gemm_lowp_range(const eg__gemm_lowp *g, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
    eg_status status = range_status(g, m0, m1, n0, n1);
    if (status != EG_OK) raise(g, status);
    return status == EG_OK;
}

/* ---- the whole product over the thread pool ---- */

/* Multiply-adds per part from which a product is split among the threads (as matmul.c's f32). */
#define MIN_PART_WORK (1 << 19)

typedef struct run_job {
    const eg__gemm_lowp *g;
    int64_t parts_n, part_rows, part_cols;
    _Atomic int status;
} run_job;

static void run_parts(void *context, int64_t begin, int64_t end) {
    run_job *j = context;
    for (int64_t part = begin; part < end; part++) {
        int64_t m0 = part / j->parts_n * j->part_rows, n0 = part % j->parts_n * j->part_cols;
        int64_t m1 = m0 + j->part_rows < j->g->m ? m0 + j->part_rows : j->g->m;
        int64_t n1 = n0 + j->part_cols < j->g->n ? n0 + j->part_cols : j->g->n;
        eg_status status = range_status(j->g, m0, m1, n0, n1);
        if (status != EG_OK) atomic_store(&j->status, (int)status);
    }
}

eg_status eg__gemm_lowp_run(const eg__gemm_lowp *g) {
    if (g->m <= 0 || g->n <= 0) return EG_OK;
    int64_t work = g->m * g->n * (g->k > 0 ? g->k : 1);
    int64_t parts = eg__num_threads();
    if (parts > work / MIN_PART_WORK) parts = work / MIN_PART_WORK;
    if (parts < 1) parts = 1;
    /* along the longer side of C, in whole micro-tiles */
    int64_t tiles_m = (g->m + EG_GEMM_LOWP_MR - 1) / EG_GEMM_LOWP_MR;
    int64_t tiles_n = (g->n + EG_GEMM_LOWP_NR - 1) / EG_GEMM_LOWP_NR;
    run_job job = {.g = g, .part_rows = g->m, .part_cols = g->n};
    int64_t parts_m = 1;
    job.parts_n = 1;
    if (tiles_n >= tiles_m) {
        if (parts > tiles_n) parts = tiles_n;
        job.part_cols = (tiles_n + parts - 1) / parts * EG_GEMM_LOWP_NR;
        job.parts_n = (g->n + job.part_cols - 1) / job.part_cols;
    } else {
        if (parts > tiles_m) parts = tiles_m;
        job.part_rows = (tiles_m + parts - 1) / parts * EG_GEMM_LOWP_MR;
        parts_m = (g->m + job.part_rows - 1) / job.part_rows;
    }
    atomic_init(&job.status, (int)EG_OK);
    eg__parallel_for(parts_m * job.parts_n, 1, run_parts, &job);
    eg_status status = (eg_status)atomic_load(&job.status);
    return status == EG_OK ? EG_OK : raise(g, status);
}
