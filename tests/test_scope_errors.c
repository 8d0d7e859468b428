/* Scopes (ownership of the tensors created inside them), the live-tensor debug listing, and the
 * error model: immediate errors that name the op, the shapes/dtypes and the caller's file:line;
 * NULL propagation along chains keeps the first cause; out of memory under a limit. Every error
 * case checks that the program goes on: a valid op works after eg_clear_error(). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eagle.h"

#define MIB ((size_t)1 << 20)

/* ---- helpers ---------------------------------------------------------------------------- */

/* Starts from a clean state even after a failed case (which leaves its scopes open). */
static int case_setup(void **state) {
    (void)state;
    while (eg_scope_depth() > 0) eg_scope_end();
    eg_clear_error();
    return 0;
}

static int case_teardown(void **state) {
    (void)state;
    if (eg_last_status() != EG_OK) {
        print_error("unexpected pending error: %s\n", eg_last_error());
        return -1;
    }
    return eg_scope_depth() == 0 ? 0 : -1;
}

static size_t bytes_in_use(void) {
    eg_memory_stats stats;
    assert_int_equal(eg_memory_stats_get(NULL, &stats), EG_OK);
    return stats.bytes_in_use;
}

/* The pending error has `status` and its message contains every string of the NULL-terminated
 * list. The error is cleared afterwards. */
static void check_error(eg_status status, ...) {
    const char *message = eg_last_error();
    if (eg_last_status() != status) {
        print_error("expected %s, got %s: \"%s\"\n", eg_status_string(status),
                    eg_status_string(eg_last_status()), message);
        fail();
    }
    va_list args;
    va_start(args, status);
    for (const char *part = va_arg(args, const char *); part; part = va_arg(args, const char *)) {
        if (!strstr(message, part)) {
            print_error("message \"%s\" lacks \"%s\"\n", message, part);
            va_end(args);
            fail();
        }
    }
    va_end(args);
    eg_clear_error();
}

/* "test_scope_errors.c:<line>" */
static const char *here(char *buf, size_t size, int line) {
    snprintf(buf, size, "test_scope_errors.c:%d", line);
    return buf;
}

/* After an error was cleared, ordinary work goes on. */
static void check_program_continues(void) {
    assert_int_equal(eg_last_status(), EG_OK);
    assert_string_equal(eg_last_error(), "");
    eg_scope_begin();
    int64_t shape[2] = {2, 2};
    eg_tensor *a = eg_full(EG_DTYPE_F32, 2, shape, 1.5);
    eg_tensor *b = eg_ones(EG_DTYPE_F32, 2, shape);
    eg_tensor *c = eg_relu(eg_add(a, b));
    assert_non_null(c);
    assert_true(eg_item(eg_sum(c, 0, NULL, false)) == 10.0);
    assert_int_equal(eg_scope_end(), EG_OK);
    assert_int_equal(eg_last_status(), EG_OK);
}

static eg_tensor *mib_tensor(double value) {
    int64_t n = (int64_t)(MIB / sizeof(float));
    return eg_full(EG_DTYPE_F32, 1, &n, value);
}

/* ---- scopes ----------------------------------------------------------------------------- */

static void test_scope_releases_tensors(void **state) {
    (void)state;
    eg_debug_track_tensors(true);
    size_t live_before = eg_debug_live_tensors(NULL);
    size_t used_before = bytes_in_use();
    assert_int_equal(eg_scope_depth(), 0);
    eg_scope_begin();
    assert_int_equal(eg_scope_depth(), 1);
    eg_tensor *a = mib_tensor(1.0);
    eg_tensor *b = mib_tensor(2.0);
    eg_tensor *c = eg_add(a, b);
    eg_tensor *view = eg_slice(c, 0, 0, 10, 1);
    assert_non_null(view);
    assert_true(bytes_in_use() >= used_before + 3 * MIB);
    assert_int_equal(eg_debug_live_tensors(NULL), live_before + 4);
    assert_int_equal(eg_scope_end(), EG_OK);
    assert_int_equal(eg_scope_depth(), 0);
    assert_int_equal(bytes_in_use(), used_before);
    assert_int_equal(eg_debug_live_tensors(NULL), live_before);
    eg_debug_track_tensors(false);

    /* a loop of scopes does not grow memory */
    for (int i = 0; i < 50; i++) {
        eg_scope_begin();
        eg_tensor *x = mib_tensor((double)i);
        assert_true(eg_item(eg_slice(eg_mul(x, x), 0, 3, 4, 1)) == (double)(i * i));
        assert_int_equal(eg_scope_end(), EG_OK);
        assert_int_equal(bytes_in_use(), used_before);
    }
}

