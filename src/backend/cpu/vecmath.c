/* f32 vector math (see vecmath.h). Coefficients come from bench/elementwise/fit_vecmath.py
 * (near-minimax relative error, fitted against mpmath). */
#include "backend/cpu/vecmath.h"

#include <stdbool.h>
#include <string.h>

/* GCC contracts nothing in ISO C mode (-std=c11 implies -ffp-contract=off); clang contracts
 * within an expression unless told not to. An FMA would make the AVX2 bits differ. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif
/* The vector helpers below are always inlined: no vector ever crosses a call boundary. */
#pragma GCC diagnostic ignored "-Wpsabi"

enum { LANES = 8 };
typedef float vf __attribute__((vector_size(32)));
typedef int32_t vi __attribute__((vector_size(32)));
typedef uint32_t vu __attribute__((vector_size(32)));

#define INLINE static inline __attribute__((always_inline))

INLINE vf splat(float v) {
    return (vf){v, v, v, v, v, v, v, v};
}
/* m ? a : b, lane by lane (m is all ones or all zeros per lane) */
INLINE vf select(vi m, vf a, vf b) {
    return (vf)((m & (vi)a) | (~m & (vi)b));
}
INLINE vf abs_of(vf x) {
    return (vf)((vu)x & 0x7fffffffu);
}
INLINE vu sign_of(vf x) {
    return (vu)x & 0x80000000u;
}

/* exp(hi + lo) for hi + lo in about [-252, 89], with lo small against hi: the argument's low part
 * enters only the reduced argument, so a product like -x^2/2 keeps its precision. Without lo
 * (has_lo false, a constant after inlining) the two additions of lo are left out. NaN lanes
 * give garbage (integer arithmetic is unsigned: no undefined behaviour); callers select. */
INLINE vf exp_hilo(vf hi, vf lo, bool has_lo) {
    const float shift = 0x1.8p23f; /* adding it rounds to an integer held in the low bits */
    vf t = (has_lo ? hi + lo : hi) * 0x1.715476p+0f + shift;
    vf n = t - shift;
    vu k = (vu)t - (vu)splat(shift);
    /* ln 2 = LN2_HI + LN2_LO, LN2_HI with 9 significant bits so n * LN2_HI is exact */
    vf r = hi - n * 0x1.63p-1f;
    if (has_lo) r = r + lo;
    r = r - n * -0x1.bd0106p-13f;
    vf p = splat(0x1.6a2282p-10f);
    p = p * r + 0x1.123ae6p-7f;
    p = p * r + 0x1.5558f8p-5f;
    p = p * r + 0x1.55549p-3f;
    p = p * r + 0x1.fffffcp-2f;
    p = (p * r) * r + r + 1.0f;
    /* 2^n in two factors, each a normal float, so results below 2^-126 round once */
    vu k1 = (vu)((vi)k >> 1), k2 = k - k1;
    vf s1 = (vf)((k1 + 127u) << 23), s2 = (vf)((k2 + 127u) << 23);
    return (p * s1) * s2;
}

INLINE vf is_nan_select(vf x, vf result) {
    return select(x != x, x, result);
}

INLINE vf exp_v(vf x) {
    vf c = select(x > 89.0f, splat(89.0f), x);
    c = select(c < -104.0f, splat(-104.0f), c);
    return is_nan_select(x, exp_hilo(c, c, false));
}

/* log(x) + c for finite x > 0, c a small correction (log1p's rounding of 1 + t). */
INLINE vf log_positive(vf x, vf c) {
    vi tiny = x < 0x1p-126f;
    vf xs = select(tiny, x * 0x1p23f, x);
    vf bias = select(tiny, splat(-23.0f), splat(0.0f));
    /* x = 2^e m with m in [sqrt(1/2), sqrt(2)) */
    vu ix = (vu)xs;
    vi e = (vi)(ix - 0x3f3504f3u) >> 23;
    vf m = (vf)(ix - ((vu)e << 23));
    vf k = __builtin_convertvector(e, vf) + bias;
    vf f = m - 1.0f;
    /* log(1 + f) = f - (f^2/2 - s (f^2/2 + R)), s = f / (2 + f), R = 2s^2/3 + 2s^4/5 + ... */
    vf s = f / (f + 2.0f);
    vf z = s * s;
    vf r = z * (0x1.555556p-1f + z * (0x1.99999ap-2f + z * (0x1.24924ap-2f + z * 0x1.c71c72p-3f)));
    vf hfsq = 0.5f * f * f;
    return k * 0x1.63p-1f - ((hfsq - (s * (hfsq + r) + (k * -0x1.bd0106p-13f + c))) - f);
}

