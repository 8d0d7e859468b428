/* Tensors: dtypes, f16/bf16 conversions against hand-worked bit patterns, creation functions,
 * item/get, the printer, random numbers, and views (geometry, storage sharing and aliasing). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu_features.h"
#include "eagle.h"
#include "test_util.h"

/* ---- helpers ---------------------------------------------------------------------------- */

static float f32_bits(uint32_t bits) {
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static uint32_t bits_f32(float f) {
    uint32_t bits;
    memcpy(&bits, &f, 4);
    return bits;
}

static double get2(const eg_tensor *t, int64_t i, int64_t j) {
    int64_t index[2] = {i, j};
    return eg_tensor_get(t, index);
}

static double get1(const eg_tensor *t, int64_t i) {
    return eg_tensor_get(t, &i);
}

/* Every element of a f32 tensor in row-major order equals want[]. */
static void assert_f32_values(const eg_tensor *t, const float *want, int64_t n) {
    assert_int_equal(eg_tensor_n_elems(t), n);
    float *got = malloc((size_t)(n ? n : 1) * sizeof *got);
    assert_non_null(got);
    assert_int_equal(eg_tensor_copy_to_host(t, got, (size_t)n * sizeof *got), EG_OK);
    for (int64_t i = 0; i < n; i++) {
        if (got[i] != want[i])
            print_error("element %lld: %g != %g\n", (long long)i, got[i], want[i]);
        assert_true(got[i] == want[i]);
    }
    free(got);
}

/* ---- dtypes ----------------------------------------------------------------------------- */

static void test_dtype_sizes_and_names(void **state) {
    (void)state;
    static const struct {
        eg_dtype dtype;
        size_t size;
        const char *name;
        bool is_float;
    } table[] = {
        {EG_DTYPE_F32, 4, "f32", true},  {EG_DTYPE_F64, 8, "f64", true},
        {EG_DTYPE_F16, 2, "f16", true},  {EG_DTYPE_BF16, 2, "bf16", true},
        {EG_DTYPE_I32, 4, "i32", false}, {EG_DTYPE_I64, 8, "i64", false},
        {EG_DTYPE_U8, 1, "u8", false},   {EG_DTYPE_BOOL, 1, "bool", false},
        {EG_DTYPE_I8, 1, "i8", false},
    };
    assert_int_equal(sizeof table / sizeof table[0], EG_DTYPE_COUNT);
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        assert_int_equal(eg_dtype_size(table[i].dtype), table[i].size);
        assert_string_equal(eg_dtype_name(table[i].dtype), table[i].name);
        assert_int_equal(eg_dtype_is_float(table[i].dtype), table[i].is_float);
        /* a tensor of that dtype reports it */
        int64_t shape[1] = {3};
        eg_tensor *t = eg_zeros(table[i].dtype, 1, shape);
        assert_non_null(t);
        assert_int_equal(eg_tensor_dtype(t), table[i].dtype);
    }
    assert_int_equal(eg_dtype_size(EG_DTYPE_COUNT), 0);
    assert_int_equal(eg_dtype_size((eg_dtype)-1), 0);
    assert_string_equal(eg_dtype_name(EG_DTYPE_COUNT), "invalid");
    assert_false(eg_dtype_is_float(EG_DTYPE_COUNT));
    /* creation with an invalid dtype is an error, not a crash */
    assert_null(eg_zeros(EG_DTYPE_COUNT, 0, NULL));
    expect_error(EG_ERR_DTYPE);
}

/* ---- f16 / bf16 ------------------------------------------------------------------------- */

typedef struct conversion_case {
    float value;
    uint16_t bits;
} conversion_case;

/* Hand-worked IEEE binary16 encodings (1 sign, 5 exponent bits with bias 15, 10 mantissa bits). */
static const conversion_case f16_cases[] = {
    {0.0f, 0x0000},
    {-0.0f, 0x8000},
    {1.0f, 0x3C00},
    {-2.0f, 0xC000},
    {0.5f, 0x3800},
    {65504.0f, 0x7BFF},                       /* largest finite */
    {65519.0f, 0x7BFF},                       /* below the midpoint to 65536: stays finite */
    {65520.0f, 0x7C00},                       /* the midpoint: ties to even rounds up to inf */
    {1e6f, 0x7C00},                           /* overflow */
    {0x1.0p-14f, 0x0400},                     /* smallest normal */
    {0x1.0p-24f, 0x0001},                     /* smallest subnormal */
    {0x3FFp-24f, 0x03FF},                     /* largest subnormal */
    {0x1.0p-25f, 0x0000},                     /* half the smallest subnormal: tie to even (0) */
    {0x1.8p-24f, 0x0002},                     /* 1.5 x smallest: tie to even (2) */
    {0x1.000002p-25f, 0x0001},                /* just above the half: rounds up */
    {0x1.0p-26f, 0x0000},                     /* underflow */
    {1.0f + 0x1.0p-11f, 0x3C00},              /* tie between 0x3C00 and 0x3C01: even */
    {1.0f + 0x1.8p-10f, 0x3C02},              /* tie between 0x3C01 and 0x3C02: even */
    {1.0f + 0x1.0p-11f + 0x1.0p-20f, 0x3C01}, /* above the tie */
    {0x1.FFFp-1f, 0x3C00},                    /* rounds up into the next binade */
    {INFINITY, 0x7C00},
    {-INFINITY, 0xFC00},
};

static void check_f16_nan(uint16_t h) {
    assert_int_equal(h & 0x7C00, 0x7C00);
    assert_int_not_equal(h & 0x03FF, 0);
}

