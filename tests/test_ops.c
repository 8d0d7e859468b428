/* The op-table test (DESIGN.md: "one test walks the op table and fails for any op lacking shape
 * inference, a backward rule (or an explicit no-grad flag), a CPU kernel or test cases"), the
 * forward results of every case in tests/op_cases.c against plain-C references in f32 and f64,
 * and in bf16 and f16 where the op takes them (within bounds derived from the formats, below),
 * casts that round once, dropout's properties, and bitwise equality of results for 1 and 2
 * threads. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/internal.h"
#include "backend/backend.h"
#include "core/random.h"
#include "eagle/device.h"
#include "eagle/runtime.h"
#include "op_cases.h"

/* ---- (a) the op table ---- */

static void test_op_table_is_complete(void **state) {
    (void)state;
    int cases_per_op[EG__OP_COUNT] = {0};
    int bad_cases = 0;
    for (int i = 0; i < oc_n_cases; i++) {
        const oc_case *c = &oc_cases[i];
        if ((unsigned)c->op >= EG__OP_COUNT || !c->apply || (!c->reference == !c->check)) {
            fprintf(stderr, "case %d '%s': bad op, or not exactly one of reference/check\n", i,
                    c->name);
            bad_cases++;
            continue;
        }
        cases_per_op[c->op]++;
    }
    int problems = 0;
    for (int op = 0; op < EG__OP_COUNT; op++) {
        const eg__op_def *def = &eg__op_defs[op];
        const char *name = def->name && def->name[0] ? def->name : "(unnamed)";
        bool no_grad = (def->flags & EG__OPF_NO_GRAD) != 0;
#define PROBLEM(text)                                                                              \
    do {                                                                                           \
        fprintf(stderr, "op %d '%s': %s\n", op, name, text);                                       \
        problems++;                                                                                \
    } while (0)
        if (!def->name || !def->name[0]) PROBLEM("has no name");
        if (!def->infer) PROBLEM("has no shape/dtype inference");
        if (def->n_inputs == 0 || def->n_inputs < -1) PROBLEM("has an invalid number of inputs");
        if (!eg__backward_rules[op])
            PROBLEM("has no backward rule, not even eg__backward_none");
        else if (!no_grad && eg__backward_rules[op] == eg__backward_none)
            PROBLEM("has no backward rule and is not flagged EG__OPF_NO_GRAD");
        else if (no_grad && eg__backward_rules[op] != eg__backward_none)
            PROBLEM("is flagged EG__OPF_NO_GRAD but has a backward rule that can never run");
        if (!eg__cpu_backend.kernels[op]) PROBLEM("has no CPU kernel in eg__cpu_kernels");
        if (cases_per_op[op] == 0) PROBLEM("has no test case in tests/op_cases.c");
        for (int other = 0; other < op; other++)
            if (def->name && eg__op_defs[other].name &&
                strcmp(def->name, eg__op_defs[other].name) == 0)
                PROBLEM("has the same name as another op");
#undef PROBLEM
    }
    if (problems || bad_cases)
        fail_msg("%d op table problem(s), %d bad case(s)", problems, bad_cases);
    int total = 0;
    for (int op = 0; op < EG__OP_COUNT; op++) total += cases_per_op[op];
    assert_int_equal(total, oc_n_cases);
}

/* ---- (b) forward results against the references ---- */

static bool values_close(double got, double want, double rtol, double atol) {
    if (isnan(want)) return isnan(got);
    if (isinf(want)) return got == want;
    return fabs(got - want) <= atol + rtol * fabs(want);
}

/* ---- bf16 and f16 bounds ----
 *
 * A bf16 / f16 kernel widens its inputs to f32 exactly, runs the f32 kernel's arithmetic and
 * rounds its result once to nearest (backend/cpu/lowp.h). The inputs here are rounded to the
 * format before the reference sees them (op_harness.c), so reference and kernel start from the
 * same values, and the error of a result y against the exact value r is at most
 *   f32 part:   rtol32 |r| + atol32                 (the f32 tolerance test_ops holds the f32
 *                                                     kernels to: c->tol or 1e-5, and a tenth)
 *   rounding:   u (|r| + f32 part) + tiny           (u = 2^-8 for bf16's 8 significant bits,
 *                                                     2^-11 for f16's 11; tiny = half the
 *                                                     smallest subnormal, 2^-134 / 2^-25)
 *   summing:    n 2^-24 S (1 + u)                    for the ops that add n terms in f32
 *                                                     (reductions, products, convolutions,
 *                                                     average pooling, scatter_add, mul_add):
 *                                                     S = the same op on |inputs| (the sum of
 *                                                     the terms' magnitudes), n = the inputs'
 *                                                     largest element count (>= the terms)
 * Inputs stay well inside f16's range (|x| <= 40, results below 65504) and away from its
 * subnormals except by chance, which the tiny term covers. */
