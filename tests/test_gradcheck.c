/* Gradient checks by central differences in f64 for every differentiable op of the registry,
 * using the case table of tests/op_cases.c: for each case, L = sum(op(inputs) * W) with a fixed
 * random W, analytic dL/dx from a tape against (L(x + h) - L(x - h)) / 2h for every element of
 * every float input. Then second-order gradients: nested tapes on known functions, and for every
 * case the gradient of sum(V * dL/dx) against central differences of dL/dx. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eagle/autograd.h"
#include "eagle/runtime.h"
#include "op_cases.h"

#define STEP      1e-6
#define TOLERANCE 1e-6

static bool close_enough(double analytic, double numeric) {
    return fabs(analytic - numeric) <= TOLERANCE * (1 + fabs(numeric));
}

/* One case being checked: its inputs, the weights W per output and scratch space. */
typedef struct check {
    const oc_case *c;
    int index;
    oc_inputs inputs;
    int n_out;
    oc_ref *w; /* OC_MAX_OUTPUTS weights, shaped like the outputs */
    oc_ref *v; /* OC_MAX_INPUTS second-order weights, shaped like the inputs */
    eg_tensor *w_t[OC_MAX_OUTPUTS];
    eg_tensor *v_t[OC_MAX_INPUTS];
    oc_ref *scratch; /* one */
    oc_ref *grads;   /* OC_MAX_INPUTS */
    int n_sources;
    int source_input[OC_MAX_INPUTS]; /* input index of each source */
    eg_tensor *sources[OC_MAX_INPUTS];
} check;

static eg_tensor *tensor_from_ref(const oc_ref *r) {
    return eg_tensor_from_data(r->data, EG_DTYPE_F64, r->n_dims, r->shape);
}

/* Builds the inputs and the weights (the caller's scope owns the tensors). 1: ready; 0: nothing
 * to check (an integer or bool result); -1: an error. */
static int check_begin(check *k, const oc_case *c, int index) {
    memset(k, 0, sizeof *k);
    k->c = c;
    k->index = index;
    k->w = calloc(OC_MAX_OUTPUTS, sizeof *k->w);
    k->v = calloc(OC_MAX_INPUTS, sizeof *k->v);
    k->grads = calloc(OC_MAX_INPUTS, sizeof *k->grads);
    k->scratch = malloc(sizeof *k->scratch);
    assert_true(k->w && k->v && k->grads && k->scratch);
    eg_tensor *views[OC_MAX_INPUTS], *out[OC_MAX_OUTPUTS] = {0};
    if (!oc_inputs_make(c, EG_DTYPE_F64, (uint64_t)index + 1, &k->inputs) ||
        !oc_inputs_views(&k->inputs, views) || (k->n_out = c->apply(c, views, out)) < 1) {
        fprintf(stderr, "FAIL case %d '%s': the op failed: %s\n", index, c->name, eg_last_error());
        return -1;
    }
    oc_rng rng = {(uint64_t)index * 7919 + 3};
    for (int o = 0; o < k->n_out; o++) {
        if (!oc_read(out[o], &k->w[o])) return -1;
        if (k->w[o].dtype != EG_DTYPE_F64) return 0;
        for (int64_t i = 0; i < k->w[o].n_elems; i++) k->w[o].data[i] = oc_rng_uniform(&rng, -1, 1);
        k->w_t[o] = tensor_from_ref(&k->w[o]);
    }
    for (int i = 0; i < k->inputs.n; i++) {
        if (!k->inputs.is_float[i]) continue;
        k->source_input[k->n_sources] = i;
        eg_tensor *base = k->inputs.base[i];
        oc_ref_init(&k->v[k->n_sources], EG_DTYPE_F64, eg_tensor_n_dims(base),
                    eg_tensor_shape(base));
        for (int64_t j = 0; j < k->v[k->n_sources].n_elems; j++)
            k->v[k->n_sources].data[j] = oc_rng_uniform(&rng, -1, 1);
        k->v_t[k->n_sources] = tensor_from_ref(&k->v[k->n_sources]);
        k->sources[k->n_sources++] = base;
    }
    return 1;
}

static void check_end(check *k) {
    oc_inputs_free(&k->inputs);
    free(k->w);
    free(k->v);
    free(k->grads);
    free(k->scratch);
}

