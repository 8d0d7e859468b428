/* Which error the library keeps (include/eagle/status.h): a failing call with valid arguments
 * reports its own error even when an earlier one was never cleared; a NULL handed on along a
 * chain keeps the first cause; inside one call (and the callbacks it runs) the first error wins;
 * a stale error never makes a later valid call fail. Also the call sites of the functions whose
 * macros were missing, and the memory limit: eg_memory_set_limit below what is held, and
 * EG_MEMORY_LIMIT values that are not sizes (tests/CMakeLists.txt runs the environment cases in
 * processes of their own). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/settings.h"
#include "eagle.h"
#include "test_util.h"

#define MIB ((size_t)1 << 20)

/* "test_errors.c:<line>" */
static const char *here(char *buf, size_t size, int line) {
    snprintf(buf, size, "test_errors.c:%d", line);
    return buf;
}

/* The pending error has `status` and its message contains `part` and "test_errors.c:<line>"
 * (line 0: names no line of this file). Clears it. */
static void check_error(eg_status status, const char *part, int line) {
    char site[64];
    const char *message = eg_last_error();
    if (eg_last_status() != status || (part && !strstr(message, part)) ||
        (line && !strstr(message, here(site, sizeof site, line))) ||
        (!line && strstr(message, "test_errors.c:"))) {
        print_error("expected %s with \"%s\" at line %d, got %s: \"%s\"\n",
                    eg_status_string(status), part ? part : "", line,
                    eg_status_string(eg_last_status()), message);
        fail();
    }
    eg_clear_error();
}

static eg_tensor *vector(int64_t n, eg_dtype dtype) {
    eg_tensor *t = eg_ones(dtype, 1, &n);
    assert_non_null(t);
    return t;
}

/* ---- the rule ----------------------------------------------------------------------------- */

static void test_valid_call_reports_its_own_error(void **state) {
    (void)state;
    eg_scope_begin();
    eg_tensor *a = vector(2, EG_DTYPE_F32), *b = vector(3, EG_DTYPE_F32);
    eg_tensor *d = vector(2, EG_DTYPE_F64);
    assert_null(eg_sub(a, b)); /* error A, never cleared */
    assert_int_equal(eg_last_status(), EG_ERR_SHAPE);
    int line = __LINE__ + 1;
    assert_null(eg_div(a, d)); /* valid arguments, its own failure */
    assert_int_equal(eg_last_status(), EG_ERR_DTYPE);
    assert_null(strstr(eg_last_error(), "sub"));
    check_error(EG_ERR_DTYPE, "div", line);
    /* non-op functions too: a stale error does not hide eg_lazy_end's */
    assert_null(eg_sub(a, b));
    line = __LINE__ + 1;
    assert_int_equal(eg_lazy_end(), EG_ERR_STATE);
    check_error(EG_ERR_STATE, "lazy_end", line);
    /* successful calls leave a pending error alone */
    assert_null(eg_sub(a, b));
    line = __LINE__ - 1;
    assert_non_null(eg_add(a, a));
    check_error(EG_ERR_SHAPE, "sub", line);
    assert_int_equal(eg_scope_end(), EG_OK);
}

static void test_chain_keeps_the_first_cause(void **state) {
    (void)state;
    eg_scope_begin();
    eg_tensor *x = eg_ones(EG_DTYPE_F32, 2, (int64_t[]){2, 3});
    eg_tensor *w = eg_ones(EG_DTYPE_F32, 2, (int64_t[]){4, 5});
    int line = __LINE__ + 1;
    eg_tensor *product = eg_matmul(x, w);
    assert_null(product);
    assert_null(eg_relu(eg_add(product, x))); /* NULLs handed on: not new causes */
    check_error(EG_ERR_SHAPE, "matmul", line);
    /* the same across non-op functions: a layer that failed to be made, handed to a model */
    eg_model *model = eg_sequential_new("chain");
    assert_non_null(model);
    line = __LINE__ + 1;
    eg_layer *layer = eg_activation_new((eg_activation)-1, "bad");
    assert_null(layer);
    assert_int_equal(eg_sequential_add(model, layer), EG_ERR_INVALID_ARGUMENT);
    check_error(EG_ERR_INVALID_ARGUMENT, "activation", line);
    /* with nothing pending, a NULL argument is an error of its own */
    line = __LINE__ + 1;
    assert_int_equal(eg_sequential_add(model, NULL), EG_ERR_NULL_ARGUMENT);
    check_error(EG_ERR_NULL_ARGUMENT, "sequential_add", line);
    eg_model_free(model);
    assert_int_equal(eg_scope_end(), EG_OK);
}