static double unit_roundoff(eg_dtype dtype) {
    return dtype == EG_DTYPE_BF16 ? 0x1p-8 : dtype == EG_DTYPE_F16 ? 0x1p-11 : 0;
}

static bool is_low_precision(eg_dtype dtype) {
    return dtype == EG_DTYPE_BF16 || dtype == EG_DTYPE_F16;
}

/* The ops whose kernels add terms in f32 (the summing part above). */
static bool sums_terms(eg__op op) {
    switch (op) {
    case EG__OP_SUM:
    case EG__OP_MEAN:
    case EG__OP_MATMUL:
    case EG__OP_DENSE:
    case EG__OP_CONV2D:
    case EG__OP_CONV2D_BACKWARD_INPUT:
    case EG__OP_CONV2D_BACKWARD_FILTER:
    case EG__OP_AVG_POOL2D:
    case EG__OP_AVG_POOL2D_BACKWARD:
    case EG__OP_SCATTER_ADD:
    case EG__OP_MUL_ADD:
        return true;
    default:
        return false;
    }
}

/* S of the summing part: the case's reference on the magnitudes of its float inputs (dense
 * without its activation, which is 1-Lipschitz or flatter), and n. */
typedef struct term_scale {
    oc_ref *magnitude; /* OC_MAX_OUTPUTS results, or NULL when the op sums nothing */
    double n_terms;
} term_scale;

static void term_scale_make(const oc_case *c, const oc_inputs *inputs, term_scale *scale) {
    scale->magnitude = NULL;
    scale->n_terms = 0;
    if (!sums_terms(c->op) || !c->reference) return;
    oc_ref *in = calloc(OC_MAX_INPUTS, sizeof *in);
    scale->magnitude = calloc(OC_MAX_OUTPUTS, sizeof *scale->magnitude);
    if (!in || !scale->magnitude) {
        free(in);
        free(scale->magnitude);
        scale->magnitude = NULL;
        return;
    }
    for (int i = 0; i < inputs->n; i++) {
        in[i] = inputs->ref[i];
        if (inputs->is_float[i])
            for (int64_t k = 0; k < in[i].n_elems; k++) in[i].data[k] = fabs(in[i].data[k]);
        if ((double)in[i].n_elems > scale->n_terms) scale->n_terms = (double)in[i].n_elems;
    }
    oc_case plain = *c;
    if (c->op == EG__OP_DENSE) plain.p[0] = 0;
    plain.reference(&plain, in, scale->magnitude);
    free(in);
}

static bool compare_ref(const oc_ref *want, const oc_ref *got, const oc_case *c,
                        const term_scale *scale, int k, char *why, size_t why_size) {
    if (want->dtype != got->dtype) {
        snprintf(why, why_size, "dtype %s, expected %s", eg_dtype_name(got->dtype),
                 eg_dtype_name(want->dtype));
        return false;
    }
    bool same_shape = want->n_dims == got->n_dims;
    for (int d = 0; same_shape && d < want->n_dims; d++)
        same_shape = want->shape[d] == got->shape[d];
    if (!same_shape) {
        char a[64] = "(", b[64] = "(";
        for (int d = 0; d < got->n_dims; d++)
            snprintf(a + strlen(a), sizeof a - strlen(a), "%lld,", (long long)got->shape[d]);
        for (int d = 0; d < want->n_dims; d++)
            snprintf(b + strlen(b), sizeof b - strlen(b), "%lld,", (long long)want->shape[d]);
        snprintf(why, why_size, "shape %s), expected %s)", a, b);
        return false;
    }
    double rtol = 0, atol = 0;
    if (want->dtype == EG_DTYPE_F32) {
        rtol = c->tol ? c->tol : 1e-5;
        atol = rtol / 10;
    } else if (want->dtype == EG_DTYPE_F64) {
        rtol = 1e-10;
        atol = 1e-12;
    } else if (is_low_precision(want->dtype) && c->op != EG__OP_CAST) {
        /* (a cast's one rounding is the reference's own: compared exactly) */
        double u = unit_roundoff(want->dtype), rtol32 = c->tol ? c->tol : 1e-5;
        double tiny = want->dtype == EG_DTYPE_BF16 ? 0x1p-134 : 0x1p-25;
        rtol = u + rtol32 * (1 + u);
        atol = rtol32 / 10 * (1 + u) + tiny;
    }
    for (int64_t i = 0; i < want->n_elems; i++) {
        double sum_error = 0;
        if (is_low_precision(want->dtype) && scale && scale->magnitude &&
            scale->magnitude[k].n_elems == want->n_elems)
            sum_error = scale->n_terms * 0x1p-24 * fabs(scale->magnitude[k].data[i]) *
                        (1 + unit_roundoff(want->dtype));
        if (!values_close(got->data[i], want->data[i], rtol, atol + sum_error)) {
            snprintf(why, why_size, "element %lld is %.10g, expected %.10g", (long long)i,
                     got->data[i], want->data[i]);
            return false;
        }
    }
    return true;
}