static void test_f16_conversions(void **state) {
    (void)state;
    enum { N = sizeof f16_cases / sizeof f16_cases[0] };
    float src[N + 2];
    uint16_t dst[N + 2];
    for (int i = 0; i < N; i++) src[i] = f16_cases[i].value;
    src[N] = NAN;
    src[N + 1] = f32_bits(0x7F800001u); /* a signalling NaN with only the lowest bit set */
    /* the whole array (vector path when the CPU has F16C) */
    eg_f32_to_f16(src, dst, N + 2);
    for (int i = 0; i < N; i++) {
        if (dst[i] != f16_cases[i].bits)
            print_error("f16 case %d (%a): 0x%04X != 0x%04X\n", i, (double)src[i], dst[i],
                        f16_cases[i].bits);
        assert_int_equal(dst[i], f16_cases[i].bits);
    }
    check_f16_nan(dst[N]);
    check_f16_nan(dst[N + 1]);
    /* one at a time (scalar path) */
    for (int i = 0; i < N + 2; i++) {
        uint16_t one;
        eg_f32_to_f16(&src[i], &one, 1);
        if (i < N)
            assert_int_equal(one, f16_cases[i].bits);
        else
            check_f16_nan(one);
    }
    /* back to f32: every case that was exact comes back exactly */
    uint16_t halves[] = {0x3C00, 0x7BFF, 0x0001, 0x03FF, 0x0400, 0x8000, 0xC000,
                         0x7C00, 0xFC00, 0x3555, 0x7E00, 0x7C01, 0x0000, 0x3800};
    const float want[] = {1.0f,     65504.0f,  0x1.0p-24f,  0x3FFp-24f, 0x1.0p-14f, -0.0f, -2.0f,
                          INFINITY, -INFINITY, 0x1.554p-2f, NAN,        NAN,        0.0f,  0.5f};
    enum { M = sizeof halves / sizeof halves[0] };
    float back[M];
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 0) {
            eg_f16_to_f32(halves, back, M);
        } else {
            for (int i = 0; i < M; i++) eg_f16_to_f32(&halves[i], &back[i], 1);
        }
        for (int i = 0; i < M; i++) {
            if (isnan(want[i])) {
                assert_true(isnan(back[i]));
            } else {
                assert_int_equal(bits_f32(back[i]), bits_f32(want[i]));
            }
        }
    }
    /* every finite half survives a round trip bit for bit */
    static uint16_t all[0x10000];
    static float wide[0x10000];
    static uint16_t again[0x10000];
    for (uint32_t i = 0; i < 0x10000; i++) all[i] = (uint16_t)i;
    eg_f16_to_f32(all, wide, 0x10000);
    eg_f32_to_f16(wide, again, 0x10000);
    for (uint32_t i = 0; i < 0x10000; i++) {
        if ((i & 0x7C00) == 0x7C00 && (i & 0x3FF)) {
            assert_true(isnan(wide[i]));
            check_f16_nan(again[i]);
        } else {
            assert_int_equal(again[i], i);
        }
    }
    eg_f32_to_f16(src, dst, 0); /* n == 0 is allowed */
}

/* f32 -> bf16 as the format defines it: round to nearest even, NaN quieted (top payload kept). */
static uint16_t bf16_reference(uint32_t x) {
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
    uint32_t lower = x & 0xffffu, upper = x >> 16;
    if (lower > 0x8000u || (lower == 0x8000u && (upper & 1u))) upper++;
    return (uint16_t)upper;
}

/* The vectorized conversion on every dispatch level the CPU has against the reference, on a
 * sweep of bit patterns (every 4099th, a prime, so every exponent and rounding case shows up)
 * in blocks of odd length, so that each level's vector loop and its tail both run. */
static void test_bf16_conversion_levels(void **state) {
    (void)state;
    enum { BLOCK = 1031 };
    static float src[BLOCK];
    static uint16_t dst[BLOCK];
    eg__cpu_level original = eg__cpu_active_level();
    for (int level = 0; level < EG__CPU_LEVEL_COUNT; level++) {
        eg__cpu_set_level((eg__cpu_level)level);
        uint64_t pattern = 0;
        while (pattern <= 0xffffffffu) {
            size_t n = 0;
            for (; n < BLOCK && pattern <= 0xffffffffu; n++, pattern += 4099) {
                uint32_t bits = (uint32_t)pattern;
                memcpy(&src[n], &bits, sizeof bits);
            }
            eg_f32_to_bf16(src, dst, n);
            for (size_t i = 0; i < n; i++) {
                uint32_t bits;
                memcpy(&bits, &src[i], sizeof bits);
                if (dst[i] != bf16_reference(bits))
                    fail_msg("level %s: 0x%08X -> 0x%04X, want 0x%04X",
                             eg__cpu_level_name((eg__cpu_level)level), bits, dst[i],
                             bf16_reference(bits));
            }
        }
    }
    eg__cpu_set_level(original);
}

static void test_bf16_conversions(void **state) {
    (void)state;
    static const conversion_case cases[] = {
        {1.0f, 0x3F80},
        {-1.0f, 0xBF80},
        {0.0f, 0x0000},
        {-0.0f, 0x8000},
        {2.0f, 0x4000},
        {1.0f + 0x1.0p-8f, 0x3F80},              /* tie: even */
        {1.0f + 0x1.8p-7f, 0x3F82},              /* tie between 0x3F81 and 0x3F82: even */
        {1.0f + 0x1.0p-8f + 0x1.0p-20f, 0x3F81}, /* above the tie */
        {1.0f + 0x1.0p-9f, 0x3F80},              /* below the tie */
        {3.140625f, 0x4049},                     /* exactly representable */
        {0x1.FFFFFEp127f, 0x7F80},               /* FLT_MAX rounds to inf */
        {INFINITY, 0x7F80},
        {-INFINITY, 0xFF80},
        {0x1.0p-133f, 0x0001}, /* f32 subnormal, exact in bf16 */
    };
    enum { N = sizeof cases / sizeof cases[0] };
    float src[N + 2];
    uint16_t dst[N + 2];
    for (int i = 0; i < N; i++) src[i] = cases[i].value;
    src[N] = NAN;
    src[N + 1] = f32_bits(0x7F800001u); /* truncating this NaN would give inf */
    eg_f32_to_bf16(src, dst, N + 2);
    for (int i = 0; i < N; i++) {
        if (dst[i] != cases[i].bits)
            print_error("bf16 case %d: 0x%04X != 0x%04X\n", i, dst[i], cases[i].bits);
        assert_int_equal(dst[i], cases[i].bits);
    }
    for (int i = N; i < N + 2; i++) {
        assert_int_equal(dst[i] & 0x7F80, 0x7F80);
        assert_int_not_equal(dst[i] & 0x007F, 0);
    }
    float back[N + 2];
    eg_bf16_to_f32(dst, back, N + 2);
    assert_true(back[0] == 1.0f);
    assert_true(back[9] == 3.140625f);
    assert_true(isinf(back[10]));
    assert_true(isnan(back[N]) && isnan(back[N + 1]));
    /* every bf16 value is exact in f32: the round trip is the identity (NaNs stay NaN) */
    for (uint32_t i = 0; i < 0x10000; i += 7) {
        uint16_t h = (uint16_t)i, h2;
        float f;
        eg_bf16_to_f32(&h, &f, 1);
        eg_f32_to_bf16(&f, &h2, 1);
        if (isnan(f))
            assert_true((h2 & 0x7F80) == 0x7F80 && (h2 & 0x7F));
        else
            assert_int_equal(h2, h);
    }
}

