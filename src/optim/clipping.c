/* Keras' gradient clipping (eg_gradient_clipping) as ops before the update: clip_by_norm,
 * clip_by_global_norm, clip_by_value. A norm scales by c / max(norm, c), so gradients within the
 * limit keep their bits (the factor is exactly 1). */
#include <stdlib.h>

#include "base/error.h"
#include "core/tensor_internal.h"
#include "eagle/ops.h"
#include "optim/internal.h"

/* sum(g^2) as a 0-d f64 tensor (norms in f64 whatever the gradients' dtype). */
static eg_tensor *squared_norm(const eg_tensor *g) {
    eg_tensor *wide = eg_cast(g, EG_DTYPE_F64);
    eg_tensor *squares = wide ? eg_square(wide) : NULL;
    eg_tensor *sum = squares ? eg_sum(squares, 0, NULL, false) : NULL;
    eg_release(squares);
    eg_release(wide);
    return sum;
}

/* g * limit / max(norm, limit), in g's dtype. */
static eg_tensor *scaled_to(const eg_tensor *g, const eg_tensor *norm, double limit) {
    eg_tensor *bound = eg_scalar(EG_DTYPE_F64, limit);
    eg_tensor *denominator = bound ? eg_maximum(norm, bound) : NULL;
    eg_tensor *factor = denominator ? eg_div(bound, denominator) : NULL;
    eg_tensor *cast = factor ? eg_cast(factor, eg_tensor_dtype(g)) : NULL;
    eg_tensor *out = cast ? eg_mul(g, cast) : NULL;
    eg_release(cast);
    eg_release(factor);
    eg_release(denominator);
    eg_release(bound);
    return out;
}

/* One gradient clipped by its own norm (clipnorm) or by the value. */
static eg_tensor *clip_one(const eg_gradient_clipping *c, const eg_tensor *g) {
    if (c->clipvalue > 0) return eg_clip(g, -c->clipvalue, c->clipvalue);
    eg_tensor *squared = squared_norm(g);
    eg_tensor *norm = squared ? eg_sqrt(squared) : NULL;
    eg_tensor *out = norm ? scaled_to(g, norm, c->clipnorm) : NULL;
    eg_release(norm);
    eg_release(squared);
    return out;
}

/* The joint L2 norm of every non-NULL gradient (0-d f64). */
static eg_tensor *global_norm(int n, eg_tensor *const *grads) {
    eg_tensor *total = eg_scalar(EG_DTYPE_F64, 0.0);
    for (int i = 0; i < n && total; i++) {
        if (!grads[i]) continue;
        eg_tensor *squared = squared_norm(grads[i]);
        eg_tensor *sum = squared ? eg_add(total, squared) : NULL;
        eg_release(squared);
        eg_release(total);
        total = sum;
    }
    eg_tensor *norm = total ? eg_sqrt(total) : NULL;
    eg_release(total);
    return norm;
}

eg_tensor **eg__clip_gradients(const eg_gradient_clipping *c, const char *what, int n,
                               eg_tensor *const *grads) {
    eg_tensor **out = calloc((size_t)(n ? n : 1), sizeof *out);
    /* a row-sparse gradient (coalesced: each row once) is clipped through its values, whose
     * norm is the dense gradient's */
    eg_tensor **dense = calloc((size_t)(n ? n : 1), sizeof *dense);
    if (!out || !dense) {
        free(out);
        free(dense);
        eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory for the clipped gradients", what);
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        eg_tensor *values = eg_row_sparse_values(grads[i]);
        dense[i] = values ? values : grads[i];
    }
    eg_tensor *joint = c->global_clipnorm > 0 ? global_norm(n, dense) : NULL;
    bool ok = c->global_clipnorm <= 0 || joint;
    for (int i = 0; i < n && ok; i++) {
        if (!grads[i]) continue;
        out[i] = joint ? scaled_to(dense[i], joint, c->global_clipnorm) : clip_one(c, dense[i]);
        if (out[i] && dense[i] != grads[i]) {
            eg_tensor *sparse = eg__row_sparse_new(eg_row_sparse_indices(grads[i]), out[i],
                                                   grads[i]->n_dims, grads[i]->shape);
            eg_release(out[i]);
            out[i] = sparse;
        }
        ok = out[i] != NULL;
    }
    eg_release(joint);
    free(dense);
    if (ok) return out;
    for (int i = 0; i < n; i++) eg_release(out[i]);
    free(out);
    return NULL;
}
