/* bf16 products on AMX tiles (tdpbf16ps) and on AVX-512 BF16 (vdpbf16ps), both summing in f32,
 * as kernels of gemm_lowp.c's blocked driver (gemm_lowp_internal.h).
 *
 * Both read the same packed operands. B in panels of 16 columns, k in pairs: pair-row w of a
 * panel holds (B[2w][j], B[2w + 1][j]) for j = 0..15, 64 bytes, so 16 pair-rows are one AMX B
 * tile and one pair-row is one vdpbf16ps operand. A in groups of 16 rows, each a run of AMX A
 * tiles (16 rows x 32 k, 1 KiB) along k, so a row's k pair is also one dword to broadcast. k is
 * padded with zeros to a multiple of 32, rows and columns to multiples of 16.
 *
 * AMX: 2 x 2 accumulator tiles (32 x 32 of C) take the other four tile registers for two A and
 * two B tiles: four tile loads per four tdpbf16ps, whatever the blocking. A 32-column
 * micro-panel of B (kc = 256: 16 KiB) stays in L1 while the row blocks of A stream past it
 * from L2. An element's f32 sum goes on where the previous k block left it (its tile reloads
 * the stored partial sum exactly), so the blocking never changes the bits; tdpbf16ps treats
 * bf16 subnormal inputs as zero and flushes subnormal results (the format's own bound still
 * holds up to 2^-126 per product).
 *
 * Only entered after eg__cpu_amx_usable (the kernel granted the tile state; without it the
 * first tile instruction raises SIGILL) and eg__cpu_has_avx512_bf16 respectively. */
#include <stdint.h>
#include <string.h>
#include <x86intrin.h>

#include "backend/cpu/gemm.h"
#include "backend/cpu/gemm_lowp_internal.h"
#include "base/cpu_features.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define AVX512   __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))
#define AVX512BF __attribute__((target("avx512bf16,avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))
#define AMX      __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512dq,avx2")))

#define KSTEP 32  /* k per tile (16 pairs) */
#define KC    256 /* k per block: a 32-row A micro-panel is 16 KiB (L1) */
#define MC    256 /* rows per A block */
#define NC    128 /* columns per C block: 256 x 128 f32 partial sums, 128 KiB (L2) */

static int64_t padded_k(int64_t kc) {
    return (kc + KSTEP - 1) / KSTEP * KSTEP;
}
static size_t a_bytes(int64_t mc, int64_t kc) {
    return (size_t)((mc + 15) / 16 * 16 * padded_k(kc)) * sizeof(uint16_t);
}
static size_t b_bytes(int64_t kc, int64_t nc) {
    return (size_t)((nc + 15) / 16 * 16 * padded_k(kc)) * sizeof(uint16_t);
}

