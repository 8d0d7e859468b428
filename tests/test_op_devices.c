/* The op × device table (DESIGN.md: "one test walks the op table on every device against the CPU
 * reference"), like ggml's test-backend-ops: every case of tests/op_cases.c, in f32 and (where
 * the case has float inputs) f64, runs on every visible device and is compared with the same case
 * on cpu:0, the reference device; so are the analytic gradients of every case test_gradcheck
 * checks; and eg_device_supports_op (what `eagle info --ops` prints) is held to what the calls
 * really do.
 *
 * Why comparing with cpu:0 is enough: test_ops checks cpu:0's forward results against plain-C
 * references computed in doubles, and test_gradcheck checks cpu:0's f64 gradients of
 * sum(out * W) against central differences in double precision (and its second-order ones).
 * A device whose results equal cpu:0's bit for bit is therefore checked against both, with no
 * tolerance of its own. f32 gradients are compared across devices here too; their correctness
 * rests on the f64 ones (the same backward rules, written with Eagle ops).
 *
 * Placement. A case's inputs are created on device d by making them inside
 * eg_device_scope_begin(d) … eg_device_scope_end(), not by eg_tensor_to from cpu:0: that is how
 * a program puts data on a device, each input then has one owner on d and nothing on cpu:0 to
 * keep alive, and the values are the same bits on every device because the host-side generator
 * makes them before the device sees them. The views the op sees and the op itself are made
 * OUTSIDE the device scope (the current device is then cpu:0), so an op that made a helper
 * tensor on the current device instead of its inputs' device (a scalar, a mask, a seed
 * gradient) fails here: results must follow their inputs, not the thread's device scope.
 *
 * Dropout-style cases (a `check` function instead of a reference) are compared bitwise too: the
 * mask is Philox's function of the seed and the element's index, not of the device, so the same
 * seed must give the same bits everywhere (it does); they are also held to their property check
 * on every device.
 *
 * Run with EG_CPU_DEVICES=2 (tests/CMakeLists.txt sets it), so that cpu:1, a separate memory
 * space with its own allocator, is walked; with EG_CPU_DEVICES unset the host is one device and
 * the test compares it with itself (the runs must still be deterministic). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "eagle/autograd.h"
#include "eagle/runtime.h"
#include "device_test_util.h"
#include "op_cases.h"
#include "op_reference.h"

/* Devices of another kind than the CPU (cuda:N) may compute differently from it: contracted
 * multiply-adds, other reduction orders and their own math libraries change the last bits.
 * Their results are compared with cpu:0's within these relative tolerances (absolute ones a
 * tenth of them, for values near 0) instead of bitwise. Integer and bool results are compared
 * exactly everywhere. Every CPU device, an opaque one too (EG_CPU_DEVICES_OPAQUE: memory the host
 * reaches through copies only), runs the CPU's kernels: bitwise. */
#define NON_HOST_RTOL_F32 1e-5
#define NON_HOST_RTOL_F64 1e-12

/* ---- failures, listed as "op 'name' case 'case' on cpu:1: reason" ---- */

static int failures;
static struct {
    int forward_runs, forward_compared, gradient_runs, gradient_compared, dtype_runs;
    int unsupported_runs; /* on a device of another kind, refused as unsupported */
} totals;
/* The ops some device of another kind refused (listed once at the end). */
static bool refused_op[EG__OP_COUNT];

/* Whether a failed run on `device` is a clean refusal of an op the device lacks rather than a
 * failure: a CPU device runs every op cpu:0 runs; a GPU may lack kernels (and says so through
 * eg_device_supports_op, which test_supports_op_matches_the_calls holds to the calls), and a
 * case may need one of those even where its own op's probe says yes (a cast to f16, a
 * composite's other ops). */
static bool refused(const oc_case *c, const eg_device *device, eg_status status) {
    if (eg_device_kind(device) == EG_DEVICE_CPU) return false;
    if (status != EG_ERR_UNSUPPORTED && status != EG_ERR_DTYPE) return false;
    totals.unsupported_runs++;
    refused_op[c->op] = true;
    return true;
}

