/* bf16 NHWC convolutions of stride 1 on AMX tiles (tdpbf16ps: f32 sums of bf16 products): the
 * forward (and so the stride-1 input gradient, a flipped-filter forward: conv_lowp.c) and the
 * filter gradient. Every output is summed in f32 and rounded to bf16 once (round to nearest
 * even, NaN kept quiet: eg_f32_to_bf16's rule).
 *
 * This file is compiled with AMX, AVX-512 and AVX512-BF16 flags (CMakeLists.txt); the library
 * itself targets baseline x86-64, so conv_lowp.c calls in here only at the dispatch level
 * EG__CPU_AVX512, on a CPU with AVX512-BF16 and with the tile state granted
 * (eg__cpu_amx_usable). Each task loads its tile configuration and
 * releases the tiles when done.
 *
 * Tiles: 0-3 are a 2 x 2 block of f32 accumulators (32 x 32), 4-5 the A operands (16 rows of up
 * to 32 bf16 of the reduced axis), 6-7 the B operands (pairs of the reduced axis interleaved:
 * AMX's layout), so each step is 4 tile loads and 4 tdpbf16ps.
 *
 * Forward, y[q][o] = sum over taps t and channels c of x_pad[q + tap_t][c] w[t][c][o]: an
 * implicit GEMM straight from a zero-padded band of input rows (bf16, channels of each group
 * padded with zeros to the step). q runs over the band's *padded* coordinates, q = row * wp +
 * column with wp the padded width, so that the 16 pixels of an A tile are equally spaced (one
 * pixel apart) and a tap is a constant offset: the columns past the output's width are computed
 * and dropped (2 of 30 on a 28-wide 'same' 3x3 layer). Each step reads one tap's channels (up to
 * 32) of 32 pixels. With few channels per group (a first layer: 1) a step would hold a single
 * tap's few channels, so the taps are unrolled instead into im2col rows, one per band pixel
 * (k = KH*KW*C padded to an even length; one step of 16 for a 3x3x1 filter, built by 16-bit
 * shuffles).
 *
 * Filter gradient, dw[t][c][o] = sum over q of x_pad[q + tap_t][c] dy[q][o]: the reduced axis is
 * the pixels, so the band is transposed (xT[c][q], 16-bit 32 x 32 transposes) and a tap is again
 * a constant offset along its rows; dy is packed into AMX's pair layout (two pixels' channels
 * interleaved), zero at the dropped columns. With few channels per group the rows are the
 * (tap, channel) pairs instead (xT's rows shifted by each tap: im2col transposed). Each chunk of
 * images (EG_CONV_FILTER_CHUNKS fixed chunks, like conv.c's) sums into its own f32 partial,
 * loaded into the accumulators and stored back per chunk of a band's pixels (zeroed tiles on
 * the chunk's first), and the partials are added in chunk order: the same bits whatever the
 * thread count.
 *
 * The zero dy of a dropped column multiplies real inputs that no output reads at that tap: an
 * infinite or NaN input would turn that product into NaN where a convolution has none, so the
 * filter gradient reports a non-finite x and conv_lowp.c then takes the f32 path (exact).
 *
 * AMX reads bf16 denormals as zero and flushes f32 denormal results: inputs below 2^-126 in
 * magnitude count as zero (2^-126 is far below the bounds the tests check). */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/conv_internal.h"
#include "base/error.h"

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512BF16__) &&                   \
    defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>

/* Pixels of the reduced axis (padded coordinates) a filter-gradient band and a forward band hold
 * at most: their buffers (band, transposed band, packed dy) then stay within a core's L2. */
#define BAND_PIXELS 1024
/* Channels per group from which the forward reads the band in place (below: im2col rows) and
 * above which the filter gradient's rows are the channels (at or below: (tap, channel) rows). */
#define FORWARD_IM2COL_BELOW 16
#define FILTER_TAP_ROWS_MAX  8
/* The filter gradient sums a band in chunks of this many pixels, every tap of a chunk before the
 * next, so that the chunk's rows of the transposed band and of dy stay in L1 across the taps
 * (bench_conv --dtype bf16: faster on conv2, whose bands are 840 pixels; the 14 x 14 layers'
 * are this size already). */
#define FILTER_CHUNK_PIXELS 256
/* The filter gradient's reads of x and dy (from memory: the layers' activations are megabytes)
 * prefetch this many pixels ahead (bench_conv --dtype bf16: faster on conv2-conv4 than none; 32
 * and 128 no better). */
#define PREFETCH_PIXELS 64

bool eg__conv_amx_built(void) {
    return true;
}

bool eg__conv_amx_fits(const eg__conv_geometry *g) {
    return g->dtype == EG_DTYPE_BF16 && !g->first && g->stride_h == 1 && g->stride_w == 1 &&
           g->x.sc == 1 && g->k > 0 && g->p > 0 && g->og > 0 && g->x.n > 0;
}

static int64_t round_up(int64_t v, int64_t m) {
    return (v + m - 1) / m * m;
}

static __mmask32 mask32(int64_t n) {
    return n >= 32 ? (__mmask32)0xFFFFFFFFu : n <= 0 ? (__mmask32)0 : (__mmask32)((1u << n) - 1);
}

/* Prefetches the line `elements` bf16 past p (which may lie past p's array: a prefetch never
 * faults, and the address is formed as an integer). */
static inline void prefetch(const uint16_t *p, int64_t elements) {
    _mm_prefetch((const char *)((uintptr_t)p + (uintptr_t)(elements * 2)), _MM_HINT_T0);
}

typedef struct tile_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

/* Tiles 0-3 16 x 64 bytes (f32 accumulators), 4-5 16 rows of a_colsb bytes, 6-7 b_rows rows of
 * 64 bytes. */
