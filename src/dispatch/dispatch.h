/* Internal: from a device to its backend, and the one kernel-launch path every executor takes.
 *
 * Sits above the backends (it names them) and below the executors. */
#ifndef EAGLE_SRC_DISPATCH_DISPATCH_H
#define EAGLE_SRC_DISPATCH_DISPATCH_H

#include <stdatomic.h>

#include "backend/backend.h"

/* Indexed by eg_device_type: the backend that computes for every device of that kind (NULL where
 * this build has none). */
extern const eg__backend *const eg__backends[2];

static inline const eg__backend *eg__backend_of(const eg_device *device) {
    return eg__backends[device->type];
}

/* The device whose backend runs call: the output's, except for a copy between devices, which
 * the non-host device of the pair runs (the one that can see both memories). */
static inline const eg_device *eg__launch_device(const eg__kernel_call *call) {
    const eg_device *device = call->output->device;
    if (__builtin_expect(call->op == EG__OP_TO_DEVICE, 0) && device->host)
        device = call->inputs[0]->device;
    return device;
}

eg_status eg__launch_missing(const eg__kernel_call *call, const eg_device *device);

/* Check numerics: 0 off, 1 on, -1 not read from the environment yet (so that the launch path's
 * check is one load while it is off). */
extern atomic_int eg__check_numerics_state;
/* With check numerics on (or unknown yet): EG_ERR_NUMERICS when call's float output holds a
 * NaN or an infinity. */
eg_status eg__check_numerics_slow(const eg__kernel_call *call);
static inline eg_status eg__check_output(const eg__kernel_call *call) {
    if (__builtin_expect(atomic_load_explicit(&eg__check_numerics_state, memory_order_relaxed), 0))
        return eg__check_numerics_slow(call);
    return EG_OK;
}
eg_status eg__launch_failed(const eg__kernel_call *call, const eg_device *device, eg_status status);

/* Runs call's kernel on its device: the one path from every executor (eager, lazy, graph) to a
 * kernel. call->output has its storage. Errors name the op and the device: no kernel there
 * (EG_ERR_UNSUPPORTED) or the kernel's own failure. Inline: every eager op takes it. */
static inline eg_status eg__launch(const eg__kernel_call *call) {
    const eg_device *device = eg__launch_device(call);
    eg__kernel_fn kernel = eg__backend_of(device)->kernels[call->op];
    if (__builtin_expect(!kernel, 0)) return eg__launch_missing(call, device);
    eg_status status = kernel(call);
    if (__builtin_expect(status != EG_OK, 0)) return eg__launch_failed(call, device, status);
    return eg__check_output(call);
}

/* The same in a replayed graph: the backend's replay kernel where it has one (the same bits,
 * split differently among the threads). */
eg_status eg__launch_replay(const eg__kernel_call *call);

/* A contiguous tensor with x's values on x's device: x itself (a new reference) when already
 * contiguous, else a copy made by the device's copy kernel. Not registered with any scope; drop
 * with eg__unref. NULL + error on out of memory. */
eg_tensor *eg__contiguous_on_device(const eg_tensor *x);

/* Whether `device` can run op on inputs of these dtypes and layout (the backend's supports()). */
bool eg__device_supports(const eg_device *device, const eg__op_signature *sig);

#endif