/* Half tensors store and read through the same conversions. */
static void test_half_tensors(void **state) {
    (void)state;
    int64_t shape[1] = {4};
    eg_tensor *h = eg_full(EG_DTYPE_F16, 1, shape, 65520.0);
    assert_non_null(h);
    assert_int_equal(((uint16_t *)eg_tensor_data(h))[3], 0x7C00);
    eg_tensor *one = eg_ones(EG_DTYPE_F16, 1, shape);
    assert_int_equal(((uint16_t *)eg_tensor_data(one))[0], 0x3C00);
    assert_true(eg_item(eg_slice(one, 0, 0, 1, 1)) == 1.0);
    eg_tensor *b = eg_full(EG_DTYPE_BF16, 1, shape, 1.0 + 0x1.8p-7);
    assert_int_equal(((uint16_t *)eg_tensor_data(b))[2], 0x3F82);
    assert_true(get1(b, 2) == 1.0 + 0x1.0p-6);
}

/* ---- creation --------------------------------------------------------------------------- */

static void test_creation(void **state) {
    (void)state;
    int64_t shape[2] = {2, 3};
    eg_tensor *z = eg_zeros(EG_DTYPE_F32, 2, shape);
    assert_non_null(z);
    assert_int_equal(eg_tensor_n_dims(z), 2);
    assert_int_equal(eg_tensor_shape(z)[0], 2);
    assert_int_equal(eg_tensor_shape(z)[1], 3);
    assert_int_equal(eg_tensor_strides(z)[0], 3);
    assert_int_equal(eg_tensor_strides(z)[1], 1);
    assert_int_equal(eg_tensor_n_elems(z), 6);
    assert_true(eg_tensor_is_contiguous(z));
    assert_ptr_equal(eg_tensor_device(z), eg_device_cpu());
    assert_string_equal(eg_device_name(eg_tensor_device(z)), "cpu");
    assert_int_equal(eg_tensor_dim(z, -1), 3);
    assert_int_equal(eg_tensor_dim(z, 0), 2);
    assert_int_equal(eg_tensor_dim(z, 2), -1);
    expect_error(EG_ERR_AXIS);
    char buf[64];
    assert_string_equal(eg_tensor_shape_string(z, buf, sizeof buf), "(2, 3)");
    static const float zeros[6] = {0};
    assert_f32_values(z, zeros, 6);

    eg_tensor *o = eg_ones(EG_DTYPE_I32, 2, shape);
    for (int i = 0; i < 6; i++) assert_int_equal(((int32_t *)eg_tensor_data(o))[i], 1);
    eg_tensor *f = eg_full(EG_DTYPE_F64, 2, shape, -2.5);
    for (int i = 0; i < 6; i++) assert_true(((double *)eg_tensor_data(f))[i] == -2.5);
    eg_tensor *fl = eg_full_like(f, 7.0);
    assert_int_equal(eg_tensor_dtype(fl), EG_DTYPE_F64);
    assert_int_equal(eg_tensor_n_dims(fl), 2);
    assert_int_equal(eg_tensor_shape(fl)[1], 3);
    assert_false(eg_tensor_shares_storage(fl, f));
    assert_true(get2(fl, 1, 2) == 7.0);
    eg_tensor *bools = eg_full(EG_DTYPE_BOOL, 1, shape, 3.0);
    assert_int_equal(((uint8_t *)eg_tensor_data(bools))[1], 1);
    eg_tensor *bytes = eg_full(EG_DTYPE_U8, 1, shape, 300.0); /* saturates */
    assert_int_equal(((uint8_t *)eg_tensor_data(bytes))[0], 255);

    eg_tensor *s = eg_scalar(EG_DTYPE_F32, 3.5);
    assert_int_equal(eg_tensor_n_dims(s), 0);
    assert_int_equal(eg_tensor_n_elems(s), 1);
    assert_true(eg_item(s) == 3.5);
    assert_true(eg_tensor_get(s, NULL) == 3.5);
    assert_string_equal(eg_tensor_shape_string(s, buf, sizeof buf), "()");

    /* empty shapes are fine */
    int64_t empty_shape[2] = {0, 4};
    eg_tensor *e = eg_zeros(EG_DTYPE_F32, 2, empty_shape);
    assert_non_null(e);
    assert_int_equal(eg_tensor_n_elems(e), 0);
    /* negative sizes, too many dims and NULL shapes are errors */
    int64_t bad[1] = {-1};
    assert_null(eg_zeros(EG_DTYPE_F32, 1, bad));
    expect_error(EG_ERR_SHAPE);
    assert_null(eg_ones(EG_DTYPE_F32, EG_MAX_DIMS + 1, shape));
    expect_error(EG_ERR_SHAPE);
    assert_null(eg_full(EG_DTYPE_F32, 2, NULL, 1.0));
    expect_error(EG_ERR_SHAPE);
    assert_null(eg_full_like(NULL, 1.0));
    expect_error(EG_ERR_NULL_ARGUMENT);
}

static void test_from_data_and_get(void **state) {
    (void)state;
    const int64_t values[6] = {1, -2, 3, 4, 5, -6};
    int64_t shape[2] = {3, 2};
    eg_tensor *t = eg_tensor_from_data(values, EG_DTYPE_I64, 2, shape);
    assert_non_null(t);
    assert_int_equal(eg_tensor_dtype(t), EG_DTYPE_I64);
    /* it is a copy */
    assert_ptr_not_equal(eg_tensor_data(t), values);
    assert_memory_equal(eg_tensor_data(t), values, sizeof values);
    assert_true(get2(t, 0, 1) == -2.0);
    assert_true(get2(t, 2, 1) == -6.0);
    assert_true(get2(t, 1, 0) == 3.0);
    assert_true(isnan(get2(t, 3, 0)));
    expect_error(EG_ERR_INVALID_ARGUMENT);
    assert_true(isnan(get2(t, 0, -1)));
    expect_error(EG_ERR_INVALID_ARGUMENT);
    assert_true(isnan(eg_tensor_get(t, NULL)));
    expect_error(EG_ERR_NULL_ARGUMENT);
    /* item needs exactly one element */
    assert_true(isnan(eg_item(t)));
    expect_error(EG_ERR_SHAPE);
    assert_true(isnan(eg_item(NULL)));
    expect_error(EG_ERR_NULL_ARGUMENT);
    int64_t one_shape[3] = {1, 1, 1};
    const float v = 2.25f;
    assert_true(eg_item(eg_tensor_from_data(&v, EG_DTYPE_F32, 3, one_shape)) == 2.25);
    assert_null(eg_tensor_from_data(NULL, EG_DTYPE_F32, 3, one_shape));
    expect_error(EG_ERR_NULL_ARGUMENT);
    /* copy_to_host checks the destination size */
    int64_t small[2];
    assert_int_equal(eg_tensor_copy_to_host(t, small, sizeof small), EG_ERR_INVALID_ARGUMENT);
    eg_clear_error();
}