/* L = sum_o sum(out_o * W_o) as an Eagle tensor (recorded on active tapes). */
static eg_tensor *loss_tensor(check *k) {
    eg_tensor *views[OC_MAX_INPUTS], *out[OC_MAX_OUTPUTS] = {0};
    if (!oc_inputs_views(&k->inputs, views)) return NULL;
    if (k->c->apply(k->c, views, out) != k->n_out) return NULL;
    eg_tensor *loss = NULL;
    for (int o = 0; o < k->n_out; o++) {
        /* an op whose result lives on another device (to_device) gets its weights there */
        const eg_tensor *w = k->w_t[o];
        if (out[o] && eg_tensor_device(out[o]) != eg_tensor_device(w))
            w = eg_tensor_to(w, eg_tensor_device(out[o]));
        eg_tensor *term = eg_sum(eg_mul(out[o], w), 0, NULL, false);
        loss = loss ? eg_add(loss, term) : term;
    }
    return loss;
}

/* L computed in plain C from the op's outputs. */
static bool loss_value(check *k, double *loss) {
    eg_scope_begin();
    eg_tensor *views[OC_MAX_INPUTS], *out[OC_MAX_OUTPUTS] = {0};
    bool ok = oc_inputs_views(&k->inputs, views) && k->c->apply(k->c, views, out) == k->n_out;
    double sum = 0;
    for (int o = 0; ok && o < k->n_out; o++) {
        ok = oc_read(out[o], k->scratch) && k->scratch->n_elems == k->w[o].n_elems;
        for (int64_t i = 0; ok && i < k->scratch->n_elems; i++)
            sum += k->scratch->data[i] * k->w[o].data[i];
    }
    eg_scope_end();
    *loss = sum;
    return ok;
}

/* dL/d(sources) from one tape, read into k->grads. */
static bool analytic_gradient(check *k) {
    eg_scope_begin();
    eg_tape *tape = eg_tape_begin(false);
    for (int s = 0; s < k->n_sources; s++) eg_tape_watch(tape, k->sources[s]);
    eg_tensor *loss = loss_tensor(k), *grads[OC_MAX_INPUTS] = {0};
    bool ok = loss && eg_tape_gradient(tape, loss, k->n_sources, k->sources, grads,
                                       EG_UNCONNECTED_ZERO) == EG_OK;
    eg_tape_free(tape);
    for (int s = 0; ok && s < k->n_sources; s++) {
        ok = oc_read(grads[s], &k->grads[s]) && k->grads[s].dtype == EG_DTYPE_F64 &&
             k->grads[s].n_dims == eg_tensor_n_dims(k->sources[s]) &&
             memcmp(k->grads[s].shape, eg_tensor_shape(k->sources[s]),
                    sizeof(int64_t) * (size_t)k->grads[s].n_dims) == 0;
        if (!ok) fprintf(stderr, "case '%s': gradient %d has the wrong shape\n", k->c->name, s);
    }
    eg_scope_end();
    return ok;
}

/* S = sum_s sum(V_s * dL/dx_s) from the analytic first-order gradient. */
static bool second_order_value(check *k, double *value) {
    if (!analytic_gradient(k)) return false;
    double sum = 0;
    for (int s = 0; s < k->n_sources; s++)
        for (int64_t j = 0; j < k->grads[s].n_elems; j++)
            sum += k->grads[s].data[j] * k->v[s].data[j];
    *value = sum;
    return true;
}

/* dS/d(sources) through nested tapes, read into k->grads. */
static bool second_order_gradient(check *k) {
    eg_scope_begin();
    eg_tape *outer = eg_tape_begin(false);
    for (int s = 0; s < k->n_sources; s++) eg_tape_watch(outer, k->sources[s]);
    eg_tape *inner = eg_tape_begin(false);
    for (int s = 0; s < k->n_sources; s++) eg_tape_watch(inner, k->sources[s]);
    eg_tensor *loss = loss_tensor(k), *grads[OC_MAX_INPUTS] = {0}, *second[OC_MAX_INPUTS] = {0};
    eg_tensor *const *sources = k->sources;
    bool ok = loss && eg_tape_gradient(inner, loss, k->n_sources, sources, grads,
                                       EG_UNCONNECTED_ZERO) == EG_OK;
    eg_tensor *total = NULL;
    for (int s = 0; ok && s < k->n_sources; s++) {
        eg_tensor *term = eg_sum(eg_mul(grads[s], k->v_t[s]), 0, NULL, false);
        total = total ? eg_add(total, term) : term;
    }
    ok =
        ok && total &&
        eg_tape_gradient(outer, total, k->n_sources, sources, second, EG_UNCONNECTED_ZERO) == EG_OK;
    eg_tape_free(inner);
    eg_tape_free(outer);
    for (int s = 0; ok && s < k->n_sources; s++) ok = oc_read(second[s], &k->grads[s]);
    eg_scope_end();
    return ok;
}

/* Compares k->grads (already computed) with central differences of f. Returns the number of
 * elements compared, or -1 on a mismatch or an error. */
