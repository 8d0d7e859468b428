/* f32 vector math (src/backend/cpu/vecmath.c), at each CPU level separately (baseline; AVX2 with
 * FMA, whose bits differ from the baseline's; AVX-512, which must give the AVX2 bits): maximum
 * error in ulp against a double-precision reference over a stratified sweep of all f32 bit
 * patterns (every EG_VECMATH_STRIDE-th, default 1009; EG_VECMATH_SWEEP=all for every one of the
 * 2^32) and a dense sweep of [-20, 20], special values, AVX-512 bits equal to AVX2's on every
 * input swept, and no dependence on alignment, position in the array or strides. A level the CPU
 * lacks runs the best one it has (eg__vecmath_f32_at clamps), so every check still holds.
 *
 * The fast variants (EG__VECMATH_*_FAST) are measured against the exact functions' references
 * (gelu_fast against the erf gelu) on the same sweeps, with a bound per level. Their ulp bound is
 * asserted where the exact result is at least a floor in magnitude; below it, where ulp measure
 * what the approximations do not promise (exp_fast and sigmoid_fast flush results below about
 * 2^-126 to 0; gelu_fast's 1 + erf cancels in the negative tail), a bound on the absolute error.
 * The maximum relative error over the ulp region is printed too. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu_features.h"
#include "backend/cpu/vecmath.h"

/* The asserted bounds (documented in vecmath.h): ulp of the correctly rounded result. */
static const double max_ulp[EG__VECMATH_COUNT] = {
    [EG__VECMATH_EXP] = 1.0,     [EG__VECMATH_LOG] = 1.0,  [EG__VECMATH_TANH] = 2.0,
    [EG__VECMATH_SIGMOID] = 2.5, [EG__VECMATH_GELU] = 8.0, [EG__VECMATH_SOFTPLUS] = 2.0,
};

/* The fast variants' bounds per level (baseline, AVX2, AVX-512), documented in vecmath.h: ulp
 * where |exact| >= ulp_floor, absolute error below it (the exact functions: no floor). */
static const double fast_max_ulp[EG__VECMATH_COUNT][EG__CPU_LEVEL_COUNT] = {
    [EG__VECMATH_EXP_FAST] = {44, 47, 47},
    [EG__VECMATH_TANH_FAST] = {14, 14, 14},
    [EG__VECMATH_SIGMOID_FAST] = {44, 44, 44},
    [EG__VECMATH_GELU_FAST] = {78, 70, 70},
};
static const double ulp_floor[EG__VECMATH_COUNT] = {
    [EG__VECMATH_EXP_FAST] = 0x1p-125,
    [EG__VECMATH_SIGMOID_FAST] = 0x1p-125,
    [EG__VECMATH_GELU_FAST] = 0x1p-4,
};
static const double max_abs[EG__VECMATH_COUNT][EG__CPU_LEVEL_COUNT] = {
    [EG__VECMATH_EXP_FAST] = {1.2e-38, 1.2e-38, 1.2e-38}, /* e^x flushed, x < -87.328125 */
    [EG__VECMATH_SIGMOID_FAST] = {3e-39, 3e-39, 3e-39},
    [EG__VECMATH_GELU_FAST] = {2.2e-6, 2.2e-6, 2.2e-6},
};

static bool is_fast(int fn) {
    return fn >= EG__VECMATH_EXP_FAST;
}

static double bound_ulp(int fn, int level) {
    return is_fast(fn) ? fast_max_ulp[fn][level] : max_ulp[fn];
}

static double reference(eg__vecmath_fn fn, double x) {
    switch (fn) {
    case EG__VECMATH_EXP_FAST:
        return reference(EG__VECMATH_EXP, x);
    case EG__VECMATH_TANH_FAST:
        return reference(EG__VECMATH_TANH, x);
    case EG__VECMATH_SIGMOID_FAST:
        return reference(EG__VECMATH_SIGMOID, x);
    case EG__VECMATH_GELU_FAST:
        return reference(EG__VECMATH_GELU, x);
    case EG__VECMATH_EXP:
        return exp(x);
    case EG__VECMATH_LOG:
        return log(x);
    case EG__VECMATH_TANH:
        return tanh(x);
    case EG__VECMATH_SIGMOID:
        return x >= 0 ? 1 / (1 + exp(-x)) : exp(x) / (1 + exp(x));
    case EG__VECMATH_GELU:
        return isinf(x) ? (x > 0 ? x : 0) : 0.5 * x * erfc(-x * M_SQRT1_2);
    case EG__VECMATH_SOFTPLUS:
        return (x > 0 ? x : 0) + log1p(exp(-fabs(x)));
    default:
        return NAN;
    }
}

