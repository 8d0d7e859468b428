/* Backward rule of the fused attention (ops.def: attention). With no tape recording the
 * backward, one fused kernel (attention_backward) computes dq, dk and dv blockwise, never holding
 * the (Tq, Tk) probabilities. Under a recording tape (a gradient of a gradient) the same
 * gradient runs as differentiable ops, which do materialize them:
 *   P = softmax(scale q k^T, masked) (zero rows where nothing is visible), dv = P^T G,
 *   dS = P (G v^T - rowsum(G v^T P)), dq = scale dS k, dk = scale dS^T q.
 * Only the result's first part (the attention output) is differentiable: its second part, the
 * rows' logsumexp, is the backward's own input and never handed out. */
#include <math.h>

#include "api/internal.h"
#include "autograd/internal.h"
#include "autograd/rule_temps.h"
#include "base/error.h"
#include "eagle/device.h"

#define IN(i) (call->inputs[i])
#define GRAD  (call->grad_output)

/* A contiguous part [begin, begin + n) of a 1-d tensor as a view shaped like `like`. */
static eg_tensor *part_like(eg__rule_temps *t, const eg_tensor *flat, int64_t begin,
                            const eg_tensor *like) {
    eg_tensor *part = eg__rule_temp(t, eg_slice(flat, 0, begin, begin + like->n_elems, 1));
    return part ? eg_reshape(part, like->n_dims, like->shape) : NULL;
}

/* The attention output's gradient: the first part of the result's. */
static eg_tensor *output_grad(eg__rule_temps *t, const eg__backward_call *call) {
    const eg_tensor *q = IN(0), *v = IN(2);
    int64_t shape[4] = {q->shape[0], q->shape[1], q->shape[2], v->shape[3]};
    eg_tensor *part =
        eg__rule_temp(t, eg_slice(GRAD, 0, 0, shape[0] * shape[1] * shape[2] * shape[3], 1));
    return part ? eg__rule_temp(t, eg_reshape(part, 4, shape)) : NULL;
}

static eg_status attention_backward_fused(const eg__backward_call *call) {
    eg__rule_temps t = {0};
    eg_tensor *g = output_grad(&t, call);
    if (!g) return eg__rule_finish(&t, "attention");
    const eg_tensor *in[6] = {IN(0),        IN(1), IN(2),
                              call->output, g,     call->n_inputs > 3 ? IN(3) : NULL};
    eg_tensor *flat = eg__rule_temp(
        &t, eg__execute(EG__OP_ATTENTION_BACKWARD, call->n_inputs + 2, in, call->attrs));
    if (!flat) return eg__rule_finish(&t, "attention");
    int64_t offset = 0;
    for (int i = 0; i < 3; i++) {
        if (call->needs_grad[i]) call->grad_inputs[i] = part_like(&t, flat, offset, IN(i));
        offset += IN(i)->n_elems;
    }
    return eg__rule_finish(&t, "attention");
}

/* Which scores are visible, as the q dtype's 1 / 0, broadcasting to (B, N, Tq, Tk); NULL when
 * all are (no mask, not causal) or on failure (error raised). */
static eg_tensor *visible_scores(eg__rule_temps *t, const eg__backward_call *call, bool *all) {
    const eg_tensor *q = IN(0), *k = IN(1);
    eg_dtype dtype = q->dtype;
    *all = call->n_inputs < 4 && !call->attrs->ints[0];
    if (*all) return NULL;
    eg_tensor *visible = eg__rule_temp(t, eg__full_on(q->device, dtype, 0, NULL, 1.0));
    if (call->n_inputs > 3) {
        int64_t shape[4] = {k->shape[0], 1, 1, k->shape[2]};
        eg_tensor *keys =
            eg__rule_temp(t, eg_reshape(eg__rule_temp(t, eg_cast(IN(3), dtype)), 4, shape));
        visible = keys ? eg__rule_temp(t, eg_mul(visible, keys)) : NULL;
    }
    if (visible && call->attrs->ints[0]) {
        eg_device_scope_begin(q->device);
        eg_tensor *rows = eg__rule_temp(t, eg_arange(0, (double)q->shape[2], 1, dtype));
        eg_tensor *cols = eg__rule_temp(t, eg_arange(0, (double)k->shape[2], 1, dtype));
        eg_device_scope_end();
        eg_tensor *column =
            rows ? eg__rule_temp(t, eg_reshape(rows, 2, (const int64_t[]){q->shape[2], 1})) : NULL;
        eg_tensor *causal = column && cols ? eg__rule_temp(t, eg_less_equal(cols, column)) : NULL;
        eg_tensor *causal_f = causal ? eg__rule_temp(t, eg_cast(causal, dtype)) : NULL;
        visible = causal_f ? eg__rule_temp(t, eg_mul(visible, causal_f)) : NULL;
    }
    return visible;
}

