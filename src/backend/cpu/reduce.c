/* CPU kernels for reductions, softmax and the fused sparse softmax cross-entropy.
 *
 * Every reduction is brought to the shape (outer, reduced, inner) over contiguous memory: when
 * the input is contiguous and the reduced axes are adjacent that is a free reinterpretation;
 * otherwise a permuted contiguous copy puts the reduced axes last (inner = 1). */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "base/cpu_features.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/vecmath.h"
#include "base/error.h"

/* The canonical summation order of f32/f64 sum and mean, which every layout, mode and thread
 * count follows so that results agree bitwise: the reduced elements are cut into blocks of
 * SUM_BLOCK; within a block, element k goes to double lane k % 8 (the tail past the block's last
 * multiple of 8 to lane 0), the block's total is 0 + lane 0 + ... + lane 7, and the result is
 * 0 + total of block 0 + total of block 1 + .... Blocks let one long reduction run on several
 * threads (a block each) without changing its bits. */
enum { SUM_BLOCK = 1 << 16 };
enum { SUM_PREFETCH_AHEAD = 256 }; /* elements: 1 KiB of f32 */

#define SUM_BLOCK_STRIDED(T)                                                                       \
    static double sum_block_strided_##T(const T *x, int64_t n, int64_t inner) {                    \
        double lanes[8] = {0};                                                                     \
        int64_t main_end = n - n % 8, k = 0;                                                       \
        for (; k < main_end; k += 8)                                                               \
            for (int l = 0; l < 8; l++) lanes[l] += x[(k + l) * inner];                            \
        for (; k < n; k++) lanes[0] += x[k * inner];                                               \
        double total = 0;                                                                          \
        for (int l = 0; l < 8; l++) total += lanes[l];                                             \
        return total;                                                                              \
    }
SUM_BLOCK_STRIDED(float)
SUM_BLOCK_STRIDED(double)

/* The same order over contiguous f32, the 8 lanes held in two vectors of 4 doubles; compiled for
 * the baseline and for AVX2 (the same IEEE additions in the same order: the same bits). */
typedef double sum_vd4 __attribute__((vector_size(32)));
typedef float sum_vf4 __attribute__((vector_size(16)));
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi" /* the vectors never cross a call */
static inline __attribute__((always_inline)) double sum_block_f32_body(const float *x, int64_t n) {
    sum_vd4 low = {0, 0, 0, 0}, high = {0, 0, 0, 0};
    int64_t main_end = n - n % 8, k = 0;
    for (; k < main_end; k += 8) {
        sum_vf4 a, b;
        /* One core's stream from memory: asking for the line 1 KiB ahead took a 16M-element sum
         * from 9.3-9.6 to 10.5-11.4 GB/s (medians of 40, paired in one process); the hardware
         * prefetcher alone leaves too few misses in flight for a read-only stream. */
        if (k % 16 == 0 && k + SUM_PREFETCH_AHEAD < n)
            __builtin_prefetch(x + k + SUM_PREFETCH_AHEAD);
        memcpy(&a, x + k, sizeof a);
        memcpy(&b, x + k + 4, sizeof b);
        low += __builtin_convertvector(a, sum_vd4);
        high += __builtin_convertvector(b, sum_vd4);
    }
    double lanes[8];
    memcpy(lanes, &low, sizeof low);
    memcpy(lanes + 4, &high, sizeof high);
    for (; k < n; k++) lanes[0] += x[k];
    double total = 0;
    for (int l = 0; l < 8; l++) total += lanes[l];
    return total;
}
#pragma GCC diagnostic pop
static double sum_block_f32_baseline(const float *x, int64_t n) {
    return sum_block_f32_body(x, n);
}
#if defined(__x86_64__)
/* The AVX2 path written with intrinsics: the generic vectors above compile (GCC 12) to two
 * 128-bit conversions, a vinsertf128 and a vmovlps per four floats, where vcvtps2pd takes its four
 * floats straight from memory. That is a third of the instructions, so more of the stream's
 * misses fit in the reorder window. Same lanes, same additions, same order: the same bits. Two
 * groups of 8 per pass, one prefetch per 64-byte line. 16M elements, one thread, best of 15,
 * six alternating rounds in one process: 8.6-9.7 -> 9.4-10.2 GB/s, against 10.1-11.6 for a
 * plain f32 read loop. */