static void failure(const oc_case *c, const eg_device *device, const char *format, ...)
    __attribute__((format(printf, 3, 4)));
static void failure(const oc_case *c, const eg_device *device, const char *format, ...) {
    char reason[768];
    va_list args;
    va_start(args, format);
    vsnprintf(reason, sizeof reason, format, args);
    va_end(args);
    fprintf(stderr, "op '%s' case '%s' on %s: %s\n", eg__op_defs[c->op].name, c->name,
            eg_device_name(device), reason);
    failures++;
}

/* ---- one run of a case: its outputs (or gradients) copied to the host ---- */

typedef struct run_result {
    int n; /* outputs or gradients; -1: the run failed */
    eg_dtype dtype[OC_MAX_INPUTS];
    int n_dims[OC_MAX_INPUTS];
    int64_t shape[OC_MAX_INPUTS][EG_MAX_DIMS];
    int64_t n_elems[OC_MAX_INPUTS];
    unsigned char *bytes[OC_MAX_INPUTS];
    char error[512];
    eg_status status; /* the op's error when the op itself failed, else EG_OK */
} run_result;

static void result_free(run_result *r) {
    for (int k = 0; k < OC_MAX_INPUTS; k++) free(r->bytes[k]);
    memset(r, 0, sizeof *r);
}

static bool result_fail(run_result *r, const char *format, ...)
    __attribute__((format(printf, 2, 3)));
static bool result_fail(run_result *r, const char *format, ...) {
    va_list args;
    va_start(args, format);
    vsnprintf(r->error, sizeof r->error, format, args);
    va_end(args);
    r->n = -1;
    return false;
}

/* Copies t (on any device) into slot k of r. */
static bool result_take(run_result *r, int k, const eg_tensor *t) {
    eg_dtype dtype = eg_tensor_dtype(t);
    int64_t n = eg_tensor_n_elems(t);
    size_t size = (size_t)n * eg_dtype_size(dtype);
    r->dtype[k] = dtype;
    r->n_dims[k] = eg_tensor_n_dims(t);
    memcpy(r->shape[k], eg_tensor_shape(t), sizeof(int64_t) * (size_t)r->n_dims[k]);
    r->n_elems[k] = n;
    r->bytes[k] = malloc(size ? size : 1);
    if (!r->bytes[k]) return result_fail(r, "out of host memory");
    if (eg_tensor_copy_to_host(t, r->bytes[k], size) != EG_OK)
        return result_fail(r, "cannot read result %d: %s", k, eg_last_error());
    return true;
}

static double element(const run_result *r, int k, int64_t i) {
    const unsigned char *p = r->bytes[k] + (size_t)i * eg_dtype_size(r->dtype[k]);
    float f;
    switch (r->dtype[k]) {
    case EG_DTYPE_F32:
        memcpy(&f, p, sizeof f);
        return f;
    case EG_DTYPE_F64: {
        double d;
        memcpy(&d, p, sizeof d);
        return d;
    }
    case EG_DTYPE_F16:
        eg_f16_to_f32((const uint16_t *)(const void *)p, &f, 1);
        return f;
    case EG_DTYPE_BF16:
        eg_bf16_to_f32((const uint16_t *)(const void *)p, &f, 1);
        return f;
    case EG_DTYPE_I32: {
        int32_t v;
        memcpy(&v, p, sizeof v);
        return v;
    }
    case EG_DTYPE_I64: {
        int64_t v;
        memcpy(&v, p, sizeof v);
        return (double)v;
    }
    default:
        return *p;
    }
}

static bool same_kernels(const eg_device *device) {
    return eg_device_kind(device) == EG_DEVICE_CPU;
}