eg_status eg__backward_attention(const eg__backward_call *call) {
    const eg_tensor *recorded[6] = {IN(0), IN(1),        IN(2),
                                    GRAD,  call->output, call->n_inputs > 3 ? IN(3) : NULL};
    if (!eg__tapes_would_record(call->n_inputs > 3 ? 6 : 5, recorded))
        return attention_backward_fused(call);
    eg__rule_temps t = {0};
    const eg_tensor *q = IN(0), *k = IN(1), *v = IN(2);
    double scale = call->attrs->scalars[0];
    bool all = false;
    eg_tensor *g = output_grad(&t, call);
    eg_tensor *visible = visible_scores(&t, call, &all);
    eg_tensor *s =
        eg__rule_temp(&t, eg_mul_scalar(eg__rule_temp(&t, eg_matmul_ex(q, k, false, true)), scale));
    if (!g || !s || (!all && !visible)) return eg__rule_finish(&t, "attention");
    eg_tensor *p;
    if (all) {
        p = eg__rule_temp(&t, eg_softmax(s, -1));
    } else {
        /* a large finite fill keeps all-hidden rows finite; they are zeroed after */
        eg_tensor *shown = eg__rule_temp(
            &t,
            eg_greater(visible, eg__rule_temp(&t, eg__full_on(q->device, q->dtype, 0, NULL, 0.5))));
        eg_tensor *hidden = eg__rule_temp(&t, eg__full_on(q->device, q->dtype, 0, NULL, -1e30));
        eg_tensor *masked = shown ? eg__rule_temp(&t, eg_where(shown, s, hidden)) : NULL;
        eg_tensor *any = eg__rule_temp(
            &t, eg_minimum(eg__rule_temp(&t, eg_sum(visible, 1, (const int[]){-1}, true)),
                           eg__rule_temp(&t, eg__full_on(q->device, q->dtype, 0, NULL, 1.0))));
        p = masked && any
                ? eg__rule_temp(&t, eg_mul(eg__rule_temp(&t, eg_softmax(masked, -1)), any))
                : NULL;
    }
    if (!p) return eg__rule_finish(&t, "attention");
    if (call->needs_grad[2]) call->grad_inputs[2] = eg_matmul_ex(p, g, true, false);
    if (call->needs_grad[0] || call->needs_grad[1]) {
        eg_tensor *dp = eg__rule_temp(&t, eg_matmul_ex(g, v, false, true));
        eg_tensor *row = dp ? eg__rule_temp(&t, eg_sum(eg__rule_temp(&t, eg_mul(dp, p)), 1,
                                                       (const int[]){-1}, true))
                            : NULL;
        eg_tensor *ds =
            row ? eg__rule_temp(
                      &t,
                      eg_mul_scalar(
                          eg__rule_temp(&t, eg_mul(p, eg__rule_temp(&t, eg_sub(dp, row)))), scale))
                : NULL;
        if (ds && call->needs_grad[0]) call->grad_inputs[0] = eg_matmul(ds, k);
        if (ds && call->needs_grad[1]) call->grad_inputs[1] = eg_matmul_ex(ds, q, true, false);
    }
    return eg__rule_finish(&t, "attention");
}
