/* CPU kernels for elementwise ops: unary math, binary arithmetic with broadcasting,
 * comparisons, where, cast, clip and copies (dropout is in dropout.c).
 * Inner loops have a contiguous case the compiler vectorizes and a strided fallback. */
#include <math.h>
#include <string.h>

#include "base/cpu_features.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/lowp.h"
#include "backend/cpu/vecmath.h"
#include "base/error.h"

/* Applies EXPR (in terms of x) from operand 1 into operand 0. */
#define UNARY_LOOP(T, EXPR)                                                                        \
    do {                                                                                           \
        if (s[0] == sizeof(T) && s[1] == sizeof(T)) {                                              \
            T *restrict out_ = (T *)p[0];                                                          \
            const T *restrict in_ = (const T *)p[1];                                               \
            for (int64_t i = 0; i < n; i++) {                                                      \
                T x = in_[i];                                                                      \
                out_[i] = (EXPR);                                                                  \
            }                                                                                      \
        } else {                                                                                   \
            for (int64_t i = 0; i < n; i++) {                                                      \
                T x = *(const T *)(p[1] + i * s[1]);                                               \
                *(T *)(p[0] + i * s[0]) = (EXPR);                                                  \
            }                                                                                      \
        }                                                                                          \
    } while (0)

typedef struct unary_context {
    eg__op op;
    eg_dtype dtype;
    double low, high;
    bool fast_math; /* built in a fast-math region (eagle/ops.h): only f32 takes it */
} unary_context;

#define UNARY_CASES(T, EXP, LOG, SQRT, SIN, COS, TANH, ERF, FABS, LOG1P)                           \
    switch (c->op) {                                                                               \
    case EG__OP_NEG:                                                                               \
        UNARY_LOOP(T, -x);                                                                         \
        break;                                                                                     \
    case EG__OP_ABS:                                                                               \
        UNARY_LOOP(T, FABS(x));                                                                    \
        break;                                                                                     \
    case EG__OP_EXP:                                                                               \
        UNARY_LOOP(T, EXP(x));                                                                     \
        break;                                                                                     \
    case EG__OP_LOG:                                                                               \
        UNARY_LOOP(T, LOG(x));                                                                     \
        break;                                                                                     \
    case EG__OP_SQRT:                                                                              \
        UNARY_LOOP(T, SQRT(x));                                                                    \
        break;                                                                                     \
    case EG__OP_RSQRT:                                                                             \
        UNARY_LOOP(T, (T)1 / SQRT(x));                                                             \
        break;                                                                                     \
    case EG__OP_SIN:                                                                               \
        UNARY_LOOP(T, SIN(x));                                                                     \
        break;                                                                                     \
    case EG__OP_COS:                                                                               \
        UNARY_LOOP(T, COS(x));                                                                     \
        break;                                                                                     \
    case EG__OP_TANH:                                                                              \
        UNARY_LOOP(T, TANH(x));                                                                    \
        break;                                                                                     \
    case EG__OP_SIGMOID:                                                                           \
        UNARY_LOOP(T, (T)1 / ((T)1 + EXP(-x)));                                                    \
        break;                                                                                     \
    case EG__OP_RELU:                                                                              \
        UNARY_LOOP(T, EG__RELU(x, (T)0));                                                        \
        break;                                                                                     \
    case EG__OP_GELU:                                                                              \
        UNARY_LOOP(T, (T)0.5 * x * ((T)1 + ERF(x * (T)M_SQRT1_2)));                                \
        break;                                                                                     \
    case EG__OP_SOFTPLUS:                                                                          \
        UNARY_LOOP(T, (x > (T)0 ? x : (T)0) + LOG1P(EXP(-FABS(x))));                               \
        break;                                                                                     \
    case EG__OP_SIGN:                                                                              \
        UNARY_LOOP(T, (T)((x > (T)0) - (x < (T)0)));                                               \
        break;                                                                                     \
    case EG__OP_SQUARE:                                                                            \
        UNARY_LOOP(T, x *x);                                                                       \
        break;                                                                                     \
    case EG__OP_RECIPROCAL:                                                                        \
        UNARY_LOOP(T, (T)1 / x);                                                                   \
        break;                                                                                     \
    case EG__OP_ERF:                                                                               \
        UNARY_LOOP(T, ERF(x));                                                                     \
        break;                                                                                     \
    case EG__OP_CLIP: {                                                                            \
        T low = (T)c->low, high = (T)c->high;                                                      \
        UNARY_LOOP(T, x < low ? low : (x > high ? high : x));                                      \
        break;                                                                                     \
    }                                                                                              \
    default:                                                                                       \
        break;                                                                                     \
    }

