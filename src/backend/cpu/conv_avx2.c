/* Eagle's own f32 NHWC convolution kernels for AVX2 + FMA: an implicit GEMM with a 6 x 16
 * register block (12 accumulators of 8 floats), for the forward convolution (and so the stride-1
 * input gradient, which conv.c runs as a flipped-filter forward) and for the filter gradient.
 *
 * This file is compiled with -mavx2 -mfma (CMakeLists.txt); the library itself targets baseline
 * x86-64, so conv.c calls in here only after checking the CPU at run time.
 *
 * Padding costs nothing in the inner loops: each task first copies the input rows its band of
 * output rows reads into a zero-padded buffer (every tap of every output pixel is then a valid
 * address), which also turns strides, dilation and strided (non-contiguous) inputs into plain
 * pointer offsets. The copy is ~1% of the arithmetic for a 3x3 filter.
 *
 * Forward: block = 6 output pixels (any 6 of the band, rows may differ) x 16 output channels;
 * for every tap and input channel, 2 vector loads of the packed filter, 6 broadcasts of the
 * input, 12 FMAs. Filter gradient: block = 6 filter rows (tap, input channel) x 16 output
 * channels; for every output pixel of the band, 2 vector loads of dy, 6 broadcasts of the input,
 * 12 FMAs. Blocks past the end (pixels, filter rows) repeat the last valid row and are not
 * stored; channel tails use masked loads and stores. Every output value is computed by the same
 * sequence of operations whichever thread runs it.
 *
 * bf16 and f16 (conv_lowp.c): the band copies widen the input, each forward band is computed
 * into an f32 buffer and rounded into y once, and each filter-gradient sweep's dy rows are
 * widened into a buffer first: the same operations on the same values as on widened copies,
 * without the passes over whole tensors. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/conv_internal.h"
#include "base/error.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#define MR 6  /* rows of the register block: output pixels, or filter rows */
#define NR 16 /* output channels of the register block (two vectors) */
/* Output pixels per band (one task of the forward, one step of the filter gradient): enough
 * that per-block costs (pointer set-up, accumulator loads and stores) vanish, few enough that a
 * band's padded input stays in L2. */
#define FORWARD_BAND_PIXELS 128

bool eg__conv_avx2_built(void) {
    return true;
}

/* Masks for the first n (0..16) channels of a block, as two vectors. */
static inline void channel_masks(int n, __m256i *m0, __m256i *m1) {
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    *m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lanes);
    *m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(n - 8), lanes);
}

/* The 12 accumulators, named so that they stay in registers. */
#define ACC_DECLARE                                                                                \
    __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00,       \
           a30 = a00, a31 = a00, a40 = a00, a41 = a00, a50 = a00, a51 = a00
#define ACC_ROW(r, bcast, v0, v1)                                                                  \
    do {                                                                                           \
        __m256 b_ = (bcast);                                                                       \
        a##r##0 = _mm256_fmadd_ps(b_, v0, a##r##0);                                                \
        a##r##1 = _mm256_fmadd_ps(b_, v1, a##r##1);                                                \
    } while (0)

/* Stores (or adds into, when add) accumulator row r at dst: all 16 channels or the masked ones. */
static inline void put_row(float *dst, __m256 v0, __m256 v1, bool full, __m256i m0, __m256i m1,
                           bool add) {
    if (full) {
        if (add) {
            v0 = _mm256_add_ps(_mm256_loadu_ps(dst), v0);
            v1 = _mm256_add_ps(_mm256_loadu_ps(dst + 8), v1);
        }
        _mm256_storeu_ps(dst, v0);
        _mm256_storeu_ps(dst + 8, v1);
    } else {
        if (add) {
            v0 = _mm256_add_ps(_mm256_maskload_ps(dst, m0), v0);
            v1 = _mm256_add_ps(_mm256_maskload_ps(dst + 8, m1), v1);
        }
        _mm256_maskstore_ps(dst, m0, v0);
        _mm256_maskstore_ps(dst + 8, m1, v1);
    }
}