static void test_scope_keep(void **state) {
    (void)state;
    eg_debug_track_tensors(true);
    size_t live_before = eg_debug_live_tensors(NULL);
    size_t used_before = bytes_in_use();

    /* keep moves a tensor to the enclosing scope */
    eg_scope_begin();
    eg_tensor *outer_tensor = mib_tensor(3.0);
    eg_scope_begin();
    assert_int_equal(eg_scope_depth(), 2);
    eg_tensor *temporary = mib_tensor(4.0);
    eg_tensor *kept = eg_scope_keep(eg_add(temporary, outer_tensor));
    assert_non_null(kept);
    /* keeping a tensor the innermost scope does not own changes nothing */
    assert_ptr_equal(eg_scope_keep(outer_tensor), outer_tensor);
    assert_null(eg_scope_keep(NULL));
    assert_int_equal(eg_debug_live_tensors(NULL), live_before + 3);
    assert_int_equal(eg_scope_end(), EG_OK);
    assert_int_equal(eg_debug_live_tensors(NULL), live_before + 2); /* temporary is gone */
    int64_t index = 12345;
    assert_true(eg_tensor_get(kept, &index) == 7.0);
    assert_int_equal(eg_scope_end(), EG_OK); /* the outer scope releases both */
    assert_int_equal(eg_debug_live_tensors(NULL), live_before);
    assert_int_equal(bytes_in_use(), used_before);

    /* keep from the outermost scope hands the tensor to the caller */
    eg_scope_begin();
    eg_tensor *mine = eg_scope_keep(mib_tensor(5.0));
    mib_tensor(6.0);
    assert_int_equal(eg_scope_end(), EG_OK);
    assert_int_equal(eg_debug_live_tensors(NULL), live_before + 1);
    assert_true(eg_tensor_get(mine, &index) == 5.0);
    assert_int_equal(bytes_in_use(), used_before + MIB);
    eg_release(mine);
    assert_int_equal(bytes_in_use(), used_before);

    /* three levels: keep twice to get out of two scopes */
    eg_scope_begin();
    eg_scope_begin();
    eg_scope_begin();
    eg_tensor *deep = eg_scope_keep(mib_tensor(8.0));
    assert_int_equal(eg_scope_end(), EG_OK);
    assert_ptr_equal(eg_scope_keep(deep), deep);
    assert_int_equal(eg_scope_end(), EG_OK);
    assert_true(eg_tensor_get(deep, &index) == 8.0);
    assert_int_equal(eg_scope_end(), EG_OK);
    assert_int_equal(eg_debug_live_tensors(NULL), live_before);
    assert_int_equal(bytes_in_use(), used_before);
    eg_debug_track_tensors(false);
}

static void test_release_inside_scope(void **state) {
    (void)state;
    size_t used_before = bytes_in_use();
    eg_scope_begin();
    eg_tensor *a = mib_tensor(1.0);
    eg_tensor *b = mib_tensor(2.0);
    eg_release(a); /* freed now; the scope forgets it */
    assert_int_equal(bytes_in_use(), used_before + MIB);
    eg_tensor *view = eg_reshape(b, 2, (int64_t[]){512, 512});
    eg_release(b); /* the view keeps the storage */
    assert_int_equal(bytes_in_use(), used_before + MIB);
    assert_true(eg_item(eg_slice(eg_slice(view, 0, 7, 8, 1), 1, 3, 4, 1)) == 2.0);
    /* retain + release inside the scope: the scope still releases its own reference */
    eg_tensor *c = mib_tensor(3.0);
    assert_ptr_equal(eg_retain(c), c);
    eg_release(c); /* the scope's reference */
    assert_int_equal(eg_scope_end(), EG_OK);
    assert_int_equal(bytes_in_use(), used_before + MIB); /* c survives: we hold a reference */
    eg_release(c);
    assert_int_equal(bytes_in_use(), used_before);
    /* releasing a tensor of an outer scope from inside an inner one */
    eg_scope_begin();
    eg_tensor *outer = mib_tensor(4.0);
    eg_scope_begin();
    eg_tensor *inner = eg_add(outer, outer);
    eg_release(outer);
    assert_int_equal(bytes_in_use(), used_before + MIB);
    assert_true(eg_item(eg_slice(inner, 0, 0, 1, 1)) == 8.0);
    assert_int_equal(eg_scope_end(), EG_OK);
    assert_int_equal(eg_scope_end(), EG_OK); /* must not release outer again */
    assert_int_equal(bytes_in_use(), used_before);
    eg_release(NULL); /* ignored */
    assert_null(eg_retain(NULL));
}

