/* Running a test on a chosen device: EG_TEST_DEVICE=cuda:0 makes the test's tensors there (its
 * main wraps everything in a device scope), so that suites written for the CPU (the three
 * modes agreeing, the op × device table) check a GPU too. A device that is not there makes the
 * test report ctest's skip code (77, SKIP_RETURN_CODE in tests/CMakeLists.txt): skipped, never
 * passed. */
#ifndef EAGLE_TESTS_DEVICE_TEST_UTIL_H
#define EAGLE_TESTS_DEVICE_TEST_UTIL_H

#include <stdio.h>
#include <stdlib.h>

#include "eagle.h"

#define EG_TEST_SKIPPED 77

/* The device EG_TEST_DEVICE names, NULL when unset; exits with EG_TEST_SKIPPED (after saying
 * why) when it names a device this machine lacks. */
static inline const eg_device *test_device_or_skip(const char *test_name) {
    const char *name = getenv("EG_TEST_DEVICE");
    if (!name || !*name) return NULL;
    const eg_device *device = eg_device_get(name);
    if (!device) {
        fprintf(stderr, "%s: skipped: EG_TEST_DEVICE=%s: %s\n", test_name, name, eg_last_error());
        exit(EG_TEST_SKIPPED);
    }
    fprintf(stderr, "%s: tensors are made on %s\n", test_name, eg_device_name(device));
    return device;
}

#endif
