/* Shapes and dtypes of the collective ops (ops.def: all_reduce, all_reduce_start/_done). They sum
 * in the tensor's own dtype, f32 or f64 only: a 16-bit sum over replicas would round at every
 * member, and mixed precision keeps its gradients in f32 anyway. */
#include <string.h>

#include "ops/internal.h"

static eg_status require_sum_dtype(eg__op op, const eg_tensor *t, int index) {
    if (t->dtype == EG_DTYPE_F32 || t->dtype == EG_DTYPE_F64) return EG_OK;
    return eg__op_error(op, EG_ERR_DTYPE, "input %d is %s; replicas sum f32 or f64 (cast first)",
                        index, eg_dtype_name(t->dtype));
}

eg_status eg__infer_all_reduce(eg__op op, int n_in, const eg_tensor *const *in,
                               const eg__attrs *attrs, eg__meta *meta) {
    (void)n_in;
    (void)attrs;
    if (require_sum_dtype(op, in[0], 0) != EG_OK) return eg_last_status();
    meta->dtype = in[0]->dtype;
    meta->n_dims = in[0]->n_dims;
    memcpy(meta->shape, in[0]->shape, sizeof meta->shape);
    return EG_OK;
}

eg_status eg__infer_all_reduce_start(eg__op op, int n_in, const eg_tensor *const *in,
                                     const eg__attrs *attrs, eg__meta *meta) {
    (void)attrs;
    if (n_in < 1) return eg__op_error(op, EG_ERR_INVALID_ARGUMENT, "no tensors to sum");
    int64_t total = 0;
    for (int i = 0; i < n_in; i++) {
        if (require_sum_dtype(op, in[i], i) != EG_OK) return eg_last_status();
        if (in[i]->dtype != in[0]->dtype)
            return eg__op_error(op, EG_ERR_DTYPE,
                                "inputs 0 and %d differ in dtype (%s, %s): one bucket holds one "
                                "dtype",
                                i, eg_dtype_name(in[0]->dtype), eg_dtype_name(in[i]->dtype));
        total += in[i]->n_elems;
    }
    meta->dtype = in[0]->dtype;
    meta->n_dims = 1;
    meta->shape[0] = total;
    return EG_OK;
}
