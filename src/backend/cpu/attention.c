/* CPU kernels of the fused scaled dot-product attention (ops.def: attention, attention_backward).
 *
 * FlashAttention's scheme on the CPU: a block of BLOCK_Q query rows meets the keys BLOCK_K at a
 * time; each block's scores are one small product into a BLOCK_Q x BLOCK_K buffer, and the
 * rows' running maximum, sum and output are rescaled as later blocks raise the maximum (online
 * softmax). The scores never exist whole: beyond the result, memory is a few blocks per thread,
 * whatever the sequence length. The forward keeps each row's logsumexp L; the backward
 * recomputes each block's probabilities as exp(s - L) (FlashAttention-2), so it needs no saved
 * probabilities either. Products go through BLAS (single-threaded: Eagle's pool splits the work
 * over batch, heads and query blocks). */
#include <cblas.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kernels.h"
#include "backend/cpu/vecmath.h"
#include "base/error.h"

enum { BLOCK_Q = 64, BLOCK_K = 64 };

typedef struct attention_job {
    eg_dtype dtype;
    int64_t batch, heads, tq, tk, depth, depth_v;
    double scale;
    bool causal;
    const char *q, *k, *v, *grad, *fwd; /* contiguous */
    const bool *mask;                   /* (B, Tk) or NULL */
    char *out;
    atomic_bool failed;
} attention_job;

/* Row-major C (m x n) = alpha op(A) op(B) + beta C. */
static void gemm(eg_dtype dtype, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
                 const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c,
                 int64_t ldc) {
    enum CBLAS_TRANSPOSE ta_ = ta ? CblasTrans : CblasNoTrans, tb_ = tb ? CblasTrans : CblasNoTrans;
    if (dtype == EG_DTYPE_F32)
        cblas_sgemm(CblasRowMajor, ta_, tb_, (int)m, (int)n, (int)k, (float)alpha, a, (int)lda, b,
                    (int)ldb, (float)beta, c, (int)ldc);
    else
        cblas_dgemm(CblasRowMajor, ta_, tb_, (int)m, (int)n, (int)k, alpha, a, (int)lda, b,
                    (int)ldb, beta, c, (int)ldc);
}

/* Whether query row i may see key j of batch b. */
static inline bool visible(const attention_job *job, int64_t b, int64_t i, int64_t j) {
    return (!job->causal || j <= i) && (!job->mask || job->mask[b * job->tk + j]);
}

/* The keys [0, end) a block of queries ending at row `last` looks at: causal rows stop early. */
static int64_t key_end(const attention_job *job, int64_t last) {
    return job->causal && last + 1 < job->tk ? last + 1 : job->tk;
}