__attribute__((target("avx2,fma"))) static double sum_block_f32_avx2(const float *x, int64_t n) {
    __m256d low = _mm256_setzero_pd(), high = _mm256_setzero_pd();
    int64_t main_end = n - n % 8, k = 0;
    for (; k + 16 <= main_end; k += 16) {
        if (k + SUM_PREFETCH_AHEAD < n) __builtin_prefetch(x + k + SUM_PREFETCH_AHEAD);
        low = _mm256_add_pd(low, _mm256_cvtps_pd(_mm_loadu_ps(x + k)));
        high = _mm256_add_pd(high, _mm256_cvtps_pd(_mm_loadu_ps(x + k + 4)));
        low = _mm256_add_pd(low, _mm256_cvtps_pd(_mm_loadu_ps(x + k + 8)));
        high = _mm256_add_pd(high, _mm256_cvtps_pd(_mm_loadu_ps(x + k + 12)));
    }
    if (k < main_end) {
        low = _mm256_add_pd(low, _mm256_cvtps_pd(_mm_loadu_ps(x + k)));
        high = _mm256_add_pd(high, _mm256_cvtps_pd(_mm_loadu_ps(x + k + 4)));
        k += 8;
    }
    double lanes[8];
    _mm256_storeu_pd(lanes, low);
    _mm256_storeu_pd(lanes + 4, high);
    for (; k < n; k++) lanes[0] += x[k];
    double total = 0;
    for (int l = 0; l < 8; l++) total += lanes[l];
    return total;
}
#else
static double sum_block_f32_avx2(const float *x, int64_t n) {
    return sum_block_f32_body(x, n);
}
#endif

static double sum_block_float(const float *x, int64_t n, int64_t inner) {
    if (inner != 1) return sum_block_strided_float(x, n, inner);
    return eg__cpu_active_level() >= EG__CPU_AVX2 ? sum_block_f32_avx2(x, n)
                                                  : sum_block_f32_baseline(x, n);
}
static double sum_block_double(const double *x, int64_t n, int64_t inner) {
    return sum_block_strided_double(x, n, inner);
}

typedef struct reduce_plan {
    eg_tensor *source; /* contiguous; our own reference */
    int64_t outer, reduced, inner;
} reduce_plan;

static eg_status plan_reduction(const eg_tensor *x, int n_axes, const int *axes,
                                reduce_plan *plan) {
    bool reduce[EG_MAX_DIMS] = {0};
    for (int i = 0; i < n_axes; i++) reduce[axes[i]] = true;
    int first = n_axes ? axes[0] : 0, last = n_axes ? axes[n_axes - 1] : -1;
    bool adjacent = n_axes == 0 || last - first + 1 == n_axes;
    if (adjacent && eg__is_contiguous(x)) {
        plan->source = (eg_tensor *)x;
        eg__ref(x);
        plan->outer = plan->reduced = plan->inner = 1;
        for (int d = 0; d < x->n_dims; d++) {
            if (n_axes && d < first)
                plan->outer *= x->shape[d];
            else if (n_axes && d <= last)
                plan->reduced *= x->shape[d];
            else
                plan->inner *= x->shape[d];
        }
        if (n_axes == 0) { /* nothing reduced: every element is its own group */
            plan->outer = x->n_elems;
            plan->inner = 1;
        }
        return EG_OK;
    }
    /* kept axes first, reduced axes last, then a contiguous copy */
    eg_tensor permuted = *x;
    int n = 0;
    plan->outer = plan->reduced = 1;
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
    plan->inner = 1;
    if (eg__is_contiguous(&permuted)) {
        /* x's memory is already in (kept, reduced) order (e.g. a transposed view reduced over
         * its first axis): read x itself. eg__contiguous_temp would hand back the stack header
         * `permuted`, which dies with this function. */
        plan->source = (eg_tensor *)x;
        eg__ref(x);
        return EG_OK;
    }
    plan->source = eg__contiguous_temp(&permuted);
    return plan->source ? EG_OK : eg_last_status();
}

typedef struct reduce_job {
    eg__op op;
    const reduce_plan *plan;
    void *out;
} reduce_job;

#define FLOAT_ONLY_CASES(T, T_ACC)                                                                 \
    case EG__OP_LOGSUMEXP: {                                                                       \
        T_ACC m = -INFINITY, s = 0;                                                                \
        for (int64_t k = 0; k < r; k++) m = x[k * inner] > m ? x[k * inner] : m;                   \
        if (isinf(m)) {                                                                            \
            result = m;                                                                            \
            break;                                                                                 \
        }                                                                                          \
        for (int64_t k = 0; k < r; k++) s += exp((T_ACC)x[k * inner] - m);                         \
        result = m + log(s);                                                                       \
        break;                                                                                     \
    }                                                                                              \
    case EG__OP_VAR: {                                                                             \
        T_ACC mean = 0, s = 0;                                                                     \
        for (int64_t k = 0; k < r; k++) mean += x[k * inner];                                      \
        mean /= (T_ACC)(r ? r : 1);                                                                \
        for (int64_t k = 0; k < r; k++) {                                                          \
            T_ACC d = x[k * inner] - mean;                                                         \
            s += d * d;                                                                            \
        }                                                                                          \
        result = r ? s / (T_ACC)r : (T_ACC)NAN;                                                    \
        break;                                                                                     \
    }
