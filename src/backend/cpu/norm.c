/* CPU kernels for normalization: moments (mean and variance over some axes in one kernel) and
 * mul_add (x * scale + shift with broadcasting), the one full-size pass of batch and layer
 * normalization once their per-channel (or per-row) scale and shift are known. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kernels.h"
#include "core/error.h"

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

/* ---- moments: mean and population variance over some axes ---- */

/* Rows of a column reduction per task: partial sums per chunk are added in chunk order, so the
 * result does not depend on the thread count. */
#define MOMENT_ROWS 256

/* x viewed as (outer, reduced, inner) over contiguous memory: a free reinterpretation when x is
 * contiguous and the reduced axes adjacent, otherwise a copy with the kept axes first. */
typedef struct moments_plan {
    eg_tensor *source; /* our own reference */
    int64_t outer, reduced, inner, chunks;
    double *partial; /* outer * chunks * inner */
    void *out;
    bool second_pass; /* sums of squared deviations (the means are in out) */
} moments_plan;

static eg_status plan_moments(const eg_tensor *x, const eg__attrs *attrs, moments_plan *plan) {
    bool reduce[EG_MAX_DIMS] = {0};
    int n_axes = attrs->n_axes;
    for (int i = 0; i < n_axes; i++) reduce[attrs->axes[i]] = true;
    int first = n_axes ? attrs->axes[0] : 0, last = n_axes ? attrs->axes[n_axes - 1] : -1;
    plan->outer = plan->reduced = plan->inner = 1;
    if (n_axes && last - first + 1 == n_axes && eg__is_contiguous(x)) {
        for (int d = 0; d < x->n_dims; d++) {
            if (d < first)
                plan->outer *= x->shape[d];
            else if (d <= last)
                plan->reduced *= x->shape[d];
            else
                plan->inner *= x->shape[d];
        }
        plan->source = (eg_tensor *)x;
        eg__ref(x);
        return EG_OK;
    }
    eg_tensor permuted = *x;
    int n = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int d = 0; d < x->n_dims; d++) {
            if (reduce[d] != (pass == 1)) continue;
            permuted.shape[n] = x->shape[d];
            permuted.strides[n++] = x->strides[d];
            if (pass == 0)
                plan->outer *= x->shape[d];
            else
                plan->reduced *= x->shape[d];
        }
    if (eg__is_contiguous(&permuted)) { /* x's memory is already in that order */
        plan->source = (eg_tensor *)x;
        eg__ref(x);
        return EG_OK;
    }
    plan->source = eg__contiguous_temp(&permuted);
    return plan->source ? EG_OK : eg_last_status();
}