/* Runs one case with F = float_dtype; returns false (after printing why) on a mismatch. With
 * F = bf16 or f16, *skipped (when not NULL) is set when the schema rejects the dtype (the op is
 * f32/f64-only on every device, or a composite case calls such an op): not a failure. */
static bool run_forward_case(const oc_case *c, int index, eg_dtype float_dtype, bool *skipped) {
    if (skipped) *skipped = false;
    oc_ref *want = calloc(OC_MAX_OUTPUTS, sizeof *want);
    oc_ref *got = calloc(OC_MAX_OUTPUTS, sizeof *got);
    char why[256] = "";
    bool ok = want && got;
    eg_clear_error();
    eg_scope_begin();
    oc_inputs inputs;
    eg_tensor *views[OC_MAX_INPUTS], *out[OC_MAX_OUTPUTS] = {0};
    ok = ok && oc_inputs_make(c, float_dtype, (uint64_t)index + 1, &inputs) &&
         oc_inputs_views(&inputs, views);
    int n = ok ? c->apply(c, views, out) : -1;
    if (ok && n < 0 && skipped && is_low_precision(float_dtype) &&
        eg_last_status() == EG_ERR_DTYPE &&
        (!eg_device_supports_op(eg_device_cpu(), c->op, float_dtype) ||
         (c->flags & OC_COMPOSITE))) {
        *skipped = true;
        eg_scope_end();
        oc_inputs_free(&inputs);
        free(want);
        free(got);
        eg_clear_error();
        return true;
    }
    if (n < 0) {
        snprintf(why, sizeof why, "the op failed: %s", eg_last_error());
        ok = false;
    }
    for (int k = 0; ok && k < n; k++) {
        if (!oc_read(out[k], &got[k])) {
            snprintf(why, sizeof why, "cannot read output %d", k);
            ok = false;
        }
    }
    /* A composite case chains several ops, each rounding to bf16 / f16 on its own: no one
     * rounding bounds the whole, so its values are not compared (each op is, in its own cases);
     * it must still run. */
    bool compared = !(is_low_precision(float_dtype) && (c->flags & OC_COMPOSITE));
    if (ok && c->reference && compared) {
        int expected = c->reference(c, inputs.ref, want);
        if (expected != n) {
            snprintf(why, sizeof why, "%d outputs, the reference has %d", n, expected);
            ok = false;
        }
        term_scale scale = {NULL, 0};
        if (is_low_precision(float_dtype)) term_scale_make(c, &inputs, &scale);
        for (int k = 0; ok && k < n; k++) {
            char detail[200];
            if (!compare_ref(&want[k], &got[k], c, &scale, k, detail, sizeof detail)) {
                snprintf(why, sizeof why, "output %d: %s", k, detail);
                ok = false;
            }
        }
        free(scale.magnitude);
    } else if (ok && c->check) {
        ok = c->check(c, inputs.ref, n, got, why, sizeof why);
    }
    if (ok && eg_last_status() != EG_OK) {
        snprintf(why, sizeof why, "an error is left pending: %s", eg_last_error());
        ok = false;
    }
    eg_scope_end();
    oc_inputs_free(&inputs);
    free(want);
    free(got);
    if (!ok)
        fprintf(stderr, "FAIL case %d '%s' [F=%s]: %s\n", index, c->name,
                eg_dtype_name(float_dtype), why);
    eg_clear_error();
    return ok;
}

