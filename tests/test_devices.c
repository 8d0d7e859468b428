/* Devices: the registry and its errors, logical CPU devices as separate memory spaces (their own
 * allocators, statistics and limits), device scopes, placement of results, variables, optimizer
 * slots, tapes, lazy and traced code on a device other than cpu:0, eg_tensor_to and its
 * gradient, and the visible-devices setting. The host is split into three devices before the
 * first tensor (main). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "eagle.h"
#include "test_util.h"

static const eg_device *cpu0, *cpu1, *cpu2;

static eg_tensor *vector_on(const eg_device *device, const float *values, int64_t n) {
    assert_int_equal(eg_device_scope_begin(device), EG_OK);
    eg_tensor *t = eg_tensor_from_data(values, EG_DTYPE_F32, 1, &n);
    assert_int_equal(eg_device_scope_end(), EG_OK);
    assert_non_null(t);
    assert_ptr_equal(eg_tensor_device(t), device);
    return t;
}

static void assert_same_floats(const eg_tensor *a, const eg_tensor *b) {
    assert_int_equal(eg_tensor_n_elems(a), eg_tensor_n_elems(b));
    float x[64], y[64];
    assert_true(eg_tensor_n_elems(a) <= 64);
    assert_int_equal(eg_tensor_copy_to_host(a, x, sizeof x), EG_OK);
    assert_int_equal(eg_tensor_copy_to_host(b, y, sizeof y), EG_OK);
    assert_memory_equal(x, y, sizeof(float) * (size_t)eg_tensor_n_elems(a));
}

static void test_registry_names_and_order(void **state) {
    (void)state;
    assert_int_equal(eg_device_count(), 3);
    assert_ptr_equal(eg_device_at(0), cpu0);
    assert_ptr_equal(eg_device_at(2), cpu2);
    assert_null(eg_device_at(3));
    assert_string_equal(eg_device_name(cpu0), "cpu:0");
    assert_string_equal(eg_device_name(cpu2), "cpu:2");
    assert_ptr_equal(eg_device_get("cpu"), cpu0);
    assert_ptr_equal(eg_device_cpu(), cpu0);
    assert_int_equal(eg_device_index(cpu1), 1);
    assert_int_equal(eg_device_kind(cpu1), EG_DEVICE_CPU);
    assert_int_equal(eg_device_sync(cpu1), EG_OK);
    /* the split is fixed once the host is in use */
    assert_int_equal(eg_device_configure_cpus(3), EG_OK);
    assert_int_equal(eg_device_configure_cpus(2), EG_ERR_STATE);
    expect_error_containing(EG_ERR_STATE, "already in use as 3 CPU devices", NULL);
    assert_int_equal(eg_device_configure_cpus(0), EG_ERR_INVALID_ARGUMENT);
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "1 to 64", NULL);
}

static void test_unknown_devices_list_the_devices(void **state) {
    (void)state;
    const char *listed = "the devices are cpu:0, cpu:1, cpu:2";
    assert_null(eg_device_get("cpu:3"));
    expect_error_containing(EG_ERR_DEVICE, "'cpu:3'", listed, "test_devices.c", NULL);
    /* without a usable GPU: the reason is this build's (no backend) or the machine's (no
     * driver, no GPU: test_cuda_unavailable checks those words) */
    if (strcmp(eg_device_kind_info(EG_DEVICE_CUDA), "not built") == 0) {
        assert_null(eg_device_get("cuda:0"));
        expect_error_containing(EG_ERR_UNSUPPORTED, "'cuda:0'", "no CUDA backend", listed, NULL);
    } else if (strstr(eg_device_kind_info(EG_DEVICE_CUDA), "no device usable")) {
        assert_null(eg_device_get("cuda:0"));
        expect_error_containing(EG_ERR_UNSUPPORTED, "'cuda:0'", listed, NULL);
    }
    assert_null(eg_device_get("tpu:0"));
    expect_error_containing(EG_ERR_UNSUPPORTED, "'tpu:0'", "cpu and cuda", listed, NULL);
    assert_null(eg_device_get("cpu:one"));
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "'cpu:one' is not a device name", listed,
                            NULL);
    assert_null(eg_device_get(""));
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "is not a device name", NULL);
    assert_null(eg_device_get(NULL));
    expect_error_containing(EG_ERR_NULL_ARGUMENT, "name is NULL", NULL);
}

