/* copy and to_device on a GPU: a strided view made dense, and tensors moved between the host
 * and a GPU or between GPUs (the GPU side of the pair runs them, dispatch.h). */
#include <stdlib.h>

#include "backend/cuda/copy_launch.h"
#include "backend/cuda/kernels.h"
#include "base/error.h"

eg_status eg__cuda_copy_dense(eg__cuda_device *d, void *dst, const eg_tensor *x) {
    size_t size = eg__dtype_size(x->dtype);
    if (eg__is_contiguous(x)) {
        cudaError_t e = cudaMemcpyAsync(dst, eg__data(x), (size_t)x->n_elems * size,
                                        cudaMemcpyDeviceToDevice, eg__cuda_stream(d));
        return e == cudaSuccess ? EG_OK : eg__cuda_error(e, d->device, "copy");
    }
    eg__cuda_strided_copy(dst, (const char *)x->storage->data + x->offset * (int64_t)size, size,
                          x->n_dims, x->shape, x->strides, x->n_elems, eg__cuda_stream(d));
    return EG_OK;
}

static eg_status cuda_copy_kernel(const eg__kernel_call *call) {
    eg__cuda_device *d = eg__cuda_call_device(call);
    if (!d) return eg_last_status();
    const eg_tensor *x = call->inputs[0];
    /* Like the CPU's copy: x's elements in row-major order into a dense result of the same
     * count (a reshaping copy when the shapes differ). */
    if (x->n_elems != call->output->n_elems || !eg__is_contiguous(call->output))
        return eg__op_error(call->op, EG_ERR_INTERNAL,
                            "copy on %s: the result must be dense with the input's count",
                            d->device->name);
    eg_status status = eg__cuda_copy_dense(d, eg__data(call->output), x);
    return status == EG_OK ? eg__cuda_launched(call) : status;
}

static eg_status cuda_to_device(const eg__kernel_call *call) {
    eg__cuda_device *d = eg__cuda_call_device(call);
    if (!d) return eg_last_status();
    const eg_tensor *x = call->inputs[0];
    eg_tensor *out = call->output;
    size_t bytes = (size_t)x->n_elems * eg__dtype_size(x->dtype);
    eg_status status;
    if (x->device->host) { /* host -> GPU: a strided source is packed on the host first */
        const void *src = eg__data(x);
        char *packed = NULL;
        if (!eg__is_contiguous(x)) {
            if (!(packed = malloc(bytes ? bytes : 1)))
                return eg__error(EG_ERR_OUT_OF_MEMORY, "to_device: out of host memory");
            if (eg_tensor_copy_to_host(x, packed, bytes) != EG_OK) {
                free(packed);
                return eg_last_status();
            }
            src = packed;
        }
        /* cudaMemcpyAsync from pageable memory has read it all when it returns, and the
         * staged path copies it first: the buffer may go at once. */
        status = out->device->copy(out->device, eg__data(out), x->device, src, bytes, NULL);
        free(packed);
        return status == EG_OK ? eg__cuda_launched(call) : status;
    }
    eg__cuda_scratch scratch; /* a strided source is packed on its own GPU's stream */
    if (eg__cuda_enter(eg__cuda_of(x->device)) != EG_OK) return eg_last_status();
    const void *src = eg__cuda_contiguous(eg__cuda_of(x->device), x, &scratch);
    if (!src) return eg_last_status();
    status = x->device->copy(out->device, eg__data(out), x->device, src, bytes, NULL);
    eg__cuda_scratch_free(&scratch);
    return status == EG_OK ? eg__cuda_launched(call) : status;
}

void eg__cuda_register_copies(eg__cuda_kernel_table *table) {
    unsigned all = (1u << EG_DTYPE_COUNT) - 1u;
    eg__cuda_register(table, EG__OP_COPY, cuda_copy_kernel, all, true);
    /* views that must copy (the CPU's table has the same entries) */
    eg__cuda_register(table, EG__OP_RESHAPE, cuda_copy_kernel, all, true);
    eg__cuda_register(table, EG__OP_PERMUTE, cuda_copy_kernel, all, true);
    eg__cuda_register(table, EG__OP_SLICE, cuda_copy_kernel, all, true);
    eg__cuda_register(table, EG__OP_BROADCAST_TO, cuda_copy_kernel, all, true);
    eg__cuda_register(table, EG__OP_TO_DEVICE, cuda_to_device, all, true);
}
