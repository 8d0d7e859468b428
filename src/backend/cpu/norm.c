/* CPU kernels for normalization: moments (mean and variance over some axes in one kernel) and
 * mul_add (x * scale + shift with broadcasting), the one full-size pass of batch and layer
 * normalization once their per-channel (or per-row) scale and shift are known; batch
 * normalization and its gradient in fused passes. Moments and the batch-norm ops also take bf16
 * and f16 activations with f32 statistics and parameters (mixed precision): widened to f32 as
 * they are read, in registers or a row at a time, never whole. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kernels.h"
#include "backend/cpu/lowp.h"
#include "base/cpu_features.h"
#include "base/error.h"
#include "eagle/nn.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

/* The AVX-512 loops below could otherwise fuse a multiply and an add into one FMA (clang does
 * within an expression by default; GCC does not in ISO C mode), and give other bits than the
 * baseline and AVX2 loops, which have no FMA to fuse with. */
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

#define MUL_ADD_LOOP(T)                                                                            \
    do {                                                                                           \
        if (s[0] == sizeof(T) && s[1] == sizeof(T) && s[2] == 0 && s[3] == 0) {                    \
            T *restrict out = (T *)p[0];                                                           \
            const T *restrict x = (const T *)p[1];                                                 \
            T a = *(const T *)p[2], b = *(const T *)p[3];                                          \
            for (int64_t i = 0; i < n; i++) out[i] = x[i] * a + b;                                 \
        } else if (s[0] == sizeof(T) && s[1] == sizeof(T) && s[2] == sizeof(T) &&                  \
                   s[3] == sizeof(T)) {                                                            \
            T *restrict out = (T *)p[0];                                                           \
            const T *restrict x = (const T *)p[1], *restrict a = (const T *)p[2],                  \
                              *restrict b = (const T *)p[3];                                       \
            for (int64_t i = 0; i < n; i++) out[i] = x[i] * a[i] + b[i];                           \
        } else {                                                                                   \
            for (int64_t i = 0; i < n; i++)                                                        \
                *(T *)(p[0] + i * s[0]) =                                                          \
                    *(const T *)(p[1] + i * s[1]) * *(const T *)(p[2] + i * s[2]) +                \
                    *(const T *)(p[3] + i * s[3]);                                                 \
        }                                                                                          \
    } while (0)

static void mul_add_f32(void *context, int64_t n, char **p, const int64_t *s) {
    (void)context;
    MUL_ADD_LOOP(float);
}

static void mul_add_f64(void *context, int64_t n, char **p, const int64_t *s) {
    (void)context;
    MUL_ADD_LOOP(double);
}

/* x, scale, shift (broadcast together) -> x * scale + shift */
eg_status eg__cpu_mul_add(const eg__kernel_call *call);
eg_status eg__cpu_mul_add(const eg__kernel_call *call) {
    const eg_tensor *operands[4] = {call->output, call->inputs[0], call->inputs[1],
                                    call->inputs[2]};
    eg__nd_loop loop;
    eg__nd_loop_init(&loop, 4, operands);
    eg__nd_loop_run(&loop, call->output->dtype == EG_DTYPE_F32 ? mul_add_f32 : mul_add_f64, NULL);
    return EG_OK;
}

/* ---- moments, batch normalization and its gradient: reductions over some axes ----
 *
 * The reduced axes are brought to the middle of (outer, reduced, inner) over contiguous memory:
 * free when the inputs are contiguous and the axes adjacent, otherwise a copy with the kept axes
 * first (inner = 1). A kept element (o, i) is element o * inner + i of a kept-shaped tensor.
 * Sums run over chunks of NORM_ROWS reduced elements (tasks), combined in chunk order, so the
 * bits depend neither on the thread count nor on the layout (the same chunks either way). With
 * channels last (NHWC, or (B, D) over the batch) inner is the channels and every loop runs along
 * them: contiguous, vectorized. */

#define NORM_ROWS 256

typedef struct norm_plan {
    eg_tensor *sources[2]; /* our own references */
    int n_sources;
    bool direct; /* the sources are the inputs themselves, in their (contiguous) layout */
    int64_t outer, reduced, inner, chunks;
} norm_plan;

static void drop_plan(norm_plan *plan) {
    for (int i = 0; i < plan->n_sources; i++) eg__unref(plan->sources[i]);
    plan->n_sources = 0;
}

/* t with its kept axes first, then the reduced ones: the layout of a plan that is not direct. */
static void permuted_view(const eg_tensor *t, const bool *reduce, eg_tensor *view) {
    *view = *t;
    int m = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int d = 0; d < t->n_dims; d++) {
            if (reduce[d] != (pass == 1)) continue;
            view->shape[m] = t->shape[d];
            view->strides[m++] = t->strides[d];
        }
}

/* Plans n (1 or 2) same-shaped tensors together; they share one layout. */
static eg_status plan_norm(int n, const eg_tensor *const *xs, const eg__attrs *attrs,
                           norm_plan *plan) {
    const eg_tensor *x = xs[0];
    bool reduce[EG_MAX_DIMS] = {0};
    int n_axes = attrs->n_axes;
    for (int i = 0; i < n_axes; i++) reduce[attrs->axes[i]] = true;
    int first = n_axes ? attrs->axes[0] : 0, last = n_axes ? attrs->axes[n_axes - 1] : -1;
    plan->outer = plan->reduced = plan->inner = 1;
    plan->n_sources = 0;
    plan->direct = false;
    bool direct = n_axes && last - first + 1 == n_axes;
    for (int k = 0; k < n; k++) direct = direct && eg__is_contiguous(xs[k]);
    if (direct) {
        for (int d = 0; d < x->n_dims; d++) {
            if (d < first)
                plan->outer *= x->shape[d];
            else if (d <= last)
                plan->reduced *= x->shape[d];
            else
                plan->inner *= x->shape[d];
        }
        for (int k = 0; k < n; k++) {
            plan->sources[k] = (eg_tensor *)xs[k];
            eg__ref(xs[k]);
        }
        plan->n_sources = n;
        plan->direct = true;
    } else {
        for (int d = 0; d < x->n_dims; d++) {
            if (reduce[d])
                plan->reduced *= x->shape[d];
            else
                plan->outer *= x->shape[d];
        }
        for (int k = 0; k < n; k++) {
            eg_tensor permuted;
            permuted_view(xs[k], reduce, &permuted);
            eg_tensor *source;
            if (eg__is_contiguous(&permuted)) { /* already in that order: read it as it is */
                source = (eg_tensor *)xs[k];
                eg__ref(source);
            } else if (!(source = eg__contiguous_temp(&permuted))) {
                drop_plan(plan);
                return eg_last_status();
            }
            plan->sources[plan->n_sources++] = source;
        }
    }
    plan->chunks = (plan->reduced + NORM_ROWS - 1) / NORM_ROWS;
    return EG_OK;
}