/* A traced function whose op fails, then makes a call that succeeds, and returns the failure:
 * eg_function_call reports the op's error (the callback's error becomes the call's). */
static int first_failure_line;
static eg_status fails_then_succeeds(eg_tensor *const *inputs, eg_tensor **outputs, void *user) {
    (void)user;
    eg_tensor *narrow = eg_ones(EG_DTYPE_F32, 1, (int64_t[]){3});
    first_failure_line = __LINE__ + 1;
    outputs[0] = eg_sub(inputs[0], narrow);
    eg_tensor *fine = eg_add(inputs[0], inputs[0]);
    return outputs[0] || !fine ? EG_OK : EG_ERR_SHAPE;
}

static eg_status doubled(eg_tensor *const *inputs, eg_tensor **outputs, void *user) {
    (void)user;
    outputs[0] = eg_add(inputs[0], inputs[0]);
    return outputs[0] ? EG_OK : eg_last_status();
}

static void test_callback_error_becomes_the_calls(void **state) {
    (void)state;
    eg_scope_begin();
    eg_tensor *x = vector(2, EG_DTYPE_F32);
    eg_function *f = eg_function_new("fails_then_succeeds", fails_then_succeeds, 1, 1, NULL);
    assert_non_null(f);
    eg_tensor *out = NULL;
    assert_int_equal(eg_function_call(f, (eg_tensor *[]){x}, &out), EG_ERR_SHAPE);
    assert_null(out);
    check_error(EG_ERR_SHAPE, "sub", first_failure_line);
    eg_function_free(f);
    assert_int_equal(eg_scope_end(), EG_OK);
}

/* The machinery itself (src/base/error.h), as library code uses it. */
static void test_rule_inside_the_library(void **state) {
    (void)state;
    /* inside one call the first error wins */
    eg_callsite_set(NULL, 0);
    eg__error(EG_ERR_SHAPE, "first");
    eg__error(EG_ERR_DTYPE, "consequence");
    assert_string_equal(eg_last_error(), "first");
    /* a later call's own error replaces it; its NULL handed on does not, and takes it over */
    eg_callsite_set(NULL, 0);
    uint64_t mark = eg__error_mark();
    eg__error(EG_ERR_NULL_ARGUMENT, "handed on");
    assert_string_equal(eg_last_error(), "first");
    assert_true(eg__error_since(mark)); /* the pending error is this call's now */
    eg__error(EG_ERR_DTYPE, "consequence");
    assert_string_equal(eg_last_error(), "first");
    eg_callsite_set(NULL, 0);
    mark = eg__error_mark();
    assert_false(eg__error_since(mark)); /* stale: not this step's */
    eg__error(EG_ERR_DTYPE, "own");
    assert_true(eg__error_since(mark));
    assert_string_equal(eg_last_error(), "own");
    /* set aside and restored: an error raised meanwhile by a later call wins, a NULL does not */
    eg__saved_error saved;
    eg__error_set_aside(&saved);
    eg_callsite_set(NULL, 0);
    eg__error(EG_ERR_STATE, "meanwhile");
    eg__error_restore(&saved);
    assert_string_equal(eg_last_error(), "meanwhile");
    eg__error_set_aside(&saved);
    eg__error(EG_ERR_NULL_ARGUMENT, "null meanwhile");
    eg__error_restore(&saved);
    assert_string_equal(eg_last_error(), "meanwhile");
    /* an error raised within the same call as the saved one: the saved one came first */
    eg__error_set_aside(&saved);
    eg__error(EG_ERR_IO, "later in the same call");
    eg__error_restore(&saved);
    assert_string_equal(eg_last_error(), "meanwhile");
    /* a callback's own calls: its error becomes the running call's, whose line comes back */
    eg_clear_error();
    eg_callsite_set("outer.c", 10);
    eg__callback_frame frame;
    eg__callback_begin(&frame);
    eg_callsite_set("callback.c", 20);
    eg__error(EG_ERR_SHAPE, "in the callback");
    eg_callsite_set("callback.c", 21); /* a later call of the callback that succeeds */
    eg__callback_end(&frame);
    eg__error(EG_ERR_INTERNAL, "the running call's consequence");
    assert_string_equal(eg_last_error(), "in the callback at callback.c:20");
    eg_clear_error();
    eg__error(EG_ERR_STATE, "after");
    assert_string_equal(eg_last_error(), "after at outer.c:10");
    eg_clear_error();
}