#define MOMENTS_KERNELS(T, suffix)                                                                 \
    /* rows: each of the outer groups is one contiguous run of `reduced` values (inner == 1) */    \
    static void moments_rows_##suffix(void *context, int64_t begin, int64_t end) {                 \
        const moments_plan *p = context;                                                           \
        const T *x = eg__data(p->source);                                                          \
        T *out = p->out;                                                                           \
        int64_t r = p->reduced, k = p->outer;                                                      \
        for (int64_t o = begin; o < end; o++) {                                                    \
            const T *row = x + o * r;                                                              \
            double sum = 0, squares = 0;                                                           \
            for (int64_t j = 0; j < r; j++) sum += row[j];                                         \
            double mean = sum / (double)r;                                                         \
            for (int64_t j = 0; j < r; j++) squares += (row[j] - mean) * (row[j] - mean);          \
            out[o] = (T)mean;                                                                      \
            out[k + o] = (T)(squares / (double)r);                                                 \
        }                                                                                          \
    }                                                                                              \
    /* columns: task (o, chunk) sums MOMENT_ROWS rows of `inner` values into its partial */        \
    static void moments_columns_##suffix(void *context, int64_t begin, int64_t end) {              \
        const moments_plan *p = context;                                                           \
        const T *x = eg__data(p->source);                                                          \
        const T *means = p->out;                                                                   \
        int64_t inner = p->inner;                                                                  \
        for (int64_t task = begin; task < end; task++) {                                           \
            int64_t o = task / p->chunks, chunk = task % p->chunks;                                \
            int64_t r0 = chunk * MOMENT_ROWS;                                                      \
            int64_t r1 = r0 + MOMENT_ROWS < p->reduced ? r0 + MOMENT_ROWS : p->reduced;            \
            double *acc = p->partial + task * inner;                                               \
            const T *m = means + o * inner;                                                        \
            memset(acc, 0, sizeof(double) * (size_t)inner);                                        \
            for (int64_t r = r0; r < r1; r++) {                                                    \
                const T *row = x + (o * p->reduced + r) * inner;                                   \
                if (!p->second_pass)                                                               \
                    for (int64_t i = 0; i < inner; i++) acc[i] += row[i];                          \
                else                                                                               \
                    for (int64_t i = 0; i < inner; i++) {                                          \
                        double d = (double)row[i] - (double)m[i];                                  \
                        acc[i] += d * d;                                                           \
                    }                                                                              \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    /* partial sums (in chunk order) / reduced into out[0] (means) or out[1] (variances) */        \
    static void moments_combine_##suffix(const moments_plan *p) {                                  \
        T *out = (T *)p->out + (p->second_pass ? p->outer * p->inner : 0);                         \
        for (int64_t o = 0; o < p->outer; o++)                                                     \
            for (int64_t i = 0; i < p->inner; i++) {                                               \
                double s = 0;                                                                      \
                for (int64_t c = 0; c < p->chunks; c++)                                            \
                    s += p->partial[(o * p->chunks + c) * p->inner + i];                           \
                out[o * p->inner + i] = (T)(s / (double)p->reduced);                               \
            }                                                                                      \
    }

MOMENTS_KERNELS(float, f32)
MOMENTS_KERNELS(double, f64)
#undef MOMENTS_KERNELS

/* x -> (2, kept...): [0] the means, [1] the population variances over attrs->axes. */
eg_status eg__cpu_moments(const eg__kernel_call *call);
eg_status eg__cpu_moments(const eg__kernel_call *call) {
    const eg_tensor *x = call->inputs[0];
    moments_plan plan = {0};
    if (plan_moments(x, call->attrs, &plan) != EG_OK) return eg_last_status();
    plan.out = eg__data(call->output);
    bool f32 = x->dtype == EG_DTYPE_F32;
    eg_status status = EG_OK;
    if (plan.reduced == 0) { /* NaN, like mean and var of nothing */
        for (int64_t i = 0; i < call->output->n_elems; i++) {
            if (f32)
                ((float *)plan.out)[i] = NAN;
            else
                ((double *)plan.out)[i] = NAN;
        }
    } else if (plan.inner == 1) {
        eg__parallel_for(plan.outer, EG_PARALLEL_GRAIN_ELEMENTWISE / plan.reduced + 1,
                         f32 ? moments_rows_f32 : moments_rows_f64, &plan);
    } else {
        plan.chunks = (plan.reduced + MOMENT_ROWS - 1) / MOMENT_ROWS;
        plan.partial = malloc(sizeof(double) * (size_t)(plan.outer * plan.chunks * plan.inner));
        if (!plan.partial) {
            status = eg__error(EG_ERR_OUT_OF_MEMORY, "moments: out of host memory");
        } else {
            int64_t grain = EG_PARALLEL_GRAIN_ELEMENTWISE / (MOMENT_ROWS * plan.inner) + 1;
            for (int pass = 0; pass < 2; pass++) {
                plan.second_pass = pass == 1;
                eg__parallel_for(plan.outer * plan.chunks, grain,
                                 f32 ? moments_columns_f32 : moments_columns_f64, &plan);
                if (f32)
                    moments_combine_f32(&plan);
                else
                    moments_combine_f64(&plan);
            }
        }
        free(plan.partial);
    }
    eg__unref(plan.source);
    return status;
}

/* ---- batch normalization (training) ---- */

#define AFFINE_PARAMS(T)                                                                           \
    do {                                                                                           \
        const T *m_ = eg__data(p[0]), *v_ = eg__data(p[1]), *g_ = eg__data(p[2]),                  \
                *o_ = eg__data(p[3]);                                                              \
        T *a_ = eg__data(a), *b_ = eg__data(b);                                                    \
        for (int64_t i = 0; i < a->n_elems; i++) {                                                 \
            a_[i] = g_[i] / (T)sqrt((double)v_[i] + eps);                                          \
            b_[i] = o_[i] - m_[i] * a_[i];                                                         \
        }                                                                                          \
    } while (0)

/* x, mean, variance, scale, offset (the four kept-shaped) -> (x - mean) scale / sqrt(variance +
 * eps) + offset, as x * a + b with a, b per kept element. */
eg_status eg__cpu_batch_norm(const eg__kernel_call *call);
eg_status eg__cpu_batch_norm(const eg__kernel_call *call) {
    const eg_tensor *params = call->inputs[1];
    double eps = call->attrs->scalars[0];
    eg_tensor *p[4] = {0}, *a = NULL, *b = NULL;
    eg_status status = EG_OK;
    for (int i = 0; i < 4 && status == EG_OK; i++)
        if (!(p[i] = eg__contiguous_temp(call->inputs[1 + i]))) status = eg_last_status();
    if (status == EG_OK) {
        eg__scope_suspend();
        a = eg__tensor_alloc(params->dtype, params->n_dims, params->shape, params->device);
        b = a ? eg__tensor_alloc(params->dtype, params->n_dims, params->shape, params->device)
              : NULL;
        eg__scope_resume();
        if (!b) status = eg_last_status();
    }
    if (status == EG_OK) {
        if (params->dtype == EG_DTYPE_F32)
            AFFINE_PARAMS(float);
        else
            AFFINE_PARAMS(double);
        const eg_tensor *operands[4] = {call->output, call->inputs[0], a, b};
        eg__nd_loop loop;
        eg__nd_loop_init(&loop, 4, operands);
        eg__nd_loop_run(&loop, call->output->dtype == EG_DTYPE_F32 ? mul_add_f32 : mul_add_f64,
                        NULL);
    }
    for (int i = 0; i < 4; i++) eg__unref(p[i]);
    eg__unref(a);
    eg__unref(b);
    return status;
}
#undef AFFINE_PARAMS

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