#define ATTENTION_KERNELS(T, suffix, EXP_ROW)                                                      \
    /* Scores of a block: s = scale q k^T, -inf where not visible. */                              \
    static void block_scores_##suffix(const attention_job *job, int64_t b, int64_t i0, int64_t rq, \
                                      int64_t j0, int64_t rk, const T *q, const T *k, T *s) {      \
        gemm(job->dtype, false, true, rq, rk, job->depth, job->scale, q, job->depth, k,            \
             job->depth, 0.0, s, BLOCK_K);                                                         \
        if (!job->causal && !job->mask) return;                                                    \
        for (int64_t r = 0; r < rq; r++)                                                           \
            for (int64_t c = 0; c < rk; c++)                                                       \
                if (!visible(job, b, i0 + r, j0 + c)) s[r * BLOCK_K + c] = (T)-INFINITY;           \
    }                                                                                              \
    /* One task: query block `task` of one (batch, head). */                                       \
    static void forward_blocks_##suffix(void *context, int64_t begin, int64_t end) {               \
        attention_job *job = context;                                                              \
        int64_t blocks = (job->tq + BLOCK_Q - 1) / BLOCK_Q, dv = job->depth_v;                     \
        T *s = malloc(sizeof(T) * (BLOCK_Q * BLOCK_K + BLOCK_Q * 2));                              \
        if (!s) {                                                                                  \
            atomic_store(&job->failed, true);                                                      \
            return;                                                                                \
        }                                                                                          \
        T *row_max = s + BLOCK_Q * BLOCK_K, *row_sum = row_max + BLOCK_Q;                          \
        T *out = (T *)job->out, *lse = out + job->batch * job->heads * job->tq * dv;               \
        for (int64_t task = begin; task < end; task++) {                                           \
            int64_t bh = task / blocks, i0 = (task % blocks) * BLOCK_Q, b = bh / job->heads;       \
            int64_t rq = job->tq - i0 < BLOCK_Q ? job->tq - i0 : BLOCK_Q;                          \
            const T *q = (const T *)job->q + (bh * job->tq + i0) * job->depth;                     \
            const T *k = (const T *)job->k + bh * job->tk * job->depth;                            \
            const T *v = (const T *)job->v + bh * job->tk * dv;                                    \
            T *o = out + (bh * job->tq + i0) * dv;                                                 \
            memset(o, 0, sizeof(T) * (size_t)(rq * dv));                                           \
            for (int64_t r = 0; r < rq; r++) {                                                     \
                row_max[r] = (T)-INFINITY;                                                         \
                row_sum[r] = 0;                                                                    \
            }                                                                                      \
            int64_t keys = key_end(job, i0 + rq - 1);                                              \
            for (int64_t j0 = 0; j0 < keys; j0 += BLOCK_K) {                                       \
                int64_t rk = keys - j0 < BLOCK_K ? keys - j0 : BLOCK_K;                            \
                block_scores_##suffix(job, b, i0, rq, j0, rk, q, k + j0 * job->depth, s);          \
                for (int64_t r = 0; r < rq; r++) {                                                 \
                    T *sr = s + r * BLOCK_K, m = row_max[r];                                       \
                    for (int64_t c = 0; c < rk; c++) m = sr[c] > m ? sr[c] : m;                    \
                    /* a row with nothing visible yet stays at zero weight */                      \
                    T base = m == (T)-INFINITY ? 0 : m;                                            \
                    T rescale = row_max[r] == (T)-INFINITY ? 0 : (T)exp(row_max[r] - base);        \
                    for (int64_t c = 0; c < rk; c++) sr[c] -= base;                                \
                    EXP_ROW(sr, rk);                                                               \
                    T sum = 0;                                                                     \
                    for (int64_t c = 0; c < rk; c++) sum += sr[c];                                 \
                    row_sum[r] = row_sum[r] * rescale + sum;                                       \
                    row_max[r] = m;                                                                \
                    if (rescale != (T)1)                                                           \
                        for (int64_t d = 0; d < dv; d++) o[r * dv + d] *= rescale;                 \
                }                                                                                  \
                gemm(job->dtype, false, false, rq, dv, rk, 1.0, s, BLOCK_K, v + j0 * dv, dv, 1.0,  \
                     o, dv);                                                                       \
            }                                                                                      \
            for (int64_t r = 0; r < rq; r++) {                                                     \
                T inv = row_sum[r] > 0 ? (T)1 / row_sum[r] : 0;                                    \
                for (int64_t d = 0; d < dv; d++) o[r * dv + d] *= inv;                             \
                lse[bh * job->tq + i0 + r] =                                                       \
                    row_sum[r] > 0 ? row_max[r] + (T)log(row_sum[r]) : (T)INFINITY;                \
            }                                                                                      \
        }                                                                                          \
        free(s);                                                                                   \
    }                                                                                              \
    /* One task: one (batch, head), key blocks outer (their dk, dv in buffers), query blocks       \
     * inner (dq added in place: the task owns its rows). */                                       \
    static void backward_heads_##suffix(void *context, int64_t begin, int64_t end) {               \
        attention_job *job = context;                                                              \
        int64_t d = job->depth, dv = job->depth_v, tq = job->tq, tk = job->tk;                     \
        int64_t rows = job->batch * job->heads * tq;                                               \
        size_t scratch = (size_t)(2 * BLOCK_Q * BLOCK_K + BLOCK_K * (d + dv) + tq);                \
        T *p = malloc(sizeof(T) * scratch);                                                        \
        if (!p) {                                                                                  \
            atomic_store(&job->failed, true);                                                      \
            return;                                                                                \
        }                                                                                          \
        T *dp = p + BLOCK_Q * BLOCK_K, *dk_blk = dp + BLOCK_Q * BLOCK_K,                           \
          *dv_blk = dk_blk + BLOCK_K * d;                                                          \
        T *delta = dv_blk + BLOCK_K * dv;                                                          \
        const T *o_all = (const T *)job->fwd, *lse_all = o_all + rows * dv;                        \
        T *dq_all = (T *)job->out, *dk_all = dq_all + rows * d;                                    \
        T *dv_all = dk_all + job->batch * job->heads * tk * d;                                     \
        for (int64_t bh = begin; bh < end; bh++) {                                                 \
            int64_t b = bh / job->heads;                                                           \
            const T *q = (const T *)job->q + bh * tq * d, *k = (const T *)job->k + bh * tk * d;    \
            const T *v = (const T *)job->v + bh * tk * dv,                                         \
                    *g = (const T *)job->grad + bh * tq * dv;                                      \
            const T *o = o_all + bh * tq * dv, *lse = lse_all + bh * tq;                           \
            T *dq = dq_all + bh * tq * d;                                                          \
            memset(dq, 0, sizeof(T) * (size_t)(tq * d));                                           \
            for (int64_t i = 0; i < tq; i++) {                                                     \
                T sum = 0;                                                                         \
                for (int64_t c = 0; c < dv; c++) sum += g[i * dv + c] * o[i * dv + c];             \
                delta[i] = sum;                                                                    \
            }                                                                                      \
            for (int64_t j0 = 0; j0 < tk; j0 += BLOCK_K) {                                         \
                int64_t rk = tk - j0 < BLOCK_K ? tk - j0 : BLOCK_K;                                \
                memset(dk_blk, 0, sizeof(T) * (size_t)(rk * d));                                   \
                memset(dv_blk, 0, sizeof(T) * (size_t)(rk * dv));                                  \
                int64_t first = job->causal ? j0 / BLOCK_Q * BLOCK_Q : 0;                          \
                for (int64_t i0 = first; i0 < tq; i0 += BLOCK_Q) {                                 \
                    int64_t rq = tq - i0 < BLOCK_Q ? tq - i0 : BLOCK_Q;                            \
                    block_scores_##suffix(job, b, i0, rq, j0, rk, q + i0 * d, k + j0 * d, p);      \
                    for (int64_t r = 0; r < rq; r++) {                                             \
                        T *pr = p + r * BLOCK_K, l = lse[i0 + r];                                  \
                        if (l == (T)INFINITY) {                                                    \
                            for (int64_t c = 0; c < rk; c++) pr[c] = 0;                            \
                            continue;                                                              \
                        }                                                                          \
                        for (int64_t c = 0; c < rk; c++) pr[c] -= l;                               \
                        EXP_ROW(pr, rk);                                                           \
                    }                                                                              \
                    /* dv += p^T g; dp = g v^T; ds = p (dp - delta); dq += ds k; dk += ds^T q */   \
                    gemm(job->dtype, true, false, rk, dv, rq, 1.0, p, BLOCK_K, g + i0 * dv, dv,    \
                         1.0, dv_blk, dv);                                                         \
                    gemm(job->dtype, false, true, rq, rk, dv, 1.0, g + i0 * dv, dv, v + j0 * dv,   \
                         dv, 0.0, dp, BLOCK_K);                                                    \
                    for (int64_t r = 0; r < rq; r++)                                               \
                        for (int64_t c = 0; c < rk; c++)                                           \
                            dp[r * BLOCK_K + c] =                                                  \
                                p[r * BLOCK_K + c] * (dp[r * BLOCK_K + c] - delta[i0 + r]);        \
                    gemm(job->dtype, false, false, rq, d, rk, job->scale, dp, BLOCK_K, k + j0 * d, \
                         d, 1.0, dq + i0 * d, d);                                                  \
                    gemm(job->dtype, true, false, rk, d, rq, job->scale, dp, BLOCK_K, q + i0 * d,  \
                         d, 1.0, dk_blk, d);                                                       \
                }                                                                                  \
                memcpy(dk_all + (bh * tk + j0) * d, dk_blk, sizeof(T) * (size_t)(rk * d));         \
                memcpy(dv_all + (bh * tk + j0) * dv, dv_blk, sizeof(T) * (size_t)(rk * dv));       \
            }                                                                                      \
        }                                                                                          \
        free(p);                                                                                   \
    }