static void test_stale_error_does_not_fail_a_valid_call(void **state) {
    (void)state;
    eg_scope_begin();
    eg_tensor *a = vector(2, EG_DTYPE_F32), *b = vector(3, EG_DTYPE_F32);
    eg_function *f = eg_function_new("doubled", doubled, 1, 1, NULL);
    assert_non_null(f);
    int line = __LINE__ + 1;
    assert_null(eg_sub(a, b));             /* left pending on purpose */
    for (int call = 0; call < 2; call++) { /* the trace, then the replay */
        eg_tensor *out = NULL;
        assert_int_equal(eg_function_call(f, (eg_tensor *[]){a}, &out), EG_OK);
        assert_non_null(out);
        assert_true(eg_item(eg_sum(out, 0, NULL, false)) == 4.0);
    }
    check_error(EG_ERR_SHAPE, "sub", line); /* still the one pending */
    eg_function_free(f);
    assert_int_equal(eg_scope_end(), EG_OK);
}

/* A map callback whose op fails and that then calls something that succeeds before it returns
 * the failure: the pipeline reports the callback's own error, not "returned without raising". */
static int map_failure_line;
static eg_status failing_map(const eg_element *input, eg_element *output,
                             const eg_dataset_call_info *info, void *context) {
    (void)output, (void)info, (void)context;
    eg_tensor *narrow = eg_ones(EG_DTYPE_F32, 1, (int64_t[]){2});
    map_failure_line = __LINE__ + 1;
    eg_tensor *bad = eg_add(input->tensors[0], narrow);
    assert_non_null(eg_scalar(EG_DTYPE_F32, 1.0)); /* a later call that succeeds */
    return bad ? EG_OK : EG_ERR_SHAPE;
}

static void test_callback_error_survives_its_later_calls(void **state) {
    (void)state;
    eg_scope_begin();
    eg_tensor *rows = eg_ones(EG_DTYPE_F32, 2, (int64_t[]){4, 3});
    eg_tensor *a = vector(2, EG_DTYPE_F32), *b = vector(3, EG_DTYPE_F32);
    eg_dataset *ds = eg_dataset_map(eg_dataset_from_tensor_slices(1, (eg_tensor *[]){rows}),
                                    failing_map, NULL, 0, true);
    assert_non_null(ds);
    eg_dataset_iterator *it = eg_dataset_iterator_new(ds);
    assert_non_null(it);
    assert_null(eg_sub(a, b)); /* a stale error: the pipeline's own failure replaces it */
    eg_element element = {0};
    bool end = false;
    assert_int_equal(eg_dataset_iterator_next(it, &element, &end), EG_ERR_SHAPE);
    assert_null(strstr(eg_last_error(), "without raising"));
    assert_non_null(strstr(eg_last_error(), "element 0"));
    check_error(EG_ERR_SHAPE, "add", map_failure_line);
    eg_dataset_iterator_free(it);
    eg_dataset_free(ds);
    assert_int_equal(eg_scope_end(), EG_OK);
}

/* Calls made without the macros (a binding) start no call of their own; eg_callsite_set(NULL, 0)
 * before each is what the header asks of them. */
static void test_calls_without_the_macros(void **state) {
    (void)state;
    eg_scope_begin();
    eg_tensor *a = vector(2, EG_DTYPE_F32), *b = vector(3, EG_DTYPE_F32);
    eg_tensor *d = vector(2, EG_DTYPE_F64);
    assert_null(eg_sub(a, b));
    assert_null((eg_div)(a, d)); /* part of the last wrapped call: the first error stays */
    assert_int_equal(eg_last_status(), EG_ERR_SHAPE);
    eg_callsite_set(NULL, 0);
    assert_null((eg_div)(a, d)); /* a call of its own, with no line to name */
    check_error(EG_ERR_DTYPE, "div", 0);
    assert_int_equal(eg_scope_end(), EG_OK);
}

/* ---- call sites of the functions that lacked their macro ---------------------------------- */