#define PUT_ROWS(dst_of, full, m0, m1, add, n_valid)                                               \
    do {                                                                                           \
        put_row(dst_of(0), a00, a01, full, m0, m1, add);                                           \
        if (n_valid > 1) put_row(dst_of(1), a10, a11, full, m0, m1, add);                          \
        if (n_valid > 2) put_row(dst_of(2), a20, a21, full, m0, m1, add);                          \
        if (n_valid > 3) put_row(dst_of(3), a30, a31, full, m0, m1, add);                          \
        if (n_valid > 4) put_row(dst_of(4), a40, a41, full, m0, m1, add);                          \
        if (n_valid > 5) put_row(dst_of(5), a50, a51, full, m0, m1, add);                          \
    } while (0)

/* dst = src rounded to bf16, eg_f32_to_bf16's integer rule (nearest even; a NaN keeps its top
 * bits, quiet), 16 at a time, cheaper than that function's compiler-vectorized AVX2 build
 * (bench_conv --dtype bf16 at EG_CPU=avx2: the first layer's forward, whose output is 32 times
 * its input). */
static void round_bf16(const float *src, uint16_t *dst, int64_t n) {
    const __m256i bias = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1);
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    const __m256i quiet = _mm256_set1_epi32(0x40);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i r[2];
        for (int h = 0; h < 2; h++) {
            __m256i x = _mm256_loadu_si256((const __m256i *)(src + i + 8 * h));
            __m256i top = _mm256_srli_epi32(x, 16);
            __m256i rounded = _mm256_srli_epi32(
                _mm256_add_epi32(_mm256_add_epi32(x, bias), _mm256_and_si256(top, one)), 16);
            __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, abs_mask), inf);
            r[h] = _mm256_blendv_epi8(rounded, _mm256_or_si256(top, quiet), nan);
        }
        /* packus interleaves the 128-bit lanes: put them back in order */
        __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r[0], r[1]), 0xD8);
        _mm256_storeu_si256((__m256i *)(dst + i), packed);
    }
    eg_f32_to_bf16(src + i, dst + i, (size_t)(n - i));
}

/* ---- forward ---- */

/* y[r][0..16) = sum over taps t and channels ch of px[r][taps[t] + ch] * w[t * cg + ch][0..16)
 * for the n_valid pixels r (y rows ldy apart); w is the packed (k x 16) block. */
static void forward_block(const float *const *px, const int64_t *taps, int64_t n_taps, int64_t cg,
                          const float *w, float *y, int64_t ldy, int n_valid, bool full, __m256i m0,
                          __m256i m1) {
    ACC_DECLARE;
    for (int64_t t = 0; t < n_taps; t++) {
        const float *p0 = px[0] + taps[t], *p1 = px[1] + taps[t], *p2 = px[2] + taps[t];
        const float *p3 = px[3] + taps[t], *p4 = px[4] + taps[t], *p5 = px[5] + taps[t];
        for (int64_t ch = 0; ch < cg; ch++, w += NR) {
            __m256 w0 = _mm256_load_ps(w), w1 = _mm256_load_ps(w + 8);
            ACC_ROW(0, _mm256_broadcast_ss(p0 + ch), w0, w1);
            ACC_ROW(1, _mm256_broadcast_ss(p1 + ch), w0, w1);
            ACC_ROW(2, _mm256_broadcast_ss(p2 + ch), w0, w1);
            ACC_ROW(3, _mm256_broadcast_ss(p3 + ch), w0, w1);
            ACC_ROW(4, _mm256_broadcast_ss(p4 + ch), w0, w1);
            ACC_ROW(5, _mm256_broadcast_ss(p5 + ch), w0, w1);
        }
    }
#define Y_ROW(r) (y + (r)*ldy)
    PUT_ROWS(Y_ROW, full, m0, m1, false, n_valid);
#undef Y_ROW
}

typedef struct forward_job {
    const eg__conv_geometry *g;
    eg__conv_band l;
    const void *x;
    const float *wpack;
    void *y;
    const int64_t *taps;
    int64_t n_ob; /* 16-channel blocks per group */
    atomic_bool failed;
} forward_job;