/* r[i] dword j = r[j] dword i, for 16 vectors of 16 dwords. */
AVX512 static inline void transpose16(__m512i r[16]) {
    __m512i t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    /* r[4 G + c], lane L: column 4 L + c of rows 4 G .. 4 G + 3 */
    for (int g = 0; g < 4; g++) {
        r[4 * g] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
        r[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
        r[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
        r[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
    }
    for (int c = 0; c < 4; c++) {
        t[c] = _mm512_shuffle_i32x4(r[c], r[4 + c], 0x88);
        t[4 + c] = _mm512_shuffle_i32x4(r[c], r[4 + c], 0xdd);
        t[8 + c] = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0x88);
        t[12 + c] = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0xdd);
    }
    for (int c = 0; c < 4; c++) {
        r[c] = _mm512_shuffle_i32x4(t[c], t[8 + c], 0x88);
        r[8 + c] = _mm512_shuffle_i32x4(t[c], t[8 + c], 0xdd);
        r[4 + c] = _mm512_shuffle_i32x4(t[4 + c], t[12 + c], 0x88);
        r[12 + c] = _mm512_shuffle_i32x4(t[4 + c], t[12 + c], 0xdd);
    }
}

/* The first n (0..32) halves at p, the rest zero. */
AVX512 static inline __m512i load_halves(const uint16_t *p, int64_t n) {
    if (n >= 32) return _mm512_loadu_si512(p);
    if (n <= 0) return _mm512_setzero_si512();
    return _mm512_maskz_loadu_epi16((__mmask32)((1u << n) - 1), p);
}
AVX512 static inline __m256i load_halves16(const uint16_t *p, int64_t n) {
    if (n >= 16) return _mm256_loadu_si256((const __m256i *)p);
    if (n <= 0) return _mm256_setzero_si256();
    return _mm256_maskz_loadu_epi16((__mmask16)((1u << n) - 1), p);
}

/* ---- packing A: groups of 16 rows, each kp / 32 tiles of 16 rows x 32 k ---- */

AVX512 static void pack_a(const eg__gemm_lowp *g, int64_t i0, int64_t mc, int64_t p0, int64_t kc,
                          void *out) {
    int64_t kp = padded_k(kc);
    uint16_t *o = out;
    for (int64_t ig = 0; ig < mc; ig += 16, o += 16 * kp) {
        int64_t rows = mc - ig < 16 ? mc - ig : 16;
        const uint16_t *src = g->a + (i0 + ig) * g->a_row + p0 * g->a_col;
        if (g->a_col == 1) { /* row-major: each tile row is 32 consecutive k of one row */
            for (int64_t s = 0; s < kp; s += KSTEP)
                for (int64_t r = 0; r < 16; r++)
                    _mm512_storeu_si512(o + s * 16 + r * KSTEP,
                                        r < rows ? load_halves(src + r * g->a_row + s, kc - s)
                                                 : _mm512_setzero_si512());
        } else if (g->a_row == 1) { /* column-major: interleave k pairs, then transpose */
            const __m512i interleave =
                _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23,
                                 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
            for (int64_t s = 0; s < kp; s += KSTEP) {
                __m512i v[16]; /* v[w] dword i: (A[i][s + 2w], A[i][s + 2w + 1]) */
                for (int w = 0; w < 16; w++) {
                    int64_t p = s + 2 * w;
                    __m256i lo =
                        p < kc ? load_halves16(src + p * g->a_col, rows) : _mm256_setzero_si256();
                    __m256i hi = p + 1 < kc ? load_halves16(src + (p + 1) * g->a_col, rows)
                                            : _mm256_setzero_si256();
                    v[w] = _mm512_permutexvar_epi16(
                        interleave, _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1));
                }
                transpose16(v);
                for (int r = 0; r < 16; r++) _mm512_storeu_si512(o + s * 16 + r * KSTEP, v[r]);
            }
        } else {
            for (int64_t s = 0; s < kp; s += KSTEP)
                for (int64_t r = 0; r < 16; r++)
                    for (int64_t q = 0; q < KSTEP; q++)
                        o[s * 16 + r * KSTEP + q] =
                            r < rows && s + q < kc ? src[r * g->a_row + (s + q) * g->a_col] : 0;
        }
    }
}

/* ---- packing B: panels of 16 columns, pair-rows of 16 x (k even, k odd) ---- */

