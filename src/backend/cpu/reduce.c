/* CPU kernels for reductions (softmax and the sparse softmax cross-entropy: softmax.c).
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
#include "backend/cpu/lowp.h"
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

/* bf16 / f16 blocks in the same order, their elements widened to f32 (exactly) and then to
 * double: the f32 sum of the widened values, bit for bit, before the result's one rounding.
 * lanes[l] takes elements k + l of each group of 8 below n8 (a multiple of 8), in order. */
static void sum_lanes_widened(double *lanes, const float *x, int64_t n8) {
    for (int64_t k = 0; k < n8; k += 8)
        for (int l = 0; l < 8; l++) lanes[l] += x[k + l];
}
#if defined(__x86_64__)
/* Contiguous blocks widened in registers: one accumulator of the 8 lanes at AVX-512 (lane l of
 * the vector is lanes[l]), two of 4 at AVX2, as sum_block_f32_avx2. */
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c"))) static void
sum_lanes_lowp_avx512(double *lanes, const uint16_t *x, int64_t n8, bool bf16) {
    __m512d acc = _mm512_loadu_pd(lanes);
    int64_t k = 0;
    for (; k + 16 <= n8; k += 16) {
        if (k % 32 == 0 && k + 2 * SUM_PREFETCH_AHEAD < n8)
            __builtin_prefetch(x + k + 2 * SUM_PREFETCH_AHEAD);
        __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)(x + k));
        __m512 v = bf16 ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))
                        : _mm512_cvtph_ps(h);
        acc = _mm512_add_pd(acc, _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
        acc = _mm512_add_pd(acc, _mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1)));
    }
    if (k < n8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(x + k));
        __m256 v = bf16 ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
                        : _mm256_cvtph_ps(h);
        acc = _mm512_add_pd(acc, _mm512_cvtps_pd(v));
    }
    _mm512_storeu_pd(lanes, acc);
}
/* Two whole blocks at once (x and x + SUM_BLOCK), each into its own lanes: one block's lanes form
 * a chain of dependent additions, so a second, independent chain doubles what the adders do per
 * cycle; each block's sums are still exactly its own, in its own order. */
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c"))) static void
sum_two_blocks_lowp_avx512(double *lanes_a, double *lanes_b, const uint16_t *x, bool bf16) {
    __m512d a = _mm512_setzero_pd(), b = _mm512_setzero_pd();
    const uint16_t *y = x + SUM_BLOCK;
    for (int64_t k = 0; k < SUM_BLOCK; k += 16) {
        if (k % 32 == 0 && k + 2 * SUM_PREFETCH_AHEAD < SUM_BLOCK) {
            __builtin_prefetch(x + k + 2 * SUM_PREFETCH_AHEAD);
            __builtin_prefetch(y + k + 2 * SUM_PREFETCH_AHEAD);
        }
        __m256i hx = _mm256_loadu_si256((const __m256i *)(const void *)(x + k));
        __m256i hy = _mm256_loadu_si256((const __m256i *)(const void *)(y + k));
        __m512 vx = bf16 ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(hx), 16))
                         : _mm512_cvtph_ps(hx);
        __m512 vy = bf16 ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(hy), 16))
                         : _mm512_cvtph_ps(hy);
        a = _mm512_add_pd(a, _mm512_cvtps_pd(_mm512_castps512_ps256(vx)));
        b = _mm512_add_pd(b, _mm512_cvtps_pd(_mm512_castps512_ps256(vy)));
        a = _mm512_add_pd(a, _mm512_cvtps_pd(_mm512_extractf32x8_ps(vx, 1)));
        b = _mm512_add_pd(b, _mm512_cvtps_pd(_mm512_extractf32x8_ps(vy, 1)));
    }
    _mm512_storeu_pd(lanes_a, a);
    _mm512_storeu_pd(lanes_b, b);
}
__attribute__((target("avx2,fma,f16c"))) static void
sum_lanes_lowp_avx2(double *lanes, const uint16_t *x, int64_t n8, bool bf16) {
    __m256d low = _mm256_loadu_pd(lanes), high = _mm256_loadu_pd(lanes + 4);
    for (int64_t k = 0; k < n8; k += 8) {
        if (k % 32 == 0 && k + 2 * SUM_PREFETCH_AHEAD < n8)
            __builtin_prefetch(x + k + 2 * SUM_PREFETCH_AHEAD);
        __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(x + k));
        __m256 v = bf16 ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
                        : _mm256_cvtph_ps(h);
        low = _mm256_add_pd(low, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
        high = _mm256_add_pd(high, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
    }
    _mm256_storeu_pd(lanes, low);
    _mm256_storeu_pd(lanes + 4, high);
}
#endif

/* The totals of the two whole contiguous blocks at x, as sum_block_lowp gives each; false where
 * the level has no such loop. */
static bool sum_two_blocks_lowp(eg_dtype dtype, const uint16_t *x, double *totals) {
#if defined(__x86_64__)
    if (eg__cpu_active_level() >= EG__CPU_AVX512 &&
        (dtype == EG_DTYPE_BF16 || eg__cpu_has_f16c())) {
        double lanes[2][8];
        sum_two_blocks_lowp_avx512(lanes[0], lanes[1], x, dtype == EG_DTYPE_BF16);
        for (int k = 0; k < 2; k++) {
            totals[k] = 0;
            for (int l = 0; l < 8; l++) totals[k] += lanes[k][l];
        }
        return true;
    }
#else
    (void)dtype, (void)x, (void)totals;
#endif
    return false;
}

static double sum_block_lowp(eg_dtype dtype, const uint16_t *x, int64_t n, int64_t inner) {
    double lanes[8] = {0};
    int64_t main_end = n - n % 8, k = 0;
#if defined(__x86_64__)
    eg__cpu_level level = eg__cpu_active_level();
    if (inner == 1 && level >= EG__CPU_AVX2 && (dtype == EG_DTYPE_BF16 || eg__cpu_has_f16c())) {
        if (level >= EG__CPU_AVX512)
            sum_lanes_lowp_avx512(lanes, x, main_end, dtype == EG_DTYPE_BF16);
        else
            sum_lanes_lowp_avx2(lanes, x, main_end, dtype == EG_DTYPE_BF16);
        k = main_end;
    }
#endif
    float block[EG__LOWP_BLOCK];
    for (; k < main_end; k += EG__LOWP_BLOCK) {
        int64_t count = main_end - k < EG__LOWP_BLOCK ? main_end - k : EG__LOWP_BLOCK;
        eg__lowp_widen(dtype, count, (const char *)(x + k * inner), 2 * inner, block);
        sum_lanes_widened(lanes, block, count);
    }
    for (k = main_end; k < n; k++) lanes[0] += eg__lowp_to_float(dtype, x[k * inner]);
    double total = 0;
    for (int l = 0; l < 8; l++) total += lanes[l];
    return total;
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

/* bf16 / f16 rows: sums as above (sum_block_lowp), maxima and minima compared in f32 on widened
 * blocks (the same first NaN wins), each result rounded once. */
static void reduce_rows_lowp(const reduce_job *job, int64_t begin, int64_t end) {
    const reduce_plan *plan = job->plan;
    eg_dtype dtype = plan->source->dtype;
    const uint16_t *src = eg__data(plan->source);
    uint16_t *out = job->out;
    int64_t r = plan->reduced, inner = plan->inner;
    float block[EG__LOWP_BLOCK];
    for (int64_t g = begin; g < end; g++) {
        int64_t o = g / inner, i = g % inner;
        const uint16_t *x = src + o * r * inner + i;
        double result = 0;
        if (job->op == EG__OP_SUM || job->op == EG__OP_MEAN) {
            for (int64_t b = 0; b < r; b += SUM_BLOCK)
                result += sum_block_lowp(dtype, x + b * inner,
                                         r - b < SUM_BLOCK ? r - b : SUM_BLOCK, inner);
            if (job->op == EG__OP_MEAN) result /= (double)r;
        } else { /* max, min: never empty (inference rejects it) */
            bool is_max = job->op == EG__OP_MAX, nan = false;
            float best = eg__lowp_to_float(dtype, x[0]);
            for (int64_t k0 = 0; k0 < r && !nan; k0 += EG__LOWP_BLOCK) {
                int64_t count = r - k0 < EG__LOWP_BLOCK ? r - k0 : EG__LOWP_BLOCK;
                eg__lowp_widen(dtype, count, (const char *)(x + k0 * inner), 2 * inner, block);
                for (int64_t k = k0 ? 0 : 1; k < count; k++) {
                    float v = block[k];
                    if (v != v) {
                        best = v;
                        nan = true;
                        break;
                    }
                    if (is_max ? v > best : v < best) best = v;
                }
            }
            result = best;
        }
        out[g] = eg__lowp_from_double(dtype, result);
    }
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
/* Row `offset` (in elements from the source's start) of a chunk, `width` columns, as f32: the
 * source itself for f32; bf16 / f16 widened into slot. */
static inline __attribute__((always_inline)) const float *
column_row(eg_dtype dtype, const char *src, int64_t offset, int64_t width, float *slot) {
    if (dtype == EG_DTYPE_F32) return (const float *)(const void *)src + offset;
    eg__lowp_widen(dtype, width, src + 2 * offset, 2, slot);
    return slot;
}

/* dtype: f32 (rows NULL), or bf16 / f16 with rows 4 * chunk floats of scratch, where each row's
 * piece is widened first: the same additions on the same values, then one rounding. */
static inline __attribute__((always_inline)) void
sum_columns_chunked_body(const reduce_job *job, int64_t begin, int64_t end, int64_t chunk,
                         double *lanes, double *totals, eg_dtype dtype, float *rows) {
    const reduce_plan *plan = job->plan;
    const char *src = eg__data(plan->source);
    int64_t r = plan->reduced, inner = plan->inner;
    for (int64_t o = 0; o < plan->outer; o++) {
        for (int64_t c0 = begin; c0 < end; c0 += chunk) {
            int64_t width = end - c0 < chunk ? end - c0 : chunk;
            for (int64_t i = 0; i < width; i++) totals[i] = 0;
            for (int64_t b = 0; b < r; b += SUM_BLOCK) {
                int64_t n = r - b < SUM_BLOCK ? r - b : SUM_BLOCK, main_end = n - n % 8, k = 0;
                memset(lanes, 0, sizeof(double) * 8 * (size_t)chunk);
                int64_t block = (o * r + b) * inner + c0;
                /* four rows into each lane per pass (rows k + l, k + l + 8, ... in order, as
                 * left-to-right additions): a quarter of the lanes' memory traffic, which bound
                 * the one-row-per-pass loop at ~5 GB/s */
                for (; k + 32 <= main_end; k += 32)
                    for (int l = 0; l < 8; l++) {
                        int64_t at = block + (k + l) * inner;
                        const float *row = column_row(dtype, src, at, width, rows);
                        const float *row8 = column_row(dtype, src, at + 8 * inner, width,
                                                       rows ? rows + chunk : NULL);
                        const float *row16 = column_row(dtype, src, at + 16 * inner, width,
                                                        rows ? rows + 2 * chunk : NULL);
                        const float *row24 = column_row(dtype, src, at + 24 * inner, width,
                                                        rows ? rows + 3 * chunk : NULL);
                        double *lane = lanes + l * chunk;
                        for (int64_t i = 0; i < width; i++)
                            lane[i] = lane[i] + (double)row[i] + (double)row8[i] +
                                      (double)row16[i] + (double)row24[i];
                    }
                for (; k < main_end; k += 8)
                    for (int l = 0; l < 8; l++) {
                        const float *row =
                            column_row(dtype, src, block + (k + l) * inner, width, rows);
                        double *lane = lanes + l * chunk;
                        for (int64_t i = 0; i < width; i++) lane[i] += row[i];
                    }
                for (; k < n; k++) {
                    const float *row = column_row(dtype, src, block + k * inner, width, rows);
                    for (int64_t i = 0; i < width; i++) lanes[i] += row[i];
                }
                for (int64_t i = 0; i < width; i++) {
                    double total = 0;
                    for (int l = 0; l < 8; l++) total += lanes[l * chunk + i];
                    totals[i] += total;
                }
            }
            for (int64_t i = 0; i < width; i++) {
                double v = job->op == EG__OP_MEAN ? totals[i] / (double)r : totals[i];
                if (dtype == EG_DTYPE_F32)
                    ((float *)job->out)[o * inner + c0 + i] = (float)v;
                else
                    ((uint16_t *)job->out)[o * inner + c0 + i] = eg__lowp_from_double(dtype, v);
            }
        }
    }
}

/* The body compiled for the baseline and for AVX2 and AVX-512, where the column loops run 4 and 8
 * doubles wide: every column's additions are the same, in the same order (no multiplies, so
 * nothing to contract): the same bits on every path. f32 gets its own copy of each. */
#define SUM_COLUMNS_VARIANT(SUFFIX, ATTRIBUTES)                                                    \
    ATTRIBUTES static void sum_columns_chunked_##SUFFIX(const reduce_job *job, int64_t begin,      \
                                                        int64_t end, int64_t chunk, double *lanes, \
                                                        double *totals, float *rows) {             \
        eg_dtype dtype = job->plan->source->dtype;                                                 \
        if (dtype == EG_DTYPE_F32)                                                                 \
            sum_columns_chunked_body(job, begin, end, chunk, lanes, totals, EG_DTYPE_F32, NULL);   \
        else                                                                                       \
            sum_columns_chunked_body(job, begin, end, chunk, lanes, totals, dtype, rows);          \
    }
SUM_COLUMNS_VARIANT(baseline, )
#if defined(__x86_64__)
SUM_COLUMNS_VARIANT(avx2, __attribute__((target("avx2,fma"))))
SUM_COLUMNS_VARIANT(avx512, __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma"))))
#endif

static void sum_columns_chunked(const reduce_job *job, int64_t begin, int64_t end, int64_t chunk,
                                double *lanes, double *totals, float *rows) {
#if defined(__x86_64__)
    eg__cpu_level level = eg__cpu_active_level();
    if (level >= EG__CPU_AVX512) {
        sum_columns_chunked_avx512(job, begin, end, chunk, lanes, totals, rows);
        return;
    }
    if (level >= EG__CPU_AVX2) {
        sum_columns_chunked_avx2(job, begin, end, chunk, lanes, totals, rows);
        return;
    }
#endif
    sum_columns_chunked_baseline(job, begin, end, chunk, lanes, totals, rows);
}

/* Wide chunks give long contiguous reads of each row (a 4096 x 4096 column sum, one thread, by
 * CPU time: 1.2 GB/s with 128 columns, 2.3 with 512, 4 with 2048, 5 with 4096), so their lanes
 * (and bf16 / f16 rows widened) live on the heap; without memory, narrow chunks on the stack do
 * the same sums. */
static void sum_columns_float(const reduce_job *job, int64_t begin, int64_t end) {
    enum { WIDE = 4096, NARROW = 128 };
    int64_t chunk = end - begin < WIDE ? end - begin : WIDE;
    double *lanes =
        chunk > NARROW ? malloc((sizeof(double) * 9 + sizeof(float) * 4) * (size_t)chunk) : NULL;
    if (lanes) {
        sum_columns_chunked(job, begin, end, chunk, lanes, lanes + 8 * chunk,
                            (float *)(void *)(lanes + 9 * chunk));
        free(lanes);
    } else {
        double narrow[9 * NARROW];
        float rows[4 * NARROW];
        sum_columns_chunked(job, begin, end, NARROW, narrow, narrow + 8 * NARROW, rows);
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
        else if (eg__is_lowp(plan->source->dtype)) {
            const uint16_t *x = (const uint16_t *)eg__data(plan->source) + o * r + b;
            /* two whole blocks of the same row in this task: side by side */
            if (item + 1 < end && (item + 1) % job->n_blocks != 0 && r - b >= 2 * SUM_BLOCK &&
                sum_two_blocks_lowp(plan->source->dtype, x, &job->totals[item])) {
                item++;
                continue;
            }
            job->totals[item] = sum_block_lowp(plan->source->dtype, x, n, 1);
        } else
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
        else if (eg__is_lowp(plan->source->dtype))
            ((uint16_t *)out)[o] = eg__lowp_from_double(plan->source->dtype, result);
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
    case EG_DTYPE_BF16:
    case EG_DTYPE_F16:
        reduce_rows_lowp(job, begin, end);
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
    bool is_floating = plan.source->dtype == EG_DTYPE_F32 || plan.source->dtype == EG_DTYPE_F64 ||
                       eg__is_lowp(plan.source->dtype);
    if (is_sum && is_floating && plan.inner == 1 && plan.reduced > SUM_BLOCK &&
        plan.outer < 4 * eg__num_threads()) {
        status = sum_long_rows(call->op, &plan, job.out);
        eg__unref(plan.source);
        return status;
    }
    int64_t grain = EG_PARALLEL_GRAIN_ELEMENTWISE / (plan.reduced ? plan.reduced : 1) + 1;
    if (plan.inner > 1 && (plan.source->dtype == EG_DTYPE_F32 || eg__is_lowp(plan.source->dtype)) &&
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

/* bf16 / f16: the same comparisons on the values widened to f32, a block at a time. */
static void arg_reduce_lowp(eg_dtype dtype, const uint16_t *src, int64_t *out,
                            const reduce_plan *plan, bool is_max) {
    float block[EG__LOWP_BLOCK];
    int64_t r = plan->reduced, inner = plan->inner;
    for (int64_t o = 0; o < plan->outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const uint16_t *row = src + o * r * inner + i;
            int64_t best = 0;
            float best_value = eg__lowp_to_float(dtype, row[0]);
            for (int64_t k0 = 0; k0 < r; k0 += EG__LOWP_BLOCK) {
                int64_t count = r - k0 < EG__LOWP_BLOCK ? r - k0 : EG__LOWP_BLOCK;
                eg__lowp_widen(dtype, count, (const char *)(row + k0 * inner), 2 * inner, block);
                for (int64_t k = 0; k < count; k++) {
                    float v = block[k];
                    if (is_max ? v > best_value : v < best_value) {
                        best_value = v;
                        best = k0 + k;
                    }
                }
            }
            out[o * inner + i] = best;
        }
}

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
    if (plan.reduced > 0 &&
        (dtype == EG_DTYPE_F32 || dtype == EG_DTYPE_F64 || eg__is_lowp(dtype))) {
        if (eg__is_lowp(dtype))
            arg_reduce_lowp(dtype, (const uint16_t *)(const void *)src, out, &plan, is_max);
        else if (dtype == EG_DTYPE_F32)
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