static void test_forward_matches_reference(void **state) {
    (void)state;
    int failures = 0, runs = 0;
    for (int i = 0; i < oc_n_cases; i++) {
        const oc_case *c = &oc_cases[i];
        failures += !run_forward_case(c, i, EG_DTYPE_F32, NULL);
        runs++;
        if (oc_case_has_float_input(c)) {
            failures += !run_forward_case(c, i, EG_DTYPE_F64, NULL);
            runs++;
        }
    }
    fprintf(stderr, "forward: %d case runs over %d cases, %d failed\n", runs, oc_n_cases, failures);
    assert_int_equal(failures, 0);
}

/* The ops whose schema takes bf16 and f16 (ops/infer.c): each must have run in both with at
 * least one case below, so that a schema that stopped accepting them, or cases that stopped
 * reaching them, fails here rather than silently testing less. */
static const eg__op low_precision_ops[] = {
    EG__OP_NEG,
    EG__OP_ABS,
    EG__OP_EXP,
    EG__OP_LOG,
    EG__OP_SQRT,
    EG__OP_RSQRT,
    EG__OP_SIN,
    EG__OP_COS,
    EG__OP_TANH,
    EG__OP_SIGMOID,
    EG__OP_RELU,
    EG__OP_GELU,
    EG__OP_SOFTPLUS,
    EG__OP_SIGN,
    EG__OP_SQUARE,
    EG__OP_RECIPROCAL,
    EG__OP_ERF,
    EG__OP_CLIP,
    EG__OP_ADD,
    EG__OP_SUB,
    EG__OP_MUL,
    EG__OP_DIV,
    EG__OP_POW,
    EG__OP_MAXIMUM,
    EG__OP_MINIMUM,
    EG__OP_EQUAL,
    EG__OP_NOT_EQUAL,
    EG__OP_LESS,
    EG__OP_LESS_EQUAL,
    EG__OP_GREATER,
    EG__OP_GREATER_EQUAL,
    EG__OP_WHERE,
    EG__OP_CAST,
    EG__OP_SUM,
    EG__OP_MEAN,
    EG__OP_MAX,
    EG__OP_MIN,
    EG__OP_ARGMAX,
    EG__OP_ARGMIN,
    EG__OP_GATHER,
    EG__OP_SCATTER_ADD,
    EG__OP_CONCAT,
    EG__OP_PAD,
    EG__OP_UNSLICE,
    EG__OP_DROPOUT,
    EG__OP_RELU_BACKWARD,
    EG__OP_MUL_ADD,
    EG__OP_MAX_POOL2D,
    EG__OP_MAX_POOL2D_BACKWARD,
    EG__OP_MAX_POOL2D_ARGMAX,
    EG__OP_AVG_POOL2D,
    EG__OP_AVG_POOL2D_BACKWARD,
};

/* Every case with float inputs again with them in bf16 and in f16, on the CPU, against the f64
 * reference within the bounds above (compare_ref); cases the schema rejects are counted apart. */
static void test_forward_low_precision(void **state) {
    (void)state;
    static const eg_dtype dtypes[] = {EG_DTYPE_BF16, EG_DTYPE_F16};
    int failures = 0;
    for (size_t t = 0; t < sizeof dtypes / sizeof dtypes[0]; t++) {
        eg_dtype dtype = dtypes[t];
        int runs = 0, skips = 0, runs_per_op[EG__OP_COUNT] = {0};
        for (int i = 0; i < oc_n_cases; i++) {
            const oc_case *c = &oc_cases[i];
            if (!oc_case_has_float_input(c)) continue;
            bool skipped;
            failures += !run_forward_case(c, i, dtype, &skipped);
            if (skipped) {
                skips++;
            } else {
                runs++;
                runs_per_op[c->op]++;
            }
        }
        fprintf(stderr, "forward %s: %d case runs, %d cases rejected by the schema\n",
                eg_dtype_name(dtype), runs, skips);
        assert_true(runs > 0);
        for (size_t k = 0; k < sizeof low_precision_ops / sizeof low_precision_ops[0]; k++)
            if (!runs_per_op[low_precision_ops[k]]) {
                fprintf(stderr, "FAIL op '%s' ran no %s case\n",
                        eg__op_defs[low_precision_ops[k]].name, eg_dtype_name(dtype));
                failures++;
            }
    }
    assert_int_equal(failures, 0);
}

/* Casts to bf16 and f16 round once: from f64 and i32 values just past a tie of the format,
 * where rounding to f32 first would land on the tie and then round to even, the wrong way. */
