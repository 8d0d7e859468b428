/* Internal: what the files of src/optim share. */
#ifndef EAGLE_SRC_OPTIM_INTERNAL_H
#define EAGLE_SRC_OPTIM_INTERNAL_H

#include "eagle/optim.h"

/* NULL when the schedule is valid, else a short text saying what is wrong. */
const char *eg__schedule_problem(const eg_schedule *schedule);

/* ---- graph mode: one step's update applied piecewise ----
 * A traced step applies each variable's update as soon as its gradient exists (and, for a
 * weight gradient made by a matmul, tile by tile as the matmul produces it), so gradients never
 * all live at once. Every update formula is elementwise, so pieces give the same bits. */
typedef struct eg__update_step {
    eg_optimizer *optimizer;
    eg_tensor *variable;
    int64_t iteration; /* the step's iteration count before its increment */
    double learning_rate;
    double alpha;   /* Adam's bias-corrected step size for this iteration */
    void *slots[3]; /* the variable's slot data (NULL where unused) */
} eg__update_step;
/* Prepares the update of `variable` for step `iteration` (creating its slots on first use). The
 * caller checked the pair (eg_optimizer_apply_gradients did when the step was traced). */
eg_status eg__optimizer_step_prepare(eg__update_step *step, eg_optimizer *optimizer,
                                     eg_tensor *variable, int64_t iteration);
/* Updates elements [start, start + count) of the variable with grad (count contiguous elements
 * of the variable's dtype). Safe from several threads on disjoint ranges; does not advance the
 * iteration count (eg_optimizer_set_iterations does, once per step). */
void eg__optimizer_step_range(const eg__update_step *step, int64_t start, int64_t count,
                              const void *grad);

/* Records a step while a function is traced (graph/function.c): its updates run at every replay,
 * each as soon as its gradient is ready. Checked by the caller. */
eg_status eg__graph_defer_update(eg_optimizer *optimizer, int n, eg_tensor *const *grads,
                                 eg_tensor *const *variables);

#endif