/* The f32 transcendental ops run on our vector math (vecmath.h): on a given CPU path, the same
 * bits for every stride and position, in eager mode and in lazy fused loops; fast: the fast-math
 * variant where there is one. -1 for others. */
static int vecmath_of(eg__op op, bool fast) {
    switch (op) {
    case EG__OP_EXP:
        return fast ? EG__VECMATH_EXP_FAST : EG__VECMATH_EXP;
    case EG__OP_LOG:
        return EG__VECMATH_LOG;
    case EG__OP_TANH:
        return fast ? EG__VECMATH_TANH_FAST : EG__VECMATH_TANH;
    case EG__OP_SIGMOID:
        return fast ? EG__VECMATH_SIGMOID_FAST : EG__VECMATH_SIGMOID;
    case EG__OP_GELU:
        return fast ? EG__VECMATH_GELU_FAST : EG__VECMATH_GELU;
    case EG__OP_SOFTPLUS:
        return EG__VECMATH_SOFTPLUS;
    default:
        return -1;
    }
}

/* The plain loops are compiled once per level, for the baseline, AVX2 and AVX-512 (wider vectors
 * for the compiler's vectorizer); all do the same IEEE operations, so the bits agree. */
#define AVX2_TARGET   __attribute__((target("avx2,fma")))
#define AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")))
#define UNARY_VARIANT(SUFFIX, ATTRIBUTES)                                                          \
    ATTRIBUTES static void float_unary_##SUFFIX(const unary_context *c, int64_t n, char **p,       \
                                                const int64_t *s){UNARY_CASES(                     \
        float, expf, logf, sqrtf, sinf, cosf, tanhf, erff, fabsf,                                  \
        log1pf)} ATTRIBUTES static void double_unary_##SUFFIX(const unary_context *c, int64_t n,   \
                                                              char **p, const int64_t *s) {        \
        UNARY_CASES(double, exp, log, sqrt, sin, cos, tanh, erf, fabs, log1p)                      \
    }
UNARY_VARIANT(baseline, )
UNARY_VARIANT(avx2, AVX2_TARGET)
UNARY_VARIANT(avx512, AVX512_TARGET)

typedef void (*unary_fn)(const unary_context *, int64_t, char **, const int64_t *);
static const unary_fn float_unary_at[EG__CPU_LEVEL_COUNT] = {
    float_unary_baseline, float_unary_avx2, float_unary_avx512};
static const unary_fn double_unary_at[EG__CPU_LEVEL_COUNT] = {
    double_unary_baseline, double_unary_avx2, double_unary_avx512};

static void lowp_unary(const unary_context *c, int64_t n, char **p, const int64_t *s);

static void unary_inner(void *context, int64_t n, char **p, const int64_t *s) {
    const unary_context *c = context;
    eg__cpu_level level = eg__cpu_active_level();
    if (eg__is_lowp(c->dtype)) {
        lowp_unary(c, n, p, s);
        return;
    }
    if (c->dtype == EG_DTYPE_F32) {
        int fn = vecmath_of(c->op, c->fast_math);
        if (fn >= 0) {
            if (s[0] == sizeof(float) && s[1] == sizeof(float))
                eg__vecmath_f32((eg__vecmath_fn)fn, n, (float *)p[0], (const float *)p[1]);
            else
                eg__vecmath_f32_strided((eg__vecmath_fn)fn, n, p[0], s[0], p[1], s[1]);
            return;
        }
        float_unary_at[level](c, n, p, s);
    } else {
        double_unary_at[level](c, n, p, s);
    }
}

/* bf16 / f16 (lowp.h): blocks widened to f32, the f32 loop (vector math included), each result
 * rounded once. */
