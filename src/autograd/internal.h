/* Internal: what the executors need from the tape. */
#ifndef EAGLE_SRC_AUTOGRAD_INTERNAL_H
#define EAGLE_SRC_AUTOGRAD_INTERNAL_H

#include "base/idmap.h"
#include "eagle/autograd.h"
#include "ops/internal.h"

typedef struct eg__backward_call {
    eg__op op;
    int n_inputs;
    const eg_tensor *const *inputs;
    const eg_tensor *output;
    const eg_tensor *grad_output;
    const eg__attrs *attrs;
    const bool *needs_grad;  /* per input: whether its gradient is wanted */
    eg_tensor **grad_inputs; /* per input: set to a new reference, or left NULL (no gradient) */
} eg__backward_call;
typedef eg_status (*eg__backward_fn)(const eg__backward_call *call);

/* Each op's gradient rule, written with Eagle ops (src/autograd/backward.c), from ops.def's
 * backward column: eg__backward_none for ops flagged EG__OPF_NO_GRAD. */
#define EG_OP(ENUM, name, n_inputs, infer, backward, flags)                                        \
    eg_status eg__backward_##backward(const eg__backward_call *call);
#include "ops/ops.def"
#undef EG_OP
extern const eg__backward_fn eg__backward_rules[EG__OP_COUNT];

/* The innermost recording tape of this thread (tapes link to the next outer one). */
extern _Thread_local eg_tape *eg__recording_tapes;
extern _Thread_local int eg__no_grad_depth;

static inline bool eg__tapes_active(void) {
    return eg__recording_tapes != NULL && eg__no_grad_depth == 0;
}

/* Offers a just-executed op to every recording tape; each records it when one of the inputs is
 * tracked by that tape (watched, a variable, or produced by a recorded op). */
void eg__tape_record(eg__op op, int n_inputs, const eg_tensor *const *inputs,
                     const eg__attrs *attrs, eg_tensor *output);

/* Whether an op with these inputs would be recorded now (by a tape that is not paused): backward
 * rules use it to pick a fused no-grad kernel when nothing records their own computation. */
bool eg__tapes_would_record(int n_inputs, const eg_tensor *const *inputs);

/* ---- custom gradients (src/autograd/custom_gradient.c) ----
 * An eg_custom_gradient call's node: its callbacks, ctx and outputs, shared by its records. A tape
 * records a node as one record per output, in output order, each reading all the inputs: every
 * tape mechanism (tracking, reachability, dropping a used gradient) then treats it as ops. The
 * last output's record, which a backward pass meets first, runs the user's backward for all. */
typedef struct eg__custom_node eg__custom_node;
void eg__custom_node_retain(eg__custom_node *node);
/* Drops a reference; the last one calls the def's free_ctx and frees the node. NULL ignored. */
void eg__custom_node_release(eg__custom_node *node);
/* The backward rule of the node's record whose output is call->output (call->grad_output may be
 * NULL there): grads maps tensor ids to the gradients accumulated so far in this pass. */
eg_status eg__custom_backward(eg__custom_node *node, const eg__backward_call *call,
                              const eg__idmap *grads);
/* Records the node on every recording tape tracking one of the inputs (tape.c); each record
 * retains the node. An out-of-memory error is raised, not returned. */
void eg__tape_record_custom(eg__custom_node *node, int n_inputs, const eg_tensor *const *inputs,
                            int n_outputs, eg_tensor *const *outputs);

#endif