/* Whether got equals want: bitwise on CPU devices, within the tolerances elsewhere. */
static bool same_results(const run_result *want, const run_result *got, bool bitwise, char *why,
                         size_t why_size) {
    if (got->n != want->n) {
        snprintf(why, why_size, "%d results, cpu:0 gives %d", got->n, want->n);
        return false;
    }
    for (int k = 0; k < want->n; k++) {
        bool same_shape =
            got->dtype[k] == want->dtype[k] && got->n_dims[k] == want->n_dims[k] &&
            memcmp(got->shape[k], want->shape[k], sizeof(int64_t) * (size_t)want->n_dims[k]) == 0;
        if (!same_shape) {
            snprintf(why, why_size,
                     "result %d is %s with %d dims (%lld elements), cpu:0's %s "
                     "with %d (%lld)",
                     k, eg_dtype_name(got->dtype[k]), got->n_dims[k], (long long)got->n_elems[k],
                     eg_dtype_name(want->dtype[k]), want->n_dims[k], (long long)want->n_elems[k]);
            return false;
        }
        size_t size = eg_dtype_size(want->dtype[k]);
        bool is_float = eg_dtype_is_float(want->dtype[k]);
        double rtol = want->dtype[k] == EG_DTYPE_F64 ? NON_HOST_RTOL_F64 : NON_HOST_RTOL_F32;
        for (int64_t i = 0; i < want->n_elems[k]; i++) {
            bool same;
            double a = element(want, k, i), b = element(got, k, i);
            if (bitwise || !is_float)
                same = memcmp(want->bytes[k] + (size_t)i * size, got->bytes[k] + (size_t)i * size,
                              size) == 0;
            else
                same =
                    (isnan(a) && isnan(b)) || a == b || fabs(a - b) <= rtol / 10 + rtol * fabs(a);
            if (!same) {
                snprintf(why, why_size, "result %d element %lld is %.17g, cpu:0's is %.17g (%s)", k,
                         (long long)i, b, a, bitwise ? "bitwise" : "beyond the tolerance");
                return false;
            }
        }
    }
    return true;
}

/* ---- making a case's inputs on a device ---- */

static const eg_device *reference;

/* The case's inputs created on `device` (inside its device scope), the float ones in
 * float_dtype: f32 and f64 straight from the generator, f16 and bf16 cast from its f32 values
 * (on cpu:0, then copied over, where the device cannot cast to them). Then the views the op
 * sees, made outside the scope. false with the reason in r. */
static bool inputs_on(const oc_case *c, int index, eg_dtype float_dtype, const eg_device *device,
                      oc_inputs *inputs, eg_tensor **views, run_result *r) {
    bool narrow = float_dtype == EG_DTYPE_F16 || float_dtype == EG_DTYPE_BF16;
    bool via_host = narrow && !eg_device_supports_op(device, EG__OP_CAST, float_dtype);
    assert_int_equal(eg_device_scope_begin(via_host ? reference : device), EG_OK);
    bool ok = oc_inputs_make(c, narrow ? EG_DTYPE_F32 : float_dtype, (uint64_t)index + 1, inputs);
    for (int i = 0; ok && narrow && i < inputs->n; i++)
        if (inputs->is_float[i] && strncmp(c->inputs[i], "Fs ", 3) != 0) {
            ok = (inputs->base[i] = eg_cast(inputs->base[i], float_dtype)) != NULL;
            /* the values the property checks see: rounded as the cast rounds them */
            oc_ref *ref = &inputs->ref[i];
            ref->dtype = float_dtype;
            for (int64_t k = 0; k < ref->n_elems; k++)
                ref->data[k] = oc_convert(float_dtype, ref->data[k]);
        }
    for (int i = 0; ok && via_host && i < inputs->n; i++)
        ok = (inputs->base[i] = eg_tensor_to(inputs->base[i], device)) != NULL;
    assert_int_equal(eg_device_scope_end(), EG_OK);
    if (!ok) return result_fail(r, "cannot make the inputs: %s", eg_last_error());
    for (int i = 0; i < inputs->n; i++)
        if (eg_tensor_device(inputs->base[i]) != device)
            return result_fail(r, "input %d was made on %s, not in the device scope's %s", i,
                               eg_device_name(eg_tensor_device(inputs->base[i])),
                               eg_device_name(device));
    if (!oc_inputs_views(inputs, views))
        return result_fail(r, "cannot make the input views: %s", eg_last_error());
    return true;
}