static int64_t norm_grain(const norm_plan *plan) {
    return EG_PARALLEL_GRAIN_ELEMENTWISE / (NORM_ROWS * plan->inner) + 1;
}

typedef struct norm_job {
    const norm_plan *plan;
    double *partial; /* two per (task, inner) */
    const void *params[5];
    void *out;
    bool grad; /* affine_chunks: the input gradient (sources g, x), not batch_norm (source x) */
    bool relu; /* fused relu: batch_norm's output clamped at 0; gradients masked by z > 0 with z =
                  x * a + b recomputed from batch_norm's own coefficients (the same bits as the
                  forward's pre-activation, so the same mask as relu_backward's) */
    eg_dtype lowp; /* bf16 or f16 sources (and x-shaped output), f32 parameters; else F32/F64 */
} norm_job;

#define NORM_TASK_BOUNDS                                                                           \
    int64_t o = task / p->chunks, chunk = task % p->chunks, inner = p->inner;                      \
    int64_t r0 = chunk * NORM_ROWS, r1 = r0 + NORM_ROWS < p->reduced ? r0 + NORM_ROWS : p->reduced

/* Element access of the row kernels: the tensors' own type, or bf16 / f16 (S = uint16_t) widened
 * and rounded in registers, so the low-precision kernels make one pass over memory like the f32
 * ones, with half the bytes. The bf16 rounding is eg_f32_to_bf16's (src/core/dtype.c): to nearest
 * even, a NaN quieted, as integer operations the compiler vectorizes. */
