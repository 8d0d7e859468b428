/* Shape and dtype inference for the fused attention (ops.def: attention, attention_backward).
 * f32 or f64, one dtype for q, k, v (and the gradient); the key mask is bool. */
#include <string.h>

#include "base/error.h"
#include "ops/internal.h"

static const char *shape_of(const eg_tensor *t, char *buf, size_t size) {
    return eg__shape_format(t->n_dims, t->shape, buf, size);
}

/* q (B, N, Tq, D), k (B, N, Tk, D), v (B, N, Tk, Dv) and the optional mask at in[mask_index]. */
static eg_status check_qkv(eg__op op, int n_in, const eg_tensor *const *in, int mask_index,
                           int n_float) {
    char a[96], b[96];
    for (int i = 0; i < n_float; i++) {
        if (in[i]->dtype != EG_DTYPE_F32 && in[i]->dtype != EG_DTYPE_F64)
            return eg__op_error(op, EG_ERR_DTYPE, "input %d must be f32 or f64, got %s", i,
                                eg_dtype_name(in[i]->dtype));
        if (in[i]->dtype != in[0]->dtype)
            return eg__op_error(op, EG_ERR_DTYPE, "input %d is %s, q %s: one dtype for all", i,
                                eg_dtype_name(in[i]->dtype), eg_dtype_name(in[0]->dtype));
    }
    const eg_tensor *q = in[0], *k = in[1], *v = in[2];
    if (q->n_dims != 4 || k->n_dims != 4 || v->n_dims != 4)
        return eg__op_error(op, EG_ERR_SHAPE,
                            "q, k and v must be (batch, heads, time, depth), got %s, %s and %s",
                            shape_of(q, a, sizeof a), shape_of(k, b, sizeof b),
                            v->n_dims == 4 ? "a 4-d v" : "another v");
    if (k->shape[0] != q->shape[0] || k->shape[1] != q->shape[1] || k->shape[3] != q->shape[3])
        return eg__op_error(op, EG_ERR_SHAPE, "k %s must match q %s in batch, heads and depth",
                            shape_of(k, a, sizeof a), shape_of(q, b, sizeof b));
    if (v->shape[0] != k->shape[0] || v->shape[1] != k->shape[1] || v->shape[2] != k->shape[2])
        return eg__op_error(op, EG_ERR_SHAPE, "v %s must match k %s in batch, heads and time",
                            shape_of(v, a, sizeof a), shape_of(k, b, sizeof b));
    if (n_in > mask_index) {
        const eg_tensor *m = in[mask_index];
        if (m->dtype != EG_DTYPE_BOOL || m->n_dims != 2 || m->shape[0] != q->shape[0] ||
            m->shape[1] != k->shape[2])
            return eg__op_error(op, EG_ERR_SHAPE,
                                "the key mask must be bool (%lld, %lld), got %s %s",
                                (long long)q->shape[0], (long long)k->shape[2],
                                eg_dtype_name(m->dtype), shape_of(m, a, sizeof a));
    }
    return EG_OK;
}

static int64_t out_elems(const eg_tensor *const *in) {
    const eg_tensor *q = in[0], *v = in[2];
    return q->shape[0] * q->shape[1] * q->shape[2] * v->shape[3];
}

static int64_t row_count(const eg_tensor *q) {
    return q->shape[0] * q->shape[1] * q->shape[2];
}

/* (q, k, v[, mask]) -> [out (B*N*Tq*Dv), logsumexp (B*N*Tq)] */
eg_status eg__infer_attention(eg__op op, int n_in, const eg_tensor *const *in,
                              const eg__attrs *attrs, eg__meta *meta) {
    (void)attrs;
    if (n_in != 3 && n_in != 4)
        return eg__op_error(op, EG_ERR_INVALID_ARGUMENT, "takes 3 or 4 inputs, got %d", n_in);
    if (check_qkv(op, n_in, in, 3, 3) != EG_OK) return eg_last_status();
    meta->dtype = in[0]->dtype;
    meta->n_dims = 1;
    meta->shape[0] = out_elems(in) + row_count(in[0]);
    return EG_OK;
}

/* (q, k, v, forward result, d out (B, N, Tq, Dv)[, mask]) -> [dq, dk, dv] */
eg_status eg__infer_attention_backward(eg__op op, int n_in, const eg_tensor *const *in,
                                       const eg__attrs *attrs, eg__meta *meta) {
    (void)attrs;
    if (n_in != 5 && n_in != 6)
        return eg__op_error(op, EG_ERR_INVALID_ARGUMENT, "takes 5 or 6 inputs, got %d", n_in);
    if (check_qkv(op, n_in, in, 5, 5) != EG_OK) return eg_last_status();
    const eg_tensor *fwd = in[3], *grad = in[4], *q = in[0], *v = in[2];
    if (fwd->n_dims != 1 || fwd->shape[0] != out_elems(in) + row_count(q))
        return eg__op_error(op, EG_ERR_SHAPE, "input 3 must be attention's 1-d result of %lld",
                            (long long)(out_elems(in) + row_count(q)));
    if (grad->n_dims != 4 || grad->shape[0] != q->shape[0] || grad->shape[1] != q->shape[1] ||
        grad->shape[2] != q->shape[2] || grad->shape[3] != v->shape[3]) {
        char a[96];
        return eg__op_error(op, EG_ERR_SHAPE,
                            "the gradient must be (%lld, %lld, %lld, %lld), got %s",
                            (long long)q->shape[0], (long long)q->shape[1], (long long)q->shape[2],
                            (long long)v->shape[3], shape_of(grad, a, sizeof a));
    }
    meta->dtype = q->dtype;
    meta->n_dims = 1;
    meta->shape[0] = q->n_elems + in[1]->n_elems + v->n_elems;
    return EG_OK;
}
