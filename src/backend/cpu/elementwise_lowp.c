/* bf16 and f16 elementwise loops that widen and round in registers (lowp.h): the contiguous
 * cases of the cheap ops, where a pass through f32 blocks would cost more than the op.
 *
 * Each gives exactly the bits of the block path (elementwise.c: widen, the f32 loop, round):
 *   - selections (neg, abs, relu, relu_backward) act on the bits, and a NaN gets its quiet bit
 *     set, as rounding it from f32 does;
 *   - arithmetic (add, sub, mul, div, maximum, minimum, mul_add) performs the f32 loop's IEEE
 *     operations (no contraction: mul_add is a product rounded, then a sum rounded) on the
 *     widened values and rounds as core/dtype.c does: bf16 with the same integer steps, f16 with
 *     the same F16C instruction (vcvtps2ph, nearest even).
 * Chosen at the dispatch level: AVX2 (8 lanes) and AVX-512 (16 lanes) have these; the baseline
 * keeps the block path, as does f16 on a CPU without F16C. */
#include <string.h>

#include "backend/cpu/kernels.h"
#include "backend/cpu/lowp.h"
#include "backend/cpu/lowp_simd.h"
#include "base/cpu_features.h"

#ifdef EG__LOWP_X86
#define LOWP_X86 1
#endif

/* ---- selections on the bits: plain loops the compiler vectorizes at each level ---- */

/* The format's +infinity and quiet bit: a magnitude above inf is a NaN. */
typedef struct format16 {
    uint16_t inf, quiet;
} format16;

static format16 format_of(eg_dtype dtype) {
    return dtype == EG_DTYPE_BF16 ? (format16){0x7f80u, 0x0040u} : (format16){0x7c00u, 0x0200u};
}

/* NaN's quiet bit where v is a NaN, else 0. The selections below are written with masks (all ones
 * or zero, from comparisons), so that they compile to vector compares, not branches. */
#define QUIET_IF_NAN(v, f) ((uint16_t)(MASK16(((v)&0x7fffu) > (f).inf) & (f).quiet))
#define MASK16(condition)  ((uint16_t) - (uint16_t)(condition))

#define SELECT_LOOPS(SUFFIX, ATTRIBUTES)                                                           \
    ATTRIBUTES static void neg16_##SUFFIX(int64_t n, uint16_t *restrict out,                       \
                                          const uint16_t *restrict x, format16 f) {                \
        for (int64_t i = 0; i < n; i++) {                                                          \
            uint16_t v = x[i];                                                                     \
            out[i] = (uint16_t)((v ^ 0x8000u) | QUIET_IF_NAN(v, f));                               \
        }                                                                                          \
    }                                                                                              \
    ATTRIBUTES static void abs16_##SUFFIX(int64_t n, uint16_t *restrict out,                       \
                                          const uint16_t *restrict x, format16 f) {                \
        for (int64_t i = 0; i < n; i++) {                                                          \
            uint16_t v = x[i];                                                                     \
            out[i] = (uint16_t)((v & 0x7fffu) | QUIET_IF_NAN(v, f));                               \
        }                                                                                          \
    }                                                                                              \
    /* EG__RELU: x where x > 0 or x is NaN, else +0 */                                             \
    ATTRIBUTES static void relu16_##SUFFIX(int64_t n, uint16_t *restrict out,                      \
                                           const uint16_t *restrict x, format16 f) {               \
        for (int64_t i = 0; i < n; i++) {                                                          \
            uint16_t v = x[i];                                                                     \
            uint16_t nan = MASK16((v & 0x7fffu) > f.inf);                                          \
            uint16_t positive = MASK16((uint16_t)(v - 1u) < 0x7fffu); /* 0 < v <= 0x7fff */        \
            out[i] = (uint16_t)((v & (positive | nan)) | (nan & f.quiet));                         \
        }                                                                                          \
    }                                                                                              \
    /* relu's gradient: g where x > 0 (NaN is not), else +0 */                                     \
    ATTRIBUTES static void relu_backward16_##SUFFIX(int64_t n, uint16_t *restrict out,             \
                                                    const uint16_t *restrict x,                    \
                                                    const uint16_t *restrict g, format16 f) {      \
        for (int64_t i = 0; i < n; i++) {                                                          \
            uint16_t v = x[i], w = g[i];                                                           \
            uint16_t positive = MASK16((uint16_t)(v - 1u) < f.inf); /* 0 < v <= +inf */            \
            out[i] = (uint16_t)((w | QUIET_IF_NAN(w, f)) & positive);                              \
        }                                                                                          \
    }