/* |y - exact| in units of the last place of the f32 result nearest to exact. */
static double ulp_error(float y, double exact) {
    if (isnan(exact)) return isnan(y) ? 0 : INFINITY;
    if (isnan(y)) return INFINITY;
    float rounded = (float)exact;
    if (isinf(rounded) || isinf(y)) return rounded == y ? 0 : INFINITY;
    int e;
    frexp(exact, &e);
    double ulp = ldexp(1.0, e - 24 < -149 ? -149 : e - 24);
    return fabs((double)y - exact) / ulp;
}

/* An error measured on one input: in ulp (the ulp region), absolute (below the floor), and
 * relative (the ulp region; reported only). */
typedef struct error_sample {
    double ulp, abs, rel;
} error_sample;

static error_sample measure(int fn, float y, double exact) {
    error_sample e = {0, 0, 0};
    if (!isnan(exact) && !isinf(exact) && fabs(exact) < ulp_floor[fn]) {
        e.abs = isnan(y) ? INFINITY : fabs((double)y - exact);
        return e;
    }
    e.ulp = ulp_error(y, exact);
    if (exact != 0 && isfinite(exact) && isfinite(y)) e.rel = fabs((double)y - exact) / fabs(exact);
    return e;
}

/* Whether e is within fn's bounds at level (NaN errors are not). */
static bool within(int fn, int level, error_sample e) {
    return e.ulp <= bound_ulp(fn, level) && e.abs <= (is_fast(fn) ? max_abs[fn][level] : 0);
}

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint64_t sweep_stride(void) {
    const char *all = getenv("EG_VECMATH_SWEEP");
    if (all && strcmp(all, "all") == 0) return 1;
    const char *stride = getenv("EG_VECMATH_STRIDE");
    return stride && atoi(stride) > 0 ? (uint64_t)atoi(stride) : 1009;
}

enum { CHUNK = 1 << 16 };

enum { LEVELS = EG__CPU_LEVEL_COUNT };

typedef struct sweep_result {
    double worst_ulp[LEVELS]; /* per level: baseline, AVX2, AVX-512 */
    float worst_input[LEVELS];
    double worst_abs[LEVELS], worst_rel[LEVELS]; /* below the floor; relative in the ulp region */
    float worst_abs_input[LEVELS];
    uint64_t samples;
    uint64_t differing_paths; /* baseline against AVX2 bits (FMA): reported only */
    uint64_t wide_differs;    /* AVX2 against AVX-512 bits: must be 0 */
    float wide_first;         /* the first input where they differ */
} sweep_result;

/* Every level on the same inputs. */
static sweep_result sweep(eg__vecmath_fn fn, uint64_t stride) {
    static float inputs[CHUNK], outputs[LEVELS][CHUNK];
    sweep_result result;
    memset(&result, 0, sizeof result);
    uint64_t next = 0;
    while (next < (1ull << 32)) {
        int n = 0;
        for (; n < CHUNK && next < (1ull << 32); next += stride)
            inputs[n++] = from_bits((uint32_t)next);
        for (int level = 0; level < LEVELS; level++)
            eg__vecmath_f32_at((eg__cpu_level)level, fn, n, outputs[level], inputs);
        for (int i = 0; i < n; i++) {
            double exact = reference(fn, inputs[i]);
            for (int level = 0; level < LEVELS; level++) {
                error_sample error = measure(fn, outputs[level][i], exact);
                if (!(error.ulp <= result.worst_ulp[level])) {
                    result.worst_ulp[level] = error.ulp;
                    result.worst_input[level] = inputs[i];
                }
                if (!(error.abs <= result.worst_abs[level])) {
                    result.worst_abs[level] = error.abs;
                    result.worst_abs_input[level] = inputs[i];
                }
                if (error.rel > result.worst_rel[level]) result.worst_rel[level] = error.rel;
            }
            result.differing_paths += memcmp(&outputs[0][i], &outputs[1][i], sizeof(float)) != 0;
            if (memcmp(&outputs[EG__CPU_AVX2][i], &outputs[EG__CPU_AVX512][i], sizeof(float))) {
                if (!result.wide_differs) result.wide_first = inputs[i];
                result.wide_differs++;
            }
        }
        result.samples += (uint64_t)n;
    }
    return result;
}