static void test_cast_rounds_once(void **state) {
    (void)state;
    static const struct {
        eg_dtype from, to;
        double value, want;
    } cases[] = {
        {EG_DTYPE_F64, EG_DTYPE_BF16, 1 + 0x1p-8 + 0x1p-30, 1 + 0x1p-7},
        {EG_DTYPE_F64, EG_DTYPE_BF16, -(1 + 0x1p-8 + 0x1p-40), -(1 + 0x1p-7)},
        {EG_DTYPE_F64, EG_DTYPE_BF16, 3 + 0x1p-7 + 0x1p-29, 3 + 0x1p-6},
        {EG_DTYPE_F64, EG_DTYPE_F16, 1 + 0x1p-11 + 0x1p-30, 1 + 0x1p-10},
        {EG_DTYPE_F64, EG_DTYPE_F16, 1e6, INFINITY},
        {EG_DTYPE_F64, EG_DTYPE_F16, 0x1p-25 + 0x1p-40, 0x1p-24}, /* past half the least */
        {EG_DTYPE_F64, EG_DTYPE_BF16, 1e39, INFINITY},
        {EG_DTYPE_I32, EG_DTYPE_BF16, 16777216 + 65536 + 1, 16777216 + 131072},
        {EG_DTYPE_I32, EG_DTYPE_F16, 2049, 2048}, /* ties to even */
        {EG_DTYPE_I32, EG_DTYPE_F16, 2051, 2052},
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        eg_scope_begin();
        eg_tensor *x =
            cases[i].from == EG_DTYPE_F64
                ? eg_tensor_from_data(&cases[i].value, EG_DTYPE_F64, 0, NULL)
                : eg_tensor_from_data(&(int32_t){(int32_t)cases[i].value}, EG_DTYPE_I32, 0, NULL);
        eg_tensor *y = eg_cast(x, cases[i].to);
        assert_non_null(y);
        double got = eg_tensor_get(y, NULL), want = cases[i].want;
        if (!(got == want) && bad++ < 5)
            fprintf(stderr, "cast %s %.17g to %s: %.17g, want %.17g\n",
                    eg_dtype_name(cases[i].from), cases[i].value, eg_dtype_name(cases[i].to), got,
                    want);
        assert_int_equal(eg_scope_end(), EG_OK);
    }
    assert_int_equal(bad, 0);
}

/* ---- dropout: determinism and layout independence ---- */

static bool same_bytes(const eg_tensor *a, const eg_tensor *b) {
    size_t size = (size_t)eg_tensor_n_elems(a) * eg_dtype_size(eg_tensor_dtype(a));
    if (eg_tensor_n_elems(a) != eg_tensor_n_elems(b) || eg_tensor_dtype(a) != eg_tensor_dtype(b))
        return false;
    char *x = malloc(size), *y = malloc(size);
    bool same = x && y && eg_tensor_copy_to_host(a, x, size) == EG_OK &&
                eg_tensor_copy_to_host(b, y, size) == EG_OK && memcmp(x, y, size) == 0;
    free(x);
    free(y);
    return same;
}

static void test_dropout_mask(void **state) {
    (void)state;
    eg_scope_begin();
    int64_t shape[2] = {50, 60};
    eg_generator *gen = eg_generator_new(5);
    eg_tensor *x = eg_random_uniform(gen, EG_DTYPE_F32, 2, shape, 0.5, 1.5);
    eg_generator_free(gen);
    assert_non_null(x);
    eg_tensor *a = eg_dropout(x, 0.4, 42, true), *b = eg_dropout(x, 0.4, 42, true);
    eg_tensor *c = eg_dropout(x, 0.4, 43, true);
    assert_true(same_bytes(a, b));
    assert_false(same_bytes(a, c));
    /* the mask depends on the element's index, not on the values or the input's layout */
    eg_tensor *doubled = eg_dropout(eg_mul_scalar(x, 2.0), 0.4, 42, true);
    assert_true(same_bytes(eg_mul_scalar(a, 2.0), doubled));
    eg_tensor *xt = eg_transpose(x, 0, 1);
    assert_true(same_bytes(eg_dropout(xt, 0.4, 42, true), eg_dropout(eg_copy(xt), 0.4, 42, true)));
    /* not training, or rate 0: x itself */
    eg_tensor *off = eg_dropout(x, 0.4, 42, false);
    assert_true(same_bytes(off, x));
    assert_true(eg_tensor_shares_storage(off, x));
    assert_true(same_bytes(eg_dropout(x, 0.0, 42, true), x));
    eg_clear_error();
    assert_null(eg_dropout(x, 1.0, 42, true));
    assert_int_equal(eg_last_status(), EG_ERR_INVALID_ARGUMENT);
    eg_clear_error();
    assert_int_equal(eg_scope_end(), EG_OK);
}

