/* Internal: the executor interface — eager, lazy and graph behind one set of entry points.
 *
 * Every op builder hands its call to eg__execute, which checks the arguments and the devices,
 * infers the result and gives the op to the thread's executor: eager computes it now (allocate
 * on the inputs' device, launch through src/dispatch); lazy (inside eg_lazy_begin/end) and
 * graph (while a function is traced) record it. Observers (exec/observer.h: the tape, the
 * profiler) see it either way. What an op call does besides making a tensor — an assign, an
 * optimizer step, a random draw — is an effect the executor receives and schedules: now (eager,
 * lazy) or at every replay (graph). (Random tensors made in core, eg_random_uniform and
 * friends, reach a traced function through core's random observer, which tracing sets.) */
#ifndef EAGLE_SRC_EXEC_EXECUTOR_H
#define EAGLE_SRC_EXEC_EXECUTOR_H

#include "exec/effect.h"

/* One op call: a new reference to its result, NULL with an error (a NULL input passes on
 * without a new error). */
eg_tensor *eg__execute(eg__op op, int n_inputs, const eg_tensor *const *inputs,
                       const eg__attrs *attrs);

/* An effect that runs later in a traced function: run(context) does it (reporting through its
 * status), free_context(context) drops the context once it will not run again; reads are the
 * tensors it reads, which a graph computes first. */
typedef struct eg__effect {
    eg_status (*run)(void *context);
    void (*free_context)(void *context);
    void *context;
    int n_reads;
    const eg_tensor *const *reads;
} eg__effect;

typedef struct eg__executor {
    const char *name; /* "eager", "lazy", "graph" */
    /* The result of an op whose arguments, devices and result (meta, on `device`) are checked:
     * computed (eager) or recorded with shape and no storage (lazy, graph). */
    eg_tensor *(*run)(eg__op op, int n_inputs, const eg_tensor *const *inputs,
                      const eg__attrs *attrs, const eg__meta *meta, const eg_device *device);
    /* Takes the effect (its context from here on): runs it now and frees the context, or keeps
     * it for every replay. */
    eg_status (*apply)(const eg__effect *effect);
    /* An optimizer step of checked pairs: now, through updater->apply, or at every replay, each
     * variable's update as soon as its gradient exists (exec/effect.h). */
    eg_status (*update)(const eg__updater *updater, void *optimizer, int n, eg_tensor *const *grads,
                        eg_tensor *const *variables);
    /* A random op's result t drew its seed from generator (NULL: the default one): nothing to do
     * now (eager, lazy); a traced function draws a fresh seed from it at every replay instead
     * of reusing the traced one. */
    void (*random_drawn)(eg_tensor *t, eg_generator *generator);
    /* Computes the tensors (NULL entries and realized ones are skipped). */
    eg_status (*realize)(int n, const eg_tensor *const *tensors);
} eg__executor;

extern const eg__executor eg__eager_executor, eg__lazy_executor, eg__graph_executor;

/* The calling thread's executor now. */
const eg__executor *eg__executor_current(void);

#endif