static void test_scope_end_without_scope(void **state) {
    (void)state;
    assert_int_equal(eg_scope_depth(), 0);
    assert_int_equal(eg_scope_end(), EG_ERR_STATE);
    check_error(EG_ERR_STATE, "scope_end", NULL);
    assert_int_equal(eg_scope_depth(), 0);
    check_program_continues();
    /* a balanced pair afterwards still works */
    eg_scope_begin();
    assert_int_equal(eg_scope_end(), EG_OK);
    assert_int_equal(eg_scope_end(), EG_ERR_STATE);
    eg_clear_error();
}

static void test_debug_listing(void **state) {
    (void)state;
    eg_debug_track_tensors(true);
    size_t before = eg_debug_live_tensors(NULL);
    eg_scope_begin();
    int64_t shape[2] = {2, 3};
    int line = __LINE__ + 1;
    eg_tensor *t = eg_zeros(EG_DTYPE_F64, 2, shape);
    assert_non_null(t);
    assert_int_equal(eg_debug_live_tensors(NULL), before + 1);
    char *text = NULL;
    size_t length = 0;
    FILE *out = open_memstream(&text, &length);
    assert_non_null(out);
    assert_int_equal(eg_debug_live_tensors(out), before + 1);
    fclose(out);
    char site[64];
    if (!strstr(text, here(site, sizeof site, line))) print_error("listing:\n%s\n", text);
    assert_non_null(strstr(text, "test_scope_errors.c:"));
    assert_non_null(strstr(text, here(site, sizeof site, line)));
    assert_non_null(strstr(text, "(2, 3)"));
    assert_non_null(strstr(text, "f64"));
    free(text);
    assert_int_equal(eg_scope_end(), EG_OK);
    assert_int_equal(eg_debug_live_tensors(NULL), before);
    /* tensors made while tracking is off are not listed */
    eg_debug_track_tensors(false);
    eg_scope_begin();
    eg_zeros(EG_DTYPE_F32, 2, shape);
    assert_int_equal(eg_debug_live_tensors(NULL), before);
    assert_int_equal(eg_scope_end(), EG_OK);
}

/* ---- errors ----------------------------------------------------------------------------- */

static void test_shape_mismatch(void **state) {
    (void)state;
    char site[64];
    eg_scope_begin();
    eg_tensor *a = eg_ones(EG_DTYPE_F32, 2, (int64_t[]){2, 3});
    eg_tensor *b = eg_ones(EG_DTYPE_F32, 2, (int64_t[]){4, 5});
    int line = __LINE__ + 1;
    assert_null(eg_add(a, b));
    check_error(EG_ERR_SHAPE, "add", "(2, 3)", "(4, 5)", here(site, sizeof site, line), NULL);
    check_program_continues();

    eg_tensor *x = eg_zeros(EG_DTYPE_F32, 2, (int64_t[]){32, 784});
    eg_tensor *w = eg_zeros(EG_DTYPE_F32, 2, (int64_t[]){128, 64});
    line = __LINE__ + 1;
    assert_null(eg_matmul(x, w));
    check_error(EG_ERR_SHAPE, "matmul", "inner dimensions differ", "(32, 784)", "(128, 64)",
                here(site, sizeof site, line), NULL);
    check_program_continues();
    assert_int_equal(eg_scope_end(), EG_OK);
}

static void test_dtype_mismatch(void **state) {
    (void)state;
    char site[64];
    eg_scope_begin();
    eg_tensor *a = eg_ones(EG_DTYPE_F32, 1, (int64_t[]){3});
    eg_tensor *b = eg_ones(EG_DTYPE_F64, 1, (int64_t[]){3});
    int line = __LINE__ + 1;
    assert_null(eg_mul(a, b));
    check_error(EG_ERR_DTYPE, "mul", "f32", "f64", here(site, sizeof site, line), NULL);
    check_program_continues();
    eg_tensor *i = eg_ones(EG_DTYPE_I32, 1, (int64_t[]){3});
    assert_null(eg_exp(i)); /* float math only */
    check_error(EG_ERR_DTYPE, "exp", "i32", NULL);
    check_program_continues();
    assert_null(eg_one_hot(i, 4, (eg_dtype)99)); /* named at the op, not by the allocator */
    check_error(EG_ERR_DTYPE, "one_hot", "invalid result dtype 99", NULL);
    check_program_continues();
    assert_int_equal(eg_scope_end(), EG_OK);
}