static void lowp_unary(const unary_context *c, int64_t n, char **p, const int64_t *s) {
    if (eg__lowp_unary_fast(c->op, c->dtype, n, p, s)) return;
    int fn = vecmath_of(c->op, false);
    if (fn >= 0 && s[0] == 2 && s[1] == 2 &&
        eg__vecmath_lowp((eg__vecmath_fn)fn, c->dtype, n, (uint16_t *)p[0], (const uint16_t *)p[1]))
        return;
    float in[EG__LOWP_BLOCK], out[EG__LOWP_BLOCK];
    unary_context f32 = *c;
    f32.dtype = EG_DTYPE_F32;
    f32.fast_math = false; /* fast math is f32's only (eagle/ops.h) */
    char *pointers[2] = {(char *)out, (char *)in};
    int64_t strides[2] = {sizeof(float), sizeof(float)};
    for (int64_t begin = 0; begin < n; begin += EG__LOWP_BLOCK) {
        int64_t count = n - begin < EG__LOWP_BLOCK ? n - begin : EG__LOWP_BLOCK;
        eg__lowp_widen(c->dtype, count, p[1] + begin * s[1], s[1], in);
        unary_inner(&f32, count, pointers, strides);
        eg__lowp_narrow(c->dtype, count, out, p[0] + begin * s[0], s[0]);
    }
}

/* The common case — every operand contiguous with the result's size, or a single element —
 * skips the general strided walk, which costs more than the work for small tensors. */
typedef struct flat_job {
    eg__nd_inner_fn inner;
    void *context;
    int n_operands;
    char *pointers[EG_ND_MAX_OPERANDS];
    int64_t strides[EG_ND_MAX_OPERANDS];
} flat_job;

static void flat_range(void *arg, int64_t begin, int64_t end) {
    const flat_job *job = arg;
    char *pointers[EG_ND_MAX_OPERANDS];
    for (int i = 0; i < job->n_operands; i++)
        pointers[i] = job->pointers[i] + begin * job->strides[i];
    job->inner(job->context, end - begin, pointers, job->strides);
}

static bool run_flat(const eg__kernel_call *call, int n_operands, eg__nd_inner_fn inner,
                     void *context) {
    const eg_tensor *out = call->output;
    flat_job job = {
        inner, context, n_operands, {eg__data(out)}, {(int64_t)eg_dtype_size(out->dtype)}};
    if (!eg__is_contiguous(out)) return false;
    for (int i = 1; i < n_operands; i++) {
        const eg_tensor *in = call->inputs[i - 1];
        if (in->n_elems == 1)
            job.strides[i] = 0;
        else if (in->n_elems == out->n_elems && eg__is_contiguous(in))
            job.strides[i] = (int64_t)eg_dtype_size(in->dtype);
        else
            return false;
        job.pointers[i] = eg__data(in);
    }
    eg__parallel_for(out->n_elems, EG_PARALLEL_GRAIN_ELEMENTWISE, flat_range, &job);
    return true;
}

static eg_status run_loop(const eg__kernel_call *call, int n_operands, eg__nd_inner_fn inner,
                          void *context) {
    if (run_flat(call, n_operands, inner, context)) return EG_OK;
    const eg_tensor *operands[EG_ND_MAX_OPERANDS] = {call->output};
    for (int i = 1; i < n_operands; i++) operands[i] = call->inputs[i - 1];
    eg__nd_loop loop;
    eg__nd_loop_init(&loop, n_operands, operands);
    eg__nd_loop_run(&loop, inner, context);
    return EG_OK;
}

eg_status eg__cpu_unary(const eg__kernel_call *call);
eg_status eg__cpu_unary(const eg__kernel_call *call) {
    unary_context c = {call->op, call->output->dtype, call->attrs->scalars[0],
                       call->attrs->scalars[1], call->attrs->fast_math};
    return run_loop(call, 2, unary_inner, &c);
}

/* ---- binary ---- */

