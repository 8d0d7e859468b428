/* Custom gradients (eg_custom_gradient): a forward run unrecorded and a node on the tapes whose
 * backward rule is the user's. How a tape holds the node: autograd/internal.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/internal.h"
#include "base/error.h"

struct eg__custom_node {
    atomic_int refcount;
    char name[64];
    eg_custom_backward_fn backward;
    void (*free_ctx)(void *ctx);
    void *ctx;
    int n_outputs;
    eg_tensor **outputs; /* retained: what the backward is shown */
};

void eg__custom_node_retain(eg__custom_node *node) {
    atomic_fetch_add(&node->refcount, 1);
}

void eg__custom_node_release(eg__custom_node *node) {
    if (!node || atomic_fetch_sub(&node->refcount, 1) != 1) return;
    for (int k = 0; k < node->n_outputs; k++) eg__unref(node->outputs[k]);
    free(node->outputs);
    if (node->free_ctx) node->free_ctx(node->ctx);
    free(node);
}

/* A callback failed with `status`: the error it left (an op's) or, when none, one naming it, as
 * "custom_gradient 'name': <callback>: <message>". */
static eg_status callback_error(const eg__custom_node *node, const char *callback,
                                eg_status status) {
    eg__saved_error saved;
    if (eg__error_pending()) {
        saved.status = eg_last_status();
        snprintf(saved.message, sizeof saved.message, "custom_gradient '%s': %s: %s", node->name,
                 callback, eg_last_error());
    } else {
        saved.status = status;
        snprintf(saved.message, sizeof saved.message,
                 "custom_gradient '%s': the %s returned '%s' without raising an error", node->name,
                 callback, eg_status_string(status));
    }
    eg_clear_error();
    eg__error_restore(&saved);
    return saved.status;
}

/* A tensor someone else holds too (refcount above the one reference handed to us): as an output
 * of the node it would get a second producer on the tapes. */
static bool shared_output(const eg_tensor *t, int n_inputs, const eg_tensor *const *inputs, int k,
                          eg_tensor *const *outputs) {
    if (atomic_load(&t->refcount) != 1) return true;
    for (int i = 0; i < n_inputs; i++)
        if (inputs[i] == t) return true;
    for (int j = 0; j < k; j++)
        if (outputs[j] == t) return true;
    return false;
}

static eg_status check_def(const eg_custom_gradient_def *def, int n_inputs,
                           const eg_tensor *const *inputs, int n_outputs, eg_tensor **outputs) {
    if (!def->forward || !def->backward)
        return eg__error(EG_ERR_NULL_ARGUMENT, "custom_gradient: the def's %s callback is NULL",
                         def->forward ? "backward" : "forward");
    if (n_inputs < 0 || n_outputs < 1)
        return eg__error(EG_ERR_INVALID_ARGUMENT,
                         "custom_gradient: %d inputs and %d outputs (want >= 0 and >= 1)", n_inputs,
                         n_outputs);
    if (!outputs || (n_inputs > 0 && !inputs))
        return eg__error(EG_ERR_NULL_ARGUMENT, "custom_gradient: the %s array is NULL",
                         outputs ? "inputs" : "outputs");
    for (int i = 0; i < n_inputs; i++)
        if (!eg__check_arg(inputs[i], "custom_gradient (input)", i)) return eg_last_status();
    return EG_OK;
}

/* Runs the forward unrecorded; on success every output is set and the node's alone. */
static eg_status run_forward(const eg_custom_gradient_def *def, eg__custom_node *node, int n_inputs,
                             const eg_tensor *const *inputs, int n_outputs, eg_tensor **outputs) {
    const char *file;
    int line;
    eg__callsite_get(&file, &line); /* the forward's own calls set theirs */
    eg_no_grad_begin();
    eg_status status =
        def->forward(n_inputs, eg__tensor_handles(inputs), n_outputs, outputs, node->ctx);
    if (status == EG_OK && eg__error_pending()) status = eg_last_status();
    eg_callsite_set(file, line);
    if (status != EG_OK) status = callback_error(node, "forward", status);
    for (int k = 0; k < n_outputs && status == EG_OK; k++) {
        eg_tensor *out = outputs[k];
        if (!out) {
            status = eg__error(EG_ERR_STATE,
                               "custom_gradient '%s': the forward returned EG_OK but left output "
                               "%d NULL",
                               node->name, k);
        } else if (shared_output(out, n_inputs, inputs, k, outputs)) {
            outputs[k] = eg_reshape(out, out->n_dims, out->shape);
            eg_release(out);
            if (!outputs[k]) status = eg_last_status();
        }
    }
    eg_no_grad_end();
    for (int k = 0; k < n_outputs && status != EG_OK; k++) {
        eg_release(outputs[k]);
        outputs[k] = NULL;
    }
    return status;
}