AVX512 static void pack_b(const eg__gemm_lowp *g, int64_t p0, int64_t kc, int64_t j0, int64_t nc,
                          void *out) {
    int64_t kp = padded_k(kc);
    uint16_t *o = out;
    if (g->b_col == 1) { /* row-major: two rows of 32 columns make two panels' pair-rows */
        const __m512i lo_idx =
            _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7,
                             38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
        const __m512i hi_idx =
            _mm512_set_epi16(63, 31, 62, 30, 61, 29, 60, 28, 59, 27, 58, 26, 57, 25, 56, 24, 55, 23,
                             54, 22, 53, 21, 52, 20, 51, 19, 50, 18, 49, 17, 48, 16);
        /* panel pair by panel pair, so that the stores run through each panel in order (row by
         * row of B, they went to 2 x nc / 32 places 16 KiB apart: packing took twice as long) */
        for (int64_t jr = 0; jr < nc; jr += 32) {
            int64_t cols = nc - jr;
            uint16_t *panel = o + jr / 16 * 16 * kp;
            const uint16_t *r0 = g->b + p0 * g->b_row + j0 + jr;
            for (int64_t w = 0; w < kp / 2; w++, r0 += 2 * g->b_row, panel += 32) {
                int64_t p = 2 * w;
                __m512i x0 = p < kc ? load_halves(r0, cols) : _mm512_setzero_si512();
                __m512i x1 = p + 1 < kc ? load_halves(r0 + g->b_row, cols) : _mm512_setzero_si512();
                _mm512_storeu_si512(panel, _mm512_permutex2var_epi16(x0, lo_idx, x1));
                if (cols > 16)
                    _mm512_storeu_si512(panel + 16 * kp, _mm512_permutex2var_epi16(x0, hi_idx, x1));
            }
        }
    } else if (g->b_row == 1) { /* column-major: a column's k pair is one dword: transpose */
        for (int64_t jr = 0; jr < nc; jr += 16, o += 16 * kp) {
            int64_t cols = nc - jr < 16 ? nc - jr : 16;
            const uint16_t *src = g->b + p0 + (j0 + jr) * g->b_col;
            for (int64_t s = 0; s < kp; s += KSTEP) {
                __m512i v[16]; /* v[j] dword w: (B[s + 2w][j], B[s + 2w + 1][j]) */
                for (int j = 0; j < 16; j++)
                    v[j] = j < cols ? load_halves(src + j * g->b_col + s, kc - s)
                                    : _mm512_setzero_si512();
                transpose16(v);
                for (int w = 0; w < 16; w++) _mm512_storeu_si512(o + (s / 2 + w) * 32, v[w]);
            }
        }
    } else {
        for (int64_t jr = 0; jr < nc; jr += 16, o += 16 * kp)
            for (int64_t w = 0; w < kp / 2; w++)
                for (int64_t j = 0; j < 16; j++)
                    for (int h = 0; h < 2; h++) {
                        int64_t p = 2 * w + h;
                        o[w * 32 + j * 2 + h] =
                            jr + j < nc && p < kc
                                ? g->b[(p0 + p) * g->b_row + (j0 + jr + j) * g->b_col]
                                : 0;
                    }
    }
}

/* ---- AMX ---- */

typedef struct tile_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

/* Tiles 0..3: C (2 x 2 of 16 x 16 f32), 4, 5: A (16 rows x 32 bf16), 6, 7: B (16 pair-rows). */
static const tile_config config __attribute__((aligned(64))) = {
    .palette = 1,
    .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16, 16, 16},
};

/* Where the last k block's results go: the epilogue (bias, an f32 copy of the block's columns
 * from j0, contiguous; relu inline; other activations through eg__gemm_epilogue on the tile),
 * then C in its dtype. */
typedef struct sink {
    const eg__gemm_lowp *g;
    int64_t j0;
    const float *bias;
    bool relu, other, vcvt;
} sink;

/* 16 f32 to bf16, round to nearest even; a NaN keeps its sign and top payload bits, quieted: the
 * integer steps of eg_f32_to_bf16, so the same bits. */
AVX512 static inline __m256i bf16_of(__m512 v) {
    __m512i x = _mm512_castps_si512(v), hi = _mm512_srli_epi32(x, 16);
    __m512i odd = _mm512_and_si512(hi, _mm512_set1_epi32(1));
    __m512i rounded = _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), odd), 16);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
    rounded = _mm512_mask_mov_epi32(rounded, nan, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
    return _mm512_cvtepi32_epi16(rounded);
}

/* 32 f32 (lo, hi) to bf16 with vcvtne2ps2bf16, which rounds as bf16_of does (nearest even, NaN
 * quieted keeping its top bits) except that it flushes subnormal inputs to zero: vectors holding
 * one (rare: below 2^-126) take bf16_of instead, so the bits stay eg_f32_to_bf16's. A quarter of
 * bf16_of's instructions: this conversion was a fifth of a 256-cube product's time. */