static size_t in_use(const eg_device *device) {
    eg_memory_stats stats;
    assert_int_equal(eg_memory_stats_get(device, &stats), EG_OK);
    return stats.bytes_in_use;
}

static void test_each_device_has_its_own_allocator(void **state) {
    (void)state;
    size_t before0 = in_use(cpu0), before1 = in_use(cpu1);
    int64_t shape[1] = {1 << 16};
    assert_int_equal(eg_device_scope_begin(cpu1), EG_OK);
    eg_tensor *t = eg_zeros(EG_DTYPE_F32, 1, shape);
    assert_int_equal(eg_device_scope_end(), EG_OK);
    assert_ptr_equal(eg_tensor_device(t), cpu1);
    assert_true(in_use(cpu1) >= before1 + sizeof(float) * (1 << 16));
    assert_int_equal(in_use(cpu0), before0);
    eg_release(t);
    assert_int_equal(in_use(cpu1), before1);

    /* a limit on cpu:2 stops cpu:2 only, with the device in the message */
    assert_int_equal(eg_memory_set_limit(cpu2, 1 << 20), EG_OK);
    int64_t big[1] = {1 << 20}; /* 4 MiB */
    assert_int_equal(eg_device_scope_begin(cpu2), EG_OK);
    assert_null(eg_zeros(EG_DTYPE_F32, 1, big));
    assert_int_equal(eg_device_scope_end(), EG_OK);
    expect_error_containing(EG_ERR_OUT_OF_MEMORY, "cpu:2", NULL);
    eg_tensor *fine = eg_zeros(EG_DTYPE_F32, 1, big);
    assert_non_null(fine);
    assert_ptr_equal(eg_tensor_device(fine), cpu0);
    eg_release(fine);
    assert_int_equal(eg_memory_set_limit(cpu2, 0), EG_OK);
}

static void *current_device_of_new_thread(void *out) {
    *(const eg_device **)out = eg_device_current();
    return NULL;
}

static void test_device_scopes_nest_per_thread(void **state) {
    (void)state;
    assert_ptr_equal(eg_device_current(), cpu0);
    assert_int_equal(eg_device_scope_begin(cpu1), EG_OK);
    assert_int_equal(eg_device_scope_begin(cpu2), EG_OK);
    eg_tensor *inner = eg_ones(EG_DTYPE_F32, 0, NULL);
    assert_int_equal(eg_device_scope_end(), EG_OK);
    eg_tensor *outer = eg_arange(0, 4, 1, EG_DTYPE_F32);
    const eg_device *seen = NULL;
    pthread_t thread;
    assert_int_equal(pthread_create(&thread, NULL, current_device_of_new_thread, &seen), 0);
    assert_int_equal(pthread_join(thread, NULL), 0);
    assert_int_equal(eg_device_scope_end(), EG_OK);
    assert_ptr_equal(eg_tensor_device(inner), cpu2);
    assert_ptr_equal(eg_tensor_device(outer), cpu1);
    assert_ptr_equal(seen, cpu0); /* scopes are the calling thread's */
    assert_ptr_equal(eg_device_current(), cpu0);
    assert_int_equal(eg_device_scope_end(), EG_ERR_STATE);
    expect_error_containing(EG_ERR_STATE, "no device scope", NULL);
    assert_int_equal(eg_device_scope_begin(NULL), EG_ERR_NULL_ARGUMENT);
    expect_error_containing(EG_ERR_NULL_ARGUMENT, "device is NULL", NULL);
}