static void tiles_configure(int a_colsb, int b_rows) {
    _Alignas(64) tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
    }
    cfg.colsb[4] = cfg.colsb[5] = (uint16_t)a_colsb;
    cfg.rows[6] = cfg.rows[7] = (uint8_t)b_rows;
    _tile_loadconfig(&cfg);
}

/* 32 f32 -> 32 bf16, eg_f32_to_bf16's rounding (nearest even; a NaN keeps its top bits, quiet)
 * but for f32 denormals, which vcvtne2ps2bf16 reads as zero: the AMX sums have none (the tiles
 * flush them), and a sum of partials only below 2^-126. */
static inline __m512i round_bf16_32(__m512 lo, __m512 hi) {
    return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

/* ---- the zero-padded band of input rows (bf16) ---- */

/* band[(r * wp + col) * groups * cgp + grp * cgp + c] = x[b, first_row + r - pad_t, col - pad_l,
 * grp * cg + c] for the n_rows padded rows from first_row and c < cg; 0 in the padding, for
 * cg <= c < cgp and for the pixels from n_rows * wp to band_pix. */
static void fill_band(const eg__conv_geometry *g, const uint16_t *x, int64_t b, int64_t first_row,
                      int64_t n_rows, int64_t wp, int64_t cgp, int64_t band_pix, uint16_t *band) {
    const eg__image *xi = &g->x;
    int64_t cpix = g->groups * cgp;
    int64_t col_lo = g->pad_l < 0 ? 0 : g->pad_l > wp ? wp : g->pad_l;
    int64_t col_hi = g->pad_l + xi->w < col_lo ? col_lo
                     : g->pad_l + xi->w > wp   ? wp
                                               : g->pad_l + xi->w;
    bool dense = cgp == g->cg && xi->sw == xi->c && cpix == xi->c;
    for (int64_t r = 0; r < n_rows; r++) {
        uint16_t *dst = band + r * wp * cpix;
        int64_t ih = first_row + r - g->pad_t;
        if (ih < 0 || ih >= xi->h || col_hi == col_lo) {
            memset(dst, 0, (size_t)(wp * cpix) * 2);
            continue;
        }
        memset(dst, 0, (size_t)(col_lo * cpix) * 2);
        memset(dst + col_hi * cpix, 0, (size_t)((wp - col_hi) * cpix) * 2);
        const uint16_t *src = x + b * xi->sn + ih * xi->sh + (col_lo - g->pad_l) * xi->sw;
        if (dense) {
            memcpy(dst + col_lo * cpix, src, (size_t)((col_hi - col_lo) * cpix) * 2);
            continue;
        }
        for (int64_t col = col_lo; col < col_hi; col++, src += xi->sw)
            for (int64_t grp = 0; grp < g->groups; grp++) {
                const uint16_t *s = src + grp * g->cg;
                uint16_t *d = dst + col * cpix + grp * cgp;
                for (int64_t c0 = 0; c0 < cgp; c0 += 32)
                    _mm512_mask_storeu_epi16(d + c0, mask32(cgp - c0),
                                             _mm512_maskz_loadu_epi16(mask32(g->cg - c0), s + c0));
            }
    }
    memset(band + n_rows * wp * cpix, 0, (size_t)((band_pix - n_rows * wp) * cpix) * 2);
}

/* ---- forward ---- */

/* c (32 x 32 f32, rows 32 floats apart) = sum over the n_steps steps s of A_s B_s, A_s the 32
 * rows at a + koff[s] (a_stride bytes apart), B_s the NO pair-layout tiles at b + s * 2 * b_bytes
 * (+ b_bytes for the second 16 output channels). */
#define FORWARD_KERNEL(NAME, NO)                                                                   \
    static void NAME(const char *a, int64_t a_stride, const int64_t *koff, int64_t n_steps,        \
                     const char *b, int64_t b_bytes, float *c) {                                   \
        _tile_zero(0);                                                                             \
        _tile_zero(2);                                                                             \
        if (NO > 1) {                                                                              \
            _tile_zero(1);                                                                         \
            _tile_zero(3);                                                                         \
        }                                                                                          \
        for (int64_t s = 0; s < n_steps; s++, b += 2 * b_bytes) {                                  \
            _tile_loadd(4, a + koff[s], a_stride);                                                 \
            _tile_loadd(6, b, 64);                                                                 \
            _tile_dpbf16ps(0, 4, 6);                                                               \
            if (NO > 1) {                                                                          \
                _tile_loadd(7, b + b_bytes, 64);                                                   \
                _tile_dpbf16ps(1, 4, 7);                                                           \
            }                                                                                      \
            _tile_loadd(5, a + 16 * a_stride + koff[s], a_stride);                                 \
            _tile_dpbf16ps(2, 5, 6);                                                               \
            if (NO > 1) _tile_dpbf16ps(3, 5, 7);                                                   \
        }                                                                                          \
        _tile_stored(0, c, 128);                                                                   \
        _tile_stored(2, c + 16 * 32, 128);                                                         \
        if (NO > 1) {                                                                              \
            _tile_stored(1, c + 16, 128);                                                          \
            _tile_stored(3, c + 16 * 32 + 16, 128);                                                \
        }                                                                                          \
    }
FORWARD_KERNEL(forward_2x2, 2)
FORWARD_KERNEL(forward_2x1, 1)
#undef FORWARD_KERNEL

typedef struct forward_plan {
    const eg__conv_geometry *g;
    bool im2col;         /* dense im2col rows (few channels) instead of the band in place */
    int64_t cgp, cpix;   /* band channels per group (padded) and per pixel */
    int64_t kc, n_steps; /* bf16 of the reduced axis per step (even, <= 32); steps */
    int64_t kcol;        /* im2col row length: n_steps * kc */
    int64_t rows, n_bands, wp, band_pix;
    int64_t n_ob;         /* blocks of 32 output channels per group */
    int64_t b_elems;      /* bf16 per packed B tile: kc / 2 rows of 32 */
    int64_t *taps, *koff; /* tap offsets (pixels); step offsets (bytes) */
    uint16_t *wpack;
    const uint16_t *x;
    uint16_t *y;
    atomic_bool failed;
} forward_plan;

/* The filter's row (HWIO, t * cg + c) that element kk of step s multiplies, or -1 (zero). */
static int64_t forward_row(const forward_plan *p, int64_t s, int64_t kk) {
    const eg__conv_geometry *g = p->g;
    if (p->im2col) {
        int64_t row = s * p->kc + kk;
        return row < g->k ? row : -1;
    }
    int64_t per_tap = p->n_steps / (g->kh * g->kw), c = s % per_tap * p->kc + kk;
    return c < g->cg ? s / per_tap * g->cg + c : -1;
}

/* w packed per group, block of 32 output channels and step: two tiles (channels 0-15 and 16-31
 * of the block) of kc / 2 rows, each row 16 channels x 2 consecutive elements of the step. */
static void forward_pack_filter(const forward_plan *p, const uint16_t *w) {
    const eg__conv_geometry *g = p->g;
    for (int64_t s = 0; s < p->n_steps; s++)
        for (int64_t kk = 0; kk < p->kc; kk++) {
            int64_t row = forward_row(p, s, kk);
            for (int64_t grp = 0; grp < g->groups; grp++)
                for (int64_t ob = 0; ob < p->n_ob; ob++) {
                    uint16_t *dst = p->wpack +
                                    ((grp * p->n_ob + ob) * p->n_steps + s) * 2 * p->b_elems +
                                    kk / 2 * 32 + kk % 2;
                    const uint16_t *src = row >= 0 ? w + row * g->out_c + grp * g->og + ob * 32 : w;
                    for (int64_t n = 0; n < 32; n++) /* tile n / 16, column n % 16 */
                        dst[n / 16 * p->b_elems + n % 16 * 2] =
                            row >= 0 && ob * 32 + n < g->og ? src[n] : 0;
                }
        }
}

/* Rows [0, n) of c (32 x 32) rounded into y: row r at y + pix[r] * ldy (dropped when pix[r] < 0),
 * n_o channels. */
static void forward_store(const float *c, int n, const int64_t *pix, uint16_t *y, int64_t ldy,
                          int64_t n_o) {
    __mmask32 m = mask32(n_o);
    for (int r = 0; r < n; r++) {
        if (pix[r] < 0) continue;
        __m512i v = round_bf16_32(_mm512_load_ps(c + r * 32), _mm512_load_ps(c + r * 32 + 16));
        _mm512_mask_storeu_epi16(y + pix[r] * ldy, m, v);
    }
}

/* col[q][t * cg + c] = band[(q + taps[t]) * cpix + grp * cg + c] for the band's nq pixels
 * (padded coordinates, nq a multiple of 32), 0 from k to kcol. */
static void forward_im2col(const forward_plan *p, const uint16_t *band, int64_t grp, int64_t nq,
                           uint16_t *col) {
    const eg__conv_geometry *g = p->g;
    int64_t n_taps = g->kh * g->kw;
    if (p->cpix == 1 && p->kcol == 16) {
        /* one channel: each tap's 32 pixels are one load, and 16 such rows (the taps, then
         * zeros) transposed by four perfect shuffles are 32 im2col rows of 16 */
        _Alignas(64) uint16_t lo_idx[32], hi_idx[32];
        for (int e = 0; e < 32; e++) {
            lo_idx[e] = (uint16_t)((e >> 1) + (e & 1) * 32);
            hi_idx[e] = (uint16_t)(16 + (e >> 1) + (e & 1) * 32);
        }
        const __m512i lo = _mm512_load_si512(lo_idx), hi = _mm512_load_si512(hi_idx);
        for (int64_t q0 = 0; q0 < nq; q0 += 32) {
            __m512i r[16];
            for (int t = 0; t < 16; t++)
                r[t] = t < n_taps ? _mm512_loadu_si512(band + q0 + p->taps[t])
                                  : _mm512_setzero_si512();
            for (int round = 0; round < 4; round++) {
                __m512i n[16];
                for (int i = 0; i < 8; i++) {
                    n[2 * i] = _mm512_permutex2var_epi16(r[i], lo, r[i + 8]);
                    n[2 * i + 1] = _mm512_permutex2var_epi16(r[i], hi, r[i + 8]);
                }
                for (int i = 0; i < 16; i++) r[i] = n[i];
            }
            for (int i = 0; i < 16; i++) _mm512_store_si512(col + q0 * 16 + i * 32, r[i]);
        }
        return;
    }
    for (int64_t q = 0; q < nq; q++) {
        const uint16_t *src = band + q * p->cpix + grp * g->cg;
        uint16_t *dst = col + q * p->kcol;
        for (int64_t t = 0; t < n_taps; t++)
            memcpy(dst + t * g->cg, src + p->taps[t] * p->cpix, (size_t)g->cg * 2);
        memset(dst + g->k, 0, (size_t)(p->kcol - g->k) * 2);
    }
}

/* Tasks: (image, band of output rows). */
static void forward_tasks(void *context, int64_t begin, int64_t end) {
    forward_plan *p = context;
    const eg__conv_geometry *g = p->g;
    int64_t w_out = g->y.w, nq_max = round_up(p->rows * p->wp, 32);
    size_t band_bytes = (size_t)round_up(p->band_pix * p->cpix * 2, 64);
    size_t col_bytes = p->im2col ? (size_t)round_up(nq_max * p->kcol * 2, 64) : 0;
    size_t pix_bytes = (size_t)nq_max * sizeof(int64_t);
    size_t scratch_bytes = band_bytes + col_bytes + 2 * 32 * 32 * sizeof(float) + pix_bytes;
    char *scratch = eg__conv_scratch_take(scratch_bytes);
    if (!scratch) {
        atomic_store(&p->failed, true);
        return;
    }
    uint16_t *band = (uint16_t *)scratch, *col = (uint16_t *)(scratch + band_bytes);
    float *c = (float *)(scratch + band_bytes + col_bytes);
    int64_t *pix = (int64_t *)(scratch + band_bytes + col_bytes + 2 * 32 * 32 * sizeof(float));
    tiles_configure((int)p->kc * 2, (int)p->kc / 2);
    for (int64_t task = begin; task < end; task++) {
        int64_t b = task / p->n_bands, r0 = task % p->n_bands * p->rows;
        int64_t n_rows = g->y.h - r0 < p->rows ? g->y.h - r0 : p->rows;
        int64_t rows_in = n_rows + g->dil_h * (g->kh - 1);
        fill_band(g, p->x, b, r0, rows_in, p->wp, p->cgp, p->band_pix, band);
        uint16_t *yb = p->y + (b * g->p + r0 * w_out) * g->out_c;
        int64_t nq = n_rows * p->wp; /* band pixels q = row * wp + column, column < W kept */
        for (int64_t q = 0, row = 0, column = 0; q < round_up(nq, 32); q++) {
            pix[q] = q < nq && column < w_out ? row * w_out + column : -1;
            if (++column == p->wp) column = 0, row++;
        }
        for (int64_t grp = 0; grp < g->groups; grp++) {
            const char *a = (const char *)band + grp * p->cgp * 2;
            int64_t a_stride = p->cpix * 2;
            if (p->im2col) {
                forward_im2col(p, band, grp, round_up(nq, 32), col);
                a = (const char *)col;
                a_stride = p->kcol * 2;
            }
            for (int64_t ob = 0; ob < p->n_ob; ob++) {
                const char *bw =
                    (const char *)(p->wpack + (grp * p->n_ob + ob) * p->n_steps * 2 * p->b_elems);
                int64_t n_o = g->og - ob * 32 < 32 ? g->og - ob * 32 : 32;
                uint16_t *yo = yb + grp * g->og + ob * 32;
                for (int64_t q0 = 0; q0 < nq; q0 += 32) {
                    /* two blocks' sums in turn: the rounding of one can overlap the products of
                     * the next */
                    float *cq = c + (q0 / 32 % 2) * 32 * 32;
                    if (n_o > 16)
                        forward_2x2(a + q0 * a_stride, a_stride, p->koff, p->n_steps, bw,
                                    p->b_elems * 2, cq);
                    else
                        forward_2x1(a + q0 * a_stride, a_stride, p->koff, p->n_steps, bw,
                                    p->b_elems * 2, cq);
                    forward_store(cq, nq - q0 < 32 ? (int)(nq - q0) : 32, pix + q0, yo, g->out_c,
                                  n_o);
                }
            }
        }
    }
    _tile_release();
    eg__conv_scratch_give(scratch, scratch_bytes);
}

eg_status eg__conv_amx_forward(const eg__conv_geometry *g, const uint16_t *x, const uint16_t *w,
                               uint16_t *y, const char *what) {
    forward_plan p = {.g = g, .x = x, .y = y};
    int64_t n_taps = g->kh * g->kw;
    p.im2col = g->cg < FORWARD_IM2COL_BELOW;
    if (p.im2col) {
        p.cgp = g->cg;
        p.kcol = g->k <= 32 ? round_up(g->k, 2) : round_up(g->k, 32);
        if (g->cg == 1 && g->groups == 1 && g->k <= 16) p.kcol = 16; /* forward_im2col's shuffles */
        p.kc = p.kcol < 32 ? p.kcol : 32;
        p.n_steps = p.kcol / p.kc;
    } else {
        p.cgp = g->cg <= 32 ? round_up(g->cg, 2) : round_up(g->cg, 32);
        p.kc = p.cgp < 32 ? p.cgp : 32;
        p.n_steps = n_taps * (p.cgp / p.kc);
    }
    p.cpix = g->groups * p.cgp;
    p.b_elems = p.kc / 2 * 32;
    p.wp = g->y.w + g->dil_w * (g->kw - 1);
    p.rows = BAND_PIXELS / p.wp < 1 ? 1 : BAND_PIXELS / p.wp;
    if (p.rows > g->y.h) p.rows = g->y.h;
    p.n_bands = (g->y.h + p.rows - 1) / p.rows;
    int64_t tap_max = g->dil_h * (g->kh - 1) * p.wp + g->dil_w * (g->kw - 1);
    /* the last 32-pixel block reads up to the farthest tap past the band's rows */
    p.band_pix = round_up(p.rows * p.wp, 32) + tap_max + 1;
    p.n_ob = (g->og + 31) / 32;
    size_t pack_elems = (size_t)(g->groups * p.n_ob * p.n_steps * 2 * p.b_elems);
    p.wpack = aligned_alloc(64, (size_t)round_up((int64_t)pack_elems * 2, 64));
    p.taps = malloc((size_t)(n_taps + p.n_steps) * sizeof(int64_t));
    bool ok = p.wpack && p.taps;
    if (ok) {
        p.koff = p.taps + n_taps;
        for (int64_t i = 0; i < g->kh; i++)
            for (int64_t j = 0; j < g->kw; j++)
                p.taps[i * g->kw + j] = i * g->dil_h * p.wp + j * g->dil_w;
        for (int64_t s = 0; s < p.n_steps; s++) {
            int64_t per_tap = p.n_steps / n_taps;
            p.koff[s] =
                p.im2col ? s * p.kc * 2 : (p.taps[s / per_tap] * p.cpix + s % per_tap * p.kc) * 2;
        }
        forward_pack_filter(&p, w);
        atomic_init(&p.failed, false);
        eg__parallel_for(g->x.n * p.n_bands, 1, forward_tasks, &p);
        ok = !atomic_load(&p.failed);
    }
    free(p.wpack);
    free(p.taps);
    return ok ? EG_OK
              : eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory for scratch space", what);
}

/* ---- filter gradient ---- */

/* Partial rows [0, MC * 16) x output channels [0, NO * 16) (f32, p0 for the first 16 rows, p1
 * for the next, ldp bytes between rows) += (or, when fresh, =) sum over the n_steps steps s of
 * A B: A the rows at a0 / a1 + 64 s (lda bytes apart: 32 pixels each), B the pair rows at
 * b + 16 s ldb (+ 64 for the second 16 channels). Starting fresh from zeroed tiles gives the
 * bits of adding to a zeroed partial. */
#define FILTER_KERNEL(NAME, MC, NO)                                                                \
    static void NAME(const char *a0, const char *a1, int64_t lda, const char *b, int64_t ldb,      \
                     int64_t n_steps, float *p0, float *p1, int64_t ldp, bool fresh) {             \
        if (fresh) {                                                                               \
            _tile_zero(0);                                                                         \
            _tile_zero(1);                                                                         \
            _tile_zero(2);                                                                         \
            _tile_zero(3);                                                                         \
        } else {                                                                                   \
            _tile_loadd(0, p0, ldp);                                                               \
            if (NO > 1) _tile_loadd(1, p0 + 16, ldp);                                              \
            if (MC > 1) {                                                                          \
                _tile_loadd(2, p1, ldp);                                                           \
                if (NO > 1) _tile_loadd(3, p1 + 16, ldp);                                          \
            }                                                                                      \
        }                                                                                          \
        for (int64_t s = 0; s < n_steps; s++, a0 += 64, a1 += 64, b += 16 * ldb) {                 \
            _tile_loadd(4, a0, lda);                                                               \
            _tile_loadd(6, b, ldb);                                                                \
            _tile_dpbf16ps(0, 4, 6);                                                               \
            if (MC > 1) {                                                                          \
                _tile_loadd(5, a1, lda);                                                           \
                _tile_dpbf16ps(2, 5, 6);                                                           \
            }                                                                                      \
            if (NO > 1) {                                                                          \
                _tile_loadd(7, b + 64, ldb);                                                       \
                _tile_dpbf16ps(1, 4, 7);                                                           \
                if (MC > 1) _tile_dpbf16ps(3, 5, 7);                                               \
            }                                                                                      \
        }                                                                                          \
        _tile_stored(0, p0, ldp);                                                                  \
        if (NO > 1) _tile_stored(1, p0 + 16, ldp);                                                 \
        if (MC > 1) {                                                                              \
            _tile_stored(2, p1, ldp);                                                              \
            if (NO > 1) _tile_stored(3, p1 + 16, ldp);                                             \
        }                                                                                          \
    }
FILTER_KERNEL(filter_2x2, 2, 2)
FILTER_KERNEL(filter_2x1, 2, 1)
FILTER_KERNEL(filter_1x2, 1, 2)
FILTER_KERNEL(filter_1x1, 1, 1)
#undef FILTER_KERNEL

typedef struct filter_plan {
    const eg__conv_geometry *g;
    bool tap_rows;   /* rows are (tap, channel) pairs: im2col transposed (few channels) */
    int64_t xt_rows; /* rows of the transposed band: cg rounded up to 16 (32 in blocks) */
    int64_t krows;   /* partial rows per group: KH*KW*round_up(cg, 16) or round_up(k, 16) */
    int64_t ogp;     /* output channels per group rounded up to 32 */
    int64_t rows, n_bands, wp;
    int64_t ld;    /* bf16 per transposed row: the band's pixels, a multiple of 32 */
    int64_t *taps; /* tap offsets (pixels) */
    int64_t chunk_images, n_chunks;
    float *partials;       /* n_chunks x groups x krows x ogp */
    size_t partial_floats; /* of one chunk */
    const uint16_t *x, *dy;
    atomic_bool failed, nonfinite;
} filter_plan;

/* The 32 x 32 16-bit matrix r (one row per register) transposed: 8 x 8 transposes within the
 * 128-bit lanes of each group of 8 rows (unpacks of 16, 32 and 64 bits), then 4 x 4 transposes of
 * the lanes across the groups; single-uop shuffles throughout (vpermt2w takes three). */
static inline void transpose_32x32(__m512i r[32]) {
    __m512i d[4][8];
    for (int grp = 0; grp < 4; grp++) {
        const __m512i *a = r + 8 * grp;
        __m512i b[8], c[8];
        for (int i = 0; i < 4; i++) {
            b[2 * i] = _mm512_unpacklo_epi16(a[2 * i], a[2 * i + 1]);
            b[2 * i + 1] = _mm512_unpackhi_epi16(a[2 * i], a[2 * i + 1]);
        }
        for (int h = 0; h < 2; h++)
            for (int i = 0; i < 2; i++) {
                c[4 * h + 2 * i] = _mm512_unpacklo_epi32(b[4 * h + i], b[4 * h + i + 2]);
                c[4 * h + 2 * i + 1] = _mm512_unpackhi_epi32(b[4 * h + i], b[4 * h + i + 2]);
            }
        /* c[0..3] hold columns (0,1), (2,3), (4,5), (6,7) of rows 0-3, c[4..7] of rows 4-7 */
        for (int i = 0; i < 4; i++) {
            d[grp][2 * i] = _mm512_unpacklo_epi64(c[i], c[i + 4]);
            d[grp][2 * i + 1] = _mm512_unpackhi_epi64(c[i], c[i + 4]);
        }
    }
    /* d[grp][j], lane L: column 8 L + j of rows 8 grp .. 8 grp + 7 */
    for (int j = 0; j < 8; j++) {
        __m512i t0 = _mm512_shuffle_i64x2(d[0][j], d[1][j], 0x88);
        __m512i t1 = _mm512_shuffle_i64x2(d[0][j], d[1][j], 0xDD);
        __m512i t2 = _mm512_shuffle_i64x2(d[2][j], d[3][j], 0x88);
        __m512i t3 = _mm512_shuffle_i64x2(d[2][j], d[3][j], 0xDD);
        r[j] = _mm512_shuffle_i64x2(t0, t2, 0x88);
        r[8 + j] = _mm512_shuffle_i64x2(t1, t3, 0x88);
        r[16 + j] = _mm512_shuffle_i64x2(t0, t2, 0xDD);
        r[24 + j] = _mm512_shuffle_i64x2(t1, t3, 0xDD);
    }
}

/* xt[c * ld + q] = x_pad[q][grp * cg + c] for the band of padded rows from first_row (n_rows of
 * wp pixels; 0 past them up to ld) and c < xt_rows (0 from cg on). Returns whether every value
 * read was finite. */
static bool filter_transpose(const filter_plan *p, int64_t b, int64_t first_row, int64_t n_rows,
                             int64_t grp, uint16_t *xt) {
    const eg__conv_geometry *g = p->g;
    const eg__image *xi = &g->x;
    const __m512i exponent = _mm512_set1_epi16(0x7f80);
    int64_t n_pix = n_rows * p->wp;
    const uint16_t *xg = p->x + b * xi->sn + grp * g->cg;
    if (p->xt_rows == 1) { /* one channel: the padded rows themselves */
        uint16_t bad = 0;
        memset(xt, 0, (size_t)p->ld * 2);
        for (int64_t r = 0; r < n_rows; r++) {
            int64_t ih = first_row + r - g->pad_t;
            if (ih < 0 || ih >= xi->h) continue;
            int64_t col_lo = g->pad_l < 0 ? 0 : g->pad_l;
            int64_t col_hi = g->pad_l + xi->w < p->wp ? g->pad_l + xi->w : p->wp;
            const uint16_t *src = xg + ih * xi->sh + (col_lo - g->pad_l) * xi->sw;
            uint16_t *dst = xt + r * p->wp;
            for (int64_t col = col_lo; col < col_hi; col++, src += xi->sw) {
                bad |= (uint16_t)((*src & 0x7f80) == 0x7f80);
                dst[col] = *src;
            }
        }
        return !bad;
    }
    __mmask32 bad = 0;
    int64_t ih = first_row - g->pad_t, iw = -g->pad_l; /* of pixel q0 */
    for (int64_t q0 = 0; q0 < p->ld; q0 += 32) {
        const uint16_t *src[32];
        for (int i = 0; i < 32; i++) {
            src[i] = q0 + i < n_pix && ih >= 0 && ih < xi->h && iw >= 0 && iw < xi->w
                         ? xg + ih * xi->sh + iw * xi->sw
                         : NULL;
            if (++iw == p->wp - g->pad_l) iw = -g->pad_l, ih++;
        }
        for (int64_t c0 = 0; c0 < p->xt_rows; c0 += 32) {
            __m512i v[32];
            __mmask32 m = mask32(g->cg - c0);
            for (int i = 0; i < 32; i++) {
                if (src[i]) prefetch(src[i] + c0, PREFETCH_PIXELS * xi->sw);
                v[i] = src[i] ? _mm512_maskz_loadu_epi16(m, src[i] + c0) : _mm512_setzero_si512();
                bad |= _mm512_cmpeq_epi16_mask(_mm512_and_si512(v[i], exponent), exponent);
            }
            transpose_32x32(v);
            int64_t n_c = p->xt_rows - c0 < 32 ? p->xt_rows - c0 : 32;
            for (int64_t c = 0; c < n_c; c++) _mm512_store_si512(xt + (c0 + c) * p->ld + q0, v[c]);
        }
    }
    return !bad;
}

/* dyp[(qp * ogp + o) * 2 + e] = dy[pixel q = 2 qp + e of the band][grp * og + o] at the band's
 * output pixels (q < n_rows * wp and column < W_out), 0 elsewhere and for o >= og; qp < nq / 2. */
static void filter_pack_dy(const filter_plan *p, int64_t b, int64_t r0, int64_t n_rows, int64_t grp,
                           int64_t nq, uint16_t *dyp) {
    const eg__conv_geometry *g = p->g;
    _Alignas(64) uint16_t lo_idx[32], hi_idx[32];
    for (int e = 0; e < 32; e++) {
        lo_idx[e] = (uint16_t)((e >> 1) + (e & 1) * 32);
        hi_idx[e] = (uint16_t)(16 + (e >> 1) + (e & 1) * 32);
    }
    const __m512i lo = _mm512_load_si512(lo_idx), hi = _mm512_load_si512(hi_idx);
    int64_t w_out = g->y.w;
    for (int64_t qp = 0; qp < nq / 2; qp++) {
        const uint16_t *row[2];
        for (int e = 0; e < 2; e++) {
            int64_t q = 2 * qp + e, r = q / p->wp, column = q % p->wp;
            row[e] = r < n_rows && column < w_out
                         ? p->dy + ((b * g->y.h + r0 + r) * w_out + column) * g->out_c + grp * g->og
                         : NULL;
        }
        uint16_t *dst = dyp + qp * p->ogp * 2;
        for (int e = 0; e < 2; e++)
            if (row[e]) prefetch(row[e], PREFETCH_PIXELS * g->out_c);
        for (int64_t o0 = 0; o0 < p->ogp; o0 += 32) {
            __mmask32 m = mask32(g->og - o0);
            __m512i v0 = row[0] ? _mm512_maskz_loadu_epi16(m, row[0] + o0) : _mm512_setzero_si512();
            __m512i v1 = row[1] ? _mm512_maskz_loadu_epi16(m, row[1] + o0) : _mm512_setzero_si512();
            _mm512_store_si512(dst + o0 * 2, _mm512_permutex2var_epi16(v0, lo, v1));
            _mm512_store_si512(dst + o0 * 2 + 32, _mm512_permutex2var_epi16(v0, hi, v1));
        }
    }
}

/* Tasks: chunks of images, each summing into its own partial. */
static void filter_tasks(void *context, int64_t begin, int64_t end) {
    filter_plan *p = context;
    const eg__conv_geometry *g = p->g;
    int64_t nq_max = round_up(p->rows * p->wp, 32), n_taps = g->kh * g->kw;
    size_t xt_bytes = (size_t)round_up(p->xt_rows * p->ld * 2, 64);
    size_t rows_bytes = p->tap_rows ? (size_t)round_up(p->krows * p->ld * 2, 64) : 0;
    size_t dy_bytes = (size_t)round_up(nq_max * p->ogp * 2, 64);
    size_t scratch_bytes = xt_bytes + rows_bytes + dy_bytes;
    char *scratch = eg__conv_scratch_take(scratch_bytes);
    if (!scratch) {
        atomic_store(&p->failed, true);
        return;
    }
    uint16_t *xt = (uint16_t *)scratch, *tap_rows = (uint16_t *)(scratch + xt_bytes);
    uint16_t *dyp = (uint16_t *)(scratch + xt_bytes + rows_bytes);
    if (p->tap_rows) /* the rows past k stay zero */
        memset(tap_rows + g->k * p->ld, 0, (size_t)((p->krows - g->k) * p->ld) * 2);
    tiles_configure(64, 16);
    int64_t n_rb = p->krows / 16, per_tap = p->xt_rows / 16;
    for (int64_t chunk = begin; chunk < end; chunk++) {
        float *part = p->partials + (size_t)chunk * p->partial_floats;
        int64_t b_end =
            (chunk + 1) * p->chunk_images < g->x.n ? (chunk + 1) * p->chunk_images : g->x.n;
        for (int64_t b = chunk * p->chunk_images; b < b_end; b++)
            for (int64_t band = 0; band < p->n_bands; band++) {
                int64_t r0 = band * p->rows;
                int64_t n_rows = g->y.h - r0 < p->rows ? g->y.h - r0 : p->rows;
                int64_t rows_in = n_rows + g->dil_h * (g->kh - 1);
                int64_t nq = round_up(n_rows * p->wp, 32);
                for (int64_t grp = 0; grp < g->groups; grp++) {
                    if (!filter_transpose(p, b, r0, rows_in, grp, xt)) {
                        atomic_store(&p->nonfinite, true);
                        goto done;
                    }
                    if (p->tap_rows)
                        for (int64_t t = 0; t < n_taps; t++)
                            for (int64_t c = 0; c < g->cg; c++)
                                memcpy(tap_rows + (t * g->cg + c) * p->ld,
                                       xt + c * p->ld + p->taps[t], (size_t)nq * 2);
                    filter_pack_dy(p, b, r0, n_rows, grp, nq, dyp);
                    float *pg = part + grp * p->krows * p->ogp;
                    for (int64_t k0 = 0; k0 < nq; k0 += FILTER_CHUNK_PIXELS) {
                        /* the chunk's first sums write its partial (every tile of it) */
                        bool fresh = b == chunk * p->chunk_images && band == 0 && k0 == 0;
                        for (int64_t rb = 0; rb < n_rb; rb += 2) {
                            const char *a[2];
                            for (int h = 0; h < 2; h++) {
                                int64_t r = rb + h < n_rb ? rb + h : rb;
                                a[h] = p->tap_rows ? (const char *)(tap_rows + r * 16 * p->ld + k0)
                                                   : (const char *)(xt + r % per_tap * 16 * p->ld +
                                                                    p->taps[r / per_tap] + k0);
                            }
                            bool two_rows = rb + 1 < n_rb;
                            for (int64_t o0 = 0; o0 < g->og; o0 += 32) {
                                float *p0 = pg + rb * 16 * p->ogp + o0, *p1 = p0 + 16 * p->ogp;
                                const char *bt = (const char *)(dyp + k0 * p->ogp + o0 * 2);
                                int64_t ldb = p->ogp * 4, ldp = p->ogp * 4;
                                int64_t n_steps =
                                    (nq - k0 < FILTER_CHUNK_PIXELS ? nq - k0
                                                                   : FILTER_CHUNK_PIXELS) /
                                    32;
                                bool two_cols = g->og - o0 > 16;
                                if (two_rows && two_cols)
                                    filter_2x2(a[0], a[1], p->ld * 2, bt, ldb, n_steps, p0, p1, ldp,
                                               fresh);
                                else if (two_rows)
                                    filter_2x1(a[0], a[1], p->ld * 2, bt, ldb, n_steps, p0, p1, ldp,
                                               fresh);
                                else if (two_cols)
                                    filter_1x2(a[0], a[1], p->ld * 2, bt, ldb, n_steps, p0, p1, ldp,
                                               fresh);
                                else
                                    filter_1x1(a[0], a[1], p->ld * 2, bt, ldb, n_steps, p0, p1, ldp,
                                               fresh);
                            }
                        }
                    }
                }
            }
    }
done:
    _tile_release();
    eg__conv_scratch_give(scratch, scratch_bytes);
}

typedef struct filter_sum_job {
    const filter_plan *p;
    uint16_t *dw;
} filter_sum_job;

/* dw's rows (group, t * cg + c) [begin, end) = the chunks' partials added in chunk order, rounded
 * once. */
static void filter_sum_tasks(void *context, int64_t begin, int64_t end) {
    const filter_sum_job *s = context;
    const filter_plan *p = s->p;
    const eg__conv_geometry *g = p->g;
    for (int64_t unit = begin; unit < end; unit++) {
        int64_t grp = unit / g->k, row = unit % g->k;
        int64_t prow = p->tap_rows ? row : row / g->cg * p->xt_rows + row % g->cg;
        const float *src = p->partials + (grp * p->krows + prow) * p->ogp;
        uint16_t *dst = s->dw + row * g->out_c + grp * g->og;
        for (int64_t o0 = 0; o0 < g->og; o0 += 32) {
            __m512 lo = _mm512_load_ps(src + o0), hi = _mm512_load_ps(src + o0 + 16);
            for (int64_t c = 1; c < p->n_chunks; c++) {
                const float *part = src + (size_t)c * p->partial_floats;
                lo = _mm512_add_ps(lo, _mm512_load_ps(part + o0));
                hi = _mm512_add_ps(hi, _mm512_load_ps(part + o0 + 16));
            }
            _mm512_mask_storeu_epi16(dst + o0, mask32(g->og - o0), round_bf16_32(lo, hi));
        }
    }
}

eg_status eg__conv_amx_filter(const eg__conv_geometry *g, const uint16_t *x, const uint16_t *dy,
                              uint16_t *dw, bool *nonfinite, const char *what) {
    filter_plan p = {.g = g, .x = x, .dy = dy};
    int64_t n_taps = g->kh * g->kw;
    *nonfinite = false;
    p.tap_rows = g->cg <= FILTER_TAP_ROWS_MAX;
    p.xt_rows = p.tap_rows ? g->cg : round_up(g->cg, 16);
    p.krows = p.tap_rows ? round_up(g->k, 16) : n_taps * p.xt_rows;
    p.ogp = round_up(g->og, 32);
    p.wp = g->y.w + g->dil_w * (g->kw - 1);
    p.rows = BAND_PIXELS / p.wp < 1 ? 1 : BAND_PIXELS / p.wp;
    if (p.rows > g->y.h) p.rows = g->y.h;
    p.n_bands = (g->y.h + p.rows - 1) / p.rows;
    int64_t tap_max = g->dil_h * (g->kh - 1) * p.wp + g->dil_w * (g->kw - 1);
    p.ld = round_up(round_up(p.rows * p.wp, 32) + tap_max, 32);
    p.chunk_images = (g->x.n + EG_CONV_FILTER_CHUNKS - 1) / EG_CONV_FILTER_CHUNKS;
    p.n_chunks = (g->x.n + p.chunk_images - 1) / p.chunk_images;
    p.partial_floats = (size_t)(g->groups * p.krows * p.ogp);
    size_t partials_bytes = (size_t)p.n_chunks * p.partial_floats * sizeof(float);
    p.partials = (float *)eg__conv_partials_take(partials_bytes);
    p.taps = malloc((size_t)n_taps * sizeof(int64_t));
    bool ok = p.partials && p.taps;
    if (ok) {
        for (int64_t i = 0; i < g->kh; i++)
            for (int64_t j = 0; j < g->kw; j++)
                p.taps[i * g->kw + j] = i * g->dil_h * p.wp + j * g->dil_w;
        atomic_init(&p.failed, false);
        atomic_init(&p.nonfinite, false);
        eg__parallel_for(p.n_chunks, 1, filter_tasks, &p);
        ok = !atomic_load(&p.failed);
        if (ok && atomic_load(&p.nonfinite)) {
            *nonfinite = true;
        } else if (ok) {
            filter_sum_job s = {&p, dw};
            eg__parallel_for(g->groups * g->k, 16, filter_sum_tasks, &s);
        }
    }
    if (p.partials) eg__conv_partials_give((char *)p.partials, partials_bytes);
    free(p.taps);
    return ok ? EG_OK
              : eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory for scratch space", what);
}
#else
bool eg__conv_amx_built(void) {
    return false;
}
bool eg__conv_amx_fits(const eg__conv_geometry *g) {
    (void)g;
    return false;
}
eg_status eg__conv_amx_forward(const eg__conv_geometry *g, const uint16_t *x, const uint16_t *w,
                               uint16_t *y, const char *what) {
    (void)g, (void)x, (void)w, (void)y;
    return eg__error(EG_ERR_UNSUPPORTED, "%s: built without the AMX kernels", what);
}
eg_status eg__conv_amx_filter(const eg__conv_geometry *g, const uint16_t *x, const uint16_t *dy,
                              uint16_t *dw, bool *nonfinite, const char *what) {
    (void)g, (void)x, (void)dy, (void)dw;
    *nonfinite = false;
    return eg__error(EG_ERR_UNSUPPORTED, "%s: built without the AMX kernels", what);
}
#endif