/* A device mismatch needs a second device; this build knows only the CPU, so the check itself
 * (eg__execute's "inputs on different devices") cannot be reached here. Asking for a device that
 * is not built in is an error, though. */
static void test_devices(void **state) {
    (void)state;
    assert_ptr_equal(eg_device_get("cpu"), eg_device_cpu());
    assert_int_equal(eg_device_kind(eg_device_cpu()), EG_DEVICE_CPU);
    if (!eg_device_get("cuda:0")) {
        check_error(EG_ERR_UNSUPPORTED, "cuda:0", NULL);
        skip(); /* no second device: device mismatch is not testable */
    }
}

static void test_bad_axis(void **state) {
    (void)state;
    char site[64];
    eg_scope_begin();
    eg_tensor *x = eg_ones(EG_DTYPE_F32, 2, (int64_t[]){2, 3});
    int line = __LINE__ + 1;
    assert_null(eg_sum(x, 1, (int[]){5}, false));
    check_error(EG_ERR_AXIS, "sum", "5", here(site, sizeof site, line), NULL);
    assert_null(eg_softmax(x, -3));
    check_error(EG_ERR_AXIS, "softmax", NULL);
    assert_null(eg_argmax(x, 2, false));
    check_error(EG_ERR_AXIS, "argmax", NULL);
    assert_null(eg_transpose(x, 0, 7));
    check_error(EG_ERR_AXIS, "transpose", NULL);
    assert_null(eg_squeeze(x, 0));
    check_error(EG_ERR_AXIS, "squeeze", NULL);
    assert_int_equal(eg_tensor_dim(x, 2), -1);
    check_error(EG_ERR_AXIS, NULL);
    check_program_continues();
    /* negative axes that are in range work */
    assert_int_equal(eg_tensor_dim(eg_sum(x, 1, (int[]){-1}, false), 0), 2);
    assert_int_equal(eg_scope_end(), EG_OK);
}

static void test_null_arguments(void **state) {
    (void)state;
    char site[64];
    eg_scope_begin();
    eg_tensor *b = eg_ones(EG_DTYPE_F32, 1, (int64_t[]){4});
    /* the first NULL with no pending error raises EG_ERR_NULL_ARGUMENT */
    int line = __LINE__ + 1;
    assert_null(eg_relu(NULL));
    check_error(EG_ERR_NULL_ARGUMENT, "relu", here(site, sizeof site, line), NULL);
    assert_null(eg_add(b, NULL));
    check_error(EG_ERR_NULL_ARGUMENT, "add", "argument 1", NULL);
    check_program_continues();

    /* a chain keeps the FIRST error: the one raised by the innermost call */
    line = __LINE__ + 1;
    assert_null(eg_relu(eg_add(NULL, b)));
    check_error(EG_ERR_NULL_ARGUMENT, "add", here(site, sizeof site, line), NULL);
    /* ...and a real cause deep in a chain survives the NULLs passed along */
    eg_tensor *x = eg_ones(EG_DTYPE_F32, 2, (int64_t[]){2, 3});
    eg_tensor *w = eg_ones(EG_DTYPE_F32, 2, (int64_t[]){4, 5});
    eg_tensor *bias = eg_ones(EG_DTYPE_F32, 1, (int64_t[]){5});
    line = __LINE__ + 1;
    eg_tensor *y = eg_sum(eg_relu(eg_add(eg_matmul(x, w), bias)), 0, NULL, false);
    assert_null(y);
    check_error(EG_ERR_SHAPE, "matmul", "(2, 3)", "(4, 5)", here(site, sizeof site, line), NULL);
    check_program_continues();

    /* NULL to other public functions */
    assert_int_equal(eg_memory_stats_get(NULL, NULL), EG_ERR_NULL_ARGUMENT);
    eg_clear_error();
    assert_int_equal(eg_tensor_copy_to_host(NULL, NULL, 0), EG_ERR_NULL_ARGUMENT);
    eg_clear_error();
    assert_null(eg_tensor_data(NULL));
    check_error(EG_ERR_NULL_ARGUMENT, NULL);
    assert_int_equal(eg_tensor_n_dims(NULL), 0);
    assert_int_equal(eg_tensor_n_elems(NULL), 0);
    assert_null(eg_tensor_shape(NULL));
    assert_false(eg_tensor_shares_storage(NULL, b));
    assert_int_equal(eg_last_status(), EG_OK); /* queries do not raise */
    check_program_continues();
    assert_int_equal(eg_scope_end(), EG_OK);
}