/* Offsets in a padded band of its output pixels (row-major), n_rows rows of the image's width. */
static void pixel_offsets(const eg__conv_geometry *g, const eg__conv_band *l, int64_t n_rows,
                          int64_t *offsets) {
    for (int64_t row = 0, pix = 0; row < n_rows; row++)
        for (int64_t col = 0; col < g->y.w; col++, pix++)
            offsets[pix] = row * l->row_step + col * l->col_step;
}

/* Tasks: (image, band of output rows). Scratch: the padded band, then the pixel offsets. */
static void forward_tasks(void *context, int64_t begin, int64_t end) {
    forward_job *j = context;
    const eg__conv_geometry *g = j->g;
    const eg__conv_band *l = &j->l;
    bool lowp = g->dtype != EG_DTYPE_F32;
    size_t pad_bytes = (eg__conv_band_floats(l) * sizeof(float) + 63) / 64 * 64;
    size_t offsets_bytes = ((size_t)(l->rows * g->y.w) * sizeof(int64_t) + 63) / 64 * 64;
    size_t out_bytes =
        lowp ? ((size_t)(l->rows * g->y.w * g->out_c) * sizeof(float) + 63) / 64 * 64 : 0;
    char *scratch = aligned_alloc(64, pad_bytes + offsets_bytes + out_bytes);
    if (!scratch) {
        atomic_store(&j->failed, true);
        return;
    }
    float *pad = (float *)scratch;
    int64_t *offsets = (int64_t *)(scratch + pad_bytes);
    float *out = (float *)(scratch + pad_bytes + offsets_bytes); /* a low-precision band's sums */
    for (int64_t task = begin; task < end; task++) {
        int64_t b = task / l->n_bands, r0 = task % l->n_bands * l->rows;
        int64_t n_rows = g->y.h - r0 < l->rows ? g->y.h - r0 : l->rows;
        eg__conv_pad_band(g, l, j->x, b, r0 * g->stride_h, eg__conv_band_in_rows(g, n_rows), pad);
        int64_t n_pix = n_rows * g->y.w;
        pixel_offsets(g, l, n_rows, offsets);
        int64_t y0 = (b * g->p + r0 * g->y.w) * g->out_c; /* the band's first output */
        float *yb = lowp ? out : (float *)j->y + y0;
        for (int64_t grp = 0; grp < g->groups; grp++)
            for (int64_t ob = 0; ob < j->n_ob; ob++) {
                const float *w = j->wpack + (grp * j->n_ob + ob) * g->k * NR;
                int n_ch = g->og - ob * NR < NR ? (int)(g->og - ob * NR) : NR;
                __m256i m0, m1;
                channel_masks(n_ch, &m0, &m1);
                const float *base = pad + grp * g->cg;
                for (int64_t pix0 = 0; pix0 < n_pix; pix0 += MR) {
                    const float *px[MR];
                    for (int r = 0; r < MR; r++)
                        px[r] = base + offsets[pix0 + r < n_pix ? pix0 + r : n_pix - 1];
                    int n_valid = n_pix - pix0 < MR ? (int)(n_pix - pix0) : MR;
                    forward_block(px, j->taps, g->kh * g->kw, g->cg, w,
                                  yb + pix0 * g->out_c + grp * g->og + ob * NR, g->out_c, n_valid,
                                  n_ch == NR, m0, m1);
                }
            }
        if (g->dtype == EG_DTYPE_BF16)
            round_bf16(out, (uint16_t *)j->y + y0, n_pix * g->out_c);
        else if (lowp)
            eg__conv_round_into(g->dtype, out, n_pix * g->out_c, j->y, y0);
    }
    free(scratch);
}

eg_status eg__conv_avx2_forward(const eg__conv_geometry *g, const void *x, const float *w, void *y,
                                const char *what) {
    forward_job job = {.g = g, .x = x, .y = y};
    job.l = eg__conv_band_layout(g, FORWARD_BAND_PIXELS);
    job.n_ob = (g->og + NR - 1) / NR;
    return eg__conv_run_forward(g, &job.l, w, NR, &job.wpack, &job.taps, forward_tasks, &job,
                                &job.failed, what);
}