#define EXP_ROW_F32(row, n) eg__vecmath_f32(EG__VECMATH_EXP, (n), (row), (row))
#define EXP_ROW_F64(row, n)                                                                        \
    for (int64_t e_ = 0; e_ < (n); e_++) (row)[e_] = exp((row)[e_])

ATTENTION_KERNELS(float, f32, EXP_ROW_F32)
ATTENTION_KERNELS(double, f64, EXP_ROW_F64)

/* Fills the job from the call: q, k, v (and the gradient and forward result) contiguous. */
static eg_status prepare(const eg__kernel_call *call, int mask_index, int n_values,
                         attention_job *job, eg_tensor **temps) {
    const eg_tensor *q = call->inputs[0], *k = call->inputs[1], *v = call->inputs[2];
    *job = (attention_job){.dtype = q->dtype,
                           .batch = q->shape[0],
                           .heads = q->shape[1],
                           .tq = q->shape[2],
                           .tk = k->shape[2],
                           .depth = q->shape[3],
                           .depth_v = v->shape[3],
                           .scale = call->attrs->scalars[0],
                           .causal = call->attrs->ints[0] != 0,
                           .out = eg__data(call->output)};
    atomic_init(&job->failed, false);
    const char **slots[5] = {&job->q, &job->k, &job->v, &job->fwd, &job->grad};
    for (int i = 0; i < n_values; i++) {
        temps[i] = eg__contiguous_temp(call->inputs[i]);
        if (!temps[i]) return eg__error(EG_ERR_OUT_OF_MEMORY, "attention: out of host memory");
        *slots[i] = eg__data(temps[i]);
    }
    if (call->n_inputs > mask_index) {
        temps[n_values] = eg__contiguous_temp(call->inputs[mask_index]);
        if (!temps[n_values])
            return eg__error(EG_ERR_OUT_OF_MEMORY, "attention: out of host memory");
        job->mask = eg__data(temps[n_values]);
    }
    eg__blas_single_threaded();
    return EG_OK;
}