static void test_chain_keeps_first_cause(void **state) {
    (void)state;
    /* caller-owned (no scope): they outlive the scopes below */
    eg_tensor *a = eg_ones(EG_DTYPE_F32, 1, (int64_t[]){2});
    eg_tensor *b = eg_ones(EG_DTYPE_F32, 1, (int64_t[]){3});
    eg_tensor *d = eg_ones(EG_DTYPE_F64, 1, (int64_t[]){2});
    eg_scope_begin();
    eg_tensor *failed = eg_sub(a, b);
    assert_null(failed);
    assert_int_equal(eg_last_status(), EG_ERR_SHAPE);
    char first[1024];
    snprintf(first, sizeof first, "%s", eg_last_error());
    assert_non_null(strstr(first, "sub"));
    /* NULLs handed on from it along a chain do not overwrite it (test_errors: a later call
     * failing with valid arguments does) */
    assert_null(eg_relu(eg_add(failed, a)));
    assert_null(eg_mul(a, NULL));
    assert_int_equal(eg_scope_end(), EG_OK);
    assert_int_equal(eg_last_status(), EG_ERR_SHAPE);
    assert_string_equal(eg_last_error(), first);
    /* successful calls do not clear it either */
    eg_scope_begin();
    assert_non_null(eg_add(a, a));
    assert_int_equal(eg_last_status(), EG_ERR_SHAPE);
    /* after clearing, the next error is recorded */
    eg_clear_error();
    assert_int_equal(eg_last_status(), EG_OK);
    assert_string_equal(eg_last_error(), "");
    assert_null(eg_div(a, d));
    check_error(EG_ERR_DTYPE, "div", NULL);
    check_program_continues();
    assert_int_equal(eg_scope_end(), EG_OK);
    eg_release(a);
    eg_release(b);
    eg_release(d);
}

/* Errors from functions other than ops name the caller's line too, not the line of the last
 * op called before them. */
static void test_callsite_of_non_op_functions(void **state) {
    (void)state;
    char site[64];
    eg_tensor *t = eg_scalar(EG_DTYPE_F32, 1.0); /* the previous wrapped call */
    int line = __LINE__ + 1;
    assert_int_equal(eg_scope_end(), EG_ERR_STATE);
    check_error(EG_ERR_STATE, here(site, sizeof site, line), NULL);
    line = __LINE__ + 1;
    assert_int_equal(eg_tape_watch(NULL, t), EG_ERR_NULL_ARGUMENT);
    check_error(EG_ERR_NULL_ARGUMENT, "tape_watch", here(site, sizeof site, line), NULL);
    line = __LINE__ + 1;
    assert_int_equal(eg_set_num_threads(0), EG_ERR_INVALID_ARGUMENT);
    check_error(EG_ERR_INVALID_ARGUMENT, here(site, sizeof site, line), NULL);
    line = __LINE__ + 1;
    assert_int_equal(eg_memory_stats_get(NULL, NULL), EG_ERR_NULL_ARGUMENT);
    check_error(EG_ERR_NULL_ARGUMENT, here(site, sizeof site, line), NULL);
    line = __LINE__ + 1;
    assert_int_equal(eg_tensor_dim(t, 1), -1);
    check_error(EG_ERR_AXIS, here(site, sizeof site, line), NULL);
    line = __LINE__ + 1;
    assert_null(eg_device_get("tpu:7"));
    check_error(EG_ERR_UNSUPPORTED, "tpu:7", here(site, sizeof site, line), NULL);
    eg_release(t);
    check_program_continues();
}