static int compare_with_differences(check *k, bool (*f)(check *, double *), const char *what) {
    oc_ref *analytic = calloc(OC_MAX_INPUTS, sizeof *analytic);
    assert_non_null(analytic);
    memcpy(analytic, k->grads, OC_MAX_INPUTS * sizeof *analytic);
    double h = k->c->h ? k->c->h : STEP;
    int compared = 0, mismatches = 0;
    for (int s = 0; s < k->n_sources && compared >= 0; s++) {
        double *x = eg_tensor_data(k->sources[s]);
        for (int64_t j = 0; j < analytic[s].n_elems; j++) {
            double saved = x[j], plus, minus;
            x[j] = saved + h;
            bool ok = f(k, &plus);
            x[j] = saved - h;
            ok = ok && f(k, &minus);
            x[j] = saved;
            if (!ok) {
                fprintf(stderr, "case '%s': evaluation failed: %s\n", k->c->name, eg_last_error());
                compared = -1;
                break;
            }
            double numeric = (plus - minus) / (2 * h);
            if (!close_enough(analytic[s].data[j], numeric) && mismatches++ < 3)
                fprintf(stderr,
                        "FAIL case %d '%s': %s of input %d element %lld: analytic %.12g, "
                        "numeric %.12g\n",
                        k->index, k->c->name, what, k->source_input[s], (long long)j,
                        analytic[s].data[j], numeric);
            compared++;
        }
    }
    free(analytic);
    return mismatches ? -1 : compared;
}

/* Which cases a gradient check applies to. */
static bool differentiable_case(const oc_case *c) {
    return !(eg__op_defs[c->op].flags & EG__OPF_NO_GRAD) && !(c->flags & OC_FORWARD_ONLY) &&
           oc_case_has_float_input(c);
}

/* Runs the first- or second-order check over every differentiable case; fails listing each op
 * without NO_GRAD that no case checked. */
static void run_all(bool second_order) {
    int checked_per_op[EG__OP_COUNT] = {0};
    int failures = 0, checked = 0, elements = 0;
    for (int i = 0; i < oc_n_cases; i++) {
        const oc_case *c = &oc_cases[i];
        if (!differentiable_case(c)) continue;
        eg_clear_error();
        eg_scope_begin();
        check k;
        int ready = check_begin(&k, c, i);
        failures += ready < 0;
        if (ready > 0) {
            bool ok = second_order ? second_order_gradient(&k) : analytic_gradient(&k);
            int n =
                ok ? compare_with_differences(&k, second_order ? second_order_value : loss_value,
                                              second_order ? "d(V.grad)/dx" : "dL/dx")
                   : -1;
            if (n < 0) {
                if (!ok)
                    fprintf(stderr, "FAIL case %d '%s': no gradient: %s\n", i, c->name,
                            eg_last_error());
                failures++;
            } else {
                checked++;
                elements += n;
                checked_per_op[c->op]++;
            }
        }
        check_end(&k);
        eg_scope_end();
    }
    int uncovered = 0;
    for (int op = 0; op < EG__OP_COUNT; op++) {
        if ((eg__op_defs[op].flags & EG__OPF_NO_GRAD) || checked_per_op[op]) continue;
        fprintf(stderr, "op '%s' is differentiable but no case checked its gradient\n",
                eg__op_defs[op].name);
        uncovered++;
    }
    fprintf(stderr, "%s: %d cases, %d elements checked, %d failed\n",
            second_order ? "second order" : "first order", checked, elements, failures);
    assert_int_equal(uncovered, 0);
    assert_int_equal(failures, 0);
    assert_true(elements > 0);
}

static void test_gradients_match_differences(void **state) {
    (void)state;
    run_all(false);
}

static void test_second_order_gradients_match_differences(void **state) {
    (void)state;
    run_all(true);
}

/* ---- second order on known functions ---- */

/* cmocka's assert_float_equal works in float; these need doubles. */
#define assert_close(got, want, tol) check_close_at((got), (want), (tol), __FILE__, __LINE__)
static void check_close_at(double got, double want, double tol, const char *file, int line) {
    if (!(fabs(got - want) <= tol))
        fail_msg("%s:%d: %.17g, expected %.17g (tolerance %g)", file, line, got, want, tol);
}

static const double xs[5] = {0.3, -1.2, 2.0, 0.7, -0.4};

static eg_tensor *cube_by_mul(const eg_tensor *x) {
    return eg_mul(eg_mul(x, x), x);
}
static eg_tensor *cube_by_pow(const eg_tensor *x) {
    return eg_pow_scalar(x, 3.0);
}