#define NO_CASES(T, T_ACC)

/* Floating sums follow the canonical order (see SUM_BLOCK); integer sums are exact up to
 * wrapping, so their order does not matter. */
#define FLOAT_SUM(T, T_ACC)                                                                        \
    {                                                                                              \
        for (int64_t b = 0; b < r; b += SUM_BLOCK)                                                 \
            result += sum_block_##T(x + b * inner, r - b < SUM_BLOCK ? r - b : SUM_BLOCK, inner);  \
        if (job->op == EG__OP_MEAN) result /= (T_ACC)r;                                            \
    }
#define INT_SUM(T, T_ACC)                                                                          \
    {                                                                                              \
        for (int64_t k = 0; k < r; k++) result += x[k * inner];                                    \
        if (job->op == EG__OP_MEAN) result /= (T_ACC)r;                                            \
    }

/* max/min never see an empty reduction: inference rejects it. */
#define ROW_REDUCE(T, T_ACC, EXTRA_CASES, SUM_CASE)                                                \
    static void reduce_rows_##T(const reduce_job *job, int64_t begin, int64_t end) {               \
        const reduce_plan *plan = job->plan;                                                       \
        const T *src = eg__data(plan->source);                                                     \
        T *out = job->out;                                                                         \
        int64_t r = plan->reduced, inner = plan->inner;                                            \
        for (int64_t g = begin; g < end; g++) {                                                    \
            int64_t o = g / inner, i = g % inner;                                                  \
            const T *x = src + o * r * inner + i;                                                  \
            T_ACC result = 0;                                                                      \
            switch (job->op) {                                                                     \
            case EG__OP_SUM:                                                                       \
            case EG__OP_MEAN:                                                                      \
                SUM_CASE(T, T_ACC)                                                                 \
                break;                                                                             \
            case EG__OP_MAX:                                                                       \
            case EG__OP_MIN: {                                                                     \
                bool is_max = job->op == EG__OP_MAX;                                               \
                T best = x[0];                                                                     \
                for (int64_t k = 1; k < r; k++) {                                                  \
                    T v = x[k * inner];                                                            \
                    if (v != v) {                                                                  \
                        best = v;                                                                  \
                        break;                                                                     \
                    }                                                                              \
                    if (is_max ? v > best : v < best) best = v;                                    \
                }                                                                                  \
                result = best;                                                                     \
                break;                                                                             \
            }                                                                                      \
                EXTRA_CASES(T, T_ACC)                                                              \
            default:                                                                               \
                break;                                                                             \
            }                                                                                      \
            out[g] = (T)result;                                                                    \
        }                                                                                          \
    }

ROW_REDUCE(float, double, FLOAT_ONLY_CASES, FLOAT_SUM)
ROW_REDUCE(double, double, FLOAT_ONLY_CASES, FLOAT_SUM)
ROW_REDUCE(int32_t, int64_t, NO_CASES, INT_SUM)
ROW_REDUCE(int64_t, int64_t, NO_CASES, INT_SUM)

/* Column sums (inner > 1): whole rows are added so the inner loop runs over contiguous memory,
 * CHUNK columns at a time (wide enough that each row's piece is a long contiguous read). Each
 * column is summed in the canonical order (see SUM_BLOCK), as the row kernel sums a contiguous
 * row, so a reduction's bits never depend on the memory layout of its input — eager, lazy and
 * graph modes see different layouts. */