/* The mask is Philox's definition exactly: element i is kept when the uniform of word i % 4 of
 * block i / 4 (counter_high 2) is >= rate — whichever path (vector or scalar, f32, f64, bf16 or
 * f16, body or tail) produced it. */
static void test_dropout_mask_is_philox(void **state) {
    (void)state;
    static const int64_t sizes[] = {1, 7, 33, 131, 1001, 40003};
    static const double rates[] = {0.25, 0.5, 0.9};
    int mismatches = 0;
    static const eg_dtype dtypes[] = {EG_DTYPE_F32, EG_DTYPE_F64, EG_DTYPE_BF16, EG_DTYPE_F16};
    for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) {
        eg_dtype dtype = dtypes[d];
        for (size_t r = 0; r < sizeof rates / sizeof rates[0]; r++) {
            for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
                eg_scope_begin();
                int64_t n = sizes[k];
                uint64_t seed = 1000 + 10 * r + k;
                eg_tensor *y = eg_dropout(eg_ones(dtype, 1, &n), rates[r], seed, true);
                assert_non_null(y);
                double scale = 1.0 / (1.0 - rates[r]);
                /* the kept value: 1 * the f32 scale, in f64 the scale itself, in bf16 / f16 the
                 * f32 scale rounded once */
                float scale_f32 = (float)scale;
                double kept = dtype == EG_DTYPE_F64 ? scale : (double)scale_f32;
                if (is_low_precision(dtype)) {
                    uint16_t bits;
                    float widened;
                    if (dtype == EG_DTYPE_BF16) {
                        eg_f32_to_bf16(&scale_f32, &bits, 1);
                        eg_bf16_to_f32(&bits, &widened, 1);
                    } else {
                        eg_f32_to_f16(&scale_f32, &bits, 1);
                        eg_f16_to_f32(&bits, &widened, 1);
                    }
                    kept = widened;
                }
                for (int64_t i = 0; i < n; i++) {
                    uint32_t words[4];
                    eg__philox4x32(seed, 2, (uint64_t)(i / 4), words);
                    bool keep = eg__uniform_f32(words[i % 4]) >= (float)rates[r];
                    double got = eg_tensor_get(y, &i);
                    double want = keep ? kept : 0.0;
                    if (got != want && mismatches++ < 5)
                        fprintf(stderr, "dropout %s n %lld rate %g element %lld: %g, want %g\n",
                                eg_dtype_name(dtype), (long long)n, rates[r], (long long)i, got,
                                want);
                }
                assert_int_equal(eg_scope_end(), EG_OK);
            }
        }
    }
    assert_int_equal(mismatches, 0);
}

/* ---- matmul over several output tiles (the CPU kernel splits large outputs) ---- */

static void check_big_matmul(eg_dtype dtype, bool ta, bool tb, int64_t batch, int64_t m, int64_t k,
                             int64_t n) {
    eg_scope_begin();
    oc_rng rng = {(uint64_t)(m * 131 + n * 7 + k + ta * 2 + tb)};
    int64_t a_n = batch * m * k, b_n = batch * k * n;
    double *a = malloc(sizeof(double) * (size_t)(a_n ? a_n : 1));
    double *b = malloc(sizeof(double) * (size_t)(b_n ? b_n : 1));
    double *c = malloc(sizeof(double) * (size_t)(batch * m * n));
    assert_true(a && b && c);
    for (int64_t i = 0; i < a_n; i++) a[i] = oc_rng_uniform(&rng, -1, 1);
    for (int64_t i = 0; i < b_n; i++) b[i] = oc_rng_uniform(&rng, -1, 1);
    /* stored shapes: a (batch, m, k) or (batch, k, m) when ta; b likewise */
    int64_t a_shape[3] = {batch, ta ? k : m, ta ? m : k},
            b_shape[3] = {batch, tb ? n : k, tb ? k : n};
    eg_tensor *at = eg_cast(eg_tensor_from_data(a, EG_DTYPE_F64, 3, a_shape), dtype);
    eg_tensor *bt = eg_cast(eg_tensor_from_data(b, EG_DTYPE_F64, 3, b_shape), dtype);
    eg_tensor *result = eg_cast(eg_matmul_ex(at, bt, ta, tb), EG_DTYPE_F64);
    assert_non_null(result);
    assert_int_equal(eg_tensor_n_elems(result), batch * m * n);
    assert_int_equal(eg_tensor_copy_to_host(result, c, sizeof(double) * (size_t)(batch * m * n)),
                     EG_OK);
    int64_t bad = 0;
    for (int64_t p = 0; p < batch; p++)
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double s = 0, scale = 0;
                for (int64_t q = 0; q < k; q++) {
                    double x = a[p * m * k + (ta ? q * m + i : i * k + q)];
                    double y = b[p * k * n + (tb ? j * k + q : q * n + j)];
                    if (dtype == EG_DTYPE_F32) x = (float)x, y = (float)y;
                    s += x * y;
                    scale += fabs(x * y);
                }
                double tol = (dtype == EG_DTYPE_F32 ? 1e-6 : 1e-14) * (scale + 1);
                if (fabs(c[(p * m + i) * n + j] - s) > tol && bad++ < 3)
                    fprintf(stderr, "matmul %s ta=%d tb=%d: [%lld,%lld,%lld] = %.10g, want %.10g\n",
                            eg_dtype_name(dtype), ta, tb, (long long)p, (long long)i, (long long)j,
                            c[(p * m + i) * n + j], s);
            }
    free(a);
    free(b);
    free(c);
    assert_int_equal(eg_scope_end(), EG_OK);
    assert_int_equal(bad, 0);
}