eg_status eg_custom_gradient(const eg_custom_gradient_def *def, void *ctx, int n_inputs,
                             eg_tensor *const *inputs_in, int n_outputs, eg_tensor **outputs) {
    const eg_tensor *const *inputs = eg__const_tensors(inputs_in);
    for (int k = 0; outputs && k < n_outputs; k++) outputs[k] = NULL;
    if (!def) return eg__error(EG_ERR_NULL_ARGUMENT, "custom_gradient: def is NULL");
    eg__custom_node *node = calloc(1, sizeof *node);
    if (!node) {
        if (def->free_ctx) def->free_ctx(ctx);
        return eg__error(EG_ERR_OUT_OF_MEMORY, "custom_gradient: out of host memory");
    }
    atomic_init(&node->refcount, 1); /* the call's own, dropped at its end */
    snprintf(node->name, sizeof node->name, "%s", def->name ? def->name : "custom_gradient");
    node->backward = def->backward;
    node->free_ctx = def->free_ctx;
    node->ctx = ctx;
    /* Success is judged by the error state (ops inside the forward): an earlier pending error
     * must not read as the forward's, and still wins at the end. */
    eg__saved_error earlier;
    eg__error_set_aside(&earlier);
    eg_status status = check_def(def, n_inputs, inputs, n_outputs, outputs);
    if (status == EG_OK) status = run_forward(def, node, n_inputs, inputs, n_outputs, outputs);
    if (status == EG_OK) {
        node->outputs = malloc((size_t)n_outputs * sizeof *node->outputs);
        if (!node->outputs) {
            status = eg__error(EG_ERR_OUT_OF_MEMORY, "custom_gradient: out of host memory");
        } else {
            node->n_outputs = n_outputs;
            for (int k = 0; k < n_outputs; k++) {
                node->outputs[k] = outputs[k];
                eg__ref(outputs[k]);
            }
            eg__tape_record_custom(node, n_inputs, inputs, n_outputs, outputs);
            if (eg__error_pending()) status = eg_last_status();
        }
        for (int k = 0; k < n_outputs && status != EG_OK; k++) {
            eg_release(outputs[k]);
            outputs[k] = NULL;
        }
    }
    eg__error_restore(&earlier);
    eg__custom_node_release(node);
    return status;
}

/* Checks what the user's backward wrote, keeping what the tape wants: a gradient of the wrong
 * shape, dtype or device is an error naming its input. */
static eg_status check_gradients(const eg__custom_node *node, const eg__backward_call *call) {
    for (int i = 0; i < call->n_inputs; i++) {
        const eg_tensor *g = call->grad_inputs[i], *x = call->inputs[i];
        if (!g) continue;
        char got[96], want[96];
        eg__shape_format(g->n_dims, g->shape, got, sizeof got);
        eg__shape_format(x->n_dims, x->shape, want, sizeof want);
        if (g->n_dims != x->n_dims ||
            memcmp(g->shape, x->shape, sizeof(int64_t) * (size_t)x->n_dims))
            return eg__error(EG_ERR_SHAPE,
                             "custom_gradient '%s': the backward's gradient for input %d has "
                             "shape %s, the input %s",
                             node->name, i, got, want);
        if (g->dtype != x->dtype)
            return eg__error(EG_ERR_DTYPE,
                             "custom_gradient '%s': the backward's gradient for input %d is %s, "
                             "the input %s",
                             node->name, i, eg_dtype_name(g->dtype), eg_dtype_name(x->dtype));
        if (g->device != x->device)
            return eg__error(EG_ERR_DEVICE,
                             "custom_gradient '%s': the backward's gradient for input %d is on "
                             "%s, the input on %s",
                             node->name, i, eg_device_name(g->device), eg_device_name(x->device));
    }
    for (int i = 0; i < call->n_inputs; i++) {
        if (call->needs_grad[i]) continue;
        eg_release(call->grad_inputs[i]);
        call->grad_inputs[i] = NULL;
    }
    return EG_OK;
}

eg_status eg__custom_backward(eg__custom_node *node, const eg__backward_call *call,
                              const eg__idmap *grads) {
    int n = node->n_outputs;
    if (call->output != node->outputs[n - 1]) return EG_OK; /* the last record did it all */
    eg_tensor *inline_grads[4] = {0}, **output_grads = inline_grads;
    if (n > 4 && !(output_grads = calloc((size_t)n, sizeof *output_grads)))
        return eg__error(EG_ERR_OUT_OF_MEMORY, "custom_gradient: out of host memory");
    bool reached = false, made[4] = {0}, *zeros = made; /* which output_grads are ours */
    if (n > 4 && !(zeros = calloc((size_t)n, sizeof *zeros))) {
        free(output_grads);
        return eg__error(EG_ERR_OUT_OF_MEMORY, "custom_gradient: out of host memory");
    }
    for (int k = 0; k < n; k++) {
        output_grads[k] = eg__idmap_get(grads, node->outputs[k]->id);
        reached |= output_grads[k] != NULL;
    }
    eg_status status = EG_OK;
    for (int k = 0; k < n && reached && status == EG_OK; k++) {
        if (output_grads[k]) continue;
        output_grads[k] = eg_full_like(node->outputs[k], 0.0);
        zeros[k] = output_grads[k] != NULL;
        if (!output_grads[k]) status = eg_last_status();
    }
    if (reached && status == EG_OK) {
        const char *file;
        int line;
        eg__callsite_get(&file, &line); /* the backward's own calls set theirs */
        status = node->backward(call->n_inputs, eg__tensor_handles(call->inputs), n, node->outputs,
                                output_grads, call->grad_inputs, node->ctx);
        if (status == EG_OK && eg__error_pending()) status = eg_last_status();
        eg_callsite_set(file, line);
        if (status != EG_OK)
            status = callback_error(node, "backward", status);
        else
            status = check_gradients(node, call);
        for (int i = 0; i < call->n_inputs && status != EG_OK; i++) {
            eg_release(call->grad_inputs[i]);
            call->grad_inputs[i] = NULL;
        }
    }
    for (int k = 0; k < n; k++)
        if (zeros[k]) eg_release(output_grads[k]);
    if (output_grads != inline_grads) {
        free(output_grads);
        free(zeros);
    }
    return status;
}