/* Where a case's results must live when its inputs are on `device`: there, except for
 * to_device, which tests/op_cases.c's apply_to_device sends to the last visible device (and with
 * p[0] = 1 back to its input's device). */
static const eg_device *expected_device(const oc_case *c, const eg_device *device) {
    if (c->op == EG__OP_TO_DEVICE && !c->p[0]) return eg_device_at(eg_device_count() - 1);
    return device;
}

/* ---- forward results ---- */

/* Runs case c with F = float_dtype on `device` into r; false (reason in r) when it fails or a
 * result is misplaced. Dropout-style cases (a `check` function) are also held to their
 * properties here, on every device. */
static bool run_forward(const oc_case *c, int index, eg_dtype float_dtype, const eg_device *device,
                        run_result *r) {
    memset(r, 0, sizeof *r);
    eg_clear_error();
    eg_scope_begin();
    oc_inputs inputs = {0};
    eg_tensor *views[OC_MAX_INPUTS], *out[OC_MAX_OUTPUTS] = {0};
    bool ok = inputs_on(c, index, float_dtype, device, &inputs, views, r);
    int n = ok ? c->apply(c, views, out) : -1;
    if (ok && n < 0) {
        eg_status status = eg_last_status();
        ok = result_fail(r, "the op failed: %s", eg_last_error());
        r->status = status;
    }
    if (ok) r->n = n;
    const eg_device *where = expected_device(c, device);
    for (int k = 0; ok && k < n; k++) {
        if (eg_tensor_device(out[k]) != where)
            ok = result_fail(r, "result %d lives on %s, expected %s", k,
                             eg_device_name(eg_tensor_device(out[k])), eg_device_name(where));
        else
            ok = result_take(r, k, out[k]);
    }
    if (ok && c->check) {
        oc_ref *got = calloc(OC_MAX_OUTPUTS, sizeof *got);
        char why[256] = "";
        assert_non_null(got);
        for (int k = 0; ok && k < n; k++)
            if (!oc_read(out[k], &got[k])) ok = result_fail(r, "cannot read result %d", k);
        if (ok && !c->check(c, inputs.ref, n, got, why, sizeof why))
            ok = result_fail(r, "the property check fails: %s", why);
        free(got);
    }
    if (ok && eg_last_status() != EG_OK)
        ok = result_fail(r, "an error is left pending: %s", eg_last_error());
    eg_scope_end();
    oc_inputs_free(&inputs);
    eg_clear_error();
    return ok;
}

/* ---- gradients ---- */

/* The cases test_gradcheck checks: differentiable ops, not forward-only, with float inputs. */
static bool gradient_case(const oc_case *c) {
    return !(eg__op_defs[c->op].flags & EG__OPF_NO_GRAD) && !(c->flags & OC_FORWARD_ONLY) &&
           oc_case_has_float_input(c);
}

/* W for result k (shaped like it, in its dtype, on its device): the same values on every device
 * (uniform in [-1, 1] from the case's index, like test_gradcheck's). */
static eg_tensor *weights_for(const eg_tensor *result, int index, int k) {
    int64_t n = eg_tensor_n_elems(result);
    eg_dtype dtype = eg_tensor_dtype(result);
    double *values = malloc(sizeof(double) * (size_t)(n ? n : 1));
    float *narrow = malloc(sizeof(float) * (size_t)(n ? n : 1));
    assert_true(values && narrow);
    oc_rng rng = {(uint64_t)index * 7919 + 3 + (uint64_t)k * 104729};
    for (int64_t i = 0; i < n; i++) narrow[i] = (float)(values[i] = oc_rng_uniform(&rng, -1, 1));
    assert_int_equal(eg_device_scope_begin(eg_tensor_device(result)), EG_OK);
    eg_tensor *w = eg_tensor_from_data(dtype == EG_DTYPE_F64 ? (const void *)values : narrow, dtype,
                                       eg_tensor_n_dims(result), eg_tensor_shape(result));
    assert_int_equal(eg_device_scope_end(), EG_OK);
    free(values);
    free(narrow);
    return w;
}

