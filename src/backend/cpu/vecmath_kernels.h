/* Internal to vecmath.c, which includes this file once per CPU level (no include guard on
 * purpose). Before each inclusion it defines:
 *   VM_SUFFIX  the level's name (baseline, avx2, avx512), appended to every function defined here;
 *   VM_TARGET  the functions' target attribute (empty, target("avx2,fma") or the AVX-512 one);
 *   VM_FMA     0 or 1: whether a*b + c is one fused multiply-add (one rounding) at this level;
 *   VM_AVX512  0 or 1: whether the vectors are 16-lane zmm (the intrinsics below differ);
 *   vf, vi, vu, splat, LANES  the level's vector types (8 or 16 lanes) and broadcast.
 * The polynomials are the same at every level; with VM_FMA each Horner step is one FMA and exp's
 * range reduction takes a simpler split of ln 2 (see exp_hilo). Every lane is still computed
 * independently, so a result's bits depend only on its input and the level. The AVX-512 level
 * performs, per lane, exactly the AVX2 level's IEEE operations (the same FMAs, divisions, min/max
 * and integer steps; only selections and the fast-path test are spelled with mask registers, which
 * move bits without rounding), so it gives the AVX2 level's bits in twice the lanes. */

#define VM_CAT2(a, b) a##_##b
#define VM_CAT(a, b)  VM_CAT2(a, b)
#define VM(name)      VM_CAT(name, VM_SUFFIX)
#define VM_INLINE     static inline __attribute__((always_inline)) VM_TARGET

/* Lane masks: a comparison's all-ones / all-zeros lanes (vi) at 8 lanes, a mask register at 16,
 * so that AVX-512 compares straight into k registers and blends from them. Macros, as splat. */
#if VM_AVX512
#define vmask              __mmask16
#define VM_CMP(a, c, PRED) _mm512_cmp_ps_mask((__m512)(a), (__m512)splat(c), PRED)
#define VM_LT(a, c)        VM_CMP(a, c, _CMP_LT_OQ)
#define VM_GT(a, c)        VM_CMP(a, c, _CMP_GT_OQ)
#define VM_GE(a, c)        VM_CMP(a, c, _CMP_GE_OQ)
#define VM_EQ(a, c)        VM_CMP(a, c, _CMP_EQ_OQ)
#define VM_IS_NAN(a)       _mm512_cmp_ps_mask((__m512)(a), (__m512)(a), _CMP_UNORD_Q)
#define VM_ALL(m)          ((m) == 0xffff)
#else
#define vmask        vi
#define VM_LT(a, c)  ((a) < (c))
#define VM_GT(a, c)  ((a) > (c))
#define VM_GE(a, c)  ((a) >= (c))
#define VM_EQ(a, c)  ((a) == (c))
#define VM_IS_NAN(a) ((a) != (a))
#define VM_ALL(m)    (_mm256_movemask_ps((__m256)(m)) == 0xff)
#endif

/* Lane-wise helpers, defined per level too: clang rejects passing a 256-bit vector between
 * functions whose targets differ, even when one is inlined into the other. */
/* m ? a : b, lane by lane */
VM_INLINE vf VM(choose)(vmask m, vf a, vf b) {
#if VM_AVX512
    return (vf)_mm512_mask_blend_ps(m, (__m512)b, (__m512)a);
#elif VM_FMA /* one blend instead of and, and-not, or: every m here is a comparison's */
    return (vf)_mm256_blendv_ps((__m256)b, (__m256)a, (__m256)m);
#else
    return (vf)((m & (vi)a) | (~m & (vi)b));
#endif
}
VM_INLINE vf VM(abs_of)(vf x) {
    return (vf)((vu)x & 0x7fffffffu);
}
VM_INLINE vu VM(sign_of)(vf x) {
    return (vu)x & 0x80000000u;
}
VM_INLINE vf VM(is_nan_select)(vf x, vf result) {
    return VM(choose)(VM_IS_NAN(x), x, result);
}

/* a * b + c: fused (rounded once) at an FMA level, two roundings otherwise. */
VM_INLINE vf VM(madd)(vf a, vf b, vf c) {
#if VM_AVX512
    return (vf)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c);
#elif VM_FMA
    return (vf)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);
#else
    return a * b + c;
#endif
}
/* c - a * b, the same way. */
VM_INLINE vf VM(nmadd)(vf a, vf b, vf c) {
#if VM_AVX512
    return (vf)_mm512_fnmadd_ps((__m512)a, (__m512)b, (__m512)c);
#elif VM_FMA
    return (vf)_mm256_fnmadd_ps((__m256)a, (__m256)b, (__m256)c);
#else
    return c - a * b;
#endif
}
/* min(x, limit) and max(x, limit) for x not NaN (a NaN x gives limit here, x in the baseline:
 * callers put NaN lanes back themselves). */