static void check_function(eg__vecmath_fn fn) {
    const char *only = getenv("EG_VECMATH_ONLY"); /* e.g. EG_VECMATH_ONLY=exp */
    if (only && strcmp(only, eg__vecmath_name(fn)) != 0) skip();
    sweep_result r = sweep(fn, sweep_stride());
    for (int level = 0; level < LEVELS; level++) {
        printf("%-8s %-8s max error %.3f ulp at x = %a (%.9g), %llu inputs\n", eg__vecmath_name(fn),
               eg__cpu_level_name((eg__cpu_level)level), r.worst_ulp[level],
               (double)r.worst_input[level], (double)r.worst_input[level],
               (unsigned long long)r.samples);
        if (is_fast(fn))
            printf("%-8s %-8s max relative error %.3g where |exact| >= %g; max absolute error "
                   "%.3g below it, at x = %a\n",
                   eg__vecmath_name(fn), eg__cpu_level_name((eg__cpu_level)level),
                   r.worst_rel[level], ulp_floor[fn], r.worst_abs[level],
                   (double)r.worst_abs_input[level]);
    }
    printf("%-8s baseline and avx2 bits differ on %llu inputs (%s)\n", eg__vecmath_name(fn),
           (unsigned long long)r.differing_paths,
           eg__cpu_has_avx2_fma() ? "FMA on the AVX2 path" : "no AVX2: both ran the baseline");
    printf("%-8s avx2 and avx512 bits differ on %llu inputs (%s)\n", eg__vecmath_name(fn),
           (unsigned long long)r.wide_differs,
           eg__cpu_has_avx512() ? "both ran" : "no AVX-512: both ran the best level below");
    if (r.wide_differs)
        printf("%-8s first input where they differ: %a\n", eg__vecmath_name(fn),
               (double)r.wide_first);
    for (int level = 0; level < LEVELS; level++)
        assert_true(within(fn, level, (error_sample){r.worst_ulp[level], r.worst_abs[level], 0}));
    assert_true(r.wide_differs == 0);
}

static void test_exp(void **state) {
    (void)state, check_function(EG__VECMATH_EXP);
}
static void test_log(void **state) {
    (void)state, check_function(EG__VECMATH_LOG);
}
static void test_tanh(void **state) {
    (void)state, check_function(EG__VECMATH_TANH);
}
static void test_sigmoid(void **state) {
    (void)state, check_function(EG__VECMATH_SIGMOID);
}
static void test_gelu(void **state) {
    (void)state, check_function(EG__VECMATH_GELU);
}
static void test_softplus(void **state) {
    (void)state, check_function(EG__VECMATH_SOFTPLUS);
}
static void test_exp_fast(void **state) {
    (void)state, check_function(EG__VECMATH_EXP_FAST);
}
static void test_tanh_fast(void **state) {
    (void)state, check_function(EG__VECMATH_TANH_FAST);
}
static void test_sigmoid_fast(void **state) {
    (void)state, check_function(EG__VECMATH_SIGMOID_FAST);
}
static void test_gelu_fast(void **state) {
    (void)state, check_function(EG__VECMATH_GELU_FAST);
}

/* Dense sweeps where the functions change formula or are most used: every 127th f32 in [-20, 20]
 */
