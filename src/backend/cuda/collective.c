/* The collective ops on a GPU: all_reduce, all_reduce_start, all_reduce_done.
 *
 * A replica alone (handle 0, the default strategy: what `eagle train --device cuda` runs) sums
 * nothing: the kernels pack and copy on the device's stream. A group's sum goes through
 * src/device/collective.h, which reads and writes host memory, so the packed tensor is staged
 * through the host and summed at once, in start: the reduction does not overlap the step on a GPU
 * (NCCL would, on the device, and is not wired here yet), and a captured CUDA graph cannot hold
 * one (the capture fails with EG_ERR_UNSUPPORTED and the function replays op by op). */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/kernels.h"
#include "base/error.h"
#include "device/collective.h"

/* Sums the dense device tensor out over the group `handle` (not 0): out -> host, start, wait,
 * host -> out. */
static eg_status sum_through_host(eg__cuda_device *d, const eg__kernel_call *call, eg_tensor *out) {
    enum cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(eg__cuda_stream(d), &capturing) == cudaSuccess &&
        capturing != cudaStreamCaptureStatusNone)
        return eg__op_error(call->op, EG_ERR_UNSUPPORTED,
                            "on %s: a sum over replicas is staged through the host, which a "
                            "captured CUDA graph cannot hold",
                            d->device->name);
    size_t bytes = (size_t)out->n_elems * eg__dtype_size(out->dtype);
    void *host = malloc(bytes ? bytes : 1);
    if (!host) return eg__error(EG_ERR_OUT_OF_MEMORY, "all_reduce: out of host memory");
    cudaStream_t stream = eg__cuda_stream(d);
    cudaError_t e = cudaMemcpyAsync(host, eg__data(out), bytes, cudaMemcpyDeviceToHost, stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
    eg_status status = e == cudaSuccess ? EG_OK : eg__cuda_error(e, d->device, "all_reduce");
    int64_t handle = call->attrs->ints[0], tag = call->attrs->ints[1];
    if (status == EG_OK) status = eg__collective_start(handle, tag, host, out->n_elems, out->dtype);
    if (status == EG_OK) status = eg__collective_wait(handle, tag, host);
    if (status == EG_OK) {
        /* synchronous: pageable host memory is read before the copy returns */
        e = cudaMemcpy(eg__data(out), host, bytes, cudaMemcpyHostToDevice);
        if (e != cudaSuccess) status = eg__cuda_error(e, d->device, "all_reduce");
    }
    free(host);
    return status;
}

/* inputs (one float dtype, any shapes) -> (total,) packed in input order, summed. */
static eg_status cuda_all_reduce_start(const eg__kernel_call *call) {
    eg__cuda_device *d = eg__cuda_call_device(call);
    if (!d) return eg_last_status();
    char *out = eg__data(call->output);
    size_t size = eg__dtype_size(call->output->dtype);
    int64_t start = 0;
    for (int i = 0; i < call->n_inputs; i++) {
        const eg_tensor *part = call->inputs[i];
        if (part->n_elems) {
            eg_status status = eg__cuda_copy_dense(d, out + (size_t)start * size, part);
            if (status != EG_OK) return status;
        }
        start += part->n_elems;
    }
    eg_status status = eg__cuda_launched(call);
    if (status == EG_OK && call->attrs->ints[0] != 0)
        status = sum_through_host(d, call, call->output);
    return status;
}

/* x (total,), summed by its start -> (total,) the sum. */
static eg_status cuda_all_reduce_done(const eg__kernel_call *call) {
    eg__cuda_device *d = eg__cuda_call_device(call);
    if (!d) return eg_last_status();
    eg_status status = eg__cuda_copy_dense(d, eg__data(call->output), call->inputs[0]);
    return status == EG_OK ? eg__cuda_launched(call) : status;
}

/* x (any shape) -> x summed over the replicas. */
static eg_status cuda_all_reduce(const eg__kernel_call *call) {
    eg__cuda_device *d = eg__cuda_call_device(call);
    if (!d) return eg_last_status();
    eg_status status = eg__cuda_copy_dense(d, eg__data(call->output), call->inputs[0]);
    if (status == EG_OK) status = eg__cuda_launched(call);
    if (status == EG_OK && call->attrs->ints[0] != 0)
        status = sum_through_host(d, call, call->output);
    return status;
}

void eg__cuda_register_collectives(eg__cuda_kernel_table *table) {
    eg__cuda_register(table, EG__OP_ALL_REDUCE, cuda_all_reduce, EG__CUDA_FLOAT_DTYPES, true);
    eg__cuda_register(table, EG__OP_ALL_REDUCE_START, cuda_all_reduce_start, EG__CUDA_FLOAT_DTYPES,
                      true);
    eg__cuda_register(table, EG__OP_ALL_REDUCE_DONE, cuda_all_reduce_done, EG__CUDA_FLOAT_DTYPES,
                      true);
}