#define BINARY_LOOP(T, EXPR)                                                                       \
    do {                                                                                           \
        const int64_t size_ = sizeof(T);                                                           \
        if (s[0] == size_ && s[1] == size_ && s[2] == size_) {                                     \
            T *restrict out_ = (T *)p[0];                                                          \
            const T *restrict a_ = (const T *)p[1], *restrict b_ = (const T *)p[2];                \
            for (int64_t i = 0; i < n; i++) {                                                      \
                T a = a_[i], b = b_[i];                                                            \
                out_[i] = (EXPR);                                                                  \
            }                                                                                      \
        } else if (s[0] == size_ && s[1] == size_ && s[2] == 0) {                                  \
            T *restrict out_ = (T *)p[0];                                                          \
            const T *restrict a_ = (const T *)p[1];                                                \
            const T b = *(const T *)p[2];                                                          \
            for (int64_t i = 0; i < n; i++) {                                                      \
                T a = a_[i];                                                                       \
                out_[i] = (EXPR);                                                                  \
            }                                                                                      \
        } else if (s[0] == size_ && s[1] == 0 && s[2] == size_) {                                  \
            T *restrict out_ = (T *)p[0];                                                          \
            const T a = *(const T *)p[1];                                                          \
            const T *restrict b_ = (const T *)p[2];                                                \
            for (int64_t i = 0; i < n; i++) {                                                      \
                T b = b_[i];                                                                       \
                out_[i] = (EXPR);                                                                  \
            }                                                                                      \
        } else {                                                                                   \
            for (int64_t i = 0; i < n; i++) {                                                      \
                T a = *(const T *)(p[1] + i * s[1]), b = *(const T *)(p[2] + i * s[2]);            \
                *(T *)(p[0] + i * s[0]) = (EXPR);                                                  \
            }                                                                                      \
        }                                                                                          \
    } while (0)

/* Signed overflow is undefined in C: integer arithmetic wraps through the unsigned type, and
 * division by zero gives 0 instead of a crash. */
#define INT_BINARY_CASES(T, U, MIN)                                                                \
    switch (c->op) {                                                                               \
    case EG__OP_ADD:                                                                               \
        BINARY_LOOP(T, (T)((U)a + (U)b));                                                          \
        break;                                                                                     \
    case EG__OP_SUB:                                                                               \
        BINARY_LOOP(T, (T)((U)a - (U)b));                                                          \
        break;                                                                                     \
    case EG__OP_MUL:                                                                               \
        BINARY_LOOP(T, (T)((U)a * (U)b));                                                          \
        break;                                                                                     \
    case EG__OP_DIV:                                                                               \
        BINARY_LOOP(T, b == 0 || (a == MIN && b == -1) ? (T)0 : (T)(a / b));                       \
        break;                                                                                     \
    case EG__OP_MAXIMUM:                                                                           \
        BINARY_LOOP(T, a >= b ? a : b);                                                            \
        break;                                                                                     \
    case EG__OP_MINIMUM:                                                                           \
        BINARY_LOOP(T, a <= b ? a : b);                                                            \
        break;                                                                                     \
    default:                                                                                       \
        break;                                                                                     \
    }

#define FLOAT_BINARY_CASES(T, POW)                                                                 \
    switch (c->op) {                                                                               \
    case EG__OP_ADD:                                                                               \
        BINARY_LOOP(T, a + b);                                                                     \
        break;                                                                                     \
    case EG__OP_SUB:                                                                               \
        BINARY_LOOP(T, a - b);                                                                     \
        break;                                                                                     \
    case EG__OP_MUL:                                                                               \
        BINARY_LOOP(T, a *b);                                                                      \
        break;                                                                                     \
    case EG__OP_DIV:                                                                               \
        BINARY_LOOP(T, a / b);                                                                     \
        break;                                                                                     \
    case EG__OP_POW:                                                                               \
        BINARY_LOOP(T, POW(a, b));                                                                 \
        break;                                                                                     \
    case EG__OP_MAXIMUM:                                                                           \
        BINARY_LOOP(T, a >= b || a != a ? a : b);                                                  \
        break;                                                                                     \
    case EG__OP_MINIMUM:                                                                           \
        BINARY_LOOP(T, a <= b || a != a ? a : b);                                                  \
        break;                                                                                     \
    default:                                                                                       \
        break;                                                                                     \
    }

typedef struct binary_context {
    eg__op op;
    eg_dtype dtype;
} binary_context;