static void test_dense_central_region(void **state) {
    (void)state;
    static float inputs[CHUNK], outputs[CHUNK];
    for (int level = 0; level < LEVELS; level++)
        for (int fn = 0; fn < EG__VECMATH_COUNT; fn++) {
            error_sample worst = {0, 0, 0};
            for (int sign = 0; sign < 2; sign++) {
                uint32_t first = sign ? 0x80000000u : 0, last = first + 0x41a00000u; /* 20.0f */
                for (uint64_t u = first; u <= last;) {
                    int n = 0;
                    for (; n < CHUNK && u <= last; u += 127) inputs[n++] = from_bits((uint32_t)u);
                    eg__vecmath_f32_at((eg__cpu_level)level, fn, n, outputs, inputs);
                    for (int i = 0; i < n; i++) {
                        error_sample e = measure(fn, outputs[i], reference(fn, inputs[i]));
                        worst.ulp = e.ulp > worst.ulp || isnan(e.ulp) ? e.ulp : worst.ulp;
                        worst.abs = e.abs > worst.abs || isnan(e.abs) ? e.abs : worst.abs;
                        worst.rel = e.rel > worst.rel ? e.rel : worst.rel;
                    }
                }
            }
            printf("%-8s %-8s dense [-20, 20]: max error %.3f ulp", eg__vecmath_name(fn),
                   eg__cpu_level_name((eg__cpu_level)level), worst.ulp);
            if (is_fast(fn))
                printf(" (relative %.3g), absolute %.3g below %g", worst.rel, worst.abs,
                       ulp_floor[fn]);
            printf("\n");
            assert_true(within(fn, level, worst));
        }
}

static void test_special_values(void **state) {
    (void)state;
    const float in[] = {0.0f,     -0.0f,   INFINITY, -INFINITY, NAN,       FLT_MIN,
                        -FLT_MIN, FLT_MAX, -FLT_MAX, 0x1p-149f, -0x1p-149f};
    enum { N = sizeof in / sizeof in[0] };
    for (int level = 0; level < LEVELS; level++) {
        for (int fn = 0; fn < EG__VECMATH_COUNT; fn++) {
            float out[N];
            eg__vecmath_f32_at((eg__cpu_level)level, fn, N, out, in);
            for (int i = 0; i < N; i++) {
                double exact = reference(fn, in[i]);
                bool ok = within(fn, level, measure(fn, out[i], exact));
                if (!ok)
                    printf("%s %s(%a) = %a, expected %a\n",
                           eg__cpu_level_name((eg__cpu_level)level), eg__vecmath_name(fn),
                           (double)in[i], (double)out[i], exact);
                assert_true(ok);
            }
        }
        float zeros[2] = {0.0f, -0.0f}, out[2];
        eg__vecmath_f32_at((eg__cpu_level)level, EG__VECMATH_TANH, 2, out, zeros);
        assert_true(!signbit(out[0]) && signbit(out[1]));
        eg__vecmath_f32_at((eg__cpu_level)level, EG__VECMATH_GELU, 2, out, zeros);
        assert_true(!signbit(out[0]) && signbit(out[1]));
        eg__vecmath_f32_at((eg__cpu_level)level, EG__VECMATH_TANH_FAST, 2, out, zeros);
        assert_true(!signbit(out[0]) && signbit(out[1]));
        /* saturation: inf and 0, +-1, 0 and 1; never NaN from a number */
        const float far[] = {89.0f, -89.0f, 1e30f, -1e30f};
        float y[4];
        eg__vecmath_f32_at((eg__cpu_level)level, EG__VECMATH_EXP_FAST, 4, y, far);
        assert_true(isinf(y[0]) && y[0] > 0 && y[1] == 0 && isinf(y[2]) && y[3] == 0);
        eg__vecmath_f32_at((eg__cpu_level)level, EG__VECMATH_TANH_FAST, 4, y, far);
        assert_true(y[0] == 1 && y[1] == -1 && y[2] == 1 && y[3] == -1);
        eg__vecmath_f32_at((eg__cpu_level)level, EG__VECMATH_SIGMOID_FAST, 4, y, far);
        assert_true(y[0] == 1 && y[1] >= 0 && y[1] < 0x1p-126f && y[2] == 1 && y[3] == 0);
        eg__vecmath_f32_at((eg__cpu_level)level, EG__VECMATH_GELU_FAST, 4, y, far);
        assert_true(y[0] == 89.0f && y[1] == 0 && y[2] == 1e30f && y[3] == 0);
    }
}

/* At each level, every element's bits are those of a one-element call at that level: whatever
 * the array's length (tails of 0 to 15 past the last whole vector), alignment, the element's
 * position (vector body or padded tail) or the stride, and whatever its neighbours (every 7th
 * element is beyond +-87 and one is NaN, which send their whole vector off the FMA exp's fast
 * path for |x| < 87). (The baseline's bits differ from the others': AVX2 and AVX-512 use FMA.) */