/* dL/d(float inputs) of L = sum_k sum(out_k * W_k), from a tape, on `device`, into r. 0: the case
 * has a result that is not f32 or f64 (nothing to weigh; test_gradcheck skips those too); 1: r
 * holds the gradients; -1: a failure (reason in r). */
static int run_gradient(const oc_case *c, int index, eg_dtype float_dtype, const eg_device *device,
                        run_result *r) {
    memset(r, 0, sizeof *r);
    eg_clear_error();
    eg_scope_begin();
    oc_inputs inputs = {0};
    eg_tensor *views[OC_MAX_INPUTS], *out[OC_MAX_OUTPUTS] = {0}, *sources[OC_MAX_INPUTS];
    eg_tensor *grads[OC_MAX_INPUTS] = {0};
    int n_sources = 0, verdict = 1;
    eg_tape *tape = eg_tape_begin(false);
    assert_non_null(tape);
    bool ok = inputs_on(c, index, float_dtype, device, &inputs, views, r);
    for (int i = 0; ok && i < inputs.n; i++) {
        if (!inputs.is_float[i]) continue;
        sources[n_sources++] = inputs.base[i];
        assert_int_equal(eg_tape_watch(tape, inputs.base[i]), EG_OK);
    }
    /* the views are recorded too: gradients flow to the created tensors through them */
    ok = ok && oc_inputs_views(&inputs, views);
    int n = ok ? c->apply(c, views, out) : -1;
    if (ok && n < 1) {
        r->status = eg_last_status();
        ok = result_fail(r, "the op failed: %s", eg_last_error());
    }
    eg_tensor *loss = NULL;
    for (int k = 0; ok && k < n; k++) {
        eg_dtype dtype = eg_tensor_dtype(out[k]);
        if (dtype != EG_DTYPE_F32 && dtype != EG_DTYPE_F64) {
            verdict = 0;
            break;
        }
        eg_tensor *term = eg_sum(eg_mul(out[k], weights_for(out[k], index, k)), 0, NULL, false);
        loss = loss ? eg_add(loss, term) : term;
        if (!loss) ok = result_fail(r, "cannot form the loss: %s", eg_last_error());
    }
    if (ok && verdict == 1 &&
        eg_tape_gradient(tape, loss, n_sources, sources, grads, EG_UNCONNECTED_ZERO) != EG_OK)
        ok = result_fail(r, "no gradient: %s", eg_last_error());
    eg_tape_free(tape);
    if (ok && verdict == 1) r->n = n_sources;
    for (int s = 0; ok && verdict == 1 && s < n_sources; s++) {
        if (eg_tensor_device(grads[s]) != device)
            ok = result_fail(r, "the gradient of source %d lives on %s, its input on %s", s,
                             eg_device_name(eg_tensor_device(grads[s])), eg_device_name(device));
        else
            ok = result_take(r, s, grads[s]);
    }
    if (ok && verdict == 1 && eg_last_status() != EG_OK)
        ok = result_fail(r, "an error is left pending: %s", eg_last_error());
    eg_scope_end();
    oc_inputs_free(&inputs);
    eg_clear_error();
    return ok ? verdict : -1;
}

/* ---- the tests ---- */

/* cpu:0 (`reference`, declared above): the reference every device is compared with. */

/* With EG_CPU_DEVICES=N (N >= 2) at least two devices must be visible, or cpu:1 would silently
 * go untested. Prints the devices walked. */