static void test_inputs_on_two_devices_are_an_error(void **state) {
    (void)state;
    const float values[3] = {1, 2, 3};
    eg_tensor *a = vector_on(cpu0, values, 3), *b = vector_on(cpu1, values, 3);
    char line[32];
    snprintf(line, sizeof line, "test_devices.c:%d", __LINE__ + 1);
    assert_null(eg_add(a, b));
    expect_error_containing(EG_ERR_DEVICE, "add: inputs on different devices", "cpu:0", "cpu:1",
                            line, NULL);
    /* lazily too: the check runs when the op is recorded */
    eg_lazy_begin();
    snprintf(line, sizeof line, "test_devices.c:%d", __LINE__ + 1);
    assert_null(eg_mul(b, eg_exp(a)));
    assert_int_equal(eg_lazy_end(), EG_OK);
    expect_error_containing(EG_ERR_DEVICE, "mul: inputs on different devices", line, NULL);
}

static void test_results_live_on_their_inputs_device(void **state) {
    (void)state;
    const float values[4] = {0.5f, -1, 2, 3};
    eg_tensor *x = vector_on(cpu1, values, 4);
    eg_tensor *on0 = vector_on(cpu0, values, 4);
    /* ops that add constants of their own (scalar ops, losses) put them on x's device */
    eg_tensor *y = eg_mul_scalar(eg_add_scalar(eg_exp(x), 1.0), 3.0);
    eg_tensor *total = eg_sum(y, 0, NULL, false);
    assert_non_null(total);
    assert_ptr_equal(eg_tensor_device(y), cpu1);
    assert_ptr_equal(eg_tensor_device(total), cpu1);
    eg_tensor *same_on_0 = eg_mul_scalar(eg_add_scalar(eg_exp(on0), 1.0), 3.0);
    assert_same_floats(y, same_on_0);
    eg_tensor *view = eg_slice(x, 0, 1, 3, 1);
    assert_ptr_equal(eg_tensor_device(view), cpu1);
}

static void test_tensor_to_copies_and_differentiates(void **state) {
    (void)state;
    const float values[6] = {1, 2, 3, 4, 5, 6};
    eg_tensor *x = vector_on(cpu0, values, 6);
    int64_t shape[2] = {2, 3};
    eg_tensor *transposed = eg_transpose(eg_reshape(x, 2, shape), 0, 1);
    eg_tensor *moved = eg_tensor_to(transposed, cpu2);
    assert_non_null(moved);
    assert_ptr_equal(eg_tensor_device(moved), cpu2);
    assert_true(eg_tensor_is_contiguous(moved));
    assert_false(eg_tensor_shares_storage(moved, x));
    assert_same_floats(moved, eg_contiguous(transposed));
    assert_null(eg_tensor_to(x, NULL));
    expect_error_containing(EG_ERR_NULL_ARGUMENT, "to_device", NULL);

    /* d/dx sum(to(x, cpu:1)^2) = 2x, delivered on x's device */
    eg_tape *tape = eg_tape_begin(false);
    eg_tape_watch(tape, x);
    eg_tensor *there = eg_tensor_to(x, cpu1);
    eg_tensor *loss = eg_sum(eg_mul(there, there), 0, NULL, false);
    eg_tensor *grad = NULL;
    assert_int_equal(eg_tape_gradient(tape, loss, 1, &x, &grad, EG_UNCONNECTED_ZERO), EG_OK);
    eg_tape_free(tape);
    assert_ptr_equal(eg_tensor_device(loss), cpu1);
    assert_ptr_equal(eg_tensor_device(grad), cpu0);
    assert_same_floats(grad, eg_mul_scalar(x, 2.0));
}