/* d/dx sum(x^3) = 3x^2, d2 = 6x, d3 = 6, with three nested tapes. */
static void check_cube(eg_tensor *(*cube)(const eg_tensor *)) {
    eg_scope_begin();
    eg_tensor *x = eg_tensor_from_data(xs, EG_DTYPE_F64, 1, (int64_t[]){5});
    eg_tape *tapes[3];
    for (int t = 0; t < 3; t++) {
        tapes[t] = eg_tape_begin(false);
        assert_int_equal(eg_tape_watch(tapes[t], x), EG_OK);
    }
    eg_tensor *y = eg_sum(cube(x), 0, NULL, false);
    for (int order = 0; order < 3; order++) {
        eg_tensor *g = NULL;
        /* the innermost tape differentiates first; outer tapes record that computation */
        assert_int_equal(eg_tape_gradient(tapes[2 - order], y, 1, &x, &g, EG_UNCONNECTED_NULL),
                         EG_OK);
        assert_non_null(g);
        for (int i = 0; i < 5; i++) {
            double expected = order == 0 ? 3 * xs[i] * xs[i] : order == 1 ? 6 * xs[i] : 6;
            assert_close(eg_tensor_get(g, (int64_t[]){i}), expected, 1e-12);
        }
        y = eg_sum(g, 0, NULL, false);
    }
    for (int t = 0; t < 3; t++) eg_tape_free(tapes[t]);
    assert_int_equal(eg_scope_end(), EG_OK);
}

static void test_second_order_of_cube(void **state) {
    (void)state;
    check_cube(cube_by_mul);
    check_cube(cube_by_pow);
}

/* d/dx tanh = 1 - tanh^2, d2/dx2 tanh = -2 tanh (1 - tanh^2): the gradient of the gradient. */
static void test_second_order_of_tanh(void **state) {
    (void)state;
    eg_scope_begin();
    eg_tensor *x = eg_tensor_from_data(xs, EG_DTYPE_F64, 1, (int64_t[]){5});
    eg_tape *outer = eg_tape_begin(false);
    eg_tape_watch(outer, x);
    eg_tape *inner = eg_tape_begin(false);
    eg_tape_watch(inner, x);
    eg_tensor *y = eg_tanh(x), *g = NULL, *gg = NULL;
    assert_int_equal(eg_tape_gradient(inner, y, 1, &x, &g, EG_UNCONNECTED_NULL), EG_OK);
    assert_int_equal(eg_tape_gradient(outer, g, 1, &x, &gg, EG_UNCONNECTED_NULL), EG_OK);
    for (int i = 0; i < 5; i++) {
        double t = tanh(xs[i]);
        assert_close(eg_tensor_get(g, (int64_t[]){i}), 1 - t * t, 1e-12);
        assert_close(eg_tensor_get(gg, (int64_t[]){i}), -2 * t * (1 - t * t), 1e-12);
    }
    eg_tape_free(inner);
    eg_tape_free(outer);
    assert_int_equal(eg_scope_end(), EG_OK);
}

/* max/min give the gradient to the extreme elements, shared equally among ties. */
static void test_max_ties_share_the_gradient(void **state) {
    (void)state;
    eg_scope_begin();
    const double values[6] = {1, 3, 3, 2, 2, -1};
    eg_tensor *x = eg_tensor_from_data(values, EG_DTYPE_F64, 2, (int64_t[]){2, 3});
    eg_tape *tape = eg_tape_begin(true);
    eg_tape_watch(tape, x);
    eg_tensor *row_max = eg_max(x, 1, (int[]){1}, false);
    eg_tensor *all_min = eg_min(eg_slice(x, 1, 0, 2, 1), 0, NULL, false);
    eg_tensor *g = NULL, *h = NULL;
    assert_int_equal(eg_tape_gradient(tape, row_max, 1, &x, &g, EG_UNCONNECTED_NULL), EG_OK);
    assert_int_equal(eg_tape_gradient(tape, all_min, 1, &x, &h, EG_UNCONNECTED_NULL), EG_OK);
    const double want_g[6] = {0, 0.5, 0.5, 0.5, 0.5, 0}, want_h[6] = {1, 0, 0, 0, 0, 0};
    for (int i = 0; i < 6; i++) {
        int64_t index[2] = {i / 3, i % 3};
        assert_close(eg_tensor_get(g, index), want_g[i], 1e-15);
        assert_close(eg_tensor_get(h, index), want_h[i], 1e-15);
    }
    eg_tape_free(tape);
    assert_int_equal(eg_scope_end(), EG_OK);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradients_match_differences),
        cmocka_unit_test(test_second_order_of_cube),
        cmocka_unit_test(test_second_order_of_tanh),
        cmocka_unit_test(test_max_ties_share_the_gradient),
        cmocka_unit_test(test_second_order_gradients_match_differences),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    eg_shutdown();
    return failed;
}