static void test_call_sites_of_newly_wrapped_functions(void **state) {
    (void)state;
    eg_tensor *t = eg_scalar(EG_DTYPE_F32, 1.0); /* the previous wrapped call, on another line */
    int line = __LINE__ + 1;
    assert_int_equal(eg_lazy_end(), EG_ERR_STATE);
    check_error(EG_ERR_STATE, "lazy_end", line);
    line = __LINE__ + 1;
    assert_null(eg_function_new("f", NULL, 1, 1, NULL));
    check_error(EG_ERR_INVALID_ARGUMENT, "function_new", line);
    line = __LINE__ + 1;
    assert_int_equal(eg_function_stats_get(NULL, NULL), EG_ERR_NULL_ARGUMENT);
    check_error(EG_ERR_NULL_ARGUMENT, "function_stats_get", line);
    int n = 0;
    line = __LINE__ + 1;
    assert_null(eg_model_trainable_variables(NULL, &n));
    check_error(EG_ERR_NULL_ARGUMENT, "model_trainable_variables", line);
    line = __LINE__ + 1;
    assert_int_equal(eg_graph_begin(NULL), EG_ERR_NULL_ARGUMENT);
    check_error(EG_ERR_NULL_ARGUMENT, "graph_begin", line);
    eg_graph *g = eg_graph_new();
    assert_non_null(g);
    line = __LINE__ + 1;
    assert_int_equal(eg_graph_end(g), EG_ERR_STATE);
    check_error(EG_ERR_STATE, "graph_end", line);
    eg_graph_free(g);
    line = __LINE__ + 1;
    assert_null(eg_session_new(NULL));
    check_error(EG_ERR_NULL_ARGUMENT, "session_new", line);
    eg_metric_mean mean = {0};
    line = __LINE__ + 1;
    assert_int_equal(eg_metric_mean_add(&mean, 1.0, -1.0), EG_ERR_INVALID_ARGUMENT);
    check_error(EG_ERR_INVALID_ARGUMENT, "metric_mean_add", line);
    line = __LINE__ + 1;
    assert_int_equal(eg_set_global_policy((eg_policy)99), EG_ERR_INVALID_ARGUMENT);
    check_error(EG_ERR_INVALID_ARGUMENT, NULL, line);
    eg_release(t);
}

/* ---- the memory limit --------------------------------------------------------------------- */

static eg_memory_stats stats_now(void) {
    eg_memory_stats stats;
    assert_int_equal(eg_memory_stats_get(NULL, &stats), EG_OK);
    return stats;
}

static void test_limit_below_what_is_held(void **state) {
    (void)state;
    if (getenv("EG_MEMORY_LIMIT")) skip(); /* the environment cases below run this binary */
    const size_t previous = 1024 * MIB;
    assert_int_equal(eg_memory_set_limit(NULL, previous), EG_OK);
    int64_t n = (int64_t)(8 * MIB / sizeof(float));
    eg_tensor *held = eg_ones(EG_DTYPE_F32, 1, &n);
    eg_tensor *freed = eg_ones(EG_DTYPE_F32, 1, &n);
    assert_non_null(held);
    assert_non_null(freed);
    eg_release(freed); /* cached, not in use */
    eg_memory_stats before = stats_now();
    assert_true(before.bytes_cached >= 8 * MIB);
    assert_true(before.bytes_in_use >= 8 * MIB);
    /* far below the tensor still held: refused, with the numbers; the cache was trimmed */
    int line = __LINE__ + 1;
    assert_int_equal(eg_memory_set_limit(NULL, MIB), EG_ERR_INVALID_ARGUMENT);
    const char *message = eg_last_error();
    assert_non_null(strstr(message, "limit of 1.00 MiB"));
    assert_non_null(strstr(message, "in use"));
    assert_non_null(strstr(message, "the limit stays 1.00 GiB"));
    check_error(EG_ERR_INVALID_ARGUMENT, "memory_set_limit", line);
    eg_memory_stats after = stats_now();
    assert_int_equal(after.limit, previous);
    assert_true(after.bytes_reserved < before.bytes_reserved);
    assert_true(after.bytes_reserved >= after.bytes_in_use);
    /* at what is still reserved it holds, and requests past it fail */
    assert_int_equal(eg_memory_set_limit(NULL, after.bytes_reserved), EG_OK);
    line = __LINE__ + 1;
    assert_null(eg_ones(EG_DTYPE_F32, 1, &n));
    check_error(EG_ERR_OUT_OF_MEMORY, "limit", line);
    eg_release(held);
    assert_int_equal(eg_memory_set_limit(NULL, 0), EG_OK);
    assert_int_equal(stats_now().limit, 0);
}