#define LOWP_AVX2_TARGET        __attribute__((target("avx2,fma,f16c")))
#define LOWP_AVX512_TARGET      EG__LOWP_AVX512_TARGET
#define LOWP_AVX512_BF16_TARGET EG__LOWP_AVX512_BF16_TARGET

SELECT_LOOPS(baseline, )
#ifdef LOWP_X86
SELECT_LOOPS(avx2, LOWP_AVX2_TARGET)
SELECT_LOOPS(avx512, LOWP_AVX512_TARGET)
#endif

typedef void (*unary16_fn)(int64_t, uint16_t *restrict, const uint16_t *restrict, format16);
typedef void (*relu_backward16_fn)(int64_t, uint16_t *restrict, const uint16_t *restrict,
                                   const uint16_t *restrict, format16);

static unary16_fn unary16_at(eg__op op, eg__cpu_level level) {
#ifdef LOWP_X86
    if (level >= EG__CPU_AVX512)
        return op == EG__OP_NEG ? neg16_avx512 : op == EG__OP_ABS ? abs16_avx512 : relu16_avx512;
    if (level >= EG__CPU_AVX2)
        return op == EG__OP_NEG ? neg16_avx2 : op == EG__OP_ABS ? abs16_avx2 : relu16_avx2;
#else
    (void)level;
#endif
    return op == EG__OP_NEG ? neg16_baseline : op == EG__OP_ABS ? abs16_baseline : relu16_baseline;
}

bool eg__lowp_unary_fast(eg__op op, eg_dtype dtype, int64_t n, char **p, const int64_t *s) {
    if ((op != EG__OP_NEG && op != EG__OP_ABS && op != EG__OP_RELU) || s[0] != 2 || s[1] != 2)
        return false;
    unary16_at(op, eg__cpu_active_level())(n, (uint16_t *)(void *)p[0],
                                           (const uint16_t *)(const void *)p[1], format_of(dtype));
    return true;
}

/* ---- arithmetic in registers ---- */

#ifdef LOWP_X86
enum { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_MAXIMUM, OP_MINIMUM, OP_MUL_ADD, N_OPS };

static int fast_op(eg__op op) {
    switch (op) {
    case EG__OP_ADD:
        return OP_ADD;
    case EG__OP_SUB:
        return OP_SUB;
    case EG__OP_MUL:
        return OP_MUL;
    case EG__OP_DIV:
        return OP_DIV;
    case EG__OP_MAXIMUM:
        return OP_MAXIMUM;
    case EG__OP_MINIMUM:
        return OP_MINIMUM;
    default:
        return -1;
    }
}

#define INLINE static inline __attribute__((always_inline))

#define load16         eg__lowp_load16
#define store16        eg__lowp_store16
#define store16_native eg__lowp_store16_native

LOWP_AVX512_TARGET INLINE __m512 apply16(int op, __m512 a, __m512 b, __m512 c) {
    switch (op) {
    case OP_ADD:
        return _mm512_add_ps(a, b);
    case OP_SUB:
        return _mm512_sub_ps(a, b);
    case OP_MUL:
        return _mm512_mul_ps(a, b);
    case OP_DIV:
        return _mm512_div_ps(a, b);
    case OP_MAXIMUM: /* a >= b || a != a ? a : b */
        return _mm512_mask_blend_ps(
            _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ) | _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), b, a);
    case OP_MINIMUM:
        return _mm512_mask_blend_ps(
            _mm512_cmp_ps_mask(a, b, _CMP_LE_OQ) | _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), b, a);
    default: /* OP_MUL_ADD: a * b rounded, + c rounded */
        return _mm512_add_ps(_mm512_mul_ps(a, b), c);
    }
}

/* out = op(a, b[, c]) for n elements; an operand with stride 0 is one element broadcast.
 * The strides are constants after inlining (the callers below pass literals). */
