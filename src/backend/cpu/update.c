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
#include <xmmintrin.h> /* the MXCSR, for flush_subnormals_begin */
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

static void adam_f32(float *restrict v, const float *restrict g, float *restrict m,
                     float *restrict u, int64_t n, const eg__update_params *h) {
#if defined(__x86_64__)
    if (eg__cpu_active_level() >= EG__CPU_AVX2) {
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