AVX512BF static inline __m512i bf16_of_pair(__m512 lo, __m512 hi) {
    const __m512 tiny = _mm512_set1_ps(0x1p-126f);
    __m512 alo = _mm512_abs_ps(lo), ahi = _mm512_abs_ps(hi);
    __mmask16 sub_lo = _mm512_cmp_ps_mask(alo, tiny, _CMP_LT_OQ) &
                       _mm512_cmp_ps_mask(alo, _mm512_setzero_ps(), _CMP_NEQ_UQ);
    __mmask16 sub_hi = _mm512_cmp_ps_mask(ahi, tiny, _CMP_LT_OQ) &
                       _mm512_cmp_ps_mask(ahi, _mm512_setzero_ps(), _CMP_NEQ_UQ);
    if (__builtin_expect((sub_lo | sub_hi) != 0, 0))
        return _mm512_inserti64x4(_mm512_castsi256_si512(bf16_of(lo)), bf16_of(hi), 1);
    return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

/* A finished tile (f32, row stride 32; rows x cols valid) into C at problem row i, column j. */
AVX512BF static void emit_tile(const sink *s, const float *tile, int64_t i, int64_t j, int rows,
                               int cols) {
    const eg__gemm_lowp *g = s->g;
    const __m512 zero = _mm512_setzero_ps();
    const float *bias = s->bias && !s->other ? s->bias + (j - s->j0) : NULL;
    __mmask16 m0 = cols >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << cols) - 1);
    __mmask16 m1 = cols >= 32  ? (__mmask16)0xffff
                   : cols > 16 ? (__mmask16)((1u << (cols - 16)) - 1)
                               : 0;
    __m512 b0 = bias ? _mm512_maskz_loadu_ps(m0, bias) : zero;
    __m512 b1 = bias ? _mm512_maskz_loadu_ps(m1, bias + 16) : zero;
    for (int r = 0; r < rows; r++) {
        __m512 lo = _mm512_loadu_ps(tile + r * 32), hi = _mm512_loadu_ps(tile + r * 32 + 16);
        if (bias) {
            lo = _mm512_add_ps(lo, b0);
            hi = _mm512_add_ps(hi, b1);
        }
        if (s->relu) { /* EG__RELU: NaN stays */
            lo = _mm512_mask_mov_ps(lo, _mm512_cmp_ps_mask(lo, zero, _CMP_LE_OQ), zero);
            hi = _mm512_mask_mov_ps(hi, _mm512_cmp_ps_mask(hi, zero, _CMP_LE_OQ), zero);
        }
        int64_t at = (i + r) * g->ldc + j;
        if (g->c_dtype == EG_DTYPE_F32) {
            _mm512_mask_storeu_ps((float *)g->c + at, m0, lo);
            if (m1) _mm512_mask_storeu_ps((float *)g->c + at + 16, m1, hi);
        } else if (s->vcvt) {
            _mm512_mask_storeu_epi16((uint16_t *)g->c + at, (__mmask32)m0 | (__mmask32)m1 << 16,
                                     bf16_of_pair(lo, hi));
        } else {
            _mm256_mask_storeu_epi16((uint16_t *)g->c + at, m0, bf16_of(lo));
            if (m1) _mm256_mask_storeu_epi16((uint16_t *)g->c + at + 16, m1, bf16_of(hi));
        }
    }
}

/* One 32 x 32 (or 16-row / 16-column) tile of C [continued from src, row stride src_ld] into dst
 * (row stride dst_ld). The tile numbers are immediates, so each shape is its own code. */