VM_INLINE vf VM(at_most)(vf x, float limit) {
#if VM_AVX512
    return (vf)_mm512_min_ps((__m512)x, (__m512)splat(limit));
#elif VM_FMA
    return (vf)_mm256_min_ps((__m256)x, (__m256)splat(limit));
#else
    return VM(choose)(VM_GT(x, limit), splat(limit), x);
#endif
}
VM_INLINE vf VM(at_least)(vf x, float limit) {
#if VM_AVX512
    return (vf)_mm512_max_ps((__m512)x, (__m512)splat(limit));
#elif VM_FMA
    return (vf)_mm256_max_ps((__m256)x, (__m256)splat(limit));
#else
    return VM(choose)(VM_LT(x, limit), splat(limit), x);
#endif
}
/* The same with a constant addend (a Horner step). A macro: GCC 12 builds splat(c) of a function
 * parameter lane by lane, even after inlining. */
#define VM_MADDC(a, b, c) VM(madd)(a, b, splat(c))

/* The shared part of exp_hilo and exp_normal: n = round(x / ln 2) (its bits in *k), the reduced
 * argument r (returned) and the polynomial *p, e^x = (1 + r + p r^2) 2^n. */
VM_INLINE vf VM(exp_reduce)(vf hi, vf lo, bool has_lo, vu *k, vf *p_out) {
    const float shift = 0x1.8p23f; /* adding it rounds to an integer held in the low bits */
    vf t = VM_MADDC(has_lo ? hi + lo : hi, splat(0x1.715476p+0f), shift);
    vf n = t - shift;
    *k = (vu)t - (vu)splat(shift);
    vf r;
#if VM_FMA
    /* ln 2 = LN2_HI + LN2_LO with LN2_HI the float nearest ln 2: n * LN2_HI is exact inside the
     * FMA, and hi - n LN2_HI (|.| <= 0.35, a multiple of 2^-25 where n != 0) fits in a float, so
     * the first step is exact. */
    r = VM(nmadd)(n, splat(0x1.62e43p-1f), hi);
    if (has_lo) r = r + lo;
    r = VM(nmadd)(n, splat(-0x1.05c61p-29f), r);
#else
    /* ln 2 = LN2_HI + LN2_LO, LN2_HI with 9 significant bits so n * LN2_HI is exact */
    r = hi - n * 0x1.63p-1f;
    if (has_lo) r = r + lo;
    r = r - n * -0x1.bd0106p-13f;
#endif
    vf p = splat(0x1.6a2282p-10f);
    p = VM_MADDC(p, r, 0x1.123ae6p-7f);
    p = VM_MADDC(p, r, 0x1.5558f8p-5f);
    p = VM_MADDC(p, r, 0x1.55549p-3f);
    p = VM_MADDC(p, r, 0x1.fffffcp-2f);
    *p_out = p;
    return r;
}

/* exp(hi + lo) for hi + lo in about [-252, 89], with lo small against hi: the argument's low part
 * enters only the reduced argument, so a product like -x^2/2 keeps its precision. Without lo
 * (has_lo false, a constant after inlining) the two additions of lo are left out. NaN lanes
 * give garbage (integer arithmetic is unsigned: no undefined behaviour); callers select. */
VM_INLINE vf VM(exp_hilo)(vf hi, vf lo, bool has_lo) {
    vu k;
    vf p, r = VM(exp_reduce)(hi, lo, has_lo, &k, &p);
    /* 2^n in two factors, each a normal float, so results below 2^-126 round once */
    vu k1 = (vu)((vi)k >> 1), k2 = k - k1;
    vf s1 = (vf)((k1 + 127u) << 23), s2 = (vf)((k2 + 127u) << 23);
#if VM_FMA
    /* (1 + q) s1 in one FMA: one rounding, as 1 + q's (s1 is a power of 2) */
    vf q = VM(madd)(p, r * r, r);
    return VM(madd)(q, s1, s1) * s2;
#else
    p = (p * r) * r + r + 1.0f;
    return (p * s1) * s2;
#endif
}

#if VM_FMA
/* exp_hilo(x, x, false) for |x| < 87, where e^x is a normal float and 2^n is one normal factor:
 * (1 + q) 2^n in one FMA is then exp_hilo's (1 + q) s1 s2 bit for bit (both scale one rounding
 * of 1 + q by a power of 2), without the clamp, the split of 2^n and the NaN select. */
VM_INLINE vf VM(exp_normal)(vf x) {
    vu k;
    vf p, r = VM(exp_reduce)(x, x, false, &k, &p);
    vf s = (vf)((k + 127u) << 23);
    return VM(madd)(VM(madd)(p, r * r, r), s, s);
}
#endif