#define BINARY_VARIANT(SUFFIX, ATTRIBUTES)                                                         \
    ATTRIBUTES static void float_binary_##SUFFIX(const binary_context *c, int64_t n, char **p,     \
                                                 const int64_t *s){FLOAT_BINARY_CASES(             \
        float, powf)} ATTRIBUTES static void double_binary_##SUFFIX(const binary_context *c,       \
                                                                    int64_t n, char **p,           \
                                                                    const int64_t *s) {            \
        FLOAT_BINARY_CASES(double, pow)                                                            \
    }
BINARY_VARIANT(baseline, )
BINARY_VARIANT(avx2, AVX2_TARGET)
BINARY_VARIANT(avx512, AVX512_TARGET)

typedef void (*binary_fn)(const binary_context *, int64_t, char **, const int64_t *);
static const binary_fn float_binary_at[EG__CPU_LEVEL_COUNT] = {
    float_binary_baseline, float_binary_avx2, float_binary_avx512};
static const binary_fn double_binary_at[EG__CPU_LEVEL_COUNT] = {
    double_binary_baseline, double_binary_avx2, double_binary_avx512};

/* bf16 / f16: both operands widened block by block (a broadcast one once), the f32 loop, each
 * result rounded once. */
static void lowp_binary(const binary_context *c, int64_t n, char **p, const int64_t *s) {
    if (eg__lowp_binary_fast(c->op, c->dtype, n, p, s)) return;
    float a[EG__LOWP_BLOCK], b[EG__LOWP_BLOCK], out[EG__LOWP_BLOCK];
    const binary_context f32 = {c->op, EG_DTYPE_F32};
    binary_fn loop = float_binary_at[eg__cpu_active_level()];
    char *pointers[3] = {(char *)out, (char *)a, (char *)b};
    int64_t strides[3] = {sizeof(float), s[1] ? (int64_t)sizeof(float) : 0,
                          s[2] ? (int64_t)sizeof(float) : 0};
    if (!s[1]) eg__lowp_widen(c->dtype, 1, p[1], 0, a);
    if (!s[2]) eg__lowp_widen(c->dtype, 1, p[2], 0, b);
    for (int64_t begin = 0; begin < n; begin += EG__LOWP_BLOCK) {
        int64_t count = n - begin < EG__LOWP_BLOCK ? n - begin : EG__LOWP_BLOCK;
        if (s[1]) eg__lowp_widen(c->dtype, count, p[1] + begin * s[1], s[1], a);
        if (s[2]) eg__lowp_widen(c->dtype, count, p[2] + begin * s[2], s[2], b);
        loop(&f32, count, pointers, strides);
        eg__lowp_narrow(c->dtype, count, out, p[0] + begin * s[0], s[0]);
    }
}

static void binary_inner(void *context, int64_t n, char **p, const int64_t *s) {
    const binary_context *c = context;
    switch (c->dtype) {
    case EG_DTYPE_F32:
        float_binary_at[eg__cpu_active_level()](c, n, p, s);
        break;
    case EG_DTYPE_F64:
        double_binary_at[eg__cpu_active_level()](c, n, p, s);
        break;
    case EG_DTYPE_BF16:
    case EG_DTYPE_F16:
        lowp_binary(c, n, p, s);
        break;
    case EG_DTYPE_I32:
        INT_BINARY_CASES(int32_t, uint32_t, INT32_MIN) break;
    case EG_DTYPE_I64:
        INT_BINARY_CASES(int64_t, uint64_t, INT64_MIN) break;
    default:
        break;
    }
}

eg_status eg__cpu_binary(const eg__kernel_call *call);
eg_status eg__cpu_binary(const eg__kernel_call *call) {
    binary_context c = {call->op, call->inputs[0]->dtype};
    return run_loop(call, 3, binary_inner, &c);
}

/* ---- comparisons ---- */

#define COMPARE_LOOP(T, EXPR)                                                                      \
    for (int64_t i = 0; i < n; i++) {                                                              \
        T a = *(const T *)(p[1] + i * s[1]), b = *(const T *)(p[2] + i * s[2]);                    \
        *(uint8_t *)(p[0] + i * s[0]) = (uint8_t)(EXPR);                                           \
    }

