/* Optimizer updates on the CPU: SGD, Adam/AdamW and RMSprop with Keras' formulas, each one fused
 * in-place loop per variable over raw f32/f64 data (variable and slots together), computed in the
 * variable's dtype. The optimizers (src/optim) compute the step's scalars and hand the update to
 * the device's backend; graph replay hands it tile by tile (backend.h: update_range). */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "backend/cpu/kernels.h"
#include "base/cpu_features.h"
#include "base/threadpool.h"

#if defined(__x86_64__) || defined(__SSE2__)
#include <immintrin.h> /* the MXCSR (flush_subnormals_begin); the AVX-512 Adam */
#endif

/* Each loop: v (n,) the variable, g (n,) the gradient, s0..s2 the slots in kind order; all
 * contiguous, same dtype T; computed in T like Keras. */
#define DEFINE_UPDATES(T, SUFFIX, SQRT)                                                            \
    static void sgd_##SUFFIX(T *restrict v, const T *restrict g, T *restrict m, int64_t n,         \
                             const eg__update_params *h) {                                         \
        const T lr = (T)h->lr, wd = (T)h->weight_decay, mom = (T)h->momentum;                      \
        for (int64_t i = 0; i < n; i++) {                                                          \
            T x = v[i];                                                                            \
            if (wd != 0) x = x - x * wd * lr;                                                      \
            if (m) {                                                                               \
                T mi = -g[i] * lr + m[i] * mom;                                                    \
                m[i] = mi;                                                                         \
                x = h->nesterov ? x + (-g[i] * lr + mi * mom) : x + mi;                            \
            } else {                                                                               \
                x = x - g[i] * lr;                                                                 \
            }                                                                                      \
            v[i] = x;                                                                              \
        }                                                                                          \
    }                                                                                              \
    static void rmsprop_##SUFFIX(T *restrict v, const T *restrict g, T *restrict u, T *restrict m, \
                                 T *restrict a, int64_t n, const eg__update_params *h) {           \
        const T lr = (T)h->lr, wd = (T)h->weight_decay, mom = (T)h->momentum;                      \
        const T rho = (T)h->rho, one_minus_rho = (T)(1.0 - h->rho), eps = (T)h->epsilon;           \
        for (int64_t i = 0; i < n; i++) {                                                          \
            T x = v[i];                                                                            \
            if (wd != 0) x = x - x * wd * lr;                                                      \
            T gi = g[i];                                                                           \
            T ui = rho * u[i] + one_minus_rho * (gi * gi);                                         \
            u[i] = ui;                                                                             \
            T denominator = ui + eps;                                                              \
            if (a) {                                                                               \
                T ai = rho * a[i] + one_minus_rho * gi;                                            \
                a[i] = ai;                                                                         \
                denominator = ui - ai * ai + eps;                                                  \
            }                                                                                      \
            T increment = (lr * gi) / SQRT(denominator);                                           \
            if (m) {                                                                               \
                T mi = mom * m[i] + increment;                                                     \
                m[i] = mi;                                                                         \
                x = x - mi;                                                                        \
            } else {                                                                               \
                x = x - increment;                                                                 \
            }                                                                                      \
            v[i] = x;                                                                              \
        }                                                                                          \
    }

DEFINE_UPDATES(float, f32, sqrtf)
DEFINE_UPDATES(double, f64, sqrt)
#undef DEFINE_UPDATES

/* Adam's loop on its own: it is compiled twice for f32 (see adam_f32). */
#define DEFINE_ADAM(T, NAME, SQRT, ATTR)                                                           \
    ATTR static void NAME(T *restrict v, const T *restrict g, T *restrict m, T *restrict u,        \
                          int64_t n, const eg__update_params *h) {                                 \
        const T lr = (T)h->lr, wd = (T)h->weight_decay, alpha = (T)h->alpha;                       \
        const T one_minus_b1 = (T)(1.0 - h->beta_1), one_minus_b2 = (T)(1.0 - h->beta_2);          \
        const T eps = (T)h->epsilon;                                                               \
        for (int64_t i = 0; i < n; i++) {                                                          \
            T x = v[i];                                                                            \
            if (wd != 0) x = x - x * wd * lr;                                                      \
            T gi = g[i];                                                                           \
            T mi = m[i] + (gi - m[i]) * one_minus_b1;                                              \
            T ui = u[i] + (gi * gi - u[i]) * one_minus_b2;                                         \
            m[i] = mi;                                                                             \
            u[i] = ui;                                                                             \
            v[i] = x - (mi * alpha) / (SQRT(ui) + eps);                                            \
        }                                                                                          \
    }

DEFINE_ADAM(float, adam_f32_sse2, sqrtf, )
DEFINE_ADAM(double, adam_f64, sqrt, )
#if defined(__x86_64__)
/* The same loop in 8-wide vectors: sqrt, divide, multiply and add are exact in every width, so
 * the bits are those of the SSE2 loop (no "fma" target: a contracted multiply-add would round
 * differently). Adam was 18% of the seed model's step in its 4-wide form. */