static void test_matmul_over_many_tiles(void **state) {
    (void)state;
    for (int t = 0; t < 4; t++) {
        check_big_matmul(EG_DTYPE_F32, t & 1, t & 2, 2, 130, 33, 300);
        check_big_matmul(EG_DTYPE_F64, t & 1, t & 2, 1, 70, 9, 520);
    }
    check_big_matmul(EG_DTYPE_F32, false, false, 1, 65, 0, 257); /* k = 0: zeros */
}

/* ---- 1 thread and 2 threads give the same bits ---- */

typedef eg_tensor *(*big_fn)(const eg_tensor *a, const eg_tensor *b, const eg_tensor *c);

static eg_tensor *big_add_row(const eg_tensor *a, const eg_tensor *b, const eg_tensor *c) {
    (void)c;
    return eg_add(a, b);
}
static eg_tensor *big_add_column(const eg_tensor *a, const eg_tensor *b, const eg_tensor *c) {
    (void)b;
    return eg_mul(eg_reshape(c, 2, (int64_t[]){400, 1}), a);
}
static eg_tensor *big_exp(const eg_tensor *a, const eg_tensor *b, const eg_tensor *c) {
    (void)b, (void)c;
    return eg_exp(a);
}
static eg_tensor *big_exp_transposed(const eg_tensor *a, const eg_tensor *b, const eg_tensor *c) {
    (void)b, (void)c;
    return eg_exp(eg_transpose(a, 0, 1));
}
static eg_tensor *big_sum_rows(const eg_tensor *a, const eg_tensor *b, const eg_tensor *c) {
    (void)b, (void)c;
    return eg_sum(a, 1, (int[]){1}, false);
}
static eg_tensor *big_sum_columns(const eg_tensor *a, const eg_tensor *b, const eg_tensor *c) {
    (void)b, (void)c;
    return eg_sum(a, 1, (int[]){0}, false);
}
static eg_tensor *big_matmul(const eg_tensor *a, const eg_tensor *b, const eg_tensor *c) {
    (void)b, (void)c;
    return eg_matmul_ex(a, eg_slice(a, 0, 0, 300, 1), false, true);
}
static eg_tensor *big_softmax_rows(const eg_tensor *a, const eg_tensor *b, const eg_tensor *c) {
    (void)b, (void)c;
    return eg_softmax(a, -1);
}
static eg_tensor *big_softmax_columns(const eg_tensor *a, const eg_tensor *b, const eg_tensor *c) {
    (void)b, (void)c;
    return eg_log_softmax(a, 0);
}
static eg_tensor *big_dropout(const eg_tensor *a, const eg_tensor *b, const eg_tensor *c) {
    (void)b, (void)c;
    return eg_dropout(a, 0.5, 99, true);
}

/* bf16 / f16: casts, elementwise (fused and block paths), and reductions along every kernel
 * (rows, columns, one long sum split into blocks over threads) */