static inline __attribute__((always_inline)) void
sum_columns_chunked_body(const reduce_job *job, int64_t begin, int64_t end, int64_t chunk,
                         double *lanes, double *totals) {
    const reduce_plan *plan = job->plan;
    const float *src = eg__data(plan->source);
    float *out = job->out;
    int64_t r = plan->reduced, inner = plan->inner;
    for (int64_t o = 0; o < plan->outer; o++) {
        for (int64_t c0 = begin; c0 < end; c0 += chunk) {
            int64_t width = end - c0 < chunk ? end - c0 : chunk;
            for (int64_t i = 0; i < width; i++) totals[i] = 0;
            for (int64_t b = 0; b < r; b += SUM_BLOCK) {
                int64_t n = r - b < SUM_BLOCK ? r - b : SUM_BLOCK, main_end = n - n % 8, k = 0;
                memset(lanes, 0, sizeof(double) * 8 * (size_t)chunk);
                const float *block = src + (o * r + b) * inner + c0;
                /* four rows into each lane per pass (rows k + l, k + l + 8, ... in order, as
                 * left-to-right additions): a quarter of the lanes' memory traffic, which bound
                 * the one-row-per-pass loop at ~5 GB/s */
                for (; k + 32 <= main_end; k += 32)
                    for (int l = 0; l < 8; l++) {
                        const float *row = block + (k + l) * inner;
                        const float *row8 = row + 8 * inner, *row16 = row + 16 * inner,
                                    *row24 = row + 24 * inner;
                        double *lane = lanes + l * chunk;
                        for (int64_t i = 0; i < width; i++)
                            lane[i] = lane[i] + (double)row[i] + (double)row8[i] +
                                      (double)row16[i] + (double)row24[i];
                    }
                for (; k < main_end; k += 8)
                    for (int l = 0; l < 8; l++) {
                        const float *row = block + (k + l) * inner;
                        double *lane = lanes + l * chunk;
                        for (int64_t i = 0; i < width; i++) lane[i] += row[i];
                    }
                for (; k < n; k++) {
                    const float *row = block + k * inner;
                    for (int64_t i = 0; i < width; i++) lanes[i] += row[i];
                }
                for (int64_t i = 0; i < width; i++) {
                    double total = 0;
                    for (int l = 0; l < 8; l++) total += lanes[l * chunk + i];
                    totals[i] += total;
                }
            }
            for (int64_t i = 0; i < width; i++)
                out[o * inner + c0 + i] =
                    (float)(job->op == EG__OP_MEAN ? totals[i] / (double)r : totals[i]);
        }
    }
}

/* The body compiled for the baseline and for AVX2 and AVX-512, where the column loops run 4 and 8
 * doubles wide: every column's additions are the same, in the same order (no multiplies, so
 * nothing to contract): the same bits on every path. */
static void sum_columns_chunked_baseline(const reduce_job *job, int64_t begin, int64_t end,
                                         int64_t chunk, double *lanes, double *totals) {
    sum_columns_chunked_body(job, begin, end, chunk, lanes, totals);
}
#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) static void
sum_columns_chunked_avx2(const reduce_job *job, int64_t begin, int64_t end, int64_t chunk,
                         double *lanes, double *totals) {
    sum_columns_chunked_body(job, begin, end, chunk, lanes, totals);
}
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma"))) static void
sum_columns_chunked_avx512(const reduce_job *job, int64_t begin, int64_t end, int64_t chunk,
                           double *lanes, double *totals) {
    sum_columns_chunked_body(job, begin, end, chunk, lanes, totals);
}
#endif

static void sum_columns_chunked(const reduce_job *job, int64_t begin, int64_t end, int64_t chunk,
                                double *lanes, double *totals) {
#if defined(__x86_64__)
    eg__cpu_level level = eg__cpu_active_level();
    if (level >= EG__CPU_AVX512) {
        sum_columns_chunked_avx512(job, begin, end, chunk, lanes, totals);
        return;
    }
    if (level >= EG__CPU_AVX2) {
        sum_columns_chunked_avx2(job, begin, end, chunk, lanes, totals);
        return;
    }
#endif
    sum_columns_chunked_baseline(job, begin, end, chunk, lanes, totals);
}

/* Wide chunks give long contiguous reads of each row (a 4096 x 4096 column sum, one thread, by
 * CPU time: 1.2 GB/s with 128 columns, 2.3 with 512, 4 with 2048, 5 with 4096), so their lanes
 * live on the heap; without memory, narrow chunks on the stack do the same sums. */
static void sum_columns_float(const reduce_job *job, int64_t begin, int64_t end) {
    enum { WIDE = 4096, NARROW = 128 };
    int64_t chunk = end - begin < WIDE ? end - begin : WIDE;
    double *lanes = chunk > NARROW ? malloc(sizeof(double) * 9 * (size_t)chunk) : NULL;
    if (lanes) {
        sum_columns_chunked(job, begin, end, chunk, lanes, lanes + 8 * chunk);
        free(lanes);
    } else {
        double narrow[9 * NARROW];
        sum_columns_chunked(job, begin, end, NARROW, narrow, narrow + 8 * NARROW);
    }
}

/* Long f32/f64 sums over few rows (a full reduction): the blocks of every row are summed in
 * parallel into totals[row][block], then each row's totals are added in order. */
typedef struct block_job {
    const reduce_plan *plan;
    int64_t n_blocks;
    double *totals;
} block_job;