static void test_arange_linspace_eye(void **state) {
    (void)state;
    eg_tensor *a = eg_arange(0, 5, 1, EG_DTYPE_F32);
    const float want_a[] = {0, 1, 2, 3, 4};
    assert_int_equal(eg_tensor_n_dims(a), 1);
    assert_f32_values(a, want_a, 5);

    eg_tensor *down = eg_arange(5, 0, -1.5, EG_DTYPE_F32); /* 5, 3.5, 2, 0.5 */
    const float want_down[] = {5.0f, 3.5f, 2.0f, 0.5f};
    assert_f32_values(down, want_down, 4);

    eg_tensor *ints = eg_arange(-3, 3, 2, EG_DTYPE_I64);
    assert_int_equal(eg_tensor_n_elems(ints), 3);
    assert_int_equal(((int64_t *)eg_tensor_data(ints))[0], -3);
    assert_int_equal(((int64_t *)eg_tensor_data(ints))[2], 1);

    eg_tensor *frac = eg_arange(0, 1, 0.3, EG_DTYPE_F64); /* 0, 0.3, 0.6, 0.9 */
    assert_int_equal(eg_tensor_n_elems(frac), 4);

    /* empty: equal bounds, or a step pointing away from stop */
    eg_tensor *empty = eg_arange(2, 2, 1, EG_DTYPE_F32);
    assert_non_null(empty);
    assert_int_equal(eg_tensor_n_elems(empty), 0);
    assert_int_equal(eg_tensor_shape(empty)[0], 0);
    eg_tensor *away = eg_arange(0, 5, -1, EG_DTYPE_F32);
    assert_non_null(away);
    assert_int_equal(eg_tensor_n_elems(away), 0);
    assert_null(eg_arange(0, 5, 0, EG_DTYPE_F32));
    expect_error(EG_ERR_INVALID_ARGUMENT);
    assert_null(eg_arange(0, INFINITY, 1, EG_DTYPE_F32));
    expect_error(EG_ERR_INVALID_ARGUMENT);

    eg_tensor *l = eg_linspace(0, 1, 5, EG_DTYPE_F32);
    const float want_l[] = {0, 0.25f, 0.5f, 0.75f, 1};
    assert_f32_values(l, want_l, 5);
    eg_tensor *l_down = eg_linspace(3, -3, 4, EG_DTYPE_F64);
    assert_true(get1(l_down, 0) == 3.0 && get1(l_down, 1) == 1.0 && get1(l_down, 3) == -3.0);
    eg_tensor *l_one = eg_linspace(7, 9, 1, EG_DTYPE_F32);
    assert_int_equal(eg_tensor_n_elems(l_one), 1);
    assert_true(eg_item(l_one) == 7.0);
    eg_tensor *l_zero = eg_linspace(7, 9, 0, EG_DTYPE_F32);
    assert_non_null(l_zero);
    assert_int_equal(eg_tensor_n_elems(l_zero), 0);
    assert_null(eg_linspace(0, 1, -1, EG_DTYPE_F32));
    expect_error(EG_ERR_INVALID_ARGUMENT);

    eg_tensor *eye = eg_eye(3, EG_DTYPE_F32);
    const float want_eye[] = {1, 0, 0, 0, 1, 0, 0, 0, 1};
    assert_int_equal(eg_tensor_n_dims(eye), 2);
    assert_f32_values(eye, want_eye, 9);
    eg_tensor *eye0 = eg_eye(0, EG_DTYPE_I32);
    assert_non_null(eye0);
    assert_int_equal(eg_tensor_n_elems(eye0), 0);
    assert_null(eg_eye(-1, EG_DTYPE_F32));
    expect_error(EG_ERR_INVALID_ARGUMENT);
}

/* ---- printer ---------------------------------------------------------------------------- */

static void expect_text(const eg_tensor *t, const char *want) {
    char *text = eg_tensor_to_string(t);
    assert_non_null(text);
    if (strcmp(text, want) != 0) print_error("got:\n%s\nwant:\n%s\n", text, want);
    assert_string_equal(text, want);
    free(text);
}