/* One Adam step on a variable that lives on `device`; returns the updated values. */
static void adam_step_on(const eg_device *device, float *out) {
    const float initial[4] = {1, -2, 3, -4}, gradient[4] = {0.5f, 0.25f, -1, 2};
    eg_tensor *start = vector_on(device, initial, 4);
    eg_tensor *variable = eg_variable(start, "w");
    eg_tensor *grad = vector_on(device, gradient, 4);
    assert_ptr_equal(eg_tensor_device(variable), device);
    eg_adam_options options = eg_adam_options_default();
    eg_optimizer *adam = eg_adam_new(&options);
    assert_int_equal(eg_optimizer_apply_gradients(adam, 1, &grad, &variable), EG_OK);
    eg_tensor *slot = eg_optimizer_get_slot(adam, variable, "momentum");
    assert_non_null(slot);
    assert_ptr_equal(eg_tensor_device(slot), device);
    assert_int_equal(eg_tensor_copy_to_host(variable, out, 4 * sizeof(float)), EG_OK);
    eg_optimizer_free(adam);
    eg_release(variable);
}

static void test_variables_and_optimizers_on_another_device(void **state) {
    (void)state;
    float on0[4], on1[4];
    adam_step_on(cpu0, on0);
    adam_step_on(cpu1, on1);
    assert_memory_equal(on0, on1, sizeof on0);

    /* a gradient on another device than its variable is refused before anything changes */
    const float values[2] = {1, 2};
    eg_tensor *variable = eg_variable(vector_on(cpu0, values, 2), "v");
    eg_tensor *grad = vector_on(cpu1, values, 2);
    eg_sgd_options options = eg_sgd_options_default();
    eg_optimizer *sgd = eg_sgd_new(&options);
    assert_int_equal(eg_optimizer_apply_gradients(sgd, 1, &grad, &variable), EG_ERR_DEVICE);
    expect_error_containing(EG_ERR_DEVICE, "cpu:1", "cpu:0", NULL);
    eg_optimizer_free(sgd);

    /* an assign from another device copies the value over first, in every form */
    const float other[2] = {10, 20};
    assert_int_equal(eg_assign(variable, vector_on(cpu2, other, 2)), EG_OK);
    assert_int_equal(eg_assign_add(variable, vector_on(cpu1, values, 2)), EG_OK);
    assert_int_equal(eg_assign_sub(variable, vector_on(cpu2, values, 2)), EG_OK);
    assert_ptr_equal(eg_tensor_device(variable), cpu0);
    float now[2];
    assert_int_equal(eg_tensor_copy_to_host(variable, now, sizeof now), EG_OK);
    assert_true(now[0] == 10 && now[1] == 20);
    eg_release(variable);
}

static eg_status traced_step(eg_tensor *const *inputs, eg_tensor **outputs, void *data) {
    (void)data;
    outputs[0] = eg_sum(eg_tanh(eg_mul(inputs[0], inputs[1])), 0, NULL, false);
    return outputs[0] ? EG_OK : eg_last_status();
}

static void test_lazy_and_graph_modes_on_another_device(void **state) {
    (void)state;
    const float a_values[5] = {0.1f, 0.2f, -0.3f, 0.4f, 2}, b_values[5] = {3, -1, 0.5f, 2, 1};
    eg_tensor *a = vector_on(cpu2, a_values, 5), *b = vector_on(cpu2, b_values, 5);
    eg_tensor *inputs[2] = {a, b};
    eg_tensor *eager = NULL;
    assert_int_equal(traced_step(inputs, &eager, NULL), EG_OK);
    eg_lazy_begin();
    eg_tensor *lazy = NULL;
    assert_int_equal(traced_step(inputs, &lazy, NULL), EG_OK);
    assert_int_equal(eg_lazy_end(), EG_OK);
    assert_int_equal(eg_realize(1, &lazy), EG_OK);
    eg_function *f = eg_function_new("step", traced_step, 2, 1, NULL);
    eg_tensor *graph = NULL;
    for (int call = 0; call < 2; call++) { /* the trace, then a replay */
        eg_release(graph);
        assert_int_equal(eg_function_call(f, inputs, &graph), EG_OK);
        assert_ptr_equal(eg_tensor_device(graph), cpu2);
        assert_same_floats(graph, eager);
    }
    assert_ptr_equal(eg_tensor_device(eager), cpu2);
    assert_ptr_equal(eg_tensor_device(lazy), cpu2);
    assert_same_floats(lazy, eager);
    eg_release(graph);
    eg_function_free(f);
}