DEFINE_ADAM(float, adam_f32_avx2, sqrtf, __attribute__((target("avx2"))))
#endif
#undef DEFINE_ADAM

#if defined(__x86_64__)
/* AVX-512, without the divider: exact sqrt and divide cost as much per element in 16-wide
 * registers as in 8-wide ones (one shared unit), and bound the AVX2 loop. Here sqrt(u) is
 * rsqrt14 with one Newton step (within 1 ulp of the rounded root) and the quotient rcp14's
 * product with one FMA correction (within 1 ulp of the rounded quotient of those operands; the
 * correction squares rcp14's 2^-14 error). The loop is then bound by the two ports that zmm
 * arithmetic has, so the moments take fused multiply-adds as well: fmaf(g - m, 1 - b1, m) and
 * fmaf(fmaf(g, g, -u), 1 - b2, u), two roundings fewer than the other paths' formulas. So the
 * bits differ from the other paths: tests/test_optim.c asserts these moments bitwise and the
 * step within 3 ulp of a double-precision evaluation on every path. Every element still depends
 * on its own inputs only (the tail is the same code, masked), not on the tile or thread that
 * updates it. A vector whose step comes out NaN (u negative, infinite or NaN; m alpha infinite
 * or NaN; a quotient that overflows) is recomputed with the exact sqrt and divide, so its
 * special values are the exact formula's. */
#define ADAM_AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")))
ADAM_AVX512_TARGET static void adam_f32_avx512(float *restrict v, const float *restrict g,
                                               float *restrict m, float *restrict u, int64_t n,
                                               const eg__update_params *h) {
    const __m512 lr = _mm512_set1_ps((float)h->lr), wd = _mm512_set1_ps((float)h->weight_decay);
    const __m512 alpha = _mm512_set1_ps((float)h->alpha);
    const __m512 one_minus_b1 = _mm512_set1_ps((float)(1.0 - h->beta_1));
    const __m512 one_minus_b2 = _mm512_set1_ps((float)(1.0 - h->beta_2));
    const __m512 eps = _mm512_set1_ps((float)h->epsilon), half = _mm512_set1_ps(0.5f);
    const __m512 zero = _mm512_setzero_ps();
    const bool decay = (float)h->weight_decay != 0;
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        __m512 x = _mm512_maskz_loadu_ps(k, v + i), gi = _mm512_maskz_loadu_ps(k, g + i);
        __m512 mi = _mm512_maskz_loadu_ps(k, m + i), ui = _mm512_maskz_loadu_ps(k, u + i);
        if (decay) x = _mm512_sub_ps(x, _mm512_mul_ps(_mm512_mul_ps(x, wd), lr));
        mi = _mm512_fmadd_ps(_mm512_sub_ps(gi, mi), one_minus_b1, mi);
        ui = _mm512_fmadd_ps(_mm512_fmsub_ps(gi, gi, ui), one_minus_b2, ui);
        _mm512_mask_storeu_ps(m + i, k, mi);
        _mm512_mask_storeu_ps(u + i, k, ui);
        __m512 numerator = _mm512_mul_ps(mi, alpha);
        /* root = u y + u y (1/2 - u y y / 2); u = 0 would give 0 inf: the mask keeps it 0 (and
         * lets a NaN u through, to be recomputed) */
        __m512 y = _mm512_rsqrt14_ps(ui);
        __m512 root = _mm512_mul_ps(ui, y), half_y = _mm512_mul_ps(y, half);
        root = _mm512_maskz_fmadd_ps(_mm512_cmp_ps_mask(ui, zero, _CMP_NEQ_UQ), root,
                                     _mm512_fnmadd_ps(root, half_y, half), root);
        __m512 d = _mm512_add_ps(root, eps), r = _mm512_rcp14_ps(d);
        __m512 q = _mm512_mul_ps(numerator, r);
        __m512 step = _mm512_fmadd_ps(_mm512_fnmadd_ps(q, d, numerator), r, q);
        if (_mm512_cmp_ps_mask(step, step, _CMP_UNORD_Q))
            step = _mm512_div_ps(numerator, _mm512_add_ps(_mm512_sqrt_ps(ui), eps));
        _mm512_mask_storeu_ps(v + i, k, _mm512_sub_ps(x, step));
    }
}
#endif

static void adam_f32(float *restrict v, const float *restrict g, float *restrict m,
                     float *restrict u, int64_t n, const eg__update_params *h) {
#if defined(__x86_64__)
    eg__cpu_level level = eg__cpu_active_level();
    if (level >= EG__CPU_AVX512) {
        adam_f32_avx512(v, g, m, u, n, h);
        return;
    }
    if (level >= EG__CPU_AVX2) {
        adam_f32_avx2(v, g, m, u, n, h);
        return;
    }
#endif
    adam_f32_sse2(v, g, m, u, n, h);
}