static void test_print(void **state) {
    (void)state;
    const float m[4] = {1, 2, 3, 4};
    int64_t shape[2] = {2, 2};
    eg_tensor *t = eg_tensor_from_data(m, EG_DTYPE_F32, 2, shape);
    expect_text(t, "tensor([[1., 2.],\n        [3., 4.]], dtype=f32)");

    const int64_t v[3] = {1, -20, 300};
    int64_t n = 3;
    expect_text(eg_tensor_from_data(v, EG_DTYPE_I64, 1, &n), "tensor([1, -20, 300], dtype=i64)");

    /* i64 values print exactly, beyond the 53 bits a double holds */
    const int64_t large[2] = {INT64_C(9007199254740993), INT64_MIN};
    int64_t two_large = 2;
    expect_text(eg_tensor_from_data(large, EG_DTYPE_I64, 1, &two_large),
                "tensor([9007199254740993, -9223372036854775808], dtype=i64)");
    const float fractions[3] = {0.5f, -1.25f, 2.0f};
    expect_text(eg_tensor_from_data(fractions, EG_DTYPE_F32, 1, &n),
                "tensor([0.5, -1.25, 2.], dtype=f32)");
    expect_text(eg_scalar(EG_DTYPE_F64, 2.0), "tensor(2., dtype=f64)");
    const uint8_t flags[2] = {1, 0};
    int64_t two = 2;
    expect_text(eg_tensor_from_data(flags, EG_DTYPE_BOOL, 1, &two),
                "tensor([True, False], dtype=bool)");
    /* a view prints its own elements, in its own order */
    expect_text(eg_transpose(t, 0, 1), "tensor([[1., 3.],\n        [2., 4.]], dtype=f32)");
    /* 3-d: blank line between blocks, nested indentation */
    eg_tensor *cube = eg_reshape(eg_arange(0, 8, 1, EG_DTYPE_F32), 3, (int64_t[]){2, 2, 2});
    expect_text(cube, "tensor([[[0., 1.],\n         [2., 3.]],\n\n        [[4., 5.],\n"
                      "         [6., 7.]]], dtype=f32)");
    /* a view with an offset and a step */
    expect_text(eg_slice(eg_arange(0, 10, 1, EG_DTYPE_F32), 0, 2, 8, 3),
                "tensor([2., 5.], dtype=f32)");
    expect_text(eg_zeros(EG_DTYPE_F32, 2, (int64_t[]){0, 3}), "tensor([], dtype=f32)");
    /* non-finite values */
    const float odd[3] = {NAN, INFINITY, -INFINITY};
    expect_text(eg_tensor_from_data(odd, EG_DTYPE_F32, 1, &n),
                "tensor([nan, inf, -inf], dtype=f32)");

    /* a long tensor is elided with "..." and keeps the edges */
    eg_tensor *big = eg_arange(0, 2000, 1, EG_DTYPE_F32);
    char *text = eg_tensor_to_string(big);
    assert_non_null(text);
    assert_non_null(strstr(text, "..."));
    const char *head = "tensor([0., 1., 2., ..., 1997., 1998., 1999.], dtype=f32)";
    assert_string_equal(text, head);
    assert_true(strlen(text) < 200);
    free(text);
    /* 2-d elision: rows and columns */
    int64_t square[2] = {50, 40};
    eg_tensor *grid = eg_reshape(eg_arange(0, 2000, 1, EG_DTYPE_I32), 2, square);
    text = eg_tensor_to_string(grid);
    assert_non_null(text);
    assert_non_null(strstr(text, "[0, 1, 2, ..., 37, 38, 39]"));
    assert_non_null(strstr(text, "...,\n"));
    assert_non_null(strstr(text, "[1960, 1961, 1962, ..., 1997, 1998, 1999]]"));
    assert_null(strstr(text, "[120,")); /* row 3 is elided */
    free(text);
    /* 1000 elements are still printed in full */
    text = eg_tensor_to_string(eg_arange(0, 1000, 1, EG_DTYPE_I32));
    assert_null(strstr(text, "..."));
    free(text);

    /* eg_tensor_print writes the same text plus a newline */
    FILE *file = tmpfile();
    assert_non_null(file);
    assert_int_equal(eg_tensor_print(t, file), EG_OK);
    rewind(file);
    char line[128] = {0};
    size_t got = fread(line, 1, sizeof line - 1, file);
    fclose(file);
    assert_int_equal(got, strlen("tensor([[1., 2.],\n        [3., 4.]], dtype=f32)\n"));
    assert_string_equal(line, "tensor([[1., 2.],\n        [3., 4.]], dtype=f32)\n");
    assert_null(eg_tensor_to_string(NULL));
    expect_error(EG_ERR_NULL_ARGUMENT);
}

/* ---- random ----------------------------------------------------------------------------- */

static eg_tensor *uniform_with_seed(uint64_t seed, int64_t n) {
    eg_generator *g = eg_generator_new(seed);
    assert_non_null(g);
    eg_tensor *t = eg_random_uniform(g, EG_DTYPE_F32, 1, &n, -1.0, 1.0);
    eg_generator_free(g);
    assert_non_null(t);
    return t;
}

static void test_random_reproducible(void **state) {
    (void)state;
    int64_t n = 1001;
    eg_tensor *a = uniform_with_seed(42, n), *b = uniform_with_seed(42, n);
    eg_tensor *c = uniform_with_seed(43, n);
    assert_memory_equal(eg_tensor_data(a), eg_tensor_data(b), (size_t)n * 4);
    assert_memory_not_equal(eg_tensor_data(a), eg_tensor_data(c), (size_t)n * 4);
    int same = 0;
    for (int64_t i = 0; i < n; i++)
        same += ((float *)eg_tensor_data(a))[i] == ((float *)eg_tensor_data(c))[i];
    assert_true(same < 5);

    /* successive draws from one generator differ; a fresh generator repeats the sequence */
    eg_generator *g = eg_generator_new(7);
    eg_tensor *first = eg_random_normal(g, EG_DTYPE_F64, 1, &n, 0, 1);
    eg_tensor *second = eg_random_normal(g, EG_DTYPE_F64, 1, &n, 0, 1);
    assert_memory_not_equal(eg_tensor_data(first), eg_tensor_data(second), (size_t)n * 8);
    uint64_t seed1 = eg_generator_next_seed(g), seed2 = eg_generator_next_seed(g);
    assert_true(seed1 != seed2);
    eg_generator_free(g);
    g = eg_generator_new(7);
    eg_tensor *again = eg_random_normal(g, EG_DTYPE_F64, 1, &n, 0, 1);
    assert_memory_equal(eg_tensor_data(first), eg_tensor_data(again), (size_t)n * 8);
    eg_generator_free(g);

    /* the default generator (NULL) is reseeded by eg_manual_seed */
    eg_manual_seed(1234);
    eg_tensor *d1 = eg_random_uniform(NULL, EG_DTYPE_F32, 1, &n, 0, 1);
    eg_tensor *d2 = eg_random_uniform(NULL, EG_DTYPE_F32, 1, &n, 0, 1);
    eg_manual_seed(1234);
    eg_tensor *d3 = eg_random_uniform(NULL, EG_DTYPE_F32, 1, &n, 0, 1);
    assert_memory_not_equal(eg_tensor_data(d1), eg_tensor_data(d2), (size_t)n * 4);
    assert_memory_equal(eg_tensor_data(d1), eg_tensor_data(d3), (size_t)n * 4);

    /* splitting a draw differently changes nothing about the stream position semantics:
     * an odd-sized draw still advances, and the next draw differs from a fresh one */
    int64_t three = 3;
    g = eg_generator_new(99);
    eg_tensor *x = eg_random_uniform(g, EG_DTYPE_F32, 1, &three, 0, 1);
    eg_tensor *y = eg_random_uniform(g, EG_DTYPE_F32, 1, &three, 0, 1);
    assert_memory_not_equal(eg_tensor_data(x), eg_tensor_data(y), 12);
    eg_generator_free(g);
    eg_generator_free(NULL);
}

