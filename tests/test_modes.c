/* Eager, lazy and graph modes must agree: every case of the op table (tests/op_cases.c), in f32
 * and f64, run eagerly, lazily (then realized) and as a traced function (traced, then replayed
 * twice), must give bitwise-identical results — the same kernels run on the same values in the
 * same order; fusion only removes the buffers between them. */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "eagle/lazy.h"
#include "device_test_util.h"
#include "op_cases.h"

static int n_outputs_of_case;

static eg_status traced_case(eg_tensor *const *inputs, eg_tensor **outputs, void *user) {
    const oc_case *c = user;
    int n = c->apply(c, inputs, outputs);
    return n == n_outputs_of_case ? EG_OK : EG_ERR_INTERNAL;
}

/* Whether a and b hold the same values: bitwise, or (within_tolerance) to 1e-5 relative in f32,
 * 1e-12 in f64. */
static bool same_values_to(const eg_tensor *a, const eg_tensor *b, bool within_tolerance) {
    static oc_ref x, y;
    if (!oc_read(a, &x) || !oc_read(b, &y)) return false;
    if (x.dtype != y.dtype || x.n_dims != y.n_dims || x.n_elems != y.n_elems) return false;
    if (memcmp(x.shape, y.shape, sizeof(int64_t) * (size_t)x.n_dims)) return false;
    double rtol = x.dtype == EG_DTYPE_F64 ? 1e-12 : 1e-5;
    for (int64_t i = 0; i < x.n_elems; i++) {
        if (memcmp(&x.data[i], &y.data[i], sizeof(double)) == 0) continue;
        double p = x.data[i], q = y.data[i];
        if (!within_tolerance || !(fabs(p - q) <= rtol / 10 + rtol * fabs(p))) return false;
    }
    return true;
}

static bool same_values(const eg_tensor *a, const eg_tensor *b) {
    return same_values_to(a, b, false);
}

/* A traced function takes a row-major copy of an input that is a strided view
 * (src/graph/function.c), so its products see other layouts than the eager call's. On the CPU
 * that changes no bits (the GEMM packs every layout the same way); cuBLASLt picks another kernel
 * for another transpose, which sums in another order. There the graph's results are held to the
 * device tolerance instead. */
static bool graph_may_differ(eg_tensor *const *views, int n) {
    const eg_device *device = n ? eg_tensor_device(views[0]) : NULL;
    if (!device || eg_device_kind(device) == EG_DEVICE_CPU) return false;
    for (int i = 0; i < n; i++)
        if (!eg_tensor_is_contiguous(views[i])) return true;
    return false;
}

static int run_case(const oc_case *c, eg_dtype dtype, uint64_t seed, char *why, size_t size) {
    eg_scope_begin();
    oc_inputs inputs;
    eg_tensor *views[OC_MAX_INPUTS] = {0};
    int failures = 0;
    if (!oc_inputs_make(c, dtype, seed, &inputs) || !oc_inputs_views(&inputs, views)) {
        snprintf(why, size, "could not make inputs");
        eg_scope_end();
        return 1;
    }
    eg_tensor *eager[OC_MAX_OUTPUTS] = {0}, *lazy[OC_MAX_OUTPUTS] = {0};
    int n = c->apply(c, views, eager);
    if (n <= 0) { /* the op refuses these inputs eagerly: nothing to compare */
        eg_clear_error();
        oc_inputs_free(&inputs);
        eg_scope_end();
        return 0;
    }
    eg_lazy_begin();
    int n_lazy = c->apply(c, views, lazy);
    eg_lazy_end();
    if (n_lazy != n) {
        snprintf(why, size, "lazy: %d outputs, eager %d (%s)", n_lazy, n, eg_last_error());
        failures++;
    } else {
        for (int i = 0; i < n; i++) {
            if (eg_tensor_is_realized(lazy[i]) && !eg_tensor_is_realized(eager[i])) {
                snprintf(why, size, "lazy output %d already has storage", i);
                failures++;
            }
        }
        if (eg_realize(n, lazy) != EG_OK) {
            snprintf(why, size, "lazy: realize failed: %s", eg_last_error());
            failures++;
        }
        for (int i = 0; i < n && !failures; i++)
            if (!same_values(eager[i], lazy[i])) {
                snprintf(why, size, "lazy output %d differs from eager", i);
                failures++;
            }
    }
    n_outputs_of_case = n;
    eg_function *f = eg_function_new(c->name, traced_case, inputs.n, n, (void *)c);
    bool tolerant = graph_may_differ(views, inputs.n);
    for (int call = 0; call < 3 && !failures; call++) {
        eg_tensor *graph[OC_MAX_OUTPUTS] = {0};
        if (eg_function_call(f, views, graph) != EG_OK) {
            snprintf(why, size, "graph call %d failed: %s", call, eg_last_error());
            failures++;
            break;
        }
        for (int i = 0; i < n && !failures; i++)
            if (!same_values_to(eager[i], graph[i], tolerant)) {
                snprintf(why, size, "graph call %d: output %d differs from eager", call, i);
                failures++;
            }
        for (int i = 0; i < n; i++) eg_release(graph[i]);
    }
    eg_function_stats stats;
    if (!failures && eg_function_stats_get(f, &stats) == EG_OK && stats.n_traces != 1) {
        snprintf(why, size, "%d traces for one signature", stats.n_traces);
        failures++;
    }
    eg_function_free(f);
    oc_inputs_free(&inputs);
    eg_scope_end();
    return failures;
}

static void test_every_case_agrees_in_all_modes(void **state) {
    (void)state;
    int failures = 0, runs = 0;
    const eg_dtype dtypes[2] = {EG_DTYPE_F32, EG_DTYPE_F64};
    for (int i = 0; i < oc_n_cases; i++) {
        const oc_case *c = &oc_cases[i];
        for (int d = 0; d < (oc_case_has_float_input(c) ? 2 : 1); d++) {
            char why[512] = "";
            int f = run_case(c, dtypes[d], 1000u + (uint64_t)i, why, sizeof why);
            runs++;
            if (f) {
                fprintf(stderr, "case %d '%s' (%s): %s\n", i, c->name, eg_dtype_name(dtypes[d]),
                        why);
                failures++;
            }
            eg_clear_error();
        }
    }
    fprintf(stderr, "%d runs of %d cases in three modes\n", runs, oc_n_cases);
    assert_true(runs >= oc_n_cases);
    assert_int_equal(failures, 0);
}

int main(int argc, char **argv) {
    const eg_device *device = test_device_or_skip("test_modes");
    if (device) eg_device_scope_begin(device);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_case_agrees_in_all_modes),
    };
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    if (device) eg_device_scope_end();
    return failed;
}