/* Updates run with subnormals flushed to zero (x86's FTZ and DAZ, as TensorFlow's CPU kernels
 * run), the caller's mode restored after. A parameter whose gradient stays 0 (a pixel that is 0
 * in every image, a dead unit) has its moments decay by beta each step into the subnormal range,
 * where every operation on them takes a microcode assist: after 2,000 Fashion-MNIST steps 2,352
 * of the seed model's 50,176 first-layer momenta were subnormal, in 27 % of the 8-wide vectors,
 * and the assists were 20-25 us of its 47 us update. Flushed, those moments become 0; over 1,500
 * steps the weights stayed bitwise the same. */
#if defined(__x86_64__) || defined(__SSE2__)
#define FLUSH_SUBNORMALS_BITS 0x8040u /* FTZ (bit 15) | DAZ (bit 6) */
typedef unsigned int float_mode;
static float_mode flush_subnormals_begin(void) {
    float_mode saved = _mm_getcsr();
    _mm_setcsr(saved | FLUSH_SUBNORMALS_BITS);
    return saved;
}
static void flush_subnormals_end(float_mode saved) {
    _mm_setcsr(saved);
}
#else
typedef int float_mode;
static float_mode flush_subnormals_begin(void) {
    return 0;
}
static void flush_subnormals_end(float_mode saved) {
    (void)saved;
}
#endif

/* Elements [start, start + n) of one variable's update: v and the slots are the variable's
 * whole arrays (NULL where a slot is unused), g the n gradient elements of the range; every
 * pointer already checked. */
static void update_range(const eg__update_params *h, eg_dtype dtype, void *v_base,
                         void *const *slot_base, int64_t start, int64_t n, const void *g) {
    size_t size = eg_dtype_size(dtype);
    void *v = (char *)v_base + (size_t)start * size;
    void *slot[EG__UPDATE_MAX_SLOTS] = {0};
    for (int k = 0; k < EG__UPDATE_MAX_SLOTS; k++)
        if (slot_base[k]) slot[k] = (char *)slot_base[k] + (size_t)start * size;
    bool f32 = dtype == EG_DTYPE_F32;
    float_mode saved = flush_subnormals_begin();
    switch (h->rule) {
    case EG__UPDATE_SGD:
        if (f32)
            sgd_f32(v, g, slot[0], n, h);
        else
            sgd_f64(v, g, slot[0], n, h);
        break;
    case EG__UPDATE_ADAM:
        if (f32)
            adam_f32(v, g, slot[0], slot[1], n, h);
        else
            adam_f64(v, g, slot[0], slot[1], n, h);
        break;
    case EG__UPDATE_RMSPROP:
        if (f32)
            rmsprop_f32(v, g, slot[0], slot[1], slot[2], n, h);
        else
            rmsprop_f64(v, g, slot[0], slot[1], slot[2], n, h);
        break;
    }
    flush_subnormals_end(saved);
}

typedef struct update_job {
    const eg__update_params *h;
    const eg__update_piece *pieces;
    int n_pieces;
} update_job;

static void run_update_job(void *context, int64_t begin, int64_t end) {
    const update_job *job = context;
    for (int i = 0; i < job->n_pieces && begin < end; i++) {
        const eg__update_piece *piece = &job->pieces[i];
        int64_t piece_end = piece->first + piece->count;
        if (piece_end <= begin) continue;
        int64_t stop = end < piece_end ? end : piece_end;
        int64_t start = begin - piece->first;
        const char *grad = (const char *)piece->grad + (size_t)start * eg_dtype_size(piece->dtype);
        update_range(job->h, piece->dtype, piece->variable, piece->slots, start, stop - begin,
                     grad);
        begin = stop;
    }
}

/* Elements of an update below which it stays on one thread. Not the wake-up cost alone (Adam
 * takes ~1 ns an element): a variable updated half on each core is then read by the next step's
 * product on one core, from the other core's cache. At 16384 the seed model (50,890 parameters)
 * split its update and its eager step at 2 threads took ~40 us more than at 1 (`eagle bench
 * modes`); the 784-512-512-10 model (669,706) still splits. */
enum { UPDATE_PARALLEL_GRAIN = 1 << 18 };

void eg__cpu_update_range(const eg__update_params *params, eg_dtype dtype, void *variable,
                          void *const *slots, int64_t start, int64_t n, const void *grad) {
    update_range(params, dtype, variable, slots, start, n, grad);
}

void eg__cpu_update_many(const eg__update_params *params, const eg__update_piece *pieces,
                         int n_pieces, int64_t total) {
    update_job job = {.h = params, .pieces = pieces, .n_pieces = n_pieces};
    eg__parallel_for(total, UPDATE_PARALLEL_GRAIN, run_update_job, &job);
}