#define COMPARE_CASES(T)                                                                           \
    switch (c->op) {                                                                               \
    case EG__OP_EQUAL:                                                                             \
        COMPARE_LOOP(T, a == b) break;                                                             \
    case EG__OP_NOT_EQUAL:                                                                         \
        COMPARE_LOOP(T, a != b) break;                                                             \
    case EG__OP_LESS:                                                                              \
        COMPARE_LOOP(T, a < b) break;                                                              \
    case EG__OP_LESS_EQUAL:                                                                        \
        COMPARE_LOOP(T, a <= b) break;                                                             \
    case EG__OP_GREATER:                                                                           \
        COMPARE_LOOP(T, a > b) break;                                                              \
    case EG__OP_GREATER_EQUAL:                                                                     \
        COMPARE_LOOP(T, a >= b) break;                                                             \
    default:                                                                                       \
        break;                                                                                     \
    }

static void compare_inner(void *context, int64_t n, char **p, const int64_t *s);

/* bf16 / f16: compared as the f32 values they widen to (exactly their own values). */
static void lowp_compare(const binary_context *c, int64_t n, char **p, const int64_t *s) {
    float a[EG__LOWP_BLOCK], b[EG__LOWP_BLOCK];
    const binary_context f32 = {c->op, EG_DTYPE_F32};
    char *pointers[3] = {NULL, (char *)a, (char *)b};
    int64_t strides[3] = {s[0], s[1] ? (int64_t)sizeof(float) : 0,
                          s[2] ? (int64_t)sizeof(float) : 0};
    if (!s[1]) eg__lowp_widen(c->dtype, 1, p[1], 0, a);
    if (!s[2]) eg__lowp_widen(c->dtype, 1, p[2], 0, b);
    for (int64_t begin = 0; begin < n; begin += EG__LOWP_BLOCK) {
        int64_t count = n - begin < EG__LOWP_BLOCK ? n - begin : EG__LOWP_BLOCK;
        if (s[1]) eg__lowp_widen(c->dtype, count, p[1] + begin * s[1], s[1], a);
        if (s[2]) eg__lowp_widen(c->dtype, count, p[2] + begin * s[2], s[2], b);
        pointers[0] = p[0] + begin * s[0];
        compare_inner((void *)&f32, count, pointers, strides);
    }
}

static void compare_inner(void *context, int64_t n, char **p, const int64_t *s) {
    const binary_context *c = context;
    switch (c->dtype) {
    case EG_DTYPE_F32:
        COMPARE_CASES(float) break;
    case EG_DTYPE_F64:
        COMPARE_CASES(double) break;
    case EG_DTYPE_I32:
        COMPARE_CASES(int32_t) break;
    case EG_DTYPE_I64:
        COMPARE_CASES(int64_t) break;
    case EG_DTYPE_U8:
    case EG_DTYPE_BOOL:
        COMPARE_CASES(uint8_t) break;
    case EG_DTYPE_BF16:
    case EG_DTYPE_F16:
        lowp_compare(c, n, p, s);
        break;
    default:
        break;
    }
}

eg_status eg__cpu_compare(const eg__kernel_call *call);
eg_status eg__cpu_compare(const eg__kernel_call *call) {
    binary_context c = {call->op, call->inputs[0]->dtype};
    return run_loop(call, 3, compare_inner, &c);
}

/* ---- where: a pure selection, so it only needs the element size ---- */

/* Typed copies for 4- and 8-byte elements: a memcpy call per element costs several times the
 * selection itself (relu's gradient is a where). */
#define WHERE_TYPED(T)                                                                             \
    do {                                                                                           \
        for (int64_t i = 0; i < n; i++) { /* both loaded: a select, not a branch */                \
            T a = *(const T *)(p[2] + i * s[2]), b = *(const T *)(p[3] + i * s[3]);                \
            *(T *)(p[0] + i * s[0]) = *(const uint8_t *)(p[1] + i * s[1]) ? a : b;                 \
        }                                                                                          \
    } while (0)

static void where_inner(void *context, int64_t n, char **p, const int64_t *s) {
    size_t size = *(const size_t *)context;
    if (size == 2) { /* bf16, f16: their bits, like every other dtype's */
        WHERE_TYPED(uint16_t);
        return;
    }
    if (size == 4) {
        WHERE_TYPED(uint32_t);
        return;
    }
    if (size == 8) {
        WHERE_TYPED(uint64_t);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        const char *src = *(const uint8_t *)(p[1] + i * s[1]) ? p[2] + i * s[2] : p[3] + i * s[3];
        memcpy(p[0] + i * s[0], src, size);
    }
}

