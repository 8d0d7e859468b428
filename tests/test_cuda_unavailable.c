/* A CUDA build on a machine without a usable GPU (no driver, driver too old, no device): the
 * backend is built, says why no device is usable, cuda:0 is a clear error, and nothing else
 * changes. Where a GPU is usable there is nothing of this to check: the test is skipped (77). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "eagle.h"
#include "test_util.h"

static void test_backend_says_why(void **state) {
    (void)state;
    const char *info = eg_device_kind_info(EG_DEVICE_CUDA);
    fprintf(stderr, "CUDA: %s\n", info);
    assert_non_null(strstr(info, "built (CUDA runtime "));
    assert_non_null(strstr(info, "device code sm_"));
    assert_non_null(strstr(info, "; no device usable: "));
    /* the libraries opened for the description: found on this project's machines */
    assert_non_null(strstr(info, "cuBLASLt 13."));
    assert_non_null(strstr(info, "cuDNN 9."));
    assert_non_null(strstr(info, "NVRTC 13."));
    assert_string_equal(eg_device_kind_info(EG_DEVICE_CPU), "built");
}

static void test_cuda_names_are_clear_errors(void **state) {
    (void)state;
    static const char *const names[] = {"cuda", "cuda:0", "cuda:3"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        assert_null(eg_device_get(names[i]));
        expect_error_containing(EG_ERR_UNSUPPORTED, "device_get: no device '", names[i],
                                "': ", "; the devices are cpu", NULL);
    }
    assert_null(eg_device_get("cuda:x"));
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "is not a device name", NULL);
}

static void test_only_host_devices(void **state) {
    (void)state;
    for (int d = 0; d < eg_device_count(); d++)
        assert_int_equal(eg_device_kind(eg_device_at(d)), EG_DEVICE_CPU);
    /* the host still computes */
    eg_scope_begin();
    int64_t shape[1] = {3};
    eg_tensor *x = eg_full(EG_DTYPE_F32, 1, shape, 2.0);
    eg_tensor *y = eg_sum(eg_mul(x, x), 0, NULL, false);
    assert_true(eg_item(y) == 12.0);
    eg_scope_end();
    assert_int_equal(eg_last_status(), EG_OK);
}

int main(void) {
    if (eg_device_kind_info(EG_DEVICE_CUDA) &&
        !strstr(eg_device_kind_info(EG_DEVICE_CUDA), "no device usable")) {
        fprintf(stderr, "skipped: a GPU is usable here (%s)\n",
                eg_device_kind_info(EG_DEVICE_CUDA));
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_backend_says_why),
        cmocka_unit_test(test_cuda_names_are_clear_errors),
        cmocka_unit_test(test_only_host_devices),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