static void block_range(void *context, int64_t begin, int64_t end) {
    const block_job *job = context;
    const reduce_plan *plan = job->plan;
    int64_t r = plan->reduced;
    for (int64_t item = begin; item < end; item++) {
        int64_t o = item / job->n_blocks, b = (item % job->n_blocks) * SUM_BLOCK;
        int64_t n = r - b < SUM_BLOCK ? r - b : SUM_BLOCK;
        if (plan->source->dtype == EG_DTYPE_F32)
            job->totals[item] =
                sum_block_float((const float *)eg__data(plan->source) + o * r + b, n, 1);
        else
            job->totals[item] =
                sum_block_double((const double *)eg__data(plan->source) + o * r + b, n, 1);
    }
}

static eg_status sum_long_rows(eg__op op, const reduce_plan *plan, void *out) {
    block_job job = {plan, (plan->reduced + SUM_BLOCK - 1) / SUM_BLOCK, NULL};
    job.totals = malloc(sizeof(double) * (size_t)(plan->outer * job.n_blocks));
    if (!job.totals) return eg__error(EG_ERR_OUT_OF_MEMORY, "sum: out of host memory");
    eg__parallel_for(plan->outer * job.n_blocks, 1, block_range, &job);
    for (int64_t o = 0; o < plan->outer; o++) {
        double result = 0;
        for (int64_t b = 0; b < job.n_blocks; b++) result += job.totals[o * job.n_blocks + b];
        if (op == EG__OP_MEAN) result /= (double)plan->reduced;
        if (plan->source->dtype == EG_DTYPE_F32)
            ((float *)out)[o] = (float)result;
        else
            ((double *)out)[o] = result;
    }
    free(job.totals);
    return EG_OK;
}

static void reduce_range(void *context, int64_t begin, int64_t end) {
    const reduce_job *job = context;
    switch (job->plan->source->dtype) {
    case EG_DTYPE_F32:
        reduce_rows_float(job, begin, end);
        break;
    case EG_DTYPE_F64:
        reduce_rows_double(job, begin, end);
        break;
    case EG_DTYPE_I32:
        reduce_rows_int32_t(job, begin, end);
        break;
    case EG_DTYPE_I64:
        reduce_rows_int64_t(job, begin, end);
        break;
    default:
        break;
    }
}

static void column_range(void *context, int64_t begin, int64_t end) {
    sum_columns_float(context, begin, end);
}

eg_status eg__cpu_reduce(const eg__kernel_call *call);
eg_status eg__cpu_reduce(const eg__kernel_call *call) {
    reduce_plan plan;
    eg_status status =
        plan_reduction(call->inputs[0], call->attrs->n_axes, call->attrs->axes, &plan);
    if (status != EG_OK) return status;
    reduce_job job = {call->op, &plan, eg__data(call->output)};
    int64_t groups = plan.outer * plan.inner;
    bool is_sum = call->op == EG__OP_SUM || call->op == EG__OP_MEAN;
    bool is_floating = plan.source->dtype == EG_DTYPE_F32 || plan.source->dtype == EG_DTYPE_F64;
    if (is_sum && is_floating && plan.inner == 1 && plan.reduced > SUM_BLOCK &&
        plan.outer < 4 * eg__num_threads()) {
        status = sum_long_rows(call->op, &plan, job.out);
        eg__unref(plan.source);
        return status;
    }
    int64_t grain = EG_PARALLEL_GRAIN_ELEMENTWISE / (plan.reduced ? plan.reduced : 1) + 1;
    if (plan.inner > 1 && plan.source->dtype == EG_DTYPE_F32 &&
        (call->op == EG__OP_SUM || call->op == EG__OP_MEAN))
        eg__parallel_for(plan.inner, grain, column_range, &job);
    else
        eg__parallel_for(groups, grain, reduce_range, &job);
    eg__unref(plan.source);
    return EG_OK;
}

/* ---- argmax / argmin ---- */

/* argmax/argmin of one float type: the generic loop below with typed loads (the seed model's
 * per-step accuracy took ~30 instructions an element through eg__load_as_double). Comparing
 * in T is comparing the values widened to double: the same index, NaN rules included. */
#define ARG_REDUCE_TYPED(T)                                                                        \
    static void arg_reduce_##T(const T *src, int64_t *out, const reduce_plan *plan, bool is_max) { \
        for (int64_t o = 0; o < plan->outer; o++)                                                  \
            for (int64_t i = 0; i < plan->inner; i++) {                                            \
                const T *row = src + o * plan->reduced * plan->inner + i;                          \
                int64_t best = 0;                                                                  \
                T best_value = row[0];                                                             \
                for (int64_t k = 1; k < plan->reduced; k++) {                                      \
                    T v = row[k * plan->inner];                                                    \
                    if (is_max ? v > best_value : v < best_value) {                                \
                        best_value = v;                                                            \
                        best = k;                                                                  \
                    }                                                                              \
                }                                                                                  \
                out[o * plan->inner + i] = best;                                                   \
            }                                                                                      \
    }