/* ---- filter gradient ---- */

/* dw[r][0..16) += sum over n_pix output pixels i of px[r][xoff[i]] * dy[i][0..16), for the n_valid
 * filter rows r (dw rows ldw apart, dy rows ldy apart). xoff holds the pixels' offsets in the
 * padded band, so one loop with one index runs over all the sweep's pixels: a loop per output
 * row (14 or 28 pixels here) paid its set-up per row and six pointer increments per pixel; the
 * median call on conv2-conv4 is ~5% faster this way (interleaved A/B, same bits). */
static inline __attribute__((always_inline)) void
filter_block_flat(const float *const *px, const int64_t *xoff, int64_t n_pix, const float *dy,
                  int64_t ldy, float *dw, int64_t ldw, int n_valid, bool full, __m256i m0,
                  __m256i m1) {
    ACC_DECLARE;
    const float *p0 = px[0], *p1 = px[1], *p2 = px[2], *p3 = px[3], *p4 = px[4], *p5 = px[5];
    const float *d = dy;
    for (int64_t i = 0; i < n_pix; i++, d += ldy) {
        int64_t xo = xoff[i];
        __m256 d0, d1;
        if (full) {
            d0 = _mm256_loadu_ps(d);
            d1 = _mm256_loadu_ps(d + 8);
        } else {
            d0 = _mm256_maskload_ps(d, m0);
            d1 = _mm256_maskload_ps(d + 8, m1);
        }
        ACC_ROW(0, _mm256_broadcast_ss(p0 + xo), d0, d1);
        ACC_ROW(1, _mm256_broadcast_ss(p1 + xo), d0, d1);
        ACC_ROW(2, _mm256_broadcast_ss(p2 + xo), d0, d1);
        ACC_ROW(3, _mm256_broadcast_ss(p3 + xo), d0, d1);
        ACC_ROW(4, _mm256_broadcast_ss(p4 + xo), d0, d1);
        ACC_ROW(5, _mm256_broadcast_ss(p5 + xo), d0, d1);
    }
#define DW_ROW(r) (dw + (r)*ldw)
    PUT_ROWS(DW_ROW, full, m0, m1, true, n_valid);
#undef DW_ROW
}

static void filter_flat_full(const float *const *px, const int64_t *xoff, int64_t n_pix,
                             const float *dy, int64_t ldy, float *dw, int64_t ldw, int n_valid) {
    __m256i none = _mm256_setzero_si256();
    filter_block_flat(px, xoff, n_pix, dy, ldy, dw, ldw, n_valid, true, none, none);
}

static void filter_flat_masked(const float *const *px, const int64_t *xoff, int64_t n_pix,
                               const float *dy, int64_t ldy, float *dw, int64_t ldw, int n_valid,
                               __m256i m0, __m256i m1) {
    filter_block_flat(px, xoff, n_pix, dy, ldy, dw, ldw, n_valid, false, m0, m1);
}

/* Rows of one sweep: its dy rows and the padded input it reads stay in L1 while every block of
 * filter rows and output channels passes over them. */
static int64_t sweep_rows_of(const eg__conv_geometry *g) {
    return EG_CONV_FILTER_SWEEP_PIXELS / g->y.w < 1 ? 1 : EG_CONV_FILTER_SWEEP_PIXELS / g->y.w;
}

/* Scratch: the padded band, then the filter rows' offsets in it, then a band's pixel offsets,
 * then (bf16 / f16) a sweep's dy rows widened. */
size_t eg__conv_avx2_filter_scratch(const eg__conv_geometry *g) {
    eg__conv_band l = eg__conv_band_layout(g, EG_CONV_FILTER_BAND_PIXELS);
    size_t dy_floats =
        g->dtype != EG_DTYPE_F32 ? (size_t)(sweep_rows_of(g) * g->y.w * g->out_c) : 0;
    return (eg__conv_band_floats(&l) + 15) / 16 * 16 + (size_t)g->k * 2 +
           (size_t)(l.rows * g->y.w) * 2 + dy_floats;
}