static eg_tensor *big_add_bf16(const eg_tensor *a, const eg_tensor *b, const eg_tensor *c) {
    (void)c;
    return eg_add(eg_cast(a, EG_DTYPE_BF16), eg_cast(b, EG_DTYPE_BF16));
}
static eg_tensor *big_gelu_f16_transposed(const eg_tensor *a, const eg_tensor *b,
                                          const eg_tensor *c) {
    (void)b, (void)c;
    return eg_gelu(eg_transpose(eg_cast(a, EG_DTYPE_F16), 0, 1));
}
static eg_tensor *big_sum_rows_bf16(const eg_tensor *a, const eg_tensor *b, const eg_tensor *c) {
    (void)b, (void)c;
    return eg_sum(eg_cast(a, EG_DTYPE_BF16), 1, (int[]){1}, false);
}
static eg_tensor *big_sum_columns_f16(const eg_tensor *a, const eg_tensor *b, const eg_tensor *c) {
    (void)b, (void)c;
    return eg_sum(eg_cast(a, EG_DTYPE_F16), 1, (int[]){0}, false);
}
static eg_tensor *big_sum_all_bf16(const eg_tensor *a, const eg_tensor *b, const eg_tensor *c) {
    (void)b, (void)c;
    return eg_sum(eg_cast(a, EG_DTYPE_BF16), 0, NULL, false);
}
static eg_tensor *big_mean_all_f16(const eg_tensor *a, const eg_tensor *b, const eg_tensor *c) {
    (void)b, (void)c;
    return eg_mean(eg_cast(a, EG_DTYPE_F16), 0, NULL, false);
}
static eg_tensor *big_max_columns_bf16(const eg_tensor *a, const eg_tensor *b,
                                       const eg_tensor *c) {
    (void)b, (void)c;
    return eg_max(eg_cast(a, EG_DTYPE_BF16), 1, (int[]){0}, false);
}
static eg_tensor *big_dropout_bf16(const eg_tensor *a, const eg_tensor *b, const eg_tensor *c) {
    (void)b, (void)c;
    return eg_dropout(eg_cast(a, EG_DTYPE_BF16), 0.5, 99, true);
}

static void test_threads_give_identical_bits(void **state) {
    (void)state;
    static const struct {
        const char *name;
        big_fn fn;
    } ops[] = {{"add (400,500) + (500)", big_add_row},
               {"mul (400,1) * (400,500)", big_add_column},
               {"exp", big_exp},
               {"exp of a transposed view", big_exp_transposed},
               {"sum over axis 1", big_sum_rows},
               {"sum over axis 0", big_sum_columns},
               {"matmul (400,500) x (500,300)", big_matmul},
               {"softmax axis -1", big_softmax_rows},
               {"log_softmax axis 0", big_softmax_columns},
               {"dropout", big_dropout},
               {"add bf16", big_add_bf16},
               {"gelu f16 of a transposed view", big_gelu_f16_transposed},
               {"sum bf16 over axis 1", big_sum_rows_bf16},
               {"sum f16 over axis 0", big_sum_columns_f16},
               {"sum bf16 over all axes", big_sum_all_bf16},
               {"mean f16 over all axes", big_mean_all_f16},
               {"max bf16 over axis 0", big_max_columns_bf16},
               {"dropout bf16", big_dropout_bf16}};
    int saved = eg_get_num_threads();
    eg_scope_begin();
    eg_generator *gen = eg_generator_new(123);
    eg_tensor *a = eg_random_normal(gen, EG_DTYPE_F32, 2, (int64_t[]){400, 500}, 0, 1);
    eg_tensor *b = eg_random_normal(gen, EG_DTYPE_F32, 1, (int64_t[]){500}, 0, 1);
    eg_tensor *c = eg_random_normal(gen, EG_DTYPE_F32, 1, (int64_t[]){400}, 0, 1);
    eg_generator_free(gen);
    assert_non_null(a);
    int failures = 0;
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        assert_int_equal(eg_set_num_threads(1), EG_OK);
        eg_tensor *one = ops[i].fn(a, b, c);
        assert_int_equal(eg_set_num_threads(2), EG_OK);
        eg_tensor *two = ops[i].fn(a, b, c);
        assert_non_null(one);
        assert_non_null(two);
        if (!same_bytes(one, two)) {
            fprintf(stderr, "FAIL %s: 1 and 2 threads differ\n", ops[i].name);
            failures++;
        }
    }
    assert_int_equal(eg_scope_end(), EG_OK);
    eg_set_num_threads(saved);
    assert_int_equal(failures, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_op_table_is_complete),
        cmocka_unit_test(test_forward_matches_reference),
        cmocka_unit_test(test_forward_low_precision),
        cmocka_unit_test(test_cast_rounds_once),
        cmocka_unit_test(test_dropout_mask),
        cmocka_unit_test(test_dropout_mask_is_philox),
        cmocka_unit_test(test_matmul_over_many_tiles),
        cmocka_unit_test(test_threads_give_identical_bits),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    eg_shutdown();
    return failed;
}