INLINE vf log_v(vf x) {
    vf pos = select(x > 0.0f, x, splat(1.0f));
    pos = select(pos == __builtin_inff(), splat(1.0f), pos);
    vf y = log_positive(pos, splat(0.0f));
    y = select(x == __builtin_inff(), x, y);
    y = select(x == 0.0f, splat(-__builtin_inff()), y);
    return select(x < 0.0f, splat(__builtin_nanf("")), is_nan_select(x, y));
}

/* log(1 + t) for t in [0, 1] */
INLINE vf log1p_unit(vf t) {
    vf u = 1.0f + t;
    return log_positive(u, (t - (u - 1.0f)) / u);
}

INLINE vf tanh_v(vf x) {
    vf a = abs_of(x);
    vf x2 = x * x;
    vf p = splat(0x1.18e1eep-9f);
    p = p * x2 + -0x1.0bf502p-7f;
    p = p * x2 + 0x1.638b5ap-6f;
    p = p * x2 + -0x1.b9ee9p-5f;
    p = p * x2 + 0x1.111066p-3f;
    p = p * x2 + -0x1.555554p-2f;
    vf small = x + x * x2 * p;
    small = (vf)((vu)abs_of(small) | sign_of(x)); /* tanh(-0) = -0 */
    /* 1 - 2 / (exp(2|x|) + 1), the sign put back */
    vf twice = select(a > 44.0f, splat(88.0f), a + a);
    vf e = exp_hilo(twice, twice, false);
    vf large = (vf)((vu)(1.0f - 2.0f / (e + 1.0f)) | sign_of(x));
    return is_nan_select(x, select(a < 0.625f, small, large));
}

INLINE vf sigmoid_v(vf x) {
    vf a = abs_of(x);
    vf e = exp_v(-a);
    vf d = 1.0f + e;
    return is_nan_select(x, select(x >= 0.0f, 1.0f / d, e / d));
}

INLINE vf softplus_v(vf x) {
    vf e = exp_v(-abs_of(x));
    vf positive = select(x > 0.0f, x, splat(0.0f));
    return is_nan_select(x, positive + log1p_unit(select(e != e, splat(0.0f), e)));
}

INLINE vf gelu_v(vf x) {
    vf a = abs_of(x);
    /* |x| < 1/sqrt 2: 0.5 x (1 + erf(x / sqrt 2)), erf(x / sqrt 2) = x Q(x^2) */
    vf x2 = x * x;
    vf q = splat(-0x1.1d3078p-16f);
    q = q * x2 + 0x1.e1f942p-13f;
    q = q * x2 + -0x1.373732p-9f;
    q = q * x2 + 0x1.46d02p-6f;
    q = q * x2 + -0x1.105838p-3f;
    q = q * x2 + 0x1.988454p-1f;
    vf h = 0.5f * x;
    vf small = h + h * (x * q);
    small = (vf)((vu)abs_of(small) | sign_of(x)); /* gelu(-0) = -0 */
    /* else through E = erfc(|x| / sqrt 2) = exp(-x^2 / 2) R(t), t = 1 / (1 + |x| / (2 sqrt 2)):
     * x^2 / 2 split exactly (hi has 12 significant bits) so exp sees it in full precision. */
    vf c = select(a > 15.0f, splat(15.0f), a);
    c = select(c != c, splat(1.0f), c);
    vf c_hi = (vf)((vu)c & 0xfffff000u), c_lo = c - c_hi;
    vf e = exp_hilo(-0.5f * (c_hi * c_hi), -0.5f * (c_lo * (c + c_hi)), true);
    vf t = 1.0f / (1.0f + c * 0x1.6a09e6p-2f);
    vf r = splat(-0x1.4aba72p-7f);
    r = r * t + -0x1.ce5edep-6f;
    r = r * t + 0x1.08c0a8p-2f;
    r = r * t + -0x1.01ea9p-1f;
    r = r * t + 0x1.4f34fap-2f;
    r = r * t + -0x1.1c59dcp-4f;
    r = r * t + 0x1.c8158ep-3f;
    r = r * t + 0x1.e6973ap-3f;
    r = r * t + 0x1.220f1cp-2f;
    r = r * t + 0x1.20c754p-2f;
    r = r * t + 0x1.6618c4p-19f;
    vf half_tail = (0.5f * c) * (e * r); /* 0.5 |x| erfc(|x| / sqrt 2) */
    vf large = select(x > 0.0f, x - half_tail, -half_tail);
    return is_nan_select(x, select(a < 0x1.6a09e6p-1f, small, large));
}