#define NORM_LOAD(p, i)     ((p)[i])
#define NORM_STORE(p, i, v) ((p)[i] = (v))
static inline __attribute__((always_inline)) float bf16_load(const uint16_t *p, int64_t i) {
    uint32_t bits = (uint32_t)p[i] << 16;
    float value;
    memcpy(&value, &bits, sizeof value);
    return value;
}
static inline __attribute__((always_inline)) void bf16_store(uint16_t *p, int64_t i, float v) {
    uint32_t x;
    memcpy(&x, &v, sizeof x);
    uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    uint32_t quiet_nan = (x >> 16) | 0x40u;
    p[i] = (uint16_t)((x & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}
/* f16 likewise, branch-free: exact widening (subnormals through an exact integer-to-float
 * conversion and scaling) and rounding to nearest even with the bits of eg_f32_to_f16 (checked
 * against it for every f32): normal results round the 13 dropped bits as integers, subnormal
 * ones are rounded by the FPU itself (adding 0.5, whose ulp is f16's smallest subnormal, 2^-24),
 * overflow gives infinity and a NaN keeps its sign and top payload bits, quieted. The choices
 * are masks, not selects: GCC vectorizes no loop with these as conditionals (control flow). */
static inline __attribute__((always_inline)) float f16_load(const uint16_t *p, int64_t i) {
    uint32_t h = p[i], sign = (h & 0x8000u) << 16, em = h & 0x7fffu;
    uint32_t special = 0u - (uint32_t)(em >= 0x7c00u), small = 0u - (uint32_t)(em < 0x400u);
    uint32_t normal = (em << 13) + 0x38000000u + (special & 0x38000000u);
    float sub = (float)(int32_t)em * 0x1p-24f;
    uint32_t sub_bits;
    memcpy(&sub_bits, &sub, sizeof sub_bits);
    uint32_t bits = ((small & sub_bits) | (~small & normal)) | sign;
    float value;
    memcpy(&value, &bits, sizeof value);
    return value;
}
static inline __attribute__((always_inline)) void f16_store(uint16_t *p, int64_t i, float v) {
    uint32_t x;
    memcpy(&x, &v, sizeof x);
    uint32_t sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
    uint32_t normal = (a - 0x38000000u + 0xfffu + ((a >> 13) & 1u)) >> 13;
    float shifted;
    memcpy(&shifted, &a, sizeof shifted);
    shifted += 0.5f;
    uint32_t sub;
    memcpy(&sub, &shifted, sizeof sub);
    sub -= 0x3f000000u;
    uint32_t nan = 0u - (uint32_t)(a > 0x7f800000u), big = 0u - (uint32_t)(a >= 0x47800000u);
    uint32_t small = 0u - (uint32_t)(a < 0x38800000u);
    uint32_t special = 0x7c00u | (nan & (0x200u | ((a >> 13) & 0x3ffu)));
    uint32_t o = (big & special) | (~big & ((small & sub) | (~small & normal)));
    p[i] = (uint16_t)(o | sign);
}

/* The arithmetic of one task, over `rows` rows of w elements, `ld` elements apart, computed in T
 * (the parameters' type) from elements stored as S: on the tensors themselves (w = ld = inner)
 * or on f16 rows widened into buffers (the F16C kernels below), one copy of the loops the
 * compiler vectorizes for every element type. bf16 and f16 compute in f32 what the f32 kernels
 * compute on the widened tensors, element for element, and round once: the f32 op's result on
 * widened inputs, rounded. */
#define NORM_ROW_KERNELS(T, U, S, LOAD, STORE, suffix, TARGET)                                     \
    /* moments: mean[i] += x (first pass), then m2[i] += (x - mean)^2 (second pass) */             \
    TARGET static inline void moments_sum_rows_##suffix(const S *x, int64_t ld, int64_t rows,      \
                                                        int64_t w, double *restrict mean) {        \
        for (int64_t r = 0; r < rows; r++) {                                                       \
            const S *restrict row = x + r * ld;                                                    \
            for (int64_t i = 0; i < w; i++) mean[i] += (double)LOAD(row, i);                       \
        }                                                                                          \
    }                                                                                              \
    TARGET static inline void moments_dev_rows_##suffix(const S *x, int64_t ld, int64_t rows,      \
                                                        int64_t w, const double *restrict mean,    \
                                                        double *restrict m2) {                     \
        for (int64_t r = 0; r < rows; r++) {                                                       \
            const S *restrict row = x + r * ld;                                                    \
            for (int64_t i = 0; i < w; i++) {                                                      \
                double d = (double)LOAD(row, i) - mean[i];                                         \
                m2[i] += d * d;                                                                    \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    /* batch_norm_backward_sums: sum g and sum g (x - mean). With relu (fa, fb: the forward's      \
     * coefficients) g is masked by x fa + fb > 0 to what relu_backward would have stored (g, or   \
     * +0: all bits clear), so the sums are the same; as an integer AND because GCC does not       \
     * vectorize a float select whose result is converted (10x slower, measured) */                \
    TARGET static inline void grad_sums_rows_##suffix(                                             \
        const S *g, const S *x, int64_t ld, int64_t rows, int64_t w, const T *restrict m,          \
        const T *restrict fa, const T *restrict fb, double *restrict sg, double *restrict sgx) {   \
        for (int64_t r = 0; r < rows; r++) {                                                       \
            const S *restrict grow = g + r * ld, *restrict xrow = x + r * ld;                      \
            if (fa) {                                                                              \
                for (int64_t i = 0; i < w; i++) {                                                  \
                    T xi = LOAD(xrow, i), gm = LOAD(grow, i), gt, z = xi * fa[i] + fb[i];          \
                    U bits;                                                                        \
                    memcpy(&bits, &gm, sizeof bits);                                               \
                    bits &= (U)0 - (U)(z > (T)0);                                                  \
                    memcpy(&gt, &bits, sizeof gt);                                                 \
                    double gi = (double)gt;                                                        \
                    sg[i] += gi;                                                                   \
                    sgx[i] += gi * ((double)xi - (double)m[i]);                                    \
                }                                                                                  \
                continue;                                                                          \
            }                                                                                      \
            for (int64_t i = 0; i < w; i++) {                                                      \
                double gi = (double)LOAD(grow, i);                                                 \
                sg[i] += gi;                                                                       \
                sgx[i] += gi * ((double)LOAD(xrow, i) - (double)m[i]);                             \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    /* out = x * a + b (batch_norm), relu of it with relu */                                       \
    TARGET static inline void affine_rows_##suffix(const S *x, S *out, int64_t ld, int64_t rows,   \
                                                   int64_t w, const T *restrict a,                 \
                                                   const T *restrict b, bool relu) {               \
        for (int64_t r = 0; r < rows; r++) {                                                       \
            const S *restrict xrow = x + r * ld;                                                   \
            S *restrict orow = out + r * ld;                                                       \
            if (relu) {                                                                            \
                for (int64_t i = 0; i < w; i++) {                                                  \
                    T z = LOAD(xrow, i) * a[i] + b[i];                                             \
                    STORE(orow, i, EG__RELU(z, (T)0));                                             \
                }                                                                                  \
            } else {                                                                               \
                for (int64_t i = 0; i < w; i++) STORE(orow, i, LOAD(xrow, i) * a[i] + b[i]);       \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    /* out = g * a + (x * b + c) (its input gradient; with relu, fa non-NULL, g masked by x fa +   \
     * fb > 0, fa and fb the forward's a and b) */                                                 \
    TARGET static inline void affine_grad_rows_##suffix(                                           \
        const S *g, const S *x, S *out, int64_t ld, int64_t rows, int64_t w, const T *restrict a,  \
        const T *restrict b, const T *restrict c, const T *restrict fa, const T *restrict fb) {    \
        for (int64_t r = 0; r < rows; r++) {                                                       \
            const S *restrict grow = g + r * ld, *restrict xrow = x + r * ld;                      \
            S *restrict orow = out + r * ld;                                                       \
            if (fa) {                                                                              \
                for (int64_t i = 0; i < w; i++) {                                                  \
                    T xi = LOAD(xrow, i), gm = LOAD(grow, i), gi, z = xi * fa[i] + fb[i];          \
                    U bits; /* g or +0, as in the sums: a mask (GCC vectorizes it for f16) */      \
                    memcpy(&bits, &gm, sizeof bits);                                               \
                    bits &= (U)0 - (U)(z > (T)0);                                                  \
                    memcpy(&gi, &bits, sizeof gi);                                                 \
                    T dx = gi * a[i] + (xi * b[i] + c[i]);                                         \
                    STORE(orow, i, dx);                                                            \
                }                                                                                  \
            } else {                                                                               \
                for (int64_t i = 0; i < w; i++)                                                    \
                    STORE(orow, i, LOAD(grow, i) * a[i] + (LOAD(xrow, i) * b[i] + c[i]));          \
            }                                                                                      \
        }                                                                                          \
    }

/* One task per (outer, chunk): the row kernels over the chunk's rows of the sources. */
#define NORM_KERNELS(T, U, S, LOAD, STORE, suffix, TARGET)                                         \
    NORM_ROW_KERNELS(T, U, S, LOAD, STORE, suffix, TARGET)                                         \
    /* moments: the chunk's mean and sum of squared deviations from it, per inner element */       \
    TARGET static void moments_chunks_##suffix(void *context, int64_t begin, int64_t end) {        \
        const norm_job *j = context;                                                               \
        const norm_plan *p = j->plan;                                                              \
        for (int64_t task = begin; task < end; task++) {                                           \
            NORM_TASK_BOUNDS;                                                                      \
            const S *x = (const S *)eg__data(p->sources[0]) + (o * p->reduced + r0) * inner;       \
            double *restrict mean = j->partial + 2 * task * inner, *restrict m2 = mean + inner;    \
            for (int64_t i = 0; i < inner; i++) mean[i] = m2[i] = 0;                               \
            moments_sum_rows_##suffix(x, inner, r1 - r0, inner, mean);                             \
            for (int64_t i = 0; i < inner; i++) mean[i] /= (double)(r1 - r0);                      \
            moments_dev_rows_##suffix(x, inner, r1 - r0, inner, mean, m2);                         \
        }                                                                                          \
    }                                                                                              \
    TARGET static void grad_sums_chunks_##suffix(void *context, int64_t begin, int64_t end) {      \
        const norm_job *j = context;                                                               \
        const norm_plan *p = j->plan;                                                              \
        for (int64_t task = begin; task < end; task++) {                                           \
            NORM_TASK_BOUNDS;                                                                      \
            int64_t base = (o * p->reduced + r0) * inner;                                          \
            const S *g = (const S *)eg__data(p->sources[0]) + base;                                \
            const S *x = (const S *)eg__data(p->sources[1]) + base;                                \
            const T *m = (const T *)j->params[0] + o * inner;                                      \
            const T *fa = j->relu ? (const T *)j->params[1] + o * inner : NULL;                    \
            const T *fb = j->relu ? (const T *)j->params[2] + o * inner : NULL;                    \
            double *restrict sg = j->partial + 2 * task * inner, *restrict sgx = sg + inner;       \
            for (int64_t i = 0; i < inner; i++) sg[i] = sgx[i] = 0;                                \
            grad_sums_rows_##suffix(g, x, inner, r1 - r0, inner, m, fa, fb, sg, sgx);              \
        }                                                                                          \
    }                                                                                              \
    /* out = x * a + b (batch_norm; relu of it), or out = g * a + (x * b + c) (its input           \
     * gradient; with relu g masked by x fa + fb > 0, fa and fb the forward's a and b) */          \
    TARGET static void affine_chunks_##suffix(void *context, int64_t begin, int64_t end) {         \
        const norm_job *j = context;                                                               \
        const norm_plan *p = j->plan;                                                              \
        for (int64_t task = begin; task < end; task++) {                                           \
            NORM_TASK_BOUNDS;                                                                      \
            int64_t base = (o * p->reduced + r0) * inner, rows = r1 - r0;                          \
            const T *a = (const T *)j->params[0] + o * inner;                                      \
            const T *b = (const T *)j->params[1] + o * inner;                                      \
            S *out = (S *)j->out + base;                                                           \
            if (!j->grad) {                                                                        \
                const S *x = (const S *)eg__data(p->sources[0]) + base;                            \
                affine_rows_##suffix(x, out, inner, rows, inner, a, b, j->relu);                   \
                continue;                                                                          \
            }                                                                                      \
            const T *c = (const T *)j->params[2] + o * inner;                                      \
            const S *g = (const S *)eg__data(p->sources[0]) + base;                                \
            const S *x = (const S *)eg__data(p->sources[1]) + base;                                \
            const T *fa = j->relu ? (const T *)j->params[3] + o * inner : NULL;                    \
            const T *fb = j->relu ? (const T *)j->params[4] + o * inner : NULL;                    \
            affine_grad_rows_##suffix(g, x, out, inner, rows, inner, a, b, c, fa, fb);             \
        }                                                                                          \
    }

NORM_KERNELS(float, uint32_t, float, NORM_LOAD, NORM_STORE, f32, )
NORM_KERNELS(double, uint64_t, double, NORM_LOAD, NORM_STORE, f64, )
NORM_KERNELS(float, uint32_t, uint16_t, bf16_load, bf16_store, bf16, )
NORM_KERNELS(float, uint32_t, uint16_t, f16_load, f16_store, f16, )
/* The same loops compiled for AVX2 (4 doubles a vector instead of 2). Without FMA contraction
 * (ISO C mode) they compute exactly what the baseline ones do, element by element. */
#if defined(__x86_64__) || defined(__i386__)
NORM_KERNELS(float, uint32_t, float, NORM_LOAD, NORM_STORE, f32_avx2,
             __attribute__((target("avx2"))))
NORM_KERNELS(float, uint32_t, uint16_t, bf16_load, bf16_store, bf16_avx2,
             __attribute__((target("avx2"))))
NORM_KERNELS(float, uint32_t, uint16_t, f16_load, f16_store, f16_avx2,
             __attribute__((target("avx2"))))
/* And for AVX-512 (8 doubles a vector): GCC vectorizes with 512-bit registers only when asked to
 * prefer them; clang knows no such target option (and uses them anyway). With no FMA contraction
 * (FP_CONTRACT above) the bits are the baseline loops' again. */
#ifdef __clang__
#define NORM_AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2")))
#else
#define NORM_AVX512_TARGET                                                                         \
    __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,prefer-vector-width=512")))
#endif
NORM_KERNELS(float, uint32_t, float, NORM_LOAD, NORM_STORE, f32_avx512, NORM_AVX512_TARGET)
NORM_KERNELS(float, uint32_t, uint16_t, bf16_load, bf16_store, bf16_avx512, NORM_AVX512_TARGET)
NORM_KERNELS(float, uint32_t, uint16_t, f16_load, f16_store, f16_avx512, NORM_AVX512_TARGET)

/* f16 with F16C (and rows of at least NORM_F16C_MIN elements: NHWC's channels): the integer
 * conversions above cost more than the f32 arithmetic, F16C's one instruction per 8 elements
 * nothing. Each task converts one row (up to NORM_F16C_BLOCK of its elements) at a time into
 * f32 buffers on the stack, runs the f32 row kernels on it and rounds the result row back, so
 * every value is the same as on the other paths (F16C rounds as eg_f32_to_f16 does: with it). */
#define NORM_F16C_MIN   16
#define NORM_F16C_BLOCK 512
/* Row conversions as wide as the row kernels' loads (a narrower store than the load that reads it
 * back would not forward to it: an AVX-512 loop on a row converted 8 at a time stalls). */
__attribute__((target("avx2,f16c"))) static inline void f16c_widen_avx2(const uint16_t *src,
                                                                        float *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++) dst[i] = _cvtsh_ss(src[i]);
}
__attribute__((target("avx2,f16c"))) static inline void f16c_narrow_avx2(const float *src,
                                                                         uint16_t *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) dst[i] = _cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT);
}
__attribute__((target("avx512f,avx2,f16c"))) static inline void
f16c_widen_avx512(const uint16_t *src, float *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i))));
    f16c_widen_avx2(src + i, dst + i, n - i);
}
__attribute__((target("avx512f,avx2,f16c"))) static inline void
f16c_narrow_avx512(const float *src, uint16_t *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    f16c_narrow_avx2(src + i, dst + i, n - i);
}
#define NORM_F16C_KERNELS(suffix, TARGET)                                                          \
    TARGET static void moments_chunks_f16c_##suffix(void *context, int64_t begin, int64_t end) {   \
        const norm_job *j = context;                                                               \
        const norm_plan *p = j->plan;                                                              \
        float row[NORM_F16C_BLOCK];                                                                \
        for (int64_t task = begin; task < end; task++) {                                           \
            NORM_TASK_BOUNDS;                                                                      \
            const uint16_t *x =                                                                    \
                (const uint16_t *)eg__data(p->sources[0]) + o * p->reduced * inner;                \
            double *mean = j->partial + 2 * task * inner, *m2 = mean + inner;                      \
            for (int64_t i = 0; i < inner; i++) mean[i] = m2[i] = 0;                               \
            for (int64_t i0 = 0; i0 < inner; i0 += NORM_F16C_BLOCK) {                              \
                int64_t w = inner - i0 < NORM_F16C_BLOCK ? inner - i0 : NORM_F16C_BLOCK;           \
                for (int64_t r = r0; r < r1; r++) {                                                \
                    f16c_widen_##suffix(x + r * inner + i0, row, w);                               \
                    moments_sum_rows_f32_##suffix(row, w, 1, w, mean + i0);                        \
                }                                                                                  \
                for (int64_t i = i0; i < i0 + w; i++) mean[i] /= (double)(r1 - r0);                \
                for (int64_t r = r0; r < r1; r++) {                                                \
                    f16c_widen_##suffix(x + r * inner + i0, row, w);                               \
                    moments_dev_rows_f32_##suffix(row, w, 1, w, mean + i0, m2 + i0);               \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    TARGET static void grad_sums_chunks_f16c_##suffix(void *context, int64_t begin, int64_t end) { \
        const norm_job *j = context;                                                               \
        const norm_plan *p = j->plan;                                                              \
        float grow[NORM_F16C_BLOCK], xrow[NORM_F16C_BLOCK];                                        \
        for (int64_t task = begin; task < end; task++) {                                           \
            NORM_TASK_BOUNDS;                                                                      \
            int64_t base = o * p->reduced * inner;                                                 \
            const uint16_t *g = (const uint16_t *)eg__data(p->sources[0]) + base;                  \
            const uint16_t *x = (const uint16_t *)eg__data(p->sources[1]) + base;                  \
            const float *m = (const float *)j->params[0] + o * inner;                              \
            const float *fa = j->relu ? (const float *)j->params[1] + o * inner : NULL;            \
            const float *fb = j->relu ? (const float *)j->params[2] + o * inner : NULL;            \
            double *sg = j->partial + 2 * task * inner, *sgx = sg + inner;                         \
            for (int64_t i = 0; i < inner; i++) sg[i] = sgx[i] = 0;                                \
            for (int64_t i0 = 0; i0 < inner; i0 += NORM_F16C_BLOCK) {                              \
                int64_t w = inner - i0 < NORM_F16C_BLOCK ? inner - i0 : NORM_F16C_BLOCK;           \
                for (int64_t r = r0; r < r1; r++) {                                                \
                    f16c_widen_##suffix(g + r * inner + i0, grow, w);                              \
                    f16c_widen_##suffix(x + r * inner + i0, xrow, w);                              \
                    grad_sums_rows_f32_##suffix(grow, xrow, w, 1, w, m + i0, fa ? fa + i0 : NULL,  \
                                                fb ? fb + i0 : NULL, sg + i0, sgx + i0);           \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    TARGET static void affine_chunks_f16c_##suffix(void *context, int64_t begin, int64_t end) {    \
        const norm_job *j = context;                                                               \
        const norm_plan *p = j->plan;                                                              \
        float first[NORM_F16C_BLOCK], second[NORM_F16C_BLOCK], result[NORM_F16C_BLOCK];            \
        for (int64_t task = begin; task < end; task++) {                                           \
            NORM_TASK_BOUNDS;                                                                      \
            int64_t base = o * p->reduced * inner;                                                 \
            const float *a = (const float *)j->params[0] + o * inner;                              \
            const float *b = (const float *)j->params[1] + o * inner;                              \
            const float *c = j->grad ? (const float *)j->params[2] + o * inner : NULL;             \
            const float *fa = j->grad && j->relu ? (const float *)j->params[3] + o * inner : NULL; \
            const float *fb = j->grad && j->relu ? (const float *)j->params[4] + o * inner : NULL; \
            const uint16_t *s0 = (const uint16_t *)eg__data(p->sources[0]) + base;                 \
            const uint16_t *s1 =                                                                   \
                j->grad ? (const uint16_t *)eg__data(p->sources[1]) + base : NULL;                 \
            uint16_t *out = (uint16_t *)j->out + base;                                             \
            for (int64_t i0 = 0; i0 < inner; i0 += NORM_F16C_BLOCK) {                              \
                int64_t w = inner - i0 < NORM_F16C_BLOCK ? inner - i0 : NORM_F16C_BLOCK;           \
                for (int64_t r = r0; r < r1; r++) {                                                \
                    f16c_widen_##suffix(s0 + r * inner + i0, first, w);                            \
                    if (j->grad) {                                                                 \
                        f16c_widen_##suffix(s1 + r * inner + i0, second, w);                       \
                        affine_grad_rows_f32_##suffix(first, second, result, w, 1, w, a + i0,      \
                                                      b + i0, c + i0, fa ? fa + i0 : NULL,         \
                                                      fb ? fb + i0 : NULL);                        \
                    } else {                                                                       \
                        affine_rows_f32_##suffix(first, result, w, 1, w, a + i0, b + i0, j->relu); \
                    }                                                                              \
                    f16c_narrow_##suffix(result, out + r * inner + i0, w);                         \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }
NORM_F16C_KERNELS(avx2, __attribute__((target("avx2,f16c"))))
/* (several target attributes add up, in GCC and clang) */
#define NORM_AVX512_F16C_TARGET NORM_AVX512_TARGET __attribute__((target("f16c")))
NORM_F16C_KERNELS(avx512, NORM_AVX512_F16C_TARGET)
/* At the dispatch level (EG_CPU=baseline|avx2 take the narrower loops here too): f64, f32, bf16
 * or f16 sources (dtype: the sources'; f32 parameters for bf16 and f16; inner: the plan's). */
#define PICK_LEVEL(name, kind)                                                                     \
    (eg__cpu_active_level() >= EG__CPU_AVX512 ? name##_##kind##_avx512                             \
     : eg__cpu_active_level() >= EG__CPU_AVX2 ? name##_##kind##_avx2                               \
                                              : name##_##kind)
#define PICK_F16(name, inner)                                                                      \
    ((inner) < NORM_F16C_MIN || !eg__cpu_has_f16c() ? PICK_LEVEL(name, f16)                        \
     : eg__cpu_active_level() >= EG__CPU_AVX512     ? name##_f16c_avx512                           \
     : eg__cpu_active_level() >= EG__CPU_AVX2       ? name##_f16c_avx2                             \
                                                    : name##_f16)
#else
#define PICK_LEVEL(name, kind) name##_##kind
#define PICK_F16(name, inner)  name##_f16
#endif
#define PICK(name, dtype, inner)                                                                   \
    ((dtype) == EG_DTYPE_F64    ? name##_f64                                                       \
     : (dtype) == EG_DTYPE_BF16 ? PICK_LEVEL(name, bf16)                                           \
     : (dtype) == EG_DTYPE_F16  ? PICK_F16(name, inner)                                            \
                                : PICK_LEVEL(name, f32))
#undef NORM_F16C_KERNELS
#undef NORM_KERNELS
#undef NORM_ROW_KERNELS
#undef NORM_LOAD
#undef NORM_STORE
#undef NORM_TASK_BOUNDS

static double *alloc_partial(const norm_plan *plan, const char *name) {
    size_t n = (size_t)(plan->outer * plan->chunks * plan->inner) * 2;
    double *partial = malloc(sizeof(double) * (n ? n : 1));
    if (!partial) eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", name);
    return partial;
}

static void store(void *out, bool f32, int64_t index, double value) {
    if (f32)
        ((float *)out)[index] = (float)value;
    else
        ((double *)out)[index] = value;
}

/* x -> (2, kept...): [0] the means, [1] the population variances over attrs->axes. Chunks are
 * combined in order with Chan et al.'s pairwise update (one pass over x, no cancellation). */
eg_status eg__cpu_moments(const eg__kernel_call *call);
eg_status eg__cpu_moments(const eg__kernel_call *call) {
    const eg_tensor *x = call->inputs[0];
    bool f32 = call->output->dtype == EG_DTYPE_F32; /* f32 for bf16 and f16 x too */
    void *out = eg__data(call->output);
    int64_t kept = call->output->n_elems / 2;
    norm_plan plan;
    if (plan_norm(1, &x, call->attrs, &plan) != EG_OK) return eg_last_status();
    eg_status status = EG_OK;
    if (plan.reduced == 0) { /* NaN, like mean and var of nothing */
        for (int64_t i = 0; i < 2 * kept; i++) store(out, f32, i, NAN);
    } else {
        norm_job job = {&plan, alloc_partial(&plan, "moments"), {0}, NULL, false, false, x->dtype};
        if (!job.partial) {
            status = eg_last_status();
        } else {
            eg__parallel_for(plan.outer * plan.chunks, norm_grain(&plan),
                             PICK(moments_chunks, x->dtype, plan.inner), &job);
            int64_t inner = plan.inner;
            for (int64_t o = 0; o < plan.outer; o++)
                for (int64_t i = 0; i < inner; i++) {
                    double n = 0, mean = 0, m2 = 0;
                    for (int64_t c = 0; c < plan.chunks; c++) {
                        const double *part = job.partial + 2 * (o * plan.chunks + c) * inner;
                        double nc = (double)((c + 1) * NORM_ROWS < plan.reduced
                                                 ? NORM_ROWS
                                                 : plan.reduced - c * NORM_ROWS);
                        double delta = part[i] - mean, total = n + nc;
                        mean += delta * (nc / total);
                        m2 += part[inner + i] + delta * delta * (n * nc / total);
                        n = total;
                    }
                    store(out, f32, o * inner + i, mean);
                    store(out, f32, kept + o * inner + i, m2 / n);
                }
        }
        free(job.partial);
    }
    drop_plan(&plan);
    return status;
}

/* Kept-shaped contiguous copies of the inputs listed (NULL where a temp failed). */
static eg_status contiguous_params(int n, const eg_tensor *const *in, eg_tensor **out) {
    eg_status status = EG_OK;
    for (int i = 0; i < n; i++) {
        out[i] = status == EG_OK ? eg__contiguous_temp(in[i]) : NULL;
        if (!out[i]) status = eg_last_status();
    }
    return status;
}

/* Untracked scratch tensors shaped like `like`. */
static eg_status scratch_params(int n, const eg_tensor *like, eg_tensor **out) {
    eg__scope_suspend();
    eg_status status = EG_OK;
    for (int i = 0; i < n; i++) {
        out[i] = status == EG_OK
                     ? eg__tensor_alloc(like->dtype, like->n_dims, like->shape, like->device)
                     : NULL;
        if (!out[i]) status = eg_last_status();
    }
    eg__scope_resume();
    return status;
}

static void relu_backward_f32(void *context, int64_t n, char **p, const int64_t *s);
static void relu_backward_f64(void *context, int64_t n, char **p, const int64_t *s);

/* Runs affine_chunks over the plan's layout when the output shares it (the direct case), else
 * the same arithmetic as strided mul_add loops (through a scratch x * c1 + c0 for the gradient;
 * with relu, the forward clamped in place afterwards, and the gradient's g masked into a scratch
 * first: x * p[3] + p[4], then relu_backward's own arithmetic). bf16 and f16 run affine_chunks
 * either way: into a scratch in the plan's layout, copied into the output's, when not direct.
 * p: a, b (forward) or the gradient's k, c1, c0 and with relu the forward's a, b (f32 for bf16
 * and f16). */
static eg_status run_affine(const eg__kernel_call *call, const norm_plan *plan, eg_tensor *const *p,
                            bool grad, bool relu) {
    eg_dtype dtype = call->output->dtype;
    bool f32 = dtype == EG_DTYPE_F32;
    bool mask = grad && relu;
    if (plan->direct || eg__is_lowp(dtype)) {
        eg_tensor *target = call->output, view;
        if (!plan->direct) {
            bool reduce[EG_MAX_DIMS] = {0};
            for (int i = 0; i < call->attrs->n_axes; i++) reduce[call->attrs->axes[i]] = true;
            permuted_view(call->output, reduce, &view);
            if (scratch_params(1, &view, &target) != EG_OK) return eg_last_status();
        }
        norm_job job = {plan,
                        NULL,
                        {eg__data(p[0]), eg__data(p[1]), grad ? eg__data(p[2]) : NULL,
                         mask ? eg__data(p[3]) : NULL, mask ? eg__data(p[4]) : NULL},
                        eg__data(target),
                        grad,
                        relu,
                        dtype};
        eg__parallel_for(plan->outer * plan->chunks, norm_grain(plan),
                         PICK(affine_chunks, dtype, plan->inner), &job);
        if (plan->direct) return EG_OK;
        eg_status status = eg__copy_into(&view, target);
        eg__unref(target);
        return status;
    }
    eg__nd_loop loop;
    eg_tensor *partial = call->output, *masked = NULL;
    if (grad && scratch_params(1, call->output, &partial) != EG_OK) return eg_last_status();
    if (mask) { /* z = x * a + b, then g where z > 0 in place */
        if (scratch_params(1, call->output, &masked) != EG_OK) {
            eg__unref(partial);
            return eg_last_status();
        }
        const eg_tensor *z[4] = {masked, call->inputs[1], p[3], p[4]};
        eg__nd_loop_init(&loop, 4, z);
        eg__nd_loop_run(&loop, f32 ? mul_add_f32 : mul_add_f64, NULL);
        const eg_tensor *masking[3] = {masked, masked, call->inputs[0]};
        eg__nd_loop_init(&loop, 3, masking);
        eg__nd_loop_run(&loop, f32 ? relu_backward_f32 : relu_backward_f64, NULL);
    }
    const eg_tensor *first[4] = {partial, call->inputs[grad ? 1 : 0], p[grad ? 1 : 0],
                                 p[grad ? 2 : 1]};
    eg__nd_loop_init(&loop, 4, first);
    eg__nd_loop_run(&loop, f32 ? mul_add_f32 : mul_add_f64, NULL);
    if (grad) {
        const eg_tensor *second[4] = {call->output, masked ? masked : call->inputs[0], p[0],
                                      partial};
        eg__nd_loop_init(&loop, 4, second);
        eg__nd_loop_run(&loop, f32 ? mul_add_f32 : mul_add_f64, NULL);
        eg__unref(partial);
        eg__unref(masked);
    } else if (relu) { /* the output is contiguous: relu in place */
        int64_t n = call->output->n_elems;
        if (f32) {
            float *y = eg__data(call->output);
            for (int64_t i = 0; i < n; i++) y[i] = EG__RELU(y[i], 0.0f);
        } else {
            double *y = eg__data(call->output);
            for (int64_t i = 0; i < n; i++) y[i] = EG__RELU(y[i], 0.0);
        }
    }
    return EG_OK;
}

/* batch_norm's coefficients per kept element into ab[0], ab[1] (kept-shaped scratch): a = scale
 * / sqrt(variance + eps) and b = offset - mean a, each rounded to T (like the composite x * a + b
 * would be), from contiguous kept-shaped mean, variance, scale, offset. The relu gradients
 * recompute the forward's pre-activation x * a + b from these same bits. */
static void batch_norm_coefficients(const eg_tensor *mean, const eg_tensor *variance,
                                    const eg_tensor *scale, const eg_tensor *offset, double eps,
                                    eg_tensor *const *ab) {
    eg_dtype dtype = mean->dtype;
    bool f32 = dtype == EG_DTYPE_F32;
    for (int64_t i = 0; i < mean->n_elems; i++) {
        double m = eg__load_as_double(eg__data(mean), dtype, i);
        double v = eg__load_as_double(eg__data(variance), dtype, i);
        double g = eg__load_as_double(eg__data(scale), dtype, i);
        double o = eg__load_as_double(eg__data(offset), dtype, i);
        double a = f32 ? (double)(float)(g / sqrt(v + eps)) : g / sqrt(v + eps);
        store(eg__data(ab[0]), f32, i, a);
        store(eg__data(ab[1]), f32, i, o - m * a);
    }
}

/* x, mean, variance, scale, offset (the four kept-shaped) -> (x - mean) scale / sqrt(variance +
 * eps) + offset, as x * a + b with a, b per kept element; clamped at 0 in the same pass with
 * attrs->ints[0] = relu. */
eg_status eg__cpu_batch_norm(const eg__kernel_call *call);
eg_status eg__cpu_batch_norm(const eg__kernel_call *call) {
    const eg_tensor *x = call->inputs[0];
    double eps = call->attrs->scalars[0];
    eg_tensor *p[4] = {0}, *ab[2] = {0};
    norm_plan plan = {0};
    eg_status status = contiguous_params(4, call->inputs + 1, p);
    if (status == EG_OK) status = scratch_params(2, p[0], ab);
    if (status == EG_OK) status = plan_norm(1, &x, call->attrs, &plan);
    if (status == EG_OK) {
        batch_norm_coefficients(p[0], p[1], p[2], p[3], eps, ab);
        status = run_affine(call, &plan, ab, false, call->attrs->ints[0] == EG_ACTIVATION_RELU);
    }
    drop_plan(&plan);
    for (int i = 0; i < 4; i++) eg__unref(p[i]);
    for (int i = 0; i < 2; i++) eg__unref(ab[i]);
    return status;
}

/* g, x, mean[, variance, scale, offset] -> (2, kept...): [sum g, sum g (x - mean)] over
 * attrs->axes (with relu, g where the forward's pre-activation x * a + b > 0); f32 for bf16 and
 * f16 g and x (whose mean... are f32) */
eg_status eg__cpu_batch_norm_backward_sums(const eg__kernel_call *call);
eg_status eg__cpu_batch_norm_backward_sums(const eg__kernel_call *call) {
    bool f32 = call->output->dtype == EG_DTYPE_F32;
    bool relu = call->attrs->ints[0] == EG_ACTIVATION_RELU;
    void *out = eg__data(call->output);
    int64_t kept = call->output->n_elems / 2;
    eg_tensor *p[4] = {0}, *ab[2] = {0}; /* mean[, variance, scale, offset]; the forward's a, b */
    norm_plan plan = {0};
    eg_status status = contiguous_params(relu ? 4 : 1, call->inputs + 2, p);
    if (status == EG_OK && relu) status = scratch_params(2, p[0], ab);
    if (status == EG_OK) status = plan_norm(2, call->inputs, call->attrs, &plan);
    if (status == EG_OK && relu)
        batch_norm_coefficients(p[0], p[1], p[2], p[3], call->attrs->scalars[0], ab);
    norm_job job = {&plan,
                    NULL,
                    {p[0] ? eg__data(p[0]) : NULL, ab[0] ? eg__data(ab[0]) : NULL,
                     ab[1] ? eg__data(ab[1]) : NULL},
                    NULL,
                    false,
                    relu,
                    call->inputs[1]->dtype};
    if (status == EG_OK && !(job.partial = alloc_partial(&plan, "batch_norm_backward_sums")))
        status = eg_last_status();
    if (status == EG_OK) {
        eg__parallel_for(plan.outer * plan.chunks, norm_grain(&plan),
                         PICK(grad_sums_chunks, job.lowp, plan.inner), &job);
        int64_t inner = plan.inner;
        for (int64_t o = 0; o < plan.outer; o++)
            for (int64_t i = 0; i < inner; i++) {
                double sg = 0, sgx = 0;
                for (int64_t c = 0; c < plan.chunks; c++) {
                    const double *part = job.partial + 2 * (o * plan.chunks + c) * inner;
                    sg += part[i];
                    sgx += part[inner + i];
                }
                store(out, f32, o * inner + i, sg);
                store(out, f32, kept + o * inner + i, sgx);
            }
    }
    free(job.partial);
    drop_plan(&plan);
    for (int i = 0; i < 4; i++) eg__unref(p[i]);
    for (int i = 0; i < 2; i++) eg__unref(ab[i]);
    return status;
}

/* g, x, mean, variance, scale, sums[, offset] -> dx = k (g - sum g / N - (x - mean) r^2 sum g
 * (x - mean) / N), r = 1 / sqrt(variance + eps), k = scale r; computed as g k + (x c1 + c0)
 * (with relu, g where the forward's pre-activation x * a + b > 0). bf16 and f16 g and x take
 * f32 for the rest, and dx is computed in f32 and rounded once to x's dtype. */
eg_status eg__cpu_batch_norm_backward_input(const eg__kernel_call *call);
eg_status eg__cpu_batch_norm_backward_input(const eg__kernel_call *call) {
    bool relu = call->attrs->ints[0] == EG_ACTIVATION_RELU;
    double eps = call->attrs->scalars[0];
    eg_dtype params = call->inputs[2]->dtype; /* x's, or f32 for bf16 and f16 x */
    bool f32 = params == EG_DTYPE_F32;
    eg_tensor *p[5] = {0}, *coef[5] = {0}; /* mean, variance, scale, sums[, offset]; k, c1, c0[,
                                              the forward's a, b] */
    norm_plan plan = {0};
    eg_status status = contiguous_params(4, call->inputs + 2, p);
    if (status == EG_OK && relu) status = contiguous_params(1, call->inputs + 6, p + 4);
    if (status == EG_OK) status = scratch_params(relu ? 5 : 3, p[0], coef);
    if (status == EG_OK) status = plan_norm(2, call->inputs, call->attrs, &plan);
    if (status == EG_OK && relu) batch_norm_coefficients(p[0], p[1], p[2], p[4], eps, coef + 3);
    if (status == EG_OK) {
        int64_t kept = p[0]->n_elems;
        double n = (double)plan.reduced;
        for (int64_t i = 0; i < kept; i++) {
            double m = eg__load_as_double(eg__data(p[0]), params, i);
            double v = eg__load_as_double(eg__data(p[1]), params, i);
            double g = eg__load_as_double(eg__data(p[2]), params, i);
            double sg = eg__load_as_double(eg__data(p[3]), params, i);
            double sgx = eg__load_as_double(eg__data(p[3]), params, kept + i);
            double r = 1 / sqrt(v + eps), k = g * r;
            double c1 = -k * r * r * sgx / n;
            store(eg__data(coef[0]), f32, i, k);
            store(eg__data(coef[1]), f32, i, c1);
            store(eg__data(coef[2]), f32, i, -k * sg / n - m * c1);
        }
        status = run_affine(call, &plan, coef, true, relu);
    }
    drop_plan(&plan);
    for (int i = 0; i < 5; i++) eg__unref(p[i]);
    for (int i = 0; i < 5; i++) eg__unref(coef[i]);
    return status;
}

/* ---- relu's gradient ---- */

#define RELU_BACKWARD_LOOP(T)                                                                      \
    do {                                                                                           \
        if (s[0] == sizeof(T) && s[1] == sizeof(T) && s[2] == sizeof(T)) {                         \
            T *restrict out = (T *)p[0];                                                           \
            const T *restrict x = (const T *)p[1], *restrict g = (const T *)p[2];                  \
            /* both loaded unconditionally: a select the compiler vectorizes, not a branch */      \
            for (int64_t i = 0; i < n; i++) {                                                      \
                T xi = x[i], gi = g[i];                                                            \
                out[i] = xi > (T)0 ? gi : (T)0;                                                    \
            }                                                                                      \
        } else {                                                                                   \
            for (int64_t i = 0; i < n; i++)                                                        \
                *(T *)(p[0] + i * s[0]) =                                                          \
                    *(const T *)(p[1] + i * s[1]) > (T)0 ? *(const T *)(p[2] + i * s[2]) : (T)0;   \
        }                                                                                          \
    } while (0)

static void relu_backward_f32(void *context, int64_t n, char **p, const int64_t *s) {
    (void)context;
    RELU_BACKWARD_LOOP(float);
}

static void relu_backward_f64(void *context, int64_t n, char **p, const int64_t *s) {
    (void)context;
    RELU_BACKWARD_LOOP(double);
}

/* x, g (broadcast together) -> g where x > 0, else 0 */
eg_status eg__cpu_relu_backward(const eg__kernel_call *call);
eg_status eg__cpu_relu_backward(const eg__kernel_call *call) {
    const eg_tensor *operands[3] = {call->output, call->inputs[0], call->inputs[1]};
    eg__nd_loop loop;
    eg__nd_loop_init(&loop, 3, operands);
    eg__nd_loop_run(
        &loop, call->output->dtype == EG_DTYPE_F32 ? relu_backward_f32 : relu_backward_f64, NULL);
    return EG_OK;
}