VM_INLINE vf VM(exp_v)(vf x) {
#if VM_FMA
    if (VM_ALL(VM_LT(VM(abs_of)(x), 87.0f))) return VM(exp_normal)(x); /* false for NaN */
#endif
    vf c = VM(at_least)(VM(at_most)(x, 89.0f), -104.0f);
    return VM(is_nan_select)(x, VM(exp_hilo)(c, c, false));
}

/* log(x) + c for finite x > 0, c a small correction (log1p's rounding of 1 + t). */
VM_INLINE vf VM(log_positive)(vf x, vf c) {
    vmask tiny = VM_LT(x, 0x1p-126f);
    vf xs = VM(choose)(tiny, x * 0x1p23f, x);
    vf bias = VM(choose)(tiny, splat(-23.0f), splat(0.0f));
    /* x = 2^e m with m in [sqrt(1/2), sqrt(2)) */
    vu ix = (vu)xs;
    vi e = (vi)(ix - 0x3f3504f3u) >> 23;
    vf m = (vf)(ix - ((vu)e << 23));
    vf k = __builtin_convertvector(e, vf) + bias;
    vf f = m - 1.0f;
    /* log(1 + f) = f - (f^2/2 - s (f^2/2 + R)), s = f / (2 + f), R = 2s^2/3 + 2s^4/5 + ... */
    vf s = f / (f + 2.0f);
    vf z = s * s;
    vf q = VM_MADDC(z, splat(0x1.c71c72p-3f), 0x1.24924ap-2f);
    q = VM_MADDC(z, q, 0x1.99999ap-2f);
    q = VM_MADDC(z, q, 0x1.555556p-1f);
    vf r = z * q;
    vf hfsq = 0.5f * f * f;
    /* k LN2_HI is exact (k has at most 8 significant bits), so the last step needs no FMA */
    vf inner = VM(madd)(s, hfsq + r, VM(madd)(k, splat(-0x1.bd0106p-13f), c));
    return k * 0x1.63p-1f - ((hfsq - inner) - f);
}

VM_INLINE vf VM(log_v)(vf x) {
    vf pos = VM(choose)(VM_GT(x, 0.0f), x, splat(1.0f));
    pos = VM(choose)(VM_EQ(pos, __builtin_inff()), splat(1.0f), pos);
    vf y = VM(log_positive)(pos, splat(0.0f));
    y = VM(choose)(VM_EQ(x, __builtin_inff()), x, y);
    y = VM(choose)(VM_EQ(x, 0.0f), splat(-__builtin_inff()), y);
    return VM(choose)(VM_LT(x, 0.0f), splat(__builtin_nanf("")), VM(is_nan_select)(x, y));
}

/* log(1 + t) for t in [0, 1] */
VM_INLINE vf VM(log1p_unit)(vf t) {
    vf u = 1.0f + t;
    return VM(log_positive)(u, (t - (u - 1.0f)) / u);
}

VM_INLINE vf VM(tanh_v)(vf x) {
    vf a = VM(abs_of)(x);
    vf x2 = x * x;
    vf p = splat(0x1.18e1eep-9f);
    p = VM_MADDC(p, x2, -0x1.0bf502p-7f);
    p = VM_MADDC(p, x2, 0x1.638b5ap-6f);
    p = VM_MADDC(p, x2, -0x1.b9ee9p-5f);
    p = VM_MADDC(p, x2, 0x1.111066p-3f);
    p = VM_MADDC(p, x2, -0x1.555554p-2f);
    vf small = VM(madd)(x * x2, p, x);
    small = (vf)((vu)VM(abs_of)(small) | VM(sign_of)(x)); /* tanh(-0) = -0 */
    /* 1 - 2 / (exp(2|x|) + 1), the sign put back */
    vf twice = VM(at_most)(a + a, 88.0f);
    vf e = VM(exp_hilo)(twice, twice, false);
    vf large = (vf)((vu)(1.0f - 2.0f / (e + 1.0f)) | VM(sign_of)(x));
    return VM(is_nan_select)(x, VM(choose)(VM_LT(a, 0.625f), small, large));
}

VM_INLINE vf VM(sigmoid_v)(vf x) {
    vf a = VM(abs_of)(x);
    vf e = VM(exp_v)(-a);
    /* one division: 1 / d or e / d, the numerator chosen first */
    return VM(is_nan_select)(x, VM(choose)(VM_GE(x, 0.0f), splat(1.0f), e) / (1.0f + e));
}

VM_INLINE vf VM(softplus_v)(vf x) {
    vf e = VM(exp_v)(-VM(abs_of)(x));
    vf positive = VM(choose)(VM_GT(x, 0.0f), x, splat(0.0f));
    return VM(is_nan_select)(x,
                             positive + VM(log1p_unit)(VM(choose)(VM_IS_NAN(e), splat(0.0f), e)));
}

