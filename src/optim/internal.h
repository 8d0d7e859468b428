/* Internal: what the files of src/optim share. */
#ifndef EAGLE_SRC_OPTIM_INTERNAL_H
#define EAGLE_SRC_OPTIM_INTERNAL_H

#include "eagle/optim.h"

/* NULL when the schedule is valid, else a short text saying what is wrong. */
const char *eg__schedule_problem(const eg_schedule *schedule);

/* Loss scaling (loss_scale.c), attached to an optimizer (optimizer.c owns the pointer). */
typedef struct eg__loss_scale eg__loss_scale;
eg__loss_scale *eg__optimizer_loss_scale(const eg_optimizer *optimizer);
/* Attaches ls (the optimizer owns it from here on). */
void eg__optimizer_attach_loss_scale(eg_optimizer *optimizer, eg__loss_scale *ls);
void eg__loss_scale_free(eg__loss_scale *ls);
/* The update now, pairs checked: what eager and lazy mode run (grads realized first). */
eg_status eg__optimizer_apply_now(eg_optimizer *optimizer, int n, eg_tensor *const *grads,
                                  eg_tensor *const *variables);
/* apply_gradients of a loss-scaled optimizer, pairs checked: one effect (now, or at every replay
 * of a traced function) that checks, unscales, updates or skips, and adjusts the scale. */
eg_status eg__loss_scale_apply(eg_optimizer *optimizer, int n, eg_tensor *const *grads,
                               eg_tensor *const *variables);

/* Whether the optimizer clips its gradients (optimizer.c). */
bool eg__optimizer_clips(const eg_optimizer *opt);
/* The gradients clipped as `clipping` says (clipping.c): a malloc'd array of n new references
 * (NULL where grads[i] is NULL), or NULL with an error naming `what`. */
eg_tensor **eg__clip_gradients(const eg_gradient_clipping *clipping, const char *what, int n,
                               eg_tensor *const *grads);

#endif