/* The drivers: whole vectors, then the tail through the same code on a padded copy. */
#define DRIVER(NAME, CORE, ATTRIBUTES)                                                             \
    ATTRIBUTES static void NAME(int64_t n, float *out, const float *in) {                          \
        int64_t i = 0;                                                                             \
        for (; i + LANES <= n; i += LANES) {                                                       \
            vf x, y;                                                                               \
            memcpy(&x, in + i, sizeof x);                                                          \
            y = CORE(x);                                                                           \
            memcpy(out + i, &y, sizeof y);                                                         \
        }                                                                                          \
        if (i < n) {                                                                               \
            vf x = splat(0.0f), y;                                                                 \
            memcpy(&x, in + i, sizeof(float) * (size_t)(n - i));                                   \
            y = CORE(x);                                                                           \
            memcpy(out + i, &y, sizeof(float) * (size_t)(n - i));                                  \
        }                                                                                          \
    }

#define AVX2 __attribute__((target("avx2,fma")))
#define BASELINE
#define DRIVERS(SUFFIX, ATTRIBUTES)                                                                \
    DRIVER(exp_##SUFFIX, exp_v, ATTRIBUTES)                                                        \
    DRIVER(log_##SUFFIX, log_v, ATTRIBUTES)                                                        \
    DRIVER(tanh_##SUFFIX, tanh_v, ATTRIBUTES)                                                      \
    DRIVER(sigmoid_##SUFFIX, sigmoid_v, ATTRIBUTES)                                                \
    DRIVER(gelu_##SUFFIX, gelu_v, ATTRIBUTES)                                                      \
    DRIVER(softplus_##SUFFIX, softplus_v, ATTRIBUTES)
DRIVERS(baseline, BASELINE)
DRIVERS(avx2, AVX2)

typedef void (*driver_fn)(int64_t n, float *out, const float *in);
static const driver_fn drivers[2][EG__VECMATH_COUNT] = {
    {exp_baseline, log_baseline, tanh_baseline, sigmoid_baseline, gelu_baseline, softplus_baseline},
    {exp_avx2, log_avx2, tanh_avx2, sigmoid_avx2, gelu_avx2, softplus_avx2},
};

void eg__vecmath_f32_at(eg__cpu_level level, eg__vecmath_fn fn, int64_t n, float *out,
                        const float *in) {
    if (level == EG__CPU_AVX2 && !eg__cpu_has_avx2_fma()) level = EG__CPU_BASELINE;
    drivers[level][fn](n, out, in);
}

void eg__vecmath_f32(eg__vecmath_fn fn, int64_t n, float *out, const float *in) {
    drivers[eg__cpu_active_level()][fn](n, out, in);
}

void eg__vecmath_f32_strided(eg__vecmath_fn fn, int64_t n, char *out, int64_t out_stride,
                             const char *in, int64_t in_stride) {
    enum { CHUNK = 256 };
    driver_fn driver = drivers[eg__cpu_active_level()][fn];
    float buffer[CHUNK];
    for (int64_t begin = 0; begin < n; begin += CHUNK) {
        int64_t count = n - begin < CHUNK ? n - begin : CHUNK;
        for (int64_t i = 0; i < count; i++)
            memcpy(&buffer[i], in + (begin + i) * in_stride, sizeof(float));
        driver(count, buffer, buffer);
        for (int64_t i = 0; i < count; i++)
            memcpy(out + (begin + i) * out_stride, &buffer[i], sizeof(float));
    }
}

const char *eg__vecmath_name(eg__vecmath_fn fn) {
    static const char *const names[EG__VECMATH_COUNT] = {"exp",     "log",  "tanh",
                                                         "sigmoid", "gelu", "softplus"};
    return (unsigned)fn < EG__VECMATH_COUNT ? names[fn] : "?";
}