VM_INLINE vf VM(gelu_v)(vf x) {
    vf a = VM(abs_of)(x);
    /* |x| < 1/sqrt 2: 0.5 x (1 + erf(x / sqrt 2)), erf(x / sqrt 2) = x Q(x^2) */
    vf x2 = x * x;
    vf q = splat(-0x1.1d3078p-16f);
    q = VM_MADDC(q, x2, 0x1.e1f942p-13f);
    q = VM_MADDC(q, x2, -0x1.373732p-9f);
    q = VM_MADDC(q, x2, 0x1.46d02p-6f);
    q = VM_MADDC(q, x2, -0x1.105838p-3f);
    q = VM_MADDC(q, x2, 0x1.988454p-1f);
    vf h = 0.5f * x;
    vf small = VM(madd)(h, x * q, h);
    small = (vf)((vu)VM(abs_of)(small) | VM(sign_of)(x)); /* gelu(-0) = -0 */
    /* else through E = erfc(|x| / sqrt 2) = exp(-x^2 / 2) R(t), t = 1 / (1 + |x| / (2 sqrt 2)):
     * x^2 / 2 split exactly (hi has 12 significant bits) so exp sees it in full precision. */
    vf c = VM(at_most)(a, 15.0f);
    c = VM(choose)(VM_IS_NAN(c), splat(1.0f), c); /* (the baseline's NaN) */
    vf c_hi = (vf)((vu)c & 0xfffff000u), c_lo = c - c_hi;
    vf e = VM(exp_hilo)(-0.5f * (c_hi * c_hi), -0.5f * (c_lo * (c + c_hi)), true);
    vf t = 1.0f / VM_MADDC(c, splat(0x1.6a09e6p-2f), 1.0f);
    vf r = splat(-0x1.4aba72p-7f);
    r = VM_MADDC(r, t, -0x1.ce5edep-6f);
    r = VM_MADDC(r, t, 0x1.08c0a8p-2f);
    r = VM_MADDC(r, t, -0x1.01ea9p-1f);
    r = VM_MADDC(r, t, 0x1.4f34fap-2f);
    r = VM_MADDC(r, t, -0x1.1c59dcp-4f);
    r = VM_MADDC(r, t, 0x1.c8158ep-3f);
    r = VM_MADDC(r, t, 0x1.e6973ap-3f);
    r = VM_MADDC(r, t, 0x1.220f1cp-2f);
    r = VM_MADDC(r, t, 0x1.20c754p-2f);
    r = VM_MADDC(r, t, 0x1.6618c4p-19f);
    vf half_tail = (0.5f * c) * (e * r); /* 0.5 |x| erfc(|x| / sqrt 2) */
    vf large = VM(choose)(VM_GT(x, 0.0f), x - half_tail, -half_tail);
    return VM(is_nan_select)(x, VM(choose)(VM_LT(a, 0x1.6a09e6p-1f), small, large));
}

/* ---- the fast variants (vecmath.h: EG__VECMATH_*_FAST) ----
 * Cheaper at the price of a few more ulp (vecmath.h's table): lower degrees, rational forms with
 * one division in place of an exp and a division, and no special cases beyond those that keep
 * results finite and ordered: exp saturates to 0 and inf, tanh and erf are clamped to [-1, 1],
 * NaN gives NaN. No subnormal results from exp_fast and sigmoid_fast (they flush to 0). */

/* x clamped to [lo, hi], a NaN kept: minps / maxps return their second operand when one is NaN,
 * and the baseline's comparisons are false for it. */
VM_INLINE vf VM(clamp_keep_nan)(vf x, float lo, float hi) {
#if VM_AVX512
    x = (vf)_mm512_max_ps((__m512)splat(lo), (__m512)x);
    return (vf)_mm512_min_ps((__m512)splat(hi), (__m512)x);
#elif VM_FMA
    x = (vf)_mm256_max_ps((__m256)splat(lo), (__m256)x);
    return (vf)_mm256_min_ps((__m256)splat(hi), (__m256)x);
#else
    x = VM(choose)(VM_LT(x, lo), splat(lo), x);
    return VM(choose)(VM_GT(x, hi), splat(hi), x);
#endif
}

/* e^x for x in [-87.328125, 88.72283]: 2^n p(r), r = x - n ln 2, p of degree 4 (degree 5 cut
 * the error from 46 to 5 ulp but the speed-up from 1.5x to 1.3x: bench/RESULTS.md), 2^n added to
 * p's exponent as an integer (p is in [0.7, 1.42], so the result stays a normal float there:
 * the bounds are where n = -126 still has p > 1 and n = 128 has p < 1). With an FMA, one
 * constant for ln 2: x - n LN2 is exact (see exp_reduce), and ln 2 - LN2 ~ 1.9e-9 adds at most
 * 2.4e-7 relative at n = 126. Without, exp_reduce's two-part ln 2. */