#define AMX_TILE(TWO_ROWS, TWO_COLS)                                                               \
    do {                                                                                           \
        int64_t in = src_ld * (int64_t)sizeof(float), out = dst_ld * (int64_t)sizeof(float);       \
        if (accumulate) {                                                                          \
            _tile_loadd(0, src, in);                                                               \
            if (TWO_COLS) _tile_loadd(1, src + 16, in);                                            \
            if (TWO_ROWS) _tile_loadd(2, src + 16 * src_ld, in);                                   \
            if (TWO_ROWS && TWO_COLS) _tile_loadd(3, src + 16 * src_ld + 16, in);                  \
        } else {                                                                                   \
            _tile_zero(0);                                                                         \
            if (TWO_COLS) _tile_zero(1);                                                           \
            if (TWO_ROWS) _tile_zero(2);                                                           \
            if (TWO_ROWS && TWO_COLS) _tile_zero(3);                                               \
        }                                                                                          \
        for (int64_t s = 0; s < kp; s += KSTEP) {                                                  \
            _tile_loadd(4, a0 + s * 16, 64);                                                       \
            _tile_loadd(6, b0 + s * 16, 64);                                                       \
            if (TWO_ROWS) _tile_loadd(5, a1 + s * 16, 64);                                         \
            if (TWO_COLS) _tile_loadd(7, b1 + s * 16, 64);                                         \
            _tile_dpbf16ps(0, 4, 6);                                                               \
            if (TWO_COLS) _tile_dpbf16ps(1, 4, 7);                                                 \
            if (TWO_ROWS) _tile_dpbf16ps(2, 5, 6);                                                 \
            if (TWO_ROWS && TWO_COLS) _tile_dpbf16ps(3, 5, 7);                                     \
        }                                                                                          \
        _tile_stored(0, dst, out);                                                                 \
        if (TWO_COLS) _tile_stored(1, dst + 16, out);                                              \
        if (TWO_ROWS) _tile_stored(2, dst + 16 * dst_ld, out);                                     \
        if (TWO_ROWS && TWO_COLS) _tile_stored(3, dst + 16 * dst_ld + 16, out);                    \
    } while (0)

AMX static void amx_tile(int two_rows, int two_cols, int64_t kp, const uint16_t *a0,
                         const uint16_t *a1, const uint16_t *b0, const uint16_t *b1,
                         const float *src, int64_t src_ld, bool accumulate, float *dst,
                         int64_t dst_ld) {
    if (two_rows && two_cols)
        AMX_TILE(1, 1);
    else if (two_rows)
        AMX_TILE(1, 0);
    else if (two_cols)
        AMX_TILE(0, 1);
    else
        AMX_TILE(0, 0);
}

/* A finished tile of C (f32, row stride 32; rows x cols valid) at problem row i, column j. */
typedef struct finished {
    const float *tile;
    int64_t i, j;
    int rows, cols;
} finished;

/* Its epilogue, then into C. */
AVX512BF static void finish_tile(const sink *out, const finished *t) {
    if (out->other)
        eg__gemm_epilogue(EG_DTYPE_F32, (char *)t->tile, 32, t->rows, t->cols, 0,
                          (const char *)(out->bias ? out->bias + (t->j - out->j0) : NULL), 1,
                          out->g->activation);
    emit_tile(out, t->tile, t->i, t->j, t->rows, t->cols);
}

/* C block (mc x nc, f32 partial sums at c, row stride ldc) [continued] from the packed A block ap
 * and B panel bp over kc: each 32-column micro-panel of B (16 KiB at kc = 256) stays in L1 while
 * the A block streams past from L2. With out (the last k block), the results go to C through
 * out instead of back to c. The tile configuration must be loaded. */