static void test_position_alignment_strides(void **state) {
    (void)state;
    enum { MAX = 80 };
    float data[MAX + 8], out[MAX + 8], single[MAX + 8];
    uint32_t seed = 12345;
    for (int i = 0; i < MAX + 8; i++) {
        seed = seed * 1664525u + 1013904223u;
        data[i] = ((float)(seed >> 8) / (float)(1 << 24) - 0.5f) * 40.0f;
        if (i % 7 == 3) data[i] = data[i] < 0 ? data[i] - 87.5f : data[i] + 87.5f;
    }
    data[11] = NAN;
    eg__cpu_level original = eg__cpu_active_level();
    for (int level = 0; level < LEVELS; level++) {
        eg__cpu_set_level((eg__cpu_level)level); /* for eg__vecmath_f32_strided */
        for (int fn = 0; fn < EG__VECMATH_COUNT; fn++) {
            for (int i = 0; i < MAX + 8; i++)
                eg__vecmath_f32_at(level, fn, 1, &single[i], &data[i]);
            for (int offset = 0; offset < 8; offset++)
                for (int n = 0; n <= MAX; n++) {
                    eg__vecmath_f32_at(level, fn, n, out + offset, data + offset);
                    assert_memory_equal(out + offset, single + offset, sizeof(float) * (size_t)n);
                }
            /* in place */
            memcpy(out, data, sizeof data);
            eg__vecmath_f32_at(level, fn, MAX, out, out);
            assert_memory_equal(out, single, sizeof(float) * MAX);
            /* strided: every other element, and a broadcast input */
            float strided_out[2 * MAX];
            eg__vecmath_f32_strided(fn, MAX / 2, (char *)strided_out, 2 * sizeof(float),
                                    (const char *)data, 2 * sizeof(float));
            for (int i = 0; i < MAX / 2; i++)
                assert_memory_equal(&strided_out[2 * i], &single[2 * i], sizeof(float));
            eg__vecmath_f32_strided(fn, 300, (char *)strided_out, 0, (const char *)&data[3], 0);
            assert_memory_equal(&strided_out[0], &single[3], sizeof(float));
        }
    }
    eg__cpu_set_level(original);
}

static void test_cpu_level(void **state) {
    (void)state;
    eg__cpu_level original = eg__cpu_active_level();
    assert_int_equal(eg__cpu_set_level(EG__CPU_BASELINE), original);
    assert_int_equal(eg__cpu_active_level(), EG__CPU_BASELINE);
    eg__cpu_set_level(EG__CPU_AVX2);
    assert_int_equal(eg__cpu_active_level(),
                     eg__cpu_has_avx2_fma() ? EG__CPU_AVX2 : EG__CPU_BASELINE);
    eg__cpu_set_level(EG__CPU_AVX512);
    assert_int_equal(eg__cpu_active_level(), eg__cpu_best_level());
    eg__cpu_set_level(original);
    const char *env = getenv("EG_CPU");
    printf("EG_CPU=%s: level %s (avx2+fma %s, avx512 %s, f16c %s)\n", env ? env : "(unset)",
           eg__cpu_level_name(original), eg__cpu_has_avx2_fma() ? "yes" : "no",
           eg__cpu_has_avx512() ? "yes" : "no", eg__cpu_has_f16c() ? "yes" : "no");
    if (env && strcmp(env, "baseline") == 0) assert_int_equal(original, EG__CPU_BASELINE);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_level),
        cmocka_unit_test(test_special_values),
        cmocka_unit_test(test_position_alignment_strides),
        cmocka_unit_test(test_exp),
        cmocka_unit_test(test_log),
        cmocka_unit_test(test_tanh),
        cmocka_unit_test(test_sigmoid),
        cmocka_unit_test(test_gelu),
        cmocka_unit_test(test_softplus),
        cmocka_unit_test(test_exp_fast),
        cmocka_unit_test(test_tanh_fast),
        cmocka_unit_test(test_sigmoid_fast),
        cmocka_unit_test(test_gelu_fast),
        cmocka_unit_test(test_dense_central_region),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