static void test_devices_are_walked(void **state) {
    (void)state;
    const char *setting = getenv("EG_CPU_DEVICES");
    long wanted = setting && *setting ? strtol(setting, NULL, 10) : 1;
    int n = eg_device_count();
    fprintf(stderr, "walking %d device(s) against %s:", n, eg_device_name(reference));
    for (int d = 0; d < n; d++) fprintf(stderr, " %s", eg_device_name(eg_device_at(d)));
    fprintf(stderr, "%s\n",
            n < 2 ? " (one device: compared with itself; EG_CPU_DEVICES=2 walks cpu:1)" : "");
    if (wanted >= 2 && n < 2)
        fail_msg("EG_CPU_DEVICES=%s but only %d device is visible: cpu:1 would not be tested",
                 setting, n);
    assert_ptr_equal(eg_device_at(0), reference);
}

/* The op table's side: every op has a case, and every op's dtype probe
 * (src/ops/schema_dtypes.c) accepts some dtype, else its template row is wrong and `eagle info
 * --ops` would show it as unsupported everywhere. */
static void test_every_op_has_a_case(void **state) {
    (void)state;
    int cases_per_op[EG__OP_COUNT] = {0}, problems = 0;
    for (int i = 0; i < oc_n_cases; i++)
        if ((unsigned)oc_cases[i].op < EG__OP_COUNT) cases_per_op[oc_cases[i].op]++;
    assert_int_equal(eg_op_count(), EG__OP_COUNT);
    assert_null(eg_op_name(-1));
    assert_null(eg_op_name(EG__OP_COUNT));
    for (int op = 0; op < EG__OP_COUNT; op++) {
        assert_string_equal(eg_op_name(op), eg__op_defs[op].name);
        if (!cases_per_op[op]) {
            fprintf(stderr, "op '%s' has no case in tests/op_cases.c\n", eg__op_defs[op].name);
            problems++;
        }
        bool any = false;
        for (int dtype = 0; dtype < EG_DTYPE_COUNT; dtype++)
            any |= eg__op_accepts_dtype((eg__op)op, (eg_dtype)dtype);
        if (!any) {
            fprintf(stderr,
                    "op '%s': its dtype probe accepts no dtype (a missing or bad row in "
                    "src/ops/schema_dtypes.c)\n",
                    eg__op_defs[op].name);
            problems++;
        }
    }
    /* the probe leaves a pending error as it was, and raises none of its own */
    eg_clear_error();
    assert_false(eg_device_supports_op(reference, EG__OP_MATMUL, EG_DTYPE_I32));
    assert_int_equal(eg_last_status(), EG_OK);
    assert_null(eg_device_get("cpu:99"));
    eg_status pending = eg_last_status();
    char message[1024];
    snprintf(message, sizeof message, "%s", eg_last_error());
    assert_true(eg_device_supports_op(reference, EG__OP_MATMUL, EG_DTYPE_F32));
    /* bf16 runs elementwise ops on the CPU; softmax stays f32 / f64 (ops/infer.c) */
    assert_true(eg_device_supports_op(reference, EG__OP_EXP, EG_DTYPE_BF16));
    assert_false(eg_device_supports_op(reference, EG__OP_SOFTMAX, EG_DTYPE_BF16));
    assert_int_equal(eg_last_status(), pending);
    assert_string_equal(eg_last_error(), message);
    eg_clear_error();
    assert_false(eg_device_supports_op(NULL, EG__OP_MATMUL, EG_DTYPE_F32));
    assert_false(eg_device_supports_op(reference, -1, EG_DTYPE_F32));
    assert_false(eg_device_supports_op(reference, EG__OP_COUNT, EG_DTYPE_F32));
    assert_false(eg_device_supports_op(reference, EG__OP_MATMUL, EG_DTYPE_COUNT));
    assert_int_equal(problems, 0);
}

/* Every case, f32 and f64, and bf16 and f16 where cpu:0 takes them, on every device, bitwise
 * against cpu:0. */