AMX static void amx_tiles(const uint16_t *ap, const uint16_t *bp, int64_t mc, int64_t nc,
                          int64_t kc, float *c, int64_t ldc, bool accumulate, int64_t i0,
                          const sink *out, const char *next_b, int64_t next_bytes) {
    int64_t kp = padded_k(kc);
    float local[3][32 * 32] __attribute__((aligned(64)));
    finished pend = {0};
    int which = 0;
    /* the next block's B comes from L3: it is fetched into L2 a slice per tile of this block
     * (tile loads train no prefetcher in time: bench_amx, 1024-cube, +8 %) */
    int64_t tiles = (mc + 31) / 32 * ((nc + 31) / 32), slice = (next_bytes / tiles + 63) / 64 * 64;
    int64_t fetched = 0;
    for (int64_t jr = 0; jr < nc; jr += 32) {
        int64_t cols = nc - jr < 32 ? nc - jr : 32;
        const uint16_t *b0 = bp + jr * kp, *b1 = b0 + 16 * kp;
        for (int64_t ir = 0; ir < mc; ir += 32) {
            int64_t rows = mc - ir < 32 ? mc - ir : 32;
            const uint16_t *a0 = ap + ir * kp, *a1 = a0 + 16 * kp;
            float *ct = c + ir * ldc + jr;
            int two_rows = rows > 16, two_cols = cols > 16;
            for (int64_t end = fetched + slice; fetched < end && fetched < next_bytes;
                 fetched += 64)
                _mm_prefetch(next_b + fetched, _MM_HINT_T1);
            bool whole = rows % 16 == 0 && cols % 16 == 0;
            /* partial tiles start from (and, not last, end in) a local copy of their valid part */
            float *edge = local[2];
            if (!whole && accumulate) {
                memset(edge, 0, 32 * 32 * sizeof(float)); /* only C's valid part is read */
                for (int64_t r = 0; r < rows; r++)
                    memcpy(edge + r * 32, ct + r * ldc, (size_t)cols * sizeof(float));
            }
            const float *src = whole ? ct : edge;
            int64_t src_ld = whole ? ldc : 32;
            if (!out) {
                amx_tile(two_rows, two_cols, kp, a0, a1, b0, b1, src, src_ld, accumulate,
                         whole ? ct : edge, whole ? ldc : 32);
                if (!whole)
                    for (int64_t r = 0; r < rows; r++)
                        memcpy(ct + r * ldc, edge + r * 32, (size_t)cols * sizeof(float));
                continue;
            }
            /* the previous tile goes out after this one's chain is issued: its vector work
             * then runs beside the tdpbf16ps (emitted right away, it waited for them) */
            float *tile = local[which];
            amx_tile(two_rows, two_cols, kp, a0, a1, b0, b1, src, src_ld, accumulate, tile, 32);
            if (pend.tile) finish_tile(out, &pend);
            pend = (finished){tile, i0 + ir, out->j0 + jr, (int)rows, (int)cols};
            which ^= 1;
        }
    }
    if (pend.tile) finish_tile(out, &pend);
}

/* The AMX loops. AMX consumes a 1 KiB tile every 16 cycles per operand pair, so where the
 * operands and the f32 partial sums come from decides its speed (bench_amx): the partial sums of
 * a C block must stay in L2 across the k blocks (from L3 they halved the speed), and packing must
 * happen once. So B is packed once for the whole range (up to B_CAP bytes of it at a time), A
 * once per row block for all of k, and each C block (MC x NC f32, 256 KiB, contiguous: C's own
 * rows, a power of two apart, collide in L2's sets) runs through every k block before the next;
 * the last one writes C. */
#define B_CAP ((int64_t)16 << 20)

