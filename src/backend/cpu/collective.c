/* CPU kernels of the collective ops: pack, start, wait (src/device/collective.h does the summing
 * through the replica's group). */
#include <string.h>

#include "backend/cpu/kernels.h"
#include "device/collective.h"

/* out's elements [start, start + part's count) as a contiguous view shaped like part. */
static eg_tensor packed_window(const eg_tensor *out, int64_t start, const eg_tensor *part) {
    eg_tensor w = *out;
    w.n_dims = part->n_dims;
    memcpy(w.shape, part->shape, sizeof w.shape);
    eg__contiguous_strides(w.n_dims, w.shape, w.strides);
    w.offset = out->offset + start;
    w.n_elems = part->n_elems;
    return w;
}

/* inputs (one float dtype, any shapes) -> (total,) packed in input order; the sum starts. */
eg_status eg__cpu_all_reduce_start(const eg__kernel_call *call);
eg_status eg__cpu_all_reduce_start(const eg__kernel_call *call) {
    int64_t start = 0;
    for (int i = 0; i < call->n_inputs; i++) {
        const eg_tensor *part = call->inputs[i];
        if (part->n_elems) {
            eg_tensor w = packed_window(call->output, start, part);
            eg_status status = eg__copy_into(&w, part);
            if (status != EG_OK) return status;
        }
        start += part->n_elems;
    }
    return eg__collective_start(call->attrs->ints[0], call->attrs->ints[1], eg__data(call->output),
                                call->output->n_elems, call->output->dtype);
}

/* x (total,) being summed -> (total,) the sum, once every replica's part arrived. */
eg_status eg__cpu_all_reduce_done(const eg__kernel_call *call);
eg_status eg__cpu_all_reduce_done(const eg__kernel_call *call) {
    const eg_tensor *x = call->inputs[0];
    eg_status status = eg__collective_wait(call->attrs->ints[0], call->attrs->ints[1], eg__data(x));
    return status == EG_OK ? eg__copy_into(call->output, x) : status;
}

/* x (any shape) -> x summed over the replicas. */
eg_status eg__cpu_all_reduce(const eg__kernel_call *call);
eg_status eg__cpu_all_reduce(const eg__kernel_call *call) {
    eg_status status = eg__copy_into(call->output, call->inputs[0]);
    int64_t handle = call->attrs->ints[0], tag = call->attrs->ints[1];
    void *data = eg__data(call->output);
    if (status == EG_OK)
        status =
            eg__collective_start(handle, tag, data, call->output->n_elems, call->output->dtype);
    return status == EG_OK ? eg__collective_wait(handle, tag, data) : status;
}