VM_INLINE vf VM(exp_fast_core)(vf x) {
    vf t = VM_MADDC(x, splat(0x1.715476p+0f), 0x1.8p23f); /* n in t's low bits */
    vf n = t - 0x1.8p23f;
#if VM_FMA
    vf r = VM(nmadd)(n, splat(0x1.62e43p-1f), x);
#else
    vf r = (x - n * 0x1.63p-1f) - n * -0x1.bd0106p-13f;
#endif
    vf p = splat(0x1.541494p-5f);
    p = VM_MADDC(p, r, 0x1.57cf2ap-3f);
    p = VM_MADDC(p, r, 0x1.0003f4p-1f);
    p = VM_MADDC(p, r, 0x1.fffba6p-1f);
    p = VM_MADDC(p, r, 1.0f);
    /* t's bits are those of 1.5 2^23 plus n, whose top bits shift out */
    return (vf)((vu)p + ((vu)t << 23));
}

VM_INLINE vf VM(exp_fast_v)(vf x) {
#if VM_FMA
    if (VM_ALL(VM_LT(VM(abs_of)(x), 87.0f))) return VM(exp_fast_core)(x); /* false for NaN */
#endif
    vf y = VM(exp_fast_core)(VM(clamp_keep_nan)(x, -0x1.5d5p+6f, 0x1.62e42ep+6f));
    y = VM(choose)(VM_GT(x, 0x1.62e42ep+6f), splat(__builtin_inff()), y);
    y = VM(choose)(VM_LT(x, -0x1.5d5p+6f), splat(0.0f), y);
    return VM(is_nan_select)(x, y);
}

/* tanh(x) = x P(x^2) / Q(x^2), a rational fit of relative error on |x| <= 9
 * (bench/elementwise/fit_vecmath.py), clamped to [-1, 1] where it overshoots by a few ulp. x is
 * clamped to +-8.5, where the fit is above 1 (tanh is within 1.5e-7 of 1 there): so the limits
 * are reached exactly. tanh(-0) = -0. */
VM_INLINE vf VM(tanh_fast_v)(vf x) {
    vf c = VM(clamp_keep_nan)(x, -8.5f, 8.5f);
    vf z = c * c;
    vf p = splat(-0x1.5ada1ap-28f);
    p = VM_MADDC(p, z, 0x1.b53296p-18f);
    p = VM_MADDC(p, z, 0x1.55aaep-9f);
    p = VM_MADDC(p, z, 0x1.02846p-3f);
    p = VM_MADDC(p, z, 0x1.ffffeep-1f);
    vf q = splat(0x1.84d588p-13f);
    q = VM_MADDC(q, z, 0x1.700f8cp-6f);
    q = VM_MADDC(q, z, 0x1.d6967p-2f);
    q = VM_MADDC(q, z, 1.0f);
    return VM(clamp_keep_nan)((c * p) / q, -1.0f, 1.0f);
}

/* 1 / (1 + e^-x): e^-x's relative error carries over to the negative tail (no cancellation). */
VM_INLINE vf VM(sigmoid_fast_v)(vf x) {
    return 1.0f / (1.0f + VM(exp_fast_v)(-x));
}

/* 0.5 x (1 + erf(x / sqrt 2)), the exact function (not the tanh form, which is 1e-3 off it),
 * with erf(x / sqrt 2) = x P(x^2) / Q(x^2), a rational fit on |x| <= 5.6, clamped to [-1, 1].
 * x is clamped to +-5.45, where the fit is above 1 (erf is within 5e-8 of 1 there), so that
 * gelu(x) = x and -0 beyond; the half x is taken of max(x, -5.45), so that gelu(-inf) is -0, not
 * inf - inf. In the negative tail 1 + erf cancels: the relative error grows as gelu shrinks
 * (vecmath.h). gelu_fast(-0) = +0. */
VM_INLINE vf VM(gelu_fast_v)(vf x) {
    vf low = VM(clamp_keep_nan)(x, -5.45f, __builtin_inff());
    vf c = VM(clamp_keep_nan)(low, -5.45f, 5.45f);
    vf z = c * c;
    vf p = splat(-0x1.17ddb6p-25f);
    p = VM_MADDC(p, z, 0x1.84927cp-17f);
    p = VM_MADDC(p, z, 0x1.e69094p-11f);
    p = VM_MADDC(p, z, 0x1.aa848cp-7f);
    p = VM_MADDC(p, z, 0x1.0d23a4p-3f);
    p = VM_MADDC(p, z, 0x1.988462p-1f);
    vf q = splat(0x1.41a044p-13f);
    q = VM_MADDC(q, z, 0x1.d89e52p-9f);
    q = VM_MADDC(q, z, 0x1.7d4ce8p-5f);
    q = VM_MADDC(q, z, 0x1.535388p-2f);
    q = VM_MADDC(q, z, 1.0f);
    vf erf = VM(clamp_keep_nan)((c * p) / q, -1.0f, 1.0f);
    vf h = 0.5f * low;
    return VM(madd)(h, erf, h);
}