static void test_forward_on_every_device(void **state) {
    (void)state;
    static const eg_dtype float_dtypes[] = {EG_DTYPE_F32, EG_DTYPE_F64, EG_DTYPE_BF16,
                                            EG_DTYPE_F16};
    int before = failures;
    for (int i = 0; i < oc_n_cases; i++) {
        const oc_case *c = &oc_cases[i];
        for (int pass = 0; pass < 4; pass++) {
            eg_dtype float_dtype = float_dtypes[pass];
            if (pass && !oc_case_has_float_input(c)) continue;
            if (pass >= 2 && !eg_device_supports_op(reference, c->op, float_dtype)) continue;
            run_result want, got;
            if (!run_forward(c, i, float_dtype, reference, &want)) {
                if (pass >= 2 && (c->flags & OC_COMPOSITE) && want.status == EG_ERR_DTYPE) {
                    result_free(&want); /* an f32-only op inside the case */
                    continue;
                }
                failure(c, reference, "%s: %s", eg_dtype_name(float_dtype), want.error);
                result_free(&want);
                continue;
            }
            totals.forward_runs++;
            for (int d = 0; d < eg_device_count(); d++) {
                const eg_device *device = eg_device_at(d);
                char why[512];
                if (!run_forward(c, i, float_dtype, device, &got)) {
                    if (!refused(c, device, got.status))
                        failure(c, device, "%s: %s", eg_dtype_name(float_dtype), got.error);
                } else if (!same_results(&want, &got, same_kernels(device), why, sizeof why)) {
                    failure(c, device, "%s: %s", eg_dtype_name(float_dtype), why);
                } else {
                    totals.forward_compared++;
                }
                result_free(&got);
            }
            result_free(&want);
        }
    }
    assert_int_equal(failures - before, 0);
}

/* The gradients of every case test_gradcheck checks, on every device, bitwise against
 * cpu:0's (f64: the ones test_gradcheck verifies by central differences; f32 too). */
static void test_gradients_on_every_device(void **state) {
    (void)state;
    int before = failures;
    for (int i = 0; i < oc_n_cases; i++) {
        const oc_case *c = &oc_cases[i];
        if (!gradient_case(c)) continue;
        for (int pass = 0; pass < 2; pass++) {
            eg_dtype float_dtype = pass ? EG_DTYPE_F64 : EG_DTYPE_F32;
            run_result want, got;
            int ready = run_gradient(c, i, float_dtype, reference, &want);
            if (ready < 0)
                failure(c, reference, "%s gradient: %s", eg_dtype_name(float_dtype), want.error);
            if (ready <= 0) {
                result_free(&want);
                continue;
            }
            totals.gradient_runs++;
            for (int d = 0; d < eg_device_count(); d++) {
                const eg_device *device = eg_device_at(d);
                char why[512];
                int here = run_gradient(c, i, float_dtype, device, &got);
                if (here < 0 && refused(c, device, got.status))
                    ; /* the device lacks a kernel the gradient needs */
                else if (here != 1)
                    failure(c, device, "%s gradient: %s", eg_dtype_name(float_dtype),
                            here ? got.error : "a result is not f32 or f64 here, unlike on cpu:0");
                else if (!same_results(&want, &got, same_kernels(device), why, sizeof why))
                    failure(c, device, "%s gradient: %s", eg_dtype_name(float_dtype), why);
                else
                    totals.gradient_compared++;
                result_free(&got);
            }
            result_free(&want);
        }
    }
    assert_int_equal(failures - before, 0);
}

/* eg_device_supports_op is honest: what it (and so `eagle info --ops`) says about an
 * op, a device and a float dtype is what a call does: yes -> the case runs; no -> it fails with
 * EG_ERR_DTYPE or EG_ERR_UNSUPPORTED, never another error, never a crash. Every case with float
 * inputs, with them in f32, f64, f16 and bf16. */