#define LOOP16(NAME, TARGET, STORE)                                                                \
    TARGET INLINE void NAME(int op, bool bf16, int64_t n, uint16_t *out, const uint16_t *a,        \
                            bool a_full, const uint16_t *b, bool b_full, const uint16_t *c,        \
                            bool c_full) {                                                         \
        const __mmask16 all = 0xffff;                                                              \
        __m512 a1 = a_full ? _mm512_setzero_ps() : load16(bf16, a, 1);                             \
        __m512 b1 = b_full ? _mm512_setzero_ps() : load16(bf16, b, 1);                             \
        __m512 c1 = c && !c_full ? load16(bf16, c, 1) : _mm512_setzero_ps();                       \
        a1 = _mm512_permutexvar_ps(_mm512_setzero_si512(), a1);                                    \
        b1 = _mm512_permutexvar_ps(_mm512_setzero_si512(), b1);                                    \
        c1 = _mm512_permutexvar_ps(_mm512_setzero_si512(), c1);                                    \
        int64_t i = 0;                                                                             \
        for (; i + 16 <= n; i += 16) {                                                             \
            __m512 va = a_full ? load16(bf16, a + i, all) : a1;                                    \
            __m512 vb = b_full ? load16(bf16, b + i, all) : b1;                                    \
            __m512 vc = c && c_full ? load16(bf16, c + i, all) : c1;                               \
            STORE(bf16, out + i, all, apply16(op, va, vb, vc));                                    \
        }                                                                                          \
        if (i < n) {                                                                               \
            __mmask16 m = (__mmask16)((1u << (n - i)) - 1);                                        \
            __m512 va = a_full ? load16(bf16, a + i, m) : a1;                                      \
            __m512 vb = b_full ? load16(bf16, b + i, m) : b1;                                      \
            __m512 vc = c && c_full ? load16(bf16, c + i, m) : c1;                                 \
            STORE(bf16, out + i, m, apply16(op, va, vb, vc));                                      \
        }                                                                                          \
    }
LOOP16(loop16, LOWP_AVX512_TARGET, store16)
LOOP16(loop16_native, LOWP_AVX512_BF16_TARGET, store16_native)

/* Contiguous f32 -> bf16 / f16 and back, 16 lanes at a time (masked tail). */
#define CONVERT16(SUFFIX, TARGET, STORE)                                                           \
    TARGET static void narrow16_##SUFFIX(bool bf16, int64_t n, const float *in, uint16_t *out) {   \
        int64_t i = 0;                                                                             \
        for (; i + 16 <= n; i += 16) STORE(bf16, out + i, 0xffff, _mm512_loadu_ps(in + i));        \
        if (i < n) {                                                                               \
            __mmask16 m = (__mmask16)((1u << (n - i)) - 1);                                        \
            STORE(bf16, out + i, m, _mm512_maskz_loadu_ps(m, in + i));                             \
        }                                                                                          \
    }
CONVERT16(avx512, LOWP_AVX512_TARGET, store16)
CONVERT16(native, LOWP_AVX512_BF16_TARGET, store16_native)

LOWP_AVX512_TARGET static void widen16_avx512(bool bf16, int64_t n, const uint16_t *in,
                                              float *out) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, load16(bf16, in + i, 0xffff));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(out + i, m, load16(bf16, in + i, m));
    }
}