static void test_size_settings_parse_strictly(void **state) {
    (void)state;
    static const struct {
        const char *text;
        uint64_t bytes;
    } good[] = {{"0", 0},
                {"1048576", 1048576},
                {"512M", 512 * MIB},
                {"512m", 512 * MIB},
                {"2G", (uint64_t)2 << 30},
                {"1.5K", 1536},
                {"9k", 9216},
                {"0.5M", MIB / 2}};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        uint64_t bytes = 7;
        assert_true(eg__parse_bytes(good[i].text, &bytes));
        assert_int_equal(bytes, good[i].bytes);
    }
    static const char *const bad[] = {"",
                                      "abc",
                                      "-1",
                                      "+5",
                                      " 5",
                                      "5 ",
                                      "512MB",
                                      "1e9",
                                      "0x10",
                                      "inf",
                                      "nan",
                                      "1.",
                                      ".5",
                                      "5KK",
                                      "1T",
                                      "99999999999999999999",
                                      "17179869184G",
                                      NULL};
    for (int i = 0; bad[i]; i++) {
        uint64_t bytes = 7;
        if (eg__parse_bytes(bad[i], &bytes)) {
            print_error("'%s' parsed as %llu\n", bad[i], (unsigned long long)bytes);
            fail();
        }
        assert_int_equal(bytes, 7);
    }
    assert_false(eg__parse_bytes(NULL, &(uint64_t){0}));
}

/* Run with EG_MEMORY_LIMIT set (tests/CMakeLists.txt); EG_TEST_MEMORY_LIMIT_BYTES is the limit
 * expected, or "invalid" when the value must be refused. */
static void test_limit_from_the_environment(void **state) {
    (void)state;
    const char *value = getenv("EG_MEMORY_LIMIT"), *expected = getenv("EG_TEST_MEMORY_LIMIT_BYTES");
    if (!value || !expected) skip();
    if (strcmp(expected, "invalid") != 0) {
        assert_int_equal(stats_now().limit, strtoull(expected, NULL, 10));
        return;
    }
    char quoted[128];
    snprintf(quoted, sizeof quoted, "EG_MEMORY_LIMIT='%s' is not a size", value);
    for (int attempt = 0; attempt < 2; attempt++) { /* refused at every use, not once */
        int line = __LINE__ + 1;
        assert_null(eg_zeros(EG_DTYPE_F32, 1, (int64_t[]){4}));
        check_error(EG_ERR_INVALID_ARGUMENT, quoted, line);
    }
    eg_memory_stats stats;
    int line = __LINE__ + 1;
    assert_int_equal(eg_memory_stats_get(NULL, &stats), EG_ERR_INVALID_ARGUMENT);
    check_error(EG_ERR_INVALID_ARGUMENT, quoted, line);
    /* fixed in the environment: the next use reads it again and works */
    assert_int_equal(unsetenv("EG_MEMORY_LIMIT"), 0);
    eg_tensor *t = eg_zeros(EG_DTYPE_F32, 1, (int64_t[]){4});
    assert_non_null(t);
    eg_release(t);
    assert_int_equal(stats_now().limit, 0);
}

int main(int argc, char **argv) {
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
#define CASE_(name) cmocka_unit_test_setup_teardown(name, fresh_scope_setup, strict_scope_teardown)
        CASE_(test_limit_from_the_environment), /* first: before anything allocates */
        CASE_(test_valid_call_reports_its_own_error),
        CASE_(test_chain_keeps_the_first_cause),
        CASE_(test_callback_error_becomes_the_calls),
        CASE_(test_rule_inside_the_library),
        CASE_(test_stale_error_does_not_fail_a_valid_call),
        CASE_(test_callback_error_survives_its_later_calls),
        CASE_(test_calls_without_the_macros),
        CASE_(test_call_sites_of_newly_wrapped_functions),
        CASE_(test_limit_below_what_is_held),
        CASE_(test_size_settings_parse_strictly),
#undef CASE_
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    eg_shutdown();
    return failed;
}
