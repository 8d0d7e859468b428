/* Eagle's own f32 NHWC convolution kernels for AVX-512: an implicit GEMM over the zero-padded
 * input bands of conv_internal.h, as conv_avx2.c does for AVX2, with register blocks that fill
 * the 32 zmm registers.
 *
 * This file is compiled with AVX-512 flags (CMakeLists.txt); the library itself targets baseline
 * x86-64, so conv.c calls in here only at the dispatch level EG__CPU_AVX512.
 *
 * Forward (and so the stride-1 input gradient, a flipped-filter forward): block = 14 output
 * pixels x 32 output channels (28 accumulators; 14 x 16 for up to 16 channels per group), per tap
 * and input channel 2 vector loads of the packed filter and 14 broadcasts of the input, 28 FMAs.
 * (6 x 64 blocks measured the same on the 64-channel layers, bench_conv interleaved.) Long
 * filters run in passes of a few taps over the band (FORWARD_FILTER_BYTES).
 * When the block's pixels are consecutive pixels of one output row and the band's pixel step is
 * one the kernel is compiled for, the 14 broadcasts are constant offsets from one pointer: with a
 * pointer per pixel (the general kernel) 14 pointers, the channel index, the filter pointer and
 * the loop bounds overflow the 15 general registers and every tap reloads spilled pointers.
 *
 * Filter gradient: the vectors run along the input channels instead (16 filter rows of one tap),
 * and dy is broadcast: block = 3 such vectors x 8 output channels (24 accumulators), per output
 * pixel 3 vector loads of the padded input and 8 broadcasts of dy, 24 FMAs, from 2 pointers and
 * an index. The accumulators are then the gradient transposed (rows of 16 input channels per
 * output channel); each sweep adds them into the chunk's partial in that transposed layout, and
 * the sum of the chunks' partials writes dw in HWIO.
 *
 * Same bits as conv_avx2.c: every forward output is 0 plus, tap by tap and channel by channel,
 * one fused multiply-add of input times filter, as there; every filter-gradient output sums the
 * same sweeps (EG_CONV_FILTER_SWEEP_PIXELS), each from 0 over its pixels in order with fused
 * multiply-adds, then adds them in order into a partial that starts at 0, and the chunks' partials
 * in order, as there. Lanes are independent, so register width and block shape change no
 * rounding.
 *
 * bf16 and f16 (conv_lowp.c) as in conv_avx2.c: widened band copies, each forward band summed
 * into an f32 buffer and rounded into y once, each sweep's dy rows widened first. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/conv_internal.h"
#include "base/error.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) &&                      \
    defined(__AVX512VL__) && defined(__FMA__)
#include <immintrin.h>

#define LANES 16
/* Output pixels per forward task: enough that per-block costs vanish, few enough that a band's
 * padded input stays in L2. */
#define FORWARD_BAND_PIXELS 128
/* Bytes of packed filter one forward pass over a band's pixel blocks reads: the block's filter
 * rows then stay in L1 while every block of the band uses them (a pass continues the previous
 * pass's sums from y: the same operations in the same order). bench_conv interleaved: faster on
 * conv4, whose filter block otherwise streams from L2 for each pixel block; the same on conv2
 * and conv3. */
#define FORWARD_FILTER_BYTES 32768
/* Filter gradient: input-channel vectors x output channels of the register block (filter_3x8;
 * output-channel tails take the 3x4, 3x2 and 3x1 kernels). */
#define FILTER_KV 3
#define FILTER_MO 8

bool eg__conv_avx512_built(void) {
    return true;
}