static eg_status finish(attention_job *job, eg_tensor **temps, int n, eg_status status) {
    for (int i = 0; i < n; i++) eg__unref(temps[i]);
    if (status == EG_OK && atomic_load(&job->failed))
        return eg__error(EG_ERR_OUT_OF_MEMORY, "attention: out of host memory for its blocks");
    return status;
}

eg_status eg__cpu_attention(const eg__kernel_call *call);
eg_status eg__cpu_attention(const eg__kernel_call *call) {
    attention_job job;
    eg_tensor *temps[4] = {NULL};
    eg_status status = prepare(call, 3, 3, &job, temps);
    if (status == EG_OK) {
        int64_t blocks = (job.tq + BLOCK_Q - 1) / BLOCK_Q;
        eg__parallel_for(job.batch * job.heads * blocks, 1,
                         job.dtype == EG_DTYPE_F64 ? forward_blocks_f64 : forward_blocks_f32, &job);
    }
    return finish(&job, temps, 4, status);
}

eg_status eg__cpu_attention_backward(const eg__kernel_call *call);
eg_status eg__cpu_attention_backward(const eg__kernel_call *call) {
    attention_job job;
    eg_tensor *temps[6] = {NULL};
    eg_status status = prepare(call, 5, 5, &job, temps);
    if (status == EG_OK)
        eg__parallel_for(job.batch * job.heads, 1,
                         job.dtype == EG_DTYPE_F64 ? backward_heads_f64 : backward_heads_f32, &job);
    return finish(&job, temps, 6, status);
}