void eg__conv_avx2_filter_chunk(const eg__conv_geometry *g, const void *x, const void *dy,
                                float *partial, int64_t b0, int64_t b1, float *scratch) {
    eg__conv_band l = eg__conv_band_layout(g, EG_CONV_FILTER_BAND_PIXELS);
    float *pad = scratch;
    int64_t *koff = (int64_t *)(scratch + (eg__conv_band_floats(&l) + 15) / 16 * 16);
    for (int64_t t = 0, kk = 0; t < g->kh * g->kw; t++) /* filter row (tap i, j; channel ch) */
        for (int64_t ch = 0; ch < g->cg; ch++, kk++)
            koff[kk] = (t / g->kw * g->dil_h * l.wp + t % g->kw * g->dil_w) * l.c + ch;
    int64_t *xoff = koff + g->k;
    for (int64_t row = 0, pix = 0; row < l.rows; row++)
        for (int64_t col = 0; col < g->y.w; col++, pix++)
            xoff[pix] = row * l.row_step + col * l.col_step;
    int64_t n_ob = (g->og + NR - 1) / NR, sweep_rows = sweep_rows_of(g);
    float *dy_wide = (float *)(xoff + l.rows * g->y.w); /* bf16 / f16: a sweep's dy rows */
    for (int64_t b = b0; b < b1; b++)
        for (int64_t band = 0; band < l.n_bands; band++) {
            int64_t r0 = band * l.rows, n_rows = g->y.h - r0 < l.rows ? g->y.h - r0 : l.rows;
            eg__conv_pad_band(g, &l, x, b, r0 * g->stride_h, eg__conv_band_in_rows(g, n_rows), pad);
            for (int64_t s0 = 0; s0 < n_rows; s0 += sweep_rows) {
                int64_t s_rows = n_rows - s0 < sweep_rows ? n_rows - s0 : sweep_rows;
                const float *dyb =
                    eg__conv_sweep_dy(g, dy, (b * g->p + (r0 + s0) * g->y.w) * g->out_c,
                                      s_rows * g->y.w * g->out_c, dy_wide);
                const float *ps = pad + s0 * l.row_step;
                for (int64_t grp = 0; grp < g->groups; grp++)
                    for (int64_t k0 = 0; k0 < g->k; k0 += MR) {
                        const float *px[MR];
                        for (int r = 0; r < MR; r++)
                            px[r] = ps + grp * g->cg + koff[k0 + r < g->k ? k0 + r : g->k - 1];
                        int n_valid = g->k - k0 < MR ? (int)(g->k - k0) : MR;
                        float *dw = partial + k0 * g->out_c + grp * g->og;
                        for (int64_t ob = 0; ob < n_ob; ob++) {
                            int n_ch = g->og - ob * NR < NR ? (int)(g->og - ob * NR) : NR;
                            const float *d = dyb + grp * g->og + ob * NR;
                            if (n_ch == NR) {
                                filter_flat_full(px, xoff, s_rows * g->y.w, d, g->out_c,
                                                 dw + ob * NR, g->out_c, n_valid);
                            } else {
                                __m256i m0, m1;
                                channel_masks(n_ch, &m0, &m1);
                                filter_flat_masked(px, xoff, s_rows * g->y.w, d, g->out_c,
                                                   dw + ob * NR, g->out_c, n_valid, m0, m1);
                            }
                        }
                    }
            }
        }
}
#else
bool eg__conv_avx2_built(void) {
    return false;
}
eg_status eg__conv_avx2_forward(const eg__conv_geometry *g, const void *x, const float *w, void *y,
                                const char *what) {
    (void)g, (void)x, (void)w, (void)y;
    return eg__error(EG_ERR_UNSUPPORTED, "%s: built without the AVX2 kernels", what);
}
size_t eg__conv_avx2_filter_scratch(const eg__conv_geometry *g) {
    (void)g;
    return 0;
}
void eg__conv_avx2_filter_chunk(const eg__conv_geometry *g, const void *x, const void *dy,
                                float *partial, int64_t b0, int64_t b1, float *scratch) {
    (void)g, (void)x, (void)dy, (void)partial, (void)b0, (void)b1, (void)scratch;
}
#endif
