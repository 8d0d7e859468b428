/* Internal: the executors' entry point — what every op builder hands its call to.
 *
 * eg__execute checks the arguments and the devices, infers the result, then runs the op on the
 * thread's executor: eagerly (allocate on the inputs' device, launch through src/dispatch), or,
 * inside eg_lazy_begin/end and while a function is traced, records it (src/lazy). Observers
 * (src/exec/observer.h: the tape, the profiler) see it either way. */
#ifndef EAGLE_SRC_EXEC_EXECUTOR_H
#define EAGLE_SRC_EXEC_EXECUTOR_H

#include "ops/internal.h"

/* One op call: a new reference to its result, NULL with an error (a NULL input passes on
 * without a new error). */
eg_tensor *eg__execute(eg__op op, int n_inputs, const eg_tensor *const *inputs,
                       const eg__attrs *attrs);

#endif
