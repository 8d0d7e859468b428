/* Internal: what the executors need from the tape. */
#ifndef EAGLE_SRC_AUTOGRAD_INTERNAL_H
#define EAGLE_SRC_AUTOGRAD_INTERNAL_H

#include "eagle/autograd.h"
#include "ops/internal.h"

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