static void test_supports_op_matches_the_calls(void **state) {
    (void)state;
    static const eg_dtype float_dtypes[] = {EG_DTYPE_F32, EG_DTYPE_F64, EG_DTYPE_F16,
                                            EG_DTYPE_BF16};
    int before = failures;
    for (int i = 0; i < oc_n_cases; i++) {
        const oc_case *c = &oc_cases[i];
        if (!oc_case_has_float_input(c)) continue;
        for (size_t t = 0; t < sizeof float_dtypes / sizeof *float_dtypes; t++) {
            eg_dtype dtype = float_dtypes[t];
            for (int d = 0; d < eg_device_count(); d++) {
                const eg_device *device = eg_device_at(d);
                bool supported = eg_device_supports_op(device, c->op, dtype);
                run_result r = {0};
                eg_clear_error();
                eg_scope_begin();
                oc_inputs inputs = {0};
                eg_tensor *views[OC_MAX_INPUTS], *out[OC_MAX_OUTPUTS] = {0};
                if (!inputs_on(c, i, dtype, device, &inputs, views, &r)) {
                    failure(c, device, "%s: %s", eg_dtype_name(dtype), r.error);
                } else {
                    int n = c->apply(c, views, out);
                    eg_status status = eg_last_status();
                    totals.dtype_runs++;
                    /* a composite case may also meet an f32-only op among the others */
                    bool other_op = (c->flags & OC_COMPOSITE) && status == EG_ERR_DTYPE;
                    if (supported && n < 0 && !other_op)
                        failure(c, device, "%s: eg_device_supports_op says yes, the call fails: %s",
                                eg_dtype_name(dtype), eg_last_error());
                    else if (!supported && n >= 0 && !(c->flags & OC_MIXED_DTYPES))
                        failure(c, device, "%s: eg_device_supports_op says no, the call succeeds",
                                eg_dtype_name(dtype));
                    else if (!supported && n < 0 && status != EG_ERR_DTYPE &&
                             status != EG_ERR_UNSUPPORTED)
                        failure(c, device,
                                "%s: unsupported, but the call fails with %s, not EG_ERR_DTYPE or "
                                "EG_ERR_UNSUPPORTED: %s",
                                eg_dtype_name(dtype), eg_status_string(status), eg_last_error());
                }
                eg_scope_end();
                oc_inputs_free(&inputs);
                eg_clear_error();
            }
        }
    }
    assert_int_equal(failures - before, 0);
}

int main(void) {
    /* EG_TEST_DEVICE=cuda:0 (the `cuda` label): that device must be among those walked, else
     * the run is a skip, not a pass over the CPU alone. */
    (void)test_device_or_skip("test_op_devices");
    reference = eg_device_cpu();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_devices_are_walked),
        cmocka_unit_test(test_every_op_has_a_case),
        cmocka_unit_test(test_forward_on_every_device),
        cmocka_unit_test(test_gradients_on_every_device),
        cmocka_unit_test(test_supports_op_matches_the_calls),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    char devices[256] = "";
    for (int d = 0; d < eg_device_count(); d++)
        snprintf(devices + strlen(devices), sizeof devices - strlen(devices), "%s%s", d ? " " : "",
                 eg_device_name(eg_device_at(d)));
    fprintf(stderr,
            "op x device: %d case runs (f32, f64, bf16, f16) x %d device(s) (%s) against %s: %d "
            "compared; "
            "%d gradient runs: %d compared; %d dtype-support runs; %d refused as unsupported "
            "on a device of another kind; %d failure(s)\n",
            totals.forward_runs, eg_device_count(), devices, eg_device_name(reference),
            totals.forward_compared, totals.gradient_runs, totals.gradient_compared,
            totals.dtype_runs, totals.unsupported_runs, failures);
    if (totals.unsupported_runs) {
        fprintf(stderr, "ops refused in some case (a kernel missing there):");
        for (int op = 0; op < EG__OP_COUNT; op++)
            if (refused_op[op]) fprintf(stderr, " %s", eg__op_defs[op].name);
        fprintf(stderr, "\n");
    }
    eg_shutdown();
    return failed;
}
