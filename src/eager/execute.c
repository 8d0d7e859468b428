/* Eager execution: the path every op call takes. */
#include <stdio.h>

#include "dispatch/dispatch.h"
#include "exec/executor.h"
#include "exec/observer.h"
#include "lazy/internal.h"

static __attribute__((noinline, cold)) void released_input(const char *op, int index,
                                                           const eg_tensor *t) {
    char what[96];
    snprintf(what, sizeof what, "%s (input %d)", op, index);
    eg__debug_released_error(t, what, false);
}

/* Whether device has a kernel for op on these inputs' dtypes: asked only for an empty result,
 * which no kernel computes, so that an op a device lacks fails there the same way whatever the
 * sizes (what eg_device_supports_op promises). */
static __attribute__((noinline, cold)) bool empty_result_supported(eg__op op, int n_inputs,
                                                                   const eg_tensor *const *inputs,
                                                                   const eg_device *device) {
    eg_dtype dtypes[32];
    int n = n_inputs < 32 ? n_inputs : 32;
    for (int i = 0; i < n; i++) dtypes[i] = inputs[i]->dtype;
    eg__op_signature signature = {op, n, dtypes, true};
    if (eg__device_supports(device, &signature)) return true;
    eg__op_error(op, EG_ERR_UNSUPPORTED, "no kernel for %s on %s", eg_dtype_name(dtypes[0]),
                 device->name);
    return false;
}

/* Inlined into eg__execute so that the observers' check is all an op pays while none is on. The
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
    /* A tensor that debug mode retired on release has no storage: ops on stored tensors (every
     * eager op) pay nothing more for this check than the branch on all_stored. */
    if (__builtin_expect(!all_stored, 0))
        for (int i = 0; i < n_inputs; i++)
            if (__builtin_expect(inputs[i]->debug_released, 0)) {
                released_input(def->name, i, inputs[i]);
                return NULL;
            }
    const eg_device *device = inputs[0]->device;
    for (int i = 1; i < n_inputs; i++) {
        if (__builtin_expect(inputs[i]->device != device, 0)) {
            eg__op_error(op, EG_ERR_DEVICE,
                         "inputs on different devices: input 0 on %s, input %d on %s "
                         "(eg_tensor_to copies between devices)",
                         device->name, i, inputs[i]->device->name);
            return NULL;
        }
    }
    eg__meta meta;
    meta.is_view = false;
    meta.device = NULL;
    if (def->infer(op, n_inputs, inputs, attrs, &meta) != EG_OK) return NULL;
    if (__builtin_expect(meta.device != NULL, 0)) device = meta.device; /* to_device */
    /* lazy and graph executors record the op; eager's path follows, inlined */
    if (eg__lazy_recording())
        return eg__executor_current()->run(op, n_inputs, inputs, attrs, &meta, device);
    eg_tensor *output;
    /* An eager op reading a lazy tensor computes it first. */
    if (__builtin_expect(!all_stored, 0))
        for (int i = 0; i < n_inputs; i++)
            if (!inputs[i]->storage && eg__realize(inputs[i]) != EG_OK) return NULL;
    if (meta.is_view) {
        output = eg__tensor_view(inputs[0], meta.n_dims, meta.shape, meta.strides, meta.offset);
    } else {
        output = eg__tensor_alloc(meta.dtype, meta.n_dims, meta.shape, device);
        if (!output) return NULL;
        eg__kernel_call call = {op, n_inputs, inputs, output, attrs};
        bool failed = output->n_elems > 0 ? eg__launch(&call) != EG_OK
                                          : !empty_result_supported(op, n_inputs, inputs, device);
        if (failed) {
            eg_release(output);
            return NULL;
        }
    }
    return output;
}

/* With an observer on (a recording tape, the profiler): they see the op around its run. */
static __attribute__((noinline)) eg_tensor *
execute_observed(eg__op op, int n_inputs, const eg_tensor *const *inputs, const eg__attrs *attrs) {
    eg__op_span spans[EG__MAX_OBSERVERS];
    unsigned on = eg__observers_begin(op, n_inputs, inputs, spans);
    eg_tensor *output = execute_now(op, n_inputs, inputs, attrs);
    eg__observers_end(on, op, n_inputs, inputs, attrs, output, spans);
    return output;
}

eg_tensor *eg__execute(eg__op op, int n_inputs, const eg_tensor *const *inputs,
                       const eg__attrs *attrs) {
    if (__builtin_expect(eg__observing(), 0)) return execute_observed(op, n_inputs, inputs, attrs);
    return execute_now(op, n_inputs, inputs, attrs);
}
