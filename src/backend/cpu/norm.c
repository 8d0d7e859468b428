/* CPU kernels for normalization: moments (mean and variance over some axes in one kernel) and
 * mul_add (x * scale + shift with broadcasting), the one full-size pass of batch and layer
 * normalization once their per-channel (or per-row) scale and shift are known. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kernels.h"
#include "base/cpu_features.h"
#include "base/error.h"
#include "eagle/nn.h"

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
            eg_tensor permuted = *xs[k];
            int m = 0;
            for (int pass = 0; pass < 2; pass++)
                for (int d = 0; d < x->n_dims; d++) {
                    if (reduce[d] != (pass == 1)) continue;
                    permuted.shape[m] = xs[k]->shape[d];
                    permuted.strides[m++] = xs[k]->strides[d];
                }
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
} norm_job;

#define NORM_TASK_BOUNDS                                                                           \
    int64_t o = task / p->chunks, chunk = task % p->chunks, inner = p->inner;                      \
    int64_t r0 = chunk * NORM_ROWS, r1 = r0 + NORM_ROWS < p->reduced ? r0 + NORM_ROWS : p->reduced

#define NORM_KERNELS(T, U, suffix, TARGET)                                                         \
    /* moments: the chunk's mean and sum of squared deviations from it, per inner element */       \
    TARGET static void moments_chunks_##suffix(void *context, int64_t begin, int64_t end) {        \
        const norm_job *j = context;                                                               \
        const norm_plan *p = j->plan;                                                              \
        for (int64_t task = begin; task < end; task++) {                                           \
            NORM_TASK_BOUNDS;                                                                      \
            const T *x = (const T *)eg__data(p->sources[0]) + o * p->reduced * inner;              \
            double *restrict mean = j->partial + 2 * task * inner, *restrict m2 = mean + inner;    \
            for (int64_t i = 0; i < inner; i++) mean[i] = m2[i] = 0;                               \
            for (int64_t r = r0; r < r1; r++) {                                                    \
                const T *restrict row = x + r * inner;                                             \
                for (int64_t i = 0; i < inner; i++) mean[i] += (double)row[i];                     \
            }                                                                                      \
            for (int64_t i = 0; i < inner; i++) mean[i] /= (double)(r1 - r0);                      \
            for (int64_t r = r0; r < r1; r++) {                                                    \
                const T *restrict row = x + r * inner;                                             \
                for (int64_t i = 0; i < inner; i++) {                                              \
                    double d = (double)row[i] - mean[i];                                           \
                    m2[i] += d * d;                                                                \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    /* batch_norm_backward_sums: sum g and sum g (x - mean) of the chunk. With relu (params a, b:  \
     * the forward's coefficients) g is masked by x a + b > 0 to what relu_backward would have     \
     * stored (g, or +0: all bits clear), so the sums are the same; as an integer AND because GCC  \
     * does not vectorize a float select whose result is converted (10x slower, measured) */       \
    TARGET static void grad_sums_chunks_##suffix(void *context, int64_t begin, int64_t end) {      \
        const norm_job *j = context;                                                               \
        const norm_plan *p = j->plan;                                                              \
        for (int64_t task = begin; task < end; task++) {                                           \
            NORM_TASK_BOUNDS;                                                                      \
            const T *g = (const T *)eg__data(p->sources[0]) + o * p->reduced * inner;              \
            const T *x = (const T *)eg__data(p->sources[1]) + o * p->reduced * inner;              \
            const T *restrict m = (const T *)j->params[0] + o * inner;                             \
            const T *restrict fa = j->relu ? (const T *)j->params[1] + o * inner : NULL;           \
            const T *restrict fb = j->relu ? (const T *)j->params[2] + o * inner : NULL;           \
            double *restrict sg = j->partial + 2 * task * inner, *restrict sgx = sg + inner;       \
            for (int64_t i = 0; i < inner; i++) sg[i] = sgx[i] = 0;                                \
            for (int64_t r = r0; r < r1; r++) {                                                    \
                const T *restrict grow = g + r * inner, *restrict xrow = x + r * inner;            \
                if (j->relu) {                                                                     \
                    for (int64_t i = 0; i < inner; i++) {                                          \
                        T gm = grow[i], gt, z = xrow[i] * fa[i] + fb[i];                           \
                        U bits;                                                                    \
                        memcpy(&bits, &gm, sizeof bits);                                           \
                        bits &= (U)0 - (U)(z > (T)0);                                              \
                        memcpy(&gt, &bits, sizeof gt);                                             \
                        double gi = (double)gt;                                                    \
                        sg[i] += gi;                                                               \
                        sgx[i] += gi * ((double)xrow[i] - (double)m[i]);                           \
                    }                                                                              \
                    continue;                                                                      \
                }                                                                                  \
                for (int64_t i = 0; i < inner; i++) {                                              \
                    double gi = (double)grow[i];                                                   \
                    sg[i] += gi;                                                                   \
                    sgx[i] += gi * ((double)xrow[i] - (double)m[i]);                               \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    /* out = x * a + b (batch_norm; relu of it), or out = g * a + (x * b + c) (its input           \
     * gradient; with relu g masked by x fa + fb > 0, fa and fb the forward's a and b) */          \
    TARGET static void affine_chunks_##suffix(void *context, int64_t begin, int64_t end) {         \
        const norm_job *j = context;                                                               \
        const norm_plan *p = j->plan;                                                              \
        for (int64_t task = begin; task < end; task++) {                                           \
            NORM_TASK_BOUNDS;                                                                      \
            int64_t base = o * p->reduced * inner;                                                 \
            const T *restrict a = (const T *)j->params[0] + o * inner;                             \
            const T *restrict b = (const T *)j->params[1] + o * inner;                             \
            T *out = (T *)j->out + base;                                                           \
            if (!j->grad) {                                                                        \
                const T *x = (const T *)eg__data(p->sources[0]) + base;                            \
                for (int64_t r = r0; r < r1; r++) {                                                \
                    const T *restrict xrow = x + r * inner;                                        \
                    T *restrict orow = out + r * inner;                                            \
                    if (j->relu) {                                                                 \
                        for (int64_t i = 0; i < inner; i++) {                                      \
                            T z = xrow[i] * a[i] + b[i];                                           \
                            orow[i] = EG__RELU(z, (T)0);                                           \
                        }                                                                          \
                    } else {                                                                       \
                        for (int64_t i = 0; i < inner; i++) orow[i] = xrow[i] * a[i] + b[i];       \
                    }                                                                              \
                }                                                                                  \
                continue;                                                                          \
            }                                                                                      \
            const T *restrict c = (const T *)j->params[2] + o * inner;                             \
            const T *g = (const T *)eg__data(p->sources[0]) + base;                                \
            const T *x = (const T *)eg__data(p->sources[1]) + base;                                \
            const T *restrict fa = j->relu ? (const T *)j->params[3] + o * inner : NULL;           \
            const T *restrict fb = j->relu ? (const T *)j->params[4] + o * inner : NULL;           \
            for (int64_t r = r0; r < r1; r++) {                                                    \
                const T *restrict grow = g + r * inner, *restrict xrow = x + r * inner;            \
                T *restrict orow = out + r * inner;                                                \
                if (j->relu) {                                                                     \
                    for (int64_t i = 0; i < inner; i++) {                                          \
                        T xi = xrow[i], gm = grow[i], z = xi * fa[i] + fb[i];                      \
                        T gi = z > (T)0 ? gm : (T)0;                                               \
                        orow[i] = gi * a[i] + (xi * b[i] + c[i]);                                  \
                    }                                                                              \
                } else {                                                                           \
                    for (int64_t i = 0; i < inner; i++)                                            \
                        orow[i] = grow[i] * a[i] + (xrow[i] * b[i] + c[i]);                        \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }

NORM_KERNELS(float, uint32_t, f32, )
NORM_KERNELS(double, uint64_t, f64, )
/* The same loops compiled for AVX2 (4 doubles a vector instead of 2). Without FMA contraction
 * (ISO C mode) they compute exactly what the baseline ones do, element by element. */
#if defined(__x86_64__) || defined(__i386__)
NORM_KERNELS(float, uint32_t, f32_avx2, __attribute__((target("avx2"))))
/* And for AVX-512 (8 doubles a vector): GCC vectorizes with 512-bit registers only when asked to
 * prefer them; clang knows no such target option (and uses them anyway). With no FMA contraction
 * (FP_CONTRACT above) the bits are the baseline loops' again. */
#ifdef __clang__
#define NORM_AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2")))
#else
#define NORM_AVX512_TARGET                                                                         \
    __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,prefer-vector-width=512")))
#endif
NORM_KERNELS(float, uint32_t, f32_avx512, NORM_AVX512_TARGET)
/* At the dispatch level (EG_CPU=baseline|avx2 take the narrower loops here too). */
#define PICK(name, f32)                                                                            \
    (!(f32)                                                  ? name##_f64                          \
     : eg__cpu_active_level() >= EG__CPU_AVX512 ? name##_f32_avx512                               \
     : eg__cpu_active_level() >= EG__CPU_AVX2   ? name##_f32_avx2                                 \
                                                : name##_f32)
#else
#define PICK(name, f32) (f32 ? name##_f32 : name##_f64)
#endif
#undef NORM_KERNELS
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
    bool f32 = x->dtype == EG_DTYPE_F32;
    void *out = eg__data(call->output);
    int64_t kept = call->output->n_elems / 2;
    norm_plan plan;
    if (plan_norm(1, &x, call->attrs, &plan) != EG_OK) return eg_last_status();
    eg_status status = EG_OK;
    if (plan.reduced == 0) { /* NaN, like mean and var of nothing */
        for (int64_t i = 0; i < 2 * kept; i++) store(out, f32, i, NAN);
    } else {
        norm_job job = {&plan, alloc_partial(&plan, "moments"), {0}, NULL, false, false};
        if (!job.partial) {
            status = eg_last_status();
        } else {
            eg__parallel_for(plan.outer * plan.chunks, norm_grain(&plan), PICK(moments_chunks, f32),
                             &job);
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
 * first: x * p[3] + p[4], then relu_backward's own arithmetic). p: a, b (forward) or the
 * gradient's k, c1, c0 and with relu the forward's a, b. */
static eg_status run_affine(const eg__kernel_call *call, const norm_plan *plan, eg_tensor *const *p,
                            bool grad, bool relu) {
    bool f32 = call->output->dtype == EG_DTYPE_F32;
    bool mask = grad && relu;
    if (plan->direct) { /* the output (contiguous) shares the inputs' layout */
        norm_job job = {plan,
                        NULL,
                        {eg__data(p[0]), eg__data(p[1]), grad ? eg__data(p[2]) : NULL,
                         mask ? eg__data(p[3]) : NULL, mask ? eg__data(p[4]) : NULL},
                        eg__data(call->output),
                        grad,
                        relu};
        eg__parallel_for(plan->outer * plan->chunks, norm_grain(plan), PICK(affine_chunks, f32),
                         &job);
        return EG_OK;
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
 * attrs->axes (with relu, g where the forward's pre-activation x * a + b > 0) */
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
                    relu};
    if (status == EG_OK && !(job.partial = alloc_partial(&plan, "batch_norm_backward_sums")))
        status = eg_last_status();
    if (status == EG_OK) {
        eg__parallel_for(plan.outer * plan.chunks, norm_grain(&plan), PICK(grad_sums_chunks, f32),
                         &job);
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
 * (with relu, g where the forward's pre-activation x * a + b > 0). */
eg_status eg__cpu_batch_norm_backward_input(const eg__kernel_call *call);
eg_status eg__cpu_batch_norm_backward_input(const eg__kernel_call *call) {
    const eg_tensor *x = call->inputs[1];
    bool relu = call->attrs->ints[0] == EG_ACTIVATION_RELU;
    double eps = call->attrs->scalars[0];
    bool f32 = x->dtype == EG_DTYPE_F32;
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
            double m = eg__load_as_double(eg__data(p[0]), x->dtype, i);
            double v = eg__load_as_double(eg__data(p[1]), x->dtype, i);
            double g = eg__load_as_double(eg__data(p[2]), x->dtype, i);
            double sg = eg__load_as_double(eg__data(p[3]), x->dtype, i);
            double sgx = eg__load_as_double(eg__data(p[3]), x->dtype, kept + i);
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