AMX static bool amx_range(const eg__gemm_lowp *g, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
    eg__lowp_buffers *buf = eg__lowp_thread_buffers();
    if (!buf) return false;
    int64_t k = g->k, k_blocks = (k + KC - 1) / KC;
    int64_t kp_total = k > 0 ? (k_blocks - 1) * KC + padded_k(k - (k_blocks - 1) * KC) : 0;
    int64_t chunk = kp_total > 0 ? B_CAP / (kp_total * 2) / NC * NC : NC;
    if (chunk < NC) chunk = NC;
    if (chunk > n1 - n0) chunk = n1 - n0;
    int64_t mc_max = m1 - m0 < MC ? m1 - m0 : MC, nc_max = n1 - n0 < NC ? n1 - n0 : NC;
    int64_t b_stride = NC * kp_total; /* halves from one NC-column panel group to the next */
    size_t b_need = (size_t)((chunk + NC - 1) / NC * b_stride) * sizeof(uint16_t);
    size_t a_need = (size_t)((mc_max + 15) / 16 * 16 * kp_total) * sizeof(uint16_t);
    if (!eg__lowp_reserve(&buf->a, &buf->a_bytes, a_need + 64) ||
        !eg__lowp_reserve(&buf->b, &buf->b_bytes, b_need + 64) ||
        !eg__lowp_reserve((void **)&buf->c, &buf->c_bytes,
                          (size_t)(mc_max * nc_max) * sizeof(float)) ||
        (g->bias &&
         !eg__lowp_reserve((void **)&buf->bias, &buf->bias_bytes, (size_t)nc_max * sizeof(float))))
        return false;
    uint16_t *abuf = buf->a, *bbuf = buf->b;
    bool relu = g->activation == EG__OP_RELU;
    bool other = g->activation != EG__OP_COUNT && !relu;
    bool vcvt = eg__cpu_has_avx512_bf16();
    if (k == 0) { /* C = epilogue(0) */
        for (int64_t jc = n0; jc < n1; jc += NC) {
            int64_t nc = n1 - jc < NC ? n1 - jc : NC;
            for (int64_t ic = m0; ic < m1; ic += MC) {
                int64_t mc = m1 - ic < MC ? m1 - ic : MC;
                memset(buf->c, 0, (size_t)(mc * nc) * sizeof(float));
                eg__lowp_finish(g, buf->c, nc, ic, mc, jc, nc, eg__lowp_bias(g, buf, jc, nc));
            }
        }
        return true;
    }
    _tile_loadconfig(&config);
    for (int64_t n_start = n0; n_start < n1; n_start += chunk) {
        int64_t n_end = n1 - n_start < chunk ? n1 : n_start + chunk;
        for (int64_t jc = n_start; jc < n_end; jc += NC) {
            int64_t nc = n_end - jc < NC ? n_end - jc : NC;
            uint16_t *panels = bbuf + (jc - n_start) / NC * b_stride;
            for (int64_t pc = 0; pc < k; pc += KC)
                pack_b(g, pc, k - pc < KC ? k - pc : KC, jc, nc, panels + pc * NC);
        }
        for (int64_t ic = m0; ic < m1; ic += MC) {
            int64_t mc = m1 - ic < MC ? m1 - ic : MC, rows16 = (mc + 15) / 16 * 16;
            /* packed, not read where it lies: tiles loading 16 rows of a row-major A (2 KiB and
             * more apart) took the 1024-cube from 1,000 to 740 GFLOP/s (bench_amx) */
            for (int64_t pc = 0; pc < k; pc += KC)
                pack_a(g, ic, mc, pc, k - pc < KC ? k - pc : KC, abuf + pc * rows16);
            for (int64_t jc = n_start; jc < n_end; jc += NC) {
                int64_t nc = n_end - jc < NC ? n_end - jc : NC;
                const uint16_t *panels = bbuf + (jc - n_start) / NC * b_stride;
                sink out = {g, jc, eg__lowp_bias(g, buf, jc, nc), relu, other, vcvt};
                for (int64_t pc = 0; pc < k; pc += KC) {
                    int64_t kc = k - pc < KC ? k - pc : KC;
                    /* the B block after this one: the next k block, else the next panel group,
                     * else the first of the next row block */
                    const uint16_t *next = pc + KC < k       ? panels + (pc + KC) * NC
                                           : jc + NC < n_end ? panels + b_stride
                                                             : bbuf;
                    int64_t next_kc =
                        pc + KC < k ? (k - pc - KC < KC ? k - pc - KC : KC) : (k < KC ? k : KC);
                    amx_tiles(abuf + pc * rows16, panels + pc * NC, mc, nc, kc, buf->c, nc, pc > 0,
                              ic, pc + KC >= k ? &out : NULL, (const char *)next,
                              NC * padded_k(next_kc) * 2);
                }
            }
        }
    }
    _tile_release();
    return true;
}

static const eg__lowp_kernel amx_kernel = {
    .kc = KC,
    .mc = MC,
    .nc = NC,
    .range = amx_range,
};

const eg__lowp_kernel *eg__lowp_amx_kernel(void) {
    return &amx_kernel;
}

/* ---- AVX-512 BF16: 8 rows x 32 columns in 16 zmm accumulators ---- */

/* Rows r0.. (8, within one 16-row group of A at ag) by the two B panels at b0, b1, over pairs
 * [0, pairs), into c [continued]. Row r's pair w is the dword at ag + (w / 16) * 512 + r * 32 +
 * (w % 16) * 2. */
