/* Internal: the device vtable. A backend fills one of these; op code only talks to it. */
#ifndef EAGLE_SRC_BACKEND_BACKEND_H
#define EAGLE_SRC_BACKEND_BACKEND_H

#include "mem/allocator.h"
#include "ops/internal.h"

struct eg_device {
    const char *name;
    eg_device_type type;
    int index;
    /* The allocator, created at first use (thread-safe through get_allocator). */
    eg__allocator *(*get_allocator)(const eg_device *device);
    /* Copies bytes between host and this device or within it. */
    eg_status (*copy)(const eg_device *device, void *dst, const void *src, size_t bytes);
    /* Waits until queued work is done (no-op on the CPU). */
    void (*sync)(const eg_device *device);
    /* Indexed by eg__op; NULL entries are unsupported on this device. */
    const eg__kernel_fn *kernels;
};

const eg_device *eg__cpu_device(void);
extern const eg__kernel_fn eg__cpu_kernels[EG__OP_COUNT];
/* Frees the CPU allocator's cached memory and joins the thread pool (eg_shutdown). */
void eg__cpu_shutdown(void);

#endif