ARG_REDUCE_TYPED(float)
ARG_REDUCE_TYPED(double)
#undef ARG_REDUCE_TYPED

eg_status eg__cpu_arg_reduce(const eg__kernel_call *call);
eg_status eg__cpu_arg_reduce(const eg__kernel_call *call) {
    int axis = call->attrs->axis;
    reduce_plan plan;
    eg_status status = plan_reduction(call->inputs[0], 1, &axis, &plan);
    if (status != EG_OK) return status;
    int64_t *out = eg__data(call->output);
    const char *src = eg__data(plan.source);
    eg_dtype dtype = plan.source->dtype;
    bool is_max = call->op == EG__OP_ARGMAX;
    if (plan.reduced > 0 && (dtype == EG_DTYPE_F32 || dtype == EG_DTYPE_F64)) {
        if (dtype == EG_DTYPE_F32)
            arg_reduce_float((const float *)src, out, &plan, is_max);
        else
            arg_reduce_double((const double *)src, out, &plan, is_max);
        eg__unref(plan.source);
        return EG_OK;
    }
    for (int64_t o = 0; o < plan.outer; o++)
        for (int64_t i = 0; i < plan.inner; i++) {
            int64_t base = o * plan.reduced * plan.inner + i, best = 0;
            double best_value = eg__load_as_double(src, dtype, base);
            for (int64_t k = 1; k < plan.reduced; k++) {
                double v = eg__load_as_double(src, dtype, base + k * plan.inner);
                if (is_max ? v > best_value : v < best_value) {
                    best_value = v;
                    best = k;
                }
            }
            out[o * plan.inner + i] = best;
        }
    eg__unref(plan.source);
    return EG_OK;
}

/* ---- softmax and log_softmax along one axis ---- */

/* f32 rows: exp through the vector math (vecmath.h: within 1 ulp; the same bits whatever the row
 * length, stride or thread count), summed in double in k order. The exponentials' arguments are
 * x - m rounded to float, as the f64 rows round theirs to double. */
static void exp_strided_f32(int64_t n, float *out, int64_t out_stride, const float *in,
                            int64_t in_stride) {
    if (out_stride == 1 && in_stride == 1)
        eg__vecmath_f32(EG__VECMATH_EXP, n, out, in);
    else
        eg__vecmath_f32_strided(EG__VECMATH_EXP, n, (char *)out,
                                out_stride * (int64_t)sizeof(float), (const char *)in,
                                in_stride * (int64_t)sizeof(float));
}

/* The sum of exp(v[k * stride] - m) for k in [0, n), in double, in order. */
static double sum_exp_f32(const float *v, int64_t n, int64_t stride, float m) {
    enum { CHUNK = 256 };
    float e[CHUNK];
    double s = 0;
    for (int64_t begin = 0; begin < n; begin += CHUNK) {
        int64_t count = n - begin < CHUNK ? n - begin : CHUNK;
        for (int64_t k = 0; k < count; k++) e[k] = v[(begin + k) * stride] - m;
        eg__vecmath_f32(EG__VECMATH_EXP, count, e, e);
        for (int64_t k = 0; k < count; k++) s += e[k];
    }
    return s;
}

/* Rows of one block of contiguous rows (inner == 1), the exponentials of all of them taken in one
 * call: a batch of short rows (the seed model's 32 rows of 10 logits) otherwise pays the vector
 * math's call and its padded tail once per row. The exponentials' bits do not depend on where an
 * element sits in the call (vecmath.h), so a row's bits are those of softmax_f32's row loop. */
enum { SOFTMAX_BLOCK = 2048 }; /* floats of exponentials per call; rows longer go one by one */

/* The maxima of rows [0, rows) of x (r each). */
static void row_maxima_f32(const float *x, int64_t rows, int64_t r, float *maxima) {
    for (int64_t b = 0; b < rows; b++) {
        const float *row = x + b * r;
        float m = -INFINITY;
        for (int64_t k = 0; k < r; k++) m = row[k] > m ? row[k] : m;
        maxima[b] = m;
    }
}

/* e[b r + k] = exp(x[b r + k] - maxima[b]) for rows [0, rows); e may be x. */
static void row_exps_f32(const float *x, int64_t rows, int64_t r, const float *maxima, float *e) {
    for (int64_t b = 0; b < rows; b++)
        for (int64_t k = 0; k < r; k++) e[b * r + k] = x[b * r + k] - maxima[b];
    eg__vecmath_f32(EG__VECMATH_EXP, rows * r, e, e);
}