static __mmask16 lanes_mask(int64_t n) {
    return n >= LANES ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

/* ---- forward ---- */

/* y[r][0 .. NV*16) = sum over taps t and channels ch of x_r[taps[t] + ch] * w[t * cg + ch][..]
 * for the n_valid pixels r (y rows ldy apart, channels masked by masks[v]); w is the packed
 * (k x NV*16) block. x_r = px[r], or px[0] + r * CS when CS > 0 (consecutive pixels CS floats
 * apart: one pointer, constant offsets). */
#define FORWARD_KERNEL(NAME, MR, NV, CS)                                                           \
    static void NAME(const float *const *px, const int64_t *taps, int64_t n_taps, int64_t cg,      \
                     const float *w, float *y, int64_t ldy, int n_valid, const __mmask16 *masks,   \
                     bool accumulate) {                                                            \
        __m512 acc[MR][NV];                                                                        \
        for (int r = 0; r < MR; r++)                                                               \
            for (int v = 0; v < NV; v++)                                                           \
                acc[r][v] = accumulate                                                             \
                                ? _mm512_maskz_loadu_ps(                                           \
                                      masks[v], y + (r < n_valid ? r : 0) * ldy + LANES * v)       \
                                : _mm512_setzero_ps();                                             \
        for (int64_t t = 0; t < n_taps; t++) {                                                     \
            if ((CS) > 0) { /* one pointer: the broadcasts take constant displacements */          \
                for (const float *q = px[0] + taps[t], *q_end = q + cg; q < q_end;                 \
                     q++, w += NV * LANES) {                                                       \
                    __m512 wv[NV];                                                                 \
                    for (int v = 0; v < NV; v++) wv[v] = _mm512_load_ps(w + LANES * v);            \
                    for (int r = 0; r < MR; r++) {                                                 \
                        __m512 b = _mm512_set1_ps(q[r * (CS)]);                                    \
                        for (int v = 0; v < NV; v++)                                               \
                            acc[r][v] = _mm512_fmadd_ps(b, wv[v], acc[r][v]);                      \
                    }                                                                              \
                }                                                                                  \
                continue;                                                                          \
            }                                                                                      \
            const float *p[MR];                                                                    \
            for (int r = 0; r < MR; r++) p[r] = px[r] + taps[t];                                   \
            for (int64_t ch = 0; ch < cg; ch++, w += NV * LANES) {                                 \
                __m512 wv[NV];                                                                     \
                for (int v = 0; v < NV; v++) wv[v] = _mm512_load_ps(w + LANES * v);                \
                for (int r = 0; r < MR; r++) {                                                     \
                    __m512 b = _mm512_set1_ps(p[r][ch]);                                           \
                    for (int v = 0; v < NV; v++) acc[r][v] = _mm512_fmadd_ps(b, wv[v], acc[r][v]); \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        for (int r = 0; r < MR; r++)                                                               \
            for (int v = 0; v < NV; v++)                                                           \
                _mm512_mask_storeu_ps(y + (r < n_valid ? r : 0) * ldy + LANES * v, masks[v],       \
                                      r < n_valid ? acc[r][v] : acc[0][v]);                        \
    }

typedef void (*forward_kernel)(const float *const *px, const int64_t *taps, int64_t n_taps,
                               int64_t cg, const float *w, float *y, int64_t ldy, int n_valid,
                               const __mmask16 *masks, bool accumulate);

FORWARD_KERNEL(forward_14x2, 14, 2, 0)
FORWARD_KERNEL(forward_14x2_step32, 14, 2, 32)
FORWARD_KERNEL(forward_14x2_step64, 14, 2, 64)
FORWARD_KERNEL(forward_14x1, 14, 1, 0)
FORWARD_KERNEL(forward_14x1_step32, 14, 1, 32)
FORWARD_KERNEL(forward_14x1_step64, 14, 1, 64)

/* A block shape: pixels x vectors, the general kernel and the one for consecutive pixels at the
 * band's pixel step (NULL when none is compiled for it). */
typedef struct forward_shape {
    int mr, nv;
    forward_kernel any, consecutive;
} forward_shape;

static forward_shape forward_shape_of(const eg__conv_geometry *g, int64_t col_step) {
    forward_shape s;
    if (g->og <= LANES) {
        s = (forward_shape){14, 1, forward_14x1, NULL};
        if (col_step == 32) s.consecutive = forward_14x1_step32;
        if (col_step == 64) s.consecutive = forward_14x1_step64;
    } else {
        s = (forward_shape){14, 2, forward_14x2, NULL};
        if (col_step == 32) s.consecutive = forward_14x2_step32;
        if (col_step == 64) s.consecutive = forward_14x2_step64;
    }
    return s;
}

typedef struct forward_job {
    const eg__conv_geometry *g;
    eg__conv_band l;
    forward_shape shape;
    const void *x;
    const float *wpack;
    void *y;
    const int64_t *taps;
    int64_t n_ob;       /* blocks of nv * 16 output channels per group */
    int64_t chunk_taps; /* taps per pass over the band's pixel blocks */
    atomic_bool failed;
} forward_job;

/* Tasks: (image, band of output rows). Scratch: the padded band. */
static void forward_tasks(void *context, int64_t begin, int64_t end) {
    forward_job *j = context;
    const eg__conv_geometry *g = j->g;
    const eg__conv_band *l = &j->l;
    const forward_shape *s = &j->shape;
    int64_t nr = s->nv * LANES, w_out = g->y.w;
    bool lowp = g->dtype != EG_DTYPE_F32;
    size_t pad_bytes = (eg__conv_band_floats(l) * sizeof(float) + 63) / 64 * 64;
    size_t out_bytes =
        lowp ? ((size_t)(l->rows * w_out * g->out_c) * sizeof(float) + 63) / 64 * 64 : 0;
    float *pad = aligned_alloc(64, pad_bytes + out_bytes);
    if (!pad) {
        atomic_store(&j->failed, true);
        return;
    }
    float *out = (float *)((char *)pad + pad_bytes); /* a low-precision band's sums */
    for (int64_t task = begin; task < end; task++) {
        int64_t b = task / l->n_bands, r0 = task % l->n_bands * l->rows;
        int64_t n_rows = g->y.h - r0 < l->rows ? g->y.h - r0 : l->rows;
        eg__conv_pad_band(g, l, j->x, b, r0 * g->stride_h, eg__conv_band_in_rows(g, n_rows), pad);
        int64_t n_pix = n_rows * w_out, n_taps = g->kh * g->kw;
        int64_t y0 = (b * g->p + r0 * w_out) * g->out_c; /* the band's first output */
        float *yb = lowp ? out : (float *)j->y + y0;
        for (int64_t grp = 0; grp < g->groups; grp++)
            for (int64_t ob = 0; ob < j->n_ob; ob++) {
                const float *w = j->wpack + (grp * j->n_ob + ob) * g->k * nr;
                __mmask16 masks[2];
                for (int v = 0; v < s->nv; v++) masks[v] = lanes_mask(g->og - ob * nr - v * LANES);
                const float *base = pad + grp * g->cg;
                for (int64_t t0 = 0; t0 < n_taps; t0 += j->chunk_taps) {
                    int64_t nt = n_taps - t0 < j->chunk_taps ? n_taps - t0 : j->chunk_taps;
                    const float *wt = w + t0 * g->cg * nr;
                    for (int64_t pix0 = 0; pix0 < n_pix; pix0 += s->mr) {
                        int n_valid = n_pix - pix0 < s->mr ? (int)(n_pix - pix0) : s->mr;
                        float *yp = yb + pix0 * g->out_c + grp * g->og + ob * nr;
                        const float *px[14];
                        int64_t row = pix0 / w_out, col = pix0 % w_out;
                        if (s->consecutive && n_valid == s->mr && col + s->mr <= w_out) {
                            px[0] = base + row * l->row_step + col * l->col_step;
                            s->consecutive(px, j->taps + t0, nt, g->cg, wt, yp, g->out_c, n_valid,
                                           masks, t0 > 0);
                            continue;
                        }
                        for (int r = 0; r < s->mr; r++) {
                            int64_t q = pix0 + (r < n_valid ? r : n_valid - 1);
                            px[r] = base + q / w_out * l->row_step + q % w_out * l->col_step;
                        }
                        s->any(px, j->taps + t0, nt, g->cg, wt, yp, g->out_c, n_valid, masks,
                               t0 > 0);
                    }
                }
            }
        if (lowp) eg__conv_round_into(g->dtype, out, n_pix * g->out_c, j->y, y0);
    }
    free(pad);
}

eg_status eg__conv_avx512_forward(const eg__conv_geometry *g, const void *x, const float *w,
                                  void *y, const char *what) {
    forward_job job = {.g = g, .x = x, .y = y};
    job.l = eg__conv_band_layout(g, FORWARD_BAND_PIXELS);
    job.shape = forward_shape_of(g, job.l.col_step);
    int64_t nr = job.shape.nv * LANES;
    job.n_ob = (g->og + nr - 1) / nr;
    /* The taps in equal passes whose packed filter fits FORWARD_FILTER_BYTES. */
    int64_t n_taps = g->kh * g->kw, tap_bytes = g->cg * nr * (int64_t)sizeof(float);
    int64_t passes = (n_taps * tap_bytes + FORWARD_FILTER_BYTES - 1) / FORWARD_FILTER_BYTES;
    if (passes > n_taps) passes = n_taps;
    job.chunk_taps = (n_taps + passes - 1) / passes;
    return eg__conv_run_forward(g, &job.l, w, nr, &job.wpack, &job.taps, forward_tasks, &job,
                                &job.failed, what);
}

/* ---- filter gradient ---- */

/* For the FILTER_KV input-channel vectors v (x at xk[v] + xoff[i], lanes masked by km[v]) and MO
 * output channels m (dy[i * ldy + m]): sum over the n_pix pixels i of x * dy from 0, added into
 * tp[v * tv_stride + m * 16 ..] for the first n_kv vectors. The accumulators are named variables:
 * GCC kept an array of them in registers but also stored it to the stack on every pixel. */
#define FILTER_ACC(m) __m512 a0_##m = _mm512_setzero_ps(), a1_##m = a0_##m, a2_##m = a0_##m
#define FILTER_STEP(m)                                                                             \
    if (mo > m) {                                                                                  \
        __m512 d = _mm512_set1_ps(dy[m]);                                                          \
        a0_##m = _mm512_fmadd_ps(xv0, d, a0_##m);                                                  \
        a1_##m = _mm512_fmadd_ps(xv1, d, a1_##m);                                                  \
        a2_##m = _mm512_fmadd_ps(xv2, d, a2_##m);                                                  \
    }
#define FILTER_ADD(v, m)                                                                           \
    if (mo > m) {                                                                                  \
        float *t = tp + (v)*tv_stride + m * LANES;                                                 \
        _mm512_store_ps(t, _mm512_add_ps(_mm512_load_ps(t), a##v##_##m));                          \
    }
#define FILTER_ADD_ROW(v)                                                                          \
    do {                                                                                           \
        FILTER_ADD(v, 0)                                                                           \
        FILTER_ADD(v, 1)                                                                           \
        FILTER_ADD(v, 2)                                                                           \
        FILTER_ADD(v, 3) FILTER_ADD(v, 4) FILTER_ADD(v, 5) FILTER_ADD(v, 6) FILTER_ADD(v, 7)       \
    } while (0)
#define FILTER_KERNEL(NAME, MO)                                                                    \
    static void NAME(const float *const *xk, const __mmask16 *km, const int64_t *xoff,             \
                     int64_t n_pix, const float *dy, int64_t ldy, float *tp, int64_t tv_stride,    \
                     int n_kv) {                                                                   \
        const int mo = MO;                                                                         \
        FILTER_ACC(0);                                                                             \
        FILTER_ACC(1);                                                                             \
        FILTER_ACC(2);                                                                             \
        FILTER_ACC(3);                                                                             \
        FILTER_ACC(4);                                                                             \
        FILTER_ACC(5);                                                                             \
        FILTER_ACC(6);                                                                             \
        FILTER_ACC(7);                                                                             \
        const float *x0 = xk[0], *x1 = xk[1], *x2 = xk[2];                                         \
        __mmask16 k0 = km[0], k1 = km[1], k2 = km[2];                                              \
        for (int64_t i = 0; i < n_pix; i++, dy += ldy) {                                           \
            int64_t xo = xoff[i];                                                                  \
            __m512 xv0 = _mm512_maskz_loadu_ps(k0, x0 + xo);                                       \
            __m512 xv1 = _mm512_maskz_loadu_ps(k1, x1 + xo);                                       \
            __m512 xv2 = _mm512_maskz_loadu_ps(k2, x2 + xo);                                       \
            FILTER_STEP(0)                                                                         \
            FILTER_STEP(1)                                                                         \
            FILTER_STEP(2)                                                                         \
            FILTER_STEP(3) FILTER_STEP(4) FILTER_STEP(5) FILTER_STEP(6) FILTER_STEP(7)             \
        }                                                                                          \
        FILTER_ADD_ROW(0);                                                                         \
        if (n_kv > 1) FILTER_ADD_ROW(1);                                                           \
        if (n_kv > 2) FILTER_ADD_ROW(2);                                                           \
    }

typedef void (*filter_kernel)(const float *const *xk, const __mmask16 *km, const int64_t *xoff,
                              int64_t n_pix, const float *dy, int64_t ldy, float *tp,
                              int64_t tv_stride, int n_kv);

FILTER_KERNEL(filter_3x8, 8)
FILTER_KERNEL(filter_3x4, 4)
FILTER_KERNEL(filter_3x2, 2)
FILTER_KERNEL(filter_3x1, 1)

bool eg__conv_avx512_filter_fits(const eg__conv_geometry *g) {
    return g->cg >= LANES;
}

/* Input-channel vectors per group: ceil(cg / 16) per tap. */
static int64_t filter_vectors(const eg__conv_geometry *g) {
    return g->kh * g->kw * ((g->cg + LANES - 1) / LANES);
}

size_t eg__conv_avx512_filter_partial_floats(const eg__conv_geometry *g) {
    return (size_t)(g->groups * filter_vectors(g) * g->og * LANES);
}

int64_t eg__conv_avx512_filter_units(const eg__conv_geometry *g) {
    return g->groups * filter_vectors(g);
}

static int64_t sweep_rows_of(const eg__conv_geometry *g) {
    return EG_CONV_FILTER_SWEEP_PIXELS / g->y.w < 1 ? 1 : EG_CONV_FILTER_SWEEP_PIXELS / g->y.w;
}

/* Scratch: the padded band, then a band's pixel offsets, then (bf16 / f16) a sweep's dy rows
 * widened. */
size_t eg__conv_avx512_filter_scratch(const eg__conv_geometry *g) {
    eg__conv_band l = eg__conv_band_layout(g, EG_CONV_FILTER_BAND_PIXELS);
    size_t dy_floats =
        g->dtype != EG_DTYPE_F32 ? (size_t)(sweep_rows_of(g) * g->y.w * g->out_c) : 0;
    return (eg__conv_band_floats(&l) + 15) / 16 * 16 + (size_t)(l.rows * g->y.w) * 2 + dy_floats;
}

void eg__conv_avx512_filter_chunk(const eg__conv_geometry *g, const void *x, const void *dy,
                                  float *tp, int64_t b0, int64_t b1, float *scratch) {
    eg__conv_band l = eg__conv_band_layout(g, EG_CONV_FILTER_BAND_PIXELS);
    float *pad = scratch;
    int64_t *xoff = (int64_t *)(pad + (eg__conv_band_floats(&l) + 15) / 16 * 16);
    memset(tp, 0, eg__conv_avx512_filter_partial_floats(g) * sizeof(float));
    for (int64_t row = 0, pix = 0; row < l.rows; row++)
        for (int64_t col = 0; col < g->y.w; col++, pix++)
            xoff[pix] = row * l.row_step + col * l.col_step;
    int64_t per_tap = (g->cg + LANES - 1) / LANES, n_kv = filter_vectors(g);
    int64_t tv_stride = g->og * LANES, sweep_rows = sweep_rows_of(g);
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
                    for (int64_t kv0 = 0; kv0 < n_kv; kv0 += FILTER_KV) {
                        const float *xk[FILTER_KV];
                        __mmask16 km[FILTER_KV];
                        for (int v = 0; v < FILTER_KV; v++) {
                            int64_t kv = kv0 + v < n_kv ? kv0 + v : n_kv - 1;
                            int64_t t = kv / per_tap, ch0 = kv % per_tap * LANES;
                            xk[v] = ps + grp * g->cg + ch0 +
                                    (t / g->kw * g->dil_h * l.wp + t % g->kw * g->dil_w) * l.c;
                            km[v] = lanes_mask(g->cg - ch0);
                        }
                        int n_valid = n_kv - kv0 < FILTER_KV ? (int)(n_kv - kv0) : FILTER_KV;
                        float *tb = tp + (grp * n_kv + kv0) * tv_stride;
                        const float *d = dyb + grp * g->og;
                        for (int64_t o0 = 0; o0 < g->og;) {
                            int64_t left = g->og - o0;
                            int mo = left >= FILTER_MO ? FILTER_MO
                                     : left >= 4       ? 4
                                     : left >= 2       ? 2
                                                       : 1;
                            filter_kernel f = mo == 8   ? filter_3x8
                                              : mo == 4 ? filter_3x4
                                              : mo == 2 ? filter_3x2
                                                        : filter_3x1;
                            f(xk, km, xoff, s_rows * g->y.w, d + o0, g->out_c, tb + o0 * LANES,
                              tv_stride, n_valid);
                            o0 += mo;
                        }
                    }
            }
        }
}

void eg__conv_avx512_filter_sum(const eg__conv_geometry *g, const float *partials, int64_t n_parts,
                                float *dw, int64_t begin, int64_t end) {
    int64_t per_tap = (g->cg + LANES - 1) / LANES, n_kv = filter_vectors(g);
    size_t part_floats = eg__conv_avx512_filter_partial_floats(g);
    for (int64_t unit = begin; unit < end; unit++) {
        int64_t grp = unit / n_kv, kv = unit % n_kv;
        int64_t t = kv / per_tap, ch0 = kv % per_tap * LANES;
        int64_t lanes = g->cg - ch0 < LANES ? g->cg - ch0 : LANES;
        const float *src = partials + unit * g->og * LANES;
        float *dst = dw + (t * g->cg + ch0) * g->out_c + grp * g->og;
        for (int64_t o = 0; o < g->og; o++) {
            __m512 v = _mm512_load_ps(src + o * LANES);
            for (int64_t c = 1; c < n_parts; c++)
                v = _mm512_add_ps(v, _mm512_load_ps(src + c * part_floats + o * LANES));
            float lane_values[LANES];
            _mm512_storeu_ps(lane_values, v);
            for (int64_t lane = 0; lane < lanes; lane++)
                dst[lane * g->out_c + o] = lane_values[lane];
        }
    }
}
#else
bool eg__conv_avx512_built(void) {
    return false;
}
eg_status eg__conv_avx512_forward(const eg__conv_geometry *g, const void *x, const float *w,
                                  void *y, const char *what) {
    (void)g, (void)x, (void)w, (void)y;
    return eg__error(EG_ERR_UNSUPPORTED, "%s: built without the AVX-512 kernels", what);
}
bool eg__conv_avx512_filter_fits(const eg__conv_geometry *g) {
    (void)g;
    return false;
}
size_t eg__conv_avx512_filter_partial_floats(const eg__conv_geometry *g) {
    (void)g;
    return 0;
}
int64_t eg__conv_avx512_filter_units(const eg__conv_geometry *g) {
    (void)g;
    return 0;
}
size_t eg__conv_avx512_filter_scratch(const eg__conv_geometry *g) {
    (void)g;
    return 0;
}
void eg__conv_avx512_filter_chunk(const eg__conv_geometry *g, const void *x, const void *dy,
                                  float *tp, int64_t b0, int64_t b1, float *scratch) {
    (void)g, (void)x, (void)dy, (void)tp, (void)b0, (void)b1, (void)scratch;
}
void eg__conv_avx512_filter_sum(const eg__conv_geometry *g, const float *partials, int64_t n_parts,
                                float *dw, int64_t begin, int64_t end) {
    (void)g, (void)partials, (void)n_parts, (void)dw, (void)begin, (void)end;
}
#endif