/* 8 lanes: the same steps on ymm registers; the tail through a zero-padded copy. */
LOWP_AVX2_TARGET INLINE __m256 load8(bool bf16, const uint16_t *p) {
    __m128i h = _mm_loadu_si128((const __m128i *)(const void *)p);
    if (bf16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    return _mm256_cvtph_ps(h);
}
LOWP_AVX2_TARGET INLINE void store8(bool bf16, uint16_t *p, __m256 v) {
    __m128i h;
    if (bf16) {
        __m256i x = _mm256_castps_si256(v);
        __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
        __m256i rounded = _mm256_srli_epi32(
            _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), lsb), 16);
        __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
        __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
        __m256i r = _mm256_castps_si256(
            _mm256_blendv_ps(_mm256_castsi256_ps(rounded), _mm256_castsi256_ps(quiet), nan));
        h = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    } else {
        h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
    }
    _mm_storeu_si128((__m128i *)(void *)p, h);
}
LOWP_AVX2_TARGET INLINE __m256 apply8(int op, __m256 a, __m256 b, __m256 c) {
    switch (op) {
    case OP_ADD:
        return _mm256_add_ps(a, b);
    case OP_SUB:
        return _mm256_sub_ps(a, b);
    case OP_MUL:
        return _mm256_mul_ps(a, b);
    case OP_DIV:
        return _mm256_div_ps(a, b);
    case OP_MAXIMUM:
        return _mm256_blendv_ps(
            b, a, _mm256_or_ps(_mm256_cmp_ps(a, b, _CMP_GE_OQ), _mm256_cmp_ps(a, a, _CMP_UNORD_Q)));
    case OP_MINIMUM:
        return _mm256_blendv_ps(
            b, a, _mm256_or_ps(_mm256_cmp_ps(a, b, _CMP_LE_OQ), _mm256_cmp_ps(a, a, _CMP_UNORD_Q)));
    default:
        return _mm256_add_ps(_mm256_mul_ps(a, b), c);
    }
}
LOWP_AVX2_TARGET INLINE void loop8(int op, bool bf16, int64_t n, uint16_t *out, const uint16_t *a,
                                   bool a_full, const uint16_t *b, bool b_full, const uint16_t *c,
                                   bool c_full) {
    uint16_t pad[3][8] = {{0}}, result[8];
    if (!a_full) pad[0][0] = a[0];
    if (!b_full) pad[1][0] = b[0];
    if (c && !c_full) pad[2][0] = c[0];
    __m256 a1 = _mm256_permutevar8x32_ps(load8(bf16, pad[0]), _mm256_setzero_si256());
    __m256 b1 = _mm256_permutevar8x32_ps(load8(bf16, pad[1]), _mm256_setzero_si256());
    __m256 c1 = _mm256_permutevar8x32_ps(load8(bf16, pad[2]), _mm256_setzero_si256());
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 va = a_full ? load8(bf16, a + i) : a1;
        __m256 vb = b_full ? load8(bf16, b + i) : b1;
        __m256 vc = c && c_full ? load8(bf16, c + i) : c1;
        store8(bf16, out + i, apply8(op, va, vb, vc));
    }
    if (i < n) {
        size_t bytes = (size_t)(n - i) * 2;
        if (a_full) memcpy(pad[0], a + i, bytes);
        if (b_full) memcpy(pad[1], b + i, bytes);
        if (c && c_full) memcpy(pad[2], c + i, bytes);
        __m256 va = a_full ? load8(bf16, pad[0]) : a1;
        __m256 vb = b_full ? load8(bf16, pad[1]) : b1;
        __m256 vc = c && c_full ? load8(bf16, pad[2]) : c1;
        store8(bf16, result, apply8(op, va, vb, vc));
        memcpy(out + i, result, bytes);
    }
}

/* One function per (level, op, format), each with its stride patterns unrolled: operands
 * contiguous, or one of them (two for mul_add) a broadcast element. pattern: bit k set when
 * operand k is contiguous. */
typedef void (*fast_fn)(int pattern, int64_t n, uint16_t *out, const uint16_t *a, const uint16_t *b,
                        const uint16_t *c);

#define PATTERNS(LOOP, OP, BF16)                                                                   \
    switch (pattern) {                                                                             \
    case 7:                                                                                        \
        LOOP(OP, BF16, n, out, a, true, b, true, c, true);                                         \
        break;                                                                                     \
    case 3:                                                                                        \
        LOOP(OP, BF16, n, out, a, true, b, true, c, false);                                        \
        break;                                                                                     \
    case 1:                                                                                        \
        LOOP(OP, BF16, n, out, a, true, b, false, c, false);                                       \
        break;                                                                                     \
    case 5:                                                                                        \
        LOOP(OP, BF16, n, out, a, true, b, false, c, true);                                        \
        break;                                                                                     \
    default: /* 2 or 6 (a broadcast, b contiguous) */                                              \
        LOOP(OP, BF16, n, out, a, false, b, true, c, (pattern & 4) != 0);                          \
        break;                                                                                     \
    }

#define FAST_FN(LEVEL, TARGET, LOOP, OP, FMT, BF16)                                                \
    TARGET static void fast_##LEVEL##_##OP##_##FMT(int pattern, int64_t n, uint16_t *out,          \
                                                   const uint16_t *a, const uint16_t *b,           \
                                                   const uint16_t *c) {                            \
        PATTERNS(LOOP, OP, BF16)                                                                   \
    }