/* The sum of row b of e, in double, in k order. */
static double row_sum_f32(const float *e, int64_t b, int64_t r) {
    double s = 0;
    for (int64_t k = 0; k < r; k++) s += e[b * r + k];
    return s;
}

static void softmax_rows_f32(const float *x, float *y, int64_t rows, int64_t r, bool log_) {
    int64_t per_block = SOFTMAX_BLOCK / r;
    float maxima[SOFTMAX_BLOCK], e[SOFTMAX_BLOCK];
    for (int64_t first = 0; first < rows; first += per_block) {
        int64_t n = rows - first < per_block ? rows - first : per_block;
        const float *xb = x + first * r;
        float *yb = y + first * r;
        /* y may be x: every row's maximum is taken before any of the block is written */
        row_maxima_f32(xb, n, r, maxima);
        row_exps_f32(xb, n, r, maxima, log_ ? e : yb);
        for (int64_t b = 0; b < n; b++) {
            double s = row_sum_f32(log_ ? e : yb, b, r);
            if (log_) {
                float log_s = (float)log(s);
                for (int64_t k = 0; k < r; k++) yb[b * r + k] = xb[b * r + k] - maxima[b] - log_s;
            } else {
                float inv = (float)(1.0 / s);
                for (int64_t k = 0; k < r; k++) yb[b * r + k] *= inv;
            }
        }
    }
}

static void softmax_f32(const float *x, float *y, int64_t outer, int64_t r, int64_t inner,
                        bool log_) {
    if (inner == 1 && r > 0 && r <= SOFTMAX_BLOCK) {
        softmax_rows_f32(x, y, outer, r, log_);
        return;
    }
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const float *xr = x + o * r * inner + i;
            float *yr = y + o * r * inner + i;
            float m = -INFINITY;
            for (int64_t k = 0; k < r; k++) m = xr[k * inner] > m ? xr[k * inner] : m;
            /* y may be x: each element is read before it is written */
            if (log_) {
                float log_s = (float)log(sum_exp_f32(xr, r, inner, m));
                for (int64_t k = 0; k < r; k++) yr[k * inner] = xr[k * inner] - m - log_s;
            } else {
                for (int64_t k = 0; k < r; k++) yr[k * inner] = xr[k * inner] - m;
                exp_strided_f32(r, yr, inner, yr, inner);
                double s = 0;
                for (int64_t k = 0; k < r; k++) s += yr[k * inner];
                float inv = (float)(1.0 / s);
                for (int64_t k = 0; k < r; k++) yr[k * inner] *= inv;
            }
        }
}

/* f64 rows: libm's exp */
#define SOFTMAX_ROWS(T)                                                                            \
    static void softmax_##T(const T *x, T *y, int64_t outer, int64_t r, int64_t inner,             \
                            bool log_) {                                                           \
        for (int64_t o = 0; o < outer; o++)                                                        \
            for (int64_t i = 0; i < inner; i++) {                                                  \
                const T *xr = x + o * r * inner + i;                                               \
                T *yr = y + o * r * inner + i;                                                     \
                T m = -INFINITY;                                                                   \
                for (int64_t k = 0; k < r; k++) m = xr[k * inner] > m ? xr[k * inner] : m;         \
                double s = 0;                                                                      \
                for (int64_t k = 0; k < r; k++) {                                                  \
                    T e = (T)exp((double)(xr[k * inner] - m));                                     \
                    if (!log_) yr[k * inner] = e;                                                  \
                    s += e;                                                                        \
                }                                                                                  \
                if (log_) {                                                                        \
                    T log_s = (T)log(s);                                                           \
                    for (int64_t k = 0; k < r; k++) yr[k * inner] = xr[k * inner] - m - log_s;     \
                } else {                                                                           \
                    T inv = (T)(1.0 / s);                                                          \
                    for (int64_t k = 0; k < r; k++) yr[k * inner] *= inv;                          \
                }                                                                                  \
            }                                                                                      \
    }
SOFTMAX_ROWS(double)

eg_status eg__cpu_softmax(const eg__kernel_call *call);
eg_status eg__cpu_softmax(const eg__kernel_call *call) {
    const eg_tensor *x0 = call->inputs[0];
    eg_tensor *x = eg__contiguous_temp(x0);
    if (!x) return eg_last_status();
    int axis = call->attrs->axis;
    int64_t outer = 1, inner = 1, r = x->shape[axis];
    for (int d = 0; d < axis; d++) outer *= x->shape[d];
    for (int d = axis + 1; d < x->n_dims; d++) inner *= x->shape[d];
    bool log_ = call->op == EG__OP_LOG_SOFTMAX;
    if (x->dtype == EG_DTYPE_F32)
        softmax_f32(eg__data(x), eg__data(call->output), outer, r, inner, log_);
    else
        softmax_double(eg__data(x), eg__data(call->output), outer, r, inner, log_);
    eg__unref(x);
    return EG_OK;
}