static eg_status traced_across_devices(eg_tensor *const *inputs, eg_tensor **outputs, void *data) {
    outputs[0] = eg_exp(eg_tensor_to(eg_exp(inputs[0]), data));
    return outputs[0] ? EG_OK : eg_last_status();
}

/* One arena on one device holds a trace's buffers: a trace over two devices is refused clearly
 * instead of putting cpu:1's tensors in cpu:0's memory. */
static void test_a_trace_over_two_devices_is_refused(void **state) {
    (void)state;
    const float values[2] = {1, 2};
    eg_tensor *x = vector_on(cpu0, values, 2);
    eg_function *f = eg_function_new("across", traced_across_devices, 1, 1, (void *)cpu1);
    eg_tensor *y = NULL;
    assert_int_equal(eg_function_call(f, &x, &y), EG_ERR_UNSUPPORTED);
    expect_error_containing(EG_ERR_UNSUPPORTED, "computes on one device", "cpu:0", "cpu:1", NULL);
    assert_null(y);
    eg_function_free(f);
    /* eagerly the same steps run, on both devices */
    assert_int_equal(traced_across_devices(&x, &y, (void *)cpu1), EG_OK);
    assert_ptr_equal(eg_tensor_device(y), cpu1);
}

static void test_visible_devices(void **state) {
    (void)state;
    const eg_device *chosen[2] = {cpu0, cpu2};
    assert_int_equal(eg_device_set_visible(2, chosen), EG_OK);
    assert_int_equal(eg_device_count(), 2);
    assert_ptr_equal(eg_device_at(1), cpu2);
    assert_null(eg_device_get("cpu:1"));
    expect_error_containing(EG_ERR_DEVICE, "cpu:1 is hidden",
                            "the visible devices are cpu:0, cpu:2", NULL);
    /* a tensor already on the hidden device keeps working */
    const float values[2] = {1, 2};
    eg_tensor *kept = vector_on(cpu1, values, 2);
    assert_non_null(eg_exp(kept));
    const eg_device *without_host[1] = {cpu1};
    assert_int_equal(eg_device_set_visible(1, without_host), EG_ERR_INVALID_ARGUMENT);
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "cpu:0 must stay visible", NULL);
    assert_int_equal(eg_device_count(), 2); /* unchanged by the refused call */
    assert_int_equal(eg_device_set_visible(0, NULL), EG_OK);
    assert_int_equal(eg_device_count(), 3);
    assert_ptr_equal(eg_device_get("cpu:1"), cpu1);
}

int main(void) {
    /* before the first tensor: the host becomes cpu:0, cpu:1, cpu:2 */
    if (eg_device_configure_cpus(3) != EG_OK) {
        fprintf(stderr, "configure: %s\n", eg_last_error());
        return 1;
    }
    cpu0 = eg_device_get("cpu:0");
    cpu1 = eg_device_get("cpu:1");
    cpu2 = eg_device_get("cpu:2");
    if (!cpu0 || !cpu1 || !cpu2) {
        fprintf(stderr, "lookup: %s\n", eg_last_error());
        return 1;
    }
    const struct CMUnitTest tests[] = {
#define CASE(name) cmocka_unit_test_setup_teardown(name, fresh_scope_setup, strict_scope_teardown)
        CASE(test_registry_names_and_order),
        CASE(test_unknown_devices_list_the_devices),
        CASE(test_each_device_has_its_own_allocator),
        CASE(test_device_scopes_nest_per_thread),
        CASE(test_inputs_on_two_devices_are_an_error),
        CASE(test_results_live_on_their_inputs_device),
        CASE(test_tensor_to_copies_and_differentiates),
        CASE(test_variables_and_optimizers_on_another_device),
        CASE(test_lazy_and_graph_modes_on_another_device),
        CASE(test_a_trace_over_two_devices_is_refused),
        CASE(test_visible_devices),
#undef CASE
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    eg_shutdown();
    return failed;
}