/* The drivers: whole vectors, then the tail through the same code on a zero-padded vector (with
 * AVX-512, a masked load and store; zeros in the other lanes either way). */
#if VM_AVX512
#define VM_TAIL(CORE)                                                                              \
    if (i < n) {                                                                                   \
        __mmask16 mask_ = (__mmask16)((1u << (n - i)) - 1);                                        \
        vf y = VM(CORE)((vf)_mm512_maskz_loadu_ps(mask_, in + i));                                 \
        _mm512_mask_storeu_ps(out + i, mask_, (__m512)y);                                          \
    }
#else
#define VM_TAIL(CORE)                                                                              \
    if (i < n) {                                                                                   \
        vf x = splat(0.0f), y;                                                                     \
        memcpy(&x, in + i, sizeof(float) * (size_t)(n - i));                                       \
        y = VM(CORE)(x);                                                                           \
        memcpy(out + i, &y, sizeof(float) * (size_t)(n - i));                                      \
    }
#endif
/* At AVX-512, the input is prefetched VM_PREFETCH_BYTES ahead: a vector of the slower functions
 * (gelu, softplus) takes long enough per cache line that the hardware prefetcher falls behind on
 * arrays beyond the caches (bench/elementwise/README.md). An address, not a pointer past the
 * array: a prefetch never faults, and no out-of-bounds pointer is formed. */
#if VM_AVX512
#ifndef VM_PREFETCH_BYTES
#define VM_PREFETCH_BYTES 8192
#endif
#define VM_PREFETCH(p) _mm_prefetch((const char *)((uintptr_t)(p) + VM_PREFETCH_BYTES), _MM_HINT_T0)
#else
#define VM_PREFETCH(p) ((void)0)
#endif
#define VM_DRIVER(NAME, CORE)                                                                      \
    VM_TARGET static void VM(NAME)(int64_t n, float *out, const float *in) {                       \
        int64_t i = 0;                                                                             \
        for (; i + LANES <= n; i += LANES) {                                                       \
            vf x, y;                                                                               \
            VM_PREFETCH(in + i);                                                                   \
            memcpy(&x, in + i, sizeof x);                                                          \
            y = VM(CORE)(x);                                                                       \
            memcpy(out + i, &y, sizeof y);                                                         \
        }                                                                                          \
        VM_TAIL(CORE)                                                                              \
    }
VM_DRIVER(exp, exp_v)
VM_DRIVER(log, log_v)
VM_DRIVER(tanh, tanh_v)
VM_DRIVER(sigmoid, sigmoid_v)
VM_DRIVER(gelu, gelu_v)
VM_DRIVER(softplus, softplus_v)
VM_DRIVER(exp_fast, exp_fast_v)
VM_DRIVER(tanh_fast, tanh_fast_v)
VM_DRIVER(sigmoid_fast, sigmoid_fast_v)
VM_DRIVER(gelu_fast, gelu_fast_v)

/* bf16 and f16 drivers (vecmath.h: eg__vecmath_lowp): LANES 16-bit elements widened in registers
 * (exactly), the f32 core, and the result rounded as core/dtype.c rounds: bf16 by its integer
 * steps (x + 0x7fff + lsb) >> 16, a NaN's top half with the quiet bit; f16 by vcvtps2ph (nearest
 * even), which needs F16C: only at the FMA levels, whose CPUs have it (the caller checks). The
 * tail runs through the same code on a zero-padded vector. So the bits are those of the f32
 * driver's result rounded once, whatever the position. */
typedef uint16_t VM(vh) __attribute__((vector_size(LANES * 2)));

VM_INLINE vf VM(widen_bf16)(VM(vh) h) {
    return (vf)(__builtin_convertvector(h, vu) << 16);
}
/* The rounded bf16 in the low half of each 32-bit lane. */
VM_INLINE vu VM(round_bf16_32)(vf y) {
    vu x = (vu)y, top = x >> 16;
    vu rounded = (x + 0x7fffu + (top & 1u)) >> 16;
    return (vu)VM(choose)(VM_IS_NAN(y), (vf)(top | 0x40u), (vf)rounded);
}
VM_INLINE VM(vh) VM(round_bf16)(vf y) {
    return __builtin_convertvector(VM(round_bf16_32)(y), VM(vh));
}
#if VM_FMA
VM_INLINE vf VM(widen_f16)(VM(vh) h) {
#if VM_AVX512
    __m256i bits;
    memcpy(&bits, &h, sizeof bits);
    return (vf)_mm512_cvtph_ps(bits);
#else
    __m128i bits;
    memcpy(&bits, &h, sizeof bits);
    return (vf)_mm256_cvtph_ps(bits);
#endif
}
VM_INLINE VM(vh) VM(round_f16)(vf y) {
    VM(vh) h;
#if VM_AVX512
    __m256i bits = _mm512_cvtps_ph((__m512)y, _MM_FROUND_TO_NEAREST_INT);
#else
    __m128i bits = _mm256_cvtps_ph((__m256)y, _MM_FROUND_TO_NEAREST_INT);
#endif
    memcpy(&h, &bits, sizeof h);
    return h;
}
#endif