#define FAST_FNS(LEVEL, TARGET, LOOP, FMT, BF16)                                                   \
    FAST_FN(LEVEL, TARGET, LOOP, OP_ADD, FMT, BF16)                                                \
    FAST_FN(LEVEL, TARGET, LOOP, OP_SUB, FMT, BF16)                                                \
    FAST_FN(LEVEL, TARGET, LOOP, OP_MUL, FMT, BF16)                                                \
    FAST_FN(LEVEL, TARGET, LOOP, OP_DIV, FMT, BF16)                                                \
    FAST_FN(LEVEL, TARGET, LOOP, OP_MAXIMUM, FMT, BF16)                                            \
    FAST_FN(LEVEL, TARGET, LOOP, OP_MINIMUM, FMT, BF16)                                            \
    FAST_FN(LEVEL, TARGET, LOOP, OP_MUL_ADD, FMT, BF16)
FAST_FNS(avx2, LOWP_AVX2_TARGET, loop8, bf16, true)
FAST_FNS(avx2, LOWP_AVX2_TARGET, loop8, f16, false)
FAST_FNS(avx512, LOWP_AVX512_TARGET, loop16, bf16, true)
FAST_FNS(avx512, LOWP_AVX512_TARGET, loop16, f16, false)
FAST_FNS(avx512_native, LOWP_AVX512_BF16_TARGET, loop16_native, bf16, true)

#define FAST_ROW(LEVEL, FMT)                                                                       \
    {                                                                                              \
        fast_##LEVEL##_OP_ADD_##FMT, fast_##LEVEL##_OP_SUB_##FMT, fast_##LEVEL##_OP_MUL_##FMT,     \
            fast_##LEVEL##_OP_DIV_##FMT, fast_##LEVEL##_OP_MAXIMUM_##FMT,                          \
            fast_##LEVEL##_OP_MINIMUM_##FMT, fast_##LEVEL##_OP_MUL_ADD_##FMT                       \
    }
/* [level - EG__CPU_AVX2][bf16 ? 0 : 1][op] */
static const fast_fn fast_fns[2][2][N_OPS] = {{FAST_ROW(avx2, bf16), FAST_ROW(avx2, f16)},
                                              {FAST_ROW(avx512, bf16), FAST_ROW(avx512, f16)}};
static const fast_fn fast_fns_native[N_OPS] = FAST_ROW(avx512_native, bf16);

/* The function for op at the active level, or NULL where the block path runs instead. */
static fast_fn fast_for(int op, eg_dtype dtype) {
    eg__cpu_level level = eg__cpu_active_level();
    if (op < 0 || level < EG__CPU_AVX2) return NULL;
    if (dtype == EG_DTYPE_F16 && !eg__cpu_has_f16c()) return NULL;
    bool bf16 = dtype == EG_DTYPE_BF16;
    if (bf16 && level >= EG__CPU_AVX512 && eg__cpu_has_avx512_bf16()) return fast_fns_native[op];
    return fast_fns[level >= EG__CPU_AVX512 ? 1 : 0][bf16 ? 0 : 1][op];
}
#endif

bool eg__lowp_binary_fast(eg__op op, eg_dtype dtype, int64_t n, char **p, const int64_t *s) {
#ifdef LOWP_X86
    fast_fn fn = fast_for(fast_op(op), dtype);
    if (!fn || s[0] != 2 || (s[1] != 2 && s[1] != 0) || (s[2] != 2 && s[2] != 0) ||
        (s[1] == 0 && s[2] == 0))
        return false;
    int pattern = (s[1] == 2 ? 1 : 0) | (s[2] == 2 ? 2 : 0);
    fn(pattern, n, (uint16_t *)(void *)p[0], (const uint16_t *)(const void *)p[1],
       (const uint16_t *)(const void *)p[2], NULL);
    return true;
#else
    (void)op, (void)dtype, (void)n, (void)p, (void)s;
    return false;
#endif
}