static void test_status_strings(void **state) {
    (void)state;
    int count = 0;
#define CHECK_STATUS_(name, value, text)                                                           \
    assert_int_equal((int)name, value);                                                            \
    assert_string_equal(eg_status_string(name), text);                                             \
    count++;
    EG_STATUS_TABLE(CHECK_STATUS_)
#undef CHECK_STATUS_
    assert_int_equal(count, 14);
    assert_string_equal(eg_status_string(EG_OK), "ok");
    assert_string_equal(eg_status_string(EG_ERR_SHAPE), "shape mismatch");
    assert_string_equal(eg_status_string(EG_ERR_OUT_OF_MEMORY), "out of memory");
    assert_string_equal(eg_status_string(EG_ERR_NUMERICS), "non-finite value");
    assert_string_equal(eg_status_string((eg_status)-1000), "unknown status");
    assert_string_equal(eg_status_string((eg_status)5), "unknown status");
    /* texts are distinct */
    for (int i = 0; i >= -13; i--)
        for (int j = i - 1; j >= -13; j--)
            assert_string_not_equal(eg_status_string((eg_status)i), eg_status_string((eg_status)j));
}

static void test_out_of_memory(void **state) {
    (void)state;
    assert_int_equal(eg_memory_set_limit(NULL, 64 * MIB), EG_OK);
    eg_memory_stats stats;
    assert_int_equal(eg_memory_stats_get(NULL, &stats), EG_OK);
    assert_int_equal(stats.limit, 64 * MIB);
    eg_scope_begin();
    int64_t n = (int64_t)(128 * MIB / sizeof(float));
    char site[64];
    int line = __LINE__ + 1;
    eg_tensor *big = eg_zeros(EG_DTYPE_F32, 1, &n);
    assert_null(big);
    check_error(EG_ERR_OUT_OF_MEMORY, "out of memory", "requested 128 MiB", "in use", "cached",
                "limit 64.0 MiB", "largest free block", here(site, sizeof site, line), NULL);
    check_program_continues();
    /* smaller allocations still work, up to the limit */
    eg_tensor *small = mib_tensor(1.0);
    assert_non_null(small);
    int64_t m = (int64_t)(16 * MIB / sizeof(float));
    eg_tensor *medium = eg_ones(EG_DTYPE_F32, 1, &m);
    assert_non_null(medium);
    /* an op whose result does not fit fails the same way */
    int64_t rows = 1024, cols = (int64_t)(80 * MIB / sizeof(float) / 1024);
    eg_tensor *row = eg_ones(EG_DTYPE_F32, 2, (int64_t[]){1, cols});
    eg_tensor *column = eg_ones(EG_DTYPE_F32, 2, (int64_t[]){rows, 1});
    assert_null(eg_mul(row, column));
    check_error(EG_ERR_OUT_OF_MEMORY, "requested 80.0 MiB", NULL);
    check_program_continues();
    assert_int_equal(eg_scope_end(), EG_OK);
    /* without the limit the big allocation succeeds */
    assert_int_equal(eg_memory_set_limit(NULL, 0), EG_OK);
    assert_int_equal(eg_memory_stats_get(NULL, &stats), EG_OK);
    assert_int_equal(stats.limit, 0);
    eg_scope_begin();
    big = eg_zeros(EG_DTYPE_F32, 1, &n);
    assert_non_null(big);
    assert_int_equal(eg_scope_end(), EG_OK);
    assert_int_equal(eg_memory_trim(NULL), EG_OK);
}

/* EG_ALLOCATOR=system is read once, when the CPU allocator is first used, and cannot be switched
 * at run time, so the system allocator is covered by test_allocator (which builds one directly)
 * and by running a whole test binary with the variable set. Here we only check the reported
 * name matches the environment. */
static void test_allocator_kind_from_environment(void **state) {
    (void)state;
    const char *env = getenv("EG_ALLOCATOR");
    const char *name = eg_memory_allocator_name(NULL);
    assert_string_equal(name, env && strcmp(env, "system") == 0 ? "system" : "caching");
}

int main(int argc, char **argv) {
    if (argc > 1) cmocka_set_test_filter(argv[1]); /* e.g. "test_print" or "test_*" */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_scope_releases_tensors, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_scope_keep, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_release_inside_scope, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_scope_end_without_scope, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_debug_listing, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_shape_mismatch, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_dtype_mismatch, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_devices, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_bad_axis, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_null_arguments, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_chain_keeps_first_cause, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_callsite_of_non_op_functions, case_setup,
                                        case_teardown),
        cmocka_unit_test_setup_teardown(test_status_strings, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_out_of_memory, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_allocator_kind_from_environment, case_setup,
                                        case_teardown),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    eg_shutdown();
    return failed;
}
