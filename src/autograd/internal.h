/* Internal: what the executors need from the tape. */
#ifndef EAGLE_SRC_AUTOGRAD_INTERNAL_H
#define EAGLE_SRC_AUTOGRAD_INTERNAL_H

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

#endif