static void test_random_distributions(void **state) {
    (void)state;
    int64_t n = 100000;
    eg_generator *g = eg_generator_new(2024);
    eg_tensor *u = eg_random_uniform(g, EG_DTYPE_F32, 1, &n, 2.0, 5.0);
    const float *uf = eg_tensor_data(u);
    double sum = 0, low = 1e9, high = -1e9;
    for (int64_t i = 0; i < n; i++) {
        assert_true(uf[i] >= 2.0f && uf[i] < 5.0f);
        sum += uf[i];
        low = uf[i] < low ? uf[i] : low;
        high = uf[i] > high ? uf[i] : high;
    }
    assert_true(fabs(sum / (double)n - 3.5) < 0.02);
    assert_true(low < 2.001 && high > 4.999);

    int64_t shape[2] = {250, 400};
    eg_tensor *z = eg_random_normal(g, EG_DTYPE_F64, 2, shape, 1.5, 2.0);
    const double *zd = eg_tensor_data(z);
    double mean = 0, m2 = 0;
    for (int64_t i = 0; i < n; i++) mean += zd[i];
    mean /= (double)n;
    for (int64_t i = 0; i < n; i++) m2 += (zd[i] - mean) * (zd[i] - mean);
    double std = sqrt(m2 / (double)n);
    /* standard errors: 2/sqrt(1e5) = 0.0063 for the mean, about 0.0045 for the std */
    assert_true(fabs(mean - 1.5) < 0.03);
    assert_true(fabs(std - 2.0) < 0.03);
    /* about 68.3% within one standard deviation */
    int64_t within = 0;
    for (int64_t i = 0; i < n; i++) within += fabs(zd[i] - 1.5) < 2.0;
    assert_true(fabs((double)within / (double)n - 0.6827) < 0.01);

    /* half dtypes are drawn too; ints are refused */
    int64_t small = 64;
    eg_tensor *h = eg_random_uniform(g, EG_DTYPE_BF16, 1, &small, -1, 1);
    assert_non_null(h);
    for (int64_t i = 0; i < small; i++) assert_true(get1(h, i) >= -1.0 && get1(h, i) <= 1.0);
    assert_non_null(eg_random_normal(g, EG_DTYPE_F16, 1, &small, 0, 1));
    /* the upper bound stays open after rounding to the stored precision (f16 rounds about
     * 1 draw in 4000 of [0, 1) up to 1.0 and bf16 1 in 500, unless the generator guards it) */
    const eg_dtype halves[3] = {EG_DTYPE_F16, EG_DTYPE_BF16, EG_DTYPE_F32};
    for (int d = 0; d < 3; d++) {
        eg_tensor *draws = eg_cast(eg_random_uniform(g, halves[d], 1, &n, 0, 1), EG_DTYPE_F64);
        assert_non_null(draws);
        const double *p = eg_tensor_data(draws);
        int64_t at_high = 0, at_low = 0;
        for (int64_t i = 0; i < n; i++) {
            at_high += p[i] >= 1.0;
            at_low += p[i] == 0.0;
            assert_true(p[i] >= 0.0);
        }
        if (at_high)
            print_error("%s: %lld draws reached high\n", eg_dtype_name(halves[d]),
                        (long long)at_high);
        assert_int_equal(at_high, 0);
        assert_true(at_low < n / 100);
    }
    assert_null(eg_random_uniform(g, EG_DTYPE_I32, 1, &small, 0, 1));
    expect_error(EG_ERR_DTYPE);
    assert_null(eg_random_uniform(g, EG_DTYPE_F32, 1, &small, 1, 1));
    expect_error(EG_ERR_INVALID_ARGUMENT);
    assert_null(eg_random_normal(g, EG_DTYPE_F32, 1, &small, 0, -1));
    expect_error(EG_ERR_INVALID_ARGUMENT);
    eg_generator_free(g);
}

static void test_random_independent_of_threads(void **state) {
    (void)state;
    int original = eg_get_num_threads();
    int64_t n = 300001;
    eg_tensor *draws[2][2];
    for (int pass = 0; pass < 2; pass++) {
        assert_int_equal(eg_set_num_threads(pass + 1), EG_OK);
        assert_int_equal(eg_get_num_threads(), pass + 1);
        eg_generator *g = eg_generator_new(5);
        draws[pass][0] = eg_random_uniform(g, EG_DTYPE_F32, 1, &n, 0, 1);
        draws[pass][1] = eg_random_normal(g, EG_DTYPE_F32, 1, &n, 0, 1);
        eg_generator_free(g);
    }
    for (int k = 0; k < 2; k++)
        assert_memory_equal(eg_tensor_data(draws[0][k]), eg_tensor_data(draws[1][k]),
                            (size_t)n * 4);
    assert_int_equal(eg_set_num_threads(original), EG_OK);
}

/* ---- views ------------------------------------------------------------------------------ */

static eg_tensor *arange_2d(int64_t rows, int64_t cols) {
    int64_t shape[2] = {rows, cols};
    return eg_reshape(eg_arange(0, (double)(rows * cols), 1, EG_DTYPE_F32), 2, shape);
}

