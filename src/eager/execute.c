/* Eager execution: the path every op call takes. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "autograd/internal.h"
#include "backend/backend.h"
#include "core/error.h"
#include "lazy/internal.h"
#include "profiler/internal.h"

eg_status eg__op_error(eg__op op, eg_status status, const char *fmt, ...) {
    if (eg__error_pending()) return status;
    char message[768];
    va_list args;
    va_start(args, fmt);
    vsnprintf(message, sizeof message, fmt, args);
    va_end(args);
    return eg__error(status, "%s: %s", eg__op_defs[op].name, message);
}

/* Inlined into eg__execute so that the profiler's check is all an op pays while it is off. The
 * argument checks are one pass with the failures out of line: this is the path every small op's
 * overhead is measured on. */
static inline __attribute__((always_inline)) eg_tensor *
execute_now(eg__op op, int n_inputs, const eg_tensor *const *inputs, const eg__attrs *attrs) {
    const eg__op_def *def = &eg__op_defs[op];
    bool all_stored = true;
    for (int i = 0; i < n_inputs; i++) {
        if (__builtin_expect(!inputs[i], 0)) {
            eg__check_arg(inputs[i], def->name, i);
            return NULL;
        }
        all_stored &= inputs[i]->storage != NULL;
    }
    const eg_device *device = inputs[0]->device;
    for (int i = 1; i < n_inputs; i++) {
        if (__builtin_expect(inputs[i]->device != device, 0)) {
            eg__op_error(op, EG_ERR_DEVICE, "inputs on different devices: %s and %s", device->name,
                         inputs[i]->device->name);
            return NULL;
        }
    }
    eg__meta meta;
    meta.is_view = false;
    if (def->infer(op, n_inputs, inputs, attrs, &meta) != EG_OK) return NULL;
    eg_tensor *output;
    if (eg__lazy_recording()) {
        output = eg__lazy_record(op, n_inputs, inputs, attrs, &meta, device);
        if (!output) return NULL;
        goto record;
    }
    /* An eager op reading a lazy tensor computes it first. */
    if (__builtin_expect(!all_stored, 0))
        for (int i = 0; i < n_inputs; i++)
            if (!inputs[i]->storage && eg__realize(inputs[i]) != EG_OK) return NULL;
    if (meta.is_view) {
        output = eg__tensor_view(inputs[0], meta.n_dims, meta.shape, meta.strides, meta.offset);
        if (!output) return NULL;
    } else {
        eg__kernel_fn kernel = device->kernels[op];
        if (!kernel) {
            eg__op_error(op, EG_ERR_UNSUPPORTED, "no kernel on %s", device->name);
            return NULL;
        }
        output = eg__tensor_alloc(meta.dtype, meta.n_dims, meta.shape, device);
        if (!output) return NULL;
        eg__kernel_call call = {op, n_inputs, inputs, output, attrs};
        if (output->n_elems > 0) {
            eg_status status = kernel(&call);
            if (status != EG_OK) {
                eg__op_error(op, status, "kernel failed on %s", device->name);
                eg_release(output);
                return NULL;
            }
        }
    }
record:
    if (eg__tapes_active() && !(def->flags & EG__OPF_NO_GRAD))
        eg__tape_record(op, n_inputs, inputs, attrs, output);
    return output;
}

eg_tensor *eg__execute(eg__op op, int n_inputs, const eg_tensor *const *inputs,
                       const eg__attrs *attrs) {
    if (EG__PROFILER_ON()) return eg__profiler_execute(op, n_inputs, inputs, attrs);
    return execute_now(op, n_inputs, inputs, attrs);
}

eg_tensor *eg__execute_unprofiled(eg__op op, int n_inputs, const eg_tensor *const *inputs,
                                  const eg__attrs *attrs) {
    return execute_now(op, n_inputs, inputs, attrs);
}
