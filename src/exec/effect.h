/* Internal: side effects the executors receive — here, optimizer updates.
 *
 * Eagerly, an optimizer applies its update at once through its device's update kernel
 * (backend.h: update_many). While a function is traced it hands the executor the update instead
 * (eg__graph_defer_update), with an eg__updater: the few things replay asks of the optimizer
 * (its step count, each variable's prepared step, its own path for gradients that need a cast or
 * a copy). Replay then applies each variable's update as soon as its gradient exists, through the
 * device's update_range kernel, never naming the optimizer. */
#ifndef EAGLE_SRC_EXEC_EFFECT_H
#define EAGLE_SRC_EXEC_EFFECT_H

#include "dispatch/dispatch.h"

/* One variable's update at one step: the step's scalars and the slots' data. */
typedef struct eg__update_step {
    eg_tensor *variable;
    eg__update_params params;
    void *slots[EG__UPDATE_MAX_SLOTS]; /* NULL where unused */
} eg__update_step;

typedef struct eg__updater {
    const char *(*name)(const void *optimizer);
    /* The optimizer's step count, and setting it (replay advances it once per traced step). */
    int64_t (*iterations)(const void *optimizer);
    eg_status (*set_iterations)(void *optimizer, int64_t iterations);
    /* Fills *step for `variable` at step `iteration`, creating its slots on first use. The pair
     * was checked when the update was traced. */
    eg_status (*prepare)(void *optimizer, eg_tensor *variable, int64_t iteration,
                         eg__update_step *step);
    /* The whole step now, at the optimizer's current step count, by its own path (one
     * multi-tensor update per device; gradients of another dtype, views and ones aliasing their
     * variable are converted first): what eager and lazy mode do, and what a replay does for a
     * variable whose gradient needs such a conversion. The pairs are checked. */
    eg_status (*apply)(void *optimizer, int n, eg_tensor *const *grads,
                       eg_tensor *const *variables);
} eg__updater;

/* Records an optimizer step while a function is traced: its updates run at every replay. The
 * caller checked the pairs. */
eg_status eg__graph_defer_update(const eg__updater *updater, void *optimizer, int n,
                                 eg_tensor *const *grads, eg_tensor *const *variables);

/* Elements [start, start + count) of step's variable, from count contiguous gradient elements
 * of its dtype. Safe from several threads on disjoint ranges. */
static inline void eg__update_step_range(const eg__update_step *step, int64_t start, int64_t count,
                                         const void *grad) {
    const eg_tensor *v = step->variable;
    eg__backend_of(v->device)->update_range(&step->params, v->dtype, eg__data(v), step->slots,
                                            start, count, grad);
}

#endif