static void test_reshape(void **state) {
    (void)state;
    eg_tensor *a = arange_2d(2, 6);
    int64_t shape3[3] = {3, -1, 2};
    eg_tensor *r = eg_reshape(a, 3, shape3);
    assert_non_null(r);
    assert_int_equal(eg_tensor_shape(r)[1], 2); /* inferred */
    assert_true(eg_tensor_shares_storage(r, a));
    assert_true(eg_tensor_is_contiguous(r));
    int64_t idx[3] = {2, 1, 0};
    assert_true(eg_tensor_get(r, idx) == 10.0);

    /* reshape of a transpose cannot be a view: it copies, in the transpose's order */
    eg_tensor *t = eg_transpose(a, 0, 1); /* (6, 2) */
    assert_false(eg_tensor_is_contiguous(t));
    int64_t flat = 12;
    eg_tensor *flat_t = eg_reshape(t, 1, &flat);
    assert_non_null(flat_t);
    assert_false(eg_tensor_shares_storage(flat_t, a));
    const float want[12] = {0, 6, 1, 7, 2, 8, 3, 9, 4, 10, 5, 11};
    assert_f32_values(flat_t, want, 12);
    /* merging only the axes that stay contiguous is still a view: (6, 2) -> (6, 2, 1) */
    int64_t with_one[3] = {6, 2, 1};
    assert_true(eg_tensor_shares_storage(eg_reshape(t, 3, with_one), a));
    /* slicing rows keeps rows contiguous: (2, 6)[:, 0:4] -> (2, 2, 2) is a view */
    eg_tensor *cols = eg_slice(a, 1, 0, 4, 1);
    int64_t split[3] = {2, 2, 2};
    eg_tensor *split_view = eg_reshape(cols, 3, split);
    assert_true(eg_tensor_shares_storage(split_view, a));
    int64_t idx2[3] = {1, 1, 0};
    assert_true(eg_tensor_get(split_view, idx2) == 8.0);
    /* but flattening it is a copy */
    int64_t eight = 8;
    eg_tensor *flat_cols = eg_reshape(cols, 1, &eight);
    assert_false(eg_tensor_shares_storage(flat_cols, a));
    const float want_cols[8] = {0, 1, 2, 3, 6, 7, 8, 9};
    assert_f32_values(flat_cols, want_cols, 8);

    int64_t wrong[2] = {5, 5};
    assert_null(eg_reshape(a, 2, wrong));
    assert_int_equal(eg_last_status(), EG_ERR_SHAPE);
    assert_non_null(strstr(eg_last_error(), "reshape"));
    assert_non_null(strstr(eg_last_error(), "(2, 6)"));
    assert_non_null(strstr(eg_last_error(), "(5, 5)"));
    eg_clear_error();
    /* a 1-element tensor reshapes to 0 dims */
    eg_tensor *scalar = eg_reshape(eg_ones(EG_DTYPE_F32, 3, (int64_t[]){1, 1, 1}), 0, NULL);
    assert_int_equal(eg_tensor_n_dims(scalar), 0);
    assert_true(eg_item(scalar) == 1.0);
}

static void test_permute_transpose(void **state) {
    (void)state;
    int64_t shape[3] = {2, 3, 4};
    eg_tensor *x = eg_reshape(eg_arange(0, 24, 1, EG_DTYPE_F32), 3, shape);
    eg_tensor *p = eg_permute(x, (int[]){2, 0, 1}); /* (4, 2, 3) */
    assert_non_null(p);
    assert_true(eg_tensor_shares_storage(p, x));
    assert_int_equal(eg_tensor_shape(p)[0], 4);
    assert_int_equal(eg_tensor_shape(p)[1], 2);
    assert_int_equal(eg_tensor_shape(p)[2], 3);
    assert_int_equal(eg_tensor_strides(p)[0], 1);
    assert_int_equal(eg_tensor_strides(p)[1], 12);
    assert_int_equal(eg_tensor_strides(p)[2], 4);
    for (int64_t i = 0; i < 4; i++)
        for (int64_t j = 0; j < 2; j++)
            for (int64_t k = 0; k < 3; k++) {
                int64_t pi[3] = {i, j, k}, xi[3] = {j, k, i};
                assert_true(eg_tensor_get(p, pi) == eg_tensor_get(x, xi));
            }
    eg_tensor *neg = eg_permute(x, (int[]){-1, 0, 1});
    assert_int_equal(eg_tensor_shape(neg)[0], 4);
    eg_tensor *t = eg_transpose(x, -1, 0); /* (4, 3, 2) */
    int64_t ti[3] = {3, 1, 0}, xi[3] = {0, 1, 3};
    assert_true(eg_tensor_get(t, ti) == eg_tensor_get(x, xi));
    /* transposing twice gives the original layout back */
    eg_tensor *tt = eg_transpose(t, 0, 2);
    assert_true(eg_tensor_is_contiguous(tt));
    assert_memory_equal(eg_tensor_strides(tt), eg_tensor_strides(x), 3 * sizeof(int64_t));

    assert_null(eg_permute(x, (int[]){0, 0, 1}));
    expect_error(EG_ERR_AXIS);
    assert_null(eg_transpose(x, 0, 3));
    expect_error(EG_ERR_AXIS);
}

static void test_slice(void **state) {
    (void)state;
    eg_tensor *v = eg_arange(0, 10, 1, EG_DTYPE_F32);
    eg_tensor *s = eg_slice(v, 0, 1, 8, 3); /* 1, 4, 7 */
    const float want_s[] = {1, 4, 7};
    assert_f32_values(s, want_s, 3);
    assert_true(eg_tensor_shares_storage(s, v));
    assert_int_equal(eg_tensor_strides(s)[0], 3);
    eg_tensor *neg = eg_slice(v, 0, -8, -1, 3); /* 2:9:3 -> 2, 5, 8 */
    const float want_neg[] = {2, 5, 8};
    assert_f32_values(neg, want_neg, 3);
    eg_tensor *tail = eg_slice(v, -1, -3, 100, 1); /* clamps: 7, 8, 9 */
    const float want_tail[] = {7, 8, 9};
    assert_f32_values(tail, want_tail, 3);
    eg_tensor *none = eg_slice(v, 0, 6, 2, 1);
    assert_non_null(none);
    assert_int_equal(eg_tensor_n_elems(none), 0);
    eg_tensor *far = eg_slice(v, 0, -100, 2, 1); /* clamps to 0:2 */
    const float want_far[] = {0, 1};
    assert_f32_values(far, want_far, 2);
    /* slices of slices compose */
    eg_tensor *ss = eg_slice(eg_slice(v, 0, 1, 10, 2), 0, 1, 4, 2); /* (1,3,5,7,9)[1:4:2] = 3, 7 */
    const float want_ss[] = {3, 7};
    assert_f32_values(ss, want_ss, 2);
    /* 2-d: columns */
    eg_tensor *m = arange_2d(3, 4);
    eg_tensor *c = eg_slice(m, 1, 1, 4, 2); /* columns 1 and 3 */
    const float want_c[] = {1, 3, 5, 7, 9, 11};
    assert_f32_values(c, want_c, 6);
    assert_false(eg_tensor_is_contiguous(c));

    assert_null(eg_slice(v, 0, 0, 5, 0));
    expect_error(EG_ERR_INVALID_ARGUMENT);
    assert_null(eg_slice(v, 1, 0, 5, 1));
    expect_error(EG_ERR_AXIS);
}