#define VM_DRIVER_16(NAME, CORE, FORMAT)                                                           \
    VM_TARGET static void VM(NAME##_##FORMAT)(int64_t n, uint16_t *out, const uint16_t *in) {      \
        int64_t i = 0;                                                                             \
        for (; i + LANES <= n; i += LANES) {                                                       \
            VM(vh) h;                                                                              \
            VM_PREFETCH(in + i);                                                                   \
            memcpy(&h, in + i, sizeof h);                                                          \
            h = VM(round_##FORMAT)(VM(CORE)(VM(widen_##FORMAT)(h)));                               \
            memcpy(out + i, &h, sizeof h);                                                         \
        }                                                                                          \
        if (i < n) {                                                                               \
            VM(vh) h = {0};                                                                        \
            memcpy(&h, in + i, sizeof(uint16_t) * (size_t)(n - i));                                \
            h = VM(round_##FORMAT)(VM(CORE)(VM(widen_##FORMAT)(h)));                               \
            memcpy(out + i, &h, sizeof(uint16_t) * (size_t)(n - i));                               \
        }                                                                                          \
    }
#if VM_FMA
/* bf16 at the AVX levels, two vectors at a time: interleaving 2 LANES elements with zeros
 * (unpacklo / unpackhi, within each 128-bit lane) puts each in the top half of a 32-bit lane,
 * which is its f32 value with no shift, and packing the two rounded vectors (packus, within the
 * lanes as well) undoes the interleaving: the same values through the same core in another lane
 * order, which elementwise results do not depend on, for a third of the conversions' shuffles. */
#if VM_AVX512
#define VM_PAIR           __m512i
#define VM_PAIR_LO(h)     ((vf)_mm512_unpacklo_epi16(_mm512_setzero_si512(), h))
#define VM_PAIR_HI(h)     ((vf)_mm512_unpackhi_epi16(_mm512_setzero_si512(), h))
#define VM_PAIR_PACK(a, b) _mm512_packus_epi32((__m512i)(a), (__m512i)(b))
#else
#define VM_PAIR           __m256i
#define VM_PAIR_LO(h)     ((vf)_mm256_unpacklo_epi16(_mm256_setzero_si256(), h))
#define VM_PAIR_HI(h)     ((vf)_mm256_unpackhi_epi16(_mm256_setzero_si256(), h))
#define VM_PAIR_PACK(a, b) _mm256_packus_epi32((__m256i)(a), (__m256i)(b))
#endif
#define VM_DRIVER_BF16_PAIRS(NAME, CORE)                                                           \
    VM_TARGET static void VM(NAME##_bf16)(int64_t n, uint16_t *out, const uint16_t *in) {          \
        int64_t i = 0;                                                                             \
        VM_PAIR h;                                                                                 \
        for (; i + 2 * LANES <= n; i += 2 * LANES) {                                               \
            VM_PREFETCH(in + i);                                                                   \
            memcpy(&h, in + i, sizeof h);                                                          \
            vu lo = VM(round_bf16_32)(VM(CORE)(VM_PAIR_LO(h)));                                    \
            vu hi = VM(round_bf16_32)(VM(CORE)(VM_PAIR_HI(h)));                                    \
            h = VM_PAIR_PACK(lo, hi);                                                              \
            memcpy(out + i, &h, sizeof h);                                                         \
        }                                                                                          \
        if (i < n) {                                                                               \
            uint16_t pad[2 * LANES] = {0};                                                         \
            memcpy(pad, in + i, sizeof(uint16_t) * (size_t)(n - i));                               \
            memcpy(&h, pad, sizeof h);                                                             \
            vu lo = VM(round_bf16_32)(VM(CORE)(VM_PAIR_LO(h)));                                    \
            vu hi = VM(round_bf16_32)(VM(CORE)(VM_PAIR_HI(h)));                                    \
            h = VM_PAIR_PACK(lo, hi);                                                              \
            memcpy(pad, &h, sizeof h);                                                             \
            memcpy(out + i, pad, sizeof(uint16_t) * (size_t)(n - i));                              \
        }                                                                                          \
    }
#endif

#define VM_DRIVERS_16(FORMAT)                                                                      \
    VM_DRIVER_16(exp, exp_v, FORMAT)                                                               \
    VM_DRIVER_16(log, log_v, FORMAT)                                                               \
    VM_DRIVER_16(tanh, tanh_v, FORMAT)                                                             \
    VM_DRIVER_16(sigmoid, sigmoid_v, FORMAT)                                                       \
    VM_DRIVER_16(gelu, gelu_v, FORMAT)                                                             \
    VM_DRIVER_16(softplus, softplus_v, FORMAT)
#if VM_FMA
#if VM_AVX512
/* With AVX512_BF16, vcvtne2ps2bf16 rounds a pair of vectors to bf16 in one instruction, with
 * core/dtype.c's bits for every f32 input (NaNs included; checked on all 2^32 of them) except the
 * f32 subnormals, which it takes as zero: a pair holding one (a result below 2^-126, rare) is
 * rounded by the integer steps instead. Its output is in the vectors' element order; a word
 * permutation puts it in the interleaved order the pair came in (see above). */
#define VM_BF16_TARGET                                                                             \
    __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c,avx512bf16")))
VM_BF16_TARGET static inline __attribute__((always_inline)) __m512i VM(pack_bf16_pair)(vf lo,
                                                                                         vf hi) {
    if (!_kortestz_mask16_u8(_mm512_fpclass_ps_mask((__m512)lo, 0x20),
                             _mm512_fpclass_ps_mask((__m512)hi, 0x20)))
        return VM_PAIR_PACK(VM(round_bf16_32)(lo), VM(round_bf16_32)(hi));
    /* word j of the conversion is element 8 (j % 16 / 4) + j % 4 (+ 4 for j >= 16) */
    const __m512i order = _mm512_set_epi16(31, 30, 29, 28, 15, 14, 13, 12, 27, 26, 25, 24, 11, 10,
                                           9, 8, 23, 22, 21, 20, 7, 6, 5, 4, 19, 18, 17, 16, 3, 2,
                                           1, 0);
    return _mm512_permutexvar_epi16(order, (__m512i)_mm512_cvtne2ps_pbh((__m512)hi, (__m512)lo));
}
#define VM_DRIVER_BF16_NATIVE(NAME, CORE)                                                          \
    VM_BF16_TARGET static void VM(NAME##_bf16_native)(int64_t n, uint16_t *out,                    \
                                                      const uint16_t *in) {                        \
        int64_t i = 0;                                                                             \
        VM_PAIR h;                                                                                 \
        for (; i + 2 * LANES <= n; i += 2 * LANES) {                                               \
            VM_PREFETCH(in + i);                                                                   \
            memcpy(&h, in + i, sizeof h);                                                          \
            h = VM(pack_bf16_pair)(VM(CORE)(VM_PAIR_LO(h)), VM(CORE)(VM_PAIR_HI(h)));              \
            memcpy(out + i, &h, sizeof h);                                                         \
        }                                                                                          \
        if (i < n) {                                                                               \
            uint16_t pad[2 * LANES] = {0};                                                         \
            memcpy(pad, in + i, sizeof(uint16_t) * (size_t)(n - i));                               \
            memcpy(&h, pad, sizeof h);                                                             \
            h = VM(pack_bf16_pair)(VM(CORE)(VM_PAIR_LO(h)), VM(CORE)(VM_PAIR_HI(h)));              \
            memcpy(pad, &h, sizeof h);                                                             \
            memcpy(out + i, pad, sizeof(uint16_t) * (size_t)(n - i));                              \
        }                                                                                          \
    }
VM_DRIVER_BF16_NATIVE(exp, exp_v)
VM_DRIVER_BF16_NATIVE(log, log_v)
VM_DRIVER_BF16_NATIVE(tanh, tanh_v)
VM_DRIVER_BF16_NATIVE(sigmoid, sigmoid_v)
VM_DRIVER_BF16_NATIVE(gelu, gelu_v)
VM_DRIVER_BF16_NATIVE(softplus, softplus_v)
#undef VM_DRIVER_BF16_NATIVE
#undef VM_BF16_TARGET
#endif
VM_DRIVER_BF16_PAIRS(exp, exp_v)
VM_DRIVER_BF16_PAIRS(log, log_v)
VM_DRIVER_BF16_PAIRS(tanh, tanh_v)
VM_DRIVER_BF16_PAIRS(sigmoid, sigmoid_v)
VM_DRIVER_BF16_PAIRS(gelu, gelu_v)
VM_DRIVER_BF16_PAIRS(softplus, softplus_v)
VM_DRIVERS_16(f16)
#undef VM_DRIVER_BF16_PAIRS
#undef VM_PAIR
#undef VM_PAIR_LO
#undef VM_PAIR_HI
#undef VM_PAIR_PACK
#else
VM_DRIVERS_16(bf16)
#endif

#undef VM_DRIVERS_16
#undef VM_DRIVER_16
#undef VM_DRIVER
#undef VM_PREFETCH
#undef vmask
#undef VM_CMP
#undef VM_LT
#undef VM_GT
#undef VM_GE
#undef VM_EQ
#undef VM_IS_NAN
#undef VM_ALL
#undef VM_TAIL
#undef VM_MADDC
#undef VM_INLINE
#undef VM
#undef VM_CAT
#undef VM_CAT2