eg_status eg__cpu_where(const eg__kernel_call *call);
eg_status eg__cpu_where(const eg__kernel_call *call) {
    size_t size = eg_dtype_size(call->output->dtype);
    return run_loop(call, 4, where_inner, &size);
}

/* ---- cast ---- */

typedef struct cast_context {
    eg_dtype from, to;
} cast_context;

static void cast_inner(void *context, int64_t n, char **p, const int64_t *s);

/* Casts from or to bf16 / f16 that are not a contiguous f32 <-> bf16 / f16 conversion: from one,
 * through its exact f32 value (so bf16 -> f16 rounds once, and bf16 -> i32 is f32 -> i32); to
 * one from f32 by one rounding, from f64 and the integers through the double value, rounded
 * once (i64 beyond 2^53 is rounded to double first). */
static void lowp_cast(const cast_context *c, int64_t n, char **p, const int64_t *s) {
    float block[EG__LOWP_BLOCK];
    double wide[EG__LOWP_BLOCK];
    const cast_context from_f32 = {EG_DTYPE_F32, c->to};
    for (int64_t begin = 0; begin < n; begin += EG__LOWP_BLOCK) {
        int64_t count = n - begin < EG__LOWP_BLOCK ? n - begin : EG__LOWP_BLOCK;
        const char *in = p[1] + begin * s[1];
        char *out = p[0] + begin * s[0];
        if (eg__is_lowp(c->from)) {
            eg__lowp_widen(c->from, count, in, s[1], block);
            if (eg__is_lowp(c->to)) {
                eg__lowp_narrow(c->to, count, block, out, s[0]);
            } else if (c->to == EG_DTYPE_F32) {
                for (int64_t i = 0; i < count; i++) memcpy(out + i * s[0], &block[i], 4);
            } else if (c->to == EG_DTYPE_F64) {
                for (int64_t i = 0; i < count; i++) {
                    double v = block[i];
                    memcpy(out + i * s[0], &v, 8);
                }
            } else {
                char *pointers[2] = {out, (char *)block};
                int64_t strides[2] = {s[0], sizeof(float)};
                cast_inner((void *)&from_f32, count, pointers, strides);
            }
        } else if (c->from == EG_DTYPE_F32) {
            eg__gather_f32(count, in, s[1], block);
            eg__lowp_narrow(c->to, count, block, out, s[0]);
        } else {
            for (int64_t i = 0; i < count; i++)
                wide[i] = eg__load_as_double(in + i * s[1], c->from, 0);
            eg__lowp_narrow_doubles(c->to, count, wide, out, s[0]);
        }
    }
}

