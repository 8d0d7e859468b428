/* The fused attention's builder (ops.def: attention): the op's result holds the output and the
 * rows' logsumexp (its backward's input) in one buffer; the output is handed out as a view. */
#include <math.h>
#include <string.h>

#include "api/internal.h"
#include "base/error.h"

eg_tensor *eg_scaled_dot_product_attention(const eg_tensor *q, const eg_tensor *k,
                                           const eg_tensor *v, const eg_tensor *key_mask,
                                           bool causal, double scale) {
    const char *name = "scaled_dot_product_attention";
    if (!eg__check_arg(q, name, 0) || !eg__check_arg(k, name, 1) || !eg__check_arg(v, name, 2) ||
        (key_mask && !eg__check_arg(key_mask, name, 3)))
        return NULL;
    if (!(scale >= 0) || !isfinite(scale)) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "%s: scale must be finite and >= 0, got %g", name,
                  scale);
        return NULL;
    }
    eg__attrs attrs;
    memset(&attrs, 0, sizeof attrs);
    attrs.scalars[0] = scale > 0                           ? scale
                       : q->n_dims == 4 && q->shape[3] > 0 ? 1.0 / sqrt((double)q->shape[3])
                                                           : 1.0;
    attrs.ints[0] = causal;
    const eg_tensor *in[4] = {q, k, v, key_mask};
    eg_tensor *flat = eg__execute(EG__OP_ATTENTION, key_mask ? 4 : 3, in, &attrs);
    if (!flat) return NULL;
    int64_t shape[4] = {q->shape[0], q->shape[1], q->shape[2], v->shape[3]};
    eg_tensor *part = eg_slice(flat, 0, 0, shape[0] * shape[1] * shape[2] * shape[3], 1);
    eg_release(flat);
    eg_tensor *out = part ? eg_reshape(part, 4, shape) : NULL;
    eg_release(part);
    return out;
}