static void test_broadcast_squeeze_contiguous(void **state) {
    (void)state;
    eg_tensor *row = eg_arange(0, 3, 1, EG_DTYPE_F32);
    int64_t shape[2] = {4, 3};
    eg_tensor *b = eg_broadcast_to(row, 2, shape);
    assert_non_null(b);
    assert_true(eg_tensor_shares_storage(b, row));
    assert_int_equal(eg_tensor_strides(b)[0], 0);
    assert_int_equal(eg_tensor_strides(b)[1], 1);
    assert_true(get2(b, 3, 2) == 2.0);
    int64_t column_shape[2] = {4, 1};
    eg_tensor *column = eg_reshape(eg_arange(0, 4, 1, EG_DTYPE_F32), 2, column_shape);
    eg_tensor *bc = eg_broadcast_to(column, 2, shape);
    assert_int_equal(eg_tensor_strides(bc)[1], 0);
    assert_true(get2(bc, 2, 1) == 2.0);
    int64_t bad[2] = {4, 2};
    assert_null(eg_broadcast_to(row, 2, bad));
    expect_error(EG_ERR_SHAPE);

    /* contiguous() of a broadcast materialises every row */
    eg_tensor *dense = eg_contiguous(b);
    assert_true(eg_tensor_is_contiguous(dense));
    assert_false(eg_tensor_shares_storage(dense, row));
    const float want[12] = {0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2};
    assert_f32_values(dense, want, 12);
    /* contiguous() of a contiguous tensor makes no copy */
    eg_tensor *same = eg_contiguous(row);
    assert_true(eg_tensor_shares_storage(same, row));

    eg_tensor *u = eg_unsqueeze(row, 0);
    assert_int_equal(eg_tensor_n_dims(u), 2);
    assert_int_equal(eg_tensor_shape(u)[0], 1);
    assert_true(eg_tensor_shares_storage(u, row));
    eg_tensor *u_end = eg_unsqueeze(row, -1);
    assert_int_equal(eg_tensor_shape(u_end)[1], 1);
    eg_tensor *sq = eg_squeeze(u, 0);
    assert_int_equal(eg_tensor_n_dims(sq), 1);
    assert_int_equal(eg_tensor_shape(sq)[0], 3);
    assert_true(eg_tensor_shares_storage(sq, row));
    assert_null(eg_squeeze(u, 1)); /* size 3 */
    expect_error(EG_ERR_AXIS);
    assert_null(eg_unsqueeze(row, 3));
    expect_error(EG_ERR_AXIS);
    /* squeeze of a strided view stays a view */
    eg_tensor *col = eg_slice(arange_2d(3, 4), 1, 2, 3, 1); /* (3, 1) */
    eg_tensor *col1 = eg_squeeze(col, 1);
    assert_true(eg_tensor_shares_storage(col1, col));
    const float want_col[] = {2, 6, 10};
    assert_f32_values(col1, want_col, 3);
}

static void test_view_aliasing(void **state) {
    (void)state;
    eg_tensor *base = arange_2d(3, 4);
    eg_tensor *t = eg_transpose(base, 0, 1);   /* (4, 3) */
    eg_tensor *s = eg_slice(base, 1, 1, 4, 2); /* columns 1, 3 */
    eg_tensor *r = eg_reshape(base, 1, (int64_t[]){12});
    int64_t bshape[3] = {2, 3, 4};
    eg_tensor *b = eg_broadcast_to(base, 3, bshape);
    eg_tensor *copy = eg_copy(base);
    assert_false(eg_tensor_shares_storage(copy, base));
    assert_true(eg_tensor_is_contiguous(copy));

    /* writing through the base is visible in every view */
    float *data = eg_tensor_data(base);
    data[1 * 4 + 3] = 100.0f; /* base[1, 3] */
    assert_true(get2(t, 3, 1) == 100.0);
    assert_true(get2(s, 1, 1) == 100.0);
    assert_true(get1(r, 7) == 100.0);
    int64_t bi[3] = {1, 1, 3};
    assert_true(eg_tensor_get(b, bi) == 100.0);
    assert_true(get2(copy, 1, 3) == 7.0); /* the copy is independent */

    /* writing through a view (following its strides and offset) is visible in the base */
    float *sp = eg_tensor_data(s);
    const int64_t *ss = eg_tensor_strides(s);
    sp[2 * ss[0] + 0 * ss[1]] = -5.0f; /* s[2, 0] == base[2, 1] */
    assert_true(get2(base, 2, 1) == -5.0);
    float *tp = eg_tensor_data(t);
    const int64_t *ts = eg_tensor_strides(t);
    tp[0 * ts[0] + 2 * ts[1]] = 42.0f; /* t[0, 2] == base[2, 0] */
    assert_true(get2(base, 2, 0) == 42.0);
    assert_true(get1(r, 8) == 42.0);
    /* an op reading the view sees the new values */
    assert_true(eg_item(eg_sum(s, 0, NULL, false)) == 1 + 3 + 5 + 100 - 5 + 11);
    assert_true(get2(copy, 2, 0) == 8.0);

    /* writing to the copy leaves the base alone */
    ((float *)eg_tensor_data(copy))[0] = 9.0f;
    assert_true(get2(base, 0, 0) == 0.0);

    /* views keep the storage alive after the base is released */
    eg_tensor *owner = eg_arange(0, 4, 1, EG_DTYPE_F32);
    eg_tensor *view = eg_slice(owner, 0, 2, 4, 1);
    eg_retain(view); /* the caller's own reference, besides the scope's */
    eg_release(owner);
    assert_true(get1(view, 1) == 3.0);
    eg_release(view); /* drops the scope's reference (the scope forgets it) */
    assert_true(get1(view, 0) == 2.0);
    eg_release(view); /* drops ours */
}

int main(int argc, char **argv) {
    if (argc > 1) cmocka_set_test_filter(argv[1]); /* e.g. "test_print" or "test_*" */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_dtype_sizes_and_names, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_f16_conversions, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_bf16_conversions, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test(test_bf16_conversion_levels),
        cmocka_unit_test_setup_teardown(test_half_tensors, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_creation, fresh_scope_setup, strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_from_data_and_get, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_arange_linspace_eye, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_print, fresh_scope_setup, strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_random_reproducible, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_random_distributions, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_random_independent_of_threads, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_reshape, fresh_scope_setup, strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_permute_transpose, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_slice, fresh_scope_setup, strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_broadcast_squeeze_contiguous, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_view_aliasing, fresh_scope_setup,
                                        strict_scope_teardown),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    eg_shutdown();
    return failed;
}