static void cast_inner(void *context, int64_t n, char **p, const int64_t *s) {
    const cast_context *c = context;
    if (c->from == EG_DTYPE_U8 && c->to == EG_DTYPE_F32) {
        if (s[0] == 4 && s[1] == 1) { /* images: a contiguous loop the compiler vectorizes */
            float *out = (float *)p[0];
            const uint8_t *in = (const uint8_t *)p[1];
            for (int64_t i = 0; i < n; i++) out[i] = (float)in[i];
            return;
        }
        for (int64_t i = 0; i < n; i++)
            *(float *)(p[0] + i * s[0]) = (float)*(const uint8_t *)(p[1] + i * s[1]);
        return;
    }
    /* contiguous f32 <-> bf16 / f16: the vectorized conversions (lowp.c) */
    if (c->from == EG_DTYPE_F32 && eg__is_lowp(c->to) && s[0] == 2 && s[1] == 4) {
        eg__lowp_narrow(c->to, n, (const float *)p[1], p[0], 2);
        return;
    }
    if (eg__is_lowp(c->from) && c->to == EG_DTYPE_F32 && s[0] == 4 && s[1] == 2) {
        eg__lowp_widen(c->from, n, p[1], 2, (float *)p[0]);
        return;
    }
    if (eg__is_lowp(c->from) || eg__is_lowp(c->to)) {
        lowp_cast(c, n, p, s);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        eg__store_from_double(p[0] + i * s[0], c->to, 0,
                              eg__load_as_double(p[1] + i * s[1], c->from, 0));
}

eg_status eg__cpu_cast(const eg__kernel_call *call);
eg_status eg__cpu_cast(const eg__kernel_call *call) {
    cast_context c = {call->inputs[0]->dtype, call->output->dtype};
    return run_loop(call, 2, cast_inner, &c);
}

/* ---- relu_backward and mul_add: f32 and f64 in norm.c, bf16 and f16 here ---- */

eg_status eg__cpu_relu_backward(const eg__kernel_call *call);
eg_status eg__cpu_mul_add(const eg__kernel_call *call);

/* x, g (broadcast together) -> g where x > 0, else 0 */
eg_status eg__cpu_relu_backward_any(const eg__kernel_call *call);
eg_status eg__cpu_relu_backward_any(const eg__kernel_call *call) {
    eg_dtype dtype = call->output->dtype;
    if (!eg__is_lowp(dtype)) return eg__cpu_relu_backward(call);
    const eg_tensor *operands[3] = {call->output, call->inputs[0], call->inputs[1]};
    eg__nd_loop loop;
    eg__nd_loop_init(&loop, 3, operands);
    eg__nd_loop_run(&loop, eg__lowp_relu_backward_inner, &dtype);
    return EG_OK;
}

/* x, scale, shift (broadcast together) -> x * scale + shift */
eg_status eg__cpu_mul_add_any(const eg__kernel_call *call);
eg_status eg__cpu_mul_add_any(const eg__kernel_call *call) {
    eg_dtype dtype = call->output->dtype;
    if (!eg__is_lowp(dtype)) return eg__cpu_mul_add(call);
    const eg_tensor *operands[4] = {call->output, call->inputs[0], call->inputs[1],
                                    call->inputs[2]};
    eg__nd_loop loop;
    eg__nd_loop_init(&loop, 4, operands);
    eg__nd_loop_run(&loop, eg__lowp_mul_add_inner, &dtype);
    return EG_OK;
}

/* ---- copies ---- */

eg_status eg__cpu_copy(const eg__kernel_call *call);
eg_status eg__cpu_copy(const eg__kernel_call *call) {
    return eg__copy_into(call->output, call->inputs[0]);
}

/* ---- one elementwise op over flat buffers: the building block of fused loops ---- */

bool eg__cpu_fusable(eg__op op) {
    eg__kernel_fn kernel = eg__cpu_kernels[op];
    return kernel == eg__cpu_unary || kernel == eg__cpu_binary || kernel == eg__cpu_compare ||
           kernel == eg__cpu_where || kernel == eg__cpu_cast;
}

void eg__cpu_elementwise_flat(eg__op op, const eg__attrs *attrs, eg_dtype out_dtype,
                              eg_dtype in_dtype, int n_inputs, int64_t n, char *out,
                              char *const *inputs, const int64_t *input_strides) {
    char *pointers[EG_ND_MAX_OPERANDS] = {out};
    int64_t strides[EG_ND_MAX_OPERANDS] = {(int64_t)eg_dtype_size(out_dtype)};
    for (int i = 0; i < n_inputs; i++) {
        pointers[i + 1] = inputs[i];
        strides[i + 1] = input_strides[i];
    }
    eg__kernel_fn kernel = eg__cpu_kernels[op];
    if (kernel == eg__cpu_unary) {
        unary_context c = {op, out_dtype, attrs->scalars[0], attrs->scalars[1], attrs->fast_math};
        unary_inner(&c, n, pointers, strides);
    } else if (kernel == eg__cpu_binary) {
        binary_context c = {op, in_dtype};
        binary_inner(&c, n, pointers, strides);
    } else if (kernel == eg__cpu_compare) {
        binary_context c = {op, in_dtype};
        compare_inner(&c, n, pointers, strides);
    } else if (kernel == eg__cpu_where) {
        size_t size = eg_dtype_size(out_dtype);
        where_inner(&size, n, pointers, strides);
    } else if (kernel == eg__cpu_cast) {
        cast_context c = {in_dtype, out_dtype};
        cast_inner(&c, n, pointers, strides);
    }
}
