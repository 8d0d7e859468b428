/* cuda:0 as a device (label `cuda`; skipped, code 77, where no GPU is usable): it is listed after
 * the host, tensors are made on it and read back, its caching allocator keeps statistics,
 * rounds to 512 bytes, honours a limit with an out-of-memory error that names the driver's free
 * memory, trims, and ops on it agree with the CPU's. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "eagle.h"
#include "test_util.h"

static const eg_device *gpu;

static void test_listed_after_the_host(void **state) {
    (void)state;
    int n = eg_device_count();
    assert_true(n >= 2);
    assert_ptr_equal(eg_device_at(0), eg_device_cpu());
    assert_ptr_equal(eg_device_get("cuda"), gpu);
    assert_string_equal(eg_device_name(gpu), "cuda:0");
    assert_int_equal(eg_device_kind(gpu), EG_DEVICE_CUDA);
    assert_int_equal(eg_device_index(gpu), 0);
    fprintf(stderr, "cuda:0: %s\nCUDA: %s\n", eg_device_description(gpu),
            eg_device_kind_info(EG_DEVICE_CUDA));
    assert_non_null(strstr(eg_device_description(gpu), "GiB, compute capability "));
    assert_null(strstr(eg_device_kind_info(EG_DEVICE_CUDA), "no device usable"));
}

static void test_tensors_made_and_read_back(void **state) {
    (void)state;
    float data[6] = {1, -2, 3.5f, 4, 5, -6};
    int64_t shape[2] = {2, 3};
    eg_device_scope_begin(gpu);
    eg_tensor *a = eg_tensor_from_data(data, EG_DTYPE_F32, 2, shape);
    eg_tensor *z = eg_zeros(EG_DTYPE_F32, 2, shape);
    eg_tensor *f = eg_full(EG_DTYPE_F64, 2, shape, 0.25);
    eg_tensor *r = eg_arange(0, 6, 1, EG_DTYPE_I64);
    eg_device_scope_end();
    assert_ptr_equal(eg_tensor_device(a), gpu);
    float back[6];
    assert_int_equal(eg_tensor_copy_to_host(a, back, sizeof back), EG_OK);
    assert_memory_equal(back, data, sizeof data);
    assert_true(eg_item(eg_sum(z, 0, NULL, false)) == 0.0);
    assert_true(eg_tensor_get(f, (int64_t[]){1, 2}) == 0.25);
    assert_true(eg_tensor_get(r, (int64_t[]){5}) == 5.0);
    /* a strided view is read back without a kernel */
    eg_tensor *column = eg_slice(a, 1, 1, 2, 1);
    float two[2];
    assert_int_equal(eg_tensor_copy_to_host(column, two, sizeof two), EG_OK);
    assert_true(two[0] == -2.0f && two[1] == 5.0f);
    char *text = eg_tensor_to_string(a);
    assert_non_null(text);
    assert_non_null(strstr(text, "3.5"));
    free(text);
    /* host -> GPU -> host */
    eg_tensor *host = eg_tensor_from_data(data, EG_DTYPE_F32, 2, shape);
    eg_tensor *round_trip = eg_tensor_to(eg_tensor_to(host, gpu), eg_device_cpu());
    assert_memory_equal(eg_tensor_data(round_trip), data, sizeof data);
    assert_null(eg_tensor_data(a)); /* GPU memory has no host pointer */
    expect_error_containing(EG_ERR_DEVICE, "cuda:0", NULL);
}

static void test_ops_agree_with_the_cpu(void **state) {
    (void)state;
    int64_t shape[2] = {64, 48};
    eg_tensor *x = uniform_tensor(2, shape, 7);
    eg_tensor *w = uniform_tensor(2, (int64_t[]){48, 32}, 8);
    eg_tensor *cpu = eg_relu(eg_matmul(eg_exp(x), w));
    eg_tensor *on_gpu = eg_relu(eg_matmul(eg_exp(eg_tensor_to(x, gpu)), eg_tensor_to(w, gpu)));
    assert_ptr_equal(eg_tensor_device(on_gpu), gpu);
    eg_tensor *back = eg_tensor_to(on_gpu, eg_device_cpu());
    const float *p = eg_tensor_data(cpu), *q = eg_tensor_data(back);
    for (int64_t i = 0; i < 64 * 32; i++)
        assert_true(fabsf(p[i] - q[i]) <= 1e-4f * (1 + fabsf(p[i])));
    /* inputs on two devices: an error naming both */
    assert_null(eg_add(x, eg_tensor_to(x, gpu)));
    expect_error_containing(EG_ERR_DEVICE, "cpu", "cuda:0", NULL);
}

static void test_allocator(void **state) {
    (void)state;
    eg_memory_stats before, after;
    assert_int_equal(eg_memory_stats_get(gpu, &before), EG_OK);
    eg_device_scope_begin(gpu);
    eg_tensor *t = eg_empty(EG_DTYPE_U8, 1, (int64_t[]){1000});
    eg_device_scope_end();
    assert_int_equal(eg_memory_stats_get(gpu, &after), EG_OK);
    assert_int_equal(after.bytes_in_use - before.bytes_in_use, 1024); /* 512-byte rounding */
    assert_true(after.bytes_reserved >= 2u << 20);                    /* a 2 MiB small segment */
    eg_release(t);
    /* a limit below what a request needs: the error gives the allocator's and the driver's view */
    assert_int_equal(eg_memory_set_limit(gpu, 64u << 20), EG_OK);
    eg_device_scope_begin(gpu);
    assert_null(eg_empty(EG_DTYPE_F32, 1, (int64_t[]){(int64_t)(128u << 20) / 4}));
    eg_device_scope_end();
    expect_error_containing(EG_ERR_OUT_OF_MEMORY, "out of memory on cuda:0: requested 128 MiB",
                            "limit 64.0 MiB", "the driver reports ", " GiB free of ", NULL);
    assert_int_equal(eg_memory_set_limit(gpu, 0), EG_OK);
    assert_int_equal(eg_memory_reserve(gpu, 8u << 20), EG_OK);
    assert_int_equal(eg_memory_trim(gpu), EG_OK);
    assert_int_equal(eg_memory_stats_get(gpu, &after), EG_OK);
    assert_int_equal(after.bytes_cached, 0);
    assert_int_equal(eg_device_sync(gpu), EG_OK);
}

static void test_visible_devices_hide_it(void **state) {
    (void)state;
    const eg_device *host_only[1] = {eg_device_cpu()};
    assert_int_equal(eg_device_set_visible(1, host_only), EG_OK);
    assert_null(eg_device_get("cuda:0"));
    expect_error_containing(EG_ERR_DEVICE, "hidden", NULL);
    assert_int_equal(eg_device_set_visible(0, NULL), EG_OK);
    assert_ptr_equal(eg_device_get("cuda:0"), gpu);
}

int main(void) {
    gpu = eg_device_get("cuda:0");
    if (!gpu) {
        fprintf(stderr, "skipped: %s\n", eg_last_error());
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_listed_after_the_host, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_tensors_made_and_read_back, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_ops_agree_with_the_cpu, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_allocator, fresh_scope_setup, strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_visible_devices_hide_it, fresh_scope_setup,
                                        strict_scope_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
