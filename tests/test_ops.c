/* The op-table test (DESIGN.md: "one test walks the op table and fails for any op lacking shape
 * inference, a backward rule (or an explicit no-grad flag), a CPU kernel or test cases"), the
 * forward results of every case in tests/op_cases.c against plain-C references in f32 and f64,
 * dropout's properties, and bitwise equality of results for 1 and 2 threads. */
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

static bool compare_ref(const oc_ref *want, const oc_ref *got, const oc_case *c, char *why,
                        size_t why_size) {
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
    }
    for (int64_t i = 0; i < want->n_elems; i++) {
        if (!values_close(got->data[i], want->data[i], rtol, atol)) {
            snprintf(why, why_size, "element %lld is %.10g, expected %.10g", (long long)i,
                     got->data[i], want->data[i]);
            return false;
        }
    }
    return true;
}

/* Runs one case with F = float_dtype; returns false (after printing why) on a mismatch. */
static bool run_forward_case(const oc_case *c, int index, eg_dtype float_dtype) {
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
    int n = ok ? c->apply(c, (const eg_tensor *const *)views, out) : -1;
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
    if (ok && c->reference) {
        int expected = c->reference(c, inputs.ref, want);
        if (expected != n) {
            snprintf(why, sizeof why, "%d outputs, the reference has %d", n, expected);
            ok = false;
        }
        for (int k = 0; ok && k < n; k++) {
            char detail[200];
            if (!compare_ref(&want[k], &got[k], c, detail, sizeof detail)) {
                snprintf(why, sizeof why, "output %d: %s", k, detail);
                ok = false;
            }
        }
    } else if (ok) {
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
        failures += !run_forward_case(c, i, EG_DTYPE_F32);
        runs++;
        if (oc_case_has_float_input(c)) {
            failures += !run_forward_case(c, i, EG_DTYPE_F64);
            runs++;
        }
    }
    fprintf(stderr, "forward: %d case runs over %d cases, %d failed\n", runs, oc_n_cases, failures);
    assert_int_equal(failures, 0);
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
 * block i / 4 (counter_high 2) is >= rate — whichever path (vector or scalar, f32 or f64, body or
 * tail) produced it. */
static void test_dropout_mask_is_philox(void **state) {
    (void)state;
    static const int64_t sizes[] = {1, 7, 33, 131, 1001, 40003};
    static const double rates[] = {0.25, 0.5, 0.9};
    int mismatches = 0;
    for (int d = 0; d < 2; d++) {
        eg_dtype dtype = d ? EG_DTYPE_F64 : EG_DTYPE_F32;
        for (size_t r = 0; r < sizeof rates / sizeof rates[0]; r++) {
            for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
                eg_scope_begin();
                int64_t n = sizes[k];
                uint64_t seed = 1000 + 10 * r + k;
                eg_tensor *y = eg_dropout(eg_ones(dtype, 1, &n), rates[r], seed, true);
                assert_non_null(y);
                double scale = 1.0 / (1.0 - rates[r]);
                for (int64_t i = 0; i < n; i++) {
                    uint32_t words[4];
                    eg__philox4x32(seed, 2, (uint64_t)(i / 4), words);
                    bool keep = eg__uniform_f32(words[i % 4]) >= (float)rates[r];
                    double got = eg_tensor_get(y, &i);
                    double want = keep ? (d ? scale : (double)(float)scale) : 0.0;
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
               {"dropout", big_dropout}};
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
        cmocka_unit_test(test_dropout_mask),
        cmocka_unit_test(test_dropout_mask_is_philox),
        cmocka_unit_test(test_matmul_over_many_tiles),
        cmocka_unit_test(test_threads_give_identical_bits),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    eg_shutdown();
    return failed;
}