bool eg__lowp_narrow_fast(eg_dtype dtype, int64_t n, const float *src, uint16_t *dst) {
#ifdef LOWP_X86
    bool bf16 = dtype == EG_DTYPE_BF16;
    if (eg__cpu_active_level() < EG__CPU_AVX512 || (!bf16 && !eg__cpu_has_f16c())) return false;
    if (bf16 && eg__cpu_has_avx512_bf16())
        narrow16_native(bf16, n, src, dst);
    else
        narrow16_avx512(bf16, n, src, dst);
    return true;
#else
    (void)dtype, (void)n, (void)src, (void)dst;
    return false;
#endif
}

bool eg__lowp_widen_fast(eg_dtype dtype, int64_t n, const uint16_t *src, float *dst) {
#ifdef LOWP_X86
    bool bf16 = dtype == EG_DTYPE_BF16;
    if (eg__cpu_active_level() < EG__CPU_AVX512 || (!bf16 && !eg__cpu_has_f16c())) return false;
    widen16_avx512(bf16, n, src, dst);
    return true;
#else
    (void)dtype, (void)n, (void)src, (void)dst;
    return false;
#endif
}

/* ---- relu_backward and mul_add: the nd-loop's inner functions for bf16 / f16 ---- */

void eg__lowp_relu_backward_inner(void *context, int64_t n, char **p, const int64_t *s) {
    eg_dtype dtype = *(const eg_dtype *)context;
    format16 f = format_of(dtype);
    if (s[0] == 2 && s[1] == 2 && s[2] == 2) {
        relu_backward16_fn fn = relu_backward16_baseline;
#ifdef LOWP_X86
        eg__cpu_level level = eg__cpu_active_level();
        fn = level >= EG__CPU_AVX512 ? relu_backward16_avx512
             : level >= EG__CPU_AVX2 ? relu_backward16_avx2
                                     : fn;
#endif
        fn(n, (uint16_t *)(void *)p[0], (const uint16_t *)(const void *)p[1],
           (const uint16_t *)(const void *)p[2], f);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        uint16_t v, w, result = 0;
        memcpy(&v, p[1] + i * s[1], 2);
        memcpy(&w, p[2] + i * s[2], 2);
        if ((uint16_t)(v - 1u) < f.inf) result = (uint16_t)(w | QUIET_IF_NAN(w, f));
        memcpy(p[0] + i * s[0], &result, 2);
    }
}

/* x * a + b as the f32 kernel (backend/cpu/norm.c) computes it: the product rounded to f32, then
 * the sum; then rounded once more to the format. */
void eg__lowp_mul_add_inner(void *context, int64_t n, char **p, const int64_t *s) {
    eg_dtype dtype = *(const eg_dtype *)context;
#ifdef LOWP_X86
    fast_fn fn = fast_for(OP_MUL_ADD, dtype);
    if (fn && s[0] == 2 && s[1] == 2 && (s[2] == 2 || s[2] == 0) && (s[3] == 2 || s[3] == 0)) {
        fn(1 | (s[2] ? 2 : 0) | (s[3] ? 4 : 0), n, (uint16_t *)(void *)p[0],
           (const uint16_t *)(const void *)p[1], (const uint16_t *)(const void *)p[2],
           (const uint16_t *)(const void *)p[3]);
        return;
    }
#endif
    float x[EG__LOWP_BLOCK], a[EG__LOWP_BLOCK], b[EG__LOWP_BLOCK];
    int64_t sa = s[2] ? 1 : 0, sb = s[3] ? 1 : 0;
    if (!sa) eg__lowp_widen(dtype, 1, p[2], 0, a);
    if (!sb) eg__lowp_widen(dtype, 1, p[3], 0, b);
    for (int64_t begin = 0; begin < n; begin += EG__LOWP_BLOCK) {
        int64_t count = n - begin < EG__LOWP_BLOCK ? n - begin : EG__LOWP_BLOCK;
        eg__lowp_widen(dtype, count, p[1] + begin * s[1], s[1], x);
        if (sa) eg__lowp_widen(dtype, count, p[2] + begin * s[2], s[2], a);
        if (sb) eg__lowp_widen(dtype, count, p[3] + begin * s[3], s[3], b);
        for (int64_t i = 0; i < count; i++) {
            float product = x[i] * a[i * sa];
            x[i] = product + b[i * sb];
        }
        eg__lowp_narrow(dtype, count, x, p[0] + begin * s[0], s[0]);
    }
}