/* ---- sparse softmax cross-entropy: loss_b = logsumexp(x_b) - x_b[label_b] ---- */

static int64_t load_label(const eg_tensor *labels, const char *base, int64_t b) {
    int64_t offset = b * labels->strides[0];
    switch (labels->dtype) {
    case EG_DTYPE_I32:
        return ((const int32_t *)base)[offset];
    case EG_DTYPE_I64:
        return ((const int64_t *)base)[offset];
    default:
        return ((const uint8_t *)base)[offset];
    }
}

/* The sum of exp(row[k] - m): the f32 one through the vector math, as softmax_f32. */
static double sum_exp_row_float(const float *row, int64_t n, float m) {
    return sum_exp_f32(row, n, 1, m);
}
static double sum_exp_row_double(const double *row, int64_t n, double m) {
    double s = 0;
    for (int64_t k = 0; k < n; k++) s += exp(row[k] - m);
    return s;
}

#define XENT_ROWS(T)                                                                               \
    static eg_status xent_##T(const eg_tensor *logits, const eg_tensor *labels, T *loss) {         \
        int64_t batch = logits->shape[0], classes = logits->shape[1];                              \
        const T *x = eg__data(logits);                                                             \
        const char *label_base = eg__data(labels);                                                 \
        for (int64_t b = 0; b < batch; b++) {                                                      \
            int64_t label = load_label(labels, label_base, b);                                     \
            if (label < 0 || label >= classes)                                                     \
                return eg__error(EG_ERR_INVALID_ARGUMENT,                                          \
                                 "sparse_softmax_cross_entropy: label %lld of row %lld is out "    \
                                 "of range [0, %lld)",                                             \
                                 (long long)label, (long long)b, (long long)classes);              \
            const T *row = x + b * classes;                                                        \
            T m = -INFINITY;                                                                       \
            for (int64_t k = 0; k < classes; k++) m = row[k] > m ? row[k] : m;                     \
            double s = sum_exp_row_##T(row, classes, m);                                           \
            loss[b] = (T)(log(s) + (double)m - (double)row[label]);                                \
        }                                                                                          \
        return EG_OK;                                                                              \
    }
XENT_ROWS(float)
XENT_ROWS(double)

/* The f32 rows in blocks, the exponentials of a block in one call (as softmax_rows_f32): the
 * same bits as xent_float's row loop, which takes rows longer than a block. */
static eg_status xent_blocks_float(const eg_tensor *logits, const eg_tensor *labels, float *loss) {
    int64_t batch = logits->shape[0], classes = logits->shape[1];
    if (classes < 1 || classes > SOFTMAX_BLOCK) return xent_float(logits, labels, loss);
    const float *x = eg__data(logits);
    const char *label_base = eg__data(labels);
    int64_t per_block = SOFTMAX_BLOCK / classes;
    float maxima[SOFTMAX_BLOCK], e[SOFTMAX_BLOCK];
    for (int64_t first = 0; first < batch; first += per_block) {
        int64_t n = batch - first < per_block ? batch - first : per_block;
        const float *xb = x + first * classes;
        for (int64_t b = first; b < first + n; b++) {
            int64_t label = load_label(labels, label_base, b);
            if (label < 0 || label >= classes)
                return eg__error(EG_ERR_INVALID_ARGUMENT,
                                 "sparse_softmax_cross_entropy: label %lld of row %lld is out "
                                 "of range [0, %lld)",
                                 (long long)label, (long long)b, (long long)classes);
        }
        row_maxima_f32(xb, n, classes, maxima);
        row_exps_f32(xb, n, classes, maxima, e);
        for (int64_t b = 0; b < n; b++) {
            double s = row_sum_f32(e, b, classes);
            int64_t label = load_label(labels, label_base, first + b);
            loss[first + b] = (float)(log(s) + (double)maxima[b] - (double)xb[b * classes + label]);
        }
    }
    return EG_OK;
}

eg_status eg__cpu_sparse_softmax_cross_entropy(const eg__kernel_call *call);
eg_status eg__cpu_sparse_softmax_cross_entropy(const eg__kernel_call *call) {
    eg_tensor *logits = eg__contiguous_temp(call->inputs[0]);
    if (!logits) return eg_last_status();
    eg_status status = logits->dtype == EG_DTYPE_F32
                           ? xent_blocks_float(logits, call->inputs[1], eg__data(call->output))
                           : xent_double(logits, call->inputs[1], eg__data(call->output));
    eg__unref(logits);
    return status;
}