AVX512BF static inline __attribute__((always_inline)) void
dp_tile(int64_t pairs, const uint16_t *ag, const uint16_t *b0, const uint16_t *b1, float *c,
        int64_t ldc, bool accumulate) {
    __m512 acc[16];
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) {
        acc[2 * r] = accumulate ? _mm512_loadu_ps(c + r * ldc) : _mm512_setzero_ps();
        acc[2 * r + 1] = accumulate ? _mm512_loadu_ps(c + r * ldc + 16) : _mm512_setzero_ps();
    }
    for (int64_t w0 = 0; w0 < pairs; w0 += 16) {
        const uint16_t *a = ag + w0 / 16 * 512;
        int64_t count = pairs - w0 < 16 ? pairs - w0 : 16;
#pragma GCC unroll 2
        for (int64_t w = 0; w < count; w++) {
            __m512bh x0 = (__m512bh)_mm512_loadu_si512(b0 + (w0 + w) * 32);
            __m512bh x1 = (__m512bh)_mm512_loadu_si512(b1 + (w0 + w) * 32);
#pragma GCC unroll 8
            for (int r = 0; r < 8; r++) {
                int32_t pair;
                memcpy(&pair, a + r * 32 + w * 2, sizeof pair);
                __m512bh y = (__m512bh)_mm512_set1_epi32(pair);
                acc[2 * r] = _mm512_dpbf16_ps(acc[2 * r], y, x0);
                acc[2 * r + 1] = _mm512_dpbf16_ps(acc[2 * r + 1], y, x1);
            }
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) {
        _mm512_storeu_ps(c + r * ldc, acc[2 * r]);
        _mm512_storeu_ps(c + r * ldc + 16, acc[2 * r + 1]);
    }
}

AVX512BF static void dp_tile_fn(int64_t pairs, const uint16_t *ag, const uint16_t *b0,
                                const uint16_t *b1, float *c, int64_t ldc, bool accumulate) {
    dp_tile(pairs, ag, b0, b1, c, ldc, accumulate);
}

AVX512BF static void dp_block(const void *ap, const void *bp, int64_t mc, int64_t nc, int64_t kc,
                              float *c, int64_t ldc, bool accumulate) {
    int64_t kp = padded_k(kc), pairs = (kc + 1) / 2;
    float local[8 * 32] __attribute__((aligned(64)));
    for (int64_t jr = 0; jr < nc; jr += 32) {
        int64_t cols = nc - jr < 32 ? nc - jr : 32;
        const uint16_t *b0 = (const uint16_t *)bp + jr * kp;
        /* a lone 16-column panel reads itself twice (its second half is discarded) */
        const uint16_t *b1 = cols > 16 ? b0 + 16 * kp : b0;
        for (int64_t ir = 0; ir < mc; ir += 8) {
            int64_t rows = mc - ir < 8 ? mc - ir : 8;
            const uint16_t *ag = (const uint16_t *)ap + ir / 16 * 16 * kp + ir % 16 * 32;
            float *ct = c + ir * ldc + jr;
            if (rows == 8 && cols == 32) {
                dp_tile_fn(pairs, ag, b0, b1, ct, ldc, accumulate);
                continue;
            }
            if (accumulate) {
                memset(local, 0, sizeof local); /* only C's valid part is read */
                for (int64_t r = 0; r < rows; r++)
                    memcpy(local + r * 32, ct + r * ldc, (size_t)cols * sizeof(float));
            }
            dp_tile_fn(pairs, ag, b0, b1, local, 32, accumulate);
            for (int64_t r = 0; r < rows; r++)
                memcpy(ct + r * ldc, local + r * 32, (size_t)cols * sizeof(float));
        }
    }
}

static const eg__lowp_kernel dp_kernel = {
    .kc = KC,
    .mc = MC,
    .nc = NC,
    .a_bytes = a_bytes,
    .b_bytes = b_bytes,
    .pack_a = pack_a,
    .pack_b = pack_b,
    .block = dp_block,
};

const eg__lowp_kernel *eg__lowp_avx512_bf16_kernel(void) {
    return &dp_kernel;
}

#else /* no AMX or AVX-512 BF16 outside x86-64 */

const eg__lowp_kernel *eg__lowp_amx_kernel(void) {
    return NULL;
}
const eg__lowp_kernel *eg__lowp_avx512_bf16_kernel(void) {
    return NULL;
}

#endif
